/* handle.h - open file handles (fs/handle.c). */
#ifndef KVFS_HANDLE_H
#define KVFS_HANDLE_H

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "mount.h"

struct pending;
struct kvfs_chunk_ref;
struct kvfs_llama_view;

/* An open file's handle (fs/handle.c), in fi->fh. */
enum fh_kind { FH_CHUNK = 1, FH_PENDING = 2, FH_STATS = 3 };

struct fh {
    enum fh_kind kind;
    struct kvfs_chunk_ref *ref; /* FH_CHUNK: a chunk or a blend result */
    struct kvfs_llama_view *view; /* FH_CHUNK read as a llama.cpp state (llama/) */
    fuse_ino_t blend_ino;       /* a blend result: its blends/NAME.kv */
    pid_t opener;               /* the process that opened it */
    struct pending *p;          /* FH_PENDING */
    char *text;                 /* FH_STATS (any read-only text) */
    size_t text_len;
    int writable;               /* FH_PENDING opened for writing: commits at flush */
    fuse_ino_t pt_ino;          /* FH_CHUNK read by the kernel (passthrough): its inode, else 0 */
    /* replies in flight, minus one once released: the handle is freed by
     * whichever of release and the last read ends second.  A reader may
     * close as soon as the kernel has its bytes, and the release (another
     * thread) must not free what libfuse's writev is still returning from */
    atomic_int holds;
    struct fh *prev, *next;     /* in the mount's handles, once given to the kernel */
    int tracked;
    /* KVFS_INGEST_PROFILE: a view's reads (approximate when they overlap) */
    unsigned n_reads;
    uint64_t read_bytes;
    double read_s, opened_at;
};

/* file handles (fs/handle.c) */
struct fh *fh_new(enum fh_kind kind); /* NULL if out of memory; free() until reply_open */
/* fi->fh = h and the open's reply (an abandoned open releases h) */
void reply_open(struct kvfs_mount *m, fuse_req_t req, struct fuse_file_info *fi, struct fh *h);
/* after the session: handles whose release never came (a close racing the
 * unmount: the kernel drops queued releases with the connection) */
void fh_release_all(struct kvfs_mount *m);
void reply_create(struct kvfs_mount *m, fuse_req_t req, const struct fuse_entry_param *e,
                  struct fuse_file_info *fi, struct fh *h);
/* one read's reply from what h holds; h stays alive until it is sent */
void reply_read(struct kvfs_mount *m, struct fh *h, fuse_req_t req, size_t size, off_t off);
/* release (and the end of a read): the second of them frees h and what it owns */
void fh_unhold(struct kvfs_mount *m, struct fh *h);

#endif
