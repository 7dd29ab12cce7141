/* fsck.c - check a store's objects against its index and checksums, and
 * rebuild the index from the objects alone. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "image.h"
#include "index_db.h"
#include "object.h"
#include "store.h"
#include "chunk_info.h"

struct fsck_state {
    kvfs_fsck_report report;
    void *ctx;
    struct kvfs_chunk_info *rows; /* from the index, sorted by hash */
    size_t n_rows, cap;
    uint8_t *seen;
    unsigned problems;
    int rebuild;
    const char *dir;
    struct kvfs_index_db *newdb;
};

static void say(struct fsck_state *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(struct fsck_state *st, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (st->report)
        st->report(st->ctx, line);
}

static int collect(const struct kvfs_chunk_info *c, void *ctx)
{
    struct fsck_state *st = ctx;
    if (st->n_rows == st->cap) {
        size_t cap = st->cap ? st->cap * 2 : 256;
        struct kvfs_chunk_info *r = realloc(st->rows, cap * sizeof(*r));
        if (!r)
            return -ENOMEM;
        st->rows = r;
        st->cap = cap;
    }
    st->rows[st->n_rows++] = *c;
    return 0;
}

static struct kvfs_chunk_info *find_row(struct fsck_state *st, const char *hash, size_t *idx)
{
    size_t lo = 0, hi = st->n_rows;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(st->rows[mid].hash, hash);
        if (!c) {
            *idx = mid;
            return &st->rows[mid];
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static void quarantine(struct fsck_state *st, const char *path, const char *name)
{
    char lf[4096];
    snprintf(lf, sizeof(lf), "%s/lost+found", st->dir);
    mkdir(lf, 0700);
    snprintf(lf, sizeof(lf), "%s/lost+found/%s", st->dir, name);
    if (rename(path, lf) == 0)
        say(st, "moved %s to lost+found", name);
}

static void check_object(struct fsck_state *st, const char *path, const char *name)
{
    char hash[KVFS_HASH_HEX_LEN + 1], why[256] = "", hex[KVFS_HASH_HEX_LEN + 1];
    memcpy(hash, name, KVFS_HASH_HEX_LEN);
    hash[KVFS_HASH_HEX_LEN] = '\0';
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat sb;
    uint8_t *img = NULL, digest[32];
    size_t len = 0;
    struct kvfs_header h;
    int rc = fd < 0 ? -errno : fstat(fd, &sb) ? -errno : 0;
    if (!rc)
        rc = kvfs_obj_decode_file(fd, (uint64_t)sb.st_size, &img, &len, why, sizeof(why));
    if (fd >= 0)
        close(fd);
    if (!rc && (rc = kvfs_file_verify(img, len, &h, why, sizeof(why))) == 0) {
        kvfs_content_hash(&h, digest);
        kvfs_hash_to_hex(digest, hex);
        if (strcmp(hex, hash)) {
            rc = -EINVAL;
            snprintf(why, sizeof(why), "content hash is %s", hex);
        }
    }
    size_t idx = 0;
    struct kvfs_chunk_info *row = find_row(st, hash, &idx);
    if (row)
        st->seen[idx] = 1;
    if (rc) {
        st->problems++;
        say(st, "BAD object %s: %s", hash, why[0] ? why : strerror(-rc));
        if (st->rebuild)
            quarantine(st, path, name);
        kvfs_img_free(img);
        return;
    }
    struct kvfs_chunk_info c;
    kvfs_info_from_header(&h, hash, (uint64_t)sb.st_size, &c);
    if (!row) {
        if (!st->rebuild) {
            st->problems++;
            say(st, "ORPHAN object %s is not in the index", hash);
        }
        c.created_ns = c.accessed_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
    } else {
        if (row->logical_size != c.logical_size || row->stored_size != c.stored_size ||
            row->n_tokens != c.n_tokens || strcmp(row->model, c.model)) {
            st->problems += !st->rebuild;
            say(st, "MISMATCH index row for %s disagrees with its object", hash);
        }
        c.created_ns = row->created_ns;
        c.accessed_ns = row->accessed_ns;
        c.hits = row->hits;
        c.pinned = row->pinned; /* usage data survives a rebuild when readable */
    }
    if (st->newdb && kvfs_idx_insert(st->newdb, &c) != 0) {
        st->problems++;
        say(st, "cannot index %s in the rebuilt index", hash);
    }
    kvfs_img_free(img);
}

/* temp files: unfinished ingests */
static void check_temp_files(struct fsck_state *st)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/tmp", st->dir);
    DIR *d = opendir(path);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        char p[4096 + 256];
        snprintf(p, sizeof(p), "%s/%s", path, de->d_name);
        if (st->rebuild) {
            unlink(p);
            say(st, "removed unfinished ingest %s", de->d_name);
        } else {
            st->problems++;
            say(st, "TEMP unfinished ingest %s (removed at next mount or --rebuild)", de->d_name);
        }
    }
    if (d)
        closedir(d);
}

/* objects/XX/NAME: an object named by its hash is checked, anything else
 * is a stray; 1 if it was an object */
static int check_entry(struct fsck_state *st, const char *sub, const char *xx, const char *name)
{
    char p[4096 + 512];
    snprintf(p, sizeof(p), "%s/%s", sub, name);
    size_t nl = strlen(name);
    uint8_t dg[32];
    char hh[KVFS_HASH_HEX_LEN + 1];
    int named = nl == KVFS_HASH_HEX_LEN + 4 && !strcmp(name + KVFS_HASH_HEX_LEN, ".kvo");
    if (named) {
        memcpy(hh, name, KVFS_HASH_HEX_LEN);
        hh[KVFS_HASH_HEX_LEN] = '\0';
        named = kvfs_hex_to_hash(hh, dg) == 0 && !strncmp(hh, xx, 2);
    }
    if (!named) {
        st->problems++;
        say(st, "STRAY file objects/%s/%s", xx, name);
        if (st->rebuild)
            quarantine(st, p, name);
        return 0;
    }
    check_object(st, p, name);
    return 1;
}

/* every object; returns how many were checked */
static size_t check_objects(struct fsck_state *st)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/objects", st->dir);
    DIR *top = opendir(path);
    struct dirent *de;
    size_t checked = 0;
    while (top && (de = readdir(top))) {
        if (de->d_name[0] == '.')
            continue;
        char sub[4096 + 256];
        snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name);
        DIR *sd = opendir(sub);
        struct dirent *oe;
        while (sd && (oe = readdir(sd))) {
            if (oe->d_name[0] == '.' || !check_entry(st, sub, de->d_name, oe->d_name))
                continue;
            if (++checked % 1000 == 0)
                say(st, "checked %zu objects", checked);
        }
        if (sd)
            closedir(sd);
    }
    if (top)
        closedir(top);
    return checked;
}

