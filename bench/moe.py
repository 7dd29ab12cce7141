"""Mixture of experts and latent attention (bench/moe.sh): kvfs's prefill
tokens/s against llama.cpp's (llama-cpp-python built from source) on the
same synthetic GGUF, same token ids, same threads, alternating in one run;
then a blend's TTFT at MOE_RATIO (default 0.15) against kvfs's own full
prefill of the same prompt (kvfsctl eval).

The files are written by kvfsctl mkmodel (random F32 weights, byte-level
vocabulary) and quantized by llama.cpp to Q4_K_M, once, into MOE_DIR
(default $BUILD/moe-models):
  qwen3moe: a small Qwen3 MoE, 12 layers, 2048 wide, 16 heads (4 KV),
            16 experts of width 768, 4 routed (1.06B parameters, 4 routed
            of 16 as Qwen3-30B-A3B routes 8 of 128)
  deepseek2: a scaled-down DeepSeek-V2-Lite (MLA with a latent of 384 and a
            rotary key part of 32, one leading dense layer, 32 experts of
            width 512, 4 routed, one shared expert), 12 layers, 1536 wide,
            12 heads (0.93B parameters)
Wall-clock medians are the figures; on a shared machine the CPU seconds
(user + sys) of each side are printed too: kvfs's are its whole process
(model load included), llama.cpp's its eval alone."""
import ctypes, json, os, resource, statistics, subprocess, sys, tempfile, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'tests', 'oracle'))
from corpus import documents
from paths import ROOT, BUILD, KVFSCTL
import llama_cpp

THREADS = int(os.environ.get('THREADS') or os.cpu_count())
RUNS = int(os.environ.get('RUNS', '3'))
TOKENS = [int(n) for n in os.environ.get('MOE_TOKENS', '512').split(',') if n]  # empty: the blend rows alone
RATIO = os.environ.get('MOE_RATIO', '0.15')
BLEND_PROMPTS = int(os.environ.get('MOE_BLEND_PROMPTS', '3'))
CHUNKS, CHUNK_BYTES = 4, int(os.environ.get('MOE_CHUNK_BYTES', '300'))
DIR = os.environ.get('MOE_DIR') or os.path.join(BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD),
                                                'moe-models')
MODELS = {
    'qwen3moe': ['--arch', 'qwen3moe', '--layers', '12', '--embd', '2048', '--heads', '16', '--kv-heads', '4',
                 '--ff', '2048', '--experts', '16', '--experts-used', '4', '--expert-ff', '768'],
    'deepseek2': ['--arch', 'deepseek2', '--layers', '12', '--embd', '1536', '--heads', '12', '--kv-heads', '12',
                  '--ff', '4096', '--experts', '32', '--experts-used', '4', '--expert-ff', '512'],
}
WHICH = os.environ.get('MOE_MODELS', 'qwen3moe,deepseek2').split(',')


def cpu_model():
    for line in open('/proc/cpuinfo'):
        if line.startswith('model name'):
            return line.split(':', 1)[1].strip()
    return 'unknown CPU'


def model_file(name):
    """The Q4_K_M file of name, written once (F32 by mkmodel, quantized by llama.cpp, the F32 removed)."""
    path = os.path.join(DIR, f'{name}-q4_k_m.gguf')
    if os.path.exists(path):
        return path
    os.makedirs(DIR, exist_ok=True)
    f32 = os.path.join(DIR, f'{name}-f32.gguf')
    print(f'writing {path} ...', file=sys.stderr)
    subprocess.run([KVFSCTL, 'mkmodel', '-o', f32, *MODELS[name], '--seed', '3'], check=True)
    qp = llama_cpp.llama_model_quantize_default_params()
    qp.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M
    qp.nthread = os.cpu_count()
    rc = llama_cpp.llama_model_quantize(f32.encode(), (path + '.tmp').encode(), ctypes.byref(qp))
    os.unlink(f32)
    if rc != 0:
        sys.exit(f'llama.cpp could not quantize {f32}')
    os.rename(path + '.tmp', path)
    return path


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


