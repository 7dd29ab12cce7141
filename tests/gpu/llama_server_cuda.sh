#!/bin/bash
# llama.cpp's CUDA server restores a blend that kvfs made on the GPU and
# continues it with the tokens kvfsctl generate --kv --backend cuda gives
# (near-tie rule), and the other way round: tests/engines/llama_server.sh's
# checks with the daemon on CUDA, llama-server built for CUDA (the device
# kit's) with every layer on the GPU, and a Q4_K_M model: a synthetic one of
# ours quantized by llama-quantize (no real model travels to the GPU
# machine).  Skips (77) without a GPU or the CUDA llama.cpp build.
. "$(dirname "$0")/../lib.sh"
nvidia-smi -L >/dev/null 2>&1 || skip "no NVIDIA GPU"
BIN=${LLAMA_CUDA_BIN:-$BUILD/llama-cuda/bin}
[ -x "$BIN/llama-server" ] && [ -x "$BIN/llama-quantize" ] || skip "llama.cpp's CUDA build missing ($BIN)"
"$KVFSCTL" mkmodel -o "$T/f32.gguf" --layers 4 --embd 512 --heads 8 --kv-heads 2 --ff 1536 --seed 11 || exit 1
"$BIN/llama-quantize" "$T/f32.gguf" "$T/q4km.gguf" Q4_K_M > "$T/quantize.log" 2>&1 || { cat "$T/quantize.log"; exit 1; }
KVFS_ENGINE_MODEL=$T/q4km.gguf KVFS_ENGINE_BACKEND=cuda LLAMA_SERVER=$BIN/llama-server LLAMA_SERVER_ARGS="-ngl 99" \
    KVFS_ENGINE_CTX=4096 KVFS_ENGINE_DOC_BYTES=500 \
    bash "$KVFS_ROOT/tests/engines/llama_server.sh"
