/* qmm_vnni.c - K-quant weights (Q4_K, Q5_K, Q6_K) times many x rows in
 * 8-bit integers with AVX-512 VNNI, for prefills on big models.
 *
 * The weights stay in their ggml encoding in the file's mapping.  For 16
 * rows at a time (a panel) each super-block is unpacked into bytes
 * interleaved row by row, 4 values per row in each 32-bit lane, so one
 * vpdpbusd multiplies 16 rows by 4 values of one x row broadcast from
 * memory.  The panel (~5.6 KiB per super-block) stays in L2 while every x
 * row passes, 8 at a time, so unpacking costs once per panel and the inner
 * loop is nearly all multiply-adds.  Per super-block the sums are exact
 * integers, as ggml's vec_dot_q4_K_q8_K / q6_K_q8_K: sum over sub-blocks
 * of scale * (q . qx), minus the mins (Q4_K, Q5_K: dmin m . x's 32-sums)
 * or the offset (Q6_K: 32 sc . x's 16-sums); then scaled by d dx in float.
 * Only the float order differs from ggml's (per super-block, not per lane):
 * a few ulps of the terms' size. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "level.h"

#include "ggml_quant.h"
#include "kvformat.h"
#include "qmm_vnni.h"

#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512F__)
#include <immintrin.h>

#include "kquant_simd.h"

#define PANEL_ROWS 16
#define COLS 8 /* x rows per pass over the panel: 8 int + 8 float accumulators */

/* one super-block of a panel: the values, then per-sub-block scales,
 * the offset pairs (int16 x2), d and the offset's coefficient */
#define PB_Q 0
#define PB_SC 4096                       /* int32 [16 sub-blocks][16 rows] */
#define PB_OFF (PB_SC + 16 * 16 * 4)     /* int16 pairs [8][16 rows] */
#define PB_D (PB_OFF + 8 * 16 * 4)       /* float [16 rows] */
#define PB_COEF (PB_D + 16 * 4)          /* float [16 rows] */
#define PB_BYTES (PB_COEF + 16 * 4)      /* 5760 */

#define AI static inline __attribute__((always_inline))

int kvfs_qmm_vnni_has(uint32_t type)
{
    return type == KVFS_GGML_Q4_K || type == KVFS_GGML_Q5_K || type == KVFS_GGML_Q6_K;
}

static float f16_at(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h); /* F16C: part of every AVX-512 CPU */
}

/* Rows [r0, r0 + rows) of W, rows <= 16, into the panel (missing rows
 * zero), straight from their blocks, the transpose done by the gathers:
 * Q4_K / Q5_K: a dword of 4 bytes of a chunk's qs holds 4 consecutive
 * values of sub-block 2c (low nibbles) and 4 of 2c + 1 (high), so one
 * gather across the 16 rows gives two panel vectors; the scales, mins and
 * d / dmin of 16 rows likewise, by lanes.  Until 2026-11-28 each row's
 * super-block was unpacked into a 16-row stage and the stage gathered: the
 * same panel (byte for byte) at twice the cost, which a blend's ~50 rows
 * per expert paid most for (docs/lab-notes.md). */
static void repack_q45k(int five, const uint8_t *w, size_t row_bytes, int r0, int rows, int nb, uint8_t *panel)
{
    const __mmask16 live = (__mmask16)((1u << rows) - 1);
    const __m512i idx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                           _mm512_set1_epi32((int)row_bytes));
    const __m512i zero = _mm512_setzero_si512(), low4 = _mm512_set1_epi8(0x0f), one = _mm512_set1_epi8(1);
    const __m512i m6 = _mm512_set1_epi32(0x3f3f3f3f), m2 = _mm512_set1_epi32(0x03030303);
    const __m512i byte0 = _mm512_set1_epi32(0xff);
    size_t bb = row_bytes / (size_t)nb;
