/* shift.c - the chunk shift: a later chunk's reused rows follow its
 * recomputed ones (kvfs(8), "The chunk shift"; BENCHMARKS.md).
 *
 * A chunk prefilled alone lacks the earlier chunks' context, and much of
 * what that changes in its K/V is common to its rows.  The rows a blend
 * recomputes at layer l show it: fresh minus cached.  Every other row of
 * the same chunk moves by `shift` times their mean (shift < 1: the
 * recomputed rows are the most attended ones, whose deviation is larger
 * than the rest's).  Keys are averaged in RoPE's frame of position 0 and
 * rotated back to each row's position; the rotations run here on the host
 * (a chunk's rows have consecutive positions: one angle step per row), so
 * a layer costs two small downloads, one upload and one add per K and V
 * (on a backend whose buffers are host memory, the CPU's, each row's shift
 * is added in place as it is made: no buffer of every row, no upload, no
 * second pass over the cache).
 * The rows and their positions are the same at every layer, so each row's
 * angles are computed at the first layer of each RoPE base and kept in the
 * caller's blend_shift_cache (on Gemma 3 the trigonometry was a third of
 * the shift's time).  The first chunk is exact and the query is
 * recomputed: neither moves. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "blend_internal.h"

#define BE(m) ((m)->be.iface)
#define CTX(m) ((m)->be.ctx)

struct shift_bufs {
    float *h_sel, *h_old, *h_mean, *h_add; /* host: [n_sel][kvd] x2, [n_chunks][kvd], [n_add][kvd] (direct: [kvd]) */
    double *inv;                           /* RoPE's frequencies, [rope_dim / 2] */
    int *cnt;
    uint8_t *recomputed;                   /* [n_rows] */
    float *d_sel, *d_add;                  /* device: [n_sel][kvd], [n_add][kvd] (direct: NULL) */
    struct shift_angles *ang;              /* this layer's angles (cached), or NULL: computed here */
    int ang_fill;                          /* ang is being filled by this layer */
    int direct;                            /* the cache is host memory: each row's shift added in place
                                            * (h_add holds one row), no upload and no separate add */
};

static uint64_t idx_hash(const int32_t *idx, int n)
{
    uint64_t h = 1469598103934665603ull;
    for (int k = 0; k < n; k++)
        h = (h ^ (uint32_t)idx[k]) * 1099511628211ull;
    return h;
}

static void angles_free(struct shift_angles *a)
{
    free(a->sel_cs), free(a->sel_sn), free(a->add_cs), free(a->add_sn);
    memset(a, 0, sizeof(*a));
}

void blend_shift_cache_free(struct blend_shift_cache *sc)
{
    for (int i = 0; i < BLEND_SHIFT_BASES; i++)
        angles_free(&sc->a[i]);
    if (sc->d_chunk_of)
        BE(sc->m)->free(CTX(sc->m), sc->d_chunk_of);
    sc->d_chunk_of = NULL;
}

/* The cached angles for this layer's base and rows, else a slot filled in
 * by this layer (*fill = 1), else NULL (out of memory: computed as without
 * a cache). */
static struct shift_angles *angles_for(struct blend_shift_cache *sc, float theta, int n_sel, int row_lo, int n_rows,
                                       int half, const int32_t *idx, int *fill)
{
    *fill = 0;
    if (!sc)
        return NULL;
    uint64_t h = idx_hash(idx, n_sel);
    struct shift_angles *free_slot = NULL;
    for (int i = 0; i < BLEND_SHIFT_BASES; i++) {
        struct shift_angles *a = &sc->a[i];
        if (a->sel_cs && a->theta == theta && a->n_sel == n_sel && a->row_lo == row_lo && a->n_rows == n_rows &&
            a->half == half && a->idx_hash == h)
            return a;
        if (!free_slot && !a->sel_cs)
            free_slot = a;
    }
    struct shift_angles *a = free_slot ? free_slot : &sc->a[0]; /* a third base, or other rows: replace */
    angles_free(a);
    size_t ns = (size_t)n_sel * half, na = (size_t)(n_rows - row_lo) * half;
    a->sel_cs = malloc(sizeof(double) * (ns ? ns : 1));
    a->sel_sn = malloc(sizeof(double) * (ns ? ns : 1));
    a->add_cs = malloc(sizeof(double) * (na ? na : 1));
    a->add_sn = malloc(sizeof(double) * (na ? na : 1));
    if (!a->sel_cs || !a->sel_sn || !a->add_cs || !a->add_sn) {
        angles_free(a);
        return NULL;
    }
    *a = (struct shift_angles){theta, n_sel, row_lo, n_rows, half, h, a->sel_cs, a->sel_sn, a->add_cs, a->add_sn};
    *fill = 1;
    return a;
}

