#!/bin/bash
# make serve: kvfs, llama-server and kvfs-serve on embedded defaults, in the
# foreground until Ctrl-C.  kvfs is mounted on build/serve/mnt (store
# build/serve/store) with SmolLM2-135M; llama-server (make llama-server) on
# 127.0.0.1:$ENGINE_PORT with its slots saved into the mount's llama/;
# kvfs-serve answers on 127.0.0.1:$PORT.  Environment: PORT (default 8090),
# ENGINE_PORT (8091), SLOTS (4), CTX (4096 per slot), MODEL.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
PORT=${PORT:-8090}
ENGINE_PORT=${ENGINE_PORT:-8091}
SLOTS=${SLOTS:-4}
CTX=${CTX:-4096}
RUN=$PWD/$BUILD/serve
MNT=$RUN/mnt
SERVER=$BUILD/llama-server/bin/llama-server
mkdir -p "$RUN/store" "$MNT"
fusermount3 -u "$MNT" 2>/dev/null || true
pids=()
stop() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    fusermount3 -u "$MNT" 2>/dev/null || true
}
trap stop EXIT
trap 'exit 0' INT TERM
"$BUILD/kvfs" -f -o "store=$RUN/store,ram=512M,model=$PWD/$MODEL,llama_saves=async" "$MNT" 2>"$RUN/kvfs.log" &
pids+=($!)
for _ in $(seq 400); do [ -e "$MNT/.kvfs/stats" ] && break; sleep 0.05; done
[ -e "$MNT/.kvfs/stats" ] || { echo "kvfs failed to mount:"; cat "$RUN/kvfs.log"; exit 1; }
echo "== kvfs mounted on $MNT (store $RUN/store, log $RUN/kvfs.log)"
"$SERVER" -m "$PWD/$MODEL" --slot-save-path "$MNT/llama/" -np "$SLOTS" -kvu --kv-unified-per-slot "$CTX" --cache-ram 0 \
    -t "$(nproc)" --host 127.0.0.1 --port "$ENGINE_PORT" > "$RUN/llama-server.log" 2>&1 &
pids+=($!)
for _ in $(seq 600); do curl -sf "127.0.0.1:$ENGINE_PORT/health" > /dev/null 2>&1 && break; sleep 0.1; done
curl -sf "127.0.0.1:$ENGINE_PORT/health" > /dev/null ||
    { echo "llama-server did not start:"; tail "$RUN/llama-server.log"; exit 1; }
echo "== llama-server on 127.0.0.1:$ENGINE_PORT, $SLOTS slots (log $RUN/llama-server.log)"
"$BUILD/kvfs-serve" --mount "$MNT" --engine "http://127.0.0.1:$ENGINE_PORT" --listen "127.0.0.1:$PORT" &
pids+=($!)
for _ in $(seq 300); do curl -sf "127.0.0.1:$PORT/health" > /dev/null 2>&1 && break; sleep 0.1; done
cat <<EOF
== kvfs-serve on http://127.0.0.1:$PORT (Ctrl-C stops all three). Try:
curl 127.0.0.1:$PORT/v1/chat/completions -d '{
  "messages": [{"role": "user", "content": "Which of these licenses was written by the FSF?"}],
  "documents": ["$(head -c 300 /usr/share/common-licenses/GPL-3 | tr -d '\n"\\' | cut -c1-200)",
                "$(head -c 300 /usr/share/common-licenses/Apache-2.0 | tr -d '\n"\\' | cut -c1-200)"],
  "max_tokens": 32}'
curl 127.0.0.1:$PORT/metrics
EOF
wait "${pids[2]}"
