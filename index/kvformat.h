/* kvformat.h - the kvfs chunk file format, version 1 (see kvfs(5)).
 *
 * A chunk file is self-describing and layer-major:
 *
 *   [fixed header, 128 bytes]
 *   [token ids: u32 x n_tokens]
 *   [layer table: n_layer x struct kvfs_layer_entry (24 bytes)]
 *   [salt digest, 32 bytes: only with KVFS_FLAG_SALTED]
 *   [layer shapes: n_layer x 16 bytes, only with KVFS_FLAG_LAYER_SHAPES]
 *   [zero padding up to header_size, a multiple of KVFS_ALIGN]
 *   [layer 0: K then V, each [token][kv_head][head_dim] of dtype,
 *             zero padded up to a multiple of KVFS_ALIGN]
 *   [layer 1 ...] ...
 *
 * All integers little-endian.  Layer L starts at header_size + L*layer_stride
 * (LAYER_SHAPES: after the layers before it, each padded), so one layer is
 * readable with one pread at a known, 4 KiB aligned offset.
 *
 * All functions return 0 or a negative errno.  No function here allocates
 * unless documented, none aborts, none touches FUSE.
 */
#ifndef KVFS_KVFORMAT_H
#define KVFS_KVFORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "half.h" /* kvfs_f16_to_f32 and the other element conversions */

#define KVFS_MAGIC "KVFSCHNK" /* 8 bytes, no NUL */
#define KVFS_VERSION 1u
#define KVFS_ALIGN 4096u
#define KVFS_FIXED_HEADER_SIZE 128u
#define KVFS_HASH_HEX_LEN 64 /* SHA-256, lowercase hex */
#define KVFS_MAX_LAYERS 1024u
#define KVFS_MAX_TOKENS (1u << 24)

enum kvfs_dtype {
    KVFS_DTYPE_F32 = 1,
    KVFS_DTYPE_F16 = 2,
    KVFS_DTYPE_BF16 = 3,
    /* block-quantized (index/kvquant.h): a layer is its K blocks (per
     * channel over tokens) then its V blocks (per token over channels), not
     * two [token][kv_dim] arrays; kv_dim must be a multiple of 64 */
    KVFS_DTYPE_Q8 = 4,
    KVFS_DTYPE_Q4 = 5,
    KVFS_DTYPE_Q4S = 6, /* q4 with keys over 32 tokens, values over 64 channels: same size, finer keys */
};

enum kvfs_rope_type {
    KVFS_ROPE_NORM = 0, /* rotate adjacent pairs (x[2i], x[2i+1]); GGML "normal" */
    KVFS_ROPE_NEOX = 2, /* rotate (x[i], x[i + rope_dim/2]); GGML "neox" */
};

#define KVFS_FLAG_KEYS_ROPED 0x1u /* keys stored after RoPE at positions pos0.. */
#define KVFS_FLAG_BLENDED 0x2u    /* composed by blending: an approximation of a prefill */
/* with BLENDED: the recipe was short enough to be prefilled in full, every
 * row recomputed (kvfs(8), the fidelity floor): equal to a prefill */
#define KVFS_FLAG_FULL_PREFILL 0x4u
/* a 32-byte salt digest (kvfs_salt_digest) follows the layer table and is
 * hashed into the name: one tenant's chunks never match another's */
#define KVFS_FLAG_SALTED 0x8u
#define KVFS_SALT_BYTES 32u
/* V is not stored: a layer is its K rows alone, and each V row is its K
 * row with the first rope_dim values of each head zero.  Multi-head latent
 * attention (deepseek2), whose one cached row per token (the rotated key
 * part, then the latent) serves as both (kvfs(5), MLA chunks).  f32, f16
 * and bf16 only. */
