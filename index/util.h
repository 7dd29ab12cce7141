/* util.h - small helpers shared by the store, the daemon and the tools:
 * full writes (index/io.c) and human sizes (index/size.c). */
#ifndef KVFS_UTIL_H
#define KVFS_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* write() all of buf to fd, retrying short writes and EINTR; 0 or -errno. */
int kvfs_write_full(int fd, const void *buf, size_t len);

/* Size parsing for options: "64M", "1G", "123" -> bytes (-EINVAL). */
int kvfs_parse_size(const char *s, uint64_t *out);

#endif
