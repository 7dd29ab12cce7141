/* model.c - load a GGUF transformer onto a compute backend. */
#include "model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "gguf.h"
#include "log.h" /* kvfs_errf */
#include "model_check.h"
#include "rope_scaling.h"

static int hp_u32(const struct kvfs_gguf *g, const char *arch, const char *key, int *out, int required)
{
    char k[128];
    uint32_t v;
    snprintf(k, sizeof(k), "%s.%s", arch, key);
    int rc = kvfs_gguf_get_u32(g, k, &v);
    if (rc)
        return required ? rc : 0;
    *out = (int)v;
    return 0;
}

/* Dequantize a tensor to host f32; checks its shape (ne0 = cols, ne1 = rows). */
static int tensor_f32(const struct kvfs_gguf *g, const char *name, uint64_t cols, uint64_t rows, float **out,
                      char *err, size_t errlen)
{
    const struct kvfs_gguf_tensor *t = kvfs_gguf_tensor(g, name);
    if (!t)
        return kvfs_errf(err, errlen, -ENOENT, "tensor %s missing", name);
    if (t->ne[0] != cols || t->ne[1] * t->ne[2] * t->ne[3] != rows)
        return kvfs_errf(err, errlen, -EINVAL, "tensor %s has shape %llux%llu, expected %llux%llu", name,
                   (unsigned long long)t->ne[0], (unsigned long long)t->ne[1], (unsigned long long)cols,
                   (unsigned long long)rows);
    float *f = malloc(sizeof(float) * cols * rows);
    if (!f)
        return -ENOMEM;
    int rc = kvfs_ggml_dequantize(t->type, t->data, f, cols * rows);
    if (rc) {
        free(f);
        return kvfs_errf(err, errlen, rc, "tensor %s: unsupported type %u", name, t->type);
    }
    *out = f;
    return 0;
}

/* Weights stay in the GGUF's encoding (the mapping) where the backend can
 * multiply by them so: a model then takes about its file's size in memory,
 * not 4 bytes per weight.  KVFS_F32_WEIGHTS=1 decodes them all at load
 * (benchmarks compare the two). */
static int keep_encoded(const struct kvfs_model *m, const struct kvfs_gguf_tensor *t)
{
    const char *e = getenv("KVFS_F32_WEIGHTS");
    return m->be.iface->weight_create_quant && t && t->type != KVFS_GGML_F32 && !(e && *e && strcmp(e, "0"));
}

/* Architectures cleared on the CPU backend only are refused on others
 * unless KVFS_ALLOW_UNCHECKED=1: the device check that would clear them sets
 * it (tests/gpu/arch_cuda.sh); nobody else should. */
static int allow_unchecked(void)
{
    const char *e = getenv("KVFS_ALLOW_UNCHECKED");
    return e && *e && strcmp(e, "0");
}

/* Rows [row0, row0 + rows) of a weight of total_rows (all of them, or a part
 * of a fused one: phi3's attn_qkv and gate-up ffn_up) as a weight of its
 * own: kept encoded where the backend multiplies by it so (rows are
 * contiguous: the file's bytes from row0 on), else (a type it cannot
 * multiply by) the whole tensor decoded, with tensor_f32's checks, and the
 * slice taken. */
static int load_weight_part(struct kvfs_model *m, const char *name, int row0, int rows, int total_rows, int in_dim,
                            struct kvfs_weight **w, char *err, size_t errlen)
{
    const struct kvfs_gguf_tensor *t = kvfs_gguf_tensor(m->gguf, name);
    size_t rb = t ? kvfs_ggml_row_size(t->type, (uint64_t)in_dim) : 0;
    if (keep_encoded(m, t) && rb && t->ne[0] == (uint64_t)in_dim &&
        t->ne[1] * t->ne[2] * t->ne[3] == (uint64_t)total_rows &&
        m->be.iface->weight_create_quant(m->be.ctx, t->type, t->data + (size_t)row0 * rb, rb, rows, in_dim, w) == 0)
        return 0;
    float *f;
    int rc = tensor_f32(m->gguf, name, (uint64_t)in_dim, (uint64_t)total_rows, &f, err, errlen);
    if (rc)
        return rc;
    rc = m->be.iface->weight_create(m->be.ctx, f + (size_t)row0 * in_dim, rows, in_dim, w);
    free(f);
    return rc;
}

/* W whole */
static int load_weight(struct kvfs_model *m, const char *name, int out_dim, int in_dim, struct kvfs_weight **w,
                       char *err, size_t errlen)
{
    return load_weight_part(m, name, 0, out_dim, out_dim, in_dim, w, err, errlen);
}

/* The n_exp slices [rows][in_dim] of a 3-D expert tensor, each a weight of
 * its own (kept encoded as load_weight_part's); a type kept as f32 is
 * decoded once for all of them, not once per expert. */
static int load_experts(struct kvfs_model *m, const char *name, int n_exp, int rows, int in_dim,
                        struct kvfs_weight ***out, char *err, size_t errlen)
{
    const struct kvfs_gguf_tensor *t = kvfs_gguf_tensor(m->gguf, name);
    float *f = NULL;
    int rc = 0;
    if (!t)
        return kvfs_errf(err, errlen, -ENOENT, "tensor %s missing", name);
    if (t->ne[0] != (uint64_t)in_dim || t->ne[1] != (uint64_t)rows || t->ne[2] != (uint64_t)n_exp || t->ne[3] != 1)
        return kvfs_errf(err, errlen, -EINVAL, "tensor %s has shape %llux%llux%llu, expected %dx%dx%d", name,
                         (unsigned long long)t->ne[0], (unsigned long long)t->ne[1], (unsigned long long)t->ne[2],
                         in_dim, rows, n_exp);
    struct kvfs_weight **w = calloc((size_t)n_exp, sizeof(*w));
    if (!w)
        return -ENOMEM;
    *out = w; /* freed with the model, whatever was loaded */
    size_t rb = kvfs_ggml_row_size(t->type, (uint64_t)in_dim), per = (size_t)rows * rb;
    for (int e = 0; e < n_exp; e++) {
        if (keep_encoded(m, t) && rb &&
            m->be.iface->weight_create_quant(m->be.ctx, t->type, t->data + (size_t)e * per, rb, rows, in_dim,
                                             &w[e]) == 0)
            continue;
        if (!f && (rc = tensor_f32(m->gguf, name, (uint64_t)in_dim, (uint64_t)rows * n_exp, &f, err, errlen)))
            goto out;
        if ((rc = m->be.iface->weight_create(m->be.ctx, f + (size_t)e * rows * in_dim, rows, in_dim, &w[e])))
            goto out;
    }
out:
    free(f);
    return rc;
}

/* The type ggml quantizes activations to before multiplying by a weight of
 * type t (its vec_dot type): 0 when it multiplies in float. */
static int act_quant_type(const struct kvfs_gguf *g, const char *name)
{
    const struct kvfs_gguf_tensor *t = kvfs_gguf_tensor(g, name);
    if (!t)
        return 0;
    switch (t->type) {
    case KVFS_GGML_Q4_0: case KVFS_GGML_Q5_0: case KVFS_GGML_Q8_0: case KVFS_GGML_MXFP4: return KVFS_GGML_Q8_0;
    case KVFS_GGML_Q4_1: case KVFS_GGML_Q5_1: return KVFS_GGML_Q8_1;
    case KVFS_GGML_Q4_K: case KVFS_GGML_Q5_K: case KVFS_GGML_Q6_K: return KVFS_GGML_Q8_K;
    default: return 0;
    }
}

/* A tensor of rows x n values decoded to f32 on the device (a vector when
 * rows is 1; gpt-oss's experts' biases: a row per expert) */
static int load_rows(struct kvfs_model *m, const char *name, int n, int rows, int optional, float **dev, char *err,
                     size_t errlen)
{
    float *f;
    if (optional && !kvfs_gguf_tensor(m->gguf, name)) {
        *dev = NULL;
        return 0;
    }
    int rc = tensor_f32(m->gguf, name, (uint64_t)n, (uint64_t)rows, &f, err, errlen);
    if (rc)
        return rc;
    size_t bytes = sizeof(float) * (size_t)n * rows;
    rc = m->be.iface->alloc(m->be.ctx, bytes, (void **)dev);
    if (!rc)
        rc = m->be.iface->upload(m->be.ctx, *dev, f, bytes);
    free(f);
    return rc;
}

static int load_vec(struct kvfs_model *m, const char *name, int n, int optional, float **dev, char *err,
                    size_t errlen)
{
    return load_rows(m, name, n, 1, optional, dev, err, errlen);
}

/* Whether layer l attends through the sliding window, as llama.cpp decides
 * (load_swa_pattern): attention.sliding_window_pattern as one bool per
 * layer, else as a number n (default n_default) making every layer local but
 * each n-th (l % n == n - 1; gemma3: 5, 11, 17, ... are global). */
