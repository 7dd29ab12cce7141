#!/bin/bash
# kvfs-serve's multi-turn conversations (kvfs-serve(1) CONVERSATIONS) in front
# of a real llama-server and a real mount:
#  - after an answer the conversation so far is saved into the mount (the
#    engine's slot saved into llama/, stored as the chunk of its tokens);
#  - the next turn finds it by content hash and computes only the new turn's
#    tokens (timings.prompt_n), with and without documents, and its first
#    answer token equals llama-server's own full prefill of the same tokens;
#  - a turn whose slot still holds the conversation (its last turn saved
#    from there) is not restored: the engine keeps it, computes the new turn;
#  - found again (restored) after its slot was taken by other conversations,
#    after llama-server restarted (empty slots) and after kvfs-serve restarted;
#  - a history that differs (an answer edited by the client) is a miss, the
#    whole prompt computed, the answer still right;
#  - --no-save-turns saves nothing; /metrics counts hits, misses and saves.
# Run by `make test-engines`; skipped without llama-server.
. "$(dirname "$0")/lib/serve_common.sh"
start_engine() { # start_engine LOG
    "$SERVER" -m "$MODEL" --slot-save-path "$A/llama/" -np 2 -kvu --kv-unified-per-slot 4096 --cache-ram 0 \
        -t "$(nproc)" --port "$EPORT" > "$1" 2>&1 &
    PIDS+=($!)
    ENGINE_PID=$!
    for _ in $(seq 600); do curl -sf "localhost:$EPORT/health" > /dev/null && return 0; sleep 0.1; done
    echo "llama-server did not start:"; tail "$1"; return 1
}
start_serve() { # start_serve LOG [options]
    local log=$1; shift
    "$SERVE" --mount "$A" --engine "http://127.0.0.1:$EPORT" --listen "127.0.0.1:$SPORT" "$@" > "$log" 2>&1 &
    PIDS+=($!)
    SERVE_PID=$!
    for _ in $(seq 300); do curl -sf "localhost:$SPORT/health" > /dev/null && return 0; sleep 0.1; done
    echo "kvfs-serve did not start:"; tail "$log"; return 1
}
start_engine "$T/engine.log" || exit 1
start_serve "$T/serve.log" || exit 1

post() { curl -s -X POST "$U$1" -H 'Content-Type: application/json' --data-binary "$2"; }
# wait_saves N: the background saves counted reach N (each turn is saved after its answer)
wait_saves() {
    for _ in $(seq 600); do
        [ "$(metric kvfs_serve_turn_saves_total)" -ge "$1" ] 2> /dev/null && return 0
        sleep 0.1
    done
    return 1
}
# turn CONV FILE QUESTION [stream]: the conversation CONV (a JSON file of
# messages) asks QUESTION (with the documents in the JSON file $DOCS, when
# set); the question and the answer are appended to it; the reply in FILE
turn() {
    python3 - "$1" "$3" "${4:-}" "${DOCS:-}" > "$2.req" << 'EOF'
import json, sys
conv, q, stream, docs = sys.argv[1], sys.argv[2], sys.argv[3] == "stream", sys.argv[4]
msgs = json.load(open(conv))
msgs.append({"role": "user", "content": q})
if docs:
    msgs[-1]["documents"] = json.load(open(docs))
print(json.dumps({"messages": msgs, "max_tokens": 12, "temperature": 0, "return_tokens": True,
                  "return_prompt_tokens": True, "stream": stream}))
EOF
    post /v1/chat/completions "@$2.req" > "$2"
    python3 - "$1" "$2" "$3" "${DOCS:-}" << 'EOF'
import json, sys
conv, reply, q, docs = sys.argv[1:]
text = open(reply).read()
if text.startswith("data: "):  # a stream: its deltas and its last chunk, as one answer
    content, last = "", {}
    for line in text.splitlines():
        if line.startswith("data: {"):
            last = json.loads(line[6:])
            content += last["choices"][0]["delta"].get("content", "")
    d = dict(last, choices=[{"message": {"content": content}}])
    json.dump(d, open(reply, "w"))
else:
    d = json.loads(text)
msgs = json.load(open(conv))
msgs.append({"role": "user", "content": q})
if docs:
    msgs[-1]["documents"] = json.load(open(docs))
msgs.append({"role": "assistant", "content": d["choices"][0]["message"]["content"]})
json.dump(msgs, open(conv, "w"))
EOF
}
# llama-server's own full prefill of reply FILE's prompt: its first token
full_first() {
    ids=$(json '",".join(map(str, d["kvfs"]["prompt_tokens"]))' < "$1")
    curl -s "localhost:$EPORT/completion" -d "{\"prompt\": [$ids], \"n_predict\": 1, \"temperature\": 0, \"cache_prompt\": false, \"return_tokens\": true}" |
        json 'd["tokens"][0]'
}
first() { json 'd["kvfs"]["tokens"][0]' < "$1"; }

