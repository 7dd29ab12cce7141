/* llama_state.h - llama.cpp's sequence-state file (llama_state_seq_save_file,
 * llama-server's /slots?action=save|restore) to and from kvfs v1 objects.
 *
 * The layout, version 3 as llama-cpp-python 0.3.36's llama.cpp writes it
 * (kvfs(5), "llama.cpp sequence state"), all little-endian:
 *
 *   u32 magic 'ggsq', u32 version 3, u32 n_token, i32 token[n_token]
 *   u32 n_stream; per stream: u32 cell_count, and when it is not 0:
 *     per cell: i32 pos, u32 n_seq_id (1), i32 seq_id
 *     u32 v_trans, u32 n_layer
 *     per layer: i32 k_type, u64 k_row_bytes, K rows [cell][kv_head][head_dim]
 *     per layer, V rows (v_trans 0): i32 v_type, u64 v_row_bytes, rows
 *     or V transposed (v_trans 1): i32 v_type, u32 elem_bytes, u32 n_embd_v,
 *       then for each of the n_embd_v dims the cells' values
 *
 * K and V in a v1 object are the same rows ([token][kv_head][head_dim], keys
 * after RoPE), so a view is the object's layers with a few headers between.
 * No FUSE here, no allocation but the view's prelude. */
#ifndef KVFS_LLAMA_STATE_H
#define KVFS_LLAMA_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "kvformat.h"

#define KVFS_LLAMA_SEQ_MAGIC 0x67677371u     /* 'ggsq': llama_state_seq_save_file */
#define KVFS_LLAMA_SESSION_MAGIC 0x6767736eu /* 'ggsn': llama_state_save_file (whole context) */
#define KVFS_LLAMA_SEQ_VERSION 3u            /* llama-cpp-python 0.3.36 */

/* ggml type ids of the cache types a state may hold */
enum { KVFS_GGML_F32 = 0, KVFS_GGML_F16 = 1, KVFS_GGML_BF16 = 30 };

/* A v1 object read as a sequence state with f16 K/V (the engines' default
 * cache type), positions pos0.., sequence 0, in the first of n_streams
 * streams (the others empty).  llama.cpp restores a state only into a cache
 * of as many streams: 1 for a unified cache (llama-server's default, -kvu),
 * else one per slot (-np N). */
/* A model with sliding-window layers: llama.cpp keeps them in a second
 * cache (llama_kv_cache_iswa) whose state follows the other's in the file,
 * each part "n_stream, cells, v_trans, n_layer, K, V" of its own layers; the
 * SWA part llama.cpp saves holds only the cells in the window of the last
 * position (llama_kv_cache::state_write skips masked ones), a view's those
 * and the one before (llama-server's check of a restored prompt wants a cell
 * out of the window; llama_state.c swa_cells). */
struct kvfs_llama_swa {
    uint32_t n_swa;                 /* window; 0: no SWA layers, one cache */
    uint8_t local[KVFS_MAX_LAYERS]; /* layer l sits in the SWA cache */
    /* layers of their own shapes (gemma4): layer l's, and a layer whose
     * kv_source is another has no cache in the state (llama.cpp maps it to
     * its source's); shaped 0: the fingerprint's for every layer */
    int shaped;
    struct kvfs_layer_shape shape[KVFS_MAX_LAYERS];
    /* deepseek2's unabsorbed form: llama.cpp's cache is per head K of
     * head_dim (nope, then the rotated part) and V of head_dim - rope_dim,
     * which its chunks hold as V_NARROW (kvfs(5)); 0: the fingerprint's
     * deepseek2 is the absorbed form (one row, K alone) */
    int v_narrow;
};

/* One cache's part of a view */
struct kvfs_llama_part {
    uint64_t at, data0, tail, end; /* its n_stream, its first K header, its empty streams, its end */
    uint32_t t0, n;                /* its cells: the chunk's rows t0 .. t0 + n - 1 */
    uint32_t l0, n_layer;          /* its layers: layer[l0 .. l0 + n_layer) */
    uint64_t kind_bytes;           /* its K sections (each a type header and n rows) */
    uint64_t v_bytes;              /* its V sections after them (as many bytes but MLA's none, V_NARROW's fewer) */
    uint8_t *hdr;                  /* bytes [at, data0): generated (part 0: from the file's start) */
};

