#!/bin/bash
# llama.cpp (llama-cpp-python) on a synthetic gemma4, whose layers have
# shapes of their own and whose last layers read earlier layers' caches
# (shared KV): the llama/ views and ingest of such chunks (kvfs(5), LLAMA.CPP
# SEQUENCE STATE, layer-shaped chunks):
#  - a chunk's view (within and past the sliding window) and a blend's are
#    restored by llama_state_seq_load_file (full-size and window-sized SWA
#    cache, with and without flash attention); only the query is computed
#    after, and the greedy answer = `kvfsctl generate --kv` (near-tie rule);
#    the same for a q4 chunk's view (the decoded values as f16);
#  - llama.cpp's own saved state of a prompt within the window, cp'd into
#    llama/, is the chunk kvfs's prefill names, its K/V within f16 tolerance
#    of kvfs's prefill and its view llama.cpp's file byte for byte (kvfsctl
#    import the same); a state
#    past the window (its SWA part holds the window's cells only) is refused.
. "$(dirname "$0")/../lib.sh"
python3 -c 'import llama_cpp' 2>/dev/null || "$KVFS_ROOT/tools/install-oracle.sh" || true
python3 -c 'import llama_cpp' 2>/dev/null || skip "SKIPPING ORACLE TEST: llama-cpp-python cannot be installed"
PY="python3 $KVFS_ROOT/tests/oracle"
MODEL=$T/gemma4.gguf
"$KVFSCTL" mkmodel -o "$MODEL" --arch gemma4 --layers 6 --embd 128 --heads 4 --kv-heads 2 --ff 256 --seed 5 >/dev/null
NSWA=$(python3 -c "
import sys; sys.path.insert(0, '$KVFS_ROOT/build/third_party/llama_cpp_python-0.3.36/vendor/llama.cpp/gguf-py')
import gguf; r = gguf.GGUFReader('$MODEL'); f = r.fields['gemma4.attention.sliding_window']; print(int(f.parts[f.data[0]][0]))" 2>/dev/null)
[ -n "$NSWA" ] || NSWA=$("$KVFSCTL" info --json "$MODEL" 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["sliding_window"])' 2>/dev/null)
ids() { printf '%s' "$1" | "$KVFSCTL" tokenize -m "$MODEL" - 2>/dev/null | tr ' ' ','; }
mount_kvfs a "model=$MODEL" || exit 1
A=$T/a.mnt
t_short=$(seq -s, 40 $((40 + NSWA / 2)))
t_long=$(seq -s, 40 $((40 + NSWA * 8)))
n_short=$(echo "$t_short" | tr ',' '\n' | grep -c .) n_long=$(echo "$t_long" | tr ',' '\n' | grep -c .)
for d in short long; do
    eval "tok=\$t_$d"
    hh=$("$KVFSCTL" prefill -m "$MODEL" -M "$A" --ids "$tok" 2>/dev/null | cut -d' ' -f1)
    eval "h_$d=$hh"
    for v in llama vt.llama; do
        check "$d ($(echo "$tok" | tr ',' '\n' | grep -c .) tokens, window $NSWA): llama/${hh:0:12}...$v's size ($(stat -c %s "$A/llama/$hh.$v")) = bytes read" \
            test "$(stat -c %s "$A/llama/$hh.$v")" = "$(wc -c < "$A/llama/$hh.$v")"
    done
done
restore() { # restore NAME STATE QUERY_TEXT EXPECT [llama_state.py options]
    local name=$1 state=$2 q=$3 expect=$4; shift 4
    local qids out rc nq
    qids=$(ids "$q")
    out=$($PY/llama_state.py "$MODEL" "$state" 4 "$qids" --expect "$expect" "$@" 2>"$T/$name.err")
    rc=$?
    nq=$(printf '%s' "$qids" | tr ',' '\n' | grep -c .)
    check "$name: llama.cpp restores $(echo "$out" | sed -n 1p) tokens and computes only the $nq query tokens" \
        test "$(echo "$out" | sed -n 2p)" = "$nq"
    check "$name: llama.cpp's greedy answer ($(echo "$out" | sed -n 3p)) = kvfsctl generate --kv ($expect) $(grep -v swa "$T/$name.err" | tr -d '\n')" \
        test $rc -eq 0
}
Q='Q: why?'
for d in short long; do
    eval "hh=\$h_$d"
    e=$("$KVFSCTL" generate -m "$MODEL" --kv "$A/chunks/$hh.kv" -p "$Q" -n 4 --ids 2>/dev/null)
    restore "$d" "$A/llama/$hh.llama" "$Q" "$e"
    [ $d = long ] && restore "$d-window-swa" "$A/llama/$hh.llama" "$Q" "$e" --no-swa-full
    restore "$d-vt" "$A/llama/$hh.vt.llama" "$Q" "$e" --no-flash-attn
done
"$KVFSCTL" blend -M "$A" --name q --ratio 0.15 --suffix 'Q: which?' $h_short $h_long > /dev/null
check "the blend's llama/q.llama: size ($(stat -c %s "$A/llama/q.llama")) = bytes read" \
    test "$(stat -c %s "$A/llama/q.llama")" = "$(wc -c < "$A/llama/q.llama")"
e=$("$KVFSCTL" generate -m "$MODEL" --kv "$A/blends/q.kv" -p 'A:' -n 4 --ids 2>/dev/null)
restore blend "$A/llama/q.llama" 'A:' "$e"
# a q4 gemma4 chunk (each layer quantized along its own rows): its view is
# the decoded values as f16, which llama.cpp restores as any other
hq=$("$KVFSCTL" convert --dtype q4 "$A/chunks/$h_long.kv" "$T/long.q4.kv")
cp "$T/long.q4.kv" "$A/chunks/$hq.kv" || fail "cp the q4 chunk into chunks/"
e=$("$KVFSCTL" generate -m "$MODEL" --kv "$A/chunks/$hq.kv" -p "$Q" -n 4 --ids 2>/dev/null)
restore long-q4 "$A/llama/$hq.llama" "$Q" "$e"
# a mount that has not loaded the model cannot know which layers slide: its
# one-part view is not what llama.cpp's iswa cache reads
mount_kvfs n || exit 1
cp "$A/chunks/$h_short.kv" "$T/n.mnt/chunks/"
check "the one-part view (mount without model=) is refused by llama.cpp's iswa cache (no crash)" \
    sh -c "$PY/llama_state.py '$MODEL' '$T/n.mnt/llama/$h_short.llama' 1 1 >/dev/null 2>&1; test \$? = 2"
# the other way: llama.cpp's own saves -> chunks, and their views -> the saves
$PY/llama_save.py "$MODEL" "$t_short" "$T/fa.bin" > /dev/null || { fail "llama.cpp could not save a state"; finish; }
$PY/llama_save.py "$MODEL" "$t_short" "$T/nofa.bin" --no-flash-attn > /dev/null
$PY/llama_save.py "$MODEL" "$t_long" "$T/long.bin" > /dev/null
mount_kvfs b "model=$MODEL" || exit 1
mount_kvfs c "model=$MODEL" || exit 1
B=$T/b.mnt C=$T/c.mnt
check "llama.cpp's saved state of the short prompt cp'd into llama/ is stored" cp "$T/fa.bin" "$B/llama/short.bin"
check "... as the chunk kvfs's prefill names (${h_short:0:12}...)" test -e "$B/chunks/$h_short.kv"
check "... whose view is llama.cpp's file byte for byte (both parts, each layer at its width)" \
    cmp "$T/fa.bin" "$B/llama/$h_short.llama"
check "a V-transposed save (no flash attention) is stored under the same name" \
    sh -c "cp '$T/nofa.bin' '$C/llama/short.bin' && test -e '$C/chunks/$h_short.kv'"
check "... and its .vt.llama view is that save byte for byte" cmp "$T/nofa.bin" "$C/llama/$h_short.vt.llama"
check "K/V near kvfs's prefill ($("$KVFSCTL" compare "$B/chunks/$h_short.kv" "$A/chunks/$h_short.kv" 2>&1))" \
    "$KVFSCTL" compare --max-err 0.15 "$B/chunks/$h_short.kv" "$A/chunks/$h_short.kv"
check "kvfsctl import -m of that save gives the same chunk" sh -c \
    "'$KVFSCTL' import -m '$MODEL' -o '$T/imp.kv' '$T/fa.bin' 2>/dev/null | grep -qx '$h_short' && cmp '$T/imp.kv' '$B/chunks/$h_short.kv'"
check "the long prompt's state (SWA part: the window's cells only) is refused at close" \
    sh -c "! cp '$T/long.bin' '$B/llama/long.bin' 2>/dev/null"
check "... nothing is stored" test ! -e "$B/chunks/$h_long.kv"
check "... and the log says why" grep -q "sliding-window layers hold $NSWA of the $n_long cells" "$T/b.log"
finish
