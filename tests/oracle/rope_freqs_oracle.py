"""Llama 3.1-style RoPE frequency factors (rope_freqs.weight) computed as
llama.cpp computes them: SmolLM2 with factors made by Llama 3.1's formula
(factor 8, low/high frequency factors 1 and 4) for an original context of 64
tokens, so that most pairs are slowed 1-8x at these prompts' positions (with
Llama 3.1's 8192 they would barely move), added by llama.cpp's own gguf-py
(gguf_edit.py), next-token log-probabilities of kvfs against llama.cpp
(llama-cpp-python) on real-text prompts: top-1 equal (or a near-tie) and
max |delta log-prob| over llama.cpp's top 10 within SmolLM2's bound
(logits_oracle.py).  The same prompts on the model without the factors are
far from llama.cpp's scaled answers (what ignoring them would give), so
the check can fail.  Prints each prompt.

With --scaling linear|yarn: instead of the factors, the keys of that RoPE
scaling (linear: factor 4; YaRN: 16 over an original context of 64, so that
its ramp splits SmolLM2's pairs and what it changes shows at these
positions), the same checks.

usage: rope_freqs_oracle.py OUT.gguf [--scaling linear|yarn]"""
import json, math, os, subprocess, sys
import numpy as np
sys.path.insert(0, os.path.dirname(__file__))
from corpus import documents
from paths import KVFSCTL, SMOLLM2
from llama_oracle import last_logprobs, judge
import llama_cpp

MAX_DLOGP, NEAR_TIE = 1.2, 0.25
out = sys.argv[1]
theta, dim = 100000.0, 64  # SmolLM2: rope.freq_base, head_dim
OLD_CTX = 64
factors = []
for j in range(dim // 2):
    freq = 1.0 / theta ** (2 * j / dim)
    wavelen = 2 * math.pi / freq
    if wavelen < OLD_CTX / 4:
        factors.append(1.0)
    elif wavelen > OLD_CTX / 1:
        factors.append(8.0)
    else:
        smooth = (OLD_CTX / wavelen - 1) / (4 - 1)
        factors.append(1.0 / ((1 - smooth) / 8 + smooth))
print(f'factors: {sum(f > 1 for f in factors)}/{len(factors)} pairs slowed, up to {max(factors):g}x')
scaling = sys.argv[sys.argv.index('--scaling') + 1] if '--scaling' in sys.argv else None
edit = ['--tensor-values', 'rope_freqs.weight=' + ','.join(f'{f:.9g}' for f in factors)]
if scaling:
    factor = 4 if scaling == 'linear' else 16
    edit = ['--str', f'llama.rope.scaling.type={scaling}', '--f32', f'llama.rope.scaling.factor={factor}']
    edit += ['--u32', 'llama.rope.scaling.original_context_length=64'] if scaling == 'yarn' else []
    print(f'{scaling} RoPE scaling, factor {factor}')
r = subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), 'gguf_edit.py'), SMOLLM2, out, *edit])
if r.returncode == 77:
    print('skip: gguf-py unavailable (make test unpacks the llama.cpp source)')
    sys.exit(77)
if r.returncode:
    sys.exit('gguf_edit.py failed')
llm = llama_cpp.Llama(model_path=out, n_ctx=2048, n_threads=os.cpu_count(), verbose=False, logits_all=False)
docs = documents()
prompts = []
for i, n in enumerate([48, 200, 700] if scaling else [48, 200, 700, 1500]):
    p, text = docs[(i * 7) % len(docs)]
    ids = llm.tokenize(text.encode('utf-8'), add_bos=False, special=False)[:n]
    prompts.append((p, ids))


def kvfs_top(model, ids):
    r = subprocess.run([KVFSCTL, 'logits', '-m', model, '--tokens-file', '-', '--top', '50'],
                       input=' '.join(map(str, ids)), capture_output=True, text=True, check=True)
    return json.loads(r.stdout)['top']


fails, far = 0, 0
for path, ids in prompts:
    llm.reset()
    llm.eval(ids)
    lp = last_logprobs(llm)
    top = [int(t) for t in np.argsort(-lp)[:10]]
    ours, plain = kvfs_top(out, ids), kvfs_top(SMOLLM2, ids)
    ok, near, dl = judge(lp, ours, MAX_DLOGP, NEAR_TIE)
    _, _, dl_plain = judge(lp, plain, MAX_DLOGP, NEAR_TIE)
    fails += not ok
    far += dl_plain > 2 * MAX_DLOGP or plain[0][0] != top[0]
    print(f'{"ok  " if ok else "FAIL"} n={len(ids):5d} top1 {ours[0][0]}/{top[0]} max|dlogp| {dl:.4f} '
          f'(without {"it" if scaling else "the factors"}: top1 {plain[0][0]}, {dl_plain:.2f})  {os.path.basename(path)}')
if far < len(prompts) // 2:
    print(f'FAIL: ignoring the factors stays close to llama.cpp on {len(prompts) - far}/{len(prompts)} prompts: '
          'this check would not see them ignored')
    fails += 1
print('PASS' if not fails else f'{fails} failures')
sys.exit(1 if fails else 0)
