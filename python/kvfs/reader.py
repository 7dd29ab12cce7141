"""Chunk files, format version 1 (kvfs(5)), as numpy views over a read-only
mapping: k(layer) and v(layer) copy nothing (for the block-quantized q8 and
q4 they are decoded float32 arrays)."""
import errno
import hashlib
import math
import mmap
import os
import stat
import struct

import numpy as np

from . import _xxh3
from .errors import FormatError, KvfsError

MAGIC = b"KVFSCHNK"
VERSION = 1
ALIGN = 4096
FIXED_HEADER_SIZE = 128
MAX_LAYERS = 1024
MAX_TOKENS = 1 << 24
LAYER_ENTRY = struct.Struct("<QQQ")  # offset, size, checksum

DTYPE_F32, DTYPE_F16, DTYPE_BF16, DTYPE_Q8, DTYPE_Q4, DTYPE_Q4S = 1, 2, 3, 4, 5, 6
FLAG_KEYS_ROPED, FLAG_BLENDED, FLAG_FULL_PREFILL, FLAG_SALTED = 0x1, 0x2, 0x4, 0x8
# V not stored: each V row is its K row with each head's first rope_dim values zero (latent attention, kvfs(5))
FLAG_V_FROM_K = 0x10
# layers of their own n_kv_head x head_dim, and layers that read an earlier layer's cache and store
# none (gemma4): a table of (n_kv_head, head_dim, rope_dim, kv_source) per layer after the salt (kvfs(5))
FLAG_LAYER_SHAPES = 0x20
LAYER_SHAPE = struct.Struct("<IIII")
SALT_BYTES = 32  # with FLAG_SALTED, right after the layer table; hashed into the name
ROPE_NORM, ROPE_NEOX = 0, 2

# bf16 has no numpy dtype: its views hold the raw bits (see bf16_to_f32)
_NP_DTYPE = {DTYPE_F32: np.dtype("<f4"), DTYPE_F16: np.dtype("<f2"), DTYPE_BF16: np.dtype("<u2")}
_DTYPE_NAME = {DTYPE_F32: "f32", DTYPE_F16: "f16", DTYPE_BF16: "bf16", DTYPE_Q8: "q8", DTYPE_Q4: "q4",
               DTYPE_Q4S: "q4s"}
# block-quantized dtypes (kvfs(5)): values per group and bytes per block,
# of keys (per channel over tokens) and of values (per token over channels)
_QUANT = {DTYPE_Q8: (32, 34, 32, 34), DTYPE_Q4: (64, 36, 32, 20), DTYPE_Q4S: (32, 20, 64, 36)}


