#!/bin/bash
# make bench: run every benchmark part and write their sections (results
# with the command that produced them) to BENCH_OUT (default
# $BUILD/bench-results.md).  BENCHMARKS.md, the report of today's figures,
# is updated from them by hand; the GPU figures come from bench/device.sh on
# a GPU machine.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export BUILD
OUT_FILE=${BENCH_OUT:-$BUILD/bench-results.md}
mkdir -p "$(dirname "$OUT_FILE")"
out=$(mktemp)
{
    echo "# kvfs benchmark results"
    echo
    echo "Produced by \`${BENCH_COMMAND:-make bench}\` (which runs \`bench/run.sh\`) on $(date -u +%Y-%m-%d); every"
    echo "figure below comes from that command on the machine and date stated in its section. Ratios are"
    echo "measured side by side in one run. Machines are noisy: figures are medians."
    echo
    for part in bench/fs.sh bench/prefill.sh bench/moe.sh bench/blend.sh bench/pipeline.sh bench/remote.sh bench/remote_scale.sh bench/serve.sh \
                bench/llama_server.sh bench/weights.sh bench/scale.sh \
                bench/batching.sh; do
        [ -x "$part" ] || continue
        echo "running $part ..." >&2
        "$part"
        echo
    done
} > "$out"
mv "$out" "$OUT_FILE"
cat "$OUT_FILE"
echo "results written to $OUT_FILE (BENCHMARKS.md is not changed)" >&2
