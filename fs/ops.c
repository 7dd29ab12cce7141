/* ops.c - the FUSE low-level operations of the kvfs namespace, and their
 * table (kvfs_ll_ops):
 *
 *   /chunks/<hash>.kv      one file per chunk (fs/chunks.c)
 *   /incoming/<any>        drop box: a file written here is stored under its own hash
 *   /blends/NAME.recipe    a blend: NAME.kv its result, NAME.err why it failed (fs/blends.c)
 *   /llama/                llama.cpp's view of chunks and blends (fs/llama.c)
 *   /.kvfs/stats           read-only JSON; /.kvfs/control the ioctl endpoint (fs/meta.c, fs/control.c)
 *
 * Each operation finds the directory an inode is or lies in (node.h,
 * node_ops) and calls that directory's operation, or does what every
 * directory does alike: drafts being written (fs/pending.c), open file
 * handles (fs/handle.c), chunk inodes the kernel knows (fs/inode_map.c),
 * listings.  Every reply is an errno from the storage core or a namespace
 * rule; no input can make the daemon abort.
 */
#include "ops.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "blends.h"
#include "chunks.h"
#include "control.h"
#include "handle.h"
#include "inode_map.h"
#include "llama.h"
#include "log.h"
#include "meta.h"
#include "mount.h"
#include "node.h"
#include "passthrough.h"
#include "pending.h"

/* Which directory's operations an inode takes (node_class): the tables
 * live with their directories; this is the one place that knows them all. */

/* ---- nothing ---- */

static int none_getattr(struct kvfs_mount *m, fuse_ino_t ino, struct stat *st)
{
    (void)m, (void)ino, (void)st;
    return -ENOENT;
}

static void none_open(struct kvfs_mount *m, fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)m, (void)ino, (void)fi;
    fuse_reply_err(req, ENOENT);
}

static const struct dir_ops none_ops = {.getattr = none_getattr, .open = none_open};

const struct dir_ops *node_ops(fuse_ino_t ino)
{
    static const struct dir_ops *const TABLE[NODE_CLASSES] = {
        [NODE_NONE] = &none_ops,     [NODE_ROOT] = &root_ops,   [NODE_CHUNKS] = &chunks_ops,
        [NODE_INCOMING] = &incoming_ops, [NODE_BLENDS] = &blends_ops, [NODE_LLAMA] = &llama_ops,
        [NODE_META] = &meta_ops,     [NODE_DRAFT] = &drafts_ops};
    return TABLE[node_class(ino)];
}

/* ---- attributes ---- */

static int attr_of(struct kvfs_mount *m, fuse_ino_t ino, struct stat *st)
{
    if (node_is_dir(ino)) {
        dir_attr(m, ino, st);
        return 0;
    }
    return node_ops(ino)->getattr(m, ino, st);
}

static int reply_entry(fuse_req_t req, const struct stat *st, double attr_timeout)
{
    struct fuse_entry_param e;
    memset(&e, 0, sizeof(e));
    e.ino = st->st_ino;
    e.attr = *st;
    e.attr_timeout = attr_timeout;
    e.entry_timeout = attr_timeout;
    return fuse_reply_entry(req, &e);
}

/* ---- lookup / forget / getattr ---- */

/* parent/name as a draft not yet stored (a directory that takes them) */
static int draft_entry(struct kvfs_mount *m, fuse_ino_t parent, const char *name, struct stat *st)
{
    pthread_mutex_lock(&m->lock);
    struct pending *p = pending_by_name(m, parent, name);
    if (p && pending_uncommitted(p))
        pending_attr(p, st);
    else
        p = NULL;
    pthread_mutex_unlock(&m->lock);
    return p ? 0 : -ENOENT;
}

