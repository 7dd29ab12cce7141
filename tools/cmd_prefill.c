/* kvfsctl prefill - compute a text chunk's KV cache and store it as a chunk
 * file, or in a mounted kvfs through incoming/. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "kvfs.h"
#include "model_util.h"
#include "tool_util.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: kvfsctl prefill -m MODEL [-o FILE | -M MOUNT] [options] [TEXT_FILE|-]\n"
               "Tokenize a text, run the model over it and write the chunk's KV cache\n"
               "(format v1, f16, keys after RoPE).  Prints the chunk's hash (and its path\n"
               "in the mount with -M).\n\n"
               "  -m, --model PATH    GGUF model\n"
               "  -o, --output FILE   write the chunk file here\n"
               "  -M, --mount DIR     store it in a mounted kvfs (via DIR/incoming/)\n"
               "  --ids ID,ID,...     the chunk's token ids instead of a text (a prompt cut at\n"
               "                      token boundaries, as an engine holds it)\n"
               "  --pos0 N            position of the first token (default 0)\n"
               "  --bos               prepend BOS if the model asks for it\n"
               "  --chat              the text is the user's turn of a chat in the model's\n"
               "                      template, ending with the assistant's turn (as generate\n"
               "                      --chat); the chunk starts the sequence (BOS where the\n"
               "                      model asks for one; not with --ids or --pos0), and\n"
               "                      generate --kv FILE answers it\n"
               "  --system TEXT       a system turn before it\n"
               "  --chat-template T   this template (llama.cpp name or text); implies --chat\n"
               "  --dtype f16|f32|bf16|q8|q4|q4s  stored precision (default f16); q8, q4 and\n"
               "                      q4s are block-quantized (kvfs(5)): 0.53x, 0.30x and 0.30x of\n"
               "                      f16's bytes (q4s: q4 with finer key groups)\n"
               "  --kv-quant q8|q4|q4s|none  the same as --dtype q8|q4|q4s|f16\n"
               "  --salt STRING       a tenant's chunk: its name mixes in the digest of STRING,\n"
               "                      so another tenant (another salt, or none) never finds it\n"
               "  --no-claim          with -M: compute even if another host is computing it\n"
               "                      (by default the chunk is claimed first: when the mount's\n"
               "                      remote tier has it, or another host holds its lease and\n"
               "                      stores it meanwhile, it is not computed; kvfs(8),\n"
               "                      REMOTE TIER, Claims)\n"
               "  --claim-timeout S   wait at most S seconds for another host's computation\n"
               "                      (default 600; then computed here)\n"
               "  --backend NAME      cpu, cuda, auto (default cpu)\n"
               "  -t, --threads N     CPU threads (default: all cores)\n");
}

/* The chunk's name before it is computed: the header
 * kvfs_kv_cache_to_chunk_salted writes (keys after RoPE, from pos0, and
 * the model's other flags: V_FROM_K, LAYER_SHAPES). */
static int chunk_name(const struct kvfs_model *m, const int32_t *ids, size_t n, int pos0, uint32_t dtype,
                      const struct tool_salt *salt, char hex[KVFS_HASH_HEX_LEN + 1])
{
    return kvfs_ids_chunk_hash(&m->fp, dtype, kvfs_model_chunk_flags(m), (uint32_t)pos0, ids, n,
                               salt->set ? salt->digest : NULL, hex);
}

/* Claim the chunk at the mount: 1 when it need not be computed here (the
 * mount has it, or another host computed it meanwhile), 0 to compute it,
 * holding c.  A failing claim computes it anyway: the claim saves work,
 * nothing depends on it. */
static int claim_chunk(const char *mount, const char *hex, int timeout_s, struct libkvfs_claim *c)
{
    char err[256];
    int rc = libkvfs_claim(mount, hex, (uint32_t)timeout_s * 1000u, c, err, sizeof(err));
    if (rc == -ENOTTY)
        return 0; /* a mount older than claims */
    if (rc) {
        fprintf(stderr, "kvfsctl prefill: claim of %s failed (%s): computing it here\n", hex, err);
        return 0;
    }
    if (c->present)
        fprintf(stderr, "kvfsctl prefill: %s is in the mount%s%s: not computed\n", hex,
                c->fleet ? " or its pool" : "", c->waited_ms ? " (another host computed it meanwhile)" : "");
    else if (c->waited_ms)
        fprintf(stderr, "kvfsctl prefill: %s: the lease of another host ended without the chunk after %u ms: "
                "computing it here\n", hex, c->waited_ms);
    return c->present;
}

