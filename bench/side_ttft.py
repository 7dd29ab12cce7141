#!/usr/bin/env python3
"""Blend TTFT of kvfsctl eval variants side by side on the same prompts:
each prompt runs every variant in turn, REPS times (alternating, so a slow
moment of the machine falls on all of them), each run timing its own full
prefill too.  Prints, per variant, the median blend TTFT, the median full
prefill TTFT and the median of the per-run speedups (full / blend).

  BLEND_SET=short|long, BLEND_PROMPTS (rag_set.py), MODEL (paths.py);
  IDEAS: 'label=options;...' as for bench/blend_ideas.py (default: the
  served blend alone; an option NAME=VALUE in upper case goes to kvfsctl's
  environment, and KVFSCTL=PATH runs another kvfsctl binary: two builds side
  by side); BLEND_IDEAS_RATIO (default 0.15); REPS (default 2).

Timings need a quiet machine: run nothing beside it."""
import json, os, shlex, statistics, subprocess, sys, tempfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rag_set import N, SHORT, prompt_files
from paths import KVFSCTL, MODEL

RATIO = os.environ.get('BLEND_IDEAS_RATIO', '0.15')
REPS = int(os.environ.get('REPS', '2'))
variants = []
for item in os.environ.get('IDEAS', 'served=').split(';'):
    label, _, opts = item.partition('=')
    variants.append((label.strip(), shlex.split(opts)))

runs = {label: [] for label, _ in variants}  # (blend ttft, full ttft)
with tempfile.TemporaryDirectory() as td:
    prompts = list(prompt_files(td))
    for i, (p, files, q) in enumerate(prompts):
        for rep in range(REPS):
            for label, opts in variants:
                env = dict(o.split('=', 1) for o in opts if o.split('=')[0].isupper())
                args = [o for o in opts if not o.split('=')[0].isupper()]
                binary = env.pop('KVFSCTL', KVFSCTL)
                r = subprocess.run([binary, 'eval', '-m', MODEL, '--json', '--ratio', RATIO, '--no-prefix', '--greedy',
                                    '1', '--query', q] + args + files, capture_output=True, text=True,
                                   env=dict(os.environ, **env))
                if r.returncode:
                    sys.exit(f'{label}: kvfsctl eval failed: {r.stderr.strip()}')
                d = {x['method']: x for x in json.loads(r.stdout)['results']}
                blend = next(v for k, v in d.items() if k.startswith('blend'))
                runs[label].append((blend['ttft_s'], d['full prefill']['ttft_s']))
        # per prompt, so that a run cut short still says what it measured
        print(f'prompt {i + 1}/{len(prompts)}: ' + ', '.join(
            f'{label} {runs[label][-1][0]:.3f} s (full {runs[label][-1][1]:.3f} s)' for label, _ in variants),
            file=sys.stderr)

print(f'{len(prompts)} prompts ({"short" if SHORT else "long"} set), {os.path.basename(MODEL)}, ratio {RATIO}, '
      f'{REPS} alternating repetitions per prompt; medians over all runs.\n')
print('| variant | blend TTFT s | full prefill TTFT s | speedup (full / blend, per run) |')
print('|---|---|---|---|')
for label, _ in variants:
    b = [x[0] for x in runs[label]]
    f = [x[1] for x in runs[label]]
    s = [x[1] / x[0] for x in runs[label] if x[0] > 0]
    print(f'| {label} | {statistics.median(b):.3f} | {statistics.median(f):.3f} | {statistics.median(s):.2f}x |')
