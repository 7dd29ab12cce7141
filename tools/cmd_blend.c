/* kvfsctl blend - compose chunks through a mounted kvfs (writes a recipe to
 * MOUNT/blends/NAME.recipe and opens NAME.kv), or in this process with
 * --local from chunk files. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "blend.h"
#include "commands.h"
#include "kvfs_ioctl.h"
#include "model_util.h"
#include "tool_util.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: kvfsctl blend -M MOUNT [--ratio R] (--suffix TEXT | --suffix-tokens IDS) [--name NAME] HASH...\n"
               "       kvfsctl blend -M MOUNT --batch FILE\n"
               "       kvfsctl blend --local -m MODEL -o FILE [--ratio R] --suffix TEXT CHUNK_FILE...\n"
               "Compose chunks CacheBlend-style: the prompt is the chunks in order followed by the\n"
               "suffix (the query).  With -M the mount does it (blends/NAME.recipe -> blends/NAME.kv)\n"
               "and the path of the blended file is printed; errors come from blends/NAME.err.\n"
               "--local blends chunk files in this process and writes the result to FILE.\n"
               "  --ratio R   share of chunk tokens recomputed (default 0.15); with -M also\n"
               "              auto: the daemon picks it from load and compute speed (kvfs(8))\n"
               "  --select S  which rows: query (default), fixed or gradual (kvfs(8))\n"
               "  --batch FILE  up to 32 recipes (kvfs(8) recipe text, separated by lines %%%%) in\n"
               "              one KVFS_IOC_BLEND_BATCH call; recipes that share leading chunks are\n"
               "              blended together; prints one blended file path (or error) per recipe\n");
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

/* --batch: one KVFS_IOC_BLEND_BATCH call with the file's recipes */
static int blend_batch(const char *mount, const char *file)
{
    uint8_t *text = NULL;
    size_t len = 0;
    char ctl[4096];
    int rc = tool_read_file(file, &text, &len);
    if (rc) {
        fprintf(stderr, "kvfsctl blend: %s: %s\n", file, strerror(-rc));
        return 1;
    }
    struct kvfs_blend_batch_req *r = calloc(1, sizeof(*r));
    if (!r || len >= sizeof(r->recipes)) {
        fprintf(stderr, "kvfsctl blend: %s: %s\n", file, r ? "larger than a batch takes (12 KiB)" : strerror(ENOMEM));
        free(text);
        free(r);
        return 1;
    }
    r->version = KVFS_IOCTL_VERSION;
    memcpy(r->recipes, text, len);
    free(text);
    snprintf(ctl, sizeof(ctl), "%s/.kvfs/control", mount);
    int fd = open(ctl, O_RDONLY), ret = 1;
    if (fd < 0 || ioctl(fd, KVFS_IOC_BLEND_BATCH, r) != 0) {
        fprintf(stderr, "kvfsctl blend: %s: %s\n", ctl, strerror(errno));
    } else {
        /* "0 TOKENS PATH" or "-ERRNO REASON" per recipe */
        for (char *line = strtok(r->results, "\n"); line; line = strtok(NULL, "\n")) {
            int st = atoi(line);
            char *rest = strchr(line, ' ');
            if (st == 0 && rest && (rest = strchr(rest + 1, ' ')))
                printf("%s/%s\n", mount, rest + 1);
            else
                fprintf(stderr, "kvfsctl blend: %s\n", line);
        }
        ret = r->status ? 1 : 0;
    }
    if (fd >= 0)
        close(fd);
    free(r);
    return ret;
}

