/* store.c - the core of the content-addressed chunk store: its state
 * (store_internal.h) and what the rest of the store is built on (paths,
 * removal, eviction, temporary files, the remote tier's hooks), and the
 * simple operations of store.h: stat, list, remove, pin, read a layer,
 * statistics.  Opening, ingest, reads and blend results are in
 * store_open.c, store_put.c, store_read.c and store_results.c; the tables
 * it keeps in chunk_rows.c, ram_tier.c and result_table.c.
 *
 * Locking: one mutex (s->lock) protects rows, counters and the RAM tier.
 * Object encoding, decoding, writing and fsync happen outside it.
 */
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "index_db.h"
#include "object.h"
#include "store_internal.h"

int64_t store_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void store_object_path(const struct kvfs_store *s, const char *hash, char *out, size_t len)
{
    snprintf(out, len, "%s/objects/%.2s/%s.kvo", s->dir, hash, hash);
}

int store_has_chunk(struct kvfs_store *s, const char *hash)
{
    store_settle(s, hash); /* a put returned for it may still be being written */
    pthread_mutex_lock(&s->lock);
    int found = chunk_rows_get(&s->rows, hash) != NULL;
    pthread_mutex_unlock(&s->lock);
    return found;
}

int kvfs_store_object_path(struct kvfs_store *s, const char *hash, char *out, size_t len)
{
    if (!store_has_chunk(s, hash))
        return -ENOENT;
    store_object_path(s, hash, out, len);
    return 0;
}

struct kvfs_chunk_ref *store_new_ref(struct kvfs_store *s, struct ram_entry *e)
{
    struct kvfs_chunk_ref *ref = calloc(1, sizeof(*ref));
    if (ref) {
        ref->s = s;
        ref->e = e;
    }
    return ref;
}

struct kvfs_store_remote store_remote_hooks(struct kvfs_store *s)
{
    pthread_mutex_lock(&s->lock);
    struct kvfs_store_remote r = s->remote;
    pthread_mutex_unlock(&s->lock);
    return r;
}

int store_fetch_remote(struct kvfs_store *s, const char *hash, struct kvfs_chunk_ref **ref)
{
    struct kvfs_store_remote r = store_remote_hooks(s);
    if (ref)
        *ref = NULL;
    return r.fetch ? r.fetch(r.ctx, s, hash, ref) : -ENOENT;
}

/* ---- removal and eviction (lock held) ---- */

int store_remove_locked(struct kvfs_store *s, const char *hash)
{
    char p[4096];
    store_object_path(s, hash, p, sizeof(p));
    if (unlink(p) != 0 && errno != ENOENT)
        return -errno;
    int rc = kvfs_idx_delete(s->db, hash);
    if (rc)
        kvfs_log(KVFS_LOG_WARN, "index delete of %s failed (%s); fixed at next open", hash, strerror(-rc));
    chunk_rows_remove(&s->rows, hash);
    ram_drop(&s->ram, hash);
    store_drop_parked(s, hash, 0);
    return 0;
}

int store_evict_for(struct kvfs_store *s, uint64_t need)
{
    if (!s->opts.capacity)
        return 0;
    if (need > s->opts.capacity)
        return -ENOSPC;
    /* chunks and blend results share the disk: the least recently used of
     * either goes first */
    while (s->rows.bytes_stored + s->results.bytes + need > s->opts.capacity) {
        struct kvfs_chunk_info *victim = NULL;
        for (size_t i = 0; i < s->rows.n; i++) {
            struct kvfs_chunk_info *c = s->rows.v[i];
            if (!c->pinned && !c->held && (!victim || c->accessed_ns < victim->accessed_ns))
                victim = c;
        }
        struct result_row *rv = result_table_lru(&s->results);
        if (rv && (!victim || rv->accessed_ns <= victim->accessed_ns)) {
            kvfs_log(KVFS_LOG_INFO, "evicting blend result %s (least recently used) to stay within capacity", rv->key);
            result_table_remove(&s->results, &s->ram, rv->key);
            s->results.evictions++;
            continue;
        }
        if (!victim)
            return -ENOSPC;
        char hash[KVFS_HASH_HEX_LEN + 1];
        memcpy(hash, victim->hash, sizeof(hash));
        kvfs_log(KVFS_LOG_INFO, "evicting %s (least recently used) to stay within capacity", hash);
        int rc = store_remove_locked(s, hash);
        if (rc)
            return rc;
        s->evictions++;
    }
    return 0;
}

/* ---- temporary files ---- */

