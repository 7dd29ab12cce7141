/* inode_map.c - chunk inode numbers <-> hashes.  A chunk's inode is derived
 * from its hash (stable across remounts); this map turns one back into the
 * other for the inodes the kernel knows about.  Each entry counts the
 * kernel's lookups of its inode (lookup replies and readdirplus entries);
 * the kernel's forget takes them back and the entry goes at zero, so the map
 * holds what the kernel holds, not every chunk ever listed.  An entry put
 * with no lookup (a chunk just stored through a draft, whose inode the
 * kernel does not know yet) stays until a lookup of it is forgotten. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "inode_map.h"
#include "mount.h"
#include "node.h"

struct ino_node {
    uint64_t ino;
    uint64_t lookups; /* the kernel's lookup count of ino */
    char hash[KVFS_HASH_HEX_LEN + 1];
    struct ino_node *next;
};

struct ino_map {
    struct ino_node **buckets;
    size_t n_buckets, count;
};

uint64_t kvfs_chunk_ino(const char *hash)
{
    uint8_t d[32];
    uint64_t v = 0;
    if (kvfs_hex_to_hash(hash, d) == 0)
        memcpy(&v, d, 8);
    return INO_CHUNK_BIT | (v >> 3);
}

int kvfs_parse_chunk_name(const char *name, char hash[KVFS_HASH_HEX_LEN + 1])
{
    uint8_t d[32];
    if (strlen(name) != KVFS_HASH_HEX_LEN + 3 || strcmp(name + KVFS_HASH_HEX_LEN, ".kv"))
        return -EINVAL;
    memcpy(hash, name, KVFS_HASH_HEX_LEN);
    hash[KVFS_HASH_HEX_LEN] = '\0';
    return kvfs_hex_to_hash(hash, d);
}

struct ino_map *ino_map_new(void)
{
    struct ino_map *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    m->n_buckets = 1 << 12;
    m->buckets = calloc(m->n_buckets, sizeof(*m->buckets));
    if (!m->buckets) {
        free(m);
        return NULL;
    }
    return m;
}

void ino_map_free(struct ino_map *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n_buckets; i++) {
        struct ino_node *n = m->buckets[i];
        while (n) {
            struct ino_node *next = n->next;
            free(n);
            n = next;
        }
    }
    free(m->buckets);
    free(m);
}

static void grow(struct ino_map *m)
{
    size_t nb = m->n_buckets * 4;
    struct ino_node **b = calloc(nb, sizeof(*b));
    if (!b)
        return; /* keep working with longer chains */
    for (size_t i = 0; i < m->n_buckets; i++) {
        struct ino_node *n = m->buckets[i];
        while (n) {
            struct ino_node *next = n->next;
            size_t k = (size_t)(n->ino * 0x9E3779B97F4A7C15ull >> 20) & (nb - 1);
            n->next = b[k];
            b[k] = n;
            n = next;
        }
    }
    free(m->buckets);
    m->buckets = b;
    m->n_buckets = nb;
}

static size_t slot(const struct ino_map *m, uint64_t ino)
{
    return (size_t)(ino * 0x9E3779B97F4A7C15ull >> 20) & (m->n_buckets - 1);
}

int ino_map_put(struct ino_map *m, uint64_t ino, const char *hash, uint64_t lookups)
{
    for (struct ino_node *n = m->buckets[slot(m, ino)]; n; n = n->next)
        if (n->ino == ino) {
            memcpy(n->hash, hash, KVFS_HASH_HEX_LEN + 1);
            n->lookups += lookups;
            return 0;
        }
    if (m->count > m->n_buckets * 2)
        grow(m);
    struct ino_node *n = malloc(sizeof(*n));
    if (!n)
        return -ENOMEM;
    n->ino = ino;
    n->lookups = lookups;
    memcpy(n->hash, hash, KVFS_HASH_HEX_LEN + 1);
    size_t k = slot(m, ino);
    n->next = m->buckets[k];
    m->buckets[k] = n;
    m->count++;
    return 0;
}

int ino_map_get(struct ino_map *m, uint64_t ino, char hash[KVFS_HASH_HEX_LEN + 1])
{
    for (struct ino_node *n = m->buckets[slot(m, ino)]; n; n = n->next)
        if (n->ino == ino) {
            memcpy(hash, n->hash, KVFS_HASH_HEX_LEN + 1);
            return 0;
        }
    return -ENOENT;
}

void ino_map_forget(struct ino_map *m, uint64_t ino, uint64_t nlookup)
{
    for (struct ino_node **pp = &m->buckets[slot(m, ino)]; *pp; pp = &(*pp)->next) {
        struct ino_node *n = *pp;
        if (n->ino != ino)
            continue;
        n->lookups = n->lookups > nlookup ? n->lookups - nlookup : 0;
        if (n->lookups == 0) {
            *pp = n->next;
            free(n);
            m->count--;
        }
        return;
    }
}

size_t ino_map_count(const struct ino_map *m)
{
    return m->count;
}

int remember_chunk(struct kvfs_mount *m, const char *hash, uint64_t lookups)
{
    pthread_mutex_lock(&m->lock);
    int rc = ino_map_put(m->inos, kvfs_chunk_ino(hash), hash, lookups);
    pthread_mutex_unlock(&m->lock);
    return rc;
}

void forget_chunks(struct kvfs_mount *m, const struct fuse_forget_data *f, size_t count)
{
    pthread_mutex_lock(&m->lock);
    size_t before = ino_map_count(m->inos);
    for (size_t i = 0; i < count; i++)
        if (node_is_chunk(f[i].ino)) /* only chunks are in the map */
            ino_map_forget(m->inos, f[i].ino, f[i].nlookup);
    size_t after = ino_map_count(m->inos);
    pthread_mutex_unlock(&m->lock);
    if (after != before) /* with -o verbose: tests see the map shrink */
        kvfs_log(KVFS_LOG_DEBUG, "forgot %zu chunk inodes, %zu known", before - after, after);
}