/* a layer's cache geometry: its own (gemma4's local layers are narrower) */
struct layer_geom {
    int n_kv_head, head_dim, rope_dim, rope_style;
    size_t kv_dim;
    const float *rope_freqs;
};

static struct layer_geom geom_of(const struct kvfs_model *m, const struct kvfs_kv_cache *c, int l)
{
    const struct kvfs_layer_weights *L = &m->layers[l];
    struct layer_geom g = {L->n_kv_head, L->head_dim, L->rope_dim, m->hp.rope_style,
                           m->hp.mla_rank ? (size_t)c->kv_dim : (size_t)L->n_kv_head * L->head_dim, L->rope_freqs};
    return g;
}

/* rotate one row (every head) by pos * inv[j], with cos/sin given per pair;
 * a loop per RoPE style, each of which the compiler vectorizes (the same
 * operations on each pair, so the same values as pair by pair) */
__attribute__((optimize("O3"))) static void rotate_row(const struct layer_geom *g, float *x, const double *c,
                                                        const double *s)
{
    int half = g->rope_dim / 2;
    for (int h = 0; h < g->n_kv_head; h++) {
        float *v = x + (size_t)h * g->head_dim;
        if (g->rope_style == KVFS_ROPE_STYLE_NEOX) {
            float *a = v, *b = v + half;
            for (int j = 0; j < half; j++) {
                double x0 = a[j], x1 = b[j];
                a[j] = (float)(x0 * c[j] - x1 * s[j]);
                b[j] = (float)(x0 * s[j] + x1 * c[j]);
            }
        } else {
            for (int j = 0; j < half; j++) {
                double x0 = v[2 * j], x1 = v[2 * j + 1];
                v[2 * j] = (float)(x0 * c[j] - x1 * s[j]);
                v[2 * j + 1] = (float)(x0 * s[j] + x1 * c[j]);
            }
        }
    }
}

/* one of K (is_k) or V: the chunk means of fresh - cached over the
 * recomputed rows, added to the chunk's other rows in [row_lo, n_rows) */
