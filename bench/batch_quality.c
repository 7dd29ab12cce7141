/* batch_quality - batched blends against one-by-one blends, in process:
 * time, and KL(full prefill || method) of the next-token distribution.
 *
 * Members share their first S passages and each has O of its own and its
 * own question.  Each passage is prefilled alone (as kvfs stores it); for
 * every member the reference is a full prefill of its prompt.  Methods:
 * plain reuse (ratio 0), one blend per member (kvfs_blend_ex), and one
 * kvfs_blend_batch for all (BENCHMARKS.md, "Batching").
 *
 * usage: batch_quality MODEL S O RATIO PASSAGE...   (S + members * O files) */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "blend.h"
#include "loader.h"
#include "runtime.h"

#define MAX_FILES 64

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int read_file(const char *path, char **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -errno;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *out = malloc((size_t)n + 1);
    *len = *out ? fread(*out, 1, (size_t)n, f) : 0;
    fclose(f);
    if (!*out)
        return -ENOMEM;
    (*out)[*len] = '\0';
    return 0;
}

struct batch_ctx {
    const struct kvfs_model *m;
    float *logits;
    double *kl;
    float **ref;
};

/* The next-token logits from a member's blended cache: its last (query)
 * row is recomputed over the rest, exactly as the blend computed it. */
