/* kvfsctl synth - write a valid chunk file with random K/V (for tests and
 * benchmarks: no model needed). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "kvformat.h"
#include "kvquant.h"
#include "tool_util.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kvfsctl synth [options] -o FILE\n"
            "Write a valid kvfs chunk file (format v1) with random keys and values.\n\n"
            "  -o, --output FILE     where to write (required; '-' = stdout)\n"
            "  --layers N            layer count (default 4)\n"
            "  --tokens N            token count (default 16)\n"
            "  --kv-heads N          KV heads (default 2)\n"
            "  --heads N             query heads (default 2 x kv heads)\n"
            "  --head-dim N          head dimension (default 64)\n"
            "  --dtype f16|f32|bf16  stored dtype (default f16)\n"
            "  --pos0 N              position of the first token (default 0)\n"
            "  --seed N              token ids and data derive from it (default 1)\n"
            "  --arch NAME           architecture string (default llama)\n"
            "  --size-mib M          pick the token count so the file is about M MiB\n"
            "  --salt STRING         a tenant's chunk: the digest of STRING in its name\n"
            "Prints the chunk's content hash.\n");
}

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

int cmd_synth(int argc, char **argv)
{
    const char *out = NULL, *arch = "llama";
    unsigned long layers = 4, tokens = 16, kvh = 2, heads = 0, hd = 64, pos0 = 0, seed = 1;
    double size_mib = 0;
    uint32_t dtype = KVFS_DTYPE_F16;
    struct tool_salt salt = {0};
    const struct tool_opt opts[] = {
        TOOL_OPT("output", 'o', STR, &out), TOOL_OPT("layers", 0, ULONG, &layers),
        TOOL_OPT("tokens", 0, ULONG, &tokens), TOOL_OPT("kv-heads", 0, ULONG, &kvh),
        TOOL_OPT("heads", 0, ULONG, &heads), TOOL_OPT("head-dim", 0, ULONG, &hd),
        TOOL_OPT_CALL("dtype", 0, tool_opt_dtype, &dtype), TOOL_OPT("pos0", 0, ULONG, &pos0),
        TOOL_OPT("seed", 0, ULONG, &seed), TOOL_OPT("arch", 0, STR, &arch),
        TOOL_OPT("size-mib", 0, DOUBLE, &size_mib), TOOL_OPT_CALL("salt", 0, tool_opt_salt, &salt), {0}};
    const struct tool_cmd cmd = {usage, opts, 0, 0};
    int rc = tool_parse_args(&cmd, argc, argv);
    if (rc != TOOL_ARGS_OK)
        return rc;
    if (!out)
        return tool_usage_error(&cmd);
    if (strlen(arch) >= 16) {
        fprintf(stderr, "kvfsctl synth: architecture name too long\n");
        return 2;
    }
    if (!heads)
        heads = 2 * kvh;
    if (size_mib > 0) {
        double per_token = 2.0 * layers * kvh * hd *
                           (dtype == KVFS_DTYPE_F32 ? 4 : dtype == KVFS_DTYPE_Q8 ? 34.0 / 32
                            : dtype == KVFS_DTYPE_Q4 || dtype == KVFS_DTYPE_Q4S ? 38.0 / 64 : 2);
        tokens = (unsigned long)(size_mib * 1048576.0 / per_token);
        if (!tokens)
            tokens = 1;
    }
    struct kvfs_fingerprint fp = {.n_layer = (uint32_t)layers, .n_kv_head = (uint32_t)kvh,
                                  .head_dim = (uint32_t)hd, .rope_type = KVFS_ROPE_NORM,
                                  .rope_theta = 10000.0f, .rope_dim = (uint32_t)hd,
                                  .n_head = (uint32_t)heads, .n_embd = (uint32_t)(heads * hd)};
    snprintf(fp.arch, sizeof(fp.arch), "%s", arch);
    memcpy(fp.model_id, "synthetic-model-for-kvfs-tests!!", 32);
    uint64_t rs = seed * 0x9E3779B97F4A7C15ull + 1;
    uint32_t *ids = malloc(sizeof(uint32_t) * (tokens ? tokens : 1));
    if (!ids)
        return 1;
    for (unsigned long i = 0; i < tokens; i++)
        ids[i] = (uint32_t)(rng_next(&rs) % 49152);
    struct kvfs_writer w;
    rc = kvfs_writer_init_salted(&w, &fp, dtype, KVFS_FLAG_KEYS_ROPED, (uint32_t)pos0, (uint32_t)tokens, ids,
                                 salt.set ? salt.digest : NULL);
    free(ids);
    if (rc) {
        fprintf(stderr, "kvfsctl synth: invalid shape (%s)\n", strerror(-rc));
        return 1;
    }
    uint64_t lbytes = kvfs_layer_bytes(&w.hdr, 0); /* every layer alike */
    int codec = kvfs_dtype_quantized(dtype);
    size_t esz = codec ? sizeof(float) : kvfs_dtype_size(dtype), n_vals = (size_t)tokens * kvh * hd * 2;
    float *vals = codec ? malloc(sizeof(float) * n_vals) : NULL;
    if (codec && !vals) {
        kvfs_writer_free(&w);
        return 1;
    }
    for (uint32_t l = 0; l < layers; l++) {
        uint8_t *p = kvfs_writer_layer(&w, l);
        for (uint64_t i = 0; i < (codec ? n_vals : lbytes / esz); i++) {
            float v = (float)((int64_t)(rng_next(&rs) % 2001) - 1000) / 250.0f;
            if (codec) vals[i] = v; /* K then V, encoded below */
            else if (dtype == KVFS_DTYPE_F32) memcpy(p + i * 4, &v, 4);
            else {
                uint16_t hv = dtype == KVFS_DTYPE_F16 ? kvfs_f32_to_f16(v) : kvfs_f32_to_bf16(v);
                memcpy(p + i * 2, &hv, 2);
            }
        }
        if (codec)
            kvfs_kvq_encode(codec, vals, vals + n_vals / 2, (uint32_t)tokens, (uint32_t)(kvh * hd), p);
    }
    free(vals);
    kvfs_writer_finish(&w);
    uint8_t digest[32];
    char hex[KVFS_HASH_HEX_LEN + 1];
    kvfs_content_hash(&w.hdr, digest);
    kvfs_hash_to_hex(digest, hex);
    rc = tool_write_file(out, w.buf, w.size);
    kvfs_writer_free(&w);
    if (rc) {
        fprintf(stderr, "kvfsctl synth: cannot write %s: %s\n", out, strerror(-rc));
        return 1;
    }
    printf("%s\n", hex);
    return 0;
}
