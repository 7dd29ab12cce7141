/* internal.h - what the CPU backend's files share: its context, its weights,
 * the pool's work splitting and the scratch buffers.  Not for use outside
 * gpu/cpu/. */
#ifndef KVFS_CPU_INTERNAL_H
#define KVFS_CPU_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "blas.h"
#include "parallel.h"
#include "pool.h"

/* A scratch buffer: a matmul's decoded tile, an attention job's scores. */
struct scratch {
    struct scratch *next;
    float *p;
    size_t len; /* floats */
};

struct cpu_ctx {
    const struct kvfs_blas *blas;
    int n_threads;
    struct cpu_pool *pool; /* workers for matmuls and attention */
    /* scratch buffers not in use, kept for the next call: per context, not
     * per thread, so what stays allocated follows the calls in flight (the
     * blends running), not every thread that ever ran one */
    pthread_mutex_t scratch_lock;
    struct scratch *spare;
};

struct kvfs_weight {
    float *w;          /* [out_dim][in_dim], or NULL when kept encoded: */
    const uint8_t *q;  /* out_dim rows of row_bytes, ggml type `type` (the caller's mapping) */
    uint32_t type;
    size_t row_bytes;
    int out_dim, in_dim;
};

/* Jobs a product or an attention call is split into: one per thread. */
static inline int pool_jobs(const struct cpu_ctx *ctx)
{
    return ctx->n_threads < 1 ? 1 : ctx->n_threads > KVFS_PARALLEL_MAX ? KVFS_PARALLEL_MAX : ctx->n_threads;
}

/* fn(arg, lo, hi) over units [0, n) in one share per job (work.c) */
void cpu_par_for(struct cpu_ctx *ctx, size_t n, size_t values_per_unit, void (*fn)(void *, size_t, size_t),
                 void *arg);
/* A scratch buffer of at least `floats` (NULL: out of memory); give it back
 * with cpu_scratch_put */
struct scratch *cpu_scratch_get(struct cpu_ctx *ctx, size_t floats);
void cpu_scratch_put(struct cpu_ctx *ctx, struct scratch *b);
/* An integer override from the environment, at least lo (else fallback),
 * read once; *once starts at INT_MIN */
int cpu_env_int_once(atomic_int *once, const char *name, int lo, int fallback);

/* An elementwise op's operands (elementwise.c, act_quant.c) */
struct ew_args {
    const float *a, *b;
    float *out;
    float s;
};

/* One level's kernels (iface.c, compiled per level): the backend's table
 * and, for test_qmm, the SIMD weight decoder */
struct cpu_level_kernels {
    const struct kvfs_backend_iface *iface;
    int (*dequant_simd)(uint32_t type, const void *src, float *dst, size_t n);
};

/* The ISA-independent entries of the interface (backend.c), which every
 * level's table (iface.c) shares */
int cpu_alloc(void *ctx, size_t bytes, void **dev);
void cpu_free(void *ctx, void *dev);
int cpu_copy(void *ctx, void *dst, const void *src, size_t bytes);
int cpu_sync(void *ctx);
int cpu_weight_create(void *vctx, const float *host, int out_dim, int in_dim, struct kvfs_weight **out);
int cpu_weight_create_quant(void *vctx, uint32_t type, const void *data, size_t row_bytes, int out_dim, int in_dim,
                            struct kvfs_weight **out);
void cpu_weight_free(void *ctx, struct kvfs_weight *w);
void cpu_trim(void *vctx);
void cpu_destroy(void *vctx);

#endif
