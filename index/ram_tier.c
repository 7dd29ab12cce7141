/* ram_tier.c - the RAM tier of decoded images (ram_tier.h). */
#include "ram_tier.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "image.h"
#include "object.h"

struct ram_entry *ram_lookup(const struct ram_tier *t, const char *hash)
{
    for (struct ram_entry *e = t->head; e; e = e->next)
        if (!strcmp(e->hash, hash))
            return e;
    return NULL;
}

static void ram_unlink(struct ram_tier *t, struct ram_entry *e)
{
    for (struct ram_entry **pp = &t->head; *pp; pp = &(*pp)->next) {
        if (*pp == e) {
            *pp = e->next;
            break;
        }
    }
    t->used -= e->size;
    t->count--;
    e->cached = 0;
    e->next = NULL;
    if (e->refs == 0)
        ram_entry_free(e);
}

void ram_drop(struct ram_tier *t, const char *hash)
{
    struct ram_entry *e = ram_lookup(t, hash);
    if (e)
        ram_unlink(t, e);
}

/* Make room for `need` bytes by dropping least recently used entries. */
static int ram_make_room(struct ram_tier *t, size_t need)
{
    if (need > t->capacity)
        return -ENOSPC;
    while (t->used + need > t->capacity) {
        struct ram_entry *victim = NULL;
        for (struct ram_entry *e = t->head; e; e = e->next)
            if (!victim || e->stamp < victim->stamp)
                victim = e;
        if (!victim)
            return -ENOSPC;
        ram_unlink(t, victim);
    }
    return 0;
}

static void entry_pin(const struct ram_tier *t, struct ram_entry *e)
{
    if (t->pin.pin && !e->pinned.unpin && t->pin.pin(t->pin.pin_arg, e->img, e->size) == 0)
        e->pinned = t->pin;
}

static void entry_unpin(struct ram_entry *e)
{
    if (e->pinned.unpin)
        e->pinned.unpin(e->pinned.unpin_arg, e->img);
    memset(&e->pinned, 0, sizeof(e->pinned));
}

void ram_set_pin(struct ram_tier *t, const struct ram_pin *p)
{
    for (struct ram_entry *e = t->head; e; e = e->next)
        entry_unpin(e);
    if (p)
        t->pin = *p;
    else
        memset(&t->pin, 0, sizeof(t->pin));
    for (struct ram_entry *e = t->head; e; e = e->next)
        entry_pin(t, e);
}

int ram_insert(struct ram_tier *t, struct ram_entry *e)
{
    if (!t->capacity || ram_make_room(t, e->size) != 0)
        return 0;
    entry_pin(t, e);
    e->cached = 1;
    e->next = t->head;
    t->head = e;
    t->used += e->size;
    t->count++;
    return 1;
}

void ram_hit(struct ram_tier *t, struct ram_entry *e)
{
    e->refs++;
    e->stamp = ++t->clock;
    t->hits++;
}

struct ram_entry *ram_adopt_decoded(struct ram_tier *t, struct ram_entry *e, int keep)
{
    struct ram_entry *raced = ram_lookup(t, e->hash);
    if (raced) { /* another reader decoded it meanwhile: share theirs */
        raced->refs++;
        ram_entry_free(e);
        return raced;
    }
    e->stamp = ++t->clock;
    if (keep)
        ram_insert(t, e);
    return e;
}

void ram_tier_close(struct ram_tier *t)
{
    while (t->head) {
        struct ram_entry *e = t->head;
        t->head = e->next;
        if (e->refs == 0) /* live refs own their entry now */
            ram_entry_free(e);
        else
            e->cached = 0;
    }
}

struct ram_entry *ram_entry_new(const char *hash, uint8_t *img, size_t size, int refs)
{
    struct ram_entry *e = calloc(1, sizeof(*e));
    if (!e)
        return NULL;
    snprintf(e->hash, sizeof(e->hash), "%s", hash);
    e->img = img;
    e->size = size;
    e->refs = refs;
    return e;
}

void ram_entry_free(struct ram_entry *e)
{
    entry_unpin(e);
    kvfs_img_free(e->img);
    free(e);
}

static int entry_decode(const char *path, const char *name, int private_img, struct ram_entry **out, char *why,
                        size_t whylen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW), rc; /* a symlink planted in the store is not followed */
    struct stat st;
    uint8_t *img = NULL;
    size_t len = 0;
    if (fd < 0) {
        rc = -errno;
        snprintf(why, whylen, "%s", strerror(-rc));
        return rc;
    }
    rc = fstat(fd, &st) ? -errno
       : private_img ? kvfs_obj_decode_file_private(fd, (uint64_t)st.st_size, &img, &len, why, whylen)
                     : kvfs_obj_decode_file(fd, (uint64_t)st.st_size, &img, &len, why, whylen);
    close(fd);
    if (rc)
        return rc;
    struct ram_entry *e = ram_entry_new(name, img, len, 1);
    if (!e) {
        kvfs_img_free(img);
        return -ENOMEM;
    }
    *out = e;
    return 0;
}

int ram_entry_decode(const char *path, const char *name, struct ram_entry **out, char *why, size_t whylen)
{
    return entry_decode(path, name, 0, out, why, whylen);
}

int ram_entry_decode_private(const char *path, const char *name, struct ram_entry **out, char *why,
                             size_t whylen)
{
    return entry_decode(path, name, 1, out, why, whylen);
}
