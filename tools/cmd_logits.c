/* kvfsctl logits - last-position log-probabilities (and optional greedy
 * continuation) for given token ids: the runtime's check against llama.cpp. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "forward.h"
#include "model.h"
#include "model_util.h"
#include "tool_util.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: kvfsctl logits -m MODEL (--tokens ID,ID,... | --tokens-file FILE) [options]\n"
               "Run the prompt's token ids through the model and print the last position's\n"
               "top-K log-probabilities as JSON.\n\n"
               "  -m, --model PATH      GGUF model\n"
               "  --tokens LIST         comma-separated token ids\n"
               "  --tokens-file FILE    whitespace-separated token ids ('-' = stdin)\n"
               "  --top K               how many (default 10)\n"
               "  --greedy N            also decode N tokens greedily and print their ids\n"
               "  --backend NAME        cpu, cuda or auto (default cpu)\n"
               "  -t, --threads N       CPU threads (default: all cores)\n");
}

int cmd_logits(int argc, char **argv)
{
    const char *model = NULL, *backend = "cpu", *tfile = NULL, *tlist = NULL;
    int top = 10, greedy = 0, threads = 0;
    const struct tool_opt opts[] = {
        TOOL_OPT("model", 'm', STR, &model), TOOL_OPT("tokens", 0, STR, &tlist),
        TOOL_OPT("tokens-file", 0, STR, &tfile), TOOL_OPT("top", 0, INT, &top),
        TOOL_OPT("greedy", 0, INT, &greedy), TOOL_OPT("backend", 0, STR, &backend),
        TOOL_OPT("threads", 't', INT, &threads), {0}};
    const struct tool_cmd cmd = {usage, opts, 0, -1};
    int rc = tool_parse_args(&cmd, argc, argv);
    if (rc != TOOL_ARGS_OK)
        return rc;
    if (!model || (!tlist && !tfile) || top < 1 || greedy < 0)
        return tool_usage_error(&cmd);
    int32_t *ids = NULL;
    int n = 0;
    if (tfile) {
        uint8_t *buf;
        size_t len;
        if ((rc = tool_read_file(tfile, &buf, &len))) {
            fprintf(stderr, "kvfsctl logits: %s: %s\n", tfile, strerror(-rc));
            return 1;
        }
        char *s = realloc(buf, len + 1);
        if (!s) {
            free(buf);
            return 1;
        }
        s[len] = '\0';
        rc = tool_parse_ids(s, &ids, &n);
        free(s);
    } else {
        char *s = strdup(tlist);
        rc = s ? tool_parse_ids(s, &ids, &n) : -ENOMEM;
        free(s);
    }
    if (rc) {
        fprintf(stderr, "kvfsctl logits: bad token list\n");
        return 2;
    }
    struct kvfs_model *m;
    char err[512] = "";
    double t0 = tool_now();
    if ((rc = kvfs_model_load(model, backend, threads, &m, err, sizeof(err)))) {
        fprintf(stderr, "kvfsctl logits: %s\n", err[0] ? err : strerror(-rc));
        free(ids);
        return 1;
    }
    double t1 = tool_now();
    struct kvfs_kv_cache cache;
    float *logits = malloc(sizeof(float) * (size_t)m->hp.n_vocab);
    int ret = 1;
    if (!logits || kvfs_kv_cache_init(m, n + greedy + 1, &cache) != 0) {
        fprintf(stderr, "kvfsctl logits: out of memory\n");
        goto out;
    }
    if ((rc = kvfs_forward(m, &cache, ids, n, 0, logits))) {
        fprintf(stderr, "kvfsctl logits: forward failed: %s\n", strerror(-rc));
        goto free_cache;
    }
    double t2 = tool_now();
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < m->hp.n_vocab; i++)
        if (logits[i] > mx)
            mx = logits[i];
    for (int i = 0; i < m->hp.n_vocab; i++)
        sum += exp(logits[i] - mx);
    double lse = mx + log(sum);
    printf("{\"n_tokens\": %d, \"prefill_s\": %.6f, \"load_s\": %.3f, \"top\": [", n, t2 - t1, t1 - t0);
    int *taken = calloc((size_t)m->hp.n_vocab, sizeof(int));
    for (int k = 0; k < top && taken; k++) {
        int best = -1;
        for (int i = 0; i < m->hp.n_vocab; i++)
            if (!taken[i] && (best < 0 || logits[i] > logits[best]))
                best = i;
        taken[best] = 1;
        printf("%s[%d, %.6f]", k ? ", " : "", best, logits[best] - lse);
    }
    free(taken);
    printf("]");
    if (greedy) {
        int32_t next = tool_argmax(logits, m->hp.n_vocab);
        printf(", \"greedy\": [");
        for (int g = 0; g < greedy; g++) {
            printf("%s%d", g ? ", " : "", next);
            if (g + 1 < greedy) {
                if ((rc = kvfs_forward(m, &cache, &next, 1, n + g, logits)))
                    break;
                next = tool_argmax(logits, m->hp.n_vocab);
            }
        }
        printf("]");
    }
    printf("}\n");
    ret = rc ? 1 : 0;
free_cache:
    kvfs_kv_cache_free(m, &cache);
out:
    free(logits);
    free(ids);
    kvfs_model_free(m);
    return ret;
}
