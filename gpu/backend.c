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

static void profile_at_exit(void)
{
    kvfs_backend_profile_take(stderr, "at exit");
}

static void profile_setup(void)
{
    const char *env = getenv("KVFS_BACKEND_PROFILE");
    if (env && !strcmp(env, "1")) {
        kvfs_backend_profile_enable(1);
        atexit(profile_at_exit);
    }
}

/* KVFS_BACKEND_PROFILE: the new backend behind the profiling wrappers */
static int maybe_profiled(int rc, struct kvfs_backend *out)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    const char *env = getenv("KVFS_BACKEND_PROFILE");
    if (rc || !env || !*env || !strcmp(env, "0"))
        return rc;
    pthread_once(&once, profile_setup);
    if ((rc = kvfs_backend_profile_wrap(out)))
        kvfs_backend_free(out);
    return rc;
}

int kvfs_backend_init_by_name(const char *name, int n_threads, struct kvfs_backend *out)
{
    if (!name || !strcmp(name, "auto")) {
        if (kvfs_backend_cuda_init(0, out) == 0)
            return maybe_profiled(0, out);
        return maybe_profiled(kvfs_backend_cpu_init(n_threads, out), out);
    }
    if (!strcmp(name, "cpu"))
        return maybe_profiled(kvfs_backend_cpu_init(n_threads, out), out);
    if (!strcmp(name, "cuda"))
        return maybe_profiled(kvfs_backend_cuda_init(0, out), out);
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
