/* remote_listing.c - what the fleet has (remote_listing.h): the pool's
 * per-model omap indexes read in pages, copied by the worker into this
 * host's listing (SQLite, remote-list.db), which the store's list and stat
 * hooks read. */
#include "remote_listing.h"

#ifdef KVFS_HAVE_RADOS
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "remote_format.h"
#include "remote_usage.h"

#define LIST_FULL_S 600.0 /* a whole refresh this often; between, models whose generation moved */

int remote_listing_open(struct kvfs_remote *r, char *err, size_t errlen)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/remote-list.db", kvfs_store_dir(r->s));
    if (sqlite3_open_v2(path, &r->lw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL) !=
            SQLITE_OK ||
        sqlite3_exec(r->lw,
                     "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
                     "CREATE TABLE IF NOT EXISTS known(hash TEXT PRIMARY KEY, model TEXT, tokens INTEGER,"
                     " size INTEGER, layers INTEGER, arch TEXT, seen_ns INTEGER, osize INTEGER,"
                     " pinned INTEGER DEFAULT 0);"
                     /* each model index's generation as last read (remote_usage.h), its bytes and pins */
                     "CREATE TABLE IF NOT EXISTS model_gen(model TEXT PRIMARY KEY, gen TEXT, usage INTEGER,"
                     " pinned INTEGER);",
                     NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_open_v2(path, &r->lr, SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX, NULL) != SQLITE_OK)
        return kvfs_errf(err, errlen, -EIO, "cannot open the remote listing %s", path);
    sqlite3_busy_timeout(r->lw, 2000);
    sqlite3_busy_timeout(r->lr, 2000);
    /* a listing of a kvfs before the change log: the columns its changes
     * need (errors when they are there already); the mount's first refresh
     * reads every index whole and fills them */
    sqlite3_exec(r->lw, "ALTER TABLE known ADD COLUMN osize INTEGER", NULL, NULL, NULL);
    sqlite3_exec(r->lw, "ALTER TABLE known ADD COLUMN pinned INTEGER DEFAULT 0", NULL, NULL, NULL);
    if (r->list_refresh_s <= 0) /* listing off: show only this host's chunks, not an old listing */
        sqlite3_exec(r->lw, "DELETE FROM known; DELETE FROM model_gen;", NULL, NULL, NULL);
    return 0;
}

long remote_omap_each(rados_ioctx_t io, const char *oid,
                      int (*cb)(void *ctx, const char *key, size_t klen, const char *val, size_t vlen), void *ctx)
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

/* "tokens size layers arch osize" (older entries: fewer) */
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
    snprintf(c->arch, sizeof(c->arch), "%s", strcmp(arch, "-") ? arch : ""); /* "-": none, before the size */
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

long remote_list_model(rados_ioctx_t io, const char *model_id, int (*cb)(void *ctx, const struct kvfs_chunk_info *c),
                       void *ctx)
{
    char oid[64];
    snprintf(oid, sizeof(oid), "kvfs.model.%s", model_id);
    struct list_model_ctx l = {model_id, cb, ctx};
    return remote_omap_each(io, oid, list_model_entry, &l);
}

struct refresh_ctx {
    sqlite3_stmt *ins, *pin; /* pin: a listed chunk's pin set */
    char (*models)[32];
    int n_models;
    int64_t now_ns; /* the listing's time stamp for what it lists */
    const char *model;
    uint64_t usage, pinned; /* the objects' bytes, pins ("<hash>.p") */
    uint64_t osize;         /* the entry being inserted: its object's bytes */
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
    sqlite3_bind_int64(rc->ins, 8, (sqlite3_int64)rc->osize);
    sqlite3_step(rc->ins);
    sqlite3_reset(rc->ins);
    return 0;
}

