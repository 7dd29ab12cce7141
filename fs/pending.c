/* pending.c - drafts: files being written through chunks/NAME,
 * incoming/NAME or blends/NAME.recipe.  A draft lives in the mount's pending
 * list while it has open handles; its bytes grow in memory as writes come,
 * and each flush (close) commits it: a chunk is verified and stored (only
 * then visible in chunks/), a recipe goes to the blends service.  The list
 * (and each draft's opens) is protected by the mount's lock, a draft's
 * bytes and state (len, dirty, committed, pin_after) by its own, taken
 * after the mount's where both are held. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bigbuf.h"
#include "kvconvert.h"
#include "handle.h"
#include "inode_map.h"
#include "mount.h"
#include "node.h"
#include "pending.h"
#include "profile.h"
#include "xattr_value.h"

#define INGEST_GROW (1u << 20)

struct pending *pending_by_ino(struct kvfs_mount *m, fuse_ino_t ino)
{
    for (struct pending *p = m->pending; p; p = p->next)
        if (p->ino == ino)
            return p;
    return NULL;
}

struct pending *pending_by_name(struct kvfs_mount *m, fuse_ino_t parent, const char *name)
{
    for (struct pending *p = m->pending; p; p = p->next)
        if (p->parent == parent && !strcmp(p->name, name))
            return p;
    return NULL;
}

/* Whether the draft is still uncommitted (listed, looked up as a draft). */
int pending_uncommitted(struct pending *p)
{
    pthread_mutex_lock(&p->lock);
    int draft = !p->committed;
    pthread_mutex_unlock(&p->lock);
    return draft;
}

void pending_attr(struct pending *p, struct stat *st)
{
    memset(st, 0, sizeof(*st));
    st->st_ino = p->ino;
    st->st_mode = S_IFREG | 0644;
    st->st_nlink = 1;
    st->st_uid = getuid();
    st->st_gid = getgid();
    pthread_mutex_lock(&p->lock);
    st->st_size = (off_t)p->len;
    pthread_mutex_unlock(&p->lock);
    st->st_blksize = 1 << 20;
    clock_gettime(CLOCK_REALTIME, &st->st_mtim);
    st->st_atim = st->st_ctim = st->st_mtim;
}

/* A draft's buffer with room for cap bytes (p->len of them kept); big ones
 * are bigbuf.c's, used again from one save to the next (fresh memory costs
 * more than the copies into it) */
static int draft_grow(struct pending *p, size_t cap)
{
    uint8_t *nb;
    size_t got = cap;
    if (cap < KVFS_BIG_MIN) { /* and so was the old one: the heap's */
        if (!(nb = realloc(p->buf, cap)))
            return -ENOMEM;
    } else {
        if (kvfs_big_alloc(cap, 1, &nb, &got)) /* the largest kept: a draft's size is not known ahead */
            return -ENOMEM;
        if (p->len)
            memcpy(nb, p->buf, p->len);
        if (!kvfs_big_release(p->buf))
            free(p->buf);
    }
    p->buf = nb;
    p->cap = got;
    return 0;
}

static void draft_free(struct pending *p)
{
    if (!kvfs_big_release(p->buf))
        free(p->buf);
    p->buf = NULL;
    p->cap = 0;
}

static struct pending *pending_new(struct kvfs_mount *m, fuse_ino_t parent, const char *name)
{
    struct pending *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    pthread_mutex_init(&p->lock, NULL);
    p->parent = parent;
    snprintf(p->name, sizeof(p->name), "%s", name);
    p->pin_after = -1;
    p->dirty = 1; /* even an empty file is committed (and rejected) at close */
    p->ino = INO_PENDING_BASE + m->next_pending++;
    p->next = m->pending;
    m->pending = p;
    return p;
}

