#!/bin/bash
# Claims (KVFS_IOC_CLAIM) on a real Ceph cluster: one computation of a chunk
# per fleet.  Eight hosts (mounts with their own stores) on one pool run
# `kvfsctl prefill -M` of the same text at once: exactly one computes it, the
# other seven wait for its upload and read the same bytes.  A claimer killed
# while holding the lease (SIGKILL of kvfsctl: its control fd closes) hands
# the chunk to a waiting host at once; a host killed while holding (SIGKILL
# of the mount: no renewals) hands it over when the lease lapses
# (remote_lease=5 here); a waiter killed while waiting leaves no lease
# behind; a mount with more waiting claims than it lets wait stays
# responsive; a mount stopped while a claim waits exits; kvfsctl remote
# leases removes a lapsed lease object nobody claimed again.  --no-claim computes regardless.  No lease object
# is left in the pool; a mount without a remote tier answers "yours, local".
. "$(dirname "$0")/../lib.sh"
ldd "$KVFS" | grep -q librados || skip "kvfs was built without librados (librados-dev missing): remote tier not tested"
MODEL=$KVFS_ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -s "$MODEL" ] || "$KVFS_ROOT/tools/fetch-model.sh" >/dev/null 2>&1 || skip "no model"
. "$KVFS_ROOT/tests/ceph/lib.sh"
ceph_test_cluster
LEASE=5
for i in $(seq 1 8); do
    mount_kvfs h$i "$R,remote_lease=$LEASE,remote_list=-1" || exit 1
    PID[$i]=$MNT_PID
done
M() { echo "$T/h$1.mnt"; }
check "eight hosts connected" test "$(for i in $(seq 1 8); do remote "$(M $i)" 'r["state"]'; done | sort -u)" = connected
text() { # text FILE BYTES OFFSET: a passage of a license (random text where none is installed)
    tail -c +"$3" /usr/share/common-licenses/GPL-3 2>/dev/null | head -c "$2" > "$1"
    [ -s "$1" ] || head -c "$2" /dev/urandom | base64 > "$1"
}
prefill() { "$KVFSCTL" prefill -m "$MODEL" -t 1 "$@"; }
leases_in_pool() { timeout 20 rados -p kvfs ls | grep -c '^kvfs\.lease\.'; }
sum() { local s=0 i; for i in $(seq 1 8); do s=$((s + $(remote "$(M $i)" "r[\"$1\"]"))); done; echo $s; }

# 1. eight hosts ask for the same chunk at once
text "$T/t1.txt" 2500 1
for i in $(seq 1 8); do prefill -M "$(M $i)" "$T/t1.txt" > "$T/p$i.out" 2> "$T/p$i.err" & P[$i]=$!; done
for i in $(seq 1 8); do wait "${P[$i]}" || fail "prefill on host $i: exit $?: $(cat "$T/p$i.err")"; done
computed=$(cat "$T"/p?.err | grep -c ' tokens in ')
waited=$(cat "$T"/p?.err | grep -c 'not computed')
check "8 hosts at once: $computed computed, $waited read it from the pool" test "$computed $waited" = "1 7"
H1=$(cut -d' ' -f1 "$T/p1.out")
check "... every host names the same chunk $H1" test "$(cut -d' ' -f1 "$T"/p?.out | sort -u)" = "$H1"
who=$(grep -l ' tokens in ' "$T"/p?.err | sed 's/.*p\([0-9]\).err/\1/')
same=0
for i in $(seq 1 8); do cmp -s "$(M "$who")/chunks/$H1.kv" "$(M $i)/chunks/$H1.kv" && same=$((same + 1)); done
check "... all eight read the same bytes (host $who computed)" test $same = 8
check "... the stats: claims $(sum claims), yours $(sum claims_yours), waited $(sum claims_waited)" \
    test "$(sum claims) $(sum claims_yours)" = "8 1"
drained "$(M "$who")" 20
check "... no lease held, no lease object left in the pool" \
    sh -c "[ $(sum leases_held) = 0 ] && [ \$(timeout 20 rados -p kvfs ls | grep -c '^kvfs\.lease\.') = 0 ]"
check "... lease objects are no chunks: no host lists one" sh -c "! ls $T/h*.mnt/chunks | grep -q lease"

