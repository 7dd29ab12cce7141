/* test_libkvfs.c - libkvfs (lib/kvfs.h) against files written by the
 * internal writer: header fields, K/V views that point into the mapping and
 * hold what was written, bad files refused with the right errno, and the
 * blend wrappers' errors without a mount. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "kvformat.h"
#include "kvfs.h"
#include "kvquant.h"
#include "synth_chunk.h"

static char dir[] = "/tmp/test_libkvfs.XXXXXX";

static const char *path_of(const char *name)
{
    static char p[4][256];
    static int i;
    i = (i + 1) % 4;
    snprintf(p[i], sizeof(p[i]), "%s/%s", dir, name);
    return p[i];
}

static int write_file(const char *path, const void *buf, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -errno;
    size_t n = fwrite(buf, 1, len, f);
    return fclose(f) == 0 && n == len ? 0 : -EIO;
}

/* Is [p, p+len) inside a mapping of the file NAME (/proc/self/maps)? */
static int mapped_from(const void *p, size_t len, const char *name)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[1024];
    int found = 0;
    while (f && !found && fgets(line, sizeof(line), f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && strstr(line, name))
            found = (uintptr_t)p >= lo && (uintptr_t)p + len <= hi;
    }
    if (f)
        fclose(f);
    return found;
}

/* open PATH, expect rc; the reason must mention WHY when given */
static void expect_open(const char *path, unsigned flags, int rc, const char *why)
{
    struct libkvfs_file *f = (struct libkvfs_file *)1;
    char err[256] = "";
    CHECK_EQ(libkvfs_open(path, flags, &f, err, sizeof(err)), rc);
    CHECK(f == NULL);
    if (why && !strstr(err, why))
        fprintf(stderr, "reason \"%s\" lacks \"%s\"\n", err, why), check_failures++;
}

/* an f32 chunk whose values say where they are: K = t*1000 + h*100 + d, V = -K */
static int known_chunk(struct kvfs_writer *w, uint32_t pos0, uint32_t flags)
{
    struct kvfs_fingerprint fp = {.n_layer = 3, .n_kv_head = 2, .head_dim = 4, .rope_type = KVFS_ROPE_NORM,
                                  .rope_theta = 500000.0f, .rope_dim = 4, .n_head = 6, .n_embd = 24};
    memcpy(fp.arch, "qwen2", 6);
    memset(fp.model_id, 0x33, 32);
    uint32_t ids[5] = {11, 22, 33, 44, 55};
    int rc = kvfs_writer_init(w, &fp, KVFS_DTYPE_F32, flags, pos0, 5, ids);
    if (rc)
        return rc;
    for (uint32_t l = 0; l < 3; l++) {
        float *k = kvfs_writer_layer(w, l), *v = k + 5 * 2 * 4;
        for (uint32_t t = 0; t < 5; t++)
            for (uint32_t h = 0; h < 2; h++)
                for (uint32_t d = 0; d < 4; d++) {
                    float x = (float)(l * 10000 + t * 1000 + h * 100 + d);
                    k[(t * 2 + h) * 4 + d] = x;
                    v[(t * 2 + h) * 4 + d] = -x;
                }
    }
    return kvfs_writer_finish(w);
}

