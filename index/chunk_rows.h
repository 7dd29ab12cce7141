/* chunk_rows.h - the store's in-memory table of chunk rows: every chunk the
 * store holds, sorted by hash (binary search), with the bytes they take.
 * Not thread-safe: the store calls it under its lock. */
#ifndef KVFS_CHUNK_ROWS_H
#define KVFS_CHUNK_ROWS_H

#include <stddef.h>
#include <stdint.h>

#include "chunk_info.h"

struct chunk_rows {
    struct kvfs_chunk_info **v; /* sorted by hash */
    size_t n, cap;
    uint64_t bytes_stored, bytes_logical; /* sums over the rows */
};

/* The index of hash's row (*found = 1), or where it would go (*found = 0). */
long chunk_rows_find(const struct chunk_rows *t, const char *hash, int *found);
struct kvfs_chunk_info *chunk_rows_get(const struct chunk_rows *t, const char *hash);
/* Add a row, or replace the one with the same hash; -ENOMEM. */
int chunk_rows_insert(struct chunk_rows *t, const struct kvfs_chunk_info *info);
void chunk_rows_remove(struct chunk_rows *t, const char *hash);
void chunk_rows_free(struct chunk_rows *t);

#endif
