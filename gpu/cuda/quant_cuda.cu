// quant_cuda.cu - decoding ggml block-quantized weights on the device.
//
// A weight stays on the device as the GGUF file has it (Q4_K_M's 8B file:
// 4.6 GiB, not 30 GiB of f32).  Large products decode a slice of rows to f16
// and multiply on the tensor cores (backend_cuda.cu); a product of a few
// rows (decoding) reads the blocks directly (kq_gemv).  Every value is
// computed with the float operations of gpu/ggml/quant.c in the same
// order, unfused (__fmul_rn, __fadd_rn), so a decoded weight equals the CPU's
// bit for bit; gpu_test_backend_ops checks it.
#include <string.h>

#include "quant_cuda.h"

extern "C" {
#include "ggml_quant.h"
}

extern "C" int kq_block(uint32_t type, uint32_t *bytes)
{
    switch (type) {
    case KVFS_GGML_Q4_0: *bytes = 18; return 32;
    case KVFS_GGML_Q4_1: *bytes = 20; return 32;
    case KVFS_GGML_Q5_0: *bytes = 22; return 32;
    case KVFS_GGML_Q5_1: *bytes = 24; return 32;
    case KVFS_GGML_Q8_0: *bytes = 34; return 32;
    case KVFS_GGML_Q4_K: *bytes = 144; return 256;
    case KVFS_GGML_Q5_K: *bytes = 176; return 256;
    case KVFS_GGML_Q6_K: *bytes = 210; return 256;
    case KVFS_GGML_MXFP4: *bytes = 17; return 32;
    default: *bytes = 0; return 0;
    }
}

// Unfused IEEE float operations on both sides: the device's intrinsics, and
// on the host (kq_value_host: test_cuda_decode checks this decoder against
// quant.c here, with no GPU) plain operations, built -ffp-contract=off.
#ifdef __CUDA_ARCH__
#define FMUL(a, b) __fmul_rn(a, b)
#define FADD(a, b) __fadd_rn(a, b)
#define FSUB(a, b) __fsub_rn(a, b)
#else
#define FMUL(a, b) ((a) * (b))
#define FADD(a, b) ((a) + (b))
#define FSUB(a, b) ((a) - (b))
#endif

// blocks are packed at 18/20/22-byte strides: read byte by byte
__host__ __device__ __forceinline__ float f16_at(const uint8_t *p)
{
    return __half2float(__ushort_as_half((unsigned short)(p[0] | p[1] << 8)));
}

// MXFP4's block scale, an E8M0 byte, as ggml's GGML_E8M0_TO_FP32_HALF (half
// of 2^(e - 127); e < 2 a subnormal), and its FP4 E2M1 code q as
// kvalues_mxfp4 (0, 1, 2, 3, 4, 6, 8, 12, then their negatives; code 8 is
// +0 as the table's integer 0): quant.c's decoder with no table to place
__host__ __device__ __forceinline__ float e8m0_half(uint8_t e)
{
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
#ifdef __CUDA_ARCH__
    return __uint_as_float(bits);
#else
    float d;
    memcpy(&d, &bits, 4);
    return d;
#endif
}

__host__ __device__ __forceinline__ int fp4_e2m1(int q)
{
    int v = (int)(0xC8643210u >> 4 * (q & 7) & 15);
    return q & 8 ? -v : v;
}

// Sub-block s's 6-bit scale and min of a K-quant block (quant.c's scale_min_k4)
__host__ __device__ __forceinline__ void scale_min_k4(const uint8_t *sc, int s, int *scale, int *mn)
{
    if (s < 4) {
        *scale = sc[s] & 63;
        *mn = sc[s + 4] & 63;
    } else {
        *scale = (sc[s + 4] & 0x0f) | ((sc[s - 4] >> 6) << 4);
        *mn = (sc[s + 4] >> 4) | ((sc[s] >> 6) << 4);
    }
}

