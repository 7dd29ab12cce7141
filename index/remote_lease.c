/* remote_lease.c - claims (remote.h, "claims"): one computation of a chunk
 * per fleet.  A lease is an exclusive cls_lock (rados_lock_exclusive) on the
 * object "kvfs.lease.<hash>" of the tier's namespace, held with this
 * process's cookie and a duration, so a crashed holder's lapses.  The
 * object is not a chunk: no index lists it, so the listing, usage and
 * eviction never see it; it is removed when the lease ends. */
#include "remote.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef KVFS_HAVE_RADOS
#include "remote_lease.h"

#define LEASE_NAME "kvfs.lease"
#define POLL_MS 200 /* a waiting claim looks at the pool and the lease this often */
#define WAITING_MAX 8 /* claims polling at once: each holds one of the mount's 16 FUSE threads */

enum { L_TAKING, L_HELD, L_PRODUCED };

struct remote_lease {
    struct remote_lease *next;
    char hash[KVFS_HASH_HEX_LEN + 1];
    uint64_t owner; /* the control fd's handle; 0 once produced */
    int state;
    double renewed_at; /* monotonic */
};

static void lease_oid(const char *hash, char oid[96])
{
    snprintf(oid, 96, "kvfs.lease.%s", hash);
}

static struct remote_lease *find(struct kvfs_remote *r, const char *hash)
{
    for (struct remote_lease *l = r->leases; l; l = l->next)
        if (!strcmp(l->hash, hash))
            return l;
    return NULL;
}

static void unlink_lease(struct kvfs_remote *r, struct remote_lease *x)
{
    for (struct remote_lease **p = &r->leases; *p; p = &(*p)->next)
        if (*p == x) {
            *p = x->next;
            free(x);
            return;
        }
}

static int take(struct kvfs_remote *r, rados_ioctx_t io, const char *hash, int renew)
{
    char oid[96];
    struct timeval d = {r->lease_s, 0};
    lease_oid(hash, oid);
    int rc = rados_lock_exclusive(io, oid, LEASE_NAME, r->cookie, "kvfs claim", &d,
                                  renew ? LIBRADOS_LOCK_FLAG_RENEW : 0);
    return rc == -EEXIST ? 0 : rc; /* EEXIST: this process's already */
}

/* End a lease: renewed first, so a lease that lapsed and went to another
 * host is not removed under it; then the object goes, lock and all. */
static void end_lease(struct kvfs_remote *r, rados_ioctx_t io, const char *hash)
{
    char oid[96];
    lease_oid(hash, oid);
    if (io && take(r, io, hash, 1) == 0 && rados_remove(io, oid) < 0)
        rados_unlock(io, oid, LEASE_NAME, r->cookie);
}

static int owner_alive(struct kvfs_remote *r, uint64_t owner)
{
    for (size_t i = 0; i < r->n_owners; i++)
        if (r->owners[i] == owner)
            return 1;
    return 0;
}