static int swa_layer(const struct kvfs_gguf *g, const char *arch, int l, int n_default, int *out)
{
    char k[128];
    snprintf(k, sizeof(k), "%s.attention.sliding_window_pattern", arch);
    const struct kvfs_gguf_kv *kv = kvfs_gguf_find(g, k);
    if (kv && kv->type == KVFS_GGUF_ARRAY) {
        if (kv->arr_type != KVFS_GGUF_BOOL || (uint64_t)l >= kv->arr_len)
            return -EINVAL;
        *out = kv->data[l] != 0;
        return 0;
    }
    uint32_t n = (uint32_t)n_default;
    if (kv && kvfs_gguf_get_u32(g, k, &n))
        return -EINVAL;
    *out = n == 0 || (uint32_t)l % n < n - 1;
    return 0;
}

/* deepseek2's hyperparameters as llama.cpp's models/deepseek2.cpp reads
 * them.  The absorbed MLA form (key_length_mla and value_length_mla set:
 * what convert_hf_to_gguf.py writes, with attn_k_b and attn_v_b): the cache
 * row key_length = kv_lora_rank + n_rot, one KV head.  The unabsorbed form
 * of older files (neither key set, attn_kv_b; llama.cpp's is_mla() false):
 * head_count_kv = head_count heads of key_length = nope + n_rot, values of
 * value_length, which kvfs's chunks need = key_length - n_rot (kvfs(5),
 * V_NARROW).  Then the routing (model_check.c has checked the counts). */
static int ds2_hparams(const char *path, const struct kvfs_gguf *g, struct kvfs_hparams *hp, char *err,
                       size_t errlen)
{
    char k[128];
    int key_len = 0, val_len = 0, n_rot = 0, n_shared = 0, gating = 0, rank = 0;
    uint32_t vocab = 0;
    /* model_check.c's ds2_check, run first by the same load, has refused
     * inconsistent shapes, values narrower or wider than kvfs's chunks hold
     * and gating functions not computed */
    hp_u32(g, hp->arch, "attention.kv_lora_rank", &rank, 0);
    hp_u32(g, hp->arch, "attention.key_length_mla", &hp->mla_k, 0);
    hp_u32(g, hp->arch, "attention.value_length_mla", &hp->mla_v, 0);
    hp_u32(g, hp->arch, "attention.key_length", &key_len, 0);
    hp_u32(g, hp->arch, "attention.value_length", &val_len, 0);
    hp_u32(g, hp->arch, "rope.dimension_count", &n_rot, 0);
    if (!hp->mla_k) { /* the unabsorbed form: llama.cpp's head sizes are key_length and value_length */
        hp->mla_mha_rank = rank;
        hp->mla_k = key_len;
        hp->mla_v = val_len;
    } else {
        hp->mla_rank = rank;
    }
    if (kvfs_ds2_reads_q_lora(g, hp->arch, hp->n_layer) &&
        hp_u32(g, hp->arch, "attention.q_lora_rank", &hp->q_lora, 1))
        return kvfs_errf(err, errlen, -EINVAL, "%s: %s.attention.q_lora_rank missing", path, hp->arch);
    hp_u32(g, hp->arch, "leading_dense_block_count", &hp->n_dense_lead, 0);
    if (hp_u32(g, hp->arch, "expert_shared_count", &n_shared, 1))
        return kvfs_errf(err, errlen, -EINVAL, "%s: %s.expert_shared_count missing", path, hp->arch);
    hp->n_ff_shexp = hp->n_ff_exp * n_shared;
    hp_u32(g, hp->arch, "expert_gating_func", &gating, 0);
    snprintf(k, sizeof(k), "%s.vocab_size", hp->arch);
    if (kvfs_gguf_get_u32(g, k, &vocab)) {
        const struct kvfs_gguf_kv *kv = kvfs_gguf_find(g, "tokenizer.ggml.tokens");
        vocab = kv && kv->type == KVFS_GGUF_ARRAY ? (uint32_t)kv->arr_len : 0;
    }
    if (gating == 0) /* llama.cpp's default for files without it: sigmoid for GLM 4.7 Lite only */
        gating = (hp->n_layer == 47 || hp->n_layer == 48) && vocab == 154880 ? 2 : 1;
    hp->moe_sigmoid = gating == 2;
    hp_u32(g, hp->arch, "expert_group_count", &hp->n_group, 0); /* model_check.c checked them */
    hp_u32(g, hp->arch, "expert_group_used_count", &hp->n_group_used, 0);
    if (hp->n_group <= 1)
        hp->n_group = hp->n_group_used = 0;
    snprintf(k, sizeof(k), "%s.expert_weights_norm", hp->arch);
    kvfs_gguf_get_bool(g, k, &hp->moe_norm);
    snprintf(k, sizeof(k), "%s.expert_weights_scale", hp->arch);
    kvfs_gguf_get_f32(g, k, &hp->moe_scale);
    if (hp->n_dense_lead < 0 || hp->n_dense_lead > hp->n_layer || n_shared < 0 || !(hp->moe_scale >= 0.0f))
        return kvfs_errf(err, errlen, -EINVAL, "%s: bad %s leading_dense_block_count, expert_shared_count or "
                         "expert_weights_scale", path, hp->arch);
    hp->rope_dim = n_rot;
    return 0;
}

/* deepseek2's attention weights of layer l (model.h) */
static int load_ds2_attn(struct kvfs_model *m, int l, struct kvfs_layer_weights *L, char *err, size_t errlen)
{
    const struct kvfs_hparams *hp = &m->hp;
    char name[128];
    int rc, q_rows = hp->n_head * hp->mla_k, nope = hp->mla_k - hp->rope_dim, rank = hp->mla_rank + hp->mla_mha_rank;
#define T(s) (snprintf(name, sizeof(name), "blk.%d.%s", l, s), name)
    /* the other form of Q than the one llama.cpp reads (it would refuse the file's tensor count) */
    if (kvfs_gguf_tensor(m->gguf, T(hp->q_lora > 0 ? "attn_q.weight" : "attn_q_a.weight")))
        return kvfs_errf(err, errlen, -ENOTSUP, "tensor %s with %s.attention.q_lora_rank %d: llama.cpp does not read "
                         "it", name, hp->arch, hp->q_lora);
    if ((hp->q_lora > 0 &&
         ((rc = load_weight(m, T("attn_q_a.weight"), hp->q_lora, hp->n_embd, &L->wq_a, err, errlen)) ||
          (rc = load_vec(m, T("attn_q_a_norm.weight"), hp->q_lora, 0, &L->q_a_norm, err, errlen)) ||
          (rc = load_weight(m, T("attn_q_b.weight"), q_rows, hp->q_lora, &L->wq_b, err, errlen)))) ||
        (hp->q_lora <= 0 && (rc = load_weight(m, T("attn_q.weight"), q_rows, hp->n_embd, &L->wq, err, errlen))) ||
        (rc = load_weight(m, T("attn_kv_a_mqa.weight"), rank + hp->rope_dim, hp->n_embd, &L->wkv_a, err, errlen)) ||
        (rc = load_vec(m, T("attn_kv_a_norm.weight"), rank, 0, &L->kv_a_norm, err, errlen)) ||
        (hp->mla_rank &&
         ((rc = load_experts(m, T("attn_k_b.weight"), hp->n_head, hp->mla_rank, nope, &L->wk_b, err, errlen)) ||
          (rc = load_experts(m, T("attn_v_b.weight"), hp->n_head, hp->mla_v, hp->mla_rank, &L->wv_b, err, errlen)))) ||
        (hp->mla_mha_rank && (rc = load_weight(m, T("attn_kv_b.weight"), hp->n_head * (nope + hp->mla_v), rank,
                                               &L->wkv_b, err, errlen))))
        return rc;
    const char *lin[5] = {"attn_q_a.weight", "attn_q_b.weight", "attn_kv_a_mqa.weight", "attn_k_b.weight",
                          "attn_v_b.weight"};
    if (hp->mla_mha_rank)
        lin[3] = "attn_kv_b.weight";
    for (int k = 0; k < 5; k++)
        L->act_q_mla[k] = act_quant_type(m->gguf, T(lin[k]));
    if (hp->q_lora <= 0)
        L->act_q_mla[0] = act_quant_type(m->gguf, T("attn_q.weight"));
    return 0;
}

