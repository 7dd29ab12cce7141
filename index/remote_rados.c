/* remote_rados.c - the shared remote tier on Ceph RADOS (see remote.h):
 * opening and closing it, the worker that pushes the upload queue
 * (remote_queue.c) and refreshes the fleet listing (remote_listing.c),
 * fetching a chunk on a local miss, ranged reads for the loader, and
 * statistics.  The connection's state is remote_conn.c's. */
#include "remote.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef KVFS_HAVE_RADOS
#include "remote_evict.h"
#include "remote_lease.h"
#include "remote_listing.h"
#include "remote_queue.h"
#include "remote_quota.h"
#include "remote_usage.h"
#include <sys/stat.h>

#define NEG_TTL_S 1.0   /* a miss is remembered this long: repeated lookups stay local */
#define RETRY_MAX_S 5.0 /* the worker retries at least this often while down */
#define ATIME_FLUSH_S 3.0 /* uses noted are written into the indexes this often */
#define EVICT_CHECK_S 5.0 /* how often the counters are compared with the capacity */
#define RECONCILE_S 600.0 /* a full pass this often: counters set right after writers that kept none */
#define QUOTA_CHECK_S 60.0 /* the pool's quota is read again this often */

/* With remote_capacity, holding the evictor lock: 1 when the counters
 * (remote_usage.h) say the batch fits as it is, its chunks' local objects
 * counted whole (an upper bound: one the pool has adds nothing), so the
 * batch goes without reading every index; 0 when they are unknown or it
 * does not fit (then a full read makes room). */
static int batch_fits(struct kvfs_remote *r, rados_ioctx_t io, char (*batch)[KVFS_HASH_HEX_LEN + 1], int n)
{
    uint64_t usage, need = 0;
    int known;
    if (remote_usage_read(io, &usage, &known) < 0 || !known)
        return 0;
    for (int i = 0; i < n; i++) {
        char p[4096];
        struct stat st;
        if (kvfs_store_object_path(r->s, batch[i], p, sizeof(p)) == 0 && stat(p, &st) == 0)
            need += (uint64_t)st.st_size;
    }
    pthread_mutex_lock(&r->lock);
    r->usage = usage;
    r->usage_checks++;
    uint64_t cap = r->capacity;
    pthread_mutex_unlock(&r->lock);
    return usage + need <= cap;
}

/* Push a batch of queued chunks; with remote_capacity under the evictor
 * lock, and over a fresh view of the indexes unless the counters say it
 * fits.  0, or the outage that stopped it. */
