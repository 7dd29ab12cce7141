#!/bin/bash
# Tenants sharing one pool, kept apart by RADOS namespaces and Ceph's own
# access control, on a real cluster with cephx on (1 mon, 3 OSDs).  Two
# cephx users with caps on their namespace only (osd 'allow rw pool=kvfs
# namespace=a' / b); three mounts with separate stores: two hosts of tenant a
# (rados_namespace=a with a's key) and one of tenant b.  A chunk written on
# a's first host is in namespace a only, is read byte-identical by a's second
# host and is neither listed nor readable through b's mount; b's key cannot
# read it with rados either.  A mount with a key whose caps do not cover its
# namespace says so and keeps its writes queued; a store that served one
# namespace is refused for another (its chunks would reach the other tenant).
. "$(dirname "$0")/../lib.sh"
ldd "$KVFS" | grep -q librados || skip "kvfs was built without librados (librados-dev missing): remote tier not tested"
. "$KVFS_ROOT/tests/ceph/lib.sh"
export CEPHX=1
ceph_test_cluster
for t in a b; do
    timeout 30 ceph auth get-or-create "client.tenant-$t" mon 'allow r' osd "allow rw pool=kvfs namespace=$t" \
        -o "$T/$t.keyring" >/dev/null 2>&1
done
check "cephx users with caps on one namespace each" test -s "$T/a.keyring" -a -s "$T/b.keyring"
as() { echo "rados=kvfs,ceph_conf=$CEPH_CONF,rados_timeout=3,remote_list=1,rados_id=tenant-$1,rados_keyring=$T/$1.keyring,rados_namespace=$2"; }
mount_kvfs a1 "$(as a a)" || exit 1
mount_kvfs a2 "$(as a a)" || exit 1
PID_A2=$MNT_PID
mount_kvfs b1 "$(as b b)" || exit 1
A1=$T/a1.mnt; A2=$T/a2.mnt; B1=$T/b1.mnt
check "all three connected: $(remote "$A1" 'r["state"]') $(remote "$A2" 'r["state"]') $(remote "$B1" 'r["state"]')" \
    test "$(remote "$A1" 'r["state"]') $(remote "$A2" 'r["state"]') $(remote "$B1" 'r["state"]')" = "connected connected connected"
check ".kvfs/stats names the namespace" test "$(remote "$A1" 'r["namespace"]')" = a

h=$(synth "$T/c1.kv" --tokens 200 --layers 8 --seed 11)
check "cp into tenant a's first host" cp "$T/c1.kv" "$A1/chunks/$h.kv"
check "its upload queue drains" drained "$A1" 20
check "the object is in namespace a" timeout 20 rados -p kvfs -N a stat "$h"
check "... and not in the default namespace" sh -c "! timeout 20 rados -p kvfs stat '$h' 2>/dev/null"
check "... nor in namespace b" sh -c "! timeout 20 rados -p kvfs -N b stat '$h' 2>/dev/null"
check "a's omap index is in namespace a too" \
    sh -c "timeout 20 rados -p kvfs -N a ls | grep -q '^kvfs.model.' && ! timeout 20 rados -p kvfs ls | grep -q '^kvfs.model.'"
check "tenant a's second host reads it byte-identical" cmp "$T/c1.kv" "$A2/chunks/$h.kv"
check "... fetched from the pool" test "$(remote "$A2" 'r["fetched"]')" -ge 1
sleep 2.5 # two listing refreshes (remote_list=1) of b's mount
check "tenant b's mount does not list it" sh -c "! ls '$B1/chunks' | grep -q '$h'"
check "... cannot read it (no such chunk)" sh -c "! cat '$B1/chunks/$h.kv' > /dev/null 2>&1"
check "... and fetched nothing" test "$(remote "$B1" 'r["fetched"]')" -eq 0
out=$(timeout 20 rados --id tenant-b --keyring "$T/b.keyring" -p kvfs -N a get "$h" "$T/stolen" 2>&1)
check "b's key cannot read namespace a with rados either: $out" \
    sh -c "! test -s '$T/stolen' && echo '$out' | grep -q 'not permitted'"
out=$(timeout 20 rados --id tenant-a --keyring "$T/a.keyring" -p kvfs -N b put x "$T/c1.kv" 2>&1)
check "a's key cannot write into namespace b: $out" sh -c "echo '$out' | grep -q 'not permitted'"

# b's own chunk stays b's
h2=$(synth "$T/c2.kv" --tokens 120 --layers 8 --seed 12)
cp "$T/c2.kv" "$B1/chunks/$h2.kv"
check "b's chunk is uploaded into namespace b" sh -c "for i in \$(seq 100); do timeout 20 rados -p kvfs -N b stat '$h2' >/dev/null 2>&1 && exit 0; sleep 0.2; done; exit 1"
check "... and a's hosts do not see it" sh -c "sleep 2.5; ! ls '$A2/chunks' | grep -q '$h2' && ! cat '$A2/chunks/$h2.kv' >/dev/null 2>&1"