static void kvfs_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct kvfs_mount *m = kvfs_mount_of(req);
    const struct dir_ops *d = node_is_dir(parent) ? node_ops(parent) : NULL;
    struct stat st;
    double timeout = 0;
    if (d && d->drafts && draft_entry(m, parent, name, &st) == 0) {
        reply_entry(req, &st, 0);
        return;
    }
    if (d && d->lookup && d->lookup(m, name, &st, &timeout) == 0) {
        /* the caller is gone: a chunk's lookup, counted, is no kernel's */
        if (reply_entry(req, &st, timeout) == -ENOENT && node_is_chunk(st.st_ino))
            forget_chunks(m, &(struct fuse_forget_data){.ino = st.st_ino, .nlookup = 1}, 1);
        return;
    }
    /* a negative entry with no timeout: chunks may appear at any moment */
    struct fuse_entry_param e;
    memset(&e, 0, sizeof(e));
    fuse_reply_entry(req, &e);
}

/* The kernel dropped nlookup lookups of an inode: a chunk's entry in the
 * inode map goes with its last one.  Other inodes are fixed or live in
 * their own lists (drafts, blends), so their forget has nothing to do. */
static void kvfs_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
    forget_chunks(kvfs_mount_of(req), &(struct fuse_forget_data){.ino = ino, .nlookup = nlookup}, 1);
    fuse_reply_none(req);
}

static void kvfs_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
    forget_chunks(kvfs_mount_of(req), forgets, count);
    fuse_reply_none(req);
}

static void kvfs_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)fi;
    struct stat st;
    int rc = attr_of(kvfs_mount_of(req), ino, &st);
    if (rc)
        fuse_reply_err(req, -rc);
    else
        fuse_reply_attr(req, &st, node_timeout(ino));
}

/* ---- create / open / read / write ---- */

static void kvfs_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                        struct fuse_file_info *fi)
{
    struct kvfs_mount *m = kvfs_mount_of(req);
    const struct dir_ops *d = node_is_dir(parent) ? node_ops(parent) : NULL;
    struct stat st;
    struct fh *h = NULL;
    int rc = !S_ISREG(mode) || !d || !d->new_name ? -EPERM : d->new_name(name);
    if (rc || !(h = open_pending(m, req, parent, name, 1, fi, &st))) {
        fuse_reply_err(req, rc ? -rc : ENOMEM);
        return;
    }
    struct fuse_entry_param e;
    memset(&e, 0, sizeof(e));
    e.ino = st.st_ino;
    e.attr = st;
    reply_create(m, req, &e, fi, h);
}

static void kvfs_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
    (void)parent; (void)name; (void)mode; (void)rdev;
    fuse_reply_err(req, EPERM);
}

static void kvfs_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    if (node_is_dir(ino))
        fuse_reply_err(req, EISDIR);
    else
        node_ops(ino)->open(kvfs_mount_of(req), req, ino, fi);
}

static void kvfs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
    (void)ino;
    struct kvfs_mount *m = kvfs_mount_of(req);
    struct fh *h = (struct fh *)(uintptr_t)fi->fh;
    atomic_fetch_add(&m->pt.read_requests, 1);
    if (off < 0) {
        fuse_reply_err(req, EINVAL);
        return;
    }
    reply_read(m, h, req, size, off);
}

static void kvfs_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
                       struct fuse_file_info *fi)
{
    (void)ino;
    struct kvfs_mount *m = kvfs_mount_of(req);
    struct fh *h = (struct fh *)(uintptr_t)fi->fh;
    if (h->kind != FH_PENDING) {
        fuse_reply_err(req, EBADF);
        return;
    }
    struct pending *p = h->p;
    if (off < 0) {
        fuse_reply_err(req, EINVAL);
        return;
    }
    int rc = pending_write(m, p, buf, size, off);
    if (rc)
        fuse_reply_err(req, -rc);
    else
        fuse_reply_write(req, size);
}

static void kvfs_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    struct fh *h = (struct fh *)(uintptr_t)fi->fh;
    int rc = 0;
    /* a recipe is often written by several processes through one
     * descriptor ({ echo; cat; } > r.recipe): a close by a process other
     * than the opener is not the end of it, so a recipe that only lacks a
     * chunk or its query yet does not fail that close */
    if (h->kind == FH_PENDING && h->writable)
        rc = pending_commit(kvfs_mount_of(req), h->p, fuse_req_ctx(req)->pid != h->opener);
    fuse_reply_err(req, -rc);
}

static void kvfs_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
    (void)ino; (void)datasync; (void)fi;
    fuse_reply_err(req, 0); /* stored chunks are already durable; drafts commit at close */
}

