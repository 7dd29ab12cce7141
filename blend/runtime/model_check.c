/* model_check.c - what kvfs computes of a GGUF model, and the refusal of
 * the rest by name: a key, tensor or architecture the runtime would ignore
 * would give keys and logits that are not llama.cpp's, without a word. */
#include "model_check.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ggml_quant.h"
#include "log.h" /* kvfs_errf */
#include "rope_scaling.h"

/* families llama.cpp runs that kvfs refuses, with the reason */
static const struct {
    const char *arch, *why;
} refused[] = {
    {"qwen2moe", "mixture of experts with a shared expert"}, {"deepseek", "mixture of experts"},
    {"dbrx", "mixture of experts"},
    {"olmoe", "mixture of experts"},     {"grok", "mixture of experts"},      {"arctic", "mixture of experts"},
    {"granitemoe", "mixture of experts"}, {"llama4", "mixture of experts"},
    {"glm4moe", "mixture of experts"},   {"ernie4_5-moe", "mixture of experts"}, {"hunyuan-moe", "mixture of experts"},
    {"phimoe", "mixture of experts"},    {"minimax-m2", "mixture of experts"}, {"bailingmoe", "mixture of experts"},
    {"qwen3next", "a recurrent state per layer (hybrid attention)"},
    {"qwen35", "a recurrent state per layer (hybrid attention)"},
    {"granitehybrid", "a recurrent state per layer (hybrid Mamba)"},
    {"nemotron_h", "a recurrent state per layer (hybrid Mamba)"},
    {"lfm2", "a recurrent state per layer (short convolutions)"},
    {"falcon-h1", "a recurrent state per layer (hybrid Mamba)"},
    {"kimi-linear", "a recurrent state per layer (linear attention)"},
    {"jamba", "a recurrent state per layer (hybrid Mamba)"},
    {"mamba", "a recurrent state instead of per-token KV"}, {"mamba2", "a recurrent state instead of per-token KV"},
    {"rwkv6", "a recurrent state instead of per-token KV"}, {"rwkv7", "a recurrent state instead of per-token KV"},
};

int kvfs_model_arch_check(const char *path, const char *arch, char *err, size_t errlen)
{
    if (!strcmp(arch, "llama") || !strcmp(arch, "qwen2") || !strcmp(arch, "qwen3") || !strcmp(arch, "gemma3") ||
        !strcmp(arch, "granite") || !strcmp(arch, "smollm3") || !strcmp(arch, "olmo2") || !strcmp(arch, "phi3") ||
        !strcmp(arch, "gemma2") || !strcmp(arch, "mistral3") || !strcmp(arch, "qwen3moe") || !strcmp(arch, "gpt-oss") ||
        !strcmp(arch, "deepseek2") || !strcmp(arch, "gemma4"))
        return 0;
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
        if (!strcmp(arch, refused[i].arch))
            return kvfs_errf(err, errlen, -ENOTSUP,
                             "%s: architecture '%s' is not supported: %s (kvfs blends per-token K/V of dense "
                             "attention; see kvfs(8), MODELS)", path, arch, refused[i].why);
    return kvfs_errf(err, errlen, -ENOTSUP, "%s: architecture '%s' is not supported (llama, qwen2, qwen3, gemma2, "
                     "gemma3, gemma4, granite, smollm3, olmo2, phi3, mistral3, qwen3moe, gpt-oss, deepseek2)", path,
                     arch);
}

const char *kvfs_arch_chunk_refusal(const char *arch)
{
    (void)arch; /* every supported family's cache fits a chunk (gemma4's with layer shapes, kvfs(5)) */
    return NULL;
}