static int shift_one(const struct kvfs_model *m, struct kvfs_kv_cache *c, int is_k, float *cache, const int32_t *chunk_of,
                     int n_chunks, int row_lo, int n_rows, const int32_t *idx, const int32_t *d_idx, int n_sel,
                     const float *fresh, float shift, const struct layer_geom *g, struct shift_bufs *s)
{
    const struct kvfs_backend_iface *be = BE(m);
    void *ctx = CTX(m);
    size_t kvd = g->kv_dim, n_add = (size_t)(n_rows - row_lo);
    int rc, half = g->rope_dim / 2;
    double cs[2048], sn[2048], cstep[2048], sstep[2048];
    if (half > 2048)
        return -EINVAL;
    if ((rc = be->gather_rows(ctx, cache, d_idx, s->d_sel, n_sel, (int)kvd)) ||
        (rc = be->download(ctx, s->h_old, s->d_sel, sizeof(float) * (size_t)n_sel * kvd)) ||
        (rc = be->download(ctx, s->h_sel, fresh, sizeof(float) * (size_t)n_sel * kvd)))
        return rc;
    memset(s->h_mean, 0, sizeof(float) * (size_t)n_chunks * kvd);
    memset(s->cnt, 0, sizeof(int) * (size_t)n_chunks);
    for (int k = 0; k < n_sel; k++) {
        float *d = s->h_sel + (size_t)k * kvd;
        const float *o = s->h_old + (size_t)k * kvd;
        for (size_t i = 0; i < kvd; i++)
            d[i] -= o[i];
        if (is_k) { /* into position 0's frame */
            const double *kc = cs, *ks = sn;
            if (s->ang && !s->ang_fill) {
                kc = s->ang->sel_cs + (size_t)k * half, ks = s->ang->sel_sn + (size_t)k * half;
            } else {
                double p = -(double)c->host_pos[idx[k]];
                for (int j = 0; j < half; j++)
                    cs[j] = cos(p * s->inv[j]), sn[j] = sin(p * s->inv[j]);
                if (s->ang) {
                    memcpy(s->ang->sel_cs + (size_t)k * half, cs, sizeof(double) * half);
                    memcpy(s->ang->sel_sn + (size_t)k * half, sn, sizeof(double) * half);
                }
            }
            rotate_row(g, d, kc, ks);
        }
        int ch = chunk_of[idx[k]];
        s->cnt[ch]++;
        for (size_t i = 0; i < kvd; i++)
            s->h_mean[(size_t)ch * kvd + i] += d[i];
    }
    for (int ch = 1; ch < n_chunks; ch++)
        for (size_t i = 0; i < kvd && s->cnt[ch]; i++)
            s->h_mean[(size_t)ch * kvd + i] *= shift / (float)s->cnt[ch];
    if (is_k)
        for (int j = 0; j < half; j++)
            cstep[j] = cos(s->inv[j]), sstep[j] = sin(s->inv[j]);
    int32_t prev_pos = INT32_MIN;
    for (size_t r = 0; r < n_add; r++) {
        int row = row_lo + (int)r, ch = chunk_of[row];
        float *dst = s->direct ? s->h_add : s->h_add + r * kvd;
        if (ch < 1 || !s->cnt[ch] || s->recomputed[row]) {
            /* direct: left as is, where zeros used to be added (a -0.0 then
             * became +0.0; a recomputed row is overwritten after the shift) */
            if (!s->direct)
                memset(dst, 0, sizeof(float) * kvd);
            continue;
        }
        memcpy(dst, s->h_mean + (size_t)ch * kvd, sizeof(float) * kvd);
        if (is_k && s->ang && !s->ang_fill) {
            rotate_row(g, dst, s->ang->add_cs + r * half, s->ang->add_sn + r * half);
        } else if (is_k) {
            int32_t p = c->host_pos[row];
            if (p == prev_pos + 1) /* the next position: one step of each pair's angle */
                for (int j = 0; j < half; j++) {
                    double c0 = cs[j], s0 = sn[j];
                    cs[j] = c0 * cstep[j] - s0 * sstep[j];
                    sn[j] = s0 * cstep[j] + c0 * sstep[j];
                }
            else
                for (int j = 0; j < half; j++)
                    cs[j] = cos((double)p * s->inv[j]), sn[j] = sin((double)p * s->inv[j]);
            prev_pos = p;
            rotate_row(g, dst, cs, sn);
            if (s->ang) {
                memcpy(s->ang->add_cs + r * half, cs, sizeof(double) * half);
                memcpy(s->ang->add_sn + r * half, sn, sizeof(double) * half);
            }
        }
        float *at = cache + (size_t)row * kvd;
        if (s->direct && (rc = be->add(ctx, at, dst, at, kvd))) /* dst: host memory, which the backend's is */
            return rc;
    }
    if (s->direct)
        return 0;
    if ((rc = be->upload(ctx, s->d_add, s->h_add, sizeof(float) * n_add * kvd)))
        return rc;
    return be->add(ctx, cache + (size_t)row_lo * kvd, s->d_add, cache + (size_t)row_lo * kvd, n_add * kvd);
}

/* The backend's own chunk_shift (a GPU's: nothing crosses the bus), with
 * chunk_of uploaded once per blend into the cache (or for this call);
 * -ENOTSUP where it has none or not for this shape. */
static int shift_on_backend(const struct kvfs_model *m, struct kvfs_kv_cache *c, int l, const int32_t *chunk_of,
                            int n_chunks, int row_lo, int n_rows, const int32_t *d_idx, int n_sel, const float *fresh_k,
                            const float *fresh_v, float shift, struct blend_shift_cache *sc)
{
    const struct kvfs_backend_iface *be = BE(m);
    const struct layer_geom g = geom_of(m, c, l);
    void *ctx = CTX(m);
    if (!be->chunk_shift || be->host_memory)
        return -ENOTSUP;
    uint64_t h = idx_hash(chunk_of, n_rows);
    int32_t *d_chunk_of = sc && sc->d_chunk_of && sc->d_rows == n_rows && sc->d_hash == h ? sc->d_chunk_of : NULL;
    int rc = 0;
    if (!d_chunk_of) {
        if ((rc = be->alloc(ctx, sizeof(int32_t) * (size_t)n_rows, (void **)&d_chunk_of)) ||
            (rc = be->upload(ctx, d_chunk_of, chunk_of, sizeof(int32_t) * (size_t)n_rows))) {
            if (d_chunk_of)
                be->free(ctx, d_chunk_of);
            return rc;
        }
        if (sc) {
            if (sc->d_chunk_of)
                be->free(ctx, sc->d_chunk_of);
            sc->m = m, sc->d_chunk_of = d_chunk_of, sc->d_rows = n_rows, sc->d_hash = h;
        }
    }
    struct kvfs_rope_args rope = {g.rope_dim, g.rope_style, m->layers[l].rope_theta, g.rope_freqs};
    int kvd = (int)g.kv_dim;
    if (!(rc = be->chunk_shift(ctx, c->k[l], fresh_k, d_idx, n_sel, d_chunk_of, c->pos, n_chunks, row_lo, n_rows, kvd,
                               g.head_dim, shift, m->layers[l].no_rope ? NULL : &rope)))
        rc = be->chunk_shift(ctx, c->v[l], fresh_v, d_idx, n_sel, d_chunk_of, c->pos, n_chunks, row_lo, n_rows, kvd,
                             g.head_dim, shift, NULL);
    if (!sc || sc->d_chunk_of != d_chunk_of)
        be->free(ctx, d_chunk_of);
    return rc;
}

