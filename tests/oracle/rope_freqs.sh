#!/bin/bash
# Llama 3.1's RoPE frequency factors against llama.cpp (rope_freqs_oracle.py),
# and a blend at ratio 1.0 of such a model equals its full prefill's tokens;
# linear and YaRN RoPE scaling against llama.cpp on the same real model.
. "$(dirname "$0")/../lib.sh"
python3 -c 'import llama_cpp' 2>/dev/null || "$KVFS_ROOT/tools/install-oracle.sh" > /dev/null 2>&1 || true
python3 -c 'import llama_cpp' 2>/dev/null || skip "SKIPPING ORACLE TEST: llama-cpp-python cannot be installed"
[ -s "$KVFS_ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf" ] || "$KVFS_ROOT/tools/fetch-model.sh" || skip "model unavailable"
python3 "$KVFS_ROOT/tests/oracle/rope_freqs_oracle.py" "$T/scaled.gguf" > "$T/oracle.out" 2>&1
rc=$?
[ $rc = 77 ] && skip "$(tail -1 "$T/oracle.out")"
sed 's/^/  /' "$T/oracle.out"
check "kvfs's logits with rope_freqs are llama.cpp's: $(tail -1 "$T/oracle.out")" test $rc = 0
# linear and YaRN RoPE scaling (the file's rope.scaling.* keys) on the same real model
for kind in linear yarn; do
    python3 "$KVFS_ROOT/tests/oracle/rope_freqs_oracle.py" "$T/$kind.gguf" --scaling $kind > "$T/$kind.out" 2>&1
    rc=$?
    sed 's/^/  /' "$T/$kind.out"
    check "kvfs's logits with $kind RoPE scaling are llama.cpp's: $(tail -1 "$T/$kind.out")" test $rc = 0
    check "kvfsctl info says it: $("$KVFSCTL" info "$T/$kind.gguf" 2>&1 | grep '^rope scaling')" sh -c \
        "'$KVFSCTL' info '$T/$kind.gguf' | grep -q '^rope scaling: $kind, factor'"
done
M=$T/scaled.gguf
MODEL=$M
check "kvfsctl info: supported" sh -c "'$KVFSCTL' info '$M' | grep -q '^supported: *yes'"
mount_kvfs a "model=$M" || exit 1
A=$T/a.mnt
h1=$(license_chunk "$A" GPL-3 900 "$M")
h2=$(license_chunk "$A" Apache-2.0 900 "$M")
Q=$'\nQuestion: Which license is this?\nAnswer:'
"$KVFSCTL" blend -M "$A" --name full --ratio 1.0 --suffix "$Q" "$h1" "$h2" > /dev/null 2>&1
"$KVFSCTL" blend -M "$A" --name q --ratio 0.15 --suffix "$Q" "$h1" "$h2" > /dev/null 2>&1
check "a blend at ratio 1.0 and one at 0.15 (query selection, chunk shift) succeed" test -s "$A/blends/full.kv" -a -s "$A/blends/q.kv"
"$KVFSCTL" info --json --tokens "$A/blends/full.kv" | python3 -c 'import json,sys; print(" ".join(map(str, json.load(sys.stdin)["tokens"])))' > "$T/ids"
want=$("$KVFSCTL" logits -m "$M" --tokens-file "$T/ids" --top 1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["top"][0][0])')
got=$("$KVFSCTL" generate -m "$M" --kv "$A/blends/full.kv" -n 1 --ids 2>/dev/null)
check "ratio 1.0: the next token is a full prefill's ($got / $want)" test -n "$want" -a "$got" = "$want"
"$KVFSCTL" prefill -m "$M" -o "$T/full.kv" --ids "$(tr ' ' ',' < "$T/ids")" > /dev/null 2>&1
check "ratio 1.0: the K/V are a full prefill's ($("$KVFSCTL" compare "$A/blends/full.kv" "$T/full.kv" 2>&1 | head -c 150))" \
    "$KVFSCTL" compare --max-err 0.01 "$A/blends/full.kv" "$T/full.kv"
finish
