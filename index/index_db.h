/* index_db.h - the SQLite index of chunks (DIR/index.sqlite, WAL mode).
 * The index is a cache of what the objects say plus usage data (hits,
 * access times, pinned): it can always be rebuilt from the objects. */
#ifndef KVFS_INDEX_DB_H
#define KVFS_INDEX_DB_H

#include <stddef.h>
#include <stdint.h>

#include "chunk_info.h"

struct kvfs_index_db;

int kvfs_idx_open(const char *path, int read_only, struct kvfs_index_db **out, char *err, size_t errlen);
void kvfs_idx_close(struct kvfs_index_db *db);
int kvfs_idx_insert(struct kvfs_index_db *db, const struct kvfs_chunk_info *info);
int kvfs_idx_delete(struct kvfs_index_db *db, const char *hash);
int kvfs_idx_touch(struct kvfs_index_db *db, const char *hash, int64_t accessed_ns, uint64_t hits);
int kvfs_idx_set_pinned(struct kvfs_index_db *db, const char *hash, int pinned);
/* Calls cb for every row (cb returns non-zero to stop). */
int kvfs_idx_load(struct kvfs_index_db *db, kvfs_store_list_cb cb, void *ctx);

#endif
