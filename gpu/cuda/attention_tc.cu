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
//
// Few query rows over a long context (a blend's question pass: 32 rows over
// 3,104 keys make 32 blocks on a GPU with room for ~260) would leave most of
// the device idle while each block walks every key tile in turn.  Then the
// keys are split (FlashDecoding's split-KV): blocks of one query tile take
// disjoint runs of key tiles, each leaves its rows' unnormalized O and their
// softmax max and sum in a scratch buffer, and k_flash_tc_combine rescales
// the runs to the largest max and sums them.
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
           int n_kv, int n_head, int n_kv_head, float scale, int window, float softcap, const float *sinks, float *out,
           int split_keys, float *part_o, float *part_ml)
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
    /* this block's run of keys: all of them, or split z's (a multiple of TK) */
    const int j_begin = part_o ? (int)blockIdx.z * split_keys : 0;
    const int j_end = part_o ? min(n_kv, j_begin + split_keys) : n_kv;
    for (int j0 = j_begin; j0 < j_end; j0 += TK) {
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
    if (part_o) { /* a run of a split: O unnormalized, the row's max and sum beside it */
        const size_t run = (size_t)blockIdx.z * n_q;
        for (int e = t; e < TQ * D; e += 32 * WARPS) {
            int r = e / D, d = e % D;
            if (i0 + r < n_q)
                part_o[((run + i0 + r) * n_head + h) * D + d] = os[r * Lay::OLD + d];
        }
        if (t < TQ && i0 + t < n_q) {
            part_ml[((run + i0 + t) * n_head + h) * 2] = row_m[t];
            part_ml[((run + i0 + t) * n_head + h) * 2 + 1] = row_l[t];
        }
        return;
    }
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

/* one block per (query row, head), a thread per output element: the runs
 * rescaled to their largest max (a run that saw nothing has max -inf and
 * weighs 0), summed, and normalized as the unsplit kernel normalizes */
__global__ void k_flash_tc_combine(const float *part_o, const float *part_ml, int n_split, int n_q, int n_head,
                                   int head_dim, const float *sinks, float *out)
{
    const int i = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
    float m = -INFINITY;
    for (int z = 0; z < n_split; z++)
        m = fmaxf(m, part_ml[(((size_t)z * n_q + i) * n_head + h) * 2]);
    float l = 0.0f, o = 0.0f;
    for (int z = 0; z < n_split; z++) {
        size_t at = ((size_t)z * n_q + i) * n_head + h;
        float mz = part_ml[at * 2];
        if (mz == -INFINITY)
            continue;
        float c = expf(mz - m);
        l += part_ml[at * 2 + 1] * c;
        o += part_o[at * head_dim + d] * c;
    }
    out[((size_t)i * n_head + h) * head_dim + d] = sinks ? o * sink_inv(m, l, sinks[h]) : l > 0.0f ? o / l : 0.0f;
}

/* the current device (the attribute and the occupancy are per device: a
 * process may drive two kinds of GPU); 0 where it cannot be told */
#define TC_DEVICES 16
static int tc_device(void)
{
    int d = 0;
    if (cudaGetDevice(&d) != cudaSuccess || d < 0 || d >= TC_DEVICES) {
        cudaGetLastError();
        d = 0;
    }
    return d;
}

/* the kernel at D may take its shared memory (over the default 48 KiB) */
template <int D> static cudaError_t allow_smem(void)
{
    static int smem_set[TC_DEVICES]; /* set once per device (setting it twice is harmless) */
    int dev = tc_device();
    if (!__atomic_load_n(&smem_set[dev], __ATOMIC_ACQUIRE)) {
        cudaError_t e = cudaFuncSetAttribute(k_flash_tc<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)tc_layout<D>::bytes);
        if (e != cudaSuccess)
            return e;
        __atomic_store_n(&smem_set[dev], 1, __ATOMIC_RELEASE);
    }
    return cudaSuccess;
}

/* blocks of the kernel at D one multiprocessor holds at once (0: unknown) */
template <int D> static int blocks_per_sm(void)
{
    static int per[TC_DEVICES]; /* the kernel's on each device */
    int dev = tc_device();
    int got = __atomic_load_n(&per[dev], __ATOMIC_ACQUIRE);
    if (got)
        return got;
    if (allow_smem<D>() != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&got, k_flash_tc<D>, 32 * WARPS, tc_layout<D>::bytes) !=
            cudaSuccess ||
        got < 1) {
        cudaGetLastError();
        return 0;
    }
    __atomic_store_n(&per[dev], got, __ATOMIC_RELEASE);
    return got;
}

