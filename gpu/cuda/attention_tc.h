// attention_tc.h - flash attention on the tensor cores (attention_tc.cu):
// the backend's attention op (backend.h's semantics) for head dims 64, 128
// and 256, with f16 inputs and f32 sums; sinks (device f32[n_head], gpt-oss's)
// or NULL as backend.h's attention_sinks.
#ifndef KVFS_ATTENTION_TC_H
#define KVFS_ATTENTION_TC_H

#include <cuda_runtime.h>
#include <stdint.h>

// shared memory a block takes at head_dim (0: not a head dim it has)
size_t attn_tc_smem(int head_dim);

cudaError_t attn_tc(cudaStream_t s, int head_dim, const float *q, const int32_t *q_pos, int n_q, const float *k,
                    const float *v, const int32_t *kv_pos, int n_kv, int n_head, int n_kv_head, float scale,
                    int window, float softcap, const float *sinks, float *out);

#endif
