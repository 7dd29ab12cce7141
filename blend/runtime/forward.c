/* forward.c - transformer forward pass over the backend interface. */
#include "forward.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvquant.h"
#include "log.h"
#include "model_check.h" /* kvfs_arch_chunk_refusal */

#define BE(m) ((m)->be.iface)
#define CTX(m) ((m)->be.ctx)

int kvfs_kv_cache_init(const struct kvfs_model *m, int cap, struct kvfs_kv_cache *c)
{
    memset(c, 0, sizeof(*c));
    c->n_layer = m->hp.n_layer;
    c->kv_dim = m->hp.n_kv_head * m->hp.head_dim;
    c->cap = cap;
    c->k = calloc((size_t)c->n_layer, sizeof(float *));
    c->v = calloc((size_t)c->n_layer, sizeof(float *));
    c->host_pos = calloc((size_t)cap, sizeof(int32_t));
    if (!c->k || !c->v || !c->host_pos)
        goto fail;
    size_t bytes = sizeof(float) * (size_t)cap * c->kv_dim;
    for (int l = 0; l < c->n_layer; l++) {
        int src = m->layers[l].kv_layer; /* gemma4's shared-KV layers: their source's buffers, not a copy */
        if (src != l) {
            c->k[l] = c->k[src];
            c->v[l] = c->v[src];
            continue;
        }
        if (BE(m)->alloc(CTX(m), bytes, (void **)&c->k[l]) || BE(m)->alloc(CTX(m), bytes, (void **)&c->v[l]))
            goto fail;
    }
    if (BE(m)->alloc(CTX(m), sizeof(int32_t) * (size_t)cap, (void **)&c->pos))
        goto fail;
    return 0;
fail:
    kvfs_kv_cache_free(m, c);
    return -ENOMEM;
}

void kvfs_kv_cache_free(const struct kvfs_model *m, struct kvfs_kv_cache *c)
{
    for (int l = 0; c->k && l < c->n_layer; l++)
        if (m->layers[l].kv_layer == l)
            BE(m)->free(CTX(m), c->k[l]);
    for (int l = 0; c->v && l < c->n_layer; l++)
        if (m->layers[l].kv_layer == l)
            BE(m)->free(CTX(m), c->v[l]);
    if (c->pos)
        BE(m)->free(CTX(m), c->pos);
    free(c->k);
    free(c->v);
    free(c->host_pos);
    memset(c, 0, sizeof(*c));
}

void kvfs_work_free(const struct kvfs_model *m, struct kvfs_work *w)
{
    void *bufs[] = {w->x, w->xn, w->q, w->k, w->v, w->att, w->o, w->aq, w->gate, w->up, w->ids, w->pos, w->ple};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        if (bufs[i])
            BE(m)->free(CTX(m), bufs[i]);
}

int kvfs_work_alloc(const struct kvfs_model *m, int n, struct kvfs_work *w)
{
    const struct kvfs_hparams *hp = &m->hp;
    size_t e = sizeof(float) * (size_t)n * hp->n_embd, kv = sizeof(float) * (size_t)n * hp->n_kv_head * hp->head_dim,
           ff = sizeof(float) * (size_t)n * (hp->n_ff > hp->n_ff_shexp ? hp->n_ff : hp->n_ff_shexp),
           ple = sizeof(float) * (size_t)n * hp->n_layer * hp->n_ple,
           qd = sizeof(float) * (size_t)n * hp->q_dim;
    memset(w, 0, sizeof(*w));
    int rc = BE(m)->alloc(CTX(m), e, (void **)&w->x);
    if (!rc) rc = BE(m)->alloc(CTX(m), e, (void **)&w->xn);
    if (!rc) rc = BE(m)->alloc(CTX(m), qd, (void **)&w->q);
    if (!rc) rc = BE(m)->alloc(CTX(m), kv, (void **)&w->k);
    if (!rc) rc = BE(m)->alloc(CTX(m), kv, (void **)&w->v);
    if (!rc) rc = BE(m)->alloc(CTX(m), qd, (void **)&w->att);
    if (!rc) rc = BE(m)->alloc(CTX(m), e, (void **)&w->o);
    if (!rc) rc = BE(m)->alloc(CTX(m), e > qd ? e : qd, (void **)&w->aq); /* inputs of q..o quantized */
    if (ff < sizeof(float) * (size_t)n * hp->n_ple) /* gemma4's per-layer embedding gate */
        ff = sizeof(float) * (size_t)n * hp->n_ple;
    if (!rc) rc = BE(m)->alloc(CTX(m), ff, (void **)&w->gate);
    if (!rc) rc = BE(m)->alloc(CTX(m), ff, (void **)&w->up);
    if (!rc) rc = BE(m)->alloc(CTX(m), sizeof(int32_t) * (size_t)n, (void **)&w->ids);
    if (!rc) rc = BE(m)->alloc(CTX(m), sizeof(int32_t) * (size_t)n, (void **)&w->pos);
    if (!rc && ple) rc = BE(m)->alloc(CTX(m), ple, (void **)&w->ple);
    if (rc)
        kvfs_work_free(m, w);
    return rc;
}

/* y = x . W^T, quantizing x first as llama.cpp would (see model.h). */
int kvfs_linear(const struct kvfs_model *m, const struct kvfs_weight *wt, const float *bias, int act_q,
                  const float *x, float *tmp, float *y, int n, int in_dim)
{
    const struct kvfs_backend_iface *be = BE(m);
    if (m->ggml_compat && act_q && be->matmul_act)
        return be->matmul_act(CTX(m), wt, bias, act_q, x, tmp, y, n);
    if (m->ggml_compat && act_q) {
        int rc = be->act_quant(CTX(m), x, tmp, n, in_dim, act_q);
        if (rc)
            return rc;
        x = tmp;
    }
    return be->matmul(CTX(m), wt, bias, x, y, n);
}

int kvfs_embed(const struct kvfs_model *m, const int32_t *ids, float *x, int n)
{
    int rc = m->tok_embd_w ? BE(m)->weight_rows(CTX(m), m->tok_embd_w, ids, x, n)
                           : BE(m)->get_rows(CTX(m), m->tok_embd, ids, x, n, m->hp.n_embd);
    if (!rc && m->hp.embd_scale != 0.0f)
        rc = BE(m)->scale(CTX(m), x, m->hp.embd_scale, x, (size_t)n * m->hp.n_embd);
    return rc;
}

