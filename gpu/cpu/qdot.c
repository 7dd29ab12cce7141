/* qdot.c - one weight row, in its ggml encoding, dotted with a few x rows:
 * the gemv kernels of a decode step and of products below the tile path
 * (matmul.c), in AVX2 integers where the pair has them (the same sums as
 * ggml's vec_dot kernels).  Compiled per ISA level; empty below AVX2. */
#include "level.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef __AVX2__
#include <immintrin.h>

#include "kquant_simd.h"
#include "kvformat.h"
#include "qdot.h"

static inline float f16_scale(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
#ifdef __F16C__
    return _cvtsh_ss(h);
#else
    return kvfs_f16_to_f32(h);
#endif
}

static float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

/* Row `q` (Q4_0, Q4_1 or Q8_0) dotted with n <= QMM_GEMM_MIN_ROWS rows of x
 * (stride in): each 32-weight block decoded once into four registers, as
 * kvfs_ggml_dequantize decodes it (same values), then multiplied into
 * every x row.  0 if the type has no kernel here. */
int dot_rows_avx2(uint32_t type, const uint8_t *q, const float *x, int in, int n, float *out)
{
    if (type != KVFS_GGML_Q4_0 && type != KVFS_GGML_Q4_1 && type != KVFS_GGML_Q8_0)
        return 0;
    __m256 acc[QMM_GEMM_MIN_ROWS];
    for (int i = 0; i < n; i++)
        acc[i] = _mm256_setzero_ps();
    const __m128i low4 = _mm_set1_epi8(0x0f);
    for (int b = 0; b < in / 32; b++) {
        __m256 wv[4];
        __m256 vd = _mm256_set1_ps(f16_scale(q));
        if (type == KVFS_GGML_Q8_0) {
            for (int g = 0; g < 4; g++)
                wv[g] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(q + 2 + 8 * g)))), vd);
            q += 34;
        } else {
            int off = type == KVFS_GGML_Q4_1 ? 4 : 2;
            __m256 vm;
            if (type == KVFS_GGML_Q4_1) {
                vm = _mm256_set1_ps(f16_scale(q + 2));
            } else {
                vm = _mm256_mul_ps(vd, _mm256_set1_ps(-8.0f)); /* (q - 8) d = q d - 8 d */
            }
            __m128i raw = _mm_loadu_si128((const __m128i *)(q + off));
            __m128i lo = _mm_and_si128(raw, low4), hi = _mm_and_si128(_mm_srli_epi16(raw, 4), low4);
            __m128i part[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
            for (int g = 0; g < 4; g++)
                wv[g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(part[g])), vd, vm);
            q += type == KVFS_GGML_Q4_1 ? 20 : 18;
        }
        for (int i = 0; i < n; i++) {
            const float *xb = x + (size_t)i * in + 32 * b;
            for (int g = 0; g < 4; g++)
                acc[i] = _mm256_fmadd_ps(wv[g], _mm256_loadu_ps(xb + 8 * g), acc[i]);
        }
    }
    for (int i = 0; i < n; i++)
        out[i] = hsum8(acc[i]);
    return 1;
}

#define QMM_AI static inline __attribute__((always_inline))



/* room for n rows of `in` values as 8-bit blocks of 32 */
static int q8x_alloc(int n, int in, struct q8x *o)
{
    size_t groups = ((size_t)n + QMM_GEMM_MIN_ROWS - 1) / QMM_GEMM_MIN_ROWS;
    size_t nt = groups * QMM_GEMM_MIN_ROWS * (size_t)(in / 32);
    o->q = malloc((size_t)n * in);
    o->dt = calloc(nt, sizeof(float));
    o->st = calloc(nt, sizeof(float));
    if (!o->q || !o->dt || !o->st) {
        q8x_free(o);
        return -ENOMEM;
    }
    return 0;
}

/* where block b of the rows (row b / nbr, its block b % nbr; nbr blocks a
 * row) keeps its scale and sum in dt and st */
