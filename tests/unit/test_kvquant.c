/* test_kvquant - the 8-bit and 4-bit KV codecs (index/kvquant.c): every
 * decoded value within the documented bound of its group, on keys with
 * outlier channels and values of mixed scale, partial token groups, the
 * sizes per value, and bad shapes refused; the decoders that split the work
 * (parts, single elements) give the same values; the q8/q4 chunk dtypes
 * (kvfs(5)): written, verified, converted to and from, a corrupt scale
 * refused by the checksum. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kvconvert.h"
#include "kvquant.h"

static float frand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* the group's span as the encoder sees it (padding zeros included) */
static void span(const float *x, size_t stride, uint32_t n, uint32_t g, float *lo, float *hi)
{
    *lo = INFINITY, *hi = -INFINITY;
    for (uint32_t i = 0; i < n; i++) {
        float v = x[i * stride];
        *lo = v < *lo ? v : *lo;
        *hi = v > *hi ? v : *hi;
    }
    if (n < g)
        *lo = *lo > 0 ? 0 : *lo, *hi = *hi < 0 ? 0 : *hi;
}

/* 0 when every value is within its group's bound; else the count over */
static int over_bound(int codec, const float *x, const float *y, uint32_t nt, uint32_t kvd, int keys, double *worst)
{
    /* q4: 64 tokens per key group, 32 channels per value one; q4s: 32 and 64,
     * its first row exact (f16), its key groups from row 1 */
    uint32_t g = codec == KVFS_KVQ_Q4 ? (keys ? 64 : 32) : codec == KVFS_KVQ_Q4S ? (keys ? 32 : 64) : 32;
    uint32_t r = codec == KVFS_KVQ_Q4S ? 1 : 0;
    int over = 0;
    for (uint32_t t = 0; t < nt; t++)
        for (uint32_t c = 0; c < kvd; c++) {
            float lo, hi, xv = x[(size_t)t * kvd + c];
            if (t < r) { /* f16 rounding: half an ulp, subnormals included */
                double e = fabs((double)xv - y[(size_t)t * kvd + c]), b = fabs(xv) * 0x1p-11 + 0x1p-25;
                over += e > b;
                continue;
            }
            if (keys) {
                uint32_t t0 = (t - r) / g * g + r, n = nt - t0 < g ? nt - t0 : g;
                span(x + (size_t)t0 * kvd + c, kvd, n, g, &lo, &hi);
            } else {
                span(x + (size_t)t * kvd + c / g * g, 1, g, g, &lo, &hi);
            }
            double e = fabs((double)x[(size_t)t * kvd + c] - y[(size_t)t * kvd + c]), b = kvfs_kvq_bound(codec, lo, hi);
            if (e / b > *worst)
                *worst = e / b;
            over += e > b;
        }
    return over;
}

/* decode_part over 1..5 parts and kvq_elem give exactly decode's values */
static void check_split_decoders(int codec, const uint8_t *buf, uint32_t nt, uint32_t kvd, const float *k2,
                                 const float *v2)
{
    size_t n = (size_t)nt * kvd;
    float *k3 = malloc(sizeof(float) * n), *v3 = malloc(sizeof(float) * n);
    CHECK(k3 && v3);
    if (!k3 || !v3)
        return;
    for (uint32_t parts = 1; parts <= 5; parts++) {
        memset(k3, 0xff, sizeof(float) * n), memset(v3, 0xff, sizeof(float) * n); /* NaN: any row left out shows */
        for (uint32_t p = 0; p < parts; p++)
            CHECK_EQ(kvfs_kvq_decode_part(codec, buf, nt, kvd, k3, v3, p, parts), 0);
        CHECK(!memcmp(k3, k2, sizeof(float) * n) && !memcmp(v3, v2, sizeof(float) * n));
    }
    int bad = 0;
    for (uint32_t t = 0; t < nt; t++)
        for (uint32_t c = 0; c < kvd; c++)
            bad += kvfs_kvq_elem(codec, buf, nt, kvd, 0, t, c) != k2[(size_t)t * kvd + c] ||
                   kvfs_kvq_elem(codec, buf, nt, kvd, 1, t, c) != v2[(size_t)t * kvd + c];
    CHECK_EQ(bad, 0);
    CHECK_EQ(kvfs_kvq_decode_part(codec, buf, nt, kvd, k3, v3, 3, 3), -EINVAL);
    free(k3), free(v3);
}

/* A chunk file in q8/q4/q4s: written from f32 values, verified, each layer
 * decoded as the codec decodes it; converted to f16 and back; a flipped
 * scale byte fails the layer checksum; a kv_dim not a multiple of 64 is
 * refused by the writer and by the converter. */
