/* act_quant.c - activations rounded as ggml rounds them before an integer
 * product (Q8_0, Q8_1, Q8_K), and values rounded to f16.  Compiled per ISA
 * level: AVX2 and F16C where the level has them, the same values. */
#include "level.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#if defined(__AVX2__) || defined(__F16C__)
#include <immintrin.h>
#endif

#include "ggml_quant.h"
#include "internal.h"
#include "kvformat.h"

#ifdef __AVX2__
/* max |x[j]| over n (a multiple of 8) values, 8 at a time: max_ps(a, m) is
 * a > m ? a : m, so a NaN is skipped as the scalar `a > amax` skips it
 * (the 8-bit roundings below share it) */
static float absmax_avx2(const float *x, int n)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_setzero_ps();
    for (int j = 0; j < n; j += 8)
        m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), m);
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    return _mm_cvtss_f32(m4);
}

/* One block of 256 rounded through Q8_K as quant.c's act_q8_k does (ggml's
 * quantize_row_q8_K, then d * q), 8 values at a time: the scalar loops were
 * 2-3% of a Gemma 3 prefill or blend.  The same values (test_qmm compares
 * them): the sign comes from the first value of the largest magnitude;
 * round_ps is round-half-even as nearest_int is for |v| <= 127.
 * A NaN input is outside the definition's domain (the scalar q of a NaN
 * depends on its payload; this gives 0). */
static void q8k_round_block(const float *x, float *y)
{
    float amax = absmax_avx2(x, 256), max = 0.0f;
    if (amax == 0.0f) {
        memset(y, 0, sizeof(float) * 256);
        return;
    }
    for (int j = 0; j < 256; j++)
        if (fabsf(x[j]) == amax) {
            max = x[j];
            break;
        }
    float iscale = -127.0f / max, d = 1 / iscale;
    __m256 vs = _mm256_set1_ps(iscale), vd = _mm256_set1_ps(d);
    const __m256i top = _mm256_set1_epi32(127);
    for (int j = 0; j < 256; j += 8) {
        __m256 t = _mm256_round_ps(_mm256_mul_ps(vs, _mm256_loadu_ps(x + j)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m256i q = _mm256_min_epi32(_mm256_cvttps_epi32(t), top);
        /* a NaN product truncates to INT_MIN: 0 here (never a large q) */
        q = _mm256_andnot_si256(_mm256_cmpeq_epi32(q, _mm256_set1_epi32(INT_MIN)), q);
        _mm256_storeu_ps(y + j, _mm256_mul_ps(vd, _mm256_cvtepi32_ps(q)));
    }
}
#endif

/* blocks of 256: whole blocks, so the round trip has nothing to refuse */
static void q8k_round_range(void *arg, size_t lo, size_t hi)
{
    const struct ew_args *e = arg;
#ifdef __AVX2__
    for (size_t b = lo; b < hi; b++)
        q8k_round_block(e->a + b * 256, e->out + b * 256);
#else
    (void)kvfs_ggml_act_roundtrip(KVFS_GGML_Q8_K, e->a + lo * 256, e->out + lo * 256, (uint64_t)(hi - lo) * 256);
#endif
}

/* One block of 32 values rounded through Q8_0 / Q8_1 as ggml does: d =
 * max|x| / 127 (to f16), x / d to the nearest integer, times d. */
static void q8_round_block(const float *xb, float *yb)
{
#ifdef __AVX2__
    /* the scalar loop's values, 8 at a time (it compiled to scalar code: a
     * tenth of a prefill): max_ps(a, m) is a > m ? a : m, NaN included;
     * round_ps is nearbyintf; truncating an integral value is the (int)
     * cast, 0 for -0 as it is (test_qmm compares the two) */
    float amax = absmax_avx2(xb, 32);
    float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f; /* ggml: not 1 / d */
    __m256 dh = _mm256_set1_ps(kvfs_f16_to_f32(kvfs_f32_to_f16(d))), scale = _mm256_set1_ps(id);
    for (int j = 0; j < 32; j += 8) {
        __m256 t = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(xb + j), scale),
                                   _MM_FROUND_CUR_DIRECTION | _MM_FROUND_NO_EXC);
        _mm256_storeu_ps(yb + j, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvttps_epi32(t)), dh));
    }
#else
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) { /* not fmaxf: a libm call per value */
        float a = fabsf(xb[j]);
        amax = a > amax ? a : amax;
    }
    float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f; /* ggml: not 1 / d */
    float dh = kvfs_f16_to_f32(kvfs_f32_to_f16(d));
    for (int j = 0; j < 32; j++)
        yb[j] = (float)(int)nearbyintf(xb[j] * id) * dh; /* via int, as ggml: 0, never -0 */
#endif
}

static void q8_round_range(void *arg, size_t lo, size_t hi) /* blocks of 32 */
{
    const struct ew_args *e = arg;
    for (size_t b = lo; b < hi; b++)
        q8_round_block(e->a + b * 32, e->out + b * 32);
}

int cpu_act_quant(void *ctx, const float *x, float *y, int n, int dim, int type)
{
    struct ew_args e = {x, NULL, y, 0.0f};
    if (n <= 0)
        return 0;
    if (type == KVFS_GGML_Q8_K) { /* the K-quants' partner: blocks of 256 */
        if (dim % 256)
            return -EINVAL;
        cpu_par_for(ctx, (size_t)n * dim / 256, 256, q8k_round_range, &e);
        return 0;
    }
    if (type != KVFS_GGML_Q8_0 && type != KVFS_GGML_Q8_1) /* these two quantize the values the same way */
        return -ENOTSUP;
    if (dim % 32)
        return -EINVAL;
    cpu_par_for(ctx, (size_t)n * dim / 32, 32, q8_round_range, &e);
    return 0;
}

struct round_args {
    float *x;
    size_t count;
};

/* units of 8 values: each value takes the path (vector or tail) it took on one thread */
static void round_f16_range(void *arg, size_t lo, size_t hi)
{
    const struct round_args *r = arg;
    size_t i = lo * 8, end = hi * 8 < r->count ? hi * 8 : r->count;
    float *x = r->x;
#ifdef __F16C__
    for (; i + 8 <= end; i += 8)
        _mm256_storeu_ps(x + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
#endif
    for (; i < end; i++)
        x[i] = kvfs_f16_to_f32(kvfs_f32_to_f16(x[i]));
}

int cpu_round_f16(void *ctx, float *x, size_t count)
{
    struct round_args r = {x, count};
    cpu_par_for(ctx, (count + 7) / 8, 8, round_f16_range, &r);
    return 0;
}

