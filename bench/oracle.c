/* oracle - where a blend's error comes from: the KL from a full prefill of
 * a plain reuse whose chosen (layer, row) K/V are replaced by the full
 * prefill's own, for several choices (an analysis for issues 17 and 21;
 * BENCHMARKS.md).  CPU backend only: the cache is read as host memory.
 *
 * Each passage is prefilled alone (BOS as the model wants, as kvfsctl eval
 * --bos each), stored rounded to f16 and re-positioned as a blend reuses
 * it; the whole prompt plus the question is prefilled in full.  For every
 * mask, the question then runs over the mixed cache (reused rows, exact
 * rows where the mask says) and its next-token distribution is compared
 * with the full prefill's.  A mask makes rows *exact*, which a blend's
 * recompute does not (a recomputed row attends to reused rows below it):
 * "exact: the served rows" against the blend's own KL says what that costs.
 *
 * Budgets are the served blend's: ratio x chunk rows (at least 96), taken
 * from the later chunks only.  Scores for the row choices (per row):
 *   mass      the query's attention over the reused cache, layers from a
 *             third up, global layers only (the served selection)
 *   dev       sum over layers of |V_full - V_reused|
 *   mass.dev  sum over voting layers of mass_l x |dV_l|
 *   all.dev   the same over every layer, sliding-window ones through their
 *             window
 * "blend:" lines simulate a blend of those rows instead (recomputed from
 * layer 0 over the reused cache, without the chunk shift); "gradual" ones
 * recompute more rows low and fewer high (mean: the budget), dropping rows
 * by mass, by the fresh-V deviation the recompute found, or both.
 * Run it with KVFS_QMM_INT_ROWS=0 KVFS_ATT_INVARIANT_MIN_Q=2 (bench/oracle.py
 * sets them): the question then runs through the same kernels as in the full
 * prefill, and "every row exact" reads 0 (for the prompt sets' questions of
 * 13-16 tokens; one of a few tokens still takes other kernels, which that
 * line then shows).
 *
 * ORACLE_SLICES=N instead prints how far the same prompt prefilled in
 * slices of N rows is from the one-shot prefill (run it without the two
 * variables above: below their row threshold the matmuls take integer dot
 * products, as llama.cpp does, instead of f32 tiles): the spread of two
 * equally valid computations, against which a blend's KL is best read.
 *
 * usage: oracle MODEL RATIO QUESTION PASSAGE...   (prints one line per mask) */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blend.h"
#include "model_util.h"
#include "runtime.h"

#define MAX_FILES 64

struct run {
    const struct kvfs_model *m;
    int n_rows, nq, kvd, n_layer;
    float **rk, **rv;      /* reused, re-positioned: [layer][n_rows * kvd] */
    struct kvfs_kv_cache *full;
    struct kvfs_kv_cache mix;
    const int32_t *qids, *all;
    float *full_logits, *logits;
    float **mass;          /* [layer][n_rows + nq], filled by the reuse pass */
};

/* The question over the mixed cache: rows (l, r) with exact[l][r] from the
 * full prefill, the others reused.  mass != NULL: record every layer's
 * attention of the question rows.  Returns KL(full || this). */
