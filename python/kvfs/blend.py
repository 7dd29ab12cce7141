"""Blending through a mount: KVFS_IOC_BLEND on MOUNT/.kvfs/control (kvfs(8),
IOCTL), the recipe built from chunk hashes and a query."""
import errno
import fcntl
import os
import re
import struct

from .errors import BlendError, KvfsError

IOCTL_VERSION = 1
_REQ_SIZE = 8192
# _IOWR('k', 1, struct kvfs_blend_req): direction 3, size, type, number
IOC_BLEND = (3 << 30) | (_REQ_SIZE << 16) | (ord("k") << 8) | 1
_HEAD = struct.Struct("<IIiI")  # version, flags, status, n_tokens
_PATH, _RECIPE, _ERROR = (16, 256), (272, 7680), (7952, 240)
RECIPE_MAX = _RECIPE[1] - 1
_HASH = re.compile(r"[0-9a-f]{64}\Z")


def _cstr(buf, at):
    off, size = at
    return bytes(buf[off:off + size]).split(b"\0", 1)[0].decode("utf-8", "replace")


def _chunk_hash(h):
    # a hash, or a chunk's path (MOUNT/chunks/HASH.kv)
    name = os.path.basename(os.fspath(h))
    name = name[:-3] if name.endswith(".kv") else name
    if not _HASH.match(name):
        raise KvfsError(errno.EINVAL, "not a chunk hash (64 lowercase hex): %r" % (h,))
    return name


def recipe(hashes, suffix=None, ratio=None, select=None, suffix_tokens=None):
    """The recipe text (kvfs(8), blends/): the chunks in prompt order, then
    the query as text (suffix) or token ids (suffix_tokens)."""
    if (suffix is None) == (suffix_tokens is None):
        raise KvfsError(errno.EINVAL, "a blend needs its query: suffix= or suffix_tokens=, one of them")
    lines = []
    if ratio is not None:
        lines.append("ratio=%s" % (ratio if ratio == "auto" else repr(float(ratio))))
    if select is not None:
        lines.append("select=%s" % select)
    lines += [_chunk_hash(h) for h in hashes]
    if suffix is not None:
        lines.append("suffix=" + suffix.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t"))
    else:
        lines.append("suffix_tokens=" + ",".join(str(int(t)) for t in suffix_tokens))
    return "\n".join(lines) + "\n"


def blend_recipe(mount, text):
    """Blend the recipe TEXT on MOUNT; returns (path of the result, its token count)."""
    raw = text.encode("utf-8")
    if len(raw) > RECIPE_MAX:
        raise KvfsError(errno.E2BIG, "recipe of %d bytes, the ioctl takes %d" % (len(raw), RECIPE_MAX))
    req = bytearray(_REQ_SIZE)
    _HEAD.pack_into(req, 0, IOCTL_VERSION, 0, 0, 0)
    req[_RECIPE[0]:_RECIPE[0] + len(raw)] = raw
    fd = os.open(os.path.join(mount, ".kvfs", "control"), os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.ioctl(fd, IOC_BLEND, req, True)
    finally:
        os.close(fd)
    _, _, status, n_tokens = _HEAD.unpack_from(req, 0)
    if status:
        err = -status if status < 0 else errno.EIO
        raise BlendError(err, _cstr(req, _ERROR).rstrip() or os.strerror(err), mount)
    return os.path.join(mount, _cstr(req, _PATH)), n_tokens


def blend(mount, hashes, suffix=None, ratio=None, select=None, suffix_tokens=None):
    """Compose the chunks HASHES (hashes or chunk paths, in prompt order)
    followed by the query on MOUNT; returns the path of the blended chunk
    file (MOUNT/blends/ioctl-....kv), which kvfs.open() reads.  ratio: share
    of chunk tokens recomputed (0..1 or "auto"; default the daemon's);
    select: "query", "fixed" or "gradual".  Raises BlendError with the
    daemon's errno and reason (ENOENT: a chunk not in this store, EINVAL: a
    bad recipe, ...), OSError for the control file or the ioctl (ENOTTY:
    not a kvfs mount)."""
    return blend_recipe(mount, recipe(hashes, suffix, ratio, select, suffix_tokens))[0]