text = ''.join(t for _, t in documents(40)).encode()
cpu = cpu_model()
prefill_rows, blend_rows = [], []
for name in WHICH:
    path = model_file(name)
    size_gb = os.path.getsize(path) / 1e9
    llm = TOKENS and llama_cpp.Llama(model_path=path, n_ctx=max(TOKENS) + 64, n_batch=2048, n_ubatch=512, n_threads=THREADS,
                          n_threads_batch=THREADS, verbose=False)
    for n in TOKENS:
        ids = list(text[:n])  # byte vocabulary: a token is a byte
        ours, ref, ours_cpu, ref_cpu = [], [], [], []
        for _ in range(RUNS):
            c0 = children_cpu()
            r = subprocess.run([KVFSCTL, 'logits', '-m', path, '--tokens-file', '-', '-t', str(THREADS)],
                               input=' '.join(map(str, ids)), capture_output=True, text=True, check=True)
            ours.append(json.loads(r.stdout)['prefill_s'])
            ours_cpu.append(children_cpu() - c0)
            llm.reset()
            c0, t = time.process_time(), time.perf_counter()
            llm.eval(ids)
            ref.append(time.perf_counter() - t)
            ref_cpu.append(time.process_time() - c0)
        o, l = statistics.median(ours), statistics.median(ref)
        prefill_rows.append((name, size_gb, n, n / o, n / l, l / o, statistics.median(ours_cpu),
                             statistics.median(ref_cpu)))
        print(f'{name} {n}: kvfs {ours} llama.cpp {ref}', file=sys.stderr)
    del llm
    # blend TTFT vs full prefill: CHUNKS passages of CHUNK_BYTES bytes and a question, kvfsctl eval
    full, blend, reuse, ntok, full_cpu, blend_cpu = [], [], [], [], [], []
    with tempfile.TemporaryDirectory() as td:
        for p in range(BLEND_PROMPTS):
            files = []
            for c in range(CHUNKS):
                at = (p * CHUNKS + c) * CHUNK_BYTES
                f = os.path.join(td, f'c{c}.txt')
                open(f, 'wb').write(text[at:at + CHUNK_BYTES])
                files.append(f)
            r = subprocess.run([KVFSCTL, 'eval', '-m', path, '--json', '--ratio', RATIO, '--greedy', '1',
                                '--no-prefix', '-t', str(THREADS), '--query', 'Which license is this?', *files],
                               capture_output=True, text=True, check=True)
            d = json.loads(r.stdout)
            res = {x['method']: x['ttft_s'] for x in d['results']}
            cpus = {x['method']: x['cpu_s'] for x in d['results']}
            full.append(res['full prefill'])
            full_cpu.append(cpus['full prefill'])
            reuse.append(res['full reuse'])
            which = next(k for k in res if k.startswith('blend') or k.startswith('query'))
            blend.append(res[which])
            blend_cpu.append(cpus[which])
            ntok.append(d['tokens'])
            print(f'{name} blend prompt {p + 1}: {res}', file=sys.stderr)
    if full:
        f, b = statistics.median(full), statistics.median(blend)
        fc, bc = statistics.median(full_cpu), statistics.median(blend_cpu)
        blend_rows.append((name, int(statistics.median(ntok)), f, statistics.median(reuse), b, b / f, fc, bc, bc / fc))

print('### Mixture of experts and latent attention (`bench/moe.sh`, run by `make bench`)\n')
print(f'{time.strftime("%Y-%m-%d")}, {cpu}, {THREADS} threads, medians of {RUNS} runs alternating kvfs and '
      f'llama.cpp (llama-cpp-python {llama_cpp.__version__} built from source, `Llama.eval` of the same token '
      'ids); synthetic Q4_K_M files by `kvfsctl mkmodel` quantized by llama.cpp (shapes in bench/moe.py): '
      'qwen3moe = 16 experts, 4 routed, 1.06B parameters; deepseek2 = MLA, 32 experts, 4 routed, one shared, '
      '0.93B. CPU s = user + sys seconds (kvfs: its whole process, load included; llama.cpp: its eval).\n')
print('| CPU | model | file GB | tokens | kvfs tokens/s | llama.cpp tokens/s | kvfs / llama.cpp | '
      'kvfs CPU s | llama.cpp CPU s |')
print('|---|---|---|---|---|---|---|---|---|')
for name, gb, n, a, b, r, oc, lc in prefill_rows:
    print(f'| {cpu} | {name} | {gb:.2f} | {n} | {a:.0f} | {b:.0f} | {r:.2f}x | {oc:.2f} | {lc:.2f} |')
if blend_rows:
    print(f'\nBlend TTFT at ratio {RATIO} (query selection, kvfs\'s floor) against kvfs\'s full prefill of the same '
          f'prompt, `kvfsctl eval` medians over {BLEND_PROMPTS} prompts of {CHUNKS} passages x {CHUNK_BYTES} bytes '
          '(byte vocabulary: one token a byte) and a question; CPU s = the process\'s CPU seconds (every thread) '
          'during each, medians:\n')
    print('| CPU | model | prompt tokens | full prefill s | full reuse (ratio 0) s | blend s | blend / full | '
          'full prefill CPU s | blend CPU s | blend / full (CPU) |')
    print('|---|---|---|---|---|---|---|---|---|---|')
for name, n, f, z, b, r, fc, bc, rc in blend_rows:
    print(f'| {cpu} | {name} | {n} | {f:.2f} | {z:.2f} | {b:.2f} | {r:.2f} | {fc:.2f} | {bc:.2f} | {rc:.3f} |')
print(f'\nload: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} (1, 5, 15 min) at the end')
