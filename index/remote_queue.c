/* remote_queue.c - the RADOS tier's write-back queue (remote_queue.h):
 * chunks stored here are queued durably (SQLite, remote-queue.db) and held
 * against eviction until the worker has pushed them; the pool's copies are
 * remembered (table uploaded). */
#include "remote_queue.h"

#ifdef KVFS_HAVE_RADOS
#include "remote_evict.h"
#include "remote_format.h"
#include "remote_lease.h"
#include "remote_quota.h"
#include "remote_usage.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

_Thread_local int remote_fetching;

/* The pool and namespace this store's queue, uploaded set and listing
 * belong to, recorded on first use (a queue from before namespaces: the
 * default one).  Another target is refused: its queued chunks would go into
 * another namespace (another tenant's), and what "uploaded" and the listing
 * say would be about other objects. */
static int queue_target_check(struct kvfs_remote *r, const char *path, char *err, size_t errlen)
{
    sqlite3_stmt *st = NULL;
    int rc = 0;
    if (sqlite3_exec(r->q, "CREATE TABLE IF NOT EXISTS target(pool TEXT NOT NULL, namespace TEXT NOT NULL)", NULL, NULL,
                     NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(r->q, "SELECT pool, namespace FROM target", -1, &st, NULL) != SQLITE_OK)
        return kvfs_errf(err, errlen, -EIO, "cannot read the upload queue's target in %s", path);
    if (sqlite3_step(st) == SQLITE_ROW) {
        const char *pool = (const char *)sqlite3_column_text(st, 0), *ns = (const char *)sqlite3_column_text(st, 1);
        if (!pool || !ns || strcmp(pool, r->pool) || strcmp(ns, r->ns))
            rc = kvfs_errf(err, errlen, -EINVAL,
                           "this store's upload queue and listing (%s) belong to pool %s, namespace '%s', not pool %s, "
                           "namespace '%s': a store serves one namespace (its chunks would otherwise reach another "
                           "tenant's); mount it with rados=%s,rados_namespace=%s, or give this namespace a store of its own",
                           path, pool ? pool : "?", ns ? ns : "?", r->pool, r->ns, pool ? pool : "?", ns ? ns : "?");
        sqlite3_finalize(st);
        return rc;
    }
    sqlite3_finalize(st);
    if (sqlite3_prepare_v2(r->q, "INSERT INTO target(pool, namespace) VALUES (?, ?)", -1, &st, NULL) != SQLITE_OK)
        return kvfs_errf(err, errlen, -EIO, "cannot record the upload queue's target in %s", path);
    sqlite3_bind_text(st, 1, r->pool, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, r->ns, -1, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_DONE)
        rc = kvfs_errf(err, errlen, -EIO, "cannot record the upload queue's target in %s", path);
    sqlite3_finalize(st);
    return rc;
}

int remote_queue_open(struct kvfs_remote *r, char *err, size_t errlen)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/remote-queue.db", kvfs_store_dir(r->s));
    if (sqlite3_open_v2(path, &r->q, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL) !=
            SQLITE_OK ||
        sqlite3_exec(r->q,
                     "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                     "CREATE TABLE IF NOT EXISTS queue(hash TEXT PRIMARY KEY, enqueued_at INTEGER);"
                     "CREATE TABLE IF NOT EXISTS uploaded(hash TEXT PRIMARY KEY);",
                     NULL, NULL, NULL) != SQLITE_OK)
        return kvfs_errf(err, errlen, -EIO, "cannot open the upload queue %s", path);
    /* failed uploads: how often (a queue of an older kvfs gets the column) */
    sqlite3_exec(r->q, "ALTER TABLE queue ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0", NULL, NULL, NULL);
    return queue_target_check(r, path, err, errlen);
}

void remote_queue_hold_queued(struct kvfs_remote *r)
{
    char hash[KVFS_HASH_HEX_LEN + 1];
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(r->q, "SELECT hash FROM queue", -1, &st, NULL) != SQLITE_OK)
        return;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const unsigned char *h = sqlite3_column_text(st, 0);
        if (!h)
            continue;
        snprintf(hash, sizeof(hash), "%s", (const char *)h);
        kvfs_store_hold(r->s, hash, 1);
        r->queued++;
    }
    sqlite3_finalize(st);
}

static int q_exec(struct kvfs_remote *r, const char *sql, const char *hash)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(r->q, sql, -1, &st, NULL);
    if (rc != SQLITE_OK)
        return -EIO;
    if (hash)
        sqlite3_bind_text(st, 1, hash, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : -EIO;
}

