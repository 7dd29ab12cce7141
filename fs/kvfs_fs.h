/* kvfs_fs.h - the FUSE layer's per-mount state and its pieces.  fs/ is a
 * thin layer: it maps paths to the storage core and errors to errno. */
#ifndef KVFS_FS_H
#define KVFS_FS_H

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdint.h>

#include "store.h"

/* Fixed inodes of the namespace. */
enum {
    INO_ROOT = FUSE_ROOT_ID, /* 1 */
    INO_CHUNKS = 2,
    INO_INCOMING = 3,
    INO_META = 4,  /* /.kvfs */
    INO_STATS = 5, /* /.kvfs/stats */
    INO_BLENDS = 6, /* /blends */
    INO_CONTROL = 7, /* /.kvfs/control: the ioctl endpoint */
    INO_LLAMA = 8,   /* /llama: llama.cpp's view (fs/llama.c) */
    INO_PENDING_BASE = 1u << 20, /* files being written: INO_PENDING_BASE + n */
};
/* blends/ files: INO_BLEND_BASE + 8 * id + kind: 0 NAME.recipe, 1 NAME.kv,
 * 2 NAME.err, and in llama/ 3 NAME.llama, 4 NAME.vt.llama */
#define INO_BLEND_BASE (1ull << 40)
enum { BLEND_RECIPE, BLEND_KV, BLEND_ERR, BLEND_LLAMA, BLEND_LLAMA_VT };
#define BLEND_INO(id, kind) (INO_BLEND_BASE + (uint64_t)(id) * 8 + (uint64_t)(kind))
#define BLEND_KIND(ino) ((int)(((ino) - INO_BLEND_BASE) % 8))
#define BLEND_ID(ino) (((ino) - INO_BLEND_BASE) / 8)
#define IS_BLEND_INO(ino) ((ino) >= INO_BLEND_BASE && !((ino) & INO_CHUNK_BIT))
/* Chunk inodes: top bit set, the rest from the hash (stable across mounts);
 * the next two bits mark the chunk's views in llama/: <hash>.llama and
 * <hash>.vt.llama (V transposed) */
#define INO_CHUNK_BIT (1ull << 63)
#define INO_LLAMA_BIT (1ull << 62)
#define INO_VT_BIT (1ull << 61)

struct kvfs_opts {
    char *store_dir;
    char *capacity;
    char *ram;
    int zstd_level;
    char *max_ingest;
    char *model;      /* GGUF paths for blending, ':'-separated */
    char *backend;    /* compute backend for blending: auto, cpu, cuda */
    char *min_ratio;  /* ratio=auto floor */
    char *sim_read_bw;/* testing: throttle the blend loader's reads */
    int blend_jobs;   /* blends at once (0 = default 2) */
    char *blend_cache;/* disk bytes for blend results */
    char *rados_pool; /* remote tier: RADOS pool */
    char *ceph_conf;
    char *rados_id;
    int rados_timeout;
    int remote_list;  /* fleet listing refresh, seconds (0 = default 30, -1 = off) */
    char *passthrough;/* auto (default), on, off: FUSE passthrough reads */
    char *kv_quant;   /* q8, q4, none: the dtype of chunks the mount names itself */
    int verbose;
};

/* A draft (fs/pending.c): a file being written through chunks/NAME,
 * incoming/NAME or blends/NAME.recipe; it becomes a chunk (or a recipe) at
 * flush (close) once verified, and is never visible as a chunk before. */
struct pending {
    fuse_ino_t ino;
    fuse_ino_t parent;        /* INO_CHUNKS, INO_INCOMING or INO_BLENDS */
    char name[256];
    pthread_mutex_t lock;     /* protects buf/len/dirty */
    uint8_t *buf;
    size_t len, cap;
    int dirty;                /* data changed since the last commit */
    int committed;            /* last commit succeeded */
    int pin_after;            /* user.kvfs.pinned set before commit: -1 none */
    int opens;                /* open handles */
    char hash[KVFS_HASH_HEX_LEN + 1]; /* after commit */
    char err[640];            /* a recipe's last rejection (reason [strerror]): logged when the last handle goes */
    struct pending *next;
};