/* a tensor the runtime reads for this architecture */
static int tensor_known(const char *name, const char *arch, int n_layer)
{
    int is_gemma3 = !strcmp(arch, "gemma3"), is_gemma2 = !strcmp(arch, "gemma2");
    if (!strcmp(name, "rope_freqs.weight")) /* Llama 3.1's frequency factors: llama.cpp reads them for these */
        return !strcmp(arch, "llama") || !strcmp(arch, "mistral3") || !strcmp(arch, "gemma4");
    if (!strcmp(arch, "gemma4")) { /* llama.cpp's models/gemma4.cpp, its dense layers (no experts, no fused QKV) */
        static const char *const g4_global[] = {"token_embd.weight", "output.weight", "output_norm.weight",
                                                "per_layer_token_embd.weight", "per_layer_model_proj.weight",
                                                "per_layer_proj_norm.weight"};
        static const char *const g4_layer[] = {
            "attn_norm.weight",          "attn_q.weight",       "attn_k.weight",          "attn_v.weight",
            "attn_output.weight",        "attn_q_norm.weight",  "attn_k_norm.weight",     "post_attention_norm.weight",
            "ffn_norm.weight",           "ffn_gate.weight",     "ffn_up.weight",          "ffn_down.weight",
            "post_ffw_norm.weight",      "inp_gate.weight",     "proj.weight",            "post_norm.weight",
            "layer_output_scale.weight"};
        int l, at = 0;
        for (size_t i = 0; i < sizeof(g4_global) / sizeof(g4_global[0]); i++)
            if (!strcmp(name, g4_global[i]))
                return 1;
        if (sscanf(name, "blk.%d.%n", &l, &at) != 1 || at == 0 || l < 0 || l >= n_layer)
            return 0;
        for (size_t i = 0; i < sizeof(g4_layer) / sizeof(g4_layer[0]); i++)
            if (!strcmp(name + at, g4_layer[i]))
                return 1;
        return 0;
    }
    if (is_gemma2 && !strcmp(name, "output.weight")) /* llama.cpp's gemma2 projects by the embedding, always */
        return 0;
    static const char *const global[] = {"token_embd.weight", "output.weight", "output_norm.weight"};
    static const char *const layer[] = {"attn_norm.weight", "ffn_norm.weight", "attn_q.weight", "attn_k.weight",
                                        "attn_v.weight", "attn_output.weight", "attn_q.bias", "attn_k.bias",
                                        "attn_v.bias", "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"};
    static const char *const gemma3[] = {"attn_q_norm.weight", "attn_k_norm.weight", "post_attention_norm.weight",
                                         "post_ffw_norm.weight"};
    /* qwen3: the Q/K norms; olmo2 those and the post norms */
    int n_norms = is_gemma3 || !strcmp(arch, "olmo2") ? 4 : !strcmp(arch, "qwen3") ? 2 : 0;
    for (size_t i = 0; i < sizeof(global) / sizeof(global[0]); i++)
        if (!strcmp(name, global[i]))
            return 1;
    int l, at = 0;
    if (sscanf(name, "blk.%d.%n", &l, &at) != 1 || at == 0 || l < 0 || l >= n_layer)
        return 0;
    if (!strcmp(arch, "qwen3moe")) { /* llama.cpp's qwen3moe reads no dense FFN: the router and experts instead */
        static const char *const moe[] = {"ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight",
                                          "ffn_down_exps.weight", "attn_q_norm.weight", "attn_k_norm.weight"};
        for (size_t i = 0; i < sizeof(moe) / sizeof(moe[0]); i++)
            if (!strcmp(name + at, moe[i]))
                return 1;
        if (!strncmp(name + at, "ffn_", 4) && strcmp(name + at, "ffn_norm.weight"))
            return 0;
    }
    if (!strcmp(arch, "deepseek2")) { /* llama.cpp's models/deepseek2.cpp, either MLA form (ds2_check and
                                       * model.c check which of Q's, the decompression's and the FFN's forms
                                       * each layer has) */
        static const char *const ds2[] = {
            "attn_norm.weight",      "ffn_norm.weight",       "attn_q.weight",         "attn_q_a.weight",
            "attn_q_a_norm.weight",  "attn_q_b.weight",       "attn_kv_a_mqa.weight",  "attn_kv_a_norm.weight",
            "attn_k_b.weight",       "attn_v_b.weight",       "attn_kv_b.weight",      "attn_output.weight",
            "ffn_gate.weight",
            "ffn_up.weight",         "ffn_down.weight",       "ffn_gate_inp.weight",   "exp_probs_b.bias",
            "ffn_gate_exps.weight",  "ffn_up_exps.weight",    "ffn_down_exps.weight",  "ffn_gate_shexp.weight",
            "ffn_up_shexp.weight",   "ffn_down_shexp.weight"};
        for (size_t i = 0; i < sizeof(ds2) / sizeof(ds2[0]); i++)
            if (!strcmp(name + at, ds2[i]))
                return 1;
        return 0;
    }
    if (!strcmp(arch, "gpt-oss")) { /* llama.cpp's openai-moe.cpp: what it reads, no more (no fused QKV) */
        static const char *const oss[] = {
            "attn_norm.weight",     "post_attention_norm.weight", "attn_q.weight",        "attn_k.weight",
            "attn_v.weight",        "attn_q.bias",                "attn_k.bias",          "attn_v.bias",
            "attn_output.weight",   "attn_output.bias",           "attn_sinks.weight",    "ffn_gate_inp.weight",
            "ffn_gate_inp.bias",    "ffn_gate_exps.weight",       "ffn_gate_exps.bias",   "ffn_up_exps.weight",
            "ffn_up_exps.bias",     "ffn_down_exps.weight",       "ffn_down_exps.bias"};
        for (size_t i = 0; i < sizeof(oss) / sizeof(oss[0]); i++)
            if (!strcmp(name + at, oss[i]))
                return 1;
        return 0;
    }
    for (size_t i = 0; i < sizeof(layer) / sizeof(layer[0]); i++)
        if (!strcmp(name + at, layer[i]))
            return 1;
    if (!strcmp(arch, "phi3") && (!strcmp(name + at, "attn_qkv.weight"))) /* fused Q, K, V */
        return 1;
    /* llama.cpp's llama, granite and mistral3 graphs take these where present */
    static const char *const llama_biases[] = {"attn_output.bias", "ffn_gate.bias", "ffn_up.bias", "ffn_down.bias"};
    for (size_t i = 0; i < sizeof(llama_biases) / sizeof(llama_biases[0]) &&
                       (!strcmp(arch, "llama") || !strcmp(arch, "granite") || !strcmp(arch, "mistral3"));
         i++)
        if (!strcmp(name + at, llama_biases[i]))
            return 1;
    for (int i = 0; i < n_norms; i++)
        if (!strcmp(name + at, gemma3[i]))
            return 1;
    for (int i = 2; is_gemma2 && i < 4; i++) /* gemma2: the post norms only */
        if (!strcmp(name + at, gemma3[i]))
            return 1;
    return 0;
}