#define KVFS_FLAG_V_FROM_K 0x10u
/* Layers of their own shapes (gemma4): a table of n_layer struct
 * kvfs_layer_shape (16 bytes each) follows the layer table (and the salt),
 * each layer holds K and V at its own n_kv_head x head_dim, and a layer that
 * reads another layer's cache (kv_source < its index) stores nothing (its
 * table entry: size 0).  Layers are packed in order, each padded to
 * KVFS_ALIGN.  Any dtype but not with V_FROM_K; a quantized layer's blocks
 * run along its own rows, a multiple of 64 values (kvfs(5), Layer shapes). */
#define KVFS_FLAG_LAYER_SHAPES 0x20u
/* V heads narrower than K's: each V head is head_dim - rope_dim values,
 * stored in a head_dim wide slot after rope_dim zeros (the slot K's rotated
 * part takes), so K and V rows keep one width.  deepseek2's unabsorbed MLA
 * form (older files with attn_kv_b), whose cache llama.cpp keeps per head:
 * keys of nope + rope dims, values of nope (kvfs(5), V_NARROW).  Any dtype;
 * not with V_FROM_K or LAYER_SHAPES; rope_dim < head_dim. */
#define KVFS_FLAG_V_NARROW 0x40u
#define KVFS_LAYER_SHAPE_BYTES 16u

/* What determines the KV bytes besides the tokens.  Canonical encoding is the
 * header bytes 40..120 (see kvfs_fingerprint_encode). */
struct kvfs_fingerprint {
    uint32_t n_layer;
    uint32_t n_kv_head;
    uint32_t head_dim;
    uint32_t rope_type;  /* enum kvfs_rope_type */
    float rope_theta;    /* base frequency */
    uint32_t rope_dim;   /* rotated dims per head (== head_dim for Llama) */
    char arch[16];       /* "llama", "qwen2"; NUL padded */
    uint8_t model_id[32];/* SHA-256 identity of the weights (see blend/runtime/model.h) */
    uint32_t n_head;     /* query heads */
    uint32_t n_embd;     /* hidden size */
};

/* Parsed header.  token ids and layer table point into the caller's buffer. */
struct kvfs_header {
    uint32_t version;
    uint32_t header_size;   /* offset of layer 0; multiple of KVFS_ALIGN */
    uint64_t file_size;     /* whole file, bytes */
    uint32_t dtype;         /* enum kvfs_dtype */
    uint32_t flags;         /* KVFS_FLAG_* */
    uint32_t n_tokens;
    uint32_t pos0;          /* absolute position of token 0 */
    struct kvfs_fingerprint fp;
    uint64_t header_checksum; /* XXH3-64 of [0,header_size) with this field zeroed */
    const uint8_t *token_bytes; /* n_tokens u32, little-endian, maybe unaligned:
                                   use kvfs_header_token() */
    const uint8_t *layer_table; /* n_layer entries of 24 bytes: use kvfs_layer_entry_get() */
    const uint8_t *salt;        /* KVFS_SALT_BYTES after the layer table; NULL when not SALTED */
    const uint8_t *layer_shapes;/* n_layer x KVFS_LAYER_SHAPE_BYTES after the salt (or the layer table);
                                   NULL without LAYER_SHAPES: use kvfs_layer_shape_get() */
};

/* One layer's cache shape (KVFS_FLAG_LAYER_SHAPES; else the fingerprint's
 * for every layer, kv_source its own index).  On disk u32 each, in this
 * order.  A layer with kv_source < its index attends over that layer's
 * cache and stores none; its shape is the source's. */
struct kvfs_layer_shape {
    uint32_t n_kv_head;
    uint32_t head_dim;
    uint32_t rope_dim;
    uint32_t kv_source;
};
void kvfs_layer_shape_get(const struct kvfs_header *h, uint32_t layer, struct kvfs_layer_shape *out);

/* On-disk layer table entry, 24 bytes. */
struct kvfs_layer_entry {
    uint64_t offset;   /* absolute file offset of the layer (K then V) */
    uint64_t size;     /* bytes of K+V, without padding */
    uint64_t checksum; /* XXH3-64 of those size bytes */
};

