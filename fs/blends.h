/* blends.h - the blends/ directory (fs/blends.c). */
#ifndef KVFS_BLENDS_H
#define KVFS_BLENDS_H

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>
#include <sys/stat.h>

#include "mount.h"

/* blends/ (fs/blends.c): names, inodes and replies over the mount's blend
 * service (blend/service.h) */
struct kvfs_chunk_ref;
int blends_init(struct kvfs_mount *mnt);
void blends_free(struct kvfs_mount *mnt);
int blends_lookup(struct kvfs_mount *mnt, const char *name, struct stat *st);
int blends_getattr(struct kvfs_mount *mnt, fuse_ino_t ino, struct stat *st);
/* fn(ctx, name, ino) for each file; stops at (and returns) a non-zero value */
int blends_list(struct kvfs_mount *mnt, int (*fn)(void *ctx, const char *name, fuse_ino_t ino), void *ctx);
int blends_check_new_name(const char *name);
/* llama/NAME.llama (kind BLEND_LLAMA) and NAME.vt.llama (BLEND_LLAMA_VT) of blend base */
int blends_lookup_kind(struct kvfs_mount *mnt, const char *base, int kind, struct stat *st);
/* fn(ctx, "NAME.llama", ino) for each blend with a valid recipe */
int blends_list_llama(struct kvfs_mount *mnt, int (*fn)(void *ctx, const char *name, fuse_ino_t ino), void *ctx);
/* A recipe written (empty: not yet written, no error); rejected text is kept
 * and its reason goes to NAME.err.  partial_ok: a recipe that only lacks a
 * chunk or its query yet is left as it was (-EINPROGRESS) */
int blends_set_recipe(struct kvfs_mount *mnt, const char *name, const void *buf, size_t len, int partial_ok,
                      char *err, size_t errlen);
int blends_unlink(struct kvfs_mount *mnt, const char *name); /* NAME.recipe: forget it */
/* NAME.kv opened: its result from the service (blended now if needed) */
int blends_open_kv(struct kvfs_mount *mnt, fuse_ino_t ino, struct kvfs_chunk_ref **ref);
/* A handle blends_open_kv gave is closed (a forgotten NAME goes with its last handle) */
void blends_release(struct kvfs_mount *mnt, fuse_ino_t ino);
/* Several NAME.kv at once (blended as a batch where they share leading
 * chunks): refs[i], rcs[i], errs[i] for each; the first error or 0 */
int blends_open_batch(struct kvfs_mount *mnt, const fuse_ino_t *inos, int n, struct kvfs_chunk_ref **refs, int *rcs,
                      char (*errs)[512]);
int blends_text(struct kvfs_mount *mnt, fuse_ino_t ino, char **text);
int blends_recipe_name(struct kvfs_mount *mnt, fuse_ino_t ino, char *out, size_t cap);
fuse_ino_t blends_ino_of(struct kvfs_mount *mnt, const char *base); /* NAME.kv inode, 0 if none */
/* the result key of a valid recipe (-ENODATA: empty or rejected) */
int blends_result_key(struct kvfs_mount *mnt, fuse_ino_t ino, char key[KVFS_HASH_HEX_LEN + 1]);

extern const struct dir_ops blends_ops;

#endif
