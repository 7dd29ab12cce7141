/* remote_evict.c - the pool within remote_capacity (remote_evict.h):
 * usage, uses and pins read from the namespace's omap indexes, eviction of
 * the least recently used unpinned chunks by one host at a time (the
 * evictor lock), use times written in batches, and the operator's list,
 * pin, unpin and evict (kvfsctl remote). */
#include "remote_evict.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef KVFS_HAVE_RADOS
#include "remote_format.h"
#include "remote_listing.h"
#include "remote_quota.h"
#include "remote_usage.h"

#define LOCK_OBJ "kvfs.evictor"
#define LOCK_NAME "kvfs.evict"
#define LOCK_LEASE_S 30 /* a crashed holder's lock lapses after this */
#define ATIMES_MAX 4096 /* uses noted between two flushes; more are dropped (advisory) */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void remote_cookie_init(struct kvfs_remote *r)
{
    char host[64] = "";
    struct timespec ts;
    gethostname(host, sizeof(host) - 1);
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(r->cookie, sizeof(r->cookie), "%.63s:%d:%lx", host, (int)getpid(), (unsigned long)ts.tv_nsec);
}

/* ---- the view ---- */

struct view_ctx {
    struct remote_view *v;
    sqlite3_stmt *ins;
    const char *model;
    struct kvfs_remote_entry cur; /* the model's last entry, written when the next begins */
    int have;
    int err; /* a view short of entries would undercount the usage */
    uint64_t model_usage; /* the model's entries' bytes: its counter's true value */
};

static int hex64(const char *k)
{
    for (int i = 0; i < KVFS_HASH_HEX_LEN; i++)
        if (!((k[i] >= '0' && k[i] <= '9') || (k[i] >= 'a' && k[i] <= 'f')))
            return 0;
    return 1;
}

