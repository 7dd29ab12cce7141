/* backend_cpu.c - the CPU reference backend: host memory, OpenBLAS sgemm for
 * the matrix products (and for attention scores), plain loops elsewhere. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef __F16C__
#include <immintrin.h>
#endif

#include "backend.h"
#include "blas.h"
#include "gelu.h"
#include "dequant_simd.h"
#include "gguf.h" /* ggml row sizes and dequantization */
#include "kvformat.h"
#include "kvquant.h"
#include "cpu_pool.h"
#include "parallel.h"
#include "q8k.h"
#ifdef __AVX2__
#include "kquant_simd.h"
#endif
#include "qmm_vnni.h"

/* A scratch buffer: a matmul's decoded tile, an attention job's scores. */
struct scratch {
    struct scratch *next;
    float *p;
    size_t len; /* floats */
};

struct cpu_ctx {
    const struct kvfs_blas *blas;
    int n_threads;
    struct cpu_pool *pool; /* workers for matmuls and attention */
    /* scratch buffers not in use, kept for the next call: per context, not
     * per thread, so what stays allocated follows the calls in flight (the
     * blends running), not every thread that ever ran one */
    pthread_mutex_t scratch_lock;
    struct scratch *spare;
};

struct kvfs_weight {
    float *w;          /* [out_dim][in_dim], or NULL when kept encoded: */
    const uint8_t *q;  /* out_dim rows of row_bytes, ggml type `type` (the caller's mapping) */
    uint32_t type;
    size_t row_bytes;
    int out_dim, in_dim;
};

static int cpu_alloc(void *ctx, size_t bytes, void **dev)
{
    (void)ctx;
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0)
        return -ENOMEM;
    *dev = p;
    return 0;
}

static void cpu_free(void *ctx, void *dev)
{
    (void)ctx;
    free(dev);
}

static int cpu_copy(void *ctx, void *dst, const void *src, size_t bytes)
{
    (void)ctx;
    if (dst != src)
        memmove(dst, src, bytes);
    return 0;
}

static int cpu_sync(void *ctx)
{
    (void)ctx;
    return 0;
}

static int cpu_weight_create(void *vctx, const float *host, int out_dim, int in_dim, struct kvfs_weight **out)
{
    (void)vctx;
    struct kvfs_weight *w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    size_t n = (size_t)out_dim * in_dim;
    if (posix_memalign((void **)&w->w, 64, n * sizeof(float)) != 0) {
        free(w);
        return -ENOMEM;
    }
    memcpy(w->w, host, n * sizeof(float));
    w->out_dim = out_dim;
    w->in_dim = in_dim;
    *out = w;
    return 0;
}

/* n values of a weight row to f32: the SIMD decoder where this build has one
 * for the type (the same values), else the definition */
static int decode_row(uint32_t type, const void *src, float *dst, uint64_t n)
{
    int rc = kvfs_dequant_simd(type, src, dst, (size_t)n);
    return rc == -ENOTSUP ? kvfs_ggml_dequantize(type, src, dst, n) : rc;
}

static int cpu_weight_create_quant(void *vctx, uint32_t type, const void *data, size_t row_bytes, int out_dim,
                                   int in_dim, struct kvfs_weight **out)
{
    (void)vctx;
    float probe[32];
    if (row_bytes == 0 || row_bytes != kvfs_ggml_row_size(type, (uint64_t)in_dim) ||
        kvfs_ggml_dequantize(type, data, probe, in_dim < 32 ? (uint64_t)in_dim : 32) == -ENOTSUP)
        return -ENOTSUP;
    struct kvfs_weight *w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    w->q = data;
    w->type = type;
    w->row_bytes = row_bytes;
    w->out_dim = out_dim;
    w->in_dim = in_dim;
    *out = w;
    return 0;
}

static int cpu_weight_rows(void *vctx, const struct kvfs_weight *w, const int32_t *ids, float *out, int n)
{
    (void)vctx;
    for (int i = 0; i < n; i++) {
        float *o = out + (size_t)i * w->in_dim;
        if (ids[i] < 0 || ids[i] >= w->out_dim)
            return -EINVAL;
        int rc = w->w ? (memcpy(o, w->w + (size_t)ids[i] * w->in_dim, sizeof(float) * w->in_dim), 0)
                      : decode_row(w->type, w->q + (size_t)ids[i] * w->row_bytes, o, (uint64_t)w->in_dim);
        if (rc)
            return rc;
    }
    return 0;
}

static void cpu_weight_free(void *ctx, struct kvfs_weight *w)
{
    (void)ctx;
    if (w) {
        free(w->w);
        free(w);
    }
}

/* Jobs a product or an attention call is split into: one per thread. */
static int pool_jobs(const struct cpu_ctx *ctx)
{
    return ctx->n_threads < 1 ? 1 : ctx->n_threads > KVFS_PARALLEL_MAX ? KVFS_PARALLEL_MAX : ctx->n_threads;
}

/* Row-wise and elementwise work (norms, RoPE, activation rounding, gating,
 * adds) on the pool: units [0, n) in one share per job, when there are at
 * least PAR_MIN_VALUES values to pay for waking the workers (a decoded
 * token's single row stays on the caller).  Each unit's arithmetic is the
 * same whichever share it falls in.  On one thread these were two fifths of
 * a prefill's time. */
#define PAR_MIN_VALUES 32768
struct par_job {
    void (*fn)(void *arg, size_t lo, size_t hi);
    void *arg;
    size_t lo, hi;
};

static void *par_job_run(void *a)
{
    struct par_job *j = a;
    if (j->lo < j->hi)
        j->fn(j->arg, j->lo, j->hi);
    return NULL;
}

static void par_for(struct cpu_ctx *ctx, size_t n, size_t values_per_unit, void (*fn)(void *, size_t, size_t),
                    void *arg)
{
    int nt = pool_jobs(ctx);
    if (nt < 2 || n < 2 || n * values_per_unit < PAR_MIN_VALUES) {
        if (n)
            fn(arg, 0, n);
        return;
    }
    struct par_job jobs[KVFS_PARALLEL_MAX];
    size_t per = (n + (size_t)nt - 1) / (size_t)nt;
    for (int t = 0; t < nt; t++) {
        size_t lo = (size_t)t * per < n ? (size_t)t * per : n, hi = lo + per < n ? lo + per : n;
        jobs[t] = (struct par_job){fn, arg, lo, hi};
    }
    cpu_pool_run(ctx->pool, par_job_run, jobs, sizeof(jobs[0]), nt);
}

/* A scratch buffer of at least `floats` (a spare one when there is; NULL:
 * out of memory).  Give it back with scratch_put. */
static struct scratch *scratch_get(struct cpu_ctx *ctx, size_t floats)
{
    pthread_mutex_lock(&ctx->scratch_lock);
    struct scratch **pp = &ctx->spare, **best = NULL;
    for (; *pp; pp = &(*pp)->next)
        if (!best || ((*pp)->len >= floats && ((*best)->len < floats || (*pp)->len < (*best)->len)) ||
            ((*best)->len < floats && (*pp)->len > (*best)->len))
            best = pp; /* the smallest that fits, else the largest */
    struct scratch *b = best ? *best : NULL;
    if (b)
        *best = b->next;
    pthread_mutex_unlock(&ctx->scratch_lock);
    if (!b && !(b = calloc(1, sizeof(*b))))
        return NULL;
    if (b->len < floats) {
        free(b->p);
        b->len = 0;
        if (posix_memalign((void **)&b->p, 64, floats * sizeof(float)) != 0) {
            b->p = NULL;
            free(b);
            return NULL;
        }
        b->len = floats;
    }
    return b;
}

static void scratch_put(struct cpu_ctx *ctx, struct scratch *b)
{
    if (!b)
        return;
    pthread_mutex_lock(&ctx->scratch_lock);
    b->next = ctx->spare;
    ctx->spare = b;
    pthread_mutex_unlock(&ctx->scratch_lock);
}

