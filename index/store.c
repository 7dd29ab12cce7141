/* store.c - content-addressed chunk store: objects on disk, SQLite index,
 * an in-memory table of rows for fast lookups and listing, a RAM tier of
 * decoded images, capacity enforcement with LRU eviction.
 *
 * Locking: one mutex (s->lock) protects rows, counters and the RAM tier.
 * Object encoding, decoding, writing and fsync happen outside it.
 */
#include "store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "image.h"
#include "index_db.h"
#include "object.h"
#include "store_internal.h"

int64_t store_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- rows: sorted array of pointers, binary search by hash ---- */

static long row_find(struct kvfs_store *s, const char *hash, int *found)
{
    long lo = 0, hi = (long)s->n_rows;
    while (lo < hi) {
        long mid = (lo + hi) / 2;
        int c = strcmp(s->rows[mid]->hash, hash);
        if (c == 0) {
            *found = 1;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = 0;
    return lo;
}

static struct kvfs_chunk_info *row_get(struct kvfs_store *s, const char *hash)
{
    int found;
    long i = row_find(s, hash, &found);
    return found ? s->rows[i] : NULL;
}

static int row_insert(struct kvfs_store *s, const struct kvfs_chunk_info *info)
{
    int found;
    long i = row_find(s, info->hash, &found);
    if (found) {
        *s->rows[i] = *info;
        return 0;
    }
    if (s->n_rows == s->cap_rows) {
        size_t cap = s->cap_rows ? s->cap_rows * 2 : 1024;
        struct kvfs_chunk_info **r = realloc(s->rows, cap * sizeof(*r));
        if (!r)
            return -ENOMEM;
        s->rows = r;
        s->cap_rows = cap;
    }
    struct kvfs_chunk_info *c = malloc(sizeof(*c));
    if (!c)
        return -ENOMEM;
    *c = *info;
    memmove(&s->rows[i + 1], &s->rows[i], (s->n_rows - (size_t)i) * sizeof(*s->rows));
    s->rows[i] = c;
    s->n_rows++;
    s->bytes_stored += info->stored_size;
    s->bytes_logical += info->logical_size;
    return 0;
}

static void row_remove(struct kvfs_store *s, const char *hash)
{
    int found;
    long i = row_find(s, hash, &found);
    if (!found)
        return;
    s->bytes_stored -= s->rows[i]->stored_size;
    s->bytes_logical -= s->rows[i]->logical_size;
    free(s->rows[i]);
    memmove(&s->rows[i], &s->rows[i + 1], (s->n_rows - (size_t)i - 1) * sizeof(*s->rows));
    s->n_rows--;
}

/* ---- RAM tier (chunks and blend results alike) ---- */

struct ram_entry *ram_lookup(struct kvfs_store *s, const char *hash)
{
    for (struct ram_entry *e = s->ram; e; e = e->next)
        if (!strcmp(e->hash, hash))
            return e;
    return NULL;
}

static void ram_unlink(struct kvfs_store *s, struct ram_entry *e)
{
    for (struct ram_entry **pp = &s->ram; *pp; pp = &(*pp)->next) {
        if (*pp == e) {
            *pp = e->next;
            break;
        }
    }
    s->ram_used -= e->size;
    s->ram_count--;
    e->cached = 0;
    e->next = NULL;
    if (e->refs == 0) {
        kvfs_img_free(e->img);
        free(e);
    }
}

void ram_drop(struct kvfs_store *s, const char *hash)
{
    struct ram_entry *e = ram_lookup(s, hash);
    if (e)
        ram_unlink(s, e);
}

/* Make room for `need` bytes by dropping least recently used entries. */
static int ram_make_room(struct kvfs_store *s, size_t need)
{
    if (need > s->opts.ram_bytes)
        return -ENOSPC;
    while (s->ram_used + need > s->opts.ram_bytes) {
        struct ram_entry *victim = NULL;
        for (struct ram_entry *e = s->ram; e; e = e->next)
            if (!victim || e->stamp < victim->stamp)
                victim = e;
        if (!victim)
            return -ENOSPC;
        ram_unlink(s, victim);
    }
    return 0;
}

/* Put an entry into the RAM tier if there is one and it fits (s->lock held);
 * 1 if it is now cached there. */
int ram_insert_locked(struct kvfs_store *s, struct ram_entry *e)
{
    if (!s->opts.ram_bytes || ram_make_room(s, e->size) != 0)
        return 0;
    e->cached = 1;
    e->next = s->ram;
    s->ram = e;
    s->ram_used += e->size;
    s->ram_count++;
    return 1;
}

void ram_hit_locked(struct kvfs_store *s, struct ram_entry *e)
{
    e->refs++;
    e->stamp = ++s->ram_clock;
    s->ram_hits++;
}

struct ram_entry *ram_adopt_decoded_locked(struct kvfs_store *s, struct ram_entry *e, int keep)
{
    struct ram_entry *raced = ram_lookup(s, e->hash);
    if (raced) { /* another reader decoded it meanwhile: share theirs */
        raced->refs++;
        kvfs_img_free(e->img);
        free(e);
        return raced;
    }
    e->stamp = ++s->ram_clock;
    if (keep)
        ram_insert_locked(s, e);
    return e;
}

/* ---- paths ---- */

static void object_path(const struct kvfs_store *s, const char *hash, char *out, size_t len)
{
    snprintf(out, len, "%s/objects/%.2s/%s.kvo", s->dir, hash, hash);
}

int kvfs_store_object_path(struct kvfs_store *s, const char *hash, char *out, size_t len)
{
    pthread_mutex_lock(&s->lock);
    int present = row_get(s, hash) != NULL;
    pthread_mutex_unlock(&s->lock);
    if (!present)
        return -ENOENT;
    object_path(s, hash, out, len);
    return 0;
}

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

static int fsync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd) ? -errno : 0;
    close(fd);
    return rc;
}

