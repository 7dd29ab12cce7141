/* llama_state.c - llama.cpp sequence-state files to and from v1 objects
 * (llama_state.h has the layout). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvquant.h"
#include "llama_state.h"
#include "log.h"

#define K_HDR 12u /* i32 type + u64 row bytes */
#define VT_HDR 12u /* i32 type + u32 element bytes + u32 dims */

static void put32(uint8_t *p, uint32_t x)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(x >> (8 * i));
}

static void put64(uint8_t *p, uint64_t x)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(x >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

/* ---- v1 object -> state file ---------------------------------------- */

static uint64_t block_bytes(const struct kvfs_llama_view *v)
{
    return (uint64_t)v->h.n_tokens * v->kv_dim * 2u; /* f16 */
}

uint64_t kvfs_llama_state_size(uint64_t n_tokens, uint32_t n_layer, uint64_t kv_dim, uint32_t n_streams)
{
    /* magic, version, n_token, tokens, n_stream, cell_count, cells, v_trans,
     * n_layer, then per layer a K and a V header and block; then each other
     * stream's cell_count 0 */
    return 28u + 16u * n_tokens + (uint64_t)n_layer * (2u * K_HDR + 4u * n_tokens * kv_dim) +
           4u * (uint64_t)(n_streams > 1 ? n_streams - 1 : 0);
}

int kvfs_llama_view_init(struct kvfs_llama_view *v, const struct kvfs_header *h, int v_trans, uint32_t n_streams)
{
    memset(v, 0, sizeof(*v));
    if (!kvfs_dtype_known(h->dtype) || h->n_tokens == 0 || (uint64_t)h->pos0 + h->n_tokens > INT32_MAX ||
        n_streams < 1 || n_streams > KVFS_LLAMA_MAX_STREAMS)
        return -EINVAL;
    v->n_streams = n_streams;
    v->h = *h;
    v->v_trans = !!v_trans;
    v->kv_dim = h->fp.n_kv_head * h->fp.head_dim;
    uint32_t n = h->n_tokens;
    /* magic, version, n_token, tokens, n_stream, cell_count, cells, v_trans, n_layer */
    v->data0 = 12u + 4ull * n + 8u + 12ull * n + 8u;
    v->size = kvfs_llama_state_size(n, h->fp.n_layer, v->kv_dim, n_streams);
    v->prelude = malloc(v->data0);
    if (!v->prelude)
        return -ENOMEM;
    uint8_t *p = v->prelude;
    put32(p, KVFS_LLAMA_SEQ_MAGIC), put32(p + 4, KVFS_LLAMA_SEQ_VERSION), put32(p + 8, n);
    p += 12;
    for (uint32_t t = 0; t < n; t++, p += 4)
        put32(p, kvfs_header_token(h, t));
    put32(p, n_streams), put32(p + 4, n); /* the first stream holds the n cells */
    p += 8;
    for (uint32_t t = 0; t < n; t++, p += 12) {
        put32(p, h->pos0 + t);
        put32(p + 4, 1); /* one sequence: 0 */
        put32(p + 8, 0);
    }
    put32(p, (uint32_t)v->v_trans), put32(p + 4, h->fp.n_layer);
    return 0;
}

void kvfs_llama_view_free(struct kvfs_llama_view *v)
{
    free(v->prelude);
    v->prelude = NULL;
}

/* Element e of layer l's K (which 0) or V (1) rows, as f16. */
static uint16_t elem_f16(const struct kvfs_llama_view *v, const uint8_t *obj, uint32_t l, int which, uint64_t e)
{
    struct kvfs_layer_entry le;
    kvfs_layer_entry_get(&v->h, l, &le);
    int codec = kvfs_dtype_quantized(v->h.dtype);
    if (codec) /* converted to the engine's f16, element by element from its block */
        return kvfs_f32_to_f16(kvfs_kvq_elem(codec, obj + le.offset, v->h.n_tokens, v->kv_dim, which,
                                             (uint32_t)(e / v->kv_dim), (uint32_t)(e % v->kv_dim)));
    size_t ds = kvfs_dtype_size(v->h.dtype);
    const uint8_t *p = obj + le.offset + ((uint64_t)which * v->h.n_tokens * v->kv_dim + e) * ds;
    uint16_t x = (uint16_t)(p[0] | p[1] << 8);
    if (v->h.dtype == KVFS_DTYPE_F16)
        return x;
    if (v->h.dtype == KVFS_DTYPE_BF16)
        return kvfs_f32_to_f16(kvfs_bf16_to_f32(x));
    float f;
    uint32_t u = get32(p);
    memcpy(&f, &u, 4);
    return kvfs_f32_to_f16(f);
}

/* bytes [from, from + len) of layer l's K or V block as the state holds it */
static void block_read(const struct kvfs_llama_view *v, const uint8_t *obj, uint32_t l, int which, uint64_t from,
                       uint8_t *dst, size_t len)
{
    int trans = which == 1 && v->v_trans;
    if (v->h.dtype == KVFS_DTYPE_F16 && !trans) { /* the object's own bytes */
        struct kvfs_layer_entry le;
        kvfs_layer_entry_get(&v->h, l, &le);
        memcpy(dst, obj + le.offset + (uint64_t)which * block_bytes(v) + from, len);
        return;
    }
    uint32_t n = v->h.n_tokens;
    for (size_t i = 0; i < len;) {
        uint64_t b = from + i, e = b / 2; /* the state's element e */
        if (trans) /* dim j of cell c, stored at [c][j] */
            e = (e % n) * v->kv_dim + e / n;
        uint16_t x = elem_f16(v, obj, l, which, e);
        uint8_t le2[2] = {(uint8_t)x, (uint8_t)(x >> 8)};
        for (unsigned k = (unsigned)(b & 1); k < 2 && i < len; k++)
            dst[i++] = le2[k];
    }
}

size_t kvfs_llama_view_read(const struct kvfs_llama_view *v, const uint8_t *obj, uint64_t off, void *dst, size_t len)
{
    if (off >= v->size)
        return 0;
    if (len > v->size - off)
        len = (size_t)(v->size - off);
    uint8_t *out = dst;
    size_t done = 0;
    uint64_t blk = block_bytes(v), section = K_HDR + blk; /* one layer's K (or V) */
    uint64_t tail = v->size - 4u * (v->n_streams - 1); /* the empty streams: cell_count 0 each */
    while (done < len) {
        uint64_t at = off + done;
        size_t want = len - done, n;
        if (at >= tail) {
            memset(out + done, 0, want);
            done += want;
            continue;
        }
        if (want > tail - at)
            want = (size_t)(tail - at);
        if (at < v->data0) {
            n = (size_t)(v->data0 - at) < want ? (size_t)(v->data0 - at) : want;
            memcpy(out + done, v->prelude + at, n);
            done += n;
            continue;
        }
        uint64_t r = at - v->data0, per_kind = section * v->h.fp.n_layer;
        int which = r >= per_kind;
        r -= (uint64_t)which * per_kind;
        uint32_t l = (uint32_t)(r / section);
        uint64_t in = r % section;
        if (in < K_HDR) {
            uint8_t hdr[K_HDR];
            put32(hdr, KVFS_GGML_F16);
            if (which == 1 && v->v_trans) {
                put32(hdr + 4, 2);
                put32(hdr + 8, v->kv_dim);
            } else {
                put64(hdr + 4, 2ull * v->kv_dim);
            }
            n = (size_t)(K_HDR - in) < want ? (size_t)(K_HDR - in) : want;
            memcpy(out + done, hdr + in, n);
        } else {
            in -= K_HDR;
            n = (size_t)(blk - in) < want ? (size_t)(blk - in) : want;
            block_read(v, obj, l, which, in, out + done, n);
        }
        done += n;
    }
    return done;
}

/* ---- state file -> v1 object ----------------------------------------- */

struct reader {
    const uint8_t *p;
    size_t len, at;
};

static int take(struct reader *r, size_t n, const uint8_t **out)
{
    if (n > r->len - r->at)
        return -EINVAL;
    *out = r->p + r->at;
    r->at += n;
    return 0;
}

static int take32(struct reader *r, uint32_t *x)
{
    const uint8_t *p;
    int rc = take(r, 4, &p);
    if (!rc)
        *x = get32(p);
    return rc;
}

static uint32_t dtype_of_ggml(uint32_t t)
{
    return t == KVFS_GGML_F32 ? KVFS_DTYPE_F32 : t == KVFS_GGML_F16 ? KVFS_DTYPE_F16
         : t == KVFS_GGML_BF16 ? KVFS_DTYPE_BF16 : 0;
}

static const char *ggml_type_name(uint32_t t)
{
    return t == KVFS_GGML_F32 ? "f32" : t == KVFS_GGML_F16 ? "f16" : t == KVFS_GGML_BF16 ? "bf16" : "a quantized type";
}

#define TRUNC(what) kvfs_errf(err, errlen, -EINVAL, "truncated llama.cpp state: %zu bytes end inside %s", len, what)

/* One layer's K or V type header: the cache type (the same in every layer
 * and kind) and the row size the model's shapes give. */
static int layer_header(struct reader *r, int which, int trans, uint32_t l, const struct kvfs_fingerprint *fp,
                        uint32_t *dtype, size_t len, char *err, size_t errlen)
{
    const char *kind = which ? "V" : "K";
    uint32_t kv_dim = fp->n_kv_head * fp->head_dim, t, a, b = 0;
    const uint8_t *p;
    if (take(r, K_HDR, &p))
        return TRUNC("a layer header");
    t = get32(p);
    uint32_t dt = dtype_of_ggml(t);
    if (!dt)
        return kvfs_errf(err, errlen, -EINVAL, "layer %u %s: cache type %s (ggml type %u); kvfs stores f32, f16 or bf16 "
                         "caches (start the engine with --cache-type-k/-v f16)", l, kind, ggml_type_name(t), t);
    if (*dtype && dt != *dtype)
        return kvfs_errf(err, errlen, -EINVAL, "layer %u %s: cache type %s, earlier layers %s: kvfs stores one type per "
                         "chunk", l, kind, ggml_type_name(t), *dtype == KVFS_DTYPE_F32 ? "f32" :
                         *dtype == KVFS_DTYPE_F16 ? "f16" : "bf16");
    *dtype = dt;
    size_t ds = kvfs_dtype_size(dt);
    if (trans) {
        a = get32(p + 4), b = get32(p + 8);
        if (a != ds || b != kv_dim)
            return kvfs_errf(err, errlen, -EINVAL, "layer %u V: %u dims of %u bytes in the state, the model has %u "
                             "(%u KV heads x %u) of %zu", l, b, a, kv_dim, fp->n_kv_head, fp->head_dim, ds);
    } else {
        uint64_t row = get64(p + 4);
        if (row != (uint64_t)kv_dim * ds)
            return kvfs_errf(err, errlen, -EINVAL, "layer %u %s: rows of %llu bytes in the state, the model's are %llu "
                             "(%u KV heads x %u dims x %zu bytes)", l, kind, (unsigned long long)row,
                             (unsigned long long)kv_dim * ds, fp->n_kv_head, fp->head_dim, ds);
    }
    return 0;
}

/* The cells: a run of consecutive positions from *pos0, each of one
 * sequence, in any order (a KV cache shared by several slots places a
 * sequence's cells where they were free); row[i] is cell i's token row in
 * the chunk (malloc'ed). */
static int check_cells(const uint8_t *cells, uint32_t n_cells, int32_t *pos0, uint32_t **row, char *err,
                       size_t errlen)
{
    int64_t lo = INT32_MAX;
    uint8_t *seen = NULL;
    int rc = 0;
    *row = NULL;
    for (uint32_t i = 0; i < n_cells; i++) {
        const uint8_t *c = cells + 12ull * i;
        if ((int32_t)get32(c) < lo)
            lo = (int32_t)get32(c);
        if (get32(c + 4) != 1)
            return kvfs_errf(err, errlen, -EINVAL, "llama.cpp state: cell %u belongs to %u sequences (want a state "
                             "saved for one sequence)", i, get32(c + 4));
    }
    *pos0 = (int32_t)lo;
    if (*pos0 < 0)
        return kvfs_errf(err, errlen, -EINVAL, "llama.cpp state: negative position %d", *pos0);
    if (!(*row = malloc(sizeof(uint32_t) * n_cells)) || !(seen = calloc(n_cells, 1))) {
        rc = -ENOMEM;
        goto out;
    }
    for (uint32_t i = 0; i < n_cells; i++) {
        int64_t at = (int64_t)(int32_t)get32(cells + 12ull * i) - lo;
        if (at >= n_cells || seen[at]) {
            rc = kvfs_errf(err, errlen, -EINVAL, "llama.cpp state: cell %u at position %d: the %u cells are not one "
                           "run of positions from %d (a chunk is a run of consecutive positions)", i,
                           (int32_t)get32(cells + 12ull * i), n_cells, *pos0);
            goto out;
        }
        seen[at] = 1;
        (*row)[i] = (uint32_t)at;
    }
out:
    free(seen);
    if (rc) {
        free(*row);
        *row = NULL;
    }
    return rc;
}

/* llama-server packs its slot's prompt in the token list: LLAMA_TOKEN_NULL,
 * its version (1), u32 count, the tokens, u32 media count, media; *tok and
 * *n_tok then become the prompt's tokens */
static int unpack_prompt(const uint8_t **tok, uint32_t *n_tok, char *err, size_t errlen)
{
    if (*n_tok < 4 || get32(*tok) != 0xffffffffu)
        return 0;
    uint32_t pver = get32(*tok + 4), inner = get32(*tok + 8);
    if (pver != 1)
        return kvfs_errf(err, errlen, -EPROTO, "llama-server's packed prompt version %u in the state; kvfs speaks "
                         "version 1 (llama-cpp-python 0.3.36)", pver);
    if (inner > *n_tok - 4 || get32(*tok + 12 + 4ull * inner) != 0)
        return kvfs_errf(err, errlen, -EINVAL, "llama-server's packed prompt: %u tokens in a list of %u words%s",
                         inner, *n_tok, inner > *n_tok - 4 ? "" : ", with media (a multi-modal prompt)");
    *tok += 12;
    *n_tok = inner;
    return 0;
}

/* The cells' token ids, each within the vocabulary (*ids malloc'ed). */
static int token_ids(const uint8_t *tok, uint32_t n_cells, uint32_t n_vocab, uint32_t **ids, char *err,
                     size_t errlen)
{
    *ids = malloc(sizeof(uint32_t) * n_cells);
    if (!*ids)
        return -ENOMEM;
    for (uint32_t i = 0; i < n_cells; i++) {
        (*ids)[i] = get32(tok + 4ull * i);
        if ((*ids)[i] >= n_vocab) {
            uint32_t bad = (*ids)[i];
            free(*ids);
            *ids = NULL;
            return kvfs_errf(err, errlen, -EINVAL, "llama.cpp state: token %u is id %u, the model's vocabulary has %u",
                             i, bad, n_vocab);
        }
    }
    return 0;
}

/* K blocks, then V blocks (V transposed when v_trans): into the chunk's
 * layers. */
static int copy_layers(struct reader *r, struct kvfs_writer *w, const struct kvfs_fingerprint *fp, uint32_t dtype,
                       uint32_t n_cells, const uint32_t *row, uint32_t v_trans, size_t len, char *err, size_t errlen)
{
    size_t kv_dim = (size_t)fp->n_kv_head * fp->head_dim;
    size_t ds = kvfs_dtype_size(dtype), blk = kv_dim * n_cells * ds;
    const uint8_t *p;
    int rc = 0;
    for (int which = 0; which < 2 && !rc; which++)
        for (uint32_t l = 0; l < fp->n_layer && !rc; l++) {
            int trans = which && v_trans;
            if ((rc = layer_header(r, which, trans, l, fp, &dtype, len, err, errlen)))
                break;
            if (take(r, blk, &p)) {
                rc = TRUNC(which ? "a layer's V" : "a layer's K");
                break;
            }
            uint8_t *dst = (uint8_t *)kvfs_writer_layer(w, l) + (size_t)which * blk;
            if (!trans) { /* cell c's row to its position's */
                for (uint32_t c = 0; c < n_cells; c++)
                    memcpy(dst + (size_t)row[c] * kv_dim * ds, p + (size_t)c * kv_dim * ds, kv_dim * ds);
                continue;
            }
            for (size_t j = 0; j < kv_dim; j++) /* [dim][cell] -> [position][dim] */
                for (uint32_t c = 0; c < n_cells; c++)
                    memcpy(dst + ((size_t)row[c] * kv_dim + j) * ds, p + (j * n_cells + c) * ds, ds);
        }
    return rc;
}

static int ascii_alnum(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

int kvfs_llama_name_salt(const char *name, uint8_t salt[32], char *err, size_t errlen)
{
    const char *at = strstr(name, KVFS_LLAMA_SALT_MARK);
    if (!at)
        return 0;
    const char *hex = at + strlen(KVFS_LLAMA_SALT_MARK);
    char digits[KVFS_HASH_HEX_LEN + 1];
    size_t n = strnlen(hex, KVFS_HASH_HEX_LEN);
    memcpy(digits, hex, n);
    digits[n] = '\0';
    if (n < KVFS_HASH_HEX_LEN || ascii_alnum(hex[KVFS_HASH_HEX_LEN]) || kvfs_hex_to_hash(digits, salt))
        return kvfs_errf(err, errlen, -EINVAL, "'%s' wants 64 lowercase hex digits (a salt digest: "
                         "kvfsctl prefill --salt, kvfs_salt_digest) after " KVFS_LLAMA_SALT_MARK, name);
    if (strstr(hex, KVFS_LLAMA_SALT_MARK))
        return kvfs_errf(err, errlen, -EINVAL, "'%s' names more than one salt", name);
    return 1;
}

int kvfs_llama_state_to_chunk(const void *buf, size_t len, const struct kvfs_fingerprint *fp, uint32_t n_vocab,
                              struct kvfs_writer *w, char *err, size_t errlen)
{
    return kvfs_llama_state_to_chunk_salted(buf, len, fp, n_vocab, NULL, w, err, errlen);
}

int kvfs_llama_state_to_chunk_salted(const void *buf, size_t len, const struct kvfs_fingerprint *fp,
                                     uint32_t n_vocab, const uint8_t salt[32], struct kvfs_writer *w, char *err,
                                     size_t errlen)
{
    struct reader r = {buf, len, 0};
    uint32_t magic, version, n_tok, n_stream, n_cells = 0, v_trans, n_layer, dtype = 0;
    const uint8_t *tok, *cells = NULL;
    memset(w, 0, sizeof(*w));
    if (take32(&r, &magic) || take32(&r, &version))
        return kvfs_errf(err, errlen, -EPROTO, "not a llama.cpp sequence state: %zu bytes", len);
    if (magic == KVFS_LLAMA_SESSION_MAGIC)
        return kvfs_errf(err, errlen, -EPROTO, "a llama.cpp session file (llama_state_save_file, the whole context), "
                         "not a sequence state (llama_state_seq_save_file, llama-server's slot save)");
    if (magic != KVFS_LLAMA_SEQ_MAGIC)
        return kvfs_errf(err, errlen, -EPROTO, "not a llama.cpp sequence state (magic %08x, want %08x 'ggsq')", magic,
                         KVFS_LLAMA_SEQ_MAGIC);
    if (version != KVFS_LLAMA_SEQ_VERSION)
        return kvfs_errf(err, errlen, -EPROTO, "llama.cpp sequence-state version %u; kvfs speaks version %u "
                         "(llama.cpp of llama-cpp-python 0.3.36)", version, KVFS_LLAMA_SEQ_VERSION);
    if (take32(&r, &n_tok) || take(&r, 4ull * n_tok, &tok))
        return TRUNC("the token list");
    if (take32(&r, &n_stream))
        return TRUNC("the stream count");
    if (n_stream == 0 || n_stream > 4096)
        return kvfs_errf(err, errlen, -EINVAL, "llama.cpp state with %u streams", n_stream);
    uint32_t s_cells = 0; /* the stream that holds the sequence: its data follows its cells */
    for (uint32_t s = 0; s < n_stream && !n_cells; s++) {
        if (take32(&r, &n_cells))
            return TRUNC("a stream's cell count");
        s_cells = s;
    }
    if (!n_cells)
        return kvfs_errf(err, errlen, -EINVAL, "llama.cpp state holds no cells (an empty slot)");
    if (n_cells > KVFS_MAX_TOKENS || take(&r, 12ull * n_cells, &cells))
        return TRUNC("the cells");
    if (take32(&r, &v_trans) || take32(&r, &n_layer))
        return TRUNC("the data header");
    if (v_trans > 1)
        return kvfs_errf(err, errlen, -EINVAL, "llama.cpp state: v_trans %u", v_trans);
    if (n_layer != fp->n_layer)
        return kvfs_errf(err, errlen, -EINVAL, "llama.cpp state has %u layers, the model (%s) %u", n_layer, fp->arch,
                         fp->n_layer);
    int32_t pos0 = 0;
    uint32_t *row = NULL, *ids = NULL;
    int rc = check_cells(cells, n_cells, &pos0, &row, err, errlen);
    if (rc || (rc = unpack_prompt(&tok, &n_tok, err, errlen)))
        goto fail;
    /* the tokens of the cells: the same count, or a saved prompt whose last
     * (sampled, not yet decoded) tokens have no cell yet */
    if (n_tok < n_cells || (n_tok > n_cells && pos0 != 0)) {
        rc = kvfs_errf(err, errlen, -EINVAL, "llama.cpp state: %u tokens for %u cells at positions %d..", n_tok,
                       n_cells, pos0);
        goto fail;
    }
    if ((rc = token_ids(tok, n_cells, n_vocab, &ids, err, errlen)))
        goto fail;
    struct reader probe = r; /* layer 0's K type sizes the object */
    if ((rc = layer_header(&probe, 0, 0, 0, fp, &dtype, len, err, errlen)))
        goto fail;
    if ((rc = kvfs_writer_init_salted(w, fp, dtype, KVFS_FLAG_KEYS_ROPED, (uint32_t)pos0, n_cells, ids, salt))) {
        rc = kvfs_errf(err, errlen, rc, "llama.cpp state of %u cells: kvfs cannot store it", n_cells);
        goto fail;
    }
    rc = copy_layers(&r, w, fp, dtype, n_cells, row, v_trans, len, err, errlen);
    for (uint32_t s = s_cells + 1; s < n_stream && !rc; s++) { /* the other streams: empty */
        uint32_t c;
        if (take32(&r, &c))
            rc = TRUNC("a stream's cell count");
        else if (c)
            rc = kvfs_errf(err, errlen, -EINVAL, "llama.cpp state holds cells in several streams; a chunk is one "
                           "sequence (save one slot)");
    }
    if (!rc && r.at != len)
        rc = kvfs_errf(err, errlen, -EINVAL, "llama.cpp state: %zu trailing bytes after the cache", len - r.at);
    if (!rc)
        rc = kvfs_writer_finish(w);
fail:
    if (rc)
        kvfs_writer_free(w);
    free(row);
    free(ids);
    return rc;
}
