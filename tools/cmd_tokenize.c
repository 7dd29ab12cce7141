/* kvfsctl tokenize - token ids of a text with a model's tokenizer. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "gguf.h"
#include "model_util.h"
#include "tokenizer.h"
#include "tool_util.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: kvfsctl tokenize -m MODEL [--bos] [--special] [--pieces] [--chat [--system TEXT]]\n"
               "                        [TEXT_FILE|-]\n"
               "Print the token ids of a UTF-8 text (one line, space separated).\n"
               "  --bos                prepend BOS when the model asks for it\n"
               "  --special            recognise control tokens written in the text\n"
               "  --pieces             print id=piece pairs, one per line\n"
               TOOL_CHAT_HELP
               "                       (the ids a chat prompt starts from: with --bos, those\n"
               "                       kvfsctl generate --chat runs)\n");
}

int cmd_tokenize(int argc, char **argv)
{
    const char *model = NULL;
    int bos = 0, special = 0, pieces = 0;
    struct tool_chat chat = {0};
    const struct tool_opt opts[] = {TOOL_OPT("model", 'm', STR, &model), TOOL_OPT("bos", 0, FLAG, &bos),
                                    TOOL_OPT("special", 0, FLAG, &special), TOOL_OPT("pieces", 0, FLAG, &pieces),
                                    TOOL_CHAT_OPTS(&chat), {0}};
    const struct tool_cmd cmd = {usage, opts, 0, 1};
    int rc = tool_parse_args(&cmd, argc, argv);
    if (rc != TOOL_ARGS_OK)
        return rc;
    if (!model || tool_chat_check("tokenize", &chat))
        return tool_usage_error(&cmd);
    const char *path = optind < argc ? argv[optind] : "-";
    uint8_t *text;
    size_t len;
    rc = tool_read_file(path, &text, &len);
    if (rc) {
        fprintf(stderr, "kvfsctl tokenize: %s: %s\n", path, strerror(-rc));
        return 1;
    }
    struct kvfs_gguf *g;
    struct kvfs_tokenizer *t = NULL;
    char err[512] = "";
    if ((rc = kvfs_gguf_open(model, &g, err, sizeof(err))) == 0)
        rc = kvfs_tokenizer_load(g, &t, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "kvfsctl tokenize: %s\n", err[0] ? err : strerror(-rc));
        free(text);
        return 1;
    }
    int32_t *ids;
    size_t n;
    if (chat.on) /* its reasons printed */
        rc = tool_chat_tokenize("tokenize", g, t, &chat, (const char *)text, len, bos, &ids, &n);
    else if ((rc = kvfs_tokenize(t, (const char *)text, len, bos, special, &ids, &n)))
        fprintf(stderr, "kvfsctl tokenize: %s\n", rc == -EILSEQ ? "input is not valid UTF-8" : strerror(-rc));
    if (!rc) {
        for (size_t i = 0; i < n; i++) {
            if (pieces) {
                char buf[256];
                int l = kvfs_token_piece(t, ids[i], buf, sizeof(buf));
                printf("%d=%.*s\n", ids[i], l > 0 ? l : 0, buf);
            } else {
                printf(i ? " %d" : "%d", ids[i]);
            }
        }
        if (!pieces)
            printf("\n");
        free(ids);
    }
    kvfs_tokenizer_free(t);
    kvfs_gguf_close(g);
    free(text);
    return rc ? 1 : 0;
}