static int gcd_i(int a, int b)
{
    while (b) {
        int t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* rows segments of width floats, the r-th at src + r * ss, to dst + r * ds
 * (device memory): the backend has no strided copy, so as one gather and
 * one scatter of units of the widest size dividing all three */
static int strided_copy(const struct kvfs_model *m, float *dst, int ds, const float *src, int ss, int rows, int width)
{
    const struct kvfs_backend_iface *be = BE(m);
    void *ctx = CTX(m);
    if (ss == width && ds == width)
        return be->copy(ctx, dst, src, sizeof(float) * (size_t)rows * width);
    int g = gcd_i(width, gcd_i(ss, ds)), per = width / g, rc;
    size_t nu = (size_t)rows * per;
    int32_t *idx = malloc(sizeof(int32_t) * nu * 2), *d_idx = NULL;
    float *d_tmp = NULL;
    if (!idx)
        return -ENOMEM;
    for (size_t u = 0; u < nu; u++) {
        idx[u] = (int32_t)(u / per * (ss / g) + u % per);
        idx[nu + u] = (int32_t)(u / per * (ds / g) + u % per);
    }
    if (!(rc = be->alloc(ctx, sizeof(int32_t) * nu * 2, (void **)&d_idx)) &&
        !(rc = be->alloc(ctx, sizeof(float) * nu * g, (void **)&d_tmp)) &&
        !(rc = be->upload(ctx, d_idx, idx, sizeof(int32_t) * nu * 2)) &&
        !(rc = be->gather_rows(ctx, src, d_idx, d_tmp, (int)nu, g)) &&
        !(rc = be->scatter_rows(ctx, d_tmp, d_idx + nu, dst, (int)nu, g)))
        rc = be->synchronize(ctx); /* the buffers are freed at once */
    if (d_idx)
        be->free(ctx, d_idx);
    if (d_tmp)
        be->free(ctx, d_tmp);
    free(idx);
    return rc;
}

/* deepseek2, either MLA form: the input norm, Q (through its compressed
 * rank and norm, or not) into qf [n][n_head * mla_k], the latent and the
 * rotated key part into kvp [n][rank + n_rot]; ql and tmp scratch */
static int ds2_q_kv_a(const struct kvfs_model *m, const struct kvfs_layer_weights *L, struct kvfs_work *w, int n,
                      float *qf, float *kvp, float *ql, float *tmp)
{
    const struct kvfs_hparams *hp = &m->hp;
    const struct kvfs_backend_iface *be = BE(m);
    void *ctx = CTX(m);
    int E = hp->n_embd, rc;
    if ((rc = L->attn_norm ? be->rmsnorm(ctx, w->x, L->attn_norm, w->xn, n, E, hp->rms_eps)
                           : be->copy(ctx, w->xn, w->x, sizeof(float) * (size_t)n * E)))
        return rc;
    if (L->wq_a ? (rc = kvfs_linear(m, L->wq_a, NULL, L->act_q_mla[0], w->xn, tmp, ql, n, E)) ||
                      (rc = be->rmsnorm(ctx, ql, L->q_a_norm, ql, n, hp->q_lora, hp->rms_eps)) ||
                      (rc = kvfs_linear(m, L->wq_b, NULL, L->act_q_mla[1], ql, tmp, qf, n, hp->q_lora))
                : (rc = kvfs_linear(m, L->wq, NULL, L->act_q_mla[0], w->xn, tmp, qf, n, E)))
        return rc;
    return kvfs_linear(m, L->wkv_a, NULL, L->act_q_mla[2], w->xn, tmp, kvp, n, E);
}

/* deepseek2's YaRN: ggml's rotation scales what it rotates, the rotated
 * parts only: the first rope_dim values of Q's n x n_head rows and of K's
 * k_rows rows times mla_rope_mscale (scratch: n x n_head x rope_dim) */
static int ds2_rope_mscale(const struct kvfs_model *m, struct kvfs_work *w, int n, int k_rows, float *scratch)
{
    const struct kvfs_hparams *hp = &m->hp;
    const struct kvfs_backend_iface *be = BE(m);
    void *ctx = CTX(m);
    int H = hp->n_head, D = hp->head_dim, R = hp->rope_dim, rc;
    float ms = hp->mla_rope_mscale;
    if (ms == 0.0f || ms == 1.0f)
        return 0;
    if ((rc = strided_copy(m, scratch, R, w->q, D, n * H, R)) ||
        (rc = be->scale(ctx, scratch, ms, scratch, (size_t)n * H * R)) ||
        (rc = strided_copy(m, w->q, D, scratch, R, n * H, R)) || (rc = strided_copy(m, scratch, R, w->k, D, k_rows, R)) ||
        (rc = be->scale(ctx, scratch, ms, scratch, (size_t)k_rows * R)))
        return rc;
    return strided_copy(m, w->k, D, scratch, R, k_rows, R);
}

/* w->v's first count values zero (both MLA forms' V has zeros where K rotates) */
static int zero_v(const struct kvfs_model *m, struct kvfs_work *w, size_t count)
{
    const struct kvfs_backend_iface *be = BE(m);
    float *zero = calloc(count, sizeof(float));
    if (!zero)
        return -ENOMEM;
    int rc = be->upload(CTX(m), w->v, zero, sizeof(float) * count);
    if (!rc)
        rc = be->synchronize(CTX(m)); /* zero is freed below */
    free(zero);
    return rc;
}

/* deepseek2's Q and K (model.h) as llama.cpp's absorbed MLA computes them:
 * Q (through its compressed rank and norm, or not) split per head in a
 * non-rotated part, taken to the latent space by wk_b[h], and a rotated
 * part; the latent (normed) and the rotated key part, one row per token.
 * Rows laid out [rotated | latent] (kvfs's order, model.h); V is that row
 * with the rotated part zero (the latent part of the output is what wv_b
 * reads). */
static int mla_qkv(const struct kvfs_model *m, const struct kvfs_layer_weights *L, struct kvfs_work *w, int n)
{
    const struct kvfs_hparams *hp = &m->hp;
    const struct kvfs_backend_iface *be = BE(m);
    void *ctx = CTX(m);
    int E = hp->n_embd, H = hp->n_head, D = hp->head_dim, R = hp->rope_dim, K = hp->mla_rank, dk = hp->mla_k;
    int nope = dk - R, rc;
    int big = E > hp->q_lora ? E : hp->q_lora; /* the widest input a product here quantizes */
    big = big > nope ? big : nope;
    float *qf = NULL, *kvp = NULL, *lat = NULL, *ql = NULL, *qn = NULL, *tmp = NULL;
    if ((rc = be->alloc(ctx, sizeof(float) * (size_t)n * H * dk, (void **)&qf)) ||
        (rc = be->alloc(ctx, sizeof(float) * (size_t)n * (K + R), (void **)&kvp)) ||
        (rc = be->alloc(ctx, sizeof(float) * (size_t)n * K, (void **)&lat)) ||
        (rc = be->alloc(ctx, sizeof(float) * (size_t)n * (hp->q_lora > 0 ? hp->q_lora : 1), (void **)&ql)) ||
        (rc = be->alloc(ctx, sizeof(float) * (size_t)n * nope, (void **)&qn)) ||
        (rc = be->alloc(ctx, sizeof(float) * (size_t)n * (big > K ? big : K), (void **)&tmp)))
        goto out;
    if ((rc = ds2_q_kv_a(m, L, w, n, qf, kvp, ql, tmp)) || (rc = strided_copy(m, w->k, D, kvp + K, K + R, n, R)) ||
        (rc = strided_copy(m, lat, K, kvp, K + R, n, K)) ||
        (rc = be->rmsnorm(ctx, lat, L->kv_a_norm, lat, n, K, hp->rms_eps)) ||
        (rc = strided_copy(m, w->k + R, D, lat, K, n, K)) ||
        (rc = strided_copy(m, w->q, D, qf + nope, dk, n * H, R)))
        goto out;
    for (int h = 0; h < H; h++) /* ggml's batched product by wk_b: head by head */
        if ((rc = strided_copy(m, qn, nope, qf + (size_t)h * dk, H * dk, n, nope)) ||
            (rc = kvfs_linear(m, L->wk_b[h], NULL, L->act_q_mla[3], qn, tmp, lat, n, nope)) ||
            (rc = strided_copy(m, w->q + (size_t)h * D + R, H * D, lat, K, n, K)))
            goto out;
    if ((rc = be->rope(ctx, w->q, w->pos, n, H, D, R, hp->rope_theta, hp->rope_style, m->rope_freqs)) ||
        (rc = be->rope(ctx, w->k, w->pos, n, 1, D, R, hp->rope_theta, hp->rope_style, m->rope_freqs)))
        goto out;
    if ((rc = ds2_rope_mscale(m, w, n, n, qf))) /* qf is free now */
        goto out;
    /* the cache's f16 and the f16 Q of Q.K (kvfs_layer_qkv) */
    if (m->ggml_compat && ((rc = be->round_f16(ctx, w->k, (size_t)n * D)) ||
                           (rc = be->round_f16(ctx, w->q, (size_t)n * hp->q_dim))))
        goto out;
    /* V: the row with its rotated part zeroed (attention's output there is
     * not read), so that values do not depend on position, as in every
     * family (the chunk shift moves them unrotated) */
    if ((rc = zero_v(m, w, (size_t)n * D)) || (rc = strided_copy(m, w->v + R, D, w->k + R, D, n, K)))
        goto out;
    rc = be->synchronize(ctx);
out:
    {
        void *bufs[] = {qf, kvp, lat, ql, qn, tmp};
        for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
            if (bufs[i])
                be->free(ctx, bufs[i]);
    }
    return rc;
}

/* deepseek2's unabsorbed form (older files, attn_kv_b) as llama.cpp
 * computes it: Q as in the absorbed form; the latent (normed) decompressed
 * by wkv_b into each head's unrotated key part and value, the rotated key
 * part shared by every head; an MHA cache of head_dim = mla_k.  kvfs's
 * rows: per head [rotated | nope] for Q and K (llama.cpp's [nope |
 * rotated]: rope_dim covers the rotated part as in every family), V after
 * rope_dim zeros (V_NARROW, mla_v = head_dim - rope_dim). */
static int mla_mha_qkv(const struct kvfs_model *m, const struct kvfs_layer_weights *L, struct kvfs_work *w, int n)
{
    const struct kvfs_hparams *hp = &m->hp;
    const struct kvfs_backend_iface *be = BE(m);
    void *ctx = CTX(m);
    int E = hp->n_embd, H = hp->n_head, D = hp->head_dim, R = hp->rope_dim, K = hp->mla_mha_rank, V = hp->mla_v;
    int nope = D - R, kvw = nope + V, rc;
    int big = E > hp->q_lora ? E : hp->q_lora; /* the widest input a product here quantizes */
    big = big > K ? big : K;
    float *qf = NULL, *kvp = NULL, *lat = NULL, *ql = NULL, *kv = NULL, *tmp = NULL;
    if ((rc = be->alloc(ctx, sizeof(float) * (size_t)n * H * D, (void **)&qf)) ||
        (rc = be->alloc(ctx, sizeof(float) * (size_t)n * (K + R), (void **)&kvp)) ||
        (rc = be->alloc(ctx, sizeof(float) * (size_t)n * K, (void **)&lat)) ||
        (rc = be->alloc(ctx, sizeof(float) * (size_t)n * (hp->q_lora > 0 ? hp->q_lora : 1), (void **)&ql)) ||
        (rc = be->alloc(ctx, sizeof(float) * (size_t)n * H * kvw, (void **)&kv)) ||
        (rc = be->alloc(ctx, sizeof(float) * (size_t)n * big, (void **)&tmp)))
        goto out;
    if ((rc = ds2_q_kv_a(m, L, w, n, qf, kvp, ql, tmp)) || (rc = strided_copy(m, lat, K, kvp, K + R, n, K)) ||
        (rc = be->rmsnorm(ctx, lat, L->kv_a_norm, lat, n, K, hp->rms_eps)) ||
        (rc = kvfs_linear(m, L->wkv_b, NULL, L->act_q_mla[3], lat, tmp, kv, n, K)) ||
        /* each (token, head) one row: Q's and K's parts swapped into kvfs's order */
        (rc = strided_copy(m, w->q, D, qf + nope, D, n * H, R)) ||
        (rc = strided_copy(m, w->q + R, D, qf, D, n * H, nope)) ||
        (rc = strided_copy(m, w->k + R, D, kv, kvw, n * H, nope)))
        goto out;
    for (int h = 0; h < H; h++) /* ggml_repeat of the rotated key part */
        if ((rc = strided_copy(m, w->k + (size_t)h * D, H * D, kvp + K, K + R, n, R)))
            goto out;
    if ((rc = be->rope(ctx, w->q, w->pos, n, H, D, R, hp->rope_theta, hp->rope_style, m->rope_freqs)) ||
        (rc = be->rope(ctx, w->k, w->pos, n, H, D, R, hp->rope_theta, hp->rope_style, m->rope_freqs)))
        goto out;
    /* qf is free now; V: rope_dim zeros (not part of the value), then the head's value */
    if ((rc = ds2_rope_mscale(m, w, n, n * H, qf)) || (rc = zero_v(m, w, (size_t)n * H * D)) ||
        (rc = strided_copy(m, w->v + R, D, kv + nope, kvw, n * H, V)))
        goto out;
    /* the cache's f16 and the f16 Q of Q.K (kvfs_layer_qkv) */
    if (m->ggml_compat && ((rc = be->round_f16(ctx, w->k, (size_t)n * H * D)) ||
                           (rc = be->round_f16(ctx, w->v, (size_t)n * H * D)) ||
                           (rc = be->round_f16(ctx, w->q, (size_t)n * H * D))))
        goto out;
    rc = be->synchronize(ctx);
out:
    {
        void *bufs[] = {qf, kvp, lat, ql, kv, tmp};
        for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
            if (bufs[i])
                be->free(ctx, bufs[i]);
    }
    return rc;
}

/* deepseek2: attention over the cached rows (one KV head of the row, MQA),
 * each query head's latent output decompressed by wv_b[h], the output
 * projection; into w->o */
static int mla_attn(const struct kvfs_model *m, int l, struct kvfs_work *w, int n, const struct kvfs_kv_cache *c,
                    int n_ctx)
{
    const struct kvfs_hparams *hp = &m->hp;
    const struct kvfs_layer_weights *L = &m->layers[l];
    const struct kvfs_backend_iface *be = BE(m);
    void *ctx = CTX(m);
    int H = hp->n_head, D = hp->head_dim, R = hp->rope_dim, K = hp->mla_rank, V = hp->mla_v, rc;
    float *lat = NULL, *vo = NULL, *av = NULL, *tmp = NULL;
    if ((rc = be->alloc(ctx, sizeof(float) * (size_t)n * K, (void **)&lat)) ||
        (rc = be->alloc(ctx, sizeof(float) * (size_t)n * V, (void **)&vo)) ||
        (rc = be->alloc(ctx, sizeof(float) * (size_t)n * H * V, (void **)&av)) ||
        (rc = be->alloc(ctx, sizeof(float) * (size_t)n * (H * V > K ? H * V : K), (void **)&tmp)) ||
        (rc = be->attention(ctx, w->q, w->pos, n, c->k[l], c->v[l], c->pos, n_ctx, H, 1, D, hp->attn_scale, 0, 0.0f,
                            w->att)))
        goto out;
    for (int h = 0; h < H; h++)
        if ((rc = strided_copy(m, lat, K, w->att + (size_t)h * D + R, H * D, n, K)) ||
            (rc = kvfs_linear(m, L->wv_b[h], NULL, L->act_q_mla[4], lat, tmp, vo, n, K)) ||
            (rc = strided_copy(m, av + (size_t)h * V, H * V, vo, V, n, V)))
            goto out;
    if (!(rc = kvfs_linear(m, L->wo, NULL, L->act_q[3], av, tmp, w->o, n, H * V)))
        rc = be->synchronize(ctx);
out:
    {
        void *bufs[] = {lat, vo, av, tmp};
        for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
            if (bufs[i])
                be->free(ctx, bufs[i]);
    }
    return rc;
}

int kvfs_layer_qkv(const struct kvfs_model *m, int l, struct kvfs_work *w, int n)
{
    const struct kvfs_hparams *hp = &m->hp;
    const struct kvfs_layer_weights *L = &m->layers[l];
    const struct kvfs_backend_iface *be = BE(m);
    void *ctx = CTX(m);
    /* the layer's own head width (gemma4's local layers: narrower); a
     * shared-KV layer (gemma4) computes Q alone */
    int rc, E = hp->n_embd, D = L->head_dim, R = L->rope_dim, KH = L->n_kv_head, q_dim = hp->n_head * D;
    int kv_dim = KH * D;
    int kv = L->kv_layer == l;
    if (hp->mla_rank)
        return mla_qkv(m, L, w, n);
    if (hp->mla_mha_rank)
        return mla_mha_qkv(m, L, w, n);
    if ((rc = L->attn_norm ? be->rmsnorm(ctx, w->x, L->attn_norm, w->xn, n, E, hp->rms_eps)
                           : be->copy(ctx, w->xn, w->x, sizeof(float) * (size_t)n * E)) ||
        (rc = kvfs_linear(m, L->wq, L->bq, L->act_q[0], w->xn, w->aq, w->q, n, E)) ||
        (kv && (rc = kvfs_linear(m, L->wk, L->bk, L->act_q[1], w->xn, w->aq, w->k, n, E))) ||
        /* gemma4 without attn_v: K's projection is V too (before K's norm) */
        (kv && (rc = L->wv ? kvfs_linear(m, L->wv, L->bv, L->act_q[2], w->xn, w->aq, w->v, n, E)
                           : be->copy(ctx, w->v, w->k, sizeof(float) * (size_t)n * kv_dim))))
        return rc;
    /* gemma3: each head normalized before RoPE */
    if (L->attn_q_norm && hp->qk_norm_full && /* olmo2: across the heads */
        ((rc = be->rmsnorm(ctx, w->q, L->attn_q_norm, w->q, n, q_dim, hp->rms_eps)) ||
         (rc = be->rmsnorm(ctx, w->k, L->attn_k_norm, w->k, n, kv_dim, hp->rms_eps))))
        return rc;
    if (L->attn_q_norm && !hp->qk_norm_full &&
        ((rc = be->rmsnorm(ctx, w->q, L->attn_q_norm, w->q, n * hp->n_head, D, hp->rms_eps)) ||
         (kv && (rc = be->rmsnorm(ctx, w->k, L->attn_k_norm, w->k, n * KH, D, hp->rms_eps)))))
        return rc;
    /* gemma4: each V head RMS-normed, no weight */
    if (kv && hp->v_norm && (rc = be->rmsnorm(ctx, w->v, m->ones, w->v, n * KH, D, hp->rms_eps)))
        return rc;
    if ((!L->no_rope &&
         ((rc = be->rope(ctx, w->q, w->pos, n, hp->n_head, D, R, L->rope_theta, hp->rope_style, L->rope_freqs)) ||
          (kv && (rc = be->rope(ctx, w->k, w->pos, n, KH, D, R, L->rope_theta, hp->rope_style,
                                L->rope_freqs))))) ||
        (hp->scale_q && (rc = be->scale(ctx, w->q, hp->attn_scale, w->q, (size_t)n * q_dim))) ||
        /* RoPE scaling's magnitude: ggml's cos and sin carry it (model.c refuses it on partial rotary) */
        (!L->no_rope && L->rope_mscale != 0.0f && L->rope_mscale != 1.0f &&
         ((rc = be->scale(ctx, w->q, L->rope_mscale, w->q, (size_t)n * q_dim)) ||
          (kv && (rc = be->scale(ctx, w->k, L->rope_mscale, w->k, (size_t)n * kv_dim))))))
        return rc;
    /* the cache holds f16-precision K/V: what chunk files store, and what
     * llama.cpp's f16 cache holds (it also rounds Q to f16 for Q.K) */
    if (m->ggml_compat && ((kv && (rc = be->round_f16(ctx, w->k, (size_t)n * kv_dim))) ||
                           (kv && (rc = be->round_f16(ctx, w->v, (size_t)n * kv_dim))) ||
                           (rc = be->round_f16(ctx, w->q, (size_t)n * q_dim))))
        return rc;
    return 0;
}

/* The experts' FFN of n rows of w->xn into w->o, as llama.cpp's
 * build_moe_ffn: router logits, softmax, the top n_expert_used experts of
 * each row, their probabilities renormalized to sum 1 (gpt-oss, moe_oai:
 * the logits biased, the top experts by logit, weighted by the softmax of
 * their k logits, ggml's SOFTMAX_WEIGHT gating); then expert by expert,
 * its rows gathered, one SwiGLU product for them all (gpt-oss: biased
 * products, swiglu_oai), scattered to their slot (k-th choice of their
 * row), weighted; the slots summed in order.  A row's routing depends on
 * that row alone, so a blend's recomputed rows go to the experts a
 * prefill sends them to; cost follows the routed rows, so its few
 * recomputed rows cost few products. */
static int moe_ffn(const struct kvfs_model *m, const struct kvfs_layer_weights *L, struct kvfs_work *w, int n)
{
    const struct kvfs_hparams *hp = &m->hp;
    const struct kvfs_backend_iface *be = BE(m);
    void *ctx = CTX(m);
    int E = hp->n_embd, ne = hp->n_expert, k = hp->n_expert_used, F = hp->n_ff_exp, rc;
    size_t nk = (size_t)n * k;
    float *d_logit = NULL, *d_xg = NULL, *d_g = NULL, *d_u = NULL, *d_y = NULL, *d_slots = NULL, *d_wt = NULL;
    int32_t *d_src = NULL, *d_dst = NULL;
    float *logit = malloc(sizeof(float) * (size_t)n * ne), *wt = malloc(sizeof(float) * nk),
          *score = malloc(sizeof(float) * (size_t)ne);
    int32_t *sel = malloc(sizeof(int32_t) * nk), *src = malloc(sizeof(int32_t) * nk),
            *dst = malloc(sizeof(int32_t) * nk), *cnt = calloc((size_t)ne + 1, sizeof(int32_t));
    if (!logit || !wt || !score || !sel || !src || !dst || !cnt) {
        rc = -ENOMEM;
        goto out;
    }
    if ((rc = be->alloc(ctx, sizeof(float) * (size_t)n * ne, (void **)&d_logit)) ||
        (rc = be->alloc(ctx, sizeof(float) * (size_t)n * E, (void **)&d_xg)) ||
        (rc = be->alloc(ctx, sizeof(float) * (size_t)n * F, (void **)&d_g)) ||
        (rc = be->alloc(ctx, sizeof(float) * (size_t)n * F, (void **)&d_u)) ||
        (rc = be->alloc(ctx, sizeof(float) * (size_t)n * E, (void **)&d_y)) ||
        (rc = be->alloc(ctx, sizeof(float) * nk * E, (void **)&d_slots)) ||
        (rc = be->alloc(ctx, sizeof(float) * nk, (void **)&d_wt)) ||
        (rc = be->alloc(ctx, sizeof(int32_t) * nk, (void **)&d_src)) ||
        (rc = be->alloc(ctx, sizeof(int32_t) * nk, (void **)&d_dst)) ||
        (rc = kvfs_linear(m, L->ffn_gate_inp, L->ffn_gate_inp_b, L->act_q_moe[0], w->xn, w->aq, d_logit, n, E)) ||
        (rc = be->download(ctx, logit, d_logit, sizeof(float) * (size_t)n * ne)))
        goto out;
    for (int r = 0; r < n && hp->moe_oai; r++) {
        const float *p = logit + (size_t)r * ne;
        for (int i = 0; i < k; i++) { /* top k logits, best first; a tie to the lower expert */
            int b = -1;
            for (int j = 0; j < ne; j++) {
                int taken = 0;
                for (int q = 0; q < i; q++)
                    taken |= sel[(size_t)r * k + q] == j;
                if (!taken && (b < 0 || p[j] > p[b]))
                    b = j;
            }
            sel[(size_t)r * k + i] = b;
        }
        /* ggml's soft_max of the k chosen logits: max, exp(x - max) summed in double, times 1 / sum */
        float mx = -INFINITY;
        for (int i = 0; i < k; i++)
            mx = p[sel[(size_t)r * k + i]] > mx ? p[sel[(size_t)r * k + i]] : mx;
        double s = 0.0;
        for (int i = 0; i < k; i++) {
            float e = expf(p[sel[(size_t)r * k + i]] - mx);
            wt[(size_t)i * n + r] = e;
            s += (double)e;
        }
        for (int i = 0; i < k; i++)
            wt[(size_t)i * n + r] *= (float)(1.0 / s);
    }
    for (int r = 0; r < n && !hp->moe_oai; r++) {
        float *p = logit + (size_t)r * ne, mx = -INFINITY, sum = 0.0f;
        if (hp->moe_sigmoid) { /* deepseek2 (V3): ggml's sigmoid */
            for (int j = 0; j < ne; j++)
                p[j] = 1.0f / (1.0f + expf(-p[j]));
        } else {
            for (int j = 0; j < ne; j++)
                mx = p[j] > mx ? p[j] : mx;
            double s = 0.0; /* ggml's soft_max: exp(x - max), summed in double */
            for (int j = 0; j < ne; j++)
                s += (double)(p[j] = expf(p[j] - mx));
            for (int j = 0; j < ne; j++)
                p[j] *= (float)(1.0 / s);
        }
        /* deepseek2's selection bias: it chooses, the unbiased probabilities weigh */
        const float *bias = L->exp_probs_b;
        for (int j = 0; j < ne; j++)
            score[j] = bias ? p[j] + bias[j] : p[j];
        if (hp->n_group > 1) { /* V3's group-limited routing (llama.cpp's build_moe_ffn): a group scores the sum
                                * of its top 2; the experts of all but the n_group_used best are out */
            int per = ne / hp->n_group;
            float gs[256];
            uint8_t keep[256] = {0};
            for (int gi = 0; gi < hp->n_group; gi++) {
                const float *x = score + (size_t)gi * per;
                int a = 0;
                for (int j = 1; j < per; j++)
                    a = x[j] > x[a] ? j : a;
                int b2 = a == 0 ? 1 : 0;
                for (int j = 0; j < per; j++)
                    b2 = j != a && x[j] > x[b2] ? j : b2;
                gs[gi] = x[a] + x[b2];
            }
            for (int u = 0; u < hp->n_group_used; u++) {
                int best = -1;
                for (int gi = 0; gi < hp->n_group; gi++)
                    best = !keep[gi] && (best < 0 || gs[gi] > gs[best]) ? gi : best;
                keep[best] = 1;
            }
            for (int j = 0; j < ne; j++)
                score[j] = keep[j / per] ? score[j] : -INFINITY;
        }
        for (int i = 0; i < k; i++) { /* top k, best first; a tie to the lower expert */
            int b = -1;
            for (int j = 0; j < ne; j++) {
                int taken = 0;
                for (int q = 0; q < i; q++)
                    taken |= sel[(size_t)r * k + q] == j;
                if (!taken && (b < 0 || score[j] > score[b]))
                    b = j;
            }
            sel[(size_t)r * k + i] = b;
            sum += p[b];
        }
        sum = sum < 6.103515625e-5f ? 6.103515625e-5f : sum; /* llama.cpp's clamp of the sum */
        for (int i = 0; i < k; i++) { /* slot-major: row r's i-th choice is row i * n + r of the slots */
            float v = p[sel[(size_t)r * k + i]];
            v = hp->moe_norm ? v / sum : v;
            wt[(size_t)i * n + r] = hp->moe_scale != 0.0f && hp->moe_scale != 1.0f ? v * hp->moe_scale : v;
        }
    }
    /* rows grouped by expert: cnt[e] .. cnt[e + 1] of src (token rows) and dst (slot rows) */
    for (size_t j = 0; j < nk; j++)
        cnt[sel[j] + 1]++;
    for (int e = 0; e < ne; e++)
        cnt[e + 1] += cnt[e];
    for (int r = 0; r < n; r++)
        for (int i = 0; i < k; i++) {
            int e = sel[(size_t)r * k + i];
            int at = cnt[e]++;
            src[at] = r;
            dst[at] = i * n + r;
        }
    for (int e = ne; e > 0; e--) /* back to starts */
        cnt[e] = cnt[e - 1];
    cnt[0] = 0;
    if ((rc = be->upload(ctx, d_src, src, sizeof(int32_t) * nk)) ||
        (rc = be->upload(ctx, d_dst, dst, sizeof(int32_t) * nk)) ||
        (rc = be->upload(ctx, d_wt, wt, sizeof(float) * nk)))
        goto out;
    for (int e = 0; e < ne; e++) {
        int c = cnt[e + 1] - cnt[e];
        if (c == 0)
            continue;
        if ((rc = be->gather_rows(ctx, w->xn, d_src + cnt[e], d_xg, c, E)) ||
            (rc = kvfs_linear(m, L->exp_gate[e], L->exp_gate_b ? L->exp_gate_b + (size_t)e * F : NULL,
                              L->act_q_moe[1], d_xg, w->aq, d_g, c, E)) ||
            (rc = kvfs_linear(m, L->exp_up[e], L->exp_up_b ? L->exp_up_b + (size_t)e * F : NULL, L->act_q_moe[2],
                              d_xg, w->aq, d_u, c, E)) ||
            (rc = hp->moe_oai ? be->swiglu_oai(ctx, d_g, d_u, d_g, (size_t)c * F, 1.702f, 7.0f) /* llama.cpp's */
                              : be->swiglu(ctx, d_g, d_u, d_g, (size_t)c * F)) ||
            /* d_u is spent: the scratch of the down product's quantized input */
            (rc = kvfs_linear(m, L->exp_down[e], L->exp_down_b ? L->exp_down_b + (size_t)e * E : NULL,
                              L->act_q_moe[3], d_g, d_u, d_y, c, F)) ||
            (rc = be->scatter_rows(ctx, d_y, d_dst + cnt[e], d_slots, c, E)))
            goto out;
    }
    /* llama.cpp: experts times their weights, then slot 0 + slot 1 + ... */
    if ((rc = be->mul_rows(ctx, d_slots, d_wt, d_slots, (int)nk, E)) ||
        (rc = be->copy(ctx, w->o, d_slots, sizeof(float) * (size_t)n * E)))
        goto out;
    for (int i = 1; i < k && !rc; i++)
        rc = be->add(ctx, w->o, d_slots + (size_t)i * n * E, w->o, (size_t)n * E);
    /* the buffers below are freed at once: their ops must be done */
    if (!rc)
        rc = be->synchronize(ctx);
out:
    {
        void *bufs[] = {d_logit, d_xg, d_g, d_u, d_y, d_slots, d_wt, d_src, d_dst};
        for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
            if (bufs[i])
                be->free(ctx, bufs[i]);
    }
    free(logit);
    free(wt);
    free(score);
    free(sel);
    free(src);
    free(dst);
    free(cnt);
    return rc;
}

/* gemma4's per-layer inputs, llama.cpp's build_inp_per_layer and
 * project_per_layer_inputs: the rows' entries of the per-layer table times
 * sqrt(n_ple), plus the scaled embeddings projected (times 1/sqrt(n_embd),
 * RMS-normed in pieces of n_ple), times 1/sqrt(2); laid out a layer at a
 * time ([n_layer][n][n_ple], llama.cpp's permute) */
int kvfs_ple_inputs(const struct kvfs_model *m, struct kvfs_work *w, int n)
{
    const struct kvfs_hparams *hp = &m->hp;
    const struct kvfs_backend_iface *be = BE(m);
    void *ctx = CTX(m);
    int P = hp->n_ple, W = hp->n_layer * P, rc;
    if (!P)
        return 0;
    if (!w->ple)
        return -EINVAL;
    float *tok = NULL, *proj = NULL;
    size_t all = (size_t)n * W;
    if ((rc = be->alloc(ctx, sizeof(float) * all, (void **)&tok)) ||
        (rc = be->alloc(ctx, sizeof(float) * all, (void **)&proj)))
        goto out;
    if ((rc = m->ple_tok_w ? be->weight_rows(ctx, m->ple_tok_w, w->ids, tok, n)
                           : be->get_rows(ctx, m->ple_tok, w->ids, tok, n, W)) ||
        (rc = be->scale(ctx, tok, sqrtf((float)P), tok, all)) ||
        (rc = kvfs_linear(m, m->ple_model_proj, NULL, m->ple_proj_act_q, w->x, w->aq, proj, n, hp->n_embd)) ||
        (rc = be->scale(ctx, proj, 1.0f / sqrtf((float)hp->n_embd), proj, all)) ||
        (rc = be->rmsnorm(ctx, proj, m->ple_proj_norm, proj, n * hp->n_layer, P, hp->rms_eps)) ||
        (rc = be->add(ctx, proj, tok, proj, all)) ||
        (rc = be->scale(ctx, proj, 1.0f / sqrtf(2.0f), proj, all)))
        goto out;
    for (int l = 0; l < hp->n_layer && !rc; l++)
        rc = strided_copy(m, w->ple + (size_t)l * n * P, P, proj + (size_t)l * P, W, n, P);
    if (!rc)
        rc = be->synchronize(ctx); /* tok and proj are freed at once */
out:
    if (tok)
        be->free(ctx, tok);
    if (proj)
        be->free(ctx, proj);
    return rc;
}

/* gemma4, after a layer's FFN: x += RMSNorm(ple_proj . (gelu(ple_gate . x)
 * * this layer's per-layer input)) */
static int ple_add(const struct kvfs_model *m, int l, struct kvfs_work *w, int n)
{
    const struct kvfs_hparams *hp = &m->hp;
    const struct kvfs_layer_weights *L = &m->layers[l];
    const struct kvfs_backend_iface *be = BE(m);
    void *ctx = CTX(m);
    int rc, E = hp->n_embd, P = hp->n_ple;
    if (!w->ple) /* only a forward from token ids has them (kvfs_ple_inputs) */
        return -ENOTSUP;
    if ((rc = kvfs_linear(m, L->ple_gate, NULL, L->act_q_ple[0], w->x, w->aq, w->gate, n, E)) ||
        (rc = be->geglu(ctx, w->gate, w->ple + (size_t)l * n * P, w->gate, (size_t)n * P)) ||
        (rc = kvfs_linear(m, L->ple_proj, NULL, L->act_q_ple[1], w->gate, w->aq, w->o, n, P)) ||
        (rc = be->rmsnorm(ctx, w->o, L->ple_post_norm, w->o, n, E, hp->rms_eps)))
        return rc;
    return be->add(ctx, w->x, w->o, w->x, (size_t)n * E);
}

int kvfs_layer_finish(const struct kvfs_model *m, int l, struct kvfs_work *w, int n, const struct kvfs_kv_cache *c,
                      int n_ctx)
{
    const struct kvfs_hparams *hp = &m->hp;
    const struct kvfs_layer_weights *L = &m->layers[l];
    const struct kvfs_backend_iface *be = BE(m);
    void *ctx = CTX(m);
    int rc, E = hp->n_embd;
    size_t e = (size_t)n * E;
    float scale = hp->scale_q ? 1.0f : hp->attn_scale;
    if (hp->mla_rank &&
        ((rc = mla_attn(m, l, w, n, c, n_ctx)) || (rc = be->add(ctx, w->x, w->o, w->x, e)) ||
         (rc = be->rmsnorm(ctx, w->x, L->ffn_norm, w->xn, n, E, hp->rms_eps))))
        return rc;
    if (hp->mla_rank)
        goto ffn;
    int kl = L->kv_layer, D = L->head_dim; /* gemma4: a shared-KV layer attends over its source's cache */
    if ((rc = L->attn_sinks ? be->attention_sinks(ctx, w->q, w->pos, n, c->k[kl], c->v[kl], c->pos, n_ctx,
                                                  hp->n_head, L->n_kv_head, D, scale, L->window, hp->attn_softcap,
                                                  L->attn_sinks, w->att)
                            : be->attention(ctx, w->q, w->pos, n, c->k[kl], c->v[kl], c->pos, n_ctx, hp->n_head,
                                            L->n_kv_head, D, scale, L->window, hp->attn_softcap, w->att)))
        return rc;
    const float *att = w->att;
    int att_w = hp->n_head * D;
    float *av = NULL;
    if (hp->mla_mha_rank) { /* deepseek2's unabsorbed form: each head's value, not the zeros before it */
        att_w = hp->n_head * hp->mla_v;
        if ((rc = be->alloc(ctx, sizeof(float) * (size_t)n * att_w, (void **)&av)))
            return rc;
        if ((rc = strided_copy(m, av, hp->mla_v, w->att + L->rope_dim, D, n * hp->n_head, hp->mla_v))) {
            be->free(ctx, av);
            return rc;
        }
        att = av;
    }
    rc = kvfs_linear(m, L->wo, L->bo, L->act_q[3], att, w->aq, w->o, n, att_w);
    if (av) {
        int rs = be->synchronize(ctx);
        be->free(ctx, av);
        rc = rc ? rc : rs;
    }
    if (rc ||
        (L->attn_post_norm && (rc = be->rmsnorm(ctx, w->o, L->attn_post_norm, w->o, n, E, hp->rms_eps))) ||
        (hp->residual_scale != 0.0f && (rc = be->scale(ctx, w->o, hp->residual_scale, w->o, e))) ||
        (rc = be->add(ctx, w->x, w->o, w->x, e)) ||
        (rc = L->ffn_norm ? be->rmsnorm(ctx, w->x, L->ffn_norm, w->xn, n, E, hp->rms_eps)
                          : be->copy(ctx, w->xn, w->x, sizeof(float) * e)))
        return rc;
ffn:
    if (L->ffn_gate_inp && L->sh_gate) { /* deepseek2: the experts' sum plus the shared experts' FFN */
        float *sh = NULL;
        if ((rc = moe_ffn(m, L, w, n)) || (rc = be->alloc(ctx, sizeof(float) * e, (void **)&sh)))
            return rc;
        if (!(rc = kvfs_linear(m, L->sh_gate, NULL, L->act_q_sh[0], w->xn, w->aq, w->gate, n, E)) &&
            !(rc = kvfs_linear(m, L->sh_up, NULL, L->act_q_sh[1], w->xn, w->aq, w->up, n, E)) &&
            !(rc = be->swiglu(ctx, w->gate, w->up, w->gate, (size_t)n * hp->n_ff_shexp)) &&
            !(m->ggml_compat && L->act_q_sh[2] &&
              (rc = be->act_quant(ctx, w->gate, w->gate, n, hp->n_ff_shexp, L->act_q_sh[2]))) &&
            !(rc = be->matmul(ctx, L->sh_down, NULL, w->gate, sh, n)) && !(rc = be->add(ctx, w->o, sh, w->o, e)) &&
            !(rc = be->add(ctx, w->x, w->o, w->x, e)))
            rc = be->synchronize(ctx);
        be->free(ctx, sh);
        return rc;
    }
    if (L->ffn_gate_inp) /* qwen3moe, gpt-oss: no post norm, no residual scale */
        return (rc = moe_ffn(m, L, w, n)) ? rc : be->add(ctx, w->x, w->o, w->x, e);
    if ((rc = kvfs_linear(m, L->w_gate, L->ffn_gate_b, L->act_q[4], w->xn, w->aq, w->gate, n, E)) ||
        (rc = kvfs_linear(m, L->w_up, L->ffn_up_b, L->act_q[5], w->xn, w->aq, w->up, n, E)) ||
        (rc = (hp->ffn_geglu ? be->geglu : be->swiglu)(ctx, w->gate, w->up, w->gate, (size_t)n * L->n_ff)))
        return rc;
    /* down projection: its input is n_ff wide; quantize in place (gate is dead after) */
    if (m->ggml_compat && L->act_q[6] && (rc = be->act_quant(ctx, w->gate, w->gate, n, L->n_ff, L->act_q[6])))
        return rc;
    if ((rc = be->matmul(ctx, L->w_down, L->ffn_down_b, w->gate, w->o, n)) ||
        (L->ffn_post_norm && (rc = be->rmsnorm(ctx, w->o, L->ffn_post_norm, w->o, n, E, hp->rms_eps))) ||
        (hp->residual_scale != 0.0f && (rc = be->scale(ctx, w->o, hp->residual_scale, w->o, e))) ||
        (rc = be->add(ctx, w->x, w->o, w->x, e)))
        return rc;
    if (L->ple_gate && (rc = ple_add(m, l, w, n)))
        return rc;
    if (L->out_scale != 0.0f && (rc = be->scale(ctx, w->x, L->out_scale, w->x, e)))
        return rc;
    return 0;
}

/* One layer for n rows at w->pos; their K/V are appended at cache row `at`. */
static int layer_forward(const struct kvfs_model *m, int l, struct kvfs_work *w, int n, struct kvfs_kv_cache *c, int at)
{
    const struct kvfs_backend_iface *be = BE(m);
    const struct kvfs_layer_weights *L = &m->layers[l];
    /* rows at the layer's own width (gemma4); a shared-KV layer stores none */
    int kv_dim = m->hp.mla_rank ? c->kv_dim : L->n_kv_head * L->head_dim, kv = L->kv_layer == l, rc;
    if ((rc = kvfs_layer_qkv(m, l, w, n)) ||
        (kv && (rc = be->copy(CTX(m), c->k[l] + (size_t)at * kv_dim, w->k, sizeof(float) * (size_t)n * kv_dim))) ||
        (kv && (rc = be->copy(CTX(m), c->v[l] + (size_t)at * kv_dim, w->v, sizeof(float) * (size_t)n * kv_dim))))
        return rc;
    return kvfs_layer_finish(m, l, w, n, c, at + n);
}

int kvfs_output_logits(const struct kvfs_model *m, struct kvfs_work *w, int row, float *logits)
{
    const struct kvfs_hparams *hp = &m->hp;
    const struct kvfs_backend_iface *be = BE(m);
    float *dl;
    int rc = be->rmsnorm(CTX(m), w->x + (size_t)row * hp->n_embd, m->output_norm, w->xn, 1, hp->n_embd, hp->rms_eps);
    if (rc || (rc = be->alloc(CTX(m), sizeof(float) * (size_t)hp->n_vocab, (void **)&dl)))
        return rc;
    rc = kvfs_linear(m, m->output, NULL, m->output_act_q, w->xn, w->o, dl, 1, hp->n_embd);
    if (!rc)
        rc = be->download(CTX(m), logits, dl, sizeof(float) * (size_t)hp->n_vocab);
    be->free(CTX(m), dl);
    if (!rc && hp->logit_scale != 0.0f) { /* granite: as ggml_scale(cur, 1 / logit_scale) */
        float s = 1.0f / hp->logit_scale;
        for (int i = 0; i < hp->n_vocab; i++)
            logits[i] *= s;
    }
    if (!rc && hp->logit_softcap > 0.0f) /* as ggml: scale, tanh, scale */
        for (int i = 0; i < hp->n_vocab; i++)
            logits[i] = tanhf(logits[i] * (1.0f / hp->logit_softcap)) * hp->logit_softcap;
    return rc;
}

int kvfs_forward(const struct kvfs_model *m, struct kvfs_kv_cache *c, const int32_t *tokens, int n, int pos0,
                 float *logits)
{
    const struct kvfs_hparams *hp = &m->hp;
    if (n <= 0 || c->n + n > c->cap)
        return -ENOSPC;
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= hp->n_vocab)
            return -EINVAL;
    struct kvfs_work w;
    int rc = kvfs_work_alloc(m, n, &w);
    if (rc)
        return rc;
    int at = c->n;
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)n);
    if (!pos) {
        kvfs_work_free(m, &w);
        return -ENOMEM;
    }
    for (int i = 0; i < n; i++)
        pos[i] = pos0 + i;
    memcpy(c->host_pos + at, pos, sizeof(int32_t) * (size_t)n);
    const struct kvfs_backend_iface *be = BE(m);
    if ((rc = be->upload(CTX(m), w.ids, tokens, sizeof(int32_t) * (size_t)n)) ||
        (rc = be->upload(CTX(m), w.pos, pos, sizeof(int32_t) * (size_t)n)) ||
        (rc = be->upload(CTX(m), c->pos + at, pos, sizeof(int32_t) * (size_t)n)) ||
        (rc = kvfs_embed(m, w.ids, w.x, n)) || (rc = kvfs_ple_inputs(m, &w, n)))
        goto out;
    for (int l = 0; l < hp->n_layer; l++)
        if ((rc = layer_forward(m, l, &w, n, c, at)))
            goto out;
    c->n += n;
    if (logits && (rc = kvfs_output_logits(m, &w, n - 1, logits)))
        goto out;
    if (!rc)
        rc = be->synchronize(CTX(m));
