/* blas.c - load OpenBLAS with an explicitly chosen kernel. */
#include "blas.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h" /* ISA levels */
#include "log.h"

static struct kvfs_blas blas;
static int load_rc = 1;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* The kernel for an ISA level, one whose sums keep a row's bits whatever
 * rows share its call (batch invariance: attention.c).  AVX-512: SkylakeX,
 * whose products the attention path is shaped for.  AVX2: Sandybridge, not
 * OpenBLAS's choice (Haswell, for Zen too): Haswell's kernel takes rows 12
 * at a time and sums some (row, column) pairs of a tile as two interleaved
 * halves of k, so a row's last bits depend on its index in the call mod 12.
 * Sandybridge's adds one rounded product per k, in order, in every tile
 * shape.  Below AVX none of OpenBLAS's SSE kernels keeps one order for every
 * shape: x86-64-v2 multiplies with gemm_ordered.c instead (NULL here). */
static const char *level_core(int level)
{
    switch (level) {
    case KVFS_CPU_VNNI:
    case KVFS_CPU_V4:
        return "SkylakeX";
    case KVFS_CPU_V3:
        return "Sandybridge";
    default:
        return NULL;
    }
}

static atomic_int load_level;

static void do_load(void)
{
    const char *want = getenv("KVFS_BLAS_CORE");
    if (!want || !*want || !strcmp(want, "auto"))
        want = level_core(atomic_load(&load_level));
    if (!want || !strcmp(want, "kvfs-ordered")) { /* x86-64-v2: no OpenBLAS kernel keeps the order */
        blas.sgemm = kvfs_sgemm_ordered;
        blas.set_num_threads = NULL;
        blas.core = "kvfs-ordered";
        load_rc = 0;
        return;
    }
    setenv("OPENBLAS_CORETYPE", want, 1); /* read by OpenBLAS when it loads, below */
    static const char *names[] = {"libopenblas.so.0", "libopenblas.so", "libopenblasp-r0.3.21.so"};
    void *h = NULL;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && !h; i++)
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        kvfs_log(KVFS_LOG_ERR, "cannot load OpenBLAS (libopenblas.so.0): %s", dlerror());
        load_rc = -ENOENT;
        return;
    }
    *(void **)&blas.sgemm = dlsym(h, "cblas_sgemm");
    *(void **)&blas.set_num_threads = dlsym(h, "openblas_set_num_threads");
    char *(*corename)(void);
    *(void **)&corename = dlsym(h, "openblas_get_corename");
    if (!blas.sgemm) {
        kvfs_log(KVFS_LOG_ERR, "OpenBLAS has no cblas_sgemm");
        load_rc = -ENOENT;
        return;
    }
    blas.core = corename ? corename() : "unknown";
    load_rc = 0;
}

int kvfs_blas_load(int level, const struct kvfs_blas **out)
{
    atomic_store(&load_level, level); /* one level per process (kvfs_cpu_level) */
    pthread_once(&once, do_load);
    if (load_rc == 0)
        *out = &blas;
    return load_rc;
}

const char *kvfs_blas_core(void)
{
    return load_rc == 0 ? blas.core : "not loaded";
}
