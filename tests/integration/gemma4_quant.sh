#!/bin/bash
# Quantized gemma4 chunks (kvfs(5), Layer shapes with q8, q4 and q4s): each
# layer that owns a cache is quantized along its own K/V rows, so ls -l is
# the per-layer block sizes; kvfsctl convert to each dtype is prefill
# --dtype's chunk and converts back to the f16 chunk's name; compare finds
# each within its dtype's tolerance of f16 (kv_quant.sh's: 1% q8, 16% q4 and
# q4s); the Python reader decodes at each layer's shape what kvfs decodes;
# through a mount ratio 1.0 from quantized chunks is the f16 chunks' blend
# byte for byte and continues as a full prefill does, a blend of q8 chunks
# is within 5% of the f16 one's, recipe dtype= and -o kv_quant store
# quantized gemma4 chunks, llama/ views are the decoded values as f16; a
# model whose layer rows are not a multiple of 64 is refused with the reason;
# kvfsctl eval --kv-quant quantizes gemma4 caches at each layer's width.
. "$(dirname "$0")/../lib.sh"
MODEL=$T/g4.gguf
"$KVFSCTL" mkmodel -o "$MODEL" --arch gemma4 --layers 6 --embd 128 --heads 4 --kv-heads 2 --ff 256 --seed 5 || exit 1
for i in 1 2; do
    f=$(echo /usr/share/common-licenses/{Apache-2.0,GPL-3} | cut -d' ' -f$i)
    head -c 500 "$f" > "$T/d$i.txt" 2>/dev/null || head -c 500 /dev/urandom | base64 > "$T/d$i.txt"
    "$KVFSCTL" prefill -m "$MODEL" -o "$T/d$i.f16.kv" "$T/d$i.txt" > "$T/d$i.f16.hash" 2>/dev/null || fail "prefill d$i"
    for dt in q8 q4 q4s; do
        "$KVFSCTL" convert --dtype $dt "$T/d$i.f16.kv" "$T/d$i.$dt.kv" > "$T/d$i.$dt.hash" || fail "convert d$i to $dt"
    done
