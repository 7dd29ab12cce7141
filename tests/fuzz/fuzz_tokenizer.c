/* fuzz_tokenizer.c - libFuzzer target: the tokenizer (blend/runtime/
 * tokenizer.c) on arbitrary bytes, with the real vocabularies: SmolLM2's
 * byte-level BPE and Gemma 3's SentencePiece-style one when models/ has
 * them ($KVFS_FUZZ_MODELS: colon-separated GGUF paths), else the tiny
 * byte-level model of the seed corpus.  Every input: tokenized with and
 * without special-token parsing, every id inside the vocabulary, every
 * piece renderable, and the whole sequence detokenized.  With a byte-level
 * vocabulary (parse_special off) the text comes back exactly when it is
 * printable ASCII, tabs and newlines, and otherwise invents nothing: it is
 * a subsequence of the input (llama.cpp, our oracle, drops some control
 * characters, U+0016 for one: "a\x16b" -> "ab"; we do the same). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "tokenizer.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_MODELS 4
static struct kvfs_gguf *ggufs[MAX_MODELS];
static struct kvfs_tokenizer *toks[MAX_MODELS];
static int byte_level[MAX_MODELS];
static int n_models;

static void load(const char *path)
{
    char err[256];
    if (n_models == MAX_MODELS || kvfs_gguf_open(path, &ggufs[n_models], err, sizeof(err)) != 0)
        return;
    if (kvfs_tokenizer_load(ggufs[n_models], &toks[n_models], err, sizeof(err)) != 0) {
        kvfs_gguf_close(ggufs[n_models]);
        return;
    }
    struct kvfs_gguf_str s;
    byte_level[n_models] = kvfs_gguf_get_str(ggufs[n_models], "tokenizer.ggml.model", &s) == 0 && s.len == 4 &&
                           !memcmp(s.ptr, "gpt2", 4);
    fprintf(stderr, "fuzz_tokenizer: %s (%s)\n", path, byte_level[n_models] ? "byte-level BPE" : "other");
    n_models++;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    const char *env = getenv("KVFS_FUZZ_MODELS");
    char *list = strdup(env && *env ? env
                                    : "models/SmolLM2-135M-Instruct.Q4_1.gguf:models/gemma-3-270m-q4_k_m.gguf");
    for (char *save = NULL, *p = strtok_r(list, ":", &save); p; p = strtok_r(NULL, ":", &save))
        load(p);
    free(list);
    if (!n_models)
        load("tests/fuzz/corpus/gguf/tiny.gguf");
    if (!n_models) {
        fprintf(stderr, "fuzz_tokenizer: no model with a tokenizer found\n");
        abort();
    }
    return 0;
}

static int plain_ascii(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 0x20 && s[i] < 0x7f) || s[i] == '\n' || s[i] == '\t'))
            return 0;
    return 1;
}

/* whether a (NUL-terminated) is a subsequence of b[0..n) */
static int subsequence(const char *a, const uint8_t *b, size_t n)
{
    size_t j = 0;
    for (; *a; a++) {
        while (j < n && b[j] != (uint8_t)*a)
            j++;
        if (j++ >= n)
            return 0;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    for (int m = 0; m < n_models; m++) {
        uint32_t vocab = kvfs_vocab_size(toks[m]);
        for (int special = 0; special < 2; special++) {
            int32_t *ids = NULL;
            size_t n = 0;
            if (kvfs_tokenize(toks[m], (const char *)data, size, 0, special, &ids, &n) != 0)
                continue; /* refused with an errno: allowed */
            char piece[256];
            for (size_t i = 0; i < n; i++) {
                if (ids[i] < 0 || (uint32_t)ids[i] >= vocab)
                    abort();
                (void)kvfs_token_piece(toks[m], ids[i], piece, sizeof(piece));
            }
            char *text = NULL;
            if (kvfs_detokenize(toks[m], ids, n, &text) == 0) {
                if (byte_level[m] && !special &&
                    (plain_ascii(data, size) ? strlen(text) != size || memcmp(text, data, size)
                                             : !subsequence(text, data, size)))
                    abort(); /* byte-level BPE loses nothing it can encode and invents nothing */
                free(text);
            }
            free(ids);
        }
    }
    return 0;
}
