/* RoPE scaling as llama.cpp applies it: the file's rope.scaling.* keys
 * (llama-model.cpp's hparams), the context's derived factors
 * (llama-context.cpp's cparams) and ggml's rope_yarn per layer. */
#ifndef KVFS_ROPE_SCALING_H
#define KVFS_ROPE_SCALING_H

#include <stddef.h>

struct kvfs_gguf;

enum kvfs_rope_scaling_type { KVFS_ROPE_SCALING_NONE, KVFS_ROPE_SCALING_LINEAR, KVFS_ROPE_SCALING_YARN };

struct kvfs_rope_scaling {
    int type;          /* enum kvfs_rope_scaling_type */
    float freq_scale;  /* 1 / rope.scaling.factor (or the old rope.scale_linear); 1: unscaled */
    float attn_factor; /* cparams.yarn_attn_factor: YaRN's magnitude correction times rope.scaling.attn_factor */
    int n_ctx_orig;    /* rope.scaling.original_context_length, else the training context */
};

/* Read ARCH's scaling keys as llama.cpp does (a missing type is "linear",
 * as there); -ENOTSUP naming the key for a type it does not compute here
 * (longrope), -EINVAL for a bad factor. */
int kvfs_rope_scaling_read(const struct kvfs_gguf *g, const char *arch, int n_ctx_train, struct kvfs_rope_scaling *s,
                           char *err, size_t errlen);

/* One layer's rotation under the scaling: that layer's freq scale and
 * whether YaRN's ramp applies (llama.cpp's graphs pick them per layer), its
 * RoPE base and rotated dims, the file's frequency factors for it (NULL:
 * none).  Every angle stays linear in the position, so the result is
 * frequency factors *ff (pair j's angle divided by ff[j], as ggml's
 * rope_ext takes them; NULL when all are 1 and ff_in is NULL; else
 * malloc'd) and the magnitude ggml's cos and sin carry (*mscale; 1: none). */
int kvfs_rope_layer_factors(const struct kvfs_rope_scaling *s, float freq_scale, int ext, float base, int rope_dim,
                            const float *ff_in, float **ff, float *mscale);

#endif
