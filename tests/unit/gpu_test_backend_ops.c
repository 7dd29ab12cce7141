/* gpu_test_backend_ops.c - every backend op on CPU and CUDA with random
 * inputs, compared with a normalized error ||a - b|| / ||a|| (like ggml's
 * test-backend-ops), on SmolLM2's and Llama-3-8B's shapes; then a whole
 * synthetic model (prefill, decode, blend) on both.  Exit 77 without a GPU. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "blend.h"
#include "blend_internal.h"
#include "check.h"
#include "forward.h"
#include "gguf.h"
#include "kvformat.h"
#include "kvquant.h"
#include "synth_model.h"

/* gpu32: attention in f32 only; gpusplit: keys in 3 runs; gpuwhole: keys never split */
static struct kvfs_backend cpu, gpu, gpu32, gpusplit, gpuwhole;
static uint64_t rs = 12345;
static float frand(void)
{
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    return (float)(rs >> 40) / (float)(1 << 24) * 2.0f - 1.0f;
}

static void *dev_of(struct kvfs_backend *b, const void *host, size_t bytes)
{
    void *d = NULL;
    if (b->iface->alloc(b->ctx, bytes, &d) == 0 && host)
        b->iface->upload(b->ctx, d, host, bytes);
    return d;
}

static float *fill(size_t n)
{
    float *x = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++)
        x[i] = frand();
    return x;
}

static double nerr(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)a[i] * a[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* run op on both backends: inputs host arrays, one output of out_n floats */
#define BOTH(expr_cpu, expr_gpu) do { CHECK_EQ(expr_cpu, 0); CHECK_EQ(expr_gpu, 0); } while (0)

static void report(const char *op, const char *shape, double e, double tol)
{
    printf("%-12s %-28s nerr %.3e (tol %.0e) %s\n", op, shape, e, tol, e <= tol ? "ok" : "FAIL");
    CHECK(e <= tol);
}

/* gpt-oss's sinks (attention_sinks, attn_mass_sinks: each head's logit in
 * its softmax's max and sum, with no value) on backend B against the CPU:
 * a causal prefill; through a window and soft-capped; a blend's sparse
 * queries over keys in no position order.  Sinks from -1 to 3 (the scores'
 * size), head 1's at 12, far above its scores (its keys keep ~e^-11 of the
 * mass: no overflow, the error still relative).  q, k, v on both sides. */
/* test_shapes' passes: f32, tensor cores split as planned, in 3 runs, never split */
static const char *pass_label(int pass)
{
    static const char *const l[] = {"", " tc", " tc split", " tc whole"};
    return l[pass];
}
static const char *mass_label(int pass)
{
    static const char *const l[] = {"", " (2)", " (3)", " (4)"};
    return l[pass];
}

static void test_sinks(struct kvfs_backend *B, int pass, const char *shape, int n, int n_head, int n_kv_head, int hd,
                       const float *q, const float *k, const float *v, const float *dq, const float *dk,
                       const float *dv, double tol, float *oc, float *og, float *dy)
{
    const struct kvfs_backend_iface *C = cpu.iface, *G = B->iface;
    int embd = n_head * hd, nsel = n / 7 + 1;
    float sk[256], sc = 1.0f / sqrtf((float)hd);
    for (int h = 0; h < n_head; h++)
        sk[h] = h == 1 ? 12.0f : -1.0f + 0.5f * (float)((h * 7) % 9);
    int32_t *kvp = malloc(sizeof(int32_t) * n), *qp = malloc(sizeof(int32_t) * n);
    for (int i = 0; i < n; i++)
        kvp[i] = qp[i] = i;
    float *dsk = dev_of(B, sk, sizeof(float) * n_head);
    int32_t *dkvp = dev_of(B, kvp, sizeof(int32_t) * n), *dqp = dev_of(B, qp, sizeof(int32_t) * n);
    char lab[96];
    static const struct { int window; float cap; const char *what; } cases[] = {
        {0, 0.0f, "sinks"}, {40, 0.0f, "sinks window"}, {40, 0.5f, "sinks softcap"}};
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        BOTH(C->attention_sinks(cpu.ctx, q, qp, n, k, v, kvp, n, n_head, n_kv_head, hd, sc, cases[c].window,
                                cases[c].cap, sk, oc),
             G->attention_sinks(B->ctx, dq, dqp, n, dk, dv, dkvp, n, n_head, n_kv_head, hd, sc, cases[c].window,
                                cases[c].cap, dsk, dy));
        G->download(B->ctx, og, dy, sizeof(float) * n * embd);
        snprintf(lab, sizeof(lab), "attn %s%s", cases[c].what, pass_label(pass));
        report(lab, shape, nerr(oc, og, (size_t)n * embd), tol);
    }
    /* sparse queries (a blend's recomputed rows), then over unsorted keys */
    for (int i = 0; i < nsel; i++)
        qp[i] = (i * 7919) % n;
    G->upload(B->ctx, dqp, qp, sizeof(int32_t) * nsel);
    for (int unsorted = 0; unsorted <= 1; unsorted++) {
        for (int i = 0; i < n; i++)
            kvp[i] = unsorted ? (int32_t)((i * 7919u) % (unsigned)n) : i;
        G->upload(B->ctx, dkvp, kvp, sizeof(int32_t) * n);
        BOTH(C->attention_sinks(cpu.ctx, q, qp, nsel, k, v, kvp, n, n_head, n_kv_head, hd, sc, 40, 0.0f, sk, oc),
             G->attention_sinks(B->ctx, dq, dqp, nsel, dk, dv, dkvp, n, n_head, n_kv_head, hd, sc, 40, 0.0f, dsk,
                                dy));
        G->download(B->ctx, og, dy, sizeof(float) * nsel * embd);
        snprintf(lab, sizeof(lab), "attn sinks %s%s", unsorted ? "unsorted" : "sparse",
                 pass_label(pass));
        report(lab, shape, nerr(oc, og, (size_t)nsel * embd), tol);
        /* the blend's votes: attention mass of the sparse queries, the
         * sinks' share left out; f32 on both passes */
        float *mc = calloc((size_t)n, sizeof(float)), *mg = malloc(sizeof(float) * n);
        float *dm = dev_of(B, mc, sizeof(float) * n);
        for (int w = 0; w <= 64; w += 64) {
            memset(mc, 0, sizeof(float) * n);
            G->upload(B->ctx, dm, mc, sizeof(float) * n);
            float cap = w ? 0.5f : 0.0f;
            BOTH(C->attn_mass_sinks(cpu.ctx, q, qp, nsel, k, kvp, n, n_head, n_kv_head, hd, sc, w, cap, sk, mc),
                 G->attn_mass_sinks(B->ctx, dq, dqp, nsel, dk, dkvp, n, n_head, n_kv_head, hd, sc, w, cap, dsk, dm));
            G->download(B->ctx, mg, dm, sizeof(float) * n);
            snprintf(lab, sizeof(lab), "mass sinks%s%s%s", w ? " window cap" : "", unsorted ? " unsorted" : "",
                     mass_label(pass));
            report(lab, shape, nerr(mc, mg, (size_t)n), 1e-5);
        }
        G->free(B->ctx, dm);
        free(mc), free(mg);
    }
    G->free(B->ctx, dsk), G->free(B->ctx, dkvp), G->free(B->ctx, dqp);
    free(kvp), free(qp);
}

/* attn_mass_sinks with more query-head rows x keys than the scratch's 64 Mi
 * cells: the one-block-per-(query, head) kernel (k_attn_mass) and its
 * atomics; gpt-oss 20B's heads (64 of 64, 8 KV heads) */