void kvfs_remote_owner_open(struct kvfs_remote *r, uint64_t owner)
{
    pthread_mutex_lock(&r->lease_mu);
    if (r->n_owners == r->cap_owners) {
        size_t cap = r->cap_owners ? 2 * r->cap_owners : 16;
        void *p = realloc(r->owners, cap * sizeof(*r->owners));
        if (p) {
            r->owners = p;
            r->cap_owners = cap;
        }
    }
    if (r->n_owners < r->cap_owners) /* else its claims hold no lease: they answer yours, local */
        r->owners[r->n_owners++] = owner;
    pthread_mutex_unlock(&r->lease_mu);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

int kvfs_remote_claim(struct kvfs_remote *r, const char *hash, uint64_t owner, int timeout_ms,
                      int (*cancelled)(void *), void *cctx, int *waited_ms, char *err, size_t errlen)
{
    double t0 = remote_now_s();
    int waited = 0, rc;
    struct kvfs_chunk_info ci;
    *waited_ms = 0;
    pthread_mutex_lock(&r->lease_mu);
    r->claims++;
    pthread_mutex_unlock(&r->lease_mu);
    for (;;) {
        if (kvfs_store_stat(r->s, hash, &ci) == 0) {
            rc = KVFS_CLAIMED_PRESENT;
            break;
        }
        int state;
        rados_ioctx_t io = remote_io(r, &state);
        if (!io || state != ST_CONNECTED) { /* cannot coordinate: compute here rather than wait */
            rc = KVFS_CLAIMED_LOCAL;
            break;
        }
        /* this mount: one claim per chunk (the lease's cookie is the mount's) */
        pthread_mutex_lock(&r->lease_mu);
        struct remote_lease *l = find(r, hash);
        int mine = l && l->owner == owner && l->state == L_HELD, busy = l && !mine;
        if (!l) {
            if ((l = calloc(1, sizeof(*l)))) {
                snprintf(l->hash, sizeof(l->hash), "%s", hash);
                l->owner = owner;
                l->state = L_TAKING;
                l->next = r->leases;
                r->leases = l;
            }
        }
        pthread_mutex_unlock(&r->lease_mu);
        if (mine) {
            rc = KVFS_CLAIMED_YOURS;
            break;
        }
        if (!l) {
            rc = -ENOMEM;
            break;
        }
        uint64_t sz;
        time_t mt;
        rc = busy ? -EBUSY : 0;
        int st = busy ? 0 : rados_stat(io, hash, &sz, &mt);
        if (st == 0 && !busy) {
            rc = KVFS_CLAIMED_PRESENT;
        } else if (!busy && st != -ENOENT) {
            rc = st;
        } else if (!busy && (rc = take(r, io, hash, 0)) == 0) {
            /* the holder may have uploaded and let go just before */
            if (rados_stat(io, hash, &sz, &mt) == 0) {
                end_lease(r, io, hash);
                rc = KVFS_CLAIMED_PRESENT;
            } else {
                rc = KVFS_CLAIMED_YOURS;
            }
        }
        int abandoned = 0;
        if (!busy) {
            pthread_mutex_lock(&r->lease_mu);
            /* its owner closed meanwhile (a killed caller): nobody would end the lease */
            if (rc == KVFS_CLAIMED_YOURS && !owner_alive(r, owner)) {
                abandoned = 1;
                rc = -EINTR;
            }
            if (rc == KVFS_CLAIMED_YOURS) {
                l->state = L_HELD;
                l->renewed_at = remote_now_s();
                r->claims_yours++;
                r->lease_takeovers += waited != 0; /* its holder let go without the chunk, or lapsed */
            } else {
                unlink_lease(r, l);
            }
            pthread_mutex_unlock(&r->lease_mu);
        }
        if (abandoned)
            end_lease(r, io, hash);
        if (rc != -EBUSY)
            break;
        if (!waited) {
            pthread_mutex_lock(&r->lease_mu);
            int full = r->n_waiting >= WAITING_MAX;
            if (!full) {
                waited = 1;
                r->n_waiting++;
                r->claims_waited++;
            }
            pthread_mutex_unlock(&r->lease_mu);
            if (full) { /* the caller asks again (libkvfs_claim does) rather than starve the mount */
                rc = kvfs_errf(err, errlen, -EAGAIN, "%d claims are waiting on this mount: ask again", WAITING_MAX);
                break;
            }
        }
        if ((remote_now_s() - t0) * 1000 >= timeout_ms) {
            rc = kvfs_errf(err, errlen, -ETIMEDOUT, "another host holds the lease of %s; waited %d ms", hash,
                           timeout_ms);
            break;
        }
        if (cancelled && cancelled(cctx)) {
            rc = -EINTR;
            break;
        }
        sleep_ms(POLL_MS);
    }
    if (waited) {
        pthread_mutex_lock(&r->lease_mu);
        r->n_waiting--;
        pthread_mutex_unlock(&r->lease_mu);
    }
    *waited_ms = (int)((remote_now_s() - t0) * 1000);
    if (rc == KVFS_CLAIMED_PRESENT)
        remote_neg_forget(r, hash); /* the caller opens it next */
    if (rc < 0 && rc != -ETIMEDOUT && rc != -EINTR && rc != -EAGAIN) {
        if (remote_is_outage(rc))
            remote_mark_down(r, rc, "claim", hash);
        kvfs_errf(err, errlen, rc, "claim of %s: %s%s", hash, strerror(-rc),
                  rc == -EPERM || rc == -EOPNOTSUPP ? " (the key needs the lock class: osd caps 'allow rwx' or "
                                                      "'class lock rw')" : "");
    }
    return rc;
}

int kvfs_remote_unclaim(struct kvfs_remote *r, const char *hash, uint64_t owner)
{
    char (*ends)[KVFS_HASH_HEX_LEN + 1] = NULL;
    size_t n = 0, cap = 0;
    int found = 0;
    pthread_mutex_lock(&r->lease_mu);
    for (size_t i = 0; !hash && i < r->n_owners; i++)
        if (r->owners[i] == owner) {
            r->owners[i] = r->owners[--r->n_owners];
            break;
        }
    for (struct remote_lease **p = &r->leases; *p;) {
        struct remote_lease *l = *p;
        if (l->owner == owner && l->state == L_HELD && (!hash || !strcmp(l->hash, hash))) {
            found = 1;
            if (n == cap) {
                void *nb = realloc(ends, (cap + 4) * sizeof(*ends));
                if (nb) {
                    ends = nb;
                    cap += 4;
                }
            }
            if (n < cap) /* else no longer renewed: it lapses */
                memcpy(ends[n++], l->hash, KVFS_HASH_HEX_LEN + 1);
            *p = l->next;
            free(l);
        } else {
            p = &l->next;
        }
    }
    pthread_mutex_unlock(&r->lease_mu);
    int state;
    rados_ioctx_t io = remote_io(r, &state);
    for (size_t i = 0; i < n; i++)
        end_lease(r, state == ST_CONNECTED ? io : NULL, ends[i]);
    free(ends);
    return hash && !found ? -ENOENT : 0;
}

void remote_lease_produced(struct kvfs_remote *r, const char *hash)
{
    pthread_mutex_lock(&r->lease_mu);
    struct remote_lease *l = find(r, hash);
    if (l && l->state == L_HELD) {
        l->state = L_PRODUCED; /* kept until the upload; the caller's close no longer ends it */
        l->owner = 0;
    }
    pthread_mutex_unlock(&r->lease_mu);
}

void remote_lease_pushed(struct kvfs_remote *r, rados_ioctx_t io, const char *hash)
{
    pthread_mutex_lock(&r->lease_mu);
    struct remote_lease *l = find(r, hash);
    int ours = l && l->state != L_TAKING;
    if (ours)
        unlink_lease(r, l);
    pthread_mutex_unlock(&r->lease_mu);
    if (ours)
        end_lease(r, io, hash);
}

void remote_lease_renew(struct kvfs_remote *r, rados_ioctx_t io)
{
    double now = remote_now_s();
    for (;;) {
        char hash[KVFS_HASH_HEX_LEN + 1] = "";
        pthread_mutex_lock(&r->lease_mu);
        for (struct remote_lease *l = r->leases; l && !hash[0]; l = l->next)
            if (l->state != L_TAKING && now - l->renewed_at >= r->lease_s / 3.0) {
                memcpy(hash, l->hash, sizeof(hash));
                l->renewed_at = now; /* tried: not again in this pass */
            }
        pthread_mutex_unlock(&r->lease_mu);
        if (!hash[0])
            return;
        int rc = take(r, io, hash, 1);
        if (rc < 0 && !remote_is_outage(rc)) {
            /* lapsed and taken, or gone: the chunk's computation is another host's now */
            kvfs_log(KVFS_LOG_WARN, "remote tier: lease of %s lost: %s", hash, strerror(-rc));
            pthread_mutex_lock(&r->lease_mu);
            struct remote_lease *l = find(r, hash);
            if (l && l->state != L_TAKING)
                unlink_lease(r, l);
            pthread_mutex_unlock(&r->lease_mu);
        }
    }
}

void remote_lease_end_all(struct kvfs_remote *r, rados_ioctx_t io)
{
    pthread_mutex_lock(&r->lease_mu);
    struct remote_lease *l = r->leases;
    r->leases = NULL;
    pthread_mutex_unlock(&r->lease_mu);
    while (l) {
        struct remote_lease *next = l->next;
        if (l->state != L_TAKING)
            end_lease(r, io, l->hash);
        free(l);
        l = next;
    }
}

uint64_t remote_leases_held(struct kvfs_remote *r)
{
    uint64_t n = 0;
    for (struct remote_lease *l = r->leases; l; l = l->next)
        n += l->state != L_TAKING;
    return n;
}

long kvfs_remote_leases(struct kvfs_remote *r, int (*cb)(void *ctx, const char *hash, int held), void *ctx)
{
    int state;
    rados_ioctx_t io = remote_io(r, &state);
    rados_list_ctx_t lc;
    if (!io)
        return -EHOSTDOWN;
    int rc = rados_nobjects_list_open(io, &lc);
    if (rc < 0)
        return rc;
    long n = 0;
    const char *oid;
    static const char prefix[] = "kvfs.lease.";
    while ((rc = rados_nobjects_list_next(lc, &oid, NULL, NULL)) == 0) {
        if (strncmp(oid, prefix, sizeof(prefix) - 1) || strlen(oid) != sizeof(prefix) - 1 + KVFS_HASH_HEX_LEN)
            continue;
        char hash[KVFS_HASH_HEX_LEN + 1];
        memcpy(hash, oid + sizeof(prefix) - 1, sizeof(hash));
        /* free or lapsed: ours now, so removing it cannot take it from a holder */
        int trc = take(r, io, hash, 0), held = trc == -EBUSY;
        if (trc == 0 && rados_remove(io, oid) < 0)
            rados_unlock(io, oid, LEASE_NAME, r->cookie);
        if (trc == 0 || held) {
            n++;
            if (cb(ctx, hash, held))
                break;
        }
    }
    rados_nobjects_list_close(lc);
    return rc < 0 && rc != -ENOENT ? rc : n;
}

#else

long kvfs_remote_leases(struct kvfs_remote *r, int (*cb)(void *ctx, const char *hash, int held), void *ctx)
{
    (void)r, (void)cb, (void)ctx;
    return -ENOTSUP;
}

int kvfs_remote_claim(struct kvfs_remote *r, const char *hash, uint64_t owner, int timeout_ms,
                      int (*cancelled)(void *), void *cctx, int *waited_ms, char *err, size_t errlen)
{
    (void)r, (void)hash, (void)owner, (void)timeout_ms, (void)cancelled, (void)cctx, (void)err, (void)errlen;
    *waited_ms = 0;
    return KVFS_CLAIMED_LOCAL;
}
int kvfs_remote_unclaim(struct kvfs_remote *r, const char *hash, uint64_t owner)
{
    (void)r, (void)hash, (void)owner;
    return 0;
}
void kvfs_remote_owner_open(struct kvfs_remote *r, uint64_t owner) { (void)r, (void)owner; }
#endif
