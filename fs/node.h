/* node.h - the namespace's inodes: which directory each one is or lies
 * in (node_class), and that directory's operations (struct dir_ops), which
 * fs/ops.c's FUSE operations dispatch to.  Nothing else in fs/ looks at an
 * inode's bits. */
#ifndef KVFS_NODE_H
#define KVFS_NODE_H

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>
#include <stdint.h>
#include <sys/stat.h>

struct kvfs_mount;

/* Fixed inodes of the namespace. */
enum {
    INO_ROOT = FUSE_ROOT_ID, /* 1 */
    INO_CHUNKS = 2,
    INO_INCOMING = 3,
    INO_META = 4,  /* /.kvfs */
    INO_STATS = 5, /* /.kvfs/stats */
    INO_BLENDS = 6, /* /blends */
    INO_CONTROL = 7, /* /.kvfs/control: the ioctl endpoint */
    INO_LLAMA = 8,   /* /llama: llama.cpp's view (fs/llama.c) */
    INO_PENDING_BASE = 1u << 20, /* files being written: INO_PENDING_BASE + n */
};
/* blends/ files: INO_BLEND_BASE + 8 * id + kind: 0 NAME.recipe, 1 NAME.kv,
 * 2 NAME.err, and in llama/ 3 NAME.llama, 4 NAME.vt.llama */
#define INO_BLEND_BASE (1ull << 40)
enum { BLEND_RECIPE, BLEND_KV, BLEND_ERR, BLEND_LLAMA, BLEND_LLAMA_VT };
#define BLEND_INO(id, kind) (INO_BLEND_BASE + (uint64_t)(id) * 8 + (uint64_t)(kind))
/* Chunk inodes: top bit set, the rest from the hash (stable across mounts);
 * the next two bits mark the chunk's views in llama/: <hash>.llama and
 * <hash>.vt.llama (V transposed) */
#define INO_CHUNK_BIT (1ull << 63)
#define INO_LLAMA_BIT (1ull << 62)
#define INO_VT_BIT (1ull << 61)

enum node_class {
    NODE_NONE,     /* no such inode */
    NODE_ROOT,     /* / */
    NODE_CHUNKS,   /* chunks/ and its chunks */
    NODE_INCOMING, /* incoming/ (its files are drafts) */
    NODE_BLENDS,   /* blends/ and NAME.recipe, NAME.kv, NAME.err */
    NODE_LLAMA,    /* llama/ and its views of chunks and blends */
    NODE_META,     /* .kvfs/, its stats and control */
    NODE_DRAFT,    /* a file being written, in any directory that takes them */
    NODE_CLASSES
};
enum node_class node_class(fuse_ino_t ino);
/* the fixed directories' inodes */
int node_is_dir(fuse_ino_t ino);
/* a chunk or a chunk's llama view: in the inode map, counted per kernel
 * lookup (fs/inode_map.c), and cached by the kernel for a while */
int node_is_chunk(fuse_ino_t ino);
double node_timeout(fuse_ino_t ino);
/* blends/ and llama/ files of blend id */
uint64_t node_blend_id(fuse_ino_t ino);
int node_blend_kind(fuse_ino_t ino); /* BLEND_*; -1: not a blend's file */
int node_llama_vt(fuse_ino_t ino);   /* a chunk view with V transposed */

/* A directory's operations: on its entries by name, and on its files (by
 * inode).  A NULL operation: the default fs/ops.c says. */
typedef int (*dir_add_fn)(void *ctx, const char *name, fuse_ino_t ino);
enum { DRAFTS_NONE, DRAFTS_LISTED, DRAFTS_UNLISTED /* seen by name only, until stored */ };
struct dir_ops {
    fuse_ino_t ino;        /* the directory's inode */
    int drafts;            /* files can be written there (fs/pending.c): DRAFTS_* */
    int lists_chunks;      /* its listing goes on with every chunk (readdir) */
    /* name -> *st (-ENOENT); a chunk's inode comes counted as a kernel lookup */
    int (*lookup)(struct kvfs_mount *m, const char *name, struct stat *st, double *timeout);
    int (*list)(struct kvfs_mount *m, dir_add_fn add, void *ctx); /* named entries */
    /* a chunk hash's entry when the listing goes on with chunks: its name,
     * st_ino and st_mode */
    void (*chunk_entry)(const char *hash, char *name, size_t cap, struct stat *st);
    int (*chunk_attr)(struct kvfs_mount *m, const char *hash, struct stat *st);
    int (*new_name)(const char *name);                    /* NULL: nothing is created (EPERM) */
    int (*unlink)(struct kvfs_mount *m, const char *name); /* NULL: EPERM */
    int (*getattr)(struct kvfs_mount *m, fuse_ino_t ino, struct stat *st);
    void (*open)(struct kvfs_mount *m, fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
    /* NULL: a size is refused (EPERM), the rest accepted and not kept */
    int (*setattr)(struct kvfs_mount *m, fuse_ino_t ino, const struct stat *attr, int to_set, struct stat *st);
    int (*getxattr)(struct kvfs_mount *m, fuse_ino_t ino, const char *name, char *val, size_t len); /* NULL: ENODATA */
    size_t (*listxattr)(fuse_ino_t ino, const char *const **names);                                /* NULL: none */
    int (*setxattr)(struct kvfs_mount *m, fuse_ino_t ino, const char *name, const char *value, size_t size);
};
/* The operations of the directory ino is or lies in. */
/* the directory operations of an inode (fs/ops.c, which knows every table) */
const struct dir_ops *node_ops(fuse_ino_t ino);
extern const struct dir_ops root_ops, incoming_ops;

/* attributes of a fixed directory */
void dir_attr(struct kvfs_mount *m, fuse_ino_t ino, struct stat *st);
/* a file only the mount's own user owns, of mode m and size size */
void file_attr(fuse_ino_t ino, mode_t mode, off_t size, struct stat *st);

#endif
