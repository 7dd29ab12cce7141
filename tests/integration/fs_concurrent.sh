#!/bin/bash
# 8 concurrent writers and readers on one mount.
. "$(dirname "$0")/../lib.sh"
mount_kvfs a "ram=8M" || exit 1
M=$T/a.mnt
for i in $(seq 1 16); do synth "$T/s$i.kv" --layers 8 --tokens $((50 + i * 11)) --seed $i > /dev/null; done
for i in 1 2 3 4; do cp "$T/s$i.kv" "$M/incoming/"; done
pids=()
for w in 1 2 3 4; do   # writers, overlapping sets
    ( for i in $(seq $((w + 2)) $((w + 12))); do cp "$T/s$i.kv" "$M/incoming/w$w-$i" || exit 1; done ) &
    pids+=($!)
done
for r in 1 2 3 4; do   # readers, verifying while writes go on
    ( for k in $(seq 1 15); do
          i=$(( (k + r) % 4 + 1 ))
          h=$("$KVFSCTL" info --json "$T/s$i.kv" | python3 -c 'import json,sys; print(json.load(sys.stdin)["hash"])')
          cmp "$T/s$i.kv" "$M/chunks/$h.kv" || exit 1
          ls -l "$M/chunks" > /dev/null || exit 1
      done ) &
    pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
check "all 8 workers succeeded" test $rc -eq 0
check "16 distinct chunks" test "$(ls "$M/chunks" | wc -l)" -eq 16
for i in $(seq 1 16); do
    h=$("$KVFSCTL" info --json "$T/s$i.kv" | python3 -c 'import json,sys; print(json.load(sys.stdin)["hash"])')
    cmp -s "$T/s$i.kv" "$M/chunks/$h.kv" || fail "chunk $i differs"
done
check "daemon alive" kill -0 "$MNT_PID"
unmount_kvfs a
check "fsck clean" "$KVFSCTL" fsck "$T/a.store"
finish
