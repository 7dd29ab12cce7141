/* kvformat.c - kvfs chunk file format v1: parse, verify, write, hash. */
#include "kvformat.h"
#include "bigbuf.h"

#include "kvquant.h"
#include "log.h" /* kvfs_errf */

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <xxhash.h>

#define OFF_MAGIC 0
#define OFF_VERSION 8
#define OFF_HEADER_SIZE 12
#define OFF_FILE_SIZE 16
#define OFF_DTYPE 24
#define OFF_FLAGS 28
#define OFF_NTOKENS 32
#define OFF_POS0 36
#define OFF_FP 40
#define OFF_CHECKSUM 120
#define FP_BYTES 80
#define LAYER_ENTRY_BYTES 24

static uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static void wr32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void wr64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

static uint64_t align_up(uint64_t v) { return (v + KVFS_ALIGN - 1) / KVFS_ALIGN * KVFS_ALIGN; }

size_t kvfs_dtype_size(uint32_t dtype)
{
    switch (dtype) {
    case KVFS_DTYPE_F32: return 4;
    case KVFS_DTYPE_F16: return 2;
    case KVFS_DTYPE_BF16: return 2;
    default: return 0;
    }
}

int kvfs_dtype_quantized(uint32_t dtype)
{
    return dtype == KVFS_DTYPE_Q8 ? KVFS_KVQ_Q8 : dtype == KVFS_DTYPE_Q4 ? KVFS_KVQ_Q4
         : dtype == KVFS_DTYPE_Q4S ? KVFS_KVQ_Q4S : 0;
}

int kvfs_dtype_known(uint32_t dtype) { return kvfs_dtype_size(dtype) || kvfs_dtype_quantized(dtype); }

static const char *const dtype_names[] = {NULL, "f32", "f16", "bf16", "q8", "q4", "q4s"};

const char *kvfs_dtype_name(uint32_t dtype)
{
    return kvfs_dtype_known(dtype) ? dtype_names[dtype] : "?";
}

uint32_t kvfs_dtype_parse(const char *name)
{
    for (uint32_t d = 1; d < sizeof(dtype_names) / sizeof(dtype_names[0]); d++)
        if (name && !strcmp(name, dtype_names[d]))
            return d;
    return 0;
}

void kvfs_layer_shape_get(const struct kvfs_header *h, uint32_t layer, struct kvfs_layer_shape *out)
{
    if (!(h->flags & KVFS_FLAG_LAYER_SHAPES) || !h->layer_shapes) {
        *out = (struct kvfs_layer_shape){h->fp.n_kv_head, h->fp.head_dim, h->fp.rope_dim, layer};
        return;
    }
    const uint8_t *e = h->layer_shapes + (uint64_t)layer * KVFS_LAYER_SHAPE_BYTES;
    *out = (struct kvfs_layer_shape){rd32(e), rd32(e + 4), rd32(e + 8), rd32(e + 12)};
}

uint32_t kvfs_layer_kv_dim(const struct kvfs_header *h, uint32_t layer)
{
    struct kvfs_layer_shape s;
    kvfs_layer_shape_get(h, layer, &s);
    return s.n_kv_head * s.head_dim;
}

uint64_t kvfs_layer_bytes(const struct kvfs_header *h, uint32_t layer)
{
    struct kvfs_layer_shape s;
    kvfs_layer_shape_get(h, layer, &s);
    if (s.kv_source != layer)
        return 0;
    uint32_t kv_dim = s.n_kv_head * s.head_dim;
    int codec = kvfs_dtype_quantized(h->dtype);
    if (codec)
        return h->flags & KVFS_FLAG_V_FROM_K ? kvfs_kvq_k_layer_bytes(codec, h->n_tokens, kv_dim)
                                             : kvfs_kvq_layer_bytes(codec, h->n_tokens, kv_dim);
    return (h->flags & KVFS_FLAG_V_FROM_K ? 1ull : 2ull) * h->n_tokens * kv_dim * kvfs_dtype_size(h->dtype);
}

uint64_t kvfs_layer_offset(const struct kvfs_header *h, uint32_t layer)
{
    if (!(h->flags & KVFS_FLAG_LAYER_SHAPES)) /* every layer alike */
        return h->header_size + (uint64_t)layer * align_up(kvfs_layer_bytes(h, 0));
    uint64_t off = h->header_size;
    for (uint32_t l = 0; l < layer; l++)
        off += align_up(kvfs_layer_bytes(h, l));
    return off;
}

