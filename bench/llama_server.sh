#!/bin/bash
# A real engine's time to first token (BENCHMARKS.md, "llama-server"): a RAG
# prompt of 6 passages x ~512 tokens + a question, answered by llama.cpp's
# own server (make llama-server), side by side in one run:
#   (a) full prefill: the server computes the whole prompt (slot erased first);
#   (b) kvfs: POST /slots/0?action=restore of llama/NAME.llama -- the open
#       blends the six stored chunks (ratio 0.15, chunks on the store's disk:
#       ram=0) -- then the same prompt as token ids, of which the server
#       computes only the last few (the "Answer:" cue).
# Each round asks a new question, so (b) blends afresh every time.
# Usage: bench/llama_server.sh [ROUNDS]
cd "$(dirname "$0")/.." || exit 1
export KVFS_ROOT=$PWD
. tests/lib.sh
MODEL=$KVFS_ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf
SERVER=$BUILD/llama-server/bin/llama-server
[ -s "$MODEL" ] && [ -x "$SERVER" ] || { echo "llama-server bench: model or $SERVER missing" >&2; exit 0; }
ROUNDS=${1:-5}
mount_kvfs s "model=$MODEL,ram=0" || exit 1
M=$T/s.mnt
cat /usr/share/common-licenses/{GPL-3,Apache-2.0,MPL-2.0,GFDL-1.3} > "$T/corpus.txt"
ids() { "$KVFSCTL" tokenize -m "$MODEL" "$1" 2>/dev/null | tr ' ' ','; }
h=(); P=""
for i in $(seq 0 5); do # 6 passages of 512 tokens: cut at token boundaries
    tail -c +$((1 + i * 2600)) "$T/corpus.txt" | head -c 2600 > "$T/raw$i.txt"
    all=$(ids "$T/raw$i.txt")
    p=$(echo "$all" | cut -d, -f1-512)
    P=${P:+$P,}$p
    # the chunk of exactly those ids: prefill the text they decode to would
    # retokenize differently, so prefill the ids' own text via --ids-file
    h[$i]=$("$KVFSCTL" prefill -m "$MODEL" -M "$M" --ids "$p" 2>/dev/null | cut -d' ' -f1)
done
PORT=$((20000 + RANDOM % 20000))
"$SERVER" -m "$MODEL" --slot-save-path "$M/llama/" -np 1 -c 8192 --cache-ram 0 -t "$(nproc)" --port "$PORT" > "$T/server.log" 2>&1 &
PIDS+=($!); SRV=$!
for _ in $(seq 300); do curl -sf "localhost:$PORT/health" > /dev/null && break; sleep 0.1; done
post() { curl -s -X POST "localhost:$PORT$1" -H 'Content-Type: application/json' -d "$2"; }
now() { date +%s.%N; }
ANS=$(printf '\nAnswer:' | "$KVFSCTL" tokenize -m "$MODEL" - 2>/dev/null | tr ' ' ',')
rows=(); fa=(); fb=()
for r in $(seq "$ROUNDS"); do
    Q=$'\n'"Question $r: which of these licenses says the most about patents?"
    QI=$(printf '%s' "$Q" | "$KVFSCTL" tokenize -m "$MODEL" - 2>/dev/null | tr ' ' ',')
    PROMPT="[$P,$QI,$ANS]"
    # (a) full prefill by the server
    post /slots/0?action=erase '{}' > /dev/null
    t0=$(now)
    post /completion "{\"prompt\": $PROMPT, \"n_predict\": 1, \"temperature\": 0, \"cache_prompt\": true, \"id_slot\": 0}" > "$T/a.json"
    t1=$(now)
    na=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["timings"]["prompt_n"])' "$T/a.json")
    # (b) kvfs: the recipe, then restore (blends on open) + the cue
    printf 'ratio=0.15\n%s\n%s\n%s\n%s\n%s\n%s\nsuffix_tokens=%s\n' "${h[@]}" "$QI" > "$M/blends/q$r.recipe"
    post /slots/0?action=erase '{}' > /dev/null
    t2=$(now)
    post /slots/0?action=restore "{\"filename\": \"q$r.llama\"}" > "$T/r.json"
    post /completion "{\"prompt\": $PROMPT, \"n_predict\": 1, \"temperature\": 0, \"cache_prompt\": true, \"id_slot\": 0}" > "$T/b.json"
    t3=$(now)
    nb=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["timings"]["prompt_n"])' "$T/b.json")
    nr=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("n_restored", "error"))' "$T/r.json")
    a=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", b-a}')
    b=$(awk -v a="$t2" -v b="$t3" 'BEGIN{printf "%.3f", b-a}')
    fa+=("$a"); fb+=("$b")
    rows+=("| $r | $na | $a | $nr + $nb | $b | $(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.2fx", a/b}') |")
done
kill "$SRV"; wait "$SRV" 2>/dev/null
med() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END{print (NR%2)?v[(NR+1)/2]:(v[NR/2]+v[NR/2+1])/2}'; }
ma=$(med "${fa[@]}"); mb=$(med "${fb[@]}")
echo "### llama-server: time to first token (\`bench/llama_server.sh $ROUNDS\`, run by \`make bench\`)"
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores. llama-server built from the llama.cpp in llama-cpp-python"
echo "0.3.36's sdist (\`make llama-server\`), SmolLM2-135M Q4_1, \`-np 1 -c 8192 --cache-ram 0 -t $(nproc)\`. Prompt: 6 passages of"
echo "512 tokens + a question + \"Answer:\" (as token ids). (a) the server prefills it all; (b) it restores"
echo "\`llama/qN.llama\` from a kvfs mount (\`ram=0\`: the six chunks read from the store's disk and blended at"
echo "ratio 0.15 by the open), then gets the same prompt and computes only what the blend lacks. Wall seconds"
echo "from the first request to the first token, a new question each round:"
echo
echo "| round | (a) tokens computed | (a) full prefill s | (b) restored + computed | (b) kvfs blend + restore s | (a)/(b) |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
echo "Median: full prefill $ma s, kvfs blend + restore $mb s: **$(awk -v a="$ma" -v b="$mb" 'BEGIN{printf "%.2fx", a/b}')** faster to the first token."
finish > /dev/null
