/* profile.c - where a backend's time goes, op by op (KVFS_BACKEND_PROFILE).
 *
 * A profiled backend is the real one behind a table of wrappers: each
 * compute op waits for the device before and after it and adds the time to
 * its op's total, so the totals are the device's own time per op, launch
 * costs included (what a GPU session needs to know, with no profiler
 * there).  Waiting at every op makes the whole slower: totals, not speed.
 * Off (kvfs_backend_profile_enable(0)), the wrappers only pass calls on. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"

enum {
    P_MATMUL, P_MATMUL_ACT, P_RMSNORM, P_ROPE, P_ADD, P_SWIGLU, P_GEGLU, P_SCALE, P_GET_ROWS, P_WEIGHT_ROWS,
    P_ATTENTION, P_ATTN_MASS, P_ROW_SQDIFF, P_GATHER, P_SCATTER, P_ACT_QUANT, P_ROUND_F16, P_TOPK, P_UPLOAD_KV,
    P_UPLOAD_KVQ, P_CHUNK_SHIFT, P_UPLOAD, P_DOWNLOAD, P_COPY, P_MUL_ROWS, P_ATTENTION_SINKS, P_ATTN_MASS_SINKS, P_SWIGLU_OAI, P_N
};
static const char *const op_names[P_N] = {
    "matmul", "matmul_act", "rmsnorm", "rope", "add", "swiglu", "geglu", "scale", "get_rows", "weight_rows",
    "attention", "attn_mass", "row_sqdiff", "gather_rows", "scatter_rows", "act_quant", "round_f16", "topk",
    "upload_kv", "upload_kvq", "chunk_shift", "upload", "download", "copy", "mul_rows", "attention_sinks", "attn_mass_sinks", "swiglu_oai"};

struct prof_ctx {
    const struct kvfs_backend_iface *in;
    void *ctx;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int enabled;
static struct {
    uint64_t calls;
    double s;
} totals[P_N];

/* one wrapped table per real one (the CPU's, the plugin's), never freed:
 * the blend service's unpin hook may hold it past every model */
static struct {
    const struct kvfs_backend_iface *in;
    struct kvfs_backend_iface out;
} tables[4];
static int n_tables;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define P(vctx) ((struct prof_ctx *)(vctx))
/* op: the call on the real backend, timed between two waits when enabled */
#define TIMED(op, call)                                                                                                \
    do {                                                                                                               \
        struct prof_ctx *p_ = P(vctx);                                                                                 \
        if (!atomic_load_explicit(&enabled, memory_order_relaxed))                                                     \
            return p_->in->call;                                                                                       \
        p_->in->synchronize(p_->ctx);                                                                                  \
        double t_ = now_s();                                                                                           \
        int rc_ = p_->in->call;                                                                                        \
        p_->in->synchronize(p_->ctx);                                                                                  \
        t_ = now_s() - t_;                                                                                             \
        pthread_mutex_lock(&lock);                                                                                     \
        totals[op].calls++, totals[op].s += t_;                                                                        \
        pthread_mutex_unlock(&lock);                                                                                   \
        return rc_;                                                                                                    \
    } while (0)
#define IN(vctx) (P(vctx)->in)
#define CX(vctx) (P(vctx)->ctx)

