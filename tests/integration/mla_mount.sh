#!/bin/bash
# A latent-attention model (deepseek2, synthetic) through the mount: its
# chunks hold the cached row alone (kvfs(5), MLA chunks: ls -l is that size,
# a quarter of the would-be full K/V here), a blend through the mount equals
# the in-process one and ratio 1.0 a full prefill, and llama.cpp restores its
# llama/ view (K alone, llama.cpp's row order) to the cache it computes itself,
# and importing that state gives the very same chunk back.
. "$(dirname "$0")/../lib.sh"
MODEL=$T/ds2.gguf
"$KVFSCTL" mkmodel -o "$MODEL" --arch deepseek2 --layers 4 --embd 128 --heads 4 --ff 256 --seed 5 || exit 1
mount_kvfs a "model=$MODEL" || exit 1
M=$T/a.mnt
license_chunks "$M" 600 Apache-2.0 GPL-3
check "prefill through the mount gives chunks" test -n "${h[1]}" -a -n "${h[2]}"
n=$(getfattr --absolute-names --only-values -n user.kvfs.tokens "$M/chunks/${h[1]}.kv")
# 4 layers of n rows of 8 rotated + 32 latent f16 values, each layer 4 KiB aligned, after a 4 KiB aligned header
want=$(python3 -c "a=lambda x: -(-x // 4096) * 4096; print(a(128 + 4 * $n + 24 * 4) + 4 * a($n * 40 * 2))")
size=$(stat -c %s "$M/chunks/${h[1]}.kv")
check "ls -l: the cached rows alone ($size bytes for $n tokens; full K/V: $((n * 4 * 4 * (24 + 16) * 2)) unpadded)" \
    test "$size" = "$want"
check "kvfsctl info on the model: 40 values per token and layer against 160 (25.0%)" sh -c \
    "'$KVFSCTL' info '$MODEL' | grep -q '^kv cache: *latent attention: 40 values .* would be 160 .*: 25.0%'"
check "kvfsctl info: V derived from K" sh -c "'$KVFSCTL' info '$M/chunks/${h[1]}.kv' | grep -q '^values: *K.s rows'"
Q=$'\nQ: which one?'
blend_vs_local "$M"
# llama.cpp's view: K alone (llama.cpp keeps no V for MLA), each row latent first
vsize=$(stat -c %s "$M/llama/${h[1]}.llama")
want=$((12 + 4 * n + 8 + 12 * n + 8 + 4 * (12 + n * 40 * 2) + 0))
check "llama/ lists the chunk's view, K alone ($vsize bytes)" sh -c \
    "ls '$M/llama' | grep -qx '${h[1]}.llama' && test '$vsize' = '$want'"
if python3 -c 'import llama_cpp' 2>/dev/null; then
    # llama.cpp's own prompt eval against its restore of the view: the same cache (a row in kvfs's order
    # instead moves the log-probs by 5.6)
    view_restores_and_imports "$M"
else
    echo "skip: llama-cpp-python unavailable: llama.cpp's restore not checked"
fi
finish
