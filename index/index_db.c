/* index_db.c - SQLite index of chunks. */
#include "index_db.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

struct kvfs_index_db {
    sqlite3 *db;
    sqlite3_stmt *ins, *del, *touch, *pin;
};

static const char *schema =
    "CREATE TABLE IF NOT EXISTS chunks ("
    " hash TEXT PRIMARY KEY,"
    " model TEXT NOT NULL,"
    " arch TEXT NOT NULL,"
    " n_tokens INTEGER NOT NULL,"
    " n_layer INTEGER NOT NULL,"
    " dtype INTEGER NOT NULL,"
    " logical_size INTEGER NOT NULL,"
    " stored_size INTEGER NOT NULL,"
    " tier TEXT NOT NULL DEFAULT 'disk',"
    " created_ns INTEGER NOT NULL,"
    " accessed_ns INTEGER NOT NULL,"
    " hits INTEGER NOT NULL DEFAULT 0,"
    " pinned INTEGER NOT NULL DEFAULT 0"
    ") WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS chunks_model ON chunks(model);";

static int sql_errno(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_OK: case SQLITE_DONE: case SQLITE_ROW: return 0;
    case SQLITE_NOMEM: return -ENOMEM;
    case SQLITE_FULL: return -ENOSPC;
    case SQLITE_BUSY: case SQLITE_LOCKED: return -EBUSY;
    case SQLITE_READONLY: return -EROFS;
    case SQLITE_CANTOPEN: return -ENOENT;
    case SQLITE_CORRUPT: case SQLITE_NOTADB: return -EUCLEAN;
    default: return -EIO;
    }
}

