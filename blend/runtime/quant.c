/* quant.c - ggml tensor types: row sizes and dequantization to f32.
 * Block layouts (32 elements per block):
 *   Q4_0: f16 d, 16 bytes of nibbles; x = (q - 8) * d
 *   Q4_1: f16 d, f16 m, 16 bytes of nibbles; x = q * d + m
 *   Q8_0: f16 d, 32 int8; x = q * d
 * Low nibbles hold elements 0..15 of a block, high nibbles 16..31. */
#include <errno.h>
#include <string.h>

#include "gguf.h"
#include "kvformat.h"

static float f16(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return kvfs_f16_to_f32(h);
}

uint64_t kvfs_ggml_row_size(uint32_t type, uint64_t n)
{
    switch (type) {
    case KVFS_GGML_F32: return 4 * n;
    case KVFS_GGML_F16: case KVFS_GGML_BF16: return 2 * n;
    case KVFS_GGML_Q4_0: return n % 32 ? 0 : n / 32 * 18;
    case KVFS_GGML_Q4_1: return n % 32 ? 0 : n / 32 * 20;
    case KVFS_GGML_Q8_0: return n % 32 ? 0 : n / 32 * 34;
    default: return 0;
    }
}

int kvfs_ggml_dequantize(uint32_t type, const void *src, float *dst, uint64_t n)
{
    const uint8_t *s = src;
    switch (type) {
    case KVFS_GGML_F32:
        memcpy(dst, s, 4 * n);
        return 0;
    case KVFS_GGML_F16:
        for (uint64_t i = 0; i < n; i++)
            dst[i] = f16(s + 2 * i);
        return 0;
    case KVFS_GGML_BF16:
        for (uint64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            dst[i] = kvfs_bf16_to_f32(h);
        }
        return 0;
    case KVFS_GGML_Q4_0:
    case KVFS_GGML_Q4_1:
    case KVFS_GGML_Q8_0:
        break;
    default:
        return -ENOTSUP;
    }
    if (n % 32)
        return -EINVAL;
    for (uint64_t b = 0; b < n / 32; b++, dst += 32) {
        if (type == KVFS_GGML_Q8_0) {
            const uint8_t *blk = s + b * 34;
            float d = f16(blk);
            for (int i = 0; i < 32; i++)
                dst[i] = (float)(int8_t)blk[2 + i] * d;
        } else if (type == KVFS_GGML_Q4_0) {
            const uint8_t *blk = s + b * 18;
            float d = f16(blk);
            for (int i = 0; i < 16; i++) {
                dst[i] = (float)((blk[2 + i] & 0x0f) - 8) * d;
                dst[i + 16] = (float)((blk[2 + i] >> 4) - 8) * d;
            }
        } else {
            const uint8_t *blk = s + b * 20;
            float d = f16(blk), m = f16(blk + 2);
            for (int i = 0; i < 16; i++) {
                dst[i] = (float)(blk[4 + i] & 0x0f) * d + m;
                dst[i + 16] = (float)(blk[4 + i] >> 4) * d + m;
            }
        }
    }
    return 0;
}
