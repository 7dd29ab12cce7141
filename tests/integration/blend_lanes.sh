#!/bin/bash
# Blend lanes (what runs blends at once on a backend that is not thread_safe,
# CUDA): with KVFS_BLEND_LANES=1 the CPU daemon takes the same path, each job
# slot a lane of its own (the model, or a view of it on a context of its
# own), so this runs on every machine; on a GPU tests/gpu/blend_mount_cuda.sh
# does it on CUDA.  Eight blends at once through the mount with
# blend_jobs=4: each equals the CPU's in-process blend bit for bit, and
# several ran at once.
. "$(dirname "$0")/../lib.sh"
MODEL=$KVFS_ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -s "$MODEL" ]; then # no real model here: a synthetic one of our own
    MODEL=$T/synth.gguf
    "$KVFSCTL" mkmodel -o "$MODEL" --layers 4 --embd 256 --heads 4 --kv-heads 2 --ff 512 || exit 1
fi
KVFS_BLEND_LANES=1 mount_kvfs c "model=$MODEL,blend_jobs=4" || exit 1
C=$T/c.mnt
check "the daemon made 4 lanes for blend_jobs=4" grep -q "4 contexts (streams) for blends at once" "$T/c.log"
license_chunks "$C" 1200 Apache-2.0 GPL-3 MPL-2.0
check "three chunks prefilled into the mount" test -n "${h[3]}"
Q=$'\nQuestion: Which of these licenses is the shortest?\nAnswer:'
blends_at_once "$C" "$C/chunks" 0
finish
