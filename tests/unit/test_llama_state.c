/* test_llama_state.c - the two-part llama.cpp state of a model with
 * sliding-window layers (index/llama_state.c; kvfs(5), LLAMA.CPP SEQUENCE
 * STATE), checked field by field without an engine: the non-SWA part holds
 * every cell, the SWA part all of them within the window and else the window
 * and the cell before it; the size is known before reading and partial reads
 * agree with the whole; a state with every cell in both parts reads back as
 * the same chunk, one without (what llama.cpp saves past the window) is
 * refused. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "half.h"
#include "kvquant.h"
#include "llama_state.h"
#include "synth_chunk.h"

#define NSWA 4u
#define KV_DIM 16u /* synth_chunk: 2 KV heads of 8 */

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* one part at *at: n_stream 1, cells at positions first.., its layers' K and
 * V rows those of the chunk's rows from first */
static void check_part(const uint8_t *s, uint64_t *at, const struct kvfs_header *h, const uint8_t *obj,
                       const uint16_t *layers, uint32_t n_layer, uint32_t cells, uint32_t first)
{
    const uint8_t *p = s + *at;
    CHECK_EQ(rd32(p), 1);
    CHECK_EQ(rd32(p + 4), cells);
    p += 8;
    for (uint32_t i = 0; i < cells; i++, p += 12) { /* pos, one sequence: 0 */
        CHECK_EQ(rd32(p), first + i);
        CHECK_EQ(rd32(p + 4), 1);
        CHECK_EQ(rd32(p + 8), 0);
    }
    CHECK_EQ(rd32(p), 0); /* v_trans */
    CHECK_EQ(rd32(p + 4), n_layer);
    p += 8;
    const uint64_t row = 2u * KV_DIM;
    for (int which = 0; which < 2; which++) /* every layer's K, then every layer's V */
        for (uint32_t k = 0; k < n_layer; k++) {
            CHECK_EQ(rd32(p), KVFS_GGML_F16);
            CHECK_EQ(rd32(p + 4), row); /* low half of the u64 row bytes */
            p += 12;
            struct kvfs_layer_entry e;
            kvfs_layer_entry_get(h, layers[k], &e);
            const uint8_t *src = obj + e.offset + (uint64_t)which * h->n_tokens * row;
            CHECK(memcmp(p, src + first * row, cells * row) == 0);
            p += cells * row;
        }
    *at = (uint64_t)(p - s);
}

static void check_n(uint32_t n)
{
    struct kvfs_writer w, back;
    CHECK_EQ(synth_chunk(&w, 3, n, n, KVFS_DTYPE_F16), 0);
    struct kvfs_header h;
    CHECK_EQ(kvfs_header_parse(w.buf, w.size, &h, NULL, 0), 0);
    /* layers 0 and 1 slide (the SWA cache), layer 2 is global */
    struct kvfs_llama_swa swa = {.n_swa = NSWA, .local = {1, 1, 0}};
    static const uint16_t global[] = {2}, local[] = {0, 1};
    struct kvfs_llama_view v;
    CHECK_EQ(kvfs_llama_view_init_swa(&v, &h, 0, 1, &swa), 0);
    uint32_t s = n <= NSWA ? n : NSWA + 1;
    uint64_t part = 0;
    for (int p = 0; p < 2; p++) {
        uint64_t c = p ? s : n, l = p ? 2 : 1;
        part += 16 + 12 * c + l * (24 + 4 * c * KV_DIM);
    }
    CHECK_EQ(v.size, 12 + 4 * n + part);
    CHECK_EQ(v.size, kvfs_llama_state_size_swa(n, 3, KV_DIM, 1, &swa));
    uint8_t *st = malloc(v.size), *pieces = malloc(v.size);
    CHECK(st && pieces);
    if (!st || !pieces)
        goto out;
    CHECK_EQ(kvfs_llama_view_read(&v, w.buf, 0, st, v.size), v.size);
    for (uint64_t off = 0; off < v.size;) { /* odd-sized reads cross every boundary */
        size_t len = off + 37 > v.size ? v.size - off : 37;
        CHECK_EQ(kvfs_llama_view_read(&v, w.buf, off, pieces + off, len), len);
        off += len;
    }
    CHECK(memcmp(st, pieces, v.size) == 0);
    CHECK_EQ(rd32(st + 8), n);
    for (uint32_t t = 0; t < n; t++)
        CHECK_EQ(rd32(st + 12 + 4 * t), kvfs_header_token(&h, t));
    uint64_t at = 12 + 4ull * n;
    check_part(st, &at, &h, w.buf, global, 1, n, 0);
    check_part(st, &at, &h, w.buf, local, 2, s, n - s);
    CHECK_EQ(at, v.size);
    char err[512] = "";
    int rc = kvfs_llama_state_to_chunk_swa(st, v.size, &h.fp, 50000, &swa, NULL, &back, err, sizeof(err));
    if (s == n) { /* every cell in both parts (within the window: what llama.cpp saves too): the same chunk */
        CHECK_EQ(rc, 0);
        if (!rc) {
            CHECK_EQ(back.size, w.size);
            CHECK(back.size == w.size && memcmp(back.buf, w.buf, w.size) == 0);
            kvfs_writer_free(&back);
        }
    } else {
        CHECK_EQ(rc, -EINVAL);
        CHECK(strstr(err, "sliding-window layers hold") != NULL);
    }
out:
    free(st);
    free(pieces);
    kvfs_llama_view_free(&v);
    kvfs_writer_free(&w);
}

