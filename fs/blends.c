/* blends.c - the blends/ directory: names, inodes and replies.
 *
 *   blends/NAME.recipe  written by the user (see kvfs(8), "BLENDING"); a
 *                       rejected one keeps its text so it can be read back
 *   blends/NAME.kv      the composed cache (format v1, flag BLENDED), from
 *                       the mount's blend service (blend/service.h): blended
 *                       on open unless the store's tiers hold the result
 *   blends/NAME.err     the last error for NAME (empty when none)
 *
 * Parsing is blend/recipe.c's, blending and result caching the service's. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvfs_fs.h"
#include "llama_state.h"
#include "service.h"

struct blend_entry {
    char name[200];
    uint64_t id;
    char *recipe;      /* text as written (also when rejected) */
    int valid;         /* the text parses */
    char key[KVFS_HASH_HEX_LEN + 1]; /* the result's key, when valid */
    char err[512];
    uint64_t size;     /* of the last result served (0 before the first) */
    uint64_t llama_size; /* its llama.cpp view's (llama/NAME.llama) */
    int removed;       /* forgotten (rm) while open: gone with its last handle */
    int opens;         /* NAME.kv handles and opens in progress */
    struct blend_entry *next;
};

struct kvfs_blends {
    pthread_mutex_t lock; /* the entries */
    struct blend_entry *entries;
    uint64_t next_id;
};

int blends_init(struct kvfs_mount *mnt)
{
    struct kvfs_blends *b = calloc(1, sizeof(*b));
    if (!b)
        return -ENOMEM;
    pthread_mutex_init(&b->lock, NULL);
    b->next_id = 1;
    mnt->blends = b;
    return 0;
}

void blends_free(struct kvfs_mount *mnt)
{
    struct kvfs_blends *b = mnt->blends;
    if (!b)
        return;
    while (b->entries) {
        struct blend_entry *e = b->entries;
        b->entries = e->next;
        free(e->recipe);
        free(e);
    }
    pthread_mutex_destroy(&b->lock);
    free(b);
    mnt->blends = NULL;
}

static const char *const EXT[] = {".recipe", ".kv", ".err"};

/* names: NAME.recipe, NAME.kv, NAME.err -> kind 0, 1, 2 */
static int split_name(const char *name, char *base, size_t cap)
{
    size_t n = strlen(name);
    for (int k = 0; k < 3; k++) {
        size_t el = strlen(EXT[k]);
        if (n > el && n - el < cap && !strcmp(name + n - el, EXT[k])) {
            memcpy(base, name, n - el);
            base[n - el] = '\0';
            for (size_t i = 0; i < n - el; i++)
                if (base[i] == '/' || (unsigned char)base[i] < 32)
                    return -EINVAL;
            return k;
        }
    }
    return -EINVAL;
}

/* by name: forgotten entries are no longer there */
static struct blend_entry *find(struct kvfs_blends *b, const char *base)
{
    for (struct blend_entry *e = b->entries; e; e = e->next)
        if (!e->removed && !strcmp(e->name, base))
            return e;
    return NULL;
}

static struct blend_entry *find_ino(struct kvfs_blends *b, fuse_ino_t ino)
{
    uint64_t id = BLEND_ID(ino);
    for (struct blend_entry *e = b->entries; e; e = e->next)
        if (e->id == id)
            return e;
    return NULL;
}

static void fill_attr(const struct blend_entry *e, int kind, struct stat *st)
{
    memset(st, 0, sizeof(*st));
    st->st_ino = BLEND_INO(e->id, kind);
    st->st_mode = S_IFREG | (kind == 0 ? 0644 : 0444);
    st->st_nlink = 1;
    st->st_uid = getuid();
    st->st_gid = getgid();
    st->st_size = kind == BLEND_RECIPE ? (off_t)strlen(e->recipe) : kind == BLEND_ERR ? (off_t)strlen(e->err)
                : kind == BLEND_KV ? (off_t)e->size : (off_t)e->llama_size;
    clock_gettime(CLOCK_REALTIME, &st->st_mtim);
    st->st_atim = st->st_ctim = st->st_mtim;
}

int blends_lookup(struct kvfs_mount *mnt, const char *name, struct stat *st)
{
    char base[200];
    int kind = split_name(name, base, sizeof(base));
    if (kind < 0)
        return -ENOENT;
    pthread_mutex_lock(&mnt->blends->lock);
    struct blend_entry *e = find(mnt->blends, base);
    if (e)
        fill_attr(e, kind, st);
    pthread_mutex_unlock(&mnt->blends->lock);
    return e ? 0 : -ENOENT;
}

