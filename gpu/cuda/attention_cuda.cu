// attention_cuda.cu - the CUDA backend's attention in f32 (a flash-style
// kernel for head dims 64 and 128, a simple one for others and for single
// rows), the dispatch to the tensor-core kernel (attention_tc.cu), and the
// attention mass a blend's selection votes with.  Same semantics as the CPU
// backend's (gpu/cpu/attention.c); gpt-oss's sinks (attention_sinks,
// attn_mass_sinks) go into each kernel's last normalization (sink_inv) and
// the mass's max and sum, so the online softmax itself is unchanged.
#include "cuda_internal.cuh"

/* Flash-style attention, tiled: one block per (32 query rows, head), 128
 * threads, 4 per query row.  Query, key and value tiles sit in shared memory;
 * each tile of 32 keys updates a running max and sum per row (online
 * softmax), so no n_q x n_kv matrix ever exists.  Key tiles whose every
 * position is past the block's last query are skipped (half of a causal
 * prefill).  Head dims 64 and 128 (SmolLM2, Llama); others use the simple
 * kernel below. */
#define FA_BQ 32
#define FA_BK 32
#define FA_THREADS 128

template <int D> static size_t flash_smem(void)
{
    return sizeof(float) * ((size_t)FA_BQ * (D + 1) + (size_t)FA_BK * (D + 1) + (size_t)FA_BK * D +
                            (size_t)FA_BQ * (FA_BK + 1));
}

template <int D>
__global__ void __launch_bounds__(FA_THREADS)
k_flash(const float *q, const int32_t *q_pos, int n_q, const float *k, const float *v, const int32_t *kv_pos,
        int n_kv, int n_head, int n_kv_head, float scale, int window, float softcap, const float *sinks, float *out)
{
    extern __shared__ float sm[];
    float *qs = sm;                        /* [BQ][D+1], pre-scaled */
    float *ks = qs + FA_BQ * (D + 1);      /* [BK][D+1] */
    float *vs = ks + FA_BK * (D + 1);      /* [BK][D] */
    float *ps = vs + FA_BK * D;            /* [BQ][BK+1] */
    __shared__ int32_t qp_s[FA_BQ], kp_s[FA_BK];
    const int h = blockIdx.y, kh = h / (n_head / n_kv_head), i0 = blockIdx.x * FA_BQ;
    const int t = threadIdx.x, r = t >> 2, sub = t & 3;
    const size_t qstride = (size_t)n_head * D, kstride = (size_t)n_kv_head * D;
    for (int e = t; e < FA_BQ * D; e += FA_THREADS) {
        int rr = e / D, d = e % D;
        qs[rr * (D + 1) + d] = i0 + rr < n_q ? q[(size_t)(i0 + rr) * qstride + (size_t)h * D + d] * scale : 0.0f;
    }
    if (t < FA_BQ)
        qp_s[t] = i0 + t < n_q ? q_pos[i0 + t] : INT_MIN;
    __syncthreads();
    int32_t qmin, qmax;
    pos_span(qp_s, min(FA_BQ, n_q - i0), &qmin, &qmax);
    const int32_t my_pos = qp_s[r];
    float m = -INFINITY, l = 0.0f, acc[D / 4];
#pragma unroll
    for (int i = 0; i < D / 4; i++)
        acc[i] = 0.0f;
    for (int j0 = 0; j0 < n_kv; j0 += FA_BK) {
        __syncthreads(); /* the previous tile is no longer read */
        if (t < FA_BK)
            kp_s[t] = j0 + t < n_kv ? kv_pos[j0 + t] : INT_MAX;
        __syncthreads();
        int32_t kmin, kmax;
        pos_span(kp_s, min(FA_BK, n_kv - j0), &kmin, &kmax);
        if (kv_tile_unseen(kmin, kmax, qmin, qmax, window))
            continue;
        for (int e = t; e < FA_BK * D; e += FA_THREADS) {
            int jj = e / D, d = e % D, j = j0 + jj;
            bool in = j < n_kv;
            ks[jj * (D + 1) + d] = in ? k[(size_t)j * kstride + (size_t)kh * D + d] : 0.0f;
            vs[jj * D + d] = in ? v[(size_t)j * kstride + (size_t)kh * D + d] : 0.0f;
        }
        __syncthreads();
        float sc[FA_BK / 4];
#pragma unroll
        for (int cc = 0; cc < FA_BK / 4; cc++)
            sc[cc] = 0.0f;
        for (int d = 0; d < D; d++) {
            float qd = qs[r * (D + 1) + d];
#pragma unroll
            for (int cc = 0; cc < FA_BK / 4; cc++)
                sc[cc] += qd * ks[(sub + 4 * cc) * (D + 1) + d];
        }
        float tmax = -INFINITY;
#pragma unroll
        for (int cc = 0; cc < FA_BK / 4; cc++) {
            sc[cc] = kv_seen(kp_s[sub + 4 * cc], my_pos, window) ? attn_softcap(sc[cc], softcap) : -INFINITY;
            tmax = fmaxf(tmax, sc[cc]);
        }
        tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
        tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 2));
        float m_new = fmaxf(m, tmax);
        float corr = m == -INFINITY ? 0.0f : expf(m - m_new);
        float psum = 0.0f;
