/* store_remote.c - the store's side of a tier below the local disk (the
 * hooks of struct kvfs_store_remote, store.h; remote.h implements them on
 * RADOS): setting them, what the remote tier's listing knows, lookups that
 * fetch, and holding a chunk the tier has yet to receive. */
#include <errno.h>
#include <pthread.h>
#include <string.h>

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

int kvfs_store_lookup(struct kvfs_store *s, const char *hash, struct kvfs_chunk_info *out)
{
    int rc = kvfs_store_stat(s, hash, out);
    if (rc == -ENOENT && store_fetch_remote(s, hash) == 0)
        rc = kvfs_store_stat(s, hash, out);
    return rc;
}

int kvfs_store_hold(struct kvfs_store *s, const char *hash, int held)
{
    pthread_mutex_lock(&s->lock);
    struct kvfs_chunk_info *c = chunk_rows_get(&s->rows, hash);
    if (c)
        c->held = held ? 1 : 0;
    pthread_mutex_unlock(&s->lock);
    return c ? 0 : -ENOENT;
}
