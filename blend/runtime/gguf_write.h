/* gguf_write.h - write small GGUF files (synthetic test models). */
#ifndef KVFS_GGUF_WRITE_H
#define KVFS_GGUF_WRITE_H
#include <stdint.h>
#include <stdio.h>

struct kvfs_gguf_writer; /* opaque */

int kvfs_gguf_writer_new(struct kvfs_gguf_writer **out);
void kvfs_gguf_writer_free(struct kvfs_gguf_writer *w);
int kvfs_gguf_add_str(struct kvfs_gguf_writer *w, const char *key, const char *val);
int kvfs_gguf_add_u32(struct kvfs_gguf_writer *w, const char *key, uint32_t val);
int kvfs_gguf_add_f32(struct kvfs_gguf_writer *w, const char *key, float val);
int kvfs_gguf_add_bool(struct kvfs_gguf_writer *w, const char *key, int val);
int kvfs_gguf_add_str_array(struct kvfs_gguf_writer *w, const char *key, const char *const *vals, uint64_t n);
int kvfs_gguf_add_f32_array(struct kvfs_gguf_writer *w, const char *key, const float *vals, uint64_t n);
int kvfs_gguf_add_bool_array(struct kvfs_gguf_writer *w, const char *key, const uint8_t *vals, uint64_t n);
int kvfs_gguf_add_i32_array(struct kvfs_gguf_writer *w, const char *key, const int32_t *vals, uint64_t n);
/* An F32 tensor of ne0 x ne1 (ne0 fastest); data is copied. */
int kvfs_gguf_add_tensor_f32(struct kvfs_gguf_writer *w, const char *name, uint64_t ne0, uint64_t ne1,
                             const float *data);
/* ... of ne0 x ne1 x ne2 (the experts' tensors: one ne0 x ne1 slice each) */
int kvfs_gguf_add_tensor_f32_3d(struct kvfs_gguf_writer *w, const char *name, uint64_t ne0, uint64_t ne1,
                                uint64_t ne2, const float *data);
int kvfs_gguf_write_file(struct kvfs_gguf_writer *w, const char *path);

#endif
