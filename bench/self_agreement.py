"""Greedy self-agreement per prompt: llama.cpp (the oracle) vs kvfs full
prefill, next to blend 0.15 (the default selection), on the blend benchmark's
prompt set.  Prints one line per prompt and the means; run with the python
that has llama_cpp (tools/install-oracle.sh):  python3 bench/self_agreement.py"""
import json, os, statistics, subprocess, sys, tempfile
sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', 'tests', 'oracle'))
from corpus import rag_passages
from paths import KVFSCTL, MODEL
import numpy as np
import llama_cpp

N = int(os.environ.get('BLEND_PROMPTS', '30'))
GREEDY = 32
llm = llama_cpp.Llama(model_path=MODEL, n_ctx=8192, n_batch=512, n_threads=os.cpu_count(), logits_all=True,
                      verbose=False)
questions = ['What does this text allow you to do?', 'Who is responsible for the software?',
             'Summarize the conditions in one sentence.', 'Which command or option is described?']
prompts = rag_passages(N, 6, 2000, distinct=True)
out = []
with tempfile.TemporaryDirectory() as td:
    for p in range(N):
        files = []
        for k, passage in enumerate(prompts[p]):
            f = os.path.join(td, f'c{k}.txt')
            open(f, 'w').write(passage)
            files.append(f)
        q = '\n\nQuestion: ' + questions[p % len(questions)] + '\nAnswer:'
        r = subprocess.run([KVFSCTL, 'eval', '-m', MODEL, '--json', '--no-prefix', '--greedy', str(GREEDY), '--ratio',
                            '0.15', '--query', q] + files, capture_output=True, text=True, check=True)
        d = json.loads(r.stdout)
        llm.reset()
        llm.eval(d['prompt_ids'])
        g = []
        for _ in range(GREEDY):
            t = int(np.argmax(llm.scores[llm.n_tokens - 1]))
            g.append(t)
            llm.eval([t])
        blend = {x['method']: x for x in d['results']}['blend 0.15']
        self_agree = sum(a == b for a, b in zip(g, d['full_greedy'])) / GREEDY
        out.append((g[0] == d['full_greedy'][0], self_agree, blend['top1'], blend['greedy_agree']))
        print(f'prompt {p}: {len(d["prompt_ids"])} tokens, self {self_agree:.2f}, blend {blend["greedy_agree"]:.2f}',
              flush=True)
print(f'self-agreement: top-1 {100 * statistics.mean(x[0] for x in out):.0f}%, greedy '
      f'{100 * statistics.mean(x[1] for x in out):.1f}%, all {GREEDY} identical on {sum(x[1] == 1 for x in out)} of {N}')
print(f'blend 0.15:     top-1 {100 * statistics.mean(x[2] for x in out):.0f}%, greedy '
      f'{100 * statistics.mean(x[3] for x in out):.1f}%, all {GREEDY} identical on {sum(x[3] == 1 for x in out)} of {N}')