#define GATHER(off) _mm512_mask_i32gather_epi32(zero, live, idx, (const void *)(base + (off)), 1)
    for (int b = 0; b < nb; b++) {
        const uint8_t *base = w + (size_t)r0 * row_bytes + (size_t)b * bb;
        uint8_t *p = panel + (size_t)b * PB_BYTES;
        const uint8_t *qs = base + (five ? 48 : 16);
        for (int u = 0; u < 8; u++) {
            __m512i hb = five ? GATHER(16 + 4 * u) : zero;
            for (int c = 0; c < 4; c++) {
                __m512i g = _mm512_mask_i32gather_epi32(zero, live, idx, (const void *)(qs + 32 * c + 4 * u), 1);
                __m512i lo = _mm512_and_si512(g, low4), hi = _mm512_and_si512(_mm512_srli_epi16(g, 4), low4);
                if (five) { /* the fifth bits: bit 2c of qh for sub-block 2c, bit 2c + 1 for 2c + 1 */
                    lo = _mm512_or_si512(lo, _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(hb, 2 * c), one), 4));
                    hi = _mm512_or_si512(hi,
                                         _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(hb, 2 * c + 1), one), 4));
                }
                _mm512_store_si512((void *)(p + PB_Q + 64 * ((2 * c) * 8 + u)), lo);
                _mm512_store_si512((void *)(p + PB_Q + 64 * ((2 * c + 1) * 8 + u)), hi);
            }
        }
        /* kq_scales_mins across the lanes: bytes sc 0..3, m 0..3, sc 4..7, m 4..7 */
        __m512i w0 = GATHER(4), w1 = GATHER(8), w2 = GATHER(12);
        __m512i s03 = _mm512_and_si512(w0, m6), m03 = _mm512_and_si512(w1, m6);
        __m512i s47 = _mm512_or_si512(_mm512_and_si512(w2, low4),
                                      _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w0, 6), m2), 4));
        __m512i m47 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(w2, 4), low4),
                                      _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w1, 6), m2), 4));
        for (int j = 0; j < 4; j++) {
            _mm512_store_si512((void *)(p + PB_SC + 64 * j), _mm512_and_si512(_mm512_srli_epi32(s03, 8 * j), byte0));
            _mm512_store_si512((void *)(p + PB_SC + 64 * (4 + j)),
                               _mm512_and_si512(_mm512_srli_epi32(s47, 8 * j), byte0));
        }
        memset(p + PB_SC + 64 * 8, 0, 64 * 8); /* sub-blocks 8..15 (Q6_K's): unused here */
        for (int k = 0; k < 2; k++) { /* off pairs (m 2k, m 2k + 1) as two int16 */
            __m512i a = _mm512_srli_epi32(m03, 16 * k), c = _mm512_srli_epi32(m47, 16 * k);
            __m512i pa = _mm512_or_si512(_mm512_and_si512(a, byte0),
                                         _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(a, 8), byte0), 16));
            __m512i pc = _mm512_or_si512(_mm512_and_si512(c, byte0),
                                         _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(c, 8), byte0), 16));
            _mm512_store_si512((void *)(p + PB_OFF + 64 * k), pa);
            _mm512_store_si512((void *)(p + PB_OFF + 64 * (2 + k)), pc);
        }
        memset(p + PB_OFF + 64 * 4, 0, 64 * 4);
        __m512i dd = GATHER(0); /* d (low half) and dmin (high) of each row */
        _mm512_store_ps((void *)(p + PB_D), _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd)));
        _mm512_store_ps((void *)(p + PB_COEF), _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16))));
    }
#undef GATHER
}

/* Q6_K rows into the panel the same way: for 4 values at l .. l + 3 of a
 * half h, the dwords of ql at l and l + 32 and of qh at l give all four
 * quarters (ggml's dequantize_row_q6_K: low nibbles of ql[l], ql[l + 32],
 * high nibbles of them, with qh's bit pairs 0, 2, 4, 6 above), unsigned as
 * the panel keeps them (the - 32 is the offset term) */
static void repack_q6k(const uint8_t *w, size_t row_bytes, int r0, int rows, int nb, uint8_t *panel)
{
    const __mmask16 live = (__mmask16)((1u << rows) - 1);
    const __m512i idx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                           _mm512_set1_epi32((int)row_bytes));
    const __m512i zero = _mm512_setzero_si512(), low4 = _mm512_set1_epi8(0x0f), two = _mm512_set1_epi8(0x03);
    const __m512i low16 = _mm512_set1_epi32(0xffff);
    size_t bb = row_bytes / (size_t)nb;
