#!/bin/bash
# Blending quality and TTFT on RAG-like prompts built from real text on the
# machine: BLEND_PROMPTS prompts (default 30) of BLEND_CHUNKS chunks (default
# 6) of ~BLEND_CHUNK_BYTES bytes (default 2000, ~450-512 tokens) and a
# question; kvfsctl eval on each; prints a markdown section with medians.
# BLEND_SELECT picks the selections (default query,fixed,gradual),
# BLEND_RATIOS the ratios (default 0.05,0.1,0.15,0.3,1).
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
exec python3 bench/blend_eval.py
