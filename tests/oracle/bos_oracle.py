"""kvfsctl generate starts a sequence as llama.cpp does: with BOS where the
model asks for it (tokenizer.ggml.add_bos_token: Gemma 3 yes, SmolLM2 no),
so its greedy answer to a bare prompt is llama.cpp's (llama-cpp-python,
tokenize(add_bos=True), the same GGUF): token for token, or differing only
at a near-tie of llama.cpp's own (NEAR_TIE nats) after which the two
continuations may part.  --no-bos gives what the prompt without BOS gives
llama.cpp.  Prints each comparison."""
import os, subprocess, sys
import numpy as np
sys.path.insert(0, os.path.dirname(__file__))
from paths import KVFSCTL, SMOLLM2, GEMMA3
from llama_oracle import last_logprobs

import llama_cpp

N, NEAR_TIE = 12, 0.5
PROMPTS = ["The capital of France is", "Water boils at a temperature of", "The GNU General Public License is"]
failed = 0


def llama_greedy(llm, ids, n):
    llm.reset()
    llm.eval(ids)
    out, gaps = [], []
    for _ in range(n):
        lp = last_logprobs(llm)
        t = int(np.argmax(lp))
        out.append(t)
        gaps.append(lp)
        llm.eval([t])
    return out, gaps


for model in (GEMMA3, SMOLLM2):
    if not os.path.exists(model):
        print(f"skip: {model} missing")
        continue
    llm = llama_cpp.Llama(model_path=model, n_ctx=512, n_threads=os.cpu_count(), verbose=False, logits_all=False)
    for bos in (True, False):
        for p in PROMPTS:
            ids = llm.tokenize(p.encode(), add_bos=bos, special=False)
            want, lps = llama_greedy(llm, ids, N)
            args = [KVFSCTL, 'generate', '-m', model, '-p', p, '-n', str(N), '--ids'] + ([] if bos else ['--no-bos'])
            got = [int(x) for x in subprocess.run(args, capture_output=True, text=True, check=True).stdout.split()]
            first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
            if first is None and len(got) == len(want):
                verdict = "identical"
            elif first is not None and lps[first][want[first]] - lps[first][got[first]] <= NEAR_TIE:
                verdict = f"near-tie at {first} ({lps[first][want[first]] - lps[first][got[first]]:.3f} nats)"
            else:
                verdict = "FAIL"
                failed += 1
            print(f"{os.path.basename(model)} bos={'model' if bos else 'none'} {p!r}: kvfs {got} llama.cpp {want}: "
                  f"{verdict}")
    del llm
sys.exit(1 if failed else 0)
