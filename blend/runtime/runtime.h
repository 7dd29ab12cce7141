/* runtime.h - the model runtime, in one header.
 *
 * blend/runtime/ is kvfs's own transformer runtime, independent of blending:
 * GGUF loading (gguf.h) and writing (gguf_write.h), the tokenizer
 * (tokenizer.h), the model loaded onto a compute backend (model.h), the
 * forward pass for prefill and decode (forward.h), dequantization of ggml
 * tensor types (quant.c, declared in gguf.h), and tiny synthetic models for
 * tests (synth_model.h).  Compute backends live in gpu/ (backend.h); blending
 * (blend/) is built on top of this. */
#ifndef KVFS_RUNTIME_H
#define KVFS_RUNTIME_H

#include "gguf.h"
#include "gguf_write.h"
#include "tokenizer.h"
#include "model.h"
#include "forward.h"
#include "synth_model.h"

#endif
