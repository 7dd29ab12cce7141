/* rope_scaling.c - linear and YaRN RoPE scaling in llama.cpp's float
 * operations (llama-model.cpp, llama-context.cpp, ggml's rope_yarn), turned
 * into per-layer frequency factors and a magnitude: what every rotation of
 * kvfs (the chunk shift's included) takes. */
#include "rope_scaling.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "log.h" /* kvfs_errf */

/* ggml's defaults; llama.cpp reads no beta keys from a GGUF */
#define YARN_BETA_FAST 32.0f
#define YARN_BETA_SLOW 1.0f

static int str_is(const struct kvfs_gguf_str *s, const char *v)
{
    return s->len == strlen(v) && !memcmp(s->ptr, v, s->len);
}

int kvfs_rope_scaling_read(const struct kvfs_gguf *g, const char *arch, int n_ctx_train, struct kvfs_rope_scaling *s,
                           char *err, size_t errlen)
{
    char k[160];
    struct kvfs_gguf_str st;
    float factor = 0.0f, attn = 1.0f;
    uint32_t u;
    *s = (struct kvfs_rope_scaling){KVFS_ROPE_SCALING_LINEAR, 1.0f, 1.0f, n_ctx_train};
    snprintf(k, sizeof(k), "%s.rope.scaling.type", arch);
    if (!kvfs_gguf_get_str(g, k, &st)) {
        if (str_is(&st, "none"))
            s->type = KVFS_ROPE_SCALING_NONE;
        else if (str_is(&st, "yarn"))
            s->type = KVFS_ROPE_SCALING_YARN;
        else if (!str_is(&st, "linear"))
            return kvfs_errf(err, errlen, -ENOTSUP, "RoPE scaling '%.*s' (%s) is not supported yet",
                             (int)(st.len < 32 ? st.len : 32), st.ptr, k);
    }
    snprintf(k, sizeof(k), "%s.rope.scaling.factor", arch);
    if (kvfs_gguf_get_f32(g, k, &factor)) { /* llama.cpp's old key name */
        snprintf(k, sizeof(k), "%s.rope.scale_linear", arch);
        kvfs_gguf_get_f32(g, k, &factor);
    }
    if (!(factor >= 0.0f) || isinf(factor) || (factor > 0.0f && factor < 1e-6f))
        return kvfs_errf(err, errlen, -EINVAL, "%s = %g: a RoPE scaling factor must be >= 0", k, (double)factor);
    snprintf(k, sizeof(k), "%s.rope.scaling.attn_factor", arch);
    kvfs_gguf_get_f32(g, k, &attn);
    if (!(attn > 0.0f) || isinf(attn))
        return kvfs_errf(err, errlen, -EINVAL, "%s = %g: must be > 0", k, (double)attn);
    snprintf(k, sizeof(k), "%s.rope.scaling.original_context_length", arch);
    if (!kvfs_gguf_get_u32(g, k, &u) && u > 0)
        s->n_ctx_orig = (int)u;
    /* cparams: "never scale if scaling type is none" */
    s->freq_scale = factor == 0.0f || s->type == KVFS_ROPE_SCALING_NONE ? 1.0f : 1.0f / factor;
    if (s->type == KVFS_ROPE_SCALING_YARN) { /* cparams.yarn_attn_factor with ext_factor 1 (no log multiplier:
                                              * llama.cpp reads it for deepseek2 alone, model.c's ds2_yarn) */
        float f = 1.0f / s->freq_scale;
        s->attn_factor = f <= 1.0f ? 1.0f : 0.1f * logf(f) + 1.0f;
        s->attn_factor *= 1.0f / (1.0f + 0.1f * logf(f));
    }
    s->attn_factor *= attn;
    return 0;
}

int kvfs_rope_layer_factors(const struct kvfs_rope_scaling *s, float freq_scale, int ext, float base, int rope_dim,
                            const float *ff_in, float **ff, float *mscale)
{
    int half = rope_dim / 2;
    *ff = NULL;
    *mscale = s->attn_factor;
    if (ext) /* rope_yarn: with ext_factor != 0 the magnitude grows with the interpolation */
        *mscale *= 1.0f + 0.1f * logf(1.0f / freq_scale);
    if (freq_scale == 1.0f && !ff_in)
        return 0;
    /* ggml_rope_yarn_corr_dims: the pairs between which the ramp runs */
    float lo = 0.0f, hi = 0.0f;
    if (ext) {
        lo = floorf((float)rope_dim * logf((float)s->n_ctx_orig / (YARN_BETA_FAST * 2 * (float)M_PI)) /
                    (2 * logf(base)));
        hi = ceilf((float)rope_dim * logf((float)s->n_ctx_orig / (YARN_BETA_SLOW * 2 * (float)M_PI)) /
                   (2 * logf(base)));
        lo = lo > 0 ? lo : 0;
        hi = hi < (float)(rope_dim - 1) ? hi : (float)(rope_dim - 1);
    }
    float *f = malloc(sizeof(float) * (size_t)(half > 0 ? half : 1));
    if (!f)
        return -ENOMEM;
    for (int j = 0; j < half; j++) {
        float mix = 0.0f; /* rope_yarn_ramp at i0 = 2j, times ext_factor 1 */
        if (ext) {
            float y = ((float)j - lo) / (hi - lo > 0.001f ? hi - lo : 0.001f);
            mix = 1 - (y < 0 ? 0 : y > 1 ? 1 : y);
        }
        /* theta = theta_extrap * (freq_scale * (1 - mix) + mix), theta_extrap = pos * base^(-2j/d) / ff_in[j] */
        f[j] = (ff_in ? ff_in[j] : 1.0f) / (freq_scale * (1 - mix) + mix);
    }
    *ff = f;
    return 0;
}
