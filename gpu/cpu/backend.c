/* backend.c - the CPU backend: host memory, weights (f32 copies, or encoded
 * rows left in the caller's mapping), and the choice of the ISA level whose
 * kernels run (iface.c, once per level). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dequant_simd.h"
#include "ggml_quant.h"
#include "internal.h"
#include "log.h"

/* every level's kernels (level.h's names for cpu_level_table) */
extern const struct cpu_level_kernels cpu_level_table_v2, cpu_level_table_v3, cpu_level_table_v4,
    cpu_level_table_vnni;
static const struct cpu_level_kernels *const level_tables[KVFS_CPU_N_LEVELS] = {
    [KVFS_CPU_V2] = &cpu_level_table_v2,
    [KVFS_CPU_V3] = &cpu_level_table_v3,
    [KVFS_CPU_V4] = &cpu_level_table_v4,
    [KVFS_CPU_VNNI] = &cpu_level_table_vnni,
};

int cpu_alloc(void *ctx, size_t bytes, void **dev)
{
    (void)ctx;
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0)
        return -ENOMEM;
    *dev = p;
    return 0;
}

void cpu_free(void *ctx, void *dev)
{
    (void)ctx;
    free(dev);
}

int cpu_copy(void *ctx, void *dst, const void *src, size_t bytes)
{
    (void)ctx;
    if (dst != src)
        memmove(dst, src, bytes);
    return 0;
}

int cpu_sync(void *ctx)
{
    (void)ctx;
    return 0;
}

int cpu_weight_create(void *vctx, const float *host, int out_dim, int in_dim, struct kvfs_weight **out)
{
    (void)vctx;
    struct kvfs_weight *w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    size_t n = (size_t)out_dim * in_dim;
    if (posix_memalign((void **)&w->w, 64, n * sizeof(float)) != 0) {
        free(w);
        return -ENOMEM;
    }
    memcpy(w->w, host, n * sizeof(float));
    w->out_dim = out_dim;
    w->in_dim = in_dim;
    *out = w;
    return 0;
}

int cpu_weight_create_quant(void *vctx, uint32_t type, const void *data, size_t row_bytes, int out_dim,
                            int in_dim, struct kvfs_weight **out)
{
    (void)vctx;
    float probe[32];
    if (row_bytes == 0 || row_bytes != kvfs_ggml_row_size(type, (uint64_t)in_dim) ||
        kvfs_ggml_dequantize(type, data, probe, in_dim < 32 ? (uint64_t)in_dim : 32) == -ENOTSUP)
        return -ENOTSUP;
    struct kvfs_weight *w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    w->q = data;
    w->type = type;
    w->row_bytes = row_bytes;
    w->out_dim = out_dim;
    w->in_dim = in_dim;
    *out = w;
    return 0;
}

void cpu_weight_free(void *ctx, struct kvfs_weight *w)
{
    (void)ctx;
    if (w) {
        free(w->w);
        free(w);
    }
}

void cpu_trim(void *vctx)
{
    struct cpu_ctx *ctx = vctx;
    pthread_mutex_lock(&ctx->scratch_lock);
    struct scratch *b = ctx->spare;
    ctx->spare = NULL;
    pthread_mutex_unlock(&ctx->scratch_lock);
    for (struct scratch *next; b; b = next) {
        next = b->next;
        free(b->p);
        free(b);
    }
}

void cpu_destroy(void *vctx)
{
    struct cpu_ctx *ctx = vctx;
    cpu_pool_free(ctx->pool);
    cpu_trim(ctx);
    pthread_mutex_destroy(&ctx->scratch_lock);
    free(ctx);
}

/* The level's SIMD weight decoder (test_qmm checks it against the
 * definition): -ENOTSUP where the level has none for the type */
int kvfs_dequant_simd(uint32_t type, const void *src, float *dst, size_t n)
{
    int level = kvfs_cpu_level();
    return level < 0 ? level : level_tables[level]->dequant_simd(type, src, dst, n);
}

int kvfs_backend_cpu_init(int n_threads, struct kvfs_backend *out)
{
    int level = kvfs_cpu_level();
    if (level < 0)
        return level;
    struct cpu_ctx *ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return -ENOMEM;
    int rc = kvfs_blas_load(level, &ctx->blas);
    if (rc) {
        free(ctx);
        return rc;
    }
    ctx->n_threads = n_threads > 0 ? n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (ctx->blas->set_num_threads)
        ctx->blas->set_num_threads(1); /* the pool splits the work (parallel_gemm) */
    pthread_mutex_init(&ctx->scratch_lock, NULL);
    ctx->pool = cpu_pool_new(ctx->n_threads); /* NULL: the caller does all */
    out->iface = level_tables[level]->iface;
    out->ctx = ctx;
    return 0;
}
