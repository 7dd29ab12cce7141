/* kvfsctl eval - blending against full prefill on one RAG prompt:
 * chunks from text files, a query, and for full prefill, prefix caching,
 * full reuse and blends at several ratios: TTFT, KL divergence of the
 * next-token distribution from full prefill's, top-1 agreement and the
 * agreement of a greedy continuation. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

#include "blend.h"
#include "experiment.h"
#include "kvformat.h"
#include "kvquant.h"
#include "commands.h"
#include "model_util.h"
#include "tool_util.h"

#define MAX_CHUNKS 64
#define MAX_RATIOS 16
#define MAX_SELECTS 3 /* query, fixed, gradual: each once */

struct eval_args {
    const char *model, *query, *backend;
    float ratios[MAX_RATIOS];
    int n_ratios;
    int selects[MAX_SELECTS], n_selects;
    int json, greedy, threads, no_prefix, no_floor, no_vote_local;
    const char *bos;           /* each, first or none */
    const char *shared_prefix; /* --shared-prefix: every chunk prefilled after it, the prompt has it once */
    const char *kv_quant;      /* --kv-quant q8|q4|q4s: chunks' K/V through that codec, as if stored so */
    int kv_quant_keep;         /* --kv-quant-keep N: each chunk's first N rows left exact (sinks) */
    const char *kv_quant_part; /* --kv-quant-part k|v: only the keys or only the values through it */
    const char *ref_cache;     /* --ref-cache DIR: full prefills' logits kept there, by model and tokens */
    struct tool_chat chat;     /* --chat: chunks and query are the user's turn */
    char *chat_head, *chat_tail; /* the chat around them: the shared prefix, after the query */
    struct kvfs_blend_opts bo;
    struct kvfs_blend_experiment x; /* variants never served (experiment.h) */
    char **files;
    int n_files;
};

struct result {
    char name[32];
    double ttft, kl;
    int top1, agree;
    double cpu_s; /* CPU seconds of the method, every thread (a shared machine's steadier figure) */
};

/* One run: the chunks prefilled on their own, the whole prompt, full
 * prefill's logits and greedy continuation (the reference), and each
 * method's result. */
struct eval {
    const struct eval_args *a;
    struct kvfs_model *m;
    struct kvfs_tokenizer *tok;
    int V;                                  /* vocabulary size */
    struct kvfs_writer w[MAX_CHUNKS];       /* the chunk files, made = how many */
    struct kvfs_blend_chunk ch[MAX_CHUNKS];
    int32_t *ids[MAX_CHUNKS], *qids;
    size_t nids[MAX_CHUNKS], nq;
    int made, n_ctx;
    int32_t *all;                           /* the prompt: chunks, then query */
    float *ref, *lg;                        /* full prefill's logits; the method's */
    int32_t *gref, *gm;                     /* greedy continuations: full prefill's; the method's */
    struct result res[2 + (MAX_RATIOS + 1) * MAX_SELECTS];
    int nres;
    char err[256];
};

