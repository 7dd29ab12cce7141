#!/bin/bash
# Our ggml dequantization and activation quantization against llama.cpp's
# own ggml (the llama-cpp-python install's libggml), bit for bit.
cd "$(dirname "$0")/../.." || exit 1
export KVFS_ROOT=$PWD
python3 -c 'import llama_cpp' 2>/dev/null || tools/install-oracle.sh || true
python3 -c 'import llama_cpp' 2>/dev/null || { echo "skip: SKIPPING ORACLE TEST: llama-cpp-python cannot be installed"; exit 77; }
exec python3 tests/oracle/quant_oracle.py
