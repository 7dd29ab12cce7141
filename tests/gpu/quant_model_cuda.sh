#!/bin/bash
# A quantized model on CUDA, its weights kept on the device as the file has
# them: a synthetic model of our own quantized by llama.cpp's llama-quantize
# (Q4_K_M: Q4_K and Q6_K rows; Q4_1; Q8_0) gives the CPU reference's
# next token and, within 0.02 nats + 1e-3 of each value, its top 10
# log-probabilities on CUDA, for a few rows (products that decode
# as they go) and for 300 (f16 products on the tensor cores).  Skips (77)
# without a GPU or without llama-quantize (the device kit carries it).
. "$(dirname "$0")/../lib.sh"
nvidia-smi -L >/dev/null 2>&1 || skip "no NVIDIA GPU"
QUANTIZE=${LLAMA_QUANTIZE:-$BUILD/llama-cuda/bin/llama-quantize}
[ -x "$QUANTIZE" ] || skip "llama-quantize not built (CUDA_ARCH=90 tools/build-llama-server.sh)"
"$KVFSCTL" mkmodel -o "$T/f32.gguf" --layers 4 --embd 512 --heads 8 --kv-heads 2 --ff 1536 --seed 7 || exit 1
python3 -c 'import random; random.seed(3); print(" ".join(str(random.randint(0, 256)) for _ in range(300)))' > "$T/ids300"
cut -d' ' -f1-5 "$T/ids300" > "$T/ids5"
for type in Q4_K_M Q4_1 Q8_0; do
    "$QUANTIZE" "$T/f32.gguf" "$T/$type.gguf" "$type" > "$T/quantize.$type.log" 2>&1
    check "llama-quantize wrote a $type model" test -s "$T/$type.gguf"
    for n in 5 300; do
        "$KVFSCTL" logits -m "$T/$type.gguf" --tokens-file "$T/ids$n" --top 10 --backend cpu > "$T/cpu.json"
        "$KVFSCTL" logits -m "$T/$type.gguf" --tokens-file "$T/ids$n" --top 10 --backend cuda > "$T/cuda.json"
        verdict=$(python3 - "$T/cpu.json" "$T/cuda.json" <<'PY'
import json, math, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
top_b = dict((t, lp) for t, lp in b["top"])
# the CPU's top 10 on CUDA: each log-probability within 0.02 nats plus 1e-3
# of its size (a random model's logits span hundreds of nats, and f16
# products agree with the CPU's to ~1e-3, as the op checks say)
worst = max(abs(lp - top_b.get(t, -math.inf)) / (0.02 + 1e-3 * abs(lp)) for t, lp in a["top"])
same = a["top"][0][0] == b["top"][0][0]
print(f"top-1 {'same' if same else 'DIFFERENT'}, largest log-prob difference {worst:.2f} of its bound",
      "ok" if same and worst <= 1 else "FAIL")
PY
)
        check "$type, $n tokens, CUDA vs CPU: $verdict" sh -c "echo '$verdict' | grep -q ' ok$'"
    done
done
finish
