#!/bin/bash
# The everyday operator workflow on a real mount: cp in, ls, stat, cat/cmp
# out, xattrs, incoming/, stats, rm, remount.
. "$(dirname "$0")/../lib.sh"
mount_kvfs a || exit 1
M=$T/a.mnt
h1=$(synth "$T/one.kv" --layers 4 --tokens 64)
h2=$(synth "$T/two.kv" --layers 30 --tokens 512 --kv-heads 3 --seed 2)      # SmolLM2-sized, 11 MiB
h3=$(synth "$T/three.kv" --size-mib 64 --layers 30 --kv-heads 3 --seed 3)  # 64 MiB
h4=$(synth "$T/four.kv" --tokens 9 --dtype bf16 --seed 4)
h5=$(synth "$T/five.kv" --tokens 9 --dtype f32 --seed 5)

check "cp into chunks/ under its hash" cp "$T/one.kv" "$M/chunks/$h1.kv"
check "cp an 11 MiB chunk" cp "$T/two.kv" "$M/chunks/$h2.kv"
check "cp a 64 MiB chunk" cp "$T/three.kv" "$M/chunks/$h3.kv"
check "cp bf16 and f32 chunks via incoming/" cp "$T/four.kv" "$T/five.kv" "$M/incoming/"
check "incoming/ is empty after close" test -z "$(ls -A "$M/incoming")"
check "ls shows five chunks" test "$(ls "$M/chunks" | wc -l)" -eq 5
for h in $h1 $h2 $h3 $h4 $h5; do
    check "chunk $h listed" test -e "$M/chunks/$h.kv"