static void check_chunk_dtype(uint32_t dtype)
{
    int codec = kvfs_dtype_quantized(dtype);
    struct kvfs_fingerprint fp = {.n_layer = 3, .n_kv_head = 3, .head_dim = 64, .rope_type = KVFS_ROPE_NEOX,
                                  .rope_theta = 10000.0f, .rope_dim = 64, .n_head = 9, .n_embd = 576};
    memcpy(fp.arch, "llama", 6);
    memset(fp.model_id, 0x42, 32);
    uint32_t nt = 70, kvd = 192, ids[70];
    for (uint32_t t = 0; t < nt; t++)
        ids[t] = t * 7 + 1;
    size_t n = (size_t)nt * kvd;
    float *kv = malloc(sizeof(float) * 2 * n), *dec = malloc(sizeof(float) * 2 * n), *dec2 = malloc(sizeof(float) * 2 * n);
    CHECK(kv && dec && dec2);
    if (!kv || !dec || !dec2)
        return;
    unsigned s = 99;
    struct kvfs_writer w, f16, back;
    CHECK_EQ(kvfs_writer_init(&w, &fp, dtype, KVFS_FLAG_KEYS_ROPED, 5, nt, ids), 0);
    CHECK_EQ(kvfs_layer_bytes(&w.hdr, 0), kvfs_kvq_layer_bytes(codec, nt, kvd));
    for (uint32_t l = 0; l < fp.n_layer; l++) {
        for (size_t i = 0; i < 2 * n; i++)
            kv[i] = frand(&s) * (float)(l + 1);
        CHECK_EQ(kvfs_kvq_encode(codec, kv, kv + n, nt, kvd, kvfs_writer_layer(&w, l)), 0);
    }
    CHECK_EQ(kvfs_writer_finish(&w), 0);
    struct kvfs_header h;
    char err[256] = "";
    CHECK_EQ(kvfs_file_verify(w.buf, w.size, &h, err, sizeof(err)), 0);
    CHECK_EQ(h.dtype, dtype);
    CHECK(!strcmp(kvfs_dtype_name(dtype), kvfs_kvq_name(codec)));
    /* to f16 and back: f16 holds every decoded q8/q4 value's rounding, and
     * re-encoding the decoded values gives the same blocks' values back */
    CHECK_EQ(kvfs_chunk_convert(w.buf, w.size, KVFS_DTYPE_F16, &f16, err, sizeof(err)), 0);
    CHECK_EQ(kvfs_chunk_convert(f16.buf, f16.size, dtype, &back, err, sizeof(err)), 0);
    CHECK_EQ(back.hdr.pos0, 5u);
    CHECK(back.size < f16.size * (codec == KVFS_KVQ_Q8 ? 0.56 : 0.32) + 2 * KVFS_ALIGN * fp.n_layer);
    double worst = 0;
    for (uint32_t l = 0; l < fp.n_layer; l++) {
        struct kvfs_layer_entry a, b;
        kvfs_layer_entry_get(&w.hdr, l, &a);
        kvfs_layer_entry_get(&f16.hdr, l, &b);
        CHECK_EQ(kvfs_layer_decode(&w.hdr, l, w.buf + a.offset, dec, dec + n), 0);
        CHECK_EQ(kvfs_layer_decode(&f16.hdr, l, f16.buf + b.offset, dec2, dec2 + n), 0);
        for (size_t i = 0; i < 2 * n; i++) /* f16 rounding only */
            worst = fmax(worst, fabs((double)dec[i] - dec2[i]) / fmax(fabs((double)dec[i]), 1e-3));
    }
    CHECK(worst <= 1.0 / 1024);
    /* a corrupt scale: the checksum catches it, nothing is decoded from it */
    w.buf[w.hdr.header_size] ^= 0x40;
    CHECK_EQ(kvfs_file_verify(w.buf, w.size, &h, err, sizeof(err)), -EBADMSG);
    /* shapes a block code cannot cover */
    struct kvfs_writer bad;
    fp.head_dim = fp.rope_dim = 40;
    CHECK_EQ(kvfs_writer_init(&bad, &fp, dtype, KVFS_FLAG_KEYS_ROPED, 0, nt, ids), -EINVAL);
    struct kvfs_writer odd;
    CHECK_EQ(kvfs_writer_init(&odd, &fp, KVFS_DTYPE_F16, KVFS_FLAG_KEYS_ROPED, 0, 4, ids), 0);
    CHECK_EQ(kvfs_writer_finish(&odd), 0);
    CHECK_EQ(kvfs_chunk_convert(odd.buf, odd.size, dtype, &bad, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "multiple of 64") != NULL);
    kvfs_writer_free(&odd);
    kvfs_writer_free(&w), kvfs_writer_free(&f16), kvfs_writer_free(&back);
    free(kv), free(dec), free(dec2);
}

