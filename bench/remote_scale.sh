#!/bin/bash
# The remote tier at scale (issue 44, "Scale, measured"): a pool of small
# synthetic chunks made by bench/remote_populate (kvfs's own object and index
# formats), then, for each size in SIZES, a fresh host (a new mount with an
# empty store) against it: how long its listing takes (the worker's paged
# copy of the model's omap index into remote-list.db, then the first `ls`
# of chunks/ complete), the daemon's peak RSS (VmHWM) when listed and after
# the ls, and what a lookup of a name the pool does not have costs (RADOS
# ops counted by the client's own objecter, through an admin socket of the
# mount's, and the stat's latency).  Prints a markdown section.
#
#   SIZES="100000 1000000" bench/remote_scale.sh    (default; grows one pool)
# Needs root and Ceph (tests/ceph/cluster.sh: bluestore, 3 OSDs, pool size 1,
# monitor port MONPORT, else a free one), ~2 GiB of disk per 1M chunks.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
SIZES=${SIZES:-100000 1000000}
POP=$BUILD/remote_populate
[ -x "$BUILD/kvfs" ] || { echo "remote_scale: build first (make)" >&2; exit 1; }
[ -x "$POP" ] || { echo "remote_scale bench: kvfs was built without librados; skipped" >&2; exit 0; }
T=$(mktemp -d /tmp/kvfs-rscale.XXXXXX)
CL=$T/ceph
pid=
. tests/ceph/lib.sh
trap ceph_bench_teardown EXIT
# bluestore (memstore keeps about 10 KiB of memory per small object: 1M would
# not fit); one copy of each object: the listing host reads the same either way
ceph_bench_cluster remote_scale
CONF=$CEPH_CONF
now() { echo "$EPOCHREALTIME"; }
since() { awk -v a="$1" -v b="$EPOCHREALTIME" -v p="${2:-1}" 'BEGIN { printf "%.*f", p, b - a }'; } # T0 [DECIMALS]
kib() { awk -v k="$2" '$1 == k ":" {print $2}' "/proc/$1/status"; }
stats() { python3 -c "import json,sys; r=json.load(open(sys.argv[1]+'/.kvfs/stats'))['remote']; print($2)" "$1"; }
objecter_ops() { ceph --admin-daemon "$1" perf dump objecter | python3 -c "import json,sys; print(json.load(sys.stdin)['objecter']['op_send'])"; }

