#!/bin/bash
# SIGKILL the daemon while files are being ingested; mount again: every
# listed chunk is complete and verified, fsck finds no orphans.
. "$(dirname "$0")/../lib.sh"
for i in $(seq 1 24); do
    synth "$T/s$i.kv" --layers 30 --kv-heads 3 --tokens $((100 + i * 13)) --seed $i > /dev/null
done
mount_kvfs a || exit 1
M=$T/a.mnt
( for i in $(seq 1 24); do cp "$T/s$i.kv" "$M/incoming/" 2>/dev/null || true; done ) &
writer=$!
sleep 0.4
kill -9 "$MNT_PID"
wait "$writer" 2>/dev/null
fusermount3 -uz "$M" 2>/dev/null
stored_before=$(ls "$T/a.store/objects"/*/ 2>/dev/null | grep -c kvo)
echo "objects on disk at the kill: $stored_before"
mount_kvfs a || exit 1
n=$(ls "$M/chunks" | wc -l)
echo "chunks visible after remount: $n"
check "some but not necessarily all chunks survived ($n)" test "$n" -ge 1
bad=0
for f in "$M"/chunks/*.kv; do
    h=$(basename "$f" .kv)
    src=""
    for i in $(seq 1 24); do
        if [ "$("$KVFSCTL" info --json "$T/s$i.kv" | python3 -c 'import json,sys; print(json.load(sys.stdin)["hash"])')" = "$h" ]; then src=$T/s$i.kv; break; fi
    done
    if [ -z "$src" ] || ! cmp -s "$f" "$src"; then bad=$((bad + 1)); echo "bad chunk $h"; fi
done
check "every visible chunk is byte-identical to its source" test "$bad" -eq 0
check "ingest resumes after the crash" cp "$T/s24.kv" "$T/s23.kv" "$M/incoming/"
unmount_kvfs a
check "fsck: consistent, no orphans, no temp files" "$KVFSCTL" fsck "$T/a.store"
finish
