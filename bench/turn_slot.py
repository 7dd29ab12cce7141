#!/usr/bin/env python3
"""What one kvfs-serve turn save and restore cost (issue 41): a real
llama-server (SmolLM2, 2 slots as tests/engines/serve_turns.sh starts it)
saves its slot of ~TOKENS tokens into MNT/llama/ (the draft written through
FUSE, converted and stored as a chunk at close) and restores the stored
chunk's view MNT/llama/HASH.llama (read through FUSE) into its other slot.
Each round a few new tokens end the prompt (a new chunk: the restore reads a
view never read before, as a returning conversation's is).  For each kvfs
build given, one mount and one llama-server; the builds take turns within a
round (side by side).  Prints, per build, medians of llama-server's save_ms
and restore_ms and of the daemon's CPU time for each.

usage: LLAMA_SERVER=... bench/turn_slot.py [BUILD[@VAR=VALUE] ...]   (default: build)
       env ROUNDS=7 TOKENS=2500; KVFS_OPTS=ram=0 (more mount options);
       KVFS_PROFILE_ENV=KVFS_INGEST_PROFILE=1 (the daemons' phases on stderr)
"""
import json, os, re, signal, statistics, subprocess, sys, tempfile, time, urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROUNDS = int(os.environ.get("ROUNDS", "7"))
TOKENS = int(os.environ.get("TOKENS", "2500"))
MODEL = os.environ.get("MODEL", f"{ROOT}/models/SmolLM2-135M-Instruct.Q4_1.gguf")
SERVER = os.environ.get("LLAMA_SERVER", f"{ROOT}/build/llama-server/bin/llama-server")
OPTS = "," + os.environ["KVFS_OPTS"] if os.environ.get("KVFS_OPTS") else ""  # more mount options: ram=0
builds = sys.argv[1:] or ["build"]
TICK = os.sysconf("SC_CLK_TCK")


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=600).read())


def cpu_ms(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) * 1000 / TICK


T = tempfile.mkdtemp(prefix="kvfs-turn-slot.")
procs, mounts, sides = [], [], []
try:
    for i, b in enumerate(builds):
        mnt, store, log = f"{T}/m{i}.mnt", f"{T}/m{i}.store", f"{T}/kvfs{i}.log"
        os.makedirs(mnt), os.makedirs(store)
        b, _, own_env = b.partition("@")  # BUILD@VAR=VALUE: that daemon alone with VAR set
        env = dict(os.environ)
        for kv in os.environ.get("KVFS_PROFILE_ENV", "").split() + ([own_env] if own_env else []):
            env[kv.split("=")[0]] = kv.split("=", 1)[1]
        wrap = os.environ.get("KVFS_WRAP", "").replace("%i", str(i)).split()  # e.g. perf record -o x%i --
        k = subprocess.Popen(wrap + [f"{b}/kvfs", "-f", "-o", f"store={store},model={MODEL}{OPTS}", mnt],
                             stdout=subprocess.DEVNULL, stderr=open(log, "w"), env=env)
        procs.append(k)
        for _ in range(600):
            if os.path.exists(f"{mnt}/.kvfs/stats"):
                break
            time.sleep(0.05)
        mounts.append(mnt)
        port = 30000 + (os.getpid() * 7 + i * 13) % 20000
        s = subprocess.Popen([SERVER, "-m", MODEL, "--slot-save-path", f"{mnt}/llama/", "-np", "2", "-kvu",
                              "--kv-unified-per-slot", "4096", "--cache-ram", "0", "-t", str(os.cpu_count()),
                              "--port", str(port)], stdout=subprocess.DEVNULL, stderr=open(f"{T}/srv{i}.log", "w"))
        procs.append(s)
        for _ in range(600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except Exception:
                time.sleep(0.1)
        sides.append({"build": builds[i], "port": port, "kvfs": k, "log": log, "rows": []})
    text = "".join(open(f).read() for f in ("/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/Apache-2.0"))
    ids = post(sides[0]["port"], "/tokenize", {"content": text})["tokens"]
    base = ids[:TOKENS - 16]
    print(f"{open('/proc/cpuinfo').read().split('model name')[1].split(':')[1].splitlines()[0].strip()}, "
          f"{os.cpu_count()} vCPUs; {ROUNDS} rounds; states of {TOKENS} tokens", flush=True)
    for r in range(ROUNDS + 1):  # round 0 warms up (the first prefill of the whole prompt)
        tail = ids[TOKENS + 16 * r:TOKENS + 16 * (r + 1)]
        for sd in sides:
            p, pid = sd["port"], sd["kvfs"].pid
            post(p, "/completion", {"prompt": base + tail, "n_predict": 0, "id_slot": 0, "cache_prompt": True})
            c0 = cpu_ms(pid)
            t0 = time.monotonic()
            sv = post(p, "/slots/0?action=save", {"filename": f"turn{r}.bin"})
            t1 = time.monotonic()
            c1 = cpu_ms(pid)
            hashes = re.findall(rf"stored llama/turn{r}\.bin as chunks/([0-9a-f]{{64}})\.kv", open(sd["log"]).read())
            if not hashes:
                sys.exit(f"{sd['build']}: turn{r}.bin not stored:\n" + open(sd["log"]).read()[-2000:])
            c2 = cpu_ms(pid)
            t2 = time.monotonic()
            rs = post(p, "/slots/1?action=restore", {"filename": f"{hashes[0]}.llama"})
            t3 = time.monotonic()
            c3 = cpu_ms(pid)
            if rs["n_restored"] != sv["n_saved"]:
                sys.exit(f"restored {rs['n_restored']} of {sv['n_saved']} tokens")
            if r:
                sd["rows"].append((sv["timings"]["save_ms"], (t1 - t0) * 1e3, c1 - c0, rs["timings"]["restore_ms"],
                                   (t3 - t2) * 1e3, c3 - c2, sv["n_written"]))
    for sd in sides:
        v = sd["rows"]
        med = lambda k: statistics.median(x[k] for x in v)
        print(f"{sd['build']}: save {med(0):.0f} ms (HTTP {med(1):.0f}, daemon CPU {med(2):.0f}); restore "
              f"{med(3):.0f} ms (HTTP {med(4):.0f}, daemon CPU {med(5):.0f}); {v[0][6]} bytes; medians of {len(v)}")
        print("  save_ms " + " ".join(f"{x[0]:.0f}" for x in v) + " | restore_ms " + " ".join(f"{x[3]:.0f}" for x in v))
finally:
    for pr in procs[::-1]:
        if pr.poll() is None and pr not in [sd["kvfs"] for sd in sides]:
            pr.send_signal(signal.SIGTERM)
            pr.wait()
    for m in mounts:
        subprocess.run(["fusermount3", "-u", m], stderr=subprocess.DEVNULL)
    for pr in procs:
        try:
            pr.wait(timeout=30)
        except Exception:
            pr.kill()
    if os.environ.get("KEEP"):
        print("kept", T)
    else:
        subprocess.run(["rm", "-rf", T])
