/* store_put.c - ingest: a chunk image (kvfs_store_put) or a store object as
 * another store wrote it (kvfs_store_put_object, the remote tier's copy) is
 * verified, written to a temporary file, made durable, moved into place
 * and indexed; capacity is made first by eviction. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "image.h"
#include "index_db.h"
#include "object.h"
#include "store_internal.h"

static int fsync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd) ? -errno : 0;
    close(fd);
    return rc;
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
    if (chunk_rows_get(&s->rows, hex)) {
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
    store_object_path(s, hex, dst, sizeof(dst));
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
            rc = chunk_rows_insert(&s->rows, &c);
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

int kvfs_store_put(struct kvfs_store *s, const void *buf, size_t len, const char *expect_hash,
                   char hash_out[KVFS_HASH_HEX_LEN + 1], char *err, size_t errlen)
{
    struct kvfs_header h;
    struct kvfs_obj_parts obj = {0};
    char hex[KVFS_HASH_HEX_LEN + 1], tmp[4096];
    int rc, fd;
    if (s->opts.read_only)
        return -EROFS;
    if ((rc = check_image(buf, len, expect_hash, &h, hex, err, errlen)))
        goto count_error;
    if (hash_out)
        memcpy(hash_out, hex, sizeof(hex));
    if (store_has_chunk(s, hex))
        return 0; /* content addressed: same name, same meaning */
    if ((rc = kvfs_obj_encode_parts(buf, &h, s->opts.zstd_level, &obj))) {
        kvfs_errf(err, errlen, 0, "cannot encode object: %s", strerror(-rc));
        goto count_error;
    }
    if ((fd = rc = store_write_tmp_iov(s, hex, obj.iov, obj.n, tmp, err, errlen)) < 0 ||
        (rc = finish_tmp(s, fd, tmp, err, errlen)))
        goto count_error;
    size_t obj_len = obj.len;
    kvfs_obj_parts_free(&obj);
    if ((rc = commit_object(s, tmp, hex, &h, obj_len, err, errlen)))
        goto count_error;
    return 0;
count_error:
    kvfs_obj_parts_free(&obj);
    count_ingest_error(s);
    return rc;
}

/* A freshly fetched chunk's verified image goes to the RAM tier (where there
 * is one and it fits), so the read that caused the fetch does not decode the
 * stored file again.  Takes img. */
static void ram_adopt(struct kvfs_store *s, const char *hash, uint8_t *img, size_t len)
{
    struct ram_entry *e = s->ram.capacity ? ram_entry_new(hash, img, len, 0) : NULL;
    if (e) {
        pthread_mutex_lock(&s->lock);
        e->stamp = ++s->ram.clock;
        if (!ram_lookup(&s->ram, hash) && chunk_rows_get(&s->rows, e->hash) && ram_insert(&s->ram, e)) {
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
    if (store_has_chunk(s, hex)) {
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