static void test_mass_many(void)
{
    enum { NQ = 64, NH = 64, NKH = 8, HD = 64, NKV = 16400 };
    const struct kvfs_backend_iface *C = cpu.iface, *G = gpu.iface;
    float *q = fill((size_t)NQ * NH * HD), *k = fill((size_t)NKV * NKH * HD), sk[NH];
    int32_t *qp = malloc(sizeof(int32_t) * NQ), *kvp = malloc(sizeof(int32_t) * NKV);
    for (int h = 0; h < NH; h++)
        sk[h] = -1.0f + 0.5f * (float)((h * 7) % 9);
    for (int i = 0; i < NQ; i++)
        qp[i] = NKV - 400 + 5 * i;
    for (int j = 0; j < NKV; j++)
        kvp[j] = j;
    float *dq = dev_of(&gpu, q, sizeof(float) * NQ * NH * HD), *dk = dev_of(&gpu, k, sizeof(float) * NKV * NKH * HD);
    float *dsk = dev_of(&gpu, sk, sizeof(sk));
    int32_t *dqp = dev_of(&gpu, qp, sizeof(int32_t) * NQ), *dkvp = dev_of(&gpu, kvp, sizeof(int32_t) * NKV);
    float *mc = malloc(sizeof(float) * NKV), *mg = malloc(sizeof(float) * NKV);
    float *dm = dev_of(&gpu, NULL, sizeof(float) * NKV);
    for (int w = 0; w <= 1000; w += 1000) {
        memset(mc, 0, sizeof(float) * NKV);
        G->upload(gpu.ctx, dm, mc, sizeof(float) * NKV);
        BOTH(C->attn_mass_sinks(cpu.ctx, q, qp, NQ, k, kvp, NKV, NH, NKH, HD, 0.125f, w, 0.0f, sk, mc),
             G->attn_mass_sinks(gpu.ctx, dq, dqp, NQ, dk, dkvp, NKV, NH, NKH, HD, 0.125f, w, 0.0f, dsk, dm));
        G->download(gpu.ctx, mg, dm, sizeof(float) * NKV);
        report("mass sinks", w ? "64x64 heads, 16400 keys, window" : "64x64 heads, 16400 keys", nerr(mc, mg, NKV),
               1e-5);
    }
    void *devs[] = {dq, dk, dsk, dqp, dkvp, dm};
    for (size_t i = 0; i < sizeof(devs) / sizeof(devs[0]); i++)
        G->free(gpu.ctx, devs[i]);
    free(q), free(k), free(qp), free(kvp), free(mc), free(mg);
}

