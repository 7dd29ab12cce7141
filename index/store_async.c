/* store_async.c - puts written after they return (kvfs_store_put_keep_async).
 *
 * A llama.cpp slot save blocks its whole server until close() returns, so
 * the mount can take the verified image, name it, and leave the write
 * (encode, write, fsync, rename, index: ~100 ms for 30 MB) to one writer
 * thread.  Until a queued put is stored or has failed, every lookup of its
 * name waits for it (store_settle, called by each store.h function that
 * takes a chunk's name), so no reader sees it missing in between; a listing
 * waits for all of them.  kvfs_store_flush and kvfs_store_close write every
 * queued put.  At most ASYNC_MAX_PUTS or ASYNC_MAX_BYTES wait at once: a put
 * past that waits for room, so memory stays bounded.  The writer tells the
 * remote tier and fills the RAM tier before a put leaves the queue, as a
 * sync put does before it returns.  KVFS_TEST_ASYNC_PUT_DELAY_MS (tests
 * only) makes each write start that late, so tests see puts queued.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "image.h"
#include "log.h"
#include "store_internal.h"

#define ASYNC_MAX_PUTS 4
#define ASYNC_MAX_BYTES (512ull << 20)

struct async_put {
    struct async_put *next;
    char hash[KVFS_HASH_HEX_LEN + 1];
    struct kvfs_header h;
    uint8_t *img;
    size_t len;
};

void store_async_init(struct kvfs_store *s)
{
    struct store_async *a = &s->async;
    pthread_mutex_init(&a->lock, NULL);
    pthread_cond_init(&a->cond, NULL);
    atomic_init(&a->waiting, 0);
    const char *d = getenv("KVFS_TEST_ASYNC_PUT_DELAY_MS"); /* tests only: see writer() */
    a->test_delay_ms = d ? atoi(d) : 0;
}

/* with a->lock held, after n changed */
static void set_waiting(struct store_async *a)
{
    atomic_store_explicit(&a->waiting, a->n, memory_order_release);
}

/* a put of hash (NULL: any) queued or being written */
static int queued_locked(const struct store_async *a, const char *hash)
{
    for (const struct async_put *p = a->head; p; p = p->next)
        if (!hash || !strcmp(p->hash, hash))
            return 1;
    return 0;
}

void store_settle(struct kvfs_store *s, const char *hash)
{
    struct store_async *a = &s->async;
    if (atomic_load_explicit(&a->waiting, memory_order_acquire) == 0)
        return; /* nothing queued: the common case costs one load */
    pthread_mutex_lock(&a->lock);
    /* the writer itself never waits (for what only it can write) */
    while (!(a->started && pthread_equal(a->thread, pthread_self())) && queued_locked(a, hash))
        pthread_cond_wait(&a->cond, &a->lock);
    pthread_mutex_unlock(&a->lock);
}

void kvfs_store_flush(struct kvfs_store *s)
{
    store_settle(s, NULL);
}

static void *writer(void *arg)
{
    struct kvfs_store *s = arg;
    struct store_async *a = &s->async;
    pthread_mutex_lock(&a->lock);
    for (;;) {
        while (!a->head && !a->stopping)
            pthread_cond_wait(&a->cond, &a->lock);
        if (!a->head)
            break; /* stopping and nothing left */
        struct async_put *p = a->head; /* stays queued (and waited for) until all is done */
        pthread_mutex_unlock(&a->lock);
        if (a->test_delay_ms) /* tests: a write that comes late */
            nanosleep(&(struct timespec){a->test_delay_ms / 1000, (a->test_delay_ms % 1000) * 1000000L}, NULL);
        char err[512] = "";
        int rc = store_put_verified(s, p->img, &p->h, p->hash, err, sizeof(err));
        if (rc < 0) {
            kvfs_log(KVFS_LOG_ERR, "chunk %s (%zu bytes) was not stored after its writer closed it: %s", p->hash,
                     p->len, err[0] ? err : strerror(-rc));
            kvfs_img_free(p->img);
        } else {
            /* before the dequeue, as a sync put does before it returns: the
             * remote tier hears of it (its hook holds the chunk and marks a
             * claim's lease produced; the writer never waits in
             * store_settle) and the RAM tier takes the image */
            if (rc == 0)
                store_notify_stored(s, p->hash);
            store_ram_adopt(s, p->hash, p->img, p->len);
        }
        pthread_mutex_lock(&a->lock);
        if (rc < 0)
            a->failed++;
        else
            a->stored++;
        a->head = p->next;
        if (!a->head)
            a->tail = NULL;
        a->n--;
        a->bytes -= p->len;
        set_waiting(a);
        pthread_cond_broadcast(&a->cond);
        free(p);
    }
    pthread_mutex_unlock(&a->lock);
    return NULL;
}