/* FUSE passthrough reads (fs/passthrough.c) */
struct kvfs_passthrough {
    int want;      /* -1 off, 0 auto, 1 on (an error in the log when unavailable) */
    int active;    /* negotiated: chunk and blend opens are backed by their memfd */
    char why[160]; /* when not active */
    atomic_ullong opens, daemon_opens, errors;
    atomic_ullong read_requests; /* READ requests that reached the daemon (any file) */
    /* the kernel allows one backing file per inode at a time: every open of
     * an inode shares its registration (fs/passthrough.c) */
    pthread_mutex_t lock;
    struct pt_backing *backings;
};

struct kvfs_mount {
    struct kvfs_store *store;
    struct kvfs_passthrough pt;
    struct kvfs_opts opts;
    uint64_t max_ingest;
    uint32_t kv_quant;        /* KVFS_DTYPE_Q8/Q4/Q4S (-o kv_quant), 0: none */
    pthread_mutex_t lock;     /* protects the inode map and pending list */
    struct ino_map *inos;     /* chunk inode -> hash */
    struct pending *pending;
    uint64_t next_pending;
    time_t mount_time;
    struct kvfs_blend_service *svc; /* models, results, blending (blend/service.h) */
    pthread_mutex_t fh_lock;  /* protects handles */
    struct fh *handles;       /* every handle given to the kernel and not yet freed */
    struct kvfs_blend_registry *blends; /* the blends by name (blend/registry.h; fs/blends.c) */
};

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
};

struct kvfs_mount *kvfs_mount_of(fuse_req_t req);

/* passthrough reads (fs/passthrough.c) */
int passthrough_parse(struct kvfs_mount *m, const char *opt); /* -EINVAL: not auto, on or off */
void passthrough_init(struct kvfs_mount *m, struct fuse_conn_info *conn);
/* an open chunk or blend result (h->ref) backed by its image's memfd when it can be */
void passthrough_attach(struct kvfs_mount *m, fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, struct fh *h);
void passthrough_detach(struct kvfs_mount *m, fuse_req_t req, struct fh *h);
/* an open whose reply found its caller gone: no release will come */
void passthrough_abandon(struct kvfs_mount *m, struct fh *h);
void passthrough_stats(void *ctx, FILE *f);
void passthrough_free(struct kvfs_mount *m); /* at unmount: registrations the kernel dropped with it */
extern const struct fuse_lowlevel_ops kvfs_ll_ops;

/* inode map (fs/inode_map.c) */
struct ino_map;
struct ino_map *ino_map_new(void);
void ino_map_free(struct ino_map *m);
/* adds lookups (the kernel's lookups this reply gives) to ino's count */
int ino_map_put(struct ino_map *m, uint64_t ino, const char *hash, uint64_t lookups);
int ino_map_get(struct ino_map *m, uint64_t ino, char hash[KVFS_HASH_HEX_LEN + 1]);
/* the kernel forgot nlookup lookups of ino: the entry goes at zero */
void ino_map_forget(struct ino_map *m, uint64_t ino, uint64_t nlookup);
size_t ino_map_count(const struct ino_map *m);
uint64_t kvfs_chunk_ino(const char *hash);
/* the chunk's inode into the mount's map (under the mount's lock), with the
 * kernel lookups the reply about to be sent gives it (0: not a lookup) */
int remember_chunk(struct kvfs_mount *m, const char *hash, uint64_t lookups);
/* the kernel's forgets; inodes other than chunks' are not in the map */
void forget_chunks(struct kvfs_mount *m, const struct fuse_forget_data *f, size_t count);

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

/* blends/ (fs/blends.c): names, inodes and replies over the mount's blend
 * service (blend/service.h) */
