/* model_util.c - model loading and tokenizing for kvfsctl commands. */
#include "model_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tool_util.h"

double tool_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int tool_load_model(const char *path, const char *backend, int threads, struct kvfs_model **m,
                    struct kvfs_tokenizer **tok)
{
    char err[512] = "";
    int rc = kvfs_model_load(path, backend, threads, m, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "kvfsctl: cannot load model %s: %s\n", path, err[0] ? err : strerror(-rc));
        return rc;
    }
    if (tok && (rc = kvfs_tokenizer_load((*m)->gguf, tok, err, sizeof(err)))) {
        fprintf(stderr, "kvfsctl: %s: %s\n", path, err);
        kvfs_model_free(*m);
        return rc;
    }
    return 0;
}

int tool_tokenize_file(const struct kvfs_tokenizer *tok, const char *path, int add_bos, int32_t **ids, size_t *n)
{
    uint8_t *text;
    size_t len;
    int rc = tool_read_file(path, &text, &len);
    if (rc) {
        fprintf(stderr, "kvfsctl: %s: %s\n", path, strerror(-rc));
        return rc;
    }
    rc = kvfs_tokenize(tok, (const char *)text, len, add_bos, 0, ids, n);
    if (rc)
        fprintf(stderr, "kvfsctl: %s: %s\n", path, rc == -EILSEQ ? "not valid UTF-8" : strerror(-rc));
    else if (*n == 0) {
        fprintf(stderr, "kvfsctl: %s: no tokens\n", path);
        free(*ids);
        *ids = NULL; /* callers free *ids on every path */
        rc = -EINVAL;
    }
    free(text);
    return rc;
}

int32_t tool_argmax(const float *x, int n)
{
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

int tool_parse_ids(char *s, int32_t **ids, int *n)
{
    int cap = 256, k = 0;
    int32_t *v = malloc(sizeof(int32_t) * cap);
    char *tok, *save = NULL;
    for (tok = strtok_r(s, ", \n\t\r", &save); tok && v; tok = strtok_r(NULL, ", \n\t\r", &save)) {
        char *end;
        long x = strtol(tok, &end, 10);
        if (*end || x < 0 || x > INT32_MAX) {
            free(v);
            return -EINVAL;
        }
        if (k == cap) {
            int32_t *nv = realloc(v, sizeof(int32_t) * (cap *= 2));
            if (!nv) {
                free(v);
                return -ENOMEM;
            }
            v = nv;
        }
        v[k++] = (int32_t)x;
    }
    if (!v)
        return -ENOMEM;
    *ids = v;
    *n = k;
    return k ? 0 : -EINVAL;
}
