#!/bin/bash
# Blending quality and TTFT on RAG-like prompts built from real text on the
# machine: BLEND_PROMPTS prompts (default 30) of BLEND_CHUNKS chunks (default
# 6) of ~BLEND_CHUNK_BYTES bytes (default 2000, ~450-512 tokens) and a
# question; kvfsctl eval on each; prints a markdown section with medians.
# BLEND_SELECT picks the selections (default query,fixed,gradual),
# BLEND_RATIOS the ratios (default 0.05,0.1,0.15,0.3,1).  Then the same on
# Gemma 3 270M (sliding-window layers) over its first BLEND_GEMMA_PROMPTS
# prompts (default 10; 0 skips it), each chunk with its BOS (--bos each).
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
python3 bench/blend_eval.py
GEMMA=models/gemma-3-270m-q4_k_m.gguf
if [ "${BLEND_GEMMA_PROMPTS:-10}" -gt 0 ] && { [ -s "$GEMMA" ] || tools/fetch-model.sh gemma3 >&2; }; then
    echo
    KVFS_ORACLE_MODEL=$PWD/$GEMMA BLEND_PROMPTS=${BLEND_GEMMA_PROMPTS:-10} python3 bench/blend_eval.py
fi