static atomic_uint tmp_seq; /* temporary file names unique within the process */

int store_write_tmp_iov(struct kvfs_store *s, const char *name, const struct iovec *iov, int n, char tmp[4096],
                        char *err, size_t errlen)
{
    snprintf(tmp, 4096, "%s/tmp/%s.%d.%u.tmp", s->dir, name, (int)getpid(), atomic_fetch_add(&tmp_seq, 1));
    int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644), rc = 0;
    if (fd < 0) {
        rc = -errno;
        return kvfs_errf(err, errlen, rc, "cannot create %s: %s", tmp, strerror(-rc));
    }
    for (int i = 0; i < n && !rc; i++)
        rc = kvfs_write_full(fd, iov[i].iov_base, iov[i].iov_len);
    if (rc) {
        close(fd);
        unlink(tmp);
        return kvfs_errf(err, errlen, rc, "writing object failed: %s%s", strerror(-rc),
                         rc == -ENOSPC ? " (backing disk full)" : "");
    }
    return fd;
}

int store_write_tmp(struct kvfs_store *s, const char *name, const void *obj, size_t len, char tmp[4096], char *err,
                    size_t errlen)
{
    struct iovec one = {(void *)obj, len};
    return store_write_tmp_iov(s, name, &one, 1, tmp, err, errlen);
}

/* ---- lookups ---- */

int kvfs_store_stat(struct kvfs_store *s, const char *hash, struct kvfs_chunk_info *out)
{
    store_settle(s, hash); /* a put returned for it may still be being written */
    pthread_mutex_lock(&s->lock);
    struct kvfs_chunk_info *c = chunk_rows_get(&s->rows, hash);
    if (c) {
        *out = *c;
        out->in_ram = ram_lookup(&s->ram, hash) != NULL;
    }
    struct kvfs_store_remote r = s->remote;
    pthread_mutex_unlock(&s->lock);
    if (c)
        out->remote = r.has ? r.has(r.ctx, hash) == 1 : 0;
    return c ? 0 : -ENOENT;
}

int kvfs_store_list(struct kvfs_store *s, kvfs_store_list_cb cb, void *ctx)
{
    store_settle(s, NULL); /* every put that returned is listed */
    int rc = 0;
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->rows.n && !rc; i++)
        rc = cb(s->rows.v[i], ctx);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

uint64_t kvfs_store_count(struct kvfs_store *s)
{
    pthread_mutex_lock(&s->lock);
    uint64_t n = s->rows.n;
    pthread_mutex_unlock(&s->lock);
    return n;
}

/* ---- changes ---- */