static void kvfs_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct kvfs_mount *m = kvfs_mount_of(req);
    struct fh *h = (struct fh *)(uintptr_t)fi->fh;
    if (ino == INO_CONTROL)
        kvfs_control_release(m, fi->fh);
    passthrough_detach(m, req, h);
    fh_unhold(m, h);
    fuse_reply_err(req, 0);
}

/* ---- setattr ---- */

static void kvfs_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                         struct fuse_file_info *fi)
{
    (void)fi;
    struct kvfs_mount *m = kvfs_mount_of(req);
    const struct dir_ops *d = node_is_dir(ino) ? NULL : node_ops(ino);
    struct stat st;
    int rc;
    if (d && d->setattr)
        rc = d->setattr(m, ino, attr, to_set, &st);
    else if (to_set & FUSE_SET_ATTR_SIZE)
        rc = -EPERM; /* chunks and blends are immutable */
    else
        rc = attr_of(m, ino, &st); /* chmod/chown/utimes: accepted, not kept */
    if (rc)
        fuse_reply_err(req, -rc);
    else
        fuse_reply_attr(req, &st, 0);
}

/* ---- unlink and refusals ---- */

static void kvfs_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    const struct dir_ops *d = node_is_dir(parent) ? node_ops(parent) : NULL;
    fuse_reply_err(req, d && d->unlink ? -d->unlink(kvfs_mount_of(req), name) : EPERM);
}

static void kvfs_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
    (void)parent; (void)mode;
    kvfs_log(KVFS_LOG_WARN, "refused mkdir %s: the namespace is fixed", name);
    fuse_reply_err(req, EPERM);
}

static void kvfs_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    (void)parent; (void)name;
    fuse_reply_err(req, EPERM);
}

static void kvfs_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                        const char *newname, unsigned int flags)
{
    (void)parent; (void)newparent; (void)flags;
    kvfs_log(KVFS_LOG_WARN, "refused rename %s -> %s: chunk names are content hashes", name, newname);
    fuse_reply_err(req, EPERM);
}

static void kvfs_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
    (void)ino; (void)newparent; (void)newname;
    fuse_reply_err(req, EPERM);
}

static void kvfs_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
    (void)link; (void)parent; (void)name;
    fuse_reply_err(req, EPERM);
}

/* ---- directories ---- */

/* A directory's entries as of opendir, so offsets stay stable across
 * readdir calls: named entries (dots, fixed files, blends, drafts), then
 * this host's chunk hashes; then, for a directory of chunks, the remote
 * listing's, read a page at a time from its table in hash order (a pool
 * may list millions: memory stays what one page needs). */
struct dir_entry {
    char name[256];
    fuse_ino_t ino;
};

#define REMOTE_PAGE 256 /* rows of the remote listing read per query */
/* Past this many chunk inodes held by the kernel, readdirplus gives chunks'
 * names without inodes: listing a pool of millions would otherwise make the
 * kernel hold an inode, and this mount a map entry, for every one. */
#define PLUS_INODES_MAX 16384

struct dir_snapshot {
    struct dir_entry *named;
    size_t n_named, cap_named;
    char (*hashes)[KVFS_HASH_HEX_LEN + 1];
    size_t n, cap;
    int lists_remote;
    pthread_mutex_t mu;                       /* the cursor below */
    size_t remote_pos;                        /* the next remote entry's index past the snapshot */
    char remote_after[KVFS_HASH_HEX_LEN + 1]; /* the last remote row consumed ("": none) */
};

static int grow(void **arr, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return 0;
    size_t nc = *cap ? *cap * 2 : 16;
    void *na = realloc(*arr, nc * elem);
    if (!na)
        return -ENOMEM;
    *arr = na;
    *cap = nc;
    return 0;
}

static int add_named(void *ctx, const char *name, fuse_ino_t ino)
{
    struct dir_snapshot *d = ctx;
    if (grow((void **)&d->named, &d->cap_named, d->n_named, sizeof(*d->named)))
        return -ENOMEM;
    snprintf(d->named[d->n_named].name, sizeof(d->named[0].name), "%s", name);
    d->named[d->n_named++].ino = ino;
    return 0;
}

