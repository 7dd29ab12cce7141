/* parallel.c - see parallel.h. */
#include "parallel.h"

#include <pthread.h>
#include <unistd.h>

int kvfs_cores(int max)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > max ? max : (int)n;
}

void kvfs_parallel_run(void *(*fn)(void *), void *jobs, size_t job_size, int n)
{
    pthread_t th[KVFS_PARALLEL_MAX];
    int started[KVFS_PARALLEL_MAX] = {0};
    char *job = jobs;
    if (n > KVFS_PARALLEL_MAX)
        n = KVFS_PARALLEL_MAX;
    for (int t = 1; t < n; t++)
        started[t] = pthread_create(&th[t], NULL, fn, job + (size_t)t * job_size) == 0;
    for (int t = 0; t < n; t++)
        if (!started[t])
            fn(job + (size_t)t * job_size);
    for (int t = 1; t < n; t++)
        if (started[t])
            pthread_join(th[t], NULL);
}