#define GATHER(off) _mm512_mask_i32gather_epi32(zero, live, idx, (const void *)(base + (off)), 1)
    for (int b = 0; b < nb; b++) {
        const uint8_t *base = w + (size_t)r0 * row_bytes + (size_t)b * bb;
        uint8_t *p = panel + (size_t)b * PB_BYTES;
        for (int h = 0; h < 2; h++)
            for (int u = 0; u < 8; u++) {
                __m512i a = GATHER(64 * h + 4 * u), c = GATHER(64 * h + 32 + 4 * u), hb = GATHER(128 + 32 * h + 4 * u);
                __m512i q[4] = {_mm512_and_si512(a, low4), _mm512_and_si512(c, low4),
                                _mm512_and_si512(_mm512_srli_epi16(a, 4), low4),
                                _mm512_and_si512(_mm512_srli_epi16(c, 4), low4)};
                for (int k = 0; k < 4; k++) {
                    __m512i hi = _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(hb, 2 * k), two), 4);
                    _mm512_store_si512((void *)(p + PB_Q + 64 * (32 * h + 8 * k + u)), _mm512_or_si512(q[k], hi));
                }
            }
        /* the 16 int8 scales: sc as int32, the offsets 32 sc as int16 pairs */
        for (int i = 0; i < 4; i++) {
            __m512i g = GATHER(192 + 4 * i), sx[4];
            for (int q = 0; q < 4; q++) {
                sx[q] = _mm512_srai_epi32(_mm512_slli_epi32(g, 24 - 8 * q), 24);
                _mm512_store_si512((void *)(p + PB_SC + 64 * (4 * i + q)), sx[q]);
            }
            for (int k = 0; k < 2; k++)
                _mm512_store_si512((void *)(p + PB_OFF + 64 * (2 * i + k)),
                                   _mm512_or_si512(_mm512_and_si512(_mm512_slli_epi32(sx[2 * k], 5), low16),
                                                   _mm512_slli_epi32(sx[2 * k + 1], 21)));
        }
        /* d: the high half of the dword at 206 (a dword at 208 would run past the block) */
        _mm512_store_ps((void *)(p + PB_D), _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(GATHER(206), 16))));
        _mm512_store_ps((void *)(p + PB_COEF), _mm512_setzero_ps());
    }
#undef GATHER
}

static inline int32_t load32(const void *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* The panel times NC x rows (x[i * nb ..] for i < NC): y[i * ldy + 0..15]
 * (only `valid` of the 16 stored).  six: Q6_K's 16 sub-blocks of 16. */
AI void panel_cols(const uint8_t *panel, int nb, const struct q8k *x, int NC, int six, float *y, size_t ldy,
                   __mmask16 valid)
{
    const int nsub = six ? 16 : 8, steps = six ? 4 : 8, npair = six ? 8 : 4;
    __m512 acc[COLS];
    _Pragma("GCC unroll 16")
    for (int c = 0; c < NC; c++)
        acc[c] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *p = panel + (size_t)b * PB_BYTES;
        const struct q8k *xb[COLS];
        _Pragma("GCC unroll 16")
        for (int c = 0; c < NC; c++)
            xb[c] = x + (size_t)c * nb + b;
        __m512i isum[COLS];
        _Pragma("GCC unroll 16")
        for (int c = 0; c < NC; c++)
            isum[c] = _mm512_setzero_si512();
        for (int j = 0; j < nsub; j++) {
            __m512i ia[COLS];
            _Pragma("GCC unroll 16")
            for (int c = 0; c < NC; c++)
                ia[c] = _mm512_setzero_si512();
            _Pragma("GCC unroll 16")
            for (int s = 0; s < steps; s++) {
                int t = j * steps + s;
                __m512i wv = _mm512_load_si512((const void *)(p + PB_Q + 64 * t));
                _Pragma("GCC unroll 16")
                for (int c = 0; c < NC; c++)
                    ia[c] = _mm512_dpbusd_epi32(ia[c], wv, _mm512_set1_epi32(load32(xb[c]->q + 4 * t)));
            }
            __m512i scv = _mm512_load_si512((const void *)(p + PB_SC + 64 * j));
            _Pragma("GCC unroll 16")
            for (int c = 0; c < NC; c++)
                isum[c] = _mm512_add_epi32(isum[c], _mm512_mullo_epi32(ia[c], scv));
        }
        __m512 dv = _mm512_load_ps((const void *)(p + PB_D));
        __m512 cv = _mm512_load_ps((const void *)(p + PB_COEF));
        _Pragma("GCC unroll 16")
        for (int c = 0; c < NC; c++) {
            const int16_t *xs = six ? xb[c]->bsum : xb[c]->psum;
            __m512i io = _mm512_setzero_si512();
            _Pragma("GCC unroll 16")
            for (int k = 0; k < npair; k++)
                io = _mm512_dpwssd_epi32(io, _mm512_load_si512((const void *)(p + PB_OFF + 64 * k)),
                                         _mm512_set1_epi32(load32(xs + 2 * k)));
            __m512 dx = _mm512_set1_ps(xb[c]->d);
            if (six) {
                acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(isum[c], io)), _mm512_mul_ps(dv, dx),
                                         acc[c]);
            } else {
                acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]), _mm512_mul_ps(dv, dx), acc[c]);
                acc[c] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(io), _mm512_mul_ps(cv, dx), acc[c]);
            }
        }
    }
    _Pragma("GCC unroll 16")
    for (int c = 0; c < NC; c++)
        _mm512_mask_storeu_ps(y + (size_t)c * ldy, valid, acc[c]);
}

