#!/usr/bin/env python3
"""How a blend's KL falls with the ratio: the served blend (query selection,
the floor, the chunk shift) at each ratio over one prompt set, one
`kvfsctl eval --json --no-prefix --greedy 1 --ratio R,...` per prompt.
Prints per prompt plain reuse's KL and each ratio's as a share of it, then
per ratio the mean KL (and as a share of reuse's mean), the prompts worse
than reuse, top-1 agreement and the median speedup over the prompts (full
prefill TTFT / blend TTFT, one run each: for TTFT side by side use
bench/side_ttft.py).

  BLEND_SET=short|long, BLEND_PROMPTS (rag_set.py), KVFS_ORACLE_MODEL
  (paths.py: default SmolLM2); SWEEP_RATIOS (default 0.15,0.3,0.5,0.7);
  SWEEP_ARGS: more kvfsctl eval options (e.g. '--shift 0')."""
import json, os, shlex, statistics, subprocess, sys, tempfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rag_set import SHORT, prompt_files
from paths import KVFSCTL, MODEL

RATIOS = os.environ.get('SWEEP_RATIOS', '0.15,0.3,0.5,0.7')
ARGS = shlex.split(os.environ.get('SWEEP_ARGS', ''))

rows = []
with tempfile.TemporaryDirectory() as td:
    for i, files, q in prompt_files(td):
        r = subprocess.run([KVFSCTL, 'eval', '-m', MODEL, '--json', '--ratio', RATIOS, '--no-prefix', '--greedy', '1']
                           + ARGS + ['--query', q] + files, capture_output=True, text=True)
        if r.returncode:
            sys.exit(f'prompt {i + 1}: kvfsctl eval failed: {r.stderr.strip()}')
        d = {x['method']: x for x in json.loads(r.stdout)['results']}
        rows.append(d)
        reuse = d['full reuse']['kl']
        print(f'prompt {i + 1}: reuse KL {reuse:.4g}; ' + ', '.join(
            f'{k} {v["kl"] / reuse if reuse > 0 else 0:.3f}x' for k, v in d.items() if k.startswith('blend')),
            file=sys.stderr)

methods = [k for k in rows[0] if k.startswith('blend')]
mean_reuse = statistics.mean(d['full reuse']['kl'] for d in rows)
print(f'{len(rows)} prompts ({"short" if SHORT else "long"} set), {os.path.basename(MODEL)}, '
      f'kvfsctl eval {" ".join(ARGS) or "(served options)"}\n')
print('| method | mean KL | x plain reuse | worse than reuse | top-1 = full prefill | median speedup |')
print('|---|---|---|---|---|---|')
print(f'| full reuse | {mean_reuse:.4f} | 1.00x | | {sum(d["full reuse"]["top1"] for d in rows)}/{len(rows)} | |')
for k in methods:
    mean = statistics.mean(d[k]['kl'] for d in rows)
    worse = sum(d[k]['kl'] > d['full reuse']['kl'] for d in rows)
    top1 = sum(bool(d[k]['top1']) for d in rows)
    speed = statistics.median(d['full prefill']['ttft_s'] / d[k]['ttft_s'] for d in rows if d[k]['ttft_s'] > 0)
    print(f'| {k} | {mean:.4f} | {mean / mean_reuse:.3f}x | {worse}/{len(rows)} | {top1}/{len(rows)} | {speed:.2f}x |')
