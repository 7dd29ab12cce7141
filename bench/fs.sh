#!/bin/bash
# Filesystem benchmark: 64 MiB chunk read through the mount vs read() from the
# page cache (first read and warm re-read), with FUSE passthrough on and off
# (alternating, side by side), mmap reads of a chunk and of a blend result
# (with the model, when models/ has it), cp ingest throughput, ls -l of
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
MODEL=${MODEL:-$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf}
mount_it() { # mount_it STORE [OPTIONS]
    "$BUILD/kvfs" -f -o "store=$1${2:+,$2}" "$T/mnt" 2>>"$T/log" & PID=$!
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
mmap_secs() { # mmap_secs FILE: seconds to map it and touch every byte (sum of 8-byte words)
    python3 - "$1" <<'PY'
import mmap, os, sys, time
import numpy as np
fd = os.open(sys.argv[1], os.O_RDONLY); t = time.perf_counter()
m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
n = len(m) // 8 * 8
np.frombuffer(m, np.uint64, n // 8).sum()
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
ref=(); ingest=(); mref=()
declare -A first warm steady mmapr
path_of() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['reads'][sys.argv[2]])" "$T/mnt/.kvfs/stats" "${1:-path}"; }
for i in $(seq "$RUNS"); do
    for mode in on off; do
        mount_it "$T/store" "passthrough=$mode"  # cold FUSE cache and RAM tier
        [ "$i" = 1 ] && eval "path_$mode=\$(path_of)"
        [ "$i$mode" = 1on ] && images=$(path_of images)
        find "$T/store/objects" -type f -exec cat {} + > /dev/null  # backing object cached, like the reference
        ref+=("$(read_secs "$T/chunk.kv")")
        first[$mode]+=" $(read_secs "$T/mnt/chunks/$H.kv")"
        warm[$mode]+=" $(read_secs "$T/mnt/chunks/$H.kv")"
        # later re-reads: the kernel moves the FUSE pages to its active list on
        # the first re-read (a per-page cost), after which reads are steady
        s3=(); for _ in 1 2 3; do s3+=("$(read_secs "$T/mnt/chunks/$H.kv")"); done
        steady[$mode]+=" $(printf '%s\n' "${s3[@]}" | median)"
        mref+=("$(mmap_secs "$T/chunk.kv")")
        mmapr[$mode]+=" $(mmap_secs "$T/mnt/chunks/$H.kv")"
        if [ "$mode" = off ]; then
            rm -f "$T/mnt/chunks/$H.kv"
            t0=$(date +%s.%N); cp "$T/chunk.kv" "$T/mnt/incoming/"; t1=$(date +%s.%N)
            ingest+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')")
        fi
        umount_it
    done
done
med() { tr ' ' '\n' | grep . | median; }
r=$(printf '%s\n' "${ref[@]}" | median); g=$(printf '%s\n' "${ingest[@]}" | median)
mr=$(printf '%s\n' "${mref[@]}" | median)
for mode in on off; do
    eval "f_$mode=\$(echo \"\${first[$mode]}\" | med); w_$mode=\$(echo \"\${warm[$mode]}\" | med)"
    eval "st_$mode=\$(echo \"\${steady[$mode]}\" | med); mm_$mode=\$(echo \"\${mmapr[$mode]}\" | med)"
done

# a blend result (SmolLM2, two ~1000-token chunks and a question), mmap-read
# through the mount against the same bytes from a page-cached file
blend_rows=""
if [ -s "$MODEL" ]; then
    mkdir -p "$T/blend.store"
    head -c 4000 /usr/share/common-licenses/GPL-3 > "$T/d1.txt"
    head -c 4000 /usr/share/common-licenses/Apache-2.0 > "$T/d2.txt"
    bref=(); declare -A bmm
    for i in $(seq "$RUNS"); do
        for mode in on off; do
            mount_it "$T/blend.store" "model=$MODEL,passthrough=$mode"
            c1=$("$BUILD/kvfsctl" prefill -m "$MODEL" -M "$T/mnt" "$T/d1.txt" 2>/dev/null | cut -d' ' -f1)
            c2=$("$BUILD/kvfsctl" prefill -m "$MODEL" -M "$T/mnt" "$T/d2.txt" 2>/dev/null | cut -d' ' -f1)
            "$BUILD/kvfsctl" blend -M "$T/mnt" --name b$i$mode --suffix $'\nQuestion: which licenses?\nAnswer:' "$c1" "$c2" > /dev/null
            cat "$T/mnt/blends/b$i$mode.kv" > "$T/blend.kv"  # the reference, in the page cache (blend results
            # are read uncached through the daemon, and from their image's memfd with passthrough)
            bref+=("$(mmap_secs "$T/blend.kv")")
            bmm[$mode]+=" $(mmap_secs "$T/mnt/blends/b$i$mode.kv")"
            umount_it
        done
    done
    BSIZE=$(stat -c %s "$T/blend.kv")
    br=$(printf '%s\n' "${bref[@]}" | median)
    for mode in on off; do
        b=$(echo "${bmm[$mode]}" | med)
        blend_rows+="| mmap of a $(awk -v s="$BSIZE" 'BEGIN{printf "%.0f", s/1048576}') MiB blend result, passthrough $mode | $(awk -v s="$BSIZE" -v t="$b" 'BEGIN{printf "%.2f GB/s", s/t/1e9}') | $(awk -v a="$br" -v b="$b" 'BEGIN{printf "%.2f", a/b}') | >= 0.9 |"$'\n'
    done
fi

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
Reads use 1 MiB \`read()\` calls; the reference is the same bytes from a file in the page cache. Passthrough's images
(reads.images): $images; the host's \`transparent_hugepage/shmem_enabled\` (memfds' page size):
\`$(cat /sys/kernel/mm/transparent_hugepage/shmem_enabled 2>/dev/null)\`. Command: \`RUNS=$RUNS N_LIST=$N_LIST bench/fs.sh\`.

| measurement | result | ratio vs page-cache read | goal |
|---|---|---|---|
| read() of the ${MB%.*} MiB file from the page cache | $(awk -v s="$SIZE" -v t="$r" 'BEGIN{printf "%.2f GB/s", s/t/1e9}') | 1.00 | |
$(for mode in on off; do
    eval "f=\$f_$mode w=\$w_$mode st=\$st_$mode mm=\$mm_$mode p=\$path_$mode"
    echo "| passthrough $mode ($p): first read (cold RAM tier and FUSE cache) | $(awk -v s="$SIZE" -v t="$f" 'BEGIN{printf "%.2f GB/s", s/t/1e9}') | $(awk -v a="$r" -v b="$f" 'BEGIN{printf "%.2f", a/b}') | >= 0.5 |"
    echo "| passthrough $mode: first re-read | $(awk -v s="$SIZE" -v t="$w" 'BEGIN{printf "%.2f GB/s", s/t/1e9}') | $(awk -v a="$r" -v b="$w" 'BEGIN{printf "%.2f", a/b}') | >= 0.9 |"
    echo "| passthrough $mode: later re-reads (median of re-reads 2-4) | $(awk -v s="$SIZE" -v t="$st" 'BEGIN{printf "%.2f GB/s", s/t/1e9}') | $(awk -v a="$r" -v b="$st" 'BEGIN{printf "%.2f", a/b}') | >= 0.9 |"
    echo "| passthrough $mode: mmap of the chunk, every byte touched (vs mmap of the page-cached file) | $(awk -v s="$SIZE" -v t="$mm" 'BEGIN{printf "%.2f GB/s", s/t/1e9}') | $(awk -v a="$mr" -v b="$mm" 'BEGIN{printf "%.2f", a/b}') | |"
done)
${blend_rows}| \`cp\` ingest into incoming/ (verify, zstd 1, fsync) | $(awk -v s="$SIZE" -v t="$g" 'BEGIN{printf "%.0f MB/s", s/t/1e6}') | | |
| \`ls -l chunks/\` with $N_LIST entries ($((n - 1)) listed) | $(awk -v t="$l" 'BEGIN{printf "%.2f s", t}') | | < 2 s |
MD