out:
    free(pos);
    kvfs_work_free(m, &w);
    return rc;
}

const char *kvfs_model_chunk_refusal(const struct kvfs_model *m)
{
    return kvfs_arch_chunk_refusal(m->hp.arch);
}

int kvfs_model_shaped(const struct kvfs_model *m)
{
    for (int l = 0; l < m->hp.n_layer; l++)
        if (m->layers[l].head_dim != m->hp.head_dim || m->layers[l].n_kv_head != m->hp.n_kv_head ||
            m->layers[l].rope_dim != m->hp.rope_dim || m->layers[l].kv_layer != l)
            return 1;
    return 0;
}

void kvfs_model_layer_shapes(const struct kvfs_model *m, struct kvfs_layer_shape *out)
{
    for (int l = 0; l < m->hp.n_layer; l++) {
        const struct kvfs_layer_weights *L = &m->layers[l], *S = &m->layers[L->kv_layer];
        out[l] = (struct kvfs_layer_shape){(uint32_t)S->n_kv_head, (uint32_t)S->head_dim, (uint32_t)S->rope_dim,
                                           (uint32_t)L->kv_layer};
    }
}

uint32_t kvfs_model_chunk_flags(const struct kvfs_model *m)
{
    return KVFS_FLAG_KEYS_ROPED | (m->hp.mla_rank > 0 ? KVFS_FLAG_V_FROM_K : 0) |
           (m->hp.mla_mha_rank > 0 ? KVFS_FLAG_V_NARROW : 0) |
           (kvfs_model_shaped(m) ? KVFS_FLAG_LAYER_SHAPES : 0);
}

