/* blend.c - CacheBlend-style composition of chunk KV caches (see blend.h). */
#include "blend.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BE(m) ((m)->be.iface)
#define CTX(m) ((m)->be.ctx)
#define CHECK_LAYER 1

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int kvfs_blend_selftest(const struct kvfs_model *m)
{
    const struct kvfs_hparams *hp = &m->hp;
    const struct kvfs_backend_iface *be = BE(m);
    int d = hp->head_dim, rc;
    float host[3][512], *dev[3] = {NULL, NULL, NULL};
    int32_t pos[4] = {37, 1000, 1037, -1037}, *dpos = NULL;
    if (d > 512)
        return -EINVAL;
    for (int i = 0; i < d; i++)
        host[0][i] = sinf(0.37f * (float)i) + 0.1f;
    rc = be->alloc(CTX(m), sizeof(int32_t) * 4, (void **)&dpos);
    for (int k = 0; k < 3 && !rc; k++)
        rc = be->alloc(CTX(m), sizeof(float) * (size_t)d, (void **)&dev[k]);
    if (rc)
        goto out;
    if ((rc = be->upload(CTX(m), dpos, pos, sizeof(pos))))
        goto out;
    for (int k = 0; k < 3 && !rc; k++)
        rc = be->upload(CTX(m), dev[k], host[0], sizeof(float) * (size_t)d);
    /* dev0: rotate by 37 then 1000; dev1: by 1037; dev2: by 1037 then -1037 */
    if (!rc) rc = be->rope(CTX(m), dev[0], &dpos[0], 1, 1, d, hp->rope_dim, hp->rope_theta, hp->rope_style);
    if (!rc) rc = be->rope(CTX(m), dev[0], &dpos[1], 1, 1, d, hp->rope_dim, hp->rope_theta, hp->rope_style);
    if (!rc) rc = be->rope(CTX(m), dev[1], &dpos[2], 1, 1, d, hp->rope_dim, hp->rope_theta, hp->rope_style);
    if (!rc) rc = be->rope(CTX(m), dev[2], &dpos[2], 1, 1, d, hp->rope_dim, hp->rope_theta, hp->rope_style);
    if (!rc) rc = be->rope(CTX(m), dev[2], &dpos[3], 1, 1, d, hp->rope_dim, hp->rope_theta, hp->rope_style);
    for (int k = 0; k < 3 && !rc; k++)
        rc = be->download(CTX(m), host[k], dev[k], sizeof(float) * (size_t)d);
    if (rc)
        goto out;
    for (int i = 0; i < d; i++) {
        if (fabsf(host[0][i] - host[1][i]) > 1e-3f || fabsf(host[2][i] - (sinf(0.37f * (float)i) + 0.1f)) > 1e-3f) {
            rc = -EPROTO;
            break;
        }
    }
out:
    for (int k = 0; k < 3; k++)
        if (dev[k])
            be->free(CTX(m), dev[k]);
    if (dpos)
        be->free(CTX(m), dpos);
    return rc;
}

struct scored {
    float dev;
    int32_t row;
};

static int by_dev_desc(const void *a, const void *b)
{
    const struct scored *x = a, *y = b;
    return x->dev < y->dev ? 1 : x->dev > y->dev ? -1 : x->row - y->row;
}

static int by_int(const void *a, const void *b)
{
    return *(const int32_t *)a - *(const int32_t *)b;
}

