/* kvfsctl mkmodel - write a tiny random GGUF model for tests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "synth_model.h"
#include "tool_util.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: kvfsctl mkmodel -o FILE [--arch llama|qwen2|qwen3|gemma2|gemma3|gemma4|granite|smollm3|olmo2|phi3|mistral3|\n"
               "                                qwen3moe|gpt-oss|deepseek2] [--layers N] [--embd N] [--heads N]\n"
               "                        [--kv-heads N] [--ff N] [--seed N]\n"
               "                        [--experts N] [--experts-used N] [--expert-ff N] [--mla-v3] [--mla-unabsorbed]\n"
               "                        [--rope-scaling none|linear|yarn --rope-factor F] [--biases]\n"
               "Write a tiny model with random F32 weights and a byte-level vocabulary\n"
               "(defaults: llama, 2 layers, 64 wide, 4 heads, 2 KV heads, ff 128;\n"
               "qwen3moe, gpt-oss, deepseek2: 8 experts, 2 used, expert ff 64; deepseek2:\n"
               "DeepSeek-V2-Lite's layout, --mla-v3 V3's: compressed Q, sigmoid routing;\n"
               "--mla-unabsorbed: older files' attn_kv_b instead of attn_k_b and attn_v_b).\n"
               "--rope-scaling writes rope.scaling.type and --rope-factor its factor (yarn: over\n"
               "an original context of 1024); not for gpt-oss and deepseek2, which have theirs.\n"
               "--biases (llama, granite, mistral3): every optional bias llama.cpp reads.\n");
}

int cmd_mkmodel(int argc, char **argv)
{
    struct kvfs_synth_model_opts o = {"llama", 2, 64, 4, 2, 128, 10000.0f, 1, 0, 0, 0, 0, NULL, 0.0f, 0, 0};
    const char *out = NULL;
    unsigned long seed = o.seed;
    const struct tool_opt opts[] = {
        TOOL_OPT("output", 'o', STR, &out), TOOL_OPT("arch", 0, STR, &o.arch),
        TOOL_OPT("layers", 0, INT, &o.n_layer), TOOL_OPT("embd", 0, INT, &o.n_embd),
        TOOL_OPT("heads", 0, INT, &o.n_head), TOOL_OPT("kv-heads", 0, INT, &o.n_kv_head),
        TOOL_OPT("ff", 0, INT, &o.n_ff), TOOL_OPT("seed", 0, ULONG, &seed),
        TOOL_OPT("experts", 0, INT, &o.n_expert), TOOL_OPT("experts-used", 0, INT, &o.n_expert_used),
        TOOL_OPT("expert-ff", 0, INT, &o.n_ff_exp), TOOL_OPT("mla-v3", 0, FLAG, &o.mla_v3),
        TOOL_OPT("mla-unabsorbed", 0, FLAG, &o.mla_unabsorbed),
        TOOL_OPT("rope-scaling", 0, STR, &o.rope_scaling), TOOL_OPT("rope-factor", 0, FLOAT, &o.rope_factor),
        TOOL_OPT("biases", 0, FLAG, &o.biases), {0}};
    const struct tool_cmd cmd = {usage, opts, 0, -1};
    int rc = tool_parse_args(&cmd, argc, argv);
    if (rc != TOOL_ARGS_OK)
        return rc;
    o.seed = (uint32_t)seed;
    if (!out || (strcmp(o.arch, "llama") && strcmp(o.arch, "qwen2") && strcmp(o.arch, "qwen3") &&
                 strcmp(o.arch, "gemma3") && strcmp(o.arch, "gemma4") && strcmp(o.arch, "granite") && strcmp(o.arch, "smollm3") && strcmp(o.arch, "olmo2") &&
                 strcmp(o.arch, "phi3") && strcmp(o.arch, "gemma2") && strcmp(o.arch, "mistral3") &&
                 strcmp(o.arch, "qwen3moe") && strcmp(o.arch, "gpt-oss") && strcmp(o.arch, "deepseek2")) ||
        o.n_expert < 0 || o.n_expert_used < 0 || o.n_ff_exp < 0 ||
        (o.n_expert_used ? o.n_expert_used : 2) > (o.n_expert ? o.n_expert : 8) ||
        o.n_layer < 1 || o.n_head < 1 || o.rope_factor < 0 || (o.mla_unabsorbed && strcmp(o.arch, "deepseek2")) ||
        (o.rope_scaling && (!strcmp(o.arch, "gpt-oss") || !strcmp(o.arch, "deepseek2") ||
                            (strcmp(o.rope_scaling, "none") && strcmp(o.rope_scaling, "linear") &&
                             strcmp(o.rope_scaling, "yarn")))) ||
        o.n_kv_head < 1 || o.n_embd % o.n_head || o.n_head % o.n_kv_head || (o.n_embd / o.n_head) % 2) {
        fprintf(stderr, "kvfsctl mkmodel: bad options (see --help)\n");
        return 2;
    }
    rc = kvfs_synth_model_write(out, &o);
    if (rc) {
        fprintf(stderr, "kvfsctl mkmodel: cannot write %s: %s\n", out, strerror(-rc));
        return 1;
    }
    return 0;
}
