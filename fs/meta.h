/* meta.h - the .kvfs/ directory (fs/meta.c): stats (read-only JSON) and
 * control (the ioctl endpoint, fs/control.c). */
#ifndef KVFS_META_H
#define KVFS_META_H

#include "node.h"

extern const struct dir_ops meta_ops;

#endif
