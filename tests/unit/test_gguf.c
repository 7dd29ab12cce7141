/* test_gguf.c - GGUF reader: a written file parses back exactly; every
 * truncation and a set of corrupted headers are rejected with -EINVAL
 * (never a crash, which ASan builds would catch). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "gguf.h"
#include "gguf_write.h"

static int write_bytes(const char *path, const uint8_t *buf, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -errno;
    size_t w = fwrite(buf, 1, n, f);
    if (fclose(f) != 0 || w != n) return -EIO;
    return 0;
}

static uint8_t *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)sz);
    if (buf && fread(buf, 1, (size_t)sz, f) != (size_t)sz) { free(buf); buf = NULL; }
    fclose(f);
    *n = (size_t)sz;
    return buf;
}

/* A file that must be rejected: -EINVAL and a non-empty reason. */
static int rejects(const char *path, const uint8_t *buf, size_t n)
{
    char err[256] = "";
    struct kvfs_gguf *g = NULL;
    if (write_bytes(path, buf, n) != 0) return 0;
    int rc = kvfs_gguf_open(path, &g, err, sizeof(err));
    if (rc == 0) { kvfs_gguf_close(g); return 0; }
    return rc == -EINVAL && err[0] != '\0';
}

/* A file rejected with rc and a reason that names the tensor and `what`. */
static int rejects_naming(const char *path, const uint8_t *buf, size_t n, int want_rc, const char *what)
{
    char err[512] = "";
    struct kvfs_gguf *g = NULL;
    if (write_bytes(path, buf, n) != 0) return 0;
    int rc = kvfs_gguf_open(path, &g, err, sizeof(err));
    if (rc == 0) { kvfs_gguf_close(g); return 0; }
    if (rc != want_rc || !strstr(err, "tensor w.weight") || !strstr(err, what)) {
        fprintf(stderr, "rc %d, err: %s\n", rc, err);
        return 0;
    }
    return 1;
}

/* Tensor types: a 256-value F32 tensor retyped in place (its type field
 * follows the name, n_dims and two dims) to a K-quant reads back with the
 * K-quant's size; an unsupported or unknown type, a row that is not whole
 * blocks and a truncated tensor are refused naming the tensor and type. */
static void test_tensor_types(const char *path, const char *bad)
{
    static float vals[256];
    struct kvfs_gguf_writer *w;
    CHECK_EQ(kvfs_gguf_writer_new(&w), 0);
    CHECK_EQ(kvfs_gguf_add_tensor_f32(w, "w.weight", 256, 1, vals), 0);
    CHECK_EQ(kvfs_gguf_write_file(w, path), 0);
    kvfs_gguf_writer_free(w);
    size_t n;
    uint8_t *buf = read_all(path, &n), *copy = malloc(n);
    uint8_t *name = buf ? memmem(buf, n, "w.weight", 8) : NULL;
    CHECK(name != NULL && copy != NULL);
    if (!name || !copy) { free(buf); free(copy); return; }
    size_t type_at = (size_t)(name - buf) + 8 + 4 + 2 * 8;
    uint32_t t32;
    memcpy(&t32, buf + type_at, 4);
    CHECK_EQ(t32, KVFS_GGML_F32);

#define RETYPE(type) (memcpy(copy, buf, n), t32 = (type), memcpy(copy + type_at, &t32, 4))
    RETYPE(KVFS_GGML_Q6_K);
    struct kvfs_gguf *g = NULL;
    char err[512];
    CHECK_EQ(write_bytes(bad, copy, n), 0);
    CHECK_EQ(kvfs_gguf_open(bad, &g, err, sizeof(err)), 0);
    size_t data_at = 0;
    if (g) {
        const struct kvfs_gguf_tensor *t = kvfs_gguf_tensor(g, "w.weight");
        CHECK(t && t->type == KVFS_GGML_Q6_K && t->nbytes == 210);
        data_at = t ? (size_t)(t->data - g->map) : 0;
        kvfs_gguf_close(g);
    }
    /* the 210 bytes cut short */
    CHECK(data_at > 0 && rejects_naming(bad, copy, data_at + 209, -EINVAL, "(Q6_K, 210 bytes"));
    RETYPE(11); /* Q3_K: a ggml type kvfs does not decode */
    CHECK(rejects_naming(bad, copy, n, -ENOTSUP, "Q3_K (11)"));
    RETYPE(99); /* no ggml type */
    CHECK(rejects_naming(bad, copy, n, -EINVAL, "unknown (99)"));
    memcpy(copy + type_at - 16, &(uint64_t){288}, 8); /* ne0 288: not whole Q4_K super-blocks */
    t32 = KVFS_GGML_Q4_K;
    memcpy(copy + type_at, &t32, 4);
    CHECK(rejects_naming(bad, copy, n, -EINVAL, "Q4_K"));
#undef RETYPE
    free(copy);
    free(buf);
}

