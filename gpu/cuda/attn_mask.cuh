// attn_mask.cuh - attention's mask by position and its scores' soft-capping,
// one definition for every CUDA kernel (backend.h's, the CPU reference's): a
// key at kp is seen by a query at qp when kp <= qp and, on a sliding-window
// layer (window > 0), qp - kp < window.  Computed in 64 bits, so a missing
// query row's INT_MIN sees nothing.
#ifndef KVFS_ATTN_MASK_CUH
#define KVFS_ATTN_MASK_CUH

#include <limits.h>
#include <stdint.h>

__device__ __forceinline__ bool kv_seen(int32_t kp, int32_t qp, int window)
{
    return kp <= qp && !(window > 0 && (long long)kp <= (long long)qp - window);
}

// Gemma 2's soft-capping of a scaled score (softcap > 0), as ggml: s * (1 /
// cap), tanhf, times cap; applied to seen keys only (tanh(-inf) is -1)
__device__ __forceinline__ float attn_softcap(float s, float softcap)
{
    return softcap > 0.0f ? tanhf(s * (1.0f / softcap)) * softcap : s;
}

// the smallest and largest of p[0 .. n)
__device__ __forceinline__ void pos_span(const int32_t *p, int n, int32_t *lo, int32_t *hi)
{
    *lo = INT_MAX;
    *hi = INT_MIN;
    for (int i = 0; i < n; i++) {
        *lo = min(*lo, p[i]);
        *hi = max(*hi, p[i]);
    }
}

// No query with a position in [qmin, qmax] sees a key in [kmin, kmax]: the
// tile is past every query, or before every query's window.  The same answer
// in every thread of a block that reads the same spans.
__device__ __forceinline__ bool kv_tile_unseen(int32_t kmin, int32_t kmax, int32_t qmin, int32_t qmax, int window)
{
    return kmin > qmax || (window > 0 && (long long)kmax <= (long long)qmin - window);
}

// 1 / the softmax's denominator for a row whose online softmax ended at max
// m and sum l (the keys' exponentials less m), with one more logit, a head's
// sink (gpt-oss; -INFINITY: none), in the max and the sum but with no value:
// ggml's soft_max_ext with sinks.  Times the row's accumulator: its output.
// A row that saw nothing stays 0, sink or not, as the CPU backend's.
__device__ __forceinline__ float sink_inv(float m, float l, float sink)
{
    if (!(l > 0.0f))
        return 0.0f;
    if (sink == -INFINITY)
        return 1.0f / l;
    float m2 = fmaxf(m, sink), c = expf(m - m2); /* the keys' terms rescaled to the larger max */
    return c / (l * c + expf(sink - m2));
}

#endif
