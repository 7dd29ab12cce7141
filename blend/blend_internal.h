/* blend_internal.h - pieces of blend.c shared with batch.c and service.c
 * (blend/ only). */
#ifndef KVFS_BLEND_INTERNAL_H
#define KVFS_BLEND_INTERNAL_H

#include "blend.h"
#include "experiment.h"

struct kvfs_loader;

/* kvfs_blend_stream with a variant x (kvfs_blend_eval's). */
int blend_stream(const struct kvfs_model *m, struct kvfs_loader *ld, const int32_t *suffix, int n_suffix,
                 const struct kvfs_blend_opts *o, const struct kvfs_blend_experiment *x, struct kvfs_kv_cache *c,
                 int32_t **tokens, float *logits, struct kvfs_blend_stats *st, char *err, size_t errlen);

/* Monotonic seconds, for blend statistics. */
double blend_now_s(void);
/* Every chunk of the loader is the model's, with keys after RoPE. */
int blend_check_chunks(const struct kvfs_model *m, struct kvfs_loader *ld, char *err, size_t errlen);
/* Every option in its range (-EINVAL with the reason in err): what
 * kvfs_blend_stream and kvfs_blend_batch both check. */
int blend_check_opts(const struct kvfs_blend_opts *o, char *err, size_t errlen);
/* Chunk rows recomputed at sparse layer j of n_sparse. */
int blend_rows_at(const struct kvfs_blend_opts *o, int j, int n_sparse, int n_rows);
/* The k rows of the highest d_dev[0..n) (forced first), ascending, into
 * device d_out and host out. */
int blend_device_top(const struct kvfs_model *m, const float *d_dev, const uint8_t *d_forced, int n, int k,
                     int32_t *d_out, int32_t *out);
/* Rows at the head of the prompt the query selection never picks: those of
 * its first chunk (the loader's chunk first_chunk), exact already. */
int blend_exact_rows(const struct kvfs_loader *ld, int first_chunk);
/* The position prior (x->pos_prior, an experiment): host mass[r] of each
 * chunk row r (chunk_of[r]: its chunk; a chunk's rows are consecutive)
 * scaled by (t + 1)^-pos_prior, t its place in its chunk.  Nothing when it
 * is 0. */
void blend_position_prior(const struct kvfs_blend_experiment *x, const int32_t *chunk_of, float *mass, int n_rows);
/* The k rows of the highest scores among d_dev[from..n) (forced first),
 * ascending, into host out (k is cut to n - from). */
int blend_device_top_from(const struct kvfs_model *m, const float *d_dev, const uint8_t *d_forced, int from, int n,
                          int *k, int32_t *d_out, int32_t *out);
/* the width of layer l's cache rows (gemma4: its own, a shared-KV layer
 * its source's; MLA: the cached row) */
size_t blend_kv_dim(const struct kvfs_model *m, const struct kvfs_kv_cache *c, int l);
/* gemma4: the per-layer inputs of rows d_rows of src (laid out for n_src
 * rows) into dst laid out for n_dst rows; nothing without PLE */
int blend_gather_ple(const struct kvfs_model *m, const struct kvfs_work *src, int n_src, const int32_t *d_rows,
                     float *dst, int n_dst);
/* Wait for `layer`, put the loader's chunks map[0..n_map) (map NULL: all,
 * in order) into cache rows row0.. and re-position the keys of rows
 * [row0, n_rows) by d_delta (rows before row0 are left as they are). */
int blend_take_layer(const struct kvfs_model *m, struct kvfs_loader *ld, const int *map, int n_map, int row0,
                     struct kvfs_kv_cache *c, int layer, const int32_t *d_delta, int n_rows, char *err, size_t errlen);
/* Query selection's first pass (every layer put in place on the way, the
 * chunks from row row0 as in blend_take_layer): the attention the suffix
 * rows pay each row, into d_mass[0..n_rows+n_suffix). */
int blend_query_mass(const struct kvfs_model *m, struct kvfs_loader *ld, const int *map, int n_map, int row0,
                     struct kvfs_kv_cache *c, const struct kvfs_work *w, int n_rows, int n_suffix,
                     const int32_t *d_delta, const struct kvfs_blend_experiment *x, float *d_mass, char *err,
                     size_t errlen);
/* The chunk shift (blend/shift.c), at layer l before the fresh K/V
 * (fresh_k, fresh_v: device [n_sel][kv_dim]) of the recomputed chunk rows
 * idx[0..n_sel) (ascending; d_idx the same on the device) replace the cached
 * ones: every other row r in [row_lo, n_rows) of a later chunk
 * (chunk_of[r] >= 1) moves by shift x the mean deviation (fresh - cached) of
 * its chunk's recomputed rows.  shift 0: nothing. */
/* cache: each row's RoPE angles, kept from layer to layer (the rows and
 * their positions do not change within a blend); zero-initialized by the
 * caller, freed with blend_shift_cache_free; NULL: computed every layer. */
#define BLEND_SHIFT_BASES 2 /* Gemma 3: local and global layers */
struct shift_angles { /* one RoPE base, one set of rows: cos and sin of each selected
                       * row's -position, and of each row of [row_lo, n_rows) at its
                       * position (what a row that does not move leaves unset) */
    float theta;
    int n_sel, row_lo, n_rows, half;
    uint64_t idx_hash;
    double *sel_cs, *sel_sn, *add_cs, *add_sn; /* [n_sel][half], [n_rows - row_lo][half] */
};
struct blend_shift_cache {
    struct shift_angles a[BLEND_SHIFT_BASES];
    /* a backend's chunk_shift: chunk_of on the device, for the rows it was
     * uploaded for (hash and count), freed through m */
    const struct kvfs_model *m;
    int32_t *d_chunk_of;
    int d_rows;
    uint64_t d_hash;
};
int blend_shift_layer(const struct kvfs_model *m, struct kvfs_kv_cache *c, int l, const int32_t *chunk_of,
                      int n_chunks, int row_lo, int n_rows, const int32_t *idx, const int32_t *d_idx, int n_sel,
                      const float *fresh_k, const float *fresh_v, float shift, struct blend_shift_cache *cache);
void blend_shift_cache_free(struct blend_shift_cache *cache);

#endif
