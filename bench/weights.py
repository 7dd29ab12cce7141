"""Weights kept encoded (the GGUF's own blocks, decoded as they are
multiplied) against decoded to f32 at load (KVFS_F32_WEIGHTS=1), and
llama.cpp (llama-cpp-python, built from source) on the same GGUF, side by
side in one run: resident memory, prefill tokens/s at 512 and 2048 tokens,
decode tokens/s.  Medians of RUNS runs, the three alternating."""
import json, os, re, resource, statistics, subprocess, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', 'tests', 'oracle'))
from corpus import documents
from paths import KVFSCTL, MODEL

THREADS = os.cpu_count()
RUNS = int(os.environ.get('RUNS', '3'))
DECODE = int(os.environ.get('WEIGHTS_DECODE', '64'))
# WEIGHTS_F32=0 leaves out the f32 variant (an 8B model decoded to f32 is 32 GB)
F32 = os.environ.get('WEIGHTS_F32', '1') != '0'
LLAMA = r'''
import json, os, resource, sys, time
import llama_cpp
ids = json.loads(sys.stdin.read()); n_dec = int(sys.argv[2]); th = int(sys.argv[3])
llm = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=4096, n_batch=2048, n_ubatch=512, n_threads=th,
                      n_threads_batch=th, verbose=False)
out = {}
for n in (512, 2048):
    llm.reset(); t = time.perf_counter(); llm.eval(ids[:n]); out[f'prefill{n}'] = n / (time.perf_counter() - t)
llm.reset(); llm.eval(ids[:8]); t = time.perf_counter()
for _ in range(n_dec):
    tok = llm.sample(temp=0.0); llm.eval([tok])
out['decode'] = n_dec / (time.perf_counter() - t)
out['rss_mb'] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
'''


def kvfs(env_f32, ids):
    env = dict(os.environ, KVFS_F32_WEIGHTS='1' if env_f32 else '0')
    out = {}
    for n in (512, 2048):
        r = subprocess.run(['/usr/bin/time', '-f', '%M', KVFSCTL, 'logits', '-m', MODEL, '--tokens-file', '-',
                            '-t', str(THREADS)], input=' '.join(map(str, ids[:n])), capture_output=True, text=True,
                           check=True, env=env)
        out[f'prefill{n}'] = n / json.loads(r.stdout)['prefill_s']
        if n == 512:
            out['rss_mb'] = int(r.stderr.strip().splitlines()[-1]) / 1024
    r = subprocess.run([KVFSCTL, 'generate', '-m', MODEL, '-p', 'The GNU General Public License is', '-n', str(DECODE),
                        '-t', str(THREADS)], capture_output=True, text=True, check=True, env=env)
    # decode steps only: the first token comes with the prompt's prefill (TTFT), as llama.cpp's timing below
    m = re.search(r'TTFT ([0-9.]+) s, (\d+) tokens in ([0-9.]+) s', r.stderr)
    out['decode'] = (int(m.group(2)) - 1) / (float(m.group(3)) - float(m.group(1)))
    return out


def llama(ids):
    r = subprocess.run([sys.executable, '-c', LLAMA, MODEL, str(DECODE), str(THREADS)], input=json.dumps(ids),
                       capture_output=True, text=True, check=True)
    return json.loads(r.stdout)


text = ''.join(t for _, t in documents(40))
ids = [int(t) for t in subprocess.run([KVFSCTL, 'tokenize', '-m', MODEL, '-'], input=text, capture_output=True,
                                      text=True, check=True).stdout.split()]
runs = {'encoded': [], 'f32': [], 'llama.cpp': []} if F32 else {'encoded': [], 'llama.cpp': []}
for _ in range(RUNS):
    runs['encoded'].append(kvfs(False, ids))
    if F32:
        runs['f32'].append(kvfs(True, ids))
    runs['llama.cpp'].append(llama(ids))
med = {k: {f: statistics.median(r[f] for r in v) for f in v[0]} for k, v in runs.items()}
size_mb = os.path.getsize(MODEL) / 2**20
print('### Weights kept encoded (`bench/weights.py`, run by `make bench`)\n')
print(f'{time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, {THREADS} cores, {os.path.basename(MODEL)} '
      f'({size_mb:.0f} MiB), medians of {RUNS} alternating runs. kvfs with its weights kept in the file\'s encoding '
      '(default), kvfs with them decoded to f32 at load (`KVFS_F32_WEIGHTS=1`), and llama.cpp (llama-cpp-python '
      'built from source, `Llama.eval`) on the same token ids. RSS: peak resident memory of a 512-token prefill '
      f'(process total: model, KV, scratch); decode: {DECODE} greedy tokens after an 8-token prompt.\n')
print('| | RSS MiB | RSS / file | prefill 512 tok/s | prefill 2048 tok/s | decode tok/s |')
print('|---|---|---|---|---|---|')
def rate(x):
    return f'{x:.0f}' if x >= 100 else f'{x:.1f}'


for k, v in med.items():
    print(f'| {k} | {v["rss_mb"]:.0f} | {v["rss_mb"] / size_mb:.2f}x | {rate(v["prefill512"])} | '
          f'{rate(v["prefill2048"])} | {v["decode"]:.1f} |')
e, l = med['encoded'], med['llama.cpp']
f = med.get('f32')
print('\n' + (f'Encoded against f32: prefill {e["prefill512"] / f["prefill512"]:.2f}x / {e["prefill2048"] / f["prefill2048"]:.2f}x, '
              f'decode {e["decode"] / f["decode"]:.2f}x, RSS {e["rss_mb"] / f["rss_mb"]:.2f}x. ' if f else '') +
      f'Encoded against llama.cpp: prefill '
      f'{e["prefill512"] / l["prefill512"]:.2f}x / {e["prefill2048"] / l["prefill2048"]:.2f}x, decode '
      f'{e["decode"] / l["decode"]:.2f}x, RSS {e["rss_mb"] / l["rss_mb"]:.2f}x.')
