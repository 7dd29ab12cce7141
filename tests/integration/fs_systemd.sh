#!/bin/bash
# kvfs as systemd and mount.fuse3 run it (kvfs(8) FSTAB, SYSTEMD):
# readiness through NOTIFY_SOCKET (a socket of ours standing in for systemd's)
# only once the mount answers, STOPPING=1 and an unmount on SIGTERM, the
# journal's "<N>" lines, "kvfs SOURCE MOUNTPOINT -o ..." as mount.fuse3
# passes an fstab line, bad arguments refused, and the unit files checked by
# systemd-analyze verify.
. "$(dirname "$0")/../lib.sh"
command -v python3 >/dev/null || skip "python3 missing"
LISTEN=$KVFS_ROOT/tests/integration/notify_listen.py

# start_notified NAME [kvfs args...]: kvfs -f under a notify socket; sets
# NPID (the daemon) and LPID (the listener), messages in $T/NAME.notify
start_notified() {
    local name=$1; shift
    rm -f "$T/$name.sock" "$T/$name.notify" "$T/$name.notify.bound"
    mkdir -p "$T/$name.mnt" "$T/$name.store"
    python3 "$LISTEN" "$T/$name.sock" "$T/$name.mnt" "$T/$name.notify" &
    LPID=$!
    for _ in $(seq 100); do [ -e "$T/$name.notify.bound" ] && break; sleep 0.05; done
    NOTIFY_SOCKET=$T/$name.sock "$KVFS" -f "$@" >>"$T/$name.log" 2>&1 &
    NPID=$!
    PIDS+=("$NPID")
}
wait_line() { # wait_line FILE PATTERN: up to 30 s
    for _ in $(seq 300); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
    return 1
}
# bad DESCRIPTION EXPECTED_RC MESSAGE_PATTERN ARGS...: kvfs ARGS fails with a
# clear error and exit status 2 (usage) or 1, nothing mounted on $BAD_MNT
BAD_MNT=$T/s.mnt
bad() {
    local d=$1 want=$2 pat=$3; shift 3
    "$KVFS" "$@" >"$T/bad.out" 2>&1; local rc=$?
    if [ "$rc" -eq "$want" ] && grep -q -- "$pat" "$T/bad.out" && ! grep -q " $BAD_MNT " /proc/mounts; then
        ok "$d"
    else
        fail "$d (rc $rc, wanted $want): $(cat "$T/bad.out")"
        fusermount3 -u "$BAD_MNT" 2>/dev/null
    fi
}

# readiness and a clean stop
start_notified a -o "store=$T/a.store" "$T/a.mnt"
MOUNTS+=("$T/a.mnt")
check "READY=1 arrives" wait_line "$T/a.notify" "READY=1"
check "READY=1 from the daemon itself (NotifyAccess=main)" grep -q "^pid=$NPID READY=1" "$T/a.notify"
check "at READY=1 the mount is listed and answers stat" grep -q "READY=1.* | mounted=1 answers=1" "$T/a.notify"
check "READY=1 once" test "$(grep -c 'READY=1' "$T/a.notify")" -eq 1
h=$(synth "$T/one.kv" --layers 4 --tokens 64)
check "the ready mount takes a chunk" cp "$T/one.kv" "$T/a.mnt/chunks/$h.kv"
kill -TERM "$NPID"
check "SIGTERM: STOPPING=1" wait_line "$T/a.notify" "^pid=$NPID STOPPING=1"
wait "$NPID"; rc=$?
check "SIGTERM: the daemon exits 0 ($rc)" test "$rc" -eq 0
check "SIGTERM: unmounted" sh -c "! grep -q ' $T/a.mnt ' /proc/mounts"
wait "$LPID"
check "the log says it unmounted" grep -q "unmounting" "$T/a.log"

# a store that cannot open: no READY=1, a failure
: > "$T/notadir"
start_notified b -o "store=$T/notadir/x" "$T/b.mnt"
wait "$NPID"; rc=$?
check "a store that cannot open: exit 1 ($rc)" test "$rc" -eq 1
kill "$LPID" 2>/dev/null; wait "$LPID" 2>/dev/null
check "... and no READY=1" sh -c "! grep -q READY=1 '$T/b.notify'"
check "... nothing mounted" sh -c "! grep -q ' $T/b.mnt ' /proc/mounts"

# under the journal (JOURNAL_STREAM names stderr): "<N>" priorities, no time
mkdir -p "$T/j.mnt" "$T/j.store"
: > "$T/j.log"
JOURNAL_STREAM=$(stat -c %d:%i "$T/j.log") "$KVFS" -f -o "store=$T/j.store" "$T/j.mnt" >>"$T/j.log" 2>&1 &
JPID=$!
PIDS+=("$JPID")
check "journal: the mount comes up" wait_line "$T/j.log" "mounted"
check "journal: <6> lines without a timestamp" grep -q "^<6>mounted $T/j.store on $T/j.mnt" "$T/j.log"
kill -TERM "$JPID"; wait "$JPID"
check "journal: <6>unmounting" grep -q "^<6>unmounting" "$T/j.log"

