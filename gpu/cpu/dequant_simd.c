/* dequant_simd.c - see dequant_simd.h.  Each value is the scalar decode's:
 * an exact small integer converted to float, then the same one or two float
 * operations in the same order (a multiply, then an add or subtract; never
 * fused: the Makefile builds with -ffp-contract=off, so the scalar code is
 * unfused too, whatever the compiler). */
#include "level.h"

#include <errno.h>

#include "dequant_simd.h"
#include "ggml_quant.h"
#include "kvformat.h"

#ifdef __AVX2__
#include "kquant_simd.h"

static float scale_f16(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return kvfs_f16_to_f32(h);
}

/* 32 signed bytes as four vectors of 8 floats, in order */
static inline void widen32(__m256i v, __m256 f[4])
{
    __m128i a = _mm256_castsi256_si128(v), b = _mm256_extracti128_si256(v, 1);
    __m128i part[4] = {a, _mm_srli_si128(a, 8), b, _mm_srli_si128(b, 8)};
    for (int k = 0; k < 4; k++)
        f[k] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part[k]));
}

/* 32 signed bytes as 32 floats, times d (then plus m when add) */
static inline void store32(__m256i v, float d, float m, int add, float *y)
{
    __m256 f[4], vd = _mm256_set1_ps(d), vm = _mm256_set1_ps(m);
    widen32(v, f);
    for (int k = 0; k < 4; k++) {
        __m256 p = _mm256_mul_ps(f[k], vd);
        _mm256_storeu_ps(y + 8 * k, add ? _mm256_add_ps(p, vm) : p);
    }
}

/* the 32 nibbles of a 32-block's 16 bytes in element order: low nibbles
 * are elements 0..15, high nibbles 16..31 */
static inline __m256i nibbles32(const uint8_t *qs)
{
    __m128i raw = _mm_loadu_si128((const __m128i *)qs), low4 = _mm_set1_epi8(0x0f);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), low4), _mm_and_si128(raw, low4));
}

/* bit j of qh as 0x10 in byte j (Q5_0/Q5_1's fifth bits) */
static inline __m256i fifth_bits(const uint8_t *qhp)
{
    uint32_t qh;
    memcpy(&qh, qhp, 4);
    const __m256i pick = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3,
                                          3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    __m256i b = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), pick), bit);
    return _mm256_and_si256(_mm256_cmpeq_epi8(b, bit), _mm256_set1_epi8(0x10));
}

static void blocks32(uint32_t type, const uint8_t *s, float *y, size_t nb)
{
    for (size_t b = 0; b < nb; b++, y += 32) {
        switch (type) {
        case KVFS_GGML_Q4_0:
            s += 18;
            store32(_mm256_sub_epi8(nibbles32(s - 16), _mm256_set1_epi8(8)), scale_f16(s - 18), 0.0f, 0, y);
            break;
        case KVFS_GGML_Q4_1:
            s += 20;
            store32(nibbles32(s - 16), scale_f16(s - 20), scale_f16(s - 18), 1, y);
            break;
        case KVFS_GGML_Q5_0:
            s += 22;
            store32(_mm256_sub_epi8(_mm256_or_si256(nibbles32(s - 16), fifth_bits(s - 20)), _mm256_set1_epi8(16)),
                    scale_f16(s - 22), 0.0f, 0, y);
            break;
        case KVFS_GGML_Q5_1:
            s += 24;
            store32(_mm256_or_si256(nibbles32(s - 16), fifth_bits(s - 20)), scale_f16(s - 24), scale_f16(s - 22), 1,
                    y);
            break;
        case KVFS_GGML_Q8_0:
            s += 34;
            store32(_mm256_loadu_si256((const __m256i *)(s - 32)), scale_f16(s - 34), 0.0f, 0, y);
            break;
        }
    }
}

/* 32 values (0..31 as bytes) times d1, minus m1: a Q4_K/Q5_K sub-block */
static inline void store_k32(__m256i v, float d1, float m1, float *y)
{
    __m256 f[4], vd = _mm256_set1_ps(d1), vm = _mm256_set1_ps(m1);
    widen32(v, f);
    for (int k = 0; k < 4; k++)
        _mm256_storeu_ps(y + 8 * k, _mm256_sub_ps(_mm256_mul_ps(vd, f[k]), vm));
}

static void blocks_q45k(const uint8_t *s, float *y, size_t nb, int five)
{
    for (size_t b = 0; b < nb; b++, s += five ? 176 : 144) {
        float d = scale_f16(s), dmin = scale_f16(s + 2);
        uint8_t sm[16];
        _mm_storeu_si128((__m128i *)sm, kq_scales_mins(s + 4));
        const uint8_t *q = s + (five ? 48 : 16);
        __m256i hb = five ? _mm256_loadu_si256((const __m256i *)(s + 16)) : _mm256_setzero_si256();
        for (int j = 0; j < 4; j++, q += 32, y += 64) {
            __m256i lo, hi;
            kq_q45_chunk(_mm256_loadu_si256((const __m256i *)q), five, &hb, &lo, &hi);
            store_k32(lo, d * (float)sm[2 * j], dmin * (float)sm[8 + 2 * j], y);
            store_k32(hi, d * (float)sm[2 * j + 1], dmin * (float)sm[8 + 2 * j + 1], y + 32);
        }
    }
}

static void blocks_q6k(const uint8_t *s, float *y, size_t nb)
{
    for (size_t b = 0; b < nb; b++, s += 210) {
        const int8_t *sc = (const int8_t *)(s + 192);
        float d = scale_f16(s + 208);
        for (int h = 0; h < 2; h++, y += 128) {
            __m256i v[4];
            kq_q6_half(s + 64 * h, s + 128 + 32 * h, v);
            for (int k = 0; k < 4; k++) {
                /* values 0..15 of v[k] take scale 2k, 16..31 scale 2k + 1 */
                __m256 f[4], ds[2] = {_mm256_set1_ps(d * (float)sc[8 * h + 2 * k]),
                                      _mm256_set1_ps(d * (float)sc[8 * h + 2 * k + 1])};
                widen32(_mm256_sub_epi8(v[k], _mm256_set1_epi8(32)), f);
                for (int p = 0; p < 4; p++)
                    _mm256_storeu_ps(y + 32 * k + 8 * p, _mm256_mul_ps(ds[p / 2], f[p]));
            }
        }
    }
}

int kvfs_dequant_simd(uint32_t type, const void *src, float *dst, size_t n)
{
    switch (type) {
    case KVFS_GGML_Q4_0: case KVFS_GGML_Q4_1: case KVFS_GGML_Q5_0: case KVFS_GGML_Q5_1: case KVFS_GGML_Q8_0:
        if (n % 32)
            return -EINVAL;
        blocks32(type, src, dst, n / 32);
        return 0;
    case KVFS_GGML_Q4_K: case KVFS_GGML_Q5_K:
        if (n % 256)
            return -EINVAL;
        blocks_q45k(src, dst, n / 256, type == KVFS_GGML_Q5_K);
        return 0;
    case KVFS_GGML_Q6_K:
        if (n % 256)
            return -EINVAL;
        blocks_q6k(src, dst, n / 256);
        return 0;
    default:
        return -ENOTSUP;
    }
}

#else

int kvfs_dequant_simd(uint32_t type, const void *src, float *dst, size_t n)
{
    (void)type, (void)src, (void)dst, (void)n;
    return -ENOTSUP;
}

#endif
