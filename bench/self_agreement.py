"""Greedy self-agreement per prompt: llama.cpp (the oracle) vs kvfs full
prefill, next to blend 0.15 (the default selection), on the blend
benchmark's prompt set (bench/rag_set.py, the same BLEND_* variables).
Prints one line per prompt and the means; run with the python that has
llama_cpp (tools/install-oracle.sh):  python3 bench/self_agreement.py"""
import json, os, statistics, subprocess, sys, tempfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rag_set import N, prompt_files, open_llama, greedy_llama
from paths import KVFSCTL, MODEL

GREEDY = 32
llm = open_llama()
out = []
with tempfile.TemporaryDirectory() as td:
    for p, files, q in prompt_files(td):
        r = subprocess.run([KVFSCTL, 'eval', '-m', MODEL, '--json', '--no-prefix', '--greedy', str(GREEDY), '--ratio',
                            '0.15', '--query', q] + files, capture_output=True, text=True, check=True)
        d = json.loads(r.stdout)
        g = greedy_llama(llm, d['prompt_ids'], GREEDY)
        blend = {x['method']: x for x in d['results']}['blend 0.15']
        self_agree = sum(a == b for a, b in zip(g, d['full_greedy'])) / GREEDY
        out.append((g[0] == d['full_greedy'][0], self_agree, blend['top1'], blend['greedy_agree']))
        print(f'prompt {p}: {len(d["prompt_ids"])} tokens, self {self_agree:.2f}, blend {blend["greedy_agree"]:.2f}',
              flush=True)
print(f'self-agreement: top-1 {100 * statistics.mean(x[0] for x in out):.0f}%, greedy '
      f'{100 * statistics.mean(x[1] for x in out):.1f}%, all {GREEDY} identical on {sum(x[1] == 1 for x in out)} of {N}')
print(f'blend 0.15:     top-1 {100 * statistics.mean(x[2] for x in out):.0f}%, greedy '
      f'{100 * statistics.mean(x[3] for x in out):.1f}%, all {GREEDY} identical on {sum(x[3] == 1 for x in out)} of {N}')
