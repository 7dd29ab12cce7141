#!/bin/bash
# Fleet soak (issue 44, `make fleet-soak`): HOSTS (default 8) kvfs mounts,
# each its own daemon and store, share namespace "fleet" of a real Ceph
# cluster (tests/ceph/cluster.sh: 1 mon, 3 bluestore OSDs) with a
# remote_capacity well below the corpus, for FLEET_SECONDS (default 600).
# One worker per host draws chunks of a synthetic corpus with a Zipf
# popularity and copies them in (the stand-in for a prefill), reads them
# (cmp against the source: every byte checked), blends pinned base chunks of
# a tiny model (cmp against `kvfsctl blend --local` of the same recipe), rm's
# them locally and evicts them from the pool (kvfsctl remote evict).
# Faults while it runs: an OSD killed and revived; a mount SIGKILLed and
# restarted; one mount's traffic to the cluster dropped for 30 s (its
# daemon runs with a group of its own and an nftables rule on that group
# drops what it sends: the other mounts and the cluster are untouched).
# Then, after the faults heal: every chunk a host acknowledged (cp returned
# 0) and did not rm reads byte-identical through that host (held locally or
# fetched from the pool); every chunk object in the pool reads
# byte-identical through a fresh mount; no read or blend served wrong bytes
# during the run; the pool's chunk bytes (tests/ceph/pool_usage.c, sampled
# every 20 ms all through) never exceeded remote_capacity + the largest
# object; no daemon's RSS grew without bound (max over the last third of
# the run <= 1.5 x max over the first third + 16 MiB); fsck of every store.
# Local capacity is unlimited on purpose: a chunk leaves a host only by rm,
# so "acknowledged and not removed" must mean "readable there".
# Usage: FLEET_SECONDS=600 HOSTS=8 tests/soak/fleet_soak.sh
. "$(dirname "$0")/../lib.sh"
SECS=${FLEET_SECONDS:-600}
HOSTS=${HOSTS:-8}
[ "$HOSTS" -ge 5 ] || { echo "FAIL: HOSTS must be >= 5 (hosts 3 and 5 take the faults)"; exit 1; }
[ "$SECS" -ge 90 ] || { echo "FAIL: FLEET_SECONDS must be >= 90 (the network cut alone is 30 s)"; exit 1; }
ldd "$KVFS" | grep -q librados || skip "kvfs was built without librados: no remote tier"
[ -f /usr/include/rados/librados.h ] || skip "librados headers missing (the pool sampler needs them)"
command -v nft >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nftables \
    >"$T/nft-apt.log" 2>&1 || skip "nftables (nft) missing and cannot be installed: no way to cut the network"
command -v setpriv >/dev/null || skip "setpriv (util-linux) missing"
. "$KVFS_ROOT/tests/ceph/lib.sh"
ceph_test_cluster

# the cut host's daemon runs with group CUT_GID; the rule drops what any
# socket of that group sends, loopback included
CUT_GID=44044 NFT_TABLE=kvfs_fleet_soak_$$
nft add table inet $NFT_TABLE && nft add chain inet $NFT_TABLE out '{ type filter hook output priority 0; }' ||
    skip "cannot add an nftables table (no CAP_NET_ADMIN or no nf_tables)"
WORKERS=()
trap 'kill "${WORKERS[@]}" 2>/dev/null; nft delete table inet $NFT_TABLE 2>/dev/null
      "$KVFS_ROOT/tests/ceph/cluster.sh" stop "$CL" >/dev/null 2>&1; cleanup' EXIT
cc -O2 -o "$T/pool_usage" "$KVFS_ROOT/tests/ceph/pool_usage.c" -lrados || { echo "FAIL: cannot build the sampler"; exit 1; }
printf '#!/bin/sh\nexec setpriv --regid %d --clear-groups -- "%s" "$@"\n' $CUT_GID "$KVFS" > "$T/kvfs-cut"
chmod +x "$T/kvfs-cut"

