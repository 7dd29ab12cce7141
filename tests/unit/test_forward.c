/* test_forward.c - the runtime on tiny synthetic models (llama with GQA,
 * qwen2 with biases/NeoX RoPE, gemma3 with wide heads and sliding-window
 * layers): decode after prefill equals prefill of the longer sequence; a
 * cache written as a chunk and read back continues identically; RoPE
 * re-rotation by a delta composes; a prefill split in two equals it in one
 * call bit for bit (attention alone too); windowed attention equals its definition;
 * the tokenizer round trips bytes. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "blend.h"
#include "check.h"
#include "forward.h"
#include "gguf.h"
#include "model.h"
#include "synth_model.h"
#include "tokenizer.h"

static float max_diff(const float *a, const float *b, int n, float *scale)
{
    float d = 0, s = 0;
    for (int i = 0; i < n; i++) {
        d = fmaxf(d, fabsf(a[i] - b[i]));
        s = fmaxf(s, fabsf(a[i]));
    }
    *scale = s;
    return d;
}

/* Prefill at pos0 > 0: RoPE attention depends only on relative positions, so
 * the logits and V equal those at pos0 = 0, and every layer's stored keys
 * equal the pos0 = 0 keys rotated by pos0; the chunk records pos0. */
static void check_pos0(struct kvfs_model *m, const int32_t *toks, int n)
{
    const int P = 37;
    const struct kvfs_backend_iface *be = m->be.iface;
    int V = m->hp.n_vocab, kvd = m->hp.n_kv_head * m->hp.head_dim;
    float *la = malloc(sizeof(float) * V), *lb = malloc(sizeof(float) * V);
    float *ka = malloc(sizeof(float) * n * kvd), *kb = malloc(sizeof(float) * n * kvd);
    float *va = malloc(sizeof(float) * n * kvd), *vb = malloc(sizeof(float) * n * kvd);
    int32_t *delta = malloc(sizeof(int32_t) * n);
    struct kvfs_kv_cache a, b;
    CHECK_EQ(kvfs_kv_cache_init(m, n, &a), 0);
    CHECK_EQ(kvfs_kv_cache_init(m, n, &b), 0);
    CHECK_EQ(kvfs_forward(m, &a, toks, n, 0, la), 0);
    CHECK_EQ(kvfs_forward(m, &b, toks, n, P, lb), 0);
    CHECK_EQ(b.host_pos[0], P);
    CHECK_EQ(b.host_pos[n - 1], P + n - 1);
    float scale, d = max_diff(la, lb, V, &scale);
    fprintf(stderr, "%s: logits at pos0=%d vs pos0=0 max |dlogit| %.2e (scale %.2f)\n", m->hp.arch, P, d, scale);
    CHECK(d <= 2e-2f * (scale > 1 ? scale : 1));
    float worst_k = 0, worst_v = 0;
    for (int l = 0; l < m->hp.n_layer; l++) {
        CHECK_EQ(be->download(m->be.ctx, ka, a.k[l], sizeof(float) * n * kvd), 0);
        CHECK_EQ(be->download(m->be.ctx, kb, b.k[l], sizeof(float) * n * kvd), 0);
        CHECK_EQ(be->download(m->be.ctx, va, a.v[l], sizeof(float) * n * kvd), 0);
        CHECK_EQ(be->download(m->be.ctx, vb, b.v[l], sizeof(float) * n * kvd), 0);
        for (int i = 0; i < n; i++)
            delta[i] = P;
        /* the CPU backend's device memory is host memory */
        CHECK_EQ(be->rope(m->be.ctx, ka, delta, n, m->hp.n_kv_head, m->hp.head_dim, m->hp.rope_dim,
                          m->layers[l].rope_theta, m->hp.rope_style, m->rope_freqs), 0);
        float sk, sv, dk = max_diff(ka, kb, n * kvd, &sk), dv = max_diff(va, vb, n * kvd, &sv);
        worst_k = fmaxf(worst_k, dk / (sk > 1 ? sk : 1));
        worst_v = fmaxf(worst_v, dv / (sv > 1 ? sv : 1));
    }
    fprintf(stderr, "%s: keys at pos0=%d vs rotated pos0=0 keys: rel %.2e; values rel %.2e\n", m->hp.arch, P,
            worst_k, worst_v);
    CHECK(worst_k <= 2e-2f);
    CHECK(worst_v <= 2e-2f);
    /* the chunk written from the pos0 cache says so */
    struct kvfs_writer w;
    struct kvfs_header h;
    char err[256];
    CHECK_EQ(kvfs_kv_cache_to_chunk(m, &b, 0, n, toks, KVFS_DTYPE_F16, &w), 0);
    CHECK_EQ(kvfs_file_verify(w.buf, w.size, &h, err, sizeof(err)), 0);
    CHECK_EQ(h.pos0, P);
    CHECK(h.flags & KVFS_FLAG_KEYS_ROPED);
    kvfs_writer_free(&w);
    kvfs_kv_cache_free(m, &a);
    kvfs_kv_cache_free(m, &b);
    free(la); free(lb); free(ka); free(kb); free(va); free(vb); free(delta);
}

