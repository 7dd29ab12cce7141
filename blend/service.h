/* service.h - the blend service a mount owns: models, the recipe -> result
 * cache in the store's tiers, and bounded concurrent blending.
 *
 * A result is named by its recipe's key (recipe.h) and kept in the store
 * as a blend result (store.h): RAM tier within ram=, disk within
 * blend_cache= and capacity=, LRU-evicted, pinnable.  A recipe whose result
 * is there is served without blending; one that was evicted is blended
 * again.  At most `jobs` blends run at once (others wait for a slot); a
 * recipe already being blended is not blended twice: later callers wait for
 * that blend and share its result.  A batch (kvfs_blend_service_get_batch)
 * shares the work of its recipes' common leading chunks (blend.h,
 * kvfs_blend_batch).  No FUSE here: the registry (registry.h) names the
 * blends, fs/blends.c is the file-system face. */
#ifndef KVFS_SERVICE_H
#define KVFS_SERVICE_H

#include <stddef.h>
#include <stdint.h>

#include "recipe.h"
#include "store.h"

struct kvfs_blend_service;

struct kvfs_blend_service_opts {
    const char *model_paths; /* GGUF files, ':'-separated (NULL: none; blends fail with -ENODEV) */
    const char *backend;     /* "auto", "cpu", "cuda" (NULL: auto) */
    float min_ratio;         /* ratio=auto floor (kvfs_blend_min_ratio_parse's; -EINVAL when out of range) */
    uint64_t sim_read_bps;   /* testing: throttle the loader (0 = off) */
    int direct_io;           /* the loader's O_DIRECT: 0 auto, 1 always, -1 never (kvfs_loader_opts) */
    int jobs;                /* blends at once (<= 0: 2; 1 on a backend that is not thread-safe) */
    uint32_t dtype;          /* results' dtype when a recipe names none (0: f16; -o kv_quant) */
};

int kvfs_blend_service_open(struct kvfs_store *s, const struct kvfs_blend_service_opts *o,
                            struct kvfs_blend_service **out, char *err, size_t errlen);
/* Waits for running blends. */
void kvfs_blend_service_close(struct kvfs_blend_service *svc);
/* Page-lock s's RAM tier through m's backend (host_register), as the service
 * does for its first such model (KVFS_PIN_RAM=0: it does not): its chunks
 * then reach the device by DMA with no staging copy.  1 if set, 0 when the
 * backend cannot (the CPU's); kvfs_store_set_pin(s, NULL, ...) undoes it. */
struct kvfs_model;
int kvfs_blend_pin_store(struct kvfs_store *s, const struct kvfs_model *m);
/* The loader's buffers page-locked through m's backend too (on), or none
 * (off: what was locked let go; only while no loader runs); 1 if locked.
 * The service does it where KVFS_PIN_LOADER=1 (not measured on a GPU yet). */
int kvfs_blend_pin_loader(const struct kvfs_model *m, int on);

/* The i-th loaded model (in model= order): its chunks' fingerprint and its
 * vocabulary size.  -ENODEV past the last one. */
int kvfs_blend_service_model(const struct kvfs_blend_service *svc, int i, struct kvfs_fingerprint *fp,
                             uint32_t *n_vocab);
/* The sliding-window layers of model m, or of the loaded model of
 * fingerprint fp (as llama.cpp caches them: llama_state.h); -ENODEV when no
 * loaded model has fp (swa then says none). */
struct kvfs_llama_swa;
void kvfs_model_llama_swa(const struct kvfs_model *m, struct kvfs_llama_swa *swa);
int kvfs_blend_service_swa(const struct kvfs_blend_service *svc, const struct kvfs_fingerprint *fp,
                           struct kvfs_llama_swa *swa);

/* The key a recipe's result is stored under. */
void kvfs_blend_service_key(const struct kvfs_blend_service *svc, const struct kvfs_recipe *r,
                            char key[KVFS_HASH_HEX_LEN + 1]);

/* A recipe and its key (kvfs_blend_service_key), computed once when the
 * recipe is written (registry.h). */
struct kvfs_keyed_recipe {
    struct kvfs_recipe r;
    char key[KVFS_HASH_HEX_LEN + 1];
};

/* The blended cache of a recipe (a v1 image, flag BLENDED): from the
 * store's tiers, or blended now.  *ref stays valid until released, whatever
 * is evicted meanwhile.  Errors: -ENOENT (a chunk is not stored), -ENODEV (no
 * model for the chunks), -EINVAL (chunks of different models, bad tokens),
 * -ENOMEM; err says which chunk and why. */
int kvfs_blend_service_get(struct kvfs_blend_service *svc, const struct kvfs_keyed_recipe *kr,
                           struct kvfs_chunk_ref **ref, char *err, size_t errlen);

/* Several recipes at once: refs[i] / rcs[i] / errs[i] for each (errs may be
 * NULL).  Returns 0 when every one succeeded, else the first error. */
int kvfs_blend_service_get_batch(struct kvfs_blend_service *svc, const struct kvfs_keyed_recipe *const *kr, int n,
                                 struct kvfs_chunk_ref **refs, int *rcs, char (*errs)[512]);

#endif