static void test_fields_and_views(void)
{
    struct kvfs_writer w;
    CHECK_EQ(synth_chunk(&w, 4, 37, 7, KVFS_DTYPE_F16), 0);
    CHECK_EQ(write_file(path_of("a.kv"), w.buf, w.size), 0);
    struct libkvfs_file *f;
    char err[256] = "";
    CHECK_EQ(libkvfs_open(path_of("a.kv"), 0, &f, err, sizeof(err)), 0);
    if (!f) {
        fprintf(stderr, "open: %s\n", err);
        check_failures++;
        kvfs_writer_free(&w);
        return;
    }
    const struct libkvfs_info *in = libkvfs_info(f);
    CHECK_EQ(in->version, 1);
    CHECK_EQ(in->n_tokens, 37);
    CHECK_EQ(in->pos0, 0);
    CHECK_EQ(in->n_layer, 4);
    CHECK_EQ(in->n_kv_head, 2);
    CHECK_EQ(in->head_dim, 8);
    CHECK_EQ(in->n_head, 4);
    CHECK_EQ(in->n_embd, 32);
    CHECK_EQ(in->dtype, LIBKVFS_DTYPE_F16);
    CHECK_EQ(in->elem_size, 2);
    CHECK_EQ(in->flags, LIBKVFS_FLAG_KEYS_ROPED);
    CHECK_EQ(in->rope_type, LIBKVFS_ROPE_NEOX);
    CHECK(in->rope_theta == 10000.0f);
    CHECK(strcmp(in->arch, "llama") == 0);
    CHECK(strcmp(libkvfs_dtype_name(in->dtype), "f16") == 0);
    CHECK_EQ(in->file_size, w.size);
    CHECK_EQ(in->header_size, w.hdr.header_size);
    CHECK_EQ(in->layer_bytes, kvfs_layer_bytes(&w.hdr, 0));
    CHECK_EQ(in->layer_stride, kvfs_layer_offset(&w.hdr, 1) - w.hdr.header_size);
    for (uint32_t i = 0; i < 37; i++)
        CHECK_EQ(in->tokens[i], kvfs_header_token(&w.hdr, i));
    uint8_t digest[32];
    char hex[65], model[17];
    kvfs_content_hash(&w.hdr, digest);
    kvfs_hash_to_hex(digest, hex);
    kvfs_fingerprint_id(&w.hdr.fp, model);
    CHECK(strcmp(in->hash, hex) == 0);
    CHECK(strcmp(in->model, model) == 0);
    CHECK(memcmp(in->model_id, w.hdr.fp.model_id, 32) == 0);
    CHECK(in->salt == NULL);

    /* views: inside the mapping, at the format's offsets, the bytes written */
    size_t len;
    const uint8_t *base = libkvfs_data(f, &len);
    CHECK_EQ(len, w.size);
    CHECK(mapped_from(base, len, path_of("a.kv")));
    CHECK((const uint8_t *)in->tokens == base + KVFS_FIXED_HEADER_SIZE);
    for (uint32_t l = 0; l < 4; l++) {
        struct libkvfs_view k, v;
        CHECK_EQ(libkvfs_layer(f, l, &k, &v), 0);
        uint64_t off = kvfs_layer_offset(&w.hdr, l), half = kvfs_layer_bytes(&w.hdr, 0) / 2;
        CHECK(k.data == base + off);
        CHECK(v.data == base + off + half);
        CHECK_EQ(k.bytes, half);
        CHECK_EQ(v.bytes, half);
        CHECK_EQ(k.n_tokens, 37);
        CHECK_EQ(k.n_kv_head, 2);
        CHECK_EQ(v.head_dim, 8);
        CHECK_EQ(v.dtype, LIBKVFS_DTYPE_F16);
        CHECK(memcmp(k.data, w.buf + off, half) == 0);
        CHECK(memcmp(v.data, w.buf + off + half, half) == 0);
        CHECK_EQ(libkvfs_verify_layer(f, l), 0);
    }
    struct libkvfs_view k;
    CHECK_EQ(libkvfs_layer(f, 4, &k, NULL), -ERANGE);
    CHECK_EQ(libkvfs_verify_layer(f, 4), -ERANGE);
    libkvfs_close(f);
    kvfs_writer_free(&w);
}

