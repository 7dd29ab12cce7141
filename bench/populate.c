/* populate.c - fill a store with N tiny synthetic chunks, fast (no fsync),
 * for the listing benchmark.  Usage: populate STORE N */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvformat.h"
#include "store.h"

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: populate STORE N\n");
        return 2;
    }
    long n = atol(argv[2]);
    struct kvfs_store_opts o = {.dir = argv[1], .zstd_level = 0, .no_sync = 1};
    struct kvfs_store *s;
    char err[256];
    if (kvfs_store_open(&o, &s, err, sizeof(err))) {
        fprintf(stderr, "populate: %s\n", err);
        return 1;
    }
    struct kvfs_fingerprint fp = {.n_layer = 1, .n_kv_head = 1, .head_dim = 8, .rope_type = 0,
                                  .rope_theta = 10000.0f, .rope_dim = 8, .n_head = 1, .n_embd = 8};
    memcpy(fp.arch, "llama", 6);
    for (long i = 0; i < n; i++) {
        uint32_t tok[2] = {(uint32_t)i, (uint32_t)(i >> 32)};
        struct kvfs_writer w;
        kvfs_writer_init(&w, &fp, KVFS_DTYPE_F16, 0, 0, 2, tok);
        kvfs_writer_finish(&w);
        if (kvfs_store_put(s, w.buf, w.size, NULL, NULL, err, sizeof(err))) {
            fprintf(stderr, "populate: %s\n", err);
            return 1;
        }
        kvfs_writer_free(&w);
        if (i % 20000 == 0)
            fprintf(stderr, "populate: %ld/%ld\n", i, n);
    }
    kvfs_store_close(s);
    return 0;
}
