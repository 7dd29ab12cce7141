/* results.c - blend results in the store's tiers (store.h, "Blend results").
 *
 * A result is derived data: it can always be blended again from its recipe.
 * So its object is written without fsync, kept in a flat DIR/results/ with no
 * index row, and the directory is emptied when the store opens.  Its bytes
 * count within capacity together with the chunks (eviction takes the least
 * recently used of either, store.c) and within result_capacity on their own.
 * Locking: s->lock, like the rest of the store. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "image.h"
#include "object.h"
#include "store_internal.h"

#define DEFAULT_RESULT_CAPACITY (1ull << 30)

static uint64_t result_capacity(const struct kvfs_store *s)
{
    uint64_t cap = s->opts.result_capacity ? s->opts.result_capacity : DEFAULT_RESULT_CAPACITY;
    return s->opts.capacity && s->opts.capacity < cap ? s->opts.capacity : cap;
}

static void result_path(const struct kvfs_store *s, const char *key, char *out, size_t len)
{
    snprintf(out, len, "%s/results/%s.kvo", s->dir, key);
}

static int valid_key(const char *key)
{
    uint8_t d[32];
    return key && strlen(key) == KVFS_HASH_HEX_LEN && kvfs_hex_to_hash(key, d) == 0;
}

int results_open_locked(struct kvfs_store *s)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/results", s->dir);
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        return -errno;
    DIR *d = opendir(path);
    if (!d)
        return -errno;
    struct dirent *de;
    unsigned removed = 0;
    while ((de = readdir(d)))
        if (de->d_name[0] != '.' && unlinkat(dirfd(d), de->d_name, 0) == 0)
            removed++;
    closedir(d);
    if (removed)
        kvfs_log(KVFS_LOG_INFO, "removed %u blend results of an earlier mount (%s)", removed, path);
    return 0;
}

void results_close_locked(struct kvfs_store *s)
{
    free(s->results);
    s->results = NULL;
    s->n_results = s->cap_results = 0;
}

struct result_row *result_get_locked(struct kvfs_store *s, const char *key)
{
    for (size_t i = 0; i < s->n_results; i++)
        if (!strcmp(s->results[i].key, key))
            return &s->results[i];
    return NULL;
}

struct result_row *result_lru_locked(struct kvfs_store *s)
{
    struct result_row *v = NULL;
    for (size_t i = 0; i < s->n_results; i++)
        if (!s->results[i].pinned && (!v || s->results[i].accessed_ns < v->accessed_ns))
            v = &s->results[i];
    return v;
}

void result_remove_locked(struct kvfs_store *s, const char *key)
{
    struct result_row *r = result_get_locked(s, key);
    if (!r)
        return;
    char p[4096];
    result_path(s, key, p, sizeof(p));
    unlink(p);
    ram_drop(s, key);
    s->result_bytes -= r->stored_size;
    *r = s->results[--s->n_results]; /* unordered: move the last one here */
}

static int result_add_locked(struct kvfs_store *s, const char *key, uint64_t stored, uint64_t logical)
{
    if (s->n_results == s->cap_results) {
        size_t cap = s->cap_results ? s->cap_results * 2 : 64;
        struct result_row *r = realloc(s->results, cap * sizeof(*r));
        if (!r)
            return -ENOMEM;
        s->results = r;
        s->cap_results = cap;
    }
    struct result_row *r = &s->results[s->n_results++];
    memset(r, 0, sizeof(*r));
    snprintf(r->key, sizeof(r->key), "%s", key);
    r->stored_size = stored;
    r->logical_size = logical;
    r->accessed_ns = store_now_ns();
    s->result_bytes += stored;
    s->result_puts++;
    return 0;
}

/* Room on disk for `need` result bytes: older results first within
 * result_capacity, then chunks or results within capacity. */
