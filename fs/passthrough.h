/* passthrough.h - FUSE passthrough reads (fs/passthrough.c). */
#ifndef KVFS_PASSTHROUGH_H
#define KVFS_PASSTHROUGH_H

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>
#include <stdio.h>

struct kvfs_mount;
struct fh;

/* passthrough reads (fs/passthrough.c) */
int passthrough_parse(struct kvfs_mount *m, const char *opt); /* -EINVAL: not auto, on or off */
void passthrough_init(struct kvfs_mount *m, struct fuse_conn_info *conn);
/* an open chunk or blend result (h->ref) backed by its image's memfd when it can be */
void passthrough_attach(struct kvfs_mount *m, fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, struct fh *h);
void passthrough_detach(struct kvfs_mount *m, fuse_req_t req, struct fh *h);
/* an open whose reply found its caller gone: no release will come */
void passthrough_abandon(struct kvfs_mount *m, struct fh *h);
void passthrough_stats(void *ctx, FILE *f);
void passthrough_free(struct kvfs_mount *m); /* at unmount: registrations the kernel dropped with it */

#endif