struct kvfs_chunk_ref;
int blends_init(struct kvfs_mount *mnt);
void blends_free(struct kvfs_mount *mnt);
int blends_lookup(struct kvfs_mount *mnt, const char *name, struct stat *st);
int blends_getattr(struct kvfs_mount *mnt, fuse_ino_t ino, struct stat *st);
/* fn(ctx, name, ino) for each file; stops at (and returns) a non-zero value */
int blends_list(struct kvfs_mount *mnt, int (*fn)(void *ctx, const char *name, fuse_ino_t ino), void *ctx);
int blends_check_new_name(const char *name);
/* llama/NAME.llama (kind BLEND_LLAMA) and NAME.vt.llama (BLEND_LLAMA_VT) of blend base */
int blends_lookup_kind(struct kvfs_mount *mnt, const char *base, int kind, struct stat *st);
/* fn(ctx, "NAME.llama", ino) for each blend with a valid recipe */
int blends_list_llama(struct kvfs_mount *mnt, int (*fn)(void *ctx, const char *name, fuse_ino_t ino), void *ctx);
/* A recipe written (empty: not yet written, no error); rejected text is kept
 * and its reason goes to NAME.err.  partial_ok: a recipe that only lacks a
 * chunk or its query yet is left as it was (-EINPROGRESS) */
int blends_set_recipe(struct kvfs_mount *mnt, const char *name, const void *buf, size_t len, int partial_ok,
                      char *err, size_t errlen);
int blends_unlink(struct kvfs_mount *mnt, const char *name); /* NAME.recipe: forget it */
/* NAME.kv opened: its result from the service (blended now if needed) */
int blends_open_kv(struct kvfs_mount *mnt, fuse_ino_t ino, struct kvfs_chunk_ref **ref);
/* A handle blends_open_kv gave is closed (a forgotten NAME goes with its last handle) */
void blends_release(struct kvfs_mount *mnt, fuse_ino_t ino);
/* Several NAME.kv at once (blended as a batch where they share leading
 * chunks): refs[i], rcs[i], errs[i] for each; the first error or 0 */
int blends_open_batch(struct kvfs_mount *mnt, const fuse_ino_t *inos, int n, struct kvfs_chunk_ref **refs, int *rcs,
                      char (*errs)[512]);
int blends_text(struct kvfs_mount *mnt, fuse_ino_t ino, char **text);
int blends_recipe_name(struct kvfs_mount *mnt, fuse_ino_t ino, char *out, size_t cap);
fuse_ino_t blends_ino_of(struct kvfs_mount *mnt, const char *base); /* NAME.kv inode, 0 if none */
/* the result key of a valid recipe (-ENODATA: empty or rejected) */
int blends_result_key(struct kvfs_mount *mnt, fuse_ino_t ino, char key[KVFS_HASH_HEX_LEN + 1]);
void kvfs_control_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg, struct fuse_file_info *fi,
                        unsigned flags, const void *in_buf, size_t in_bufsz, size_t out_bufsz);

/* llama/ (fs/llama.c): llama.cpp's sequence-state view of chunks and blends,
 * and a drop box for states llama.cpp saved */
struct kvfs_llama_view;
uint64_t llama_chunk_ino(const char *hash, int vt);
/* llama/NAME: a chunk's view (its inode counted as a kernel lookup) or a blend's */
int llama_lookup(struct kvfs_mount *m, const char *name, struct stat *st);
int llama_chunk_getattr(struct kvfs_mount *m, fuse_ino_t ino, struct stat *st);
int llama_attr_of_hash(struct kvfs_mount *m, const char *hash, struct stat *st);
/* h->ref and h->view for a view's inode (a blend's is blended if needed) */
int llama_open(struct kvfs_mount *m, fuse_ino_t ino, struct fh *h);
/* the blends' views (the chunks' come from the store's listing) */
int llama_list(struct kvfs_mount *m, int (*fn)(void *ctx, const char *name, fuse_ino_t ino), void *ctx);
/* a state written to llama/ stored as a chunk of the mount's first model */
/* Store a chunk image the mount names itself (incoming/, llama/): with
 * -o kv_quant it is first re-encoded in that dtype when that stores it
 * smaller.  kvfs_store_put's errors. */
int ingest_put(struct kvfs_mount *m, const void *buf, size_t len, char hash[KVFS_HASH_HEX_LEN + 1], char *err,
               size_t errlen);
int llama_ingest(struct kvfs_mount *m, const void *buf, size_t len, char hash[KVFS_HASH_HEX_LEN + 1], char *err,
                 size_t errlen);

/* Names in chunks/: "<64 lowercase hex>.kv"; fills hash. */
int kvfs_parse_chunk_name(const char *name, char hash[KVFS_HASH_HEX_LEN + 1]);

#endif
