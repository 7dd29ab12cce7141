/* remote_usage.h - the namespace's running usage (remote.h, "Capacity"):
 * each model index object keeps a counter, omap key "kvfs.usage" (decimal
 * bytes), of the object sizes its entries list, and a generation,
 * "kvfs.gen", that every entry added or removed moves on.  Both change in
 * the same write operation as the entries, which compares the generation
 * first (omap_cmp): a write that raced another is cancelled and tried again,
 * so the counter and the entries never disagree, whichever host writes and
 * without the evictor lock.  (The generation, not the counter, is compared:
 * a counter can come back to a value it had, an add and a removal of two
 * chunks of one size.)  A capacity check then reads one key per model
 * instead of every entry.  An index without the counter (a pool of an older
 * kvfs, or a synthetic one) is "unknown" until a full read of the indexes
 * sets it (remote_usage_reconcile).
 *
 * The change log: the same write also sets "kvfs.chg.<generation as 16 hex
 * digits>" to what it changed, "+ <hash> <entry>" (added or replaced) or
 * "- <hash>" (removed), and removes the key of the generation `keep` before
 * it ("p <hash>" and "u <hash>": pinned, unpinned; pins move the
 * generation too), so an index holds its last `keep` changes (at most the largest `keep`
 * any writer used).  A listing that read generation G reads only the keys
 * after G (remote_listing.c) and reads the index whole when one between is
 * missing (trimmed, or written by a kvfs without the log).  Readers of an
 * older kvfs take only 64-hex keys (and "<hash>.a/.p") from an index. */
#ifndef KVFS_REMOTE_USAGE_H
#define KVFS_REMOTE_USAGE_H

#include <stddef.h>
#include <stdint.h>

#define KVFS_REMOTE_USAGE_KEY "kvfs.usage"
#define KVFS_REMOTE_GEN_KEY "kvfs.gen"
#define KVFS_REMOTE_CHG_PREFIX "kvfs.chg."
#define KVFS_REMOTE_CHG_KEY_MAX 26   /* the prefix, 16 hex digits, NUL */
#define KVFS_REMOTE_CHG_KEEP 1024    /* changes kept per index unless remote_changes= says */

/* The change log's key of generation gen (fixed width: omap order is
 * generation order). */
void remote_chg_key(uint64_t gen, char key[KVFS_REMOTE_CHG_KEY_MAX]);
/* A change key's generation: 1 and *gen, or 0 when klen/key is not one. */
int remote_chg_gen(const char *key, size_t klen, uint64_t *gen);

#ifdef KVFS_HAVE_RADOS
#include <rados/librados.h>

/* A model index's counter as read (present or not) and its generation
 * (what the next write compares against; "" while it has none). */
struct remote_counter {
    int present;
    uint64_t bytes;
    char gen[24];
};

/* One model index's counter (an absent index: present, 0 bytes). */
int remote_counter_read(rados_ioctx_t io, const char *model, struct remote_counter *c);
/* Add (or replace) a chunk's entry and its use key in its model's index,
 * the counter changed by the object's size and the change logged (keep: the
 * changes the log keeps, <= 0 none) in the same operation.  0 or -errno. */
int remote_index_put(rados_ioctx_t io, const char *model, const char *hash, const char *entry, size_t elen,
                     const char *akey, const char *aval, size_t alen, int keep);
/* Remove a chunk's entry and use key unless it is pinned, the counter
 * lowered by its size and the change logged in the same operation.  0
 * (*size: the entry's object bytes), -EBUSY (pinned), -ENOENT (the index
 * does not list it) or -errno. */
int remote_index_remove(rados_ioctx_t io, const char *model, const char *hash, uint64_t *size, int keep);
/* Pin (pin 1) or unpin a chunk the index lists, the generation moved and
 * the change logged in the same operation (so listings follow pins).  0
 * (also when it was so already), -ENOENT (not listed) or -errno. */
int remote_index_pin(rados_ioctx_t io, const char *model, const char *hash, int pin, int keep);
/* After a full read counted `counted` bytes in the model's index, where
 * `before` was read just before it: set the counter, unless a write moved
 * it meanwhile (then that write's own count stands; the next read checks
 * again).  1 if it was wrong (or absent) and is now set, 0 if it was right
 * or moved, -errno. */
int remote_usage_reconcile(rados_ioctx_t io, const char *model, const struct remote_counter *before,
                           uint64_t counted);
#endif

#endif
