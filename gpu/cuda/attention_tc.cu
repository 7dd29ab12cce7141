// attention_tc.cu - flash attention on the tensor cores (FlashAttention-2's
// loop): a block takes 64 query rows of one head, 4 warps of 16 rows each;
// key tiles of 64 go through shared memory as f16, S = Q.K^T and O += P.V are
// WMMA products (f16 in, f32 sums), the online softmax runs in f32 between
// them, and O lives in shared memory in f32 so each row can be rescaled (a
// WMMA accumulator's element-to-row map is not specified).  No n_q x n_kv
// matrix exists anywhere.  Masks by position, as the CPU reference: kv row j
// is seen by query i when kv_pos[j] <= q_pos[i] and, on a sliding-window layer,
// q_pos[i] - kv_pos[j] < window; positions may be in any order (a blend's
// scattered rows).  Inputs are rounded to f16 (Q after the scale; K and V are
// f16 values already where llama.cpp's f16 cache is emulated), so results
// agree with the f32 kernels to about 1e-3 (gpu_test_backend_ops' bound).
#include <limits.h>
#include <math.h>
#include <mma.h>

#include "attention_tc.h"
#include "attn_mask.cuh"

using namespace nvcuda;

#define TQ 64  /* query rows per block */
#define TK 64  /* keys per tile */
#define WARPS 4 /* 16 query rows each */

template <int D> struct tc_layout {
    static constexpr int QLD = D + 8, SLD = TK + 4, PLD = TK + 8, OLD = D + 4; /* padded row strides */
    static constexpr size_t q_off = 0;
    static constexpr size_t k_off = q_off + sizeof(__half) * TQ * QLD;
    static constexpr size_t v_off = k_off + sizeof(__half) * TK * QLD;
    static constexpr size_t s_off = v_off + sizeof(__half) * TK * QLD;
    static constexpr size_t p_off = s_off + sizeof(float) * TQ * SLD;
    static constexpr size_t o_off = p_off + sizeof(__half) * TQ * PLD;
    static constexpr size_t bytes = o_off + sizeof(float) * TQ * OLD;
};

template <int D>
__global__ void __launch_bounds__(32 * WARPS)
k_flash_tc(const float *q, const int32_t *q_pos, int n_q, const float *k, const float *v, const int32_t *kv_pos,
           int n_kv, int n_head, int n_kv_head, float scale, int window, float softcap, const float *sinks, float *out)
{
    typedef tc_layout<D> Lay;
    extern __shared__ __align__(128) unsigned char smem[];
    __half *qs = (__half *)(smem + Lay::q_off), *ks = (__half *)(smem + Lay::k_off), *vs = (__half *)(smem + Lay::v_off);
    float *ss = (float *)(smem + Lay::s_off), *os = (float *)(smem + Lay::o_off);
    __half *ps = (__half *)(smem + Lay::p_off);
    __shared__ float row_m[TQ], row_l[TQ];
    __shared__ int32_t qp_s[TQ], kp_s[TK];
    const int h = blockIdx.y, kh = h / (n_head / n_kv_head), i0 = blockIdx.x * TQ;
    const int t = threadIdx.x, w = t / 32, lane = t % 32;
    const size_t qstride = (size_t)n_head * D, kstride = (size_t)n_kv_head * D;
    for (int e = t; e < TQ * D; e += 32 * WARPS) {
        int r = e / D, d = e % D;
        float x = i0 + r < n_q ? q[(size_t)(i0 + r) * qstride + (size_t)h * D + d] * scale : 0.0f;
        qs[r * Lay::QLD + d] = __float2half_rn(x);
        os[r * Lay::OLD + d] = 0.0f;
    }
    if (t < TQ) {
        qp_s[t] = i0 + t < n_q ? q_pos[i0 + t] : INT_MIN; /* a missing row sees nothing */
        row_m[t] = -INFINITY;
        row_l[t] = 0.0f;
    }
    __syncthreads();
    int32_t qmin, qmax;
    pos_span(qp_s, min(TQ, n_q - i0), &qmin, &qmax);
    for (int j0 = 0; j0 < n_kv; j0 += TK) {
        __syncthreads(); /* the previous tile is read no more */
        if (t < TK)
            kp_s[t] = j0 + t < n_kv ? kv_pos[j0 + t] : INT_MAX;
        __syncthreads();
        int32_t kmin, kmax;
        pos_span(kp_s, min(TK, n_kv - j0), &kmin, &kmax);
        if (kv_tile_unseen(kmin, kmax, qmin, qmax, window))
            continue;
        for (int e = t; e < TK * D; e += 32 * WARPS) {
            int jj = e / D, d = e % D, j = j0 + jj;
            bool in = j < n_kv;
            ks[jj * Lay::QLD + d] = __float2half_rn(in ? k[(size_t)j * kstride + (size_t)kh * D + d] : 0.0f);
            vs[jj * Lay::QLD + d] = __float2half_rn(in ? v[(size_t)j * kstride + (size_t)kh * D + d] : 0.0f);
        }
        __syncthreads();
        /* S[16 rows of this warp][64] = Q . K^T */
        {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[TK / 16];
#pragma unroll
            for (int n = 0; n < TK / 16; n++)
                wmma::fill_fragment(acc[n], 0.0f);
#pragma unroll
            for (int d0 = 0; d0 < D; d0 += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
                wmma::load_matrix_sync(a, qs + (w * 16) * Lay::QLD + d0, Lay::QLD);
#pragma unroll
                for (int n = 0; n < TK / 16; n++) {
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b;
                    wmma::load_matrix_sync(b, ks + (n * 16) * Lay::QLD + d0, Lay::QLD);
                    wmma::mma_sync(acc[n], a, b, acc[n]);
                }
            }
#pragma unroll
            for (int n = 0; n < TK / 16; n++)
                wmma::store_matrix_sync(ss + (w * 16) * Lay::SLD + n * 16, acc[n], Lay::SLD, wmma::mem_row_major);
        }
        __syncwarp();
        /* online softmax of the warp's rows, two keys a lane; O rescaled */
        for (int rr = 0; rr < 16; rr++) {
            int r = w * 16 + rr;
            int32_t qp = qp_s[r];
            float s2[2], tmax = -INFINITY;
#pragma unroll
            for (int u = 0; u < 2; u++) {
                int c = lane + 32 * u;
                int32_t kp = kp_s[c];
                bool seen = j0 + c < n_kv && kv_seen(kp, qp, window);
                s2[u] = seen ? attn_softcap(ss[r * Lay::SLD + c], softcap) : -INFINITY;
                tmax = fmaxf(tmax, s2[u]);
            }
            for (int off = 16; off > 0; off >>= 1)
                tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, off));
            float m_old = row_m[r], m_new = fmaxf(m_old, tmax);
            float corr = m_old == -INFINITY ? 0.0f : expf(m_old - m_new), psum = 0.0f;
#pragma unroll
            for (int u = 0; u < 2; u++) {
                float p = s2[u] == -INFINITY ? 0.0f : expf(s2[u] - m_new);
                ps[r * Lay::PLD + lane + 32 * u] = __float2half_rn(p);
                psum += p;
            }
            for (int off = 16; off > 0; off >>= 1)
                psum += __shfl_xor_sync(0xffffffffu, psum, off);
            for (int d = lane; d < D; d += 32)
                os[r * Lay::OLD + d] *= corr;
            __syncwarp(); /* every lane has read row_m[r] */
            if (lane == 0) {
                row_m[r] = m_new;
                row_l[r] = row_l[r] * corr + psum;
            }
        }
        __syncwarp();
        /* O[16 rows][D] += P . V */