/* Accessors for the (possibly unaligned) arrays inside a parsed header. */
uint32_t kvfs_header_token(const struct kvfs_header *h, uint32_t i);
void kvfs_layer_entry_get(const struct kvfs_header *h, uint32_t layer, struct kvfs_layer_entry *out);

/* Sizes */
size_t kvfs_dtype_size(uint32_t dtype);               /* element bytes; 0 if unknown or block-quantized */
int kvfs_dtype_known(uint32_t dtype);                 /* 1 for every dtype above */
int kvfs_dtype_quantized(uint32_t dtype);             /* KVFS_DTYPE_Q8 / Q4 / Q4S: the kvquant.h codec, else 0 */
const char *kvfs_dtype_name(uint32_t dtype);          /* "f32", "f16", "bf16", "q8", "q4"; "?" if unknown */
uint32_t kvfs_dtype_parse(const char *name);          /* the reverse; 0 for anything else */
/* K+V of a layer (K alone: V_FROM_K; 0 for a layer that stores none),
 * unpadded; its n_kv_head * head_dim; where it starts in the file (each
 * layer padded to KVFS_ALIGN after it).  h->layer_shapes must be set for a
 * LAYER_SHAPES header (kvfs_header_parse and the writer do it). */
uint64_t kvfs_layer_bytes(const struct kvfs_header *h, uint32_t layer);
uint32_t kvfs_layer_kv_dim(const struct kvfs_header *h, uint32_t layer);
uint64_t kvfs_layer_offset(const struct kvfs_header *h, uint32_t layer);
uint32_t kvfs_header_size_for(uint32_t n_tokens, uint32_t n_layer); /* unsalted */
/* the same for a header with these flags (KVFS_FLAG_SALTED adds the salt,
 * KVFS_FLAG_LAYER_SHAPES the shape table) */
uint32_t kvfs_header_size_for_flags(uint32_t n_tokens, uint32_t n_layer, uint32_t flags);
uint64_t kvfs_file_size_for(const struct kvfs_header *h); /* from its shape and flags (and layer_shapes) */

/* Parse and validate the header at buf[0..len).  len may be just the header
 * (>= header_size) or the whole file.  Checks magic, version, dtype, shapes,
 * sizes, layer table consistency and the header checksum.  On error returns
 * -EINVAL (malformed), -EPROTO (wrong magic/version), -EBADMSG (checksum)
 * and, if errmsg is not NULL, writes a human-readable reason into it. */
int kvfs_header_parse(const void *buf, size_t len, struct kvfs_header *out,
                      char *errmsg, size_t errlen);

/* Verify a whole file image: header plus every layer checksum and zero
 * padding.  Same errors as kvfs_header_parse. */
int kvfs_file_verify(const void *buf, size_t len, struct kvfs_header *out,
                     char *errmsg, size_t errlen);

/* Verify one layer's bytes against its table entry (-EBADMSG on mismatch). */
int kvfs_layer_verify(const struct kvfs_header *h, uint32_t layer,
                      const void *layer_bytes, size_t len);

/* Content hash of a chunk (see kvfs(5), "Content hash"): SHA-256 over
 * "kvfs-chunk-v1\0", the 80-byte canonical fingerprint, dtype, flags, pos0,
 * n_tokens and the token ids, all little-endian, then with KVFS_FLAG_SALTED
 * the 32 salt bytes (-EINVAL if h->salt is NULL then).  hex gets 64 chars +
 * NUL. */
int kvfs_content_hash(const struct kvfs_header *h, uint8_t digest[32]);
/* The name a chunk of these token ids will have before it is computed:
 * kvfs_content_hash of the header a writer makes from them, as hex (salt:
 * NULL, or the 32 bytes, which add KVFS_FLAG_SALTED). */
int kvfs_ids_chunk_hash(const struct kvfs_fingerprint *fp, uint32_t dtype, uint32_t flags, uint32_t pos0,
                        const int32_t *ids, size_t n, const uint8_t *salt, char hex[KVFS_HASH_HEX_LEN + 1]);
