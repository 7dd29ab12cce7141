/* kv_upload.c - a chunk's stored layer into the CPU backend's cache: f16 and
 * bf16 widened to f32, quantized layers decoded, on the pool.  Compiled per
 * ISA level (F16C where the level has it). */
#include "level.h"

#include <errno.h>
#include <string.h>

#ifdef __F16C__
#include <immintrin.h>
#endif

#include "internal.h"
#include "kvformat.h"
#include "kvquant.h"

struct kv_load {
    float *dst;
    const uint16_t *src;
    int type;
};

/* f16/bf16 to f32 straight into the cache (host memory here), values
 * [lo, hi): the hot loop of loading a chunk, so it uses the F16C
 * instructions where the CPU has them */
static void kv_load_range(void *arg, size_t lo, size_t hi)
{
    const struct kv_load *a = arg;
    size_t i = lo;
    if (a->type == KVFS_HOST_F16) {
#ifdef __F16C__
        for (; i + 8 <= hi; i += 8)
            _mm256_storeu_ps(a->dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(a->src + i))));
#endif
        for (; i < hi; i++)
            a->dst[i] = kvfs_f16_to_f32(a->src[i]);
    } else {
        for (; i < hi; i++) {
            uint32_t x = (uint32_t)a->src[i] << 16;
            memcpy(&a->dst[i], &x, 4);
        }
    }
}

/* A chunk's layer into the cache, f16/bf16 converted on the pool: the
 * cache's pages are touched here first, so their faults are split too (a
 * blend loads every layer of every chunk before the query's first pass) */
int cpu_upload_kv(void *vctx, float *dst, const void *host, size_t count, int type)
{
    struct kv_load a = {dst, host, type};
    switch (type) {
    case KVFS_HOST_F32:
        memcpy(dst, host, sizeof(float) * count);
        return 0;
    case KVFS_HOST_F16:
    case KVFS_HOST_BF16:
        cpu_par_for(vctx, count, 1, kv_load_range, &a);
        return 0;
    default:
        return -EINVAL;
    }
}

struct kvq_job {
    const void *blocks;
    float *k, *v;
    uint32_t n_tokens, kv_dim, part, n_parts;
    int codec, rc;
};

static void *kvq_decode_job(void *arg)
{
    struct kvq_job *j = arg;
    j->rc = kvfs_kvq_decode_part(j->codec, j->blocks, j->n_tokens, j->kv_dim, j->k, j->v, j->part, j->n_parts);
    return NULL;
}

/* a quantized chunk's layer decoded straight into the cache, one share of
 * its blocks per pool thread */
int cpu_upload_kvq(void *vctx, float *k, float *v, const void *blocks, uint32_t n_tokens, uint32_t kv_dim,
                          int codec)
{
    struct cpu_ctx *ctx = vctx;
    struct kvq_job jobs[KVFS_PARALLEL_MAX];
    int nt = pool_jobs(ctx), rc = 0;
    for (int t = 0; t < nt; t++)
        jobs[t] = (struct kvq_job){blocks, k, v, n_tokens, kv_dim, (uint32_t)t, (uint32_t)nt, codec, 0};
    cpu_pool_run(ctx->pool, kvq_decode_job, jobs, sizeof(jobs[0]), nt);
    for (int t = 0; t < nt && !rc; t++)
        rc = jobs[t].rc;
    return rc;
}