/* one compiled copy per type family and column count (registers, unrolled steps) */
#define PANEL_CASES(SIX)                                                                                             \
    switch (nc) {                                                                                                    \
    case 1: panel_cols(panel, nb, x, 1, SIX, y, ldy, valid); break;                                                  \
    case 2: panel_cols(panel, nb, x, 2, SIX, y, ldy, valid); break;                                                  \
    case 3: panel_cols(panel, nb, x, 3, SIX, y, ldy, valid); break;                                                  \
    case 4: panel_cols(panel, nb, x, 4, SIX, y, ldy, valid); break;                                                  \
    case 5: panel_cols(panel, nb, x, 5, SIX, y, ldy, valid); break;                                                  \
    case 6: panel_cols(panel, nb, x, 6, SIX, y, ldy, valid); break;                                                  \
    case 7: panel_cols(panel, nb, x, 7, SIX, y, ldy, valid); break;                                                  \
    default: panel_cols(panel, nb, x, 8, SIX, y, ldy, valid); break;                                                 \
    }

static void panel_q45k(const uint8_t *panel, int nb, const struct q8k *x, int nc, float *y, size_t ldy,
                       __mmask16 valid)
{
    PANEL_CASES(0)
}

static void panel_q6k(const uint8_t *panel, int nb, const struct q8k *x, int nc, float *y, size_t ldy,
                      __mmask16 valid)
{
    PANEL_CASES(1)
}

int kvfs_qmm_vnni(uint32_t type, const uint8_t *w, size_t row_bytes, int r0, int r1, const struct q8k *x, int nb,
                  int n, float *y, size_t ldy)
{
    if (!kvfs_qmm_vnni_has(type) || r0 % PANEL_ROWS || row_bytes != kvfs_ggml_row_size(type, (uint64_t)nb * 256))
        return -ENOTSUP;
    if (r0 >= r1 || n <= 0)
        return 0;
    uint8_t *panel = aligned_alloc(64, (size_t)nb * PB_BYTES);
    if (!panel)
        return -ENOMEM;
    for (int p0 = r0; p0 < r1; p0 += PANEL_ROWS) {
        int rows = r1 - p0 < PANEL_ROWS ? r1 - p0 : PANEL_ROWS;
        __mmask16 valid = (__mmask16)((1u << rows) - 1);
        if (type == KVFS_GGML_Q6_K)
            repack_q6k(w, row_bytes, p0, rows, nb, panel);
        else
            repack_q45k(type == KVFS_GGML_Q5_K, w, row_bytes, p0, rows, nb, panel);
        /* the next panel's rows (contiguous) fetched while this one's
         * products run: the panel reads 16 rows a super-block at a time, a
         * pattern the hardware prefetcher misses, and its first read of the
         * weights was a third of its time (a blend's ~50 rows per expert) */
        const char *next = (const char *)(w + (size_t)(p0 + PANEL_ROWS) * row_bytes);
        size_t next_bytes = p0 + PANEL_ROWS < r1 ? (size_t)(r1 - p0 - PANEL_ROWS < PANEL_ROWS ? r1 - p0 - PANEL_ROWS
                                                                                            : PANEL_ROWS) * row_bytes
                                                 : 0;
        size_t ahead = 0, per_pass = (next_bytes / 64 + (n + COLS - 1) / COLS - 1) / ((n + COLS - 1) / COLS) * 64;
        for (int c0 = 0; c0 < n; c0 += COLS) {
            int nc = n - c0 < COLS ? n - c0 : COLS;
            for (size_t e = ahead + per_pass; ahead < next_bytes && ahead < e; ahead += 64)
                _mm_prefetch(next + ahead, _MM_HINT_T1);
            if (type == KVFS_GGML_Q6_K)
                panel_q6k(panel, nb, x + (size_t)c0 * nb, nc, y + (size_t)c0 * ldy + p0, ldy, valid);
            else
                panel_q45k(panel, nb, x + (size_t)c0 * nb, nc, y + (size_t)c0 * ldy + p0, ldy, valid);
        }
    }
    free(panel);
    return 0;
}

