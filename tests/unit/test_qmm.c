/* test_qmm.c - the CPU backend's encoded-weight matmul for few rows (the
 * integer kernels of decoding) against its definition: every weight row
 * decoded to f32 (kvfs_ggml_dequantize), dotted in double with x rounded as
 * act_quant rounds it.  Random blocks of every type with a kernel (K-quants
 * against Q8_K activations, the 32-blocks against Q8_0/Q8_1), n = 1..9, 17
 * and 63 rows (the integer path takes x 8 rows at a time below 64 rows;
 * K-quants from 16 rows in AVX-512 VNNI panels where the CPU has them,
 * gathered straight from the blocks, 37 weight rows so the last panel is
 * partial and random bytes so every scale bit and sign is met;
 * without AVX2, each decoded W row against one x row at a time),
 * through matmul_act (x quantized by the matmul) and through act_quant then
 * matmul (x rounded first: the backend finds its 8-bit blocks again, the
 * result bit for bit matmul_act's), and unrounded x through matmul
 * (multiplied in float). */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "check.h"
#include "cpu/dequant_simd.h"
#include "ggml_quant.h"
#include "kvformat.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static float unif(void) /* [-1, 1) */
{
    return (float)(rnd() & 0xffffff) / 8388608.0f - 1.0f;
}

static void put_f16(uint8_t *p, float v)
{
    uint16_t h = kvfs_f32_to_f16(v);
    memcpy(p, &h, 2);
}

/* random blocks: all bytes random, then the scales valid f16 (positive,
 * magnitudes as quantizers make them) */
static void fill_row(uint32_t type, uint8_t *row, size_t bytes)
{
    for (size_t k = 0; k < bytes; k++)
        row[k] = (uint8_t)rnd();
    uint32_t bs = kvfs_ggml_block_size(type);
    size_t bb = kvfs_ggml_row_size(type, bs);
    for (uint8_t *b = row; b < row + bytes; b += bb) {
        float d = 0.001f + 0.01f * (unif() + 1.0f);
        switch (type) {
        case KVFS_GGML_Q4_K: case KVFS_GGML_Q5_K:
            put_f16(b, d);
            put_f16(b + 2, 0.5f * d * (unif() + 1.0f)); /* dmin */
            break;
        case KVFS_GGML_Q6_K: put_f16(b + 208, d); break;
        case KVFS_GGML_Q4_1: case KVFS_GGML_Q5_1:
            put_f16(b, d);
            put_f16(b + 2, -8.0f * d * (unif() + 1.0f)); /* m */
            break;
        default: put_f16(b, d); break;
        }
    }
}

/* x: rows of mixed magnitudes, a zero block, a block with one outlier */
static void fill_x(float *x, int n, int in)
{
    for (int i = 0; i < n; i++)
        for (int k = 0; k < in; k++) {
            float s = (k / 256 + i) % 3 == 0 ? 0.05f : (k / 256 + i) % 3 == 1 ? 1.0f : 20.0f;
            x[(size_t)i * in + k] = s * unif();
        }
    memset(x + 256, 0, 256 * sizeof(float)); /* row 0, block 1 */
    x[7] = -300.0f;                          /* row 0, block 0: its max is negative */
    if (n > 1)
        x[(size_t)in + 3] = 250.0f;
}

/* max over y of |y - ref| / sum_k |w_k x_k| (the size of the dot's terms) */
static double rel_err(const float *y, const double *ref, const double *mag, int count)
{
    double e = 0.0;
    for (int k = 0; k < count; k++) {
        double r = fabs((double)y[k] - ref[k]) / (mag[k] > 0.0 ? mag[k] : 1.0);
        e = r > e ? r : e;
    }
    return e;
}

static void ref_mm(const float *wf, const float *x, int n, int out, int in, double *ref, double *mag)
{
    for (int i = 0; i < n; i++)
        for (int r = 0; r < out; r++) {
            double s = 0.0, a = 0.0;
            for (int k = 0; k < in; k++) {
                double p = (double)wf[(size_t)r * in + k] * (double)x[(size_t)i * in + k];
                s += p;
                a += fabs(p);
            }
            ref[(size_t)i * out + r] = s;
            mag[(size_t)i * out + r] = a;
        }
}

static double worst_int, worst_float;

#define NMAX 63 /* below the integer path's smallest limit (64 rows) */

