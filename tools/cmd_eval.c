/* kvfsctl eval - blending against full prefill on one RAG prompt:
 * chunks from text files, a query, and for full prefill, prefix caching,
 * full reuse and blends at several ratios: TTFT, KL divergence of the
 * next-token distribution from full prefill's, top-1 agreement and the
 * agreement of a greedy continuation. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blend.h"
#include "commands.h"
#include "model_util.h"
#include "tool_util.h"

#define MAX_CHUNKS 64
#define MAX_RATIOS 16

static double kl_div(const float *p, const float *q, int n)
{
    double mp = -INFINITY, mq = -INFINITY, sp = 0, sq = 0, k = 0;
    for (int i = 0; i < n; i++) {
        mp = fmax(mp, p[i]);
        mq = fmax(mq, q[i]);
    }
    for (int i = 0; i < n; i++) {
        sp += exp(p[i] - mp);
        sq += exp(q[i] - mq);
    }
    double lsp = log(sp), lsq = log(sq);
    for (int i = 0; i < n; i++) {
        double lp = p[i] - mp - lsp, lq = q[i] - mq - lsq;
        k += exp(lp) * (lp - lq);
    }
    return k > 0 ? k : 0;
}

/* Greedy continuation of n tokens from a cache whose next logits are given. */
static int continue_greedy(const struct kvfs_model *m, struct kvfs_kv_cache *c, const float *logits0, int n,
                           int32_t *out)
{
    float *lg = malloc(sizeof(float) * (size_t)m->hp.n_vocab);
    if (!lg)
        return -ENOMEM;
    memcpy(lg, logits0, sizeof(float) * (size_t)m->hp.n_vocab);
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        out[i] = tool_argmax(lg, m->hp.n_vocab);
        if (i + 1 < n)
            rc = kvfs_forward(m, c, &out[i], 1, c->n, lg);
    }
    free(lg);
    return rc;
}

struct result {
    char name[32];
    double ttft, kl;
    int top1, agree;
};

