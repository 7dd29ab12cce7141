/* store.h - the kvfs storage core: content-addressed chunk objects in a
 * backing directory, a SQLite index, a RAM tier, capacity and eviction.
 *
 * No FUSE here: fs/ is a thin layer over this API.  Every function returns 0
 * or a negative errno; where an `err` buffer is taken, a human-readable reason
 * is written to it on failure (the caller logs it).  Thread-safe: one store
 * may be used from many threads at once.
 */
#ifndef KVFS_STORE_H
#define KVFS_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "chunk_info.h" /* struct kvfs_chunk_info, kvfs_store_list_cb */
#include "kvformat.h"
#include "log.h"  /* kvfs_log, kvfs_errf */
#include "util.h" /* kvfs_write_full, kvfs_parse_size */

struct kvfs_store;      /* opaque */
struct kvfs_chunk_ref;  /* opaque, refcounted handle on a chunk's bytes */

enum kvfs_tier {
    KVFS_TIER_RAM = 0,    /* decompressed copy held in memory */
    KVFS_TIER_DISK = 1,   /* object in the backing directory */
    KVFS_TIER_REMOTE = 2, /* reserved: RADOS */
};

struct kvfs_store_opts {
    const char *dir;        /* backing directory; created if missing */
    uint64_t capacity;      /* hard limit on stored (on-disk) bytes; 0 = unlimited */
    uint64_t ram_bytes;     /* RAM tier size; 0 = no RAM tier */
    int zstd_level;         /* 0 = store raw, 1..19 = zstd level (default 1) */
    int read_only;          /* open without modifying (fsck, info) */
    int no_sync;            /* skip fsync (bulk population in benchmarks only) */
    uint64_t result_capacity; /* disk bytes for blend results (0 = 1 GiB; always within capacity) */
};

/* struct kvfs_chunk_info, a chunk's metadata: chunk_info.h */

int kvfs_store_open(const struct kvfs_store_opts *opts, struct kvfs_store **out,
                    char *err, size_t errlen);
void kvfs_store_close(struct kvfs_store *s);

/* Ingest a complete v1 file image.  Verifies it (header, checksums, padding),
 * computes its content hash, and, if expect_hash is not NULL, requires it to
 * match (-EINVAL otherwise).  Compresses, writes a temp file, fsyncs, renames,
 * fsyncs the directory, then indexes it; evicts LRU unpinned chunks first if
 * capacity requires (-ENOSPC if impossible; nothing is left behind).
 * Storing a chunk that already exists is a no-op success.  hash_out (may be
 * NULL) receives the hex hash. */
int kvfs_store_put(struct kvfs_store *s, const void *buf, size_t len,
                   const char *expect_hash, char hash_out[KVFS_HASH_HEX_LEN + 1],
                   char *err, size_t errlen);
/* kvfs_store_put, and then the image stays in the RAM tier (when it has
 * room), so that reading the chunk soon after (a saved conversation
 * restored) needs no decode of the stored object.  *img (kvfs_img_free's
 * to free: malloc'ed, or kvfs_img_alloc'ed) is taken on success (NULL
 * after); on failure it is left to the caller. */
int kvfs_store_put_keep(struct kvfs_store *s, uint8_t **img, size_t len, char hash_out[KVFS_HASH_HEX_LEN + 1],
                        char *err, size_t errlen);

/* kvfs_store_put_keep, the object written by the store's writer thread
 * after this returns (store_async.c): the image is verified and named here
 * (those errors as put_keep's, *img left to the caller), then *img is taken.
 * Until it is stored, every function here that takes its name waits for it,
 * so none sees it missing; kvfs_store_list waits for every queued put.  A
 * write that fails then (disk full, over capacity) is logged and counted in
 * ingest_errors, and the chunk is not stored.  For writers that must not
 * wait for the disk (llama.cpp slot saves: the server stalls until close).
 * At most a few puts wait at once: past that a put waits for room. */
int kvfs_store_put_keep_async(struct kvfs_store *s, uint8_t **img, size_t len, char hash_out[KVFS_HASH_HEX_LEN + 1],
                              char *err, size_t errlen);
/* Return once every put kvfs_store_put_keep_async queued is stored or has
 * failed (a daemon stopping, before its remote tier goes) */
void kvfs_store_flush(struct kvfs_store *s);

