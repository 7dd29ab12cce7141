#!/bin/bash
# make run: the main job.  Mounts kvfs on an embedded default store
# (build/run/store) with SmolLM2-135M loaded for blending, computes the KV
# caches of a few documents into the mount, blends them with a question
# through blends/ (CacheBlend, ratio 0.15), generates the answer from the
# blended cache, and prints the time to first token against a full prefill:
# blending through the mount, then reading the blended file and computing the
# first token (kvfsctl generate's TTFT starts before it reads --kv).
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
K=$BUILD/kvfsctl
RUN=$PWD/$BUILD/run
MNT=$RUN/mnt
mkdir -p "$RUN/store" "$MNT" "$RUN/docs"
fusermount3 -u "$MNT" 2>/dev/null || true
"$BUILD/kvfs" -f -o "store=$RUN/store,ram=512M,model=$PWD/$MODEL" "$MNT" 2>"$RUN/kvfs.log" &
PID=$!
trap 'fusermount3 -u "$MNT" 2>/dev/null; wait $PID 2>/dev/null || true' EXIT
for _ in $(seq 400); do [ -e "$MNT/.kvfs/stats" ] && break; sleep 0.05; done
[ -e "$MNT/.kvfs/stats" ] || { echo "kvfs failed to mount:"; cat "$RUN/kvfs.log"; exit 1; }
echo "== kvfs mounted on $MNT (store $RUN/store)"

i=0
for src in /usr/share/common-licenses/Apache-2.0 /usr/share/common-licenses/MPL-2.0 /usr/share/common-licenses/GPL-3; do
    i=$((i + 1))
    head -c 2400 "$src" > "$RUN/docs/doc$i.txt"
done
echo "== prefilling 3 documents with $MODEL into $MNT/incoming/"
for d in "$RUN"/docs/doc*.txt; do
    "$K" prefill -m "$MODEL" -M "$MNT" "$d" > "$d.chunk"
    echo "   $(basename "$d"): $(cut -d' ' -f2 "$d.chunk")"
done
ls -l "$MNT/chunks"
hashes=$(cut -d' ' -f1 "$RUN"/docs/doc*.txt.chunk)
question=$'\n\nQuestion: Which of these licenses are about software, and what do they allow?\nAnswer:'
echo "== blending the 3 documents + the question through $MNT/blends/ (ratio 0.15)"
t0=$(date +%s.%N)
blended=$("$K" blend -M "$MNT" --name demo --ratio 0.15 --suffix "$question" $hashes)
t1=$(date +%s.%N)
"$K" info "$blended" | grep -E "tokens|blended"
answer=$("$K" generate -m "$MODEL" --kv "$blended" -n 40 2>"$RUN/gen_kv.err")
echo "== answer (from the blended cache):"
echo "$answer" | sed 's/^/   /'
echo "== the same prompt with a full prefill"
cat "$RUN"/docs/doc*.txt > "$RUN/all.txt"
"$K" generate -m "$MODEL" --prefix-file "$RUN/all.txt" -p "$question" -n 40 >"$RUN/gen_full.out" 2>"$RUN/gen_full.err"
sed 's/^/   /' "$RUN/gen_full.out"
ttft_kv=$(grep -o 'TTFT [0-9.]*' "$RUN/gen_kv.err" | cut -d' ' -f2)
ttft_full=$(grep -o 'TTFT [0-9.]*' "$RUN/gen_full.err" | cut -d' ' -f2)
awk -v a="$t0" -v b="$t1" -v g="$ttft_kv" -v f="$ttft_full" 'BEGIN {
    t = b - a + g
    printf "== TTFT: %.3f s blended through kvfs (blend %.3f s + reading the blended file and first token %.3f s) vs %.3f s full prefill: %.1fx faster\n", t, b - a, g, f, f / t }'
echo "== stats"; cat "$MNT/.kvfs/stats"
