/* pool.h - the CPU backend's worker threads, started once: a matmul
 * hands them its jobs hundreds of times per token while decoding, where a
 * thread started per call costs more than the work. */
#ifndef KVFS_CPU_POOL_H
#define KVFS_CPU_POOL_H

#include <stddef.h>

struct cpu_pool;

/* n_threads - 1 workers (the caller is the n-th); NULL on failure, and then
 * cpu_pool_run runs everything on the caller */
struct cpu_pool *cpu_pool_new(int n_threads);
void cpu_pool_free(struct cpu_pool *p);
/* fn(jobs + i * job_size) for i < n: job 0 on the caller, the others on the
 * workers.  One caller at a time uses the workers: a second caller (another
 * blend) meanwhile runs its jobs itself, one after another. */
void cpu_pool_run(struct cpu_pool *p, void *(*fn)(void *), void *jobs, size_t job_size, int n);

#endif
