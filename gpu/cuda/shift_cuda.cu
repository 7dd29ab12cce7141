// shift_cuda.cu - the chunk shift on the device (backend.h chunk_shift;
// the host's version and the why: blend/shift.c).  On the host it cost an
// 8B blend ~220 ms: every later chunk row's shift made on one thread,
// rotated there and uploaded pageable, layer by layer (0.8 GB in all).
// Here it is three small kernels per layer and nothing crosses the bus.
//
// The arithmetic follows blend/shift.c's: differences in f32, rotations in
// f64 rounded to f32, each chunk's mean summed in the order of idx (in
// parts of it, then the parts in order: rounding apart), scaled by shift /
// count, added in f32.  Angles come from cos/sin of the position
// (the host steps them from row to row: the same to ~1e-15), so the two
// agree to rounding; gpu_test_backend_ops checks them against each other.
#include "cuda_internal.cuh"

/* a layer's RoPE, by value for the kernels (kvfs_rope_args with its
 * frequency factors copied in) */
struct shift_rope {
    int rope_dim, style, has_ff;
    float theta;
    struct rope_factors ff;
};

/* RoPE's frequency of pair j, as the host computes it (f32 pow, then f64,
 * divided by the factor) */
static __device__ __forceinline__ double inv_freq(const struct shift_rope *r, int j)
{
    double f = (double)powf(r->theta, -2.0f * (float)j / (float)r->rope_dim);
    return r->has_ff ? f / (double)r->ff.f[j] : f;
}

/* Element d of one head's row v rotated by angle pos * inv (keys, dims
 * below rope_dim; other dims and values as they are): f32 in, f64 math. */
static __device__ __forceinline__ float rotated(const float *v, int d, int32_t pos, const struct shift_rope *r)
{
    int half = r ? r->rope_dim / 2 : 0;
    if (!r || d >= r->rope_dim)
        return v[d];
    int j, first, i0, i1;
    if (r->style == KVFS_ROPE_STYLE_NEOX)
        j = d < half ? d : d - half, first = d < half, i0 = j, i1 = j + half;
    else
        j = d / 2, first = !(d & 1), i0 = 2 * j, i1 = 2 * j + 1;
    double a = (double)pos * inv_freq(r, j), s, c;
    sincos(a, &s, &c);
    double x0 = v[i0], x1 = v[i1];
    return first ? (float)(x0 * c - x1 * s) : (float)(x0 * s + x1 * c);
}

/* Part p of chunk ch's sum: over k in part p's share of [0, n_sel) with
 * chunk_of[idx[k]] == ch, of (fresh[k] - cache[idx[k]]) (keys: rotated to
 * position 0), in k's order, into part[ch][p][h][d], the count into
 * part_n[ch][p].  One block per (head h, chunk ch >= 1, part p), a thread
 * per dim: a key's pairs are within its head, whose difference is made
 * whole in shared memory before either element is rotated.  The parts
 * are what make this wide: one block walking all 493 selected rows of an
 * 8B blend in turn (two dependent loads each, a barrier, f64 rotations)
 * took ~0.2 ms a call, two calls a layer: most of the shift's 12.5 ms. */
__global__ void k_shift_part(const float *cache, const float *fresh, const int32_t *idx, int n_sel,
                             const int32_t *chunk_of, const int32_t *pos, int kv_dim, int head_dim,
                             struct shift_rope rope, int has_rope, int n_parts, float *part, int *part_n)
{
    __shared__ float dif[256];
    int h = blockIdx.x, ch = blockIdx.y + 1, p = blockIdx.z, d = threadIdx.x;
    int k0 = (int)((long long)n_sel * p / n_parts), k1 = (int)((long long)n_sel * (p + 1) / n_parts);
    size_t off = (size_t)h * head_dim + d, at = (size_t)ch * n_parts + p;
    float acc = 0;
    int n = 0;
    for (int k = k0; k < k1; k++) {
        int r = idx[k];
        if (chunk_of[r] != ch) /* the same row for every thread: the block takes the branch whole */
            continue;
        n++;
        dif[d] = fresh[(size_t)k * kv_dim + off] - cache[(size_t)r * kv_dim + off];
        __syncthreads();
        acc += rotated(dif, d, -pos[r], has_rope ? &rope : NULL);
        __syncthreads();
    }
    part[at * kv_dim + off] = acc;
    if (h == 0 && d == 0)
        part_n[at] = n;
}

/* mean[ch][h][d] = shift / cnt * the parts' sums in part order; cnt[ch]
 * the count.  One block per (head, chunk >= 1), a thread per dim. */
__global__ void k_shift_mean(const float *part, const int *part_n, int n_parts, int kv_dim, int head_dim,
                             float shift, float *mean, int *cnt)
{
    int h = blockIdx.x, ch = blockIdx.y + 1, d = threadIdx.x;
    size_t off = (size_t)h * head_dim + d;
    float acc = 0;
    int n = 0;
    for (int p = 0; p < n_parts; p++) {
        size_t at = (size_t)ch * n_parts + p;
        acc += part[at * kv_dim + off];
        n += part_n[at];
    }
    mean[(size_t)ch * kv_dim + off] = acc * (n ? shift / (float)n : 0.0f);
    if (h == 0 && d == 0)
        cnt[ch] = n;
}

