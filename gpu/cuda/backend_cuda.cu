// backend_cuda.cu - the CUDA backend: cuBLAS for the matrix products, small
// kernels for everything else, attention as a flash-style kernel (online
// softmax over key tiles; no n_q x n_kv matrix in memory).  Same semantics as
// the CPU reference (gpu/backend_cpu.c); gpu_test_backend_ops compares them.
#include <cub/device/device_radix_sort.cuh>
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <unistd.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention_tc.h"
#include "attn_mask.cuh"
#include "quant_cuda.h"

extern "C" {
#include "backend.h"
#include "gelu.h"
#include "gguf.h"
#include "kvquant.h"
#include "log.h"
}

/* upload_kv staging: a ring of pinned host buffers, each with a device
 * twin.  The host copies a piece into a pinned slot, the copy stream moves
 * it to the device (DMA, overlapping whatever the compute stream is doing),
 * and the compute stream converts it to f32 once the copy's event fires.
 * A slot is reused after the conversion that read it has finished. */
#define STAGE_SLOTS 32 /* enough for the host to run a few layers ahead of the device */
#define STAGE_BYTES ((size_t)8 << 20)
struct stage_slot {
    void *host, *dev;
    cudaEvent_t copied, consumed;
    int used;
};

/* Copies into pinned staging run on a few threads: one core's memcpy
 * (~7 GB/s) is well below PCIe, and it is the host's only work per layer. */
#define COPY_THREADS_MAX 8
struct copy_pool {
    pthread_t th[COPY_THREADS_MAX];
    int n_threads; /* helpers; the caller copies a share too */
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    char *dst;
    const char *src;
    size_t bytes, part;
    unsigned generation;
    int pending, stop;
};

/* Device memory is cached between uses, like PyTorch's allocator: a blend or
 * prefill allocates about a GB of cache and work buffers, and cudaMalloc /
 * cudaFree of that (cudaFree also waits for the device) would be a fixed
 * cost on every request.  Every op runs on one stream, so a freed block can
 * be handed out again at once: later work on the stream runs after earlier. */
#define CACHE_SLOTS 256
struct dev_block {
    void *p;
    size_t len;
};

struct cuda_ctx {
    struct copy_pool pool;
    struct dev_block *live; /* allocations handed out (for their sizes) */
    int n_live, cap_live;
    struct dev_block cached[CACHE_SLOTS];
    size_t cached_bytes, cache_limit;
    int device;
    cudaStream_t stream, copy_stream;
    cublasHandle_t blas;
    struct stage_slot stage[STAGE_SLOTS];
    int next_slot;
    int flash_smem_set;
    /* f16 scratch of the tensor-core products of encoded weights: a slice
     * of W's rows decoded, and x (one stream: reused call after call) */
    __half *wh, *xh;
    size_t wh_cap, xh_cap; /* elements */
    size_t wh_max;         /* most elements of W decoded at once */
    float *gelu_table;     /* geglu's, made on first use */
    int attn_tc;           /* attention on the tensor cores (KVFS_CUDA_ATTN=f32: the f32 kernels) */
    size_t smem_optin;     /* the device's shared memory per block, opted in */
    int counted;           /* in live_contexts */
};

struct kvfs_weight {
    float *w;   /* device [out_dim][in_dim] f32, or NULL when encoded: */
    uint8_t *q; /* device, out_dim rows of row_bytes of ggml type `type` */
    uint32_t type;
    size_t row_bytes;
    int out_dim, in_dim;
};

/* most f16 elements of W decoded at once (256 MiB): a whole layer's
 * projection for an 8B model, slices of the output embedding */
#define WH_MAX ((size_t)128 << 20)

static int cuda_err(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 0;
    kvfs_log(KVFS_LOG_ERR, "cuda: %s: %s", what, cudaGetErrorString(e));
    return e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}

#define CK(call) do { int _rc = cuda_err((call), #call); if (_rc) return _rc; } while (0)
#define LAUNCHED(what) cuda_err(cudaGetLastError(), what)
#define CTX ((struct cuda_ctx *)vctx)

static size_t round_alloc(size_t bytes)
{
    size_t g = bytes < ((size_t)1 << 20) ? 512 : (size_t)2 << 20;
    return (bytes + g - 1) / g * g;
}

static void cache_release(struct cuda_ctx *c)
{
    for (int i = 0; i < CACHE_SLOTS; i++)
        if (c->cached[i].p) {
            cudaFree(c->cached[i].p);
            c->cached[i].p = NULL;
        }
    c->cached_bytes = 0;
}

/* cudaMalloc; when the device is full, the cache of idle blocks is given
 * back (cudaFree waits for the device) and it is tried once more */
static int dev_malloc(struct cuda_ctx *c, void **p, size_t len)
{
    if (cudaMalloc(p, len) == cudaSuccess)
        return 0;
    cudaGetLastError();
    cache_release(c);
    CK(cudaMalloc(p, len));
    return 0;
}

static int c_alloc(void *vctx, size_t bytes, void **dev)
{
    struct cuda_ctx *c = CTX;
    size_t len = round_alloc(bytes ? bytes : 16);
    if (c->n_live == c->cap_live) {
        int cap = c->cap_live ? 2 * c->cap_live : 1024;
        struct dev_block *nl = (struct dev_block *)realloc(c->live, sizeof(*nl) * (size_t)cap);
        if (!nl)
            return -ENOMEM;
        c->live = nl;
        c->cap_live = cap;
    }
    int best = -1; /* the smallest cached block that fits, at most 1/8 too big */
    for (int i = 0; i < CACHE_SLOTS; i++)
        if (c->cached[i].p && c->cached[i].len >= len && c->cached[i].len <= len + len / 8 &&
            (best < 0 || c->cached[i].len < c->cached[best].len))
            best = i;
    void *p = NULL;
    if (best >= 0) {
        p = c->cached[best].p;
        len = c->cached[best].len;
        c->cached[best].p = NULL;
        c->cached_bytes -= len;
    } else {
        int rc = dev_malloc(c, &p, len);
        if (rc)
            return rc;
    }
    c->live[c->n_live++] = (struct dev_block){p, len};
    *dev = p;
    return 0;
}

/* CUDA contexts of this process (the blend service's lanes): their caches of
 * idle device memory share one bound, 1/8 of the device */