static void test_shapes(int n, int embd, int n_head, int n_kv_head, int ff, const char *label)
{
    int hd = embd / n_head, kv = n_kv_head * hd;
    char shape[64];
    snprintf(shape, sizeof(shape), "%s n=%d", label, n);
    float *x = fill((size_t)n * embd), *wt = fill((size_t)ff * embd), *g = fill((size_t)embd), *b = fill((size_t)ff);
    float *oc = malloc(sizeof(float) * (size_t)n * ff), *og = malloc(sizeof(float) * (size_t)n * ff);
    const struct kvfs_backend_iface *C = cpu.iface, *G = gpu.iface;
    /* matmul with bias */
    struct kvfs_weight *wc, *wg;
    C->weight_create(cpu.ctx, wt, ff, embd, &wc);
    G->weight_create(gpu.ctx, wt, ff, embd, &wg);
    float *dx = dev_of(&gpu, x, sizeof(float) * n * embd), *db = dev_of(&gpu, b, sizeof(float) * ff);
    float *dy = dev_of(&gpu, NULL, sizeof(float) * (size_t)n * ff);
    BOTH(C->matmul(cpu.ctx, wc, b, x, oc, n), G->matmul(gpu.ctx, wg, db, dx, dy, n));
    G->download(gpu.ctx, og, dy, sizeof(float) * (size_t)n * ff);
    report("matmul", shape, nerr(oc, og, (size_t)n * ff), 1e-5);
    /* rmsnorm */
    float *dg = dev_of(&gpu, g, sizeof(float) * embd);
    BOTH(C->rmsnorm(cpu.ctx, x, g, oc, n, embd, 1e-5f), G->rmsnorm(gpu.ctx, dx, dg, dy, n, embd, 1e-5f));
    G->download(gpu.ctx, og, dy, sizeof(float) * n * embd);
    report("rmsnorm", shape, nerr(oc, og, (size_t)n * embd), 1e-5);
    /* rope, both styles, positions incl. negative deltas */
    int32_t *pos = malloc(sizeof(int32_t) * n);
    for (int i = 0; i < n; i++)
        pos[i] = (i * 37) % 4096 - 100;
    int32_t *dpos = dev_of(&gpu, pos, sizeof(int32_t) * n);
    float rf[256]; /* Llama 3.1-style frequency factors, 1 to 8 */
    for (int j = 0; j < hd / 2 && j < 256; j++)
        rf[j] = 1.0f + 7.0f * (float)((j * 5) % 9) / 8.0f;
    for (int k = 0; k < 4; k++) {
        int style = k & 2, with_ff = k & 1;
        memcpy(oc, x, sizeof(float) * n * embd);
        G->upload(gpu.ctx, dy, x, sizeof(float) * n * embd);
        BOTH(C->rope(cpu.ctx, oc, pos, n, n_head, hd, hd, 500000.0f, style, with_ff ? rf : NULL),
             G->rope(gpu.ctx, dy, dpos, n, n_head, hd, hd, 500000.0f, style, with_ff ? rf : NULL));
        G->download(gpu.ctx, og, dy, sizeof(float) * n * embd);
        report(style ? (with_ff ? "rope neox ff" : "rope neox") : (with_ff ? "rope norm ff" : "rope norm"), shape,
               nerr(oc, og, (size_t)n * embd), 1e-5);
    }
    /* add, swiglu, round_f16, act_quant */
    float *dx2 = dev_of(&gpu, wt, sizeof(float) * n * embd);
    BOTH(C->add(cpu.ctx, x, wt, oc, (size_t)n * embd), G->add(gpu.ctx, dx, dx2, dy, (size_t)n * embd));
    G->download(gpu.ctx, og, dy, sizeof(float) * n * embd);
    report("add", shape, nerr(oc, og, (size_t)n * embd), 1e-7);
    BOTH(C->swiglu(cpu.ctx, x, wt, oc, (size_t)n * embd), G->swiglu(gpu.ctx, dx, dx2, dy, (size_t)n * embd));
    G->download(gpu.ctx, og, dy, sizeof(float) * n * embd);
    report("swiglu", shape, nerr(oc, og, (size_t)n * embd), 1e-6);
    /* geglu (gemma3) over gates spanning its table and both cut-offs */
    for (size_t i = 0; i < (size_t)n * embd; i++)
        oc[i] = x[i] * 12.0f;
    float *dgate = dev_of(&gpu, oc, sizeof(float) * n * embd);
    BOTH(C->geglu(cpu.ctx, oc, wt, oc, (size_t)n * embd), G->geglu(gpu.ctx, dgate, dx2, dy, (size_t)n * embd));
    G->download(gpu.ctx, og, dy, sizeof(float) * n * embd);
    report("geglu", shape, nerr(oc, og, (size_t)n * embd), 0);
    G->free(gpu.ctx, dgate);
    /* swiglu_oai (gpt-oss's experts): gates and ups of +-12 on both sides
     * of the clamp at 7, in place as the model calls it */
    for (size_t i = 0; i < (size_t)n * embd; i++)
        oc[i] = x[i] * 12.0f, og[i] = wt[i] * 12.0f;
    dgate = dev_of(&gpu, oc, sizeof(float) * n * embd);
    float *dup = dev_of(&gpu, og, sizeof(float) * n * embd);
    BOTH(C->swiglu_oai(cpu.ctx, oc, og, oc, (size_t)n * embd, 1.702f, 7.0f),
         G->swiglu_oai(gpu.ctx, dgate, dup, dgate, (size_t)n * embd, 1.702f, 7.0f));
    G->download(gpu.ctx, og, dgate, sizeof(float) * n * embd);
    report("swiglu_oai", shape, nerr(oc, og, (size_t)n * embd), 1e-6);
    G->free(gpu.ctx, dgate);
    G->free(gpu.ctx, dup);
    BOTH(C->scale(cpu.ctx, x, 0.37f, oc, (size_t)n * embd), G->scale(gpu.ctx, dx, 0.37f, dy, (size_t)n * embd));
    G->download(gpu.ctx, og, dy, sizeof(float) * n * embd);
    report("scale", shape, nerr(oc, og, (size_t)n * embd), 0);
    /* mul_rows (mixture-of-experts routing weights), rows of embd */
    float *drow = dev_of(&gpu, wt, sizeof(float) * n);
    BOTH(C->mul_rows(cpu.ctx, x, wt, oc, n, embd), G->mul_rows(gpu.ctx, dx, drow, dy, n, embd));
    G->download(gpu.ctx, og, dy, sizeof(float) * n * embd);
    report("mul_rows", shape, nerr(oc, og, (size_t)n * embd), 0);
    G->free(gpu.ctx, drow);
    memcpy(oc, x, sizeof(float) * n * embd);
    G->upload(gpu.ctx, dy, x, sizeof(float) * n * embd);
    BOTH(C->round_f16(cpu.ctx, oc, (size_t)n * embd), G->round_f16(gpu.ctx, dy, (size_t)n * embd));
    G->download(gpu.ctx, og, dy, sizeof(float) * n * embd);
    report("round_f16", shape, nerr(oc, og, (size_t)n * embd), 0);
    BOTH(C->act_quant(cpu.ctx, x, oc, n, embd, 9), G->act_quant(gpu.ctx, dx, dy, n, embd, 9));
    G->download(gpu.ctx, og, dy, sizeof(float) * n * embd);
    report("act_quant", shape, nerr(oc, og, (size_t)n * embd), 1e-6);
    /* gather / scatter / get_rows / row_sqdiff */
    int32_t *idx = malloc(sizeof(int32_t) * n);
    for (int i = 0; i < n; i++)
        idx[i] = (n - 1 - i);
    int32_t *didx = dev_of(&gpu, idx, sizeof(int32_t) * n);
    BOTH(C->gather_rows(cpu.ctx, x, idx, oc, n, embd), G->gather_rows(gpu.ctx, dx, didx, dy, n, embd));
    G->download(gpu.ctx, og, dy, sizeof(float) * n * embd);
    report("gather_rows", shape, nerr(oc, og, (size_t)n * embd), 0);
    BOTH(C->scatter_rows(cpu.ctx, x, idx, oc, n, embd), G->scatter_rows(gpu.ctx, dx, didx, dy, n, embd));
    G->download(gpu.ctx, og, dy, sizeof(float) * n * embd);
    report("scatter_rows", shape, nerr(oc, og, (size_t)n * embd), 0);
    BOTH(C->row_sqdiff(cpu.ctx, x, wt, oc, n, embd), G->row_sqdiff(gpu.ctx, dx, dx2, dy, n, embd));
    G->download(gpu.ctx, og, dy, sizeof(float) * n);
    report("row_sqdiff", shape, nerr(oc, og, (size_t)n), 1e-5);
    /* attention: causal prefill, and sparse selected rows with arbitrary positions */
    float *q = fill((size_t)n * embd), *k = fill((size_t)n * kv), *v = fill((size_t)n * kv);
    int32_t *kvp = malloc(sizeof(int32_t) * n), *qp = malloc(sizeof(int32_t) * n);
    for (int i = 0; i < n; i++)
        kvp[i] = qp[i] = i;
    float *dq = dev_of(&gpu, q, sizeof(float) * n * embd), *dk = dev_of(&gpu, k, sizeof(float) * n * kv),
          *dv = dev_of(&gpu, v, sizeof(float) * n * kv);
    int32_t *dkvp = dev_of(&gpu, kvp, sizeof(int32_t) * n), *dqp = dev_of(&gpu, qp, sizeof(int32_t) * n);
    float sc = 1.0f / sqrtf((float)hd);
    int nsel = n / 7 + 1;
    /* three times: the f32 kernels (KVFS_CUDA_ATTN=f32), then the tensor
     * cores' (f16 inputs: a looser bound), which the backend uses from 16
     * rows, with the keys split as the device's size says (few query tiles
     * over many keys), then always split in 3 runs (KVFS_CUDA_ATTN_SPLIT=3),
     * then never split (=0: on a large device the plan splits every shape
     * here, so the unsplit kernel is checked only by this pass) */
    for (int pass = 0; pass < 4; pass++) {
        struct kvfs_backend *B = pass == 3 ? &gpuwhole : pass == 2 ? &gpusplit : pass ? &gpu : &gpu32;
        const struct kvfs_backend_iface *G = B->iface;
        double tol = pass ? 3e-3 : 1e-5;
        const char *tc = pass_label(pass);
        char lab[96];
        for (int i = 0; i < n; i++)
            kvp[i] = qp[i] = i;
        G->upload(B->ctx, dkvp, kvp, sizeof(int32_t) * n);
        G->upload(B->ctx, dqp, qp, sizeof(int32_t) * n);
        BOTH(C->attention(cpu.ctx, q, qp, n, k, v, kvp, n, n_head, n_kv_head, hd, sc, 0, 0.0f, oc),
             G->attention(B->ctx, dq, dqp, n, dk, dv, dkvp, n, n_head, n_kv_head, hd, sc, 0, 0.0f, dy));
        G->download(B->ctx, og, dy, sizeof(float) * n * embd);
        snprintf(lab, sizeof(lab), "%s%s", "attention", tc);
        report(lab, shape, nerr(oc, og, (size_t)n * embd), tol);
        /* a sliding-window layer's (gemma3's local layers) */
        BOTH(C->attention(cpu.ctx, q, qp, n, k, v, kvp, n, n_head, n_kv_head, hd, sc, 40, 0.0f, oc),
             G->attention(B->ctx, dq, dqp, n, dk, dv, dkvp, n, n_head, n_kv_head, hd, sc, 40, 0.0f, dy));
        G->download(B->ctx, og, dy, sizeof(float) * n * embd);
        snprintf(lab, sizeof(lab), "%s%s", "attn window", tc);
        report(lab, shape, nerr(oc, og, (size_t)n * embd), tol);
        /* and soft-capped (gemma2's local layers) */
        BOTH(C->attention(cpu.ctx, q, qp, n, k, v, kvp, n, n_head, n_kv_head, hd, sc, 40, 0.5f, oc),
             G->attention(B->ctx, dq, dqp, n, dk, dv, dkvp, n, n_head, n_kv_head, hd, sc, 40, 0.5f, dy));
        G->download(B->ctx, og, dy, sizeof(float) * n * embd);
        snprintf(lab, sizeof(lab), "%s%s", "attn softcap", tc);
        report(lab, shape, nerr(oc, og, (size_t)n * embd), tol);
        for (int i = 0; i < nsel; i++)
            qp[i] = (i * 7919) % n;
        G->upload(B->ctx, dqp, qp, sizeof(int32_t) * nsel);
        BOTH(C->attention(cpu.ctx, q, qp, nsel, k, v, kvp, n, n_head, n_kv_head, hd, sc, 0, 0.0f, oc),
             G->attention(B->ctx, dq, dqp, nsel, dk, dv, dkvp, n, n_head, n_kv_head, hd, sc, 0, 0.0f, dy));
        G->download(B->ctx, og, dy, sizeof(float) * nsel * embd);
        snprintf(lab, sizeof(lab), "%s%s", "attn sparse", tc);
        report(lab, shape, nerr(oc, og, (size_t)nsel * embd), tol);
        /* attention mass of the sparse queries over every key (query selection),
         * added to what out holds (the votes of earlier layers: 0.5 each here) */
        {
            float *mc = calloc((size_t)n, sizeof(float)), *mg = malloc(sizeof(float) * n);
            for (int i = 0; i < n; i++)
                mc[i] = 0.5f;
            float *dm = dev_of(B, mc, sizeof(float) * n);
            BOTH(C->attn_mass(cpu.ctx, q, qp, nsel, k, kvp, n, n_head, n_kv_head, hd, sc, 0, 0.0f, mc),
                 G->attn_mass(B->ctx, dq, dqp, nsel, dk, dkvp, n, n_head, n_kv_head, hd, sc, 0, 0.0f, dm));
            G->download(B->ctx, mg, dm, sizeof(float) * n);
            snprintf(lab, sizeof(lab), "%s%s", "attn_mass", mass_label(pass));
            report(lab, shape, nerr(mc, mg, (size_t)n), 1e-5); /* one kernel, f32, on both passes */
            /* and through a sliding window (a local layer's votes) */
            memset(mc, 0, sizeof(float) * n);
            G->upload(B->ctx, dm, mc, sizeof(float) * n);
            BOTH(C->attn_mass(cpu.ctx, q, qp, nsel, k, kvp, n, n_head, n_kv_head, hd, sc, 64, 0.0f, mc),
                 G->attn_mass(B->ctx, dq, dqp, nsel, dk, dkvp, n, n_head, n_kv_head, hd, sc, 64, 0.0f, dm));
            G->download(B->ctx, mg, dm, sizeof(float) * n);
            snprintf(lab, sizeof(lab), "%s%s", "attn_mass window", mass_label(pass));
            report(lab, shape, nerr(mc, mg, (size_t)n), 1e-5);
            /* soft-capped (gemma2's votes) */
            memset(mc, 0, sizeof(float) * n);
            G->upload(B->ctx, dm, mc, sizeof(float) * n);
            BOTH(C->attn_mass(cpu.ctx, q, qp, nsel, k, kvp, n, n_head, n_kv_head, hd, sc, 64, 0.5f, mc),
                 G->attn_mass(B->ctx, dq, dqp, nsel, dk, dkvp, n, n_head, n_kv_head, hd, sc, 64, 0.5f, dm));
            G->download(B->ctx, mg, dm, sizeof(float) * n);
            snprintf(lab, sizeof(lab), "%s%s", "attn_mass softcap", mass_label(pass));
            report(lab, shape, nerr(mc, mg, (size_t)n), 1e-5);
            G->free(B->ctx, dm);
            free(mc);
            free(mg);
        }
        /* keys in no particular position order (a blend's rows after gathering) */
        for (int i = 0; i < n; i++)
            kvp[i] = (int32_t)((i * 7919u) % (unsigned)n);
        G->upload(B->ctx, dkvp, kvp, sizeof(int32_t) * n);
        BOTH(C->attention(cpu.ctx, q, qp, nsel, k, v, kvp, n, n_head, n_kv_head, hd, sc, 0, 0.0f, oc),
             G->attention(B->ctx, dq, dqp, nsel, dk, dv, dkvp, n, n_head, n_kv_head, hd, sc, 0, 0.0f, dy));
        G->download(B->ctx, og, dy, sizeof(float) * nsel * embd);
        snprintf(lab, sizeof(lab), "%s%s", "attn unsorted", tc);
        report(lab, shape, nerr(oc, og, (size_t)nsel * embd), tol);
        test_sinks(B, pass, shape, n, n_head, n_kv_head, hd, q, k, v, dq, dk, dv, tol, oc, og, dy);
    }
    /* upload_kv: a KV cache's f16 / bf16 / f32 bytes into f32 device rows */
    size_t cnt = (size_t)n * kv;
    uint16_t *h16 = malloc(2 * cnt);
    for (int type = KVFS_HOST_F32; type <= KVFS_HOST_BF16; type++) {
        const void *src = k;
        if (type != KVFS_HOST_F32) {
            for (size_t i = 0; i < cnt; i++)
                h16[i] = type == KVFS_HOST_F16 ? kvfs_f32_to_f16(k[i]) : kvfs_f32_to_bf16(k[i]);
            src = h16;
        }
        BOTH(C->upload_kv(cpu.ctx, oc, src, cnt, type), G->upload_kv(gpu.ctx, dy, src, cnt, type));
        G->download(gpu.ctx, og, dy, sizeof(float) * cnt);
        report(type == KVFS_HOST_F32 ? "upload_kv f32" : type == KVFS_HOST_F16 ? "upload_kv f16" : "upload_kv bf16",
               shape, nerr(oc, og, cnt), 0);
    }
    free(h16);
    /* upload_kvq: a q8/q4 chunk layer decoded on the device as the CPU
     * decodes it (FMA contraction may move the last bit) */
    for (int codec = KVFS_KVQ_Q8; codec <= KVFS_KVQ_Q4S && kv % 64 == 0; codec++) {
        size_t qb = kvfs_kvq_layer_bytes(codec, (uint32_t)n, (uint32_t)kv);
        uint8_t *blk = malloc(qb);
        float *kc = malloc(sizeof(float) * cnt), *vc = malloc(sizeof(float) * cnt);
        float *kg = malloc(sizeof(float) * cnt), *vg = malloc(sizeof(float) * cnt);
        float *dk2 = dev_of(&gpu, NULL, sizeof(float) * cnt), *dv2 = dev_of(&gpu, NULL, sizeof(float) * cnt);
        CHECK_EQ(kvfs_kvq_encode(codec, k, v, (uint32_t)n, (uint32_t)kv, blk), 0);
        BOTH(C->upload_kvq(cpu.ctx, kc, vc, blk, (uint32_t)n, (uint32_t)kv, codec),
             G->upload_kvq(gpu.ctx, dk2, dv2, blk, (uint32_t)n, (uint32_t)kv, codec));
        G->download(gpu.ctx, kg, dk2, sizeof(float) * cnt);
        G->download(gpu.ctx, vg, dv2, sizeof(float) * cnt);
        char what[32];
        snprintf(what, sizeof(what), "upload_kvq %s K", kvfs_kvq_name(codec));
        report(what, shape, nerr(kc, kg, cnt), 1e-6);
        snprintf(what, sizeof(what), "upload_kvq %s V", kvfs_kvq_name(codec));
        report(what, shape, nerr(vc, vg, cnt), 1e-6);
        G->free(gpu.ctx, dk2), G->free(gpu.ctx, dv2);
        free(blk), free(kc), free(vc), free(kg), free(vg);
    }
    /* topk: the token selection; ties (scores repeat every 97 rows) and
     * forced rows (every 50th) must come out identical on both */
    float *scores = malloc(sizeof(float) * n);
    uint8_t *forced = calloc((size_t)n, 1);
    int32_t *tc = malloc(sizeof(int32_t) * n), *tg = malloc(sizeof(int32_t) * n);
    for (int i = 0; i < n; i++) {
        scores[i] = i < 97 ? frand() * frand() + 1.0f : scores[i % 97];
        forced[i] = i % 50 == 49;
    }
    float *dsc = dev_of(&gpu, scores, sizeof(float) * n);
    uint8_t *dforced = dev_of(&gpu, forced, (size_t)n);
    int32_t *dtop = dev_of(&gpu, NULL, sizeof(int32_t) * n);
    for (int with_forced = 0; with_forced <= 1; with_forced++)
        for (int kk = 0; kk <= n; kk += n / 3 > 0 ? n / 3 : 1) {
            int k = kk ? kk : 1;
            BOTH(C->topk(cpu.ctx, scores, with_forced ? forced : NULL, n, k, tc),
                 G->topk(gpu.ctx, dsc, with_forced ? dforced : NULL, n, k, dtop));
            G->download(gpu.ctx, tg, dtop, sizeof(int32_t) * k);
            int same = memcmp(tc, tg, sizeof(int32_t) * k) == 0;
            for (int i = 0; with_forced && i < n; i++)
                if (forced[i] && k >= n / 50) { /* every forced row is in */
                    int found = 0;
                    for (int j = 0; j < k; j++)
                        found |= tg[j] == i;
                    same &= found;
                }
            char lab[80];
            snprintf(lab, sizeof(lab), "%s k=%d%s", shape, k, with_forced ? " forced" : "");
            report("topk", lab, same ? 0.0 : 1.0, 0);
        }
    G->free(gpu.ctx, dsc);
    G->free(gpu.ctx, dforced);
    G->free(gpu.ctx, dtop);
    free(scores); free(forced); free(tc); free(tg);
    void *devs[] = {dx, db, dy, dg, dpos, dx2, didx, dq, dk, dv, dkvp, dqp};
    for (size_t i = 0; i < sizeof(devs) / sizeof(devs[0]); i++)
        G->free(gpu.ctx, devs[i]);
    C->weight_free(cpu.ctx, wc);
    G->weight_free(gpu.ctx, wg);
    free(x); free(wt); free(g); free(b); free(oc); free(og); free(pos); free(idx);
    free(q); free(k); free(v); free(kvp); free(qp);
}

