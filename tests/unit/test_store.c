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
#include <sys/wait.h>
#include <unistd.h>

#include "bigbuf.h"
#include "check.h"
#include "image.h"
#include "object.h"
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

/* page-locking hooks that record what is pinned (a GPU backend's
 * host_register in the daemon) */
static void *pinned[64];
static int n_pinned, pin_calls, fail_pins;
static int rec_pin(void *arg, void *p, size_t n)
{
    (void)arg, (void)n;
    pin_calls++;
    if (fail_pins || n_pinned == 64)
        return -ENOMEM;
    for (int i = 0; i < n_pinned; i++)
        if (pinned[i] == p)
            return -EEXIST; /* twice: a bug */
    pinned[n_pinned++] = p;
    return 0;
}
static void rec_unpin(void *arg, void *p)
{
    CHECK(arg == (void *)rec_unpin);
    for (int i = 0; i < n_pinned; i++)
        if (pinned[i] == p) {
            pinned[i] = pinned[--n_pinned];
            return;
        }
    CHECK(!"unpinned what was not pinned");
}
static int is_pinned(const void *p)
{
    for (int i = 0; i < n_pinned; i++)
        if (pinned[i] == p)
            return 1;
    return 0;
}

/* The RAM tier page-locked: the entries cached when the hooks are set and
 * those that enter later are pinned, each once; an evicted or removed one
 * is unpinned when its last reader lets go; a failed pin leaves the entry
 * working; hooks cleared or the store closed: nothing stays pinned. */
static void test_ram_pinning(void)
{
    struct kvfs_store *s = open_store(0, 200000, 1);
    CHECK(s != NULL);
    char h[4][65];
    struct kvfs_chunk_ref *ref, *held;
    CHECK_EQ(put_synth(s, 300, 1, h[0]), 0);
    CHECK_EQ(kvfs_store_get(s, h[0], &ref), 0); /* in the RAM tier now */
    kvfs_chunk_release(ref);
    kvfs_store_set_pin(s, rec_pin, NULL, rec_unpin, (void *)rec_unpin);
    CHECK_EQ(n_pinned, 1);
    CHECK_EQ(kvfs_store_get(s, h[0], &ref), 0);
    CHECK(is_pinned(kvfs_chunk_data(ref)));
    kvfs_chunk_release(ref);
    CHECK_EQ(put_synth(s, 300, 2, h[1]), 0);
    CHECK_EQ(kvfs_store_get(s, h[1], &held), 0); /* decoded, entered the tier pinned */
    CHECK(is_pinned(kvfs_chunk_data(held)));
    CHECK_EQ(n_pinned, 2);
    CHECK(same_as_synth(s, h[1], 300, 2));
    /* a chunk that does not fit beside them evicts: the held one stays
     * pinned until released */
    CHECK_EQ(put_synth(s, 700, 3, h[2]), 0);
    CHECK_EQ(kvfs_store_get(s, h[2], &ref), 0);
    CHECK(is_pinned(kvfs_chunk_data(ref)));
    kvfs_chunk_release(ref);
    CHECK(is_pinned(kvfs_chunk_data(held))); /* evicted or not, its reader holds it */
    const void *held_data = kvfs_chunk_data(held);
    CHECK_EQ(kvfs_store_remove(s, h[1]), 0);
    kvfs_chunk_release(held);
    CHECK(!is_pinned(held_data));
    /* a pin that fails: the chunk reads as ever, and is never unpinned */
    fail_pins = 1;
    int calls = pin_calls;
    CHECK_EQ(put_synth(s, 100, 4, h[3]), 0);
    CHECK(same_as_synth(s, h[3], 100, 4));
    CHECK(pin_calls > calls);
    CHECK_EQ(kvfs_store_get(s, h[3], &ref), 0);
    CHECK(!is_pinned(kvfs_chunk_data(ref)));
    kvfs_chunk_release(ref);
    fail_pins = 0;
    kvfs_store_set_pin(s, NULL, NULL, NULL, NULL);
    CHECK_EQ(n_pinned, 0);
    kvfs_store_set_pin(s, rec_pin, NULL, rec_unpin, (void *)rec_unpin);
    CHECK(n_pinned > 0); /* what is cached, pinned again */
    kvfs_store_close(s);
    CHECK_EQ(n_pinned, 0);
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

/* ---- blend results (store.h, "Blend results") ---- */

/* a malloc'ed copy of a synthetic image (put_result takes ownership) */
static uint8_t *result_img(uint32_t tokens, uint32_t seed, size_t *len)
{
    struct kvfs_writer w;
    if (synth_chunk(&w, 4, tokens, seed, KVFS_DTYPE_F16) != 0)
        return NULL;
    uint8_t *img = malloc(w.size);
    if (img)
        memcpy(img, w.buf, w.size);
    *len = w.size;
    kvfs_writer_free(&w);
    return img;
}

/* ref holds exactly the image of synth(tokens, seed) */
static int ref_is(struct kvfs_chunk_ref *ref, uint32_t tokens, uint32_t seed)
{
    struct kvfs_writer w;
    if (!ref || synth_chunk(&w, 4, tokens, seed, KVFS_DTYPE_F16) != 0)
        return 0;
    uint8_t tail[64];
    int ok = kvfs_chunk_size(ref) == w.size && !memcmp(kvfs_chunk_data(ref), w.buf, w.size) &&
             kvfs_chunk_pread(ref, tail, sizeof(tail), w.size - 32) == 32 && !memcmp(tail, w.buf + w.size - 32, 32);
    kvfs_writer_free(&w);
    return ok;
}

/* get_result(key) gives exactly synth(tokens, seed) */
static int result_is(struct kvfs_store *s, const char *key, uint32_t tokens, uint32_t seed)
{
    struct kvfs_chunk_ref *ref = NULL;
    if (kvfs_store_get_result(s, key, &ref) != 0)
        return 0;
    int ok = ref_is(ref, tokens, seed);
    kvfs_chunk_release(ref);
    return ok;
}

static int put_result(struct kvfs_store *s, const char *key, uint32_t tokens, uint32_t seed, int *kept,
                      struct kvfs_chunk_ref **ref)
{
    size_t len = 0;
    uint8_t *img = result_img(tokens, seed, &len);
    char err[256] = "";
    if (!img)
        return -ENOMEM;
    int rc = kvfs_store_put_result(s, key, img, len, ref, kept, err, sizeof(err));
    if (rc)
        fprintf(stderr, "put_result %.8s: %d %s\n", key, rc, err);
    return rc;
}

static int count_cb(const struct kvfs_chunk_info *info, void *ctx)
{
    (void)info;
    (*(int *)ctx)++;
    return 0;
}

/* files in DIR/results (-1 if it cannot be read) */
static int result_files(const char *d)
{
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "exit $(ls -A %s/results | wc -l)", d);
    int st = system(cmd);
    return st < 0 ? -1 : WEXITSTATUS(st);
}