static size_t q8x_at(size_t b, size_t nbr)
{
    size_t row = b / nbr;
    return (row / QMM_GEMM_MIN_ROWS * nbr + b % nbr) * QMM_GEMM_MIN_ROWS + row % QMM_GEMM_MIN_ROWS;
}

/* the largest |v| of a block of 32 */
static float amax32(const float *xb)
{
    float amax = 0.0f;
    for (int k = 0; k < 32; k++) {
        float a = fabsf(xb[k]);
        amax = a > amax ? a : amax;
    }
    return amax;
}

int q8x_make(const float *x, int n, int in, struct q8x *o)
{
    size_t nb = (size_t)n * in / 32, nbr = (size_t)in / 32;
    if (q8x_alloc(n, in, o))
        return -ENOMEM;
    for (size_t b = 0; b < nb; b++) {
        const float *xb = x + b * 32;
        float amax = amax32(xb);
        float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f; /* ggml: not 1 / d */
        int32_t s = 0;
        for (int k = 0; k < 32; k++) {
            int v = (int)nearbyintf(xb[k] * id);
            o->q[b * 32 + k] = (int8_t)v;
            s += v;
        }
        o->dt[q8x_at(b, nbr)] = kvfs_f16_to_f32(kvfs_f32_to_f16(d));
        o->st[q8x_at(b, nbr)] = (float)s;
    }
    return 0;
}

void q8x_free(struct q8x *o)
{
    free(o->q), free(o->dt), free(o->st);
    *o = (struct q8x){0};
}

/* x rows that cpu_act_quant(Q8_0 / Q8_1) already rounded (q * d, d an f16
 * value): q, d and the sums found again, checked value for value (d * q ==
 * x for every one).  1 done, 0 when x is not such a row, or -ENOMEM.  The
 * largest |x| is 127 d: d is its f16 rounding of |x| / 127. */
int q8x_recover(const float *x, int n, int in, struct q8x *o)
{
    size_t nb = (size_t)n * in / 32, nbr = (size_t)in / 32;
    if (q8x_alloc(n, in, o))
        return -ENOMEM;
    for (size_t b = 0; b < nb; b++) {
        const float *xb = x + b * 32;
        float amax = amax32(xb);
        float d = kvfs_f16_to_f32(kvfs_f32_to_f16(amax / 127.0f)), id = d != 0.0f ? 1.0f / d : 0.0f;
        int32_t s = 0;
        for (int k = 0; k < 32; k++) {
            int v = (int)nearbyintf(xb[k] * id);
            if (v < -127 || v > 127 || (float)v * d != xb[k]) {
                q8x_free(o);
                return 0;
            }
            o->q[b * 32 + k] = (int8_t)v;
            s += v;
        }
        o->dt[q8x_at(b, nbr)] = d;
        o->st[q8x_at(b, nbr)] = (float)s;
    }
    return 1;
}

/* A 32-weight block of a Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 row: its 32
 * integers in element order (Q4_1, Q5_1: q, unsigned; the others: q - 8,
 * q - 16, q, signed); *dw its scale, *cw what multiplies the x block's
 * scaled sum (m for Q4_1 and Q5_1, else 0): w . x = dw dx (q . qx) +
 * cw dx sum(qx).  The block's size is returned. */
