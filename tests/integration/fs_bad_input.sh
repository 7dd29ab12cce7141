#!/bin/bash
# Bad input: each gets a clear errno at close (cp reports it), a log line
# saying what was wrong, and nothing partial becomes visible or indexed.
. "$(dirname "$0")/../lib.sh"
mount_kvfs a || exit 1
M=$T/a.mnt
LOG=$T/a.log
good=$(synth "$T/good.kv" --layers 3 --tokens 40)
other=$(synth "$T/other.kv" --layers 3 --tokens 40 --seed 9)
corrupt() { # corrupt SRC DST OFFSET BYTE(hex)
    cp "$1" "$2"
    printf "\\x$4" | dd of="$2" bs=1 seek="$3" conv=notrunc status=none
}
header_size=4096
head -c 3000 "$T/good.kv" > "$T/trunc_header.kv"
head -c $(( $(stat -c %s "$T/good.kv") - 100 )) "$T/good.kv" > "$T/trunc_data.kv"
corrupt "$T/good.kv" "$T/magic.kv" 0 58
corrupt "$T/good.kv" "$T/version.kv" 8 07
corrupt "$T/good.kv" "$T/dtype.kv" 24 09
corrupt "$T/good.kv" "$T/checksum.kv" $((header_size + 100)) 7f
corrupt "$T/good.kv" "$T/token.kv" 130 ff
: > "$T/empty.kv"

expect_reject() { # expect_reject DESC DEST SRC LOGPATTERN
    local desc=$1 dst=$2 src=$3 pat=$4 out
    local before; before=$(wc -l < "$LOG")
    if out=$(cp "$src" "$dst" 2>&1); then
        fail "$desc: cp succeeded"
        return
    fi
    case $out in *"Invalid argument"*|*"Protocol error"*|*"Bad message"*|*"No space"*|*"Operation not permitted"*) ;;
        *) fail "$desc: unexpected error: $out"; return;; esac
    if tail -n +$((before + 1)) "$LOG" | grep -q -- "$pat"; then ok "$desc: $out"; else
        fail "$desc: no log line matching '$pat'"; tail -3 "$LOG"; fi
}
expect_reject "truncated header" "$M/incoming/t1.kv" "$T/trunc_header.kv" "truncated"
expect_reject "truncated data" "$M/incoming/t2.kv" "$T/trunc_data.kv" "truncated"
expect_reject "empty file" "$M/incoming/e.kv" "$T/empty.kv" "truncated"
expect_reject "wrong magic" "$M/incoming/m.kv" "$T/magic.kv" "wrong magic"
expect_reject "wrong version" "$M/incoming/v.kv" "$T/version.kv" "unsupported format version"
expect_reject "unknown dtype" "$M/incoming/d.kv" "$T/dtype.kv" "unknown dtype"
expect_reject "layer checksum mismatch" "$M/incoming/c.kv" "$T/checksum.kv" "layer 0 checksum mismatch"
expect_reject "header checksum mismatch" "$M/incoming/k.kv" "$T/token.kv" "header checksum mismatch"
expect_reject "name does not match content hash" "$M/chunks/$other.kv" "$T/good.kv" "does not match"
expect_reject "name that is not a hash" "$M/chunks/hello.kv" "$T/good.kv" "names there are"
check "nothing became visible" test -z "$(ls -A "$M/chunks")"
check "incoming/ holds no leftovers" test -z "$(ls -A "$M/incoming")"
check "stats counts no chunk" python3 -c "import json,sys; d=json.load(open('$M/.kvfs/stats')); sys.exit(d['chunks'] != 0 or d['ingest_errors'] < 8)"