static int view_insert(sqlite3_stmt *ins, const struct kvfs_remote_entry *e)
{
    sqlite3_bind_text(ins, 1, e->hash, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(ins, 2, e->model, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(ins, 3, (sqlite3_int64)e->size);
    sqlite3_bind_int64(ins, 4, e->atime_ms);
    sqlite3_bind_int(ins, 5, e->pinned);
    int rc = sqlite3_step(ins);
    sqlite3_reset(ins);
    return rc == SQLITE_DONE ? 0 : -EIO;
}

static int view_flush(struct view_ctx *c)
{
    if (!c->have)
        return 0;
    c->have = 0;
    return view_insert(c->ins, &c->cur);
}

/* keys sort "<hash>" < "<hash>.a" < "<hash>.p": a use or pin follows its entry */
static int view_key(void *ctx, const char *key, size_t klen, const char *val, size_t vlen)
{
    struct view_ctx *c = ctx;
    struct remote_view *v = c->v;
    if (klen == KVFS_HASH_HEX_LEN && hex64(key)) {
        if ((c->err = view_flush(c)))
            return 1;
        struct kvfs_remote_entry *e = &c->cur;
        memset(e, 0, sizeof(*e));
        memcpy(e->hash, key, klen);
        snprintf(e->model, sizeof(e->model), "%s", c->model);
        e->size = remote_entry_osize(val, vlen);
        v->usage += e->size;
        c->model_usage += e->size;
        c->have = 1;
        return 0;
    }
    if (klen != KVFS_HASH_HEX_LEN + 2 || key[KVFS_HASH_HEX_LEN] != '.' || !hex64(key))
        return 0;
    struct kvfs_remote_entry *e = c->have ? &c->cur : NULL;
    if (!e || memcmp(e->hash, key, KVFS_HASH_HEX_LEN)) { /* its entry is gone: cleaned by the next pass */
        if (v->n_orphans == v->cap_orphans) {
            if (v->cap_orphans >= 4096)
                return 0;
            size_t cap = v->cap_orphans ? 2 * v->cap_orphans : 16;
            void *p = realloc(v->orphans, cap * sizeof(*v->orphans));
            if (!p)
                return 0;
            v->orphans = p;
            v->cap_orphans = cap;
        }
        struct remote_orphan *o = &v->orphans[v->n_orphans++];
        snprintf(o->model, sizeof(o->model), "%s", c->model);
        memcpy(o->key, key, klen);
        o->key[klen] = 0;
        return 0;
    }
    if (key[klen - 1] == 'a') {
        char t[32];
        size_t n = vlen < sizeof(t) - 1 ? vlen : sizeof(t) - 1;
        memcpy(t, val, n);
        t[n] = 0;
        e->atime_ms = strtoll(t, NULL, 10);
    } else if (key[klen - 1] == 'p' && !e->pinned) {
        e->pinned = 1;
        v->pinned++;
    }
    return 0;
}

struct model_list {
    char (*m)[17];
    size_t n, cap;
    int err;
};

static int model_key(void *ctx, const char *key, size_t klen, const char *val, size_t vlen)
{
    (void)val, (void)vlen;
    struct model_list *l = ctx;
    if (klen == 0 || klen > 16)
        return 0;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        void *p = realloc(l->m, cap * sizeof(*l->m));
        if (!p) {
            l->err = -ENOMEM;
            return 1;
        }
        l->m = p;
        l->cap = cap;
    }
    memcpy(l->m[l->n], key, klen);
    l->m[l->n++][klen] = 0;
    return 0;
}

int remote_usage_read(rados_ioctx_t io, uint64_t *usage, int *known)
{
    struct model_list m = {0};
    long rc = remote_omap_each(io, KVFS_REMOTE_MODELS_OID, model_key, &m);
    if (rc >= 0 && m.err)
        rc = m.err;
    *usage = 0;
    *known = 1;
    for (size_t i = 0; rc >= 0 && i < m.n; i++) {
        struct remote_counter c;
        rc = remote_counter_read(io, m.m[i], &c);
        if (rc >= 0 && c.present)
            *usage += c.bytes;
        else if (rc >= 0)
            *known = 0;
    }
    free(m.m);
    return rc < 0 ? (int)rc : 0;
}

/* "": SQLite's private temporary file, removed when closed */
static int view_open(struct remote_view *v)
{
    if (sqlite3_open_v2("", &v->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) != SQLITE_OK ||
        sqlite3_exec(v->db,
                     "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA cache_size=-2048;"
                     "CREATE TABLE e(hash TEXT PRIMARY KEY, model TEXT, size INTEGER, atime INTEGER,"
                     " pinned INTEGER) WITHOUT ROWID;",
                     NULL, NULL, NULL) != SQLITE_OK)
        return -EIO;
    return 0;
}

int remote_view_read(rados_ioctx_t io, struct remote_view *v)
{
    struct model_list models = {0};
    struct view_ctx c;
    memset(&c, 0, sizeof(c));
    c.v = v;
    memset(v, 0, sizeof(*v));
    v->lock_at = remote_now_s();
    v->cur_atime = INT64_MIN;
    long rc = view_open(v);
    if (!rc && (sqlite3_exec(v->db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK ||
                sqlite3_prepare_v2(v->db, "INSERT OR REPLACE INTO e VALUES (?, ?, ?, ?, ?)", -1, &c.ins, NULL) !=
                    SQLITE_OK))
        rc = -EIO;
    if (!rc)
        rc = remote_omap_each(io, KVFS_REMOTE_MODELS_OID, model_key, &models);
    if (rc >= 0 && models.err)
        rc = models.err;
    for (size_t i = 0; rc >= 0 && i < models.n; i++) {
        char oid[KVFS_REMOTE_OID_MAX];
        kvfs_remote_index_oid(models.m[i], oid);
        struct remote_counter before;
        c.model = models.m[i];
        c.have = 0;
        c.model_usage = 0;
        rc = remote_counter_read(io, models.m[i], &before); /* before the entries: see reconcile */
        if (rc >= 0)
            rc = remote_omap_each(io, oid, view_key, &c);
        if (rc >= 0 && !c.err)
            c.err = view_flush(&c);
        if (rc >= 0 && c.err)
            rc = c.err;
        if (rc >= 0 && remote_usage_reconcile(io, models.m[i], &before, c.model_usage) == 1) {
            char was[24] = "absent";
            if (before.present)
                snprintf(was, sizeof(was), "%" PRIu64, before.bytes);
            v->reconciled++;
            kvfs_log(KVFS_LOG_INFO, "remote tier: index kvfs.model.%s: usage counter was %s, now %" PRIu64 " bytes",
                     models.m[i], was, c.model_usage);
        }
    }
    free(models.m);
    sqlite3_finalize(c.ins);
    /* the order eviction takes them in, built once they are all in */
    if (rc >= 0 && sqlite3_exec(v->db, "COMMIT; CREATE INDEX by_use ON e(atime, hash);", NULL, NULL, NULL) != SQLITE_OK)
        rc = -EIO;
    if (rc < 0) {
        remote_view_free(v);
        return (int)rc;
    }
    return 0;
}

void remote_view_free(struct remote_view *v)
{
    if (v->db)
        sqlite3_close(v->db);
    free(v->orphans);
    memset(v, 0, sizeof(*v));
}

static void row_entry(sqlite3_stmt *st, struct kvfs_remote_entry *e)
{
    memset(e, 0, sizeof(*e));
    const unsigned char *h = sqlite3_column_text(st, 0), *m = sqlite3_column_text(st, 1);
    snprintf(e->hash, sizeof(e->hash), "%s", h ? (const char *)h : "");
    snprintf(e->model, sizeof(e->model), "%s", m ? (const char *)m : "");
    e->size = (uint64_t)sqlite3_column_int64(st, 2);
    e->atime_ms = sqlite3_column_int64(st, 3);
    e->pinned = sqlite3_column_int(st, 4);
}

#define VIEW_COLUMNS "SELECT hash, model, size, atime, pinned FROM e"

/* the chunk's entry: 0, -ENOENT or -EIO */
static int view_get(const struct remote_view *v, const char *hash, struct kvfs_remote_entry *e)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(v->db, VIEW_COLUMNS " WHERE hash = ?", -1, &st, NULL) != SQLITE_OK)
        return -EIO;
    sqlite3_bind_text(st, 1, hash, -1, SQLITE_TRANSIENT);
    int step = sqlite3_step(st), rc = step == SQLITE_ROW ? 0 : step == SQLITE_DONE ? -ENOENT : -EIO;
    if (!rc)
        row_entry(st, e);
    sqlite3_finalize(st);
    return rc;
}

