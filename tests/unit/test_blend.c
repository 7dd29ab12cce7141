/* test_blend.c - blending on a synthetic model: ratio 1 equals a full
 * prefill, ratio 0 equals plain reuse of re-positioned caches, quality
 * improves between them, and the shapes issue 4 lists (one chunk, the same
 * chunk twice, reordered chunks, many chunks) work; bad input is refused;
 * sliding-window layers (gemma3) blend exactly at ratio 1 too, and vote in
 * the query selection through their window; so do gemma4's layers of their
 * own shapes, shared-KV layers and per-layer embeddings, alone and in
 * batches. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "blend.h"
#include "blend_internal.h"
#include "check.h"
#include "experiment.h"
#include "loader.h"
#include "synth_model.h"

static struct kvfs_model *m;

static int make_chunk_dtype(const int32_t *toks, int n, uint32_t dtype, struct kvfs_writer *w)
{
    struct kvfs_kv_cache c;
    int rc = kvfs_kv_cache_init(m, n, &c);
    if (!rc)
        rc = kvfs_forward(m, &c, toks, n, 0, NULL);
    if (!rc)
        rc = kvfs_kv_cache_to_chunk(m, &c, 0, n, toks, dtype, w);
    kvfs_kv_cache_free(m, &c);
    return rc;
}

static int make_chunk(const int32_t *toks, int n, struct kvfs_writer *w)
{
    return make_chunk_dtype(toks, n, KVFS_DTYPE_F16, w);
}

/* The test prompt: NC chunks of LEN tokens ((i * a + j * b + c) % 256 for
 * token j of chunk i), each prefilled alone into w[i] / ch[i], and all[] =
 * the chunks then the NS suffix tokens */
enum { NC = 3, LEN = 24, NS = 5 };
static void make_prompt(int a, int b, int c, int32_t toks[NC][LEN], int32_t *all, const int32_t *suffix,
                        struct kvfs_writer *w, struct kvfs_blend_chunk *ch)
{
    for (int i = 0; i < NC; i++) {
        for (int j = 0; j < LEN; j++)
            toks[i][j] = all[i * LEN + j] = (int32_t)((i * a + j * b + c) % 256);
        CHECK_EQ(make_chunk(toks[i], LEN, &w[i]), 0);
        ch[i] = (struct kvfs_blend_chunk){w[i].buf, w[i].size};
    }
    memcpy(all + NC * LEN, suffix, sizeof(int32_t) * NS);
}

/* kvfs_blend_batch's member results, kept for comparison */
struct batch_out {
    int n;
    float *k[4], *v[4]; /* the last layer's K/V that owns a cache, host copies */
    int rows[4];
};

/* the last layer with a cache of its own (gemma4's last layers read
 * earlier ones') and its row width */
static int last_own_layer(size_t *width)
{
    int l = m->hp.n_layer - 1;
    while (m->layers[l].kv_layer != l)
        l--;
    *width = (size_t)m->layers[l].n_kv_head * m->layers[l].head_dim;
    return l;
}

static int keep_member(void *ctx, int i, const struct kvfs_kv_cache *c, const int32_t *tokens,
                       const struct kvfs_blend_stats *st)
{
    (void)tokens, (void)st;
    struct batch_out *b = ctx;
    size_t width;
    int l = last_own_layer(&width);
    size_t n = (size_t)c->n * width;
    b->k[i] = malloc(sizeof(float) * n);
    b->v[i] = malloc(sizeof(float) * n);
    memcpy(b->k[i], c->k[l], sizeof(float) * n);
    memcpy(b->v[i], c->v[l], sizeof(float) * n);
    b->rows[i] = c->n;
    b->n++;
    return 0;
}

/* max |a - b| over the last owning layer's K and V of a member and a blend, in
 * f16 ulps of the largest value (K/V are rounded to f16 as llama.cpp's
 * cache is, so a different row grouping in a matmul can move a value by one
 * ulp) */
static float max_diff(const struct batch_out *b, int i, const struct kvfs_kv_cache *c)
{
    float d = 0, big = 0;
    size_t width;
    int l = last_own_layer(&width);
    for (size_t j = 0; j < (size_t)b->rows[i] * width; j++) {
        d = fmaxf(d, fmaxf(fabsf(b->k[i][j] - c->k[l][j]), fabsf(b->v[i][j] - c->v[l][j])));
        big = fmaxf(big, fmaxf(fabsf(c->k[l][j]), fabsf(c->v[l][j])));
    }
    return d / (big * (1.0f / 1024.0f));
}

/* batches: one member alone picks and recomputes exactly what its own
 * blend does; with every row picked (0.999) each member is a full
 * prefill; two members sharing chunk 0 recompute as many rows as their
 * own blends, the shared chunk's chosen by both queries, so each is
 * nearer its own blend's rows than plain reuse is */