__global__ void k_mark_rows(const int32_t *idx, int n_sel, unsigned char *recomputed)
{
    int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k < n_sel)
        recomputed[idx[k]] = 1;
}

/* cache[r] += mean[chunk_of[r]] (keys: rotated to pos[r]) for each row r of
 * [row_lo, n_rows) of a chunk >= 1 that has recomputed rows and was not
 * recomputed itself.  One block per (row, head), a thread per dim. */
__global__ void k_shift_add(float *cache, const float *mean, const int *cnt, const unsigned char *recomputed,
                            const int32_t *chunk_of, const int32_t *pos, int row_lo, int kv_dim, int head_dim,
                            struct shift_rope rope, int has_rope)
{
    int r = row_lo + blockIdx.x, h = blockIdx.y, ch = chunk_of[r];
    if (ch < 1 || !cnt[ch] || recomputed[r])
        return;
    size_t off = (size_t)h * head_dim;
    cache[(size_t)r * kv_dim + off + threadIdx.x] +=
        rotated(mean + (size_t)ch * kv_dim + off, threadIdx.x, pos[r], has_rope ? &rope : NULL);
}

int c_chunk_shift(void *vctx, float *cache, const float *fresh, const int32_t *idx, int n_sel,
                  const int32_t *chunk_of, const int32_t *pos, int n_chunks, int row_lo, int n_rows, int kv_dim,
                  int head_dim, float shift, const struct kvfs_rope_args *rope)
{
    struct cuda_ctx *c = CTX;
    if (n_sel <= 0 || n_chunks < 2 || row_lo >= n_rows || shift == 0.0f)
        return 0;
    enum { T = 256 };
    if (head_dim <= 0 || kv_dim <= 0 || kv_dim % head_dim || (rope && (rope->rope_dim > head_dim || rope->rope_dim % 2)))
        return -EINVAL;
    if (head_dim > T)
        return -ENOTSUP; /* the host's shift then */
    unsigned n_heads = (unsigned)(kv_dim / head_dim);
    struct shift_rope sr;
    memset(&sr, 0, sizeof(sr));
    if (rope) {
        sr.rope_dim = rope->rope_dim, sr.style = rope->style, sr.theta = rope->theta;
        sr.has_ff = rope->freq_factors != NULL;
        if (rope_factors_of(rope->freq_factors, rope->rope_dim, &sr.ff))
            return -ENOTSUP; /* the host's shift then */
    }
    /* the selected rows in parts of ~24, at most 16 (each part a block per
     * head and chunk) */
    int n_parts = (n_sel + 23) / 24;
    if (n_parts > 16)
        n_parts = 16;
    float *mean = NULL, *part = NULL;
    int *cnt = NULL, *part_n = NULL;
    unsigned char *mark = NULL;
    int rc;
    if ((rc = c_alloc(c, sizeof(float) * (size_t)n_chunks * kv_dim, (void **)&mean)) ||
        (rc = c_alloc(c, sizeof(int) * (size_t)n_chunks, (void **)&cnt)) ||
        (rc = c_alloc(c, sizeof(float) * (size_t)n_chunks * n_parts * kv_dim, (void **)&part)) ||
        (rc = c_alloc(c, sizeof(int) * (size_t)n_chunks * n_parts, (void **)&part_n)) ||
        (rc = c_alloc(c, (size_t)n_rows, (void **)&mark)))
        goto out;
    if ((rc = cuda_err(cudaMemsetAsync(mark, 0, (size_t)n_rows, c->stream), "cudaMemsetAsync")) ||
        (rc = cuda_err(cudaMemsetAsync(cnt, 0, sizeof(int) * (size_t)n_chunks, c->stream), "cudaMemsetAsync")))
        goto out;
    k_shift_part<<<dim3(n_heads, (unsigned)(n_chunks - 1), (unsigned)n_parts), (unsigned)head_dim, 0, c->stream>>>(
        cache, fresh, idx, n_sel, chunk_of, pos, kv_dim, head_dim, sr, rope != NULL, n_parts, part, part_n);
    if ((rc = LAUNCHED("chunk_shift part")))
        goto out;
    k_shift_mean<<<dim3(n_heads, (unsigned)(n_chunks - 1)), (unsigned)head_dim, 0, c->stream>>>(
        part, part_n, n_parts, kv_dim, head_dim, shift, mean, cnt);
    if ((rc = LAUNCHED("chunk_shift mean")))
        goto out;
    k_mark_rows<<<blocks((size_t)n_sel, T), T, 0, c->stream>>>(idx, n_sel, mark);
    if ((rc = LAUNCHED("chunk_shift mark")))
        goto out;
    k_shift_add<<<dim3((unsigned)(n_rows - row_lo), n_heads), (unsigned)head_dim, 0, c->stream>>>(
        cache, mean, cnt, mark, chunk_of, pos, row_lo, kv_dim, head_dim, sr, rope != NULL);
    rc = LAUNCHED("chunk_shift add");
out:
    if (mean)
        c_free(c, mean);
    if (cnt)
        c_free(c, cnt);
    if (part)
        c_free(c, part);
    if (part_n)
        c_free(c, part_n);
    if (mark)
        c_free(c, mark);
    return rc;
}