static int live_contexts;

static void c_free(void *vctx, void *dev)
{
    struct cuda_ctx *c = CTX;
    if (!dev)
        return;
    size_t len = 0;
    for (int i = c->n_live - 1; i >= 0; i--) /* recent allocations are freed first */
        if (c->live[i].p == dev) {
            len = c->live[i].len;
            c->live[i] = c->live[--c->n_live];
            break;
        }
    int lives = __atomic_load_n(&live_contexts, __ATOMIC_RELAXED);
    if (len && c->cached_bytes + len <= c->cache_limit / (size_t)(lives > 1 ? lives : 1))
        for (int i = 0; i < CACHE_SLOTS; i++)
            if (!c->cached[i].p) {
                c->cached[i] = (struct dev_block){dev, len};
                c->cached_bytes += len;
                return;
            }
    cudaFree(dev);
}

static int c_upload(void *vctx, void *dev, const void *host, size_t bytes)
{
    CK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, CTX->stream));
    CK(cudaStreamSynchronize(CTX->stream)); /* host buffer may be reused at once */
    return 0;
}

static int c_download(void *vctx, void *host, const void *dev, size_t bytes)
{
    CK(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, CTX->stream));
    CK(cudaStreamSynchronize(CTX->stream));
    return 0;
}

static int c_sync(void *vctx)
{
    CK(cudaStreamSynchronize(CTX->stream));
    return 0;
}

static int c_copy(void *vctx, void *dst, const void *src, size_t bytes)
{
    if (dst != src)
        CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, CTX->stream));
    return 0;
}

static int c_weight_create(void *vctx, const float *host, int out_dim, int in_dim, struct kvfs_weight **out)
{
    struct kvfs_weight *w = (struct kvfs_weight *)calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    size_t bytes = sizeof(float) * (size_t)out_dim * in_dim;
    int rc = c_alloc(vctx, bytes, (void **)&w->w);
    if (!rc)
        rc = c_upload(vctx, w->w, host, bytes);
    if (rc) {
        c_free(vctx, w->w);
        free(w);
        return rc;
    }
    w->out_dim = out_dim;
    w->in_dim = in_dim;
    *out = w;
    return 0;
}

static void c_weight_free(void *vctx, struct kvfs_weight *w)
{
    if (w) {
        c_free(vctx, w->w);
        c_free(vctx, w->q);
        free(w);
    }
}

/* W kept encoded on the device: the file's bytes, decoded by kernels */
static int c_weight_create_quant(void *vctx, uint32_t type, const void *data, size_t row_bytes, int out_dim,
                                 int in_dim, struct kvfs_weight **out)
{
    uint32_t bytes, per = (uint32_t)kq_block(type, &bytes);
    if (!per)
        return -ENOTSUP; /* the model decodes it to f32 instead */
    if (out_dim <= 0 || in_dim <= 0 || in_dim % per || row_bytes != (size_t)in_dim / per * bytes)
        return -EINVAL;
    struct kvfs_weight *w = (struct kvfs_weight *)calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    size_t total = row_bytes * (size_t)out_dim;
    int rc = c_alloc(vctx, total, (void **)&w->q);
    if (!rc)
        rc = c_upload(vctx, w->q, data, total);
    if (rc) {
        c_free(vctx, w->q);
        free(w);
        return rc;
    }
    w->type = type;
    w->row_bytes = row_bytes;
    w->out_dim = out_dim;
    w->in_dim = in_dim;
    *out = w;
    return 0;
}

static int c_gather(void *vctx, const float *src, const int32_t *idx, float *out, int n_idx, int dim);

static int c_weight_rows(void *vctx, const struct kvfs_weight *w, const int32_t *ids, float *out, int n)
{
    if (n <= 0)
        return 0;
    if (!w->q) /* a type the device does not keep encoded: the model made it f32 */
        return c_gather(vctx, w->w, ids, out, n, w->in_dim);
    return cuda_err(kq_decode_rows_f32(CTX->stream, w->type, w->q, w->row_bytes, ids, n, w->in_dim, out),
                    "weight_rows");
}

/* device f16 scratch of at least n elements (grown, never shrunk) */
static int scratch_half(struct cuda_ctx *c, __half **buf, size_t *cap, size_t n)
{
    if (*cap >= n)
        return 0;
    if (*buf) {
        cudaStreamSynchronize(c->stream); /* the old one may still be read */
        cudaFree(*buf);
        *buf = NULL;
        *cap = 0;
    }
    int rc = dev_malloc(c, (void **)buf, n * sizeof(__half));
    if (!rc)
        *cap = n;
    return rc;
}

__global__ void k_add_bias(float *y, const float *b, int n, int d)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)n * d)
        y[i] += b[i % d];
}

static unsigned blocks(size_t n, unsigned t) { return (unsigned)((n + t - 1) / t); }

/* y = x . W^T for an encoded W: a few rows decode W as they go (f32); more
 * decode W to f16 a slice of rows at a time and multiply on the tensor cores
 * (f16 x and W, f32 sums: what llama.cpp's cuBLAS path does), so W's f32 or
 * f16 copy never exists whole */
static int matmul_encoded(struct cuda_ctx *c, const struct kvfs_weight *w, const float *x, float *y, int n)
{
    if (n <= KQ_GEMV_MAX_N)
        return cuda_err(kq_gemv(c->stream, w->type, w->q, w->row_bytes, w->out_dim, w->in_dim, x, n, y), "gemv");
    int rc, in = w->in_dim;
    size_t slice = c->wh_max / (size_t)in;
    if (slice < 1)
        slice = 1;
    if (slice > (size_t)w->out_dim)
        slice = (size_t)w->out_dim;
    if ((rc = scratch_half(c, &c->wh, &c->wh_cap, slice * in)) ||
        (rc = scratch_half(c, &c->xh, &c->xh_cap, (size_t)n * in)) ||
        (rc = cuda_err(kq_to_half(c->stream, x, c->xh, (size_t)n * in), "to_half")))
        return rc;
    const float one = 1.0f, zero = 0.0f;
    for (int r0 = 0; r0 < w->out_dim; r0 += (int)slice) {
        int rows = w->out_dim - r0 < (int)slice ? w->out_dim - r0 : (int)slice;
        if ((rc = cuda_err(kq_decode_f16(c->stream, w->type, w->q, w->row_bytes, r0, rows, in, c->wh), "decode")))
            return rc;
        /* column-major Y[r0 .. r0 + rows)(n) = Wslice^T . X, ldc out_dim */
        cublasStatus_t s = cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, rows, n, in, &one, c->wh, CUDA_R_16F, in,
                                        c->xh, CUDA_R_16F, in, &zero, y + r0, CUDA_R_32F, w->out_dim,
                                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (s != CUBLAS_STATUS_SUCCESS) {
            kvfs_log(KVFS_LOG_ERR, "cuda: cublasGemmEx failed (%d)", (int)s);
            return -EIO;
        }
    }
    return 0;
}