/* bytes of the header before its padding */
static uint64_t header_used(uint32_t n_tokens, uint32_t n_layer, uint32_t flags)
{
    return KVFS_FIXED_HEADER_SIZE + 4ull * n_tokens + (uint64_t)LAYER_ENTRY_BYTES * n_layer +
           (flags & KVFS_FLAG_SALTED ? KVFS_SALT_BYTES : 0) +
           (flags & KVFS_FLAG_LAYER_SHAPES ? (uint64_t)KVFS_LAYER_SHAPE_BYTES * n_layer : 0);
}

uint32_t kvfs_header_size_for_flags(uint32_t n_tokens, uint32_t n_layer, uint32_t flags)
{
    return (uint32_t)align_up(header_used(n_tokens, n_layer, flags));
}

uint32_t kvfs_header_size_for(uint32_t n_tokens, uint32_t n_layer)
{
    return kvfs_header_size_for_flags(n_tokens, n_layer, 0);
}

uint64_t kvfs_file_size_for(const struct kvfs_header *h)
{
    struct kvfs_header t = *h; /* kvfs_layer_offset counts from header_size */
    t.header_size = kvfs_header_size_for_flags(h->n_tokens, h->fp.n_layer, h->flags);
    uint32_t last = h->fp.n_layer - 1;
    return kvfs_layer_offset(&t, last) + align_up(kvfs_layer_bytes(&t, last));
}

/* A layer shape table's rules (kvfs(5), Layer shapes): 0 or a reason */
static const char *shapes_check(const struct kvfs_header *h, uint32_t *bad)
{
    for (uint32_t l = 0; l < h->fp.n_layer; l++) {
        struct kvfs_layer_shape s, src;
        kvfs_layer_shape_get(h, l, &s);
        *bad = l;
        if (s.kv_source > l)
            return "reads a later layer's cache";
        kvfs_layer_shape_get(h, s.kv_source, &src);
        if (s.kv_source != l && (src.kv_source != s.kv_source || memcmp(&s, &src, 12)))
            return "reads a layer that stores no cache, or has another shape than its source";
        if (s.n_kv_head == 0 || s.n_kv_head > h->fp.n_kv_head || s.head_dim == 0 || s.head_dim > h->fp.head_dim ||
            h->fp.n_head % s.n_kv_head || s.rope_dim > s.head_dim || s.rope_dim % 2)
            return "bad shape (KV heads, head width or rotated dims)";
        /* quantization blocks run along each layer's own row (kvquant.h),
         * as along the fingerprint's row for other chunks */
        if (kvfs_dtype_quantized(h->dtype) && (s.n_kv_head * s.head_dim) % 64)
            return "a quantized dtype (q8, q4, q4s) needs the layer's kv_dim (KV heads x head width) a multiple of 64";
    }
    return NULL;
}

void kvfs_fingerprint_encode(const struct kvfs_fingerprint *fp, uint8_t out[80])
{
    memset(out, 0, FP_BYTES);
    wr32(out + 0, fp->n_layer);
    wr32(out + 4, fp->n_kv_head);
    wr32(out + 8, fp->head_dim);
    wr32(out + 12, fp->rope_type);
    memcpy(out + 16, &fp->rope_theta, 4);
    wr32(out + 20, fp->rope_dim);
    memcpy(out + 24, fp->arch, 16);
    memcpy(out + 40, fp->model_id, 32);
    wr32(out + 72, fp->n_head);
    wr32(out + 76, fp->n_embd);
}

static void fingerprint_decode(const uint8_t *in, struct kvfs_fingerprint *fp)
{
    fp->n_layer = rd32(in + 0);
    fp->n_kv_head = rd32(in + 4);
    fp->head_dim = rd32(in + 8);
    fp->rope_type = rd32(in + 12);
    memcpy(&fp->rope_theta, in + 16, 4);
    fp->rope_dim = rd32(in + 20);
    memcpy(fp->arch, in + 24, 16);
    memcpy(fp->model_id, in + 40, 32);
    fp->n_head = rd32(in + 72);
    fp->n_embd = rd32(in + 76);
}

