/* ops.h - the FUSE low-level operations of the namespace (fs/ops.c). */
#ifndef KVFS_OPS_H
#define KVFS_OPS_H

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

extern const struct fuse_lowlevel_ops kvfs_ll_ops;

#endif
