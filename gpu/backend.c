/* backend.c - choose and release compute backends; load the CUDA plugin. */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "log.h"

#define CUDA_PLUGIN "libkvfs-cuda.so"

typedef int (*cuda_plugin_init_fn)(int version, int device, struct kvfs_backend *out, kvfs_log_fn log);

static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;
static cuda_plugin_init_fn cuda_entry;

static void host_log(int level, const char *msg)
{
    kvfs_log(level, "%s", msg);
}

/* dlopen path, or NULL when it does not load (the reason logged at debug). */
static void *try_plugin(const char *path)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        kvfs_log(KVFS_LOG_DEBUG, "cuda plugin %s: %s", path, dlerror());
    return h;
}

static void cuda_load(void)
{
    const char *forced = getenv("KVFS_CUDA_PLUGIN");
    void *h = NULL;
    if (forced && *forced) {
        h = try_plugin(forced);
    } else if (access("/dev/nvidiactl", F_OK) != 0) {
        /* no NVIDIA driver: loading cuBLAS would only cost memory */
        kvfs_log(KVFS_LOG_DEBUG, "cuda plugin not loaded: no /dev/nvidiactl");
        return;
    } else {
        /* beside the program, one directory up (build/tests/x), and where
         * make install puts it (PREFIX/bin/kvfs, PREFIX/lib/kvfs/) */
        static const char *const dirs[] = {"", "/..", "/../lib/kvfs"};
        char exe[PATH_MAX], path[PATH_MAX + 64];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        char *slash = n > 0 ? (exe[n] = '\0', strrchr(exe, '/')) : NULL;
        if (slash)
            *slash = '\0';
        for (size_t i = 0; slash && !h && i < sizeof(dirs) / sizeof(dirs[0]); i++) {
            snprintf(path, sizeof(path), "%s%s/" CUDA_PLUGIN, exe, dirs[i]);
            h = try_plugin(path);
        }
    }
    if (!h)
        return;
    /* kept loaded for the process's life: CUDA's libraries do not unload cleanly */
    *(void **)&cuda_entry = dlsym(h, "kvfs_cuda_plugin_init");
    if (!cuda_entry)
        kvfs_log(KVFS_LOG_ERR, "cuda plugin: no kvfs_cuda_plugin_init: %s", dlerror());
}

int kvfs_backend_cuda_init(int device, struct kvfs_backend *out)
{
    pthread_once(&cuda_once, cuda_load);
    if (!cuda_entry)
        return -ENODEV;
    int rc = cuda_entry(KVFS_CUDA_PLUGIN_VERSION, device, out, host_log);
    if (rc == -ENOEXEC)
        kvfs_log(KVFS_LOG_ERR, "cuda plugin: built for another interface version than this program's (%d)",
                 KVFS_CUDA_PLUGIN_VERSION);
    return rc == -ENOEXEC ? -ENODEV : rc;
}

int kvfs_backend_init_by_name(const char *name, int n_threads, struct kvfs_backend *out)
{
    if (!name || !strcmp(name, "auto")) {
        if (kvfs_backend_cuda_init(0, out) == 0)
            return 0;
        return kvfs_backend_cpu_init(n_threads, out);
    }
    if (!strcmp(name, "cpu"))
        return kvfs_backend_cpu_init(n_threads, out);
    if (!strcmp(name, "cuda"))
        return kvfs_backend_cuda_init(0, out);
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