void kvfs_info_from_header(const struct kvfs_header *h, const char *hash, uint64_t stored,
                           struct kvfs_chunk_info *c)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->hash, sizeof(c->hash), "%s", hash);
    kvfs_fingerprint_id(&h->fp, c->model);
    memcpy(c->arch, h->fp.arch, sizeof(c->arch));
    c->arch[sizeof(c->arch) - 1] = '\0';
    c->n_tokens = h->n_tokens;
    c->n_layer = h->fp.n_layer;
    c->dtype = h->dtype;
    c->logical_size = h->file_size;
    c->stored_size = stored;
}

/* ---- open / reconcile ---- */

static int load_row_cb(const struct kvfs_chunk_info *info, void *ctx)
{
    return row_insert(ctx, info);
}

/* Make the index agree with the objects after a crash: objects without a row
 * are verified (prefix) and indexed, rows without objects are dropped,
 * half-written temp files are removed. */
static int reconcile(struct kvfs_store *s)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/tmp", s->dir);
    DIR *d = opendir(path);
    if (d) {
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
    uint8_t *seen = calloc(s->n_rows + 1, 1);
    if (!seen)
        return -ENOMEM;
    size_t n_at_start = s->n_rows;
    char **added = NULL;
    size_t n_added = 0;
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
        while (sd && (de = readdir(sd))) {
            size_t nl = strlen(de->d_name);
            if (de->d_name[0] == '.' || nl != KVFS_HASH_HEX_LEN + 4 || strcmp(de->d_name + KVFS_HASH_HEX_LEN, ".kvo"))
                continue;
            char hash[KVFS_HASH_HEX_LEN + 1];
            memcpy(hash, de->d_name, KVFS_HASH_HEX_LEN);
            hash[KVFS_HASH_HEX_LEN] = '\0';
            int found;
            long i = row_find(s, hash, &found);
            if (found) {
                if ((size_t)i < n_at_start)
                    seen[i] = 1;
                continue;
            }
            /* not indexed: a crash between rename and index insert */
            char *dup = strdup(hash);
            char **a = dup ? realloc(added, (n_added + 1) * sizeof(*a)) : NULL;
            if (!a) {
                free(dup);
                continue;
            }
            added = a;
            added[n_added++] = dup;
        }
        if (sd)
            closedir(sd);
    }
    if (top)
        closedir(top);
    /* drop rows whose object vanished (iterate from the end: indices stay valid) */
    for (long i = (long)n_at_start - 1; i >= 0; i--) {
        if (seen[i])
            continue;
        char hash[KVFS_HASH_HEX_LEN + 1];
        memcpy(hash, s->rows[i]->hash, sizeof(hash));
        kvfs_log(KVFS_LOG_WARN, "index row %s has no object; dropping it", hash);
        kvfs_idx_delete(s->db, hash);
        row_remove(s, hash);
    }
    free(seen);
    for (size_t k = 0; k < n_added; k++) {
        char p[4096];
        object_path(s, added[k], p, sizeof(p));
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
            ok = ok && !strcmp(hex, added[k]);
            if (ok) {
                struct kvfs_chunk_info c;
                kvfs_info_from_header(&h, hex, (uint64_t)st.st_size, &c);
                c.created_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
                c.accessed_ns = c.created_ns;
                ok = kvfs_idx_insert(s->db, &c) == 0 && row_insert(s, &c) == 0;
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
            snprintf(lf, sizeof(lf), "%s/lost+found/%s.kvo", s->dir, added[k]);
            kvfs_log(KVFS_LOG_WARN, "object %s is invalid (%s); moved to lost+found", added[k], why);
            rename(p, lf);
        }
        free(added[k]);
    }
    free(added);
    return 0;
}

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
    pthread_mutex_init(&s->lock, NULL);
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
    if (!opts->read_only && (rc = results_open_locked(s))) {
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
    kvfs_idx_close(s->db);
    results_close_locked(s);
    for (size_t i = 0; i < s->n_rows; i++)
        free(s->rows[i]);
    free(s->rows);
    while (s->ram) {
        struct ram_entry *e = s->ram;
        s->ram = e->next;
        if (e->refs == 0) { /* live refs own their entry now */
            kvfs_img_free(e->img);
            free(e);
        } else {
            e->cached = 0;
        }
    }
    pthread_mutex_destroy(&s->lock);
    free(s->dir);
    free(s);
}