/* Batch invariance: a row's result does not depend on which rows were
 * computed with it.  A prefill of n tokens in one call and the same tokens in
 * two calls (a prefix, then the rest against its cache: what prefix caching
 * and a blend's recompute do) give bit-identical logits and K/V.  Long enough
 * that attention runs in several query blocks and over many keys (the BLAS
 * splits a long product by its length), and wide enough that every product
 * takes the BLAS's ordinary kernels, as a real model's do (tiny products take
 * other kernels, whose sums differ: the 64-wide models above would).  Each
 * part has at least 256 rows, as a blend's recompute or a prompt after a
 * cached prefix has (decoding one row takes other paths). */
static void check_batch_invariance(const char *arch, const char *path)
{
    enum { N = 900 };
    static const int splits[] = {256, 300, 513, 520, 600, 644};
    struct kvfs_synth_model_opts o = {arch, 2, 256, 4, 2, 512, !strcmp(arch, "gemma3") ? 1e6f : 10000.0f, 7,
                                      0, 0, 0, 0, NULL, 0.0f, 0, 0};
    CHECK_EQ(kvfs_synth_model_write(path, &o), 0);
    struct kvfs_model *m;
    char err[256];
    if (kvfs_model_load(path, "cpu", 2, &m, err, sizeof(err))) {
        fprintf(stderr, "load: %s\n", err);
        CHECK(0);
        return;
    }
    int V = m->hp.n_vocab, kvd = m->hp.n_kv_head * m->hp.head_dim;
    int32_t *toks = malloc(sizeof(int32_t) * N);
    float *la = malloc(sizeof(float) * V), *lb = malloc(sizeof(float) * V);
    float *ka = malloc(sizeof(float) * N * kvd), *kb = malloc(sizeof(float) * N * kvd);
    for (int i = 0; i < N; i++)
        toks[i] = (i * 131 + 7) % 256;
    struct kvfs_kv_cache a;
    CHECK_EQ(kvfs_kv_cache_init(m, N, &a), 0);
    CHECK_EQ(kvfs_forward(m, &a, toks, N, 0, la), 0);
    for (size_t s = 0; s < sizeof(splits) / sizeof(splits[0]); s++) {
        struct kvfs_kv_cache b;
        CHECK_EQ(kvfs_kv_cache_init(m, N, &b), 0);
        CHECK_EQ(kvfs_forward(m, &b, toks, splits[s], 0, NULL), 0);
        CHECK_EQ(kvfs_forward(m, &b, toks + splits[s], N - splits[s], splits[s], lb), 0);
        int same = !memcmp(la, lb, sizeof(float) * V);
        for (int l = 0; l < m->hp.n_layer; l++) {
            CHECK_EQ(m->be.iface->download(m->be.ctx, ka, a.k[l], sizeof(float) * N * kvd), 0);
            CHECK_EQ(m->be.iface->download(m->be.ctx, kb, b.k[l], sizeof(float) * N * kvd), 0);
            same &= !memcmp(ka, kb, sizeof(float) * N * kvd);
            CHECK_EQ(m->be.iface->download(m->be.ctx, ka, a.v[l], sizeof(float) * N * kvd), 0);
            CHECK_EQ(m->be.iface->download(m->be.ctx, kb, b.v[l], sizeof(float) * N * kvd), 0);
            same &= !memcmp(ka, kb, sizeof(float) * N * kvd);
        }
        float scale, d = max_diff(la, lb, V, &scale);
        if (!same)
            fprintf(stderr, "%s: %d + %d rows differ from %d in one call (max |dlogit| %.2e)\n", m->hp.arch,
                    splits[s], N - splits[s], N, d);
        CHECK(same);
        kvfs_kv_cache_free(m, &b);
    }
    kvfs_kv_cache_free(m, &a);
    free(toks); free(la); free(lb); free(ka); free(kb);
    kvfs_model_free(m);
}

/* n rows of uniform values in [-0.5, 0.5) for q ([n][q_dim]) and k, v
 * ([n][kv_dim], drawn in turn), from an LCG seeded with seed; positions
 * 0..n-1 */
static void attention_inputs(float *q, float *k, float *v, int32_t *pos, int n, int q_dim, int kv_dim, uint32_t seed)
{
    for (int i = 0; i < n; i++)
        pos[i] = i;
    for (int i = 0; i < n * q_dim; i++)
        q[i] = (float)((seed = seed * 1664525u + 1013904223u) >> 8) / (1 << 24) - 0.5f;
    for (int i = 0; i < n * kv_dim; i++) {
        k[i] = (float)((seed = seed * 1664525u + 1013904223u) >> 8) / (1 << 24) - 0.5f;
        v[i] = (float)((seed = seed * 1664525u + 1013904223u) >> 8) / (1 << 24) - 0.5f;
    }
}