static int push_batch(struct kvfs_remote *r, char (*batch)[KVFS_HASH_HEX_LEN + 1], int n)
{
    int st2;
    rados_ioctx_t io = remote_io(r, &st2);
    struct remote_view v, *vp = NULL;
    int rc, locked = 0;
    if (remote_capacity_now(r)) {
        if ((rc = remote_evict_lock(r, io)) == 0) {
            locked = 1;
            remote_atime_flush(r, io);
            if (!batch_fits(r, io, batch, n)) {
                if ((rc = remote_view_read(io, &v)) == 0) {
                    vp = &v;
                    pthread_mutex_lock(&r->lock);
                    r->index_reads++;
                    pthread_mutex_unlock(&r->lock);
                } else {
                    remote_evict_unlock(r, io);
                    locked = 0;
                }
            }
        }
        if (rc == -EBUSY)
            return 0; /* another host is evicting or uploading: next round */
        if (rc < 0) {
            if (remote_is_outage(rc))
                remote_mark_down(r, rc, "evictor lock", NULL);
            else {
                pthread_mutex_lock(&r->lock);
                int again = strstr(r->last_error, "evictor lock") != NULL;
                r->errors++;
                snprintf(r->last_error, sizeof(r->last_error), "remote_capacity: evictor lock or index: %s%s",
                         strerror(-rc), rc == -EPERM || rc == -EOPNOTSUPP ? " (the key needs the lock class: "
                                                                         "osd caps 'allow rwx' or 'class lock rw')" : "");
                pthread_mutex_unlock(&r->lock);
                if (!again)
                    kvfs_log(KVFS_LOG_ERR, "remote tier: uploads wait: %s", r->last_error);
            }
            return rc;
        }
    }
    rc = 0;
    pthread_mutex_lock(&r->lock);
    uint64_t evicted0 = r->evicted;
    pthread_mutex_unlock(&r->lock);
    for (int i = 0; i < n; i++) {
        if (vp && remote_evict_renew(r, io, vp) < 0)
            break; /* the lease lapsed: the rest waits for the next round */
        int prc = remote_push_one(r, io, batch[i], vp);
        if (prc < 0 && remote_is_outage(prc)) {
            remote_mark_down(r, prc, "upload", batch[i]);
            rc = prc;
            break;
        }
        if (prc < 0) {
            pthread_mutex_lock(&r->lock);
            r->errors++;
            snprintf(r->last_error, sizeof(r->last_error), "upload %.64s: %.120s", batch[i], strerror(-prc));
            pthread_mutex_unlock(&r->lock);
            /* this chunk's own failure: behind the others, tried again later */
            int tries = remote_queue_defer(r, batch[i]);
            int wait_s = tries >= 10 ? 600 : tries > 0 ? 1 << tries : 0;
            kvfs_log(KVFS_LOG_ERR, "remote tier: upload of %s failed: %s (attempt %d; tried again in %d s, "
                     "after the rest of the queue)", batch[i], strerror(-prc), tries, wait_s);
            remote_lease_pushed(r, io, batch[i]); /* waiting hosts stop waiting: one of them computes it */
        }
    }
    if (vp) {
        remote_note_view(r, &v, evicted0);
        remote_view_free(&v);
    } else if (locked) { /* what the batch added, from the counters again */
        uint64_t usage;
        int known;
        if (remote_usage_read(io, &usage, &known) == 0 && known) {
            pthread_mutex_lock(&r->lock);
            r->usage = usage;
            pthread_mutex_unlock(&r->lock);
        }
    }
    if (locked)
        remote_evict_unlock(r, io);
    return rc;
}