static void check_batches(const char *what, const struct kvfs_writer *w, const struct kvfs_blend_chunk *ch,
                          const int32_t *suffix)
{
    char err[256];
    struct kvfs_kv_cache bc;
    int32_t *bt;
    struct kvfs_blend_stats st;
    float *out = malloc(sizeof(float) * (size_t)m->hp.n_vocab);
    const void *imgs[NC];
    size_t lens[NC];
    for (int i = 0; i < NC; i++)
        imgs[i] = w[i].buf, lens[i] = w[i].size;
    int map_a[3] = {0, 1, 2}, map_b[2] = {0, 2};
    struct kvfs_blend_member mb[2] = {{map_a, 3, suffix, NS}, {map_b, 2, suffix, NS}};
    struct kvfs_blend_chunk chb[2] = {ch[0], ch[2]};
    for (int variant = 0; variant < 3; variant++) {
        struct kvfs_loader *ld;
        struct kvfs_blend_opts bo;
        struct batch_out b = {0};
        kvfs_blend_opts_init(&bo, variant == 1 ? 0.999f : 0.3f);
        int n_mb = variant == 0 ? 1 : 2;
        CHECK_EQ(kvfs_loader_open_images(imgs, lens, NC, &ld, err, sizeof(err)), 0);
        CHECK_EQ(kvfs_blend_batch(m, ld, mb, n_mb, 1, &bo, keep_member, &b, err, sizeof(err)), 0);
        kvfs_loader_close(ld);
        CHECK_EQ(b.n, n_mb);
        for (int i = 0; i < b.n; i++) {
            CHECK_EQ(kvfs_blend_ex(m, i ? chb : ch, i ? 2 : NC, suffix, NS, &bo, &bc, &bt, out, &st, err,
                                   sizeof(err)), 0);
            float d = max_diff(&b, i, &bc);
            fprintf(stderr, "%s batch variant %d member %d: max |dK|,|dV| vs its own blend %.3g f16 ulps\n", what,
                    variant, i, d);
            if (variant != 2)
                CHECK(d <= 4.0f);
            kvfs_kv_cache_free(m, &bc), free(bt);
            if (variant == 2) { /* as many rows recomputed as its own blend: nearer it than reuse */
                struct kvfs_blend_opts ro;
                kvfs_blend_opts_init(&ro, 0.0f);
                CHECK_EQ(kvfs_blend_ex(m, i ? chb : ch, i ? 2 : NC, suffix, NS, &ro, &bc, &bt, out, &st, err,
                                       sizeof(err)), 0);
                float dr = max_diff(&b, i, &bc);
                CHECK(dr > d);
                kvfs_kv_cache_free(m, &bc), free(bt);
            }
            free(b.k[i]), free(b.v[i]);
        }
    }
    /* refusals: no shared prefix, members that do not share it */
    struct kvfs_loader *ld;
    struct kvfs_blend_opts bo;
    struct batch_out b = {0};
    int map_c[2] = {1, 2};
    struct kvfs_blend_member bad_mb[2] = {{map_a, 3, suffix, NS}, {map_c, 2, suffix, NS}};
    kvfs_blend_opts_init(&bo, 0.3f);
    CHECK_EQ(kvfs_loader_open_images(imgs, lens, NC, &ld, err, sizeof(err)), 0);
    CHECK_EQ(kvfs_blend_batch(m, ld, bad_mb, 2, 1, &bo, keep_member, &b, err, sizeof(err)), -EINVAL);
    CHECK_EQ(kvfs_blend_batch(m, ld, mb, 2, 0, &bo, keep_member, &b, err, sizeof(err)), -EINVAL);
    kvfs_loader_close(ld);
    CHECK_EQ(b.n, 0);
    free(out);
}

/* Sliding-window layers (a synthetic gemma3: window 4, layers 0, 1 and 3
 * local with RoPE base 10000, layer 2 global with 1e6; chunks of 24 tokens,
 * so every seam is crossed by windows).  Each layer's keys are re-positioned
 * with its own base and the recomputed rows attend through their window at
 * their place in the prompt: every selection at ratio 1 is the full
 * prefill (logits and every layer's K/V), and at 0.3 beats plain reuse;
 * the local layers' votes choose the rows in the suffix's window. */
/* the largest |dK|, |dV| between two caches over their first rows rows, in
 * each layer that owns a cache, at that layer's own width */
static float kv_max_diff(const struct kvfs_kv_cache *a, const struct kvfs_kv_cache *b, size_t rows)
{
    float d = 0;
    for (int l = 0; l < m->hp.n_layer; l++) {
        if (m->layers[l].kv_layer != l)
            continue;
        size_t n = rows * (size_t)m->layers[l].n_kv_head * m->layers[l].head_dim;
        for (size_t i = 0; i < n; i++)
            d = fmaxf(d, fmaxf(fabsf(a->k[l][i] - b->k[l][i]), fabsf(a->v[l][i] - b->v[l][i])));
    }
    return d;
}

/* sum of |dK|^2 + |dV|^2 of layer L over the first rows rows */
static double kv_sq_dev(const struct kvfs_kv_cache *a, const struct kvfs_kv_cache *b, int L, size_t rows)
{
    double dev = 0;
    size_t n = rows * (size_t)m->layers[L].n_kv_head * m->layers[L].head_dim;
    for (size_t i = 0; i < n; i++)
        dev += (double)(a->k[L][i] - b->k[L][i]) * (a->k[L][i] - b->k[L][i]) +
               (double)(a->v[L][i] - b->v[L][i]) * (a->v[L][i] - b->v[L][i]);
    return dev;
}

