/* remote_format.h - what the RADOS tier writes into the pool, in one place
 * (remote.h describes the layout): a chunk's object (the store object's
 * bytes, xattrs kvfs.model and kvfs.tokens), its model's index entry and
 * use key.  The upload (remote_queue.c) and bench/remote_populate.c both
 * write through these, so a synthetic pool cannot drift from a real one. */
#ifndef KVFS_REMOTE_FORMAT_H
#define KVFS_REMOTE_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "chunk_info.h"

#define KVFS_REMOTE_MODELS_OID "kvfs.models" /* registry: one omap key per model id */
#define KVFS_REMOTE_OID_MAX 64

#ifdef KVFS_HAVE_RADOS
#include <rados/librados.h>

/* Fill op with the chunk's object: its bytes (obj, len: the store object)
 * and xattrs, in one atomic write (librados copies the buffers). */
void kvfs_remote_object_op(rados_write_op_t op, const struct kvfs_chunk_info *ci, const void *obj, size_t len);
#endif

/* The model's index object, "kvfs.model.<id>". */
void kvfs_remote_index_oid(const char *model, char oid[KVFS_REMOTE_OID_MAX]);
/* The index entry's value, "tokens size layers arch osize" (osize: the
 * object's bytes, which the pool's usage sums).  Its length. */
size_t kvfs_remote_index_entry(const struct kvfs_chunk_info *ci, uint64_t osize, char *out, size_t cap);
/* An index entry's value, "tokens size layers arch osize" (older: fewer
 * fields): the object's bytes, or the logical size where osize is absent. */
uint64_t remote_entry_osize(const char *val, size_t vlen);
/* The use key "<hash>.a" and its value (unix ms).  The value's length. */
size_t kvfs_remote_use_key(const char *hash, int64_t ms, char key[KVFS_HASH_HEX_LEN + 3], char *val, size_t cap);

#endif
