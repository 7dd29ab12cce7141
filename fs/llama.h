/* llama.h - the llama/ directory (fs/llama.c). */
#ifndef KVFS_LLAMA_H
#define KVFS_LLAMA_H

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>
#include <stdint.h>
#include <sys/stat.h>

#include "mount.h"

struct fh;
/* llama/ (fs/llama.c): llama.cpp's sequence-state view of chunks and blends,
 * and a drop box for states llama.cpp saved */
struct kvfs_llama_view;
uint64_t llama_chunk_ino(const char *hash, int vt);
/* llama/NAME: a chunk's view (its inode counted as a kernel lookup) or a blend's */
int llama_lookup(struct kvfs_mount *m, const char *name, struct stat *st);
int llama_chunk_getattr(struct kvfs_mount *m, fuse_ino_t ino, struct stat *st);
int llama_attr_of_hash(struct kvfs_mount *m, const char *hash, struct stat *st);
/* h->ref and h->view for a view's inode (a blend's is blended if needed) */
int llama_open(struct kvfs_mount *m, fuse_ino_t ino, struct fh *h);
/* the blends' views (the chunks' come from the store's listing) */
int llama_list(struct kvfs_mount *m, int (*fn)(void *ctx, const char *name, fuse_ino_t ino), void *ctx);
/* a state written to llama/NAME stored as a chunk of the mount's first model,
 * salted if NAME says so (kvfs_llama_name_salt) */
int llama_ingest(struct kvfs_mount *m, const char *name, const void *buf, size_t len,
                 char hash[KVFS_HASH_HEX_LEN + 1], char *err, size_t errlen);


extern const struct dir_ops llama_ops;

#endif