/* a tenant's chunk: the salt in the mapping, in the hash; layers after it */
static void test_salted(void)
{
    struct kvfs_writer w, plain;
    uint8_t salt[32];
    CHECK_EQ(kvfs_salt_digest("tenant", 6, salt), 0);
    CHECK_EQ(synth_chunk_salted(&w, 4, 37, 7, KVFS_DTYPE_F16, salt), 0);
    CHECK_EQ(synth_chunk(&plain, 4, 37, 7, KVFS_DTYPE_F16), 0);
    CHECK_EQ(write_file(path_of("salted.kv"), w.buf, w.size), 0);
    struct libkvfs_file *f;
    char err[256] = "", hex[65], plain_hex[65];
    CHECK_EQ(libkvfs_open(path_of("salted.kv"), 0, &f, err, sizeof(err)), 0);
    if (!f) {
        fprintf(stderr, "open: %s\n", err);
        check_failures++;
        goto out;
    }
    const struct libkvfs_info *in = libkvfs_info(f);
    size_t len;
    const uint8_t *base = libkvfs_data(f, &len);
    CHECK_EQ(in->flags, LIBKVFS_FLAG_KEYS_ROPED | LIBKVFS_FLAG_SALTED);
    CHECK(in->salt == base + KVFS_FIXED_HEADER_SIZE + 4 * 37 + 24 * 4);
    CHECK(in->salt && memcmp(in->salt, salt, 32) == 0);
    uint8_t digest[32];
    kvfs_content_hash(&w.hdr, digest);
    kvfs_hash_to_hex(digest, hex);
    kvfs_content_hash(&plain.hdr, digest);
    kvfs_hash_to_hex(digest, plain_hex);
    CHECK(strcmp(in->hash, hex) == 0 && strcmp(in->hash, plain_hex) != 0);
    struct libkvfs_view k;
    CHECK_EQ(libkvfs_layer(f, 3, &k, NULL), 0);
    CHECK(memcmp(k.data, kvfs_writer_layer(&plain, 3), k.bytes) == 0); /* the same K/V as unsalted */
    libkvfs_close(f);
out:
    kvfs_writer_free(&w);
    kvfs_writer_free(&plain);
}

/* values read through the views at [t][h][d]; pos0 and BLENDED */
static void test_layout(void)
{
    struct kvfs_writer w;
    CHECK_EQ(known_chunk(&w, 7, KVFS_FLAG_KEYS_ROPED | KVFS_FLAG_BLENDED), 0);
    CHECK_EQ(write_file(path_of("b.kv"), w.buf, w.size), 0);
    kvfs_writer_free(&w);
    struct libkvfs_file *f;
    CHECK_EQ(libkvfs_open(path_of("b.kv"), 0, &f, NULL, 0), 0);
    if (!f)
        return;
    const struct libkvfs_info *in = libkvfs_info(f);
    CHECK_EQ(in->pos0, 7);
    CHECK_EQ(in->flags, LIBKVFS_FLAG_KEYS_ROPED | LIBKVFS_FLAG_BLENDED);
    CHECK_EQ(in->dtype, LIBKVFS_DTYPE_F32);
    CHECK(strcmp(in->arch, "qwen2") == 0);
    CHECK_EQ(in->tokens[4], 55);
    int bad = 0;
    for (uint32_t l = 0; l < 3; l++) {
        struct libkvfs_view k, v;
        CHECK_EQ(libkvfs_layer(f, l, &k, &v), 0);
        const float *kf = k.data, *vf = v.data;
        for (uint32_t t = 0; t < 5; t++)
            for (uint32_t h = 0; h < 2; h++)
                for (uint32_t d = 0; d < 4; d++) {
                    float x = (float)(l * 10000 + t * 1000 + h * 100 + d);
                    bad += kf[(t * k.n_kv_head + h) * k.head_dim + d] != x;
                    bad += vf[(t * v.n_kv_head + h) * v.head_dim + d] != -x;
                }
    }
    CHECK_EQ(bad, 0);
    libkvfs_close(f);
    /* FULL_PREFILL: a blend result prefilled in full; never without BLENDED */
    CHECK_EQ(known_chunk(&w, 0, KVFS_FLAG_KEYS_ROPED | KVFS_FLAG_BLENDED | KVFS_FLAG_FULL_PREFILL), 0);
    CHECK_EQ(write_file(path_of("full.kv"), w.buf, w.size), 0);
    kvfs_writer_free(&w);
    CHECK_EQ(libkvfs_open(path_of("full.kv"), 0, &f, NULL, 0), 0);
    if (f) {
        CHECK_EQ(libkvfs_info(f)->flags, LIBKVFS_FLAG_KEYS_ROPED | LIBKVFS_FLAG_BLENDED | LIBKVFS_FLAG_FULL_PREFILL);
        libkvfs_close(f);
    }
    CHECK_EQ(known_chunk(&w, 0, KVFS_FLAG_KEYS_ROPED | KVFS_FLAG_FULL_PREFILL), 0);
    CHECK_EQ(write_file(path_of("lone.kv"), w.buf, w.size), 0);
    kvfs_writer_free(&w);
    expect_open(path_of("lone.kv"), 0, -EINVAL, "FULL_PREFILL (0x4) without BLENDED");
}

