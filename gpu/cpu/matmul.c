/* matmul.c - y = x . W^T on the CPU: f32 weights by OpenBLAS on the pool,
 * encoded weights by the integer gemv kernels (qdot.c, qmm_vnni.c) for few
 * rows and by tiles decoded to f32 for many.  Compiled per ISA level. */
#include "level.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "dequant_simd.h"
#include "internal.h"
#include "qdot.h"
#include "qmm_vnni.h"

/* n values of a weight row to f32: the SIMD decoder where this build has one
 * for the type (the same values), else the definition */
static int decode_row(uint32_t type, const void *src, float *dst, uint64_t n)
{
    int rc = kvfs_dequant_simd(type, src, dst, (size_t)n);
    return rc == -ENOTSUP ? kvfs_ggml_dequantize(type, src, dst, n) : rc;
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
 * 0.38x / 0.63x / 0.91x of the time at 38 / 152 / 512 rows.  Where the
 * VNNI panels exist, K-quants always take them.
 * KVFS_QMM_INT_ROWS=N overrides (for such comparisons). */
static int int_path_max_rows(const struct kvfs_weight *w)
{
    static atomic_int forced_once = INT_MIN;
    int forced = cpu_env_int_once(&forced_once, "KVFS_QMM_INT_ROWS", 0, -1);
    if (forced >= 0)
        return forced;
#ifdef __AVX2__
    /* the VNNI panels (this level has them) beat the f32 tiles at every
     * size measured, small matrices included: one thread, CPU seconds of a
     * 512-token prefill, 2026-11-28 (docs/lab-notes.md): Gemma 3 270M
     * 1.62 -> 1.43, a 16-expert Qwen3 MoE shape (2048 x 768 experts) 4.9 ->
     * 2.8, a DeepSeek-V2-Lite-like shape 3.1 -> 2.6 */
    if (qk_type(w->type) && kvfs_qmm_vnni_has(w->type) && !(w->in_dim % 256))
        return INT_MAX;
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
    struct scratch *buf = cpu_scratch_get(ctx, (size_t)tile_rows * w->in_dim);
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
    cpu_scratch_put(ctx, buf);
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

int cpu_matmul(void *vctx, const struct kvfs_weight *w, const float *bias, const float *x, float *y, int n)
{
    return matmul_impl(vctx, w, bias, x, y, n, 0);
}

/* A Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K or Q6_K weight with the
 * activations ggml pairs with it (Q8_0, Q8_1, Q8_0, Q8_1, Q8_0, Q8_K), on
 * the integer path (every row count where the VNNI panels take K-quants):
 * x straight to its 8-bit blocks; anything else quantizes x into tmp and
 * multiplies in float.  Until 2026-11-28 only below 8 rows: from there x
 * was rounded to floats first and the blocks recovered from them, the same
 * blocks (test_qmm) at twice the work, 8% of a MoE blend (docs/lab-notes.md). */
int cpu_matmul_act(void *vctx, const struct kvfs_weight *w, const float *bias, int act_type, const float *x,
                   float *tmp, float *y, int n)
{
#ifdef __AVX2__
    int t = (int)w->type;
    int pair = ((t == KVFS_GGML_Q4_0 || t == KVFS_GGML_Q5_0 || t == KVFS_GGML_Q8_0) && act_type == KVFS_GGML_Q8_0) ||
               ((t == KVFS_GGML_Q4_1 || t == KVFS_GGML_Q5_1) && act_type == 9 /* Q8_1 */);
    if (qk_type(w->type) && act_type == KVFS_GGML_Q8_K)
        pair = !(w->in_dim % 256);
    if (!w->w && pair && n < int_path_max_rows(w) && !(w->in_dim % 32))
        return matmul_impl(vctx, w, bias, x, y, n, 1);
#endif
    int rc = cpu_act_quant(vctx, x, tmp, n, w->in_dim, act_type);
    return rc ? rc : matmul_impl(vctx, w, bias, tmp, y, n, 0);
}


int cpu_weight_rows(void *vctx, const struct kvfs_weight *w, const int32_t *ids, float *out, int n)
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
