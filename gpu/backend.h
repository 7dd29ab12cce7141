/* backend.h - the compute backend interface (CPU reference, CUDA).
 *
 * A backend is { iface, ctx }, like ggml-backend: `iface` is a table of
 * function pointers, `ctx` the backend's private state.  Every op works on
 * device buffers (host memory for the CPU backend) holding row-major f32
 * activations; weights live in backend-owned objects created from host f32.
 * Ops may be asynchronous: results are visible on the host after download()
 * or synchronize().  Every function returns 0 or a negative errno.
 *
 * A backend is driven by one thread at a time unless its iface says
 * thread_safe (the CPU backend: the blend service then runs several blends
 * at once); it may use helper threads of its own.
 *
 * Shapes in comments: [rows][cols], rows outermost.
 */
#ifndef KVFS_BACKEND_H
#define KVFS_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct kvfs_weight; /* opaque backend-owned matrix [out_dim][in_dim] */

/* element types of host data given to upload_kv (the kvfs(5) dtype codes) */
enum kvfs_host_type { KVFS_HOST_F32 = 1, KVFS_HOST_F16 = 2, KVFS_HOST_BF16 = 3 };

enum kvfs_rope_style { KVFS_ROPE_STYLE_NORM = 0, KVFS_ROPE_STYLE_NEOX = 2 };

/* how one layer's keys were rotated (for ops that rotate them again) */
struct kvfs_rope_args {
    int rope_dim, style; /* the first rope_dim dims of each head; enum kvfs_rope_style */
    float theta;         /* angle pos * theta^(-2j/rope_dim) for pair j, */
    const float *freq_factors; /* divided by freq_factors[j] if not NULL (host, rope_dim / 2) */
};

struct kvfs_backend_iface {
    const char *name; /* "cpu", "cuda" */
    /* 1: several threads may drive one context at once (each op's scratch is
     * per thread), so blends can run concurrently; 0: one thread at a time */
    int thread_safe;

    /* memory */
    int (*alloc)(void *ctx, size_t bytes, void **dev);
    void (*free)(void *ctx, void *dev);
    int (*upload)(void *ctx, void *dev, const void *host, size_t bytes);
    int (*download)(void *ctx, void *host, const void *dev, size_t bytes);
    int (*synchronize)(void *ctx);
    int (*copy)(void *ctx, void *dst, const void *src, size_t bytes); /* device to device */

    /* weights: W[out_dim][in_dim] from host f32 (the backend may convert) */
    int (*weight_create)(void *ctx, const float *host, int out_dim, int in_dim,
                         struct kvfs_weight **out);
    void (*weight_free)(void *ctx, struct kvfs_weight *w);

    /* y[n][out_dim] = x[n][in_dim] . W^T  (+ bias[out_dim] if bias != NULL) */
    int (*matmul)(void *ctx, const struct kvfs_weight *w, const float *bias,
                  const float *x, float *y, int n);

    /* y[n][dim] = x / rms(x) * g, rms over each row; y may equal x */
    int (*rmsnorm)(void *ctx, const float *x, const float *g, float *y, int n,
                   int dim, float eps);

    /* In-place RoPE on x[n][n_heads][head_dim] by angle pos[i] * theta^(-2j/rope_dim)
     * for the first rope_dim dims of each head, divided by freq_factors[j]
     * where it is not NULL (host memory, rope_dim / 2 values: Llama 3.1's
     * rope_freqs, as ggml's rope_ext).  pos is a device int32 array; a
     * negative position rotates backwards, so re-positioning by a delta is
     * one call with pos = delta. */
    int (*rope)(void *ctx, float *x, const int32_t *pos, int n, int n_heads,
                int head_dim, int rope_dim, float theta, int style, const float *freq_factors);

    /* out[i] = a[i] + b[i] for i < count; out may alias a or b */
    int (*add)(void *ctx, const float *a, const float *b, float *out, size_t count);

    /* out[n][dim] = silu(gate) * up; out may alias gate */
    int (*swiglu)(void *ctx, const float *gate, const float *up, float *out, size_t count);

    /* out[n][dim] = table[ids[i]][dim]; table is a device f32 buffer, ids device int32 */
    int (*get_rows)(void *ctx, const float *table, const int32_t *ids, float *out,
                    int n, int dim);

