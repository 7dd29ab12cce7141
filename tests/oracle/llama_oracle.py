"""llama.cpp (llama-cpp-python, built from source), the oracle, on our model:
one way to open it and one greedy decode, for the oracle tests and the
blend benchmarks."""
import os
from paths import MODEL


def open_llama(n_ctx, logits_all=True):
    """logits_all=False: only the last token's logits (last_logits), without
    the n_ctx x n_vocab buffers (4 GB each at n_ctx 4096 with Gemma 3's
    262144-token vocabulary)."""
    import llama_cpp
    return llama_cpp.Llama(model_path=MODEL, n_ctx=n_ctx, n_batch=512, n_threads=os.cpu_count(),
                           logits_all=logits_all, verbose=False)


def last_logits(llm):
    """The logits after the last evaluated token (a copy)."""
    import llama_cpp
    import numpy as np
    return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(llm.n_vocab(),)).copy()


def greedy_llama(llm, ids, n):
    """llama.cpp's greedy continuation of n tokens after ids."""
    import numpy as np
    llm.reset()
    llm.eval(ids)
    out = []
    for _ in range(n):
        t = int(np.argmax(last_logits(llm)))
        out.append(t)
        llm.eval([t])
    return out