/* LIBKVFS_FLAG_LAYER_SHAPES (gemma4): views at each layer's own shape, a
 * layer that stores no cache viewing its source's, layer_bytes 0 */
static void test_layer_shapes(void)
{
    struct kvfs_fingerprint fp = {.n_layer = 3, .n_kv_head = 2, .head_dim = 8, .rope_dim = 8, .rope_theta = 1e4f,
                                  .arch = "gemma4", .n_head = 4, .n_embd = 32};
    struct kvfs_layer_shape sh[3] = {{2, 4, 4, 0}, {1, 8, 8, 1}, {2, 4, 4, 0}};
    uint32_t tok[3] = {7, 8, 9};
    struct kvfs_writer w;
    CHECK_EQ(kvfs_writer_init_shaped(&w, &fp, KVFS_DTYPE_F32, KVFS_FLAG_KEYS_ROPED, 0, 3, tok, NULL, sh), 0);
    for (uint32_t l = 0; l < 2; l++) {
        float *x = kvfs_writer_layer(&w, l);
        for (int i = 0; i < 2 * 3 * 8; i++)
            x[i] = (float)(l * 100 + i);
    }
    CHECK_EQ(kvfs_writer_finish(&w), 0);
    CHECK_EQ(write_file(path_of("shaped.kv"), w.buf, w.size), 0);
    kvfs_writer_free(&w);
    struct libkvfs_file *f;
    CHECK_EQ(libkvfs_open(path_of("shaped.kv"), 0, &f, NULL, 0), 0);
    if (!f)
        return;
    const struct libkvfs_info *in = libkvfs_info(f);
    CHECK(in->flags & LIBKVFS_FLAG_LAYER_SHAPES);
    CHECK(in->layer_bytes == 0 && in->layer_stride == 0);
    struct libkvfs_layer_shape ls;
    CHECK_EQ(libkvfs_layer_shape(f, 2, &ls), 0);
    CHECK(ls.n_kv_head == 2 && ls.head_dim == 4 && ls.kv_source == 0);
    CHECK_EQ(libkvfs_layer_shape(f, 3, &ls), -ERANGE);
    struct libkvfs_view k0, v1, k2;
    CHECK_EQ(libkvfs_layer(f, 0, &k0, NULL), 0);
    CHECK_EQ(libkvfs_layer(f, 1, NULL, &v1), 0);
    CHECK_EQ(libkvfs_layer(f, 2, &k2, NULL), 0);
    CHECK(k0.n_kv_head == 2 && k0.head_dim == 4 && k0.bytes == 3 * 8 * 4);
    CHECK(v1.n_kv_head == 1 && v1.head_dim == 8 && ((const float *)v1.data)[0] == 100 + 24);
    CHECK(k2.data == k0.data); /* the source's cache */
    float k[24];
    CHECK_EQ(libkvfs_layer_f32(f, 2, k, NULL), 0);
    CHECK(k[5] == 5.0f);
    CHECK_EQ(libkvfs_verify_layer(f, 2), 0);
    libkvfs_close(f);
    unlink(path_of("shaped.kv"));
}

/* A quantized layer-shaped chunk (gemma4 as q4s): no view (as for any
 * quantized chunk), libkvfs_layer_f32 decoding each layer at its own width
 * as the codec does, a shared-KV layer its source's */