static void *worker_main(void *arg)
{
    struct kvfs_remote *r = arg;
    double backoff = 0.5;
    for (;;) {
        pthread_mutex_lock(&r->lock);
        int stop = r->stop, state = r->state;
        int have_io = r->io != NULL;
        pthread_mutex_unlock(&r->lock);
        if (stop)
            break;
        int ok = 1;
        if (!have_io) {
            char err[256];
            int rc = remote_connect(r, err, sizeof(err));
            if (rc) {
                pthread_mutex_lock(&r->lock);
                int again = !strcmp(r->last_error, err);
                pthread_mutex_unlock(&r->lock);
                remote_mark_down(r, rc, "connect", NULL);
                pthread_mutex_lock(&r->lock); /* the reason, not only the errno */
                snprintf(r->last_error, sizeof(r->last_error), "%s", err);
                pthread_mutex_unlock(&r->lock);
                if (!again)
                    kvfs_log(KVFS_LOG_WARN, "remote tier: %s", err);
                ok = 0;
            } else {
                kvfs_log(KVFS_LOG_INFO, "remote tier: connected to pool %s", r->pool);
                r->quota_at = remote_now_s();
                remote_quota_refresh(r);
            }
        } else if (state == ST_DOWN) {
            /* probe: any answer (ENOENT included) means reachable */
            uint64_t sz;
            time_t mt;
            int st2, rc = rados_stat(remote_io(r, &st2), "kvfs.probe", &sz, &mt);
            if (rc < 0 && rc != -ENOENT)
                ok = 0;
            else
                remote_mark_up(r);
        }
        if (r->s)
            kvfs_store_expire_parked(r->s); /* fetched images no open took */
        if (ok) {
            int st3;
            remote_lease_renew(r, remote_io(r, &st3));
            char batch[16][KVFS_HASH_HEX_LEN + 1];
            int n = remote_queue_peek(r, batch, 16);
            if (n > 0 && push_batch(r, batch, n) < 0)
                ok = 0; /* an outage, or no evictor lock: retried after a backoff */
            if (ok && n == 16)
                continue; /* more queued: keep going */
            pthread_mutex_lock(&r->lock);
            int due = r->list_refresh_s > 0 &&
                      (r->listed_at == 0 || remote_now_s() - r->listed_at >= r->list_refresh_s);
            pthread_mutex_unlock(&r->lock);
            int st2;
            rados_ioctx_t io = due && ok ? remote_io(r, &st2) : NULL;
            if (io) {
                int rc = remote_refresh_listing(r, io);
                if (rc < 0 && remote_is_outage(rc)) {
                    remote_mark_down(r, rc, "listing", NULL);
                    ok = 0;
                } else if (rc < 0) {
                    kvfs_log(KVFS_LOG_WARN, "remote tier: listing refresh failed: %s", strerror(-rc));
                }
            }
            if (ok && r->capacity_quota && remote_now_s() - r->quota_at >= QUOTA_CHECK_S) {
                r->quota_at = remote_now_s();
                remote_quota_refresh(r);
            }
            pthread_mutex_lock(&r->lock);
            double now = remote_now_s();
            int flush = r->n_atimes && now - r->atimes_at >= ATIME_FLUSH_S;
            /* over capacity (a host without remote_capacity wrote, or it was
             * lowered): a pass when a listing or the counters find it, and
             * now and then to set counters right */
            int check = r->capacity && ((io && r->usage > r->capacity) || now - r->evict_checked_at >= EVICT_CHECK_S);
            if (check)
                r->evict_checked_at = now;
            int full = check && ((io && r->usage > r->capacity) || now - r->reconciled_at >= RECONCILE_S);
            uint64_t cap = r->capacity;
            pthread_mutex_unlock(&r->lock);
            rados_ioctx_t io2 = remote_io(r, &st2);
            if (ok && check && !full) { /* the counters alone: one read per model */
                uint64_t usage;
                int known, rc = remote_usage_read(io2, &usage, &known);
                if (rc < 0 && remote_is_outage(rc)) {
                    remote_mark_down(r, rc, "usage", NULL);
                    ok = 0;
                }
                full = rc == 0 && (!known || usage > cap);
                pthread_mutex_lock(&r->lock);
                if (rc == 0 && known)
                    r->usage = usage;
                r->usage_checks += rc == 0;
                pthread_mutex_unlock(&r->lock);
            }
            if (ok && (flush || full)) {
                if (full) {
                    pthread_mutex_lock(&r->lock);
                    r->reconciled_at = now;
                    pthread_mutex_unlock(&r->lock);
                }
                int rc = full ? remote_evict_pass(r, io2) : remote_atime_flush(r, io2);
                if (rc < 0 && remote_is_outage(rc)) {
                    remote_mark_down(r, rc, full ? "eviction" : "use times", NULL);
                    ok = 0;
                }
            }
        }
        backoff = ok ? 0.5 : (backoff * 2 > RETRY_MAX_S ? RETRY_MAX_S : backoff * 2);
        /* sleep until new work arrives (or the retry is due) */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double wake = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + (ok ? 1.0 : backoff);
        ts.tv_sec = (time_t)wake;
        ts.tv_nsec = (long)((wake - (double)ts.tv_sec) * 1e9);
        pthread_mutex_lock(&r->lock);
        if (!r->stop)
            pthread_cond_timedwait(&r->cond, &r->lock, &ts);
        pthread_mutex_unlock(&r->lock);
    }
    return NULL;
}

/* ---- fetch (a local miss) ---- */

void remote_neg_forget(struct kvfs_remote *r, const char *hash)
{
    pthread_mutex_lock(&r->lock);
    for (int i = 0; i < NEG_SLOTS; i++)
        if (!strcmp(r->neg[i].hash, hash))
            r->neg[i].t = 0;
    pthread_mutex_unlock(&r->lock);
}

static int neg_hit(struct kvfs_remote *r, const char *hash)
{
    double t = remote_now_s();
    for (int i = 0; i < NEG_SLOTS; i++)
        if (t - r->neg[i].t < NEG_TTL_S && !strcmp(r->neg[i].hash, hash))
            return 1;
    return 0;
}

/* a chunk read from the pool: its use time, for eviction by least recent use */
static void note_use(struct kvfs_remote *r, struct kvfs_store *s, const char *hash)
{
    struct kvfs_chunk_info ci;
    if (remote_capacity_now(r) && kvfs_store_stat(s, hash, &ci) == 0)
        remote_atime_note(r, hash, ci.model);
}