/* y = x . W^T in f32 (cuBLAS's sgemm) */
static int matmul_f32(struct cuda_ctx *c, const struct kvfs_weight *w, const float *x, float *y, int n)
{
    const float one = 1.0f, zero = 0.0f;
    /* row-major y[n][out] = x[n][in] . W[out][in]^T, i.e. column-major
     * Y(out x n) = W^T(out x in) . X(in x n) */
    cublasStatus_t s = cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, w->out_dim, n, w->in_dim, &one, w->w,
                                   w->in_dim, x, w->in_dim, &zero, y, w->out_dim);
    if (s != CUBLAS_STATUS_SUCCESS) {
        kvfs_log(KVFS_LOG_ERR, "cuda: cublasSgemm failed (%d)", (int)s);
        return -EIO;
    }
    return 0;
}

static int c_matmul(void *vctx, const struct kvfs_weight *w, const float *bias, const float *x, float *y, int n)
{
    if (n <= 0)
        return 0;
    int rc = w->q ? matmul_encoded(CTX, w, x, y, n) : matmul_f32(CTX, w, x, y, n);
    if (rc || !bias)
        return rc;
    size_t tot = (size_t)n * w->out_dim;
    k_add_bias<<<blocks(tot, 256), 256, 0, CTX->stream>>>(y, bias, n, w->out_dim);
    return LAUNCHED("add_bias");
}

/* Block-wide max / sum of one value per thread through shared red[blockDim.x];
 * every thread gets the result, and red may be reused right after. */
__device__ float block_max(float *red, float v)
{
    red[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
        __syncthreads();
    }
    v = red[0];
    __syncthreads();
    return v;
}

__device__ float block_sum(float *red, float v)
{
    red[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    v = red[0];
    __syncthreads();
    return v;
}

__global__ void k_rmsnorm(const float *x, const float *g, float *y, int dim, float eps)
{
    const float *xr = x + (size_t)blockIdx.x * dim;
    float *yr = y + (size_t)blockIdx.x * dim;
    __shared__ float part[256];
    float s = 0;
    for (int j = threadIdx.x; j < dim; j += blockDim.x)
        s += xr[j] * xr[j];
    float scale = rsqrtf(block_sum(part, s) / dim + eps);
    for (int j = threadIdx.x; j < dim; j += blockDim.x)
        yr[j] = xr[j] * scale * g[j];
}

static int c_rmsnorm(void *vctx, const float *x, const float *g, float *y, int n, int dim, float eps)
{
    if (n <= 0)
        return 0;
    k_rmsnorm<<<n, 256, 0, CTX->stream>>>(x, g, y, dim, eps);
    return LAUNCHED("rmsnorm");
}

__global__ void k_rope(float *x, const int32_t *pos, int n, int n_heads, int head_dim, int rope_dim, float theta,
                       int neox)
{
    int half = rope_dim / 2;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)n * n_heads * half)
        return;
    int j = (int)(i % half);
    size_t rh = i / half; /* row * n_heads + head */
    int row = (int)(rh / n_heads);
    float inv = powf(theta, -2.0f * (float)j / (float)rope_dim);
    float a = (float)pos[row] * inv, c = cosf(a), s = sinf(a);
    float *v = x + rh * head_dim;
    int i0 = neox ? j : 2 * j, i1 = neox ? j + half : 2 * j + 1;
    float x0 = v[i0], x1 = v[i1];
    v[i0] = x0 * c - x1 * s;
    v[i1] = x0 * s + x1 * c;
}

static int c_rope(void *vctx, float *x, const int32_t *pos, int n, int n_heads, int head_dim, int rope_dim,
                  float theta, int style)
{
    size_t tot = (size_t)n * n_heads * (rope_dim / 2);
    if (!tot)
        return 0;
    k_rope<<<blocks(tot, 256), 256, 0, CTX->stream>>>(x, pos, n, n_heads, head_dim, rope_dim, theta,
                                                       style == KVFS_ROPE_STYLE_NEOX);
    return LAUNCHED("rope");
}

__global__ void k_add(const float *a, const float *b, float *o, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        o[i] = a[i] + b[i];
}

static int c_add(void *vctx, const float *a, const float *b, float *out, size_t count)
{
    if (!count)
        return 0;
    k_add<<<blocks(count, 256), 256, 0, CTX->stream>>>(a, b, out, count);
    return LAUNCHED("add");
}

__global__ void k_swiglu(const float *g, const float *u, float *o, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float x = g[i];
        o[i] = x / (1.0f + expf(-x)) * u[i];
    }
}

static int c_swiglu(void *vctx, const float *gate, const float *up, float *out, size_t count)
{
    if (!count)
        return 0;
    k_swiglu<<<blocks(count, 256), 256, 0, CTX->stream>>>(gate, up, out, count);
    return LAUNCHED("swiglu");
}

__global__ void k_scale(const float *x, float sc, float *y, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = x[i] * sc;
}

static int c_scale(void *vctx, const float *x, float s, float *y, size_t count)
{
    if (!count)
        return 0;
    k_scale<<<blocks(count, 256), 256, 0, CTX->stream>>>(x, s, y, count);
    return LAUNCHED("scale");
}

/* GEGLU through ggml's table of GELU at every f16 value, rounded to f16 (as
 * the CPU backend's cpu_geglu): built on the host by the same function
 * (gpu/gelu.c, linked into the plugin), so both backends read the same table */
__global__ void k_geglu(const float *g, const float *u, float *o, const float *table, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float x = g[i];
        o[i] = x <= -10.0f ? 0.0f : x >= 10.0f ? x * u[i] : table[__half_as_ushort(__float2half_rn(x))] * u[i];
    }
}

