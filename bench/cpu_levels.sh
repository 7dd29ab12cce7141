#!/bin/bash
# Full prefill and blend time at each x86-64 ISA level this CPU runs, side
# by side in one run (KVFS_CPU_LEVEL), and optionally against another kvfsctl
# (REF=path, e.g. a -march=native build of an earlier commit): does run-time
# dispatch cost anything, and what does each level run at.  Medians of RUNS
# (default 3) `kvfsctl eval` rounds (the variants alternating) of 6 chunks + a question (TTFT from cached
# chunks in memory, as eval measures it).  Prints a Markdown table.
# Usage: bench/cpu_levels.sh [MODEL.gguf]   (default: SmolLM2; ~2-6 min)
cd "$(dirname "$0")/.." || exit 1
MODEL=${1:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
RUNS=${RUNS:-3}
KVFSCTL=${KVFSCTL:-build/kvfsctl}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
i=0
for f in GPL-3 Apache-2.0 MPL-2.0 LGPL-3 Artistic GFDL-1.3; do
    head -c 1400 "/usr/share/common-licenses/$f" > "$T/c$i.txt"; i=$((i + 1))
done
Q=$'\n\nQuestion: Which licenses are these?\nAnswer:'
read -r -a levels <<< "$("$KVFSCTL" --version | sed -n 's/^cpu levels: //p')"
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
variants=()
[ -n "${REF:-}" ] && variants+=("ref:$REF:")
for l in "${levels[@]}"; do variants+=("$l:$KVFSCTL:$l"); done
# rounds alternate the variants, so a machine that slows down mid-run slows
# every variant alike
for r in $(seq "$RUNS"); do
    for v in "${variants[@]}"; do
        IFS=: read -r label bin level <<< "$v"
        KVFS_CPU_LEVEL=$level "$bin" eval -m "$MODEL" --json --greedy 1 --ratio 0.15 --no-prefix --query "$Q" \
            "$T"/c*.txt > "$T/$label.$r.json" || { echo "eval failed ($label)" >&2; exit 1; }
    done
done
for v in "${variants[@]}"; do
    IFS=: read -r label _ <<< "$v"
    python3 - "$label" "$T" "$RUNS" <<'PY'
import json, statistics, sys
label, d, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
full, blend = [], []
for r in range(1, runs + 1):
    res = {x['method']: x for x in json.load(open(f'{d}/{label}.{r}.json'))['results']}
    full.append(res['full prefill']['ttft_s']); blend.append(res['blend 0.15']['ttft_s'])
print(label, statistics.median(full), statistics.median(blend))
PY
done > "$T/rows"
echo "$(basename "$MODEL"), 6 chunks + question, medians of $RUNS; CPU: $cpu ($(nproc) threads), $(date -u +%F)"
echo
echo "| kernels | full prefill s | blend 0.15 s | full vs best level | blend vs best level |"
echo "|---|---|---|---|---|"
python3 - "$T/rows" "${levels[-1]}" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1])]
best = next(r for r in rows if r[0] == sys.argv[2])
names = {'ref': 'REF build', 'v2': 'x86-64-v2', 'v3': 'x86-64-v3', 'v4': 'x86-64-v4', 'vnni': 'x86-64-v4+vnni'}
for r in rows:
    print(f"| {names.get(r[0], r[0])} | {float(r[1]):.3f} | {float(r[2]):.3f} | {float(r[1]) / float(best[1]):.2f}x | {float(r[2]) / float(best[2]):.2f}x |")
PY
