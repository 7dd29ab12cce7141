/* remote_rados.c - the shared remote tier on Ceph RADOS (see remote.h). */
#include "remote.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef KVFS_HAVE_RADOS
#include <rados/librados.h>

enum { ST_CONNECTING, ST_CONNECTED, ST_DOWN };
#define NEG_SLOTS 64
#define NEG_TTL_S 1.0   /* a miss is remembered this long: repeated lookups stay local */
#define RETRY_MAX_S 5.0 /* the worker retries at least this often while down */

struct kvfs_remote {
    struct kvfs_store *s;
    char *pool, *conf, *id;
    int timeout_s;
    pthread_mutex_t lock;        /* everything below */
    pthread_cond_t cond;
    rados_t cluster;
    rados_ioctx_t io;            /* NULL until connected once */
    int state, stop;
    sqlite3 *q;                  /* the durable write-back queue */
    uint64_t queued, pushed, fetched, rejected, errors;
    char last_error[256];
    struct { char hash[KVFS_HASH_HEX_LEN + 1]; double t; } neg[NEG_SLOTS];
    int neg_next;
    pthread_t worker;
    int worker_started;
    double list_refresh_s, listed_at; /* fleet listing: refresh period, last refresh (monotonic) */
    sqlite3 *lw, *lr;                 /* the listing (remote-list.db): worker writes, FUSE threads read;
                                       * separate from the queue so a refresh never shares its transaction */
    uint64_t known;                   /* chunks in the listing */
};

static _Thread_local int fetching; /* the store's "stored" hook must not re-queue a fetched chunk */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static const char *state_name(int st)
{
    return st == ST_CONNECTED ? "connected" : st == ST_DOWN ? "down" : "connecting";
}

/* Record a failure: the tier is down until a call succeeds again. */
static void mark_down(struct kvfs_remote *r, int rc, const char *what, const char *hash)
{
    pthread_mutex_lock(&r->lock);
    int was = r->state;
    r->errors++;
    r->state = ST_DOWN;
    snprintf(r->last_error, sizeof(r->last_error), "%s %s: %s", what, hash ? hash : "", strerror(-rc));
    pthread_mutex_unlock(&r->lock);
    if (was != ST_DOWN)
        kvfs_log(KVFS_LOG_WARN, "remote tier (pool %s) down: %s %s: %s; local tiers keep serving, writes are queued",
                 r->pool, what, hash ? hash : "", strerror(-rc));
}

static void mark_up(struct kvfs_remote *r)
{
    pthread_mutex_lock(&r->lock);
    int was = r->state;
    r->state = ST_CONNECTED;
    pthread_mutex_unlock(&r->lock);
    if (was == ST_DOWN)
        kvfs_log(KVFS_LOG_INFO, "remote tier (pool %s) reachable again", r->pool);
}

/* A timed-out or refused call means the cluster is unreachable; ENOENT,
 * EBADMSG and friends are answers. */
static int is_outage(int rc)
{
    return rc == -ETIMEDOUT || rc == -ENOTCONN || rc == -ECONNREFUSED || rc == -EHOSTUNREACH || rc == -ESHUTDOWN ||
           rc == -EAGAIN || rc == -EIO;
}

static int connect_cluster(struct kvfs_remote *r, char *err, size_t errlen)
{
    rados_t c;
    rados_ioctx_t io;
    char t[16];
    int rc = rados_create(&c, r->id);
    if (rc < 0)
        return kvfs_errf(err, errlen, rc, "rados_create: %s", strerror(-rc));
    snprintf(t, sizeof(t), "%d", r->timeout_s);
    if ((rc = rados_conf_read_file(c, r->conf)) < 0) {
        kvfs_errf(err, errlen, rc, "cannot read ceph config %s: %s", r->conf ? r->conf : "(default search)",
                  strerror(-rc));
        goto fail;
    }
    /* every call is bounded: mount, monitor and OSD operations */
    rados_conf_set(c, "client_mount_timeout", t);
    rados_conf_set(c, "rados_mon_op_timeout", t);
    rados_conf_set(c, "rados_osd_op_timeout", t);
    rados_conf_set(c, "objecter_tick_interval", "1");
    rados_conf_set(c, "objecter_timeout", "2");
    if ((rc = rados_connect(c)) < 0) {
        kvfs_errf(err, errlen, rc, "cannot connect to the cluster: %s", strerror(-rc));
        goto fail;
    }
    if ((rc = rados_ioctx_create(c, r->pool, &io)) < 0) {
        kvfs_errf(err, errlen, rc, "pool %s: %s", r->pool, strerror(-rc));
        goto fail;
    }
    pthread_mutex_lock(&r->lock);
    r->cluster = c;
    r->io = io;
    r->state = ST_CONNECTED;
    pthread_mutex_unlock(&r->lock);
    return 0;
fail:
    rados_shutdown(c);
    return rc;
}