/* deepseek2's shared experts (one SwiGLU n_ff_shexp wide) and selection bias of layer l */
static int load_ds2_moe(struct kvfs_model *m, int l, struct kvfs_layer_weights *L, char *err, size_t errlen)
{
    const struct kvfs_hparams *hp = &m->hp;
    char name[128];
    int rc;
    if (kvfs_gguf_tensor(m->gguf, T("exp_probs_b.bias")) &&
        (rc = tensor_f32(m->gguf, name, (uint64_t)hp->n_expert, 1, &L->exp_probs_b, err, errlen)))
        return rc;
    if (hp->n_ff_shexp > 0 &&
        ((rc = load_weight(m, T("ffn_gate_shexp.weight"), hp->n_ff_shexp, hp->n_embd, &L->sh_gate, err, errlen)) ||
         (rc = load_weight(m, T("ffn_up_shexp.weight"), hp->n_ff_shexp, hp->n_embd, &L->sh_up, err, errlen)) ||
         (rc = load_weight(m, T("ffn_down_shexp.weight"), hp->n_embd, hp->n_ff_shexp, &L->sh_down, err, errlen))))
        return rc;
    static const char *lin[3] = {"ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight"};
    for (int k = 0; k < 3; k++)
        L->act_q_sh[k] = act_quant_type(m->gguf, T(lin[k]));
#undef T
    return 0;
}

/* deepseek2's YaRN (llama-context.cpp's yarn_attn_factor, ggml's
 * rope_yarn magnitude, models/deepseek2.cpp's kq_scale), in llama.cpp's
 * float operations: frequencies as rope_scaling.c's; the rotated parts' magnitude
 * to hp->mla_rope_mscale; the scale of Q.K to hp->attn_scale. */
static int ds2_yarn(const struct kvfs_gguf *g, struct kvfs_hparams *hp, float **ff)
{
    char k[128];
    float a_file = 1.0f, log_mul = 0.0f, unused;
    snprintf(k, sizeof(k), "%s.rope.scaling.attn_factor", hp->arch);
    kvfs_gguf_get_f32(g, k, &a_file);
    snprintf(k, sizeof(k), "%s.rope.scaling.yarn_log_multiplier", hp->arch);
    if (!kvfs_gguf_get_f32(g, k, &log_mul))
        log_mul /= 0.1f; /* llama.cpp cancels the converter's factor */
    struct kvfs_rope_scaling rs;
    int rc = kvfs_rope_scaling_read(g, hp->arch, hp->n_ctx_train, &rs, NULL, 0);
    if (!rc)
        rc = kvfs_rope_layer_factors(&rs, rs.freq_scale, 1, hp->rope_theta, hp->rope_dim, NULL, ff, &unused);
    if (rc)
        return rc;
    float fs = rs.freq_scale, f = 1.0f / fs; /* the factor as rope_scaling.c read it */
#define GET_MSCALE(s, ms) ((s) <= 1.0f ? 1.0f : 0.1f * (ms) * logf(s) + 1.0f)
    float af = log_mul != 0.0f ? GET_MSCALE(f, log_mul) / GET_MSCALE(f, log_mul) : GET_MSCALE(f, 1.0f);
#undef GET_MSCALE
    af *= 1.0f / (1.0f + 0.1f * logf(f));
    af *= a_file;
    float org = af * (1.0f + 0.1f * logf(1.0f / fs)); /* also the magnitude ggml's rope_yarn gives */
    float mscale = org * (1.0f + 0.1f * log_mul * logf(1.0f / fs));
    hp->mla_rope_mscale = org;
    hp->attn_scale = 1.0f * mscale * mscale / sqrtf((float)hp->mla_k);
    return 0;
}

/* model_id: SHA-256 of the GGUF tensor data section (see kvfs(5)). */
static int model_identity(const struct kvfs_gguf *g, uint8_t id[32])
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned len = 0;
    int ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) &&
             EVP_DigestUpdate(ctx, g->data, (size_t)(g->map + g->map_size - g->data)) &&
             EVP_DigestFinal_ex(ctx, id, &len);
    EVP_MD_CTX_free(ctx);
    return ok ? 0 : -EIO;
}

/* layer l's count of key (llama.cpp's get_key_or_arr): element l of an
 * array, else the one value; -EINVAL when missing or not positive */
static int layer_count(const struct kvfs_gguf *g, const char *arch, const char *key, int l, int *out)
{
    char k[128];
    snprintf(k, sizeof(k), "%s.%s", arch, key);
    const struct kvfs_gguf_kv *kv = kvfs_gguf_find(g, k);
    int32_t v = 0;
    uint32_t u = 0;
    if (kv && kv->type == KVFS_GGUF_ARRAY ? kvfs_gguf_arr_i32(kv, (uint64_t)l, &v) : kvfs_gguf_get_u32(g, k, &u))
        return -EINVAL;
    *out = kv && kv->type == KVFS_GGUF_ARRAY ? v : (int)u;
    return *out > 0 ? 0 : -EINVAL;
}

/* gemma4's hyperparameters as llama.cpp's models/gemma4.cpp and
 * load_hparams read them: heads of attention.key_length on global layers,
 * key_length_swa on local ones (value lengths equal, llama.cpp requires it),
 * RoPE on rope.dimension_count / dimension_count_swa of them (the latter's
 * default the former, as llama.cpp's), a window (required) on the layers
 * attention.sliding_window_pattern marks, their base rope.freq_base_swa
 * (default 10000); attention unscaled (Q and K are normed), V normed too;
 * per-layer embeddings of embedding_length_per_layer_input (required). */
static int gemma4_hparams(const char *path, const struct kvfs_gguf *g, struct kvfs_hparams *hp, int *head_full,
                          int *head_swa, int *rope_swa, int *n_kv_layers, char *err, size_t errlen)
{
    char k[128];
    const char *a = hp->arch;
    int v_full = hp->head_dim, v_swa, shared = 0;
    hp_u32(g, a, "attention.value_length", &v_full, 0);
    *head_swa = hp->head_dim;
    hp_u32(g, a, "attention.key_length_swa", head_swa, 0);
    v_swa = *head_swa;
    hp_u32(g, a, "attention.value_length_swa", &v_swa, 0);
    *rope_swa = hp->rope_dim;
    hp_u32(g, a, "rope.dimension_count_swa", rope_swa, 0);
    if (v_full != hp->head_dim || v_swa != *head_swa || *head_swa <= 0 || *rope_swa > *head_swa ||
        hp->rope_dim > hp->head_dim || *rope_swa % 2 || hp->rope_dim % 2)
        return kvfs_errf(err, errlen, -EINVAL, "%s: gemma4's head sizes are inconsistent (key %d, value %d, RoPE %d; "
                         "local layers: key %d, value %d, RoPE %d)", path, hp->head_dim, v_full, hp->rope_dim,
                         *head_swa, v_swa, *rope_swa);
    snprintf(k, sizeof(k), "%s.attention.sliding_window_pattern", a);
    const struct kvfs_gguf_kv *pat = kvfs_gguf_find(g, k);
    if (!pat || pat->type != KVFS_GGUF_ARRAY || pat->arr_type != KVFS_GGUF_BOOL ||
        pat->arr_len < (uint64_t)hp->n_layer)
        return kvfs_errf(err, errlen, -EINVAL, "%s: gemma4 needs %s, a bool per layer", path, k);
    if (hp_u32(g, a, "attention.sliding_window", &hp->n_swa, 1) || hp->n_swa <= 0)
        return kvfs_errf(err, errlen, -EINVAL, "%s: gemma4 needs %s.attention.sliding_window > 0", path, a);
    if (hp_u32(g, a, "embedding_length_per_layer_input", &hp->n_ple, 1) || hp->n_ple < 0)
        return kvfs_errf(err, errlen, -EINVAL, "%s: gemma4 needs %s.embedding_length_per_layer_input", path, a);
    /* per-layer KV heads and FFN widths (E2B: the shared-KV layers' FFN
     * twice as wide); hp has the largest, for buffers */
    int kvh = hp->n_kv_head;
    hp->n_ff = 0;
    hp->n_kv_head = 0;
    for (int l = 0; l < hp->n_layer; l++) {
        int ff, h = kvh;
        snprintf(k, sizeof(k), "%s.attention.head_count_kv", a);
        if (layer_count(g, a, "feed_forward_length", l, &ff) ||
            (kvfs_gguf_find(g, k) && layer_count(g, a, "attention.head_count_kv", l, &h)) || hp->n_head % h)
            return kvfs_errf(err, errlen, -EINVAL, "%s: gemma4's layer %d: bad feed_forward_length or "
                             "attention.head_count_kv", path, l);
        hp->n_ff = ff > hp->n_ff ? ff : hp->n_ff;
        hp->n_kv_head = h > hp->n_kv_head ? h : hp->n_kv_head;
    }
    hp_u32(g, a, "attention.shared_kv_layers", &shared, 0);
    *n_kv_layers = hp->n_layer - shared;
    /* llama.cpp's reuse callback asserts it (llama-model.cpp) */
    if (shared < 0 || (shared > 0 && *n_kv_layers < 2))
        return kvfs_errf(err, errlen, -EINVAL, "%s: %s.attention.shared_kv_layers = %d of %d layers", path, a, shared,
                         hp->n_layer);
    hp->rope_theta_swa = 10000.0f;
    snprintf(k, sizeof(k), "%s.rope.freq_base_swa", a);
    kvfs_gguf_get_f32(g, k, &hp->rope_theta_swa);
    snprintf(k, sizeof(k), "%s.final_logit_softcapping", a);
    kvfs_gguf_get_f32(g, k, &hp->logit_softcap);
    if (!(hp->logit_softcap >= 0.0f))
        return kvfs_errf(err, errlen, -EINVAL, "%s: bad %s", path, k);
    hp->embd_scale = sqrtf((float)hp->n_embd);
    hp->ffn_geglu = 1;
    hp->attn_scale = 1.0f; /* llama.cpp: f_attention_scale = 1 */
    hp->v_norm = 1;
    /* buffers for the widest layer */
    *head_full = hp->head_dim;
    if (*head_swa > hp->head_dim)
        hp->head_dim = *head_swa;
    hp->q_dim = hp->n_head * hp->head_dim;
    return 0;
}

