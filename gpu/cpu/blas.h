/* blas.h - OpenBLAS, loaded at run time so that kvfs picks the kernel.
 *
 * Debian's OpenBLAS 0.3.21 mis-detects some CPUs (a generic "Intel Xeon" or
 * "AMD EPYC" under KVM) and falls back to a slow kernel.  OpenBLAS reads its
 * core type once, when the library initialises, so kvfs sets it for its own
 * process just before dlopen(): KVFS_BLAS_CORE=NAME forces a core,
 * KVFS_BLAS_CORE=auto (default) picks by the kernels' ISA level: SkylakeX
 * for AVX-512, Sandybridge for AVX2 (Haswell's kernel is not
 * batch-invariant, blas.c), and for x86-64-v2 kvfs's own ordered product
 * (gemm_ordered.c) instead of OpenBLAS. */
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

/* Load once for the process's ISA level (thread-safe); 0 or -errno
 * (-ENOENT: no OpenBLAS installed). */
int kvfs_blas_load(int level, const struct kvfs_blas **out);
/* the kernel loaded (OpenBLAS core name, "kvfs-ordered"), or "not loaded" */
const char *kvfs_blas_core(void);

/* cblas_sgemm's contract for row-major C = alpha A B (B or B^T) + beta C,
 * each element's products added in k order, one rounding each: a row's
 * values never depend on the rows or columns beside it (gemm_ordered.c) */
void kvfs_sgemm_ordered(const enum CBLAS_ORDER order, const enum CBLAS_TRANSPOSE ta,
                        const enum CBLAS_TRANSPOSE tb, const int m, const int n, const int k, const float alpha,
                        const float *a, const int lda, const float *b, const int ldb, const float beta, float *c,
                        const int ldc);

#endif
