#!/bin/bash
# bench/device.sh - everything a lent GPU machine does, in one run, building
# nothing there: the CUDA checks (`make test-gpu`'s: every op against the CPU
# backend, the daemon blending on CUDA through a mount, a quantized model on
# CUDA vs the CPU, llama.cpp's CUDA server restoring a CUDA blend), then
# kvfs's CUDA path side by side with llama.cpp's CUDA build on one 8B-shaped
# Q4_K_M file made there (tools/mkmodel-8b.py --fast + llama-quantize):
# full prefill at 512 and 3,104 tokens (llama-bench), kvfs's prefill, blend
# TTFT, 8 clients at once and device memory (gpu_blend), llama-server with 8
# slots for the same 8 clients.  Every figure goes under $OUT.
#
#   here:   tools/build-device-kit.sh      (build-gpu/: binaries, libraries, llama.cpp CUDA)
#   there:  bench/device.sh                (carry build-gpu; about 4 minutes on an H200, 100 s of
#                                           it making the 8B file)
#   here:   bench/device.sh --dry-run      (what runs without a GPU: the kit is complete and
#                                           loads, the scripts parse; the CUDA parts skip)
#
# Environment: OUT (default build-gpu/out), KIT (default build-gpu),
# MODEL8B (an 8B Q4_K_M file to use instead of making one), SKIP_TESTS=1,
# SKIP_LLAMA_BENCH=1, TEST_TIMEOUT=S (per test, default 150), QUICK=1 (the
# checks, then only the synthetic model's prefill), DEADLINE=S (seconds into
# the run after which the optional last steps, f32 attention and llama-server,
# are skipped).
# Exit: 0 done, 77 dry run or no GPU (nothing failed), 1 something failed.
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
KIT=${KIT:-build-gpu}
case $KIT in /*) ;; *) KIT=$ROOT/$KIT ;; esac
OUT=${OUT:-$KIT/out}
mkdir -p "$OUT"
DRY=0
[ "${1:-}" = --dry-run ] && DRY=1
[ "${1:-}" = --help ] && { sed -n '2,/^# Exit:/p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
FAILED=0
log() { echo "[device $(date -u +%T)] $*" | tee -a "$OUT/device.log" >&2; }
bad() { log "FAIL: $*"; FAILED=1; }
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/kvfs-device.XXXXXX")
trap 'rm -rf "$SCRATCH"' EXIT
unpack() { python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$1" "$SCRATCH"; }

# 1. the kit: complete, and every library resolves (but the driver's libcuda
# where no driver is installed)
for f in kvfs kvfsctl gpu_blend libkvfs-cuda.so tests/gpu_test_backend_ops bin/fusermount3 lib.tar.xz; do
    [ -e "$KIT/$f" ] || bad "the kit lacks $KIT/$f (tools/build-device-kit.sh)"
done
[ $FAILED = 0 ] || exit 1
unpack "$KIT/lib.tar.xz" || { bad "cannot unpack lib.tar.xz"; exit 1; }
export PATH=$KIT/bin:$PATH LD_LIBRARY_PATH=$SCRATCH/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
missing=$(ldd "$KIT/kvfs" "$KIT/kvfsctl" "$KIT/gpu_blend" "$KIT/libkvfs-cuda.so" 2>&1 | grep 'not found' | sort -u)
[ -z "$missing" ] || bad "libraries not found: $missing"
"$KIT/kvfsctl" --help > /dev/null 2>&1 || bad "kvfsctl does not run"
python3 "$ROOT/tools/mkmodel-8b.py" --help > /dev/null || bad "tools/mkmodel-8b.py does not parse"
LLAMA=$SCRATCH/llama-cuda/bin
if [ -f "$KIT/llama-cuda.tar.xz" ]; then
    unpack "$KIT/llama-cuda.tar.xz" ||
        bad "cannot unpack llama-cuda.tar.xz"
    for b in llama-server llama-bench llama-quantize; do [ -x "$LLAMA/$b" ] || bad "llama-cuda lacks $b"; done
    export LD_LIBRARY_PATH=$LLAMA:$LD_LIBRARY_PATH
    missing=$(ldd "$LLAMA"/llama-bench "$LLAMA"/llama-server "$LLAMA"/llama-quantize 2>&1 | grep 'not found' |
              grep -v 'libcuda.so' | sort -u)
    [ -z "$missing" ] || bad "llama.cpp CUDA libraries not found: $missing"
else
    log "note: the kit carries no llama.cpp CUDA engine: the side-by-side rows are left out"
    LLAMA=
fi
[ -d "$KIT/gguf-py" ] && export GGUF_PY=$KIT/gguf-py
if [ $DRY = 1 ] || ! nvidia-smi -L > /dev/null 2>&1; then
    [ $FAILED = 0 ] || exit 1
    log "dry run: the kit is complete and loads; no GPU here, so the CUDA parts are skipped"
    exit 77
fi
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    grep -m1 'model name' /proc/cpuinfo
    nproc
} > "$OUT/machine.txt" 2>&1
log "machine: $(tr '\n' ' ' < "$OUT/machine.txt")"

# 2. the checks
if [ "${SKIP_TESTS:-0}" != 1 ]; then
    log "make test-gpu's checks"
    TEST_TIMEOUT=${TEST_TIMEOUT:-150} LLAMA_CUDA_BIN=$LLAMA LLAMA_QUANTIZE=$LLAMA/llama-quantize BUILD=$KIT \
        tests/run.sh gpu > "$OUT/test-gpu.txt" 2>&1 ||
        bad "tests/run.sh gpu: $(tail -n 1 "$OUT/test-gpu.txt")"
    tar -czf "$OUT/test-logs.tar.gz" -C "$KIT" test-logs 2>/dev/null
    tail -n 1 "$OUT/test-gpu.txt" | tee -a "$OUT/device.log"
fi

# QUICK=1: then only the synthetic 8B-shaped model's prefill (f32 weights made
# in memory, no llama.cpp needed), tensor-core and f32 attention
if [ "${QUICK:-0}" = 1 ]; then
    : > "$OUT/gpu_blend.txt"
    for attn in default f32; do
        KVFS_CUDA_ATTN=$attn GPU_BLEND_PREFILL_ONLY=1 "$KIT/gpu_blend" cuda >> "$OUT/gpu_blend.txt" 2>> "$OUT/device.log" ||
            bad "gpu_blend (synthetic, attention $attn)"
    done
    cat "$OUT/gpu_blend.txt" >&2
    log "done, quick ($([ $FAILED = 0 ] && echo 'all passed' || echo 'with failures'))"
    exit $FAILED
fi

# 3. the 8B-shaped Q4_K_M file, in memory-backed /dev/shm where it fits
M=${MODEL8B:-}
if [ -z "$M" ]; then
    [ -n "$LLAMA" ] || { bad "no llama-quantize to make the 8B file with"; exit 1; }
    dir=/dev/shm
    [ "$(df -Pk /dev/shm 2>/dev/null | awk 'NR==2{print $4}')" -gt 25000000 ] 2>/dev/null || dir=$SCRATCH
    M=$dir/kvfs-8b-q4_k_m.gguf
    log "making $M"
    python3 "$ROOT/tools/mkmodel-8b.py" "$M" --fast --quantizer "$LLAMA/llama-quantize" 2> "$OUT/mkmodel.txt" ||
        { bad "mkmodel-8b: $(tail -n 2 "$OUT/mkmodel.txt")"; exit 1; }
fi

# 4. llama.cpp CUDA: prefill at 512 and 3,104 tokens, every layer on the GPU,
# flash attention on and off (its default is automatic)
if [ -n "$LLAMA" ] && [ "${SKIP_LLAMA_BENCH:-0}" != 1 ]; then
    log "llama-bench"
    "$LLAMA/llama-bench" -m "$M" -ngl 99 -p 512,3104 -n 0 -b 4096 -ub 512 -fa 0,1 -r 3 -o md \
        > "$OUT/llama-bench.md" 2> "$SCRATCH/llama-bench.err" || bad "llama-bench: $(tail -n 5 "$SCRATCH/llama-bench.err")"
    cat "$OUT/llama-bench.md" >&2
fi

# 5. kvfs on CUDA: device memory, prefill tokens/s, blend TTFT (the chunks in
# memory, in the RAM tier, streamed from files f16 and q4s)
log "gpu_blend"
"$KIT/gpu_blend" cuda "$M" > "$OUT/gpu_blend.txt" 2> "$OUT/gpu_blend.err" || bad "gpu_blend: $(tail -n 5 "$OUT/gpu_blend.err")"
sed -n '/^profile/,/^kvfs backend profile/p; /^  [a-z_0-9]* *[0-9]* calls/p' "$OUT/gpu_blend.err" >&2
cat "$OUT/gpu_blend.txt" >&2
# the f32 attention kernels beside the tensor cores' (prefill only)
late() { [ "$SECONDS" -ge "${DEADLINE:-1000000}" ] && log "skipped: $1 (past DEADLINE=$DEADLINE s)"; }
late "f32 attention" || {
    KVFS_CUDA_ATTN=f32 GPU_BLEND_PREFILL_ONLY=1 "$KIT/gpu_blend" cuda "$M" > "$SCRATCH/f32.txt" 2>> "$OUT/device.log" &&
        grep 'full prefill' "$SCRATCH/f32.txt" >> "$OUT/gpu_blend.txt"
} || bad "gpu_blend with f32 attention"

# 6. llama-server (CUDA, 8 slots): 8 clients at once sending the same
# 3,104-token prompts (a question of their own each time) for a full prefill
if [ -n "$LLAMA" ] && ! late "llama-server, 8 clients"; then
    log "llama-server, 8 slots, 8 clients"
    PORT=$((20000 + RANDOM % 20000))
    "$LLAMA/llama-server" -m "$M" -ngl 99 -np 8 -c 26624 -b 4096 -ub 512 --cache-ram 0 --port "$PORT" \
        > "$SCRATCH/server.log" 2>&1 &
    SRV=$!
    python3 - "$PORT" <<'PY' >> "$OUT/gpu_blend.txt" 2>> "$OUT/device.log" || bad "llama-server, 8 clients: $(tail -n 5 "$SCRATCH/server.log")"
import json, sys, threading, time, urllib.request
port, V, K, L, Q = sys.argv[1], 128256, 6, 512, 32  # gpu_blend's prompt: the 8B-shaped file's vocabulary
base = [300 + (i * 7919) % (V - 300) for i in range(K * L + Q)]
def post(ids):
    r = urllib.request.Request(f'http://localhost:{port}/completion', headers={'Content-Type': 'application/json'},
                               data=json.dumps({'prompt': ids, 'n_predict': 1, 'cache_prompt': False}).encode())
    return json.loads(urllib.request.urlopen(r, timeout=300).read())
for _ in range(1200):
    try:
        urllib.request.urlopen(f'http://localhost:{port}/health', timeout=2)
        break
    except Exception:
        time.sleep(0.1)
post(base)  # warm
done, errors, lock, end = [0], [], threading.Lock(), time.time() + 20
def client(k):
    b = 0
    while time.time() < end:
        ids = base[:-1] + [300 + (k * 131 + b * 17) % 1000]
        b += 1
        try:
            d = post(ids)
            assert d['timings']['prompt_n'] >= K * L, d['timings']  # a full prefill, nothing cached
        except Exception as e:  # counted, and the step fails
            with lock:
                errors.append(repr(e))
            return
        with lock:
            done[0] += 1
t = time.time()
th = [threading.Thread(target=client, args=(k,)) for k in range(8)]
[x.start() for x in th]
[x.join() for x in th]
t = time.time() - t
print(f'llama-server CUDA, 8 slots, 8 clients at once, full prefill of {K * L + Q}-token prompts: '
      f'{done[0] / t:.2f} prompts/s ({done[0]} in {t:.1f} s)')
if errors:
    sys.exit(f'{len(errors)} requests failed: {errors[0]}')
PY
    kill "$SRV" 2>/dev/null
    wait "$SRV" 2>/dev/null
fi

# 7. side by side
python3 - "$OUT" <<'PY' > "$OUT/summary.md" || bad "summary"
import re, sys
out = sys.argv[1]
def read(n):
    try:
        return open(f"{out}/{n}").read()
    except OSError:
        return ""
g, lb = read("gpu_blend.txt"), read("llama-bench.md")
ll = {}  # (fa, tokens) -> tokens/s, from llama-bench's markdown table
cols = None
for line in lb.splitlines():
    c = [x.strip() for x in line.strip().strip('|').split('|')]
    if 'test' in c and 't/s' in c:
        cols = c
        continue
    if not cols or len(c) != len(cols):
        continue
    m = re.match(r'pp(\d+)$', c[cols.index('test')])
    if m:
        fa = c[cols.index('fa')] if 'fa' in cols else '?'
        ll[(fa, int(m.group(1)))] = float(c[cols.index('t/s')].split('±')[0])
for (fa, n), v in sorted(ll.items()):
    print(f"llama.cpp CUDA, flash attention {fa}: pp{n} {v:.0f} tokens/s  ")
print()
m = re.search(r'full prefill: 512 tokens ([\d.]+) ms \((\d+) tokens/s\), 3104 tokens ([\d.]+) ms \((\d+) tokens/s\)'
              r' \(medians of 5; attention default\)', g)
print("| | kvfs CUDA | llama.cpp CUDA (best of fa 0/1) | kvfs / llama.cpp |\n|---|---|---|---|")
for n, i in ((512, 2), (3104, 4)):
    k = float(m.group(i)) if m else float('nan')
    l = max([v for (fa, t), v in ll.items() if t == n] or [float('nan')])
    print(f"| full prefill {n} tokens, tokens/s | {k:.0f} | {l:.0f} | {k / l:.2f}x |")
l3104 = max([v for (fa, t), v in ll.items() if t == 3104] or [float('nan')])
ttft_ll = 3104 / l3104 * 1e3
for row in re.findall(r'\| (blend ratio 0\.15, query selection[^|]*) \| ([\d.]+) \|', g):
    print(f"| {row[0]}: TTFT ms | {float(row[1]):.1f} | {ttft_ll:.1f} (full prefill) | {ttft_ll / float(row[1]):.2f}x faster |")
c8 = re.search(r'8 clients ([\d.]+) prompts/s', g)
s8 = re.search(r'llama-server CUDA, 8 slots, 8 clients at once.*?: ([\d.]+) prompts/s', g)
if c8 and s8:
    print(f"| 8 clients at once: prompts/s | {float(c8.group(1)):.2f} (blend 0.15, 8 lanes) | {float(s8.group(1)):.2f} "
          f"(llama-server, 8 slots, full prefill) | {float(c8.group(1)) / float(s8.group(1)):.2f}x |")
mm = re.search(r'device memory for the model: ([\d.]+) GiB for a ([\d.]+) GiB file \(([\d.]+)x\)', g)
if mm:
    print(f"| device memory for the model | {mm.group(1)} GiB ({mm.group(3)}x the file) | | |")
cv = re.search(r'clients at once, the curve: .*', g)
if cv:
    print(f"\nkvfs {cv.group(0)}")
PY
cat "$OUT/summary.md" >&2
[ -n "${MODEL8B:-}" ] || rm -f "$M"
log "done ($([ $FAILED = 0 ] && echo 'all passed' || echo 'with failures'))"
exit $FAILED
