/* store_remote.c - the store's side of a tier below the local disk (the
 * hooks of struct kvfs_store_remote, store.h; remote.h implements them on
 * RADOS): setting them, what the remote tier's listing knows, lookups that
 * fetch, and holding a chunk the tier has yet to receive. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store_internal.h"

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
    *out = store_remote_hooks(s);
    return out->fetch ? 0 : -ENOENT;
}

struct remote_only_ctx {
    struct kvfs_store *s;
    char *after;
    kvfs_store_list_cb cb;
    void *ctx;
};

static int remote_only_cb(const struct kvfs_chunk_info *c, void *vctx)
{
    struct remote_only_ctx *r = vctx;
    if (!store_has_chunk(r->s, c->hash)) {
        struct kvfs_chunk_info ci = *c;
        ci.remote = ci.remote_only = 1;
        int rc = r->cb(&ci, r->ctx);
        if (rc)
            return rc; /* not consumed: the next page starts with it */
    }
    memcpy(r->after, c->hash, KVFS_HASH_HEX_LEN + 1);
    return 0;
}

long kvfs_store_list_remote_only(struct kvfs_store *s, char after[KVFS_HASH_HEX_LEN + 1], size_t limit,
                                 kvfs_store_list_cb cb, void *ctx)
{
    struct kvfs_store_remote r = store_remote_hooks(s);
    if (!r.list)
        return 0;
    struct remote_only_ctx rc = {s, after, cb, ctx};
    return r.list(r.ctx, after, limit, remote_only_cb, &rc);
}

int kvfs_store_stat_known(struct kvfs_store *s, const char *hash, struct kvfs_chunk_info *out)
{
    int rc = kvfs_store_stat(s, hash, out);
    if (rc != -ENOENT)
        return rc;
    struct kvfs_store_remote r = store_remote_hooks(s);
    if (!r.stat || r.stat(r.ctx, hash, out) != 0)
        return -ENOENT;
    out->remote = out->remote_only = 1;
    return 0;
}

/* ---- images a lookup fetched, parked for the open that follows ----
 *
 * A lookup of a chunk only the remote tier has fetches it (its attributes
 * are in the object); the open that follows a moment later would decode
 * the stored copy again.  Without a RAM tier to keep the verified image,
 * it waits here for that open: a few, within a byte bound, for a couple
 * of seconds at most. */
#define PARKED_WAIT_NS 2000000000LL
#define PARKED_BYTES (256ull << 20)

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* A reference released with s->lock held (kvfs_chunk_release takes it). */
static void release_locked(struct kvfs_chunk_ref *ref)
{
    struct ram_entry *e = ref->e;
    if (--e->refs == 0 && !e->cached)
        ram_entry_free(e);
    free(ref);
}

static void drop_slot(struct kvfs_store *s, int i)
{
    release_locked(s->parked[i].ref);
    s->parked[i].ref = NULL;
}

void store_drop_parked(struct kvfs_store *s, const char *hash, int all)
{
    int64_t now = mono_ns();
    for (int i = 0; i < (int)(sizeof(s->parked) / sizeof(s->parked[0])); i++) {
        struct kvfs_chunk_ref *r = s->parked[i].ref;
        if (r && (all || (hash ? !strcmp(r->e->hash, hash) : now - s->parked[i].at_ns > PARKED_WAIT_NS)))
            drop_slot(s, i);
    }
}

struct kvfs_chunk_ref *store_take_parked(struct kvfs_store *s, const char *hash)
{
    for (int i = 0; i < (int)(sizeof(s->parked) / sizeof(s->parked[0])); i++) {
        struct kvfs_chunk_ref *r = s->parked[i].ref;
        if (r && !strcmp(r->e->hash, hash)) {
            s->parked[i].ref = NULL;
            return r;
        }
    }
    return NULL;
}

/* Park ref (taken): the oldest make room, within the slots and the bytes. */
static void park(struct kvfs_store *s, struct kvfs_chunk_ref *ref)
{
    enum { N = sizeof(s->parked) / sizeof(s->parked[0]) };
    pthread_mutex_lock(&s->lock);
    store_drop_parked(s, NULL, 0);
    if (ref->e->cached || ref->e->size > PARKED_BYTES) { /* the RAM tier has it, or too big to wait */
        release_locked(ref);
        pthread_mutex_unlock(&s->lock);
        return;
    }
    for (;;) {
        uint64_t bytes = ref->e->size;
        int oldest = -1, free_slot = -1;
        for (int i = 0; i < N; i++) {
            if (!s->parked[i].ref) {
                free_slot = i;
                continue;
            }
            bytes += s->parked[i].ref->e->size;
            if (oldest < 0 || s->parked[i].at_ns < s->parked[oldest].at_ns)
                oldest = i;
        }
        if (free_slot >= 0 && bytes <= PARKED_BYTES) {
            s->parked[free_slot].ref = ref;
            s->parked[free_slot].at_ns = mono_ns();
            break;
        }
        drop_slot(s, oldest);
    }
    pthread_mutex_unlock(&s->lock);
}

void kvfs_store_expire_parked(struct kvfs_store *s)
{
    pthread_mutex_lock(&s->lock);
    store_drop_parked(s, NULL, 0);
    pthread_mutex_unlock(&s->lock);
}

int kvfs_store_lookup(struct kvfs_store *s, const char *hash, struct kvfs_chunk_info *out)
{
    int rc = kvfs_store_stat(s, hash, out);
    struct kvfs_chunk_ref *ref;
    if (rc == -ENOENT && store_fetch_remote(s, hash, &ref) == 0) {
        rc = kvfs_store_stat(s, hash, out);
        if (ref)
            park(s, ref);
    }
    return rc;
}

int kvfs_store_hold(struct kvfs_store *s, const char *hash, int held)
{
    store_settle(s, hash); /* a put returned for it may still be being written */
    pthread_mutex_lock(&s->lock);
    struct kvfs_chunk_info *c = chunk_rows_get(&s->rows, hash);
    if (c)
        c->held = held ? 1 : 0;
    pthread_mutex_unlock(&s->lock);
    return c ? 0 : -ENOENT;
}
