#!/usr/bin/env python3
"""kvfs-serve against llama-server alone on a RAG workload (BENCHMARKS.md,
"Serving front"), side by side in one run on this machine.

Passages: >= POOL pieces of 300-600 tokens cut from the machine's
documentation (man pages, /usr/share/doc copyrights, licenses, headers:
tests/oracle/corpus.py).  A request draws 4-6 of them with a Zipf
popularity (s = 1.1) and asks a question no request asked before.
CLIENTS closed-loop clients stream for SECONDS against:
  - llama-server alone, its best settings for reuse: CLIENTS slots,
    cache_prompt, --cache-reuse 256, its RAM prompt cache (default size);
    the passages and the question in the user message;
  - kvfs-serve over a kvfs mount and a llama-server of the same flags (the
    slots saved into the mount, no RAM prompt cache): the passages as
    `documents`; the corpus ingested beforehand (a RAG operator's indexing
    step: its time is reported, not counted).
Then: fidelity (the first answer token and the greedy-16 answer of SAMPLE
requests through kvfs-serve against llama-server's own full prefill of the
same tokens); the front's own overhead (a request whose blend is cached,
through kvfs-serve, against the same restore and completion sent to
llama-server directly); multi-turn (8 conversations of 5 turns interleaved
on 2 slots, each side fresh: time to first token of turns 2-5), against
llama-server with its RAM prompt cache and without it (--cache-ram 0: what
a restarted server, or another host, has for a returning conversation);
kvfs-serve's mount stores the slot saves after their close
(llama_saves=async, or LLAMA_SAVES=sync), and once more with sync saves.

usage: LLAMA_SERVER=... bench/serve_front.py [--seconds 90] [--clients 8]
       [--pool 200] [--sample 30] [--out FILE.json]
Prints one JSON object (and writes it to --out)."""
import argparse, http.client, json, os, random, shutil, signal, statistics, subprocess, sys, tempfile, threading, time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
sys.path.insert(0, os.path.join(ROOT, 'tests', 'oracle'))
from corpus import documents  # noqa: E402

BUILD = os.environ.get('BUILD', os.path.join(ROOT, 'build'))
MODEL = os.environ.get('MODEL', os.path.join(ROOT, 'models', 'SmolLM2-135M-Instruct.Q4_1.gguf'))
SERVER = os.environ.get('LLAMA_SERVER', os.path.join(BUILD, 'llama-server', 'bin', 'llama-server'))
# how the mount stores llama-server's slot saves (kvfs(8) llama_saves=): async, as kvfs-serve(1) advises
LLAMA_SAVES = os.environ.get('LLAMA_SAVES', 'async')
QUESTIONS = ['What does this text allow you to do?', 'Who is responsible for the software?',
             'Summarize the conditions in one sentence.', 'Which command or option is described?',
             'What is the main topic of these passages?', 'Which passage is the most technical?']


def cpu_model():
    for line in open('/proc/cpuinfo'):
        if line.startswith('model name'):
            return line.split(':', 1)[1].strip() + f', {os.cpu_count()} vCPUs'
    return 'unknown CPU'


def call(port, method, path, body=None, timeout=600):
    c = http.client.HTTPConnection('127.0.0.1', port, timeout=timeout)
    c.request(method, path, json.dumps(body) if body is not None else None, {'Content-Type': 'application/json'})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, (json.loads(data) if data else None)


def stream(port, path, body, timeout=600):
    """POST a streamed completion; (seconds to the first content token, seconds to the end, text, last event)"""
    t0 = time.perf_counter()
    c = http.client.HTTPConnection('127.0.0.1', port, timeout=timeout)
    c.request('POST', path, json.dumps(dict(body, stream=True)), {'Content-Type': 'application/json'})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f'{path}: HTTP {r.status}: {r.read()[:300]!r}')
    ttft, text, last = None, '', {}
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith('data: {'):
            continue
        ev = json.loads(line[6:])
        last = ev
        ch = ev.get('choices') or [{}]
        piece = ch[0].get('delta', {}).get('content') or ch[0].get('text') or ''
        if piece and ttft is None:
            ttft = time.perf_counter() - t0
        text += piece
    c.close()
    end = time.perf_counter() - t0
    return (ttft if ttft is not None else end), end, text, last


