"""Remote tier benchmark on a throwaway Ceph cluster (tests/ceph/cluster.sh):
read throughput of a chunk that only RADOS holds, through kvfs (fetch,
verify, fill the local tiers, read) vs plain librados reads of the same
object, side by side; and blend TTFT with the chunks only in RADOS vs on the
local disk vs in the RAM tier vs a full prefill.  Run with the system
python (it has the rados module).  Prints a markdown section."""
import json, os, re, statistics, subprocess, sys, tempfile, threading, time
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUILD = os.environ.get('BUILD', 'build')
BUILD = BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD)
KVFS, KVFSCTL = os.path.join(BUILD, 'kvfs'), os.path.join(BUILD, 'kvfsctl')
MODEL = os.path.join(ROOT, 'models', 'SmolLM2-135M-Instruct.Q4_1.gguf')
RUNS = int(os.environ.get('REMOTE_RUNS', '5'))
TOKENS = int(os.environ.get('REMOTE_TOKENS', '4096'))  # synthetic chunk: 64 MiB at 32 layers (objects <= 128 MiB)
MANY = int(os.environ.get('REMOTE_MANY', '8'))            # chunks read at once
MANY_TOKENS = int(os.environ.get('REMOTE_MANY_TOKENS', '512'))  # 8 MiB each
BLEND = os.environ.get('REMOTE_BLEND', '1') != '0'       # the blend TTFT part (needs the model)
BASE = os.environ.get('REMOTE_BASE')                     # another build's kvfs, read side by side (before/after)
GAP = float(os.environ.get('REMOTE_GAP', '0'))           # seconds idle before each read (requests in bursts)
import rados

def sh(*a, **k):
    return subprocess.run(a, check=True, capture_output=True, text=True, **k).stdout

td = tempfile.mkdtemp(prefix='kvfs-bench-remote.')
cl = os.path.join(td, 'ceph')
env = dict(os.environ)
if not env.get('MONPORT'):  # a free pair below the ephemeral range (tests/ports.sh's free_port)
    env['MONPORT'] = sh('bash', '-c', f'. {ROOT}/tests/ports.sh && free_port 2').strip()
r = subprocess.run([os.path.join(ROOT, 'tests/ceph/cluster.sh'), 'start', cl, 'bluestore', '3'], env=env,
                   capture_output=True, text=True)
if r.returncode:
    print(f'### Remote tier\n\nskipped: no test cluster ({r.stdout.strip()} {r.stderr.strip()[-200:]})')
    subprocess.run([os.path.join(ROOT, 'tests/ceph/cluster.sh'), 'stop', cl], env=env, capture_output=True)
    subprocess.run(['rm', '-rf', td])
    sys.exit(0)
conf = os.path.join(cl, 'ceph.conf')
mounts = []

def cpu_model():
    for line in open('/proc/cpuinfo'):
        if line.startswith('model name'):
            return line.split(':', 1)[1].strip()
    return 'unknown CPU'