static void usage(FILE *f)
{
    fprintf(f, "usage: kvfsctl eval -m MODEL --query TEXT [--ratio R[,R...]] [--json] CHUNK_FILE...\n"
               "Build the prompt CHUNK_1 .. CHUNK_k QUERY (each chunk's text tokenized and\n"
               "prefilled on its own, as kvfs stores them) and compare against a full\n"
               "prefill of the same tokens: prefix caching (first chunk reused), full reuse\n"
               "(ratio 0) and blends at each ratio (default %g).  Reports TTFT (from cached\n"
               "chunks in memory to the first token's logits), KL(full || method) of the\n"
               "next-token distribution, top-1 agreement, and the share of a greedy\n"
               "continuation (--greedy N, default 32) identical to full prefill's.\n"
               "Selection: --select query|fixed|gradual or a comma list of them (default %s),\n"
               "--sinks N (first N rows of each later chunk always recomputed, default 1); for\n"
               "fixed and gradual: --check-layer N (default 1); for query: --shift S (a later\n"
               "chunk's reused rows follow S x the mean deviation of its recomputed rows,\n"
               "default %g; 0: off).  Variants kvfs does not serve, for comparison: for query,\n"
               "--vote-from F (the share of layers, from the bottom, whose attention does not\n"
               "count, default 0.333), --no-vote-local (only global layers vote; by default\n"
               "sliding-window layers vote too, through their window), --pos-prior B (row t\n"
               "of a chunk ranks by its attention x (t + 1)^-B: a chunk's first rows deviate\n"
               "most; default 0: off).\n"
               "The fidelity floor, as kvfs serves (kvfs(8)): --min-rows N (at least N chunk rows\n"
               "recomputed, default %d), --full-below N (prompts of at most N tokens prefilled in\n"
               "full, default 192); --no-floor measures the bare algorithm.\n"
               "--bos each|first|none: where the prompt has BOS when the model asks for one\n"
               "(Gemma; SmolLM2 does not): each chunk tokenized as the model's tokenizer\n"
               "does by default (each, the default: what an engine stores), only the first,\n"
               "or none.\n"
               "--shared-prefix TEXT (APE's shared prefix): BOS (when the model asks for one)\n"
               "and TEXT (special tokens parsed) are prefilled before every chunk; the first\n"
               "chunk keeps them, later chunks store only their own rows, so the prompt has\n"
               "the prefix once (\"\" for BOS alone).\n"
               "--chat [--system TEXT] [--chat-template T]: the chunks and the query are the\n"
               "user's turn of a chat in the model's template (as kvfsctl generate --chat):\n"
               "what comes before that turn is the shared prefix, the generation prompt follows\n"
               "the query (not with --shared-prefix or --bos).\n"
               "--kv-quant q8|q4|q4s: each chunk's K/V through that codec (index/\n"
               "kvquant.h), as if stored quantized (the full prefill stays exact);\n"
               "--kv-quant-keep N leaves each chunk's first N rows exact; --kv-quant-part k|v\n"
               "puts only the keys or only the values through the codec (where the error comes from).\n"
               "--no-prefix skips the prefix-caching baseline.  With --json, the prompt's\n"
               "token ids and full prefill's greedy continuation are included.\n"
               "--ref-cache DIR keeps each full prefill's logits and greedy continuation,\n"
               "and each chunk's cache, in DIR (by model, tokens and how they were made)\n"
               "and reuses them when they come again (comparing variants of a blend; the\n"
               "full prefill's TTFT is then the first run's; the key covers this kvfsctl's\n"
               "own bytes and the KVFS_* kernel overrides, so another build never reads them).\n"
               "--backend NAME: cpu (the default), cuda or auto; -t, --threads N: CPU threads\n"
               "(default: all cores).\n",
            (double)KVFS_BLEND_DEFAULT_RATIO, kvfs_blend_select_name(KVFS_BLEND_SELECT_DEFAULT), (double)KVFS_BLEND_SHIFT,
            KVFS_BLEND_MIN_ROWS);
}

/* --ratio R[,R...]: appended to the list (at most MAX_RATIOS) */
static int opt_ratios(void *dst, const char *arg)
{
    struct eval_args *a = dst;
    char *s = strdup(arg), *save = NULL;
    if (!s)
        return -ENOMEM;
    for (char *p = strtok_r(s, ",", &save); p && a->n_ratios < MAX_RATIOS; p = strtok_r(NULL, ",", &save))
        a->ratios[a->n_ratios++] = strtof(p, NULL);
    free(s);
    return 0;
}