const char *kvfs_model_dtype_refusal(const struct kvfs_model *m, uint32_t dtype)
{
    /* blocks run along each layer's own K/V row (kvfs(5), Layer shapes),
     * as along the one row width of other models' chunks */
    for (int l = 0; kvfs_dtype_quantized(dtype) && kvfs_model_shaped(m) && l < m->hp.n_layer; l++)
        if (m->layers[l].kv_layer == l && (m->layers[l].n_kv_head * m->layers[l].head_dim) % 64)
            return "q8, q4 and q4s need every layer's K/V rows (KV heads x head width) a multiple of 64 values; "
                   "a layer of this model's is not (kvfs(5), Layer shapes): f32, f16 or bf16";
    return NULL;
}

/* the width of layer l's cache rows (gemma4: its own; MLA: the cached row) */
static size_t cache_kv_dim(const struct kvfs_model *m, const struct kvfs_kv_cache *c, int l)
{
    const struct kvfs_layer_weights *L = &m->layers[m->layers[l].kv_layer];
    return m->hp.mla_rank ? (size_t)c->kv_dim : (size_t)L->n_kv_head * L->head_dim;
}

/* a chunk's layer shapes are the model's (a fingerprint names the weights,
 * but a file of another writer could still disagree) */
static int shapes_match(const struct kvfs_model *m, const struct kvfs_header *h)
{
    if (!(h->flags & KVFS_FLAG_LAYER_SHAPES) != !kvfs_model_shaped(m))
        return 0;
    if (!(h->flags & KVFS_FLAG_LAYER_SHAPES))
        return 1; /* the fingerprint's shape in every layer */
    struct kvfs_layer_shape *want = malloc(sizeof(*want) * (size_t)m->hp.n_layer);
    int ok = want != NULL;
    if (ok)
        kvfs_model_layer_shapes(m, want);
    for (int l = 0; ok && l < m->hp.n_layer; l++) {
        struct kvfs_layer_shape got;
        kvfs_layer_shape_get(h, (uint32_t)l, &got);
        ok = !memcmp(&got, &want[l], sizeof(got));
    }
    free(want);
    return ok;
}

