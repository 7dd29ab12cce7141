#!/bin/bash
# remote_capacity on a real Ceph cluster (1 mon, 3 OSDs): two hosts (mounts
# with their own stores) share namespace "ev" of pool kvfs, sized for five
# chunks.  The pool's chunk bytes, measured by listing and stat-ing the
# objects (tests/ceph/pool_usage.c, not kvfs's indexes), are sampled every
# 20 ms through the whole run: never above capacity + one object.  Chunks
# read on host B (their use recorded in the indexes in batches) outlive the
# ones nobody read; a chunk pinned through host A survives B's evictions;
# kvfsctl remote lists sizes, uses and pins, pins, unpins and evicts; a host
# whose listing still shows an evicted chunk reads it as a clean miss
# (ENOENT) and stores nothing; uploads from both hosts at once stay within;
# a lock left by a dead host lapses and uploads resume; a host without
# remote_capacity overfills the pool and the others' listing passes evict back.
. "$(dirname "$0")/../lib.sh"
ldd "$KVFS" | grep -q librados || skip "kvfs was built without librados (librados-dev missing): remote tier not tested"
[ -f /usr/include/rados/librados.h ] || skip "librados headers missing (the pool sampler needs them)"
. "$KVFS_ROOT/tests/ceph/lib.sh"
ceph_test_cluster
cc -O2 -o "$T/pool_usage" "$KVFS_ROOT/tests/ceph/pool_usage.c" -lrados || { echo "FAIL: cannot build the sampler"; exit 1; }
usage_now() { "$T/pool_usage" "$CEPH_CONF" kvfs ev | cut -d' ' -f1; }

# 16 chunks of one size (zstd=0: the object is the chunk); capacity: 5.5 of them
for k in $(seq 1 16); do h[$k]=$(synth "$T/c$k.kv" --tokens 100 --layers 8 --seed $((k + 100))); done
L=$(stat -c %s "$T/c1.kv")
CAP=$((L * 11 / 2))
O="$R,rados_namespace=ev,zstd=0,remote_list=1,remote_capacity=$CAP"
mount_kvfs a "$O" || exit 1
mount_kvfs b "$O" || exit 1
A=$T/a.mnt; B=$T/b.mnt
check "both hosts connected, capacity $CAP ($(remote "$A" 'r["capacity"]'))" \
    test "$(remote "$A" 'r["state"], r["capacity"]') $(remote "$B" 'r["state"]')" = "connected $CAP connected"

"$T/pool_usage" "$CEPH_CONF" kvfs ev "$T/stop" > "$T/sampled" & SAMPLER=$!
worst=0
put() { # put MOUNT K: ingest chunk K, wait for the upload, sample the pool
    cp "$T/c$2.kv" "$1/chunks/${h[$2]}.kv" && drained "$1" 20 || return 1
    local u; u=$(usage_now); [ "$u" -gt "$worst" ] && worst=$u
    echo "  after c$2 through $(basename "$1" .mnt): pool $u bytes"
}
in_pool() { timeout 20 rados -p kvfs -N ev stat "${h[$1]}" >/dev/null 2>&1; }
all_in() { for k in "$@"; do in_pool "$k" || return 1; done; }
none_in() { for k in "$@"; do ! in_pool "$k" || return 1; done; }
size_of() { timeout 20 rados -p kvfs -N ev stat "${h[$1]}" | sed 's/.*size //'; }

# five chunks through A: the pool is full
for k in 1 2 3 4 5; do put "$A" $k; sleep 0.3; done # distinct upload times
S=$(size_of 1)
check "five chunks through A, all in the pool (object $S bytes, capacity $CAP)" \
    all_in 1 2 3 4 5
check "the index records each object's size: usage $(remote "$A" 'r["usage"]') = 5 x $S" \
    sh -c "sleep 1.5; [ \$(python3 -c \"import json; print(json.load(open('$A/.kvfs/stats'))['remote']['usage'])\") -eq $((5 * S)) ]"

# B reads c1 and c2 (fetched from the pool: uses recorded, flushed in a batch)
sleep 1
check "B reads c1 and c2 from the pool" sh -c "cmp -s '$T/c1.kv' '$B/chunks/${h[1]}.kv' && cmp -s '$T/c2.kv' '$B/chunks/${h[2]}.kv'"
check "... B's uses are written in one batch within 5 s (pending: $(remote "$B" 'r["uses_pending"]'))" \
    sh -c "for i in \$(seq 50); do [ \$(python3 -c \"import json; print(json.load(open('$B/.kvfs/stats'))['remote']['uses_pending'])\") = 0 ] && exit 0; sleep 0.1; done; exit 1"