static int c_geglu(void *vctx, const float *gate, const float *up, float *out, size_t count)
{
    struct cuda_ctx *c = CTX;
    if (!count)
        return 0;
    if (!c->gelu_table) {
        float *h = (float *)malloc(sizeof(float) << 16);
        if (!h)
            return -ENOMEM;
        for (uint32_t i = 0; i < (1u << 16); i++) {
            float g = kvfs_gelu_tanh(__half2float(__ushort_as_half((unsigned short)i)));
            h[i] = __half2float(__float2half_rn(g));
        }
        int rc = c_alloc(vctx, sizeof(float) << 16, (void **)&c->gelu_table);
        if (!rc && (rc = c_upload(vctx, c->gelu_table, h, sizeof(float) << 16))) {
            c_free(vctx, c->gelu_table);
            c->gelu_table = NULL;
        }
        free(h);
        if (rc)
            return rc;
    }
    k_geglu<<<blocks(count, 256), 256, 0, c->stream>>>(gate, up, out, c->gelu_table, count);
    return LAUNCHED("geglu");
}

__global__ void k_gather(const float *src, const int32_t *idx, float *out, int n_idx, int dim)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)n_idx * dim)
        out[i] = src[(size_t)idx[i / dim] * dim + i % dim];
}

__global__ void k_scatter(const float *src, const int32_t *idx, float *dst, int n_idx, int dim)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)n_idx * dim)
        dst[(size_t)idx[i / dim] * dim + i % dim] = src[i];
}

static int c_gather(void *vctx, const float *src, const int32_t *idx, float *out, int n_idx, int dim)
{
    size_t tot = (size_t)n_idx * dim;
    if (!tot)
        return 0;
    k_gather<<<blocks(tot, 256), 256, 0, CTX->stream>>>(src, idx, out, n_idx, dim);
    return LAUNCHED("gather_rows");
}

static int c_get_rows(void *vctx, const float *table, const int32_t *ids, float *out, int n, int dim)
{
    return c_gather(vctx, table, ids, out, n, dim);
}

static int c_scatter(void *vctx, const float *src, const int32_t *idx, float *dst, int n_idx, int dim)
{
    size_t tot = (size_t)n_idx * dim;
    if (!tot)
        return 0;
    k_scatter<<<blocks(tot, 256), 256, 0, CTX->stream>>>(src, idx, dst, n_idx, dim);
    return LAUNCHED("scatter_rows");
}

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
        int n_kv, int n_head, int n_kv_head, float scale, int window, float *out)
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
            if (!kv_seen(kp_s[sub + 4 * cc], my_pos, window))
                sc[cc] = -INFINITY;
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
        float inv = l > 0.0f ? 1.0f / l : 0.0f;
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
                            int window, float *out)
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
            s = dot * scale;
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
    float inv = l > 0.0f ? 1.0f / l : 0.0f;
    float *o = out + (size_t)i * qstride + h * head_dim;
    for (int r = 0; r * ATT_T + t < head_dim; r++)
        o[r * ATT_T + t] = acc[r] * inv;
}

template <int D>
static int launch_flash(struct cuda_ctx *c, const float *q, const int32_t *q_pos, int n_q, const float *k,
                        const float *v, const int32_t *kv_pos, int n_kv, int n_head, int n_kv_head, float scale,
                        int window, float *out)
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
                                                      window, out);
    return LAUNCHED("flash attention");
}

static int c_attention(void *vctx, const float *q, const int32_t *q_pos, int n_q, const float *k, const float *v,
                       const int32_t *kv_pos, int n_kv, int n_head, int n_kv_head, int head_dim, float scale,
                       int window, float *out)
{
    if (n_q <= 0)
        return 0;
    if (n_kv <= 0 || n_head % n_kv_head || head_dim > MAX_HD)
        return -EINVAL;
    /* 16 rows and more (prefills, a blend's recomputed rows) on the tensor
     * cores; a decoding step's row in f32 */
    if (CTX->attn_tc && n_q >= 16 && attn_tc_smem(head_dim) && attn_tc_smem(head_dim) <= CTX->smem_optin)
        return cuda_err(attn_tc(CTX->stream, head_dim, q, q_pos, n_q, k, v, kv_pos, n_kv, n_head, n_kv_head, scale,
                                window, out),
                        "attention (tensor cores)");
    if (head_dim == 128)
        return launch_flash<128>(CTX, q, q_pos, n_q, k, v, kv_pos, n_kv, n_head, n_kv_head, scale, window, out);
    if (head_dim == 64)
        return launch_flash<64>(CTX, q, q_pos, n_q, k, v, kv_pos, n_kv, n_head, n_kv_head, scale, window, out);
    dim3 grid((unsigned)n_q, (unsigned)n_head);
    k_attention<<<grid, ATT_T, 0, CTX->stream>>>(q, q_pos, k, v, kv_pos, n_kv, n_head, n_kv_head, head_dim, scale,
                                                  window, out);
    return LAUNCHED("attention");
}

/* one block per (query, head): the row's max and sum, then each visible kv
 * row's probability added to out (atomics: blocks share rows).  Scores are
 * recomputed in each pass rather than stored: the queries are few. */
__global__ void k_attn_mass(const float *q, const int32_t *q_pos, const float *k, const int32_t *kv_pos, int n_kv,
                            int n_head, int group, int head_dim, float scale, int window, float *out)
{
    __shared__ float qs[256];
    __shared__ float red[256];
    int i = blockIdx.x / n_head, h = blockIdx.x % n_head, kstride = n_head / group * head_dim;
    const float *qr = q + ((size_t)i * n_head + h) * head_dim, *kb = k + (size_t)(h / group) * head_dim;
    int32_t qp = q_pos[i];
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x)
        qs[d] = qr[d] * scale;
    __syncthreads();
    /* scaled score of kv row j, -INFINITY where the mask hides it */
    auto score = [&](int j) {
        if (!kv_seen(kv_pos[j], qp, window))
            return -INFINITY;
        const float *kr = kb + (size_t)j * kstride;
        float dot = 0;
        for (int d = 0; d < head_dim; d++)
            dot += qs[d] * kr[d];
        return dot;
    };
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < n_kv; j += blockDim.x)
        mx = fmaxf(mx, score(j));
    mx = block_max(red, mx);
    if (mx == -INFINITY)
        return; /* nothing visible */
    float sum = 0;
    for (int j = threadIdx.x; j < n_kv; j += blockDim.x)
        sum += expf(score(j) - mx); /* masked rows add exp(-inf) = 0 */
    float inv = 1.0f / block_sum(red, sum);
    for (int j = threadIdx.x; j < n_kv; j += blockDim.x) {
        float sc = score(j);
        if (sc != -INFINITY)
            atomicAdd(&out[j], expf(sc - mx) * inv);
    }
}

