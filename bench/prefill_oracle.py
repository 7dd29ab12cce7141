"""Prefill throughput of kvfs vs llama.cpp (llama-cpp-python, built from
source) on the same GGUF, same token ids, same thread count, in one run."""
import json, os, statistics, subprocess, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', 'tests', 'oracle'))
from corpus import documents
import llama_cpp

from paths import ROOT, KVFSCTL, MODEL
THREADS = os.cpu_count()
RUNS = int(os.environ.get('RUNS', '3'))
llm = llama_cpp.Llama(model_path=MODEL, n_ctx=4096, n_batch=2048, n_ubatch=512, n_threads=THREADS,
                      n_threads_batch=THREADS, verbose=False)
text = ''.join(t for _, t in documents(40))
ids_all = llm.tokenize(text.encode(), add_bos=False, special=False)
rows = []
for n in (128, 512, 2048):
    ids = ids_all[:n]
    ours, ref = [], []
    for _ in range(RUNS):
        r = subprocess.run([KVFSCTL, 'logits', '-m', MODEL, '--tokens-file', '-', '-t', str(THREADS)],
                           input=' '.join(map(str, ids)), capture_output=True, text=True, check=True)
        ours.append(json.loads(r.stdout)['prefill_s'])
        llm.reset()
        t = time.perf_counter()
        llm.eval(ids)
        ref.append(time.perf_counter() - t)
    o, l = statistics.median(ours), statistics.median(ref)
    rows.append((n, n / o, n / l, l / o))
def sgemm(core):
    env = dict(os.environ, KVFS_BLAS_CORE=core)
    return subprocess.run(['/tmp/kvfs-sgemm', '512', '2048'], capture_output=True, text=True, env=env).stdout.strip()
# auto (cpuid) is what kvfs uses; the others show what the choice is worth.
out = '\n'.join(f'KVFS_BLAS_CORE={c}: ' + sgemm(c).replace('\n', '; ') for c in ('auto', 'SkylakeX', 'Haswell', 'Prescott'))
print('### Prefill throughput (`bench/prefill.sh`, run by `make bench`)\n')
print(f'{time.strftime("%Y-%m-%d")}, SmolLM2-135M-Instruct Q4_1, {THREADS} threads, medians of {RUNS} runs; '
      'llama.cpp = llama-cpp-python ' + llama_cpp.__version__ + ' built from source (GGML_NATIVE), `Llama.eval` of the same token ids.\n')
print('| tokens | kvfs tokens/s | llama.cpp tokens/s | ratio kvfs / llama.cpp |')
print('|---|---|---|---|')
for n, a, b, r in rows:
    print(f'| {n} | {a:.0f} | {b:.0f} | {r:.2f}x |')
print(f'\nBLAS path (OpenBLAS loaded by kvfs with the kernel chosen by cpuid; KVFS_BLAS_CORE overrides), sgemm (n x 576) . (576 x 1536), {THREADS} threads:\n')
print('```\n' + out + '\n```')
