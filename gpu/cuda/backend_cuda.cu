// backend_cuda.cu - the CUDA backend: cuBLAS for the matrix products, small
// kernels for everything else, attention as a flash-style kernel (online
// softmax over key tiles; no n_q x n_kv matrix in memory).  Same semantics as
// the CPU reference (gpu/backend_cpu.c); gpu_test_backend_ops compares them.
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "backend.h"
#include "store.h" /* kvfs_log */
}

struct cuda_ctx {
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
};

struct kvfs_weight {
    float *w; /* device [out_dim][in_dim] */
    int out_dim, in_dim;
};

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

static int c_alloc(void *vctx, size_t bytes, void **dev)
{
    (void)vctx;
    CK(cudaMalloc(dev, bytes ? bytes : 16));
    return 0;
}

static void c_free(void *vctx, void *dev)
{
    (void)vctx;
    if (dev)
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
    struct kvfs_weight *w = (struct kvfs_weight *)malloc(sizeof(*w));
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
        free(w);
    }
}

__global__ void k_add_bias(float *y, const float *b, int n, int d)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)n * d)
        y[i] += b[i % d];
}

static unsigned blocks(size_t n, unsigned t) { return (unsigned)((n + t - 1) / t); }

static int c_matmul(void *vctx, const struct kvfs_weight *w, const float *bias, const float *x, float *y, int n)
{
    if (n <= 0)
        return 0;
    const float one = 1.0f, zero = 0.0f;
    /* row-major y[n][out] = x[n][in] . W[out][in]^T, i.e. column-major
     * Y(out x n) = W^T(out x in) . X(in x n) */
    cublasStatus_t s = cublasSgemm(CTX->blas, CUBLAS_OP_T, CUBLAS_OP_N, w->out_dim, n, w->in_dim, &one, w->w,
                                   w->in_dim, x, w->in_dim, &zero, y, w->out_dim);
    if (s != CUBLAS_STATUS_SUCCESS) {
        kvfs_log(KVFS_LOG_ERR, "cuda: cublasSgemm failed (%d)", (int)s);
        return -EIO;
    }
    if (bias) {
        size_t tot = (size_t)n * w->out_dim;
        k_add_bias<<<blocks(tot, 256), 256, 0, CTX->stream>>>(y, bias, n, w->out_dim);
        return LAUNCHED("add_bias");
    }
    return 0;
}

__global__ void k_rmsnorm(const float *x, const float *g, float *y, int dim, float eps)
{
    const float *xr = x + (size_t)blockIdx.x * dim;
    float *yr = y + (size_t)blockIdx.x * dim;
    __shared__ float part[256];
    float s = 0;
    for (int j = threadIdx.x; j < dim; j += blockDim.x)
        s += xr[j] * xr[j];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k)
            part[threadIdx.x] += part[threadIdx.x + k];
        __syncthreads();
    }
    float scale = rsqrtf(part[0] / dim + eps);
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

/* Flash-style attention: one block per (query row, head), 128 threads.
 * Keys are visited in tiles of 128 (one key per thread computes q.k);
 * a running max and sum rescale the output accumulator (online softmax). */
#define ATT_T 128
#define MAX_HD 256
__global__ void k_attention(const float *q, const int32_t *q_pos, const float *k, const float *v,
                            const int32_t *kv_pos, int n_kv, int n_head, int n_kv_head, int head_dim, float scale,
                            float *out)
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
        if (j < n_kv && kv_pos[j] <= qp) {
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

static int c_attention(void *vctx, const float *q, const int32_t *q_pos, int n_q, const float *k, const float *v,
                       const int32_t *kv_pos, int n_kv, int n_head, int n_kv_head, int head_dim, float scale,
                       float *out)
{
    if (n_q <= 0)
        return 0;
    if (n_kv <= 0 || n_head % n_kv_head || head_dim > MAX_HD)
        return -EINVAL;
    dim3 grid((unsigned)n_q, (unsigned)n_head);
    k_attention<<<grid, ATT_T, 0, CTX->stream>>>(q, q_pos, k, v, kv_pos, n_kv, n_head, n_kv_head, head_dim, scale,
                                                  out);
    return LAUNCHED("attention");
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
    part[threadIdx.x] = s;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k)
            part[threadIdx.x] += part[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        out[blockIdx.x] = part[0];
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
    float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    float dh = __half2float(__float2half_rn(d));
    y[b * 32 + lane] = rintf(v * id) * dh;
}

static int c_act_quant(void *vctx, const float *x, float *y, int n, int dim, int type)
{
    (void)type;
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

static void c_destroy(void *vctx)
{
    struct cuda_ctx *c = CTX;
    cudaStreamSynchronize(c->stream);
    cublasDestroy(c->blas);
    cudaStreamDestroy(c->stream);
    free(c);
}

static const struct kvfs_backend_iface cuda_iface = {
    /* .name = */ "cuda",
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
    /* .row_sqdiff = */ c_row_sqdiff,
    /* .gather_rows = */ c_gather,
    /* .scatter_rows = */ c_scatter,
    /* .act_quant = */ c_act_quant,
    /* .round_f16 = */ c_round_f16,
    /* .destroy = */ c_destroy,
};

extern "C" int kvfs_backend_cuda_init(int device, struct kvfs_backend *out)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count <= device)
        return -ENODEV;
    struct cuda_ctx *c = (struct cuda_ctx *)calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->device = device;
    if (cuda_err(cudaSetDevice(device), "cudaSetDevice") ||
        cuda_err(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "cudaStreamCreate")) {
        free(c);
        return -ENODEV;
    }
    if (cublasCreate(&c->blas) != CUBLAS_STATUS_SUCCESS) {
        cudaStreamDestroy(c->stream);
        free(c);
        return -ENODEV;
    }
    cublasSetStream(c->blas, c->stream);
    cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH); /* full fp32: comparable with the CPU reference */
    out->iface = &cuda_iface;
    out->ctx = c;
    return 0;
}
