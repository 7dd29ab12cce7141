/* quant.c - ggml tensor types: row sizes and dequantization to f32, value
 * for value what ggml's dequantize_row_* compute (the same float operations
 * in the same order; -std=c11 keeps GCC from fusing them into FMAs).
 *
 * Blocks of 32 elements:
 *   Q4_0: f16 d, 16 bytes of nibbles; x = (q - 8) * d
 *   Q4_1: f16 d, f16 m, 16 bytes of nibbles; x = q * d + m
 *   Q5_0: f16 d, u32 qh (5th bits), 16 bytes of nibbles; x = (q - 16) * d
 *   Q5_1: f16 d, f16 m, u32 qh, 16 bytes of nibbles; x = q * d + m
 *   Q8_0: f16 d, 32 int8; x = q * d
 *   MXFP4: u8 e (E8M0 exponent), 16 bytes of nibbles (FP4 E2M1 codes);
 *          x = fp4[q] * 2^(e - 128) (fp4: ggml's table of twice the E2M1
 *          values, hence the half scale); gpt-oss's experts
 * Low nibbles hold elements 0..15 of a block, high nibbles 16..31; element
 * j's 5th bit is bit j of qh.
 *
 * Super-blocks of 256 elements (the K-quants):
 *   Q4_K: f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128 bytes of
 *         nibbles; 8 sub-blocks of 32: x = d*sc * q - dmin*m
 *   Q5_K: as Q4_K plus 32 bytes qh before the nibbles (5th bits)
 *   Q6_K: 128 bytes ql (low 4 bits), 64 bytes qh (2 high bits), 16 int8
 *         scales, f16 d; 16 sub-blocks of 16: x = d*sc * (q - 32)
 * In Q4_K/Q5_K, 64 elements share 32 nibble bytes: low nibbles the first
 * sub-block, high nibbles the second. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "ggml_quant.h"
#include "kvformat.h"

static float f16(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return kvfs_f16_to_f32(h);
}

/* elements and bytes per block; 0 for a type we cannot decode */
static uint32_t block_of(uint32_t type, uint32_t *bytes)
{
    switch (type) {
    case KVFS_GGML_F32: *bytes = 4; return 1;
    case KVFS_GGML_F16: case KVFS_GGML_BF16: *bytes = 2; return 1;
    case KVFS_GGML_Q4_0: *bytes = 18; return 32;
    case KVFS_GGML_Q4_1: *bytes = 20; return 32;
    case KVFS_GGML_Q5_0: *bytes = 22; return 32;
    case KVFS_GGML_Q5_1: *bytes = 24; return 32;
    case KVFS_GGML_Q8_0: *bytes = 34; return 32;
    case KVFS_GGML_MXFP4: *bytes = 17; return 32;
    case KVFS_GGML_Q4_K: *bytes = 144; return 256;
    case KVFS_GGML_Q5_K: *bytes = 176; return 256;
    case KVFS_GGML_Q6_K: *bytes = 210; return 256;
    default: *bytes = 0; return 0;
    }
}

uint32_t kvfs_ggml_block_size(uint32_t type)
{
    uint32_t bytes;
    return block_of(type, &bytes);
}

uint64_t kvfs_ggml_row_size(uint32_t type, uint64_t n)
{
    uint32_t bytes, elems = block_of(type, &bytes);
    return elems && n % elems == 0 ? n / elems * bytes : 0;
}

const char *kvfs_ggml_type_name(uint32_t type)
{
    /* ggml.h's enum ggml_type; NULL: a removed or unassigned value */
    static const char *const names[] = {
        "F32", "F16", "Q4_0", "Q4_1", NULL, NULL, "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K", "Q3_K", "Q4_K",
        "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS",
        "I8", "I16", "I32", "I64", "F64", "IQ1_M", "BF16", NULL, NULL, NULL, "TQ1_0", "TQ2_0", NULL, NULL, NULL,
        "MXFP4", "NVFP4", "Q1_0", "Q2_0",
    };
    return type < sizeof(names) / sizeof(names[0]) && names[type] ? names[type] : "unknown";
}

/* the 6-bit scale and min of sub-block j of a Q4_K/Q5_K super-block: j < 4
 * in the low bits of bytes j and j + 4, the others split between the
 * nibbles of bytes j + 4 and the top two bits of bytes j - 4 and j */
static void scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