/* Weights kept encoded on the device: decoded rows equal the CPU decoder's
 * bit for bit; products of a few rows (decoding as they go, f32) and of many
 * (f16 tensor cores) against the f32 product of the decoded weight; Q8_K's
 * activation round trip equals the CPU's. */
/* A blend's question pass: 32 query rows after 1,500 keys (Llama-3-8B's
 * heads), sparse recomputed rows among them, through a window, with sinks:
 * the tensor cores' kernel with its keys split as the plan says (7 runs of
 * 4 tiles on an H200 for this shape), in 3 runs, and never, each against
 * the CPU */
static void test_few_over_many(void)
{
    enum { NQ = 32, NKV = 1500 + NQ, NH = 32, NKH = 8, HD = 128 };
    const struct kvfs_backend_iface *C = cpu.iface;
    float *q = fill((size_t)NQ * NH * HD), *k = fill((size_t)NKV * NKH * HD), *v = fill((size_t)NKV * NKH * HD);
    float *sk = malloc(sizeof(float) * NH), *oc = malloc(sizeof(float) * NQ * NH * HD),
          *og = malloc(sizeof(float) * NQ * NH * HD);
    int32_t qp[NQ], *kvp = malloc(sizeof(int32_t) * NKV);
    for (int h = 0; h < NH; h++)
        sk[h] = -1.0f + 0.125f * (float)h;
    float sc = 1.0f / sqrtf((float)HD);
    struct kvfs_backend *bs[3] = {&gpu, &gpusplit, &gpuwhole};
    static const char *const names[3] = {"plan", "3 runs", "unsplit"};
    for (int shape = 0; shape < 3; shape++) {
        /* 0: the question after the chunks; 1: the same with recomputed rows
         * scattered among the chunks' as queries (positions in no order);
         * 2: keys in no order */
        for (int i = 0; i < NKV; i++)
            kvp[i] = shape == 2 ? (int32_t)((i * 7919u) % NKV) : i;
        for (int i = 0; i < NQ; i++)
            qp[i] = shape == 1 ? (int32_t)((i * 977u) % NKV) : NKV - NQ + i;
        for (int b = 0; b < 3; b++) {
            const struct kvfs_backend_iface *G = bs[b]->iface;
            void *ctx = bs[b]->ctx;
            float *dq = dev_of(bs[b], q, sizeof(float) * NQ * NH * HD), *dk = dev_of(bs[b], k, sizeof(float) * NKV * NKH * HD),
                  *dv = dev_of(bs[b], v, sizeof(float) * NKV * NKH * HD), *dsk = dev_of(bs[b], sk, sizeof(float) * NH),
                  *dy = dev_of(bs[b], NULL, sizeof(float) * NQ * NH * HD);
            int32_t *dqp = dev_of(bs[b], qp, sizeof(qp)), *dkvp = dev_of(bs[b], kvp, sizeof(int32_t) * NKV);
            static const struct { int window; float cap; int sinks; const char *what; } cases[] = {
                {0, 0.0f, 0, "causal"}, {512, 0.0f, 0, "window 512"}, {0, 0.5f, 0, "softcap"}, {512, 0.0f, 1, "sinks"}};
            for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
                BOTH(C->attention_sinks(cpu.ctx, q, qp, NQ, k, v, kvp, NKV, NH, NKH, HD, sc, cases[c].window,
                                        cases[c].cap, cases[c].sinks ? sk : NULL, oc),
                     G->attention_sinks(ctx, dq, dqp, NQ, dk, dv, dkvp, NKV, NH, NKH, HD, sc, cases[c].window,
                                        cases[c].cap, cases[c].sinks ? dsk : NULL, dy));
                G->download(ctx, og, dy, sizeof(float) * NQ * NH * HD);
                char lab[96];
                snprintf(lab, sizeof(lab), "32 over %d, %s, %s%s", NKV, cases[c].what, names[b],
                         shape == 1 ? ", scattered" : shape == 2 ? ", keys unsorted" : "");
                report("attn tc", lab, nerr(oc, og, (size_t)NQ * NH * HD), 3e-3);
            }
            G->free(ctx, dq), G->free(ctx, dk), G->free(ctx, dv), G->free(ctx, dsk), G->free(ctx, dy);
            G->free(ctx, dqp), G->free(ctx, dkvp);
        }
    }
    free(q), free(k), free(v), free(sk), free(oc), free(og), free(kvp);
}

