/* fault_shim.c - an LD_PRELOAD shim that makes the store's disk fail on
 * demand (issue 19, fault injection; tests/integration/fs_faults.sh).
 *
 *   KVFS_FAULT_DIR   only descriptors of files under this directory fail
 *   KVFS_FAULT_FILE  a file read at every call: "read EIO", "write ENOSPC",
 *                    "write EIO", "fsync EIO" (one line); absent or empty:
 *                    nothing fails
 *
 * It wraps read/pread/pread64 ("read"), write/pwrite/pwrite64 ("write") and
 * fsync/fdatasync ("fsync").  Reads done through io_uring (the blend
 * loader) and mappings are not seen. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* the errno for an operation of kind `op` on fd, 0 to let it through */
static int fault_for(int fd, const char *op)
{
    const char *dir = getenv("KVFS_FAULT_DIR"), *ctl = getenv("KVFS_FAULT_FILE");
    if (!dir || !ctl)
        return 0;
    char link[64], path[4096], want[64] = "";
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof(path) - 1);
    if (n <= 0)
        return 0;
    path[n] = '\0';
    if (strncmp(path, dir, strlen(dir)))
        return 0;
    /* raw syscalls: the wrapped functions must not call themselves */
    int cfd = (int)syscall(SYS_openat, AT_FDCWD, ctl, O_RDONLY | O_CLOEXEC);
    if (cfd < 0)
        return 0;
    ssize_t got = syscall(SYS_read, cfd, want, sizeof(want) - 1);
    syscall(SYS_close, cfd);
    if (got <= 0)
        return 0;
    want[got] = '\0';
    size_t ol = strlen(op);
    if (strncmp(want, op, ol) || want[ol] != ' ')
        return 0;
    const char *e = want + ol + 1;
    return !strncmp(e, "EIO", 3) ? EIO : !strncmp(e, "ENOSPC", 6) ? ENOSPC : 0;
}

#define WRAP(ret, name, op, params, args)                                          \
    ret name params                                                               \
    {                                                                             \
        static ret(*real) params;                                                 \
        if (!real)                                                                \
            real = (ret(*) params)dlsym(RTLD_NEXT, #name);                        \
        int e = fault_for(fd, op);                                                \
        if (e) {                                                                  \
            errno = e;                                                            \
            return -1;                                                            \
        }                                                                         \
        return real args;                                                         \
    }

WRAP(ssize_t, read, "read", (int fd, void *buf, size_t n), (fd, buf, n))
WRAP(ssize_t, pread, "read", (int fd, void *buf, size_t n, off_t off), (fd, buf, n, off))
WRAP(ssize_t, pread64, "read", (int fd, void *buf, size_t n, off_t off), (fd, buf, n, off))
WRAP(ssize_t, write, "write", (int fd, const void *buf, size_t n), (fd, buf, n))
WRAP(ssize_t, pwrite, "write", (int fd, const void *buf, size_t n, off_t off), (fd, buf, n, off))
WRAP(ssize_t, pwrite64, "write", (int fd, const void *buf, size_t n, off_t off), (fd, buf, n, off))
WRAP(int, fsync, "fsync", (int fd), (fd))
WRAP(int, fdatasync, "fsync", (int fd), (fd))
