/* chunks.c - the chunks/ directory (chunks.h). */
#include "chunks.h"
#include "xattr_value.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "handle.h"
#include "inode_map.h"
#include "log.h"
#include "passthrough.h"
#include "pending.h"

static void ns_to_ts(int64_t ns, struct timespec *ts)
{
    ts->tv_sec = (time_t)(ns / 1000000000);
    ts->tv_nsec = (long)(ns % 1000000000);
}

void chunk_attr(const struct kvfs_chunk_info *c, struct stat *st)
{
    file_attr(kvfs_chunk_ino(c->hash), 0644, (off_t)c->logical_size, st);
    st->st_blocks = (blkcnt_t)((c->stored_size + 511) / 512);
    st->st_blksize = 1 << 20;
    ns_to_ts(c->created_ns, &st->st_mtim);
    ns_to_ts(c->created_ns, &st->st_ctim);
    ns_to_ts(c->accessed_ns, &st->st_atim);
}

int chunk_of_ino(struct kvfs_mount *m, fuse_ino_t ino, struct kvfs_chunk_info *c)
{
    char hash[KVFS_HASH_HEX_LEN + 1];
    pthread_mutex_lock(&m->lock);
    int rc = ino_map_get(m->inos, ino, hash);
    pthread_mutex_unlock(&m->lock);
    return rc ? rc : kvfs_store_stat_known(m->store, hash, c);
}

/* a chunk here, or in the remote tier's listing (fetched on open), or else
 * asked of the remote tier by name (fetched now) */
static int chunks_lookup(struct kvfs_mount *m, const char *name, struct stat *st, double *timeout)
{
    char hash[KVFS_HASH_HEX_LEN + 1];
    struct kvfs_chunk_info c;
    if (kvfs_parse_chunk_name(name, hash) != 0 ||
        (kvfs_store_stat_known(m->store, hash, &c) != 0 && kvfs_store_lookup(m->store, hash, &c) != 0) ||
        remember_chunk(m, hash, 1) != 0) /* counted before the kernel can forget it */
        return -ENOENT;
    chunk_attr(&c, st);
    *timeout = node_timeout(st->st_ino);
    return 0;
}

static void chunks_entry(const char *hash, char *name, size_t cap, struct stat *st)
{
    snprintf(name, cap, "%s.kv", hash);
    st->st_ino = kvfs_chunk_ino(hash);
    st->st_mode = S_IFREG | 0644;
}

static int chunks_entry_attr(struct kvfs_mount *m, const char *hash, struct stat *st)
{
    struct kvfs_chunk_info c;
    int rc = kvfs_store_stat_known(m->store, hash, &c);
    if (!rc)
        chunk_attr(&c, st);
    return rc;
}

static int chunks_new_name(const char *name)
{
    char hash[KVFS_HASH_HEX_LEN + 1];
    if (kvfs_parse_chunk_name(name, hash) != 0) {
        kvfs_log(KVFS_LOG_ERR, "refused chunks/%s: names there are <64 lowercase hex>.kv "
                               "(use incoming/ to store a file under its own hash)", name);
        return -EINVAL;
    }
    return 0;
}

static int chunks_unlink(struct kvfs_mount *m, const char *name)
{
    char hash[KVFS_HASH_HEX_LEN + 1];
    if (kvfs_parse_chunk_name(name, hash) != 0)
        return -ENOENT;
    int rc = kvfs_store_remove(m->store, hash);
    if (!rc)
        kvfs_log(KVFS_LOG_INFO, "removed chunks/%s", name);
    return rc;
}

static int chunks_getattr(struct kvfs_mount *m, fuse_ino_t ino, struct stat *st)
{
    struct kvfs_chunk_info c;
    int rc = chunk_of_ino(m, ino, &c);
    if (!rc)
        chunk_attr(&c, st);
    return rc;
}

