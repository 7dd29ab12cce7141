// quant_cuda.h - ggml block-quantized weights on the device: decoding kernels
// (the same values as gpu/ggml/quant.c, bit for bit) and the small-batch
// product that decodes as it goes.  Used by backend_cuda.cu; the two C
// functions also by test_cuda_decode.
#ifndef KVFS_QUANT_CUDA_H
#define KVFS_QUANT_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
// elements and bytes per block of a type the device decodes; 0: not one
int kq_block(uint32_t type, uint32_t *bytes);
// the device's decoder run on the host: element e of a row (test_cuda_decode)
float kq_value_host(uint32_t type, const uint8_t *row, int e);
// the device's 8-at-a-time decoder (its f16 products) run on the host:
// elements c .. c + 7 of a row, c a multiple of 8 (test_cuda_decode)
void kq_decode8_host(uint32_t type, const uint8_t *row, int c, float *v);
#ifdef __cplusplus
}

#include <cuda_fp16.h>
#include <cuda_runtime.h>

// out[r][c] (f16, row-major, in_dim wide) = rows r0 .. r0 + rows - 1 of W
cudaError_t kq_decode_f16(cudaStream_t s, uint32_t type, const uint8_t *w, size_t row_bytes, int r0, int rows,
                          int in_dim, __half *out);

// out[i][c] (f32) = row ids[i] of W (ids on the device)
cudaError_t kq_decode_rows_f32(cudaStream_t s, uint32_t type, const uint8_t *w, size_t row_bytes,
                               const int32_t *ids, int n, int in_dim, float *out);

// y[i][o] = x[i] . W[o] for i < n <= KQ_GEMV_MAX_N, in f32, decoding W as it goes
#define KQ_GEMV_MAX_N 8
cudaError_t kq_gemv(cudaStream_t s, uint32_t type, const uint8_t *w, size_t row_bytes, int out_dim, int in_dim,
                    const float *x, int n, float *y);

// y[i] = (half)x[i]
cudaError_t kq_to_half(cudaStream_t s, const float *x, __half *y, size_t n);

// Q8_K's round trip (ggml's quantize_row_q8_K_ref then dequantize), blocks of 256
cudaError_t kq_act_q8k(cudaStream_t s, const float *x, float *y, size_t n_blocks);
#endif /* __cplusplus */

#endif
