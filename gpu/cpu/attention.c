/* attention.c - the CPU backend's attention: causal (and sliding-window)
 * attention by query blocks on the pool, batch-invariant from a few queries
 * on, and the attention mass a blend's selection votes with.  Compiled per
 * ISA level (the softmax in AVX-512 where there is AVX-512). */
#include "level.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "internal.h"

struct softmax_job {
    float *sc;
    const int32_t *q_pos, *kv_pos;
    int r0, r1, n_kv, ld, sorted;
    int window; /* > 0: keys at q_pos - window or before are masked too */
    float softcap; /* > 0: scores soft-capped (softcap_scores) before the mask */
    float sink;    /* gpt-oss: one more logit in the max and the sum, with no value; -inf: none */
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

/* Gemma 2's attention logit soft-capping, as ggml computes it (scale by
 * 1 / cap, tanhf, scale by cap): x[i] = cap * tanh(x[i] / cap). */
static void softcap_scores(float *x, int n, float cap)
{
    float inv = 1.0f / cap;
    for (int i = 0; i < n; i++)
        x[i] = tanhf(x[i] * inv) * cap;
}

/* Masked softmax of score rows [r0, r1): exact causal mask by position
 * (and window), after the soft-capping where there is one.  With sorted
 * positions a row's visible keys are [begin, end). */
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
            if (j->softcap > 0.0f)
                softcap_scores(full + begin, end - begin, j->softcap);
        } else {
            if (j->softcap > 0.0f) /* before the mask: tanh would take -inf to -cap */
                softcap_scores(full, n, j->softcap);
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
        /* ggml's soft_max_ext with sinks: the sink raises the max and
         * joins the sum after the keys' exponentials */
        mx = j->sink > mx ? j->sink : mx;
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
        if (j->sink != -INFINITY)
            sum += exp_nonpos(j->sink - mx);
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
    return cpu_env_int_once(&min_q_once, "KVFS_ATT_INVARIANT_MIN_Q", 1, ATT_INVARIANT_MIN_Q);
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
    float scale, softcap;
    const float *sinks; /* [n_head] or NULL */
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
    struct softmax_job job = {sc, c->q_pos, c->kv_pos + kb, i0, i1, nk, nk, c->sorted, c->window, c->softcap,
                              c->sinks ? c->sinks[h] : -INFINITY};
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
                                  c->sorted, c->window, c->softcap, c->sinks ? c->sinks[h0 + hh] : -INFINITY};
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
        if (!buf && !(buf = cpu_scratch_get(c->ctx, floats))) {
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
    cpu_scratch_put(c->ctx, buf);
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

int cpu_attention_sinks(void *vctx, const float *q, const int32_t *q_pos, int n_q, const float *k, const float *v,
                        const int32_t *kv_pos, int n_kv, int n_head, int n_kv_head, int head_dim, float scale,
                        int window, float softcap, const float *sinks, float *out)
{
    struct cpu_ctx *ctx = vctx;
    if (n_q <= 0)
        return 0;
    if (n_kv <= 0 || n_head % n_kv_head || window < 0 || !(softcap >= 0.0f))
        return -EINVAL;
    struct attn_call c = {ctx, q, k, v, NULL, NULL, n_kv, q_pos, kv_pos, out, n_q, n_kv, n_head, n_kv_head,
                          head_dim, window, positions_sorted(kv_pos, n_kv), scale, softcap, sinks, 0, 0, NULL, 0, NULL,
                          NULL, 0};
    struct scratch *kt = NULL;
    if (n_q >= att_invariant_min_q()) {
        int kstride = n_kv_head * head_dim, pad = (n_kv + PV_RUN - 1) / PV_RUN * PV_RUN, last = pad - PV_RUN;
        if (!(kt = cpu_scratch_get(ctx, (size_t)kstride * pad + (size_t)PV_RUN * kstride)))
            return -ENOMEM;
        float *v_tail = kt->p + (size_t)kstride * pad;
        struct kt_args ta = {k, kt->p, n_kv, kstride, pad};
        cpu_par_for(ctx, (size_t)(kstride + 7) / 8, (size_t)8 * n_kv, kt_range, &ta);
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
        cpu_scratch_put(ctx, kt);
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
        cpu_scratch_put(ctx, kt);
    return atomic_load(&c.rc);
}

int cpu_attention(void *vctx, const float *q, const int32_t *q_pos, int n_q, const float *k, const float *v,
                  const int32_t *kv_pos, int n_kv, int n_head, int n_kv_head, int head_dim, float scale, int window,
                  float softcap, float *out)
{
    return cpu_attention_sinks(vctx, q, q_pos, n_q, k, v, kv_pos, n_kv, n_head, n_kv_head, head_dim, scale, window,
                               softcap, NULL, out);
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
    float scale, softcap;
    const float *sinks; /* [n_head] or NULL */
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
                                  c->window, c->softcap, c->sinks ? c->sinks[h] : -INFINITY};
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

int cpu_attn_mass_sinks(void *vctx, const float *q, const int32_t *q_pos, int n_q, const float *k,
                        const int32_t *kv_pos, int n_kv, int n_head, int n_kv_head, int head_dim, float scale,
                        int window, float softcap, const float *sinks, float *out)
{
    struct cpu_ctx *ctx = vctx;
    if (n_q <= 0 || n_kv <= 0)
        return 0;
    if (n_head % n_kv_head || !(softcap >= 0.0f))
        return -EINVAL;
    /* the queries are few (a prompt's suffix): a block of them per sgemm */
    int block = n_q < ATT_BLOCK ? n_q : ATT_BLOCK;
    struct scratch *buf = cpu_scratch_get(ctx, (size_t)n_head * block * n_kv);
    if (!buf)
        return -ENOMEM;
    struct mass_call c = {ctx, q, k, q_pos, kv_pos, buf->p, out, 0, 0, n_kv, n_head, n_head / n_kv_head, head_dim,
                          window, positions_sorted(kv_pos, n_kv), scale, softcap, sinks, 0};
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
        cpu_par_for(ctx, (size_t)n_kv, (size_t)n_head * c.rows, mass_sum, &c);
    }
    cpu_scratch_put(ctx, buf);
    return 0;
}

int cpu_attn_mass(void *vctx, const float *q, const int32_t *q_pos, int n_q, const float *k, const int32_t *kv_pos,
                  int n_kv, int n_head, int n_kv_head, int head_dim, float scale, int window, float softcap, float *out)
{
    return cpu_attn_mass_sinks(vctx, q, q_pos, n_q, k, kv_pos, n_kv, n_head, n_kv_head, head_dim, scale, window,
                               softcap, NULL, out);
}