static struct kvfs_store *open_results_store(const char *d, uint64_t ram, uint64_t result_cap)
{
    struct kvfs_store_opts o = {.dir = d, .ram_bytes = ram, .result_capacity = result_cap};
    struct kvfs_store *s = NULL;
    char err[256];
    if (kvfs_store_open(&o, &s, err, sizeof(err)) != 0)
        fprintf(stderr, "open %s: %s\n", d, err);
    return s;
}

static void test_results(void)
{
    char d[256], cmd[600], k1[65], k2[65], k3[65], k4[65], k5[65], unknown[65];
    snprintf(d, sizeof(d), "/tmp/kvfs-test-results.%d", (int)getpid());
    snprintf(cmd, sizeof(cmd), "rm -rf %s", d);
    system(cmd);
    snprintf(k1, sizeof(k1), "%064x", 0x1a1);
    snprintf(k2, sizeof(k2), "%064x", 0x2b2);
    snprintf(k3, sizeof(k3), "%064x", 0x3c3);
    snprintf(k4, sizeof(k4), "%064x", 0x4d4);
    snprintf(k5, sizeof(k5), "%064x", 0x5e5);
    snprintf(unknown, sizeof(unknown), "%064x", 0xbad);
    int kept = -1, pinned = -1, in_ram = -1;
    struct kvfs_chunk_ref *ref = NULL;

    /* round trip, with a RAM tier and without one (read back from disk) */
    for (int ram = 0; ram <= 1; ram++) {
        struct kvfs_store *s = open_results_store(d, ram ? 4 << 20 : 0, 0);
        CHECK(s != NULL);
        if (!s)
            return;
        CHECK_EQ(put_result(s, k1, 100, 501, &kept, &ref), 0);
        CHECK_EQ(kept, 1);
        CHECK(ref_is(ref, 100, 501)); /* the put's own handle */
        kvfs_chunk_release(ref);
        ref = NULL;
        CHECK_EQ(kvfs_store_has_result(s, k1, &pinned, &in_ram), 1);
        CHECK_EQ(pinned, 0);
        CHECK_EQ(in_ram, ram);
        CHECK(result_is(s, k1, 100, 501));
        CHECK(result_is(s, k1, 100, 501)); /* twice: from RAM, or from disk again */
        CHECK_EQ(result_files(d), 1);
        /* a put without a handle, and the same key again (kept, a no-op) */
        CHECK_EQ(put_result(s, k2, 60, 502, &kept, NULL), 0);
        CHECK_EQ(kept, 1);
        CHECK_EQ(put_result(s, k2, 60, 502, &kept, NULL), 0);
        CHECK_EQ(kept, 1);
        CHECK(result_is(s, k2, 60, 502));
        CHECK_EQ(result_files(d), 2);
        /* unknown key, bad key, bad image */
        ref = (struct kvfs_chunk_ref *)1;
        CHECK_EQ(kvfs_store_get_result(s, unknown, &ref), -ENOENT);
        CHECK_EQ(kvfs_store_has_result(s, unknown, NULL, NULL), 0);
        CHECK_EQ(kvfs_store_pin_result(s, unknown, 1), -ENOENT);
        CHECK_EQ(kvfs_store_remove_result(s, unknown), -ENOENT);
        CHECK_EQ(kvfs_store_get_result(s, "not-a-key", &ref), -EINVAL);
        size_t len;
        char err[256] = "";
        uint8_t *img = result_img(10, 503, &len);
        CHECK_EQ(kvfs_store_put_result(s, "ABC", img, len, &ref, &kept, err, sizeof(err)), -EINVAL);
        CHECK_EQ(kept, 0);
        img = result_img(10, 503, &len);
        img[len - 1] ^= 0x40; /* checksum mismatch */
        CHECK(kvfs_store_put_result(s, k3, img, len, &ref, &kept, err, sizeof(err)) < 0);
        CHECK(strstr(err, "invalid result") != NULL);
        CHECK_EQ(kvfs_store_has_result(s, k3, NULL, NULL), 0);
        ref = NULL;
        /* results are not chunks: neither listed nor counted */
        char h[65];
        CHECK_EQ(put_synth(s, 40, 504, h), 0);
        CHECK_EQ(kvfs_store_count(s), 1);
        int n = 0;
        CHECK_EQ(kvfs_store_list(s, count_cb, &n), 0);
        CHECK_EQ(n, 1);
        struct kvfs_chunk_info ci;
        CHECK_EQ(kvfs_store_stat(s, k1, &ci), -ENOENT);
        /* remove: gone from every tier and from disk; a held handle keeps its bytes */
        CHECK_EQ(kvfs_store_get_result(s, k1, &ref), 0);
        CHECK_EQ(kvfs_store_remove_result(s, k1), 0);
        CHECK_EQ(kvfs_store_has_result(s, k1, NULL, &in_ram), 0);
        CHECK_EQ(in_ram, 0);
        CHECK_EQ(kvfs_store_get_result(s, k1, &(struct kvfs_chunk_ref *){NULL}), -ENOENT);
        CHECK(ref_is(ref, 100, 501));
        kvfs_chunk_release(ref);
        ref = NULL;
        CHECK_EQ(kvfs_store_remove_result(s, k1), -ENOENT);
        CHECK_EQ(result_files(d), 1);
        /* reopened: no results (recipes live with a mount), DIR/results emptied */
        kvfs_store_close(s);
        CHECK_EQ(result_files(d), 1);
        s = open_results_store(d, ram ? 4 << 20 : 0, 0);
        CHECK(s != NULL);
        if (!s)
            return;
        CHECK_EQ(result_files(d), 0);
        CHECK_EQ(kvfs_store_has_result(s, k2, NULL, NULL), 0);
        CHECK_EQ(kvfs_store_get_result(s, k2, &ref), -ENOENT);
        CHECK_EQ(kvfs_store_count(s), 1); /* the chunk stays */
        kvfs_store_close(s);
        system(cmd);
    }

    /* LRU within result_capacity: room for two results of this size */
    struct kvfs_store *s = open_results_store(d, 0, 0);
    CHECK(s != NULL);
    if (!s)
        return;
    CHECK_EQ(put_result(s, k1, 100, 601, &kept, NULL), 0);
    char p[600];
    struct stat st;
    snprintf(p, sizeof(p), "%s/results/%s.kvo", d, k1);
    CHECK_EQ(stat(p, &st), 0);
    uint64_t one = (uint64_t)st.st_size;
    kvfs_store_close(s);
    for (int ram = 0; ram <= 1; ram++) {
        system(cmd);
        s = open_results_store(d, ram ? 4 << 20 : 0, one * 2 + one / 2);
        CHECK(s != NULL);
        if (!s)
            return;
        CHECK_EQ(put_result(s, k1, 100, 601, &kept, NULL), 0);
        CHECK_EQ(kept, 1);
        usleep(2000);
        CHECK_EQ(put_result(s, k2, 100, 602, &kept, NULL), 0);
        CHECK_EQ(kept, 1);
        usleep(2000);
        CHECK(result_is(s, k1, 100, 601)); /* k1 is now the more recently used */
        usleep(2000);
        CHECK_EQ(put_result(s, k3, 100, 603, &kept, NULL), 0); /* evicts k2 */
        CHECK_EQ(kept, 1);
        CHECK_EQ(kvfs_store_has_result(s, k2, NULL, &in_ram), 0);
        CHECK_EQ(in_ram, 0);
        CHECK_EQ(kvfs_store_get_result(s, k2, &ref), -ENOENT);
        CHECK(result_is(s, k1, 100, 601));
        CHECK(result_is(s, k3, 100, 603));
        CHECK_EQ(result_files(d), 2);
        usleep(2000);
        CHECK_EQ(put_result(s, k2, 100, 602, &kept, NULL), 0); /* back: evicts k1 (k3 was read last) */
        CHECK_EQ(kept, 1);
        CHECK_EQ(kvfs_store_has_result(s, k1, NULL, NULL), 0);
        CHECK(result_is(s, k2, 100, 602));
        CHECK(result_is(s, k3, 100, 603));
        char *json = NULL;
        CHECK_EQ(kvfs_store_stats_json(s, &json), 0);
        const char *res = json ? strstr(json, "\"results\"") : NULL;
        CHECK(res != NULL);
        CHECK(res && strstr(res, "\"count\": 2,") != NULL);
        CHECK(res && strstr(res, "\"evictions\": 2,") != NULL);
        CHECK(json && strstr(json, "\"evictions\": 0,") != NULL); /* no chunk was evicted */
        free(json);

        /* pinned results stay; a put that cannot fit is served, not kept */
        CHECK_EQ(kvfs_store_pin_result(s, k2, 1), 0);
        CHECK_EQ(kvfs_store_pin_result(s, k3, 1), 0);
        CHECK_EQ(kvfs_store_has_result(s, k2, &pinned, NULL), 1);
        CHECK_EQ(pinned, 1);
        usleep(2000);
        ref = NULL;
        CHECK_EQ(put_result(s, k4, 100, 604, &kept, &ref), 0);
        CHECK_EQ(kept, 0);
        CHECK(ref_is(ref, 100, 604)); /* usable although not kept */
        CHECK_EQ(kvfs_store_has_result(s, k4, NULL, &in_ram), 0);
        CHECK_EQ(in_ram, 0);
        CHECK_EQ(kvfs_store_get_result(s, k4, &(struct kvfs_chunk_ref *){NULL}), -ENOENT);
        CHECK(ref_is(ref, 100, 604)); /* still, after the failed lookup */
        kvfs_chunk_release(ref);
        ref = NULL;
        CHECK_EQ(put_result(s, k5, 100, 605, &kept, NULL), 0); /* without a handle: freed, no leak */
        CHECK_EQ(kept, 0);
        CHECK(result_is(s, k2, 100, 602));
        CHECK(result_is(s, k3, 100, 603));
        CHECK_EQ(result_files(d), 2);
        /* larger than result_capacity: served, not kept */
        CHECK_EQ(kvfs_store_pin_result(s, k3, 0), 0);
        CHECK_EQ(put_result(s, k5, 400, 606, &kept, &ref), 0);
        CHECK_EQ(kept, 0);
        CHECK(ref_is(ref, 400, 606));
        kvfs_chunk_release(ref);
        ref = NULL;
        CHECK(result_is(s, k3, 100, 603)); /* nothing was evicted for it */
        json = NULL;
        CHECK_EQ(kvfs_store_stats_json(s, &json), 0);
        res = json ? strstr(json, "\"results\"") : NULL;
        CHECK(res && strstr(res, "\"not_kept\": 3") != NULL);
        CHECK(res && strstr(res, "\"pinned\": 1,") != NULL);
        free(json);
        /* unpinned, k3 is evicted for the next one; pinned k2 stays */
        usleep(2000);
        CHECK_EQ(put_result(s, k4, 100, 604, &kept, NULL), 0);
        CHECK_EQ(kept, 1);
        CHECK_EQ(kvfs_store_has_result(s, k3, NULL, NULL), 0);
        CHECK(result_is(s, k2, 100, 602));
        CHECK(result_is(s, k4, 100, 604));
        /* pinned results go away by remove_result, and at close */
        CHECK_EQ(kvfs_store_remove_result(s, k2), 0);
        CHECK_EQ(kvfs_store_has_result(s, k2, NULL, NULL), 0);
        CHECK_EQ(result_files(d), 1);
        kvfs_store_close(s);
        s = open_results_store(d, ram ? 4 << 20 : 0, one * 2 + one / 2);
        CHECK(s != NULL);
        if (!s)
            return;
        CHECK_EQ(result_files(d), 0);
        CHECK_EQ(kvfs_store_has_result(s, k4, NULL, NULL), 0);
        kvfs_store_close(s);
    }
    system(cmd);
}

