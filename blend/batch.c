/* batch.c - blends that share their leading chunks, computed together
 * (kvfs_blend_batch in blend.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "blend_internal.h"
#include "loader.h"

#define BE(m) ((m)->be.iface)
#define CTX(m) ((m)->be.ctx)

/* A prompt made of loader chunks map[0..n_map) then n_suffix query tokens. */
struct layout {
    const int *map;
    int n_map, n_rows, n_suffix, n_ctx;
    int32_t *tokens;  /* n_ctx */
    int32_t *delta;   /* n_ctx: new position - cached position */
    int32_t *chunk_of;/* n_ctx: each row's chunk in the member's prompt (the query: -1) */
    int n_chunks;
    uint8_t *forced;  /* n_ctx: a later chunk's first rows (attention sinks) */
};

static void layout_free(struct layout *L)
{
    free(L->tokens);
    free(L->delta);
    free(L->chunk_of);
    free(L->forced);
}

static int layout_build(const struct kvfs_model *m, struct kvfs_loader *ld, const int *map, int n_map,
                        const int32_t *suffix, int n_suffix, int sink_rows, struct layout *L, char *err,
                        size_t errlen)
{
    memset(L, 0, sizeof(*L));
    L->map = map;
    L->n_map = n_map;
    L->n_suffix = n_suffix;
    for (int k = 0; k < n_map; k++) {
        if (map[k] < 0 || map[k] >= kvfs_loader_count(ld))
            return kvfs_errf(err, errlen, -EINVAL, "batch member names chunk %d of %d", map[k], kvfs_loader_count(ld));
        L->n_rows += (int)kvfs_loader_header(ld, map[k])->n_tokens;
    }
    L->n_ctx = L->n_rows + n_suffix;
    L->tokens = malloc(sizeof(int32_t) * ((size_t)L->n_ctx + 1));
    L->delta = malloc(sizeof(int32_t) * ((size_t)L->n_ctx + 1));
    L->chunk_of = malloc(sizeof(int32_t) * ((size_t)L->n_ctx + 1));
    L->forced = calloc((size_t)L->n_ctx + 1, 1);
    L->n_chunks = n_map;
    if (!L->tokens || !L->delta || !L->chunk_of || !L->forced) {
        layout_free(L);
        return -ENOMEM;
    }
    int r = 0;
    for (int k = 0; k < n_map; k++) {
        const struct kvfs_header *h = kvfs_loader_header(ld, map[k]);
        for (uint32_t t = 0; t < h->n_tokens; t++, r++) {
            L->tokens[r] = (int32_t)kvfs_header_token(h, t);
            L->delta[r] = r - (int32_t)(h->pos0 + t);
            L->chunk_of[r] = k;
            L->forced[r] = k > 0 && (int)t < sink_rows;
        }
    }
    for (int s = 0; s < n_suffix; s++, r++) {
        L->tokens[r] = suffix[s];
        L->delta[r] = 0;
        L->chunk_of[r] = -1;
    }
    for (r = 0; r < L->n_ctx; r++)
        if (L->tokens[r] < 0 || L->tokens[r] >= m->hp.n_vocab) {
            layout_free(L);
            return kvfs_errf(err, errlen, -EINVAL, "token %d out of range", L->tokens[r]);
        }
    return 0;
}

/* One cache for every member (cap rows, positions 0..) and a device buffer
 * for the keys' deltas.  Members are laid out in it one after another:
 * rows before `row0` (the shared prefix) stay, the rest is reloaded. */
static int cache_prepare(const struct kvfs_model *m, int cap, struct kvfs_kv_cache *c, int32_t **d_delta)
{
    int rc = kvfs_kv_cache_init(m, cap, c);
    if (rc)
        return rc;
    for (int r = 0; r < cap; r++)
        c->host_pos[r] = r;
    size_t bytes = sizeof(int32_t) * (size_t)cap;
    if ((rc = BE(m)->upload(CTX(m), c->pos, c->host_pos, bytes)) ||
        (rc = BE(m)->alloc(CTX(m), bytes + 4, (void **)d_delta))) {
        kvfs_kv_cache_free(m, c);
        return rc;
    }
    return 0;
}

