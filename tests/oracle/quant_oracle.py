"""Our ggml decoding against llama.cpp's own, bit for bit.

Weights: random blocks of every quantized type kvfs reads (random bytes, the
f16 scale fields set to finite values of moderate size, subnormals and zero
included) and random finite F16/BF16/F32 values, decoded by ggml (its type
traits' to_float, i.e. dequantize_row_*, called through ctypes on the
libggml-base.so that llama-cpp-python ships) and by `kvfsctl dequant`.

Activations: the values llama.cpp's CPU backend multiplies a quantized weight
by (its vec_dot type's from_float: quantize_row_q8_0, q8_1, q8_K in
libggml-cpu.so, then decoded) against our CPU backend's act_quant.

Every value must match as uint32; prints the counts per type."""
import ctypes, os, subprocess, sys, tempfile
import numpy as np
sys.path.insert(0, os.path.dirname(__file__))
from paths import KVFSCTL
import llama_cpp

LIB = os.path.join(os.path.dirname(llama_cpp.__file__), 'lib')
base = ctypes.CDLL(os.path.join(LIB, 'libggml-base.so'))
cpu = ctypes.CDLL(os.path.join(LIB, 'libggml-cpu.so'))


class Traits(ctypes.Structure):  # ggml.h struct ggml_type_traits
    _fields_ = [('type_name', ctypes.c_char_p), ('blck_size', ctypes.c_int64),
                ('blck_size_interleave', ctypes.c_int64), ('type_size', ctypes.c_size_t),
                ('is_quantized', ctypes.c_bool), ('to_float', ctypes.c_void_p), ('from_float_ref', ctypes.c_void_p)]


class TraitsCpu(ctypes.Structure):  # ggml-cpu.h struct ggml_type_traits_cpu
    _fields_ = [('from_float', ctypes.c_void_p), ('vec_dot', ctypes.c_void_p), ('vec_dot_type', ctypes.c_int),
                ('nrows', ctypes.c_int64)]


base.ggml_get_type_traits.restype = ctypes.POINTER(Traits)
base.ggml_get_type_traits.argtypes = [ctypes.c_int]
cpu.ggml_get_type_traits_cpu.restype = ctypes.POINTER(TraitsCpu)
cpu.ggml_get_type_traits_cpu.argtypes = [ctypes.c_int]
cpu.ggml_cpu_init()
ROW_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)  # to_float / from_float

SEED = int(os.environ.get('KVFS_ORACLE_SEED', '17'))
rng = np.random.default_rng(SEED)

# type: (ggml id, byte offsets of the f16 scales in a block); 0 blocks of F16/BF16/F32 are plain values
WEIGHTS = {
    'F32': (0, None), 'F16': (1, None), 'BF16': (30, None),
    'Q4_0': (2, [0]), 'Q4_1': (3, [0, 2]), 'Q5_0': (6, [0]), 'Q5_1': (7, [0, 2]), 'Q8_0': (8, [0]),
    'Q4_K': (12, [0, 2]), 'Q5_K': (13, [0, 2]), 'Q6_K': (14, [208]),
    'MXFP4': (39, []),  # its scale an E8M0 byte: any byte is one
}
N_VALUES = 1 << 20  # per type


def traits(t):
    return base.ggml_get_type_traits(t).contents


def finite_f16(n):
    """random f16 bit patterns of moderate size: exponent field 0..20 (zero and
    subnormals up to about +-64), either sign"""
    e = rng.integers(0, 21, n, dtype=np.uint16)
    m = rng.integers(0, 1024, n, dtype=np.uint16)
    s = rng.integers(0, 2, n, dtype=np.uint16)
    return (s << 15) | (e << 10) | m


def plain_values(name, n):
    """random finite bit patterns, every exponent but inf/NaN's"""
    if name == 'F32':
        u = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
        u[(u >> 23 & 0xff) == 0xff] &= 0xbfffffff
        return u.view(np.uint8)
    u = rng.integers(0, 1 << 16, n, dtype=np.uint32).astype(np.uint16)
    if name == 'F16':
        u[(u >> 10 & 0x1f) == 0x1f] &= 0xbfff
    else:
        u[(u >> 7 & 0xff) == 0xff] &= 0xbfff
    return u.view(np.uint8)


def kvfsctl(args, data, tmp):
    src, dst = os.path.join(tmp, 'in'), os.path.join(tmp, 'out')
    with open(src, 'wb') as f:
        f.write(data.tobytes())
    r = subprocess.run([KVFSCTL, 'dequant'] + args + [src, dst], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f'kvfsctl dequant {" ".join(args)} failed: {r.stderr.strip()}')
    return np.fromfile(dst, dtype=np.float32)