int kvfs_kv_cache_load_chunk(const struct kvfs_model *m, struct kvfs_kv_cache *c, const void *image, size_t len,
                             char *err, size_t errlen)
{
    struct kvfs_header h;
    const char *why = kvfs_model_chunk_refusal(m);
    if (why)
        return kvfs_errf(err, errlen, -ENOTSUP, "%s", why);
    int rc = kvfs_file_verify(image, len, &h, err, errlen);
    if (rc)
        return rc;
    uint8_t a[80], b[80]; /* compare the canonical encodings, not structs */
    kvfs_fingerprint_encode(&h.fp, a);
    kvfs_fingerprint_encode(&m->fp, b);
    if (memcmp(a, b, 80)) {
        snprintf(err, errlen, "chunk was computed by another model (fingerprint differs)");
        return -EINVAL;
    }
    if (!shapes_match(m, &h)) {
        snprintf(err, errlen, "chunk's layer shapes are not the model's");
        return -EINVAL;
    }
    uint32_t v_form = KVFS_FLAG_V_FROM_K | KVFS_FLAG_V_NARROW; /* how V is held: the model's own way */
    if ((h.flags & v_form) != (kvfs_model_chunk_flags(m) & v_form)) {
        snprintf(err, errlen, "chunk holds V %s, the model's chunks %s (kvfs(5))",
                 h.flags & KVFS_FLAG_V_FROM_K ? "as K's rows (V_FROM_K)" : h.flags & KVFS_FLAG_V_NARROW ?
                 "narrower than K (V_NARROW)" : "as rows of their own", kvfs_model_chunk_flags(m) & KVFS_FLAG_V_FROM_K ?
                 "as K's rows (V_FROM_K)" : kvfs_model_chunk_flags(m) & KVFS_FLAG_V_NARROW ? "narrower (V_NARROW)" :
                 "as rows of their own");
        return -EINVAL;
    }
    if (!(h.flags & KVFS_FLAG_KEYS_ROPED)) {
        snprintf(err, errlen, "chunk stores keys before RoPE; only post-RoPE keys are supported");
        return -ENOTSUP;
    }
    if (c->n + (int)h.n_tokens > c->cap) {
        snprintf(err, errlen, "chunk of %u tokens does not fit the cache", h.n_tokens);
        return -ENOSPC;
    }
    size_t rows = h.n_tokens;
    for (int l = 0; l < c->n_layer && !rc; l++)
        rc = kvfs_kv_cache_load_layer(m, c, c->n, &h, l, (const uint8_t *)image + kvfs_layer_offset(&h, (uint32_t)l));
    if (rc)
        return rc;
    for (size_t i = 0; i < rows; i++)
        c->host_pos[c->n + i] = (int32_t)(h.pos0 + i);
    rc = BE(m)->upload(CTX(m), c->pos + c->n, c->host_pos + c->n, sizeof(int32_t) * rows);
    if (!rc)
        c->n += (int)rows;
    return rc;
}

