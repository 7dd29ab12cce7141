/* gguf.c - memory-mapped GGUF reader with bounds checks on every length. */
#include "gguf.h"
#include "log.h" /* kvfs_errf */

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct cursor {
    const uint8_t *p, *end;
    int bad;
};

static const uint8_t *take(struct cursor *c, uint64_t n)
{
    if (c->bad || (uint64_t)(c->end - c->p) < n) {
        c->bad = 1;
        return NULL;
    }
    const uint8_t *r = c->p;
    c->p += n;
    return r;
}

static uint32_t get_u32(struct cursor *c)
{
    const uint8_t *p = take(c, 4);
    uint32_t v = 0;
    if (p)
        memcpy(&v, p, 4);
    return v;
}

static uint64_t get_u64(struct cursor *c)
{
    const uint8_t *p = take(c, 8);
    uint64_t v = 0;
    if (p)
        memcpy(&v, p, 8);
    return v;
}

static struct kvfs_gguf_str get_str(struct cursor *c)
{
    struct kvfs_gguf_str s = {0, NULL};
    s.len = get_u64(c);
    s.ptr = (const char *)take(c, s.len);
    if (!s.ptr)
        s.len = 0;
    return s;
}

static uint64_t scalar_size(uint32_t t)
{
    switch (t) {
    case KVFS_GGUF_UINT8: case KVFS_GGUF_INT8: case KVFS_GGUF_BOOL: return 1;
    case KVFS_GGUF_UINT16: case KVFS_GGUF_INT16: return 2;
    case KVFS_GGUF_UINT32: case KVFS_GGUF_INT32: case KVFS_GGUF_FLOAT32: return 4;
    case KVFS_GGUF_UINT64: case KVFS_GGUF_INT64: case KVFS_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

/* Skip one value of type t; string arrays record element offsets lazily. */
static void skip_value(struct cursor *c, uint32_t t, int depth)
{
    if (t == KVFS_GGUF_STRING) {
        get_str(c);
    } else if (t == KVFS_GGUF_ARRAY) {
        uint32_t at = get_u32(c);
        uint64_t n = get_u64(c);
        if (depth > 2 || at == KVFS_GGUF_ARRAY) {
            c->bad = 1;
            return;
        }
        if (at == KVFS_GGUF_STRING) {
            for (uint64_t i = 0; i < n && !c->bad; i++)
                get_str(c);
        } else {
            uint64_t sz = scalar_size(at);
            if (!sz || n > UINT64_MAX / sz)
                c->bad = 1;
            else
                take(c, n * sz);
        }
    } else {
        uint64_t sz = scalar_size(t);
        if (!sz)
            c->bad = 1;
        else
            take(c, sz);
    }
}

/* String arrays: offsets of every element, built on first access. */
struct str_index {
    const struct kvfs_gguf_kv *kv;
    const uint8_t **elems;
};

static struct str_index *str_indexes;
static size_t n_str_indexes;

/* the key/value entries (values left in the mapping) and the alignment */
static int read_metadata(struct kvfs_gguf *g, struct cursor *c, const char *path, char *err, size_t errlen)
{
    g->alignment = 32;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        struct kvfs_gguf_kv *kv = &g->kv[i];
        kv->key = get_str(c);
        kv->type = get_u32(c);
        if (kv->type == KVFS_GGUF_ARRAY) {
            const uint8_t *save = c->p;
            kv->arr_type = get_u32(c);
            kv->arr_len = get_u64(c);
            kv->data = c->p;
            c->p = save;
        } else {
            kv->data = c->p;
        }
        skip_value(c, kv->type, 0);
        if (c->bad) {
            kvfs_errf(err, errlen, -EINVAL, "%s: metadata entry %llu is truncated or malformed", path, (unsigned long long)i);
            return -EINVAL;
        }
    }
    uint32_t align;
    if (kvfs_gguf_get_u32(g, "general.alignment", &align) == 0) {
        if (align == 0 || (align & (align - 1))) {
            kvfs_errf(err, errlen, -EINVAL, "%s: bad alignment %u", path, align);
            return -EINVAL;
        }
        g->alignment = align;
    }
    return 0;
}

/* the tensor table: names, shapes, types and offsets */
static int read_tensor_infos(struct kvfs_gguf *g, struct cursor *c, const char *path, char *err, size_t errlen)
{
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        struct kvfs_gguf_tensor *t = &g->tensors[i];
        t->name = get_str(c);
        t->n_dims = get_u32(c);
        if (t->n_dims == 0 || t->n_dims > 4) {
            kvfs_errf(err, errlen, -EINVAL, "%s: tensor %llu has %u dims", path, (unsigned long long)i, t->n_dims);
            return -EINVAL;
        }
        for (int d = 0; d < 4; d++)
            t->ne[d] = d < (int)t->n_dims ? get_u64(c) : 1;
        t->type = get_u32(c);
        t->offset = get_u64(c);
        if (c->bad) {
            kvfs_errf(err, errlen, -EINVAL, "%s: tensor table truncated", path);
            return -EINVAL;
        }
    }
    return 0;
}

