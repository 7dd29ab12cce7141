/* fuzz_ioctl.c - libFuzzer target: the ioctl request decoder
 * (fs/ioctl_req.c) on arbitrary bytes, as the daemon meets them: the bytes
 * fill a KVFS_IOC_BLEND_BATCH struct (short input zero-padded), the header
 * is checked, the recipes field is split at "%%" lines and each piece is
 * parsed as a recipe, as the daemon does before blending.  Every piece lies
 * inside the field, none holds a separator line, at most the cap is
 * reported, and every refusal says why. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ioctl_req.h"
#include "kvfs_ioctl.h"
#include "recipe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct kvfs_blend_batch_req *r = calloc(1, sizeof(*r));
    if (!r)
        return 0;
    memcpy(r, data, size < sizeof(*r) ? size : sizeof(*r));
    char err[512] = "";
    if (kvfs_ioctl_header_check(r, err, sizeof(err)) && !err[0])
        abort();
    char *texts[KVFS_BATCH_MAX + 1];
    int n = kvfs_ioctl_split_batch(r->recipes, sizeof(r->recipes), texts, KVFS_BATCH_MAX + 1);
    if (n < 0 || n > KVFS_BATCH_MAX + 1)
        abort();
    for (int i = 0; i < n; i++) {
        size_t len = strlen(texts[i]);
        if (texts[i] < r->recipes || texts[i] + len >= r->recipes + sizeof(r->recipes))
            abort();
        if (strstr(texts[i], "\n%%\n") || (len >= 3 && !strcmp(texts[i] + len - 3, "\n%%")))
            abort();
        struct kvfs_recipe rec;
        err[0] = '\0';
        if (kvfs_recipe_parse(texts[i], len, &rec, err, sizeof(err))) {
            if (!err[0])
                abort();
        } else {
            kvfs_recipe_free(&rec);
        }
    }
    free(r);
    return 0;
}
