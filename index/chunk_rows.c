/* chunk_rows.c - sorted array of row pointers, binary search by hash
 * (chunk_rows.h). */
#include "chunk_rows.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

long chunk_rows_find(const struct chunk_rows *t, const char *hash, int *found)
{
    long lo = 0, hi = (long)t->n;
    while (lo < hi) {
        long mid = (lo + hi) / 2;
        int c = strcmp(t->v[mid]->hash, hash);
        if (c == 0) {
            *found = 1;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = 0;
    return lo;
}

struct kvfs_chunk_info *chunk_rows_get(const struct chunk_rows *t, const char *hash)
{
    int found;
    long i = chunk_rows_find(t, hash, &found);
    return found ? t->v[i] : NULL;
}

int chunk_rows_insert(struct chunk_rows *t, const struct kvfs_chunk_info *info)
{
    int found;
    long i = chunk_rows_find(t, info->hash, &found);
    if (found) {
        *t->v[i] = *info;
        return 0;
    }
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 1024;
        struct kvfs_chunk_info **r = realloc(t->v, cap * sizeof(*r));
        if (!r)
            return -ENOMEM;
        t->v = r;
        t->cap = cap;
    }
    struct kvfs_chunk_info *c = malloc(sizeof(*c));
    if (!c)
        return -ENOMEM;
    *c = *info;
    memmove(&t->v[i + 1], &t->v[i], (t->n - (size_t)i) * sizeof(*t->v));
    t->v[i] = c;
    t->n++;
    t->bytes_stored += info->stored_size;
    t->bytes_logical += info->logical_size;
    return 0;
}

void chunk_rows_remove(struct chunk_rows *t, const char *hash)
{
    int found;
    long i = chunk_rows_find(t, hash, &found);
    if (!found)
        return;
    t->bytes_stored -= t->v[i]->stored_size;
    t->bytes_logical -= t->v[i]->logical_size;
    free(t->v[i]);
    memmove(&t->v[i], &t->v[i + 1], (t->n - (size_t)i - 1) * sizeof(*t->v));
    t->n--;
}

void chunk_rows_free(struct chunk_rows *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->v[i]);
    free(t->v);
    memset(t, 0, sizeof(*t));
}