static void test_layer_shapes_quantized(void)
{
    enum { NT = 40 };
    struct kvfs_fingerprint fp = {.n_layer = 3, .n_kv_head = 2, .head_dim = 64, .rope_dim = 64, .rope_theta = 1e4f,
                                  .arch = "gemma4", .n_head = 4, .n_embd = 32};
    struct kvfs_layer_shape sh[3] = {{1, 64, 64, 0}, {2, 64, 64, 1}, {2, 64, 64, 1}};
    uint32_t tok[NT];
    static float k[NT * 128], v[NT * 128], kd[NT * 128], vd[NT * 128];
    for (uint32_t i = 0; i < NT; i++)
        tok[i] = i;
    for (int i = 0; i < NT * 128; i++)
        k[i] = (float)(i % 37) / 8.0f - 2.0f, v[i] = (float)(i % 29) / 4.0f - 3.0f;
    struct kvfs_writer w;
    CHECK_EQ(kvfs_writer_init_shaped(&w, &fp, KVFS_DTYPE_Q4S, KVFS_FLAG_KEYS_ROPED, 0, NT, tok, NULL, sh), 0);
    for (uint32_t l = 0; l < 2; l++)
        CHECK_EQ(kvfs_kvq_encode(KVFS_KVQ_Q4S, k, v, NT, sh[l].n_kv_head * 64, kvfs_writer_layer(&w, l)), 0);
    CHECK_EQ(kvfs_writer_finish(&w), 0);
    CHECK_EQ(write_file(path_of("shaped-q4s.kv"), w.buf, w.size), 0);
    kvfs_writer_free(&w);
    struct libkvfs_file *f;
    CHECK_EQ(libkvfs_open(path_of("shaped-q4s.kv"), 0, &f, NULL, 0), 0);
    if (!f)
        return;
    const struct libkvfs_info *in = libkvfs_info(f);
    CHECK(in->dtype == KVFS_DTYPE_Q4S && (in->flags & LIBKVFS_FLAG_LAYER_SHAPES) && in->layer_bytes == 0);
    /* q4s at a row of d values (kvfs(5)): the first row exact (4 d bytes), 2 key groups of 32 over the 39
     * rows after it (d blocks of 20 bytes each), a value block of 36 bytes per 64 channels of those rows;
     * 4220 bytes at d = 64 (layer 0), 8440 at 128 (layer 1), each padded to 4 KiB, after a 4 KiB header */
    const uint64_t at[3] = {4096, 4096 + 8192, 4096 + 8192}, size = 4096 + 8192 + 12288;
    CHECK_EQ(in->file_size, size);
    struct libkvfs_view kv;
    size_t len;
    const uint8_t *base = libkvfs_data(f, &len);
    CHECK_EQ(len, size);
    CHECK_EQ(libkvfs_layer(f, 0, &kv, NULL), -EOPNOTSUPP); /* no array to view, as for any quantized chunk */
    for (uint32_t l = 0; l < 3; l++) {
        uint32_t d = sh[l].n_kv_head * 64;
        static float want_k[NT * 128], want_v[NT * 128];
        CHECK_EQ(kvfs_kvq_decode(KVFS_KVQ_Q4S, base + at[l], NT, d, want_k, want_v), 0);
        CHECK_EQ(libkvfs_layer_f32(f, l, kd, vd), 0);
        CHECK(!memcmp(kd, want_k, sizeof(float) * NT * d) && !memcmp(vd, want_v, sizeof(float) * NT * d));
    }
    CHECK_EQ(libkvfs_verify_layer(f, 1), 0);
    libkvfs_close(f);
    unlink(path_of("shaped-q4s.kv"));
}

