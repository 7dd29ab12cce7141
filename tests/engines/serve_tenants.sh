#!/bin/bash
# kvfs-serve's tenants (kvfs-serve(1) TENANTS) in front of a real llama-server
# and a real mount:
#  - --api-keys FILE: a request without a key, or with a wrong one, is 401;
#    /health and /metrics answer without;
#  - each tenant's chunks are its own (a cache salt mixed into the chunk
#    names): tenant B asking for the documents tenant A brought is a miss,
#    prefilled anew under other names (and takes a miss's time); B naming
#    A's chunk by its hash is told it is not in the mount, as for a chunk
#    that does not exist; A's own are hits;
#  - a request's cache_salt (vLLM's) is another namespace again; the chunks
#    carry the salt (user.kvfs.salt);
#  - a conversation's saved history is found by its tenant only;
#  - a bad keys file is refused at start, naming the line.
# Run by `make test-engines`; skipped without llama-server.
. "$(dirname "$0")/lib/serve_common.sh"
"$SERVER" -m "$MODEL" --slot-save-path "$A/llama/" -np 2 -kvu --kv-unified-per-slot 4096 --cache-ram 0 \
    -t "$(nproc)" --port "$EPORT" > "$T/engine.log" 2>&1 &
PIDS+=($!)
ENGINE_PID=$!
for _ in $(seq 600); do curl -sf "localhost:$EPORT/health" > /dev/null && break; sleep 0.1; done

# bad key files: refused at start, the line named
printf 'only-one-word-here\n' > "$T/bad.keys"
"$SERVE" --mount "$A" --engine "http://127.0.0.1:$EPORT" --api-keys "$T/bad.keys" > "$T/bad.out" 2>&1
check "a keys file with a one-word line is refused at start ($(head -c 200 "$T/bad.out"))" \
    sh -c "grep -q 'bad.keys:1: want \"KEY TENANT\"' '$T/bad.out'"
printf 'short tenant-a\n' > "$T/bad.keys"
"$SERVE" --mount "$A" --engine "http://127.0.0.1:$EPORT" --api-keys "$T/bad.keys" > "$T/bad.out" 2>&1
check "... a key under 16 characters too ($(head -c 200 "$T/bad.out"))" grep -q 'bad.keys:1: a key of 5 characters' "$T/bad.out"
"$SERVE" --mount "$A" --engine "http://127.0.0.1:$EPORT" --api-keys "$T/none.keys" > "$T/bad.out" 2>&1
check "... a missing one too ($(head -c 200 "$T/bad.out"))" grep -q 'none.keys: No such file' "$T/bad.out"

KA=key-a-0123456789abcdef KB=key-b-fedcba9876543210
printf '# tenants\n%s tenant-a\n\n%s tenant-b\n' "$KA" "$KB" > "$T/api.keys"
chmod 600 "$T/api.keys"
"$SERVE" --mount "$A" --engine "http://127.0.0.1:$EPORT" --listen "127.0.0.1:$SPORT" --api-keys "$T/api.keys" \
    > "$T/serve.log" 2>&1 &
PIDS+=($!)
SERVE_PID=$!
for _ in $(seq 300); do curl -sf "localhost:$SPORT/health" > /dev/null && break; sleep 0.1; done
check "kvfs-serve starts with --api-keys: $(head -c 200 "$T/serve.log")" curl -sf "localhost:$SPORT/health" -o /dev/null

# ask KEY BODY: the reply in $T/body, the HTTP status printed
ask() {
    curl -s -o "$T/body" -w '%{http_code}' -X POST "$U/v1/completions" -H 'Content-Type: application/json' \
        ${1:+-H "Authorization: Bearer $1"} --data-binary "$2"
}
sources() { json '" ".join(c["source"] for c in d["kvfs"]["chunks"])' < "$1"; }
hashes() { json '" ".join(c["hash"] for c in d["kvfs"]["chunks"])' < "$1"; }

