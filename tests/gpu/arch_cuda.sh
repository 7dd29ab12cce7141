#!/bin/bash
# Every architecture kvfs runs, on CUDA against the CPU reference: a
# synthetic model of each (kvfsctl mkmodel, as synth_arch.sh checks against
# llama.cpp on the CPU), F32 and quantized by llama-quantize to Q4_K_M (the
# mixture-of-experts families also MXFP4_MOE: their experts in MXFP4),
# gives the CPU's next token and its top 10 log-probabilities within 0.02
# nats + 1e-3 of each value, for a few rows and for 300.  What only these
# architectures use runs here on a device: RoPE frequency factors
# (mistral3; gpt-oss's YaRN), attention and final soft-capping (gemma2),
# partial rotary (phi3), the experts' routing weights (qwen3moe's and
# gpt-oss's mul_rows), gpt-oss's attention sinks (5 rows: the f32 kernel,
# 300: the tensor cores'), swiglu_oai and biases, MXFP4 weights.  mkmodel's
# flags give gpt-oss heads of 64 (its real width), a window of 8 on every
# other layer.
# Skips (77) without a GPU; the quantized half without llama-quantize.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../oracle/lib/arch_variant.sh"
nvidia-smi -L >/dev/null 2>&1 || skip "no NVIDIA GPU"
QUANTIZE=${LLAMA_QUANTIZE:-$BUILD/llama-cuda/bin/llama-quantize}
python3 -c 'import random; random.seed(4); print(" ".join(str(random.randint(0, 256)) for _ in range(300)))' > "$T/ids300"
cut -d' ' -f1-5 "$T/ids300" > "$T/ids5"
# deepseek2 (MLA: strided gathers, offset rotations) and gemma4 (two head
# widths, shared-KV layers, per-layer embeddings) load on CUDA only with
# KVFS_ALLOW_UNCHECKED=1 until this check has passed on a device
export KVFS_ALLOW_UNCHECKED=1
# ARCH@KIND: with that RoPE scaling (factor 4): per-layer factors and YaRN's magnitude on the device
for arch in llama qwen2 qwen3 gemma2 gemma3 granite smollm3 olmo2 phi3 mistral3 qwen3moe gpt-oss deepseek2 gemma4 \
    deepseek2-kvb llama@yarn gemma3@linear; do
    layers=4
    arch_variant "$arch"
    [ "$base" = gemma4 ] && layers=6 # its two shared-KV layers then read layers 2 and 3, as in synth_arch
    "$KVFSCTL" mkmodel -o "$T/$arch.F32.gguf" --arch "$base" "${scaling[@]}" --layers $layers --embd 256 --heads 4 \
        --kv-heads 2 --ff 512 --seed 9 > /dev/null || { check "kvfsctl mkmodel --arch $arch" false; continue; }
    types=F32
    quants=Q4_K_M
    case $arch in qwen3moe | gpt-oss | deepseek2 | deepseek2-kvb) quants="Q4_K_M MXFP4_MOE" ;; esac
    for q in $quants; do
        if [ -x "$QUANTIZE" ] && "$QUANTIZE" "$T/$arch.F32.gguf" "$T/$arch.$q.gguf" "$q" > "$T/q.log" 2>&1; then
            types="$types $q"
        fi
    done
    for type in $types; do
        for n in 5 300; do
            "$KVFSCTL" logits -m "$T/$arch.$type.gguf" --tokens-file "$T/ids$n" --top 10 --backend cpu > "$T/cpu.json"
            "$KVFSCTL" logits -m "$T/$arch.$type.gguf" --tokens-file "$T/ids$n" --top 10 --backend cuda > "$T/cuda.json" \
                2> "$T/cuda.err"
            verdict=$(python3 - "$T/cpu.json" "$T/cuda.json" "$T/cuda.err" <<'PY'
import json, math, sys
try:
    a, b = (json.load(open(p)) for p in sys.argv[1:3])
except ValueError:
    print("CUDA gave no answer:", open(sys.argv[3]).read().strip()[:200], "FAIL")
    sys.exit()
top_b = dict((t, lp) for t, lp in b["top"])
worst = max(abs(lp - top_b.get(t, -math.inf)) / (0.02 + 1e-3 * abs(lp)) for t, lp in a["top"])
same = a["top"][0][0] == b["top"][0][0]
print(f"top-1 {'same' if same else 'DIFFERENT'}, largest log-prob difference {worst:.2f} of its bound",
      "ok" if same and worst <= 1 else "FAIL")
PY
)
            check "$arch $type, $n tokens, CUDA vs CPU: $verdict" sh -c "echo '$verdict' | grep -q ' ok$'"
        done
    done
done
finish