/* attn_mass for the usual case (a question's few rows against every key), in
 * three passes over the scores kept in a scratch buffer: scores with a warp
 * per key (each key row read whole by one warp: coalesced; k_attn_mass had
 * each thread read its own key, 256 rows at once, at every step of the dot
 * product: ~10 ms a layer of an 8B blend), each score row's max and sum, then
 * a thread per key adds up its probabilities over the rows (no atomics). */
#define MASS_KEYS 64 /* keys per block of the score pass */
__global__ void k_mass_scores(const float *q, const int32_t *q_pos, const float *k, const int32_t *kv_pos, int n_kv,
                              int n_head, int group, int head_dim, float scale, int window, float *S)
{
    __shared__ float qs[256];
    int row = blockIdx.x, i = row / n_head, h = row % n_head, kstride = n_head / group * head_dim;
    const float *qr = q + (size_t)row * head_dim, *kb = k + (size_t)(h / group) * head_dim;
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x)
        qs[d] = qr[d] * scale;
    __syncthreads();
    int32_t qp = q_pos[i];
    int w = threadIdx.x / 32, lane = threadIdx.x % 32, n_warps = blockDim.x / 32;
    for (int jj = w; jj < MASS_KEYS; jj += n_warps) {
        int j = blockIdx.y * MASS_KEYS + jj;
        if (j >= n_kv)
            break;
        const float *kr = kb + (size_t)j * kstride;
        float dot = 0.0f;
        for (int d = lane; d < head_dim; d += 32)
            dot += qs[d] * kr[d];
        for (int off = 16; off > 0; off >>= 1)
            dot += __shfl_xor_sync(0xffffffffu, dot, off);
        if (lane == 0)
            S[(size_t)row * n_kv + j] = kv_seen(kv_pos[j], qp, window) ? dot : -INFINITY;
    }
}

__global__ void k_mass_rows(const float *S, int n_kv, float *m, float *inv)
{
    __shared__ float red[256];
    const float *sr = S + (size_t)blockIdx.x * n_kv;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < n_kv; j += blockDim.x)
        mx = fmaxf(mx, sr[j]);
    mx = block_max(red, mx);
    float sum = 0.0f;
    if (mx != -INFINITY)
        for (int j = threadIdx.x; j < n_kv; j += blockDim.x)
            sum += expf(sr[j] - mx); /* masked keys add exp(-inf) = 0 */
    sum = block_sum(red, sum);
    if (threadIdx.x == 0) {
        m[blockIdx.x] = mx;
        inv[blockIdx.x] = mx == -INFINITY ? 0.0f : 1.0f / sum; /* a row that sees nothing adds nothing */
    }
}

__global__ void k_mass_keys(const float *S, int n_rows, int n_kv, const float *m, const float *inv, float *out)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n_kv)
        return;
    float acc = 0.0f;
    for (int r = 0; r < n_rows; r++) {
        float sc = S[(size_t)r * n_kv + j];
        if (sc != -INFINITY)
            acc += expf(sc - m[r]) * inv[r];
    }
    out[j] += acc;
}

static int c_attn_mass(void *vctx, const float *q, const int32_t *q_pos, int n_q, const float *k,
                       const int32_t *kv_pos, int n_kv, int n_head, int n_kv_head, int head_dim, float scale,
                       int window, float *out)
{
    if (n_q <= 0 || n_kv <= 0)
        return 0;
    if (n_head % n_kv_head || head_dim > 256)
        return -EINVAL;
    int group = n_head / n_kv_head, rows = n_q * n_head;
    size_t cells = (size_t)rows * n_kv;
    float *S = NULL;
    if (cells <= ((size_t)64 << 20) && c_alloc(vctx, sizeof(float) * (cells + 2 * (size_t)rows), (void **)&S) == 0) {
        float *m = S + cells, *inv = m + rows;
        k_mass_scores<<<dim3((unsigned)rows, (unsigned)((n_kv + MASS_KEYS - 1) / MASS_KEYS)), 256, 0, CTX->stream>>>(
            q, q_pos, k, kv_pos, n_kv, n_head, group, head_dim, scale, window, S);
        k_mass_rows<<<rows, 256, 0, CTX->stream>>>(S, n_kv, m, inv);
        k_mass_keys<<<blocks((size_t)n_kv, 256), 256, 0, CTX->stream>>>(S, rows, n_kv, m, inv, out);
        int rc = LAUNCHED("attn_mass");
        c_free(vctx, S); /* reused only by later work on this stream */
        return rc;
    }
    /* many query rows: one block per (query, head), nothing kept */
    k_attn_mass<<<n_q * n_head, 256, 0, CTX->stream>>>(q, q_pos, k, kv_pos, n_kv, n_head, group, head_dim, scale,
                                                       window, out);
    return LAUNCHED("attn_mass");
}

__global__ void k_sqdiff(const float *a, const float *b, float *out, int dim)
{
    __shared__ float part[256];
    const float *ar = a + (size_t)blockIdx.x * dim, *br = b + (size_t)blockIdx.x * dim;
    float s = 0;
    for (int j = threadIdx.x; j < dim; j += blockDim.x) {
        float d = ar[j] - br[j];
        s += d * d;
    }
    s = block_sum(part, s);
    if (threadIdx.x == 0)
        out[blockIdx.x] = s;
}

static int c_row_sqdiff(void *vctx, const float *a, const float *b, float *out, int n, int dim)
{
    if (n <= 0)
        return 0;
    k_sqdiff<<<n, 256, 0, CTX->stream>>>(a, b, out, dim);
    return LAUNCHED("row_sqdiff");
}

