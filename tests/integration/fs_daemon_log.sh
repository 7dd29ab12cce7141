#!/bin/bash
# Started without -f on a host without /dev/log, the daemon logs to
# STORE/kvfs.log (appended) instead of losing every line to syslog().
. "$(dirname "$0")/../lib.sh"
[ -e /dev/log ] && skip "this host has /dev/log: the daemon logs to syslog (the fallback needs a host without it)"
store=$T/d.store mp=$T/d.mnt
mkdir -p "$store" "$mp"
"$KVFS" -o "store=$store" "$mp" 2>"$T/start.err" || { fail "kvfs without -f did not start"; cat "$T/start.err"; finish; }
MOUNTS+=("$mp")
for _ in $(seq 200); do [ -e "$mp/.kvfs/stats" ] && break; sleep 0.05; done
check "the start says where the log goes" grep -q "logging to $store/kvfs.log" "$T/start.err"
h=$(synth "$T/good.kv" --layers 3 --tokens 40)
cp "$T/good.kv" "$mp/incoming/"
head -c 3000 "$T/good.kv" > "$T/trunc.kv"
cp "$T/trunc.kv" "$mp/incoming/" 2>/dev/null && fail "a truncated file was accepted"
sleep 0.2
check "a stored chunk is logged in STORE/kvfs.log" grep -q "kvfs\[[0-9]*\]: info: stored .*chunks/$h.kv" "$store/kvfs.log"
check "so is why a bad file was rejected" grep -q "error: .*trunc.kv" "$store/kvfs.log"
pid=$(grep -o -m1 'kvfs\[[0-9]*\]' "$store/kvfs.log" | tr -dc 0-9)
fusermount3 -u "$mp"
for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
check "the unmount is logged too" grep -q "info: unmounting $mp" "$store/kvfs.log"
# right after the mount the kernel may still hold it busy (EBUSY under load): retry
"$KVFS" -o "store=$store" "$mp" 2>/dev/null &&
    for _ in $(seq 50); do fusermount3 -u "$mp" 2>/dev/null && break; sleep 0.1; done
for _ in $(seq 100); do [ "$(grep -c 'info: unmounting' "$store/kvfs.log")" -ge 2 ] && break; sleep 0.05; done
check "a second run appends" test "$(grep -c 'info: unmounting' "$store/kvfs.log")" -eq 2
finish
