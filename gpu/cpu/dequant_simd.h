/* dequant_simd.h - ggml blocks decoded to f32 in AVX2 registers: the same
 * values, bit for bit, as kvfs_ggml_dequantize (gpu/ggml/quant.c, the
 * definition; test_qmm compares the two on random blocks).  The CPU backend
 * decodes a weight's rows into f32 tiles for sgemm once per product; a
 * blend's products are short (a sixth of a prefill's rows), so the scalar
 * decode was 5-8% of a blend's time. */
#ifndef KVFS_DEQUANT_SIMD_H
#define KVFS_DEQUANT_SIMD_H

#include <stddef.h>
#include <stdint.h>

/* n values (a whole number of blocks) of ggml type `type` at src into dst:
 * 0; -EINVAL when n is not a whole number of blocks; -ENOTSUP where this
 * build has no SIMD decoder for the type (the caller then takes
 * kvfs_ggml_dequantize). */
int kvfs_dequant_simd(uint32_t type, const void *src, float *dst, size_t n);

#endif