/* rope_freqs.weight, where present: rope_dim / 2 positive f32 factors */
static int rope_freqs_check(const char *path, const struct kvfs_gguf *g, const char *arch, char *err, size_t errlen)
{
    const struct kvfs_gguf_tensor *t = kvfs_gguf_tensor(g, "rope_freqs.weight");
    if (!t)
        return 0;
    char key[128];
    uint32_t rope_dim = 0, n_embd = 0, n_head = 0;
    snprintf(key, sizeof(key), "%s.rope.dimension_count", arch);
    if (kvfs_gguf_get_u32(g, key, &rope_dim)) {
        snprintf(key, sizeof(key), "%s.attention.key_length", arch);
        if (kvfs_gguf_get_u32(g, key, &rope_dim)) {
            snprintf(key, sizeof(key), "%s.embedding_length", arch);
            kvfs_gguf_get_u32(g, key, &n_embd);
            snprintf(key, sizeof(key), "%s.attention.head_count", arch);
            kvfs_gguf_get_u32(g, key, &n_head);
            rope_dim = n_head ? n_embd / n_head : 0;
        }
    }
    if (t->type != KVFS_GGML_F32 || t->ne[0] != rope_dim / 2 || t->ne[1] * t->ne[2] * t->ne[3] != 1)
        return kvfs_errf(err, errlen, -EINVAL, "%s: tensor rope_freqs.weight has shape %llux%llu (%s), expected "
                         "%ux1 (F32)", path, (unsigned long long)t->ne[0],
                         (unsigned long long)(t->ne[1] * t->ne[2] * t->ne[3]),
                         kvfs_ggml_type_name(t->type) ? kvfs_ggml_type_name(t->type) : "?", rope_dim / 2);
    for (uint32_t j = 0; j < rope_dim / 2; j++) {
        float f;
        memcpy(&f, t->data + 4u * j, 4);
        if (!(f > 0.0f))
            return kvfs_errf(err, errlen, -EINVAL, "%s: rope_freqs.weight[%u] = %g: a frequency factor must be > 0",
                             path, j, (double)f);
    }
    return 0;
}

