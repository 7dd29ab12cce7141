/* draft.h - a file being written (a draft, fs/pending.c): its bytes, which
 * an open handle may read back (fs/handle.c), and what its commit gave. */
#ifndef KVFS_DRAFT_H
#define KVFS_DRAFT_H

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "kvformat.h" /* KVFS_HASH_HEX_LEN */

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
    double t_first_write;     /* KVFS_INGEST_PROFILE: when the first write came (monotonic s) */
    unsigned n_writes;        /* KVFS_INGEST_PROFILE: write requests since */
    char err[640];            /* a recipe's last rejection (reason [strerror]): logged when the last handle goes */
    struct pending *next;
};

#endif