/* ---- few x rows (decoding): one W row at a time, in its encoding ---- */

int kvfs_qmm_vnni_gemv_has(uint32_t type)
{
    return type == KVFS_GGML_Q4_K || type == KVFS_GGML_Q6_K;
}

/* A Q4_K block's 32-byte chunk c holds sub-block 2c in its low nibbles and
 * 2c + 1 in its high: two chunks' low nibbles are one zmm of sub-blocks
 * (0, 2), their high (1, 3), then (4, 6), (5, 7).  x's groups of 32 in that
 * order meet them in one load each. */
static void x_paired(const struct q8k *x, int count, struct q8k *o)
{
    for (int i = 0; i < count; i++) {
        o[i] = x[i];
        for (int h = 0; h < 2; h++) {
            memcpy(o[i].q + 128 * h + 32, x[i].q + 128 * h + 64, 32);
            memcpy(o[i].q + 128 * h + 64, x[i].q + 128 * h + 32, 32);
        }
    }
}

/* per-lane scales for vpdpwssd: the low 16 bits of each 32-bit lane (the
 * high zero), so lane += (int16) ia * sc exactly: one vpdpbusd's lane is a
 * sum of 4 products, |.| <= 4 * 63 * 128 < 2^15 */
#define LANES_OF(a, b) _mm512_set_epi32(b, b, b, b, b, b, b, b, a, a, a, a, a, a, a, a)

/* W row q (Q4_K) . NX x rows (paired order), as ggml's vec_dot_q4_K_q8_K:
 * per super-block the integer sums exact, scaled by d dx (and the mins by
 * dmin dx) into float lanes */