/* ---- removal and eviction (lock held) ---- */

static int remove_locked(struct kvfs_store *s, const char *hash)
{
    char p[4096];
    object_path(s, hash, p, sizeof(p));
    if (unlink(p) != 0 && errno != ENOENT)
        return -errno;
    int rc = kvfs_idx_delete(s->db, hash);
    if (rc)
        kvfs_log(KVFS_LOG_WARN, "index delete of %s failed (%s); fixed at next open", hash, strerror(-rc));
    row_remove(s, hash);
    ram_drop(s, hash);
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
    while (s->bytes_stored + s->result_bytes + need > s->opts.capacity) {
        struct kvfs_chunk_info *victim = NULL;
        for (size_t i = 0; i < s->n_rows; i++) {
            struct kvfs_chunk_info *c = s->rows[i];
            if (!c->pinned && !c->held && (!victim || c->accessed_ns < victim->accessed_ns))
                victim = c;
        }
        struct result_row *rv = result_lru_locked(s);
        if (rv && (!victim || rv->accessed_ns <= victim->accessed_ns)) {
            kvfs_log(KVFS_LOG_INFO, "evicting blend result %s (least recently used) to stay within capacity", rv->key);
            result_remove_locked(s, rv->key);
            s->result_evictions++;
            continue;
        }
        if (!victim)
            return -ENOSPC;
        char hash[KVFS_HASH_HEX_LEN + 1];
        memcpy(hash, victim->hash, sizeof(hash));
        kvfs_log(KVFS_LOG_INFO, "evicting %s (least recently used) to stay within capacity", hash);
        int rc = remove_locked(s, hash);
        if (rc)
            return rc;
        s->evictions++;
    }
    return 0;
}

/* ---- put ---- */

static atomic_uint tmp_seq; /* temporary file names unique within the process */

/* Write an object's bytes to a new temporary file under tmp/ (its path into
 * tmp); the open descriptor, or -errno with err set and nothing left behind. */
int store_write_tmp(struct kvfs_store *s, const char *name, const void *obj, size_t len, char tmp[4096], char *err,
                     size_t errlen)
{
    snprintf(tmp, 4096, "%s/tmp/%s.%d.%u.tmp", s->dir, name, (int)getpid(), atomic_fetch_add(&tmp_seq, 1));
    int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644), rc;
    if (fd < 0) {
        rc = -errno;
        return kvfs_errf(err, errlen, rc, "cannot create %s: %s", tmp, strerror(-rc));
    }
    if ((rc = kvfs_write_full(fd, obj, len))) {
        close(fd);
        unlink(tmp);
        return kvfs_errf(err, errlen, rc, "writing object failed: %s%s", strerror(-rc),
                         rc == -ENOSPC ? " (backing disk full)" : "");
    }
    return fd;
}

/* Make write_tmp's file durable (unless no_sync) and close it; on failure it
 * is closed and removed, and err says why. */
static int finish_tmp(struct kvfs_store *s, int fd, const char *tmp, char *err, size_t errlen)
{
    int rc = !s->opts.no_sync && fsync(fd) != 0 ? -errno : 0;
    close(fd);
    if (rc) {
        unlink(tmp);
        return kvfs_errf(err, errlen, rc, "writing object failed: %s%s", strerror(-rc),
                         rc == -ENOSPC ? " (backing disk full)" : "");
    }
    return 0;
}