static int w_alloc(void *vctx, size_t bytes, void **dev) { return IN(vctx)->alloc(CX(vctx), bytes, dev); }
static void w_free(void *vctx, void *dev) { IN(vctx)->free(CX(vctx), dev); }
static int w_upload(void *vctx, void *dev, const void *host, size_t bytes)
{
    TIMED(P_UPLOAD, upload(p_->ctx, dev, host, bytes));
}
static int w_download(void *vctx, void *host, const void *dev, size_t bytes)
{
    TIMED(P_DOWNLOAD, download(p_->ctx, host, dev, bytes));
}
static int w_synchronize(void *vctx) { return IN(vctx)->synchronize(CX(vctx)); }
static int w_copy(void *vctx, void *dst, const void *src, size_t bytes) { TIMED(P_COPY, copy(p_->ctx, dst, src, bytes)); }
static int w_weight_create(void *vctx, const float *host, int out_dim, int in_dim, struct kvfs_weight **out)
{
    return IN(vctx)->weight_create(CX(vctx), host, out_dim, in_dim, out);
}
static void w_weight_free(void *vctx, struct kvfs_weight *w) { IN(vctx)->weight_free(CX(vctx), w); }
static int w_matmul(void *vctx, const struct kvfs_weight *w, const float *bias, const float *x, float *y, int n)
{
    TIMED(P_MATMUL, matmul(p_->ctx, w, bias, x, y, n));
}
static int w_rmsnorm(void *vctx, const float *x, const float *g, float *y, int n, int dim, float eps)
{
    TIMED(P_RMSNORM, rmsnorm(p_->ctx, x, g, y, n, dim, eps));
}
static int w_rope(void *vctx, float *x, const int32_t *pos, int n, int n_heads, int head_dim, int rope_dim,
                  float theta, int style, const float *ff)
{
    TIMED(P_ROPE, rope(p_->ctx, x, pos, n, n_heads, head_dim, rope_dim, theta, style, ff));
}
static int w_add(void *vctx, const float *a, const float *b, float *out, size_t count)
{
    TIMED(P_ADD, add(p_->ctx, a, b, out, count));
}
static int w_swiglu(void *vctx, const float *gate, const float *up, float *out, size_t count)
{
    TIMED(P_SWIGLU, swiglu(p_->ctx, gate, up, out, count));
}
static int w_get_rows(void *vctx, const float *table, const int32_t *ids, float *out, int n, int dim)
{
    TIMED(P_GET_ROWS, get_rows(p_->ctx, table, ids, out, n, dim));
}
static int w_attention(void *vctx, const float *q, const int32_t *q_pos, int n_q, const float *k, const float *v,
                       const int32_t *kv_pos, int n_kv, int n_head, int n_kv_head, int head_dim, float scale,
                       int window, float softcap, float *out)
{
    TIMED(P_ATTENTION, attention(p_->ctx, q, q_pos, n_q, k, v, kv_pos, n_kv, n_head, n_kv_head, head_dim, scale,
                                 window, softcap, out));
}
static int w_attn_mass(void *vctx, const float *q, const int32_t *q_pos, int n_q, const float *k,
                       const int32_t *kv_pos, int n_kv, int n_head, int n_kv_head, int head_dim, float scale,
                       int window, float softcap, float *out)
{
    TIMED(P_ATTN_MASS, attn_mass(p_->ctx, q, q_pos, n_q, k, kv_pos, n_kv, n_head, n_kv_head, head_dim, scale,
                                 window, softcap, out));
}
static int w_row_sqdiff(void *vctx, const float *a, const float *b, float *out, int n, int dim)
{
    TIMED(P_ROW_SQDIFF, row_sqdiff(p_->ctx, a, b, out, n, dim));
}
static int w_gather(void *vctx, const float *src, const int32_t *idx, float *out, int n_idx, int dim)
{
    TIMED(P_GATHER, gather_rows(p_->ctx, src, idx, out, n_idx, dim));
}
static int w_scatter(void *vctx, const float *src, const int32_t *idx, float *dst, int n_idx, int dim)
{
    TIMED(P_SCATTER, scatter_rows(p_->ctx, src, idx, dst, n_idx, dim));
}
static int w_act_quant(void *vctx, const float *x, float *y, int n, int dim, int type)
{
    TIMED(P_ACT_QUANT, act_quant(p_->ctx, x, y, n, dim, type));
}
static int w_round_f16(void *vctx, float *x, size_t count) { TIMED(P_ROUND_F16, round_f16(p_->ctx, x, count)); }
static int w_topk(void *vctx, const float *scores, const uint8_t *forced, int n, int k, int32_t *out)
{
    TIMED(P_TOPK, topk(p_->ctx, scores, forced, n, k, out));
}
static int w_upload_kv(void *vctx, float *dst, const void *host, size_t count, int type)
{
    TIMED(P_UPLOAD_KV, upload_kv(p_->ctx, dst, host, count, type));
}
static void w_destroy(void *vctx)
{
    IN(vctx)->destroy(CX(vctx));
    free(vctx);
}
static int w_weight_create_quant(void *vctx, uint32_t type, const void *data, size_t row_bytes, int out_dim,
                                 int in_dim, struct kvfs_weight **out)
{
    return IN(vctx)->weight_create_quant(CX(vctx), type, data, row_bytes, out_dim, in_dim, out);
}
static int w_weight_rows(void *vctx, const struct kvfs_weight *w, const int32_t *ids, float *out, int n)
{
    TIMED(P_WEIGHT_ROWS, weight_rows(p_->ctx, w, ids, out, n));
}
static int w_matmul_act(void *vctx, const struct kvfs_weight *w, const float *bias, int act_type, const float *x,
                        float *tmp, float *y, int n)
{
    TIMED(P_MATMUL_ACT, matmul_act(p_->ctx, w, bias, act_type, x, tmp, y, n));
}
static int w_scale(void *vctx, const float *x, float s, float *y, size_t count)
{
    TIMED(P_SCALE, scale(p_->ctx, x, s, y, count));
}
static int w_geglu(void *vctx, const float *gate, const float *up, float *out, size_t count)
{
    TIMED(P_GEGLU, geglu(p_->ctx, gate, up, out, count));
}
static int w_mul_rows(void *vctx, const float *x, const float *s, float *y, int n, int dim)
{
    TIMED(P_MUL_ROWS, mul_rows(p_->ctx, x, s, y, n, dim));
}
static int w_attention_sinks(void *vctx, const float *q, const int32_t *q_pos, int n_q, const float *k,
                             const float *v, const int32_t *kv_pos, int n_kv, int n_head, int n_kv_head, int head_dim,
                             float scale, int window, float softcap, const float *sinks, float *out)
{
    TIMED(P_ATTENTION_SINKS, attention_sinks(p_->ctx, q, q_pos, n_q, k, v, kv_pos, n_kv, n_head, n_kv_head, head_dim,
                                             scale, window, softcap, sinks, out));
}
static int w_attn_mass_sinks(void *vctx, const float *q, const int32_t *q_pos, int n_q, const float *k,
                             const int32_t *kv_pos, int n_kv, int n_head, int n_kv_head, int head_dim, float scale,
                             int window, float softcap, const float *sinks, float *out)
{
    TIMED(P_ATTN_MASS_SINKS, attn_mass_sinks(p_->ctx, q, q_pos, n_q, k, kv_pos, n_kv, n_head, n_kv_head, head_dim,
                                             scale, window, softcap, sinks, out));
}
static int w_swiglu_oai(void *vctx, const float *gate, const float *up, float *out, size_t count, float alpha,
                        float limit)
{
    TIMED(P_SWIGLU_OAI, swiglu_oai(p_->ctx, gate, up, out, count, alpha, limit));
}
static void w_trim(void *vctx) { IN(vctx)->trim(CX(vctx)); }
static int w_upload_kvq(void *vctx, float *k, float *v, const void *blocks, uint32_t n_tokens, uint32_t kv_dim,
                        int codec)
{
    TIMED(P_UPLOAD_KVQ, upload_kvq(p_->ctx, k, v, blocks, n_tokens, kv_dim, codec));
}
static int w_chunk_shift(void *vctx, float *cache, const float *fresh, const int32_t *idx, int n_sel,
                         const int32_t *chunk_of, const int32_t *pos, int n_chunks, int row_lo, int n_rows,
                         int kv_dim, int head_dim, float shift, const struct kvfs_rope_args *rope)
{
    TIMED(P_CHUNK_SHIFT, chunk_shift(p_->ctx, cache, fresh, idx, n_sel, chunk_of, pos, n_chunks, row_lo, n_rows,
                                     kv_dim, head_dim, shift, rope));
}
static int w_host_register(void *vctx, void *host, size_t bytes)
{
    return IN(vctx)->host_register(CX(vctx), host, bytes);
}

