/* kvfsctl blend - compose chunks through a mounted kvfs (writes a recipe to
 * MOUNT/blends/NAME.recipe and opens NAME.kv), or in this process with
 * --local from chunk files. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "blend.h"
#include "commands.h"
#include "kvfs.h"
#include "model_util.h"
#include "tool_util.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: kvfsctl blend -M MOUNT [--ratio R] (--suffix TEXT | --suffix-tokens IDS) [--name NAME] HASH...\n"
               "       kvfsctl blend -M MOUNT --batch FILE\n"
               "       kvfsctl blend --local -m MODEL -o FILE [-t N] [--ratio R] --suffix TEXT CHUNK_FILE...\n"
               "Compose chunks CacheBlend-style: the prompt is the chunks in order followed by the\n"
               "suffix (the query).  With -M the mount does it (blends/NAME.recipe -> blends/NAME.kv)\n"
               "and the path of the blended file is printed; errors come from blends/NAME.err.\n"
               "--local blends chunk files in this process, as the mount would (the fidelity floor\n"
               "included: kvfs(8)), and writes the result to FILE; -t N: N threads (default: one per core).\n"
               "  --ratio R   share of chunk tokens recomputed (default %g); with -M also\n"
               "              auto: the daemon picks it from load and compute speed (kvfs(8))\n"
               "  --select S  which rows: query (default), fixed or gradual (kvfs(8))\n"
               "  --dtype D   the blended file's dtype: f16, f32, bf16, q8, q4, q4s (recipe dtype=;\n"
               "              default f16, or the mount's kv_quant)\n"
               "  --batch FILE  up to 32 recipes (kvfs(8) recipe text, separated by lines %%%%) in\n"
               "              one KVFS_IOC_BLEND_BATCH call; recipes that share leading chunks are\n"
               "              blended together; prints one blended file path (or error) per recipe\n",
            (double)KVFS_BLEND_DEFAULT_RATIO);
}

/* A failed blend under a name we made up leaves nothing behind (rm of the
 * recipe forgets all three files); a name the user gave keeps its .err. */
static void forget_auto(const char *mount, const char *name, int is_auto)
{
    char p[4096];
    if (!is_auto)
        return;
    snprintf(p, sizeof(p), "%s/blends/%s.recipe", mount, name);
    unlink(p);
}

/* --batch: one KVFS_IOC_BLEND_BATCH call with the file's recipes, through libkvfs */
static int blend_batch(const char *mount, const char *file)
{
    uint8_t *text = NULL;
    size_t len = 0;
    int rc = tool_read_file(file, &text, &len);
    if (rc) {
        fprintf(stderr, "kvfsctl blend: %s: %s\n", file, strerror(-rc));
        return 1;
    }
    char *recipes = realloc(text, len + 1);
    struct libkvfs_blend_result *res = calloc(LIBKVFS_BATCH_MAX, sizeof(*res));
    if (!recipes || !res || len > LIBKVFS_BATCH_BYTES) {
        fprintf(stderr, "kvfsctl blend: %s: %s\n", file,
                recipes && res ? "larger than a batch takes (12 KiB)" : strerror(ENOMEM));
        free(recipes ? recipes : (char *)text);
        free(res);
        return 1;
    }
    recipes[len] = '\0';
    char err[4200];
    int n = 0;
    rc = libkvfs_blend_batch(mount, recipes, res, LIBKVFS_BATCH_MAX, &n, err, sizeof(err));
    if (rc && n == 0)
        fprintf(stderr, "kvfsctl blend: %s\n", err);
    for (int i = 0; i < n; i++) {
        if (res[i].status == 0)
            printf("%s\n", res[i].path);
        else
            fprintf(stderr, "kvfsctl blend: %d %s\n", res[i].status, res[i].error);
    }
    free(recipes);
    free(res);
    return rc ? 1 : 0;
}

struct blend_args {
    const char *mount, *suffix, *suffix_tokens, *name, *model, *out, *select, *batch, *ratio;
    int local, threads;
    uint32_t dtype;
};

