/* kvfsctl compare - how far apart two KV caches of the same prompt are. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "kvformat.h"
#include "kvquant.h"
#include "tool_util.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: kvfsctl compare [--max-err E] FILE_A FILE_B\n"
               "Compare two chunk or blend files of the same tokens and shapes (v1, any dtype):\n"
               "prints, for K and V, the relative error ||a - b|| / ||a|| of the worst layer\n"
               "and the largest |a - b| relative to the largest |a| of that layer.  Exit\n"
               "status 0 when the relative errors are within E (default 0.02), 1 when not or\n"
               "when the files differ in tokens, positions or shapes, 2 on a usage error.\n");
}

int cmd_compare(int argc, char **argv)
{
    double max_err = 0.02;
    const struct tool_opt opts[] = {TOOL_OPT("max-err", 0, DOUBLE, &max_err), {0}};
    const struct tool_cmd cmd = {usage, opts, 2, 2};
    int rc = tool_parse_args(&cmd, argc, argv);
    if (rc != TOOL_ARGS_OK)
        return rc;
    const char *pa = argv[optind], *pb = argv[optind + 1];
    uint8_t *a = NULL, *b = NULL;
    size_t la = 0, lb = 0;
    struct kvfs_header ha, hb;
    char why[256] = "";
    int ret = 1;
    if ((rc = tool_read_file(pa, &a, &la)) || (rc = tool_read_file(pb, &b, &lb))) {
        fprintf(stderr, "kvfsctl compare: cannot read %s: %s\n", a ? pb : pa, strerror(-rc));
        goto out;
    }
    if (kvfs_file_verify(a, la, &ha, why, sizeof(why)) || kvfs_file_verify(b, lb, &hb, why, sizeof(why))) {
        fprintf(stderr, "kvfsctl compare: not a valid kvfs file: %s\n", why);
        goto out;
    }
    int same_shapes = 1; /* layer by layer (kvfs(5), Layer shapes) */
    for (uint32_t l = 0; ha.fp.n_layer == hb.fp.n_layer && l < ha.fp.n_layer; l++) {
        struct kvfs_layer_shape sa, sb;
        kvfs_layer_shape_get(&ha, l, &sa);
        kvfs_layer_shape_get(&hb, l, &sb);
        same_shapes &= !memcmp(&sa, &sb, sizeof(sa));
    }
    if (ha.n_tokens != hb.n_tokens || ha.pos0 != hb.pos0 || ha.fp.n_layer != hb.fp.n_layer ||
        ha.fp.n_kv_head != hb.fp.n_kv_head || ha.fp.head_dim != hb.fp.head_dim || !same_shapes) {
        fprintf(stderr, "kvfsctl compare: different shapes: %u tokens at %u, %u layers x %u x %u against %u at %u, "
                "%u x %u x %u\n", ha.n_tokens, ha.pos0, ha.fp.n_layer, ha.fp.n_kv_head, ha.fp.head_dim, hb.n_tokens,
                hb.pos0, hb.fp.n_layer, hb.fp.n_kv_head, hb.fp.head_dim);
        goto out;
    }
    for (uint32_t t = 0; t < ha.n_tokens; t++)
        if (kvfs_header_token(&ha, t) != kvfs_header_token(&hb, t)) {
            fprintf(stderr, "kvfsctl compare: token %u differs (%u, %u)\n", t, kvfs_header_token(&ha, t),
                    kvfs_header_token(&hb, t));
            goto out;
        }
    size_t n = (size_t)ha.n_tokens * ha.fp.n_kv_head * ha.fp.head_dim;
    double worst[2] = {0, 0}, worst_max[2] = {0, 0};
    uint32_t at[2] = {0, 0};
    float *fa = malloc(sizeof(float) * 2 * n), *fb = malloc(sizeof(float) * 2 * n);
    if (!fa || !fb) {
        fprintf(stderr, "kvfsctl compare: out of memory\n");
        free(fa);
        free(fb);
        goto out;
    }
    for (uint32_t l = 0; l < ha.fp.n_layer; l++) {
        struct kvfs_layer_entry ea, eb;
        kvfs_layer_entry_get(&ha, l, &ea);
        kvfs_layer_entry_get(&hb, l, &eb);
        if (!kvfs_layer_bytes(&ha, l)) /* reads another layer's cache: compared there */
            continue;
        n = (size_t)ha.n_tokens * kvfs_layer_kv_dim(&ha, l);
        /* any two dtypes: both decoded to f32 (q8/q4 as stored) */
        kvfs_layer_decode(&ha, l, a + ea.offset, fa, fa + n);
        kvfs_layer_decode(&hb, l, b + eb.offset, fb, fb + n);
        for (int kind = 0; kind < 2; kind++) { /* K then V */
            const float *xa = fa + kind * n, *xb = fb + kind * n;
            double scale = 0, diff = 0, ss_a = 0, ss_d = 0;
            for (size_t i = 0; i < n; i++) {
                double va = xa[i], vb = xb[i];
                scale = fmax(scale, fabs(va));
                diff = fmax(diff, fabs(va - vb));
                ss_a += va * va;
                ss_d += (va - vb) * (va - vb);
            }
            double e = ss_a > 0 ? sqrt(ss_d / ss_a) : sqrt(ss_d), em = scale > 0 ? diff / scale : diff;
            if (e > worst[kind] || isnan(e)) {
                worst[kind] = e;
                at[kind] = l;
            }
            worst_max[kind] = fmax(worst_max[kind], em);
        }
    }
    free(fa);
    free(fb);
    printf("K relative error %.3g (layer %u), V %.3g (layer %u); largest |a - b| / max |a|: K %.3g, V %.3g\n",
           worst[0], at[0], worst[1], at[1], worst_max[0], worst_max[1]);
    ret = worst[0] <= max_err && worst[1] <= max_err ? 0 : 1;
out:
    free(a);
    free(b);
    return ret;
}
