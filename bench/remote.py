"""Remote tier benchmark on a throwaway Ceph cluster (tests/ceph/cluster.sh):
read throughput of a chunk that only RADOS holds, through kvfs (fetch,
verify, fill the local tiers, read) vs plain librados reads of the same
object, side by side; and blend TTFT with the chunks only in RADOS vs on the
local disk vs in the RAM tier vs a full prefill.  Run with the system
python (it has the rados module).  Prints a markdown section."""
import json, os, re, statistics, subprocess, sys, tempfile, time
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUILD = os.environ.get('BUILD', 'build')
BUILD = BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD)
KVFS, KVFSCTL = os.path.join(BUILD, 'kvfs'), os.path.join(BUILD, 'kvfsctl')
MODEL = os.path.join(ROOT, 'models', 'SmolLM2-135M-Instruct.Q4_1.gguf')
RUNS = int(os.environ.get('REMOTE_RUNS', '5'))
TOKENS = int(os.environ.get('REMOTE_TOKENS', '4096'))  # synthetic chunk: 64 MiB at 32 layers (objects <= 128 MiB)
import rados

def sh(*a, **k):
    return subprocess.run(a, check=True, capture_output=True, text=True, **k).stdout

td = tempfile.mkdtemp(prefix='kvfs-bench-remote.')
cl = os.path.join(td, 'ceph')
env = dict(os.environ, MONPORT=os.environ.get('MONPORT', '40500'))
r = subprocess.run([os.path.join(ROOT, 'tests/ceph/cluster.sh'), 'start', cl, 'bluestore', '3'], env=env,
                   capture_output=True, text=True)
if r.returncode:
    print(f'### Remote tier\n\nskipped: no test cluster ({r.stdout.strip()} {r.stderr.strip()[-200:]})')
    sys.exit(0)
conf = os.path.join(cl, 'ceph.conf')
mounts = []

def mount(name, opts):
    mnt, store = os.path.join(td, name + '.mnt'), os.path.join(td, name + '.store')
    os.makedirs(mnt, exist_ok=True)
    os.makedirs(store, exist_ok=True)
    log = open(os.path.join(td, name + '.log'), 'a')
    p = subprocess.Popen([KVFS, '-f', '-o', f'store={store},rados=kvfs,ceph_conf={conf},{opts}', mnt],
                         stdout=log, stderr=log)
    for _ in range(600):
        if os.path.exists(os.path.join(mnt, '.kvfs', 'stats')):
            mounts.append((mnt, p))
            return mnt
        time.sleep(0.05)
    raise SystemExit('mount failed')

def remote_stats(mnt):
    return json.load(open(os.path.join(mnt, '.kvfs', 'stats')))['remote']

def drained(mnt):
    for _ in range(600):
        s = remote_stats(mnt)
        if s['state'] == 'connected' and s['queued'] == 0:
            return
        time.sleep(0.1)
    raise SystemExit('queue did not drain')

def read_all(path):
    with open(path, 'rb') as f:
        while f.read(1 << 20):
            pass

