#!/bin/bash
# Prefill tokens/s of kvfs vs llama.cpp side by side; sgemm GFLOP/s.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
cc -O2 -Igpu -Igpu/ggml -Iindex -I/usr/include/x86_64-linux-gnu/openblas-pthread bench/sgemm.c "$BUILD/libkvfs_model.a" \
   "$BUILD/libkvfs_core.a" $(pkg-config --libs libcrypto sqlite3 libzstd libxxhash) -ldl -lm -lpthread -o /tmp/kvfs-sgemm
python3 bench/prefill_oracle.py