QMM_AI int q32_block(uint32_t type, const uint8_t *q, __m256i *wq, float *dw, float *cw)
{
    const __m128i low4 = _mm_set1_epi8(0x0f);
    *dw = f16_scale(q);
    if (type == KVFS_GGML_Q8_0) {
        *wq = _mm256_loadu_si256((const __m256i *)(q + 2));
        *cw = 0.0f;
        return 34;
    }
    int has_min = type == KVFS_GGML_Q4_1 || type == KVFS_GGML_Q5_1, five = type == KVFS_GGML_Q5_0 || type == KVFS_GGML_Q5_1;
    const uint8_t *qs = q + 2 + 2 * has_min + 4 * five;
    __m128i raw = _mm_loadu_si128((const __m128i *)qs);
    *wq = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), low4), _mm_and_si128(raw, low4));
    if (five) { /* bit e of qh as bit 4 of byte e */
        uint32_t qh;
        memcpy(&qh, q + 2 + 2 * has_min, 4);
        const __m256i sel = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
        const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
        __m256i h = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), sel), bit);
        h = _mm256_and_si256(_mm256_cmpeq_epi8(h, bit), _mm256_set1_epi8(0x10));
        *wq = _mm256_or_si256(*wq, h);
    }
    if (has_min) {
        *cw = f16_scale(q + 2);
    } else { /* q - 8 (q - 16) in the integers, as ggml: no float offset to cancel */
        *wq = _mm256_sub_epi8(*wq, _mm256_set1_epi8(five ? 16 : 8));
        *cw = 0.0f;
    }
    return five ? 22 + 2 * has_min : 18 + 2 * has_min;
}

/* the 32 products of a weight block and an x block, summed by fours into
 * eight int32 (signed w: |w| times x with w's sign).  With AVX-512 VNNI one
 * vpdpbusd makes the same eight sums as maddubs + madd (no pair reaches
 * maddubs' 16-bit saturation: |w| <= 128, |x| <= 127). */
QMM_AI __m256i q32_dot(uint32_t type, __m256i wq, const int8_t *xq)
{
    __m256i x = _mm256_loadu_si256((const __m256i *)xq);
    __m256i u = wq;
    if (type != KVFS_GGML_Q4_1 && type != KVFS_GGML_Q5_1)
        u = _mm256_sign_epi8(wq, wq), x = _mm256_sign_epi8(x, wq);
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, x);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1));
#endif
}

/* Row `q` of a 32-block weight dotted with n <= QMM_GEMM_MIN_ROWS 8-bit x
 * rows (one group: x->dt, x->st its own): per block the integer sum of
 * products, scaled by both blocks' scales, plus the offset times the x
 * block's sum.  The scales (dw d) and offsets (cw d sum) of a block are
 * made for all the group's rows in one vector op each, the same products in
 * the same order per row as the scalar form (dw * d; off + cw * d * sum),
 * so the same sums: the scalar float work per block and row had left the
 * integer units three quarters idle. */
QMM_AI void dot_rows_q8_n(uint32_t type, const uint8_t *q, const struct q8x *x, int in, int n, float *out)
{
    int nb = in / 32, has_min = type == KVFS_GGML_Q4_1 || type == KVFS_GGML_Q5_1;
    __m256 acc[QMM_GEMM_MIN_ROWS], off = _mm256_setzero_ps();
    float off1 = 0.0f;
    float sc[QMM_GEMM_MIN_ROWS] __attribute__((aligned(32))), offs[QMM_GEMM_MIN_ROWS] __attribute__((aligned(32)));
    for (int i = 0; i < n; i++)
        acc[i] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        __m256i wq;
        float dw, cw;
        q += q32_block(type, q, &wq, &dw, &cw);
        if (n == 1) { /* decoding: scalars in registers (the vector form measured 0.88x) */
            float d = x->dt[(size_t)b * QMM_GEMM_MIN_ROWS];
            __m256 s = _mm256_cvtepi32_ps(q32_dot(type, wq, x->q + (size_t)b * 32));
            acc[0] = _mm256_fmadd_ps(s, _mm256_set1_ps(dw * d), acc[0]);
            if (has_min)
                off1 += cw * d * x->st[(size_t)b * QMM_GEMM_MIN_ROWS];
            continue;
        }
        __m256 d8 = _mm256_loadu_ps(x->dt + (size_t)b * QMM_GEMM_MIN_ROWS);
        _mm256_store_ps(sc, _mm256_mul_ps(_mm256_set1_ps(dw), d8));
        if (has_min)
            off = _mm256_add_ps(off, _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(cw), d8),
                                                   _mm256_loadu_ps(x->st + (size_t)b * QMM_GEMM_MIN_ROWS)));
        for (int i = 0; i < n; i++) {
            __m256 s = _mm256_cvtepi32_ps(q32_dot(type, wq, x->q + ((size_t)i * nb + b) * 32));
            acc[i] = _mm256_fmadd_ps(s, _mm256_broadcast_ss(sc + i), acc[i]);
        }
    }
    if (n == 1) {
        out[0] = hsum8(acc[0]) + off1;
        return;
    }
    _mm256_store_ps(offs, off);
    for (int i = 0; i < n; i++)
        out[i] = hsum8(acc[i]) + offs[i];
}

