/* half.h - IEEE half (f16) and bfloat16 conversions, rounding to nearest
 * even: the chunk format's element types (kvformat.h) and the block codecs'
 * scales (kvquant.h) both use them, so they sit below both. */
#ifndef KVFS_HALF_H
#define KVFS_HALF_H

#include <stddef.h>
#include <stdint.h>

uint16_t kvfs_f32_to_f16(float f);
/* n conversions at once (F16C where the CPU has it; the same rounding) */
void kvfs_f32_to_f16_n(const float *src, uint16_t *dst, size_t n);
float kvfs_f16_to_f32(uint16_t h);
uint16_t kvfs_f32_to_bf16(float f);
float kvfs_bf16_to_f32(uint16_t h);

#endif
