/* store_open.c - opening a store (its directories, its index loaded into
 * the table of rows, the blend results' directory emptied), making the
 * index agree with the objects after a crash, and closing it. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "index_db.h"
#include "object.h"
#include "store_internal.h"

static int mkdir_p(const char *path)
{
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
                return -errno;
            *p = '/';
        }
    }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
        return -errno;
    return 0;
}

static int load_row_cb(const struct kvfs_chunk_info *info, void *ctx)
{
    struct kvfs_store *s = ctx;
    return chunk_rows_insert(&s->rows, info);
}

/* ---- reconcile ---- */

/* Half-written temp files of an ingest that never finished. */
static void remove_unfinished(struct kvfs_store *s)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/tmp", s->dir);
    DIR *d = opendir(path);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        char p[4096 + 256];
        snprintf(p, sizeof(p), "%s/%s", path, de->d_name);
        if (unlink(p) == 0)
            kvfs_log(KVFS_LOG_INFO, "removed unfinished ingest %s", p);
    }
    closedir(d);
}

/* Objects found on disk: the rows [0, n_at_start) that have one are marked
 * in seen, the hashes of those without a row are appended to *added. */
struct object_scan {
    uint8_t *seen;
    size_t n_at_start;
    char **added;
    size_t n_added;
};

static void scan_object(struct kvfs_store *s, const char *name, struct object_scan *sc)
{
    size_t nl = strlen(name);
    if (name[0] == '.' || nl != KVFS_HASH_HEX_LEN + 4 || strcmp(name + KVFS_HASH_HEX_LEN, ".kvo"))
        return;
    char hash[KVFS_HASH_HEX_LEN + 1];
    memcpy(hash, name, KVFS_HASH_HEX_LEN);
    hash[KVFS_HASH_HEX_LEN] = '\0';
    int found;
    long i = chunk_rows_find(&s->rows, hash, &found);
    if (found) {
        if ((size_t)i < sc->n_at_start)
            sc->seen[i] = 1;
        return;
    }
    /* not indexed: a crash between rename and index insert */
    char *dup = strdup(hash);
    char **a = dup ? realloc(sc->added, (sc->n_added + 1) * sizeof(*a)) : NULL;
    if (!a) {
        free(dup);
        return;
    }
    sc->added = a;
    sc->added[sc->n_added++] = dup;
}

static void scan_objects(struct kvfs_store *s, struct object_scan *sc)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/objects", s->dir);
    DIR *top = opendir(path);
    struct dirent *sub;
    while (top && (sub = readdir(top))) {
        if (sub->d_name[0] == '.')
            continue;
        char subpath[4096 + 256];
        snprintf(subpath, sizeof(subpath), "%s/%s", path, sub->d_name);
        DIR *sd = opendir(subpath);
        struct dirent *de;
        while (sd && (de = readdir(sd)))
            scan_object(s, de->d_name, sc);
        if (sd)
            closedir(sd);
    }
    if (top)
        closedir(top);
}

/* drop rows whose object vanished (from the end: indices stay valid) */
static void drop_rows_without_objects(struct kvfs_store *s, const struct object_scan *sc)
{
    for (long i = (long)sc->n_at_start - 1; i >= 0; i--) {
        if (sc->seen[i])
            continue;
        char hash[KVFS_HASH_HEX_LEN + 1];
        memcpy(hash, s->rows.v[i]->hash, sizeof(hash));
        kvfs_log(KVFS_LOG_WARN, "index row %s has no object; dropping it", hash);
        kvfs_idx_delete(s->db, hash);
        chunk_rows_remove(&s->rows, hash);
    }
}

/* An object without an index row: verified (prefix) and indexed, or moved
 * to lost+found when it is not what its name says. */