int remote_view_has(const struct remote_view *v, const char *hash)
{
    struct kvfs_remote_entry e;
    return view_get(v, hash, &e) == 0;
}

int remote_view_add(struct remote_view *v, const char *hash, const char *model, uint64_t size)
{
    sqlite3_stmt *ins;
    struct kvfs_remote_entry e;
    memset(&e, 0, sizeof(e));
    snprintf(e.hash, sizeof(e.hash), "%s", hash);
    snprintf(e.model, sizeof(e.model), "%s", model);
    e.size = size;
    e.atime_ms = now_ms(); /* the newest: after every other candidate */
    if (sqlite3_prepare_v2(v->db, "INSERT OR REPLACE INTO e VALUES (?, ?, ?, ?, ?)", -1, &ins, NULL) != SQLITE_OK)
        return -EIO;
    int rc = view_insert(ins, &e);
    sqlite3_finalize(ins);
    if (!rc)
        v->usage += size;
    return rc;
}

/* The least recently used entry past the cursor that is neither pinned
 * nor keep; the cursor moves past it.  0, -ENOSPC (none) or -EIO. */
static int view_next_candidate(struct remote_view *v, const char *keep, struct kvfs_remote_entry *e)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(v->db, VIEW_COLUMNS " WHERE (atime, hash) > (?, ?) ORDER BY atime, hash", -1, &st,
                           NULL) != SQLITE_OK)
        return -EIO;
    sqlite3_bind_int64(st, 1, v->cur_atime);
    sqlite3_bind_text(st, 2, v->cur_hash, -1, SQLITE_TRANSIENT);
    int step, rc = -ENOSPC;
    while (rc == -ENOSPC && (step = sqlite3_step(st)) == SQLITE_ROW) {
        row_entry(st, e);
        v->cur_atime = e->atime_ms;
        memcpy(v->cur_hash, e->hash, sizeof(v->cur_hash));
        if (!e->pinned && !(keep && !strcmp(e->hash, keep)))
            rc = 0;
    }
    if (rc && step != SQLITE_DONE)
        rc = -EIO;
    sqlite3_finalize(st);
    return rc;
}

