/* test_loader.c - the layer-wise loader over a real store: every layer
 * arrives byte-identical (raw and zstd frames, with short reads forced,
 * buffered and O_DIRECT; O_DIRECT chosen for an object out of the page
 * cache and not for one in it), a
 * throttled ("slow") tier makes the controller raise the ratio and a fast
 * one leaves it at the floor, a checksum failure in the middle of a stream
 * fails the blend cleanly, a truncated object is reported, and a chunk
 * removed while it streams still arrives whole. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blend.h"
#include "check.h"
#include "controller.h"
#include "loader.h"
#include "object.h"
#include "store.h"
#include "synth_chunk.h"
#include "synth_model.h"

enum { NL = 8, NT = 300 };

static struct kvfs_store *open_store(const char *dir, int zstd)
{
    struct kvfs_store_opts so = {.dir = dir, .zstd_level = zstd, .no_sync = 1};
    struct kvfs_store *s = NULL;
    char err[256];
    if (kvfs_store_open(&so, &s, err, sizeof(err)))
        fprintf(stderr, "store: %s\n", err);
    return s;
}

/* 1 if files in dir can be opened O_DIRECT (not on tmpfs before 6.6) */
static int direct_ok(const char *dir)
{
    char p[300];
    snprintf(p, sizeof(p), "%s/.direct-probe", dir);
    int fd = open(p, O_CREAT | O_RDWR | O_DIRECT, 0600);
    if (fd >= 0)
        close(fd);
    unlink(p);
    return fd >= 0;
}

/* the share of fd's pages in the page cache */
static double resident(int fd)
{
    struct stat st;
    CHECK_EQ(fstat(fd, &st), 0);
    size_t pages = ((size_t)st.st_size + 4095) / 4096, in = 0;
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    unsigned char *vec = malloc(pages);
    CHECK(map != MAP_FAILED && vec && mincore(map, (size_t)st.st_size, vec) == 0);
    for (size_t i = 0; i < pages; i++)
        in += vec[i] & 1;
    free(vec);
    munmap(map, (size_t)st.st_size);
    return (double)in / (double)pages;
}

/* the object's pages out of the page cache (a cold disk): asked again until
 * they are (pages still in a CPU's LRU batch, or under a background
 * readahead the loader asked for, stay the first time) */