static void count_ingest_error(struct kvfs_store *s)
{
    pthread_mutex_lock(&s->lock);
    s->ingest_errors++;
    pthread_mutex_unlock(&s->lock);
}

/* Move the complete, verified, synced object file `tmp` into place as `hex`
 * and index it; tmp is gone afterwards either way.  0 too when a concurrent
 * writer stored the same chunk first. */
static int commit_object(struct kvfs_store *s, const char *tmp, const char *hex, const struct kvfs_header *h,
                         size_t obj_len, char *err, size_t errlen)
{
    char dst[4096], subdir[4096];
    int rc;
    pthread_mutex_lock(&s->lock);
    if (row_get(s, hex)) {
        pthread_mutex_unlock(&s->lock);
        unlink(tmp);
        return 0;
    }
    if ((rc = store_evict_for(s, obj_len))) {
        pthread_mutex_unlock(&s->lock);
        unlink(tmp);
        return kvfs_errf(err, errlen, rc, "over capacity: %zu more bytes do not fit in %" PRIu64
                         " (only pinned chunks left to evict)", obj_len, s->opts.capacity);
    }
    object_path(s, hex, dst, sizeof(dst));
    snprintf(subdir, sizeof(subdir), "%s/objects/%.2s", s->dir, hex);
    if (mkdir(subdir, 0755) != 0 && errno != EEXIST) {
        rc = -errno;
    } else if (rename(tmp, dst) != 0) {
        rc = -errno;
    } else {
        if (!s->opts.no_sync)
            fsync_dir(subdir);
        struct kvfs_chunk_info c;
        kvfs_info_from_header(h, hex, obj_len, &c);
        c.created_ns = c.accessed_ns = store_now_ns();
        if ((rc = kvfs_idx_insert(s->db, &c)) == 0)
            rc = row_insert(s, &c);
        if (rc) {
            unlink(dst);
            kvfs_idx_delete(s->db, hex);
        } else {
            s->puts++;
        }
    }
    struct kvfs_store_remote remote = s->remote;
    pthread_mutex_unlock(&s->lock);
    if (rc) {
        unlink(tmp);
        return kvfs_errf(err, errlen, rc, "storing object failed: %s", strerror(-rc));
    }
    if (remote.stored)
        remote.stored(remote.ctx, hex);
    return 0;
}

/* Verify an image (header, checksums) and derive its name; -EINVAL when it
 * does not match expect_hash. */
static int check_image(const void *img, size_t len, const char *expect_hash, struct kvfs_header *h,
                       char hex[KVFS_HASH_HEX_LEN + 1], char *err, size_t errlen)
{
    uint8_t digest[32];
    char why[256];
    int rc;
    if ((rc = kvfs_file_verify(img, len, h, why, sizeof(why))))
        return kvfs_errf(err, errlen, rc, "invalid chunk: %s", why);
    if ((rc = kvfs_content_hash(h, digest)))
        return rc;
    kvfs_hash_to_hex(digest, hex);
    if (expect_hash && strcmp(expect_hash, hex) != 0)
        return kvfs_errf(err, errlen, -EINVAL, "name %s does not match the chunk's content hash %s", expect_hash, hex);
    return 0;
}

static int exists(struct kvfs_store *s, const char *hex)
{
    pthread_mutex_lock(&s->lock);
    int found = row_get(s, hex) != NULL;
    pthread_mutex_unlock(&s->lock);
    return found;
}

int kvfs_store_put(struct kvfs_store *s, const void *buf, size_t len, const char *expect_hash,
                   char hash_out[KVFS_HASH_HEX_LEN + 1], char *err, size_t errlen)
{
    struct kvfs_header h;
    uint8_t *obj = NULL;
    size_t obj_len = 0;
    char hex[KVFS_HASH_HEX_LEN + 1], tmp[4096];
    int rc, fd;
    if (s->opts.read_only)
        return -EROFS;
    if ((rc = check_image(buf, len, expect_hash, &h, hex, err, errlen)))
        goto count_error;
    if (hash_out)
        memcpy(hash_out, hex, sizeof(hex));
    if (exists(s, hex))
        return 0; /* content addressed: same name, same meaning */
    if ((rc = kvfs_obj_encode(buf, &h, s->opts.zstd_level, &obj, &obj_len))) {
        kvfs_errf(err, errlen, 0, "cannot encode object: %s", strerror(-rc));
        goto count_error;
    }
    if ((fd = rc = store_write_tmp(s, hex, obj, obj_len, tmp, err, errlen)) < 0 ||
        (rc = finish_tmp(s, fd, tmp, err, errlen)))
        goto count_error;
    free(obj);
    obj = NULL;
    if ((rc = commit_object(s, tmp, hex, &h, obj_len, err, errlen)))
        goto count_error;
    return 0;
count_error:
    free(obj);
    count_ingest_error(s);
    return rc;
}