# 2. --no-claim computes regardless
prefill -M "$(M 1)" --no-claim "$T/t1.txt" > /dev/null 2> "$T/nc.err"
check "--no-claim computes a chunk the pool has" grep -q ' tokens in ' "$T/nc.err"

# 3. a claimer killed while holding: the waiting host computes at once
text "$T/t2.txt" 1500 5001
H2=$(prefill -o "$T/t2.kv" "$T/t2.txt" 2>/dev/null)
"$KVFSCTL" claim -M "$(M 1)" --hold 120 "$H2" > "$T/c2.out" & HOLDER=$!
for _ in $(seq 100); do [ -s "$T/c2.out" ] && break; sleep 0.1; done
check "host 1 claims $H2 (kvfsctl claim: $(cat "$T/c2.out"))" grep -q '^yours fleet' "$T/c2.out"
t0=$(date +%s.%N)
prefill -M "$(M 2)" "$T/t2.txt" > "$T/p2b.out" 2> "$T/p2b.err" & PB=$!
for _ in $(seq 100); do [ "$(remote "$(M 2)" 'r["claims_waited"]')" -ge 1 ] && break; sleep 0.1; done
check "... host 2 waits for it (claims_waited $(remote "$(M 2)" 'r["claims_waited"]'))" \
    test "$(remote "$(M 2)" 'r["claims_waited"]')" -ge 1
kill -9 $HOLDER; wait $HOLDER 2>/dev/null
wait $PB
dt=$(echo "$(date +%s.%N) - $t0" | bc)
check "... the claimer SIGKILLed: host 2 computed it (in ${dt}s from its start, lease ${LEASE}s)" \
    grep -q ' tokens in ' "$T/p2b.err"
check "... host 2 counts a takeover" test "$(remote "$(M 2)" 'r["lease_takeovers"]')" = 1
check "... and stored the chunk kvfsctl computes offline" cmp -s "$T/t2.kv" "$(M 2)/chunks/$H2.kv"

# 3b. a waiter killed while waiting takes no lease when the holder lets go
H4=$(echo 4 | sha256sum | cut -d' ' -f1)
"$KVFSCTL" claim -M "$(M 5)" --hold 120 "$H4" > "$T/c4.out" & HOLDER=$!
for _ in $(seq 100); do [ -s "$T/c4.out" ] && break; sleep 0.1; done
"$KVFSCTL" claim -M "$(M 6)" --timeout 60 "$H4" > /dev/null 2>&1 & W=$!
for _ in $(seq 100); do [ "$(remote "$(M 6)" 'r["claims_waited"]')" -ge 2 ] && break; sleep 0.1; done
kill -9 $W; wait $W 2>/dev/null
kill -9 $HOLDER; wait $HOLDER 2>/dev/null
sleep 1
check "a waiter SIGKILLed, then the holder: no lease left on either host" \
    test "$(remote "$(M 5)" 'r["leases_held"]') $(remote "$(M 6)" 'r["leases_held"]')" = "0 0"
check "... a third host claims it at once" sh -c "'$KVFSCTL' claim -M '$(M 7)' --timeout 1 '$H4' | grep -q '^yours fleet'"

# 3c. more waiters on one mount than it lets wait (8): the mount stays responsive, the rest ask again
H7=$(echo 7 | sha256sum | cut -d' ' -f1)
"$KVFSCTL" claim -M "$(M 1)" --hold 120 "$H7" > "$T/c7.out" & HOLDER=$!
for _ in $(seq 100); do [ -s "$T/c7.out" ] && break; sleep 0.1; done
WS=()
for k in $(seq 1 20); do "$KVFSCTL" claim -M "$(M 7)" --timeout 60 "$H7" > "$T/w$k.out" 2>&1 & WS+=($!); done
sleep 1
check "20 claims waiting on one mount (16 FUSE threads): it still answers (.kvfs/stats within 2 s)" \
    sh -c "timeout 2 cat '$(M 7)/.kvfs/stats' > /dev/null"
kill -9 $HOLDER; wait $HOLDER 2>/dev/null
for w in "${WS[@]}"; do wait $w; done
check "... the holder gone, each of the 20 gets it in turn (each ends its claim at exit)" \
    test "$(cat "$T"/w*.out | grep -c '^yours fleet')" = 20

