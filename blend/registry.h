/* registry.h - the blends a mount knows, by name: for each, the recipe
 * text as written (also when it was refused), the recipe parsed and keyed
 * once when it is written, the reason of its last failure, and the sizes of
 * the last result served.  Results come from the blend service
 * (service.h); the registry holds no FUSE and no file names beyond the
 * blend's own (fs/blends.c maps NAME.recipe, NAME.kv, NAME.err and the
 * llama/ views onto it).
 *
 * A blend is named by its NAME and known by a stable id.  Forgetting a name
 * (kvfs_registry_forget) hides it from lookups by name at once; by id it
 * stays until the last hold (kvfs_registry_serve with hold) is put back.
 * Thread-safe. */
#ifndef KVFS_REGISTRY_H
#define KVFS_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include "service.h"

#define KVFS_BLEND_NAME_MAX 200 /* bytes of a NAME, its NUL included */

struct kvfs_blend_registry;

/* What a blend looks like now. */
struct kvfs_blend_info {
    uint64_t id;
    int valid;             /* its recipe parses (and so has a key) */
    uint64_t recipe_len;   /* the text as written */
    uint64_t err_len;      /* its last error line ("" when none) */
    uint64_t size;         /* the last result served (0 before the first) */
    uint64_t llama_size;   /* that result as a llama.cpp state of one stream (index/llama_state.h) */
    uint32_t llama_parts;  /* its caches (2: sliding-window layers), each with an empty header per other stream */
};

int kvfs_registry_new(struct kvfs_blend_service *svc, struct kvfs_store *store, struct kvfs_blend_registry **out);
void kvfs_registry_free(struct kvfs_blend_registry *reg);

/* By name (a forgotten one is not found) or by id: -ENOENT. */
int kvfs_registry_lookup(struct kvfs_blend_registry *reg, const char *name, struct kvfs_blend_info *info);
int kvfs_registry_stat(struct kvfs_blend_registry *reg, uint64_t id, struct kvfs_blend_info *info);
/* fn(ctx, name, info) for each blend not forgotten; stops at (and returns)
 * a non-zero value */
typedef int (*kvfs_registry_fn)(void *ctx, const char *name, const struct kvfs_blend_info *info);
int kvfs_registry_each(struct kvfs_blend_registry *reg, kvfs_registry_fn fn, void *ctx);

/* NAME's recipe text is now text[0..len) (the blend is created if new):
 * parsed and keyed here, once.  Empty: not yet written, no error.  A
 * refused text is kept (its reason in err and the blend's error line) and
 * its error returned.  partial_ok: a text that only lacks a chunk or its
 * query yet is left as it was (-EINPROGRESS). */
int kvfs_registry_set(struct kvfs_blend_registry *reg, const char *name, const void *text, size_t len,
                      int partial_ok, char *err, size_t errlen);
/* Forget NAME and its result in the store (open holds keep their bytes). */
int kvfs_registry_forget(struct kvfs_blend_registry *reg, const char *name);

/* The results of blends ids[0..n): refs[i], rcs[i], errs[i] for each (one
 * blend on its own, several as a batch: service.h).  Each failure is the
 * blend's error line; each success its sizes.  hold: each blend served is
 * held until kvfs_registry_put(id).  Returns the first error or 0.
 * -ENOENT: no such blend; -EINVAL: its recipe is empty or refused. */
int kvfs_registry_serve(struct kvfs_blend_registry *reg, const uint64_t *ids, int n, int hold,
                        struct kvfs_chunk_ref **refs, int *rcs, char (*errs)[512]);
void kvfs_registry_put(struct kvfs_blend_registry *reg, uint64_t id);

/* A copy of the recipe text (which 0) or the error line (1), to free. */
int kvfs_registry_text(struct kvfs_blend_registry *reg, uint64_t id, int which, char **text);
int kvfs_registry_name(struct kvfs_blend_registry *reg, uint64_t id, char *out, size_t cap);
/* The result key of a valid recipe (-ENODATA: empty or refused). */
int kvfs_registry_key(struct kvfs_blend_registry *reg, uint64_t id, char key[KVFS_HASH_HEX_LEN + 1]);

#endif
