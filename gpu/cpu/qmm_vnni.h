/* qmm_vnni.h - K-quant weights times many x rows with AVX-512 VNNI: the
 * prefill's products on big quantized models. */
#ifndef KVFS_QMM_VNNI_H
#define KVFS_QMM_VNNI_H

#include <stddef.h>
#include <stdint.h>

#include "q8k.h"

/* 1 when this build has the kernels and `type` (a ggml type id) is one of
 * them: Q4_K, Q5_K, Q6_K */
int kvfs_qmm_vnni_has(uint32_t type);

/* y[i * ldy + r] = W row r . x row i for r in [r0, r1), i < n: W's rows of
 * row_bytes in their ggml encoding, x as n rows of nb Q8_K blocks.  r0 a
 * multiple of 16.  0 or -ENOMEM / -ENOTSUP. */
int kvfs_qmm_vnni(uint32_t type, const uint8_t *w, size_t row_bytes, int r0, int r1, const struct q8k *x, int nb,
                  int n, float *y, size_t ldy);

/* The same for few x rows (decoding), one W row at a time: Q4_K and Q6_K.
 * Each x row's results do not depend on the others. */
int kvfs_qmm_vnni_gemv_has(uint32_t type);
int kvfs_qmm_vnni_gemv(uint32_t type, const uint8_t *w, size_t row_bytes, int r0, int r1, const struct q8k *x,
                       int nb, int n, float *y, size_t ldy);

#endif
