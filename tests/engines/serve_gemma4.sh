#!/bin/bash
# kvfs-serve on a synthetic gemma4 (layers of their own cache shapes, shared-KV
# layers, per-layer embeddings, a sliding window of 8 tokens) in front of a
# real llama-server (--swa-full) and a real mount:
#  - kvfs-serve starts (its probe state cut to the window: llama.cpp saves
#    only the window's cells of the sliding layers, the mount takes no
#    longer state) and says so;
#  - a RAG chat request: its documents, longer than the window, are computed
#    by kvfs-serve itself into the mount (layer-shaped chunks, named as the
#    engine's own saves would be), blended and restored into the engine's
#    slot whole (the question's rows computed by the mount: cut back to
#    the documents, llama-server would find the window's cells missing and
#    prefill it all), the engine computes only the last token
#    (timings.prompt_n), the slot's next-token log-probabilities are within
#    0.2 nats of llama-server's own full prefill's (top 5), and the answer
#    equals llama-server's own full prefill of the same tokens
#    (near-tie rule at the first difference: within 0.25 nats in its top
#    log-probabilities);
#  - the same request again: every chunk a hit, the same answer; a document
#    named by its chunk hash is a hit;
#  - the turn is saved (past the window: computed by kvfs-serve) and the
#    next turn finds it, restored as it is, only the new turn computed, its
#    answer llama-server's full prefill's (near-tie rule).
# Run by `make test-engines`; skipped without llama-server.
serve_model() {
    MODEL=$T/gemma4.gguf
    "$KVFSCTL" mkmodel -o "$MODEL" --arch gemma4 --layers 6 --embd 128 --heads 4 --kv-heads 2 --ff 256 --seed 5 > /dev/null
}
. "$(dirname "$0")/lib/serve_common.sh"

"$SERVER" -m "$MODEL" --slot-save-path "$A/llama/" -np 2 -kvu --kv-unified-per-slot 4096 --swa-full --cache-ram 0 \
    -t "$(nproc)" --port "$EPORT" > "$T/engine.log" 2>&1 &
PIDS+=($!)
ENGINE_PID=$!
for _ in $(seq 600); do curl -sf "localhost:$EPORT/health" > /dev/null && break; sleep 0.1; done
curl -sf "localhost:$EPORT/health" > /dev/null || { fail "llama-server did not start: $(tail -n 5 "$T/engine.log")"; finish; }
"$SERVE" --mount "$A" --engine "http://127.0.0.1:$EPORT" --listen "127.0.0.1:$SPORT" -v > "$T/serve.log" 2>&1 &
PIDS+=($!)
SERVE_PID=$!
for _ in $(seq 300); do curl -sf "localhost:$SPORT/health" > /dev/null && break; sleep 0.1; done
check "kvfs-serve starts on gemma4: $(head -c 300 "$T/serve.log")" curl -sf "localhost:$SPORT/health" -o /dev/null
check "... and names the sliding window" grep -q 'sliding window of 8 tokens' "$T/serve.log"

post() { curl -s -X POST "$U$1" -H 'Content-Type: application/json' --data-binary "@$2"; }
# This random model answers "\n" (token 10) to nearly anything: banned in
# every request (logit_bias), so the answer follows the context.
BAN='[[10, false]]'
# near FILE: kvfs-serve's reply FILE's answer tokens against llama-server's own
# full prefill of its prompt: "identical", "near-tie" (at the first
# difference, within 0.25 nats in the full prefill's top log-probabilities),
# else FAIL
near() {
    local ids
    ids=$(json '",".join(map(str, d["kvfs"]["prompt_tokens"]))' < "$1")
    curl -s "localhost:$EPORT/completion" -d "{\"prompt\": [$ids], \"n_predict\": 4, \"temperature\": 0, \"cache_prompt\": false, \"return_tokens\": true, \"n_probs\": 10, \"logit_bias\": $BAN}" > "$1.full"
    local v
    v=$(python3 "$KVFS_ROOT/tests/engines/lib/near_tie.py" --got "$(json 'd["kvfs"]["tokens"]' < "$1")" \
        --want "$(json 'd["tokens"]' < "$1.full")" --probs "$1.full" --probs-of want --tolerance 0.25)
    case $v in *identical) v="$v; llama-server computed $(json 'd["timings"]["prompt_n"]' < "$1.full")" ;; esac
    echo "$v"
}

