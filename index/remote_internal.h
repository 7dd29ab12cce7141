/* remote_internal.h - the RADOS tier's state (struct kvfs_remote) and its
 * connection to the cluster (remote_conn.c), for the tier's parts: the
 * upload queue (remote_queue.h), the fleet listing (remote_listing.h) and
 * the tier itself (remote_rados.c, remote.h).  index/ only. */
#ifndef KVFS_REMOTE_INTERNAL_H
#define KVFS_REMOTE_INTERNAL_H

#include "store.h"

#ifdef KVFS_HAVE_RADOS
#include <pthread.h>
#include <rados/librados.h>
#include <sqlite3.h>

enum { ST_CONNECTING, ST_CONNECTED, ST_DOWN };
#define NEG_SLOTS 64 /* misses remembered (remote_rados.c) */

struct kvfs_remote {
    struct kvfs_store *s;
    char *pool, *conf, *id, *keyring, *ns; /* ns: "" for the default namespace */
    int timeout_s;
    pthread_mutex_t lock;        /* everything below */
    pthread_cond_t cond;
    rados_t cluster;
    rados_ioctx_t io;            /* NULL until connected once */
    int state, stop;
    sqlite3 *q;                  /* the durable write-back queue */
    uint64_t queued, pushed, fetched, rejected, errors;
    char last_error[256];
    struct { char hash[KVFS_HASH_HEX_LEN + 1]; double t; } neg[NEG_SLOTS];
    int neg_next;
    pthread_t worker;
    int worker_started;
    double list_refresh_s, listed_at; /* fleet listing: refresh period, last refresh (monotonic) */
    double listed_full_at;            /* last refresh that read every model index */
    uint64_t list_models_read, list_models_skipped; /* model indexes a refresh read whole, or skipped (unchanged) */
    uint64_t list_models_logged, list_changes;      /* ... or brought up to date from their change logs, changes applied */
    double list_took_s;               /* the last refresh's duration */
    int chg_keep;                     /* changes each index's log keeps (remote_usage.h); 0: none written */
    sqlite3 *lw, *lr;                 /* the listing (remote-list.db): worker writes, FUSE threads read;
                                       * separate from the queue so a refresh never shares its transaction */
    uint64_t known;                   /* chunks in the listing */
    /* remote_capacity (remote_evict.c): the pool's bytes held within it */
    uint64_t capacity;                /* 0: unbounded */
    int capacity_quota;               /* capacity follows the pool's quota (remote_quota.h) */
    int quota_read;                   /* a quota was read once */
    uint64_t quota_bytes;             /* its max_bytes as last read (0: none) */
    char quota_error[256];            /* why it could not be read, "" when it was */
    double quota_at;                  /* last read (monotonic) */
    uint64_t usage_checks, index_reads; /* capacity checks by the counters; full reads of every index */
    double reconciled_at;             /* last full pass (monotonic) */
    uint64_t usage, n_pinned;         /* as of the last listing or eviction pass */
    uint64_t evicted, evicted_bytes, evict_passes;
    char cookie[96];                  /* this process's holder name of the evictor lock */
    struct remote_atime *atimes;      /* chunks used since the last flush (worker writes them) */
    size_t n_atimes;
    double atimes_at;                 /* last flush (monotonic) */
    double evict_checked_at;          /* last usage check without a listing (monotonic) */
    /* claims (remote_lease.c): one computation per fleet */
    pthread_mutex_t lease_mu;         /* leases and the claim counters; never held over a RADOS call */
    struct remote_lease *leases;      /* this mount's claims: taking, held, produced */
    int lease_s;                      /* a lease's duration (renewed at a third of it) */
    uint64_t claims, claims_waited, claims_yours, lease_takeovers;
    uint64_t *owners;                 /* control files open (a lease needs its owner alive) */
    size_t n_owners, cap_owners;
    int n_waiting;                    /* claims polling now (each holds a FUSE thread) */
};

/* A use of a chunk not yet written into its model's index. */
struct remote_atime {
    char hash[KVFS_HASH_HEX_LEN + 1];
    char model[17];
    int64_t ms; /* unix milliseconds */
};

/* "" or 1-64 of A-Z a-z 0-9 . _ - */
int remote_ns_valid(const char *ns);
/* seconds on CLOCK_MONOTONIC */
double remote_now_s(void);
/* "connected", "down" or "connecting" */
const char *remote_state_name(int st);
/* Record a failure: the tier is down until a call succeeds again. */
void remote_mark_down(struct kvfs_remote *r, int rc, const char *what, const char *hash);
void remote_mark_up(struct kvfs_remote *r);
/* A timed-out or refused call means the cluster is unreachable; ENOENT,
 * EBADMSG and friends are answers. */
int remote_is_outage(int rc);
/* Connect (every call bounded by timeout_s) and open the pool: r->io. */
int remote_connect(struct kvfs_remote *r, char *err, size_t errlen);
/* the pool's I/O context (NULL until connected once) and the state */
rados_ioctx_t remote_io(struct kvfs_remote *r, int *state);
/* Read a chunk's object out of the pool into the local store (verified,
 * durable, in place; remote_fetch.c); ref as the store's fetch hook's.
 * *size: the object's bytes once known.  -errno: with err set, the store
 * refused or failed to keep it; with err "" the pool's answer (-ENOENT:
 * no such object) or an outage. */
int remote_fetch_object(rados_ioctx_t io, const char *hash, struct kvfs_store *s, struct kvfs_chunk_ref **ref,
                        uint64_t *size, char *err, size_t errlen);

#endif
#endif
