/* test_store.c - the storage core without FUSE: put/get/remove, pinning,
 * capacity and LRU eviction, ENOSPC with only pinned chunks, persistence,
 * crash reconciliation, fsck and rebuild, concurrent use. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "store.h"
#include "synth_chunk.h"

static char dir[256];

static struct kvfs_store *open_store(uint64_t capacity, uint64_t ram, int level)
{
    struct kvfs_store_opts o = {.dir = dir, .capacity = capacity, .ram_bytes = ram, .zstd_level = level};
    struct kvfs_store *s = NULL;
    char err[256];
    int rc = kvfs_store_open(&o, &s, err, sizeof(err));
    if (rc)
        fprintf(stderr, "open: %s\n", err);
    return s;
}

static int put_synth(struct kvfs_store *s, uint32_t tokens, uint32_t seed, char hash[65])
{
    struct kvfs_writer w;
    char err[256];
    synth_chunk(&w, 4, tokens, seed, KVFS_DTYPE_F16);
    int rc = kvfs_store_put(s, w.buf, w.size, NULL, hash, err, sizeof(err));
    kvfs_writer_free(&w);
    return rc;
}

static int same_as_synth(struct kvfs_store *s, const char *hash, uint32_t tokens, uint32_t seed)
{
    struct kvfs_writer w;
    struct kvfs_chunk_ref *ref;
    synth_chunk(&w, 4, tokens, seed, KVFS_DTYPE_F16);
    int ok = kvfs_store_get(s, hash, &ref) == 0;
    if (ok) {
        ok = kvfs_chunk_size(ref) == w.size && !memcmp(kvfs_chunk_data(ref), w.buf, w.size);
        uint8_t tail[100];
        ok = ok && kvfs_chunk_pread(ref, tail, 100, w.size - 50) == 50 && !memcmp(tail, w.buf + w.size - 50, 50);
        kvfs_chunk_release(ref);
    }
    kvfs_writer_free(&w);
    return ok;
}

struct worker { struct kvfs_store *s; int id; int errors; };

static void *worker_main(void *arg)
{
    struct worker *wk = arg;
    for (int i = 0; i < 20; i++) {
        char h[65];
        uint32_t seed = 1000 + (uint32_t)((wk->id * 7 + i) % 12); /* overlapping chunks across threads */
        if (put_synth(wk->s, 40, seed, h) != 0 || !same_as_synth(wk->s, h, 40, seed))
            wk->errors++;
    }
    return NULL;
}

static void report(void *ctx, const char *line) { (void)ctx; fprintf(stderr, "fsck: %s\n", line); }