static void evict_cache(struct kvfs_store *s, const char *hash)
{
    char p[4096];
    CHECK_EQ(kvfs_store_object_path(s, hash, p, sizeof(p)), 0);
    int fd = open(p, O_RDONLY);
    CHECK(fd >= 0);
    CHECK_EQ(fdatasync(fd), 0);
    for (int i = 0; i < 200; i++) {
        CHECK_EQ(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
        if (resident(fd) < 0.1)
            break;
        usleep(10000);
    }
    CHECK(resident(fd) < 0.1);
    close(fd);
}

/* every layer of every chunk equals the original image's; n_direct of them
 * were read O_DIRECT */
static void check_stream(struct kvfs_store *s, char hashes[][KVFS_HASH_HEX_LEN + 1], struct kvfs_writer *w, int n,
                         const struct kvfs_loader_opts *o, int n_direct)
{
    const char *hp[8];
    for (int i = 0; i < n; i++)
        hp[i] = hashes[i];
    struct kvfs_loader *ld;
    char err[256] = "";
    CHECK_EQ(kvfs_loader_open(s, hp, n, o, &ld, err, sizeof(err)), 0);
    CHECK_EQ(kvfs_loader_start(ld, 1), 0);
    for (int l = 1; l < NL; l++) {
        const void *data[8];
        CHECK_EQ(kvfs_loader_wait(ld, l, data, err, sizeof(err)), 0);
        for (int i = 0; i < n; i++)
            CHECK(!memcmp(data[i], w[i].buf + kvfs_layer_offset(&w[i].hdr, (uint32_t)l),
                          kvfs_layer_bytes(&w[i].hdr, 0)));
    }
    const void *d0[8];
    CHECK_EQ(kvfs_loader_wait(ld, 0, d0, err, sizeof(err)), -EINVAL); /* not requested */
    struct kvfs_loader_stats st;
    kvfs_loader_get_stats(ld, &st);
    CHECK_EQ(st.n_disk, n);
    CHECK_EQ(st.n_direct, n_direct);
    CHECK(st.bytes_read > 0);
    kvfs_loader_close(ld);
}

/* the chunk's object opened (flags) and its frame table read into *info */
static int open_frames(struct kvfs_store *s, const char *hash, int flags, struct kvfs_obj_info *info)
{
    char p[4096], why[256];
    CHECK_EQ(kvfs_store_object_path(s, hash, p, sizeof(p)), 0);
    int fd = open(p, flags);
    struct stat st;
    CHECK(fd >= 0 && fstat(fd, &st) == 0);
    struct kvfs_header h;
    uint8_t *hb = NULL;
    CHECK_EQ(kvfs_obj_read_prefix(fd, (uint64_t)st.st_size, info, &hb, &h, why, sizeof(why)), 0);
    free(hb); /* the header, which the frame table does not point into */
    return fd;
}

static void corrupt_layer(struct kvfs_store *s, const char *hash, int layer, int truncate_it)
{
    struct kvfs_obj_info info;
    int fd = open_frames(s, hash, O_RDWR, &info);
    uint64_t off = info.frames[layer].offset + info.frames[layer].stored_size / 2;
    if (truncate_it) {
        CHECK_EQ(ftruncate(fd, (off_t)off), 0);
    } else {
        uint8_t b;
        CHECK_EQ(pread(fd, &b, 1, (off_t)off), 1);
        b ^= 0x41;
        CHECK_EQ(pwrite(fd, &b, 1, (off_t)off), 1);
    }
    kvfs_obj_info_free(&info);
    close(fd);
}

/* cut the object inside layer's frame: in its middle, or at the last
 * 4 KiB boundary inside it (the frame must span one) */
static void truncate_in_layer(struct kvfs_store *s, const char *hash, int layer, int aligned)
{
    struct kvfs_obj_info info;
    int fd = open_frames(s, hash, O_RDWR, &info);
    uint64_t lo = info.frames[layer].offset, hi = lo + info.frames[layer].stored_size;
    uint64_t off = aligned ? (hi - 1) / 4096 * 4096 : lo + (hi - lo) / 2 + 1;
    if (off % 4096 == 0 && !aligned)
        off++;
    CHECK(off > lo && off < hi);
    CHECK_EQ(ftruncate(fd, (off_t)off), 0);
    kvfs_obj_info_free(&info);
    close(fd);
}

static void test_streams(void)
{
    for (int zstd = 0; zstd <= 1; zstd++) {
        char dir[] = "/tmp/kvfs-loader.XXXXXX";
        CHECK(mkdtemp(dir) != NULL);
        struct kvfs_store *s = open_store(dir, zstd ? 3 : 0);
        struct kvfs_writer w[3];
        char hashes[3][KVFS_HASH_HEX_LEN + 1], err[256];
        for (int i = 0; i < 3; i++) {
            CHECK_EQ(synth_chunk(&w[i], NL, NT + 17 * i, 100 + i, KVFS_DTYPE_F16), 0);
            CHECK_EQ(kvfs_store_put(s, w[i].buf, w[i].size, NULL, hashes[i], err, sizeof(err)), 0);
        }
        struct kvfs_loader_opts plain = {0}, shorts = {.max_read = 1000, .queue_depth = 4};
        check_stream(s, hashes, w, 3, &plain, 0); /* just written: in the page cache, read through it */
        check_stream(s, hashes, w, 3, &shorts, 0); /* every frame arrives in short pieces */
        /* O_DIRECT wherever the filesystem allows: whole blocks around each
         * frame, whole and in pieces of 4 KiB (max_read rounded up) */
        int dio = direct_ok(dir);
        struct kvfs_loader_opts direct = {.direct_io = 1}, direct_shorts = {.direct_io = 1, .max_read = 1000,
                                                                            .queue_depth = 4};
        check_stream(s, hashes, w, 3, &direct, dio ? 3 : 0);
        check_stream(s, hashes, w, 3, &direct_shorts, dio ? 3 : 0);
        /* the default: O_DIRECT for the object out of the page cache only;
         * never, when told so */
        evict_cache(s, hashes[1]);
        struct kvfs_loader_opts never = {.direct_io = -1};
        check_stream(s, hashes, w, 3, &never, 0);
        evict_cache(s, hashes[1]);
        check_stream(s, hashes, w, 3, &plain, dio ? 1 : 0);

        /* removed while streaming (slow tier): the open object still streams */
        struct kvfs_loader_opts slow = {.throttle_bps = 2u << 20};
        const char *hp[3] = {hashes[0], hashes[1], hashes[2]};
        struct kvfs_loader *ld;
        CHECK_EQ(kvfs_loader_open(s, hp, 3, &slow, &ld, err, sizeof(err)), 0);
        CHECK_EQ(kvfs_loader_start(ld, 1), 0);
        const void *data[3];
        CHECK_EQ(kvfs_loader_wait(ld, 1, data, err, sizeof(err)), 0);
        CHECK_EQ(kvfs_store_remove(s, hashes[1]), 0);
        for (int l = 2; l < NL; l++)
            CHECK_EQ(kvfs_loader_wait(ld, l, data, err, sizeof(err)), 0);
        CHECK(!memcmp(data[1], w[1].buf + kvfs_layer_offset(&w[1].hdr, NL - 1),
                      kvfs_layer_bytes(&w[1].hdr, 0)));
        struct kvfs_loader_stats st;
        kvfs_loader_get_stats(ld, &st);
        CHECK(st.load_s > 0.05); /* the throttle really slowed it */
        kvfs_loader_close(ld);
        const char *gone[1] = {hashes[1]};
        CHECK_EQ(kvfs_loader_open(s, gone, 1, NULL, &ld, err, sizeof(err)), -ENOENT);
        CHECK(strstr(err, "not in this store") != NULL);

        /* a checksum failure in layer 5 of chunk 3: layers before it arrive,
         * layer 5 reports -EBADMSG with the chunk and layer named */
        corrupt_layer(s, hashes[2], 5, 0);
        const char *two[2] = {hashes[0], hashes[2]};
        CHECK_EQ(kvfs_loader_open(s, two, 2, NULL, &ld, err, sizeof(err)), 0);
        CHECK_EQ(kvfs_loader_start(ld, 1), 0);
        CHECK_EQ(kvfs_loader_wait(ld, 4, data, err, sizeof(err)), 0);
        CHECK_EQ(kvfs_loader_wait(ld, 5, data, err, sizeof(err)), -EBADMSG);
        CHECK(strstr(err, "chunk 2 layer 5") != NULL);
        kvfs_loader_close(ld);

        /* an object truncated after the loader opened it: -EIO naming the
         * layer; truncated before: refused at open */
        const char *one[1] = {hashes[0]};
        CHECK_EQ(kvfs_loader_open(s, one, 1, NULL, &ld, err, sizeof(err)), 0);
        corrupt_layer(s, hashes[0], 6, 1);
        CHECK_EQ(kvfs_loader_start(ld, 1), 0);
        int rc = 0, l;
        for (l = 1; l < NL && !rc; l++)
            rc = kvfs_loader_wait(ld, l, data, err, sizeof(err));
        CHECK_EQ(rc, -EIO);
        CHECK_EQ(l - 1, 6);
        CHECK(strstr(err, "object truncated") != NULL);
        kvfs_loader_close(ld);
        ld = NULL;
        CHECK(kvfs_loader_open(s, one, 1, NULL, &ld, err, sizeof(err)) < 0);
        CHECK(ld == NULL);

        /* the same faults read O_DIRECT: a flipped byte in layer 3 is a
         * checksum failure there; a truncation in the middle of layer 6 (not
         * on a block boundary) and one on a block boundary within layer 6
         * are reported as a truncated object at layer 6 */
        struct kvfs_writer w4;
        char h4[KVFS_HASH_HEX_LEN + 1];
        CHECK_EQ(synth_chunk(&w4, NL, NT * 3, 200, KVFS_DTYPE_F16), 0);
        CHECK_EQ(kvfs_store_put(s, w4.buf, w4.size, NULL, h4, err, sizeof(err)), 0);
        const char *four[1] = {h4};
        corrupt_layer(s, h4, 3, 0);
        CHECK_EQ(kvfs_loader_open(s, four, 1, &direct, &ld, err, sizeof(err)), 0);
        CHECK_EQ(kvfs_loader_start(ld, 1), 0);
        CHECK_EQ(kvfs_loader_wait(ld, 2, data, err, sizeof(err)), 0);
        CHECK_EQ(kvfs_loader_wait(ld, 3, data, err, sizeof(err)), -EBADMSG);
        CHECK(strstr(err, "chunk 1 layer 3") != NULL);
        kvfs_loader_close(ld);
        for (int aligned = 0; aligned <= 1; aligned++) {
            CHECK_EQ(kvfs_store_remove(s, h4), 0); /* whole again */
            CHECK_EQ(kvfs_store_put(s, w4.buf, w4.size, NULL, NULL, err, sizeof(err)), 0);
            CHECK_EQ(kvfs_loader_open(s, four, 1, &direct, &ld, err, sizeof(err)), 0);
            truncate_in_layer(s, h4, 6, aligned);
            CHECK_EQ(kvfs_loader_start(ld, 4), 0);
            CHECK_EQ(kvfs_loader_wait(ld, 4, data, err, sizeof(err)), 0);
            CHECK_EQ(kvfs_loader_wait(ld, 5, data, err, sizeof(err)), 0);
            CHECK(!memcmp(data[0], w4.buf + kvfs_layer_offset(&w4.hdr, 5), kvfs_layer_bytes(&w4.hdr, 5)));
            CHECK_EQ(kvfs_loader_wait(ld, 6, data, err, sizeof(err)), -EIO);
            CHECK(strstr(err, "object truncated") != NULL);
            struct kvfs_loader_stats st4;
            kvfs_loader_get_stats(ld, &st4);
            CHECK_EQ(st4.n_direct, dio);
            kvfs_loader_close(ld);
        }
        kvfs_writer_free(&w4);
        for (int i = 0; i < 3; i++)
            kvfs_writer_free(&w[i]);
        kvfs_store_close(s);
        char cmd[256];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        CHECK_EQ(system(cmd), 0);
    }
}

/* A chunk whose even layers do not compress (15 random bits in each f16)
 * and odd ones do (6): in a zstd store its raw frames follow zstd frames at
 * offsets of no particular alignment */
static int mixed_chunk(struct kvfs_writer *w, uint32_t seed)
{
    struct kvfs_fingerprint fp = {.n_layer = NL, .n_kv_head = 2, .head_dim = 8, .rope_type = KVFS_ROPE_NEOX,
                                  .rope_theta = 10000.0f, .rope_dim = 8, .n_head = 4, .n_embd = 32};
    memcpy(fp.arch, "llama", 6);
    memset(fp.model_id, 0x5a, 32);
    uint32_t ids[NT + 7];
    uint64_t x = seed * 2654435761u + 1;
    for (int i = 0; i < NT + 7; i++)
        ids[i] = (uint32_t)i * 7u + seed;
    int rc = kvfs_writer_init_salted(w, &fp, KVFS_DTYPE_F16, KVFS_FLAG_KEYS_ROPED, 0, NT + 7, ids, NULL);
    if (rc)
        return rc;
    for (uint32_t l = 0; l < NL; l++) {
        uint8_t *p = kvfs_writer_layer(w, l);
        for (uint64_t i = 0; i < kvfs_layer_bytes(&w->hdr, l); i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            uint8_t b = (uint8_t)(x >> 56);
            p[i] = l % 2 ? b & 0x3f : i % 2 ? (b & 0xbb) : b; /* high bytes: no NaN or Inf exponent */
        }
    }
    return kvfs_writer_finish(w);
}

/* raw frames after zstd ones, read O_DIRECT (and buffered): every layer
 * whole, and every pointer the loader hands out 16-byte aligned */
static void test_mixed_frames(void)
{
    char dir[] = "/tmp/kvfs-loader-mixed.XXXXXX", err[256], h[2][KVFS_HASH_HEX_LEN + 1];
    CHECK(mkdtemp(dir) != NULL);
    struct kvfs_store *s = open_store(dir, 1);
    struct kvfs_writer w[2];
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(mixed_chunk(&w[i], 11 + (uint32_t)i), 0);
        CHECK_EQ(kvfs_store_put(s, w[i].buf, w[i].size, NULL, h[i], err, sizeof(err)), 0);
    }
    /* the object really mixes them, with a raw frame off 16-byte alignment */
    struct kvfs_obj_info info;
    int fd = open_frames(s, h[0], O_RDONLY, &info);
    int n_raw = 0, n_zstd = 0, odd_raw = 0;
    for (int l = 0; l < NL; l++) {
        n_raw += info.frames[l].codec == KVFS_CODEC_RAW;
        n_zstd += info.frames[l].codec == KVFS_CODEC_ZSTD;
        odd_raw += info.frames[l].codec == KVFS_CODEC_RAW && info.frames[l].offset % 16;
    }
    CHECK(n_raw > 0 && n_zstd > 0 && odd_raw > 0);
    kvfs_obj_info_free(&info);
    close(fd);
    int dio = direct_ok(dir);
    struct kvfs_loader_opts modes[2] = {{.direct_io = 1}, {.direct_io = -1}};
    for (int m = 0; m < 2; m++) {
        const char *hp[2] = {h[0], h[1]};
        struct kvfs_loader *ld;
        CHECK_EQ(kvfs_loader_open(s, hp, 2, &modes[m], &ld, err, sizeof(err)), 0);
        CHECK_EQ(kvfs_loader_start(ld, 0), 0);
        for (int l = 0; l < NL; l++) {
            const void *data[2];
            CHECK_EQ(kvfs_loader_wait(ld, l, data, err, sizeof(err)), 0);
            for (int i = 0; i < 2; i++) {
                CHECK((uintptr_t)data[i] % 16 == 0);
                CHECK(!memcmp(data[i], w[i].buf + kvfs_layer_offset(&w[i].hdr, (uint32_t)l),
                              kvfs_layer_bytes(&w[i].hdr, (uint32_t)l)));
            }
        }
        struct kvfs_loader_stats ls;
        kvfs_loader_get_stats(ld, &ls);
        CHECK_EQ(ls.n_direct, m == 0 ? 2 * dio : 0);
        kvfs_loader_close(ld);
    }
    for (int i = 0; i < 2; i++)
        kvfs_writer_free(&w[i]);
    kvfs_store_close(s);
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK_EQ(system(cmd), 0);
}

