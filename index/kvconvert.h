/* kvconvert.h - a chunk file re-encoded in another dtype (kvfs(5)): how a
 * mount with -o kv_quant stores the chunks it names itself, and
 * `kvfsctl convert`.  No FUSE. */
#ifndef KVFS_KVCONVERT_H
#define KVFS_KVCONVERT_H

#include <stddef.h>
#include <stdint.h>

#include "kvformat.h"

/* Bytes per K/V value of a dtype (q8 8.5 bits, q4 4.5 bits): which of two
 * dtypes stores a chunk smaller. */
double kvfs_dtype_bits(uint32_t dtype);

/* The verified chunk image img[0..len) with its K/V re-encoded in `dtype`
 * (tokens, positions, flags and model kept) into w (free with
 * kvfs_writer_free).  Lossy towards q8/q4 (kvfs(5) bounds the error).
 * -EINVAL with a reason in err: a malformed image, or a q8/q4 dtype for a
 * model whose kv_dim is not a multiple of 64. */
int kvfs_chunk_convert(const void *img, size_t len, uint32_t dtype, struct kvfs_writer *w, char *err, size_t errlen);

#endif