static int sha256(const void *const *parts, const size_t *lens, int n, uint8_t digest[32])
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned int dlen = 0;
    int ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    for (int i = 0; ok && i < n; i++)
        ok = EVP_DigestUpdate(ctx, parts[i], lens[i]);
    ok = ok && EVP_DigestFinal_ex(ctx, digest, &dlen) && dlen == 32;
    EVP_MD_CTX_free(ctx);
    return ok ? 0 : -EIO;
}

void kvfs_fingerprint_id(const struct kvfs_fingerprint *fp, char hex[17])
{
    uint8_t enc[FP_BYTES], digest[32];
    kvfs_fingerprint_encode(fp, enc);
    const void *parts[] = {enc};
    size_t lens[] = {FP_BYTES};
    if (sha256(parts, lens, 1, digest) != 0)
        memset(digest, 0, sizeof(digest));
    static const char *x = "0123456789abcdef";
    for (int i = 0; i < 8; i++) {
        hex[2 * i] = x[digest[i] >> 4];
        hex[2 * i + 1] = x[digest[i] & 15];
    }
    hex[16] = '\0';
}

int kvfs_content_hash(const struct kvfs_header *h, uint8_t digest[32])
{
    static const char domain[] = "kvfs-chunk-v1"; /* hashed with its NUL */
    uint8_t fp[FP_BYTES], meta[16];
    kvfs_fingerprint_encode(&h->fp, fp);
    wr32(meta + 0, h->dtype);
    wr32(meta + 4, h->flags);
    wr32(meta + 8, h->pos0);
    wr32(meta + 12, h->n_tokens);
    int salted = (h->flags & KVFS_FLAG_SALTED) != 0;
    if (salted && !h->salt)
        return -EINVAL;
    const void *parts[] = {domain, fp, meta, h->token_bytes, h->salt};
    size_t lens[] = {sizeof(domain), FP_BYTES, sizeof(meta), 4ull * h->n_tokens, KVFS_SALT_BYTES};
    return sha256(parts, lens, 4 + salted, digest);
}

int kvfs_salt_digest(const void *salt, size_t len, uint8_t out[32])
{
    static const char domain[] = "kvfs-salt-v1"; /* hashed with its NUL */
    const void *parts[] = {domain, len ? salt : ""};
    size_t lens[] = {sizeof(domain), len};
    return sha256(parts, lens, 2, out);
}

int kvfs_ids_chunk_hash(const struct kvfs_fingerprint *fp, uint32_t dtype, uint32_t flags, uint32_t pos0,
                        const int32_t *ids, size_t n, const uint8_t *salt, char hex[KVFS_HASH_HEX_LEN + 1])
{
    uint8_t *tb = malloc(4 * n + 1), d[32];
    if (!tb)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        wr32(tb + 4 * i, (uint32_t)ids[i]);
    struct kvfs_header h = {.dtype = dtype, .flags = flags | (salt ? KVFS_FLAG_SALTED : 0), .n_tokens = (uint32_t)n,
                            .pos0 = pos0, .fp = *fp, .token_bytes = tb, .salt = salt};
    int rc = kvfs_content_hash(&h, d);
    free(tb);
    if (!rc)
        kvfs_hash_to_hex(d, hex);
    return rc;
}

void kvfs_hash_to_hex(const uint8_t digest[32], char hex[KVFS_HASH_HEX_LEN + 1])
{
    static const char *x = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        hex[2 * i] = x[digest[i] >> 4];
        hex[2 * i + 1] = x[digest[i] & 15];
    }
    hex[64] = '\0';
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1; /* upper case is not canonical: names are lowercase */
}

int kvfs_hex_to_hash(const char *hex, uint8_t digest[32])
{
    for (int i = 0; i < 32; i++) {
        int hi = hexval(hex[2 * i]), lo = hi < 0 ? -1 : hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -EINVAL;
        digest[i] = (uint8_t)(hi << 4 | lo);
    }
    return hex[64] == '\0' ? 0 : -EINVAL;
}

static uint64_t header_checksum(const uint8_t *buf, uint32_t header_size)
{
    /* checksum over the header with its own field zeroed */
    XXH3_state_t *st = XXH3_createState();
    static const uint8_t zeros[8];
    uint64_t v = 0;
    if (!st)
        return 0;
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, buf, OFF_CHECKSUM);
    XXH3_64bits_update(st, zeros, 8);
    XXH3_64bits_update(st, buf + OFF_CHECKSUM + 8, header_size - OFF_CHECKSUM - 8);
    v = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return v;
}