/* OpenBLAS runs single-threaded (kvfs_backend_cpu_init): its own threads
 * spin on sched_yield between calls, and with two blends at once on two
 * cores they took half the CPU time.  The backend splits each product over
 * its own pool instead; a job is one single-threaded sgemm. */
struct gemm_job {
    const struct kvfs_blas *blas;
    int m, n, k;      /* C[m][n] = A[m][k] . B[n][k]^T */
    const float *a, *b;
    float *c;
    int lda, ldb, ldc;
};

static void *gemm_run(void *arg)
{
    struct gemm_job *j = arg;
    if (j->m > 0 && j->n > 0)
        j->blas->sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, j->m, j->n, j->k, 1.0f, j->a, j->lda, j->b, j->ldb,
                       0.0f, j->c, j->ldc);
    return NULL;
}

/* y[m][ldy] (columns [0, n)) = x[m][k] . w[n][k]^T on the pool: by rows of x
 * when there are many (each job packs its share of x and all of w), else by
 * rows of w (each packs all of x, which is short). */
static void parallel_gemm(struct cpu_ctx *ctx, const float *x, int m, const float *w, int n, int k, float *y,
                          int ldy)
{
    struct gemm_job jobs[KVFS_PARALLEL_MAX];
    int nt = pool_jobs(ctx);
    int by_x = m >= 32 * nt;
    int total = by_x ? m : n, per = (total + nt - 1) / nt;
    for (int t = 0; t < nt; t++) {
        int r0 = t * per < total ? t * per : total, r1 = r0 + per < total ? r0 + per : total;
        jobs[t] = by_x ? (struct gemm_job){ctx->blas, r1 - r0, n, k, x + (size_t)r0 * k, w, y + (size_t)r0 * ldy, k, k, ldy}
                       : (struct gemm_job){ctx->blas, m, r1 - r0, k, x, w + (size_t)r0 * k, y + r0, k, k, ldy};
    }
    cpu_pool_run(ctx->pool, gemm_run, jobs, sizeof(jobs[0]), nt);
}

/* An encoded weight's matmul.  Many rows (prefill, a blend's recompute):
 * rows of W decoded a tile at a time, by every core, into f32, each tile one
 * sgemm, so the decoding is paid once per matmul whatever n is.  Few rows
 * (decode): each core decodes its share of W's rows one at a time and dots
 * it with every x row while it is in cache: W is read once, encoded. */
#define QMM_GEMM_MIN_ROWS 8
/* x rows from which K-quant products take the VNNI panels (qmm_vnni.c);
 * below, the gemv kernels (one W row against 8 x rows) */
#ifndef QMM_VNNI_MIN_ROWS
#define QMM_VNNI_MIN_ROWS 16
#endif
/* 16 MiB of decoded rows per tile: each tile is one sgemm, which packs all
 * of x again, so wide rows want tall tiles (8B shapes, 4096-wide rows, 512
 * tokens: 8.1 tokens/s with 4 MiB tiles, 11.1 with 16, 9.9 with 64; SmolLM2
 * and Gemma 3 270M unchanged) */
#ifndef QMM_TILE_FLOATS
#define QMM_TILE_FLOATS (1u << 22)
#endif

/* x rows as ggml's 8-bit activation blocks, quantized exactly as
 * cpu_act_quant does: per 32 values int8 q [row][in]; the f16-rounded scale
 * d and (as a float, exact) the sum of q (for the offsets of Q4_0, Q4_1,
 * Q5_0, Q5_1) by groups of QMM_GEMM_MIN_ROWS rows, [group][block][row in
 * group], zero past the last row: the gemv kernel scales a block's products
 * for all of a group's rows in one vector op */
struct q8x {
    int8_t *q;
    float *dt, *st;
};

struct qmm_job {
    const struct kvfs_weight *w;
    const float *x;
    float *y, *tile;
    int n, r0, r1, rc;
    int act; /* x to be quantized to 8-bit blocks first (Q8_0/Q8_1/Q8_K), 0: as is */
    const struct q8x *xq; /* x's 8-bit blocks of 32, or NULL */
    const struct q8k *xk; /* x's Q8_K blocks (K-quant weights), or NULL */
};

static void *qmm_decode(void *arg) /* rows [r0, r1) into tile */
{
    struct qmm_job *j = arg;
    const struct kvfs_weight *w = j->w;
    for (int r = j->r0; r < j->r1 && !j->rc; r++)
        j->rc = decode_row(w->type, w->q + (size_t)r * w->row_bytes, j->tile + (size_t)r * w->in_dim,
                           (uint64_t)w->in_dim);
    return NULL;
}

#ifdef __AVX2__
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
static int dot_rows_avx2(uint32_t type, const uint8_t *q, const float *x, int in, int n, float *out)
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
#endif

#ifdef __AVX2__
#define QMM_AI static inline __attribute__((always_inline))


static void q8x_free(struct q8x *o);

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

static int q8x_make(const float *x, int n, int in, struct q8x *o)
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

static void q8x_free(struct q8x *o)
{
    free(o->q), free(o->dt), free(o->st);
    *o = (struct q8x){0};
}

/* x rows that cpu_act_quant(Q8_0 / Q8_1) already rounded (q * d, d an f16
 * value): q, d and the sums found again, checked value for value (d * q ==
 * x for every one).  1 done, 0 when x is not such a row, or -ENOMEM.  The
 * largest |x| is 127 d: d is its f16 rounding of |x| / 127. */
static int q8x_recover(const float *x, int n, int in, struct q8x *o)
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

