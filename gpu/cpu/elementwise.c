/* elementwise.c - the CPU backend's row-wise and elementwise operations:
 * norms, RoPE, adds, gated activations, row gathers and top-k.  Compiled
 * per ISA level (GeGLU's table read is AVX2 where there is AVX2). */
#include "level.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX2__) || defined(__F16C__)
#include <immintrin.h>
#endif

#include "gelu.h"
#include "internal.h"
#include "kvformat.h" /* f16 conversions */

struct rmsnorm_args {
    const float *x, *g;
    float *y;
    int dim;
    float eps;
};

static void rmsnorm_rows(void *arg, size_t lo, size_t hi)
{
    const struct rmsnorm_args *a = arg;
    int dim = a->dim;
    for (size_t i = lo; i < hi; i++) {
        const float *xr = a->x + i * dim;
        float *yr = a->y + i * dim;
        double ss = 0;
        for (int j = 0; j < dim; j++)
            ss += (double)xr[j] * xr[j];
        float scale = (float)(1.0 / sqrt(ss / dim + a->eps));
        for (int j = 0; j < dim; j++)
            yr[j] = xr[j] * scale * a->g[j];
    }
}

int cpu_rmsnorm(void *ctx, const float *x, const float *g, float *y, int n, int dim, float eps)
{
    struct rmsnorm_args a = {x, g, y, dim, eps};
    if (n > 0)
        cpu_par_for(ctx, (size_t)n, (size_t)dim, rmsnorm_rows, &a);
    return 0;
}

struct rope_args {
    float *x;
    const int32_t *pos;
    const float *inv, *ff; /* ff: rope_freqs, or NULL */
    int n_heads, head_dim, half, style;
};

static void rope_rows(void *arg, size_t lo, size_t hi)
{
    const struct rope_args *a = arg;
    int half = a->half;
    float cs[2048], sn[2048]; /* the last row's angles: a re-rotation's rows share their chunk's */
    for (size_t i = lo; i < hi; i++) {
        if (i == lo || a->pos[i] != a->pos[i - 1])
            for (int j = 0; j < half; j++) {
                float t = (float)a->pos[i] * a->inv[j];
                if (a->ff)
                    t /= a->ff[j]; /* ggml's rope_ext: theta / freq_factor */
                cs[j] = cosf(t), sn[j] = sinf(t);
            }
        for (int j = 0; j < half; j++) {
            float c = cs[j], s = sn[j];
            for (int h = 0; h < a->n_heads; h++) {
                float *v = a->x + (i * a->n_heads + h) * a->head_dim;
                int i0 = a->style == KVFS_ROPE_STYLE_NEOX ? j : 2 * j;
                int i1 = a->style == KVFS_ROPE_STYLE_NEOX ? j + half : 2 * j + 1;
                float x0 = v[i0], x1 = v[i1];
                v[i0] = x0 * c - x1 * s;
                v[i1] = x0 * s + x1 * c;
            }
        }
    }
}

int cpu_rope(void *ctx, float *x, const int32_t *pos, int n, int n_heads, int head_dim, int rope_dim,
                    float theta, int style, const float *freq_factors)
{
    int half = rope_dim / 2;
    if (half > 2048)
        return -EINVAL;
    float inv[2048];
    for (int j = 0; j < half; j++)
        inv[j] = powf(theta, -2.0f * (float)j / (float)rope_dim);
    struct rope_args a = {x, pos, inv, freq_factors, n_heads, head_dim, half, style};
    if (n > 0)
        cpu_par_for(ctx, (size_t)n, (size_t)n_heads * head_dim, rope_rows, &a);
    return 0;
}

/* O3: at -O2 GCC 12 left this scalar (out may alias a, and its cheap cost
 * model does not version loops for that); the same sums, 8 or 16 at a time */
__attribute__((optimize("O3"))) static void add_range(void *arg, size_t lo, size_t hi)
{
    const struct ew_args *e = arg;
    for (size_t i = lo; i < hi; i++)
        e->out[i] = e->a[i] + e->b[i];
}

