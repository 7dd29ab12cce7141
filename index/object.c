/* object.c - encode/decode store objects (per-layer zstd frames). */
#include "image.h"
#include "bigbuf.h"
#include "object.h"
#include "parallel.h"
#include "log.h" /* kvfs_errf */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <zstd.h>

static uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static void wr32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void wr64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

static int pread_full(int fd, void *buf, size_t len, uint64_t off)
{
    uint8_t *p = buf;
    while (len) {
        ssize_t n = pread(fd, p, len, (off_t)off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0)
            return -EIO; /* object shorter than its table says */
        p += n;
        len -= (size_t)n;
        off += (uint64_t)n;
    }
    return 0;
}

/* Whether zstd may save the 10% a frame needs, judged from a sample: a
 * slice from the start of the layer's K and one from its V.  KV layers are
 * mostly close to incompressible (~7% at level 1), and compressing a whole
 * layer only to store it raw cost more than all the rest of an ingest. */
#define SAMPLE_BYTES (16u << 10)
static int worth_compressing(ZSTD_CCtx *cctx, const uint8_t *src, uint64_t lbytes, int level, uint8_t *scratch,
                             size_t scratch_cap)
{
    if (lbytes <= 4 * SAMPLE_BYTES)
        return 1; /* small: the whole layer is as cheap as a sample */
    size_t in = 0, out = 0;
    const uint64_t at[2] = {0, lbytes / 2};
    for (int i = 0; i < 2; i++) {
        size_t c = ZSTD_compressCCtx(cctx, scratch, scratch_cap, src + at[i], SAMPLE_BYTES, level);
        if (ZSTD_isError(c))
            return 1;
        in += SAMPLE_BYTES;
        out += c;
    }
    /* the frame's rule (10% saved) with a point of margin: on SmolLM2's K/V
     * a layer's samples compress within half a point of the whole layer */
    return out < in - in * 9 / 100;
}

int kvfs_obj_encode_parts(const void *image, const struct kvfs_header *h, int zstd_level, struct kvfs_obj_parts *out)
{
    const uint8_t *img = image;
    uint32_t nl = h->fp.n_layer;
    uint64_t largest = 0; /* layer, for the frames' room */
    for (uint32_t l = 0; l < nl; l++)
        largest = kvfs_layer_bytes(h, l) > largest ? kvfs_layer_bytes(h, l) : largest;
    uint64_t prefix = KVFS_OBJ_FIXED + (uint64_t)KVFS_OBJ_ENTRY * nl + h->header_size;
    size_t bound = zstd_level > 0 ? ZSTD_compressBound(largest) : 0;
    /* the prefix, then room for every layer's frame should all compress:
     * pages never written are never touched */
    uint8_t *buf = malloc(prefix + (uint64_t)nl * bound), *scratch = NULL, *cur;
    struct iovec *iov = calloc((size_t)nl + 1, sizeof(*iov));
    size_t scratch_cap = ZSTD_compressBound(SAMPLE_BYTES);
    ZSTD_CCtx *cctx = NULL;
    int rc = 0, n = 1;
    memset(out, 0, sizeof(*out));
    if (!buf || !iov) {
        rc = -ENOMEM;
        goto fail;
    }
    if (zstd_level > 0 && (!(cctx = ZSTD_createCCtx()) || !(scratch = malloc(scratch_cap)))) {
        rc = -ENOMEM;
        goto fail;
    }
    memset(buf, 0, KVFS_OBJ_FIXED + (size_t)KVFS_OBJ_ENTRY * nl);
    memcpy(buf, KVFS_OBJ_MAGIC, 8);
    wr32(buf + 8, 1);
    wr32(buf + 12, nl);
    wr64(buf + 16, h->file_size);
    wr32(buf + 24, h->header_size);
    memcpy(buf + prefix - h->header_size, img, h->header_size);
    iov[0].iov_base = buf;
    iov[0].iov_len = prefix;
    cur = buf + prefix;
    uint64_t pos = prefix;
    for (uint32_t l = 0; l < nl; l++) {
        const uint8_t *src = img + kvfs_layer_offset(h, l);
        uint64_t lbytes = kvfs_layer_bytes(h, l);
        uint32_t codec = KVFS_CODEC_RAW;
        uint64_t sz = lbytes;
        if (cctx && worth_compressing(cctx, src, lbytes, zstd_level, scratch, scratch_cap)) {
            size_t c = ZSTD_compressCCtx(cctx, cur, bound, src, lbytes, zstd_level);
            if (!ZSTD_isError(c) && c < lbytes - lbytes / 10) {
                codec = KVFS_CODEC_ZSTD;
                sz = c;
            }
        }
        /* a raw frame is the image's own bytes: written from there, no copy */
        const void *from = codec == KVFS_CODEC_RAW ? (const void *)src : (const void *)cur;
        if ((uint8_t *)iov[n - 1].iov_base + iov[n - 1].iov_len == from)
            iov[n - 1].iov_len += sz; /* consecutive in memory: one part */
        else {
            iov[n].iov_base = (void *)from;
            iov[n++].iov_len = sz;
        }
        if (codec == KVFS_CODEC_ZSTD)
            cur += sz;
        uint8_t *e = buf + KVFS_OBJ_FIXED + (uint64_t)KVFS_OBJ_ENTRY * l;
        wr64(e, pos);
        wr64(e + 8, sz);
        wr32(e + 16, codec);
        pos += sz;
    }
    out->iov = iov;
    out->n = n;
    out->owned = buf;
    out->len = pos;
    ZSTD_freeCCtx(cctx);
    free(scratch);
    return 0;
fail:
    ZSTD_freeCCtx(cctx);
    free(scratch);
    free(buf);
    free(iov);
    return rc;
}