/* each type its own copy (the block decoding specialized), and for one x
 * row (decoding: its accumulator in a register).  Two blocks per step into
 * two accumulators measured no faster (throughput-bound, not latency). */
void dot_rows_q8(uint32_t type, const uint8_t *q, const struct q8x *x, int in, int n, float *out)
{
#define Q8_CASE(T)                                                                                                \
    case T:                                                                                                       \
        if (n == 1)                                                                                               \
            dot_rows_q8_n(T, q, x, in, 1, out);                                                                   \
        else                                                                                                      \
            dot_rows_q8_n(T, q, x, in, n, out);                                                                   \
        break;
    switch (type) {
    Q8_CASE(KVFS_GGML_Q4_0)
    Q8_CASE(KVFS_GGML_Q4_1)
    Q8_CASE(KVFS_GGML_Q5_0)
    Q8_CASE(KVFS_GGML_Q5_1)
    Q8_CASE(KVFS_GGML_Q8_0)
    }
#undef Q8_CASE
}

/* ggml's nearest_int (as quant.c's): round half to even via the float adder */
static inline int q8k_nearest(float v)
{
    float t = v + 12582912.0f;
    int32_t i;
    memcpy(&i, &t, sizeof(i));
    return (i & 0x007fffff) - 0x00400000;
}


static void q8k_sums(struct q8k *b)
{
    for (int k = 0; k < 16; k++) {
        int s = 0;
        for (int l = 0; l < 16; l++)
            s += b->q[16 * k + l];
        b->bsum[k] = (int16_t)s;
    }
    for (int k = 0; k < 8; k++)
        b->psum[k] = (int16_t)(b->bsum[2 * k] + b->bsum[2 * k + 1]);
}

/* the first value of largest magnitude */
static float q8k_max(const float *x)
{
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 256; j++) {
        float a = fabsf(x[j]);
        if (a > amax) {
            amax = a;
            max = x[j];
        }
    }
    return max;
}

/* 256 values quantized as ggml's quantize_row_q8_K (what cpu_act_quant(Q8_K)
 * rounds through): the same q and d */
static void q8k_quant(const float *x, struct q8k *b)
{
    kvfs_ggml_quantize_q8_k(x, b->q, &b->d);
    q8k_sums(b);
}

/* 256 values that cpu_act_quant(Q8_K) already rounded (d * q): q and d
 * found again, checked value for value (d * q == x for every one).  0, or
 * -1 when x is not such a block.  The largest |x| is d * -127 (or d * 127,
 * then -d and -q: the same products); d is the float that gives it, tried
 * from max / -127 a few ulps either way. */
static int q8k_recover(const float *x, struct q8k *b)
{
    float max = q8k_max(x);
    memset(b->q, 0, sizeof(b->q));
    b->d = 0.0f;
    if (max == 0.0f) {
        q8k_sums(b);
        return 0;
    }
    float d0 = max / -127.0f, c = d0;
    for (int t = 0; t < 5; t++) { /* d0, +1, -1, +2, -2 ulps */
        if (t)
            c = nextafterf(t == 3 ? nextafterf(d0, INFINITY) : t == 4 ? nextafterf(d0, -INFINITY) : d0,
                           t & 1 ? INFINITY : -INFINITY);
        if (c * -127.0f != max)
            continue;
        float ic = 1.0f / c;
        int j = 0;
        for (; j < 256; j++) {
            int v = q8k_nearest(x[j] * ic);
            if (v < -128 || v > 127 || c * (float)v != x[j])
                break;
            b->q[j] = (int8_t)v;
        }
        if (j == 256) {
            b->d = c;
            q8k_sums(b);
            return 0;
        }
    }
    return -1;
}

