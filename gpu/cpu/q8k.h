/* q8k.h - x rows as Q8_K blocks (ggml's block_q8_K, the K-quants' partner
 * in integer products): shared by the CPU backend's kernels. */
#ifndef KVFS_Q8K_H
#define KVFS_Q8K_H

#include <stdint.h>

/* 256 int8 q, the scale d (a float), the sums of each 16 q (bsum, ggml's
 * bsums) and of each 32 (psum, for Q4_K/Q5_K's mins); value j is d * q[j] */
struct q8k {
    _Alignas(32) int8_t q[256];
    int16_t bsum[16];
    int16_t psum[8];
    float d;
};

#endif