try:
    a = mount('a', 'zstd=0' + (f',model={MODEL}' if os.path.exists(MODEL) else ''))
    b = mount('b', 'ram=0,zstd=0' + (f',model={MODEL}' if os.path.exists(MODEL) else ''))
    chunk = os.path.join(td, 'big.kv')
    h = sh(KVFSCTL, 'synth', '-o', chunk, '--tokens', str(TOKENS), '--layers', '32').strip().split()[-1]
    size = os.path.getsize(chunk)
    sh('cp', chunk, os.path.join(a, 'chunks', h + '.kv'))
    drained(a)
    cluster = rados.Rados(conffile=conf)
    cluster.connect()
    io = cluster.open_ioctx('kvfs')
    obj_size = io.stat(h)[0]
    t_kvfs, t_lib = [], []
    def read_kvfs():
        os.remove(os.path.join(b, 'chunks', h + '.kv'))   # only RADOS has it now
        time.sleep(1.1)                                    # past the negative-lookup cache
        t0 = time.monotonic()
        read_all(os.path.join(b, 'chunks', h + '.kv'))
        t_kvfs.append(time.monotonic() - t0)

    def read_librados():
        t0 = time.monotonic()
        off = 0
        while off < obj_size:
            n = len(io.read(h, min(64 << 20, obj_size - off), off))
            off += n
        t_lib.append(time.monotonic() - t0)

    # alternate which goes first: the second read of a run finds the OSDs' caches warm
    for i in range(RUNS):
        for read in ((read_kvfs, read_librados) if i % 2 == 0 else (read_librados, read_kvfs)):
            read()
    mk, ml = statistics.median(t_kvfs), statistics.median(t_lib)
    print('### Remote tier on Ceph RADOS (`bench/remote.sh`, run by `make bench`)\n')
    print(f'{time.strftime("%Y-%m-%d")}, throwaway cluster on this host (`tests/ceph/cluster.sh`: 1 mon, 3 OSDs on '
          f'bluestore sparse files, loopback, pool size 2), {os.cpu_count()} cores. A {size / 2**20:.0f} MiB chunk '
          f'({TOKENS} tokens x 32 layers, synthetic, object {obj_size / 2**20:.0f} MiB, zstd=0) stored through '
          'mount A; mount B (its own local store, `ram=0`) reads it while only RADOS holds it (the local copy is '
          f'removed before each run): `cat` of chunks/HASH.kv = lookup, fetch, verify, local store, read. '
          f'Plain librados: `Ioctx.read` of the same object in 64 MiB pieces. The two alternate which reads first. Medians of {RUNS}.\n')
    print('| read of a remote-only chunk | median s | MB/s | vs librados |')
    print('|---|---|---|---|')
    print(f'| plain librados read | {ml:.3f} | {obj_size / ml / 1e6:.0f} | 1.00 |')
    print(f'| through kvfs (mount B) | {mk:.3f} | {size / mk / 1e6:.0f} | {ml / mk:.2f} |')
    if os.path.exists(MODEL):
        docs = ['/usr/share/common-licenses/' + f for f in ('Apache-2.0', 'GPL-3', 'MPL-2.0', 'Artistic')]
        hs = []
        for k, d in enumerate(docs):
            f = os.path.join(td, f'd{k}.txt')
            open(f, 'w').write(open(d, errors='replace').read()[:2000])
            hs.append(sh(KVFSCTL, 'prefill', '-m', MODEL, '-M', a, f).split()[0])
        drained(a)
        q = 'Question: What do these licenses allow?\\nAnswer:'
        rows = {}
        for run in range(3):
            for where in ('RADOS only', 'local disk'):
                if where == 'RADOS only':
                    for x in hs:
                        p = os.path.join(b, 'chunks', x + '.kv')
                        if os.path.exists(p):
                            os.remove(p)
                    time.sleep(1.1)
                tag = f'{where.split()[0].lower()}{run}'
                open(os.path.join(b, 'blends', tag + '.recipe'), 'w').write('\n'.join(hs) + f'\nsuffix={q} {tag}\n')
                t0 = time.monotonic()
                read_all(os.path.join(b, 'blends', tag + '.kv'))
                rows.setdefault(where, []).append(time.monotonic() - t0)
        # RAM tier: mount A (default ram=256M) holds them decoded once read
        rows['RAM tier'] = []
        for run in range(3):
            tag = f'ramA{run}'
            open(os.path.join(a, 'blends', tag + '.recipe'), 'w').write('\n'.join(hs) + f'\nsuffix={q} {tag}\n')
            for x in hs:
                read_all(os.path.join(a, 'chunks', x + '.kv'))
            t0 = time.monotonic()
            try:
                read_all(os.path.join(a, 'blends', tag + '.kv'))
                rows['RAM tier'].append(time.monotonic() - t0)
            except OSError:
                rows.pop('RAM tier', None)
                break
        allf = os.path.join(td, 'all.txt')
        open(allf, 'w').write(''.join(open(os.path.join(td, f'd{k}.txt')).read() for k in range(len(docs))))
        full = []
        for _ in range(3):
            e = subprocess.run([KVFSCTL, 'generate', '-m', MODEL, '--prefix-file', allf, '-p', 'Answer:', '-n', '1'],
                               capture_output=True, text=True, check=True).stderr
            full.append(float(re.search(r'TTFT ([0-9.]+) s', e).group(1)))
        tf = statistics.median(full)
        print(f'\nBlend TTFT (ratio 0.15, {len(hs)} chunks of 2000 bytes of license text + a question; a new recipe '
              'each time, `cat` of blends/NAME.kv) with the chunks only in RADOS (fetched on the blend\'s first '
              'look), on the local disk, in the RAM tier, vs a full prefill (`kvfsctl generate --prefix-file`); '
              'medians of 3:\n')
        print('| chunks | TTFT s | speedup vs full prefill |')
        print('|---|---|---|')
        print(f'| full prefill | {tf:.3f} | 1.00x |')
        for k, v in rows.items():
            t = statistics.median(v)
            print(f'| {k} | {t:.3f} | {tf / t:.2f}x |')
    io.close()
    cluster.shutdown()
finally:
    for mnt, p in mounts:
        subprocess.run(['fusermount3', '-u', mnt])
        p.wait(timeout=60)
    subprocess.run([os.path.join(ROOT, 'tests/ceph/cluster.sh'), 'stop', cl], env=env, capture_output=True)
    subprocess.run(['rm', '-rf', td])
