"""XXH3-64 (seed 0), the checksum of kvfs chunk files, from whichever
implementation is here: the `xxhash` module, else the system's libxxhash
(the library kvfs itself links) through ctypes."""
import ctypes
import ctypes.util

import numpy as np

BACKEND = None  # "xxhash", "libxxhash" or None
xxh3_64 = None  # xxh3_64(buffer) -> int


def _from_module():
    import xxhash  # noqa: F401 (optional dependency)
    return xxhash.xxh3_64_intdigest


def _from_library():
    for name in ("libxxhash.so.0", ctypes.util.find_library("xxhash")):
        if not name:
            continue
        try:
            fn = ctypes.CDLL(name).XXH3_64bits
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_uint64
        fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t]

        def digest(buf, fn=fn):
            # a read-only buffer (a PROT_READ mapping) has an address through numpy
            a = np.frombuffer(buf, dtype=np.uint8)
            return int(fn(a.ctypes.data if a.size else None, a.size))
        return digest
    raise ImportError("libxxhash not found")


for _name, _load in (("xxhash", _from_module), ("libxxhash", _from_library)):
    try:
        xxh3_64 = _load()
        BACKEND = _name
        break
    except ImportError:
        pass

MISSING = ("verifying a kvfs chunk needs XXH3-64: install the xxhash module "
           "(pip install xxhash) or libxxhash (apt-get install libxxhash0), "
           "or open with verify=False to skip the checksums")
