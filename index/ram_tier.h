/* ram_tier.h - the RAM tier: decoded images (chunks and blend results
 * alike) kept in memory within a byte budget, least recently used dropped
 * first, and the entries readers hold (refcounted) whether cached or not.
 * Not thread-safe: the store calls it under its lock. */
#ifndef KVFS_RAM_TIER_H
#define KVFS_RAM_TIER_H

#include <stddef.h>
#include <stdint.h>

#include "kvformat.h" /* KVFS_HASH_HEX_LEN */

/* Page-locking the tier's images (a GPU backend's host_register, through
 * kvfs_store_set_pin): they then cross to the device by DMA, no staging
 * copy.  unpin takes an argument of its own: an entry a reader still holds
 * may be freed after whoever set the hooks is gone. */
struct ram_pin {
    int (*pin)(void *arg, void *p, size_t n);
    void *pin_arg;
    void (*unpin)(void *arg, void *p);
    void *unpin_arg;
};

/* A decoded image in memory: in the RAM tier (cached) and/or held by refs. */
struct ram_entry {
    char hash[KVFS_HASH_HEX_LEN + 1]; /* chunk hash or blend result key */
    uint8_t *img;
    size_t size;
    int refs;
    int cached;          /* counted in the RAM tier; else freed at last release */
    uint64_t stamp;      /* LRU clock */
    struct ram_pin pinned; /* unpin set: img is page-locked, undone so before it is freed */
    struct ram_entry *next;
};

struct ram_tier {
    struct ram_entry *head; /* unordered; LRU by stamp */
    uint64_t capacity;      /* bytes; 0 = no RAM tier */
    uint64_t used, clock, hits;
    size_t count;
    struct ram_pin pin; /* pin set: entries are page-locked as they enter */
};

struct ram_entry *ram_lookup(const struct ram_tier *t, const char *hash);
/* Drop hash's entry from the tier (freed unless a reader holds it). */
void ram_drop(struct ram_tier *t, const char *hash);
/* Put an entry into the tier if there is one and it fits, dropping least
 * recently used entries to make room; 1 if it is now cached there. */
int ram_insert(struct ram_tier *t, struct ram_entry *e);
/* a hit: one more reference, most recently used */
void ram_hit(struct ram_tier *t, struct ram_entry *e);
/* a freshly decoded entry (refs 1, not cached): the entry to use, which is
 * one another reader decoded meanwhile (e is then freed) or e, put in the
 * tier when keep */
struct ram_entry *ram_adopt_decoded(struct ram_tier *t, struct ram_entry *e, int keep);
/* New pinning hooks (pin NULL: none): the cached entries are unpinned with
 * their old hooks and pinned with the new.  A failed pin leaves the entry
 * as it was (its uploads then go through staging). */
void ram_set_pin(struct ram_tier *t, const struct ram_pin *p);
/* Empty the tier: entries no reader holds are freed, held ones belong to
 * their readers from now on. */
void ram_tier_close(struct ram_tier *t);

/* A new entry for img (taken: freed with the entry) of size bytes, named
 * hash, with refs references and not cached; NULL on ENOMEM (img is not
 * freed then). */
struct ram_entry *ram_entry_new(const char *hash, uint8_t *img, size_t size, int refs);
void ram_entry_free(struct ram_entry *e);
/* Decode the store object at path into a new entry named name (refs 1, not
 * cached); -errno with the reason in why. */
int ram_entry_decode(const char *path, const char *name, struct ram_entry **out, char *why, size_t whylen);
/* the same into the daemon's own memory (kvfs_obj_decode_file_private) */
int ram_entry_decode_private(const char *path, const char *name, struct ram_entry **out, char *why,
                             size_t whylen);

#endif
