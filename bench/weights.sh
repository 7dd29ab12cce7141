#!/bin/bash
# Weights kept encoded vs decoded to f32 vs llama.cpp (bench/weights.py).
set -eu
cd "$(dirname "$0")/.."
python3 -c 'import llama_cpp' 2>/dev/null || { echo "weights bench: llama-cpp-python missing" >&2; exit 0; }
RUNS=${RUNS:-3} python3 bench/weights.py
