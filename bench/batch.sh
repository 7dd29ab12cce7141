#!/bin/bash
# Batching: 8 recipes that share their 4 leading chunks (6 chunks each, a
# distinct question each), blended one by one and then as one batch
# (kvfsctl blend --batch), side by side on one mount; the results of the
# first run are forgotten (rm NAME.recipe) before the second.  Prints both
# wall times, the ratio, and whether the batch's answers (8 greedy tokens)
# match a full prefill's.  BATCH_MOUNT_OPTS adds mount options (a slow tier:
# ram=0,sim_read_bw=100M).  Usage: bench/batch.sh [ROUNDS]
cd "$(dirname "$0")/.." || exit 1
export KVFS_ROOT=$PWD
. tests/lib.sh
MODEL=$KVFS_ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -s "$MODEL" ] || skip "model missing (make model)"
ROUNDS=${1:-3}
mount_kvfs b "model=$MODEL,${BATCH_MOUNT_OPTS:-ram=1G}" || exit 1
M=$T/b.mnt
cat /usr/share/common-licenses/{GPL-3,Apache-2.0,MPL-2.0,GFDL-1.3,Artistic} > "$T/corpus.txt"
h=()
for i in $(seq 0 19); do  # 20 distinct passages of 2000 bytes (~500 tokens)
    tail -c +$((1 + i * 2000)) "$T/corpus.txt" | head -c 2000 > "$T/p$i.txt"
    h[$i]=$("$KVFSCTL" prefill -m "$MODEL" -M "$M" "$T/p$i.txt" 2>/dev/null | cut -d' ' -f1)
done
write_batch() { # the 8 recipes, separated by %%
    for r in $(seq 0 7); do
        [ "$r" -gt 0 ] && echo '%%'
        printf 'ratio=0.15\n%s\n%s\n%s\n%s\n%s\n%s\n' "${h[0]}" "${h[1]}" "${h[2]}" "${h[3]}" \
            "${h[$((4 + 2 * r))]}" "${h[$((5 + 2 * r))]}"
        printf 'suffix=\\nQuestion %d: which license text above says the most about warranty?\\nAnswer:\n' "$r"
    done
}
write_batch > "$T/batch.txt"
csplit -s -z -f "$T/r" "$T/batch.txt" '/^%%$/' '{*}'
forget() { rm -f "$M"/blends/*.recipe; }
one_by_one() {
    local t0=$EPOCHREALTIME
    for f in "$T"/r*; do
        grep -v '^%%$' "$f" > "$M/blends/$(basename "$f").recipe"
        cat "$M/blends/$(basename "$f").kv" > "$T/one-$(basename "$f").kv" || return 1
    done
    awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.3f", b-a}'
}
batched() {
    local t0=$EPOCHREALTIME
    "$KVFSCTL" blend -M "$M" --batch "$T/batch.txt" > "$T/batch.out" || return 1
    awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.3f", b-a}'
}
rows=()
for k in $(seq "$ROUNDS"); do
    forget; a=$(one_by_one) || { echo "one-by-one failed" >&2; exit 1; }
    forget; b=$(batched) || { echo "batch failed" >&2; cat "$T/batch.out" >&2; exit 1; }
    rows+=("| $k | $a | $b | $(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.2fx", a/b}') |")
done
# answers (greedy 8 tokens) against ratio 1 (a full prefill, exactly) of
# the same prompt: how often each way keeps the full prefill's answer
one_ok=0; batch_ok=0; i=0
while read -r path; do
    f=$(ls "$T"/r* | sed -n "$((i + 1))p")
    grep -v '^%%$' "$f" | sed 's/^ratio=0.15$/ratio=1/' > "$M/blends/full$i.recipe"
    ref=$("$KVFSCTL" generate -m "$MODEL" --kv "$M/blends/full$i.kv" -n 8 --ids 2>/dev/null)
    g1=$("$KVFSCTL" generate -m "$MODEL" --kv "$T/one-$(basename "$f").kv" -n 8 --ids 2>/dev/null)
    g2=$("$KVFSCTL" generate -m "$MODEL" --kv "$path" -n 8 --ids 2>/dev/null)
    [ -n "$ref" ] && [ "$g1" = "$ref" ] && one_ok=$((one_ok + 1))
    [ -n "$ref" ] && [ "$g2" = "$ref" ] && batch_ok=$((batch_ok + 1))
    i=$((i + 1))
done < "$T/batch.out"
echo "#### \`bench/batch.sh $ROUNDS\` (${BATCH_MOUNT_OPTS:-ram=1G})"
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores: 8 recipes sharing their first 4 of 6 passages (~500"
echo "tokens each), a question each, ratio 0.15, through the mount: one by one (write NAME.recipe, read"
echo "NAME.kv) and as one \`kvfsctl blend --batch\`, results forgotten in between (wall seconds):"
echo
echo "| round | one by one | batch | batch speedup |"
echo "|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
echo "Greedy 8-token answer equal to a full prefill's (ratio 1 through the same mount): one by one"
echo "$one_ok of $i, batch $batch_ok of $i."
finish > /dev/null