int kvfs_idx_open(const char *path, int read_only, struct kvfs_index_db **out, char *err, size_t errlen)
{
    struct kvfs_index_db *d = calloc(1, sizeof(*d));
    int rc;
    if (!d)
        return -ENOMEM;
    int flags = read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
    rc = sqlite3_open_v2(path, &d->db, flags | SQLITE_OPEN_FULLMUTEX, NULL);
    if (rc != SQLITE_OK)
        goto fail;
    sqlite3_busy_timeout(d->db, 5000);
    if (!read_only) {
        /* WAL + NORMAL: a crash may lose the last index updates, never the
         * objects; the store reconciles the index with the objects at open. */
        rc = sqlite3_exec(d->db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;", NULL, NULL, NULL);
        if (rc == SQLITE_OK)
            rc = sqlite3_exec(d->db, schema, NULL, NULL, NULL);
        if (rc != SQLITE_OK)
            goto fail;
        rc = sqlite3_prepare_v2(d->db,
            "INSERT OR REPLACE INTO chunks(hash,model,arch,n_tokens,n_layer,dtype,logical_size,"
            "stored_size,tier,created_ns,accessed_ns,hits,pinned) VALUES(?,?,?,?,?,?,?,?,'disk',?,?,?,?)",
            -1, &d->ins, NULL);
        if (rc == SQLITE_OK)
            rc = sqlite3_prepare_v2(d->db, "DELETE FROM chunks WHERE hash=?", -1, &d->del, NULL);
        if (rc == SQLITE_OK)
            rc = sqlite3_prepare_v2(d->db, "UPDATE chunks SET accessed_ns=?, hits=? WHERE hash=?", -1,
                                    &d->touch, NULL);
        if (rc == SQLITE_OK)
            rc = sqlite3_prepare_v2(d->db, "UPDATE chunks SET pinned=? WHERE hash=?", -1, &d->pin, NULL);
        if (rc != SQLITE_OK)
            goto fail;
    }
    *out = d;
    return 0;
fail:
    snprintf(err, errlen, "index %s: %s", path, d->db ? sqlite3_errmsg(d->db) : "cannot open");
    kvfs_idx_close(d);
    return sql_errno(rc) ? sql_errno(rc) : -EIO;
}

void kvfs_idx_close(struct kvfs_index_db *d)
{
    if (!d)
        return;
    sqlite3_finalize(d->ins);
    sqlite3_finalize(d->del);
    sqlite3_finalize(d->touch);
    sqlite3_finalize(d->pin);
    sqlite3_close(d->db);
    free(d);
}

static int step_reset(sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return rc == SQLITE_DONE ? 0 : sql_errno(rc) ? sql_errno(rc) : -EIO;
}

int kvfs_idx_insert(struct kvfs_index_db *d, const struct kvfs_chunk_info *c)
{
    sqlite3_stmt *st = d->ins;
    if (!st)
        return -EROFS;
    sqlite3_bind_text(st, 1, c->hash, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, c->model, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, c->arch, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, c->n_tokens);
    sqlite3_bind_int64(st, 5, c->n_layer);
    sqlite3_bind_int64(st, 6, c->dtype);
    sqlite3_bind_int64(st, 7, (sqlite3_int64)c->logical_size);
    sqlite3_bind_int64(st, 8, (sqlite3_int64)c->stored_size);
    sqlite3_bind_int64(st, 9, c->created_ns);
    sqlite3_bind_int64(st, 10, c->accessed_ns);
    sqlite3_bind_int64(st, 11, (sqlite3_int64)c->hits);
    sqlite3_bind_int(st, 12, c->pinned);
    return step_reset(st);
}

int kvfs_idx_delete(struct kvfs_index_db *d, const char *hash)
{
    if (!d->del)
        return -EROFS;
    sqlite3_bind_text(d->del, 1, hash, -1, SQLITE_STATIC);
    return step_reset(d->del);
}

int kvfs_idx_touch(struct kvfs_index_db *d, const char *hash, int64_t accessed_ns, uint64_t hits)
{
    if (!d->touch)
        return -EROFS;
    sqlite3_bind_int64(d->touch, 1, accessed_ns);
    sqlite3_bind_int64(d->touch, 2, (sqlite3_int64)hits);
    sqlite3_bind_text(d->touch, 3, hash, -1, SQLITE_STATIC);
    return step_reset(d->touch);
}

int kvfs_idx_set_pinned(struct kvfs_index_db *d, const char *hash, int pinned)
{
    if (!d->pin)
        return -EROFS;
    sqlite3_bind_int(d->pin, 1, pinned ? 1 : 0);
    sqlite3_bind_text(d->pin, 2, hash, -1, SQLITE_STATIC);
    return step_reset(d->pin);
}

int kvfs_idx_load(struct kvfs_index_db *d, kvfs_store_list_cb cb, void *ctx)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(d->db,
        "SELECT hash,model,arch,n_tokens,n_layer,dtype,logical_size,stored_size,created_ns,"
        "accessed_ns,hits,pinned FROM chunks ORDER BY hash", -1, &st, NULL);
    if (rc != SQLITE_OK)
        return sql_errno(rc) ? sql_errno(rc) : -EIO;
    int ret = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct kvfs_chunk_info c;
        memset(&c, 0, sizeof(c));
        const char *h = (const char *)sqlite3_column_text(st, 0);
        const char *m = (const char *)sqlite3_column_text(st, 1);
        const char *a = (const char *)sqlite3_column_text(st, 2);
        if (!h || strlen(h) != KVFS_HASH_HEX_LEN)
            continue;
        memcpy(c.hash, h, KVFS_HASH_HEX_LEN + 1);
        snprintf(c.model, sizeof(c.model), "%s", m ? m : "");
        snprintf(c.arch, sizeof(c.arch), "%s", a ? a : "");
        c.n_tokens = (uint32_t)sqlite3_column_int64(st, 3);
        c.n_layer = (uint32_t)sqlite3_column_int64(st, 4);
        c.dtype = (uint32_t)sqlite3_column_int64(st, 5);
        c.logical_size = (uint64_t)sqlite3_column_int64(st, 6);
        c.stored_size = (uint64_t)sqlite3_column_int64(st, 7);
        c.created_ns = sqlite3_column_int64(st, 8);
        c.accessed_ns = sqlite3_column_int64(st, 9);
        c.hits = (uint64_t)sqlite3_column_int64(st, 10);
        c.pinned = sqlite3_column_int(st, 11);
        if ((ret = cb(&c, ctx)))
            break;
    }
    if (!ret && rc != SQLITE_DONE)
        ret = sql_errno(rc) ? sql_errno(rc) : -EIO;
    sqlite3_finalize(st);
    return ret;
}