def mount(name, opts, binary=KVFS):
    mnt, store = os.path.join(td, name + '.mnt'), os.path.join(td, name + '.store')
    os.makedirs(mnt, exist_ok=True)
    os.makedirs(store, exist_ok=True)
    log = open(os.path.join(td, name + '.log'), 'a')
    p = subprocess.Popen([binary, '-f', '-o', f'store={store},rados=kvfs,ceph_conf={conf},{opts}', mnt],
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

def remove_local(mnt, hashes):
    for x in hashes:
        try:
            os.remove(os.path.join(mnt, 'chunks', x + '.kv'))  # only RADOS has it now
        except FileNotFoundError:
            pass
    time.sleep(1.1)                                        # past the negative-lookup cache

def read_mount(mnt, hashes):
    """Read every chunk through the mount at once (one thread each); seconds."""
    remove_local(mnt, hashes)
    errs = []
    def one(x):
        try:
            read_all(os.path.join(mnt, 'chunks', x + '.kv'))
        except OSError as e:
            errs.append(e)
    th = [threading.Thread(target=one, args=(x,)) for x in hashes]
    t0 = time.monotonic()
    for t in th:
        t.start()
    for t in th:
        t.join()
    dt = time.monotonic() - t0
    if errs:
        raise SystemExit(f'read through {mnt} failed: {errs[0]}')
    return dt

def read_librados(io, objs):
    """One Ioctx.read per object (the objects at once, one thread each, as
    a user reading several would); seconds."""
    def one(h, size):
        off = 0
        while off < size:
            off += len(io.read(h, min(64 << 20, size - off), off))
    th = [threading.Thread(target=one, args=o) for o in objs]
    t0 = time.monotonic()
    for t in th:
        t.start()
    for t in th:
        t.join()
    return time.monotonic() - t0

def read_librados_aio(io, objs, piece=4 << 20):
    """Every object in ranged aio_reads of `piece` bytes, all in flight at once; seconds."""
    done = threading.Semaphore(0)
    got = []
    n = 0
    t0 = time.monotonic()
    for h, size in objs:
        for off in range(0, size, piece):
            io.aio_read(h, min(piece, size - off), off, lambda c, d: (got.append(len(d)), done.release()))
            n += 1
    for _ in range(n):
        done.acquire()
    dt = time.monotonic() - t0
    if sum(got) != sum(size for _, size in objs):
        raise SystemExit('short aio read')
    return dt

try:
    model_opt = f',model={MODEL}' if os.path.exists(MODEL) else ''
    a = mount('a', 'zstd=0' + model_opt)
    b = mount('b', 'ram=0,zstd=0' + model_opt + os.environ.get('REMOTE_OPTS', ''))
    sides = {'kvfs': b}
    if BASE:  # the same reads through an older build, side by side
        sides['kvfs (base)'] = mount('c', 'ram=0,zstd=0' + model_opt, binary=BASE)
    def synth(tokens, n):
        hs = []
        for k in range(n):
            f = os.path.join(td, f'synth{tokens}.{k}.kv')
            hs.append(sh(KVFSCTL, 'synth', '-o', f, '--tokens', str(tokens), '--layers', '32',
                         '--seed', str(1000 + k)).strip().split()[-1])
            sh('cp', f, os.path.join(a, 'chunks', hs[-1] + '.kv'))
            size = os.path.getsize(f)
            os.remove(f)
        return hs, size
    big, big_size = synth(TOKENS, 1)
    many, many_size = synth(MANY_TOKENS, MANY)
    drained(a)
    cluster = rados.Rados(conffile=conf)
    cluster.connect()
    io = cluster.open_ioctx('kvfs')
    cases = {'one': (big, big_size), 'many': (many, many_size)}
    objs = {k: [(h, io.stat(h)[0]) for h in hs] for k, (hs, _) in cases.items()}
    times = {(k, side): [] for k in cases for side in list(sides) + ['librados', 'librados aio']}
    load0 = os.getloadavg()
    # alternate the order: the second read of a run finds the OSDs' caches warm
    for i in range(RUNS):
        for k, (hs, _) in cases.items():
            order = list(sides) + ['librados', 'librados aio']
            order = order[i % len(order):] + order[:i % len(order)]
            for side in order:
                time.sleep(GAP)
                if side == 'librados':
                    dt = read_librados(io, objs[k])
                elif side == 'librados aio':
                    dt = read_librados_aio(io, objs[k])
                else:
                    dt = read_mount(sides[side], hs)
                times[(k, side)].append(dt)
    load1 = os.getloadavg()
    med = {key: statistics.median(v) for key, v in times.items()}
    print('### Remote tier on Ceph RADOS (`bench/remote.sh`, run by `make bench`)\n')
    print(f'{time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, {cpu_model()}, {os.cpu_count()} cores, load average '
          f'{load0[0]:.1f} before / {load1[0]:.1f} after; throwaway cluster on this host (`tests/ceph/cluster.sh`: '
          '1 mon, 3 OSDs on bluestore sparse files, loopback, pool size 2). Chunks (synthetic, 32 layers, zstd=0) '
          'stored through mount A; mount B (its own local store, `ram=0`) reads them while only RADOS holds them '
          '(the local copies are removed before each run): `cat` of chunks/HASH.kv = lookup, fetch, verify, local '
          f'store, read. *one*: a {big_size / 2**20:.0f} MiB chunk ({TOKENS} tokens); *many*: {MANY} chunks of '
          f'{many_size / 2**20:.0f} MiB ({MANY_TOKENS} tokens) read at once, one thread each. Plain librados: '
          '`Ioctx.read` of each object in one call (one thread per object), and `aio_read`s of 4 MiB ranges all in '
          f'flight at once. Every side reads in each run, the order rotating; medians of {RUNS}.\n')
    print('| read of remote-only chunks | median s | MB/s | vs one Ioctx.read | vs aio ranged reads |')
    print('|---|---|---|---|---|')
    for k, (hs, size) in cases.items():
        total = size * len(hs)
        ml, ma = med[(k, 'librados')], med[(k, 'librados aio')]
        label = 'one' if k == 'one' else f'many ({len(hs)} at once)'
        for side in ['librados', 'librados aio'] + list(sides):
            name = {'librados': 'plain librados, Ioctx.read', 'librados aio': 'plain librados, aio ranged reads'}.get(
                side, f'through {side}')
            t = med[(k, side)]
            print(f'| {label}: {name} | {t:.3f} | {total / t / 1e6:.0f} | {ml / t:.2f} | {ma / t:.2f} |')
    if os.environ.get('REMOTE_RAW'):
        print('\nraw seconds: ' + json.dumps({f'{k}/{s}': [round(x, 3) for x in v] for (k, s), v in times.items()}))
    if os.path.exists(MODEL) and BLEND:
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
    if os.environ.get('REMOTE_KEEP'):  # the mounts' logs, for a profile
        print(f'\nkept {td}', file=sys.stderr)
    else:
        subprocess.run(['rm', '-rf', td])
