/* log.c - one-line diagnostics from the storage core and the daemon. */
#include <stdarg.h>
#include <stdio.h>

#include "log.h"

static void default_log(int level, const char *msg)
{
    const char *tag = level <= KVFS_LOG_ERR ? "error" : level == KVFS_LOG_WARN ? "warning"
                    : level == KVFS_LOG_INFO ? "info" : "debug";
    fprintf(stderr, "kvfs: %s: %s\n", tag, msg);
}

static kvfs_log_fn log_fn = default_log;
static int log_max_level = KVFS_LOG_INFO;

void kvfs_set_log(kvfs_log_fn fn) { log_fn = fn ? fn : default_log; }
void kvfs_set_log_level(int level) { log_max_level = level; }

int kvfs_errf(char *err, size_t errlen, int rc, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return rc;
}

void kvfs_log(int level, const char *fmt, ...)
{
    if (level > log_max_level)
        return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    log_fn(level, buf);
}
