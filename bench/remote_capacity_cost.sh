#!/bin/bash
# What remote_capacity costs an upload in a large pool (issue 44): a pool of
# N small synthetic chunks (bench/remote_populate), then two hosts with
# remote_capacity (far above the pool, so nothing is evicted): BEFORE, a kvfs
# that reads every index before each upload batch (OLD_KVFS, default
# /work/main/build/kvfs), and AFTER, this build, which reads the namespace's
# usage counters (one key per model index).  Each round uploads one new chunk
# through each host, in alternating order, and times cp to the upload queue
# done (.kvfs/stats remote.pushed moved on, polled every 5 ms).  Prints a
# markdown section: medians, the CPU model, the load.
#
#   N=100000 ROUNDS=9 bench/remote_capacity_cost.sh
# Needs root and Ceph (tests/ceph/cluster.sh, 3 bluestore OSDs, pool size 1,
# MONPORT, else a free one).
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
N=${N:-100000}
ROUNDS=${ROUNDS:-9}
OLD_KVFS=${OLD_KVFS:-/work/main/build/kvfs}
POP=$BUILD/remote_populate
[ -x "$POP" ] || { echo "remote_capacity_cost bench: kvfs was built without librados; skipped" >&2; exit 0; }
[ -x "$OLD_KVFS" ] || { echo "remote_capacity_cost: OLD_KVFS=$OLD_KVFS is not a kvfs binary" >&2; exit 1; }
T=$(mktemp -d /tmp/kvfs-rcost.XXXXXX)
CL=$T/ceph
. tests/ceph/lib.sh
trap ceph_bench_teardown EXIT
ceph_bench_cluster remote_capacity_cost
t0=$EPOCHREALTIME
"$POP" "$CEPH_CONF" kvfs - "$N" >&2
echo "remote_capacity_cost: populated $N chunks in $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.0f", b - a}') s" >&2
stats() { python3 -c "import json,sys; r=json.load(open(sys.argv[1]+'/.kvfs/stats'))['remote']; print($2)" "$1"; }
mount_host() { # NAME BINARY
    mkdir -p "$T/$1/mnt" "$T/$1/store"
    "$2" -f -o "store=$T/$1/store,rados=kvfs,ceph_conf=$CEPH_CONF,remote_list=-1,remote_capacity=1T,zstd=0" \
        "$T/$1/mnt" 2> "$T/$1/kvfs.log" &
    until [ -e "$T/$1/mnt/.kvfs/stats" ] && [ "$(stats "$T/$1/mnt" 'r["state"]')" = connected ]; do sleep 0.1; done
}
mount_host before "$OLD_KVFS"
mount_host after "$BUILD/kvfs"
upload() { # HOST SEED: one new chunk, seconds from cp to its upload done (remote.pushed moved on)
    local h
    h=$("$BUILD/kvfsctl" synth -o "$T/c.kv" --tokens 64 --layers 4 --seed "$2")
    python3 - "$T/$1/mnt" "$T/c.kv" "$h" <<'PY'
import json, shutil, sys, time
mnt, src, h = sys.argv[1:]
pushed = lambda: json.load(open(mnt + "/.kvfs/stats"))["remote"]["pushed"]
p0 = pushed()
t = time.perf_counter()
shutil.copyfile(src, "%s/chunks/%s.kv" % (mnt, h))
while pushed() <= p0:
    time.sleep(0.005)
print("%.3f" % (time.perf_counter() - t))
PY
}
# first batches (the new host's sets the counters); each upload a chunk nobody has
upload before 1000 > /dev/null; upload after 1001 > /dev/null
b=(); a=()
for r in $(seq "$ROUNDS"); do
    if [ $((r % 2)) = 1 ]; then b+=("$(upload before $((2000 + r)))"); a+=("$(upload after $((3000 + r)))")
    else a+=("$(upload after $((3000 + r)))"); b+=("$(upload before $((2000 + r)))"); fi
    echo "remote_capacity_cost: round $r: before ${b[-1]} s, after ${a[-1]} s" >&2
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
mb=$(median "${b[@]}"); ma=$(median "${a[@]}")
echo "### An upload with remote_capacity in a pool of $N chunks (\`bench/remote_capacity_cost.sh\`)"
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores ($(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)), load"
echo "$(cut -d' ' -f1-3 /proc/loadavg), commit $(git rev-parse --short HEAD). Test cluster: 1 mon, 3 bluestore OSDs on loopback,"
echo "pool size 1; one model index. cp of a new chunk to its upload done (remote.pushed), median of $ROUNDS, hosts alternating."
echo
echo "| chunks in the pool | before: every index read | after: usage counters | ratio | index reads after (full passes) |"
echo "|---|---|---|---|---|"
echo "| $N | $mb s | $ma s | $(awk -v b="$mb" -v a="$ma" 'BEGIN {printf "%.1fx", b / a}') | $(stats "$T/after/mnt" 'r["index_reads"]') |"