/* The backend's attention alone, batch invariance: the first P queries
 * over the first P keys (a prefill's first call) give, bit for bit, the rows
 * the full call gives them, whatever block of queries P ends in (tails of 1
 * to 255 rows), for head widths 64 / 128 / 256, causal and windowed, with
 * and without soft-capping. */
static void check_attention_invariance(const struct kvfs_backend *b)
{
    enum { N = 900, H = 4, KH = 2 };
    static const struct { int p, d, window; float cap; } cases[] = {
        {600, 64, 0, 0}, {520, 64, 0, 0}, {513, 128, 4, 0}, {600, 128, 0, 0}, {700, 256, 512, 0}, {17, 64, 0, 0},
        {899, 64, 7, 0}, {600, 64, 0, 0.05f}, {513, 128, 9, 0.05f}};
    for (size_t t = 0; t < sizeof(cases) / sizeof(cases[0]); t++) {
        int P = cases[t].p, D = cases[t].d;
        float *q = malloc(sizeof(float) * N * H * D), *k = malloc(sizeof(float) * N * KH * D);
        float *v = malloc(sizeof(float) * N * KH * D), *o1 = malloc(sizeof(float) * N * H * D);
        float *o2 = malloc(sizeof(float) * N * H * D);
        int32_t *pos = malloc(sizeof(int32_t) * N);
        attention_inputs(q, k, v, pos, N, H * D, KH * D, 3);
        CHECK_EQ(b->iface->attention(b->ctx, q, pos, N, k, v, pos, N, H, KH, D, 0.125f, cases[t].window,
                                     cases[t].cap, o1), 0);
        CHECK_EQ(b->iface->attention(b->ctx, q, pos, P, k, v, pos, P, H, KH, D, 0.125f, cases[t].window,
                                     cases[t].cap, o2), 0);
        int bad = 0;
        for (int i = 0; i < P; i++)
            bad += !!memcmp(o1 + (size_t)i * H * D, o2 + (size_t)i * H * D, sizeof(float) * H * D);
        if (bad)
            fprintf(stderr, "attention: %d of the first %d rows (head %d, window %d) differ from the full call's\n",
                    bad, P, D, cases[t].window);
        CHECK_EQ(bad, 0);
        free(q); free(k); free(v); free(o1); free(o2); free(pos);
    }
}

/* The same for a blend's recompute: a scattered subset of the queries
 * (every 7th row from 100 on, then a dense run: blocks by position, of
 * many sizes) over all the keys gives, bit for bit, the rows of the call
 * with every query, causal and windowed.  Without the dense run every
 * block is small, and a kv head's query heads go in one product (the CPU
 * backend's attn_stack): 2 and 3 heads per kv head. */
static void check_sparse_query_invariance(const struct kvfs_backend *b, int H, int KH, int dense)
{
    enum { N = 1500, D = 64 };
    float *q = malloc(sizeof(float) * N * H * D), *k = malloc(sizeof(float) * N * KH * D);
    float *v = malloc(sizeof(float) * N * KH * D), *o1 = malloc(sizeof(float) * N * H * D);
    float *qs = malloc(sizeof(float) * N * H * D), *o2 = malloc(sizeof(float) * N * H * D);
    int32_t *pos = malloc(sizeof(int32_t) * N), *qpos = malloc(sizeof(int32_t) * N), *row = malloc(sizeof(int32_t) * N);
    attention_inputs(q, k, v, pos, N, H * D, KH * D, 5);
    int n = 0;
    for (int i = 100; i < (dense ? N : 1200); i += i < 1200 ? 7 : 1)
        row[n++] = i;
    for (int j = 0; j < n; j++) {
        qpos[j] = pos[row[j]];
        memcpy(qs + (size_t)j * H * D, q + (size_t)row[j] * H * D, sizeof(float) * H * D);
    }
    const int windows[] = {0, 512};
    for (size_t w = 0; w < sizeof(windows) / sizeof(windows[0]); w++) {
        float cap = w ? 0.05f : 0.0f; /* the windowed case soft-capped too (gemma2) */
        CHECK_EQ(b->iface->attention(b->ctx, q, pos, N, k, v, pos, N, H, KH, D, 0.125f, windows[w], cap, o1), 0);
        CHECK_EQ(b->iface->attention(b->ctx, qs, qpos, n, k, v, pos, N, H, KH, D, 0.125f, windows[w], cap, o2), 0);
        int bad = 0;
        for (int j = 0; j < n; j++)
            bad += !!memcmp(o1 + (size_t)row[j] * H * D, o2 + (size_t)j * H * D, sizeof(float) * H * D);
        if (bad)
            fprintf(stderr, "attention: %d of %d scattered rows (window %d, %d heads, %d kv heads) differ from the full call's\n",
                    bad, n, windows[w], H, KH);
        CHECK_EQ(bad, 0);
    }
    free(q); free(k); free(v); free(o1); free(qs); free(o2); free(pos); free(qpos); free(row);
}

