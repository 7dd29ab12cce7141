/* gpu_blend.c - blend TTFT vs full prefill on the CUDA backend with a
 * synthetic model of Llama-3-8B's shapes (32 layers, 4096 wide, 32 heads,
 * 8 KV heads, head_dim 128, ffn 14336; random f32 weights made in memory,
 * nothing downloaded; vocabulary cut to 32768): 6 chunks x 512 tokens + a
 * 32-token query.  Usage: gpu_blend [backend] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "blend.h"
#include "forward.h"
#include "model.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rs = 99;
static float frand(void)
{
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    return ((float)(rs >> 40) / (float)(1 << 24) - 0.5f);
}

static struct kvfs_weight *W(struct kvfs_model *m, const float *src, int out, int in)
{
    struct kvfs_weight *w = NULL;
    if (m->be.iface->weight_create(m->be.ctx, src, out, in, &w)) {
        fprintf(stderr, "weight alloc failed\n");
        exit(1);
    }
    return w;
}

static float *V(struct kvfs_model *m, const float *src, int n)
{
    float *d;
    m->be.iface->alloc(m->be.ctx, sizeof(float) * n, (void **)&d);
    m->be.iface->upload(m->be.ctx, d, src, sizeof(float) * n);
    return d;
}

int main(int argc, char **argv)
{
    const char *backend = argc > 1 ? argv[1] : "cuda";
    struct kvfs_model *m = calloc(1, sizeof(*m));
    struct kvfs_hparams *hp = &m->hp;
    *hp = (struct kvfs_hparams){"llama", 32, 4096, 32, 8, 128, 14336, 32768, 8192, 1e-5f, 500000.0f, 128,
                                KVFS_ROPE_STYLE_NORM};
    if (kvfs_backend_init_by_name(backend, 0, &m->be) != 0) {
        printf("skip: backend %s unavailable\n", backend);
        return 77;
    }
    double t0 = now();
    size_t big = (size_t)14336 * 4096;
    float *h = malloc(sizeof(float) * (big + 1024)), *ones = malloc(sizeof(float) * 4096);
    for (size_t i = 0; i < big + 1024; i++)
        h[i] = frand() * 0.04f;
    for (int i = 0; i < 4096; i++)
        ones[i] = 1.0f;
    float *emb = malloc(sizeof(float) * (size_t)hp->n_vocab * 4096);
    for (size_t i = 0; i < (size_t)hp->n_vocab * 4096; i++)
        emb[i] = frand();
    m->tok_embd = V(m, emb, hp->n_vocab * 4096);
    m->output = W(m, emb, hp->n_vocab, 4096);
    m->output_norm = V(m, ones, 4096);
    m->layers = calloc(32, sizeof(*m->layers));
    for (int l = 0; l < 32; l++) {
        struct kvfs_layer_weights *L = &m->layers[l];
        L->attn_norm = V(m, ones, 4096);
        L->ffn_norm = V(m, ones, 4096);
        L->wq = W(m, h + l, 4096, 4096);
        L->wk = W(m, h + 7 * l, 1024, 4096);
        L->wv = W(m, h + 13 * l, 1024, 4096);
        L->wo = W(m, h + 17 * l, 4096, 4096);
        L->w_gate = W(m, h, 14336, 4096);
        L->w_up = W(m, h + 3, 14336, 4096);
        L->w_down = W(m, h + 5, 4096, 14336);
    }
    struct kvfs_fingerprint *fp = &m->fp;
    *fp = (struct kvfs_fingerprint){32, 8, 128, KVFS_ROPE_NORM, 500000.0f, 128, "llama", {0}, 32, 4096};
    memcpy(fp->model_id, "synthetic-llama-3-8b-shapes.....", 32);
    printf("model built in %.1f s (backend %s)\n", now() - t0, m->be.iface->name);
    enum { K = 6, L = 512, Q = 32 };
    int32_t *toks = malloc(sizeof(int32_t) * (K * L + Q));
    for (int i = 0; i < K * L + Q; i++)
        toks[i] = (int32_t)((i * 7919u) % (unsigned)hp->n_vocab);
    struct kvfs_writer w[K];
    struct kvfs_blend_chunk ch[K];
    for (int i = 0; i < K; i++) {
        struct kvfs_kv_cache c;
        kvfs_kv_cache_init(m, L, &c);
        if (kvfs_forward(m, &c, toks + i * L, L, 0, NULL) || kvfs_kv_cache_to_chunk(m, &c, 0, L, toks + i * L,
                                                                                    KVFS_DTYPE_F16, &w[i])) {
            fprintf(stderr, "chunk prefill failed\n");
            return 1;
        }
        kvfs_kv_cache_free(m, &c);
        ch[i] = (struct kvfs_blend_chunk){w[i].buf, w[i].size};
    }
    float *lf = malloc(sizeof(float) * hp->n_vocab), *lb = malloc(sizeof(float) * hp->n_vocab);
    double full[3], bl[3][3];
    float ratios[3] = {0.0f, 0.15f, 1.0f};
    char err[256];
    for (int rep = 0; rep < 3; rep++) {
        struct kvfs_kv_cache c;
        kvfs_kv_cache_init(m, K * L + Q, &c);
        double t = now();
        kvfs_forward(m, &c, toks, K * L + Q, 0, lf);
        full[rep] = now() - t;
        kvfs_kv_cache_free(m, &c);
        for (int r = 0; r < 3; r++) {
            struct kvfs_kv_cache bc;
            int32_t *bt;
            t = now();
            if (kvfs_blend(m, ch, K, toks + K * L, Q, ratios[r], &bc, &bt, lb, NULL, err, sizeof(err))) {
                fprintf(stderr, "blend: %s\n", err);
                return 1;
            }
            bl[r][rep] = now() - t;
            kvfs_kv_cache_free(m, &bc);
            free(bt);
        }
    }
    /* medians of 3 */
#define MED(a) ((a)[0] < (a)[1] ? ((a)[1] < (a)[2] ? (a)[1] : ((a)[0] < (a)[2] ? (a)[2] : (a)[0])) \
                                : ((a)[0] < (a)[2] ? (a)[0] : ((a)[1] < (a)[2] ? (a)[2] : (a)[1])))
    printf("| method | TTFT ms (median of 3) | speedup vs full prefill |\n|---|---|---|\n");
    printf("| full prefill (%d tokens) | %.1f | 1.00x |\n", K * L + Q, 1e3 * MED(full));
    for (int r = 0; r < 3; r++)
        printf("| blend ratio %.2f | %.1f | %.2fx |\n", (double)ratios[r], 1e3 * MED(bl[r]), MED(full) / MED(bl[r]));
    return 0;
}
