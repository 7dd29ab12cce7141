/* store_results.c - blend results in the store's tiers (store.h, "Blend
 * results"): kvfs_store_put_result / get / remove / pin / has.
 *
 * A result is derived data: it can always be blended again from its recipe.
 * So its object is written without fsync, kept in a flat DIR/results/ with no
 * index row (result_table.h), and the directory is emptied when the store
 * opens.  Its bytes count within capacity together with the chunks (eviction
 * takes the least recently used of either, store.c) and within
 * result_capacity on their own.  Locking: s->lock, like the rest of the
 * store. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "image.h"
#include "object.h"
#include "store_internal.h"

static int valid_key(const char *key)
{
    uint8_t d[32];
    return key && strlen(key) == KVFS_HASH_HEX_LEN && kvfs_hex_to_hash(key, d) == 0;
}

/* Room on disk for `need` result bytes: older results first within
 * result_capacity, then chunks or results within capacity. */
static int make_room_locked(struct kvfs_store *s, uint64_t need, char *err, size_t errlen)
{
    struct result_table *t = &s->results;
    if (need > t->capacity)
        return kvfs_errf(err, errlen, -EFBIG, "a result of %" PRIu64 " bytes is larger than blend_cache (%" PRIu64 ")",
                         need, t->capacity);
    while (t->bytes + need > t->capacity) {
        struct result_row *v = result_table_lru(t);
        if (!v)
            return kvfs_errf(err, errlen, -ENOSPC, "blend_cache (%" PRIu64 " bytes) holds only pinned results",
                             t->capacity);
        result_table_remove(t, &s->ram, v->key);
        t->evictions++;
    }
    int rc = store_evict_for(s, need);
    return rc ? kvfs_errf(err, errlen, rc, "capacity (%" PRIu64 " bytes) holds only pinned data", s->opts.capacity)
              : 0;
}

/* The object, written next to its final place (not synced: derived data). */
static int write_object(struct kvfs_store *s, const char *key, const uint8_t *img, const struct kvfs_header *h,
                        char tmp[4096], uint64_t *obj_len, char *err, size_t errlen)
{
    struct kvfs_obj_parts obj;
    /* raw frames: zstd buys ~8% on KV data and costs time on every blend */
    int rc = kvfs_obj_encode_parts(img, h, 0, &obj), fd;
    if (rc)
        return kvfs_errf(err, errlen, rc, "cannot encode the result: %s", strerror(-rc));
    fd = store_write_tmp_iov(s, key, obj.iov, obj.n, tmp, err, errlen);
    *obj_len = obj.len;
    kvfs_obj_parts_free(&obj);
    if (fd < 0)
        return fd;
    close(fd);
    return 0;
}

int kvfs_store_put_result(struct kvfs_store *s, const char *key, uint8_t *img, size_t len,
                          struct kvfs_chunk_ref **ref, int *kept, char *err, size_t errlen)
{
    struct kvfs_header h;
    struct ram_entry *e = NULL;
    char tmp[4096], dst[4096], why[256];
    uint64_t obj_len = 0;
    int rc, on_disk = 0, renamed = 0;
    tmp[0] = '\0';
    if (ref)
        *ref = NULL;
    if (kept)
        *kept = 0;
    if (!valid_key(key))
        rc = kvfs_errf(err, errlen, -EINVAL, "a result key is 64 lowercase hex digits");
    else if (s->opts.read_only)
        rc = -EROFS;
    else if ((rc = kvfs_file_verify(img, len, &h, why, sizeof(why))))
        kvfs_errf(err, errlen, rc, "invalid result: %s", why);
    if (!rc) {
        kvfs_img_adopt(&img, len); /* readers' opens can then be backed by it (passthrough) */
        /* h points into the image (its layer shapes are read below): the adopted copy now */
        kvfs_header_parse(img, len, &h, NULL, 0);
        if (!(e = ram_entry_new(key, img, len, ref ? 1 : 0)))
            rc = -ENOMEM;
    }
    if (rc) {
        kvfs_img_free(img);
        return rc;
    }
    struct kvfs_chunk_ref *r = ref ? store_new_ref(s, e) : NULL;
    if (ref && !r) {
        ram_entry_free(e);
        return -ENOMEM;
    }
    int wrc = write_object(s, key, img, &h, tmp, &obj_len, err, errlen);
    pthread_mutex_lock(&s->lock);
    if (!wrc && !result_table_get(&s->results, key) && (wrc = make_room_locked(s, obj_len, err, errlen)) == 0) {
        result_table_path(&s->results, key, dst, sizeof(dst));
        if (rename(tmp, dst) != 0)
            wrc = kvfs_errf(err, errlen, -errno, "cannot store the result: %s", strerror(errno));
        else if ((renamed = 1, wrc = result_table_add(&s->results, key, obj_len, len, store_now_ns())))
            unlink(dst);
        else
            on_disk = 1;
    } else if (!wrc) {
        on_disk = 1; /* an equal result was stored meanwhile */
    }
    if (!on_disk)
        s->results.uncached++;
    e->stamp = ++s->ram.clock;
    int in_ram = on_disk && !ram_lookup(&s->ram, key) && ram_insert(&s->ram, e);
    pthread_mutex_unlock(&s->lock);
    if (tmp[0] && !renamed)
        unlink(tmp);
    if (!in_ram && !r)
        ram_entry_free(e);
    if (ref)
        *ref = r;
    if (kept)
        *kept = on_disk;
    return 0;
}

