/* tokenizer.h - tokenizers read from GGUF metadata: byte-level BPE ("gpt2"
 * model, with the pre-tokenizer named by tokenizer.ggml.pre) and
 * SentencePiece-style ("llama" model).  Token ids match llama.cpp's.
 * Every function returns 0 or a negative errno.
 */
#ifndef KVFS_TOKENIZER_H
#define KVFS_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

struct kvfs_gguf;
struct kvfs_tokenizer; /* opaque, immutable after load: thread-safe to use */

int kvfs_tokenizer_load(const struct kvfs_gguf *g, struct kvfs_tokenizer **out,
                        char *err, size_t errlen);
void kvfs_tokenizer_free(struct kvfs_tokenizer *t);

/* Tokenize UTF-8 text.  add_bos: prepend BOS when the vocabulary wants it
 * (tokenizer.ggml.add_bos_token; 1 = as the model says, 0 = never).
 * parse_special: recognise special/control tokens written in the text (like
 * llama.cpp's parse_special).  *ids is malloc'ed; caller frees. */
int kvfs_tokenize(const struct kvfs_tokenizer *t, const char *text, size_t len,
                  int add_bos, int parse_special, int32_t **ids, size_t *n_ids);

/* Text of one token as bytes (byte-level decoding applied), like llama.cpp's
 * token_to_piece with special tokens rendered.  Returns the byte count or
 * -errno; writes at most cap bytes. */
int kvfs_token_piece(const struct kvfs_tokenizer *t, int32_t id, char *buf, size_t cap);

/* Whole sequence to malloc'ed, NUL-terminated text. */
int kvfs_detokenize(const struct kvfs_tokenizer *t, const int32_t *ids, size_t n, char **text);

int32_t kvfs_token_bos(const struct kvfs_tokenizer *t); /* -1 if none */
int32_t kvfs_token_eos(const struct kvfs_tokenizer *t);
int kvfs_token_is_eog(const struct kvfs_tokenizer *t, int32_t id); /* end of generation */
int kvfs_token_is_control(const struct kvfs_tokenizer *t, int32_t id); /* BOS, EOS...: not text */
uint32_t kvfs_vocab_size(const struct kvfs_tokenizer *t);

#endif
