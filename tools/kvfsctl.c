/* kvfsctl - the kvfs command-line tool: one subcommand per cmd_*.c file. */
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "commands.h"
#include "version.h"

struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
};

static const struct command commands[] = {
    {"info", cmd_info, "print a chunk file's header"},
    {"fsck", cmd_fsck, "check a store against its index and checksums; --rebuild"},
    {"synth", cmd_synth, "write a synthetic (random) chunk file, for tests"},
    {"prefill", cmd_prefill, "compute a text chunk's KV cache with a GGUF model"},
    {"generate", cmd_generate, "greedy generation, optionally from a KV file or as a chat (--chat)"},
    {"tokenize", cmd_tokenize, "print the token ids of a text"},
    {"logits", cmd_logits, "print the last position's top logits (for tests)"},
    {"mkmodel", cmd_mkmodel, "write a tiny synthetic GGUF model (for tests)"},
    {"blend", cmd_blend, "blend chunks through a mounted kvfs"},
    {"eval", cmd_eval, "compare blending against full prefill"},
    {"compare", cmd_compare, "how far apart two KV caches of the same prompt are"},
    {"convert", cmd_convert, "re-encode a chunk file in another dtype (q8, q4, q4s, f16, ...)"},
    {"import", cmd_import, "a llama.cpp sequence-state file as a chunk of a named model"},
    {"remote", cmd_remote, "list, pin, unpin or evict the chunks of a mount's RADOS pool"},
    {"claim", cmd_claim, "claim a chunk before computing it: one computation per fleet"},
    {"dequant", cmd_dequant, "decode ggml blocks or round-trip activations to f32 (for tests)"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: kvfsctl COMMAND [ARGS...]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (commands[i].fn)
            fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n`kvfsctl COMMAND --help` describes each; see kvfsctl(1).\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
        printf("kvfsctl %s\n", KVFS_VERSION_STRING);
        kvfs_cpu_describe(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        if (strcmp(argv[1], commands[i].name) != 0)
            continue;
        if (!commands[i].fn) {
            fprintf(stderr, "kvfsctl: command '%s' is not available in this build\n", argv[1]);
            return 2;
        }
        return commands[i].fn(argc - 1, argv + 1);
    }
    fprintf(stderr, "kvfsctl: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
