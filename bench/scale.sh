#!/bin/bash
# An 8B-shaped Q4_K_M model end to end (issue 17, "Scale"): Llama-3-8B's
# shapes with random weights, quantized by llama.cpp's own quantizer
# (tools/mkmodel-8b.py; SCALE_MODEL names another GGUF).  Through a real
# mount: two chunks prefilled into it, a blend of them with a question, a
# greedy decode from the blended file; the daemon's peak RSS.  Then
# bench/weights.py on the same file against llama.cpp (prefill at 512 and
# 2048 tokens, decode, RSS; no f32 variant: 32 GB).  Prints a markdown
# section (SCALE_WEIGHTS=0: the mount part only).  Skipped (exit 0, a note) when the model cannot be made: it needs
# ~21 GB of free disk for the f16 intermediate and ~10 minutes.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
KVFS=$BUILD/kvfs KVFSCTL=$BUILD/kvfsctl
MODEL=${SCALE_MODEL:-$BUILD/models/llama3-8b-shape.Q4_K_M.gguf}
if [ ! -s "$MODEL" ]; then
    mkdir -p "$(dirname "$MODEL")"
    free_gb=$(df -P --block-size=1G "$(dirname "$MODEL")" | awk 'NR == 2 {print $4}')
    [ "$free_gb" -ge 22 ] || { echo "scale bench: $free_gb GB free, the f16 intermediate needs 22; skipped" >&2; exit 0; }
    python3 tools/mkmodel-8b.py "$MODEL" >&2 || { echo "scale bench: cannot make $MODEL; skipped" >&2; exit 0; }
fi
T=$(mktemp -d /tmp/kvfs-scale.XXXXXX)
mp=$T/mnt
cleanup() { mountpoint -q "$mp" && fusermount3 -u "$mp"; wait 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
mkdir -p "$mp" "$T/store"
now() { echo "$EPOCHREALTIME"; }
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
t0=$(now)
"$KVFS" -f -o "store=$T/store,model=$PWD/$MODEL" "$mp" 2> "$T/kvfs.log" &
pid=$!
until [ -e "$mp/.kvfs/stats" ]; do
    kill -0 $pid 2>/dev/null || { cat "$T/kvfs.log" >&2; exit 1; }
    sleep 0.2
done
t_mount=$(since "$t0")
head -c 600 /usr/share/common-licenses/Apache-2.0 > "$T/a.txt"
head -c 600 /usr/share/common-licenses/GPL-3 > "$T/b.txt"
t0=$(now)
ha=$("$KVFSCTL" prefill -m "$MODEL" -M "$mp" "$T/a.txt" 2>/dev/null | cut -d' ' -f1)
hb=$("$KVFSCTL" prefill -m "$MODEL" -M "$mp" "$T/b.txt" 2>/dev/null | cut -d' ' -f1)
t_prefill=$(since "$t0")
n_a=$(getfattr --absolute-names --only-values -n user.kvfs.tokens "$mp/chunks/$ha.kv")
n_b=$(getfattr --absolute-names --only-values -n user.kvfs.tokens "$mp/chunks/$hb.kv")
size_a=$(stat -c %s "$mp/chunks/$ha.kv")
t0=$(now)
"$KVFSCTL" blend -M "$mp" --name rag --ratio 0.15 --suffix $'\n\nQuestion: Which licenses are these?\nAnswer:' "$ha" "$hb" > /dev/null
t_blend=$(since "$t0")
"$KVFSCTL" info "$mp/blends/rag.kv" > /dev/null
n_blend=$("$KVFSCTL" info --json "$mp/blends/rag.kv" | python3 -c 'import json,sys; print(json.load(sys.stdin)["n_tokens"])')
rss=$(awk '/VmHWM/ {print int($2 / 1024)}' /proc/$pid/status)
t0=$(now)
gen=$("$KVFSCTL" generate -m "$MODEL" --kv "$mp/blends/rag.kv" -n 8 --ids 2> "$T/gen.err")
t_gen=$(since "$t0")
file_mb=$(( $(stat -c %s "$MODEL") / 1048576 ))
echo "### An 8B-shaped model end to end (\`bench/scale.sh\`, run by \`make bench\`)"
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(basename "$MODEL") ($file_mb MiB: Llama-3-8B shapes, random"
echo "weights, quantized to Q4_K_M by llama.cpp's \`llama_model_quantize\`; \`tools/mkmodel-8b.py\`). Through a real"
echo "mount (\`model=\` that file):"
echo
echo "| step | result | seconds |"
echo "|---|---|---|"
printf '| mount (model loaded, RoPE self-test) | daemon up | %s |\n' "$t_mount"
printf '| `kvfsctl prefill -M` two chunks | %s + %s tokens, %d MiB per chunk file (f16 K/V) | %s |\n' "$n_a" "$n_b" $((size_a / 1048576)) "$t_prefill"
printf '| `kvfsctl blend -M` ratio 0.15 + question | %s tokens, verified | %s |\n' "$n_blend" "$t_blend"
printf '| `kvfsctl generate --kv` from the blended file | 8 tokens: %s | %s |\n' "$gen" "$t_gen"
echo
echo "Daemon peak RSS after the blend: $rss MiB (the file: $file_mb MiB, mapped; KV and scratch of a"
echo "$n_blend-token blend)."
echo
fusermount3 -u "$mp" && wait $pid # the daemon's memory back before llama.cpp runs
[ "${SCALE_WEIGHTS:-1}" = 0 ] && exit 0
KVFS_ORACLE_MODEL=$PWD/$MODEL WEIGHTS_F32=0 RUNS=${SCALE_RUNS:-1} WEIGHTS_DECODE=${SCALE_DECODE:-16} \
    python3 bench/weights.py | sed '1s/.*/#### The same file against llama.cpp (`bench\/weights.py`)/'
