/* systemd.h - the daemon under systemd: readiness (sd_notify) and the journal. */
#ifndef KVFS_FS_SYSTEMD_H
#define KVFS_FS_SYSTEMD_H

/* 1 when stderr is systemd's journal stream (JOURNAL_STREAM names it):
 * lines then carry a "<N>" priority prefix and no timestamp of their own. */
int systemd_stderr_is_journal(void);

/* Once the mount answers: stat(MOUNTPOINT) is a request to ourselves, so
 * these run on a thread of their own after the session's loop has started.
 * Tells the service manager (NOTIFY_SOCKET; nothing without it) READY=1. */
void systemd_notify_ready(const char *mountpoint, const char *store_dir);
/* The loop has ended: STOPPING=1 before the unmount. */
void systemd_notify_stopping(void);

#endif