static void view_remove(struct remote_view *v, const char *hash)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(v->db, "DELETE FROM e WHERE hash = ?", -1, &st, NULL) != SQLITE_OK)
        return;
    sqlite3_bind_text(st, 1, hash, -1, SQLITE_TRANSIENT);
    sqlite3_step(st);
    sqlite3_finalize(st);
}

/* ---- the lock ---- */

int remote_evict_lock(struct kvfs_remote *r, rados_ioctx_t io)
{
    struct timeval lease = {LOCK_LEASE_S, 0};
    double until = remote_now_s() + r->timeout_s;
    for (;;) {
        int rc = rados_lock_exclusive(io, LOCK_OBJ, LOCK_NAME, r->cookie, "kvfs eviction", &lease, 0);
        if (rc == 0 || rc == -EEXIST) /* EEXIST: ours already (an unlock that failed) */
            return 0;
        if (rc != -EBUSY)
            return rc;
        if (remote_now_s() >= until)
            return -EBUSY;
        struct timespec ts = {0, 100 * 1000000};
        nanosleep(&ts, NULL);
    }
}

int remote_evict_renew(struct kvfs_remote *r, rados_ioctx_t io, struct remote_view *v)
{
    struct timeval lease = {LOCK_LEASE_S, 0};
    if (remote_now_s() - v->lock_at < LOCK_LEASE_S / 3)
        return 0;
    int rc = rados_lock_exclusive(io, LOCK_OBJ, LOCK_NAME, r->cookie, "kvfs eviction", &lease, LIBRADOS_LOCK_FLAG_RENEW);
    if (rc == 0)
        v->lock_at = remote_now_s();
    return rc < 0 ? rc : 0;
}

void remote_evict_unlock(struct kvfs_remote *r, rados_ioctx_t io)
{
    rados_unlock(io, LOCK_OBJ, LOCK_NAME, r->cookie);
}

/* ---- eviction ---- */

/* The index entry goes first, in one op that fails if the chunk is pinned
 * and lowers the usage counter (remote_index_remove), then the object: a
 * reader that still lists it gets ENOENT (a miss), never part of an object. */
static int evict_entry(struct kvfs_remote *r, rados_ioctx_t io, struct kvfs_remote_entry *e, int size_from_index)
{
    uint64_t size = 0;
    int rc = remote_index_remove(io, e->model, e->hash, &size, r->chg_keep);
    if (rc >= 0 && size_from_index)
        e->size = size; /* named by the operator: no view said it */
    if (rc < 0)
        return rc; /* -ENOENT: not listed (gone since the view was read); -EBUSY: pinned */
    rc = rados_remove(io, e->hash);
    if (rc < 0 && rc != -ENOENT)
        return rc;
    pthread_mutex_lock(&r->lock);
    r->evicted++;
    r->evicted_bytes += e->size;
    pthread_mutex_unlock(&r->lock);
    if (r->lw)
        remote_listing_forget(r, e->hash);
    if (e->atime_ms)
        kvfs_log(KVFS_LOG_INFO, "remote tier: evicted %s (%" PRIu64 " bytes, last used %.0f s ago) from pool %s",
                 e->hash, e->size, (double)(now_ms() - e->atime_ms) / 1000.0, r->pool);
    else
        kvfs_log(KVFS_LOG_INFO, "remote tier: evicted %s (%" PRIu64 " bytes) from pool %s", e->hash, e->size,
                 r->pool);
    return 0;
}

