/* parallel.h - run a few independent jobs at once on short-lived threads
 * (decoding an object's layers, verifying a blend's chunks). */
#ifndef KVFS_PARALLEL_H
#define KVFS_PARALLEL_H

#include <stddef.h>

#define KVFS_PARALLEL_MAX 16

/* Online cores, clamped to [1, max]. */
int kvfs_cores(int max);

/* fn(jobs + i * job_size) for every i < n (n <= KVFS_PARALLEL_MAX): job 0 on
 * the calling thread, the others on threads of their own (on the caller as
 * well when a thread cannot start).  Returns when every job is done. */
void kvfs_parallel_run(void *(*fn)(void *), void *jobs, size_t job_size, int n);

#endif