/* Make the cache the member's: its rows count and deltas. */
static int cache_use(const struct kvfs_model *m, const struct layout *L, struct kvfs_kv_cache *c, int32_t *d_delta)
{
    c->n = L->n_ctx;
    return BE(m)->upload(CTX(m), d_delta, L->delta, sizeof(int32_t) * (size_t)L->n_ctx);
}

/* Every layer of the layout's chunks from row0 on, re-positioned. */
static int take_all_layers(const struct kvfs_model *m, struct kvfs_loader *ld, const int *map, int n_map, int row0,
                           int n_rows, struct kvfs_kv_cache *c, const int32_t *d_delta, char *err, size_t errlen)
{
    int rc = 0;
    for (int l = 0; l < m->hp.n_layer && !rc; l++)
        rc = blend_take_layer(m, ld, map, n_map, row0, c, l, d_delta, n_rows, err, errlen);
    return rc;
}

/* A member's first pass alone over the cache (its chunks from row0 on;
 * the rows before are the prefix, already in place): the attention its
 * query pays each of its chunk rows, into host mass[0..n_rows). */
static int member_mass(const struct kvfs_model *m, struct kvfs_loader *ld, const struct layout *L, int row0,
                       int map_from, struct kvfs_kv_cache *c, int32_t *d_delta, float *mass, char *err,
                       size_t errlen)
{
    struct kvfs_work w = {0};
    float *d_mass = NULL;
    size_t n = (size_t)L->n_ctx;
    int rc = cache_use(m, L, c, d_delta);
    if (!rc && !(rc = kvfs_work_alloc(m, L->n_ctx, &w)) &&
        !(rc = BE(m)->upload(CTX(m), w.ids, L->tokens, sizeof(int32_t) * n)) &&
        !(rc = kvfs_embed(m, w.ids, w.x, L->n_ctx)) && !(rc = kvfs_ple_inputs(m, &w, L->n_ctx)) &&
        !(rc = BE(m)->alloc(CTX(m), sizeof(float) * n + 4, (void **)&d_mass)) &&
        !(rc = blend_query_mass(m, ld, L->map + map_from, L->n_map - map_from, row0, c, &w, L->n_rows, L->n_suffix,
                                d_delta, &blend_served, d_mass, err, errlen)) &&
        L->n_rows)
        rc = BE(m)->download(CTX(m), mass, d_mass, sizeof(float) * (size_t)L->n_rows);
    if (d_mass)
        BE(m)->free(CTX(m), d_mass);
    kvfs_work_free(m, &w);
    return rc;
}

/* The k rows of the highest mass[0..n) (forced first), ascending, + base. */
static int top_rows(const struct kvfs_model *m, const float *mass, const uint8_t *forced, int n, int k, int base,
                    int32_t *idx)
{
    float *d_mass = NULL;
    uint8_t *d_forced = NULL;
    int32_t *d_top = NULL;
    int rc = 0;
    if (k <= 0)
        return 0;
    if (!(rc = BE(m)->alloc(CTX(m), sizeof(float) * (size_t)n + 4, (void **)&d_mass)) &&
        !(rc = BE(m)->alloc(CTX(m), (size_t)n + 4, (void **)&d_forced)) &&
        !(rc = BE(m)->alloc(CTX(m), sizeof(int32_t) * (size_t)n + 4, (void **)&d_top)) &&
        !(rc = BE(m)->upload(CTX(m), d_mass, mass, sizeof(float) * (size_t)n)) &&
        !(rc = BE(m)->upload(CTX(m), d_forced, forced, (size_t)n)))
        rc = blend_device_top(m, d_mass, d_forced, n, k, d_top, idx);
    for (int i = 0; !rc && i < k; i++)
        idx[i] += base;
    if (d_mass) BE(m)->free(CTX(m), d_mass);
    if (d_forced) BE(m)->free(CTX(m), d_forced);
    if (d_top) BE(m)->free(CTX(m), d_top);
    return rc;
}