#pragma unroll
        for (int cc = 0; cc < FA_BK / 4; cc++) {
            float p = sc[cc] == -INFINITY ? 0.0f : expf(sc[cc] - m_new);
            ps[r * (FA_BK + 1) + sub + 4 * cc] = p;
            psum += p;
        }
        psum += __shfl_xor_sync(0xffffffffu, psum, 1);
        psum += __shfl_xor_sync(0xffffffffu, psum, 2);
        l = l * corr + psum;
        m = m_new;
#pragma unroll
        for (int i = 0; i < D / 4; i++)
            acc[i] *= corr;
        __syncwarp(); /* a row's probabilities come from its own warp */
        for (int c = 0; c < FA_BK; c++) {
            float p = ps[r * (FA_BK + 1) + c];
#pragma unroll
            for (int i = 0; i < D / 4; i++)
                acc[i] += p * vs[c * D + sub + 4 * i];
        }
    }
    if (i0 + r < n_q) {
        float inv = sink_inv(m, l, sinks ? sinks[h] : -INFINITY);
        float *o = out + (size_t)(i0 + r) * qstride + (size_t)h * D;
#pragma unroll
        for (int i = 0; i < D / 4; i++)
            o[sub + 4 * i] = acc[i] * inv;
    }
}

/* The simple kernel for other head dims: one block per (query row, head). */
/* One block per (query row, head), 128 threads.
 * Keys are visited in tiles of 128 (one key per thread computes q.k);
 * a running max and sum rescale the output accumulator (online softmax). */
#define ATT_T 128
#define MAX_HD 256
__global__ void k_attention(const float *q, const int32_t *q_pos, const float *k, const float *v,
                            const int32_t *kv_pos, int n_kv, int n_head, int n_kv_head, int head_dim, float scale,
                            int window, float softcap, const float *sinks, float *out)
{
    int i = blockIdx.x, h = blockIdx.y, t = threadIdx.x;
    int kh = h / (n_head / n_kv_head);
    int qstride = n_head * head_dim, kstride = n_kv_head * head_dim;
    __shared__ float qs[MAX_HD];
    __shared__ float p[ATT_T];
    __shared__ float red[ATT_T];
    const float *qr = q + (size_t)i * qstride + h * head_dim;
    for (int d = t; d < head_dim; d += ATT_T)
        qs[d] = qr[d];
    float acc[MAX_HD / ATT_T];
    for (int r = 0; r < MAX_HD / ATT_T; r++)
        acc[r] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    int32_t qp = q_pos[i];
    __syncthreads();
    for (int j0 = 0; j0 < n_kv; j0 += ATT_T) {
        int j = j0 + t;
        float s = -INFINITY;
        if (j < n_kv && kv_seen(kv_pos[j], qp, window)) {
            const float *kr = k + (size_t)j * kstride + kh * head_dim;
            float dot = 0.0f;
            for (int d = 0; d < head_dim; d++)
                dot += qs[d] * kr[d];
            s = attn_softcap(dot * scale, softcap);
        }
        red[t] = s;
        __syncthreads();
        for (int st = ATT_T / 2; st > 0; st >>= 1) {
            if (t < st)
                red[t] = fmaxf(red[t], red[t + st]);
            __syncthreads();
        }
        float tile_max = red[0];
        __syncthreads();
        if (tile_max == -INFINITY)
            continue; /* nothing visible in this tile */
        float m_new = fmaxf(m, tile_max);
        float corr = m == -INFINITY ? 0.0f : expf(m - m_new);
        p[t] = s == -INFINITY ? 0.0f : expf(s - m_new);
        red[t] = p[t];
        __syncthreads();
        for (int st = ATT_T / 2; st > 0; st >>= 1) {
            if (t < st)
                red[t] += red[t + st];
            __syncthreads();
        }
        l = l * corr + red[0];
        int n_tile = n_kv - j0 < ATT_T ? n_kv - j0 : ATT_T;
        for (int r = 0; r * ATT_T + t < head_dim; r++) {
            int d = r * ATT_T + t;
            float a = acc[r] * corr;
            for (int jj = 0; jj < n_tile; jj++)
                if (p[jj] != 0.0f)
                    a += p[jj] * v[(size_t)(j0 + jj) * kstride + kh * head_dim + d];
            acc[r] = a;
        }
        m = m_new;
        __syncthreads();
    }
    float inv = sink_inv(m, l, sinks ? sinks[h] : -INFINITY);
    float *o = out + (size_t)i * qstride + h * head_dim;
    for (int r = 0; r * ATT_T + t < head_dim; r++)
        o[r * ATT_T + t] = acc[r] * inv;
}