def compare(label, ref, ours):
    if ours.shape != ref.shape:
        print(f'FAIL {label}: {ours.size} values from kvfs, {ref.size} from ggml')
        return False
    a, b = ref.view(np.uint32), ours.view(np.uint32)
    bad = np.nonzero(a != b)[0]
    print(f'{label}: {a.size - bad.size}/{a.size} values bit-exact')
    for i in bad[:5]:
        print(f'    [{i}] ggml {ref[i]!r} (0x{a[i]:08x})  kvfs {ours[i]!r} (0x{b[i]:08x})')
    return bad.size == 0


def weights(tmp):
    ok = True
    for name, (t, scales) in WEIGHTS.items():
        tr = traits(t)
        assert tr.type_name.decode().upper() == name, (tr.type_name, name)
        blk, size = tr.blck_size, tr.type_size
        nb = N_VALUES // blk
        if scales is None:
            raw = plain_values(name, N_VALUES)
        else:
            raw = rng.integers(0, 256, (nb, size), dtype=np.uint8)
            for off in scales:
                raw[:, off:off + 2] = finite_f16(nb).view(np.uint8).reshape(nb, 2)
            raw = raw.reshape(-1)
        assert raw.size == nb * size
        if tr.to_float:
            ref = np.empty(nb * blk, dtype=np.float32)
            ROW_FN(tr.to_float)(raw.ctypes.data, ref.ctypes.data, nb * blk)
        else:  # F32: ggml has nothing to convert
            ref = raw.view(np.float32).copy()
        ok &= compare(f'{name} ({t}, {blk} per {size}-byte block)', ref, kvfsctl(['--type', str(t)], raw, tmp))
    return ok


def activations(dim, rows):
    """rows of activation-like values: normal at scales from 1e-3 to 1e3, with
    ties (halves), zeros, a block whose largest magnitude is negative and
    one where +max and -max both occur"""
    x = (rng.standard_normal((rows, dim)) * 10.0 ** rng.uniform(-3, 3, (rows, 1))).astype(np.float32)
    x[0] = np.round(rng.uniform(-300, 300, dim)) / 2  # halves: ties at many scales
    x[1] = 0.0
    x[2, :256] = np.arange(256) - 200.0  # block maximum magnitude negative
    x[3, :256] = np.arange(256) - 128.0
    x[3, 255] = 128.0  # +128 and -128
    return x


def decode_act(t, q, n):
    if t == 9:  # Q8_1: f16 d, f16 s, 32 int8; value q * d (ggml has no to_float for it)
        b = q.reshape(-1, 36)
        d = b[:, 0:2].copy().view(np.float16).astype(np.float32)
        v = b[:, 4:].view(np.int8).astype(np.float32)
        return (v * d).reshape(-1)
    out = np.empty(n, dtype=np.float32)
    fn = traits(t).to_float or ctypes.cast(base.dequantize_row_q8_K, ctypes.c_void_p).value  # Q8_K: not in the traits
    ROW_FN(fn)(q.ctypes.data, out.ctypes.data, n)
    return out


def act_quant(tmp):
    ok = True
    for name, t, dim in (('Q8_0', 8, 2048), ('Q8_1', 9, 2048), ('Q8_K', 15, 2048)):
        x = activations(dim, 256)
        tr, trc = traits(t), cpu.ggml_get_type_traits_cpu(t).contents
        q = np.zeros(x.size // tr.blck_size * tr.type_size, dtype=np.uint8)
        for r in range(x.shape[0]):  # from_float is per row in ggml's matmul
            row = np.ascontiguousarray(x[r])
            nbytes = dim // tr.blck_size * tr.type_size
            ROW_FN(trc.from_float)(row.ctypes.data, q.ctypes.data + r * nbytes, dim)
        ref = decode_act(t, q, x.size)
        ok &= compare(f'activations through {name} ({t}, rows of {dim})', ref,
                      kvfsctl(['--act', str(t), '--dim', str(dim)], x.reshape(-1), tmp))
    return ok


if not os.access(KVFSCTL, os.X_OK):
    raise SystemExit(f'{KVFSCTL} not built')
print(f'ggml from {LIB}, seed {SEED}', flush=True)
with tempfile.TemporaryDirectory(prefix='kvfs-quant-oracle.') as tmp:
    ok = weights(tmp)
    ok = act_quant(tmp) and ok
print('all bit-exact' if ok else 'MISMATCHES (above)')
sys.exit(0 if ok else 1)
