/* registry.c - the blends a mount knows (registry.h). */
#include "registry.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama_state.h"
#include "log.h"
#include "service.h"

/* One recipe text parsed and keyed, shared by the blend that has it and
 * the opens serving it (a rewrite does not pull it from under them). */
struct version {
    int refs; /* under the registry's lock */
    struct kvfs_keyed_recipe kr;
};

struct entry {
    char name[KVFS_BLEND_NAME_MAX];
    uint64_t id;
    char *text;          /* as written (also when refused) */
    struct version *v;   /* NULL: empty or refused */
    char err[512];       /* the last error line ("" when none) */
    uint64_t size, llama_size; /* of the last result served */
    uint32_t llama_parts;
    int removed;         /* forgotten while held: goes with its last hold */
    int opens;           /* holds: handles and serves in progress */
    struct entry *next;
};

struct kvfs_blend_registry {
    struct kvfs_blend_service *svc;
    struct kvfs_store *store;
    pthread_mutex_t lock; /* everything below */
    struct entry *entries;
    uint64_t next_id;
};

int kvfs_registry_new(struct kvfs_blend_service *svc, struct kvfs_store *store, struct kvfs_blend_registry **out)
{
    struct kvfs_blend_registry *reg = calloc(1, sizeof(*reg));
    if (!reg)
        return -ENOMEM;
    reg->svc = svc;
    reg->store = store;
    reg->next_id = 1;
    pthread_mutex_init(&reg->lock, NULL);
    *out = reg;
    return 0;
}

static void version_free(struct version *v)
{
    if (v) {
        kvfs_recipe_free(&v->kr.r);
        free(v);
    }
}

/* one reference less (lock held); the last one's version is returned for
 * the caller to free outside the lock */
static struct version *version_unref(struct version *v)
{
    return v && --v->refs == 0 ? v : NULL;
}

static void entry_free(struct entry *e)
{
    version_free(version_unref(e->v));
    free(e->text);
    free(e);
}

void kvfs_registry_free(struct kvfs_blend_registry *reg)
{
    if (!reg)
        return;
    while (reg->entries) {
        struct entry *e = reg->entries;
        reg->entries = e->next;
        entry_free(e);
    }
    pthread_mutex_destroy(&reg->lock);
    free(reg);
}

static struct entry *by_name(struct kvfs_blend_registry *reg, const char *name)
{
    for (struct entry *e = reg->entries; e; e = e->next)
        if (!e->removed && !strcmp(e->name, name))
            return e;
    return NULL;
}

static struct entry *by_id(struct kvfs_blend_registry *reg, uint64_t id)
{
    for (struct entry *e = reg->entries; e; e = e->next)
        if (e->id == id)
            return e;
    return NULL;
}

static void info_of(const struct entry *e, struct kvfs_blend_info *info)
{
    info->id = e->id;
    info->valid = e->v != NULL;
    info->recipe_len = strlen(e->text);
    info->err_len = strlen(e->err);
    info->size = e->size;
    info->llama_size = e->llama_size;
    info->llama_parts = e->llama_parts;
}

int kvfs_registry_lookup(struct kvfs_blend_registry *reg, const char *name, struct kvfs_blend_info *info)
{
    pthread_mutex_lock(&reg->lock);
    struct entry *e = by_name(reg, name);
    if (e)
        info_of(e, info);
    pthread_mutex_unlock(&reg->lock);
    return e ? 0 : -ENOENT;
}

int kvfs_registry_stat(struct kvfs_blend_registry *reg, uint64_t id, struct kvfs_blend_info *info)
{
    pthread_mutex_lock(&reg->lock);
    struct entry *e = by_id(reg, id);
    if (e)
        info_of(e, info);
    pthread_mutex_unlock(&reg->lock);
    return e ? 0 : -ENOENT;
}

int kvfs_registry_each(struct kvfs_blend_registry *reg, kvfs_registry_fn fn, void *ctx)
{
    int rc = 0;
    struct kvfs_blend_info info;
    pthread_mutex_lock(&reg->lock);
    for (struct entry *e = reg->entries; e && !rc; e = e->next)
        if (!e->removed) {
            info_of(e, &info);
            rc = fn(ctx, e->name, &info);
        }
    pthread_mutex_unlock(&reg->lock);
    return rc;
}

/* The blend named name, created if new (lock held). */
static struct entry *entry_for(struct kvfs_blend_registry *reg, const char *name)
{
    struct entry *e = by_name(reg, name);
    if (e || !(e = calloc(1, sizeof(*e))))
        return e;
    if (!(e->text = strdup(""))) {
        free(e);
        return NULL;
    }
    snprintf(e->name, sizeof(e->name), "%s", name);
    e->id = reg->next_id++;
    e->next = reg->entries;
    reg->entries = e;
    return e;
}

