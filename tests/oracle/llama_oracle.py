"""llama.cpp (llama-cpp-python, built from source), the oracle, on our model:
one way to open it and one greedy decode, for the oracle tests and the
blend benchmarks."""
import os
from paths import MODEL


def open_llama(n_ctx):
    import llama_cpp
    return llama_cpp.Llama(model_path=MODEL, n_ctx=n_ctx, n_batch=512, n_threads=os.cpu_count(),
                           logits_all=True, verbose=False)


def greedy_llama(llm, ids, n):
    """llama.cpp's greedy continuation of n tokens after ids."""
    import numpy as np
    llm.reset()
    llm.eval(ids)
    out = []
    for _ in range(n):
        t = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        out.append(t)
        llm.eval([t])
    return out