/* --local: the chunk files blended in this process, written to a.out */
static int blend_local(const struct blend_args *a, int n, char **files)
{
    struct kvfs_model *m;
    struct kvfs_tokenizer *tok;
    if (tool_load_model(a->model, "cpu", a->threads, &m, &tok))
        return 1;
    if (kvfs_model_chunk_refusal(m)) {
        fprintf(stderr, "kvfsctl blend: %s: %s\n", a->model, kvfs_model_chunk_refusal(m));
        kvfs_tokenizer_free(tok);
        kvfs_model_free(m);
        return 1;
    }
    int ret = 1, rc;
    uint8_t *imgs[KVFS_BLEND_MAX_CHUNKS] = {0};
    struct kvfs_blend_chunk ch[KVFS_BLEND_MAX_CHUNKS];
    int32_t *sids = NULL, *tokens = NULL;
    size_t ns = 0, lens[KVFS_BLEND_MAX_CHUNKS];
    char err[512] = "";
    for (int i = 0; i < n && i < KVFS_BLEND_MAX_CHUNKS; i++) {
        if ((rc = tool_read_file(files[i], &imgs[i], &lens[i]))) {
            fprintf(stderr, "kvfsctl blend: %s: %s\n", files[i], strerror(-rc));
            goto out;
        }
        ch[i] = (struct kvfs_blend_chunk){imgs[i], lens[i]};
    }
    if ((rc = kvfs_tokenize(tok, a->suffix, strlen(a->suffix), 0, 0, &sids, &ns)) || !ns) {
        fprintf(stderr, "kvfsctl blend: cannot tokenize the suffix\n");
        goto out;
    }
    struct kvfs_kv_cache cache;
    struct kvfs_writer w;
    struct kvfs_blend_opts bo;
    kvfs_blend_opts_init(&bo, a->ratio ? strtof(a->ratio, NULL) : KVFS_BLEND_DEFAULT_RATIO);
    kvfs_blend_opts_floor(&bo); /* as the mount blends */
    if (a->select)
        bo.select = kvfs_blend_select_parse(a->select);
    struct kvfs_blend_stats st;
    if ((rc = kvfs_blend_ex(m, ch, n, sids, (int)ns, &bo, &cache, &tokens, NULL, &st, err, sizeof(err)))) {
        fprintf(stderr, "kvfsctl blend: %s\n", err[0] ? err : strerror(-rc));
        goto out;
    }
    rc = kvfs_kv_cache_to_chunk_flags(m, &cache, 0, cache.n, tokens, a->dtype ? a->dtype : KVFS_DTYPE_F16,
                                      KVFS_FLAG_BLENDED | (st.full_prefill ? KVFS_FLAG_FULL_PREFILL : 0), &w);
    kvfs_kv_cache_free(m, &cache);
    if (!rc) {
        rc = tool_write_file(a->out, w.buf, w.size);
        kvfs_writer_free(&w);
    }
    if (rc)
        fprintf(stderr, "kvfsctl blend: cannot write %s: %s\n", a->out, strerror(-rc));
    else
        ret = 0;
out:
    for (int i = 0; i < n && i < KVFS_BLEND_MAX_CHUNKS; i++)
        free(imgs[i]);
    free(sids);
    free(tokens);
    kvfs_tokenizer_free(tok);
    kvfs_model_free(m);
    return ret;
}

/* NAME.err, after "what failed" */
static void print_err(const char *mount, const char *name, const char *what)
{
    char ep[4096];
    uint8_t *t = NULL;
    size_t tl = 0;
    snprintf(ep, sizeof(ep), "%s/blends/%s.err", mount, name);
    tool_read_file(ep, &t, &tl);
    fprintf(stderr, "kvfsctl blend: %s%s%.*s", what, tl ? ": " : "\n", (int)tl, t ? (char *)t : "");
    free(t);
}

