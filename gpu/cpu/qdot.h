/* qdot.h - the quantized dot kernels' side of a product (qdot.c): x rows
 * as 8-bit blocks, one weight row against up to QMM_GEMM_MIN_ROWS of them.
 * Built where the level has AVX2; matmul.c chooses among them. */
#ifndef KVFS_CPU_QDOT_H
#define KVFS_CPU_QDOT_H

#include <stdint.h>

#include "ggml_quant.h"
#include "level.h"
#include "q8k.h"

/* x rows a gemv kernel takes against one weight row (and below which a
 * product never decodes W into tiles) */
#define QMM_GEMM_MIN_ROWS 8


/* x rows as ggml's 8-bit activation blocks, quantized exactly as
 * cpu_act_quant does: per 32 values int8 q [row][in]; the f16-rounded scale
 * d and (as a float, exact) the sum of q (for the offsets of Q4_0, Q4_1,
 * Q5_0, Q5_1) by groups of QMM_GEMM_MIN_ROWS rows, [group][block][row in
 * group], zero past the last row: the gemv kernel scales a block's products
 * for all of a group's rows in one vector op */
struct q8x {
    int8_t *q;
    float *dt, *st;
};


static inline int q32_type(uint32_t type)
{
    return type == KVFS_GGML_Q4_0 || type == KVFS_GGML_Q4_1 || type == KVFS_GGML_Q5_0 || type == KVFS_GGML_Q5_1 ||
           type == KVFS_GGML_Q8_0;
}

static inline int qk_type(uint32_t type)
{
    return type == KVFS_GGML_Q4_K || type == KVFS_GGML_Q5_K || type == KVFS_GGML_Q6_K;
}

#ifdef __AVX2__
/* W row q (Q4_0, Q4_1, Q8_0) against n f32 x rows; 0 when the type has no kernel */
int dot_rows_avx2(uint32_t type, const uint8_t *q, const float *x, int in, int n, float *out);
/* x as 8-bit blocks of 32: made from f32 (0 or -ENOMEM), or recovered from
 * rows already rounded so (1, 0 when they are not, -ENOMEM) */
int q8x_make(const float *x, int n, int in, struct q8x *o);
int q8x_recover(const float *x, int n, int in, struct q8x *o);
void q8x_free(struct q8x *o);
/* W row q of a 32-block type against n <= QMM_GEMM_MIN_ROWS rows of x */
void dot_rows_q8(uint32_t type, const uint8_t *q, const struct q8x *x, int in, int n, float *out);
/* n rows as Q8_K blocks: quantized (quant) or recovered (*o NULL when not) */
int q8k_rows(const float *x, int n, int in, int quant, struct q8k **o);
/* W row q of a K-quant against n <= QMM_GEMM_MIN_ROWS Q8_K x rows */
void dot_rows_qk(uint32_t type, const uint8_t *q, const struct q8k *x, int nb, int n, float *out);
#endif

#endif