static int snap_cb(const struct kvfs_chunk_info *c, void *ctx)
{
    struct dir_snapshot *d = ctx;
    if (grow((void **)&d->hashes, &d->cap, d->n, sizeof(*d->hashes)))
        return -ENOMEM;
    memcpy(d->hashes[d->n++], c->hash, KVFS_HASH_HEX_LEN + 1);
    return 0;
}

static int named_entries(struct kvfs_mount *m, fuse_ino_t ino, const struct dir_ops *d, struct dir_snapshot *s)
{
    int rc;
    if ((rc = add_named(s, ".", ino)) || (rc = add_named(s, "..", INO_ROOT)) || (d->list && (rc = d->list(m, add_named, s))))
        return rc;
    if (d->drafts == DRAFTS_LISTED) {
        pthread_mutex_lock(&m->lock);
        for (struct pending *p = m->pending; p && !rc; p = p->next)
            if (p->parent == ino && pending_uncommitted(p))
                rc = add_named(s, p->name, p->ino);
        pthread_mutex_unlock(&m->lock);
    }
    return rc;
}

static void snapshot_free(struct dir_snapshot *d)
{
    pthread_mutex_destroy(&d->mu);
    free(d->named);
    free(d->hashes);
    free(d);
}

static void kvfs_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct kvfs_mount *m = kvfs_mount_of(req);
    if (!node_is_dir(ino)) {
        fuse_reply_err(req, ENOTDIR);
        return;
    }
    const struct dir_ops *d = node_ops(ino);
    struct dir_snapshot *s = calloc(1, sizeof(*s));
    if (!s) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    pthread_mutex_init(&s->mu, NULL);
    s->lists_remote = d->lists_chunks;
    if (named_entries(m, ino, d, s) != 0 || (d->lists_chunks && kvfs_store_list(m->store, snap_cb, s) != 0)) {
        snapshot_free(s);
        fuse_reply_err(req, ENOMEM);
        return;
    }
    fi->fh = (uint64_t)(uintptr_t)s;
    fuse_reply_open(req, fi);
}

static void kvfs_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    snapshot_free((struct dir_snapshot *)(uintptr_t)fi->fh);
    fuse_reply_err(req, 0);
}

/* Entry i of the snapshot: its name and attributes (with plus, all of
 * them); -ENOENT when it went since opendir (a draft stored, a blend
 * forgotten, a chunk removed). */
static int snapshot_entry(struct kvfs_mount *m, const struct dir_ops *d, const struct dir_snapshot *s, size_t i,
                          int plus, char *name, size_t cap, struct stat *st)
{
    memset(st, 0, sizeof(*st));
    if (i < s->n_named) {
        snprintf(name, cap, "%s", s->named[i].name);
        return attr_of(m, s->named[i].ino, st);
    }
    const char *hash = s->hashes[i - s->n_named];
    d->chunk_entry(hash, name, cap, st);
    return plus ? d->chunk_attr(m, hash, st) : 0;
}

/* One readdir reply being filled. */
struct dir_reply {
    fuse_req_t req;
    struct kvfs_mount *m;
    char *buf;
    size_t size, used;
    int plus;
};

/* Add entry i (name nm, attributes st; hash for a chunk): 1 when it does
 * not fit, and the reply is complete. */
