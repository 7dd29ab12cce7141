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


def last_logprobs(llm):
    """Log-probabilities (float64) after the last evaluated token."""
    import numpy as np
    lg = np.asarray(last_logits(llm), dtype=np.float64)
    return lg - (lg.max() + np.log(np.exp(lg - lg.max()).sum()))


def judge(lp, ours, max_dlogp, near_tie):
    """kvfs's top log-probabilities ours ([[id, logprob], ...], best first,
    from kvfsctl logits) against llama.cpp's lp: (ok, near-tie, max |delta
    log-prob| over llama.cpp's top 10).  ok: the same top-1, or kvfs's top-1
    within near_tie nats of llama.cpp's own, and the delta within max_dlogp."""
    import numpy as np
    top = [int(t) for t in np.argsort(-lp)[:10]]
    d = {t: v for t, v in ours}
    dl = max(abs(lp[t] - d.get(t, -99.0)) for t in top)
    near = ours[0][0] != top[0] and lp[top[0]] - lp[ours[0][0]] <= near_tie
    return (ours[0][0] == top[0] or near) and dl <= max_dlogp, near, dl


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