AI void gemv_q4k(const uint8_t *q, const struct q8k *x, int nb, int NX, float *out)
{
    __m512 acc[4];
    __m128 accm[4];
    _Pragma("GCC unroll 4") for (int i = 0; i < NX; i++) acc[i] = _mm512_setzero_ps(), accm[i] = _mm_setzero_ps();
    const __m512i low4 = _mm512_set1_epi8(0x0f), zero = _mm512_setzero_si512();
    const __m512i i0 = LANES_OF(0, 2), i1 = LANES_OF(1, 3), i2 = LANES_OF(4, 6), i3 = LANES_OF(5, 7);
    for (int b = 0; b < nb; b++, q += 144) {
        float dw = f16_at(q), mw = f16_at(q + 2);
        __m128i sm = kq_scales_mins(q + 4); /* sc 0..7, m 0..7 */
        __m512i s32 = _mm512_cvtepu8_epi32(sm);
        __m512i sv0 = _mm512_permutexvar_epi32(i0, s32), sv1 = _mm512_permutexvar_epi32(i1, s32);
        __m512i sv2 = _mm512_permutexvar_epi32(i2, s32), sv3 = _mm512_permutexvar_epi32(i3, s32);
        __m128i m16 = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
        __m512i A = _mm512_loadu_si512((const void *)(q + 16)), B = _mm512_loadu_si512((const void *)(q + 80));
        __m512i w0 = _mm512_and_si512(A, low4), w1 = _mm512_and_si512(_mm512_srli_epi16(A, 4), low4);
        __m512i w2 = _mm512_and_si512(B, low4), w3 = _mm512_and_si512(_mm512_srli_epi16(B, 4), low4);
        _Pragma("GCC unroll 4") for (int i = 0; i < NX; i++)
        {
            const struct q8k *xb = x + (size_t)i * nb + b;
            __m512i t = _mm512_dpwssd_epi32(zero, _mm512_dpbusd_epi32(zero, w0, _mm512_load_si512(xb->q)), sv0);
            t = _mm512_dpwssd_epi32(t, _mm512_dpbusd_epi32(zero, w1, _mm512_load_si512(xb->q + 64)), sv1);
            t = _mm512_dpwssd_epi32(t, _mm512_dpbusd_epi32(zero, w2, _mm512_load_si512(xb->q + 128)), sv2);
            t = _mm512_dpwssd_epi32(t, _mm512_dpbusd_epi32(zero, w3, _mm512_load_si512(xb->q + 192)), sv3);
            acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_set1_ps(dw * xb->d), acc[i]);
            __m128i mins = _mm_madd_epi16(m16, _mm_loadu_si128((const __m128i *)xb->psum));
            accm[i] = _mm_fmadd_ps(_mm_set1_ps(mw * xb->d), _mm_cvtepi32_ps(mins), accm[i]);
        }
    }
    _Pragma("GCC unroll 4") for (int i = 0; i < NX; i++)
    {
        __m128 m = accm[i];
        m = _mm_add_ps(m, _mm_movehl_ps(m, m));
        m = _mm_add_ss(m, _mm_shuffle_ps(m, m, 1));
        out[i] = _mm512_reduce_add_ps(acc[i]) - _mm_cvtss_f32(m);
    }
}

/* W row q (Q6_K) . NX x rows, as ggml's vec_dot_q6_K_q8_K: per super-block
 * sum_k sc[k] (q_k . qx_k) - 32 sum_k sc[k] sum(qx_k), exact, times d dx */
AI void gemv_q6k(const uint8_t *q, const struct q8k *x, int nb, int NX, float *out)
{
    __m512 acc[4];
    _Pragma("GCC unroll 4") for (int i = 0; i < NX; i++) acc[i] = _mm512_setzero_ps();
    const __m512i low4 = _mm512_set1_epi8(0x0f), hi2 = _mm512_set1_epi8(0x30), zero = _mm512_setzero_si512();
    const __m512i low16 = _mm512_set1_epi32(0xffff);
    /* the same qh feeds both 32-byte halves, shifted differently */
    const __m512i shl = _mm512_set_epi64(2, 2, 2, 2, 4, 4, 4, 4), shr = _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0);
    __m512i iv[4]; /* lane l of zmm k: sub-block 4k + l / 4 */
    for (int k = 0; k < 4; k++)
        iv[k] = _mm512_set_epi32(4 * k + 3, 4 * k + 3, 4 * k + 3, 4 * k + 3, 4 * k + 2, 4 * k + 2, 4 * k + 2, 4 * k + 2,
                                 4 * k + 1, 4 * k + 1, 4 * k + 1, 4 * k + 1, 4 * k, 4 * k, 4 * k, 4 * k);
    for (int b = 0; b < nb; b++, q += 210) {
        float dw = f16_at(q + 208);
        __m128i sc8 = _mm_loadu_si128((const __m128i *)(q + 192));
        __m512i s32 = _mm512_and_si512(_mm512_cvtepi8_epi32(sc8), low16);
        __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
        __m512i z[4];
        for (int h = 0; h < 2; h++) {
            __m512i L = _mm512_loadu_si512((const void *)(q + 64 * h));
            __m512i H = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(q + 128 + 32 * h)));
            z[2 * h] = _mm512_or_si512(_mm512_and_si512(L, low4), _mm512_and_si512(_mm512_sllv_epi64(H, shl), hi2));
            z[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(L, 4), low4),
                                           _mm512_and_si512(_mm512_srlv_epi64(H, shr), hi2));
        }
        __m512i sv0 = _mm512_permutexvar_epi32(iv[0], s32), sv1 = _mm512_permutexvar_epi32(iv[1], s32);
        __m512i sv2 = _mm512_permutexvar_epi32(iv[2], s32), sv3 = _mm512_permutexvar_epi32(iv[3], s32);
        _Pragma("GCC unroll 4") for (int i = 0; i < NX; i++)
        {
            const struct q8k *xb = x + (size_t)i * nb + b;
            __m512i t = _mm512_dpwssd_epi32(zero, _mm512_dpbusd_epi32(zero, z[0], _mm512_load_si512(xb->q)), sv0);
            t = _mm512_dpwssd_epi32(t, _mm512_dpbusd_epi32(zero, z[1], _mm512_load_si512(xb->q + 64)), sv1);
            t = _mm512_dpwssd_epi32(t, _mm512_dpbusd_epi32(zero, z[2], _mm512_load_si512(xb->q + 128)), sv2);
            t = _mm512_dpwssd_epi32(t, _mm512_dpbusd_epi32(zero, z[3], _mm512_load_si512(xb->q + 192)), sv3);
            __m256i off = _mm256_slli_epi32(_mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)xb->bsum)), 5);
            t = _mm512_sub_epi32(t, _mm512_zextsi256_si512(off));
            acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_set1_ps(dw * xb->d), acc[i]);
        }
    }
    _Pragma("GCC unroll 4") for (int i = 0; i < NX; i++) out[i] = _mm512_reduce_add_ps(acc[i]);
}