static void test_quant(void)
{
    static const uint32_t types[] = {KVFS_GGML_Q4_0, KVFS_GGML_Q4_1, KVFS_GGML_Q5_0, KVFS_GGML_Q5_1,
                                     KVFS_GGML_Q8_0, KVFS_GGML_Q4_K, KVFS_GGML_Q5_K, KVFS_GGML_Q6_K,
                                     KVFS_GGML_MXFP4};
    const struct kvfs_backend_iface *C = cpu.iface, *G = gpu.iface;
    int out = 300, in = 1024;
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
        uint32_t type = types[t], per = kvfs_ggml_block_size(type);
        size_t rb = kvfs_ggml_row_size(type, (uint64_t)in), bytes = rb / (in / per), total = rb * out;
        uint8_t *raw = malloc(total);
        for (size_t i = 0; i < total; i++)
            raw[i] = (uint8_t)(int)(frand() * 256.0f);
        /* finite f16 scales where the type keeps them: d (and m / dmin) */
        size_t d_at = type == KVFS_GGML_Q6_K ? 208 : 0;
        int two = type == KVFS_GGML_Q4_1 || type == KVFS_GGML_Q5_1 || type == KVFS_GGML_Q4_K || type == KVFS_GGML_Q5_K;
        for (size_t b = 0; b < total / bytes && type != KVFS_GGML_MXFP4; b++)
            for (int k = 0; k <= two; k++) {
                uint16_t h = kvfs_f32_to_f16(frand() * (per == 256 ? 0.002f : 0.05f));
                memcpy(raw + b * bytes + d_at + 2 * k, &h, 2);
            }
        /* MXFP4's E8M0 byte: 2^-10 .. 2^-4 (values up to 0.75), every 50th
         * block's 0 or 1 (its subnormal scales) */
        for (size_t b = 0; b < total / bytes && type == KVFS_GGML_MXFP4; b++)
            raw[b * bytes] = b % 50 ? (uint8_t)(121.0f + frand() * 3.5f) : (uint8_t)(b / 50 % 2);
        float *ref = malloc(sizeof(float) * total / bytes * per), *got = malloc(sizeof(float) * (size_t)out * in);
        CHECK_EQ(kvfs_ggml_dequantize_rows(type, raw, ref, (uint64_t)out, (uint64_t)in), 0);
        struct kvfs_weight *wg = NULL, *wc = NULL;
        CHECK_EQ(G->weight_create_quant(gpu.ctx, type, raw, rb, out, in, &wg), 0);
        CHECK_EQ(C->weight_create(cpu.ctx, ref, out, in, &wc), 0);
        int32_t *ids = malloc(sizeof(int32_t) * out);
        for (int i = 0; i < out; i++)
            ids[i] = i;
        int32_t *dids = dev_of(&gpu, ids, sizeof(int32_t) * out);
        float *drows = dev_of(&gpu, NULL, sizeof(float) * (size_t)out * in);
        CHECK_EQ(G->weight_rows(gpu.ctx, wg, dids, drows, out), 0);
        G->download(gpu.ctx, got, drows, sizeof(float) * (size_t)out * in);
        char shape[64];
        snprintf(shape, sizeof(shape), "%s %dx%d", kvfs_ggml_type_name(type), out, in);
        report("decode", shape, memcmp(ref, got, sizeof(float) * (size_t)out * in) ? 1.0 : 0.0, 0);
        /* products: n <= 8 decodes as it goes; more go through f16 */
        static const int ns[] = {1, 5, 8, 9, 200};
        for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
            int n = ns[k];
            float *x = fill((size_t)n * in), *yc = malloc(sizeof(float) * (size_t)n * out),
                  *yg = malloc(sizeof(float) * (size_t)n * out);
            float *dx = dev_of(&gpu, x, sizeof(float) * (size_t)n * in), *dy = dev_of(&gpu, NULL, sizeof(float) * n * out);
            BOTH(C->matmul(cpu.ctx, wc, NULL, x, yc, n), G->matmul(gpu.ctx, wg, NULL, dx, dy, n));
            G->download(gpu.ctx, yg, dy, sizeof(float) * (size_t)n * out);
            char lab[80];
            snprintf(lab, sizeof(lab), "%s n=%d", shape, n);
            report(n <= 8 ? "matmul enc" : "matmul f16", lab, nerr(yc, yg, (size_t)n * out), n <= 8 ? 1e-5 : 2e-3);
            G->free(gpu.ctx, dx);
            G->free(gpu.ctx, dy);
            free(x), free(yc), free(yg);
        }
        C->weight_free(cpu.ctx, wc);
        G->weight_free(gpu.ctx, wg);
        G->free(gpu.ctx, dids);
        G->free(gpu.ctx, drows);
        free(raw), free(ref), free(got), free(ids);
    }
    {   /* a slice of more rows than a grid's 65,535 (a large vocabulary's
         * output embedding over a narrow model): decoded to f16 in one slice
         * of 70,000 rows, a Q8_0 weight against the CPU's product */
        struct kvfs_backend wide;
        setenv("KVFS_CUDA_DECODE_ELEMS", "4194304", 1);
        CHECK_EQ(kvfs_backend_cuda_init(0, &wide), 0);
        setenv("KVFS_CUDA_DECODE_ELEMS", "65536", 1);
        const int rows = 70000, cols = 32, n = 9;
        size_t rb = kvfs_ggml_row_size(KVFS_GGML_Q8_0, (uint64_t)cols);
        uint8_t *raw = malloc(rb * rows);
        for (size_t i = 0; i < rb * rows; i++)
            raw[i] = (uint8_t)(int)(frand() * 256.0f);
        for (int r = 0; r < rows; r++) {
            uint16_t h = kvfs_f32_to_f16(0.01f + frand() * 0.05f);
            memcpy(raw + (size_t)r * rb, &h, 2);
        }
        float *ref = malloc(sizeof(float) * (size_t)rows * cols), *x = fill((size_t)n * cols);
        float *yc = malloc(sizeof(float) * (size_t)n * rows), *yg = malloc(sizeof(float) * (size_t)n * rows);
        CHECK_EQ(kvfs_ggml_dequantize_rows(KVFS_GGML_Q8_0, raw, ref, (uint64_t)rows, (uint64_t)cols), 0);
        struct kvfs_weight *wg = NULL, *wc = NULL;
        const struct kvfs_backend_iface *W = wide.iface;
        CHECK_EQ(W->weight_create_quant(wide.ctx, KVFS_GGML_Q8_0, raw, rb, rows, cols, &wg), 0);
        CHECK_EQ(C->weight_create(cpu.ctx, ref, rows, cols, &wc), 0);
        float *dx = dev_of(&wide, x, sizeof(float) * (size_t)n * cols);
        float *dy = dev_of(&wide, NULL, sizeof(float) * (size_t)n * rows);
        BOTH(C->matmul(cpu.ctx, wc, NULL, x, yc, n), W->matmul(wide.ctx, wg, NULL, dx, dy, n));
        W->download(wide.ctx, yg, dy, sizeof(float) * (size_t)n * rows);
        report("matmul f16", "Q8_0 70000x32 n=9, one slice", nerr(yc, yg, (size_t)n * rows), 2e-3);
        W->free(wide.ctx, dx);
        W->free(wide.ctx, dy);
        C->weight_free(cpu.ctx, wc);
        W->weight_free(wide.ctx, wg);
        kvfs_backend_free(&wide);
        free(raw), free(ref), free(x), free(yc), free(yg);
    }
    {   /* an MXFP4 block scaled past what f16 holds (2^13): left to f32 */
        uint8_t blk[17 * 2] = {140, 0x77, [17] = 141, 0x77};
        struct kvfs_weight *w = NULL;
        CHECK_EQ(G->weight_create_quant(gpu.ctx, KVFS_GGML_MXFP4, blk, 17, 1, 32, &w), 0);
        G->weight_free(gpu.ctx, w);
        w = NULL;
        CHECK_EQ(G->weight_create_quant(gpu.ctx, KVFS_GGML_MXFP4, blk, 17, 2, 32, &w), -ENOTSUP);
        CHECK(w == NULL);
    }
    /* Q8_K activations (K-quant weights' partner), ties of magnitude included */
    int n = 37, dim = 512;
    float *x = fill((size_t)n * dim), *oc = malloc(sizeof(float) * n * dim), *og = malloc(sizeof(float) * n * dim);
    x[3] = 1.5f, x[7] = -1.5f;        /* the first of equal magnitudes sets the sign */
    memset(x + 256, 0, sizeof(float) * 256); /* an all-zero block */
    float *dx = dev_of(&gpu, x, sizeof(float) * n * dim);
    BOTH(C->act_quant(cpu.ctx, x, oc, n, dim, KVFS_GGML_Q8_K), G->act_quant(gpu.ctx, dx, dx, n, dim, KVFS_GGML_Q8_K));
    G->download(gpu.ctx, og, dx, sizeof(float) * n * dim);
    report("act_quant", "Q8_K 37x512 in place", memcmp(oc, og, sizeof(float) * n * dim) ? 1.0 : 0.0, 0);
    G->free(gpu.ctx, dx);
    free(x), free(oc), free(og);
}