# SOURCE MOUNTPOINT, as mount.fuse3 runs an fstab line (it adds dev,suid,rw)
mkdir -p "$T/s.mnt" "$T/s.store"
check "kvfs STORE MOUNTPOINT -o rw,dev,suid,ram=64M mounts" "$KVFS" "$T/s.store" "$T/s.mnt" -o rw,nodev,nosuid,ram=64M
MOUNTS+=("$T/s.mnt")
check "/proc/mounts: the source is the store, the type fuse.kvfs" grep -q "^$T/s.store $T/s.mnt fuse.kvfs " /proc/mounts
check "the source is the store: the chunk copied before is not in it" test -z "$(ls "$T/s.mnt/chunks")"
check "cp into the source's store" cp "$T/one.kv" "$T/s.mnt/chunks/$h.kv"
check "cmp it back" cmp "$T/one.kv" "$T/s.mnt/chunks/$h.kv"
fusermount3 -u "$T/s.mnt"
check "the store directory holds it after the unmount" sh -c "ls -R '$T/s.store' | grep -q '$h'"
for _ in $(seq 50); do pgrep -f "$KVFS $T/s.store" >/dev/null || break; sleep 0.1; done
# kvfs(8)'s options in one fstab-style -o list (all but those of a model or a
# Ceph cluster: model=, rados=, ceph_conf=, rados_id=, rados_keyring=,
# rados_namespace=, remote_capacity=)
mkdir -p "$T/o.mnt"
check "kvfs(8)'s options in -o form mount" "$KVFS" "$T/o.store" "$T/o.mnt" -o \
    rw,nodev,nosuid,store=$T/o.store,capacity=1G,ram=64M,zstd=3,max_ingest=1G,backend=cpu,min_ratio=0.2,blend_jobs=3,blend_cache=100M,sim_read_bw=1G,rados_timeout=4,remote_list=-1,remote_lease=20,passthrough=off,llama_streams=2,kv_quant=q8,verbose
MOUNTS+=("$T/o.mnt")
check "... and serve" sh -c "cp '$T/one.kv' '$T/o.mnt/incoming/' && ls '$T/o.mnt/chunks' | grep -q ."
fusermount3 -u "$T/o.mnt"

# a relative source: the daemon leaves its directory, the store path must not
mkdir -p "$T/r.mnt"
check "kvfs r.store r.mnt from \$T (relative paths) mounts" sh -c "cd '$T' && '$KVFS' r.store r.mnt -o ram=0 2>/dev/null"
MOUNTS+=("$T/r.mnt")
check "... a chunk is stored in \$T/r.store, read back" \
    sh -c "cp '$T/one.kv' '$T/r.mnt/chunks/$h.kv' && cmp '$T/one.kv' '$T/r.mnt/chunks/$h.kv' && test -d '$T/r.store/objects'"
fusermount3 -u "$T/r.mnt"
check "kvfs none MOUNTPOINT -o store=DIR mounts" "$KVFS" none "$T/s.mnt" -o "store=$T/s.store"
check "/proc/mounts: source none" grep -q "^none $T/s.mnt fuse.kvfs " /proc/mounts
check "... the chunk is there" cmp "$T/one.kv" "$T/s.mnt/chunks/$h.kv"
mkdir -p "$T/s2.mnt"
spid=$(pgrep -f -- "$KVFS none $T/s.mnt" | head -1)
BAD_MNT=$T/s2.mnt bad "a second daemon on the store: refused after 10 s (its lock)" 1 \
    "store $T/s.store is in use by another kvfs (pid ${spid:-?})" "$T/s.store" "$T/s2.mnt"
check "... the first still serves" cmp "$T/one.kv" "$T/s.mnt/chunks/$h.kv"
fusermount3 -u "$T/s.mnt"
for _ in $(seq 50); do pgrep -f "$KVFS none $T/s.mnt" >/dev/null || break; sleep 0.1; done

bad "source and store= naming two stores" 2 "name two stores" "$T/s.store" "$T/s.mnt" -o "store=$T/other"
bad "a third word" 2 "unexpected argument 'extra'" "$T/s.store" "$T/s.mnt" extra
bad "an unknown -o option" 1 "unknown option(s): .-o bogus=1'" "$T/s.store" "$T/s.mnt" -o ram=64M,bogus=1
bad "a bad value in -o form" 2 "invalid ram" "$T/s.store" "$T/s.mnt" -o ram=lots

# the units, as `make install-systemd` writes them, pass systemd-analyze verify
if command -v systemd-analyze >/dev/null; then
    make -s -C "$KVFS_ROOT" install-systemd DESTDIR="$T/inst" PREFIX=/usr BINDIR="$BUILD" >/dev/null
    u=$T/inst/lib/systemd/system
    cp "$u/kvfs@.service" "$u/kvfs@mnt-kvfs.service" # a template verifies as an instance
    sed -i "s|^EnvironmentFile=/etc|EnvironmentFile=$T/inst/etc|" "$u/kvfs-serve.service"
    if systemd-analyze verify --man=no "$u/kvfs@mnt-kvfs.service" "$u/kvfs-serve.service" >"$T/verify.out" 2>&1; then
        ok "systemd-analyze verify: the units"
    else
        fail "systemd-analyze verify: $(cat "$T/verify.out")"
    fi
else
    echo "skip part: systemd-analyze missing (the units are not verified)"
fi
finish