def wait_up(port, what, proc, secs=120):
    for _ in range(int(secs * 10)):
        try:
            if call(port, 'GET', '/health', timeout=2)[0] == 200:
                return
        except OSError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    raise RuntimeError(f'{what} did not start')


class Rig:
    """llama-server (and with mount: kvfs and kvfs-serve) in a temporary directory"""

    def __init__(self, td, name, slots, mount, port, ram_cache=True, llama_saves=None):
        self.procs, self.td, self.mnt = [], td, None
        self.eport, self.port = port, port + 1
        # a KV cache per slot (llama-server's default; a unified one makes every slot's attention
        # scan all slots' cells): the mount shows N-stream views (llama_streams=N) to match
        flags = ['-m', MODEL, '-np', str(slots), '-c', str(4096 * slots), '--cache-reuse', '256',
                 '-t', str(os.cpu_count()), '--port', str(self.eport)]
        if mount:
            self.mnt = os.path.join(td, name + '.mnt')
            store = os.path.join(td, name + '.store')
            os.makedirs(self.mnt), os.makedirs(store)
            self.procs.append(subprocess.Popen([os.path.join(BUILD, 'kvfs'), '-f', '-o',
                                                f'store={store},ram=1G,model={MODEL},llama_streams={slots},'
                                                f'llama_saves={llama_saves or LLAMA_SAVES}', self.mnt],
                                               stderr=open(os.path.join(td, name + '.kvfs.log'), 'w')))
            for _ in range(400):
                if os.path.exists(os.path.join(self.mnt, '.kvfs', 'stats')):
                    break
                time.sleep(0.05)
            flags += ['--slot-save-path', self.mnt + '/llama/', '--cache-ram', '0']
        elif not ram_cache:  # llama-server as after a restart, or another host's: no prompt cache in RAM
            flags += ['--cache-ram', '0']
        log = open(os.path.join(td, name + '.engine.log'), 'w')
        self.procs.append(subprocess.Popen([SERVER] + flags, stdout=log, stderr=log))
        wait_up(self.eport, 'llama-server', self.procs[-1])
        if mount:
            self.procs.append(subprocess.Popen([os.path.join(BUILD, 'kvfs-serve'), '--mount', self.mnt, '--engine',
                                                f'http://127.0.0.1:{self.eport}', '--listen',
                                                f'127.0.0.1:{self.port}'],
                                               stderr=open(os.path.join(td, name + '.serve.log'), 'w')))
            wait_up(self.port, 'kvfs-serve', self.procs[-1])
        else:
            self.port = self.eport

    def stop(self):
        for p in reversed(self.procs):
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if self.mnt:
            subprocess.run(['fusermount3', '-u', self.mnt], stderr=subprocess.DEVNULL)


def passages(port, pool):
    """pool passages of 300-600 tokens, tokens counted by the engine"""
    out = []
    for _, text in documents(400):
        for off in range(0, len(text) - 1200, 1900):
            piece = text[off:off + 1800]
            n = len(call(port, 'POST', '/tokenize', {'content': piece})[1]['tokens'])
            if 300 <= n <= 600:
                out.append(piece)
                break  # one piece per document: distinct texts
        if len(out) >= pool:
            break
    return out


def zipf_draw(rng, n, k, s=1.1):
    w = [1.0 / (i + 1) ** s for i in range(n)]
    picked = set()
    while len(picked) < k:
        picked.add(rng.choices(range(n), w)[0])
    return sorted(picked)


def request(rng, pool, serial):
    idx = zipf_draw(rng, len(pool), rng.randint(4, 6))
    rng.shuffle(idx)  # in the retriever's order (relevance), not by popularity
    q = f'{rng.choice(QUESTIONS)} (request {serial})'
    return [pool[i] for i in idx], q


