/* remote_evict.h - the RADOS tier's pool within remote_capacity (remote.h,
 * "Capacity"): a fresh view of the namespace's omap indexes (sizes, uses,
 * pins), the fleet's evictor lock, eviction by least recent use, and the
 * chunks' use times, written into the indexes in batches. */
#ifndef KVFS_REMOTE_EVICT_H
#define KVFS_REMOTE_EVICT_H

#include "remote.h"
#include "remote_internal.h"

#ifdef KVFS_HAVE_RADOS
/* Every model index read afresh, into a private temporary SQLite database
 * (on disk, its cache bounded: a pool of millions of chunks is never held
 * in memory): table e(hash, model, size, atime, pinned), ordered for
 * eviction by (atime, hash); and use-time keys whose entry is gone (left by
 * a flush racing an eviction). */
struct remote_view {
    sqlite3 *db;
    int64_t cur_atime; /* eviction's cursor: the candidates after (cur_atime, cur_hash) */
    char cur_hash[KVFS_HASH_HEX_LEN + 1];
    double lock_at; /* the lease last taken or renewed (monotonic) */
    uint64_t usage, pinned;
    int reconciled; /* model indexes whose usage counter the read corrected */
    struct remote_orphan { char model[17]; char key[KVFS_HASH_HEX_LEN + 3]; } *orphans;
    size_t n_orphans, cap_orphans;
};

/* Remove the use and pin keys whose entry is gone (the view's orphans). */
void remote_view_clean_orphans(rados_ioctx_t io, struct remote_view *v);
/* The namespace's usage from the counters (remote_usage.h): the sum of
 * every registered model's.  *known is 0 when some index has none (a full
 * read must set it).  One read per model; 0 or -errno. */
int remote_usage_read(rados_ioctx_t io, uint64_t *usage, int *known);
/* Read right after taking the lock: the lease counts from then. */
int remote_view_read(rados_ioctx_t io, struct remote_view *v);
void remote_view_free(struct remote_view *v);
/* The stats from a view read under the evictor lock: usage, pins, and one
 * more eviction pass when evicted moved past evicted_before */
void remote_note_view(struct kvfs_remote *r, const struct remote_view *v, uint64_t evicted_before);
/* The evictor lock (lease 30 s, so a crashed holder's lapses): waits up
 * to the tier's timeout for another holder; -EBUSY when it did not let go. */
int remote_evict_lock(struct kvfs_remote *r, rados_ioctx_t io);
void remote_evict_unlock(struct kvfs_remote *r, rados_ioctx_t io);
/* Extend the lease when a third of it is gone (long batches and passes);
 * an error means the lock was lost: stop. */
int remote_evict_renew(struct kvfs_remote *r, rados_ioctx_t io, struct remote_view *v);
/* Holding the lock: evict the least recently used unpinned chunks (never
 * keep) until usage + need <= cap; -ENOSPC when pins leave no room. */
int remote_make_room(struct kvfs_remote *r, rados_ioctx_t io, struct remote_view *v, uint64_t cap, const char *keep,
                     uint64_t need);
/* 1 if the view lists the chunk (an upload of it adds nothing). */
int remote_view_has(const struct remote_view *v, const char *hash);
/* An upload the view must count. */
int remote_view_add(struct remote_view *v, const char *hash, const char *model, uint64_t size);
/* Note a use of a chunk of the pool (fetched, streamed): written later. */
void remote_atime_note(struct kvfs_remote *r, const char *hash, const char *model);
/* Write the noted uses: one omap write per model index.  0 or -errno. */
int remote_atime_flush(struct kvfs_remote *r, rados_ioctx_t io);
/* Lock, flush, read, evict to capacity, unlock (the worker, when a listing
 * finds the pool over capacity).  0, -EBUSY or -errno. */
int remote_evict_pass(struct kvfs_remote *r, rados_ioctx_t io);
/* This process's name as a lock holder. */
void remote_cookie_init(struct kvfs_remote *r);
#endif

#endif
