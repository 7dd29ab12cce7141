/* experiment.c - the served rule's values for the compared variants, and
 * their ranges (experiment.h). */
#include <errno.h>

#include "experiment.h"
#include "log.h" /* kvfs_errf */

const struct kvfs_blend_experiment blend_served = {.vote_from = 1.0f / 3.0f, .vote_local = 1, .pos_prior = 0.0f};

void kvfs_blend_experiment_init(struct kvfs_blend_experiment *x)
{
    *x = blend_served;
}

int kvfs_blend_experiment_check(const struct kvfs_blend_experiment *x, char *err, size_t errlen)
{
    if (!(x->vote_from >= 0.0f && x->vote_from < 1.0f))
        return kvfs_errf(err, errlen, -EINVAL, "vote_from %g is outside [0, 1)", (double)x->vote_from);
    if (!(x->pos_prior >= 0.0f && x->pos_prior <= 4.0f))
        return kvfs_errf(err, errlen, -EINVAL, "pos_prior %g is outside [0, 4]", (double)x->pos_prior);
    return 0;
}
