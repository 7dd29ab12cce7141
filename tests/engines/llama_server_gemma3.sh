#!/bin/bash
# llama.cpp's own server on Gemma 3 (sliding-window layers: llama.cpp keeps
# them in a second KV cache, llama_kv_cache_iswa, whose state follows the
# other's in a sequence-state file; kvfs(5), LLAMA.CPP SEQUENCE STATE):
#  - a chunk's view has the size of the two-part layout (the SWA part: the
#    window's last cells and the one before), stat before open = bytes read;
#  - llama-server --swa-full restores a chunk shorter than the window and one
#    longer, computes only the query (timings.prompt_n) and answers as its
#    own full prefill of the same tokens (near-tie rule at the first
#    difference); without --swa-full it restores them too, computes only the
#    query after the longer one (the cell before the window passes its check
#    for missing window cells) and prefills the shorter again (that check
#    cannot pass below the window), answering the same;
#  - a slot the server saves into llama/ is stored as the chunk kvfs's
#    prefill names (K/V near kvfs's); a state longer than the window (its SWA
#    part lacks the cells before it) is refused, and the log says why.
# Needs LLAMA_SERVER (or make llama-server); skipped without it.
. "$(dirname "$0")/../lib.sh"
MODEL=${KVFS_ENGINE_MODEL:-$KVFS_ROOT/models/gemma-3-270m-q4_k_m.gguf}
SERVER=${LLAMA_SERVER:-$BUILD/llama-server/bin/llama-server}
CTX=4096
[ -s "$MODEL" ] || skip "no Gemma 3 model ($MODEL)"
[ -x "$SERVER" ] || skip "llama-server not built (make llama-server)"
healthy() { curl -sf "localhost:$PORT/health" > /dev/null; }
post() { curl -s -X POST "localhost:$PORT$1" -H 'Content-Type: application/json' -d "$2"; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
ids() { printf '%s' "$1" | "$KVFSCTL" tokenize -m "$MODEL" - 2>/dev/null | tr ' ' ','; }
PORT=$(free_port) || { echo "FAIL: no free port"; exit 1; }
start() { # start DIR LOG ARGS...: a server saving into DIR
    local dir=$1 log=$2
    shift 2
    "$SERVER" -m "$MODEL" --slot-save-path "$dir" -np 1 -c "$CTX" --cache-ram 0 -t "$(nproc)" --port "$PORT" "$@" > "$log" 2>&1 &
    PIDS+=($!); SRV=$!
    for _ in $(seq 600); do healthy && break; sleep 0.1; done
}
stop() { kill "$SRV"; wait "$SRV" 2>/dev/null; }
# same ANSWER REFERENCE: near-tie rule (lib/near_tie.py): identical greedy
# ids, or the first difference within 0.25 nats in the reference's own top
# log-probabilities
same() {
    local answer='[p["id"] for p in d["completion_probabilities"]]'
    python3 "$KVFS_ROOT/tests/engines/lib/near_tie.py" --got "$(json "$answer" < "$1")" \
        --want "$(json "$answer" < "$2")" --probs "$2" --probs-of want --tolerance 0.25
}
mount_kvfs a "model=$MODEL" || exit 1
A=$T/a.mnt
head -c 1200 /usr/share/common-licenses/GPL-3 > "$T/short.txt"
head -c 4000 /usr/share/common-licenses/Apache-2.0 > "$T/long.txt"
QI=$(ids $'\nQuestion: Who wrote this license?\nAnswer:')
nq=$(echo "$QI" | tr ',' '\n' | grep -c .)
NSWA=512 # gemma3.attention.sliding_window of the 270M model
for d in short long; do
    hh=$("$KVFSCTL" prefill -m "$MODEL" -M "$A" "$T/$d.txt" 2>/dev/null | cut -d' ' -f1)
    eval "h_$d=$hh"
    tok=$("$KVFSCTL" info --json --tokens "$A/chunks/$hh.kv" | json '",".join(map(str, d["tokens"]))')
    eval "t_$d=$tok"
    n=$(echo "$tok" | tr ',' '\n' | grep -c .)
    eval "n_$d=$n"
    check "$d: llama/${hh:0:12}...llama's size before open ($(stat -c %s "$A/llama/$hh.llama")) = bytes read" \
        test "$(stat -c %s "$A/llama/$hh.llama")" = "$(wc -c < "$A/llama/$hh.llama")"
    cp "$A/llama/$hh.llama" "$T/$d.llama"
done
check "the short chunk ($n_short tokens) fits the window, the long one ($n_long) does not ($NSWA)" \
    test "$n_short" -lt "$NSWA" -a "$n_long" -gt "$NSWA"
# the layout, read back: two parts, the SWA one with the window's cells and
# the one before (all n within the window)
for d in short long; do
    eval "n=\$n_$d"
    got=$(python3 - "$T/$d.llama" <<'PY'
import struct, sys
b = open(sys.argv[1], "rb").read(); at = 8
n_tok, = struct.unpack_from("<I", b, at); at += 4 + 4 * n_tok
parts = []
while at < len(b):
    ns, nc = struct.unpack_from("<II", b, at); at += 8 + 12 * nc
    vt, nl = struct.unpack_from("<II", b, at); at += 8
    for _ in range(2 * nl):
        at += 12 + 2 * nc * struct.unpack_from("<Q", b, at + 4)[0] // 2
    at += 4 * (ns - 1)
    parts.append(f"{nl}x{nc}")
print(" ".join(parts), "end" if at == len(b) else f"bad {at} {len(b)}")
PY
)
    want="3x$n 15x$((n <= NSWA ? n : NSWA + 1)) end"
    check "$d: two parts, 3 global layers x $n cells, 15 SWA layers x the window's cells and one ($got)" test "$got" = "$want"
done
# with llama_streams=2 each part ends with the other stream's empty header
mount_kvfs c "model=$MODEL,llama_streams=2" || exit 1
cp "$A/chunks/$h_long.kv" "$T/c.mnt/chunks/"
check "llama_streams=2: the long view is 8 bytes longer (two parts), size = bytes read" \
    test "$(stat -c %s "$T/c.mnt/llama/$h_long.llama")" = "$(($(stat -c %s "$T/long.llama") + 8))" -a \
    "$(wc -c < "$T/c.mnt/llama/$h_long.llama")" = "$(stat -c %s "$T/c.mnt/llama/$h_long.llama")"
# references: the server's own full prefill of the same tokens
mkdir "$T/plain"
start "$T/plain/" "$T/ref.log"
for d in short long; do
    eval "tok=\$t_$d"
    post /completion "{\"prompt\": [$tok,$QI], \"n_predict\": 8, \"temperature\": 0, \"cache_prompt\": false, \"id_slot\": 0, \"n_probs\": 10}" > "$T/ref_default_$d.json"
done
post /completion "{\"prompt\": [$t_short], \"n_predict\": 0, \"cache_prompt\": true, \"id_slot\": 0}" > /dev/null
post /slots/0?action=save '{"filename": "short.bin"}' > /dev/null
stop
# --swa-full sizes the SWA cache as the other, which alone moves the first
# answer token by a near-tie: its restores are held to its own prefill
start "$T/plain/" "$T/ref_full.log" --swa-full
for d in short long; do
    eval "tok=\$t_$d"
    post /completion "{\"prompt\": [$tok,$QI], \"n_predict\": 8, \"temperature\": 0, \"cache_prompt\": false, \"id_slot\": 0, \"n_probs\": 10}" > "$T/ref_swa-full_$d.json"
done
stop
for mode in swa-full default; do
    args=(); [ $mode = swa-full ] && args=(--swa-full)
    start "$A/llama/" "$T/srv_$mode.log" "${args[@]}"
    for d in short long; do
        eval "hh=\$h_$d; tok=\$t_$d; n=\$n_$d"
        r=$(post /slots/0?action=restore "{\"filename\": \"$hh.llama\"}")
        check "$mode: llama-server restores the $d chunk: $(echo "$r" | cut -c1-100)" \
            test "$(echo "$r" | json 'd.get("n_restored")')" = "$n"
        post /completion "{\"prompt\": [$tok,$QI], \"n_predict\": 8, \"temperature\": 0, \"cache_prompt\": true, \"id_slot\": 0, \"n_probs\": 10}" > "$T/c_${mode}_$d.json"
        pn=$(json 'd["timings"]["prompt_n"]' < "$T/c_${mode}_$d.json")
        if [ $mode = swa-full ] || [ $d = long ]; then
            check "... only the $nq query tokens are computed (prompt_n $pn)" test "$pn" = "$nq"
        else
            echo "    ($mode: prompt_n $pn of $((n + nq)): within the window llama-server prefills again)"
        fi
        v=$(same "$T/c_${mode}_$d.json" "$T/ref_${mode}_$d.json")
        check "... the greedy answer = the server's own full prefill: $v" sh -c "echo '$v' | grep -q 'identical\|near-tie'"
    done
    stop
done
# the other way: the server prefills, saves its slot into llama/ of mount b
mount_kvfs b "model=$MODEL" || exit 1
B=$T/b.mnt
start "$B/llama/" "$T/save.log"
post /completion "{\"prompt\": [$t_short], \"n_predict\": 0, \"cache_prompt\": true, \"id_slot\": 0}" > /dev/null
s=$(post /slots/0?action=save '{"filename": "short.bin"}')
check "llama-server saves the short prompt's slot into llama/: $(echo "$s" | cut -c1-100)" \
    test "$(echo "$s" | json 'd.get("n_saved", 0)')" -gt 0
check "... stored as the chunk kvfs's prefill names (${h_short:0:12}...)" test -e "$B/chunks/$h_short.kv"
# the chunk's view gives back the server's own state: the same K/V bytes in
# both parts (the server's file packs the prompt: 16 bytes more before them)
check "... whose view holds the very K/V bytes of the server's own state file" \
    cmp <(tail -c +$((13 + 4 * n_short)) "$B/llama/$h_short.llama") <(tail -c +$((29 + 4 * n_short)) "$T/plain/short.bin")
# kvfs's own prefill of Gemma 3 drifts from llama.cpp's with depth (0.03 at
# layer 0 up to about 0.1 at the last: activations through Q4_K weights)
check "... K/V near kvfs's prefill ($("$KVFSCTL" compare "$B/chunks/$h_short.kv" "$A/chunks/$h_short.kv" 2>&1))" \
    "$KVFSCTL" compare --max-err 0.15 "$B/chunks/$h_short.kv" "$A/chunks/$h_short.kv"
post /completion "{\"prompt\": [$t_long], \"n_predict\": 0, \"cache_prompt\": true, \"id_slot\": 0}" > /dev/null
s=$(post /slots/0?action=save '{"filename": "long.bin"}')
echo "    (save of the long prompt: $(echo "$s" | cut -c1-120))"
check "a state longer than the window is not stored" test ! -e "$B/chunks/$h_long.kv"
check "... and the log says why" grep -q "sliding-window layers hold $NSWA of the $n_long cells" "$T/b.log"
stop
# the stored chunk's view, restored, continues as the server's own prefill
start "$B/llama/" "$T/back.log" --swa-full
r=$(post /slots/0?action=restore "{\"filename\": \"$h_short.llama\"}")
check "--swa-full restores the server's stored chunk: $(echo "$r" | cut -c1-60)" \
    test "$(echo "$r" | json 'd.get("n_restored")')" = "$n_short"
post /completion "{\"prompt\": [$t_short,$QI], \"n_predict\": 8, \"temperature\": 0, \"cache_prompt\": true, \"id_slot\": 0, \"n_probs\": 10}" > "$T/back.json"
check "... only the query is computed ($(json 'd["timings"]["prompt_n"]' < "$T/back.json"))" \
    test "$(json 'd["timings"]["prompt_n"]' < "$T/back.json")" = "$nq"
v=$(same "$T/back.json" "$T/ref_swa-full_short.json")
check "... the greedy answer = the server's own full prefill: $v" sh -c "echo '$v' | grep -q 'identical\|near-tie'"
# a blend's view: the same two-part layout, restored
cp "$A/chunks/$h_long.kv" "$B/chunks/"
"$KVFSCTL" blend -M "$B" --name q --ratio 0.15 --suffix $'\nQuestion: Who wrote these?' $h_short $h_long > /dev/null
nb=$("$KVFSCTL" info --json "$B/blends/q.kv" | json 'd["n_tokens"]')
check "the blend's llama/q.llama: size ($(stat -c %s "$B/llama/q.llama")) = bytes read" \
    test "$(stat -c %s "$B/llama/q.llama")" = "$(wc -c < "$B/llama/q.llama")"
r=$(post /slots/0?action=restore '{"filename": "q.llama"}')
check "... restored ($nb tokens): $(echo "$r" | cut -c1-60)" test "$(echo "$r" | json 'd.get("n_restored")')" = "$nb"
# --swa-full does not make a longer state storable: llama.cpp still saves
# only the window's cells of the sliding-window layers
post /completion "{\"prompt\": [$t_long], \"n_predict\": 0, \"cache_prompt\": true, \"id_slot\": 0}" > /dev/null
post /slots/0?action=save '{"filename": "long2.bin"}' > /dev/null
check "--swa-full: the long state is refused as well" \
    test "$(grep -c "sliding-window layers hold $NSWA of the $n_long cells" "$T/b.log")" = 2
stop
finish
