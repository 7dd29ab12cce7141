/* kvquant.h - 8-bit and 4-bit codecs for one layer of a chunk's K and V
 * (issue 18): the kvfs(5) dtypes q8, q4 and q4s.
 *
 * KIVI's split: keys are quantized per channel (a group is one channel of
 * consecutive tokens: outlier channels keep their own scale), values per
 * token (a group is consecutive channels of one token).  A group is a block:
 *   q8: f16 d, then 32 int8 q (x = d q; d = max|x| / 127)            34 bytes
 *   q4: f16 d, f16 m, then g/2 bytes of g nibbles (x = m + d q,      36 / 20
 *       d = (max - min) / 15, m = min); low nibble first              bytes
 *   q4s: as q4, other groups                                       20 / 36
 *                                                                   bytes
 * with groups of 32 for q8, for q4 64 tokens (keys) and 32 channels
 * (values), for q4s 32 tokens (keys) and 64 channels (values).  The layer
 * is the key blocks, token group by token group and in each channel by
 * channel, then the value blocks, token by token and in each group by
 * group; q4s first stores its first row exactly (f16 K, then f16 V: 4
 * bytes per channel) and codes the rows after it.  A last token group
 * shorter than the group is padded with zeros (decoded, not returned).
 * An MLA chunk's layer (V derived from K) is the same without V: q4s's
 * exact row as f16 K alone, then the key blocks (kvfs_kvq_encode_k).
 * kv_dim must be a multiple of 64.  Per value: q8 8.5 bits (0.53x of f16),
 * q4 4.75 (keys 4.5, values 5; 0.30x), q4s 4.75 (keys 5, values 4.5) plus
 * its first row (4.77 on 512 rows; 0.30x).  Error: q8 at most d/2 per
 * value, q4 and q4s at most d/2 plus the f16 rounding of m and d
 * (kvfs_kvq_bound); q4s's first row f16 rounding only. */
#ifndef KVFS_KVQUANT_H
#define KVFS_KVQUANT_H

#include <stddef.h>
#include <stdint.h>

enum kvfs_kvq { KVFS_KVQ_Q8 = 1, KVFS_KVQ_Q4 = 2, KVFS_KVQ_Q4S = 3 };

/* The codecs' shapes, inline so that decoders built apart from this file
 * (the CUDA backend's plugin) read them rather than restate them.  Values
 * per group and bytes per block, keys (which 0) and values (1).  q4's
 * values take groups of 32, whose extra scales (5 bits per value against
 * 4.5) halve what 4 bits lose on a token's outlier channels.  q4s moves
 * those scales to the keys, where q4 loses (BENCHMARKS.md: q4's keys alone
 * cost its whole KL loss, its values nothing): keys over 32 tokens (a
 * chunk's first, large keys no longer set the step of 64 rows), values over
 * 64 channels; the same 4.75 bits per value. */
static inline uint32_t kvfs_kvq_group(int codec, int which)
{
    return codec == KVFS_KVQ_Q4 ? (which ? 32 : 64) : codec == KVFS_KVQ_Q4S ? (which ? 64 : 32) : 32;
}
static inline size_t kvfs_kvq_block_bytes(int codec, int which)
{
    return codec == KVFS_KVQ_Q8 ? 34 : 4 + kvfs_kvq_group(codec, which) / 2;
}
/* Rows stored exactly (f16) before the blocks: q4s keeps a chunk's first
 * row, whose keys are the largest (an attention sink's) and which the
 * query attends to most; quantized, it cost q4s's whole loss on 6-chunk
 * prompts (BENCHMARKS.md: 1.43x of f16 chunks' blend KL with it, 0.97x
 * without).  Its bytes: 4 per channel, K (f16) then V (f16). */
static inline uint32_t kvfs_kvq_exact_rows(int codec, uint32_t n_tokens)
{
    return codec == KVFS_KVQ_Q4S && n_tokens ? 1 : 0;
}

/* "q8", "q4", "q4s" -> codec; 0 for anything else */
int kvfs_kvq_parse(const char *name);
const char *kvfs_kvq_name(int codec);
/* bytes of one encoded layer (K and V), 0 for a bad codec or shape */
size_t kvfs_kvq_layer_bytes(int codec, uint32_t n_tokens, uint32_t kv_dim);
/* k, v: [n_tokens][kv_dim] floats -> out (kvfs_kvq_layer_bytes of it);
 * -EINVAL for a bad codec or kv_dim not a multiple of 64 */
int kvfs_kvq_encode(int codec, const float *k, const float *v, uint32_t n_tokens, uint32_t kv_dim, uint8_t *out);
int kvfs_kvq_decode(int codec, const uint8_t *in, uint32_t n_tokens, uint32_t kv_dim, float *k, float *v);
/* decode's share `part` of n_parts (disjoint, together the whole layer):
 * what a pool of threads runs in parallel */
int kvfs_kvq_decode_part(int codec, const uint8_t *in, uint32_t n_tokens, uint32_t kv_dim, float *k, float *v,
                         uint32_t part, uint32_t n_parts);
/* one element of an encoded layer: token t, channel c of K (which 0) or
 * V (1), exactly as decode gives it */
float kvfs_kvq_elem(int codec, const uint8_t *in, uint32_t n_tokens, uint32_t kv_dim, int which, uint32_t t,
                    uint32_t c);
/* An MLA chunk's layer (kvfs(5): V derived from K, not stored): the same
 * layout without V, i.e. q4s's exact first row as f16 K alone, then the key
 * blocks; no value blocks.  k: [n_tokens][kv_dim]. */
size_t kvfs_kvq_k_layer_bytes(int codec, uint32_t n_tokens, uint32_t kv_dim);
int kvfs_kvq_encode_k(int codec, const float *k, uint32_t n_tokens, uint32_t kv_dim, uint8_t *out);
int kvfs_kvq_decode_k(int codec, const uint8_t *in, uint32_t n_tokens, uint32_t kv_dim, float *k);
float kvfs_kvq_elem_k(int codec, const uint8_t *in, uint32_t n_tokens, uint32_t kv_dim, uint32_t t, uint32_t c);
/* the largest error decoding may leave on a group whose values span
 * [lo, hi] (the tests' and kvfs(5)'s bound) */
float kvfs_kvq_bound(int codec, float lo, float hi);

#endif