int kvfs_qmm_vnni_gemv(uint32_t type, const uint8_t *w, size_t row_bytes, int r0, int r1, const struct q8k *x,
                       int nb, int n, float *y, size_t ldy)
{
    if (!kvfs_qmm_vnni_gemv_has(type) || row_bytes != kvfs_ggml_row_size(type, (uint64_t)nb * 256))
        return -ENOTSUP;
    if (r0 >= r1 || n <= 0)
        return 0;
    struct q8k *xp = NULL;
    if (type == KVFS_GGML_Q4_K) {
        if (posix_memalign((void **)&xp, 64, sizeof(*xp) * (size_t)n * nb))
            return -ENOMEM;
        x_paired(x, n * nb, xp);
        x = xp;
    }
    float dots[4];
    for (int r = r0; r < r1; r++) {
        const uint8_t *q = w + (size_t)r * row_bytes;
        for (int g = 0; g < n; g += 4) { /* x 4 rows at a time against this W row, in cache */
            int m = n - g < 4 ? n - g : 4;
            const struct q8k *xg = x + (size_t)g * nb;
            if (type == KVFS_GGML_Q6_K)
                switch (m) {
                case 1: gemv_q6k(q, xg, nb, 1, dots); break;
                case 2: gemv_q6k(q, xg, nb, 2, dots); break;
                case 3: gemv_q6k(q, xg, nb, 3, dots); break;
                default: gemv_q6k(q, xg, nb, 4, dots); break;
                }
            else
                switch (m) {
                case 1: gemv_q4k(q, xg, nb, 1, dots); break;
                case 2: gemv_q4k(q, xg, nb, 2, dots); break;
                case 3: gemv_q4k(q, xg, nb, 3, dots); break;
                default: gemv_q4k(q, xg, nb, 4, dots); break;
                }
            for (int i = 0; i < m; i++)
                y[(size_t)(g + i) * ldy + r] = dots[i];
        }
    }
    free(xp);
    return 0;
}

#else /* no AVX-512 VNNI in this build */

int kvfs_qmm_vnni_has(uint32_t type)
{
    (void)type;
    return 0;
}

int kvfs_qmm_vnni_gemv_has(uint32_t type)
{
    (void)type;
    return 0;
}

int kvfs_qmm_vnni_gemv(uint32_t type, const uint8_t *w, size_t row_bytes, int r0, int r1, const struct q8k *x,
                       int nb, int n, float *y, size_t ldy)
{
    (void)type, (void)w, (void)row_bytes, (void)r0, (void)r1, (void)x, (void)nb, (void)n, (void)y, (void)ldy;
    return -ENOTSUP;
}

int kvfs_qmm_vnni(uint32_t type, const uint8_t *w, size_t row_bytes, int r0, int r1, const struct q8k *x, int nb,
                  int n, float *y, size_t ldy)
{
    (void)type, (void)w, (void)row_bytes, (void)r0, (void)r1, (void)x, (void)nb, (void)n, (void)y, (void)ldy;
    return -ENOTSUP;
}

#endif
