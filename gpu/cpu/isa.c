/* isa.c - which x86-64 ISA level's kernels this process runs: the best the
 * CPU (and its OS: the AVX state saved) supports, or a lower one forced by
 * KVFS_CPU_LEVEL so that one machine can test every level up to its own. */
#include <errno.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "blas.h"
#include "log.h"

static const struct {
    const char *name, *alias; /* what the CPU needs: kvfs_cpu_level_supported */
} levels[KVFS_CPU_N_LEVELS] = {
    [KVFS_CPU_V2] = {"x86-64-v2", "v2"},
    [KVFS_CPU_V3] = {"x86-64-v3", "v3"},
    [KVFS_CPU_V4] = {"x86-64-v4", "v4"},
    [KVFS_CPU_VNNI] = {"x86-64-v4+vnni", "vnni"},
};

const char *kvfs_cpu_level_name(int level)
{
    return level >= 0 && level < KVFS_CPU_N_LEVELS ? levels[level].name : "?";
}

const char *kvfs_cpu_level_alias(int level)
{
    return level >= 0 && level < KVFS_CPU_N_LEVELS ? levels[level].alias : "?";
}

int kvfs_cpu_level_parse(const char *s)
{
    for (int l = 0; l < KVFS_CPU_N_LEVELS; l++)
        if (!strcmp(s, levels[l].name) || !strcmp(s, levels[l].alias))
            return l;
    return -EINVAL;
}

int kvfs_cpu_level_supported(int level)
{
    __builtin_cpu_init();
    switch (level) { /* __builtin_cpu_supports takes string literals only */
    case KVFS_CPU_V2:
        return __builtin_cpu_supports("x86-64-v2") > 0;
    case KVFS_CPU_V3:
        return __builtin_cpu_supports("x86-64-v3") > 0;
    case KVFS_CPU_V4:
        return __builtin_cpu_supports("x86-64-v4") > 0;
    case KVFS_CPU_VNNI:
        return __builtin_cpu_supports("x86-64-v4") > 0 && __builtin_cpu_supports("avx512vnni") > 0;
    default:
        return 0;
    }
}

int kvfs_cpu_level_best(void)
{
    int best = -1;
    for (int l = 0; l < KVFS_CPU_N_LEVELS; l++)
        if (kvfs_cpu_level_supported(l))
            best = l;
    return best;
}

static int chosen = -ENOTSUP;
static pthread_once_t chosen_once = PTHREAD_ONCE_INIT;

static void choose(void)
{
    int best = kvfs_cpu_level_best();
    const char *want = getenv("KVFS_CPU_LEVEL");
    if (best < 0) {
        kvfs_log(KVFS_LOG_ERR, "this CPU lacks x86-64-v2 (SSE4.2, POPCNT), the least kvfs's kernels need");
        return;
    }
    chosen = best;
    if (!want || !*want || !strcmp(want, "auto") || !strcmp(want, "best"))
        return;
    int l = kvfs_cpu_level_parse(want);
    if (l < 0) {
        kvfs_log(KVFS_LOG_ERR, "KVFS_CPU_LEVEL=%s: not a level (x86-64-v2|v2, x86-64-v3|v3, x86-64-v4|v4, "
                               "x86-64-v4+vnni|vnni, auto)", want);
        chosen = -EINVAL;
    } else if (l > best) {
        kvfs_log(KVFS_LOG_WARN, "KVFS_CPU_LEVEL=%s: this CPU runs at most %s; using that", want,
                 levels[best].name);
    } else {
        chosen = l;
    }
}

int kvfs_cpu_level(void)
{
    pthread_once(&chosen_once, choose);
    return chosen;
}

void kvfs_cpu_describe(FILE *f)
{
    int l = kvfs_cpu_level(), best = kvfs_cpu_level_best();
    const char *want = getenv("KVFS_CPU_LEVEL");
    fprintf(f, "cpu kernels: %s", l >= 0 ? levels[l].name : "none");
    if (want && *want)
        fprintf(f, " (KVFS_CPU_LEVEL=%s)", want);
    fprintf(f, "\ncpu levels:");
    for (int i = 0; i <= best; i++)
        fprintf(f, " %s", levels[i].alias);
    fprintf(f, "\n");
}

void kvfs_cpu_stats(void *ctx, FILE *f)
{
    (void)ctx;
    int l = kvfs_cpu_level(), best = kvfs_cpu_level_best();
    fprintf(f, ",\n  \"cpu\": {\"level\": \"%s\", \"best\": \"%s\", \"blas\": \"%s\"}",
            l >= 0 ? levels[l].name : "none", best >= 0 ? levels[best].name : "none", kvfs_blas_core());
}
