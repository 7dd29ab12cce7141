/* ops.c - the FUSE low-level operations of the kvfs namespace, and their
 * table (kvfs_ll_ops):
 *
 *   /chunks/<hash>.kv      one file per chunk (read, unlink, xattrs; create to ingest)
 *   /incoming/<any>        drop box: a file written here is stored under its own hash
 *   /blends/NAME.recipe    a blend: NAME.kv its result, NAME.err why it failed (fs/blends.c)
 *   /.kvfs/stats           read-only JSON
 *   /.kvfs/control         the ioctl endpoint (fs/control.c)
 *
 * The ops map names and inodes to their pieces: drafts being written
 * (fs/pending.c), open file handles (fs/handle.c), chunk inodes the kernel
 * knows (fs/inode_map.c), blends/ (fs/blends.c).  Every reply is an errno
 * from the storage core or a namespace rule; no input can make the daemon
 * abort.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "kvfs_fs.h"

#define ENTRY_TIMEOUT 1.0

static const char STATS_NAME[] = "stats";

/* ---- attributes ---- */

static void ns_to_ts(int64_t ns, struct timespec *ts)
{
    ts->tv_sec = (time_t)(ns / 1000000000);
    ts->tv_nsec = (long)(ns % 1000000000);
}

static void dir_attr(struct kvfs_mount *m, fuse_ino_t ino, struct stat *st)
{
    memset(st, 0, sizeof(*st));
    st->st_ino = ino;
    st->st_mode = S_IFDIR | 0755; /* with allow_other, only the owner (and root) adds, removes or blends */
    st->st_nlink = 2;
    st->st_uid = getuid();
    st->st_gid = getgid();
    st->st_atime = st->st_mtime = st->st_ctime = m->mount_time;
}

static void chunk_attr(const struct kvfs_chunk_info *c, struct stat *st)
{
    memset(st, 0, sizeof(*st));
    st->st_ino = kvfs_chunk_ino(c->hash);
    st->st_mode = S_IFREG | 0644;
    st->st_nlink = 1;
    st->st_uid = getuid();
    st->st_gid = getgid();
    st->st_size = (off_t)c->logical_size;
    st->st_blocks = (blkcnt_t)((c->stored_size + 511) / 512);
    st->st_blksize = 1 << 20;
    ns_to_ts(c->created_ns, &st->st_mtim);
    ns_to_ts(c->created_ns, &st->st_ctim);
    ns_to_ts(c->accessed_ns, &st->st_atim);
}

static void stats_attr(struct kvfs_mount *m, struct stat *st)
{
    memset(st, 0, sizeof(*st));
    st->st_ino = INO_STATS;
    st->st_mode = S_IFREG | 0444;
    st->st_nlink = 1;
    st->st_uid = getuid();
    st->st_gid = getgid();
    char *json = NULL;
    if (kvfs_store_stats_json(m->store, &json) == 0)
        st->st_size = (off_t)strlen(json);
    free(json);
    clock_gettime(CLOCK_REALTIME, &st->st_mtim);
    st->st_atim = st->st_ctim = st->st_mtim;
}

/* Resolve a chunk inode to its metadata (-ENOENT if gone). */
static int chunk_of_ino(struct kvfs_mount *m, fuse_ino_t ino, struct kvfs_chunk_info *c)
{
    char hash[KVFS_HASH_HEX_LEN + 1];
    pthread_mutex_lock(&m->lock);
    int rc = ino_map_get(m->inos, ino, hash);
    pthread_mutex_unlock(&m->lock);
    return rc ? rc : kvfs_store_stat_known(m->store, hash, c);
}