/* Look up metadata (-ENOENT if absent). Does not count as a hit. */
int kvfs_store_stat(struct kvfs_store *s, const char *hash, struct kvfs_chunk_info *out);

/* Iterate over all indexed chunks, in hash order.  The callback returns 0 to
 * continue or non-zero to stop (that value is returned). */
int kvfs_store_list(struct kvfs_store *s, kvfs_store_list_cb cb, void *ctx);
uint64_t kvfs_store_count(struct kvfs_store *s);

/* Open a chunk for reading: counts a hit (or a miss on -ENOENT), updates the
 * access time, and returns a refcounted handle whose bytes stay valid until
 * released, even if the chunk is removed or evicted meanwhile. */
int kvfs_store_get(struct kvfs_store *s, const char *hash, struct kvfs_chunk_ref **out);
/* kvfs_store_get for a reader the daemon serves itself (a llama/ view): a
 * chunk not in the RAM tier is decoded into the daemon's own memory, a big
 * one into a kept buffer (bigbuf.c), not a shared image the kernel could
 * read (FUSE passthrough); so a restore decodes into memory already
 * touched.  While that image is in the RAM tier, chunks/HASH.kv is read
 * through the daemon. */
int kvfs_store_get_private(struct kvfs_store *s, const char *hash, struct kvfs_chunk_ref **out);
/* Open a chunk for layer-wise streaming (counts a hit like kvfs_store_get):
 * if the RAM tier holds it, *ram_ref gets a handle on the decoded image and
 * *fd = -1; otherwise *ram_ref = NULL and *fd is an open descriptor on its
 * store object (see object.h), which stays readable even if the chunk is
 * removed or evicted meanwhile.  The caller closes fd / releases the ref. */
int kvfs_store_open_stream(struct kvfs_store *s, const char *hash, struct kvfs_chunk_ref **ram_ref, int *fd);
/* The same for local tiers only (-ENOENT on a local miss: the caller streams
 * from the remote tier itself). */
int kvfs_store_open_stream_local(struct kvfs_store *s, const char *hash, struct kvfs_chunk_ref **ram_ref, int *fd);
/* Read up to len bytes of the v1 image at off; returns bytes read or -errno. */
ssize_t kvfs_chunk_pread(struct kvfs_chunk_ref *ref, void *dst, size_t len, uint64_t off);
uint64_t kvfs_chunk_size(const struct kvfs_chunk_ref *ref);
/* Whole image in memory (decompresses or maps if needed); NULL on error. */
const void *kvfs_chunk_data(struct kvfs_chunk_ref *ref);
void kvfs_chunk_release(struct kvfs_chunk_ref *ref);
/* The chunk's hash or the blend result's key: equal keys, equal bytes. */
const char *kvfs_chunk_key(const struct kvfs_chunk_ref *ref);
/* A second handle on the same bytes (NULL on ENOMEM). */
struct kvfs_chunk_ref *kvfs_chunk_ref_dup(struct kvfs_chunk_ref *ref);

int kvfs_store_remove(struct kvfs_store *s, const char *hash);
int kvfs_store_set_pinned(struct kvfs_store *s, const char *hash, int pinned);

/* JSON object with counts, bytes logical/stored, hits, misses, evictions,
 * capacity, per-tier usage.  *out is malloc'ed; caller frees. */
int kvfs_store_stats_json(struct kvfs_store *s, char **out);

/* fsck: check every object against the index and its checksums; with
 * rebuild, recreate the index from the objects alone and remove temp files
 * and invalid objects (moved to DIR/lost+found).  Progress and problems go to
 * report (may be NULL).  Returns 0 if consistent (or repaired), -EUCLEAN if
 * problems remain. */
typedef void (*kvfs_fsck_report)(void *ctx, const char *line);
int kvfs_store_fsck(const char *dir, int rebuild, kvfs_fsck_report report, void *ctx);

/* A tier below the local disk (index/remote.h implements one on RADOS).
 * fetch runs on a local miss, outside the store lock: it stores the chunk
 * locally (a kvfs_store_incoming, or kvfs_store_put_object) and returns 0,
 * or -ENOENT / -errno; with ref non-NULL it also hands back a reference on
 * the chunk's verified image, or leaves *ref NULL (the caller reads the
 * stored copy then).  stored runs after a chunk was newly stored (not for
 * no-op re-puts). */
