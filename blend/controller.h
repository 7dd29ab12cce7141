/* controller.h - CacheBlend's loading controller: pick the recompute ratio
 * so that recomputing hides behind loading.
 *
 * When the check layer's K/V have arrived, the blend knows how fast its
 * chunks stream in (bytes so far / time so far) and how fast this backend
 * recomputes (the full layer 0 it just ran).  Recomputing ratio r of the
 * chunk rows in each of the remaining layers costs
 *     t_compute(r) = s * n_sparse * (r * n_rows + n_suffix)
 * (s = seconds per row per layer); loading the rest costs
 *     t_load = bytes_left / bandwidth.
 * The controller picks the largest r with t_compute(r) <= t_load: quality
 * for free while I/O is the bottleneck, clamped to [min_ratio, 1] so a fast
 * tier never drops below the quality floor.  The blend re-decides once,
 * after its first sparse layer (blend.c), with that layer's real cost: it
 * may then drop rows, never add them. */
#ifndef KVFS_CONTROLLER_H
#define KVFS_CONTROLLER_H

#include <stdint.h>

struct kvfs_ratio_inputs {
    uint64_t bytes_done, bytes_total; /* loader progress (stored bytes) */
    double load_elapsed_s;            /* since the loader started */
    double sec_per_row_layer;         /* measured recompute speed */
    int n_sparse;                     /* layers after the check layer */
    int n_rows, n_suffix;             /* chunk rows, query rows */
    float min_ratio;                  /* quality floor */
};

/* The ratio to use (in [min_ratio, 1]); *load_left_s (may be NULL) gets the
 * predicted remaining load time. */
float kvfs_auto_ratio(const struct kvfs_ratio_inputs *in, double *load_left_s);

/* The re-decision after the first sparse layer, with that layer's real
 * compute time: the rows (of n_sel, never more, never below floor_rows) that
 * the remaining load still hides over the remaining layers. */
struct kvfs_rows_inputs {
    double sparse_layer_s;            /* compute time of one sparse layer (waits excluded) */
    uint64_t bytes_done, bytes_total; /* loader progress */
    double load_elapsed_s;
    int layers_left;                  /* including this one */
    int n_sel, n_suffix;              /* rows recomputed now, query rows */
    int floor_rows;                   /* min_ratio's share of the chunk rows */
};
int kvfs_auto_rows(const struct kvfs_rows_inputs *in);

#endif