# documents of a few hundred bytes (tokens) each: many times the window
for f in GPL-3 Apache-2.0 MPL-2.0; do head -c 300 "/usr/share/common-licenses/$f" > "$T/$f.txt"; done
python3 -c "
import json
docs = [open('$T/' + f + '.txt').read() for f in ('GPL-3', 'Apache-2.0', 'MPL-2.0')]
json.dump({'messages': [{'role': 'user', 'content': 'Which license is this?'}], 'documents': docs,
           'max_tokens': 4, 'temperature': 0, 'return_tokens': True, 'return_prompt_tokens': True,
           'logit_bias': [[10, False]]},
          open('$T/r.req', 'w'))"
post /v1/chat/completions "$T/r.req" > "$T/r1.json"
check "a RAG chat request is answered: $(head -c 300 "$T/r1.json")" \
    test "$(json 'd["object"]' < "$T/r1.json")" = chat.completion
check "... its documents prefilled ($(json '[(c["source"], c["tokens"]) for c in d["kvfs"]["chunks"]]' < "$T/r1.json")), by kvfs-serve past the window ($(metric kvfs_serve_local_prefills_total) computed here)" \
    test "$(json 'sum(c["source"] == "prefilled" for c in d["kvfs"]["chunks"])' < "$T/r1.json")" -ge 3 \
    -a "$(metric kvfs_serve_local_prefills_total)" -ge 3
for h in $(json '" ".join(c["hash"] for c in d["kvfs"]["chunks"])' < "$T/r1.json"); do
    [ -e "$A/chunks/$h.kv" ] || fail "chunk $h is not in the mount"
done
h0=$(json 'd["kvfs"]["chunks"][1]["hash"]' < "$T/r1.json")
check "... layer-shaped chunks ($("$KVFSCTL" info "$A/chunks/$h0.kv" 2>&1 | grep -m1 'each layer its own' | tr -s ' '))" \
    sh -c "'$KVFSCTL' info '$A/chunks/$h0.kv' 2>&1 | grep -q 'each layer its own'"
ns=$(json 'd["kvfs"]["suffix_tokens"]' < "$T/r1.json")
np=$(json 'len(d["kvfs"]["prompt_tokens"])' < "$T/r1.json")
check "... blended (the question's $ns rows computed by the mount) and restored whole: the engine computed only the last of $np tokens (timings.prompt_n $(json 'd["timings"]["prompt_n"]' < "$T/r1.json"))" \
    test "$(json 'd["timings"]["prompt_n"]' < "$T/r1.json")" = 1 -a "$(json 'd["kvfs"].get("blend_tokens")' < "$T/r1.json")" = "$np"