/* qwen3moe's routing as llama.cpp computes it (build_moe_ffn: softmax,
 * top expert_used_count, the chosen weights renormalized, always, whatever
 * expert_weights_norm says, unscaled), and gpt-oss's (top experts by
 * logit, a softmax over theirs; expert_weights_scale is not read for it
 * either): the counts it needs, one for all layers; the keys that would
 * route otherwise refused by name.  gpt-oss: llama.cpp requires its
 * experts' width and its sliding window. */
static int moe_check(const char *path, const struct kvfs_gguf *g, const char *arch, char *err, size_t errlen)
{
    char key[160];
    uint32_t n_exp = 0, used = 0, u;
    static const char *const one[] = {"expert_count", "expert_used_count", "expert_feed_forward_length"};
    for (size_t i = 0; i < sizeof(one) / sizeof(one[0]); i++) {
        snprintf(key, sizeof(key), "%s.%s", arch, one[i]);
        const struct kvfs_gguf_kv *kv = kvfs_gguf_find(g, key);
        if (kv && kv->type == KVFS_GGUF_ARRAY)
            return kvfs_errf(err, errlen, -ENOTSUP, "%s: %s per layer (an array) is not supported yet", path, key);
        if (kv && kvfs_gguf_get_u32(g, key, &u))
            return kvfs_errf(err, errlen, -EINVAL, "%s: %s is not a count", path, key);
    }
    snprintf(key, sizeof(key), "%s.expert_count", arch);
    kvfs_gguf_get_u32(g, key, &n_exp);
    snprintf(key, sizeof(key), "%s.expert_used_count", arch);
    kvfs_gguf_get_u32(g, key, &used);
    if (!strcmp(arch, "deepseek2")) { /* llama.cpp requires its experts' width */
        snprintf(key, sizeof(key), "%s.expert_feed_forward_length", arch);
        if (kvfs_gguf_get_u32(g, key, &u) || u == 0)
            return kvfs_errf(err, errlen, -EINVAL, "%s: deepseek2 needs %s > 0", path, key);
    }
    if (!strcmp(arch, "gpt-oss")) {
        static const char *const req[] = {"expert_feed_forward_length", "attention.sliding_window"};
        for (size_t i = 0; i < sizeof(req) / sizeof(req[0]); i++) {
            snprintf(key, sizeof(key), "%s.%s", arch, req[i]);
            if (kvfs_gguf_get_u32(g, key, &u) || u == 0)
                return kvfs_errf(err, errlen, -EINVAL, "%s: gpt-oss needs %s > 0", path, key);
        }
    }
    if (n_exp == 0 || used == 0 || used > n_exp)
        return kvfs_errf(err, errlen, -EINVAL, "%s: %s needs expert_count > 0 and 0 < expert_used_count <= it "
                         "(%u, %u)", path, arch, n_exp, used);
    /* llama.cpp reads these for every arch: groups change the selection
     * (computed for deepseek2, DeepSeek-V3's group-limited routing, with
     * llama.cpp's asserts on the counts; groups of one expert have no top 2) */
    uint32_t n_grp = 0, grp_used = 0;
    snprintf(key, sizeof(key), "%s.expert_group_count", arch);
    kvfs_gguf_get_u32(g, key, &n_grp);
    snprintf(key, sizeof(key), "%s.expert_group_used_count", arch);
    kvfs_gguf_get_u32(g, key, &grp_used);
    if (!strcmp(arch, "deepseek2") && n_grp > 1) {
        if (n_grp >= n_exp || n_grp > 256 || n_exp % n_grp || n_exp / n_grp < 2 || grp_used == 0 ||
            grp_used >= n_grp)
            return kvfs_errf(err, errlen, -EINVAL, "%s: %s.expert_group_count %u and expert_group_used_count %u do "
                             "not fit %u experts", path, arch, n_grp, grp_used, n_exp);
        return 0;
    }
    static const char *const zero[] = {"expert_group_count", "expert_group_used_count"};
    for (size_t i = 0; i < sizeof(zero) / sizeof(zero[0]); i++) {
        snprintf(key, sizeof(key), "%s.%s", arch, zero[i]);
        if (kvfs_gguf_find(g, key) && (kvfs_gguf_get_u32(g, key, &u) || u > 1))
            return kvfs_errf(err, errlen, -ENOTSUP, "%s: %s (grouped expert selection) is not supported yet", path,
                             key);
    }
    return 0;
}

