/* bigbuf.h - big buffers kept for the next allocation (bigbuf.c): a chunk
 * image or a draft of tens of MB written into memory already touched
 * instead of fresh pages. */
#ifndef KVFS_BIGBUF_H
#define KVFS_BIGBUF_H

#include <stddef.h>
#include <stdint.h>

/* buffers this big or more are worth it (smaller ones: the heap's) */
#define KVFS_BIG_MIN ((size_t)8 << 20)

/* A page-aligned buffer of at least len bytes (*cap, may be NULL: how
 * many), contents undefined: a kept one when one is big enough (the
 * smallest such, or with largest the largest: for a buffer that may grow),
 * else fresh memory.  0 or -ENOMEM. */
int kvfs_big_alloc(size_t len, int largest, uint8_t **out, size_t *cap);
/* p back to be used again (or unmapped): 1 when p is one of
 * kvfs_big_alloc's, 0 (nothing done) for any other pointer or NULL */
int kvfs_big_release(void *p);
/* the kept buffers unmapped (tests; a daemon that wants its memory back) */
void kvfs_big_trim(void);

#endif
