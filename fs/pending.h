/* pending.h - drafts (fs/pending.c): files being written; the drafts' operations table. */
#ifndef KVFS_PENDING_H
#define KVFS_PENDING_H

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "draft.h"
#include "mount.h"
#include "node.h"

struct fh;

/* A draft (fs/pending.c): a file being written through chunks/NAME,
 * incoming/NAME or blends/NAME.recipe; it becomes a chunk (or a recipe) at
 * flush (close) once verified, and is never visible as a chunk before. */
/* drafts (fs/pending.c).  _by_ino and _by_name: the caller holds m->lock */
struct pending *pending_by_ino(struct kvfs_mount *m, fuse_ino_t ino);
struct pending *pending_by_name(struct kvfs_mount *m, fuse_ino_t parent, const char *name);
/* the draft under parent/name (a new one if none, or if the last one was
 * committed and closed), held: one more open; NULL if out of memory */
struct pending *pending_open(struct kvfs_mount *m, fuse_ino_t parent, const char *name);
/* the draft of inode ino, held; NULL if none */
struct pending *pending_hold(struct kvfs_mount *m, fuse_ino_t ino);
/* one hold less: the last one frees the draft (and logs a rejected recipe) */
void pending_put(struct kvfs_mount *m, struct pending *p);
int pending_uncommitted(struct pending *p);
void pending_attr(struct pending *p, struct stat *st);
int pending_truncate(struct kvfs_mount *m, struct pending *p, uint64_t size);
/* size bytes at off (-EFBIG past max_ingest, logged) */
int pending_write(struct kvfs_mount *m, struct pending *p, const char *buf, size_t size, off_t off);
/* Verify and store what was written; the chunk becomes visible only here.
 * partial_ok: see blends_set_recipe */
int pending_commit(struct kvfs_mount *m, struct pending *p, int partial_ok);

/* Store a chunk image the mount names itself (incoming/, llama/): with
 * -o kv_quant it is first re-encoded in that dtype when that stores it
 * smaller.  kvfs_store_put's errors. */
int ingest_put(struct kvfs_mount *m, const void *buf, size_t len, char hash[KVFS_HASH_HEX_LEN + 1], char *err,
               size_t errlen);
/* ingest_put of an image the caller gives away (kvfs_img_free's to free):
 * once stored it stays in the RAM tier while that has room, so a read soon
 * after (a saved slot restored) decodes nothing.  *img is taken (NULL) when
 * it was stored as it is; else (kv_quant re-encoded it, or an error) it is
 * left to the caller.  async: verified and named now, written to the disk
 * after this returns (kvfs_store_put_keep_async; -o llama_saves=async). */
int ingest_put_keep(struct kvfs_mount *m, uint8_t **img, size_t len, int async, char hash[KVFS_HASH_HEX_LEN + 1],
                    char *err, size_t errlen);

/* A handle for writing parent/name (a new draft unless one is open); st
 * (may be NULL) its attributes.  NULL: out of memory. */
struct fh *open_pending(struct kvfs_mount *m, fuse_req_t req, fuse_ino_t parent, const char *name, int trunc,
                        struct fuse_file_info *fi, struct stat *st);
/* the open's reply: h's, or ENOMEM when it is NULL */
void reply_open_draft(struct kvfs_mount *m, fuse_req_t req, struct fuse_file_info *fi, struct fh *h);

extern const struct dir_ops drafts_ops;

#endif
