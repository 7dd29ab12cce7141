#!/bin/bash
# The fleet listing follows a model index through its change log, on a real
# Ceph cluster (1 mon, 3 OSDs).  Host A uploads and evicts; host B refreshes
# its listing every second.  B's listing shows A's new chunk once and drops
# the evicted one by reading only the index's change keys after the
# generation it had (remote.listing_models_logged and listing_changes move,
# listing_models_read, B's whole-index reads, does not); its usage follows,
# and so does its count of pins when A pins a chunk.
# A's log keeps its last 4 changes (remote_changes=4): with B stopped
# (SIGSTOP) while A makes 6, the change B needs next is trimmed away and B
# reads the index whole once; so it does after a write of a host that keeps
# no log (remote_changes=-1, as a kvfs before the log).  The log holds 4
# keys, fsck reports none of them, and with KVFS_OLD (a kvfs before the log,
# e.g. main's build) an older host lists exactly the chunks.
. "$(dirname "$0")/../lib.sh"
ldd "$KVFS" | grep -q librados || skip "kvfs was built without librados (librados-dev missing): remote tier not tested"
[ -f /usr/include/rados/librados.h ] || skip "librados headers missing (the pool sampler needs them)"
. "$KVFS_ROOT/tests/ceph/lib.sh"
ceph_test_cluster
rl() { timeout 20 rados -p kvfs -N l "$@"; }
# the namespace's usage counters, summed over its model indexes
counters() {
    local sum=0 m
    for m in $(rl listomapkeys kvfs.models); do
        rl getomapval "kvfs.model.$m" kvfs.usage "$T/cnt" >/dev/null 2>&1 || return 1
        sum=$((sum + $(cat "$T/cnt")))
    done
    echo $sum
}
# B's listing is exactly the chunks named (each once), and nothing else
lists_exactly() {
    local want
    want=$(printf '%s.kv\n' "$@" | sort)
    for _ in $(seq 100); do
        [ "$(ls "$B/chunks" | sort)" = "$want" ] && return 0
        sleep 0.1
    done
    echo "  B lists: $(ls "$B/chunks" | tr '\n' ' ')"
    return 1
}

for k in $(seq 1 10); do h[$k]=$(synth "$T/c$k.kv" --tokens 60 --layers 4 --seed $((k + 700))); done
mount_kvfs a "$R,rados_namespace=l,remote_list=-1,remote_changes=4" || exit 1
A=$T/a.mnt
mount_kvfs b "$R,rados_namespace=l,remote_list=1" || exit 1
B=$T/b.mnt; BPID=$MNT_PID
for k in 1 2 3; do cp "$T/c$k.kv" "$A/chunks/${h[$k]}.kv"; done
check "A uploads three chunks" drained "$A" 20
check "B lists them" lists_exactly "${h[1]}" "${h[2]}" "${h[3]}"
M=$(rl getxattr "${h[1]}" kvfs.model)
sleep 1.5 # a refresh after the last upload: the generation B has is the index's
read -r full0 logged0 changes0 <<< "$(remote "$B" 'r["listing_models_read"], r["listing_models_logged"], r["listing_changes"]')"

# an add and a removal, read from the log
cp "$T/c4.kv" "$A/chunks/${h[4]}.kv"
check "A uploads a fourth chunk" drained "$A" 20
check "A evicts the first" "$KVFSCTL" remote evict "$A" "${h[1]}"
check "B's listing then shows the fourth once and not the first" lists_exactly "${h[2]}" "${h[3]}" "${h[4]}"
read -r full1 logged1 changes1 <<< "$(remote "$B" 'r["listing_models_read"], r["listing_models_logged"], r["listing_changes"]')"
check "... from the change log: whole reads $full0 -> $full1, from the log $logged0 -> $logged1, changes applied $changes0 -> $changes1" \
    test "$full1 $((logged1 > logged0)) $((changes1 - changes0))" = "$full0 1 2"
check "... B's usage $(remote "$B" 'r["usage"]') is the index's counter $(counters), its count of chunks $(remote "$B" 'r["listed"]')" \
    test "$(remote "$B" 'r["usage"], r["listed"]')" = "$(counters) 3"
check "the index's log holds its change keys" test "$(rl listomapkeys "kvfs.model.$M" | grep -c '^kvfs\.chg\.')" = 4

