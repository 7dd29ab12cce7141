/* model_util.c - model loading and tokenizing for kvfsctl commands. */
#include "model_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat_template.h"
#include "gguf.h"
#include "tool_util.h"

double tool_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

double tool_cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
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

int tool_chat_check(const char *cmd, struct tool_chat *c)
{
    if (c->tmpl)
        c->on = 1;
    if (c->system && !c->on) {
        fprintf(stderr, "kvfsctl %s: --system is a chat's turn: it needs --chat\n", cmd);
        return -EINVAL;
    }
    return 0;
}

/* The template: --chat-template's, or the GGUF's (malloc'ed) */
static int chat_template(const char *cmd, const struct kvfs_gguf *g, const struct tool_chat *c, char **tmpl)
{
    if (c->tmpl) {
        *tmpl = strdup(c->tmpl);
        return *tmpl ? 0 : -ENOMEM;
    }
    struct kvfs_gguf_str s;
    if (kvfs_gguf_get_str(g, "tokenizer.chat_template", &s)) {
        /* llama.cpp would fall back to chatml, a wrong prompt for most
         * models without a template (Gemma 3 270M's base GGUF) */
        fprintf(stderr, "kvfsctl %s: the model has no tokenizer.chat_template: name one with --chat-template "
                "(e.g. chatml, gemma, llama3)\n", cmd);
        return -ENOENT;
    }
    if (!(*tmpl = malloc(s.len + 1)))
        return -ENOMEM;
    memcpy(*tmpl, s.ptr, s.len);
    (*tmpl)[s.len] = 0;
    return 0;
}

/* [--system's turn,] the user's turn user[0..len), the generation prompt */
static int chat_render(const char *cmd, const struct kvfs_gguf *g, const struct tool_chat *c, const char *user,
                       size_t len, char **text)
{
    char err[256] = "", *tmpl = NULL, *content = strndup(user, len);
    int rc = content ? chat_template(cmd, g, c, &tmpl) : -ENOMEM;
    if (!rc) {
        struct kvfs_chat_msg msgs[2];
        size_t k = 0;
        if (c->system)
            msgs[k++] = (struct kvfs_chat_msg){"system", c->system};
        msgs[k++] = (struct kvfs_chat_msg){"user", content};
        if ((rc = kvfs_chat_render(tmpl, msgs, k, 1, text, err, sizeof(err))))
            fprintf(stderr, "kvfsctl %s: %s\n", cmd, err);
    } else if (rc == -ENOMEM) {
        fprintf(stderr, "kvfsctl %s: out of memory\n", cmd);
    }
    free(tmpl);
    free(content);
    return rc;
}

int tool_chat_tokenize(const char *cmd, const struct kvfs_gguf *g, const struct kvfs_tokenizer *tok,
                       const struct tool_chat *c, const char *user, size_t len, int add_bos, int32_t **ids,
                       size_t *n)
{
    char *text;
    int rc = chat_render(cmd, g, c, user, len, &text);
    if (rc)
        return rc;
    if ((rc = kvfs_tokenize(tok, text, strlen(text), add_bos, 1, ids, n)))
        fprintf(stderr, "kvfsctl %s: cannot tokenize the chat: %s\n", cmd,
                rc == -EILSEQ ? "not valid UTF-8" : strerror(-rc));
    free(text);
    return rc;
}

int tool_chat_split(const char *cmd, const struct kvfs_gguf *g, const struct tool_chat *c, char **head, char **tail)
{
    /* a stand-in no template trims or escapes, found once in the rendering */
    static const char mark[] = "\x01kvfs-user-turn\x01";
    char *text;
    int rc = chat_render(cmd, g, c, mark, strlen(mark), &text);
    if (rc)
        return rc;
    char *at = strstr(text, mark);
    if (!at || strstr(at + 1, mark)) {
        fprintf(stderr, "kvfsctl %s: the chat template does not hold the user's turn once\n", cmd);
        free(text);
        return -EINVAL;
    }
    *head = strndup(text, (size_t)(at - text));
    *tail = strdup(at + strlen(mark));
    free(text);
    if (!*head || !*tail) {
        free(*head);
        free(*tail);
        fprintf(stderr, "kvfsctl %s: out of memory\n", cmd);
        return -ENOMEM;
    }
    return 0;
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