static int q32_type(uint32_t type)
{
    return type == KVFS_GGML_Q4_0 || type == KVFS_GGML_Q4_1 || type == KVFS_GGML_Q5_0 || type == KVFS_GGML_Q5_1 ||
           type == KVFS_GGML_Q8_0;
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
static void dot_rows_q8(uint32_t type, const uint8_t *q, const struct q8x *x, int in, int n, float *out)
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
static int q8k_rows(const float *x, int n, int in, int quant, struct q8k **o)
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

static int qk_type(uint32_t type)
{
    return type == KVFS_GGML_Q4_K || type == KVFS_GGML_Q5_K || type == KVFS_GGML_Q6_K;
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
static void dot_rows_qk(uint32_t type, const uint8_t *q, const struct q8k *x, int nb, int n, float *out)
{
    if (type == KVFS_GGML_Q6_K)
        n == 1 ? dot_rows_q6k_n(q, x, nb, 1, out) : dot_rows_q6k_n(q, x, nb, n, out);
    else if (type == KVFS_GGML_Q5_K)
        n == 1 ? dot_rows_q45k_n(q, x, nb, 1, 1, out) : dot_rows_q45k_n(q, x, nb, n, 1, out);
    else
        n == 1 ? dot_rows_q45k_n(q, x, nb, 1, 0, out) : dot_rows_q45k_n(q, x, nb, n, 0, out);
}
#endif

/* y[:, r0..r1) for many x rows, K-quant W: AVX-512 VNNI panels (qmm_vnni.c) */
static void *qmm_vnni_job(void *arg)
{
    struct qmm_job *j = arg;
    const struct kvfs_weight *w = j->w;
    j->rc = kvfs_qmm_vnni(w->type, w->q, w->row_bytes, j->r0, j->r1, j->xk, w->in_dim / 256, j->n, j->y,
                          (size_t)w->out_dim);
    return NULL;
}

static void *qmm_gemv(void *arg) /* y[:, r0..r1) for few x rows */
{
    struct qmm_job *j = arg;
    const struct kvfs_weight *w = j->w;
    if (j->xk && kvfs_qmm_vnni_gemv_has(w->type)) {
        j->rc = kvfs_qmm_vnni_gemv(w->type, w->q, w->row_bytes, j->r0, j->r1, j->xk, w->in_dim / 256, j->n, j->y,
                                   (size_t)w->out_dim);
        return NULL;
    }
    int in = w->in_dim;
    float *row = NULL, dots[QMM_GEMM_MIN_ROWS];
    for (int r = j->r0; r < j->r1 && !j->rc; r++) {
        const uint8_t *q = w->q + (size_t)r * w->row_bytes;
#ifdef __AVX2__
        /* x rows QMM_GEMM_MIN_ROWS at a time against this W row, which
         * stays in cache: W is read from memory once */
        int done = 1;
        for (int g = 0; g < j->n && done; g += QMM_GEMM_MIN_ROWS) {
            int m = j->n - g < QMM_GEMM_MIN_ROWS ? j->n - g : QMM_GEMM_MIN_ROWS;
            if (j->xk) {
                dot_rows_qk(w->type, q, j->xk + (size_t)g * (in / 256), in / 256, m, dots);
            } else if (j->xq) {
                /* rows [g, g + m): group g / QMM_GEMM_MIN_ROWS of dt and st */
                struct q8x xg = {j->xq->q + (size_t)g * in, j->xq->dt + (size_t)g * (in / 32),
                                 j->xq->st + (size_t)g * (in / 32)};
                dot_rows_q8(w->type, q, &xg, in, m, dots);
            } else {
                done = !j->act && dot_rows_avx2(w->type, q, j->x + (size_t)g * in, in, m, dots);
            }
            if (done)
                for (int i = 0; i < m; i++)
                    j->y[(size_t)(g + i) * w->out_dim + r] = dots[i];
        }
        if (done)
            continue;
#endif
        if (!row && !(row = malloc(sizeof(float) * (size_t)in))) {
            j->rc = -ENOMEM;
            break;
        }
        if ((j->rc = decode_row(w->type, q, row, (uint64_t)in)))
            break;
        for (int i = 0; i < j->n; i++) {
            const float *xi = j->x + (size_t)i * in;
            float lane[8] = {0};
            int k = 0;
            for (; k + 8 <= in; k += 8)
                for (int l = 0; l < 8; l++)
                    lane[l] += xi[k + l] * row[k + l];
            float acc = 0.0f;
            for (; k < in; k++)
                acc += xi[k] * row[k];
            for (int l = 0; l < 8; l++)
                acc += lane[l];
            j->y[(size_t)i * w->out_dim + r] = acc;
        }
    }
    (void)dots;
    free(row);
    return NULL;
}

/* Rows of x below which the integer kernels (W read once, in its encoding,
 * against x's 8-bit blocks) beat decoding W to f32 tiles for sgemm.
 * Decoding costs the same whatever n is, so it pays off over many rows; on
 * big matrices it did not within 512.  Measured side by side
 * (bench/qmm_paths.sh, BENCHMARKS "Integer or f32 products"): even at 64
 * rows for SmolLM2's Q4_1, at 128 for Gemma 3 270M's K-quants; for the 8B
 * shapes' K-quants (all forced; the rule covers their 16M-59M-weight matrices) took
 * 0.38x / 0.63x / 0.91x of the time at 38 / 152 / 512 rows.
 * KVFS_QMM_INT_ROWS=N overrides (for such comparisons). */
/* An integer override from the environment, at least lo (else fallback),
 * read once by whichever thread comes first: atomic, since blends run on
 * several threads at once (TSan, 2026-11-26).  *once starts at INT_MIN. */
static int env_int_once(atomic_int *once, const char *name, int lo, int fallback)
{
    int v = atomic_load_explicit(once, memory_order_relaxed);
    if (v == INT_MIN) {
        const char *e = getenv(name);
        v = e && *e && atoi(e) >= lo ? atoi(e) : fallback;
        atomic_store_explicit(once, v, memory_order_relaxed);
    }
    return v;
}

static int int_path_max_rows(const struct kvfs_weight *w)
{
    static atomic_int forced_once = INT_MIN;
    int forced = env_int_once(&forced_once, "KVFS_QMM_INT_ROWS", 0, -1);
    if (forced >= 0)
        return forced;
#ifdef __AVX2__
    if (qk_type(w->type)) /* 8B shapes: 4096 x 4096 and up; Gemma 3 270M's largest is 2048 x 640 */
        return (size_t)w->out_dim * w->in_dim >= ((size_t)8 << 20) ? INT_MAX : 128;
    return 64;
#else
    /* no integer kernels: each W row decoded once and dotted with every x
     * row (a row's dot alone, whatever rows share the call) below 64 rows,
     * as the 32-blocks' integer path; from 8 (as before) a 17-row product's
     * rows differed from those of 16 on SkylakeX (its small-product kernels) */
    (void)w;
    return 64;
#endif
}

static int qmm(struct cpu_ctx *ctx, const struct kvfs_weight *w, const float *x, float *y, int n, int act)
{
    struct qmm_job jobs[KVFS_PARALLEL_MAX];
    int nt = pool_jobs(ctx);
    if (n < int_path_max_rows(w)) {
        /* x's 8-bit blocks made once, for every worker */
        struct q8x xq = {0};
        struct q8k *xk = NULL;
        int rc = 0, has_xq = 0;
#ifdef __AVX2__
        if (qk_type(w->type) && !(w->in_dim % 256))
            rc = q8k_rows(x, n, w->in_dim, act, &xk); /* act 0: x may be Q8_K-rounded already */
        else if (act && q32_type(w->type) && !(w->in_dim % 32))
            has_xq = !(rc = q8x_make(x, n, w->in_dim, &xq));
        else if (q32_type(w->type) && !(w->in_dim % 32) && (rc = q8x_recover(x, n, w->in_dim, &xq)) > 0)
            has_xq = 1, rc = 0; /* x already rounded to 8-bit blocks (a down projection) */
#endif
        /* many rows of x against a K-quant: W in 16-row panels (VNNI), so
         * the rows split on panel bounds */
        int vnni = xk && n >= QMM_VNNI_MIN_ROWS && kvfs_qmm_vnni_has(w->type);
        int per = (w->out_dim + nt - 1) / nt;
        if (vnni)
            per = (per + 15) / 16 * 16;
        for (int t = 0; t < nt && !rc; t++) {
            int r0 = t * per, r1 = r0 + per > w->out_dim ? w->out_dim : r0 + per;
            jobs[t] = (struct qmm_job){w, x, y, NULL, n, r0 < r1 ? r0 : r1, r1, 0, act, has_xq ? &xq : NULL, xk};
        }
        if (!rc)
            cpu_pool_run(ctx->pool, vnni ? qmm_vnni_job : qmm_gemv, jobs, sizeof(jobs[0]), nt);
        for (int t = 0; t < nt && !rc; t++)
            rc = jobs[t].rc;
#ifdef __AVX2__
        q8x_free(&xq);
#endif
        free(xk);
        return rc;
    }
    int tile_rows = (int)(QMM_TILE_FLOATS / (unsigned)w->in_dim);
    tile_rows = tile_rows < 16 ? 16 : tile_rows > w->out_dim ? w->out_dim : tile_rows;
    struct scratch *buf = scratch_get(ctx, (size_t)tile_rows * w->in_dim);
    if (!buf)
        return -ENOMEM;
    float *tile = buf->p;
    int rc = 0;
    for (int t0 = 0; t0 < w->out_dim && !rc; t0 += tile_rows) {
        int rows = w->out_dim - t0 < tile_rows ? w->out_dim - t0 : tile_rows, per = (rows + nt - 1) / nt;
        /* tile holds W's rows [t0, t0 + rows): offset so row r lands at r - t0 */
        float *base = tile - (size_t)t0 * w->in_dim;
        for (int t = 0; t < nt; t++) {
            int r0 = t0 + t * per, r1 = r0 + per > t0 + rows ? t0 + rows : r0 + per;
            jobs[t] = (struct qmm_job){w, NULL, NULL, base, 0, r0 < r1 ? r0 : r1, r1, 0, 0, NULL, NULL};
        }
        cpu_pool_run(ctx->pool, qmm_decode, jobs, sizeof(jobs[0]), nt);
        for (int t = 0; t < nt && !rc; t++)
            rc = jobs[t].rc;
        if (!rc)
            parallel_gemm(ctx, x, n, tile, rows, w->in_dim, y + t0, w->out_dim);
    }
    scratch_put(ctx, buf);
    return rc;
}

/* act: x still to be quantized to 8-bit blocks (the integer gemv does it) */
static int matmul_impl(struct cpu_ctx *ctx, const struct kvfs_weight *w, const float *bias, const float *x, float *y,
                       int n, int act)
{
    if (n <= 0)
        return 0;
    if (!w->w) {
        int rc = qmm(ctx, w, x, y, n, act);
        if (rc)
            return rc;
    } else {
        parallel_gemm(ctx, x, n, w->w, w->out_dim, w->in_dim, y, w->out_dim);
    }
    if (bias)
        for (int i = 0; i < n; i++)
            for (int j = 0; j < w->out_dim; j++)
                y[(size_t)i * w->out_dim + j] += bias[j];
    return 0;
}

static int cpu_matmul(void *vctx, const struct kvfs_weight *w, const float *bias, const float *x, float *y, int n)
{
    return matmul_impl(vctx, w, bias, x, y, n, 0);
}

static int cpu_act_quant(void *ctx, const float *x, float *y, int n, int dim, int type);

/* Few rows by a Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K or Q6_K weight
 * with the activations ggml pairs with it (Q8_0, Q8_1, Q8_0, Q8_1, Q8_0,
 * Q8_K): integer block products; anything else quantizes x into tmp and
 * multiplies in float. */
static int cpu_matmul_act(void *vctx, const struct kvfs_weight *w, const float *bias, int act_type, const float *x,
                          float *tmp, float *y, int n)
{
#ifdef __AVX2__
    int t = (int)w->type;
    int pair = ((t == KVFS_GGML_Q4_0 || t == KVFS_GGML_Q5_0 || t == KVFS_GGML_Q8_0) && act_type == KVFS_GGML_Q8_0) ||
               ((t == KVFS_GGML_Q4_1 || t == KVFS_GGML_Q5_1) && act_type == 9 /* Q8_1 */);
    if (qk_type(w->type) && act_type == KVFS_GGML_Q8_K)
        pair = !(w->in_dim % 256);
    if (!w->w && pair && n < QMM_GEMM_MIN_ROWS && !(w->in_dim % 32))
        return matmul_impl(vctx, w, bias, x, y, n, 1);
#endif
    int rc = cpu_act_quant(vctx, x, tmp, n, w->in_dim, act_type);
    return rc ? rc : matmul_impl(vctx, w, bias, tmp, y, n, 0);
}

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

static int cpu_rmsnorm(void *ctx, const float *x, const float *g, float *y, int n, int dim, float eps)
{
    struct rmsnorm_args a = {x, g, y, dim, eps};
    if (n > 0)
        par_for(ctx, (size_t)n, (size_t)dim, rmsnorm_rows, &a);
    return 0;
}

struct rope_args {
    float *x;
    const int32_t *pos;
    const float *inv;
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

static int cpu_rope(void *ctx, float *x, const int32_t *pos, int n, int n_heads, int head_dim, int rope_dim,
                    float theta, int style)
{
    int half = rope_dim / 2;
    if (half > 2048)
        return -EINVAL;
    float inv[2048];
    for (int j = 0; j < half; j++)
        inv[j] = powf(theta, -2.0f * (float)j / (float)rope_dim);
    struct rope_args a = {x, pos, inv, n_heads, head_dim, half, style};
    if (n > 0)
        par_for(ctx, (size_t)n, (size_t)n_heads * head_dim, rope_rows, &a);
    return 0;
}

struct ew_args { /* an elementwise op's operands */
    const float *a, *b;
    float *out;
    float s;
};

/* O3: at -O2 GCC 12 left this scalar (out may alias a, and its cheap cost
 * model does not version loops for that); the same sums, 8 or 16 at a time */
__attribute__((optimize("O3"))) static void add_range(void *arg, size_t lo, size_t hi)
{
    const struct ew_args *e = arg;
    for (size_t i = lo; i < hi; i++)
        e->out[i] = e->a[i] + e->b[i];
}

static int cpu_add(void *ctx, const float *a, const float *b, float *out, size_t count)
{
    struct ew_args e = {a, b, out, 0.0f};
    par_for(ctx, count, 1, add_range, &e);
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

static int cpu_swiglu(void *ctx, const float *gate, const float *up, float *out, size_t count)
{
    struct ew_args e = {gate, up, out, 0.0f};
    par_for(ctx, count, 1, swiglu_range, &e);
    return 0;
}

static void scale_range(void *arg, size_t lo, size_t hi)
{
    const struct ew_args *e = arg;
    for (size_t i = lo; i < hi; i++)
        e->out[i] = e->a[i] * e->s;
}

static int cpu_scale(void *ctx, const float *x, float s, float *y, size_t count)
{
    struct ew_args e = {x, NULL, y, s};
    par_for(ctx, count, 1, scale_range, &e);
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

static int cpu_geglu(void *ctx, const float *gate, const float *up, float *out, size_t count)
{
    pthread_once(&gelu_once, gelu_table_init);
    struct ew_args e = {gate, up, out, 0.0f};
    par_for(ctx, count, 1, geglu_range, &e);
    return 0;
}

static int cpu_get_rows(void *ctx, const float *table, const int32_t *ids, float *out, int n, int dim)
{
    (void)ctx;
    for (int i = 0; i < n; i++)
        memcpy(out + (size_t)i * dim, table + (size_t)ids[i] * dim, sizeof(float) * dim);
    return 0;
}

struct softmax_job {
    float *sc;
    const int32_t *q_pos, *kv_pos;
    int r0, r1, n_kv, ld, sorted;
    int window; /* > 0: keys at q_pos - window or before are masked too */
};

/* e^x for x <= 0 (scores minus their row max), in a form the compiler turns
 * into SIMD: 2^n by the exponent bits, e^r on [-ln2/2, ln2/2] by a degree-6
 * polynomial (relative error ~2e-7, below f32 rounding of the sum).  The
 * softmax is most of a sparse layer's attention: libm's scalar expf was a
 * quarter of a blend's time. */
static inline float exp_nonpos(float x)
{
    x = x < -87.0f ? -87.0f : x;
    /* round to nearest by the 1.5 * 2^23 trick: vectorizes, roundf does not */
    float n = (x * 1.44269504f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693145751953125f - n * 1.428606765330187e-06f;
    float p = 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    union { int32_t i; float f; } two = {.i = ((int32_t)n + 127) << 23};
    return p * two.f;
}

#ifdef __AVX512F__
/* The softmax's 16 lanes in one register.  GCC left the max loop scalar and
 * ran the exponentials 8 wide under masks; these compute the same values in
 * the same order per lane (exp_nonpos's operations one by one, unfused), so
 * a row's probabilities are bit for bit the portable loops'. */
static inline __m512 exp_nonpos16(__m512 x)
{
    x = _mm512_mask_mov_ps(x, _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_LT_OQ), _mm512_set1_ps(-87.0f));
    const __m512 big = _mm512_set1_ps(12582912.0f);
    __m512 n = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)), big), big);
    __m512 r = _mm512_sub_ps(x, _mm512_mul_ps(n, _mm512_set1_ps(0.693145751953125f)));
    r = _mm512_sub_ps(r, _mm512_mul_ps(n, _mm512_set1_ps(1.428606765330187e-06f)));
    __m512 p = _mm512_set1_ps(1.0f / 720);
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.0f / 120));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.0f / 24));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.0f / 6));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(0.5f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.0f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.0f));
    __m512i two = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(two));
}