static double question_kl(struct run *R, unsigned char **exact, float **mass)
{
    const struct kvfs_model *m = R->m;
    const struct kvfs_backend_iface *be = m->be.iface;
    void *ctx = m->be.ctx;
    const struct kvfs_hparams *hp = &m->hp;
    int kvd = R->kvd, n_ctx = R->n_rows + R->nq;
    for (int l = 0; l < R->n_layer; l++)
        for (int r = 0; r < R->n_rows; r++) {
            int ex = exact && exact[l][r];
            memcpy(R->mix.k[l] + (size_t)r * kvd, (ex ? R->full->k[l] : R->rk[l]) + (size_t)r * kvd,
                   sizeof(float) * (size_t)kvd);
            memcpy(R->mix.v[l] + (size_t)r * kvd, (ex ? R->full->v[l] : R->rv[l]) + (size_t)r * kvd,
                   sizeof(float) * (size_t)kvd);
        }
    struct kvfs_work w;
    if (kvfs_work_alloc(m, R->nq, &w))
        return NAN;
    int32_t pos[4096];
    for (int i = 0; i < R->nq; i++)
        pos[i] = R->n_rows + i;
    memcpy(R->mix.host_pos + R->n_rows, pos, sizeof(int32_t) * (size_t)R->nq);
    memcpy(R->mix.pos + R->n_rows, pos, sizeof(int32_t) * (size_t)R->nq);
    memcpy(w.ids, R->qids, sizeof(int32_t) * (size_t)R->nq);
    memcpy(w.pos, pos, sizeof(int32_t) * (size_t)R->nq);
    float scale = hp->scale_q ? 1.0f : hp->attn_scale;
    int rc = kvfs_embed(m, w.ids, w.x, R->nq);
    for (int l = 0; !rc && l < R->n_layer; l++) {
        if ((rc = kvfs_layer_qkv(m, l, &w, R->nq)))
            break;
        memcpy(R->mix.k[l] + (size_t)R->n_rows * kvd, w.k, sizeof(float) * (size_t)R->nq * kvd);
        memcpy(R->mix.v[l] + (size_t)R->n_rows * kvd, w.v, sizeof(float) * (size_t)R->nq * kvd);
        if (mass) {
            memset(mass[l], 0, sizeof(float) * (size_t)n_ctx);
            rc = m->layers[l].attn_sinks /* gpt-oss: the blend's mass, after the sinks */
                     ? be->attn_mass_sinks(ctx, w.q, w.pos, R->nq, R->mix.k[l], R->mix.pos, n_ctx, hp->n_head,
                                           hp->n_kv_head, hp->head_dim, scale, m->layers[l].window, hp->attn_softcap,
                                           m->layers[l].attn_sinks, mass[l])
                     : be->attn_mass(ctx, w.q, w.pos, R->nq, R->mix.k[l], R->mix.pos, n_ctx, hp->n_head,
                                     hp->n_kv_head, hp->head_dim, scale, m->layers[l].window, hp->attn_softcap,
                                     mass[l]);
        }
        if (!rc)
            rc = kvfs_layer_finish(m, l, &w, R->nq, &R->mix, n_ctx);
    }
    if (!rc)
        rc = kvfs_output_logits(m, &w, R->nq - 1, R->logits);
    kvfs_work_free(m, &w);
    return rc ? NAN : kvfs_logits_kl(R->full_logits, R->logits, hp->n_vocab);
}

