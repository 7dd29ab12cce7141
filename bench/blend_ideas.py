#!/usr/bin/env python3
"""Training-free ideas from the literature, each measured against plain
kvfs on the same prompt set (issue 21): for every variant (kvfsctl eval
options), the mean KL from full prefill of full reuse and of blend R, the
blend's KL as a multiple of the *baseline's* full reuse (the bar a blend
must clear), how many prompts the blend is worse than that reuse, and top-1.

  BLEND_SET=short|long (rag_set.py), BLEND_PROMPTS, MODEL (paths.py) as
  for bench/blend_eval.py; IDEAS: variants separated by ';', each a label
  and its options as 'label=options' (default: the ones in kvfs(8));
  an option NAME=VALUE in upper case is set in kvfsctl's environment.
  BLEND_IDEAS_RATIO: the blend's ratio (default 0.15).
  BLEND_IDEAS_JSON: a file to write every prompt's figures to (per
  variant: tokens, KL reuse, KL blend, top-1), for per-prompt tables.
  BLEND_REF_CACHE: a directory where kvfsctl eval keeps full prefills and
  chunk caches (--ref-cache) across runs; by default one per run, so the
  variants after the first reuse them (the same figures, ~3-4x faster);
  its keys cover kvfsctl's build (and the KVFS_* kernel overrides), so
  another BUILD= shares nothing with it.

Prints one markdown table; progress on stderr.  KL does not depend on the
machine's load, so this may run beside other work."""
import json, os, shlex, statistics, subprocess, sys, tempfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rag_set import N, SHORT, prompt_files
from paths import KVFSCTL, MODEL

RATIO = os.environ.get('BLEND_IDEAS_RATIO', '0.15')
DEFAULT = ('kvfs (floor off)=--no-floor;'
           'votes from every layer=--no-floor --vote-from 0;'
           'position prior 0.5=--no-floor --pos-prior 0.5;'
           'shared prefix: system prompt=--no-floor --shared-prefix "<|im_start|>system\nYou are a helpful AI '
           'assistant.<|im_end|>\n<|im_start|>user\n"')
variants = []
for item in os.environ.get('IDEAS', DEFAULT).split(';'):
    label, _, opts = item.partition('=')
    variants.append((label.strip(), shlex.split(opts)))

# per variant, per prompt: (KL reuse, KL blend, top-1 blend)
res = {label: [] for label, _ in variants}
ntok = {}
with tempfile.TemporaryDirectory() as td:
    ref_cache = os.environ.get('BLEND_REF_CACHE') or os.path.join(td, 'ref')
    prompts = list(prompt_files(td))
    for i, (p, files, q) in enumerate(prompts):
        for label, opts in variants:
            # options of the form NAME=VALUE (upper case) go to the environment
            env = dict(os.environ, **dict(o.split('=', 1) for o in opts if o.split('=')[0].isupper()))
            args = [o for o in opts if not o.split('=')[0].isupper()]
            r = subprocess.run([KVFSCTL, 'eval', '-m', MODEL, '--json', '--ratio', '0,' + RATIO, '--select', 'query',
                                '--no-prefix', '--greedy', '1', '--ref-cache', ref_cache, '--query', q] + args + files,
                               capture_output=True, text=True, env=env)
            if r.returncode:
                sys.exit(f'{label}: kvfsctl eval failed: {r.stderr.strip()}')
            out = json.loads(r.stdout)
            d = {x['method']: x for x in out['results']}
            blend = next(v for k, v in d.items() if k.startswith('blend'))
            res[label].append((d['full reuse']['kl'], blend['kl'], blend['top1']))
            ntok.setdefault(i, out.get('tokens'))
        print(f'prompt {i + 1}/{len(prompts)}', file=sys.stderr)

if os.environ.get('BLEND_IDEAS_JSON'):
    with open(os.environ['BLEND_IDEAS_JSON'], 'w') as f:
        json.dump({'set': 'short' if SHORT else 'long', 'model': os.path.basename(MODEL), 'ratio': RATIO,
                   'variants': [[label, opts] for label, opts in variants], 'tokens': [ntok.get(i) for i in range(len(prompts))],
                   'results': {label: [list(x) for x in rows] for label, rows in res.items()}}, f, indent=1)
base = [x[0] for x in res[variants[0][0]]]  # the baseline's full reuse: the bar
base_mean = statistics.mean(base)
print(f'{len(base)} prompts ({"short" if SHORT else "long"} set), {os.path.basename(MODEL)}, blend ratio {RATIO}, '
      f'query selection; KL(full prefill || method) of the next token; "x bar": mean KL / the first row\'s full '
      f'reuse mean KL ({base_mean:.4f}); "worse": prompts where the blend\'s KL exceeds the first row\'s full '
      f'reuse KL.\n')
print(f'| variant | KL full reuse | KL blend {RATIO} | blend x bar | worse | top-1 blend |')
print('|---|---|---|---|---|---|')
for label, _ in variants:
    rows = res[label]
    kr, kb = statistics.mean(x[0] for x in rows), statistics.mean(x[1] for x in rows)
    worse = sum(x[1] > b for x, b in zip(rows, base))
    top1 = sum(x[2] for x in rows)
    print(f'| {label} | {kr:.4f} | {kb:.4f} | {kb / base_mean:.2f}x | {worse}/{len(rows)} | {top1}/{len(rows)} |')