# a key whose caps do not cover the namespace: said once, writes kept queued
mount_kvfs x "$(as a b)" || exit 1
X=$T/x.mnt
check "a mount with a's key on namespace b is not connected: $(remote "$X" 'r["state"]')" \
    test "$(remote "$X" 'r["state"]')" != connected
check "... and says why: $(remote "$X" 'r["last_error"]')" \
    sh -c "python3 -c \"import json,sys; e=json.load(open('$X/.kvfs/stats'))['remote']['last_error']; sys.exit(0 if 'may not use pool kvfs namespace b' in e and 'caps' in e else 1)\""
h3=$(synth "$T/c3.kv" --tokens 100 --layers 8 --seed 13)
cp "$T/c3.kv" "$X/chunks/$h3.kv"
sleep 1
check "... its chunk is served locally and stays queued" \
    sh -c "cmp -s '$T/c3.kv' '$X/chunks/$h3.kv' && [ \$(python3 -c \"import json; print(json.load(open('$X/.kvfs/stats'))['remote']['queued'])\") -ge 1 ]"
check "... and is not in the pool" sh -c "! timeout 20 rados -p kvfs -N b stat '$h3' 2>/dev/null"

# remote_capacity takes the evictor lock (the lock object class): 'allow rw'
# caps do not reach it, and the mount says so with its uploads queued;
# 'allow rwx' on the namespace does
mount_kvfs y "$(as a a),remote_capacity=64M" || exit 1
Y=$T/y.mnt
h4=$(synth "$T/c4.kv" --tokens 90 --layers 8 --seed 14)
cp "$T/c4.kv" "$Y/chunks/$h4.kv"
check "remote_capacity with rw caps only: uploads wait and say why" \
    sh -c "for i in \$(seq 50); do python3 -c \"import json,sys; r=json.load(open('$Y/.kvfs/stats'))['remote']; sys.exit(0 if 'lock class' in r['last_error'] and r['queued'] >= 1 else 1)\" && exit 0; sleep 0.2; done; exit 1"
timeout 30 ceph auth get-or-create client.tenant-c mon 'allow r' osd 'allow rwx pool=kvfs namespace=c' \
    -o "$T/c.keyring" >/dev/null 2>&1
mount_kvfs z "$(as c c),remote_capacity=64M" || exit 1
cp "$T/c4.kv" "$T/z.mnt/chunks/$h4.kv"
check "... with rwx caps on the namespace it uploads: $(remote "$T/z.mnt" 'r["last_error"]')" drained "$T/z.mnt" 20
check "... into namespace c, counted in its usage" \
    sh -c "timeout 20 rados -p kvfs -N c stat '$h4' >/dev/null && [ \$(python3 -c \"import json; print(json.load(open('$T/z.mnt/.kvfs/stats'))['remote']['usage'] > 0)\") = True ]"

# claims take a lease (the lock object class too): with rw caps a claim
# fails and says why (kvfsctl prefill would compute anyway); rwx claims
hc=$(echo claim | sha256sum | cut -d' ' -f1)
check "a claim with rw caps only fails naming the lock class" \
    sh -c "! '$KVFSCTL' claim -M '$Y' '$hc' 2> '$T/claim.err' && grep -q 'lock class' '$T/claim.err'"
check "... with rwx caps it is the caller's, fleet-wide" sh -c "'$KVFSCTL' claim -M '$T/z.mnt' '$hc' | grep -q '^yours fleet'"

# a store keeps its namespace
fusermount3 -u "$T/a2.mnt"; wait "$PID_A2" 2>/dev/null
"$KVFS" -f -o "store=$T/a2.store,$(as a b)" "$T/a2.mnt" > "$T/a2.again.log" 2>&1 &
p=$!
for _ in $(seq 200); do kill -0 $p 2>/dev/null || break; sleep 0.1; done
if kill -0 $p 2>/dev/null; then kill $p; fusermount3 -u "$T/a2.mnt" 2>/dev/null; wait $p; rc=0; else wait $p; rc=$?; fi
check "a's store mounted for namespace b is refused (exit $rc)" test $rc -ne 0
check "... naming the namespace it belongs to" grep -q "belong to pool kvfs, namespace 'a'" "$T/a2.again.log"
check "rados_namespace with a character RADOS tools would mangle is refused" \
    sh -c "mkdir -p '$T/bad.mnt'; ! timeout 30 '$KVFS' -f -o 'store=$T/bad.store,rados=kvfs,ceph_conf=$CEPH_CONF,rados_namespace=a/b' '$T/bad.mnt' > '$T/bad.log' 2>&1 && grep -q 'a namespace is 1-64 of' '$T/bad.log'"
finish
