/* passthrough.c - FUSE passthrough for chunk and blend reads.
 *
 * When the kernel and libfuse (>= 3.17) offer it, an open chunk or blend
 * result is backed by the in-memory file that holds its decoded image (a
 * private huge-page tmpfs, else a memfd: index/image.c):
 * the kernel serves read() and mmap() from those pages and never asks the
 * daemon.  The open still goes through the daemon, so verification, hits and
 * last access, pinning and eviction work as before; the handle keeps the
 * image's reference until release, and the kernel's reference on the file
 * keeps its pages for a reader even after the chunk is evicted or removed.
 * Anything else (llama.cpp views, drafts, text files), an image that is not
 * in such a file, or a failed registration is read through the daemon. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "image.h"
#include "handle.h"
#include "mount.h"
#include "passthrough.h"
#include "log.h"

#if FUSE_MAKE_VERSION(FUSE_MAJOR_VERSION, FUSE_MINOR_VERSION) >= FUSE_MAKE_VERSION(3, 17)
#define KVFS_HAVE_PASSTHROUGH 1
#else
#define KVFS_HAVE_PASSTHROUGH 0
#endif

int passthrough_parse(struct kvfs_mount *m, const char *opt)
{
    struct kvfs_passthrough *p = &m->pt;
    pthread_mutex_init(&p->lock, NULL);
    p->want = !opt || !strcmp(opt, "auto") ? 0 : !strcmp(opt, "on") ? 1 : !strcmp(opt, "off") ? -1 : 2;
    if (p->want == 2)
        return -EINVAL;
    snprintf(p->why, sizeof(p->why), "%s",
             p->want < 0 ? "passthrough=off" : KVFS_HAVE_PASSTHROUGH ? "not negotiated yet" : "libfuse < 3.17");
    return 0;
}

void passthrough_init(struct kvfs_mount *m, struct fuse_conn_info *conn)
{
    struct kvfs_passthrough *p = &m->pt;
    if (p->want < 0)
        return;
#if KVFS_HAVE_PASSTHROUGH
    if (!(conn->capable & FUSE_CAP_PASSTHROUGH)) {
        snprintf(p->why, sizeof(p->why), "the kernel does not offer it (CONFIG_FUSE_PASSTHROUGH)");
    } else if (!fuse_set_feature_flag(conn, FUSE_CAP_PASSTHROUGH)) {
        snprintf(p->why, sizeof(p->why), "libfuse refused the capability");
    } else {
        /* the backing files live on tmpfs (stacking depth 0): one level
         * above it is enough, and lets kvfs itself be stacked on once */
        conn->max_backing_stack_depth = 1;
        p->active = 1;
        p->why[0] = '\0';
        kvfs_img_set_shared(1); /* images from now on are files the kernel can read */
    }
#else
    (void)conn;
#endif
    if (p->active)
        kvfs_log(KVFS_LOG_INFO, "reads: FUSE passthrough (chunks and blend results are read by the kernel; images in %s)",
                 kvfs_img_backing());
    else
        kvfs_log(p->want > 0 ? KVFS_LOG_ERR : KVFS_LOG_INFO, "reads: through the daemon: passthrough %s: %s",
                 p->want > 0 ? "was asked for but is unavailable" : "unavailable", p->why);
}

/* One inode's registered backing file, shared by its opens. */
struct pt_backing {
    fuse_ino_t ino;
    char key[KVFS_HASH_HEX_LEN + 1]; /* the image's chunk hash or result key */
    int backing_id, opens;
    struct pt_backing *next;
};

static struct pt_backing **find_locked(struct kvfs_passthrough *p, fuse_ino_t ino)
{
    struct pt_backing **b = &p->backings;
    while (*b && (*b)->ino != ino)
        b = &(*b)->next;
    return b;
}

/* libfuse's backing-file calls (without libfuse 3.17 passthrough_init never
 * turns passthrough on, so nothing calls them) */
static int backing_open(fuse_req_t req, int fd)
{
#if KVFS_HAVE_PASSTHROUGH
    return fuse_passthrough_open(req, fd);
#else
    (void)req, (void)fd;
    return -EOPNOTSUPP;
#endif
}

/* closes the registration at *slot and unlinks it */
static void backing_drop(fuse_req_t req, struct pt_backing **slot)
{
    struct pt_backing *b = *slot;
#if KVFS_HAVE_PASSTHROUGH
    fuse_passthrough_close(req, b->backing_id);
#else
    (void)req;
#endif
    *slot = b->next;
    free(b);
}

/* The inode's backing id: the one its other opens share (same key), or a
 * new registration of fd.  0 when it cannot be had (then the daemon reads). */