    /* Attention with an exact causal mask by position:
     *   q[n_q][n_head][head_dim], q_pos[n_q]
     *   k, v[n_kv][n_kv_head][head_dim], kv_pos[n_kv]
     *   query i attends to every kv row j with kv_pos[j] <= q_pos[i] and,
     *   when window > 0 (a sliding-window layer), q_pos[i] - kv_pos[j] < window
     *   (llama.cpp's LLAMA_SWA_TYPE_STANDARD); a backend without windows
     *   returns -ENOTSUP for window > 0
     *   (GQA: head h uses kv head h / (n_head / n_kv_head))
     *   out[n_q][n_head][head_dim] = softmax(cap(scale * q.k^T)) . v
     *   where cap(s) = softcap * tanh(s / softcap) when softcap > 0 (Gemma
     *   2's attention logit soft-capping, computed as ggml: s * (1 /
     *   softcap), tanhf, times softcap; before the mask), else s unchanged
     * Must not materialise more than O(n_q * n_kv) per head at once. */
    int (*attention)(void *ctx, const float *q, const int32_t *q_pos, int n_q,
                     const float *k, const float *v, const int32_t *kv_pos, int n_kv,
                     int n_head, int n_kv_head, int head_dim, float scale, int window, float softcap,
                     float *out);

    /* Attention mass: out[j] += sum over queries i and heads h of the
     * attention probability softmax_j(cap(scale * q[i][h] . k[j][h/group]))
     * with attention's exact causal mask, for j < n_kv (out: device
     * f32[n_kv]); window > 0: a sliding-window layer's mask, softcap > 0:
     * the soft-capping (both as attention's).
     * How much each kv row weighs in the queries' answers: blending's query
     * selection ranks chunk rows by it. */
    int (*attn_mass)(void *ctx, const float *q, const int32_t *q_pos, int n_q,
                     const float *k, const int32_t *kv_pos, int n_kv,
                     int n_head, int n_kv_head, int head_dim, float scale, int window, float softcap,
                     float *out);

    /* out[i] = sum_j (a[i][j] - b[i][j])^2 for i < n; out is a device f32[n] */
    int (*row_sqdiff)(void *ctx, const float *a, const float *b, float *out, int n, int dim);

    /* rows: out[k] = src[idx[k]] for k < n_idx (gather) or dst[idx[k]] = src[k]
     * (scatter); rows of `dim` floats; idx device int32 */
    int (*gather_rows)(void *ctx, const float *src, const int32_t *idx, float *out,
                       int n_idx, int dim);
    int (*scatter_rows)(void *ctx, const float *src, const int32_t *idx, float *dst,
                        int n_idx, int dim);

    /* Round-trip activations through ggml's 8-bit block quantization, as
     * llama.cpp does before a quantized matmul: type 8 = Q8_0, 9 = Q8_1
     * (blocks of 32, scale max|x|/127 rounded to f16).  y may equal x. */
    int (*act_quant)(void *ctx, const float *x, float *y, int n, int dim, int type);
    /* x[i] = (float)(half)x[i]: the precision of an f16 KV cache */
    int (*round_f16)(void *ctx, float *x, size_t count);

    /* Token selection: out[0..k) (device int32) = the rows of the k highest
     * scores[0..n), in ascending row order.  Rows with forced[i] != 0
     * (device bytes; forced may be NULL) rank above every other; equal
     * scores go to the lower row.  k <= n. */
    int (*topk)(void *ctx, const float *scores, const uint8_t *forced, int n, int k, int32_t *out);

    /* dst[i] = (float)host[i] for i < count, host holding packed values of
     * `type` (KVFS_HOST_F32/F16/BF16): how a KV cache stored in f16 reaches
     * the device.  The conversion may run on the device after an
     * asynchronous copy (CUDA: through pinned staging buffers on a copy
     * stream); `host` may be reused as soon as this returns, unless it is
     * page-locked memory (host_register), which is read in place. */
    int (*upload_kv)(void *ctx, float *dst, const void *host, size_t count, int type);

    void (*destroy)(void *ctx);

