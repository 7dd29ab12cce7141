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
#  - 64 clients at once against 2 slots: queued, all answered, kvfs-serve's
#    RSS within 64 MiB of what it was before;
#  - a chunk removed between two requests is prefilled again; removed (and
#    the blend forgotten) between the blend and the restore, the request
#    blends again and answers (KVFS_SERVE_TEST_HOLD holds it there);
#  - the engine killed and restarted: requests held before their restore,
#    queued for a slot, or arriving while it is down (streaming or not) wait
#    for it and are answered as before; a stream that had sent tokens ends
#    with an error event; left down past --engine-wait: 503 with the reason;
#    a client that gives up while waiting leaves the queue;
#  - an engine whose model is not the mount's: refused at start, both named;
#  - an engine with a KV cache per slot (-np 2 without -kvu): served over a
#    mount with llama_streams=2.
# Run by `make test-engines`; skipped without llama-server.
. "$(dirname "$0")/lib/serve_common.sh"
OTHER=$KVFS_ROOT/models/gemma-3-270m-q4_k_m.gguf
start_engine() { # start_engine PORT SAVE_DIR LOG
    "$SERVER" -m "$MODEL" --slot-save-path "$2/" -np 2 -kvu --kv-unified-per-slot 4096 --cache-ram 0 -t "$(nproc)" --port "$1" \
        > "$3" 2>&1 &
    PIDS+=($!)
    ENGINE_PID=$!
    for _ in $(seq 600); do curl -sf "localhost:$1/health" > /dev/null && return 0; sleep 0.1; done
    echo "llama-server did not start:"; tail "$3"; return 1
}
start_engine "$EPORT" "$A/llama" "$T/engine.log" || exit 1
WAIT=15 # --engine-wait
HOLD=$T/hold # KVFS_SERVE_TEST_HOLD: while it exists, restores wait
KVFS_SERVE_TEST_HOLD=$HOLD "$SERVE" --mount "$A" --engine "http://127.0.0.1:$EPORT" --listen "127.0.0.1:$SPORT" \
    --engine-wait $WAIT -v > "$T/serve.log" 2>&1 &
PIDS+=($!)
SERVE_PID=$!
for _ in $(seq 300); do curl -sf "localhost:$SPORT/health" > /dev/null && break; sleep 0.1; done
check "kvfs-serve starts: $(head -c 200 "$T/serve.log")" curl -sf "localhost:$SPORT/health" -o /dev/null

post() { curl -s -X POST "$U$1" -H 'Content-Type: application/json' --data-binary "$2"; }
code() { curl -s -o "$T/body" -w '%{http_code}' -X POST "$U$1" -H 'Content-Type: application/json' --data-binary "$2"; }

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
check "... blended before it took a slot (kvfs.blended_ahead: $(json 'd["kvfs"].get("blended_ahead")' < "$T/r2.json"); the first request, which prefilled its chunks in its slot: $(json 'd["kvfs"].get("blended_ahead")' < "$T/r1.json"))" \
    test "$(json 'd["kvfs"].get("blended_ahead")' < "$T/r2.json")" = True -a "$(json 'd["kvfs"].get("blended_ahead")' < "$T/r1.json")" = None \
    -a "$(metric kvfs_serve_blends_ahead_total)" = 1
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

# 64 clients at once against 2 slots: queued, none refused, memory bounded
# (one short document and question: the mount blends it once, the slots
# restore it 64 times)
rss() { awk '/^VmRSS:/ {print $2}' "/proc/$SERVE_PID/status"; }
alive() { local p; for p in "$@"; do kill -0 "$p" 2> /dev/null && return 0; done; return 1; }
python3 -c "
import json
for i in range(1, 65):
    open('$T/m%d.req' % i, 'w').write(json.dumps({'messages': [{'role': 'user', 'content': 'May I copy it?'}],
        'documents': [open('$T/LGPL-3.txt').read()[:400]], 'max_tokens': 2}))"