template <int D>
static int launch_flash(struct cuda_ctx *c, const float *q, const int32_t *q_pos, int n_q, const float *k,
                        const float *v, const int32_t *kv_pos, int n_kv, int n_head, int n_kv_head, float scale,
                        int window, float softcap, const float *sinks, float *out)
{
    size_t smem = flash_smem<D>();
    int bit = D == 64 ? 1 : 2;
    if (!(c->flash_smem_set & bit)) { /* over the default 48 KiB at D = 128 */
        int rc = cuda_err(cudaFuncSetAttribute(k_flash<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
                          "cudaFuncSetAttribute(flash)");
        if (rc)
            return rc;
        c->flash_smem_set |= bit;
    }
    dim3 grid((unsigned)((n_q + FA_BQ - 1) / FA_BQ), (unsigned)n_head);
    k_flash<D><<<grid, FA_THREADS, smem, c->stream>>>(q, q_pos, n_q, k, v, kv_pos, n_kv, n_head, n_kv_head, scale,
                                                      window, softcap, sinks, out);
    return LAUNCHED("flash attention");
}

/* The tensor-core kernel's key split for this call (attention_tc.cu): the
 * plan's, or KVFS_CUDA_ATTN_SPLIT's; its scratch grown on the one stream */
static int tc_split(struct cuda_ctx *c, int head_dim, int n_q, int n_head, int n_kv, struct attn_tc_split *sp)
{
    size_t bytes = 0;
    int z = 1;
    sp->n_split = 1;
    if (c->attn_split < 0)
        z = attn_tc_split_plan(head_dim, n_q, n_head, n_kv, c->n_sm, &bytes);
    else if (c->attn_split > 1) { /* forced (tests, A/B): within the plan's bound on scratch too */
        z = c->attn_split < ATTN_TC_MAX_SPLIT ? c->attn_split : ATTN_TC_MAX_SPLIT;
        size_t run = sizeof(float) * (size_t)n_q * n_head * (head_dim + 2);
        while (z > 1 && run * (size_t)z > ATTN_TC_SPLIT_BYTES)
            z--;
        bytes = run * (size_t)z;
    }
    if (z <= 1)
        return 0;
    if (c->attn_part_cap < bytes) {
        if (c->attn_part) {
            cudaStreamSynchronize(c->stream); /* the old one may still be read */
            cudaFree(c->attn_part);
            c->attn_part = NULL;
            c->attn_part_cap = 0;
        }
        if (dev_malloc(c, (void **)&c->attn_part, bytes)) {
            c->attn_part = NULL;
            c->attn_split = 0; /* the device is full: unsplit from now on, not this again per call */
            kvfs_log(KVFS_LOG_WARN, "cuda: no room for the split attention's %zu-byte scratch: unsplit from now on",
                     bytes);
            return 0;
        }
        c->attn_part_cap = bytes;
    }
    attn_tc_split_at(sp, z, head_dim, n_q, n_head, n_kv, c->attn_part);
    return 0;
}

/* sinks: device f32[n_head] (gpt-oss) or NULL, in every kernel's final
 * normalization (sink_inv) */
int c_attention_sinks(void *vctx, const float *q, const int32_t *q_pos, int n_q, const float *k, const float *v,
                      const int32_t *kv_pos, int n_kv, int n_head, int n_kv_head, int head_dim, float scale,
                      int window, float softcap, const float *sinks, float *out)
{
    if (n_q <= 0)
        return 0;
    if (n_kv <= 0 || n_head % n_kv_head || head_dim > MAX_HD || !(softcap >= 0.0f))
        return -EINVAL;
    /* 16 rows and more (prefills, a blend's recomputed rows) on the tensor
     * cores; a decoding step's row in f32 */
    if (CTX->attn_tc && n_q >= 16 && attn_tc_smem(head_dim) && attn_tc_smem(head_dim) <= CTX->smem_optin) {
        struct attn_tc_split sp;
        int rc = tc_split(CTX, head_dim, n_q, n_head, n_kv, &sp);
        return rc ? rc
                  : cuda_err(attn_tc(CTX->stream, head_dim, q, q_pos, n_q, k, v, kv_pos, n_kv, n_head, n_kv_head,
                                     scale, window, softcap, sinks, out, &sp),
                             "attention (tensor cores)");
    }
    if (head_dim == 128)
        return launch_flash<128>(CTX, q, q_pos, n_q, k, v, kv_pos, n_kv, n_head, n_kv_head, scale, window, softcap,
                                 sinks, out);
    if (head_dim == 64)
        return launch_flash<64>(CTX, q, q_pos, n_q, k, v, kv_pos, n_kv, n_head, n_kv_head, scale, window, softcap,
                                sinks, out);
    dim3 grid((unsigned)n_q, (unsigned)n_head);
    k_attention<<<grid, ATT_T, 0, CTX->stream>>>(q, q_pos, k, v, kv_pos, n_kv, n_head, n_kv_head, head_dim, scale,
                                                  window, softcap, sinks, out);
    return LAUNCHED("attention");
}

int c_attention(void *vctx, const float *q, const int32_t *q_pos, int n_q, const float *k, const float *v,
                const int32_t *kv_pos, int n_kv, int n_head, int n_kv_head, int head_dim, float scale, int window,
                float softcap, float *out)
{
    return c_attention_sinks(vctx, q, q_pos, n_q, k, v, kv_pos, n_kv, n_head, n_kv_head, head_dim, scale, window,
                             softcap, NULL, out);
}

/* one block per (query, head): the row's max and sum, then each visible kv
 * row's probability added to out (atomics: blocks share rows).  Scores are
 * recomputed in each pass rather than stored: the queries are few.  A sink
 * (gpt-oss) raises the max and joins the sum, as the CPU's softmax_rows, so
 * the keys get only their share. */
__global__ void k_attn_mass(const float *q, const int32_t *q_pos, const float *k, const int32_t *kv_pos, int n_kv,
                            int n_head, int group, int head_dim, float scale, int window, float softcap,
                            const float *sinks, float *out)
{
    __shared__ float qs[256];
    __shared__ float red[256];
    int i = blockIdx.x / n_head, h = blockIdx.x % n_head, kstride = n_head / group * head_dim;
    const float *qr = q + ((size_t)i * n_head + h) * head_dim, *kb = k + (size_t)(h / group) * head_dim;
    int32_t qp = q_pos[i];
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x)
        qs[d] = qr[d] * scale;
    __syncthreads();
    /* scaled (and capped) score of kv row j, -INFINITY where the mask hides it */
    auto score = [&](int j) {
        if (!kv_seen(kv_pos[j], qp, window))
            return -INFINITY;
        const float *kr = kb + (size_t)j * kstride;
        float dot = 0;
        for (int d = 0; d < head_dim; d++)
            dot += qs[d] * kr[d];
        return attn_softcap(dot, softcap);
    };
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < n_kv; j += blockDim.x)
        mx = fmaxf(mx, score(j));
    mx = block_max(red, mx);
    if (mx == -INFINITY)
        return; /* nothing visible */
    float sink = sinks ? sinks[h] : -INFINITY;
    mx = fmaxf(mx, sink);
    float sum = 0;
    for (int j = threadIdx.x; j < n_kv; j += blockDim.x)
        sum += expf(score(j) - mx); /* masked rows add exp(-inf) = 0 */
    sum = block_sum(red, sum);
    if (sink != -INFINITY)
        sum += expf(sink - mx);
    float inv = 1.0f / sum;
    for (int j = threadIdx.x; j < n_kv; j += blockDim.x) {
        float sc = score(j);
        if (sc != -INFINITY)
            atomicAdd(&out[j], expf(sc - mx) * inv);
    }
}