/* The backend's attention with a sliding window against its definition,
 * computed here in double: positions in order (the skipping paths) and
 * shuffled, several windows, GQA, with and without soft-capping (a cap of
 * 0.05 where the scaled scores reach about +-0.3: tanh bends them), with
 * and without gpt-oss's attention sinks (a logit per head in the softmax,
 * of the scores' size: attention_sinks, and the mass attn_mass_sinks
 * gives the keys). */
static void check_window_attention(const struct kvfs_backend *b)
{
    enum { NQ = 7, NKV = 40, H = 4, KH = 2, D = 16 };
    static float q[NQ * H * D], k[NKV * KH * D], v[NKV * KH * D], out[NQ * H * D], mass[NKV];
    static const float sinks[H] = {0.1f, -0.4f, 0.3f, -3.0f};
    int32_t qp[NQ], kp[NKV];
    uint64_t s = 99;
    for (size_t i = 0; i < sizeof(q) / 4 + sizeof(k) / 4 * 2; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        float r = (float)(s >> 40) / (float)(1 << 24) - 0.5f;
        if (i < sizeof(q) / 4) q[i] = r;
        else if (i < sizeof(q) / 4 + sizeof(k) / 4) k[i - sizeof(q) / 4] = r;
        else v[i - sizeof(q) / 4 - sizeof(k) / 4] = r;
    }
    for (int shuffled = 0; shuffled < 2; shuffled++) {
        for (int j = 0; j < NKV; j++)
            kp[j] = shuffled ? (j * 17) % NKV : j;
        for (int i = 0; i < NQ; i++)
            qp[i] = shuffled ? 39 - 5 * i : 30 + i;
        const int windows[] = {0, 1, 4, 9, 100};
        for (size_t wi = 0; wi < 3 * sizeof(windows) / sizeof(windows[0]); wi++) {
            int win = windows[wi % 5], sk = wi >= 10;
            float cap = wi >= 5 && wi < 10 ? 0.05f : 0.0f;
            double ref_mass[NKV] = {0};
            memset(mass, 0, sizeof(mass));
            if (sk) {
                CHECK_EQ(b->iface->attention_sinks(b->ctx, q, qp, NQ, k, v, kp, NKV, H, KH, D, 0.3f, win, cap, sinks,
                                                   out), 0);
                CHECK_EQ(b->iface->attn_mass_sinks(b->ctx, q, qp, NQ, k, kp, NKV, H, KH, D, 0.3f, win, cap, sinks,
                                                   mass), 0);
            } else {
                CHECK_EQ(b->iface->attention(b->ctx, q, qp, NQ, k, v, kp, NKV, H, KH, D, 0.3f, win, cap, out), 0);
            }
            double worst = 0;
            for (int i = 0; i < NQ; i++)
                for (int h = 0; h < H; h++) {
                    double sc[NKV], mx = -1e300, sum = 0;
                    int kh = h / (H / KH);
                    for (int j = 0; j < NKV; j++) {
                        int vis = kp[j] <= qp[i] && (win == 0 || qp[i] - kp[j] < win);
                        double d = 0;
                        for (int c = 0; c < D; c++)
                            d += (double)q[(i * H + h) * D + c] * k[(j * KH + kh) * D + c];
                        sc[j] = vis ? (cap > 0 ? cap * tanh(0.3 * d / cap) : 0.3 * d) : -1e300;
                        mx = sc[j] > mx ? sc[j] : mx;
                    }
                    if (sk && mx > -1e299) /* a sink where some key is visible */
                        mx = sinks[h] > mx ? sinks[h] : mx;
                    for (int j = 0; j < NKV; j++)
                        sum += sc[j] > -1e299 ? exp(sc[j] - mx) : 0;
                    if (sk && mx > -1e299)
                        sum += exp(sinks[h] - mx);
                    for (int j = 0; j < NKV; j++)
                        ref_mass[j] += sc[j] > -1e299 ? exp(sc[j] - mx) / sum : 0;
                    for (int c = 0; c < D; c++) {
                        double o = 0;
                        for (int j = 0; j < NKV; j++)
                            o += sc[j] > -1e299 ? exp(sc[j] - mx) / sum * v[(j * KH + kh) * D + c] : 0;
                        double e = fabs(o - out[(i * H + h) * D + c]);
                        worst = e > worst ? e : worst;
                    }
                }
            if (worst > 1e-5)
                fprintf(stderr, "window %d, cap %g%s (%s positions): max error %.2e\n", win, (double)cap,
                        sk ? ", sinks" : "", shuffled ? "shuffled" : "sorted", worst);
            CHECK(worst <= 1e-5);
            for (int j = 0; sk && j < NKV; j++)
                CHECK(fabs(ref_mass[j] - mass[j]) <= 1e-5);
        }
    }
    CHECK_EQ(b->iface->attention(b->ctx, q, qp, NQ, k, v, kp, NKV, H, KH, D, 0.3f, -1, 0.0f, out), -EINVAL);
    CHECK_EQ(b->iface->attention(b->ctx, q, qp, NQ, k, v, kp, NKV, H, KH, D, 0.3f, 0, -1.0f, out), -EINVAL);
}