static int fetch(void *ctx, struct kvfs_store *s, const char *hash, struct kvfs_chunk_ref **ref)
{
    struct kvfs_remote *r = ctx;
    int state;
    pthread_mutex_lock(&r->lock);
    int neg = neg_hit(r, hash);
    pthread_mutex_unlock(&r->lock);
    rados_ioctx_t io = remote_io(r, &state);
    if (neg || !io || state != ST_CONNECTED)
        return -ENOENT; /* fail fast: down, or asked a moment ago */
    uint64_t size = 0;
    char err[256];
    double t0 = remote_now_s();
    remote_fetching = 1;
    int rc = remote_fetch_object(io, hash, s, ref, &size, err, sizeof(err));
    remote_fetching = 0;
    if (rc == -ENOENT && !err[0]) {
        pthread_mutex_lock(&r->lock);
        snprintf(r->neg[r->neg_next].hash, sizeof(r->neg[0].hash), "%s", hash);
        r->neg[r->neg_next].t = remote_now_s();
        r->neg_next = (r->neg_next + 1) % NEG_SLOTS;
        pthread_mutex_unlock(&r->lock);
        return -ENOENT;
    }
    if (rc < 0 && !err[0]) { /* the pool's side */
        if (remote_is_outage(rc))
            remote_mark_down(r, rc, size ? "read" : "lookup", hash);
        return rc;
    }
    pthread_mutex_lock(&r->lock);
    if (rc)
        r->rejected++;
    else
        r->fetched++;
    pthread_mutex_unlock(&r->lock);
    if (!rc) {
        remote_mark_uploaded(r, hash);
        note_use(r, s, hash);
    }
    if (rc)
        kvfs_log(KVFS_LOG_ERR, "remote tier: object %s in pool %s rejected: %s", hash, r->pool,
                 err[0] ? err : strerror(-rc));
    else
        kvfs_log(KVFS_LOG_DEBUG, "remote tier: fetched %s (%" PRIu64 " bytes) in %.3f s", hash, size,
                 remote_now_s() - t0);
    return rc;
}

/* ---- public ---- */

/* The store's hooks for streaming a chunk only RADOS has (store.h, loader.h). */
static int size_hook(void *ctx, const char *hash, uint64_t *size) { return kvfs_remote_size(ctx, hash, size); }
static long read_range_hook(void *ctx, const char *hash, uint64_t off, void *buf, size_t len)
{
    return kvfs_remote_read_range(ctx, hash, off, buf, len);
}
static int aio_read_hook(void *ctx, const char *hash, uint64_t off, void *buf, size_t len,
                         void (*done)(void *arg, long rc), void *arg)
{
    return kvfs_remote_aio_read(ctx, hash, off, buf, len, done, arg);
}
static void note_fetched_hook(void *ctx, const char *hash) { kvfs_remote_note_fetched(ctx, hash); }

