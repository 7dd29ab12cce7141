/* remote.h - the shared remote tier on Ceph RADOS (librados), below the
 * local disk and RAM tiers (see kvfs(8), "REMOTE TIER").
 *
 * Objects: name = the chunk's 64-hex content hash, bytes = the local store
 * object (object.h, zstd as configured), xattrs kvfs.model (fingerprint id)
 * and kvfs.tokens.  A per-model omap object "kvfs.model.<id>" maps hash ->
 * "tokens size layers arch", and the registry object "kvfs.models" has one
 * key per model, so hosts list what the fleet has without scanning the pool:
 * the worker copies every model's index into this host's listing (SQLite,
 * table known in remote-list.db; remote_listing.h) every list_refresh_s
 * seconds; the store shows those chunks a page at a time
 * (kvfs_store_list_remote_only / kvfs_store_stat_known) and fetches one when
 * it is opened or looked up by name (one operation for a name it lacks).
 * The formats written: remote_format.h.
 *
 * Reads: a local miss (kvfs_store_lookup/get/open_stream) fetches the whole
 * object (remote_fetch.c: the size and first MiB in one operation, then
 * ranged aio reads), verifies it exactly like a local ingest, stores it
 * locally and hands the verified image to the reader.
 * Writes: write-back through a durable queue (SQLite, remote-queue.db in the
 * store directory): ingest is acknowledged once the local store has fsynced
 * the chunk; its hash is queued in the same call; a worker pushes queued
 * chunks and dequeues them only after RADOS acknowledged the write.  A queued
 * chunk is held against local eviction, so nothing acknowledged is lost.
 *
 * Capacity (remote_capacity=, or the pool's quota: remote_quota.h;
 * remote_evict.c): usage is the sum of the object sizes the namespace's omap
 * indexes list (the entry's fifth field), kept as a counter in each index
 * (remote_usage.h).  An upload batch first takes the fleet's evictor lock
 * (rados_lock_exclusive on "kvfs.evictor", 30 s lease) and reads the
 * counters; when the batch does not fit, it reads every index afresh and
 * evicts the least recently used unpinned chunks until each new object
 * fits; the same pass runs when a check finds the pool over capacity.  Uses are kept
 * as omap keys "<hash>.a" (unix ms), written in batches every few seconds;
 * pins as "<hash>.p", which eviction checks atomically (omap_cmp).
 *
 * Bounds: every librados call is bounded by `timeout_s` (client mount, mon
 * and OSD op timeouts); after a failure the tier is "down" and lookups skip
 * it (fail fast) until the worker's probe reconnects. */
#ifndef KVFS_REMOTE_H
#define KVFS_REMOTE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "store.h"

struct kvfs_remote;

struct kvfs_remote_opts {
    const char *pool;      /* RADOS pool (required) */
    const char *ceph_conf; /* NULL: librados' search (CEPH_CONF, /etc/ceph/ceph.conf) */
    const char *rados_id;  /* client id, NULL: "admin" */
    const char *keyring;   /* cephx keyring of that client, NULL: the config's */
    const char *ns;        /* RADOS namespace of every object, NULL or "": the pool's default */
    int timeout_s;         /* bound on every remote call (default 5) */
    int list_refresh_s;    /* refresh the fleet listing this often (default 30; -1 = never) */
    uint64_t capacity;     /* remote_capacity: the pool's chunk bytes stay within it (0 = unbounded) */
    int capacity_quota;    /* capacity from the pool's max_bytes quota (remote_quota.h), re-read each minute */
    int lease_s;           /* remote_lease: a claim's lease in RADOS, seconds (default 30) */
    int changes;           /* remote_changes: changes each model index logs (default 1024; -1 = none) */
};

/* Open the tier for a store and hook it in (kvfs_store_set_remote).  A
 * cluster that cannot be reached is not an error: the tier starts "down"
 * and the worker keeps trying.  -ENOTSUP if built without librados. */