/* text parsed and keyed: *out (NULL for an empty text), or its error */
static int parse(struct kvfs_blend_registry *reg, const char *text, size_t len, int *incomplete,
                 struct version **out, char *err, size_t errlen)
{
    *out = NULL;
    *incomplete = 0;
    /* an empty file is a recipe not written yet (the shell's `>` creates
     * it, then writes): no error, nothing to blend */
    if (!len)
        return 0;
    struct version *v = calloc(1, sizeof(*v));
    if (!v)
        return -ENOMEM;
    int rc = kvfs_recipe_parse(text, len, &v->kr.r, err, errlen);
    if (rc) {
        *incomplete = v->kr.r.incomplete;
        free(v);
        return rc;
    }
    kvfs_blend_service_key(reg->svc, &v->kr.r, v->kr.key);
    v->refs = 1;
    *out = v;
    return 0;
}

int kvfs_registry_set(struct kvfs_blend_registry *reg, const char *name, const void *buf, size_t len,
                      int partial_ok, char *err, size_t errlen)
{
    struct version *v = NULL;
    int incomplete;
    if (strlen(name) >= KVFS_BLEND_NAME_MAX)
        return -ENAMETOOLONG;
    char *text = malloc(len + 1);
    if (!text)
        return -ENOMEM;
    if (len) /* an empty draft may have no buffer at all */
        memcpy(text, buf, len);
    text[len] = '\0';
    int rc = parse(reg, text, len, &incomplete, &v, err, errlen);
    if (rc && partial_ok && incomplete) { /* more is still being written */
        free(text);
        return -EINPROGRESS;
    }
    pthread_mutex_lock(&reg->lock);
    struct entry *e = entry_for(reg, name);
    struct version *old = NULL;
    if (e) {
        free(e->text);
        e->text = text; /* kept even when refused: cat shows the typo */
        text = NULL;
        old = version_unref(e->v);
        e->v = v;
        v = NULL;
        e->size = 0;
        if (rc)
            snprintf(e->err, sizeof(e->err), "%.500s\n", err);
        else
            e->err[0] = '\0';
    }
    pthread_mutex_unlock(&reg->lock);
    version_free(old);
    version_free(v);
    free(text);
    return e ? rc : -ENOMEM;
}

static void drop_locked(struct kvfs_blend_registry *reg, struct entry *e)
{
    for (struct entry **pp = &reg->entries; *pp; pp = &(*pp)->next)
        if (*pp == e) {
            *pp = e->next;
            break;
        }
    entry_free(e);
}

int kvfs_registry_forget(struct kvfs_blend_registry *reg, const char *name)
{
    char key[KVFS_HASH_HEX_LEN + 1] = "";
    pthread_mutex_lock(&reg->lock);
    struct entry *e = by_name(reg, name);
    if (e) {
        if (e->v)
            memcpy(key, e->v->kr.key, sizeof(key));
        e->removed = 1;
        if (e->opens == 0)
            drop_locked(reg, e);
    }
    pthread_mutex_unlock(&reg->lock);
    if (!e)
        return -ENOENT;
    /* forget the result too (an equal recipe elsewhere is blended again);
     * open handles keep their bytes and their file's attributes */
    if (key[0])
        kvfs_store_remove_result(reg->store, key);
    return 0;
}

void kvfs_registry_put(struct kvfs_blend_registry *reg, uint64_t id)
{
    pthread_mutex_lock(&reg->lock);
    struct entry *e = by_id(reg, id);
    if (e && --e->opens == 0 && e->removed)
        drop_locked(reg, e);
    pthread_mutex_unlock(&reg->lock);
}

/* Blend id held and its parsed recipe taken for serving (-ENOENT: none,
 * or forgotten; -EINVAL: empty or refused, its error line says why). */
static int take(struct kvfs_blend_registry *reg, uint64_t id, struct version **v)
{
    int rc;
    pthread_mutex_lock(&reg->lock);
    struct entry *e = by_id(reg, id);
    if (!e || e->removed) {
        rc = -ENOENT;
    } else {
        e->opens++; /* e stays until kvfs_registry_put */
        rc = e->v ? 0 : -EINVAL;
        if ((*v = e->v))
            e->v->refs++;
    }
    pthread_mutex_unlock(&reg->lock);
    if (rc == -EINVAL)
        kvfs_registry_put(reg, id);
    return rc;
}

/* The outcome of serving blend id with version v: its error line, or its
 * result's sizes; a blend forgotten meanwhile forgets what it stored.
 * Gives v back, and the hold unless it is kept (success with hold). */