int cmd_blend(int argc, char **argv)
{
    static const struct option opts[] = {
        {"mount", required_argument, 0, 'M'}, {"ratio", required_argument, 0, 'r'},
        {"suffix", required_argument, 0, 's'}, {"suffix-tokens", required_argument, 0, 'S'},
        {"name", required_argument, 0, 'n'}, {"local", no_argument, 0, 'L'},
        {"model", required_argument, 0, 'm'}, {"output", required_argument, 0, 'o'},
        {"select", required_argument, 0, 'e'}, {"batch", required_argument, 0, 'B'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *batch = NULL;
    const char *select = NULL;
    const char *mount = NULL, *suffix = NULL, *suffix_tokens = NULL, *name = NULL, *model = NULL, *out = NULL;
    const char *ratio = "0.15";
    int local = 0, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "M:m:o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'M': mount = optarg; break;
        case 'r': ratio = optarg; break;
        case 's': suffix = optarg; break;
        case 'S': suffix_tokens = optarg; break;
        case 'n': name = optarg; break;
        case 'L': local = 1; break;
        case 'm': model = optarg; break;
        case 'o': out = optarg; break;
        case 'e': select = optarg; break;
        case 'B': batch = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    int n = argc - optind;
    if (batch) {
        if (!mount || local || n) {
            usage(stderr);
            return 2;
        }
        return blend_batch(mount, batch);
    }
    if (n < 1 || (!suffix && !suffix_tokens) || (local ? (!model || !out || !suffix) : !mount)) {
        usage(stderr);
        return 2;
    }
    char *rend;
    float rv = strtof(ratio, &rend);
    if (strcmp(ratio, "auto") ? (rend == ratio || *rend || !(rv >= 0 && rv <= 1)) : local) {
        fprintf(stderr, "kvfsctl blend: --ratio takes a number in [0, 1]%s\n",
                local ? "" : " or auto (the daemon's loading controller picks it)");
        return 2;
    }
    if (select && kvfs_blend_select_parse(select) < 0) {
        fprintf(stderr, "kvfsctl blend: --select takes query, fixed or gradual\n");
        return 2;
    }
    if (local) {
        struct kvfs_model *m;
        struct kvfs_tokenizer *tok;
        if (tool_load_model(model, "cpu", 0, &m, &tok))
            return 1;
        int ret = 1, rc;
        uint8_t *imgs[64] = {0};
        struct kvfs_blend_chunk ch[64];
        int32_t *sids = NULL, *tokens = NULL;
        size_t ns = 0, lens[64];
        char err[512] = "";
        for (int i = 0; i < n && i < 64; i++) {
            if ((rc = tool_read_file(argv[optind + i], &imgs[i], &lens[i]))) {
                fprintf(stderr, "kvfsctl blend: %s: %s\n", argv[optind + i], strerror(-rc));
                goto local_out;
            }
            ch[i] = (struct kvfs_blend_chunk){imgs[i], lens[i]};
        }
        if ((rc = kvfs_tokenize(tok, suffix, strlen(suffix), 0, 0, &sids, &ns)) || !ns) {
            fprintf(stderr, "kvfsctl blend: cannot tokenize the suffix\n");
            goto local_out;
        }
        struct kvfs_kv_cache cache;
        struct kvfs_writer w;
        struct kvfs_blend_opts bo;
        kvfs_blend_opts_init(&bo, strtof(ratio, NULL));
        if (select)
            bo.select = kvfs_blend_select_parse(select);
        if ((rc = kvfs_blend_ex(m, ch, n, sids, (int)ns, &bo, &cache, &tokens, NULL, NULL, err, sizeof(err)))) {
            fprintf(stderr, "kvfsctl blend: %s\n", err[0] ? err : strerror(-rc));
            goto local_out;
        }
        rc = kvfs_kv_cache_to_chunk_flags(m, &cache, 0, cache.n, tokens, KVFS_DTYPE_F16, KVFS_FLAG_BLENDED, &w);
        kvfs_kv_cache_free(m, &cache);
        if (!rc) {
            rc = tool_write_file(out, w.buf, w.size);
            kvfs_writer_free(&w);
        }
        if (rc)
            fprintf(stderr, "kvfsctl blend: cannot write %s: %s\n", out, strerror(-rc));
        else
            ret = 0;
    local_out:
        for (int i = 0; i < n && i < 64; i++)
            free(imgs[i]);
        free(sids);
        free(tokens);
        kvfs_tokenizer_free(tok);
        kvfs_model_free(m);
        return ret;
    }
    char auto_name[32], path[4096];
    if (!name) {
        snprintf(auto_name, sizeof(auto_name), "blend-%d", (int)getpid());
        name = auto_name;
    }
    snprintf(path, sizeof(path), "%s/blends/%s.recipe", mount, name);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "kvfsctl blend: %s: %s\n", path, strerror(errno));
        return 1;
    }
    fprintf(f, "ratio=%s\n", ratio);
    if (select)
        fprintf(f, "select=%s\n", select);
    for (int i = 0; i < n; i++)
        fprintf(f, "%s\n", argv[optind + i]);
    if (suffix) {
        fputs("suffix=", f);
        for (const char *p = suffix; *p; p++)
            fputs(*p == '\n' ? "\\n" : *p == '\\' ? "\\\\" : (char[]){*p, 0}, f);
        fputc('\n', f);
    } else {
        fprintf(f, "suffix_tokens=%s\n", suffix_tokens);
    }
    if (fclose(f) != 0) {
        fprintf(stderr, "kvfsctl blend: recipe refused: %s\n", strerror(errno));
        snprintf(path, sizeof(path), "%s/blends/%s.err", mount, name);
        uint8_t *e;
        size_t el;
        if (tool_read_file(path, &e, &el) == 0) {
            fprintf(stderr, "%.*s", (int)el, e);
            free(e);
        }
        forget_auto(mount, name, name == auto_name);
        return 1;
    }
    snprintf(path, sizeof(path), "%s/blends/%s.kv", mount, name);
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        int e = errno;
        char ep[4096];
        snprintf(ep, sizeof(ep), "%s/blends/%s.err", mount, name);
        uint8_t *t = NULL;
        size_t tl = 0;
        tool_read_file(ep, &t, &tl);
        fprintf(stderr, "kvfsctl blend: %s: %s%s%.*s", path, strerror(e), tl ? ": " : "\n", (int)tl, t ? (char *)t : "");
        free(t);
        forget_auto(mount, name, name == auto_name);
        return 1;
    }
    close(fd);
    printf("%s\n", path);
    return 0;
}