/* ---- lookups ---- */

int kvfs_store_stat(struct kvfs_store *s, const char *hash, struct kvfs_chunk_info *out)
{
    pthread_mutex_lock(&s->lock);
    struct kvfs_chunk_info *c = row_get(s, hash);
    if (c) {
        *out = *c;
        out->in_ram = ram_lookup(s, hash) != NULL;
    }
    struct kvfs_store_remote r = s->remote;
    pthread_mutex_unlock(&s->lock);
    if (c)
        out->remote = r.has ? r.has(r.ctx, hash) == 1 : 0;
    return c ? 0 : -ENOENT;
}

struct remote_only_ctx {
    struct kvfs_store *s;
    kvfs_store_list_cb cb;
    void *ctx;
};

static int remote_only_cb(const struct kvfs_chunk_info *c, void *vctx)
{
    struct remote_only_ctx *r = vctx;
    pthread_mutex_lock(&r->s->lock);
    int local = row_get(r->s, c->hash) != NULL;
    pthread_mutex_unlock(&r->s->lock);
    if (local)
        return 0;
    struct kvfs_chunk_info ci = *c;
    ci.remote = ci.remote_only = 1;
    return r->cb(&ci, r->ctx);
}

int kvfs_store_list_remote_only(struct kvfs_store *s, kvfs_store_list_cb cb, void *ctx)
{
    pthread_mutex_lock(&s->lock);
    struct kvfs_store_remote r = s->remote;
    pthread_mutex_unlock(&s->lock);
    if (!r.list)
        return 0;
    struct remote_only_ctx rc = {s, cb, ctx};
    return r.list(r.ctx, remote_only_cb, &rc);
}

int kvfs_store_stat_known(struct kvfs_store *s, const char *hash, struct kvfs_chunk_info *out)
{
    int rc = kvfs_store_stat(s, hash, out);
    if (rc != -ENOENT)
        return rc;
    pthread_mutex_lock(&s->lock);
    struct kvfs_store_remote r = s->remote;
    pthread_mutex_unlock(&s->lock);
    if (!r.stat || r.stat(r.ctx, hash, out) != 0)
        return -ENOENT;
    out->remote = out->remote_only = 1;
    return 0;
}

int kvfs_store_list(struct kvfs_store *s, kvfs_store_list_cb cb, void *ctx)
{
    int rc = 0;
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->n_rows && !rc; i++)
        rc = cb(s->rows[i], ctx);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

uint64_t kvfs_store_count(struct kvfs_store *s)
{
    pthread_mutex_lock(&s->lock);
    uint64_t n = s->n_rows;
    pthread_mutex_unlock(&s->lock);
    return n;
}

/* A local miss: ask the remote tier, if any (outside the lock). */
static int fetch_remote(struct kvfs_store *s, const char *hash)
{
    pthread_mutex_lock(&s->lock);
    struct kvfs_store_remote r = s->remote;
    pthread_mutex_unlock(&s->lock);
    return r.fetch ? r.fetch(r.ctx, s, hash) : -ENOENT;
}

void kvfs_store_set_remote(struct kvfs_store *s, const struct kvfs_store_remote *r)
{
    pthread_mutex_lock(&s->lock);
    if (r)
        s->remote = *r;
    else
        memset(&s->remote, 0, sizeof(s->remote));
    pthread_mutex_unlock(&s->lock);
}

int kvfs_store_get_remote(struct kvfs_store *s, struct kvfs_store_remote *out)
{
    pthread_mutex_lock(&s->lock);
    *out = s->remote;
    pthread_mutex_unlock(&s->lock);
    return out->fetch ? 0 : -ENOENT;
}

int kvfs_store_lookup(struct kvfs_store *s, const char *hash, struct kvfs_chunk_info *out)
{
    int rc = kvfs_store_stat(s, hash, out);
    if (rc == -ENOENT && fetch_remote(s, hash) == 0)
        rc = kvfs_store_stat(s, hash, out);
    return rc;
}

