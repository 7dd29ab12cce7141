/* model_util.h - helpers shared by the kvfsctl commands that run a model. */
#ifndef KVFS_MODEL_UTIL_H
#define KVFS_MODEL_UTIL_H
#include <stddef.h>
#include <stdint.h>
#include "forward.h"
#include "model.h"
#include "tokenizer.h"
struct kvfs_gguf;
double tool_now(void);
/* the CPU seconds this process has used, all its threads (user + system) */
double tool_cpu_now(void);
/* Load model + tokenizer; prints the reason on failure. */
int tool_load_model(const char *path, const char *backend, int threads, struct kvfs_model **m,
                    struct kvfs_tokenizer **tok);
/* Tokenize a whole file ('-' = stdin); prints the reason on failure. */
int tool_tokenize_file(const struct kvfs_tokenizer *tok, const char *path, int add_bos, int32_t **ids, size_t *n);
/* --chat: the prompt as the user turn of a chat, after --system's turn,
 * rendered with the model's tokenizer.chat_template or --chat-template (a
 * llama.cpp name or a template text; it implies --chat), ending with the
 * assistant turn's opening (blend/runtime/chat_template.h). */
struct tool_chat {
    int on;
    const char *system, *tmpl;
};
#define TOOL_CHAT_OPTS(c)                                                                                         \
    TOOL_OPT("chat", 0, FLAG, &(c)->on), TOOL_OPT("system", 0, STR, &(c)->system),                               \
        TOOL_OPT("chat-template", 0, STR, &(c)->tmpl)
#define TOOL_CHAT_HELP                                                                                            \
    "  --chat               TEXT is the user's turn of a chat in the model's template\n"                          \
    "                       (tokenizer.chat_template, rendered as llama.cpp's built-in\n"                          \
    "                       templates do: chatml, gemma, llama3, mistral-v7, phi3,\n"                               \
    "                       granite, ...; one it does not know is refused), ending\n"                                \
    "                       with the assistant's turn; control tokens in it are parsed\n"                            \
    "  --system TEXT        a system turn before it (Gemma: folded into the user turn)\n"                            \
    "  --chat-template T    this template (llama.cpp name, e.g. chatml, or template\n"                               \
    "                       text) instead of the model's; implies --chat\n"
/* Check the --chat options (prints why not): 0 or -EINVAL. */
int tool_chat_check(const char *cmd, struct tool_chat *c);
/* The token ids of the chat whose user turn is user[0..len): BOS as
 * add_bos says (the rendering holds none), control tokens parsed; prints the
 * reason on failure. */
int tool_chat_tokenize(const char *cmd, const struct kvfs_gguf *g, const struct kvfs_tokenizer *tok,
                       const struct tool_chat *c, const char *user, size_t len, int add_bos, int32_t **ids,
                       size_t *n);
/* The rendering cut where the user's turn goes: *head before it (the system
 * turn, the user turn's opening), *tail after it (the generation prompt);
 * both malloc'ed; prints the reason on failure. */
int tool_chat_split(const char *cmd, const struct kvfs_gguf *g, const struct tool_chat *c, char **head, char **tail);
int32_t tool_argmax(const float *x, int n);
/* Token ids separated by commas or blanks, in s (modified); -EINVAL if none or not ids. */
int tool_parse_ids(char *s, int32_t **ids, int *n);
#endif
