"""A llama.cpp sequence state (a kvfs llama/ view) restored into llama.cpp
(llama-cpp-python), QUERY evaluated after it, against llama.cpp's own eval of
the state's tokens + QUERY from scratch: prints both top-1 and max |delta
log-prob| over the top 10; exit 0 when the top-1 agree and the difference is
within BOUND (default 0.01), 1 otherwise, 2 when llama.cpp refuses the state.

usage: llama_restore_check.py MODEL STATE QUERY_IDS [BOUND] [--no-flash-attn]"""
import ctypes
import sys

import numpy as np
import llama_cpp
args = [a for a in sys.argv[1:] if not a.startswith('--')]
model, state, query = args[0], args[1], [int(t) for t in args[2].split(',')]
bound = float(args[3]) if len(args) > 3 else 0.01
flash = '--no-flash-attn' not in sys.argv
def lp(row):
    row = np.asarray(row, dtype=np.float64); return row - row.max() - np.log(np.exp(row - row.max()).sum())
llm = llama_cpp.Llama(model_path=model, n_ctx=2048, n_threads=2, logits_all=True, flash_attn=flash, verbose=False)
toks = (llama_cpp.llama_token * 2048)(); n_out = ctypes.c_size_t(0)
if llama_cpp.llama_state_seq_load_file(llm._ctx.ctx, state.encode(), 0, toks, 2048, ctypes.byref(n_out)) == 0:
    print('refused'); sys.exit(2)
restored = [toks[i] for i in range(n_out.value)]
llm.n_tokens = len(restored); llm.input_ids[:len(restored)] = restored
llm.eval(query); a = lp(llm.scores[llm.n_tokens - 1])
ref = llama_cpp.Llama(model_path=model, n_ctx=2048, n_threads=2, logits_all=True, flash_attn=flash, verbose=False)
ref.eval(restored + query); b = lp(ref.scores[ref.n_tokens - 1])
top = np.argsort(-b)[:10]
d = float(np.abs(a[top] - b[top]).max())
print(f'restored {len(restored)} tokens; top-1 {int(np.argmax(a))}/{int(np.argmax(b))}; max|dlogp| top-10 {d:.4f}')
sys.exit(0 if int(np.argmax(a)) == int(np.argmax(b)) and d <= bound else 1)