/* attn_mass for the usual case (a question's few rows against every key), in
 * passes over the scores kept in a scratch buffer: the scores, a block per
 * (KV head, tile of keys) with the tile in shared memory, every query row of
 * the heads that share that KV head against it (each key read once from
 * memory: the pass before had a block per query row and head read its 64
 * keys, which with GQA and 32 rows read an 8B layer's K ~1.6 GB from L2);
 * each score row's max and sum; each key's probabilities summed over parts
 * of the rows (a thread per key and part); then the parts added to out in
 * order (no atomics). */
#define MASS_TILE_FLOATS 8192 /* a key tile's floats: 64 keys at head dim 128, 33 KiB with the padding */
static int mass_tile_keys(int head_dim)
{
    int t = MASS_TILE_FLOATS / head_dim; /* 32 keys at head dim 256; narrow heads at most 1024 (under 48 KiB) */
    return t > 1024 ? 1024 : t;
}

__global__ void k_mass_scores(const float *q, const int32_t *q_pos, int n_q, const float *k, const int32_t *kv_pos,
                              int n_kv, int n_head, int group, int head_dim, int tile, float scale, int window,
                              float softcap, float *S)
{
    extern __shared__ float ks[]; /* [tile][head_dim + 1]: a thread's key is its own bank's */
    const int kh = blockIdx.y, j0 = blockIdx.x * tile, ld = head_dim + 1, kstride = n_head / group * head_dim;
    const int keys = min(tile, n_kv - j0);
    for (int e = threadIdx.x; e < keys * head_dim; e += blockDim.x) {
        int jj = e / head_dim, d = e % head_dim;
        ks[jj * ld + d] = k[(size_t)(j0 + jj) * kstride + (size_t)kh * head_dim + d];
    }
    __syncthreads();
    /* cell c: row r = c / keys of this KV head's (query i = r / group, head
     * kh * group + r % group), key c % keys: a warp's lanes are one row's
     * consecutive keys (one q load for all, S written coalesced) */
    const long long cells = (long long)n_q * group * keys;
    for (long long c = threadIdx.x; c < cells; c += blockDim.x) {
        int r = (int)(c / keys), jj = (int)(c % keys);
        int i = r / group, h = kh * group + r % group;
        const float *qr = q + ((size_t)i * n_head + h) * head_dim, *kr = ks + jj * ld;
        float dot = 0.0f;
        for (int d = 0; d < head_dim; d++)
            dot += qr[d] * scale * kr[d];
        int j = j0 + jj;
        S[((size_t)i * n_head + h) * n_kv + j] =
            kv_seen(kv_pos[j], q_pos[i], window) ? attn_softcap(dot, softcap) : -INFINITY;
    }
}

