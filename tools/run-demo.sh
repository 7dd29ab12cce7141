#!/bin/bash
# make run: the main job.  Mounts kvfs on an embedded default store
# (build/run/store), loads SmolLM2-135M, computes the KV caches of a few
# documents into the mount, then answers a question over a document by
# reusing its cached KV from the mount, and prints the answer and the
# time to first token against a full prefill.
# (CacheBlend composition of several chunks is the next issue; until it
# lands, the RAG prompt reuses one document's cache as a prefix.)
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
K=$BUILD/kvfsctl
RUN=$PWD/$BUILD/run
MNT=$RUN/mnt
mkdir -p "$RUN/store" "$MNT" "$RUN/docs"
fusermount3 -u "$MNT" 2>/dev/null || true
"$BUILD/kvfs" -f -o "store=$RUN/store,ram=512M" "$MNT" 2>"$RUN/kvfs.log" &
PID=$!
trap 'fusermount3 -u "$MNT" 2>/dev/null; wait $PID 2>/dev/null || true' EXIT
for _ in $(seq 100); do [ -e "$MNT/.kvfs/stats" ] && break; sleep 0.05; done
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
chunk=$(cut -d' ' -f2 "$RUN/docs/doc1.txt.chunk")
question=$'\n\nQuestion: What does this license allow you to do?\nAnswer:'
echo "== answering over doc1 with its KV read from the mount"
answer=$("$K" generate -m "$MODEL" --kv "$chunk" -p "$question" -n 40 2>"$RUN/gen_kv.err")
echo "$answer" | sed 's/^/   /'
echo "== the same prompt with a full prefill"
"$K" generate -m "$MODEL" --prefix-file "$RUN/docs/doc1.txt" -p "$question" -n 40 >"$RUN/gen_full.out" 2>"$RUN/gen_full.err"
ttft_kv=$(grep -o 'TTFT [0-9.]*' "$RUN/gen_kv.err" | cut -d' ' -f2)
ttft_full=$(grep -o 'TTFT [0-9.]*' "$RUN/gen_full.err" | cut -d' ' -f2)
same=no; cmp -s "$RUN/gen_full.out" <(echo "$answer") && same=yes
awk -v a="$ttft_kv" -v b="$ttft_full" -v s="$same" 'BEGIN {
    printf "== TTFT: %.3f s with the cached KV from kvfs vs %.3f s full prefill (%.1fx faster); same answer: %s\n", a, b, b/a, s }'
echo "== stats"; cat "$MNT/.kvfs/stats"
