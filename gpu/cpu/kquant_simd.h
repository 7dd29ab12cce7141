/* kquant_simd.h - unpacking K-quant super-blocks (ggml's block_q4_K, q5_K,
 * q6_K) in AVX2 registers: shared by the CPU backend's AVX2 kernels and the
 * VNNI ones (qmm_vnni.c).  Include only where __AVX2__ is defined. */
#ifndef KVFS_KQUANT_SIMD_H
#define KVFS_KQUANT_SIMD_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* A Q4_K/Q5_K super-block's eight 6-bit scales, then its eight mins, as
 * bytes (ggml's get_scale_min_k4 on all eight at once); s: the 12 bytes */
static inline __m128i kq_scales_mins(const uint8_t *s)
{
    uint32_t w[3];
    memcpy(w, s, 12);
    return _mm_set_epi32((int)((w[2] >> 4 & 0x0f0f0f0f) | (w[1] >> 6 & 0x03030303) << 4), (int)(w[1] & 0x3f3f3f3f),
                         (int)((w[2] & 0x0f0f0f0f) | (w[0] >> 6 & 0x03030303) << 4), (int)(w[0] & 0x3f3f3f3f));
}

/* The 64 values of a Q4_K/Q5_K chunk of 32 bytes (raw): sub-block 2j from
 * the low nibbles (*lo), 2j + 1 from the high (*hi); Q5_K (five) adds its
 * fifth bits from *hb, which moves on to the next chunk's */
static inline void kq_q45_chunk(__m256i raw, int five, __m256i *hb, __m256i *lo, __m256i *hi)
{
    const __m256i low4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    *lo = _mm256_and_si256(raw, low4);
    *hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
    if (five) {
        *lo = _mm256_or_si256(*lo, _mm256_slli_epi16(_mm256_and_si256(*hb, one), 4));
        *hi = _mm256_or_si256(*hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(*hb, 1), one), 4));
        *hb = _mm256_srli_epi16(*hb, 2);
    }
}

/* Half of a Q6_K super-block (128 values, 0..63 before ggml's - 32) from
 * its 64 low-bit bytes ql and 32 high-bit bytes qh, in order, 32 per vector
 * (ggml's dequantize_row_q6_K) */
static inline void kq_q6_half(const uint8_t *ql, const uint8_t *qh, __m256i out[4])
{
    const __m256i low4 = _mm256_set1_epi8(0x0f), hi2 = _mm256_set1_epi8(0x30);
    __m256i la = _mm256_loadu_si256((const __m256i *)ql), lb = _mm256_loadu_si256((const __m256i *)(ql + 32));
    __m256i hv = _mm256_loadu_si256((const __m256i *)qh);
    out[0] = _mm256_or_si256(_mm256_and_si256(la, low4), _mm256_and_si256(_mm256_slli_epi16(hv, 4), hi2));
    out[1] = _mm256_or_si256(_mm256_and_si256(lb, low4), _mm256_and_si256(_mm256_slli_epi16(hv, 2), hi2));
    out[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(la, 4), low4), _mm256_and_si256(hv, hi2));
    out[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lb, 4), low4),
                             _mm256_and_si256(_mm256_srli_epi16(hv, 2), hi2));
}

#endif
