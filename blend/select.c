/* select.c - the row selections' names (blend.h), apart from blend.c so
 * that the recipe parser builds without the model runtime (the fuzz
 * target links recipe.c alone). */
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