/* one warp per block of 32 values: max |x|, scale rounded to f16, round */
__global__ void k_act_quant(const float *x, float *y, size_t n_blocks)
{
    size_t b = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (b >= n_blocks)
        return;
    float v = x[b * 32 + lane], amax = fabsf(v);
    for (int o = 16; o > 0; o >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f; /* ggml (x86): not 1 / d */
    float dh = __half2float(__float2half_rn(d));
    y[b * 32 + lane] = rintf(v * id) * dh;
}

static int c_act_quant(void *vctx, const float *x, float *y, int n, int dim, int type)
{
    if (type == KVFS_GGML_Q8_K) { /* the K-quant weights' partner */
        if (dim % 256)
            return -EINVAL;
        return cuda_err(kq_act_q8k(CTX->stream, x, y, (size_t)n * dim / 256), "act_quant q8_k");
    }
    if (type != 8 && type != 9) /* Q8_0, Q8_1 */
        return -ENOTSUP;
    if (dim % 32)
        return -EINVAL;
    size_t nb = (size_t)n * dim / 32;
    if (!nb)
        return 0;
    k_act_quant<<<blocks(nb, 8), 256, 0, CTX->stream>>>(x, y, nb);
    return LAUNCHED("act_quant");
}

__global__ void k_round_f16(float *x, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] = __half2float(__float2half_rn(x[i]));
}

static int c_round_f16(void *vctx, float *x, size_t count)
{
    if (!count)
        return 0;
    k_round_f16<<<blocks(count, 256), 256, 0, CTX->stream>>>(x, count);
    return LAUNCHED("round_f16");
}

static void *copy_helper(void *arg)
{
    struct cuda_ctx *c = (struct cuda_ctx *)arg;
    struct copy_pool *p = &c->pool;
    pthread_mutex_lock(&p->mu);
    int me = -1;
    for (int i = 0; i < p->n_threads; i++)
        if (pthread_equal(p->th[i], pthread_self()))
            me = i;
    unsigned seen = p->generation;
    for (;;) {
        while (!p->stop && p->generation == seen)
            pthread_cond_wait(&p->work, &p->mu);
        if (p->stop)
            break;
        seen = p->generation;
        size_t off = (size_t)(me + 1) * p->part, n = off < p->bytes ? p->bytes - off : 0;
        if (n > p->part)
            n = p->part;
        char *dst = p->dst;
        const char *src = p->src;
        pthread_mutex_unlock(&p->mu);
        if (n)
            memcpy(dst + off, src + off, n);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void pool_start(struct cuda_ctx *c)
{
    struct copy_pool *p = &c->pool;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int want = ncpu / 2 - 1;
    if (want > COPY_THREADS_MAX)
        want = COPY_THREADS_MAX;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->done, NULL);
    pthread_mutex_lock(&p->mu); /* helpers look up their index under the lock */
    for (int i = 0; i < want; i++) {
        if (pthread_create(&p->th[i], NULL, copy_helper, c))
            break;
        p->n_threads = i + 1;
    }
    pthread_mutex_unlock(&p->mu);
}

static void pool_stop(struct cuda_ctx *c)
{
    struct copy_pool *p = &c->pool;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_threads; i++)
        pthread_join(p->th[i], NULL);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->mu);
}

static void pool_memcpy(struct cuda_ctx *c, void *dst, const void *src, size_t bytes)
{
    struct copy_pool *p = &c->pool;
    if (p->n_threads == 0 || bytes < ((size_t)1 << 20)) {
        memcpy(dst, src, bytes);
        return;
    }
    size_t part = (bytes / (p->n_threads + 1) + 63) & ~(size_t)63;
    pthread_mutex_lock(&p->mu);
    p->dst = (char *)dst;
    p->src = (const char *)src;
    p->bytes = bytes;
    p->part = part;
    p->pending = p->n_threads;
    p->generation++;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    memcpy(dst, src, part < bytes ? part : bytes);
    pthread_mutex_lock(&p->mu);
    while (p->pending)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

/* Token selection with CUB's radix sort (stable, so equal scores keep the
 * lower row first): sort (score, row) pairs by score, descending, with
 * forced rows at +inf; then the first k rows, ascending. */
__global__ void k_topk_keys(const float *s, const uint8_t *forced, int n, float *keys, int32_t *rows)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        keys[i] = forced && forced[i] ? INFINITY : s[i];
        rows[i] = i;
    }
}

static int c_topk(void *vctx, const float *scores, const uint8_t *forced, int n, int k, int32_t *out)
{
    struct cuda_ctx *c = CTX;
    if (k < 0 || k > n)
        return -EINVAL;
    if (k == 0)
        return 0;
    float *keys = NULL, *keys_sorted = NULL;
    int32_t *rows = NULL, *rows_sorted = NULL;
    void *tmp = NULL;
    size_t t_pairs = 0, t_keys = 0;
    int rc;
    if ((rc = c_alloc(vctx, sizeof(float) * (size_t)n, (void **)&keys)) ||
        (rc = c_alloc(vctx, sizeof(float) * (size_t)n, (void **)&keys_sorted)) ||
        (rc = c_alloc(vctx, sizeof(int32_t) * (size_t)n, (void **)&rows)) ||
        (rc = c_alloc(vctx, sizeof(int32_t) * (size_t)n, (void **)&rows_sorted)))
        goto out;
    if ((rc = cuda_err(cub::DeviceRadixSort::SortPairsDescending(nullptr, t_pairs, keys, keys_sorted, rows,
                                                                 rows_sorted, n, 0, 32, c->stream),
                       "cub sort (size)")) ||
        (rc = cuda_err(cub::DeviceRadixSort::SortKeys(nullptr, t_keys, rows_sorted, out, k, 0, 32, c->stream),
                       "cub sort (size)")) ||
        (rc = c_alloc(vctx, t_pairs > t_keys ? t_pairs : t_keys, &tmp)))
        goto out;
    k_topk_keys<<<blocks((size_t)n, 256), 256, 0, c->stream>>>(scores, forced, n, keys, rows);
    if ((rc = LAUNCHED("topk_keys")) ||
        (rc = cuda_err(cub::DeviceRadixSort::SortPairsDescending(tmp, t_pairs, keys, keys_sorted, rows, rows_sorted,
                                                                 n, 0, 32, c->stream),
                       "cub sort pairs")) ||
        (rc = cuda_err(cub::DeviceRadixSort::SortKeys(tmp, t_keys, rows_sorted, out, k, 0, 32, c->stream),
                       "cub sort rows")))
        goto out;
out:
    c_free(vctx, tmp);
    c_free(vctx, rows_sorted);
    c_free(vctx, rows);
    c_free(vctx, keys_sorted);
    c_free(vctx, keys);
    return rc;
}