/* a fake page-locking hook (a GPU backend's host_register) that keeps the
 * ranges it locked */
struct locked_range {
    void *p;
    size_t n;
};
static struct locked_range locked[64];
static int n_locked, n_pins, n_unpins;

static int in_locked(const void *q, size_t n);

static int fake_pin(void *arg, void *p, size_t n)
{
    CHECK(arg == &n_pins && n_locked < 64);
    CHECK(!in_locked(p, 1)); /* never twice (CUDA refuses memory already registered) */
    locked[n_locked++] = (struct locked_range){p, n};
    n_pins++;
    return 0;
}

static void fake_unpin(void *arg, void *p)
{
    CHECK(arg == &n_unpins);
    int at = -1;
    for (int i = 0; i < n_locked; i++)
        if (locked[i].p == p)
            at = i;
    CHECK(at >= 0); /* only what was locked is unlocked, once */
    if (at >= 0)
        locked[at] = locked[--n_locked];
    n_unpins++;
}

static int in_locked(const void *q, size_t n)
{
    for (int i = 0; i < n_locked; i++)
        if ((const char *)q >= (const char *)locked[i].p && (const char *)q + n <= (const char *)locked[i].p + locked[i].n)
            return 1;
    return 0;
}

/* with a page-locking hook set, every layer is handed out from a locked
 * buffer (decoded layers, O_DIRECT slots), buffered and O_DIRECT; the next
 * loader reuses the kept buffers locked as they are; turning the hook off
 * unlocks every kept buffer, and each exactly once */