int kvfs_store_remove(struct kvfs_store *s, const char *hash)
{
    store_settle(s, hash); /* a put returned for it may still be being written */
    if (s->opts.read_only)
        return -EROFS;
    pthread_mutex_lock(&s->lock);
    int rc = chunk_rows_get(&s->rows, hash) ? store_remove_locked(s, hash) : -ENOENT;
    if (!rc)
        s->removals++;
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int kvfs_store_set_pinned(struct kvfs_store *s, const char *hash, int pinned)
{
    store_settle(s, hash); /* a put returned for it may still be being written */
    if (s->opts.read_only)
        return -EROFS;
    pthread_mutex_lock(&s->lock);
    struct kvfs_chunk_info *c = chunk_rows_get(&s->rows, hash);
    int rc = -ENOENT;
    if (c && (rc = kvfs_idx_set_pinned(s->db, hash, pinned)) == 0)
        c->pinned = pinned ? 1 : 0;
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* A local chunk's object opened, its prefix read and its header parsed into
 * h (pointing into *hb), counting no hit: the caller closes *fd and frees
 * info and *hb. */
static int open_object_prefix(struct kvfs_store *s, const char *hash, int *fd, struct kvfs_obj_info *info,
                              uint8_t **hb, struct kvfs_header *h)
{
    char p[4096], why[256];
    struct stat st;
    int rc = kvfs_store_object_path(s, hash, p, sizeof(p));
    if (rc)
        return rc;
    if ((*fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0)
        return -errno;
    rc = fstat(*fd, &st) != 0 ? -errno : kvfs_obj_read_prefix(*fd, (uint64_t)st.st_size, info, hb, h, why, sizeof(why));
    if (rc) {
        close(*fd);
        *fd = -1;
    }
    return rc;
}

int kvfs_store_read_layer(struct kvfs_store *s, const char *hash, uint32_t layer, void *dst, size_t len)
{
    int fd;
    struct kvfs_obj_info info;
    struct kvfs_header h;
    uint8_t *hb = NULL;
    int rc = open_object_prefix(s, hash, &fd, &info, &hb, &h);
    if (rc)
        return rc;
    if (layer >= h.fp.n_layer || len < kvfs_layer_bytes(&h, layer))
        rc = -ERANGE;
    else
        rc = kvfs_obj_read_layer(fd, &info, &h, layer, dst);
    kvfs_obj_info_free(&info);
    free(hb);
    close(fd);
    return rc;
}

int kvfs_store_salt(struct kvfs_store *s, const char *hash, uint8_t salt[32])
{
    int fd;
    struct kvfs_obj_info info;
    struct kvfs_header h;
    uint8_t *hb = NULL;
    int rc = open_object_prefix(s, hash, &fd, &info, &hb, &h);
    if (rc)
        return rc;
    if (h.salt)
        memcpy(salt, h.salt, KVFS_SALT_BYTES);
    rc = h.salt != NULL;
    kvfs_obj_info_free(&info);
    free(hb);
    close(fd);
    return rc;
}

/* ---- statistics ---- */

int kvfs_store_stats_json(struct kvfs_store *s, char **out)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return -ENOMEM;
    pthread_mutex_lock(&s->lock);
    uint64_t pinned = 0;
    for (size_t i = 0; i < s->rows.n; i++)
        pinned += s->rows.v[i]->pinned != 0;
    fprintf(f,
            "{\n  \"chunks\": %zu,\n  \"pinned\": %" PRIu64 ",\n  \"bytes_logical\": %" PRIu64
            ",\n  \"bytes_stored\": %" PRIu64 ",\n  \"capacity\": %" PRIu64 ",\n  \"hits\": %" PRIu64
            ",\n  \"misses\": %" PRIu64 ",\n  \"evictions\": %" PRIu64 ",\n  \"removals\": %" PRIu64
            ",\n  \"ingested\": %" PRIu64 ",\n  \"ingest_errors\": %" PRIu64 ",\n  \"zstd_level\": %d,\n"
            "  \"tiers\": {\n    \"ram\": {\"chunks\": %zu, \"bytes\": %" PRIu64 ", \"capacity\": %" PRIu64
            ", \"hits\": %" PRIu64 "},\n    \"disk\": {\"chunks\": %zu, \"bytes\": %" PRIu64
            ", \"capacity\": %" PRIu64 "}\n  }",
            s->rows.n, pinned, s->rows.bytes_logical, s->rows.bytes_stored, s->opts.capacity, s->hits, s->misses,
            s->evictions, s->removals, s->puts, s->ingest_errors, s->opts.zstd_level, s->ram.count, s->ram.used,
            s->opts.ram_bytes, s->ram.hits, s->rows.n, s->rows.bytes_stored, s->opts.capacity);
    result_table_stats(&s->results, &s->ram, f);
    size_t n_extra = s->n_extra;
    pthread_mutex_unlock(&s->lock);
    uint64_t queued, stored, failed;
    store_async_stats(s, &queued, &stored, &failed);
    fprintf(f, ",\n  \"async_puts\": {\"queued\": %" PRIu64 ", \"stored\": %" PRIu64 ", \"failed\": %" PRIu64
            "}", queued, stored, failed);
    /* outside the store lock: the blend service calls the store under its
     * own lock, so its stats must not be taken under ours */
    for (size_t i = 0; i < n_extra; i++)
        if (s->extra[i].fn)
            s->extra[i].fn(s->extra[i].ctx, f);
    fprintf(f, "\n}\n");
    fclose(f);
    *out = buf;
    return 0;
}

void kvfs_store_set_pin(struct kvfs_store *s, int (*pin)(void *arg, void *p, size_t n), void *pin_arg,
                        void (*unpin)(void *arg, void *p), void *unpin_arg)
{
    struct ram_pin p = {pin, pin_arg, unpin, unpin_arg};
    pthread_mutex_lock(&s->lock);
    ram_set_pin(&s->ram, pin ? &p : NULL);
    pthread_mutex_unlock(&s->lock);
}

int kvfs_store_add_stats(struct kvfs_store *s, void (*fn)(void *ctx, FILE *f), void *ctx)
{
    if (s->n_extra >= sizeof(s->extra) / sizeof(s->extra[0]))
        return -ENOSPC;
    s->extra[s->n_extra].fn = fn;
    s->extra[s->n_extra].ctx = ctx;
    s->n_extra++;
    return 0;
}

const char *kvfs_store_dir(const struct kvfs_store *s) { return s->dir; }