template <int D>
static cudaError_t launch(cudaStream_t s, const float *q, const int32_t *q_pos, int n_q, const float *k,
                          const float *v, const int32_t *kv_pos, int n_kv, int n_head, int n_kv_head, float scale,
                          int window, float softcap, const float *sinks, float *out, const struct attn_tc_split *split)
{
    size_t smem = tc_layout<D>::bytes;
    cudaError_t e = allow_smem<D>();
    if (e != cudaSuccess)
        return e;
    const int q_tiles = (n_q + TQ - 1) / TQ, n_split = split ? split->n_split : 1;
    if (n_split <= 1) {
        dim3 grid((unsigned)q_tiles, (unsigned)n_head);
        k_flash_tc<D><<<grid, 32 * WARPS, smem, s>>>(q, q_pos, n_q, k, v, kv_pos, n_kv, n_head, n_kv_head, scale,
                                                     window, softcap, sinks, out, 0, NULL, NULL);
        return cudaGetLastError();
    }
    dim3 grid((unsigned)q_tiles, (unsigned)n_head, (unsigned)n_split);
    k_flash_tc<D><<<grid, 32 * WARPS, smem, s>>>(q, q_pos, n_q, k, v, kv_pos, n_kv, n_head, n_kv_head, scale, window,
                                                 softcap, sinks, out, split->split_keys, split->part_o, split->part_ml);
    e = cudaGetLastError();
    if (e != cudaSuccess)
        return e;
    k_flash_tc_combine<<<dim3((unsigned)n_q, (unsigned)n_head), D, 0, s>>>(split->part_o, split->part_ml, n_split, n_q,
                                                                             n_head, D, sinks, out);
    return cudaGetLastError();
}

/* The split that finishes first by a simple model, in tile-times (one
 * block's work on one key tile): blocks run in waves of (multiprocessors x
 * blocks each holds), a block takes its run's tiles; a split adds the
 * combine's launch (about a tile) and its scratch, written and read again
 * (~20 MB of it cost a tile-time: an H200's ~13 us tile, 2026-11-28's
 * figures, at ~3 TB/s), and is bounded.  A causal prefill is costed as if
 * every tile were whole (about half are skipped), so a long one may come out
 * split (700 rows x 32 heads: 3 runs on an H200); bench/device.sh's A/B
 * against KVFS_CUDA_ATTN_SPLIT=0 says whether that costs time. */
#define SCRATCH_BYTES_PER_TILE 20e6
template <int D> static int pick_split(int n_q, int n_head, int n_kv, int n_sm)
{
    int per = blocks_per_sm<D>();
    if (per <= 0 || n_sm <= 0)
        return 1;
    long long slots = (long long)n_sm * per, base = (long long)((n_q + TQ - 1) / TQ) * n_head;
    int tiles = (n_kv + TK - 1) / TK, best = 1;
    double best_cost = (double)((base + slots - 1) / slots * tiles);
    size_t run_bytes = sizeof(float) * (size_t)n_q * n_head * (D + 2);
    for (int z = 2; z <= ATTN_TC_MAX_SPLIT && z <= tiles / 2; z++) {
        if (run_bytes * (size_t)z > ATTN_TC_SPLIT_BYTES)
            break;
        int per_run = (tiles + z - 1) / z;
        double cost = (double)((base * z + slots - 1) / slots * per_run) + 1.0 +
                      2.0 * (double)run_bytes * z / SCRATCH_BYTES_PER_TILE;
        if (cost < best_cost) {
            best_cost = cost;
            best = z;
        }
    }
    return best;
}

int attn_tc_split_plan(int head_dim, int n_q, int n_head, int n_kv, int n_sm, size_t *scratch_bytes)
{
    int z = 1;
    switch (head_dim) {
    case 64: z = pick_split<64>(n_q, n_head, n_kv, n_sm); break;
    case 128: z = pick_split<128>(n_q, n_head, n_kv, n_sm); break;
    case 256: z = pick_split<256>(n_q, n_head, n_kv, n_sm); break;
    default: break;
    }
    *scratch_bytes = z > 1 ? sizeof(float) * (size_t)z * n_q * n_head * (head_dim + 2) : 0;
    return z;
}

void attn_tc_split_at(struct attn_tc_split *sp, int n_split, int head_dim, int n_q, int n_head, int n_kv, float *scratch)
{
    int tiles = (n_kv + TK - 1) / TK, per_run = (tiles + n_split - 1) / n_split;
    sp->n_split = (tiles + per_run - 1) / per_run; /* no empty last run (scratch for n_split is enough) */
    sp->split_keys = per_run * TK;
    sp->part_o = scratch;
    sp->part_ml = scratch + (size_t)n_split * n_q * n_head * head_dim;
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
                    int window, float softcap, const float *sinks, float *out, const struct attn_tc_split *split)
{
    if (n_q <= 0)
        return cudaSuccess;
    switch (head_dim) {
    case 64:
        return launch<64>(s, q, q_pos, n_q, k, v, kv_pos, n_kv, n_head, n_kv_head, scale, window, softcap, sinks, out,
                          split);
    case 128:
        return launch<128>(s, q, q_pos, n_q, k, v, kv_pos, n_kv, n_head, n_kv_head, scale, window, softcap, sinks, out,
                           split);
    case 256:
        return launch<256>(s, q, q_pos, n_q, k, v, kv_pos, n_kv, n_head, n_kv_head, scale, window, softcap, sinks, out,
                           split);
    default: return cudaErrorInvalidValue;
    }
}