/* A q8/q4/q4s MLA chunk (the key blocks alone): its view holds the decoded
 * K, as f16, in llama.cpp's row order (latent first), the same size as an
 * f16 chunk's view. */
static void check_mla_quantized(void)
{
    enum { NT = 40, D = 64, ROT = 16 };
    struct kvfs_fingerprint fp = {.n_layer = 2, .n_kv_head = 1, .head_dim = D, .rope_dim = ROT, .rope_theta = 1e4f,
                                  .arch = "deepseek2", .n_head = 4, .n_embd = 64};
    uint32_t tok[NT];
    static float k[NT * D], kd[NT * D];
    for (int i = 0; i < NT; i++)
        tok[i] = (uint32_t)i;
    for (int i = 0; i < NT * D; i++)
        k[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    const uint32_t dtypes[3] = {KVFS_DTYPE_Q8, KVFS_DTYPE_Q4, KVFS_DTYPE_Q4S};
    for (int q = 0; q < 3; q++) {
        struct kvfs_writer w;
        struct kvfs_header h;
        struct kvfs_llama_view v;
        char why[128];
        CHECK_EQ(kvfs_writer_init(&w, &fp, dtypes[q], KVFS_FLAG_KEYS_ROPED | KVFS_FLAG_V_FROM_K, 0, NT, tok), 0);
        for (uint32_t l = 0; l < 2; l++)
            CHECK_EQ(kvfs_kvq_encode_k(kvfs_dtype_quantized(dtypes[q]), k, NT, D, kvfs_writer_layer(&w, l)), 0);
        CHECK_EQ(kvfs_writer_finish(&w), 0);
        CHECK_EQ(kvfs_file_verify(w.buf, w.size, &h, why, sizeof(why)), 0);
        CHECK_EQ(kvfs_layer_decode(&h, 0, w.buf + h.header_size, kd, NULL), 0);
        CHECK_EQ(kvfs_llama_view_init(&v, &h, 0, 1), 0);
        uint64_t k0 = 12 + 4 * NT + 8 + 12 * NT + 8;
        CHECK_EQ(v.size, k0 + 2 * (12 + NT * D * 2));
        uint8_t *st = malloc(v.size);
        CHECK_EQ(kvfs_llama_view_read(&v, w.buf, 0, st, v.size), v.size);
        int ok = 1, moved = 0;
        for (int r = 0; r < NT; r++)
            for (int j = 0; j < D; j++) { /* llama.cpp's dim j: the latent (kvfs's j + ROT), then the rotated part */
                const uint8_t *p = st + k0 + 12 + 2 * (D * r + j);
                int src = D * r + (j < D - ROT ? j + ROT : j - (D - ROT));
                ok &= (uint16_t)(p[0] | p[1] << 8) == kvfs_f32_to_f16(kd[src]);
                moved |= kd[src] != k[src];
            }
        CHECK(ok);
        CHECK(moved); /* the decoded values, not the originals */
        free(st);
        kvfs_llama_view_free(&v);
        kvfs_writer_free(&w);
    }
}

/* gemma4: layers of their own widths (layer 0 global, 2 heads of 4; layer 1
 * sliding, 1 of 2) and a shared-KV layer 2 (reads layer 0's cache): the view
 * holds layer 0 alone in the global part, layer 1 alone in the SWA part,
 * each at its width; read in odd pieces it is the same bytes; ingested it is
 * the very same chunk */
static void check_layer_shapes(void)
{
    struct kvfs_fingerprint fp = {.n_layer = 3, .n_kv_head = 2, .head_dim = 4, .rope_dim = 4, .rope_theta = 1e4f,
                                  .arch = "gemma4", .n_head = 4, .n_embd = 32};
    struct kvfs_layer_shape sh[3] = {{2, 4, 4, 0}, {1, 2, 2, 1}, {2, 4, 4, 0}};
    uint32_t tok[3] = {7, 8, 9}, dim[2] = {8, 2};
    struct kvfs_writer w, w2;
    struct kvfs_header h;
    struct kvfs_llama_view v;
    struct kvfs_llama_swa swa;
    char why[256];
    memset(&swa, 0, sizeof(swa));
    swa.n_swa = 8, swa.local[1] = 1, swa.shaped = 1;
    memcpy(swa.shape, sh, sizeof(sh));
    CHECK_EQ(kvfs_writer_init_shaped(&w, &fp, KVFS_DTYPE_F16, KVFS_FLAG_KEYS_ROPED, 0, 3, tok, NULL, sh), 0);
    for (uint32_t l = 0; l < 2; l++) {
        uint8_t *d = kvfs_writer_layer(&w, l);
        for (uint32_t e = 0; e < 2 * 3 * dim[l]; e++) {
            uint16_t x = kvfs_f32_to_f16((float)(100 * l + e));
            d[2 * e] = (uint8_t)x, d[2 * e + 1] = (uint8_t)(x >> 8);
        }
    }
    CHECK_EQ(kvfs_writer_finish(&w), 0);
    CHECK_EQ(kvfs_file_verify(w.buf, w.size, &h, why, sizeof(why)), 0);
    for (int vt = 0; vt < 2; vt++) {
        CHECK_EQ(kvfs_llama_view_init_swa(&v, &h, vt, 1, &swa), 0);
        CHECK_EQ(v.n_parts, 2u);
        uint64_t head = 12 + 4 * 3, part0 = 8 + 12 * 3 + 8 + 2 * (12 + 3 * 8 * 2);
        CHECK_EQ(v.size, head + part0 + 8 + 12 * 3 + 8 + 2 * (12 + 3 * 2 * 2));
        uint8_t *st = malloc(v.size), *st2 = malloc(v.size);
        CHECK_EQ(kvfs_llama_view_read(&v, w.buf, 0, st, v.size), v.size);
        for (uint64_t at = 0, step = 1; at < v.size; at += step, step = step % 13 + 2)
            kvfs_llama_view_read(&v, w.buf, at, st2 + at, (size_t)step);
        CHECK(!memcmp(st, st2, v.size));
        /* the SWA part's layer count, its K header's row bytes, its V's row 2 (or V dim 1 of cell 2 transposed) */
        const uint8_t *p1 = st + head + part0 + 8 + 12 * 3;
        CHECK_EQ(p1[4], 1);
        CHECK_EQ(p1[8 + 4], 4);
        const uint8_t *v1 = p1 + 8 + 12 + 12 + 12;
        uint32_t e = vt ? 1 * 3 + 2 : 2 * 2 + 1; /* cell 2, dim 1 */
        CHECK_EQ(kvfs_f16_to_f32((uint16_t)(v1[2 * e] | v1[2 * e + 1] << 8)), (float)(100 + 6 + 2 * 2 + 1));
        CHECK_EQ(kvfs_llama_state_to_chunk_swa(st, v.size, &fp, 257, &swa, NULL, &w2, why, sizeof(why)), 0);
        CHECK(w2.size == w.size && !memcmp(w2.buf, w.buf, w.size));
        kvfs_writer_free(&w2);
        /* a state whose layer 1 rows are another width: refused, saying so */
        st[head + part0 + 8 + 12 * 3 + 8 + 4] = 6;
        CHECK_EQ(kvfs_llama_state_to_chunk_swa(st, v.size, &fp, 257, &swa, NULL, &w2, why, sizeof(why)), -EINVAL);
        CHECK(strstr(why, "layer 1 K: rows of 6 bytes") != NULL);
        free(st);
        free(st2);
        kvfs_llama_view_free(&v);
    }
    kvfs_writer_free(&w);
}

int main(void)
{
    check_layer_shapes();
    for (uint32_t n = 1; n <= 2 * NSWA + 1; n++)
        check_n(n);
    /* deepseek2 (MLA): a chunk of it without V_FROM_K has no view; with
     * it (one KV head of 6: 2 rotated values, then 4 of the latent) the view
     * is K alone, each row latent first (kvfs(5)) */
    struct kvfs_writer w;
    struct kvfs_header h;
    struct kvfs_llama_view v;
    char why[128];
    CHECK_EQ(synth_chunk(&w, 2, 5, 1, KVFS_DTYPE_F16), 0);
    CHECK_EQ(kvfs_file_verify(w.buf, w.size, &h, why, sizeof(why)), 0);
    CHECK_EQ(kvfs_llama_view_init(&v, &h, 0, 1), 0);
    kvfs_llama_view_free(&v);
    memcpy(h.fp.arch, "deepseek2", 10);
    CHECK_EQ(kvfs_llama_view_init(&v, &h, 0, 1), -ENOTSUP);
    struct kvfs_writer w2;
    CHECK_EQ(kvfs_llama_state_to_chunk(w.buf, w.size, &h.fp, 257, &w2, why, sizeof(why)), -EINVAL);
    kvfs_writer_free(&w);
    struct kvfs_fingerprint fp = {.n_layer = 2, .n_kv_head = 1, .head_dim = 6, .rope_dim = 2, .rope_theta = 1e4f,
                                  .arch = "deepseek2", .n_head = 4, .n_embd = 32};
    uint32_t tok[3] = {7, 8, 9};
    CHECK_EQ(kvfs_writer_init(&w, &fp, KVFS_DTYPE_F16, KVFS_FLAG_KEYS_ROPED | KVFS_FLAG_V_FROM_K, 0, 3, tok), 0);
    for (uint32_t l = 0; l < 2; l++) {
        uint8_t *d = kvfs_writer_layer(&w, l);
        for (int e = 0; e < 18; e++) {
            uint16_t x = kvfs_f32_to_f16((float)(100 * l + e));
            d[2 * e] = (uint8_t)x, d[2 * e + 1] = (uint8_t)(x >> 8);
        }
    }
    CHECK_EQ(kvfs_writer_finish(&w), 0);
    CHECK_EQ(kvfs_file_verify(w.buf, w.size, &h, why, sizeof(why)), 0);
    CHECK_EQ(kvfs_llama_view_init(&v, &h, 0, 1), 0);
    /* magic .. tokens, n_stream, cells, v_trans, n_layer, then per layer a 12-byte header and 3 rows of 6 */
    uint64_t k0 = 12 + 4 * 3 + 8 + 12 * 3 + 8;
    CHECK_EQ(v.size, k0 + 2 * (12 + 3 * 6 * 2));
    uint8_t *st = malloc(v.size);
    CHECK_EQ(kvfs_llama_view_read(&v, w.buf, 0, st, v.size), v.size);
    int ok = 1;
    for (uint32_t l = 0; l < 2; l++)
        for (int r = 0; r < 3; r++)
            for (int j = 0; j < 6; j++) { /* llama.cpp's dim j: kvfs's j + 2 for the latent, j - 4 for the rest */
                const uint8_t *p = st + k0 + l * (12 + 36) + 12 + 2 * (6 * r + j);
                float want = (float)(100 * l + 6 * r + (j < 4 ? j + 2 : j - 4));
                ok &= kvfs_f16_to_f32((uint16_t)(p[0] | p[1] << 8)) == want;
            }
    CHECK(ok);
    /* and back: the very same chunk */
    CHECK_EQ(kvfs_llama_state_to_chunk(st, v.size, &fp, 257, &w2, why, sizeof(why)), 0);
    CHECK(w2.size == w.size && !memcmp(w2.buf, w.buf, w.size));
    kvfs_writer_free(&w2);
    free(st);
    kvfs_llama_view_free(&v);
    kvfs_writer_free(&w);
    check_mla_quantized();
    CHECK_DONE();
}
