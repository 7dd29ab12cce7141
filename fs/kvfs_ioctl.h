/* kvfs_ioctl.h - the public ioctl ABI of kvfs (see kvfs(8), "IOCTL").
 *
 * Engines open MOUNT/.kvfs/control and issue KVFS_IOC_BLEND with a recipe
 * (the same text as a blends/NAME.recipe file).  kvfs blends and returns
 * the path, relative to the mount, of the blended chunk file; before
 * computing a chunk they may claim it with KVFS_IOC_CLAIM (one computation
 * per fleet).  Each struct is fixed-size so the kernel copies it both ways;
 * all strings are NUL-terminated UTF-8.  version must be KVFS_IOCTL_VERSION. */
#ifndef KVFS_IOCTL_H
#define KVFS_IOCTL_H

#include <stdint.h>
#include <sys/ioctl.h>

#define KVFS_IOCTL_VERSION 1

struct kvfs_blend_req {
    uint32_t version;   /* in: KVFS_IOCTL_VERSION */
    uint32_t flags;     /* in: 0 */
    int32_t status;     /* out: 0, or a negative errno (the ioctl itself returns 0) */
    uint32_t n_tokens;  /* out: tokens in the blended cache */
    char path[256];     /* out: "blends/<name>.kv" relative to the mount */
    char recipe[7680];  /* in: recipe text (hashes, ratio=, suffix= or suffix_tokens=) */
    char error[240];    /* out: why, when status != 0 */
};

/* The ABI: 16 bytes of header, then 256 + 7680 + 240 of strings. */
#ifdef __cplusplus
static_assert(sizeof(struct kvfs_blend_req) == 8192, "kvfs_blend_req is 8 KiB");
#else
_Static_assert(sizeof(struct kvfs_blend_req) == 8192, "kvfs_blend_req is 8 KiB");
#endif

#define KVFS_IOC_BLEND _IOWR('k', 1, struct kvfs_blend_req)

/* KVFS_IOC_BLEND_BATCH: up to KVFS_BATCH_MAX recipes in one call.  Recipes
 * that share their leading chunks are blended together, sharing the work of
 * that prefix (kvfs(8), SERVING, "Batches").  recipes: the recipe texts separated by
 * lines "%%".  results: one line per recipe, in order, "0 TOKENS PATH" or
 * "-ERRNO REASON".  status: 0 when every recipe succeeded, else the first
 * error; n: recipes read. */
#define KVFS_BATCH_MAX 32
struct kvfs_blend_batch_req {
    uint32_t version;   /* in: KVFS_IOCTL_VERSION */
    uint32_t flags;     /* in: 0 */
    int32_t status;     /* out */
    uint32_t n;         /* out */
    char recipes[12288];/* in */
    char results[4064]; /* out */
};
#ifdef __cplusplus
static_assert(sizeof(struct kvfs_blend_batch_req) == 16368, "kvfs_blend_batch_req is 16368 bytes");
#else
_Static_assert(sizeof(struct kvfs_blend_batch_req) == 16368, "kvfs_blend_batch_req is 16368 bytes");
#endif
#define KVFS_IOC_BLEND_BATCH _IOWR('k', 2, struct kvfs_blend_batch_req)

/* KVFS_IOC_CLAIM: one computation of a chunk per fleet (kvfs(8), REMOTE TIER, "Claims").
 * op KVFS_CLAIM_TAKE, before computing chunk `hash`: result PRESENT (the
 * mount or its RADOS pool has it: read chunks/HASH.kv) or YOURS (compute it
 * and store it through this mount; the mount holds a lease in RADOS until
 * the chunk is uploaded, so other hosts wait for it instead of computing).
 * While another host holds the lease the call waits up to timeout_ms
 * (status -ETIMEDOUT after).  scope: 1 when the claim is fleet-wide, 0 when
 * the mount has no remote tier or it is down (YOURS, nothing coordinated).
 * A lease whose chunk was not stored ends with op KVFS_CLAIM_RELEASE or
 * when the file descriptor that took it is closed (a killed caller). */
enum { KVFS_CLAIM_TAKE = 0, KVFS_CLAIM_RELEASE = 1 };
enum { KVFS_CLAIM_YOURS = 0, KVFS_CLAIM_PRESENT = 1 };
struct kvfs_claim_req {
    uint32_t version;    /* in: KVFS_IOCTL_VERSION */
    uint32_t flags;      /* in: 0 */
    int32_t status;      /* out: 0, or a negative errno */
    uint32_t op;         /* in: KVFS_CLAIM_TAKE or KVFS_CLAIM_RELEASE */
    uint32_t timeout_ms; /* in: the longest wait for another host */
    uint32_t result;     /* out: KVFS_CLAIM_YOURS or KVFS_CLAIM_PRESENT */
    uint32_t waited_ms;  /* out: how long it waited */
    uint32_t scope;      /* out: 1 fleet-wide, 0 this mount only */
    char hash[72];       /* in: the chunk's 64-hex content hash */
    char error[152];     /* out: why, when status != 0 */
};
#ifdef __cplusplus
static_assert(sizeof(struct kvfs_claim_req) == 256, "kvfs_claim_req is 256 bytes");
#else
_Static_assert(sizeof(struct kvfs_claim_req) == 256, "kvfs_claim_req is 256 bytes");
#endif
#define KVFS_IOC_CLAIM _IOWR('k', 3, struct kvfs_claim_req)

#endif
