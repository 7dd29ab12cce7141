#!/bin/bash
# A listing refresh after CHANGES changes in a model index of N chunks (issue
# 44, "incremental listing refresh"): a pool of N small synthetic chunks
# (bench/remote_populate, one model index), a reader host refreshing its
# listing every 2 s, and two writer hosts: one that logs its changes (the
# default, remote_changes=1024) and one that logs none (remote_changes=-1,
# as a kvfs before the log), so the reader reads the index whole.  Each
# round stops the reader (SIGSTOP), uploads CHANGES new chunks through one
# writer (cp into its chunks/, until its queue is empty: one index write
# each), lets the reader go and takes the duration of its next refresh
# (remote.listing_took_s), checking which way it read (listing_models_read
# or listing_models_logged) and that it lists every chunk uploaded.  Rounds
# alternate; medians.  (Uploads, not evictions: `kvfsctl remote evict HASH...`
# reads every index once per hash, 10 s each at a million.)
#
#   N=100000 CHANGES=100 ROUNDS=5 bench/remote_listing_refresh.sh
# Needs root and Ceph (tests/ceph/cluster.sh), monitor port MONPORT (else a free one).
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
N=${N:-100000}
CHANGES=${CHANGES:-100}
ROUNDS=${ROUNDS:-5}
POP=$BUILD/remote_populate
[ -x "$POP" ] || { echo "remote_listing_refresh bench: kvfs was built without librados; skipped" >&2; exit 0; }
T=$(mktemp -d /tmp/kvfs-rlist.XXXXXX)
CL=$T/ceph
. tests/ceph/lib.sh
cleanup() {
    [ -n "${BPID:-}" ] && kill -CONT "$BPID" 2>/dev/null # a reader stopped for the writer's round
    ceph_bench_teardown
}
trap cleanup EXIT
ceph_bench_cluster remote_listing_refresh
stats() { python3 -c "import json,sys; r=json.load(open(sys.argv[1]+'/.kvfs/stats'))['remote']; print($2)" "$1"; }
mount_host() { # NAME OPTIONS: the daemon's pid in MPID
    mkdir -p "$T/$1/mnt" "$T/$1/store"
    "$BUILD/kvfs" -f -o "store=$T/$1/store,rados=kvfs,ceph_conf=$CEPH_CONF,$2" "$T/$1/mnt" 2> "$T/$1/kvfs.log" &
    MPID=$!
    until [ -e "$T/$1/mnt/.kvfs/stats" ]; do kill -0 $MPID || { cat "$T/$1/kvfs.log" >&2; exit 1; }; sleep 0.1; done
}

"$POP" "$CEPH_CONF" kvfs - "$N" 0 >&2
mount_host log "remote_list=-1"
mount_host nolog "remote_list=-1,remote_changes=-1"
mount_host reader "remote_list=2"
BPID=$MPID
R=$T/reader/mnt
until [ "$(stats "$R" 'r["listed"]')" -ge "$N" ]; do sleep 0.5; done
first=$(stats "$R" 'r["listing_took_s"]')
echo "reader listed $N chunks (a whole read, $first s)" >&2

next=$N listed=$N
declare -A took
for round in $(seq "$ROUNDS"); do
    for mode in nolog log; do
        read -r full0 logged0 <<< "$(stats "$R" 'r["listing_models_read"], r["listing_models_logged"]')"
        kill -STOP "$BPID"
        for i in $(seq "$next" $((next + CHANGES - 1))); do
            h=$("$POP" --chunk "$i" "$T/chunk.kv")
            cp "$T/chunk.kv" "$T/$mode/mnt/chunks/$h.kv"
        done
        next=$((next + CHANGES)) listed=$((listed + CHANGES))
        until [ "$(stats "$T/$mode/mnt" 'r["state"], r["queued"]')" = "connected 0" ]; do sleep 0.2; done
        kill -CONT "$BPID"
        until read -r full1 logged1 n s <<< "$(stats "$R" 'r["listing_models_read"], r["listing_models_logged"], r["listed"], r["listing_took_s"]')" &&
            [ "$n" = "$listed" ]; do sleep 0.05; done
        way=logged; [ "$full1" != "$full0" ] && way=whole
        [ "$((full1 - full0 + logged1 - logged0))" = 1 ] || { echo "round $round $mode: more than one refresh read" >&2; exit 1; }
        echo "round $round, writer $mode: $CHANGES uploads, the refresh read the index $way in $s s" >&2
        took[$mode]="${took[$mode]:-} $s"
        [ $mode = log ] && [ $way = whole ] && { echo "a logged round read the index whole" >&2; exit 1; }
        [ $mode = nolog ] && [ $way = logged ] && { echo "an unlogged round read the log" >&2; exit 1; }
    done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
echo "| index of $N chunks, $CHANGES uploads since the last refresh | the refresh (median of $ROUNDS) | every round |"
echo "|---|---|---|"
echo "| before: the index read whole (writer keeps no log) | $(echo "${took[nolog]}" | median) s | ${took[nolog]} |"
echo "| after: the change log's $CHANGES keys | $(echo "${took[log]}" | median) s | ${took[log]} |"
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), commit $(git rev-parse --short HEAD); the first whole listing $first s"