int cpu_add(void *ctx, const float *a, const float *b, float *out, size_t count)
{
    struct ew_args e = {a, b, out, 0.0f};
    cpu_par_for(ctx, count, 1, add_range, &e);
    return 0;
}

static void swiglu_range(void *arg, size_t lo, size_t hi)
{
    const struct ew_args *e = arg;
    for (size_t i = lo; i < hi; i++) {
        float g = e->a[i];
        e->out[i] = g / (1.0f + expf(-g)) * e->b[i];
    }
}

int cpu_swiglu(void *ctx, const float *gate, const float *up, float *out, size_t count)
{
    struct ew_args e = {gate, up, out, 0.0f};
    cpu_par_for(ctx, count, 1, swiglu_range, &e);
    return 0;
}

static void scale_range(void *arg, size_t lo, size_t hi)
{
    const struct ew_args *e = arg;
    for (size_t i = lo; i < hi; i++)
        e->out[i] = e->a[i] * e->s;
}

int cpu_scale(void *ctx, const float *x, float s, float *y, size_t count)
{
    struct ew_args e = {x, NULL, y, s};
    cpu_par_for(ctx, count, 1, scale_range, &e);
    return 0;
}

struct swiglu_oai_args {
    const float *gate, *up;
    float *out;
    float alpha, limit;
};

/* ggml's swiglu_oai, operation for operation (libm's expf, as ggml-cpu's
 * scalar loop) */
static void swiglu_oai_range(void *arg, size_t lo, size_t hi)
{
    const struct swiglu_oai_args *a = arg;
    for (size_t i = lo; i < hi; i++) {
        float x = a->gate[i] < a->limit ? a->gate[i] : a->limit;
        float y = a->up[i] < -a->limit ? -a->limit : a->up[i] > a->limit ? a->limit : a->up[i];
        float glu = x / (1.f + expf(a->alpha * (-x)));
        a->out[i] = glu * (y + 1.f);
    }
}

int cpu_swiglu_oai(void *ctx, const float *gate, const float *up, float *out, size_t count, float alpha, float limit)
{
    struct swiglu_oai_args a = {gate, up, out, alpha, limit};
    cpu_par_for(ctx, count, 1, swiglu_oai_range, &a);
    return 0;
}

struct mul_rows_args {
    const float *x, *s;
    float *y;
    int dim;
};

static void mul_rows_range(void *arg, size_t lo, size_t hi)
{
    const struct mul_rows_args *a = arg;
    for (size_t i = lo; i < hi; i++)
        for (int j = 0; j < a->dim; j++)
            a->y[i * a->dim + j] = a->x[i * a->dim + j] * a->s[i];
}

int cpu_mul_rows(void *ctx, const float *x, const float *s, float *y, int n, int dim)
{
    struct mul_rows_args a = {x, s, y, dim};
    if (n > 0)
        cpu_par_for(ctx, (size_t)n, (size_t)dim, mul_rows_range, &a);
    return 0;
}

/* ggml's GELU (tanh form) of every f16 value, rounded to f16: the table
 * ggml-cpu evaluates GELU through (GGML_GELU_FP16), so the same products */
static float gelu_table[1 << 16];
static pthread_once_t gelu_once = PTHREAD_ONCE_INIT;

static void gelu_table_init(void)
{
    for (uint32_t i = 0; i < (1u << 16); i++) {
        float g = kvfs_gelu_tanh(kvfs_f16_to_f32((uint16_t)i));
        gelu_table[i] = kvfs_f16_to_f32(kvfs_f32_to_f16(g));
    }
}

