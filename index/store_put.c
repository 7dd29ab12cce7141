/* store_put.c - ingest: a chunk image (kvfs_store_put) or a store object as
 * another store wrote it (kvfs_store_put_object, the remote tier's copy) is
 * verified, written to a temporary file, made durable, moved into place
 * and indexed; capacity is made first by eviction. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
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

/* KVFS_FETCH_PROFILE: where a fetched chunk's commit spends its time */
static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void store_count_ingest_error(struct kvfs_store *s)
{
    pthread_mutex_lock(&s->lock);
    s->ingest_errors++;
    pthread_mutex_unlock(&s->lock);
}

/* Move the complete, verified, synced object file `tmp` into place as `hex`
 * and index it; tmp is gone afterwards either way.  0 when stored, 1 when a
 * concurrent writer stored the same chunk first.  On 0 the caller tells the
 * remote tier (store_notify_stored). */
static int commit_object(struct kvfs_store *s, const char *tmp, const char *hex, const struct kvfs_header *h,
                         size_t obj_len, char *err, size_t errlen)
{
    char dst[4096], subdir[4096];
    int rc;
    double t_ask = mono_s();
    pthread_mutex_lock(&s->lock);
    double t_locked = mono_s(), t_renamed = t_locked, t_dir_synced = t_locked;
    if (chunk_rows_get(&s->rows, hex)) {
        pthread_mutex_unlock(&s->lock);
        unlink(tmp);
        return 1;
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
        t_renamed = mono_s();
        if (!s->opts.no_sync)
            fsync_dir(subdir);
        t_dir_synced = mono_s();
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
    pthread_mutex_unlock(&s->lock);
    if (getenv("KVFS_FETCH_PROFILE"))
        fprintf(stderr, "kvfs: commit %.12s: store lock awaited %.4f s, eviction + rename %.4f, directory fsync %.4f, "
                "index row %.4f\n", hex, t_locked - t_ask, t_renamed - t_locked, t_dir_synced - t_renamed,
                mono_s() - t_dir_synced);
    if (rc) {
        unlink(tmp);
        return kvfs_errf(err, errlen, rc, "storing object failed: %s", strerror(-rc));
    }
    return 0;
}

/* Verify an image (header, checksums) and derive its name; -EINVAL when it
 * does not match expect_hash.  layers_checked: the caller checked every
 * layer against the header's checksums and zeroed the padding (a fetch, as
 * each layer arrived), so only the header is checked here. */
static int check_image_as(const void *img, size_t len, const char *expect_hash, int layers_checked,
                          struct kvfs_header *h, char hex[KVFS_HASH_HEX_LEN + 1], char *err, size_t errlen)
{
    uint8_t digest[32];
    char why[256];
    int rc = layers_checked ? kvfs_header_parse(img, len, h, why, sizeof(why)) : kvfs_file_verify(img, len, h, why, sizeof(why));
    if (!rc && layers_checked && len != h->file_size)
        rc = kvfs_errf(why, sizeof(why), -EINVAL, "%zu bytes, header says %llu", len, (unsigned long long)h->file_size);
    if (rc)
        return kvfs_errf(err, errlen, rc, "invalid chunk: %s", why);
    if ((rc = kvfs_content_hash(h, digest)))
        return rc;
    kvfs_hash_to_hex(digest, hex);
    if (expect_hash && strcmp(expect_hash, hex) != 0)
        return kvfs_errf(err, errlen, -EINVAL, "name %s does not match the chunk's content hash %s", expect_hash, hex);
    return 0;
}

static int check_image(const void *img, size_t len, const char *expect_hash, struct kvfs_header *h,
                       char hex[KVFS_HASH_HEX_LEN + 1], char *err, size_t errlen)
{
    return check_image_as(img, len, expect_hash, 0, h, hex, err, errlen);
}

int store_check_image(const void *img, size_t len, struct kvfs_header *h, char hex[KVFS_HASH_HEX_LEN + 1], char *err,
                      size_t errlen)
{
    return check_image(img, len, NULL, h, hex, err, errlen);
}

void store_notify_stored(struct kvfs_store *s, const char *hex)
{
    struct kvfs_store_remote remote = store_remote_hooks(s);
    if (remote.stored)
        remote.stored(remote.ctx, hex);
}

/* KVFS_INGEST_PROFILE: where a put spends its time */
static int put_profile(void)
{
    static atomic_int on = -1; /* puts run on many threads */
    int v = atomic_load_explicit(&on, memory_order_relaxed);
    if (v < 0)
        atomic_store_explicit(&on, v = getenv("KVFS_INGEST_PROFILE") != NULL, memory_order_relaxed);
    return v;
}

int store_put_verified(struct kvfs_store *s, const void *buf, const struct kvfs_header *h, const char *hex,
                       char *err, size_t errlen)
{
    struct kvfs_obj_parts obj = {0};
    char tmp[4096];
    int rc, fd, prof = put_profile();
    double t0 = prof ? mono_s() : 0, t1 = t0, t2 = t0, t3 = t0;
    if ((rc = kvfs_obj_encode_parts(buf, h, s->opts.zstd_level, &obj))) {
        kvfs_errf(err, errlen, 0, "cannot encode object: %s", strerror(-rc));
        goto count_error;
    }
    t1 = prof ? mono_s() : 0;
    if ((fd = rc = store_write_tmp_iov(s, hex, obj.iov, obj.n, tmp, err, errlen)) < 0)
        goto count_error;
    t2 = prof ? mono_s() : 0;
    if ((rc = finish_tmp(s, fd, tmp, err, errlen)))
        goto count_error;
    t3 = prof ? mono_s() : 0;
    size_t obj_len = obj.len;
    kvfs_obj_parts_free(&obj);
    if ((rc = commit_object(s, tmp, hex, h, obj_len, err, errlen)) < 0)
        goto count_error;
    if (prof)
        fprintf(stderr, "kvfs: put %.12s: encode %.4f s, write %.4f, fsync %.4f, commit %.4f\n", hex, t1 - t0,
                t2 - t1, t3 - t2, mono_s() - t3);
    return rc;
count_error:
    kvfs_obj_parts_free(&obj);
    store_count_ingest_error(s);
    return rc;
}

int kvfs_store_put(struct kvfs_store *s, const void *buf, size_t len, const char *expect_hash,
                   char hash_out[KVFS_HASH_HEX_LEN + 1], char *err, size_t errlen)
{
    struct kvfs_header h;
    char hex[KVFS_HASH_HEX_LEN + 1];
    int rc;
    if (s->opts.read_only)
        return -EROFS;
    double t0 = put_profile() ? mono_s() : 0;
    if ((rc = check_image(buf, len, expect_hash, &h, hex, err, errlen))) {
        store_count_ingest_error(s);
        return rc;
    }
    if (put_profile())
        fprintf(stderr, "kvfs: put %.12s: verify + hash %.4f s\n", hex, mono_s() - t0);
    if (hash_out)
        memcpy(hash_out, hex, sizeof(hex));
    if (store_has_chunk(s, hex)) /* (after any queued write of it: store_settle) */
        return 0; /* content addressed: same name, same meaning */
    if ((rc = store_put_verified(s, buf, &h, hex, err, errlen)) == 0)
        store_notify_stored(s, hex);
    return rc < 0 ? rc : 0;
}

int kvfs_store_put_keep(struct kvfs_store *s, uint8_t **img, size_t len, char hash_out[KVFS_HASH_HEX_LEN + 1],
                        char *err, size_t errlen)
{
    char hex[KVFS_HASH_HEX_LEN + 1];
    int rc = kvfs_store_put(s, *img, len, NULL, hex, err, errlen);
    if (rc)
        return rc;
    if (hash_out)
        memcpy(hash_out, hex, sizeof(hex));
    store_ram_adopt(s, hex, *img, len); /* verified and stored: the RAM tier's to keep or free */
    *img = NULL;
    return 0;
}

/* A freshly fetched chunk's verified image goes to the RAM tier (where there
 * is one and it fits), so the read that caused the fetch does not decode the
 * stored file again.  Takes img. */
void store_ram_adopt(struct kvfs_store *s, const char *hash, uint8_t *img, size_t len)
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

/* An image handed to the reader that caused its fetch: kept in the RAM tier
 * where it fits (as kvfs_store_get would), else the reader's alone.  Takes
 * img; NULL on ENOMEM (the reader then decodes the stored file). */
static struct kvfs_chunk_ref *ref_adopt(struct kvfs_store *s, const char *hash, uint8_t *img, size_t len)
{
    struct kvfs_chunk_ref *ref = store_new_ref(s, NULL);
    struct ram_entry *e = ref ? ram_entry_new(hash, img, len, 1) : NULL;
    if (!e) {
        free(ref);
        kvfs_img_free(img);
        return NULL;
    }
    pthread_mutex_lock(&s->lock);
    ref->e = ram_adopt_decoded(&s->ram, e, chunk_rows_get(&s->rows, hash) != NULL);
    pthread_mutex_unlock(&s->lock);
    return ref;
}

int kvfs_store_incoming_open(struct kvfs_store *s, const char *hash, struct kvfs_store_incoming *in, char *err,
                             size_t errlen)
{
    in->s = s;
    in->fd = -1;
    if (s->opts.read_only)
        return kvfs_errf(err, errlen, -EROFS, "the store is read-only");
    int fd = store_write_tmp(s, hash ? hash : "object", NULL, 0, in->tmp, err, errlen);
    if (fd < 0) {
        store_count_ingest_error(s);
        return fd;
    }
    in->fd = fd;
    return 0;
}

int kvfs_store_incoming_writev(struct kvfs_store_incoming *in, const struct iovec *iov, int n, uint64_t off,
                               char *err, size_t errlen)
{
    struct iovec left[KVFS_INCOMING_MAX_IOV], *v = left;
    size_t total = 0;
    if (n < 0 || n > KVFS_INCOMING_MAX_IOV)
        return kvfs_errf(err, errlen, -EINVAL, "writing object failed: %d pieces at once", n);
    memcpy(left, iov, sizeof(*iov) * (size_t)n);
    for (int i = 0; i < n; i++)
        total += iov[i].iov_len;
    for (size_t done = 0; done < total;) {
        ssize_t w = pwritev(in->fd, v, n, (off_t)(off + done));
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int rc = w < 0 ? -errno : -EIO;
            return kvfs_errf(err, errlen, rc, "writing object failed: %s%s", strerror(-rc),
                             rc == -ENOSPC ? " (backing disk full)" : "");
        }
        done += (size_t)w;
        /* a short write: skip what went, resume in the piece it stopped in */
        for (size_t k = (size_t)w; k;) {
            size_t step = k < v->iov_len ? k : v->iov_len;
            v->iov_base = (char *)v->iov_base + step;
            v->iov_len -= step;
            k -= step;
            if (!v->iov_len) {
                v++;
                n--;
            }
        }
    }
#ifdef SYNC_FILE_RANGE_WRITE
    /* start the write-back now: finish's fsync then waits for less */
    if (!in->s->opts.no_sync)
        sync_file_range(in->fd, (off_t)off, (off_t)total, SYNC_FILE_RANGE_WRITE);
#endif
    return 0;
}

