/* control.h - MOUNT/.kvfs/control's ioctls (fs/control.c, kvfs_ioctl.h). */
#ifndef KVFS_CONTROL_H
#define KVFS_CONTROL_H

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

void kvfs_control_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg, struct fuse_file_info *fi,
                        unsigned flags, const void *in_buf, size_t in_bufsz, size_t out_bufsz);
struct kvfs_mount;
/* A control file closed: the claims it took and did not produce end. */
void kvfs_control_release(struct kvfs_mount *m, uint64_t owner);

#endif
