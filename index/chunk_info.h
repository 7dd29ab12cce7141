/* chunk_info.h - what the store knows about one chunk (a row of its index,
 * index_db.h, and of its in-memory table, chunk_rows.h), and the callback
 * that lists rows.  Its own header so that the index and the store's parts
 * share it without including the whole store API. */
#ifndef KVFS_CHUNK_INFO_H
#define KVFS_CHUNK_INFO_H

#include <stdint.h>

#include "kvformat.h"

struct kvfs_chunk_info {
    char hash[KVFS_HASH_HEX_LEN + 1];
    char model[17];          /* kvfs_fingerprint_id() of the chunk's model */
    char arch[16];
    uint32_t n_tokens;
    uint32_t n_layer;
    uint32_t dtype;
    uint64_t logical_size;   /* size of the v1 file image */
    uint64_t stored_size;    /* size of the object on disk */
    int64_t created_ns;      /* CLOCK_REALTIME */
    int64_t accessed_ns;
    uint64_t hits;
    int pinned;
    int in_ram;              /* currently held by the RAM tier */
    int held;                /* not evictable: a remote tier has yet to receive it */
    int remote;              /* the remote tier holds it (uploaded or fetched) */
    int remote_only;         /* known from the remote tier's listing, not stored here */
};

/* Called for each row of a listing: 0 to continue, non-zero to stop (that
 * value is returned). */
typedef int (*kvfs_store_list_cb)(const struct kvfs_chunk_info *info, void *ctx);

/* A row for the chunk whose (verified) header is h, named hash, stored in
 * `stored` bytes; the usage fields (times, hits, pinned) are zero. */
void kvfs_info_from_header(const struct kvfs_header *h, const char *hash, uint64_t stored,
                           struct kvfs_chunk_info *c);

#endif
