#!/bin/bash
# Crash soak of blends and eviction (issue 19, `make soak`): ITERS rounds on
# one capacity-limited store with a tiny synthetic model.  In each round
# blend clients write recipes (6 fixed recipes over 4 pinned chunks) and read
# their results while a writer churns synthetic chunks past the capacity
# (so eviction runs), then SIGKILL of the daemon at a random moment 0.05-1.0 s
# in.  Every result read, during the round or after the remount, must be
# byte-identical to the result the same recipe gave in a clean mount before
# the first kill (blends are deterministic): a different byte is a wrong
# result.  After each kill: the pinned chunks intact, every visible chunk
# equal to its source, a blend answers, `kvfsctl fsck` clean.
# Usage: tests/soak/crash_soak_blend.sh [ITERS]   (default 50)
. "$(dirname "$0")/../lib.sh"
ITERS=${1:-50}
MODEL=$T/tiny.gguf
"$KVFSCTL" mkmodel -o "$MODEL" --layers 4 --embd 128 --heads 4 --kv-heads 4 --ff 256 --seed 23 > /dev/null || exit 1
OPTS="model=$MODEL,capacity=12M,ram=8M,blend_cache=4M,blend_jobs=2"
M=$T/a.mnt
declare -A SRC
N=24 # churned synthetic chunks of another shape, 0.1-0.9 MB: ~12 MB in all, about the capacity
for i in $(seq 1 $N); do
    h=$("$KVFSCTL" synth -o "$T/s$i.kv" --layers 4 --kv-heads 4 --head-dim 32 --tokens $((50 + i * 19)) --seed $((500 + i)))
    SRC[$h]=$T/s$i.kv
done
mount_kvfs a "$OPTS" || exit 1
for k in 1 2 3 4; do
    printf 'Passage %d. %s' "$k" "$(tail -c +$((k * 300)) /usr/share/common-licenses/Apache-2.0 | head -c 300)" > "$T/d$k.txt"
    base[$k]=$("$KVFSCTL" prefill -m "$MODEL" -M "$M" "$T/d$k.txt" 2>/dev/null | cut -d' ' -f1)
    cp "$M/chunks/${base[$k]}.kv" "$T/base$k.kv"
    setfattr -n user.kvfs.pinned -v 1 "$M/chunks/${base[$k]}.kv" || fail "pin base chunk $k"
done
combos=("1 2" "2 3" "3 4" "1 2 3" "4 1 2" "1 2 3 4")
recipe() { # recipe R: the text of recipe R
    local r=$1 k
    for k in ${combos[$r]}; do echo "${base[$k]}"; done
    printf 'ratio=0.3\nsuffix=\\nQuestion %d: what is shared?\n' "$r"
}
for r in "${!combos[@]}"; do # the reference results, before any kill
    recipe "$r" > "$T/r$r.recipe"
    cp "$T/r$r.recipe" "$M/blends/ref$r.recipe" && cp "$M/blends/ref$r.kv" "$T/ref$r.kv" || { fail "reference blend $r"; finish; }
done
unmount_kvfs a
bad_rounds=0 results_checked=0 evictions=0 t0=$EPOCHREALTIME
for it in $(seq 1 "$ITERS"); do
    mount_kvfs a "$OPTS" || { fail "round $it: mount"; break; }
    ( for k in $(seq 1 4); do for i in $(shuf -i 1-$N -n 6); do cp "$T/s$i.kv" "$M/incoming/" 2>/dev/null; done; done ) &
    w1=$!
    for c in 1 2; do
        ( for k in $(seq 1 400); do # until the kill
              r=$(( RANDOM % ${#combos[@]} )); name=c$c.$it.$k
              cp "$T/r$r.recipe" "$M/blends/$name.recipe" 2>/dev/null || continue
              cat "$M/blends/$name.kv" > "$T/got.$c" 2>/dev/null || continue # the daemon died mid-blend
              cmp -s "$T/got.$c" "$T/ref$r.kv" || echo "round $it: client $c: recipe $r gave other bytes" >> "$T/wrong"
              echo x >> "$T/checked"
          done ) 2>/dev/null &
        wb[$c]=$!
    done
    sleep "$(awk -v r=$RANDOM 'BEGIN{printf "%.2f", 0.05 + 0.95 * r / 32767}')"
    ev=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['evictions'])" "$M/.kvfs/stats" 2>/dev/null || echo 0)
    evictions=$((evictions + ev))
    kill -9 "$MNT_PID"
    wait "$w1" "${wb[1]}" "${wb[2]}" 2>/dev/null
    fusermount3 -uz "$M" 2>/dev/null
    wait "$MNT_PID" 2>/dev/null
    mount_kvfs a "$OPTS" || { fail "round $it: remount after the kill"; break; }
    wrong=0 pinned=ok answered=ok
    for k in 1 2 3 4; do cmp -s "$M/chunks/${base[$k]}.kv" "$T/base$k.kv" || pinned=LOST; done
    for f in "$M"/chunks/*.kv; do
        [ -e "$f" ] || continue
        h=$(basename "$f" .kv)
        [ -n "${SRC[$h]:-}" ] || continue # a base chunk
        cmp -s "$f" "${SRC[$h]}" || { wrong=$((wrong + 1)); echo "round $it: bad chunk $h"; }
    done
    r=$(( RANDOM % ${#combos[@]} ))
    { cp "$T/r$r.recipe" "$M/blends/after$it.recipe" && cmp -s "$M/blends/after$it.kv" "$T/ref$r.kv"; } || answered=FAIL
    echo x >> "$T/checked"
    unmount_kvfs a
    fsck=ok; "$KVFSCTL" fsck "$T/a.store" > "$T/fsck.$it" 2>&1 || fsck=FAIL
    bad=$( [ -e "$T/wrong" ] && wc -l < "$T/wrong" || echo 0 ); [ -e "$T/wrong" ] && cat "$T/wrong"; rm -f "$T/wrong"
    n=$( [ -e "$T/checked" ] && wc -l < "$T/checked" || echo 0 ); rm -f "$T/checked"
    results_checked=$((results_checked + n))
    echo "round $it: $n blend results checked, $bad wrong, $wrong bad chunks, pinned: $pinned, blend after: $answered, fsck: $fsck"
    if [ "$bad" -ne 0 ] || [ "$wrong" -ne 0 ] || [ $pinned != ok ] || [ $answered != ok ] || [ $fsck != ok ]; then
        bad_rounds=$((bad_rounds + 1)); fail "round $it"; cat "$T/fsck.$it"
    fi
done
secs=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.0f", b-a}')
echo "blend crash soak: $ITERS rounds in $secs s, $results_checked blend results checked against the references, $evictions evictions before the kills, $bad_rounds bad rounds"
finish