static void report(void *ctx, const char *line) { (void)ctx; fprintf(stderr, "fsck: %s\n", line); }

/* kvfs_obj_encode_parts: which layers are compressed (judged on samples of
 * layers over 64 KiB), raw frames written straight from the image, and the
 * parts making the same object as kvfs_obj_encode, which decodes back */
static void test_object_parts(void)
{
    struct kvfs_writer w;
    struct kvfs_header h;
    CHECK_EQ(synth_chunk(&w, 4, 4000, 9, KVFS_DTYPE_F16), 0); /* 6 random bits a byte: zstd saves ~25% */
    uint64_t lb = kvfs_layer_bytes(&w.hdr, 0);
    CHECK(lb > (64u << 10));
    uint64_t s = 77;
    uint8_t *l2 = kvfs_writer_layer(&w, 2), *l3 = kvfs_writer_layer(&w, 3);
    for (uint64_t i = 0; i < lb; i++) { /* layer 2 incompressible; layer 3's K too, not its V */
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        l2[i] = (uint8_t)(s >> 56);
        if (i < lb / 2)
            l3[i] = (uint8_t)(s >> 48);
    }
    CHECK_EQ(kvfs_writer_finish(&w), 0);
    CHECK_EQ(kvfs_header_parse(w.buf, w.size, &h, NULL, 0), 0);
    struct kvfs_obj_parts p;
    CHECK_EQ(kvfs_obj_encode_parts(w.buf, &h, 1, &p), 0);
    const uint8_t *table = p.owned + KVFS_OBJ_FIXED;
    uint32_t codec[4];
    for (int l = 0; l < 4; l++)
        memcpy(&codec[l], table + (size_t)KVFS_OBJ_ENTRY * l + 16, 4);
    CHECK_EQ(codec[0], KVFS_CODEC_ZSTD);
    CHECK_EQ(codec[1], KVFS_CODEC_ZSTD);
    CHECK_EQ(codec[2], KVFS_CODEC_RAW); /* its samples save nothing: not compressed at all */
    CHECK_EQ(codec[3], KVFS_CODEC_ZSTD); /* half of it saves enough */
    int from_image = 0;
    size_t sum = 0;
    for (int i = 0; i < p.n; i++) {
        sum += p.iov[i].iov_len;
        from_image |= (const uint8_t *)p.iov[i].iov_base == l2;
    }
    CHECK_EQ(sum, p.len);
    CHECK(from_image); /* the raw layer is written from the image, not a copy */
    uint8_t *obj = NULL, *img = NULL;
    size_t len = 0, img_len = 0;
    CHECK_EQ(kvfs_obj_encode(w.buf, &h, 1, &obj, &len), 0);
    CHECK_EQ(len, p.len);
    size_t at = 0;
    int same = 1;
    for (int i = 0; i < p.n; i++) {
        same &= !memcmp(obj + at, p.iov[i].iov_base, p.iov[i].iov_len);
        at += p.iov[i].iov_len;
    }
    CHECK(same);
    char path[64], why[128];
    snprintf(path, sizeof(path), "/tmp/kvfs-test-obj.%d", (int)getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    CHECK_EQ(write(fd, obj, len), (ssize_t)len);
    CHECK_EQ(kvfs_obj_decode_file(fd, len, &img, &img_len, why, sizeof(why)), 0);
    CHECK(img_len == w.size && !memcmp(img, w.buf, w.size));
    close(fd);
    unlink(path);
    kvfs_img_free(img);
    free(obj);
    kvfs_obj_parts_free(&p);
    kvfs_writer_free(&w);
}

/* A remote tier that is an object in memory (what a fetch would read):
 * its fetch stores it through the incoming API in two pieces, last first. */
struct fake_remote {
    const uint8_t *obj;
    size_t len;
    int fetches;
    const void *handed; /* the image the last fetch handed back */
};

static int fake_fetch(void *ctx, struct kvfs_store *s, const char *hash, struct kvfs_chunk_ref **ref)
{
    struct fake_remote *f = ctx;
    struct kvfs_store_incoming in;
    char err[256];
    f->fetches++;
    int rc = kvfs_store_incoming_open(s, hash, &in, err, sizeof(err));
    if (!rc && !(rc = kvfs_store_incoming_write(&in, f->obj + f->len / 2, f->len - f->len / 2, f->len / 2, err,
                                                sizeof(err))))
        rc = kvfs_store_incoming_write(&in, f->obj, f->len / 2, 0, err, sizeof(err));
    if (rc) {
        kvfs_store_incoming_abort(&in);
        return rc;
    }
    struct kvfs_chunk_ref *r = NULL;
    rc = kvfs_store_incoming_finish(&in, f->len, hash, &r, err, sizeof(err));
    f->handed = r ? kvfs_chunk_data(r) : NULL;
    if (ref)
        *ref = r;
    else
        kvfs_chunk_release(r);
    return rc;
}

/* kvfs_store_put_keep: the stored image stays in the RAM tier (no decode
 * for the next read) and is on disk all the same; without a RAM tier it is
 * freed.  Big buffers (bigbuf.c) come back to the next allocation. */
static void test_put_keep(void)
{
    char saved[sizeof(dir)], err[256], h[65];
    memcpy(saved, dir, sizeof(saved));
    snprintf(dir, sizeof(dir), "/tmp/kvfs-test-keep.%d", (int)getpid());
    for (int ram = 1; ram >= 0; ram--) {
        struct kvfs_store *s = open_store(0, ram ? 64u << 20 : 0, 1);
        CHECK(s != NULL);
        if (!s)
            break;
        struct kvfs_writer w;
        struct kvfs_chunk_info c;
        synth_chunk(&w, 4, 300 + (uint32_t)ram, 31, KVFS_DTYPE_F16);
        CHECK_EQ(kvfs_store_put_keep(s, &w.buf, w.size, h, err, sizeof(err)), 0);
        CHECK(w.buf == NULL); /* taken */
        CHECK_EQ(kvfs_store_stat(s, h, &c), 0);
        CHECK_EQ(c.in_ram, ram);
        CHECK(same_as_synth(s, h, 300 + (uint32_t)ram, 31));
        kvfs_store_close(s);
        s = open_store(0, 0, 1); /* what was stored: decoded from disk */
        CHECK(s && same_as_synth(s, h, 300 + (uint32_t)ram, 31));
        if (s)
            kvfs_store_close(s);
    }
    { /* a private read (a llama/ view's) decodes into the daemon's memory, shared images on or not */
        struct kvfs_store *s = open_store(0, 64u << 20, 1);
        struct kvfs_chunk_ref *ref;
        CHECK(s && put_synth(s, 300, 41, h) == 0);
        kvfs_img_set_shared(1);
        CHECK(s && kvfs_store_get_private(s, h, &ref) == 0);
        if (s && ref) {
            CHECK(kvfs_img_fd(kvfs_chunk_data(ref)) < 0);
            kvfs_chunk_release(ref);
        }
        CHECK(s && same_as_synth(s, h, 300, 41)); /* the RAM tier's copy */
        kvfs_img_set_shared(0);
        if (s)
            kvfs_store_close(s);
    }
    uint8_t *a, *b, local;
    size_t cap;
    CHECK_EQ(kvfs_big_alloc(KVFS_BIG_MIN + 1, 0, &a, &cap), 0);
    CHECK(cap >= KVFS_BIG_MIN + 1);
    memset(a, 7, KVFS_BIG_MIN + 1);
    CHECK_EQ(kvfs_big_release(a), 1);
    CHECK_EQ(kvfs_big_alloc(KVFS_BIG_MIN, 0, &b, NULL), 0);
    CHECK(b == a); /* the kept one, not fresh memory */
    kvfs_img_free(b); /* a writer's image freed as an image: kept again */
    CHECK_EQ(kvfs_big_alloc(2 * cap, 0, &b, NULL), 0);
    CHECK(b != a); /* too small: fresh */
    CHECK_EQ(kvfs_big_release(b), 1);
    kvfs_img_set_shared(1); /* a big image made shared (a blend result under passthrough): given back */
    CHECK_EQ(kvfs_big_alloc(KVFS_BIG_MIN, 0, &a, &cap), 0);
    memset(a, 5, KVFS_BIG_MIN);
    uint8_t *img = a;
    CHECK_EQ(kvfs_img_adopt(&img, KVFS_BIG_MIN), 0);
    CHECK(img != a && img[KVFS_BIG_MIN - 1] == 5);
    CHECK(kvfs_img_fd(img) >= 0);
    kvfs_img_free(img);
    kvfs_img_set_shared(0);
    CHECK_EQ(kvfs_big_alloc(KVFS_BIG_MIN, 0, &b, NULL), 0);
    CHECK(b == a); /* kept, not passed to free() */
    CHECK_EQ(kvfs_big_release(b), 1);
    CHECK_EQ(kvfs_big_release(&local), 0); /* not one of its buffers: untouched */
    CHECK_EQ(kvfs_big_release(NULL), 0);
    kvfs_big_trim();
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    system(cmd);
    memcpy(dir, saved, sizeof(saved));
}

/* kvfs_store_put_keep_async: the put returns before the object is written,
 * and yet every lookup after it finds the chunk (it waits for the write);
 * more puts than may wait at once queue up; the remote tier is told once
 * per stored chunk, from the writer, and its hook may look the chunk up; a
 * bad image is refused at once; a write that fails later (over capacity)
 * leaves no chunk and is counted; close writes what is still queued. */
struct stored_log {
    struct kvfs_store *s;
    int calls, held;
};

static void note_stored(void *ctx, const char *hash)
{
    struct stored_log *l = ctx;
    l->calls++; /* the writer thread alone calls it */
    l->held += kvfs_store_hold(l->s, hash, 1) == 0; /* as the remote tier's hook does */
}

static int async_put_synth(struct kvfs_store *s, uint32_t tokens, uint32_t seed, char hash[65], int *taken)
{
    struct kvfs_writer w;
    char err[256];
    synth_chunk(&w, 4, tokens, seed, KVFS_DTYPE_F16);
    int rc = kvfs_store_put_keep_async(s, &w.buf, w.size, hash, err, sizeof(err));
    *taken = w.buf == NULL;
    kvfs_writer_free(&w);
    return rc;
}

/* .kvfs/stats' "async_puts" object (queued, stored, failed) and ingest_errors */
static int async_stats(struct kvfs_store *s, unsigned *queued, unsigned *stored, unsigned *failed, unsigned *errors)
{
    char *json = NULL, *a, *e;
    int ok = kvfs_store_stats_json(s, &json) == 0 && (a = strstr(json, "\"async_puts\"")) &&
             (e = strstr(json, "\"ingest_errors\"")) &&
             sscanf(a, "\"async_puts\": {\"queued\": %u, \"stored\": %u, \"failed\": %u}", queued, stored, failed) == 3 &&
             sscanf(e, "\"ingest_errors\": %u", errors) == 1;
    free(json);
    return ok ? 0 : -1;
}

static void test_put_async(void)
{
    char saved[sizeof(dir)], h[8][65], err[256], cmd[600];
    unsigned queued, stored, failed, errors;
    int taken;
    memcpy(saved, dir, sizeof(saved));
    snprintf(dir, sizeof(dir), "/tmp/kvfs-test-async.%d", (int)getpid());
    setenv("KVFS_TEST_ASYNC_PUT_DELAY_MS", "200", 1); /* each write starts late: puts are seen queued */
    struct kvfs_store *s = open_store(0, 64u << 20, 1);
    CHECK(s != NULL);
    if (!s)
        goto out;
    struct stored_log log = {.s = s};
    struct kvfs_store_remote hooks = {.ctx = &log, .stored = note_stored};
    kvfs_store_set_remote(s, &hooks);
    CHECK_EQ(async_put_synth(s, 600, 50, h[0], &taken), 0);
    CHECK(taken);
    CHECK_EQ(async_stats(s, &queued, &stored, &failed, &errors), 0);
    CHECK(queued == 1 && stored == 0); /* returned before the write */
    for (uint32_t i = 1; i < 7; i++) /* more than may wait at once: the fifth on wait for room */
        CHECK_EQ(async_put_synth(s, 600 + i, 50 + i, h[i], &taken), 0);
    CHECK_EQ(async_stats(s, &queued, &stored, &failed, &errors), 0);
    CHECK(queued >= 1 && queued <= 4 && stored >= 3); /* never more than 4 waited */
    struct kvfs_chunk_info c;
    CHECK_EQ(kvfs_store_stat(s, h[6], &c), 0); /* the last one: found, the lookup waited for its write */
    CHECK_EQ(async_stats(s, &queued, &stored, &failed, &errors), 0);
    CHECK(queued == 0 && stored == 7);
    CHECK_EQ(log.calls, 7); /* told once each, before the lookups stopped waiting */
    CHECK_EQ(log.held, 7);
    int listed = 0;
    CHECK_EQ(kvfs_store_list(s, count_cb, &listed), 0);
    CHECK_EQ(listed, 7);
    for (uint32_t i = 0; i < 7; i++) {
        CHECK_EQ(kvfs_store_stat(s, h[i], &c), 0);
        CHECK_EQ(c.in_ram, 1); /* the RAM tier took the image */
        CHECK(same_as_synth(s, h[i], 600 + i, 50 + i));
    }
    CHECK_EQ(async_put_synth(s, 700, 70, h[7], &taken), 0); /* queued, then the same chunk again */
    CHECK_EQ(async_put_synth(s, 700, 70, h[7], &taken), 0);
    CHECK(taken);
    CHECK_EQ(kvfs_store_stat(s, h[7], &c), 0);
    kvfs_store_flush(s);
    CHECK_EQ(async_stats(s, &queued, &stored, &failed, &errors), 0);
    CHECK(queued == 0 && stored == 8 && failed == 0 && errors == 0); /* written once */
    { /* a bad image: refused now, left to the caller */
        struct kvfs_writer w;
        synth_chunk(&w, 4, 300, 3, KVFS_DTYPE_F16);
        w.buf[w.size - 1] ^= 1;
        CHECK(kvfs_store_put_keep_async(s, &w.buf, w.size, h[7], err, sizeof(err)) < 0);
        CHECK(w.buf != NULL);
        kvfs_writer_free(&w);
    }
    for (uint32_t i = 0; i < 3; i++) /* queued when the store closes: the close writes them */
        CHECK_EQ(async_put_synth(s, 800 + i, 60 + i, h[i], &taken), 0);
    CHECK_EQ(async_stats(s, &queued, &stored, &failed, &errors), 0);
    CHECK(queued >= 2);
    kvfs_store_close(s);
    s = open_store(0, 0, 1);
    CHECK(s != NULL);
    for (uint32_t i = 0; s && i < 3; i++)
        CHECK(same_as_synth(s, h[i], 800 + i, 60 + i));
    kvfs_store_close(s);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    system(cmd);
    s = open_store(4096, 0, 1); /* no chunk fits: the write fails after the put returned */
    CHECK(s != NULL);
    if (!s)
        goto out;
    CHECK_EQ(async_put_synth(s, 300, 5, h[0], &taken), 0);
    CHECK(taken);
    CHECK_EQ(kvfs_store_stat(s, h[0], &c), -ENOENT);
    CHECK_EQ(async_stats(s, &queued, &stored, &failed, &errors), 0);
    CHECK(queued == 0 && stored == 0 && failed == 1 && errors == 1);
    kvfs_store_close(s);
out:
    unsetenv("KVFS_TEST_ASYNC_PUT_DELAY_MS");
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    system(cmd);
    memcpy(dir, saved, sizeof(saved));
}

int main(void)
{
    snprintf(dir, sizeof(dir), "/tmp/kvfs-test-store.%d", (int)getpid());
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    system(cmd);

    /* shared images (FUSE passthrough): a chunk read from disk and then from
     * the RAM tier is a memfd holding the same bytes; removing the chunk and
     * releasing the ref leaves nothing behind; off again, heap images */
    {
        struct kvfs_store *s = open_store(0, 1 << 20, 1);
        CHECK(s != NULL);
        char h[65];
        CHECK_EQ(put_synth(s, 300, 9, h), 0);
        kvfs_img_set_shared(1);
        for (int pass = 0; pass < 2 && s; pass++) { /* decoded from disk, then the RAM tier's */
            struct kvfs_chunk_ref *ref;
            CHECK_EQ(kvfs_store_get(s, h, &ref), 0);
            int fd = kvfs_img_fd(kvfs_chunk_data(ref));
            CHECK(fd >= 0);
            CHECK(strcmp(kvfs_chunk_key(ref), h) == 0);
            uint64_t n = kvfs_chunk_size(ref);
            uint8_t *copy = malloc(n);
            CHECK(copy && pread(fd, copy, n, 0) == (ssize_t)n && !memcmp(copy, kvfs_chunk_data(ref), n));
            free(copy);
            if (pass == 1)
                CHECK_EQ(kvfs_store_remove(s, h), 0); /* the ref keeps its bytes */
            CHECK(same_as_synth(s, h, 300, 9) == (pass == 0));
            kvfs_chunk_release(ref);
        }
        kvfs_img_set_shared(0);
        uint8_t *img = NULL;
        CHECK_EQ(kvfs_img_alloc(4096, 4096, &img), 0);
        CHECK_EQ(kvfs_img_fd(img), -1);
        kvfs_img_free(img);
        kvfs_store_close(s);
    }

    test_ram_pinning();
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
        uint8_t *layer = malloc(kvfs_layer_bytes(&w.hdr, 0));
        CHECK_EQ(kvfs_store_read_layer(s, h1, 2, layer, kvfs_layer_bytes(&w.hdr, 0)), 0);
        CHECK(!memcmp(layer, kvfs_writer_layer(&w, 2), kvfs_layer_bytes(&w.hdr, 0)));
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

        /* the same object arriving in pieces, the last first (a remote
         * fetch's ranged reads): nothing is visible before finish, which
         * hands back the verified image; an abort, or a piece that does
         * not verify, leaves nothing */
        s = open_store(0, 0, 0); /* no RAM tier: the reader's image is its own */
        CHECK_EQ(kvfs_store_remove(s, h), 0);
        struct kvfs_store_incoming in;
        CHECK_EQ(kvfs_store_incoming_open(s, h, &in, err, sizeof(err)), 0);
        CHECK_EQ(kvfs_store_incoming_write(&in, obj + len / 2, len - len / 2, len / 2, err, sizeof(err)), 0);
        kvfs_store_incoming_abort(&in);
        CHECK_EQ(kvfs_store_incoming_open(s, h, &in, err, sizeof(err)), 0);
        CHECK_EQ(kvfs_store_incoming_write(&in, obj + len / 2, len - len / 2, len / 2, err, sizeof(err)), 0);
        obj[len - 10] ^= 0x55;
        CHECK_EQ(kvfs_store_incoming_write(&in, obj, len / 2, 0, err, sizeof(err)), 0);
        CHECK(kvfs_store_incoming_write(&in, obj + len - 10, 1, len - 10, err, sizeof(err)) == 0);
        obj[len - 10] ^= 0x55;
        struct kvfs_chunk_ref *ref = (struct kvfs_chunk_ref *)&in; /* must be cleared */
        CHECK(kvfs_store_incoming_finish(&in, len, h, &ref, err, sizeof(err)) < 0);
        CHECK(ref == NULL);
        CHECK_EQ(kvfs_store_count(s), 0);
        CHECK_EQ(kvfs_store_incoming_open(s, h, &in, err, sizeof(err)), 0);
        CHECK_EQ(kvfs_store_incoming_write(&in, obj + len / 2, len - len / 2, len / 2, err, sizeof(err)), 0);
        CHECK_EQ(kvfs_store_count(s), 0);
        CHECK_EQ(kvfs_store_incoming_write(&in, obj, len / 2, 0, err, sizeof(err)), 0);
        CHECK_EQ(kvfs_store_incoming_finish(&in, len, h, &ref, err, sizeof(err)), 0);
        CHECK(ref != NULL);
        CHECK_EQ(kvfs_store_count(s), 1);
        if (ref) {
            struct kvfs_chunk_ref *again;
            CHECK_EQ(kvfs_store_get(s, h, &again), 0); /* decoded from the stored copy */
            CHECK_EQ(kvfs_chunk_size(ref), kvfs_chunk_size(again));
            CHECK(memcmp(kvfs_chunk_data(ref), kvfs_chunk_data(again), kvfs_chunk_size(ref)) == 0);
            kvfs_chunk_release(again);
            kvfs_chunk_release(ref);
        }

        /* a lookup's fetch (no RAM tier): the open that follows is served
         * the image the fetch verified, not a second decode of the copy;
         * rm drops a parked image, and a miss fetches again */
        CHECK_EQ(kvfs_store_remove(s, h), 0);
        struct fake_remote fr = {.obj = obj, .len = len};
        struct kvfs_store_remote hooks = {.fetch = fake_fetch, .ctx = &fr};
        kvfs_store_set_remote(s, &hooks);
        struct kvfs_chunk_info li;
        CHECK_EQ(kvfs_store_lookup(s, h, &li), 0);
        CHECK_EQ(fr.fetches, 1);
        CHECK(fr.handed != NULL);
        struct kvfs_chunk_ref *opened = NULL;
        CHECK_EQ(kvfs_store_object_path(s, h, path, sizeof(path)), 0);
        CHECK_EQ(unlink(path), 0); /* a decode of the stored copy would fail now */
        CHECK_EQ(kvfs_store_get(s, h, &opened), 0);
        CHECK(opened && kvfs_chunk_data(opened) == fr.handed);
        kvfs_chunk_release(opened);
        CHECK_EQ(kvfs_store_remove(s, h), 0);
        CHECK_EQ(kvfs_store_lookup(s, h, &li), 0);
        CHECK_EQ(fr.fetches, 2);
        CHECK_EQ(kvfs_store_remove(s, h), 0); /* its parked image goes with it */
        CHECK_EQ(kvfs_store_get(s, h, &opened), 0); /* a miss: fetched by the open itself */
        CHECK_EQ(fr.fetches, 3);
        CHECK(opened && kvfs_chunk_data(opened) == fr.handed);
        kvfs_chunk_release(opened);
        kvfs_store_set_remote(s, NULL);
        kvfs_store_close(s);
        snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A %s/tmp)\"", dir);
        CHECK_EQ(system(cmd), 0); /* no temporary file left */
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        system(cmd);
        memcpy(dir, saved, sizeof(saved));
    }

    test_results();
    test_object_parts();
    test_put_keep();
    test_put_async();

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