static void test_pinning(void)
{
    char dir[] = "/tmp/kvfs-loader-pin.XXXXXX", err[256], h[2][KVFS_HASH_HEX_LEN + 1];
    CHECK(mkdtemp(dir) != NULL);
    struct kvfs_store *s = open_store(dir, 1);
    struct kvfs_writer w[2];
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(mixed_chunk(&w[i], 31 + (uint32_t)i), 0);
        CHECK_EQ(kvfs_store_put(s, w[i].buf, w[i].size, NULL, h[i], err, sizeof(err)), 0);
    }
    kvfs_loader_trim(); /* no kept buffers from the tests before */
    kvfs_loader_set_pin(fake_pin, &n_pins, fake_unpin, &n_unpins);
    struct kvfs_loader_opts modes[2] = {{.direct_io = 1}, {.direct_io = -1}};
    int pins_after[2] = {0, 0}, dio = direct_ok(dir);
    for (int round = 0; round < 2; round++) {
        for (int m = 0; m < 2; m++) {
            const char *hp[2] = {h[0], h[1]};
            struct kvfs_loader *ld;
            CHECK_EQ(kvfs_loader_open(s, hp, 2, &modes[m], &ld, err, sizeof(err)), 0);
            CHECK_EQ(kvfs_loader_start(ld, 0), 0);
            for (int l = 0; l < NL; l++) {
                const void *data[2];
                CHECK_EQ(kvfs_loader_wait(ld, l, data, err, sizeof(err)), 0);
                for (int i = 0; i < 2; i++) {
                    size_t n = kvfs_layer_bytes(&w[i].hdr, (uint32_t)l);
                    CHECK(in_locked(data[i], n));
                    CHECK(!memcmp(data[i], w[i].buf + kvfs_layer_offset(&w[i].hdr, (uint32_t)l), n));
                }
            }
            struct kvfs_loader_stats ls;
            kvfs_loader_get_stats(ld, &ls);
            CHECK_EQ(ls.n_direct, m == 0 ? 2 * dio : 0);
            kvfs_loader_close(ld);
        }
        pins_after[round] = n_pins;
    }
    CHECK(pins_after[0] >= 2);
    CHECK_EQ(pins_after[1], pins_after[0]); /* the second round's buffers were the first's, still locked */
    kvfs_loader_set_pin(NULL, NULL, NULL, NULL);
    CHECK_EQ(n_locked, 0);
    CHECK_EQ(n_unpins, n_pins);
    for (int i = 0; i < 2; i++)
        kvfs_writer_free(&w[i]);
    kvfs_store_close(s);
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK_EQ(system(cmd), 0);
}