__global__ void k_kv_to_f32(const void *src, float *dst, size_t n, int type)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    if (type == KVFS_HOST_F16)
        dst[i] = __half2float(((const __half *)src)[i]);
    else if (type == KVFS_HOST_BF16)
        dst[i] = __uint_as_float((unsigned)((const unsigned short *)src)[i] << 16);
    else
        dst[i] = ((const float *)src)[i];
}

/* The next slot of the staging ring holding `bytes` of host data, on the
 * device for kernels on c->stream: wait until its last kernel has read it,
 * copy through its pinned buffer on the copy stream, and order c->stream
 * after that copy.  The caller launches its kernel, then stage_done(). */
static int stage_put(struct cuda_ctx *c, const void *host, size_t bytes, struct stage_slot **out)
{
    struct stage_slot *sl = &c->stage[c->next_slot];
    c->next_slot = (c->next_slot + 1) % STAGE_SLOTS;
    if (!sl->host) {
        CK(cudaMallocHost(&sl->host, STAGE_BYTES));
        CK(cudaMalloc(&sl->dev, STAGE_BYTES));
    }
    if (sl->used)
        CK(cudaEventSynchronize(sl->consumed)); /* its last conversion has read it */
    pool_memcpy(c, sl->host, host, bytes);
    CK(cudaMemcpyAsync(sl->dev, sl->host, bytes, cudaMemcpyHostToDevice, c->copy_stream));
    CK(cudaEventRecord(sl->copied, c->copy_stream));
    CK(cudaStreamWaitEvent(c->stream, sl->copied, 0));
    *out = sl;
    return 0;
}

/* after the kernel that reads the slot was launched (its name for errors) */
static int stage_done(struct cuda_ctx *c, struct stage_slot *sl, const char *kernel)
{
    int rc = LAUNCHED(kernel);
    if (rc)
        return rc;
    CK(cudaEventRecord(sl->consumed, c->stream));
    sl->used = 1;
    return 0;
}

static int c_upload_kv(void *vctx, float *dst, const void *host, size_t count, int type)
{
    struct cuda_ctx *c = CTX;
    size_t esz = type == KVFS_HOST_F32 ? 4 : 2;
    if (type != KVFS_HOST_F32 && type != KVFS_HOST_F16 && type != KVFS_HOST_BF16)
        return -EINVAL;
    size_t per = STAGE_BYTES / esz;
    for (size_t done = 0; done < count; done += per) {
        size_t n = count - done < per ? count - done : per;
        struct stage_slot *sl;
        int rc = stage_put(c, (const char *)host + done * esz, n * esz, &sl);
        if (rc)
            return rc;
        k_kv_to_f32<<<blocks(n, 256), 256, 0, c->stream>>>(sl->dev, dst + done, n, type);
        if ((rc = stage_done(c, sl, "kv_to_f32")))
            return rc;
    }
    return 0;
}

/* Blocks [b0, b0 + nb) of a q8/q4/q4s layer's keys (which 0) or values (1)
 * (kvfs(5), index/kvquant.h), g values of bs bytes each, one thread per
 * value: a key block is one channel of g tokens, a value block g channels
 * of one token.  q4 and q4s: f16 step, f16 min, then nibbles, low first. */
__global__ void k_kvq_decode(const unsigned char *blk, size_t b0, size_t nb, unsigned g, unsigned bs, int which,
                             float *out, unsigned n_tokens, unsigned kv_dim, int codec)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nb * g)
        return;
    size_t b = b0 + i / g;
    unsigned pos = (unsigned)(i % g);
    const unsigned char *p = blk + (i / g) * bs;
    float d = __half2float(*(const __half *)p), x;
    if (codec == KVFS_KVQ_Q8)
        x = d * (float)(signed char)p[2 + pos];
    else
        x = __half2float(*(const __half *)(p + 2)) + d * (float)((p[4 + pos / 2] >> (4 * (pos & 1))) & 15);
    if (!which) {
        size_t t = (b / kv_dim) * g + pos;
        if (t < n_tokens) /* the last token group's padding is not returned */
            out[t * kv_dim + b % kv_dim] = x;
    } else {
        size_t per = kv_dim / g;
        out[(b / per) * kv_dim + (b % per) * g + pos] = x;
    }
}

/* A quantized layer through the staging ring as upload_kv's bytes go, whole
 * blocks per slot (keys, then values), decoded on the device */
static int c_upload_kvq(void *vctx, float *k, float *v, const void *src, uint32_t n_tokens, uint32_t kv_dim,
                        int codec)
{
    struct cuda_ctx *c = CTX;
    if ((codec != KVFS_KVQ_Q8 && codec != KVFS_KVQ_Q4 && codec != KVFS_KVQ_Q4S) || !n_tokens || !kv_dim || kv_dim % 64)
        return -EINVAL;
    const char *at = (const char *)src;
    if (kvfs_kvq_exact_rows(codec, n_tokens)) { /* q4s: its first row exact, K's then V's f16, before the blocks */
        int rc;
        if ((rc = c_upload_kv(vctx, k, at, kv_dim, KVFS_HOST_F16)) ||
            (rc = c_upload_kv(vctx, v, at + 2 * (size_t)kv_dim, kv_dim, KVFS_HOST_F16)))
            return rc;
        at += 4 * (size_t)kv_dim;
        k += kv_dim;
        v += kv_dim;
        if (!--n_tokens)
            return 0;
    }
    for (int which = 0; which < 2; which++) {
        size_t g = kvfs_kvq_group(codec, which), bs = kvfs_kvq_block_bytes(codec, which);
        size_t total = which ? (size_t)n_tokens * (kv_dim / g) : ((n_tokens + g - 1) / g) * kv_dim;
        size_t per = STAGE_BYTES / bs;
        for (size_t done = 0; done < total; done += per) {
            size_t nb = total - done < per ? total - done : per;
            struct stage_slot *sl;
            int rc = stage_put(c, at + done * bs, nb * bs, &sl);
            if (rc)
                return rc;
            k_kvq_decode<<<blocks(nb * g, 256), 256, 0, c->stream>>>((const unsigned char *)sl->dev, done, nb,
                                                                      (unsigned)g, (unsigned)bs, which, which ? v : k,
                                                                      n_tokens, kv_dim, codec);
            if ((rc = stage_done(c, sl, "kvq_decode")))
                return rc;
        }
        at += total * bs;
    }
    return 0;
}