struct kvfs_store_remote {
    int (*fetch)(void *ctx, struct kvfs_store *s, const char *hash, struct kvfs_chunk_ref **ref);
    void (*stored)(void *ctx, const char *hash);
    int (*has)(void *ctx, const char *hash); /* 1 if the remote tier holds it */
    /* what the fleet has, as far as this host's listing knows (no fetch):
     * info with hash, model, arch, n_tokens, n_layer, logical_size, in
     * hash order after `after` ("": from the first), at most limit rows (0:
     * all); cb returning non-zero stops there.  The rows cb took, or -errno */
    long (*list)(void *ctx, const char *after, size_t limit, kvfs_store_list_cb cb, void *cbctx);
    int (*stat)(void *ctx, const char *hash, struct kvfs_chunk_info *out);
    /* ranged reads for streaming a chunk only the remote tier has (the
     * loader, loader.h): the object's size, a synchronous read, an
     * asynchronous one whose done(arg, bytes or -errno) runs on another
     * thread, and a note that the streamed chunk was then stored here */
    int (*size)(void *ctx, const char *hash, uint64_t *size);
    long (*read_range)(void *ctx, const char *hash, uint64_t off, void *buf, size_t len);
    int (*aio_read)(void *ctx, const char *hash, uint64_t off, void *buf, size_t len, void (*done)(void *arg, long rc),
                    void *arg);
    void (*note_fetched)(void *ctx, const char *hash);
    void *ctx;
};
void kvfs_store_set_remote(struct kvfs_store *s, const struct kvfs_store_remote *r);
/* The remote tier's hooks (a copy), or -ENOENT when there is none. */
int kvfs_store_get_remote(struct kvfs_store *s, struct kvfs_store_remote *out);
/* Chunks only the remote tier has, from its listing (refreshed from the
 * fleet's per-model indexes; see remote.h), a page at a time, so a listing
 * of a million chunks is never held in memory: in hash order after the name
 * in `after` ("": from the first), at most limit rows of the listing (0:
 * all), cb for each one not stored here (remote_only = 1).  `after` moves
 * past every row consumed (given to cb, or skipped as stored here); a cb
 * that returns non-zero stops before its row, which the next page starts
 * with.  Returns the rows consumed (fewer than limit: the listing's end) or
 * -errno.  Nothing is fetched. */
long kvfs_store_list_remote_only(struct kvfs_store *s, char after[KVFS_HASH_HEX_LEN + 1], size_t limit,
                                 kvfs_store_list_cb cb, void *ctx);
/* kvfs_store_stat, else what the remote tier's listing knows (remote_only = 1;
 * nothing is fetched).  -ENOENT if neither knows the chunk. */
int kvfs_store_stat_known(struct kvfs_store *s, const char *hash, struct kvfs_chunk_info *out);
/* stat, and on a local miss ask the remote tier (which fills the local tiers). */
int kvfs_store_lookup(struct kvfs_store *s, const char *hash, struct kvfs_chunk_info *out);
/* Release the images lookups fetched that no open took in time (the
 * remote tier's worker calls it every second or so). */
void kvfs_store_expire_parked(struct kvfs_store *s);
/* Keep a chunk from being evicted (held = 1) until released (held = 0). */
int kvfs_store_hold(struct kvfs_store *s, const char *hash, int held);
/* Ingest a store object (object.h bytes, e.g. from a remote tier): decoded
 * and verified exactly like kvfs_store_put (bad objects: -EBADMSG/-EINVAL). */
int kvfs_store_put_object(struct kvfs_store *s, const void *obj, size_t len, const char *expect_hash,
                          char *err, size_t errlen);
/* The same, the object arriving in pieces (a remote tier's ranged reads):
 * each piece goes into a temporary file under tmp/ as it comes, in any
 * order, so the local copy is written while the rest is still on its way;
 * finish decodes and verifies it, makes it durable and moves it into place
 * (nothing is visible before), and with ref non-NULL hands back a reference
 * on the verified image, so the read that caused the fetch need not decode
 * the file again.  abort removes the temporary file.  Every call -errno
 * with err set on failure; after a failed finish nothing is left behind. */
struct kvfs_store_incoming {
    struct kvfs_store *s;
    int fd;
    char tmp[4096];
};
int kvfs_store_incoming_open(struct kvfs_store *s, const char *hash, struct kvfs_store_incoming *in, char *err,
                             size_t errlen);
int kvfs_store_incoming_write(struct kvfs_store_incoming *in, const void *buf, size_t len, uint64_t off, char *err,
                              size_t errlen);
