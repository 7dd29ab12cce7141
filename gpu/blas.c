/* blas.c - load OpenBLAS with an explicitly chosen kernel. */
#include "blas.h"

#include <cpuid.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

static struct kvfs_blas blas;
static int load_rc = 1;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* The kernel for this CPU, one whose sums keep a row's bits whatever rows
 * share its call (batch invariance: backend_cpu.c).  AVX-512: SkylakeX,
 * whose products the attention path is shaped for.  Other AVX CPUs, AVX2
 * included: Sandybridge, not OpenBLAS's choice (Haswell, for Zen too):
 * Haswell's kernel takes rows 12 at a time and sums some (row, column)
 * pairs of a tile as two interleaved halves of k, so a row's last bits
 * depend on its index in the call mod 12.  Sandybridge's adds one rounded
 * product per k, in order, in every tile shape.  Without AVX OpenBLAS
 * picks: none of its SSE kernels keeps one order for every shape. */
static const char *best_core(void)
{
    unsigned a, b, c, d;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
        int avx512f = (b >> 16) & 1, avx512dq = (b >> 17) & 1, avx512bw = (b >> 30) & 1, avx512vl = (b >> 31) & 1;
        if (avx512f && avx512dq && avx512bw && avx512vl)
            return "SkylakeX";
    }
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx")) /* the CPU's and the OS's (XSAVE of the ymm state) */
        return "Sandybridge";
    return NULL;
}

static void do_load(void)
{
    const char *want = getenv("KVFS_BLAS_CORE");
    if (!want || !*want || !strcmp(want, "auto"))
        want = best_core();
    if (want)
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

int kvfs_blas_load(const struct kvfs_blas **out)
{
    pthread_once(&once, do_load);
    if (load_rc == 0)
        *out = &blas;
    return load_rc;
}
