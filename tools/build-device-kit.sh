#!/bin/bash
# Build everything a lent GPU machine runs into build-gpu/ (the "device kit"),
# so that nothing is compiled there: the CUDA test and benchmark binaries,
# kvfs and kvfsctl (no RADOS, portable x86-64-v3), the shared libraries they
# load that such a machine may lack (SQLite, zstd, liburing, xxHash, OpenSSL,
# OpenBLAS, PCRE2), fusermount3, and -- where it has been built here with
# `CUDA_ARCH=90 tools/build-llama-server.sh` -- llama.cpp's CUDA engine
# (llama-server, llama-bench, llama-quantize and their ggml libraries, packed
# with xz and unpacked there by bench/device.sh) with gguf-py for
# tools/mkmodel-8b.py.  The kit travels with the working tree, which must stay
# under the device tool's 64 MiB: the script fails if the kit alone is over
# KIT_MAX_MIB (default 60).
#
#   tools/build-device-kit.sh            -> build-gpu/, then on the device:
#   bench/device.sh                         (everything, figures under $OUT)
#
# Environment: KIT=dir (default build-gpu), JOBS (default: all cores),
# NO_LLAMA=1 (leave llama.cpp out even if built), KIT_MAX_MIB.
set -eu
cd "$(dirname "$0")/.."
KIT=${KIT:-build-gpu}
JOBS=${JOBS:-$(nproc)}
MAX=${KIT_MAX_MIB:-60}
say() { echo "build-device-kit: $*" >&2; }
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$NVCC" ] || { say "error: no nvcc: the kit's point is CUDA"; exit 1; }
# objects in a build tree of their own (kept: the next kit builds only what
# changed); the kit holds only what runs
OBJ=$KIT-obj
make -j"$JOBS" BUILD="$OBJ" NVCC="$NVCC" NO_RADOS=1 ARCHFLAGS=-march=x86-64-v3 "$OBJ/tests/gpu_test_backend_ops" "$OBJ/gpu_blend" \
    "$OBJ/kvfs" "$OBJ/kvfsctl" "$OBJ/libkvfs-cuda.so" >/dev/null
rm -rf "$KIT"
mkdir -p "$KIT/lib" "$KIT/bin" "$KIT/tests"
cp "$OBJ/gpu_blend" "$OBJ/kvfs" "$OBJ/kvfsctl" "$OBJ/libkvfs-cuda.so" "$KIT/"
cp "$OBJ/tests/gpu_test_backend_ops" "$KIT/tests/"
for l in libsqlite3.so.0 libzstd.so.1 liburing.so.2 libxxhash.so.0 libcrypto.so.3 libopenblas.so.0 libpcre2-8.so.0 \
         libgfortran.so.5 libquadmath.so.0; do
    cp -L "/lib/x86_64-linux-gnu/$l" "$KIT/lib/"
done
cp /usr/bin/fusermount3 "$KIT/bin/" # for tests/gpu/*.sh
# packed (OpenBLAS alone is 35 MiB, 4 packed); bench/device.sh unpacks them
strip --strip-debug "$KIT/kvfs" "$KIT/kvfsctl" "$KIT/gpu_blend" "$KIT/tests/gpu_test_backend_ops"
(cd "$KIT" && tar -cf - lib | xz -T0 -9 > lib.tar.xz && rm -rf lib)
# llama.cpp's CUDA engine, the yardstick (built here: hours would go there)
LLAMA=build/llama-cuda
if [ "${NO_LLAMA:-0}" != 1 ] && [ -x "$LLAMA/bin/llama-bench" ] && [ -x "$LLAMA/bin/llama-server" ] &&
   [ -x "$LLAMA/bin/llama-quantize" ]; then
    stage=$(mktemp -d)
    mkdir -p "$stage/llama-cuda/bin"
    cp "$LLAMA/bin/llama-server" "$LLAMA/bin/llama-bench" "$LLAMA/bin/llama-quantize" "$stage/llama-cuda/bin/"
    # the shared libraries they name (ggml*, llama, mtmd), wherever the build put them
    find "$LLAMA" -name 'lib*.so*' \( -type f -o -type l \) -exec cp -P {} "$stage/llama-cuda/bin/" \;
    strip --strip-unneeded "$stage"/llama-cuda/bin/* 2>/dev/null || true
    (cd "$stage" && tar -cf - llama-cuda | xz -T0 -9 > llama-cuda.tar.xz)
    mv "$stage/llama-cuda.tar.xz" "$KIT/"
    rm -rf "$stage"
    say "llama.cpp CUDA engine: $(du -h "$KIT/llama-cuda.tar.xz" | cut -f1) packed"
else
    say "note: no llama.cpp CUDA build in $LLAMA (CUDA_ARCH=90 tools/build-llama-server.sh): the kit leaves it out"
fi
GGUF_PY=$(ls -d build/third_party/llama_cpp_python-*/vendor/llama.cpp/gguf-py 2>/dev/null | tail -n 1)
[ -n "$GGUF_PY" ] && cp -r "$GGUF_PY" "$KIT/gguf-py" && find "$KIT/gguf-py" -name '__pycache__' -prune -exec rm -rf {} +
size=$(du -sm "$KIT" | cut -f1)
say "$KIT: $size MiB"
[ "$size" -le "$MAX" ] || { say "error: $KIT is $size MiB, over $MAX MiB (the device tool carries 64 MiB with the tree)"; exit 1; }
echo "there: bench/device.sh"
