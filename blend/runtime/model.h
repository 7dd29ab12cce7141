/* model.h - a transformer loaded from GGUF onto a compute backend.
 * Architectures: llama (Llama 2/3, SmolLM2, Mistral, Yi; mistral3 computes
 * as it), qwen2 (QKV biases), gemma3 (scaled embeddings, Q/K norms,
 * post-attention and post-FFN norms, GeGLU, sliding-window layers with
 * their own RoPE base), gemma2 (as gemma3 without Q/K norms, with soft-capped
 * attention scores), qwen3, granite, smollm3, olmo2, phi3, qwen3moe (qwen3's
 * attention, a mixture of SwiGLU experts as its FFN), gpt-oss (attention
 * sinks, every other layer a sliding window, biases, a mixture of experts
 * weighted by a softmax over the chosen ones, clamped SwiGLU), deepseek2
 * (multi-head latent attention, leading dense layers, experts with shared
 * ones, softmax or sigmoid routing), gemma4 (gemma3's layers with heads of
 * their own width on local and global layers, V normed too, attention
 * unscaled, the last layers reading an earlier layer's cache (shared KV),
 * per-layer embeddings (PLE) added after each layer, a scale per layer)
 * (model.c).
 * Weights stay in the file's encoding where the backend multiplies by them
 * so, else are decoded to f32 at load. */
#ifndef KVFS_MODEL_H
#define KVFS_MODEL_H

#include <stdint.h>

#include "backend.h"
#include "kvformat.h"

struct kvfs_gguf;

struct kvfs_hparams {
    char arch[16];
    int n_layer, n_embd, n_head, n_kv_head, head_dim, n_ff, n_vocab, n_ctx_train;
    float rms_eps, rope_theta;
    int rope_dim, rope_style; /* enum kvfs_rope_style */
    int q_dim;                /* n_head * head_dim (gemma3: not n_embd) */
    float attn_scale;         /* of Q.K: 1/sqrt(head_dim) unless the model says */
    int scale_q;              /* applied to Q before attention (gemma), not to the scores */
    float embd_scale;         /* token embeddings times this (gemma: sqrt(n_embd)); 0: none */
    float logit_softcap;      /* final logits c * tanh(x / c); 0: none */
    float attn_softcap;       /* gemma2: attention scores c * tanh(s / c) before the softmax; 0: none */
    int n_swa;                /* sliding window of the local layers; 0: none */
    float rope_theta_swa;     /* RoPE base of those layers */
    int ffn_geglu;            /* FFN gate through GELU (gemma), not SiLU */
    float residual_scale;     /* granite: attention and FFN outputs times this before the residual add; 0: none */
    float logit_scale;        /* granite: final logits divided by this; 0: none */
    int qk_norm_full;         /* olmo2: Q and K RMS-normed across all heads at once, not head by head */
    int n_expert, n_expert_used, n_ff_exp; /* qwen3moe: experts, routed per token, their FFN width; else 0 */
    /* RoPE scaling's magnitude (YaRN's, rope.scaling.attn_factor): rotated
     * Q and K times this (the angles are in rope_freqs), on the global and
     * the sliding-window layers (rope_scaling.c); 0: none */
    float rope_mscale, rope_mscale_swa;
    int swa_rope_shared; /* the sliding-window layers rotate by rope_freqs too (model.c's rope_scaling) */
    int moe_oai; /* gpt-oss: the top experts by router logit, weighted by the softmax of their logits (no
                  * renormalization); ggml's swiglu_oai as their activation */
    /* deepseek2 (MLA, llama.cpp's absorbed form): the cache holds per token
     * one "head" of head_dim = n_rot + mla_rank: the rotated key part, then
     * the normalized latent (kvfs puts the rotated part first, so that
     * rope_dim covers it as in every other family; llama.cpp's cache has it
     * last); n_kv_head = 1, q_dim = n_head * head_dim (the absorbed
     * queries); attn_scale from mla_k = the decompressed key head */
    int mla_rank, mla_k, mla_v, q_lora; /* kv_lora_rank, key_length_mla, value_length_mla, q_lora_rank (0: none) */
    /* deepseek2's unabsorbed form (older files: attn_kv_b, no
     * key_length_mla): kv_lora_rank, mla_rank 0, and the cache llama.cpp
     * keeps for it, per head K [rotated | nope] (kvfs's order; llama.cpp's
     * [nope | rotated]) of head_dim = mla_k and V of mla_v = head_dim -
     * rope_dim after rope_dim zeros (kvfs(5), KVFS_FLAG_V_NARROW);
     * n_kv_head = n_head; 0 for every other model */
    int mla_mha_rank;
    int n_dense_lead;                   /* leading layers with a dense FFN (deepseek2) */
    int n_ff_shexp;                     /* the shared experts' FFN width (n_ff_exp x their count); 0: none */
    int moe_sigmoid;                    /* gating by sigmoid, not softmax */
    int moe_norm;                       /* the chosen weights renormalized to sum 1 */
    float moe_scale;                    /* the weights times this; 0 or 1: none */
    int n_group, n_group_used;          /* deepseek2 (V3): experts chosen from the best groups only; 0: no groups */
    float mla_rope_mscale;              /* deepseek2's YaRN: the rotated parts of Q and K times this; 0: none */
    /* gemma4: head_dim (and q_dim), n_kv_head and n_ff are the largest
     * layer's, each layer has its own (kvfs_layer_weights); V RMS-normed per head without
     * a weight; n_ple the width of each layer's per-layer embedding (0:
     * none) */
    int v_norm, n_ple;
};