int cmd_prefill(int argc, char **argv)
{
    const char *model = NULL, *out = NULL, *mount = NULL, *backend = "cpu", *id_list = NULL;
    int pos0 = 0, bos = 0, threads = 0, no_claim = 0, claim_timeout = 600;
    struct libkvfs_claim claim = {.fd = -1};
    struct tool_chat chat = {0};
    uint32_t dtype = KVFS_DTYPE_F16;
    struct tool_salt salt = {0};
    const struct tool_opt opts[] = {
        TOOL_OPT("model", 'm', STR, &model), TOOL_OPT("output", 'o', STR, &out),
        TOOL_OPT("mount", 'M', STR, &mount), TOOL_OPT("pos0", 0, INT, &pos0), TOOL_OPT("ids", 0, STR, &id_list),
        TOOL_OPT("bos", 0, FLAG, &bos), TOOL_OPT_CALL("dtype", 0, tool_opt_dtype, &dtype),
        TOOL_OPT_CALL("kv-quant", 0, tool_opt_kv_quant, &dtype), TOOL_OPT_CALL("salt", 0, tool_opt_salt, &salt),
        TOOL_OPT("backend", 0, STR, &backend), TOOL_OPT("threads", 't', INT, &threads), TOOL_CHAT_OPTS(&chat),
        TOOL_OPT("no-claim", 0, FLAG, &no_claim), TOOL_OPT("claim-timeout", 0, INT, &claim_timeout), {0}};
    const struct tool_cmd cmd = {usage, opts, 0, 1};
    int rc = tool_parse_args(&cmd, argc, argv);
    if (rc != TOOL_ARGS_OK)
        return rc;
    if (!model || (!out && !mount) || (out && mount) || pos0 < 0 || claim_timeout < 0 || claim_timeout > 86400 ||
        tool_chat_check("prefill", &chat))
        return tool_usage_error(&cmd);
    if (chat.on && (id_list || pos0)) {
        fprintf(stderr, "kvfsctl prefill: --chat starts a sequence from a text: not with --ids or --pos0\n");
        return tool_usage_error(&cmd);
    }
    const char *text = optind < argc ? argv[optind] : "-";
    struct kvfs_model *m;
    struct kvfs_tokenizer *tok;
    if (tool_load_model(model, backend, threads, &m, &tok))
        return 1;
    if (kvfs_model_chunk_refusal(m)) {
        fprintf(stderr, "kvfsctl prefill: %s: %s\n", model, kvfs_model_chunk_refusal(m));
        kvfs_tokenizer_free(tok);
        kvfs_model_free(m);
        return 1;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    int ret = 1;
    if (kvfs_model_dtype_refusal(m, dtype)) {
        fprintf(stderr, "kvfsctl prefill: --dtype %s: %s\n", kvfs_dtype_name(dtype), kvfs_model_dtype_refusal(m, dtype));
        goto free_model;
    }
    if (kvfs_dtype_quantized(dtype) && !kvfs_model_shaped(m) && (m->fp.n_kv_head * m->fp.head_dim) % 64) {
        fprintf(stderr, "kvfsctl prefill: --dtype %s needs K/V rows of a multiple of 64 values; this model's are %u "
                "(%u KV heads x %u)\n", kvfs_dtype_name(dtype), m->fp.n_kv_head * m->fp.head_dim, m->fp.n_kv_head,
                m->fp.head_dim);
        goto free_model;
    }
    struct kvfs_kv_cache cache;
    struct kvfs_writer w;
    if (id_list) {
        char *s = strdup(id_list);
        int ni = 0, bad = !s || tool_parse_ids(s, &ids, &ni);
        free(s);
        for (int i = 0; !bad && i < ni; i++)
            bad = ids[i] >= m->hp.n_vocab;
        n = (size_t)ni;
        if (bad) {
            fprintf(stderr, "kvfsctl prefill: --ids wants comma-separated token ids below %d\n", m->hp.n_vocab);
            goto free_ids;
        }
    } else if (chat.on) {
        uint8_t *user;
        size_t len;
        if ((rc = tool_read_file(text, &user, &len))) {
            fprintf(stderr, "kvfsctl prefill: %s: %s\n", text, strerror(-rc));
            goto free_model;
        }
        rc = tool_chat_tokenize("prefill", m->gguf, tok, &chat, (const char *)user, len, 1, &ids, &n);
        free(user);
        if (rc)
            goto free_ids;
    } else if (tool_tokenize_file(tok, text, bos, &ids, &n)) {
        goto free_model;
    }
    char hex[KVFS_HASH_HEX_LEN + 1];
    if (mount && !no_claim && (rc = chunk_name(m, ids, n, pos0, dtype, &salt, hex)) == 0 &&
        claim_chunk(mount, hex, claim_timeout, &claim)) {
        tool_print_chunk(hex, mount);
        ret = 0;
        goto free_ids;
    }
    if ((rc = kvfs_kv_cache_init(m, (int)n, &cache))) {
        fprintf(stderr, "kvfsctl prefill: out of memory for %zu tokens\n", n);
        goto free_ids;
    }
    double t0 = tool_now();
    if ((rc = kvfs_forward(m, &cache, ids, (int)n, pos0, NULL))) {
        fprintf(stderr, "kvfsctl prefill: forward pass failed: %s\n", strerror(-rc));
        goto free_cache;
    }
    double t1 = tool_now();
    if ((rc = kvfs_kv_cache_to_chunk_salted(m, &cache, 0, (int)n, ids, dtype, 0, salt.set ? salt.digest : NULL,
                                            &w))) {
        fprintf(stderr, "kvfsctl prefill: cannot build the chunk: %s\n", strerror(-rc));
        goto free_cache;
    }
    char claimed[KVFS_HASH_HEX_LEN + 1];
    memcpy(claimed, hex, sizeof(hex));
    if (tool_put_chunk("prefill", &w, out, mount, hex) == 0) {
        if (claim.fd >= 0 && strcmp(claimed, hex))
            fprintf(stderr, "kvfsctl prefill: claimed %s but stored %s (a bug: tell us)\n", claimed, hex);
        fprintf(stderr, "kvfsctl prefill: %zu tokens in %.3f s (%.0f tokens/s), %zu bytes\n", n, t1 - t0,
                (double)n / (t1 - t0), w.size);
        tool_print_chunk(hex, mount);
        ret = 0;
    }
    kvfs_writer_free(&w);
free_cache:
    kvfs_kv_cache_free(m, &cache);
free_ids:
    libkvfs_claim_end(&claim); /* stored (the mount keeps the lease until the upload), or given up */
    free(ids);
free_model:
    kvfs_tokenizer_free(tok);
    kvfs_model_free(m);
    return ret;
}