int main(void)
{
    snprintf(dir, sizeof(dir), "/tmp/kvfs-test-store.%d", (int)getpid());
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    system(cmd);

    /* basic put/get/stat/list, compressed and raw */
    for (int level = 0; level <= 3; level += 3) {
        struct kvfs_store *s = open_store(0, 1 << 20, level);
        CHECK(s != NULL);
        char h1[65], h2[65];
        CHECK_EQ(put_synth(s, 64, 1, h1), 0);
        CHECK_EQ(put_synth(s, 64, 1, h2), 0); /* idempotent */
        CHECK(strcmp(h1, h2) == 0);
        CHECK_EQ(kvfs_store_count(s), 1);
        CHECK(same_as_synth(s, h1, 64, 1));
        CHECK(same_as_synth(s, h1, 64, 1)); /* second read from the RAM tier */
        struct kvfs_chunk_info ci;
        CHECK_EQ(kvfs_store_stat(s, h1, &ci), 0);
        CHECK_EQ(ci.n_tokens, 64);
        CHECK_EQ(ci.hits, 2);
        CHECK(ci.in_ram);
        /* one layer straight from the object */
        struct kvfs_writer w;
        synth_chunk(&w, 4, 64, 1, KVFS_DTYPE_F16);
        uint8_t *layer = malloc(kvfs_layer_bytes(&w.hdr));
        CHECK_EQ(kvfs_store_read_layer(s, h1, 2, layer, kvfs_layer_bytes(&w.hdr)), 0);
        CHECK(!memcmp(layer, kvfs_writer_layer(&w, 2), kvfs_layer_bytes(&w.hdr)));
        free(layer);
        /* wrong expected name */
        char err[256];
        CHECK_EQ(kvfs_store_put(s, w.buf, w.size, "0000000000000000000000000000000000000000000000000000000000000000",
                                NULL, err, sizeof(err)), -EINVAL);
        CHECK(strstr(err, "does not match") != NULL);
        /* corrupt input */
        w.buf[w.hdr.header_size + 3] ^= 1;
        CHECK_EQ(kvfs_store_put(s, w.buf, w.size, NULL, NULL, err, sizeof(err)), -EBADMSG);
        CHECK_EQ(kvfs_store_put(s, w.buf, 10, NULL, NULL, err, sizeof(err)), -EINVAL);
        kvfs_writer_free(&w);
        CHECK_EQ(kvfs_store_count(s), 1);
        /* a ref outlives removal */
        struct kvfs_chunk_ref *ref;
        CHECK_EQ(kvfs_store_get(s, h1, &ref), 0);
        CHECK_EQ(kvfs_store_remove(s, h1), 0);
        CHECK_EQ(kvfs_store_stat(s, h1, &ci), -ENOENT);
        CHECK_EQ(kvfs_store_get(s, h1, &ref) == 0 ? 1 : 0, 0);
        CHECK(kvfs_chunk_size(ref) > 0);
        kvfs_chunk_release(ref);
        CHECK_EQ(kvfs_store_remove(s, h1), -ENOENT);
        kvfs_store_close(s);
    }

    /* persistence + pinning + capacity/LRU */
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    system(cmd);
    struct kvfs_store *s = open_store(0, 0, 0);
    char a[65], b[65], c[65], d[65];
    CHECK_EQ(put_synth(s, 100, 11, a), 0);
    CHECK_EQ(put_synth(s, 100, 12, b), 0);
    CHECK_EQ(kvfs_store_set_pinned(s, a, 1), 0);
    struct kvfs_chunk_info ia;
    CHECK_EQ(kvfs_store_stat(s, a, &ia), 0);
    uint64_t one = ia.stored_size;
    kvfs_store_close(s);
    s = open_store(one * 2 + one / 2, 0, 0); /* room for two */
    CHECK_EQ(kvfs_store_count(s), 2);
    CHECK_EQ(kvfs_store_stat(s, a, &ia), 0);
    CHECK_EQ(ia.pinned, 1);
    CHECK(same_as_synth(s, b, 100, 12));
    CHECK_EQ(put_synth(s, 100, 13, c), 0); /* evicts b (only unpinned) */
    struct kvfs_chunk_info tmp;
    CHECK_EQ(kvfs_store_stat(s, b, &tmp), -ENOENT);
    CHECK_EQ(kvfs_store_stat(s, a, &tmp), 0);
    CHECK_EQ(kvfs_store_set_pinned(s, c, 1), 0);
    CHECK_EQ(put_synth(s, 100, 14, d), -ENOSPC); /* only pinned left */
    CHECK_EQ(kvfs_store_stat(s, d, &tmp), -ENOENT);
    CHECK_EQ(kvfs_store_count(s), 2);
    char *json = NULL;
    CHECK_EQ(kvfs_store_stats_json(s, &json), 0);
    CHECK(json && strstr(json, "\"evictions\": 1") != NULL);
    free(json);
    kvfs_store_close(s);
    /* no temp file left behind by the refused put */
    snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A %s/tmp)\"", dir);
    CHECK_EQ(system(cmd), 0);

    /* crash leftovers: temp file, object without row, row without object */
    snprintf(cmd, sizeof(cmd), "echo junk > %s/tmp/x.tmp && cp %s/objects/%.2s/%s.kvo /tmp/kvfs-test-obj.%d && rm %s/objects/%.2s/%s.kvo",
             dir, dir, a, a, (int)getpid(), dir, a, a);
    CHECK_EQ(system(cmd), 0); /* a's row now points at nothing */
    CHECK(kvfs_store_fsck(dir, 0, report, NULL) == -EUCLEAN);
    s = open_store(0, 0, 0);
    CHECK_EQ(kvfs_store_stat(s, a, &tmp), -ENOENT);
    CHECK_EQ(kvfs_store_count(s), 1);
    kvfs_store_close(s);
    CHECK_EQ(kvfs_store_fsck(dir, 0, report, NULL), 0);
    /* put the object back without a row: reconciled at open */
    snprintf(cmd, sizeof(cmd), "cp /tmp/kvfs-test-obj.%d %s/objects/%.2s/%s.kvo", (int)getpid(), dir, a, a);
    CHECK_EQ(system(cmd), 0);
    s = open_store(0, 0, 0);
    CHECK_EQ(kvfs_store_stat(s, a, &tmp), 0);
    CHECK(same_as_synth(s, a, 100, 11));
    kvfs_store_close(s);
    /* a corrupted object: fsck finds it, rebuild quarantines it */
    snprintf(cmd, sizeof(cmd), "printf 'X' | dd of=%s/objects/%.2s/%s.kvo bs=1 seek=9000 conv=notrunc 2>/dev/null", dir, a, a);
    CHECK_EQ(system(cmd), 0);
    CHECK(kvfs_store_fsck(dir, 0, report, NULL) == -EUCLEAN);
    CHECK_EQ(kvfs_store_fsck(dir, 1, report, NULL), 0);
    CHECK_EQ(kvfs_store_fsck(dir, 0, report, NULL), 0);
    s = open_store(0, 0, 0);
    CHECK_EQ(kvfs_store_stat(s, a, &tmp), -ENOENT);
    CHECK_EQ(kvfs_store_stat(s, c, &tmp), 0);
    CHECK_EQ(tmp.pinned, 1); /* usage data survived the rebuild */
    kvfs_store_close(s);
    /* index deleted entirely: rebuilt from objects alone */
    snprintf(cmd, sizeof(cmd), "rm -f %s/index.sqlite*", dir);
    system(cmd);
    CHECK(kvfs_store_fsck(dir, 0, report, NULL) == -EUCLEAN);
    CHECK_EQ(kvfs_store_fsck(dir, 1, report, NULL), 0);
    s = open_store(0, 0, 0);
    CHECK_EQ(kvfs_store_count(s), 1);
    CHECK(same_as_synth(s, c, 100, 13));
    kvfs_store_close(s);

    /* 8 threads putting and reading overlapping chunks */
    s = open_store(0, 4 << 20, 1);
    pthread_t th[8];
    struct worker wk[8];
    for (int i = 0; i < 8; i++) {
        wk[i] = (struct worker){.s = s, .id = i};
        pthread_create(&th[i], NULL, worker_main, &wk[i]);
    }
    int errors = 0;
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        errors += wk[i].errors;
    }
    CHECK_EQ(errors, 0);
    CHECK_EQ(kvfs_store_count(s), 1 + 12);
    kvfs_store_close(s);
    CHECK_EQ(kvfs_store_fsck(dir, 0, report, NULL), 0);

    /* an object as another store wrote it (what the remote tier fetches):
     * stored as it came once verified, its image in the RAM tier; a wrong
     * name or garbage is refused and leaves nothing behind */
    {
        s = open_store(0, 0, 3);
        char h[65], path[4096], err[256];
        CHECK_EQ(put_synth(s, 96, 7, h), 0);
        CHECK_EQ(kvfs_store_object_path(s, h, path, sizeof(path)), 0);
        kvfs_store_close(s);
        FILE *f = fopen(path, "rb");
        CHECK(f != NULL);
        static uint8_t obj[4 << 20];
        size_t len = f ? fread(obj, 1, sizeof(obj), f) : 0;
        if (f)
            fclose(f);
        CHECK(len > 0 && len < sizeof(obj));
        char saved[256];
        memcpy(saved, dir, sizeof(saved));
        snprintf(dir, sizeof(dir), "/tmp/kvfs-test-store-other.%d", (int)getpid());
        s = open_store(0, 4 << 20, 0);
        CHECK(s != NULL);
        char wrong[65];
        memcpy(wrong, h, sizeof(wrong));
        wrong[0] = wrong[0] == '0' ? '1' : '0';
        CHECK_EQ(kvfs_store_put_object(s, obj, len, wrong, err, sizeof(err)), -EINVAL);
        CHECK(strstr(err, "does not match") != NULL);
        obj[len / 2] ^= 0x55;
        CHECK(kvfs_store_put_object(s, obj, len, h, err, sizeof(err)) < 0);
        obj[len / 2] ^= 0x55;
        CHECK_EQ(kvfs_store_count(s), 0);
        CHECK_EQ(kvfs_store_put_object(s, obj, len, h, err, sizeof(err)), 0);
        struct kvfs_chunk_info ci;
        CHECK_EQ(kvfs_store_stat(s, h, &ci), 0);
        CHECK(ci.in_ram);
        CHECK(same_as_synth(s, h, 96, 7));
        CHECK_EQ(kvfs_store_put_object(s, obj, len, h, err, sizeof(err)), 0); /* again: a no-op */
        CHECK_EQ(kvfs_store_count(s), 1);
        kvfs_store_close(s);
        snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A %s/tmp)\"", dir);
        CHECK_EQ(system(cmd), 0); /* no temporary file left */
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        system(cmd);
        memcpy(dir, saved, sizeof(saved));
    }

    uint64_t v;
    CHECK_EQ(kvfs_parse_size("64M", &v), 0);
    CHECK_EQ(v, 64ull << 20);
    CHECK_EQ(kvfs_parse_size("1GiB", &v), 0);
    CHECK_EQ(v, 1ull << 30);
    CHECK_EQ(kvfs_parse_size("12x", &v), -EINVAL);
    CHECK_EQ(kvfs_parse_size("-1", &v), -EINVAL);

    snprintf(cmd, sizeof(cmd), "rm -rf %s /tmp/kvfs-test-obj.%d", dir, (int)getpid());
    system(cmd);
    CHECK_DONE();
}