static int all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

int kvfs_header_parse(const void *vbuf, size_t len, struct kvfs_header *h, char *errmsg,
                      size_t errlen)
{
    const uint8_t *buf = vbuf;
    memset(h, 0, sizeof(*h));
    if (len < KVFS_FIXED_HEADER_SIZE)
        return kvfs_errf(errmsg, errlen, -EINVAL, "truncated: %zu bytes, a header needs at least %u",
                    len, KVFS_FIXED_HEADER_SIZE);
    if (memcmp(buf + OFF_MAGIC, KVFS_MAGIC, 8) != 0)
        return kvfs_errf(errmsg, errlen, -EPROTO, "wrong magic: not a kvfs chunk file");
    h->version = rd32(buf + OFF_VERSION);
    if (h->version != KVFS_VERSION)
        return kvfs_errf(errmsg, errlen, -EPROTO, "unsupported format version %u (this kvfs reads %u)",
                    h->version, KVFS_VERSION);
    h->header_size = rd32(buf + OFF_HEADER_SIZE);
    h->file_size = rd64(buf + OFF_FILE_SIZE);
    h->dtype = rd32(buf + OFF_DTYPE);
    h->flags = rd32(buf + OFF_FLAGS);
    h->n_tokens = rd32(buf + OFF_NTOKENS);
    h->pos0 = rd32(buf + OFF_POS0);
    fingerprint_decode(buf + OFF_FP, &h->fp);
    h->header_checksum = rd64(buf + OFF_CHECKSUM);

    if (!kvfs_dtype_known(h->dtype))
        return kvfs_errf(errmsg, errlen, -EINVAL, "unknown dtype %u (1=f32, 2=f16, 3=bf16, 4=q8, 5=q4)", h->dtype);
    if (h->flags & ~(KVFS_FLAG_KEYS_ROPED | KVFS_FLAG_BLENDED | KVFS_FLAG_FULL_PREFILL | KVFS_FLAG_SALTED |
                     KVFS_FLAG_V_FROM_K | KVFS_FLAG_LAYER_SHAPES | KVFS_FLAG_V_NARROW))
        return kvfs_errf(errmsg, errlen, -EINVAL, "unknown flags 0x%x", h->flags);
    if ((h->flags & KVFS_FLAG_LAYER_SHAPES) && (h->flags & KVFS_FLAG_V_FROM_K))
        return kvfs_errf(errmsg, errlen, -EINVAL, "layer shapes (flag 0x20) with V_FROM_K (0x10): not defined");
    if ((h->flags & KVFS_FLAG_V_NARROW) && (h->flags & (KVFS_FLAG_V_FROM_K | KVFS_FLAG_LAYER_SHAPES)))
        return kvfs_errf(errmsg, errlen, -EINVAL, "V_NARROW (flag 0x40) with V_FROM_K (0x10) or layer shapes (0x20): "
                         "not defined");
    if ((h->flags & KVFS_FLAG_FULL_PREFILL) && !(h->flags & KVFS_FLAG_BLENDED))
        return kvfs_errf(errmsg, errlen, -EINVAL, "flag FULL_PREFILL (0x4) without BLENDED (0x2)");
    if (h->n_tokens == 0 || h->n_tokens > KVFS_MAX_TOKENS)
        return kvfs_errf(errmsg, errlen, -EINVAL, "bad token count %u", h->n_tokens);
    if (h->fp.n_layer == 0 || h->fp.n_layer > KVFS_MAX_LAYERS)
        return kvfs_errf(errmsg, errlen, -EINVAL, "bad layer count %u", h->fp.n_layer);
    if (h->fp.n_kv_head == 0 || h->fp.n_kv_head > 4096 || h->fp.head_dim == 0 ||
        h->fp.head_dim > 4096 || h->fp.n_head < h->fp.n_kv_head || h->fp.n_head % h->fp.n_kv_head)
        return kvfs_errf(errmsg, errlen, -EINVAL, "bad head shape: %u heads, %u kv heads, head_dim %u",
                    h->fp.n_head, h->fp.n_kv_head, h->fp.head_dim);
    /* with LAYER_SHAPES each layer's own width is checked (shapes_check) */
    if (kvfs_dtype_quantized(h->dtype) && !(h->flags & KVFS_FLAG_LAYER_SHAPES) &&
        (h->fp.n_kv_head * h->fp.head_dim) % 64)
        return kvfs_errf(errmsg, errlen, -EINVAL, "dtype %s needs kv_dim (%u kv heads x %u) a multiple of 64",
                         kvfs_dtype_name(h->dtype), h->fp.n_kv_head, h->fp.head_dim);
    if (h->fp.rope_type != KVFS_ROPE_NORM && h->fp.rope_type != KVFS_ROPE_NEOX)
        return kvfs_errf(errmsg, errlen, -EINVAL, "unknown rope type %u", h->fp.rope_type);
    if (h->fp.rope_dim > h->fp.head_dim || h->fp.rope_dim % 2 || !(h->fp.rope_theta > 0) ||
        !isfinite(h->fp.rope_theta))
        return kvfs_errf(errmsg, errlen, -EINVAL, "bad rope parameters (dim %u, theta %g)",
                    h->fp.rope_dim, (double)h->fp.rope_theta);
    if ((h->flags & KVFS_FLAG_V_NARROW) && h->fp.rope_dim >= h->fp.head_dim)
        return kvfs_errf(errmsg, errlen, -EINVAL, "V_NARROW (flag 0x40) with rope_dim %u of head_dim %u: no V left",
                         h->fp.rope_dim, h->fp.head_dim);
    if (h->fp.arch[0] == '\0' || memchr(h->fp.arch, '\0', 16) == NULL)
        return kvfs_errf(errmsg, errlen, -EINVAL, "architecture name missing or not terminated");
    uint32_t want_size = kvfs_header_size_for_flags(h->n_tokens, h->fp.n_layer, h->flags);
    if (h->header_size != want_size)
        return kvfs_errf(errmsg, errlen, -EINVAL, "header size %u, expected %u for %u tokens, %u layers%s",
                    h->header_size, want_size, h->n_tokens, h->fp.n_layer,
                    h->flags & KVFS_FLAG_SALTED ? " and a salt" : "");
    /* with LAYER_SHAPES the file size depends on the shape table, read below */
    if (!(h->flags & KVFS_FLAG_LAYER_SHAPES) && h->file_size != kvfs_file_size_for(h))
        return kvfs_errf(errmsg, errlen, -EINVAL, "file size field %llu, expected %llu from the shape",
                    (unsigned long long)h->file_size, (unsigned long long)kvfs_file_size_for(h));
    if (len < h->header_size)
        return kvfs_errf(errmsg, errlen, -EINVAL, "truncated: %zu bytes, header alone is %u", len,
                    h->header_size);
    if (header_checksum(buf, h->header_size) != h->header_checksum)
        return kvfs_errf(errmsg, errlen, -EBADMSG, "header checksum mismatch");

    h->token_bytes = buf + KVFS_FIXED_HEADER_SIZE;
    h->layer_table = buf + KVFS_FIXED_HEADER_SIZE + 4ull * h->n_tokens;
    const uint8_t *after_table = h->layer_table + (uint64_t)h->fp.n_layer * LAYER_ENTRY_BYTES;
    if (h->flags & KVFS_FLAG_SALTED) /* covered by the header checksum above */
        h->salt = after_table;
    if (h->flags & KVFS_FLAG_LAYER_SHAPES) {
        uint32_t bad = 0;
        h->layer_shapes = after_table + (h->flags & KVFS_FLAG_SALTED ? KVFS_SALT_BYTES : 0);
        const char *why = shapes_check(h, &bad);
        if (why)
            return kvfs_errf(errmsg, errlen, -EINVAL, "layer shape %u: %s", bad, why);
    }
    if (h->file_size != kvfs_file_size_for(h))
        return kvfs_errf(errmsg, errlen, -EINVAL, "file size field %llu, expected %llu from the shape",
                    (unsigned long long)h->file_size, (unsigned long long)kvfs_file_size_for(h));
    for (uint32_t l = 0; l < h->fp.n_layer; l++) {
        const uint8_t *e = h->layer_table + (uint64_t)l * LAYER_ENTRY_BYTES;
        if (rd64(e) != kvfs_layer_offset(h, l) || rd64(e + 8) != kvfs_layer_bytes(h, l))
            return kvfs_errf(errmsg, errlen, -EINVAL, "layer table entry %u inconsistent", l);
    }
    size_t used = (size_t)header_used(h->n_tokens, h->fp.n_layer, h->flags);
    if (!all_zero(buf + used, h->header_size - used))
        return kvfs_errf(errmsg, errlen, -EINVAL, "non-zero header padding");
    return 0;
}

