#!/bin/bash
# FUSE passthrough (libfuse >= 3.17, CONFIG_FUSE_PASSTHROUGH): chunks and
# blend results are read by the kernel from the memfd holding their image.
# cp/cmp and mmap give the same bytes; reads still count as hits; a reader
# keeps its bytes while the chunk is removed, evicted from the RAM tier or
# from the store; passthrough=off reads through the daemon; .kvfs/stats says
# which path is active.  Skips where the kernel or libfuse cannot do it.
. "$(dirname "$0")/../lib.sh"
MODEL=$KVFS_ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf
reads() { python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['reads']; print(r[sys.argv[2]])" "$1/.kvfs/stats" "$2"; }

# ram=16M: the 64 MiB chunk never fits the RAM tier, the small ones do
mount_kvfs a "passthrough=on,ram=16M" || exit 1
M=$T/a.mnt
path=$(reads "$M" path)
[ "$path" = passthrough ] || skip "passthrough unavailable here: $(reads "$M" why)"
check ".kvfs/stats says reads are passthrough" test "$path" = passthrough
[ "$(id -u)" = 0 ] && check "root: images live on the private huge-page tmpfs ($(reads "$M" images))" \
    sh -c "test \"\$(python3 -c \"import json; print(json.load(open('$M/.kvfs/stats'))['reads']['images'])\")\" = 'tmpfs (huge=within_size, private)'"
check "... which no other process sees: no new tmpfs in /proc/self/mountinfo" \
    sh -c "! grep -q 'huge=within_size' /proc/self/mountinfo"
h1=$(synth "$T/one.kv" --layers 4 --tokens 64)
h2=$(synth "$T/two.kv" --layers 30 --tokens 512 --kv-heads 3 --seed 2)
h3=$(synth "$T/three.kv" --size-mib 64 --layers 30 --kv-heads 3 --seed 3)
check "cp three chunks in" cp "$T/one.kv" "$T/two.kv" "$T/three.kv" "$M/incoming/"
o0=$(reads "$M" passthrough_opens)
ra=$(reads "$M" daemon_read_requests); r0=$(reads "$M" daemon_read_requests) # what reading the stats costs
check "cmp small" cmp "$T/one.kv" "$M/chunks/$h1.kv"
check "cmp 11 MiB" cmp "$T/two.kv" "$M/chunks/$h2.kv"
check "cmp 64 MiB (not in the RAM tier: decoded for this open)" cmp "$T/three.kv" "$M/chunks/$h3.kv"
r1=$(reads "$M" daemon_read_requests)
check "no read request reached the daemon for the 75 MiB read ($r0 -> $r1; reading the stats: $((r0 - ra)))" \
    test "$((r1 - r0))" -eq "$((r0 - ra))"
o1=$(reads "$M" passthrough_opens)
check "the three opens were passthrough ($o0 -> $o1)" test "$o1" -eq $((o0 + 3))
check "no daemon opens" test "$(reads "$M" daemon_opens)" -eq 0
hits=$(getfattr --absolute-names --only-values -n user.kvfs.hits "$M/chunks/$h2.kv")
check "reads still count as hits ($hits)" test "$hits" -ge 1
check "mmap reads the same bytes" python3 -c "
import mmap, sys
with open(sys.argv[1], 'rb') as f, open(sys.argv[2], 'rb') as g:
    m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    sys.exit(m[:] != g.read())" "$M/chunks/$h3.kv" "$T/three.kv"
check "kvfsctl info verifies through the mount" "$KVFSCTL" info "$M/chunks/$h2.kv"

# readers that hold a chunk open while it goes: rm, and eviction from the RAM
# tier (other chunks read through it) -- each still reads every byte
cat > "$T/hold.py" <<'PY'
import mmap, os, subprocess, sys, threading
path, ref, action = sys.argv[1], open(sys.argv[2], 'rb').read(), sys.argv[3:]
f = open(path, 'rb'); g = open(path, 'rb')
m = mmap.mmap(g.fileno(), 0, prot=mmap.PROT_READ)
head = f.read(len(ref) // 3)
subprocess.run(action, check=True)          # the chunk goes, or is pushed out
out = []
ts = [threading.Thread(target=lambda: out.append(head + f.read() == ref)) for _ in range(1)]
ts += [threading.Thread(target=lambda: out.append(m[:] == ref))]
ts += [threading.Thread(target=lambda: out.append(os.pread(g.fileno(), len(ref), 0) == ref))]
for t in ts: t.start()
for t in ts: t.join()
sys.exit(0 if out == [True] * 3 else 1)
PY
check "a reader (read, mmap, pread) keeps its bytes while its chunk is removed" \
    python3 "$T/hold.py" "$M/chunks/$h2.kv" "$T/two.kv" rm "$M/chunks/$h2.kv"
check "... and the chunk is gone for later opens" test ! -e "$M/chunks/$h2.kv"
h4=$(synth "$T/four.kv" --layers 30 --tokens 700 --kv-heads 3 --seed 4)
h5=$(synth "$T/five.kv" --layers 30 --tokens 700 --kv-heads 3 --seed 5)
cp "$T/four.kv" "$T/five.kv" "$M/incoming/"
check "a reader keeps its bytes while the RAM tier drops its image (two other 15 MiB chunks read)" \
    python3 "$T/hold.py" "$M/chunks/$h1.kv" "$T/one.kv" sh -c "cat '$M/chunks/$h4.kv' '$M/chunks/$h5.kv' > /dev/null"
check "... and it reads again after that" cmp "$T/one.kv" "$M/chunks/$h1.kv"
check "concurrent readers of one chunk (8 at once, each opens it)" sh -c "
    for i in 1 2 3 4 5 6 7 8; do cmp '$T/three.kv' '$M/chunks/$h3.kv' || echo bad & done | (! grep -q bad)"
check "daemon alive" kill -0 "$MNT_PID"
unmount_kvfs a

# eviction from the store: capacity for about two 11 MiB chunks; a reader
# holds the first while two more arrive and push it out (LRU)
mount_kvfs cap "passthrough=on,capacity=24M,ram=0,zstd=0" || exit 1
C=$T/cap.mnt
h6=$(synth "$T/six.kv" --layers 30 --tokens 500 --kv-heads 3 --seed 6)
h7=$(synth "$T/seven.kv" --layers 30 --tokens 500 --kv-heads 3 --seed 7)
cp "$T/two.kv" "$C/incoming/"
check "a reader keeps its bytes while its chunk is evicted from the store (capacity)" \
    python3 "$T/hold.py" "$C/chunks/$h2.kv" "$T/two.kv" cp "$T/six.kv" "$T/seven.kv" "$C/incoming/"
check "... it was evicted" sh -c "test ! -e '$C/chunks/$h2.kv' && test \"\$(python3 -c \"import json; print(json.load(open('$C/.kvfs/stats'))['evictions'])\")\" -ge 1"
unmount_kvfs cap

# passthrough=off: the same reads through the daemon
mount_kvfs a "passthrough=off,ram=16M" || exit 1
check ".kvfs/stats says reads go through the daemon (passthrough=off)" \
    sh -c "test \"\$(python3 -c \"import json; r=json.load(open('$M/.kvfs/stats'))['reads']; print(r['path'], r['why'])\")\" = 'daemon passthrough=off'"
check "cmp 64 MiB through the daemon" cmp "$T/three.kv" "$M/chunks/$h3.kv"
check "counted as a daemon open" test "$(reads "$M" daemon_opens)" -ge 1 -a "$(reads "$M" passthrough_opens)" -eq 0
check "... whose reads reached the daemon" test "$(reads "$M" daemon_read_requests)" -ge 64
unmount_kvfs a

# blend results: a blended file is backed the same way
if [ -s "$MODEL" ]; then
    mount_kvfs b "model=$MODEL,passthrough=on" || exit 1
    B=$T/b.mnt
    c1=$(license_chunk "$B" GPL-3 1500)
    c2=$(license_chunk "$B" Apache-2.0 1500)
    check "a blend through the mount" "$KVFSCTL" blend -M "$B" --name rag --suffix $'\nQuestion: which licenses?\nAnswer:' "$c1" "$c2"
    o0=$(reads "$B" passthrough_opens)
    check "the blend result reads (cp) and verifies" sh -c "cp '$B/blends/rag.kv' '$T/rag.kv' && '$KVFSCTL' info '$T/rag.kv' > /dev/null"
    check "... and its mmap equals its read" python3 -c "
import mmap, sys
with open(sys.argv[1], 'rb') as f, open(sys.argv[2], 'rb') as g:
    sys.exit(mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)[:] != g.read())" "$B/blends/rag.kv" "$T/rag.kv"
    check "both opens were passthrough" test "$(reads "$B" passthrough_opens)" -ge $((o0 + 2))
    unmount_kvfs b
    mount_kvfs b "model=$MODEL,passthrough=off" || exit 1
    "$KVFSCTL" blend -M "$B" --name rag --suffix $'\nQuestion: which licenses?\nAnswer:' "$c1" "$c2" > /dev/null
    check "passthrough off: a blend result still maps (direct_io with DIRECT_IO_ALLOW_MMAP) and equals its read" python3 -c "
import mmap, sys
with open(sys.argv[1], 'rb') as f, open(sys.argv[2], 'rb') as g:
    sys.exit(mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)[:] != g.read())" "$B/blends/rag.kv" "$T/rag.kv"
    unmount_kvfs b
else
    echo "note: $MODEL missing: blend results not checked"
fi
finish
