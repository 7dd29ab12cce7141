#!/bin/bash
# Mixture of experts and latent attention: prefill tokens/s of kvfs vs
# llama.cpp side by side on synthetic Q4_K_M files shaped like a small Qwen3
# MoE and a scaled-down DeepSeek-V2-Lite (MLA), written once into MOE_DIR
# (default $BUILD/moe-models, ~1.2 GB; 4 GB of scratch while writing); then
# a blend's TTFT at MOE_RATIO (default 0.15) against kvfs's full prefill.
# RUNS (default 3), MOE_TOKENS (default 512; a comma list; empty: only the
# blend rows), MOE_MODELS
# (default qwen3moe,deepseek2), MOE_BLEND_PROMPTS (default 3), THREADS
# (default all cores).  See bench/moe.py.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export BUILD
python3 -c 'import llama_cpp' 2>/dev/null || tools/install-oracle.sh >&2 || true
python3 bench/moe.py
