"""kvfs: read kvfs KV-cache chunk files (kvfs(5)) as zero-copy numpy views,
and ask a kvfs mount for blends (kvfs(8)).

    import kvfs
    with kvfs.open("/mnt/kvfs/chunks/<hash>.kv") as f:
        print(f.n_tokens, f.pos0, f.n_layer, f.dtype_name, f.blended)
        k, v = f.k(0), f.v(0)        # (n_tokens, n_kv_head, head_dim), no copy
    path = kvfs.blend("/mnt/kvfs", [h1, h2], suffix="\\nQuestion: ...\\nAnswer:")
"""
from . import _xxh3
from .blend import blend, blend_recipe, recipe
from .errors import BlendError, FormatError, KvfsError
from .reader import (DTYPE_BF16, DTYPE_F16, DTYPE_F32, DTYPE_Q4S, DTYPE_Q4, DTYPE_Q8, FLAG_BLENDED, FLAG_FULL_PREFILL, FLAG_KEYS_ROPED, FLAG_SALTED, FLAG_V_FROM_K, FLAG_LAYER_SHAPES,
                     ROPE_NEOX, ROPE_NORM, ChunkFile, bf16_to_f32, open, salt_digest)

__version__ = "0.1.0"
# which XXH3-64 verification uses: "xxhash" (the module), "libxxhash"
# (the system library, through ctypes) or None (then only verify=False)
XXH3_BACKEND = _xxh3.BACKEND

__all__ = ["open", "blend", "blend_recipe", "recipe", "ChunkFile", "KvfsError", "FormatError", "BlendError",
           "bf16_to_f32", "XXH3_BACKEND", "DTYPE_F32", "DTYPE_F16", "DTYPE_BF16", "DTYPE_Q8", "DTYPE_Q4", "DTYPE_Q4S", "FLAG_KEYS_ROPED",
           "FLAG_BLENDED", "FLAG_FULL_PREFILL", "FLAG_SALTED", "FLAG_V_FROM_K", "FLAG_LAYER_SHAPES", "ROPE_NORM", "ROPE_NEOX", "salt_digest"]