struct kvfs_layer_weights {
    float *attn_norm, *ffn_norm;           /* device [n_embd]; NULL (olmo2): the sublayer takes x as it is */
    struct kvfs_weight *wq, *wk, *wv, *wo; /* [out][in] */
    float *bq, *bk, *bv;                   /* device biases (qwen2) or NULL */
    struct kvfs_weight *w_gate, *w_up, *w_down;
    /* activation quantization llama.cpp applies before each matmul (ggml
     * type of its vec_dot partner; 0 = none), in the order q k v o gate up down */
    int act_q[7];
    /* gemma3, else NULL: RMSNorm of each Q/K head [head_dim] after the
     * projection; of the attention and FFN outputs [n_embd] before their
     * residual adds */
    float *attn_q_norm, *attn_k_norm, *attn_post_norm, *ffn_post_norm;
    int window;       /* sliding window of this layer's attention; 0: full causal */
    float rope_theta; /* this layer's RoPE base */
    int no_rope;      /* keys and queries not rotated at all (smollm3: every 4th layer) */
    /* qwen3moe: the router [n_expert][n_embd] and each expert's SwiGLU
     * (arrays of n_expert weights: one slice each of the 3-D tensors);
     * w_gate, w_up, w_down NULL then */
    struct kvfs_weight *ffn_gate_inp, **exp_gate, **exp_up, **exp_down;
    int act_q_moe[4]; /* as act_q: router, gate, up, down */
    /* gpt-oss, else NULL: device f32 each; attention sinks [n_head], output
     * projection bias [n_embd], router bias [n_expert], the experts' biases
     * [n_expert][n_ff_exp] (gate, up) and [n_expert][n_embd] (down) */
    float *attn_sinks, *bo, *ffn_gate_inp_b, *exp_gate_b, *exp_up_b, *exp_down_b;
    /* llama, granite, mistral3, where the file has them (else NULL): the
     * dense FFN's biases [n_ff], [n_ff], [n_embd] (bo above: theirs too) */
    float *ffn_gate_b, *ffn_up_b, *ffn_down_b;
    /* deepseek2, else NULL: Q through its compressed rank (wq_a, its norm,
     * wq_b; wq NULL then) or wq; the latent and rotated key part
     * (wkv_a [mla_rank + n_rot][n_embd]) and the latent's norm; per query
     * head the absorbed key (wk_b[h] [mla_rank][nope]) and value
     * (wv_b[h] [mla_v][mla_rank]) decompressions; the shared experts'
     * SwiGLU; the routing's selection bias (host f32[n_expert]) */
    struct kvfs_weight *wq_a, *wq_b, *wkv_a, **wk_b, **wv_b, *sh_gate, *sh_up, *sh_down;
    /* deepseek2's unabsorbed form (wk_b, wv_b NULL): the latent's
     * decompression, per head nope K rows then mla_v V rows
     * [n_head * (nope + mla_v)][mla_rank] */
    struct kvfs_weight *wkv_b;
    float *q_a_norm, *kv_a_norm, *exp_probs_b;
    int act_q_mla[5]; /* as act_q: wq_a, wq_b, wkv_a, wk_b (the unabsorbed form: wkv_b), wv_b */
    int act_q_sh[3];  /* shared experts: gate, up, down */
    /* every family: this layer's head width and rotated dims (hp's but for
     * gemma4, whose local layers' heads are narrower), its RoPE frequency
     * factors (host; the model's, gemma4: its global layers only), the
     * layer whose cache it attends over (itself but for gemma4's shared-KV
     * layers, which compute no K/V) */
    int head_dim, rope_dim, kv_layer;
    int n_kv_head, n_ff; /* hp's but for gemma4's per-layer counts (a shared-KV layer: its source's heads) */
    const float *rope_freqs;
    float rope_mscale; /* hp's rope_mscale or rope_mscale_swa, as the layer slides or not */
    /* gemma4's per-layer embedding: gelu(ple_gate . x) times this layer's
     * input, through ple_proj and RMSNorm ple_post_norm, added to x; then
     * x times out_scale (0: none) */
    struct kvfs_weight *ple_gate, *ple_proj;
    float *ple_post_norm;
    float out_scale;
    int act_q_ple[2];
};