static void pending_unlink_free(struct kvfs_mount *m, struct pending *p)
{
    for (struct pending **pp = &m->pending; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    pthread_mutex_destroy(&p->lock);
    draft_free(p);
    free(p);
}

struct pending *pending_open(struct kvfs_mount *m, fuse_ino_t parent, const char *name)
{
    pthread_mutex_lock(&m->lock);
    struct pending *p = pending_by_name(m, parent, name);
    if (p && p->opens == 0 && !pending_uncommitted(p)) {
        pending_unlink_free(m, p);
        p = NULL;
    }
    if (!p)
        p = pending_new(m, parent, name);
    if (p)
        p->opens++;
    pthread_mutex_unlock(&m->lock);
    return p;
}

struct pending *pending_hold(struct kvfs_mount *m, fuse_ino_t ino)
{
    pthread_mutex_lock(&m->lock);
    struct pending *p = pending_by_ino(m, ino);
    if (p)
        p->opens++;
    pthread_mutex_unlock(&m->lock);
    return p;
}

void pending_put(struct kvfs_mount *m, struct pending *p)
{
    pthread_mutex_lock(&m->lock);
    if (--p->opens == 0) {
        pthread_mutex_lock(&p->lock);
        if (p->parent == INO_BLENDS && !p->committed && p->len)
            kvfs_log(KVFS_LOG_ERR, "rejected recipe blends/%s: %s", p->name, p->err);
        pthread_mutex_unlock(&p->lock);
        pending_unlink_free(m, p); /* committed or rejected: the draft goes */
    }
    pthread_mutex_unlock(&m->lock);
}

int pending_truncate(struct kvfs_mount *m, struct pending *p, uint64_t size)
{
    int rc = 0;
    pthread_mutex_lock(&p->lock);
    if (size > m->max_ingest) {
        rc = -EFBIG;
    } else if (size > p->cap) {
        rc = draft_grow(p, size);
    }
    if (!rc) {
        if (size > p->len)
            memset(p->buf + p->len, 0, size - p->len);
        p->len = size;
        p->dirty = 1;
        p->committed = 0;
    }
    pthread_mutex_unlock(&p->lock);
    return rc;
}

static const char *where(const struct pending *p)
{
    return p->parent == INO_CHUNKS ? "chunks" : p->parent == INO_BLENDS ? "blends"
         : p->parent == INO_LLAMA ? "llama" : "incoming";
}

int pending_write(struct kvfs_mount *m, struct pending *p, const char *buf, size_t size, off_t off)
{
    uint64_t end = (uint64_t)off + size;
    if (end > m->max_ingest) {
        kvfs_log(KVFS_LOG_ERR, "refused %s/%s: larger than max_ingest (%" PRIu64 " bytes)", where(p),
                 p->name, m->max_ingest);
        return -EFBIG;
    }
    pthread_mutex_lock(&p->lock);
    if (ingest_profile() && !p->n_writes++)
        p->t_first_write = ingest_clock();
    if (end > p->cap) {
        size_t cap = p->cap ? p->cap : INGEST_GROW;
        while (cap < end)
            cap *= 2;
        if (draft_grow(p, cap)) {
            pthread_mutex_unlock(&p->lock);
            return -ENOMEM;
        }
    }
    if ((uint64_t)off > p->len)
        memset(p->buf + p->len, 0, (size_t)off - p->len);
    memcpy(p->buf + off, buf, size);
    if (end > p->len)
        p->len = end;
    p->dirty = 1;
    p->committed = 0;
    pthread_mutex_unlock(&p->lock);
    return 0;
}

/* every stored layer's K/V rows a multiple of 64 values: what the
 * quantized dtypes' blocks need (a layer's own width with LAYER_SHAPES) */
static int rows_quantizable(const struct kvfs_header *h)
{
    for (uint32_t l = 0; l < (h->flags & KVFS_FLAG_LAYER_SHAPES ? h->fp.n_layer : 0); l++)
        if (kvfs_layer_kv_dim(h, l) % 64)
            return 0;
    return (h->flags & KVFS_FLAG_LAYER_SHAPES) || (h->fp.n_kv_head * h->fp.head_dim) % 64 == 0;
}

/* kvfs_store_put_keep, or with async its _async (written after we return) */
static int put_keep(struct kvfs_mount *m, uint8_t **img, size_t len, int async, char hash[KVFS_HASH_HEX_LEN + 1],
                    char *err, size_t errlen)
{
    return async ? kvfs_store_put_keep_async(m->store, img, len, hash, err, errlen)
                 : kvfs_store_put_keep(m->store, img, len, hash, err, errlen);
}

/* ingest_put; own (may be NULL): buf is the caller's image to give away,
 * kept in the RAM tier once stored (kvfs_store_put_keep: taken on success);
 * async (with own): stored after this returns (kvfs_store_put_keep_async) */
static int put_image(struct kvfs_mount *m, const void *buf, size_t len, uint8_t **own, int async,
                     char hash[KVFS_HASH_HEX_LEN + 1], char *err, size_t errlen)
{
    struct kvfs_header h;
    if (!m->kv_quant || kvfs_header_parse(buf, len, &h, NULL, 0) ||
        kvfs_dtype_bits(m->kv_quant) >= kvfs_dtype_bits(h.dtype) || !rows_quantizable(&h))
        return own ? put_keep(m, own, len, async, hash, err, errlen) /* as it is (it verifies) */
                   : kvfs_store_put(m->store, buf, len, NULL, hash, err, errlen);
    struct kvfs_writer w;
    int rc = kvfs_chunk_convert(buf, len, m->kv_quant, &w, err, errlen);
    if (rc)
        return rc;
    size_t size = w.size;
    rc = own ? put_keep(m, &w.buf, w.size, async, hash, err, errlen)
             : kvfs_store_put(m->store, w.buf, w.size, NULL, hash, err, errlen);
    if (!rc)
        kvfs_log(KVFS_LOG_DEBUG, "chunk %s re-encoded %s -> %s (kv_quant): %zu -> %zu bytes", hash,
                 kvfs_dtype_name(h.dtype), kvfs_dtype_name(m->kv_quant), len, size);
    kvfs_writer_free(&w);
    return rc;
}

int ingest_put(struct kvfs_mount *m, const void *buf, size_t len, char hash[KVFS_HASH_HEX_LEN + 1], char *err,
               size_t errlen)
{
    return put_image(m, buf, len, NULL, 0, hash, err, errlen);
}

int ingest_put_keep(struct kvfs_mount *m, uint8_t **img, size_t len, int async, char hash[KVFS_HASH_HEX_LEN + 1],
                    char *err, size_t errlen)
{
    return put_image(m, *img, len, img, async, hash, err, errlen);
}

int pending_commit(struct kvfs_mount *m, struct pending *p, int partial_ok)
{
    char err[512] = "", hash[KVFS_HASH_HEX_LEN + 1], expect[KVFS_HASH_HEX_LEN + 1];
    int rc = 0;
    pthread_mutex_lock(&p->lock);
    if (!p->dirty) {
        rc = p->committed ? 0 : -EIO;
        pthread_mutex_unlock(&p->lock);
        return rc;
    }
    const uint8_t *data = p->buf ? p->buf : (const uint8_t *)""; /* an empty draft has no buffer */
    if (p->parent == INO_BLENDS) {
        rc = m->hooks.blends_set_recipe(m, p->name, data, p->len, partial_ok, err, sizeof(err));
        if (rc == -EINPROGRESS) { /* not the writer that opened it: more may come */
            pthread_mutex_unlock(&p->lock);
            return 0;
        }
        p->dirty = 0;
        p->committed = rc == 0;
        /* several processes may write one recipe through a shared descriptor
         * (each close flushes): it is logged as rejected only if it still is
         * when its last handle goes (pending_put) */
        snprintf(p->err, sizeof(p->err), "%s [%s]", rc ? err : "", rc ? strerror(-rc) : "");
        pthread_mutex_unlock(&p->lock);
        if (rc)
            kvfs_log(KVFS_LOG_DEBUG, "blends/%s as written so far: %s [%s]", p->name, err, strerror(-rc));
        return rc;
    }
    const char *want = NULL;
    double t_commit = ingest_profile() ? ingest_clock() : 0;
    if (p->parent == INO_CHUNKS) {
        kvfs_parse_chunk_name(p->name, expect);
        want = expect;
    }
    if (p->parent == INO_LLAMA) /* a llama.cpp state: converted, then stored like any chunk */
        rc = m->hooks.llama_ingest(m, p->name, data, p->len, hash, err, sizeof(err));
    else if (!want) /* incoming/: the mount names it */
        rc = ingest_put(m, data, p->len, hash, err, sizeof(err));
    else /* chunks/<hash>.kv: the name fixes the dtype (the hash covers it) */
        rc = kvfs_store_put(m->store, data, p->len, want, hash, err, sizeof(err));
    p->dirty = 0;
    p->committed = rc == 0;
    if (ingest_profile()) {
        fprintf(stderr, "kvfs: ingest %s/%s: %zu bytes in %u writes over %.4f s, commit %.4f s\n", where(p), p->name,
                p->len, p->n_writes, t_commit - p->t_first_write, ingest_clock() - t_commit);
        p->n_writes = 0;
    }
    if (rc == 0) {
        memcpy(p->hash, hash, sizeof(hash));
        draft_free(p); /* the store has it now */
        int pin = p->pin_after;
        pthread_mutex_unlock(&p->lock);
        remember_chunk(m, hash, 0); /* not a kernel lookup: the kernel knows the draft's inode */
        if (pin >= 0)
            kvfs_store_set_pinned(m->store, hash, pin);
        kvfs_log(KVFS_LOG_INFO, "%s %s/%s as chunks/%s.kv", p->parent == INO_LLAMA && m->llama_async ?
                 "converted (written after the close)" : "stored", where(p), p->name, hash);
        return 0;
    }
    size_t len = p->len; /* another handle may write the draft again once it is unlocked */
    pthread_mutex_unlock(&p->lock);
    kvfs_log(KVFS_LOG_ERR, "rejected %s/%s (%zu bytes): %s [%s]", where(p), p->name, len, err, strerror(-rc));
    return rc;
}

/* ---- the drafts' operations (node.h): a draft is a file being written in
 * chunks/, incoming/, blends/ or llama/ ---- */

/* A handle on draft p, which the caller holds: the handle keeps that hold
 * (and gives it back if it cannot be made: NULL, out of memory). */
static struct fh *open_draft(struct kvfs_mount *m, fuse_req_t req, struct pending *p, int trunc, int writable,
                             struct fuse_file_info *fi)
{
    struct fh *h = fh_new(FH_PENDING);
    if (!h) {
        pending_put(m, p);
        return NULL;
    }
    if (trunc)
        pending_truncate(m, p, 0);
    h->p = p;
    h->writable = writable;
    h->opener = fuse_req_ctx(req)->pid;
    fi->direct_io = 1; /* writes go straight to us, no page cache for drafts */
    return h;
}

struct fh *open_pending(struct kvfs_mount *m, fuse_req_t req, fuse_ino_t parent, const char *name, int trunc,
                        struct fuse_file_info *fi, struct stat *st)
{
    struct pending *p = pending_open(m, parent, name);
    struct fh *h = p ? open_draft(m, req, p, trunc, 1, fi) : NULL;
    if (h && st)
        pending_attr(p, st);
    return h;
}

void reply_open_draft(struct kvfs_mount *m, fuse_req_t req, struct fuse_file_info *fi, struct fh *h)
{
    if (h)
        reply_open(m, req, fi, h);
    else
        fuse_reply_err(req, ENOMEM);
}

static int drafts_getattr(struct kvfs_mount *m, fuse_ino_t ino, struct stat *st)
{
    pthread_mutex_lock(&m->lock);
    struct pending *p = pending_by_ino(m, ino);
    if (p)
        pending_attr(p, st);
    pthread_mutex_unlock(&m->lock);
    return p ? 0 : -ENOENT;
}

static void drafts_open(struct kvfs_mount *m, fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct pending *p = pending_hold(m, ino);
    if (!p) {
        /* a draft that was committed and released since the kernel looked it
         * up: ESTALE makes the kernel look the name up again and retry */
        fuse_reply_err(req, ESTALE);
        return;
    }
    reply_open_draft(m, req, fi,
                     open_draft(m, req, p, (fi->flags & O_TRUNC) != 0, (fi->flags & O_ACCMODE) != O_RDONLY, fi));
}

static int drafts_setattr(struct kvfs_mount *m, fuse_ino_t ino, const struct stat *attr, int to_set, struct stat *st)
{
    struct pending *p = pending_hold(m, ino); /* keep it alive while we work on it */
    int rc = 0;
    if (!p)
        return -ENOENT;
    if (to_set & FUSE_SET_ATTR_SIZE)
        rc = pending_truncate(m, p, (uint64_t)attr->st_size);
    /* mode, owner and times of a draft are accepted and not kept: cp -a
     * sets them; a chunk's metadata comes from its content */
    if (!rc)
        pending_attr(p, st);
    pending_put(m, p);
    return rc;
}

/* cp -a copies our xattrs along: the pin is kept for the commit, the rest ignored */
static int drafts_setxattr(struct kvfs_mount *m, fuse_ino_t ino, const char *name, const char *value, size_t size)
{
    pthread_mutex_lock(&m->lock);
    struct pending *p = pending_by_ino(m, ino);
    if (p && !strcmp(name, "user.kvfs.pinned") && xattr_bool(value, size) >= 0) {
        pthread_mutex_lock(&p->lock); /* read by the commit under it */
        p->pin_after = xattr_bool(value, size);
        pthread_mutex_unlock(&p->lock);
    }
    pthread_mutex_unlock(&m->lock);
    return p ? 0 : -EPERM;
}

const struct dir_ops drafts_ops = {.getattr = drafts_getattr, .open = drafts_open, .setattr = drafts_setattr,
                                   .setxattr = drafts_setxattr};
