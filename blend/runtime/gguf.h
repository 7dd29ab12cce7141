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

enum kvfs_gguf_vtype {
    KVFS_GGUF_UINT8 = 0, KVFS_GGUF_INT8 = 1, KVFS_GGUF_UINT16 = 2, KVFS_GGUF_INT16 = 3,
    KVFS_GGUF_UINT32 = 4, KVFS_GGUF_INT32 = 5, KVFS_GGUF_FLOAT32 = 6, KVFS_GGUF_BOOL = 7,
    KVFS_GGUF_STRING = 8, KVFS_GGUF_ARRAY = 9, KVFS_GGUF_UINT64 = 10, KVFS_GGUF_INT64 = 11,
    KVFS_GGUF_FLOAT64 = 12,
};

/* ggml tensor types we know (values as in ggml.h); Q8_1 and Q8_K only as
 * activation types (the backends' act_quant) */
enum kvfs_ggml_type {
    KVFS_GGML_F32 = 0, KVFS_GGML_F16 = 1, KVFS_GGML_Q4_0 = 2, KVFS_GGML_Q4_1 = 3,
    KVFS_GGML_Q5_0 = 6, KVFS_GGML_Q5_1 = 7, KVFS_GGML_Q8_0 = 8, KVFS_GGML_Q8_1 = 9,
    KVFS_GGML_Q4_K = 12, KVFS_GGML_Q5_K = 13, KVFS_GGML_Q6_K = 14, KVFS_GGML_Q8_K = 15,
    KVFS_GGML_BF16 = 30,
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

/* Tensor types kvfs decodes: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
 * Q4_K, Q5_K, Q6_K, exactly as ggml's dequantize_row_* (bit for bit). */
/* Elements per block of a type (1 for F32/F16/BF16, 32, 256); 0 if unsupported. */
uint32_t kvfs_ggml_block_size(uint32_t type);
/* Size in bytes of n elements of a ggml type; 0 if the type is unsupported or
 * n not a multiple of its block. */
uint64_t kvfs_ggml_row_size(uint32_t type, uint64_t n);
/* ggml's name of any ggml type ("Q4_K"), "unknown" for an unassigned value. */
const char *kvfs_ggml_type_name(uint32_t type);
/* Dequantize n elements (a multiple of the block size) to f32: -ENOTSUP for a
 * type we cannot decode, -EINVAL for n not a multiple of its block. */
int kvfs_ggml_dequantize(uint32_t type, const void *src, float *dst, uint64_t n);
/* Rows [0, n_rows) of n_cols elements each, stored back to back at src
 * (kvfs_ggml_row_size(type, n_cols) bytes apart), into dst[n_rows][n_cols]:
 * e.g. a tile of a weight's rows.  Errors as kvfs_ggml_dequantize's. */
int kvfs_ggml_dequantize_rows(uint32_t type, const void *src, float *dst, uint64_t n_rows, uint64_t n_cols);
/* Activations x[n] quantized to the 8-bit blocks llama.cpp's CPU backend
 * multiplies a quantized weight by (type Q8_0 or Q8_1: 32 values a block,
 * Q8_K: 256) and decoded again, bit for bit as ggml on x86; y may equal x.
 * -ENOTSUP for another type, -EINVAL for n not a multiple of the block. */
int kvfs_ggml_act_roundtrip(uint32_t type, const float *x, float *y, uint64_t n);
/* 256 activations as ggml's quantize_row_q8_K: q and the block's scale d
 * (x ~ d * q); what kvfs_ggml_act_roundtrip(Q8_K) rounds through, and what
 * the CPU backend's integer K-quant kernels multiply */
void kvfs_ggml_quantize_q8_k(const float *x, int8_t q[256], float *d);

#endif