// Element e of a row of `type`: the value quant.c's decoder writes there.
__host__ __device__ __forceinline__ float kq_value(uint32_t type, const uint8_t *row, int e)
{
    switch (type) {
    case KVFS_GGML_Q8_0: {
        const uint8_t *b = row + (size_t)(e >> 5) * 34;
        return FMUL((float)(int8_t)b[2 + (e & 31)], f16_at(b));
    }
    case KVFS_GGML_Q4_0: {
        const uint8_t *b = row + (size_t)(e >> 5) * 18;
        int i = e & 31, q = i < 16 ? b[2 + i] & 15 : b[2 + i - 16] >> 4;
        return FMUL((float)(q - 8), f16_at(b));
    }
    case KVFS_GGML_Q4_1: {
        const uint8_t *b = row + (size_t)(e >> 5) * 20;
        int i = e & 31, q = i < 16 ? b[4 + i] & 15 : b[4 + i - 16] >> 4;
        return FADD(FMUL((float)q, f16_at(b)), f16_at(b + 2));
    }
    case KVFS_GGML_Q5_0:
    case KVFS_GGML_Q5_1: {
        int has_min = type == KVFS_GGML_Q5_1;
        const uint8_t *b = row + (size_t)(e >> 5) * (has_min ? 24 : 22), *qhp = b + (has_min ? 4 : 2), *qs = qhp + 4;
        uint32_t qh = (uint32_t)qhp[0] | (uint32_t)qhp[1] << 8 | (uint32_t)qhp[2] << 16 | (uint32_t)qhp[3] << 24;
        int i = e & 31, j = i & 15;
        int x = i < 16 ? (qs[j] & 0x0f) | (int)((qh >> j) << 4 & 0x10) : (qs[j] >> 4) | (int)((qh >> (j + 12)) & 0x10);
        return has_min ? FADD(FMUL((float)x, f16_at(b)), f16_at(b + 2)) : FMUL((float)(x - 16), f16_at(b));
    }
    case KVFS_GGML_Q4_K:
    case KVFS_GGML_Q5_K: {
        int five = type == KVFS_GGML_Q5_K;
        const uint8_t *b = row + (size_t)(e >> 8) * (five ? 176 : 144), *sc = b + 4;
        int i = e & 255, s = i >> 5, l = i & 31; // sub-block s of 32; a pair of them shares 32 bytes of nibbles
        const uint8_t *q = b + (five ? 48 : 16) + (s >> 1) * 32;
        int v = s & 1 ? q[l] >> 4 : q[l] & 0x0f;
        if (five && (b[16 + l] >> s & 1))
            v += 16;
        int scale, mn;
        scale_min_k4(sc, s, &scale, &mn);
        float d1 = FMUL(f16_at(b), (float)scale), m1 = FMUL(f16_at(b + 2), (float)mn);
        return FSUB(FMUL(d1, (float)v), m1);
    }
    case KVFS_GGML_Q6_K: {
        const uint8_t *b = row + (size_t)(e >> 8) * 210;
        int i = e & 255, h = i >> 7, r = i & 127, part = r >> 5, l = r & 31, is = l >> 4;
        const uint8_t *ql = b + 64 * h, *qh = b + 128 + 32 * h;
        const int8_t *sc = (const int8_t *)(b + 192 + 8 * h);
        int lo = part & 1 ? ql[l + 32] : ql[l];
        int q = ((part & 2 ? lo >> 4 : lo & 0x0f) | ((qh[l] >> (2 * part) & 3) << 4)) - 32;
        return FMUL(FMUL(f16_at(b + 208), (float)sc[is + 2 * part]), (float)q);
    }
    case KVFS_GGML_MXFP4: { // gpt-oss's experts: the scale byte, 16 bytes of nibbles (low: 0-15, high: 16-31)
        const uint8_t *b = row + (size_t)(e >> 5) * 17;
        int i = e & 31, q = i < 16 ? b[1 + i] & 15 : b[1 + i - 16] >> 4;
        return FMUL((float)fp4_e2m1(q), e8m0_half(b[0]));
    }
    default:
        return 0.0f;
    }
}

extern "C" float kq_value_host(uint32_t type, const uint8_t *row, int e)
{
    return kq_value(type, row, e);
}

// 8 bytes from p, little-endian: one load where p is 8-aligned (Q4_K's
// nibbles are), else byte by byte (the 18/34/210-byte blocks)
__host__ __device__ __forceinline__ uint64_t load8(const uint8_t *p)
{
#ifdef __CUDA_ARCH__
    if (!((uintptr_t)p & 7)) {
        uint2 u = *(const uint2 *)p;
        return (uint64_t)u.x | (uint64_t)u.y << 32;
    }
#endif
    uint64_t v = 0;
    for (int j = 0; j < 8; j++)
        v |= (uint64_t)p[j] << (8 * j);
    return v;
}

