/* loader.h - stream the layers of a blend's chunks from the store while the
 * blend recomputes earlier layers (CacheBlend's pipelining).
 *
 * A loader opens every chunk at once (RAM tier: the decoded image is used in
 * place; disk tier: an fd on the store object, so rm/eviction during the
 * stream is harmless), then one I/O thread reads the layers' frames in layer
 * order with io_uring (batched submissions, registered buffers when the
 * kernel allows) and a pool of workers decompresses (one zstd context each)
 * and verifies each layer's checksum.  kvfs_loader_wait(L) blocks until layer
 * L of every chunk is verified, so layer L+1.. load while L is computed.
 * A disk chunk whose object is not in the page cache (a cold disk) is read
 * with O_DIRECT: the disk's DMA lands in the loader's buffers, with no page
 * cache copy on the way and none of its memory taken. */
#ifndef KVFS_LOADER_H
#define KVFS_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "kvformat.h"
#include "store.h"

struct kvfs_loader;

struct kvfs_loader_opts {
    unsigned queue_depth;  /* io_uring entries in flight (default 32) */
    int n_workers;         /* decompress/verify threads (default: cores - 1, 2 to 8) */
    uint64_t throttle_bps; /* simulate a slow tier: cap reads at this many bytes/s (0 = off) */
    uint32_t max_read;     /* split reads into pieces of at most this many bytes (0 = off; tests) */
    int local_only;        /* do not stream chunks only the store's remote tier has */
    int direct_io;         /* O_DIRECT reads of a disk chunk: 0 = where its object is mostly not in the page
                              cache (the default), 1 = wherever the filesystem allows, -1 = never */
};

struct kvfs_loader_stats {
    uint64_t bytes_read;   /* from storage (stored, i.e. compressed, bytes) */
    uint64_t bytes_layers; /* layer bytes delivered (decoded) */
    double load_s;         /* start() until the last layer was verified */
    double wait_s;         /* time callers spent blocked in kvfs_loader_wait */
    int n_ram, n_disk;     /* chunks served from the RAM tier / from objects */
    int n_remote;          /* chunks streamed from the remote tier */
    int uring;             /* 1 = io_uring, 0 = pread fallback */
    int n_direct;          /* disk chunks read with O_DIRECT (past the page cache) */
};

/* Open n chunks by hash.  Headers are available at once.  Errors: -ENOENT
 * (unknown hash), -EBADMSG/-EINVAL (bad object), with a reason in err. */
int kvfs_loader_open(struct kvfs_store *s, const char *const *hashes, int n, const struct kvfs_loader_opts *o,
                     struct kvfs_loader **out, char *err, size_t errlen);
/* Open chunks that are already in memory (verified v1 images): no I/O. */
int kvfs_loader_open_images(const void *const *images, const size_t *lens, int n, struct kvfs_loader **out,
                            char *err, size_t errlen);
int kvfs_loader_count(const struct kvfs_loader *ld);
const struct kvfs_header *kvfs_loader_header(const struct kvfs_loader *ld, int i);
/* Begin streaming layers [first_layer, n_layer).  Idempotent. */
int kvfs_loader_start(struct kvfs_loader *ld, int first_layer);
/* Block until `layer` of every chunk is loaded and verified; data[i] then
 * points at chunk i's layer (K then V, unpadded), valid until close. */
int kvfs_loader_wait(struct kvfs_loader *ld, int layer, const void **data, char *err, size_t errlen);
/* Stored bytes read so far / in all, and seconds since start (for the
 * loading controller, controller.h). */
void kvfs_loader_progress(const struct kvfs_loader *ld, uint64_t *done, uint64_t *total, double *elapsed);
void kvfs_loader_get_stats(const struct kvfs_loader *ld, struct kvfs_loader_stats *st);
/* Stops any I/O still in flight and frees everything. */
void kvfs_loader_close(struct kvfs_loader *ld);
/* Unmap the streaming buffers kept for the next loader (an idle service:
 * the next load faults its buffers in again, ~1 ms per 10 MB). */
void kvfs_loader_trim(void);
/* Page-lock the buffers layers are handed out from (decoded layers, O_DIRECT
 * slots) through pin (a GPU backend's host_register: the device then copies
 * a layer from them by DMA, no staging copy), unlocked with unpin before
 * they are unmapped; kept buffers stay locked for the next loader.  NULL
 * turns it off and lets every kept buffer go: call it so only while no
 * loader runs (the blend service's close). */
void kvfs_loader_set_pin(int (*pin)(void *arg, void *p, size_t n), void *pin_arg, void (*unpin)(void *arg, void *p),
                         void *unpin_arg);

#endif