static void check_type(struct kvfs_backend *be, uint32_t type, int act_type, int in)
{
    const struct kvfs_backend_iface *f = be->iface;
    const int out = 37; /* rows not a multiple of the threads */
    size_t rb = kvfs_ggml_row_size(type, (uint64_t)in);
    uint8_t *wq = malloc(rb * out);
    float *wf = malloc(sizeof(float) * (size_t)out * in), *x = malloc(sizeof(float) * NMAX * (size_t)in);
    float *xr = malloc(sizeof(float) * NMAX * (size_t)in), *tmp = malloc(sizeof(float) * NMAX * (size_t)in);
    float *y = malloc(sizeof(float) * NMAX * out), *y2 = malloc(sizeof(float) * NMAX * out);
    double *ref = malloc(sizeof(double) * NMAX * out), *mag = malloc(sizeof(double) * NMAX * out);
    struct kvfs_weight *w = NULL;
    CHECK(wq && wf && x && xr && tmp && y && y2 && ref && mag);
    if (!(wq && wf && x && xr && tmp && y && y2 && ref && mag))
        goto out;
    for (int r = 0; r < out; r++)
        fill_row(type, wq + (size_t)r * rb, rb);
    CHECK_EQ(kvfs_ggml_dequantize_rows(type, wq, wf, (uint64_t)out, (uint64_t)in), 0);
    CHECK_EQ(f->weight_create_quant(be->ctx, type, wq, rb, out, in, &w), 0);
    if (!w)
        goto out;
    double e_act = 0.0, e_round = 0.0, e_float = 0.0;
    static const int rows[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 17, NMAX};
    for (size_t ri = 0; ri < sizeof(rows) / sizeof(rows[0]); ri++) {
        int n = rows[ri];
        fill_x(x, n, in);
        CHECK_EQ(f->act_quant(be->ctx, x, xr, n, in, act_type), 0);
        ref_mm(wf, xr, n, out, in, ref, mag);
        /* x quantized by the matmul */
        memset(y, 0, sizeof(float) * NMAX * out);
        CHECK_EQ(f->matmul_act(be->ctx, w, NULL, act_type, x, tmp, y, n), 0);
        double e = rel_err(y, ref, mag, n * out);
        e_act = e > e_act ? e : e_act;
        /* each row's sums do not depend on the rows beside it, within a
         * kernel: below 16 rows (one W row against x 8 rows at a time) row
         * by row, bit for bit the same; from 16 rows on (K-quants: VNNI
         * panels, x 8 rows per pass) rows 1.. of n the same as those n - 1 */
        if (n > 1 && n < 16) {
            int same = 1;
            for (int i = 0; i < n; i++) {
                CHECK_EQ(f->matmul_act(be->ctx, w, NULL, act_type, x + (size_t)i * in, tmp, y2, 1), 0);
                same &= !memcmp(y2, y + (size_t)i * out, sizeof(float) * out);
            }
            CHECK(same);
        } else if (n > 16) {
            CHECK_EQ(f->matmul_act(be->ctx, w, NULL, act_type, x + in, tmp, y2, n - 1), 0);
            CHECK(!memcmp(y2, y + out, sizeof(float) * (size_t)(n - 1) * out));
        }
        /* x rounded first, then the plain matmul (a down projection): the
         * same 8-bit blocks found again, so the very same sums */
        {
            memcpy(y2, y, sizeof(float) * n * out);
            memset(y, 0, sizeof(float) * NMAX * out);
            CHECK_EQ(f->matmul(be->ctx, w, NULL, xr, y, n), 0);
            e = rel_err(y, ref, mag, n * out);
            e_round = e > e_round ? e : e_round;
            CHECK(!memcmp(y, y2, sizeof(float) * n * out));
        }
        /* x as it is: float */
        ref_mm(wf, x, n, out, in, ref, mag);
        memset(y, 0, sizeof(float) * NMAX * out);
        CHECK_EQ(f->matmul(be->ctx, w, NULL, x, y, n), 0);
        e = rel_err(y, ref, mag, n * out);
        e_float = e > e_float ? e : e_float;
    }
    printf("%-5s in %4d: max |y - ref| / sum |w x|: matmul_act %.3g, rounded x %.3g, float x %.3g\n",
           kvfs_ggml_type_name(type), in, e_act, e_round, e_float);
    /* f32 sums of exact (or f32) products: a few ulps of the terms' size;
     * Q4_1 and Q5_1 add an offset m * sum(x) per block whose terms, larger
     * than the weights' when q d and m nearly cancel, are not in sum |w x|
     * (1.9e-5 seen over 63 rows of random blocks) */
    double bound = type == KVFS_GGML_Q4_1 || type == KVFS_GGML_Q5_1 ? 5e-5 : 1e-5;
    CHECK(e_act < bound);
    CHECK(e_round < bound);
    CHECK(e_float < 1e-5);
    double ei = e_act > e_round ? e_act : e_round;
    worst_int = ei > worst_int ? ei : worst_int;
    worst_float = e_float > worst_float ? e_float : worst_float;
out:
    if (w)
        f->weight_free(be->ctx, w);
    free(wq), free(wf), free(x), free(xr), free(tmp), free(y), free(y2), free(ref), free(mag);
}

