/* recipe.h - blend recipes: the text a user writes to blends/NAME.recipe
 * (or passes to KVFS_IOC_BLEND), parsed and keyed (see kvfs(8), NAMESPACE, blends/).
 *
 *   <hash> | chunk <hash> | <hash>.kv     a chunk, in prompt order (1..64)
 *   ratio=R | ratio=auto                  share of chunk rows recomputed
 *   select=query|fixed|gradual            how rows are chosen
 *   dtype=f16|f32|bf16|q8|q4              the result's stored dtype (default: the mount's)
 *   suffix=TEXT                           the query (\n \t \\ escapes)
 *   suffix_tokens=ID,ID,...               the query as token ids
 *   # comment, blank lines
 *
 * No FUSE, no model: unit-tested and fuzzable on its own. */
#ifndef KVFS_RECIPE_H
#define KVFS_RECIPE_H

#include <stddef.h>
#include <stdint.h>

#include "blend.h"
#include "kvformat.h"

struct kvfs_recipe {
    char hashes[KVFS_BLEND_MAX_CHUNKS][KVFS_HASH_HEX_LEN + 1];
    int n;
    float ratio;
    int auto_ratio;     /* ratio=auto: the loading controller decides */
    int select;         /* KVFS_BLEND_SELECT_* */
    char *suffix;       /* unescaped text, or NULL */
    int32_t *suffix_ids;/* or token ids */
    int n_suffix_ids;
    uint32_t dtype;     /* dtype=: KVFS_DTYPE_*, 0 when not given */
    int incomplete;     /* after -EINVAL: every line was fine, only a chunk or the query is missing yet */
};

/* Parse recipe text (len bytes, NUL bytes refused).  On error -EINVAL /
 * -E2BIG / -ENOMEM with "line N: what was wrong" in err, and nothing to free.
 * On success free with kvfs_recipe_free. */
int kvfs_recipe_parse(const char *text, size_t len, struct kvfs_recipe *r, char *err, size_t errlen);
void kvfs_recipe_free(struct kvfs_recipe *r);

/* The recipe's identity: SHA-256 over a canonical form (chunk hashes in
 * order, ratio or auto with the given floor, selection, the result's dtype
 * (dtype= or dtype_default when not given; f16 adds nothing, so keys from
 * before dtype= stay), the query text or ids), so comments, spacing and
 * option order do not make a new blend. */
void kvfs_recipe_key(const struct kvfs_recipe *r, float min_ratio, uint32_t dtype_default,
                     char hex[KVFS_HASH_HEX_LEN + 1]);

/* Length of the leading chunk list two recipes share. */
int kvfs_recipe_common_prefix(const struct kvfs_recipe *a, const struct kvfs_recipe *b);

#endif
