/* blends.c - the blends/ directory: names, inodes and replies.
 *
 *   blends/NAME.recipe  written by the user (see kvfs(8), NAMESPACE, "blends/"); a
 *                       rejected one keeps its text so it can be read back
 *   blends/NAME.kv      the composed cache (format v1, flag BLENDED), from
 *                       the mount's blend service (blend/service.h): blended
 *                       on open unless the store's tiers hold the result
 *   blends/NAME.err     the last error for NAME (empty when none)
 *
 * The blends themselves (recipe text, parsed recipe, key, error, sizes) are
 * the registry's (blend/registry.h): this file maps names and inodes to it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "blends.h"
#include "chunks.h"
#include "handle.h"
#include "kvfs_ioctl.h"
#include "log.h"
#include "passthrough.h"
#include "pending.h"
#include "xattr_value.h"
#include "registry.h"

int blends_init(struct kvfs_mount *mnt)
{
    return kvfs_registry_new(mnt->svc, mnt->store, &mnt->blends);
}

void blends_free(struct kvfs_mount *mnt)
{
    kvfs_registry_free(mnt->blends);
    mnt->blends = NULL;
}

static const char *const EXT[] = {".recipe", ".kv", ".err"};

/* names: NAME.recipe, NAME.kv, NAME.err -> kind 0, 1, 2 */
static int split_name(const char *name, char *base, size_t cap)
{
    size_t n = strlen(name);
    for (int k = 0; k < 3; k++) {
        size_t el = strlen(EXT[k]);
        if (n > el && n - el < cap && !strcmp(name + n - el, EXT[k])) {
            memcpy(base, name, n - el);
            base[n - el] = '\0';
            for (size_t i = 0; i < n - el; i++)
                if (base[i] == '/' || (unsigned char)base[i] < 32)
                    return -EINVAL;
            return k;
        }
    }
    return -EINVAL;
}

static void fill_attr(const struct kvfs_mount *mnt, const struct kvfs_blend_info *b, int kind, struct stat *st)
{
    memset(st, 0, sizeof(*st));
    st->st_ino = BLEND_INO(b->id, kind);
    st->st_mode = S_IFREG | (kind == 0 ? 0644 : 0444);
    st->st_nlink = 1;
    st->st_uid = getuid();
    st->st_gid = getgid();
    st->st_size = kind == BLEND_RECIPE ? (off_t)b->recipe_len : kind == BLEND_ERR ? (off_t)b->err_len
                : kind == BLEND_KV ? (off_t)b->size
                : b->llama_size ? (off_t)(b->llama_size + 4u * b->llama_parts * (mnt->opts.llama_streams - 1)) /* the empty streams */
                : 0;
    clock_gettime(CLOCK_REALTIME, &st->st_mtim);
    st->st_atim = st->st_ctim = st->st_mtim;
}

int blends_lookup(struct kvfs_mount *mnt, const char *name, struct stat *st)
{
    char base[KVFS_BLEND_NAME_MAX];
    int kind = split_name(name, base, sizeof(base));
    return kind < 0 ? -ENOENT : blends_lookup_kind(mnt, base, kind, st);
}

int blends_getattr(struct kvfs_mount *mnt, fuse_ino_t ino, struct stat *st)
{
    struct kvfs_blend_info b;
    int rc = kvfs_registry_stat(mnt->blends, node_blend_id(ino), &b);
    if (!rc)
        fill_attr(mnt, &b, node_blend_kind(ino), st);
    return rc;
}

struct list_ctx {
    int (*fn)(void *ctx, const char *name, fuse_ino_t ino);
    void *ctx;
    int llama;
};

static int list_one(void *ctx, const char *base, const struct kvfs_blend_info *b)
{
    struct list_ctx *l = ctx;
    char name[256];
    int rc = 0;
    if (l->llama) {
        snprintf(name, sizeof(name), "%s.llama", base);
        return b->valid ? l->fn(l->ctx, name, BLEND_INO(b->id, BLEND_LLAMA)) : 0;
    }
    for (int k = 0; k < 3 && !rc; k++) {
        snprintf(name, sizeof(name), "%s%s", base, EXT[k]);
        rc = l->fn(l->ctx, name, BLEND_INO(b->id, k));
    }
    return rc;
}

