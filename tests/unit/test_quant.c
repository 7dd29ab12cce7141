/* test_quant.c - dequantization of every supported ggml type against values
 * computed by hand from the block layouts. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "check.h"
#include "ggml_quant.h"
#include "kvformat.h"

static void put_f16(uint8_t *p, float v)
{
    uint16_t h = kvfs_f32_to_f16(v);
    memcpy(p, &h, 2);
}

/* Q5_0 then Q5_1: element e (0..31) has its low 4 bits in byte e % 16 of
 * the nibbles (low nibble for e < 16) and its 5th bit in bit e of qh. */
static void test_q5(void)
{
    for (int with_min = 0; with_min < 2; with_min++) {
        uint8_t blk[24], q[32];
        float out[32];
        int o = with_min ? 4 : 2;
        memset(blk, 0, sizeof(blk));
        put_f16(blk, 0.5f);
        if (with_min)
            put_f16(blk + 2, -3.0f);
        for (int e = 0; e < 32; e++) {
            q[e] = (uint8_t)((e * 2654435761u) >> 27); /* scrambled 5-bit values */
            blk[o + 4 + e % 16] |= (uint8_t)((q[e] & 15) << (e < 16 ? 0 : 4));
            blk[o + e / 8] |= (uint8_t)((q[e] >> 4) << (e % 8)); /* qh, little-endian u32 */
        }
        CHECK_EQ(kvfs_ggml_dequantize(with_min ? KVFS_GGML_Q5_1 : KVFS_GGML_Q5_0, blk, out, 32), 0);
        for (int e = 0; e < 32; e++)
            CHECK(out[e] == (with_min ? (float)q[e] * 0.5f - 3.0f : (float)(q[e] - 16) * 0.5f));
    }
}

/* Q4_K (or Q5_K): sub-block s (0..7) of 32 has a 6-bit scale sc[s] and min
 * m[s]; s < 4 in the low 6 bits of scales[s] and scales[s + 4]; s >= 4 in
 * the nibbles of scales[s + 4] (scale low, min high) with their top 2 bits
 * in the top 2 bits of scales[s - 4] (scale) and scales[s] (min).  Element
 * l of sub-block s: nibble byte 32 * (s / 2) + l, low nibble for even s;
 * Q5_K's 5th bit: bit s of qh[l]. */
static void test_k45(int five)
{
    static const uint8_t sc[8] = {1, 17, 33, 63, 5, 21, 47, 62}, mn[8] = {0, 3, 60, 9, 16, 31, 2, 48};
    uint8_t blk[176], q[256];
    float out[256];
    memset(blk, 0, sizeof(blk));
    put_f16(blk, 0.5f);     /* d */
    put_f16(blk + 2, 0.25f); /* dmin */
    uint8_t *scales = blk + 4, *qh = blk + 16, *qs = blk + (five ? 48 : 16);
    for (int s = 0; s < 8; s++) {
        if (s < 4) {
            scales[s] |= sc[s];
            scales[s + 4] |= mn[s];
        } else {
            scales[s + 4] = (uint8_t)((sc[s] & 15) | (mn[s] & 15) << 4);
            scales[s - 4] |= (uint8_t)((sc[s] >> 4) << 6);
            scales[s] |= (uint8_t)((mn[s] >> 4) << 6);
        }
    }
    for (int e = 0; e < 256; e++) {
        int s = e / 32, l = e % 32;
        q[e] = (uint8_t)((e * 2654435761u) >> (five ? 27 : 28)); /* not periodic across sub-blocks */
        qs[32 * (s / 2) + l] |= (uint8_t)((q[e] & 15) << (s % 2 ? 4 : 0));
        if (five)
            qh[l] |= (uint8_t)((q[e] >> 4) << s);
    }
    CHECK_EQ(kvfs_ggml_dequantize(five ? KVFS_GGML_Q5_K : KVFS_GGML_Q4_K, blk, out, 256), 0);
    int bad = 0;
    for (int e = 0; e < 256; e++)
        bad += out[e] != 0.5f * sc[e / 32] * q[e] - 0.25f * mn[e / 32];
    CHECK_EQ(bad, 0);
}

/* Q6_K: element e (0..255) = d * scales[e / 16] * (q - 32), q 6 bits; in
 * half h = e / 128, quarter g = e % 128 / 32, l = e % 32: the low 4 bits in
 * ql[64 h + 32 (g & 1) + l] (low nibble for g < 2), the high 2 in bits
 * 2g..2g+1 of qh[32 h + l].  Two rows through the row entry point. */