# --- the corpus: N small synthetic chunks of 16-112 KiB ---
N=${FLEET_CHUNKS:-300}
declare -A SRC # hash -> source file
H=()           # index -> hash
maxobj=0
for k in $(seq 1 $N); do
    H[$k]=$(synth "$T/s$k.kv" --layers 4 --kv-heads 2 --head-dim 32 --tokens $((16 + (k * 37) % 97)) --seed $((44000 + k)))
    SRC[${H[$k]}]=$T/s$k.kv
    s=$(stat -c %s "$T/s$k.kv"); [ "$s" -gt "$maxobj" ] && maxobj=$s
done
corpus=$(du -cb "$T"/s*.kv | tail -n 1 | cut -f1)
CAP=$((corpus / 5)) # a fifth of the corpus: the popular chunks stay, the tail is evicted
echo "corpus: $N chunks, $corpus bytes, largest $maxobj; remote_capacity $CAP"

MODEL=$T/tiny.gguf
"$KVFSCTL" mkmodel -o "$MODEL" --layers 4 --embd 128 --heads 4 --kv-heads 4 --ff 256 --seed 44 > /dev/null || exit 1
OPTS="$R,rados_namespace=fleet,zstd=0,remote_list=5,remote_capacity=$CAP,model=$MODEL"
CUT_HOST=5 KILL_HOST=3
M() { echo "$T/h$1.mnt"; }
mount_host() { # mount_host I: mounts host I, its daemon's pid in $T/pid.I
    # allow_other: FUSE lets only callers of the daemon's own uid and gid in
    if [ "$1" = $CUT_HOST ]; then KVFS=$T/kvfs-cut mount_kvfs "h$1" "$OPTS,allow_other"; else mount_kvfs "h$1" "$OPTS"; fi || return 1
    echo "$MNT_PID" > "$T/pid.$1"
}
for i in $(seq 1 $HOSTS); do mount_host $i || exit 1; done
check "$HOSTS hosts connected" test "$(for i in $(seq 1 $HOSTS); do remote "$(M $i)" 'r["state"]'; done | sort -u)" = connected

# --- blends: three base documents prefilled on host 1 and pinned in the pool
# (so eviction leaves them to every host); four recipes, each one's
# reference blended in-process from the same chunk files ---
for k in 1 2 3; do
    printf 'Document %d. %s' $k "$(tail -c +$((k * 300)) /usr/share/common-licenses/GPL-3 2>/dev/null | head -c 90)" \
        > "$T/d$k.txt"
    [ "$(wc -c < "$T/d$k.txt")" -gt 20 ] || head -c 90 /dev/urandom | base64 >> "$T/d$k.txt"
    B[$k]=$("$KVFSCTL" prefill -m "$MODEL" -M "$(M 1)" "$T/d$k.txt" 2>/dev/null | cut -d' ' -f1)
    cp "$(M 1)/chunks/${B[$k]}.kv" "$T/base$k.kv"
done
drained "$(M 1)" 60 || exit 1
check "the three base chunks pinned in the pool" "$KVFSCTL" remote pin "$(M 1)" "${B[@]}"
recipe_chunks=("1 2" "2 3 1" "3 1" "1 2 3")
for r in 0 1 2 3; do
    files=()
    for k in ${recipe_chunks[$r]}; do files+=("$T/base$k.kv"); done
    "$KVFSCTL" blend --local -m "$MODEL" -o "$T/ref$r.kv" --suffix $'\n'"Question $r: which document?"$'\n'"Answer:" \
        "${files[@]}" > /dev/null 2>&1 || { echo "FAIL: reference blend $r"; exit 1; }
done