/* lane[l] = max over row[c + l] of whole 16-blocks below end; returns the
 * first column left (the scalar tail's) */
static inline int lane_max16(const float *row, int end, float lane[16])
{
    __m512 m = _mm512_loadu_ps(lane);
    int c = 0;
    for (; c + 16 <= end; c += 16) /* max_ps(a, b) is a > b ? a : b */
        m = _mm512_max_ps(_mm512_loadu_ps(row + c), m);
    _mm512_storeu_ps(lane, m);
    return c;
}

/* row[c] = e^(row[c] - mx) (0 where -inf) over whole 16-blocks, summed
 * per lane into lane[]; returns the first column left */
static inline int lane_exp16(float *row, int end, float mx, float lane[16])
{
    __m512 sum = _mm512_loadu_ps(lane), vmx = _mm512_set1_ps(mx), ninf = _mm512_set1_ps(-INFINITY);
    int c = 0;
    for (; c + 16 <= end; c += 16) {
        __m512 v = _mm512_loadu_ps(row + c);
        __m512 e = exp_nonpos16(_mm512_sub_ps(v, vmx));
        e = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, ninf, _CMP_NEQ_UQ), e);
        _mm512_storeu_ps(row + c, e);
        sum = _mm512_add_ps(sum, e);
    }
    _mm512_storeu_ps(lane, sum);
    return c;
}
#endif