static void chunks_open(struct kvfs_mount *m, fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct kvfs_chunk_info c;
    int rc;
    if ((rc = chunk_of_ino(m, ino, &c))) {
        fuse_reply_err(req, -rc);
        return;
    }
    if ((fi->flags & O_ACCMODE) != O_RDONLY) {
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
}

/* ---- xattrs ---- */

static const char *const XATTRS[] = {"user.kvfs.model", "user.kvfs.arch", "user.kvfs.tokens",
                                     "user.kvfs.layers", "user.kvfs.hits", "user.kvfs.pinned",
                                     "user.kvfs.tier", "user.kvfs.stored_size", "user.kvfs.dtype",
                                     "user.kvfs.salt"};

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

/* user.kvfs.salt: a salted chunk's salt digest in hex, from its header (the
 * index does not keep it); none (ENODATA, not listed) when unsalted */
static int salt_value(struct kvfs_mount *m, const struct kvfs_chunk_info *c, char *out, size_t len)
{
    uint8_t salt[32];
    char hex[KVFS_HASH_HEX_LEN + 1];
    int rc = kvfs_store_salt(m->store, c->hash, salt);
    if (rc == -ENOENT && c->remote_only) { /* fetched, as a read of it would */
        struct kvfs_chunk_ref *ref;
        if ((rc = kvfs_store_get(m->store, c->hash, &ref)) == 0) {
            kvfs_chunk_release(ref);
            rc = kvfs_store_salt(m->store, c->hash, salt);
        }
    }
    if (rc <= 0)
        return rc ? rc : -ENODATA;
    kvfs_hash_to_hex(salt, hex);
    return snprintf(out, len, "%s", hex);
}

static int chunk_xattr(struct kvfs_mount *m, const struct kvfs_chunk_info *c, const char *name, char *out,
                       size_t len)
{
    return !strcmp(name, "user.kvfs.salt") ? salt_value(m, c, out, len) : xattr_value(c, name, out, len);
}

int chunk_getxattr(struct kvfs_mount *m, fuse_ino_t ino, const char *name, char *val, size_t len)
{
    struct kvfs_chunk_info c;
    int rc = chunk_of_ino(m, ino, &c);
    return rc ? rc : chunk_xattr(m, &c, name, val, len);
}

size_t chunk_listxattr(fuse_ino_t ino, const char *const **names)
{
    (void)ino;
    *names = XATTRS;
    return sizeof(XATTRS) / sizeof(XATTRS[0]);
}

int chunk_setxattr(struct kvfs_mount *m, fuse_ino_t ino, const char *name, const char *value, size_t size)
{
    struct kvfs_chunk_info c;
    int rc = chunk_of_ino(m, ino, &c);
    if (rc)
        return rc;
    if (!strcmp(name, "user.kvfs.pinned")) {
        int v = xattr_bool(value, size);
        if (v < 0) {
            kvfs_log(KVFS_LOG_ERR, "user.kvfs.pinned takes 0 or 1 (chunk %s)", c.hash);
            return -EINVAL;
        }
        return kvfs_store_set_pinned(m->store, c.hash, v);
    }
    char cur[128];
    int n = chunk_xattr(m, &c, name, cur, sizeof(cur));
    /* setting a read-only attribute to its current value is harmless (cp -a) */
    if (n >= 0 && (size_t)n == size && !memcmp(cur, value, size))
        return 0;
    return n < 0 ? -ENOTSUP : -EPERM;
}

const struct dir_ops chunks_ops = {
    .ino = INO_CHUNKS, .drafts = DRAFTS_UNLISTED, .lists_chunks = 1,
    .lookup = chunks_lookup, .chunk_entry = chunks_entry, .chunk_attr = chunks_entry_attr,
    .new_name = chunks_new_name, .unlink = chunks_unlink, .getattr = chunks_getattr, .open = chunks_open,
    .getxattr = chunk_getxattr, .listxattr = chunk_listxattr, .setxattr = chunk_setxattr,
};
