/* tool_util.h - small helpers shared by kvfsctl commands: file I/O and the
 * one option parser every command uses. */
#ifndef KVFS_TOOL_UTIL_H
#define KVFS_TOOL_UTIL_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h> /* optind */

#include "kvformat.h" /* struct kvfs_writer, KVFS_HASH_HEX_LEN */
/* Write buf to path ('-' = stdout) via a temp file + rename. 0 or -errno. */
int tool_write_file(const char *path, const void *buf, size_t len);
/* Read a whole file ('-' = stdin) into a malloc'ed buffer. 0 or -errno. */
int tool_read_file(const char *path, uint8_t **buf, size_t *len);

/* A finished chunk (w) written to the file out, or stored in the mounted
 * kvfs mount through MOUNT/incoming/ (one plain write: kvfs verifies and
 * stores it when it is closed); hex gets its hash.  On failure the reason
 * goes to stderr as "kvfsctl CMD: ...". */
int tool_put_chunk(const char *cmd, const struct kvfs_writer *w, const char *out, const char *mount,
                   char hex[KVFS_HASH_HEX_LEN + 1]);
/* The stored chunk on stdout: its hash (and its path in the mount). */
void tool_print_chunk(const char *hex, const char *mount);

/* Options: one table per command instead of a getopt_long loop in each.
 * -h/--help is always there (so 'h' is taken).  Numbers are read as atoi/strtoul/strtof/strtod
 * read them (no error on trailing text); a command checks ranges after. */
enum tool_opt_type {
    TOOL_OPT_FLAG,   /* no argument: *(int *)dst = 1 */
    TOOL_OPT_STR,    /* *(const char **)dst = the argument */
    TOOL_OPT_INT,    /* *(int *)dst */
    TOOL_OPT_ULONG,  /* *(unsigned long *)dst */
    TOOL_OPT_FLOAT,  /* *(float *)dst */
    TOOL_OPT_DOUBLE, /* *(double *)dst */
    TOOL_OPT_FN,     /* fn(dst, argument): 0, or -EINVAL after printing why */
};
struct tool_opt {
    const char *name;  /* long name, or NULL for a short-only option */
    char letter;       /* short option, or 0 for a long-only one; both unset end the table */
    enum tool_opt_type type;
    void *dst;
    int (*fn)(void *dst, const char *arg);
};
/* Table entries: TOOL_OPT("model", 'm', STR, &model), TOOL_OPT_CALL("dtype",
 * 0, tool_opt_dtype, &dtype); end the table with {0}. */
#define TOOL_OPT(name, letter, type, dst) {name, letter, TOOL_OPT_##type, dst, NULL}
#define TOOL_OPT_CALL(name, letter, fn, dst) {name, letter, TOOL_OPT_FN, dst, fn}
struct tool_cmd {
    void (*usage)(FILE *f);      /* the --help text */
    const struct tool_opt *opts; /* up to TOOL_MAX_OPTS */
    int min_operands, max_operands; /* after the options; max -1: any number */
};
#define TOOL_MAX_OPTS 32
/* tool_parse_args' "go on": the options are stored, operands start at optind */
#define TOOL_ARGS_OK (-1)
/* Parse the options of argv (argv[0] = the command's name).  Returns
 * TOOL_ARGS_OK, or the exit code the command returns at once: 0 after
 * printing the usage to stdout for -h/--help, 2 after a usage error (an
 * unknown option, a missing argument or too few or too many operands: the
 * usage goes to stderr; an fn that refused its argument has said why). */
int tool_parse_args(const struct tool_cmd *cmd, int argc, char **argv);
/* The usage to stderr; returns 2, the exit code of a usage error. */
int tool_usage_error(const struct tool_cmd *cmd);
/* TOOL_OPT_FN for --dtype: f16, f32 or bf16 into *(uint32_t *)dst. */
/* --kv-quant q8|q4|none: the dtype q8, q4 or f16 */
int tool_opt_kv_quant(void *dst, const char *arg);
int tool_opt_dtype(void *dst, const char *arg);
/* TOOL_OPT_FN for --salt STRING: a tenant's salt, kvfs_salt_digest of the
 * string's bytes, into a struct tool_salt (kvfs(5), CONTENT HASH) */
struct tool_salt {
    int set;
    uint8_t digest[32];
};
int tool_opt_salt(void *dst, const char *arg);
#endif
