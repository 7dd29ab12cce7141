/* kvquant.c - 8-bit and 4-bit codecs for a layer's K and V (kvquant.h). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "half.h"
#include "kvquant.h"

/* the exact rows' bytes: f16 K then f16 V, or f16 K alone (k_only) */
static size_t exact_bytes(int codec, uint32_t n_tokens, uint32_t kv_dim, int k_only)
{
    return (k_only ? 2 : 4) * (size_t)kvfs_kvq_exact_rows(codec, n_tokens) * kv_dim;
}

int kvfs_kvq_parse(const char *name)
{
    return !name ? 0 : !strcmp(name, "q8") ? KVFS_KVQ_Q8 : !strcmp(name, "q4") ? KVFS_KVQ_Q4
                     : !strcmp(name, "q4s") ? KVFS_KVQ_Q4S : 0;
}

const char *kvfs_kvq_name(int codec)
{
    return codec == KVFS_KVQ_Q8 ? "q8" : codec == KVFS_KVQ_Q4 ? "q4" : codec == KVFS_KVQ_Q4S ? "q4s" : "?";
}

static int shape_ok(int codec, uint32_t n_tokens, uint32_t kv_dim)
{
    return (codec == KVFS_KVQ_Q8 || codec == KVFS_KVQ_Q4 || codec == KVFS_KVQ_Q4S) && n_tokens > 0 && kv_dim > 0 &&
           kv_dim % 64 == 0;
}

static size_t layer_bytes(int codec, uint32_t n_tokens, uint32_t kv_dim, int k_only)
{
    if (!shape_ok(codec, n_tokens, kv_dim))
        return 0;
    size_t head = exact_bytes(codec, n_tokens, kv_dim, k_only);
    n_tokens -= kvfs_kvq_exact_rows(codec, n_tokens);
    size_t gk = kvfs_kvq_group(codec, 0), gv = kvfs_kvq_group(codec, 1), token_groups = (n_tokens + gk - 1) / gk;
    return head + kvfs_kvq_block_bytes(codec, 0) * token_groups * kv_dim +
           (k_only ? 0 : kvfs_kvq_block_bytes(codec, 1) * (size_t)n_tokens * (kv_dim / gv));
}

size_t kvfs_kvq_layer_bytes(int codec, uint32_t n_tokens, uint32_t kv_dim)
{
    return layer_bytes(codec, n_tokens, kv_dim, 0);
}

size_t kvfs_kvq_k_layer_bytes(int codec, uint32_t n_tokens, uint32_t kv_dim)
{
    return layer_bytes(codec, n_tokens, kv_dim, 1);
}

/* lrintf (to nearest, ties to even) for |x| < 2^22, without libm: libkvfs
 * links nothing but libxxhash and libcrypto */
static long round_even(float x)
{
    volatile float big = 12582912.0f; /* 1.5 * 2^23: adding it leaves the rounded integer in the low bits */
    return (long)((x + big) - big);
}

static void put16(uint8_t *p, float f)
{
    uint16_t h = kvfs_f32_to_f16(f);
    memcpy(p, &h, 2);
}

static float get16(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return kvfs_f16_to_f32(h);
}

/* one group of g values (n of them real, read with stride) into a block */
static void encode_group(int codec, uint32_t g, const float *x, size_t stride, uint32_t n, uint8_t *b)
{
    float lo = INFINITY, hi = -INFINITY, amax = 0.0f;
    for (uint32_t i = 0; i < n; i++) {
        float v = x[i * stride];
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
        amax = fabsf(v) > amax ? fabsf(v) : amax;
    }
    if (n < g) /* padding zeros are part of the group */
        lo = lo > 0.0f ? 0.0f : lo, hi = hi < 0.0f ? 0.0f : hi;
    if (codec == KVFS_KVQ_Q8) {
        float d = kvfs_f16_to_f32(kvfs_f32_to_f16(amax / 127.0f)), id = d > 0.0f ? 1.0f / d : 0.0f;
        put16(b, d);
        for (uint32_t i = 0; i < g; i++) {
            long q = i < n ? round_even(x[i * stride] * id) : 0;
            b[2 + i] = (uint8_t)(int8_t)(q > 127 ? 127 : q < -127 ? -127 : q);
        }
        return;
    }
    /* q4, q4s: the stored (f16) min and step, so that decoding's arithmetic is what rounding assumed */
    float m = kvfs_f16_to_f32(kvfs_f32_to_f16(lo));
    float d = kvfs_f16_to_f32(kvfs_f32_to_f16((hi - m) / 15.0f)), id = d > 0.0f ? 1.0f / d : 0.0f;
    put16(b, d);
    put16(b + 2, m);
    memset(b + 4, 0, g / 2);
    for (uint32_t i = 0; i < g; i++) {
        long q = round_even(((i < n ? x[i * stride] : 0.0f) - m) * id);
        q = q > 15 ? 15 : q < 0 ? 0 : q;
        b[4 + i / 2] |= (uint8_t)(q << (4 * (i & 1)));
    }
}

