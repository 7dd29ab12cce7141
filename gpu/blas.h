/* blas.h - OpenBLAS, loaded at run time so that kvfs picks the kernel.
 *
 * Debian's OpenBLAS 0.3.21 mis-detects some CPUs (a generic "Intel Xeon" or
 * "AMD EPYC" under KVM) and falls back to a slow kernel.  OpenBLAS reads its
 * core type once, when the library initialises, so kvfs sets it for its own
 * process just before dlopen(): KVFS_BLAS_CORE=NAME forces a core,
 * KVFS_BLAS_CORE=auto (default) picks SkylakeX on AVX-512 CPUs, Sandybridge
 * on other AVX ones (AVX2 included: Haswell's kernel is not batch-invariant,
 * blas.c), and leaves OpenBLAS's own detection otherwise. */
#ifndef KVFS_BLAS_H
#define KVFS_BLAS_H

#include <cblas.h>

struct kvfs_blas {
    void (*sgemm)(const enum CBLAS_ORDER, const enum CBLAS_TRANSPOSE, const enum CBLAS_TRANSPOSE,
                  const int m, const int n, const int k, const float alpha, const float *a, const int lda,
                  const float *b, const int ldb, const float beta, float *c, const int ldc);
    void (*set_num_threads)(int);
    const char *core; /* as OpenBLAS reports it */
};

/* Load once (thread-safe); 0 or -errno (-ENOENT: no OpenBLAS installed). */
int kvfs_blas_load(const struct kvfs_blas **out);

#endif