/* a whole synthetic model on both backends; tol: the bound on the logits
 * (the tensor cores' attention rounds its inputs to f16) */
/* The chunk shift on the device (backend chunk_shift) against the host's
 * (blend/shift.c) on the CPU model and, through the same CUDA model with
 * the op taken away, on CUDA: the rows' moves (after - before) agree to
 * rounding.  Four chunks with a gap in positions, 60 recomputed rows. */
static void test_chunk_shift(struct kvfs_model *mc, struct kvfs_model *mg, const char *arch)
{
    enum { ROWS = 320, CHUNKS = 4, NSEL = 60 };
    struct kvfs_kv_cache a, g, h;
    CHECK_EQ(kvfs_kv_cache_init(mc, ROWS, &a), 0);
    CHECK_EQ(kvfs_kv_cache_init(mg, ROWS, &g), 0);
    CHECK_EQ(kvfs_kv_cache_init(mg, ROWS, &h), 0);
    size_t kvd = (size_t)a.kv_dim, n = ROWS * kvd;
    int32_t chunk_of[ROWS], idx[NSEL];
    for (int i = 0; i < ROWS; i++) {
        chunk_of[i] = i * CHUNKS / ROWS;
        a.host_pos[i] = g.host_pos[i] = h.host_pos[i] = i + (chunk_of[i] == 2 ? 9 : 0);
    }
    for (int k = 0; k < NSEL; k++)
        idx[k] = 10 + k * 5; /* from every chunk, the first too (which never moves) */
    const struct kvfs_backend_iface *gi = mg->be.iface;
    struct kvfs_backend_iface host_path = *gi;
    host_path.chunk_shift = NULL;
    CHECK(gi->chunk_shift != NULL);
    CHECK_EQ(gi->upload(mg->be.ctx, g.pos, g.host_pos, sizeof(int32_t) * ROWS), 0);
    CHECK_EQ(gi->upload(mg->be.ctx, h.pos, h.host_pos, sizeof(int32_t) * ROWS), 0);
    int32_t *cd_idx = NULL, *gd_idx = dev_of(&mg->be, idx, sizeof(idx));
    CHECK_EQ(mc->be.iface->alloc(mc->be.ctx, sizeof(idx), (void **)&cd_idx), 0);
    memcpy(cd_idx, idx, sizeof(idx));
    float *k0 = fill(n), *v0 = fill(n), *fk = fill(NSEL * kvd), *fv = fill(NSEL * kvd);
    float *gk = malloc(sizeof(float) * n), *gv = malloc(sizeof(float) * n);
    float *hk = malloc(sizeof(float) * n), *hv = malloc(sizeof(float) * n);
    float *dfk = dev_of(&mg->be, fk, sizeof(float) * NSEL * kvd), *dfv = dev_of(&mg->be, fv, sizeof(float) * NSEL * kvd);
    struct blend_shift_cache sc = {0};
    double worst = 0, worst_host = 0;
    for (int l = 0; l < a.n_layer; l++) {
        memcpy(a.k[l], k0, sizeof(float) * n), memcpy(a.v[l], v0, sizeof(float) * n);
        CHECK_EQ(gi->upload(mg->be.ctx, g.k[l], k0, sizeof(float) * n), 0);
        CHECK_EQ(gi->upload(mg->be.ctx, g.v[l], v0, sizeof(float) * n), 0);
        CHECK_EQ(gi->upload(mg->be.ctx, h.k[l], k0, sizeof(float) * n), 0);
        CHECK_EQ(gi->upload(mg->be.ctx, h.v[l], v0, sizeof(float) * n), 0);
        CHECK_EQ(blend_shift_layer(mc, &a, l, chunk_of, CHUNKS, 0, ROWS, idx, cd_idx, NSEL, fk, fv, 0.6f, NULL), 0);
        CHECK_EQ(blend_shift_layer(mg, &g, l, chunk_of, CHUNKS, 0, ROWS, idx, gd_idx, NSEL, dfk, dfv, 0.6f, &sc), 0);
        mg->be.iface = &host_path;
        CHECK_EQ(blend_shift_layer(mg, &h, l, chunk_of, CHUNKS, 0, ROWS, idx, gd_idx, NSEL, dfk, dfv, 0.6f, NULL), 0);
        mg->be.iface = gi;
        CHECK_EQ(gi->download(mg->be.ctx, gk, g.k[l], sizeof(float) * n), 0);
        CHECK_EQ(gi->download(mg->be.ctx, gv, g.v[l], sizeof(float) * n), 0);
        CHECK_EQ(gi->download(mg->be.ctx, hk, h.k[l], sizeof(float) * n), 0);
        CHECK_EQ(gi->download(mg->be.ctx, hv, h.v[l], sizeof(float) * n), 0);
        int moved = 0;
        for (size_t i = 0; i < n; i++) { /* each path's move */
            moved += a.k[l][i] != k0[i];
            a.k[l][i] -= k0[i], a.v[l][i] -= v0[i], gk[i] -= k0[i], gv[i] -= v0[i], hk[i] -= k0[i], hv[i] -= v0[i];
        }
        CHECK(moved > (int)(n / 2)); /* the later chunks' rows moved */
        double e = fmax(nerr(a.k[l], gk, n), nerr(a.v[l], gv, n));
        double eh = fmax(nerr(hk, gk, n), nerr(hv, gv, n));
        worst = fmax(worst, e), worst_host = fmax(worst_host, eh);
    }
    char lab[64];
    snprintf(lab, sizeof(lab), "%s, 4 chunks, moves", arch);
    report("shift cpu", lab, worst, 1e-5);
    report("shift host", lab, worst_host, 1e-5);
    blend_shift_cache_free(&sc);
    mc->be.iface->free(mc->be.ctx, cd_idx);
    gi->free(mg->be.ctx, gd_idx), gi->free(mg->be.ctx, dfk), gi->free(mg->be.ctx, dfv);
    free(k0), free(v0), free(fk), free(fv), free(gk), free(gv), free(hk), free(hv);
    kvfs_kv_cache_free(mc, &a), kvfs_kv_cache_free(mg, &g), kvfs_kv_cache_free(mg, &h);
}