rss0=$(rss) peak=$(rss) qmax=0 t0=$EPOCHREALTIME
pids=()
for i in $(seq 64); do
    curl -s -o "$T/m$i.json" -w '%{http_code}' -X POST "$U/v1/chat/completions" -H 'Content-Type: application/json' \
        --data-binary "@$T/m$i.req" > "$T/m$i.code" &
    pids+=($!)
done
while alive "${pids[@]}"; do
    r=$(rss); [ "$r" -gt "$peak" ] && peak=$r
    q=$(metric kvfs_serve_queue_depth); [ "${q:-0}" -gt "$qmax" ] && qmax=$q
    sleep 0.2
done
wait "${pids[@]}"
rss1=$(rss)
n200=$(cat "$T"/m*.code | grep -o 200 | wc -l)
check "64 clients against 2 slots: $n200 answered 200 in $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.1f", b-a}') s (up to $qmax queued at once)" test "$n200" = 64 -a "$qmax" -gt 2
check "... kvfs-serve's RSS $((rss0 / 1024)) MiB before, $((peak / 1024)) MiB at most during, $((rss1 / 1024)) MiB after: within 64 MiB" \
    test $((peak - rss0)) -lt 65536 -a $((rss1 - rss0)) -lt 65536

# a chunk gone between two requests, and between the blend and the restore
first() { json 'd["kvfs"]["tokens"][0]'; }
sources() { json '" ".join(c["source"] for c in d["kvfs"]["chunks"])'; }
h=$(json 'd["kvfs"]["chunks"][2]["hash"]' < "$T/r1.json")
rm "$A/chunks/$h.kv"
post /v1/chat/completions "$req" > "$T/gone1.json"
check "a chunk removed between two requests: prefilled again ($(sources < "$T/gone1.json")), the same first token ($(first < "$T/gone1.json"))" \
    test "$(sources < "$T/gone1.json")" = "hit hit prefilled hit" -a "$(first < "$T/gone1.json")" = "$want"
touch "$HOLD"
holds() { grep -c 'test hook: .* holds before restoring' "$T/serve.log"; }
n=$(holds)
post /v1/chat/completions "$req" > "$T/gone2.json" &
bg=$!
for _ in $(seq 600); do [ "$(holds)" -gt "$n" ] && break; sleep 0.05; done
name=$(grep -o 'holds before restoring blend [^ ]*' "$T/serve.log" | tail -n 1 | cut -d' ' -f5)
rm "$A/blends/$name.recipe" "$A/chunks/$h.kv"
check "... removed with the blend (blends/$name.recipe) between the blend and the restore" test ! -e "$A/chunks/$h.kv"
rm "$HOLD"
wait "$bg"
check "... the request blends again (reblended $(json 'd["kvfs"].get("reblended")' < "$T/gone2.json"), $(sources < "$T/gone2.json")) and answers the same first token ($(first < "$T/gone2.json"))" \
    test "$(json 'd["kvfs"].get("reblended")' < "$T/gone2.json")" = True -a "$(sources < "$T/gone2.json")" = "hit hit prefilled hit" \
    -a "$(first < "$T/gone2.json")" = "$want" -a "$(metric kvfs_serve_reblends_total)" = 1