static int make_room_locked(struct kvfs_store *s, uint64_t need, char *err, size_t errlen)
{
    uint64_t cap = result_capacity(s);
    if (need > cap)
        return kvfs_errf(err, errlen, -EFBIG, "a result of %" PRIu64 " bytes is larger than blend_cache (%" PRIu64 ")",
                         need, cap);
    while (s->result_bytes + need > cap) {
        struct result_row *v = result_lru_locked(s);
        if (!v)
            return kvfs_errf(err, errlen, -ENOSPC, "blend_cache (%" PRIu64 " bytes) holds only pinned results", cap);
        result_remove_locked(s, v->key);
        s->result_evictions++;
    }
    int rc = store_evict_for(s, need);
    return rc ? kvfs_errf(err, errlen, rc, "capacity (%" PRIu64 " bytes) holds only pinned data", s->opts.capacity)
              : 0;
}

/* The object, written next to its final place (not synced: derived data). */
static int write_object(struct kvfs_store *s, const char *key, const uint8_t *img, const struct kvfs_header *h,
                        char tmp[4096], uint64_t *obj_len, char *err, size_t errlen)
{
    uint8_t *obj = NULL;
    size_t len = 0;
    /* raw frames: zstd buys ~8% on KV data and costs time on every blend */
    int rc = kvfs_obj_encode(img, h, 0, &obj, &len), fd;
    if (rc)
        return kvfs_errf(err, errlen, rc, "cannot encode the result: %s", strerror(-rc));
    fd = store_write_tmp(s, key, obj, len, tmp, err, errlen);
    free(obj);
    if (fd < 0)
        return fd;
    close(fd);
    *obj_len = len;
    return 0;
}

static struct kvfs_chunk_ref *new_ref(struct kvfs_store *s, struct ram_entry *e)
{
    struct kvfs_chunk_ref *ref = calloc(1, sizeof(*ref));
    if (ref) {
        ref->s = s;
        ref->e = e;
    }
    return ref;
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
    if (!rc && !(e = calloc(1, sizeof(*e))))
        rc = -ENOMEM;
    if (rc || !e) {
        kvfs_img_free(img);
        return rc ? rc : -ENOMEM;
    }
    kvfs_img_adopt(&img, len); /* readers' opens can then be backed by it (passthrough) */
    snprintf(e->hash, sizeof(e->hash), "%s", key);
    e->img = img;
    e->size = len;
    e->refs = ref ? 1 : 0;
    struct kvfs_chunk_ref *r = ref ? new_ref(s, e) : NULL;
    if (ref && !r) {
        kvfs_img_free(img);
        free(e);
        return -ENOMEM;
    }
    int wrc = write_object(s, key, img, &h, tmp, &obj_len, err, errlen);
    pthread_mutex_lock(&s->lock);
    if (!wrc && !result_get_locked(s, key) && (wrc = make_room_locked(s, obj_len, err, errlen)) == 0) {
        result_path(s, key, dst, sizeof(dst));
        if (rename(tmp, dst) != 0)
            wrc = kvfs_errf(err, errlen, -errno, "cannot store the result: %s", strerror(errno));
        else if ((renamed = 1, wrc = result_add_locked(s, key, obj_len, len)))
            unlink(dst);
        else
            on_disk = 1;
    } else if (!wrc) {
        on_disk = 1; /* an equal result was stored meanwhile */
    }
    if (!on_disk)
        s->result_uncached++;
    e->stamp = ++s->ram_clock;
    int in_ram = on_disk && !ram_lookup(s, key) && ram_insert_locked(s, e);
    pthread_mutex_unlock(&s->lock);
    if (tmp[0] && !renamed)
        unlink(tmp);
    if (!in_ram && !r) {
        kvfs_img_free(img);
        free(e);
    }
    if (ref)
        *ref = r;
    if (kept)
        *kept = on_disk;
    return 0;
}