int kvfs_store_hold(struct kvfs_store *s, const char *hash, int held)
{
    pthread_mutex_lock(&s->lock);
    struct kvfs_chunk_info *c = row_get(s, hash);
    if (c)
        c->held = held ? 1 : 0;
    pthread_mutex_unlock(&s->lock);
    return c ? 0 : -ENOENT;
}

/* A freshly fetched chunk's verified image goes to the RAM tier (where there
 * is one and it fits), so the read that caused the fetch does not decode the
 * stored file again.  Takes img. */
static void ram_adopt(struct kvfs_store *s, const char *hash, uint8_t *img, size_t len)
{
    struct ram_entry *e = s->opts.ram_bytes ? calloc(1, sizeof(*e)) : NULL;
    if (e) {
        memcpy(e->hash, hash, KVFS_HASH_HEX_LEN + 1);
        e->img = img;
        e->size = len;
        pthread_mutex_lock(&s->lock);
        e->stamp = ++s->ram_clock;
        if (!ram_lookup(s, hash) && row_get(s, e->hash) && ram_insert_locked(s, e)) {
            pthread_mutex_unlock(&s->lock);
            return;
        }
        pthread_mutex_unlock(&s->lock);
        free(e);
    }
    kvfs_img_free(img);
}

/* An object as another store wrote it (the remote tier's copy): it goes to
 * disk as it came, with no decode and re-encode in memory: written to a
 * temporary file, decoded and verified from there, then moved into place. */
int kvfs_store_put_object(struct kvfs_store *s, const void *obj, size_t len, const char *expect_hash, char *err,
                          size_t errlen)
{
    struct kvfs_header h;
    uint8_t *img = NULL;
    size_t img_len = 0;
    char hex[KVFS_HASH_HEX_LEN + 1], tmp[4096], why[256] = "";
    int rc, fd, counted = 1;
    if (s->opts.read_only)
        return -EROFS;
    if ((fd = rc = store_write_tmp(s, expect_hash ? expect_hash : "object", obj, len, tmp, err, errlen)) < 0)
        goto count_error;
    if ((rc = kvfs_obj_decode_file(fd, len, &img, &img_len, why, sizeof(why)))) {
        kvfs_errf(err, errlen, rc, "bad object: %s", why);
        counted = 0; /* not a chunk at all: as before, the caller counts it */
        goto drop;
    }
    if ((rc = check_image(img, img_len, expect_hash, &h, hex, err, errlen)))
        goto drop;
    if (exists(s, hex)) {
        kvfs_img_free(img);
        close(fd);
        unlink(tmp);
        return 0;
    }
    if ((rc = finish_tmp(s, fd, tmp, err, errlen)) || (rc = commit_object(s, tmp, hex, &h, len, err, errlen))) {
        kvfs_img_free(img);
        goto count_error;
    }
    ram_adopt(s, hex, img, img_len);
    return 0;
drop:
    kvfs_img_free(img);
    close(fd);
    unlink(tmp);
    if (!counted)
        return rc;
count_error:
    count_ingest_error(s);
    return rc;
}

static int store_get(struct kvfs_store *s, const char *hash, struct kvfs_chunk_ref **out, int may_fetch);

int kvfs_store_get(struct kvfs_store *s, const char *hash, struct kvfs_chunk_ref **out)
{
    return store_get(s, hash, out, 1);
}

static int store_get(struct kvfs_store *s, const char *hash, struct kvfs_chunk_ref **out, int may_fetch)
{
    struct kvfs_chunk_ref *ref = calloc(1, sizeof(*ref));
    if (!ref)
        return -ENOMEM;
    ref->s = s;
    pthread_mutex_lock(&s->lock);
    struct kvfs_chunk_info *c = row_get(s, hash);
    if (!c) {
        s->misses++;
        pthread_mutex_unlock(&s->lock);
        free(ref);
        if (may_fetch && fetch_remote(s, hash) == 0)
            return store_get(s, hash, out, 0);
        return -ENOENT;
    }
    s->hits++;
    c->hits++;
    c->accessed_ns = store_now_ns();
    kvfs_idx_touch(s->db, hash, c->accessed_ns, c->hits);
    struct ram_entry *e = ram_lookup(s, hash);
    if (e) {
        ram_hit_locked(s, e);
        pthread_mutex_unlock(&s->lock);
        ref->e = e;
        *out = ref;
        return 0;
    }
    pthread_mutex_unlock(&s->lock);

    /* decode outside the lock */
    char p[4096], why[256] = "";
    object_path(s, hash, p, sizeof(p));
    int rc = store_decode_entry(p, hash, &e, why, sizeof(why));
    if (rc) {
        if (rc != -ENOMEM)
            kvfs_log(KVFS_LOG_ERR, "chunk %s: object unreadable: %s", hash, why);
        free(ref);
        return rc == -ENOENT || rc == -ENOMEM ? rc : -EIO;
    }
    pthread_mutex_lock(&s->lock);
    ref->e = ram_adopt_decoded_locked(s, e, row_get(s, hash) != NULL);
    pthread_mutex_unlock(&s->lock);
    *out = ref;
    return 0;
}

