#!/bin/bash
# kvfs's tokenizer against llama.cpp's own expected ids for the real-model
# vocabularies its source carries (models/ggml-vocab-*.gguf with .inp/.out:
# tokenizer_vocabs.py); a vocabulary kvfs cannot tokenize is refused with the
# reason, never tokenized wrong.
cd "$(dirname "$0")/../.." || exit 1
export KVFS_ROOT=$PWD
ls build/third_party/llama_cpp_python-*/vendor/llama.cpp/models/ggml-vocab-*.gguf > /dev/null 2>&1 ||
    tools/install-oracle.sh > /dev/null 2>&1 || true
exec python3 tests/oracle/tokenizer_vocabs.py
