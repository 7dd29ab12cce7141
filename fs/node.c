/* node.c - inode classes and the directories' operation tables (node.h);
 * the root's and incoming/'s tables, which hold nothing of their own. */
#include "node.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "mount.h"

#define ENTRY_TIMEOUT 1.0 /* a chunk's name and attributes: they change only when it goes */
#define FIXED_TIMEOUT 3600.0

enum node_class node_class(fuse_ino_t ino)
{
    switch (ino) {
    case INO_ROOT: return NODE_ROOT;
    case INO_CHUNKS: return NODE_CHUNKS;
    case INO_INCOMING: return NODE_INCOMING;
    case INO_META: case INO_STATS: case INO_CONTROL: return NODE_META;
    case INO_BLENDS: return NODE_BLENDS;
    case INO_LLAMA: return NODE_LLAMA;
    }
    if (ino & INO_CHUNK_BIT)
        return ino & INO_LLAMA_BIT ? NODE_LLAMA : NODE_CHUNKS;
    if (ino >= INO_BLEND_BASE)
        return node_blend_kind(ino) >= BLEND_LLAMA ? NODE_LLAMA : NODE_BLENDS;
    if (ino >= INO_PENDING_BASE)
        return NODE_DRAFT;
    return NODE_NONE;
}

int node_is_dir(fuse_ino_t ino)
{
    return ino == INO_ROOT || ino == INO_CHUNKS || ino == INO_INCOMING || ino == INO_META || ino == INO_BLENDS ||
           ino == INO_LLAMA;
}

int node_is_chunk(fuse_ino_t ino)
{
    return (ino & INO_CHUNK_BIT) != 0;
}

double node_timeout(fuse_ino_t ino)
{
    return node_is_chunk(ino) ? ENTRY_TIMEOUT : 0;
}

uint64_t node_blend_id(fuse_ino_t ino)
{
    return (ino - INO_BLEND_BASE) / 8;
}

int node_blend_kind(fuse_ino_t ino)
{
    return ino >= INO_BLEND_BASE && !(ino & INO_CHUNK_BIT) ? (int)((ino - INO_BLEND_BASE) % 8) : -1;
}

int node_llama_vt(fuse_ino_t ino)
{
    return (ino & INO_VT_BIT) != 0;
}

void file_attr(fuse_ino_t ino, mode_t mode, off_t size, struct stat *st)
{
    memset(st, 0, sizeof(*st));
    st->st_ino = ino;
    st->st_mode = S_IFREG | mode;
    st->st_nlink = 1;
    st->st_uid = getuid();
    st->st_gid = getgid();
    st->st_size = size;
}

void dir_attr(struct kvfs_mount *m, fuse_ino_t ino, struct stat *st)
{
    memset(st, 0, sizeof(*st));
    st->st_ino = ino;
    st->st_mode = S_IFDIR | 0755; /* with allow_other, only the owner (and root) adds, removes or blends */
    st->st_nlink = 2;
    st->st_uid = getuid();
    st->st_gid = getgid();
    st->st_atime = st->st_mtime = st->st_ctime = m->mount_time;
}

/* ---- the root ---- */

static const struct {
    const char *name;
    fuse_ino_t ino;
} ROOT_DIRS[] = {{"chunks", INO_CHUNKS}, {"incoming", INO_INCOMING}, {".kvfs", INO_META}, {"blends", INO_BLENDS},
                 {"llama", INO_LLAMA}};

static int root_lookup(struct kvfs_mount *m, const char *name, struct stat *st, double *timeout)
{
    for (size_t i = 0; i < sizeof(ROOT_DIRS) / sizeof(ROOT_DIRS[0]); i++)
        if (!strcmp(name, ROOT_DIRS[i].name)) {
            dir_attr(m, ROOT_DIRS[i].ino, st);
            *timeout = FIXED_TIMEOUT;
            return 0;
        }
    return -ENOENT;
}

static int root_list(struct kvfs_mount *m, dir_add_fn add, void *ctx)
{
    (void)m;
    int rc = 0;
    for (size_t i = 0; i < sizeof(ROOT_DIRS) / sizeof(ROOT_DIRS[0]) && !rc; i++)
        rc = add(ctx, ROOT_DIRS[i].name, ROOT_DIRS[i].ino);
    return rc;
}

const struct dir_ops root_ops = {.ino = INO_ROOT, .lookup = root_lookup, .list = root_list};

/* ---- incoming/: a drop box, every file in it a draft ---- */

static int incoming_new_name(const char *name)
{
    return strlen(name) < 256 ? 0 : -ENAMETOOLONG;
}

static int incoming_unlink(struct kvfs_mount *m, const char *name)
{
    (void)m, (void)name;
    return -ENOENT; /* a draft that is stored is gone from here */
}

const struct dir_ops incoming_ops = {.ino = INO_INCOMING, .drafts = DRAFTS_LISTED, .new_name = incoming_new_name,
                                     .unlink = incoming_unlink};
