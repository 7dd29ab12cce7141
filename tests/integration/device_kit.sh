#!/bin/bash
# The GPU device kit cannot rot between GPUs: tools/build-device-kit.sh builds
# it (every CUDA binary, portable x86-64-v3, within the device tool's size)
# and bench/device.sh's dry run finds it complete and loadable; a kit missing
# its CUDA plugin fails that dry run.  Skips where kvfs is built without CUDA (no
# nvcc; the sanitizer builds).
. "$(dirname "$0")/../lib.sh"
[ -e "$BUILD/libkvfs-cuda.so" ] || skip "built without CUDA"
KIT=${KVFS_KIT:-$KVFS_ROOT/build-kit-test} # not build-gpu/: a kit built for a GPU run stays as it is
check "tools/build-device-kit.sh builds the kit" sh -c "KIT='$KIT' JOBS=2 '$KVFS_ROOT/tools/build-device-kit.sh' > '$T/kit.log' 2>&1"
tail -n 3 "$T/kit.log"
KIT=$KIT OUT=$T/out bash "$KVFS_ROOT/bench/device.sh" --dry-run > "$T/dry.log" 2>&1
rc=$?
cat "$T/dry.log"
check "bench/device.sh --dry-run finds the kit complete (exit 77: no GPU work here, rc $rc)" \
    sh -c "[ $rc = 77 ] && grep -q 'the kit is complete and loads' '$T/dry.log'"
cp -r "$KIT" "$T/broken"
rm "$T/broken/libkvfs-cuda.so"
KIT=$T/broken OUT=$T/out2 bash "$KVFS_ROOT/bench/device.sh" --dry-run > "$T/broken.log" 2>&1
rc=$?
check "... and a kit without its CUDA plugin fails it (rc $rc): $(grep -m1 FAIL "$T/broken.log" | cut -c1-120)" \
    sh -c "[ $rc = 1 ] && grep -q 'libkvfs-cuda.so' '$T/broken.log'"
finish
