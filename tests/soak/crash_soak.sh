#!/bin/bash
# Crash soak (issue 19, `make soak`): ITERS rounds of writers copying chunks
# in, readers cmp'ing and rm'ing them, then SIGKILL of the daemon at a
# random moment (0.05-1.0 s in).  After every kill: mount again and check
# that every visible chunk is byte-identical to its source (nothing torn or
# half-visible), that ingest resumes, and that `kvfsctl fsck` finds the
# store consistent.  One store across all rounds, so damage would pile up.
# Prints one line per round and a summary; fails on any bad round.
# Usage: tests/soak/crash_soak.sh [ITERS]   (default 50)
. "$(dirname "$0")/../lib.sh"
ITERS=${1:-50}
N=16
declare -A SRC HASH # hash -> source file, i -> hash
for i in $(seq 1 $N); do
    h=$(synth "$T/s$i.kv" --layers 12 --kv-heads 2 --tokens $((64 + i * 29)) --seed $((7000 + i)))
    SRC[$h]=$T/s$i.kv HASH[$i]=$h
done
M=$T/a.mnt
bad_rounds=0 total_visible=0 t0=$EPOCHREALTIME
for it in $(seq 1 "$ITERS"); do
    mount_kvfs a || { fail "round $it: mount"; break; }
    ( for k in $(seq 1 3); do for i in $(shuf -i 1-$N -n 6); do cp "$T/s$i.kv" "$M/incoming/" 2>/dev/null; done; done ) &
    w1=$!
    ( for k in $(seq 1 40); do
          f=$(ls "$M/chunks" 2>/dev/null | shuf -n 1); [ -n "$f" ] || continue
          # cmp: 1 = the bytes differ (torn or wrong data); 2 = the read failed (the daemon died mid-read)
          cmp "$M/chunks/$f" "${SRC[${f%.kv}]:-/dev/null}" > /dev/null 2>&1
          [ $? -eq 1 ] && echo "torn read of $f" >> "$T/torn"
          [ $((RANDOM % 4)) -eq 0 ] && rm -f "$M/chunks/$f" 2>/dev/null
      done ) 2>/dev/null &
    w2=$!
    sleep "$(awk -v r=$RANDOM 'BEGIN{printf "%.2f", 0.05 + 0.95 * r / 32767}')"
    kill -9 "$MNT_PID"
    wait "$w1" "$w2" 2>/dev/null
    fusermount3 -uz "$M" 2>/dev/null
    wait "$MNT_PID" 2>/dev/null
    mount_kvfs a || { fail "round $it: remount after the kill"; break; }
    visible=0 wrong=0
    for f in "$M"/chunks/*.kv; do
        [ -e "$f" ] || continue
        visible=$((visible + 1))
        h=$(basename "$f" .kv)
        cmp -s "$f" "${SRC[$h]:-/dev/null}" || { wrong=$((wrong + 1)); echo "round $it: bad chunk $h"; }
    done
    i=$(shuf -i 1-$N -n 1)
    resumed=ok
    { cp "$T/s$i.kv" "$M/incoming/" && cmp -s "$M/chunks/${HASH[$i]}.kv" "$T/s$i.kv"; } || resumed=FAIL
    unmount_kvfs a
    fsck=ok; "$KVFSCTL" fsck "$T/a.store" > "$T/fsck.$it" 2>&1 || fsck=FAIL
    torn=$( [ -e "$T/torn" ] && wc -l < "$T/torn" || echo 0 ); rm -f "$T/torn"
    total_visible=$((total_visible + visible))
    echo "round $it: $visible chunks visible, $wrong wrong, $torn torn reads, ingest after: $resumed, fsck: $fsck"
    if [ "$wrong" -ne 0 ] || [ "$torn" -ne 0 ] || [ $resumed != ok ] || [ $fsck != ok ]; then
        bad_rounds=$((bad_rounds + 1)); fail "round $it"; cat "$T/fsck.$it"
    fi
done
secs=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.0f", b-a}')
echo "crash soak: $ITERS rounds in $secs s, $total_visible chunks checked after kills, $bad_rounds bad rounds"
finish
