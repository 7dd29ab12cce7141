/* tool_util.c - file helpers and the option parser for kvfsctl. */
#include "tool_util.h"
#include "kvformat.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int tool_write_file(const char *path, const void *buf, size_t len)
{
    if (!strcmp(path, "-"))
        return kvfs_write_full(1, buf, len);
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    int rc = kvfs_write_full(fd, buf, len);
    if (close(fd) != 0 && !rc)
        rc = -errno;
    if (!rc && rename(tmp, path) != 0)
        rc = -errno;
    if (rc)
        unlink(tmp);
    return rc;
}

int tool_put_chunk(const char *cmd, const struct kvfs_writer *w, const char *out, const char *mount,
                   char hex[KVFS_HASH_HEX_LEN + 1])
{
    uint8_t digest[32];
    char path[4096];
    int rc;
    kvfs_content_hash(&w->hdr, digest);
    kvfs_hash_to_hex(digest, hex);
    if (mount)
        snprintf(path, sizeof(path), "%s/incoming/%s.kv", mount, hex);
    else
        snprintf(path, sizeof(path), "%s", out);
    if (mount) { /* one plain write: kvfs verifies and stores it when it is closed */
        FILE *f = fopen(path, "w");
        rc = f ? 0 : -errno;
        if (f && fwrite(w->buf, 1, w->size, f) != w->size)
            rc = -EIO;
        if (f && fclose(f) != 0 && !rc)
            rc = -errno;
    } else {
        rc = tool_write_file(path, w->buf, w->size);
    }
    if (rc)
        fprintf(stderr, "kvfsctl %s: cannot store the chunk at %s: %s\n", cmd, path, strerror(-rc));
    return rc;
}

void tool_print_chunk(const char *hex, const char *mount)
{
    if (mount)
        printf("%s %s/chunks/%s.kv\n", hex, mount, hex);
    else
        printf("%s\n", hex);
}

int tool_read_file(const char *path, uint8_t **out, size_t *out_len)
{
    int fd = strcmp(path, "-") ? open(path, O_RDONLY | O_CLOEXEC) : 0;
    if (fd < 0)
        return -errno;
    size_t cap = 1 << 16, len = 0;
    uint8_t *buf = malloc(cap);
    int rc = 0;
    for (;;) {
        if (!buf) {
            rc = -ENOMEM;
            break;
        }
        if (len == cap) {
            uint8_t *nb = realloc(buf, cap * 2);
            if (!nb) {
                rc = -ENOMEM;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t n = read(fd, buf + len, cap - len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            rc = -errno;
            break;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    if (fd > 0)
        close(fd);
    if (rc) {
        free(buf);
        return rc;
    }
    *out = buf;
    *out_len = len;
    return 0;
}

/* Store one parsed option; 0, or -EINVAL when an fn refused the argument. */
static int store_opt(const struct tool_opt *o, const char *arg)
{
    switch (o->type) {
    case TOOL_OPT_FLAG: *(int *)o->dst = 1; return 0;
    case TOOL_OPT_STR: *(const char **)o->dst = arg; return 0;
    case TOOL_OPT_INT: *(int *)o->dst = atoi(arg); return 0;
    case TOOL_OPT_ULONG: *(unsigned long *)o->dst = strtoul(arg, NULL, 10); return 0;
    case TOOL_OPT_FLOAT: *(float *)o->dst = strtof(arg, NULL); return 0;
    case TOOL_OPT_DOUBLE: *(double *)o->dst = strtod(arg, NULL); return 0;
    case TOOL_OPT_FN: return o->fn(o->dst, arg) ? -EINVAL : 0;
    }
    return -EINVAL;
}

int tool_parse_args(const struct tool_cmd *cmd, int argc, char **argv)
{
    /* getopt_long's tables: long-only options get codes above any letter */
    struct option lo[TOOL_MAX_OPTS + 2];
    char so[2 * TOOL_MAX_OPTS + 2];
    size_t n = 0, nl = 0, k = 0;
    for (; cmd->opts[n].name || cmd->opts[n].letter; n++) {
        if (n == TOOL_MAX_OPTS) { /* a programming error, seen at once in tests */
            fprintf(stderr, "kvfsctl: more than %d options in one command\n", TOOL_MAX_OPTS);
            return 2;
        }
        const struct tool_opt *o = &cmd->opts[n];
        int has_arg = o->type == TOOL_OPT_FLAG ? no_argument : required_argument;
        if (o->name)
            lo[nl++] = (struct option){o->name, has_arg, 0, o->letter ? o->letter : 256 + (int)n};
        if (o->letter) {
            so[k++] = o->letter;
            if (has_arg)
                so[k++] = ':';
        }
    }
    lo[nl] = (struct option){"help", no_argument, 0, 'h'};
    lo[nl + 1] = (struct option){0, 0, 0, 0};
    so[k++] = 'h';
    so[k] = '\0';
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, so, lo, NULL)) != -1) {
        if (c == 'h') {
            cmd->usage(stdout);
            return 0;
        }
        size_t i = 0;
        while (i < n && (cmd->opts[i].letter ? cmd->opts[i].letter : 256 + (int)i) != c)
            i++;
        if (i == n) /* '?': getopt_long has said what was wrong */
            return tool_usage_error(cmd);
        if (store_opt(&cmd->opts[i], optarg))
            return 2;
    }
    int operands = argc - optind;
    if (operands < cmd->min_operands || (cmd->max_operands >= 0 && operands > cmd->max_operands))
        return tool_usage_error(cmd);
    return TOOL_ARGS_OK;
}

int tool_usage_error(const struct tool_cmd *cmd)
{
    cmd->usage(stderr);
    return 2;
}

int tool_opt_kv_quant(void *dst, const char *arg)
{
    /* the quantized dtypes by the format's own table, as the mount's kv_quant= */
    int none = !strcmp(arg, "none");
    uint32_t d = none ? KVFS_DTYPE_F16 : kvfs_dtype_parse(arg);
    if (!none && !kvfs_dtype_quantized(d)) {
        fprintf(stderr, "kvfsctl: --kv-quant %s: want q8, q4, q4s or none\n", arg);
        return -EINVAL;
    }
    *(uint32_t *)dst = d;
    return 0;
}

int tool_opt_salt(void *dst, const char *arg)
{
    struct tool_salt *salt = dst;
    int rc = kvfs_salt_digest(arg, strlen(arg), salt->digest);
    if (rc) {
        fprintf(stderr, "kvfsctl: cannot digest the salt: %s\n", strerror(-rc));
        return rc;
    }
    salt->set = 1;
    return 0;
}

int tool_opt_dtype(void *dst, const char *arg)
{
    uint32_t d = kvfs_dtype_parse(arg);
    if (!d) {
        fprintf(stderr, "kvfsctl: unknown dtype '%s' (f16, f32, bf16, q8, q4 or q4s)\n", arg);
        return -EINVAL;
    }
    *(uint32_t *)dst = d;
    return 0;
}