static void test_bad_files(void)
{
    struct kvfs_writer w;
    CHECK_EQ(synth_chunk(&w, 3, 20, 3, KVFS_DTYPE_BF16), 0);
    uint64_t layer1 = kvfs_layer_offset(&w.hdr, 1);
    uint8_t *bad = malloc(w.size);
    if (!bad)
        return;
    /* a flipped bit in layer 1 */
    memcpy(bad, w.buf, w.size);
    bad[layer1 + 5] ^= 0x10;
    CHECK_EQ(write_file(path_of("corrupt.kv"), bad, w.size), 0);
    expect_open(path_of("corrupt.kv"), 0, -EBADMSG, "invalid chunk: layer 1 checksum mismatch");
    /* ... opens unverified, and the layer check finds it */
    struct libkvfs_file *f;
    CHECK_EQ(libkvfs_open(path_of("corrupt.kv"), LIBKVFS_OPEN_NO_VERIFY, &f, NULL, 0), 0);
    if (f) {
        CHECK_EQ(libkvfs_verify_layer(f, 0), 0);
        CHECK_EQ(libkvfs_verify_layer(f, 1), -EBADMSG);
        CHECK_EQ(libkvfs_verify_layer(f, 2), 0);
        libkvfs_close(f);
    }
    /* a header byte: the header checksum, verified or not */
    memcpy(bad, w.buf, w.size);
    bad[KVFS_FIXED_HEADER_SIZE] ^= 1; /* token 0 */
    CHECK_EQ(write_file(path_of("header.kv"), bad, w.size), 0);
    expect_open(path_of("header.kv"), 0, -EBADMSG, "header checksum");
    expect_open(path_of("header.kv"), LIBKVFS_OPEN_NO_VERIFY, -EBADMSG, "header checksum");
    /* truncated: in the last layer, in the header, empty */
    CHECK_EQ(write_file(path_of("trunc.kv"), w.buf, w.size - 100), 0);
    expect_open(path_of("trunc.kv"), 0, -EINVAL, "truncated");
    expect_open(path_of("trunc.kv"), LIBKVFS_OPEN_NO_VERIFY, -EINVAL, "truncated");
    CHECK_EQ(write_file(path_of("trunc2.kv"), w.buf, 100), 0);
    expect_open(path_of("trunc2.kv"), 0, -EINVAL, "truncated");
    CHECK_EQ(write_file(path_of("empty.kv"), w.buf, 0), 0);
    expect_open(path_of("empty.kv"), 0, -EINVAL, "truncated");
    /* trailing bytes */
    memcpy(bad, w.buf, w.size);
    CHECK_EQ(write_file(path_of("long.kv"), bad, w.size), 0);
    FILE *fa = fopen(path_of("long.kv"), "ab");
    if (fa) {
        fputc(0, fa);
        fclose(fa);
    }
    expect_open(path_of("long.kv"), LIBKVFS_OPEN_NO_VERIFY, -EINVAL, "trailing data");
    /* a foreign file, another version */
    static const char text[] = "# not a chunk: a text file long enough to hold a header, and then some more "
                               "words so that it passes the 128 bytes of a fixed header at least..........";
    CHECK_EQ(write_file(path_of("foreign.kv"), text, sizeof(text)), 0);
    expect_open(path_of("foreign.kv"), 0, -EPROTO, "invalid chunk: wrong magic");
    memcpy(bad, w.buf, w.size);
    bad[8] = 2;
    CHECK_EQ(write_file(path_of("v2.kv"), bad, w.size), 0);
    expect_open(path_of("v2.kv"), 0, -EPROTO, "version");
    /* not there, a directory, unknown flags */
    expect_open(path_of("missing.kv"), 0, -ENOENT, strerror(ENOENT));
    expect_open(dir, 0, -EISDIR, strerror(EISDIR));
    expect_open(path_of("trunc.kv"), 0x100, -EINVAL, "flags");
    free(bad);
    kvfs_writer_free(&w);
}

