/* remote_quota.h - remote_capacity from the pool's quota (kvfs(8), REMOTE
 * TIER, Capacity): without remote_capacity=SIZE (or with
 * remote_capacity=quota) the pool's max_bytes quota, read from the monitors'
 * OSD map (`osd pool ls detail`), less a sixteenth, is the capacity. */
#ifndef KVFS_REMOTE_QUOTA_H
#define KVFS_REMOTE_QUOTA_H

#include "remote_internal.h"

#ifdef KVFS_HAVE_RADOS
/* The pool's max_bytes quota (0: none), through rados_mon_command.  0 or
 * -errno (-EACCES: the key's mon caps do not allow it), said in err. */
int remote_quota_read(struct kvfs_remote *r, uint64_t *max_bytes, char *err, size_t errlen);
/* The capacity a quota leaves kvfs: max_bytes less a sixteenth (objects no
 * index counts, another namespace's, and the monitors' lag in marking the
 * pool full); 0 for no quota. */
uint64_t remote_quota_capacity(uint64_t max_bytes);
/* With the capacity following the quota: read it, set r->capacity, and say
 * in the log when it changed or cannot be read (the capacity then stays
 * what it was: unbounded before a first read). */
void remote_quota_refresh(struct kvfs_remote *r);
/* r->capacity under its lock */
uint64_t remote_capacity_now(struct kvfs_remote *r);
#endif

#endif
