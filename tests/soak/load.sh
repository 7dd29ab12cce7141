#!/bin/bash
# Load (issue 19): 16 concurrent clients for SECONDS (default 600) on one
# mount with a capacity= limit and a tiny synthetic model: 10 clients churn
# chunks (cp into incoming/, ls, cat | cmp against the source, rm), 6 blend
# (a recipe of 2-3 pinned chunks and a query of their own, cat the result,
# `kvfsctl info` verifies it, rm the recipe).  A sampler reads .kvfs/stats
# and the daemon's RSS every 0.5 s.  Fails when the stored bytes ever exceed
# capacity, a read returns wrong bytes, a blend result does not verify, or
# the daemon dies.  Prints the counts and the peak RSS.
# Usage: tests/soak/load.sh [SECONDS]
. "$(dirname "$0")/../lib.sh"
SECS=${1:-600}
MODEL=$T/tiny.gguf
"$KVFSCTL" mkmodel -o "$MODEL" --layers 4 --embd 128 --heads 4 --kv-heads 4 --ff 256 --seed 19 > /dev/null || exit 1
CAP=$((24 << 20))
mount_kvfs a "model=$MODEL,capacity=24M,ram=16M,blend_cache=8M,blend_jobs=2" || exit 1
M=$T/a.mnt
declare -A SRC
N=40 # synthetic chunks, 0.1-1.5 MB each: ~30 MB in all, above capacity
for i in $(seq 1 $N); do
    h=$("$KVFSCTL" synth -o "$T/s$i.kv" --layers 4 --kv-heads 4 --head-dim 32 --tokens $((50 + i * 17)) --seed $((900 + i)))
    SRC[$i]=$h
done
for k in 1 2 3 4; do
    printf 'Document %d. %s' "$k" "$(tail -c +$((k * 400)) /usr/share/common-licenses/GPL-3 | head -c 200)" > "$T/d$k.txt"
    base[$k]=$("$KVFSCTL" prefill -m "$MODEL" -M "$M" "$T/d$k.txt" 2>/dev/null | cut -d' ' -f1)
    setfattr -n user.kvfs.pinned -v 1 "$M/chunks/${base[$k]}.kv" || fail "pin base chunk $k"
done
end=$(( $(date +%s) + SECS ))
chunk_client() { # chunk_client ID: counts to $T/c.ID
    local id=$1 ops=0 reads=0 wrong=0 gone=0
    while [ "$(date +%s)" -lt "$end" ]; do
        i=$(( RANDOM % N + 1 ))
        case $(( RANDOM % 4 )) in
        0) cp "$T/s$i.kv" "$M/incoming/" 2>/dev/null ;;
        1) ls "$M/chunks" > /dev/null ;;
        2) cmp "$M/chunks/${SRC[$i]}.kv" "$T/s$i.kv" > /dev/null 2>&1
           case $? in 0) reads=$((reads + 1));; 1) wrong=$((wrong + 1)); echo "client $id: wrong bytes in ${SRC[$i]}";; *) gone=$((gone + 1));; esac ;;
        3) [ $(( RANDOM % 3 )) -eq 0 ] && rm -f "$M/chunks/${SRC[$i]}.kv" 2>/dev/null ;;
        esac
        ops=$((ops + 1))
    done
    echo "$ops $reads $wrong $gone" > "$T/c.$id"
}
blend_client() { # blend_client ID: counts to $T/b.ID
    local id=$1 n=0 ok=0 bad=0
    while [ "$(date +%s)" -lt "$end" ]; do
        n=$((n + 1))
        { printf '%s\n' "${base[$(( RANDOM % 4 + 1 ))]}" "${base[$(( RANDOM % 4 + 1 ))]}"
          [ $(( n % 2 )) -eq 0 ] && printf '%s\n' "${base[$(( RANDOM % 4 + 1 ))]}"
          printf 'suffix=\\nClient %d question %d: which document?\\nAnswer:\n' "$id" "$n"; } > "$M/blends/l$id.recipe" &&
        cat "$M/blends/l$id.kv" > "$T/b$id.kv" 2>/dev/null && "$KVFSCTL" info "$T/b$id.kv" > /dev/null 2>&1 &&
            ok=$((ok + 1)) || { bad=$((bad + 1)); echo "client b$id: blend $n failed: $(cat "$M/blends/l$id.err" 2>/dev/null | head -1)"; }
        rm -f "$M/blends/l$id.recipe"
    done
    echo "$n $ok $bad" > "$T/b.$id"
}
sampler() {
    local peak=0 over=0 max_stored=0
    while [ "$(date +%s)" -lt "$end" ]; do
        r=$(awk '/^VmRSS:/ {print $2}' "/proc/$MNT_PID/status" 2>/dev/null) || break
        [ -n "$r" ] && [ "$r" -gt "$peak" ] && peak=$r
        s=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["bytes_stored"])' "$M/.kvfs/stats" 2>/dev/null)
        if [ -n "$s" ]; then
            [ "$s" -gt "$max_stored" ] && max_stored=$s
            [ "$s" -gt "$CAP" ] && { over=$((over + 1)); echo "stored $s > capacity $CAP"; }
        fi
        sleep 0.5
    done
    echo "$peak $over $max_stored" > "$T/sampler"
}
t0=$EPOCHREALTIME
clients=()
for c in $(seq 1 10); do chunk_client "$c" & clients+=($!); done
for c in $(seq 1 6); do blend_client "$c" & clients+=($!); done
sampler & clients+=($!)
wait "${clients[@]}" # not the daemon, also a child of this shell
read -r peak over max_stored < "$T/sampler"
ops=0 reads=0 wrong=0 gone=0 bl=0 blok=0 blbad=0
for c in $(seq 1 10); do read -r a b w g < "$T/c.$c"; ops=$((ops + a)); reads=$((reads + b)); wrong=$((wrong + w)); gone=$((gone + g)); done
for c in $(seq 1 6); do read -r a b w < "$T/b.$c"; bl=$((bl + a)); blok=$((blok + b)); blbad=$((blbad + w)); done
secs=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.0f", b-a}')
echo "load: 16 clients, $secs s: $ops chunk ops ($reads reads verified by cmp, $wrong wrong, $gone gone before the read), $bl blends ($blok verified, $blbad failed); peak stored $max_stored of capacity $CAP, $over samples over; daemon peak RSS $((peak / 1024)) MiB"
check "the daemon is alive" kill -0 "$MNT_PID"
check "no read returned wrong bytes" test "$wrong" -eq 0
check "stored bytes never exceeded capacity" test "$over" -eq 0
check "every blend verified" test "$blbad" -eq 0
check "reads and blends happened" test "$reads" -gt 0 -a "$blok" -gt 0
check "no error logged" bash -c '! grep -q " ERR " "$1"' bash "$T/a.log"
finish