static int on_member(void *vctx, int i, const struct kvfs_kv_cache *c, const int32_t *tokens,
                     const struct kvfs_blend_stats *st)
{
    (void)st;
    struct batch_ctx *b = vctx;
    struct kvfs_kv_cache *cc = (struct kvfs_kv_cache *)c;
    int n = cc->n;
    cc->n = n - 1;
    int rc = kvfs_forward(b->m, cc, &tokens[n - 1], 1, n - 1, b->logits);
    if (!rc)
        b->kl[i] = kvfs_logits_kl(b->ref[i], b->logits, b->m->hp.n_vocab);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: %s MODEL SHARED OWN RATIO PASSAGE...\n", argv[0]);
        return 2;
    }
    int S = atoi(argv[2]), O = atoi(argv[3]), nf = argc - 5;
    float ratio = strtof(argv[4], NULL);
    int n_mb = O > 0 ? (nf - S) / O : 0;
    if (S < 1 || O < 1 || n_mb < 1 || nf > MAX_FILES || S + n_mb * O > nf) {
        fprintf(stderr, "need SHARED >= 1, OWN >= 1 and SHARED + k*OWN passages (k >= 1)\n");
        return 2;
    }
    struct kvfs_model *m = NULL;
    struct kvfs_tokenizer *tok = NULL;
    char err[512] = "";
    int rc = kvfs_model_load(argv[1], "cpu", 0, &m, err, sizeof(err));
    if (rc || (rc = kvfs_tokenizer_load(m->gguf, &tok, err, sizeof(err)))) {
        fprintf(stderr, "cannot load %s: %s\n", argv[1], err);
        return 1;
    }
    int V = m->hp.n_vocab;
    struct kvfs_writer w[MAX_FILES];
    int32_t *ids[MAX_FILES];
    size_t nids[MAX_FILES];
    for (int f = 0; f < nf; f++) { /* each passage prefilled alone */
        char *text = NULL;
        size_t len = 0;
        struct kvfs_kv_cache cc;
        if ((rc = read_file(argv[5 + f], &text, &len)) ||
            (rc = kvfs_tokenize(tok, text, len, 0, 0, &ids[f], &nids[f])) ||
            (rc = kvfs_kv_cache_init(m, (int)nids[f], &cc))) {
            fprintf(stderr, "%s: %s\n", argv[5 + f], strerror(-rc));
            return 1;
        }
        free(text);
        if ((rc = kvfs_forward(m, &cc, ids[f], (int)nids[f], 0, NULL)) ||
            (rc = kvfs_kv_cache_to_chunk(m, &cc, 0, (int)nids[f], ids[f], KVFS_DTYPE_F16, &w[f])))
            return 1;
        kvfs_kv_cache_free(m, &cc);
    }
    int (*maps)[MAX_FILES] = calloc((size_t)n_mb, sizeof(*maps));
    int32_t **q = calloc((size_t)n_mb, sizeof(*q));
    size_t *nq = calloc((size_t)n_mb, sizeof(*nq));
    float **ref = calloc((size_t)n_mb, sizeof(*ref)), *lg = malloc(sizeof(float) * (size_t)V);
    double *kl_reuse = calloc((size_t)n_mb, sizeof(double)), *kl_solo = calloc((size_t)n_mb, sizeof(double));
    double *kl_batch = calloc((size_t)n_mb, sizeof(double)), t_solo = 0, t_full = 0;
    struct kvfs_blend_member *mb = calloc((size_t)n_mb, sizeof(*mb));
    for (int i = 0; i < n_mb; i++) {
        char question[200];
        int k = 0;
        for (int s = 0; s < S; s++)
            maps[i][k++] = s;
        for (int o = 0; o < O; o++)
            maps[i][k++] = S + i * O + o;
        snprintf(question, sizeof(question), "\nQuestion %d: which text above says the most about warranty?\nAnswer:",
                 i + 1);
        if (kvfs_tokenize(tok, question, strlen(question), 0, 0, &q[i], &nq[i]))
            return 1;
        /* the reference: a full prefill of the whole prompt */
        int n_ctx = (int)nq[i];
        for (int c = 0; c < k; c++)
            n_ctx += (int)nids[maps[i][c]];
        int32_t *all = malloc(sizeof(int32_t) * (size_t)n_ctx), at = 0;
        for (int c = 0; c < k; c++)
            for (size_t t = 0; t < nids[maps[i][c]]; t++)
                all[at++] = ids[maps[i][c]][t];
        memcpy(all + at, q[i], sizeof(int32_t) * nq[i]);
        struct kvfs_kv_cache fc;
        ref[i] = malloc(sizeof(float) * (size_t)V);
        double t0 = now_s();
        if (kvfs_kv_cache_init(m, n_ctx, &fc) || kvfs_forward(m, &fc, all, n_ctx, 0, ref[i]))
            return 1;
        t_full += now_s() - t0;
        kvfs_kv_cache_free(m, &fc);
        free(all);
        /* plain reuse and a blend of its own */
        struct kvfs_blend_chunk ch[MAX_FILES];
        for (int c = 0; c < k; c++)
            ch[c] = (struct kvfs_blend_chunk){w[maps[i][c]].buf, w[maps[i][c]].size};
        for (int r = 0; r < 2; r++) {
            struct kvfs_kv_cache bc;
            int32_t *bt = NULL;
            struct kvfs_blend_opts o;
            kvfs_blend_opts_init(&o, r ? ratio : 0.0f);
            t0 = now_s();
            if ((rc = kvfs_blend_ex(m, ch, k, q[i], (int)nq[i], &o, &bc, &bt, lg, NULL, err, sizeof(err)))) {
                fprintf(stderr, "blend: %s\n", err);
                return 1;
            }
            if (r)
                t_solo += now_s() - t0;
            (r ? kl_solo : kl_reuse)[i] = kvfs_logits_kl(ref[i], lg, V);
            kvfs_kv_cache_free(m, &bc);
            free(bt);
        }
        mb[i] = (struct kvfs_blend_member){maps[i], k, q[i], (int)nq[i]};
    }
    /* all members as one batch, over one loader of every passage */
    const void *images[MAX_FILES];
    size_t lens[MAX_FILES];
    for (int f = 0; f < nf; f++) {
        images[f] = w[f].buf;
        lens[f] = w[f].size;
    }
    struct kvfs_loader *ld;
    struct kvfs_blend_opts o;
    kvfs_blend_opts_init(&o, ratio);
    struct batch_ctx bctx = {m, lg, kl_batch, ref};
    double t0 = now_s();
    if ((rc = kvfs_loader_open_images(images, lens, nf, &ld, err, sizeof(err))) ||
        (rc = kvfs_blend_batch(m, ld, mb, n_mb, S, &o, on_member, &bctx, err, sizeof(err)))) {
        fprintf(stderr, "batch: %s\n", err);
        return 1;
    }
    double t_batch = now_s() - t0;
    kvfs_loader_close(ld);
    double sr = 0, ss = 0, sb = 0;
    printf("member  KL reuse   KL one-by-one   KL batch\n");
    for (int i = 0; i < n_mb; i++) {
        printf("%6d  %8.4f  %14.4f  %9.4f\n", i + 1, kl_reuse[i], kl_solo[i], kl_batch[i]);
        sr += kl_reuse[i], ss += kl_solo[i], sb += kl_batch[i];
    }
    printf("mean KL: reuse %.4f, one by one %.4f (%.2fx reuse), batch %.4f (%.2fx reuse)\n", sr / n_mb, ss / n_mb,
           ss / sr, sb / n_mb, sb / sr);
    printf("time: full prefill %.2f s, one by one %.2f s, batch %.2f s: batch %.2fx faster than one by one, "
           "%.2fx than full prefill\n", t_full, t_solo, t_batch, t_solo / t_batch, t_full / t_batch);
    return 0;
}