# --- the workload: a Zipf(1.1) draw over the corpus, the same law for every
# host but each host its own sequence; an op's kind drawn independently ---
python3 - "$N" "$HOSTS" "$T" "$SECS" <<'EOF'
import random, sys
n, hosts, t, secs = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
weights = [1.0 / (k ** 1.1) for k in range(1, n + 1)]
kinds = ["read"] * 50 + ["copy"] * 25 + ["blend"] * 10 + ["rm"] * 10 + ["evict"] * 5
for h in range(1, hosts + 1):
    rng = random.Random(4400 + h)
    with open(f"{t}/ops.{h}", "w") as f:
        # 100 a second per host: ten times what a host does here, so no worker runs out
        for k in rng.choices(range(1, n + 1), weights, k=max(20000, 100 * secs)):
            f.write(f"{rng.choice(kinds)} {k} {rng.randrange(4)}\n")
EOF
END=$(( $(date +%s) + SECS ))

worker() { # worker I: ops on host I until END; events (ack/rm) to $T/ev.I, counts to $T/count.I
    local i=$1 mp op k r out rc h
    local -A n
    exec 3> "$T/ev.$i"
    while read -r op k r; do
        [ "$(date +%s)" -lt "$END" ] || break
        mp=$(M "$i") h=${H[$k]}
        case $op in
        copy)
            out=$(timeout 60 cp "$T/s$k.kv" "$mp/incoming/" 2>&1); rc=$?
            [ $rc = 0 ] && echo "ack $k" >&3 ;;
        read)
            out=$(timeout 60 cmp "$mp/chunks/$h.kv" "$T/s$k.kv" 2>&1); rc=$?
            [ $rc = 1 ] && echo "corrupt read of $h on host $i: $out" >> "$T/corrupt" ;;
        blend) # a recipe that cannot be written (the mount is down) is no wrong blend: rc 2
            out=$( { for b in ${recipe_chunks[$r]}; do echo "${B[$b]}"; done
                     printf 'suffix=\\nQuestion %d: which document?\\nAnswer:\n' "$r"; } 2>&1 > "$mp/blends/w$i.recipe" ||
                   { echo "recipe not written"; exit 2; }
                   timeout 60 cmp "$mp/blends/w$i.kv" "$T/ref$r.kv" 2>&1 ); rc=$?
            [ $rc = 1 ] && echo "corrupt blend $r on host $i: $out" >> "$T/corrupt"
            rm -f "$mp/blends/w$i.recipe" 2>/dev/null ;;
        rm)
            echo "rm $k" >&3 # before: a cut rm may or may not have happened
            out=$(timeout 60 rm "$mp/chunks/$h.kv" 2>&1); rc=$? ;;
        evict)
            out=$(timeout 60 "$KVFSCTL" remote evict "$mp" "$h" 2>&1); rc=$? ;;
        esac
        if [ $rc = 0 ]; then n[$op ok]=$(( ${n[$op ok]:-0} + 1 ))
        elif [ $rc = 124 ]; then n[$op TIMEOUT]=$(( ${n[$op TIMEOUT]:-0} + 1 )); echo "host $i: $op of $k hung 60 s" >> "$T/hung"
        else # the kind of error: strerror's words, hashes and paths left out
            out=$(echo "$out" | head -n 1 | sed -E 's/.*: //; s/[0-9a-f]{64}//g; s/ +/_/g')
            [ $rc = 1 ] && [ "$op" = read -o "$op" = blend ] && out=WRONG_BYTES
            n[$op ${out:-rc$rc}]=$(( ${n[$op ${out:-rc$rc}]:-0} + 1 ))
        fi
    done < "$T/ops.$i"
    for key in "${!n[@]}"; do echo "$key ${n[$key]}"; done > "$T/count.$i"
}
rss_sampler() { # every 2 s, every host's VmRSS and RssAnon (kB) to $T/rss.I as "SECONDS RSS ANON"
    local i p r
    while [ "$(date +%s)" -lt "$END" ]; do
        for i in $(seq 1 $HOSTS); do
            p=$(cat "$T/pid.$i" 2>/dev/null)
            # RssAnon apart: the RAM tier's tmpfs images count in VmRSS (as
            # RssShmem) and fill up to ram= by design; a leak shows in RssAnon
            r=$(awk '/^VmRSS:/ {v = $2} /^RssAnon:/ {a = $2} END {if (v) print v, a}' "/proc/$p/status" 2>/dev/null)
            [ -n "$r" ] && echo "$(( $(date +%s) - END + SECS )) $r" >> "$T/rss.$i"
        done
        sleep 2
    done
}
"$T/pool_usage" "$CEPH_CONF" kvfs fleet "$T/stop" > "$T/sampled" & SAMPLER=$!
for i in $(seq 1 $HOSTS); do worker $i & WORKERS+=($!); done
rss_sampler & WORKERS+=($!)
t0=$(date +%s)
at() { # at FRACTION: sleep until that fraction of the run
    local t=$(( t0 + SECS * $1 / 100 ))
    [ "$(date +%s)" -lt $t ] && sleep $(( t - $(date +%s) ))
}
say() { echo "[$(( $(date +%s) - t0 )) s] $*"; }