check "kvfsctl remote pin through A" "$KVFSCTL" remote pin "$A" "${h[3]}"
# a host that lists c4 from before its eviction (listing refreshed at mount only)
mount_kvfs c "$R,rados_namespace=ev,zstd=0,remote_list=600" || exit 1
C=$T/c.mnt
check "host C lists the five chunks" sh -c "for i in \$(seq 50); do [ \$(ls '$C/chunks' | wc -l) -ge 5 ] && exit 0; sleep 0.1; done; exit 1"

# overflow through B: the two chunks nobody read (c4, c5) go, not c1 c2 (read) or c3 (pinned)
put "$B" 6; put "$B" 7
check "B's uploads evicted the least recently used: c4 and c5 gone" none_in 4 5
check "... c1 and c2 (read on B) and c3 (pinned on A) stay, with c6 c7" \
    all_in 1 2 3 6 7
check "... and their index entries went with them" \
    sh -c "! timeout 20 rados -p kvfs -N ev listomapkeys kvfs.model.\$(timeout 20 rados -p kvfs -N ev getxattr ${h[1]} kvfs.model) | grep -q '${h[4]}'"
# more through B: the pinned chunk, now the oldest, still survives
put "$B" 8; put "$B" 9; put "$B" 10
check "three more through B: c1 c2 c6 evicted in use order" none_in 1 2 6
check "... the pinned c3 survives B's evictions" all_in 3
check "B's stats: evicted $(remote "$B" 'r["evicted"]'), runs $(remote "$B" 'r["evictions_run"]'), usage $(remote "$B" 'r["usage"]') <= $CAP" \
    test "$(remote "$B" 'r["evicted"] >= 5 and r["evictions_run"] >= 1 and r["usage"] <= '"$CAP")" = True

# kvfsctl remote list: five chunks, sizes, uses, the pin
"$KVFSCTL" remote list "$A" > "$T/list" 2>&1; cat "$T/list" | sed 's/^/  | /'
check "kvfsctl remote list shows the five chunks with their sizes" \
    test "$(grep -cE "^[0-9a-f]{64} +$S " "$T/list")" = 5
check "... c3 pinned, with a last use" sh -c "grep '^${h[3]} ' '$T/list' | grep -q ' pinned ' && grep '^${h[3]} ' '$T/list' | grep -qE 'T[0-9:]+Z'"
check "... and the total within capacity" grep -qE "^5 chunks, $((5 * S)) bytes of remote_capacity $CAP" "$T/list"
check "A's stats count the pin: $(remote "$A" 'r["pinned"]')" sh -c "sleep 1.2; [ \$(python3 -c \"import json; print(json.load(open('$A/.kvfs/stats'))['remote']['pinned'])\") = 1 ]"

# a stale listing: C still shows c4; reading it is a clean miss, nothing stored
check "host C still lists c4 (evicted)" sh -c "ls '$C/chunks' | grep -q '${h[4]}'"
out=$(cat "$C/chunks/${h[4]}.kv" 2>&1 > "$T/c4.read"); rc=$?
check "... reading it fails cleanly: $out" sh -c "[ $rc -ne 0 ] && echo '$out' | grep -q 'No such file'"
check "... with nothing read and nothing stored on C" \
    sh -c "! test -s '$T/c4.read' && ! find '$T/c.store' -name '${h[4]}*' | grep -q . && [ \$(python3 -c \"import json; print(json.load(open('$C/.kvfs/stats'))['remote']['rejected'])\") = 0 ]"
check "... while a chunk still in the pool reads whole through C" cmp "$T/c3.kv" "$C/chunks/${h[3]}.kv"

# both hosts upload at once: still within
both_drained() { drained "$A" 30 && drained "$B" 30; }
cps=()
for k in 11 12 13; do cp "$T/c$k.kv" "$A/incoming/" & cps+=($!); done
for k in 14 15 16; do cp "$T/c$k.kv" "$B/incoming/" & cps+=($!); done
wait "${cps[@]}"
check "six uploads from both hosts at once drain" both_drained
u=$(usage_now); [ "$u" -gt "$worst" ] && worst=$u
check "... the pool holds $u bytes <= capacity $CAP" test "$u" -le "$CAP"
check "... the pinned c3 is still there" all_in 3