static int backing_for(struct kvfs_mount *m, fuse_req_t req, fuse_ino_t ino, const char *key, int fd)
{
    struct kvfs_passthrough *p = &m->pt;
    int id = 0;
    pthread_mutex_lock(&p->lock);
    struct pt_backing **slot = find_locked(p, ino), *b = *slot;
    if (b && b->opens == 0 && strcmp(b->key, key)) {
        /* left by abandoned opens only: nobody reads it, close it now */
        backing_drop(req, slot);
        b = NULL;
    }
    if (b) {
        /* another image under this inode (a recipe rewritten while the old
         * result is open): the kernel takes one backing file per inode */
        if (!strcmp(b->key, key)) {
            b->opens++;
            id = b->backing_id;
        }
    } else if (fd >= 0 && (b = calloc(1, sizeof(*b)))) {
        id = backing_open(req, fd);
        if (id > 0) {
            *b = (struct pt_backing){ino, "", id, 1, NULL};
            snprintf(b->key, sizeof(b->key), "%s", key);
            *slot = b;
        } else {
            if (atomic_fetch_add(&p->errors, 1) == 0) /* say it once; later ones are counted */
                kvfs_log(KVFS_LOG_ERR, "passthrough: cannot register a backing file (%s); reading through the daemon",
                         strerror(id < 0 ? -id : EIO));
            free(b);
            id = 0;
        }
    }
    pthread_mutex_unlock(&p->lock);
    return id;
}

void passthrough_attach(struct kvfs_mount *m, fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, struct fh *h)
{
    struct kvfs_passthrough *p = &m->pt;
    if (!p->active || !h->ref || h->view) {
        atomic_fetch_add(&p->daemon_opens, 1);
        return;
    }
    int id = backing_for(m, req, ino, kvfs_chunk_key(h->ref), kvfs_img_fd(kvfs_chunk_data(h->ref)));
    if (id > 0) {
#if KVFS_HAVE_PASSTHROUGH
        fi->backing_id = id;
#endif
        fi->direct_io = 0; /* the kernel reads the backing file, page cache and all */
        fi->keep_cache = 0;
        h->pt_ino = ino;
        atomic_fetch_add(&p->opens, 1);
        return;
    }
    /* through the daemon, uncached: an inode the kernel caches cannot also
     * be opened in passthrough mode, and it may be at any time */
    fi->direct_io = 1;
    fi->keep_cache = 0;
    atomic_fetch_add(&p->daemon_opens, 1);
}

void passthrough_detach(struct kvfs_mount *m, fuse_req_t req, struct fh *h)
{
    struct kvfs_passthrough *p = &m->pt;
    if (!h->pt_ino)
        return;
    pthread_mutex_lock(&p->lock);
    struct pt_backing **slot = find_locked(p, h->pt_ino), *b = *slot;
    if (b && --b->opens == 0)
        backing_drop(req, slot);
    pthread_mutex_unlock(&p->lock);
    h->pt_ino = 0;
}

void passthrough_abandon(struct kvfs_mount *m, struct fh *h)
{
    /* without a request the registration cannot be closed here: it stays,
     * unused (opens 0), until the inode's next open reuses or replaces it
     * and its release closes it, or the unmount */
    struct kvfs_passthrough *p = &m->pt;
    if (!h->pt_ino)
        return;
    pthread_mutex_lock(&p->lock);
    struct pt_backing *b = *find_locked(p, h->pt_ino);
    if (b && b->opens > 0)
        b->opens--;
    pthread_mutex_unlock(&p->lock);
    h->pt_ino = 0;
}

void passthrough_free(struct kvfs_mount *m)
{
    struct kvfs_passthrough *p = &m->pt;
    while (p->backings) {
        struct pt_backing *b = p->backings;
        p->backings = b->next;
        free(b);
    }
}

void passthrough_stats(void *ctx, FILE *f)
{
    struct kvfs_passthrough *p = &((struct kvfs_mount *)ctx)->pt;
    fprintf(f,
            ",\n  \"reads\": {\"path\": \"%s\", \"why\": \"%s\", \"images\": \"%s\", \"passthrough_opens\": %llu, "
            "\"daemon_opens\": %llu, "
            "\"passthrough_errors\": %llu, \"daemon_read_requests\": %llu}",
            p->active ? "passthrough" : "daemon", p->why, kvfs_img_backing(), (unsigned long long)atomic_load(&p->opens),
            (unsigned long long)atomic_load(&p->daemon_opens), (unsigned long long)atomic_load(&p->errors),
            (unsigned long long)atomic_load(&p->read_requests));
}
