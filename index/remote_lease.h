/* remote_lease.h - the tier's side of claims (remote_lease.c): leases
 * produced (stored here), ended after their upload, renewed by the worker. */
#ifndef KVFS_REMOTE_LEASE_H
#define KVFS_REMOTE_LEASE_H

#include "remote_internal.h"

#ifdef KVFS_HAVE_RADOS
/* The chunk was stored here (the store's hook): its lease now lasts until
 * the upload, whatever its claimer does. */
void remote_lease_produced(struct kvfs_remote *r, const char *hash);
/* The chunk is in the pool: its lease, if this mount holds one, ends. */
void remote_lease_pushed(struct kvfs_remote *r, rados_ioctx_t io, const char *hash);
/* Renew the leases a third of whose duration has gone (the worker). */
void remote_lease_renew(struct kvfs_remote *r, rados_ioctx_t io);
/* End every lease (closing; io may be NULL: they lapse). */
void remote_lease_end_all(struct kvfs_remote *r, rados_ioctx_t io);
/* Leases held or produced; lease_mu held. */
uint64_t remote_leases_held(struct kvfs_remote *r);
/* Forget a remembered miss (remote_rados.c). */
void remote_neg_forget(struct kvfs_remote *r, const char *hash);
#endif

#endif