static void check_sliding_window(void)
{
    char path[64], err[256];
    struct kvfs_model *saved = m;
    snprintf(path, sizeof(path), "/tmp/kvfs-blend-gemma.%d.gguf", (int)getpid());
    struct kvfs_synth_model_opts o = {"gemma3", 4, 64, 4, 2, 128, 1e6f, 9, 0, 0, 0, 0, NULL, 0.0f, 0, 0};
    CHECK_EQ(kvfs_synth_model_write(path, &o), 0);
    CHECK_EQ(kvfs_model_load(path, "cpu", 2, &m, err, sizeof(err)), 0);
    unlink(path);
    CHECK(m->layers[0].window == 4 && m->layers[2].window == 0 && m->layers[3].window == 4);
    CHECK_EQ(kvfs_blend_selftest(m), 0);
    int V = m->hp.n_vocab;
    int32_t toks[NC][LEN], suffix[NS] = {65, 66, 67, 68, 69}, all[NC * LEN + NS];
    struct kvfs_writer w[NC];
    struct kvfs_blend_chunk ch[NC];
    make_prompt(53, 29, 3, toks, all, suffix, w, ch);
    float *full = malloc(sizeof(float) * V), *out = malloc(sizeof(float) * V);
    struct kvfs_kv_cache fc, bc;
    int32_t *bt;
    struct kvfs_blend_stats st;
    CHECK_EQ(kvfs_kv_cache_init(m, NC * LEN + NS, &fc), 0);
    CHECK_EQ(kvfs_forward(m, &fc, all, NC * LEN + NS, 0, full), 0);
    for (int variant = 0; variant < 3; variant++) {
        struct kvfs_blend_opts bo;
        kvfs_blend_opts_init(&bo, variant == 2 ? 0.999f : 1.0f);
        bo.select = variant == 0 ? KVFS_BLEND_SELECT_FIXED
                    : variant == 1 ? KVFS_BLEND_SELECT_GRADUAL : KVFS_BLEND_SELECT_QUERY;
        /* every row (the query selection: every later chunk's; the first is exact) */
        CHECK_EQ(kvfs_blend_ex(m, ch, NC, suffix, NS, &bo, &bc, &bt, out, &st, err, sizeof(err)), 0);
        CHECK_EQ(st.n_selected, variant == 2 ? (NC - 1) * LEN : NC * LEN);
        float dl = 0, dkv = 0;
        for (int i = 0; i < V; i++)
            dl = fmaxf(dl, fabsf(full[i] - out[i]));
        dkv = kv_max_diff(&fc, &bc, (size_t)fc.n);
        fprintf(stderr, "gemma3 %s, every row: max |dlogit| %.3g, max |dK|,|dV| %.3g\n",
                kvfs_blend_select_name(bo.select), dl, dkv);
        CHECK(dl < 1e-2f);
        CHECK(dkv < 1e-2f);
        kvfs_kv_cache_free(m, &bc), free(bt);
    }
    /* plain reuse at layer 1 (after local layer 0): a later chunk's row
     * whose window (itself and the 3 before) lies inside its chunk holds
     * exactly the full prefill's K/V once re-positioned; rows whose window
     * crosses the seam do not (what a blend must recompute) */
    CHECK_EQ(kvfs_blend(m, ch, NC, suffix, NS, 0.0f, &bc, &bt, out, &st, err, sizeof(err)), 0);
    float inside = 0, seam = 0;
    for (int r = LEN; r < NC * LEN; r++)
        for (int i = 0; i < fc.kv_dim; i++) {
            size_t at = (size_t)r * fc.kv_dim + i;
            float d = fmaxf(fabsf(fc.k[1][at] - bc.k[1][at]), fabsf(fc.v[1][at] - bc.v[1][at]));
            if (r % LEN >= 3)
                inside = fmaxf(inside, d);
            else
                seam = fmaxf(seam, d);
        }
    fprintf(stderr, "gemma3 reuse, layer 1: max |dK|,|dV| %.3g inside a window, %.3g across a seam\n", inside, seam);
    CHECK(inside < 1e-2f); /* f16 rounding of the re-rotated keys */
    CHECK(seam > 0.1f);
    kvfs_kv_cache_free(m, &bc), free(bt);
    /* the last layer's K/V over the chunk rows: 0.3 nearer the full
     * prefill than reuse (the suffix's logits hardly see the chunks in
     * this tiny model, so its K/V are compared, not its KL) */
    double dev[2];
    float ratios[2] = {0.0f, 0.3f};
    for (int r = 0; r < 2; r++) {
        CHECK_EQ(kvfs_blend(m, ch, NC, suffix, NS, ratios[r], &bc, &bt, out, &st, err, sizeof(err)), 0);
        dev[r] = kv_sq_dev(&fc, &bc, m->hp.n_layer - 1, (size_t)NC * LEN);
        fprintf(stderr, "gemma3 ratio %.2f: %d selected, last layer sum |dK|^2+|dV|^2 %.4g\n", (double)ratios[r],
                st.n_selected, dev[r]);
        kvfs_kv_cache_free(m, &bc), free(bt);
    }
    CHECK(dev[0] > 1e-2);
    CHECK(dev[1] < 0.7 * dev[0]);
    /* local layers vote by default, through their window: the suffix sees
     * only the last chunk's last W - 1 rows there, and with those votes they
     * are recomputed; the global layers alone choose another set.  A row is
     * recomputed where its last-layer K differs from plain reuse's (the
     * chunk shift off, so reused rows are reuse's bit for bit). */
    {
        struct kvfs_blend_opts vo;
        struct kvfs_blend_experiment vx;
        kvfs_blend_opts_init(&vo, 0.3f);
        kvfs_blend_experiment_init(&vx);
        CHECK_EQ(vx.vote_local, 1);
        vo.shift = 0.0f;
        struct kvfs_kv_cache rc0, sel[2];
        int32_t *t0 = NULL, *ts[2] = {NULL, NULL};
        struct kvfs_blend_opts ro;
        kvfs_blend_opts_init(&ro, 0.0f); /* plain reuse */
        ro.shift = 0.0f;
        CHECK_EQ(kvfs_blend_ex(m, ch, NC, suffix, NS, &ro, &rc0, &t0, out, &st, err, sizeof(err)), 0);
        int L = m->hp.n_layer - 1, kvd = rc0.kv_dim, differ = 0, window_rows = 0;
        for (int v = 0; v < 2; v++) {
            vx.vote_local = !v;
            CHECK_EQ(kvfs_blend_eval(m, ch, NC, suffix, NS, &vo, &vx, &sel[v], &ts[v], out, &st, err, sizeof(err)), 0);
        }
        for (int r = LEN; r < NC * LEN; r++) {
            int re[2];
            for (int v = 0; v < 2; v++)
                re[v] = memcmp(sel[v].k[L] + (size_t)r * kvd, rc0.k[L] + (size_t)r * kvd, sizeof(float) * kvd) != 0;
            differ += re[0] != re[1];
            if (r >= NC * LEN - 3)
                window_rows += re[0];
        }
        fprintf(stderr, "gemma3 local votes: %d of the last 3 chunk rows recomputed, %d rows chosen differently "
                        "without them\n", window_rows, differ);
        CHECK_EQ(window_rows, 3);
        CHECK(differ > 0);
        kvfs_kv_cache_free(m, &rc0), free(t0);
        for (int v = 0; v < 2; v++)
            kvfs_kv_cache_free(m, &sel[v]), free(ts[v]);
    }
    kvfs_kv_cache_free(m, &fc);
    for (int i = 0; i < NC; i++)
        kvfs_writer_free(&w[i]);
    free(full);
    free(out);
    kvfs_model_free(m);
    m = saved;
}

/* gemma4 (synthetic, 6 layers: local layers of 2 KV heads x 16 rotated on
 * 16 dims with base 10000, global ones of 1 x 32 with frequency factors and
 * base 1e6, window 8; layers 4 and 5 reading layers 2 and 3's caches;
 * per-layer embeddings).  Every selection at ratio 1 is the full prefill:
 * logits and each owning layer's K/V at its own width (so the shift
 * re-positions each layer with its own dims, base and factors, the
 * recomputed rows get their per-layer inputs, and the shared-KV layers
 * attend over their source's cache); at 0.3 the last owning layer's K/V are
 * nearer the full prefill than plain reuse's; and batches (check_batches)
 * are their members' own blends as for the other models. */
