/* kvfsctl mkmodel - write a tiny random GGUF model for tests. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "synth_model.h"

int cmd_mkmodel(int argc, char **argv)
{
    static const struct option opts[] = {
        {"output", required_argument, 0, 'o'}, {"arch", required_argument, 0, 'a'},
        {"layers", required_argument, 0, 'L'}, {"embd", required_argument, 0, 'E'},
        {"heads", required_argument, 0, 'H'}, {"kv-heads", required_argument, 0, 'K'},
        {"ff", required_argument, 0, 'F'}, {"seed", required_argument, 0, 's'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    struct kvfs_synth_model_opts o = {"llama", 2, 64, 4, 2, 128, 10000.0f, 1};
    const char *out = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'o': out = optarg; break;
        case 'a': o.arch = optarg; break;
        case 'L': o.n_layer = atoi(optarg); break;
        case 'E': o.n_embd = atoi(optarg); break;
        case 'H': o.n_head = atoi(optarg); break;
        case 'K': o.n_kv_head = atoi(optarg); break;
        case 'F': o.n_ff = atoi(optarg); break;
        case 's': o.seed = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'h':
            printf("usage: kvfsctl mkmodel -o FILE [--arch llama|qwen2] [--layers N] [--embd N] [--heads N]\n"
                   "                        [--kv-heads N] [--ff N] [--seed N]\n"
                   "Write a tiny model with random F32 weights and a byte-level vocabulary\n"
                   "(defaults: llama, 2 layers, 64 wide, 4 heads, 2 KV heads, ff 128).\n");
            return 0;
        default: return 2;
        }
    }
    if (!out || (strcmp(o.arch, "llama") && strcmp(o.arch, "qwen2")) || o.n_layer < 1 || o.n_head < 1 ||
        o.n_kv_head < 1 || o.n_embd % o.n_head || o.n_head % o.n_kv_head || (o.n_embd / o.n_head) % 2) {
        fprintf(stderr, "kvfsctl mkmodel: bad options (see --help)\n");
        return 2;
    }
    int rc = kvfs_synth_model_write(out, &o);
    if (rc) {
        fprintf(stderr, "kvfsctl mkmodel: cannot write %s: %s\n", out, strerror(-rc));
        return 1;
    }
    return 0;
}
