/* result_table.h - the blend results the store keeps on disk
 * (DIR/results/KEY.kvo): one row each, their bytes and counters.  Results
 * are derived data, so there is no index: the table lives in memory and the
 * directory is emptied when a store opens.  The store (store.c) evicts
 * through it and prints its statistics; the results' API (store_results.c)
 * adds and looks up rows.  Not thread-safe: the store calls it under its
 * lock. */
#ifndef KVFS_RESULT_TABLE_H
#define KVFS_RESULT_TABLE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kvformat.h" /* KVFS_HASH_HEX_LEN */
#include "ram_tier.h"

/* A blend result on disk (results/KEY.kvo): derived data, never indexed. */
struct result_row {
    char key[KVFS_HASH_HEX_LEN + 1];
    uint64_t stored_size, logical_size;
    int64_t accessed_ns;
    uint64_t hits;
    int pinned;
};

struct result_table {
    const char *dir;   /* the store's directory */
    uint64_t capacity; /* disk bytes for results (blend_cache, within the store's capacity) */
    struct result_row *rows; /* unordered */
    size_t n, cap;
    uint64_t bytes, puts, hits, misses, evictions, uncached;
};

/* An empty table for the store at dir: results get result_capacity bytes
 * (0 = 1 GiB), never more than the store's capacity (0 = unlimited). */
void result_table_init(struct result_table *t, const char *dir, uint64_t result_capacity, uint64_t capacity);
/* Create DIR/results/ or remove what an earlier mount left there. */
int result_table_clear_dir(struct result_table *t);
void result_table_free(struct result_table *t);
void result_table_path(const struct result_table *t, const char *key, char *out, size_t len);
struct result_row *result_table_get(const struct result_table *t, const char *key);
/* the least recently used unpinned result, or NULL */
struct result_row *result_table_lru(const struct result_table *t);
/* a row for a result just moved into place (counted as stored); -ENOMEM */
int result_table_add(struct result_table *t, const char *key, uint64_t stored, uint64_t logical, int64_t now_ns);
/* Remove a result: its object, its row and its copy in the RAM tier. */
void result_table_remove(struct result_table *t, struct ram_tier *ram, const char *key);
/* `,\n  "results": {...}` for the store's stats JSON */
void result_table_stats(const struct result_table *t, const struct ram_tier *ram, FILE *f);

#endif
