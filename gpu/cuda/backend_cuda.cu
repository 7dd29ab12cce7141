// backend_cuda.cu - the CUDA backend: cuBLAS for the matrix products, small
// kernels for everything else, attention as a flash-style kernel (online
// softmax over key tiles; no n_q x n_kv matrix in memory).  Same semantics as
// the CPU reference (gpu/cpu/); gpu_test_backend_ops compares them.
#include "cuda_internal.cuh"

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
int dev_malloc(struct cuda_ctx *c, void **p, size_t len)
{
    if (cudaMalloc(p, len) == cudaSuccess)
        return 0;
    cudaGetLastError();
    cache_release(c);
    cudaError_t e = cudaMalloc(p, len);
    /* a failed cudaMalloc also sets the last error: cleared, so a caller that
     * goes on without the memory does not see it at its next launch check */
    cudaGetLastError();
    return cuda_err(e, "cudaMalloc");
}

int c_alloc(void *vctx, size_t bytes, void **dev)
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

void c_free(void *vctx, void *dev)
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

int c_upload(void *vctx, void *dev, const void *host, size_t bytes)
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
    /* and the copies (upload_kv's staging): a failure after one was queued
     * left the compute stream without its wait on it */
    CK(cudaStreamSynchronize(CTX->copy_stream));
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
    /* MXFP4's byte scale reaches past f16, which large products decode to:
     * a block scaled over 2^12 (its values past 12 x 2^12) keeps it f32 */
    for (size_t b = 0; type == KVFS_GGML_MXFP4 && b < row_bytes / bytes * (size_t)out_dim; b++)
        if (((const uint8_t *)data)[b * bytes] > 140)
            return -ENOTSUP;
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
static int stage_put(struct cuda_ctx *c, const void *host, size_t bytes, int pinned, struct stage_slot **out)
{
    struct stage_slot *sl = &c->stage[c->next_slot];
    c->next_slot = (c->next_slot + 1) % STAGE_SLOTS;
    if (!sl->host) {
        CK(cudaMallocHost(&sl->host, STAGE_BYTES));
        CK(cudaMalloc(&sl->dev, STAGE_BYTES));
    }
    if (sl->used)
        CK(cudaEventSynchronize(sl->consumed)); /* its last conversion has read it */
    if (pinned) { /* page-locked already (host_register): DMA straight from it */
        CK(cudaMemcpyAsync(sl->dev, host, bytes, cudaMemcpyHostToDevice, c->copy_stream));
    } else {
        pool_memcpy(c, sl->host, host, bytes);
        CK(cudaMemcpyAsync(sl->dev, sl->host, bytes, cudaMemcpyHostToDevice, c->copy_stream));
    }
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

/* 1 if host memory is page-locked (cudaHostRegister'ed or cudaMallocHost'ed) */
static int is_pinned(const void *host)
{
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, host) != cudaSuccess) {
        cudaGetLastError(); /* not an error to keep */
        return 0;
    }
    return a.type == cudaMemoryTypeHost;
}

static int c_host_register(void *vctx, void *host, size_t bytes)
{
    struct cuda_ctx *c = CTX;
    CK(cudaSetDevice(c->device));
    cudaError_t e = cudaHostRegister(host, bytes, cudaHostRegisterPortable);
    if (e != cudaSuccess)
        cudaGetLastError(); /* the caller goes on unlocked: not an error for the next launch's check */
    if (e == cudaErrorHostMemoryAlreadyRegistered)
        return -EEXIST;
    return cuda_err(e, "cudaHostRegister");
}

/* needs no context: called for an image freed after its blend service */
static void c_host_unregister(void *vctx, void *host)
{
    (void)vctx;
    if (cudaHostUnregister(host) != cudaSuccess)
        cudaGetLastError();
}

static int c_upload_kv_pinned(void *vctx, float *dst, const void *host, size_t count, int type, int pinned)
{
    struct cuda_ctx *c = CTX;
    size_t esz = type == KVFS_HOST_F32 ? 4 : 2;
    if (type != KVFS_HOST_F32 && type != KVFS_HOST_F16 && type != KVFS_HOST_BF16)
        return -EINVAL;
    size_t per = STAGE_BYTES / esz;
    for (size_t done = 0; done < count; done += per) {
        size_t n = count - done < per ? count - done : per;
        struct stage_slot *sl;
        int rc = stage_put(c, (const char *)host + done * esz, n * esz, pinned, &sl);
        if (rc)
            return rc;
        k_kv_to_f32<<<blocks(n, 256), 256, 0, c->stream>>>(sl->dev, dst + done, n, type);
        if ((rc = stage_done(c, sl, "kv_to_f32")))
            return rc;
    }
    return 0;
}

static int c_upload_kv(void *vctx, float *dst, const void *host, size_t count, int type)
{
    return c_upload_kv_pinned(vctx, dst, host, count, type, is_pinned(host));
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
    int pinned = is_pinned(src);
    if (kvfs_kvq_exact_rows(codec, n_tokens)) { /* q4s: its first row exact, K's then V's f16, before the blocks */
        int rc;
        if ((rc = c_upload_kv_pinned(vctx, k, at, kv_dim, KVFS_HOST_F16, pinned)) ||
            (rc = c_upload_kv_pinned(vctx, v, at + 2 * (size_t)kv_dim, kv_dim, KVFS_HOST_F16, pinned)))
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
            int rc = stage_put(c, at + done * bs, nb * bs, pinned, &sl);
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
    cudaFree(c->attn_part);
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
    /* .weight_create_quant = */ c_weight_create_quant, /* Q4_0..Q8_0, Q4_K, Q5_K, Q6_K, MXFP4; others in f32 */
    /* .weight_rows = */ c_weight_rows,
    /* .matmul_act = */ NULL,
    /* .scale = */ c_scale,
    /* .geglu = */ c_geglu,
    /* .trim = */ NULL, /* its cache of device buffers is bounded instead (cache_limit) */
    /* .upload_kvq = */ c_upload_kvq,
    /* .host_memory = */ 0, /* device memory: the host sees it through upload/download */
    /* .chunk_shift = */ c_chunk_shift,
    /* .host_register = */ c_host_register,
    /* .host_unregister = */ c_host_unregister,
    /* .mul_rows = */ c_mul_rows,
    /* .attention_sinks = */ c_attention_sinks,
    /* .attn_mass_sinks = */ c_attn_mass_sinks,
    /* .swiglu_oai = */ c_swiglu_oai,
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
    e = getenv("KVFS_CUDA_ATTN_SPLIT"); /* A/B runs and tests: 0 never, N always N runs */
    c->attn_split = e && *e ? atoi(e) : -1;
    if (cudaDeviceGetAttribute(&c->n_sm, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
        cudaGetLastError();
        c->n_sm = 0; /* unknown: never split */
    }
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