/* visible keys of a query at position qp when kv positions are sorted: [0, end) */
static int visible_end(const int32_t *kv_pos, int n_kv, int32_t qp)
{
    int lo = 0, hi = n_kv;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (kv_pos[mid] <= qp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The last position a sliding window of `window` hides from a query at qp. */
static int32_t window_hides(int32_t qp, int window)
{
    int64_t h = (int64_t)qp - window;
    return h < INT32_MIN ? INT32_MIN : (int32_t)h;
}

/* Masked softmax of score rows [r0, r1): exact causal mask by position
 * (and window).  With sorted positions a row's visible keys are [begin, end). */
__attribute__((optimize("O3"))) static void *softmax_rows(void *arg)
{
    struct softmax_job *j = arg;
    for (int i = j->r0; i < j->r1; i++) {
        float *full = j->sc + (size_t)(i - j->r0) * j->ld;
        int n = j->n_kv, begin = 0, end = n;
        if (j->sorted) {
            end = visible_end(j->kv_pos, n, j->q_pos[i]);
            if (j->window > 0)
                begin = visible_end(j->kv_pos, end, window_hides(j->q_pos[i], j->window));
        } else {
            for (int c = 0; c < n; c++)
                if (j->kv_pos[c] > j->q_pos[i] || (j->window > 0 && j->kv_pos[c] <= window_hides(j->q_pos[i], j->window)))
                    full[c] = -INFINITY;
        }
        memset(full, 0, sizeof(float) * (size_t)begin);
        float *row = full + begin;
        n -= begin;
        end -= begin;
        /* 16 lanes of partial max and sum: the compiler keeps them in one
         * vector register (a single running float would serialize) */
        float lane[16], mx = -INFINITY;
        int c = 0;
        for (int l = 0; l < 16; l++)
            lane[l] = -INFINITY;
#ifdef __AVX512F__
        c = lane_max16(row, end, lane);
#else
        for (; c + 16 <= end; c += 16)
            for (int l = 0; l < 16; l++)
                lane[l] = row[c + l] > lane[l] ? row[c + l] : lane[l];
#endif
        for (; c < end; c++)
            mx = row[c] > mx ? row[c] : mx;
        for (int l = 0; l < 16; l++)
            mx = lane[l] > mx ? lane[l] : mx;
        if (mx == -INFINITY) { /* nothing visible */
            memset(row, 0, sizeof(float) * (size_t)n);
            continue;
        }
        float sum = 0.0f;
        for (int l = 0; l < 16; l++)
            lane[l] = 0.0f;
#ifdef __AVX512F__
        c = lane_exp16(row, end, mx, lane);
#else
        for (c = 0; c + 16 <= end; c += 16)
            for (int l = 0; l < 16; l++) {
                float e = row[c + l] == -INFINITY ? 0.0f : exp_nonpos(row[c + l] - mx);
                row[c + l] = e;
                lane[l] += e;
            }
#endif
        for (; c < end; c++) {
            float e = row[c] == -INFINITY ? 0.0f : exp_nonpos(row[c] - mx);
            row[c] = e;
            sum += e;
        }
        for (int l = 0; l < 16; l++)
            sum += lane[l];
        float inv = 1.0f / sum;
        for (int c = 0; c < end; c++)
            row[c] *= inv;
        for (int c = end; c < n; c++)
            row[c] = 0.0f;
    }
    return NULL;
}

#define ATT_BLOCK 256
/* Batch invariance: a row's attention does not depend on which rows were
 * computed with it, so a row a blend (or prefix caching) recomputes is bit
 * for bit the full prefill's row.  OpenBLAS's q.k^T (B transposed) takes
 * other kernels for small products, whose sums differ in the last bits, and
 * it splits a long k by its length: measured on SkylakeX, only q.K^T with
 * K^T stored (no transpose) and P.V over runs of a fixed length aligned to
 * the key index (zero tails) give identical rows for any block shape (the
 * kernel picked on other AVX CPUs, Sandybridge's, keeps one order in every
 * shape; Haswell's in none: blas.c).  From ATT_INVARIANT_MIN_Q queries on
 * (a prefill, a blend's recompute); decoding one token keeps the plain path
 * (transposing every key per token would cost more than its attention).
 * KVFS_ATT_INVARIANT_MIN_Q=N overrides (for analyses that run a short
 * question alone and compare it with a prefill: bench/oracle.c). */
#define ATT_INVARIANT_MIN_Q 16
static int att_invariant_min_q(void)
{
    static atomic_int min_q_once = INT_MIN;
    return env_int_once(&min_q_once, "KVFS_ATT_INVARIANT_MIN_Q", 1, ATT_INVARIANT_MIN_Q);
}
#define PV_RUN 256 /* keys per P.V product: every one has this k, so the BLAS splits them alike */
#define ATT_STACK_ROWS (2 * ATT_BLOCK) /* rows of one product when query heads are stacked */

/* Whether kv positions ascend: then each query sees a prefix of the keys. */
static int positions_sorted(const int32_t *kv_pos, int n_kv)
{
    for (int j = 1; j < n_kv; j++)
        if (kv_pos[j] < kv_pos[j - 1])
            return 0;
    return 1;
}

/* One attention call shared by the pool's jobs: units of (block of
 * ATT_BLOCK queries, head), taken in turn so the jobs finish together. */
struct attn_call {
    struct cpu_ctx *ctx;
    const float *q, *k, *v;
    /* batch-invariant path (else NULL): K^T per kv head, [n_kv_head][head_dim][n_kv_pad]
     * zero past n_kv; V's rows from the last run bound, zero-padded to PV_RUN */
    const float *kt, *v_tail;
    int n_kv_pad; /* n_kv, up to a multiple of PV_RUN on that path */
    const int32_t *q_pos, *kv_pos;
    float *out;
    int n_q, n_kv, n_head, n_kv_head, head_dim, window, sorted;
    float scale;
    atomic_int next; /* the next unit */
    atomic_int rc;
    const int *block_at; /* query blocks: [block_at[b], block_at[b + 1]), n_blocks of them */
    int n_blocks;
    const int *stack, *unit_at; /* batch-invariant path: per block (attn_stacks) */
    int stack_rows;             /* ...and the largest stacked product's rows */
};

/* The keys a block of queries [i0, i1) can see: [*kb, *nk) (positions in
 * order: keys past the block's last query are all masked, which halves causal
 * prefill work, and with a window those it hides from the first query) */
static void block_keys(const struct attn_call *c, int i0, int i1, int *kb, int *nk)
{
    *kb = 0;
    *nk = c->n_kv;
    if (!c->sorted)
        return;
    int32_t maxq = c->q_pos[i0], minq = c->q_pos[i0];
    for (int i = i0; i < i1; i++) {
        maxq = c->q_pos[i] > maxq ? c->q_pos[i] : maxq;
        minq = c->q_pos[i] < minq ? c->q_pos[i] : minq;
    }
    *nk = visible_end(c->kv_pos, c->n_kv, maxq);
    if (c->window > 0)
        *kb = visible_end(c->kv_pos, *nk, window_hides(minq, c->window));
}

static void attn_unit(struct attn_call *c, float *sc, int i0, int i1, int h)
{
    int rows = i1 - i0;
    int qstride = c->n_head * c->head_dim, kstride = c->n_kv_head * c->head_dim;
    int kh = h / (c->n_head / c->n_kv_head);
    float *out = c->out + (size_t)i0 * qstride + h * c->head_dim;
    const float *qq = c->q + (size_t)i0 * qstride + h * c->head_dim;
    const struct kvfs_blas *blas = c->ctx->blas;
    int kb, nk;
    block_keys(c, i0, i1, &kb, &nk);
    if (nk == kb) { /* nothing visible: zero output */
        for (int i = 0; i < rows; i++)
            memset(out + (size_t)i * qstride, 0, sizeof(float) * c->head_dim);
        return;
    }
    /* from here on the keys are [kb, nk): nk of them from kb */
    const float *kk = c->k + (size_t)kb * kstride + kh * c->head_dim;
    const float *vv = c->v + (size_t)kb * kstride + kh * c->head_dim;
    nk -= kb;
    blas->sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, nk, c->head_dim, c->scale, qq, qstride, kk, kstride,
                0.0f, sc, nk);
    struct softmax_job job = {sc, c->q_pos, c->kv_pos + kb, i0, i1, nk, nk, c->sorted, c->window};
    softmax_rows(&job);
    blas->sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, c->head_dim, nk, 1.0f, sc, nk, vv, kstride, 0.0f,
                out, qstride);
}

