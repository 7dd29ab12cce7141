#!/bin/bash
# Two mounts with separate stores: cp -a between them, byte-identical.
. "$(dirname "$0")/../lib.sh"
mount_kvfs a || exit 1
A_PID=$MNT_PID
mount_kvfs b || exit 1
A=$T/a.mnt B=$T/b.mnt
for i in 1 2 3 4 5 6; do
    synth "$T/s$i.kv" --layers 6 --tokens $((i * 37)) --seed $i > /dev/null
    cp "$T/s$i.kv" "$A/incoming/"
done
setfattr -n user.kvfs.pinned -v 1 "$A"/chunks/$(ls "$A/chunks" | head -1)
check "cp -a mntA/chunks/* mntB/chunks/" cp -a "$A"/chunks/* "$B/chunks/"
check "same listing" test "$(ls "$A/chunks")" = "$(ls "$B/chunks")"
for f in "$A"/chunks/*; do
    n=$(basename "$f")
    check "cmp $n" cmp "$f" "$B/chunks/$n"
done
check "pin travels with cp -a" test "$(getfattr --absolute-names --only-values -n user.kvfs.pinned "$B"/chunks/$(ls "$A/chunks" | head -1))" = 1
check "copying again is idempotent" cp -a "$A"/chunks/* "$B/chunks/"
check "B has six chunks" test "$(ls "$B/chunks" | wc -l)" -eq 6
finish
