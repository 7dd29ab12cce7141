#!/bin/bash
# make bench-gpu: CUDA op comparison against the CPU backend and blend TTFT
# vs full prefill on Llama-3-8B shapes.  Skips (77) without a GPU.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
[ -x "$BUILD/tests/gpu_test_backend_ops" ] || { echo "skip: built without CUDA (no nvcc)"; exit 77; }
cc -O2 -std=c11 -D_GNU_SOURCE -Iindex -Iblend -Igpu bench/gpu_blend.c "$BUILD/libkvfs_model.a" "$BUILD/libkvfs_cuda.a" \
   "$BUILD/libkvfs_core.a" -L"${CUDA_HOME:-/usr/local/cuda}/lib64" -Wl,-rpath,"${CUDA_HOME:-/usr/local/cuda}/lib64" \
   -lcublas -lcudart -lstdc++ $(pkg-config --libs libcrypto sqlite3 libzstd libxxhash libpcre2-8 liburing) \
   -ldl -lm -lpthread -o "$BUILD/gpu_blend"
echo "### GPU (\`make bench-gpu\`)"; echo
echo "$(date -u +%Y-%m-%d), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null || echo 'no GPU')"; echo
"$BUILD/tests/gpu_test_backend_ops" | sed 's/^/    /'
echo
"$BUILD/gpu_blend" cuda
