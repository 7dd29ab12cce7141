/* result_table.c - the blend results kept on disk (result_table.h). */
#include "result_table.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

#define DEFAULT_RESULT_CAPACITY (1ull << 30)

void result_table_init(struct result_table *t, const char *dir, uint64_t result_capacity, uint64_t capacity)
{
    uint64_t cap = result_capacity ? result_capacity : DEFAULT_RESULT_CAPACITY;
    memset(t, 0, sizeof(*t));
    t->dir = dir;
    t->capacity = capacity && capacity < cap ? capacity : cap;
}

int result_table_clear_dir(struct result_table *t)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/results", t->dir);
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        return -errno;
    DIR *d = opendir(path);
    if (!d)
        return -errno;
    struct dirent *de;
    unsigned removed = 0;
    while ((de = readdir(d)))
        if (de->d_name[0] != '.' && unlinkat(dirfd(d), de->d_name, 0) == 0)
            removed++;
    closedir(d);
    if (removed)
        kvfs_log(KVFS_LOG_INFO, "removed %u blend results of an earlier mount (%s)", removed, path);
    return 0;
}

void result_table_free(struct result_table *t)
{
    free(t->rows);
    t->rows = NULL;
    t->n = t->cap = 0;
}

void result_table_path(const struct result_table *t, const char *key, char *out, size_t len)
{
    snprintf(out, len, "%s/results/%s.kvo", t->dir, key);
}

struct result_row *result_table_get(const struct result_table *t, const char *key)
{
    for (size_t i = 0; i < t->n; i++)
        if (!strcmp(t->rows[i].key, key))
            return &t->rows[i];
    return NULL;
}

struct result_row *result_table_lru(const struct result_table *t)
{
    struct result_row *v = NULL;
    for (size_t i = 0; i < t->n; i++)
        if (!t->rows[i].pinned && (!v || t->rows[i].accessed_ns < v->accessed_ns))
            v = &t->rows[i];
    return v;
}

int result_table_add(struct result_table *t, const char *key, uint64_t stored, uint64_t logical, int64_t now_ns)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        struct result_row *r = realloc(t->rows, cap * sizeof(*r));
        if (!r)
            return -ENOMEM;
        t->rows = r;
        t->cap = cap;
    }
    struct result_row *r = &t->rows[t->n++];
    memset(r, 0, sizeof(*r));
    snprintf(r->key, sizeof(r->key), "%s", key);
    r->stored_size = stored;
    r->logical_size = logical;
    r->accessed_ns = now_ns;
    t->bytes += stored;
    t->puts++;
    return 0;
}

void result_table_remove(struct result_table *t, struct ram_tier *ram, const char *key)
{
    struct result_row *r = result_table_get(t, key);
    if (!r)
        return;
    char p[4096];
    result_table_path(t, key, p, sizeof(p));
    unlink(p);
    ram_drop(ram, key);
    t->bytes -= r->stored_size;
    *r = t->rows[--t->n]; /* unordered: move the last one here */
}

void result_table_stats(const struct result_table *t, const struct ram_tier *ram, FILE *f)
{
    uint64_t pinned = 0, in_ram = 0, ram_bytes = 0;
    for (size_t i = 0; i < t->n; i++) {
        struct ram_entry *e = ram_lookup(ram, t->rows[i].key);
        pinned += t->rows[i].pinned != 0;
        in_ram += e != NULL;
        ram_bytes += e ? e->size : 0;
    }
    fprintf(f,
            ",\n  \"results\": {\"count\": %zu, \"pinned\": %" PRIu64 ", \"bytes_stored\": %" PRIu64
            ", \"capacity\": %" PRIu64 ", \"in_ram\": %" PRIu64 ", \"ram_bytes\": %" PRIu64 ", \"stored\": %" PRIu64
            ", \"hits\": %" PRIu64 ", \"misses\": %" PRIu64 ", \"evictions\": %" PRIu64 ", \"not_kept\": %" PRIu64
            "}",
            t->n, pinned, t->bytes, t->capacity, in_ram, ram_bytes, t->puts, t->hits, t->misses, t->evictions,
            t->uncached);
}