static void finish(struct kvfs_blend_registry *reg, uint64_t id, struct version *v, int rc, const char *why,
                   struct kvfs_chunk_ref *ref, int hold)
{
    uint64_t size = 0, llama_size = 0;
    uint32_t llama_parts = 1;
    struct kvfs_header h;
    struct kvfs_llama_view lv;
    struct kvfs_llama_swa swa;
    if (!rc) {
        size = kvfs_chunk_size(ref);
        if (!kvfs_header_parse(kvfs_chunk_data(ref), size, &h, NULL, 0) &&
            (kvfs_blend_service_swa(reg->svc, &h.fp, &swa), !kvfs_llama_view_init_swa(&lv, &h, 0, 1, &swa))) {
            llama_size = lv.size;
            llama_parts = lv.n_parts;
            kvfs_llama_view_free(&lv);
        }
    }
    char name[KVFS_BLEND_NAME_MAX] = "";
    pthread_mutex_lock(&reg->lock);
    struct entry *e = by_id(reg, id);
    int forgotten = e && e->removed; /* rm while it blended */
    if (e) {
        snprintf(name, sizeof(name), "%s", e->name);
        if (rc) {
            snprintf(e->err, sizeof(e->err), "%.500s\n", why[0] ? why : strerror(-rc));
        } else {
            e->err[0] = '\0';
            e->size = size;
            e->llama_size = llama_size;
            e->llama_parts = llama_parts;
        }
    }
    struct version *gone = version_unref(v);
    pthread_mutex_unlock(&reg->lock);
    if (forgotten && !rc)
        kvfs_store_remove_result(reg->store, v->kr.key);
    version_free(gone);
    if (rc)
        kvfs_log(KVFS_LOG_ERR, "blend %s failed: %s", name, why[0] ? why : strerror(-rc));
    if (rc || !hold)
        kvfs_registry_put(reg, id);
}

/* The taken recipes kr[0..m) to the service: one alone, several as a batch. */
static void submit(struct kvfs_blend_registry *reg, const struct kvfs_keyed_recipe **kr, int m, int alone,
                   struct kvfs_chunk_ref **refs, int *rcs, char (*errs)[512])
{
    if (alone) {
        rcs[0] = kvfs_blend_service_get(reg->svc, kr[0], &refs[0], errs[0], 512);
        return;
    }
    int rc = kvfs_blend_service_get_batch(reg->svc, kr, m, refs, rcs, errs);
    (void)rc; /* each member's own is in rcs */
}

int kvfs_registry_serve(struct kvfs_blend_registry *reg, const uint64_t *ids, int n, int hold,
                        struct kvfs_chunk_ref **refs, int *rcs, char (*errs)[512])
{
    struct version **v = calloc((size_t)n + 1, sizeof(*v));
    const struct kvfs_keyed_recipe **kr = calloc((size_t)n + 1, sizeof(*kr));
    int *slot = calloc((size_t)n + 1, sizeof(*slot)), *mrcs = calloc((size_t)n + 1, sizeof(*mrcs));
    struct kvfs_chunk_ref **mrefs = calloc((size_t)n + 1, sizeof(*mrefs));
    char (*merrs)[512] = calloc((size_t)n + 1, 512);
    int m = 0, first = 0, rc = -ENOMEM;
    for (int i = 0; i < n; i++) {
        refs[i] = NULL;
        errs[i][0] = '\0';
        rcs[i] = -ENOMEM;
    }
    if (!v || !kr || !slot || !mrcs || !mrefs || !merrs)
        goto out;
    for (int i = 0; i < n; i++) /* each blend's parsed recipe, as it is now */
        if (!(rcs[i] = take(reg, ids[i], &v[i]))) {
            kr[m] = &v[i]->kr;
            slot[m++] = i;
        }
    if (m)
        submit(reg, kr, m, n == 1, mrefs, mrcs, merrs);
    for (int k = 0; k < m; k++) {
        int i = slot[k];
        rcs[i] = mrcs[k];
        refs[i] = mrefs[k];
        memcpy(errs[i], merrs[k], 512);
        finish(reg, ids[i], v[i], rcs[i], errs[i], refs[i], hold);
    }
    rc = 0;
out:
    for (int i = 0; i < n; i++)
        if (rcs[i] && !first)
            first = rcs[i];
    free(v), free(kr), free(slot), free(mrcs), free(mrefs), free(merrs);
    return rc ? rc : first;
}

int kvfs_registry_text(struct kvfs_blend_registry *reg, uint64_t id, int which, char **text)
{
    pthread_mutex_lock(&reg->lock);
    struct entry *e = by_id(reg, id);
    *text = e ? strdup(which == 0 ? e->text : e->err) : NULL;
    pthread_mutex_unlock(&reg->lock);
    return e ? (*text ? 0 : -ENOMEM) : -ENOENT;
}

int kvfs_registry_name(struct kvfs_blend_registry *reg, uint64_t id, char *out, size_t cap)
{
    pthread_mutex_lock(&reg->lock);
    struct entry *e = by_id(reg, id);
    if (e)
        snprintf(out, cap, "%s", e->name);
    pthread_mutex_unlock(&reg->lock);
    return e ? 0 : -ENOENT;
}

int kvfs_registry_key(struct kvfs_blend_registry *reg, uint64_t id, char key[KVFS_HASH_HEX_LEN + 1])
{
    pthread_mutex_lock(&reg->lock);
    struct entry *e = by_id(reg, id);
    int rc = !e ? -ENOENT : !e->v ? -ENODATA : 0;
    if (!rc)
        memcpy(key, e->v->kr.key, KVFS_HASH_HEX_LEN + 1);
    pthread_mutex_unlock(&reg->lock);
    return rc;
}
