/* ggml_quant.h - ggml's tensor types and their encodings: block sizes, row
 * sizes, decoding to f32 and the 8-bit activation roundings llama.cpp's CPU
 * backend multiplies by, bit for bit as ggml (quant.c).  The leaf of the
 * compute layer: the backends and the model runtime build on it. */
#ifndef KVFS_GGML_QUANT_H
#define KVFS_GGML_QUANT_H

#include <stdint.h>

/* ggml tensor types we know (values as in ggml.h); Q8_1 and Q8_K only as
 * activation types (the backends' act_quant) */
enum kvfs_ggml_type {
    KVFS_GGML_F32 = 0, KVFS_GGML_F16 = 1, KVFS_GGML_Q4_0 = 2, KVFS_GGML_Q4_1 = 3,
    KVFS_GGML_Q5_0 = 6, KVFS_GGML_Q5_1 = 7, KVFS_GGML_Q8_0 = 8, KVFS_GGML_Q8_1 = 9,
    KVFS_GGML_Q4_K = 12, KVFS_GGML_Q5_K = 13, KVFS_GGML_Q6_K = 14, KVFS_GGML_Q8_K = 15,
    KVFS_GGML_BF16 = 30, KVFS_GGML_MXFP4 = 39,
};

/* Tensor types kvfs decodes: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
 * Q4_K, Q5_K, Q6_K, MXFP4, exactly as ggml's dequantize_row_* (bit for bit). */
/* Elements per block of a type (1 for F32/F16/BF16, 32, 256); 0 if unsupported. */
uint32_t kvfs_ggml_block_size(uint32_t type);
/* Size in bytes of n elements of a ggml type; 0 if the type is unsupported or
 * n not a multiple of its block. */
uint64_t kvfs_ggml_row_size(uint32_t type, uint64_t n);
/* ggml's name of any ggml type ("Q4_K"), "unknown" for an unassigned value. */
const char *kvfs_ggml_type_name(uint32_t type);
/* Dequantize n elements (a multiple of the block size) to f32: -ENOTSUP for a
 * type we cannot decode, -EINVAL for n not a multiple of its block. */
int kvfs_ggml_dequantize(uint32_t type, const void *src, float *dst, uint64_t n);
/* Rows [0, n_rows) of n_cols elements each, stored back to back at src
 * (kvfs_ggml_row_size(type, n_cols) bytes apart), into dst[n_rows][n_cols]:
 * e.g. a tile of a weight's rows.  Errors as kvfs_ggml_dequantize's. */
int kvfs_ggml_dequantize_rows(uint32_t type, const void *src, float *dst, uint64_t n_rows, uint64_t n_cols);
/* Activations x[n] quantized to the 8-bit blocks llama.cpp's CPU backend
 * multiplies a quantized weight by (type Q8_0 or Q8_1: 32 values a block,
 * Q8_K: 256) and decoded again, bit for bit as ggml on x86; y may equal x.
 * -ENOTSUP for another type, -EINVAL for n not a multiple of the block. */
int kvfs_ggml_act_roundtrip(uint32_t type, const float *x, float *y, uint64_t n);
/* 256 activations as ggml's quantize_row_q8_K: q and the block's scale d
 * (x ~ d * q); what kvfs_ggml_act_roundtrip(Q8_K) rounds through, and what
 * the CPU backend's integer K-quant kernels multiply */
void kvfs_ggml_quantize_q8_k(const float *x, int8_t q[256], float *d);

#endif
