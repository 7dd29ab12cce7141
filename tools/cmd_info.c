/* kvfsctl info - print and verify a chunk file's header. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>

#include "commands.h"
#include "kvformat.h" /* kvfs_hash_to_hex */
#include "kvfs.h"
#include "model_info.h"
#include "tool_util.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: kvfsctl info [--json] [--tokens] FILE\n"
               "Print a kvfs chunk file's header and verify every checksum.\n"
               "Exit status 0 if the file is valid, 1 if not (the reason goes to stderr).\n"
               "A GGUF model instead: its architecture, layers and tensor types, and whether\n"
               "kvfs computes it as llama.cpp does (exit 0), or exactly what it refuses (1).\n");
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
    if (strcmp(path, "-") && tool_is_gguf(path))
        return tool_model_info(path, json);
    /* through libkvfs, as engines read chunks: mapped, every checksum verified */
    struct libkvfs_file *f;
    char why[300];
    rc = strcmp(path, "-") ? libkvfs_open(path, 0, &f, why, sizeof(why))
                           : libkvfs_open_fd(STDIN_FILENO, 0, &f, why, sizeof(why));
    if (rc) {
        fprintf(stderr, "kvfsctl info: %s: %s\n", path, why);
        return 1;
    }
    const struct libkvfs_info *h = libkvfs_info(f);
    char mid[65], salt[65] = "";
    kvfs_hash_to_hex(h->model_id, mid);
    if (h->salt)
        kvfs_hash_to_hex(h->salt, salt);
    const char *rope = h->rope_type == LIBKVFS_ROPE_NEOX ? "neox" : "norm";
    /* a file in a kvfs mount: which tiers hold it (ram, disk, remote) */
    char tier[64] = "";
    ssize_t tn = getxattr(path, "user.kvfs.tier", tier, sizeof(tier) - 1);
    tier[tn > 0 ? tn : 0] = '\0';
    if (json) {
        printf("{\"hash\": \"%s\", \"version\": %u, \"size\": %llu, \"arch\": \"%s\", \"model\": \"%s\", "
               "\"model_id\": \"%s\", \"n_layer\": %u, \"n_head\": %u, \"n_kv_head\": %u, \"head_dim\": %u, "
               "\"n_embd\": %u, \"rope_type\": \"%s\", \"rope_theta\": %g, \"rope_dim\": %u, "
               "\"dtype\": \"%s\", \"keys_roped\": %s, \"blended\": %s, \"full_prefill\": %s, \"v_from_k\": %s, "
               "\"v_narrow\": %s, \"n_tokens\": %u, \"pos0\": %u",
               h->hash, h->version, (unsigned long long)h->file_size, h->arch, h->model, mid, h->n_layer,
               h->n_head, h->n_kv_head, h->head_dim, h->n_embd, rope, (double)h->rope_theta,
               h->rope_dim, libkvfs_dtype_name(h->dtype), (h->flags & LIBKVFS_FLAG_KEYS_ROPED) ? "true" : "false",
               (h->flags & LIBKVFS_FLAG_BLENDED) ? "true" : "false",
               (h->flags & LIBKVFS_FLAG_FULL_PREFILL) ? "true" : "false",
               (h->flags & LIBKVFS_FLAG_V_FROM_K) ? "true" : "false",
               (h->flags & LIBKVFS_FLAG_V_NARROW) ? "true" : "false", h->n_tokens, h->pos0);
        if (show_tokens) {
            printf(", \"tokens\": [");
            for (uint32_t i = 0; i < h->n_tokens; i++)
                printf("%s%u", i ? ", " : "", h->tokens[i]);
            printf("]");
        }
        if (h->flags & LIBKVFS_FLAG_LAYER_SHAPES) { /* per layer: [kv heads, head_dim, rope_dim, cache of layer] */
            printf(", \"layer_shapes\": [");
            for (uint32_t l = 0; l < h->n_layer; l++) {
                struct libkvfs_layer_shape ls;
                libkvfs_layer_shape(f, l, &ls);
                printf("%s[%u, %u, %u, %u]", l ? ", " : "", ls.n_kv_head, ls.head_dim, ls.rope_dim, ls.kv_source);
            }
            printf("]");
        }
        if (salt[0])
            printf(", \"salt\": \"%s\"", salt);
        if (tier[0])
            printf(", \"tier\": \"%s\"", tier);
        printf("}\n");
    } else {
        printf("hash:        %s\nversion:     %u\nsize:        %llu bytes\narch:        %s\n"
               "model:       %s (model_id %s)\nlayers:      %u\nheads:       %u (kv %u, head_dim %u, embd %u)\n"
               "rope:        %s, theta %g, dim %u\ndtype:       %s\nkeys roped:  %s%s\ntokens:      %u\n"
               "pos0:        %u\nlayer bytes: %llu (stride %llu, first at %u%s)\nchecksums:   ok\n",
               h->hash, h->version, (unsigned long long)h->file_size, h->arch, h->model, mid, h->n_layer,
               h->n_head, h->n_kv_head, h->head_dim, h->n_embd, rope, (double)h->rope_theta,
               h->rope_dim, libkvfs_dtype_name(h->dtype), (h->flags & LIBKVFS_FLAG_KEYS_ROPED) ? "yes" : "no",
               !(h->flags & LIBKVFS_FLAG_BLENDED)       ? ""
               : (h->flags & LIBKVFS_FLAG_FULL_PREFILL) ? "\nblended:     yes (a short recipe, prefilled in full: exact)"
                                                        : "\nblended:     yes (composed from chunks; approximates a prefill)",
               h->n_tokens, h->pos0, (unsigned long long)h->layer_bytes,
               (unsigned long long)h->layer_stride, h->header_size,
               h->flags & LIBKVFS_FLAG_LAYER_SHAPES ? "; each layer its own, below" : "");
        if (h->flags & LIBKVFS_FLAG_LAYER_SHAPES) { /* the layer bytes line says 0: they differ */
            printf("layer shapes:");
            for (uint32_t l = 0; l < h->n_layer; l++) {
                struct libkvfs_layer_shape ls;
                libkvfs_layer_shape(f, l, &ls);
                if (ls.kv_source == l)
                    printf(" %u: %ux%u (rope %u)%s", l, ls.n_kv_head, ls.head_dim, ls.rope_dim,
                           l + 1 < h->n_layer ? "," : "\n");
                else
                    printf(" %u: layer %u's cache%s", l, ls.kv_source, l + 1 < h->n_layer ? "," : "\n");
            }
        }
        if (h->flags & LIBKVFS_FLAG_V_FROM_K) /* scales included: what the dtype costs per cached row */
            printf("values:      K's rows with the rotated part zero (latent attention: K alone stored, %.1f bytes "
                   "per token and layer)\n", (double)h->layer_bytes / h->n_tokens);
        if (h->flags & LIBKVFS_FLAG_V_NARROW) /* the zeros are stored: K and V rows keep one width */
            printf("values:      %u of each head's %u dims, after %u zeros (unabsorbed latent attention)\n",
                   h->head_dim - h->rope_dim, h->head_dim, h->rope_dim);
        if (salt[0])
            printf("salt:        %s\n", salt);
        if (tier[0])
            printf("tier:        %s\n", tier);
        if (show_tokens) {
            printf("token ids:  ");
            for (uint32_t i = 0; i < h->n_tokens; i++)
                printf(" %u", h->tokens[i]);
            printf("\n");
        }
    }
    libkvfs_close(f);
    return 0;
}
