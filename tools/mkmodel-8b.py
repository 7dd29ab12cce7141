#!/usr/bin/env python3
"""Write an 8B-shaped Llama GGUF (Llama-3-8B's shapes: 32 layers, 4096 wide,
32 heads over 8 KV heads, FFN 14336, vocabulary 128256, RoPE base 500000)
with random weights, then quantize it to Q4_K_M with llama.cpp's own
quantizer (llama_model_quantize from the pinned llama-cpp-python).

Usage: tools/mkmodel-8b.py OUT.gguf [--shape llama3-8b|qwen3-1.7b] [--layers N] [--keep-f16]
                            [--quantizer PATH] [--fast]
(--shape qwen3-1.7b: Qwen3-1.7B's shapes, per-head Q/K norms, tied embeddings; 1.1 GB)

The F16 file (16 GB) is written beside OUT and removed once the Q4_K_M file
(4.9 GB) is complete; OUT appears only when the quantizer succeeded.  The
vocabulary is byte-level (256 byte tokens, <|endoftext|>, two spaces as one merge, then reserved
control tokens up to 128256), so any text tokenizes, about one token per byte.
Random weights: for speed and memory measurements, not for text quality.
Needs numpy and llama_cpp (tools/install-oracle.sh), or --quantizer naming
llama.cpp's llama-quantize program (the GPU device kit carries one, and no
llama_cpp); gguf-py comes from the llama.cpp source the llama-cpp-python sdist
carries (build/third_party), or from GGUF_PY.  --fast draws 16M random values
once and lays them out again with a random shift per tensor (seconds, not
minutes: for a machine whose time is counted; the weights are as random for
speed and memory measurements)."""
import argparse
import os
import sys
import time

import numpy as np



def gguf_module():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from gguf_py import import_gguf
    try:
        gguf = import_gguf()
    except ImportError:
        sys.exit('mkmodel-8b: gguf-py not found: run `make llama-server` first (it unpacks the llama.cpp source) '
                 'or pip install gguf')
    return gguf


def vocabulary(n_vocab):
    """GPT-2 byte encoding of the 256 bytes, an end token, reserved controls."""
    toks, types, extra = [], [], 0
    for b in range(256):
        printable = 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255
        toks.append(chr(b if printable else 256 + extra))
        extra += not printable
        types.append(1)
    toks.append('<|endoftext|>')
    types.append(3)
    toks.append('\u0120\u0120')  # two spaces: llama.cpp wants at least one merge
    types.append(1)
    toks += [f'<|reserved_special_token_{i}|>' for i in range(n_vocab - len(toks))]
    types += [3] * (n_vocab - len(types))
    return toks, types


# the shapes: (arch, n_embd, heads, kv heads, head dim, ffn, vocabulary, RoPE base, layers, tied embeddings)
SHAPES = {
    'llama3-8b': ('llama', 4096, 32, 8, 128, 14336, 128256, 500000.0, 32, False),
    # Qwen3-1.7B: per-head Q/K norms, tied embeddings
    'qwen3-1.7b': ('qwen3', 2048, 16, 8, 128, 6144, 151936, 1000000.0, 28, True),
}