int kvfs_remote_open(struct kvfs_store *s, const struct kvfs_remote_opts *o, struct kvfs_remote **out, char *err,
                     size_t errlen)
{
    if (!o->pool || !*o->pool)
        return kvfs_errf(err, errlen, -EINVAL, "rados= needs a pool name");
    struct kvfs_remote *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->s = s;
    r->pool = strdup(o->pool);
    r->conf = o->ceph_conf ? strdup(o->ceph_conf) : NULL;
    r->id = strdup(o->rados_id ? o->rados_id : "admin");
    r->keyring = o->keyring ? strdup(o->keyring) : NULL;
    r->ns = strdup(o->ns ? o->ns : "");
    r->timeout_s = o->timeout_s > 0 ? o->timeout_s : 5;
    r->list_refresh_s = o->list_refresh_s < 0 ? 0 : o->list_refresh_s > 0 ? o->list_refresh_s : 30;
    r->capacity = o->capacity;
    r->capacity_quota = o->capacity_quota;
    r->reconciled_at = remote_now_s(); /* counters absent or over capacity bring the first pass sooner */
    r->lease_s = o->lease_s > 0 ? o->lease_s : 30;
    r->chg_keep = o->changes < 0 ? 0 : o->changes > 0 ? o->changes : KVFS_REMOTE_CHG_KEEP;
    remote_cookie_init(r);
    pthread_mutex_init(&r->lock, NULL);
    pthread_mutex_init(&r->lease_mu, NULL);
    pthread_cond_init(&r->cond, NULL);
    int rc = 0;
    if (r->ns && !remote_ns_valid(r->ns)) {
        rc = kvfs_errf(err, errlen, -EINVAL, "rados_namespace=%s: a namespace is 1-64 of A-Z a-z 0-9 . _ -", r->ns);
        goto fail;
    }
    if (!r->pool || !r->id || !r->ns || (o->keyring && !r->keyring)) {
        rc = kvfs_errf(err, errlen, -EIO, "cannot open the upload queue: out of memory");
        goto fail;
    }
    if ((rc = remote_queue_open(r, err, errlen)) || (rc = remote_listing_open(r, err, errlen)))
        goto fail;
    remote_queue_hold_queued(r);
    char why[256] = "";
    if (remote_connect(r, why, sizeof(why)) != 0) {
        r->state = ST_DOWN;
        snprintf(r->last_error, sizeof(r->last_error), "%s", why);
        kvfs_log(KVFS_LOG_WARN, "remote tier: %s; starting with the tier down (writes queue, retried)", why);
    } else { /* the capacity before the first upload */
        r->quota_at = remote_now_s();
        remote_quota_refresh(r);
    }
    if (pthread_create(&r->worker, NULL, worker_main, r)) {
        rc = kvfs_errf(err, errlen, -EAGAIN, "cannot start the upload worker");
        goto fail;
    }
    r->worker_started = 1;
    remote_enqueue_unshared(r);
    struct kvfs_store_remote hooks = {.fetch = fetch, .stored = remote_on_stored, .has = remote_has_uploaded,
                                      .list = remote_list_hook, .stat = remote_stat_hook, .size = size_hook,
                                      .read_range = read_range_hook, .aio_read = aio_read_hook,
                                      .note_fetched = note_fetched_hook, .ctx = r};
    kvfs_store_set_remote(s, &hooks);
    *out = r;
    return 0;
fail:
    kvfs_remote_close(r);
    return rc;
}

void kvfs_remote_close(struct kvfs_remote *r)
{
    if (!r)
        return;
    if (r->s)
        kvfs_store_set_remote(r->s, NULL);
    pthread_mutex_lock(&r->lock);
    r->stop = 1;
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
    if (r->worker_started)
        pthread_join(r->worker, NULL);
    if (r->io && r->n_atimes && r->state == ST_CONNECTED)
        remote_atime_flush(r, r->io); /* the last uses too (bounded by the timeout) */
    /* claims not yet uploaded: other hosts take over now rather than after a lapse */
    remote_lease_end_all(r, r->io && r->state == ST_CONNECTED ? r->io : NULL);
    if (r->io)
        rados_ioctx_destroy(r->io);
    if (r->cluster)
        rados_shutdown(r->cluster);
    if (r->q)
        sqlite3_close(r->q);
    if (r->lw)
        sqlite3_close(r->lw);
    if (r->lr)
        sqlite3_close(r->lr);
    pthread_mutex_destroy(&r->lock);
    pthread_mutex_destroy(&r->lease_mu);
    pthread_cond_destroy(&r->cond);
    free(r->pool);
    free(r->conf);
    free(r->id);
    free(r->keyring);
    free(r->ns);
    free(r->atimes);
    free(r->owners);
    free(r);
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const char *p = s ? s : ""; *p; p++)
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if ((unsigned char)*p >= 0x20)
            fputc(*p, f);
    fputc('"', f);
}