# --- the faults, one after another ---
at 15; say "kill osd.1"; "$KVFS_ROOT/tests/ceph/cluster.sh" kill-osd "$CL" 1
at 30; say "revive osd.1"; "$KVFS_ROOT/tests/ceph/cluster.sh" start-osd "$CL" 1
at 45; say "SIGKILL host $KILL_HOST's daemon"
kill -9 "$(cat "$T/pid.$KILL_HOST")"; fusermount3 -uz "$(M $KILL_HOST)"; wait "$(cat "$T/pid.$KILL_HOST")" 2>/dev/null
sleep 2
mount_host $KILL_HOST && say "host $KILL_HOST remounted" || fail "remount of host $KILL_HOST after SIGKILL"
at 60; say "cut host $CUT_HOST from the cluster for 30 s"
nft add rule inet $NFT_TABLE out meta skgid $CUT_GID drop
went_down=no cut_end=$(( $(date +%s) + 30 ))
while [ "$(date +%s)" -lt $cut_end ]; do # by the clock: a loaded machine makes each look slow
    [ "$(remote "$(M $CUT_HOST)" 'r["state"]')" = down ] && went_down=yes
    sleep 1
done
nft flush chain inet $NFT_TABLE out
say "host $CUT_HOST's network back"
check "the cut was real: host $CUT_HOST's tier went down during it" test $went_down = yes
wait "${WORKERS[@]}"
say "workload over"
touch "$T/stop"; wait $SAMPLER

# --- after the faults heal ---
for _ in $(seq 60); do timeout 20 ceph osd stat 2>/dev/null | grep -q "3 up" && break; sleep 2; done
check "the cluster has its 3 OSDs up again ($(timeout 20 ceph osd stat 2>&1))" \
    sh -c "timeout 20 ceph osd stat | grep -q '3 up'"
undrained=0
for i in $(seq 1 $HOSTS); do drained "$(M $i)" 120 || { undrained=$((undrained + 1)); echo "  host $i did not drain"; }; done
check "every host's upload queue drained and tier connected" test $undrained = 0
lost=0 wrong=0 kept=0
for i in $(seq 1 $HOSTS); do
    # the chunks whose last event on this host is an ack
    for k in $(awk '{last[$2] = $1} END {for (k in last) if (last[k] == "ack") print k}' "$T/ev.$i"); do
        kept=$((kept + 1))
        cmp -s "$(M $i)/chunks/${H[$k]}.kv" "$T/s$k.kv"
        case $? in 0) ;; 1) wrong=$((wrong + 1)); echo "  host $i serves wrong bytes for ${H[$k]}";;
                   *) lost=$((lost + 1)); echo "  host $i lost acknowledged ${H[$k]}";; esac
    done
done
check "nothing acknowledged lost: $kept (host, chunk) pairs acked and not removed, $lost lost, $wrong wrong" \
    test "$lost $wrong" = "0 0"