/* --select: a comma list, each name once, in the order given */
static int opt_selects(void *dst, const char *arg)
{
    struct eval_args *a = dst;
    char list[128], *save = NULL;
    snprintf(list, sizeof(list), "%s", arg);
    a->n_selects = 0;
    for (char *p = strtok_r(list, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        int sel = kvfs_blend_select_parse(p), dup = 0;
        for (int i = 0; i < a->n_selects; i++)
            dup |= a->selects[i] == sel;
        if (sel < 0 || dup || a->n_selects == MAX_SELECTS) {
            fprintf(stderr, "kvfsctl eval: --select: '%s' is not one of query, fixed, gradual (each once)\n", p);
            return -EINVAL;
        }
        a->selects[a->n_selects++] = sel;
    }
    if (!a->n_selects) {
        fprintf(stderr, "kvfsctl eval: --select takes query, fixed, gradual or a comma list\n");
        return -EINVAL;
    }
    return 0;
}

/* TOOL_ARGS_OK, or the exit code (0 after --help, 2 on a usage error) */
static int parse_args(struct eval_args *a, int argc, char **argv)
{
    *a = (struct eval_args){.backend = "cpu", .greedy = 32, .n_selects = 1, .bos = "each"};
    kvfs_blend_opts_init(&a->bo, KVFS_BLEND_DEFAULT_RATIO);
    kvfs_blend_opts_floor(&a->bo); /* as kvfs serves; --no-floor: the bare algorithm */
    kvfs_blend_experiment_init(&a->x);
    a->selects[0] = a->bo.select;
    const struct tool_opt opts[] = {
        TOOL_OPT("model", 'm', STR, &a->model), TOOL_OPT_CALL("ratio", 'r', opt_ratios, a),
        TOOL_OPT("query", 'q', STR, &a->query), TOOL_OPT("json", 0, FLAG, &a->json),
        TOOL_OPT("greedy", 0, INT, &a->greedy), TOOL_OPT("threads", 't', INT, &a->threads),
        TOOL_OPT("backend", 0, STR, &a->backend), TOOL_OPT_CALL("select", 0, opt_selects, a),
        TOOL_OPT("sinks", 0, INT, &a->bo.sink_rows),
        TOOL_OPT("check-layer", 0, INT, &a->bo.check_layer), TOOL_OPT("no-prefix", 0, FLAG, &a->no_prefix),
        TOOL_OPT("bos", 0, STR, &a->bos), TOOL_OPT("min-rows", 0, INT, &a->bo.min_rows),
        TOOL_OPT("full-below", 0, INT, &a->bo.full_below), TOOL_OPT("no-floor", 0, FLAG, &a->no_floor),
        TOOL_OPT("shared-prefix", 0, STR, &a->shared_prefix), TOOL_OPT("shift", 0, FLOAT, &a->bo.shift),
        TOOL_OPT("vote-from", 0, FLOAT, &a->x.vote_from), TOOL_OPT("no-vote-local", 0, FLAG, &a->no_vote_local),
        TOOL_OPT("vote-local", 0, FLAG, &a->x.vote_local), /* the default; kept for old command lines */
        TOOL_OPT("pos-prior", 0, FLOAT, &a->x.pos_prior),
        TOOL_OPT("kv-quant", 0, STR, &a->kv_quant), TOOL_OPT("kv-quant-keep", 0, INT, &a->kv_quant_keep),
        TOOL_OPT("kv-quant-part", 0, STR, &a->kv_quant_part),
        TOOL_OPT("ref-cache", 0, STR, &a->ref_cache), TOOL_CHAT_OPTS(&a->chat),
        {0}};
    const struct tool_cmd cmd = {usage, opts, 1, MAX_CHUNKS};
    int rc = tool_parse_args(&cmd, argc, argv);
    if (rc != TOOL_ARGS_OK)
        return rc;
    a->files = argv + optind;
    a->n_files = argc - optind;
    if (!a->model || !a->query || a->greedy < 1 || tool_chat_check("eval", &a->chat))
        return tool_usage_error(&cmd);
    if (a->chat.on && (a->shared_prefix || strcmp(a->bos, "each"))) {
        fprintf(stderr, "kvfsctl eval: --chat makes the chat's head the shared prefix: not with --shared-prefix "
                "or --bos\n");
        return 2;
    }
    if (a->no_floor)
        a->bo.min_rows = a->bo.full_below = 0;
    if (a->no_vote_local)
        a->x.vote_local = 0;
    if (strcmp(a->bos, "each") && strcmp(a->bos, "first") && strcmp(a->bos, "none")) {
        fprintf(stderr, "kvfsctl eval: --bos %s: want each, first or none\n", a->bos);
        return 2;
    }
    if (a->shared_prefix && strcmp(a->bos, "each")) {
        fprintf(stderr, "kvfsctl eval: --shared-prefix puts BOS in the prefix: --bos does not apply\n");
        return 2;
    }
    if (a->kv_quant && (!kvfs_kvq_parse(a->kv_quant) || strcmp(a->backend, "cpu"))) {
        fprintf(stderr, "kvfsctl eval: --kv-quant %s: want q8, q4 or q4s, on the cpu backend\n", a->kv_quant);
        return 2;
    }
    char why[128];
    if (kvfs_blend_experiment_check(&a->x, why, sizeof(why))) {
        fprintf(stderr, "kvfsctl eval: %s (--vote-from: [0, 1), --pos-prior: 0 (off) to 4)\n", why);
        return 2;
    }
    if (a->kv_quant_part && (!a->kv_quant || (strcmp(a->kv_quant_part, "k") && strcmp(a->kv_quant_part, "v")))) {
        fprintf(stderr, "kvfsctl eval: --kv-quant-part %s: want k or v, with --kv-quant\n", a->kv_quant_part);
        return 2;
    }
    if (a->ref_cache)
        mkdir(a->ref_cache, 0755); /* EEXIST, or an error each write then reports */
    if (!a->n_ratios)
        a->ratios[a->n_ratios++] = KVFS_BLEND_DEFAULT_RATIO;
    for (int i = 0; i < a->n_ratios; i++)
        if (!(a->ratios[i] >= 0 && a->ratios[i] <= 1)) {
            fprintf(stderr, "kvfsctl eval: ratio %g outside [0, 1]\n", (double)a->ratios[i]);
            return 2;
        }
    return TOOL_ARGS_OK;
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

/* A method's result against full prefill's, from e->lg and e->gm. */
static void add_result(struct eval *e, const char *name, double ttft, double cpu_s)
{
    struct result r = {"", ttft, kvfs_logits_kl(e->ref, e->lg, e->V), tool_argmax(e->lg, e->V) == tool_argmax(e->ref, e->V), 0,
                       cpu_s};
    snprintf(r.name, sizeof(r.name), "%s", name);
    for (int i = 0; i < e->a->greedy; i++)
        r.agree += e->gm[i] == e->gref[i];
    e->res[e->nres++] = r;
}

/* ids (n of them) behind the shared prefix's np tokens: *ids grows */
static int behind_prefix(const int32_t *pre, size_t np, int32_t **ids, size_t *n)
{
    int32_t *all = malloc(sizeof(int32_t) * (np + *n));
    if (!all)
        return -ENOMEM;
    memcpy(all, pre, sizeof(int32_t) * np);
    memcpy(all + np, *ids, sizeof(int32_t) * *n);
    free(*ids);
    *ids = all;
    *n += np;
    return 0;
}

/* rows [first, first + n) of every layer through the --kv-quant codec and
 * back (the CPU backend's cache is host memory) */
static int quantize_rows(const struct eval *e, struct kvfs_kv_cache *c, int first, int n)
{
    int codec = kvfs_kvq_parse(e->a->kv_quant), kvd = c->kv_dim, rc = 0;
    const char *part = e->a->kv_quant_part;
    size_t bytes = sizeof(float) * (size_t)n * (size_t)kvd; /* the widest layer's */
    uint8_t *buf = malloc(kvfs_kvq_layer_bytes(codec, (uint32_t)n, (uint32_t)kvd));
    float *exact = part ? malloc(bytes) : NULL; /* the part that stays exact */
    if (!buf || (part && !exact)) {
        rc = -ENOMEM;
        goto out;
    }
    for (int l = 0; l < c->n_layer && !rc; l++) {
        const struct kvfs_layer_weights *L = &e->m->layers[l];
        if (L->kv_layer != l) /* gemma4's shared-KV layers: their source's cache, quantized there */
            continue;
        /* rows at the layer's own width (gemma4; kvfs(5), Layer shapes), as a chunk stores them */
        kvd = e->m->hp.mla_rank ? c->kv_dim : L->n_kv_head * L->head_dim;
        bytes = sizeof(float) * (size_t)n * (size_t)kvd;
        float *k = c->k[l] + (size_t)first * kvd, *v = c->v[l] + (size_t)first * kvd;
        float *keep = part ? (*part == 'k' ? v : k) : NULL;
        if (keep)
            memcpy(exact, keep, bytes);
        if (e->m->hp.mla_rank) { /* as an MLA chunk stores it: K alone, V its decoded rows, rotated part zero */
            if (!(rc = kvfs_kvq_encode_k(codec, k, (uint32_t)n, (uint32_t)kvd, buf)) &&
                !(rc = kvfs_kvq_decode_k(codec, buf, (uint32_t)n, (uint32_t)kvd, k)))
                for (size_t i = 0; i < (size_t)n * (size_t)kvd; i++)
                    v[i] = (int)(i % (size_t)kvd) < (int)e->m->fp.rope_dim ? 0.0f : k[i];
        } else if (!(rc = kvfs_kvq_encode(codec, k, v, (uint32_t)n, (uint32_t)kvd, buf))) {
            rc = kvfs_kvq_decode(codec, buf, (uint32_t)n, (uint32_t)kvd, k, v);
        }
        if (keep)
            memcpy(keep, exact, bytes);
    }
out:
    free(exact);
    free(buf);
    return rc;
}

/* What decides the arithmetic besides the model and the tokens: this
 * kvfsctl's own bytes (another build may round otherwise: a cache shared
 * across builds once mixed two arithmetics, BENCHMARKS.md) and the
 * environment's overrides of the kernels' choices.  Computed once. */
static uint64_t build_identity(void)
{
    static uint64_t id;
    if (id)
        return id;
    XXH3_state_t *st = XXH3_createState();
    if (!st || XXH3_64bits_reset(st) != XXH_OK) {
        XXH3_freeState(st);
        return 0;
    }
    uint8_t *exe = NULL;
    size_t len = 0;
    if (!tool_read_file("/proc/self/exe", &exe, &len))
        XXH3_64bits_update(st, exe, len);
    free(exe);
    static const char *vars[] = {"KVFS_QMM_INT_ROWS", "KVFS_ATT_INVARIANT_MIN_Q", "KVFS_F32_WEIGHTS", "KVFS_BLAS_CORE"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        const char *v = getenv(vars[i]);
        XXH3_64bits_update(st, vars[i], strlen(vars[i]) + 1);
        XXH3_64bits_update(st, v ? v : "", v ? strlen(v) + 1 : 1);
    }
    id = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return id;
}

/* --ref-cache: DIR/<XXH3-128 of the model's fingerprint, the build
 * (build_identity), what is kept (kind: "ref" or "chunk"), how it was made
 * (variant) and the tokens>.kvc holds a full prefill's reference (TTFT,
 * logits, greedy continuation) or a chunk's file image; tool_write_file
 * writes a temporary name and renames it, so a reader sees a whole file or
 * none */
static void cache_path(const struct eval *e, const char *kind, const char *variant, const int32_t *ids, size_t n,
                       char *path, size_t cap)
{
    uint8_t fp[80];
    kvfs_fingerprint_encode(&e->m->fp, fp);
    XXH3_state_t *st = XXH3_createState();
    XXH128_hash_t h = {0, 0};
    if (st && XXH3_128bits_reset(st) == XXH_OK) {
        uint64_t build = build_identity();
        XXH3_128bits_update(st, fp, sizeof(fp));
        XXH3_128bits_update(st, &build, sizeof(build));
        XXH3_128bits_update(st, kind, strlen(kind) + 1);
        XXH3_128bits_update(st, variant, strlen(variant) + 1);
        XXH3_128bits_update(st, ids, sizeof(int32_t) * n);
        h = XXH3_128bits_digest(st);
    }
    XXH3_freeState(st);
    snprintf(path, cap, "%s/%s-%016llx%016llx.kvc", e->a->ref_cache, kind, (unsigned long long)h.high64,
             (unsigned long long)h.low64);
}

static void ref_path(const struct eval *e, char *path, size_t cap)
{
    char variant[32];
    snprintf(variant, sizeof(variant), "greedy=%d", e->a->greedy);
    cache_path(e, "ref", variant, e->all, (size_t)e->n_ctx, path, cap);
}

static int ref_load(struct eval *e, double *t_full)
{
    char path[4096];
    ref_path(e, path, sizeof(path));
    FILE *f = fopen(path, "rb");
    if (!f)
        return -ENOENT;
    size_t V = (size_t)e->V, g = (size_t)e->a->greedy;
    int ok = fread(t_full, sizeof(double), 1, f) == 1 && fread(e->ref, sizeof(float), V, f) == V &&
             fread(e->gref, sizeof(int32_t), g, f) == g && fgetc(f) == EOF;
    fclose(f);
    return ok ? 0 : -EIO;
}

static void cache_store(const char *path, const void *buf, size_t len)
{
    int rc = tool_write_file(path, buf, len);
    if (rc)
        fprintf(stderr, "kvfsctl eval: cannot keep %s: %s\n", path, strerror(-rc));
}

static void ref_store(const struct eval *e, double t_full)
{
    char path[4096];
    ref_path(e, path, sizeof(path));
    size_t nl = sizeof(float) * (size_t)e->V, ng = sizeof(int32_t) * (size_t)e->a->greedy;
    uint8_t *buf = malloc(sizeof(double) + nl + ng);
    if (!buf)
        return;
    memcpy(buf, &t_full, sizeof(double));
    memcpy(buf + sizeof(double), e->ref, nl);
    memcpy(buf + sizeof(double) + nl, e->gref, ng);
    cache_store(path, buf, sizeof(double) + nl + ng);
    free(buf);
}

/* A chunk's file image from the cache, into w (4 KiB aligned, as the
 * writer's); the blend verifies its checksums as any chunk's */
static int chunk_load(const char *path, struct kvfs_writer *w)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -ENOENT;
    int rc = -EIO;
    long n = fseek(f, 0, SEEK_END) ? -1 : ftell(f);
    void *buf = NULL;
    if (n > 0 && !fseek(f, 0, SEEK_SET) && !posix_memalign(&buf, 4096, (size_t)n) &&
        fread(buf, 1, (size_t)n, f) == (size_t)n) {
        memset(w, 0, sizeof(*w));
        w->buf = buf, w->size = (size_t)n;
        buf = NULL, rc = 0;
    }
    free(buf);
    fclose(f);
    return rc;
}

/* Each chunk's text tokenized and prefilled on its own, as kvfs stores it
 * (behind the shared prefix, when there is one: kept by the first chunk,
 * the prompt's head; later chunks store only their own rows) */
static int prefill_chunks(struct eval *e)
{
    int32_t *pre = NULL;
    size_t np = 0;
    const char *sp = e->a->shared_prefix;
    if (sp && kvfs_tokenize(e->tok, sp, strlen(sp), 1, 1, &pre, &np)) {
        fprintf(stderr, "kvfsctl eval: cannot tokenize the shared prefix\n");
        return -EINVAL;
    }
    int rc = 0;
    for (int i = 0; i < e->a->n_files && !rc; i++) {
        const char *path = e->a->files[i];
        struct kvfs_kv_cache cc;
        /* BOS (when the model wants one) heads each chunk, the first or none:
         * Gemma blends best from chunks with their own BOS (BENCHMARKS.md) */
        int bos = !sp && (!strcmp(e->a->bos, "each") || (i == 0 && !strcmp(e->a->bos, "first")));
        if ((rc = tool_tokenize_file(e->tok, path, bos, &e->ids[i], &e->nids[i])) ||
            (np && (rc = behind_prefix(pre, np, &e->ids[i], &e->nids[i]))))
            break;
        int first = i ? (int)np : 0;
        int keep = e->a->kv_quant_keep > 0 ? e->a->kv_quant_keep : 0;
        char cpath[4096], variant[96];
        snprintf(variant, sizeof(variant), "first=%d kvq=%s keep=%d part=%s", first,
                 e->a->kv_quant ? e->a->kv_quant : "none", keep, e->a->kv_quant_part ? e->a->kv_quant_part : "kv");
        if (e->a->ref_cache)
            cache_path(e, "chunk", variant, e->ids[i], e->nids[i], cpath, sizeof(cpath));
        if (!e->a->ref_cache || chunk_load(cpath, &e->w[i])) {
            if (!(rc = kvfs_kv_cache_init(e->m, (int)e->nids[i], &cc))) {
                rc = kvfs_forward(e->m, &cc, e->ids[i], (int)e->nids[i], 0, NULL);
                if (!rc && e->a->kv_quant && (int)e->nids[i] - first > keep)
                    rc = quantize_rows(e, &cc, first + keep, (int)e->nids[i] - first - keep);
                if (!rc)
                    rc = kvfs_kv_cache_to_chunk(e->m, &cc, first, (int)e->nids[i] - first, e->ids[i] + first,
                                                KVFS_DTYPE_F16, &e->w[i]);
                kvfs_kv_cache_free(e->m, &cc);
            }
            if (!rc && e->a->ref_cache)
                cache_store(cpath, e->w[i].buf, e->w[i].size);
        }
        if (!rc && first) { /* the prompt holds the chunk's own tokens */
            memmove(e->ids[i], e->ids[i] + first, sizeof(int32_t) * (e->nids[i] - (size_t)first));
            e->nids[i] -= (size_t)first;
        }
        if (rc) {
            fprintf(stderr, "kvfsctl eval: cannot prefill %s: %s\n", path, strerror(-rc));
            break;
        }
        e->ch[i] = (struct kvfs_blend_chunk){e->w[i].buf, e->w[i].size};
        e->made++;
        e->n_ctx += (int)e->nids[i];
    }
    free(pre);
    return rc;
}

/* The query's tokens, the whole prompt and the buffers every method uses. */
static int build_prompt(struct eval *e)
{
    int rc;
    if (e->a->chat_tail) { /* the query, then the generation prompt, control tokens parsed as in a chat */
        size_t lq = strlen(e->a->query), lt = strlen(e->a->chat_tail);
        char *q = malloc(lq + lt + 1);
        if (!q)
            return -ENOMEM;
        memcpy(q, e->a->query, lq);
        memcpy(q + lq, e->a->chat_tail, lt + 1);
        rc = kvfs_tokenize(e->tok, q, lq + lt, 0, 1, &e->qids, &e->nq);
        free(q);
    } else {
        rc = kvfs_tokenize(e->tok, e->a->query, strlen(e->a->query), 0, 0, &e->qids, &e->nq);
    }
    if (rc || e->nq == 0) {
        fprintf(stderr, "kvfsctl eval: cannot tokenize the query\n");
        return rc ? rc : -EINVAL;
    }
    e->n_ctx += (int)e->nq;
    size_t V = (size_t)e->V, g = (size_t)e->a->greedy;
    e->all = malloc(sizeof(int32_t) * (size_t)e->n_ctx);
    e->ref = malloc(sizeof(float) * V);
    e->lg = malloc(sizeof(float) * V);
    e->gref = malloc(sizeof(int32_t) * g);
    e->gm = malloc(sizeof(int32_t) * g);
    if (!e->all || !e->ref || !e->lg || !e->gref || !e->gm)
        return -ENOMEM;
    int at = 0;
    for (int i = 0; i < e->a->n_files; i++)
        for (size_t j = 0; j < e->nids[i]; j++)
            e->all[at++] = e->ids[i][j];
    for (size_t j = 0; j < e->nq; j++)
        e->all[at++] = e->qids[j];
    return 0;
}

/* The reference: a full prefill of the prompt and its greedy continuation. */
static int run_full(struct eval *e)
{
    double t_full = 0;
    if (e->a->ref_cache && !ref_load(e, &t_full)) {
        e->res[e->nres++] = (struct result){"full prefill", t_full, 0.0, 1, e->a->greedy, 0.0};
        return 0;
    }
    struct kvfs_kv_cache fc;
    int rc = kvfs_kv_cache_init(e->m, e->n_ctx + e->a->greedy, &fc);
    if (rc)
        return rc;
    double t0 = tool_now(), c0 = tool_cpu_now();
    rc = kvfs_forward(e->m, &fc, e->all, e->n_ctx, 0, e->ref);
    t_full = tool_now() - t0;
    double c_full = tool_cpu_now() - c0;
    if (!rc)
        rc = continue_greedy(e->m, &fc, e->ref, e->a->greedy, e->gref);
    kvfs_kv_cache_free(e->m, &fc);
    if (!rc)
        e->res[e->nres++] = (struct result){"full prefill", t_full, 0.0, 1, e->a->greedy, c_full};
    if (!rc && e->a->ref_cache)
        ref_store(e, t_full);
    return rc;
}

/* Prefix caching: the first chunk's cache is exact (position 0). */
static int run_prefix(struct eval *e)
{
    struct kvfs_kv_cache pc;
    int rc = kvfs_kv_cache_init(e->m, e->n_ctx + e->a->greedy, &pc);
    if (rc)
        return rc;
    int n0 = (int)e->nids[0];
    double t0 = tool_now(), c0 = tool_cpu_now();
    rc = kvfs_kv_cache_load_chunk(e->m, &pc, e->ch[0].image, e->ch[0].len, e->err, sizeof(e->err));
    if (!rc)
        rc = kvfs_forward(e->m, &pc, e->all + n0, e->n_ctx - n0, n0, e->lg);
    double t_pre = tool_now() - t0, c_pre = tool_cpu_now() - c0;
    if (!rc)
        rc = continue_greedy(e->m, &pc, e->lg, e->a->greedy, e->gm);
    kvfs_kv_cache_free(e->m, &pc);
    if (!rc)
        add_result(e, "prefix caching", t_pre, c_pre);
    return rc;
}

/* Greedy continuation from a blended cache: it has no room to grow, so its
 * rows are copied into a fresh cache that has. */
static int continue_blend(struct eval *e, const struct kvfs_kv_cache *bc)
{
    const struct kvfs_model *m = e->m;
    struct kvfs_kv_cache gc;
    int rc = kvfs_kv_cache_init(m, e->n_ctx + e->a->greedy, &gc);
    if (rc)
        return rc;
    size_t bytes = sizeof(float) * (size_t)e->n_ctx * bc->kv_dim;
    for (int l = 0; l < m->hp.n_layer && !rc; l++) {
        rc = m->be.iface->copy(m->be.ctx, gc.k[l], bc->k[l], bytes);
        if (!rc)
            rc = m->be.iface->copy(m->be.ctx, gc.v[l], bc->v[l], bytes);
    }
    memcpy(gc.host_pos, bc->host_pos, sizeof(int32_t) * (size_t)e->n_ctx);
    if (!rc)
        rc = m->be.iface->upload(m->be.ctx, gc.pos, gc.host_pos, sizeof(int32_t) * (size_t)e->n_ctx);
    gc.n = e->n_ctx;
    if (!rc)
        rc = continue_greedy(m, &gc, e->lg, e->a->greedy, e->gm);
    kvfs_kv_cache_free(m, &gc);
    return rc;
}

/* One blend (ratio 0: full reuse) with selection sel. */
static int run_blend(struct eval *e, float ratio, int sel)
{
    struct kvfs_blend_opts bo = e->a->bo;
    struct kvfs_kv_cache bc;
    int32_t *bt;
    struct kvfs_blend_stats st;
    bo.ratio = ratio;
    bo.select = sel;
    double t0 = tool_now(), c0 = tool_cpu_now();
    int rc = kvfs_blend_eval(e->m, e->ch, e->a->n_files, e->qids, (int)e->nq, &bo, &e->a->x, &bc, &bt, e->lg, &st,
                             e->err, sizeof(e->err));
    double t_b = tool_now() - t0, c_b = tool_cpu_now() - c0;
    if (rc) {
        fprintf(stderr, "kvfsctl eval: blend failed: %s\n", e->err);
        return rc;
    }
    rc = continue_blend(e, &bc);
    kvfs_kv_cache_free(e->m, &bc);
    free(bt);
    if (rc)
        return rc;
    char name[32];
    if (ratio == 0)
        snprintf(name, sizeof(name), "full reuse");
    else if (e->a->n_selects > 1)
        snprintf(name, sizeof(name), "blend %.2f %s", (double)ratio, kvfs_blend_select_name(sel));
    else
        snprintf(name, sizeof(name), "blend %.2f", (double)ratio);
    add_result(e, name, t_b, c_b);
    return 0;
}

/* Full reuse, then every ratio for each selection in turn. */
static int run_blends(struct eval *e)
{
    const struct eval_args *a = e->a;
    float ratios[MAX_RATIOS + 1];
    int nr = 0;
    ratios[nr++] = 0.0f;
    for (int i = 0; i < a->n_ratios; i++)
        if (a->ratios[i] > 0)
            ratios[nr++] = a->ratios[i];
    for (int s = 0; s < a->n_selects; s++)
        for (int i = 0; i < nr; i++) {
            /* full reuse and a full recompute do not depend on the selection */
            if (s > 0 && (ratios[i] == 0 || ratios[i] >= 1))
                continue;
            int rc = run_blend(e, ratios[i], a->selects[s]);
            if (rc)
                return rc;
        }
    return 0;
}

static void print_results(const struct eval *e)
{
    int greedy = e->a->greedy;
    const struct result *res = e->res;
    if (e->a->json) {
        printf("{\"chunks\": %d, \"tokens\": %d, \"query_tokens\": %zu, \"results\": [", e->a->n_files, e->n_ctx,
               e->nq);
        for (int i = 0; i < e->nres; i++)
            printf("%s{\"method\": \"%s\", \"ttft_s\": %.6f, \"cpu_s\": %.6f, \"kl\": %.6g, \"top1\": %d, "
                   "\"greedy_agree\": %.4f}",
                   i ? ", " : "", res[i].name, res[i].ttft, res[i].cpu_s, res[i].kl, res[i].top1,
                   (double)res[i].agree / greedy);
        printf("], \"prompt_ids\": [");
        for (int i = 0; i < e->n_ctx; i++)
            printf("%s%d", i ? "," : "", e->all[i]);
        printf("], \"full_greedy\": [");
        for (int i = 0; i < greedy; i++)
            printf("%s%d", i ? "," : "", e->gref[i]);
        printf("]}\n");
    } else {
        printf("%d chunks, %d prompt tokens (%zu query)\n", e->a->n_files, e->n_ctx, e->nq);
        printf("%-16s %9s %9s %10s %5s %7s\n", "method", "TTFT s", "speedup", "KL", "top1", "greedy");
        for (int i = 0; i < e->nres; i++)
            printf("%-16s %9.3f %8.2fx %10.4g %5s %6.0f%%\n", res[i].name, res[i].ttft, res[0].ttft / res[i].ttft,
                   res[i].kl, res[i].top1 ? "yes" : "no", 100.0 * res[i].agree / greedy);
    }
}

static void eval_free(struct eval *e)
{
    free(e->all);
    free(e->ref);
    free(e->lg);
    free(e->gref);
    free(e->gm);
    for (int i = 0; i < e->made; i++)
        kvfs_writer_free(&e->w[i]);
    for (int i = 0; i < e->a->n_files; i++)
        free(e->ids[i]);
    free(e->qids);
    kvfs_tokenizer_free(e->tok);
    kvfs_model_free(e->m);
}

int cmd_eval(int argc, char **argv)
{
    struct eval_args a;
    int rc = parse_args(&a, argc, argv);
    if (rc != TOOL_ARGS_OK)
        return rc;
    struct eval *e = calloc(1, sizeof(*e));
    if (!e)
        return 1;
    e->a = &a;
    if (tool_load_model(a.model, a.backend, a.threads, &e->m, &e->tok)) {
        free(e);
        return 1;
    }
    e->V = e->m->hp.n_vocab;
    rc = 0;
    if (a.chat.on && (rc = tool_chat_split("eval", e->m->gguf, &a.chat, &a.chat_head, &a.chat_tail)) == 0)
        a.shared_prefix = a.chat_head; /* before every chunk, once in the prompt */
    if (!rc && (rc = kvfs_blend_selftest(e->m)))
        fprintf(stderr, "kvfsctl eval: RoPE re-rotation self-test failed for this model; refusing to blend\n");
    if (!rc)
        rc = prefill_chunks(e);
    if (!rc)
        rc = build_prompt(e);
    if (!rc)
        rc = run_full(e);
    if (!rc && !a.no_prefix)
        rc = run_prefix(e);
    if (!rc)
        rc = run_blends(e);
    if (!rc)
        print_results(e);
    eval_free(e);
    free(e);
    free(a.chat_head);
    free(a.chat_tail);
    return rc ? 1 : 0;
}