/* Rows idx[0..n_run) from layer 0 through every layer over the cache
 * (which holds every other row's reused K/V): their fresh K/V replace the
 * cached ones, layer by layer, as in kvfs_blend_stream's query path, and
 * the reused chunk rows from row_lo on follow the chunk shift. */
static int recompute(const struct kvfs_model *m, struct kvfs_kv_cache *c, const struct layout *L, const int32_t *idx,
                     int n_run, int row_lo, float shift)
{
    const struct kvfs_hparams *hp = &m->hp;
    struct kvfs_work ws = {0};
    int32_t *ids = malloc(sizeof(int32_t) * ((size_t)n_run + 1)), *pos = malloc(sizeof(int32_t) * ((size_t)n_run + 1));
    int32_t *d_idx = NULL;
    int rc = ids && pos ? 0 : -ENOMEM;
    if (rc || n_run == 0)
        goto out;
    for (int k = 0; k < n_run; k++) {
        ids[k] = L->tokens[idx[k]];
        pos[k] = c->host_pos[idx[k]];
    }
    size_t bytes = sizeof(int32_t) * (size_t)n_run;
    if ((rc = kvfs_work_alloc(m, n_run, &ws)) || (rc = BE(m)->upload(CTX(m), ws.ids, ids, bytes)) ||
        (rc = BE(m)->upload(CTX(m), ws.pos, pos, bytes)) || (rc = BE(m)->alloc(CTX(m), bytes, (void **)&d_idx)) ||
        (rc = BE(m)->upload(CTX(m), d_idx, idx, bytes)) ||
        (rc = kvfs_embed(m, ws.ids, ws.x, n_run)) || (rc = kvfs_ple_inputs(m, &ws, n_run)))
        goto out;
    int n_sel = 0; /* the chunk rows among them (the query's rows come last) */
    while (n_sel < n_run && idx[n_sel] < L->n_rows)
        n_sel++;
    struct blend_shift_cache angles = {0};
    for (int l = 0; l < hp->n_layer && !rc; l++) {
        /* each layer at its own width; a layer reading an earlier layer's
         * cache (gemma4) has no K/V of its own to write */
        int own = m->layers[l].kv_layer == l, kv_dim = (int)blend_kv_dim(m, c, l);
        if (!(rc = kvfs_layer_qkv(m, l, &ws, n_run)) &&
            !(rc = blend_shift_layer(m, c, l, L->chunk_of, L->n_chunks, row_lo, L->n_rows, idx, d_idx, n_sel, ws.k,
                                     ws.v, shift, &angles)) &&
            !(own && (rc = BE(m)->scatter_rows(CTX(m), ws.k, d_idx, c->k[l], n_run, kv_dim))) &&
            !(own && (rc = BE(m)->scatter_rows(CTX(m), ws.v, d_idx, c->v[l], n_run, kv_dim))))
            rc = kvfs_layer_finish(m, l, &ws, n_run, c, c->n);
    }
    blend_shift_cache_free(&angles);
out:
    if (d_idx)
        BE(m)->free(CTX(m), d_idx);
    kvfs_work_free(m, &ws);
    free(ids);
    free(pos);
    return rc;
}

/* Rows [0, n_rows) of every layer's K and V from src to dst: each layer at
 * its own width, a layer reading another's cache (gemma4) with it. */
static int copy_rows(const struct kvfs_model *m, struct kvfs_kv_cache *dst, const struct kvfs_kv_cache *src,
                     int n_rows)
{
    int rc = 0;
    for (int l = 0; l < m->hp.n_layer && !rc; l++) {
        size_t bytes = sizeof(float) * (size_t)n_rows * blend_kv_dim(m, src, l);
        if (m->layers[l].kv_layer == l && !(rc = BE(m)->copy(CTX(m), dst->k[l], src->k[l], bytes)))
            rc = BE(m)->copy(CTX(m), dst->v[l], src->v[l], bytes);
    }
    return rc;
}