/* act_quant against its definition (kvfs_ggml_act_roundtrip) bit for bit:
 * one row and 100 (which the backend splits over its threads), blocks of
 * every magnitude, zero blocks, -0, subnormal values, values at a
 * rounding tie (0.5 steps of a block whose max is 127) and blocks whose
 * largest magnitude comes with both signs.  Not a block whose
 * largest value is itself below 127 / FLT_MAX: 1 / d overflows there, and
 * what its values round to is undefined (ggml's and ours differ). */
static void check_act_quant(const struct kvfs_backend *be)
{
    enum { DIM = 768, NMAXQ = 100 };
    static float x[NMAXQ * DIM], y[NMAXQ * DIM], ref[NMAXQ * DIM];
    for (int i = 0; i < NMAXQ * DIM; i++) {
        int blk = i / 32;
        float mag = blk % 7 == 0 ? 1e-30f : blk % 7 == 1 ? 1e4f : blk % 7 == 2 ? 0.0f : (float)(blk % 5 + 1) * 0.3f;
        x[i] = blk % 11 == 3 ? (float)((int)(rnd() % 255) - 127) * 0.5f + (i % 32 == 0 ? 63.5f : 0.0f)
                             : unif() * mag;
        if (i % 97 == 5)
            x[i] = -0.0f;
        if (i % 89 == 7 && blk % 7 > 2) /* beside normal values */
            x[i] = 3e-41f;
    }
    /* row 1's three blocks of 256 (Q8_K's size): all zero (-0 among them),
     * and two whose largest magnitude comes twice with both signs: the sign
     * of d is the first one's */
    for (int i = DIM; i < 2 * DIM; i++)
        x[i] = i < DIM + 256 ? (i % 3 ? 0.0f : -0.0f) : unif() * 2.0f;
    x[DIM + 256 + 6] = -3.0f, x[DIM + 256 + 176] = 3.0f;
    x[DIM + 512 + 10] = 2.5f, x[DIM + 512 + 20] = -2.5f;
    static const uint32_t types[] = {KVFS_GGML_Q8_0, KVFS_GGML_Q8_1, KVFS_GGML_Q8_K};
    static const int rows[] = {1, NMAXQ};
    for (int t = 0; t < 3; t++)
        for (int r = 0; r < 2; r++) {
            int n = rows[r];
            memset(y, 0xff, sizeof(y));
            CHECK_EQ(be->iface->act_quant(be->ctx, x, y, n, DIM, (int)types[t]), 0);
            CHECK_EQ(kvfs_ggml_act_roundtrip(types[t], x, ref, (uint64_t)n * DIM), 0);
            int bad = 0;
            for (int i = 0; i < n * DIM; i++)
                bad += memcmp(&y[i], &ref[i], sizeof(float)) != 0;
            if (bad)
                fprintf(stderr, "act_quant type %u, %d rows: %d values differ from the definition\n", types[t], n, bad);
            CHECK_EQ(bad, 0);
        }
}

/* The SIMD decoder (the f32 tiles sgemm multiplies) against the definition,
 * bit for bit: every type, random blocks, first with scales as quantizers
 * make them, then with any finite f16 bits as scales (negative, subnormal,
 * zero, large). */
static void check_decode(void)
{
    static const uint32_t types[] = {KVFS_GGML_Q4_0, KVFS_GGML_Q4_1, KVFS_GGML_Q5_0, KVFS_GGML_Q5_1,
                                     KVFS_GGML_Q8_0, KVFS_GGML_Q4_K, KVFS_GGML_Q5_K, KVFS_GGML_Q6_K};
    enum { N = 4096, PAD = 64 };
    static uint8_t q[N / 32 * 34 + N / 256 * 210];
    static float y[N + PAD], ref[N];
    int tested = 0;
    for (int t = 0; t < 8; t++)
        for (int pass = 0; pass < 2; pass++) {
            size_t bytes = kvfs_ggml_row_size(types[t], N);
            fill_row(types[t], q, bytes);
            if (pass) /* every byte random, scales included, but no f16 Inf / NaN */
                for (size_t k = 0; k < bytes; k++) {
                    q[k] = (uint8_t)rnd();
                    if ((k & 1) && (q[k] & 0x7c) == 0x7c)
                        q[k] &= 0xbf;
                }
            memset(y, 0xff, sizeof(y));
            int rc = kvfs_dequant_simd(types[t], q, y, N);
            if (rc == -ENOTSUP)
                continue; /* no SIMD decoder in this build: the definition serves */
            CHECK_EQ(rc, 0);
            CHECK_EQ(kvfs_ggml_dequantize(types[t], q, ref, N), 0);
            int bad = 0, past = 0;
            for (int i = 0; i < N; i++)
                bad += memcmp(&y[i], &ref[i], sizeof(float)) != 0;
            for (int i = N; i < N + PAD; i++) { /* nothing written past the n values */
                uint32_t u;
                memcpy(&u, &y[i], sizeof(u));
                past += u != 0xffffffffu;
            }
            if (bad || past)
                fprintf(stderr, "decode of %s (pass %d): %d of %d values differ from the definition, %d written past\n",
                        kvfs_ggml_type_name(types[t]), pass, bad, N, past);
            CHECK_EQ(bad, 0);
            CHECK_EQ(past, 0);
            tested++;
        }
    printf("SIMD decode checked on %d of 16 type/pass runs\n", tested);
}