/* an index's keys: "<hash>" entries, "<hash>.a" uses, "<hash>.p" pins */
static int refresh_entry(void *ctx, const char *key, size_t klen, const char *val, size_t vlen)
{
    struct refresh_ctx *rc = ctx;
    if (klen == KVFS_HASH_HEX_LEN + 2 && !memcmp(key + KVFS_HASH_HEX_LEN, ".p", 2)) {
        rc->pinned++;
        sqlite3_bind_text(rc->pin, 1, key, KVFS_HASH_HEX_LEN, SQLITE_TRANSIENT); /* its entry came just before */
        sqlite3_step(rc->pin);
        sqlite3_reset(rc->pin);
    }
    if (klen >= 5 && !memcmp(key, "kvfs.", 5))
        return 1; /* past every hex key: the change log, counter, generation */
    if (klen != KVFS_HASH_HEX_LEN)
        return 0;
    char hash[KVFS_HASH_HEX_LEN + 1];
    struct kvfs_chunk_info c;
    memcpy(hash, key, klen);
    hash[klen] = 0;
    if (parse_entry(hash, rc->model, val, vlen, &c))
        return 0;
    rc->osize = remote_entry_osize(val, vlen);
    rc->usage += rc->osize;
    return insert_known(rc, &c);
}

static int exec_model(struct kvfs_remote *r, const char *sql, const char *model, const char *gen, uint64_t usage,
                      uint64_t pinned);

/* The model's generation as the listing last read it (into was, "" for
 * none yet), its bytes and pins: 1 when it was read, 0 when never. */
static int listed_gen(struct kvfs_remote *r, const char *model, char was[24], uint64_t *usage, uint64_t *pinned)
{
    sqlite3_stmt *st;
    int read = 0;
    was[0] = 0;
    if (sqlite3_prepare_v2(r->lw, "SELECT gen, usage, pinned FROM model_gen WHERE model = ?", -1, &st, NULL) !=
        SQLITE_OK)
        return 0;
    sqlite3_bind_text(st, 1, model, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st) == SQLITE_ROW) {
        const unsigned char *g = sqlite3_column_text(st, 0);
        snprintf(was, 24, "%s", g ? (const char *)g : "");
        *usage = (uint64_t)sqlite3_column_int64(st, 1);
        *pinned = (uint64_t)sqlite3_column_int64(st, 2);
        read = 1;
    }
    sqlite3_finalize(st);
    return read;
}

/* "" (an index no kvfs with generations wrote): 0 */
static int gen_number(const char *gen, uint64_t *g)
{
    char *end;
    *g = 0;
    if (!gen[0])
        return 1;
    if (gen[0] < '0' || gen[0] > '9')
        return 0;
    *g = strtoull(gen, &end, 10);
    return *end == 0;
}

struct change_read {
    uint64_t next, upto; /* the generation expected next, the last one wanted */
    int gap;
    uint64_t applied;
    int64_t delta, pins; /* the bytes they added, less those they removed; pins set less pins cleared */
    int64_t rows;        /* rows they added, less those they removed */
};

/* One change, "+ <hash> <entry>", "- <hash>", "p <hash>" or "u <hash>",
 * made to the listing's row (set, removed, pinned, unpinned), the bytes and
 * pins it moves counted from the row as it was: a change applied again
 * moves nothing.  -EINVAL: not one this kvfs reads. */
