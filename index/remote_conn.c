/* remote_conn.c - the RADOS tier's connection to the cluster and whether
 * it is up (remote_internal.h). */
#include "remote_internal.h"

#ifdef KVFS_HAVE_RADOS
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

double remote_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

const char *remote_state_name(int st)
{
    return st == ST_CONNECTED ? "connected" : st == ST_DOWN ? "down" : "connecting";
}

void remote_mark_down(struct kvfs_remote *r, int rc, const char *what, const char *hash)
{
    pthread_mutex_lock(&r->lock);
    int was = r->state;
    r->errors++;
    r->state = ST_DOWN;
    snprintf(r->last_error, sizeof(r->last_error), "%s %s: %s", what, hash ? hash : "", strerror(-rc));
    pthread_mutex_unlock(&r->lock);
    if (was != ST_DOWN)
        kvfs_log(KVFS_LOG_WARN, "remote tier (pool %s) down: %s %s: %s; local tiers keep serving, writes are queued",
                 r->pool, what, hash ? hash : "", strerror(-rc));
}

void remote_mark_up(struct kvfs_remote *r)
{
    pthread_mutex_lock(&r->lock);
    int was = r->state;
    r->state = ST_CONNECTED;
    pthread_mutex_unlock(&r->lock);
    if (was == ST_DOWN)
        kvfs_log(KVFS_LOG_INFO, "remote tier (pool %s) reachable again", r->pool);
}

int remote_is_outage(int rc)
{
    return rc == -ETIMEDOUT || rc == -ENOTCONN || rc == -ECONNREFUSED || rc == -EHOSTUNREACH || rc == -ESHUTDOWN ||
           rc == -EAGAIN || rc == -EIO;
}

int remote_connect(struct kvfs_remote *r, char *err, size_t errlen)
{
    rados_t c;
    rados_ioctx_t io;
    char t[16];
    int rc = rados_create(&c, r->id);
    if (rc < 0)
        return kvfs_errf(err, errlen, rc, "rados_create: %s", strerror(-rc));
    snprintf(t, sizeof(t), "%d", r->timeout_s);
    if ((rc = rados_conf_read_file(c, r->conf)) < 0) {
        kvfs_errf(err, errlen, rc, "cannot read ceph config %s: %s", r->conf ? r->conf : "(default search)",
                  strerror(-rc));
        goto fail;
    }
    if (r->keyring && (rc = rados_conf_set(c, "keyring", r->keyring)) < 0) {
        kvfs_errf(err, errlen, rc, "rados_keyring=%s: %s", r->keyring, strerror(-rc));
        goto fail;
    }
    /* every call is bounded: mount, monitor and OSD operations */
    rados_conf_set(c, "client_mount_timeout", t);
    rados_conf_set(c, "rados_mon_op_timeout", t);
    rados_conf_set(c, "rados_osd_op_timeout", t);
    rados_conf_set(c, "objecter_tick_interval", "1");
    rados_conf_set(c, "objecter_timeout", "2");
    if ((rc = rados_connect(c)) < 0) {
        kvfs_errf(err, errlen, rc, "cannot connect to the cluster as client.%s: %s%s", r->id, strerror(-rc),
                  rc == -EACCES || rc == -EPERM ? " (its cephx key: rados_keyring=, or the config's keyring)" : "");
        goto fail;
    }
    if ((rc = rados_ioctx_create(c, r->pool, &io)) < 0) {
        kvfs_errf(err, errlen, rc, "pool %s: %s", r->pool, strerror(-rc));
        goto fail;
    }
    /* every object, the omap indexes and the probe included, lives in the
     * namespace: cephx caps on it keep tenants apart */
    rados_ioctx_set_namespace(io, r->ns[0] ? r->ns : NULL);
    /* a key without caps on the namespace connects, then every call fails:
     * say so once, here, not for each chunk (ENOENT: allowed, no probe yet) */
    uint64_t sz;
    time_t mt;
    if ((rc = rados_stat(io, "kvfs.probe", &sz, &mt)) == -EPERM || rc == -EACCES) {
        kvfs_errf(err, errlen, rc, "client.%s may not use pool %s%s%s: %s (its cephx caps: osd 'allow rw pool=%s%s%s')",
                  r->id, r->pool, r->ns[0] ? " namespace " : "", r->ns, strerror(-rc), r->pool,
                  r->ns[0] ? " namespace=" : "", r->ns);
        rados_ioctx_destroy(io);
        goto fail;
    }
    rc = 0;
    pthread_mutex_lock(&r->lock);
    r->cluster = c;
    r->io = io;
    r->state = ST_CONNECTED;
    pthread_mutex_unlock(&r->lock);
    return 0;
fail:
    rados_shutdown(c);
    return rc;
}

int remote_ns_valid(const char *ns)
{
    size_t n = strlen(ns);
    if (n > 64)
        return 0;
    for (const char *p = ns; *p; p++)
        if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '.' ||
              *p == '_' || *p == '-'))
            return 0;
    return 1;
}

rados_ioctx_t remote_io(struct kvfs_remote *r, int *state)
{
    pthread_mutex_lock(&r->lock);
    rados_ioctx_t io = r->io;
    *state = r->state;
    pthread_mutex_unlock(&r->lock);
    return io;
}
#endif
