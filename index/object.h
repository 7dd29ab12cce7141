/* object.h - the on-disk store object that holds one chunk (see kvfs(5),
 * "STORE OBJECTS"):
 *
 *   0   "KVFSOBJ1"
 *   8   u32 version (1)
 *   12  u32 n_layer
 *   16  u64 logical_size   (size of the v1 chunk image)
 *   24  u32 header_size    (size of the v1 header region stored raw below)
 *   28  u32 reserved (0)
 *   32  frame table: n_layer x { u64 offset, u64 stored_size, u32 codec, u32 reserved }
 *   32 + 24*n_layer: the v1 header region, raw (header_size bytes)
 *   then the layers, each its own frame: codec 0 = raw layer bytes (unpadded),
 *   codec 1 = one zstd frame of them.
 *
 * Each layer is independent, so a loader can read and decompress one layer
 * with one pread.  Layers that zstd does not shrink by at least 10% are
 * stored raw (KV caches are nearly incompressible losslessly).
 */
#ifndef KVFS_OBJECT_H
#define KVFS_OBJECT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "kvformat.h"

#define KVFS_OBJ_MAGIC "KVFSOBJ1"
#define KVFS_OBJ_FIXED 32u
#define KVFS_OBJ_ENTRY 24u
#define KVFS_CODEC_RAW 0u
#define KVFS_CODEC_ZSTD 1u

struct kvfs_obj_frame {
    uint64_t offset;
    uint64_t stored_size;
    uint32_t codec;
};

struct kvfs_obj_info {
    uint32_t n_layer;
    uint64_t logical_size;
    uint32_t header_size;
    uint64_t header_offset;          /* where the v1 header region starts */
    struct kvfs_obj_frame *frames;   /* n_layer, malloc'ed */
};

/* An encoded object as the parts to write in order: the prefix and any
 * zstd frames live in `owned`; raw frames point into the image itself (which
 * must outlive the parts), so storing a chunk copies its bytes once, into the
 * file, not into a buffer first. */
struct kvfs_obj_parts {
    struct iovec *iov;
    int n;
    uint8_t *owned;
    size_t len; /* the object's size: the parts' lengths summed */
};
int kvfs_obj_encode_parts(const void *image, const struct kvfs_header *h, int zstd_level, struct kvfs_obj_parts *out);
void kvfs_obj_parts_free(struct kvfs_obj_parts *p);

/* Encode a verified chunk image into an object (malloc'ed *out, *out_len). */
int kvfs_obj_encode(const void *image, const struct kvfs_header *h, int zstd_level,
                    uint8_t **out, size_t *out_len);

/* Read and check the object prefix (fixed part, frame table, v1 header) from
 * an open fd: fills info and parses the v1 header into hdr_buf (malloc'ed,
 * kept alive by the caller because hdr points into it).  obj_size is the
 * object's file size, to bound the frames.  -EINVAL/-EPROTO/-EBADMSG on
 * malformed objects. */
int kvfs_obj_read_prefix(int fd, uint64_t obj_size, struct kvfs_obj_info *info,
                         uint8_t **hdr_buf, struct kvfs_header *hdr, char *err, size_t errlen);
void kvfs_obj_info_free(struct kvfs_obj_info *info);

/* Decode one layer (frame) into dst (at least kvfs_layer_bytes bytes) and
 * verify its checksum (-EBADMSG). */
int kvfs_obj_read_layer(int fd, const struct kvfs_obj_info *info, const struct kvfs_header *hdr,
                        uint32_t layer, void *dst);

/* Decode the whole object into a v1 image (kvfs_img_alloc'ed, logical_size). */
int kvfs_obj_decode_file(int fd, uint64_t obj_size, uint8_t **image, size_t *len,
                         char *err, size_t errlen);
/* The same into the daemon's own memory: a big image in a kept buffer
 * (bigbuf.c), never a shared one (an image only the daemon reads: a
 * llama/ view's).  kvfs_img_free frees either. */
int kvfs_obj_decode_file_private(int fd, uint64_t obj_size, uint8_t **image, size_t *len,
                                 char *err, size_t errlen);

#endif