static void geglu_range(void *arg, size_t lo, size_t hi)
{
    const struct ew_args *e = arg;
    size_t i = lo;
#if defined(__F16C__) && defined(__AVX2__) /* the gather and the widening are AVX2 */
    /* 8 at a time, the same values: cvtps_ph rounds to nearest even as
     * kvfs_f32_to_f16 does (round_f16 relies on it too); the table read by
     * a gather.  The scalar loop was 4% of a Gemma 3 blend. */
    const __m256 lo10 = _mm256_set1_ps(-10.0f), hi10 = _mm256_set1_ps(10.0f);
    for (; i + 8 <= hi; i += 8) {
        __m256 g = _mm256_loadu_ps(e->a + i), b = _mm256_loadu_ps(e->b + i);
        __m256i h = _mm256_cvtepu16_epi32(_mm256_cvtps_ph(g, _MM_FROUND_TO_NEAREST_INT));
        __m256 r = _mm256_mul_ps(_mm256_i32gather_ps(gelu_table, h, 4), b);
        r = _mm256_blendv_ps(r, _mm256_mul_ps(g, b), _mm256_cmp_ps(g, hi10, _CMP_GE_OQ));
        r = _mm256_andnot_ps(_mm256_cmp_ps(g, lo10, _CMP_LE_OQ), r);
        _mm256_storeu_ps(e->out + i, r);
    }
#endif
    for (; i < hi; i++) {
        float g = e->a[i];
        e->out[i] = g <= -10.0f ? 0.0f : g >= 10.0f ? g * e->b[i] : gelu_table[kvfs_f32_to_f16(g)] * e->b[i];
    }
}

int cpu_geglu(void *ctx, const float *gate, const float *up, float *out, size_t count)
{
    pthread_once(&gelu_once, gelu_table_init);
    struct ew_args e = {gate, up, out, 0.0f};
    cpu_par_for(ctx, count, 1, geglu_range, &e);
    return 0;
}

int cpu_get_rows(void *ctx, const float *table, const int32_t *ids, float *out, int n, int dim)
{
    (void)ctx;
    for (int i = 0; i < n; i++)
        memcpy(out + (size_t)i * dim, table + (size_t)ids[i] * dim, sizeof(float) * dim);
    return 0;
}


int cpu_row_sqdiff(void *ctx, const float *a, const float *b, float *out, int n, int dim)
{
    (void)ctx;
    for (int i = 0; i < n; i++) {
        double s = 0;
        for (int j = 0; j < dim; j++) {
            double d = (double)a[(size_t)i * dim + j] - b[(size_t)i * dim + j];
            s += d * d;
        }
        out[i] = (float)s;
    }
    return 0;
}

int cpu_gather_rows(void *ctx, const float *src, const int32_t *idx, float *out, int n_idx, int dim)
{
    (void)ctx;
    for (int i = 0; i < n_idx; i++)
        memcpy(out + (size_t)i * dim, src + (size_t)idx[i] * dim, sizeof(float) * dim);
    return 0;
}

int cpu_scatter_rows(void *ctx, const float *src, const int32_t *idx, float *dst, int n_idx, int dim)
{
    (void)ctx;
    for (int i = 0; i < n_idx; i++)
        memcpy(dst + (size_t)idx[i] * dim, src + (size_t)i * dim, sizeof(float) * dim);
    return 0;
}

struct ranked {
    float score;
    int32_t row;
};

static int by_score_desc(const void *a, const void *b)
{
    const struct ranked *x = a, *y = b;
    return x->score < y->score ? 1 : x->score > y->score ? -1 : (x->row > y->row) - (x->row < y->row);
}

static int by_row(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

int cpu_topk(void *ctx, const float *scores, const uint8_t *forced, int n, int k, int32_t *out)
{
    (void)ctx;
    if (k < 0 || k > n)
        return -EINVAL;
    if (k == 0)
        return 0;
    struct ranked *r = malloc(sizeof(*r) * (size_t)n);
    if (!r)
        return -ENOMEM;
    for (int i = 0; i < n; i++)
        r[i] = (struct ranked){forced && forced[i] ? INFINITY : scores[i], i};
    qsort(r, (size_t)n, sizeof(*r), by_score_desc);
    for (int i = 0; i < k; i++)
        out[i] = r[i].row;
    free(r);
    qsort(out, (size_t)k, sizeof(int32_t), by_row);
    return 0;
}