int blends_list(struct kvfs_mount *mnt, int (*fn)(void *ctx, const char *name, fuse_ino_t ino), void *ctx)
{
    struct list_ctx l = {fn, ctx, 0};
    return kvfs_registry_each(mnt->blends, list_one, &l);
}

int blends_lookup_kind(struct kvfs_mount *mnt, const char *base, int kind, struct stat *st)
{
    struct kvfs_blend_info b;
    int rc = kvfs_registry_lookup(mnt->blends, base, &b);
    if (!rc)
        fill_attr(mnt, &b, kind, st);
    return rc;
}

int blends_list_llama(struct kvfs_mount *mnt, int (*fn)(void *ctx, const char *name, fuse_ino_t ino), void *ctx)
{
    struct list_ctx l = {fn, ctx, 1};
    return kvfs_registry_each(mnt->blends, list_one, &l);
}

int blends_check_new_name(const char *name)
{
    char base[KVFS_BLEND_NAME_MAX];
    return split_name(name, base, sizeof(base)) == 0 ? 0 : -EPERM;
}

int blends_set_recipe(struct kvfs_mount *mnt, const char *name, const void *buf, size_t len, int partial_ok,
                      char *err, size_t errlen)
{
    char base[KVFS_BLEND_NAME_MAX];
    if (split_name(name, base, sizeof(base)) != 0)
        return -EPERM;
    return kvfs_registry_set(mnt->blends, base, buf, len, partial_ok, err, errlen);
}

int blends_unlink(struct kvfs_mount *mnt, const char *name)
{
    char base[KVFS_BLEND_NAME_MAX];
    if (split_name(name, base, sizeof(base)) != 0 || kvfs_registry_forget(mnt->blends, base) != 0)
        return -ENOENT;
    kvfs_log(KVFS_LOG_INFO, "forgot blends/%s", base);
    return 0;
}

void blends_release(struct kvfs_mount *mnt, fuse_ino_t ino)
{
    kvfs_registry_put(mnt->blends, node_blend_id(ino));
}

int blends_open_kv(struct kvfs_mount *mnt, fuse_ino_t ino, struct kvfs_chunk_ref **ref)
{
    uint64_t id = node_blend_id(ino);
    int rc;
    char err[1][512];
    kvfs_registry_serve(mnt->blends, &id, 1, 1, ref, &rc, err);
    return rc;
}

int blends_open_batch(struct kvfs_mount *mnt, const fuse_ino_t *inos, int n, struct kvfs_chunk_ref **refs, int *rcs,
                      char (*errs)[512])
{
    uint64_t ids[KVFS_BATCH_MAX];
    if (n > KVFS_BATCH_MAX)
        return -E2BIG;
    for (int i = 0; i < n; i++)
        ids[i] = node_blend_id(inos[i]);
    return kvfs_registry_serve(mnt->blends, ids, n, 0, refs, rcs, errs);
}

fuse_ino_t blends_ino_of(struct kvfs_mount *mnt, const char *base)
{
    struct kvfs_blend_info b;
    return kvfs_registry_lookup(mnt->blends, base, &b) ? 0 : BLEND_INO(b.id, BLEND_KV);
}

int blends_recipe_name(struct kvfs_mount *mnt, fuse_ino_t ino, char *out, size_t cap)
{
    char base[KVFS_BLEND_NAME_MAX];
    int rc = kvfs_registry_name(mnt->blends, node_blend_id(ino), base, sizeof(base));
    if (!rc)
        snprintf(out, cap, "%s.recipe", base);
    return rc;
}

int blends_text(struct kvfs_mount *mnt, fuse_ino_t ino, char **text)
{
    return kvfs_registry_text(mnt->blends, node_blend_id(ino), node_blend_kind(ino) == 0 ? 0 : 1, text);
}

int blends_result_key(struct kvfs_mount *mnt, fuse_ino_t ino, char key[KVFS_HASH_HEX_LEN + 1])
{
    return kvfs_registry_key(mnt->blends, node_blend_id(ino), key);
}

