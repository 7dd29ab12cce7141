/* handle.c - open file handles (fi->fh): what an open gave (a chunk or a
 * blend result, a draft, a read-only text) and their lifetime.  A handle is
 * created by fh_new(), given to the kernel by reply_open(), read through
 * reply_read(), and freed, with what it owns, by whichever of its release and
 * its last in-flight read ends second (the holds count). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "draft.h"
#include "handle.h"
#include "mount.h"
#include "profile.h"
#include "llama_state.h"

struct fh *fh_new(enum fh_kind kind)
{
    struct fh *h = calloc(1, sizeof(*h));
    if (!h)
        return NULL;
    h->kind = kind;
    atomic_init(&h->holds, 0);
    return h;
}

static void track(struct kvfs_mount *m, struct fh *h)
{
    pthread_mutex_lock(&m->fh_lock);
    h->prev = NULL;
    h->next = m->handles;
    if (m->handles)
        m->handles->prev = h;
    m->handles = h;
    h->tracked = 1;
    pthread_mutex_unlock(&m->fh_lock);
}

static void untrack(struct kvfs_mount *m, struct fh *h)
{
    pthread_mutex_lock(&m->fh_lock);
    if (h->tracked) {
        if (h->prev)
            h->prev->next = h->next;
        else
            m->handles = h->next;
        if (h->next)
            h->next->prev = h->prev;
        h->tracked = 0;
    }
    pthread_mutex_unlock(&m->fh_lock);
}

/* What a handle owns goes when it is released and no reply uses it. */
static void fh_free(struct kvfs_mount *m, struct fh *h)
{
    untrack(m, h);
    if (h->kind == FH_CHUNK) {
        if (h->view && ingest_profile())
            fprintf(stderr, "kvfs: view read: %u reads, %llu bytes, %.4f s in the daemon, %.4f s open\n", h->n_reads,
                    (unsigned long long)h->read_bytes, h->read_s, ingest_clock() - h->opened_at);
        if (h->view)
            kvfs_llama_view_free(h->view);
        free(h->view);
        if (h->ref)
            kvfs_chunk_release(h->ref);
    } else if (h->kind == FH_STATS) {
        free(h->text);
    } else if (h->kind == FH_PENDING) {
        m->hooks.pending_put(m, h->p); /* the draft's last handle: it goes (a rejected recipe is logged) */
    }
    if (h->blend_ino)
        m->hooks.blends_release(m, h->blend_ino);
    free(h);
}

void fh_unhold(struct kvfs_mount *m, struct fh *h)
{
    if (atomic_fetch_sub(&h->holds, 1) == 0)
        fh_free(m, h);
}

/* An open whose caller is gone (interrupted, killed) gets -ENOENT from the
 * reply: the kernel will never release that handle, so we do. */
static void unless_abandoned(struct kvfs_mount *m, int reply_rc, struct fh *h)
{
    if (reply_rc == -ENOENT) {
        kvfs_log(KVFS_LOG_INFO, "an open was abandoned by its caller; handle released");
        m->hooks.passthrough_abandon(m, h);
        fh_unhold(m, h);
    }
}

void fh_release_all(struct kvfs_mount *m)
{
    for (;;) {
        pthread_mutex_lock(&m->fh_lock);
        struct fh *h = m->handles;
        pthread_mutex_unlock(&m->fh_lock);
        if (!h)
            break;
        fh_free(m, h);
    }
}

void reply_open(struct kvfs_mount *m, fuse_req_t req, struct fuse_file_info *fi, struct fh *h)
{
    track(m, h); /* before the reply: its release may come at once */
    fi->fh = (uint64_t)(uintptr_t)h;
    unless_abandoned(m, fuse_reply_open(req, fi), h);
}

void reply_create(struct kvfs_mount *m, fuse_req_t req, const struct fuse_entry_param *e,
                  struct fuse_file_info *fi, struct fh *h)
{
    track(m, h);
    fi->fh = (uint64_t)(uintptr_t)h;
    unless_abandoned(m, fuse_reply_create(req, e, fi), h);
}

static void reply_bytes(struct fh *h, fuse_req_t req, size_t size, off_t off)
{
    if (h->kind == FH_STATS) {
        size_t o = (size_t)off < h->text_len ? (size_t)off : h->text_len;
        size_t n = h->text_len - o < size ? h->text_len - o : size;
        fuse_reply_buf(req, h->text + o, n);
        return;
    }
    if (h->kind == FH_CHUNK && h->view) { /* a llama.cpp state, made as it is read */
        char *buf = size ? malloc(size) : NULL;
        if (size && !buf) {
            fuse_reply_err(req, ENOMEM);
            return;
        }
        double t0 = ingest_profile() ? ingest_clock() : 0;
        size_t n = kvfs_llama_view_read(h->view, kvfs_chunk_data(h->ref), (uint64_t)off, buf, size);
        fuse_reply_buf(req, buf, n);
        free(buf);
        if (ingest_profile()) {
            h->n_reads++;
            h->read_bytes += n;
            h->read_s += ingest_clock() - t0;
        }
        return;
    }
    if (h->kind == FH_CHUNK) {
        uint64_t total = kvfs_chunk_size(h->ref);
        const uint8_t *data = kvfs_chunk_data(h->ref);
        size_t n = 0;
        if ((uint64_t)off < total)
            n = (uint64_t)off + size > total ? (size_t)(total - (uint64_t)off) : size;
        fuse_reply_buf(req, n ? (const char *)data + off : NULL, n); /* no extra copy */
        return;
    }
    struct pending *p = h->p;
    pthread_mutex_lock(&p->lock);
    size_t n = 0;
    if (p->buf && (size_t)off < p->len)
        n = p->len - (size_t)off < size ? p->len - (size_t)off : size;
    fuse_reply_buf(req, n ? (const char *)p->buf + off : NULL, n);
    pthread_mutex_unlock(&p->lock);
}

void reply_read(struct kvfs_mount *m, struct fh *h, fuse_req_t req, size_t size, off_t off)
{
    atomic_fetch_add(&h->holds, 1);
    reply_bytes(h, req, size, off);
    fh_unhold(m, h);
}