int kvfs_ds2_reads_q_lora(const struct kvfs_gguf *g, const char *arch, int n_layer)
{
    char key[160];
    uint32_t vocab = 0;
    snprintf(key, sizeof(key), "%s.vocab_size", arch);
    if (kvfs_gguf_get_u32(g, key, &vocab)) {
        const struct kvfs_gguf_kv *kv = kvfs_gguf_find(g, "tokenizer.ggml.tokens");
        vocab = kv && kv->type == KVFS_GGUF_ARRAY ? (uint32_t)kv->arr_len : 0;
    }
    return !(n_layer == 27 || n_layer == 26 || (n_layer == 48 && vocab == 128256));
}

/* deepseek2: the refusals of its shapes, for the loader (model.c's
 * ds2_hparams reads what this has checked) and kvfsctl info alike: the MLA form's shapes (absorbed, or the
 * unabsorbed attn_kv_b of older files) and its tensors, the gating
 * functions computed, each layer's FFN where llama.cpp reads it */
static int ds2_check(const char *path, const struct kvfs_gguf *g, const char *arch, int n_layer, char *err,
                     size_t errlen)
{
    char key[160], name[64];
    uint32_t v[8] = {0};
    static const char *const keys[] = {"attention.kv_lora_rank", "attention.key_length_mla",
                                       "attention.value_length_mla", "rope.dimension_count", "attention.key_length",
                                       "attention.value_length", "attention.head_count_kv", "attention.head_count"};
    for (int i = 0; i < 8; i++) {
        snprintf(key, sizeof(key), "%s.%s", arch, keys[i]);
        kvfs_gguf_get_u32(g, key, &v[i]);
    }
    if (!v[0])
        return kvfs_errf(err, errlen, -EINVAL, "%s: deepseek2 needs %s.attention.kv_lora_rank > 0", path, arch);
    for (int i = 0; i < 8; i++) /* the loader holds them as int and multiplies them: no sum below may wrap */
        if (v[i] > (1u << 20))
            return kvfs_errf(err, errlen, -EINVAL, "%s: %s.%s = %u is out of range", path, arch, keys[i], v[i]);
    if (!v[1] != !v[2])
        return kvfs_errf(err, errlen, -EINVAL, "%s: deepseek2 with only one of %s.attention.key_length_mla (%u) and "
                         "value_length_mla (%u)", path, arch, v[1], v[2]);
    int absorbed = v[1] != 0;
    if (absorbed && (!v[3] || v[3] % 2 || v[1] <= v[3] || v[4] != v[0] + v[3] || v[5] != v[0] || v[6] != 1))
        return kvfs_errf(err, errlen, -EINVAL, "%s: deepseek2's MLA shapes are inconsistent (kv_lora_rank %u, "
                         "rope.dimension_count %u, key_length %u, value_length %u, head_count_kv %u, key_length_mla "
                         "%u, value_length_mla %u)", path, v[0], v[3], v[4], v[5], v[6], v[1], v[2]);
    if (!v[6])
        v[6] = v[7]; /* llama.cpp's default */
    if (!absorbed && (!v[3] || v[3] % 2 || v[4] <= v[3] || !v[5] || v[6] != v[7]))
        return kvfs_errf(err, errlen, -EINVAL, "%s: deepseek2's unabsorbed MLA shapes are inconsistent "
                         "(rope.dimension_count %u, key_length %u, value_length %u, head_count_kv %u with %u heads)",
                         path, v[3], v[4], v[5], v[6], v[7]);
    if (!absorbed && v[5] != v[4] - v[3])
        return kvfs_errf(err, errlen, -ENOTSUP, "%s: deepseek2's unabsorbed form with values of %u and keys of %u (%u "
                         "rotated): kvfs's chunks hold values as wide as the keys' unrotated part (kvfs(5), "
                         "V_NARROW)", path, v[5], v[4], v[3]);
    /* the decompression llama.cpp's form reads, and not the other's (it
     * would refuse the file's tensor count) */
    for (int l = 0; l < n_layer; l++) {
        static const char *const other[2][2] = {{"attn_k_b.weight", "attn_v_b.weight"}, {"attn_kv_b.weight", NULL}};
        for (int i = 0; i < 2 && other[absorbed][i]; i++) {
            snprintf(name, sizeof(name), "blk.%d.%s", l, other[absorbed][i]);
            if (kvfs_gguf_tensor(g, name))
                return kvfs_errf(err, errlen, -ENOTSUP, "%s: tensor %s in a file of %s MLA form (%s.attention."
                                 "key_length_mla %s): llama.cpp does not read it", path, name,
                                 absorbed ? "the absorbed" : "the unabsorbed", arch, absorbed ? "set" : "absent");
        }
    }
    uint32_t gating = 0, lead = 0;
    snprintf(key, sizeof(key), "%s.expert_gating_func", arch);
    if (!kvfs_gguf_get_u32(g, key, &gating) && gating > 2)
        return kvfs_errf(err, errlen, -ENOTSUP, "%s: %s = %u is not supported yet (1 softmax, 2 sigmoid)", path, key,
                         gating);
    snprintf(key, sizeof(key), "%s.leading_dense_block_count", arch);
    kvfs_gguf_get_u32(g, key, &lead);
    /* Q's form */
    uint32_t q_lora = 0;
    snprintf(key, sizeof(key), "%s.attention.q_lora_rank", arch);
    if (kvfs_ds2_reads_q_lora(g, arch, n_layer))
        kvfs_gguf_get_u32(g, key, &q_lora);
    for (int l = 0; l < n_layer; l++) {
        snprintf(name, sizeof(name), "blk.%d.%s", l, q_lora ? "attn_q.weight" : "attn_q_a.weight");
        if (kvfs_gguf_tensor(g, name))
            return kvfs_errf(err, errlen, -ENOTSUP, "%s: tensor %s with %s.attention.q_lora_rank %u: llama.cpp does "
                             "not read it", path, name, arch, q_lora);
        int moe = (uint32_t)l >= lead;
        snprintf(name, sizeof(name), "blk.%d.%s", l, moe ? "ffn_gate.weight" : "ffn_gate_inp.weight");
        if (kvfs_gguf_tensor(g, name))
            return kvfs_errf(err, errlen, -ENOTSUP, "%s: tensor %s in a layer llama.cpp computes with %s (%s."
                             "leading_dense_block_count = %u)", path, name, moe ? "experts" : "a dense FFN", arch,
                             lead);
    }
    return 0;
}