/* ---- the blends/ directory's operations (node.h) ---- */

static int dir_lookup(struct kvfs_mount *m, const char *name, struct stat *st, double *timeout)
{
    *timeout = 0; /* a recipe rewritten: new sizes */
    return blends_lookup(m, name, st);
}

static int dir_new_name(const char *name)
{
    if (blends_check_new_name(name) != 0) {
        kvfs_log(KVFS_LOG_ERR, "refused blends/%s: only NAME.recipe files can be written there", name);
        return -EPERM;
    }
    return 0;
}

/* rm NAME.recipe forgets the blend (its three files); the others cannot go alone */
static int dir_unlink(struct kvfs_mount *m, const char *name)
{
    size_t n = strlen(name);
    if (n > 7 && !strcmp(name + n - 7, ".recipe"))
        return blends_unlink(m, name);
    return blends_lookup(m, name, &(struct stat){0}) ? -ENOENT : -EPERM;
}

/* NAME.recipe opened for writing: a new draft under its name */
static void open_recipe_draft(struct kvfs_mount *m, fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    char name[256];
    int rc = blends_recipe_name(m, ino, name, sizeof(name));
    if (rc)
        fuse_reply_err(req, -rc);
    else
        reply_open_draft(m, req, fi, open_pending(m, req, INO_BLENDS, name, (fi->flags & O_TRUNC) != 0, fi, NULL));
}

static void dir_open(struct kvfs_mount *m, fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    int kind = node_blend_kind(ino), rc;
    if (kind < 0) {
        fuse_reply_err(req, EISDIR);
        return;
    }
    if ((fi->flags & O_ACCMODE) != O_RDONLY) {
        if (kind == BLEND_RECIPE)
            open_recipe_draft(m, req, ino, fi);
        else
            fuse_reply_err(req, EACCES);
        return;
    }
    struct fh *h = fh_new(kind == BLEND_KV ? FH_CHUNK : FH_STATS);
    if (!h) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    if (kind == BLEND_KV) {
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
    if (kind == BLEND_KV)
        passthrough_attach(m, req, ino, fi, h);
    reply_open(m, req, fi, h);
}

/* NAME.kv: user.kvfs.pinned and user.kvfs.tier of its result */
static const char *const XATTRS[] = {"user.kvfs.pinned", "user.kvfs.tier"};

static int dir_getxattr(struct kvfs_mount *m, fuse_ino_t ino, const char *name, char *out, size_t len)
{
    char key[KVFS_HASH_HEX_LEN + 1];
    int pinned = 0, in_ram = 0, on_disk = 0;
    if (node_blend_kind(ino) != BLEND_KV)
        return -ENODATA;
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

static size_t dir_listxattr(fuse_ino_t ino, const char *const **names)
{
    *names = XATTRS;
    return node_blend_kind(ino) == BLEND_KV ? sizeof(XATTRS) / sizeof(XATTRS[0]) : 0;
}

static int dir_setxattr(struct kvfs_mount *m, fuse_ino_t ino, const char *name, const char *value, size_t size)
{
    char key[KVFS_HASH_HEX_LEN + 1];
    int v = xattr_bool(value, size), rc = -EPERM;
    if (node_blend_kind(ino) != BLEND_KV)
        return -EPERM;
    if (!strcmp(name, "user.kvfs.pinned") && v >= 0 && (rc = blends_result_key(m, ino, key)) == 0)
        rc = kvfs_store_pin_result(m->store, key, v);
    if (rc == -ENOENT || rc == -ENODATA) /* nothing blended (yet, or since eviction) */
        kvfs_log(KVFS_LOG_ERR, "user.kvfs.pinned on a blend needs its result: open NAME.kv first");
    return rc == -ENODATA ? -ENOENT : rc;
}

const struct dir_ops blends_ops = {
    .ino = INO_BLENDS, .drafts = DRAFTS_LISTED, .lookup = dir_lookup, .list = blends_list, .new_name = dir_new_name,
    .unlink = dir_unlink, .getattr = blends_getattr, .open = dir_open,
    .getxattr = dir_getxattr, .listxattr = dir_listxattr, .setxattr = dir_setxattr,
};