/* A tenant's salt (any bytes, e.g. its name) as the 32 bytes a chunk
 * carries: SHA-256 over "kvfs-salt-v1\0" then the len bytes of salt. */
int kvfs_salt_digest(const void *salt, size_t len, uint8_t out[32]);
void kvfs_hash_to_hex(const uint8_t digest[32], char hex[KVFS_HASH_HEX_LEN + 1]);
int kvfs_hex_to_hash(const char *hex, uint8_t digest[32]); /* -EINVAL if not 64 hex */

/* Canonical 80-byte fingerprint encoding and its short id (first 8 bytes of
 * SHA-256 of it, 16 hex chars) used to group chunks by model. */
void kvfs_fingerprint_encode(const struct kvfs_fingerprint *fp, uint8_t out[80]);
void kvfs_fingerprint_id(const struct kvfs_fingerprint *fp, char hex[17]);

/* Writing.  The writer builds a complete file image in memory:
 *   kvfs_writer_init(&w, &fp, dtype, flags, pos0, n_tokens, tokens)
 *   for each layer: memcpy K then V into kvfs_writer_layer(&w, L)
 *   kvfs_writer_finish(&w)  -> computes checksums; image in w.buf, w.size
 *   kvfs_writer_free(&w)
 * A taken w.buf is freed with kvfs_img_free (a big one is bigbuf.c's).
 */
struct kvfs_writer {
    uint8_t *buf;   /* whole file image, 4 KiB aligned allocation */
    size_t size;
    struct kvfs_header hdr;
};
int kvfs_writer_init(struct kvfs_writer *w, const struct kvfs_fingerprint *fp,
                     uint32_t dtype, uint32_t flags, uint32_t pos0,
                     uint32_t n_tokens, const uint32_t *tokens);
/* The same with a salt digest (kvfs_salt_digest): a non-NULL salt sets
 * KVFS_FLAG_SALTED; NULL is none, and then flags must not have it (-EINVAL).
 * kvfs_writer_init is this with NULL. */
int kvfs_writer_init_salted(struct kvfs_writer *w, const struct kvfs_fingerprint *fp,
                            uint32_t dtype, uint32_t flags, uint32_t pos0,
                            uint32_t n_tokens, const uint32_t *tokens,
                            const uint8_t salt[32]);
/* The same with a shape per layer (n_layer of them; sets
 * KVFS_FLAG_LAYER_SHAPES; -EINVAL for shapes that kvfs_header_parse would
 * refuse); shapes NULL: kvfs_writer_init_salted. */
int kvfs_writer_init_shaped(struct kvfs_writer *w, const struct kvfs_fingerprint *fp, uint32_t dtype,
                            uint32_t flags, uint32_t pos0, uint32_t n_tokens, const uint32_t *tokens,
                            const uint8_t salt[32], const struct kvfs_layer_shape *shapes);
void *kvfs_writer_layer(struct kvfs_writer *w, uint32_t layer); /* K then V (kvfs_layer_bytes of them) */
int kvfs_writer_finish(struct kvfs_writer *w);
void kvfs_writer_free(struct kvfs_writer *w);

/* n floats into dst as dtype f32, f16 or bf16 (dst may be unaligned) */
void kvfs_f32_encode(uint32_t dtype, const float *src, size_t n, void *dst);
/* Layer `layer` of a chunk of any dtype (its bytes at `data`, as the layer
 * table places them) into k[n_tokens][kv_dim] and v[..] floats, kv_dim its
 * kvfs_layer_kv_dim (either may be NULL; nothing for a layer that stores
 * none): exact for f32/f16/bf16, the stored approximation for q8/q4/q4s
 * (kvquant.h's codecs). */
int kvfs_layer_decode(const struct kvfs_header *h, uint32_t layer, const void *data, float *k, float *v);

#endif
