/* kvfs.h - libkvfs: what an inference engine needs to use kvfs (libkvfs(3)).
 *
 *  - open a chunk or blend file (format v1, kvfs(5)), verify it, read its
 *    header and get each layer's K and V as views into a read-only mapping
 *    of the file: no copy, the bytes the page cache holds;
 *  - ask a mount to blend chunks (the KVFS_IOC_BLEND ioctl, kvfs(8));
 *  - claim a chunk before computing it, so one host of a fleet computes it
 *    and the others wait for it (KVFS_IOC_CLAIM, kvfs(8), REMOTE TIER, "Claims").
 *
 * Every function that can fail returns 0 or a negative errno; those taking
 * err/errlen also write a one-line reason there (err may be NULL).
 * Link with `pkg-config --cflags --libs libkvfs`. */
#ifndef LIBKVFS_H
#define LIBKVFS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define LIBKVFS_API __attribute__((visibility("default")))
#else
#define LIBKVFS_API
#endif

#define LIBKVFS_VERSION_MAJOR 1
#define LIBKVFS_VERSION_MINOR 3 /* 2: libkvfs_claim; 3: LIBKVFS_FLAG_LAYER_SHAPES */

/* dtype of K and V (kvfs(5)) */
#define LIBKVFS_DTYPE_F32 1u
#define LIBKVFS_DTYPE_F16 2u  /* IEEE binary16 */
#define LIBKVFS_DTYPE_BF16 3u
#define LIBKVFS_DTYPE_Q8 4u   /* 8-bit blocks with f16 scales (kvfs(5)): read with libkvfs_layer_f32 */
#define LIBKVFS_DTYPE_Q4 5u   /* 4-bit blocks with f16 scale and min: likewise */
#define LIBKVFS_DTYPE_Q4S 6u  /* q4 with 32-token key and 64-channel value groups: likewise */

/* header flags */
#define LIBKVFS_FLAG_KEYS_ROPED 0x1u /* keys stored after RoPE at positions pos0, pos0+1, ... */
#define LIBKVFS_FLAG_BLENDED 0x2u    /* composed by blending: an approximation of a prefill */
#define LIBKVFS_FLAG_FULL_PREFILL 0x4u /* with BLENDED: prefilled in full (a short recipe): exact */
#define LIBKVFS_FLAG_SALTED 0x8u     /* a tenant's salt digest is part of the name: see libkvfs_info.salt */
#define LIBKVFS_FLAG_V_FROM_K 0x10u  /* V not stored: each V row is its K row with the first rope_dim
                                        values of each head zero (latent attention, kvfs(5)) */
#define LIBKVFS_FLAG_LAYER_SHAPES 0x20u /* layers of their own n_kv_head x head_dim (gemma4), and layers
                                           that read an earlier layer's cache (kvfs(5), Layer shapes):
                                           libkvfs_layer's views carry each layer's shape */