# 4. a host killed while holding: its lease lapses, another host takes over
text "$T/t3.txt" 1500 9001
# the same work with no claim to wait for: what the takeover's bound adds
# the lease to (a sanitizer's build computes several times slower)
c0=$(date +%s.%N)
H3=$(prefill -o "$T/t3.kv" "$T/t3.txt" 2>/dev/null)
work=$(echo "$(date +%s.%N) - $c0" | bc)
"$KVFSCTL" claim -M "$(M 3)" --hold 120 "$H3" > "$T/c3.out" & HOLDER=$!
for _ in $(seq 100); do [ -s "$T/c3.out" ] && break; sleep 0.1; done
check "host 3 claims $H3 ($(cat "$T/c3.out"))" grep -q '^yours fleet' "$T/c3.out"
sleep 2 # renewed at least once
kill -9 "${PID[3]}"; wait "${PID[3]}" 2>/dev/null
t0=$(date +%s.%N)
prefill -M "$(M 4)" "$T/t3.txt" > "$T/p4b.out" 2> "$T/p4b.err"
dt=$(echo "$(date +%s.%N) - $t0" | bc)
kill -9 $HOLDER 2>/dev/null; wait $HOLDER 2>/dev/null
fusermount3 -uz "$(M 3)" 2>/dev/null
check "... host 3 SIGKILLed: host 4 computed it after the lease lapsed (${dt}s, lease ${LEASE}s, the work alone ${work}s)" \
    sh -c "grep -q ' tokens in ' '$T/p4b.err' && [ \$(echo '$dt < $LEASE + 4 + $work' | bc) = 1 ]"
check "... host 4 counts a takeover" test "$(remote "$(M 4)" 'r["lease_takeovers"]')" = 1
drained "$(M 4)" 20; drained "$(M 2)" 20
check "... no lease object left in the pool" test "$(leases_in_pool)" = 0

# 4b. a host stopped (SIGTERM) while a claim waits on it: the wait ends, the daemon exits
H5=$(echo 5 | sha256sum | cut -d' ' -f1)
"$KVFSCTL" claim -M "$(M 1)" --hold 120 "$H5" > "$T/c5.out" & HOLDER=$!
for _ in $(seq 100); do [ -s "$T/c5.out" ] && break; sleep 0.1; done
w0=$(remote "$(M 8)" 'r["claims_waited"]')
"$KVFSCTL" claim -M "$(M 8)" --timeout 300 "$H5" > /dev/null 2>&1 & W=$!
for _ in $(seq 100); do [ "$(remote "$(M 8)" 'r["claims_waited"]')" -gt "$w0" ] && break; sleep 0.1; done
kill -TERM "${PID[8]}"
gone=no; for _ in $(seq 100); do kill -0 "${PID[8]}" 2>/dev/null || { gone=yes; break; }; sleep 0.1; done
check "a host stopped while a claim waits on it exits within 10 s" test $gone = yes
kill -9 $W $HOLDER 2>/dev/null; wait $W $HOLDER 2>/dev/null
fusermount3 -uz "$(M 8)" 2>/dev/null

# 4c. a crashed host's lease object, never claimed again: kvfsctl remote leases removes it once lapsed
H6=$(echo 6 | sha256sum | cut -d' ' -f1)
"$KVFSCTL" claim -M "$(M 5)" --hold 120 "$H6" > "$T/c6.out" & HOLDER=$!
for _ in $(seq 100); do [ -s "$T/c6.out" ] && break; sleep 0.1; done
kill -9 "${PID[5]}"; wait "${PID[5]}" 2>/dev/null
kill -9 $HOLDER; wait $HOLDER 2>/dev/null
fusermount3 -uz "$(M 5)" 2>/dev/null
check "kvfsctl remote leases: host 5's lease held while it lasts" \
    sh -c "'$KVFSCTL' remote leases '$(M 6)' | grep -q '^$H6 held'"
sleep $((LEASE + 1))
check "... lapsed: removed" sh -c "'$KVFSCTL' remote leases '$(M 6)' | grep -q '^$H6 lapsed, removed'"
check "... no lease object left in the pool" test "$(leases_in_pool)" = 0

# 5. without a remote tier: yours, nothing coordinated
mount_kvfs plain "" || exit 1
check "a mount without a remote tier: kvfsctl claim says yours, local" \
    sh -c "'$KVFSCTL' claim -M '$T/plain.mnt' '$H3' | grep -q '^yours local'"
finish