/* gemma4's attention weights of layer l: Q, and K and V (V optional: K's
 * projection serves as V, llama.cpp's use_alternative_attention) unless
 * the layer reads an earlier layer's cache; per-head Q/K norms of its own
 * width; its per-layer embedding's gate, projection and norm; its output
 * scale (optional) */
static int gemma4_layer(struct kvfs_model *m, int l, struct kvfs_layer_weights *L, char *err, size_t errlen)
{
    const struct kvfs_hparams *hp = &m->hp;
    char name[128];
    int rc, qd = hp->n_head * L->head_dim, kvd = L->n_kv_head * L->head_dim, has_kv = L->kv_layer == l;
#define T(s) (snprintf(name, sizeof(name), "blk.%d.%s", l, s), name)
    if ((rc = load_weight(m, T("attn_q.weight"), qd, hp->n_embd, &L->wq, err, errlen)) ||
        (rc = load_weight(m, T("attn_output.weight"), hp->n_embd, qd, &L->wo, err, errlen)) ||
        (rc = load_vec(m, T("attn_q_norm.weight"), L->head_dim, 0, &L->attn_q_norm, err, errlen)) ||
        (has_kv && (rc = load_weight(m, T("attn_k.weight"), kvd, hp->n_embd, &L->wk, err, errlen))) ||
        (has_kv && kvfs_gguf_tensor(m->gguf, T("attn_v.weight")) &&
         (rc = load_weight(m, T("attn_v.weight"), kvd, hp->n_embd, &L->wv, err, errlen))) ||
        (has_kv && (rc = load_vec(m, T("attn_k_norm.weight"), L->head_dim, 0, &L->attn_k_norm, err, errlen))))
        return rc;
    if (hp->n_ple > 0 &&
        ((rc = load_weight(m, T("inp_gate.weight"), hp->n_ple, hp->n_embd, &L->ple_gate, err, errlen)) ||
         (rc = load_weight(m, T("proj.weight"), hp->n_embd, hp->n_ple, &L->ple_proj, err, errlen)) ||
         (rc = load_vec(m, T("post_norm.weight"), hp->n_embd, 0, &L->ple_post_norm, err, errlen))))
        return rc;
    L->act_q_ple[0] = act_quant_type(m->gguf, T("inp_gate.weight"));
    L->act_q_ple[1] = act_quant_type(m->gguf, T("proj.weight"));
    if (kvfs_gguf_tensor(m->gguf, T("layer_output_scale.weight"))) {
        float *f;
        if ((rc = tensor_f32(m->gguf, name, 1, 1, &f, err, errlen)))
            return rc;
        L->out_scale = f[0];
        free(f);
    }
#undef T
    return 0;
}

/* gemma4's per-layer embedding table (kept encoded where the backend reads
 * rows of it so, as token_embd), its projection and that's norm; a device
 * vector of ones (V's weightless norm) */
static int gemma4_globals(struct kvfs_model *m, char *err, size_t errlen)
{
    const struct kvfs_hparams *hp = &m->hp;
    const struct kvfs_backend_iface *be = m->be.iface;
    int rc, w = hp->n_layer * hp->n_ple;
    float *f = malloc(sizeof(float) * (size_t)hp->head_dim);
    if (!f)
        return -ENOMEM;
    for (int i = 0; i < hp->head_dim; i++)
        f[i] = 1.0f;
    rc = be->alloc(m->be.ctx, sizeof(float) * (size_t)hp->head_dim, (void **)&m->ones);
    if (!rc)
        rc = be->upload(m->be.ctx, m->ones, f, sizeof(float) * (size_t)hp->head_dim);
    free(f);
    if (rc || hp->n_ple == 0)
        return rc;
    const struct kvfs_gguf_tensor *t = kvfs_gguf_tensor(m->gguf, "per_layer_token_embd.weight");
    if (!(keep_encoded(m, t) && be->weight_rows &&
          load_weight(m, "per_layer_token_embd.weight", hp->n_vocab, w, &m->ple_tok_w, err, errlen) == 0)) {
        m->ple_tok_w = NULL;
        if ((rc = load_rows(m, "per_layer_token_embd.weight", w, hp->n_vocab, 0, &m->ple_tok, err, errlen)))
            return rc;
    }
    if ((rc = load_weight(m, "per_layer_model_proj.weight", w, hp->n_embd, &m->ple_model_proj, err, errlen)) ||
        (rc = load_vec(m, "per_layer_proj_norm.weight", hp->n_ple, 0, &m->ple_proj_norm, err, errlen)))
        return rc;
    m->ple_proj_act_q = act_quant_type(m->gguf, "per_layer_model_proj.weight");
    return 0;
}

/* The file's RoPE scaling (rope_scaling.c) per kind of layer, as
 * llama.cpp's graphs pick it: m->rope_freqs and hp->rope_mscale for the
 * global layers, m->rope_freqs_swa and hp->rope_mscale_swa for the
 * sliding-window ones.  Those take the model's freq scale in gemma2,
 * gpt-oss (rope_freq_scale_train_swa set to it) and phi3 (its graph uses the
 * global one), none at all in olmo2 (scale 1, no YaRN, attention factor 1),
 * and rope_freq_scale_train_swa's default 1 in gemma3 and gemma4, whose
 * local layers also have no frequency factors (gemma4's are its global
 * layers'). */
static int rope_scaling(struct kvfs_model *m, int swa_scaled, int swa_plain, int rope_dim_swa, int swa_no_factors,
                        char *err, size_t errlen)
{
    struct kvfs_hparams *hp = &m->hp;
    struct kvfs_rope_scaling rs;
    float *ff = NULL;
    int rc = kvfs_rope_scaling_read(m->gguf, hp->arch, hp->n_ctx_train, &rs, err, errlen);
    int ext = rs.type == KVFS_ROPE_SCALING_YARN;
    if (rc)
        return rc;
    if (hp->n_swa > 0) {
        struct kvfs_rope_scaling plain = rs;
        if (swa_plain)
            plain.attn_factor = 1.0f;
        if ((rc = kvfs_rope_layer_factors(swa_plain ? &plain : &rs, swa_scaled ? rs.freq_scale : 1.0f,
                                          ext && !swa_plain, hp->rope_theta_swa, rope_dim_swa,
                                          swa_no_factors ? NULL : m->rope_freqs, &m->rope_freqs_swa,
                                          &hp->rope_mscale_swa)))
            return rc;
    }
    if ((rc = kvfs_rope_layer_factors(&rs, rs.freq_scale, ext, hp->rope_theta, hp->rope_dim, m->rope_freqs, &ff,
                                      &hp->rope_mscale)))
        return rc;
    if (ff) {
        free(m->rope_freqs);
        m->rope_freqs = ff;
    }
    /* the same rotation on both kinds (gpt-oss, gemma2 on one base): one
     * array, so that the chunk shift's angle cache serves every layer */
    if (m->rope_freqs && m->rope_freqs_swa && rope_dim_swa == hp->rope_dim &&
        !memcmp(m->rope_freqs, m->rope_freqs_swa, sizeof(float) * (size_t)(hp->rope_dim / 2))) {
        free(m->rope_freqs_swa);
        m->rope_freqs_swa = NULL;
        hp->swa_rope_shared = 1;
    }
    /* 0: no magnitude to apply */
    hp->rope_mscale = hp->rope_mscale == 1.0f ? 0.0f : hp->rope_mscale;
    hp->rope_mscale_swa = hp->rope_mscale_swa == 1.0f ? 0.0f : hp->rope_mscale_swa;
    /* ggml's magnitude is on the rotated dims alone; kvfs scales whole heads */
    if ((hp->rope_mscale != 0.0f || hp->rope_mscale_swa != 0.0f) && hp->rope_dim != hp->head_dim)
        return kvfs_errf(err, errlen, -ENOTSUP, "RoPE scaling with a magnitude (%g) on %d of %d dims is not "
                         "supported yet", (double)(hp->rope_mscale != 0.0f ? hp->rope_mscale : hp->rope_mscale_swa),
                         hp->rope_dim, hp->head_dim);
    return 0;
}