done
n=$("$KVFSCTL" info --json "$T/d1.f16.kv" | python3 -c 'import json,sys; print(json.load(sys.stdin)["n_tokens"])')
# the synthetic model's layers: local (even) 2 KV heads x 32, global (odd)
# 1 x 64, layers 4 and 5 reading layers 2 and 3's caches: 4 layers of rows
# of 64 values; the blocks (index/kvquant.h) along them, each layer padded
size_of() { # size_of DTYPE: the file's bytes from the format's rules, not from a reader
    python3 - "$1" "$n" <<'EOF'
import sys
dt, n, d = sys.argv[1], int(sys.argv[2]), 64
a = lambda x: -(-x // 4096) * 4096
cdiv = lambda x, y: -(-x // y)
layer = {"q8": cdiv(n, 32) * d * 34 + n * (d // 32) * 34,             # K per channel over 32 tokens, V per 32 channels
         "q4": cdiv(n, 64) * d * 36 + n * (d // 32) * 20,             # K over 64 tokens, V over 32 channels
         "q4s": 4 * d + cdiv(n - 1, 32) * d * 20 + (n - 1) * (d // 64) * 36}[dt]  # row 0 exact, K over 32, V over 64
print(a(128 + 4 * n + 24 * 6 + 16 * 6) + 4 * a(layer))
EOF
}
h16=$(cut -d' ' -f1 "$T/d1.f16.hash")
Q0='Q: which one?'
for dt in q8 q4 q4s; do
    size=$(stat -c %s "$T/d1.$dt.kv")
    check "$dt: ls -l is the per-layer block sizes ($size bytes for $n tokens)" test "$size" = "$(size_of $dt)"
done
"$KVFSCTL" prefill -m "$MODEL" --dtype q4 -o "$T/p.q4.kv" "$T/d1.txt" > /dev/null 2>&1
check "convert f16 -> q4 == prefill --dtype q4, byte for byte" cmp "$T/p.q4.kv" "$T/d1.q4.kv"
check "kvfsctl info: dtype q4s and the layer shapes" sh -c "'$KVFSCTL' info '$T/d1.q4s.kv' | grep -q '^dtype: *q4s' &&
    '$KVFSCTL' info '$T/d1.q4s.kv' | grep -q '^layer shapes: 0: 2x32 (rope 32), 1: 1x64 (rope 64), .* 5: layer 3.s cache'"
check "q8 within 1% of the f16 chunk (kvfsctl compare)" "$KVFSCTL" compare --max-err 0.01 "$T/d1.f16.kv" "$T/d1.q8.kv"
check "q4 within 16%" "$KVFSCTL" compare --max-err 0.16 "$T/d1.f16.kv" "$T/d1.q4.kv"
check "q4s within 16%" "$KVFSCTL" compare --max-err 0.16 "$T/d1.f16.kv" "$T/d1.q4s.kv"
check "... and q4 is not within 1% (compare sees the difference)" \
    sh -c "! '$KVFSCTL' compare --max-err 0.01 '$T/d1.f16.kv' '$T/d1.q4.kv' > /dev/null"
for dt in q8 q4 q4s; do
    back=$("$KVFSCTL" convert --dtype f16 "$T/d1.$dt.kv" "$T/d1.$dt.f16.kv")
    check "$dt -> f16: the f16 chunk's name and size" \
        test "$back" = "$h16" -a "$(stat -c %s "$T/d1.$dt.f16.kv")" = "$(stat -c %s "$T/d1.f16.kv")"
    check "... its values the $dt chunk's" "$KVFSCTL" compare --max-err 0.001 "$T/d1.$dt.kv" "$T/d1.$dt.f16.kv"
done
"$KVFSCTL" convert --dtype f32 "$T/d1.q4s.kv" "$T/d1.q4s.f32.kv" > /dev/null || fail "convert q4s to f32"
if python3 -c 'import numpy' 2>/dev/null; then
    check "the Python reader: each layer at its own shape, decoded as kvfs decodes, within tolerance of f16" \
        env PYTHONPATH="$KVFS_ROOT/python" python3 - "$T/d1.f16.kv" "$T/d1.q8.kv" "$T/d1.q4s.kv" "$T/d1.q4s.f32.kv" <<'EOF'
import sys, numpy as np, kvfs
a, q8, q4s, ref = (kvfs.open(p) for p in sys.argv[1:])
assert q4s.quantized and q4s.flags & kvfs.FLAG_LAYER_SHAPES and q4s.layer_shapes == a.layer_shapes
for layer in range(a.n_layer):
    for get in ("k", "v"):
        x = getattr(a, get)(layer).astype(np.float32)
        y = getattr(q4s, get)(layer)
        assert y.shape == x.shape == (a.n_tokens,) + a.layer_shapes[layer][:2], (get, layer, y.shape)
        assert np.array_equal(y, getattr(ref, get)(layer)), (get, layer)
        for f, tol in ((q8, 0.01), (q4s, 0.16)):
            e = np.linalg.norm(x - getattr(f, get)(layer)) / np.linalg.norm(x)
            assert e < tol, (get, layer, f.dtype_name, e)
assert np.array_equal(q4s.k(4), q4s.k(2)) and np.array_equal(q8.v(5), q8.v(3))
EOF
fi
# kvfsctl eval --kv-quant: the chunks' K/V through the codec at each layer's
# own width, as stored (prefix caching then differs from a full prefill by
# the codec's error alone: above 0, q8's below q4's, the same top token)
for q in q8 q4; do
    "$KVFSCTL" eval -m "$MODEL" --query "$Q0" --ratio 0 --greedy 2 --json --kv-quant $q "$T/d1.txt" "$T/d2.txt" \
        > "$T/eval.$q.json" 2>/dev/null || fail "eval --kv-quant $q"
done
check "eval --kv-quant: prefix caching within the codec's error ($(python3 -c "import json,sys; print(*[[r['kl'] for r in json.load(open(f))['results'] if r['method'] == 'prefix caching'][0] for f in sys.argv[1:]])" "$T/eval.q8.json" "$T/eval.q4.json"))" \
    python3 - "$T/eval.q8.json" "$T/eval.q4.json" <<'EOF2'
import json, sys
r8, r4 = ([r for r in json.load(open(f))["results"] if r["method"] == "prefix caching"][0] for f in sys.argv[1:])
assert 0 < r8["kl"] < r4["kl"] < 0.05 and r8["top1"] == r4["top1"] == 1, (r8, r4)
EOF2

# no RAM tier: a blend streams each layer from the objects (the io_uring loader)
mount_kvfs a "model=$MODEL,ram=0" || exit 1
M=$T/a.mnt
for i in 1 2; do for dt in f16 q8 q4 q4s; do
    hh=$(cut -d' ' -f1 "$T/d$i.$dt.hash")
    cp "$T/d$i.$dt.kv" "$M/chunks/$hh.kv" || fail "cp d$i.$dt into chunks/"
    eval "h_${i}_$dt=$hh"
done; done
check "a q4s gemma4 chunk reads back byte for byte, ls -l its size" sh -c \
    "cmp '$T/d2.q4s.kv' '$M/chunks/$h_2_q4s.kv' && [ \$(stat -c %s '$M/chunks/$h_2_q4s.kv') = $(stat -c %s "$T/d2.q4s.kv") ]"
check "user.kvfs.dtype is q4" test "$(getfattr --absolute-names --only-values -n user.kvfs.dtype "$M/chunks/$h_2_q4.kv")" = q4
Q=$'\nQ: which one?'
"$KVFSCTL" blend -M "$M" --name full16 --ratio 1 --suffix "$Q" $h_1_f16 $h_2_f16 > /dev/null
for dt in q8 q4 q4s; do
    eval "a1=\$h_1_$dt a2=\$h_2_$dt"
    "$KVFSCTL" blend -M "$M" --name full$dt --ratio 1 --suffix "$Q" $a1 $a2 > /dev/null
    check "ratio 1.0 from $dt chunks == ratio 1.0 from f16 chunks, byte for byte" \
        cmp "$M/blends/full16.kv" "$M/blends/full$dt.kv"
done
bids=$("$KVFSCTL" info --json --tokens "$M/blends/fullq4.kv" | python3 -c 'import json,sys; print(",".join(map(str, json.load(sys.stdin)["tokens"])))')
want_tok=$("$KVFSCTL" logits -m "$MODEL" --tokens "$bids" --top 1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["top"][0][0])')
got_tok=$("$KVFSCTL" generate -m "$MODEL" --kv "$M/blends/fullq4.kv" -n 1 --ids 2>/dev/null)
check "... and continues as a full prefill does (token $got_tok, $want_tok)" test -n "$want_tok" -a "$got_tok" = "$want_tok"
"$KVFSCTL" blend -M "$M" --name r16 --suffix "$Q" $h_1_f16 $h_2_f16 > /dev/null
"$KVFSCTL" blend -M "$M" --name r8 --suffix "$Q" $h_1_q8 $h_2_q8 > /dev/null
"$KVFSCTL" blend -M "$M" --name r4s --suffix "$Q" $h_1_q4s $h_2_q4 > /dev/null
check "a blend of q8 gemma4 chunks is within 5% of the f16 chunks' blend" \
    "$KVFSCTL" compare --max-err 0.05 "$M/blends/r16.kv" "$M/blends/r8.kv"
check "... streamed layer by layer from the store ($(grep -o '"bytes_read": [0-9]*' "$M/.kvfs/stats" | head -1))" \
    python3 -c "import json,sys; sys.exit(not json.load(open('$M/.kvfs/stats'))['blends']['pipeline']['bytes_read'] > 0)"
"$KVFSCTL" blend --local -m "$MODEL" -o "$T/r8-local.kv" --suffix "$Q" "$T/d1.q8.kv" "$T/d2.q8.kv" 2>/dev/null
check "... == the in-process blend of the q8 files, byte for byte" cmp "$T/r8-local.kv" "$M/blends/r8.kv"
check "a blend of q4s and q4 chunks verifies" "$KVFSCTL" info "$M/blends/r4s.kv"
"$KVFSCTL" blend -M "$M" --name asq8 --dtype q8 --suffix "$Q" $h_1_f16 $h_2_f16 > /dev/null
check "recipe dtype=q8: the result is a q8 gemma4 chunk" sh -c "'$KVFSCTL' info '$M/blends/asq8.kv' | grep -q '^dtype: *q8' &&
    '$KVFSCTL' info '$M/blends/asq8.kv' | grep -q '^layer shapes: 0: 2x32'"
check "... within 1% of the f16 result" "$KVFSCTL" compare --max-err 0.01 "$M/blends/r16.kv" "$M/blends/asq8.kv"
check "llama/ view of a q4 gemma4 chunk: as large as the f16 chunk's, and as many bytes read" sh -c \
    "s=\$(stat -c %s '$M/llama/$h_1_q4.llama'); [ \$s = \$(stat -c %s '$M/llama/$h_1_f16.llama') ] &&
     [ \$s = \$(wc -c < '$M/llama/$h_1_q4.llama') ]"
cp "$M/llama/$h_1_q4.llama" "$T/q4.llama"
unmount_kvfs a
check "fsck of the store with quantized gemma4 chunks is clean" "$KVFSCTL" fsck "$T/a.store"

# -o kv_quant=q4 on a gemma4 mount: an f16 chunk dropped in incoming/ is
# stored as the q4 chunk; the q4 chunk's llama/ view is the one of the f16
# chunk holding its decoded values (what llama.cpp reads: f16)
mount_kvfs b "model=$MODEL,kv_quant=q4" || exit 1
B=$T/b.mnt
cp "$T/d1.f16.kv" "$B/incoming/x.kv"
check "kv_quant=q4: an f16 gemma4 chunk dropped in incoming/ is stored as the q4 chunk" \
    test "$(ls "$B/chunks")" = "$h_1_q4.kv"
check "... the very chunk convert --dtype q4 writes" cmp "$B/chunks/$h_1_q4.kv" "$T/d1.q4.kv"
cp "$T/d1.q4.f16.kv" "$B/chunks/$h_1_f16.kv" || fail "cp the q4 chunk's values as f16"
check "its llama/ view == the view of the f16 chunk of its decoded values, byte for byte" \
    cmp "$T/q4.llama" "$B/llama/$h_1_f16.llama"
"$KVFSCTL" blend -M "$B" --name r --suffix "$Q" $h_1_q4 $h_1_f16 > /dev/null
check "... blend results are q4 gemma4 chunks" sh -c "'$KVFSCTL' info '$B/blends/r.kv' | grep -q '^dtype: *q4\$'"
# a model whose layers' rows do not fit the blocks (head width 24: rows of 48)
"$KVFSCTL" mkmodel -o "$T/g96.gguf" --arch gemma4 --layers 6 --embd 96 --heads 4 --kv-heads 2 --ff 256 --seed 5 || exit 1
"$KVFSCTL" prefill -m "$T/g96.gguf" -o "$T/w.f16.kv" "$T/d1.txt" > "$T/w.hash" 2>/dev/null
why=$("$KVFSCTL" prefill -m "$T/g96.gguf" -o "$T/w.q8.kv" --dtype q8 "$T/d1.txt" 2>&1 >/dev/null)
check "rows of 48: prefill --dtype q8 refused with the reason" \
    sh -c '[ ! -e "$1" ] && printf "%s" "$2" | grep -q "every layer.s K/V rows .* a multiple of 64"' _ "$T/w.q8.kv" "$why"
why=$("$KVFSCTL" convert --dtype q4 "$T/w.f16.kv" "$T/w.q4.kv" 2>&1 >/dev/null)
check "... convert refused with the reason" \
    sh -c '[ ! -e "$1" ] && printf "%s" "$2" | grep -q "multiple of 64 values.* 48 in a layer"' _ "$T/w.q4.kv" "$why"
cp "$T/w.f16.kv" "$B/incoming/w.kv"
check "... kv_quant=q4 stores it as it is, f16" \
    test "$(getfattr --absolute-names --only-values -n user.kvfs.dtype "$B/chunks/$(cut -d' ' -f1 "$T/w.hash").kv")" = f16
unmount_kvfs b
check "fsck of the kv_quant store is clean" "$KVFSCTL" fsck "$T/b.store"
finish