/* A block-quantized layer: on the backend's threads (or device) where it
 * decodes them, else here and uploaded as f32. */
static int load_quantized_layer(const struct kvfs_model *m, float *k, float *v, const void *data, uint32_t rows,
                                uint32_t kv_dim, int codec)
{
    const struct kvfs_backend_iface *be = BE(m);
    if (be->upload_kvq)
        return be->upload_kvq(CTX(m), k, v, data, rows, kv_dim, codec);
    size_t n = (size_t)rows * kv_dim;
    float *tmp = malloc(sizeof(float) * 2 * n);
    if (!tmp)
        return -ENOMEM;
    int rc = kvfs_kvq_decode(codec, data, rows, kv_dim, tmp, tmp + n);
    if (!rc)
        rc = be->upload_kv(CTX(m), k, tmp, n, KVFS_HOST_F32);
    if (!rc)
        rc = be->upload_kv(CTX(m), v, tmp + n, n, KVFS_HOST_F32);
    free(tmp);
    return rc;
}

static int load_v_from_k(const struct kvfs_model *m, struct kvfs_kv_cache *c, int row0, const struct kvfs_header *h,
                         int layer, const void *data)
{
    const struct kvfs_backend_iface *be = BE(m);
    size_t rows = h->n_tokens, kvd = (size_t)c->kv_dim;
    int d = (int)h->fp.head_dim, r = (int)h->fp.rope_dim, heads = (int)(rows * h->fp.n_kv_head), rc;
    float *k = c->k[layer] + (size_t)row0 * kvd, *v = c->v[layer] + (size_t)row0 * kvd;
    int codec = kvfs_dtype_quantized(h->dtype);
    /* a quantized one's key blocks decoded here: V follows the decoded K, as every reader derives it */
    float *zero = calloc(rows * kvd * (codec ? 2 : 1), sizeof(float)), *kf = zero + rows * kvd;
    if (!zero)
        return -ENOMEM;
    if (codec && (rc = kvfs_kvq_decode_k(codec, data, (uint32_t)rows, (uint32_t)kvd, kf)))
        goto out;
    if (!(rc = be->upload_kv(CTX(m), k, codec ? (const void *)kf : data, rows * kvd,
                             codec ? KVFS_HOST_F32 : (int)h->dtype)) &&
        !(rc = be->upload(CTX(m), v, zero, sizeof(float) * rows * kvd)))
        rc = be->synchronize(CTX(m)); /* zero and kf are freed below */
out:
    free(zero);
    return rc ? rc : r >= d ? 0 : strided_copy(m, v + r, d, k + r, d, heads, d - r);
}