int remote_make_room(struct kvfs_remote *r, rados_ioctx_t io, struct remote_view *v, uint64_t cap, const char *keep,
                     uint64_t need)
{
    if (need > cap)
        return -ENOSPC;
    while (v->usage + need > cap) {
        struct kvfs_remote_entry e;
        int rc = view_next_candidate(v, keep, &e);
        if (rc)
            return rc;
        if ((rc = remote_evict_renew(r, io, v)) < 0)
            return rc;
        rc = evict_entry(r, io, &e, 0);
        if (rc == -ENOENT)
            rc = 0; /* gone since the view was read (kvfsctl remote fsck finds a stray object) */
        if (rc == -EBUSY)
            continue; /* pinned since the view was read: the cursor is past it */
        if (rc < 0)
            return rc;
        v->usage -= e.size;
        view_remove(v, e.hash);
    }
    return 0;
}

void remote_view_clean_orphans(rados_ioctx_t io, struct remote_view *v)
{
    for (size_t i = 0; i < v->n_orphans; i++) {
        char idx[64];
        const char *keys[1] = {v->orphans[i].key};
        snprintf(idx, sizeof(idx), "kvfs.model.%s", v->orphans[i].model);
        rados_write_op_t op = rados_create_write_op();
        rados_write_op_omap_rm_keys(op, keys, 1);
        rados_write_op_operate(op, io, idx, NULL, 0);
        rados_release_write_op(op);
    }
    v->n_orphans = 0;
}

void remote_note_view(struct kvfs_remote *r, const struct remote_view *v, uint64_t evicted_before)
{
    pthread_mutex_lock(&r->lock);
    r->usage = v->usage;
    r->n_pinned = v->pinned;
    if (r->evicted != evicted_before)
        r->evict_passes++;
    pthread_mutex_unlock(&r->lock);
}

int remote_evict_pass(struct kvfs_remote *r, rados_ioctx_t io)
{
    struct remote_view v;
    int rc = remote_evict_lock(r, io);
    if (rc)
        return rc;
    remote_atime_flush(r, io); /* this host's uses count too */
    if (!(rc = remote_view_read(io, &v))) {
        pthread_mutex_lock(&r->lock);
        uint64_t before = r->evicted;
        uint64_t cap = r->capacity; /* 0: the quota went: nothing to evict */
        r->index_reads++;
        pthread_mutex_unlock(&r->lock);
        rc = cap ? remote_make_room(r, io, &v, cap, NULL, 0) : 0;
        remote_view_clean_orphans(io, &v);
        remote_note_view(r, &v, before);
        if (rc == -ENOSPC)
            kvfs_log(KVFS_LOG_WARN, "remote tier: pool %s holds %" PRIu64 " bytes, over remote_capacity %" PRIu64
                     ", and the rest is pinned", r->pool, v.usage, cap);
        remote_view_free(&v);
    }
    remote_evict_unlock(r, io);
    return rc;
}

/* ---- uses, in batches ---- */

void remote_atime_note(struct kvfs_remote *r, const char *hash, const char *model)
{
    if (!model || !*model)
        return;
    int64_t t = now_ms();
    pthread_mutex_lock(&r->lock);
    size_t i = 0;
    while (i < r->n_atimes && strcmp(r->atimes[i].hash, hash))
        i++;
    if (i == r->n_atimes) {
        if (!r->atimes)
            r->atimes = malloc(ATIMES_MAX * sizeof(*r->atimes));
        if (!r->atimes || r->n_atimes >= ATIMES_MAX) {
            pthread_mutex_unlock(&r->lock);
            return;
        }
        r->n_atimes++;
        snprintf(r->atimes[i].hash, sizeof(r->atimes[i].hash), "%s", hash);
        snprintf(r->atimes[i].model, sizeof(r->atimes[i].model), "%s", model);
    }
    r->atimes[i].ms = t;
    pthread_mutex_unlock(&r->lock);
}

