#!/bin/bash
# remote_capacity from the pool's quota and the running usage counters, on a
# real Ceph cluster with cephx (1 mon, 3 OSDs).  The pool gets a max_bytes
# quota of six chunks; a mount without remote_capacity, whose key has caps on
# its namespace only (mon 'allow r', osd 'allow rwx pool=kvfs namespace=q'),
# reads it and holds the namespace's chunk objects within the quota less a
# sixteenth.  Uploads within it go by the counters alone (no full read of
# the indexes, remote.index_reads stays 0); the counter in the index equals
# the bytes measured by listing the objects; uploads past it evict by least
# recent use, sampled every 20 ms: never above capacity + one object.  A
# counter removed by hand is set right by the next pass.  remote_capacity=none
# and =SIZE override the quota.
. "$(dirname "$0")/../lib.sh"
ldd "$KVFS" | grep -q librados || skip "kvfs was built without librados (librados-dev missing): remote tier not tested"
[ -f /usr/include/rados/librados.h ] || skip "librados headers missing (the pool sampler needs them)"
. "$KVFS_ROOT/tests/ceph/lib.sh"
export CEPHX=1
ceph_test_cluster
cc -O2 -o "$T/pool_usage" "$KVFS_ROOT/tests/ceph/pool_usage.c" -lrados || { echo "FAIL: cannot build the sampler"; exit 1; }
usage_now() { "$T/pool_usage" "$CEPH_CONF" kvfs q | cut -d' ' -f1; }
timeout 30 ceph auth get-or-create client.tenant-q mon 'allow r' osd 'allow rwx pool=kvfs namespace=q' \
    -o "$T/q.keyring" >/dev/null 2>&1
check "a cephx user with caps on namespace q only" test -s "$T/q.keyring"

for k in $(seq 1 10); do h[$k]=$(synth "$T/c$k.kv" --tokens 100 --layers 8 --seed $((k + 300))); done
L=$(stat -c %s "$T/c1.kv")
QUOTA=$((L * 6)); CAP=$((QUOTA - QUOTA / 16))
timeout 30 ceph osd pool set-quota kvfs max_bytes $QUOTA >/dev/null 2>&1
Q="$R,rados_id=tenant-q,rados_keyring=$T/q.keyring,rados_namespace=q,zstd=0,remote_list=-1"
mount_kvfs a "$Q" || exit 1
A=$T/a.mnt
got=$(remote "$A" 'r["capacity_from"], r["quota_bytes"], r["capacity"], repr(r["quota_error"])')
check "without remote_capacity the tenant's mount reads the quota: $got" test "$got" = "quota $QUOTA $CAP ''"
check "... and says so in its log" grep -q "quota max_bytes $QUOTA: remote_capacity $CAP" "$T/a.log"

"$T/pool_usage" "$CEPH_CONF" kvfs q "$T/stop" > "$T/sampled" & SAMPLER=$!
for k in 1 2 3 4 5; do cp "$T/c$k.kv" "$A/chunks/${h[$k]}.kv"; drained "$A" 20; sleep 0.3; done
M=$(timeout 20 rados -p kvfs -N q getxattr "${h[1]}" kvfs.model)
counter() { timeout 20 rados -p kvfs -N q getomapval "kvfs.model.$M" kvfs.usage "$T/counter" >/dev/null 2>&1 && cat "$T/counter"; }
u=$(usage_now)
check "five chunks within the quota's capacity: pool $u bytes, counter in the index $(counter)" test "$(counter)" = "$u"
check "... uploaded by the counters alone: index_reads $(remote "$A" 'r["index_reads"]'), usage_checks $(remote "$A" 'r["usage_checks"]')" \
    test "$(remote "$A" 'r["index_reads"] == 0 and r["usage_checks"] >= 1')" = True
for k in 6 7 8; do cp "$T/c$k.kv" "$A/chunks/${h[$k]}.kv"; drained "$A" 20; done
u=$(usage_now)
check "three more: the pool holds $u <= capacity $CAP, counter $(counter)" sh -c "[ $u -le $CAP ] && [ \"\$(cat '$T/counter')\" = $u ]"
check "... by evicting the oldest (evicted $(remote "$A" 'r["evicted"]'), full reads $(remote "$A" 'r["index_reads"]'))" \
    test "$(remote "$A" 'r["evicted"] >= 3 and r["index_reads"] >= 1')" = True
printf '%s\n' "${h[@]}" > "$T/hashes"
check "... c1 c2 c3 gone, c6 c7 c8 there" \
    sh -c "for k in 1 2 3; do ! timeout 20 rados -p kvfs -N q stat \$(sed -n \${k}p '$T/hashes') >/dev/null 2>&1 || exit 1; done;
           for k in 6 7 8; do timeout 20 rados -p kvfs -N q stat \$(sed -n \${k}p '$T/hashes') >/dev/null 2>&1 || exit 1; done"

# a counter lost (removed by hand): the next check finds it unknown, a full pass sets it
timeout 20 rados -p kvfs -N q rmomapkey "kvfs.model.$M" kvfs.usage
check "a counter removed by hand is set right within 12 s" \
    sh -c "for i in \$(seq 60); do timeout 20 rados -p kvfs -N q getomapval kvfs.model.$M kvfs.usage '$T/c2' >/dev/null 2>&1 && [ \"\$(cat '$T/c2')\" = $(usage_now) ] && exit 0; sleep 0.2; done; exit 1"
check "... and the log says so" grep -q "usage counter was absent, now $(usage_now) bytes" "$T/a.log"
touch "$T/stop"; wait $SAMPLER
read -r n max _ < "$T/sampled"
check "over the run ($n samples every 20 ms) the pool peaked at $max <= capacity $CAP + one object ($L)" \
    test "$max" -le $((CAP + L))

# remote_capacity=none and =SIZE override the quota
mount_kvfs b "$Q,remote_capacity=none" || exit 1
mount_kvfs c "$Q,remote_capacity=$((L * 2))" || exit 1
check "remote_capacity=none: $(remote "$T/b.mnt" 'r["capacity_from"], r["capacity"]')" \
    test "$(remote "$T/b.mnt" 'r["capacity_from"], r["capacity"]')" = "none 0"
check "remote_capacity=SIZE: $(remote "$T/c.mnt" 'r["capacity_from"], r["capacity"]')" \
    test "$(remote "$T/c.mnt" 'r["capacity_from"], r["capacity"]')" = "remote_capacity $((L * 2))"
out=$("$KVFS" -f -o "store=$T/d.store,$Q,remote_capacity=quotas" "$T/a.mnt" 2>&1)
check "a bad remote_capacity is refused: $out" sh -c "echo '$out' | grep -q remote_capacity"
finish