static void decode_group(int codec, const uint8_t *b, float *x, size_t stride, uint32_t n)
{
    if (codec == KVFS_KVQ_Q8) {
        float d = get16(b);
        for (uint32_t i = 0; i < n; i++)
            x[i * stride] = d * (float)(int8_t)b[2 + i];
        return;
    }
    float d = get16(b), m = get16(b + 2);
    for (uint32_t i = 0; i < n; i++)
        x[i * stride] = m + d * (float)((b[4 + i / 2] >> (4 * (i & 1))) & 15);
}

/* keys: per channel over token groups; values: per token over channel
 * groups; v NULL: the keys alone (an MLA chunk's layer).  Part `part` of
 * n_parts: its share of the key token groups and of the value tokens (the
 * blocks of different parts are disjoint). */
static int codec_layer(int codec, int decode, float *k, float *v, uint32_t n_tokens, uint32_t kv_dim, uint8_t *blocks,
                       uint32_t part, uint32_t n_parts)
{
    if (!shape_ok(codec, n_tokens, kv_dim) || n_parts == 0 || part >= n_parts)
        return -EINVAL;
    uint32_t r = kvfs_kvq_exact_rows(codec, n_tokens);
    if (r && part == 0) /* the exact rows: K's, then V's, as f16 */
        for (size_t i = 0; i < (size_t)r * kv_dim; i++) {
            if (decode) {
                k[i] = get16(blocks + 2 * i);
                if (v)
                    v[i] = get16(blocks + 2 * ((size_t)r * kv_dim + i));
            } else {
                put16(blocks + 2 * i, k[i]);
                if (v)
                    put16(blocks + 2 * ((size_t)r * kv_dim + i), v[i]);
            }
        }
    blocks += exact_bytes(codec, n_tokens, kv_dim, !v);
    k += (size_t)r * kv_dim;
    if (v)
        v += (size_t)r * kv_dim;
    if (!(n_tokens -= r))
        return 0;
    uint32_t gk = kvfs_kvq_group(codec, 0), gv = kvfs_kvq_group(codec, 1), n_tg = (n_tokens + gk - 1) / gk;
    size_t bk = kvfs_kvq_block_bytes(codec, 0), bv = kvfs_kvq_block_bytes(codec, 1);
    uint32_t tg0 = (uint32_t)((uint64_t)n_tg * part / n_parts), tg1 = (uint32_t)((uint64_t)n_tg * (part + 1) / n_parts);
    for (uint32_t tg = tg0; tg < tg1; tg++) {
        uint32_t t0 = tg * gk, n = n_tokens - t0 < gk ? n_tokens - t0 : gk;
        uint8_t *b = blocks + bk * (size_t)tg * kv_dim;
        for (uint32_t c = 0; c < kv_dim; c++, b += bk) {
            float *x = k + (size_t)t0 * kv_dim + c;
            if (decode)
                decode_group(codec, b, x, kv_dim, n);
            else
                encode_group(codec, gk, x, kv_dim, n, b);
        }
    }
    if (!v)
        return 0;
    uint32_t ta = (uint32_t)((uint64_t)n_tokens * part / n_parts), tb = (uint32_t)((uint64_t)n_tokens * (part + 1) / n_parts);
    uint8_t *b = blocks + bk * (size_t)n_tg * kv_dim + bv * (size_t)ta * (kv_dim / gv);
    for (uint32_t t = ta; t < tb; t++)
        for (uint32_t c0 = 0; c0 < kv_dim; c0 += gv, b += bv) {
            float *x = v + (size_t)t * kv_dim + c0;
            if (decode)
                decode_group(codec, b, x, 1, gv);
            else
                encode_group(codec, gv, x, 1, gv, b);
        }
    return 0;
}