int kvfs_kv_cache_load_layer(const struct kvfs_model *m, struct kvfs_kv_cache *c, int row0, const struct kvfs_header *h,
                             int layer, const void *data)
{
    size_t rows = h->n_tokens, esz = kvfs_dtype_size(h->dtype);
    if (kvfs_model_chunk_refusal(m))
        return -ENOTSUP;
    if (row0 < 0 || row0 + (int)rows > c->cap || layer < 0 || layer >= c->n_layer ||
        (uint32_t)c->n_layer != h->fp.n_layer)
        return -ERANGE;
    if (m->layers[layer].kv_layer != layer) /* reads an earlier layer's cache, loaded there; the chunk has none */
        return 0;
    size_t kvd = cache_kv_dim(m, c, layer);
    if (kvfs_layer_kv_dim(h, (uint32_t)layer) != kvd && !(h->flags & KVFS_FLAG_V_FROM_K))
        return -EINVAL;
    int codec = kvfs_dtype_quantized(h->dtype);
    if (h->flags & KVFS_FLAG_V_FROM_K) /* K alone: V is K with each head's rotated part zero (kvfs(5)) */
        return load_v_from_k(m, c, row0, h, layer, data);
    if (codec)
        return load_quantized_layer(m, c->k[layer] + (size_t)row0 * kvd, c->v[layer] + (size_t)row0 * kvd, data,
                                    (uint32_t)rows, (uint32_t)kvd, codec);
    int rc = 0;
    for (int half = 0; half < 2 && !rc; half++) {
        float *dst = (half ? c->v[layer] : c->k[layer]) + (size_t)row0 * kvd;
        rc = BE(m)->upload_kv(CTX(m), dst, (const uint8_t *)data + (size_t)half * rows * kvd * esz, rows * kvd,
                              (int)h->dtype);
    }
    return rc;
}

