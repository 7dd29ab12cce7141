/* shift.c - the chunk shift: a later chunk's reused rows follow its
 * recomputed ones (kvfs(8), "The chunk shift"; BENCHMARKS.md).
 *
 * A chunk prefilled alone lacks the earlier chunks' context, and much of
 * what that changes in its K/V is common to its rows.  The rows a blend
 * recomputes at layer l show it: fresh minus cached.  Every other row of
 * the same chunk moves by `shift` times their mean (shift < 1: the
 * recomputed rows are the most attended ones, whose deviation is larger
 * than the rest's).  Keys are averaged in RoPE's frame of position 0 and
 * rotated back to each row's position.  The first chunk is exact and the
 * query is recomputed: neither moves. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "blend_internal.h"

#define BE(m) ((m)->be.iface)
#define CTX(m) ((m)->be.ctx)

struct shift_bufs {
    float *h_sel, *h_mean, *h_add;  /* host: [n_sel][kvd], [n_chunks][kvd], [n_rows - row_lo][kvd] */
    int32_t *h_pos;                 /* host: -positions of the recomputed rows */
    int *cnt;
    uint8_t *recomputed;            /* host: [n_rows] */
    float *d_sel, *d_add;           /* device, the same shapes as h_sel, h_add */
    int32_t *d_pos;
};

static void bufs_free(const struct kvfs_model *m, struct shift_bufs *s)
{
    free(s->h_sel), free(s->h_mean), free(s->h_add), free(s->h_pos), free(s->cnt), free(s->recomputed);
    void *dev[] = {s->d_sel, s->d_add, s->d_pos};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++)
        if (dev[i])
            BE(m)->free(CTX(m), dev[i]);
}

/* one of K (is_k) or V: the chunk means of fresh - cached over the
 * recomputed rows, added to the chunk's other rows */
static int shift_one(const struct kvfs_model *m, struct kvfs_kv_cache *c, int l, int is_k, const int32_t *chunk_of,
                     int n_chunks, int row_lo, int n_rows, const int32_t *idx, const int32_t *d_idx, int n_sel,
                     const float *fresh, float shift, struct shift_bufs *s)
{
    const struct kvfs_backend_iface *be = BE(m);
    const struct kvfs_hparams *hp = &m->hp;
    void *ctx = CTX(m);
    size_t kvd = (size_t)c->kv_dim, n_add = (size_t)(n_rows - row_lo);
    float *cache = is_k ? c->k[l] : c->v[l];
    int rc;
    if ((rc = be->gather_rows(ctx, cache, d_idx, s->d_sel, n_sel, (int)kvd)) ||
        (rc = be->download(ctx, s->h_add, s->d_sel, sizeof(float) * (size_t)n_sel * kvd)) ||
        (rc = be->download(ctx, s->h_sel, fresh, sizeof(float) * (size_t)n_sel * kvd)))
        return rc;
    for (size_t i = 0; i < (size_t)n_sel * kvd; i++)
        s->h_sel[i] -= s->h_add[i];
    if (is_k && ((rc = be->upload(ctx, s->d_sel, s->h_sel, sizeof(float) * (size_t)n_sel * kvd)) ||
                 (rc = be->rope(ctx, s->d_sel, s->d_pos, n_sel, hp->n_kv_head, hp->head_dim, hp->rope_dim,
                                m->layers[l].rope_theta, hp->rope_style)) ||
                 (rc = be->download(ctx, s->h_sel, s->d_sel, sizeof(float) * (size_t)n_sel * kvd))))
        return rc;
    memset(s->h_mean, 0, sizeof(float) * (size_t)n_chunks * kvd);
    memset(s->cnt, 0, sizeof(int) * (size_t)n_chunks);
    for (int k = 0; k < n_sel; k++) {
        int ch = chunk_of[idx[k]];
        s->cnt[ch]++;
        for (size_t d = 0; d < kvd; d++)
            s->h_mean[(size_t)ch * kvd + d] += s->h_sel[(size_t)k * kvd + d];
    }
    for (int ch = 1; ch < n_chunks; ch++)
        for (size_t d = 0; d < kvd && s->cnt[ch]; d++)
            s->h_mean[(size_t)ch * kvd + d] *= shift / (float)s->cnt[ch];
    for (size_t r = 0; r < n_add; r++) {
        int row = row_lo + (int)r, ch = chunk_of[row];
        float *dst = s->h_add + r * kvd;
        if (ch >= 1 && s->cnt[ch] && !s->recomputed[row])
            memcpy(dst, s->h_mean + (size_t)ch * kvd, sizeof(float) * kvd);
        else
            memset(dst, 0, sizeof(float) * kvd);
    }
    if ((rc = be->upload(ctx, s->d_add, s->h_add, sizeof(float) * n_add * kvd)))
        return rc;
    if (is_k && (rc = be->rope(ctx, s->d_add, c->pos + row_lo, (int)n_add, hp->n_kv_head, hp->head_dim, hp->rope_dim,
                               m->layers[l].rope_theta, hp->rope_style)))
        return rc;
    return be->add(ctx, cache + (size_t)row_lo * kvd, s->d_add, cache + (size_t)row_lo * kvd, n_add * kvd);
}

int blend_shift_layer(const struct kvfs_model *m, struct kvfs_kv_cache *c, int l, const int32_t *chunk_of,
                      int n_chunks, int row_lo, int n_rows, const int32_t *idx, const int32_t *d_idx, int n_sel,
                      const float *fresh_k, const float *fresh_v, float shift)
{
    if (shift == 0.0f || n_sel <= 0 || n_chunks < 2 || row_lo >= n_rows)
        return 0;
    const struct kvfs_backend_iface *be = BE(m);
    void *ctx = CTX(m);
    size_t kvd = (size_t)c->kv_dim, n_add = (size_t)(n_rows - row_lo);
    struct shift_bufs s = {0};
    s.h_sel = malloc(sizeof(float) * (size_t)n_sel * kvd);
    s.h_mean = malloc(sizeof(float) * (size_t)n_chunks * kvd);
    s.h_add = malloc(sizeof(float) * (n_add > (size_t)n_sel ? n_add : (size_t)n_sel) * kvd);
    s.h_pos = malloc(sizeof(int32_t) * (size_t)n_sel);
    s.cnt = malloc(sizeof(int) * (size_t)n_chunks);
    s.recomputed = calloc((size_t)n_rows, 1);
    int rc = s.h_sel && s.h_mean && s.h_add && s.h_pos && s.cnt && s.recomputed ? 0 : -ENOMEM;
    for (int k = 0; !rc && k < n_sel; k++) {
        s.recomputed[idx[k]] = 1;
        s.h_pos[k] = -c->host_pos[idx[k]];
    }
    if (rc || (rc = be->alloc(ctx, sizeof(float) * (size_t)n_sel * kvd, (void **)&s.d_sel)) ||
        (rc = be->alloc(ctx, sizeof(float) * n_add * kvd, (void **)&s.d_add)) ||
        (rc = be->alloc(ctx, sizeof(int32_t) * (size_t)n_sel, (void **)&s.d_pos)) ||
        (rc = be->upload(ctx, s.d_pos, s.h_pos, sizeof(int32_t) * (size_t)n_sel)) ||
        (rc = shift_one(m, c, l, 1, chunk_of, n_chunks, row_lo, n_rows, idx, d_idx, n_sel, fresh_k, shift, &s)))
        goto out;
    rc = shift_one(m, c, l, 0, chunk_of, n_chunks, row_lo, n_rows, idx, d_idx, n_sel, fresh_v, shift, &s);
out:
    bufs_free(m, &s);
    return rc;
}