/* the synthetic model of o written to path and loaded on the CPU; NULL
 * (a failed check, the reason printed) when either fails */
static struct kvfs_model *load_synth(const char *path, const struct kvfs_synth_model_opts *o)
{
    struct kvfs_model *m;
    char err[256];
    CHECK_EQ(kvfs_synth_model_write(path, o), 0);
    int rc = kvfs_model_load(path, "cpu", 2, &m, err, sizeof(err));
    CHECK_EQ(rc, 0);
    if (rc) {
        fprintf(stderr, "load: %s\n", err);
        return NULL;
    }
    return m;
}

/* a prefill of toks[0..20) into full (logits into a) against a prefill of
 * 14 into inc and 6 decode steps (the last logits into b): the same logits
 * within 2% of their scale */
static void check_decode_vs_prefill(const char *name, struct kvfs_model *m, const int32_t *toks,
                                    struct kvfs_kv_cache *full, struct kvfs_kv_cache *inc, float *a, float *b)
{
    CHECK_EQ(kvfs_kv_cache_init(m, 32, full), 0);
    CHECK_EQ(kvfs_forward(m, full, toks, 20, 0, a), 0);
    CHECK_EQ(kvfs_kv_cache_init(m, 32, inc), 0);
    CHECK_EQ(kvfs_forward(m, inc, toks, 14, 0, NULL), 0);
    for (int i = 14; i < 20; i++)
        CHECK_EQ(kvfs_forward(m, inc, &toks[i], 1, i, b), 0);
    float scale, d = max_diff(a, b, m->hp.n_vocab, &scale);
    fprintf(stderr, "%s: decode vs prefill max |dlogit| %.2e (scale %.2f)\n", name, d, scale);
    CHECK(d <= 2e-2f * (scale > 1 ? scale : 1));
}

