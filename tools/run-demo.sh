#!/bin/bash
# make run: the main job.  Mounts kvfs on an embedded default store
# (build/run/store), stores chunks, reads them back, and prints timings.
# The model-runtime and blending steps join here as they land.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
RUN=$PWD/$BUILD/run
MNT=$RUN/mnt
mkdir -p "$RUN/store" "$MNT" "$RUN/in"
fusermount3 -u "$MNT" 2>/dev/null || true
"$BUILD/kvfs" -f -o "store=$RUN/store,ram=512M" "$MNT" 2>"$RUN/kvfs.log" &
PID=$!
trap 'fusermount3 -u "$MNT" 2>/dev/null; wait $PID 2>/dev/null || true' EXIT
for _ in $(seq 100); do [ -e "$MNT/.kvfs/stats" ] && break; sleep 0.05; done
[ -e "$MNT/.kvfs/stats" ] || { echo "kvfs failed to mount:"; cat "$RUN/kvfs.log"; exit 1; }
echo "kvfs mounted on $MNT (store $RUN/store)"
echo "writing 6 chunk files shaped like SmolLM2-135M KV caches (30 layers, 3 KV heads, 512 tokens, f16) ..."
hashes=()
for i in 1 2 3 4 5 6; do
    hashes+=("$("$BUILD/kvfsctl" synth --layers 30 --kv-heads 3 --heads 9 --head-dim 64 --tokens 512 --seed $i -o "$RUN/in/doc$i.kv")")
done
t0=$(date +%s.%N)
cp "$RUN"/in/doc*.kv "$MNT/incoming/"
t1=$(date +%s.%N)
ls -l "$MNT/chunks"
for i in 1 2 3 4 5 6; do cmp "$RUN/in/doc$i.kv" "$MNT/chunks/${hashes[$((i-1))]}.kv"; done
t2=$(date +%s.%N)
bytes=$(du -cb "$RUN"/in/doc*.kv | tail -1 | cut -f1)
awk -v b="$bytes" -v a="$t0" -v m="$t1" -v e="$t2" 'BEGIN {
    printf "ingest: %.1f MB in %.3f s (%.0f MB/s); read back and verified in %.3f s (%.0f MB/s)\n",
           b/1e6, m-a, b/1e6/(m-a), e-m, b/1e6/(e-m) }'
echo "stats:"; cat "$MNT/.kvfs/stats"