int kvfs_store_incoming_write(struct kvfs_store_incoming *in, const void *buf, size_t len, uint64_t off, char *err,
                              size_t errlen)
{
    struct iovec one = {.iov_base = (void *)buf, .iov_len = len};
    return kvfs_store_incoming_writev(in, &one, 1, off, err, errlen);
}

void kvfs_store_incoming_abort(struct kvfs_store_incoming *in)
{
    if (in->fd < 0)
        return;
    close(in->fd);
    unlink(in->tmp);
    in->fd = -1;
}

/* The object as it came goes to disk with no decode and re-encode in
 * memory: decoded and verified from the temporary file, then moved into
 * place. */
static int finish(struct kvfs_store_incoming *in, uint64_t len, const char *expect_hash, uint8_t *img,
                  size_t img_len, struct kvfs_chunk_ref **ref, char *err, size_t errlen)
{
    struct kvfs_store *s = in->s;
    struct kvfs_header h;
    char hex[KVFS_HASH_HEX_LEN + 1], why[256] = "";
    int rc, fd = in->fd, counted = 1, layers_checked = img != NULL;
    if (ref)
        *ref = NULL;
    in->fd = -1;
    if (!img && (rc = kvfs_obj_decode_file(fd, len, &img, &img_len, why, sizeof(why)))) {
        kvfs_errf(err, errlen, rc, "bad object: %s", why);
        counted = 0; /* not a chunk at all: as before, the caller counts it */
        goto drop;
    }
    if ((rc = check_image_as(img, img_len, expect_hash, layers_checked, &h, hex, err, errlen)))
        goto drop;
    if (store_has_chunk(s, hex)) {
        close(fd);
        unlink(in->tmp);
        goto adopt;
    }
    double t_sync = mono_s();
    rc = finish_tmp(s, fd, in->tmp, err, errlen);
    if (getenv("KVFS_FETCH_PROFILE"))
        fprintf(stderr, "kvfs: commit %.12s: file fsync %.4f s\n", hex, mono_s() - t_sync);
    if (rc || (rc = commit_object(s, in->tmp, hex, &h, len, err, errlen)) < 0) {
        kvfs_img_free(img);
        goto count_error;
    }
    if (rc == 0)
        store_notify_stored(s, hex);
adopt:
    if (ref)
        *ref = ref_adopt(s, hex, img, img_len);
    else
        store_ram_adopt(s, hex, img, img_len);
    return 0;
drop:
    kvfs_img_free(img);
    close(fd);
    unlink(in->tmp);
    if (!counted)
        return rc;
count_error:
    store_count_ingest_error(s);
    return rc;
}

int kvfs_store_incoming_finish(struct kvfs_store_incoming *in, uint64_t len, const char *expect_hash,
                               struct kvfs_chunk_ref **ref, char *err, size_t errlen)
{
    return finish(in, len, expect_hash, NULL, 0, ref, err, errlen);
}

int kvfs_store_incoming_finish_image(struct kvfs_store_incoming *in, uint64_t len, const char *expect_hash,
                                     uint8_t *img, size_t img_len, struct kvfs_chunk_ref **ref, char *err,
                                     size_t errlen)
{
    return finish(in, len, expect_hash, img, img_len, ref, err, errlen);
}

int kvfs_store_put_object(struct kvfs_store *s, const void *obj, size_t len, const char *expect_hash, char *err,
                          size_t errlen)
{
    struct kvfs_store_incoming in;
    int rc = kvfs_store_incoming_open(s, expect_hash, &in, err, errlen);
    if (rc)
        return rc;
    if ((rc = kvfs_store_incoming_write(&in, obj, len, 0, err, errlen))) {
        kvfs_store_incoming_abort(&in);
        store_count_ingest_error(s);
        return rc;
    }
    return kvfs_store_incoming_finish(&in, len, expect_hash, NULL, err, errlen);
}