    /* Optional ops (NULL where a backend lacks them), last so that the
     * backends' initializers in field order stay valid. */
    /* Optional (NULL: the model dequantizes and calls weight_create): keep W
     * in its GGUF encoding, out_dim rows of row_bytes of ggml type `type` at
     * host memory `data`, which the caller keeps mapped while W lives; the
     * matmul decodes it as it goes (memory: the file's size, not f32's). */
    int (*weight_create_quant)(void *ctx, uint32_t type, const void *data, size_t row_bytes, int out_dim,
                               int in_dim, struct kvfs_weight **out);
    /* Optional, with weight_create_quant: out[i] = row ids[i] of W as f32,
     * i < n (an embedding table kept as a weight; ids device int32) */
    int (*weight_rows)(void *ctx, const struct kvfs_weight *w, const int32_t *ids, float *out, int n);
    /* Optional: act_quant(x -> tmp, act_type) then matmul(tmp), in one op, so
     * that the backend may multiply the 8-bit blocks by an encoded weight in
     * integers, as ggml's vec_dot does (same products, summed exactly) */
    int (*matmul_act)(void *ctx, const struct kvfs_weight *w, const float *bias, int act_type, const float *x,
                      float *tmp, float *y, int n);

    /* Optional (NULL: a model that needs them is refused at load).  Last in
     * the table so that positional initializers need not list them. */
    /* y[i] = x[i] * s for i < count; y may equal x */
    int (*scale)(void *ctx, const float *x, float s, float *y, size_t count);
    /* out[i] = gelu(gate[i]) * up[i], GELU's tanh form as ggml computes it
     * (through its f16 table: gate rounded to f16, the result too; 0 below
     * -10, the identity above 10); out may alias gate */
    int (*geglu)(void *ctx, const float *gate, const float *up, float *out, size_t count);

    /* Optional (NULL: nothing kept): hand back the memory kept for the next
     * call (the CPU backend's scratch buffers); the blend service calls it
     * when its last running blend ends and none waits */
    void (*trim)(void *ctx);

    /* Optional (NULL: the caller decodes on the host and uploads f32): one
     * layer of a block-quantized chunk (kvfs(5) dtypes q8/q4, codec
     * index/kvquant.h) decoded into k[n_tokens][kv_dim] and v[..]: how a
     * quantized chunk reaches the device, on the backend's threads */
    int (*upload_kvq)(void *ctx, float *k, float *v, const void *blocks, uint32_t n_tokens, uint32_t kv_dim,
                      int codec);

    /* 1: device buffers are host memory (the CPU backend), which host code
     * may read and write in place between ops (the blend's chunk shift) */
    int host_memory;

    /* Optional (NULL, or -ENOTSUP for a shape: blend/shift.c does it on the
     * host): the chunk shift of one layer's K (rope != NULL) or V, in
     * place.  cache[n_rows][kv_dim], fresh[n_sel][kv_dim] the recomputed
     * rows idx[0..n_sel) before they replace the cached ones, chunk_of[r]
     * each row's chunk, pos[r] its position: all device memory.  Every row r
     * of [row_lo, n_rows) not in idx whose chunk c >= 1 has rows in idx gains
     * shift x the mean of (fresh - cached) over those rows (keys: taken to
     * position 0's frame, the mean rotated to pos[r]), with blend/shift.c's
     * arithmetic (f64 rotations, sums in idx's order). */
    int (*chunk_shift)(void *ctx, float *cache, const float *fresh, const int32_t *idx, int n_sel,
                       const int32_t *chunk_of, const int32_t *pos, int n_chunks, int row_lo, int n_rows, int kv_dim,
                       int head_dim, float shift, const struct kvfs_rope_args *rope);
    /* Optional (NULL: nothing to gain): page-lock host memory that will be
     * uploaded many times (the RAM tier's chunks), so that upload_kv and
     * upload_kvq copy it straight to the device, with no staging copy; an
     * upload from it may still be reading after the call returns, until
     * the next synchronize or download.  host_unregister before it is freed
     * (it takes no context: ctx may be NULL). */
    int (*host_register)(void *ctx, void *host, size_t bytes);
    void (*host_unregister)(void *ctx, void *host);
    /* Optional (NULL: mixture-of-experts models are refused at load):
     * y[i][j] = x[i][j] * s[i] for i < n, j < dim (s device f32[n]; the
     * experts' routing weights); y may equal x */
    int (*mul_rows)(void *ctx, const float *x, const float *s, float *y, int n, int dim);
    /* Optional (NULL: gpt-oss is refused at load): attention and attn_mass
     * as above, each query head h's softmax with one more logit, sinks[h]
     * (device f32[n_head], not scaled, not capped), in its max and its
     * denominator and with no value: gpt-oss's attention sinks, as ggml's
     * soft_max_ext with sinks.  The mass then counts only the keys' share. */
    int (*attention_sinks)(void *ctx, const float *q, const int32_t *q_pos, int n_q, const float *k, const float *v,
                           const int32_t *kv_pos, int n_kv, int n_head, int n_kv_head, int head_dim, float scale,
                           int window, float softcap, const float *sinks, float *out);
    int (*attn_mass_sinks)(void *ctx, const float *q, const int32_t *q_pos, int n_q, const float *k,
                           const int32_t *kv_pos, int n_kv, int n_head, int n_kv_head, int head_dim, float scale,
                           int window, float softcap, const float *sinks, float *out);
    /* Optional (NULL: gpt-oss is refused at load): gpt-oss's clamped SwiGLU
     * as ggml's swiglu_oai: x = min(gate, limit), y = clamp(up, -limit,
     * limit), out = x / (1 + e^(alpha * -x)) * (y + 1); out may alias gate */
    int (*swiglu_oai)(void *ctx, const float *gate, const float *up, float *out, size_t count, float alpha,
                      float limit);
};

