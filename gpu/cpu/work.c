/* work.c - the CPU backend's work splitting over its pool and its scratch
 * buffers, shared by every ISA level's kernels. */
#include <limits.h>
#include <stdlib.h>

#include "internal.h"

/* Row-wise and elementwise work (norms, RoPE, activation rounding, gating,
 * adds) on the pool: units [0, n) in one share per job, when there are at
 * least PAR_MIN_VALUES values to pay for waking the workers (a decoded
 * token's single row stays on the caller).  Each unit's arithmetic is the
 * same whichever share it falls in.  On one thread these were two fifths of
 * a prefill's time. */
#define PAR_MIN_VALUES 32768
struct par_job {
    void (*fn)(void *arg, size_t lo, size_t hi);
    void *arg;
    size_t lo, hi;
};

static void *par_job_run(void *a)
{
    struct par_job *j = a;
    if (j->lo < j->hi)
        j->fn(j->arg, j->lo, j->hi);
    return NULL;
}

void cpu_par_for(struct cpu_ctx *ctx, size_t n, size_t values_per_unit, void (*fn)(void *, size_t, size_t),
                 void *arg)
{
    int nt = pool_jobs(ctx);
    if (nt < 2 || n < 2 || n * values_per_unit < PAR_MIN_VALUES) {
        if (n)
            fn(arg, 0, n);
        return;
    }
    struct par_job jobs[KVFS_PARALLEL_MAX];
    size_t per = (n + (size_t)nt - 1) / (size_t)nt;
    for (int t = 0; t < nt; t++) {
        size_t lo = (size_t)t * per < n ? (size_t)t * per : n, hi = lo + per < n ? lo + per : n;
        jobs[t] = (struct par_job){fn, arg, lo, hi};
    }
    cpu_pool_run(ctx->pool, par_job_run, jobs, sizeof(jobs[0]), nt);
}

/* A scratch buffer of at least `floats` (a spare one when there is; NULL:
 * out of memory).  Give it back with cpu_scratch_put. */
struct scratch *cpu_scratch_get(struct cpu_ctx *ctx, size_t floats)
{
    pthread_mutex_lock(&ctx->scratch_lock);
    struct scratch **pp = &ctx->spare, **best = NULL;
    for (; *pp; pp = &(*pp)->next)
        if (!best || ((*pp)->len >= floats && ((*best)->len < floats || (*pp)->len < (*best)->len)) ||
            ((*best)->len < floats && (*pp)->len > (*best)->len))
            best = pp; /* the smallest that fits, else the largest */
    struct scratch *b = best ? *best : NULL;
    if (b)
        *best = b->next;
    pthread_mutex_unlock(&ctx->scratch_lock);
    if (!b && !(b = calloc(1, sizeof(*b))))
        return NULL;
    if (b->len < floats) {
        free(b->p);
        b->len = 0;
        if (posix_memalign((void **)&b->p, 64, floats * sizeof(float)) != 0) {
            b->p = NULL;
            free(b);
            return NULL;
        }
        b->len = floats;
    }
    return b;
}

void cpu_scratch_put(struct cpu_ctx *ctx, struct scratch *b)
{
    if (!b)
        return;
    pthread_mutex_lock(&ctx->scratch_lock);
    b->next = ctx->spare;
    ctx->spare = b;
    pthread_mutex_unlock(&ctx->scratch_lock);
}

/* An integer override from the environment, at least lo (else fallback),
 * read once by whichever thread comes first: atomic, since blends run on
 * several threads at once (TSan, 2026-11-26).  *once starts at INT_MIN. */
int cpu_env_int_once(atomic_int *once, const char *name, int lo, int fallback)
{
    int v = atomic_load_explicit(once, memory_order_relaxed);
    if (v == INT_MIN) {
        const char *e = getenv(name);
        v = e && *e && atoi(e) >= lo ? atoi(e) : fallback;
        atomic_store_explicit(once, v, memory_order_relaxed);
    }
    return v;
}