static void check_model(const char *arch, const char *path)
{
    int gemma = !strcmp(arch, "gemma3");
    /* gemma3: a global base apart from the local layers' 10000 */
    struct kvfs_synth_model_opts o = {arch, 3, 64, 4, 2, 128, gemma ? 1e6f : 10000.0f, 42, 0, 0, 0, 0, NULL, 0.0f, 0, 0};
    struct kvfs_model *m = load_synth(path, &o);
    char err[256];
    if (!m)
        return;
    int ds2 = !strcmp(arch, "deepseek2");
    CHECK_EQ(m->hp.n_kv_head, ds2 ? 1 : 2);
    CHECK_EQ(m->hp.rope_style, !strcmp(arch, "llama") || ds2 ? KVFS_ROPE_STYLE_NORM : KVFS_ROPE_STYLE_NEOX);
    if (ds2) { /* MLA on n_embd 64, 4 heads: a latent of 16 and a rotated key part of 4 as the cached row (rotated
                * part first), Q.K over heads of 8 + 4; a leading dense layer, then experts with one shared */
        CHECK(m->hp.mla_rank == 16 && m->hp.rope_dim == 4 && m->hp.head_dim == 20 && m->hp.mla_k == 12 &&
              m->hp.mla_v == 8 && m->hp.q_dim == 80 && m->hp.q_lora == 0);
        /* YaRN (factor 4) with V2-Lite's log multiplier: the scale of Q.K times mscale^2, the rotated parts
         * unscaled, the frequencies through factors */
        float ms = 1.0f + 0.1f * (0.0707f / 0.1f) * logf(4.0f);
        CHECK(fabsf(m->hp.attn_scale - ms * ms / sqrtf(12.0f)) < 1e-6f);
        CHECK(m->hp.mla_rope_mscale == 1.0f && m->rope_freqs && m->rope_freqs[0] == 1.0f);
        CHECK(m->fp.n_kv_head == 1 && m->fp.head_dim == 20 && m->fp.rope_dim == 4);
        CHECK(m->hp.n_dense_lead == 1 && m->hp.n_ff_shexp == 64 && !m->hp.moe_sigmoid && !m->hp.moe_norm);
        CHECK(m->layers[0].w_gate && !m->layers[0].ffn_gate_inp && m->layers[1].ffn_gate_inp && m->layers[1].sh_gate);
        CHECK(m->layers[1].wq && !m->layers[1].wq_a && m->layers[1].wk_b && m->layers[1].wv_b[3] && m->layers[1].wkv_a);
    }
    CHECK((m->layers[0].bq != NULL) == (!strcmp(arch, "qwen2") || !strcmp(arch, "gpt-oss")));
    CHECK((m->layers[0].attn_q_norm != NULL) == (gemma || !strcmp(arch, "qwen3moe")));
    if (!strcmp(arch, "qwen3moe")) { /* mkmodel's 8 experts, 2 routed, of width 64; no dense FFN */
        CHECK(m->hp.n_expert == 8 && m->hp.n_expert_used == 2 && m->hp.n_ff_exp == 64);
        CHECK(m->layers[0].ffn_gate_inp && m->layers[0].exp_down && m->layers[0].exp_down[7] && !m->layers[0].w_gate);
    }
    if (!strcmp(arch, "gpt-oss")) { /* experts as qwen3moe's, with biases; sinks; even layers local (window 8);
                                      * post_attention_norm as the FFN's norm; YaRN */
        CHECK(m->hp.n_expert == 8 && m->hp.n_expert_used == 2 && m->hp.n_ff_exp == 64 && m->hp.moe_oai);
        CHECK(m->layers[0].ffn_gate_inp && m->layers[0].exp_down && m->layers[0].exp_down[7] && !m->layers[0].w_gate);
        CHECK(m->layers[1].attn_sinks && m->layers[1].bo && m->layers[1].ffn_gate_inp_b && m->layers[1].exp_gate_b &&
              m->layers[1].exp_up_b && m->layers[1].exp_down_b && m->layers[1].bq && m->layers[1].ffn_norm);
        CHECK(m->layers[0].window == 8 && m->layers[1].window == 0 && m->layers[2].window == 8);
        CHECK(m->layers[0].rope_theta == 10000.0f && m->layers[1].rope_theta == 10000.0f);
        /* YaRN, factor 32 over 4096 positions: the first pairs' angles
         * kept, the last ones' divided by 32; magnitude 1 + 0.1 ln 32 */
        CHECK(m->rope_freqs && m->rope_freqs[0] == 1.0f && m->rope_freqs[7] == 32.0f);
        CHECK(fabsf(m->hp.rope_mscale - 1.3465736f) < 1e-6f);
        CHECK(!m->layers[0].attn_q_norm && !m->layers[0].attn_post_norm);
    }
    if (!strcmp(arch, "gemma2")) { /* even layers local (window 8), soft-capped scores and logits, Q pre-scaled */
        CHECK_EQ(m->hp.head_dim, 32);
        CHECK(m->layers[0].window == 8 && m->layers[1].window == 0 && m->layers[2].window == 8);
        CHECK(m->hp.attn_softcap == 5.0f && m->hp.logit_softcap == 15.0f && m->hp.scale_q);
        CHECK(m->layers[0].attn_post_norm && m->layers[0].ffn_post_norm);
    }
    if (gemma) { /* heads of 32 on n_embd 64; layers 0 and 1 local (window 4, base 10000), 2 global */
        CHECK_EQ(m->hp.head_dim, 32);
        CHECK_EQ(m->hp.q_dim, 128);
        CHECK_EQ(m->layers[0].window, 4);
        CHECK_EQ(m->layers[1].window, 4);
        CHECK_EQ(m->layers[2].window, 0);
        CHECK(m->layers[0].rope_theta == 10000.0f && m->layers[2].rope_theta == 1e6f);
        CHECK(fabsf(m->hp.embd_scale - 8.0f) < 1e-6f);
    }
    int V = m->hp.n_vocab;
    int32_t toks[20];
    for (int i = 0; i < 20; i++)
        toks[i] = (i * 37 + 11) % 256;
    float *a = malloc(sizeof(float) * V), *b = malloc(sizeof(float) * V), *c = malloc(sizeof(float) * V);
    struct kvfs_kv_cache full, inc, back;
    check_decode_vs_prefill(arch, m, toks, &full, &inc, a, b);
    float scale, d;
    /* first 14 tokens as a chunk, read back into a fresh cache, then continue */
    struct kvfs_writer w;
    CHECK_EQ(kvfs_kv_cache_to_chunk(m, &inc, 0, 14, toks, KVFS_DTYPE_F16, &w), 0);
    struct kvfs_header h;
    CHECK_EQ(kvfs_file_verify(w.buf, w.size, &h, err, sizeof(err)), 0);
    CHECK_EQ(h.n_tokens, 14);
    CHECK(h.flags & KVFS_FLAG_KEYS_ROPED);
    CHECK_EQ(kvfs_kv_cache_init(m, 32, &back), 0);
    CHECK_EQ(kvfs_kv_cache_load_chunk(m, &back, w.buf, w.size, err, sizeof(err)), 0);
    for (int i = 14; i < 20; i++)
        CHECK_EQ(kvfs_forward(m, &back, &toks[i], 1, i, c), 0);
    d = max_diff(b, c, V, &scale);
    fprintf(stderr, "%s: continue from chunk vs in memory max |dlogit| %.2e\n", arch, d);
    CHECK(d == 0.0f); /* the cache holds f16-precision K/V: the file is exact */
    kvfs_writer_free(&w);
    check_pos0(m, toks, 16);
    /* a full cache refuses more tokens */
    struct kvfs_kv_cache small;
    CHECK_EQ(kvfs_kv_cache_init(m, 4, &small), 0);
    CHECK(kvfs_forward(m, &small, toks, 5, 0, NULL) < 0);
    CHECK(kvfs_forward(m, &small, (int32_t[]){9999}, 1, 0, NULL) < 0); /* token out of range */
    kvfs_kv_cache_free(m, &small);
    kvfs_kv_cache_free(m, &full);
    kvfs_kv_cache_free(m, &inc);
    kvfs_kv_cache_free(m, &back);

    /* RoPE: rotating by p then by q equals rotating by p + q (re-positioning) */
    const struct kvfs_backend_iface *be = m->be.iface;
    float x[2][64], y[64];
    for (int i = 0; i < 64; i++)
        x[0][i] = x[1][i] = sinf((float)i);
    int32_t p1 = 7, p2 = 123, p12 = 130, back_delta = -130;
    be->rope(m->be.ctx, x[0], &p1, 1, 1, 64, 64, 10000.0f, m->hp.rope_style, NULL);
    be->rope(m->be.ctx, x[0], &p2, 1, 1, 64, 64, 10000.0f, m->hp.rope_style, NULL);
    memcpy(y, x[1], sizeof(y));
    be->rope(m->be.ctx, x[1], &p12, 1, 1, 64, 64, 10000.0f, m->hp.rope_style, NULL);
    CHECK(max_diff(x[0], x[1], 64, &scale) < 1e-4f);
    be->rope(m->be.ctx, x[1], &back_delta, 1, 1, 64, 64, 10000.0f, m->hp.rope_style, NULL);
    CHECK(max_diff(x[1], y, 64, &scale) < 1e-4f);

    /* tokenizer of the synthetic model: bytes round trip */
    struct kvfs_tokenizer *t;
    CHECK_EQ(kvfs_tokenizer_load(m->gguf, &t, err, sizeof(err)), 0);
    const char *text = "Hello, wörld! 123  \n";
    int32_t *ids;
    size_t n;
    CHECK_EQ(kvfs_tokenize(t, text, strlen(text), 0, 0, &ids, &n), 0);
    CHECK_EQ(n, strlen(text)); /* no merges: one token per byte */
    char *out;
    CHECK_EQ(kvfs_detokenize(t, ids, n, &out), 0);
    CHECK(!strcmp(out, text));
    int32_t *bad_ids;
    CHECK_EQ(kvfs_tokenize(t, "\xff\xfe", 2, 0, 0, &bad_ids, &n), -EILSEQ); /* not UTF-8 */
    free(out);
    free(ids);
    kvfs_tokenizer_free(t);
    free(a);
    free(b);
    free(c);
    kvfs_model_free(m);
}

