/* pool.c - the CPU backend's worker threads (pool.h).  Workers spin
 * briefly for the next batch (the next matmul of a decode step comes within
 * microseconds), then sleep on a condition variable. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "pool.h"

#define MAX_WORKERS 15
/* ~50-80 us of polling before sleeping: waking a sleeping worker costs more
 * than that in a VM (8B decode 7.1 -> 7.9 tokens/s against 300 rounds,
 * BENCHMARKS.md); bounded, as on a busy machine spinning only takes the core
 * from the thread awaited */
#define SPIN_ROUNDS 4000

struct cpu_pool {
    pthread_mutex_t submit;   /* held by the caller that owns the workers */
    pthread_mutex_t m;
    pthread_cond_t go, done;
    pthread_t th[MAX_WORKERS];
    int n_workers, stop;
    atomic_ulong gen;         /* a new batch */
    atomic_int pending;       /* workers' jobs of this batch not yet done */
    int want;                 /* workers to start */
    atomic_uint started_gen;  /* fork_gen when they were started */
    void *(*fn)(void *);
    char *jobs;
    size_t job_size;
    int n_jobs;
};

/* Threads do not survive fork(): a pool made before the daemon forks into
 * the background (kvfs without -f loads its model first) would wait for
 * workers that are gone.  Each fork's child bumps fork_gen; a pool started
 * in an older generation starts its workers again on first use. */
static atomic_uint fork_gen;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t restart_lock = PTHREAD_MUTEX_INITIALIZER;

static void in_child(void)
{
    atomic_fetch_add(&fork_gen, 1);
}

static void register_atfork(void)
{
    pthread_atfork(NULL, NULL, in_child);
}

struct worker_arg {
    struct cpu_pool *p;
    int id; /* runs job id + 1 */
};

static void *worker(void *varg)
{
    struct worker_arg a = *(struct worker_arg *)varg;
    free(varg);
    struct cpu_pool *p = a.p;
    unsigned long seen = 0;
    for (;;) {
        int spins = 0;
        while (atomic_load_explicit(&p->gen, memory_order_acquire) == seen && spins++ < SPIN_ROUNDS)
            __builtin_ia32_pause();
        pthread_mutex_lock(&p->m);
        while (atomic_load(&p->gen) == seen && !p->stop)
            pthread_cond_wait(&p->go, &p->m);
        if (p->stop) {
            pthread_mutex_unlock(&p->m);
            return NULL;
        }
        seen = atomic_load(&p->gen);
        void *(*fn)(void *) = p->fn;
        char *job = a.id + 1 < p->n_jobs ? p->jobs + (size_t)(a.id + 1) * p->job_size : NULL;
        pthread_mutex_unlock(&p->m);
        if (job)
            fn(job);
        if (atomic_fetch_sub(&p->pending, 1) == 1) {
            pthread_mutex_lock(&p->m);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->m);
        }
    }
}

/* the workers, in this process (their batch counter from zero) */
static void pool_start(struct cpu_pool *p)
{
    pthread_mutex_init(&p->submit, NULL);
    pthread_mutex_init(&p->m, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    atomic_store(&p->gen, 0);
    p->n_workers = 0;
    p->stop = 0;
    atomic_store(&p->started_gen, atomic_load(&fork_gen));
    for (int i = 0; i < p->want; i++) {
        struct worker_arg *a = malloc(sizeof(*a));
        if (!a)
            break;
        *a = (struct worker_arg){p, i};
        if (pthread_create(&p->th[i], NULL, worker, a) != 0) {
            free(a);
            break;
        }
        p->n_workers++;
    }
}

struct cpu_pool *cpu_pool_new(int n_threads)
{
    pthread_once(&atfork_once, register_atfork);
    struct cpu_pool *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->want = n_threads - 1 > MAX_WORKERS ? MAX_WORKERS : n_threads - 1;
    pool_start(p);
    return p;
}

/* a pool made before this process forked: its threads (and the state of its
 * locks) stayed in the parent; no batch runs here yet */
static void pool_restart_after_fork(struct cpu_pool *p)
{
    pthread_mutex_lock(&restart_lock);
    if (atomic_load(&p->started_gen) != atomic_load(&fork_gen))
        pool_start(p);
    pthread_mutex_unlock(&restart_lock);
}

void cpu_pool_free(struct cpu_pool *p)
{
    if (!p)
        return;
    if (atomic_load(&p->started_gen) != atomic_load(&fork_gen)) {
        free(p); /* made before a fork and unused since: its workers (and lock state) are the parent's */
        return;
    }
    pthread_mutex_lock(&p->m);
    p->stop = 1;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->m);
    for (int i = 0; i < p->n_workers; i++)
        pthread_join(p->th[i], NULL);
    pthread_cond_destroy(&p->go);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->m);
    pthread_mutex_destroy(&p->submit);
    free(p);
}

void cpu_pool_run(struct cpu_pool *p, void *(*fn)(void *), void *jobs, size_t job_size, int n)
{
    char *j = jobs;
    if (p && atomic_load_explicit(&p->started_gen, memory_order_relaxed) != atomic_load_explicit(&fork_gen, memory_order_relaxed))
        pool_restart_after_fork(p);
    if (!p || n <= 1 || p->n_workers == 0 || pthread_mutex_trylock(&p->submit) != 0) {
        for (int i = 0; i < n; i++) /* alone, or the workers are busy with another caller */
            fn(j + (size_t)i * job_size);
        return;
    }
    int n_pool = n - 1 > p->n_workers ? p->n_workers : n - 1; /* jobs the workers take */
    pthread_mutex_lock(&p->m);
    p->fn = fn;
    p->jobs = j;
    p->job_size = job_size;
    p->n_jobs = n_pool + 1;
    atomic_store(&p->pending, p->n_workers); /* every worker answers each batch */
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->m);
    fn(j);
    for (int i = n_pool + 1; i < n; i++) /* more jobs than workers: the caller's too */
        fn(j + (size_t)i * job_size);
    int spins = 0;
    while (atomic_load(&p->pending) > 0 && spins++ < SPIN_ROUNDS)
        __builtin_ia32_pause();
    pthread_mutex_lock(&p->m);
    while (atomic_load(&p->pending) > 0)
        pthread_cond_wait(&p->done, &p->m);
    pthread_mutex_unlock(&p->m);
    pthread_mutex_unlock(&p->submit);
}
