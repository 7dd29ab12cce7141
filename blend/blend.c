/* blend.c - CacheBlend-style composition of chunk KV caches (see blend.h). */
#include "blend.h"

#include "blend_internal.h"
#include "controller.h"
#include "experiment.h"
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

double blend_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int rope_selftest(const struct kvfs_model *m, float theta);

/* Re-positioning is exact at every RoPE base the model's layers use. */
int kvfs_blend_selftest(const struct kvfs_model *m)
{
    int rc = rope_selftest(m, m->hp.rope_theta);
    for (int l = 0; l < m->hp.n_layer && !rc; l++)
        if (m->layers[l].rope_theta != m->hp.rope_theta)
            rc = rope_selftest(m, m->layers[l].rope_theta);
    return rc;
}

static int rope_selftest(const struct kvfs_model *m, float theta)
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
    if (!rc) rc = be->rope(CTX(m), dev[0], &dpos[0], 1, 1, d, hp->rope_dim, theta, hp->rope_style, m->rope_freqs);
    if (!rc) rc = be->rope(CTX(m), dev[0], &dpos[1], 1, 1, d, hp->rope_dim, theta, hp->rope_style, m->rope_freqs);
    if (!rc) rc = be->rope(CTX(m), dev[1], &dpos[2], 1, 1, d, hp->rope_dim, theta, hp->rope_style, m->rope_freqs);
    if (!rc) rc = be->rope(CTX(m), dev[2], &dpos[2], 1, 1, d, hp->rope_dim, theta, hp->rope_style, m->rope_freqs);
    if (!rc) rc = be->rope(CTX(m), dev[2], &dpos[3], 1, 1, d, hp->rope_dim, theta, hp->rope_style, m->rope_freqs);
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

double kvfs_logits_kl(const float *p, const float *q, int n)
{
    double mp = -INFINITY, mq = -INFINITY, sp = 0, sq = 0, k = 0;
    for (int i = 0; i < n; i++) {
        mp = fmax(mp, p[i]);
        mq = fmax(mq, q[i]);
    }
    for (int i = 0; i < n; i++) {
        sp += exp(p[i] - mp);
        sq += exp(q[i] - mq);
    }
    double lsp = log(sp), lsq = log(sq);
    for (int i = 0; i < n; i++) {
        double lp = p[i] - mp - lsp, lq = q[i] - mq - lsq;
        k += exp(lp) * (lp - lq);
    }
    return k > 0 ? k : 0;
}

void kvfs_blend_opts_init(struct kvfs_blend_opts *o, float ratio)
{
    memset(o, 0, sizeof(*o));
    o->ratio = ratio;
    o->select = KVFS_BLEND_SELECT_DEFAULT;
    o->sink_rows = 1;
    o->check_layer = 1;
    o->min_ratio = KVFS_BLEND_DEFAULT_RATIO;
    o->shift = KVFS_BLEND_SHIFT;
}

void kvfs_blend_opts_floor(struct kvfs_blend_opts *o)
{
    o->full_below = KVFS_BLEND_FULL_BELOW;
    o->min_rows = KVFS_BLEND_MIN_ROWS;
}

/* Chunk rows recomputed at sparse layer j of n_sparse (layers after the
 * check layer).  Fixed: ratio everywhere.  Gradual: a linear taper from
 * ratio*(1+T) down to ratio*(1-T) (T = KVFS_BLEND_GRADUAL_TAPER), so the
 * mean (the compute budget) is still `ratio`; each layer keeps the most
 * deviating rows of the last. */
int blend_rows_at(const struct kvfs_blend_opts *o, int j, int n_sparse, int n_rows)
{
    float r = o->ratio;
    if (o->select == KVFS_BLEND_SELECT_GRADUAL && n_sparse > 1 && r > 0.0f && r < 1.0f) {
        float t = (float)j / (float)(n_sparse - 1);
        r = o->ratio * (1.0f + KVFS_BLEND_GRADUAL_TAPER * (1.0f - 2.0f * t));
    }
    if (r > 1.0f)
        r = 1.0f;
    int n = (int)ceilf(r * (float)n_rows - 1e-4f);
    if (o->ratio > 0.0f && n < o->min_rows)
        n = o->min_rows;
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

/* a prefix computed alone is a full prefill's, yet the prompt's first row
 * (its attention sink) and the first chunk's other rows draw much of the
 * query's attention: recomputing them would spend the budget on nothing
 * (BENCHMARKS.md, "Blend fidelity re-measured") */
int blend_exact_rows(const struct kvfs_loader *ld, int first_chunk)
{
    return (int)kvfs_loader_header(ld, first_chunk)->n_tokens;
}

/* How far a later chunk's cached K/V lie from a full prefill's falls with
 * the row's place in its chunk, about as (t + 1)^-0.25 (a row that saw few
 * of its own chunk's tokens is changed most by the chunks before it:
 * bench/deviation.c, BENCHMARKS.md); the query's attention says how much a
 * row matters, this how wrong it is likely to be. */
void blend_position_prior(const struct kvfs_blend_experiment *x, const int32_t *chunk_of, float *mass, int n_rows)
{
    if (x->pos_prior <= 0.0f)
        return;
    for (int r = 0, t = 0; r < n_rows; r++) {
        t = r && chunk_of[r] == chunk_of[r - 1] ? t + 1 : 0;
        mass[r] *= powf((float)(t + 1), -x->pos_prior);
    }
}

int blend_device_top_from(const struct kvfs_model *m, const float *d_dev, const uint8_t *d_forced, int from, int n,
                          int *k, int32_t *d_out, int32_t *out)
{
    if (*k > n - from)
        *k = n - from;
    int rc = blend_device_top(m, d_dev + from, d_forced + from, n - from, *k, d_out, out);
    for (int i = 0; !rc && i < *k; i++)
        out[i] += from;
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
    return kvfs_blend_eval(m, chunks, n_chunks, suffix, n_suffix, o, NULL, c, tokens_out, logits, st, err, errlen);
}

int kvfs_blend_eval(const struct kvfs_model *m, const struct kvfs_blend_chunk *chunks, int n_chunks,
                    const int32_t *suffix, int n_suffix, const struct kvfs_blend_opts *o,
                    const struct kvfs_blend_experiment *x, struct kvfs_kv_cache *c, int32_t **tokens_out, float *logits,
                    struct kvfs_blend_stats *st, char *err, size_t errlen)
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
    rc = blend_stream(m, ld, suffix, n_suffix, o, x ? x : &blend_served, c, tokens_out, logits, st, err, errlen);
    kvfs_loader_close(ld);
    return rc;
}