void kvfs_obj_parts_free(struct kvfs_obj_parts *p)
{
    free(p->owned);
    free(p->iov);
    memset(p, 0, sizeof(*p));
}

int kvfs_obj_encode(const void *image, const struct kvfs_header *h, int zstd_level, uint8_t **out,
                    size_t *out_len)
{
    struct kvfs_obj_parts p;
    int rc = kvfs_obj_encode_parts(image, h, zstd_level, &p);
    if (rc)
        return rc;
    uint8_t *buf = malloc(p.len ? p.len : 1), *at = buf;
    for (int i = 0; buf && i < p.n; i++) {
        memcpy(at, p.iov[i].iov_base, p.iov[i].iov_len);
        at += p.iov[i].iov_len;
    }
    kvfs_obj_parts_free(&p);
    if (!buf)
        return -ENOMEM;
    *out = buf;
    *out_len = (size_t)(at - buf);
    return 0;
}

void kvfs_obj_info_free(struct kvfs_obj_info *info)
{
    free(info->frames);
    info->frames = NULL;
}

int kvfs_obj_read_prefix(int fd, uint64_t obj_size, struct kvfs_obj_info *info, uint8_t **hdr_buf,
                         struct kvfs_header *hdr, char *err, size_t errlen)
{
    uint8_t fixed[KVFS_OBJ_FIXED];
    uint8_t *table = NULL, *hb = NULL;
    int rc;
    memset(info, 0, sizeof(*info));
    *hdr_buf = NULL;
    if (obj_size < KVFS_OBJ_FIXED)
        return kvfs_errf(err, errlen, -EINVAL, "object truncated (%llu bytes)", (unsigned long long)obj_size);
    if ((rc = pread_full(fd, fixed, sizeof(fixed), 0)))
        return kvfs_errf(err, errlen, rc, "object read failed: %s", strerror(-rc));
    if (memcmp(fixed, KVFS_OBJ_MAGIC, 8) != 0 || rd32(fixed + 8) != 1)
        return kvfs_errf(err, errlen, -EPROTO, "not a kvfs store object (bad magic or version)");
    info->n_layer = rd32(fixed + 12);
    info->logical_size = rd64(fixed + 16);
    info->header_size = rd32(fixed + 24);
    if (info->n_layer == 0 || info->n_layer > KVFS_MAX_LAYERS || info->header_size < KVFS_FIXED_HEADER_SIZE ||
        info->header_size > (64u << 20))
        return kvfs_errf(err, errlen, -EINVAL, "object prefix has impossible sizes");
    size_t tlen = (size_t)KVFS_OBJ_ENTRY * info->n_layer;
    info->header_offset = KVFS_OBJ_FIXED + tlen;
    if (info->header_offset + info->header_size > obj_size)
        return kvfs_errf(err, errlen, -EINVAL, "object truncated in its header");
    table = malloc(tlen);
    hb = malloc(info->header_size);
    info->frames = calloc(info->n_layer, sizeof(*info->frames));
    if (!table || !hb || !info->frames) {
        rc = -ENOMEM;
        goto fail;
    }
    if ((rc = pread_full(fd, table, tlen, KVFS_OBJ_FIXED)) ||
        (rc = pread_full(fd, hb, info->header_size, info->header_offset))) {
        kvfs_errf(err, errlen, rc, "object read failed: %s", strerror(-rc));
        goto fail;
    }
    if ((rc = kvfs_header_parse(hb, info->header_size, hdr, err, errlen)))
        goto fail;
    if (hdr->fp.n_layer != info->n_layer || hdr->file_size != info->logical_size ||
        hdr->header_size != info->header_size) {
        rc = kvfs_errf(err, errlen, -EINVAL, "object prefix disagrees with its chunk header");
        goto fail;
    }
    for (uint32_t l = 0; l < info->n_layer; l++) {
        uint64_t lbytes = kvfs_layer_bytes(hdr, l);
        const uint8_t *e = table + (uint64_t)KVFS_OBJ_ENTRY * l;
        struct kvfs_obj_frame *f = &info->frames[l];
        f->offset = rd64(e);
        f->stored_size = rd64(e + 8);
        f->codec = rd32(e + 16);
        int bad = f->codec > KVFS_CODEC_ZSTD || f->offset < info->header_offset + info->header_size ||
                  f->offset > obj_size || f->stored_size > obj_size - f->offset ||
                  (f->codec == KVFS_CODEC_RAW && f->stored_size != lbytes);
        if (bad) {
            rc = kvfs_errf(err, errlen, -EINVAL, "object frame %u out of bounds or bad codec", l);
            goto fail;
        }
    }
    free(table);
    *hdr_buf = hb;
    return 0;
fail:
    free(table);
    free(hb);
    kvfs_obj_info_free(info);
    return rc;
}