/* -M: the recipe written to MOUNT/blends/NAME.recipe, NAME.kv opened */
static int blend_mount(const struct blend_args *a, int n, char **hashes)
{
    char auto_name[32], path[4096], what[4200];
    const char *name = a->name;
    if (!name) {
        snprintf(auto_name, sizeof(auto_name), "blend-%d", (int)getpid());
        name = auto_name;
    }
    snprintf(path, sizeof(path), "%s/blends/%s.recipe", a->mount, name);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "kvfsctl blend: %s: %s\n", path, strerror(errno));
        return 1;
    }
    if (a->ratio)
        fprintf(f, "ratio=%s\n", a->ratio);
    if (a->select)
        fprintf(f, "select=%s\n", a->select);
    if (a->dtype)
        fprintf(f, "dtype=%s\n", kvfs_dtype_name(a->dtype));
    for (int i = 0; i < n; i++)
        fprintf(f, "%s\n", hashes[i]);
    if (a->suffix) {
        fputs("suffix=", f);
        for (const char *p = a->suffix; *p; p++)
            fputs(*p == '\n' ? "\\n" : *p == '\\' ? "\\\\" : (char[]){*p, 0}, f);
        fputc('\n', f);
    } else {
        fprintf(f, "suffix_tokens=%s\n", a->suffix_tokens);
    }
    if (fclose(f) != 0) {
        snprintf(what, sizeof(what), "recipe refused: %s", strerror(errno));
        print_err(a->mount, name, what);
        forget_auto(a->mount, name, name == auto_name);
        return 1;
    }
    snprintf(path, sizeof(path), "%s/blends/%s.kv", a->mount, name);
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        snprintf(what, sizeof(what), "%s: %s", path, strerror(errno));
        print_err(a->mount, name, what);
        forget_auto(a->mount, name, name == auto_name);
        return 1;
    }
    close(fd);
    printf("%s\n", path);
    return 0;
}

int cmd_blend(int argc, char **argv)
{
    struct blend_args a = {0}; /* no --ratio: the recipe's default, KVFS_BLEND_DEFAULT_RATIO */
    const struct tool_opt opts[] = {
        TOOL_OPT("mount", 'M', STR, &a.mount), TOOL_OPT("ratio", 0, STR, &a.ratio),
        TOOL_OPT("suffix", 0, STR, &a.suffix), TOOL_OPT("suffix-tokens", 0, STR, &a.suffix_tokens),
        TOOL_OPT("name", 0, STR, &a.name), TOOL_OPT("local", 0, FLAG, &a.local),
        TOOL_OPT("model", 'm', STR, &a.model), TOOL_OPT("output", 'o', STR, &a.out),
        TOOL_OPT("select", 0, STR, &a.select), TOOL_OPT("batch", 0, STR, &a.batch),
        TOOL_OPT("threads", 't', INT, &a.threads), TOOL_OPT_CALL("dtype", 0, tool_opt_dtype, &a.dtype), {0}};
    const struct tool_cmd cmd = {usage, opts, 0, -1};
    int rc = tool_parse_args(&cmd, argc, argv);
    if (rc != TOOL_ARGS_OK)
        return rc;
    int n = argc - optind;
    if (a.batch)
        return !a.mount || a.local || n ? tool_usage_error(&cmd) : blend_batch(a.mount, a.batch);
    if (n < 1 || (!a.suffix && !a.suffix_tokens) || (a.local ? (!a.model || !a.out || !a.suffix) : !a.mount))
        return tool_usage_error(&cmd);
    char *rend;
    float rv = a.ratio ? strtof(a.ratio, &rend) : 0;
    if (a.ratio && (strcmp(a.ratio, "auto") ? (rend == a.ratio || *rend || !(rv >= 0 && rv <= 1)) : a.local)) {
        fprintf(stderr, "kvfsctl blend: --ratio takes a number in [0, 1]%s\n",
                a.local ? "" : " or auto (the daemon's loading controller picks it)");
        return 2;
    }
    if (a.select && kvfs_blend_select_parse(a.select) < 0) {
        fprintf(stderr, "kvfsctl blend: --select takes query, fixed or gradual\n");
        return 2;
    }
    return a.local ? blend_local(&a, n, argv + optind) : blend_mount(&a, n, argv + optind);
}
