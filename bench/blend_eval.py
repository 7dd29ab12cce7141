import json, os, shlex, statistics, subprocess, sys, tempfile, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rag_set import N, K, SIZE, DISTINCT, SHORT, LLAMA_CTX, prompt_files, open_llama, greedy_llama
from paths import KVFSCTL, MODEL
RATIOS = os.environ.get('BLEND_RATIOS', '0.05,0.1,0.15,0.3,1')
SELECT = os.environ.get('BLEND_SELECT', 'query,fixed,gradual')
BOS = os.environ.get('BLEND_BOS', 'each')  # kvfsctl eval --bos: a no-op for SmolLM2 (no BOS)
EXTRA = shlex.split(os.environ.get("BLEND_EVAL_ARGS", ""))  # more kvfsctl eval options (experiments)
# full prefill's self-agreement: an independent, equally valid full prefill
# (llama.cpp, the oracle) against ours -- the noise floor of "agreement"
try:
    if os.environ.get('BLEND_SELF_AGREEMENT', '1') == '0':
        raise RuntimeError('BLEND_SELF_AGREEMENT=0')
    llm = open_llama()
except Exception as e:  # the oracle is optional here; make bench installs it
    print(f'llama.cpp unavailable ({e}); no self-agreement row', file=sys.stderr)
    llm = None

rows = {}
self_rows = []
with tempfile.TemporaryDirectory() as td:
    for p, files, q in prompt_files(td):
        r = subprocess.run([KVFSCTL, 'eval', '-m', MODEL, '--json', '--ratio', RATIOS, '--select', SELECT, '--bos', BOS,
                            '--query', q] + EXTRA + files,
                           capture_output=True, text=True, check=True)
        d = json.loads(r.stdout)
        for res in d['results']:
            rows.setdefault(res['method'], []).append((res['ttft_s'], res['kl'], res['top1'], res['greedy_agree'], d['tokens']))
        if llm is not None and d['tokens'] + len(d['full_greedy']) <= LLAMA_CTX:
            g = greedy_llama(llm, d['prompt_ids'], len(d['full_greedy']))
            agree = sum(a == b for a, b in zip(g, d['full_greedy'])) / len(g)
            self_rows.append((g[0] == d['full_greedy'][0], agree))
        print(f'prompt {p + 1}/{N}: {d["tokens"]} tokens', file=sys.stderr)
full_ttft = statistics.median(x[0] for x in rows['full prefill'])
reuse_kl = statistics.mean(x[1] for x in rows['full reuse'])
MODEL_NAME = {'SmolLM2-135M-Instruct.Q4_1.gguf': 'SmolLM2-135M-Instruct Q4_1',
              'gemma-3-270m-q4_k_m.gguf': 'Gemma 3 270M Q4_K_M'}.get(os.path.basename(MODEL), os.path.basename(MODEL))
print(f'### Blending quality and TTFT, {MODEL_NAME}{", short chunks" if SHORT else ""} (`bench/blend.sh`, run by '
      '`make bench`)\n')
SET = (f'{N} prompts of 3 to 8 short passages (package descriptions and license clauses of 130-480 bytes, about '
       f'30-120 tokens each; median {statistics.median(x[4] for x in rows["full prefill"])} tokens) plus a question '
       '(`BLEND_SET=short`). ' if SHORT else
       f'{N} prompts of {K} chunks x {SIZE} bytes of real text (licenses, man pages, copyright files; median '
       f'{statistics.median(x[4] for x in rows["full prefill"])} tokens) plus a question; '
       + ('the passages of a prompt are distinct, as a retriever returns them (identical documents count once; a '
          'passage sharing over 30% of its 8-word shingles with one already in the prompt is skipped). '
          if DISTINCT else 'passages taken in order, repeats included (BLEND_DISTINCT=0). '))
print(f'{time.strftime("%Y-%m-%d")}, {MODEL_NAME}, CPU backend, {os.cpu_count()} threads; ' + SET
      + '`kvfsctl eval` per prompt: '
      'TTFT from the cached chunks in memory to the first token\'s logits; KL(full || method) of the next-token '
      'distribution; top-1 and 32-token greedy agreement with full prefill.\n')
print('Full prefill agrees with itself by definition; its *self-agreement* below is the agreement of two '
      'equally valid full prefills: llama.cpp (the oracle) vs kvfs on the same prompt tokens '
      '(position-wise share of identical greedy tokens) -- the noise floor the blends are compared with. '
      '`query` (the default) = the rows the query attends to most over the reused cache (a first pass of '
      'the query alone through every layer), recomputed from layer 0; `fixed` = CacheBlend\'s reference '
      'selection (highest value deviation at layer 1, after layer 0 in full); `gradual` = the paper\'s gradual '
      'filtering (the recomputed share tapers from 1.5x to 0.5x the ratio across layers, same mean). '
      'TTFT here excludes reading chunks; through the mount see the pipeline section.\n')
print('| method | median TTFT s | speedup vs full | mean KL | KL / full reuse | top-1 agree | greedy-32 agree |')
print('|---|---|---|---|---|---|---|')
for name, v in rows.items():
    t = statistics.median(x[0] for x in v)
    kl = statistics.mean(x[1] for x in v)
    print(f'| {name} | {t:.3f} | {full_ttft / t:.2f}x | {kl:.4f} | {kl / reuse_kl if reuse_kl else 0:.2f} | '
          f'{100 * statistics.mean(x[2] for x in v):.0f}% | {100 * statistics.mean(x[3] for x in v):.0f}% |')
if self_rows:
    print(f'| full prefill self-agreement (llama.cpp vs kvfs, {len(self_rows)} prompts) | | | | | '
          f'{100 * statistics.mean(x[0] for x in self_rows):.0f}% | {100 * statistics.mean(x[1] for x in self_rows):.0f}% |')

# per prompt: full reuse's KL against each selection's at ratio 0.15 (issue 21: a blend never worse than reuse)
sel = [m for m in rows if m.startswith('blend 0.15')]
if sel:
    reuse = [x[1] for x in rows['full reuse']]
    print('\nPer prompt, KL(full || method): full reuse against blend 0.15; `worse` counts prompts where the blend '
          'is further from full prefill than reuse is.\n')
    print('| prompt | tokens | full reuse | ' + ' | '.join(sel) + ' |')
    print('|---|---|---|' + '---|' * len(sel))
    for i, r in enumerate(reuse):
        print(f'| {i + 1} | {rows["full reuse"][i][4]} | {r:.4f} | ' +
              ' | '.join(f'{rows[m][i][1]:.4f}' + (' (worse)' if rows[m][i][1] > r else '') for m in sel) + ' |')
    print('| worse than reuse | | | ' + ' | '.join(f'{sum(rows[m][i][1] > reuse[i] for i in range(len(reuse)))}/{len(reuse)}'
                                              for m in sel) + ' |')
