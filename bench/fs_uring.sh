#!/bin/bash
# FUSE over io_uring against /dev/fuse reads for metadata-heavy work (issue
# 22): ls -l of N_LIST chunks and stat of every entry, on one kvfs built
# with libfuse 3.18 from Debian sid's source, mounted with and without
# -o io_uring (alternating, medians of RUNS).  Not part of make bench: it
# needs the kernel's fuse.enable_uring=1 (set here, as root, and restored)
# and a build of its own:
#   FUSE_SUITE=sid BUILD=build-uring tools/build-libfuse.sh
#   make BUILD=build-uring NO_CUDA=1 FUSE_LIBS="build-uring/third_party/fuse3/inst/lib/libfuse3.a -ldl -lrt -luring -lnuma" build-uring/kvfs
#   bench/fs_uring.sh
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
UBUILD=${UBUILD:-$ROOT/build-uring}
RUNS=${RUNS:-5}
N_LIST=${N_LIST:-100000}
PARAM=/sys/module/fuse/parameters/enable_uring
[ -x "$UBUILD/kvfs" ] || { echo "no $UBUILD/kvfs: see the header of $0" >&2; exit 1; }
[ -w "$PARAM" ] || { echo "cannot enable FUSE over io_uring ($PARAM)" >&2; exit 1; }
T=$(mktemp -d /tmp/kvfs-uring.XXXXXX)
old=$(cat "$PARAM")
PID=""
cleanup() {
    fusermount3 -u "$T/mnt" 2>/dev/null || true
    [ -n "$PID" ] && wait "$PID" 2>/dev/null
    echo "$old" | tr YN 10 > "$PARAM"
    rm -rf "$T"
}
trap cleanup EXIT
echo 1 > "$PARAM"
mkdir -p "$T/mnt" "$T/store"
cc -O2 -I"$ROOT/index" "$ROOT/bench/populate.c" "$UBUILD/libkvfs_core.a" \
    $(pkg-config --libs sqlite3 libzstd libxxhash libcrypto) -lpthread -o "$T/populate"
"$T/populate" "$T/store" "$N_LIST"
mount_it() { # mount_it [-o io_uring]
    "$UBUILD/kvfs" -f -o "store=$T/store" "$@" "$T/mnt" 2>>"$T/log" & PID=$!
    for _ in $(seq 400); do [ -e "$T/mnt/.kvfs/stats" ] && return 0; sleep 0.05; done
    echo "mount failed"; cat "$T/log"; exit 1
}
umount_it() { fusermount3 -u "$T/mnt"; wait "$PID" 2>/dev/null || true; PID=""; }
secs() { local t0 t1; t0=$(date +%s.%N); "$@" > /dev/null; t1=$(date +%s.%N); awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}'; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
stat_all() { # a fresh mount: every lookup and getattr reaches the daemon
    python3 -c "import os, sys; d = sys.argv[1]; [os.stat(os.path.join(d, n)) for n in os.listdir(d)]" "$T/mnt/chunks"
}
declare -A ls_t st_t
rings=0
for i in $(seq "$RUNS"); do
    for mode in dev uring; do
        if [ $mode = uring ]; then mount_it -o io_uring; else mount_it; fi
        ls_t[$mode]+=" $(secs ls -l "$T/mnt/chunks")"
        [ $mode = uring ] && rings=$(ls -l /proc/$PID/fd 2>/dev/null | grep -c io_uring || true)
        umount_it
        if [ $mode = uring ]; then mount_it -o io_uring; else mount_it; fi
        st_t[$mode]+=" $(secs stat_all)"
        umount_it
    done
done
med() { tr ' ' '\n' | grep . | median; }
cat <<MD
FUSE over io_uring (libfuse $(pkg-config --modversion "$UBUILD/third_party/fuse3/inst/lib/pkgconfig/fuse3.pc"), kernel $(uname -r),
$(nproc) cores), $N_LIST chunks, medians of $RUNS alternating runs, each on a fresh mount; command: \`RUNS=$RUNS N_LIST=$N_LIST bench/fs_uring.sh\`
(the io_uring mount's daemon held $rings io_uring descriptors: the transport was in use).

| work | /dev/fuse | io_uring | io_uring / dev |
|---|---|---|---|
| \`ls -l chunks/\` | $(echo "${ls_t[dev]}" | med) s | $(echo "${ls_t[uring]}" | med) s | $(awk -v a="$(echo "${ls_t[uring]}" | med)" -v b="$(echo "${ls_t[dev]}" | med)" 'BEGIN{printf "%.2f", a/b}') |
| stat() of every chunk (lookup + getattr each) | $(echo "${st_t[dev]}" | med) s | $(echo "${st_t[uring]}" | med) s | $(awk -v a="$(echo "${st_t[uring]}" | med)" -v b="$(echo "${st_t[dev]}" | med)" 'BEGIN{printf "%.2f", a/b}') |
MD