static int by_model(const void *a, const void *b)
{
    return strcmp(((const struct remote_atime *)a)->model, ((const struct remote_atime *)b)->model);
}

int remote_atime_flush(struct kvfs_remote *r, rados_ioctx_t io)
{
    pthread_mutex_lock(&r->lock);
    size_t n = r->n_atimes;
    struct remote_atime *a = n ? malloc(n * sizeof(*a)) : NULL;
    if (a)
        memcpy(a, r->atimes, n * sizeof(*a));
    r->n_atimes = 0;
    r->atimes_at = remote_now_s();
    pthread_mutex_unlock(&r->lock);
    if (!a)
        return n ? -ENOMEM : 0;
    qsort(a, n, sizeof(*a), by_model);
    char (*keys)[KVFS_HASH_HEX_LEN + 3] = malloc(n * sizeof(*keys));
    char (*vals)[24] = malloc(n * sizeof(*vals));
    const char **kp = malloc(n * sizeof(*kp)), **vp = malloc(n * sizeof(*vp));
    size_t *lens = malloc(n * sizeof(*lens));
    int rc = 0;
    if (!keys || !vals || !kp || !vp || !lens) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        snprintf(keys[i], sizeof(keys[i]), "%s.a", a[i].hash);
        snprintf(vals[i], sizeof(vals[i]), "%" PRId64, a[i].ms);
        kp[i] = keys[i];
        vp[i] = vals[i];
        lens[i] = strlen(vals[i]);
    }
    /* one write per model index, whatever the number of uses */
    for (size_t i = 0, j; i < n && !rc; i = j) {
        for (j = i + 1; j < n && !strcmp(a[j].model, a[i].model); j++)
            ;
        char idx[64];
        snprintf(idx, sizeof(idx), "kvfs.model.%s", a[i].model);
        rados_write_op_t op = rados_create_write_op();
        rados_write_op_omap_set(op, kp + i, vp + i, lens + i, j - i);
        rc = rados_write_op_operate(op, io, idx, NULL, 0);
        rados_release_write_op(op);
    }
out:
    free(a);
    free(keys);
    free(vals);
    free(kp);
    free(vp);
    free(lens);
    return rc; /* uses are advisory: a failed flush loses them */
}

/* ---- the operator's (kvfsctl remote) ---- */

int kvfs_remote_connect(const struct kvfs_remote_opts *o, struct kvfs_remote **out, char *err, size_t errlen)
{
    if (!o->pool || !*o->pool)
        return kvfs_errf(err, errlen, -EINVAL, "no pool");
    struct kvfs_remote *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    pthread_mutex_init(&r->lock, NULL);
    pthread_mutex_init(&r->lease_mu, NULL);
    pthread_cond_init(&r->cond, NULL);
    r->pool = strdup(o->pool);
    r->conf = o->ceph_conf ? strdup(o->ceph_conf) : NULL;
    r->id = strdup(o->rados_id ? o->rados_id : "admin");
    r->keyring = o->keyring ? strdup(o->keyring) : NULL;
    r->ns = strdup(o->ns ? o->ns : "");
    r->timeout_s = o->timeout_s > 0 ? o->timeout_s : 5;
    r->capacity = o->capacity;
    r->lease_s = o->lease_s > 0 ? o->lease_s : 30;
    r->chg_keep = o->changes < 0 ? 0 : o->changes > 0 ? o->changes : KVFS_REMOTE_CHG_KEEP;
    remote_cookie_init(r);
    int rc;
    if (!r->pool || !r->id || !r->ns || (o->ceph_conf && !r->conf) || (o->keyring && !r->keyring))
        rc = kvfs_errf(err, errlen, -ENOMEM, "out of memory");
    else if (!remote_ns_valid(r->ns))
        rc = kvfs_errf(err, errlen, -EINVAL, "namespace %s: 1-64 of A-Z a-z 0-9 . _ -", r->ns);
    else
        rc = remote_connect(r, err, errlen);
    if (rc) {
        kvfs_remote_close(r);
        return rc;
    }
    *out = r;
    return 0;
}