static int reply_add(struct dir_reply *r, const char *nm, const struct stat *st, const char *hash, size_t i)
{
    size_t need;
    int is_dot = !strcmp(nm, ".") || !strcmp(nm, "..");
    if (r->plus) {
        int chunk = !is_dot && hash && node_is_chunk(st->st_ino), inode = !is_dot;
        if (chunk) {
            pthread_mutex_lock(&r->m->lock);
            inode = ino_map_count(r->m->inos) < PLUS_INODES_MAX;
            pthread_mutex_unlock(&r->m->lock);
        }
        struct fuse_entry_param e;
        memset(&e, 0, sizeof(e));
        if (inode) {
            e.ino = st->st_ino;
            e.attr = *st;
            e.attr_timeout = e.entry_timeout = node_timeout(st->st_ino);
        } else { /* a name only (no node id): the kernel looks it up if it needs it */
            e.attr.st_ino = st->st_ino;
            e.attr.st_mode = is_dot ? S_IFDIR : st->st_mode & S_IFMT;
        }
        need = fuse_add_direntry_plus(r->req, r->buf + r->used, r->size - r->used, nm, &e, (off_t)(i + 1));
        if (need > r->size - r->used)
            return 1;
        /* the kernel will hold a lookup on this inode (counted before
         * the reply: its forget may come as soon as it has it; a reply
         * that fails leaves counts no forget takes back, so those
         * entries stay, like those put with no lookup) */
        if (chunk && inode) {
            pthread_mutex_lock(&r->m->lock);
            ino_map_put(r->m->inos, st->st_ino, hash, 1);
            pthread_mutex_unlock(&r->m->lock);
        }
    } else {
        need = fuse_add_direntry(r->req, r->buf + r->used, r->size - r->used, nm, st, (off_t)(i + 1));
        if (need > r->size - r->used)
            return 1;
    }
    r->used += need;
    return 0;
}

/* A page of the remote listing into the reply, from the cursor. */
struct remote_page {
    struct dir_reply *r;
    const struct dir_ops *d;
    struct dir_snapshot *s;
    size_t skip; /* entries to pass over first (a seek back) */
    int full;
};

static int remote_row(const struct kvfs_chunk_info *c, void *ctx)
{
    struct remote_page *p = ctx;
    size_t base = p->s->n_named + p->s->n;
    if (p->skip) {
        p->skip--;
        p->s->remote_pos++;
        return 0;
    }
    char nm[KVFS_HASH_HEX_LEN + 16 > 256 ? KVFS_HASH_HEX_LEN + 16 : 256];
    struct stat st;
    memset(&st, 0, sizeof(st));
    p->d->chunk_entry(c->hash, nm, sizeof(nm), &st);
    /* with plus, one evicted since the page was read is passed over */
    if ((!p->r->plus || p->d->chunk_attr(p->r->m, c->hash, &st) == 0) &&
        reply_add(p->r, nm, &st, c->hash, base + p->s->remote_pos)) {
        p->full = 1;
        return 1;
    }
    p->s->remote_pos++;
    return 0;
}

/* The remote listing's entries from index i (past the snapshot) on. */
static void remote_entries(struct dir_reply *r, const struct dir_ops *d, struct dir_snapshot *s, size_t i)
{
    size_t base = s->n_named + s->n;
    struct remote_page p = {r, d, s, 0, 0};
    pthread_mutex_lock(&s->mu);
    if (i - base != s->remote_pos) { /* not where the last reply stopped: from the first row again */
        s->remote_pos = 0;
        s->remote_after[0] = 0;
        p.skip = i - base;
    }
    long got;
    do
        got = kvfs_store_list_remote_only(r->m->store, s->remote_after, REMOTE_PAGE, remote_row, &p);
    while (!p.full && got == REMOTE_PAGE);
    pthread_mutex_unlock(&s->mu);
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi, int plus)
{
    struct kvfs_mount *m = kvfs_mount_of(req);
    const struct dir_ops *d = node_ops(ino);
    struct dir_snapshot *s = (struct dir_snapshot *)(uintptr_t)fi->fh;
    struct dir_reply r = {req, m, malloc(size), size, 0, plus};
    if (!r.buf) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    size_t i, total = s->n_named + s->n;
    for (i = (size_t)off; i < total; i++) {
        struct stat st;
        char nm[KVFS_HASH_HEX_LEN + 16 > 256 ? KVFS_HASH_HEX_LEN + 16 : 256];
        if (snapshot_entry(m, d, s, i, plus, nm, sizeof(nm), &st) != 0)
            continue;
        if (reply_add(&r, nm, &st, i < s->n_named ? NULL : s->hashes[i - s->n_named], i))
            break;
    }
    if (i >= total && s->lists_remote)
        remote_entries(&r, d, s, i);
    fuse_reply_buf(req, r.buf, r.used);
    free(r.buf);
}

static void kvfs_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
    do_readdir(req, ino, size, off, fi, 0);
}

static void kvfs_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                             struct fuse_file_info *fi)
{
    do_readdir(req, ino, size, off, fi, 1);
}

