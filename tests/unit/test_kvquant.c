/* test_kvquant - the 8-bit and 4-bit KV codecs (index/kvquant.c): every
 * decoded value within the documented bound of its group, on keys with
 * outlier channels and values of mixed scale, partial token groups, the
 * sizes per value, and bad shapes refused. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
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
    uint32_t g = codec == KVFS_KVQ_Q8 ? 32 : 64;
    int over = 0;
    for (uint32_t t = 0; t < nt; t++)
        for (uint32_t c = 0; c < kvd; c++) {
            float lo, hi;
            if (keys) {
                uint32_t t0 = t / g * g, n = nt - t0 < g ? nt - t0 : g;
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

int main(void)
{
    const uint32_t tokens[] = {1, 31, 32, 33, 100, 129}, dims[] = {64, 192, 1024};
    for (int codec = KVFS_KVQ_Q8; codec <= KVFS_KVQ_Q4; codec++) {
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
                free(k), free(v), free(k2), free(v2), free(buf);
            }
        /* bits per value on a full group: q8 8.5, q4 4.5 (0.53x and 0.28x of f16) */
        double bits = 8.0 * (double)kvfs_kvq_layer_bytes(codec, 512, 1024) / (2.0 * 512 * 1024);
        printf("%s: %.3f bits per value (%.3fx f16), worst error / its bound: keys %.3f, values %.3f\n",
               kvfs_kvq_name(codec), bits, bits / 16, worst_k, worst_v);
        CHECK(fabs(bits - (codec == KVFS_KVQ_Q8 ? 8.5 : 4.5)) < 1e-9);
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
    CHECK(!strcmp(kvfs_kvq_name(KVFS_KVQ_Q4), "q4"));
    CHECK_DONE();
}
