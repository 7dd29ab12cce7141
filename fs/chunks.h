/* chunks.h - the chunks/ directory (fs/chunks.c): one file per chunk,
 * <hash>.kv, read, removed, pinned through xattrs, created to ingest. */
#ifndef KVFS_CHUNKS_H
#define KVFS_CHUNKS_H

#include <sys/stat.h>

#include "mount.h"
#include "node.h"

/* a chunk's attributes from its metadata */
void chunk_attr(const struct kvfs_chunk_info *c, struct stat *st);
/* a chunk inode (or a chunk's llama view) -> its metadata (-ENOENT if gone) */
int chunk_of_ino(struct kvfs_mount *m, fuse_ino_t ino, struct kvfs_chunk_info *c);
/* a chunk's xattrs: also those of its views in llama/ */
int chunk_getxattr(struct kvfs_mount *m, fuse_ino_t ino, const char *name, char *val, size_t len);
size_t chunk_listxattr(fuse_ino_t ino, const char *const **names);
int chunk_setxattr(struct kvfs_mount *m, fuse_ino_t ino, const char *name, const char *value, size_t size);

extern const struct dir_ops chunks_ops;

#endif