int main(void)
{
    char path[128], bad[128];
    snprintf(path, sizeof(path), "/tmp/kvfs-test-gguf.%d.gguf", (int)getpid());
    snprintf(bad, sizeof(bad), "/tmp/kvfs-test-gguf-bad.%d.gguf", (int)getpid());

    static const char *const words[] = { "alpha", "", "gamma \xe2\x96\x81 delta" };
    static const int32_t ints[] = { -7, 0, 1 << 30 };
    float tdata[6] = { 1, 2, 3, 4, 5, 6 };
    struct kvfs_gguf_writer *w;
    CHECK_EQ(kvfs_gguf_writer_new(&w), 0);
    CHECK_EQ(kvfs_gguf_add_str(w, "general.architecture", "llama"), 0);
    CHECK_EQ(kvfs_gguf_add_u32(w, "test.u32", 123456789u), 0);
    CHECK_EQ(kvfs_gguf_add_f32(w, "test.f32", 0.25f), 0);
    CHECK_EQ(kvfs_gguf_add_bool(w, "test.bool", 1), 0);
    CHECK_EQ(kvfs_gguf_add_str_array(w, "test.words", words, 3), 0);
    CHECK_EQ(kvfs_gguf_add_i32_array(w, "test.ints", ints, 3), 0);
    CHECK_EQ(kvfs_gguf_add_tensor_f32(w, "t.weight", 3, 2, tdata), 0);
    CHECK_EQ(kvfs_gguf_write_file(w, path), 0);
    kvfs_gguf_writer_free(w);

    char err[256];
    struct kvfs_gguf *g = NULL;
    CHECK_EQ(kvfs_gguf_open(path, &g, err, sizeof(err)), 0);
    if (!g) { fprintf(stderr, "open: %s\n", err); return 1; }
    uint32_t u; float f; int b;
    struct kvfs_gguf_str s;
    CHECK_EQ(kvfs_gguf_get_u32(g, "test.u32", &u), 0);
    CHECK_EQ(u, 123456789u);
    CHECK_EQ(kvfs_gguf_get_f32(g, "test.f32", &f), 0);
    CHECK(f == 0.25f);
    CHECK_EQ(kvfs_gguf_get_bool(g, "test.bool", &b), 0);
    CHECK_EQ(b, 1);
    CHECK_EQ(kvfs_gguf_get_str(g, "general.architecture", &s), 0);
    CHECK(s.len == 5 && memcmp(s.ptr, "llama", 5) == 0);
    CHECK(kvfs_gguf_find(g, "no.such.key") == NULL);
    CHECK(kvfs_gguf_get_u32(g, "general.architecture", &u) < 0); /* wrong type */
    const struct kvfs_gguf_kv *kv = kvfs_gguf_find(g, "test.words");
    CHECK(kv != NULL);
    if (kv) {
        CHECK_EQ(kv->arr_len, 3);
        for (uint64_t i = 0; i < 3; i++) {
            CHECK_EQ(kvfs_gguf_arr_str(kv, i, &s), 0);
            CHECK(s.len == strlen(words[i]) && memcmp(s.ptr, words[i], s.len) == 0);
        }
        CHECK(kvfs_gguf_arr_str(kv, 3, &s) < 0); /* out of range */
    }
    kv = kvfs_gguf_find(g, "test.ints");
    CHECK(kv != NULL);
    if (kv)
        for (uint64_t i = 0; i < 3; i++) {
            int32_t v;
            CHECK_EQ(kvfs_gguf_arr_i32(kv, i, &v), 0);
            CHECK_EQ(v, ints[i]);
        }
    const struct kvfs_gguf_tensor *t = kvfs_gguf_tensor(g, "t.weight");
    CHECK(t != NULL);
    size_t data_end = 0; /* the writer may pad the file after the last tensor */
    if (t) {
        data_end = (size_t)(t->data - g->map) + t->nbytes;
        CHECK_EQ(t->n_dims, 2);
        CHECK_EQ(t->ne[0], 3);
        CHECK_EQ(t->ne[1], 2);
        CHECK_EQ(t->type, KVFS_GGML_F32);
        CHECK_EQ(t->nbytes, sizeof(tdata));
        CHECK_EQ((uintptr_t)(t->data - g->data) % g->alignment, 0);
        CHECK(memcmp(t->data, tdata, sizeof(tdata)) == 0);
    }
    kvfs_gguf_close(g);

    size_t n;
    uint8_t *buf = read_all(path, &n);
    CHECK(buf != NULL);
    if (!buf) CHECK_DONE();
    uint8_t *copy = malloc(n);
    /* every prefix that cuts into the tensor's data or before is malformed */
    CHECK(data_end > 0 && data_end <= n);
    size_t truncations_rejected = 0;
    for (size_t len = 0; len < data_end; len++)
        truncations_rejected += rejects(bad, buf, len);
    CHECK_EQ(truncations_rejected, data_end);

    /* bad magic */
    memcpy(copy, buf, n); copy[0] = 'X';
    CHECK(rejects(bad, copy, n));
    /* unsupported version */
    memcpy(copy, buf, n); copy[4] = 99; copy[5] = copy[6] = copy[7] = 0;
    CHECK(rejects(bad, copy, n));
    /* absurd tensor / kv counts (8-byte fields at 8 and 16) */
    memcpy(copy, buf, n); memset(copy + 8, 0xff, 8);
    CHECK(rejects(bad, copy, n));
    memcpy(copy, buf, n); memset(copy + 16, 0xff, 8);
    CHECK(rejects(bad, copy, n));
    /* first key length (at 24) far past the end of the file */
    memcpy(copy, buf, n); memset(copy + 24, 0xff, 8);
    CHECK(rejects(bad, copy, n));
    /* first value's type (after key "general.architecture", 20 bytes) unknown */
    memcpy(copy, buf, n); copy[24 + 8 + 20] = 200;
    CHECK(rejects(bad, copy, n));

    free(copy);
    free(buf);
    test_tensor_types(path, bad);
    unlink(path);
    unlink(bad);
    CHECK_DONE();
}
