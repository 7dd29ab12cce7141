/* xattr_value.h - the value of a boolean xattr (user.kvfs.pinned): "0" or
 * "1", a newline allowed after it (as `setfattr -v` and echo write it). */
#ifndef KVFS_XATTR_VALUE_H
#define KVFS_XATTR_VALUE_H

#include <stddef.h>

/* 0 or 1, or -1 for anything else */
static inline int xattr_bool(const char *value, size_t size)
{
    if (size >= 1 && size <= 2 && (value[0] == '0' || value[0] == '1') && (size == 1 || value[1] == '\n'))
        return value[0] - '0';
    return -1;
}

#endif
