/* fuzz_llama_state.c - libFuzzer target: a llama.cpp sequence-state file
 * read as a chunk (index/llama_state.c, kvfs_llama_state_to_chunk: what an
 * engine's llama_state_seq_save_file writes into llama/).  The model is the
 * seed chunk's (tests/fuzz/corpus/chunk/f16_2x4.kv: 2 layers, 1 KV head of
 * 16; a vocabulary of 2^17); an input whose last byte is odd reads it as
 * a model whose layer 0 is a sliding-window one (window 4: two-part
 * states).  An accepted state becomes a chunk that verifies whole and whose
 * view reads back whole; a refused one says why. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama_state.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct kvfs_fingerprint fp;
static struct kvfs_llama_swa swa = {.n_swa = 4, .local = {1}};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    static uint8_t buf[1 << 16];
    FILE *f = fopen("tests/fuzz/corpus/chunk/f16_2x4.kv", "rb");
    size_t n = f ? fread(buf, 1, sizeof(buf), f) : 0;
    if (f)
        fclose(f);
    struct kvfs_header h;
    if (kvfs_header_parse(buf, n, &h, NULL, 0) != 0) {
        fprintf(stderr, "fuzz_llama_state: run from the repository root (the seed chunk gives the model)\n");
        abort();
    }
    fp = h.fp;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct kvfs_writer w;
    char err[512] = "";
    memset(&w, 0, sizeof(w));
    const struct kvfs_llama_swa *sw = size && (data[size - 1] & 1) ? &swa : NULL;
    int rc = kvfs_llama_state_to_chunk_swa(data, size, &fp, 1u << 17, sw, NULL, &w, err, sizeof(err));
    if (rc) {
        if (!err[0])
            abort(); /* every refusal names what was wrong */
        return 0;
    }
    struct kvfs_header h;
    if (kvfs_file_verify(w.buf, w.size, &h, err, sizeof(err)) != 0 || h.n_tokens == 0)
        abort(); /* what a state becomes is a whole, valid chunk */
    struct kvfs_llama_view v;
    if (kvfs_llama_view_init_swa(&v, &h, 0, 2, sw) == 0) { /* and reads back as a state of its size */
        uint8_t *out = malloc(v.size);
        if (!out || v.size != kvfs_llama_state_size_swa(h.n_tokens, h.fp.n_layer, v.kv_dim, 2, sw) ||
            kvfs_llama_view_read(&v, w.buf, 0, out, v.size) != v.size)
            abort();
        free(out);
        kvfs_llama_view_free(&v);
    }
    kvfs_writer_free(&w);
    return 0;
}