size_t blend_kv_dim(const struct kvfs_model *m, const struct kvfs_kv_cache *c, int l)
{
    const struct kvfs_layer_weights *L = &m->layers[m->layers[l].kv_layer];
    return m->hp.mla_rank ? (size_t)c->kv_dim : (size_t)L->n_kv_head * L->head_dim;
}

int blend_gather_ple(const struct kvfs_model *m, const struct kvfs_work *src, int n_src, const int32_t *d_rows,
                     float *dst, int n_dst)
{
    int P = m->hp.n_ple, rc = 0;
    for (int l = 0; P && l < m->hp.n_layer && !rc; l++)
        rc = BE(m)->gather_rows(CTX(m), src->ple + (size_t)l * n_src * P, d_rows, dst + (size_t)l * n_dst * P, n_dst,
                                P);
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
    /* each layer's own base, width and frequency factors: gemma3's local
     * layers rotate with another base, gemma4's with other dims too;
     * smollm3's layers without RoPE have keys of no position to move; a
     * layer reading an earlier layer's cache (gemma4) moved it there */
    const struct kvfs_layer_weights *L = &m->layers[layer];
    if (!rc && n_rows > row0 && !L->no_rope && L->kv_layer == layer)
        rc = BE(m)->rope(CTX(m), c->k[layer] + (size_t)row0 * blend_kv_dim(m, c, layer), d_delta + row0, n_rows - row0,
                         L->n_kv_head, L->head_dim, L->rope_dim, L->rope_theta, hp->rope_style, L->rope_freqs);
    return rc;
}

/* Query selection, first pass: the suffix (query) rows go through every
 * layer over the reused, re-positioned cache, exactly as a plain reuse
 * would; the attention they pay each row, summed over the upper layers,
 * heads and suffix rows, is left in d_mass[0..n_ctx).  Afterwards every layer of the
 * cache holds the chunks' K/V (re-positioned) and the suffix's. */