int blends_getattr(struct kvfs_mount *mnt, fuse_ino_t ino, struct stat *st)
{
    pthread_mutex_lock(&mnt->blends->lock);
    struct blend_entry *e = find_ino(mnt->blends, ino);
    if (e)
        fill_attr(e, BLEND_KIND(ino), st);
    pthread_mutex_unlock(&mnt->blends->lock);
    return e ? 0 : -ENOENT;
}

int blends_list(struct kvfs_mount *mnt, int (*fn)(void *ctx, const char *name, fuse_ino_t ino), void *ctx)
{
    int rc = 0;
    char name[256];
    pthread_mutex_lock(&mnt->blends->lock);
    for (struct blend_entry *e = mnt->blends->entries; e && !rc; e = e->next)
        for (int k = 0; k < 3 && !rc && !e->removed; k++) {
            snprintf(name, sizeof(name), "%s%s", e->name, EXT[k]);
            rc = fn(ctx, name, BLEND_INO(e->id, k));
        }
    pthread_mutex_unlock(&mnt->blends->lock);
    return rc;
}

int blends_lookup_kind(struct kvfs_mount *mnt, const char *base, int kind, struct stat *st)
{
    pthread_mutex_lock(&mnt->blends->lock);
    struct blend_entry *e = find(mnt->blends, base);
    if (e)
        fill_attr(e, kind, st);
    pthread_mutex_unlock(&mnt->blends->lock);
    return e ? 0 : -ENOENT;
}

int blends_list_llama(struct kvfs_mount *mnt, int (*fn)(void *ctx, const char *name, fuse_ino_t ino), void *ctx)
{
    int rc = 0;
    char name[256];
    pthread_mutex_lock(&mnt->blends->lock);
    for (struct blend_entry *e = mnt->blends->entries; e && !rc; e = e->next)
        if (!e->removed && e->valid) {
            snprintf(name, sizeof(name), "%s.llama", e->name);
            rc = fn(ctx, name, BLEND_INO(e->id, BLEND_LLAMA));
        }
    pthread_mutex_unlock(&mnt->blends->lock);
    return rc;
}

int blends_check_new_name(const char *name)
{
    char base[200];
    return split_name(name, base, sizeof(base)) == 0 ? 0 : -EPERM;
}

/* The entry for base, created if needed (lock held). */
static struct blend_entry *entry_for(struct kvfs_blends *b, const char *base)
{
    struct blend_entry *e = find(b, base);
    if (e || !(e = calloc(1, sizeof(*e))))
        return e;
    if (!(e->recipe = strdup(""))) {
        free(e);
        return NULL;
    }
    snprintf(e->name, sizeof(e->name), "%s", base);
    e->id = b->next_id++;
    e->next = b->entries;
    b->entries = e;
    return e;
}

int blends_set_recipe(struct kvfs_mount *mnt, const char *name, const void *buf, size_t len, int partial_ok,
                      char *err, size_t errlen)
{
    char base[200], key[KVFS_HASH_HEX_LEN + 1] = "";
    if (split_name(name, base, sizeof(base)) != 0)
        return -EPERM;
    char *text = malloc(len + 1);
    if (!text)
        return -ENOMEM;
    if (len) /* an empty draft may have no buffer at all */
        memcpy(text, buf, len);
    text[len] = '\0';
    /* an empty file is a recipe not written yet (the shell's `>` creates
     * it, then writes): no error, nothing to blend */
    struct kvfs_recipe r;
    int rc = len ? kvfs_recipe_parse(text, len, &r, err, errlen) : 0;
    if (len && !rc) {
        kvfs_blend_service_key(mnt->svc, &r, key);
        kvfs_recipe_free(&r);
    }
    if (rc && partial_ok && r.incomplete) { /* more is still being written */
        free(text);
        return -EINPROGRESS;
    }
    pthread_mutex_lock(&mnt->blends->lock);
    struct blend_entry *e = entry_for(mnt->blends, base);
    if (e) {
        free(e->recipe);
        e->recipe = text; /* kept even when rejected: cat shows the typo */
        text = NULL;
        e->valid = len && !rc;
        memcpy(e->key, key, sizeof(key));
        e->size = 0;
        if (rc)
            snprintf(e->err, sizeof(e->err), "%.500s\n", err);
        else
            e->err[0] = '\0';
    }
    pthread_mutex_unlock(&mnt->blends->lock);
    free(text);
    return e ? rc : -ENOMEM;
}

