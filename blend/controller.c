/* controller.c - recompute ratio from load and compute speed (controller.h). */
#include "controller.h"

float kvfs_auto_ratio(const struct kvfs_ratio_inputs *in, double *load_left_s)
{
    double left = 0;
    if (in->bytes_total > in->bytes_done) {
        /* nothing measured yet: assume the rest takes as long again as the
         * time already spent */
        double bw = in->bytes_done && in->load_elapsed_s > 0 ? (double)in->bytes_done / in->load_elapsed_s : 0;
        left = bw > 0 ? (double)(in->bytes_total - in->bytes_done) / bw : in->load_elapsed_s;
    }
    if (load_left_s)
        *load_left_s = left;
    float r = in->min_ratio;
    if (in->n_rows > 0 && in->n_sparse > 0 && in->sec_per_row_layer > 0) {
        double rows = left / (in->sec_per_row_layer * in->n_sparse) - in->n_suffix;
        double fit = rows / in->n_rows;
        if (fit > r)
            r = fit > 1.0 ? 1.0f : (float)fit;
    }
    if (r < in->min_ratio)
        r = in->min_ratio;
    return r > 1.0f ? 1.0f : r;
}

int kvfs_auto_rows(const struct kvfs_rows_inputs *in)
{
    double bw = in->load_elapsed_s > 0 ? (double)in->bytes_done / in->load_elapsed_s : 0;
    double load_left = in->bytes_done < in->bytes_total && bw > 0 ? (double)(in->bytes_total - in->bytes_done) / bw : 0;
    double per_row = in->sparse_layer_s / (double)(in->n_sel + in->n_suffix);
    long fit = per_row > 0 ? (long)(load_left / (per_row * in->layers_left)) - in->n_suffix : in->n_sel;
    return fit < in->floor_rows ? in->floor_rows : fit > in->n_sel ? in->n_sel : (int)fit;
}