struct kvfs_model {
    struct kvfs_hparams hp;
    struct kvfs_backend be;
    struct kvfs_fingerprint fp;  /* for chunk files */
    struct kvfs_gguf *gguf;      /* keeps the mapping (tokenizer metadata) */
    float *tok_embd;             /* device [n_vocab][n_embd], or NULL when kept as: */
    struct kvfs_weight *tok_embd_w; /* the table as an encoded weight (see kvfs_embed) */
    float *output_norm;          /* device [n_embd] */
    float *rope_freqs;           /* host [rope_dim / 2]: RoPE frequency factors (Llama 3.1's, scaling's), or NULL */
    float *rope_freqs_swa;       /* the sliding-window layers' where scaling gives them others, or NULL */
    struct kvfs_weight *output;  /* [n_vocab][n_embd]; the embedding when tied */
    int output_act_q;
    int ggml_compat;             /* emulate llama.cpp's activation quantization and f16 KV */
    /* gemma4's per-layer embeddings (NULL without): the table [n_vocab]
     * [n_layer * n_ple] (encoded, read a row per token, or device f32),
     * its projection from the scaled embedding [n_layer * n_ple][n_embd]
     * and that's norm [n_ple]; ones: device [head_dim] of 1 (V's norm) */
    struct kvfs_weight *ple_tok_w, *ple_model_proj;
    float *ple_tok, *ple_proj_norm, *ones;
    int ple_proj_act_q;
    struct kvfs_layer_weights *layers;
    const struct kvfs_model *view_of; /* a view (kvfs_model_view): that model owns the weights */
};

/* Load a GGUF model onto the backend named `backend` ("cpu", "cuda", "auto").
 * n_threads <= 0: all cores.  err gets a reason on failure. */
int kvfs_model_load(const char *path, const char *backend, int n_threads, struct kvfs_model **out,
                    char *err, size_t errlen);
void kvfs_model_free(struct kvfs_model *m);
/* A view of m on a context of its own of m's backend (CUDA: its own stream,
 * cuBLAS handle and scratch) sharing m's weights, so that blends on a
 * backend that is not thread_safe can run at once, one per view.  Freed by
 * kvfs_model_free (its context only), before m. */
int kvfs_model_view(const struct kvfs_model *m, struct kvfs_model **out);

#endif
