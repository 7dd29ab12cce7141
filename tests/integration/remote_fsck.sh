#!/bin/bash
# kvfsctl remote fsck on a real Ceph cluster (1 mon, 3 OSDs): both kinds of
# disagreement between a namespace's objects and its indexes, made with the
# rados CLI: an object no index lists (as an upload that died between its
# object and its entry leaves) and an entry whose object is gone (removed by
# hand), plus a use key without its entry.  fsck reports them (exit 1) and
# changes nothing; --repair removes the stray object and the orphaned entry,
# its usage counted off the counter (which then equals the bytes measured by
# listing the objects); a second fsck is clean (exit 0); a stray object
# younger than --min-age is left unjudged (an upload writes the object first).
# Two hosts uploading at once, one without a capacity, keep the counter right.
. "$(dirname "$0")/../lib.sh"
ldd "$KVFS" | grep -q librados || skip "kvfs was built without librados (librados-dev missing): remote tier not tested"
[ -f /usr/include/rados/librados.h ] || skip "librados headers missing (the pool sampler needs them)"
. "$KVFS_ROOT/tests/ceph/lib.sh"
ceph_test_cluster
cc -O2 -o "$T/pool_usage" "$KVFS_ROOT/tests/ceph/pool_usage.c" -lrados || { echo "FAIL: cannot build the sampler"; exit 1; }
usage_now() { "$T/pool_usage" "$CEPH_CONF" kvfs f | cut -d' ' -f1; }
rf() { timeout 20 rados -p kvfs -N f "$@"; }

for k in $(seq 1 14); do h[$k]=$(synth "$T/c$k.kv" --tokens 60 --layers 4 --seed $((k + 500))); done
printf '%s\n' "${h[@]}" > "$T/hashes"
mount_kvfs a "$R,rados_namespace=f,remote_list=-1,remote_capacity=64M" || exit 1
A=$T/a.mnt
for k in 1 2 3 4; do cp "$T/c$k.kv" "$A/chunks/${h[$k]}.kv"; done
check "four chunks uploaded" drained "$A" 20
M=$(rf getxattr "${h[1]}" kvfs.model)
"$KVFSCTL" remote fsck "$A" > "$T/f0" 2>&1; rc=$?
check "a consistent pool: fsck exit $rc, $(tail -1 "$T/f0")" sh -c "[ $rc = 0 ] && grep -q '^4 objects, 4 index entries: 0 stray objects, 0 missing objects' '$T/f0'"

# the two kinds, and a stray use key, by hand
rf get "${h[1]}" "$T/o1"
rf put "${h[5]}" "$T/o1"                        # an object no index lists
rf rm "${h[2]}"                                 # an entry whose object is gone
rf setomapval "kvfs.model.$M" "${h[6]}.a" 1234  # a use without its entry
sleep 1.1
"$KVFSCTL" remote fsck --min-age 1 "$A" > "$T/f1" 2>&1; rc=$?
sed 's/^/  | /' "$T/f1"
check "fsck finds both (exit $rc)" \
    sh -c "[ $rc = 1 ] && grep -q '^stray-object  *${h[5]} .* no index lists it' '$T/f1' && grep -q '^missing-object ${h[2]} .*$M .*listed, gone' '$T/f1'"
check "... counts them and the stray use key" grep -q '^4 objects, 4 index entries: 1 stray objects, 1 missing objects, 0 repaired; 1 stray use/pin keys;' "$T/f1"
check "... and changes nothing" sh -c "rf() { timeout 20 rados -p kvfs -N f \"\$@\"; }; rf stat ${h[5]} >/dev/null && rf listomapkeys kvfs.model.$M | grep -qx ${h[2]}"
"$KVFSCTL" remote fsck --repair --min-age 1 "$A" > "$T/f2" 2>&1; rc=$?
sed 's/^/  | /' "$T/f2"
check "fsck --repair (exit $rc) removes the stray object and the orphaned entry" \
    sh -c "[ $rc = 0 ] && grep -q '^stray-object  *${h[5]} .* removed' '$T/f2' && grep -q '^missing-object ${h[2]} .* entry removed' '$T/f2' && grep -q ', 2 repaired; 1 stray use/pin keys removed' '$T/f2'"
check "... gone from the pool and the index, the use keys too" \
    sh -c "! timeout 20 rados -p kvfs -N f stat ${h[5]} 2>/dev/null && ! timeout 20 rados -p kvfs -N f listomapkeys kvfs.model.$M | grep -q -e ${h[2]} -e ${h[6]}"
rf getomapval "kvfs.model.$M" kvfs.usage "$T/cnt" >/dev/null
check "... the usage counter counts the three left: $(cat "$T/cnt") = $(usage_now) measured" test "$(cat "$T/cnt")" = "$(usage_now)"
"$KVFSCTL" remote fsck "$A" > "$T/f3" 2>&1; rc=$?
check "a second fsck is clean (exit $rc): $(tail -1 "$T/f3")" \
    sh -c "[ $rc = 0 ] && grep -q '^3 objects, 3 index entries: 0 stray objects, 0 missing objects' '$T/f3'"
mount_kvfs b "$R,rados_namespace=f,remote_list=-1" || exit 1
check "... and the chunks left read whole through a fresh host" \
    sh -c "for k in 1 3 4; do cmp '$T/c'\$k.kv '$T/b.mnt/chunks/'\$(sed -n \${k}p '$T/hashes').kv || exit 1; done"
# two hosts, one without a capacity (no evictor lock), upload at once, some
# chunks through both: every write to the index compares its generation, so
# the counter still equals the bytes
cps=()
for k in 7 8 9 10 11 12; do cp "$T/c$k.kv" "$A/incoming/" & cps+=($!); done
for k in 10 11 12 13 14; do cp "$T/c$k.kv" "$T/b.mnt/incoming/" & cps+=($!); done
wait "${cps[@]}" # not the daemons
both_drained() { drained "$A" 30 && drained "$T/b.mnt" 30; }
check "two hosts upload eight chunks at once (three through both)" both_drained
rf getomapval "kvfs.model.$M" kvfs.usage "$T/cnt" >/dev/null
check "... the counter equals the measured bytes: $(cat "$T/cnt") = $(usage_now) ($("$T/pool_usage" "$CEPH_CONF" kvfs f | cut -d' ' -f2) objects)" \
    test "$(cat "$T/cnt")" = "$(usage_now)" -a "$("$T/pool_usage" "$CEPH_CONF" kvfs f | cut -d' ' -f2)" = 11
# a stray object just written: an upload in flight, left alone
rf put "${h[6]}" "$T/o1"
"$KVFSCTL" remote fsck --repair "$A" > "$T/f4" 2>&1; rc=$?
check "a stray object younger than --min-age (60 s) is not judged, not removed (exit $rc)" \
    sh -c "[ $rc = 0 ] && grep -q '1 objects younger than 60 s not judged' '$T/f4' && timeout 20 rados -p kvfs -N f stat ${h[6]} >/dev/null"
out=$("$KVFSCTL" remote fsck "$A" "${h[1]}" 2>&1); rc=$?
check "fsck takes no hashes (exit $rc)" test $rc = 2
finish
