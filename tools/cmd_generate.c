/* kvfsctl generate - a small reference engine: optional KV file as the
 * prompt's cache, prefill of the remaining prompt, greedy decoding. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "model_util.h"
#include "tool_util.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: kvfsctl generate -m MODEL [--kv FILE | --prefix-file FILE] [-p TEXT] [-n N] [options]\n"
               "       kvfsctl generate -m MODEL --chat [--system TEXT] -p TEXT [-n N] [options]\n"
               "Greedy generation.  The prompt is the KV file's tokens (their cache is\n"
               "loaded, not recomputed) or the prefix file's tokens, followed by the tokens\n"
               "of TEXT.  Prints the generated text, up to an end-of-generation token and\n"
               "without control tokens; the time to first token, from reading the KV file\n"
               "or the prefix, goes to stderr.\n\n"
               "  -m, --model PATH     GGUF model\n"
               "  --kv FILE            chunk file to use as the prompt's cache\n"
               "  --prefix-file FILE   text to prefill before TEXT (tokenized on its own)\n"
               "  -p, --prompt TEXT    prompt text (after the KV/prefix)\n"
               "  -n N                 tokens to generate (default 32)\n"
               "  --no-bos             no BOS before the prefix or TEXT (by default it starts\n"
               "                       the sequence where the model asks for one, as llama.cpp\n"
               "                       does: tokenizer.ggml.add_bos_token; never with --kv,\n"
               "                       whose tokens start the sequence)\n"
               TOOL_CHAT_HELP
               "                       (the whole prompt: not with --kv or --prefix-file)\n"
               "  --ids                print token ids instead of text (all of them, the\n"
               "                       end-of-generation one included)\n"
               "  --backend NAME       cpu, cuda, auto (default cpu)\n"
               "  -t, --threads N      CPU threads (default: all cores)\n");
}

/* A chunk file as the prompt's cache: read and verified, starting at 0. */
static int read_kv(const char *kv, uint8_t **image, size_t *image_len, struct kvfs_header *h)
{
    char err[512] = "";
    int rc;
    if ((rc = tool_read_file(kv, image, image_len)) ||
        (rc = kvfs_file_verify(*image, *image_len, h, err, sizeof(err)))) {
        fprintf(stderr, "kvfsctl generate: %s: %s\n", kv, err[0] ? err : strerror(-rc));
        return rc;
    }
    if (h->pos0 != 0) {
        fprintf(stderr, "kvfsctl generate: %s starts at position %u; a prompt cache must start at 0\n", kv, h->pos0);
        return -EINVAL;
    }
    return 0;
}

/* Greedy decoding from the prompt's logits: up to n_gen tokens into gen,
 * the last one end-of-generation or the n_gen-th; *produced of them. */
static int decode_greedy(struct kvfs_model *m, struct kvfs_tokenizer *tok, struct kvfs_kv_cache *cache, float *logits,
                         int32_t *gen, int n_gen, int *produced)
{
    *produced = 0;
    for (int g = 0; g < n_gen; g++) {
        int32_t next = tool_argmax(logits, m->hp.n_vocab);
        gen[(*produced)++] = next;
        if (kvfs_token_is_eog(tok, next) || g + 1 == n_gen)
            break;
        int rc = kvfs_forward(m, cache, &next, 1, cache->n, logits);
        if (rc) {
            fprintf(stderr, "kvfsctl generate: decode failed: %s\n", strerror(-rc));
            return rc;
        }
    }
    return 0;
}

static void print_generated(struct kvfs_tokenizer *tok, int32_t *gen, int produced, int print_ids)
{
    if (print_ids) {
        for (int i = 0; i < produced; i++)
            printf(i ? " %d" : "%d", gen[i]);
        printf("\n");
        return;
    }
    /* text: the end-of-generation token and other control tokens are not text */
    int n_text = 0;
    for (int i = 0; i < produced; i++)
        if (!kvfs_token_is_eog(tok, gen[i]) && !kvfs_token_is_control(tok, gen[i]))
            gen[n_text++] = gen[i];
    char *text;
    if (kvfs_detokenize(tok, gen, (size_t)n_text, &text) == 0) {
        printf("%s\n", text);
        free(text);
    }
}