// Elements c .. c + 7 of a row (c a multiple of 8: one sub-block's, which
// share their scales): kq_value's operations in its order, the scales made
// once and the quants read in one load where the layout allows.  The types
// of the K-quant mixes people run (Q4_K_M: Q4_K, Q6_K), the 32-blocks and
// MXFP4 (gpt-oss's experts); the others element by element.
__host__ __device__ __forceinline__ void kq_decode8(uint32_t type, const uint8_t *row, int c, float *v)
{
    switch (type) {
    case KVFS_GGML_Q4_K: {
        const uint8_t *b = row + (size_t)(c >> 8) * 144, *sc = b + 4;
        int i = c & 255, s = i >> 5, l = i & 31;
        int scale, mn;
        scale_min_k4(sc, s, &scale, &mn);
        float d1 = FMUL(f16_at(b), (float)scale), m1 = FMUL(f16_at(b + 2), (float)mn);
        uint64_t q = load8(b + 16 + (s >> 1) * 32 + l) >> (s & 1 ? 4 : 0);
        for (int j = 0; j < 8; j++)
            v[j] = FSUB(FMUL(d1, (float)(int)(q >> (8 * j) & 15)), m1);
        return;
    }
    case KVFS_GGML_Q6_K: {
        const uint8_t *b = row + (size_t)(c >> 8) * 210;
        int i = c & 255, h = i >> 7, r = i & 127, part = r >> 5, l = r & 31, is = l >> 4;
        const int8_t *sc = (const int8_t *)(b + 192 + 8 * h);
        float dsc = FMUL(f16_at(b + 208), (float)sc[is + 2 * part]);
        uint64_t lo = load8(b + 64 * h + (part & 1 ? 32 : 0) + l) >> (part & 2 ? 4 : 0), hi = load8(b + 128 + 32 * h + l);
        for (int j = 0; j < 8; j++) {
            int q = ((int)(lo >> (8 * j) & 15) | (int)((hi >> (8 * j + 2 * part) & 3) << 4)) - 32;
            v[j] = FMUL(dsc, (float)q);
        }
        return;
    }
    case KVFS_GGML_Q8_0: {
        const uint8_t *b = row + (size_t)(c >> 5) * 34;
        float d = f16_at(b);
        uint64_t q = load8(b + 2 + (c & 31));
        for (int j = 0; j < 8; j++)
            v[j] = FMUL((float)(int8_t)(q >> (8 * j)), d);
        return;
    }
    case KVFS_GGML_Q4_0:
    case KVFS_GGML_Q4_1: {
        int one = type == KVFS_GGML_Q4_1, i = c & 31;
        const uint8_t *b = row + (size_t)(c >> 5) * (one ? 20 : 18);
        float d = f16_at(b), m = one ? f16_at(b + 2) : 0.0f;
        uint64_t q = load8(b + (one ? 4 : 2) + (i & 15)) >> (i < 16 ? 0 : 4);
        for (int j = 0; j < 8; j++) {
            int x = (int)(q >> (8 * j) & 15);
            v[j] = one ? FADD(FMUL((float)x, d), m) : FMUL((float)(x - 8), d);
        }
        return;
    }
    case KVFS_GGML_MXFP4: {
        const uint8_t *b = row + (size_t)(c >> 5) * 17;
        int i = c & 31;
        float d = e8m0_half(b[0]);
        uint64_t q = load8(b + 1 + (i & 15)) >> (i < 16 ? 0 : 4);
        for (int j = 0; j < 8; j++)
            v[j] = FMUL((float)fp4_e2m1((int)(q >> (8 * j) & 15)), d);
        return;
    }
    default:
        for (int j = 0; j < 8; j++)
            v[j] = kq_value(type, row, c + j);
    }
}

extern "C" void kq_decode8_host(uint32_t type, const uint8_t *row, int c, float *v)
{
    kq_decode8(type, row, c, v);
}

/* 8 values a thread (rows are whole 32-blocks, so 8 never straddle one):
 * one sub-block's scales made once, one 16-byte store.  x: 8-value groups of
 * a row, y: rows (strided past the grid's 65,535), so no thread divides by
 * the row's length: a 64-bit division per 8 values cost more than their
 * decoding */
__global__ void k_decode_f16(uint32_t type, const uint8_t *w, size_t row_bytes, int r0, int rows, int in_dim,
                             __half *out)
{
    int c = (int)(blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (c >= in_dim)
        return;
    for (int r = (int)blockIdx.y; r < rows; r += (int)gridDim.y) {
        const uint8_t *row = w + (size_t)(r0 + r) * row_bytes;
        float v[8];
        kq_decode8(type, row, c, v);
        __align__(16) __half h[8];
#pragma unroll
        for (int j = 0; j < 8; j++)
            h[j] = __float2half_rn(v[j]);
        *(uint4 *)(out + (size_t)r * in_dim + c) = *(const uint4 *)h;
    }
}

__global__ void k_decode_rows_f32(uint32_t type, const uint8_t *w, size_t row_bytes, const int32_t *ids, int n,
                                  int in_dim, float *out)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)n * in_dim)
        return;
    size_t r = i / in_dim;
    int c = (int)(i % in_dim);
    out[i] = kq_value(type, w + (size_t)ids[r] * row_bytes, c);
}

static unsigned n_blocks(size_t n, unsigned t) { return (unsigned)((n + t - 1) / t); }

