/* chat_template.h - chat prompts as libllama's built-in templates render
 * them (llama_chat_apply_template, llama.cpp src/llama-chat.cpp): the family
 * is detected from the GGUF's tokenizer.chat_template text by the same
 * substrings, in the same order (or given by llama.cpp's name for it:
 * "chatml", "gemma", ...), and the messages are formatted per family.
 * There is no Jinja here: a template whose family is unknown, or known to
 * llama.cpp but not rendered by kvfs, is refused, never guessed.
 * The rendering holds no BOS: the tokenizer adds it where the model asks for
 * one, as llama-server does (it strips a template's leading BOS text).
 * Every function returns 0 or a negative errno.
 */
#ifndef KVFS_CHAT_TEMPLATE_H
#define KVFS_CHAT_TEMPLATE_H

#include <stddef.h>

struct kvfs_chat_msg {
    const char *role; /* "system", "user", "assistant", ... */
    const char *content;
};

/* The family of a template text (or a built-in name): its llama.cpp name
 * in *name (static).  -ENOENT: llama.cpp would not recognise it either;
 * -ENOTSUP: llama.cpp knows it, kvfs does not render it.  err says which. */
int kvfs_chat_detect(const char *tmpl, const char **name, char *err, size_t errlen);

/* Render msgs with the template's family; add_ass: end with the assistant
 * turn's opening (the generation prompt).  Where a chatml template inserts a
 * literal default system message when the conversation has none (SmolLM2,
 * Qwen2), it is inserted too, as the template's Jinja does (the built-in
 * path leaves it out).  *out is malloc'ed, NUL-terminated. */
int kvfs_chat_render(const char *tmpl, const struct kvfs_chat_msg *msgs, size_t n, int add_ass, char **out,
                     char *err, size_t errlen);

#endif
