/* meta.c - the .kvfs/ directory (meta.h). */
#include "meta.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "handle.h"
#include "mount.h"
#include "remote.h"

#define FIXED_TIMEOUT 3600.0

static const char STATS_NAME[] = "stats", CONTROL_NAME[] = "control";

static int meta_getattr(struct kvfs_mount *m, fuse_ino_t ino, struct stat *st)
{
    if (ino == INO_META) {
        dir_attr(m, ino, st);
        return 0;
    }
    if (ino == INO_CONTROL) { /* an empty file that only takes the ioctl */
        file_attr(INO_CONTROL, 0666, 0, st);
        st->st_atime = st->st_mtime = st->st_ctime = m->mount_time;
        return 0;
    }
    char *json = NULL;
    file_attr(INO_STATS, 0444, 0, st);
    if (kvfs_store_stats_json(m->store, &json) == 0)
        st->st_size = (off_t)strlen(json);
    free(json);
    clock_gettime(CLOCK_REALTIME, &st->st_mtim);
    st->st_atim = st->st_ctim = st->st_mtim;
    return 0;
}

static int meta_lookup(struct kvfs_mount *m, const char *name, struct stat *st, double *timeout)
{
    fuse_ino_t ino = !strcmp(name, STATS_NAME) ? INO_STATS : !strcmp(name, CONTROL_NAME) ? INO_CONTROL : 0;
    if (!ino)
        return -ENOENT;
    *timeout = ino == INO_STATS ? 0 : FIXED_TIMEOUT; /* the stats' size changes */
    return meta_getattr(m, ino, st);
}

static int meta_list(struct kvfs_mount *m, dir_add_fn add, void *ctx)
{
    (void)m;
    int rc = add(ctx, STATS_NAME, INO_STATS);
    return rc ? rc : add(ctx, CONTROL_NAME, INO_CONTROL);
}

/* stats: the JSON as of the open; control: only for the ioctl, reads are empty */
static void meta_open(struct kvfs_mount *m, fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    if (ino == INO_META) {
        fuse_reply_err(req, EISDIR);
        return;
    }
    if (ino == INO_STATS && (fi->flags & O_ACCMODE) != O_RDONLY) {
        fuse_reply_err(req, EACCES);
        return;
    }
    struct fh *h = fh_new(FH_STATS);
    if (!h || (ino == INO_STATS ? kvfs_store_stats_json(m->store, &h->text) : !(h->text = strdup("")))) {
        free(h);
        fuse_reply_err(req, ENOMEM);
        return;
    }
    h->text_len = strlen(h->text);
    fi->direct_io = 1;
    if (ino == INO_CONTROL && m->remote) /* the owner of the claims it makes (kvfs_control_release) */
        kvfs_remote_owner_open(m->remote, (uint64_t)(uintptr_t)h);
    reply_open(m, req, fi, h);
}

const struct dir_ops meta_ops = {.ino = INO_META, .lookup = meta_lookup, .list = meta_list, .getattr = meta_getattr,
                                 .open = meta_open};
