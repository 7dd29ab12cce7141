/* level.h - the kernels compiled once per x86-64 ISA level.
 *
 * Every file of gpu/cpu/ with SIMD code is compiled once for each level
 * (Makefile: CPU_LEVELS) with that level's -march and -DKVFS_CPU_LEVEL=name.
 * The macros below give each copy's external names the level as a suffix
 * (cpu_matmul -> cpu_matmul_v3), so the copies link side by side and
 * backend.c picks one table at run time by cpuid, as ggml's CPU variants and
 * OpenBLAS's DYNAMIC_ARCH do.  Results may differ between levels (AVX-512's
 * softmax, FMA in the dot kernels); within a level they do not depend on
 * batching, threads or block boundaries. */
#ifndef KVFS_CPU_LEVEL_H
#define KVFS_CPU_LEVEL_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

#ifndef KVFS_CPU_LEVEL
#error "gpu/cpu/ kernels are compiled once per ISA level: -DKVFS_CPU_LEVEL=v2|v3|v4|vnni (Makefile)"
#endif
#define KVFS_CPU_CAT2(n, l) n##_##l
#define KVFS_CPU_CAT(n, l) KVFS_CPU_CAT2(n, l)
#define KVFS_CPU_NAME(n) KVFS_CPU_CAT(n, KVFS_CPU_LEVEL)

#define cpu_level_table KVFS_CPU_NAME(cpu_level_table)
#define cpu_matmul KVFS_CPU_NAME(cpu_matmul)
#define cpu_matmul_act KVFS_CPU_NAME(cpu_matmul_act)
#define cpu_weight_rows KVFS_CPU_NAME(cpu_weight_rows)
#define cpu_act_quant KVFS_CPU_NAME(cpu_act_quant)
#define cpu_round_f16 KVFS_CPU_NAME(cpu_round_f16)
#define cpu_rmsnorm KVFS_CPU_NAME(cpu_rmsnorm)
#define cpu_rope KVFS_CPU_NAME(cpu_rope)
#define cpu_add KVFS_CPU_NAME(cpu_add)
#define cpu_swiglu KVFS_CPU_NAME(cpu_swiglu)
#define cpu_scale KVFS_CPU_NAME(cpu_scale)
#define cpu_mul_rows KVFS_CPU_NAME(cpu_mul_rows)
#define cpu_swiglu_oai KVFS_CPU_NAME(cpu_swiglu_oai)
#define cpu_attention_sinks KVFS_CPU_NAME(cpu_attention_sinks)
#define cpu_attn_mass_sinks KVFS_CPU_NAME(cpu_attn_mass_sinks)
#define cpu_geglu KVFS_CPU_NAME(cpu_geglu)
#define cpu_get_rows KVFS_CPU_NAME(cpu_get_rows)
#define cpu_row_sqdiff KVFS_CPU_NAME(cpu_row_sqdiff)
#define cpu_gather_rows KVFS_CPU_NAME(cpu_gather_rows)
#define cpu_scatter_rows KVFS_CPU_NAME(cpu_scatter_rows)
#define cpu_topk KVFS_CPU_NAME(cpu_topk)
#define cpu_attention KVFS_CPU_NAME(cpu_attention)
#define cpu_attn_mass KVFS_CPU_NAME(cpu_attn_mass)
#define cpu_upload_kv KVFS_CPU_NAME(cpu_upload_kv)
#define cpu_upload_kvq KVFS_CPU_NAME(cpu_upload_kvq)
#define kvfs_dequant_simd KVFS_CPU_NAME(kvfs_dequant_simd)
#define kvfs_qmm_vnni KVFS_CPU_NAME(kvfs_qmm_vnni)
#define kvfs_qmm_vnni_has KVFS_CPU_NAME(kvfs_qmm_vnni_has)
#define kvfs_qmm_vnni_gemv KVFS_CPU_NAME(kvfs_qmm_vnni_gemv)
#define kvfs_qmm_vnni_gemv_has KVFS_CPU_NAME(kvfs_qmm_vnni_gemv_has)
#define q8x_make KVFS_CPU_NAME(q8x_make)
#define q8x_recover KVFS_CPU_NAME(q8x_recover)
#define q8x_free KVFS_CPU_NAME(q8x_free)
#define q8k_rows KVFS_CPU_NAME(q8k_rows)
#define dot_rows_avx2 KVFS_CPU_NAME(dot_rows_avx2)
#define dot_rows_q8 KVFS_CPU_NAME(dot_rows_q8)
#define dot_rows_qk KVFS_CPU_NAME(dot_rows_qk)