#pragma unroll
        for (int d0 = 0; d0 < D; d0 += 16) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> o;
            wmma::load_matrix_sync(o, os + (w * 16) * Lay::OLD + d0, Lay::OLD, wmma::mem_row_major);
#pragma unroll
            for (int k0 = 0; k0 < TK; k0 += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b;
                wmma::load_matrix_sync(a, ps + (w * 16) * Lay::PLD + k0, Lay::PLD);
                wmma::load_matrix_sync(b, vs + k0 * Lay::QLD + d0, Lay::QLD);
                wmma::mma_sync(o, a, b, o);
            }
            wmma::store_matrix_sync(os + (w * 16) * Lay::OLD + d0, o, Lay::OLD, wmma::mem_row_major);
        }
    }
    __syncthreads();
    for (int e = t; e < TQ * D; e += 32 * WARPS) {
        int r = e / D, d = e % D;
        if (i0 + r < n_q) {
            float l = row_l[r], o = os[r * Lay::OLD + d];
            /* gpt-oss's sink joins the denominator only (attn_mask.cuh) */
            out[(size_t)(i0 + r) * qstride + (size_t)h * D + d] =
                sinks ? o * sink_inv(row_m[r], l, sinks[h]) : l > 0.0f ? o / l : 0.0f;
        }
    }
}

template <int D>
static cudaError_t launch(cudaStream_t s, const float *q, const int32_t *q_pos, int n_q, const float *k,
                          const float *v, const int32_t *kv_pos, int n_kv, int n_head, int n_kv_head, float scale,
                          int window, float softcap, const float *sinks, float *out)
{
    size_t smem = tc_layout<D>::bytes;
    static int smem_set; /* the attribute is the kernel's, process-wide: set once (setting it twice is harmless) */
    if (!__atomic_load_n(&smem_set, __ATOMIC_ACQUIRE)) {
        cudaError_t e = cudaFuncSetAttribute(k_flash_tc<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess)
            return e;
        __atomic_store_n(&smem_set, 1, __ATOMIC_RELEASE);
    }
    dim3 grid((unsigned)((n_q + TQ - 1) / TQ), (unsigned)n_head);
    k_flash_tc<D><<<grid, 32 * WARPS, smem, s>>>(q, q_pos, n_q, k, v, kv_pos, n_kv, n_head, n_kv_head, scale, window,
                                                 softcap, sinks, out);
    return cudaGetLastError();
}

size_t attn_tc_smem(int head_dim)
{
    switch (head_dim) {
    case 64: return tc_layout<64>::bytes + 1024; /* + the static row stats and positions */
    case 128: return tc_layout<128>::bytes + 1024;
    case 256: return tc_layout<256>::bytes + 1024;
    default: return 0;
    }
}

cudaError_t attn_tc(cudaStream_t s, int head_dim, const float *q, const int32_t *q_pos, int n_q, const float *k,
                    const float *v, const int32_t *kv_pos, int n_kv, int n_head, int n_kv_head, float scale,
                    int window, float softcap, const float *sinks, float *out)
{
    if (n_q <= 0)
        return cudaSuccess;
    switch (head_dim) {
    case 64:
        return launch<64>(s, q, q_pos, n_q, k, v, kv_pos, n_kv, n_head, n_kv_head, scale, window, softcap, sinks, out);
    case 128:
        return launch<128>(s, q, q_pos, n_q, k, v, kv_pos, n_kv, n_head, n_kv_head, scale, window, softcap, sinks, out);
    case 256:
        return launch<256>(s, q, q_pos, n_q, k, v, kv_pos, n_kv, n_head, n_kv_head, scale, window, softcap, sinks, out);
    default: return cudaErrorInvalidValue;
    }
}
