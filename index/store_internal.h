/* store_internal.h - the store's private state (index/ only). */
#ifndef KVFS_STORE_INTERNAL_H
#define KVFS_STORE_INTERNAL_H

#include <pthread.h>
#include <stdio.h>

#include "store.h"

struct kvfs_index_db;

/* A decoded image in memory: in the RAM tier (cached) and/or held by refs. */
struct ram_entry {
    char hash[KVFS_HASH_HEX_LEN + 1]; /* chunk hash or blend result key */
    uint8_t *img;
    size_t size;
    int refs;
    int cached;          /* counted in the RAM tier; else freed at last release */
    uint64_t stamp;      /* LRU clock */
    struct ram_entry *next;
};

struct kvfs_chunk_ref {
    struct kvfs_store *s;
    struct ram_entry *e;
};

/* A blend result on disk (results/KEY.kvo): derived data, never indexed. */
struct result_row {
    char key[KVFS_HASH_HEX_LEN + 1];
    uint64_t stored_size, logical_size;
    int64_t accessed_ns;
    uint64_t hits;
    int pinned;
};

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
    /* blend results (results.c); their bytes count within capacity too */
    struct result_row *results;
    size_t n_results, cap_results;
    uint64_t result_bytes, result_puts, result_hits, result_misses, result_evictions, result_uncached;
};

/* store.c, for results.c (s->lock held where it says _locked) */
int64_t store_now_ns(void);
struct ram_entry *ram_lookup(struct kvfs_store *s, const char *hash);
void ram_drop(struct kvfs_store *s, const char *hash);
int ram_insert_locked(struct kvfs_store *s, struct ram_entry *e); /* 1 if cached */
/* a RAM-tier hit: one more reference, most recently used */
void ram_hit_locked(struct kvfs_store *s, struct ram_entry *e);
/* a freshly decoded entry (refs 1, not cached): the entry to use, which is
 * one another reader decoded meanwhile (e is then freed) or e, put in the
 * RAM tier when keep */
struct ram_entry *ram_adopt_decoded_locked(struct kvfs_store *s, struct ram_entry *e, int keep);
/* evict least recently used chunks and results until need more bytes fit */
int store_evict_for(struct kvfs_store *s, uint64_t need);
int store_write_tmp(struct kvfs_store *s, const char *name, const void *obj, size_t len, char tmp[4096], char *err,
                    size_t errlen);
/* decode an object file into a new entry (refs 1, not cached) */
int store_decode_entry(const char *path, const char *name, struct ram_entry **out, char *why, size_t whylen);

/* results.c */
int results_open_locked(struct kvfs_store *s);
void results_close_locked(struct kvfs_store *s);
struct result_row *result_get_locked(struct kvfs_store *s, const char *key);
struct result_row *result_lru_locked(struct kvfs_store *s);
void result_remove_locked(struct kvfs_store *s, const char *key);
void results_stats_locked(struct kvfs_store *s, FILE *f);

void kvfs_info_from_header(const struct kvfs_header *h, const char *hash, uint64_t stored,
                           struct kvfs_chunk_info *c);

#endif