int kvfs_store_put_keep_async(struct kvfs_store *s, uint8_t **img, size_t len, char hash_out[KVFS_HASH_HEX_LEN + 1],
                              char *err, size_t errlen)
{
    struct store_async *a = &s->async;
    struct async_put *p;
    int rc;
    if (s->opts.read_only)
        return -EROFS;
    if (!(p = calloc(1, sizeof(*p))))
        return -ENOMEM;
    if ((rc = store_check_image(*img, len, &p->h, p->hash, err, errlen))) {
        store_count_ingest_error(s);
        free(p);
        return rc;
    }
    if (hash_out)
        memcpy(hash_out, p->hash, sizeof(p->hash));
    if (store_has_chunk(s, p->hash)) { /* content addressed: stored already (or its queued write failed) */
        store_ram_adopt(s, p->hash, *img, len);
        *img = NULL;
        free(p);
        return 0;
    }
    pthread_mutex_lock(&a->lock);
    for (;;) {
        /* closing, or no writer thread to be had: written here instead */
        if (a->stopping || (!a->started && pthread_create(&a->thread, NULL, writer, s))) {
            pthread_mutex_unlock(&a->lock);
            free(p);
            return kvfs_store_put_keep(s, img, len, hash_out, err, errlen);
        }
        a->started = 1;
        if (queued_locked(a, p->hash)) { /* the same chunk queued meanwhile: its lookups wait for that one */
            pthread_mutex_unlock(&a->lock);
            free(p);
            kvfs_img_free(*img);
            *img = NULL;
            return 0;
        }
        if (a->n < ASYNC_MAX_PUTS && (!a->n || a->bytes + len <= ASYNC_MAX_BYTES))
            break;
        pthread_cond_wait(&a->cond, &a->lock); /* room: memory stays bounded */
    }
    p->img = *img;
    p->len = len;
    *img = NULL;
    if (a->tail)
        a->tail->next = p;
    else
        a->head = p;
    a->tail = p;
    a->n++;
    a->bytes += len;
    set_waiting(a);
    pthread_cond_broadcast(&a->cond);
    pthread_mutex_unlock(&a->lock);
    return 0;
}

void store_async_stats(struct kvfs_store *s, uint64_t *queued, uint64_t *stored, uint64_t *failed)
{
    struct store_async *a = &s->async;
    pthread_mutex_lock(&a->lock);
    *queued = a->n;
    *stored = a->stored;
    *failed = a->failed;
    pthread_mutex_unlock(&a->lock);
}

void store_async_close(struct kvfs_store *s)
{
    struct store_async *a = &s->async;
    pthread_mutex_lock(&a->lock);
    a->stopping = 1;
    pthread_cond_broadcast(&a->cond);
    int started = a->started;
    pthread_mutex_unlock(&a->lock);
    if (started)
        pthread_join(a->thread, NULL); /* it writes what is queued first */
    pthread_cond_destroy(&a->cond);
    pthread_mutex_destroy(&a->lock);
}
