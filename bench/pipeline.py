"""Blend TTFT through a mounted kvfs with the layer-wise loader: chunks on
the disk tier (page cache dropped where permitted), in the RAM tier, and on
a simulated slow tier (sim_read_bw), against a full prefill of the same
prompt in the same run; plus the share of loading time hidden behind
recompute (from .kvfs/stats).  Prints a markdown section."""
import json, os, re, statistics, subprocess, sys, tempfile, time
sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', 'tests', 'oracle'))
from corpus import documents
from paths import ROOT, KVFSCTL, MODEL
KVFS = os.path.join(os.path.dirname(KVFSCTL), 'kvfs')
K = int(os.environ.get('PIPE_CHUNKS', '6'))
SIZE = int(os.environ.get('PIPE_CHUNK_BYTES', '2000'))
RUNS = int(os.environ.get('PIPE_RUNS', '3'))
SLOW = os.environ.get('PIPE_SLOW_BW', '50M')
# quantized chunk dtypes measured beside f16 (kvfs(5); issue 18): the same texts prefilled again as q8 / q4
DTYPES = [d for d in os.environ.get('PIPE_DTYPES', 'q8,q4').split(',') if d]
Q = '\n\nQuestion: What do these texts have in common?\nAnswer:'

def mount(store, mnt, opts, log):
    os.makedirs(mnt, exist_ok=True)
    p = subprocess.Popen([KVFS, '-f', '-o', f'store={store},model={MODEL},{opts}', mnt], stdout=log, stderr=log)
    for _ in range(600):
        if os.path.exists(os.path.join(mnt, '.kvfs', 'stats')):
            return p
        time.sleep(0.05)
    raise SystemExit(f'mount {mnt} failed')

def umount(mnt, p):
    subprocess.run(['fusermount3', '-u', mnt], check=True)
    p.wait(timeout=30)

def drop_caches():
    try:
        subprocess.run(['sync'], check=True)
        with open('/proc/sys/vm/drop_caches', 'w') as f:
            f.write('3\n')
        return True
    except OSError:
        return False

def blend(mnt, hashes, ratio, tag, drop=False, select=None):
    dropped = drop_caches() if drop else False
    recipe = '\n'.join(hashes) + f'\nratio={ratio}\n' + (f'select={select}\n' if select else '') + \
        'suffix=' + (Q + f' ({tag})').replace('\n', '\\n') + '\n'
    with open(os.path.join(mnt, 'blends', f'{tag}.recipe'), 'w') as f:
        f.write(recipe)
    t0 = time.monotonic()
    with open(os.path.join(mnt, 'blends', f'{tag}.kv'), 'rb') as f:
        while f.read(1 << 20):
            pass
    wall = time.monotonic() - t0
    last = json.load(open(os.path.join(mnt, '.kvfs', 'stats')))['blends']['last']
    return wall, last, dropped