int kvfs_kv_cache_to_chunk(const struct kvfs_model *m, const struct kvfs_kv_cache *c, int first, int count,
                           const int32_t *tokens, uint32_t dtype, struct kvfs_writer *w)
{
    return kvfs_kv_cache_to_chunk_flags(m, c, first, count, tokens, dtype, 0, w);
}

int kvfs_kv_cache_to_chunk_flags(const struct kvfs_model *m, const struct kvfs_kv_cache *c, int first, int count,
                                 const int32_t *tokens, uint32_t dtype, uint32_t flags, struct kvfs_writer *w)
{
    return kvfs_kv_cache_to_chunk_salted(m, c, first, count, tokens, dtype, flags, NULL, w);
}

int kvfs_kv_cache_to_chunk_salted(const struct kvfs_model *m, const struct kvfs_kv_cache *c, int first, int count,
                                  const int32_t *tokens, uint32_t dtype, uint32_t flags, const uint8_t salt[32],
                                  struct kvfs_writer *w)
{
    if (first < 0 || count <= 0 || first + count > c->n)
        return -EINVAL;
    const char *why = kvfs_model_chunk_refusal(m);
    if (why) {
        kvfs_log(KVFS_LOG_ERR, "%s", why);
        return -ENOTSUP;
    }
    if ((why = kvfs_model_dtype_refusal(m, dtype))) {
        kvfs_log(KVFS_LOG_ERR, "%s", why);
        return -ENOTSUP;
    }
    /* deepseek2: the cached row alone, V derived from it (kvfs(5), MLA
     * chunks); gemma4: each layer at its own width, shared-KV layers none */
    int k_only = m->hp.mla_rank > 0, shaped = kvfs_model_shaped(m);
    struct kvfs_layer_shape *shapes = shaped ? malloc(sizeof(*shapes) * (size_t)m->hp.n_layer) : NULL;
    if (shaped && !shapes)
        return -ENOMEM;
    if (shaped)
        kvfs_model_layer_shapes(m, shapes);
    int rc = kvfs_writer_init_shaped(w, &m->fp, dtype, kvfs_model_chunk_flags(m) | flags,
                                     (uint32_t)c->host_pos[first], (uint32_t)count, (const uint32_t *)tokens, salt,
                                     shapes);
    free(shapes);
    if (rc)
        return rc;
    size_t kvd = (size_t)c->kv_dim, n = (size_t)count * kvd;
    int codec = kvfs_dtype_quantized(dtype);
    float *tmp = malloc(sizeof(float) * 2 * n); /* a layer's K then V, as the chunk holds them */
    if (!tmp) {
        kvfs_writer_free(w);
        return -ENOMEM;
    }
    for (int l = 0; l < c->n_layer && !rc; l++) {
        uint8_t *dst = kvfs_writer_layer(w, (uint32_t)l);
        if (m->layers[l].kv_layer != l) /* reads an earlier layer's cache: stores none */
            continue;
        kvd = cache_kv_dim(m, c, l);
        n = (size_t)count * kvd;
        if ((rc = BE(m)->download(CTX(m), tmp, c->k[l] + (size_t)first * kvd, sizeof(float) * n)) ||
            (!k_only && (rc = BE(m)->download(CTX(m), tmp + n, c->v[l] + (size_t)first * kvd, sizeof(float) * n))))
            break;
        if (codec && k_only)
            rc = kvfs_kvq_encode_k(codec, tmp, (uint32_t)count, (uint32_t)kvd, dst);
        else if (codec)
            rc = kvfs_kvq_encode(codec, tmp, tmp + n, (uint32_t)count, (uint32_t)kvd, dst);
        else
            kvfs_f32_encode(dtype, tmp, k_only ? n : 2 * n, dst);
    }
    free(tmp);
    if (!rc)
        rc = kvfs_writer_finish(w);
    if (rc)
        kvfs_writer_free(w);
    return rc;
}