# the slot still holds the blend (before any other request takes it): its
# next-token log-probabilities against the full prefill's (the engine's
# own computation of the same prompt)
ids=$(json '",".join(map(str, d["kvfs"]["prompt_tokens"]))' < "$T/r1.json")
curl -s "localhost:$EPORT/completion" -d "{\"prompt\": [$ids], \"n_predict\": 1, \"temperature\": 0, \"cache_prompt\": true, \"id_slot\": $(json 'd["kvfs"]["slot"]' < "$T/r1.json"), \"n_probs\": 10}" > "$T/r1.slot"
verdict=$(near "$T/r1.json")
check "... its answer = llama-server's full prefill's: $verdict" sh -c "echo '$verdict' | grep -q 'identical\|near-tie'"
dist=$(python3 -c '
import json, sys
a = json.load(open(sys.argv[1])); b = json.load(open(sys.argv[2]))
got = {t["id"]: t["logprob"] for t in a["completion_probabilities"][0]["top_logprobs"]}
want = b["completion_probabilities"][0]["top_logprobs"][:5]
d = max(abs(got.get(t["id"], -99) - t["logprob"]) for t in want)
n = a["timings"]["prompt_n"]
print(f"{d:.3f} nats at most over its top 5, after computing {n} token(s)", "ok" if d <= 0.2 and n == 1 else "FAIL")' "$T/r1.slot" "$T/r1.json.full")
check "... the slot's next-token log-probabilities (the blend restored) within 0.2 nats of the full prefill's: $dist" \
    sh -c "echo '$dist' | grep -q 'ok$'"
post /v1/chat/completions "$T/r.req" > "$T/r2.json"
check "the same request again: every chunk a hit ($(json '[c["source"] for c in d["kvfs"]["chunks"]]' < "$T/r2.json")), prompt_n $(json 'd["timings"]["prompt_n"]' < "$T/r2.json")" \
    test "$(json 'all(c["source"] == "hit" for c in d["kvfs"]["chunks"]) and d["timings"]["prompt_n"] == 1' < "$T/r2.json")" = True
check "... the same answer" \
    test "$(json 'd["kvfs"]["tokens"]' < "$T/r2.json")" = "$(json 'd["kvfs"]["tokens"]' < "$T/r1.json")"
echo "{\"documents\": [\"$h0\"], \"prompt\": \"\\nQuestion: what is this?\\nAnswer:\", \"max_tokens\": 2}" > "$T/hash.req"
post /v1/completions "$T/hash.req" > "$T/hash.json"
check "a document named by its chunk hash (its layer-shaped header read) is a hit ($(json '[c["source"] for c in d["kvfs"]["chunks"]]' < "$T/hash.json"))" \
    test "$(json 'd["kvfs"]["chunks"][0]["source"]' < "$T/hash.json")" = hit

# the turn saved (past the window: computed here), found by the next turn
for _ in $(seq 600); do [ "$(metric kvfs_serve_turn_saves_total)" -ge 1 ] 2> /dev/null && break; sleep 0.1; done
check "the turn is saved into the mount ($(metric kvfs_serve_turn_saves_total) saves, $(metric kvfs_serve_turn_save_errors_total) errors)" \
    test "$(metric kvfs_serve_turn_saves_total)" -ge 1 -a "$(metric kvfs_serve_turn_save_errors_total)" = 0
python3 -c "
import json
r = json.load(open('$T/r.req')); a = json.load(open('$T/r1.json'))
r['messages'][0]['documents'] = r.pop('documents')
r['messages'] += [{'role': 'assistant', 'content': a['choices'][0]['message']['content']},
                  {'role': 'user', 'content': 'Why?'}]
json.dump(r, open('$T/t2.req', 'w'))"
post /v1/chat/completions "$T/t2.req" > "$T/t2.json"
check "the next turn finds it ($(json 'd["kvfs"].get("history")' < "$T/t2.json")), restored as it is, prompt_n $(json 'd["timings"]["prompt_n"]' < "$T/t2.json") = its $(json 'd["kvfs"]["suffix_tokens"]' < "$T/t2.json") new tokens" \
    test "$(json 'd["kvfs"]["history"]["found"] and d["timings"]["prompt_n"] == d["kvfs"]["suffix_tokens"]' < "$T/t2.json")" = True
verdict=$(near "$T/t2.json")
check "... its answer = llama-server's full prefill's: $verdict" sh -c "echo '$verdict' | grep -q 'identical\|near-tie'"
kill "$SERVE_PID"; wait "$SERVE_PID" 2> /dev/null
kill "$ENGINE_PID"; wait "$ENGINE_PID" 2> /dev/null
finish