static void check_gemma4(void)
{
    char path[64], err[256];
    struct kvfs_model *saved = m;
    snprintf(path, sizeof(path), "/tmp/kvfs-blend-gemma4.%d.gguf", (int)getpid());
    struct kvfs_synth_model_opts o = {"gemma4", 6, 64, 4, 2, 128, 1e6f, 42, 0, 0, 0, 0, NULL, 0.0f, 0, 0};
    CHECK_EQ(kvfs_synth_model_write(path, &o), 0);
    CHECK_EQ(kvfs_model_load(path, "cpu", 2, &m, err, sizeof(err)), 0);
    unlink(path);
    CHECK(m->hp.n_ple > 0 && m->layers[4].kv_layer == 2 && m->layers[0].head_dim != m->layers[1].head_dim);
    CHECK_EQ(kvfs_blend_selftest(m), 0);
    int V = m->hp.n_vocab;
    int32_t toks[NC][LEN], suffix[NS] = {65, 66, 67, 68, 69}, all[NC * LEN + NS];
    struct kvfs_writer w[NC];
    struct kvfs_blend_chunk ch[NC];
    make_prompt(53, 29, 3, toks, all, suffix, w, ch);
    float *full = malloc(sizeof(float) * V), *out = malloc(sizeof(float) * V);
    struct kvfs_kv_cache fc, bc;
    int32_t *bt;
    struct kvfs_blend_stats st;
    CHECK_EQ(kvfs_kv_cache_init(m, NC * LEN + NS, &fc), 0);
    CHECK_EQ(kvfs_forward(m, &fc, all, NC * LEN + NS, 0, full), 0);
    for (int variant = 0; variant < 3; variant++) {
        struct kvfs_blend_opts bo;
        kvfs_blend_opts_init(&bo, variant == 2 ? 0.999f : 1.0f);
        bo.select = variant == 0 ? KVFS_BLEND_SELECT_FIXED
                    : variant == 1 ? KVFS_BLEND_SELECT_GRADUAL : KVFS_BLEND_SELECT_QUERY;
        CHECK_EQ(kvfs_blend_ex(m, ch, NC, suffix, NS, &bo, &bc, &bt, out, &st, err, sizeof(err)), 0);
        float dl = 0, dkv = 0;
        for (int i = 0; i < V; i++)
            dl = fmaxf(dl, fabsf(full[i] - out[i]));
        dkv = kv_max_diff(&fc, &bc, (size_t)fc.n);
        fprintf(stderr, "gemma4 %s, every row: max |dlogit| %.3g, max |dK|,|dV| %.3g\n",
                kvfs_blend_select_name(bo.select), dl, dkv);
        CHECK(dl < 1e-2f);
        CHECK(dkv < 1e-2f);
        kvfs_kv_cache_free(m, &bc), free(bt);
    }
    double dev[2];
    float ratios[2] = {0.0f, 0.3f};
    for (int r = 0; r < 2; r++) {
        CHECK_EQ(kvfs_blend(m, ch, NC, suffix, NS, ratios[r], &bc, &bt, out, &st, err, sizeof(err)), 0);
        dev[r] = kv_sq_dev(&fc, &bc, 3, (size_t)NC * LEN); /* 3: the last layer with a cache of its own */
        fprintf(stderr, "gemma4 ratio %.2f: %d selected, layer 3 sum |dK|^2+|dV|^2 %.4g\n", (double)ratios[r],
                st.n_selected, dev[r]);
        kvfs_kv_cache_free(m, &bc), free(bt);
    }
    CHECK(dev[0] > 1e-2);
    CHECK(dev[1] < 0.7 * dev[0]);
    check_batches("gemma4", w, ch, suffix); /* each layer at its width, the recomputed rows' per-layer inputs */
    kvfs_kv_cache_free(m, &fc);
    for (int i = 0; i < NC; i++)
        kvfs_writer_free(&w[i]);
    free(full);
    free(out);
    kvfs_model_free(m);
    m = saved;
}

/* The chunk shift keeps each row's RoPE angles from layer to layer (one
 * set per base): a run of layers through the cache moves every row bit for
 * bit as a run that computes them at each layer, keys and values, with
 * selections that change in between (the cache then starts again).  And
 * the CPU backend's in-place adds (host_memory) move every row bit for bit
 * as the path of a device backend (a buffer of every row, uploaded, added). */
static void check_shift_angle_cache(void)
{
    enum { ROWS = 300, CHUNKS = 3, NSEL = 45 };
    struct kvfs_kv_cache a, b, c;
    struct kvfs_backend_iface staged = *m->be.iface;
    const struct kvfs_backend_iface *cpu = m->be.iface;
    staged.host_memory = 0;
    CHECK(cpu->host_memory);
    CHECK_EQ(kvfs_kv_cache_init(m, ROWS, &a), 0);
    CHECK_EQ(kvfs_kv_cache_init(m, ROWS, &b), 0);
    CHECK_EQ(kvfs_kv_cache_init(m, ROWS, &c), 0);
    int kvd = a.kv_dim;
    int32_t chunk_of[ROWS], idx[NSEL], *d_idx = NULL;
    float *fk = NULL, *fv = NULL;
    uint32_t r = 12345;
    for (int i = 0; i < ROWS; i++) {
        chunk_of[i] = i * CHUNKS / ROWS;
        a.host_pos[i] = b.host_pos[i] = c.host_pos[i] = i + (chunk_of[i] == 2 ? 7 : 0); /* a gap: not one run of positions */
    }
    CHECK_EQ(m->be.iface->alloc(m->be.ctx, sizeof(int32_t) * NSEL, (void **)&d_idx), 0);
    CHECK_EQ(m->be.iface->alloc(m->be.ctx, sizeof(float) * NSEL * kvd, (void **)&fk), 0);
    CHECK_EQ(m->be.iface->alloc(m->be.ctx, sizeof(float) * NSEL * kvd, (void **)&fv), 0);
    struct blend_shift_cache cache = {0};
    int same = 1, staged_same = 1;
    for (int round = 0; round < 2; round++) {
        for (int k = 0; k < NSEL; k++) /* ascending, from the later chunks */
            idx[k] = 100 + k * 4 + round;
        CHECK_EQ(m->be.iface->upload(m->be.ctx, d_idx, idx, sizeof(int32_t) * NSEL), 0);
        for (int l = 0; l < a.n_layer; l++) {
            for (int i = 0; i < ROWS * kvd; i++) {
                r = r * 1664525u + 1013904223u;
                a.k[l][i] = b.k[l][i] = c.k[l][i] = (float)(r >> 8) / (float)(1 << 24) - 0.5f;
                a.v[l][i] = b.v[l][i] = c.v[l][i] = -a.k[l][i];
            }
            for (int i = 0; i < NSEL * kvd; i++)
                fk[i] = 0.25f * (float)(i % 7), fv[i] = -0.125f * (float)(i % 5);
            CHECK_EQ(blend_shift_layer(m, &a, l, chunk_of, CHUNKS, 0, ROWS, idx, d_idx, NSEL, fk, fv, 0.6f, &cache), 0);
            CHECK_EQ(blend_shift_layer(m, &b, l, chunk_of, CHUNKS, 0, ROWS, idx, d_idx, NSEL, fk, fv, 0.6f, NULL), 0);
            m->be.iface = &staged;
            CHECK_EQ(blend_shift_layer(m, &c, l, chunk_of, CHUNKS, 0, ROWS, idx, d_idx, NSEL, fk, fv, 0.6f, NULL), 0);
            m->be.iface = cpu;
            same &= !memcmp(a.k[l], b.k[l], sizeof(float) * ROWS * kvd) &&
                    !memcmp(a.v[l], b.v[l], sizeof(float) * ROWS * kvd);
            staged_same &= !memcmp(a.k[l], c.k[l], sizeof(float) * ROWS * kvd) &&
                           !memcmp(a.v[l], c.v[l], sizeof(float) * ROWS * kvd);
        }
    }
    CHECK(same);
    CHECK(staged_same);
    blend_shift_cache_free(&cache);
    m->be.iface->free(m->be.ctx, d_idx), m->be.iface->free(m->be.ctx, fk), m->be.iface->free(m->be.ctx, fv);
    kvfs_kv_cache_free(m, &a), kvfs_kv_cache_free(m, &b), kvfs_kv_cache_free(m, &c);
}