#define LIBKVFS_FLAG_V_NARROW 0x40u /* each V head is head_dim - rope_dim values after rope_dim zeros
                                       (deepseek2's unabsorbed latent attention, kvfs(5), V_NARROW) */

/* rope_type */
#define LIBKVFS_ROPE_NORM 0u /* rotates pairs (x[2i], x[2i+1]) */
#define LIBKVFS_ROPE_NEOX 2u /* rotates (x[i], x[i + rope_dim/2]) */

/* libkvfs_open flags */
#define LIBKVFS_OPEN_NO_VERIFY 0x1u /* check the header (and its checksum) and the size,
                                       not the layer checksums: see libkvfs_verify_layer */

struct libkvfs_file; /* an open chunk file */

/* The header.  Owned by the file; valid until libkvfs_close.  Fields are only
 * ever added at the end, so the layout of these stays. */
struct libkvfs_info {
    uint32_t version;      /* format version, 1 */
    uint32_t dtype;        /* LIBKVFS_DTYPE_* */
    uint32_t elem_size;    /* bytes per element of dtype: 4 or 2; 0 for the block-quantized q8, q4, q4s */
    uint32_t flags;        /* LIBKVFS_FLAG_* */
    uint32_t n_tokens;
    uint32_t pos0;         /* absolute position of token 0 */
    uint32_t n_layer;
    uint32_t n_head;       /* query heads */
    uint32_t n_kv_head;
    uint32_t head_dim;
    uint32_t n_embd;
    uint32_t rope_type;    /* LIBKVFS_ROPE_* */
    float rope_theta;
    uint32_t rope_dim;     /* rotated dimensions per head */
    char arch[16];         /* "llama", "qwen2": NUL-terminated */
    uint8_t model_id[32];  /* identity of the weights (kvfs(5), MODEL IDENTITY) */
    char model[17];        /* fingerprint id: 16 hex, groups chunks by model (user.kvfs.model) */
    char hash[65];         /* content hash, 64 hex: the name under chunks/ */
    const uint32_t *tokens;/* n_tokens token ids, inside the mapping */
    uint32_t header_size;  /* offset of layer 0 */
    uint64_t file_size;
    uint64_t layer_bytes;  /* K + V of one layer (K alone with LIBKVFS_FLAG_V_FROM_K); 0 with
                              LIBKVFS_FLAG_LAYER_SHAPES (layers differ: see libkvfs_layer) */
    uint64_t layer_stride; /* layer L starts at header_size + L * layer_stride; 0 with LAYER_SHAPES */
    const uint8_t *salt;   /* LIBKVFS_FLAG_SALTED: the 32-byte salt digest, inside the mapping; else NULL */
};

/* One of K or V of one layer: data[n_tokens][n_kv_head][head_dim] of dtype,
 * rows contiguous, inside the mapping (read-only). */
struct libkvfs_view {
    const void *data;
    uint32_t dtype;
    uint32_t elem_size;
    uint32_t n_tokens, n_kv_head, head_dim;
    uint64_t bytes;        /* n_tokens * n_kv_head * head_dim * elem_size */
};

/* Open PATH and verify it: the header and its checksum, the size, and unless
 * LIBKVFS_OPEN_NO_VERIFY every layer's XXH3-64 and padding.  Regular files
 * are mapped (MAP_PRIVATE, read-only: this works on kvfs mounts, blend
 * results included); anything else (a pipe) is read into memory.  Errors:
 * -EINVAL malformed or truncated, -EPROTO not a kvfs chunk file or another
 * version, -EBADMSG a checksum mismatch, or the errno of open/read/mmap.
 * err gets "invalid chunk: REASON" for the first three, else the errno's text. */
LIBKVFS_API int libkvfs_open(const char *path, unsigned flags, struct libkvfs_file **out, char *err,
                             size_t errlen);
/* The same from an open descriptor, which stays the caller's (not closed). */
LIBKVFS_API int libkvfs_open_fd(int fd, unsigned flags, struct libkvfs_file **out, char *err, size_t errlen);
/* Unmap and free; NULL is a no-op.  Views and info die with the file. */
LIBKVFS_API void libkvfs_close(struct libkvfs_file *f);

LIBKVFS_API const struct libkvfs_info *libkvfs_info(const struct libkvfs_file *f);
/* K and V of LAYER (either may be NULL); -ERANGE if layer >= n_layer,
 * -EOPNOTSUPP for q8/q4/q4s chunks, and for V of LIBKVFS_FLAG_V_FROM_K
 * ones (no [token][kv_head][head_dim] array to point at: use
 * libkvfs_layer_f32).  With LIBKVFS_FLAG_LAYER_SHAPES the views have the
 * layer's own n_kv_head and head_dim, and a layer that reads an earlier
 * layer's cache (stores none) gets that layer's K and V. */
LIBKVFS_API int libkvfs_layer(const struct libkvfs_file *f, uint32_t layer, struct libkvfs_view *k,
                              struct libkvfs_view *v);
/* K and V of LAYER of any dtype, decoded into the caller's
 * k[n_tokens][n_kv_head * head_dim] and v[...] floats (either may be NULL;
 * LIBKVFS_FLAG_LAYER_SHAPES: the layer's own shape, a layer without a cache
 * its source's, as libkvfs_layer):
 * exact for f32/f16/bf16, the stored approximation for q8/q4/q4s (kvfs(5));
 * with LIBKVFS_FLAG_V_FROM_K, v is the decoded K with each head's first
 * rope_dim values zero, whatever the dtype. */
LIBKVFS_API int libkvfs_layer_f32(const struct libkvfs_file *f, uint32_t layer, float *k, float *v);
/* LAYER's cache shape (kvfs(5), Layer shapes): its KV heads, head width,
 * rotated dims, and the layer whose cache it attends over (itself, or with
 * LIBKVFS_FLAG_LAYER_SHAPES an earlier layer whose K and V it reads, storing
 * none).  Without the flag every layer has the header's.  -ERANGE if layer
 * >= n_layer.  (Since 1.3.) */
struct libkvfs_layer_shape {
    uint32_t n_kv_head, head_dim, rope_dim, kv_source;
};
LIBKVFS_API int libkvfs_layer_shape(const struct libkvfs_file *f, uint32_t layer, struct libkvfs_layer_shape *out);
/* Check one layer's checksum (for files opened with LIBKVFS_OPEN_NO_VERIFY,
 * layer by layer as an engine loads them): 0, -EBADMSG or -ERANGE. */
LIBKVFS_API int libkvfs_verify_layer(const struct libkvfs_file *f, uint32_t layer);
/* The whole file image (len bytes), e.g. to hand it on unchanged. */
LIBKVFS_API const void *libkvfs_data(const struct libkvfs_file *f, size_t *len);
/* "f32", "f16", "bf16", "q8", "q4", "q4s" or "?" */
LIBKVFS_API const char *libkvfs_dtype_name(uint32_t dtype);

/* Blending through a mount (kvfs(8), IOCTL).  A recipe is the text of a
 * blends/NAME.recipe file: one chunk hash per line, then suffix=TEXT or
 * suffix_tokens=IDS, optionally ratio= and select=.  The mount blends (or
 * serves the same recipe's earlier result) and the result is an ordinary
 * chunk file under MOUNT/blends/. */
#define LIBKVFS_RECIPE_MAX 7679   /* bytes of one recipe */
#define LIBKVFS_BATCH_MAX 32      /* recipes in one batch */
#define LIBKVFS_BATCH_BYTES 12287 /* bytes of a batch's text */

/* Blend RECIPE on MOUNT: path gets "MOUNT/blends/NAME.kv" (truncation is
 * -ENAMETOOLONG), *n_tokens its token count.  Fails with the daemon's errno
 * (-ENOENT: a chunk not in the store, -EINVAL: a bad recipe, ...) and its
 * reason in err, or with the errno of opening MOUNT/.kvfs/control or of the
 * ioctl (err: "MOUNT/.kvfs/control: TEXT"). */
LIBKVFS_API int libkvfs_blend(const char *mount, const char *recipe, char *path, size_t pathlen,
                              uint32_t *n_tokens, char *err, size_t errlen);

/* One recipe's outcome in a batch. */
struct libkvfs_blend_result {
    int status;            /* 0 or a negative errno */
    uint32_t n_tokens;
    char path[4096];       /* MOUNT/blends/NAME.kv when status is 0 */
    char error[256];       /* the daemon's reason when it is not */
};

/* Blend up to LIBKVFS_BATCH_MAX recipes in one call (KVFS_IOC_BLEND_BATCH):
 * RECIPES are their texts separated by lines "%%"; recipes sharing their
 * leading chunks are blended together.  Fills results[0 .. *n_results) in
 * order (at most max_results) and returns 0 when every recipe succeeded,
 * else the first recipe's error.  When the request itself fails (control
 * file, ioctl, text longer than LIBKVFS_BATCH_BYTES) *n_results is 0 and err
 * says why. */
LIBKVFS_API int libkvfs_blend_batch(const char *mount, const char *recipes,
                                    struct libkvfs_blend_result *results, int max_results, int *n_results,
                                    char *err, size_t errlen);

/* A claim on a chunk about to be computed (KVFS_IOC_CLAIM). */
struct libkvfs_claim {
    int fd;             /* >= 0 while this caller holds it: close with libkvfs_claim_end */
    int present;        /* 1: the mount or its pool has the chunk; read MOUNT/chunks/HASH.kv */
    int fleet;          /* 1: the claim holds a lease in the mount's RADOS pool; 0: nothing
                         * to coordinate with (no remote tier, or it is down) */
    uint32_t waited_ms; /* how long another host's lease kept it waiting */
};

/* Claim chunk HASH (64 hex) at MOUNT.  present = 0: compute the chunk and
 * store it through the mount (incoming/), then libkvfs_claim_end; other hosts
 * claiming it meanwhile wait for it.  Waits up to timeout_ms while another
 * host computes it (-ETIMEDOUT after).  -ENOTTY: the mount predates claims. */
LIBKVFS_API int libkvfs_claim(const char *mount, const char *hash, uint32_t timeout_ms, struct libkvfs_claim *c,
                              char *err, size_t errlen);
/* The chunk is stored (or the caller gave up: the lease ends at once and
 * another host computes it).  Closes c->fd. */
LIBKVFS_API void libkvfs_claim_end(struct libkvfs_claim *c);

#ifdef __cplusplus
}
#endif
#endif