done
check "cmp small" cmp "$T/one.kv" "$M/chunks/$h1.kv"
check "cmp 11 MiB" cmp "$T/two.kv" "$M/chunks/$h2.kv"
check "cmp 64 MiB" cmp "$T/three.kv" "$M/chunks/$h3.kv"
check "cat | cmp bf16" sh -c "cat '$M/chunks/$h4.kv' | cmp - '$T/four.kv'"
check "cmp f32 (read twice, RAM tier)" sh -c "cmp '$T/five.kv' '$M/chunks/$h5.kv' && cmp '$T/five.kv' '$M/chunks/$h5.kv'"
size=$(stat -c %s "$M/chunks/$h3.kv")
check "ls -l size is the logical size" test "$size" -eq "$(stat -c %s "$T/three.kv")"
check "ls -l lists sizes" sh -c "ls -l '$M/chunks' | grep -q ' $size '"
mtime=$(stat -c %Y "$M/chunks/$h1.kv"); now=$(date +%s)
check "mtime is the ingest time" test $((now - mtime)) -le 60 -a $((now - mtime)) -ge 0
check "info reads through the mount" sh -c "'$KVFSCTL' info '$M/chunks/$h2.kv' | grep -q 'tokens:      512'"
check "xattr tokens" test "$(getfattr --absolute-names --only-values -n user.kvfs.tokens "$M/chunks/$h2.kv")" = 512
check "xattr model" sh -c "getfattr --absolute-names -d '$M/chunks/$h2.kv' | grep -q 'user.kvfs.model=\"[0-9a-f]\{16\}\"'"
hits=$(getfattr --absolute-names --only-values -n user.kvfs.hits "$M/chunks/$h5.kv")
check "xattr hits counts reads ($hits)" test "$hits" -ge 2
check "pinned defaults to 0" test "$(getfattr --absolute-names --only-values -n user.kvfs.pinned "$M/chunks/$h1.kv")" = 0
check "setfattr pinned=1" setfattr -n user.kvfs.pinned -v 1 "$M/chunks/$h1.kv"
check "pinned reads 1" test "$(getfattr --absolute-names --only-values -n user.kvfs.pinned "$M/chunks/$h1.kv")" = 1
check "setfattr pinned=yes is refused" sh -c "! setfattr -n user.kvfs.pinned -v yes '$M/chunks/$h1.kv' 2>/dev/null"
check "setting a read-only xattr is refused" sh -c "! setfattr -n user.kvfs.tokens -v 5 '$M/chunks/$h1.kv' 2>/dev/null"
check "stats is JSON with 5 chunks" python3 -c "import json,sys; d=json.load(open('$M/.kvfs/stats')); sys.exit(0 if d['chunks']==5 and d['hits']>=5 and 'ram' in d['tiers'] else 1)"
check "stats is read-only" sh -c "! echo x > '$M/.kvfs/stats' 2>/dev/null"
check "rm removes a chunk" rm "$M/chunks/$h4.kv"
check "removed chunk is gone" test ! -e "$M/chunks/$h4.kv"
check "rm of a missing chunk fails" sh -c "! rm '$M/chunks/$h4.kv' 2>/dev/null"
check "store again after rm" cp "$T/four.kv" "$M/incoming/x"
check "copy to the same name with the same content is fine" cp "$T/one.kv" "$M/chunks/$h1.kv"
unmount_kvfs a || fail "unmount"
mount_kvfs a verbose || exit 1  # verbose: the log says how many chunk inodes the daemon knows
check "after remount: five chunks" test "$(ls "$M/chunks" | wc -l)" -eq 5
check "after remount: cmp 64 MiB" cmp "$T/three.kv" "$M/chunks/$h3.kv"
check "after remount: cmp bf16" cmp "$T/four.kv" "$M/chunks/$h4.kv"
check "after remount: pinned kept" test "$(getfattr --absolute-names --only-values -n user.kvfs.pinned "$M/chunks/$h1.kv")" = 1
check "du shows stored blocks" test "$(du -k "$M/chunks/$h2.kv" | cut -f1)" -gt 0
# The kernel forgets inodes it drops (.forget): the daemon's inode map shrinks,
# and every chunk is still looked up and read afterwards.
mkdir -p "$T/many"
for i in $(seq 200); do echo "$i $(synth "$T/many/$i.kv" --layers 1 --tokens 2 --seed $((100 + i)))"; done >"$T/many.list"
check "cp 200 small chunks via incoming/" cp "$T"/many/*.kv "$M/incoming/"
n=$(ls "$M/chunks" | wc -l)
check "ls -l lists them ($n chunks)" test "$(ls -l "$M/chunks" | grep -c '\.kv$')" -eq "$n" -a "$n" -ge 200
exec 3<"$M/chunks/$h1.kv" # an inode the kernel keeps: never forgotten
if echo 2 2>/dev/null >/proc/sys/vm/drop_caches; then
    for _ in $(seq 100); do # forgets come as the kernel evicts: wait for them
        least=$(grep -o "chunk inodes, [0-9]* known" "$T/a.log" | tr -dc '0-9\n' | sort -n | head -1)
        [ "${least:-999}" -lt 10 ] && break
        sleep 0.05
    done
    check "after drop_caches the inode map shrank (to ${least:-?} of $n)" test "${least:-999}" -lt 10
else
    echo "not root: no drop_caches, the forgets are not forced"
fi
check "a chunk held open across the forgets still reads" cmp "$T/one.kv" /dev/fd/3
exec 3<&-
bad=0
while read -r i h; do cmp -s "$T/many/$i.kv" "$M/chunks/$h.kv" || bad=$((bad + 1)); done <"$T/many.list"
check "after the forgets all 200 are looked up and read again ($bad differ)" test "$bad" -eq 0
check "ls -l after the forgets lists them all" test "$(ls -l "$M/chunks" | grep -c '\.kv$')" -eq "$n"
check "xattrs after the forgets" test "$(getfattr --absolute-names --only-values -n user.kvfs.tokens "$M/chunks/$h2.kv")" = 512
unmount_kvfs a
check "fsck of the store is clean" "$KVFSCTL" fsck "$T/a.store"
finish
