/* blend.c - CacheBlend-style composition of chunk KV caches (see blend.h). */
#include "blend.h"

#include "blend_internal.h"
#include "controller.h"
#include "loader.h"
#include "parallel.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BE(m) ((m)->be.iface)
#define CTX(m) ((m)->be.ctx)
#define on_k_layer(o) ((o)->deviation_on_k)

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

void kvfs_blend_opts_init(struct kvfs_blend_opts *o, float ratio)
{
    memset(o, 0, sizeof(*o));
    o->ratio = ratio;
    o->select = KVFS_BLEND_SELECT_DEFAULT;
    o->taper = 0.5f;
    o->sink_rows = 1;
    o->check_layer = 1;
    o->min_ratio = KVFS_BLEND_DEFAULT_RATIO;
}

const char *kvfs_blend_select_name(int select)
{
    return select == KVFS_BLEND_SELECT_GRADUAL ? "gradual" : select == KVFS_BLEND_SELECT_QUERY ? "query" : "fixed";
}

int kvfs_blend_select_parse(const char *name)
{
    for (int sel = KVFS_BLEND_SELECT_FIXED; sel <= KVFS_BLEND_SELECT_QUERY; sel++)
        if (!strcmp(name, kvfs_blend_select_name(sel)))
            return sel;
    return -1;
}

/* Chunk rows recomputed at sparse layer j of n_sparse (layers after the
 * check layer).  Fixed: ratio everywhere.  Gradual: a linear taper from
 * ratio*(1+taper) down to ratio*(1-taper), so the mean (the compute budget)
 * is still `ratio`; each layer keeps the most deviating rows of the last. */
int blend_rows_at(const struct kvfs_blend_opts *o, int j, int n_sparse, int n_rows)
{
    float r = o->ratio;
    if (o->select == KVFS_BLEND_SELECT_GRADUAL && n_sparse > 1 && r > 0.0f && r < 1.0f) {
        float t = (float)j / (float)(n_sparse - 1);
        r = o->ratio * (1.0f + o->taper * (1.0f - 2.0f * t));
    }
    if (r > 1.0f)
        r = 1.0f;
    int n = (int)ceilf(r * (float)n_rows - 1e-4f);
    return n < 0 ? 0 : n > n_rows ? n_rows : n;
}

/* Token selection on the backend (a kernel on the GPU): the k rows of the
 * highest deviations d_dev[0..n) (forced rows first), sorted, into host out. */
int blend_device_top(const struct kvfs_model *m, const float *d_dev, const uint8_t *d_forced, int n, int k,
                      int32_t *d_out, int32_t *out)
{
    int rc = BE(m)->topk(CTX(m), d_dev, d_forced, n, k, d_out);
    if (!rc && k > 0)
        rc = BE(m)->download(CTX(m), out, d_out, sizeof(int32_t) * (size_t)k);
    return rc;
}

/* Attention the suffix (query) rows pay to each chunk row at one layer,
 * summed over suffix rows and heads: how much each row can move the answer. */