int cmd_eval(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"ratio", required_argument, 0, 'r'},
        {"query", required_argument, 0, 'q'}, {"json", no_argument, 0, 'j'},
        {"greedy", required_argument, 0, 'g'}, {"threads", required_argument, 0, 't'},
        {"backend", required_argument, 0, 'b'}, {"select", required_argument, 0, 's'},
        {"taper", required_argument, 0, 'T'}, {"sinks", required_argument, 0, 'S'},
        {"deviation", required_argument, 0, 'D'}, {"query-weighted", no_argument, 0, 'W'},
        {"check-layer", required_argument, 0, 'C'}, {"no-prefix", no_argument, 0, 'P'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    struct kvfs_blend_opts bo;
    kvfs_blend_opts_init(&bo, 0.15f);
    int selects[3] = {bo.select, -1, -1}, n_selects = 1, no_prefix = 0;
    const char *model = NULL, *query = NULL, *backend = "cpu";
    float ratios[MAX_RATIOS];
    int n_ratios = 0, json = 0, greedy = 32, threads = 0, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:r:q:t:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'r': {
            char *s = strdup(optarg), *save = NULL;
            for (char *p = strtok_r(s, ",", &save); p && n_ratios < MAX_RATIOS; p = strtok_r(NULL, ",", &save))
                ratios[n_ratios++] = strtof(p, NULL);
            free(s);
            break;
        }
        case 'q': query = optarg; break;
        case 'j': json = 1; break;
        case 'g': greedy = atoi(optarg); break;
        case 't': threads = atoi(optarg); break;
        case 'b': backend = optarg; break;
        case 's': {
            /* a comma list, each name once, in the order given */
            char list[128], *save = NULL;
            snprintf(list, sizeof(list), "%s", optarg);
            n_selects = 0;
            for (char *p = strtok_r(list, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
                int sel = kvfs_blend_select_parse(p), dup = 0;
                for (int i = 0; i < n_selects; i++)
                    dup |= selects[i] == sel;
                if (sel < 0 || dup || n_selects == 3) {
                    fprintf(stderr, "kvfsctl eval: --select: '%s' is not one of query, fixed, gradual (each once)\n", p);
                    return 2;
                }
                selects[n_selects++] = sel;
            }
            if (!n_selects) {
                fprintf(stderr, "kvfsctl eval: --select takes query, fixed, gradual or a comma list\n");
                return 2;
            }
            break;
        }
        case 'T': bo.taper = strtof(optarg, NULL); break;
        case 'S': bo.sink_rows = atoi(optarg); break;
        case 'D': bo.deviation_on_k = !strcmp(optarg, "k"); break;
        case 'P': no_prefix = 1; break;
        case 'W': bo.query_weighted = 1; break;
        case 'C': bo.check_layer = atoi(optarg); break;
        case 'h':
            printf("usage: kvfsctl eval -m MODEL --query TEXT [--ratio R[,R...]] [--json] CHUNK_FILE...\n"
                   "Build the prompt CHUNK_1 .. CHUNK_k QUERY (each chunk's text tokenized and\n"
                   "prefilled on its own, as kvfs stores them) and compare against a full\n"
                   "prefill of the same tokens: prefix caching (first chunk reused), full reuse\n"
                   "(ratio 0) and blends at each ratio (default 0.15).  Reports TTFT (from cached\n"
                   "chunks in memory to the first token's logits), KL(full || method) of the\n"
                   "next-token distribution, top-1 agreement, and the share of a greedy\n"
                   "continuation (--greedy N, default 32) identical to full prefill's.\n"
                   "Selection: --select query|fixed|gradual or a comma list of them (default %s),\n"
                   "--taper X (gradual: share from R*(1+X) down to R*(1-X), default 0.5), --sinks N\n"
                   "(first N rows of each later chunk always recomputed, default 1); for fixed and\n"
                   "gradual: --deviation v|k, --query-weighted (deviation x the query's attention at\n"
                   "the check layer), --check-layer N (default 1).\n"
                   "--no-prefix skips the prefix-caching baseline.  With --json, the prompt's\n"
                   "token ids and full prefill's greedy continuation are included.\n",
                   kvfs_blend_select_name(KVFS_BLEND_SELECT_DEFAULT));
            return 0;
        default: return 2;
        }
    }
    int n_files = argc - optind;
    if (!model || !query || n_files < 1 || n_files > MAX_CHUNKS || greedy < 1) {
        fprintf(stderr, "usage: kvfsctl eval -m MODEL --query TEXT [--ratio R,...] CHUNK_FILE...\n");
        return 2;
    }
    if (!n_ratios)
        ratios[n_ratios++] = 0.15f;
    for (int i = 0; i < n_ratios; i++)
        if (!(ratios[i] >= 0 && ratios[i] <= 1)) {
            fprintf(stderr, "kvfsctl eval: ratio %g outside [0, 1]\n", (double)ratios[i]);
            return 2;
        }
    struct kvfs_model *m;
    struct kvfs_tokenizer *tok;
    if (tool_load_model(model, backend, threads, &m, &tok))
        return 1;
    if (kvfs_blend_selftest(m) != 0) {
        fprintf(stderr, "kvfsctl eval: RoPE re-rotation self-test failed for this model; refusing to blend\n");
        return 1;
    }
    int V = m->hp.n_vocab, ret = 1, rc;
    struct kvfs_writer w[MAX_CHUNKS];
    struct kvfs_blend_chunk ch[MAX_CHUNKS];
    int32_t *ids[MAX_CHUNKS] = {0}, *qids = NULL;
    size_t nids[MAX_CHUNKS] = {0}, nq = 0;
    int made = 0, total = 0;
    memset(w, 0, sizeof(w));
    for (int i = 0; i < n_files; i++) {
        struct kvfs_kv_cache cc;
        if (tool_tokenize_file(tok, argv[optind + i], 0, &ids[i], &nids[i]))
            goto out;
        if ((rc = kvfs_kv_cache_init(m, (int)nids[i], &cc)))
            goto out;
        rc = kvfs_forward(m, &cc, ids[i], (int)nids[i], 0, NULL);
        if (!rc)
            rc = kvfs_kv_cache_to_chunk(m, &cc, 0, (int)nids[i], ids[i], KVFS_DTYPE_F16, &w[i]);
        kvfs_kv_cache_free(m, &cc);
        if (rc) {
            fprintf(stderr, "kvfsctl eval: cannot prefill %s: %s\n", argv[optind + i], strerror(-rc));
            goto out;
        }
        ch[i] = (struct kvfs_blend_chunk){w[i].buf, w[i].size};
        made++;
        total += (int)nids[i];
    }
    if ((rc = kvfs_tokenize(tok, query, strlen(query), 0, 0, &qids, &nq)) || nq == 0) {
        fprintf(stderr, "kvfsctl eval: cannot tokenize the query\n");
        goto out;
    }
    int n_ctx = total + (int)nq;
    int32_t *all = malloc(sizeof(int32_t) * (size_t)n_ctx);
    float *ref = malloc(sizeof(float) * (size_t)V), *lg = malloc(sizeof(float) * (size_t)V);
    int32_t *gref = malloc(sizeof(int32_t) * (size_t)greedy), *gm = malloc(sizeof(int32_t) * (size_t)greedy);
    struct result res[2 * MAX_RATIOS + 4];
    int nres = 0;
    if (!all || !ref || !lg || !gref || !gm)
        goto free_bufs;
    int at = 0;
    for (int i = 0; i < n_files; i++)
        for (size_t j = 0; j < nids[i]; j++)
            all[at++] = ids[i][j];
    for (size_t j = 0; j < nq; j++)
        all[at++] = qids[j];
    /* full prefill */
    struct kvfs_kv_cache fc;
    if ((rc = kvfs_kv_cache_init(m, n_ctx + greedy, &fc)))
        goto free_bufs;
    double t0 = tool_now();
    rc = kvfs_forward(m, &fc, all, n_ctx, 0, ref);
    double t_full = tool_now() - t0;
    if (!rc)
        rc = continue_greedy(m, &fc, ref, greedy, gref);
    kvfs_kv_cache_free(m, &fc);
    if (rc)
        goto free_bufs;
    res[nres++] = (struct result){"full prefill", t_full, 0.0, 1, greedy};
    /* prefix caching: the first chunk's cache is exact (position 0) */
    if (no_prefix)
        goto blends;
    struct kvfs_kv_cache pc;
    if ((rc = kvfs_kv_cache_init(m, n_ctx + greedy, &pc)))
        goto free_bufs;
    char err[256] = "";
    t0 = tool_now();
    rc = kvfs_kv_cache_load_chunk(m, &pc, ch[0].image, ch[0].len, err, sizeof(err));
    if (!rc)
        rc = kvfs_forward(m, &pc, all + nids[0], n_ctx - (int)nids[0], (int)nids[0], lg);
    double t_pre = tool_now() - t0;
    if (!rc)
        rc = continue_greedy(m, &pc, lg, greedy, gm);
    kvfs_kv_cache_free(m, &pc);
    if (rc)
        goto free_bufs;
    struct result r = {"prefix caching", t_pre, kl_div(ref, lg, V), tool_argmax(lg, V) == tool_argmax(ref, V), 0};
    for (int i = 0; i < greedy; i++)
        r.agree += gm[i] == gref[i];
    res[nres++] = r;
