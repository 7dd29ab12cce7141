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

/* gpt-oss's YaRN RoPE scaling as llama.cpp computes it (llama-context.cpp's
 * cparams, ggml's rope_yarn): ext_factor 1, beta_fast 32, beta_slow 1 (its
 * defaults; the file's yarn keys are not read), freq_scale 1 / factor,
 * n_ctx_orig rope.scaling.original_context_length else context_length.
 * Pair j's angle pos * theta_j * (freq_scale * (1 - ramp_j) + ramp_j) is
 * linear in pos, so it goes in as frequency factors ff[j] (angle divided
 * by it: what every rotation of kvfs, the chunk shift's included, takes);
 * the magnitude scale of ggml's cos and sin goes to *mscale. */
static int yarn_factors(const struct kvfs_gguf *g, struct kvfs_hparams *hp, float **ff, float *mscale)
{
    char k[128];
    float factor = 0.0f, attn = 1.0f;
    int n_ctx_orig = hp->n_ctx_train;
    snprintf(k, sizeof(k), "%s.rope.scaling.factor", hp->arch);
    kvfs_gguf_get_f32(g, k, &factor);
    snprintf(k, sizeof(k), "%s.rope.scaling.attn_factor", hp->arch);
    kvfs_gguf_get_f32(g, k, &attn);
    hp_u32(g, hp->arch, "rope.scaling.original_context_length", &n_ctx_orig, 0);
    float fs = factor == 0.0f ? 1.0f : 1.0f / factor, scale = 1.0f / fs;
    /* cparams.yarn_attn_factor: get_mscale(factor, 1) / (1 + 0.1 ln factor) * rope_attn_factor */
    float a = scale <= 1.0f ? 1.0f : 0.1f * logf(scale) + 1.0f;
    a *= 1.0f / (1.0f + 0.1f * logf(scale));
    a *= attn;
    *mscale = a * (1.0f + 0.1f * logf(1.0f / fs)); /* rope_yarn, ext_factor != 0 */
    int d = hp->rope_dim;
    float lo = floorf((float)d * logf((float)n_ctx_orig / (32.0f * 2 * (float)M_PI)) / (2 * logf(hp->rope_theta)));
    float hi = ceilf((float)d * logf((float)n_ctx_orig / (1.0f * 2 * (float)M_PI)) / (2 * logf(hp->rope_theta)));
    lo = lo > 0 ? lo : 0;
    hi = hi < (float)(d - 1) ? hi : (float)(d - 1);
    float *f = malloc(sizeof(float) * (size_t)(d / 2));
    if (!f)
        return -ENOMEM;
    for (int j = 0; j < d / 2; j++) {
        float y = ((float)j - lo) / (hi - lo > 0.001f ? hi - lo : 0.001f); /* rope_yarn_ramp at i0 = 2j */
        float ramp = 1 - (y < 0 ? 0 : y > 1 ? 1 : y);
        f[j] = 1.0f / (fs * (1 - ramp) + ramp);
    }
    *ff = f;
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
    if ((rc = kvfs_model_arch_check(path, hp->arch, err, errlen)))
        goto fail;
    if ((rc = hp_u32(m->gguf, hp->arch, "block_count", &hp->n_layer, 1)) ||
        (rc = hp_u32(m->gguf, hp->arch, "embedding_length", &hp->n_embd, 1)) ||
        (rc = hp_u32(m->gguf, hp->arch, "attention.head_count", &hp->n_head, 1)) ||
        (rc = hp_u32(m->gguf, hp->arch, "feed_forward_length", &hp->n_ff, !is_qwen3moe && !is_gptoss))) {
        kvfs_errf(err, errlen, rc, "%s: missing hyperparameters", path);
        goto fail;
    }
    if ((rc = kvfs_model_file_check(path, m->gguf, hp->arch, hp->n_layer, err, errlen)))
        goto fail;
    if (is_qwen3moe || is_gptoss) { /* model_check.c has checked the counts; qwen3moe: llama.cpp's default width
                                     * of an expert (gpt-oss: the file's, model_check.c requires it) */
        hp_u32(m->gguf, hp->arch, "expert_count", &hp->n_expert, 0);
        hp_u32(m->gguf, hp->arch, "expert_used_count", &hp->n_expert_used, 0);
        hp->moe_oai = is_gptoss;
        if (hp->n_expert_used > 0 && is_qwen3moe)
            hp->n_ff_exp = hp->n_ff / hp->n_expert_used;
        hp_u32(m->gguf, hp->arch, "expert_feed_forward_length", &hp->n_ff_exp, 0);
        if (hp->n_expert <= 0 || hp->n_expert_used <= 0 || hp->n_expert_used > hp->n_expert || hp->n_ff_exp <= 0) {
            rc = kvfs_errf(err, errlen, -EINVAL, "%s: bad expert counts (%d experts, %d used, width %d)", path,
                           hp->n_expert, hp->n_expert_used, hp->n_ff_exp);
            goto fail;
        }
    }
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
    if (v_len != hp->head_dim) {
        rc = kvfs_errf(err, errlen, -ENOTSUP, "%s: value heads of %d, key heads of %d", path, v_len, hp->head_dim);
        goto fail;
    }
    hp->q_dim = hp->n_head * hp->head_dim;
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    hp->rope_dim = hp->head_dim;
    hp_u32(m->gguf, hp->arch, "rope.dimension_count", &hp->rope_dim, 0);
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
    hp->rope_style = is_qwen2 || is_qwen3 || is_qwen3moe || is_gptoss || is_gemma2 || is_gemma3 || is_olmo2 || is_phi3
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
    if (is_gptoss) { /* llama.cpp's models/openai-moe.cpp: a window (required) on every other layer, its RoPE
                      * base rope.freq_base_swa where given, else the global one; scale 1/sqrt(head_dim) */
        hp_u32(m->gguf, hp->arch, "attention.sliding_window", &hp->n_swa, 0);
        snprintf(name, sizeof(name), "%s.rope.freq_base_swa", hp->arch);
        kvfs_gguf_get_f32(m->gguf, name, &hp->rope_theta_swa);
        if (hp->n_swa <= 0) {
            rc = kvfs_errf(err, errlen, -EINVAL, "%s: gpt-oss needs %s.attention.sliding_window > 0", path, hp->arch);
            goto fail;
        }
        struct kvfs_gguf_str st;
        snprintf(name, sizeof(name), "%s.rope.scaling.type", hp->arch);
        if (!kvfs_gguf_get_str(m->gguf, name, &st) && st.len == 4 && !memcmp(st.ptr, "yarn", 4) &&
            (rc = yarn_factors(m->gguf, hp, &m->rope_freqs, &hp->rope_mscale)))
            goto fail;
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
    if (((hp->embd_scale != 0.0f || hp->residual_scale != 0.0f || hp->rope_mscale != 0.0f) && !be->scale) || (hp->ffn_geglu && !be->geglu) ||
        (hp->n_expert && !be->mul_rows) ||
        (is_gptoss && (!be->attention_sinks || !be->attn_mass_sinks || !be->swiglu_oai))) {
        rc = kvfs_errf(err, errlen, -ENOTSUP,
                       "%s: the %s backend lacks the ops %s needs (scale, geglu, mul_rows, attention_sinks, "
                       "attn_mass_sinks, swiglu_oai)", path, be->name, hp->arch);
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
    /* Llama 3.1-style RoPE frequency factors (checked by model_check.c):
     * host values each rope call and the chunk shift divide their angles
     * by, as ggml's rope_ext */
    if (kvfs_gguf_tensor(m->gguf, "rope_freqs.weight") &&
        (rc = tensor_f32(m->gguf, "rope_freqs.weight", (uint64_t)(hp->rope_dim / 2), 1, &m->rope_freqs, err, errlen)))
        goto fail;
    m->layers = calloc((size_t)hp->n_layer, sizeof(*m->layers));
    if (!m->layers) {
        rc = -ENOMEM;
        goto fail;
    }
    int kv_dim = hp->n_kv_head * hp->head_dim;
    for (int l = 0; l < hp->n_layer; l++) {
        struct kvfs_layer_weights *L = &m->layers[l];
#define T(s) (snprintf(name, sizeof(name), "blk.%d.%s", l, s), name)
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
            (!is_phi3 && (rc = load_weight(m, T("attn_q.weight"), hp->q_dim, hp->n_embd, &L->wq, err, errlen))) ||
            (!is_phi3 && (rc = load_weight(m, T("attn_k.weight"), kv_dim, hp->n_embd, &L->wk, err, errlen))) ||
            (!is_phi3 && (rc = load_weight(m, T("attn_v.weight"), kv_dim, hp->n_embd, &L->wv, err, errlen))) ||
            (rc = load_weight(m, T("attn_output.weight"), hp->n_embd, hp->q_dim, &L->wo, err, errlen)) ||
            (rc = load_vec(m, T("attn_q.bias"), hp->q_dim, 1, &L->bq, err, errlen)) ||
            (rc = load_vec(m, T("attn_k.bias"), kv_dim, 1, &L->bk, err, errlen)) ||
            (rc = load_vec(m, T("attn_v.bias"), kv_dim, 1, &L->bv, err, errlen)) ||
            (is_phi3 && /* fused: the gate's rows, then the up projection's (ggml_swiglu's halves) */
             ((rc = load_weight_part(m, T("ffn_up.weight"), 0, hp->n_ff, 2 * hp->n_ff, hp->n_embd, &L->w_gate, err,
                                     errlen)) ||
              (rc = load_weight_part(m, T("ffn_up.weight"), hp->n_ff, hp->n_ff, 2 * hp->n_ff, hp->n_embd, &L->w_up,
                                     err, errlen)))) ||
            (!is_phi3 && !hp->n_expert &&
             (rc = load_weight(m, T("ffn_gate.weight"), hp->n_ff, hp->n_embd, &L->w_gate, err, errlen))) ||
            (!is_phi3 && !hp->n_expert &&
             (rc = load_weight(m, T("ffn_up.weight"), hp->n_ff, hp->n_embd, &L->w_up, err, errlen))) ||
            (!hp->n_expert &&
             (rc = load_weight(m, T("ffn_down.weight"), hp->n_embd, hp->n_ff, &L->w_down, err, errlen))))
            goto fail;
        /* qwen3moe: the router, and the experts one weight each so that a
         * routed row meets the same products a dense FFN's row would */
        if (hp->n_expert &&
            ((rc = load_weight(m, T("ffn_gate_inp.weight"), hp->n_expert, hp->n_embd, &L->ffn_gate_inp, err,
                               errlen)) ||
             (rc = load_experts(m, T("ffn_gate_exps.weight"), hp->n_expert, hp->n_ff_exp, hp->n_embd, &L->exp_gate,
                                err, errlen)) ||
             (rc = load_experts(m, T("ffn_up_exps.weight"), hp->n_expert, hp->n_ff_exp, hp->n_embd, &L->exp_up, err,
                                errlen)) ||
             (rc = load_experts(m, T("ffn_down_exps.weight"), hp->n_expert, hp->n_embd, hp->n_ff_exp, &L->exp_down,
                                err, errlen))))
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
        if (hp->n_expert) {
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
        if ((is_gemma2 || is_gemma3 || is_olmo2) &&
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
                be->free(c, L->ffn_gate_inp_b);
                be->free(c, L->exp_gate_b);
                be->free(c, L->exp_up_b);
                be->free(c, L->exp_down_b);
                be->weight_free(c, L->wq);
                be->weight_free(c, L->wk);
                be->weight_free(c, L->wv);
                be->weight_free(c, L->wo);
                be->weight_free(c, L->w_gate);
                be->weight_free(c, L->w_up);
                be->weight_free(c, L->w_down);
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
        if (m->tok_embd_w != m->output)
            be->weight_free(c, m->tok_embd_w);
        be->weight_free(c, m->output);
        kvfs_backend_free(&m->be);
    }
    free(m->rope_freqs);
    free(m->layers);
    kvfs_gguf_close(m->gguf);
    free(m);
}