static int apply_change(struct kvfs_remote *r, struct refresh_ctx *rc, const char *val, size_t vlen,
                        struct change_read *cr)
{
    char hash[KVFS_HASH_HEX_LEN + 1];
    sqlite3_stmt *st;
    uint64_t was = 0;
    int was_pinned = 0, listed = 0;
    if (vlen < 2 + KVFS_HASH_HEX_LEN || !strchr("+-pu", val[0]) || val[1] != ' ')
        return -EINVAL;
    memcpy(hash, val + 2, KVFS_HASH_HEX_LEN);
    hash[KVFS_HASH_HEX_LEN] = 0;
    if (sqlite3_prepare_v2(r->lw, "SELECT osize, pinned FROM known WHERE hash = ?", -1, &st, NULL) != SQLITE_OK)
        return -EIO;
    sqlite3_bind_text(st, 1, hash, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st) == SQLITE_ROW) {
        was = (uint64_t)sqlite3_column_int64(st, 0);
        was_pinned = sqlite3_column_int(st, 1) != 0;
        listed = 1;
    }
    sqlite3_finalize(st);
    switch (val[0]) {
    case '+': {
        struct kvfs_chunk_info c;
        const char *entry = val + 2 + KVFS_HASH_HEX_LEN + 1;
        size_t elen = vlen > 3 + KVFS_HASH_HEX_LEN ? vlen - 3 - KVFS_HASH_HEX_LEN : 0;
        if (parse_entry(hash, rc->model, entry, elen, &c))
            return -EINVAL;
        rc->osize = remote_entry_osize(entry, elen);
        cr->delta += (int64_t)rc->osize - (int64_t)was;
        cr->rows += !listed;
        return insert_known(rc, &c); /* a pin stays (the upsert keeps its column) */
    }
    case '-':
        cr->delta -= (int64_t)was;
        cr->pins -= was_pinned;
        cr->rows -= listed;
        return exec_model(r, "DELETE FROM known WHERE hash = ?", hash, NULL, 0, 0); /* (binds the hash as ?1) */
    default:
        if (!listed || was_pinned == (val[0] == 'p'))
            return 0;
        cr->pins += val[0] == 'p' ? 1 : -1;
        return exec_model(r, val[0] == 'p' ? "UPDATE known SET pinned = 1 WHERE hash = ?"
                                           : "UPDATE known SET pinned = 0 WHERE hash = ?", hash, NULL, 0, 0);
    }
}

/* The model's changes after generation `from` up to `upto` (its generation
 * when read) applied to the listing, in order, in pages of 1000 keys from
 * the change log (remote_usage.h).  Each change sets, removes, pins or
 * unpins one entry, so one the listing's last full read already saw is
 * applied again without harm.  1 when applied, 0 when the log lacks one of
 * them (trimmed away, or a writer kept none): the caller reads the index
 * whole; or -errno. */
static int apply_change_log(struct kvfs_remote *r, rados_ioctx_t io, struct refresh_ctx *rc, uint64_t from,
                            uint64_t upto, struct change_read *cr)
{
    char oid[KVFS_REMOTE_OID_MAX], after[KVFS_REMOTE_CHG_KEY_MAX];
    unsigned char more = 1;
    kvfs_remote_index_oid(rc->model, oid);
    remote_chg_key(from, after);
    memset(cr, 0, sizeof(*cr));
    cr->next = from + 1;
    cr->upto = upto;
    while (more && cr->next <= upto && !cr->gap) {
        rados_read_op_t op = rados_create_read_op();
        rados_omap_iter_t it;
        int prval = 0;
        rados_read_op_omap_get_vals2(op, after, KVFS_REMOTE_CHG_PREFIX, 1000, &it, &more, &prval);
        int rc2 = rados_read_op_operate(op, io, oid, 0);
        if (rc2 < 0 || prval < 0) {
            rados_omap_get_end(it);
            rados_release_read_op(op);
            return rc2 < 0 ? rc2 : prval;
        }
        char *key, *val;
        size_t klen, vlen;
        int err = 0;
        while (!err && cr->next <= upto && rados_omap_get_next2(it, &key, &val, &klen, &vlen) == 0 && key) {
            uint64_t g;
            if (!remote_chg_gen(key, klen, &g) || g != cr->next) { /* one missing (or not ours) */
                cr->gap = 1;
                break;
            }
            memcpy(after, key, klen);
            after[klen] = 0;
            if ((err = apply_change(r, rc, val, vlen, cr)) == -EINVAL) {
                cr->gap = 1; /* a change this kvfs cannot read: the index whole instead */
                err = 0;
                break;
            }
            cr->applied++;
            cr->next++;
        }
        rados_omap_get_end(it);
        rados_release_read_op(op);
        if (err)
            return err;
    }
    return !cr->gap && cr->next == upto + 1;
}

