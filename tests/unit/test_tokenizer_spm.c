/* test_tokenizer_spm.c - SentencePiece-style ("llama") vocabularies on a
 * hand-made vocabulary: space prefix and U+2581, merges by score, byte
 * fallback, BOS, special tokens, detokenization. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "gguf.h"
#include "gguf_write.h"
#include "tokenizer.h"

#define SP "\xe2\x96\x81"

int main(void)
{
    const char *words[] = {SP, "h", "e", "l", "o", "w", "r", "d", SP "h", SP "he", SP "hel", SP "hell", SP "hello",
                           SP "w", SP "wo", SP "wor", SP "worl", SP "world", "<|end|>"};
    int nw = (int)(sizeof(words) / sizeof(words[0]));
    int n = 3 + 256 + nw;
    const char **tok = calloc((size_t)n, sizeof(char *));
    float *scores = calloc((size_t)n, sizeof(float));
    int32_t *types = calloc((size_t)n, sizeof(int32_t));
    char (*bytes)[8] = calloc(256, 8);
    tok[0] = "<unk>"; types[0] = 2;
    tok[1] = "<s>"; types[1] = 3;
    tok[2] = "</s>"; types[2] = 3;
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], 8, "<0x%02X>", b);
        tok[3 + b] = bytes[b];
        types[3 + b] = 6;
    }
    for (int i = 0; i < nw; i++) {
        tok[259 + i] = words[i];
        types[259 + i] = 1;
        scores[259 + i] = (float)strlen(words[i]); /* longer pieces merge first */
    }
    types[259 + nw - 1] = 4; /* user-defined: matched in text */
    struct kvfs_gguf_writer *w;
    char path[64];
    snprintf(path, sizeof(path), "/tmp/kvfs-spm.%d.gguf", (int)getpid());
    CHECK_EQ(kvfs_gguf_writer_new(&w), 0);
    kvfs_gguf_add_str(w, "general.architecture", "llama");
    kvfs_gguf_add_str(w, "tokenizer.ggml.model", "llama");
    kvfs_gguf_add_str_array(w, "tokenizer.ggml.tokens", tok, (uint64_t)n);
    kvfs_gguf_add_f32_array(w, "tokenizer.ggml.scores", scores, (uint64_t)n);
    kvfs_gguf_add_i32_array(w, "tokenizer.ggml.token_type", types, (uint64_t)n);
    kvfs_gguf_add_u32(w, "tokenizer.ggml.bos_token_id", 1);
    kvfs_gguf_add_u32(w, "tokenizer.ggml.eos_token_id", 2);
    CHECK_EQ(kvfs_gguf_write_file(w, path), 0);
    kvfs_gguf_writer_free(w);

    struct kvfs_gguf *g;
    struct kvfs_tokenizer *t;
    char err[256];
    CHECK_EQ(kvfs_gguf_open(path, &g, err, sizeof(err)), 0);
    CHECK_EQ(kvfs_tokenizer_load(g, &t, err, sizeof(err)), 0);
    int32_t *ids;
    size_t k;
    const char *text = "hello world\xe2\x82\xac";
    CHECK_EQ(kvfs_tokenize(t, text, strlen(text), 1, 0, &ids, &k), 0);
    int32_t want[] = {1, 259 + 12, 259 + 17, 3 + 0xe2, 3 + 0x82, 3 + 0xac};
    CHECK_EQ(k, 6);
    for (size_t i = 0; i < k && i < 6; i++)
        CHECK_EQ(ids[i], want[i]);
    char *back;
    CHECK_EQ(kvfs_detokenize(t, ids + 1, k - 1, &back), 0);
    CHECK(!strcmp(back, " hello world\xe2\x82\xac"));
    free(back);
    free(ids);
    /* no BOS when not asked; a user-defined token splits the text, and the
     * fragment after it gets its own space prefix, as in llama.cpp */
    CHECK_EQ(kvfs_tokenize(t, "he<|end|>wo", 11, 0, 0, &ids, &k), 0);
    int32_t want2[] = {259 + 9, 259 + nw - 1, 259 + 14};
    CHECK_EQ(k, 3);
    for (size_t i = 0; i < k && i < 3; i++)
        CHECK_EQ(ids[i], want2[i]);
    free(ids);
    /* control tokens are text unless parse_special */
    CHECK_EQ(kvfs_tokenize(t, "</s>", 4, 0, 1, &ids, &k), 0);
    CHECK_EQ(k, 1);
    CHECK_EQ(ids[0], 2);
    free(ids);
    CHECK_EQ(kvfs_tokenize(t, "</s>", 4, 0, 0, &ids, &k), 0);
    CHECK(k > 1);
    free(ids);
    /* which tokens are not text (kvfsctl generate leaves them out) */
    CHECK(kvfs_token_is_control(t, 1) && kvfs_token_is_control(t, 2));
    CHECK(!kvfs_token_is_control(t, 0) && !kvfs_token_is_control(t, 259 + 12));
    CHECK(!kvfs_token_is_control(t, 259 + nw - 1) && !kvfs_token_is_control(t, -1) && !kvfs_token_is_control(t, n));
    CHECK(kvfs_token_is_eog(t, 2) && !kvfs_token_is_eog(t, 1));
    kvfs_tokenizer_free(t);
    kvfs_gguf_close(g);
    unlink(path);
    free(tok);
    free(scores);
    free(types);
    free(bytes);
    CHECK_DONE();
}
