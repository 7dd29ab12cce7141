#!/bin/bash
# Integer or f32 products (BENCHMARKS.md): the CPU backend multiplies a
# quantized weight either in 8-bit integers against x's 8-bit blocks (W
# read once, in its encoding) or by decoding W to f32 tiles for sgemm; it
# picks by rows and shape (gpu/cpu/matmul.c, int_path_max_rows).  This
# times both on the same prompts side by side (KVFS_QMM_INT_ROWS=8: integer only below 8 rows, as before,
# f32 above; =1000000: always integer; default: the rule) with `kvfsctl logits`
# (prefill seconds of the last position's logits).
# Usage: bench/qmm_paths.sh [8B-FILE]   (the 8B rows only when it exists)
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
K=$BUILD/kvfsctl
B8=${1:-$BUILD/models/llama3-8b-shape.Q4_K_M.gguf}
ids() { python3 -c "import random; random.seed($1); print(' '.join(str(random.randint(300, 40000)) for _ in range($1)))"; }
run() { # run MODEL N MODE: prefill seconds
    KVFS_QMM_INT_ROWS=$3 "$K" logits -m "$1" --tokens-file "$T/ids$2" --top 1 2>/dev/null |
        python3 -c 'import json, sys; print("%.2f" % json.load(sys.stdin)["prefill_s"])'
}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
echo "| model | rows | f32 tiles + sgemm (s) | integer (s) | integer / f32 | default picks |"
echo "|---|---|---|---|---|---|"
for spec in "models/SmolLM2-135M-Instruct.Q4_1.gguf:64 128 256 512" "models/gemma-3-270m-q4_k_m.gguf:64 128 256 512" \
            "$B8:38 152 512"; do
    m=${spec%%:*}; [ -s "$m" ] || continue
    for n in ${spec#*:}; do
        ids "$n" > "$T/ids$n"
        f=$(run "$m" "$n" 8); i=$(run "$m" "$n" 1000000); d=$(run "$m" "$n" "")
        pick=$(python3 -c "f,i,d=$f,$i,$d; print('integer' if abs(d-i) < abs(d-f) else 'f32')")
        echo "| $(basename "$m") | $n | $f | $i | $(python3 -c "print('%.2fx' % ($i / $f))") | $pick ($d s) |"
    done
done
