/* store_internal.h - the store's state and the core it is built on
 * (store.c), for the files that implement the rest of store.h: opening
 * (store_open.c), ingest (store_put.c), reads (store_read.c), the remote
 * tier's hooks (store_remote.c) and blend results (store_results.c).  Those
 * use what is declared here; store.c uses none of them.  index/ only. */
#ifndef KVFS_STORE_INTERNAL_H
#define KVFS_STORE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
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

/* Images kvfs_store_put_keep_async took, written by one thread in order.
 * Its own lock (never taken with s->lock held by a waiter): a put's commit
 * takes s->lock. */
struct async_put;
struct store_async {
    pthread_mutex_t lock;
    pthread_cond_t cond;          /* a put done, room made, or work queued */
    struct async_put *head, *tail; /* queued and the one being written (head) */
    size_t n;                     /* queued + being written */
    uint64_t bytes;               /* their images' sizes */
    atomic_size_t waiting;        /* n, for store_settle's lock-free look */
    int test_delay_ms;            /* KVFS_TEST_ASYNC_PUT_DELAY_MS: each write starts that late */
    uint64_t stored, failed;      /* since open */
    pthread_t thread;
    int started, stopping;
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
    struct store_async async;      /* puts written after they returned (store_async.c) */
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

/* Wait until no queued async put (store_async.c) is for hash (NULL: none
 * at all), so that a lookup never misses a chunk a put returned for.  Never
 * with s->lock held. */
void store_settle(struct kvfs_store *s, const char *hash);
/* Set up / write every queued put and stop the writer (kvfs_store_close) */
void store_async_init(struct kvfs_store *s);
void store_async_close(struct kvfs_store *s);
/* puts queued or being written now; stored and failed since open */
void store_async_stats(struct kvfs_store *s, uint64_t *queued, uint64_t *stored, uint64_t *failed);
/* The rest of kvfs_store_put once the image is verified and named (h, hex):
 * encode, write, sync, move into place and index (store_put.c).  0 stored
 * (the caller then tells the remote tier: store_notify_stored), 1 stored
 * before by another writer, or -errno (counted). */
int store_put_verified(struct kvfs_store *s, const void *buf, const struct kvfs_header *h, const char *hex,
                       char *err, size_t errlen);
void store_notify_stored(struct kvfs_store *s, const char *hex);
/* check an image and name it (store_put.c) */
int store_check_image(const void *img, size_t len, struct kvfs_header *h, char hex[KVFS_HASH_HEX_LEN + 1], char *err,
                      size_t errlen);
/* give a stored chunk's verified image to the RAM tier (or free it) */
void store_ram_adopt(struct kvfs_store *s, const char *hash, uint8_t *img, size_t len);
void store_count_ingest_error(struct kvfs_store *s);

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
