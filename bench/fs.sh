#!/bin/bash
# Filesystem benchmark: 64 MiB chunk read through the mount vs read() from the
# page cache (first read and warm re-read), cp ingest throughput, ls -l of
# 100,000 chunks.  Prints a markdown section.  Medians of RUNS runs.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}; case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD;; esac
RUNS=${RUNS:-5}
N_LIST=${N_LIST:-100000}
T=$(mktemp -d /tmp/kvfs-bench.XXXXXX)
PID=""
cleanup() { fusermount3 -u "$T/mnt" 2>/dev/null || true; [ -n "$PID" ] && wait "$PID" 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
mkdir -p "$T/mnt" "$T/store" "$T/list.store"
mount_it() { # mount_it STORE
    "$BUILD/kvfs" -f -o "store=$1" "$T/mnt" 2>>"$T/log" & PID=$!
    for _ in $(seq 200); do [ -e "$T/mnt/.kvfs/stats" ] && return 0; sleep 0.05; done
    echo "mount failed"; cat "$T/log"; exit 1
}
umount_it() { fusermount3 -u "$T/mnt"; wait "$PID" 2>/dev/null || true; PID=""; }
read_secs() { # read_secs FILE: seconds to read it with 1 MiB read() calls
    python3 - "$1" <<'PY'
import os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY); buf = bytearray(1 << 20); t = time.perf_counter()
while os.readv(fd, [buf]) > 0: pass
print(time.perf_counter() - t); os.close(fd)
PY
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

H=$("$BUILD/kvfsctl" synth --size-mib 64 --layers 30 --kv-heads 3 --seed 1 -o "$T/chunk.kv")
SIZE=$(stat -c %s "$T/chunk.kv")
MB=$(awk -v s="$SIZE" 'BEGIN{print s/1048576}')
mount_it "$T/store"
cp "$T/chunk.kv" "$T/mnt/incoming/"
umount_it
cat "$T/chunk.kv" > /dev/null   # reference file in the page cache
first=(); warm=(); steady=(); ref=(); ingest=()
for i in $(seq "$RUNS"); do
    mount_it "$T/store"                    # cold FUSE cache and RAM tier
    find "$T/store/objects" -type f -exec cat {} + > /dev/null  # backing object cached, like the reference
    ref+=("$(read_secs "$T/chunk.kv")")
    first+=("$(read_secs "$T/mnt/chunks/$H.kv")")
    warm+=("$(read_secs "$T/mnt/chunks/$H.kv")")
    # later re-reads: the kernel moves the FUSE pages to its active list on
    # the first re-read (a per-page cost), after which reads are steady
    s3=(); for _ in 1 2 3; do s3+=("$(read_secs "$T/mnt/chunks/$H.kv")"); done
    steady+=("$(printf '%s\n' "${s3[@]}" | median)")
    rm -f "$T/mnt/chunks/$H.kv"
    t0=$(date +%s.%N); cp "$T/chunk.kv" "$T/mnt/incoming/"; t1=$(date +%s.%N)
    ingest+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')")
    umount_it
done
r=$(printf '%s\n' "${ref[@]}" | median); f=$(printf '%s\n' "${first[@]}" | median)
w=$(printf '%s\n' "${warm[@]}" | median); st=$(printf '%s\n' "${steady[@]}" | median); g=$(printf '%s\n' "${ingest[@]}" | median)

cc -O2 -I"$ROOT/index" "$ROOT/bench/populate.c" "$BUILD/libkvfs_core.a" $(pkg-config --libs sqlite3 libzstd libxxhash libcrypto) -lpthread -o "$T/populate"
[ -x "$T/populate" ] && "$T/populate" "$T/list.store" "$N_LIST"
mount_it "$T/list.store"
lst=()
for i in $(seq 3); do
    t0=$(date +%s.%N); n=$(ls -l "$T/mnt/chunks" | wc -l); t1=$(date +%s.%N)
    lst+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')")
done
umount_it
l=$(printf '%s\n' "${lst[@]}" | median)

cat <<MD
### Filesystem (\`bench/fs.sh\`, run by \`make bench\`)

$(date -u +%Y-%m-%d), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), kernel $(uname -r), medians of $RUNS runs.
Reads use 1 MiB \`read()\` calls; the reference is the same bytes from a file in the page cache.

| measurement | result | ratio vs page-cache read | goal |
|---|---|---|---|
| read() of the ${MB%.*} MiB file from the page cache | $(awk -v s="$SIZE" -v t="$r" 'BEGIN{printf "%.2f GB/s", s/t/1e9}') | 1.00 | |
| first read through kvfs (cold RAM tier and FUSE cache) | $(awk -v s="$SIZE" -v t="$f" 'BEGIN{printf "%.2f GB/s", s/t/1e9}') | $(awk -v a="$r" -v b="$f" 'BEGIN{printf "%.2f", a/b}') | >= 0.5 |
| first re-read through kvfs (keep_cache: the kernel's page cache, no request reaches kvfs) | $(awk -v s="$SIZE" -v t="$w" 'BEGIN{printf "%.2f GB/s", s/t/1e9}') | $(awk -v a="$r" -v b="$w" 'BEGIN{printf "%.2f", a/b}') | >= 0.8 |
| later re-reads through kvfs (median of re-reads 2-4) | $(awk -v s="$SIZE" -v t="$st" 'BEGIN{printf "%.2f GB/s", s/t/1e9}') | $(awk -v a="$r" -v b="$st" 'BEGIN{printf "%.2f", a/b}') | >= 0.8 |
| \`cp\` ingest into incoming/ (verify, zstd 1, fsync) | $(awk -v s="$SIZE" -v t="$g" 'BEGIN{printf "%.0f MB/s", s/t/1e6}') | | |
| \`ls -l chunks/\` with $N_LIST entries ($((n - 1)) listed) | $(awk -v t="$l" 'BEGIN{printf "%.2f s", t}') | | < 2 s |
MD