/* a value halfway between two neighbouring finite f16 values of any
 * binade and sign (exact in f32): where rounding to f16 must break a tie */
static float f16_tie(void)
{
    uint16_t h;
    do
        h = (uint16_t)rnd();
    while ((h & 0x7c00) == 0x7c00 || (h & 0x7fff) == 0x7bff); /* finite, and its neighbour too */
    return 0.5f * (kvfs_f16_to_f32(h) + kvfs_f16_to_f32((uint16_t)(h + 1)));
}

/* GeGLU (Gemma 3's FFN gate) against ggml's definition, bit for bit: GELU
 * in its tanh form evaluated at the gate rounded to f16, rounded to f16
 * again (GGML_GELU_FP16's table), times up; 0 at or below -10, the gate
 * itself at or above 10.  Gates around both bounds, tiny, huge and ties of
 * the f16 rounding; counts that leave a scalar tail. */
static void check_geglu(const struct kvfs_backend *be)
{
    enum { N = 4099 };
    static float g[N], u[N], y[N];
    for (int i = 0; i < N; i++) {
        int kind = i % 9;
        g[i] = kind == 0 ? -10.0f + 0.001f * (float)(i % 7 - 3) : kind == 1 ? 10.0f + 0.001f * (float)(i % 7 - 3)
             : kind == 2 ? unif() * 1e-6f : kind == 3 ? unif() * 1e5f
             : kind == 4 ? f16_tie() : unif() * 4.0f;
        u[i] = unif() * 3.0f;
    }
    static const int counts[] = {1, 7, 8, 100, N};
    for (int c = 0; c < 5; c++) {
        int n = counts[c], bad = 0;
        memset(y, 0xff, sizeof(y));
        CHECK_EQ(be->iface->geglu(be->ctx, g, u, y, (size_t)n), 0);
        for (int i = 0; i < n; i++) {
            float x = kvfs_f16_to_f32(kvfs_f32_to_f16(g[i]));
            float gl = 0.5f * x * (1.0f + tanhf(0.79788456080286535587989211986876f * x * (1.0f + 0.044715f * x * x)));
            float want = g[i] <= -10.0f ? 0.0f : g[i] >= 10.0f ? g[i] * u[i] : kvfs_f16_to_f32(kvfs_f32_to_f16(gl)) * u[i];
            bad += memcmp(&want, &y[i], sizeof(float)) != 0;
        }
        if (bad)
            fprintf(stderr, "geglu over %d values: %d differ from the definition\n", n, bad);
        CHECK_EQ(bad, 0);
    }
}

int main(void)
{
    struct kvfs_backend be;
    CHECK_EQ(kvfs_backend_cpu_init(2, &be), 0);
    if (!be.iface->weight_create_quant || !be.iface->matmul_act) {
        printf("SKIP: no encoded weights\n");
        return 77;
    }
    check_act_quant(&be);
    check_decode();
    check_geglu(&be);
    static const uint32_t k_types[] = {KVFS_GGML_Q4_K, KVFS_GGML_Q5_K, KVFS_GGML_Q6_K};
    for (int t = 0; t < 3; t++) {
        check_type(&be, k_types[t], KVFS_GGML_Q8_K, 256);
        check_type(&be, k_types[t], KVFS_GGML_Q8_K, 2048);
    }
    static const uint32_t b_types[] = {KVFS_GGML_Q4_0, KVFS_GGML_Q4_1, KVFS_GGML_Q5_0, KVFS_GGML_Q5_1,
                                       KVFS_GGML_Q8_0};
    for (int t = 0; t < 5; t++) {
        int act = b_types[t] == KVFS_GGML_Q4_1 || b_types[t] == KVFS_GGML_Q5_1 ? KVFS_GGML_Q8_1 : KVFS_GGML_Q8_0;
        check_type(&be, b_types[t], act, 512);
        check_type(&be, b_types[t], act, 96); /* an odd count of blocks */
    }
    printf("worst: integer %.3g, float %.3g\n", worst_int, worst_float);
    kvfs_backend_free(&be);
    CHECK_DONE();
}