int blend_query_mass(const struct kvfs_model *m, struct kvfs_loader *ld, const int *map, int n_map, int row0,
                     struct kvfs_kv_cache *c, const struct kvfs_work *w, int n_rows, int n_suffix,
                     const int32_t *d_delta, const struct kvfs_blend_experiment *x, float *d_mass, char *err,
                     size_t errlen)
{
    const struct kvfs_hparams *hp = &m->hp;
    const struct kvfs_backend_iface *be = BE(m);
    void *ctx = CTX(m);
    int n_ctx = n_rows + n_suffix;
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
        (rc = be->gather_rows(ctx, w->x, d_rows, wq.x, n_suffix, hp->n_embd)) ||
        (rc = blend_gather_ple(m, w, n_ctx, d_rows, wq.ple, n_suffix)))
        goto out;
    float scale = hp->scale_q ? 1.0f : hp->attn_scale; /* as kvfs_layer_finish's attention */
    /* only the upper two thirds of the layers vote: the first third attends
     * mostly by position and locally (on 14 prompts, counting every layer
     * left 12% more KL: BENCHMARKS.md) */
    int from = (int)(x->vote_from * (float)hp->n_layer + 1e-4f), n_global = 0;
    for (int l = from; l < hp->n_layer; l++)
        n_global += m->layers[l].window == 0;
    for (int l = 0; l < hp->n_layer; l++) {
        /* sliding-window layers vote through their window (vote_local,
         * the default since 2026-11-27: Gemma 3's error sits mostly in its
         * local layers, and their votes left 0.24x of reuse's KL on the
         * long set against 0.26x, top-1 28/30 against 24/30 on the short
         * set: BENCHMARKS.md); with vote_local 0 they vote only where no
         * voting layer is global */
        const struct kvfs_layer_weights *L = &m->layers[l];
        int win = L->window, kl = L->kv_layer, own = kl == l, kv_dim = (int)blend_kv_dim(m, c, l);
        int votes = l >= from && (win == 0 || n_global == 0 || x->vote_local);
        /* a layer reading an earlier layer's cache (gemma4) computes no K/V:
         * it attends over (and votes through) its source's */
        if ((rc = blend_take_layer(m, ld, map, n_map, row0, c, l, d_delta, n_rows, err, errlen)) ||
            (rc = kvfs_layer_qkv(m, l, &wq, n_suffix)) ||
            (own && (rc = be->scatter_rows(ctx, wq.k, d_rows, c->k[l], n_suffix, kv_dim))) ||
            (own && (rc = be->scatter_rows(ctx, wq.v, d_rows, c->v[l], n_suffix, kv_dim))) ||
            (votes && !m->layers[l].attn_sinks &&
             (rc = be->attn_mass(ctx, wq.q, wq.pos, n_suffix, c->k[kl], c->pos, n_ctx, hp->n_head, L->n_kv_head,
                                 L->head_dim, scale, win, hp->attn_softcap, d_mass))) ||
            /* gpt-oss: the probabilities the attention pays the keys,
             * after its sinks took their share (a head that looks at its
             * sink votes little): the mass still says how much each row
             * weighs in the query's answer */
            (votes && m->layers[l].attn_sinks &&
             (rc = be->attn_mass_sinks(ctx, wq.q, wq.pos, n_suffix, c->k[kl], c->pos, n_ctx, hp->n_head,
                                       L->n_kv_head, L->head_dim, scale, win, hp->attn_softcap,
                                       m->layers[l].attn_sinks, d_mass))))
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

/* One streamed blend's state, shared by its phases (kvfs_blend_stream). */
struct blend_run {
    /* KVFS_BLEND_PROFILE set: each phase waited for and timed, to stderr */
    int profile;
    double prof_mark, shift_s;
    const struct kvfs_model *m;
    struct kvfs_loader *ld;
    struct kvfs_blend_opts o;   /* auto: o.ratio is set at the check layer */
    struct kvfs_blend_experiment x; /* the served rule unless kvfsctl eval asks another */
    struct kvfs_kv_cache *c;
    int n_rows, n_suffix, n_ctx, check_layer;
    int32_t *tokens, *delta;    /* host [n_ctx] */
    int32_t *chunk_of;          /* host [n_ctx]: each row's chunk (the query: -1) */
    uint8_t *forced;            /* host [n_ctx + 1]: attention sinks */
    int32_t *idx, *sel_pos, *keep; /* host [n_ctx]: rows being recomputed, their positions */
    int32_t *d_delta, *d_top, *d_idx, *d_local;
    float *d_dev, *d_old;
    uint8_t *d_forced;
    struct kvfs_work w, ws;     /* every row; the rows being recomputed */
    int n_sel, n_run, first_layer, n_sparse, by_query, n_selected_total;
    int n_forced, full_prefill;
    struct blend_shift_cache shift_cache; /* the chunk shift's RoPE angles, layer to layer */
};

int blend_check_opts(const struct kvfs_blend_opts *o, char *err, size_t errlen)
{
    if (!(o->shift >= 0.0f && o->shift <= 1.0f))
        return kvfs_errf(err, errlen, -EINVAL, "shift %g is outside [0, 1]", (double)o->shift);
    if (o->auto_ratio && !kvfs_blend_min_ratio_ok(o->min_ratio))
        return kvfs_errf(err, errlen, -EINVAL, "min_ratio %g is outside (0, 1]", (double)o->min_ratio);
    if (!kvfs_blend_ratio_ok(o->ratio))
        return kvfs_errf(err, errlen, -EINVAL, "ratio %g is outside [0, 1]", (double)o->ratio);
    if (o->sink_rows < 0 || o->check_layer < 1 || o->min_rows < 0 || o->full_below < 0 ||
        (o->select != KVFS_BLEND_SELECT_FIXED && o->select != KVFS_BLEND_SELECT_GRADUAL &&
         o->select != KVFS_BLEND_SELECT_QUERY))
        return kvfs_errf(err, errlen, -EINVAL, "bad blend options (select %d, sink_rows %d, check_layer %d)",
                         o->select, o->sink_rows, o->check_layer);
    return 0;
}

/* The prompt's tokens and positions: each chunk's rows move from their
 * cached positions to their place in the prompt. */
static int layout_prompt(struct blend_run *b, const int32_t *suffix, char *err, size_t errlen)
{
    int n_chunks = kvfs_loader_count(b->ld);
    for (int i = 0, r = 0; i < n_chunks; i++) {
        const struct kvfs_header *h = kvfs_loader_header(b->ld, i);
        for (uint32_t t = 0; t < h->n_tokens; t++, r++) {
            b->tokens[r] = (int32_t)kvfs_header_token(h, t);
            b->delta[r] = r - (int32_t)(h->pos0 + t);
            b->chunk_of[r] = i;
            b->c->host_pos[r] = r;
            /* a later chunk's first rows were attention sinks when it was
             * prefilled alone: their cached K/V are the most out of place
             * (gpt-oss's learned sinks take some of that role, a logit
             * with no row; its chunks' first rows are still the ones that
             * saw nothing before them, so they are forced as any model's;
             * sink_rows tuned on dense models, not re-measured on it) */
            if (i > 0 && (int)t < b->o.sink_rows) {
                b->forced[r] = 1;
                if (b->o.min_rows < ++b->n_forced)
                    b->o.min_rows = b->n_forced; /* sinks come on top of nothing: they are the floor */
            }
            if (b->tokens[r] < 0 || b->tokens[r] >= b->m->hp.n_vocab)
                return kvfs_errf(err, errlen, -EINVAL, "chunk %d: token %d out of range", i + 1, b->tokens[r]);
        }
    }
    for (int r = b->n_rows; r < b->n_ctx; r++) {
        b->tokens[r] = suffix[r - b->n_rows];
        b->delta[r] = 0;
        b->chunk_of[r] = -1;
        b->c->host_pos[r] = r;
        if (b->tokens[r] < 0 || b->tokens[r] >= b->m->hp.n_vocab)
            return kvfs_errf(err, errlen, -EINVAL, "suffix token %d out of range", b->tokens[r]);
    }
    b->c->n = b->n_ctx;
    return 0;
}

/* Buffers, the loader started, every row's embedding. */
static int prepare(struct blend_run *b, const int32_t *suffix, char *err, size_t errlen)
{
    const struct kvfs_model *m = b->m;
    const struct kvfs_backend_iface *be = BE(m);
    void *ctx = CTX(m);
    size_t n = (size_t)b->n_ctx;
    b->tokens = malloc(sizeof(int32_t) * n);
    b->delta = malloc(sizeof(int32_t) * n);
    b->chunk_of = malloc(sizeof(int32_t) * n);
    b->forced = calloc(n + 1, 1);
    b->idx = malloc(sizeof(int32_t) * n);
    b->sel_pos = malloc(sizeof(int32_t) * n);
    b->keep = malloc(sizeof(int32_t) * n);
    if (!b->tokens || !b->delta || !b->chunk_of || !b->forced || !b->idx || !b->sel_pos || !b->keep)
        return -ENOMEM;
    int rc = kvfs_kv_cache_init(m, b->n_ctx, b->c);
    if (rc || (rc = layout_prompt(b, suffix, err, errlen)))
        return rc;
    const struct kvfs_hparams *hp = &m->hp;
    b->check_layer = hp->n_layer > b->o.check_layer ? b->o.check_layer : hp->n_layer - 1;
    int blending = b->o.ratio > 0.0f && hp->n_layer >= 2 && b->check_layer >= 1;
    /* ratio=auto hides loading behind recompute, which the query selection
     * cannot (it needs every layer before choosing): auto selects at the
     * check layer instead */
    if (b->o.auto_ratio && b->o.select == KVFS_BLEND_SELECT_QUERY)
        b->o.select = KVFS_BLEND_SELECT_FIXED;
    if (!blending)
        b->o.select = -1; /* plain reuse */
    b->by_query = b->o.select == KVFS_BLEND_SELECT_QUERY && b->o.ratio < 1.0f;
    b->n_sparse = hp->n_layer - 1 - b->check_layer;
    /* layers before the check layer are recomputed in full: never loaded */
    if ((rc = kvfs_loader_start(b->ld, blending && !b->by_query ? b->check_layer : 0)) ||
        (rc = be->alloc(ctx, sizeof(int32_t) * n, (void **)&b->d_delta)) ||
        (rc = be->upload(ctx, b->d_delta, b->delta, sizeof(int32_t) * n)) ||
        (rc = be->upload(ctx, b->c->pos, b->c->host_pos, sizeof(int32_t) * n)) ||
        (rc = kvfs_work_alloc(m, b->n_ctx, &b->w)) ||
        (rc = be->upload(ctx, b->w.ids, b->tokens, sizeof(int32_t) * n)) ||
        (rc = be->upload(ctx, b->w.pos, b->c->host_pos, sizeof(int32_t) * n)) ||
        (rc = kvfs_embed(m, b->w.ids, b->w.x, b->n_ctx)) || (rc = kvfs_ple_inputs(m, &b->w, b->n_ctx)) ||
        (rc = be->alloc(ctx, sizeof(float) * n + 4, (void **)&b->d_dev)) ||
        (rc = be->alloc(ctx, n + 4, (void **)&b->d_forced)) ||
        (rc = be->alloc(ctx, sizeof(int32_t) * n + 4, (void **)&b->d_top)) ||
        (b->n_rows && (rc = be->upload(ctx, b->d_forced, b->forced, (size_t)b->n_rows))))
        return rc;
    return 0;
}

/* select=query: the rows the query attends to most over the reused cache,
 * recomputed from layer 0 (the first pass put every layer in place). */
static int select_by_query(struct blend_run *b, char *err, size_t errlen)
{
    int rc = blend_query_mass(b->m, b->ld, NULL, 0, 0, b->c, &b->w, b->n_rows, b->n_suffix, b->d_delta, &b->x,
                              b->d_dev, err, errlen);
    if (rc)
        return rc;
    if (b->x.pos_prior > 0.0f && b->n_rows) {
        float *mass = malloc(sizeof(float) * (size_t)b->n_rows);
        if (!mass)
            return -ENOMEM;
        const struct kvfs_backend_iface *be = BE(b->m);
        if (!(rc = be->download(CTX(b->m), mass, b->d_dev, sizeof(float) * (size_t)b->n_rows))) {
            blend_position_prior(&b->x, b->chunk_of, mass, b->n_rows);
            rc = be->upload(CTX(b->m), b->d_dev, mass, sizeof(float) * (size_t)b->n_rows);
        }
        free(mass);
        if (rc)
            return rc;
    }
    b->n_sel = blend_rows_at(&b->o, 0, 1, b->n_rows);
    b->first_layer = 0;
    b->n_sparse = b->m->hp.n_layer;
    /* the budget goes to the later chunks */
    int from = blend_exact_rows(b->ld, 0);
    return blend_device_top_from(b->m, b->d_dev, b->d_forced, from, b->n_rows, &b->n_sel, b->d_top, b->idx);
}

/* select=fixed / gradual (CacheBlend): the layers before the check layer in
 * full, then the rows whose fresh V at the check layer deviates most from
 * the cached V (V measured better than K: BENCHMARKS.md).  The check layer
 * keeps every fresh K/V: they are exact and already paid for. */
static int select_at_check_layer(struct blend_run *b, char *err, size_t errlen)
{
    const struct kvfs_model *m = b->m;
    const struct kvfs_backend_iface *be = BE(m);
    void *ctx = CTX(m);
    int rc = 0, cl = b->check_layer;
    if (m->layers[cl].kv_layer != cl) /* its deviation needs fresh V of its own */
        return kvfs_errf(err, errlen, -ENOTSUP, "check layer %d reads layer %d's cache", cl, m->layers[cl].kv_layer);
    double t_full0 = blend_now_s();
    for (int l = 0; l < cl && !rc; l++) {
        size_t bytes = sizeof(float) * (size_t)b->n_ctx * blend_kv_dim(m, b->c, l);
        int own = m->layers[l].kv_layer == l; /* gemma4's shared-KV layers compute no K/V */
        if (!(rc = kvfs_layer_qkv(m, l, &b->w, b->n_ctx)) && !(own && (rc = be->copy(ctx, b->c->k[l], b->w.k, bytes))) &&
            !(own && (rc = be->copy(ctx, b->c->v[l], b->w.v, bytes))))
            rc = kvfs_layer_finish(m, l, &b->w, b->n_ctx, b->c, b->n_ctx);
    }
    size_t bytes = sizeof(float) * (size_t)b->n_ctx * blend_kv_dim(m, b->c, cl);
    /* the controller needs the real compute time: wait for an asynchronous
     * backend (GPU) to finish the layers just queued */
    if (rc || (b->o.auto_ratio && (rc = be->synchronize(ctx))))
        return rc;
    double t_full = blend_now_s() - t_full0;
    if ((rc = blend_take_layer(m, b->ld, NULL, 0, 0, b->c, cl, b->d_delta, b->n_rows, err, errlen)))
        return rc;
    if (b->o.auto_ratio) {
        struct kvfs_ratio_inputs ri = {0};
        kvfs_loader_progress(b->ld, &ri.bytes_done, &ri.bytes_total, &ri.load_elapsed_s);
        ri.sec_per_row_layer = t_full / ((double)cl * b->n_ctx);
        ri.n_sparse = b->n_sparse;
        ri.n_rows = b->n_rows;
        ri.n_suffix = b->n_suffix;
        ri.min_ratio = b->o.min_ratio;
        b->o.ratio = kvfs_auto_ratio(&ri, NULL);
    }
    if ((rc = kvfs_layer_qkv(m, cl, &b->w, b->n_ctx)) ||
        (b->n_rows && (rc = be->row_sqdiff(ctx, b->w.v, b->c->v[cl], b->d_dev, b->n_rows, (int)blend_kv_dim(m, b->c, cl)))))
        return rc;
    b->n_sel = b->n_sparse > 0 ? blend_rows_at(&b->o, 0, b->n_sparse, b->n_rows) : 0;
    if (b->o.ratio >= 1.0f)
        b->n_sel = b->n_rows;
    b->first_layer = cl;
    if ((rc = blend_device_top(m, b->d_dev, b->d_forced, b->n_rows, b->n_sel, b->d_top, b->idx)) ||
        (rc = be->copy(ctx, b->c->k[cl], b->w.k, bytes)) || (rc = be->copy(ctx, b->c->v[cl], b->w.v, bytes)))
        return rc;
    return 0;
}

/* The selected rows plus the suffix, compacted into ws; at the check layer
 * their queries are there already and the layer is finished for them. */
static int gather_selected(struct blend_run *b)
{
    const struct kvfs_model *m = b->m;
    const struct kvfs_backend_iface *be = BE(m);
    void *ctx = CTX(m);
    size_t n = (size_t)b->n_ctx;
    b->n_run = b->n_sel + b->n_suffix;
    for (int k = 0; k < b->n_suffix; k++)
        b->idx[b->n_sel + k] = b->n_rows + k;
    for (int k = 0; k < b->n_run; k++)
        b->sel_pos[k] = b->c->host_pos[b->idx[k]];
    int rc;
    if ((rc = kvfs_work_alloc(m, b->n_run, &b->ws)) || (rc = be->alloc(ctx, sizeof(int32_t) * n, (void **)&b->d_idx)) ||
        (rc = be->alloc(ctx, sizeof(int32_t) * n, (void **)&b->d_local)) ||
        (rc = be->alloc(ctx, sizeof(float) * (size_t)b->n_run * b->c->kv_dim + 4, (void **)&b->d_old)) ||
        (rc = be->upload(ctx, b->d_idx, b->idx, sizeof(int32_t) * (size_t)b->n_run)) ||
        (rc = be->upload(ctx, b->ws.pos, b->sel_pos, sizeof(int32_t) * (size_t)b->n_run)) ||
        (rc = be->gather_rows(ctx, b->w.x, b->d_idx, b->ws.x, b->n_run, m->hp.n_embd)) ||
        (rc = blend_gather_ple(m, &b->w, b->n_ctx, b->d_idx, b->ws.ple, b->n_run)))
        return rc;
    if (b->first_layer > 0 && b->first_layer == b->check_layer) {
        if ((rc = be->gather_rows(ctx, b->w.q, b->d_idx, b->ws.q, b->n_run, m->hp.q_dim)) ||
            (rc = kvfs_layer_finish(m, b->check_layer, &b->ws, b->n_run, b->c, b->n_ctx)))
            return rc;
        b->first_layer = b->check_layer + 1;
    }
    return 0;
}

/* ratio=auto, after the first sparse layer: how many rows the remaining
 * load can still hide (controller.h, kvfs_auto_rows). */
static int auto_cap(struct blend_run *b, int l, double *t_layer0, double *wait0, int *n_next)
{
    struct kvfs_loader_stats ls;
    int rc = BE(b->m)->synchronize(CTX(b->m));
    if (rc)
        return rc;
    kvfs_loader_get_stats(b->ld, &ls);
    if (l == b->first_layer) {
        *t_layer0 = blend_now_s();
        *wait0 = ls.wait_s;
        return 0;
    }
    struct kvfs_rows_inputs ri = {0};
    ri.sparse_layer_s = blend_now_s() - *t_layer0 - (ls.wait_s - *wait0); /* compute only */
    kvfs_loader_progress(b->ld, &ri.bytes_done, &ri.bytes_total, &ri.load_elapsed_s);
    ri.layers_left = b->m->hp.n_layer - l;
    ri.n_sel = b->n_sel;
    ri.n_suffix = b->n_suffix;
    ri.floor_rows = (int)ceilf(b->o.min_ratio * (float)b->n_rows - 1e-4f);
    int cap = kvfs_auto_rows(&ri);
    if (cap < *n_next)
        *n_next = cap;
    return 0;
}

/* Gradual filtering / auto, before layer l's K/V are overwritten: each
 * current row's deviation (fresh V in ws against the cached V), which
 * compact() then keeps the most deviating of. */
static int narrow(struct blend_run *b, int l)
{
    const struct kvfs_model *m = b->m;
    const struct kvfs_backend_iface *be = BE(m);
    void *ctx = CTX(m);
    int rc, kv_dim = (int)blend_kv_dim(m, b->c, l);
    if ((rc = be->gather_rows(ctx, b->c->v[l], b->d_idx, b->d_old, b->n_sel, kv_dim)) ||
        (rc = be->row_sqdiff(ctx, b->ws.v, b->d_old, b->d_dev, b->n_sel, kv_dim)))
        return rc;
    return 0;
}

/* gemma4: the kept rows' per-layer inputs, laid out for n_new rows
 * ([n_layer][n_new][n_ple]; b->d_local holds their places in ws) */
static int compact_ple(struct blend_run *b, int n_new)
{
    const struct kvfs_model *m = b->m;
    size_t bytes = sizeof(float) * (size_t)m->hp.n_layer * n_new * m->hp.n_ple;
    float *tmp = NULL;
    if (!m->hp.n_ple)
        return 0;
    int rc = BE(m)->alloc(CTX(m), bytes, (void **)&tmp);
    if (!rc && !(rc = blend_gather_ple(m, &b->ws, b->n_run, b->d_local, tmp, n_new)))
        rc = BE(m)->copy(CTX(m), b->ws.ple, tmp, bytes);
    if (tmp) {
        int rs = BE(m)->synchronize(CTX(m)); /* tmp is freed at once */
        rc = rc ? rc : rs;
        BE(m)->free(CTX(m), tmp);
    }
    return rc;
}

/* ...after the layer: the kept rows' state moves to the front of ws. */
static int compact(struct blend_run *b, int n_next)
{
    const struct kvfs_model *m = b->m;
    const struct kvfs_backend_iface *be = BE(m);
    void *ctx = CTX(m);
    int rc = blend_device_top(m, b->d_dev, NULL, b->n_sel, n_next, b->d_top, b->keep); /* local positions in ws */
    if (rc)
        return rc;
    for (int k = 0; k < b->n_suffix; k++)
        b->keep[n_next + k] = b->n_sel + k;
    int n_new = n_next + b->n_suffix;
    for (int k = 0; k < n_new; k++) {
        b->sel_pos[k] = b->sel_pos[b->keep[k]];
        b->idx[k] = b->idx[b->keep[k]];
    }
    if ((rc = be->upload(ctx, b->d_local, b->keep, sizeof(int32_t) * (size_t)n_new)) ||
        (rc = be->gather_rows(ctx, b->ws.x, b->d_local, b->w.x, n_new, m->hp.n_embd)) ||
        (rc = be->copy(ctx, b->ws.x, b->w.x, sizeof(float) * (size_t)n_new * m->hp.n_embd)) ||
        (rc = compact_ple(b, n_new)) ||
        (rc = be->upload(ctx, b->d_idx, b->idx, sizeof(int32_t) * (size_t)n_new)) ||
        (rc = be->upload(ctx, b->ws.pos, b->sel_pos, sizeof(int32_t) * (size_t)n_new)))
        return rc;
    b->n_sel = n_next;
    b->n_run = n_new;
    return 0;
}

/* KVFS_BLEND_PROFILE: the seconds since the last mark, the device's work
 * included (a synchronize: slower, so only when asked) */
static double prof_lap(struct blend_run *b)
{
    if (!b->profile)
        return 0;
    BE(b->m)->synchronize(CTX(b->m));
    double t = blend_now_s(), d = t - b->prof_mark;
    b->prof_mark = t;
    return d;
}

/* select=query: the chunk shift at layer l (profiled on its own) */
static int shift_layer(struct blend_run *b, int l)
{
    double t = 0;
    if (b->profile) {
        BE(b->m)->synchronize(CTX(b->m));
        t = blend_now_s();
    }
    int rc = blend_shift_layer(b->m, b->c, l, b->chunk_of, kvfs_loader_count(b->ld), 0, b->n_rows, b->idx, b->d_idx,
                               b->n_sel, b->ws.k, b->ws.v, b->o.shift, &b->shift_cache);
    if (b->profile) {
        BE(b->m)->synchronize(CTX(b->m));
        b->shift_s += blend_now_s() - t;
    }
    return rc;
}

/* The shared recompute loop: the selected rows through the remaining
 * layers, their fresh K/V replacing the cached ones layer by layer. */
static int recompute_layers(struct blend_run *b, char *err, size_t errlen)
{
    const struct kvfs_model *m = b->m;
    const struct kvfs_backend_iface *be = BE(m);
    void *ctx = CTX(m);
    int rc = 0, n_layer = m->hp.n_layer;
    double t_layer0 = 0, wait0 = 0; /* ratio=auto: timing of the first sparse layer */
    for (int l = b->first_layer; l < n_layer && !rc; l++) {
        int sparse = b->first_layer > 0 && l + 1 < n_layer;
        int n_next = sparse ? blend_rows_at(&b->o, l - b->check_layer, b->n_sparse, b->n_rows) : b->n_sel;
        int own = m->layers[l].kv_layer == l, kv_dim = (int)blend_kv_dim(m, b->c, l);
        if (n_next > b->n_sel || !own) /* a shared-KV layer (gemma4) has no fresh V to narrow by */
            n_next = b->n_sel;
        if (b->o.auto_ratio && sparse && l <= b->first_layer + 1 && (rc = auto_cap(b, l, &t_layer0, &wait0, &n_next)))
            break;
        b->n_selected_total += b->n_sel;
        /* the query selection's first pass has put every layer in place */
        if ((!b->by_query && (rc = blend_take_layer(m, b->ld, NULL, 0, 0, b->c, l, b->d_delta, b->n_rows, err, errlen))) ||
            (rc = kvfs_layer_qkv(m, l, &b->ws, b->n_run)) ||
            (n_next < b->n_sel && (rc = narrow(b, l))) ||
            (b->by_query && (rc = shift_layer(b, l))) ||
            (own && (rc = be->scatter_rows(ctx, b->ws.k, b->d_idx, b->c->k[l], b->n_run, kv_dim))) ||
            (own && (rc = be->scatter_rows(ctx, b->ws.v, b->d_idx, b->c->v[l], b->n_run, kv_dim))) ||
            (rc = kvfs_layer_finish(m, l, &b->ws, b->n_run, b->c, b->n_ctx)))
            break;
        if (n_next < b->n_sel)
            rc = compact(b, n_next);
    }
    return rc;
}

static void fill_stats(struct blend_run *b, double t0, struct kvfs_blend_stats *st)
{
    struct kvfs_loader_stats ls;
    kvfs_loader_get_stats(b->ld, &ls);
    st->n_ctx = b->n_ctx;
    st->n_chunk_rows = b->n_rows;
    st->ratio = b->o.ratio;
    st->n_selected = b->n_sparse > 0 && (b->first_layer > 0 || b->by_query)
                   ? (int)lround((double)b->n_selected_total / b->n_sparse) : 0;
    st->seconds = blend_now_s() - t0;
    st->load_s = ls.load_s;
    st->wait_s = ls.wait_s;
    st->bytes_read = ls.bytes_read;
    st->n_direct = ls.n_direct;
    st->compute_s = st->seconds - ls.wait_s;
    st->full_prefill = b->full_prefill;
}

static void run_free(struct blend_run *b)
{
    const struct kvfs_backend_iface *be = BE(b->m);
    void *ctx = CTX(b->m);
    kvfs_work_free(b->m, &b->w);
    kvfs_work_free(b->m, &b->ws);
    void *dev[] = {b->d_delta, b->d_idx, b->d_local, b->d_dev, b->d_forced, b->d_top, b->d_old};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++)
        if (dev[i])
            be->free(ctx, dev[i]);
    blend_shift_cache_free(&b->shift_cache);
    free(b->tokens);
    free(b->delta);
    free(b->chunk_of);
    free(b->forced);
    free(b->idx);
    free(b->sel_pos);
    free(b->keep);
}