/* ---- xattrs: the directories' own (chunks and blend results have them) ---- */

static void kvfs_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
    const struct dir_ops *d = node_is_dir(ino) ? NULL : node_ops(ino);
    char val[128];
    if (strncmp(name, "user.", 5) != 0) {
        /* no ACLs or security labels here; ENOTSUP lets ls cache that */
        fuse_reply_err(req, ENOTSUP);
        return;
    }
    int n = d && d->getxattr ? d->getxattr(kvfs_mount_of(req), ino, name, val, sizeof(val)) : -ENODATA;
    if (n < 0)
        fuse_reply_err(req, -n);
    else if (size == 0)
        fuse_reply_xattr(req, (size_t)n);
    else if ((size_t)n > size)
        fuse_reply_err(req, ERANGE);
    else
        fuse_reply_buf(req, val, (size_t)n);
}

static void kvfs_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
    const struct dir_ops *d = node_is_dir(ino) ? NULL : node_ops(ino);
    const char *const *names = NULL;
    size_t count = d && d->listxattr ? d->listxattr(ino, &names) : 0, len = 0;
    char buf[512], val[128];
    for (size_t i = 0; i < count; i++) {
        /* a name some files lack (user.kvfs.salt of an unsalted chunk) is
         * not listed for them: cp -a and getfattr -d ask for each listed */
        if (d->getxattr && d->getxattr(kvfs_mount_of(req), ino, names[i], val, sizeof(val)) == -ENODATA)
            continue;
        size_t l = strlen(names[i]) + 1;
        memcpy(buf + len, names[i], l);
        len += l;
    }
    if (size == 0)
        fuse_reply_xattr(req, len);
    else if (len > size)
        fuse_reply_err(req, ERANGE);
    else
        fuse_reply_buf(req, buf, len);
}

static void kvfs_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value, size_t size,
                          int flags)
{
    (void)flags;
    const struct dir_ops *d = node_is_dir(ino) ? NULL : node_ops(ino);
    if (strncmp(name, "user.kvfs.", 10)) {
        fuse_reply_err(req, ENOTSUP);
        return;
    }
    fuse_reply_err(req, d && d->setxattr ? -d->setxattr(kvfs_mount_of(req), ino, name, value, size) : EPERM);
}

static void kvfs_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
    (void)ino; (void)name;
    fuse_reply_err(req, EPERM);
}

static void kvfs_statfs(fuse_req_t req, fuse_ino_t ino)
{
    (void)ino;
    struct kvfs_mount *m = kvfs_mount_of(req);
    struct statvfs sv;
    memset(&sv, 0, sizeof(sv));
    if (statvfs(kvfs_store_dir(m->store), &sv) != 0)
        memset(&sv, 0, sizeof(sv));
    sv.f_files = kvfs_store_count(m->store);
    sv.f_namemax = 255;
    fuse_reply_statfs(req, &sv);
}

const struct fuse_lowlevel_ops kvfs_ll_ops = {
    .lookup = kvfs_lookup,
    .forget = kvfs_forget,
    .forget_multi = kvfs_forget_multi,
    .getattr = kvfs_getattr,
    .setattr = kvfs_setattr,
    .mknod = kvfs_mknod,
    .mkdir = kvfs_mkdir,
    .unlink = kvfs_unlink,
    .rmdir = kvfs_rmdir,
    .symlink = kvfs_symlink,
    .rename = kvfs_rename,
    .link = kvfs_link,
    .open = kvfs_open,
    .read = kvfs_read,
    .write = kvfs_write,
    .flush = kvfs_flush,
    .release = kvfs_release,
    .fsync = kvfs_fsync,
    .opendir = kvfs_opendir,
    .readdir = kvfs_readdir,
    .readdirplus = kvfs_readdirplus,
    .releasedir = kvfs_releasedir,
    .statfs = kvfs_statfs,
    .setxattr = kvfs_setxattr,
    .getxattr = kvfs_getxattr,
    .listxattr = kvfs_listxattr,
    .removexattr = kvfs_removexattr,
    .create = kvfs_create,
    .ioctl = kvfs_control_ioctl,
};