def body(docs, q, via_kvfs, max_tokens=16):
    if via_kvfs:
        msgs = [{'role': 'user', 'content': 'Question: ' + q}]
        return {'messages': msgs, 'documents': docs, 'max_tokens': max_tokens, 'temperature': 0}
    msgs = [{'role': 'user', 'content': '\n\n'.join(docs) + '\n\nQuestion: ' + q}]
    return {'messages': msgs, 'max_tokens': max_tokens, 'temperature': 0, 'cache_prompt': True}


def load(port, pool, via_kvfs, clients, seconds):
    ttfts, done, errors, phases = [], [0], [], {}
    lock = threading.Lock()
    t_end = time.perf_counter() + seconds

    def client(c):
        rng = random.Random(1000 + c)
        serial = 0
        while time.perf_counter() < t_end:
            docs, q = request(rng, pool, f'{c}.{serial}')
            serial += 1
            try:
                ttft, _, _, last = stream(port, '/v1/chat/completions', body(docs, q, via_kvfs))
            except Exception as e:  # counted, reported
                with lock:
                    errors.append(str(e)[:200])
                continue
            with lock:
                if time.perf_counter() <= t_end:
                    ttfts.append(ttft)
                    done[0] += 1
                    for k, v in ((last.get('kvfs') or {}).get('ms') or {}).items():  # where kvfs-serve's time went
                        phases.setdefault(k, []).append(v)
    t0 = time.perf_counter()
    th = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.perf_counter() - t0
    load_avg = os.getloadavg()[0]  # other work on the machine shows here (this run's own is ~clients/2)
    q = statistics.quantiles(ttfts, n=100) if len(ttfts) > 1 else [float('nan')] * 99
    return {'requests': done[0], 'prompts_per_s': done[0] / seconds,
            'ttft_p50': statistics.median(ttfts) if ttfts else float('nan'),
            'ttft_p99': q[98], 'wall_s': wall,
            'kvfs_ms_p50': {k: statistics.median(v) for k, v in phases.items()}, 'errors': len(errors), 'first_error': errors[:1],
            'loadavg_1m_at_end': load_avg}