long kvfs_remote_entries(struct kvfs_remote *r, int (*cb)(void *ctx, const struct kvfs_remote_entry *e), void *ctx,
                         uint64_t *usage)
{
    int state;
    rados_ioctx_t io = remote_io(r, &state);
    struct remote_view v;
    if (!io || state != ST_CONNECTED)
        return -EHOSTDOWN;
    int rc = remote_view_read(io, &v);
    if (rc)
        return rc;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(v.db, VIEW_COLUMNS " ORDER BY atime, hash", -1, &st, NULL) != SQLITE_OK) {
        remote_view_free(&v);
        return -EIO;
    }
    long n = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        struct kvfs_remote_entry e;
        row_entry(st, &e);
        n++;
        if (cb && cb(ctx, &e))
            break;
    }
    sqlite3_finalize(st);
    if (usage)
        *usage = v.usage;
    remote_view_free(&v);
    return n;
}

int kvfs_remote_pin(struct kvfs_remote *r, const char *hash, int pin)
{
    int state;
    rados_ioctx_t io = remote_io(r, &state);
    if (!io || state != ST_CONNECTED)
        return -EHOSTDOWN;
    if (strlen(hash) != KVFS_HASH_HEX_LEN || !hex64(hash))
        return -EINVAL;
    char model[17] = "";
    int rc = rados_getxattr(io, hash, "kvfs.model", model, sizeof(model) - 1);
    if (rc < 0)
        return rc == -ENODATA ? -ENOENT : rc;
    model[rc] = 0;
    return remote_index_pin(io, model, hash, pin, r->chg_keep);
}

/* An index entry whose object is gone (an upload or eviction that died
 * between its two steps): its model is not known, so each model's index is
 * asked to drop it.  1 when one did, 0 when none lists it, -errno. */
static int forget_dangling(struct kvfs_remote *r, rados_ioctx_t io, const char *hash)
{
    struct model_list models = {0};
    long rc = remote_omap_each(io, KVFS_REMOTE_MODELS_OID, model_key, &models);
    int found = 0;
    if (rc >= 0 && models.err)
        rc = models.err;
    for (size_t i = 0; rc >= 0 && i < models.n && !found; i++) {
        uint64_t size = 0;
        int x = remote_index_remove(io, models.m[i], hash, &size, r->chg_keep);
        if (x == 0)
            found = 1;
        else if (x != -ENOENT)
            rc = x; /* -EBUSY: pinned; or an outage */
    }
    free(models.m);
    if (found && r->lw)
        remote_listing_forget(r, hash);
    if (found)
        kvfs_log(KVFS_LOG_INFO, "remote tier: dropped %s from its index: its object was already gone", hash);
    return rc < 0 ? (int)rc : found;
}

/* One named chunk: its model from the object's xattr, then one guarded
 * removal from that model's index (which refuses a pinned chunk) and the
 * object; no view of the pool.  The caller holds the evictor lock, as
 * uploads under a capacity do: an upload of the same chunk between the
 * index removal and the object's would otherwise leave an entry without
 * its object. */
