/* synth_model.c - write a tiny random llama/qwen2/qwen3/gemma2/gemma3/gemma4/granite/smollm3/olmo2/phi3/
 * mistral3/qwen3moe/gpt-oss/deepseek2 model as GGUF. */
#include "synth_model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_write.h"

static float rnd(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return ((float)(*s >> 40) / (float)(1 << 24) - 0.5f); /* uniform [-0.5, 0.5) */
}

static int add_rand3(struct kvfs_gguf_writer *w, const char *name, int ne0, int ne1, int ne2, float scale,
                     float bias, uint64_t *s)
{
    size_t n = (size_t)ne0 * ne1 * ne2;
    float *d = malloc(sizeof(float) * n);
    if (!d)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        d[i] = bias + scale * rnd(s);
    int rc = kvfs_gguf_add_tensor_f32_3d(w, name, (uint64_t)ne0, (uint64_t)ne1, (uint64_t)ne2, d);
    free(d);
    return rc;
}

static int add_rand(struct kvfs_gguf_writer *w, const char *name, int ne0, int ne1, float scale, float bias,
                    uint64_t *s)
{
    return add_rand3(w, name, ne0, ne1, 1, scale, bias, s);
}

int kvfs_synth_model_write(const char *path, const struct kvfs_synth_model_opts *o)
{
    struct kvfs_gguf_writer *w;
    int rc = kvfs_gguf_writer_new(&w);
    if (rc)
        return rc;
    const char *a = o->arch;
    char k[128];
    uint64_t s = o->seed * 0x9E3779B97F4A7C15ull + 7;
    int vocab = 257, qwen = !strcmp(a, "qwen2"), gemma = !strcmp(a, "gemma3"), qwen3 = !strcmp(a, "qwen3");
    int granite = !strcmp(a, "granite"), olmo2 = !strcmp(a, "olmo2"), phi3 = !strcmp(a, "phi3");
    int biases = o->biases && (!strcmp(a, "llama") || granite || !strcmp(a, "mistral3"));
    int gemma2 = !strcmp(a, "gemma2"), mistral3 = !strcmp(a, "mistral3"), oss = !strcmp(a, "gpt-oss");
    int ds2 = !strcmp(a, "deepseek2"), gemma4 = !strcmp(a, "gemma4");
    int moe = !strcmp(a, "qwen3moe") || oss || ds2;
    int n_exp = o->n_expert > 0 ? o->n_expert : 8, n_used = o->n_expert_used > 0 ? o->n_expert_used : 2;
    int ff_exp = o->n_ff_exp > 0 ? o->n_ff_exp : 64;
    qwen3 |= moe && !oss && !ds2; /* qwen3moe: qwen3's attention */
    /* gemma's heads are not n_embd / n_head wide (gemma3 270M: 256 with 640 / 4) */
    int head_dim = o->n_embd / o->n_head * (gemma || gemma2 || gemma4 ? 2 : 1), qd = head_dim * o->n_head;
    int kv = head_dim * o->n_kv_head;
    /* gemma4 (llama.cpp's models/gemma4.cpp): every other layer local with
     * heads half as wide as the global layers' (E2B: 256 and 512), the last
     * two layers reading the cache of the last local and global layer before
     * them (shared KV; on an even count of 4 or more), per-layer embeddings
     * (PLE) of n_embd / 4 per layer */
    int g4_shared = gemma4 && o->n_layer >= 4 && o->n_layer % 2 == 0 ? 2 : 0, ple = o->n_embd / 4;
    /* gemma4: per-layer counts as E2B's and 31B's files give them: the
     * shared-KV layers' FFN twice as wide (use_double_wide_mlp), the global
     * layers with half the KV heads where that divides */
    int g4_kvh_global = o->n_kv_head % 2 == 0 ? o->n_kv_head / 2 : o->n_kv_head;
#define g4_ff(l) (gemma4 && (l) >= o->n_layer - g4_shared ? 2 * o->n_ff : o->n_ff)
#define g4_kvh(l) (gemma4 && (l) % 2 ? g4_kvh_global : o->n_kv_head)
    /* deepseek2 (MLA): heads of n_embd / n_head split in a non-rotated half
     * and a rotated quarter for Q.K, half of it for V; a latent of n_embd /
     * 4 (+ the rotated key part) per token; DeepSeek-V2-Lite's layout (no Q
     * compression, softmax gating, one shared expert, a leading dense
     * layer), or with mla_v3 V3's (Q through a compressed rank of n_embd /
     * 2, sigmoid gating with a selection bias, group-limited routing, the
     * weights renormalized and scaled, two shared experts) */
    int nope = head_dim / 2, n_rot = head_dim / 4, v_mla = head_dim / 2, kv_rank = o->n_embd / 4;
    int q_lora = ds2 && o->mla_v3 ? o->n_embd / 2 : 0, n_shared = o->mla_v3 ? 2 : 1;
#define KEY(x) (snprintf(k, sizeof(k), "%s.%s", a, x), k)
    rc = kvfs_gguf_add_str(w, "general.architecture", a);
    if (!rc) rc = kvfs_gguf_add_str(w, "general.name", "kvfs synthetic test model");
    if (!rc) rc = kvfs_gguf_add_u32(w, KEY("block_count"), (uint32_t)o->n_layer);
    if (!rc) rc = kvfs_gguf_add_u32(w, KEY("embedding_length"), (uint32_t)o->n_embd);
    if (!gemma4 && !rc) rc = kvfs_gguf_add_u32(w, KEY("feed_forward_length"), (uint32_t)o->n_ff);
    if (!rc) rc = kvfs_gguf_add_u32(w, KEY("attention.head_count"), (uint32_t)o->n_head);
    if (!gemma4 && !rc)
        rc = kvfs_gguf_add_u32(w, KEY("attention.head_count_kv"),
                               ds2 ? (o->mla_unabsorbed ? (uint32_t)o->n_head : 1u) : (uint32_t)o->n_kv_head);
    if (!rc) rc = kvfs_gguf_add_u32(w, KEY("context_length"), 4096);
    if (!rc) rc = kvfs_gguf_add_f32(w, KEY("rope.freq_base"), o->rope_theta > 0 ? o->rope_theta : 10000.0f);
    if (!rc) rc = kvfs_gguf_add_f32(w, KEY("attention.layer_norm_rms_epsilon"), 1e-5f);
    /* granite's four multipliers (not Granite 3's 12, 0.22, 1/128 and 8,
     * which flatten a random model's logits: values that keep them sharp) */
    if (granite && !rc) rc = kvfs_gguf_add_f32(w, KEY("embedding_scale"), 3.0f);
    if (granite && !rc) rc = kvfs_gguf_add_f32(w, KEY("residual_scale"), 0.6f);
    if (granite && !rc) rc = kvfs_gguf_add_f32(w, KEY("attention.scale"), 0.25f);
    if (granite && !rc) rc = kvfs_gguf_add_f32(w, KEY("logit_scale"), 0.25f);
    if (moe && !rc) rc = kvfs_gguf_add_u32(w, KEY("expert_count"), (uint32_t)n_exp);
    if (moe && !rc) rc = kvfs_gguf_add_u32(w, KEY("expert_used_count"), (uint32_t)n_used);
    if (moe && !rc) rc = kvfs_gguf_add_u32(w, KEY("expert_feed_forward_length"), (uint32_t)ff_exp);
    /* gpt-oss: a window shorter than test prompts on every other layer
     * (llama.cpp's pattern for it); YaRN as OpenAI's files have it (factor
     * 32 over 4096 positions) */
    if (oss && !rc) rc = kvfs_gguf_add_u32(w, KEY("attention.key_length"), (uint32_t)head_dim);
    if (oss && !rc) rc = kvfs_gguf_add_u32(w, KEY("attention.value_length"), (uint32_t)head_dim);
    if (oss && !rc) rc = kvfs_gguf_add_u32(w, KEY("attention.sliding_window"), 8);
    if (oss && !rc) rc = kvfs_gguf_add_str(w, KEY("rope.scaling.type"), "yarn");
    if (oss && !rc) rc = kvfs_gguf_add_f32(w, KEY("rope.scaling.factor"), 32.0f);
    if (oss && !rc) rc = kvfs_gguf_add_u32(w, KEY("rope.scaling.original_context_length"), 4096);
    /* olmo2 with scaling: also OLMo 3's windows (8; every 4th layer global), which llama.cpp leaves unscaled */
    if (olmo2 && o->rope_scaling && !rc) rc = kvfs_gguf_add_u32(w, KEY("attention.sliding_window"), 8);
    if (o->rope_scaling && !rc) rc = kvfs_gguf_add_str(w, KEY("rope.scaling.type"), o->rope_scaling);
    if (o->rope_scaling && o->rope_factor > 0 && !rc) rc = kvfs_gguf_add_f32(w, KEY("rope.scaling.factor"), o->rope_factor);
    if (o->rope_scaling && !strcmp(o->rope_scaling, "yarn") && !rc)
        rc = kvfs_gguf_add_u32(w, KEY("rope.scaling.original_context_length"), 1024);
    if (ds2 && !rc) rc = kvfs_gguf_add_u32(w, KEY("leading_dense_block_count"), 1);
    if (ds2 && !rc) rc = kvfs_gguf_add_u32(w, KEY("attention.q_lora_rank"), (uint32_t)q_lora);
    if (ds2 && !rc) rc = kvfs_gguf_add_u32(w, KEY("attention.kv_lora_rank"), (uint32_t)kv_rank);
    /* the unabsorbed form: llama.cpp's head sizes are key_length and value_length */
    int ds2_abs = ds2 && !o->mla_unabsorbed, ds2_mha = ds2 && o->mla_unabsorbed;
    if (ds2_abs && !rc) rc = kvfs_gguf_add_u32(w, KEY("attention.key_length"), (uint32_t)(kv_rank + n_rot));
    if (ds2_abs && !rc) rc = kvfs_gguf_add_u32(w, KEY("attention.value_length"), (uint32_t)kv_rank);
    if (ds2_abs && !rc) rc = kvfs_gguf_add_u32(w, KEY("attention.key_length_mla"), (uint32_t)(nope + n_rot));
    if (ds2_abs && !rc) rc = kvfs_gguf_add_u32(w, KEY("attention.value_length_mla"), (uint32_t)v_mla);
    if (ds2_mha && !rc) rc = kvfs_gguf_add_u32(w, KEY("attention.key_length"), (uint32_t)(nope + n_rot));
    if (ds2_mha && !rc) rc = kvfs_gguf_add_u32(w, KEY("attention.value_length"), (uint32_t)v_mla);
    if (ds2 && !rc) rc = kvfs_gguf_add_u32(w, KEY("rope.dimension_count"), (uint32_t)n_rot);
    if (ds2 && !rc) rc = kvfs_gguf_add_u32(w, KEY("expert_shared_count"), (uint32_t)n_shared);
    if (ds2 && !rc) rc = kvfs_gguf_add_u32(w, KEY("expert_gating_func"), o->mla_v3 ? 2u : 1u);
    /* YaRN as DeepSeek's files have it (factor 40 there; 4 over 1024 positions here, so
     * that the ramp splits the rotated pairs), V2-Lite's with its log multiplier (0.1 x
     * mscale_all_dim 0.707, the attention scale), V3's variant without (the rotated parts'
     * magnitude) */
    if (ds2 && !rc) rc = kvfs_gguf_add_str(w, KEY("rope.scaling.type"), "yarn");
    if (ds2 && !rc) rc = kvfs_gguf_add_f32(w, KEY("rope.scaling.factor"), 4.0f);
    if (ds2 && !rc) rc = kvfs_gguf_add_u32(w, KEY("rope.scaling.original_context_length"), 1024);
    if (ds2 && !o->mla_v3 && !rc) rc = kvfs_gguf_add_f32(w, KEY("rope.scaling.yarn_log_multiplier"), 0.0707f);
    if (ds2 && o->mla_v3 && !rc) rc = kvfs_gguf_add_bool(w, KEY("expert_weights_norm"), 1);
    if (ds2 && o->mla_v3 && !rc) rc = kvfs_gguf_add_f32(w, KEY("expert_weights_scale"), 2.5f);
    /* V3's group-limited routing: the experts in n_exp / 2 groups, the best half of them open */
    if (ds2 && o->mla_v3 && !rc) rc = kvfs_gguf_add_u32(w, KEY("expert_group_count"), (uint32_t)n_exp / 2);
    if (ds2 && o->mla_v3 && !rc) rc = kvfs_gguf_add_u32(w, KEY("expert_group_used_count"), (uint32_t)n_exp / 4);
    if (phi3 && !rc) /* partial rotary, as phi-2/phi-4-mini keep: RoPE on half of each head */
        rc = kvfs_gguf_add_u32(w, KEY("rope.dimension_count"), (uint32_t)head_dim / 2);
    if (gemma && !rc) rc = kvfs_gguf_add_u32(w, KEY("attention.key_length"), (uint32_t)head_dim);
    if (gemma && !rc) rc = kvfs_gguf_add_u32(w, KEY("attention.value_length"), (uint32_t)head_dim);
    if (gemma && !rc) rc = kvfs_gguf_add_u32(w, KEY("attention.sliding_window"), 4);
    if (gemma && !rc) rc = kvfs_gguf_add_u32(w, KEY("attention.sliding_window_pattern"), 3);
    /* gemma2: caps that bend the scores and logits of a random model (Gemma
     * 2's 50 and 30 would not; a final cap of 3 flattens them: logits reach
     * about 40), a window shorter than test prompts, every other layer local
     * (llama.cpp's default pattern) */
    if (gemma2 && !rc) rc = kvfs_gguf_add_u32(w, KEY("attention.key_length"), (uint32_t)head_dim);
    if (gemma2 && !rc) rc = kvfs_gguf_add_u32(w, KEY("attention.value_length"), (uint32_t)head_dim);
    if (gemma2 && !rc) rc = kvfs_gguf_add_u32(w, KEY("attention.sliding_window"), 8);
    if (gemma2 && !rc) rc = kvfs_gguf_add_f32(w, KEY("attn_logit_softcapping"), 5.0f);
    if (gemma2 && !rc) rc = kvfs_gguf_add_f32(w, KEY("final_logit_softcapping"), 15.0f);
    if (gemma4 && !rc) rc = kvfs_gguf_add_u32(w, KEY("attention.key_length"), (uint32_t)head_dim);
    if (gemma4 && !rc) rc = kvfs_gguf_add_u32(w, KEY("attention.value_length"), (uint32_t)head_dim);
    if (gemma4 && !rc) rc = kvfs_gguf_add_u32(w, KEY("attention.key_length_swa"), (uint32_t)head_dim / 2);
    if (gemma4 && !rc) rc = kvfs_gguf_add_u32(w, KEY("attention.value_length_swa"), (uint32_t)head_dim / 2);
    if (gemma4 && !rc) rc = kvfs_gguf_add_u32(w, KEY("rope.dimension_count"), (uint32_t)head_dim);
    if (gemma4 && !rc) rc = kvfs_gguf_add_u32(w, KEY("rope.dimension_count_swa"), (uint32_t)head_dim / 2);
    if (gemma4 && !rc) rc = kvfs_gguf_add_f32(w, KEY("rope.freq_base_swa"), 10000.0f);
    if (gemma4 && !rc) rc = kvfs_gguf_add_u32(w, KEY("attention.sliding_window"), 8);
    if (gemma4 && !rc) rc = kvfs_gguf_add_u32(w, KEY("attention.shared_kv_layers"), (uint32_t)g4_shared);
    if (gemma4 && !rc) rc = kvfs_gguf_add_u32(w, KEY("embedding_length_per_layer_input"), (uint32_t)ple);
    if (gemma4 && !rc) rc = kvfs_gguf_add_f32(w, KEY("final_logit_softcapping"), 15.0f);
    if (gemma4 && !rc) {
        int32_t *ff = calloc((size_t)o->n_layer, sizeof(int32_t)), *kvh = calloc((size_t)o->n_layer, sizeof(int32_t));
        for (int l = 0; ff && kvh && l < o->n_layer; l++) {
            ff[l] = g4_ff(l);
            kvh[l] = g4_kvh(l);
        }
        rc = ff && kvh ? kvfs_gguf_add_i32_array(w, KEY("feed_forward_length"), ff, (uint64_t)o->n_layer) : -ENOMEM;
        if (!rc)
            rc = kvfs_gguf_add_i32_array(w, KEY("attention.head_count_kv"), kvh, (uint64_t)o->n_layer);
        free(ff);
        free(kvh);
    }
    if (gemma4 && !rc) {
        uint8_t *swa = calloc((size_t)o->n_layer, 1);
        if (!swa)
            rc = -ENOMEM;
        for (int l = 0; swa && l < o->n_layer; l++)
            swa[l] = l % 2 == 0;
        if (swa)
            rc = kvfs_gguf_add_bool_array(w, KEY("attention.sliding_window_pattern"), swa, (uint64_t)o->n_layer);
        free(swa);
    }
#undef KEY
    /* byte-level vocabulary: token i < 256 is byte i in GPT-2's encoding */
    char (*texts)[8] = calloc((size_t)vocab, 8);
    const char **tok = calloc((size_t)vocab, sizeof(char *));
    int32_t *types = calloc((size_t)vocab, sizeof(int32_t));
    if (!texts || !tok || !types) {
        rc = -ENOMEM;
        goto out;
    }
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        unsigned cp = printable ? (unsigned)b : 256u + (unsigned)extra++;
        if (cp < 0x80) {
            texts[b][0] = (char)cp;
        } else {
            texts[b][0] = (char)(0xc0 | cp >> 6);
            texts[b][1] = (char)(0x80 | (cp & 0x3f));
        }
        tok[b] = texts[b];
        types[b] = 1;
    }
    tok[256] = "<|endoftext|>";
    types[256] = 3;
    if (!rc) rc = kvfs_gguf_add_str(w, "tokenizer.ggml.model", "gpt2");
    if (!rc) rc = kvfs_gguf_add_str(w, "tokenizer.ggml.pre", "gpt-2");
    if (!rc) rc = kvfs_gguf_add_str_array(w, "tokenizer.ggml.tokens", tok, (uint64_t)vocab);
    if (!rc) rc = kvfs_gguf_add_i32_array(w, "tokenizer.ggml.token_type", types, (uint64_t)vocab);
    if (!rc) rc = kvfs_gguf_add_str_array(w, "tokenizer.ggml.merges", tok, 0);
    if (!rc) rc = kvfs_gguf_add_u32(w, "tokenizer.ggml.eos_token_id", 256);
    if (!rc) rc = kvfs_gguf_add_u32(w, "tokenizer.ggml.bos_token_id", 256);
    if (!rc) rc = kvfs_gguf_add_bool(w, "tokenizer.ggml.add_bos_token", 0);
    float sc = 1.0f / (float)o->n_embd;
    /* gemma2: scores large enough for its attention soft-cap to bend them
     * (with the usual gain no cap above 0.5 moved a log-prob by 0.01) */
    float qk_gain = gemma2 ? 8.0f : 1.0f;
    if (!rc) rc = add_rand(w, "token_embd.weight", o->n_embd, vocab, 2.0f, 0.0f, &s);
    if (!rc) rc = add_rand(w, "output_norm.weight", o->n_embd, 1, 0.2f, 1.0f, &s);
    if ((olmo2 || oss) && !rc) /* llama.cpp's olmo2 and gpt-oss require their own output projection */
        rc = add_rand(w, "output.weight", o->n_embd, vocab, 0.5f, 0.0f, &s);
    /* Llama 3.1-style frequency factors, which llama.cpp's mistral3 reads (gemma4: on its global layers):
     * in [1, 4) */
    if ((mistral3 || gemma4) && !rc)
        rc = add_rand(w, "rope_freqs.weight", head_dim / 2, 1, 3.0f, 2.5f, &s);
    if (gemma4 && !rc) rc = add_rand(w, "per_layer_token_embd.weight", ple * o->n_layer, vocab, 2.0f, 0.0f, &s);
    if (gemma4 && !rc)
        rc = add_rand(w, "per_layer_model_proj.weight", o->n_embd, ple * o->n_layer, 4.0f * sc * 8, 0, &s);
    if (gemma4 && !rc) rc = add_rand(w, "per_layer_proj_norm.weight", ple, 1, 0.2f, 1.0f, &s);
    for (int l = 0; l < o->n_layer && !rc; l++) {
#define T(x) (snprintf(k, sizeof(k), "blk.%d.%s", l, x), k)
        if (!olmo2) /* olmo2 normalizes after its sublayers instead */
            rc = add_rand(w, T("attn_norm.weight"), o->n_embd, 1, 0.2f, 1.0f, &s);
        /* gpt-oss: post_attention_norm is its FFN's input norm */
        if (!olmo2 && !rc)
            rc = add_rand(w, T(oss ? "post_attention_norm.weight" : "ffn_norm.weight"), o->n_embd, 1, 0.2f, 1.0f, &s);
        if (ds2) { /* MLA: Q (compressed or not), the latent and rotated key part, their decompression per head */
            if (q_lora) {
                if (!rc) rc = add_rand(w, T("attn_q_a.weight"), o->n_embd, q_lora, 4.0f * sc * 8, 0, &s);
                if (!rc) rc = add_rand(w, T("attn_q_a_norm.weight"), q_lora, 1, 0.2f, 1.0f, &s);
                if (!rc) rc = add_rand(w, T("attn_q_b.weight"), q_lora, o->n_head * (nope + n_rot), 0.5f, 0, &s);
            } else if (!rc) {
                rc = add_rand(w, T("attn_q.weight"), o->n_embd, o->n_head * (nope + n_rot), 4.0f * sc * 8, 0, &s);
            }
            if (!rc) rc = add_rand(w, T("attn_kv_a_mqa.weight"), o->n_embd, kv_rank + n_rot, 4.0f * sc * 8, 0, &s);
            if (!rc) rc = add_rand(w, T("attn_kv_a_norm.weight"), kv_rank, 1, 0.4f, 1.0f, &s);
            if (o->mla_unabsorbed) { /* per head its nope K rows, then its V rows */
                if (!rc) rc = add_rand(w, T("attn_kv_b.weight"), kv_rank, o->n_head * (nope + v_mla), 0.5f, 0, &s);
            } else {
                if (!rc) rc = add_rand3(w, T("attn_k_b.weight"), nope, kv_rank, o->n_head, 0.5f, 0, &s);
                if (!rc) rc = add_rand3(w, T("attn_v_b.weight"), kv_rank, v_mla, o->n_head, 0.5f, 0, &s);
            }
            qd = o->n_head * v_mla; /* attn_output's input */
        } else if (phi3) { /* fused: Q, K, V rows in one tensor; the gate's and up's rows in ffn_up */
            if (!rc) rc = add_rand(w, T("attn_qkv.weight"), o->n_embd, qd + 2 * kv, 4.0f * sc * 8, 0, &s);
        } else if (gemma4) { /* local layers' heads half as wide; the shared-KV layers without K and V */
            int hd = l % 2 == 0 ? head_dim / 2 : head_dim, has_kv = l < o->n_layer - g4_shared;
            qd = hd * o->n_head;
            kv = hd * g4_kvh(l);
            if (!rc) rc = add_rand(w, T("attn_q.weight"), o->n_embd, qd, 4.0f * sc * 8, 0, &s);
            if (has_kv && !rc) rc = add_rand(w, T("attn_k.weight"), o->n_embd, kv, 4.0f * sc * 8, 0, &s);
            if (has_kv && !rc) rc = add_rand(w, T("attn_v.weight"), o->n_embd, kv, 4.0f * sc * 8, 0, &s);
            if (!rc) rc = add_rand(w, T("attn_q_norm.weight"), hd, 1, 0.2f, 1.0f, &s);
            if (has_kv && !rc) rc = add_rand(w, T("attn_k_norm.weight"), hd, 1, 0.2f, 1.0f, &s);
            if (!rc) rc = add_rand(w, T("inp_gate.weight"), o->n_embd, ple, 4.0f * sc * 8, 0, &s);
            if (!rc) rc = add_rand(w, T("proj.weight"), ple, o->n_embd, 4.0f / (float)ple * 4, 0, &s);
            if (!rc) rc = add_rand(w, T("post_norm.weight"), o->n_embd, 1, 0.2f, 1.0f, &s);
            if (!rc) rc = add_rand(w, T("layer_output_scale.weight"), 1, 1, 0.5f, 1.0f, &s);
        } else {
            if (!rc) rc = add_rand(w, T("attn_q.weight"), o->n_embd, qd, 4.0f * sc * 8 * qk_gain, 0, &s);
            if (!rc) rc = add_rand(w, T("attn_k.weight"), o->n_embd, kv, 4.0f * sc * 8 * qk_gain, 0, &s);
            if (!rc) rc = add_rand(w, T("attn_v.weight"), o->n_embd, kv, 4.0f * sc * 8, 0, &s);
        }
        if (!rc) rc = add_rand(w, T("attn_output.weight"), qd, o->n_embd, 4.0f * sc * 4, 0, &s);
        qd = head_dim * o->n_head;
        if (oss) { /* every bias llama.cpp reads; sinks in [-2, 6), of the scores' size (without them
                    * kvfs's F32 log-probs differ from llama.cpp's by 0.8); gates and ups of a few
                    * units, so that swiglu_oai's clamp at 7 bites (without it: 2.0), the down
                    * projection smaller to match */
            if (!rc) rc = add_rand(w, T("attn_output.bias"), o->n_embd, 1, 0.2f, 0, &s);
            if (!rc) rc = add_rand(w, T("attn_sinks.weight"), o->n_head, 1, 8.0f, 2.0f, &s);
            if (!rc) rc = add_rand(w, T("ffn_gate_inp.weight"), o->n_embd, n_exp, 0.5f, 0, &s);
            if (!rc) rc = add_rand(w, T("ffn_gate_inp.bias"), n_exp, 1, 1.0f, 0, &s);
            if (!rc) rc = add_rand3(w, T("ffn_gate_exps.weight"), o->n_embd, ff_exp, n_exp, 4.0f * sc * 64, 0, &s);
            if (!rc) rc = add_rand(w, T("ffn_gate_exps.bias"), ff_exp, n_exp, 1.0f, 0, &s);
            if (!rc) rc = add_rand3(w, T("ffn_up_exps.weight"), o->n_embd, ff_exp, n_exp, 4.0f * sc * 64, 0, &s);
            if (!rc) rc = add_rand(w, T("ffn_up_exps.bias"), ff_exp, n_exp, 1.0f, 0, &s);
            if (!rc) rc = add_rand3(w, T("ffn_down_exps.weight"), ff_exp, o->n_embd, n_exp, 4.0f * sc, 0, &s);
            if (!rc) rc = add_rand(w, T("ffn_down_exps.bias"), o->n_embd, n_exp, 0.2f, 0, &s);
        } else if (ds2 && l < 1) { /* the leading dense layer */
            if (!rc) rc = add_rand(w, T("ffn_gate.weight"), o->n_embd, o->n_ff, 4.0f * sc * 8, 0, &s);
            if (!rc) rc = add_rand(w, T("ffn_up.weight"), o->n_embd, o->n_ff, 4.0f * sc * 8, 0, &s);
            if (!rc) rc = add_rand(w, T("ffn_down.weight"), o->n_ff, o->n_embd, 4.0f * sc * 4, 0, &s);
        } else if (moe) { /* a router whose logits spread a few units (routing that matters); experts of the
                    * dense FFN's gain, twice its output (fewer, narrower rows) */
            if (!rc) rc = add_rand(w, T("ffn_gate_inp.weight"), o->n_embd, n_exp, 0.5f, 0, &s);
            if (!rc) rc = add_rand3(w, T("ffn_gate_exps.weight"), o->n_embd, ff_exp, n_exp, 4.0f * sc * 8, 0, &s);
            if (!rc) rc = add_rand3(w, T("ffn_up_exps.weight"), o->n_embd, ff_exp, n_exp, 4.0f * sc * 8, 0, &s);
            if (!rc) rc = add_rand3(w, T("ffn_down_exps.weight"), ff_exp, o->n_embd, n_exp, 4.0f * sc * 8, 0, &s);
            /* deepseek2: its shared experts (one FFN n_shared times as wide), V3's selection bias (of the
             * sigmoid's size: it moves the choice, not the weights) */
            int fs = ff_exp * n_shared;
            if (ds2 && !rc) rc = add_rand(w, T("ffn_gate_shexp.weight"), o->n_embd, fs, 4.0f * sc * 8, 0, &s);
            if (ds2 && !rc) rc = add_rand(w, T("ffn_up_shexp.weight"), o->n_embd, fs, 4.0f * sc * 8, 0, &s);
            if (ds2 && !rc)
                rc = add_rand(w, T("ffn_down_shexp.weight"), ff_exp * n_shared, o->n_embd, 4.0f * sc * 8, 0, &s);
            if (ds2 && o->mla_v3 && !rc) rc = add_rand(w, T("exp_probs_b.bias"), n_exp, 1, 3.0f, 0, &s);
        } else if (phi3) {
            if (!rc) rc = add_rand(w, T("ffn_up.weight"), o->n_embd, 2 * o->n_ff, 4.0f * sc * 8, 0, &s);
        } else {
            if (!rc) rc = add_rand(w, T("ffn_gate.weight"), o->n_embd, g4_ff(l), 4.0f * sc * 8, 0, &s);
            if (!rc) rc = add_rand(w, T("ffn_up.weight"), o->n_embd, g4_ff(l), 4.0f * sc * 8, 0, &s);
        }
        if (!moe && !ds2 && !rc) rc = add_rand(w, T("ffn_down.weight"), g4_ff(l), o->n_embd, 4.0f * sc * 4, 0, &s);
        int qkv_b = qwen || oss || biases, dense_b = biases;
        if (qkv_b && !rc) rc = add_rand(w, T("attn_q.bias"), qd, 1, 0.2f, 0, &s);
        if (qkv_b && !rc) rc = add_rand(w, T("attn_k.bias"), kv, 1, 0.2f, 0, &s);
        if (qkv_b && !rc) rc = add_rand(w, T("attn_v.bias"), kv, 1, 0.2f, 0, &s);
        /* llama.cpp's log-probs with them vs without: 10-36 apart (n = 300), 2026-11-28 */
        if (dense_b && !rc) rc = add_rand(w, T("attn_output.bias"), o->n_embd, 1, 0.4f, 0, &s);
        if (dense_b && !rc) rc = add_rand(w, T("ffn_gate.bias"), o->n_ff, 1, 0.4f, 0, &s);
        if (dense_b && !rc) rc = add_rand(w, T("ffn_up.bias"), o->n_ff, 1, 0.4f, 0, &s);
        if (dense_b && !rc) rc = add_rand(w, T("ffn_down.bias"), o->n_embd, 1, 0.4f, 0, &s);
        if ((gemma || qwen3) && !rc) rc = add_rand(w, T("attn_q_norm.weight"), head_dim, 1, 0.2f, 1.0f, &s);
        if ((gemma || qwen3) && !rc) rc = add_rand(w, T("attn_k_norm.weight"), head_dim, 1, 0.2f, 1.0f, &s);
        if (olmo2 && !rc) rc = add_rand(w, T("attn_q_norm.weight"), qd, 1, 0.2f, 1.0f, &s);
        if (olmo2 && !rc) rc = add_rand(w, T("attn_k_norm.weight"), kv, 1, 0.2f, 1.0f, &s);
        if (olmo2 && !rc) rc = add_rand(w, T("post_attention_norm.weight"), o->n_embd, 1, 0.2f, 1.0f, &s);
        if (olmo2 && !rc) rc = add_rand(w, T("post_ffw_norm.weight"), o->n_embd, 1, 0.2f, 1.0f, &s);
        if ((gemma || gemma2 || gemma4) && !rc)
            rc = add_rand(w, T("post_attention_norm.weight"), o->n_embd, 1, 0.2f, 1.0f, &s);
        if ((gemma || gemma2 || gemma4) && !rc)
            rc = add_rand(w, T("post_ffw_norm.weight"), o->n_embd, 1, 0.2f, 1.0f, &s);
#undef T
    }
#undef g4_ff
#undef g4_kvh
    if (!rc)
        rc = kvfs_gguf_write_file(w, path);
out:
    free(texts);
    free(tok);
    free(types);
    kvfs_gguf_writer_free(w);
    return rc;
}