/* gemma4 (synthetic, 6 layers): local layers' heads half the global ones'
 * width, the global layers with half the KV heads; the last two layers reading layers 2 and 3's cache (the same
 * buffers, not copies), computing no K/V; frequency factors on the global
 * layers only; per-layer embeddings.  Decoding token by token gives the
 * prefill's logits (the per-layer inputs and shared caches of one row at a
 * time).  Its chunk (KVFS_FLAG_LAYER_SHAPES) holds each layer at its own
 * width and nothing for the shared-KV layers; loaded into a fresh cache it
 * gives the same rows and, decoding on, the same logits, bit for bit (f32);
 * quantized dtypes are refused for it. */
static void check_gemma4(const char *path)
{
    struct kvfs_synth_model_opts o = {"gemma4", 6, 64, 4, 2, 128, 1e6f, 42, 0, 0, 0, 0, NULL, 0.0f, 0, 0};
    struct kvfs_model *m = load_synth(path, &o);
    char err[256];
    if (!m)
        return;
    CHECK(m->hp.head_dim == 32 && m->hp.q_dim == 128 && m->hp.n_ple == 16 && m->hp.v_norm);
    CHECK(m->hp.n_kv_head == 2 && m->hp.n_ff == 256); /* the largest, for buffers */
    CHECK(m->hp.attn_scale == 1.0f && !m->hp.scale_q && m->hp.logit_softcap == 15.0f);
    for (int l = 0; l < 6; l++) {
        const struct kvfs_layer_weights *L = &m->layers[l];
        int local = l % 2 == 0;
        CHECK_EQ(L->head_dim, local ? 16 : 32);
        CHECK_EQ(L->rope_dim, local ? 16 : 32);
        CHECK_EQ(L->window, local ? 8 : 0);
        CHECK((L->rope_freqs != NULL) == !local);
        CHECK_EQ(L->kv_layer, l < 4 ? l : l - 2);
        CHECK_EQ(L->n_kv_head, local ? 2 : 1); /* the global layers' KV heads halved; the shared ones' sources' */
        CHECK_EQ(L->n_ff, l < 4 ? 128 : 256);  /* the shared-KV layers' FFN twice as wide */
        CHECK((L->wk != NULL) == (l < 4));
        CHECK(L->ple_gate && L->ple_proj && L->ple_post_norm && L->out_scale != 0.0f);
    }
    int V = m->hp.n_vocab;
    int32_t toks[20];
    for (int i = 0; i < 20; i++)
        toks[i] = (i * 37 + 11) % 256;
    float *a = malloc(sizeof(float) * V), *b = malloc(sizeof(float) * V);
    struct kvfs_kv_cache full, inc;
    check_decode_vs_prefill("gemma4", m, toks, &full, &inc, a, b);
    CHECK(full.k[4] == full.k[2] && full.v[5] == full.v[3] && full.k[3] != full.k[2]);
    struct kvfs_writer w;
    struct kvfs_header h;
    CHECK(kvfs_model_chunk_refusal(m) == NULL && kvfs_model_shaped(m));
    CHECK_EQ(kvfs_kv_cache_to_chunk(m, &inc, 0, 14, toks, KVFS_DTYPE_Q8, &w), -ENOTSUP);
    CHECK_EQ(kvfs_kv_cache_to_chunk(m, &inc, 0, 14, toks, KVFS_DTYPE_F32, &w), 0);
    CHECK_EQ(kvfs_file_verify(w.buf, w.size, &h, err, sizeof(err)), 0);
    CHECK(h.flags & KVFS_FLAG_LAYER_SHAPES);
    uint64_t want_size = h.header_size;
    for (uint32_t l = 0; l < 6; l++) { /* local 2 x 16, global 1 x 32: 32 values per row either way */
        CHECK_EQ(kvfs_layer_bytes(&h, l), l < 4 ? 2ull * 14 * 32 * 4 : 0);
        want_size += (kvfs_layer_bytes(&h, l) + KVFS_ALIGN - 1) / KVFS_ALIGN * KVFS_ALIGN;
        struct kvfs_layer_shape sh;
        kvfs_layer_shape_get(&h, l, &sh);
        CHECK(sh.kv_source == (l < 4 ? l : l - 2) && sh.head_dim == (l % 2 ? 32u : 16u));
    }
    CHECK_EQ(w.size, want_size);
    struct kvfs_kv_cache ld;
    CHECK_EQ(kvfs_kv_cache_init(m, 32, &ld), 0);
    CHECK_EQ(kvfs_kv_cache_load_chunk(m, &ld, w.buf, w.size, err, sizeof(err)), 0);
    CHECK_EQ(ld.n, 14);
    size_t rows = 14 * 32;
    float *x = malloc(sizeof(float) * rows), *y = malloc(sizeof(float) * rows);
    int same = 1;
    for (int l = 0; l < 4; l++)
        for (int kv = 0; kv < 2; kv++) {
            m->be.iface->download(m->be.ctx, x, (kv ? inc.v : inc.k)[l], sizeof(float) * rows);
            m->be.iface->download(m->be.ctx, y, (kv ? ld.v : ld.k)[l], sizeof(float) * rows);
            same &= !memcmp(x, y, sizeof(float) * rows);
        }
    CHECK(same);
    for (int i = 14; i < 20; i++)
        CHECK_EQ(kvfs_forward(m, &ld, &toks[i], 1, i, a), 0);
    CHECK(!memcmp(a, b, sizeof(float) * V)); /* the same logits as the cache that wrote it */
    free(x);
    free(y);
    kvfs_kv_cache_free(m, &ld);
    kvfs_writer_free(&w);
    kvfs_kv_cache_free(m, &full);
    kvfs_kv_cache_free(m, &inc);
    free(a);
    free(b);
    kvfs_model_free(m);
}

