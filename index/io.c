/* io.c - I/O helpers shared by the store and the tools. */
#include <errno.h>
#include <stdint.h>
#include <unistd.h>

#include "util.h"

/* write() until done, retrying EINTR; 0 or -errno. */
int kvfs_write_full(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}