/* n rows of `in` values as Q8_K blocks (row i's at *o + i * in / 256):
 * quantized (quant), or recovered from values already rounded; *o NULL
 * when they are not (then the caller multiplies in float) */
int q8k_rows(const float *x, int n, int in, int quant, struct q8k **o)
{
    size_t nb = (size_t)n * in / 256;
    struct q8k *b;
    *o = NULL;
    if (posix_memalign((void **)&b, 64, sizeof(*b) * nb))
        return -ENOMEM;
    for (size_t k = 0; k < nb; k++) {
        if (quant) {
            q8k_quant(x + k * 256, b + k);
        } else if (q8k_recover(x + k * 256, b + k)) {
            free(b);
            return 0;
        }
    }
    *o = b;
    return 0;
}

/* 16-bit lane lo of v's low 128 bits in all of its 8 lanes, lane hi of the
 * high 128 bits in all of those */
QMM_AI __m256i bcast16(__m256i v, int lo, int hi)
{
    return _mm256_shuffle_epi8(v, _mm256_set_m128i(_mm_set1_epi16((short)((2 * hi + 1) << 8 | 2 * hi)),
                                                   _mm_set1_epi16((short)((2 * lo + 1) << 8 | 2 * lo))));
}

static float hsum4(__m128 s)
{
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

/* Row `q` of a Q4_K (five = 0) or Q5_K weight dotted with n Q8_K x rows,
 * as ggml's vec_dot_q4_K_q8_K / q5_K_q8_K: per super-block
 * d dx sum_s sc[s] (q_s . qx_s) - dmin dx sum_s m[s] sum(qx_s), the
 * integer sums exact. */
QMM_AI void dot_rows_q45k_n(const uint8_t *q, const struct q8k *x, int nb, int n, int five, float *out)
{
    __m256 acc[QMM_GEMM_MIN_ROWS];
    __m128 accm[QMM_GEMM_MIN_ROWS];
    for (int i = 0; i < n; i++)
        acc[i] = _mm256_setzero_ps(), accm[i] = _mm_setzero_ps();
    for (int b = 0; b < nb; b++, q += five ? 176 : 144) {
        float dw = f16_scale(q), mw = f16_scale(q + 2);
        __m128i sm = kq_scales_mins(q + 4); /* the eight 6-bit scales, then the eight mins */
        __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
        __m128i m16 = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
        const uint8_t *qs = q + (five ? 48 : 16);
        __m256i hb = five ? _mm256_loadu_si256((const __m256i *)(q + 16)) : _mm256_setzero_si256();
        __m256i isum[QMM_GEMM_MIN_ROWS];
        for (int i = 0; i < n; i++)
            isum[i] = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) { /* 64 values: low nibbles sub-block 2j, high 2j + 1 */
            __m256i lo, hi;
            kq_q45_chunk(_mm256_loadu_si256((const __m256i *)(qs + 32 * j)), five, &hb, &lo, &hi);
            __m256i slo = bcast16(sc16, 2 * j, 2 * j), shi = bcast16(sc16, 2 * j + 1, 2 * j + 1);
            for (int i = 0; i < n; i++) {
                const int8_t *xq = x[(size_t)i * nb + b].q + 64 * j;
                __m256i plo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, _mm256_load_si256((const __m256i *)xq)), slo);
                __m256i phi =
                    _mm256_madd_epi16(_mm256_maddubs_epi16(hi, _mm256_load_si256((const __m256i *)(xq + 32))), shi);
                isum[i] = _mm256_add_epi32(isum[i], _mm256_add_epi32(plo, phi));
            }
        }
        for (int i = 0; i < n; i++) {
            const struct q8k *xb = &x[(size_t)i * nb + b];
            __m128i mins = _mm_madd_epi16(m16, _mm_loadu_si128((const __m128i *)xb->psum));
            acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(dw * xb->d), _mm256_cvtepi32_ps(isum[i]), acc[i]);
            accm[i] = _mm_fmadd_ps(_mm_set1_ps(mw * xb->d), _mm_cvtepi32_ps(mins), accm[i]);
        }
    }
    for (int i = 0; i < n; i++)
        out[i] = hsum8(acc[i]) - hsum4(accm[i]);
}

