/* fuzz_gguf.c - libFuzzer target: the GGUF reader (blend/runtime/gguf.c)
 * on arbitrary bytes, through a memfd as a model file would come.  An
 * accepted file's metadata and tensor table are walked and every tensor's
 * data is dequantized, which must stay inside the mapping (ASan). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = memfd_create("fuzz.gguf", MFD_CLOEXEC);
    if (fd < 0)
        return 0;
    if (write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return 0;
    }
    char path[64], err[256];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    struct kvfs_gguf *g = NULL;
    if (kvfs_gguf_open(path, &g, err, sizeof(err)) == 0) {
        uint32_t u;
        float f;
        int b;
        struct kvfs_gguf_str s;
        (void)kvfs_gguf_get_u32(g, "general.alignment", &u);
        (void)kvfs_gguf_get_f32(g, "llama.rope.freq_base", &f);
        (void)kvfs_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b);
        (void)kvfs_gguf_get_str(g, "general.architecture", &s);
        for (uint64_t i = 0; i < g->n_kv; i++) {
            const struct kvfs_gguf_kv *kv = &g->kv[i];
            for (uint64_t j = 0; j < 4; j++) {
                int32_t v;
                float x;
                (void)kvfs_gguf_arr_str(kv, j, &s);
                (void)kvfs_gguf_arr_i32(kv, j, &v);
                (void)kvfs_gguf_arr_f32(kv, j, &x);
            }
        }
        for (uint64_t t = 0; t < g->n_tensors; t++) {
            const struct kvfs_gguf_tensor *ts = &g->tensors[t];
            uint64_t n = 1;
            for (uint32_t d = 0; d < ts->n_dims; d++)
                n *= ts->ne[d];
            if (n > 0 && n <= (1u << 16)) {
                float *out = malloc(sizeof(float) * n);
                if (out)
                    (void)kvfs_ggml_dequantize(ts->type, ts->data, out, n);
                free(out);
            }
        }
        kvfs_gguf_close(g);
    }
    close(fd);
    return 0;
}