static rados_ioctx_t io_of(struct kvfs_remote *r, int *state)
{
    pthread_mutex_lock(&r->lock);
    rados_ioctx_t io = r->io;
    *state = r->state;
    pthread_mutex_unlock(&r->lock);
    return io;
}

/* ---- the queue ---- */

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

static void on_stored(void *ctx, const char *hash)
{
    struct kvfs_remote *r = ctx;
    if (fetching)
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
}

/* Up to n queued hashes, oldest first. */
static int q_peek(struct kvfs_remote *r, char (*out)[KVFS_HASH_HEX_LEN + 1], int n)
{
    sqlite3_stmt *st;
    int k = 0;
    pthread_mutex_lock(&r->lock);
    if (sqlite3_prepare_v2(r->q, "SELECT hash FROM queue ORDER BY enqueued_at, hash LIMIT ?1", -1, &st, NULL) ==
        SQLITE_OK) {
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

/* The pool has it (pushed or fetched): remember, for tier display and so a
 * restart does not upload it again. */
static void mark_uploaded(struct kvfs_remote *r, const char *hash)
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

static int has_hook(void *ctx, const char *hash)
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

static void enqueue_unshared(struct kvfs_remote *r)
{
    struct hash_list l = {0};
    kvfs_store_list(r->s, collect, &l); /* runs under the store lock: act after */
    sqlite3_exec(r->q, "BEGIN", NULL, NULL, NULL);
    for (size_t i = 0; i < l.n; i++)
        if (!has_hook(r, l.h[i]))
            on_stored(r, l.h[i]);
    sqlite3_exec(r->q, "COMMIT", NULL, NULL, NULL);
    free(l.h);
}

/* ---- push (worker) ---- */

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

static int push_one(struct kvfs_remote *r, rados_ioctx_t io, const char *hash)
{
    struct kvfs_chunk_info ci;
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = kvfs_store_stat(r->s, hash, &ci);
    if (!rc)
        rc = read_object(r, hash, &buf, &len);
    if (rc == -ENOENT) { /* removed locally before it was pushed: nothing to keep */
        kvfs_log(KVFS_LOG_INFO, "remote tier: %s was removed before upload; dropped from the queue", hash);
        q_done(r, hash);
        return 0;
    }
    if (rc)
        return rc;
    char tokens[16], entry[96];
    snprintf(tokens, sizeof(tokens), "%u", ci.n_tokens);
    /* the listing entry: what ls -l needs without fetching the object */
    snprintf(entry, sizeof(entry), "%u %" PRIu64 " %u %s", ci.n_tokens, ci.logical_size, ci.n_layer, ci.arch);
    /* object and its xattrs in one atomic op; the same bytes from any host */
    rados_write_op_t op = rados_create_write_op();
    rados_write_op_write_full(op, (const char *)buf, len);
    rados_write_op_setxattr(op, "kvfs.model", ci.model, strlen(ci.model));
    rados_write_op_setxattr(op, "kvfs.tokens", tokens, strlen(tokens));
    rc = rados_write_op_operate(op, io, hash, NULL, 0);
    rados_release_write_op(op);
    free(buf);
    if (rc < 0)
        return rc;
    /* the per-model index, for listing without a pool scan, and the fleet's
     * registry of models (so a host finds indexes of models it never saw) */
    char idx[64];
    snprintf(idx, sizeof(idx), "kvfs.model.%s", ci.model);
    const char *keys[1] = {hash}, *vals[1] = {entry};
    size_t lens[1] = {strlen(entry)};
    op = rados_create_write_op();
    rados_write_op_omap_set(op, keys, vals, lens, 1);
    rc = rados_write_op_operate(op, io, idx, NULL, 0);
    rados_release_write_op(op);
    if (rc < 0)
        return rc;
    const char *mkeys[1] = {ci.model}, *mvals[1] = {""};
    size_t mlens[1] = {0};
    op = rados_create_write_op();
    rados_write_op_omap_set(op, mkeys, mvals, mlens, 1);
    rc = rados_write_op_operate(op, io, "kvfs.models", NULL, 0);
    rados_release_write_op(op);
    if (rc < 0)
        return rc;
    q_done(r, hash);
    mark_uploaded(r, hash);
    pthread_mutex_lock(&r->lock);
    r->pushed++;
    pthread_mutex_unlock(&r->lock);
    return 0;
}

/* ---- the fleet listing ---- */

/* One omap object's keys and values, in pages of 1000 (no pool scan). */
static long omap_each(rados_ioctx_t io, const char *oid, int (*cb)(void *ctx, const char *key, size_t klen,
                                                                  const char *val, size_t vlen), void *ctx)
{
    char after[256] = "";
    long count = 0;
    unsigned char more = 1;
    while (more) {
        rados_read_op_t op = rados_create_read_op();
        rados_omap_iter_t it;
        int prval = 0;
        rados_read_op_omap_get_vals2(op, after, "", 1000, &it, &more, &prval);
        int rc = rados_read_op_operate(op, io, oid, 0);
        if (rc < 0 || prval < 0) {
            rados_omap_get_end(it); /* the iterator exists even when the read failed */
            rados_release_read_op(op);
            return rc == -ENOENT || prval == -ENOENT ? 0 : rc < 0 ? rc : prval;
        }
        char *key, *val;
        size_t klen, vlen;
        int stop = 0;
        while (!stop && rados_omap_get_next2(it, &key, &val, &klen, &vlen) == 0 && key) {
            if (klen >= sizeof(after))
                continue;
            memcpy(after, key, klen);
            after[klen] = 0;
            count++;
            stop = cb(ctx, key, klen, val, vlen);
        }
        rados_omap_get_end(it);
        rados_release_read_op(op);
        if (stop)
            break;
    }
    return count;
}

/* "tokens size layers arch" (older entries: "tokens") */
static int parse_entry(const char *hash, const char *model, const char *val, size_t vlen, struct kvfs_chunk_info *c)
{
    char v[128];
    size_t n = vlen < sizeof(v) - 1 ? vlen : sizeof(v) - 1;
    memcpy(v, val, n);
    v[n] = 0;
    memset(c, 0, sizeof(*c));
    snprintf(c->hash, sizeof(c->hash), "%s", hash);
    snprintf(c->model, sizeof(c->model), "%s", model);
    unsigned long long size = 0;
    char arch[16] = "";
    if (sscanf(v, "%u %llu %u %15s", &c->n_tokens, &size, &c->n_layer, arch) < 1)
        return -EINVAL;
    c->logical_size = size;
    snprintf(c->arch, sizeof(c->arch), "%s", arch);
    return 0;
}

struct list_model_ctx {
    const char *model;
    int (*cb)(void *ctx, const struct kvfs_chunk_info *c);
    void *ctx;
};

static int list_model_entry(void *ctx, const char *key, size_t klen, const char *val, size_t vlen)
{
    struct list_model_ctx *l = ctx;
    char hash[KVFS_HASH_HEX_LEN + 1];
    struct kvfs_chunk_info c;
    if (klen != KVFS_HASH_HEX_LEN)
        return 0;
    memcpy(hash, key, klen);
    hash[klen] = 0;
    if (parse_entry(hash, l->model, val, vlen, &c))
        return 0;
    c.remote = 1;
    return l->cb ? l->cb(l->ctx, &c) : 0;
}

/* One model's index object, entry by entry. */
static long list_model(rados_ioctx_t io, const char *model_id, int (*cb)(void *ctx, const struct kvfs_chunk_info *c),
                       void *ctx)
{
    char oid[64];
    snprintf(oid, sizeof(oid), "kvfs.model.%s", model_id);
    struct list_model_ctx l = {model_id, cb, ctx};
    return omap_each(io, oid, list_model_entry, &l);
}

struct refresh_ctx {
    sqlite3_stmt *ins;
    char (*models)[32];
    int n_models;
    int64_t now_ns; /* the listing's time stamp for what it lists */
};

static int refresh_model_key(void *ctx, const char *key, size_t klen, const char *val, size_t vlen)
{
    (void)val, (void)vlen;
    struct refresh_ctx *rc = ctx;
    if (klen == 0 || klen >= 32 || rc->n_models >= 256)
        return 0;
    memcpy(rc->models[rc->n_models], key, klen);
    rc->models[rc->n_models++][klen] = 0;
    return 0;
}

static int insert_known(void *ctx, const struct kvfs_chunk_info *c)
{
    struct refresh_ctx *rc = ctx;
    sqlite3_bind_text(rc->ins, 1, c->hash, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(rc->ins, 2, c->model, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(rc->ins, 3, c->n_tokens);
    sqlite3_bind_int64(rc->ins, 4, (sqlite3_int64)c->logical_size);
    sqlite3_bind_int64(rc->ins, 5, c->n_layer);
    sqlite3_bind_text(rc->ins, 6, c->arch, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(rc->ins, 7, rc->now_ns);
    sqlite3_step(rc->ins);
    sqlite3_reset(rc->ins);
    return 0;
}

/* Replace the listing with the fleet's per-model indexes (every model in
 * the registry object kvfs.models).  Returns 0 or -errno (outage). */
static int refresh_listing(struct kvfs_remote *r, rados_ioctx_t io)
{
    char models[256][32];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct refresh_ctx rc = {NULL, models, 0, (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec};
    long n = omap_each(io, "kvfs.models", refresh_model_key, &rc);
    if (n < 0)
        return (int)n;
    if (sqlite3_prepare_v2(r->lw, "INSERT OR REPLACE INTO known(hash, model, tokens, size, layers, arch, seen_ns) "
                                 "VALUES (?, ?, ?, ?, ?, ?, ?)", -1, &rc.ins, NULL) != SQLITE_OK)
        return -EIO;
    sqlite3_exec(r->lw, "BEGIN; DELETE FROM known;", NULL, NULL, NULL);
    int err = 0;
    for (int i = 0; i < rc.n_models && !err; i++) {
        long k = list_model(io, models[i], insert_known, &rc);
        if (k < 0)
            err = (int)k;
    }
    sqlite3_finalize(rc.ins);
    if (err) { /* keep the previous listing */
        sqlite3_exec(r->lw, "ROLLBACK", NULL, NULL, NULL);
        return err;
    }
    sqlite3_exec(r->lw, "COMMIT", NULL, NULL, NULL);
    uint64_t known = 0;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(r->lw, "SELECT COUNT(*) FROM known", -1, &st, NULL) == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW)
            known = (uint64_t)sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    pthread_mutex_lock(&r->lock);
    r->known = known;
    r->listed_at = now_s();
    pthread_mutex_unlock(&r->lock);
    return 0;
}

static int row_to_info(sqlite3_stmt *st, struct kvfs_chunk_info *c)
{
    memset(c, 0, sizeof(*c));
    const unsigned char *h = sqlite3_column_text(st, 0), *m = sqlite3_column_text(st, 1),
                        *a = sqlite3_column_text(st, 5);
    if (!h || strlen((const char *)h) != KVFS_HASH_HEX_LEN)
        return -EINVAL;
    snprintf(c->hash, sizeof(c->hash), "%s", (const char *)h);
    snprintf(c->model, sizeof(c->model), "%s", m ? (const char *)m : "");
    snprintf(c->arch, sizeof(c->arch), "%s", a ? (const char *)a : "");
    c->n_tokens = (uint32_t)sqlite3_column_int64(st, 2);
    c->logical_size = (uint64_t)sqlite3_column_int64(st, 3);
    c->n_layer = (uint32_t)sqlite3_column_int64(st, 4);
    c->created_ns = c->accessed_ns = sqlite3_column_int64(st, 6); /* when the listing last saw it */
    c->remote = c->remote_only = 1;
    return 0;
}

static int list_hook(void *ctx, kvfs_store_list_cb cb, void *cbctx)
{
    struct kvfs_remote *r = ctx;
    sqlite3_stmt *st;
    int rc = 0;
    if (sqlite3_prepare_v2(r->lr, "SELECT hash, model, tokens, size, layers, arch, seen_ns FROM known ORDER BY hash", -1, &st,
                           NULL) != SQLITE_OK)
        return -EIO;
    while (!rc && sqlite3_step(st) == SQLITE_ROW) {
        struct kvfs_chunk_info c;
        if (row_to_info(st, &c) == 0)
            rc = cb(&c, cbctx);
    }
    sqlite3_finalize(st);
    return rc;
}

static int stat_hook(void *ctx, const char *hash, struct kvfs_chunk_info *out)
{
    struct kvfs_remote *r = ctx;
    sqlite3_stmt *st;
    int rc = -ENOENT;
    if (sqlite3_prepare_v2(r->lr, "SELECT hash, model, tokens, size, layers, arch, seen_ns FROM known WHERE hash = ?", -1, &st,
                           NULL) != SQLITE_OK)
        return -EIO;
    sqlite3_bind_text(st, 1, hash, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st) == SQLITE_ROW)
        rc = row_to_info(st, out);
    sqlite3_finalize(st);
    return rc;
}

static void *worker_main(void *arg)
{
    struct kvfs_remote *r = arg;
    double backoff = 0.5;
    for (;;) {
        pthread_mutex_lock(&r->lock);
        int stop = r->stop, state = r->state;
        int have_io = r->io != NULL;
        pthread_mutex_unlock(&r->lock);
        if (stop)
            break;
        int ok = 1;
        if (!have_io) {
            char err[256];
            int rc = connect_cluster(r, err, sizeof(err));
            if (rc) {
                mark_down(r, rc, "connect", NULL);
                ok = 0;
            } else {
                kvfs_log(KVFS_LOG_INFO, "remote tier: connected to pool %s", r->pool);
            }
        } else if (state == ST_DOWN) {
            /* probe: any answer (ENOENT included) means reachable */
            uint64_t sz;
            time_t mt;
            int st2, rc = rados_stat(io_of(r, &st2), "kvfs.probe", &sz, &mt);
            if (rc < 0 && rc != -ENOENT)
                ok = 0;
            else
                mark_up(r);
        }
        if (ok) {
            char batch[16][KVFS_HASH_HEX_LEN + 1];
            int n = q_peek(r, batch, 16);
            for (int i = 0; i < n && ok; i++) {
                int st2;
                rados_ioctx_t io = io_of(r, &st2);
                int rc = push_one(r, io, batch[i]);
                if (rc < 0) {
                    if (is_outage(rc)) {
                        mark_down(r, rc, "upload", batch[i]);
                        ok = 0;
                    } else {
                        pthread_mutex_lock(&r->lock);
                        r->errors++;
                        snprintf(r->last_error, sizeof(r->last_error), "upload %.64s: %.120s", batch[i], strerror(-rc));
                        pthread_mutex_unlock(&r->lock);
                        kvfs_log(KVFS_LOG_ERR, "remote tier: upload of %s failed: %s (will retry)", batch[i],
                                 strerror(-rc));
                        ok = 0;
                    }
                }
            }
            if (ok && n == 16)
                continue; /* more queued: keep going */
            pthread_mutex_lock(&r->lock);
            int due = r->list_refresh_s > 0 && (r->listed_at == 0 || now_s() - r->listed_at >= r->list_refresh_s);
            pthread_mutex_unlock(&r->lock);
            int st2;
            rados_ioctx_t io = due && ok ? io_of(r, &st2) : NULL;
            if (io) {
                int rc = refresh_listing(r, io);
                if (rc < 0 && is_outage(rc)) {
                    mark_down(r, rc, "listing", NULL);
                    ok = 0;
                } else if (rc < 0) {
                    kvfs_log(KVFS_LOG_WARN, "remote tier: listing refresh failed: %s", strerror(-rc));
                }
            }
        }
        backoff = ok ? 0.5 : (backoff * 2 > RETRY_MAX_S ? RETRY_MAX_S : backoff * 2);
        /* sleep until new work arrives (or the retry is due) */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double wake = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + (ok ? 1.0 : backoff);
        ts.tv_sec = (time_t)wake;
        ts.tv_nsec = (long)((wake - (double)ts.tv_sec) * 1e9);
        pthread_mutex_lock(&r->lock);
        if (!r->stop)
            pthread_cond_timedwait(&r->cond, &r->lock, &ts);
        pthread_mutex_unlock(&r->lock);
    }
    return NULL;
}

/* ---- fetch (a local miss) ---- */

static int neg_hit(struct kvfs_remote *r, const char *hash)
{
    double t = now_s();
    for (int i = 0; i < NEG_SLOTS; i++)
        if (t - r->neg[i].t < NEG_TTL_S && !strcmp(r->neg[i].hash, hash))
            return 1;
    return 0;
}

static int fetch(void *ctx, struct kvfs_store *s, const char *hash)
{
    struct kvfs_remote *r = ctx;
    int state;
    pthread_mutex_lock(&r->lock);
    int neg = neg_hit(r, hash);
    pthread_mutex_unlock(&r->lock);
    rados_ioctx_t io = io_of(r, &state);
    if (neg || !io || state != ST_CONNECTED)
        return -ENOENT; /* fail fast: down, or asked a moment ago */
    uint64_t size;
    time_t mtime;
    int rc = rados_stat(io, hash, &size, &mtime);
    if (rc == -ENOENT) {
        pthread_mutex_lock(&r->lock);
        snprintf(r->neg[r->neg_next].hash, sizeof(r->neg[0].hash), "%s", hash);
        r->neg[r->neg_next].t = now_s();
        r->neg_next = (r->neg_next + 1) % NEG_SLOTS;
        pthread_mutex_unlock(&r->lock);
        return -ENOENT;
    }
    if (rc < 0) {
        mark_down(r, rc, "lookup", hash);
        return rc;
    }
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return -ENOMEM;
    for (uint64_t got = 0; got < size;) {
        size_t want = size - got > (64u << 20) ? (64u << 20) : (size_t)(size - got);
        int n = rados_read(io, hash, (char *)buf + got, want, got);
        if (n <= 0) {
            rc = n < 0 ? n : -EIO;
            break;
        }
        got += (uint64_t)n;
    }
    if (rc < 0) {
        free(buf);
        if (is_outage(rc))
            mark_down(r, rc, "read", hash);
        return rc;
    }
    char err[256] = "";
    fetching = 1;
    rc = kvfs_store_put_object(s, buf, size, hash, err, sizeof(err));
    fetching = 0;
    free(buf);
    pthread_mutex_lock(&r->lock);
    if (rc)
        r->rejected++;
    else
        r->fetched++;
    pthread_mutex_unlock(&r->lock);
    if (!rc)
        mark_uploaded(r, hash);
    if (rc)
        kvfs_log(KVFS_LOG_ERR, "remote tier: object %s in pool %s rejected: %s", hash, r->pool,
                 err[0] ? err : strerror(-rc));
    else
        kvfs_log(KVFS_LOG_DEBUG, "remote tier: fetched %s (%" PRIu64 " bytes)", hash, size);
    return rc;
}

/* ---- public ---- */

/* The store's hooks for streaming a chunk only RADOS has (store.h, loader.h). */
static int size_hook(void *ctx, const char *hash, uint64_t *size) { return kvfs_remote_size(ctx, hash, size); }
static long read_range_hook(void *ctx, const char *hash, uint64_t off, void *buf, size_t len)
{
    return kvfs_remote_read_range(ctx, hash, off, buf, len);
}
static int aio_read_hook(void *ctx, const char *hash, uint64_t off, void *buf, size_t len,
                         void (*done)(void *arg, long rc), void *arg)
{
    return kvfs_remote_aio_read(ctx, hash, off, buf, len, done, arg);
}
static void note_fetched_hook(void *ctx, const char *hash) { kvfs_remote_note_fetched(ctx, hash); }

int kvfs_remote_open(struct kvfs_store *s, const struct kvfs_remote_opts *o, struct kvfs_remote **out, char *err,
                     size_t errlen)
{
    if (!o->pool || !*o->pool)
        return kvfs_errf(err, errlen, -EINVAL, "rados= needs a pool name");
    struct kvfs_remote *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->s = s;
    r->pool = strdup(o->pool);
    r->conf = o->ceph_conf ? strdup(o->ceph_conf) : NULL;
    r->id = strdup(o->rados_id ? o->rados_id : "admin");
    r->timeout_s = o->timeout_s > 0 ? o->timeout_s : 5;
    r->list_refresh_s = o->list_refresh_s < 0 ? 0 : o->list_refresh_s > 0 ? o->list_refresh_s : 30;
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->cond, NULL);
    int rc = 0;
    char path[4096];
    snprintf(path, sizeof(path), "%s/remote-queue.db", kvfs_store_dir(s));
    if (!r->pool || !r->id || sqlite3_open_v2(path, &r->q, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                                                             SQLITE_OPEN_FULLMUTEX, NULL) != SQLITE_OK ||
        sqlite3_exec(r->q,
                     "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                     "CREATE TABLE IF NOT EXISTS queue(hash TEXT PRIMARY KEY, enqueued_at INTEGER);"
                     "CREATE TABLE IF NOT EXISTS uploaded(hash TEXT PRIMARY KEY);",
                     NULL, NULL, NULL) != SQLITE_OK) {
        rc = kvfs_errf(err, errlen, -EIO, "cannot open the upload queue %s", path);
        goto fail;
    }
    snprintf(path, sizeof(path), "%s/remote-list.db", kvfs_store_dir(s));
    if (sqlite3_open_v2(path, &r->lw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL) !=
            SQLITE_OK ||
        sqlite3_exec(r->lw,
                     "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
                     "CREATE TABLE IF NOT EXISTS known(hash TEXT PRIMARY KEY, model TEXT, tokens INTEGER,"
                     " size INTEGER, layers INTEGER, arch TEXT, seen_ns INTEGER);",
                     NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_open_v2(path, &r->lr, SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX, NULL) != SQLITE_OK) {
        rc = kvfs_errf(err, errlen, -EIO, "cannot open the remote listing %s", path);
        goto fail;
    }
    sqlite3_busy_timeout(r->lw, 2000);
    sqlite3_busy_timeout(r->lr, 2000);
    if (r->list_refresh_s <= 0) /* listing off: show only this host's chunks, not an old listing */
        sqlite3_exec(r->lw, "DELETE FROM known", NULL, NULL, NULL);
    /* chunks queued before a restart stay held until pushed */
    char batch[1][KVFS_HASH_HEX_LEN + 1];
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(r->q, "SELECT hash FROM queue", -1, &st, NULL) == SQLITE_OK) {
        while (sqlite3_step(st) == SQLITE_ROW) {
            const unsigned char *h = sqlite3_column_text(st, 0);
            if (!h)
                continue;
            snprintf(batch[0], sizeof(batch[0]), "%s", (const char *)h);
            kvfs_store_hold(s, batch[0], 1);
            r->queued++;
        }
        sqlite3_finalize(st);
    }
    char why[256] = "";
    if (connect_cluster(r, why, sizeof(why)) != 0) {
        r->state = ST_DOWN;
        snprintf(r->last_error, sizeof(r->last_error), "%s", why);
        kvfs_log(KVFS_LOG_WARN, "remote tier: %s; starting with the tier down (writes queue, retried)", why);
    }
    if (pthread_create(&r->worker, NULL, worker_main, r)) {
        rc = kvfs_errf(err, errlen, -EAGAIN, "cannot start the upload worker");
        goto fail;
    }
    r->worker_started = 1;
    enqueue_unshared(r);
    struct kvfs_store_remote hooks = {.fetch = fetch, .stored = on_stored, .has = has_hook, .list = list_hook,
                                      .stat = stat_hook, .size = size_hook, .read_range = read_range_hook,
                                      .aio_read = aio_read_hook, .note_fetched = note_fetched_hook, .ctx = r};
    kvfs_store_set_remote(s, &hooks);
    *out = r;
    return 0;
fail:
    kvfs_remote_close(r);
    return rc;
}

void kvfs_remote_close(struct kvfs_remote *r)
{
    if (!r)
        return;
    kvfs_store_set_remote(r->s, NULL);
    pthread_mutex_lock(&r->lock);
    r->stop = 1;
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
    if (r->worker_started)
        pthread_join(r->worker, NULL);
    if (r->io)
        rados_ioctx_destroy(r->io);
    if (r->cluster)
        rados_shutdown(r->cluster);
    if (r->q)
        sqlite3_close(r->q);
    if (r->lw)
        sqlite3_close(r->lw);
    if (r->lr)
        sqlite3_close(r->lr);
    pthread_mutex_destroy(&r->lock);
    pthread_cond_destroy(&r->cond);
    free(r->pool);
    free(r->conf);
    free(r->id);
    free(r);
}

void kvfs_remote_stats(void *ctx, FILE *f)
{
    struct kvfs_remote *r = ctx;
    pthread_mutex_lock(&r->lock);
    fprintf(f,
            ",\n  \"remote\": {\"state\": \"%s\", \"pool\": \"%s\", \"timeout_s\": %d, \"queued\": %" PRIu64
            ", \"pushed\": %" PRIu64 ", \"fetched\": %" PRIu64 ", \"rejected\": %" PRIu64 ", \"errors\": %" PRIu64
            ", \"listed\": %" PRIu64 ", \"listed_s_ago\": %.1f, \"last_error\": \"",
            state_name(r->state), r->pool, r->timeout_s, r->queued, r->pushed, r->fetched, r->rejected, r->errors,
            r->known, r->listed_at > 0 ? now_s() - r->listed_at : -1.0);
    for (const char *p = r->last_error; *p; p++)
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if ((unsigned char)*p >= 0x20)
            fputc(*p, f);
    fprintf(f, "\"}");
    pthread_mutex_unlock(&r->lock);
}

const char *kvfs_remote_state(struct kvfs_remote *r)
{
    pthread_mutex_lock(&r->lock);
    const char *s = state_name(r->state);
    pthread_mutex_unlock(&r->lock);
    return s;
}

uint64_t kvfs_remote_queued(struct kvfs_remote *r)
{
    pthread_mutex_lock(&r->lock);
    uint64_t n = r->queued;
    pthread_mutex_unlock(&r->lock);
    return n;
}

int kvfs_remote_has(struct kvfs_remote *r, const char *hash)
{
    int state;
    rados_ioctx_t io = io_of(r, &state);
    uint64_t sz;
    time_t mt;
    return io && state == ST_CONNECTED && rados_stat(io, hash, &sz, &mt) == 0;
}

long kvfs_remote_read_range(struct kvfs_remote *r, const char *hash, uint64_t off, void *buf, size_t len)
{
    int state;
    rados_ioctx_t io = io_of(r, &state);
    if (!io || state != ST_CONNECTED)
        return -EHOSTDOWN;
    int n = rados_read(io, hash, buf, len, off);
    if (n < 0 && is_outage(n))
        mark_down(r, n, "read", hash);
    return n;
}

int kvfs_remote_size(struct kvfs_remote *r, const char *hash, uint64_t *size)
{
    int state;
    rados_ioctx_t io = io_of(r, &state);
    if (!io || state != ST_CONNECTED)
        return -EHOSTDOWN;
    pthread_mutex_lock(&r->lock);
    int neg = neg_hit(r, hash);
    pthread_mutex_unlock(&r->lock);
    if (neg)
        return -ENOENT;
    time_t mt;
    int rc = rados_stat(io, hash, size, &mt);
    if (rc < 0 && is_outage(rc))
        mark_down(r, rc, "lookup", hash);
    return rc < 0 ? rc : 0;
}

struct aio_call {
    void (*done)(void *arg, long rc);
    void *arg;
};

static void aio_done(rados_completion_t c, void *p)
{
    struct aio_call *a = p;
    long rc = rados_aio_get_return_value(c);
    a->done(a->arg, rc);
    free(a);
    /* released here: librados allows it once the callback runs */
    rados_aio_release(c);
}

int kvfs_remote_aio_read(struct kvfs_remote *r, const char *hash, uint64_t off, void *buf, size_t len,
                         void (*done)(void *arg, long rc), void *arg)
{
    int state;
    rados_ioctx_t io = io_of(r, &state);
    if (!io || state != ST_CONNECTED)
        return -EHOSTDOWN;
    struct aio_call *a = malloc(sizeof(*a));
    rados_completion_t c;
    if (!a)
        return -ENOMEM;
    *a = (struct aio_call){done, arg};
    int rc = rados_aio_create_completion2(a, aio_done, &c);
    if (rc < 0) {
        free(a);
        return rc;
    }
    if ((rc = rados_aio_read(io, hash, c, buf, len, off)) < 0) {
        rados_aio_release(c);
        free(a);
    }
    return rc < 0 ? rc : 0;
}

void kvfs_remote_note_fetched(struct kvfs_remote *r, const char *hash)
{
    pthread_mutex_lock(&r->lock);
    r->fetched++;
    pthread_mutex_unlock(&r->lock);
    mark_uploaded(r, hash);
}

long kvfs_remote_list_model(struct kvfs_remote *r, const char *model_id,
                            int (*cb)(void *ctx, const struct kvfs_chunk_info *c), void *ctx)
{
    int state;
    rados_ioctx_t io = io_of(r, &state);
    if (!io || state != ST_CONNECTED)
        return -EHOSTDOWN;
    return list_model(io, model_id, cb, ctx);
}

#else /* built without librados */

int kvfs_remote_open(struct kvfs_store *s, const struct kvfs_remote_opts *o, struct kvfs_remote **out, char *err,
                     size_t errlen)
{
    (void)s, (void)o, (void)out;
    return kvfs_errf(err, errlen, -ENOTSUP, "kvfs was built without librados (install librados-dev, rebuild)");
}
void kvfs_remote_close(struct kvfs_remote *r) { (void)r; }
void kvfs_remote_stats(void *ctx, FILE *f) { (void)ctx, (void)f; }
const char *kvfs_remote_state(struct kvfs_remote *r) { (void)r; return "absent"; }
uint64_t kvfs_remote_queued(struct kvfs_remote *r) { (void)r; return 0; }
int kvfs_remote_has(struct kvfs_remote *r, const char *hash) { (void)r, (void)hash; return 0; }
long kvfs_remote_read_range(struct kvfs_remote *r, const char *hash, uint64_t off, void *buf, size_t len)
{
    (void)r, (void)hash, (void)off, (void)buf, (void)len;
    return -ENOTSUP;
}
long kvfs_remote_list_model(struct kvfs_remote *r, const char *model_id,
                            int (*cb)(void *ctx, const struct kvfs_chunk_info *c), void *ctx)
{
    (void)r, (void)model_id, (void)cb, (void)ctx;
    return -ENOTSUP;
}
int kvfs_remote_size(struct kvfs_remote *r, const char *hash, uint64_t *size)
{
    (void)r, (void)hash, (void)size;
    return -ENOTSUP;
}
int kvfs_remote_aio_read(struct kvfs_remote *r, const char *hash, uint64_t off, void *buf, size_t len,
                         void (*done)(void *arg, long rc), void *arg)
{
    (void)r, (void)hash, (void)off, (void)buf, (void)len, (void)done, (void)arg;
    return -ENOTSUP;
}
void kvfs_remote_note_fetched(struct kvfs_remote *r, const char *hash) { (void)r, (void)hash; }
#endif
