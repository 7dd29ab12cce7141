/* gelu.h - ggml's GELU, tanh form, in f32: what the CPU backend's and the
 * CUDA backend's GEGLU tables (every f16 value) are both made of. */
#ifndef KVFS_GELU_H
#define KVFS_GELU_H

float kvfs_gelu_tanh(float x);

#endif
