#!/bin/bash
# Fault injection (issue 19): the store's disk returns EIO on reads, ENOSPC
# or EIO on writes, EIO on fsync (tests/fault/fault_shim.c, LD_PRELOAD into
# the daemon); the model file is removed while loaded.  Each time: the
# operation fails with that errno and a log line, nothing is lost or
# half-visible, the daemon lives, and all is well once the disk recovers.
. "$(dirname "$0")/../lib.sh"
cc -shared -fPIC -O1 -o "$T/shim.so" "$KVFS_ROOT/tests/fault/fault_shim.c" -ldl 2>"$T/cc.err" ||
    skip "cannot build the fault shim: $(head -1 "$T/cc.err")"
for i in 1 2 3; do "$KVFSCTL" synth -o "$T/c$i.kv" --tokens 40 --layers 6 --seed $i > "$T/h$i"; done
h1=$(cat "$T/h1"); h2=$(cat "$T/h2"); h3=$(cat "$T/h3")
CTL=$T/fault
: > "$CTL"
# ram=0: every read goes to the disk; ASan's runtime accepts a preloaded shim
LD_PRELOAD=$T/shim.so KVFS_FAULT_DIR=$T/f.store KVFS_FAULT_FILE=$CTL ASAN_OPTIONS=${ASAN_OPTIONS:-}:verify_asan_link_order=0 \
    mount_kvfs f ram=0 || exit 1
M=$T/f.mnt
cp "$T/c1.kv" "$M/chunks/$h1.kv" && cp "$T/c2.kv" "$M/chunks/$h2.kv"
check "two chunks stored with a healthy disk" sh -c "cmp '$T/c1.kv' '$M/chunks/$h1.kv' && cmp '$T/c2.kv' '$M/chunks/$h2.kv'"

echo "read EIO" > "$CTL"
check "reads fail: cat gets EIO" sh -c "! cat '$M/chunks/$h1.kv' 2>'$T/err' >/dev/null; grep -q 'Input/output error' '$T/err'"
check "... the log says which chunk" grep -q "$h1.*Input/output error\|Input/output error.*$h1" "$T/f.log"
check "... ls still lists both" test "$(ls "$M/chunks" | wc -l)" -eq 2
: > "$CTL"
check "the disk recovers: the chunk reads back intact" cmp "$T/c1.kv" "$M/chunks/$h1.kv"

for fault in "write ENOSPC:No space left on device" "write EIO:Input/output error" "fsync EIO:Input/output error"; do
    echo "${fault%%:*}" > "$CTL"
    check "${fault%%:*}: cp of a new chunk fails (${fault#*:})" sh -c "! cp '$T/c3.kv' '$M/chunks/$h3.kv' 2>'$T/err'; grep -q '${fault#*:}' '$T/err'"
    : > "$CTL"
    check "... nothing of it visible" sh -c "! ls '$M/chunks' | grep -q '$h3'"
    check "... no temporary file left in the store" sh -c "! find '$T/f.store' -name '*.tmp*' | grep -q ."
done
check "the log names the failed writes" sh -c "grep -q 'No space left on device' '$T/f.log' && grep -c 'rejected chunks/$h3' '$T/f.log' | grep -q 3"
check "with the disk back, the same cp succeeds" sh -c "cp '$T/c3.kv' '$M/chunks/$h3.kv' && cmp '$T/c3.kv' '$M/chunks/$h3.kv'"
check "the earlier chunks are intact" sh -c "cmp '$T/c1.kv' '$M/chunks/$h1.kv' && cmp '$T/c2.kv' '$M/chunks/$h2.kv'"
check "daemon alive" kill -0 "$MNT_PID"
unmount_kvfs f
check "fsck finds the store consistent" "$KVFSCTL" fsck "$T/f.store"

# the model file removed while loaded: its mapping stays valid
MODEL=$KVFS_ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ -s "$MODEL" ]; then
    cp "$MODEL" "$T/model.gguf"
    mount_kvfs g "model=$T/model.gguf" || exit 1
    G=$T/g.mnt
    for i in 1 2; do
        head -c 600 "/usr/share/common-licenses/$(echo GPL-3 Apache-2.0 | cut -d' ' -f$i)" > "$T/d$i.txt"
        d[$i]=$("$KVFSCTL" prefill -m "$MODEL" -M "$G" "$T/d$i.txt" 2>/dev/null | cut -d' ' -f1)
    done
    rm "$T/model.gguf"
    check "model file removed while loaded: a blend still works" \
        "$KVFSCTL" blend -M "$G" --name after_rm --suffix $'\nQuestion: which licenses?' ${d[1]} ${d[2]}
    check "... and verifies" "$KVFSCTL" info "$G/blends/after_rm.kv"
    check "daemon alive" kill -0 "$MNT_PID"
    unmount_kvfs g
fi
finish
