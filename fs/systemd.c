/* systemd.c - readiness through sd_notify(3), the journal's stream on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>

#include "log.h"
#include "systemd.h"

int systemd_stderr_is_journal(void)
{
    const char *js = getenv("JOURNAL_STREAM"); /* "DEV:INODE" of the stream systemd gave us */
    unsigned long long dev, ino;
    struct stat st;
    if (!js || sscanf(js, "%llu:%llu", &dev, &ino) != 2 || fstat(2, &st) != 0)
        return 0;
    return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void systemd_notify_ready(const char *mountpoint, const char *store_dir)
{
    int rc = sd_notifyf(0, "READY=1\nSTATUS=serving %s on %s", store_dir, mountpoint);
    if (rc < 0)
        kvfs_log(KVFS_LOG_WARN, "cannot tell the service manager we are ready: %s", strerror(-rc));
}

void systemd_notify_stopping(void)
{
    sd_notify(0, "STOPPING=1\nSTATUS=unmounting");
}