/* row = query * n_head + head; its head's sink as k_attn_mass's */
__global__ void k_mass_rows(const float *S, int n_kv, int n_head, const float *sinks, float *m, float *inv)
{
    __shared__ float red[256];
    const float *sr = S + (size_t)blockIdx.x * n_kv;
    float mx = -INFINITY, sink = sinks ? sinks[blockIdx.x % n_head] : -INFINITY;
    for (int j = threadIdx.x; j < n_kv; j += blockDim.x)
        mx = fmaxf(mx, sr[j]);
    mx = block_max(red, mx);
    if (mx != -INFINITY)
        mx = fmaxf(mx, sink);
    float sum = 0.0f;
    if (mx != -INFINITY)
        for (int j = threadIdx.x; j < n_kv; j += blockDim.x)
            sum += expf(sr[j] - mx); /* masked keys add exp(-inf) = 0 */
    sum = block_sum(red, sum);
    if (mx != -INFINITY && sink != -INFINITY)
        sum += expf(sink - mx);
    if (threadIdx.x == 0) {
        m[blockIdx.x] = mx;
        inv[blockIdx.x] = mx == -INFINITY ? 0.0f : 1.0f / sum; /* a row that sees nothing adds nothing */
    }
}

/* Part p of every key's probabilities: rows [n_rows * p / n_parts, n_rows *
 * (p + 1) / n_parts) in order, into part[p][j].  A thread per key; the
 * parts (grid y) are what make it wide: 3,104 keys are 13 blocks, which
 * walking all 1,024 rows of a question's heads each took ~0.1-0.2 ms a
 * layer by estimate */