blends:;
    /* full reuse and blends */
    float all_ratios[MAX_RATIOS + 1];
    int nr = 0;
    all_ratios[nr++] = 0.0f;
    for (int i = 0; i < n_ratios; i++)
        if (ratios[i] > 0)
            all_ratios[nr++] = ratios[i];
    for (int v = 0; v < nr * n_selects; v++) {
        int i = v % nr, sel = selects[v / nr];
        if (v >= nr && all_ratios[i] == 0)
            continue; /* full reuse does not depend on the selection */
        if (v >= nr && all_ratios[i] >= 1)
            continue; /* nor does a full recompute */
        struct kvfs_kv_cache bc;
        int32_t *bt;
        struct kvfs_blend_stats st;
        /* the cache needs room to continue: blend, then copy into a bigger one is
         * costly; instead decode into a fresh cache built the same way */
        t0 = tool_now();
        bo.ratio = all_ratios[i];
        bo.select = sel;
        rc = kvfs_blend_ex(m, ch, n_files, qids, (int)nq, &bo, &bc, &bt, lg, &st, err, sizeof(err));
        double t_b = tool_now() - t0;
        if (rc) {
            fprintf(stderr, "kvfsctl eval: blend failed: %s\n", err);
            goto free_bufs;
        }
        struct result br = {"", t_b, kl_div(ref, lg, V), tool_argmax(lg, V) == tool_argmax(ref, V), 0};
        if (all_ratios[i] == 0)
            snprintf(br.name, sizeof(br.name), "full reuse");
        else if (n_selects > 1)
            snprintf(br.name, sizeof(br.name), "blend %.2f %s", (double)all_ratios[i], kvfs_blend_select_name(sel));
        else
            snprintf(br.name, sizeof(br.name), "blend %.2f", (double)all_ratios[i]);
        /* greedy continuation from the blended cache */
        struct kvfs_kv_cache gc;
        if ((rc = kvfs_kv_cache_init(m, n_ctx + greedy, &gc)) == 0) {
            size_t bytes = sizeof(float) * (size_t)n_ctx * bc.kv_dim;
            for (int l = 0; l < m->hp.n_layer && !rc; l++) {
                rc = m->be.iface->copy(m->be.ctx, gc.k[l], bc.k[l], bytes);
                if (!rc)
                    rc = m->be.iface->copy(m->be.ctx, gc.v[l], bc.v[l], bytes);
            }
            memcpy(gc.host_pos, bc.host_pos, sizeof(int32_t) * (size_t)n_ctx);
            if (!rc)
                rc = m->be.iface->upload(m->be.ctx, gc.pos, gc.host_pos, sizeof(int32_t) * (size_t)n_ctx);
            gc.n = n_ctx;
            if (!rc)
                rc = continue_greedy(m, &gc, lg, greedy, gm);
            kvfs_kv_cache_free(m, &gc);
        }
        kvfs_kv_cache_free(m, &bc);
        free(bt);
        if (rc)
            goto free_bufs;
        for (int k = 0; k < greedy; k++)
            br.agree += gm[k] == gref[k];
        res[nres++] = br;
    }
    if (json) {
        printf("{\"chunks\": %d, \"tokens\": %d, \"query_tokens\": %zu, \"results\": [", n_files, n_ctx, nq);
        for (int i = 0; i < nres; i++)
            printf("%s{\"method\": \"%s\", \"ttft_s\": %.6f, \"kl\": %.6g, \"top1\": %d, \"greedy_agree\": %.4f}",
                   i ? ", " : "", res[i].name, res[i].ttft, res[i].kl, res[i].top1, (double)res[i].agree / greedy);
        printf("], \"prompt_ids\": [");
        for (int i = 0; i < n_ctx; i++)
            printf("%s%d", i ? "," : "", all[i]);
        printf("], \"full_greedy\": [");
        for (int i = 0; i < greedy; i++)
            printf("%s%d", i ? "," : "", gref[i]);
        printf("]}\n");
    } else {
        printf("%d chunks, %d prompt tokens (%zu query)\n", n_files, n_ctx, nq);
        printf("%-16s %9s %9s %10s %5s %7s\n", "method", "TTFT s", "speedup", "KL", "top1", "greedy");
        for (int i = 0; i < nres; i++)
            printf("%-16s %9.3f %8.2fx %10.4g %5s %6.0f%%\n", res[i].name, res[i].ttft, res[0].ttft / res[i].ttft,
                   res[i].kl, res[i].top1 ? "yes" : "no", 100.0 * res[i].agree / greedy);
    }
    ret = 0;
free_bufs:
    free(all);
    free(ref);
    free(lg);
    free(gref);
    free(gm);
out:
    for (int i = 0; i < made; i++)
        kvfs_writer_free(&w[i]);
    for (int i = 0; i < n_files; i++)
        free(ids[i]);
    free(qids);
    kvfs_tokenizer_free(tok);
    kvfs_model_free(m);
    return ret;
}