/* a pipe cannot be mapped: read into memory, same checks */
static void test_pipe(void)
{
    struct kvfs_writer w;
    CHECK_EQ(synth_chunk(&w, 2, 9, 5, KVFS_DTYPE_F16), 0);
    int p[2];
    CHECK_EQ(pipe(p), 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        size_t off = 0;
        while (off < w.size) {
            ssize_t n = write(p[1], w.buf + off, w.size - off);
            if (n <= 0)
                _exit(1);
            off += (size_t)n;
        }
        _exit(0);
    }
    close(p[1]);
    struct libkvfs_file *f;
    CHECK_EQ(libkvfs_open_fd(p[0], 0, &f, NULL, 0), 0);
    close(p[0]);
    if (f) {
        struct libkvfs_view v;
        CHECK_EQ(libkvfs_layer(f, 1, NULL, &v), 0);
        uint64_t off = kvfs_layer_offset(&w.hdr, 1) + kvfs_layer_bytes(&w.hdr, 0) / 2;
        CHECK(memcmp(v.data, w.buf + off, v.bytes) == 0);
        libkvfs_close(f);
    }
    kvfs_writer_free(&w);
}

/* the ioctl wrappers without a kvfs mount: clear errors, nothing sent */
static void test_blend_errors(void)
{
    char path[512], err[256] = "";
    uint32_t ntok = 0;
    CHECK_EQ(libkvfs_blend(path_of("nomount"), "x\n", path, sizeof(path), &ntok, err, sizeof(err)), -ENOENT);
    CHECK(strstr(err, "/.kvfs/control: ") != NULL);
    /* a directory with a regular .kvfs/control: not our ioctl */
    mkdir(path_of("fake"), 0755);
    mkdir(path_of("fake/.kvfs"), 0755);
    CHECK_EQ(write_file(path_of("fake/.kvfs/control"), "", 0), 0);
    CHECK_EQ(libkvfs_blend(path_of("fake"), "x\n", path, sizeof(path), &ntok, err, sizeof(err)), -ENOTTY);
    struct libkvfs_blend_result res[2];
    int n = -1;
    CHECK_EQ(libkvfs_blend_batch(path_of("fake"), "x\n%%\ny\n", res, 2, &n, err, sizeof(err)), -ENOTTY);
    CHECK_EQ(n, 0);
    /* claims: a mount older than them (ENOTTY) and a name that is no hash; no descriptor left open */
    struct libkvfs_claim cl;
    char hash64[65];
    memset(hash64, 'a', 64);
    hash64[64] = '\0';
    CHECK_EQ(libkvfs_claim(path_of("fake"), hash64, 1000, &cl, err, sizeof(err)), -ENOTTY);
    CHECK_EQ(cl.fd, -1);
    CHECK_EQ(libkvfs_claim(path_of("fake"), "abc", 1000, &cl, err, sizeof(err)), -EINVAL);
    libkvfs_claim_end(&cl);
    char *big = malloc(LIBKVFS_BATCH_BYTES + 2);
    if (big) {
        memset(big, 'a', LIBKVFS_BATCH_BYTES + 1);
        big[LIBKVFS_BATCH_BYTES + 1] = '\0';
        CHECK_EQ(libkvfs_blend_batch(path_of("fake"), big, res, 2, &n, err, sizeof(err)), -E2BIG);
        big[LIBKVFS_RECIPE_MAX + 1] = '\0';
        CHECK_EQ(libkvfs_blend(path_of("fake"), big, path, sizeof(path), &ntok, err, sizeof(err)), -E2BIG);
        free(big);
    }
    unlink(path_of("fake/.kvfs/control"));
    rmdir(path_of("fake/.kvfs"));
    rmdir(path_of("fake"));
}

/* q4 and f16 chunks through libkvfs_layer_f32: the codec's own decode,
 * and f16's exact values; a q4 chunk has no raw views (-EOPNOTSUPP) */
