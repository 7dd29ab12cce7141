/* sgemm.c - GFLOP/s of the BLAS path kvfs uses, on SmolLM2's shapes:
 * (n x 576) . (576 x 1536).  Usage: sgemm [n ...] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "blas.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    const struct kvfs_blas *b;
    if (kvfs_blas_load(&b)) {
        fprintf(stderr, "no OpenBLAS\n");
        return 1;
    }
    printf("core %s\n", b->core);
    for (int a = 1; a < argc; a++) {
        int m = atoi(argv[a]), k = 576, n = 1536;
        float *A = malloc(sizeof(float) * m * k), *B = malloc(sizeof(float) * n * k), *C = malloc(sizeof(float) * m * n);
        for (int i = 0; i < m * k; i++) A[i] = (float)(i % 7) * 0.1f;
        for (int i = 0; i < n * k; i++) B[i] = (float)(i % 5) * 0.1f;
        b->sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1, A, k, B, k, 0, C, n);
        double best = 1e9;
        for (int r = 0; r < 5; r++) {
            double t = now();
            for (int it = 0; it < 5; it++)
                b->sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1, A, k, B, k, 0, C, n);
            t = (now() - t) / 5;
            if (t < best) best = t;
        }
        printf("n=%d %.1f GFLOP/s\n", m, 2.0 * m * n * k / best / 1e9);
        free(A); free(B); free(C);
    }
    return 0;
}
