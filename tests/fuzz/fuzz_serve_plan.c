/* fuzz_serve_plan.c - libFuzzer target: kvfs-serve's request planner
 * (tools/serve/plan.c), the code that turns a client's JSON body into
 * chunks and a question: documents (texts and hashes), separator segments,
 * chat messages and their parts, the marks it finds in the chat template's
 * rendering, BOS, chunking by --chunk-tokens.  Input: one mode byte, then
 * the request body.  Mode bit 0: chat (else a completion); bit 1: a tenant's
 * salt; bits 2-3: how the chat template's rendering comes back.
 *
 * The rendering is the engine's (llama-server's /apply-template) in the
 * real server; this target has no engine, so engine_call_json below returns
 * a plain ChatML rendering of the messages it is sent, or a broken one
 * (a message dropped, every content twice, an error status) so that the
 * planner's checks of the marks are reached too.  It checks no fidelity:
 * that is tests/engines/serve*.sh against the real llama-server.  Every
 * input must end in a plan or an error, never a crash, leak or sanitizer
 * report; a plan's chunk hashes are 64 hex digits and its prompt is the sum
 * of its parts. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "serve.h"
#include "tokenizer.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct kvfs_gguf *gguf;
static struct serve sv;
static struct engine eng;
static int render_mode; /* the input's bits 2-3 */
#define REFUSED "the template refused these messages"

static int load(const char *path)
{
    char err[256];
    if (kvfs_gguf_open(path, &gguf, err, sizeof(err)) != 0)
        return -1;
    if (kvfs_tokenizer_load(gguf, &sv.tok, err, sizeof(err)) != 0) {
        kvfs_gguf_close(gguf);
        gguf = NULL;
        return -1;
    }
    fprintf(stderr, "fuzz_serve_plan: %s\n", path);
    return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    const char *env = getenv("KVFS_FUZZ_MODELS");
    char *list = strdup(env && *env ? env : "models/SmolLM2-135M-Instruct.Q4_1.gguf");
    for (char *save = NULL, *p = strtok_r(list, ":", &save); p && !gguf; p = strtok_r(NULL, ":", &save))
        load(p);
    free(list);
    if (!gguf && load("tests/fuzz/corpus/gguf/tiny.gguf")) {
        fprintf(stderr, "fuzz_serve_plan: no model with a tokenizer found\n");
        abort();
    }
    /* a mount that holds nothing: every hash a document names is "not in
     * the mount", and a conversation's history is never found */
    snprintf(sv.mount, sizeof(sv.mount), "/nonexistent/kvfs-fuzz-mount");
    snprintf(sv.separator, sizeof(sv.separator), " # # ");
    sv.chunk_tokens = 24; /* small: long texts become several chunks */
    sv.bos = kvfs_token_bos(sv.tok);
    sv.add_bos = sv.bos >= 0;
    snprintf(eng.url, sizeof(eng.url), "http://fuzz.invalid");
    return 0;
}

/* ChatML of the messages in body (or a broken rendering, by render_mode) */
int engine_call_json(const struct engine *e, const char *method, const char *path, json_t *body, double timeout_s,
                     serve_cancel_fn cancel, void *cancel_arg, json_t **out, long *status, char *err, size_t errlen)
{
    (void)e, (void)method, (void)timeout_s, (void)cancel, (void)cancel_arg;
    *out = NULL;
    if (strcmp(path, "/apply-template")) {
        snprintf(err, errlen, "no engine in the fuzz target");
        return -EHOSTDOWN;
    }
    if (render_mode == 3) { /* refused, as engine_call reports an HTTP error: status, reason in err, 0 */
        *status = 400;
        snprintf(err, errlen, "POST /apply-template: HTTP 400: " REFUSED);
        *out = json_pack("{s:{s:s}}", "error", "message", REFUSED);
        return 0;
    }
    json_t *msgs = json_object_get(body, "messages"), *m;
    size_t i, len = 0, cap = 256;
    char *s = malloc(cap);
    if (!s)
        return -ENOMEM;
    s[0] = '\0';
    json_array_foreach(msgs, i, m) {
        if (render_mode == 1 && i == 0)
            continue; /* a template that drops the first message */
        const char *role = json_string_value(json_object_get(m, "role"));
        const char *c = json_string_value(json_object_get(m, "content"));
        for (int twice = 0; twice < (render_mode == 2 ? 2 : 1); twice++) {
            size_t need = len + strlen(role ? role : "") + strlen(c ? c : "") + 32;
            if (need > cap) {
                char *t = realloc(s, cap = 2 * need);
                if (!t) {
                    free(s);
                    return -ENOMEM;
                }
                s = t;
            }
            len += (size_t)sprintf(s + len, "<|im_start|>%s\n%s<|im_end|>\n", role ? role : "", c ? c : "");
        }
    }
    *out = json_pack("{s:s+}", "prompt", s, "<|im_start|>assistant\n");
    free(s);
    *status = 200;
    return *out ? 0 : -ENOMEM;
}

static int is_hex64(const char *h)
{
    if (strlen(h) != 64)
        return 0;
    for (; *h; h++)
        if (!((*h >= '0' && *h <= '9') || (*h >= 'a' && *h <= 'f')))
            return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int mode = data[0], chat = mode & 1;
    static const uint8_t salt[KVFS_SALT_BYTES] = {1, 2, 3};
    render_mode = (mode >> 2) & 3;
    json_t *req = json_loadb((const char *)data + 1, size - 1, 0, NULL);
    if (!req)
        return 0;
    struct plan p;
    char err[SERVE_ERR];
    err[0] = '\0';
    int rc = plan_build(&sv, &eng, req, chat, (mode & 2) ? salt : NULL, &p, err, sizeof(err));
    if (getenv("FUZZ_SERVE_PLAN_VERBOSE")) /* for writing seeds: what each input came to */
        fprintf(stderr, "mode %d: rc %d, %d chunks, %zu prompt tokens: %s\n", mode, rc, rc ? 0 : p.n_chunks,
                rc ? 0 : p.n_prompt, rc ? err : "a plan");
    if (rc == 0) {
        size_t total = p.n_suffix;
        for (int i = 0; i < p.n_chunks; i++) {
            if (!is_hex64(p.chunks[i].hash))
                abort(); /* every chunk named */
            total += p.chunks[i].n;
        }
        if (total != p.n_prompt || p.n_suffix == 0 || p.n_chunks > 64)
            abort();
    } else if (!err[0]) {
        abort(); /* an error says why */
    } else if (!strncmp(err, "the engine's chat template: ", 28) && render_mode == 3 &&
               !strstr(err, "HTTP 400: " REFUSED)) {
        abort(); /* and passes the engine's reason on */
    }
    plan_free(&p);
    json_decref(req);
    return 0;
}
