/* store_read.c - reading chunks: a handle on a chunk's decoded image
 * (kvfs_store_get, from the RAM tier or decoded from its object), a
 * descriptor to stream its layers from (kvfs_store_open_stream), and the
 * handles' operations.  A local miss asks the remote tier, which stores the
 * chunk here first. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "index_db.h"
#include "store_internal.h"

/* The chunk's row, looked up with s->lock taken: on a hit the lock stays
 * held, the hit is counted (the store's, the row's hits and access time,
 * the index's copy) and *e is the RAM tier's entry for it, or NULL.  A miss
 * is counted and, with may_fetch, the remote tier asked for the chunk
 * (without the lock); NULL with the lock released when neither has it.
 * *fetched: a reference on the image the fetch verified (else NULL), which
 * the caller serves instead of decoding the stored copy again. */
static struct kvfs_chunk_info *open_row(struct kvfs_store *s, const char *hash, int may_fetch,
                                        struct ram_entry **e, struct kvfs_chunk_ref **fetched)
{
    *fetched = NULL;
    pthread_mutex_lock(&s->lock);
    struct kvfs_chunk_info *c = chunk_rows_get(&s->rows, hash);
    if (!c) {
        s->misses++;
        pthread_mutex_unlock(&s->lock);
        /* only on the remote tier: fetched into the local tiers first */
        if (!may_fetch || store_fetch_remote(s, hash, fetched) != 0)
            return NULL;
        pthread_mutex_lock(&s->lock);
        if (!(c = chunk_rows_get(&s->rows, hash))) {
            pthread_mutex_unlock(&s->lock);
            kvfs_chunk_release(*fetched); /* removed or evicted meanwhile */
            *fetched = NULL;
            return NULL;
        }
        if (*fetched) {
            s->hits++;
            c->hits++;
            c->accessed_ns = store_now_ns();
            kvfs_idx_touch(s->db, hash, c->accessed_ns, c->hits);
            *e = NULL;
            return c;
        }
    }
    s->hits++;
    c->hits++;
    c->accessed_ns = store_now_ns();
    kvfs_idx_touch(s->db, hash, c->accessed_ns, c->hits);
    *e = ram_lookup(&s->ram, hash);
    if (!*e)
        *fetched = store_take_parked(s, hash); /* the lookup just fetched it */
    return c;
}

static int get(struct kvfs_store *s, const char *hash, int private_img, struct kvfs_chunk_ref **out)
{
    store_settle(s, hash); /* a put returned for it may still be being written */
    struct kvfs_chunk_ref *ref = store_new_ref(s, NULL), *fetched;
    struct ram_entry *e;
    if (!ref)
        return -ENOMEM;
    if (!open_row(s, hash, 1, &e, &fetched)) {
        free(ref);
        return -ENOENT;
    }
    if (fetched) {
        pthread_mutex_unlock(&s->lock);
        free(ref);
        *out = fetched;
        return 0;
    }
    if (e) {
        ram_hit(&s->ram, e);
        pthread_mutex_unlock(&s->lock);
        ref->e = e;
        *out = ref;
        return 0;
    }
    pthread_mutex_unlock(&s->lock);

    /* decode outside the lock */
    char p[4096], why[256] = "";
    store_object_path(s, hash, p, sizeof(p));
    int rc = private_img ? ram_entry_decode_private(p, hash, &e, why, sizeof(why))
                         : ram_entry_decode(p, hash, &e, why, sizeof(why));
    if (rc) {
        if (rc != -ENOMEM)
            kvfs_log(KVFS_LOG_ERR, "chunk %s: object unreadable: %s", hash, why);
        free(ref);
        return rc == -ENOENT || rc == -ENOMEM ? rc : -EIO;
    }
    pthread_mutex_lock(&s->lock);
    ref->e = ram_adopt_decoded(&s->ram, e, chunk_rows_get(&s->rows, hash) != NULL);
    pthread_mutex_unlock(&s->lock);
    *out = ref;
    return 0;
}

int kvfs_store_get(struct kvfs_store *s, const char *hash, struct kvfs_chunk_ref **out)
{
    return get(s, hash, 0, out);
}

int kvfs_store_get_private(struct kvfs_store *s, const char *hash, struct kvfs_chunk_ref **out)
{
    return get(s, hash, 1, out);
}

static int open_stream(struct kvfs_store *s, const char *hash, struct kvfs_chunk_ref **ram_ref, int *fd,
                       int may_fetch)
{
    store_settle(s, hash); /* a put returned for it may still be being written */
    struct ram_entry *e;
    struct kvfs_chunk_ref *fetched;
    *ram_ref = NULL;
    *fd = -1;
    if (!open_row(s, hash, may_fetch, &e, &fetched))
        return -ENOENT;
    int rc = 0;
    if (fetched) {
        *ram_ref = fetched;
    } else if (e) {
        struct kvfs_chunk_ref *ref = store_new_ref(s, e);
        if (!ref) {
            rc = -ENOMEM;
        } else {
            ram_hit(&s->ram, e);
            *ram_ref = ref;
        }
    } else {
        /* opened under the lock: eviction and rm unlink under it too, and an
         * open descriptor keeps the object readable after that */
        char p[4096];
        store_object_path(s, hash, p, sizeof(p));
        *fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (*fd < 0)
            rc = -errno;
    }
    pthread_mutex_unlock(&s->lock);
    if (rc)
        kvfs_log(KVFS_LOG_ERR, "chunk %s: cannot open for streaming: %s", hash, strerror(-rc));
    return rc;
}

int kvfs_store_open_stream(struct kvfs_store *s, const char *hash, struct kvfs_chunk_ref **ram_ref, int *fd)
{
    return open_stream(s, hash, ram_ref, fd, 1);
}

int kvfs_store_open_stream_local(struct kvfs_store *s, const char *hash, struct kvfs_chunk_ref **ram_ref, int *fd)
{
    return open_stream(s, hash, ram_ref, fd, 0);
}

/* ---- handles ---- */

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
    if (free_it)
        ram_entry_free(e);
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
