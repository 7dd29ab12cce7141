/* kvfsctl import - a llama.cpp sequence-state file (llama_state_seq_save_file,
 * llama-server's slot save) as a kvfs chunk of a named model. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "llama_state.h"
#include "model_util.h"
#include "service.h"
#include "tool_util.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: kvfsctl import -m MODEL [-o FILE | -M MOUNT] STATE_FILE\n"
               "Convert a llama.cpp sequence-state file (llama_state_seq_save_file, llama-server's\n"
               "POST /slots/N?action=save; format version %u) into a kvfs chunk of MODEL: the\n"
               "state carries no model identity, so the model is named here, and its layer\n"
               "count and KV head shape must match the state's.  Prints the chunk's hash (and\n"
               "its path in the mount with -M).\n\n"
               "  -m, --model PATH    GGUF model the state was computed with\n"
               "  -o, --output FILE   write the chunk file here\n"
               "  -M, --mount DIR     store it in a mounted kvfs (via DIR/incoming/)\n"
               "  --salt STRING       a tenant's chunk: the digest of STRING in its name\n",
            KVFS_LLAMA_SEQ_VERSION);
}

int cmd_import(int argc, char **argv)
{
    const char *model = NULL, *out = NULL, *mount = NULL;
    struct tool_salt salt = {0};
    const struct tool_opt opts[] = {TOOL_OPT("model", 'm', STR, &model), TOOL_OPT("output", 'o', STR, &out),
                                    TOOL_OPT("mount", 'M', STR, &mount),
                                    TOOL_OPT_CALL("salt", 0, tool_opt_salt, &salt), {0}};
    const struct tool_cmd cmd = {usage, opts, 1, 1};
    int rc = tool_parse_args(&cmd, argc, argv);
    if (rc != TOOL_ARGS_OK)
        return rc;
    if (!model || (!out && !mount) || (out && mount))
        return tool_usage_error(&cmd);
    const char *in = argv[optind];
    struct kvfs_model *m;
    struct kvfs_tokenizer *tok;
    uint8_t *buf = NULL;
    size_t len = 0;
    char err[512] = "", hex[KVFS_HASH_HEX_LEN + 1];
    struct kvfs_writer w;
    int ret = 1;
    if ((rc = tool_read_file(in, &buf, &len))) {
        fprintf(stderr, "kvfsctl import: cannot read %s: %s\n", in, strerror(-rc));
        return 1;
    }
    if (tool_load_model(model, "cpu", 1, &m, &tok))
        goto free_buf;
    struct kvfs_llama_swa swa;
    kvfs_model_llama_swa(m, &swa);
    if ((rc = kvfs_llama_state_to_chunk_swa(buf, len, &m->fp, (uint32_t)m->hp.n_vocab, &swa,
                                            salt.set ? salt.digest : NULL, &w, err, sizeof(err)))) {
        fprintf(stderr, "kvfsctl import: %s against %s: %s [%s]\n", in, model, err, strerror(-rc));
        goto free_model;
    }
    if (tool_put_chunk("import", &w, out, mount, hex) == 0) {
        tool_print_chunk(hex, mount);
        ret = 0;
    }
    kvfs_writer_free(&w);
free_model:
    kvfs_tokenizer_free(tok);
    kvfs_model_free(m);
free_buf:
    free(buf);
    return ret;
}
