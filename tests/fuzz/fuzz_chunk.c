/* fuzz_chunk.c - libFuzzer target: a chunk file's header and its whole-file
 * verification (index/kvformat.c) on arbitrary bytes.  Each input is tried
 * as it is, then "repaired" (its layer and header checksums recomputed) so
 * that mutations reach the checks behind the checksums too.  Whatever the
 * input: no crash, no leak, and an accepted file is self-consistent. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "kvformat.h"
#include "kvquant.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define OFF_HEADER_SIZE 12 /* kvfs(5): the fixed header's fields */
#define OFF_CHECKSUM 120

static uint32_t rd32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }
static void wr64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void fix_header_checksum(uint8_t *buf, size_t size)
{
    uint32_t hs = rd32(buf + OFF_HEADER_SIZE);
    if (hs < OFF_CHECKSUM + 8 || hs > size)
        return;
    memset(buf + OFF_CHECKSUM, 0, 8);
    wr64(buf + OFF_CHECKSUM, XXH3_64bits(buf, hs));
}

static void check(const uint8_t *buf, size_t size)
{
    struct kvfs_header h;
    char err[256];
    if (kvfs_header_parse(buf, size, &h, err, sizeof(err)) == 0) {
        for (uint32_t l = 0; l < h.fp.n_layer; l++) {
            struct kvfs_layer_entry e;
            kvfs_layer_entry_get(&h, l, &e);
            if (e.offset <= size && e.size <= size - e.offset)
                (void)kvfs_layer_verify(&h, l, buf + e.offset, (size_t)e.size);
        }
        for (uint32_t i = 0; i < h.n_tokens; i++)
            (void)kvfs_header_token(&h, i);
        uint8_t digest[32];
        char hex[KVFS_HASH_HEX_LEN + 1];
        if (kvfs_content_hash(&h, digest) == 0)
            kvfs_hash_to_hex(digest, hex);
    }
    if (kvfs_file_verify(buf, size, &h, err, sizeof(err)) != 0)
        return;
    if (h.file_size != size)
        abort(); /* a verified image is exactly its header's size */
    /* what a reader does next: the first layer decoded (q8/q4 blocks included) */
    size_t n = (size_t)h.n_tokens * h.fp.n_kv_head * h.fp.head_dim;
    float *kv = n <= (1u << 18) ? malloc(sizeof(float) * 2 * n) : NULL;
    struct kvfs_layer_entry e;
    kvfs_layer_entry_get(&h, 0, &e);
    if (kv && kvfs_layer_decode(&h, 0, buf + e.offset, kv, kv + n) != 0)
        abort(); /* a verified layer always decodes */
    free(kv);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check(data, size);
    if (size < KVFS_FIXED_HEADER_SIZE)
        return 0;
    uint8_t *buf = malloc(size);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    fix_header_checksum(buf, size);
    struct kvfs_header h;
    if (kvfs_header_parse(buf, size, &h, NULL, 0) == 0) {
        /* the layer table is inside the header: fix each entry whose bytes
         * are in the input, then the header's own checksum again */
        size_t table = (size_t)(h.layer_table - buf);
        for (uint32_t l = 0; l < h.fp.n_layer; l++) {
            uint8_t *e = buf + table + 24u * l;
            uint64_t off = rd64(e), len = rd64(e + 8);
            if (off <= size && len <= size - off)
                wr64(e + 16, XXH3_64bits(buf + off, (size_t)len));
        }
        fix_header_checksum(buf, size);
    }
    check(buf, size);
    free(buf);
    return 0;
}
