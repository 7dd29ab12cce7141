/* test_quant.c - dequantization of every supported ggml type against values
 * computed by hand from the block layouts. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "check.h"
#include "gguf.h"
#include "kvformat.h"

static void put_f16(uint8_t *p, float v)
{
    uint16_t h = kvfs_f32_to_f16(v);
    memcpy(p, &h, 2);
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
    /* sizes and refusals */
    CHECK_EQ(kvfs_ggml_row_size(KVFS_GGML_Q4_1, 576), 576 / 32 * 20);
    CHECK_EQ(kvfs_ggml_row_size(KVFS_GGML_Q8_0, 64), 68);
    CHECK_EQ(kvfs_ggml_row_size(KVFS_GGML_Q4_0, 33), 0);
    CHECK_EQ(kvfs_ggml_row_size(KVFS_GGML_Q6_K, 256), 0);
    CHECK_EQ(kvfs_ggml_dequantize(KVFS_GGML_Q6_K, q80, out, 32), -ENOTSUP);
    CHECK_EQ(kvfs_ggml_dequantize(KVFS_GGML_Q4_0, q40, out, 31), -EINVAL);
    CHECK_DONE();
}