rows=()
have=0
for n in $SIZES; do
    t0=$(now)
    "$POP" "$CONF" kvfs - $((n - have)) "$have" >&2
    t_pop=$(since "$t0")
    have=$n
    H=$T/host$n
    mkdir -p "$H/mnt" "$H/store"
    # the mount's own admin socket: its objecter counts every RADOS op it sends
    sed "s|^admin socket =\$|admin socket = $H/client.asok|" "$CONF" > "$H/ceph.conf"
    t0=$(now)
    "$BUILD/kvfs" -f -o "store=$H/store,rados=kvfs,ceph_conf=$H/ceph.conf,remote_list=3600" "$H/mnt" 2> "$H/kvfs.log" &
    pid=$!
    until [ -e "$H/mnt/.kvfs/stats" ]; do kill -0 $pid || { cat "$H/kvfs.log" >&2; exit 1; }; sleep 0.1; done
    until [ "$(stats "$H/mnt" 'r["listed"]')" -ge "$n" ]; do
        kill -0 $pid || { cat "$H/kvfs.log" >&2; exit 1; }
        [ "$(since "$t0" | cut -d. -f1)" -lt 3600 ] || { echo "remote_scale: not listed in an hour" >&2; exit 1; }
        sleep 0.2
    done
    t_listed=$(since "$t0")
    hwm_listed=$(kib $pid VmHWM)
    t0=$(now)
    n_ls=$(ls "$H/mnt/chunks" | wc -l)
    t_ls=$(since "$t0")
    [ "$n_ls" -eq "$n" ] || { echo "remote_scale: ls listed $n_ls of $n" >&2; exit 1; }
    hwm_ls=$(kib $pid VmHWM)
    # a sample read byte for byte, then lookups of names the pool lacks
    h=$("$POP" --chunk $((n / 2)) "$H/sample.kv")
    cmp -s "$H/sample.kv" "$H/mnt/chunks/$h.kv" || { echo "remote_scale: chunk $((n / 2)) differs" >&2; exit 1; }
    a=$(objecter_ops "$H/client.asok")
    lat=$(python3 - "$H/mnt/chunks" <<'EOF'
import os, sys, time
ts = []
for k in range(1000):
    p = "%s/%064x.kv" % (sys.argv[1], 0xfeed0000 + k)
    t = time.perf_counter()
    try:
        os.stat(p)
        sys.exit("unexpectedly present: " + p)
    except FileNotFoundError:
        ts.append(time.perf_counter() - t)
ts.sort()
print("%.2f %.2f" % (ts[500] * 1e3, ts[990] * 1e3))
EOF
)
    b=$(objecter_ops "$H/client.asok")
    rss_end=$(kib $pid VmRSS)
    # the eviction view (every index read afresh into a temporary SQLite file):
    # the operator's list of every chunk, and a pass that finds nothing to evict
    /usr/bin/time -f "%e %M" -o "$H/list.time" "$BUILD/kvfsctl" remote list "$H/mnt" > "$H/list.out"
    [ "$(grep -c '^[0-9a-f]\{64\}' "$H/list.out")" -eq "$n" ] || { echo "remote_scale: remote list is short" >&2; exit 1; }
    /usr/bin/time -f "%e %M" -o "$H/evict.time" "$BUILD/kvfsctl" remote evict --to 1T "$H/mnt" > /dev/null
    # one chunk evicted by name (its model from the object, one index write);
    # OLD_KVFSCTL: another build's kvfsctl evicts the next chunk, side by side
    evict_named() { # KVFSCTL CHUNK-NUMBER -> seconds
        local hh; hh=$("$POP" --chunk "$2" "$H/named.kv"); rm -f "$H/named.kv"
        local t0; t0=$(now)
        "$1" remote evict "$H/mnt" "$hh" > /dev/null || { echo "remote_scale: evict $hh failed" >&2; exit 1; }
        since "$t0" 3
    }
    t_named=$(evict_named "$BUILD/kvfsctl" $((n / 2 + 1)))
    [ -n "${OLD_KVFSCTL:-}" ] && t_named="$t_named (other build: $(evict_named "$OLD_KVFSCTL" $((n / 2 + 2))))"
    view() { awk '{printf "%.1f s, %d MiB", $1, $2 / 1024}' "$1"; }
    db_mb=$(du -cm "$H"/store/remote-list.db* | tail -1 | cut -f1)
    rows+=("| $n | $t_pop | $t_listed | $t_ls | $((hwm_listed / 1024)) | $((hwm_ls / 1024)) | $((rss_end / 1024)) | $db_mb | $(awk -v o=$((b - a)) 'BEGIN {printf "%.2f", o / 1000}') | ${lat% *} / ${lat#* } | $(view "$H/list.time") | $(view "$H/evict.time") | $t_named |")
    echo "remote_scale: ${rows[-1]}" >&2
    fusermount3 -u "$H/mnt"
    wait $pid || true
    rm -rf "$H/store"
done

echo "### A fresh host lists a large pool (\`bench/remote_scale.sh\`)"
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores ($(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)), commit"
echo "$(git rev-parse --short HEAD). Test cluster: 1 mon, 3 bluestore OSDs on loopback, pool size 1. Chunks: 1-layer"
echo "synthetic ones by \`bench/remote_populate\` (kvfs's own object and index formats; one model index)."
echo "Listed: mount to the whole listing in remote-list.db (omap pages of 1000); ls: the first \`ls chunks/\`"
echo "complete (readdir streams the table, $((256)) rows a query); RSS in MiB; ops per unknown stat: RADOS ops the"
echo "mount's objecter sent per \`stat\` of a name the pool lacks (1,000 of them); latency p50 / p99; the eviction"
echo "view (every index read into a temporary SQLite file): \`kvfsctl remote list\` of every chunk and \`kvfsctl remote"
echo "evict --to 1T\` (a pass with nothing to evict), time and peak RSS; evict by name: \`kvfsctl remote evict MNT HASH\`, s."
echo
echo "| chunks | populate s (chunks added) | listed s | ls s | peak RSS listed | peak RSS after ls | RSS after | listing db MiB | ops per unknown stat | unknown stat ms | remote list | eviction pass | evict by name |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
