#!/bin/bash
# Every architecture kvfs runs (llama, qwen2, qwen3, gemma2, gemma3, gemma4,
# granite, smollm3, olmo2, phi3, mistral3, qwen3moe, gpt-oss, deepseek2; and
# with linear and YaRN RoPE scaling) against
# llama.cpp on a synthetic model of it, F32 and quantized by llama.cpp to Q8_0
# and Q4_K_M (synth_arch_oracle.py); and each blends (ratio 1.0 = a full
# prefill; gemma4's chunks with their layer shapes, kvfs(5)).
cd "$(dirname "$0")/../.." || exit 1
export KVFS_ROOT=$PWD
. tests/oracle/lib/arch_variant.sh
python3 -c 'import llama_cpp' 2>/dev/null || tools/install-oracle.sh || true
python3 -c 'import llama_cpp' 2>/dev/null || { echo "skip: SKIPPING ORACLE TEST: llama-cpp-python cannot be installed"; exit 77; }
python3 tests/oracle/synth_arch_oracle.py || exit 1
# and each one blends: ratio 1.0 gives a full prefill's K/V and next token,
# ratio 0.15 (query selection, chunk shift) runs
K=${BUILD:-build}/kvfsctl
T=$(mktemp -d "${TMPDIR:-/tmp}/kvfs-synth-blend.XXXXXX")
trap 'rm -rf "$T"' EXIT
fails=0
# ARCH@KIND: with RoPE scaling of that kind (factor 4), whose frequencies the
# chunk shift follows; deepseek2-kvb: MLA unabsorbed (arch_variant)
for arch in llama qwen2 qwen3 gemma2 gemma3 gemma4 granite smollm3 olmo2 phi3 mistral3 qwen3moe gpt-oss deepseek2 \
    deepseek2-kvb llama@yarn gemma3@linear olmo2@yarn; do
    M=$T/$arch.gguf
    arch_variant "$arch"
    # gemma4: 6 layers, so that two of them read earlier layers' caches (shared KV)
    "$K" mkmodel -o "$M" --arch "$base" "${scaling[@]}" --layers $([ $base = gemma4 ] && echo 6 || echo 4) --embd 128 \
        --heads 4 --kv-heads 2 --ff 256 --seed 5
    "$K" prefill -m "$M" -o "$T/c1.kv" --ids "$(seq -s, 40 139)" > /dev/null 2>&1
    "$K" prefill -m "$M" -o "$T/c2.kv" --ids "$(seq -s, 60 159)" > /dev/null 2>&1
    "$K" blend --local -m "$M" -o "$T/full.kv" --ratio 1.0 --suffix 'Q: why?' "$T/c1.kv" "$T/c2.kv" > /dev/null 2>&1 &&
        "$K" blend --local -m "$M" -o "$T/q.kv" --ratio 0.15 --suffix 'Q: why?' "$T/c1.kv" "$T/c2.kv" > /dev/null 2>&1 ||
        { echo "FAIL $arch: kvfsctl blend --local"; fails=$((fails + 1)); continue; }
    ids=$("$K" info --json --tokens "$T/full.kv" | python3 -c 'import json,sys; print(",".join(map(str, json.load(sys.stdin)["tokens"])))')
    "$K" prefill -m "$M" -o "$T/ref.kv" --ids "$ids" > /dev/null 2>&1
    want=$("$K" logits -m "$M" --tokens "$ids" --top 1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["top"][0][0])')
    got=$("$K" generate -m "$M" --kv "$T/full.kv" -n 1 --ids 2>/dev/null)
    if "$K" compare --max-err 0 "$T/full.kv" "$T/ref.kv" > /dev/null 2>&1 && [ -n "$want" ] && [ "$got" = "$want" ]; then
        echo "ok   $arch: blend ratio 1.0 = full prefill (K/V, next token $got); ratio 0.15 blends"
    else
        echo "FAIL $arch: blend ratio 1.0 against a full prefill: $("$K" compare "$T/full.kv" "$T/ref.kv" 2>&1 | head -c 200), next token $got / $want"
        fails=$((fails + 1))
    fi
done
exit $((fails > 0))