/* the data section and each tensor in it, checked against the file's size */
static int place_tensors(struct kvfs_gguf *g, struct cursor *c, const char *path, char *err, size_t errlen)
{
    uint64_t pos = (uint64_t)(c->p - g->map);
    pos = (pos + g->alignment - 1) / g->alignment * g->alignment;
    if (pos > g->map_size && g->n_tensors == 0) /* a vocabulary-only file (llama.cpp's ggml-vocab-*.gguf) */
        pos = g->map_size;
    if (pos > g->map_size) {
        kvfs_errf(err, errlen, -EINVAL, "%s: data section missing", path);
        return -EINVAL;
    }
    g->data = g->map + pos;
    uint64_t data_size = g->map_size - pos;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        struct kvfs_gguf_tensor *t = &g->tensors[i];
        int nl = (int)t->name.len;
        const char *tn = kvfs_ggml_type_name(t->type);
        uint32_t blk = kvfs_ggml_block_size(t->type);
        if (!blk) { /* a valid ggml type we cannot decode is "not supported"; any other number, malformed */
            int rc = strcmp(tn, "unknown") ? -ENOTSUP : -EINVAL;
            return kvfs_errf(err, errlen, rc,
                      "%s: tensor %.*s has ggml type %s (%u), which kvfs does not read (it reads F32, F16, BF16, "
                      "Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, MXFP4)", path, nl, t->name.ptr, tn, t->type);
        }
        uint64_t row = kvfs_ggml_row_size(t->type, t->ne[0]), rows = t->ne[1];
        if (!row) {
            kvfs_errf(err, errlen, -EINVAL, "%s: tensor %.*s (%s): row length %llu is not a multiple of its block of %u",
                      path, nl, t->name.ptr, tn, (unsigned long long)t->ne[0], blk);
            return -EINVAL;
        }
        if (__builtin_mul_overflow(rows, t->ne[2], &rows) || __builtin_mul_overflow(rows, t->ne[3], &rows) ||
            __builtin_mul_overflow(row, rows, &t->nbytes)) {
            kvfs_errf(err, errlen, -EINVAL, "%s: tensor %.*s has an impossible shape", path, nl, t->name.ptr);
            return -EINVAL;
        }
        if (t->offset > data_size || t->nbytes > data_size - t->offset) {
            kvfs_errf(err, errlen, -EINVAL,
                      "%s: tensor %.*s (%s, %llu bytes at data offset %llu) lies outside the file (truncated? its "
                      "data section holds %llu bytes)", path, nl, t->name.ptr, tn, (unsigned long long)t->nbytes,
                      (unsigned long long)t->offset, (unsigned long long)data_size);
            return -EINVAL;
        }
        t->data = g->data + t->offset;
    }
    return 0;
}