/* The batch-invariant path for a block of queries [i0, i1) and query heads
 * [h0, h0 + g) (one kv head's): those heads' queries stacked as rows
 * of one product, so the keys (and each run of values) are packed once for
 * them, not once per head: a blend's blocks hold few rows, and packing was a
 * tenth of its time.  Every product has the same shape in k whatever the
 * block: whole runs of PV_RUN keys on run bounds, the keys outside a row's
 * view (and the padding past the last key) at exact zero.  buf: scores
 * [g * rows][width], then the stacked queries and outputs,
 * [g * rows][head_dim] each. */
static void attn_group(struct attn_call *c, float *buf, int i0, int i1, int g, int h0)
{
    int rows = i1 - i0, hd = c->head_dim, gr = g * rows;
    int qstride = c->n_head * hd, kstride = c->n_kv_head * hd, kh = h0 / (c->n_head / c->n_kv_head);
    const struct kvfs_blas *blas = c->ctx->blas;
    int kb, nk;
    block_keys(c, i0, i1, &kb, &nk);
    if (nk == kb) { /* nothing visible: zero output */
        for (int i = 0; i < rows; i++)
            memset(c->out + (size_t)(i0 + i) * qstride + (size_t)h0 * hd, 0, sizeof(float) * (size_t)g * hd);
        return;
    }
    kb = kb / PV_RUN * PV_RUN;
    int end = (nk + PV_RUN - 1) / PV_RUN * PV_RUN, width = end - kb;
    float *sc = buf, *qs = sc + (size_t)gr * width, *os = qs + (size_t)gr * hd;
    for (int hh = 0; hh < g; hh++)
        for (int i = 0; i < rows; i++)
            memcpy(qs + (size_t)(hh * rows + i) * hd, c->q + (size_t)(i0 + i) * qstride + (size_t)(h0 + hh) * hd,
                   sizeof(float) * hd);
    blas->sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, gr, width, hd, c->scale, qs, hd,
                c->kt + (size_t)kh * hd * c->n_kv_pad + kb, c->n_kv_pad, 0.0f, sc, width);
    for (int hh = 0; hh < g; hh++) {
        struct softmax_job job = {sc + (size_t)hh * rows * width, c->q_pos, c->kv_pos + kb, i0, i1, nk - kb, width,
                                  c->sorted, c->window};
        softmax_rows(&job);
    }
    for (int i = 0; i < gr; i++)
        memset(sc + (size_t)i * width + (nk - kb), 0, sizeof(float) * (size_t)(width - (nk - kb)));
    for (int j0 = kb; j0 < end; j0 += PV_RUN) {
        /* the last run past the keys reads the zero-padded copy */
        const float *vv = j0 + PV_RUN <= c->n_kv ? c->v + (size_t)j0 * kstride + kh * hd : c->v_tail + kh * hd;
        blas->sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, gr, hd, PV_RUN, 1.0f, sc + (j0 - kb), width, vv,
                    kstride, j0 > kb ? 1.0f : 0.0f, os, hd);
    }
    for (int hh = 0; hh < g; hh++)
        for (int i = 0; i < rows; i++)
            memcpy(c->out + (size_t)(i0 + i) * qstride + (size_t)(h0 + hh) * hd, os + (size_t)(hh * rows + i) * hd,
                   sizeof(float) * hd);
}

/* Units: (block, head), or on the batch-invariant path (block, its
 * stack[b] heads): unit_at[b] is block b's first unit. */
static int attn_units(const struct attn_call *c)
{
    return c->kt ? c->unit_at[c->n_blocks] : c->n_blocks * c->n_head;
}

static void *attn_job(void *arg)
{
    struct attn_call *c = *(struct attn_call **)arg;
    size_t floats = c->kt ? (size_t)c->stack_rows * ((size_t)c->n_kv_pad + 2 * (size_t)c->head_dim)
                          : (size_t)ATT_BLOCK * c->n_kv_pad;
    struct scratch *buf = NULL;
    for (int u, n_units = attn_units(c); (u = atomic_fetch_add(&c->next, 1)) < n_units;) {
        if (!buf && !(buf = scratch_get(c->ctx, floats))) {
            atomic_store(&c->rc, -ENOMEM);
            break;
        }
        if (c->kt) {
            int b = 0;
            while (c->unit_at[b + 1] <= u)
                b++;
            attn_group(c, buf->p, c->block_at[b], c->block_at[b + 1], c->stack[b], (u - c->unit_at[b]) * c->stack[b]);
        } else {
            int b = u / c->n_head;
            attn_unit(c, buf->p, c->block_at[b], c->block_at[b + 1], u % c->n_head);
        }
    }
    scratch_put(c->ctx, buf);
    return NULL;
}

/* How many of a kv head's query heads go in one product, block by block:
 * as many as keep it within ATT_STACK_ROWS rows (a prefill's full blocks:
 * one head at a time, as before, since stacking them measured slower; a
 * blend's blocks hold from a few to a hundred rows).  Fills stack[] and
 * unit_at[] (n_blocks + 1 entries); returns the largest product's rows,
 * which size each job's scratch (ATT_BLOCK where nothing is stacked). */
static int attn_stacks(const int *block_at, int n_blocks, int n_head, int group, int *stack, int *unit_at)
{
    int most = 1;
    unit_at[0] = 0;
    for (int b = 0; b < n_blocks; b++) {
        int rows = block_at[b + 1] - block_at[b], s = group;
        while (s > 1 && (group % s || s * rows > ATT_STACK_ROWS))
            s--;
        stack[b] = s;
        unit_at[b + 1] = unit_at[b] + n_head / s;
        most = s * rows > most ? s * rows : most;
    }
    return most;
}

/* Query blocks of at most ATT_BLOCK rows spanning at most ATT_BLOCK
 * positions; their starts go to block_at (n_q + 1 entries), the count is
 * returned.  A block computes every key its last query can see for all of
 * its rows, so the rows a blend recomputes, scattered over the prompt, go
 * in blocks of nearby positions rather than 256 rows spanning thousands
 * (2% off a 6-chunk blend's time: BENCHMARKS.md).  A prefill's consecutive
 * rows make the same blocks as before; attention is batch-invariant, so no
 * row's result changes. */
static int query_blocks(const int32_t *q_pos, int n_q, int by_position, int *block_at)
{
    int n = 0;
    for (int i = 0; i < n_q; i++)
        if (!n || i - block_at[n - 1] >= ATT_BLOCK ||
            (by_position && (int64_t)q_pos[i] - q_pos[block_at[n - 1]] >= ATT_BLOCK))
            block_at[n++] = i;
    block_at[n] = n_q;
    return n;
}

/* K^T for the batch-invariant path: kt[d][j] = k[j][d], zero for j in
 * [n_kv, pad), for the rows of dims [8 * lo, 8 * hi) (a unit: 8 dims; the
 * last unit may hold fewer), through registers in 8 x 8 tiles.  The
 * column-by-column copy read K with a stride of a row per value and was ~3%
 * of a blend (built at every layer, for the query's first pass and again
 * for the recompute); tiles take 0.39 ms for SmolLM2's 2705 x 192 keys
 * against 0.71, 1.0 ms for Gemma 3's 2682 x 256 against 2.8 (one thread,
 * best of 50). */
