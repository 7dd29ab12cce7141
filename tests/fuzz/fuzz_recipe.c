/* fuzz_recipe.c - libFuzzer target: the blend recipe parser
 * (blend/recipe.c) on arbitrary text.  An accepted recipe has 1 to
 * KVFS_BLEND_MAX_CHUNKS well-formed chunk hashes and a ratio in [0, 1],
 * its key is computable, and it is freed without a leak; a rejected one
 * says why. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "recipe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct kvfs_recipe r;
    char err[512] = "";
    int rc = kvfs_recipe_parse((const char *)data, size, &r, err, sizeof(err));
    if (rc) {
        if (!err[0])
            abort(); /* every refusal names what was wrong */
        return 0;
    }
    if (r.n < 1 || r.n > KVFS_BLEND_MAX_CHUNKS || (!r.auto_ratio && (r.ratio < 0.0f || r.ratio > 1.0f)))
        abort();
    for (int i = 0; i < r.n; i++) {
        uint8_t d[32];
        if (strlen(r.hashes[i]) != KVFS_HASH_HEX_LEN || kvfs_hex_to_hash(r.hashes[i], d) != 0)
            abort();
    }
    char key[KVFS_HASH_HEX_LEN + 1];
    kvfs_recipe_key(&r, 0.15f, 0, key);
    (void)kvfs_recipe_common_prefix(&r, &r);
    kvfs_recipe_free(&r);
    return 0;
}