# namespace rules
check "mkdir refused" sh -c "! mkdir '$M/chunks/d' 2>/dev/null"
check "file at the root refused" sh -c "! cp '$T/good.kv' '$M/x.kv' 2>/dev/null"
check "mkdir at the root refused" sh -c "! mkdir '$M/newdir' 2>/dev/null"
cp "$T/good.kv" "$M/chunks/$good.kv"
check "rename refused" sh -c "! mv '$M/chunks/$good.kv' '$M/chunks/$other.kv' 2>/dev/null"
check "symlink refused" sh -c "! ln -s x '$M/chunks/l' 2>/dev/null"
check "hard link refused" sh -c "! ln '$M/chunks/$good.kv' '$M/chunks/l2' 2>/dev/null"
check "truncate of a chunk refused" sh -c "! truncate -s 10 '$M/chunks/$good.kv' 2>/dev/null"
check "overwrite with other bytes refused" sh -c "! cp '$T/other.kv' '$M/chunks/$good.kv' 2>/dev/null"
check "chunk intact after refused overwrite" cmp "$T/good.kv" "$M/chunks/$good.kv"
check "lookup of a non-hash name is ENOENT" sh -c "! stat '$M/chunks/nothing' 2>/dev/null"
check "foreign xattr namespace refused" sh -c "! setfattr -n user.other -v 1 '$M/chunks/$good.kv' 2>/dev/null"
check "daemon still alive" kill -0 "$MNT_PID"
unmount_kvfs a

# capacity: LRU eviction, then ENOSPC when only pinned chunks remain
one=$(stat -c %s "$T/good.kv")
mount_kvfs cap "capacity=$((one * 2 + one / 2)),zstd=0" || exit 1
C=$T/cap.mnt
h1=$(synth "$T/c1.kv" --layers 3 --tokens 40 --seed 21)
h2=$(synth "$T/c2.kv" --layers 3 --tokens 40 --seed 22)
h3=$(synth "$T/c3.kv" --layers 3 --tokens 40 --seed 23)
h4=$(synth "$T/c4.kv" --layers 3 --tokens 40 --seed 24)
cp "$T/c1.kv" "$T/c2.kv" "$C/incoming/"
sleep 0.05; cat "$C/chunks/$h1.kv" > /dev/null   # h1 now more recent than h2
cp "$T/c3.kv" "$C/incoming/"
check "LRU chunk evicted" test ! -e "$C/chunks/$h2.kv"
check "recently used chunk kept" cmp "$T/c1.kv" "$C/chunks/$h1.kv"
check "new chunk stored" cmp "$T/c3.kv" "$C/chunks/$h3.kv"
setfattr -n user.kvfs.pinned -v 1 "$C/chunks/$h1.kv"
setfattr -n user.kvfs.pinned -v 1 "$C/chunks/$h3.kv"
before=$(wc -l < "$T/cap.log")
out=$(cp "$T/c4.kv" "$C/incoming/" 2>&1)
check "write past capacity with only pinned chunks fails ENOSPC" sh -c "echo '$out' | grep -q 'No space left'"
check "log says over capacity" sh -c "tail -n +$((before + 1)) '$T/cap.log' | grep -q 'over capacity'"
check "refused chunk not visible" test ! -e "$C/chunks/$h4.kv"
check "pinned chunks intact" sh -c "cmp '$T/c1.kv' '$C/chunks/$h1.kv' && cmp '$T/c3.kv' '$C/chunks/$h3.kv'"
check "stats report an eviction" python3 -c "import json,sys; d=json.load(open('$C/.kvfs/stats')); sys.exit(d['evictions'] != 1 or d['bytes_stored'] > d['capacity'])"
unmount_kvfs cap
check "no temp files left" test -z "$(ls -A "$T/cap.store/tmp")"
check "fsck clean" "$KVFSCTL" fsck "$T/cap.store"

# bad options
check "unknown size is refused" sh -c "! '$KVFS' -f -o store='$T/x',capacity=lots '$T/a.mnt' 2>/dev/null"
check "bad zstd level is refused" sh -c "! '$KVFS' -f -o store='$T/x',zstd=99 '$T/a.mnt' 2>/dev/null"
finish