uint32_t kvfs_header_token(const struct kvfs_header *h, uint32_t i)
{
    return rd32(h->token_bytes + 4ull * i);
}

void kvfs_layer_entry_get(const struct kvfs_header *h, uint32_t layer, struct kvfs_layer_entry *out)
{
    const uint8_t *e = h->layer_table + (uint64_t)layer * LAYER_ENTRY_BYTES;
    out->offset = rd64(e);
    out->size = rd64(e + 8);
    out->checksum = rd64(e + 16);
}

static uint64_t layer_checksum_entry(const struct kvfs_header *h, uint32_t layer)
{
    return rd64(h->layer_table + (uint64_t)layer * LAYER_ENTRY_BYTES + 16);
}

int kvfs_layer_verify(const struct kvfs_header *h, uint32_t layer, const void *bytes, size_t len)
{
    if (layer >= h->fp.n_layer || len < kvfs_layer_bytes(h, layer))
        return -EINVAL;
    return XXH3_64bits(bytes, kvfs_layer_bytes(h, layer)) == layer_checksum_entry(h, layer) ? 0 : -EBADMSG;
}

int kvfs_file_verify(const void *vbuf, size_t len, struct kvfs_header *h, char *errmsg,
                     size_t errlen)
{
    const uint8_t *buf = vbuf;
    int rc = kvfs_header_parse(buf, len, h, errmsg, errlen);
    if (rc)
        return rc;
    if (len != h->file_size)
        return kvfs_errf(errmsg, errlen, -EINVAL, "%s: %zu bytes, header says %llu",
                    len < h->file_size ? "truncated" : "trailing data", len,
                    (unsigned long long)h->file_size);
    for (uint32_t l = 0; l < h->fp.n_layer; l++) {
        uint64_t lbytes = kvfs_layer_bytes(h, l), stride = align_up(lbytes);
        const uint8_t *p = buf + kvfs_layer_offset(h, l);
        if (kvfs_layer_verify(h, l, p, lbytes) != 0)
            return kvfs_errf(errmsg, errlen, -EBADMSG, "layer %u checksum mismatch", l);
        if (!all_zero(p + lbytes, stride - lbytes))
            return kvfs_errf(errmsg, errlen, -EINVAL, "layer %u: non-zero padding", l);
    }
    return 0;
}