/* n_head: 8 gives heads of 32 (the f32 kernels only); 4 gives 64 (128 for
 * gemma's doubled heads), which the tensor-core attention and its key split
 * take in a model's prefill and blends */
static void test_model(const char *arch, int n_head, double tol)
{
    char path[64], err[256], lab[96], name[48];
    if (n_head == 8)
        snprintf(name, sizeof(name), "%s", arch);
    else
        snprintf(name, sizeof(name), "%s, %d heads", arch, n_head);
    snprintf(path, sizeof(path), "/tmp/kvfs-gpu-model.%d.gguf", (int)getpid());
    struct kvfs_synth_model_opts o = {arch, 4, 256, n_head, 2, 512, 10000.0f, 3, 0, 0, 0, 0, NULL, 0.0f, 0, 0};
    CHECK_EQ(kvfs_synth_model_write(path, &o), 0);
    struct kvfs_model *mc, *mg;
    CHECK_EQ(kvfs_model_load(path, "cpu", 0, &mc, err, sizeof(err)), 0);
    CHECK_EQ(kvfs_model_load(path, "cuda", 0, &mg, err, sizeof(err)), 0);
    unlink(path);
    int V = mc->hp.n_vocab, n = 300;
    int32_t *t = malloc(sizeof(int32_t) * n);
    for (int i = 0; i < n; i++)
        t[i] = (i * 31 + 5) % 256;
    float *lc = malloc(sizeof(float) * V), *lgp = malloc(sizeof(float) * V);
    struct kvfs_kv_cache cc, cg;
    CHECK_EQ(kvfs_kv_cache_init(mc, n + 1, &cc), 0);
    CHECK_EQ(kvfs_kv_cache_init(mg, n + 1, &cg), 0);
    CHECK_EQ(kvfs_forward(mc, &cc, t, n, 0, lc), 0);
    CHECK_EQ(kvfs_forward(mg, &cg, t, n, 0, lgp), 0);
    const char *mode = getenv("KVFS_CUDA_ATTN") ? "f32 attn" : "tc attn";
    snprintf(lab, sizeof(lab), "%s %s, n=300", name, mode);
    report("model prefill", lab, nerr(lc, lgp, V), tol);
    int32_t nx = 7;
    CHECK_EQ(kvfs_forward(mc, &cc, &nx, 1, n, lc), 0);
    CHECK_EQ(kvfs_forward(mg, &cg, &nx, 1, n, lgp), 0);
    snprintf(lab, sizeof(lab), "%s %s", name, mode);
    report("model decode", lab, nerr(lc, lgp, V), tol);
    /* blend on both backends from the same chunk images */
    struct kvfs_writer w1, w2;
    CHECK_EQ(kvfs_kv_cache_to_chunk(mc, &cc, 0, 150, t, KVFS_DTYPE_F16, &w1), 0);
    struct kvfs_kv_cache c2;
    CHECK_EQ(kvfs_kv_cache_init(mc, 150, &c2), 0);
    CHECK_EQ(kvfs_forward(mc, &c2, t + 150, 150, 0, NULL), 0);
    CHECK_EQ(kvfs_kv_cache_to_chunk(mc, &c2, 0, 150, t + 150, KVFS_DTYPE_F16, &w2), 0);
    struct kvfs_blend_chunk ch[2] = {{w1.buf, w1.size}, {w2.buf, w2.size}};
    struct kvfs_kv_cache bc, bg;
    int32_t *bt1, *bt2, suf[3] = {1, 2, 3};
    CHECK_EQ(kvfs_blend(mc, ch, 2, suf, 3, 0.15f, &bc, &bt1, lc, NULL, err, sizeof(err)), 0);
    CHECK_EQ(kvfs_blend(mg, ch, 2, suf, 3, 0.15f, &bg, &bt2, lgp, NULL, err, sizeof(err)), 0);
    snprintf(lab, sizeof(lab), "%s %s, 2 x 150", name, mode);
    report("blend 0.15", lab, nerr(lc, lgp, V), tol);
    {
        /* the query selection on both backends */
        struct kvfs_kv_cache qc, qg;
        int32_t *qt1, *qt2;
        struct kvfs_blend_opts bo;
        kvfs_blend_opts_init(&bo, 0.15f);
        bo.select = KVFS_BLEND_SELECT_QUERY;
        CHECK_EQ(kvfs_blend_ex(mc, ch, 2, suf, 3, &bo, &qc, &qt1, lc, NULL, err, sizeof(err)), 0);
        CHECK_EQ(kvfs_blend_ex(mg, ch, 2, suf, 3, &bo, &qg, &qt2, lgp, NULL, err, sizeof(err)), 0);
        report("blend query", lab, nerr(lc, lgp, V), tol);
        kvfs_kv_cache_free(mc, &qc); kvfs_kv_cache_free(mg, &qg);
        free(qt1); free(qt2);
    }
    {
        /* ratio 1.0 on CUDA = a full prefill of the same tokens on CUDA */
        struct kvfs_kv_cache fc, oc1;
        int32_t *ft = malloc(sizeof(int32_t) * 303), *ot;
        memcpy(ft, t, sizeof(int32_t) * 300);
        memcpy(ft + 300, suf, sizeof(suf));
        float *lf = malloc(sizeof(float) * V);
        CHECK_EQ(kvfs_kv_cache_init(mg, 303, &fc), 0);
        CHECK_EQ(kvfs_forward(mg, &fc, ft, 303, 0, lf), 0);
        CHECK_EQ(kvfs_blend(mg, ch, 2, suf, 3, 1.0f, &oc1, &ot, lgp, NULL, err, sizeof(err)), 0);
        int af = 0, ab = 0;
        for (int i = 1; i < V; i++) {
            af = lf[i] > lf[af] ? i : af;
            ab = lgp[i] > lgp[ab] ? i : ab;
        }
        snprintf(lab, sizeof(lab), "%s %s, next token %d vs %d", name, mode, ab, af);
        report("blend 1.0 = full", lab, af == ab ? nerr(lf, lgp, V) : 1.0, 1e-3);
        kvfs_kv_cache_free(mg, &fc);
        kvfs_kv_cache_free(mg, &oc1);
        free(ft), free(ot), free(lf);
    }
    CHECK_EQ(kvfs_blend_selftest(mg), 0);
    test_chunk_shift(mc, mg, name);
    {   /* and with Llama 3.1-style RoPE frequency factors (in place of
         * gpt-oss's YaRN ones, the models' own, put back to be freed) */
        float ff[128], *own_c = mc->rope_freqs, *own_g = mg->rope_freqs;
        for (int j = 0; j < mc->hp.rope_dim / 2 && j < 128; j++)
            ff[j] = 1.0f + 7.0f * (float)((j * 3) % 5) / 4.0f;
        /* the shift reads each layer's factors (set at load): swapped there too */
        const float *own_lc[64], *own_lg[64];
        mc->rope_freqs = mg->rope_freqs = ff;
        for (int l = 0; l < mc->hp.n_layer && l < 64; l++) {
            own_lc[l] = mc->layers[l].rope_freqs, own_lg[l] = mg->layers[l].rope_freqs;
            mc->layers[l].rope_freqs = mg->layers[l].rope_freqs = ff;
        }
        char lab2[64];
        snprintf(lab2, sizeof(lab2), "%s + rope_freqs", name);
        test_chunk_shift(mc, mg, lab2);
        mc->rope_freqs = own_c;
        mg->rope_freqs = own_g;
        for (int l = 0; l < mc->hp.n_layer && l < 64; l++)
            mc->layers[l].rope_freqs = own_lc[l], mg->layers[l].rope_freqs = own_lg[l];
    }
    kvfs_kv_cache_free(mc, &bc); kvfs_kv_cache_free(mg, &bg);
    kvfs_kv_cache_free(mc, &cc); kvfs_kv_cache_free(mg, &cg); kvfs_kv_cache_free(mc, &c2);
    kvfs_writer_free(&w1); kvfs_writer_free(&w2);
    free(bt1); free(bt2); free(t); free(lc); free(lgp);
    kvfs_model_free(mc);
    kvfs_model_free(mg);
}