# the operator: evict a pinned chunk (refused), unpin, evict by hash, evict --to
out=$("$KVFSCTL" remote evict "$A" "${h[3]}" 2>&1)
check "kvfsctl remote evict refuses a pinned chunk: $out" sh -c "! '$KVFSCTL' remote evict '$A' ${h[3]} 2>/dev/null && echo '$out' | grep -q pinned"
check "kvfsctl remote unpin, then evict it" sh -c "'$KVFSCTL' remote unpin '$A' ${h[3]} && '$KVFSCTL' remote evict '$A' ${h[3]}"
check "... gone from the pool" none_in 3
out=$("$KVFSCTL" remote pin "$A" "${h[4]}" 2>&1); rc=$?
check "pinning a chunk not in the pool is refused (exit $rc): $out" sh -c "[ $rc -ne 0 ] && echo '$out' | grep -q 'not in the pool'"
out=$("$KVFSCTL" remote evict "$A" "${h[4]}" 2>&1); rc=$?
check "evicting a chunk not in the pool is refused (exit $rc): $out" sh -c "[ $rc -ne 0 ] && echo '$out' | grep -q 'not in the pool'"
out=$("$KVFSCTL" remote evict "$A" "${h[4]:0:40}" 2>&1); rc=$?
check "... and a name that is not a chunk's (exit $rc): $out" sh -c "[ $rc -ne 0 ] && echo '$out' | grep -q 'not a chunk'"
# an index entry whose object is gone (a host that died between the two
# steps of an eviction): evicting it by name drops the entry
x=$(timeout 20 rados -p kvfs -N ev ls | grep -E '^[0-9a-f]{64}$' | head -1)
xm=$(timeout 20 rados -p kvfs -N ev getxattr "$x" kvfs.model)
timeout 20 rados -p kvfs -N ev rm "$x"
check "an entry without its object (${x:0:12}, object removed by hand) is evicted by name" "$KVFSCTL" remote evict "$A" "$x"
check "... and its model's index no longer lists it" \
    sh -c "! timeout 20 rados -p kvfs -N ev listomapkeys kvfs.model.$xm | grep -qx $x"
out=$("$KVFSCTL" remote evict --to $((L * 2)) "$B" 2>&1)
check "kvfsctl remote evict --to two chunks: $out" sh -c "[ \$('$T/pool_usage' '$CEPH_CONF' kvfs ev | cut -d' ' -f2) = 2 ]"

# a host that died holding the evictor lock: its lease (here 4 s) lapses and uploads resume
timeout 20 rados -p kvfs -N ev lock get kvfs.evictor kvfs.evict --lock-cookie dead-host --lock-duration 4 \
    --lock-type exclusive
t0=$(date +%s.%N)
cp "$T/c6.kv" "$A/chunks/${h[6]}.kv" # not on A yet: B uploaded it
sleep 1
check "a lock held by a dead host: A's upload waits" test "$(remote "$A" 'r["queued"]')" -ge 1
check "... and goes once the lease lapses" drained "$A" 20
check "... after $(printf %.1f "$(echo "$(date +%s.%N) - $t0" | bc)") s, within capacity" \
    sh -c "[ \$('$T/pool_usage' '$CEPH_CONF' kvfs ev | cut -d' ' -f1) -le $CAP ] && timeout 20 rados -p kvfs -N ev stat ${h[6]} >/dev/null"

touch "$T/stop"; wait $SAMPLER
read -r n max maxobj < "$T/sampled"
[ "$worst" -gt "$max" ] && max=$worst
check "over the run ($n samples every 20 ms), the pool's chunk bytes peaked at $max (at most $maxobj objects): <= capacity $CAP + one object ($S)" \
    test "$max" -le $((CAP + S))

# a host without remote_capacity overfills the pool: the next listing of a
# host with it finds usage over capacity and evicts back
evicted() { echo $(( $(remote "$A" 'r["evicted"]') + $(remote "$B" 'r["evicted"]') )); }
e0=$(evicted); n0=$("$T/pool_usage" "$CEPH_CONF" kvfs ev | cut -d' ' -f2)
for k in 5 7 8 9 10; do cp "$T/c$k.kv" "$C/incoming/"; done
check "C (no remote_capacity) uploads five chunks onto $n0 in the pool (room for 5)" drained "$C" 30
check "... a listing pass of A or B evicts back within capacity" \
    sh -c "for i in \$(seq 50); do [ \$('$T/pool_usage' '$CEPH_CONF' kvfs ev | cut -d' ' -f1) -le $CAP ] && exit 0; sleep 0.2; done; exit 1"
check "... A and B evicted $(( $(evicted) - e0 )) (at least $((n0 + 5 - 5)))" test $(( $(evicted) - e0 )) -ge $((n0 + 5 - 5))
finish