static void drop_locked(struct kvfs_blends *b, struct blend_entry *e)
{
    for (struct blend_entry **pp = &b->entries; *pp; pp = &(*pp)->next)
        if (*pp == e) {
            *pp = e->next;
            break;
        }
    free(e->recipe);
    free(e);
}

int blends_unlink(struct kvfs_mount *mnt, const char *name)
{
    char base[200], key[KVFS_HASH_HEX_LEN + 1] = "";
    if (split_name(name, base, sizeof(base)) != 0)
        return -ENOENT;
    struct kvfs_blends *b = mnt->blends;
    pthread_mutex_lock(&b->lock);
    struct blend_entry *e = find(b, base);
    if (e) {
        if (e->valid)
            memcpy(key, e->key, sizeof(key));
        e->removed = 1;
        if (e->opens == 0)
            drop_locked(b, e);
    }
    pthread_mutex_unlock(&b->lock);
    if (!e)
        return -ENOENT;
    /* forget the result too (an equal recipe elsewhere is blended again);
     * open handles keep their bytes and their file's attributes */
    if (key[0])
        kvfs_store_remove_result(mnt->store, key);
    kvfs_log(KVFS_LOG_INFO, "forgot blends/%s", base);
    return 0;
}

void blends_release(struct kvfs_mount *mnt, fuse_ino_t ino)
{
    pthread_mutex_lock(&mnt->blends->lock);
    struct blend_entry *e = find_ino(mnt->blends, ino);
    if (e && --e->opens == 0 && e->removed)
        drop_locked(mnt->blends, e);
    pthread_mutex_unlock(&mnt->blends->lock);
}

/* The outcome of serving NAME: its error, or its result's sizes. */
static void set_err(struct kvfs_mount *mnt, fuse_ino_t ino, int rc, const char *why, struct kvfs_chunk_ref *ref)
{
    uint64_t size = 0, llama_size = 0;
    struct kvfs_header h;
    struct kvfs_llama_view v;
    if (!rc) {
        size = kvfs_chunk_size(ref);
        if (!kvfs_header_parse(kvfs_chunk_data(ref), size, &h, NULL, 0) && !kvfs_llama_view_init(&v, &h, 0)) {
            llama_size = v.size;
            kvfs_llama_view_free(&v);
        }
    }
    pthread_mutex_lock(&mnt->blends->lock);
    struct blend_entry *e = find_ino(mnt->blends, ino);
    if (e && rc)
        snprintf(e->err, sizeof(e->err), "%.500s\n", why[0] ? why : strerror(-rc));
    else if (e) {
        e->err[0] = '\0';
        e->size = size;
        e->llama_size = llama_size;
    }
    pthread_mutex_unlock(&mnt->blends->lock);
}

int blends_open_kv(struct kvfs_mount *mnt, fuse_ino_t ino, struct kvfs_chunk_ref **ref)
{
    char *text = NULL, name[200] = "", err[512] = "";
    int rc = 0, valid = 0;
    char key[KVFS_HASH_HEX_LEN + 1] = "";
    pthread_mutex_lock(&mnt->blends->lock);
    struct blend_entry *e = find_ino(mnt->blends, ino);
    if (e && e->removed)
        e = NULL;
    if (e) {
        valid = e->valid;
        memcpy(key, e->key, sizeof(key));
        snprintf(name, sizeof(name), "%s", e->name);
        text = strdup(e->recipe);
        e->opens++; /* held (e stays) until blends_release */
    }
    pthread_mutex_unlock(&mnt->blends->lock);
    if (!e)
        return -ENOENT;
    struct kvfs_recipe r;
    if (!text || !valid) { /* empty or rejected: its .err says why */
        free(text);
        blends_release(mnt, ino);
        return text ? -EINVAL : -ENOMEM;
    }
    if (!(rc = kvfs_recipe_parse(text, strlen(text), &r, err, sizeof(err)))) {
        rc = kvfs_blend_service_get(mnt->svc, &r, ref, err, sizeof(err));
        kvfs_recipe_free(&r);
    }
    free(text);
    set_err(mnt, ino, rc, err, rc ? NULL : *ref);
    pthread_mutex_lock(&mnt->blends->lock);
    int forgotten = e->removed; /* rm while it blended: forget what it stored */
    pthread_mutex_unlock(&mnt->blends->lock);
    if (forgotten && !rc)
        kvfs_store_remove_result(mnt->store, key);
    if (rc) {
        kvfs_log(KVFS_LOG_ERR, "blend %s failed: %s", name, err[0] ? err : strerror(-rc));
        blends_release(mnt, ino);
    }
    return rc;
}

