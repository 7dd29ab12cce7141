/* remote_quota.c - remote_capacity from the pool's quota (remote_quota.h). */
#include "remote_quota.h"

#ifdef KVFS_HAVE_RADOS
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t remote_quota_capacity(uint64_t max_bytes)
{
    return max_bytes - max_bytes / 16;
}

uint64_t remote_capacity_now(struct kvfs_remote *r)
{
    pthread_mutex_lock(&r->lock);
    uint64_t cap = r->capacity;
    pthread_mutex_unlock(&r->lock);
    return cap;
}

/* a JSON string's body: pool names may hold any printable character */
static void json_escape(const char *s, char *out, size_t cap)
{
    size_t n = 0;
    for (; *s && n + 7 < cap; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            n += (size_t)snprintf(out + n, cap - n, "\\%c", ch);
        else if (ch < 0x20)
            n += (size_t)snprintf(out + n, cap - n, "\\u%04x", ch);
        else
            out[n++] = (char)ch;
    }
    out[n] = 0;
}

/* In `osd pool ls detail` JSON, the pool's object: its "quota_max_bytes"
 * follows its "pool_name" before the next pool's. */
static int quota_of(const char *body, const char *pool_json, uint64_t *max_bytes)
{
    char pat[600];
    snprintf(pat, sizeof(pat), "\"pool_name\":\"%s\"", pool_json);
    const char *p = strstr(body, pat);
    if (!p)
        return -ENOENT;
    p += strlen(pat);
    const char *q = strstr(p, "\"quota_max_bytes\":"), *next = strstr(p, "\"pool_name\":");
    if (!q || (next && next < q))
        return -EBADMSG;
    char *end;
    q += strlen("\"quota_max_bytes\":");
    *max_bytes = strtoull(q, &end, 10);
    return end == q ? -EBADMSG : 0;
}

int remote_quota_read(struct kvfs_remote *r, uint64_t *max_bytes, char *err, size_t errlen)
{
    char pool[512];
    pthread_mutex_lock(&r->lock);
    rados_t c = r->cluster;
    pthread_mutex_unlock(&r->lock);
    if (!c)
        return kvfs_errf(err, errlen, -ENOTCONN, "not connected");
    json_escape(r->pool, pool, sizeof(pool));
    /* the quota as the OSD map holds it (`osd pool get-quota` answers from
     * the manager's pool statistics: ENOENT on a cluster without one); the
     * read the key needs to use librados at all (mon 'allow r', or
     * 'profile simple-rados-client') allows it */
    const char *cmds[1] = {"{\"prefix\": \"osd pool ls\", \"detail\": \"detail\", \"format\": \"json\"}"};
    char *out = NULL, *outs = NULL, *body = NULL;
    size_t outlen = 0, outslen = 0;
    int rc = rados_mon_command(c, cmds, 1, "", 0, &out, &outlen, &outs, &outslen);
    if (rc < 0) {
        kvfs_errf(err, errlen, rc, "osd pool ls detail as client.%s: %s%s%.*s%s", r->id, strerror(-rc),
                  outslen ? " (" : "", (int)(outslen > 200 ? 200 : outslen), outs ? outs : "", outslen ? ")" : "");
        if (rc == -EACCES || rc == -EPERM)
            snprintf(err + strlen(err), errlen - strlen(err),
                     "; the key's mon caps must allow reading the OSD map (mon 'allow r'), or set remote_capacity=SIZE");
        goto out;
    }
    if (!(body = malloc(outlen + 1))) {
        rc = -ENOMEM;
        goto out;
    }
    memcpy(body, out ? out : "", outlen);
    body[outlen] = 0;
    if ((rc = quota_of(body, pool, max_bytes)))
        kvfs_errf(err, errlen, rc, "osd pool ls detail: %s", rc == -ENOENT ? "no such pool in the answer"
                                                                        : "no quota_max_bytes in the answer");
out:
    free(body);
    rados_buffer_free(out);
    rados_buffer_free(outs);
    return rc;
}

void remote_quota_refresh(struct kvfs_remote *r)
{
    if (!r->capacity_quota)
        return;
    char err[sizeof(r->quota_error)] = "";
    uint64_t max_bytes = 0;
    int rc = remote_quota_read(r, &max_bytes, err, sizeof(err));
    pthread_mutex_lock(&r->lock);
    int said = r->quota_error[0] != 0 && !strcmp(r->quota_error, err);
    uint64_t was = r->quota_bytes;
    int first = !r->quota_read;
    if (rc) {
        snprintf(r->quota_error, sizeof(r->quota_error), "%s", err);
    } else {
        r->quota_error[0] = 0;
        r->quota_read = 1;
        r->quota_bytes = max_bytes;
        r->capacity = remote_quota_capacity(max_bytes);
    }
    uint64_t cap = r->capacity;
    pthread_mutex_unlock(&r->lock);
    if (rc && !said && rc != -ENOTCONN)
        kvfs_log(KVFS_LOG_WARN, "remote tier: cannot read the pool's quota: %s; remote_capacity stays %s", err,
                 cap ? "as last read" : "unbounded");
    else if (!rc && (first || was != max_bytes)) {
        if (max_bytes)
            kvfs_log(KVFS_LOG_INFO, "remote tier: pool %s quota max_bytes %" PRIu64 ": remote_capacity %" PRIu64
                     " (a sixteenth left for objects outside the indexes and the monitors' lag)",
                     r->pool, max_bytes, cap);
        else
            kvfs_log(KVFS_LOG_INFO, "remote tier: pool %s has no max_bytes quota: remote_capacity unbounded", r->pool);
    }
}
#endif
