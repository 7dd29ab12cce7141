#!/bin/bash
# The daemon on the GPU (-o backend=cuda): a blend requested through the mount
# runs on CUDA, and the blended file gives the same greedy tokens as the CPU
# reference's in-process blend of the same chunks; its K/V agree with the
# CPU's within float tolerance.  Skips (77) without a GPU or FUSE.
. "$(dirname "$0")/../lib.sh"
nvidia-smi -L >/dev/null 2>&1 || skip "no NVIDIA GPU"
MODEL=$KVFS_ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -s "$MODEL" ]; then # no real model here: a synthetic one of our own
    MODEL=$T/synth.gguf
    "$KVFSCTL" mkmodel -o "$MODEL" --layers 6 --embd 256 --heads 4 --kv-heads 2 --ff 512 || exit 1
fi
mount_kvfs a "model=$MODEL,backend=cuda" || exit 1
M=$T/a.mnt
check "the daemon loaded the model on the CUDA backend" grep -q "backend cuda" "$T/a.log"
license_chunks "$M" 1200 Apache-2.0 GPL-3 MPL-2.0
check "three chunks prefilled into the mount" test -n "${h[3]}"
Q=$'\nQuestion: Which of these licenses is the shortest?\nAnswer:'
out=$("$KVFSCTL" blend -M "$M" --name rag --ratio 0.15 --suffix "$Q" ${h[1]} ${h[2]} ${h[3]})
check "kvfsctl blend through the CUDA daemon prints the blended file" test "$out" = "$M/blends/rag.kv"
check "the blended file verifies" sh -c "'$KVFSCTL' info '$M/blends/rag.kv' > /dev/null"
"$KVFSCTL" blend --local -m "$MODEL" -o "$T/cpu.kv" --ratio 0.15 --suffix "$Q" \
    "$M/chunks/${h[1]}.kv" "$M/chunks/${h[2]}.kv" "$M/chunks/${h[3]}.kv" 2>/dev/null
g1=$("$KVFSCTL" generate -m "$MODEL" --kv "$M/blends/rag.kv" -n 8 --ids 2>/dev/null)
g2=$("$KVFSCTL" generate -m "$MODEL" --kv "$T/cpu.kv" -n 8 --ids 2>/dev/null)
check "greedy tokens from the CUDA blend ($g1) == from the CPU blend" test -n "$g1" -a "$g1" = "$g2"
# K/V of two files: normalized error of the f16 payload as floats
kv_err() {
python3 - "$1" "$2" <<'PY'
import struct, sys
a = open(sys.argv[1], 'rb').read(); b = open(sys.argv[2], 'rb').read()
hs = struct.unpack_from('<I', a, 12)[0]  # header_size (kvfs(5)): layer data follows
if len(a) != len(b) or hs != struct.unpack_from('<I', b, 12)[0]:
    print("nan"); sys.exit()
num = den = 0.0
for (p,), (q,) in zip(struct.iter_unpack('<e', a[hs:]), struct.iter_unpack('<e', b[hs:])):
    num += (p - q) * (p - q)
    den += p * p
print("%.3e" % ((num / den) ** 0.5 if den else 0.0))
PY
}
err=$(kv_err "$M/blends/rag.kv" "$T/cpu.kv")
check "blended K/V on CUDA vs CPU: normalized error $err <= 1e-2" python3 -c "import sys; sys.exit(0 if float('$err') <= 1e-2 else 1)"
# blend_jobs=4: blends at once on CUDA, each on a context of its own (its
# stream and cuBLAS handle; kvfs_model_view), each as the CPU blends it
mount_kvfs c "model=$MODEL,backend=cuda,blend_jobs=4" || exit 1
C=$T/c.mnt
check "the daemon made 4 CUDA contexts for blend_jobs=4" grep -q "4 contexts (streams) for blends at once" "$T/c.log"
cp "$M/chunks/${h[1]}.kv" "$M/chunks/${h[2]}.kv" "$M/chunks/${h[3]}.kv" "$C/chunks/"
blends_at_once "$C" "$M/chunks" 0.01 greedy
# chunks from the disk tier (ram=0) on CUDA: read O_DIRECT into page-locked
# loader buffers (KVFS_PIN_LOADER=1: layers go to the device by DMA from
# where they landed), and read buffered, unlocked (staged): each blend as
# the CPU's
for mode in "direct 1" "buffered 0"; do
    set -- $mode
    export KVFS_PIN_LOADER=$2
    mount_kvfs "d$2" "model=$MODEL,backend=cuda,ram=0,cold_reads=$1" || exit 1
    unset KVFS_PIN_LOADER
    D=$T/d$2.mnt
    dio=$(direct_io_ok "$T/d$2.store")
    [ "$1" = direct ] && want=$((3 * dio)) || want=0
    cp "$M/chunks/${h[1]}.kv" "$M/chunks/${h[2]}.kv" "$M/chunks/${h[3]}.kv" "$D/chunks/"
    "$KVFSCTL" blend -M "$D" --name disk --ratio 0.15 --suffix "$Q" ${h[1]} ${h[2]} ${h[3]} > /dev/null
    nd=$(python3 -c "import json; print(json.load(open('$D/.kvfs/stats'))['blends']['last']['chunks_direct'])")
    check "cold_reads=$1, loader locked $2: the blend read $nd chunks O_DIRECT (expected $want)" test "$nd" = "$want"
    err=$(kv_err "$D/blends/disk.kv" "$T/cpu.kv")
    check "... its K/V vs the CPU's blend: normalized error $err <= 1e-2" \
        python3 -c "import sys; sys.exit(0 if float('$err') <= 1e-2 else 1)"
    g3=$("$KVFSCTL" generate -m "$MODEL" --kv "$D/blends/disk.kv" -n 8 --ids 2>/dev/null)
    check "... greedy tokens ($g3) == the CPU blend's" test -n "$g3" -a "$g3" = "$g2"
    unmount_kvfs "d$2"
done
finish