def write_f16(gguf, path, n_layer, seed, fast=False, shape='llama3-8b'):
    arch, E, H, KH, D, FF, V, theta, _, tied = SHAPES[shape]
    w = gguf.GGUFWriter(path, arch)
    w.add_name(f'kvfs random {shape}-shaped model')
    w.add_block_count(n_layer)
    w.add_context_length(8192)
    w.add_embedding_length(E)
    w.add_feed_forward_length(FF)
    w.add_head_count(H)
    w.add_head_count_kv(KH)
    if D != E // H:
        w.add_key_length(D)
        w.add_value_length(D)
    w.add_rope_freq_base(theta)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(D)
    w.add_file_type(1)  # F16
    toks, types = vocabulary(V)
    w.add_tokenizer_model('gpt2')
    w.add_tokenizer_pre('gpt-2')
    w.add_token_list(toks)
    w.add_token_types(types)
    w.add_token_merges(['\u0120 \u0120'])
    w.add_bos_token_id(256)
    w.add_eos_token_id(256)
    w.add_add_bos_token(False)
    shapes = [('token_embd.weight', (V, E), 1.0), ('output_norm.weight', (E,), None)]
    if not tied:
        shapes.append(('output.weight', (V, E), 0.02))
    for l in range(n_layer):
        if arch == 'qwen3':
            shapes += [(f'blk.{l}.attn_q_norm.weight', (D,), None), (f'blk.{l}.attn_k_norm.weight', (D,), None)]
        shapes += [(f'blk.{l}.attn_norm.weight', (E,), None), (f'blk.{l}.ffn_norm.weight', (E,), None),
                   (f'blk.{l}.attn_q.weight', (H * D, E), 0.02), (f'blk.{l}.attn_k.weight', (KH * D, E), 0.02),
                   (f'blk.{l}.attn_v.weight', (KH * D, E), 0.02), (f'blk.{l}.attn_output.weight', (E, H * D), 0.02),
                   (f'blk.{l}.ffn_gate.weight', (FF, E), 0.02), (f'blk.{l}.ffn_up.weight', (FF, E), 0.02),
                   (f'blk.{l}.ffn_down.weight', (E, FF), 0.02)]
    # norms stay f32 (llama.cpp keeps 1-D tensors in f32 when quantizing)
    for name, shape, std in shapes:
        dt = np.float32 if std is None else np.float16
        w.add_tensor_info(name, shape, np.dtype(dt), int(np.prod(shape)) * np.dtype(dt).itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    pool = rng.standard_normal(1 << 24, dtype=np.float32) if fast else None
    t0, done, total = time.time(), 0, sum(int(np.prod(s)) for _, s, _ in shapes)
    for name, shape, std in shapes:
        if std is None:
            a = (1.0 + 0.1 * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)
        elif fast:
            n = int(np.prod(shape))
            a = np.resize(np.roll(pool * np.float32(std), int(rng.integers(1 << 24))).astype(np.float16), n)
            a = a.reshape(shape)
        else:
            a = (rng.standard_normal(shape, dtype=np.float32) * np.float32(std)).astype(np.float16)
        w.write_tensor_data(a)
        done += a.size
        print(f'\rmkmodel-8b: f16 {done / total:6.1%} ({time.time() - t0:.0f} s)', end='', file=sys.stderr)
    print(file=sys.stderr)
    w.close()


def quantize(src, dst, quantizer=None):
    if quantizer:
        import subprocess
        t0 = time.time()
        r = subprocess.run([quantizer, src, dst, 'Q4_K_M', str(os.cpu_count() or 1)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            sys.exit(f'mkmodel-8b: {quantizer} failed ({r.returncode}): {r.stderr[-2000:]}')
        print(f'mkmodel-8b: Q4_K_M in {time.time() - t0:.0f} s ({quantizer})', file=sys.stderr)
        return
    import llama_cpp
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M
    p.nthread = os.cpu_count() or 1
    t0 = time.time()
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), p)
    if rc != 0:
        sys.exit(f'mkmodel-8b: llama_model_quantize failed ({rc})')
    print(f'mkmodel-8b: Q4_K_M in {time.time() - t0:.0f} s', file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('out')
    ap.add_argument('--shape', choices=sorted(SHAPES), default='llama3-8b',
                    help="the model's shapes (default llama3-8b; qwen3-1.7b: Qwen3-1.7B's)")
    ap.add_argument('--layers', type=int, help="layers (default: the shape's)")
    ap.add_argument('--seed', type=int, default=8)
    ap.add_argument('--keep-f16', action='store_true')
    ap.add_argument('--quantizer', help="llama.cpp's llama-quantize program (default: llama_cpp's binding)")
    ap.add_argument('--fast', action='store_true', help='lay out 16M random values again (seconds)')
    a = ap.parse_args()
    gguf = gguf_module()
    f16 = a.out + '.f16.part'
    part = a.out + '.part'
    layers = a.layers or SHAPES[a.shape][8]
    try:
        write_f16(gguf, f16, layers, a.seed, a.fast, a.shape)
        quantize(f16, part, a.quantizer)
        os.rename(part, a.out)
    finally:
        if os.path.exists(part):
            os.unlink(part)
        if not a.keep_f16 and os.path.exists(f16):
            os.unlink(f16)
    print(f'mkmodel-8b: {a.out} ({os.path.getsize(a.out) / 2**30:.2f} GiB)', file=sys.stderr)


if __name__ == '__main__':
    main()