static void dequant_q5(const uint8_t *blk, float *y, int has_min)
{
    float d = f16(blk), m = has_min ? f16(blk + 2) : 0.0f;
    const uint8_t *qhp = blk + (has_min ? 4 : 2), *qs = qhp + 4;
    uint32_t qh = (uint32_t)qhp[0] | (uint32_t)qhp[1] << 8 | (uint32_t)qhp[2] << 16 | (uint32_t)qhp[3] << 24;
    for (int j = 0; j < 16; j++) {
        int x0 = (qs[j] & 0x0f) | (int)((qh >> j) << 4 & 0x10);
        int x1 = (qs[j] >> 4) | (int)((qh >> (j + 12)) & 0x10);
        if (has_min) {
            y[j] = (float)x0 * d + m;
            y[j + 16] = (float)x1 * d + m;
        } else {
            y[j] = (float)(x0 - 16) * d;
            y[j + 16] = (float)(x1 - 16) * d;
        }
    }
}

/* Q4_K, or Q5_K (five: its qh bits) */
static void dequant_q45k(const uint8_t *blk, float *y, int five)
{
    float d = f16(blk), dmin = f16(blk + 2);
    const uint8_t *scales = blk + 4, *qh = five ? blk + 16 : NULL, *q = blk + (five ? 48 : 16);
    for (int j = 0; j < 4; j++, q += 32, y += 64) {
        uint8_t sc, m;
        scale_min_k4(2 * j, scales, &sc, &m);
        float d1 = d * (float)sc, m1 = dmin * (float)m;
        scale_min_k4(2 * j + 1, scales, &sc, &m);
        float d2 = d * (float)sc, m2 = dmin * (float)m;
        for (int l = 0; l < 32; l++) {
            int hi0 = qh && (qh[l] >> (2 * j) & 1) ? 16 : 0, hi1 = qh && (qh[l] >> (2 * j + 1) & 1) ? 16 : 0;
            y[l] = d1 * (float)((q[l] & 0x0f) + hi0) - m1;
            y[l + 32] = d2 * (float)((q[l] >> 4) + hi1) - m2;
        }
    }
}

static void dequant_q6k(const uint8_t *blk, float *y)
{
    const uint8_t *ql = blk, *qh = blk + 128;
    const int8_t *sc = (const int8_t *)(blk + 192);
    float d = f16(blk + 208);
    for (int h = 0; h < 2; h++, ql += 64, qh += 32, sc += 8, y += 128) {
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = ((ql[l] & 0x0f) | ((qh[l] >> 0 & 3) << 4)) - 32;
            int q2 = ((ql[l + 32] & 0x0f) | ((qh[l] >> 2 & 3) << 4)) - 32;
            int q3 = ((ql[l] >> 4) | ((qh[l] >> 4 & 3) << 4)) - 32;
            int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6 & 3) << 4)) - 32;
            y[l] = d * (float)sc[is] * (float)q1;
            y[l + 32] = d * (float)sc[is + 2] * (float)q2;
            y[l + 64] = d * (float)sc[is + 4] * (float)q3;
            y[l + 96] = d * (float)sc[is + 6] * (float)q4;
        }
    }
}

int kvfs_ggml_dequantize(uint32_t type, const void *src, float *dst, uint64_t n)
{
    const uint8_t *s = src;
    uint32_t bytes, elems = block_of(type, &bytes);
    if (!elems)
        return -ENOTSUP;
    if (n % elems)
        return -EINVAL;
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
    default:
        break;
    }
    for (uint64_t b = 0; b < n / elems; b++, dst += elems) {
        const uint8_t *blk = s + b * bytes;
        switch (type) {
        case KVFS_GGML_Q8_0: {
            float d = f16(blk);
            for (int i = 0; i < 32; i++)
                dst[i] = (float)(int8_t)blk[2 + i] * d;
            break;
        }
        case KVFS_GGML_Q4_0: {
            float d = f16(blk);
            for (int i = 0; i < 16; i++) {
                dst[i] = (float)((blk[2 + i] & 0x0f) - 8) * d;
                dst[i + 16] = (float)((blk[2 + i] >> 4) - 8) * d;
            }
            break;
        }
        case KVFS_GGML_Q4_1: {
            float d = f16(blk), m = f16(blk + 2);
            for (int i = 0; i < 16; i++) {
                dst[i] = (float)(blk[4 + i] & 0x0f) * d + m;
                dst[i + 16] = (float)(blk[4 + i] >> 4) * d + m;
            }
            break;
        }
        case KVFS_GGML_MXFP4: {
            /* ggml's kvalues_mxfp4 and GGML_E8M0_TO_FP32_HALF */
            static const int8_t fp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
            uint32_t bits = blk[0] < 2 ? 0x00200000u << blk[0] : (uint32_t)(blk[0] - 1) << 23;
            float d;
            memcpy(&d, &bits, 4);
            for (int i = 0; i < 16; i++) {
                dst[i] = (float)fp4[blk[1 + i] & 0x0f] * d;
                dst[i + 16] = (float)fp4[blk[1 + i] >> 4] * d;
            }
            break;
        }
        case KVFS_GGML_Q5_0: dequant_q5(blk, dst, 0); break;
        case KVFS_GGML_Q5_1: dequant_q5(blk, dst, 1); break;
        case KVFS_GGML_Q4_K: dequant_q45k(blk, dst, 0); break;
        case KVFS_GGML_Q5_K: dequant_q45k(blk, dst, 1); break;
        case KVFS_GGML_Q6_K: dequant_q6k(blk, dst); break;
        }
    }
    return 0;
}

