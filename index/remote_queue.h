/* remote_queue.h - the RADOS tier's write-back queue (remote.h, "Writes"):
 * a chunk newly stored here is queued in the same call (SQLite,
 * remote-queue.db) and held against local eviction; the worker pushes
 * queued chunks and dequeues them only after RADOS acknowledged the write.
 * Chunks the pool has (pushed or fetched) are remembered, for the tier's
 * display and so that a restart does not upload them again. */
#ifndef KVFS_REMOTE_QUEUE_H
#define KVFS_REMOTE_QUEUE_H

#include "remote_internal.h"

#ifdef KVFS_HAVE_RADOS
/* set while the tier stores a chunk it fetched: remote_on_stored must not
 * queue it again */
extern _Thread_local int remote_fetching;

/* Open (create) the queue database. */
int remote_queue_open(struct kvfs_remote *r, char *err, size_t errlen);
/* chunks queued before a restart stay held until pushed */
void remote_queue_hold_queued(struct kvfs_remote *r);
/* The store's "stored" hook: queue the chunk and hold it. */
void remote_on_stored(void *ctx, const char *hash);
/* Local chunks the pool has not had from us join the queue. */
void remote_enqueue_unshared(struct kvfs_remote *r);
/* Up to n queued hashes that are due, oldest first. */
int remote_queue_peek(struct kvfs_remote *r, char (*out)[KVFS_HASH_HEX_LEN + 1], int n);
/* Push one queued chunk (object, xattrs, its model's index entry and use
 * time, the registry of models) and dequeue it; 0 or a librados -errno.
 * With a view (remote_capacity, the evictor lock held): room is made first
 * (-ENOSPC when pinned chunks leave none) and the view counts it. */
struct remote_view;
int remote_push_one(struct kvfs_remote *r, rados_ioctx_t io, const char *hash, struct remote_view *v);
/* An upload that failed for this chunk alone (not an outage): it goes
 * behind the others, due again after 2, 4 ... 600 s, so that one chunk the
 * pool refuses does not hold up the queue; the attempts so far, or -EIO. */
int remote_queue_defer(struct kvfs_remote *r, const char *hash);
/* The pool has it (pushed or fetched): remember. */
void remote_mark_uploaded(struct kvfs_remote *r, const char *hash);
/* The store's "has" hook: 1 if the pool has the chunk from us. */
int remote_has_uploaded(void *ctx, const char *hash);
#endif

#endif