static void c_destroy(void *vctx)
{
    struct cuda_ctx *c = CTX;
    pool_stop(c);
    cudaStreamSynchronize(c->stream);
    cudaStreamSynchronize(c->copy_stream);
    for (int i = 0; i < STAGE_SLOTS; i++) {
        if (c->stage[i].host)
            cudaFreeHost(c->stage[i].host);
        if (c->stage[i].dev)
            cudaFree(c->stage[i].dev);
        cudaEventDestroy(c->stage[i].copied);
        cudaEventDestroy(c->stage[i].consumed);
    }
    cudaStreamDestroy(c->copy_stream);
    cache_release(c);
    for (int i = 0; i < c->n_live; i++) /* weights and buffers nobody freed */
        cudaFree(c->live[i].p);
    free(c->live);
    if (c->counted)
        __atomic_sub_fetch(&live_contexts, 1, __ATOMIC_RELAXED);
    cudaFree(c->wh);
    cudaFree(c->xh);
    cublasDestroy(c->blas);
    cudaStreamDestroy(c->stream);
    free(c);
}

static const struct kvfs_backend_iface cuda_iface = {
    /* .name = */ "cuda",
    /* .thread_safe = */ 0, /* one stream and one cuBLAS handle: blends at once take a context each (lanes) */
    /* .alloc = */ c_alloc,
    /* .free = */ c_free,
    /* .upload = */ c_upload,
    /* .download = */ c_download,
    /* .synchronize = */ c_sync,
    /* .copy = */ c_copy,
    /* .weight_create = */ c_weight_create,
    /* .weight_free = */ c_weight_free,
    /* .matmul = */ c_matmul,
    /* .rmsnorm = */ c_rmsnorm,
    /* .rope = */ c_rope,
    /* .add = */ c_add,
    /* .swiglu = */ c_swiglu,
    /* .get_rows = */ c_get_rows,
    /* .attention = */ c_attention,
    /* .attn_mass = */ c_attn_mass,
    /* .row_sqdiff = */ c_row_sqdiff,
    /* .gather_rows = */ c_gather,
    /* .scatter_rows = */ c_scatter,
    /* .act_quant = */ c_act_quant,
    /* .round_f16 = */ c_round_f16,
    /* .topk = */ c_topk,
    /* .upload_kv = */ c_upload_kv,
    /* .destroy = */ c_destroy,
    /* .weight_create_quant = */ c_weight_create_quant, /* Q4_0..Q8_0, Q4_K, Q5_K, Q6_K; others in f32 */
    /* .weight_rows = */ c_weight_rows,
    /* .matmul_act = */ NULL,
    /* .scale = */ c_scale,
    /* .geglu = */ c_geglu,
    /* .trim = */ NULL, /* its cache of device buffers is bounded instead (cache_limit) */
    /* .upload_kvq = */ c_upload_kvq,
    /* .host_memory = */ 0, /* device memory: the host sees it through upload/download */
};

static int cuda_init(int device, struct kvfs_backend *out)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count <= device)
        return -ENODEV;
    struct cuda_ctx *c = (struct cuda_ctx *)calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->device = device;
    pool_start(c);
    size_t free_b = 0, total_b = 0;
    if (cuda_err(cudaSetDevice(device), "cudaSetDevice") ||
        cuda_err(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "cudaStreamCreate")) {
        pool_stop(c);
        free(c);
        return -ENODEV;
    }
    if (cuda_err(cudaStreamCreateWithFlags(&c->copy_stream, cudaStreamNonBlocking), "cudaStreamCreate(copy)")) {
        c_destroy(c);
        return -ENODEV;
    }
    for (int i = 0; i < STAGE_SLOTS; i++)
        if (cuda_err(cudaEventCreateWithFlags(&c->stage[i].copied, cudaEventDisableTiming), "cudaEventCreate") ||
            cuda_err(cudaEventCreateWithFlags(&c->stage[i].consumed, cudaEventDisableTiming), "cudaEventCreate")) {
            c_destroy(c); /* events not created yet are null: destroying them is harmless */
            return -ENODEV;
        }
    if (cublasCreate(&c->blas) != CUBLAS_STATUS_SUCCESS) {
        c_destroy(c);
        return -ENODEV;
    }
    cublasSetStream(c->blas, c->stream);
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
        c->cache_limit = total_b / 8; /* cached, unused device memory stays under 1/8 of the device */
    cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH); /* full fp32: comparable with the CPU reference */
    const char *e = getenv("KVFS_CUDA_DECODE_ELEMS"); /* tests: small slices, many of them */
    c->wh_max = e && atol(e) > 0 ? (size_t)atol(e) : WH_MAX;
    e = getenv("KVFS_CUDA_ATTN");
    c->attn_tc = !(e && !strcmp(e, "f32"));
    int optin = 0; /* head dims whose tensor-core kernel does not fit (128 on sm_86/89, 256 on sm_80) use f32 */
    if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess)
        cudaGetLastError();
    c->smem_optin = optin > 0 ? (size_t)optin : 48 << 10;
    __atomic_add_fetch(&live_contexts, 1, __ATOMIC_RELAXED);
    c->counted = 1;
    out->iface = &cuda_iface;
    out->ctx = c;
    return 0;
}

/* The plugin's one entry (gpu/backend.c dlopens libkvfs-cuda.so): lines go
 * to the host's log, the version is the interface's. */
extern "C" __attribute__((visibility("default"))) int kvfs_cuda_plugin_init(int version, int device,
                                                                           struct kvfs_backend *out, kvfs_log_fn log)
{
    if (version != KVFS_CUDA_PLUGIN_VERSION)
        return -ENOEXEC;
    if (log)
        kvfs_set_log(log);
    return cuda_init(device, out);
}
