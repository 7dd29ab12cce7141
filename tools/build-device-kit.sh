#!/bin/bash
# Build the CUDA test and benchmark binaries (and kvfs, kvfsctl) into build-gpu/ for a lent GPU
# machine that has the CUDA driver and toolkit libraries but maybe not our
# other dependencies: no RADOS, a portable -march, and the shared libraries
# they load (SQLite, zstd, liburing, xxHash, OpenSSL, OpenBLAS) copied along.
set -eu
cd "$(dirname "$0")/.."
rm -rf build-gpu/tests build-gpu/gpu_blend build-gpu/kvfs build-gpu/kvfsctl build-gpu/libkvfs-cuda.so
make -j"$(nproc)" BUILD=build-gpu NO_RADOS=1 ARCHFLAGS=-march=x86-64-v3 build-gpu/tests/gpu_test_backend_ops build-gpu/gpu_blend \
    build-gpu/kvfs build-gpu/kvfsctl build-gpu/libkvfs-cuda.so >/dev/null
mkdir -p build-gpu/lib
for l in libsqlite3.so.0 libzstd.so.1 liburing.so.2 libxxhash.so.0 libcrypto.so.3 libopenblas.so.0 libpcre2-8.so.0 \
         libgfortran.so.5 libquadmath.so.0; do
    cp -L "/lib/x86_64-linux-gnu/$l" build-gpu/lib/
done
mkdir -p build-gpu/bin && cp /usr/bin/fusermount3 build-gpu/bin/ # for tests/gpu/*.sh
# objects are not needed there: keep what travels small
rm -rf build-gpu/blend build-gpu/gpu build-gpu/index build-gpu/bench build-gpu/fs build-gpu/tools build-gpu/tests/unit build-gpu/*.a \
    build-gpu/third_party # libfuse 3.17 is linked in statically (tools/build-libfuse.sh)
du -sh build-gpu
echo "there: PATH=\$PWD/build-gpu/bin:\$PATH LD_LIBRARY_PATH=\$PWD/build-gpu/lib BUILD=build-gpu tests/run.sh gpu"
