#!/bin/bash
# make bench: run every benchmark part and write BENCHMARKS.md (results with
# the command that produced them).  The GPU section (make bench-gpu) is
# carried over from the existing file.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export BUILD
out=$(mktemp)
{
    echo "# kvfs benchmarks"
    echo
    echo "Produced by \`${BENCH_COMMAND:-make bench}\` (which runs \`bench/run.sh\`); every figure below comes"
    echo "from that command on the machine and date stated in its section. Ratios are measured side by side in"
    echo "one run. Machines are noisy: figures are medians."
    echo
    for part in bench/fs.sh bench/prefill.sh bench/blend.sh bench/pipeline.sh bench/remote.sh bench/serve.sh \
                bench/llama_server.sh bench/weights.sh bench/scale.sh \
                bench/batching.sh; do
        [ -x "$part" ] || continue
        echo "running $part ..." >&2
        "$part"
        echo
    done
    # the GPU section comes from `make bench-gpu` on a GPU machine: keep it
    [ -f BENCHMARKS.md ] && sed -n '/^### GPU/,$p' BENCHMARKS.md
} > "$out"
mv "$out" BENCHMARKS.md
cat BENCHMARKS.md