int kvfs_model_file_check(const char *path, const struct kvfs_gguf *g, const char *arch, int n_layer, char *err,
                          size_t errlen)
{
    char key[160];
    float f;
    uint32_t u;
    /* RoPE scaling: none, linear and YaRN are computed (rope_scaling.c;
     * deepseek2's YaRN in model.c), on each layer as llama.cpp's graph
     * scales it; any other kind or a bad factor refused by name */
    struct kvfs_rope_scaling rs;
    char why[256];
    int rc = kvfs_rope_scaling_read(g, arch, 0, &rs, why, sizeof(why));
    if (rc)
        return kvfs_errf(err, errlen, rc, "%s: %s", path, why);
    /* deepseek2's rotation is its own (model.c's ds2_yarn): YaRN or nothing */
    if (!strcmp(arch, "deepseek2") && rs.type == KVFS_ROPE_SCALING_LINEAR && rs.freq_scale != 1.0f)
        return kvfs_errf(err, errlen, -ENOTSUP, "%s: RoPE scaling 'linear' (%s.rope.scaling.type, or its default) "
                         "with deepseek2's latent attention is not supported yet", path, arch);
    snprintf(key, sizeof(key), "%s.expert_count", arch);
    int moe = !strcmp(arch, "qwen3moe") || !strcmp(arch, "gpt-oss") || !strcmp(arch, "deepseek2");
    /* deepseek2: llama.cpp's multi-token-prediction layers are not computed */
    static const char *const ds2_keys[] = {"nextn_predict_layers"};
    for (size_t i = 0; i < sizeof(ds2_keys) / sizeof(ds2_keys[0]) && !strcmp(arch, "deepseek2"); i++) {
        snprintf(key, sizeof(key), "%s.%s", arch, ds2_keys[i]);
        if (!kvfs_gguf_get_u32(g, key, &u) && u > 0)
            return kvfs_errf(err, errlen, -ENOTSUP, "%s: %s = %u is not supported yet", path, key, u);
    }
    if (!moe && !kvfs_gguf_get_u32(g, key, &u) && u > 0)
        return kvfs_errf(err, errlen, -ENOTSUP, "%s: a mixture of %u experts (%s) is not supported yet", path, u, key);
    if (moe) {
        int rc = moe_check(path, g, arch, err, errlen);
        if (!rc && !strcmp(arch, "deepseek2"))
            rc = ds2_check(path, g, arch, n_layer, err, errlen);
        if (rc)
            return rc;
    }
    /* per-layer counts (llama.cpp reads arrays for any family): gemma4's
     * KV heads and FFN widths are computed, query heads per layer nowhere */
    static const char *const per_layer[] = {"attention.head_count", "attention.head_count_kv", "feed_forward_length"};
    for (size_t i = 0; i < sizeof(per_layer) / sizeof(per_layer[0]); i++) {
        snprintf(key, sizeof(key), "%s.%s", arch, per_layer[i]);
        const struct kvfs_gguf_kv *kv = kvfs_gguf_find(g, key);
        if (kv && kv->type == KVFS_GGUF_ARRAY && (i == 0 || strcmp(arch, "gemma4")))
            return kvfs_errf(err, errlen, -ENOTSUP, "%s: %s per layer (an array) is not supported yet", path, key);
    }
    /* granite: rope.scaling.finetuned false switches RoPE off */
    snprintf(key, sizeof(key), "%s.rope.scaling.finetuned", arch);
    int finetuned = 1;
    if (!kvfs_gguf_get_bool(g, key, &finetuned) && !finetuned)
        return kvfs_errf(err, errlen, -ENOTSUP, "%s: %s = false (no RoPE) is not supported yet", path, key);
    /* computed for gemma2 (model.c), which is the one llama.cpp caps */
    snprintf(key, sizeof(key), "%s.attn_logit_softcapping", arch);
    if (strcmp(arch, "gemma2") && !kvfs_gguf_get_f32(g, key, &f) && f != 0.0f)
        return kvfs_errf(err, errlen, -ENOTSUP, "%s: attention logit soft-capping (%s = %g) is not supported yet",
                         path, key, (double)f);
    /* Llama 4-style attention temperature (mistral3 reads it): Q scaled by
     * position */
    snprintf(key, sizeof(key), "%s.attention.temperature_scale", arch);
    if (!kvfs_gguf_get_f32(g, key, &f) && f != 0.0f)
        return kvfs_errf(err, errlen, -ENOTSUP, "%s: attention temperature scaling (%s = %g) is not supported yet",
                         path, key, (double)f);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const struct kvfs_gguf_str *n = &g->tensors[i].name;
        char name[128];
        snprintf(name, sizeof(name), "%.*s", (int)(n->len < 127 ? n->len : 127), n->ptr);
        uint32_t type = g->tensors[i].type;
        if (tensor_known(name, arch, n_layer)) {
            if (!kvfs_ggml_block_size(type) || type == KVFS_GGML_Q8_K)
                return kvfs_errf(err, errlen, -ENOTSUP, "%s: tensor %s has type %s, which kvfs does not decode (F32, "
                                 "F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, MXFP4)", path, name,
                                 kvfs_ggml_type_name(type) ? kvfs_ggml_type_name(type) : "unknown");
            continue;
        }
        return kvfs_errf(err, errlen, -ENOTSUP, "%s: tensor %s is not one kvfs's %s runtime computes with: its "
                         "results would differ from llama.cpp's", path, name, arch);
    }
    return rope_freqs_check(path, g, arch, err, errlen);
}