static int open_stream(struct kvfs_store *s, const char *hash, struct kvfs_chunk_ref **ram_ref, int *fd,
                       int may_fetch);

int store_decode_entry(const char *path, const char *name, struct ram_entry **out, char *why, size_t whylen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW), rc; /* a symlink planted in the store is not followed */
    struct stat st;
    uint8_t *img = NULL;
    size_t len = 0;
    if (fd < 0) {
        rc = -errno;
        snprintf(why, whylen, "%s", strerror(-rc));
        return rc;
    }
    rc = fstat(fd, &st) ? -errno : kvfs_obj_decode_file(fd, (uint64_t)st.st_size, &img, &len, why, whylen);
    close(fd);
    if (rc)
        return rc;
    struct ram_entry *e = calloc(1, sizeof(*e));
    if (!e) {
        kvfs_img_free(img);
        return -ENOMEM;
    }
    snprintf(e->hash, sizeof(e->hash), "%s", name);
    e->img = img;
    e->size = len;
    e->refs = 1;
    *out = e;
    return 0;
}

int kvfs_store_open_stream(struct kvfs_store *s, const char *hash, struct kvfs_chunk_ref **ram_ref, int *fd)
{
    return open_stream(s, hash, ram_ref, fd, 1);
}

int kvfs_store_open_stream_local(struct kvfs_store *s, const char *hash, struct kvfs_chunk_ref **ram_ref, int *fd)
{
    return open_stream(s, hash, ram_ref, fd, 0);
}

static int open_stream(struct kvfs_store *s, const char *hash, struct kvfs_chunk_ref **ram_ref, int *fd,
                       int may_fetch)
{
    *ram_ref = NULL;
    *fd = -1;
    pthread_mutex_lock(&s->lock);
    struct kvfs_chunk_info *c = row_get(s, hash);
    if (!c) {
        s->misses++;
        pthread_mutex_unlock(&s->lock);
        /* only on the remote tier: fetched into the local tiers first */
        if (may_fetch && fetch_remote(s, hash) == 0) {
            pthread_mutex_lock(&s->lock);
            c = row_get(s, hash);
            if (!c) {
                pthread_mutex_unlock(&s->lock);
                return -ENOENT;
            }
        } else {
            return -ENOENT;
        }
    }
    s->hits++;
    c->hits++;
    c->accessed_ns = store_now_ns();
    kvfs_idx_touch(s->db, hash, c->accessed_ns, c->hits);
    struct ram_entry *e = ram_lookup(s, hash);
    int rc = 0;
    if (e) {
        struct kvfs_chunk_ref *ref = calloc(1, sizeof(*ref));
        if (!ref) {
            rc = -ENOMEM;
        } else {
            ram_hit_locked(s, e);
            ref->s = s;
            ref->e = e;
            *ram_ref = ref;
        }
    } else {
        /* opened under the lock: eviction and rm unlink under it too, and an
         * open descriptor keeps the object readable after that */
        char p[4096];
        object_path(s, hash, p, sizeof(p));
        *fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (*fd < 0)
            rc = -errno;
    }
    pthread_mutex_unlock(&s->lock);
    if (rc)
        kvfs_log(KVFS_LOG_ERR, "chunk %s: cannot open for streaming: %s", hash, strerror(-rc));
    return rc;
}

ssize_t kvfs_chunk_pread(struct kvfs_chunk_ref *ref, void *dst, size_t len, uint64_t off)
{
    if (off >= ref->e->size)
        return 0;
    if (len > ref->e->size - off)
        len = ref->e->size - off;
    memcpy(dst, ref->e->img + off, len);
    return (ssize_t)len;
}

uint64_t kvfs_chunk_size(const struct kvfs_chunk_ref *ref) { return ref->e->size; }

const void *kvfs_chunk_data(struct kvfs_chunk_ref *ref) { return ref->e->img; }

