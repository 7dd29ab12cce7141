/* kvfsctl convert - a chunk file re-encoded in another dtype (q8/q4 to fit
 * more chunks in a tier, or back to f16 for an engine). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "kvconvert.h"
#include "tool_util.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: kvfsctl convert --dtype f16|f32|bf16|q8|q4|q4s IN OUT\n"
               "Re-encode chunk file IN (any dtype, verified first) in the given dtype and write\n"
               "it to OUT; prints the new content hash (the hash covers the dtype, so the\n"
               "converted chunk has its own name under chunks/).  q8 and q4/q4s keep 0.53x and\n"
               "0.30x of f16's bytes, with the error bound kvfs(5) gives; converting them back\n"
               "to f16 keeps that error.  IN and OUT may be '-' (stdin, stdout).\n"
               "  --dtype D     the new dtype (required)\n");
}

int cmd_convert(int argc, char **argv)
{
    uint32_t dtype = 0;
    const struct tool_opt opts[] = {TOOL_OPT_CALL("dtype", 0, tool_opt_dtype, &dtype), {0}};
    const struct tool_cmd cmd = {usage, opts, 2, 2};
    int rc = tool_parse_args(&cmd, argc, argv);
    if (rc != TOOL_ARGS_OK)
        return rc;
    if (!dtype)
        return tool_usage_error(&cmd);
    const char *in = argv[optind], *out = argv[optind + 1];
    uint8_t *buf = NULL;
    size_t len = 0;
    char err[256] = "", hex[KVFS_HASH_HEX_LEN + 1];
    uint8_t digest[32];
    struct kvfs_writer w;
    if ((rc = tool_read_file(in, &buf, &len))) {
        fprintf(stderr, "kvfsctl convert: cannot read %s: %s\n", in, strerror(-rc));
        return 1;
    }
    rc = kvfs_chunk_convert(buf, len, dtype, &w, err, sizeof(err));
    free(buf);
    if (rc) {
        fprintf(stderr, "kvfsctl convert: %s: %s\n", in, err);
        return 1;
    }
    kvfs_content_hash(&w.hdr, digest);
    kvfs_hash_to_hex(digest, hex);
    rc = tool_write_file(out, w.buf, w.size);
    kvfs_writer_free(&w);
    if (rc) {
        fprintf(stderr, "kvfsctl convert: cannot write %s: %s\n", out, strerror(-rc));
        return 1;
    }
    if (strcmp(out, "-"))
        printf("%s\n", hex);
    return 0;
}
