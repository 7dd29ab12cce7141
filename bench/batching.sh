#!/bin/bash
# Batching (BENCHMARKS.md, "Batching"): 8 recipes that share their first 4
# of 6 passages, one by one against one batch: in process (time and KL
# divergence from a full prefill, build/batch_quality) and through the mount
# with the chunks in the RAM tier and on a slow tier (bench/batch.sh).
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -s "$MODEL" ] && [ -x "$BUILD/batch_quality" ] || { echo "batching: model or $BUILD/batch_quality missing" >&2; exit 0; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cat /usr/share/common-licenses/{GPL-3,Apache-2.0,MPL-2.0,GFDL-1.3,Artistic} > "$T/corpus.txt"
for i in $(seq 0 19); do
    tail -c +$((1 + i * 2000)) "$T/corpus.txt" | head -c 2000 > "$T/p$(printf %02d "$i").txt"
done
echo "### Batching (\`bench/batching.sh\`, run by \`make bench\`)"
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores. 8 recipes sharing their first 4 of 6 passages of 2000"
echo "bytes (~500 tokens), a question each, ratio 0.15, query selection. In process"
echo "(\`$BUILD/batch_quality $MODEL 4 2 0.15 P00..P19\`): KL(full prefill || method) of the next-token"
echo "distribution per prompt, and the time of each way:"
echo
echo '```'
"$BUILD/batch_quality" "$MODEL" 4 2 0.15 "$T"/p*.txt
echo '```'
echo
bench/batch.sh 3
echo
BATCH_MOUNT_OPTS=ram=0,sim_read_bw=100M bench/batch.sh 3