mount_kvfs fresh "$R,rados_namespace=fleet,zstd=0,remote_list=-1" || exit 1
inpool=0 badpool=0
for h in $(timeout 60 rados -p kvfs -N fleet ls | grep -E '^[0-9a-f]{64}$'); do
    inpool=$((inpool + 1))
    src=${SRC[$h]:-}
    for b in 1 2 3; do [ "$h" = "${B[$b]}" ] && src=$T/base$b.kv; done
    cmp -s "$T/fresh.mnt/chunks/$h.kv" "${src:-/dev/null}" || { badpool=$((badpool + 1)); echo "  pool object $h reads wrong"; }
done
check "every chunk object in the pool ($inpool) reads byte-identical through a fresh host" test $badpool = 0
corrupt=$(cat "$T/corrupt" 2>/dev/null | wc -l)
[ "$corrupt" = 0 ] || head -n 5 "$T/corrupt"
check "no read or blend served wrong bytes during the run ($corrupt)" test "$corrupt" = 0
hung=$(cat "$T/hung" 2>/dev/null | wc -l)
[ "$hung" = 0 ] || head -n 5 "$T/hung"
check "no operation hung for 60 s ($hung)" test "$hung" = 0
read -r samples pmax pmaxobjs < "$T/sampled"
final=$("$T/pool_usage" "$CEPH_CONF" kvfs fleet | cut -d' ' -f1)
check "pool chunk bytes: peak $pmax over $samples samples (up to $pmaxobjs objects), now $final; capacity $CAP + largest object $maxobj" \
    test "$pmax" -le $((CAP + maxobj)) -a "$final" -le $((CAP + maxobj))

echo "RSS per host (kB): max over the run; max in the first -> the last third (VmRSS; RssAnon)"
rss_bad=0
for i in $(seq 1 $HOSTS); do
    read -r all first last afirst alast < <(awk -v s=$SECS '{if ($2 > all) all = $2
        if ($1 < s / 3) {if ($2 > f) f = $2; if ($3 > af) af = $3}
        if ($1 >= 2 * s / 3) {if ($2 > l) l = $2; if ($3 > al) al = $3}}
        END {print all + 0, f + 0, l + 0, af + 0, al + 0}' "$T/rss.$i")
    verdict=ok
    [ "$last" -gt $(( first * 3 / 2 + 16384 )) ] && { verdict=GROWS; rss_bad=$((rss_bad + 1)); }
    echo "  host $i: $all; $first -> $last; $afirst -> $alast $verdict"
done
check "every host's RSS bounded (last third <= 1.5 x first third + 16 MiB)" test $rss_bad = 0

fleet() { local s=0 i; for i in $(seq 1 $HOSTS); do s=$((s + $(remote "$(M $i)" "r[\"$1\"]"))); done; echo $s; }
echo "remote tier, summed over the hosts (host $KILL_HOST's since its restart): pushed $(fleet pushed)," \
    "fetched $(fleet fetched), rejected $(fleet rejected), errors $(fleet errors), evicted $(fleet evicted)" \
    "($(fleet evicted_bytes) bytes in $(fleet evictions_run) passes)"
echo "operations (all hosts): kind result count"
cat "$T"/count.* | awk '{c[$1 " " $2] += $3} END {for (k in c) print "  " k, c[k]}' | sort
total=$(cat "$T"/count.* | awk '{s += $3} END {print s}')
echo "fleet soak: $HOSTS hosts, $SECS s, $total operations ($(awk -v n="$total" -v s=$SECS 'BEGIN{printf "%.1f", n/s}')/s)"
for mp in "${MOUNTS[@]}"; do fusermount3 -u "$mp" 2>/dev/null; done
for pid in "${PIDS[@]}"; do for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done; done
MOUNTS=()
fsck_bad=0
for i in $(seq 1 $HOSTS); do "$KVFSCTL" fsck "$T/h$i.store" > "$T/fsck.$i" 2>&1 || { fsck_bad=$((fsck_bad + 1)); cat "$T/fsck.$i"; }; done
check "fsck of every host's store" test $fsck_bad = 0
grep -h -iE "abort|assert|segfault" "$T"/h*.log | head -n 5
finish