int kvfs_blend(const struct kvfs_model *m, const struct kvfs_blend_chunk *chunks, int n_chunks,
               const int32_t *suffix, int n_suffix, float ratio, struct kvfs_kv_cache *c, int32_t **tokens_out,
               float *logits, struct kvfs_blend_stats *st, char *err, size_t errlen)
{
    const struct kvfs_hparams *hp = &m->hp;
    const struct kvfs_backend_iface *be = BE(m);
    void *ctx = CTX(m);
    double t0 = now_s();
    int rc, n_rows = 0;
    if (!(ratio >= 0.0f && ratio <= 1.0f)) {
        snprintf(err, errlen, "ratio %g is outside [0, 1]", (double)ratio);
        return -EINVAL;
    }
    if (n_chunks < 1 || n_suffix < 1) {
        snprintf(err, errlen, "a blend needs at least one chunk and one suffix token");
        return -EINVAL;
    }
    for (int i = 0; i < n_chunks; i++) {
        struct kvfs_header h;
        char why[256];
        if ((rc = kvfs_header_parse(chunks[i].image, chunks[i].len, &h, why, sizeof(why)))) {
            snprintf(err, errlen, "chunk %d: %s", i + 1, why);
            return rc;
        }
        n_rows += (int)h.n_tokens;
    }
    int n_ctx = n_rows + n_suffix;
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)n_ctx), *idx = NULL, *sel_pos = NULL;
    int32_t *delta = malloc(sizeof(int32_t) * (size_t)n_ctx), *d_delta = NULL, *d_idx = NULL;
    struct scored *sc = NULL;
    float *d_dev = NULL, *h_dev = NULL;
    struct kvfs_work w = {0}, ws = {0};
    memset(c, 0, sizeof(*c));
    if (!tokens || !delta) {
        rc = -ENOMEM;
        goto fail;
    }
    if ((rc = kvfs_kv_cache_init(m, n_ctx, c)))
        goto fail;
    /* 1. concatenate cached K/V; re-position keys by their position delta */
    for (int i = 0; i < n_chunks; i++) {
        int start = c->n;
        if ((rc = kvfs_kv_cache_load_chunk(m, c, chunks[i].image, chunks[i].len, err, errlen))) {
            char tmp[256];
            snprintf(tmp, sizeof(tmp), "chunk %d: %s", i + 1, err);
            snprintf(err, errlen, "%s", tmp);
            goto fail;
        }
        struct kvfs_header h;
        kvfs_header_parse(chunks[i].image, chunks[i].len, &h, NULL, 0);
        for (int r = start; r < c->n; r++) {
            tokens[r] = (int32_t)kvfs_header_token(&h, (uint32_t)(r - start));
            delta[r] = r - c->host_pos[r];
            c->host_pos[r] = r;
        }
    }
    for (int r = n_rows; r < n_ctx; r++) {
        tokens[r] = suffix[r - n_rows];
        delta[r] = 0;
        c->host_pos[r] = r;
        if (tokens[r] < 0 || tokens[r] >= hp->n_vocab) {
            snprintf(err, errlen, "suffix token %d out of range", tokens[r]);
            rc = -EINVAL;
            goto fail;
        }
    }
    c->n = n_ctx;
    if ((rc = be->alloc(ctx, sizeof(int32_t) * (size_t)n_ctx, (void **)&d_delta)) ||
        (rc = be->upload(ctx, d_delta, delta, sizeof(int32_t) * (size_t)n_ctx)) ||
        (rc = be->upload(ctx, c->pos, c->host_pos, sizeof(int32_t) * (size_t)n_ctx)))
        goto fail;
    for (int l = 0; l < hp->n_layer; l++)
        if ((rc = be->rope(ctx, c->k[l], d_delta, n_rows, hp->n_kv_head, hp->head_dim, hp->rope_dim, hp->rope_theta,
                           hp->rope_style)))
            goto fail;

    /* embeddings of the whole prompt */
    if ((rc = kvfs_work_alloc(m, n_ctx, &w)) ||
        (rc = be->upload(ctx, w.ids, tokens, sizeof(int32_t) * (size_t)n_ctx)) ||
        (rc = be->upload(ctx, w.pos, c->host_pos, sizeof(int32_t) * (size_t)n_ctx)) ||
        (rc = be->get_rows(ctx, m->tok_embd, w.ids, w.x, n_ctx, hp->n_embd)))
        goto fail;

    /* 2. selection */
    int n_sel, first_layer;
    idx = malloc(sizeof(int32_t) * (size_t)n_ctx);
    sel_pos = malloc(sizeof(int32_t) * (size_t)n_ctx);
    if (!idx || !sel_pos) {
        rc = -ENOMEM;
        goto fail;
    }
    int kv_dim = c->kv_dim;
    if (ratio <= 0.0f || hp->n_layer < 2) {
        /* plain reuse: only the suffix is computed, from layer 0 */
        n_sel = 0;
        first_layer = 0;
    } else {
        /* layer 0 in full: every row's K/V is fresh */
        if ((rc = kvfs_layer_qkv(m, 0, &w, n_ctx)) ||
            (rc = be->copy(ctx, c->k[0], w.k, sizeof(float) * (size_t)n_ctx * kv_dim)) ||
            (rc = be->copy(ctx, c->v[0], w.v, sizeof(float) * (size_t)n_ctx * kv_dim)) ||
            (rc = kvfs_layer_finish(m, 0, &w, n_ctx, c, n_ctx)))
            goto fail;
        /* check layer: every row's fresh K/V; deviation of V from the cache */
        if ((rc = kvfs_layer_qkv(m, CHECK_LAYER, &w, n_ctx)) ||
            (rc = be->alloc(ctx, sizeof(float) * (size_t)n_rows + 4, (void **)&d_dev)))
            goto fail;
        const char *dv = getenv("KVFS_BLEND_DEVIATION"); /* experiments: "k" measures keys instead */
        int on_k = dv && !strcmp(dv, "k");
        if (n_rows && (rc = be->row_sqdiff(ctx, on_k ? w.k : w.v, on_k ? c->k[CHECK_LAYER] : c->v[CHECK_LAYER], d_dev,
                                           n_rows, kv_dim)))
            goto fail;
        h_dev = malloc(sizeof(float) * ((size_t)n_rows + 1));
        sc = malloc(sizeof(*sc) * ((size_t)n_rows + 1));
        if (!h_dev || !sc) {
            rc = -ENOMEM;
            goto fail;
        }
        if (n_rows && (rc = be->download(ctx, h_dev, d_dev, sizeof(float) * (size_t)n_rows)))
            goto fail;
        for (int r = 0; r < n_rows; r++)
            sc[r] = (struct scored){h_dev[r], r};
        qsort(sc, (size_t)n_rows, sizeof(*sc), by_dev_desc);
        n_sel = (int)ceilf(ratio * (float)n_rows);
        if (n_sel > n_rows)
            n_sel = n_rows;
        for (int k = 0; k < n_sel; k++)
            idx[k] = sc[k].row;
        qsort(idx, (size_t)n_sel, sizeof(int32_t), by_int);
        /* the check layer keeps every fresh K/V: they are exact and already paid for */
        if ((rc = be->copy(ctx, c->k[CHECK_LAYER], w.k, sizeof(float) * (size_t)n_ctx * kv_dim)) ||
            (rc = be->copy(ctx, c->v[CHECK_LAYER], w.v, sizeof(float) * (size_t)n_ctx * kv_dim)))
            goto fail;
        first_layer = CHECK_LAYER;
    }
    int n_run = n_sel + n_suffix;
    for (int k = 0; k < n_suffix; k++)
        idx[n_sel + k] = n_rows + k;
    for (int k = 0; k < n_run; k++)
        sel_pos[k] = c->host_pos[idx[k]];
    /* compact work for the selected rows: x (and, at the check layer, q) */
    if ((rc = kvfs_work_alloc(m, n_run, &ws)) ||
        (rc = be->alloc(ctx, sizeof(int32_t) * (size_t)n_run, (void **)&d_idx)) ||
        (rc = be->upload(ctx, d_idx, idx, sizeof(int32_t) * (size_t)n_run)) ||
        (rc = be->upload(ctx, ws.pos, sel_pos, sizeof(int32_t) * (size_t)n_run)) ||
        (rc = be->gather_rows(ctx, w.x, d_idx, ws.x, n_run, hp->n_embd)))
        goto fail;
    if (first_layer == CHECK_LAYER) {
        if ((rc = be->gather_rows(ctx, w.q, d_idx, ws.q, n_run, hp->n_embd)) ||
            (rc = kvfs_layer_finish(m, CHECK_LAYER, &ws, n_run, c, n_ctx)))
            goto fail;
        first_layer = CHECK_LAYER + 1;
    }
    /* 3. the selected rows through the remaining layers */
    for (int l = first_layer; l < hp->n_layer; l++) {
        if ((rc = kvfs_layer_qkv(m, l, &ws, n_run)) ||
            (rc = be->scatter_rows(ctx, ws.k, d_idx, c->k[l], n_run, kv_dim)) ||
            (rc = be->scatter_rows(ctx, ws.v, d_idx, c->v[l], n_run, kv_dim)) ||
            (rc = kvfs_layer_finish(m, l, &ws, n_run, c, n_ctx)))
            goto fail;
    }
    if (logits && (rc = kvfs_output_logits(m, &ws, n_run - 1, logits)))
        goto fail;
    if ((rc = be->synchronize(ctx)))
        goto fail;
    if (st) {
        st->n_ctx = n_ctx;
        st->n_chunk_rows = n_rows;
        st->n_selected = n_sel;
        st->seconds = now_s() - t0;
    }
    *tokens_out = tokens;
    tokens = NULL;
    rc = 0;
    goto out;
fail:
    kvfs_kv_cache_free(m, c);
out:
    kvfs_work_free(m, &w);
    kvfs_work_free(m, &ws);
    if (d_delta) be->free(ctx, d_delta);
    if (d_idx) be->free(ctx, d_idx);
    if (d_dev) be->free(ctx, d_dev);
    free(tokens);
    free(delta);
    free(idx);
    free(sel_pos);
    free(sc);
    free(h_dev);
    return rc;
}