void kvfs_chunk_release(struct kvfs_chunk_ref *ref)
{
    if (!ref)
        return;
    struct kvfs_store *s = ref->s;
    pthread_mutex_lock(&s->lock);
    struct ram_entry *e = ref->e;
    int free_it = --e->refs == 0 && !e->cached;
    pthread_mutex_unlock(&s->lock);
    if (free_it) {
        kvfs_img_free(e->img);
        free(e);
    }
    free(ref);
}

const char *kvfs_chunk_key(const struct kvfs_chunk_ref *ref) { return ref->e->hash; }

struct kvfs_chunk_ref *kvfs_chunk_ref_dup(struct kvfs_chunk_ref *ref)
{
    struct kvfs_chunk_ref *d = calloc(1, sizeof(*d));
    if (!d)
        return NULL;
    *d = *ref;
    pthread_mutex_lock(&ref->s->lock);
    ref->e->refs++;
    pthread_mutex_unlock(&ref->s->lock);
    return d;
}

int kvfs_store_remove(struct kvfs_store *s, const char *hash)
{
    if (s->opts.read_only)
        return -EROFS;
    pthread_mutex_lock(&s->lock);
    int rc = row_get(s, hash) ? remove_locked(s, hash) : -ENOENT;
    if (!rc)
        s->removals++;
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int kvfs_store_set_pinned(struct kvfs_store *s, const char *hash, int pinned)
{
    if (s->opts.read_only)
        return -EROFS;
    pthread_mutex_lock(&s->lock);
    struct kvfs_chunk_info *c = row_get(s, hash);
    int rc = -ENOENT;
    if (c && (rc = kvfs_idx_set_pinned(s->db, hash, pinned)) == 0)
        c->pinned = pinned ? 1 : 0;
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int kvfs_store_read_layer(struct kvfs_store *s, const char *hash, uint32_t layer, void *dst, size_t len)
{
    char p[4096];
    int rc = kvfs_store_object_path(s, hash, p, sizeof(p));
    if (rc)
        return rc;
    int fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -errno;
    struct stat st;
    struct kvfs_obj_info info;
    struct kvfs_header h;
    uint8_t *hb = NULL;
    char why[256];
    if (fstat(fd, &st) != 0) {
        rc = -errno;
        goto close_fd;
    }
    if ((rc = kvfs_obj_read_prefix(fd, (uint64_t)st.st_size, &info, &hb, &h, why, sizeof(why))))
        goto close_fd;
    if (len < kvfs_layer_bytes(&h))
        rc = -ERANGE;
    else
        rc = kvfs_obj_read_layer(fd, &info, &h, layer, dst);
    kvfs_obj_info_free(&info);
    free(hb);
close_fd:
    close(fd);
    return rc;
}

int kvfs_store_stats_json(struct kvfs_store *s, char **out)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return -ENOMEM;
    pthread_mutex_lock(&s->lock);
    uint64_t pinned = 0;
    for (size_t i = 0; i < s->n_rows; i++)
        pinned += s->rows[i]->pinned != 0;
    fprintf(f,
            "{\n  \"chunks\": %zu,\n  \"pinned\": %" PRIu64 ",\n  \"bytes_logical\": %" PRIu64
            ",\n  \"bytes_stored\": %" PRIu64 ",\n  \"capacity\": %" PRIu64 ",\n  \"hits\": %" PRIu64
            ",\n  \"misses\": %" PRIu64 ",\n  \"evictions\": %" PRIu64 ",\n  \"removals\": %" PRIu64
            ",\n  \"ingested\": %" PRIu64 ",\n  \"ingest_errors\": %" PRIu64 ",\n  \"zstd_level\": %d,\n"
            "  \"tiers\": {\n    \"ram\": {\"chunks\": %zu, \"bytes\": %" PRIu64 ", \"capacity\": %" PRIu64
            ", \"hits\": %" PRIu64 "},\n    \"disk\": {\"chunks\": %zu, \"bytes\": %" PRIu64
            ", \"capacity\": %" PRIu64 "}\n  }",
            s->n_rows, pinned, s->bytes_logical, s->bytes_stored, s->opts.capacity, s->hits, s->misses,
            s->evictions, s->removals, s->puts, s->ingest_errors, s->opts.zstd_level, s->ram_count,
            s->ram_used, s->opts.ram_bytes, s->ram_hits, s->n_rows, s->bytes_stored, s->opts.capacity);
    results_stats_locked(s, f);
    size_t n_extra = s->n_extra;
    pthread_mutex_unlock(&s->lock);
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