int kvfs_remote_open(struct kvfs_store *s, const struct kvfs_remote_opts *o, struct kvfs_remote **out,
                     char *err, size_t errlen);
void kvfs_remote_close(struct kvfs_remote *r);

/* JSON member for .kvfs/stats (kvfs_store_add_stats). */
void kvfs_remote_stats(void *ctx, FILE *f);
/* "connected", "down" or "connecting". */
const char *kvfs_remote_state(struct kvfs_remote *r);
/* Queued chunks not yet pushed. */
uint64_t kvfs_remote_queued(struct kvfs_remote *r);
/* 1 if the chunk is known to be in RADOS (pushed or fetched), 0 if queued
 * or unknown. */
int kvfs_remote_has(struct kvfs_remote *r, const char *hash);

/* Read [off, off+len) of a chunk's remote object (the loader's ranged
 * reads).  Returns bytes read or -errno. */
long kvfs_remote_read_range(struct kvfs_remote *r, const char *hash, uint64_t off, void *buf, size_t len);

/* Size of a chunk's remote object (-ENOENT if absent, -EHOSTDOWN while down). */
int kvfs_remote_size(struct kvfs_remote *r, const char *hash, uint64_t *size);
/* Asynchronous ranged read (rados_aio_read): done(arg, bytes or -errno) runs
 * on a librados thread when it completes.  0 if submitted. */
int kvfs_remote_aio_read(struct kvfs_remote *r, const char *hash, uint64_t off, void *buf, size_t len,
                         void (*done)(void *arg, long rc), void *arg);
/* Count a chunk the loader streamed from RADOS and stored locally. */
void kvfs_remote_note_fetched(struct kvfs_remote *r, const char *hash);

/* List the chunks the fleet has pushed for one model (from its omap index,
 * in pages; info with hash, model, arch, n_tokens, n_layer, logical_size);
 * cb returns non-zero to stop.  Returns the count or -errno. */
long kvfs_remote_list_model(struct kvfs_remote *r, const char *model_id,
                            int (*cb)(void *ctx, const struct kvfs_chunk_info *c), void *ctx);

/* ---- capacity, pins and eviction (remote_evict.c; kvfsctl remote) ---- */

/* One chunk in the pool as the fleet's indexes list it. */
struct kvfs_remote_entry {
    char hash[KVFS_HASH_HEX_LEN + 1];
    char model[17];
    uint64_t size;    /* the object's bytes (entries of older kvfs: the chunk's logical size) */
    int64_t atime_ms; /* last recorded use by any host, unix ms (0: none) */
    int pinned;
};

/* A connection of its own for an operator (no store, no worker): close it
 * with kvfs_remote_close.  Errors are said in err. */
int kvfs_remote_connect(const struct kvfs_remote_opts *o, struct kvfs_remote **out, char *err, size_t errlen);
/* Every chunk of the namespace, read afresh from the indexes, oldest use
 * first; *usage gets their bytes.  The count or -errno. */
long kvfs_remote_entries(struct kvfs_remote *r, int (*cb)(void *ctx, const struct kvfs_remote_entry *e), void *ctx,
                         uint64_t *usage);
/* Pin (never evicted) or unpin a chunk, for every host: -ENOENT if the pool
 * does not list it. */
int kvfs_remote_pin(struct kvfs_remote *r, const char *hash, int pin);
/* Under the evictor lock: evict one chunk (hash; -EBUSY if pinned; found
 * through its object's model, no index read whole), or, hash NULL, the
 * least recently used until the pool is within capacity.
 * Counts what went in *n and *bytes (may be NULL). */
int kvfs_remote_evict(struct kvfs_remote *r, const char *hash, uint64_t capacity, uint64_t *n, uint64_t *bytes,
                      char *err, size_t errlen);

/* ---- the pool against its indexes (remote_fsck.c; kvfsctl remote fsck) ---- */

