/* test_cuda_decode.c - the CUDA backend's weight decoder (gpu/cuda/quant_cuda.cu,
 * kq_value: the one function every encoded product and embedding row reads
 * through) run on the host, against the CPU's decoder (gpu/ggml/quant.c)
 * bit for bit, for every type the device keeps encoded, over random blocks
 * with random finite scales.  No GPU needed: the device compiles the same
 * source with the same unfused operations.  Exit 77 without nvcc. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef KVFS_HAVE_CUDA /* without nvcc (and in the sanitizer builds) only the skip below */
#include "check.h"
#include "ggml_quant.h"
#include "kvformat.h"
#include "quant_cuda.h"

static uint64_t rs = 77;
static uint32_t rnd(void)
{
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rs >> 33);
}
#endif

int main(void)
{
#ifndef KVFS_HAVE_CUDA
    printf("skip: built without CUDA (no nvcc)\n");
    return 77;
#else
    static const uint32_t types[] = {KVFS_GGML_Q4_0, KVFS_GGML_Q4_1, KVFS_GGML_Q5_0, KVFS_GGML_Q5_1,
                                     KVFS_GGML_Q8_0, KVFS_GGML_Q4_K, KVFS_GGML_Q5_K, KVFS_GGML_Q6_K,
                                     KVFS_GGML_MXFP4};
    const int n_cols = 1024, n_rows = 16;
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
        uint32_t type = types[t], bytes = 0, per = (uint32_t)kq_block(type, &bytes);
        CHECK_EQ(per, kvfs_ggml_block_size(type));
        size_t rb = kvfs_ggml_row_size(type, n_cols), total = rb * n_rows;
        CHECK_EQ(rb, (size_t)n_cols / per * bytes);
        uint8_t *raw = malloc(total);
        float *ref = malloc(sizeof(float) * n_rows * n_cols);
        for (size_t i = 0; i < total; i++)
            raw[i] = (uint8_t)rnd();
        size_t d_at = type == KVFS_GGML_Q6_K ? 208 : 0;
        int two = type == KVFS_GGML_Q4_1 || type == KVFS_GGML_Q5_1 || type == KVFS_GGML_Q4_K || type == KVFS_GGML_Q5_K;
        /* MXFP4's scale is a byte: every one of them a scale (255: 2^127, its
         * products infinite on both sides), the random bytes as they are */
        for (size_t b = 0; b < total / bytes && type != KVFS_GGML_MXFP4; b++)
            for (int k = 0; k <= two; k++) { /* finite scales of either sign, over many binades */
                float v = (float)((int)(rnd() % 2001) - 1000) * (rnd() % 2 ? 1e-4f : 3e-6f);
                uint16_t h = kvfs_f32_to_f16(v);
                memcpy(raw + b * bytes + d_at + 2 * k, &h, 2);
            }
        CHECK_EQ(kvfs_ggml_dequantize_rows(type, raw, ref, n_rows, n_cols), 0);
        int bad = 0;
        for (int r = 0; r < n_rows; r++)
            for (int c = 0; c < n_cols; c++) {
                float got = kq_value_host(type, raw + r * rb, c), want = ref[r * n_cols + c];
                if (memcmp(&got, &want, sizeof(float)) && bad++ < 3)
                    fprintf(stderr, "%s row %d col %d: %.9g, the CPU %.9g\n", kvfs_ggml_type_name(type), r, c,
                            (double)got, (double)want);
            }
        printf("%-5s %d x %d: %d values differ\n", kvfs_ggml_type_name(type), n_rows, n_cols, bad);
        CHECK_EQ(bad, 0);
        /* the 8-at-a-time decoder of the f16 products */
        int bad8 = 0;
        for (int r = 0; r < n_rows; r++)
            for (int c = 0; c < n_cols; c += 8) {
                float got[8];
                kq_decode8_host(type, raw + r * rb, c, got);
                for (int j = 0; j < 8; j++)
                    if (memcmp(&got[j], &ref[r * n_cols + c + j], sizeof(float)) && bad8++ < 3)
                        fprintf(stderr, "%s row %d col %d (8 at a time): %.9g, the CPU %.9g\n",
                                kvfs_ggml_type_name(type), r, c + j, (double)got[j], (double)ref[r * n_cols + c + j]);
            }
        printf("%-5s %d x %d, 8 at a time: %d values differ\n", kvfs_ggml_type_name(type), n_rows, n_cols, bad8);
        CHECK_EQ(bad8, 0);
        free(raw);
        free(ref);
    }
    uint32_t bytes;
    CHECK_EQ(kq_block(KVFS_GGML_F16, &bytes), 0); /* types left to f32 weights */
    CHECK_EQ(kq_block(KVFS_GGML_Q8_K, &bytes), 0); /* an activation type, never a weight */
    CHECK_DONE();
#endif
}
