/* synth_chunk.h - build random valid chunk images for tests. */
#ifndef KVFS_SYNTH_CHUNK_H
#define KVFS_SYNTH_CHUNK_H
#include <string.h>
#include "kvformat.h"
/* salt: a kvfs_salt_digest, or NULL for an unsalted chunk */
static inline int synth_chunk_salted(struct kvfs_writer *w, uint32_t layers, uint32_t tokens, uint32_t seed,
                                     uint32_t dtype, const uint8_t *salt)
{
    struct kvfs_fingerprint fp = {.n_layer = layers, .n_kv_head = 2, .head_dim = 8, .rope_type = KVFS_ROPE_NEOX,
                                  .rope_theta = 10000.0f, .rope_dim = 8, .n_head = 4, .n_embd = 32};
    memcpy(fp.arch, "llama", 6);
    memset(fp.model_id, 0x5a, 32);
    uint32_t ids[4096];
    uint64_t s = seed * 2654435761u + 12345;
    for (uint32_t i = 0; i < tokens && i < 4096; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (uint32_t)(s >> 40) % 50000;
    }
    int rc = kvfs_writer_init_salted(w, &fp, dtype, KVFS_FLAG_KEYS_ROPED, 0, tokens, ids, salt);
    if (rc)
        return rc;
    for (uint32_t l = 0; l < layers; l++) {
        uint8_t *p = kvfs_writer_layer(w, l);
        for (uint64_t i = 0; i < kvfs_layer_bytes(&w->hdr, 0); i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            p[i] = (uint8_t)(s >> 56) & 0x3f; /* finite f16/bf16/f32 bit patterns */
        }
    }
    return kvfs_writer_finish(w);
}
static inline int synth_chunk(struct kvfs_writer *w, uint32_t layers, uint32_t tokens, uint32_t seed, uint32_t dtype)
{
    return synth_chunk_salted(w, layers, tokens, seed, dtype, NULL);
}
#endif
