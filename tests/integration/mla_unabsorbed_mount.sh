#!/bin/bash
# deepseek2 in the unabsorbed form of older files (attn_kv_b, no
# key_length_mla; synthetic) through the mount.  llama.cpp keeps a full
# per-head cache for it (keys of nope + rotated dims, values of nope); its
# chunks are V_NARROW (kvfs(5)): ls -l is K and V at the key's width, kvfsctl
# info says so and what the absorbed form would cache; a blend through the
# mount equals the in-process one and ratio 1.0 a full prefill; llama.cpp
# restores the llama/ view (its own head order, values without the zeros)
# to the cache it computes itself, both V layouts, and importing it gives the
# very same chunk back; a q8 chunk's view restores too.
. "$(dirname "$0")/../lib.sh"
MODEL=$T/ds2kvb.gguf
"$KVFSCTL" mkmodel -o "$MODEL" --arch deepseek2 --mla-unabsorbed --layers 4 --embd 256 --heads 4 --ff 256 \
    --seed 5 || exit 1
mount_kvfs a "model=$MODEL" || exit 1
M=$T/a.mnt
license_chunks "$M" 600 Apache-2.0 GPL-3
check "prefill through the mount gives chunks" test -n "${h[1]}" -a -n "${h[2]}"
n=$(getfattr --absolute-names --only-values -n user.kvfs.tokens "$M/chunks/${h[1]}.kv")
# 4 layers of n rows of K and V, each 4 heads x 48 f16 values (V: 16 zeros, then 32), 4 KiB aligned
want=$(python3 -c "a=lambda x: -(-x // 4096) * 4096; print(a(128 + 4 * $n + 24 * 4) + 4 * a($n * 2 * 4 * 48 * 2))")
size=$(stat -c %s "$M/chunks/${h[1]}.kv")
check "ls -l: K and V at the key's width ($size bytes for $n tokens)" test "$size" = "$want"
check "kvfsctl info on the model: 320 values in llama.cpp, 384 in a chunk, the absorbed form 80 (20.8%)" sh -c \
    "'$KVFSCTL' info '$MODEL' | grep -q '^kv cache: *unabsorbed latent attention.* 320 values .* 384 in a chunk.* 80 .*: 20.8%'"
check "kvfsctl info on a chunk: 32 of each head's 48 dims" sh -c \
    "'$KVFSCTL' info '$M/chunks/${h[1]}.kv' | grep -q '^values: *32 of each head.s 48 dims, after 16 zeros'"
check "kvfsctl info --json: v_narrow" sh -c \
    "'$KVFSCTL' info --json '$M/chunks/${h[1]}.kv' | grep -q '\"v_narrow\": true'"
Q=$'\nQ: which one?'
blend_vs_local "$M"
# llama.cpp's view: per layer K rows of 4 x 48, V rows of 4 x 32 (no zeros)
vsize=$(stat -c %s "$M/llama/${h[1]}.llama")
want=$((12 + 4 * n + 8 + 12 * n + 8 + 4 * (12 + n * 192 * 2) + 4 * (12 + n * 128 * 2)))
check "llama/ lists the chunk's view, V of the values alone ($vsize bytes)" sh -c \
    "ls '$M/llama' | grep -qx '${h[1]}.llama' && test '$vsize' = '$want'"
# a chunk of another form of V is refused by the model, not misread
"$KVFSCTL" mkmodel -o "$T/abs.gguf" --arch deepseek2 --layers 4 --embd 256 --heads 4 --ff 256 --seed 5
"$KVFSCTL" prefill -m "$T/abs.gguf" -o "$T/abs.kv" --ids 1,2,3,4,5 > /dev/null 2>&1
check "the absorbed form's chunk is refused by this model" sh -c \
    "! '$KVFSCTL' generate -m '$MODEL' --kv '$T/abs.kv' -n 1 > /dev/null 2>&1"
if python3 -c 'import llama_cpp' 2>/dev/null; then
    view_restores_and_imports "$M"
    R=$KVFS_ROOT/tests/oracle/llama_restore_check.py
    # q8: values quantized per token over the row, zeros included; its view decodes them
    q8=$(printf 'The quick brown fox jumps over the lazy dog. %.0s' $(seq 1 12) |
        "$KVFSCTL" prefill -m "$MODEL" -M "$M" --dtype q8 - 2>/dev/null | cut -d' ' -f1)
    cp "$M/llama/$q8.llama" "$T/q8.llama"
    out=$(python3 "$R" "$MODEL" "$T/q8.llama" 72,58,97 0.3 2>/dev/null); rc=$?
    check "a q8 chunk's view restores in llama.cpp: $out" test -n "$q8" -a $rc = 0
else
    echo "skip: llama-cpp-python unavailable: llama.cpp's restore not checked"
fi
finish