struct kvfs_backend {
    const struct kvfs_backend_iface *iface;
    void *ctx;
};

/* Backends.  n_threads <= 0 means all cores.  The CPU backend runs the
 * kernels of one x86-64 ISA level, chosen once per process (kvfs_cpu_level). */
int kvfs_backend_cpu_init(int n_threads, struct kvfs_backend *out);

/* x86-64 ISA levels of the CPU kernels, lowest first (gpu/cpu/isa.c) */
enum { KVFS_CPU_V2, KVFS_CPU_V3, KVFS_CPU_V4, KVFS_CPU_VNNI, KVFS_CPU_N_LEVELS };
/* The level in use: the best this CPU runs, or a lower one named by
 * $KVFS_CPU_LEVEL (a higher one falls back to the best, with a warning);
 * -EINVAL for a name that is no level, -ENOTSUP on a CPU below x86-64-v2 */
int kvfs_cpu_level(void);
int kvfs_cpu_level_best(void);
int kvfs_cpu_level_supported(int level);
const char *kvfs_cpu_level_name(int level); /* "x86-64-v3", ... */
int kvfs_cpu_level_parse(const char *name); /* a name or its short form (v3), or -EINVAL */
const char *kvfs_cpu_level_alias(int level); /* "v3", ... */
/* "cpu kernels: LEVEL" and "cpu levels: v2 v3 ..." (those this CPU runs),
 * for --version */
void kvfs_cpu_describe(FILE *f);
/* the "cpu" member of .kvfs/stats (kvfs_store_add_stats): level, best, BLAS kernel */
void kvfs_cpu_stats(void *ctx, FILE *f);
/* CUDA lives in a plugin, libkvfs-cuda.so, loaded on first use: a host
 * without an NVIDIA driver never maps cuBLAS (~60 MiB of resident code).
 * Looked up as $KVFS_CUDA_PLUGIN, then beside the program, one directory
 * up (build/tests/), and in ../lib/kvfs/ (installed: PREFIX/bin/kvfs).
 * -ENODEV: no driver, no plugin or no device (the reason is logged at
 * debug level). */
int kvfs_backend_cuda_init(int device, struct kvfs_backend *out);
/* the plugin's entry point and the interface version it must match */
#define KVFS_CUDA_PLUGIN_VERSION 5 /* 2: chunk_shift, host_register; 3: rope's freq_factors; 4: attention's softcap;
                                     * 5: the table grew (mul_rows, attention_sinks, attn_mass_sinks, swiglu_oai) */
/* name: "cpu", "cuda" or "auto" (CUDA if built and a device exists) */
int kvfs_backend_init_by_name(const char *name, int n_threads, struct kvfs_backend *out);
void kvfs_backend_free(struct kvfs_backend *b);

/* Where a backend's time goes, op by op (gpu/profile.c): b's table replaced
 * by wrappers that, while profiling is enabled, wait for the device before
 * and after each compute op and add its time to the op's total (for a
 * device with no profiler at hand; the waits make everything slower).
 * kvfs_backend_init_by_name wraps every backend it makes when
 * $KVFS_BACKEND_PROFILE is set: "1" also enables it and prints the totals
 * at exit, "wrap" leaves enabling to the program. */
int kvfs_backend_profile_wrap(struct kvfs_backend *b);
void kvfs_backend_profile_enable(int on);
/* the totals since the last take, largest first, to f; then zeroed */
void kvfs_backend_profile_take(FILE *f, const char *title);

#endif
