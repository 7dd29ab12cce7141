/* model_util.h - helpers shared by the kvfsctl commands that run a model. */
#ifndef KVFS_MODEL_UTIL_H
#define KVFS_MODEL_UTIL_H
#include <stddef.h>
#include <stdint.h>
#include "forward.h"
#include "model.h"
#include "tokenizer.h"
double tool_now(void);
/* Load model + tokenizer; prints the reason on failure. */
int tool_load_model(const char *path, const char *backend, int threads, struct kvfs_model **m,
                    struct kvfs_tokenizer **tok);
/* Tokenize a whole file ('-' = stdin); prints the reason on failure. */
int tool_tokenize_file(const struct kvfs_tokenizer *tok, const char *path, int add_bos, int32_t **ids, size_t *n);
int32_t tool_argmax(const float *x, int n);
/* Token ids separated by commas or blanks, in s (modified); -EINVAL if none or not ids. */
int tool_parse_ids(char *s, int32_t **ids, int *n);
#endif
