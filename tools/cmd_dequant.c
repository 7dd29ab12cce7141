/* kvfsctl dequant - raw ggml blocks to f32 with the runtime's own decoder,
 * and activations through the CPU backend's activation quantization: what
 * tests/oracle/quant.sh compares with llama.cpp's ggml, bit for bit. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "backend.h"
#include "commands.h"
#include "ggml_quant.h"
#include "tool_util.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: kvfsctl dequant --type TYPE IN OUT\n"
               "       kvfsctl dequant --act TYPE --dim N IN OUT\n"
               "Decode IN, whole blocks of a ggml type (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K,\n"
               "Q5_K, Q6_K, F16, BF16, F32), into native f32 values in OUT, as the model\n"
               "loader does.  With --act, IN holds f32 activations in rows of N values and\n"
               "OUT gets them after the CPU backend's round trip through the activation\n"
               "type (Q8_0, Q8_1, Q8_K) that llama.cpp quantizes them to before a\n"
               "quantized matmul.  TYPE is a name or ggml's number; '-' is stdin/stdout.\n");
}

static int parse_type(const char *s, uint32_t *out)
{
    char *end;
    unsigned long v = strtoul(s, &end, 10);
    if (*s && !*end) {
        *out = (uint32_t)v;
        return 0;
    }
    for (uint32_t t = 0; t < 64; t++)
        if (!strcasecmp(s, kvfs_ggml_type_name(t)) && strcasecmp(s, "unknown")) {
            *out = t;
            return 0;
        }
    return -EINVAL;
}

static int act_roundtrip(uint32_t type, int dim, const float *x, float *y, size_t count)
{
    struct kvfs_backend be;
    if (dim <= 0 || count % (size_t)dim)
        return -EINVAL;
    int rc = kvfs_backend_cpu_init(1, &be);
    if (rc)
        return rc;
    rc = be.iface->act_quant(be.ctx, x, y, (int)(count / (size_t)dim), dim, (int)type);
    kvfs_backend_free(&be);
    return rc;
}

int cmd_dequant(int argc, char **argv)
{
    const char *type_s = NULL, *act_s = NULL;
    int dim = 0;
    const struct tool_opt opts[] = {TOOL_OPT("type", 't', STR, &type_s), TOOL_OPT("act", 0, STR, &act_s),
                                    TOOL_OPT("dim", 0, INT, &dim), {0}};
    const struct tool_cmd cmd = {usage, opts, 2, 2};
    int rc = tool_parse_args(&cmd, argc, argv);
    if (rc != TOOL_ARGS_OK)
        return rc;
    uint32_t type;
    if (!type_s == !act_s || (act_s && dim <= 0))
        return tool_usage_error(&cmd);
    if (parse_type(type_s ? type_s : act_s, &type)) {
        fprintf(stderr, "kvfsctl dequant: unknown type '%s'\n", type_s ? type_s : act_s);
        return 2;
    }
    const char *in = argv[optind], *out = argv[optind + 1];
    uint8_t *buf = NULL;
    float *f = NULL;
    size_t len, count = 0;
    if ((rc = tool_read_file(in, &buf, &len))) {
        fprintf(stderr, "kvfsctl dequant: %s: %s\n", in, strerror(-rc));
        return 1;
    }
    if (act_s) {
        count = len / sizeof(float);
        if (len % sizeof(float)) {
            fprintf(stderr, "kvfsctl dequant: %s: not a whole number of f32 values\n", in);
            rc = -EINVAL;
            goto cleanup;
        }
        if (!(f = malloc(len ? len : 1))) {
            rc = -ENOMEM;
            goto cleanup;
        }
        rc = act_roundtrip(type, dim, (const float *)buf, f, count);
        if (rc) {
            fprintf(stderr, "kvfsctl dequant: activations to %s (rows of %d): %s\n", kvfs_ggml_type_name(type), dim,
                    strerror(-rc));
            goto cleanup;
        }
    } else {
        uint32_t blk = kvfs_ggml_block_size(type);
        uint64_t bytes = blk ? kvfs_ggml_row_size(type, blk) : 0;
        if (!blk || len % bytes) {
            fprintf(stderr, "kvfsctl dequant: %s: %s\n", in,
                    !blk ? "type not supported" : "not a whole number of blocks");
            rc = !blk ? -ENOTSUP : -EINVAL;
            goto cleanup;
        }
        count = len / bytes * blk;
        if (!(f = malloc(count ? count * sizeof(float) : 1))) {
            rc = -ENOMEM;
            goto cleanup;
        }
        rc = kvfs_ggml_dequantize(type, buf, f, count);
        if (rc) {
            fprintf(stderr, "kvfsctl dequant: %s: %s\n", kvfs_ggml_type_name(type), strerror(-rc));
            goto cleanup;
        }
    }
    if ((rc = tool_write_file(out, f, count * sizeof(float))))
        fprintf(stderr, "kvfsctl dequant: %s: %s\n", out, strerror(-rc));
cleanup:
    if (rc == -ENOMEM)
        fprintf(stderr, "kvfsctl dequant: %s\n", strerror(ENOMEM));
    free(f);
    free(buf);
    return rc ? 1 : 0;
}
