#!/bin/bash
# gemma4 (synthetic) through a mount: its chunks carry layer shapes
# (kvfs(5), Layer shapes: each layer at its own KV heads x head width, the
# shared-KV layers nothing), so ls -l is the sum of the owning layers'
# padded sizes; kvfsctl info and the Python reader list the shapes; a chunk
# loaded back decodes to the very token a full prefill gives; the store
# re-reads it after a remount; a blend through the mount is the in-process
# one and ratio 1.0 a full prefill, a batch is blended as one (at 0.999 its
# members are their own blends byte for byte); q8 gives a layer-shaped
# chunk (gemma4_quant.sh: the quantized dtypes); llama/ views (llama_engine_gemma4.sh has llama.cpp
# read them) stat at the size read.
. "$(dirname "$0")/../lib.sh"
MODEL=$T/g4.gguf
"$KVFSCTL" mkmodel -o "$MODEL" --arch gemma4 --layers 6 --embd 128 --heads 4 --kv-heads 2 --ff 256 --seed 5 || exit 1
mount_kvfs a "model=$MODEL" || exit 1
M=$T/a.mnt
license_chunks "$M" 600 Apache-2.0 GPL-3
check "prefill through the mount gives gemma4 chunks" test -n "${h[1]}" -a -n "${h[2]}"
C=$M/chunks/${h[1]}.kv
n=$(getfattr --absolute-names --only-values -n user.kvfs.tokens "$C")
# the synthetic model's layers: local (even) 2 KV heads x 32, global (odd)
# 1 x 64, layers 4 and 5 reading layers 2 and 3's caches: 4 layers of n
# rows of 64 f16 values for K and for V, each 4 KiB aligned, after a header
# of the tokens, 6 table entries and 6 shape entries
want=$(python3 -c "a=lambda x: -(-x // 4096) * 4096; print(a(128 + 4 * $n + 24 * 6 + 16 * 6) + 4 * a($n * 64 * 2 * 2))")
size=$(stat -c %s "$C")
check "ls -l: the four layers that own a cache ($size bytes for $n tokens)" test "$size" = "$want"
check "kvfsctl info: each layer's shape, the shared-KV layers their source's cache" sh -c \
    "'$KVFSCTL' info '$C' | grep -q '^layer shapes: 0: 2x32 (rope 32), 1: 1x64 (rope 64), .* 4: layer 2.s cache, 5: layer 3.s cache'"
"$KVFSCTL" info --json --tokens "$C" > "$T/info.json"
ids=$(python3 -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))["tokens"])))' "$T/info.json")
want_tok=$("$KVFSCTL" logits -m "$MODEL" --tokens "$ids" --top 1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["top"][0][0])')
got_tok=$("$KVFSCTL" generate -m "$MODEL" --kv "$C" -n 1 --ids 2>/dev/null)
check "the chunk loaded back continues as a full prefill does (token $got_tok, $want_tok)" \
    test -n "$want_tok" -a "$got_tok" = "$want_tok"
"$KVFSCTL" prefill -m "$MODEL" -o "$T/ref.kv" --ids "$ids" > /dev/null 2>&1
check "the mount's chunk is kvfsctl prefill -o's, byte for byte" cmp "$C" "$T/ref.kv"
if python3 -c 'import numpy' 2>/dev/null; then
    check "the Python reader: shapes, views at each layer's width, the shared layers their source's, the name" \
        env PYTHONPATH="$KVFS_ROOT/python" python3 - "$C" "${h[1]}" <<'EOF'
import sys, numpy as np, kvfs
f = kvfs.open(sys.argv[1])
assert f.flags & kvfs.FLAG_LAYER_SHAPES and f.hash == sys.argv[2], f
assert [s[:2] for s in f.layer_shapes] == [(2, 32), (1, 64)] * 3, f.layer_shapes
assert [s[3] for s in f.layer_shapes] == [0, 1, 2, 3, 2, 3], f.layer_shapes
assert f.k(0).shape == (f.n_tokens, 2, 32) and f.v(1).shape == (f.n_tokens, 1, 64)
assert np.array_equal(f.k(4), f.k(2)) and np.array_equal(f.v(5), f.v(3))
assert np.isfinite(f.k(3).astype(np.float32)).all() and np.abs(f.k(3).astype(np.float32)).max() > 0
EOF
fi
"$KVFSCTL" prefill -m "$MODEL" -o "$T/q8.kv" --dtype q8 --ids "$ids" > /dev/null 2>&1
check "q8: a layer-shaped q8 chunk (gemma4_quant.sh tests the quantized dtypes)" sh -c \
    "'$KVFSCTL' info '$T/q8.kv' | grep -q '^dtype: *q8' && '$KVFSCTL' info '$T/q8.kv' | grep -q '^layer shapes: 0: 2x32'"