/* in's wrapped table: each op of in's wrapped, the optional ones in lacks
 * left NULL, host_unregister in's own (it takes no context) */
static const struct kvfs_backend_iface *wrapped(const struct kvfs_backend_iface *in)
{
    const struct kvfs_backend_iface *t = NULL;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < n_tables && !t; i++)
        if (tables[i].in == in)
            t = &tables[i].out;
    if (!t && n_tables < (int)(sizeof(tables) / sizeof(tables[0]))) {
        struct kvfs_backend_iface *o = &tables[n_tables].out;
        tables[n_tables++].in = in;
        *o = *in;
#define W(f) o->f = in->f ? w_##f : NULL
        W(alloc), W(free), W(upload), W(download), W(synchronize), W(copy), W(weight_create), W(weight_free);
        W(matmul), W(rmsnorm), W(rope), W(add), W(swiglu), W(get_rows), W(attention), W(attn_mass);
        W(row_sqdiff), W(act_quant), W(round_f16), W(topk), W(upload_kv), W(destroy), W(weight_create_quant);
        W(weight_rows), W(matmul_act), W(scale), W(geglu), W(trim), W(upload_kvq), W(chunk_shift);
        W(host_register), W(mul_rows), W(attention_sinks), W(attn_mass_sinks), W(swiglu_oai);
#undef W
        o->gather_rows = in->gather_rows ? w_gather : NULL;
        o->scatter_rows = in->scatter_rows ? w_scatter : NULL;
        t = o;
    }
    pthread_mutex_unlock(&lock);
    return t;
}

int kvfs_backend_profile_wrap(struct kvfs_backend *b)
{
    const struct kvfs_backend_iface *t = wrapped(b->iface);
    struct prof_ctx *p = t ? malloc(sizeof(*p)) : NULL;
    if (!p)
        return -ENOMEM;
    p->in = b->iface;
    p->ctx = b->ctx;
    b->iface = t;
    b->ctx = p;
    return 0;
}

void kvfs_backend_profile_enable(int on)
{
    atomic_store(&enabled, !!on);
}

void kvfs_backend_profile_take(FILE *f, const char *title)
{
    pthread_mutex_lock(&lock);
    double sum = 0;
    for (int i = 0; i < P_N; i++)
        sum += totals[i].s;
    fprintf(f, "kvfs backend profile, %s: %.1f ms in ops\n", title, 1e3 * sum);
    for (int pass = 0; pass < P_N; pass++) { /* largest first */
        int best = -1;
        for (int i = 0; i < P_N; i++)
            if (totals[i].calls && (best < 0 || totals[i].s > totals[best].s))
                best = i;
        if (best < 0)
            break;
        fprintf(f, "  %-12s %6llu calls %9.2f ms (%4.1f%%)\n", op_names[best], (unsigned long long)totals[best].calls,
                1e3 * totals[best].s, sum > 0 ? 100 * totals[best].s / sum : 0.0);
        totals[best].calls = 0, totals[best].s = 0;
    }
    memset(totals, 0, sizeof(totals));
    pthread_mutex_unlock(&lock);
}