with tempfile.TemporaryDirectory() as td:
    store, mnt = os.path.join(td, 'store'), os.path.join(td, 'mnt')
    log = open(os.path.join(td, 'kvfs.log'), 'w')
    docs = [t for _, t in documents(400) if len(t) > SIZE + 200]
    texts = [docs[(7 * k + 3) % len(docs)][:SIZE] for k in range(K)]
    p = mount(store, mnt, 'ram=0', log)
    hashes, qhashes = [], {d: [] for d in DTYPES}
    for k, text in enumerate(texts):
        f = os.path.join(td, f'c{k}.txt')
        open(f, 'w').write(text)
        out = subprocess.run([KVFSCTL, 'prefill', '-m', MODEL, '-M', mnt, f], capture_output=True, text=True, check=True)
        hashes.append(out.stdout.split()[0])
        for d in DTYPES:
            out = subprocess.run([KVFSCTL, 'prefill', '-m', MODEL, '--dtype', d, '-M', mnt, f], capture_output=True,
                                 text=True, check=True)
            qhashes[d].append(out.stdout.split()[0])
    stored = {d: sum(int(subprocess.run(['getfattr', '--only-values', '-n', 'user.kvfs.stored_size',
                                         os.path.join(mnt, 'chunks', h + '.kv')], capture_output=True,
                                        text=True).stdout) for h in hs)
              for d, hs in [('f16', hashes)] + list(qhashes.items())}
    n_tok = sum(int(subprocess.run(['getfattr', '--only-values', '-n', 'user.kvfs.tokens',
                                    os.path.join(mnt, 'chunks', h + '.kv')], capture_output=True, text=True).stdout)
                for h in hashes)
    rows = {}
    dropped_any = False
    for r in range(RUNS):
        wall, last, dropped = blend(mnt, hashes, 0.15, f'disk{r}', drop=True)
        dropped_any |= dropped
        rows.setdefault('blend 0.15, chunks on disk (page cache dropped)' if dropped else
                        'blend 0.15, chunks on disk', []).append((wall, last))
    for d in DTYPES:
        for r in range(RUNS):
            wall, last, dropped = blend(mnt, qhashes[d], 0.15, f'disk{d}{r}', drop=True)
            rows.setdefault(f'blend 0.15, {d} chunks on disk' + (' (page cache dropped)' if dropped else ''),
                            []).append((wall, last))
    for r in range(RUNS):
        rows.setdefault('blend 0.15, chunks on disk (page cache warm)', []).append(blend(mnt, hashes, 0.15, f'warm{r}')[:2])
    umount(mnt, p)
    p = mount(store, mnt, 'ram=2G', log)
    for h in hashes:  # fill the RAM tier
        open(os.path.join(mnt, 'chunks', h + '.kv'), 'rb').read()
    for r in range(RUNS):
        rows.setdefault('blend 0.15, chunks in the RAM tier', []).append(blend(mnt, hashes, 0.15, f'ram{r}')[:2])
    umount(mnt, p)
    p = mount(store, mnt, f'ram=0,sim_read_bw={SLOW}', log)
    for r in range(RUNS):
        rows.setdefault(f'blend 0.15, slow tier ({SLOW}B/s simulated)', []).append(blend(mnt, hashes, 0.15, f'slow{r}')[:2])
    for d in DTYPES:
        for r in range(RUNS):
            rows.setdefault(f'blend 0.15, {d} chunks, slow tier ({SLOW}B/s simulated)', []).append(
                blend(mnt, qhashes[d], 0.15, f'slow{d}{r}')[:2])
    for r in range(RUNS):
        rows.setdefault(f'blend 0.15 select=fixed, slow tier ({SLOW}B/s simulated)', []).append(
            blend(mnt, hashes, 0.15, f'slowfixed{r}', select='fixed')[:2])
    for r in range(RUNS):
        rows.setdefault(f'blend ratio=auto, slow tier ({SLOW}B/s simulated)', []).append(blend(mnt, hashes, 'auto', f'auto{r}')[:2])
    umount(mnt, p)
    # full prefill of the same text, same machine, same run
    allf = os.path.join(td, 'all.txt')
    open(allf, 'w').write(''.join(texts))
    full = []
    for r in range(RUNS):
        e = subprocess.run([KVFSCTL, 'generate', '-m', MODEL, '--prefix-file', allf, '-p', Q, '-n', '1'],
                           capture_output=True, text=True, check=True).stderr
        full.append(float(re.search(r'TTFT ([0-9.]+) s', e).group(1)))
t_full = statistics.median(full)
print('### Layer-wise loader: blend TTFT through the mount (`bench/pipeline.sh`, run by `make bench`)\n')
print(f'{time.strftime("%Y-%m-%d")}, SmolLM2-135M-Instruct Q4_1, CPU backend, {os.cpu_count()} threads; {K} chunks x '
      f'{SIZE} bytes of real text ({n_tok} chunk tokens) + a question, prefilled into a mounted kvfs; each blend '
      f'is a new recipe in blends/ read with `cat` (TTFT = open..EOF of the blended file: loading, blending, '
      f'writing the v1 file); medians of {RUNS}. Loading/waiting from `.kvfs/stats` '
      '(`blends.last`): *hidden* = share of the loader\'s time that overlapped recompute. '
      f'Full prefill: `kvfsctl generate --prefix-file` of the same text (TTFT to the first token). '
      'Blends use the default query selection unless a row says otherwise (ratio=auto selects the fixed way).\n')
print('| method | TTFT s | speedup vs full | ratio used | loading s | waited s | load hidden |')
print('|---|---|---|---|---|---|---|')
print(f'| full prefill | {t_full:.3f} | 1.00x | | | | |')
for name, v in rows.items():
    t = statistics.median(x[0] for x in v)
    med = lambda k: statistics.median(x[1][k] for x in v)
    print(f'| {name} | {t:.3f} | {t_full / t:.2f}x | {med("ratio"):.2f} | {med("loading_s"):.3f} | '
          f'{med("waiting_s"):.3f} | {100 * med("load_hidden"):.0f}% |')
print('\nStored bytes of the 6 chunks (`user.kvfs.stored_size`, zstd level 1 included): ' +
      ', '.join(f'{d} {b / 1e6:.1f} MB ({b / stored["f16"]:.2f}x)' for d, b in stored.items()) + '.')
if not dropped_any:
    print('\n(The page cache could not be dropped here: "disk" rows read from the page cache.)')