static int exec_model(struct kvfs_remote *r, const char *sql, const char *model, const char *gen, uint64_t usage,
                      uint64_t pinned)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(r->lw, sql, -1, &st, NULL) != SQLITE_OK)
        return -EIO;
    sqlite3_bind_text(st, 1, model, -1, SQLITE_TRANSIENT);
    if (gen) {
        sqlite3_bind_text(st, 2, gen, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 3, (sqlite3_int64)usage);
        sqlite3_bind_int64(st, 4, (sqlite3_int64)pinned);
    }
    int rc = sqlite3_step(st) == SQLITE_DONE ? 0 : -EIO;
    sqlite3_finalize(st);
    return rc;
}

int remote_refresh_listing(struct kvfs_remote *r, rados_ioctx_t io)
{
    char models[256][32];
    struct timespec ts;
    double started = remote_now_s();
    clock_gettime(CLOCK_REALTIME, &ts);
    struct refresh_ctx rc = {.models = models, .now_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec};
    long n = remote_omap_each(io, "kvfs.models", refresh_model_key, &rc);
    if (n < 0)
        return (int)n;
    /* now and then everything (writes of an older kvfs move no generation) */
    pthread_mutex_lock(&r->lock);
    int full = r->listed_full_at == 0 || remote_now_s() - r->listed_full_at >= LIST_FULL_S;
    pthread_mutex_unlock(&r->lock);
    if (sqlite3_prepare_v2(r->lw, "INSERT INTO known(hash, model, tokens, size, layers, arch, seen_ns, osize) "
                                 "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(hash) DO UPDATE SET model = "
                                 "excluded.model, tokens = excluded.tokens, size = excluded.size, layers = "
                                 "excluded.layers, arch = excluded.arch, seen_ns = excluded.seen_ns, osize = "
                                 "excluded.osize", -1, &rc.ins, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(r->lw, "UPDATE known SET pinned = 1 WHERE hash = ?", -1, &rc.pin, NULL) != SQLITE_OK) {
        sqlite3_finalize(rc.ins);
        return -EIO;
    }
    sqlite3_exec(r->lw, full ? "BEGIN; DELETE FROM known; DELETE FROM model_gen;" : "BEGIN", NULL, NULL, NULL);
    int err = 0;
    uint64_t usage = 0, pinned = 0, n_read = 0, n_skipped = 0, n_logged = 0, n_changes = 0;
    int64_t rows_logged = 0; /* rows the logs added, less those they removed */
    for (int i = 0; i < rc.n_models && !err; i++) {
        char oid[64], was[24];
        struct remote_counter c;
        uint64_t mu = 0, mp = 0, from, upto;
        /* the generation before the entries: a write during the read moves
         * it, and the next refresh reads the model again */
        if ((err = remote_counter_read(io, models[i], &c)) < 0)
            break;
        int seen = !full && listed_gen(r, models[i], was, &mu, &mp);
        if (seen && c.gen[0] && !strcmp(was, c.gen)) { /* unchanged since read */
            usage += mu;
            pinned += mp;
            n_skipped++;
            continue;
        }
        rc.model = models[i];
        if (seen && c.gen[0] && gen_number(was, &from) && gen_number(c.gen, &upto) && upto > from) {
            /* only what changed since, when the log still has it all */
            struct change_read cr;
            int got = apply_change_log(r, io, &rc, from, upto, &cr);
            if (got < 0) {
                err = got;
                break;
            }
            if (got == 1) {
                int64_t mu2 = (int64_t)mu + cr.delta, mp2 = (int64_t)mp + cr.pins;
                mu = mu2 < 0 ? 0 : (uint64_t)mu2;
                mp = mp2 < 0 ? 0 : (uint64_t)mp2;
                if ((err = exec_model(r, "INSERT OR REPLACE INTO model_gen VALUES (?, ?, ?, ?)", models[i], c.gen,
                                      mu, mp)))
                    break;
                usage += mu;
                pinned += mp;
                n_logged++;
                n_changes += cr.applied;
                rows_logged += cr.rows;
                continue;
            }
        }
        if (!full && (err = exec_model(r, "DELETE FROM known WHERE model = ?", models[i], NULL, 0, 0)))
            break;
        snprintf(oid, sizeof(oid), "kvfs.model.%s", models[i]);
        rc.usage = rc.pinned = 0;
        long k = remote_omap_each(io, oid, refresh_entry, &rc);
        if (k < 0)
            err = (int)k;
        else
            err = exec_model(r, "INSERT OR REPLACE INTO model_gen VALUES (?, ?, ?, ?)", models[i], c.gen, rc.usage,
                             rc.pinned);
        usage += rc.usage;
        pinned += rc.pinned;
        n_read++;
    }
    sqlite3_finalize(rc.ins);
    sqlite3_finalize(rc.pin);
    if (err) { /* keep the previous listing */
        sqlite3_exec(r->lw, "ROLLBACK", NULL, NULL, NULL);
        return err;
    }
    sqlite3_exec(r->lw, "COMMIT", NULL, NULL, NULL);
    /* counted when an index was read whole; else the logs' rows moved the
     * count (a COUNT(*) reads every row: most of a logged refresh at 10^6) */
    int64_t known = -1;
    sqlite3_stmt *st;
    if (n_read && sqlite3_prepare_v2(r->lw, "SELECT COUNT(*) FROM known", -1, &st, NULL) == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW)
            known = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    pthread_mutex_lock(&r->lock);
    if (known < 0)
        known = (int64_t)r->known + rows_logged;
    r->known = known < 0 ? 0 : (uint64_t)known;
    r->usage = usage;
    r->n_pinned = pinned;
    r->listed_at = remote_now_s();
    if (full)
        r->listed_full_at = r->listed_at;
    r->list_models_read += n_read;
    r->list_models_skipped += n_skipped;
    r->list_models_logged += n_logged;
    r->list_changes += n_changes;
    r->list_took_s = remote_now_s() - started;
    pthread_mutex_unlock(&r->lock);
    return 0;
}

void remote_listing_forget(struct kvfs_remote *r, const char *hash)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(r->lw, "DELETE FROM known WHERE hash = ?", -1, &st, NULL) != SQLITE_OK)
        return;
    sqlite3_bind_text(st, 1, hash, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st) == SQLITE_DONE && sqlite3_changes(r->lw) > 0) {
        pthread_mutex_lock(&r->lock);
        if (r->known)
            r->known--;
        pthread_mutex_unlock(&r->lock);
    }
    sqlite3_finalize(st);
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

long remote_list_hook(void *ctx, const char *after, size_t limit, kvfs_store_list_cb cb, void *cbctx)
{
    struct kvfs_remote *r = ctx;
    sqlite3_stmt *st;
    long taken = 0;
    /* the primary key's index: each page is a range scan, whatever the size */
    if (sqlite3_prepare_v2(r->lr, "SELECT hash, model, tokens, size, layers, arch, seen_ns FROM known"
                                  " WHERE hash > ? ORDER BY hash LIMIT ?", -1, &st, NULL) != SQLITE_OK)
        return -EIO;
    sqlite3_bind_text(st, 1, after ? after : "", -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, limit ? (sqlite3_int64)limit : -1);
    int step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        struct kvfs_chunk_info c;
        if (row_to_info(st, &c) != 0)
            continue; /* not counted: a page of such rows reads as the end, never as a loop */
        if (cb(&c, cbctx))
            break;
        taken++;
    }
    sqlite3_finalize(st);
    return step == SQLITE_ROW || step == SQLITE_DONE ? taken : -EIO;
}

int remote_stat_hook(void *ctx, const char *hash, struct kvfs_chunk_info *out)
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
#endif
