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

// Keys split over several blocks per query tile (few query rows, many keys):
// n_split runs of split_keys keys each, their partial results in scratch.
struct attn_tc_split {
    int n_split, split_keys;
    float *part_o, *part_ml;
};
#define ATTN_TC_MAX_SPLIT 16
#define ATTN_TC_SPLIT_BYTES ((size_t)256 << 20) /* the most scratch a split may take */

// How many runs to split n_kv keys into on a device of n_sm multiprocessors
// (1: unsplit), and the device scratch that takes (bytes).
int attn_tc_split_plan(int head_dim, int n_q, int n_head, int n_kv, int n_sm, size_t *scratch_bytes);
// the plan's split over a scratch of attn_tc_split_plan's size
void attn_tc_split_at(struct attn_tc_split *sp, int n_split, int head_dim, int n_q, int n_head, int n_kv,
                      float *scratch);

// split: NULL or one run, unsplit
cudaError_t attn_tc(cudaStream_t s, int head_dim, const float *q, const int32_t *q_pos, int n_q, const float *k,
                    const float *v, const int32_t *kv_pos, int n_kv, int n_head, int n_kv_head, float scale,
                    int window, float softcap, const float *sinks, float *out, const struct attn_tc_split *split);

#endif
