/* profile.h - KVFS_INGEST_PROFILE: where a llama/ state's save (the draft's
 * writes, its conversion, the store's put) and a view's restore (the open,
 * the reads) spend their time, on stderr.  bench/turn_slot.py reads them. */
#ifndef KVFS_FS_PROFILE_H
#define KVFS_FS_PROFILE_H

#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

static inline int ingest_profile(void)
{
    static atomic_int on = -1; /* read by every FUSE worker */
    int v = atomic_load_explicit(&on, memory_order_relaxed);
    if (v < 0)
        atomic_store_explicit(&on, v = getenv("KVFS_INGEST_PROFILE") != NULL, memory_order_relaxed);
    return v;
}

/* monotonic seconds */
static inline double ingest_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