struct kt_args {
    const float *k;
    float *kt;
    int n_kv, kstride, pad;
};

#ifdef __AVX2__
static inline void transpose8(const float *src, size_t ss, float *dst, size_t ds)
{
    __m256 r[8], t[8], u[8];
    for (int i = 0; i < 8; i++)
        r[i] = _mm256_loadu_ps(src + (size_t)i * ss);
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int i = 0; i < 4; i++) {
        _mm256_storeu_ps(dst + (size_t)i * ds, _mm256_permute2f128_ps(u[i], u[i + 4], 0x20));
        _mm256_storeu_ps(dst + (size_t)(i + 4) * ds, _mm256_permute2f128_ps(u[i], u[i + 4], 0x31));
    }
}
#endif

static void kt_range(void *arg, size_t lo, size_t hi)
{
    const struct kt_args *a = arg;
    size_t ks = (size_t)a->kstride, pad = (size_t)a->pad;
    int d0 = (int)lo * 8, d1 = (int)hi * 8 < a->kstride ? (int)hi * 8 : a->kstride;
    int dt = d1 < a->kstride / 8 * 8 ? d1 : a->kstride / 8 * 8; /* dims [d0, dt) in whole tiles */
    int jt = 0;                                                   /* ...for keys [0, jt) */
#ifdef __AVX2__
    /* key-major: 8 keys' rows of K in turn (dim-major tiles, or 16 x 16,
     * measured slower: K^T's rows lie 11 KiB apart) */
    if (dt > d0)
        for (; jt + 8 <= a->n_kv; jt += 8)
            for (int d = d0; d < dt; d += 8)
                transpose8(a->k + (size_t)jt * ks + d, ks, a->kt + (size_t)d * pad + jt, pad);
#endif
    for (int d = d0; d < d1; d++) {
        float *row = a->kt + (size_t)d * pad;
        for (int j = d < dt ? jt : 0; j < a->n_kv; j++)
            row[j] = a->k[(size_t)j * ks + d];
        memset(row + a->n_kv, 0, sizeof(float) * (pad - (size_t)a->n_kv));
    }
}

static int cpu_attention(void *vctx, const float *q, const int32_t *q_pos, int n_q, const float *k, const float *v,
                         const int32_t *kv_pos, int n_kv, int n_head, int n_kv_head, int head_dim, float scale,
                         int window, float *out)
{
    struct cpu_ctx *ctx = vctx;
    if (n_q <= 0)
        return 0;
    if (n_kv <= 0 || n_head % n_kv_head || window < 0)
        return -EINVAL;
    struct attn_call c = {ctx, q, k, v, NULL, NULL, n_kv, q_pos, kv_pos, out, n_q, n_kv, n_head, n_kv_head,
                          head_dim, window, positions_sorted(kv_pos, n_kv), scale, 0, 0, NULL, 0, NULL, NULL, 0};
    struct scratch *kt = NULL;
    if (n_q >= att_invariant_min_q()) {
        int kstride = n_kv_head * head_dim, pad = (n_kv + PV_RUN - 1) / PV_RUN * PV_RUN, last = pad - PV_RUN;
        if (!(kt = scratch_get(ctx, (size_t)kstride * pad + (size_t)PV_RUN * kstride)))
            return -ENOMEM;
        float *v_tail = kt->p + (size_t)kstride * pad;
        struct kt_args ta = {k, kt->p, n_kv, kstride, pad};
        par_for(ctx, (size_t)(kstride + 7) / 8, (size_t)8 * n_kv, kt_range, &ta);
        if (pad > n_kv) { /* else no run reads past the keys */
            memcpy(v_tail, v + (size_t)last * kstride, sizeof(float) * (size_t)(n_kv - last) * kstride);
            memset(v_tail + (size_t)(n_kv - last) * kstride, 0, sizeof(float) * (size_t)(pad - n_kv) * kstride);
        }
        c.kt = kt->p;
        c.v_tail = v_tail;
        c.n_kv_pad = pad;
    }
    int *block_at = malloc(sizeof(int) * (3 * (size_t)n_q + 2));
    if (!block_at) {
        scratch_put(ctx, kt);
        return -ENOMEM;
    }
    c.n_blocks = query_blocks(q_pos, n_q, c.sorted, block_at);
    c.block_at = block_at;
    c.stack_rows = attn_stacks(block_at, c.n_blocks, n_head, n_head / n_kv_head, block_at + n_q + 1,
                               block_at + 2 * n_q + 1);
    c.stack = block_at + n_q + 1;
    c.unit_at = block_at + 2 * n_q + 1;
    struct attn_call *jobs[KVFS_PARALLEL_MAX];
    int units = attn_units(&c);
    int nt = pool_jobs(ctx);
    nt = nt > units ? units : nt;
    for (int t = 0; t < nt; t++)
        jobs[t] = &c;
    cpu_pool_run(ctx->pool, attn_job, jobs, sizeof(jobs[0]), nt);
    free(block_at);
    if (kt)
        scratch_put(ctx, kt);
    return atomic_load(&c.rc);
}

/* The query's attention over the reused cache (the blend's votes): per
 * block of queries, each head's probabilities on the pool (a head per
 * unit), then summed into out key range by key range, every key's terms in
 * the order one thread took them (block, head, query): the same sums. */
struct mass_call {
    struct cpu_ctx *ctx;
    const float *q, *k;
    const int32_t *q_pos, *kv_pos;
    float *sc; /* [n_head][rows][n_kv] */
    float *out;
    int i0, rows, n_kv, n_head, group, head_dim, window, sorted;
    float scale;
    atomic_int next;
};

static void *mass_heads(void *arg)
{
    struct mass_call *c = *(struct mass_call **)arg;
    int qstride = c->n_head * c->head_dim, kstride = c->n_head / c->group * c->head_dim;
    for (int h; (h = atomic_fetch_add(&c->next, 1)) < c->n_head;) {
        float *sc = c->sc + (size_t)h * c->rows * c->n_kv;
        c->ctx->blas->sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, c->rows, c->n_kv, c->head_dim, c->scale,
                            c->q + (size_t)c->i0 * qstride + h * c->head_dim, qstride,
                            c->k + (h / c->group) * c->head_dim, kstride, 0.0f, sc, c->n_kv);
        struct softmax_job job = {sc, c->q_pos, c->kv_pos, c->i0, c->i0 + c->rows, c->n_kv, c->n_kv, c->sorted,
                                  c->window};
        softmax_rows(&job);
    }
    return NULL;
}

static void mass_sum(void *arg, size_t lo, size_t hi)
{
    const struct mass_call *c = arg;
    for (int h = 0; h < c->n_head; h++)
        for (int r = 0; r < c->rows; r++) {
            const float *row = c->sc + ((size_t)h * c->rows + r) * c->n_kv;
            for (size_t j = lo; j < hi; j++)
                c->out[j] += row[j];
        }
}

static int cpu_attn_mass(void *vctx, const float *q, const int32_t *q_pos, int n_q, const float *k,
                         const int32_t *kv_pos, int n_kv, int n_head, int n_kv_head, int head_dim, float scale,
                         int window, float *out)
{
    struct cpu_ctx *ctx = vctx;
    if (n_q <= 0 || n_kv <= 0)
        return 0;
    if (n_head % n_kv_head)
        return -EINVAL;
    /* the queries are few (a prompt's suffix): a block of them per sgemm */
    int block = n_q < ATT_BLOCK ? n_q : ATT_BLOCK;
    struct scratch *buf = scratch_get(ctx, (size_t)n_head * block * n_kv);
    if (!buf)
        return -ENOMEM;
    struct mass_call c = {ctx, q, k, q_pos, kv_pos, buf->p, out, 0, 0, n_kv, n_head, n_head / n_kv_head, head_dim,
                          window, positions_sorted(kv_pos, n_kv), scale, 0};
    struct mass_call *jobs[KVFS_PARALLEL_MAX];
    int nt = pool_jobs(ctx);
    nt = nt > n_head ? n_head : nt;
    for (int t = 0; t < nt; t++)
        jobs[t] = &c;
    for (int i0 = 0; i0 < n_q; i0 += ATT_BLOCK) {
        c.i0 = i0;
        c.rows = n_q - i0 < ATT_BLOCK ? n_q - i0 : ATT_BLOCK;
        atomic_store(&c.next, 0);
        cpu_pool_run(ctx->pool, mass_heads, jobs, sizeof(jobs[0]), nt);
        par_for(ctx, (size_t)n_kv, (size_t)n_head * c.rows, mass_sum, &c);
    }
    scratch_put(ctx, buf);
    return 0;
}

