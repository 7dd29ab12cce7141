"""Prefill token ids with llama.cpp (llama-cpp-python) and save the
sequence's state with llama_state_seq_save_file, as llama-server's slot
save does.

usage: llama_save.py MODEL IDS OUT [--no-flash-attn] [--no-swa-full]   (IDS comma-separated)"""
import os
import sys

import llama_cpp


def main():
    model, ids, out = sys.argv[1], [int(t) for t in sys.argv[2].split(',') if t], sys.argv[3]
    flash = '--no-flash-attn' not in sys.argv
    swa_full = '--no-swa-full' not in sys.argv
    llm = llama_cpp.Llama(model_path=model, n_ctx=4096, n_batch=512, n_threads=os.cpu_count(), flash_attn=flash,
                          swa_full=swa_full, verbose=False)
    llm.eval(ids)
    arr = (llama_cpp.llama_token * len(ids))(*ids)
    n = llama_cpp.llama_state_seq_save_file(llm._ctx.ctx, out.encode(), 0, arr, len(ids))
    if n == 0:
        print("llama.cpp could not save the state", file=sys.stderr)
        sys.exit(2)
    print(n)


main()