/* write, the bytes at off gathered from up to KVFS_INCOMING_MAX_IOV pieces
 * of memory (a fetch's read that spans several layers of an image) */
#define KVFS_INCOMING_MAX_IOV 64
struct iovec;
int kvfs_store_incoming_writev(struct kvfs_store_incoming *in, const struct iovec *iov, int n, uint64_t off,
                               char *err, size_t errlen);
int kvfs_store_incoming_finish(struct kvfs_store_incoming *in, uint64_t len, const char *expect_hash,
                               struct kvfs_chunk_ref **ref, char *err, size_t errlen);
/* finish, the caller having decoded the object itself into img (taken,
 * kvfs_img_alloc'ed; its layers checked against the header's checksums and
 * their padding zeroed, as the pieces came): only the header and the name
 * are checked here, then the copy goes into place as above. */
int kvfs_store_incoming_finish_image(struct kvfs_store_incoming *in, uint64_t len, const char *expect_hash,
                                     uint8_t *img, size_t img_len, struct kvfs_chunk_ref **ref, char *err,
                                     size_t errlen);
void kvfs_store_incoming_abort(struct kvfs_store_incoming *in);

/* Blend results: composed caches (KVFS_FLAG_BLENDED images) named by the
 * caller's key (a recipe's, recipe.h), kept in the same tiers as chunks:
 * the RAM tier within ram_bytes, objects under DIR/results/ within
 * result_capacity and, with the chunks, within capacity, evicted least
 * recently used first.  They are derived data: never indexed, never listed
 * with chunks, never sent to the remote tier, not fsynced, and removed when
 * the store opens (recipes live with a mount).
 *
 * put verifies the image and takes ownership of img (also on error); *ref
 * (may be NULL) gets a handle on it even when it could not be kept (only
 * pinned results left to evict, or bigger than result_capacity): then the
 * image lives until the handle is released and kvfs_store_put_result
 * returns 0 with *kept = 0 and the reason in err.  get: -ENOENT if absent
 * (never computed, removed or evicted). */
int kvfs_store_put_result(struct kvfs_store *s, const char *key, uint8_t *img, size_t len,
                          struct kvfs_chunk_ref **ref, int *kept, char *err, size_t errlen);
int kvfs_store_get_result(struct kvfs_store *s, const char *key, struct kvfs_chunk_ref **ref);
int kvfs_store_remove_result(struct kvfs_store *s, const char *key);
int kvfs_store_pin_result(struct kvfs_store *s, const char *key, int pinned);
/* 1 if held on disk, 0 if not; *pinned, *in_ram (may be NULL) */
int kvfs_store_has_result(struct kvfs_store *s, const char *key, int *pinned, int *in_ram);

/* Path of a chunk's object file (for loaders that read layers directly). */
int kvfs_store_object_path(struct kvfs_store *s, const char *hash, char *out, size_t len);
/* Read and verify one layer (K then V, unpadded) of a chunk straight from its
 * object, without the RAM tier.  -ERANGE if len is too small, -EBADMSG on a
 * checksum mismatch. */
int kvfs_store_read_layer(struct kvfs_store *s, const char *hash, uint32_t layer, void *dst, size_t len);
/* A local chunk's salt (kvfs(5), KVFS_FLAG_SALTED) from its object's header,
 * counting no hit: 1 with salt filled, 0 if unsalted, -ENOENT if not stored
 * here (the remote tier's alone). */
int kvfs_store_salt(struct kvfs_store *s, const char *hash, uint8_t salt[32]);
const char *kvfs_store_dir(const struct kvfs_store *s);
/* Page-lock the RAM tier's images (blending on a GPU: its backend's
 * host_register), those cached now and those to come; pin NULL undoes it.
 * unpin must stay callable for as long as the store lives (an image a
 * reader holds is unpinned when released). */
void kvfs_store_set_pin(struct kvfs_store *s, int (*pin)(void *arg, void *p, size_t n), void *pin_arg,
                        void (*unpin)(void *arg, void *p), void *unpin_arg);
/* Let another component (blending, remote tier) append `,\n  "name": {...}`
 * members to the stats JSON; fn runs outside the store lock (it may take
 * its own lock, under which it may call the store).  Register before use. */
#include <stdio.h>
int kvfs_store_add_stats(struct kvfs_store *s, void (*fn)(void *ctx, FILE *f), void *ctx);

#endif
