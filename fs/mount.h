/* mount.h - the FUSE layer's per-mount state (fs/main.c sets it up).  fs/
 * is a thin layer: it maps names and inodes to the storage core and the
 * blend registry, and errors to errno. */
#ifndef KVFS_MOUNT_H
#define KVFS_MOUNT_H

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "store.h"

struct ino_map;
struct pending;
struct fh;
struct kvfs_blend_service;
struct kvfs_blend_registry;
struct kvfs_remote;
struct pt_backing;
struct kvfs_mount;

/* FUSE passthrough reads: their state (fs/passthrough.c) */
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

/* What the handles and drafts, below the directories, call back into (set
 * by fs/main.c): a handle may own a draft, a blend's name or a passthrough
 * registration; a draft, once written, may become a recipe or a llama state.
 * Through these handle.c and pending.c need not include the directories
 * (blends.c, llama.c) that use them. */
struct fs_hooks {
    void (*pending_put)(struct kvfs_mount *m, struct pending *p);
    void (*blends_release)(struct kvfs_mount *m, fuse_ino_t ino);
    void (*passthrough_abandon)(struct kvfs_mount *m, struct fh *h);
    int (*blends_set_recipe)(struct kvfs_mount *m, const char *name, const void *buf, size_t len, int partial_ok,
                             char *err, size_t errlen);
    int (*llama_ingest)(struct kvfs_mount *m, const char *name, const void *buf, size_t len,
                        char hash[KVFS_HASH_HEX_LEN + 1], char *err, size_t errlen);
};

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
    int llama_streams;/* llama/ views: streams in each state (llama-server -np N without -kvu: N) */
    char *blend_cache;/* disk bytes for blend results */
    char *rados_pool; /* remote tier: RADOS pool */
    char *ceph_conf;
    char *rados_id;
    char *rados_keyring; /* cephx keyring of rados_id */
    char *rados_ns;      /* RADOS namespace (tenant) of every object */
    int rados_timeout;
    int remote_list;  /* fleet listing refresh, seconds (0 = default 30, -1 = off) */
    int remote_lease; /* a claim's lease in RADOS, seconds (0 = default 30) */
    int remote_changes; /* changes each model index logs (0 = default 1024, -1 = none) */
    char *remote_capacity; /* the pool's chunk bytes stay within it (LRU eviction across the fleet) */
    char *passthrough;/* auto (default), on, off: FUSE passthrough reads */
    char *cold_reads; /* auto (default), direct, buffered: the blend loader's O_DIRECT */
    char *kv_quant;   /* q8, q4, none: the dtype of chunks the mount names itself */
    char *llama_saves;/* sync (default), async: a llama.cpp state's close waits for the disk, or not */
    int verbose;
};

struct kvfs_mount {
    struct kvfs_store *store;
    struct kvfs_passthrough pt;
    struct kvfs_opts opts;
    int lock_fd;              /* STORE/kvfs.lock, flock()ed: one daemon per store (fs/main.c) */
    uint64_t max_ingest;
    uint32_t kv_quant;        /* KVFS_DTYPE_Q8/Q4/Q4S (-o kv_quant), 0: none */
    int llama_async;          /* -o llama_saves=async: llama/ states stored after their close returns */
    pthread_mutex_t lock;     /* protects the inode map and pending list */
    struct ino_map *inos;     /* chunk inode -> hash */
    struct pending *pending;
    uint64_t next_pending;
    time_t mount_time;
    struct kvfs_blend_service *svc; /* models, results, blending (blend/service.h) */
    pthread_mutex_t fh_lock;  /* protects handles */
    struct fh *handles;       /* every handle given to the kernel and not yet freed */
    struct kvfs_blend_registry *blends; /* the blends by name (blend/registry.h; fs/blends.c) */
    struct fs_hooks hooks;
    struct kvfs_remote *remote; /* the RADOS tier (NULL without rados=): claims */
    struct fuse_session *se;    /* set while serving: waiting claims stop when it exits */
};

struct kvfs_mount *kvfs_mount_of(fuse_req_t req);

#endif