# a conversation with documents on its first user message (kvfs's per-message "documents")
for f in GPL-3 Apache-2.0; do head -c 1400 "/usr/share/common-licenses/$f" > "$T/$f.txt"; done
python3 -c "
import json
json.dump([open('$T/' + f + '.txt').read() for f in ('GPL-3', 'Apache-2.0')], open('$T/docs.json', 'w'))"
echo '[{"role": "system", "content": "You answer questions about software licenses."}]' > "$T/conv_a.json"
# turn 1 of A: the documents blended, the question computed, the turn saved
DOCS=$T/docs.json turn "$T/conv_a.json" "$T/a1.json" "Which of these licenses is from the Free Software Foundation?"
check "turn 1: no history ($(json 'd["kvfs"].get("history")' < "$T/a1.json")), its documents blended ($(json 'len(d["kvfs"]["chunks"])' < "$T/a1.json") chunks), prompt_n $(json 'd["timings"]["prompt_n"]' < "$T/a1.json") = $(json 'd["kvfs"]["suffix_tokens"]' < "$T/a1.json")" \
    test "$(json 'd["kvfs"].get("history") is None and len(d["kvfs"]["chunks"]) >= 3 and d["timings"]["prompt_n"] == d["kvfs"]["suffix_tokens"]' < "$T/a1.json")" = True
check "... saved into the mount after the answer" wait_saves 1
saved1=$(json 'len(d["kvfs"]["prompt_tokens"]) + len(d["kvfs"]["tokens"])' < "$T/a1.json")
# turn 2: the conversation so far found, only the new turn computed
turn "$T/conv_a.json" "$T/a2.json" "Which one is longer?"
check "turn 2: the conversation so far is found ($(json 'd["kvfs"]["history"]' < "$T/a2.json"))" \
    test "$(json 'd["kvfs"]["history"]["found"]' < "$T/a2.json")" = True
nh=$(json 'd["kvfs"]["history"]["tokens"]' < "$T/a2.json")
check "... it holds turn 1's prompt and answer (~$saved1 tokens; found $nh)" \
    test "$nh" -ge $((saved1 - 2)) -a "$nh" -le $((saved1 + 2))
pn=$(json 'd["timings"]["prompt_n"]' < "$T/a2.json")
ns=$(json 'd["kvfs"]["suffix_tokens"]' < "$T/a2.json")
np=$(json 'len(d["kvfs"]["prompt_tokens"])' < "$T/a2.json")
check "... restored as it is (no blend: $(json 'd["kvfs"]["blend"]' < "$T/a2.json")), only the new turn's $ns of $np tokens computed (prompt_n $pn)" \
    test "$pn" = "$ns" -a "$ns" -lt $((np / 5)) -a "$(json 'd["kvfs"]["blend"]' < "$T/a2.json")" = None
want=$(full_first "$T/a2.json")
check "... its first answer token ($(first "$T/a2.json")) = llama-server's full prefill of all $np tokens ($want)" \
    test "$(first "$T/a2.json")" = "$want"
check "... its slot still held it (the turn saved from there, no other conversation since): not restored (history $(json 'd["kvfs"]["history"]' < "$T/a2.json"))" \
    test "$(json 'd["kvfs"]["history"].get("in_slot") is True and "slot_miss" not in d["kvfs"]["history"]' < "$T/a2.json")" = True
check "... saved too" wait_saves 2

# other conversations take both slots in between
others=()
for c in b c d; do
    echo "[{\"role\": \"system\", \"content\": \"Conversation $c.\"}]" > "$T/conv_$c.json"
    turn "$T/conv_$c.json" "$T/${c}1.json" "Name a color that starts with the letter $c." &
    others+=($!)
done
for p in "${others[@]}"; do wait "$p"; done
check "three other conversations answered meanwhile" \
    test "$(for c in b c d; do json 'd["object"]' < "$T/${c}1.json"; done | grep -c '^chat.completion$')" = 3
wait_saves 5
turn "$T/conv_a.json" "$T/a3.json" "And which one allows closed-source use?" stream
check "turn 3 (streamed) after other conversations took the slots: found, restored from the mount (in_slot $(json 'd["kvfs"]["history"].get("in_slot")' < "$T/a3.json")), prompt_n $(json 'd["timings"]["prompt_n"]' < "$T/a3.json") = $(json 'd["kvfs"]["suffix_tokens"]' < "$T/a3.json")" \
    test "$(json 'd["kvfs"]["history"]["found"] and not d["kvfs"]["history"].get("in_slot") and d["timings"]["prompt_n"] == d["kvfs"]["suffix_tokens"]' < "$T/a3.json")" = True
check "... saved" wait_saves 6