def _decode_blocks(dtype, blocks, g):
    """blocks (..., block bytes) of g values -> (..., g) float32 values."""
    d = np.ascontiguousarray(blocks[..., 0:2]).view("<f2").astype(np.float32)
    if dtype == DTYPE_Q8:
        return d * np.ascontiguousarray(blocks[..., 2:2 + g]).view(np.int8).astype(np.float32)
    m = np.ascontiguousarray(blocks[..., 2:4]).view("<f2").astype(np.float32)
    nib = blocks[..., 4:4 + g // 2]
    q = np.stack((nib & 15, nib >> 4), axis=-1).reshape(blocks.shape[:-1] + (g,))  # low nibble first
    return m + d * q.astype(np.float32)

# magic, version, header_size, file_size, dtype, flags, n_tokens, pos0, then
# the fingerprint (n_layer, n_kv_head, head_dim, rope_type, rope_theta,
# rope_dim, arch, model_id, n_head, n_embd), then header_checksum
_FIXED = struct.Struct("<8sIIQIIIIIIIIfI16s32sIIQ")
_FP = slice(40, 120)
_CHECKSUM_AT = 120


def _align(v):
    return (v + ALIGN - 1) // ALIGN * ALIGN


def header_size_for(n_tokens, n_layer, flags=0):
    salt = SALT_BYTES if flags & FLAG_SALTED else 0
    shapes = LAYER_SHAPE.size * n_layer if flags & FLAG_LAYER_SHAPES else 0
    return _align(FIXED_HEADER_SIZE + 4 * n_tokens + LAYER_ENTRY.size * n_layer + salt + shapes)


def salt_digest(salt):
    """A tenant's salt (str or bytes) as the 32 bytes a salted chunk carries
    (kvfs_salt_digest): SHA-256 of b"kvfs-salt-v1\\0" and the salt."""
    if isinstance(salt, str):
        salt = salt.encode()
    return hashlib.sha256(b"kvfs-salt-v1\0" + bytes(salt)).digest()


def bf16_to_f32(bits):
    """float32 copy of a bf16 view (uint16 bit patterns)."""
    return (np.asarray(bits, dtype=np.uint32) << 16).view(np.float32)


class ChunkFile:
    """An open chunk file.  Views returned by k(), v() and tokens stay valid
    after close() for as long as they are referenced (they keep the mapping)."""

    def __init__(self, buf, name):
        self.name = name
        self._buf = buf

    # -- parsing ---------------------------------------------------------
    def _bad(self, err, why):
        return FormatError(err, "invalid chunk: " + why, self.name)

    def _parse(self, verify):
        buf, n = self._buf, len(self._buf)
        if n < FIXED_HEADER_SIZE:
            raise self._bad(errno.EINVAL, "truncated: %d bytes, a header needs at least %d" % (n, FIXED_HEADER_SIZE))
        (magic, self.version, self.header_size, self.file_size, self.dtype, self.flags, self.n_tokens, self.pos0,
         self.n_layer, self.n_kv_head, self.head_dim, self.rope_type, self.rope_theta, self.rope_dim, arch,
         self.model_id, self.n_head, self.n_embd, self.header_checksum) = _FIXED.unpack_from(buf, 0)
        if magic != MAGIC:
            raise self._bad(errno.EPROTO, "wrong magic: not a kvfs chunk file")
        if self.version != VERSION:
            raise self._bad(errno.EPROTO, "unsupported format version %d (this reader reads %d)"
                            % (self.version, VERSION))
        if self.dtype not in _DTYPE_NAME:
            raise self._bad(errno.EINVAL, "unknown dtype %d (1=f32, 2=f16, 3=bf16, 4=q8, 5=q4, 6=q4s)" % self.dtype)
        if self.flags & ~(FLAG_KEYS_ROPED | FLAG_BLENDED | FLAG_FULL_PREFILL | FLAG_SALTED | FLAG_V_FROM_K
                          | FLAG_LAYER_SHAPES):
            raise self._bad(errno.EINVAL, "unknown flags 0x%x" % self.flags)
        if self.flags & FLAG_LAYER_SHAPES and self.flags & FLAG_V_FROM_K:
            raise self._bad(errno.EINVAL, "layer shapes (flag 0x20) with V_FROM_K (0x10): not defined")
        if self.flags & FLAG_FULL_PREFILL and not self.flags & FLAG_BLENDED:
            raise self._bad(errno.EINVAL, "flag FULL_PREFILL (0x4) without BLENDED (0x2)")
        if not 0 < self.n_tokens <= MAX_TOKENS:
            raise self._bad(errno.EINVAL, "bad token count %d" % self.n_tokens)
        if not 0 < self.n_layer <= MAX_LAYERS:
            raise self._bad(errno.EINVAL, "bad layer count %d" % self.n_layer)
        if (not 0 < self.n_kv_head <= 4096 or not 0 < self.head_dim <= 4096 or self.n_head < self.n_kv_head
                or self.n_head % self.n_kv_head):
            raise self._bad(errno.EINVAL, "bad head shape: %d heads, %d kv heads, head_dim %d"
                            % (self.n_head, self.n_kv_head, self.head_dim))
        if self.rope_type not in (ROPE_NORM, ROPE_NEOX):
            raise self._bad(errno.EINVAL, "unknown rope type %d" % self.rope_type)
        if (self.rope_dim > self.head_dim or self.rope_dim % 2 or not self.rope_theta > 0
                or not math.isfinite(self.rope_theta)):
            raise self._bad(errno.EINVAL, "bad rope parameters (dim %d, theta %g)" % (self.rope_dim, self.rope_theta))
        if arch[:1] == b"\0" or b"\0" not in arch:
            raise self._bad(errno.EINVAL, "architecture name missing or not terminated")
        self.arch = arch.split(b"\0", 1)[0].decode("ascii", "replace")
        kv_dim = self.n_kv_head * self.head_dim
        if self.dtype in _QUANT:
            if kv_dim % 64 and not self.flags & FLAG_LAYER_SHAPES:  # shaped: each layer's own, in _layout
                raise self._bad(errno.EINVAL, "dtype %s needs kv_dim a multiple of 64, not %d"
                                % (_DTYPE_NAME[self.dtype], kv_dim))
            self.elem_size = 0
            self.layer_bytes = self._quant_layer_bytes(kv_dim)
        else:
            self.elem_size = _NP_DTYPE[self.dtype].itemsize
            self.layer_bytes = (1 if self.flags & FLAG_V_FROM_K else 2) * self.n_tokens * kv_dim * self.elem_size
        self.layer_stride = _align(self.layer_bytes)
        expect = header_size_for(self.n_tokens, self.n_layer, self.flags)
        if self.header_size != expect:
            raise self._bad(errno.EINVAL, "header size %d, expected %d for %d tokens, %d layers"
                            % (self.header_size, expect, self.n_tokens, self.n_layer))
        if n < self.header_size:
            raise self._bad(errno.EINVAL, "truncated: %d bytes, header alone is %d" % (n, self.header_size))
        table_at = FIXED_HEADER_SIZE + 4 * self.n_tokens
        shapes_at = table_at + LAYER_ENTRY.size * self.n_layer + (SALT_BYTES if self.flags & FLAG_SALTED else 0)
        self._layout(buf, shapes_at)
        if verify:
            head = bytes(buf[:self.header_size])
            zeroed = head[:_CHECKSUM_AT] + bytes(8) + head[_CHECKSUM_AT + 8:]
            if _xxh3.xxh3_64(zeroed) != self.header_checksum:
                raise self._bad(errno.EBADMSG, "header checksum mismatch")
        self._checksums = []
        for layer in range(self.n_layer):
            off, size, checksum = LAYER_ENTRY.unpack_from(buf, table_at + layer * LAYER_ENTRY.size)
            if off != self._offsets[layer] or size != self._sizes[layer]:
                raise self._bad(errno.EINVAL, "layer table entry %d inconsistent" % layer)
            self._checksums.append(checksum)
        used = table_at + LAYER_ENTRY.size * self.n_layer
        self.salt = None
        if self.flags & FLAG_SALTED:
            self.salt = bytes(buf[used:used + SALT_BYTES])
            used += SALT_BYTES
        if self.flags & FLAG_LAYER_SHAPES:
            used += LAYER_SHAPE.size * self.n_layer
        if np.frombuffer(buf, np.uint8, self.header_size - used, used).any():
            raise self._bad(errno.EINVAL, "non-zero header padding")
        if n != self.file_size:  # checked verified or not: views must not reach past the end
            raise self._bad(errno.EINVAL, "%s: %d bytes, header says %d"
                            % ("truncated" if n < self.file_size else "trailing data", n, self.file_size))
        self._fingerprint = bytes(buf[_FP])
        if verify:
            for layer in range(self.n_layer):
                self.verify_layer(layer)
                pad = self._offsets[layer] + self._sizes[layer]
                if np.frombuffer(buf, np.uint8, _align(self._sizes[layer]) - self._sizes[layer], pad).any():
                    raise self._bad(errno.EINVAL, "layer %d: non-zero padding" % layer)

    def _quant_layer_bytes(self, kv_dim):
        """A q8/q4/q4s layer's bytes at rows of kv_dim values (kvfs(5))."""
        gk, bk, gv, bv = _QUANT[self.dtype]
        r = 1 if self.dtype == DTYPE_Q4S else 0  # rows stored exactly (f16) before the blocks
        nq = self.n_tokens - r
        if self.flags & FLAG_V_FROM_K:  # MLA: the key blocks alone (q4s's exact row: K's f16 alone)
            return 2 * r * kv_dim + bk * -(-nq // gk) * kv_dim
        return 4 * r * kv_dim + bk * -(-nq // gk) * kv_dim + bv * nq * (kv_dim // gv)

    def _layout(self, buf, shapes_at):
        """Each layer's shape, offset and size (kvfs(5), Layer shapes);
        without FLAG_LAYER_SHAPES every layer has the fingerprint's."""
        if not self.flags & FLAG_LAYER_SHAPES:
            self.layer_shapes = [(self.n_kv_head, self.head_dim, self.rope_dim, l) for l in range(self.n_layer)]
            self._sizes = [self.layer_bytes] * self.n_layer
        else:
            self.layer_shapes = [LAYER_SHAPE.unpack_from(buf, shapes_at + l * LAYER_SHAPE.size)
                                 for l in range(self.n_layer)]
            self._sizes = []
            for l, (kvh, hd, rd, src) in enumerate(self.layer_shapes):
                why = None
                if src > l:
                    why = "reads a later layer's cache"
                elif src != l and (self.layer_shapes[src][3] != src or self.layer_shapes[src][:3] != (kvh, hd, rd)):
                    why = "reads a layer that stores no cache, or has another shape than its source"
                elif (not 0 < kvh <= self.n_kv_head or not 0 < hd <= self.head_dim or self.n_head % kvh
                      or rd > hd or rd % 2):
                    why = "bad shape (KV heads, head width or rotated dims)"
                elif self.dtype in _QUANT and kvh * hd % 64:  # blocks along the layer's own rows
                    why = "a quantized dtype (q8, q4, q4s) needs the layer's kv_dim (KV heads x head width) a multiple of 64"
                if why:
                    raise self._bad(errno.EINVAL, "layer shape %d: %s" % (l, why))
                if src != l:
                    self._sizes.append(0)
                elif self.dtype in _QUANT:
                    self._sizes.append(self._quant_layer_bytes(kvh * hd))
                else:
                    self._sizes.append(2 * self.n_tokens * kvh * hd * self.elem_size)
            self.layer_bytes = self.layer_stride = 0  # layers differ: see layer_shapes
        self._offsets, off = [], self.header_size
        for size in self._sizes:
            self._offsets.append(off)
            off += _align(size)
        if self.file_size != off:
            raise self._bad(errno.EINVAL, "file size field %d, expected %d from the shape" % (self.file_size, off))

    # -- header ----------------------------------------------------------
    @property
    def blended(self):
        """Composed by blending: an approximation of a prefill."""
        return bool(self.flags & FLAG_BLENDED)

    @property
    def full_prefill(self):
        """A blend result whose recipe was short enough to be prefilled in full: exact."""
        return bool(self.flags & FLAG_FULL_PREFILL)

    @property
    def salted(self):
        """A tenant's chunk: self.salt (32 bytes, else None) is in its name."""
        return bool(self.flags & FLAG_SALTED)

    @property
    def keys_roped(self):
        """Keys stored after RoPE at positions pos0, pos0+1, ..."""
        return bool(self.flags & FLAG_KEYS_ROPED)

    @property
    def dtype_name(self):
        return _DTYPE_NAME[self.dtype]

    @property
    def np_dtype(self):
        """numpy dtype of the views (uint16 bit patterns for bf16; float32,
        decoded, for q8 and q4)."""
        return _NP_DTYPE.get(self.dtype, np.dtype("<f4"))

    @property
    def quantized(self):
        """q8 or q4: k() and v() decode the stored blocks (an approximation
        within the bound kvfs(5) gives) into new float32 arrays."""
        return self.dtype in _QUANT

    @property
    def tokens(self):
        """Token ids, a uint32 view."""
        return np.frombuffer(self._mapped(), "<u4", self.n_tokens, FIXED_HEADER_SIZE)

    @property
    def model(self):
        """Fingerprint id: 16 hex, groups chunks by model (user.kvfs.model)."""
        return hashlib.sha256(self._fingerprint).hexdigest()[:16]

    @property
    def fingerprint_id(self):
        return self.model

    @property
    def hash(self):
        """Content hash, 64 hex: the chunk's name under chunks/ (kvfs(5))."""
        h = hashlib.sha256(b"kvfs-chunk-v1\0")
        h.update(self._fingerprint)
        h.update(struct.pack("<IIII", self.dtype, self.flags, self.pos0, self.n_tokens))
        h.update(self._mapped()[FIXED_HEADER_SIZE:FIXED_HEADER_SIZE + 4 * self.n_tokens])
        if self.salt is not None:
            h.update(self.salt)
        return h.hexdigest()

    # -- layers ----------------------------------------------------------
    def _mapped(self):
        if self._buf is None:
            raise ValueError("%s: closed" % self.name)
        return self._buf

    def _layer_at(self, layer):
        if not 0 <= layer < self.n_layer:
            raise IndexError("layer %d of %d" % (layer, self.n_layer))
        return self._offsets[layer]

    def _decoded(self, layer, second):
        gk, bk, gv, bv = _QUANT[self.dtype]
        self._layer_at(layer)  # bounds
        kvh, hd, _, layer = self.layer_shapes[layer]  # a layer that reads another's cache: that one's
        kv_dim, n = kvh * hd, self.n_tokens
        off = self._layer_at(layer)
        # q4s: the first row exact, K's then V's f16, before the blocks of the other rows
        r = 1 if self.dtype == DTYPE_Q4S else 0
        exact = np.frombuffer(self._mapped(), "<f2", r * kv_dim, off + 2 * r * kv_dim * second).astype(np.float32)
        off += (2 if self.flags & FLAG_V_FROM_K else 4) * r * kv_dim  # MLA: K's exact row alone
        n -= r
        n_tg = -(-n // gk)
        if not second:  # keys: per channel over token groups, blocks [token group][channel]
            b = np.frombuffer(self._mapped(), np.uint8, n_tg * kv_dim * bk, off).reshape(n_tg, kv_dim, bk)
            x = _decode_blocks(self.dtype, b, gk).transpose(0, 2, 1).reshape(n_tg * gk, kv_dim)[:n]
        else:  # values: per token over channel groups, blocks [token][channel group]
            b = np.frombuffer(self._mapped(), np.uint8, n * (kv_dim // gv) * bv, off + n_tg * kv_dim * bk)
            x = _decode_blocks(self.dtype, b.reshape(n, kv_dim // gv, bv), gv).reshape(n, kv_dim)
        x = np.concatenate((exact.reshape(r, kv_dim), x)) if r else x
        return np.ascontiguousarray(x).reshape(n + r, kvh, hd)

    def _view(self, layer, second):
        if self.dtype in _QUANT:
            return self._decoded(layer, second)
        self._layer_at(layer)  # bounds
        kvh, hd, _, layer = self.layer_shapes[layer]  # a layer that reads another's cache: that one's
        count = self.n_tokens * kvh * hd
        off = self._layer_at(layer) + (count * self.elem_size if second else 0)
        a = np.frombuffer(self._mapped(), self.np_dtype, count, off)
        return a.reshape(self.n_tokens, kvh, hd)

    def k(self, layer):
        """Keys of LAYER: a read-only view of shape (n_tokens, n_kv_head, head_dim) (with
        FLAG_LAYER_SHAPES the layer's own, layer_shapes[layer]; a layer that stores no cache
        gives its source's)."""
        return self._view(layer, False)

    def v(self, layer):
        """Values of LAYER, the same shape, right after the keys (with FLAG_V_FROM_K a
        new array: the keys with each head's first rope_dim values zero)."""
        if self.flags & FLAG_V_FROM_K:
            v = np.array(self._view(layer, False))
            v[:, :, :self.rope_dim] = 0
            return v
        return self._view(layer, True)

    def verify_layer(self, layer):
        """Check LAYER's XXH3-64 (for a file opened with verify=False)."""
        off = self._layer_at(layer)
        if _xxh3.xxh3_64 is None:
            raise KvfsError(errno.ENOSYS, _xxh3.MISSING, self.name)
        view = memoryview(self._mapped())[off:off + self._sizes[layer]]
        try:
            ok = _xxh3.xxh3_64(view) == self._checksums[layer]
        finally:
            view.release()
        if not ok:
            raise self._bad(errno.EBADMSG, "layer %d checksum mismatch" % layer)

    def close(self):
        """Unmap, unless views still hold the mapping (then it goes with them)."""
        buf, self._buf = self._buf, None
        if isinstance(buf, mmap.mmap):
            try:
                buf.close()
            except BufferError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return "<kvfs.ChunkFile %s: %d tokens from %d, %d layers, %d x %d %s%s>" % (
            self.name, self.n_tokens, self.pos0, self.n_layer, self.n_kv_head, self.head_dim, self.dtype_name,
            ", blended (prefilled in full)" if self.full_prefill else ", blended" if self.blended else "")


def _load(fd):
    st = os.fstat(fd)
    if stat.S_ISREG(st.st_mode):
        if st.st_size == 0:
            return b""
        try:
            # MAP_PRIVATE: kvfs serves blend results with direct_io, which
            # the kernel maps only privately
            return mmap.mmap(fd, 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
        except OSError as e:
            if e.errno != errno.ENODEV:
                raise
    parts = []
    while True:
        b = os.read(fd, 1 << 20)
        if not b:
            return b"".join(parts)
        parts.append(b)


def open(path, verify=True):  # noqa: A001 (kvfs.open, like io.open)
    """Open and check the chunk file at PATH (a path or a descriptor, which
    stays the caller's).  verify=True checks the header's and every layer's
    XXH3-64; verify=False only the structure and the size (then
    verify_layer() checks a layer).  Raises FormatError (EINVAL, EPROTO,
    EBADMSG) for a bad file, OSError for the system's errors, and KvfsError
    (ENOSYS) when verify=True but no XXH3 implementation is found."""
    name = path if isinstance(path, int) else os.fspath(path)
    if verify and _xxh3.xxh3_64 is None:
        raise KvfsError(errno.ENOSYS, _xxh3.MISSING, name)
    if isinstance(path, int):
        buf = _load(path)
    else:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            buf = _load(fd)
        finally:
            os.close(fd)  # a mapping outlives its descriptor
    f = ChunkFile(buf, name)
    try:
        f._parse(verify)
    except BaseException:
        f.close()
        raise
    return f