static int query_attention(const struct kvfs_model *m, const float *d_q_suffix, const float *d_k, int n_rows, int n_ctx,
                           float *att)
{
    const struct kvfs_hparams *hp = &m->hp;
    int n_suffix = n_ctx - n_rows, d = hp->head_dim, kv_dim = hp->n_kv_head * d, group = hp->n_head / hp->n_kv_head;
    size_t qn = (size_t)n_suffix * hp->n_head * d, kn = (size_t)n_ctx * kv_dim;
    float *q = malloc(sizeof(float) * qn), *k = malloc(sizeof(float) * kn), *sc = malloc(sizeof(float) * (size_t)n_ctx);
    int rc = -ENOMEM;
    if (!q || !k || !sc)
        goto out;
    if ((rc = BE(m)->download(CTX(m), q, d_q_suffix, sizeof(float) * qn)) ||
        (rc = BE(m)->download(CTX(m), k, d_k, sizeof(float) * kn)))
        goto out;
    memset(att, 0, sizeof(float) * (size_t)n_rows);
    float scale = 1.0f / sqrtf((float)d);
    for (int s = 0; s < n_suffix; s++) {
        int n_see = n_rows + s + 1;
        for (int h = 0; h < hp->n_head; h++) {
            const float *qh = q + ((size_t)s * hp->n_head + h) * d;
            float mx = -INFINITY;
            double sum = 0;
            for (int r = 0; r < n_see; r++) {
                const float *kr = k + (size_t)r * kv_dim + (size_t)(h / group) * d;
                float dot = 0;
                for (int i = 0; i < d; i++)
                    dot += qh[i] * kr[i];
                sc[r] = dot * scale;
                mx = fmaxf(mx, sc[r]);
            }
            for (int r = 0; r < n_see; r++)
                sum += exp((double)(sc[r] - mx));
            for (int r = 0; r < n_rows; r++)
                att[r] += (float)(exp((double)(sc[r] - mx)) / sum);
        }
    }
    rc = 0;
out:
    free(q);
    free(k);
    free(sc);
    return rc;
}

int kvfs_blend(const struct kvfs_model *m, const struct kvfs_blend_chunk *chunks, int n_chunks,
               const int32_t *suffix, int n_suffix, float ratio, struct kvfs_kv_cache *c, int32_t **tokens_out,
               float *logits, struct kvfs_blend_stats *st, char *err, size_t errlen)
{
    struct kvfs_blend_opts o;
    kvfs_blend_opts_init(&o, ratio);
    return kvfs_blend_ex(m, chunks, n_chunks, suffix, n_suffix, &o, c, tokens_out, logits, st, err, errlen);
}

/* Checksums of every chunk, verified on up to one thread per core: the
 * images may come from anywhere, and XXH3 over hundreds of MB is a visible
 * share of a GPU blend when done on one thread. */
struct verify_job {
    const struct kvfs_blend_chunk *chunks;
    int n, first, step, rc, bad;
    char why[200];
};

static void *verify_chunks(void *arg)
{
    struct verify_job *j = arg;
    for (int i = j->first; i < j->n && !j->rc; i += j->step) {
        struct kvfs_header h;
        j->rc = kvfs_file_verify(j->chunks[i].image, j->chunks[i].len, &h, j->why, sizeof(j->why));
        j->bad = i;
    }
    return NULL;
}

int kvfs_blend_ex(const struct kvfs_model *m, const struct kvfs_blend_chunk *chunks, int n_chunks,
                  const int32_t *suffix, int n_suffix, const struct kvfs_blend_opts *o, struct kvfs_kv_cache *c,
                  int32_t **tokens_out, float *logits, struct kvfs_blend_stats *st, char *err, size_t errlen)
{
    const void *images[KVFS_BLEND_MAX_CHUNKS];
    size_t lens[KVFS_BLEND_MAX_CHUNKS];
    struct kvfs_loader *ld;
    memset(c, 0, sizeof(*c));
    if (n_chunks < 1 || n_chunks > KVFS_BLEND_MAX_CHUNKS)
        return kvfs_errf(err, errlen, -EINVAL, "a blend takes 1 to %d chunks", KVFS_BLEND_MAX_CHUNKS);
    int nt = kvfs_cores(KVFS_PARALLEL_MAX);
    if (nt > n_chunks)
        nt = n_chunks;
    struct verify_job jobs[KVFS_PARALLEL_MAX];
    for (int t = 0; t < nt; t++)
        jobs[t] = (struct verify_job){chunks, n_chunks, t, nt, 0, 0, ""};
    kvfs_parallel_run(verify_chunks, jobs, sizeof(jobs[0]), nt);
    int bad = -1;
    for (int t = 0; t < nt; t++) /* report the first bad chunk in order */
        if (jobs[t].rc && (bad < 0 || jobs[t].bad < jobs[bad].bad))
            bad = t;
    if (bad >= 0)
        return kvfs_errf(err, errlen, jobs[bad].rc, "chunk %d: %s", jobs[bad].bad + 1, jobs[bad].why);
    for (int i = 0; i < n_chunks; i++) {
        images[i] = chunks[i].image;
        lens[i] = chunks[i].len;
    }
    int rc = kvfs_loader_open_images(images, lens, n_chunks, &ld, err, errlen);
    if (rc)
        return rc;
    rc = kvfs_blend_stream(m, ld, suffix, n_suffix, o, c, tokens_out, logits, st, err, errlen);
    kvfs_loader_close(ld);
    return rc;
}

