/* forward.h - prefill and decode on a loaded model, written only against the
 * backend interface (gpu/backend.h), so every backend runs it unchanged.
 *
 * The KV cache holds, per layer, keys after RoPE and values, as rows
 * [kv_head][head_dim] in f32 on the device, with each row's absolute
 * position.  Attention uses an exact causal mask by position. */
#ifndef KVFS_FORWARD_H
#define KVFS_FORWARD_H

#include <stdint.h>

#include "model.h"

struct kvfs_kv_cache {
    int n_layer, kv_dim;  /* kv_dim = n_kv_head * head_dim (gemma4: the widest layer's; each layer's rows are
                           * packed at its own width, and a shared-KV layer's buffers are its source's) */
    int cap, n;           /* rows allocated, rows used */
    float **k, **v;       /* per layer: device [cap][kv_dim] */
    int32_t *pos;         /* device [cap] */
    int32_t *host_pos;    /* host copy */
};

int kvfs_kv_cache_init(const struct kvfs_model *m, int cap, struct kvfs_kv_cache *c);
void kvfs_kv_cache_free(const struct kvfs_model *m, struct kvfs_kv_cache *c);

/* Append n tokens at positions pos0.. to the cache and run them through the
 * model.  logits (host, n_vocab floats) receives the last token's logits if
 * not NULL.  A decode step is a call with n = 1. */
int kvfs_forward(const struct kvfs_model *m, struct kvfs_kv_cache *c, const int32_t *tokens, int n, int pos0,
                 float *logits);

/* Fill the cache from a chunk file image (keys after RoPE); its fingerprint
 * must be the model's (-EINVAL with err otherwise).  Appends at the end. */
int kvfs_kv_cache_load_chunk(const struct kvfs_model *m, struct kvfs_kv_cache *c, const void *image, size_t len,
                             char *err, size_t errlen);

/* Convert one layer of a chunk (K then V, unpadded, the header's dtype) into
 * cache rows [row0, row0 + n_tokens) of that layer (the backend converts,
 * on the device where it has one). */
struct kvfs_header;
int kvfs_kv_cache_load_layer(const struct kvfs_model *m, struct kvfs_kv_cache *c, int row0, const struct kvfs_header *h,
                             int layer, const void *data);

/* Write rows [first, first+count) of the cache as a v1 chunk (f16 unless
 * dtype says otherwise) into w (kvfs_writer, finished). */
int kvfs_kv_cache_to_chunk(const struct kvfs_model *m, const struct kvfs_kv_cache *c, int first, int count,
                           const int32_t *tokens, uint32_t dtype, struct kvfs_writer *w);
/* The same with extra header flags (KVFS_FLAG_BLENDED). */
int kvfs_kv_cache_to_chunk_flags(const struct kvfs_model *m, const struct kvfs_kv_cache *c, int first, int count,
                                 const int32_t *tokens, uint32_t dtype, uint32_t flags, struct kvfs_writer *w);
/* The same salted (a tenant's prefill: salt is its kvfs_salt_digest, or NULL
 * for none).  Blend results are kept by their recipe's key, not by content
 * hash, so blends need no salt. */
int kvfs_kv_cache_to_chunk_salted(const struct kvfs_model *m, const struct kvfs_kv_cache *c, int first, int count,
                                  const int32_t *tokens, uint32_t dtype, uint32_t flags, const uint8_t salt[32],
                                  struct kvfs_writer *w);

/* Building blocks, shared with blending (blend/blend.c). */
struct kvfs_work { /* device buffers for up to n rows */
    float *x, *xn, *q, *k, *v, *att, *o, *aq, *gate, *up;
    int32_t *ids, *pos;
    float *ple; /* gemma4: the rows' per-layer inputs [n_layer][n][n_ple] (kvfs_ple_inputs), else NULL */
};
int kvfs_work_alloc(const struct kvfs_model *m, int n, struct kvfs_work *w);
void kvfs_work_free(const struct kvfs_model *m, struct kvfs_work *w);
/* y = x . W^T (+bias), quantizing x first as llama.cpp would */
int kvfs_linear(const struct kvfs_model *m, const struct kvfs_weight *wt, const float *bias, int act_q,
                const float *x, float *tmp, float *y, int n, int in_dim);
/* Layer l, first half: from w->x (n rows at w->pos) compute w->q, w->k, w->v
 * (RoPE applied, f16-rounded in ggml_compat mode). */
int kvfs_layer_qkv(const struct kvfs_model *m, int l, struct kvfs_work *w, int n);
/* Layer l, second half: attention of the n rows over cache rows [0, n_ctx)
 * of layer l (exact positional mask), output projection, MLP; updates w->x. */
int kvfs_layer_finish(const struct kvfs_model *m, int l, struct kvfs_work *w, int n, const struct kvfs_kv_cache *c,
                      int n_ctx);
/* x[i] = the embedding of token ids[i] (device int32), i < n. */
int kvfs_embed(const struct kvfs_model *m, const int32_t *ids, float *x, int n);
/* gemma4: w->ple from the n rows' ids (w->ids) and embeddings (w->x, after
 * kvfs_embed), as llama.cpp's project_per_layer_inputs; 0 without PLE. */
int kvfs_ple_inputs(const struct kvfs_model *m, struct kvfs_work *w, int n);
/* Why chunk files cannot hold this model's cache (NULL: they can). */
const char *kvfs_model_chunk_refusal(const struct kvfs_model *m);
/* Why its chunks cannot be of this dtype (NULL: they can). */
const char *kvfs_model_dtype_refusal(const struct kvfs_model *m, uint32_t dtype);
/* 1 when its layers' caches differ in shape or some layer reads another's
 * (gemma4): its chunks carry KVFS_FLAG_LAYER_SHAPES and these shapes
 * (out: n_layer of them) */
int kvfs_model_shaped(const struct kvfs_model *m);
void kvfs_model_layer_shapes(const struct kvfs_model *m, struct kvfs_layer_shape *out);
/* the header flags of its prefilled chunks (KEYS_ROPED, and V_FROM_K or
 * LAYER_SHAPES where it has them): what names a chunk before it is computed */
uint32_t kvfs_model_chunk_flags(const struct kvfs_model *m);
/* Logits (host) of row `row` of w->x. */
int kvfs_output_logits(const struct kvfs_model *m, struct kvfs_work *w, int row, float *logits);

#endif