int kvfs_kvq_encode(int codec, const float *k, const float *v, uint32_t n_tokens, uint32_t kv_dim, uint8_t *out)
{
    return !k || !v ? -EINVAL : codec_layer(codec, 0, (float *)k, (float *)v, n_tokens, kv_dim, out, 0, 1);
}

int kvfs_kvq_decode(int codec, const uint8_t *in, uint32_t n_tokens, uint32_t kv_dim, float *k, float *v)
{
    return !k || !v ? -EINVAL : codec_layer(codec, 1, k, v, n_tokens, kv_dim, (uint8_t *)in, 0, 1);
}

int kvfs_kvq_encode_k(int codec, const float *k, uint32_t n_tokens, uint32_t kv_dim, uint8_t *out)
{
    return !k ? -EINVAL : codec_layer(codec, 0, (float *)k, NULL, n_tokens, kv_dim, out, 0, 1);
}

int kvfs_kvq_decode_k(int codec, const uint8_t *in, uint32_t n_tokens, uint32_t kv_dim, float *k)
{
    return !k ? -EINVAL : codec_layer(codec, 1, k, NULL, n_tokens, kv_dim, (uint8_t *)in, 0, 1);
}

int kvfs_kvq_decode_part(int codec, const uint8_t *in, uint32_t n_tokens, uint32_t kv_dim, float *k, float *v,
                         uint32_t part, uint32_t n_parts)
{
    return !k || !v ? -EINVAL : codec_layer(codec, 1, k, v, n_tokens, kv_dim, (uint8_t *)in, part, n_parts);
}

static float elem_at(int codec, const uint8_t *in, uint32_t n_tokens, uint32_t kv_dim, int which, uint32_t t,
                     uint32_t c, int k_only)
{
    uint32_t r = kvfs_kvq_exact_rows(codec, n_tokens);
    if (t < r)
        return get16(in + 2 * ((size_t)which * r * kv_dim + (size_t)t * kv_dim + c));
    in += exact_bytes(codec, n_tokens, kv_dim, k_only);
    t -= r;
    n_tokens -= r;
    uint32_t gk = kvfs_kvq_group(codec, 0), gv = kvfs_kvq_group(codec, 1), n_tg = (n_tokens + gk - 1) / gk;
    size_t bk = kvfs_kvq_block_bytes(codec, 0), bv = kvfs_kvq_block_bytes(codec, 1);
    const uint8_t *b = which ? in + bk * (size_t)n_tg * kv_dim + bv * ((size_t)t * (kv_dim / gv) + c / gv)
                             : in + bk * ((size_t)(t / gk) * kv_dim + c);
    uint32_t i = which ? c % gv : t % gk;
    if (codec == KVFS_KVQ_Q8)
        return get16(b) * (float)(int8_t)b[2 + i];
    return get16(b + 2) + get16(b) * (float)((b[4 + i / 2] >> (4 * (i & 1))) & 15);
}

float kvfs_kvq_elem(int codec, const uint8_t *in, uint32_t n_tokens, uint32_t kv_dim, int which, uint32_t t,
                    uint32_t c)
{
    return elem_at(codec, in, n_tokens, kv_dim, which, t, c, 0);
}

float kvfs_kvq_elem_k(int codec, const uint8_t *in, uint32_t n_tokens, uint32_t kv_dim, uint32_t t, uint32_t c)
{
    return elem_at(codec, in, n_tokens, kv_dim, 0, t, c, 1);
}

float kvfs_kvq_bound(int codec, float lo, float hi)
{
    float amax = fabsf(lo) > fabsf(hi) ? fabsf(lo) : fabsf(hi);
    if (codec == KVFS_KVQ_Q8) /* half a step of d, d rounded to f16 (relative 2^-11) */
        return 0.5f * amax / 127.0f * (1.0f + 0x1p-10f) + amax * 0x1p-20f + 0x1p-24f; /* f16 subnormals */
    /* half a step, plus m's f16 rounding and the step's rounding over 15 steps */
    float range = hi - lo;
    return 0.5f * range / 15.0f * (1.0f + 0x1p-10f) + fabsf(lo) * 0x1p-11f + range * 0x1p-10f + amax * 0x1p-20f +
           0x1p-24f;
}
