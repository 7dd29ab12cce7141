/* model_check.h - which GGUF models kvfs computes as llama.cpp does, and a
 * refusal naming the architecture, key or tensor it would not honour
 * (model_check.c). */
#ifndef KVFS_MODEL_CHECK_H
#define KVFS_MODEL_CHECK_H

#include <stddef.h>

#include "gguf.h"

/* 0 for an architecture kvfs runs; -ENOTSUP with the reason in err (a known
 * family kvfs refuses says why: experts, latent attention, recurrent state) */
int kvfs_model_arch_check(const char *path, const char *arch, char *err, size_t errlen);
/* 0 when every tensor of g is one the runtime reads for arch (n_layer
 * layers), in a type it decodes, and no key asks for computation it lacks (RoPE scaling, experts,
 * attention soft-capping); else -ENOTSUP naming the first such thing */
int kvfs_model_file_check(const char *path, const struct kvfs_gguf *g, const char *arch, int n_layer, char *err,
                          size_t errlen);
/* deepseek2: whether llama.cpp reads attention.q_lora_rank (Q through a
 * low-rank pair) for a file of n_layer layers: its "lite" variants, known
 * by layer count and vocabulary, never do */
int kvfs_ds2_reads_q_lora(const struct kvfs_gguf *g, const char *arch, int n_layer);
/* Why an architecture kvfs computes cannot have its KV in chunk files, or
 * NULL when it can (every one today) */
const char *kvfs_arch_chunk_refusal(const char *arch);

#endif