int kvfs_writer_init(struct kvfs_writer *w, const struct kvfs_fingerprint *fp, uint32_t dtype,
                     uint32_t flags, uint32_t pos0, uint32_t n_tokens, const uint32_t *tokens)
{
    return kvfs_writer_init_salted(w, fp, dtype, flags, pos0, n_tokens, tokens, NULL);
}

int kvfs_writer_init_salted(struct kvfs_writer *w, const struct kvfs_fingerprint *fp, uint32_t dtype,
                            uint32_t flags, uint32_t pos0, uint32_t n_tokens, const uint32_t *tokens,
                            const uint8_t salt[32])
{
    return kvfs_writer_init_shaped(w, fp, dtype, flags, pos0, n_tokens, tokens, salt, NULL);
}

int kvfs_writer_init_shaped(struct kvfs_writer *w, const struct kvfs_fingerprint *fp, uint32_t dtype,
                            uint32_t flags, uint32_t pos0, uint32_t n_tokens, const uint32_t *tokens,
                            const uint8_t salt[32], const struct kvfs_layer_shape *shapes)
{
    memset(w, 0, sizeof(*w));
    if (salt)
        flags |= KVFS_FLAG_SALTED;
    if (shapes)
        flags |= KVFS_FLAG_LAYER_SHAPES;
    if (!kvfs_dtype_known(dtype) || n_tokens == 0 || n_tokens > KVFS_MAX_TOKENS ||
        fp->n_layer == 0 || fp->n_layer > KVFS_MAX_LAYERS ||
        (kvfs_dtype_quantized(dtype) && !shapes && (fp->n_kv_head * fp->head_dim) % 64) ||
        (!salt && (flags & KVFS_FLAG_SALTED)) || ((flags & KVFS_FLAG_LAYER_SHAPES) && !shapes) ||
        (shapes && (flags & KVFS_FLAG_V_FROM_K)) || fp->n_kv_head == 0 ||
        ((flags & KVFS_FLAG_V_NARROW) && (shapes || (flags & KVFS_FLAG_V_FROM_K) || fp->rope_dim >= fp->head_dim)) ||
        fp->n_head % fp->n_kv_head)
        return -EINVAL;
    struct kvfs_header *h = &w->hdr;
    h->version = KVFS_VERSION;
    h->dtype = dtype;
    h->flags = flags;
    h->n_tokens = n_tokens;
    h->pos0 = pos0;
    h->fp = *fp;
    h->header_size = kvfs_header_size_for_flags(n_tokens, fp->n_layer, flags);
    uint8_t *shape_bytes = NULL; /* encoded first: the file's size depends on them */
    if (shapes) {
        uint32_t bad;
        if (!(shape_bytes = malloc((size_t)KVFS_LAYER_SHAPE_BYTES * fp->n_layer)))
            return -ENOMEM;
        for (uint32_t l = 0; l < fp->n_layer; l++) {
            uint8_t *e = shape_bytes + (size_t)l * KVFS_LAYER_SHAPE_BYTES;
            wr32(e, shapes[l].n_kv_head);
            wr32(e + 4, shapes[l].head_dim);
            wr32(e + 8, shapes[l].rope_dim);
            wr32(e + 12, shapes[l].kv_source);
        }
        h->layer_shapes = shape_bytes;
        if (shapes_check(h, &bad)) {
            free(shape_bytes);
            return -EINVAL;
        }
    }
    h->file_size = kvfs_file_size_for(h);
    void *buf = NULL;
    /* a big image in a kept buffer (bigbuf.c: fresh pages cost more than
     * the copies that fill them); kvfs_writer_free and kvfs_img_free give
     * it back */
    uint8_t *big = NULL;
    if (h->file_size >= KVFS_BIG_MIN && kvfs_big_alloc(h->file_size, 0, &big, NULL) == 0)
        buf = big;
    else if (posix_memalign(&buf, KVFS_ALIGN, h->file_size) != 0) {
        free(shape_bytes);
        return -ENOMEM;
    }
    memset(buf, 0, h->file_size);
    w->buf = buf;
    w->size = h->file_size;
    uint8_t *b = w->buf;
    memcpy(b + OFF_MAGIC, KVFS_MAGIC, 8);
    wr32(b + OFF_VERSION, KVFS_VERSION);
    wr32(b + OFF_HEADER_SIZE, h->header_size);
    wr64(b + OFF_FILE_SIZE, h->file_size);
    wr32(b + OFF_DTYPE, dtype);
    wr32(b + OFF_FLAGS, flags);
    wr32(b + OFF_NTOKENS, n_tokens);
    wr32(b + OFF_POS0, pos0);
    kvfs_fingerprint_encode(fp, b + OFF_FP);
    for (uint32_t i = 0; i < n_tokens; i++)
        wr32(b + KVFS_FIXED_HEADER_SIZE + 4ull * i, tokens[i]);
    h->token_bytes = b + KVFS_FIXED_HEADER_SIZE;
    h->layer_table = b + KVFS_FIXED_HEADER_SIZE + 4ull * n_tokens;
    uint8_t *at = b + KVFS_FIXED_HEADER_SIZE + 4ull * n_tokens + (uint64_t)LAYER_ENTRY_BYTES * fp->n_layer;
    if (salt) {
        memcpy(at, salt, KVFS_SALT_BYTES);
        h->salt = at;
        at += KVFS_SALT_BYTES;
    }
    if (shapes) {
        memcpy(at, shape_bytes, (size_t)KVFS_LAYER_SHAPE_BYTES * fp->n_layer);
        h->layer_shapes = at;
        free(shape_bytes);
    }
    return 0;
}

