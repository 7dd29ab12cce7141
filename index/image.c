/* image.c - decoded chunk and blend images the kernel can read directly.
 *
 * With shared images on (the daemon turns it on when FUSE passthrough is
 * active), an image is an unlinked file in memory mapped MAP_SHARED: the
 * daemon reads it through the mapping and the kernel, handed the file as an
 * open file's backing file, serves read() and mmap() from the same pages
 * without crossing into the daemon.  The file lives as long as the image or
 * any file backed by it, so evicting or removing a chunk never pulls pages
 * from under a reader.  Where the daemon may mount (CAP_SYS_ADMIN) the files
 * live on a private tmpfs that is never attached to any directory (fsopen,
 * fsmount: nobody else sees it) with huge=within_size, so a reader's mmap
 * faults 2 MiB pages whatever the host's shmem_enabled says (a page-cache
 * file's speed; 4 KiB pages run at a fifth of it: BENCHMARKS.md); else they
 * are memfds, which get huge pages only where shmem_enabled allows.
 * Otherwise (and when a memfd cannot be had: no more descriptors) images are
 * plain aligned heap memory, as before.  kvfs_img_free frees either kind. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <unistd.h>

#include "bigbuf.h"
#include "image.h"

struct shared_img {
    void *p;
    size_t len;
    int fd;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct shared_img *imgs; /* every live shared image, unordered */
static size_t n_imgs, cap_imgs;
static int shared_on;
static int tmpfs_root = -1; /* the private tmpfs's root, or -1: memfds */

/* A tmpfs with huge pages for files that fit them, mounted nowhere: the
 * mount's fd, or -errno (no CAP_SYS_ADMIN, an older kernel) */
static int private_tmpfs(void)
{
    int fs = fsopen("tmpfs", FSOPEN_CLOEXEC), mnt = -1;
    if (fs < 0)
        return -errno;
    if (fsconfig(fs, FSCONFIG_SET_STRING, "huge", "within_size", 0) == 0 &&
        fsconfig(fs, FSCONFIG_SET_STRING, "size", "0", 0) == 0 &&      /* bounded by the RAM tier, not here */
        fsconfig(fs, FSCONFIG_SET_STRING, "nr_inodes", "0", 0) == 0 &&
        fsconfig(fs, FSCONFIG_SET_STRING, "mode", "0700", 0) == 0 &&
        fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) == 0)
        mnt = fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
    int rc = mnt < 0 ? -errno : mnt;
    close(fs);
    return rc;
}

void kvfs_img_set_shared(int on)
{
    pthread_mutex_lock(&lock);
    shared_on = on;
    if (on && tmpfs_root < 0) {
        int fd = private_tmpfs();
        tmpfs_root = fd >= 0 ? fd : -1;
    }
    pthread_mutex_unlock(&lock);
}

const char *kvfs_img_backing(void)
{
    pthread_mutex_lock(&lock);
    const char *what = !shared_on ? "heap" : tmpfs_root >= 0 ? "tmpfs (huge=within_size, private)" : "memfd";
    pthread_mutex_unlock(&lock);
    return what;
}

static int remember(void *p, size_t len, int fd)
{
    if (n_imgs == cap_imgs) {
        size_t cap = cap_imgs ? 2 * cap_imgs : 64;
        struct shared_img *g = realloc(imgs, sizeof(*g) * cap);
        if (!g)
            return -ENOMEM;
        imgs = g;
        cap_imgs = cap;
    }
    imgs[n_imgs++] = (struct shared_img){p, len, fd};
    return 0;
}

static struct shared_img *find_locked(const void *p)
{
    for (size_t i = 0; i < n_imgs; i++)
        if (imgs[i].p == p)
            return &imgs[i];
    return NULL;
}

/* a memfd of len bytes mapped shared; -errno */
static int shared_alloc(size_t len, uint8_t **out)
{
    pthread_mutex_lock(&lock);
    int root = tmpfs_root;
    pthread_mutex_unlock(&lock);
    int fd = root >= 0 ? openat(root, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600) : memfd_create("kvfs-image", MFD_CLOEXEC);
    if (fd < 0)
        return -errno;
    void *p = MAP_FAILED;
    if (ftruncate(fd, (off_t)(len ? len : 1)) == 0)
        p = mmap(NULL, len ? len : 1, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int rc = p == MAP_FAILED ? -errno : 0;
#ifdef MADV_HUGEPAGE
    /* a memfd: huge pages where the operator allows them for shared memory
     * (transparent_hugepage/shmem_enabled = advise); the private tmpfs has
     * them anyway (huge=within_size) */
    if (!rc && len >= ((size_t)2 << 20))
        madvise(p, len, MADV_HUGEPAGE);
#endif
    if (!rc) {
        pthread_mutex_lock(&lock);
        rc = remember(p, len ? len : 1, fd);
        pthread_mutex_unlock(&lock);
        if (rc)
            munmap(p, len ? len : 1);
    }
    if (rc) {
        close(fd);
        return rc;
    }
    *out = p;
    return 0;
}

int kvfs_img_alloc(size_t len, size_t align, uint8_t **out)
{
    pthread_mutex_lock(&lock);
    int on = shared_on;
    pthread_mutex_unlock(&lock);
    if (on && shared_alloc(len, out) == 0)
        return 0;
    void *p;
    if (posix_memalign(&p, align, len ? len : 1))
        return -ENOMEM;
    *out = p;
    return 0;
}

int kvfs_img_fd(const void *img)
{
    pthread_mutex_lock(&lock);
    struct shared_img *g = find_locked(img);
    int fd = g ? g->fd : -1;
    pthread_mutex_unlock(&lock);
    return fd;
}

int kvfs_img_adopt(uint8_t **img, size_t len)
{
    pthread_mutex_lock(&lock);
    int skip = !shared_on || !*img || find_locked(*img);
    pthread_mutex_unlock(&lock);
    uint8_t *p;
    if (skip || shared_alloc(len, &p))
        return 0; /* stays as it is: read through the daemon */
    memcpy(p, *img, len);
    if (!kvfs_big_release(*img)) /* a writer's big image (bigbuf.c) */
        free(*img);
    *img = p;
    return 0;
}

void kvfs_img_free(void *img)
{
    if (!img)
        return;
    pthread_mutex_lock(&lock);
    struct shared_img *g = find_locked(img), s = {0};
    if (g) {
        s = *g;
        *g = imgs[--n_imgs];
    }
    pthread_mutex_unlock(&lock);
    if (!g) {
        if (!kvfs_big_release(img)) /* a writer's image (kvformat.c) */
            free(img);
        return;
    }
    munmap(s.p, s.len);
    close(s.fd);
}
