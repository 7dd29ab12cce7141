/* store_internal.h - the store's private state (index/ only). */
#ifndef KVFS_STORE_INTERNAL_H
#define KVFS_STORE_INTERNAL_H

#include <pthread.h>
#include <stdio.h>

#include "store.h"

struct kvfs_index_db;
struct ram_entry;

struct kvfs_store {
    pthread_mutex_t lock;          /* protects everything below */
    struct kvfs_store_opts opts;
    char *dir;
    struct kvfs_index_db *db;
    struct kvfs_chunk_info **rows; /* sorted by hash */
    size_t n_rows, cap_rows;
    uint64_t bytes_stored, bytes_logical;
    uint64_t hits, misses, evictions, removals, puts, ingest_errors;
    struct ram_entry *ram;         /* RAM tier, unordered; LRU by stamp */
    uint64_t ram_used, ram_clock, ram_hits;
    size_t ram_count;
    struct { void (*fn)(void *ctx, FILE *f); void *ctx; } extra[8];
    size_t n_extra;
    struct kvfs_store_remote remote; /* a tier below the disk (RADOS), or zeros */
};

void kvfs_info_from_header(const struct kvfs_header *h, const char *hash, uint64_t stored,
                           struct kvfs_chunk_info *c);

#endif
