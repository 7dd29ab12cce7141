// elementwise_cuda.cu - the CUDA backend's row-wise and elementwise kernels:
// norms, RoPE, adds, gated activations, row gathers, activation rounding.
// Same semantics as the CPU backend's (gpu/cpu/elementwise.c, act_quant.c).
#include "cuda_internal.cuh"

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

int c_rmsnorm(void *vctx, const float *x, const float *g, float *y, int n, int dim, float eps)
{
    if (n <= 0)
        return 0;
    k_rmsnorm<<<n, 256, 0, CTX->stream>>>(x, g, y, dim, eps);
    return LAUNCHED("rmsnorm");
}

__global__ void k_rope(float *x, const int32_t *pos, int n, int n_heads, int head_dim, int rope_dim, float theta,
                       int neox, struct rope_factors ff, int has_ff)
{
    int half = rope_dim / 2;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)n * n_heads * half)
        return;
    int j = (int)(i % half);
    size_t rh = i / half; /* row * n_heads + head */
    int row = (int)(rh / n_heads);
    float inv = powf(theta, -2.0f * (float)j / (float)rope_dim);
    float a = (float)pos[row] * inv;
    if (has_ff)
        a /= ff.f[j]; /* ggml's rope_ext: theta / freq_factor */
    float c = cosf(a), s = sinf(a);
    float *v = x + rh * head_dim;
    int i0 = neox ? j : 2 * j, i1 = neox ? j + half : 2 * j + 1;
    float x0 = v[i0], x1 = v[i1];
    v[i0] = x0 * c - x1 * s;
    v[i1] = x0 * s + x1 * c;
}

int rope_factors_of(const float *freq_factors, int rope_dim, struct rope_factors *out)
{
    memset(out, 0, sizeof(*out));
    if (!freq_factors)
        return 0;
    if (rope_dim / 2 > ROPE_FACTORS_MAX)
        return -ENOTSUP;
    memcpy(out->f, freq_factors, sizeof(float) * (size_t)(rope_dim / 2));
    return 0;
}

int c_rope(void *vctx, float *x, const int32_t *pos, int n, int n_heads, int head_dim, int rope_dim,
                  float theta, int style, const float *freq_factors)
{
    size_t tot = (size_t)n * n_heads * (rope_dim / 2);
    struct rope_factors ff;
    int rc = rope_factors_of(freq_factors, rope_dim, &ff);
    if (rc || !tot)
        return rc;
    k_rope<<<blocks(tot, 256), 256, 0, CTX->stream>>>(x, pos, n, n_heads, head_dim, rope_dim, theta,
                                                       style == KVFS_ROPE_STYLE_NEOX, ff, freq_factors != NULL);
    return LAUNCHED("rope");
}

__global__ void k_add(const float *a, const float *b, float *o, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        o[i] = a[i] + b[i];
}

int c_add(void *vctx, const float *a, const float *b, float *out, size_t count)
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

int c_swiglu(void *vctx, const float *gate, const float *up, float *out, size_t count)
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

int c_scale(void *vctx, const float *x, float s, float *y, size_t count)
{
    if (!count)
        return 0;
    k_scale<<<blocks(count, 256), 256, 0, CTX->stream>>>(x, s, y, count);
    return LAUNCHED("scale");
}

/* gpt-oss's clamped SwiGLU, ggml's swiglu_oai operation for operation (the
 * CPU backend's cpu_swiglu_oai): only the device's expf differs, by an ulp
 * or two.  out may alias gate. */
__global__ void k_swiglu_oai(const float *g, const float *u, float *o, size_t n, float alpha, float limit)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float x = g[i] < limit ? g[i] : limit;
        float y = u[i] < -limit ? -limit : u[i] > limit ? limit : u[i];
        float glu = x / (1.0f + expf(alpha * (-x)));
        o[i] = glu * (y + 1.0f);
    }
}

int c_swiglu_oai(void *vctx, const float *gate, const float *up, float *out, size_t count, float alpha, float limit)
{
    if (!count)
        return 0;
    k_swiglu_oai<<<blocks(count, 256), 256, 0, CTX->stream>>>(gate, up, out, count, alpha, limit);
    return LAUNCHED("swiglu_oai");
}

/* y[i][j] = x[i][j] * s[i]: the experts' outputs times their routing
 * weights (one product per element, as the CPU backend's cpu_mul_rows) */
__global__ void k_mul_rows(const float *x, const float *s, float *y, size_t n_el, int dim)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n_el)
        y[i] = x[i] * s[i / (size_t)dim];
}

int c_mul_rows(void *vctx, const float *x, const float *s, float *y, int n, int dim)
{
    if (n <= 0 || dim <= 0)
        return 0;
    size_t count = (size_t)n * (size_t)dim;
    k_mul_rows<<<blocks(count, 256), 256, 0, CTX->stream>>>(x, s, y, count, dim);
    return LAUNCHED("mul_rows");
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

int c_geglu(void *vctx, const float *gate, const float *up, float *out, size_t count)
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

int c_gather(void *vctx, const float *src, const int32_t *idx, float *out, int n_idx, int dim)
{
    size_t tot = (size_t)n_idx * dim;
    if (!tot)
        return 0;
    k_gather<<<blocks(tot, 256), 256, 0, CTX->stream>>>(src, idx, out, n_idx, dim);
    return LAUNCHED("gather_rows");
}

int c_get_rows(void *vctx, const float *table, const int32_t *ids, float *out, int n, int dim)
{
    return c_gather(vctx, table, ids, out, n, dim);
}

int c_scatter(void *vctx, const float *src, const int32_t *idx, float *dst, int n_idx, int dim)
{
    size_t tot = (size_t)n_idx * dim;
    if (!tot)
        return 0;
    k_scatter<<<blocks(tot, 256), 256, 0, CTX->stream>>>(src, idx, dst, n_idx, dim);
    return LAUNCHED("scatter_rows");
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

int c_row_sqdiff(void *vctx, const float *a, const float *b, float *out, int n, int dim)
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

int c_act_quant(void *vctx, const float *x, float *y, int n, int dim, int type)
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

int c_round_f16(void *vctx, float *x, size_t count)
{
    if (!count)
        return 0;
    k_round_f16<<<blocks(count, 256), 256, 0, CTX->stream>>>(x, count);
    return LAUNCHED("round_f16");
}