int kvfs_model_load(const char *path, const char *backend, int n_threads, struct kvfs_model **out, char *err,
                    size_t errlen)
{
    struct kvfs_model *m = calloc(1, sizeof(*m));
    int rc;
    char name[128];
    if (!m)
        return -ENOMEM;
    if ((rc = kvfs_gguf_open(path, &m->gguf, err, errlen)))
        goto fail;
    struct kvfs_gguf_str arch;
    if ((rc = kvfs_gguf_get_str(m->gguf, "general.architecture", &arch))) {
        kvfs_errf(err, errlen, rc, "%s: no general.architecture", path);
        goto fail;
    }
    struct kvfs_hparams *hp = &m->hp;
    snprintf(hp->arch, sizeof(hp->arch), "%.*s", (int)(arch.len < 15 ? arch.len : 15), arch.ptr);
    int is_qwen2 = !strcmp(hp->arch, "qwen2"), is_gemma3 = !strcmp(hp->arch, "gemma3");
    int is_qwen3 = !strcmp(hp->arch, "qwen3"), is_granite = !strcmp(hp->arch, "granite");
    int is_smollm3 = !strcmp(hp->arch, "smollm3"), is_olmo2 = !strcmp(hp->arch, "olmo2");
    int is_phi3 = !strcmp(hp->arch, "phi3"), is_gemma2 = !strcmp(hp->arch, "gemma2");
    int is_qwen3moe = !strcmp(hp->arch, "qwen3moe"), is_gptoss = !strcmp(hp->arch, "gpt-oss");
    int is_ds2 = !strcmp(hp->arch, "deepseek2"), is_gemma4 = !strcmp(hp->arch, "gemma4");
    int head_full = 0, head_swa = 0, rope_swa = 0, n_kv_layers = 0; /* gemma4's */
    if ((rc = kvfs_model_arch_check(path, hp->arch, err, errlen)))
        goto fail;
    if ((rc = hp_u32(m->gguf, hp->arch, "block_count", &hp->n_layer, 1)) ||
        (rc = hp_u32(m->gguf, hp->arch, "embedding_length", &hp->n_embd, 1)) ||
        (rc = hp_u32(m->gguf, hp->arch, "attention.head_count", &hp->n_head, 1)) ||
        (rc = hp_u32(m->gguf, hp->arch, "feed_forward_length", &hp->n_ff, !is_qwen3moe && !is_gptoss && !is_gemma4))) {
        kvfs_errf(err, errlen, rc, "%s: missing hyperparameters", path);
        goto fail;
    }
    if ((rc = kvfs_model_file_check(path, m->gguf, hp->arch, hp->n_layer, err, errlen)))
        goto fail;
    /* model_check.c has checked the counts; qwen3moe: llama.cpp's default
     * width of an expert (gpt-oss, deepseek2: the file's, model_check.c
     * requires it) */
    if (is_qwen3moe || is_gptoss || is_ds2) {
        hp_u32(m->gguf, hp->arch, "expert_count", &hp->n_expert, 0);
        hp_u32(m->gguf, hp->arch, "expert_used_count", &hp->n_expert_used, 0);
        hp->moe_oai = is_gptoss;
        hp->moe_norm = is_qwen3moe; /* llama.cpp's qwen3moe renormalizes whatever the file says */
        if (hp->n_expert_used > 0 && is_qwen3moe)
            hp->n_ff_exp = hp->n_ff / hp->n_expert_used;
        hp_u32(m->gguf, hp->arch, "expert_feed_forward_length", &hp->n_ff_exp, 0);
        if (hp->n_expert <= 0 || hp->n_expert_used <= 0 || hp->n_expert_used > hp->n_expert || hp->n_ff_exp <= 0) {
            rc = kvfs_errf(err, errlen, -EINVAL, "%s: bad expert counts (%d experts, %d used, width %d)", path,
                           hp->n_expert, hp->n_expert_used, hp->n_ff_exp);
            goto fail;
        }
    }
    if (is_ds2 && (rc = ds2_hparams(path, m->gguf, hp, err, errlen)))
        goto fail;
    hp->n_kv_head = hp->n_head;
    hp_u32(m->gguf, hp->arch, "attention.head_count_kv", &hp->n_kv_head, 0);
    hp->n_ctx_train = 4096;
    hp_u32(m->gguf, hp->arch, "context_length", &hp->n_ctx_train, 0);
    /* head size: attention.key_length where given (gemma3: 256 with n_embd
     * 640 and 4 heads), else n_embd / n_head */
    hp->head_dim = hp->n_head > 0 ? hp->n_embd / hp->n_head : 0;
    snprintf(name, sizeof(name), "%s.attention.key_length", hp->arch);
    int head_dim_given = kvfs_gguf_find(m->gguf, name) != NULL;
    hp_u32(m->gguf, hp->arch, "attention.key_length", &hp->head_dim, 0);
    int v_len = hp->head_dim;
    hp_u32(m->gguf, hp->arch, "attention.value_length", &v_len, 0);
    if (hp->n_head <= 0 || hp->n_kv_head <= 0 || hp->head_dim <= 0 || hp->n_head % hp->n_kv_head ||
        (!head_dim_given && hp->n_embd % hp->n_head)) {
        rc = kvfs_errf(err, errlen, -EINVAL, "%s: inconsistent head counts", path);
        goto fail;
    }
    if (v_len != hp->head_dim && !is_ds2) { /* deepseek2: its latent, checked by ds2_hparams */
        rc = kvfs_errf(err, errlen, -ENOTSUP, "%s: value heads of %d, key heads of %d", path, v_len, hp->head_dim);
        goto fail;
    }
    hp->q_dim = hp->n_head * hp->head_dim;
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    hp->rope_dim = hp->head_dim;
    hp_u32(m->gguf, hp->arch, "rope.dimension_count", &hp->rope_dim, 0);
    if (is_ds2 && hp->mla_rank) { /* the cached row: the rotated key part, then the latent (model.h) */
        hp->head_dim = hp->rope_dim + hp->mla_rank;
        hp->q_dim = hp->n_head * hp->head_dim;
        hp->attn_scale = 1.0f / sqrtf((float)hp->mla_k); /* llama.cpp's kq_scale without YaRN */
    }
    /* llama.cpp asserts it (mistral3); gpt-oss's Q is n_head x n_rot wide */
    if ((!strcmp(hp->arch, "mistral3") || is_gptoss) && hp->rope_dim != hp->head_dim) {
        rc = kvfs_errf(err, errlen, -ENOTSUP, "%s: %s with RoPE on %d of %d dims", path, hp->arch, hp->rope_dim,
                       hp->head_dim);
        goto fail;
    }
    hp->rope_theta = 10000.0f;
    snprintf(name, sizeof(name), "%s.rope.freq_base", hp->arch);
    kvfs_gguf_get_f32(m->gguf, name, &hp->rope_theta);
    hp->rms_eps = 1e-5f;
    snprintf(name, sizeof(name), "%s.attention.layer_norm_rms_epsilon", hp->arch);
    kvfs_gguf_get_f32(m->gguf, name, &hp->rms_eps);
    /* llama GGUFs store Q/K permuted for the interleaved ("normal") rotation;
     * qwen2 and gemma3 use the NeoX halves */
    hp->rope_style = is_qwen2 || is_qwen3 || is_qwen3moe || is_gptoss || is_gemma2 || is_gemma3 || is_gemma4 ||
                             is_olmo2 || is_phi3
                         ? KVFS_ROPE_STYLE_NEOX
                         : KVFS_ROPE_STYLE_NORM;
    hp->scale_q = is_phi3; /* phi3 scales Q by 1/sqrt(head_dim) before attention (llama.cpp's phi3.cpp) */
    hp->qk_norm_full = is_olmo2;
    hp->rope_theta_swa = hp->rope_theta;
    if (is_granite) { /* llama.cpp's models/granite.cpp: four multipliers */
        snprintf(name, sizeof(name), "%s.logit_scale", hp->arch);
        if ((rc = kvfs_gguf_get_f32(m->gguf, name, &hp->logit_scale)) || hp->logit_scale == 0.0f) {
            rc = kvfs_errf(err, errlen, rc ? rc : -EINVAL, "%s: %s missing or 0", path, name);
            goto fail;
        }
        snprintf(name, sizeof(name), "%s.residual_scale", hp->arch);
        kvfs_gguf_get_f32(m->gguf, name, &hp->residual_scale);
        snprintf(name, sizeof(name), "%s.embedding_scale", hp->arch);
        kvfs_gguf_get_f32(m->gguf, name, &hp->embd_scale);
        float a = 0.0f;
        snprintf(name, sizeof(name), "%s.attention.scale", hp->arch);
        if (!kvfs_gguf_get_f32(m->gguf, name, &a) && a != 0.0f)
            hp->attn_scale = a;
    }
    if (is_olmo2) { /* sliding windows where the file has one (OLMo 3), every 4th layer global */
        hp_u32(m->gguf, hp->arch, "attention.sliding_window", &hp->n_swa, 0);
        snprintf(name, sizeof(name), "%s.rope.freq_base_swa", hp->arch);
        kvfs_gguf_get_f32(m->gguf, name, &hp->rope_theta_swa);
        if (hp->n_swa < 0) {
            rc = kvfs_errf(err, errlen, -EINVAL, "%s: bad sliding window", path);
            goto fail;
        }
    }
    if (is_gemma3) { /* the facts of llama.cpp's models/gemma3.cpp */
        hp->embd_scale = sqrtf((float)hp->n_embd);
        hp->ffn_geglu = 1;
        hp->scale_q = 1;
        if (hp->n_layer == 62) /* 27B: query_pre_attn_scalar = n_embd / n_head */
            hp->attn_scale = 1.0f / sqrtf((float)(hp->n_embd / hp->n_head));
        snprintf(name, sizeof(name), "%s.final_logit_softcapping", hp->arch);
        kvfs_gguf_get_f32(m->gguf, name, &hp->logit_softcap);
        hp_u32(m->gguf, hp->arch, "attention.sliding_window", &hp->n_swa, 0);
        /* local layers: rope.freq_base_swa, else llama.cpp's default 10000 */
        hp->rope_theta_swa = 10000.0f;
        snprintf(name, sizeof(name), "%s.rope.freq_base_swa", hp->arch);
        kvfs_gguf_get_f32(m->gguf, name, &hp->rope_theta_swa);
        if (hp->n_swa < 0 || !(hp->logit_softcap >= 0.0f)) {
            rc = kvfs_errf(err, errlen, -EINVAL, "%s: bad sliding window or logit soft-capping", path);
            goto fail;
        }
    }
    if (is_gemma4 &&
        (rc = gemma4_hparams(path, m->gguf, hp, &head_full, &head_swa, &rope_swa, &n_kv_layers, err, errlen)))
        goto fail;
    if (is_gemma2) { /* llama.cpp's models/gemma2.cpp, its defaults where the file is silent */
        hp->embd_scale = sqrtf((float)hp->n_embd);
        hp->ffn_geglu = 1;
        hp->scale_q = 1;
        if (hp->n_layer == 46) /* 27B: query_pre_attn_scalar = n_embd / n_head */
            hp->attn_scale = 1.0f / sqrtf((float)(hp->n_embd / hp->n_head));
        hp->attn_softcap = 50.0f;
        hp->logit_softcap = 30.0f;
        snprintf(name, sizeof(name), "%s.attn_logit_softcapping", hp->arch);
        kvfs_gguf_get_f32(m->gguf, name, &hp->attn_softcap);
        snprintf(name, sizeof(name), "%s.final_logit_softcapping", hp->arch);
        kvfs_gguf_get_f32(m->gguf, name, &hp->logit_softcap);
        hp->n_swa = 4096; /* every other layer local (swa_layer's default pattern 2) */
        hp_u32(m->gguf, hp->arch, "attention.sliding_window", &hp->n_swa, 0);
        snprintf(name, sizeof(name), "%s.rope.freq_base_swa", hp->arch);
        kvfs_gguf_get_f32(m->gguf, name, &hp->rope_theta_swa);
        /* llama.cpp divides by both caps unconditionally: 0 would be NaN */
        if (hp->n_swa <= 0 || !(hp->attn_softcap > 0.0f) || !(hp->logit_softcap > 0.0f)) {
            rc = kvfs_errf(err, errlen, -EINVAL, "%s: bad sliding window or soft-capping", path);
            goto fail;
        }
    }
    if (is_ds2) { /* deepseek2's YaRN as llama.cpp computes it: the frequencies as the others' (rope_scaling.c),
                   * the magnitude ggml's rope gives the rotated parts, and the attention scale
                   * (models/deepseek2.cpp's mscale, with rope.scaling.yarn_log_multiplier) */
        struct kvfs_gguf_str st;
        snprintf(name, sizeof(name), "%s.rope.scaling.type", hp->arch);
        if (!kvfs_gguf_get_str(m->gguf, name, &st) && st.len == 4 && !memcmp(st.ptr, "yarn", 4) &&
            (rc = ds2_yarn(m->gguf, hp, &m->rope_freqs)))
            goto fail;
    }
    if (is_gptoss) { /* llama.cpp's models/openai-moe.cpp: a window (required) on every other layer, its RoPE
                      * base rope.freq_base_swa where given, else the global one; scale 1/sqrt(head_dim) */
        hp_u32(m->gguf, hp->arch, "attention.sliding_window", &hp->n_swa, 0);
        snprintf(name, sizeof(name), "%s.rope.freq_base_swa", hp->arch);
        kvfs_gguf_get_f32(m->gguf, name, &hp->rope_theta_swa);
        if (hp->n_swa <= 0) {
            rc = kvfs_errf(err, errlen, -EINVAL, "%s: gpt-oss needs %s.attention.sliding_window > 0", path, hp->arch);
            goto fail;
        }
    }
    /* Llama 3.1-style RoPE frequency factors (checked by model_check.c):
     * host values each rope call and the chunk shift divide their angles
     * by, as ggml's rope_ext */
    if (kvfs_gguf_tensor(m->gguf, "rope_freqs.weight") &&
        (rc = tensor_f32(m->gguf, "rope_freqs.weight", (uint64_t)(hp->rope_dim / 2), 1, &m->rope_freqs, err, errlen)))
        goto fail;
    {
        char why[256] = "";
        if (!is_ds2 && (rc = rope_scaling(m, is_gemma2 || is_gptoss || is_phi3, is_olmo2,
                                          is_gemma4 ? rope_swa : hp->rope_dim, is_gemma4, why, sizeof(why)))) {
            kvfs_errf(err, errlen, rc, "%s: %s", path, why);
            goto fail;
        }
    }
    const struct kvfs_gguf_tensor *te = kvfs_gguf_tensor(m->gguf, "token_embd.weight");
    if (!te) {
        rc = kvfs_errf(err, errlen, -EINVAL, "%s: token_embd.weight missing", path);
        goto fail;
    }
    hp->n_vocab = (int)te->ne[1];

    if ((rc = kvfs_backend_init_by_name(backend, n_threads, &m->be))) {
        kvfs_errf(err, errlen, rc, "backend '%s' unavailable: %s", backend ? backend : "auto", strerror(-rc));
        goto fail;
    }
    const struct kvfs_backend_iface *be = m->be.iface;
    if (((hp->embd_scale != 0.0f || hp->residual_scale != 0.0f || hp->rope_mscale != 0.0f || hp->rope_mscale_swa != 0.0f ||
          hp->mla_rope_mscale != 0.0f) && !be->scale) || (hp->ffn_geglu && !be->geglu) ||
        (hp->n_expert && !be->mul_rows) || (is_ds2 && (!be->gather_rows || !be->scatter_rows)) ||
        /* deepseek2's strided gathers and offset rotations, gemma4's layers of two head widths and per-layer
         * embeddings, are checked on the CPU backend only; KVFS_ALLOW_UNCHECKED=1 lets the device check
         * (tests/gpu/arch_cuda.sh) try them on another backend */
        ((is_ds2 || is_gemma4) && strcmp(be->name, "cpu") && !allow_unchecked()) ||
        (is_gptoss && (!be->attention_sinks || !be->attn_mass_sinks || !be->swiglu_oai))) {
        rc = kvfs_errf(err, errlen, -ENOTSUP,
                       "%s: the %s backend lacks the ops %s needs (scale, geglu, mul_rows, attention_sinks, "
                       "attn_mass_sinks, swiglu_oai; deepseek2, gemma4: the CPU backend only, not checked on others "
                       "yet)",
                       path, be->name, hp->arch);
        goto fail;
    }
    float *emb;
    /* the embedding table kept encoded too, read a row per token (and the
     * output projection when tied to it) */
    if (keep_encoded(m, te) && be->weight_rows &&
        load_weight(m, "token_embd.weight", hp->n_vocab, hp->n_embd, &m->tok_embd_w, err, errlen) == 0 &&
        !kvfs_gguf_tensor(m->gguf, "output.weight"))
        m->output = m->tok_embd_w;
    if (m->tok_embd_w)
        goto output;
    if ((rc = tensor_f32(m->gguf, "token_embd.weight", (uint64_t)hp->n_embd, (uint64_t)hp->n_vocab, &emb, err,
                         errlen)))
        goto fail;
    size_t emb_bytes = sizeof(float) * (size_t)hp->n_vocab * hp->n_embd;
    rc = be->alloc(m->be.ctx, emb_bytes, (void **)&m->tok_embd);
    if (!rc)
        rc = be->upload(m->be.ctx, m->tok_embd, emb, emb_bytes);
    if (!rc && !kvfs_gguf_tensor(m->gguf, "output.weight")) /* tied embeddings */
        rc = be->weight_create(m->be.ctx, emb, hp->n_vocab, hp->n_embd, &m->output);
    free(emb);
    if (rc)
        goto fail;
output:
    if (!m->output && (rc = load_weight(m, "output.weight", hp->n_vocab, hp->n_embd, &m->output, err, errlen)))
        goto fail;
    if ((rc = load_vec(m, "output_norm.weight", hp->n_embd, 0, &m->output_norm, err, errlen)))
        goto fail;
    m->layers = calloc((size_t)hp->n_layer, sizeof(*m->layers));
    if (!m->layers) {
        rc = -ENOMEM;
        goto fail;
    }
    if (is_gemma4 && (rc = gemma4_globals(m, err, errlen)))
        goto fail;
    int kv_dim = hp->n_kv_head * hp->head_dim;
    for (int l = 0; l < hp->n_layer; l++) {
        struct kvfs_layer_weights *L = &m->layers[l];
        L->n_ff = hp->n_ff;
        L->n_kv_head = hp->n_kv_head;
        /* gemma4: its own width (gemma4_hparams has checked the counts) */
        if (is_gemma4 && (rc = layer_count(m->gguf, hp->arch, "feed_forward_length", l, &L->n_ff)))
            goto fail;
        /* deepseek2: its leading layers dense */
        int moe_layer = hp->n_expert && l >= hp->n_dense_lead;
#define T(s) (snprintf(name, sizeof(name), "blk.%d.%s", l, s), name)
        /* a dense FFN's tensor where llama.cpp reads the experts', or the other way round */
        if (is_ds2 && kvfs_gguf_tensor(m->gguf, T(moe_layer ? "ffn_gate.weight" : "ffn_gate_inp.weight"))) {
            rc = kvfs_errf(err, errlen, -ENOTSUP, "%s: tensor %s in a layer llama.cpp computes with %s (%s."
                           "leading_dense_block_count = %d)", path, name, moe_layer ? "experts" : "a dense FFN",
                           hp->arch, hp->n_dense_lead);
            goto fail;
        }
        /* olmo2 normalizes after its sublayers, not before */
        /* gpt-oss: post_attention_norm is the FFN's input norm (of the
         * residual sum), in ffn_norm's place */
        if ((!is_olmo2 && (rc = load_vec(m, T("attn_norm.weight"), hp->n_embd, 0, &L->attn_norm, err, errlen))) ||
            (!is_olmo2 && (rc = load_vec(m, T(is_gptoss ? "post_attention_norm.weight" : "ffn_norm.weight"),
                                         hp->n_embd, 0, &L->ffn_norm, err, errlen))) ||
            (is_phi3 && /* fused: Q, K, V rows one after the other */
             ((rc = load_weight_part(m, T("attn_qkv.weight"), 0, hp->q_dim, hp->q_dim + 2 * kv_dim, hp->n_embd, &L->wq,
                                     err, errlen)) ||
              (rc = load_weight_part(m, T("attn_qkv.weight"), hp->q_dim, kv_dim, hp->q_dim + 2 * kv_dim, hp->n_embd,
                                     &L->wk, err, errlen)) ||
              (rc = load_weight_part(m, T("attn_qkv.weight"), hp->q_dim + kv_dim, kv_dim, hp->q_dim + 2 * kv_dim,
                                     hp->n_embd, &L->wv, err, errlen)))) ||
            (!is_phi3 && !is_ds2 && !is_gemma4 &&
             (rc = load_weight(m, T("attn_q.weight"), hp->q_dim, hp->n_embd, &L->wq, err, errlen))) ||
            (!is_phi3 && !is_ds2 && !is_gemma4 &&
             (rc = load_weight(m, T("attn_k.weight"), kv_dim, hp->n_embd, &L->wk, err, errlen))) ||
            (!is_phi3 && !is_ds2 && !is_gemma4 &&
             (rc = load_weight(m, T("attn_v.weight"), kv_dim, hp->n_embd, &L->wv, err, errlen))) ||
            (is_ds2 && (rc = load_ds2_attn(m, l, L, err, errlen))) ||
            (!is_gemma4 &&
             (rc = load_weight(m, T("attn_output.weight"), hp->n_embd, is_ds2 ? hp->n_head * hp->mla_v : hp->q_dim,
                               &L->wo, err, errlen))) ||
            (rc = load_vec(m, T("attn_q.bias"), hp->q_dim, 1, &L->bq, err, errlen)) ||
            (rc = load_vec(m, T("attn_k.bias"), kv_dim, 1, &L->bk, err, errlen)) ||
            (rc = load_vec(m, T("attn_v.bias"), kv_dim, 1, &L->bv, err, errlen)) ||
            (is_phi3 && /* fused: the gate's rows, then the up projection's (ggml_swiglu's halves) */
             ((rc = load_weight_part(m, T("ffn_up.weight"), 0, hp->n_ff, 2 * hp->n_ff, hp->n_embd, &L->w_gate, err,
                                     errlen)) ||
              (rc = load_weight_part(m, T("ffn_up.weight"), hp->n_ff, hp->n_ff, 2 * hp->n_ff, hp->n_embd, &L->w_up,
                                     err, errlen)))) ||
            (!is_phi3 && !moe_layer &&
             (rc = load_weight(m, T("ffn_gate.weight"), L->n_ff, hp->n_embd, &L->w_gate, err, errlen))) ||
            (!is_phi3 && !moe_layer &&
             (rc = load_weight(m, T("ffn_up.weight"), L->n_ff, hp->n_embd, &L->w_up, err, errlen))) ||
            (!moe_layer &&
             (rc = load_weight(m, T("ffn_down.weight"), hp->n_embd, L->n_ff, &L->w_down, err, errlen))))
            goto fail;
        /* qwen3moe: the router, and the experts one weight each so that a
         * routed row meets the same products a dense FFN's row would */
        if (moe_layer &&
            ((rc = load_weight(m, T("ffn_gate_inp.weight"), hp->n_expert, hp->n_embd, &L->ffn_gate_inp, err,
                               errlen)) ||
             (rc = load_experts(m, T("ffn_gate_exps.weight"), hp->n_expert, hp->n_ff_exp, hp->n_embd, &L->exp_gate,
                                err, errlen)) ||
             (rc = load_experts(m, T("ffn_up_exps.weight"), hp->n_expert, hp->n_ff_exp, hp->n_embd, &L->exp_up, err,
                                errlen)) ||
             (rc = load_experts(m, T("ffn_down_exps.weight"), hp->n_expert, hp->n_embd, hp->n_ff_exp, &L->exp_down,
                                err, errlen))))
            goto fail;
        /* llama, granite, mistral3: the biases llama.cpp's graphs take
         * where a file has them (the output projection's, the FFN's) */
        if ((!strcmp(hp->arch, "llama") || is_granite || !strcmp(hp->arch, "mistral3")) &&
            ((rc = load_vec(m, T("attn_output.bias"), hp->n_embd, 1, &L->bo, err, errlen)) ||
             (rc = load_vec(m, T("ffn_gate.bias"), L->n_ff, 1, &L->ffn_gate_b, err, errlen)) ||
             (rc = load_vec(m, T("ffn_up.bias"), L->n_ff, 1, &L->ffn_up_b, err, errlen)) ||
             (rc = load_vec(m, T("ffn_down.bias"), hp->n_embd, 1, &L->ffn_down_b, err, errlen))))
            goto fail;
        /* gpt-oss: its sinks, the output projection's bias, the router's
         * and the experts' */
        if (is_gptoss &&
            ((rc = load_vec(m, T("attn_sinks.weight"), hp->n_head, 0, &L->attn_sinks, err, errlen)) ||
             (rc = load_vec(m, T("attn_output.bias"), hp->n_embd, 0, &L->bo, err, errlen)) ||
             (rc = load_vec(m, T("ffn_gate_inp.bias"), hp->n_expert, 0, &L->ffn_gate_inp_b, err, errlen)) ||
             (rc = load_rows(m, T("ffn_gate_exps.bias"), hp->n_ff_exp, hp->n_expert, 0, &L->exp_gate_b, err,
                             errlen)) ||
             (rc = load_rows(m, T("ffn_up_exps.bias"), hp->n_ff_exp, hp->n_expert, 0, &L->exp_up_b, err, errlen)) ||
             (rc = load_rows(m, T("ffn_down_exps.bias"), hp->n_embd, hp->n_expert, 0, &L->exp_down_b, err,
                             errlen))))
            goto fail;
        if (moe_layer && is_ds2 && (rc = load_ds2_moe(m, l, L, err, errlen)))
            goto fail;
        if (moe_layer) {
            static const char *moe[4] = {"ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight",
                                         "ffn_down_exps.weight"};
            for (int k = 0; k < 4; k++)
                L->act_q_moe[k] = act_quant_type(m->gguf, T(moe[k]));
        }
        /* gemma3 and qwen3: each head's Q and K RMS-normed before RoPE */
        if ((is_gemma3 || is_qwen3 || is_qwen3moe) &&
            ((rc = load_vec(m, T("attn_q_norm.weight"), hp->head_dim, 0, &L->attn_q_norm, err, errlen)) ||
             (rc = load_vec(m, T("attn_k_norm.weight"), hp->head_dim, 0, &L->attn_k_norm, err, errlen))))
            goto fail;
        /* olmo2: Q and K normed across the heads */
        if (is_olmo2 &&
            ((rc = load_vec(m, T("attn_q_norm.weight"), hp->q_dim, 0, &L->attn_q_norm, err, errlen)) ||
             (rc = load_vec(m, T("attn_k_norm.weight"), kv_dim, 0, &L->attn_k_norm, err, errlen))))
            goto fail;
        if ((is_gemma2 || is_gemma3 || is_gemma4 || is_olmo2) &&
            ((rc = load_vec(m, T("post_attention_norm.weight"), hp->n_embd, 0, &L->attn_post_norm, err, errlen)) ||
             (rc = load_vec(m, T("post_ffw_norm.weight"), hp->n_embd, 0, &L->ffn_post_norm, err, errlen))))
            goto fail;
        int local = 0;
        if (hp->n_swa > 0 &&
            (rc = swa_layer(m->gguf, hp->arch, l, is_olmo2 ? 4 : is_gemma2 || is_gptoss ? 2 : 6, &local))) {
            kvfs_errf(err, errlen, rc, "%s: bad %s.attention.sliding_window_pattern", path, hp->arch);
            goto fail;
        }
        L->window = local ? hp->n_swa : 0;
        L->rope_theta = local ? hp->rope_theta_swa : hp->rope_theta;
        L->head_dim = hp->head_dim;
        L->rope_dim = hp->rope_dim;
        L->rope_freqs = local && !hp->swa_rope_shared ? m->rope_freqs_swa : m->rope_freqs;
        L->rope_mscale = local ? hp->rope_mscale_swa : hp->rope_mscale;
        L->kv_layer = l;
        if (is_gemma4) { /* llama.cpp: frequency factors on the global layers; a shared-KV layer reads the cache
                          * of the last local or global layer with one (llama-model.cpp's reuse callback) */
            L->head_dim = local ? head_swa : head_full;
            L->rope_dim = local ? rope_swa : hp->rope_dim;

            snprintf(name, sizeof(name), "%s.attention.head_count_kv", hp->arch);
            if (kvfs_gguf_find(m->gguf, name))
                layer_count(m->gguf, hp->arch, "attention.head_count_kv", l, &L->n_kv_head);
            if (l >= n_kv_layers) {
                int src_local = 0;
                L->kv_layer = n_kv_layers - (local ? 2 : 1);
                L->n_kv_head = m->layers[L->kv_layer].n_kv_head; /* the cache it reads has its source's heads */
                swa_layer(m->gguf, hp->arch, L->kv_layer, 0, &src_local);
                if (src_local != local) {
                    rc = kvfs_errf(err, errlen, -EINVAL, "%s: shared-KV layer %d (%s) would read layer %d's cache "
                                   "(%s)", path, l, local ? "local" : "global", L->kv_layer,
                                   src_local ? "local" : "global");
                    goto fail;
                }
            }
            if ((rc = gemma4_layer(m, l, L, err, errlen)))
                goto fail;
        }
        L->no_rope = is_smollm3 && (l + 1) % 4 == 0; /* llama.cpp's n_no_rope_layer_step */
        static const char *lin[7] = {"attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
                                     "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"};
        static const char *phi3_lin[7] = {"attn_qkv.weight", "attn_qkv.weight", "attn_qkv.weight",
                                          "attn_output.weight", "ffn_up.weight", "ffn_up.weight", "ffn_down.weight"};
        for (int k = 0; k < 7; k++)
            L->act_q[k] = act_quant_type(m->gguf, T((is_phi3 ? phi3_lin : lin)[k]));
#undef T
    }
    m->output_act_q = act_quant_type(m->gguf, kvfs_gguf_tensor(m->gguf, "output.weight") ? "output.weight"
                                                                                         : "token_embd.weight");
    m->ggml_compat = 1;
    struct kvfs_fingerprint *fp = &m->fp;
    fp->n_layer = (uint32_t)hp->n_layer;
    fp->n_kv_head = (uint32_t)hp->n_kv_head;
    fp->head_dim = (uint32_t)hp->head_dim;
    fp->rope_type = hp->rope_style == KVFS_ROPE_STYLE_NEOX ? KVFS_ROPE_NEOX : KVFS_ROPE_NORM;
    fp->rope_theta = hp->rope_theta;
    fp->rope_dim = (uint32_t)hp->rope_dim;
    memcpy(fp->arch, hp->arch, sizeof(fp->arch));
    fp->n_head = (uint32_t)hp->n_head;
    fp->n_embd = (uint32_t)hp->n_embd;
    if ((rc = model_identity(m->gguf, fp->model_id)))
        goto fail;
    *out = m;
    return 0;
fail:
    kvfs_model_free(m);
    return rc;
}