int blend_shift_layer(const struct kvfs_model *m, struct kvfs_kv_cache *c, int l, const int32_t *chunk_of,
                      int n_chunks, int row_lo, int n_rows, const int32_t *idx, const int32_t *d_idx, int n_sel,
                      const float *fresh_k, const float *fresh_v, float shift, struct blend_shift_cache *cache)
{
    /* a layer reading an earlier layer's cache (gemma4) was shifted there */
    if (shift == 0.0f || n_sel <= 0 || n_chunks < 2 || m->layers[l].kv_layer != l)
        return 0;
    while (row_lo < n_rows && chunk_of[row_lo] < 1) /* the first chunk never moves */
        row_lo++;
    if (row_lo >= n_rows)
        return 0;
    int rc = shift_on_backend(m, c, l, chunk_of, n_chunks, row_lo, n_rows, d_idx, n_sel, fresh_k, fresh_v, shift, cache);
    if (rc != -ENOTSUP)
        return rc;
    const struct kvfs_backend_iface *be = BE(m);
    const struct layer_geom g = geom_of(m, c, l);
    void *ctx = CTX(m);
    size_t kvd = g.kv_dim, n_add = (size_t)(n_rows - row_lo);
    int half = g.rope_dim / 2;
    struct shift_bufs s = {0};
    s.h_sel = malloc(sizeof(float) * (size_t)n_sel * kvd);
    s.h_old = malloc(sizeof(float) * (size_t)n_sel * kvd);
    s.h_mean = malloc(sizeof(float) * (size_t)n_chunks * kvd);
    s.direct = be->host_memory;
    s.h_add = malloc(sizeof(float) * (s.direct ? 1 : n_add) * kvd);
    s.inv = malloc(sizeof(double) * (size_t)(half > 0 ? half : 1));
    s.cnt = malloc(sizeof(int) * (size_t)n_chunks);
    s.recomputed = calloc((size_t)n_rows, 1);
    rc = s.h_sel && s.h_old && s.h_mean && s.h_add && s.inv && s.cnt && s.recomputed ? 0 : -ENOMEM;
    for (int k = 0; !rc && k < n_sel; k++)
        s.recomputed[idx[k]] = 1;
    for (int j = 0; !rc && j < half; j++) /* as the backends' RoPE: theta^(-2j / rope_dim) */
        s.inv[j] = (double)powf(m->layers[l].rope_theta, -2.0f * (float)j / (float)g.rope_dim) /
                   (g.rope_freqs ? (double)g.rope_freqs[j] : 1.0);
    /* a layer without RoPE rotates nothing: no angles to keep; angles are
     * kept by base and width, so not where layers' frequency factors differ
     * (gemma4's global layers have them, its local ones not) */
    if (!rc && !m->layers[l].no_rope && g.rope_freqs == m->rope_freqs)
        s.ang = angles_for(cache, m->layers[l].rope_theta, n_sel, row_lo, n_rows, half, idx, &s.ang_fill);
    if (rc || (rc = be->alloc(ctx, sizeof(float) * (size_t)n_sel * kvd, (void **)&s.d_sel)) ||
        (!s.direct && (rc = be->alloc(ctx, sizeof(float) * n_add * kvd, (void **)&s.d_add))) ||
        (rc = shift_one(m, c, !m->layers[l].no_rope, c->k[l], chunk_of, n_chunks, row_lo, n_rows, idx, d_idx, n_sel,
                        fresh_k, shift, &g, &s)))
        goto out;
    rc = shift_one(m, c, 0, c->v[l], chunk_of, n_chunks, row_lo, n_rows, idx, d_idx, n_sel, fresh_v, shift, &g, &s);
out:
    free(s.h_sel), free(s.h_old), free(s.h_mean), free(s.h_add), free(s.inv), free(s.cnt), free(s.recomputed);
    if (s.d_sel)
        be->free(ctx, s.d_sel);
    if (s.d_add)
        be->free(ctx, s.d_add);
    return rc;
}
