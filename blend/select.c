/* select.c - the row selections' names and the ratios' ranges (blend.h),
 * apart from blend.c so that the recipe parser builds without the model
 * runtime (the fuzz target links recipe.c alone). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "blend.h"

const char *kvfs_blend_select_name(int select)
{
    return select == KVFS_BLEND_SELECT_GRADUAL ? "gradual" : select == KVFS_BLEND_SELECT_QUERY ? "query" : "fixed";
}

int kvfs_blend_select_parse(const char *name)
{
    for (int sel = KVFS_BLEND_SELECT_FIXED; sel <= KVFS_BLEND_SELECT_QUERY; sel++)
        if (!strcmp(name, kvfs_blend_select_name(sel)))
            return sel;
    return -1;
}

/* The ratios' ranges and min_ratio's default (blend.h): here, beside the
 * selections' names, so the recipe parser (and its fuzz target) has them
 * without the rest of blend.c. */
int kvfs_blend_ratio_ok(float ratio)
{
    return ratio >= 0.0f && ratio <= 1.0f;
}

int kvfs_blend_min_ratio_ok(float min_ratio)
{
    return min_ratio > 0.0f && min_ratio <= 1.0f;
}

int kvfs_blend_min_ratio_parse(const char *text, float *min_ratio)
{
    char *end;
    if (!text) {
        *min_ratio = KVFS_BLEND_DEFAULT_RATIO;
        return 0;
    }
    float v = strtof(text, &end);
    if (end == text || *end || !kvfs_blend_min_ratio_ok(v))
        return -EINVAL;
    *min_ratio = v;
    return 0;
}