/* Row `q` of a Q6_K weight dotted with n Q8_K x rows, as ggml's
 * vec_dot_q6_K_q8_K: per super-block d dx sum_k sc[k] ((q_k - 32) . qx_k)
 * over its 16 sub-blocks of 16; q - 32 in the int8s (signed products as
 * Q8_0's), so that each lane's sum is exact and centred */
QMM_AI void dot_rows_q6k_n(const uint8_t *q, const struct q8k *x, int nb, int n, float *out)
{
    __m256 acc[QMM_GEMM_MIN_ROWS];
    for (int i = 0; i < n; i++)
        acc[i] = _mm256_setzero_ps();
    const __m256i m32 = _mm256_set1_epi8(32);
    for (int b = 0; b < nb; b++, q += 210) {
        float dw = f16_scale(q + 208);
        __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(q + 192)));
        __m256i isum[QMM_GEMM_MIN_ROWS];
        for (int i = 0; i < n; i++)
            isum[i] = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) { /* 128 values: ql[64h..], qh[32h..], scales 8h.. */
            const uint8_t *ql = q + 64 * h, *qh = q + 128 + 32 * h;
            __m256i sh = _mm256_broadcastsi128_si256(h ? _mm256_extracti128_si256(sc16, 1) : _mm256_castsi256_si128(sc16));
            __m256i w[4];
            kq_q6_half(ql, qh, w);
            for (int c = 0; c < 4; c++) { /* values 128h + 32c..: scales 8h + 2c, 8h + 2c + 1 */
                __m256i s = bcast16(sh, 2 * c, 2 * c + 1);
                __m256i ws = _mm256_sub_epi8(w[c], m32), wa = _mm256_sign_epi8(ws, ws);
                for (int i = 0; i < n; i++) {
                    __m256i xq = _mm256_load_si256((const __m256i *)(x[(size_t)i * nb + b].q + 128 * h + 32 * c));
                    __m256i p = _mm256_maddubs_epi16(wa, _mm256_sign_epi8(xq, ws));
                    isum[i] = _mm256_add_epi32(isum[i], _mm256_madd_epi16(p, s));
                }
            }
        }
        for (int i = 0; i < n; i++)
            acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(dw * x[(size_t)i * nb + b].d), _mm256_cvtepi32_ps(isum[i]), acc[i]);
    }
    for (int i = 0; i < n; i++)
        out[i] = hsum8(acc[i]);
}

/* one copy per type and for one x row (decoding: its accumulators in registers) */
void dot_rows_qk(uint32_t type, const uint8_t *q, const struct q8k *x, int nb, int n, float *out)
{
    if (type == KVFS_GGML_Q6_K)
        n == 1 ? dot_rows_q6k_n(q, x, nb, 1, out) : dot_rows_q6k_n(q, x, nb, n, out);
    else if (type == KVFS_GGML_Q5_K)
        n == 1 ? dot_rows_q45k_n(q, x, nb, 1, 1, out) : dot_rows_q45k_n(q, x, nb, n, 1, out);
    else
        n == 1 ? dot_rows_q45k_n(q, x, nb, 1, 0, out) : dot_rows_q45k_n(q, x, nb, n, 0, out);
}
#endif