int blend_take_layer(const struct kvfs_model *m, struct kvfs_loader *ld, const int *map, int n_map, int row0,
                     struct kvfs_kv_cache *c, int layer, const int32_t *d_delta, int n_rows, char *err, size_t errlen)
{
    const struct kvfs_hparams *hp = &m->hp;
    const void *data[KVFS_BLEND_MAX_CHUNKS];
    int rc = kvfs_loader_wait(ld, layer, data, err, errlen), row = row0;
    int n = map ? n_map : kvfs_loader_count(ld);
    for (int k = 0; k < n && !rc; k++) {
        int i = map ? map[k] : k;
        const struct kvfs_header *h = kvfs_loader_header(ld, i);
        rc = kvfs_kv_cache_load_layer(m, c, row, h, layer, data[i]);
        row += (int)h->n_tokens;
    }
    if (!rc && n_rows > row0)
        rc = BE(m)->rope(CTX(m), c->k[layer] + (size_t)row0 * c->kv_dim, d_delta + row0, n_rows - row0,
                         hp->n_kv_head, hp->head_dim, hp->rope_dim, hp->rope_theta, hp->rope_style);
    return rc;
}

/* Query selection, first pass: the suffix (query) rows go through every
 * layer over the reused, re-positioned cache, exactly as a plain reuse
 * would; the attention they pay each row, summed over the upper layers,
 * heads and suffix rows, is left in d_mass[0..n_ctx).  Afterwards every layer of the
 * cache holds the chunks' K/V (re-positioned) and the suffix's. */
int blend_query_mass(const struct kvfs_model *m, struct kvfs_loader *ld, const int *map, int n_map, int row0,
                     struct kvfs_kv_cache *c, const struct kvfs_work *w, int n_rows, int n_suffix,
                     const int32_t *d_delta, float *d_mass, char *err, size_t errlen)
{
    const struct kvfs_hparams *hp = &m->hp;
    const struct kvfs_backend_iface *be = BE(m);
    void *ctx = CTX(m);
    int n_ctx = n_rows + n_suffix, kv_dim = c->kv_dim;
    struct kvfs_work wq = {0};
    int32_t *rows = malloc(sizeof(int32_t) * (size_t)n_suffix), *d_rows = NULL;
    float *zero = calloc((size_t)n_ctx, sizeof(float));
    int rc = -ENOMEM;
    if (!rows || !zero)
        goto out;
    for (int k = 0; k < n_suffix; k++)
        rows[k] = n_rows + k;
    if ((rc = kvfs_work_alloc(m, n_suffix, &wq)) ||
        (rc = be->alloc(ctx, sizeof(int32_t) * (size_t)n_suffix, (void **)&d_rows)) ||
        (rc = be->upload(ctx, d_rows, rows, sizeof(int32_t) * (size_t)n_suffix)) ||
        (rc = be->upload(ctx, wq.pos, c->host_pos + n_rows, sizeof(int32_t) * (size_t)n_suffix)) ||
        (rc = be->upload(ctx, d_mass, zero, sizeof(float) * (size_t)n_ctx)) ||
        (rc = be->gather_rows(ctx, w->x, d_rows, wq.x, n_suffix, hp->n_embd)))
        goto out;
    float scale = 1.0f / sqrtf((float)hp->head_dim);
    /* only the upper two thirds of the layers vote: the first third attends
     * mostly by position and locally (on 14 prompts, counting every layer
     * left 12% more KL: BENCHMARKS.md) */
    int from = hp->n_layer / 3;
    for (int l = 0; l < hp->n_layer; l++) {
        if ((rc = blend_take_layer(m, ld, map, n_map, row0, c, l, d_delta, n_rows, err, errlen)) ||
            (rc = kvfs_layer_qkv(m, l, &wq, n_suffix)) ||
            (rc = be->scatter_rows(ctx, wq.k, d_rows, c->k[l], n_suffix, kv_dim)) ||
            (rc = be->scatter_rows(ctx, wq.v, d_rows, c->v[l], n_suffix, kv_dim)) ||
            (l >= from && (rc = be->attn_mass(ctx, wq.q, wq.pos, n_suffix, c->k[l], c->pos, n_ctx, hp->n_head,
                                              hp->n_kv_head, hp->head_dim, scale, d_mass))))
            goto out;
        /* the last layer's output is not needed: only its attention */
        if (l + 1 < hp->n_layer && (rc = kvfs_layer_finish(m, l, &wq, n_suffix, c, n_ctx)))
            goto out;
    }
out:
    kvfs_work_free(m, &wq);
    if (d_rows)
        be->free(ctx, d_rows);
    free(rows);
    free(zero);
    return rc;
}

