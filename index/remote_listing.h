/* remote_listing.h - the fleet listing of the RADOS tier (remote.h): every
 * model's index object (kvfs.model.<id>, omap hash -> "tokens size layers
 * arch", models registered in kvfs.models) copied into this host's listing
 * (SQLite, remote-list.db), which the store shows without fetching. */
#ifndef KVFS_REMOTE_LISTING_H
#define KVFS_REMOTE_LISTING_H

#include "remote_internal.h"

#ifdef KVFS_HAVE_RADOS
/* Open (create) the listing database, emptied when listing is off. */
int remote_listing_open(struct kvfs_remote *r, char *err, size_t errlen);
/* One omap object's keys and values, in pages of 1000 (no pool scan); cb
 * returns non-zero to stop.  A missing object has none.  The count or -errno. */
long remote_omap_each(rados_ioctx_t io, const char *oid,
                      int (*cb)(void *ctx, const char *key, size_t klen, const char *val, size_t vlen), void *ctx);
/* One model's index object, entry by entry; the count or -errno. */
long remote_list_model(rados_ioctx_t io, const char *model_id, int (*cb)(void *ctx, const struct kvfs_chunk_info *c),
                       void *ctx);
/* Replace the listing with the fleet's per-model indexes (every model in
 * the registry object kvfs.models).  Returns 0 or -errno (outage). */
int remote_refresh_listing(struct kvfs_remote *r, rados_ioctx_t io);
/* A chunk evicted from the pool leaves this host's listing at once. */
void remote_listing_forget(struct kvfs_remote *r, const char *hash);
/* The store's list and stat hooks, over the listing (list: a page of it,
 * store.h's struct kvfs_store_remote). */
long remote_list_hook(void *ctx, const char *after, size_t limit, kvfs_store_list_cb cb, void *cbctx);
int remote_stat_hook(void *ctx, const char *hash, struct kvfs_chunk_info *out);
#endif

#endif
