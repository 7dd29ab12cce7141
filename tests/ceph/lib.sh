# Shared by the tests that need a real Ceph cluster (remote_tier.sh,
# crash_soak_remote.sh); sourced after tests/lib.sh, or alone by bench/.
#   ceph_test_cluster: a 1-mon, 3-OSD bluestore cluster in $T/ceph, its
#     monitor on $MONPORT or else on a free pair of ports below the
#     ephemeral range (free_port, tests/ports.sh; fixed ports there were taken
#     now and then by some client's socket), stopped at exit; skips (77) when Ceph
#     cannot be installed; sets CL, CEPH_CONF and R (the mount's rados=
#     options, 3 s timeout).
#   remote MOUNT EXPR: EXPR over the mount's .kvfs/stats "remote" object r.
#   drained MOUNT SECONDS: waits until the upload queue is empty and the
#     tier connected; says where it stood when it is not.
#   ceph_bench_cluster NAME (for bench/, which sources only this file): a
#     1-mon, 3-OSD bluestore cluster in $CL on $MONPORT (else free_port's), OSD files of
#     BLUESTORE_BYTES (16 GiB sparse by default), pool kvfs at size 1 (room
#     for a million small objects); sets CEPH_CONF; "NAME bench: ...
#     skipped" and exit 0 where Ceph cannot be had.  Run from the
#     repository root; the caller's exit trap stops it.
#   ceph_bench_teardown (the benchmarks' exit trap): unmounts every
#     $T/*/mnt, waits for their daemons, stops the cluster in $CL and
#     removes $T.
declare -F free_port > /dev/null || . "$(dirname "${BASH_SOURCE[0]}")/../ports.sh"

ceph_test_cluster() {
    CL=$T/ceph
    [ -n "${MONPORT:-}" ] || MONPORT=$(free_port 2) || { echo "FAIL: no free port pair for the monitor"; exit 1; }
    export MONPORT
    local out rc
    out=$("$KVFS_ROOT/tests/ceph/cluster.sh" start "$CL" bluestore 3 2>&1); rc=$?
    [ $rc -eq 77 ] && skip "$(echo "$out" | grep skip)"
    [ $rc -eq 0 ] || { echo "$out"; echo "FAIL: cannot start a test cluster"; exit 1; }
    trap '"$KVFS_ROOT/tests/ceph/cluster.sh" stop "$CL" >/dev/null 2>&1; cleanup' EXIT
    export CEPH_CONF=$CL/ceph.conf
    R="rados=kvfs,ceph_conf=$CEPH_CONF,rados_timeout=3"
}

remote() { python3 -c "import json,sys; r=json.load(open(sys.argv[1]+'/.kvfs/stats'))['remote']; print($2)" "$1"; }

drained() {
    local st
    for _ in $(seq $(($2 * 5))); do
        st=$(remote "$1" 'r["state"], r["queued"]')
        [ "$st" = "connected 0" ] && return 0
        sleep 0.2
    done
    echo "  (state, queued) of $1 after $2 s: $st; $(remote "$1" 'r["last_error"]')"
    return 1
}

ceph_bench_cluster() {
    local out rc=0
    [ -n "${MONPORT:-}" ] || MONPORT=$(free_port 2) || exit 1
    export MONPORT
    out=$(BLUESTORE_BYTES=${BLUESTORE_BYTES:-$((16 << 30))} tests/ceph/cluster.sh start "$CL" bluestore 3 2>&1) || rc=$?
    [ $rc = 77 ] && { echo "$1 bench: $(echo "$out" | grep skip); skipped" >&2; exit 0; }
    [ $rc = 0 ] || { echo "$out" >&2; exit 1; }
    export CEPH_CONF=$CL/ceph.conf
    ceph config set global mon_allow_pool_size_one true
    ceph osd pool set kvfs size 1 --yes-i-really-mean-it >&2
}

ceph_bench_teardown() {
    local m
    for m in "$T"/*/mnt; do mountpoint -q "$m" && fusermount3 -u "$m"; done
    wait 2>/dev/null
    tests/ceph/cluster.sh stop "$CL" >/dev/null 2>&1 || true
    rm -rf "$T"
}
