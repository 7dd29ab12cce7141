#!/bin/bash
# make bench-gpu: CUDA op comparison against the CPU backend and blend TTFT
# vs full prefill on Llama-3-8B shapes.  Skips (77) without a GPU.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
[ -x "$BUILD/tests/gpu_test_backend_ops" ] || { echo "skip: built without CUDA (no nvcc)"; exit 77; }
[ -x "$BUILD/gpu_blend" ] || { echo "skip: $BUILD/gpu_blend not built (make bench-gpu builds it)"; exit 77; }
echo "### GPU (\`make bench-gpu\`)"; echo
echo "$(date -u +%Y-%m-%d), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null || echo 'no GPU')"; echo
"$BUILD/tests/gpu_test_backend_ops" | sed 's/^/    /'
echo
"$BUILD/gpu_blend" cuda
