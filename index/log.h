/* log.h - one-line diagnostics (index/log.c): a log hook with levels, and
 * kvfs_errf, the one way every layer reports "what was wrong" alongside an
 * errno.  Used everywhere (index/, fs/, blend/, gpu/, tools/). */
#ifndef KVFS_LOG_H
#define KVFS_LOG_H

#include <stddef.h>

#define KVFS_LOG_ERR 3
#define KVFS_LOG_WARN 4
#define KVFS_LOG_INFO 6
#define KVFS_LOG_DEBUG 7

/* Every layer writes one line per problem through this hook (default:
 * stderr with a "kvfs: " prefix; the daemon sets its own: stderr with -f,
 * else syslog, or STORE/kvfs.log without /dev/log). */
typedef void (*kvfs_log_fn)(int level, const char *msg);
void kvfs_set_log(kvfs_log_fn fn);
/* Lines above this level are dropped (default KVFS_LOG_INFO). */
void kvfs_set_log_level(int level);
void kvfs_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Write a reason into err[errlen] (if err is not NULL) and return rc: the
 * one way every layer reports "what was wrong" alongside an errno. */
int kvfs_errf(char *err, size_t errlen, int rc, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#endif