int kvfs_store_get_result(struct kvfs_store *s, const char *key, struct kvfs_chunk_ref **out)
{
    char p[4096], why[256] = "";
    struct ram_entry *e;
    if (!valid_key(key))
        return -EINVAL;
    struct kvfs_chunk_ref *ref = new_ref(s, NULL);
    if (!ref)
        return -ENOMEM;
    pthread_mutex_lock(&s->lock);
    struct result_row *row = result_get_locked(s, key);
    if (row) {
        row->accessed_ns = store_now_ns();
        row->hits++;
    }
    if ((e = ram_lookup(s, key))) {
        ram_hit_locked(s, e);
        s->result_hits++;
        pthread_mutex_unlock(&s->lock);
        ref->e = e;
        *out = ref;
        return 0;
    }
    if (!row) {
        s->result_misses++;
        pthread_mutex_unlock(&s->lock);
        free(ref);
        return -ENOENT;
    }
    pthread_mutex_unlock(&s->lock);
    result_path(s, key, p, sizeof(p));
    int rc = store_decode_entry(p, key, &e, why, sizeof(why)); /* outside the lock */
    if (rc) {
        if (rc != -ENOENT && rc != -ENOMEM) /* ENOENT: evicted meanwhile */
            kvfs_log(KVFS_LOG_ERR, "blend result %s unreadable (%s); it will be blended again", key, why);
        pthread_mutex_lock(&s->lock);
        if (rc != -ENOMEM)
            result_remove_locked(s, key);
        s->result_misses++;
        pthread_mutex_unlock(&s->lock);
        free(ref);
        return rc == -ENOMEM ? rc : -ENOENT;
    }
    pthread_mutex_lock(&s->lock);
    e = ram_adopt_decoded_locked(s, e, result_get_locked(s, key) != NULL);
    s->result_hits++;
    pthread_mutex_unlock(&s->lock);
    ref->e = e;
    *out = ref;
    return 0;
}

int kvfs_store_remove_result(struct kvfs_store *s, const char *key)
{
    pthread_mutex_lock(&s->lock);
    int found = result_get_locked(s, key) != NULL; /* only a kept result enters the RAM tier */
    result_remove_locked(s, key);                  /* its RAM copy too */
    pthread_mutex_unlock(&s->lock);
    return found ? 0 : -ENOENT;
}

int kvfs_store_pin_result(struct kvfs_store *s, const char *key, int pinned)
{
    pthread_mutex_lock(&s->lock);
    struct result_row *r = result_get_locked(s, key);
    if (r)
        r->pinned = pinned ? 1 : 0;
    pthread_mutex_unlock(&s->lock);
    return r ? 0 : -ENOENT;
}

int kvfs_store_has_result(struct kvfs_store *s, const char *key, int *pinned, int *in_ram)
{
    pthread_mutex_lock(&s->lock);
    struct result_row *r = result_get_locked(s, key);
    if (pinned)
        *pinned = r ? r->pinned : 0;
    if (in_ram)
        *in_ram = ram_lookup(s, key) != NULL;
    pthread_mutex_unlock(&s->lock);
    return r != NULL;
}

void results_stats_locked(struct kvfs_store *s, FILE *f)
{
    uint64_t pinned = 0, in_ram = 0, ram_bytes = 0;
    for (size_t i = 0; i < s->n_results; i++) {
        struct ram_entry *e = ram_lookup(s, s->results[i].key);
        pinned += s->results[i].pinned != 0;
        in_ram += e != NULL;
        ram_bytes += e ? e->size : 0;
    }
    fprintf(f,
            ",\n  \"results\": {\"count\": %zu, \"pinned\": %" PRIu64 ", \"bytes_stored\": %" PRIu64
            ", \"capacity\": %" PRIu64 ", \"in_ram\": %" PRIu64 ", \"ram_bytes\": %" PRIu64 ", \"stored\": %" PRIu64
            ", \"hits\": %" PRIu64 ", \"misses\": %" PRIu64 ", \"evictions\": %" PRIu64 ", \"not_kept\": %" PRIu64
            "}",
            s->n_results, pinned, s->result_bytes, result_capacity(s), in_ram, ram_bytes, s->result_puts,
            s->result_hits, s->result_misses, s->result_evictions, s->result_uncached);
}