static int cpu_row_sqdiff(void *ctx, const float *a, const float *b, float *out, int n, int dim)
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

static int cpu_gather_rows(void *ctx, const float *src, const int32_t *idx, float *out, int n_idx, int dim)
{
    (void)ctx;
    for (int i = 0; i < n_idx; i++)
        memcpy(out + (size_t)i * dim, src + (size_t)idx[i] * dim, sizeof(float) * dim);
    return 0;
}

static int cpu_scatter_rows(void *ctx, const float *src, const int32_t *idx, float *dst, int n_idx, int dim)
{
    (void)ctx;
    for (int i = 0; i < n_idx; i++)
        memcpy(dst + (size_t)idx[i] * dim, src + (size_t)i * dim, sizeof(float) * dim);
    return 0;
}

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

static int cpu_act_quant(void *ctx, const float *x, float *y, int n, int dim, int type)
{
    struct ew_args e = {x, NULL, y, 0.0f};
    if (n <= 0)
        return 0;
    if (type == KVFS_GGML_Q8_K) { /* the K-quants' partner: blocks of 256 */
        if (dim % 256)
            return -EINVAL;
        par_for(ctx, (size_t)n * dim / 256, 256, q8k_round_range, &e);
        return 0;
    }
    if (type != KVFS_GGML_Q8_0 && type != KVFS_GGML_Q8_1) /* these two quantize the values the same way */
        return -ENOTSUP;
    if (dim % 32)
        return -EINVAL;
    par_for(ctx, (size_t)n * dim / 32, 32, q8_round_range, &e);
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

static int cpu_round_f16(void *ctx, float *x, size_t count)
{
    struct round_args r = {x, count};
    par_for(ctx, (count + 7) / 8, 8, round_f16_range, &r);
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

static int cpu_topk(void *ctx, const float *scores, const uint8_t *forced, int n, int k, int32_t *out)
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

struct kv_load {
    float *dst;
    const uint16_t *src;
    int type;
};

/* f16/bf16 to f32 straight into the cache (host memory here), values
 * [lo, hi): the hot loop of loading a chunk, so it uses the F16C
 * instructions where the CPU has them */
static void kv_load_range(void *arg, size_t lo, size_t hi)
{
    const struct kv_load *a = arg;
    size_t i = lo;
    if (a->type == KVFS_HOST_F16) {
#ifdef __F16C__
        for (; i + 8 <= hi; i += 8)
            _mm256_storeu_ps(a->dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(a->src + i))));
#endif
        for (; i < hi; i++)
            a->dst[i] = kvfs_f16_to_f32(a->src[i]);
    } else {
        for (; i < hi; i++) {
            uint32_t x = (uint32_t)a->src[i] << 16;
            memcpy(&a->dst[i], &x, 4);
        }
    }
}

/* A chunk's layer into the cache, f16/bf16 converted on the pool: the
 * cache's pages are touched here first, so their faults are split too (a
 * blend loads every layer of every chunk before the query's first pass) */
static int cpu_upload_kv(void *vctx, float *dst, const void *host, size_t count, int type)
{
    struct kv_load a = {dst, host, type};
    switch (type) {
    case KVFS_HOST_F32:
        memcpy(dst, host, sizeof(float) * count);
        return 0;
    case KVFS_HOST_F16:
    case KVFS_HOST_BF16:
        par_for(vctx, count, 1, kv_load_range, &a);
        return 0;
    default:
        return -EINVAL;
    }
}

struct kvq_job {
    const void *blocks;
    float *k, *v;
    uint32_t n_tokens, kv_dim, part, n_parts;
    int codec, rc;
};

static void *kvq_decode_job(void *arg)
{
    struct kvq_job *j = arg;
    j->rc = kvfs_kvq_decode_part(j->codec, j->blocks, j->n_tokens, j->kv_dim, j->k, j->v, j->part, j->n_parts);
    return NULL;
}

/* a quantized chunk's layer decoded straight into the cache, one share of
 * its blocks per pool thread */
static int cpu_upload_kvq(void *vctx, float *k, float *v, const void *blocks, uint32_t n_tokens, uint32_t kv_dim,
                          int codec)
{
    struct cpu_ctx *ctx = vctx;
    struct kvq_job jobs[KVFS_PARALLEL_MAX];
    int nt = pool_jobs(ctx), rc = 0;
    for (int t = 0; t < nt; t++)
        jobs[t] = (struct kvq_job){blocks, k, v, n_tokens, kv_dim, (uint32_t)t, (uint32_t)nt, codec, 0};
    cpu_pool_run(ctx->pool, kvq_decode_job, jobs, sizeof(jobs[0]), nt);
    for (int t = 0; t < nt && !rc; t++)
        rc = jobs[t].rc;
    return rc;
}

static void cpu_trim(void *vctx)
{
    struct cpu_ctx *ctx = vctx;
    pthread_mutex_lock(&ctx->scratch_lock);
    struct scratch *b = ctx->spare;
    ctx->spare = NULL;
    pthread_mutex_unlock(&ctx->scratch_lock);
    for (struct scratch *next; b; b = next) {
        next = b->next;
        free(b->p);
        free(b);
    }
}

static void cpu_destroy(void *vctx)
{
    struct cpu_ctx *ctx = vctx;
    cpu_pool_free(ctx->pool);
    cpu_trim(ctx);
    pthread_mutex_destroy(&ctx->scratch_lock);
    free(ctx);
}

static const struct kvfs_backend_iface cpu_iface = {
    .name = "cpu",
    .thread_safe = 1,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .synchronize = cpu_sync,
    .copy = cpu_copy,
    .weight_create = cpu_weight_create,
    .weight_free = cpu_weight_free,
    .weight_create_quant = cpu_weight_create_quant,
    .matmul_act = cpu_matmul_act,
    .weight_rows = cpu_weight_rows,
    .matmul = cpu_matmul,
    .rmsnorm = cpu_rmsnorm,
    .rope = cpu_rope,
    .add = cpu_add,
    .swiglu = cpu_swiglu,
    .get_rows = cpu_get_rows,
    .attention = cpu_attention,
    .attn_mass = cpu_attn_mass,
    .row_sqdiff = cpu_row_sqdiff,
    .gather_rows = cpu_gather_rows,
    .scatter_rows = cpu_scatter_rows,
    .act_quant = cpu_act_quant,
    .round_f16 = cpu_round_f16,
    .upload_kv = cpu_upload_kv,
    .topk = cpu_topk,
    .destroy = cpu_destroy,
    .scale = cpu_scale,
    .geglu = cpu_geglu,
    .trim = cpu_trim,
    .upload_kvq = cpu_upload_kvq,
    .host_memory = 1,
};

int kvfs_backend_cpu_init(int n_threads, struct kvfs_backend *out)
{
    struct cpu_ctx *ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return -ENOMEM;
    int rc = kvfs_blas_load(&ctx->blas);
    if (rc) {
        free(ctx);
        return rc;
    }
    ctx->n_threads = n_threads > 0 ? n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (ctx->blas->set_num_threads)
        ctx->blas->set_num_threads(1); /* the pool splits the work (parallel_gemm) */
    pthread_mutex_init(&ctx->scratch_lock, NULL);
    ctx->pool = cpu_pool_new(ctx->n_threads); /* NULL: the caller does all */
    out->iface = &cpu_iface;
    out->ctx = ctx;
    return 0;
}