static void test_controller(void)
{
    /* loading done (RAM tier): the floor */
    struct kvfs_ratio_inputs in = {.bytes_done = 100, .bytes_total = 100, .load_elapsed_s = 0.01,
                                   .sec_per_row_layer = 1e-5, .n_sparse = 28, .n_rows = 3000, .n_suffix = 10,
                                   .min_ratio = 0.15f};
    CHECK(kvfs_auto_ratio(&in, NULL) == 0.15f);
    /* 10% loaded in 1 s: 9 s left; recompute of all rows takes 0.84 s: ratio 1 */
    in.bytes_done = 10;
    in.load_elapsed_s = 1.0;
    double left;
    CHECK(kvfs_auto_ratio(&in, &left) == 1.0f);
    CHECK(left > 8.9 && left < 9.1);
    /* in between: 0.3 s left -> (0.3 / (1e-5 * 28) - 10) / 3000 ~ 0.354 */
    in.bytes_done = 90;
    in.load_elapsed_s = 2.7;
    float r = kvfs_auto_ratio(&in, NULL);
    CHECK(r > 0.33f && r < 0.38f);
}

/* the controller inside a real blend: slow tier -> higher ratio, fast -> floor */
static void test_auto_blend(void)
{
    char path[64], err[256], dir[] = "/tmp/kvfs-loader-blend.XXXXXX";
    snprintf(path, sizeof(path), "/tmp/kvfs-loader-model.%d.gguf", (int)getpid());
    struct kvfs_synth_model_opts mo = {"llama", 8, 64, 4, 2, 128, 10000.0f, 7, 0, 0, 0, 0, NULL, 0.0f, 0, 0};
    struct kvfs_model *m;
    CHECK_EQ(kvfs_synth_model_write(path, &mo), 0);
    CHECK_EQ(kvfs_model_load(path, "cpu", 2, &m, err, sizeof(err)), 0);
    unlink(path);
    CHECK(mkdtemp(dir) != NULL);
    struct kvfs_store *s = open_store(dir, 0);
    enum { NC = 3, LEN = 64 };
    char hashes[NC][KVFS_HASH_HEX_LEN + 1];
    const char *hp[NC];
    for (int i = 0; i < NC; i++) {
        int32_t toks[LEN];
        for (int j = 0; j < LEN; j++)
            toks[j] = (int32_t)((i * 31 + j * 7 + 3) % 256);
        struct kvfs_kv_cache c;
        struct kvfs_writer w;
        CHECK_EQ(kvfs_kv_cache_init(m, LEN, &c), 0);
        CHECK_EQ(kvfs_forward(m, &c, toks, LEN, 0, NULL), 0);
        CHECK_EQ(kvfs_kv_cache_to_chunk(m, &c, 0, LEN, toks, KVFS_DTYPE_F16, &w), 0);
        CHECK_EQ(kvfs_store_put(s, w.buf, w.size, NULL, hashes[i], err, sizeof(err)), 0);
        hp[i] = hashes[i];
        kvfs_kv_cache_free(m, &c);
        kvfs_writer_free(&w);
    }
    int32_t suffix[4] = {65, 66, 67, 68};
    float picked[2];
    for (int slow = 0; slow <= 1; slow++) {
        struct kvfs_loader_opts lo = {.throttle_bps = slow ? 200u << 10 : 0};
        struct kvfs_loader *ld;
        CHECK_EQ(kvfs_loader_open(s, hp, NC, &lo, &ld, err, sizeof(err)), 0);
        struct kvfs_blend_opts bo;
        kvfs_blend_opts_init(&bo, 0.15f);
        bo.auto_ratio = 1;
        bo.min_ratio = 0.2f;
        struct kvfs_kv_cache c;
        int32_t *tok;
        struct kvfs_blend_stats st;
        CHECK_EQ(kvfs_blend_stream(m, ld, suffix, 4, &bo, &c, &tok, NULL, &st, err, sizeof(err)), 0);
        picked[slow] = st.ratio;
        printf("%s tier: ratio %.3f, loading %.3f s, waited %.3f s, computing %.3f s\n", slow ? "slow" : "fast",
               (double)st.ratio, st.load_s, st.wait_s, st.compute_s);
        kvfs_kv_cache_free(m, &c);
        free(tok);
        kvfs_loader_close(ld);
    }
    CHECK(picked[0] == 0.2f);
    CHECK(picked[1] > 0.5f);

    /* checksum failure mid-stream: the blend fails cleanly */
    corrupt_layer(s, hashes[1], 5, 0);
    struct kvfs_loader *ld;
    CHECK_EQ(kvfs_loader_open(s, hp, NC, NULL, &ld, err, sizeof(err)), 0);
    struct kvfs_blend_opts bo;
    kvfs_blend_opts_init(&bo, 0.15f);
    struct kvfs_kv_cache c;
    int32_t *tok = NULL;
    CHECK_EQ(kvfs_blend_stream(m, ld, suffix, 4, &bo, &c, &tok, NULL, NULL, err, sizeof(err)), -EBADMSG);
    CHECK(strstr(err, "layer 5") != NULL);
    CHECK(tok == NULL && c.k == NULL);
    kvfs_loader_close(ld);
    kvfs_store_close(s);
    kvfs_model_free(m);
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK_EQ(system(cmd), 0);
}

int main(void)
{
    test_controller();
    test_streams();
    test_mixed_frames();
    test_pinning();
    test_auto_blend();
    CHECK_DONE();
}
