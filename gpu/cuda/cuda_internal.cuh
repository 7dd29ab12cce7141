// cuda_internal.cuh - what the CUDA backend's files share: its context and
// weights, the error checks, launch sizes, block reductions, and the entries
// of the interface each file defines (backend_cuda.cu holds the table).
#ifndef KVFS_CUDA_INTERNAL_CUH
#define KVFS_CUDA_INTERNAL_CUH

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
#include "ggml_quant.h"
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
    int attn_split;        /* its keys split: -1 as attn_tc_split_plan says, 0 never, N: N runs (KVFS_CUDA_ATTN_SPLIT) */
    int n_sm;              /* the device's multiprocessors */
    float *attn_part;      /* the split's scratch (grown, never shrunk; one stream) */
    size_t attn_part_cap;  /* bytes */
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

/* cudaMalloc, giving the context's cache of idle blocks back and trying
 * once more when the device is full (backend_cuda.cu) */
int dev_malloc(struct cuda_ctx *c, void **p, size_t len);

static inline int cuda_err(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 0;
    kvfs_log(KVFS_LOG_ERR, "cuda: %s: %s", what, cudaGetErrorString(e));
    return e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}

#define CK(call) do { int _rc = cuda_err((call), #call); if (_rc) return _rc; } while (0)
#define LAUNCHED(what) cuda_err(cudaGetLastError(), what)
#define CTX ((struct cuda_ctx *)vctx)

static inline unsigned blocks(size_t n, unsigned t) { return (unsigned)((n + t - 1) / t); }

/* Block-wide max / sum of one value per thread through shared red[blockDim.x];
 * every thread gets the result, and red may be reused right after. */
static __device__ __forceinline__ float block_max(float *red, float v)
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

static __device__ __forceinline__ float block_sum(float *red, float v)
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


/* backend_cuda.cu */
int c_alloc(void *vctx, size_t bytes, void **dev);
void c_free(void *vctx, void *dev);
int c_upload(void *vctx, void *dev, const void *host, size_t bytes);
/* elementwise_cuda.cu */
int c_rmsnorm(void *vctx, const float *x, const float *g, float *y, int n, int dim, float eps);
int c_rope(void *vctx, float *x, const int32_t *pos, int n, int n_heads, int head_dim, int rope_dim, float theta,
           int style, const float *freq_factors);
/* rope's frequency factors by value, for a kernel's parameters (rope_dim / 2
 * of them at most ROPE_FACTORS_MAX: -ENOTSUP beyond) */
#define ROPE_FACTORS_MAX 256
struct rope_factors {
    float f[ROPE_FACTORS_MAX];
};
int rope_factors_of(const float *freq_factors, int rope_dim, struct rope_factors *out);
int c_add(void *vctx, const float *a, const float *b, float *out, size_t count);
int c_swiglu(void *vctx, const float *gate, const float *up, float *out, size_t count);
int c_scale(void *vctx, const float *x, float s, float *y, size_t count);
int c_geglu(void *vctx, const float *gate, const float *up, float *out, size_t count);
int c_mul_rows(void *vctx, const float *x, const float *s, float *y, int n, int dim);
int c_swiglu_oai(void *vctx, const float *gate, const float *up, float *out, size_t count, float alpha, float limit);
int c_gather(void *vctx, const float *src, const int32_t *idx, float *out, int n_idx, int dim);
int c_get_rows(void *vctx, const float *table, const int32_t *ids, float *out, int n, int dim);
int c_scatter(void *vctx, const float *src, const int32_t *idx, float *dst, int n_idx, int dim);
int c_row_sqdiff(void *vctx, const float *a, const float *b, float *out, int n, int dim);
int c_act_quant(void *vctx, const float *x, float *y, int n, int dim, int type);
int c_round_f16(void *vctx, float *x, size_t count);
/* shift_cuda.cu */
int c_chunk_shift(void *vctx, float *cache, const float *fresh, const int32_t *idx, int n_sel,
                  const int32_t *chunk_of, const int32_t *pos, int n_chunks, int row_lo, int n_rows, int kv_dim,
                  int head_dim, float shift, const struct kvfs_rope_args *rope);
/* attention_cuda.cu */
int c_attention(void *vctx, const float *q, const int32_t *q_pos, int n_q, const float *k, const float *v,
                const int32_t *kv_pos, int n_kv, int n_head, int n_kv_head, int head_dim, float scale, int window,
                float softcap, float *out);
int c_attn_mass(void *vctx, const float *q, const int32_t *q_pos, int n_q, const float *k, const int32_t *kv_pos,
                int n_kv, int n_head, int n_kv_head, int head_dim, float scale, int window, float softcap,
                float *out);
/* the same with gpt-oss's sinks (device f32[n_head], NULL: none) */
int c_attention_sinks(void *vctx, const float *q, const int32_t *q_pos, int n_q, const float *k, const float *v,
                      const int32_t *kv_pos, int n_kv, int n_head, int n_kv_head, int head_dim, float scale,
                      int window, float softcap, const float *sinks, float *out);
int c_attn_mass_sinks(void *vctx, const float *q, const int32_t *q_pos, int n_q, const float *k,
                      const int32_t *kv_pos, int n_kv, int n_head, int n_kv_head, int head_dim, float scale,
                      int window, float softcap, const float *sinks, float *out);

#endif