static int attr_of(struct kvfs_mount *m, fuse_ino_t ino, struct stat *st)
{
    switch (ino) {
    case INO_ROOT: case INO_CHUNKS: case INO_INCOMING: case INO_META: case INO_BLENDS: case INO_LLAMA:
        dir_attr(m, ino, st);
        return 0;
    case INO_STATS:
        stats_attr(m, st);
        return 0;
    case INO_CONTROL: /* an empty file that only takes the ioctl */
        memset(st, 0, sizeof(*st));
        st->st_ino = INO_CONTROL;
        st->st_mode = S_IFREG | 0666;
        st->st_nlink = 1;
        st->st_uid = getuid();
        st->st_gid = getgid();
        st->st_atime = st->st_mtime = st->st_ctime = m->mount_time;
        return 0;
    }
    if (ino & INO_LLAMA_BIT)
        return llama_chunk_getattr(m, ino, st);
    if (ino & INO_CHUNK_BIT) {
        struct kvfs_chunk_info c;
        int rc = chunk_of_ino(m, ino, &c);
        if (!rc)
            chunk_attr(&c, st);
        return rc;
    }
    if (IS_BLEND_INO(ino))
        return blends_getattr(m, ino, st);
    pthread_mutex_lock(&m->lock);
    struct pending *p = pending_by_ino(m, ino);
    if (p)
        pending_attr(p, st);
    pthread_mutex_unlock(&m->lock);
    return p ? 0 : -ENOENT;
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

static void kvfs_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct kvfs_mount *m = kvfs_mount_of(req);
    struct stat st;
    fuse_ino_t child = 0;
    if (parent == INO_ROOT) {
        if (!strcmp(name, "chunks")) child = INO_CHUNKS;
        else if (!strcmp(name, "incoming")) child = INO_INCOMING;
        else if (!strcmp(name, ".kvfs")) child = INO_META;
        else if (!strcmp(name, "blends")) child = INO_BLENDS;
        else if (!strcmp(name, "llama")) child = INO_LLAMA;
    } else if (parent == INO_META && !strcmp(name, STATS_NAME)) {
        child = INO_STATS;
    } else if (parent == INO_META && !strcmp(name, "control")) {
        child = INO_CONTROL;
    }
    if (child) {
        attr_of(m, child, &st);
        reply_entry(req, &st, child == INO_STATS ? 0 : 3600);
        return;
    }
    if (parent == INO_CHUNKS || parent == INO_INCOMING || parent == INO_BLENDS || parent == INO_LLAMA) {
        pthread_mutex_lock(&m->lock);
        struct pending *p = pending_by_name(m, parent, name);
        if (p && pending_uncommitted(p))
            pending_attr(p, &st);
        else
            p = NULL;
        pthread_mutex_unlock(&m->lock);
        if (p) {
            reply_entry(req, &st, 0);
            return;
        }
    }
    if (parent == INO_BLENDS && blends_lookup(m, name, &st) == 0) {
        reply_entry(req, &st, 0);
        return;
    }
    if (parent == INO_LLAMA && llama_lookup(m, name, &st) == 0) {
        int chunk = (st.st_ino & INO_CHUNK_BIT) != 0;
        if (reply_entry(req, &st, chunk ? ENTRY_TIMEOUT : 0) == -ENOENT && chunk) /* the caller is gone */
            forget_chunks(m, &(struct fuse_forget_data){.ino = st.st_ino, .nlookup = 1}, 1);
        return;
    }
    if (parent == INO_CHUNKS) {
        char hash[KVFS_HASH_HEX_LEN + 1];
        struct kvfs_chunk_info c;
        /* a chunk here, or in the remote tier's listing (fetched on open),
         * or else asked of the remote tier by name (fetched now) */
        if (kvfs_parse_chunk_name(name, hash) == 0 &&
            (kvfs_store_stat_known(m->store, hash, &c) == 0 || kvfs_store_lookup(m->store, hash, &c) == 0) &&
            remember_chunk(m, hash, 1) == 0) { /* counted before the kernel can forget it */
            chunk_attr(&c, &st);
            if (reply_entry(req, &st, ENTRY_TIMEOUT) == -ENOENT) /* the caller is gone: no lookup */
                forget_chunks(m, &(struct fuse_forget_data){.ino = st.st_ino, .nlookup = 1}, 1);
            return;
        }
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
        fuse_reply_attr(req, &st, (ino & INO_CHUNK_BIT) ? ENTRY_TIMEOUT : 0);
}

/* ---- open / create / read / write ---- */

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

/* A handle for writing parent/name (a new draft unless one is open). */
static struct fh *open_pending(struct kvfs_mount *m, fuse_req_t req, fuse_ino_t parent, const char *name,
                               int trunc, struct fuse_file_info *fi, struct stat *st)
{
    struct pending *p = pending_open(m, parent, name);
    struct fh *h = p ? open_draft(m, req, p, trunc, 1, fi) : NULL;
    if (h && st)
        pending_attr(p, st);
    return h;
}

static void reply_open_draft(struct kvfs_mount *m, fuse_req_t req, struct fuse_file_info *fi, struct fh *h)
{
    if (h)
        reply_open(m, req, fi, h);
    else
        fuse_reply_err(req, ENOMEM);
}

static int check_new_name(fuse_ino_t parent, const char *name)
{
    char hash[KVFS_HASH_HEX_LEN + 1];
    if (parent == INO_CHUNKS) {
        if (kvfs_parse_chunk_name(name, hash) != 0) {
            kvfs_log(KVFS_LOG_ERR, "refused chunks/%s: names there are <64 lowercase hex>.kv "
                                   "(use incoming/ to store a file under its own hash)", name);
            return -EINVAL;
        }
        return 0;
    }
    if (parent == INO_INCOMING || parent == INO_LLAMA)
        return strlen(name) < 256 ? 0 : -ENAMETOOLONG;
    if (parent == INO_BLENDS) {
        if (blends_check_new_name(name) != 0) {
            kvfs_log(KVFS_LOG_ERR, "refused blends/%s: only NAME.recipe files can be written there", name);
            return -EPERM;
        }
        return 0;
    }
    return -EPERM;
}

static void kvfs_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                        struct fuse_file_info *fi)
{
    struct kvfs_mount *m = kvfs_mount_of(req);
    struct stat st;
    int rc;
    if (!S_ISREG(mode)) {
        fuse_reply_err(req, EPERM);
        return;
    }
    struct fh *h = NULL;
    if ((rc = check_new_name(parent, name)) || !(h = open_pending(m, req, parent, name, 1, fi, &st))) {
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
    struct kvfs_mount *m = kvfs_mount_of(req);
    int acc = fi->flags & O_ACCMODE;
    int rc;
    if (ino == INO_STATS) {
        if (acc != O_RDONLY) {
            fuse_reply_err(req, EACCES);
            return;
        }
        struct fh *h = fh_new(FH_STATS);
        if (!h || kvfs_store_stats_json(m->store, &h->text)) {
            free(h);
            fuse_reply_err(req, ENOMEM);
            return;
        }
        h->text_len = strlen(h->text);
        fi->direct_io = 1;
        reply_open(m, req, fi, h);
        return;
    }
    if (ino == INO_CONTROL) { /* only for the ioctl: reads are empty */
        struct fh *h = fh_new(FH_STATS);
        if (!h) {
            fuse_reply_err(req, ENOMEM);
            return;
        }
        h->text = strdup("");
        fi->direct_io = 1;
        reply_open(m, req, fi, h);
        return;
    }
    if ((IS_BLEND_INO(ino) && BLEND_KIND(ino) >= BLEND_LLAMA) || (ino & INO_LLAMA_BIT)) {
        struct fh *h = acc == O_RDONLY ? fh_new(FH_CHUNK) : NULL;
        if (!h) {
            fuse_reply_err(req, acc == O_RDONLY ? ENOMEM : EACCES);
            return;
        }
        if ((rc = llama_open(m, ino, h))) {
            fh_unhold(m, h); /* what it got so far goes with it */
            fuse_reply_err(req, -rc);
            return;
        }
        if (IS_BLEND_INO(ino))
            fi->direct_io = 1; /* a recipe rewritten: new bytes */
        else
            fi->keep_cache = 1;
        reply_open(m, req, fi, h);
        return;
    }
    if (IS_BLEND_INO(ino)) {
        int kind = BLEND_KIND(ino);
        if (acc != O_RDONLY && kind == 0) { /* rewrite a recipe: a new draft under its name */
            char name[256];
            if ((rc = blends_recipe_name(m, ino, name, sizeof(name))))
                fuse_reply_err(req, -rc);
            else
                reply_open_draft(m, req, fi,
                                 open_pending(m, req, INO_BLENDS, name, (fi->flags & O_TRUNC) != 0, fi, NULL));
            return;
        }
        if (acc != O_RDONLY) {
            fuse_reply_err(req, EACCES);
            return;
        }
        struct fh *h = fh_new(kind == 1 ? FH_CHUNK : FH_STATS);
        if (!h) {
            fuse_reply_err(req, ENOMEM);
            return;
        }
        if (kind == 1) {
            rc = blends_open_kv(m, ino, &h->ref);
            h->blend_ino = rc ? 0 : ino;
        } else {
            rc = blends_text(m, ino, &h->text);
            h->text_len = h->text ? strlen(h->text) : 0;
        }
        if (rc) {
            free(h);
            fuse_reply_err(req, -rc);
            return;
        }
        fi->direct_io = 1; /* a recipe rewritten: new bytes (passthrough: its own backing file) */
        if (kind == 1)
            passthrough_attach(m, req, ino, fi, h);
        reply_open(m, req, fi, h);
        return;
    }
    if (ino & INO_CHUNK_BIT) {
        struct kvfs_chunk_info c;
        if ((rc = chunk_of_ino(m, ino, &c))) {
            fuse_reply_err(req, -rc);
            return;
        }
        if (acc != O_RDONLY) {
            /* rewriting a chunk: accepted only if the same content arrives */
            char name[KVFS_HASH_HEX_LEN + 4];
            snprintf(name, sizeof(name), "%s.kv", c.hash);
            reply_open_draft(m, req, fi, open_pending(m, req, INO_CHUNKS, name, 1, fi, NULL));
            return;
        }
        struct fh *h = fh_new(FH_CHUNK);
        if (!h) {
            fuse_reply_err(req, ENOMEM);
            return;
        }
        if ((rc = kvfs_store_get(m->store, c.hash, &h->ref))) {
            free(h);
            fuse_reply_err(req, -rc);
            return;
        }
        fi->keep_cache = 1; /* a chunk's bytes never change under its name */
        passthrough_attach(m, req, ino, fi, h);
        reply_open(m, req, fi, h);
        return;
    }
    struct pending *p = pending_hold(m, ino);
    if (!p) {
        /* a draft that was committed and released since the kernel looked it
         * up: ESTALE makes the kernel look the name up again and retry */
        fuse_reply_err(req, (ino <= INO_META || ino == INO_BLENDS) ? EISDIR
                            : ino >= INO_PENDING_BASE && ino < INO_BLEND_BASE ? ESTALE : ENOENT);
        return;
    }
    reply_open_draft(m, req, fi, open_draft(m, req, p, (fi->flags & O_TRUNC) != 0, acc != O_RDONLY, fi));
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
    (void)ino;
    struct kvfs_mount *m = kvfs_mount_of(req);
    struct fh *h = (struct fh *)(uintptr_t)fi->fh;
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
    struct stat st;
    int rc = 0;
    if (IS_BLEND_INO(ino)) {
        rc = (to_set & FUSE_SET_ATTR_SIZE) ? -EPERM : blends_getattr(m, ino, &st);
    } else if (!(ino & INO_CHUNK_BIT) && ino > INO_CONTROL) {
        struct pending *p = pending_hold(m, ino); /* keep it alive while we work on it */
        if (!p) {
            fuse_reply_err(req, ENOENT);
            return;
        }
        if (to_set & FUSE_SET_ATTR_SIZE)
            rc = pending_truncate(m, p, (uint64_t)attr->st_size);
        /* mode, owner and times of a draft are accepted and not kept:
         * cp -a sets them; a chunk's metadata comes from its content */
        if (!rc)
            pending_attr(p, &st);
        pending_put(m, p);
    } else if (to_set & FUSE_SET_ATTR_SIZE) {
        rc = -EPERM; /* chunks are immutable */
    } else {
        rc = attr_of(m, ino, &st); /* chmod/chown/utimes: accepted, not kept */
    }
    if (rc)
        fuse_reply_err(req, -rc);
    else
        fuse_reply_attr(req, &st, 0);
}

/* ---- unlink and refusals ---- */

static void kvfs_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct kvfs_mount *m = kvfs_mount_of(req);
    char hash[KVFS_HASH_HEX_LEN + 1];
    if (parent == INO_BLENDS) { /* rm NAME.recipe forgets the blend (its three files) */
        size_t n = strlen(name);
        int is_recipe = n > 7 && !strcmp(name + n - 7, ".recipe");
        fuse_reply_err(req, !is_recipe ? (blends_lookup(m, name, &(struct stat){0}) ? ENOENT : EPERM)
                                       : -blends_unlink(m, name));
        return;
    }
    if (parent == INO_LLAMA) { /* views go with their chunk or recipe */
        struct stat st = {0};
        fuse_reply_err(req, llama_lookup(m, name, &st) ? ENOENT : EPERM);
        if ((st.st_ino & INO_CHUNK_BIT) && st.st_ino)
            forget_chunks(m, &(struct fuse_forget_data){.ino = st.st_ino, .nlookup = 1}, 1);
        return;
    }
    if (parent != INO_CHUNKS) {
        fuse_reply_err(req, parent == INO_INCOMING ? ENOENT : EPERM);
        return;
    }
    if (kvfs_parse_chunk_name(name, hash) != 0) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    int rc = kvfs_store_remove(m->store, hash);
    if (!rc)
        kvfs_log(KVFS_LOG_INFO, "removed chunks/%s", name);
    fuse_reply_err(req, -rc);
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
 * chunk hashes (this host's, then the remote listing's). */
struct dir_entry {
    char name[256];
    fuse_ino_t ino;
};

struct dir_snapshot {
    struct dir_entry *named;
    size_t n_named, cap_named;
    char (*hashes)[KVFS_HASH_HEX_LEN + 1];
    size_t n, cap;
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

static int named_entries(struct kvfs_mount *m, fuse_ino_t ino, struct dir_snapshot *d)
{
    int rc = 0;
    if ((rc = add_named(d, ".", ino)) || (rc = add_named(d, "..", INO_ROOT)))
        return rc;
    if (ino == INO_ROOT) {
        if ((rc = add_named(d, "chunks", INO_CHUNKS)) || (rc = add_named(d, "incoming", INO_INCOMING)) ||
            (rc = add_named(d, ".kvfs", INO_META)) || (rc = add_named(d, "blends", INO_BLENDS)) ||
            (rc = add_named(d, "llama", INO_LLAMA)))
            return rc;
    } else if (ino == INO_META) {
        if ((rc = add_named(d, STATS_NAME, INO_STATS)) || (rc = add_named(d, "control", INO_CONTROL)))
            return rc;
    } else if (ino == INO_INCOMING || ino == INO_BLENDS || ino == INO_LLAMA) {
        if (ino == INO_BLENDS && (rc = blends_list(m, add_named, d)))
            return rc;
        if (ino == INO_LLAMA && (rc = llama_list(m, add_named, d)))
            return rc;
        pthread_mutex_lock(&m->lock);
        for (struct pending *p = m->pending; p && !rc; p = p->next)
            if (p->parent == ino && pending_uncommitted(p))
                rc = add_named(d, p->name, p->ino);
        pthread_mutex_unlock(&m->lock);
    }
    return rc;
}

static void snapshot_free(struct dir_snapshot *d)
{
    free(d->named);
    free(d->hashes);
    free(d);
}

static void kvfs_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct kvfs_mount *m = kvfs_mount_of(req);
    if (ino != INO_ROOT && ino != INO_CHUNKS && ino != INO_INCOMING && ino != INO_META && ino != INO_BLENDS &&
        ino != INO_LLAMA) {
        fuse_reply_err(req, ENOTDIR);
        return;
    }
    struct dir_snapshot *d = calloc(1, sizeof(*d));
    if (!d) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    if (named_entries(m, ino, d) != 0 ||
        ((ino == INO_CHUNKS || ino == INO_LLAMA) &&
         (kvfs_store_list(m->store, snap_cb, d) != 0 || kvfs_store_list_remote_only(m->store, snap_cb, d) != 0))) {
        snapshot_free(d);
        fuse_reply_err(req, ENOMEM);
        return;
    }
    fi->fh = (uint64_t)(uintptr_t)d;
    fuse_reply_open(req, fi);
}

static void kvfs_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    snapshot_free((struct dir_snapshot *)(uintptr_t)fi->fh);
    fuse_reply_err(req, 0);
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi, int plus)
{
    int llama = ino == INO_LLAMA; /* chunks as <hash>.llama views */
    struct kvfs_mount *m = kvfs_mount_of(req);
    struct dir_snapshot *d = (struct dir_snapshot *)(uintptr_t)fi->fh;
    char *buf = malloc(size);
    if (!buf) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    size_t used = 0, nfixed = d->n_named, total = nfixed + d->n;
    for (size_t i = (size_t)off; i < total; i++) {
        struct stat st;
        char name[KVFS_HASH_HEX_LEN + 16];
        const char *nm;
        memset(&st, 0, sizeof(st));
        if (i < nfixed) {
            nm = d->named[i].name;
            if (attr_of(m, d->named[i].ino, &st) != 0)
                continue; /* a draft that finished meanwhile, a blend forgotten */
        } else {
            const char *hash = d->hashes[i - nfixed];
            snprintf(name, sizeof(name), llama ? "%s.llama" : "%s.kv", hash);
            nm = name;
            st.st_ino = llama ? llama_chunk_ino(hash, 0) : kvfs_chunk_ino(hash);
            st.st_mode = S_IFREG | (llama ? 0444 : 0644);
            if (plus) {
                struct kvfs_chunk_info c;
                if (llama ? llama_attr_of_hash(m, hash, &st) != 0 : kvfs_store_stat_known(m->store, hash, &c) != 0)
                    continue; /* removed since opendir */
                if (!llama)
                    chunk_attr(&c, &st);
            }
        }
        size_t need;
        int is_dot = !strcmp(nm, ".") || !strcmp(nm, "..");
        if (plus) {
            struct fuse_entry_param e;
            memset(&e, 0, sizeof(e));
            if (!is_dot) {
                e.ino = st.st_ino;
                e.attr = st;
                e.attr_timeout = e.entry_timeout = (st.st_ino & INO_CHUNK_BIT) ? ENTRY_TIMEOUT : 0;
            } else {
                e.attr.st_ino = st.st_ino;
                e.attr.st_mode = S_IFDIR;
            }
            need = fuse_add_direntry_plus(req, buf + used, size - used, nm, &e, (off_t)(i + 1));
            if (need > size - used)
                break;
            /* the kernel will hold a lookup on this inode (counted before
             * the reply: its forget may come as soon as it has it; a reply
             * that fails leaves counts no forget takes back, so those
             * entries stay, like those put with no lookup) */
            if (!is_dot && (st.st_ino & INO_CHUNK_BIT)) {
                pthread_mutex_lock(&m->lock);
                ino_map_put(m->inos, st.st_ino, d->hashes[i - nfixed], 1);
                pthread_mutex_unlock(&m->lock);
            }
        } else {
            need = fuse_add_direntry(req, buf + used, size - used, nm, &st, (off_t)(i + 1));
            if (need > size - used)
                break;
        }
        used += need;
    }
    fuse_reply_buf(req, buf, used);
    free(buf);
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

/* ---- xattrs ---- */

static const char *const xattr_names[] = {"user.kvfs.model", "user.kvfs.arch", "user.kvfs.tokens",
                                          "user.kvfs.layers", "user.kvfs.hits", "user.kvfs.pinned",
                                          "user.kvfs.tier", "user.kvfs.stored_size", "user.kvfs.dtype"};

static int xattr_value(const struct kvfs_chunk_info *c, const char *name, char *out, size_t len)
{
    if (!strcmp(name, "user.kvfs.model")) return snprintf(out, len, "%s", c->model);
    if (!strcmp(name, "user.kvfs.arch")) return snprintf(out, len, "%s", c->arch);
    if (!strcmp(name, "user.kvfs.tokens")) return snprintf(out, len, "%u", c->n_tokens);
    if (!strcmp(name, "user.kvfs.layers")) return snprintf(out, len, "%u", c->n_layer);
    if (!strcmp(name, "user.kvfs.hits")) return snprintf(out, len, "%" PRIu64, c->hits);
    if (!strcmp(name, "user.kvfs.pinned")) return snprintf(out, len, "%d", c->pinned ? 1 : 0);
    if (!strcmp(name, "user.kvfs.tier"))
        return c->remote_only ? snprintf(out, len, "remote")
                              : snprintf(out, len, "%s%s", c->in_ram ? "ram,disk" : "disk",
                                         c->remote ? ",remote" : c->held ? ",remote-queued" : "");
    if (!strcmp(name, "user.kvfs.stored_size")) return snprintf(out, len, "%" PRIu64, c->stored_size);
    if (!strcmp(name, "user.kvfs.dtype")) return snprintf(out, len, "%s", kvfs_dtype_name(c->dtype));
    return -ENODATA;
}

/* blends/NAME.kv: user.kvfs.pinned and user.kvfs.tier of its result */
#define IS_BLEND_KV(ino) (IS_BLEND_INO(ino) && BLEND_KIND(ino) == BLEND_KV)
static const char *const blend_xattr_names[] = {"user.kvfs.pinned", "user.kvfs.tier"};

static int blend_xattr_value(struct kvfs_mount *m, fuse_ino_t ino, const char *name, char *out, size_t len)
{
    char key[KVFS_HASH_HEX_LEN + 1];
    int pinned = 0, in_ram = 0, on_disk = 0;
    int rc = blends_result_key(m, ino, key);
    if (rc && rc != -ENODATA)
        return rc;
    if (!rc)
        on_disk = kvfs_store_has_result(m->store, key, &pinned, &in_ram);
    if (!strcmp(name, "user.kvfs.pinned"))
        return snprintf(out, len, "%d", pinned);
    if (!strcmp(name, "user.kvfs.tier")) /* none: blended on the next open */
        return snprintf(out, len, "%s", in_ram && on_disk ? "ram,disk" : in_ram ? "ram" : on_disk ? "disk" : "none");
    return -ENODATA;
}

static void kvfs_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
    struct kvfs_mount *m = kvfs_mount_of(req);
    struct kvfs_chunk_info c;
    char val[128];
    if (strncmp(name, "user.", 5) != 0) {
        /* no ACLs or security labels here; ENOTSUP lets ls cache that */
        fuse_reply_err(req, ENOTSUP);
        return;
    }
    int n;
    if (IS_BLEND_KV(ino)) {
        n = blend_xattr_value(m, ino, name, val, sizeof(val));
    } else if (!(ino & INO_CHUNK_BIT)) {
        fuse_reply_err(req, ENODATA);
        return;
    } else {
        int rc = chunk_of_ino(m, ino, &c);
        n = rc ? rc : xattr_value(&c, name, val, sizeof(val));
    }
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
    char buf[512];
    size_t len = 0;
    const char *const *names = (ino & INO_CHUNK_BIT) ? xattr_names : IS_BLEND_KV(ino) ? blend_xattr_names : NULL;
    size_t count = (ino & INO_CHUNK_BIT) ? sizeof(xattr_names) / sizeof(xattr_names[0])
                 : IS_BLEND_KV(ino) ? sizeof(blend_xattr_names) / sizeof(blend_xattr_names[0]) : 0;
    for (size_t i = 0; i < count; i++) {
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

static int parse_bool(const char *value, size_t size)
{
    if (size >= 1 && size <= 2 && (value[0] == '0' || value[0] == '1') && (size == 1 || value[1] == '\n'))
        return value[0] - '0';
    return -1;
}

static void kvfs_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value, size_t size,
                          int flags)
{
    (void)flags;
    struct kvfs_mount *m = kvfs_mount_of(req);
    int is_kvfs = !strncmp(name, "user.kvfs.", 10);
    if (!is_kvfs) {
        fuse_reply_err(req, ENOTSUP);
        return;
    }
    if (IS_BLEND_KV(ino)) {
        char key[KVFS_HASH_HEX_LEN + 1];
        int v = parse_bool(value, size), rc = -EPERM;
        if (!strcmp(name, "user.kvfs.pinned") && v >= 0 && (rc = blends_result_key(m, ino, key)) == 0)
            rc = kvfs_store_pin_result(m->store, key, v);
        if (rc == -ENOENT || rc == -ENODATA) /* nothing blended (yet, or since eviction) */
            kvfs_log(KVFS_LOG_ERR, "user.kvfs.pinned on a blend needs its result: open NAME.kv first");
        fuse_reply_err(req, rc == -ENODATA ? ENOENT : -rc);
        return;
    }
    if (!(ino & INO_CHUNK_BIT)) {
        /* a draft (cp -a copies our xattrs along): keep the pin, ignore the rest */
        pthread_mutex_lock(&m->lock);
        struct pending *p = ino > INO_CONTROL ? pending_by_ino(m, ino) : NULL;
        if (p && !strcmp(name, "user.kvfs.pinned") && parse_bool(value, size) >= 0) {
            pthread_mutex_lock(&p->lock); /* read by the commit under it */
            p->pin_after = parse_bool(value, size);
            pthread_mutex_unlock(&p->lock);
        }
        pthread_mutex_unlock(&m->lock);
        fuse_reply_err(req, p ? 0 : EPERM);
        return;
    }
    struct kvfs_chunk_info c;
    int rc = chunk_of_ino(m, ino, &c);
    if (rc) {
        fuse_reply_err(req, -rc);
        return;
    }
    if (!strcmp(name, "user.kvfs.pinned")) {
        int v = parse_bool(value, size);
        if (v < 0) {
            kvfs_log(KVFS_LOG_ERR, "user.kvfs.pinned takes 0 or 1 (chunk %s)", c.hash);
            fuse_reply_err(req, EINVAL);
            return;
        }
        rc = kvfs_store_set_pinned(m->store, c.hash, v);
        fuse_reply_err(req, -rc);
        return;
    }
    char cur[128];
    int n = xattr_value(&c, name, cur, sizeof(cur));
    /* setting a read-only attribute to its current value is harmless (cp -a) */
    if (n >= 0 && (size_t)n == size && !memcmp(cur, value, size))
        fuse_reply_err(req, 0);
    else
        fuse_reply_err(req, n < 0 ? ENOTSUP : EPERM);
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