int main(void)
{
#ifndef KVFS_HAVE_CUDA
    printf("skip: built without CUDA\n");
    return 77;
#else
    /* encoded weights decode 64 rows of 1024 at a time: the slicing of a
     * large weight (an 8B model's output embedding) is exercised here */
    setenv("KVFS_CUDA_DECODE_ELEMS", "65536", 1);
    int rc = kvfs_backend_cuda_init(0, &gpu);
    if (rc == -ENODEV) {
        printf("skip: no CUDA device\n");
        return 77;
    }
    CHECK_EQ(rc, 0);
    setenv("KVFS_CUDA_ATTN", "f32", 1);
    CHECK_EQ(kvfs_backend_cuda_init(0, &gpu32), 0);
    unsetenv("KVFS_CUDA_ATTN");
    setenv("KVFS_CUDA_ATTN_SPLIT", "3", 1);
    CHECK_EQ(kvfs_backend_cuda_init(0, &gpusplit), 0);
    setenv("KVFS_CUDA_ATTN_SPLIT", "0", 1);
    CHECK_EQ(kvfs_backend_cuda_init(0, &gpuwhole), 0);
    unsetenv("KVFS_CUDA_ATTN_SPLIT");
    CHECK_EQ(kvfs_backend_cpu_init(0, &cpu), 0);
    test_shapes(64, 576, 9, 3, 1536, "SmolLM2");
    test_shapes(512, 576, 9, 3, 1536, "SmolLM2");
    test_shapes(100, 4096, 32, 8, 14336, "Llama-3-8B");
    test_shapes(700, 4096, 32, 8, 14336, "Llama-3-8B");
    test_shapes(200, 2048, 8, 4, 4096, "head dim 256"); /* the tensor cores' widest kernel (Gemma 3's heads) */
    test_mass_many();
    test_few_over_many();
    test_quant();
    /* gpt-oss: its sinks in the blend's votes (attn_mass_sinks) and in a
     * decoding step's row, YaRN's factors in the chunk shift */
    static const char *const arches[] = {"llama", "qwen2",   "qwen3", "gemma2", "gemma3",  "granite",
                                         "smollm3", "olmo2", "phi3",  "mistral3", "gpt-oss"};
    enum { N_ARCHES = sizeof(arches) / sizeof(arches[0]) };
    setenv("KVFS_CUDA_ATTN", "f32", 1); /* the models load their own backends */
    for (int a = 0; a < N_ARCHES; a++)
        test_model(arches[a], 8, 1e-3);
    unsetenv("KVFS_CUDA_ATTN");
    for (int a = 0; a < N_ARCHES; a++)
        test_model(arches[a], 8, 1e-2);
    /* heads the tensor cores take: a model's prefill, blends and their key
     * split end to end (heads of 32 above never reach them) */
    test_model("llama", 4, 1e-2);
    test_model("gemma3", 4, 1e-2);
    kvfs_backend_free(&cpu);
    kvfs_backend_free(&gpu);
    kvfs_backend_free(&gpu32);
    kvfs_backend_free(&gpusplit);
    kvfs_backend_free(&gpuwhole);
    CHECK_DONE();
#endif
}
