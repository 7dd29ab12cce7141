/* kvconvert.c - chunk files re-encoded in another dtype (kvconvert.h). */
#include "kvconvert.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvquant.h"
#include "log.h" /* kvfs_errf */

double kvfs_dtype_bits(uint32_t dtype)
{
    /* q4 and q4s are the same size: a mount of one never re-encodes the other */
    return dtype == KVFS_DTYPE_Q8 ? 8.5 : dtype == KVFS_DTYPE_Q4 || dtype == KVFS_DTYPE_Q4S ? 4.5
                                                                            : 8.0 * (double)kvfs_dtype_size(dtype);
}

int kvfs_chunk_convert(const void *img, size_t len, uint32_t dtype, struct kvfs_writer *w, char *err, size_t errlen)
{
    struct kvfs_header h;
    int rc = kvfs_file_verify(img, len, &h, err, errlen);
    if (rc)
        return rc;
    uint32_t kv_dim = h.fp.n_kv_head * h.fp.head_dim;
    if (!kvfs_dtype_known(dtype))
        return kvfs_errf(err, errlen, -EINVAL, "unknown dtype %u", dtype);
    int shaped = (h.flags & KVFS_FLAG_LAYER_SHAPES) != 0;
    /* blocks run along each layer's own row (kvfs(5)): every row a multiple of 64 */
    for (uint32_t l = 0; kvfs_dtype_quantized(dtype) && l < (shaped ? h.fp.n_layer : 1); l++) {
        uint32_t d = shaped ? kvfs_layer_kv_dim(&h, l) : kv_dim;
        if (d % 64)
            return kvfs_errf(err, errlen, -EINVAL, "dtype %s needs K/V rows of a multiple of 64 values; this chunk's "
                             "are %u%s", kvfs_dtype_name(dtype), d, shaped ? " in a layer" : "");
    }
    struct kvfs_layer_shape *shapes = shaped ? malloc(sizeof(*shapes) * h.fp.n_layer) : NULL;
    if (shaped && !shapes)
        return -ENOMEM;
    for (uint32_t l = 0; shaped && l < h.fp.n_layer; l++)
        kvfs_layer_shape_get(&h, l, &shapes[l]);
    uint32_t *tokens = malloc(sizeof(uint32_t) * h.n_tokens);
    size_t n = (size_t)h.n_tokens * kv_dim;
    float *kv = malloc(sizeof(float) * 2 * n);
    if (!tokens || !kv) {
        rc = -ENOMEM;
        goto out;
    }
    for (uint32_t t = 0; t < h.n_tokens; t++)
        tokens[t] = kvfs_header_token(&h, t);
    /* the same identity but the dtype: a tenant's chunk stays its tenant's */
    if ((rc = kvfs_writer_init_shaped(w, &h.fp, dtype, h.flags, h.pos0, h.n_tokens, tokens, h.salt, shapes)))
        goto out;
    int codec = kvfs_dtype_quantized(dtype);
    for (uint32_t l = 0; l < h.fp.n_layer && !rc; l++) {
        struct kvfs_layer_entry le;
        kvfs_layer_entry_get(&h, l, &le);
        uint8_t *dst = kvfs_writer_layer(w, l);
        if (!kvfs_layer_bytes(&h, l)) /* reads another layer's cache: nothing stored */
            continue;
        uint32_t ld = kvfs_layer_kv_dim(&h, l); /* a layer's own (at most the fingerprint's) */
        n = (size_t)h.n_tokens * ld;
        if ((rc = kvfs_layer_decode(&h, l, (const uint8_t *)img + le.offset, kv, kv + n)))
            break;
        if (codec && (h.flags & KVFS_FLAG_V_FROM_K)) /* MLA: the key blocks alone (kvfs(5)) */
            rc = kvfs_kvq_encode_k(codec, kv, h.n_tokens, ld, dst);
        else if (codec)
            rc = kvfs_kvq_encode(codec, kv, kv + n, h.n_tokens, ld, dst);
        else
            kvfs_f32_encode(dtype, kv, h.flags & KVFS_FLAG_V_FROM_K ? n : 2 * n, dst); /* K then V (or K alone) */
    }
    if (!rc)
        rc = kvfs_writer_finish(w);
    if (rc) {
        kvfs_writer_free(w);
        kvfs_errf(err, errlen, rc, "cannot re-encode the chunk as %s: %s", kvfs_dtype_name(dtype), strerror(-rc));
    }
out:
    free(shapes);
    free(tokens);
    free(kv);
    return rc;
}
