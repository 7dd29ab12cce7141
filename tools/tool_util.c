/* tool_util.c - file helpers for kvfsctl. */
#include "tool_util.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int tool_write_file(const char *path, const void *buf, size_t len)
{
    if (!strcmp(path, "-"))
        return kvfs_write_full(1, buf, len);
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    int rc = kvfs_write_full(fd, buf, len);
    if (close(fd) != 0 && !rc)
        rc = -errno;
    if (!rc && rename(tmp, path) != 0)
        rc = -errno;
    if (rc)
        unlink(tmp);
    return rc;
}

int tool_read_file(const char *path, uint8_t **out, size_t *out_len)
{
    int fd = strcmp(path, "-") ? open(path, O_RDONLY | O_CLOEXEC) : 0;
    if (fd < 0)
        return -errno;
    size_t cap = 1 << 16, len = 0;
    uint8_t *buf = malloc(cap);
    int rc = 0;
    for (;;) {
        if (!buf) {
            rc = -ENOMEM;
            break;
        }
        if (len == cap) {
            uint8_t *nb = realloc(buf, cap * 2);
            if (!nb) {
                rc = -ENOMEM;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t n = read(fd, buf + len, cap - len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            rc = -errno;
            break;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    if (fd > 0)
        close(fd);
    if (rc) {
        free(buf);
        return rc;
    }
    *out = buf;
    *out_len = len;
    return 0;
}