/* The rebuilt index replaces the old one (and the old one's WAL). */
static int install_rebuilt(struct fsck_state *st, size_t checked)
{
    char oldp[4096], newp[4096];
    snprintf(newp, sizeof(newp), "%s/index.sqlite.rebuild", st->dir);
    snprintf(oldp, sizeof(oldp), "%s/index.sqlite", st->dir);
    /* drop the old WAL first: it belongs to the old database */
    char w[4096 + 8];
    snprintf(w, sizeof(w), "%s-wal", oldp);
    unlink(w);
    snprintf(w, sizeof(w), "%s-shm", oldp);
    unlink(w);
    if (rename(newp, oldp) != 0) {
        int rc = -errno;
        say(st, "cannot install rebuilt index: %s", strerror(-rc));
        return rc;
    }
    say(st, "index rebuilt from %zu objects", checked);
    return 0;
}

int kvfs_store_fsck(const char *dir, int rebuild, kvfs_fsck_report report, void *ctx)
{
    struct fsck_state st = {.report = report, .ctx = ctx, .rebuild = rebuild, .dir = dir};
    char path[4096], why[256];
    struct kvfs_index_db *db = NULL;
    int rc;
    snprintf(path, sizeof(path), "%s/index.sqlite", dir);
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        say(&st, "%s: not a directory", dir);
        return -ENOTDIR;
    }
    if (access(path, F_OK) == 0 && kvfs_idx_open(path, 1, &db, why, sizeof(why)) == 0) {
        if ((rc = kvfs_idx_load(db, collect, &st)) != 0) {
            say(&st, "index unreadable: %s", strerror(-rc));
            st.problems++;
            st.n_rows = 0;
        }
        kvfs_idx_close(db);
    } else {
        say(&st, "index %s missing or unreadable", path);
        st.problems++;
    }
    st.seen = calloc(st.n_rows + 1, 1);
    if (!st.seen) {
        free(st.rows);
        return -ENOMEM;
    }
    if (rebuild) {
        char newp[4096];
        snprintf(newp, sizeof(newp), "%s/index.sqlite.rebuild", dir);
        unlink(newp);
        if ((rc = kvfs_idx_open(newp, 0, &st.newdb, why, sizeof(why)))) {
            say(&st, "cannot create %s: %s", newp, why);
            free(st.seen);
            free(st.rows);
            return rc;
        }
    }
    check_temp_files(&st);
    size_t checked = check_objects(&st);
    for (size_t i = 0; i < st.n_rows; i++) {
        if (!st.seen[i]) {
            st.problems += !rebuild;
            say(&st, "MISSING object for indexed chunk %s", st.rows[i].hash);
        }
    }
    rc = 0;
    if (rebuild) {
        kvfs_idx_close(st.newdb);
        rc = install_rebuilt(&st, checked);
    }
    say(&st, "%zu objects checked, %zu indexed, %u problem%s", checked, st.n_rows, st.problems,
        st.problems == 1 ? "" : "s");
    free(st.seen);
    free(st.rows);
    if (rc)
        return rc;
    return (!rebuild && st.problems) ? -EUCLEAN : 0;
}
