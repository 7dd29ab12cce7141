/* inode_map.h - the chunk inodes the kernel holds (fs/inode_map.c). */
#ifndef KVFS_INODE_MAP_H
#define KVFS_INODE_MAP_H

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>
#include <stdint.h>

#include "mount.h"

/* inode map (fs/inode_map.c) */
struct ino_map;
struct ino_map *ino_map_new(void);
void ino_map_free(struct ino_map *m);
/* adds lookups (the kernel's lookups this reply gives) to ino's count */
int ino_map_put(struct ino_map *m, uint64_t ino, const char *hash, uint64_t lookups);
int ino_map_get(struct ino_map *m, uint64_t ino, char hash[KVFS_HASH_HEX_LEN + 1]);
/* the kernel forgot nlookup lookups of ino: the entry goes at zero */
void ino_map_forget(struct ino_map *m, uint64_t ino, uint64_t nlookup);
size_t ino_map_count(const struct ino_map *m);
uint64_t kvfs_chunk_ino(const char *hash);
/* the chunk's inode into the mount's map (under the mount's lock), with the
 * kernel lookups the reply about to be sent gives it (0: not a lookup) */
int remember_chunk(struct kvfs_mount *m, const char *hash, uint64_t lookups);
/* the kernel's forgets; inodes other than chunks' are not in the map */
void forget_chunks(struct kvfs_mount *m, const struct fuse_forget_data *f, size_t count);

/* Names in chunks/: "<64 lowercase hex>.kv"; fills hash. */
int kvfs_parse_chunk_name(const char *name, char hash[KVFS_HASH_HEX_LEN + 1]);

#endif