void remote_on_stored(void *ctx, const char *hash)
{
    struct kvfs_remote *r = ctx;
    if (remote_fetching)
        return;
    pthread_mutex_lock(&r->lock);
    int rc = q_exec(r, "INSERT OR IGNORE INTO queue(hash, enqueued_at) VALUES (?1, strftime('%s','now'))", hash);
    if (!rc && sqlite3_changes(r->q) > 0)
        r->queued++;
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
    if (rc)
        kvfs_log(KVFS_LOG_ERR, "remote tier: cannot queue %s for upload (queue database error)", hash);
    else
        kvfs_store_hold(r->s, hash, 1); /* not evictable before RADOS has it */
    remote_lease_produced(r, hash);
}

int remote_queue_peek(struct kvfs_remote *r, char (*out)[KVFS_HASH_HEX_LEN + 1], int n)
{
    sqlite3_stmt *st;
    int k = 0;
    pthread_mutex_lock(&r->lock);
    if (sqlite3_prepare_v2(r->q, "SELECT hash FROM queue WHERE enqueued_at <= strftime('%s','now') "
                                 "ORDER BY enqueued_at, hash LIMIT ?1", -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_int(st, 1, n);
        while (k < n && sqlite3_step(st) == SQLITE_ROW) {
            const unsigned char *h = sqlite3_column_text(st, 0);
            if (h && strlen((const char *)h) == KVFS_HASH_HEX_LEN)
                memcpy(out[k++], h, KVFS_HASH_HEX_LEN + 1);
        }
        sqlite3_finalize(st);
    }
    pthread_mutex_unlock(&r->lock);
    return k;
}

int remote_queue_defer(struct kvfs_remote *r, const char *hash)
{
    sqlite3_stmt *st;
    int attempts = -EIO;
    pthread_mutex_lock(&r->lock);
    /* 2, 4, 8 ... seconds, at most 10 minutes: behind everything due */
    if (sqlite3_prepare_v2(r->q, "UPDATE queue SET attempts = attempts + 1, enqueued_at = strftime('%s','now') + "
                                 "min(600, 1 << min(attempts + 1, 10)) WHERE hash = ?1 RETURNING attempts",
                           -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, hash, -1, SQLITE_STATIC);
        if (sqlite3_step(st) == SQLITE_ROW)
            attempts = sqlite3_column_int(st, 0);
        sqlite3_finalize(st);
    }
    pthread_mutex_unlock(&r->lock);
    return attempts;
}

void remote_mark_uploaded(struct kvfs_remote *r, const char *hash)
{
    pthread_mutex_lock(&r->lock);
    q_exec(r, "INSERT OR IGNORE INTO uploaded(hash) VALUES (?1)", hash);
    pthread_mutex_unlock(&r->lock);
}

static void q_done(struct kvfs_remote *r, const char *hash)
{
    pthread_mutex_lock(&r->lock);
    if (q_exec(r, "DELETE FROM queue WHERE hash = ?1", hash) == 0 && sqlite3_changes(r->q) > 0 && r->queued)
        r->queued--;
    pthread_mutex_unlock(&r->lock);
    kvfs_store_hold(r->s, hash, 0);
}

int remote_has_uploaded(void *ctx, const char *hash)
{
    struct kvfs_remote *r = ctx;
    sqlite3_stmt *st;
    int found = 0;
    pthread_mutex_lock(&r->lock);
    if (sqlite3_prepare_v2(r->q, "SELECT 1 FROM uploaded WHERE hash = ?1", -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, hash, -1, SQLITE_STATIC);
        found = sqlite3_step(st) == SQLITE_ROW;
        sqlite3_finalize(st);
    }
    pthread_mutex_unlock(&r->lock);
    return found;
}

/* Local chunks the pool has not had from us (stored before the tier was
 * configured, or while it was off) join the upload queue: a host that
 * joins shares what it has.  Content addressing makes re-uploads harmless. */
struct hash_list {
    char (*h)[KVFS_HASH_HEX_LEN + 1];
    size_t n, cap;
};

static int collect(const struct kvfs_chunk_info *c, void *ctx)
{
    struct hash_list *l = ctx;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 256;
        void *p = realloc(l->h, cap * sizeof(*l->h));
        if (!p)
            return -ENOMEM;
        l->h = p;
        l->cap = cap;
    }
    memcpy(l->h[l->n++], c->hash, KVFS_HASH_HEX_LEN + 1);
    return 0;
}