cudaError_t kq_decode_f16(cudaStream_t s, uint32_t type, const uint8_t *w, size_t row_bytes, int r0, int rows,
                          int in_dim, __half *out)
{
    if (rows <= 0 || in_dim <= 0) /* in_dim: a multiple of 32, whole blocks */
        return cudaSuccess;
    unsigned groups = (unsigned)in_dim / 8, t = groups < 256 ? (groups + 31) / 32 * 32 : 256;
    dim3 grid(n_blocks(groups, t), (unsigned)(rows < 65535 ? rows : 65535));
    k_decode_f16<<<grid, t, 0, s>>>(type, w, row_bytes, r0, rows, in_dim, out);
    return cudaGetLastError();
}

cudaError_t kq_decode_rows_f32(cudaStream_t s, uint32_t type, const uint8_t *w, size_t row_bytes,
                               const int32_t *ids, int n, int in_dim, float *out)
{
    size_t tot = (size_t)n * in_dim;
    if (tot)
        k_decode_rows_f32<<<n_blocks(tot, 256), 256, 0, s>>>(type, w, row_bytes, ids, n, in_dim, out);
    return cudaGetLastError();
}

// one warp per output row, the n <= 8 x rows against it
#define GEMV_WARPS 4
__global__ void __launch_bounds__(32 * GEMV_WARPS)
k_gemv(uint32_t type, const uint8_t *w, size_t row_bytes, int out_dim, int in_dim, const float *x, int n, float *y)
{
    int o = blockIdx.x * GEMV_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (o >= out_dim)
        return;
    const uint8_t *row = w + (size_t)o * row_bytes;
    float acc[KQ_GEMV_MAX_N] = {0};
    for (int c = lane; c < in_dim; c += 32) {
        float v = kq_value(type, row, c);
#pragma unroll
        for (int i = 0; i < KQ_GEMV_MAX_N; i++)
            if (i < n)
                acc[i] += v * x[(size_t)i * in_dim + c];
    }
#pragma unroll
    for (int i = 0; i < KQ_GEMV_MAX_N; i++) {
        float a = acc[i];
        for (int off = 16; off > 0; off >>= 1)
            a += __shfl_xor_sync(0xffffffffu, a, off);
        if (lane == 0 && i < n)
            y[(size_t)i * out_dim + o] = a;
    }
}

cudaError_t kq_gemv(cudaStream_t s, uint32_t type, const uint8_t *w, size_t row_bytes, int out_dim, int in_dim,
                    const float *x, int n, float *y)
{
    if (n > KQ_GEMV_MAX_N)
        return cudaErrorInvalidValue;
    if (n > 0 && out_dim > 0)
        k_gemv<<<n_blocks((size_t)out_dim, GEMV_WARPS), 32 * GEMV_WARPS, 0, s>>>(type, w, row_bytes, out_dim, in_dim,
                                                                                  x, n, y);
    return cudaGetLastError();
}

__global__ void k_to_half(const float *x, __half *y, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = __float2half_rn(x[i]);
}

cudaError_t kq_to_half(cudaStream_t s, const float *x, __half *y, size_t n)
{
    if (n)
        k_to_half<<<n_blocks(n, 256), 256, 0, s>>>(x, y, n);
    return cudaGetLastError();
}

// one block of 256 threads per Q8_K block: the first value of largest
// magnitude sets the scale, as kvfs_ggml_quantize_q8_k
__global__ void k_act_q8k(const float *x, float *y)
{
    __shared__ float mag[256];
    __shared__ int at[256];
    const float *xb = x + (size_t)blockIdx.x * 256;
    int t = threadIdx.x;
    float v = xb[t];
    mag[t] = fabsf(v);
    at[t] = t;
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
        if (t < s && (mag[t + s] > mag[t] || (mag[t + s] == mag[t] && at[t + s] < at[t]))) {
            mag[t] = mag[t + s];
            at[t] = at[t + s];
        }
        __syncthreads();
    }
    __shared__ float max_v; // read before any thread writes y, which may be x
    if (t == 0)
        max_v = xb[at[0]];
    __syncthreads();
    float amax = mag[0], max = max_v, out = 0.0f;
    if (amax != 0.0f) {
        float iscale = __fdiv_rn(-127.0f, max), d = __fdiv_rn(1.0f, iscale);
        int q = __float2int_rn(__fmul_rn(iscale, v)); // round half to even, as ggml's nearest_int
        out = __fmul_rn(d, (float)(q < 127 ? q : 127));
    }
    y[(size_t)blockIdx.x * 256 + t] = out;
}

cudaError_t kq_act_q8k(cudaStream_t s, const float *x, float *y, size_t n_blocks_)
{
    if (n_blocks_)
        k_act_q8k<<<(unsigned)n_blocks_, 256, 0, s>>>(x, y);
    return cudaGetLastError();
}