/* The shared prefix: a copy of the reused prefix rows of c, with the rows
 * any member chose there (want[r]) recomputed once into cp. */
static int blend_prefix(const struct kvfs_model *m, const struct kvfs_kv_cache *c, const struct layout *Lp,
                        const uint8_t *want, float shift, struct kvfs_kv_cache *cp, int *n_sel)
{
    int32_t *idx = malloc(sizeof(int32_t) * ((size_t)Lp->n_rows + 1));
    int rc = idx ? kvfs_kv_cache_init(m, Lp->n_rows, cp) : -ENOMEM;
    if (rc) {
        free(idx);
        return rc;
    }
    for (int r = 0; r < Lp->n_rows; r++)
        cp->host_pos[r] = r;
    cp->n = Lp->n_rows;
    rc = BE(m)->upload(CTX(m), cp->pos, cp->host_pos, sizeof(int32_t) * (size_t)Lp->n_rows);
    if (!rc)
        rc = copy_rows(m, cp, c, Lp->n_rows);
    *n_sel = 0;
    for (int r = 0; r < Lp->n_rows; r++)
        if (want[r])
            idx[(*n_sel)++] = r;
    if (rc || (rc = recompute(m, cp, Lp, idx, *n_sel, 0, shift)))
        kvfs_kv_cache_free(m, cp);
    free(idx);
    return rc;
}

/* One member over the blended prefix (already in c's first n_p rows): its
 * own chunks after the prefix reloaded, and its own chosen rows there
 * (sel[0..n_sel), ascending, all >= n_p) and its query recomputed. */
static int blend_member(const struct kvfs_model *m, struct kvfs_loader *ld, const struct layout *L, int n_shared,
                        int n_p, const int32_t *sel, int n_sel, float shift, struct kvfs_kv_cache *c, int32_t *d_delta,
                        char *err, size_t errlen)
{
    int32_t *idx = malloc(sizeof(int32_t) * ((size_t)L->n_ctx + 1));
    int rc = idx ? cache_use(m, L, c, d_delta) : -ENOMEM;
    if (!rc)
        rc = take_all_layers(m, ld, L->map + n_shared, L->n_map - n_shared, n_p, L->n_rows, c, d_delta, err, errlen);
    if (!rc) {
        memcpy(idx, sel, sizeof(int32_t) * (size_t)n_sel);
        for (int s = 0; s < L->n_suffix; s++)
            idx[n_sel + s] = L->n_rows + s;
        rc = recompute(m, c, L, idx, n_sel + L->n_suffix, n_p, shift); /* the prefix is final */
    }
    if (!rc)
        rc = BE(m)->synchronize(CTX(m));
    free(idx);
    return rc;
}

/* What a batch takes (kvfs_blend_batch). */
static int batch_check(const struct kvfs_blend_member *mb, int n_mb, int n_shared, const struct kvfs_blend_opts *o,
                       char *err, size_t errlen)
{
    int rc = blend_check_opts(o, err, errlen);
    if (rc)
        return rc;
    if (n_mb < 1 || n_shared < 1 || o->select != KVFS_BLEND_SELECT_QUERY || o->auto_ratio || !(o->ratio > 0.0f) ||
        !(o->ratio < 1.0f))
        return kvfs_errf(err, errlen, -EINVAL, "a batch shares a prefix of >= 1 chunk with select=query and a ratio "
                                               "in (0, 1)");
    for (int i = 0; i < n_mb; i++) {
        if (mb[i].n_chunks < n_shared || mb[i].n_suffix < 1)
            return kvfs_errf(err, errlen, -EINVAL, "batch member %d: %d chunks for a shared prefix of %d, %d query "
                             "tokens", i + 1, mb[i].n_chunks, n_shared, mb[i].n_suffix);
        if (memcmp(mb[i].chunks, mb[0].chunks, sizeof(int) * (size_t)n_shared))
            return kvfs_errf(err, errlen, -EINVAL, "batch member %d does not start with the shared chunks", i + 1);
    }
    return 0;
}

