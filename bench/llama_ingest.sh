#!/bin/bash
# What a llama-server slot save into MNT/llama/ costs the mount: N states of
# TOKENS tokens saved by a real llama-server (SmolLM2) into a plain
# directory once, then each written into llama/ of a fresh mount (as the
# engine writes them: 1 MiB writes) and stored as a chunk; the daemon's CPU
# time (from /proc: robust on a busy machine) and the wall time per state,
# medians of ROUNDS rounds, for each kvfs build given (side by side: the
# same states, one round of each build after the other).
#
# usage: LLAMA_SERVER=... bench/llama_ingest.sh [BUILD ...]   (default: build)
#        N=6 TOKENS=1300 ROUNDS=3
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
N=${N:-6} TOKENS=${TOKENS:-1300} ROUNDS=${ROUNDS:-3}
MODEL=${MODEL:-$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf}
SERVER=${LLAMA_SERVER:-$ROOT/build/llama-server/bin/llama-server}
[ -x "$SERVER" ] || { echo "llama-server not found (LLAMA_SERVER=...)" >&2; exit 1; }
[ $# -gt 0 ] || set -- build
for b in "$@"; do [ -x "$b/kvfs" ] || { echo "no kvfs in $b" >&2; exit 1; }; done
T=$(mktemp -d "${TMPDIR:-/tmp}/kvfs-llama-ingest.XXXXXX")
trap 'for m in "$T"/*.mnt; do fusermount3 -u "$m" 2>/dev/null; done; rm -rf "$T"' EXIT
mkdir "$T/states"
PORT=$((30000 + RANDOM % 20000))
"$SERVER" -m "$MODEL" -np 1 -c $((TOKENS + 512)) --port $PORT -t "$(nproc)" --slot-save-path "$T/states/" \
    --cache-ram 0 > "$T/server.log" 2>&1 &
SP=$!
for _ in $(seq 300); do curl -sf "localhost:$PORT/health" >/dev/null && break; sleep 0.2; done
python3 - "$PORT" "$N" "$TOKENS" <<'PY' || { kill $SP; exit 1; }
import json, sys, urllib.request
port, n, tokens = map(int, sys.argv[1:])
def post(p, b):
    r = urllib.request.urlopen(urllib.request.Request(f'http://127.0.0.1:{port}{p}', json.dumps(b).encode(),
                                                      {'Content-Type': 'application/json'}))
    return json.loads(r.read())
text = ''.join(open(f).read() for f in ('/usr/share/common-licenses/GPL-3', '/usr/share/common-licenses/Apache-2.0'))
ids = post('/tokenize', {'content': text})['tokens']
for k in range(n):  # distinct token sequences: distinct chunks
    post('/completion', {'prompt': ids[k * 7:k * 7 + tokens], 'n_predict': 0, 'id_slot': 0, 'cache_prompt': False})
    post('/slots/0?action=save', {'filename': f'st{k}.bin'})
PY
kill $SP; wait $SP 2>/dev/null
echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) vCPUs; $N states of $TOKENS tokens, $(stat -c %s "$T/states/st0.bin") bytes each"
tick=$(getconf CLK_TCK)
for r in $(seq "$ROUNDS"); do
    for b in "$@"; do
        m=$T/r$r.mnt s=$T/r$r.store
        rm -rf "$m" "$s"; mkdir -p "$m" "$s"
        "$b/kvfs" -f -o "store=$s,model=$MODEL" "$m" 2>"$T/kvfs.log" &
        P=$!
        for _ in $(seq 300); do [ -e "$m/.kvfs/stats" ] && break; sleep 0.1; done
        c0=$(awk '{print $14 + $15}' /proc/$P/stat); t0=$(date +%s.%N)
        for k in $(seq 0 $((N - 1))); do dd if="$T/states/st$k.bin" of="$m/llama/x$k.bin" bs=1M status=none; done
        t1=$(date +%s.%N); c1=$(awk '{print $14 + $15}' /proc/$P/stat)
        stored=$(grep -c 'stored llama' "$T/kvfs.log")
        fusermount3 -u "$m"; wait $P 2>/dev/null
        echo "$b $(echo "($c1 - $c0) * 1000 / $tick / $N" | bc -l) $(echo "($t1 - $t0) * 1000 / $N" | bc -l) $stored"
    done
done | python3 -c '
import statistics, sys
rows = {}
for line in sys.stdin:
    b, cpu, wall, stored = line.split()
    rows.setdefault(b, []).append((float(cpu), float(wall), int(stored)))
for b, v in rows.items():
    print(f"{b}: daemon CPU {statistics.median(x[0] for x in v):.0f} ms, wall {statistics.median(x[1] for x in v):.0f} ms"
          f" per state (medians of {len(v)} rounds; stored {min(x[2] for x in v)} of each round)")'