int main(void)
{
    char path[64], err[256];
    snprintf(path, sizeof(path), "/tmp/kvfs-blend-model.%d.gguf", (int)getpid());
    struct kvfs_synth_model_opts o = {"llama", 4, 64, 4, 2, 128, 10000.0f, 5, 0, 0, 0, 0, NULL, 0.0f, 0, 0};
    CHECK_EQ(kvfs_synth_model_write(path, &o), 0);
    CHECK_EQ(kvfs_model_load(path, "cpu", 2, &m, err, sizeof(err)), 0);
    unlink(path);
    CHECK_EQ(kvfs_blend_selftest(m), 0);
    check_sliding_window();
    check_gemma4();
    check_shift_angle_cache();
    int V = m->hp.n_vocab;
    int32_t toks[NC][LEN], suffix[NS] = {65, 66, 67, 68, 69}, all[NC * LEN + NS];
    struct kvfs_writer w[NC];
    struct kvfs_blend_chunk ch[NC];
    make_prompt(71, 13, 7, toks, all, suffix, w, ch);
    float *full = malloc(sizeof(float) * V), *out = malloc(sizeof(float) * V);
    struct kvfs_kv_cache fc, bc;
    CHECK_EQ(kvfs_kv_cache_init(m, NC * LEN + NS, &fc), 0);
    CHECK_EQ(kvfs_forward(m, &fc, all, NC * LEN + NS, 0, full), 0);
    int32_t *bt;
    struct kvfs_blend_stats st;
    /* ratio 1: a full prefill */
    CHECK_EQ(kvfs_blend(m, ch, NC, suffix, NS, 1.0f, &bc, &bt, out, &st, err, sizeof(err)), 0);
    CHECK_EQ(st.n_ctx, NC * LEN + NS);
    CHECK_EQ(st.n_selected, NC * LEN);
    CHECK(!memcmp(bt, all, sizeof(all)));
    double k1 = kvfs_logits_kl(full, out, V);
    float dmax = 0;
    for (int i = 0; i < V; i++)
        dmax = fmaxf(dmax, fabsf(full[i] - out[i]));
    fprintf(stderr, "ratio 1: KL %.3g, max |dlogit| %.3g\n", k1, dmax);
    CHECK(dmax < 1e-2f);
    /* its KV equals the full prefill's too */
    float *a = malloc(sizeof(float) * (size_t)fc.kv_dim * fc.n), *b = malloc(sizeof(float) * (size_t)fc.kv_dim * fc.n);
    float kdiff = 0;
    for (int l = 0; l < m->hp.n_layer; l++) {
        memcpy(a, fc.k[l], sizeof(float) * (size_t)fc.kv_dim * fc.n);
        memcpy(b, bc.k[l], sizeof(float) * (size_t)fc.kv_dim * fc.n);
        for (int i = 0; i < fc.kv_dim * fc.n; i++)
            kdiff = fmaxf(kdiff, fabsf(a[i] - b[i]));
    }
    fprintf(stderr, "ratio 1: max |dK| over all layers %.3g\n", kdiff);
    CHECK(kdiff < 1e-2f);
    free(a);
    free(b);
    kvfs_kv_cache_free(m, &bc);
    free(bt);
    /* the curve: more recompute, closer to the full prefill */
    double prev = INFINITY, kl0 = 0;
    float ratios[] = {0.0f, 0.15f, 0.5f, 1.0f};
    for (int r = 0; r < 4; r++) {
        CHECK_EQ(kvfs_blend(m, ch, NC, suffix, NS, ratios[r], &bc, &bt, out, &st, err, sizeof(err)), 0);
        double k = kvfs_logits_kl(full, out, V);
        fprintf(stderr, "ratio %.2f: %d selected, KL %.4g\n", (double)ratios[r], st.n_selected, k);
        if (r == 0)
            kl0 = k;
        CHECK(k <= prev * 1.5 + 1e-6);
        prev = k;
        kvfs_kv_cache_free(m, &bc);
        free(bt);
    }
    CHECK(kl0 > 1e-4); /* plain reuse really loses the cross-attention */
    /* every selection: ratio 1 is still a full prefill; at 0.3 each beats
     * plain reuse and recomputes 30% on average */
    for (int variant = 0; variant < 3; variant++) {
        struct kvfs_blend_opts bo;
        kvfs_blend_opts_init(&bo, 1.0f);
        bo.select = variant == 1   ? KVFS_BLEND_SELECT_FIXED
                    : variant == 2 ? KVFS_BLEND_SELECT_QUERY
                                   : KVFS_BLEND_SELECT_GRADUAL;
        CHECK_EQ(kvfs_blend_ex(m, ch, NC, suffix, NS, &bo, &bc, &bt, out, &st, err, sizeof(err)), 0);
        CHECK(kvfs_logits_kl(full, out, V) < 1e-9);
        kvfs_kv_cache_free(m, &bc), free(bt);
        if (variant == 2) {
            /* query selection with every row picked: its first pass and its
             * recompute from layer 0 must give exactly what prefix caching
             * gives (every later chunk's rows recomputed over the first
             * chunk's, left as stored: here in f32) */
            struct kvfs_writer w32[NC];
            struct kvfs_blend_chunk ch32[NC];
            for (int i = 0; i < NC; i++) {
                CHECK_EQ(make_chunk_dtype(toks[i], LEN, KVFS_DTYPE_F32, &w32[i]), 0);
                ch32[i] = (struct kvfs_blend_chunk){w32[i].buf, w32[i].size};
            }
            struct kvfs_kv_cache pc;
            float *pref = malloc(sizeof(float) * V);
            CHECK_EQ(kvfs_kv_cache_init(m, NC * LEN + NS, &pc), 0);
            CHECK_EQ(kvfs_forward(m, &pc, all, LEN, 0, NULL), 0);
            CHECK_EQ(kvfs_forward(m, &pc, all + LEN, (NC - 1) * LEN + NS, LEN, pref), 0);
            bo.ratio = 0.999f;
            CHECK_EQ(kvfs_blend_ex(m, ch32, NC, suffix, NS, &bo, &bc, &bt, out, &st, err, sizeof(err)), 0);
            for (int i = 0; i < NC; i++)
                kvfs_writer_free(&w32[i]);
            CHECK_EQ(st.n_selected, (NC - 1) * LEN);
            CHECK(kvfs_logits_kl(pref, out, V) < 1e-9);
            float kq = 0;
            for (int l = 0; l < m->hp.n_layer; l++)
                for (int i = 0; i < pc.kv_dim * pc.n; i++)
                    kq = fmaxf(kq, fmaxf(fabsf(pc.k[l][i] - bc.k[l][i]), fabsf(pc.v[l][i] - bc.v[l][i])));
            fprintf(stderr, "query selection, every row: max |dK|,|dV| %.3g from prefix caching\n", kq);
            kvfs_kv_cache_free(m, &pc), free(pref);
            CHECK(kq < 1e-4f);
            kvfs_kv_cache_free(m, &bc), free(bt);
        }
        bo.ratio = 0.3f;
        CHECK_EQ(kvfs_blend_ex(m, ch, NC, suffix, NS, &bo, &bc, &bt, out, &st, err, sizeof(err)), 0);
        double k = kvfs_logits_kl(full, out, V);
        fprintf(stderr, "variant %d ratio 0.30: mean %d selected, KL %.4g\n", variant, st.n_selected, k);
        CHECK(k < kl0);
        CHECK(abs(st.n_selected - (int)(0.3 * NC * LEN + 0.5)) <= 2);
        kvfs_kv_cache_free(m, &bc), free(bt);
    }
    /* the floor: a prompt no longer than full_below is prefilled in full
     * (exactly, and said so); min_rows raises a small ratio's row count */
    {
        struct kvfs_blend_opts bo;
        kvfs_blend_opts_init(&bo, 0.15f);
        bo.full_below = NC * LEN + NS;
        CHECK_EQ(kvfs_blend_ex(m, ch, NC, suffix, NS, &bo, &bc, &bt, out, &st, err, sizeof(err)), 0);
        CHECK_EQ(st.full_prefill, 1);
        CHECK(kvfs_logits_kl(full, out, V) < 1e-9);
        kvfs_kv_cache_free(m, &bc), free(bt);
        bo.full_below = NC * LEN + NS - 1; /* one token longer than the floor: blended */
        bo.min_rows = 40;
        CHECK_EQ(kvfs_blend_ex(m, ch, NC, suffix, NS, &bo, &bc, &bt, out, &st, err, sizeof(err)), 0);
        CHECK_EQ(st.full_prefill, 0);
        CHECK_EQ(st.n_selected, 40);
        kvfs_kv_cache_free(m, &bc), free(bt);
        bo.min_rows = 0;
        bo.sink_rows = 12; /* 2 later chunks x 12 forced rows: the floor is 24 > 0.15 x 72 */
        CHECK_EQ(kvfs_blend_ex(m, ch, NC, suffix, NS, &bo, &bc, &bt, out, &st, err, sizeof(err)), 0);
        CHECK_EQ(st.n_selected, 24);
        kvfs_kv_cache_free(m, &bc), free(bt);
        bo.ratio = 0.0f; /* plain reuse stays plain reuse */
        bo.full_below = 1000;
        CHECK_EQ(kvfs_blend_ex(m, ch, NC, suffix, NS, &bo, &bc, &bt, out, &st, err, sizeof(err)), 0);
        CHECK_EQ(st.full_prefill, 0);
        CHECK_EQ(st.n_selected, 0);
        kvfs_kv_cache_free(m, &bc), free(bt);
        bo.ratio = 0.15f;
        bo.min_rows = -1;
        CHECK_EQ(kvfs_blend_ex(m, ch, NC, suffix, NS, &bo, &bc, &bt, out, &st, err, sizeof(err)), -EINVAL);
    }
    /* attn_mass (the query selection's ranking) against a direct computation:
     * 3 queries, 4 heads over 2 kv heads, 20 keys; positions unsorted */
    {
        enum { NQ = 3, NH = 4, NKH = 2, HD = 16, NK = 20 };
        float q[NQ * NH * HD], k[NK * NKH * HD], mass[NK] = {0};
        int32_t qp[NQ] = {9, 7, 12}, kp[NK];
        for (int i = 0; i < NQ * NH * HD; i++)
            q[i] = sinf(0.7f * (float)i);
        for (int i = 0; i < NK * NKH * HD; i++)
            k[i] = cosf(0.3f * (float)i + 1.0f);
        for (int j = 0; j < NK; j++)
            kp[j] = (j * 7) % NK;
        for (int t = 0; t < 3; t++) { /* causal, windowed, windowed and soft-capped (gemma2) */
            int window = t ? 5 : 0;
            double cap = t == 2 ? 0.3 : 0.0;
            memset(mass, 0, sizeof(mass));
            CHECK_EQ(m->be.iface->attn_mass(m->be.ctx, q, qp, NQ, k, kp, NK, NH, NKH, HD, 0.25f, window, (float)cap,
                                            mass), 0);
            double want[NK] = {0}, total = 0, err_max = 0;
            for (int i = 0; i < NQ; i++)
                for (int h = 0; h < NH; h++) {
                    double sc[NK], mx = -INFINITY, sum = 0;
                    for (int j = 0; j < NK; j++) {
                        double d = 0;
                        for (int x = 0; x < HD; x++)
                            d += (double)q[(i * NH + h) * HD + x] * k[(j * NKH + h / 2) * HD + x];
                        int seen = kp[j] <= qp[i] && (window == 0 || kp[j] > qp[i] - window);
                        sc[j] = seen ? (cap > 0 ? cap * tanh(0.25 * d / cap) : 0.25 * d) : -INFINITY;
                        mx = fmax(mx, sc[j]);
                    }
                    for (int j = 0; j < NK; j++)
                        sum += exp(sc[j] - mx);
                    for (int j = 0; j < NK; j++)
                        want[j] += exp(sc[j] - mx) / sum;
                }
            for (int j = 0; j < NK; j++) {
                err_max = fmax(err_max, fabs(want[j] - mass[j]));
                total += mass[j];
                /* seen by no query: after the last one, or (window 5) at 2 or before */
                if (kp[j] > 12 || (window && kp[j] <= 2))
                    CHECK(mass[j] == 0.0f);
            }
            fprintf(stderr, "attn_mass (window %d, cap %g): max error %.3g, total %.4f (want %d)\n", window, cap,
                    err_max, total, NQ * NH);
            CHECK(err_max < 1e-5);
            CHECK(fabs(total - NQ * NH) < 1e-4);
        }
    }
    check_batches("llama", w, ch, suffix);
    /* the chunk shift: the first chunk's rows are never moved; a later
     * chunk's reused rows move by exactly shift x the mean deviation of its
     * recomputed rows (at layer 1: layer 0 has no context, so no deviation
     * and no shift, and layer 1's recomputed rows are the same with and
     * without it); the query sees them, so its logits change */
    {
        struct kvfs_blend_opts on, off;
        struct kvfs_kv_cache c0, c1;
        int32_t *t0 = NULL, *t1 = NULL;
        float *out0 = malloc(sizeof(float) * (size_t)m->hp.n_vocab);
        kvfs_blend_opts_init(&on, 0.3f);
        kvfs_blend_opts_init(&off, 0.3f);
        off.shift = 0.0f;
        CHECK_EQ(on.shift, KVFS_BLEND_SHIFT);
        CHECK_EQ(kvfs_blend_ex(m, ch, NC, suffix, NS, &off, &c0, &t0, out0, &st, err, sizeof(err)), 0);
        CHECK_EQ(kvfs_blend_ex(m, ch, NC, suffix, NS, &on, &c1, &t1, out, &st, err, sizeof(err)), 0);
        int kvd = c0.kv_dim, same0 = 1, moved = 0, n_logit_diff = 0;
        for (int l = 0; l < c0.n_layer; l++)
            for (int j = 0; j < LEN * kvd; j++) /* chunk 0: exact in both */
                same0 &= c0.k[l][j] == c1.k[l][j] && c0.v[l][j] == c1.v[l][j];
        /* layer 1, chunk 1's V: reused rows moved by one common vector */
        float common[4096];
        int have = 0, consistent = 1;
        for (int r = LEN; r < 2 * LEN && kvd <= 4096; r++) {
            float dv0 = c1.v[1][(size_t)r * kvd] - c0.v[1][(size_t)r * kvd];
            if (dv0 == 0.0f)
                continue;
            moved++;
            for (int d = 0; d < kvd; d++) {
                float dv = c1.v[1][(size_t)r * kvd + d] - c0.v[1][(size_t)r * kvd + d];
                if (!have)
                    common[d] = dv;
                else
                    consistent &= fabsf(dv - common[d]) <= 1e-5f * (1.0f + fabsf(common[d]));
            }
            have = 1;
        }
        /* the keys' move, turned back to position 0 with the model's RoPE, is
         * one common vector too */
        const struct kvfs_hparams *hp = &m->hp;
        int kmoved = 0, kconsistent = 1;
        float kcommon[4096];
        for (int r = LEN; r < 2 * LEN && kvd <= 4096; r++) {
            float u[4096];
            if (c1.v[1][(size_t)r * kvd] == c0.v[1][(size_t)r * kvd])
                continue; /* a recomputed row (the layer-0 shift of rounding noise moves its K a little) */
            for (int d = 0; d < kvd; d++)
                u[d] = c1.k[1][(size_t)r * kvd + d] - c0.k[1][(size_t)r * kvd + d];
            for (int h = 0; h < hp->n_kv_head; h++)
                for (int j = 0; j < hp->rope_dim / 2; j++) {
                    int neox = hp->rope_style == KVFS_ROPE_STYLE_NEOX;
                    int i0 = h * hp->head_dim + (neox ? j : 2 * j), i1 = h * hp->head_dim + (neox ? j + hp->rope_dim / 2 : 2 * j + 1);
                    double a = -(double)c1.host_pos[r] * pow(m->layers[1].rope_theta, -2.0 * j / hp->rope_dim);
                    double x0 = u[i0], x1 = u[i1];
                    u[i0] = (float)(x0 * cos(a) - x1 * sin(a));
                    u[i1] = (float)(x0 * sin(a) + x1 * cos(a));
                }
            for (int d = 0; d < kvd; d++) {
                if (!kmoved)
                    kcommon[d] = u[d];
                else
                    kconsistent &= fabsf(u[d] - kcommon[d]) <= 1e-3f * (1.0f + fabsf(kcommon[d]));
            }
            kmoved++;
        }
        CHECK_EQ(kmoved, moved);
        CHECK(kconsistent);
        for (int i = 0; i < m->hp.n_vocab; i++)
            n_logit_diff += out0[i] != out[i];
        CHECK(same0);
        CHECK(moved > LEN / 2);
        CHECK(consistent);
        CHECK(n_logit_diff > 0);
        fprintf(stderr, "shift: %d of chunk 1's %d rows moved at layer 1, %d logits differ\n", moved, LEN,
                n_logit_diff);
        /* ratio 1: nothing reused, nothing shifted */
        kvfs_kv_cache_free(m, &c0), kvfs_kv_cache_free(m, &c1), free(t0), free(t1);
        on.ratio = off.ratio = 1.0f;
        CHECK_EQ(kvfs_blend_ex(m, ch, NC, suffix, NS, &off, &c0, &t0, out0, &st, err, sizeof(err)), 0);
        CHECK_EQ(kvfs_blend_ex(m, ch, NC, suffix, NS, &on, &c1, &t1, out, &st, err, sizeof(err)), 0);
        CHECK(!memcmp(out0, out, sizeof(float) * (size_t)m->hp.n_vocab));
        kvfs_kv_cache_free(m, &c0), kvfs_kv_cache_free(m, &c1), free(t0), free(t1);
        on.shift = 1.5f;
        CHECK_EQ(kvfs_blend_ex(m, ch, NC, suffix, NS, &on, &c1, &t1, out, &st, err, sizeof(err)), -EINVAL);
        on.shift = KVFS_BLEND_SHIFT;
        struct kvfs_blend_experiment nx;
        kvfs_blend_experiment_init(&nx);
        nx.vote_from = 1.0f; /* no layer would vote */
        CHECK_EQ(kvfs_blend_eval(m, ch, NC, suffix, NS, &on, &nx, &c1, &t1, out, &st, err, sizeof(err)), -EINVAL);
        free(out0);
    }
    /* the first chunk is exact, so the query selection never recomputes it:
     * its rows are plain reuse's bit for bit at every layer, the whole budget
     * goes to the later chunks (cut to their rows) */
    {
        struct kvfs_blend_opts o;
        struct kvfs_kv_cache c0, c1;
        int32_t *t0 = NULL, *t1 = NULL;
        struct kvfs_kv_cache c2 = {0};
        int32_t *t2 = NULL;
        kvfs_blend_opts_init(&o, 0.0f);
        CHECK_EQ(kvfs_blend_ex(m, ch, NC, suffix, NS, &o, &c0, &t0, out, &st, err, sizeof(err)), 0);
        int kvd = c0.kv_dim;
        /* variants: 0.3, 0.9 (every later row), and the later chunks' share
         * exactly: the same result as 0.9 */
        const float later = (float)(NC - 1) / NC;
        for (int variant = 0; variant < 4; variant++) {
            if (variant == 1)
                continue; /* was the first chunk's rows competing too: gone (BENCHMARKS.md) */
            kvfs_blend_opts_init(&o, variant == 2 ? 0.9f : variant >= 3 ? later : 0.3f);
            CHECK_EQ(kvfs_blend_ex(m, ch, NC, suffix, NS, &o, &c1, &t1, out, &st, err, sizeof(err)), 0);
            int same0 = 1;
            for (int l = 0; l < c0.n_layer; l++)
                same0 &= !memcmp(c0.k[l], c1.k[l], sizeof(float) * (size_t)LEN * kvd) &&
                         !memcmp(c0.v[l], c1.v[l], sizeof(float) * (size_t)LEN * kvd);
            int want = variant >= 2 ? (NC - 1) * LEN : (int)ceilf(0.3f * NC * LEN - 1e-4f);
            int as_all_later = 1;
            for (int l = 0; variant >= 3 && l < c1.n_layer; l++)
                as_all_later &= !memcmp(c2.k[l], c1.k[l], sizeof(float) * (size_t)c1.n * kvd) &&
                                !memcmp(c2.v[l], c1.v[l], sizeof(float) * (size_t)c1.n * kvd);
            fprintf(stderr, "first chunk out (variant %d): %d selected, first chunk untouched %d, as every later row %d\n",
                    variant, st.n_selected, same0, as_all_later);
            CHECK_EQ(st.n_selected, want);
            CHECK(same0);
            CHECK(as_all_later);
            if (variant == 2)
                c2 = c1, t2 = t1;
            else
                kvfs_kv_cache_free(m, &c1), free(t1);
        }
        kvfs_kv_cache_free(m, &c0), free(t0);
        kvfs_kv_cache_free(m, &c2), free(t2);
    }
    /* the position prior: row t of each chunk weighs (t + 1)^-B; B 0 is off;
     * B outside [0, 4] is refused */
    {
        const int32_t chunk_of[6] = {0, 0, 0, 1, 1, 2};
        const float want[6] = {1.0f, 0.5f, 1.0f / 3.0f, 1.0f, 0.5f, 1.0f};
        float mass[6] = {1, 1, 1, 1, 1, 1};
        struct kvfs_blend_opts o;
        struct kvfs_blend_experiment x;
        kvfs_blend_opts_init(&o, 0.15f);
        kvfs_blend_experiment_init(&x);
        blend_position_prior(&x, chunk_of, mass, 6);
        for (int r = 0; r < 6; r++)
            CHECK(mass[r] == 1.0f);
        x.pos_prior = 1.0f;
        blend_position_prior(&x, chunk_of, mass, 6);
        for (int r = 0; r < 6; r++)
            CHECK(fabsf(mass[r] - want[r]) < 1e-6f);
        CHECK_EQ(kvfs_blend_eval(m, ch, NC, suffix, NS, &o, &x, &bc, &bt, out, &st, err, sizeof(err)), 0);
        kvfs_kv_cache_free(m, &bc), free(bt);
        x.pos_prior = 4.5f;
        CHECK_EQ(kvfs_blend_eval(m, ch, NC, suffix, NS, &o, &x, &bc, &bt, out, &st, err, sizeof(err)), -EINVAL);
        x.pos_prior = -0.5f;
        CHECK_EQ(kvfs_blend_eval(m, ch, NC, suffix, NS, &o, &x, &bc, &bt, out, &st, err, sizeof(err)), -EINVAL);
    }
    /* one chunk, the same chunk twice, reordered, many */
    struct kvfs_blend_chunk twice[2] = {ch[1], ch[1]}, rev[3] = {ch[2], ch[0], ch[1]}, many[12];
    for (int i = 0; i < 12; i++)
        many[i] = ch[i % NC];
    CHECK_EQ(kvfs_blend(m, ch, 1, suffix, NS, 0.15f, &bc, &bt, out, &st, err, sizeof(err)), 0);
    kvfs_kv_cache_free(m, &bc), free(bt);
    CHECK_EQ(kvfs_blend(m, twice, 2, suffix, NS, 0.15f, &bc, &bt, out, &st, err, sizeof(err)), 0);
    CHECK_EQ(bc.host_pos[LEN], LEN); /* second copy re-positioned */
    kvfs_kv_cache_free(m, &bc), free(bt);
    CHECK_EQ(kvfs_blend(m, rev, 3, suffix, NS, 0.15f, &bc, &bt, out, &st, err, sizeof(err)), 0);
    CHECK_EQ(bt[0], toks[2][0]);
    kvfs_kv_cache_free(m, &bc), free(bt);
    CHECK_EQ(kvfs_blend(m, many, 12, suffix, NS, 0.15f, &bc, &bt, out, &st, err, sizeof(err)), 0);
    CHECK_EQ(st.n_ctx, 12 * LEN + NS);
    kvfs_kv_cache_free(m, &bc), free(bt);
    /* refusals */
    CHECK_EQ(kvfs_blend(m, ch, NC, suffix, NS, 1.5f, &bc, &bt, out, &st, err, sizeof(err)), -EINVAL);
    CHECK_EQ(kvfs_blend(m, ch, NC, suffix, 0, 0.5f, &bc, &bt, out, &st, err, sizeof(err)), -EINVAL);
    struct kvfs_blend_chunk bad = {w[0].buf, 100};
    CHECK(kvfs_blend(m, &bad, 1, suffix, NS, 0.5f, &bc, &bt, out, &st, err, sizeof(err)) < 0);
    kvfs_kv_cache_free(m, &fc);
    for (int i = 0; i < NC; i++)
        kvfs_writer_free(&w[i]);
    free(full);
    free(out);
    kvfs_model_free(m);
    CHECK_DONE();
}