int kvfs_gguf_open(const char *path, struct kvfs_gguf **out, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = -errno;
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return e;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < 24) {
        close(fd);
        return kvfs_errf(err, errlen, -EINVAL, "%s: too small to be a GGUF file", path);
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        snprintf(err, errlen, "%s: mmap: %s", path, strerror(errno));
        return -errno;
    }
    struct kvfs_gguf *g = calloc(1, sizeof(*g));
    if (!g) {
        munmap(map, (size_t)st.st_size);
        return -ENOMEM;
    }
    g->map = map;
    g->map_size = (size_t)st.st_size;
    struct cursor c = {g->map, g->map + g->map_size, 0};
    int rc = -EINVAL;
    const uint8_t *magic = take(&c, 4);
    if (!magic || memcmp(magic, "GGUF", 4)) {
        kvfs_errf(err, errlen, -EINVAL, "%s: not a GGUF file (bad magic)", path);
        goto fail;
    }
    g->version = get_u32(&c);
    if (g->version < 2 || g->version > 3) {
        kvfs_errf(err, errlen, -EINVAL, "%s: unsupported GGUF version %u", path, g->version);
        goto fail;
    }
    g->n_tensors = get_u64(&c);
    g->n_kv = get_u64(&c);
    if (g->n_kv > 1u << 20 || g->n_tensors > 1u << 20) {
        kvfs_errf(err, errlen, -EINVAL, "%s: implausible counts (%llu kv, %llu tensors)", path,
            (unsigned long long)g->n_kv, (unsigned long long)g->n_tensors);
        goto fail;
    }
    g->kv = calloc(g->n_kv + 1, sizeof(*g->kv));
    g->tensors = calloc(g->n_tensors + 1, sizeof(*g->tensors));
    if (!g->kv || !g->tensors) {
        rc = -ENOMEM;
        goto fail;
    }
    if ((rc = read_metadata(g, &c, path, err, errlen)) || (rc = read_tensor_infos(g, &c, path, err, errlen)) ||
        (rc = place_tensors(g, &c, path, err, errlen)))
        goto fail;
    *out = g;
    return 0;
fail:
    kvfs_gguf_close(g);
    return rc;
}

void kvfs_gguf_close(struct kvfs_gguf *g)
{
    if (!g)
        return;
    for (size_t i = 0; i < n_str_indexes; i++) {
        if (str_indexes[i].kv >= g->kv && str_indexes[i].kv < g->kv + g->n_kv + 1) {
            free(str_indexes[i].elems);
            str_indexes[i] = str_indexes[--n_str_indexes];
            i--;
        }
    }
    if (g->map)
        munmap((void *)g->map, g->map_size);
    free(g->kv);
    free(g->tensors);
    free(g);
}

static int str_eq(struct kvfs_gguf_str s, const char *z)
{
    size_t n = strlen(z);
    return s.len == n && !memcmp(s.ptr, z, n);
}

const struct kvfs_gguf_kv *kvfs_gguf_find(const struct kvfs_gguf *g, const char *key)
{
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (str_eq(g->kv[i].key, key))
            return &g->kv[i];
    return NULL;
}

const struct kvfs_gguf_tensor *kvfs_gguf_tensor(const struct kvfs_gguf *g, const char *name)
{
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (str_eq(g->tensors[i].name, name))
            return &g->tensors[i];
    return NULL;
}

static int get_int(const struct kvfs_gguf_kv *kv, int64_t *out)
{
    const uint8_t *d = kv->data;
    switch (kv->type) {
    case KVFS_GGUF_UINT8: *out = d[0]; return 0;
    case KVFS_GGUF_INT8: *out = (int8_t)d[0]; return 0;
    case KVFS_GGUF_UINT16: { uint16_t v; memcpy(&v, d, 2); *out = v; return 0; }
    case KVFS_GGUF_INT16: { int16_t v; memcpy(&v, d, 2); *out = v; return 0; }
    case KVFS_GGUF_UINT32: { uint32_t v; memcpy(&v, d, 4); *out = v; return 0; }
    case KVFS_GGUF_INT32: { int32_t v; memcpy(&v, d, 4); *out = v; return 0; }
    case KVFS_GGUF_UINT64: { uint64_t v; memcpy(&v, d, 8); *out = (int64_t)v; return 0; }
    case KVFS_GGUF_INT64: { int64_t v; memcpy(&v, d, 8); *out = v; return 0; }
    default: return -EINVAL;
    }
}