int kvfs_obj_read_layer(int fd, const struct kvfs_obj_info *info, const struct kvfs_header *hdr,
                        uint32_t layer, void *dst)
{
    if (layer >= info->n_layer)
        return -EINVAL;
    const struct kvfs_obj_frame *f = &info->frames[layer];
    uint64_t lbytes = kvfs_layer_bytes(hdr, layer);
    int rc;
    if (f->codec == KVFS_CODEC_RAW) {
        if ((rc = pread_full(fd, dst, lbytes, f->offset)))
            return rc;
    } else {
        void *tmp = malloc(f->stored_size ? f->stored_size : 1);
        if (!tmp)
            return -ENOMEM;
        rc = pread_full(fd, tmp, f->stored_size, f->offset);
        if (!rc) {
            size_t n = ZSTD_decompress(dst, lbytes, tmp, f->stored_size);
            if (ZSTD_isError(n) || n != lbytes)
                rc = -EBADMSG;
        }
        free(tmp);
        if (rc)
            return rc;
    }
    return kvfs_layer_verify(hdr, layer, dst, lbytes);
}

/* Decoding a whole object: its layers are independent frames, decoded on a
 * few threads (one zstd context each), straight into the image. */
struct decode_job {
    int fd;
    const struct kvfs_obj_info *info;
    const struct kvfs_header *hdr;
    uint8_t *img;
    uint32_t first, step;
    int rc;
    uint32_t bad;
};