void kvfs_remote_stats(void *ctx, FILE *f)
{
    struct kvfs_remote *r = ctx;
    pthread_mutex_lock(&r->lock);
    fprintf(f,
            ",\n  \"remote\": {\"state\": \"%s\", \"pool\": \"%s\", \"namespace\": \"%s\", \"timeout_s\": %d, \"queued\": %" PRIu64
            ", \"pushed\": %" PRIu64 ", \"fetched\": %" PRIu64 ", \"rejected\": %" PRIu64 ", \"errors\": %" PRIu64
            ", \"listed\": %" PRIu64 ", \"listed_s_ago\": %.1f, \"capacity\": %" PRIu64 ", \"usage\": %" PRIu64
            ", \"pinned\": %" PRIu64 ", \"evicted\": %" PRIu64 ", \"evicted_bytes\": %" PRIu64
            ", \"evictions_run\": %" PRIu64 ", \"uses_pending\": %zu, \"usage_checks\": %" PRIu64
            ", \"index_reads\": %" PRIu64 ", \"listing_models_read\": %" PRIu64 ", \"listing_models_skipped\": %" PRIu64
            ", \"listing_models_logged\": %" PRIu64 ", \"listing_changes\": %" PRIu64 ", \"changes_kept\": %d, \"listing_took_s\": %.4f"
            ", \"capacity_from\": \"%s\", \"quota_bytes\": %" PRIu64 ", \"quota_error\": ",
            remote_state_name(r->state), r->pool, r->ns, r->timeout_s, r->queued, r->pushed, r->fetched, r->rejected,
            r->errors, r->known, r->listed_at > 0 ? remote_now_s() - r->listed_at : -1.0, r->capacity, r->usage,
            r->n_pinned, r->evicted, r->evicted_bytes, r->evict_passes, r->n_atimes, r->usage_checks,
            r->index_reads, r->list_models_read, r->list_models_skipped, r->list_models_logged, r->list_changes,
            r->chg_keep, r->list_took_s, !r->capacity_quota ? (r->capacity ? "remote_capacity" : "none") : "quota",
            r->quota_bytes);
    json_str(f, r->quota_error);
    fprintf(f, ", \"rados_id\": ");
    /* what kvfsctl remote needs to reach the same pool (paths, not keys) */
    json_str(f, r->id);
    fprintf(f, ", \"ceph_conf\": ");
    json_str(f, r->conf);
    fprintf(f, ", \"keyring\": ");
    json_str(f, r->keyring);
    pthread_mutex_lock(&r->lease_mu);
    fprintf(f, ", \"claims\": %" PRIu64 ", \"claims_waited\": %" PRIu64 ", \"claims_yours\": %" PRIu64
            ", \"leases_held\": %" PRIu64 ", \"lease_takeovers\": %" PRIu64 ", \"lease_s\": %d",
            r->claims, r->claims_waited, r->claims_yours, remote_leases_held(r), r->lease_takeovers, r->lease_s);
    pthread_mutex_unlock(&r->lease_mu);
    fprintf(f, ", \"last_error\": ");
    json_str(f, r->last_error);
    fprintf(f, "}");
    pthread_mutex_unlock(&r->lock);
}

const char *kvfs_remote_state(struct kvfs_remote *r)
{
    pthread_mutex_lock(&r->lock);
    const char *s = remote_state_name(r->state);
    pthread_mutex_unlock(&r->lock);
    return s;
}

uint64_t kvfs_remote_queued(struct kvfs_remote *r)
{
    pthread_mutex_lock(&r->lock);
    uint64_t n = r->queued;
    pthread_mutex_unlock(&r->lock);
    return n;
}

int kvfs_remote_has(struct kvfs_remote *r, const char *hash)
{
    int state;
    rados_ioctx_t io = remote_io(r, &state);
    uint64_t sz;
    time_t mt;
    return io && state == ST_CONNECTED && rados_stat(io, hash, &sz, &mt) == 0;
}

long kvfs_remote_read_range(struct kvfs_remote *r, const char *hash, uint64_t off, void *buf, size_t len)
{
    int state;
    rados_ioctx_t io = remote_io(r, &state);
    if (!io || state != ST_CONNECTED)
        return -EHOSTDOWN;
    int n = rados_read(io, hash, buf, len, off);
    if (n < 0 && remote_is_outage(n))
        remote_mark_down(r, n, "read", hash);
    return n;
}

int kvfs_remote_size(struct kvfs_remote *r, const char *hash, uint64_t *size)
{
    int state;
    rados_ioctx_t io = remote_io(r, &state);
    if (!io || state != ST_CONNECTED)
        return -EHOSTDOWN;
    pthread_mutex_lock(&r->lock);
    int neg = neg_hit(r, hash);
    pthread_mutex_unlock(&r->lock);
    if (neg)
        return -ENOENT;
    time_t mt;
    int rc = rados_stat(io, hash, size, &mt);
    if (rc < 0 && remote_is_outage(rc))
        remote_mark_down(r, rc, "lookup", hash);
    return rc < 0 ? rc : 0;
}