void *kvfs_writer_layer(struct kvfs_writer *w, uint32_t layer)
{
    if (!w->buf || layer >= w->hdr.fp.n_layer)
        return NULL;
    return w->buf + kvfs_layer_offset(&w->hdr, layer);
}

int kvfs_writer_finish(struct kvfs_writer *w)
{
    if (!w->buf)
        return -EINVAL;
    struct kvfs_header *h = &w->hdr;
    uint8_t *table = w->buf + KVFS_FIXED_HEADER_SIZE + 4ull * h->n_tokens;
    for (uint32_t l = 0; l < h->fp.n_layer; l++) {
        uint64_t lbytes = kvfs_layer_bytes(h, l), stride = align_up(lbytes), off = kvfs_layer_offset(h, l);
        uint8_t *e = table + (uint64_t)l * LAYER_ENTRY_BYTES;
        const uint8_t *p = w->buf + off;
        wr64(e, off);
        wr64(e + 8, lbytes);
        wr64(e + 16, XXH3_64bits(p, lbytes));
        memset((uint8_t *)p + lbytes, 0, stride - lbytes);
    }
    h->header_checksum = header_checksum(w->buf, h->header_size);
    wr64(w->buf + OFF_CHECKSUM, h->header_checksum);
    return 0;
}

void kvfs_writer_free(struct kvfs_writer *w)
{
    if (!kvfs_big_release(w->buf))
        free(w->buf);
    memset(w, 0, sizeof(*w));
}

