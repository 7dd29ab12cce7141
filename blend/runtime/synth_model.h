/* synth_model.h - tiny random models in GGUF, for fast tests. */
#ifndef KVFS_SYNTH_MODEL_H
#define KVFS_SYNTH_MODEL_H
#include <stdint.h>
struct kvfs_synth_model_opts {
    const char *arch;  /* "llama", "qwen2" (adds QKV biases, NeoX RoPE), "qwen3" (per-head
                        * Q/K norms, NeoX RoPE), "gemma3"
                        * (heads of 2 n_embd / n_head, Q/K and post norms, a
                        * sliding window of 4 on all layers but each 3rd),
                        * "gemma2" (heads as gemma3's, post norms, soft-capping
                        * of 5 and 15, a window of 8 on every other layer),
                        * "gemma4" (a window of 8 on every other layer, whose
                        * heads are half the global layers' width, the last
                        * two layers sharing earlier layers' KV, per-layer
                        * embeddings of n_embd / 4, frequency factors on the
                        * global layers, half the KV heads on the global
                        * layers (when n_kv_head is even), the shared-KV
                        * layers' FFN twice as wide, a final soft-cap of 15),
                        * "mistral3" (llama with RoPE frequency factors), or
                        * granite, smollm3, olmo2, phi3, "qwen3moe" (qwen3's
                        * attention, a router and n_expert SwiGLU experts of
                        * n_ff_exp, n_expert_used per token, as its FFN), "gpt-oss"
                        * (biases, attention sinks, a window of 8 on every
                        * other layer, experts as qwen3moe's with biases),
                        * "deepseek2" (latent attention, a leading dense
                        * layer, experts with shared ones; n_kv_head unused) */
    int n_layer, n_embd, n_head, n_kv_head, n_ff;
    float rope_theta;
    uint32_t seed;
    int n_expert, n_expert_used, n_ff_exp; /* qwen3moe, gpt-oss, deepseek2; 0: 8, 2 and 64 */
    int mla_v3; /* deepseek2: DeepSeek-V3's layout, not V2-Lite's (synth_model.c) */
    /* RoPE scaling keys: rope.scaling.type (NULL: none written) and its
     * factor; yarn also an original context of 1024 (so that the ramp
     * splits the pairs of small heads); not with gpt-oss or deepseek2,
     * which have their own */
    const char *rope_scaling;
    float rope_factor;
    /* llama, granite, mistral3: every optional bias llama.cpp's graph takes
     * (Q, K, V, the output projection, the FFN's gate, up and down) */
    int biases;
    /* deepseek2: the unabsorbed form of older files (one attn_kv_b per
     * layer, no key_length_mla: llama.cpp's MHA cache of nope + rope keys) */
    int mla_unabsorbed;
};
/* Vocabulary: the 256 byte-level tokens plus <|endoftext|>, no merges. */
int kvfs_synth_model_write(const char *path, const struct kvfs_synth_model_opts *o);
#endif
