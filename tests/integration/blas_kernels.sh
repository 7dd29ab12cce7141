#!/bin/bash
# Batch invariance under every OpenBLAS kernel kvfs picks (gpu/blas.c) that
# this CPU runs, not only its own: SkylakeX on AVX-512 CPUs, Sandybridge on
# other AVX ones (AVX2 included).  A CI machine with AVX-512 thus checks what
# an AVX2 one computes: prefills split in two equal one call bit for bit
# (test_forward), a blend at ratio 1 equals a full prefill (test_blend).
. "$(dirname "$0")/../lib.sh"
flags=$(grep -m1 '^flags' /proc/cpuinfo)
has() { [[ " $flags " == *" $1 "* ]]; }
cores=()
has avx512f && has avx512dq && has avx512bw && has avx512vl && cores+=(SkylakeX)
has avx && cores+=(Sandybridge)
[ ${#cores[@]} -gt 0 ] || skip "no AVX: OpenBLAS picks the kernel itself"
for core in "${cores[@]}"; do
    for t in test_forward test_blend; do
        check "$t with KVFS_BLAS_CORE=$core" sh -c \
            "KVFS_BLAS_CORE=$core '$BUILD/tests/$t' > '$T/$t.$core.log' 2>&1 || { tail -n 20 '$T/$t.$core.log'; exit 1; }"
    done
done
finish
