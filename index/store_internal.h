/* store_internal.h - the store's state and the core it is built on
 * (store.c), for the files that implement the rest of store.h: opening
 * (store_open.c), ingest (store_put.c), reads (store_read.c), the remote
 * tier's hooks (store_remote.c) and blend results (store_results.c).  Those
 * use what is declared here; store.c uses none of them.  index/ only. */
#ifndef KVFS_STORE_INTERNAL_H
#define KVFS_STORE_INTERNAL_H

#include <pthread.h>
#include <stdio.h>
#include <sys/uio.h>

#include "chunk_rows.h"
#include "ram_tier.h"
#include "result_table.h"
#include "store.h"

struct kvfs_index_db;

struct kvfs_chunk_ref {
    struct kvfs_store *s;
    struct ram_entry *e;
};

struct kvfs_store {
    pthread_mutex_t lock;          /* protects everything below */
    struct kvfs_store_opts opts;
    char *dir;
    struct kvfs_index_db *db;
    struct chunk_rows rows;        /* every chunk stored here */
    uint64_t hits, misses, evictions, removals, puts, ingest_errors;
    struct ram_tier ram;           /* chunks and blend results, decoded */
    struct { void (*fn)(void *ctx, FILE *f); void *ctx; } extra[8];
    size_t n_extra;
    struct kvfs_store_remote remote; /* a tier below the disk (RADOS), or zeros */
    struct result_table results;   /* blend results on disk: within capacity too */
    /* images a lookup fetched that the RAM tier does not keep, parked for
     * the open that follows it (store_remote.c) */
    struct { struct kvfs_chunk_ref *ref; int64_t at_ns; } parked[8];
};

int64_t store_now_ns(void);
void store_object_path(const struct kvfs_store *s, const char *hash, char *out, size_t len);
/* a handle on e (whose reference the caller has counted); NULL on ENOMEM */
struct kvfs_chunk_ref *store_new_ref(struct kvfs_store *s, struct ram_entry *e);
/* 1 if the chunk is stored here (takes the lock) */
int store_has_chunk(struct kvfs_store *s, const char *hash);
/* The remote tier's hooks, a copy taken under the lock (zeros if none). */
struct kvfs_store_remote store_remote_hooks(struct kvfs_store *s);
/* A local miss: ask the remote tier, if any (without the lock held); ref as
 * the fetch hook's (store.h). */
int store_fetch_remote(struct kvfs_store *s, const char *hash, struct kvfs_chunk_ref **ref);

/* with s->lock held: */
/* A fetched image parked for this chunk's open (the lock stays held), or NULL. */
struct kvfs_chunk_ref *store_take_parked(struct kvfs_store *s, const char *hash);
/* Release parked images: hash's (NULL: those past their wait, or all with all set). */
void store_drop_parked(struct kvfs_store *s, const char *hash, int all);
/* remove a chunk: object, index row, table row, RAM copy */
int store_remove_locked(struct kvfs_store *s, const char *hash);
/* evict least recently used chunks and results until need more bytes fit */
int store_evict_for(struct kvfs_store *s, uint64_t need);

/* Write an object's bytes to a new temporary file under tmp/ (its path into
 * tmp); the open descriptor, or -errno with err set and nothing left behind. */
int store_write_tmp(struct kvfs_store *s, const char *name, const void *obj, size_t len, char tmp[4096], char *err,
                    size_t errlen);
/* The same, the object given as parts written in order (kvfs_obj_parts) */
int store_write_tmp_iov(struct kvfs_store *s, const char *name, const struct iovec *iov, int n, char tmp[4096],
                        char *err, size_t errlen);

#endif