# the engine killed and restarted: nothing lost.  L streams a long answer;
# A (whole) is held before its restore and B (streaming) queued for a slot
# when the engine dies; C (whole) and D (streaming) arrive while it is down.
stream_content() { python3 -c "
import json, sys
out = []
for line in open(sys.argv[1]):
    if line.startswith('data: {'):
        d = json.loads(line[6:])
        out.append(d['choices'][0]['delta'].get('content', ''))
print(''.join(out))" "$1"; }
curl -sN -X POST "$U/v1/completions" -H 'Content-Type: application/json' --data-binary "$lreq" > "$T/L.txt" &
lpid=$!
for _ in $(seq 600); do [ "$(grep -c '^data: ' "$T/L.txt")" -ge 3 ] && break; sleep 0.05; done
touch "$HOLD"
n=$(holds)
curl -s -o "$T/A.json" -w '%{http_code}' -X POST "$U/v1/chat/completions" -H 'Content-Type: application/json' --data-binary "$req" > "$T/A.code" &
apid=$!
for _ in $(seq 600); do [ "$(holds)" -gt "$n" ] && break; sleep 0.05; done
curl -sN -o "$T/B.txt" -w '%{http_code}' -X POST "$U/v1/chat/completions" -H 'Content-Type: application/json' --data-binary "$sreq" > "$T/B.code" &
bpid=$!
for _ in $(seq 600); do [ "$(metric kvfs_serve_queue_depth)" = 1 ] && break; sleep 0.05; done
check "L streaming ($(grep -c '^data: ' "$T/L.txt") events), A held before its restore, B queued ($(metric kvfs_serve_queue_depth))" \
    test "$(metric kvfs_serve_queue_depth)" = 1
kill -9 "$ENGINE_PID"; wait "$ENGINE_PID" 2>/dev/null # a crash (SIGTERM waits up to 30 s for L's task)
curl -s -o "$T/C.json" -w '%{http_code}' -X POST "$U/v1/chat/completions" -H 'Content-Type: application/json' --data-binary "$req" > "$T/C.code" &
cpid=$!
curl -sN -o "$T/D.txt" -w '%{http_code}' -X POST "$U/v1/chat/completions" -H 'Content-Type: application/json' --data-binary "$sreq" > "$T/D.code" &
dpid=$!
rm "$HOLD"
wait "$lpid"
sleep 2
check "the engine killed: L's stream ends with an error event ($(grep '^data: {"error"' "$T/L.txt" | head -c 300)) and [DONE]" \
    sh -c "grep -q '^data: {\"error\".*cannot be tried again' '$T/L.txt' && tail -n 2 '$T/L.txt' | grep -q '^data: \[DONE\]'"
check "... A, B, C, D wait for it (queue depth $(metric kvfs_serve_queue_depth), engine up $(metric 'kvfs_serve_engine_up{engine="http://127.0.0.1:'$EPORT'"}'))" \
    test "$(metric kvfs_serve_queue_depth)" = 4
start_engine "$EPORT" "$A/llama" "$T/engine2.log" || exit 1
wait "$apid" "$bpid" "$cpid" "$dpid"
for x in A C; do
    check "... restarted: $x answered $(cat "$T/$x.code"), the same first token ($(first < "$T/$x.json")), retries $(json 'd["kvfs"].get("retries", 0)' < "$T/$x.json")" \
        test "$(cat "$T/$x.code")" = 200 -a "$(first < "$T/$x.json")" = "$want" \
        -a "$(json 'd["choices"][0]["message"]["content"]' < "$T/$x.json")" = "$(json 'd["choices"][0]["message"]["content"]' < "$T/r1.json")"
done
for x in B D; do
    check "... restarted: $x streamed $(cat "$T/$x.code") the same answer ('$(stream_content "$T/$x.txt")'), [DONE], no error" \
        sh -c "[ $(cat "$T/$x.code") = 200 ] && [ '$(stream_content "$T/$x.txt")' = '$scontent' ] && tail -n 2 '$T/$x.txt' | grep -q '^data: \[DONE\]' && ! grep -q '\"error\"' '$T/$x.txt'"
done
check "... A was tried again after its engine went down under it (retries $(json 'd["kvfs"].get("retries", 0)' < "$T/A.json"); kvfs_serve_engine_retries_total $(metric kvfs_serve_engine_retries_total))" \
    test "$(json 'd["kvfs"].get("retries", 0)' < "$T/A.json")" -ge 1

# left down past --engine-wait: 503 with the reason; a client that gives up
# while waiting leaves the queue
kill -9 "$ENGINE_PID"; wait "$ENGINE_PID" 2>/dev/null
d0=$(metric kvfs_serve_client_disconnects_total)
t0=$EPOCHREALTIME
curl -s -o "$T/E.json" -w '%{http_code}' -X POST "$U/v1/chat/completions" -H 'Content-Type: application/json' --data-binary "$req" > "$T/E.code" &
epid=$!
curl -s -o /dev/null -m 2 -X POST "$U/v1/chat/completions" -H 'Content-Type: application/json' --data-binary "$req" &
gpid=$!
sleep 3.5
check "the engine down again: a client that gave up after 2 s left the queue (queue depth $(metric kvfs_serve_queue_depth), disconnects $d0 -> $(metric kvfs_serve_client_disconnects_total))" \
    test "$(metric kvfs_serve_queue_depth)" = 1 -a "$(metric kvfs_serve_client_disconnects_total)" = $((d0 + 1))
wait "$epid" "$gpid"
secs=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.1f", b-a}')
check "... left down past --engine-wait $WAIT: $(cat "$T/E.code") after ${secs}s: $(head -c 300 "$T/E.json")" \
    sh -c "[ $(cat "$T/E.code") = 503 ] && grep -q 'none came back in $WAIT s' '$T/E.json' && grep -q 'is down: ' '$T/E.json' && awk 'BEGIN{exit !($secs >= $WAIT - 0.5)}'"
kill "$SERVE_PID"; wait "$SERVE_PID" 2>/dev/null

# an engine whose model is not the mount's
if [ -s "$OTHER" ]; then
    mount_kvfs b "model=$OTHER" || exit 1
    kill "$ENGINE_PID" 2>/dev/null; wait "$ENGINE_PID" 2>/dev/null
    start_engine "$EPORT" "$T/b.mnt/llama" "$T/engine3.log" || exit 1
    "$SERVE" --mount "$T/b.mnt" --engine "http://127.0.0.1:$EPORT" --listen "127.0.0.1:$SPORT" > "$T/serve-b.log" 2>&1
    rc=$?
    check "an engine whose model is not the mount's: refused at start (rc $rc): $(cat "$T/serve-b.log")" \
        sh -c "[ $rc != 0 ] && grep -q 'SmolLM2' '$T/serve-b.log' && grep -q 'refusing' '$T/serve-b.log'"
else
    echo "note: $OTHER missing: the model mismatch check is skipped"
fi
kill "$ENGINE_PID"; wait "$ENGINE_PID" 2>/dev/null

# an engine with a KV cache per slot (-np 2, no -kvu) served over a mount with
# llama_streams=2 (its one-stream views it refuses: tests/engines/llama_server.sh)
mount_kvfs c "model=$MODEL,llama_streams=2" || exit 1
"$SERVER" -m "$MODEL" --slot-save-path "$T/c.mnt/llama/" -np 2 -c 8192 --cache-ram 0 -t "$(nproc)" --port "$EPORT" \
    > "$T/engine4.log" 2>&1 &
PIDS+=($!)
ENGINE_PID=$!
for _ in $(seq 600); do curl -sf "localhost:$EPORT/health" > /dev/null && break; sleep 0.1; done
timeout 300 "$SERVE" --mount "$T/c.mnt" --engine "http://127.0.0.1:$EPORT" --listen "127.0.0.1:$SPORT" \
    > "$T/serve-c.log" 2>&1 &
PIDS+=($!)
SERVE_PID=$!
for _ in $(seq 600); do curl -sf "localhost:$SPORT/health" > /dev/null && break; sleep 0.1; done
for i in 1 2; do
    curl -s -m 240 -o "$T/np$i.json" -w '%{http_code}' -X POST "$U/v1/chat/completions" -H 'Content-Type: application/json' \
        --data-binary "$req" > "$T/np$i.code"
done
check "-np 2 without -kvu, mount llama_streams=2: answered twice ($(cat "$T/np1.code") $(cat "$T/np2.code")), the second from the mount's chunks: $(head -c 200 "$T/np2.json")" \
    sh -c "[ $(cat "$T/np2.code") = 200 ] && python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(not all(c[\"source\"] == \"hit\" for c in d[\"kvfs\"][\"chunks\"]))' '$T/np2.json'"
check "... only the question's $ns tokens computed (timings.prompt_n $(json 'd["timings"]["prompt_n"]' < "$T/np2.json" 2>/dev/null))" \
    test "$(json 'd["timings"]["prompt_n"]' < "$T/np2.json" 2>/dev/null)" = "$ns"
kill "$SERVE_PID"; wait "$SERVE_PID" 2>/dev/null
kill "$ENGINE_PID"; wait "$ENGINE_PID" 2>/dev/null
finish
