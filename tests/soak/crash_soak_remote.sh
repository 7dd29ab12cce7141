#!/bin/bash
# Crash soak of remote-tier uploads (issue 19, `make soak`): a real Ceph
# cluster (tests/ceph/cluster.sh) and two mounts with their own stores.  In
# each of ITERS rounds chunks are copied into mount A, whose uploads to the
# pool are queued, and A is killed with SIGKILL at a random moment 0.05-1.0 s
# in.  After the remount A's queue must drain, and every chunk A holds must
# then read byte-identical through mount B, which has only the pool: an
# upload cut by a kill is redone, never lost and never left torn in the
# pool.  fsck of A's store after each round.
# Usage: tests/soak/crash_soak_remote.sh [ITERS]   (default 30)
. "$(dirname "$0")/../lib.sh"
ITERS=${1:-30}
ldd "$KVFS" | grep -q librados || skip "kvfs was built without librados"
. "$KVFS_ROOT/tests/ceph/lib.sh"
ceph_test_cluster
declare -A SRC
N=40
for i in $(seq 1 $N); do
    h=$(synth "$T/s$i.kv" --layers 8 --kv-heads 2 --tokens $((100 + i * 37)) --seed $((3100 + i)))
    SRC[$h]=$T/s$i.kv
done
mount_kvfs b "$R,remote_list=-1" || exit 1
B=$T/b.mnt
A=$T/a.mnt
bad_rounds=0 checked=0 t0=$EPOCHREALTIME
for it in $(seq 1 "$ITERS"); do
    mount_kvfs a "$R" || { fail "round $it: mount"; break; }
    ( for i in $(shuf -i 1-$N -n 8); do cp "$T/s$i.kv" "$A/incoming/" 2>/dev/null; done ) &
    w=$!
    sleep "$(awk -v r=$RANDOM 'BEGIN{printf "%.2f", 0.05 + 0.95 * r / 32767}')"
    kill -9 "$MNT_PID"
    wait "$w" 2>/dev/null
    fusermount3 -uz "$A" 2>/dev/null
    wait "$MNT_PID" 2>/dev/null
    mount_kvfs a "$R" || { fail "round $it: remount after the kill"; break; }
    drain=ok; drained "$A" 60 || drain=FAIL
    n=0 wrong=0
    for f in "$A"/chunks/*.kv; do
        [ -e "$f" ] || continue
        h=$(basename "$f" .kv)
        n=$((n + 1))
        cmp -s "$f" "${SRC[$h]:-/dev/null}" || { wrong=$((wrong + 1)); echo "round $it: A's chunk $h differs"; }
        cmp -s "$B/chunks/$h.kv" "${SRC[$h]:-/dev/null}" || { wrong=$((wrong + 1)); echo "round $it: $h through B (the pool) differs or is missing"; }
    done
    checked=$((checked + n))
    unmount_kvfs a
    fsck=ok; "$KVFSCTL" fsck "$T/a.store" > "$T/fsck.$it" 2>&1 || fsck=FAIL
    echo "round $it: $n chunks in A, $wrong wrong or missing through the pool, queue drained: $drain, fsck: $fsck"
    if [ "$wrong" -ne 0 ] || [ $drain != ok ] || [ $fsck != ok ]; then
        bad_rounds=$((bad_rounds + 1)); fail "round $it"; cat "$T/fsck.$it"
    fi
done
secs=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.0f", b-a}')
echo "remote crash soak: $ITERS rounds in $secs s, $checked chunk checks through the pool, $bad_rounds bad rounds"
finish