for f in GPL-3 Apache-2.0; do head -c 1400 "/usr/share/common-licenses/$f" > "$T/$f.txt"; done
req=$(python3 -c "
import json
docs = [open('$T/' + f + '.txt').read() for f in ('GPL-3', 'Apache-2.0')]
print(json.dumps({'documents': docs, 'prompt': '\nQuestion: which license is older?\nAnswer:', 'max_tokens': 4,
                  'temperature': 0}))")
check "no key: 401 ($(ask '' "$req") $(head -c 200 "$T/body"))" test "$(ask '' "$req")" = 401
check "a wrong key: 401" test "$(ask key-x-0123456789abcdef "$req")" = 401
check "/metrics answers without a key" sh -c "curl -sf '$U/metrics' | grep -q kvfs_serve_requests_total"

t0=$(date +%s.%N); st=$(ask "$KA" "$req"); t1=$(date +%s.%N); cp "$T/body" "$T/a1.json"
check "tenant A's request: $st, its documents prefilled ($(sources "$T/a1.json"))" \
    test "$st" = 200 -a "$(sources "$T/a1.json")" = "prefilled prefilled"
ta_miss=$(echo "$t1 - $t0" | bc)
t0=$(date +%s.%N); ask "$KA" "$req" > /dev/null; t1=$(date +%s.%N); cp "$T/body" "$T/a2.json"
ta_hit=$(echo "$t1 - $t0" | bc)
check "... again: hits ($(sources "$T/a2.json"))" test "$(sources "$T/a2.json")" = "hit hit"
p0=$(metric kvfs_serve_chunk_prefills_total)
t0=$(date +%s.%N); ask "$KB" "$req" > /dev/null; t1=$(date +%s.%N); cp "$T/body" "$T/b1.json"
tb=$(echo "$t1 - $t0" | bc)
check "tenant B bringing the same documents: a miss, prefilled anew ($(sources "$T/b1.json"); prefills $p0 -> $(metric kvfs_serve_chunk_prefills_total)); ${tb}s like A's miss ${ta_miss}s, not A's hit ${ta_hit}s" \
    test "$(sources "$T/b1.json")" = "prefilled prefilled" -a "$(metric kvfs_serve_chunk_prefills_total)" = $((p0 + 2))
check "... under other chunk names" \
    python3 -c "import sys; assert not set('$(hashes "$T/a1.json")'.split()) & set('$(hashes "$T/b1.json")'.split())"
check "... the same answer" test "$(json 'd["choices"][0]["text"]' < "$T/b1.json")" = "$(json 'd["choices"][0]["text"]' < "$T/a1.json")"
ha=$(json 'd["kvfs"]["chunks"][0]["hash"]' < "$T/a1.json")
byhash="{\"documents\": [\"$ha\"], \"prompt\": \"\\nQuestion: what is this?\\nAnswer:\", \"max_tokens\": 2}"
st=$(ask "$KB" "$byhash")
check "B naming A's chunk by its hash: $st, '$(json 'd["error"]["message"]' < "$T/body")'" \
    sh -c "[ $st = 400 ] && grep -q 'not in the mount' '$T/body'"
nohash=$(echo "$byhash" | sed "s/$ha/$(printf '%064d' 0)/")
ask "$KB" "$nohash" > /dev/null
check "... the same answer as for a chunk that does not exist ('$(json 'd["error"]["message"]' < "$T/body")')" \
    grep -q 'not in the mount' "$T/body"
check "A naming it: a hit" sh -c "[ $(ask "$KA" "$byhash") = 200 ] && grep -q '\"source\":\"hit\"' '$T/body'"
check "the chunks carry their tenant's salt (user.kvfs.salt), A's and B's differ" python3 -c "
import os
a = os.getxattr('$A/chunks/$ha.kv', 'user.kvfs.salt')
b = os.getxattr('$A/chunks/$(json 'd["kvfs"]["chunks"][0]["hash"]' < "$T/b1.json").kv', 'user.kvfs.salt')
assert len(a) >= 64 and a != b, (a, b)"

sreq=$(echo "$req" | json 'json.dumps(dict(d, cache_salt="run-2"))')
ask "$KA" "$sreq" > /dev/null; cp "$T/body" "$T/s1.json"
ask "$KA" "$sreq" > /dev/null; cp "$T/body" "$T/s2.json"
check "A with a cache_salt: another namespace (a miss: $(sources "$T/s1.json"), then $(sources "$T/s2.json"))" \
    test "$(sources "$T/s1.json")" = "prefilled prefilled" -a "$(sources "$T/s2.json")" = "hit hit"
check "a cache_salt that is not a string: 400" \
    test "$(ask "$KA" "$(echo "$req" | json 'json.dumps(dict(d, cache_salt=7))')")" = 400

# a conversation saved for A is not B's
chat() { # chat KEY FILE MESSAGES_JSON
    curl -s -X POST "$U/v1/chat/completions" -H 'Content-Type: application/json' -H "Authorization: Bearer $1" \
        --data-binary "{\"messages\": $3, \"max_tokens\": 8, \"temperature\": 0}" > "$2"
}
chat "$KA" "$T/c1.json" '[{"role": "user", "content": "Name a prime number."}]'
ans=$(json 'json.dumps(d["choices"][0]["message"]["content"])' < "$T/c1.json")
for _ in $(seq 300); do [ "$(metric kvfs_serve_turn_saves_total)" -ge 1 ] 2> /dev/null && break; sleep 0.1; done
turn2="[{\"role\": \"user\", \"content\": \"Name a prime number.\"}, {\"role\": \"assistant\", \"content\": $ans}, {\"role\": \"user\", \"content\": \"And another?\"}]"
chat "$KB" "$T/c2b.json" "$turn2"
chat "$KA" "$T/c2a.json" "$turn2"
check "A's conversation: B's next turn does not find it ($(json 'd["kvfs"]["history"]["found"]' < "$T/c2b.json")), A's does ($(json 'd["kvfs"]["history"]["found"]' < "$T/c2a.json"))" \
    test "$(json 'd["kvfs"]["history"]["found"]' < "$T/c2b.json")" = False -a "$(json 'd["kvfs"]["history"]["found"]' < "$T/c2a.json")" = True
kill "$SERVE_PID"; wait "$SERVE_PID" 2> /dev/null
kill "$ENGINE_PID"; wait "$ENGINE_PID" 2> /dev/null
finish
