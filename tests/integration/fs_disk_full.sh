#!/bin/bash
# The backing disk fills up: the write fails with ENOSPC at close, the log
# says so, nothing partial stays, and the store keeps serving.
. "$(dirname "$0")/../lib.sh"
mkdir -p "$T/small.store"
mount -t tmpfs -o size=3m tmpfs "$T/small.store" 2>/dev/null || skip "cannot mount a small tmpfs (needs root)"
release_disk() {
    for mp in "${MOUNTS[@]}"; do fusermount3 -u "$mp" 2>/dev/null; done
    for pid in "${PIDS[@]}"; do for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done; done
    umount "$T/small.store" 2>/dev/null
    cleanup
}
trap release_disk EXIT
mount_kvfs small "zstd=0" || exit 1
M=$T/small.mnt
h1=$(synth "$T/a.kv" --layers 4 --tokens 64 --seed 1)
synth "$T/big.kv" --layers 8 --tokens 2048 --seed 2 > /dev/null   # 4 MiB: more than the disk
check "a small chunk fits" cp "$T/a.kv" "$M/incoming/"
before=$(wc -l < "$T/small.log")
out=$(cp "$T/big.kv" "$M/incoming/" 2>&1)
check "a chunk larger than the free space fails with ENOSPC ($out)" sh -c "echo '$out' | grep -q 'No space left'"
check "the log says the disk is full" sh -c "tail -n +$((before + 1)) '$T/small.log' | grep -q 'disk full'"
check "nothing partial left in tmp/" test -z "$(ls -A "$T/small.store/tmp")"
check "only the small chunk is listed" test "$(ls "$M/chunks")" = "$h1.kv"
check "the store still serves" cmp "$T/a.kv" "$M/chunks/$h1.kv"
unmount_kvfs small
check "fsck clean" "$KVFSCTL" fsck "$T/small.store"
finish