def ingest(port, pool):
    """every passage once through kvfs-serve (documents prefilled by the engine into the mount)"""
    t0 = time.perf_counter()
    groups = [pool[i:i + 5] for i in range(0, len(pool), 5)]

    def work(gs):
        for g in gs:
            st, r = call(port, 'POST', '/v1/completions', {'documents': g, 'prompt': '\nQ: ok?\nA:', 'max_tokens': 1})
            if st != 200:
                raise RuntimeError(f'ingest: HTTP {st}: {r}')
    th = [threading.Thread(target=work, args=(groups[k::4],)) for k in range(4)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    return time.perf_counter() - t0


def fidelity(rig, pool, sample):
    rng = random.Random(7)
    first_eq = all_eq = 0
    for i in range(sample):
        docs, q = request(rng, pool, f'f{i}')
        b = dict(body(docs, q, True, 16), return_tokens=True, return_prompt_tokens=True)
        st, r = call(rig.port, 'POST', '/v1/chat/completions', b)
        got, prompt = r['kvfs']['tokens'], r['kvfs']['prompt_tokens']
        st, f = call(rig.eport, 'POST', '/completion', {'prompt': prompt, 'n_predict': 16, 'temperature': 0,
                                                        'cache_prompt': False, 'return_tokens': True})
        want = f['tokens']
        first_eq += bool(got and want and got[0] == want[0])
        all_eq += got == want
    return {'requests': sample, 'first_token_equal': first_eq / sample, 'greedy16_equal': all_eq / sample}


def overhead(rig, pool, n=21):
    """the same request again and again (its blend cached) through kvfs-serve, then its restore and
    completion sent to llama-server directly: the difference of the medians is the front's own time"""
    docs, q = [pool[0], pool[1], pool[2], pool[3]], 'What is the main topic of these passages? (overhead)'
    b = dict(body(docs, q, True, 1), return_prompt_tokens=True)
    st, r = call(rig.port, 'POST', '/v1/chat/completions', b)
    name, prompt, ns = r['kvfs']['blend'], r['kvfs']['prompt_tokens'], r['kvfs']['suffix_tokens']
    front = []
    for _ in range(n):
        front.append(stream(rig.port, '/v1/chat/completions', body(docs, q, True, 1))[0])
    direct = []
    for _ in range(n):
        t0 = time.perf_counter()
        call(rig.eport, 'POST', '/slots/0?action=restore', {'filename': name + '.llama'})
        call(rig.eport, 'POST', '/completion', {'prompt': prompt[:len(prompt) - ns], 'n_predict': 0, 'id_slot': 0,
                                                'cache_prompt': True})
        stream(rig.eport, '/completion', {'prompt': prompt, 'n_predict': 1, 'id_slot': 0, 'cache_prompt': True,
                                          'temperature': 0})
        direct.append(time.perf_counter() - t0)
    return {'front_ttft_p50': statistics.median(front), 'direct_p50': statistics.median(direct),
            'overhead_p50_ms': 1000 * (statistics.median(front) - statistics.median(direct))}


def turns(port, pool, via_kvfs, convs=8, n_turns=5, workers=2):
    """conversations interleaved: turn t of every conversation, then turn t+1; TTFT of turns 2..n"""
    hist = [[{'role': 'user', 'content': None, 'docs': [pool[(3 * c + k) % len(pool)] for k in range(3)],
              'q': 'What are these passages about?'}] for c in range(convs)]
    ttft = {t: [] for t in range(1, n_turns + 1)}
    follow = ['Tell me more.', 'Which one is the longest?', 'What would you ask next?', 'Summarize it all.']
    lock = threading.Lock()
    phases = {}

    def messages(h):
        out = []
        for m in h:
            if m['role'] == 'assistant':
                out.append({'role': 'assistant', 'content': m['content']})
            elif via_kvfs:
                out.append({'role': 'user', 'content': 'Question: ' + m['q'], **({'documents': m['docs']} if m['docs'] else {})})
            else:
                out.append({'role': 'user', 'content': ''.join(d + '\n\n' for d in m['docs']) + 'Question: ' + m['q']})
        return out

    def one(c, t):
        b = {'messages': messages(hist[c]), 'max_tokens': 16, 'temperature': 0}
        if not via_kvfs:
            b['cache_prompt'] = True
        tt, _, text, last = stream(port, '/v1/chat/completions', b)
        with lock:
            ttft[t].append(tt)
            if t > 1:  # where kvfs-serve's time went (its kvfs.ms marks), turns 2..n
                for k, v in ((last.get('kvfs') or {}).get('ms') or {}).items():
                    phases.setdefault(k, []).append(v)
        hist[c].append({'role': 'assistant', 'content': text})
        if t < n_turns:
            hist[c].append({'role': 'user', 'docs': [], 'q': follow[(t - 1) % len(follow)] + f' (conversation {c})'})
    for t in range(1, n_turns + 1):
        order = list(range(convs))
        th = [threading.Thread(target=lambda ks=order[w::workers], t=t: [one(k, t) for k in ks]) for w in range(workers)]
        for x in th:
            x.start()
        for x in th:
            x.join()
    later = [x for t in range(2, n_turns + 1) for x in ttft[t]]
    out = {'turn1_ttft_p50': statistics.median(ttft[1]), 'later_ttft_p50': statistics.median(later),
           'later_ttft_p99': max(later)}
    if phases:
        out['later_kvfs_ms_p50'] = {k: round(statistics.median(v), 1) for k, v in phases.items()}
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--seconds', type=float, default=90)
    ap.add_argument('--clients', type=int, default=8)
    ap.add_argument('--pool', type=int, default=200)
    ap.add_argument('--sample', type=int, default=30)
    ap.add_argument('--phases', default='load,fidelity,overhead,turns',
                    help='which of load, fidelity, overhead, turns (comma-separated)')
    ap.add_argument('--out')
    a = ap.parse_args()
    phases = set(a.phases.split(','))
    if phases - {'load', 'fidelity', 'overhead', 'turns'}:
        ap.error(f'--phases: unknown {sorted(phases - {"load", "fidelity", "overhead", "turns"})}')
    res = {'cpu': cpu_model(), 'date': time.strftime('%Y-%m-%d'), 'model': os.path.basename(MODEL),
           'clients': a.clients, 'seconds': a.seconds, 'phases': sorted(phases)}
    td = tempfile.mkdtemp(prefix='kvfs-front.')

    def save():  # after every phase: a run cut short keeps what it measured
        if a.out:
            open(a.out, 'w').write(json.dumps(res, indent=1))
    port = 30000 + random.randrange(10000) * 2
    try:
        base = Rig(td, 'alone', a.clients, False, port)
        try:
            pool = passages(base.eport, a.pool)
            res['pool'] = len(pool)
            if 'load' in phases:
                print(f'pool: {len(pool)} passages; llama-server alone, {a.clients} clients, {a.seconds:g} s',
                      file=sys.stderr)
                res['llama_server'] = load(base.port, pool, False, a.clients, a.seconds)
                save()
        finally:
            base.stop()
        if phases & {'load', 'fidelity', 'overhead'}:
            kv = Rig(td, 'kvfs', a.clients, True, port + 2)
            try:
                if 'load' in phases:
                    res['ingest_s'] = ingest(kv.port, pool)
                    print(f'ingested in {res["ingest_s"]:.1f} s; kvfs-serve, {a.clients} clients', file=sys.stderr)
                    res['kvfs_serve'] = load(kv.port, pool, True, a.clients, a.seconds)
                    save()
                if 'fidelity' in phases:
                    res['fidelity'] = fidelity(kv, pool, a.sample)
                    save()
                if 'overhead' in phases:
                    res['overhead'] = overhead(kv, pool)
                    save()
            finally:
                kv.stop()
        # kvfs-serve twice: the mount storing slot saves after their close (llama_saves=async, as
        # kvfs-serve(1) advises) and before it (sync, kvfs's default), side by side
        for name, via, ram, saves in (('turns_llama_server', False, True, None),
                                      ('turns_llama_server_no_ram_cache', False, False, None),
                                      ('turns_kvfs_serve', True, False, LLAMA_SAVES),
                                      ('turns_kvfs_serve_sync_saves', True, False, 'sync')):
            if 'turns' not in phases:
                break
            rig = Rig(td, name, 2, via, port + 4, ram_cache=ram, llama_saves=saves)
            try:
                res[name] = turns(rig.port, pool, via)
                save()
            finally:
                rig.stop()
        r = res['ratios'] = {}
        if 'load' in phases:
            ls, ks = res['llama_server'], res['kvfs_serve']
            r['ttft_p50'] = ls['ttft_p50'] / ks['ttft_p50']
            r['prompts_per_s'] = ks['prompts_per_s'] / ls['prompts_per_s'] if ls['prompts_per_s'] else None
            r['kvfs_p99_over_p50'] = ks['ttft_p99'] / ks['ttft_p50']
        if 'turns' in phases:
            r['turns_ttft_p50'] = res['turns_llama_server']['later_ttft_p50'] / res['turns_kvfs_serve']['later_ttft_p50']
            r['turns_ttft_p50_vs_no_ram_cache'] = (res['turns_llama_server_no_ram_cache']['later_ttft_p50'] /
                                                   res['turns_kvfs_serve']['later_ttft_p50'])
            r['turns_ttft_p50_async_over_sync_saves'] = (res['turns_kvfs_serve_sync_saves']['later_ttft_p50'] /
                                                         res['turns_kvfs_serve']['later_ttft_p50'])
    finally:
        shutil.rmtree(td, ignore_errors=True)
    out = json.dumps(res, indent=1)
    print(out)
    if a.out:
        open(a.out, 'w').write(out)


if __name__ == '__main__':
    main()
