/* sgemm.c - GFLOP/s of the BLAS path kvfs uses, on SmolLM2's shapes:
 * (n x 576) . (576 x 1536), and the max error against a double-precision
 * reference on sampled entries.  Usage: sgemm [n ...]
 * (KVFS_BLAS_CORE=Haswell|SkylakeX|Prescott picks the kernel, as in kvfs). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "backend.h"
#include "cpu/blas.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    const struct kvfs_blas *b;
    if (kvfs_cpu_level() < 0 || kvfs_blas_load(kvfs_cpu_level(), &b)) {
        fprintf(stderr, "no OpenBLAS\n");
        return 1;
    }
    printf("core %s\n", b->core);
    for (int a = 1; a < argc; a++) {
        int m = atoi(argv[a]), k = 576, n = 1536;
        float *A = malloc(sizeof(float) * m * k), *B = malloc(sizeof(float) * n * k), *C = malloc(sizeof(float) * m * n);
        srand(7);
        for (int i = 0; i < m * k; i++) A[i] = (float)rand() / RAND_MAX - 0.5f;
        for (int i = 0; i < n * k; i++) B[i] = (float)rand() / RAND_MAX - 0.5f;
        b->sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1, A, k, B, k, 0, C, n);
        double err = 0;
        for (int s = 0; s < 4096; s++) { /* sampled entries vs a double reference */
            int i = (int)((unsigned)s * 2654435761u % (unsigned)m), j = (int)((unsigned)s * 40503u % (unsigned)n);
            double ref = 0;
            for (int x = 0; x < k; x++)
                ref += (double)A[i * k + x] * B[j * k + x];
            double e = ref - C[i * n + j];
            if (e < 0) e = -e;
            if (e > err) err = e;
        }
        double best = 1e9;
        for (int r = 0; r < 5; r++) {
            double t = now();
            for (int it = 0; it < 5; it++)
                b->sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1, A, k, B, k, 0, C, n);
            t = (now() - t) / 5;
            if (t < best) best = t;
        }
        printf("n=%d %.1f GFLOP/s, max |error| vs double %.1e\n", m, 2.0 * m * n * k / best / 1e9, err);
        free(A); free(B); free(C);
    }
    return 0;
}
