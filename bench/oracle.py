#!/usr/bin/env python3
"""Run build/oracle (bench/oracle.c) over the first BLEND_PROMPTS prompts
of BLEND_SET (rag_set.py) and print each mask's mean KL and its share of
plain reuse's.  MODEL as for bench/blend_eval.py (KVFS_ORACLE_MODEL).
The question runs through the full prefill's kernels (f32 products,
batch-invariant attention), so that "every row exact" reads 0."""
import os, statistics, subprocess, sys, tempfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rag_set import prompt_files
from paths import MODEL

ORACLE = os.environ.get('ORACLE', os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'build', 'oracle'))
RATIO = os.environ.get('BLEND_IDEAS_RATIO', '0.15')
# the question alone through the same kernels as inside the full prefill
# (ORACLE_SLICES=N: the arithmetic's own spread instead; oracle.c)
if not os.environ.get('ORACLE_SLICES'):
    os.environ.setdefault('KVFS_QMM_INT_ROWS', '0')
    os.environ.setdefault('KVFS_ATT_INVARIANT_MIN_Q', '2')
rows = {}
with tempfile.TemporaryDirectory() as td:
    for i, files, q in prompt_files(td):
        r = subprocess.run([ORACLE, MODEL, RATIO, q] + files, capture_output=True, text=True)
        if r.returncode:
            sys.exit(f'oracle failed: {r.stderr.strip()}')
        lines = r.stdout.strip().split('\n')
        print(f'prompt {i + 1}: {lines[0]}', file=sys.stderr)
        for ln in lines[1:]:
            label, kl = ln.rsplit(None, 1)
            rows.setdefault(label.strip(), []).append(float(kl))
            print(f'  {ln}', file=sys.stderr)
base = rows.get('reuse') or next(iter(rows.values()))  # ORACLE_SLICES: one line, no reuse
reuse = statistics.mean(base)
print(f'{len(base)} prompts, {os.path.basename(MODEL)}, budget ratio {RATIO}')
print('| what is exact | mean KL | x reuse | prompts better than reuse |')
print('|---|---|---|---|')
for label, v in rows.items():
    better = sum(a < b for a, b in zip(v, base))
    print(f'| {label} | {statistics.mean(v):.4f} | {statistics.mean(v) / reuse:.2f}x | {better}/{len(v)} |')