int kvfs_blend_stream(const struct kvfs_model *m, struct kvfs_loader *ld, const int32_t *suffix, int n_suffix,
                      const struct kvfs_blend_opts *o, struct kvfs_kv_cache *c, int32_t **tokens_out, float *logits,
                      struct kvfs_blend_stats *st, char *err, size_t errlen)
{
    return blend_stream(m, ld, suffix, n_suffix, o, &blend_served, c, tokens_out, logits, st, err, errlen);
}

int blend_stream(const struct kvfs_model *m, struct kvfs_loader *ld, const int32_t *suffix, int n_suffix,
                 const struct kvfs_blend_opts *o, const struct kvfs_blend_experiment *x, struct kvfs_kv_cache *c,
                 int32_t **tokens_out, float *logits, struct kvfs_blend_stats *st, char *err, size_t errlen)
{
    double t0 = blend_now_s();
    struct blend_run b = {.m = m, .ld = ld, .o = *o, .x = *x, .c = c, .n_suffix = n_suffix};
    int rc, n_chunks = kvfs_loader_count(ld);
    memset(c, 0, sizeof(*c));
    if (b.o.auto_ratio)
        b.o.ratio = b.o.min_ratio;
    if ((rc = blend_check_opts(&b.o, err, errlen)) || (rc = kvfs_blend_experiment_check(&b.x, err, errlen)))
        return rc;
    if (n_chunks < 1 || n_chunks > KVFS_BLEND_MAX_CHUNKS || n_suffix < 1)
        return kvfs_errf(err, errlen, -EINVAL, "a blend needs 1 to %d chunks and at least one suffix token",
                         KVFS_BLEND_MAX_CHUNKS);
    if ((rc = blend_check_chunks(m, ld, err, errlen)))
        return rc;
    for (int i = 0; i < n_chunks; i++)
        b.n_rows += (int)kvfs_loader_header(ld, i)->n_tokens;
    b.n_ctx = b.n_rows + n_suffix;
    /* the floor: a prompt this short costs about as much to prefill in
     * full as to blend (kvfs(8), BENCHMARKS.md) */
    if (b.o.full_below > 0 && b.n_ctx <= b.o.full_below && (b.o.ratio > 0.0f || b.o.auto_ratio)) {
        b.o.ratio = 1.0f;
        b.o.auto_ratio = 0;
        b.full_prefill = 1;
    }
    const char *prof = getenv("KVFS_BLEND_PROFILE");
    b.profile = prof && *prof && strcmp(prof, "0");
    b.prof_mark = t0;
    double lap[4] = {0};
    if ((rc = prepare(&b, suffix, err, errlen)))
        goto fail;
    lap[0] = prof_lap(&b);
    /* 1. which rows: none (plain reuse: only the suffix, from layer 0), by
     * the query, or at the check layer */
    if (b.o.select < 0) {
        b.n_sel = 0;
        b.first_layer = 0;
    } else if ((rc = b.by_query ? select_by_query(&b, err, errlen) : select_at_check_layer(&b, err, errlen))) {
        goto fail;
    }
    lap[1] = prof_lap(&b);
    /* 2. those rows and the suffix through the remaining layers */
    if ((rc = gather_selected(&b)) || (lap[2] = prof_lap(&b), rc = recompute_layers(&b, err, errlen)) ||
        (lap[3] = prof_lap(&b), logits && (rc = kvfs_output_logits(m, &b.ws, b.n_run - 1, logits))) ||
        (rc = BE(m)->synchronize(CTX(m))))
        goto fail;
    if (b.profile)
        fprintf(stderr, "kvfs blend profile (%s, %d rows): prepare %.1f ms, %s %.1f ms, gather %.1f ms, "
                "recompute %.1f ms (chunk shift %.1f), logits %.1f ms\n", BE(m)->name, b.n_ctx, 1e3 * lap[0],
                b.by_query ? "query pass + selection" : "selection", 1e3 * lap[1], 1e3 * lap[2], 1e3 * lap[3],
                1e3 * b.shift_s, 1e3 * prof_lap(&b));
    if (st)
        fill_stats(&b, t0, st);
    *tokens_out = b.tokens;
    b.tokens = NULL;
    run_free(&b);
    return 0;
fail:
    /* copies from page-locked chunks may still be reading them (backend.h,
     * host_register): the device is done before the caller lets them go */
    BE(m)->synchronize(CTX(m));
    kvfs_kv_cache_free(m, c);
    run_free(&b);
    return rc;
}
