/* kvfsctl info - print and verify a chunk file's header. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>

#include "commands.h"
#include "kvformat.h"
#include "tool_util.h"

static const char *dtype_name(uint32_t d)
{
    return d == KVFS_DTYPE_F32 ? "f32" : d == KVFS_DTYPE_F16 ? "f16" : d == KVFS_DTYPE_BF16 ? "bf16" : "?";
}

static void usage(FILE *f)
{
    fprintf(f, "usage: kvfsctl info [--json] [--tokens] FILE\n"
               "Print a kvfs chunk file's header and verify every checksum.\n"
               "Exit status 0 if the file is valid, 1 if not (the reason goes to stderr).\n");
}

int cmd_info(int argc, char **argv)
{
    int json = 0, show_tokens = 0;
    const struct tool_opt opts[] = {TOOL_OPT("json", 'j', FLAG, &json), TOOL_OPT("tokens", 't', FLAG, &show_tokens),
                                    {0}};
    const struct tool_cmd cmd = {usage, opts, 1, 1};
    int rc = tool_parse_args(&cmd, argc, argv);
    if (rc != TOOL_ARGS_OK)
        return rc;
    const char *path = argv[optind];
    uint8_t *buf;
    size_t len;
    rc = tool_read_file(path, &buf, &len);
    if (rc) {
        fprintf(stderr, "kvfsctl info: %s: %s\n", path, strerror(-rc));
        return 1;
    }
    struct kvfs_header h;
    char why[256];
    rc = kvfs_file_verify(buf, len, &h, why, sizeof(why));
    if (rc) {
        fprintf(stderr, "kvfsctl info: %s: invalid chunk: %s\n", path, why);
        free(buf);
        return 1;
    }
    uint8_t digest[32];
    char hex[65], model[17], mid[65];
    kvfs_content_hash(&h, digest);
    kvfs_hash_to_hex(digest, hex);
    kvfs_fingerprint_id(&h.fp, model);
    kvfs_hash_to_hex(h.fp.model_id, mid);
    const char *rope = h.fp.rope_type == KVFS_ROPE_NEOX ? "neox" : "norm";
    /* a file in a kvfs mount: which tiers hold it (ram, disk, remote) */
    char tier[64] = "";
    ssize_t tn = getxattr(path, "user.kvfs.tier", tier, sizeof(tier) - 1);
    tier[tn > 0 ? tn : 0] = '\0';
    if (json) {
        printf("{\"hash\": \"%s\", \"version\": %u, \"size\": %llu, \"arch\": \"%s\", \"model\": \"%s\", "
               "\"model_id\": \"%s\", \"n_layer\": %u, \"n_head\": %u, \"n_kv_head\": %u, \"head_dim\": %u, "
               "\"n_embd\": %u, \"rope_type\": \"%s\", \"rope_theta\": %g, \"rope_dim\": %u, "
               "\"dtype\": \"%s\", \"keys_roped\": %s, \"blended\": %s, \"n_tokens\": %u, \"pos0\": %u",
               hex, h.version, (unsigned long long)h.file_size, h.fp.arch, model, mid, h.fp.n_layer,
               h.fp.n_head, h.fp.n_kv_head, h.fp.head_dim, h.fp.n_embd, rope, (double)h.fp.rope_theta,
               h.fp.rope_dim, dtype_name(h.dtype), (h.flags & KVFS_FLAG_KEYS_ROPED) ? "true" : "false",
               (h.flags & KVFS_FLAG_BLENDED) ? "true" : "false", h.n_tokens, h.pos0);
        if (show_tokens) {
            printf(", \"tokens\": [");
            for (uint32_t i = 0; i < h.n_tokens; i++)
                printf("%s%u", i ? ", " : "", kvfs_header_token(&h, i));
            printf("]");
        }
        if (tier[0])
            printf(", \"tier\": \"%s\"", tier);
        printf("}\n");
    } else {
        printf("hash:        %s\nversion:     %u\nsize:        %llu bytes\narch:        %s\n"
               "model:       %s (model_id %s)\nlayers:      %u\nheads:       %u (kv %u, head_dim %u, embd %u)\n"
               "rope:        %s, theta %g, dim %u\ndtype:       %s\nkeys roped:  %s%s\ntokens:      %u\n"
               "pos0:        %u\nlayer bytes: %llu (stride %llu, first at %u)\nchecksums:   ok\n",
               hex, h.version, (unsigned long long)h.file_size, h.fp.arch, model, mid, h.fp.n_layer,
               h.fp.n_head, h.fp.n_kv_head, h.fp.head_dim, h.fp.n_embd, rope, (double)h.fp.rope_theta,
               h.fp.rope_dim, dtype_name(h.dtype), (h.flags & KVFS_FLAG_KEYS_ROPED) ? "yes" : "no",
               (h.flags & KVFS_FLAG_BLENDED) ? "\nblended:     yes (composed from chunks; approximates a prefill)" : "",
               h.n_tokens, h.pos0, (unsigned long long)kvfs_layer_bytes(&h),
               (unsigned long long)kvfs_layer_stride(&h), h.header_size);
        if (tier[0])
            printf("tier:        %s\n", tier);
        if (show_tokens) {
            printf("token ids:  ");
            for (uint32_t i = 0; i < h.n_tokens; i++)
                printf(" %u", kvfs_header_token(&h, i));
            printf("\n");
        }
    }
    free(buf);
    return 0;
}
