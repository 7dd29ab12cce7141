"""Restore a llama.cpp sequence-state file (a kvfs llama/ view) into
llama.cpp through llama-cpp-python and continue greedily after it.

usage: llama_state.py MODEL STATE_FILE N QUERY_IDS [--no-flash-attn] [--no-swa-full] [--expect IDS]
Prints: the restored token count, the number of prompt tokens llama.cpp
evaluated after the restore (its perf counter), then the N greedy token ids
after STATE's tokens + QUERY_IDS, comma-separated, one line each.  With
--expect (another engine's greedy ids): exit 0 if they are the same, or if at
the first difference llama.cpp's own log-probability of the expected token is
within NEAR_TIE nats of its top-1 (a near-tie, as in logits_oracle.py); exit 1
otherwise, saying where.  --no-swa-full: a sliding-window model's SWA cache
sized to the window as llama-server makes it (llama.cpp's own default, which
llama-cpp-python keeps, is the full-size one)."""
import ctypes
import os
import sys

import numpy as np
import llama_cpp

NEAR_TIE = 0.25


def main():
    model, state, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    query = [int(t) for t in sys.argv[4].split(',') if t]
    flash = '--no-flash-attn' not in sys.argv
    swa_full = '--no-swa-full' not in sys.argv
    expect = None
    if '--expect' in sys.argv:
        expect = [int(t) for t in sys.argv[sys.argv.index('--expect') + 1].replace(' ', ',').split(',') if t]
    llm = llama_cpp.Llama(model_path=model, n_ctx=4096, n_batch=512, n_threads=os.cpu_count(), logits_all=True,
                          flash_attn=flash, swa_full=swa_full, verbose=False)
    cap = 4096
    toks = (llama_cpp.llama_token * cap)()
    n_out = ctypes.c_size_t(0)
    got = llama_cpp.llama_state_seq_load_file(llm._ctx.ctx, state.encode(), 0, toks, cap, ctypes.byref(n_out))
    if got == 0:
        print("llama.cpp refused the state file", file=sys.stderr)
        sys.exit(2)
    restored = [toks[i] for i in range(n_out.value)]
    llm.n_tokens = len(restored)
    llm.input_ids[:len(restored)] = restored
    print(len(restored))
    llama_cpp.llama_perf_context_reset(llm._ctx.ctx)
    llm.eval(query)  # only the query is evaluated: the rest is the restored cache
    perf = llama_cpp.llama_perf_context(llm._ctx.ctx)
    print(perf.n_p_eval)  # prompt tokens llama.cpp computed after the restore
    out, verdict = [], 0
    for i in range(n):
        row = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float64)
        t = int(np.argmax(row))
        if expect is not None and verdict == 0 and i < len(expect) and t != expect[i]:
            lp = row - row.max() - np.log(np.exp(row - row.max()).sum())
            gap = lp[t] - lp[expect[i]]
            verdict = 2 if gap <= NEAR_TIE else 1
            print(f"first difference at token {i}: llama.cpp {t}, expected {expect[i]} "
                  f"({gap:.3f} nats below; near-tie bound {NEAR_TIE})", file=sys.stderr)
        out.append(t)
        llm.eval([t])
    print(','.join(str(t) for t in out))
    sys.exit(1 if verdict == 1 else 0)


main()