struct scored {
    float s;
    int r;
};
static int by_score_desc(const void *a, const void *b)
{
    float x = ((const struct scored *)a)->s, y = ((const struct scored *)b)->s;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* A blend whose recomputed set shrinks going up: cand[0..) ranked by the
 * query's mass; n_at[l] rows at layer l (non-increasing).  Dropping keeps
 * the best by crit: 0 mass, 1 mass x the row's summed fresh-V deviation so
 * far (what the recompute found wrong), 2 that deviation alone (mass may
 * be NULL where n_at never falls). */
static double blend_gradual_kl(struct run *R, const int *cand, const float *mass, const int *n_at, int crit)
{
    const struct kvfs_model *m = R->m;
    int kvd = R->kvd, n_ctx = R->n_rows + R->nq, nq = R->nq, na = n_at[0];
    for (int l = 0; l < R->n_layer; l++) {
        memcpy(R->mix.k[l], R->rk[l], sizeof(float) * (size_t)R->n_rows * kvd);
        memcpy(R->mix.v[l], R->rv[l], sizeof(float) * (size_t)R->n_rows * kvd);
    }
    struct kvfs_work w;
    if (kvfs_work_alloc(m, na + nq, &w))
        return NAN;
    int32_t *rows = malloc(sizeof(int32_t) * (size_t)(na + nq));
    double *cum = calloc((size_t)(na + nq), sizeof(double));
    struct scored *sc = malloc(sizeof(*sc) * (size_t)na);
    for (int i = 0; i < na + nq; i++) {
        rows[i] = i < na ? cand[i] : R->n_rows + (i - na);
        w.ids[i] = R->all[rows[i]], w.pos[i] = rows[i];
    }
    int rc = kvfs_embed(m, w.ids, w.x, na + nq), E = m->hp.n_embd;
    for (int l = 0; !rc && l < R->n_layer; l++) {
        int n = na + nq;
        if ((rc = kvfs_layer_qkv(m, l, &w, n)))
            break;
        for (int i = 0; i < n; i++) {
            if (i < na) {
                double d = 0;
                for (int c = 0; c < kvd; c++) {
                    double x = w.v[(size_t)i * kvd + c] - R->rv[l][(size_t)rows[i] * kvd + c];
                    d += x * x;
                }
                cum[i] += sqrt(d);
            }
            memcpy(R->mix.k[l] + (size_t)rows[i] * kvd, w.k + (size_t)i * kvd, sizeof(float) * (size_t)kvd);
            memcpy(R->mix.v[l] + (size_t)rows[i] * kvd, w.v + (size_t)i * kvd, sizeof(float) * (size_t)kvd);
        }
        if ((rc = kvfs_layer_finish(m, l, &w, n, &R->mix, n_ctx)))
            break;
        int nn = l + 1 < R->n_layer ? n_at[l + 1] : na;
        if (nn < na) { /* keep the best nn, in their order, then the question */
            for (int i = 0; i < na; i++)
                sc[i] = (struct scored){crit == 0 ? mass[rows[i]] : crit == 1 ? mass[rows[i]] * (float)cum[i]
                                                                               : (float)cum[i], i};
            qsort(sc, (size_t)na, sizeof(*sc), by_score_desc);
            unsigned char *keep = calloc((size_t)na, 1);
            for (int i = 0; i < nn; i++)
                keep[sc[i].r] = 1;
            int j = 0;
            for (int i = 0; i < n; i++)
                if (i >= na || keep[i]) {
                    memmove(w.x + (size_t)j * E, w.x + (size_t)i * E, sizeof(float) * (size_t)E);
                    rows[j] = rows[i], w.ids[j] = w.ids[i], w.pos[j] = w.pos[i], cum[j] = cum[i];
                    j++;
                }
            free(keep);
            na = nn;
        }
    }
    if (!rc)
        rc = kvfs_output_logits(m, &w, na + nq - 1, R->logits);
    kvfs_work_free(m, &w);
    free(rows);
    free(cum);
    free(sc);
    return rc ? NAN : kvfs_logits_kl(R->full_logits, R->logits, m->hp.n_vocab);
}


/* A blend without the chunk shift: rows with sel[r] recomputed from layer 0
 * over the reused cache (their own K/V replacing the reused ones layer by
 * layer), the question with them; KL(full || its next token).  The gradual
 * blend above with the same rows at every layer. */
static double blend_kl(struct run *R, const unsigned char *sel)
{
    int n = 0, *rows = malloc(sizeof(int) * (size_t)R->n_rows), *n_at = malloc(sizeof(int) * (size_t)R->n_layer);
    for (int r = 0; r < R->n_rows; r++)
        if (sel[r])
            rows[n++] = r;
    for (int l = 0; l < R->n_layer; l++)
        n_at[l] = n;
    double kl = blend_gradual_kl(R, rows, NULL, n_at, 0);
    free(rows);
    free(n_at);
    return kl;
}

static void rank_rows(const struct run *R, const float *score, int first, int *cand);

/* mark the k rows of [from, n) with the highest score exact at every layer */
static void top_rows(struct run *R, const float *score, int from, int k, unsigned char **exact)
{
    int *cand = malloc(sizeof(int) * (size_t)(R->n_rows - from));
    rank_rows(R, score, from, cand);
    for (int l = 0; l < R->n_layer; l++)
        memset(exact[l], 0, (size_t)R->n_rows);
    for (int i = 0; i < k && i < R->n_rows - from; i++)
        for (int l = 0; l < R->n_layer; l++)
            exact[l][cand[i]] = 1;
    free(cand);
}

static double vdev(struct run *R, int l, int r)
{
    double d = 0;
    for (int c = 0; c < R->kvd; c++) {
        double x = R->full->v[l][(size_t)r * R->kvd + c] - R->rv[l][(size_t)r * R->kvd + c];
        d += x * x;
    }
    return sqrt(d);
}

/* Row scores from the question's attention (R->mass, filled by the reuse
 * pass) over layers [from, L): sliding-window layers weigh local_w (0: they
 * do not vote), global ones 1; by_dev multiplies each layer's vote by the
 * row's true |dV| there (known only to this oracle), and dev_only scores
 * that deviation alone.  Rows before `first` (the exact first chunk) score 0. */
static void score_rows(struct run *R, float *score, int first, int from, float local_w, int by_dev, int dev_only)
{
    memset(score, 0, sizeof(float) * (size_t)R->n_rows);
    for (int l = from; l < R->n_layer; l++) {
        float w = R->m->layers[l].window ? local_w : 1.0f;
        if (w == 0.0f)
            continue;
        for (int r = first; r < R->n_rows; r++)
            score[r] += dev_only ? (float)vdev(R, l, r)
                                 : R->mass[l][r] * w * (by_dev ? (float)vdev(R, l, r) : 1.0f);
    }
}

/* rows [first, n_rows) by descending score into cand */
static void rank_rows(const struct run *R, const float *score, int first, int *cand)
{
    int n = R->n_rows - first;
    struct scored *s = malloc(sizeof(*s) * (size_t)n);
    for (int i = 0; i < n; i++)
        s[i] = (struct scored){score[first + i], first + i};
    qsort(s, (size_t)n, sizeof(*s), by_score_desc);
    for (int i = 0; i < n; i++)
        cand[i] = s[i].r;
    free(s);
}

/* Rows per layer for a gradual blend of mean k: hi = hi_x k rows (at most
 * n_max) for the first `hold` layers, then linearly down so that the mean
 * is k; non-increasing, at least one row. */
static void gradual_rows(int *n_at, int L, int k, float hi_x, int hold, int n_max)
{
    int hi = (int)(hi_x * k);
    if (hi > n_max)
        hi = n_max;
    double lo = 2.0 * ((double)L * k - (double)hold * hi) / (L - hold) - hi;
    for (int l = 0; l < L; l++)
        n_at[l] = l < hold ? hi : (int)lround(hi + (lo - hi) * (l - hold) / (double)(L - 1 - hold));
    for (int l = 1; l < L; l++)
        n_at[l] = n_at[l] < 1 ? 1 : n_at[l] > n_at[l - 1] ? n_at[l - 1] : n_at[l];
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: oracle MODEL RATIO QUESTION PASSAGE...\n");
        return 2;
    }
    struct kvfs_model *m = NULL;
    struct kvfs_tokenizer *tok = NULL;
    if (tool_load_model(argv[1], "cpu", 0, &m, &tok))
        return 1;
    const struct kvfs_hparams *hp = &m->hp;
    const struct kvfs_backend_iface *be = m->be.iface;
    void *ctx = m->be.ctx;
    float ratio = strtof(argv[2], NULL);
    int n_files = argc - 4, n_rows = 0, kvd = hp->n_kv_head * hp->head_dim, L = hp->n_layer;
    if (n_files > MAX_FILES || n_files < 2)
        return 2;
    int32_t *ids[MAX_FILES + 1];
    size_t nids[MAX_FILES + 1];
    int row0[MAX_FILES + 1];
    struct kvfs_kv_cache cc[MAX_FILES];
    for (int f = 0; f <= n_files; f++) {
        if (f < n_files ? tool_tokenize_file(tok, argv[4 + f], 1, &ids[f], &nids[f])
                        : kvfs_tokenize(tok, argv[3], strlen(argv[3]), 0, 0, &ids[f], &nids[f])) {
            fprintf(stderr, "oracle: cannot read or tokenize %s\n", f < n_files ? argv[4 + f] : "the question");
            return 1;
        }
        row0[f] = n_rows;
        if (f < n_files) {
            if (kvfs_kv_cache_init(m, (int)nids[f], &cc[f]) ||
                kvfs_forward(m, &cc[f], ids[f], (int)nids[f], 0, NULL)) {
                fprintf(stderr, "oracle: cannot prefill %s\n", argv[4 + f]);
                return 1;
            }
            n_rows += (int)nids[f];
        }
    }
    int nq = (int)nids[n_files], n_ctx = n_rows + nq;
    int32_t *all = malloc(sizeof(int32_t) * (size_t)n_ctx);
    for (int f = 0, r = 0; f <= n_files; f++)
        for (size_t t = 0; t < nids[f]; t++, r++)
            all[r] = ids[f][t];
    struct kvfs_kv_cache fc;
    struct run R = {.m = m, .n_rows = n_rows, .nq = nq, .kvd = kvd, .n_layer = L, .full = &fc, .qids = ids[n_files],
                    .all = all};
    R.full_logits = malloc(sizeof(float) * (size_t)hp->n_vocab);
    R.logits = malloc(sizeof(float) * (size_t)hp->n_vocab);
    if (kvfs_kv_cache_init(m, n_ctx, &fc) || kvfs_forward(m, &fc, all, n_ctx, 0, R.full_logits) ||
        kvfs_kv_cache_init(m, n_ctx, &R.mix)) {
        fprintf(stderr, "oracle: cannot prefill the prompt\n");
        return 1;
    }
    if (getenv("ORACLE_SLICES")) {
        /* the arithmetic's own spread: the same prompt prefilled in slices of
         * N rows (other matmul kernels below their row threshold: integer
         * dot products instead of f32 tiles), against the one-shot prefill */
        int step = atoi(getenv("ORACLE_SLICES"));
        struct kvfs_kv_cache sc;
        if (step < 1 || kvfs_kv_cache_init(m, n_ctx, &sc))
            return 1;
        for (int at = 0; at < n_ctx; at += step) {
            int n = n_ctx - at < step ? n_ctx - at : step;
            if (kvfs_forward(m, &sc, all + at, n, at, at + n == n_ctx ? R.logits : NULL))
                return 1;
        }
        printf("tokens %d\n%-40s %.4f\n", n_ctx, "full prefill in slices",
               kvfs_logits_kl(R.full_logits, R.logits, hp->n_vocab));
        return 0;
    }
    for (int r = 0; r < n_ctx; r++)
        R.mix.host_pos[r] = r;
    memcpy(R.mix.pos, R.mix.host_pos, sizeof(int32_t) * (size_t)n_ctx);
    R.mix.n = n_ctx;
    /* the reused cache: each chunk rounded to f16 (as stored), keys rotated by the chunk's offset */
    R.rk = calloc((size_t)L, sizeof(float *));
    R.rv = calloc((size_t)L, sizeof(float *));
    R.mass = calloc((size_t)L, sizeof(float *));
    unsigned char **exact = calloc((size_t)L, sizeof(unsigned char *));
    int32_t *shift = malloc(sizeof(int32_t) * (size_t)n_rows);
    int *t_in_chunk = malloc(sizeof(int) * (size_t)n_rows);
    for (int l = 0; l < L; l++) {
        R.rk[l] = malloc(sizeof(float) * (size_t)n_rows * kvd);
        R.rv[l] = malloc(sizeof(float) * (size_t)n_rows * kvd);
        R.mass[l] = calloc((size_t)n_ctx, sizeof(float));
        exact[l] = calloc((size_t)n_rows, 1);
        for (int f = 0; f < n_files; f++) {
            size_t cnt = nids[f] * (size_t)kvd;
            memcpy(R.rk[l] + (size_t)row0[f] * kvd, cc[f].k[l], sizeof(float) * cnt);
            memcpy(R.rv[l] + (size_t)row0[f] * kvd, cc[f].v[l], sizeof(float) * cnt);
            for (size_t t = 0; t < nids[f]; t++)
                shift[row0[f] + t] = row0[f], t_in_chunk[row0[f] + t] = (int)t;
        }
        be->round_f16(ctx, R.rk[l], (size_t)n_rows * kvd);
        be->round_f16(ctx, R.rv[l], (size_t)n_rows * kvd);
        be->rope(ctx, R.rk[l], shift, n_rows, hp->n_kv_head, hp->head_dim, hp->rope_dim, m->layers[l].rope_theta,
                 hp->rope_style, m->rope_freqs);
    }
    int first = (int)nids[0], n_later = n_rows - first;
    int k = (int)ceilf(ratio * (float)n_rows - 1e-4f);
    if (k < 96)
        k = 96;
    if (k > n_later)
        k = n_later;
    int win = 0;
    for (int l = 0; l < L; l++)
        if (m->layers[l].window > win)
            win = m->layers[l].window;
    printf("tokens %d, chunks %d, question %d, budget %d rows (%.3f of the chunk rows)\n", n_ctx, n_files, nq, k,
           (double)k / n_rows);

    double kl_reuse = question_kl(&R, NULL, R.mass);
    printf("%-40s %.4f\n", "reuse", kl_reuse);
#define MASK(label, cond)                                                                                          \
    do {                                                                                                           \
        for (int l = 0; l < L; l++)                                                                                \
            for (int r = 0; r < n_rows; r++)                                                                       \
                exact[l][r] = (cond);                                                                              \
        printf("%-40s %.4f\n", label, question_kl(&R, exact, NULL));                                             \
    } while (0)
    MASK("exact: every row (sanity, 0)", 1);
    if (win) {
        MASK("exact: global layers", m->layers[l].window == 0);
        MASK("exact: sliding-window layers", m->layers[l].window != 0);
        MASK("exact: the question's window", r >= n_ctx - win);
        MASK("exact: the question's window, local layers", r >= n_ctx - win && m->layers[l].window != 0);
    }
    MASK("exact: the last chunk", r >= row0[n_files - 1]);
    MASK("exact: the first 32 rows of each later chunk", r >= first && t_in_chunk[r] < 32);
    /* row choices: the served selection's voters are the layers from a
     * third up, global ones only (all of them where there are none) */
    float *score = calloc((size_t)n_rows, sizeof(float));
    int from = (int)(L / 3.0f + 1e-4f), n_global = 0;
    for (int l = from; l < L; l++)
        n_global += m->layers[l].window == 0;
    float served_local = n_global ? 0.0f : 1.0f;
#define CHOICE(label, blend_too)                                                                                   \
    do {                                                                                                           \
        top_rows(&R, score, first, k, exact);                                                                      \
        printf("%-40s %.4f\n", "exact: " label, question_kl(&R, exact, NULL));                                   \
        if (blend_too)                                                                                             \
            printf("%-40s %.4f\n", "blend: " label, blend_kl(&R, exact[0]));                                     \
    } while (0)
    score_rows(&R, score, first, from, served_local, 0, 0);
    CHOICE("top mass (the served rows)", 1);
    score_rows(&R, score, first, 0, 1.0f, 0, 1);
    CHOICE("top dev", 0);
    score_rows(&R, score, first, from, served_local, 1, 0);
    CHOICE("top mass.dev", 0);
    score_rows(&R, score, first, 0, 1.0f, 1, 0);
    CHOICE("top all.dev", 1);
    /* attention alone, sliding-window layers voting through their window */
    score_rows(&R, score, first, from, 1.0f, 0, 0);
    CHOICE("top mass, local layers too", 1);
    score_rows(&R, score, first, 0, 1.0f, 0, 0);
    CHOICE("top all-layer mass", 1);
    score_rows(&R, score, first, from, 1.0f, 1, 0);
    CHOICE("top all.dev from a third", 0);
    /* the served mass with the sliding-window layers' votes weighted by wl,
     * and spans: every row scored by the mean over +-h rows of its chunk */
    static const float wls[] = {0.1f, 0.3f};
    for (int i = 0; i < 2; i++) {
        score_rows(&R, score, first, from, wls[i], 0, 0);
        top_rows(&R, score, first, k, exact);
        char label[64];
        snprintf(label, sizeof(label), "blend: local votes x %.1f", wls[i]);
        printf("%-40s %.4f\n", label, blend_kl(&R, exact[0]));
    }
    static const int hs[] = {2, 8};
    float *base = calloc((size_t)n_rows, sizeof(float));
    score_rows(&R, base, first, from, served_local, 0, 0);
    for (int i = 0; i < 2; i++) {
        for (int r = first; r < n_rows; r++) {
            double sum = 0;
            int cnt = 0;
            for (int d = -hs[i]; d <= hs[i]; d++)
                if (r + d >= first && r + d < n_rows && r + d - t_in_chunk[r + d] == r - t_in_chunk[r])
                    sum += base[r + d], cnt++;
            score[r] = (float)(sum / cnt);
        }
        top_rows(&R, score, first, k, exact);
        char label[64];
        snprintf(label, sizeof(label), "blend: spans of +-%d", hs[i]);
        printf("%-40s %.4f\n", label, blend_kl(&R, exact[0]));
    }
    free(base);
    /* gradual: 1.3k rows held for the first third of the layers, then fewer
     * going up (mean k), or 1.5k falling from layer 0; kept by mass, mass x
     * the deviation found, or that deviation; then the first with every
     * layer voting (sliding-window ones through their window) */
    int *n_at = malloc(sizeof(int) * (size_t)L), *cand = malloc(sizeof(int) * (size_t)n_later);
    score_rows(&R, score, first, from, served_local, 0, 0);
    rank_rows(&R, score, first, cand);
    static const float his[] = {1.3f, 1.5f};
    for (int h = 0; h < 2; h++) {
        gradual_rows(n_at, L, k, his[h], h ? 0 : L / 3, n_later);
        for (int crit = 0; crit < 3; crit++) {
            char label[64];
            snprintf(label, sizeof(label), "blend: gradual %.1fk%s, by %s", his[h], h ? "" : " held",
                     crit == 0 ? "mass" : crit == 1 ? "mass x dev" : "dev");
            printf("%-40s %.4f\n", label, blend_gradual_kl(&R, cand, score, n_at, crit));
        }
    }
    score_rows(&R, score, first, 0, 1.0f, 0, 0);
    rank_rows(&R, score, first, cand);
    gradual_rows(n_at, L, k, 1.3f, L / 3, n_later);
    printf("%-40s %.4f\n", "blend: all-layer mass, gradual, mass x dev", blend_gradual_kl(&R, cand, score, n_at, 1));
    free(n_at);
    free(cand);
    /* the served mass with the question's window forced */
    score_rows(&R, score, first, from, served_local, 0, 0);
    for (int r = first; r < n_rows; r++)
        if (win && r >= n_ctx - win)
            score[r] += 1e6f;
    CHOICE("window first, then top mass", 0);
    return 0;
}
