/* gguf_write.c - a small GGUF v3 writer (metadata + F32 tensors). */
#include "gguf_write.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"

struct buf {
    uint8_t *p;
    size_t n, cap;
    int err;
};

static void put(struct buf *b, const void *d, size_t n)
{
    if (!n) /* an empty part (no metadata) may come as NULL: memcpy must not see it */
        return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n)
            cap *= 2;
        uint8_t *np = realloc(b->p, cap);
        if (!np) {
            b->err = -ENOMEM;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void put_u32(struct buf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(struct buf *b, uint64_t v) { put(b, &v, 8); }
static void put_str(struct buf *b, const char *s)
{
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}

struct tensor {
    char *name;
    uint64_t ne0, ne1, ne2; /* ne2 > 1: a 3-D tensor (experts) */
    float *data;
};

struct kvfs_gguf_writer {
    struct buf kv;
    uint64_t n_kv;
    struct tensor *t;
    uint64_t n_t;
};

int kvfs_gguf_writer_new(struct kvfs_gguf_writer **out)
{
    *out = calloc(1, sizeof(**out));
    return *out ? 0 : -ENOMEM;
}

void kvfs_gguf_writer_free(struct kvfs_gguf_writer *w)
{
    if (!w)
        return;
    for (uint64_t i = 0; i < w->n_t; i++) {
        free(w->t[i].name);
        free(w->t[i].data);
    }
    free(w->t);
    free(w->kv.p);
    free(w);
}

static int key(struct kvfs_gguf_writer *w, const char *k, uint32_t type)
{
    put_str(&w->kv, k);
    put_u32(&w->kv, type);
    w->n_kv++;
    return w->kv.err;
}

int kvfs_gguf_add_str(struct kvfs_gguf_writer *w, const char *k, const char *v)
{
    key(w, k, KVFS_GGUF_STRING);
    put_str(&w->kv, v);
    return w->kv.err;
}

int kvfs_gguf_add_u32(struct kvfs_gguf_writer *w, const char *k, uint32_t v)
{
    key(w, k, KVFS_GGUF_UINT32);
    put_u32(&w->kv, v);
    return w->kv.err;
}

int kvfs_gguf_add_f32(struct kvfs_gguf_writer *w, const char *k, float v)
{
    key(w, k, KVFS_GGUF_FLOAT32);
    put(&w->kv, &v, 4);
    return w->kv.err;
}

int kvfs_gguf_add_bool(struct kvfs_gguf_writer *w, const char *k, int v)
{
    uint8_t b = v ? 1 : 0;
    key(w, k, KVFS_GGUF_BOOL);
    put(&w->kv, &b, 1);
    return w->kv.err;
}

int kvfs_gguf_add_str_array(struct kvfs_gguf_writer *w, const char *k, const char *const *v, uint64_t n)
{
    key(w, k, KVFS_GGUF_ARRAY);
    put_u32(&w->kv, KVFS_GGUF_STRING);
    put_u64(&w->kv, n);
    for (uint64_t i = 0; i < n; i++)
        put_str(&w->kv, v[i]);
    return w->kv.err;
}

int kvfs_gguf_add_i32_array(struct kvfs_gguf_writer *w, const char *k, const int32_t *v, uint64_t n)
{
    key(w, k, KVFS_GGUF_ARRAY);
    put_u32(&w->kv, KVFS_GGUF_INT32);
    put_u64(&w->kv, n);
    put(&w->kv, v, 4 * n);
    return w->kv.err;
}

int kvfs_gguf_add_bool_array(struct kvfs_gguf_writer *w, const char *k, const uint8_t *v, uint64_t n)
{
    key(w, k, KVFS_GGUF_ARRAY);
    put_u32(&w->kv, KVFS_GGUF_BOOL);
    put_u64(&w->kv, n);
    put(&w->kv, v, n);
    return w->kv.err;
}

int kvfs_gguf_add_f32_array(struct kvfs_gguf_writer *w, const char *k, const float *v, uint64_t n)
{
    key(w, k, KVFS_GGUF_ARRAY);
    put_u32(&w->kv, KVFS_GGUF_FLOAT32);
    put_u64(&w->kv, n);
    put(&w->kv, v, 4 * n);
    return w->kv.err;
}

int kvfs_gguf_add_tensor_f32_3d(struct kvfs_gguf_writer *w, const char *name, uint64_t ne0, uint64_t ne1,
                                uint64_t ne2, const float *data)
{
    struct tensor *t = realloc(w->t, sizeof(*t) * (w->n_t + 1));
    if (!t)
        return -ENOMEM;
    w->t = t;
    t = &w->t[w->n_t];
    size_t bytes = sizeof(float) * ne0 * ne1 * ne2;
    t->name = strdup(name);
    t->data = malloc(bytes);
    if (!t->name || !t->data) {
        free(t->name);
        free(t->data);
        return -ENOMEM;
    }
    memcpy(t->data, data, bytes);
    t->ne0 = ne0;
    t->ne1 = ne1;
    t->ne2 = ne2;
    w->n_t++;
    return 0;
}

int kvfs_gguf_add_tensor_f32(struct kvfs_gguf_writer *w, const char *name, uint64_t ne0, uint64_t ne1,
                             const float *data)
{
    return kvfs_gguf_add_tensor_f32_3d(w, name, ne0, ne1, 1, data);
}

int kvfs_gguf_write_file(struct kvfs_gguf_writer *w, const char *path)
{
    struct buf b = {0};
    put(&b, "GGUF", 4);
    put_u32(&b, 3);
    put_u64(&b, w->n_t);
    put_u64(&b, w->n_kv);
    put(&b, w->kv.p, w->kv.n);
    uint64_t off = 0;
    for (uint64_t i = 0; i < w->n_t; i++) {
        put_str(&b, w->t[i].name);
        put_u32(&b, w->t[i].ne2 > 1 ? 3 : 2);
        put_u64(&b, w->t[i].ne0);
        put_u64(&b, w->t[i].ne1);
        if (w->t[i].ne2 > 1)
            put_u64(&b, w->t[i].ne2);
        put_u32(&b, KVFS_GGML_F32);
        put_u64(&b, off);
        off += (sizeof(float) * w->t[i].ne0 * w->t[i].ne1 * w->t[i].ne2 + 31) / 32 * 32;
    }
    static const uint8_t zeros[32];
    put(&b, zeros, (32 - b.n % 32) % 32);
    for (uint64_t i = 0; i < w->n_t; i++) {
        size_t n = sizeof(float) * w->t[i].ne0 * w->t[i].ne1 * w->t[i].ne2;
        put(&b, w->t[i].data, n);
        put(&b, zeros, (32 - n % 32) % 32);
    }
    if (b.err) {
        free(b.p);
        return b.err;
    }
    FILE *f = fopen(path, "wb");
    int rc = f ? 0 : -errno;
    if (f) {
        if (fwrite(b.p, 1, b.n, f) != b.n)
            rc = -EIO;
        if (fclose(f) != 0 && !rc)
            rc = -errno;
    }
    free(b.p);
    return rc;
}