static void test_layer_f32(void)
{
    struct kvfs_fingerprint fp = {.n_layer = 2, .n_kv_head = 1, .head_dim = 64, .rope_type = KVFS_ROPE_NEOX,
                                  .rope_theta = 10000.0f, .rope_dim = 64, .n_head = 2, .n_embd = 128};
    memcpy(fp.arch, "llama", 6);
    memset(fp.model_id, 0x33, 32);
    uint32_t ids[40], nt = 40, kvd = 64;
    float k[40 * 64], v[40 * 64], k2[40 * 64], v2[40 * 64], kd[40 * 64], vd[40 * 64];
    for (uint32_t i = 0; i < nt; i++)
        ids[i] = i + 3;
    for (uint32_t i = 0; i < nt * kvd; i++)
        k[i] = (float)((i * 37) % 101) / 50.0f - 1.0f, v[i] = (float)((i * 53) % 89) / 40.0f - 1.1f;
    for (int dtype = KVFS_DTYPE_F16; dtype <= KVFS_DTYPE_Q4; dtype += KVFS_DTYPE_Q4 - KVFS_DTYPE_F16) {
        struct kvfs_writer w;
        CHECK_EQ(kvfs_writer_init(&w, &fp, (uint32_t)dtype, KVFS_FLAG_KEYS_ROPED, 0, nt, ids), 0);
        for (uint32_t l = 0; l < fp.n_layer; l++) {
            uint8_t *p = kvfs_writer_layer(&w, l);
            if (dtype == KVFS_DTYPE_Q4) {
                CHECK_EQ(kvfs_kvq_encode(KVFS_KVQ_Q4, k, v, nt, kvd, p), 0);
                continue;
            }
            for (uint32_t i = 0; i < nt * kvd; i++) {
                uint16_t a = kvfs_f32_to_f16(k[i]), b = kvfs_f32_to_f16(v[i]);
                memcpy(p + 2 * i, &a, 2), memcpy(p + 2 * (nt * kvd + i), &b, 2);
            }
        }
        CHECK_EQ(kvfs_writer_finish(&w), 0);
        CHECK_EQ(write_file(path_of("q.kv"), w.buf, w.size), 0);
        kvfs_writer_free(&w);
        struct libkvfs_file *f = NULL;
        struct libkvfs_view kv_k;
        CHECK_EQ(libkvfs_open(path_of("q.kv"), 0, &f, NULL, 0), 0);
        if (!f)
            return;
        CHECK_EQ(libkvfs_layer(f, 1, &kv_k, NULL), dtype == KVFS_DTYPE_Q4 ? -EOPNOTSUPP : 0);
        CHECK_EQ(libkvfs_info(f)->elem_size, dtype == KVFS_DTYPE_Q4 ? 0u : 2u);
        CHECK(!strcmp(libkvfs_dtype_name(libkvfs_info(f)->dtype), dtype == KVFS_DTYPE_Q4 ? "q4" : "f16"));
        CHECK_EQ(libkvfs_layer_f32(f, 1, k2, v2), 0);
        CHECK_EQ(libkvfs_layer_f32(f, 1, NULL, vd), 0); /* V alone */
        CHECK(!memcmp(vd, v2, sizeof(vd)));
        CHECK_EQ(libkvfs_layer_f32(f, 2, k2, v2), -ERANGE);
        if (dtype == KVFS_DTYPE_Q4) {
            uint8_t blk[8192];
            CHECK_EQ(kvfs_kvq_encode(KVFS_KVQ_Q4, k, v, nt, kvd, blk), 0);
            CHECK_EQ(kvfs_kvq_decode(KVFS_KVQ_Q4, blk, nt, kvd, kd, vd), 0);
        } else {
            for (uint32_t i = 0; i < nt * kvd; i++)
                kd[i] = kvfs_f16_to_f32(kvfs_f32_to_f16(k[i])), vd[i] = kvfs_f16_to_f32(kvfs_f32_to_f16(v[i]));
        }
        CHECK(!memcmp(kd, k2, sizeof(kd)) && !memcmp(vd, v2, sizeof(vd)));
        libkvfs_close(f);
    }
    unlink(path_of("q.kv"));
}

int main(void)
{
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_fields_and_views();
    test_salted();
    test_layout();
    test_layer_shapes();
    test_layer_shapes_quantized();
    test_bad_files();
    test_pipe();
    test_blend_errors();
    test_layer_f32();
    static const char *names[] = {"a.kv", "b.kv", "corrupt.kv", "header.kv", "trunc.kv", "trunc2.kv",
                                  "empty.kv", "long.kv", "foreign.kv", "v2.kv"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        unlink(path_of(names[i]));
    rmdir(dir);
    CHECK_DONE();
}