void kvfs_f32_encode(uint32_t dtype, const float *src, size_t n, void *dst)
{
    uint8_t *out = dst;
    if (dtype == KVFS_DTYPE_F32) {
        memcpy(out, src, sizeof(float) * n);
    } else if (dtype == KVFS_DTYPE_F16 && ((uintptr_t)out & 1) == 0) {
        kvfs_f32_to_f16_n(src, (uint16_t *)dst, n);
    } else {
        for (size_t i = 0; i < n; i++) {
            uint16_t u = dtype == KVFS_DTYPE_F16 ? kvfs_f32_to_f16(src[i]) : kvfs_f32_to_bf16(src[i]);
            memcpy(out + 2 * i, &u, 2);
        }
    }
}

/* V_FROM_K: v = k with the first rope_dim values of each head zero */
static void v_from_k(const struct kvfs_header *h, const float *k, float *v)
{
    size_t rows = (size_t)h->n_tokens * h->fp.n_kv_head, d = h->fp.head_dim, r = h->fp.rope_dim;
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < d; j++)
            v[i * d + j] = j < r ? 0.0f : k[i * d + j];
}

int kvfs_layer_decode(const struct kvfs_header *h, uint32_t layer, const void *data, float *k, float *v)
{
    if (layer >= h->fp.n_layer)
        return -EINVAL;
    if ((h->flags & KVFS_FLAG_V_FROM_K) && v) {
        int rc = kvfs_layer_decode(h, layer, data, v, NULL);
        if (!rc && k)
            memcpy(k, v, sizeof(float) * h->n_tokens * h->fp.n_kv_head * h->fp.head_dim);
        if (!rc)
            v_from_k(h, v, v);
        return rc;
    }
    if (!kvfs_layer_bytes(h, layer)) /* reads another layer's cache: nothing stored */
        return 0;
    uint32_t kv_dim = kvfs_layer_kv_dim(h, layer);
    size_t n = (size_t)h->n_tokens * kv_dim, es = kvfs_dtype_size(h->dtype);
    int codec = kvfs_dtype_quantized(h->dtype);
    if (codec && (h->flags & KVFS_FLAG_V_FROM_K)) /* the key blocks alone; v is NULL here (see above) */
        return k ? kvfs_kvq_decode_k(codec, data, h->n_tokens, kv_dim, k) : 0;
    if (codec) {
        if (!k && !v)
            return 0;
        float *tmp = (!k || !v) ? malloc(sizeof(float) * n) : NULL;
        if ((!k || !v) && !tmp)
            return -ENOMEM;
        int rc = kvfs_kvq_decode(codec, data, h->n_tokens, kv_dim, k ? k : tmp, v ? v : tmp);
        free(tmp);
        return rc;
    }
    if (!es)
        return -EINVAL;
    for (int which = 0; which < 2; which++) {
        float *out = which ? v : k;
        const uint8_t *src = (const uint8_t *)data + (size_t)which * n * es;
        for (size_t i = 0; out && i < n; i++) {
            if (h->dtype == KVFS_DTYPE_F32) {
                memcpy(&out[i], src + 4 * i, 4);
                continue;
            }
            uint16_t x;
            memcpy(&x, src + 2 * i, 2);
            out[i] = h->dtype == KVFS_DTYPE_F16 ? kvfs_f16_to_f32(x) : kvfs_bf16_to_f32(x);
        }
    }
    return 0;
}