int main(void)
{
    char path[64];
    snprintf(path, sizeof(path), "/tmp/kvfs-test-model.%d.gguf", (int)getpid());
    check_model("llama", path);
    check_model("qwen2", path);
    check_model("gemma3", path);
    check_model("gemma2", path);
    check_model("qwen3moe", path);
    check_model("gpt-oss", path);
    check_model("deepseek2", path);
    check_gemma4(path);
    check_batch_invariance("llama", path);
    check_batch_invariance("gemma3", path);
    /* not qwen3moe: its experts' products have other row counts in each
     * split, which the CPU gemm sums otherwise (logits within 4e-6) */
    struct kvfs_backend cpu;
    if (kvfs_backend_cpu_init(2, &cpu) == 0) {
        check_window_attention(&cpu);
        check_attention_invariance(&cpu);
        check_sparse_query_invariance(&cpu, 4, 2, 1);
        check_sparse_query_invariance(&cpu, 4, 2, 0);
        check_sparse_query_invariance(&cpu, 9, 3, 0);
        kvfs_backend_free(&cpu);
    }
    /* malformed model files are rejected, not crashed on */
    FILE *f = fopen(path, "r+b");
    if (f) {
        fseek(f, 8, SEEK_SET);
        fputc(0x7f, f); /* absurd tensor count */
        fclose(f);
    }
    struct kvfs_model *m;
    char err[256] = "";
    CHECK(kvfs_model_load(path, "cpu", 1, &m, err, sizeof(err)) < 0);
    CHECK(strlen(err) > 0);
    truncate(path, 100);
    CHECK(kvfs_model_load(path, "cpu", 1, &m, err, sizeof(err)) < 0);
    CHECK(kvfs_model_load("/nonexistent.gguf", "cpu", 1, &m, err, sizeof(err)) < 0);
    unlink(path);
    CHECK_DONE();
}
