/* experiment.h - blend variants kept for comparison, never served.
 *
 * kvfsctl eval (tools/cmd_eval.c) and the tests measure these against what
 * kvfs serves; the daemon, kvfsctl blend and kvfs_blend / kvfs_blend_ex /
 * kvfs_blend_stream / kvfs_blend_batch always use the defaults
 * (kvfs_blend_experiment_init).  What was measured and dropped is gone
 * (BENCHMARKS.md says what and why); what stays here was better than the
 * served rule on some set and is worth measuring again. */
#ifndef KVFS_EXPERIMENT_H
#define KVFS_EXPERIMENT_H

#include <stddef.h>

struct kvfs_blend_experiment {
    float vote_from;   /* select=query: the share of layers, from the bottom, whose attention does not
                        * count (default 1/3: they attend mostly by position and locally); [0, 1) */
    int vote_local;    /* select=query: sliding-window layers vote too, through their window (the
                        * default; 0: global layers only, unless there are none) */
    float pos_prior;   /* select=query: row t of a chunk (0: its first) ranks by its mass x
                        * (t + 1)^-pos_prior: a chunk's first rows deviate most from a full prefill's
                        * (0: off, the default); [0, 4] */
};

/* The served rule. */
void kvfs_blend_experiment_init(struct kvfs_blend_experiment *x);
/* Every field in its range (-EINVAL with the reason in err). */
int kvfs_blend_experiment_check(const struct kvfs_blend_experiment *x, char *err, size_t errlen);
/* the served rule: what every blend but kvfsctl eval's uses (blend.c, batch.c) */
extern const struct kvfs_blend_experiment blend_served;


#endif
