/* half.c - IEEE half and bfloat16 conversions (half.h). */
#include "half.h"

#ifdef __x86_64__
#include <cpuid.h>
#include <immintrin.h>
#include <stdatomic.h>
#endif
#include <string.h>

/* IEEE half conversions, round to nearest even. */
uint16_t kvfs_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, mant = x & 0x7fffffu;
    int32_t exp = (int32_t)((x >> 23) & 0xff);
    if (exp == 0xff)
        return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0));
    exp = exp - 127 + 15;
    if (exp >= 0x1f)
        return (uint16_t)(sign | 0x7c00u);
    if (exp <= 0) {
        if (exp < -10)
            return (uint16_t)sign;
        mant |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t half = mant >> shift, rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1)))
            half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = ((uint32_t)exp << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1)))
        half++; /* may carry into the exponent, which is still correct */
    return (uint16_t)(sign | half);
}

float kvfs_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ffu, x;
    if (exp == 0) {
        if (mant == 0) {
            x = sign;
        } else {
            exp = 127 - 15 + 1;
            while (!(mant & 0x400u)) {
                mant <<= 1;
                exp--;
            }
            x = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
        }
    } else if (exp == 0x1f) {
        x = sign | 0x7f800000u | (mant << 13);
    } else {
        x = sign | ((exp - 15 + 127) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}

uint16_t kvfs_f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
    x += 0x7fffu + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

float kvfs_bf16_to_f32(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

/* Bulk conversion: the blended file and the f16 rounding of K/V convert
 * tens of millions of values per blend; F16C does 8 per instruction with the
 * same round-to-nearest-even.  The portable build (x86-64-v2) has no F16C,
 * so it is compiled for F16C here and taken where the CPU has it. */
#ifdef __x86_64__
/* F16C and AVX, and the OS saving the ymm registers (CPUID 1: ECX bits 29,
 * 28, 27; XCR0 bits 1-2); by hand, as clang's __builtin_cpu_supports knows
 * no "f16c" */
static int cpu_has_f16c(void)
{
    static atomic_int known = -1;
    int k = atomic_load_explicit(&known, memory_order_relaxed);
    if (k < 0) {
        unsigned a, b, c, d, lo, hi;
        int f = __get_cpuid(1, &a, &b, &c, &d) && (c >> 27 & 7) == 7;
        if (f) {
            __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
            f = (lo & 6) == 6;
        }
        atomic_store_explicit(&known, f, memory_order_relaxed); /* the same value whichever thread */
        k = f;
    }
    return k;
}

__attribute__((target("avx,f16c"))) static size_t f32_to_f16_f16c(const float *src, uint16_t *dst, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    return i;
}
#endif

void kvfs_f32_to_f16_n(const float *src, uint16_t *dst, size_t n)
{
    size_t i = 0;
#ifdef __x86_64__
    if (cpu_has_f16c())
        i = f32_to_f16_f16c(src, dst, n);
#endif
    for (; i < n; i++)
        dst[i] = kvfs_f32_to_f16(src[i]);
}