int kvfs_ggml_dequantize_rows(uint32_t type, const void *src, float *dst, uint64_t n_rows, uint64_t n_cols)
{
    uint32_t bytes, elems = block_of(type, &bytes);
    if (!elems)
        return -ENOTSUP;
    if (n_cols % elems)
        return -EINVAL;
    /* whole rows of whole blocks lie back to back: one run of blocks */
    return kvfs_ggml_dequantize(type, src, dst, n_rows * n_cols);
}

/* ggml's nearest_int: round half to even through the float adder (the
 * same result as nearbyintf for |v| < 2^22, and ggml's for any v) */
static int nearest_int(float v)
{
    float t = v + 12582912.0f;
    int32_t i;
    memcpy(&i, &t, sizeof(i));
    return (i & 0x007fffff) - 0x00400000;
}

/* Q8_0 and Q8_1 as ggml-cpu's x86 (AVX) quantize_row_q8_0/1 round them:
 * q = round-half-even(x * (127 / max|x|)), d = max|x| / 127 stored as f16
 * (the portable reference's 1 / d and roundf differ in the last bit) */
static void act_q8_32(const float *x, float *y)
{
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) { /* not fmaxf: a libm call per value */
        float a = fabsf(x[j]);
        amax = a > amax ? a : amax;
    }
    float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    float dh = kvfs_f16_to_f32(kvfs_f32_to_f16(amax / 127.0f));
    for (int j = 0; j < 32; j++)
        y[j] = (float)nearest_int(x[j] * id) * dh; /* an int first: no -0 */
}

void kvfs_ggml_quantize_q8_k(const float *x, int8_t q[256], float *d)
{
    float amax = 0.0f, max = 0.0f; /* the first value of largest magnitude */
    for (int j = 0; j < 256; j++) {
        float a = fabsf(x[j]);
        if (a > amax) {
            amax = a;
            max = x[j];
        }
    }
    memset(q, 0, 256);
    *d = 0.0f;
    if (amax == 0.0f)
        return;
    float iscale = -127.0f / max;
    *d = 1 / iscale;
    for (int j = 0; j < 256; j++) {
        int v = nearest_int(iscale * x[j]);
        q[j] = (int8_t)(v < 127 ? v : 127);
    }
}

/* Q8_K as ggml's quantize_row_q8_K_ref (x86's too), then dequantize_row_q8_K */
static void act_q8_k(const float *x, float *y)
{
    int8_t q[256];
    float d;
    kvfs_ggml_quantize_q8_k(x, q, &d);
    for (int j = 0; j < 256; j++)
        y[j] = d * (float)q[j];
}

int kvfs_ggml_act_roundtrip(uint32_t type, const float *x, float *y, uint64_t n)
{
    uint64_t blk = type == KVFS_GGML_Q8_K ? 256 : 32;
    if (type != KVFS_GGML_Q8_0 && type != KVFS_GGML_Q8_1 && type != KVFS_GGML_Q8_K)
        return -ENOTSUP;
    if (n % blk)
        return -EINVAL;
    for (uint64_t b = 0; b < n; b += blk) {
        if (blk == 32)
            act_q8_32(x + b, y + b);
        else
            act_q8_k(x + b, y + b);
    }
    return 0;
}