void remote_enqueue_unshared(struct kvfs_remote *r)
{
    struct hash_list l = {0};
    kvfs_store_list(r->s, collect, &l); /* runs under the store lock: act after */
    sqlite3_exec(r->q, "BEGIN", NULL, NULL, NULL);
    for (size_t i = 0; i < l.n; i++)
        if (!remote_has_uploaded(r, l.h[i]))
            remote_on_stored(r, l.h[i]);
    sqlite3_exec(r->q, "COMMIT", NULL, NULL, NULL);
    free(l.h);
}

static int read_object(struct kvfs_remote *r, const char *hash, uint8_t **buf, size_t *len)
{
    char p[4096];
    int rc = kvfs_store_object_path(r->s, hash, p, sizeof(p));
    if (rc)
        return rc;
    int fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -errno;
    struct stat st;
    rc = fstat(fd, &st) ? -errno : 0;
    *buf = rc ? NULL : malloc((size_t)st.st_size + 1);
    if (!rc && !*buf)
        rc = -ENOMEM;
    for (size_t got = 0; !rc && got < (size_t)st.st_size;) {
        ssize_t n = pread(fd, *buf + got, (size_t)st.st_size - got, (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            rc = n < 0 ? -errno : -EIO;
        else
            got += (size_t)n;
    }
    close(fd);
    if (rc) {
        free(*buf);
        *buf = NULL;
        return rc;
    }
    *len = (size_t)st.st_size;
    return 0;
}

int remote_push_one(struct kvfs_remote *r, rados_ioctx_t io, const char *hash, struct remote_view *v)
{
    struct kvfs_chunk_info ci;
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = kvfs_store_stat(r->s, hash, &ci);
    if (!rc)
        rc = read_object(r, hash, &buf, &len);
    if (rc == -ENOENT) { /* removed locally before it was pushed: nothing to keep */
        kvfs_log(KVFS_LOG_INFO, "remote tier: %s was removed before upload; dropped from the queue", hash);
        remote_lease_pushed(r, io, hash);
        q_done(r, hash);
        return 0;
    }
    if (rc)
        return rc;
    /* within remote_capacity: room first, so the pool never holds more
     * than capacity (a chunk it has already adds nothing) */
    if (v && !remote_view_has(v, hash) && (rc = remote_make_room(r, io, v, remote_capacity_now(r), hash, len))) {
        free(buf);
        if (rc == -ENOSPC)
            kvfs_log(KVFS_LOG_WARN, "remote tier: %s (%zu bytes) does not fit in remote_capacity %" PRIu64
                     " (%" PRIu64 " bytes in the pool, %" PRIu64 " pinned chunks): kept here, queued", hash, len,
                     remote_capacity_now(r), v->usage, v->pinned);
        return rc;
    }
    char entry[128], atime[24], akey[KVFS_HASH_HEX_LEN + 3];
    size_t elen = kvfs_remote_index_entry(&ci, len, entry, sizeof(entry));
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    size_t alen = kvfs_remote_use_key(hash, (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000, akey, atime,
                                      sizeof(atime));
    /* object and its xattrs in one atomic op; the same bytes from any host */
    rados_write_op_t op = rados_create_write_op();
    kvfs_remote_object_op(op, &ci, buf, len);
    rc = rados_write_op_operate(op, io, hash, NULL, 0);
    rados_release_write_op(op);
    free(buf);
    if (rc < 0)
        return rc;
    /* the per-model index, for listing without a pool scan, and the fleet's
     * registry of models (so a host finds indexes of models it never saw) */
    /* the entry, its use (an upload is a use) and the index's usage counter
     * in one write (remote_usage.h) */
    if ((rc = remote_index_put(io, ci.model, hash, entry, elen, akey, atime, alen, r->chg_keep)) < 0)
        return rc;
    const char *mkeys[1] = {ci.model}, *mvals[1] = {""};
    size_t mlens[1] = {0};
    op = rados_create_write_op();
    rados_write_op_omap_set(op, mkeys, mvals, mlens, 1);
    rc = rados_write_op_operate(op, io, KVFS_REMOTE_MODELS_OID, NULL, 0);
    rados_release_write_op(op);
    if (rc < 0)
        return rc;
    remote_lease_pushed(r, io, hash); /* before the queue empties: a waiting host finds the chunk */
    q_done(r, hash);
    remote_mark_uploaded(r, hash);
    if (v && !remote_view_has(v, hash))
        remote_view_add(v, hash, ci.model, len);
    pthread_mutex_lock(&r->lock);
    r->pushed++;
    pthread_mutex_unlock(&r->lock);
    return 0;
}
#endif
