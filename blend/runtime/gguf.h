/* gguf.h - read-only GGUF (v2/v3) container access, memory-mapped.
 *
 * Parses the header, the metadata key/values and the tensor infos; tensor
 * data stays in the mapping.  Every function returns 0 or a negative errno;
 * a malformed file gives -EINVAL with the reason in err.
 */
#ifndef KVFS_GGUF_H
#define KVFS_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "ggml_quant.h" /* the tensors' ggml types */

enum kvfs_gguf_vtype {
    KVFS_GGUF_UINT8 = 0, KVFS_GGUF_INT8 = 1, KVFS_GGUF_UINT16 = 2, KVFS_GGUF_INT16 = 3,
    KVFS_GGUF_UINT32 = 4, KVFS_GGUF_INT32 = 5, KVFS_GGUF_FLOAT32 = 6, KVFS_GGUF_BOOL = 7,
    KVFS_GGUF_STRING = 8, KVFS_GGUF_ARRAY = 9, KVFS_GGUF_UINT64 = 10, KVFS_GGUF_INT64 = 11,
    KVFS_GGUF_FLOAT64 = 12,
};

struct kvfs_gguf_str { uint64_t len; const char *ptr; }; /* not NUL terminated */

struct kvfs_gguf_kv {
    struct kvfs_gguf_str key;
    uint32_t type;            /* enum kvfs_gguf_vtype */
    uint32_t arr_type;        /* element type if type == ARRAY */
    uint64_t arr_len;         /* element count if ARRAY */
    const uint8_t *data;      /* value (or first array element) in the mapping */
};

struct kvfs_gguf_tensor {
    struct kvfs_gguf_str name;
    uint32_t n_dims;
    uint64_t ne[4];           /* ne[0] is the fastest-varying dim (row length) */
    uint32_t type;            /* enum kvfs_ggml_type */
    uint64_t offset;          /* relative to the data section */
    const uint8_t *data;      /* pointer into the mapping */
    uint64_t nbytes;
};

struct kvfs_gguf {
    const uint8_t *map; size_t map_size;
    uint32_t version;
    uint64_t n_kv, n_tensors;
    struct kvfs_gguf_kv *kv;
    struct kvfs_gguf_tensor *tensors;
    uint64_t alignment;
    const uint8_t *data;      /* start of the tensor data section */
};

int kvfs_gguf_open(const char *path, struct kvfs_gguf **out, char *err, size_t errlen);
void kvfs_gguf_close(struct kvfs_gguf *g);

const struct kvfs_gguf_kv *kvfs_gguf_find(const struct kvfs_gguf *g, const char *key);
const struct kvfs_gguf_tensor *kvfs_gguf_tensor(const struct kvfs_gguf *g, const char *name);

/* Typed getters: -ENOENT if missing, -EINVAL if wrong type.  Integer getters
 * accept any integer type that fits. */
int kvfs_gguf_get_u32(const struct kvfs_gguf *g, const char *key, uint32_t *out);
int kvfs_gguf_get_f32(const struct kvfs_gguf *g, const char *key, float *out);
int kvfs_gguf_get_bool(const struct kvfs_gguf *g, const char *key, int *out);
int kvfs_gguf_get_str(const struct kvfs_gguf *g, const char *key, struct kvfs_gguf_str *out);
/* Array access: element i of a string array (-ERANGE past the end). */
int kvfs_gguf_arr_str(const struct kvfs_gguf_kv *kv, uint64_t i, struct kvfs_gguf_str *out);
/* Numeric array elements: int32 / float32 arrays. */
int kvfs_gguf_arr_i32(const struct kvfs_gguf_kv *kv, uint64_t i, int32_t *out);
int kvfs_gguf_arr_f32(const struct kvfs_gguf_kv *kv, uint64_t i, float *out);

#endif
