#!/bin/bash
# Several tenants' namespaces in one pool, each with a capacity of its own,
# on a real Ceph cluster (1 mon, 3 OSDs).  A namespace's usage is the sum of
# its own indexes (each namespace has its index objects, usage counters and
# evictor lock), so tenant A filling its namespace past its capacity evicts
# only A's chunks: B's are all still there.  A's chunk bytes, measured by
# listing the objects, are sampled every 20 ms: never above A's capacity +
# one object; A ends within its capacity; each namespace's counters equal
# its measured bytes; a fresh host of B reads B's chunks byte for byte.  A
# host refreshing its listing every second skips the unchanged index (its
# generation did not move) and follows a change at the next refresh.
. "$(dirname "$0")/../lib.sh"
ldd "$KVFS" | grep -q librados || skip "kvfs was built without librados (librados-dev missing): remote tier not tested"
[ -f /usr/include/rados/librados.h ] || skip "librados headers missing (the pool sampler needs them)"
. "$KVFS_ROOT/tests/ceph/lib.sh"
ceph_test_cluster
cc -O2 -o "$T/pool_usage" "$KVFS_ROOT/tests/ceph/pool_usage.c" -lrados || { echo "FAIL: cannot build the sampler"; exit 1; }
usage_of() { "$T/pool_usage" "$CEPH_CONF" kvfs "$1" | cut -d' ' -f1; }
count_of() { "$T/pool_usage" "$CEPH_CONF" kvfs "$1" | cut -d' ' -f2; }
# the namespace's usage counters, summed over its model indexes
counters() {
    local sum=0 m
    for m in $(timeout 20 rados -p kvfs -N "$1" listomapkeys kvfs.models); do
        timeout 20 rados -p kvfs -N "$1" getomapval "kvfs.model.$m" kvfs.usage "$T/cnt" >/dev/null 2>&1 || return 1
        sum=$((sum + $(cat "$T/cnt")))
    done
    echo $sum
}

for k in $(seq 1 9); do h[$k]=$(synth "$T/c$k.kv" --tokens 100 --layers 8 --seed $((k + 400))); done
L=$(stat -c %s "$T/c1.kv")
CAP_A=$((L * 7 / 2)); CAP_B=$((L * 5 / 2))
mount_kvfs a "$R,rados_namespace=tenant-a,zstd=0,remote_list=1,remote_capacity=$CAP_A" || exit 1
mount_kvfs b "$R,rados_namespace=tenant-b,zstd=0,remote_list=1,remote_capacity=$CAP_B" || exit 1
mount_kvfs b2 "$R,rados_namespace=tenant-b,remote_list=1" || exit 1
A=$T/a.mnt; B=$T/b.mnt; B2=$T/b2.mnt
check "two mounts, two namespaces, capacities $(remote "$A" 'r["capacity"]') and $(remote "$B" 'r["capacity"]')" \
    test "$(remote "$A" 'r["namespace"], r["capacity"]') $(remote "$B" 'r["namespace"], r["capacity"]')" = "tenant-a $CAP_A tenant-b $CAP_B"

# B: two chunks, within its capacity
for k in 1 2; do cp "$T/c$k.kv" "$B/chunks/${h[$k]}.kv"; done
check "B's two chunks are uploaded" drained "$B" 20
UB=$(usage_of tenant-b)
check "B holds $UB bytes, its counters $(counters tenant-b)" test "$(counters tenant-b)" = "$UB"

# A: seven chunks, twice its capacity, one at a time
"$T/pool_usage" "$CEPH_CONF" kvfs tenant-a "$T/stop" > "$T/sampled" & SAMPLER=$!
for k in 3 4 5 6 7 8 9; do cp "$T/c$k.kv" "$A/chunks/${h[$k]}.kv"; drained "$A" 20; done
touch "$T/stop"; wait $SAMPLER
read -r n max _ < "$T/sampled"
UA=$(usage_of tenant-a)
check "A filled past its capacity evicted its own: $(remote "$A" 'r["evicted"]') evicted, $(count_of tenant-a) objects, $UA <= $CAP_A bytes" \
    test "$UA" -le "$CAP_A" -a "$(remote "$A" 'r["evicted"]')" -ge 4
check "... sampled $n times every 20 ms, A peaked at $max <= its capacity + one object" test "$max" -le $((CAP_A + L))
check "... A's counters equal its bytes ($(counters tenant-a))" test "$(counters tenant-a)" = "$UA"
check "B's chunks are all still in the pool" \
    sh -c "for k in ${h[1]} ${h[2]}; do timeout 20 rados -p kvfs -N tenant-b stat \$k >/dev/null || exit 1; done"
mount_kvfs c "$R,rados_namespace=tenant-b,remote_list=-1" || exit 1
check "... and a fresh host of tenant B reads them byte for byte from the pool" \
    sh -c "cmp '$T/c1.kv' '$T/c.mnt/chunks/${h[1]}.kv' && cmp '$T/c2.kv' '$T/c.mnt/chunks/${h[2]}.kv' && [ \$(python3 -c \"import json; print(json.load(open('$T/c.mnt/.kvfs/stats'))['remote']['fetched'])\") = 2 ]"
check "... B's usage and counters unchanged ($(usage_of tenant-b) = $UB), B evicted nothing" \
    test "$(usage_of tenant-b) $(counters tenant-b) $(remote "$B" 'r["evicted"]')" = "$UB $UB 0"
check "each namespace has its own evictor lock and index objects" \
    sh -c "timeout 20 rados -p kvfs -N tenant-a ls | grep -q '^kvfs.evictor$' && timeout 20 rados -p kvfs -N tenant-b ls | grep -q '^kvfs.models$' && ! timeout 20 rados -p kvfs ls | grep -q '^kvfs'"

# B's second host refreshes its listing every second: an unchanged index is
# skipped (its generation has not moved), a changed one read again
check "B's second host lists B's two chunks; refreshes since skipped the unchanged index: $(remote "$B2" 'r["listed"], r["listing_models_read"], r["listing_models_skipped"]')" \
    test "$(remote "$B2" 'r["listed"] == 2 and r["listing_models_skipped"] >= 1')" = True
cp "$T/c3.kv" "$B/chunks/${h[3]}.kv"
check "B uploads a third chunk (evicting its oldest, c1)" drained "$B" 20
check "... B's second host's next refresh shows c3 and not c1" \
    sh -c "for i in \$(seq 50); do ls '$B2/chunks' > '$T/b2.ls'; grep -q ${h[3]} '$T/b2.ls' && ! grep -q ${h[1]} '$T/b2.ls' && grep -q ${h[2]} '$T/b2.ls' && exit 0; sleep 0.1; done; exit 1"
finish