int blend_check_chunks(const struct kvfs_model *m, struct kvfs_loader *ld, char *err, size_t errlen)
{
    uint8_t fa[80], fb[80]; /* compare the canonical encodings, not structs */
    kvfs_fingerprint_encode(&m->fp, fb);
    for (int i = 0; i < kvfs_loader_count(ld); i++) {
        const struct kvfs_header *h = kvfs_loader_header(ld, i);
        kvfs_fingerprint_encode(&h->fp, fa);
        if (memcmp(fa, fb, 80))
            return kvfs_errf(err, errlen, -EINVAL, "chunk %d was computed by another model (fingerprint differs)", i + 1);
        if (!(h->flags & KVFS_FLAG_KEYS_ROPED))
            return kvfs_errf(err, errlen, -ENOTSUP, "chunk %d stores keys before RoPE; only post-RoPE keys are supported",
                             i + 1);
    }
    return 0;
}

int kvfs_blend_stream(const struct kvfs_model *m, struct kvfs_loader *ld, const int32_t *suffix, int n_suffix,
                      const struct kvfs_blend_opts *o, struct kvfs_kv_cache *c, int32_t **tokens_out, float *logits,
                      struct kvfs_blend_stats *st, char *err, size_t errlen)
{
    const struct kvfs_hparams *hp = &m->hp;
    const struct kvfs_backend_iface *be = BE(m);
    void *ctx = CTX(m);
    double t0 = now_s();
    struct kvfs_blend_opts ob = *o; /* auto: ob.ratio is set at the check layer */
    o = &ob;
    if (ob.auto_ratio) {
        if (!(ob.min_ratio > 0.0f && ob.min_ratio <= 1.0f))
            return kvfs_errf(err, errlen, -EINVAL, "min_ratio %g is outside (0, 1]", (double)ob.min_ratio);
        ob.ratio = ob.min_ratio;
    }
    float ratio = ob.ratio;
    int rc, n_rows = 0, n_chunks = kvfs_loader_count(ld);
    memset(c, 0, sizeof(*c));
    if (!(ratio >= 0.0f && ratio <= 1.0f)) {
        snprintf(err, errlen, "ratio %g is outside [0, 1]", (double)ratio);
        return -EINVAL;
    }
    if (!(o->taper >= 0.0f && o->taper <= 1.0f) || o->sink_rows < 0 || o->check_layer < 1 ||
        (o->select != KVFS_BLEND_SELECT_FIXED && o->select != KVFS_BLEND_SELECT_GRADUAL &&
         o->select != KVFS_BLEND_SELECT_QUERY)) {
        snprintf(err, errlen, "bad blend options (select %d, taper %g, sink_rows %d, check_layer %d)", o->select,
                 (double)o->taper, o->sink_rows, o->check_layer);
        return -EINVAL;
    }
    if (n_chunks < 1 || n_chunks > KVFS_BLEND_MAX_CHUNKS || n_suffix < 1) {
        snprintf(err, errlen, "a blend needs 1 to %d chunks and at least one suffix token", KVFS_BLEND_MAX_CHUNKS);
        return -EINVAL;
    }
    if ((rc = blend_check_chunks(m, ld, err, errlen)))
        return rc;
    for (int i = 0; i < n_chunks; i++)
        n_rows += (int)kvfs_loader_header(ld, i)->n_tokens;
    int n_ctx = n_rows + n_suffix;
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)n_ctx), *idx = NULL, *sel_pos = NULL, *keep = NULL;
    int32_t *delta = malloc(sizeof(int32_t) * (size_t)n_ctx), *d_delta = NULL, *d_idx = NULL, *d_local = NULL;
    uint8_t *forced = calloc((size_t)n_ctx + 1, 1);
    float *d_dev = NULL, *h_dev = NULL, *d_old = NULL;
    uint8_t *d_forced = NULL;
    int32_t *d_top = NULL;
    struct kvfs_work w = {0}, ws = {0};
    if (!tokens || !delta || !forced) {
        rc = -ENOMEM;
        goto fail;
    }
    if ((rc = kvfs_kv_cache_init(m, n_ctx, c)))
        goto fail;
    /* 1. the prompt's tokens and positions; each chunk's rows move from their
     * cached positions to their place in the prompt */
    for (int i = 0, r = 0; i < n_chunks; i++) {
        const struct kvfs_header *h = kvfs_loader_header(ld, i);
        for (uint32_t t = 0; t < h->n_tokens; t++, r++) {
            tokens[r] = (int32_t)kvfs_header_token(h, t);
            delta[r] = r - (int32_t)(h->pos0 + t);
            c->host_pos[r] = r;
            /* a later chunk's first rows were attention sinks when it was
             * prefilled alone: their cached K/V are the most out of place */
            if (i > 0 && (int)t < o->sink_rows)
                forced[r] = 1;
            if (tokens[r] < 0 || tokens[r] >= hp->n_vocab) {
                rc = kvfs_errf(err, errlen, -EINVAL, "chunk %d: token %d out of range", i + 1, tokens[r]);
                goto fail;
            }
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
    const int CHECK_LAYER = hp->n_layer > o->check_layer ? o->check_layer : hp->n_layer - 1;
    int blending = ratio > 0.0f && hp->n_layer >= 2 && CHECK_LAYER >= 1;
    /* ratio=auto hides loading behind recompute, which the query selection
     * cannot (it needs every layer before choosing): auto selects at the
     * check layer instead */
    if (ob.auto_ratio && ob.select == KVFS_BLEND_SELECT_QUERY)
        ob.select = KVFS_BLEND_SELECT_FIXED;
    int by_query = blending && ob.select == KVFS_BLEND_SELECT_QUERY && ratio < 1.0f;
    /* layers before the check layer are recomputed in full: never loaded */
    if ((rc = kvfs_loader_start(ld, blending && !by_query ? CHECK_LAYER : 0)))
        goto fail;
    if ((rc = be->alloc(ctx, sizeof(int32_t) * (size_t)n_ctx, (void **)&d_delta)) ||
        (rc = be->upload(ctx, d_delta, delta, sizeof(int32_t) * (size_t)n_ctx)) ||
        (rc = be->upload(ctx, c->pos, c->host_pos, sizeof(int32_t) * (size_t)n_ctx)))
        goto fail;

    /* embeddings of the whole prompt */
    if ((rc = kvfs_work_alloc(m, n_ctx, &w)) ||
        (rc = be->upload(ctx, w.ids, tokens, sizeof(int32_t) * (size_t)n_ctx)) ||
        (rc = be->upload(ctx, w.pos, c->host_pos, sizeof(int32_t) * (size_t)n_ctx)) ||
        (rc = be->get_rows(ctx, m->tok_embd, w.ids, w.x, n_ctx, hp->n_embd)))
        goto fail;

    /* 2. selection at the check layer */
    int n_sel, first_layer, kv_dim = c->kv_dim, n_sparse = hp->n_layer - 1 - CHECK_LAYER;
    idx = malloc(sizeof(int32_t) * (size_t)n_ctx);
    sel_pos = malloc(sizeof(int32_t) * (size_t)n_ctx);
    keep = malloc(sizeof(int32_t) * (size_t)n_ctx);
    h_dev = malloc(sizeof(float) * ((size_t)n_ctx + 1));
    if (!idx || !sel_pos || !keep || !h_dev) {
        rc = -ENOMEM;
        goto fail;
    }
    if ((rc = be->alloc(ctx, sizeof(float) * (size_t)n_ctx + 4, (void **)&d_dev)) ||
        (rc = be->alloc(ctx, (size_t)n_ctx + 4, (void **)&d_forced)) ||
        (rc = be->alloc(ctx, sizeof(int32_t) * (size_t)n_ctx + 4, (void **)&d_top)) ||
        (n_rows && (rc = be->upload(ctx, d_forced, forced, (size_t)n_rows))))
        goto fail;
    if (!blending) {
        /* plain reuse: only the suffix is computed, from layer 0 */
        n_sel = 0;
        first_layer = 0;
    } else if (by_query) {
        /* the rows the query attends to most, recomputed from layer 0 */
        if ((rc = blend_query_mass(m, ld, NULL, 0, 0, c, &w, n_rows, n_suffix, d_delta, d_dev, err, errlen)))
            goto fail;
        n_sel = blend_rows_at(o, 0, 1, n_rows);
        if ((rc = blend_device_top(m, d_dev, d_forced, n_rows, n_sel, d_top, idx)))
            goto fail;
        first_layer = 0;
        n_sparse = hp->n_layer;
    } else {
        /* the layers before the check layer in full: every row's K/V is fresh */
        double t_full0 = now_s();
        for (int l = 0; l < CHECK_LAYER; l++)
            if ((rc = kvfs_layer_qkv(m, l, &w, n_ctx)) ||
                (rc = be->copy(ctx, c->k[l], w.k, sizeof(float) * (size_t)n_ctx * kv_dim)) ||
                (rc = be->copy(ctx, c->v[l], w.v, sizeof(float) * (size_t)n_ctx * kv_dim)) ||
                (rc = kvfs_layer_finish(m, l, &w, n_ctx, c, n_ctx)))
                goto fail;
        /* check layer: every row's fresh K/V; deviation of V from the cache
         * (V measured better than K: see BENCHMARKS.md) */
        /* the controller needs the real compute time: wait for an
         * asynchronous backend (GPU) to finish the layers just queued */
        if (ob.auto_ratio && (rc = be->synchronize(ctx)))
            goto fail;
        double t_full = now_s() - t_full0;
        if ((rc = blend_take_layer(m, ld, NULL, 0, 0, c, CHECK_LAYER, d_delta, n_rows, err, errlen)))
            goto fail;
        if (ob.auto_ratio) {
            struct kvfs_ratio_inputs ri = {0};
            kvfs_loader_progress(ld, &ri.bytes_done, &ri.bytes_total, &ri.load_elapsed_s);
            ri.sec_per_row_layer = t_full / ((double)CHECK_LAYER * n_ctx);
            ri.n_sparse = n_sparse;
            ri.n_rows = n_rows;
            ri.n_suffix = n_suffix;
            ri.min_ratio = ob.min_ratio;
            ob.ratio = ratio = kvfs_auto_ratio(&ri, NULL);
        }
        if ((rc = kvfs_layer_qkv(m, CHECK_LAYER, &w, n_ctx)))
            goto fail;
        int on_k = o->deviation_on_k;
        if (n_rows && (rc = be->row_sqdiff(ctx, on_k ? w.k : w.v, on_k ? c->k[CHECK_LAYER] : c->v[CHECK_LAYER],
                                           d_dev, n_rows, kv_dim)))
            goto fail;
        if (ob.query_weighted && n_rows) {
            /* weight each row's deviation by the attention the query pays it
             * (on the host: an experiment, not the default) */
            if ((rc = be->download(ctx, h_dev, d_dev, sizeof(float) * (size_t)n_rows)))
                goto fail;
            float *att = malloc(sizeof(float) * (size_t)n_rows);
            if (!att) {
                rc = -ENOMEM;
                goto fail;
            }
            if ((rc = query_attention(m, w.q + (size_t)n_rows * hp->n_embd, w.k, n_rows, n_ctx, att))) {
                free(att);
                goto fail;
            }
            for (int r = 0; r < n_rows; r++)
                h_dev[r] *= att[r];
            free(att);
            if ((rc = be->upload(ctx, d_dev, h_dev, sizeof(float) * (size_t)n_rows)))
                goto fail;
        }
        n_sel = n_sparse > 0 ? blend_rows_at(o, 0, n_sparse, n_rows) : 0;
        if (ratio >= 1.0f)
            n_sel = n_rows;
        if ((rc = blend_device_top(m, d_dev, d_forced, n_rows, n_sel, d_top, idx)))
            goto fail;
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
        (rc = be->alloc(ctx, sizeof(int32_t) * (size_t)n_ctx, (void **)&d_idx)) ||
        (rc = be->alloc(ctx, sizeof(int32_t) * (size_t)n_ctx, (void **)&d_local)) ||
        (rc = be->alloc(ctx, sizeof(float) * (size_t)n_run * kv_dim + 4, (void **)&d_old)) ||
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
    int n_selected_total = 0;
    double t_layer0 = 0, wait0 = 0; /* ratio=auto: timing of the first sparse layer */
    /* 3. the selected rows through the remaining layers */
    for (int l = first_layer; l < hp->n_layer; l++) {
        int j = l - (CHECK_LAYER + 1);
        int n_next = (first_layer > 0 && l + 1 < hp->n_layer) ? blend_rows_at(o, j + 1, n_sparse, n_rows) : n_sel;
        if (n_next > n_sel)
            n_next = n_sel;
        if (ob.auto_ratio && first_layer > 0 && l + 1 < hp->n_layer && (l == first_layer || l == first_layer + 1)) {
            /* The controller decided at the check layer from the first
             * moments of the stream.  After one sparse layer it knows what a
             * sparse layer costs and how the stream really goes: keep only as
             * many rows as the remaining load can hide (never below the
             * floor; rows can only be dropped, by this layer's deviation). */
            struct kvfs_loader_stats ls;
            if ((rc = be->synchronize(ctx)))
                goto fail;
            kvfs_loader_get_stats(ld, &ls);
            if (l == first_layer) {
                t_layer0 = now_s();
                wait0 = ls.wait_s;
            } else {
                double t_sparse = now_s() - t_layer0 - (ls.wait_s - wait0); /* compute only */
                uint64_t done, total;
                double elapsed;
                kvfs_loader_progress(ld, &done, &total, &elapsed);
                double bw = elapsed > 0 ? (double)done / elapsed : 0;
                double load_left = done < total && bw > 0 ? (double)(total - done) / bw : 0;
                int layers_left = hp->n_layer - l;
                double per_row = t_sparse / (double)(n_sel + n_suffix);
                long fit = per_row > 0 ? (long)(load_left / (per_row * layers_left)) - n_suffix : n_sel;
                int floor_rows = (int)ceilf(ob.min_ratio * (float)n_rows - 1e-4f);
                int cap = fit < floor_rows ? floor_rows : fit > n_sel ? n_sel : (int)fit;
                if (cap < n_next)
                    n_next = cap;
            }
        }
        n_selected_total += n_sel;
        /* the query selection's first pass has put every layer in place */
        if (!by_query && (rc = blend_take_layer(m, ld, NULL, 0, 0, c, l, d_delta, n_rows, err, errlen)))
            goto fail;
        if ((rc = kvfs_layer_qkv(m, l, &ws, n_run)))
            goto fail;
        if (n_next < n_sel) {
            /* gradual filtering: this layer's deviation of the rows still
             * being recomputed decides which of them go on */
            if ((rc = be->gather_rows(ctx, on_k_layer(o) ? c->k[l] : c->v[l], d_idx, d_old, n_sel, kv_dim)) ||
                (rc = be->row_sqdiff(ctx, on_k_layer(o) ? ws.k : ws.v, d_old, d_dev, n_sel, kv_dim)) ||
                (ob.query_weighted && (rc = be->download(ctx, h_dev, d_dev, sizeof(float) * (size_t)n_sel))))
                goto fail;
        }
        if ((rc = be->scatter_rows(ctx, ws.k, d_idx, c->k[l], n_run, kv_dim)) ||
            (rc = be->scatter_rows(ctx, ws.v, d_idx, c->v[l], n_run, kv_dim)) ||
            (rc = kvfs_layer_finish(m, l, &ws, n_run, c, n_ctx)))
            goto fail;
        if (n_next < n_sel && ob.query_weighted && n_rows) {
            float *att = malloc(sizeof(float) * (size_t)n_rows);
            if (!att) {
                rc = -ENOMEM;
                goto fail;
            }
            if ((rc = query_attention(m, ws.q + (size_t)n_sel * hp->n_embd, c->k[l], n_rows, n_ctx, att))) {
                free(att);
                goto fail;
            }
            for (int k = 0; k < n_sel; k++)
                h_dev[k] *= att[idx[k]];
            free(att);
            if ((rc = be->upload(ctx, d_dev, h_dev, sizeof(float) * (size_t)n_sel)))
                goto fail;
        }
        if (n_next < n_sel) {
            /* local positions (within ws) of the rows that go on */
            if ((rc = blend_device_top(m, d_dev, NULL, n_sel, n_next, d_top, keep)))
                goto fail;
            for (int k = 0; k < n_suffix; k++)
                keep[n_next + k] = n_sel + k;
            int n_new = n_next + n_suffix;
            for (int k = 0; k < n_new; k++) {
                sel_pos[k] = sel_pos[keep[k]];
                idx[k] = idx[keep[k]];
            }
            if ((rc = be->upload(ctx, d_local, keep, sizeof(int32_t) * (size_t)n_new)) ||
                (rc = be->gather_rows(ctx, ws.x, d_local, w.x, n_new, hp->n_embd)) ||
                (rc = be->copy(ctx, ws.x, w.x, sizeof(float) * (size_t)n_new * hp->n_embd)) ||
                (rc = be->upload(ctx, d_idx, idx, sizeof(int32_t) * (size_t)n_new)) ||
                (rc = be->upload(ctx, ws.pos, sel_pos, sizeof(int32_t) * (size_t)n_new)))
                goto fail;
            n_sel = n_next;
            n_run = n_new;
        }
    }
    if (logits && (rc = kvfs_output_logits(m, &ws, n_run - 1, logits)))
        goto fail;
    if ((rc = be->synchronize(ctx)))
        goto fail;
    if (st) {
        st->n_ctx = n_ctx;
        st->n_chunk_rows = n_rows;
        st->ratio = ratio;
        st->n_selected = n_sparse > 0 && (first_layer > 0 || by_query) ? (int)lround((double)n_selected_total / n_sparse) : 0;
        st->seconds = now_s() - t0;
        struct kvfs_loader_stats ls;
        kvfs_loader_get_stats(ld, &ls);
        st->load_s = ls.load_s;
        st->wait_s = ls.wait_s;
        st->bytes_read = ls.bytes_read;
        st->compute_s = st->seconds - ls.wait_s;
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
    if (d_local) be->free(ctx, d_local);
    if (d_dev) be->free(ctx, d_dev);
    if (d_forced) be->free(ctx, d_forced);
    if (d_top) be->free(ctx, d_top);
    if (d_old) be->free(ctx, d_old);
    free(tokens);
    free(delta);
    free(forced);
    free(idx);
    free(sel_pos);
    free(keep);
    free(h_dev);
    return rc;
}