int kvfs_gguf_get_u32(const struct kvfs_gguf *g, const char *key, uint32_t *out)
{
    const struct kvfs_gguf_kv *kv = kvfs_gguf_find(g, key);
    int64_t v = 0;
    if (!kv)
        return -ENOENT;
    if (get_int(kv, &v) || v < 0 || v > UINT32_MAX)
        return -EINVAL;
    *out = (uint32_t)v;
    return 0;
}

int kvfs_gguf_get_f32(const struct kvfs_gguf *g, const char *key, float *out)
{
    const struct kvfs_gguf_kv *kv = kvfs_gguf_find(g, key);
    if (!kv)
        return -ENOENT;
    if (kv->type == KVFS_GGUF_FLOAT32) {
        memcpy(out, kv->data, 4);
        return 0;
    }
    if (kv->type == KVFS_GGUF_FLOAT64) {
        double d;
        memcpy(&d, kv->data, 8);
        *out = (float)d;
        return 0;
    }
    return -EINVAL;
}

int kvfs_gguf_get_bool(const struct kvfs_gguf *g, const char *key, int *out)
{
    const struct kvfs_gguf_kv *kv = kvfs_gguf_find(g, key);
    if (!kv)
        return -ENOENT;
    if (kv->type != KVFS_GGUF_BOOL)
        return -EINVAL;
    *out = kv->data[0] != 0;
    return 0;
}

int kvfs_gguf_get_str(const struct kvfs_gguf *g, const char *key, struct kvfs_gguf_str *out)
{
    const struct kvfs_gguf_kv *kv = kvfs_gguf_find(g, key);
    if (!kv)
        return -ENOENT;
    if (kv->type != KVFS_GGUF_STRING)
        return -EINVAL;
    uint64_t len;
    memcpy(&len, kv->data, 8);
    out->len = len;
    out->ptr = (const char *)kv->data + 8;
    return 0;
}

int kvfs_gguf_arr_str(const struct kvfs_gguf_kv *kv, uint64_t i, struct kvfs_gguf_str *out)
{
    if (kv->type != KVFS_GGUF_ARRAY || kv->arr_type != KVFS_GGUF_STRING)
        return -EINVAL;
    if (i >= kv->arr_len)
        return -ERANGE;
    struct str_index *ix = NULL;
    for (size_t k = 0; k < n_str_indexes; k++)
        if (str_indexes[k].kv == kv)
            ix = &str_indexes[k];
    if (!ix) { /* built once per array; the file was validated at open */
        const uint8_t **elems = malloc(sizeof(*elems) * (kv->arr_len ? kv->arr_len : 1));
        struct str_index *grown = realloc(str_indexes, sizeof(*grown) * (n_str_indexes + 1));
        if (!elems || !grown) {
            free(elems);
            if (grown)
                str_indexes = grown;
            return -ENOMEM;
        }
        str_indexes = grown;
        const uint8_t *p = kv->data;
        for (uint64_t k = 0; k < kv->arr_len; k++) {
            uint64_t len;
            elems[k] = p;
            memcpy(&len, p, 8);
            p += 8 + len;
        }
        str_indexes[n_str_indexes] = (struct str_index){kv, elems};
        ix = &str_indexes[n_str_indexes++];
    }
    memcpy(&out->len, ix->elems[i], 8);
    out->ptr = (const char *)ix->elems[i] + 8;
    return 0;
}

int kvfs_gguf_arr_i32(const struct kvfs_gguf_kv *kv, uint64_t i, int32_t *out)
{
    if (kv->type != KVFS_GGUF_ARRAY || (kv->arr_type != KVFS_GGUF_INT32 && kv->arr_type != KVFS_GGUF_UINT32))
        return -EINVAL;
    if (i >= kv->arr_len)
        return -ERANGE;
    memcpy(out, kv->data + 4 * i, 4);
    return 0;
}

int kvfs_gguf_arr_f32(const struct kvfs_gguf_kv *kv, uint64_t i, float *out)
{
    if (kv->type != KVFS_GGUF_ARRAY || kv->arr_type != KVFS_GGUF_FLOAT32)
        return -EINVAL;
    if (i >= kv->arr_len)
        return -ERANGE;
    memcpy(out, kv->data + 4 * i, 4);
    return 0;
}
