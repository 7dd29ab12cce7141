/* gemm_ordered.c - the matrix product x86-64-v2 runs (blas.h): every
 * element's k products added in order from zero, each rounded (no FMA), so
 * an element's bits depend on its row of A and column of B alone: the batch
 * invariance the blend's exactness rests on, for any shape.  OpenBLAS's SSE
 * kernels split and interleave k by tile shape.  SSE2 only (every x86-64):
 * 4 rows x 8 columns of C in registers, B packed 8 columns at a time. */
#include <emmintrin.h>
#include <stdlib.h>
#include <string.h>

#include "blas.h"

#define NC 8

/* rows [i0, i0 + R) of C's 8 columns from j0 (nj of them real) */
#define ORDERED_TILE(R)                                                                                        \
    static void tile_##R(int k, float alpha, const float *a, int lda, const float *bp, float beta, float *c,     \
                         int ldc, int nj)                                                                        \
    {                                                                                                            \
        __m128 lo[R], hi[R];                                                                                     \
        for (int r = 0; r < R; r++)                                                                              \
            lo[r] = hi[r] = _mm_setzero_ps();                                                                    \
        for (int kk = 0; kk < k; kk++) {                                                                         \
            __m128 b0 = _mm_load_ps(bp + (size_t)kk * NC), b1 = _mm_load_ps(bp + (size_t)kk * NC + 4);          \
            for (int r = 0; r < R; r++) {                                                                        \
                __m128 av = _mm_set1_ps(a[(size_t)r * lda + kk]);                                                \
                lo[r] = _mm_add_ps(lo[r], _mm_mul_ps(av, b0));                                                   \
                hi[r] = _mm_add_ps(hi[r], _mm_mul_ps(av, b1));                                                   \
            }                                                                                                    \
        }                                                                                                        \
        float out[NC] __attribute__((aligned(16)));                                                              \
        for (int r = 0; r < R; r++) {                                                                            \
            _mm_store_ps(out, _mm_mul_ps(lo[r], _mm_set1_ps(alpha)));                                            \
            _mm_store_ps(out + 4, _mm_mul_ps(hi[r], _mm_set1_ps(alpha)));                                        \
            float *cr = c + (size_t)r * ldc;                                                                     \
            for (int j = 0; j < nj; j++)                                                                         \
                cr[j] = beta == 0.0f ? out[j] : out[j] + beta * cr[j];                                           \
        }                                                                                                        \
    }
ORDERED_TILE(4)
ORDERED_TILE(1)

void kvfs_sgemm_ordered(const enum CBLAS_ORDER order, const enum CBLAS_TRANSPOSE ta,
                        const enum CBLAS_TRANSPOSE tb, const int m, const int n, const int k, const float alpha,
                        const float *a, const int lda, const float *b, const int ldb, const float beta, float *c,
                        const int ldc)
{
    /* the only forms the backend calls: row-major, A as is */
    if (order != CblasRowMajor || ta != CblasNoTrans || m <= 0 || n <= 0)
        return;
    if (k <= 0) {
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++)
                c[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[(size_t)i * ldc + j];
        return;
    }
    float *bp = aligned_alloc(16, sizeof(float) * NC * (size_t)k);
    if (!bp) { /* no memory for the panel: element by element, the same sums */
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                float acc = 0.0f;
                for (int kk = 0; kk < k; kk++)
                    acc += a[(size_t)i * lda + kk] *
                           (tb == CblasTrans ? b[(size_t)j * ldb + kk] : b[(size_t)kk * ldb + j]);
                float *cij = c + (size_t)i * ldc + j;
                *cij = beta == 0.0f ? acc * alpha : acc * alpha + beta * *cij;
            }
        return;
    }
    for (int j0 = 0; j0 < n; j0 += NC) {
        int nj = n - j0 < NC ? n - j0 : NC;
        for (int kk = 0; kk < k; kk++)
            for (int j = 0; j < NC; j++)
                bp[(size_t)kk * NC + j] = j >= nj ? 0.0f
                                          : tb == CblasTrans ? b[(size_t)(j0 + j) * ldb + kk]
                                                             : b[(size_t)kk * ldb + j0 + j];
        int i = 0;
        for (; i + 4 <= m; i += 4)
            tile_4(k, alpha, a + (size_t)i * lda, lda, bp, beta, c + (size_t)i * ldc + j0, ldc, nj);
        for (; i < m; i++)
            tile_1(k, alpha, a + (size_t)i * lda, lda, bp, beta, c + (size_t)i * ldc + j0, ldc, nj);
    }
    free(bp);
}
