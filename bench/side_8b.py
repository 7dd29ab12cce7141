#!/usr/bin/env python3
"""kvfs against llama.cpp on one GGUF, side by side, alternating rounds:
prefill tokens/s of 512 random token ids (`kvfsctl logits`, llama-cpp-python
`Llama.eval`, 2 threads each) and greedy decode tokens/s (16 steps; kvfsctl
generate's steps after its TTFT).  A quick form of bench/weights.py (no
2048-token prefill, no RSS).  usage: bench/side_8b.py MODEL.gguf [ROUNDS]"""
import json, subprocess, sys, time, random
M = sys.argv[1]
random.seed(5); ids = [random.randint(300, 40000) for _ in range(512)]
LL = r'''
import json, sys, time, llama_cpp
ids = json.loads(sys.stdin.read())
llm = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=1024, n_batch=512, n_ubatch=512, n_threads=2, n_threads_batch=2, verbose=False)
out = {}
llm.reset(); t = time.perf_counter(); llm.eval(ids); out['prefill512'] = len(ids) / (time.perf_counter() - t)
llm.reset(); llm.eval(ids[:8]); t = time.perf_counter()
for _ in range(16):
    tok = llm.sample(temp=0.0); llm.eval([tok])
out['decode'] = 16 / (time.perf_counter() - t)
print(json.dumps(out))
'''
for rnd in range(int(sys.argv[2]) if len(sys.argv) > 2 else 2):
    r = subprocess.run(['build/kvfsctl', 'logits', '-m', M, '--tokens-file', '-', '--top', '1'], input=' '.join(map(str, ids)), capture_output=True, text=True, check=True)
    k = json.loads(r.stdout); kp = 512 / k['prefill_s']
    r = subprocess.run(['build/kvfsctl', 'generate', '-m', M, '-p', 'The GNU General Public License is', '-n', '16'], capture_output=True, text=True, check=True)
    import re
    m = re.search(r'TTFT ([0-9.]+) s, 16 tokens in ([0-9.]+) s', r.stderr); kd = 15 / (float(m.group(2)) - float(m.group(1)))
    r = subprocess.run([sys.executable, '-c', LL, M], input=json.dumps(ids), capture_output=True, text=True, check=True)
    l = json.loads(r.stdout.strip().splitlines()[-1])
    print(f"round {rnd+1}: prefill 512 kvfs {kp:.1f} llama.cpp {l['prefill512']:.1f} tok/s ({kp/l['prefill512']:.2f}x); decode kvfs {kd:.2f} llama.cpp {l['decode']:.2f} tok/s ({kd/l['decode']:.2f}x)", flush=True)
