/* tool_util.h - small helpers shared by kvfsctl commands. */
#ifndef KVFS_TOOL_UTIL_H
#define KVFS_TOOL_UTIL_H
#include <stddef.h>
#include <stdint.h>
/* Write buf to path ('-' = stdout) via a temp file + rename. 0 or -errno. */
int tool_write_file(const char *path, const void *buf, size_t len);
/* Read a whole file ('-' = stdin) into a malloc'ed buffer. 0 or -errno. */
int tool_read_file(const char *path, uint8_t **buf, size_t *len);
#endif
