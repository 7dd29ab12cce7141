#!/bin/bash
# The exactness properties at every x86-64 ISA level this CPU runs, not only
# its best (which the rest of the suite covers): the kernels are chosen at
# run time (gpu/cpu/isa.c) and KVFS_CPU_LEVEL forces a lower level, so an
# AVX-512 machine checks what an AVX2-only or an SSE4.2-only one computes.
# Per level: a prefill split in calls equals one call bit for bit
# (test_forward), the quantized kernels match their definitions (test_qmm),
# blends are exact where they must be (test_blend), and on the real models
# a blend at ratio 1.0 is the full prefill (KL 0, the same continuation).
. "$(dirname "$0")/../lib.sh"
read -r -a levels <<< "$("$KVFSCTL" --version | sed -n 's/^cpu levels: //p')"
[ ${#levels[@]} -gt 0 ] || { fail "kvfsctl --version lists the CPU levels"; finish; }
best=${levels[-1]}
check "kvfsctl --version names the level in use ($best)" sh -c \
    "'$KVFSCTL' --version | grep -q '^cpu kernels: .*' && KVFS_CPU_LEVEL=v2 '$KVFSCTL' --version | grep -q '^cpu kernels: x86-64-v2 '"
check "an unknown KVFS_CPU_LEVEL is refused with the levels named" sh -c \
    "! KVFS_CPU_LEVEL=avx9 '$BUILD/tests/test_forward' > '$T/bad.log' 2>&1 && grep -q 'not a level' '$T/bad.log'"
# a daemon forced to a lower level says so in .kvfs/stats
KVFS_CPU_LEVEL=${levels[0]} mount_kvfs lv || { fail "mount"; finish; }
check ".kvfs/stats names the level in use, the CPU's best and the BLAS kernel" python3 - "$T/lv.mnt/.kvfs/stats" "$best" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))['cpu']
print(c)
short = {'x86-64-v2': 'v2', 'x86-64-v3': 'v3', 'x86-64-v4': 'v4', 'x86-64-v4+vnni': 'vnni'}
sys.exit(not (c['level'] == 'x86-64-v2' and short.get(c['best']) == sys.argv[2] and c['blas']))
PY
unmount_kvfs lv
[ ${#levels[@]} -gt 1 ] || skip "this CPU runs one level (${levels[*]}): the suite covers it"
Q=$'\n\nQuestion: Which licenses are these?\nAnswer:'
head -c 700 /usr/share/common-licenses/GPL-3 > "$T/a.txt"
head -c 700 /usr/share/common-licenses/Apache-2.0 > "$T/b.txt"
head -c 700 /usr/share/common-licenses/MPL-2.0 > "$T/c.txt"
models=()
for m in SmolLM2-135M-Instruct.Q4_1.gguf gemma-3-270m-q4_k_m.gguf; do
    [ -s "$KVFS_ROOT/models/$m" ] && models+=("$KVFS_ROOT/models/$m")
done
for l in "${levels[@]}"; do
    [ "$l" = "$best" ] && continue
    for t in test_forward test_qmm test_blend; do
        check "$t at $l" sh -c \
            "KVFS_CPU_LEVEL=$l '$BUILD/tests/$t' > '$T/$t.$l.log' 2>&1 || { tail -n 20 '$T/$t.$l.log'; exit 1; }"
    done
    for m in "${models[@]}"; do
        name=$(basename "$m" .gguf)
        KVFS_CPU_LEVEL=$l "$KVFSCTL" eval -m "$m" --json --greedy 4 --ratio 1 --select query --query "$Q" \
            "$T/a.txt" "$T/b.txt" "$T/c.txt" > "$T/eval.$l.json" 2> "$T/eval.$l.err"
        check "$name at $l: a blend at ratio 1.0 is the full prefill (KL 0, same continuation)" \
            python3 - "$T/eval.$l.json" <<'PY'
import json, sys
r = {x['method']: x for x in json.load(open(sys.argv[1]))['results']}
b = r['blend 1.00']
print(b)
sys.exit(not (b['kl'] == 0 and b['top1'] == 1 and b['greedy_agree'] == 1.0))
PY
    done
done
[ ${#models[@]} -gt 0 ] || echo "note: no real model here (tools/fetch-model.sh): the ratio-1.0 checks ran on synthetic models only (test_blend)"
finish