int kvfs_model_view(const struct kvfs_model *m, struct kvfs_model **out)
{
    struct kvfs_model *v = malloc(sizeof(*v));
    if (!v)
        return -ENOMEM;
    *v = *m;
    int rc = kvfs_backend_init_by_name(m->be.iface->name, 0, &v->be);
    if (rc) {
        free(v);
        return rc;
    }
    v->view_of = m;
    *out = v;
    return 0;
}

void kvfs_model_free(struct kvfs_model *m)
{
    if (!m)
        return;
    if (m->view_of) { /* the weights are the model's it views */
        kvfs_backend_free(&m->be);
        free(m);
        return;
    }
    if (m->be.iface) {
        const struct kvfs_backend_iface *be = m->be.iface;
        void *c = m->be.ctx;
        if (m->layers) {
            for (int l = 0; l < m->hp.n_layer; l++) {
                struct kvfs_layer_weights *L = &m->layers[l];
                be->free(c, L->attn_norm);
                be->free(c, L->ffn_norm);
                be->free(c, L->bq);
                be->free(c, L->bk);
                be->free(c, L->bv);
                be->free(c, L->attn_q_norm);
                be->free(c, L->attn_k_norm);
                be->free(c, L->attn_post_norm);
                be->free(c, L->ffn_post_norm);
                be->free(c, L->attn_sinks);
                be->free(c, L->bo);
                be->free(c, L->ffn_gate_b);
                be->free(c, L->ffn_up_b);
                be->free(c, L->ffn_down_b);
                be->free(c, L->ffn_gate_inp_b);
                be->free(c, L->exp_gate_b);
                be->free(c, L->exp_up_b);
                be->free(c, L->exp_down_b);
                be->free(c, L->q_a_norm);
                be->free(c, L->kv_a_norm);
                free(L->exp_probs_b);
                be->weight_free(c, L->wq_a);
                be->weight_free(c, L->wq_b);
                be->weight_free(c, L->wkv_a);
                be->weight_free(c, L->wkv_b);
                be->weight_free(c, L->sh_gate);
                be->weight_free(c, L->sh_up);
                be->weight_free(c, L->sh_down);
                for (int h = 0; h < m->hp.n_head; h++) {
                    if (L->wk_b)
                        be->weight_free(c, L->wk_b[h]);
                    if (L->wv_b)
                        be->weight_free(c, L->wv_b[h]);
                }
                free(L->wk_b);
                free(L->wv_b);
                be->weight_free(c, L->wq);
                be->weight_free(c, L->wk);
                be->weight_free(c, L->wv);
                be->weight_free(c, L->wo);
                be->weight_free(c, L->w_gate);
                be->weight_free(c, L->w_up);
                be->weight_free(c, L->w_down);
                be->weight_free(c, L->ple_gate);
                be->weight_free(c, L->ple_proj);
                be->free(c, L->ple_post_norm);
                be->weight_free(c, L->ffn_gate_inp);
                for (int e = 0; e < m->hp.n_expert; e++) {
                    if (L->exp_gate)
                        be->weight_free(c, L->exp_gate[e]);
                    if (L->exp_up)
                        be->weight_free(c, L->exp_up[e]);
                    if (L->exp_down)
                        be->weight_free(c, L->exp_down[e]);
                }
                free(L->exp_gate);
                free(L->exp_up);
                free(L->exp_down);
            }
        }
        be->free(c, m->tok_embd);
        be->free(c, m->output_norm);
        be->free(c, m->ple_tok);
        be->free(c, m->ple_proj_norm);
        be->free(c, m->ones);
        be->weight_free(c, m->ple_tok_w);
        be->weight_free(c, m->ple_model_proj);
        if (m->tok_embd_w != m->output)
            be->weight_free(c, m->tok_embd_w);
        be->weight_free(c, m->output);
        kvfs_backend_free(&m->be);
    }
    free(m->rope_freqs);
    free(m->rope_freqs_swa);
    free(m->layers);
    kvfs_gguf_close(m->gguf);
    free(m);
}
