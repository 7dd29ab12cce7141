/* model_info.c - kvfsctl info on a GGUF model: what it is and whether kvfs
 * computes it as llama.cpp does (blend/runtime/model_check.c), and if not,
 * exactly what stands in the way. */
#include <stdio.h>
#include <string.h>

#include "ggml_quant.h" /* kvfs_ggml_type_name */
#include "gguf.h"
#include "model_check.h"
#include "model_info.h"
#include "rope_scaling.h"

int tool_is_gguf(const char *path)
{
    FILE *f = fopen(path, "rb");
    char magic[4] = {0};
    int yes = f && fread(magic, 1, 4, f) == 4 && !memcmp(magic, "GGUF", 4);
    if (f)
        fclose(f);
    return yes;
}

/* s as the body of a JSON string */
static void json_text(const char *s)
{
    for (const char *c = s; *c; c++)
        printf(*c == '"' || *c == '\\' ? "\\%c" : (unsigned char)*c < 32 ? " " : "%c", *c);
}

int tool_model_info(const char *path, int json)
{
    struct kvfs_gguf *g;
    char err[512] = "", arch[64] = "?", key[96];
    if (kvfs_gguf_open(path, &g, err, sizeof(err))) {
        fprintf(stderr, "kvfsctl info: %s\n", err);
        return 1;
    }
    struct kvfs_gguf_str s;
    uint32_t n_layer = 0;
    int ok = 0;
    if (kvfs_gguf_get_str(g, "general.architecture", &s)) {
        snprintf(err, sizeof(err), "%s: no general.architecture", path);
    } else {
        snprintf(arch, sizeof(arch), "%.*s", (int)(s.len < 63 ? s.len : 63), s.ptr);
        snprintf(key, sizeof(key), "%s.block_count", arch);
        if (!kvfs_model_arch_check(path, arch, err, sizeof(err))) {
            if (kvfs_gguf_get_u32(g, key, &n_layer))
                snprintf(err, sizeof(err), "%s: no %s", path, key);
            else
                ok = !kvfs_model_file_check(path, g, arch, (int)n_layer, err, sizeof(err));
        }
    }
    /* tensors by type */
    uint64_t count[64] = {0};
    for (uint64_t i = 0; i < g->n_tensors; i++)
        count[g->tensors[i].type < 64 ? g->tensors[i].type : 63]++;
    /* latent attention: what a chunk holds per token and layer (the cached
     * row, kvfs(5) MLA chunks) against the same model's would-be full K/V */
    uint32_t mla[5] = {0}; /* kv_lora_rank, rope dims, heads, key_length_mla, value_length_mla */
    static const char *const mk[5] = {"attention.kv_lora_rank", "rope.dimension_count", "attention.head_count",
                                      "attention.key_length_mla", "attention.value_length_mla"};
    int is_mla = ok && !strcmp(arch, "deepseek2");
    for (int i = 0; i < 5 && is_mla; i++) {
        snprintf(key, sizeof(key), "%s.%s", arch, mk[i]);
        is_mla = !kvfs_gguf_get_u32(g, key, &mla[i]);
    }
    uint64_t row = (uint64_t)mla[0] + mla[1], full = (uint64_t)mla[2] * (mla[3] + mla[4]);
    /* the unabsorbed form (no key_length_mla): llama.cpp's cache is that full
     * K/V, kvfs's chunks a V as wide as K (V_NARROW); what the absorbed form
     * of the same weights would cache */
    uint32_t kv_len[2] = {0};
    int is_mha = ok && !strcmp(arch, "deepseek2") && !is_mla && !kvfs_gguf_get_u32(g, "deepseek2.attention.key_length",
                                                                                  &kv_len[0]) &&
                 !kvfs_gguf_get_u32(g, "deepseek2.attention.value_length", &kv_len[1]);
    for (int i = 0; i < 3 && is_mha; i++) {
        snprintf(key, sizeof(key), "%s.%s", arch, mk[i]);
        is_mha = !kvfs_gguf_get_u32(g, key, &mla[i]);
    }
    /* RoPE scaling as llama.cpp reads it (rope_scaling.c): said where it scales */
    static const char *const scaling_name[] = {"none", "linear", "yarn"};
    struct kvfs_rope_scaling rs = {0};
    uint32_t ctx = 0;
    snprintf(key, sizeof(key), "%s.context_length", arch);
    kvfs_gguf_get_u32(g, key, &ctx);
    int scaled = ok && !kvfs_rope_scaling_read(g, arch, (int)ctx, &rs, NULL, 0) &&
                 (rs.freq_scale != 1.0f || rs.attn_factor != 1.0f);
    const char *why = ok ? "" : err, *no_chunks = ok ? kvfs_arch_chunk_refusal(arch) : NULL;
    if (!ok && !strncmp(why, path, strlen(path)) && why[strlen(path)] == ':') /* the path is said once */
        why += strlen(path) + 2;
    if (json) {
        printf("{\"path\": \"");
        json_text(path);
        printf("\", \"arch\": \"");
        json_text(arch);
        printf("\", \"n_layer\": %u, \"n_tensors\": %llu, \"supported\": %s, \"reason\": \"", n_layer,
               (unsigned long long)g->n_tensors, ok ? "true" : "false");
        json_text(why);
        printf("\"");
        if (no_chunks) {
            printf(", \"chunks\": false, \"chunks_reason\": \"");
            json_text(no_chunks);
            printf("\"");
        }
        if (scaled)
            printf(", \"rope_scaling\": {\"type\": \"%s\", \"factor\": %g, \"original_context\": %d, "
                   "\"attn_factor\": %g}", scaling_name[rs.type], 1.0 / (double)rs.freq_scale, rs.n_ctx_orig,
                   (double)rs.attn_factor);
        if (is_mla)
            printf(", \"kv_values_per_token_layer\": %llu, \"full_kv_values_per_token_layer\": %llu",
                   (unsigned long long)row, (unsigned long long)full);
        printf("}\n");
    } else {
        printf("model:       %s\narch:        %s\nlayers:      %u\ntensors:     %llu (", path, arch, n_layer,
               (unsigned long long)g->n_tensors);
        for (int t = 0, first = 1; t < 64; t++)
            if (count[t]) {
                printf("%s%llu %s", first ? "" : ", ", (unsigned long long)count[t], kvfs_ggml_type_name((uint32_t)t));
                first = 0;
            }
        printf(")\nsupported:   %s%s\n", ok ? "yes" : "no: ", why);
        if (no_chunks)
            printf("chunks:      no: %s\n", no_chunks);
        if (scaled) {
            char over[64] = "";
            if (rs.type == KVFS_ROPE_SCALING_YARN)
                snprintf(over, sizeof(over), " over an original context of %d", rs.n_ctx_orig);
            printf("rope scaling: %s, factor %g%s (attention factor %g), as llama.cpp scales each layer\n",
                   scaling_name[rs.type], 1.0 / (double)rs.freq_scale, over, (double)rs.attn_factor);
        }
        if (is_mla)
            printf("kv cache:    latent attention: %llu values per token and layer (%u rotated + %u latent, f16 %llu "
                   "bytes); the full K/V of %u heads would be %llu (%u x (%u + %u), f16 %llu bytes): %.1f%%\n",
                   (unsigned long long)row, mla[1], mla[0], (unsigned long long)row * 2, mla[2],
                   (unsigned long long)full, mla[2], mla[3], mla[4], (unsigned long long)full * 2,
                   full ? 100.0 * (double)row / (double)full : 0.0);
        if (is_mha) {
            uint64_t kv = (uint64_t)mla[2] * (kv_len[0] + kv_len[1]), stored = (uint64_t)mla[2] * kv_len[0] * 2,
                     lat = (uint64_t)mla[0] + mla[1];
            printf("kv cache:    unabsorbed latent attention (attn_kv_b): %llu values per token and layer in "
                   "llama.cpp (%u heads x (%u + %u)), %llu in a chunk (values as wide as keys, kvfs(5) V_NARROW; "
                   "f16 %llu bytes); the absorbed form would cache %llu (%u rotated + %u latent): %.1f%%\n",
                   (unsigned long long)kv, mla[2], kv_len[0], kv_len[1], (unsigned long long)stored,
                   (unsigned long long)stored * 2, (unsigned long long)lat, mla[1], mla[0],
                   stored ? 100.0 * (double)lat / (double)stored : 0.0);
        }
    }
    kvfs_gguf_close(g);
    return ok ? 0 : 1;
}