__global__ void k_mass_keys(const float *S, int n_rows, int n_kv, const float *m, const float *inv, int n_parts,
                            float *part)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x, p = blockIdx.y;
    if (j >= n_kv)
        return;
    int r0 = (int)((long long)n_rows * p / n_parts), r1 = (int)((long long)n_rows * (p + 1) / n_parts);
    float acc = 0.0f;
    for (int r = r0; r < r1; r++) {
        float sc = S[(size_t)r * n_kv + j];
        if (sc != -INFINITY)
            acc += expf(sc - m[r]) * inv[r];
    }
    part[(size_t)p * n_kv + j] = acc;
}

/* out[j] += the parts' sums, in part order */
__global__ void k_mass_keys_sum(const float *part, int n_parts, int n_kv, float *out)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n_kv)
        return;
    float acc = 0.0f;
    for (int p = 0; p < n_parts; p++)
        acc += part[(size_t)p * n_kv + j];
    out[j] += acc;
}

int c_attn_mass_sinks(void *vctx, const float *q, const int32_t *q_pos, int n_q, const float *k,
                      const int32_t *kv_pos, int n_kv, int n_head, int n_kv_head, int head_dim, float scale,
                      int window, float softcap, const float *sinks, float *out)
{
    if (n_q <= 0 || n_kv <= 0)
        return 0;
    if (n_kv_head <= 0 || n_head % n_kv_head || head_dim <= 0 || head_dim > 256 || !(softcap >= 0.0f))
        return -EINVAL;
    int group = n_head / n_kv_head, rows = n_q * n_head;
    size_t cells = (size_t)rows * n_kv;
    float *S = NULL;
    int n_parts = (rows + 63) / 64; /* rows per key in parts of ~64, at most 16 */
    if (n_parts > 16)
        n_parts = 16;
    if (cells <= ((size_t)64 << 20) &&
        c_alloc(vctx, sizeof(float) * (cells + 2 * (size_t)rows + (size_t)n_parts * n_kv), (void **)&S) == 0) {
        float *m = S + cells, *inv = m + rows, *part = inv + rows;
        int tile = mass_tile_keys(head_dim);
        k_mass_scores<<<dim3((unsigned)((n_kv + tile - 1) / tile), (unsigned)n_kv_head), 256,
                        sizeof(float) * (size_t)tile * (head_dim + 1), CTX->stream>>>(
            q, q_pos, n_q, k, kv_pos, n_kv, n_head, group, head_dim, tile, scale, window, softcap, S);
        k_mass_rows<<<rows, 256, 0, CTX->stream>>>(S, n_kv, n_head, sinks, m, inv);
        k_mass_keys<<<dim3(blocks((size_t)n_kv, 256), (unsigned)n_parts), 256, 0, CTX->stream>>>(S, rows, n_kv, m, inv,
                                                                                               n_parts, part);
        k_mass_keys_sum<<<blocks((size_t)n_kv, 256), 256, 0, CTX->stream>>>(part, n_parts, n_kv, out);
        int rc = LAUNCHED("attn_mass");
        c_free(vctx, S); /* reused only by later work on this stream */
        return rc;
    }
    /* many query rows: one block per (query, head), nothing kept */
    k_attn_mass<<<n_q * n_head, 256, 0, CTX->stream>>>(q, q_pos, k, kv_pos, n_kv, n_head, group, head_dim, scale,
                                                       window, softcap, sinks, out);
    return LAUNCHED("attn_mass");
}

int c_attn_mass(void *vctx, const float *q, const int32_t *q_pos, int n_q, const float *k, const int32_t *kv_pos,
                int n_kv, int n_head, int n_kv_head, int head_dim, float scale, int window, float softcap, float *out)
{
    return c_attn_mass_sinks(vctx, q, q_pos, n_q, k, kv_pos, n_kv, n_head, n_kv_head, head_dim, scale, window,
                             softcap, NULL, out);
}