# blends: each layer shifted at its own dims, base and factors, recomputed
# rows with their per-layer inputs, the shared-KV layers over their source
Q=$'\nQ: which one?'
"$KVFSCTL" blend -M "$M" --name r --ratio 0.15 --suffix "$Q" ${h[1]} ${h[2]} > /dev/null
"$KVFSCTL" blend --local -m "$MODEL" -o "$T/local.kv" --ratio 0.15 --suffix "$Q" "$C" "$M/chunks/${h[2]}.kv" 2>/dev/null
check "blend through the mount == in-process blend" cmp "$T/local.kv" "$M/blends/r.kv"
"$KVFSCTL" blend --local -m "$MODEL" -o "$T/full.kv" --ratio 1.0 --suffix "$Q" "$C" "$M/chunks/${h[2]}.kv" 2>/dev/null
bids=$("$KVFSCTL" info --json --tokens "$T/full.kv" | python3 -c 'import json,sys; print(",".join(map(str, json.load(sys.stdin)["tokens"])))')
"$KVFSCTL" prefill -m "$MODEL" -o "$T/bref.kv" --ids "$bids" > /dev/null 2>&1
check "blend ratio 1.0 == a full prefill's K/V, every owning layer" "$KVFSCTL" compare --max-err 0 "$T/full.kv" "$T/bref.kv"
# a batch sharing its chunks: blended as one batch (kvfs_blend_batch, each
# layer at its own width, the recomputed rows' per-layer inputs); at 0.999
# (every row recomputed) each result is its recipe's own blend, byte for byte
printf '%s\n%s\nsuffix=Q\n%%%%\n%s\n%s\nsuffix=R\n' ${h[1]} ${h[2]} ${h[1]} ${h[2]} > "$T/batch.txt"
"$KVFSCTL" blend -M "$M" --batch "$T/batch.txt" > "$T/batch.out" 2>&1
check "a batch of two recipes sharing their chunks gives two blends" sh -c \
    "[ \$(grep -c '/blends/.*\.kv\$' '$T/batch.out') = 2 ] && for f in \$(cat '$T/batch.out'); do '$KVFSCTL' info \$f | grep -q '^blended: *yes' || exit 1; done"
check "... blended as one batch ($(grep -o '"batches": [0-9]*' "$M/.kvfs/stats"))" grep -q '"batches": 1,' "$M/.kvfs/stats"
printf '%s\n%s\nratio=0.999\nsuffix=Q\n%%%%\n%s\n%s\nratio=0.999\nsuffix=R\n' ${h[1]} ${h[2]} ${h[1]} ${h[2]} > "$T/batch9.txt"
"$KVFSCTL" blend -M "$M" --batch "$T/batch9.txt" > "$T/batch9.out" 2>&1
check "a batch at 0.999: two blends, one batch more ($(grep -o '"batches": [0-9]*' "$M/.kvfs/stats"))" \
    sh -c "[ \$(grep -c '/blends/.*\.kv\$' '$T/batch9.out') = 2 ] && grep -q '\"batches\": 2,' '$M/.kvfs/stats'"
i=0
for q in Q R; do
    i=$((i + 1))
    "$KVFSCTL" blend -M "$M" --name "one$q" --ratio 0.999 --suffix "$q" ${h[1]} ${h[2]} > /dev/null
    check "... member $q == its recipe blended alone by the mount, byte for byte" \
        cmp "$(sed -n ${i}p "$T/batch9.out")" "$M/blends/one$q.kv"
done
check "its llama/ view: size ($(stat -c %s "$M/llama/${h[1]}.llama" 2>&1)) = bytes read" \
    test "$(stat -c %s "$M/llama/${h[1]}.llama")" = "$(wc -c < "$M/llama/${h[1]}.llama")"
unmount_kvfs a
mount_kvfs a "model=$MODEL" || exit 1
check "after a remount the store reads it back, verified" cmp "$C" "$T/ref.kv"
finish