static void *decode_layers(void *arg)
{
    struct decode_job *j = arg;
    ZSTD_DCtx *z = NULL;
    void *tmp = NULL;
    size_t tmp_len = 0;
    for (uint32_t l = j->first; l < j->info->n_layer && !j->rc; l += j->step) {
        const struct kvfs_obj_frame *f = &j->info->frames[l];
        uint64_t lbytes = kvfs_layer_bytes(j->hdr, l), stride = (lbytes + KVFS_ALIGN - 1) / KVFS_ALIGN * KVFS_ALIGN;
        uint8_t *dst = j->img + kvfs_layer_offset(j->hdr, l);
        int rc = 0;
        if (f->codec == KVFS_CODEC_RAW) {
            rc = pread_full(j->fd, dst, lbytes, f->offset);
        } else {
            if (!z && !(z = ZSTD_createDCtx()))
                rc = -ENOMEM;
            if (!rc && f->stored_size > tmp_len) {
                free(tmp);
                tmp_len = f->stored_size;
                if (!(tmp = malloc(tmp_len)))
                    rc = -ENOMEM, tmp_len = 0;
            }
            if (!rc)
                rc = pread_full(j->fd, tmp, f->stored_size, f->offset);
            if (!rc) {
                size_t n = ZSTD_decompressDCtx(z, dst, lbytes, tmp, f->stored_size);
                if (ZSTD_isError(n) || n != lbytes)
                    rc = -EBADMSG;
            }
        }
        if (!rc)
            rc = kvfs_layer_verify(j->hdr, l, dst, lbytes);
        if (!rc)
            memset(dst + lbytes, 0, stride - lbytes);
        if (rc) {
            j->rc = rc;
            j->bad = l;
        }
    }
    ZSTD_freeDCtx(z);
    free(tmp);
    return NULL;
}

static int decode_file(int fd, uint64_t obj_size, int private_img, uint8_t **image, size_t *len, char *err,
                       size_t errlen)
{
    struct kvfs_obj_info info;
    struct kvfs_header hdr;
    uint8_t *hb = NULL;
    void *img = NULL;
    int rc = kvfs_obj_read_prefix(fd, obj_size, &info, &hb, &hdr, err, errlen);
    if (rc)
        return rc;
    /* big images on 2 MiB boundaries, as huge pages where the kernel allows:
     * fresh memory faulted in 4 KiB at a time costs as much as decoding */
    size_t huge = (size_t)2 << 20, align = info.logical_size >= 2 * huge ? huge : KVFS_ALIGN;
    uint8_t *big = NULL; /* private: a kept buffer, memory already touched (no huge pages wanted) */
    if (private_img && info.logical_size >= KVFS_BIG_MIN && kvfs_big_alloc(info.logical_size, 0, &big, NULL) == 0)
        img = big;
    else if (private_img ? (posix_memalign(&img, align, info.logical_size) ? -ENOMEM : 0)
                         : (rc = kvfs_img_alloc(info.logical_size, align, (uint8_t **)&img))) {
        rc = rc ? rc : -ENOMEM;
        goto free_info;
    }
#ifdef MADV_HUGEPAGE
    if (align == huge && !big)
        madvise(img, info.logical_size & ~(huge - 1), MADV_HUGEPAGE);
#endif
    memcpy(img, hb, hdr.header_size);
    int nt = kvfs_cores(8);
    if ((uint32_t)nt > info.n_layer)
        nt = info.n_layer ? (int)info.n_layer : 1;
    if (info.logical_size < huge)
        nt = 1; /* small chunks: threads cost more than they save */
    struct decode_job jobs[8];
    for (int t = 0; t < nt; t++)
        jobs[t] = (struct decode_job){fd, &info, &hdr, img, (uint32_t)t, (uint32_t)nt, 0, 0};
    kvfs_parallel_run(decode_layers, jobs, sizeof(jobs[0]), nt);
    int bad = -1;
    for (int t = 0; t < nt; t++) /* report the first bad layer */
        if (jobs[t].rc && (bad < 0 || jobs[t].bad < jobs[bad].bad))
            bad = t;
    if (bad >= 0) {
        rc = jobs[bad].rc;
        kvfs_errf(err, errlen, rc, "layer %u: %s", jobs[bad].bad,
                  rc == -EBADMSG ? "checksum mismatch or corrupt frame" : strerror(-rc));
        goto free_img;
    }
    *image = img;
    *len = info.logical_size;
    free(hb);
    kvfs_obj_info_free(&info);
    return 0;
free_img:
    kvfs_img_free(img);
free_info:
    free(hb);
    kvfs_obj_info_free(&info);
    return rc;
}

int kvfs_obj_decode_file(int fd, uint64_t obj_size, uint8_t **image, size_t *len, char *err, size_t errlen)
{
    return decode_file(fd, obj_size, 0, image, len, err, errlen);
}

int kvfs_obj_decode_file_private(int fd, uint64_t obj_size, uint8_t **image, size_t *len, char *err,
                                 size_t errlen)
{
    return decode_file(fd, obj_size, 1, image, len, err, errlen);
}
