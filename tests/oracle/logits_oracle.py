"""Our forward pass against llama.cpp (llama-cpp-python, built from source)
on the same GGUF and the same token ids: >= 20 real-text prompts of 16 to
2048 tokens (SmolLM2, or the model KVFS_ORACLE_MODEL names: Gemma 3, whose
prompts start with its BOS as llama.cpp's tokenizer adds it).  Asserts on every prompt top-1 identical or a near-tie
(NEAR_TIE below) and max |delta log-prob| over llama.cpp's top 10 below a
bound, and identical 32-token greedy continuations on a sanity floor of the
prompts (greedy-32 is no fidelity gate: see MIN_GREEDY_SAME).  Prints the
measured figures."""
import json, os, subprocess, sys
import numpy as np
sys.path.insert(0, os.path.dirname(__file__))
from corpus import documents

from paths import ROOT, KVFSCTL, MODEL
from llama_oracle import open_llama, greedy_llama, last_logprobs, judge
# Bounds measured on this model (2026-11-22, 22 prompts): llama.cpp
# quantizes activations to Q8_1/Q8_0 inside its quantized matmuls and keeps
# an f16 KV cache; we emulate both (model.h, ggml_compat) but sum in another
# order, so near-ties in the top-10 tail differ: observed max 0.95 nats,
# top-1 22/22, greedy-32 identical on 12-13/22 (a 32-token continuation
# diverges after the first near-tie).  Held with a margin:
MAX_DLOGP = 1.2
# Fraction of prompts whose 32-token continuation must be identical: a
# sanity floor, not a fidelity gate (greedy-32 on SmolLM2 is none).  A wrong
# forward pass diverges on nearly every prompt; another sum order does on
# about half: 12-13/22 with AVX-512 kernels, 10/22 with the x86-64-v3 ones
# (2026-11-28, against an AVX-512 llama.cpp).
MIN_GREEDY_SAME = 0.25
GEMMA = 'gemma' in os.path.basename(MODEL)
if GEMMA:
    # Gemma 3 270M Q4_K_M, measured 2026-11-24 on the same 22 prompts (BOS
    # first): top-1 22/22, max |delta log-prob| over llama.cpp's top 10
    # 1.24 nats (the 2048-token prompt; 0.18-0.94 on the others), greedy-32
    # identical on 8/22 -- a 262144-token vocabulary has more near-ties in
    # its tail and in a continuation.  With the x86-64-v3 kernels (AVX2;
    # 2026-11-28, against the same AVX-512 llama.cpp) the 2048-token prompt's
    # tail reaches 1.79 nats and one top-1 flips (1536 tokens, max |dlogp|
    # 0.21, so llama.cpp's own gap is under 0.43).  Every level must pass:
    # held with the same ~1.3x margin over the worst level measured.
    MAX_DLOGP = 2.3
    NEAR_TIE_GEMMA = 0.5
MAX_DLOGP = float(os.environ.get('KVFS_MAX_DLOGP', MAX_DLOGP))
# A top-1 difference counts as a failure unless llama.cpp itself puts our
# top-1 within NEAR_TIE nats of its own (a tie inside quantization noise,
# e.g. 0.20 nats on one man page at 48 tokens when our softmax summed in float).
NEAR_TIE = 0.25
if GEMMA:
    NEAR_TIE = NEAR_TIE_GEMMA

llm = open_llama(4096, logits_all=False)

lengths = [16, 24, 32, 48, 64, 96, 128, 160, 200, 256, 300, 384, 448, 512, 640, 768, 900, 1024, 1280, 1536, 1800, 2048]
docs = documents()
prompts = []
for i, n in enumerate(lengths):
    for k in range(len(docs)):
        p, text = docs[(i * 7 + k) % len(docs)]
        ids = llm.tokenize(text.encode('utf-8'), add_bos=GEMMA, special=False)
        if len(ids) >= n:
            prompts.append((p, ids[:n]))
            break
print(f'{len(prompts)} prompts, lengths {[len(x[1]) for x in prompts]}')
assert len(prompts) >= 20

fails, worst, same, ties = 0, 0.0, 0, 0
for path, ids in prompts:
    llm.reset()
    llm.eval(ids)
    lp = last_logprobs(llm)
    top = [int(t) for t in np.argsort(-lp)[:10]]
    r = subprocess.run([KVFSCTL, 'logits', '-m', MODEL, '--tokens-file', '-', '--top', '50', '--greedy', '32'],
                       input=' '.join(map(str, ids)), capture_output=True, text=True)
    if r.returncode != 0:
        print(f'FAIL kvfsctl logits: {r.stderr}')
        fails += 1
        continue
    ours = json.loads(r.stdout)
    ok, near_tie, dl = judge(lp, ours['top'], MAX_DLOGP, NEAR_TIE)
    worst = max(worst, dl)
    g_ref = greedy_llama(llm, ids, 32)
    g_same = g_ref == ours['greedy']
    same += g_same
    ties += near_tie
    fails += not ok
    print(f'{"ok  " if ok else "FAIL"} n={len(ids):5d} top1 {ours["top"][0][0]:6d}/{top[0]:6d} '
          f'max|dlogp|={dl:.4f} greedy32 {"same" if g_same else "differs"}  {os.path.basename(path)}')
frac = same / len(prompts)
print(f'top-1 identical on {len(prompts) - ties - fails}/{len(prompts)} prompts ({ties} near-ties within {NEAR_TIE} nats); '
      f'max |delta log-prob| over top-10: {worst:.4f} (bound {MAX_DLOGP}); '
      f'greedy 32 identical on {same}/{len(prompts)} prompts (floor {MIN_GREEDY_SAME:.0%})')
if frac < MIN_GREEDY_SAME:
    fails += 1
print('PASS' if fails == 0 else f'{fails} failures')
sys.exit(1 if fails else 0)
