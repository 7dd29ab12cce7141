#!/usr/bin/env python3
"""Load generator for blending as a service (BENCHMARKS.md, "Serving").

N concurrent clients, each a closed loop for a fixed time: draw K chunks
from a pool of prefilled passages with a Zipf popularity (as retrieval
does), add a question no one asked before, write the recipe to
blends/NAME.recipe and read blends/NAME.kv whole.  TTFT here is the time
from writing the recipe to having the blended cache's last byte: what an
engine waits for before its first decode step.  The same prompts are then
sent as ratio=1 recipes, which the same daemon computes as a full prefill
with our runtime (ratio 1 == full prefill, a test), so both sides share the
path, the store and the machine.  Reports requests/s, TTFT p50/p95/p99 and
the daemon's RSS (VmRSS now, VmHWM peak) for each side.

usage: bench/serve.py MOUNT DAEMON_PID HASHES_FILE [--clients 8] [--seconds 60]
       [--chunks 6] [--zipf 1.1] [--ratio 0.15] [--full-seconds S]
HASHES_FILE: one chunk hash per line, most popular first (bench/serve.sh
makes it).
"""
import argparse
import os
import random
import statistics
import threading
import time


def rss_kib(pid):
    vals = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                k, v = line.split(":")
                vals[k] = int(v.split()[0])
    return vals.get("VmRSS", 0), vals.get("VmHWM", 0)


def zipf_sample(rng, weights, k):
    """k distinct indices, each draw proportional to weights (Zipf)."""
    chosen = []
    w = list(weights)
    for _ in range(k):
        total = sum(w)
        x = rng.random() * total
        acc = 0.0
        for i, wi in enumerate(w):
            acc += wi
            if wi > 0 and x <= acc:
                chosen.append(i)
                w[i] = 0.0
                break
    return chosen


def percentile(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def run_phase(args, hashes, ratio, seconds, tag, prompts=None):
    """Closed-loop clients for `seconds`; returns (latencies, errors, prompts used)."""
    weights = [1.0 / (r + 1) ** args.zipf for r in range(len(hashes))]
    lat, errs, used = [], [], []
    lock = threading.Lock()
    stop_at = time.monotonic() + (seconds if seconds > 0 else 1e9)
    counter = [0]

    def client(cid):
        rng = random.Random(1000 + cid)
        while time.monotonic() < stop_at:
            with lock:
                n = counter[0]
                counter[0] += 1
            if prompts is not None:  # replay the blend side's prompts, in order
                if n >= len(prompts):
                    return
                chunks, q = prompts[n]
            else:
                if args.requests and n >= args.requests:
                    return
                chunks = [hashes[i] for i in zipf_sample(rng, weights, args.chunks)]
                q = f"Question {n} (client {cid}): what does the text above say about warranty and liability?"
            name = f"{tag}-{n}"
            text = f"ratio={ratio}\n" + "".join(h + "\n" for h in chunks) + "suffix=\\n" + q + "\\nAnswer:\n"
            t0 = time.monotonic()
            try:
                with open(os.path.join(args.mount, "blends", name + ".recipe"), "w") as f:
                    f.write(text)
                size = 0
                with open(os.path.join(args.mount, "blends", name + ".kv"), "rb") as f:
                    while True:
                        b = f.read(1 << 20)
                        if not b:
                            break
                        size += len(b)
                dt = time.monotonic() - t0
                with lock:
                    lat.append(dt)
                    used.append((chunks, q))
            except OSError as e:
                with lock:
                    errs.append(str(e))
            try:  # forget it: a server does not keep every answer's recipe
                os.unlink(os.path.join(args.mount, "blends", name + ".recipe"))
            except OSError:
                pass

    threads = [threading.Thread(target=client, args=(c,)) for c in range(args.clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return lat, errs, used, time.monotonic() - t0


def report(tag, lat, errs, wall, pid):
    rss, hwm = rss_kib(pid)
    rps = len(lat) / wall if wall > 0 else 0
    print(f"{tag:6s} requests {len(lat):4d} errors {len(errs):3d} wall {wall:6.1f} s  "
          f"req/s {rps:6.3f}  TTFT p50 {percentile(lat, 50):6.2f} p95 {percentile(lat, 95):6.2f} "
          f"p99 {percentile(lat, 99):6.2f} s  p99/p50 {percentile(lat, 99) / percentile(lat, 50):4.2f}  "
          f"RSS {rss / 1024:.0f} MiB (peak {hwm / 1024:.0f})", flush=True)
    for e in errs[:3]:
        print("   error:", e)
    return rps


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mount")
    ap.add_argument("pid", type=int)
    ap.add_argument("hashes")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--full-seconds", type=float, default=None)
    ap.add_argument("--chunks", type=int, default=6)
    ap.add_argument("--zipf", type=float, default=1.1)
    ap.add_argument("--ratio", type=float, default=0.15)
    ap.add_argument("--requests", type=int, default=0, help="stop after this many requests (blend side)")
    ap.add_argument("--no-full", action="store_true", help="blend side only")
    args = ap.parse_args()
    hashes = [h.strip() for h in open(args.hashes) if h.strip()]
    if len(hashes) < args.chunks:
        raise SystemExit(f"need at least {args.chunks} chunks, have {len(hashes)}")
    print(f"{args.clients} clients, {args.chunks} chunks per prompt from {len(hashes)} (Zipf {args.zipf}), "
          f"ratio {args.ratio}", flush=True)
    lat, errs, used, wall = run_phase(args, hashes, args.ratio, args.seconds, "blend")
    rb = report("blend", lat, errs, wall, args.pid)
    if args.no_full:
        return 1 if errs else 0
    lat_f, errs_f, _, wall_f = run_phase(args, hashes, 1, args.full_seconds or args.seconds, "full", prompts=used)
    rf = report("full", lat_f, errs_f, wall_f, args.pid)
    print(f"throughput blend / full prefill: {rb / rf:.2f}x" if rf > 0 else "no full prefill finished")
    return 1 if errs or errs_f else 0


if __name__ == "__main__":
    raise SystemExit(main())