/* A kept result's object decoded (outside the lock) into the RAM tier; on a
 * failure (-ENOENT: evicted meanwhile) the result is dropped, to be blended
 * again. */
static int decode_result(struct kvfs_store *s, const char *key, struct ram_entry **out)
{
    char p[4096], why[256] = "";
    struct ram_entry *e;
    result_table_path(&s->results, key, p, sizeof(p));
    int rc = ram_entry_decode(p, key, &e, why, sizeof(why));
    if (rc) {
        if (rc != -ENOENT && rc != -ENOMEM)
            kvfs_log(KVFS_LOG_ERR, "blend result %s unreadable (%s); it will be blended again", key, why);
        pthread_mutex_lock(&s->lock);
        if (rc != -ENOMEM)
            result_table_remove(&s->results, &s->ram, key);
        s->results.misses++;
        pthread_mutex_unlock(&s->lock);
        return rc == -ENOMEM ? rc : -ENOENT;
    }
    pthread_mutex_lock(&s->lock);
    *out = ram_adopt_decoded(&s->ram, e, result_table_get(&s->results, key) != NULL);
    s->results.hits++;
    pthread_mutex_unlock(&s->lock);
    return 0;
}

int kvfs_store_get_result(struct kvfs_store *s, const char *key, struct kvfs_chunk_ref **out)
{
    struct ram_entry *e;
    if (!valid_key(key))
        return -EINVAL;
    struct kvfs_chunk_ref *ref = store_new_ref(s, NULL);
    if (!ref)
        return -ENOMEM;
    pthread_mutex_lock(&s->lock);
    struct result_row *row = result_table_get(&s->results, key);
    if (row) {
        row->accessed_ns = store_now_ns();
        row->hits++;
    }
    if ((e = ram_lookup(&s->ram, key))) {
        ram_hit(&s->ram, e);
        s->results.hits++;
        pthread_mutex_unlock(&s->lock);
        ref->e = e;
        *out = ref;
        return 0;
    }
    if (!row) {
        s->results.misses++;
        pthread_mutex_unlock(&s->lock);
        free(ref);
        return -ENOENT;
    }
    pthread_mutex_unlock(&s->lock);
    int rc = decode_result(s, key, &ref->e);
    if (rc) {
        free(ref);
        return rc;
    }
    *out = ref;
    return 0;
}

int kvfs_store_remove_result(struct kvfs_store *s, const char *key)
{
    pthread_mutex_lock(&s->lock);
    int found = result_table_get(&s->results, key) != NULL; /* only a kept result enters the RAM tier */
    result_table_remove(&s->results, &s->ram, key);        /* its RAM copy too */
    pthread_mutex_unlock(&s->lock);
    return found ? 0 : -ENOENT;
}

int kvfs_store_pin_result(struct kvfs_store *s, const char *key, int pinned)
{
    pthread_mutex_lock(&s->lock);
    struct result_row *r = result_table_get(&s->results, key);
    if (r)
        r->pinned = pinned ? 1 : 0;
    pthread_mutex_unlock(&s->lock);
    return r ? 0 : -ENOENT;
}

int kvfs_store_has_result(struct kvfs_store *s, const char *key, int *pinned, int *in_ram)
{
    pthread_mutex_lock(&s->lock);
    struct result_row *r = result_table_get(&s->results, key);
    if (pinned)
        *pinned = r ? r->pinned : 0;
    if (in_ram)
        *in_ram = ram_lookup(&s->ram, key) != NULL;
    pthread_mutex_unlock(&s->lock);
    return r != NULL;
}