struct aio_call {
    void (*done)(void *arg, long rc);
    void *arg;
};

static void aio_done(rados_completion_t c, void *p)
{
    struct aio_call *a = p;
    long rc = rados_aio_get_return_value(c);
    a->done(a->arg, rc);
    free(a);
    /* released here: librados allows it once the callback runs */
    rados_aio_release(c);
}

int kvfs_remote_aio_read(struct kvfs_remote *r, const char *hash, uint64_t off, void *buf, size_t len,
                         void (*done)(void *arg, long rc), void *arg)
{
    int state;
    rados_ioctx_t io = remote_io(r, &state);
    if (!io || state != ST_CONNECTED)
        return -EHOSTDOWN;
    struct aio_call *a = malloc(sizeof(*a));
    rados_completion_t c;
    if (!a)
        return -ENOMEM;
    *a = (struct aio_call){done, arg};
    int rc = rados_aio_create_completion2(a, aio_done, &c);
    if (rc < 0) {
        free(a);
        return rc;
    }
    if ((rc = rados_aio_read(io, hash, c, buf, len, off)) < 0) {
        rados_aio_release(c);
        free(a);
    }
    return rc < 0 ? rc : 0;
}

void kvfs_remote_note_fetched(struct kvfs_remote *r, const char *hash)
{
    pthread_mutex_lock(&r->lock);
    r->fetched++;
    pthread_mutex_unlock(&r->lock);
    remote_mark_uploaded(r, hash);
    note_use(r, r->s, hash);
}

long kvfs_remote_list_model(struct kvfs_remote *r, const char *model_id,
                            int (*cb)(void *ctx, const struct kvfs_chunk_info *c), void *ctx)
{
    int state;
    rados_ioctx_t io = remote_io(r, &state);
    if (!io || state != ST_CONNECTED)
        return -EHOSTDOWN;
    return remote_list_model(io, model_id, cb, ctx);
}

#else /* built without librados */

int kvfs_remote_open(struct kvfs_store *s, const struct kvfs_remote_opts *o, struct kvfs_remote **out, char *err,
                     size_t errlen)
{
    (void)s, (void)o, (void)out;
    return kvfs_errf(err, errlen, -ENOTSUP, "kvfs was built without librados (install librados-dev, rebuild)");
}
void kvfs_remote_close(struct kvfs_remote *r) { (void)r; }
void kvfs_remote_stats(void *ctx, FILE *f) { (void)ctx, (void)f; }
const char *kvfs_remote_state(struct kvfs_remote *r) { (void)r; return "absent"; }
uint64_t kvfs_remote_queued(struct kvfs_remote *r) { (void)r; return 0; }
int kvfs_remote_has(struct kvfs_remote *r, const char *hash) { (void)r, (void)hash; return 0; }
long kvfs_remote_read_range(struct kvfs_remote *r, const char *hash, uint64_t off, void *buf, size_t len)
{
    (void)r, (void)hash, (void)off, (void)buf, (void)len;
    return -ENOTSUP;
}
long kvfs_remote_list_model(struct kvfs_remote *r, const char *model_id,
                            int (*cb)(void *ctx, const struct kvfs_chunk_info *c), void *ctx)
{
    (void)r, (void)model_id, (void)cb, (void)ctx;
    return -ENOTSUP;
}
int kvfs_remote_size(struct kvfs_remote *r, const char *hash, uint64_t *size)
{
    (void)r, (void)hash, (void)size;
    return -ENOTSUP;
}
int kvfs_remote_aio_read(struct kvfs_remote *r, const char *hash, uint64_t off, void *buf, size_t len,
                         void (*done)(void *arg, long rc), void *arg)
{
    (void)r, (void)hash, (void)off, (void)buf, (void)len, (void)done, (void)arg;
    return -ENOTSUP;
}
void kvfs_remote_note_fetched(struct kvfs_remote *r, const char *hash) { (void)r, (void)hash; }
#endif