fuse_ino_t blends_ino_of(struct kvfs_mount *mnt, const char *base)
{
    pthread_mutex_lock(&mnt->blends->lock);
    struct blend_entry *e = find(mnt->blends, base);
    fuse_ino_t ino = e ? BLEND_INO(e->id, BLEND_KV) : 0;
    pthread_mutex_unlock(&mnt->blends->lock);
    return ino;
}

int blends_recipe_name(struct kvfs_mount *mnt, fuse_ino_t ino, char *out, size_t cap)
{
    pthread_mutex_lock(&mnt->blends->lock);
    struct blend_entry *e = find_ino(mnt->blends, ino);
    if (e)
        snprintf(out, cap, "%s.recipe", e->name);
    pthread_mutex_unlock(&mnt->blends->lock);
    return e ? 0 : -ENOENT;
}

int blends_text(struct kvfs_mount *mnt, fuse_ino_t ino, char **text)
{
    int kind = BLEND_KIND(ino);
    pthread_mutex_lock(&mnt->blends->lock);
    struct blend_entry *e = find_ino(mnt->blends, ino);
    *text = e ? strdup(kind == 0 ? e->recipe : e->err) : NULL;
    pthread_mutex_unlock(&mnt->blends->lock);
    return e ? (*text ? 0 : -ENOMEM) : -ENOENT;
}

int blends_result_key(struct kvfs_mount *mnt, fuse_ino_t ino, char key[KVFS_HASH_HEX_LEN + 1])
{
    pthread_mutex_lock(&mnt->blends->lock);
    struct blend_entry *e = find_ino(mnt->blends, ino);
    int rc = !e ? -ENOENT : !e->valid ? -ENODATA : 0;
    if (!rc)
        memcpy(key, e->key, KVFS_HASH_HEX_LEN + 1);
    pthread_mutex_unlock(&mnt->blends->lock);
    return rc;
}

int blends_open_batch(struct kvfs_mount *mnt, const fuse_ino_t *inos, int n, struct kvfs_chunk_ref **refs, int *rcs,
                      char (*errs)[512])
{
    struct kvfs_recipe *r = calloc((size_t)n, sizeof(*r));
    const struct kvfs_recipe **rp = calloc((size_t)n, sizeof(*rp));
    int *slot = calloc((size_t)n, sizeof(*slot)), m = 0, first = 0;
    if (!r || !rp || !slot) {
        free(r), free(rp), free(slot);
        return -ENOMEM;
    }
    for (int i = 0; i < n; i++) { /* each entry's current text, parsed */
        char *text = NULL;
        int valid = 0;
        refs[i] = NULL;
        errs[i][0] = '\0';
        pthread_mutex_lock(&mnt->blends->lock);
        struct blend_entry *e = find_ino(mnt->blends, inos[i]);
        if (e && !e->removed && (valid = e->valid))
            text = strdup(e->recipe);
        pthread_mutex_unlock(&mnt->blends->lock);
        rcs[i] = !e ? -ENOENT : !valid ? -EINVAL : !text ? -ENOMEM
               : kvfs_recipe_parse(text, strlen(text), &r[m], errs[i], 512);
        free(text);
        if (!rcs[i]) {
            rp[m] = &r[m];
            slot[m++] = i;
        }
    }
    struct kvfs_chunk_ref **mrefs = calloc((size_t)m + 1, sizeof(*mrefs));
    int *mrcs = calloc((size_t)m + 1, sizeof(int));
    char (*merrs)[512] = calloc((size_t)m + 1, 512);
    if (mrefs && mrcs && merrs)
        kvfs_blend_service_get_batch(mnt->svc, rp, m, mrefs, mrcs, merrs);
    for (int k = 0; k < m; k++) {
        int i = slot[k];
        rcs[i] = mrefs && mrcs && merrs ? mrcs[k] : -ENOMEM;
        refs[i] = mrefs ? mrefs[k] : NULL;
        if (merrs)
            memcpy(errs[i], merrs[k], 512);
        set_err(mnt, inos[i], rcs[i], errs[i], rcs[i] ? NULL : refs[i]);
        kvfs_recipe_free(&r[k]);
    }
    for (int i = 0; i < n; i++)
        if (rcs[i] && !first)
            first = rcs[i];
    free(mrefs), free(mrcs), free(merrs), free(r), free(rp), free(slot);
    return first;
}