static void index_found_object(struct kvfs_store *s, const char *name)
{
    char p[4096];
    store_object_path(s, name, p, sizeof(p));
    int fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    struct kvfs_obj_info info;
    struct kvfs_header h;
    uint8_t *hb = NULL, digest[32];
    char hex[KVFS_HASH_HEX_LEN + 1], why[256] = "";
    int ok = fd >= 0 && fstat(fd, &st) == 0 &&
             kvfs_obj_read_prefix(fd, (uint64_t)st.st_size, &info, &hb, &h, why, sizeof(why)) == 0;
    if (ok) {
        ok = kvfs_content_hash(&h, digest) == 0;
        kvfs_hash_to_hex(digest, hex);
        ok = ok && !strcmp(hex, name);
        if (ok) {
            struct kvfs_chunk_info c;
            kvfs_info_from_header(&h, hex, (uint64_t)st.st_size, &c);
            c.created_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
            c.accessed_ns = c.created_ns;
            ok = kvfs_idx_insert(s->db, &c) == 0 && chunk_rows_insert(&s->rows, &c) == 0;
            if (ok)
                kvfs_log(KVFS_LOG_INFO, "indexed object %s found without an index row", hex);
        } else {
            snprintf(why, sizeof(why), "name does not match content hash");
        }
        kvfs_obj_info_free(&info);
        free(hb);
    }
    if (fd >= 0)
        close(fd);
    if (!ok) {
        char lf[4096 + 128];
        snprintf(lf, sizeof(lf), "%s/lost+found", s->dir);
        mkdir(lf, 0700);
        snprintf(lf, sizeof(lf), "%s/lost+found/%s.kvo", s->dir, name);
        kvfs_log(KVFS_LOG_WARN, "object %s is invalid (%s); moved to lost+found", name, why);
        rename(p, lf);
    }
}

/* Make the index agree with the objects after a crash: objects without a row
 * are verified (prefix) and indexed, rows without objects are dropped,
 * half-written temp files are removed. */
static int reconcile(struct kvfs_store *s)
{
    remove_unfinished(s);
    struct object_scan sc = {.seen = calloc(s->rows.n + 1, 1), .n_at_start = s->rows.n};
    if (!sc.seen)
        return -ENOMEM;
    scan_objects(s, &sc);
    drop_rows_without_objects(s, &sc);
    free(sc.seen);
    for (size_t k = 0; k < sc.n_added; k++) {
        index_found_object(s, sc.added[k]);
        free(sc.added[k]);
    }
    free(sc.added);
    return 0;
}

/* ---- open / close ---- */

int kvfs_store_open(const struct kvfs_store_opts *opts, struct kvfs_store **out, char *err, size_t errlen)
{
    struct kvfs_store *s = calloc(1, sizeof(*s));
    char path[4096];
    int rc;
    if (!s)
        return -ENOMEM;
    s->opts = *opts;
    if (s->opts.zstd_level < 0 || s->opts.zstd_level > 19) {
        kvfs_errf(err, errlen, 0, "zstd level %d out of range 0..19", s->opts.zstd_level);
        free(s);
        return -EINVAL;
    }
    s->dir = strdup(opts->dir);
    if (!s->dir) {
        free(s);
        return -ENOMEM;
    }
    s->opts.dir = s->dir;
    s->ram.capacity = opts->ram_bytes;
    result_table_init(&s->results, s->dir, opts->result_capacity, opts->capacity);
    pthread_mutex_init(&s->lock, NULL);
    store_async_init(s);
    if (!opts->read_only) {
        const char *subs[] = {"", "/objects", "/tmp"};
        for (int i = 0; i < 3; i++) {
            snprintf(path, sizeof(path), "%s%s", s->dir, subs[i]);
            if ((rc = mkdir_p(path))) {
                kvfs_errf(err, errlen, 0, "cannot create %s: %s", path, strerror(-rc));
                goto fail;
            }
        }
    }
    snprintf(path, sizeof(path), "%s/index.sqlite", s->dir);
    if ((rc = kvfs_idx_open(path, opts->read_only, &s->db, err, errlen)))
        goto fail;
    if ((rc = kvfs_idx_load(s->db, load_row_cb, s))) {
        kvfs_errf(err, errlen, 0, "cannot load index %s: %s", path, strerror(-rc));
        goto fail;
    }
    if (!opts->read_only && (rc = reconcile(s))) {
        kvfs_errf(err, errlen, 0, "cannot reconcile store: %s", strerror(-rc));
        goto fail;
    }
    if (!opts->read_only && (rc = result_table_clear_dir(&s->results))) {
        kvfs_errf(err, errlen, 0, "cannot prepare %s/results: %s", s->dir, strerror(-rc));
        goto fail;
    }
    *out = s;
    return 0;
fail:
    kvfs_store_close(s);
    return rc;
}

void kvfs_store_close(struct kvfs_store *s)
{
    if (!s)
        return;
    store_async_close(s); /* first: it writes what is queued */
    kvfs_idx_close(s->db);
    result_table_free(&s->results);
    chunk_rows_free(&s->rows);
    store_drop_parked(s, NULL, 1);
    ram_tier_close(&s->ram);
    pthread_mutex_destroy(&s->lock);
    free(s->dir);
    free(s);
}
