#!/bin/bash
# The content hash as documented in kvfs(5), recomputed by an independent
# Python reader of the v1 header, must equal the name kvfs gives a chunk.
. "$(dirname "$0")/../lib.sh"
mount_kvfs a || exit 1
M=$T/a.mnt
for args in "--tokens 7" "--tokens 300 --dtype f32 --pos0 17" "--tokens 5 --dtype bf16 --layers 2 --kv-heads 1 --head-dim 128" \
            "--tokens 7 --salt tenant-a"; do
    synth "$T/x.kv" $args > /dev/null
    cp "$T/x.kv" "$M/incoming/"
    ref=$(python3 - "$T/x.kv" <<'PY'
import hashlib, struct, sys
b = open(sys.argv[1], 'rb').read()
assert b[:8] == b'KVFSCHNK'
dtype, flags, n_tokens, pos0 = struct.unpack_from('<IIII', b, 24)
fingerprint = b[40:120]
tokens = b[128:128 + 4 * n_tokens]
n_layer, = struct.unpack_from('<I', b, 40)
salt_at = 128 + 4 * n_tokens + 24 * n_layer  # with flag 0x8: the salt digest
salt = b[salt_at:salt_at + 32] if flags & 8 else b''
if flags & 8:  # a tenant's salt string as the digest kvfs keeps
    assert salt == hashlib.sha256(b'kvfs-salt-v1\0tenant-a').digest()
h = hashlib.sha256(b'kvfs-chunk-v1\0' + fingerprint + struct.pack('<IIII', dtype, flags, pos0, n_tokens) + tokens
                   + salt)
print(h.hexdigest())
PY
)
    check "python reference hash $ref is a chunk name ($args)" test -e "$M/chunks/$ref.kv"
    check "and its bytes are the file ($args)" cmp "$T/x.kv" "$M/chunks/$ref.kv"
done
finish
