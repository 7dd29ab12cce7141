/* deviation - how a later chunk's cached K/V differ from a full prefill's,
 * by layer and by the row's place in its chunk (an analysis for the chunk
 * shift, blend/shift.c; BENCHMARKS.md).
 *
 * Each passage is prefilled alone (as kvfs stores it, with BOS when the
 * model wants one) and all of them plus
 * the question in full.  For every row of every chunk but the first, at
 * every layer: D = full - cached (keys compared in RoPE's frame of position
 * 0), and mu = the mean D over the chunk's rows.  Printed per layer band and
 * position band: the relative deviation |D| / |full|, the share of |D|^2 that
 * mu explains (1 - |D - mu|^2 / |D|^2, summed), the least-squares factor s of
 * D ~ s mu, and the share s mu explains.
 *
 * usage: deviation MODEL QUESTION PASSAGE... */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_util.h"
#include "runtime.h"

#define MAX_FILES 64
#define N_POS_BANDS 6
static const int pos_band_lo[N_POS_BANDS] = {0, 1, 4, 16, 64, 256};

static int pos_band(int t)
{
    int b = 0;
    while (b + 1 < N_POS_BANDS && t >= pos_band_lo[b + 1])
        b++;
    return b;
}

struct acc {
    double d2, f2, res_mu, dot, mu2, n; /* sums over rows */
};

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: deviation MODEL QUESTION PASSAGE...\n");
        return 2;
    }
    struct kvfs_model *m = NULL;
    struct kvfs_tokenizer *tok = NULL;
    if (tool_load_model(argv[1], "cpu", 0, &m, &tok))
        return 1;
    const struct kvfs_hparams *hp = &m->hp;
    int n_files = argc - 3, n_ctx = 0, kvd = hp->n_kv_head * hp->head_dim;
    if (n_files > MAX_FILES)
        return 2;
    int32_t *ids[MAX_FILES + 1];
    size_t nids[MAX_FILES + 1];
    struct kvfs_kv_cache cc[MAX_FILES];
    for (int f = 0; f <= n_files; f++) {
        if (f < n_files ? tool_tokenize_file(tok, argv[3 + f], 1, &ids[f], &nids[f])
                        : kvfs_tokenize(tok, argv[2], strlen(argv[2]), 0, 0, &ids[f], &nids[f])) {
            fprintf(stderr, "deviation: cannot read or tokenize %s\n", f < n_files ? argv[3 + f] : "the question");
            return 1;
        }
        if (f < n_files && (kvfs_kv_cache_init(m, (int)nids[f], &cc[f]) ||
                            kvfs_forward(m, &cc[f], ids[f], (int)nids[f], 0, NULL))) {
            fprintf(stderr, "deviation: cannot prefill %s\n", argv[3 + f]);
            return 1;
        }
        n_ctx += (int)nids[f];
    }
    int32_t *all = malloc(sizeof(int32_t) * (size_t)n_ctx), *neg = malloc(sizeof(int32_t) * (size_t)n_ctx);
    for (int f = 0, r = 0; f <= n_files; f++)
        for (size_t t = 0; t < nids[f]; t++, r++)
            all[r] = ids[f][t], neg[r] = -r;
    struct kvfs_kv_cache fc;
    if (kvfs_kv_cache_init(m, n_ctx, &fc) || kvfs_forward(m, &fc, all, n_ctx, 0, NULL)) {
        fprintf(stderr, "deviation: cannot prefill the prompt\n");
        return 1;
    }
    const struct kvfs_backend_iface *be = m->be.iface;
    int n_bands = 3;
    struct acc (*acc)[2][N_POS_BANDS] = calloc((size_t)n_bands, sizeof(*acc));
    double *mu = malloc(sizeof(double) * (size_t)kvd);
    for (int l = 0; l < hp->n_layer; l++) {
        int band = l * n_bands / hp->n_layer;
        float theta = m->layers[l].rope_theta;
        /* keys to position 0's frame: the full prefill's by its rows' positions, each chunk's by its own */
        be->rope(m->be.ctx, fc.k[l], neg, n_ctx, hp->n_kv_head, hp->head_dim, hp->rope_dim, theta, hp->rope_style, m->rope_freqs);
        for (int f = 1, row0 = (int)nids[0]; f < n_files; row0 += (int)nids[f], f++) {
            int n = (int)nids[f];
            be->rope(m->be.ctx, cc[f].k[l], neg, n, hp->n_kv_head, hp->head_dim, hp->rope_dim, theta, hp->rope_style, m->rope_freqs);
            for (int which = 0; which < 2; which++) {
                const float *full = (which ? fc.v[l] : fc.k[l]) + (size_t)row0 * kvd;
                const float *cached = which ? cc[f].v[l] : cc[f].k[l];
                memset(mu, 0, sizeof(double) * (size_t)kvd);
                for (int t = 0; t < n; t++)
                    for (int c = 0; c < kvd; c++)
                        mu[c] += (full[(size_t)t * kvd + c] - cached[(size_t)t * kvd + c]) / n;
                for (int t = 0; t < n; t++) {
                    struct acc *a = &acc[band][which][pos_band(t)];
                    for (int c = 0; c < kvd; c++) {
                        double d = full[(size_t)t * kvd + c] - cached[(size_t)t * kvd + c];
                        a->d2 += d * d;
                        a->f2 += (double)full[(size_t)t * kvd + c] * full[(size_t)t * kvd + c];
                        a->res_mu += (d - mu[c]) * (d - mu[c]);
                        a->dot += d * mu[c];
                        a->mu2 += mu[c] * mu[c];
                    }
                    a->n++;
                }
            }
        }
    }
    printf("| layers | K/V | rows in chunk | rows | |D| / |full| | mu explains | s (D ~ s mu) | s mu explains |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    for (int b = 0; b < n_bands; b++)
        for (int which = 0; which < 2; which++)
            for (int p = 0; p < N_POS_BANDS; p++) {
                struct acc *a = &acc[b][which][p];
                if (!a->n)
                    continue;
                double s = a->mu2 > 0 ? a->dot / a->mu2 : 0;
                double res_s = a->d2 - 2 * s * a->dot + s * s * a->mu2;
                char rows[32];
                if (p + 1 < N_POS_BANDS)
                    snprintf(rows, sizeof(rows), "%d-%d", pos_band_lo[p], pos_band_lo[p + 1] - 1);
                else
                    snprintf(rows, sizeof(rows), "%d+", pos_band_lo[p]);
                printf("| %d-%d | %s | %s | %.0f | %.3f | %.3f | %.2f | %.3f |\n", b * hp->n_layer / n_bands,
                       (b + 1) * hp->n_layer / n_bands - 1, which ? "V" : "K", rows, a->n / (hp->n_layer / n_bands),
                       sqrt(a->d2 / a->f2), 1 - a->res_mu / a->d2, s, 1 - res_s / a->d2);
            }
    return 0;
}
