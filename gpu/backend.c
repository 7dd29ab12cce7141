/* backend.c - choose and release compute backends. */
#include <errno.h>
#include <string.h>

#include "backend.h"

int kvfs_backend_init_by_name(const char *name, int n_threads, struct kvfs_backend *out)
{
    if (!name || !strcmp(name, "auto")) {
#ifdef KVFS_HAVE_CUDA
        if (kvfs_backend_cuda_init(0, out) == 0)
            return 0;
#endif
        return kvfs_backend_cpu_init(n_threads, out);
    }
    if (!strcmp(name, "cpu"))
        return kvfs_backend_cpu_init(n_threads, out);
    if (!strcmp(name, "cuda")) {
#ifdef KVFS_HAVE_CUDA
        return kvfs_backend_cuda_init(0, out);
#else
        return -ENODEV; /* built without CUDA */
#endif
    }
    return -EINVAL;
}

void kvfs_backend_free(struct kvfs_backend *b)
{
    if (b && b->iface) {
        b->iface->destroy(b->ctx);
        b->iface = NULL;
        b->ctx = NULL;
    }
}
