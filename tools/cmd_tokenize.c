/* kvfsctl tokenize - token ids of a text with a model's tokenizer. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "gguf.h"
#include "tokenizer.h"
#include "tool_util.h"

int cmd_tokenize(int argc, char **argv)
{
    static const struct option opts[] = {{"model", required_argument, 0, 'm'}, {"bos", no_argument, 0, 'B'},
                                         {"special", no_argument, 0, 's'}, {"pieces", no_argument, 0, 'p'},
                                         {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *model = NULL;
    int bos = 0, special = 0, pieces = 0, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'B': bos = 1; break;
        case 's': special = 1; break;
        case 'p': pieces = 1; break;
        case 'h':
            printf("usage: kvfsctl tokenize -m MODEL [--bos] [--special] [--pieces] [TEXT_FILE|-]\n"
                   "Print the token ids of a UTF-8 text (one line, space separated).\n"
                   "  --bos      prepend BOS when the model asks for it\n"
                   "  --special  recognise control tokens written in the text\n"
                   "  --pieces   print id=piece pairs, one per line\n");
            return 0;
        default: return 2;
        }
    }
    if (!model || optind < argc - 1) {
        fprintf(stderr, "usage: kvfsctl tokenize -m MODEL [TEXT_FILE|-]\n");
        return 2;
    }
    const char *path = optind < argc ? argv[optind] : "-";
    uint8_t *text;
    size_t len;
    int rc = tool_read_file(path, &text, &len);
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
    rc = kvfs_tokenize(t, (const char *)text, len, bos, special, &ids, &n);
    if (rc) {
        fprintf(stderr, "kvfsctl tokenize: %s\n", rc == -EILSEQ ? "input is not valid UTF-8" : strerror(-rc));
    } else {
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