/* The prefix blended once (blend_prefix), into c's first rows; *k_p rows recomputed. */
static int prefix_into(const struct kvfs_model *m, struct kvfs_kv_cache *c, const struct layout *Lp,
                       const uint8_t *want, float shift, int *k_p)
{
    struct kvfs_kv_cache cp = {0};
    int rc = blend_prefix(m, c, Lp, want, shift, &cp, k_p);
    if (rc)
        return rc;
    rc = copy_rows(m, c, &cp, Lp->n_rows);
    kvfs_kv_cache_free(m, &cp);
    return rc;
}

/* A member's statistics: the batch's so far (its work is shared). */
static void member_stats(struct kvfs_loader *ld, const struct layout *L, int n_selected, float ratio, double t0,
                         struct kvfs_blend_stats *st)
{
    struct kvfs_loader_stats ls;
    kvfs_loader_get_stats(ld, &ls);
    memset(st, 0, sizeof(*st));
    st->n_ctx = L->n_ctx;
    st->n_chunk_rows = L->n_rows;
    st->n_selected = n_selected;
    st->ratio = ratio;
    st->seconds = blend_now_s() - t0;
    st->load_s = ls.load_s;
    st->wait_s = ls.wait_s;
    st->bytes_read = ls.bytes_read;
    st->n_direct = ls.n_direct;
    st->compute_s = st->seconds - ls.wait_s;
}