struct kvfs_llama_view {
    struct kvfs_header h;   /* of the object; its pointers point into the object */
    int v_trans;            /* V transposed: engines without flash attention */
    uint32_t kv_dim;        /* n_kv_head * head_dim */
    uint32_t n_streams;     /* the cells in the first; the others' empty headers at each part's end */
    uint64_t size;          /* of the state file */
    uint32_t n_parts;       /* 1, or 2 with sliding-window layers (the non-SWA cache first) */
    struct kvfs_llama_part part[2];
    uint16_t layer[KVFS_MAX_LAYERS]; /* the model's layers with a cache of their own, in the file's order */
    uint32_t layer_dim[KVFS_MAX_LAYERS];  /* layer[i]'s row width (n_kv_head * head_dim: its own with LAYER_SHAPES) */
    uint64_t layer_at[KVFS_MAX_LAYERS];    /* layer[i]'s K section from its part's data0 (per part: l0 .. l0 + n_layer) */
    /* an MLA chunk (KVFS_FLAG_V_FROM_K, one KV head): llama.cpp's cache has
     * no V and keeps the row's latent first, the rotated part (rot values)
     * last: K alone, each row rotated by rot */
    int mla;
    uint32_t rot;
    /* a V_NARROW chunk: K of each head in llama.cpp's order (the rotated
     * part last), V without the zeros before each head's values: rows of
     * v_dim = n_kv_head * (head_dim - rot) */
    int narrow;
    uint32_t v_dim;
};

/* The view of the object whose parsed header is h (whose token and layer
 * table pointers stay valid while the view is used); swa: the model's
 * sliding-window layers, or NULL (none).  -EINVAL for a shape llama.cpp
 * cannot hold, -ENOMEM. */
#define KVFS_LLAMA_MAX_STREAMS 256 /* llama.cpp's LLAMA_MAX_SEQ */
int kvfs_llama_view_init(struct kvfs_llama_view *v, const struct kvfs_header *h, int v_trans, uint32_t n_streams);
int kvfs_llama_view_init_swa(struct kvfs_llama_view *v, const struct kvfs_header *h, int v_trans,
                             uint32_t n_streams, const struct kvfs_llama_swa *swa);
void kvfs_llama_view_free(struct kvfs_llama_view *v);
/* The size of a view of n_tokens rows of kv_dim (either V layout) in
 * n_streams streams; _swa: with the sliding-window layers swa (or NULL) */
uint64_t kvfs_llama_state_size(uint64_t n_tokens, uint32_t n_layer, uint64_t kv_dim, uint32_t n_streams);
uint64_t kvfs_llama_state_size_swa(uint64_t n_tokens, uint32_t n_layer, uint64_t kv_dim, uint32_t n_streams,
                                   const struct kvfs_llama_swa *swa);
/* len bytes of the state file at off (clipped to its size) from the whole
 * object image obj; returns the bytes written */
size_t kvfs_llama_view_read(const struct kvfs_llama_view *v, const uint8_t *obj, uint64_t off, void *dst, size_t len);

/* A sequence-state file buf[0..len) as a chunk of the model fp: K/V in the
 * state's cache type (f32, f16 or bf16), positions and tokens as saved.
 * On success w holds the finished object (kvfs_writer_free it).  Errors,
 * each with a reason in err that names both sides of a mismatch: -EPROTO (not
 * a sequence state, or a version other than KVFS_LLAMA_SEQ_VERSION), -EINVAL
 * (truncated, trailing bytes, layer count, row size or cache type that does
 * not fit the model, cells at positions that are not consecutive, several
 * sequences, token ids >= n_vocab), -ENOMEM. */
int kvfs_llama_state_to_chunk(const void *buf, size_t len, const struct kvfs_fingerprint *fp, uint32_t n_vocab,
                              struct kvfs_writer *w, char *err, size_t errlen);
/* The same as a salted chunk (salt: a kvfs_salt_digest, or NULL for none). */
int kvfs_llama_state_to_chunk_salted(const void *buf, size_t len, const struct kvfs_fingerprint *fp,
                                     uint32_t n_vocab, const uint8_t salt[32], struct kvfs_writer *w, char *err,
                                     size_t errlen);
/* The same for a model with sliding-window layers swa (or NULL): a state of
 * two parts, whose SWA part must hold every cell (kvfs(8), llama/). */
int kvfs_llama_state_to_chunk_swa(const void *buf, size_t len, const struct kvfs_fingerprint *fp, uint32_t n_vocab,
                                  const struct kvfs_llama_swa *swa, const uint8_t salt[32], struct kvfs_writer *w,
                                  char *err, size_t errlen);

/* The salt a saved state's file name asks for (kvfs(8), llama/): a name
 * holding ".salt-" then 64 lowercase hex digits (a kvfs_salt_digest, not a
 * tenant's string), then its end or a character that is no letter or digit
 * ("doc.salt-<hex>.bin"), is stored salted.  Returns 1 with salt filled, 0
 * for a name without ".salt-", -EINVAL (a reason in err) for a malformed or
 * repeated one. */
#define KVFS_LLAMA_SALT_MARK ".salt-"
int kvfs_llama_name_salt(const char *name, uint8_t salt[32], char *err, size_t errlen);

#endif