static void test_q6k(void)
{
    uint8_t blk[2][210], q[256];
    float out[512];
    memset(blk, 0, sizeof(blk));
    for (int e = 0; e < 256; e++) {
        int h = e / 128, g = e % 128 / 32, l = e % 32;
        q[e] = (uint8_t)((e * 2654435761u) >> 26);
        blk[0][64 * h + 32 * (g & 1) + l] |= (uint8_t)((q[e] & 15) << (g < 2 ? 0 : 4));
        blk[0][128 + 32 * h + l] |= (uint8_t)((q[e] >> 4) << (2 * g));
    }
    for (int i = 0; i < 16; i++)
        blk[0][192 + i] = (uint8_t)(int8_t)(3 * i - 24);
    put_f16(blk[0] + 208, 0.125f);
    memcpy(blk[1], blk[0], 210);
    put_f16(blk[1] + 208, -2.0f);
    CHECK_EQ(kvfs_ggml_dequantize_rows(KVFS_GGML_Q6_K, blk, out, 2, 256), 0);
    int bad = 0;
    for (int e = 0; e < 256; e++) {
        bad += out[e] != 0.125f * (float)(3 * (e / 16) - 24) * (float)(q[e] - 32);
        bad += out[256 + e] != -2.0f * (float)(3 * (e / 16) - 24) * (float)(q[e] - 32);
    }
    CHECK_EQ(bad, 0);
}

/* Activations through Q8_K (blocks of 256, scale from the value of largest
 * magnitude m: q = round-half-even(-127/m * x), y = q * (1 / (-127/m))):
 * block 0's m = -127 keeps integers; block 1's m = 254 halves them, ties to
 * even.  Q8_0's blocks of 32 scale by max|x| / 127 (an f16): 127 keeps them. */
static void test_act(void)
{
    static float x[512], y[512];
    for (int j = 0; j < 256; j++) {
        x[j] = (float)(j % 100) - 50.0f;
        x[256 + j] = (float)(j % 16) - 4.0f;
    }
    x[7] = -127.0f;
    x[256 + 9] = 254.0f;
    CHECK_EQ(kvfs_ggml_act_roundtrip(KVFS_GGML_Q8_K, x, y, 512), 0);
    int bad = 0;
    for (int j = 0; j < 256; j++) {
        bad += y[j] != x[j];
        bad += y[256 + j] != -2.0f * nearbyintf(x[256 + j] * -0.5f);
    }
    CHECK_EQ(bad, 0);
    /* x = 254 -> -127 -> 254; 5 and 3 -> -2.5 and -1.5 -> -2 -> 4; 1 -> -0.5 -> 0 */
    CHECK(y[256 + 9] == 254.0f && y[256 + 25] == 4.0f && y[256 + 23] == 4.0f && y[256 + 5] == 0.0f);
    CHECK(signbit(y[256 + 5])); /* 0 times d = -2: -0, as ggml */
    CHECK_EQ(kvfs_ggml_act_roundtrip(KVFS_GGML_Q8_K, x, y, 288), -EINVAL);
    x[0] = 127.0f;
    CHECK_EQ(kvfs_ggml_act_roundtrip(KVFS_GGML_Q8_0, x, y, 32), 0);
    bad = 0;
    for (int j = 0; j < 32; j++)
        bad += y[j] != x[j];
    CHECK_EQ(bad, 0);
    CHECK_EQ(kvfs_ggml_act_roundtrip(KVFS_GGML_Q4_0, x, y, 32), -ENOTSUP);
}