enum kvfs_remote_problem_kind {
    KVFS_REMOTE_STRAY_OBJECT,   /* a chunk object no index lists (outside usage) */
    KVFS_REMOTE_MISSING_OBJECT, /* an index entry whose object is gone (listed, reads fail) */
};
struct kvfs_remote_problem {
    enum kvfs_remote_problem_kind kind;
    char hash[KVFS_HASH_HEX_LEN + 1];
    char model[17];   /* the entry's, or the object's kvfs.model ("" if none) */
    uint64_t size;    /* the object's bytes, or the entry's */
    int repaired;     /* 1 removed (the object, or the entry and its use and pin keys) */
    int repair_rc;    /* the repair's -errno when it failed */
};
struct kvfs_remote_fsck_sum {
    uint64_t objects, entries;     /* chunk objects scanned, index entries read */
    uint64_t stray, missing;       /* problems found */
    uint64_t repaired;             /* of them, repaired */
    uint64_t young;                /* stray objects younger than min_age_s: an upload or eviction in flight, left */
    uint64_t stray_keys;           /* use or pin keys without an entry (removed with repair) */
    uint64_t counters_set;         /* model indexes whose usage counter was wrong, set right */
};
/* Scan the namespace's objects (a pool scan) against its indexes: objects
 * no index lists and entries whose object is gone.  With repair, under the
 * evictor lock, remove each (the object; or the entry, its use and pin
 * keys, its usage counted off).  A stray object younger than min_age_s is
 * left (an upload writes the object before its entry).  cb (may be NULL)
 * hears each problem.  0 or -errno, said in err. */
int kvfs_remote_fsck(struct kvfs_remote *r, int repair, int min_age_s,
                     int (*cb)(void *ctx, const struct kvfs_remote_problem *p), void *ctx,
                     struct kvfs_remote_fsck_sum *sum, char *err, size_t errlen);

/* ---- claims: one computation per fleet (remote_lease.c) ----
 *
 * A host about to compute a chunk claims it first.  The answer: the chunk
 * is here or in the pool (read it), or the caller computes it under a lease
 * this mount took in RADOS (rados_lock_exclusive on "kvfs.lease.<hash>",
 * duration lease_s, renewed by the worker).  While another host holds the
 * lease the claim waits, polling, until the chunk appears in the pool or
 * the lease is let go or lapses (a crashed holder), up to timeout_ms.  A
 * lease whose chunk was stored here is kept until the upload put it in the
 * pool, then removed with its object; one never produced is let go when
 * its owner (the caller's control fd) releases it. */
enum { KVFS_CLAIMED_YOURS = 0, KVFS_CLAIMED_PRESENT = 1, KVFS_CLAIMED_LOCAL = 2 /* yours; the tier is down */ };
/* cancelled (may be NULL): polled while waiting; non-zero stops it (-EINTR).
 * *waited_ms: how long it waited.  A claim or -errno (-ETIMEDOUT). */
int kvfs_remote_claim(struct kvfs_remote *r, const char *hash, uint64_t owner, int timeout_ms,
                      int (*cancelled)(void *), void *cctx, int *waited_ms, char *err, size_t errlen);
/* Let go of owner's lease on hash (-ENOENT: none), or, hash NULL, of all
 * its leases not yet produced: the owner closed (a claim it is making then
 * ends without a lease, whatever its timing). */
int kvfs_remote_unclaim(struct kvfs_remote *r, const char *hash, uint64_t owner);
/* An owner opened (a control file): its claims may hold leases. */
void kvfs_remote_owner_open(struct kvfs_remote *r, uint64_t owner);
/* The namespace's lease objects (a scan of the pool's objects): each held
 * one is reported (held 1); a free or lapsed one (its host crashed) is
 * removed, then reported (held 0).  The count or -errno (kvfsctl remote). */
long kvfs_remote_leases(struct kvfs_remote *r, int (*cb)(void *ctx, const char *hash, int held), void *ctx);

#endif
