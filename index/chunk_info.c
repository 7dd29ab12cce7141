/* chunk_info.c - a chunk's row from its header (chunk_info.h). */
#include "chunk_info.h"

#include <stdio.h>
#include <string.h>

void kvfs_info_from_header(const struct kvfs_header *h, const char *hash, uint64_t stored,
                           struct kvfs_chunk_info *c)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->hash, sizeof(c->hash), "%s", hash);
    kvfs_fingerprint_id(&h->fp, c->model);
    memcpy(c->arch, h->fp.arch, sizeof(c->arch));
    c->arch[sizeof(c->arch) - 1] = '\0';
    c->n_tokens = h->n_tokens;
    c->n_layer = h->fp.n_layer;
    c->dtype = h->dtype;
    c->logical_size = h->file_size;
    c->stored_size = stored;
}