# a pin is a change too: B counts it without reading the index whole
check "A pins the third" "$KVFSCTL" remote pin "$A" "${h[3]}"
check "B's stats count the pin" \
    sh -c "for i in \$(seq 50); do [ \"\$(python3 -c \"import json; print(json.load(open('$B/.kvfs/stats'))['remote']['pinned'])\")\" = 1 ] && exit 0; sleep 0.1; done; exit 1"
read -r full1b logged1b changes1b <<< "$(remote "$B" 'r["listing_models_read"], r["listing_models_logged"], r["listing_changes"]')"
check "... from the change log: whole reads $full1 -> $full1b, changes applied $changes1 -> $changes1b" \
    test "$full1b $((changes1b - changes1))" = "$full1 1"
full1=$full1b; logged1=$logged1b

# B stopped while A makes six changes: the log keeps 4, B's next is gone
kill -STOP "$BPID"
for k in 5 6 7 8 9; do cp "$T/c$k.kv" "$A/chunks/${h[$k]}.kv"; drained "$A" 20; done
"$KVFSCTL" remote evict "$A" "${h[2]}" >/dev/null
rl getomapval "kvfs.model.$M" kvfs.gen "$T/gen" >/dev/null 2>&1; gen=$(cat "$T/gen")
check "the log is trimmed to the last 4 changes (generation $gen)" \
    test "$(rl listomapkeys "kvfs.model.$M" | grep '^kvfs\.chg\.' | tr '\n' ' ')" = \
        "$(for g in $((gen - 3)) $((gen - 2)) $((gen - 1)) $gen; do printf 'kvfs.chg.%016x ' $g; done)"
kill -CONT "$BPID"
check "B, continued, lists A's chunks" lists_exactly "${h[3]}" "${h[4]}" "${h[5]}" "${h[6]}" "${h[7]}" "${h[8]}" "${h[9]}"
read -r full2 logged2 <<< "$(remote "$B" 'r["listing_models_read"], r["listing_models_logged"]')"
check "... by reading the index whole: whole reads $full1 -> $full2, from the log $logged1 -> $logged2" \
    test "$((full2 > full1))" = 1
check "... B's usage $(remote "$B" 'r["usage"]') is the index's counter $(counters)" test "$(remote "$B" 'r["usage"]')" = "$(counters)"

# a host that keeps no log (as a kvfs before it): a gap, a whole read
sleep 1.5
read -r full2 logged2 <<< "$(remote "$B" 'r["listing_models_read"], r["listing_models_logged"]')"
mount_kvfs n "$R,rados_namespace=l,remote_list=-1,remote_changes=-1" || exit 1
cp "$T/c10.kv" "$T/n.mnt/chunks/${h[10]}.kv"
check "a host without a log uploads a chunk" drained "$T/n.mnt" 20
check "B lists it" lists_exactly "${h[3]}" "${h[4]}" "${h[5]}" "${h[6]}" "${h[7]}" "${h[8]}" "${h[9]}" "${h[10]}"
read -r full3 logged3 <<< "$(remote "$B" 'r["listing_models_read"], r["listing_models_logged"]')"
check "... by reading the index whole: whole reads $full2 -> $full3, from the log $logged2 -> $logged3" \
    test "$((full3 - full2)) $logged3" = "1 $logged2"

"$KVFSCTL" remote fsck "$A" > "$T/fsck" 2>&1; rc=$?
check "fsck: a consistent pool, the change keys no strays (exit $rc: $(cat "$T/fsck"))" \
    sh -c "[ $rc = 0 ] && grep -q '^8 objects, 8 index entries: 0 stray objects, 0 missing objects, 0 repaired; 0 stray use/pin keys' '$T/fsck'"
if [ -n "${KVFS_OLD:-}" ] && [ -x "$KVFS_OLD" ]; then
    KVFS=$KVFS_OLD mount_kvfs old "$R,rados_namespace=l,remote_list=1" || exit 1
    check "an older kvfs ($KVFS_OLD) lists exactly the 8 chunks" \
        sh -c "for i in \$(seq 100); do [ \"\$(ls '$T/old.mnt/chunks' | sort)\" = \"\$(ls '$B/chunks' | sort)\" ] && [ \$(ls '$T/old.mnt/chunks' | wc -l) = 8 ] && exit 0; sleep 0.1; done; exit 1"
fi
finish