int main(void)
{
    float out[64];
    /* Q4_0: x = (q - 8) * d */
    uint8_t q40[18];
    put_f16(q40, 0.5f);
    for (int i = 0; i < 16; i++)
        q40[2 + i] = (uint8_t)((i & 15) | ((15 - i) << 4));
    CHECK_EQ(kvfs_ggml_dequantize(KVFS_GGML_Q4_0, q40, out, 32), 0);
    for (int i = 0; i < 16; i++) {
        CHECK(out[i] == (float)(i - 8) * 0.5f);
        CHECK(out[16 + i] == (float)(15 - i - 8) * 0.5f);
    }
    /* Q4_1: x = q * d + m */
    uint8_t q41[20];
    put_f16(q41, 0.25f);
    put_f16(q41 + 2, -1.0f);
    for (int i = 0; i < 16; i++)
        q41[4 + i] = (uint8_t)(i | (i << 4));
    CHECK_EQ(kvfs_ggml_dequantize(KVFS_GGML_Q4_1, q41, out, 32), 0);
    for (int i = 0; i < 16; i++) {
        CHECK(out[i] == (float)i * 0.25f - 1.0f);
        CHECK(out[16 + i] == out[i]);
    }
    /* Q8_0: x = q * d, two blocks */
    uint8_t q80[68];
    for (int b = 0; b < 2; b++) {
        put_f16(q80 + 34 * b, b ? 2.0f : 0.125f);
        for (int i = 0; i < 32; i++)
            q80[34 * b + 2 + i] = (uint8_t)(int8_t)(i - 16);
    }
    CHECK_EQ(kvfs_ggml_dequantize(KVFS_GGML_Q8_0, q80, out, 64), 0);
    for (int i = 0; i < 32; i++) {
        CHECK(out[i] == (float)(i - 16) * 0.125f);
        CHECK(out[32 + i] == (float)(i - 16) * 2.0f);
    }
    /* F16, BF16, F32 */
    uint16_t h[3] = {kvfs_f32_to_f16(1.5f), kvfs_f32_to_f16(-2.0f), kvfs_f32_to_f16(0.0f)};
    CHECK_EQ(kvfs_ggml_dequantize(KVFS_GGML_F16, h, out, 3), 0);
    CHECK(out[0] == 1.5f && out[1] == -2.0f && out[2] == 0.0f);
    uint16_t bf[2] = {kvfs_f32_to_bf16(3.0f), kvfs_f32_to_bf16(-0.5f)};
    CHECK_EQ(kvfs_ggml_dequantize(KVFS_GGML_BF16, bf, out, 2), 0);
    CHECK(out[0] == 3.0f && out[1] == -0.5f);
    float f[2] = {7.0f, -8.0f};
    CHECK_EQ(kvfs_ggml_dequantize(KVFS_GGML_F32, f, out, 2), 0);
    CHECK(out[0] == 7.0f && out[1] == -8.0f);
    test_q5();
    test_k45(0);
    test_k45(1);
    test_q6k();
    /* sizes and refusals */
    CHECK_EQ(kvfs_ggml_row_size(KVFS_GGML_Q4_1, 576), 576 / 32 * 20);
    CHECK_EQ(kvfs_ggml_row_size(KVFS_GGML_Q8_0, 64), 68);
    CHECK_EQ(kvfs_ggml_row_size(KVFS_GGML_Q5_0, 64), 44);
    CHECK_EQ(kvfs_ggml_row_size(KVFS_GGML_Q5_1, 64), 48);
    CHECK_EQ(kvfs_ggml_row_size(KVFS_GGML_Q4_K, 512), 288);
    CHECK_EQ(kvfs_ggml_row_size(KVFS_GGML_Q5_K, 256), 176);
    CHECK_EQ(kvfs_ggml_row_size(KVFS_GGML_Q6_K, 256), 210);
    CHECK_EQ(kvfs_ggml_row_size(KVFS_GGML_Q6_K, 576), 0); /* not whole super-blocks */
    CHECK_EQ(kvfs_ggml_row_size(KVFS_GGML_Q4_0, 33), 0);
    CHECK_EQ(kvfs_ggml_row_size(11 /* Q3_K */, 256), 0);
    CHECK_EQ(kvfs_ggml_block_size(KVFS_GGML_Q5_1), 32);
    CHECK_EQ(kvfs_ggml_block_size(KVFS_GGML_Q4_K), 256);
    CHECK_EQ(kvfs_ggml_block_size(KVFS_GGML_F16), 1);
    CHECK_EQ(kvfs_ggml_block_size(KVFS_GGML_Q8_K), 0); /* an activation type only */
    CHECK(!strcmp(kvfs_ggml_type_name(KVFS_GGML_Q6_K), "Q6_K"));
    CHECK(!strcmp(kvfs_ggml_type_name(11), "Q3_K"));
    CHECK(!strcmp(kvfs_ggml_type_name(KVFS_GGML_BF16), "BF16"));
    CHECK(!strcmp(kvfs_ggml_type_name(4), "unknown"));
    CHECK(!strcmp(kvfs_ggml_type_name(1000), "unknown"));
    CHECK_EQ(kvfs_ggml_dequantize(11 /* Q3_K */, q80, out, 256), -ENOTSUP);
    CHECK_EQ(kvfs_ggml_dequantize(KVFS_GGML_Q6_K, q80, out, 32), -EINVAL);
    CHECK_EQ(kvfs_ggml_dequantize(KVFS_GGML_Q4_0, q40, out, 31), -EINVAL);
    CHECK_EQ(kvfs_ggml_dequantize_rows(KVFS_GGML_Q4_K, q80, out, 1, 32), -EINVAL);
    CHECK_EQ(kvfs_ggml_dequantize_rows(200, q80, out, 1, 32), -ENOTSUP);
    test_act();
    CHECK_DONE();
}