int cmd_generate(int argc, char **argv)
{
    const char *model = NULL, *kv = NULL, *prefix = NULL, *prompt = "", *backend = "cpu";
    int n_gen = 32, threads = 0, print_ids = 0, no_bos = 0;
    struct tool_chat chat = {0};
    const struct tool_opt opts[] = {
        TOOL_OPT("model", 'm', STR, &model), TOOL_OPT("kv", 0, STR, &kv),
        TOOL_OPT("prefix-file", 0, STR, &prefix), TOOL_OPT("prompt", 'p', STR, &prompt),
        TOOL_OPT(NULL, 'n', INT, &n_gen), TOOL_OPT("ids", 0, FLAG, &print_ids), TOOL_OPT("no-bos", 0, FLAG, &no_bos),
        TOOL_OPT("backend", 0, STR, &backend), TOOL_OPT("threads", 't', INT, &threads), TOOL_CHAT_OPTS(&chat), {0}};
    const struct tool_cmd cmd = {usage, opts, 0, 0};
    int rc = tool_parse_args(&cmd, argc, argv);
    if (rc != TOOL_ARGS_OK)
        return rc;
    if (!model || (kv && prefix) || n_gen < 1 || tool_chat_check("generate", &chat))
        return tool_usage_error(&cmd);
    if (chat.on && (kv || prefix)) {
        fprintf(stderr, "kvfsctl generate: --chat renders the whole prompt: not with --kv or --prefix-file\n");
        return tool_usage_error(&cmd);
    }
    struct kvfs_model *m;
    struct kvfs_tokenizer *tok;
    if (tool_load_model(model, backend, threads, &m, &tok))
        return 1;
    int ret = 1;
    uint8_t *image = NULL;
    size_t image_len = 0, n_pre = 0, n_prompt = 0;
    int32_t *pre_ids = NULL, *prompt_ids = NULL;
    struct kvfs_header h;
    char err[512] = "";
    int n_cached = 0;
    /* the time to first token counts reading the prompt: the KV file (or
     * the prefix text), not only computing from it */
    double t0 = tool_now();
    if (kv) {
        if (read_kv(kv, &image, &image_len, &h))
            goto out;
        n_cached = (int)h.n_tokens;
    } else if (prefix && tool_tokenize_file(tok, prefix, !no_bos, &pre_ids, &n_pre)) {
        goto out;
    }
    /* BOS (where the model asks for it) before whatever starts the sequence */
    int prompt_bos = !kv && !prefix && !no_bos;
    if (chat.on) { /* the template's control tokens are parsed; the user's text is inside it */
        if (tool_chat_tokenize("generate", m->gguf, tok, &chat, prompt, strlen(prompt), !no_bos, &prompt_ids,
                               &n_prompt))
            goto out;
    } else if (*prompt &&
               (rc = kvfs_tokenize(tok, prompt, strlen(prompt), prompt_bos, 0, &prompt_ids, &n_prompt))) {
        fprintf(stderr, "kvfsctl generate: cannot tokenize the prompt: %s\n", strerror(-rc));
        goto out;
    }
    int total_prompt = n_cached + (int)n_pre + (int)n_prompt;
    if (total_prompt == 0) {
        fprintf(stderr, "kvfsctl generate: empty prompt\n");
        goto out;
    }
    struct kvfs_kv_cache cache;
    if ((rc = kvfs_kv_cache_init(m, total_prompt + n_gen, &cache))) {
        fprintf(stderr, "kvfsctl generate: out of memory\n");
        goto out;
    }
    float *logits = malloc(sizeof(float) * (size_t)m->hp.n_vocab);
    int32_t *todo = malloc(sizeof(int32_t) * (size_t)(total_prompt + 1));
    int32_t *gen = malloc(sizeof(int32_t) * (size_t)n_gen);
    if (!logits || !todo || !gen)
        goto free_all;
    if (kv && (rc = kvfs_kv_cache_load_chunk(m, &cache, image, image_len, err, sizeof(err)))) {
        fprintf(stderr, "kvfsctl generate: %s: %s\n", kv, err[0] ? err : strerror(-rc));
        goto free_all;
    }
    /* the prefix runs as its own pass, exactly as when its chunk was made,
     * so --kv and --prefix-file compute the same thing */
    if (n_pre && (rc = kvfs_forward(m, &cache, pre_ids, (int)n_pre, 0, n_prompt ? NULL : logits))) {
        fprintf(stderr, "kvfsctl generate: forward pass failed: %s\n", strerror(-rc));
        goto free_all;
    }
    int n_todo = 0;
    for (size_t i = 0; i < n_prompt; i++)
        todo[n_todo++] = prompt_ids[i];
    if (n_todo == 0 && kv) { /* everything is cached: recompute the last token for its logits */
        todo[n_todo++] = (int32_t)kvfs_header_token(&h, h.n_tokens - 1);
        cache.n--;
        n_cached--;
    }
    if (n_todo && (rc = kvfs_forward(m, &cache, todo, n_todo, cache.n, logits))) {
        fprintf(stderr, "kvfsctl generate: forward pass failed: %s\n", strerror(-rc));
        goto free_all;
    }
    double ttft = tool_now() - t0;
    int produced;
    if (decode_greedy(m, tok, &cache, logits, gen, n_gen, &produced))
        goto free_all;
    double total = tool_now() - t0;
    print_generated(tok, gen, produced, print_ids);
    fprintf(stderr, "kvfsctl generate: prompt %d tokens (%d from the KV file), TTFT %.3f s, %d tokens in %.3f s\n",
            total_prompt, kv ? total_prompt - (int)n_prompt : 0, ttft, produced, total);
    ret = 0;
free_all:
    free(logits);
    free(todo);
    free(gen);
    kvfs_kv_cache_free(m, &cache);
out:
    free(image);
    free(pre_ids);
    free(prompt_ids);
    kvfs_tokenizer_free(tok);
    kvfs_model_free(m);
    return ret;
}