static int evict_named(struct kvfs_remote *r, rados_ioctx_t io, const char *hash, char *err, size_t errlen)
{
    struct kvfs_remote_entry e;
    memset(&e, 0, sizeof(e));
    if (strlen(hash) != KVFS_HASH_HEX_LEN || !hex64(hash))
        return kvfs_errf(err, errlen, -EINVAL, "%s: not a chunk name (64 hex digits)", hash);
    int rc = rados_getxattr(io, hash, "kvfs.model", e.model, sizeof(e.model) - 1);
    if (rc == -ENOENT || rc == -ENODATA) {
        if ((rc = forget_dangling(r, io, hash)) < 0)
            return kvfs_errf(err, errlen, rc, "%s: %s", hash,
                             rc == -EBUSY ? "pinned (unpin it first)" : strerror(-rc));
        return rc ? 0 : kvfs_errf(err, errlen, -ENOENT, "%s: not in the pool", hash);
    }
    if (rc < 0)
        return kvfs_errf(err, errlen, rc, "%s: %s", hash, strerror(-rc));
    e.model[rc] = 0;
    memcpy(e.hash, hash, KVFS_HASH_HEX_LEN + 1);
    rc = evict_entry(r, io, &e, 1);
    if (rc == -ENOENT)
        return kvfs_errf(err, errlen, -ENOENT, "%s: not in the pool (not in its model's index)", hash);
    if (rc == -EBUSY)
        return kvfs_errf(err, errlen, -EBUSY, "%s is pinned (unpin it first)", hash);
    if (rc)
        return kvfs_errf(err, errlen, rc, "%s: %s", hash, strerror(-rc));
    return 0;
}

int kvfs_remote_evict(struct kvfs_remote *r, const char *hash, uint64_t capacity, uint64_t *n, uint64_t *bytes,
                      char *err, size_t errlen)
{
    int state;
    rados_ioctx_t io = remote_io(r, &state);
    struct remote_view v;
    if (!io || state != ST_CONNECTED)
        return kvfs_errf(err, errlen, -EHOSTDOWN, "not connected");
    uint64_t n0 = r->evicted, b0 = r->evicted_bytes;
    int rc = remote_evict_lock(r, io);
    if (rc)
        return kvfs_errf(err, errlen, rc, "cannot take the evictor lock (%s): %s", LOCK_OBJ,
                         rc == -EBUSY ? "another host holds it; try again" : strerror(-rc));
    if (hash) {
        rc = evict_named(r, io, hash, err, errlen);
        goto unlock;
    }
    if ((rc = remote_view_read(io, &v))) {
        kvfs_errf(err, errlen, rc, "cannot read the indexes: %s", strerror(-rc));
        goto unlock;
    }
    rc = remote_make_room(r, io, &v, capacity, NULL, 0);
    if (rc == -ENOSPC)
        kvfs_errf(err, errlen, rc, "%" PRIu64 " bytes left, over %" PRIu64 ": the rest is pinned", v.usage,
                  capacity);
    else if (rc)
        kvfs_errf(err, errlen, rc, "%s", strerror(-rc));
    remote_view_clean_orphans(io, &v);
    remote_view_free(&v);
unlock:
    remote_evict_unlock(r, io);
    if (n)
        *n = r->evicted - n0;
    if (bytes)
        *bytes = r->evicted_bytes - b0;
    return rc;
}

#else /* built without librados */

int kvfs_remote_connect(const struct kvfs_remote_opts *o, struct kvfs_remote **out, char *err, size_t errlen)
{
    (void)o, (void)out;
    return kvfs_errf(err, errlen, -ENOTSUP, "kvfs was built without librados (install librados-dev, rebuild)");
}
long kvfs_remote_entries(struct kvfs_remote *r, int (*cb)(void *ctx, const struct kvfs_remote_entry *e), void *ctx,
                         uint64_t *usage)
{
    (void)r, (void)cb, (void)ctx, (void)usage;
    return -ENOTSUP;
}
int kvfs_remote_pin(struct kvfs_remote *r, const char *hash, int pin)
{
    (void)r, (void)hash, (void)pin;
    return -ENOTSUP;
}
int kvfs_remote_evict(struct kvfs_remote *r, const char *hash, uint64_t capacity, uint64_t *n, uint64_t *bytes,
                      char *err, size_t errlen)
{
    (void)r, (void)hash, (void)capacity, (void)n, (void)bytes;
    return kvfs_errf(err, errlen, -ENOTSUP, "kvfs was built without librados");
}
#endif
