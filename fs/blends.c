/* blends.c - the blends/ directory: names, inodes and replies.
 *
 *   blends/NAME.recipe  written by the user (see kvfs(8), "BLENDING"); a
 *                       rejected one keeps its text so it can be read back
 *   blends/NAME.kv      the composed cache (format v1, flag BLENDED), from
 *                       the mount's blend service (blend/service.h): blended
 *                       on open unless the store's tiers hold the result
 *   blends/NAME.err     the last error for NAME (empty when none)
 *
 * The blends themselves (recipe text, parsed recipe, key, error, sizes) are
 * the registry's (blend/registry.h): this file maps names and inodes to it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvfs_fs.h"
#include "kvfs_ioctl.h"
#include "log.h"
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

static void fill_attr(const struct kvfs_blend_info *b, int kind, struct stat *st)
{
    memset(st, 0, sizeof(*st));
    st->st_ino = BLEND_INO(b->id, kind);
    st->st_mode = S_IFREG | (kind == 0 ? 0644 : 0444);
    st->st_nlink = 1;
    st->st_uid = getuid();
    st->st_gid = getgid();
    st->st_size = kind == BLEND_RECIPE ? (off_t)b->recipe_len : kind == BLEND_ERR ? (off_t)b->err_len
                : kind == BLEND_KV ? (off_t)b->size : (off_t)b->llama_size;
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
    int rc = kvfs_registry_stat(mnt->blends, BLEND_ID(ino), &b);
    if (!rc)
        fill_attr(&b, BLEND_KIND(ino), st);
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
        fill_attr(&b, kind, st);
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
    kvfs_registry_put(mnt->blends, BLEND_ID(ino));
}

int blends_open_kv(struct kvfs_mount *mnt, fuse_ino_t ino, struct kvfs_chunk_ref **ref)
{
    uint64_t id = BLEND_ID(ino);
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
        ids[i] = BLEND_ID(inos[i]);
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
    int rc = kvfs_registry_name(mnt->blends, BLEND_ID(ino), base, sizeof(base));
    if (!rc)
        snprintf(out, cap, "%s.recipe", base);
    return rc;
}

int blends_text(struct kvfs_mount *mnt, fuse_ino_t ino, char **text)
{
    return kvfs_registry_text(mnt->blends, BLEND_ID(ino), BLEND_KIND(ino) == 0 ? 0 : 1, text);
}

int blends_result_key(struct kvfs_mount *mnt, fuse_ino_t ino, char key[KVFS_HASH_HEX_LEN + 1])
{
    return kvfs_registry_key(mnt->blends, BLEND_ID(ino), key);
}
