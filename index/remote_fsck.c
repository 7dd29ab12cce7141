/* remote_fsck.c - the pool against its indexes (remote.h, kvfsctl remote
 * fsck): chunk objects no index lists (an upload that died between the
 * object and its entry, an eviction that died between the entry and the
 * object, an object put by hand) and entries whose object is gone (removed
 * by hand, lost), found by a scan of the namespace's objects beside a fresh
 * read of its indexes, and repaired by removing them. */
#include "remote.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#ifdef KVFS_HAVE_RADOS
#include "remote_evict.h"
#include "remote_format.h"
#include "remote_usage.h"
#include "remote_internal.h"

static int is_hash(const char *s)
{
    if (strlen(s) != KVFS_HASH_HEX_LEN)
        return 0;
    for (const char *p = s; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return 0;
    return 1;
}

/* every chunk object of the namespace into table o of the view's database;
 * locked: the evictor lock's lease is renewed as it goes (a scan of a large
 * pool outlasts it) */
static int scan_objects(struct kvfs_remote *r, rados_ioctx_t io, struct remote_view *v, int locked, uint64_t *n)
{
    rados_list_ctx_t lc;
    sqlite3_stmt *ins = NULL;
    if (sqlite3_exec(v->db, "CREATE TABLE o(hash TEXT PRIMARY KEY) WITHOUT ROWID; BEGIN", NULL, NULL, NULL) !=
            SQLITE_OK ||
        sqlite3_prepare_v2(v->db, "INSERT OR IGNORE INTO o VALUES (?)", -1, &ins, NULL) != SQLITE_OK)
        return -EIO;
    int rc = rados_nobjects_list_open(io, &lc);
    if (rc < 0) {
        sqlite3_finalize(ins);
        return rc;
    }
    const char *oid;
    while ((rc = rados_nobjects_list_next(lc, &oid, NULL, NULL)) == 0) {
        if (!is_hash(oid)) /* indexes, the evictor lock, leases, the probe */
            continue;
        sqlite3_bind_text(ins, 1, oid, -1, SQLITE_TRANSIENT);
        if (sqlite3_step(ins) != SQLITE_DONE) {
            rc = -EIO;
            break;
        }
        sqlite3_reset(ins);
        if (++*n % 1024 == 0 && locked && (rc = remote_evict_renew(r, io, v)) < 0)
            break;
    }
    rados_nobjects_list_close(lc);
    sqlite3_finalize(ins);
    if (rc == -ENOENT)
        rc = 0;
    if (sqlite3_exec(v->db, rc ? "ROLLBACK" : "COMMIT", NULL, NULL, NULL) != SQLITE_OK && !rc)
        rc = -EIO;
    return rc;
}

/* A stray object, checked again now (its entry may have come since the
 * scan) and removed with repair when it is old enough.  0, or 1 if it is
 * not (or no longer) a problem, or young (*young set). */
static int stray_object(struct kvfs_remote *r, rados_ioctx_t io, int repair, int min_age_s,
                        struct kvfs_remote_problem *p, int *young)
{
    uint64_t size;
    time_t mtime;
    int rc = rados_stat(io, p->hash, &size, &mtime);
    if (rc < 0)
        return 1; /* gone since the scan */
    p->size = size;
    rc = rados_getxattr(io, p->hash, "kvfs.model", p->model, sizeof(p->model) - 1);
    p->model[rc > 0 ? rc : 0] = 0;
    if (p->model[0]) { /* listed since the view was read? */
        char oid[KVFS_REMOTE_OID_MAX];
        const char *keys[1] = {p->hash};
        rados_omap_iter_t it = NULL;
        int prval = 0, listed = 0;
        kvfs_remote_index_oid(p->model, oid);
        rados_read_op_t op = rados_create_read_op();
        rados_read_op_omap_get_vals_by_keys(op, keys, 1, &it, &prval);
        if (rados_read_op_operate(op, io, oid, 0) == 0 && prval == 0) {
            char *k, *val;
            size_t klen, vlen;
            listed = rados_omap_get_next2(it, &k, &val, &klen, &vlen) == 0 && k != NULL;
        }
        if (it)
            rados_omap_get_end(it);
        rados_release_read_op(op);
        if (listed)
            return 1;
    }
    if (time(NULL) - mtime < min_age_s) {
        *young = 1;
        return 1;
    }
    if (repair) {
        rc = rados_remove(io, p->hash);
        p->repaired = rc == 0 || rc == -ENOENT;
        p->repair_rc = p->repaired ? 0 : rc;
        if (p->repaired)
            kvfs_log(KVFS_LOG_INFO, "remote tier: fsck removed object %s (%" PRIu64 " bytes) no index lists, "
                     "from pool %s", p->hash, p->size, r->pool);
    }
    return 0;
}

/* An entry without its object, checked again, and with repair removed
 * (pin first: an object that is gone cannot be kept) with its usage. */
static int missing_object(struct kvfs_remote *r, rados_ioctx_t io, int repair, struct kvfs_remote_problem *p)
{
    uint64_t size;
    time_t mtime;
    if (rados_stat(io, p->hash, &size, &mtime) != -ENOENT)
        return 1; /* there after all (uploaded since the scan), or not known: not judged */
    if (!repair)
        return 0;
    char oid[KVFS_REMOTE_OID_MAX], pkey[KVFS_HASH_HEX_LEN + 3];
    const char *keys[1] = {pkey};
    kvfs_remote_index_oid(p->model, oid);
    snprintf(pkey, sizeof(pkey), "%s.p", p->hash);
    rados_write_op_t op = rados_create_write_op();
    rados_write_op_omap_rm_keys(op, keys, 1);
    int rc = rados_write_op_operate(op, io, oid, NULL, 0);
    rados_release_write_op(op);
    uint64_t freed = 0;
    if (rc == 0 || rc == -ENOENT)
        rc = remote_index_remove(io, p->model, p->hash, &freed, r->chg_keep);
    p->repaired = rc == 0 || rc == -ENOENT;
    p->repair_rc = p->repaired ? 0 : rc;
    if (p->repaired)
        kvfs_log(KVFS_LOG_INFO, "remote tier: fsck removed the entry of %s from index %s (its object is gone), "
                 "pool %s", p->hash, oid, r->pool);
    return 0;
}

int kvfs_remote_fsck(struct kvfs_remote *r, int repair, int min_age_s,
                     int (*cb)(void *ctx, const struct kvfs_remote_problem *p), void *ctx,
                     struct kvfs_remote_fsck_sum *sum, char *err, size_t errlen)
{
    int state, rc, locked = 0;
    rados_ioctx_t io = remote_io(r, &state);
    struct remote_view v;
    sqlite3_stmt *st = NULL;
    memset(sum, 0, sizeof(*sum));
    if (!io || state != ST_CONNECTED)
        return kvfs_errf(err, errlen, -EHOSTDOWN, "not connected");
    /* repairs wait for uploads and evictions of hosts with a capacity */
    if (repair) {
        if ((rc = remote_evict_lock(r, io)))
            return kvfs_errf(err, errlen, rc, "cannot take the evictor lock (kvfs.evictor): %s",
                             rc == -EBUSY ? "another host holds it; try again" : strerror(-rc));
        locked = 1;
    }
    if ((rc = remote_view_read(io, &v))) {
        kvfs_errf(err, errlen, rc, "cannot read the indexes: %s", strerror(-rc));
        goto unlock;
    }
    sum->stray_keys = v.n_orphans;
    sum->counters_set = (uint64_t)v.reconciled;
    if ((rc = scan_objects(r, io, &v, locked, &sum->objects))) {
        kvfs_errf(err, errlen, rc, "cannot list the pool's objects%s: %s",
                  locked ? " (or lost the evictor lock meanwhile)" : "", strerror(-rc));
        goto out;
    }
    if (sqlite3_prepare_v2(v.db, "SELECT COUNT(*) FROM e", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        sum->entries = (uint64_t)sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    /* both kinds in one statement: objects without entries, entries without objects */
    if (sqlite3_prepare_v2(v.db,
                           "SELECT 0, hash, '', 0 FROM o WHERE hash NOT IN (SELECT hash FROM e) "
                           "UNION ALL SELECT 1, hash, model, size FROM e WHERE hash NOT IN (SELECT hash FROM o) "
                           "ORDER BY 1, 2", -1, &st, NULL) != SQLITE_OK) {
        rc = kvfs_errf(err, errlen, -EIO, "cannot compare the objects with the indexes");
        goto out;
    }
    while (sqlite3_step(st) == SQLITE_ROW) {
        struct kvfs_remote_problem p;
        memset(&p, 0, sizeof(p));
        p.kind = sqlite3_column_int(st, 0) ? KVFS_REMOTE_MISSING_OBJECT : KVFS_REMOTE_STRAY_OBJECT;
        snprintf(p.hash, sizeof(p.hash), "%s", (const char *)sqlite3_column_text(st, 1));
        snprintf(p.model, sizeof(p.model), "%s", (const char *)sqlite3_column_text(st, 2));
        p.size = (uint64_t)sqlite3_column_int64(st, 3);
        int young = 0;
        if (locked && remote_evict_renew(r, io, &v) < 0) {
            rc = kvfs_errf(err, errlen, -EBUSY, "lost the evictor lock during the repair; run it again");
            break;
        }
        int fine = p.kind == KVFS_REMOTE_STRAY_OBJECT ? stray_object(r, io, repair, min_age_s, &p, &young)
                                                      : missing_object(r, io, repair, &p);
        sum->young += young;
        if (fine)
            continue;
        sum->stray += p.kind == KVFS_REMOTE_STRAY_OBJECT;
        sum->missing += p.kind == KVFS_REMOTE_MISSING_OBJECT;
        sum->repaired += p.repaired;
        if (cb && cb(ctx, &p))
            break;
    }
    sqlite3_finalize(st);
    if (repair)
        remote_view_clean_orphans(io, &v);
out:
    remote_view_free(&v);
unlock:
    if (locked)
        remote_evict_unlock(r, io);
    return rc;
}

#else

int kvfs_remote_fsck(struct kvfs_remote *r, int repair, int min_age_s,
                     int (*cb)(void *ctx, const struct kvfs_remote_problem *p), void *ctx,
                     struct kvfs_remote_fsck_sum *sum, char *err, size_t errlen)
{
    (void)r, (void)repair, (void)min_age_s, (void)cb, (void)ctx;
    memset(sum, 0, sizeof(*sum));
    return kvfs_errf(err, errlen, -ENOTSUP, "kvfs was built without librados");
}
#endif
