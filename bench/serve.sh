#!/bin/bash
# Serving under load (BENCHMARKS.md, "Serving"): one mount with the model,
# a pool of 24 prefilled passages, then bench/serve.py: N clients sending
# RAG recipes (6 chunks by Zipf popularity, a new question each) for a
# fixed time, and the same prompts as full prefills (ratio=1).  Prints a
# markdown section.  Usage: bench/serve.sh [CLIENTS] [SECONDS] [RAM]
# (defaults 8 60 64M)
cd "$(dirname "$0")/.." || exit 1
export KVFS_ROOT=$PWD
. tests/lib.sh
MODEL=$KVFS_ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -s "$MODEL" ] || skip "model missing (make model)"
CLIENTS=${1:-8}; SECS=${2:-60}; RAM=${3:-64M}
mount_kvfs s "model=$MODEL,ram=$RAM,blend_jobs=2" || exit 1
M=$T/s.mnt
cat /usr/share/common-licenses/{GPL-3,Apache-2.0,MPL-2.0,GFDL-1.3,Artistic} > "$T/corpus.txt"
for i in $(seq 0 23); do  # 24 passages of 1500 bytes (~370 tokens)
    tail -c +$((1 + i * 1500)) "$T/corpus.txt" | head -c 1500 > "$T/p$i.txt"
    "$KVFSCTL" prefill -m "$MODEL" -M "$M" "$T/p$i.txt" 2>/dev/null | cut -d' ' -f1
done > "$T/hashes"
rss0=$(awk '/VmRSS/{printf "%.0f", $2/1024}' /proc/$MNT_PID/status)
python3 bench/serve.py "$M" "$MNT_PID" "$T/hashes" --clients "$CLIENTS" --seconds "$SECS" > "$T/serve.out" || FAILS=1
echo "### Serving under load (\`bench/serve.sh\`, run by \`make bench\`)"
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, \`bench/serve.sh $CLIENTS $SECS $RAM\`: one mount"
echo "(\`ram=$RAM,blend_jobs=2\`), 24 prefilled passages of ~370 tokens; $CLIENTS closed-loop clients, each"
echo "request 6 chunks drawn by Zipf(1.1) popularity plus a question nobody asked before (so no recipe"
echo "is served from the result cache), for ${SECS} s; then the same prompts as \`ratio=1\` recipes, which"
echo "the same daemon computes as a full prefill. TTFT = writing the recipe to having the blended"
echo "file's last byte. Daemon RSS with the model loaded, before any blend: ${rss0} MiB."
echo
echo '```'
cat "$T/serve.out"
echo '```'
echo
# memory: 1000 distinct recipes of 3 short passages each (fast blends), RSS
# before and after against the model + ram= bound
for i in $(seq 0 11); do
    tail -c +$((1 + i * 300 + 60000)) "$T/corpus.txt" | head -c 300 > "$T/s$i.txt"
    "$KVFSCTL" prefill -m "$MODEL" -M "$M" "$T/s$i.txt" 2>/dev/null | cut -d' ' -f1
done > "$T/short"
rss1=$(awk '/VmRSS/{printf "%.0f", $2/1024}' /proc/$MNT_PID/status)
python3 bench/serve.py "$M" "$MNT_PID" "$T/short" --clients 2 --seconds 0 --requests 1000 --chunks 3 --no-full \
    > "$T/rss.out" || FAILS=1
rss2=$(awk '/VmRSS/{printf "%.0f", $2/1024}' /proc/$MNT_PID/status)
sleep 3 # the service trims its memory 2 s after its last blend
rss3=$(awk '/VmRSS/{printf "%.0f", $2/1024}' /proc/$MNT_PID/status)
ram_mib=$(( $(numfmt --from=iec "$RAM") / 1048576 ))
echo "Memory: then 1000 more distinct recipes (3 passages of ~75 tokens each, 2 clients):"
echo
echo '```'
cat "$T/rss.out"
echo '```'
echo
echo "Daemon RSS: ${rss0} MiB with the model loaded, ${rss1} MiB after the load above, ${rss2} MiB right after the"
echo "1000 recipes, ${rss3} MiB once idle (3 s later); bound (model RSS + ram= + 20%): $(( (rss0 + ram_mib) * 12 / 10 )) MiB."
echo
echo "Stats after the run: \`$(grep -o '"max_running": [0-9]*, "max_waiting": [0-9]*' "$M/.kvfs/stats")\`,"
echo "\`$(grep -o '"results": {"count": [0-9]*, "pinned": [0-9]*, "bytes_stored": [0-9]*' "$M/.kvfs/stats")\`."
finish > /dev/null