/* this level's kernels (iface.c; struct in internal.h) */
struct cpu_level_kernels;
extern const struct cpu_level_kernels cpu_level_table;

/* the level's entries of the interface */
int cpu_matmul(void *vctx, const struct kvfs_weight *w, const float *bias, const float *x, float *y, int n);
int cpu_matmul_act(void *vctx, const struct kvfs_weight *w, const float *bias, int act_type, const float *x,
                   float *tmp, float *y, int n);
int cpu_weight_rows(void *vctx, const struct kvfs_weight *w, const int32_t *ids, float *out, int n);
int cpu_act_quant(void *ctx, const float *x, float *y, int n, int dim, int type);
int cpu_round_f16(void *ctx, float *x, size_t count);
int cpu_rmsnorm(void *ctx, const float *x, const float *g, float *y, int n, int dim, float eps);
int cpu_rope(void *ctx, float *x, const int32_t *pos, int n, int n_heads, int head_dim, int rope_dim, float theta,
             int style, const float *freq_factors);
int cpu_add(void *ctx, const float *a, const float *b, float *out, size_t count);
int cpu_swiglu(void *ctx, const float *gate, const float *up, float *out, size_t count);
int cpu_scale(void *ctx, const float *x, float s, float *y, size_t count);
int cpu_mul_rows(void *ctx, const float *x, const float *s, float *y, int n, int dim);
int cpu_swiglu_oai(void *ctx, const float *gate, const float *up, float *out, size_t count, float alpha, float limit);
int cpu_attention_sinks(void *ctx, const float *q, const int32_t *q_pos, int n_q, const float *k, const float *v,
                        const int32_t *kv_pos, int n_kv, int n_head, int n_kv_head, int head_dim, float scale,
                        int window, float softcap, const float *sinks, float *out);
int cpu_attn_mass_sinks(void *ctx, const float *q, const int32_t *q_pos, int n_q, const float *k,
                        const int32_t *kv_pos, int n_kv, int n_head, int n_kv_head, int head_dim, float scale,
                        int window, float softcap, const float *sinks, float *out);
int cpu_geglu(void *ctx, const float *gate, const float *up, float *out, size_t count);
int cpu_get_rows(void *ctx, const float *table, const int32_t *ids, float *out, int n, int dim);
int cpu_row_sqdiff(void *ctx, const float *a, const float *b, float *out, int n, int dim);
int cpu_gather_rows(void *ctx, const float *src, const int32_t *idx, float *out, int n_idx, int dim);
int cpu_scatter_rows(void *ctx, const float *src, const int32_t *idx, float *dst, int n_idx, int dim);
int cpu_topk(void *ctx, const float *scores, const uint8_t *forced, int n, int k, int32_t *out);
int cpu_attention(void *vctx, const float *q, const int32_t *q_pos, int n_q, const float *k, const float *v,
                  const int32_t *kv_pos, int n_kv, int n_head, int n_kv_head, int head_dim, float scale, int window,
                  float softcap, float *out);
int cpu_attn_mass(void *vctx, const float *q, const int32_t *q_pos, int n_q, const float *k, const int32_t *kv_pos,
                  int n_kv, int n_head, int n_kv_head, int head_dim, float scale, int window, float softcap,
                  float *out);
int cpu_upload_kv(void *vctx, float *dst, const void *host, size_t count, int type);
int cpu_upload_kvq(void *vctx, float *k, float *v, const void *blocks, uint32_t n_tokens, uint32_t kv_dim, int codec);

#endif
