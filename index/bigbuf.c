/* bigbuf.c - big buffers used again instead of fresh memory.
 *
 * A llama-server slot save (tens of MB) passes through a draft buffer and
 * a chunk image, and each restore may decode another image.  Memory fresh
 * from the kernel costs its page faults and the zeroing of every page: on
 * the 2-vCPU VM of docs/lab-notes.md (2026-11-29) 47-79 ms for 57 MB, against
 * 2.5-7 ms to write the same bytes again into memory already touched.  Huge
 * pages (MADV_HUGEPAGE) cut the faults but stalled allocations for direct
 * compaction there (saves got slower).  So a freed big buffer is kept (a
 * few at most) and the next big allocation takes it.  Every buffer is its
 * own mapping, registered so that kvfs_big_release can tell it from heap
 * memory. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "bigbuf.h"

#define SPARES 2 /* a draft and an image in flight at once: the steady state of one save after another */

struct big {
    void *p;
    size_t cap;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct big *live; /* every buffer handed out, unordered */
static size_t n_live, cap_live;
static struct big spare[SPARES];
static size_t n_spare;

static size_t round_up(size_t len)
{
    const size_t step = (size_t)2 << 20; /* fewer distinct sizes: a spare fits more often */
    return (len + step - 1) / step * step;
}

int kvfs_big_alloc(size_t len, int largest, uint8_t **out, size_t *cap)
{
    struct big b = {NULL, 0};
    pthread_mutex_lock(&lock);
    size_t best = SPARES;
    for (size_t i = 0; i < n_spare; i++) /* the smallest spare that holds len (or the largest) */
        if (spare[i].cap >= len &&
            (best == SPARES || (largest ? spare[i].cap > spare[best].cap : spare[i].cap < spare[best].cap)))
            best = i;
    if (best < SPARES) {
        b = spare[best];
        spare[best] = spare[--n_spare];
    }
    size_t left = n_spare;
    pthread_mutex_unlock(&lock);
    int fresh = !b.p;
    if (!b.p) {
        b.cap = round_up(len ? len : 1);
        b.p = mmap(NULL, b.cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (b.p == MAP_FAILED)
            return -ENOMEM;
    }
    if (getenv("KVFS_INGEST_PROFILE"))
        fprintf(stderr, "kvfs: big buffer of %zu for %zu: %s (%zu kept)\n", b.cap, len, fresh ? "fresh" : "kept", left);
    pthread_mutex_lock(&lock);
    if (n_live == cap_live) {
        size_t nc = cap_live ? cap_live * 2 : 16;
        struct big *nl = realloc(live, nc * sizeof(*nl));
        if (!nl) {
            pthread_mutex_unlock(&lock);
            munmap(b.p, b.cap);
            return -ENOMEM;
        }
        live = nl;
        cap_live = nc;
    }
    live[n_live++] = b;
    pthread_mutex_unlock(&lock);
    *out = b.p;
    if (cap)
        *cap = b.cap;
    return 0;
}

int kvfs_big_release(void *p)
{
    if (!p)
        return 0;
    struct big b = {NULL, 0}, drop = {NULL, 0};
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < n_live; i++)
        if (live[i].p == p) {
            b = live[i];
            live[i] = live[--n_live];
            break;
        }
    if (b.p) {
        if (n_spare < SPARES) {
            spare[n_spare++] = b;
        } else { /* full: the smallest of them and this one goes */
            size_t small = 0;
            for (size_t i = 1; i < n_spare; i++)
                if (spare[i].cap < spare[small].cap)
                    small = i;
            if (spare[small].cap < b.cap) {
                drop = spare[small];
                spare[small] = b;
            } else {
                drop = b;
            }
        }
    }
    pthread_mutex_unlock(&lock);
    if (b.p && getenv("KVFS_INGEST_PROFILE"))
        fprintf(stderr, "kvfs: big buffer of %zu back: %s\n", b.cap, drop.p ? "one unmapped" : "kept");
    if (drop.p)
        munmap(drop.p, drop.cap);
    return b.p != NULL;
}

void kvfs_big_trim(void)
{
    pthread_mutex_lock(&lock);
    struct big s[SPARES];
    size_t n = n_spare;
    for (size_t i = 0; i < n; i++)
        s[i] = spare[i];
    n_spare = 0;
    pthread_mutex_unlock(&lock);
    for (size_t i = 0; i < n; i++)
        munmap(s[i].p, s[i].cap);
}