int kvfs_blend_batch(const struct kvfs_model *m, struct kvfs_loader *ld, const struct kvfs_blend_member *mb,
                     int n_mb, int n_shared, const struct kvfs_blend_opts *o, kvfs_blend_done_fn done, void *ctx,
                     char *err, size_t errlen)
{
    double t0 = blend_now_s();
    int rc = batch_check(mb, n_mb, n_shared, o, err, errlen);
    if (rc || (rc = blend_check_chunks(m, ld, err, errlen)))
        return rc;
    if ((rc = kvfs_loader_start(ld, 0)))
        return rc;
    struct layout Lp, *L = calloc((size_t)n_mb, sizeof(*L));
    int32_t **sel = calloc((size_t)n_mb, sizeof(*sel));
    int *n_sel = calloc((size_t)n_mb + 1, sizeof(int));
    uint8_t *want = NULL;
    struct kvfs_kv_cache c = {0};
    int32_t *d_delta = NULL;
    int n_built = 0, n_p, n0, k_p = 0, have_cache = 0, cap = 0;
    if (!L || !sel || !n_sel) {
        rc = -ENOMEM;
        goto out;
    }
    if ((rc = layout_build(m, ld, mb[0].chunks, n_shared, NULL, 0, o->sink_rows, &Lp, err, errlen)))
        goto out;
    n_p = Lp.n_rows;
    n0 = blend_exact_rows(ld, mb[0].chunks[0]); /* never recomputed, as in kvfs_blend_stream */
    for (; n_built < n_mb; n_built++) {
        if ((rc = layout_build(m, ld, mb[n_built].chunks, mb[n_built].n_chunks, mb[n_built].suffix,
                               mb[n_built].n_suffix, o->sink_rows, &L[n_built], err, errlen)))
            break;
        cap = L[n_built].n_ctx > cap ? L[n_built].n_ctx : cap;
    }
    if (rc || !(want = calloc((size_t)n_p + 1, 1)) || (rc = cache_prepare(m, cap, &c, &d_delta))) {
        rc = rc ? rc : -ENOMEM;
        goto free_prefix;
    }
    have_cache = 1;
    /* 1. each member's query over the reused cache (the prefix rows loaded
     * once, by the first) weighs every row it sees.  After the prefix each
     * member keeps its own top rows, as a blend of its own would; in the
     * prefix, which every member shares, the rows the members' queries
     * weigh most together (each member's weights there summing to 1) are
     * recomputed once for all, at the same ratio.  A causal prefix's fresh
     * rows do not depend on what follows, so each member's suffix then
     * attends to a prefix blended for all (kvfs(8), "Batches").  A batch
     * of one picks exactly what its own blend would. */
    float *pmass = calloc((size_t)n_p + 1, sizeof(float));
    if (!pmass)
        rc = -ENOMEM;
    for (int i = 0; i < n_mb && !rc; i++) {
        float *mass = malloc(sizeof(float) * ((size_t)L[i].n_rows + 1));
        int alone = n_mb == 1, from = alone ? n0 : n_p; /* alone: exactly its own blend's picks */
        int k = blend_rows_at(o, 0, 1, L[i].n_rows - (alone ? 0 : n_p));
        if (k > L[i].n_rows - from)
            k = L[i].n_rows - from;
        if (!mass || !(sel[i] = malloc(sizeof(int32_t) * ((size_t)k + 1))) ||
            (rc = member_mass(m, ld, &L[i], i ? n_p : 0, i ? n_shared : 0, &c, d_delta, mass, err, errlen)) ||
            (rc = top_rows(m, mass + from, L[i].forced + from, L[i].n_rows - from, k, from, sel[i]))) {
            rc = rc ? rc : -ENOMEM;
            free(mass);
            break;
        }
        for (int j = 0; j < k; j++)
            if (sel[i][j] < n_p)
                want[sel[i][j]] = 1;
            else
                sel[i][n_sel[i]++] = sel[i][j];
        if (alone) {
            free(mass);
            continue;
        }
        double sum = 0.0;
        for (int r = 0; r < n_p; r++)
            sum += mass[r];
        for (int r = 0; r < n_p && sum > 0.0; r++)
            pmass[r] += (float)(mass[r] / sum);
        free(mass);
    }
    if (!rc && n_mb > 1) {
        int k = blend_rows_at(o, 0, 1, n_p);
        if (k > n_p - n0)
            k = n_p - n0;
        int32_t *pick = malloc(sizeof(int32_t) * ((size_t)k + 1));
        if (!pick || (rc = top_rows(m, pmass + n0, Lp.forced + n0, n_p - n0, k, n0, pick)))
            rc = rc ? rc : -ENOMEM;
        for (int j = 0; !rc && j < k; j++)
            want[pick[j]] = 1;
        free(pick);
    }
    free(pmass);
    /* 2. the prefix once, into the shared cache's first rows */
    if (!rc)
        rc = prefix_into(m, &c, &Lp, want, o->shift, &k_p);
    /* 3. each member over it */
    for (int i = 0; i < n_mb && !rc; i++) {
        if ((rc = blend_member(m, ld, &L[i], n_shared, n_p, sel[i], n_sel[i], o->shift, &c, d_delta, err, errlen)))
            break;
        struct kvfs_blend_stats st;
        member_stats(ld, &L[i], k_p + n_sel[i], o->ratio, t0, &st); /* the prefix's union + its own */
        rc = done(ctx, i, &c, L[i].tokens, &st);
    }
free_prefix:
    /* copies from page-locked chunk buffers may still be reading them: the
     * device is done before the caller lets them go (as kvfs_blend_stream) */
    if (rc)
        BE(m)->synchronize(CTX(m));
    if (have_cache) {
        BE(m)->free(CTX(m), d_delta);
        kvfs_kv_cache_free(m, &c);
    }
    free(want);
    layout_free(&Lp);
out:
    for (int i = 0; i < n_built; i++)
        layout_free(&L[i]);
    for (int i = 0; sel && i < n_mb; i++)
        free(sel[i]);
    free(sel);
    free(n_sel);
    free(L);
    return rc;
}
