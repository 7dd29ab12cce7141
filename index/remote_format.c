/* remote_format.c - the pool's object and index formats (remote_format.h). */
#include "remote_format.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#ifdef KVFS_HAVE_RADOS
void kvfs_remote_object_op(rados_write_op_t op, const struct kvfs_chunk_info *ci, const void *obj, size_t len)
{
    char tokens[16];
    snprintf(tokens, sizeof(tokens), "%u", ci->n_tokens);
    rados_write_op_write_full(op, obj, len);
    rados_write_op_setxattr(op, "kvfs.model", ci->model, strlen(ci->model));
    rados_write_op_setxattr(op, "kvfs.tokens", tokens, strlen(tokens));
}
#endif

void kvfs_remote_index_oid(const char *model, char oid[KVFS_REMOTE_OID_MAX])
{
    snprintf(oid, KVFS_REMOTE_OID_MAX, "kvfs.model.%s", model);
}

size_t kvfs_remote_index_entry(const struct kvfs_chunk_info *ci, uint64_t osize, char *out, size_t cap)
{
    /* what ls -l needs without fetching the object, then the object's
     * bytes (the pool's usage; older readers stop before it) */
    int n = snprintf(out, cap, "%u %" PRIu64 " %u %s %" PRIu64, ci->n_tokens, ci->logical_size, ci->n_layer,
                     ci->arch[0] ? ci->arch : "-", osize);
    return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}

size_t kvfs_remote_use_key(const char *hash, int64_t ms, char key[KVFS_HASH_HEX_LEN + 3], char *val, size_t cap)
{
    snprintf(key, KVFS_HASH_HEX_LEN + 3, "%.64s.a", hash);
    int n = snprintf(val, cap, "%lld", (long long)ms);
    return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}

uint64_t remote_entry_osize(const char *val, size_t vlen)
{
    char v[128];
    size_t n = vlen < sizeof(v) - 1 ? vlen : sizeof(v) - 1;
    memcpy(v, val, n);
    v[n] = 0;
    unsigned tokens = 0, layers = 0;
    unsigned long long size = 0, osize = 0;
    char arch[16];
    int k = sscanf(v, "%u %llu %u %15s %llu", &tokens, &size, &layers, arch, &osize);
    return k == 5 ? osize : size;
}