# llama-server restarted (its slots empty), then kvfs-serve restarted
kill "$ENGINE_PID"; wait "$ENGINE_PID" 2> /dev/null
start_engine "$T/engine2.log" || exit 1
# A's state was left in a slot by turn 3's save: that slot is empty now
turn "$T/conv_a.json" "$T/a3b.json" "Which one is older?"
check "conversation A's next turn after llama-server restarted: restored from the mount, not taken from the emptied slot (in_slot $(json 'd["kvfs"]["history"].get("in_slot")' < "$T/a3b.json")), prompt_n $(json 'd["timings"]["prompt_n"]' < "$T/a3b.json") = $(json 'd["kvfs"]["suffix_tokens"]' < "$T/a3b.json")" \
    test "$(json 'd["kvfs"]["history"]["found"] and not d["kvfs"]["history"].get("in_slot") and d["timings"]["prompt_n"] == d["kvfs"]["suffix_tokens"]' < "$T/a3b.json")" = True
check "... the same first token as llama-server's full prefill" test "$(first "$T/a3b.json")" = "$(full_first "$T/a3b.json")"
wait_saves 7
turn "$T/conv_b.json" "$T/b2.json" "Why that one?"
check "conversation b's turn 2 after llama-server restarted: found, prompt_n $(json 'd["timings"]["prompt_n"]' < "$T/b2.json") = $(json 'd["kvfs"]["suffix_tokens"]' < "$T/b2.json")" \
    test "$(json 'd["kvfs"]["history"]["found"] and d["timings"]["prompt_n"] == d["kvfs"]["suffix_tokens"]' < "$T/b2.json")" = True
check "... the same first token as llama-server's full prefill" test "$(first "$T/b2.json")" = "$(full_first "$T/b2.json")"
hits=$(metric kvfs_serve_history_hits_total)
check "/metrics: history hits $hits, misses $(metric kvfs_serve_history_misses_total), saves $(metric kvfs_serve_turn_saves_total)" \
    test "$hits" = 4 -a "$(metric kvfs_serve_history_misses_total)" = 0
check "/metrics: $(metric kvfs_serve_history_in_slot_total) history found in its slot, $(metric kvfs_serve_history_slot_misses_total) lost there" \
    test "$(metric kvfs_serve_history_in_slot_total)" -ge 1 -a "$(metric kvfs_serve_history_slot_misses_total)" = 0
check "/metrics: the documents' tokens come again from the memo ($(metric 'kvfs_serve_memo_hits_total{memo="tokens"}') hits)" \
    test "$(metric 'kvfs_serve_memo_hits_total{memo="tokens"}')" -ge 2
wait_saves 8
kill "$SERVE_PID"; wait "$SERVE_PID" 2> /dev/null
start_serve "$T/serve2.log" --no-save-turns || exit 1
turn "$T/conv_a.json" "$T/a4.json" "Thanks. Anything else?"
check "turn 4 after kvfs-serve restarted: found, prompt_n $(json 'd["timings"]["prompt_n"]' < "$T/a4.json") = $(json 'd["kvfs"]["suffix_tokens"]' < "$T/a4.json")" \
    test "$(json 'd["kvfs"]["history"]["found"] and d["timings"]["prompt_n"] == d["kvfs"]["suffix_tokens"]' < "$T/a4.json")" = True

# an answer edited by the client: another history, a miss, the whole prompt computed
python3 -c "
import json
m = json.load(open('$T/conv_c.json'))
m[-1]['content'] = 'Cyan, I would say.'
json.dump(m, open('$T/conv_c.json', 'w'))"
turn "$T/conv_c.json" "$T/c2.json" "Why that one?"
check "an edited answer: the history is a miss, all $(json 'len(d["kvfs"]["prompt_tokens"])' < "$T/c2.json") tokens given to the engine ($(json 'd["kvfs"]["suffix_tokens"]' < "$T/c2.json"); it computed $(json 'd["timings"]["prompt_n"]' < "$T/c2.json") after its own cache)" \
    test "$(json 'not d["kvfs"]["history"]["found"] and d["kvfs"]["suffix_tokens"] == len(d["kvfs"]["prompt_tokens"])' < "$T/c2.json")" = True
check "... and its first token = llama-server's full prefill's" test "$(first "$T/c2.json")" = "$(full_first "$T/c2.json")"
check "/metrics after the restart: 1 hit, 1 miss" \
    test "$(metric kvfs_serve_history_hits_total)" = 1 -a "$(metric kvfs_serve_history_misses_total)" = 1
sleep 1
check "--no-save-turns: nothing saved ($(metric kvfs_serve_turn_saves_total))" test "$(metric kvfs_serve_turn_saves_total)" = 0
check "no save failed ($(grep -c 'saving a conversation' "$T/serve.log" "$T/serve2.log" | tr '\n' ' '))" \
    sh -c "! grep -q 'saving a conversation' '$T/serve.log' '$T/serve2.log'"
kill "$SERVE_PID"; wait "$SERVE_PID" 2> /dev/null
kill "$ENGINE_PID"; wait "$ENGINE_PID" 2> /dev/null
finish