int main(void)
{
    const uint32_t tokens[] = {1, 31, 32, 33, 100, 129}, dims[] = {64, 192, 1024};
    for (int codec = KVFS_KVQ_Q8; codec <= KVFS_KVQ_Q4S; codec++) {
        double worst_k = 0, worst_v = 0;
        for (size_t a = 0; a < sizeof(tokens) / sizeof(tokens[0]); a++)
            for (size_t b = 0; b < sizeof(dims) / sizeof(dims[0]); b++) {
                uint32_t nt = tokens[a], kvd = dims[b];
                size_t n = (size_t)nt * kvd, bytes = kvfs_kvq_layer_bytes(codec, nt, kvd);
                float *k = malloc(sizeof(float) * n), *v = malloc(sizeof(float) * n);
                float *k2 = malloc(sizeof(float) * n), *v2 = malloc(sizeof(float) * n);
                uint8_t *buf = malloc(bytes);
                CHECK(k && v && k2 && v2 && buf && bytes > 0);
                if (!k || !v || !k2 || !v2 || !buf)
                    return 1;
                unsigned s = 7 + (unsigned)(a * 13 + b);
                for (size_t i = 0; i < n; i++) {
                    uint32_t c = (uint32_t)(i % kvd);
                    /* keys: a few outlier channels 30x the others; values: per token scale */
                    k[i] = frand(&s) * (c % 17 == 3 ? 30.0f : 1.0f) + (c % 5 == 0 ? 2.0f : 0.0f);
                    v[i] = frand(&s) * (float)(1 + (i / kvd) % 4) * 0.25f;
                }
                k[0] = 1e-9f; /* below f16's smallest step */
                CHECK_EQ(kvfs_kvq_encode(codec, k, v, nt, kvd, buf), 0);
                CHECK_EQ(kvfs_kvq_decode(codec, buf, nt, kvd, k2, v2), 0);
                int ok_k = over_bound(codec, k, k2, nt, kvd, 1, &worst_k);
                int ok_v = over_bound(codec, v, v2, nt, kvd, 0, &worst_v);
                if (ok_k || ok_v)
                    fprintf(stderr, "%s %u x %u: %d keys, %d values over the bound\n", kvfs_kvq_name(codec), nt, kvd,
                            ok_k, ok_v);
                CHECK_EQ(ok_k, 0);
                CHECK_EQ(ok_v, 0);
                check_split_decoders(codec, buf, nt, kvd, k2, v2);
                free(k), free(v), free(k2), free(v2), free(buf);
            }
        /* bits per value on full groups: q8 8.5, q4 4.75 (keys 4.5, values 5), q4s's blocks 4.75 too
         * (keys 5, values 4.5); 0.53x and 0.30x of f16 */
        double bits = 8.0 * (double)kvfs_kvq_layer_bytes(codec, 512, 1024) / (2.0 * 512 * 1024);
        printf("%s: %.3f bits per value (%.3fx f16), worst error / its bound: keys %.3f, values %.3f\n",
               kvfs_kvq_name(codec), bits, bits / 16, worst_k, worst_v);
        /* q4s: plus its first row in f16 (16 bits instead of 4.75 for 1 of 512 rows) and the last key
         * group's one padding row: (4096 + 16 * 1024 * 20 + 511 * 16 * 36) bytes */
        double want = codec == KVFS_KVQ_Q8 ? 8.5 : codec == KVFS_KVQ_Q4 ? 4.75
                    : 8.0 * (4096 + 16 * 1024 * 20 + 511 * 16 * 36) / (2.0 * 512 * 1024);
        CHECK(fabs(bits - want) < 1e-9);
    }
    /* shapes and names */
    uint8_t b[64];
    float x[64];
    CHECK_EQ(kvfs_kvq_layer_bytes(KVFS_KVQ_Q8, 4, 48), 0);
    CHECK_EQ(kvfs_kvq_encode(KVFS_KVQ_Q4, x, x, 1, 48, b), -EINVAL);
    CHECK_EQ(kvfs_kvq_decode(9, b, 1, 64, x, x), -EINVAL);
    CHECK_EQ(kvfs_kvq_layer_bytes(KVFS_KVQ_Q4, 0, 64), 0);
    CHECK_EQ(kvfs_kvq_parse("q8"), KVFS_KVQ_Q8);
    CHECK_EQ(kvfs_kvq_parse("q4"), KVFS_KVQ_Q4);
    CHECK_EQ(kvfs_kvq_parse("q2"), 0);
    CHECK_EQ(kvfs_kvq_parse("q4s"), KVFS_KVQ_Q4S);
    CHECK(!strcmp(kvfs_kvq_name(KVFS_KVQ_Q4), "q4"));
    check_chunk_dtype(KVFS_DTYPE_Q8);
    check_chunk_dtype(KVFS_DTYPE_Q4);
    check_chunk_dtype(KVFS_DTYPE_Q4S);
    CHECK_EQ(kvfs_dtype_parse("q4"), (uint32_t)KVFS_DTYPE_Q4);
    CHECK_EQ(kvfs_dtype_parse("q4s"), (uint32_t)KVFS_DTYPE_Q4S);
    CHECK_EQ(kvfs_dtype_parse("q3"), 0u);
    CHECK_DONE();
}
