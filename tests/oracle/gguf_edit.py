#!/usr/bin/env python3
"""A copy of a GGUF file with edits, through llama.cpp's own gguf-py (the
llama.cpp source the pinned llama-cpp-python sdist carries, or GGUF_PY):
what tests/oracle/model_refusals.sh gives kvfs to refuse.

  gguf_edit.py IN OUT [--arch NAME] [--str KEY=V] [--f32 KEY=V] [--u32 KEY=V]
                      [--tensor NAME=N]   (an f32 tensor of N ones)
                      [--tensor-values NAME=V,V,...]   (an f32 tensor of those values)
Exit 77 when gguf-py cannot be found."""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'tools'))
from gguf_py import import_gguf
try:
    import numpy as np
    gguf = import_gguf()
except ImportError as e:
    print(f'skip: {e}', file=sys.stderr)
    sys.exit(77)

ap = argparse.ArgumentParser()
ap.add_argument('src')
ap.add_argument('dst')
ap.add_argument('--arch')
ap.add_argument('--str', action='append', default=[])
ap.add_argument('--f32', action='append', default=[])
ap.add_argument('--u32', action='append', default=[])
ap.add_argument('--tensor', action='append', default=[])
ap.add_argument('--tensor-values', action='append', default=[])
a = ap.parse_args()

r = gguf.GGUFReader(a.src)
old_arch = r.fields['general.architecture'].contents()
arch = a.arch or old_arch
w = gguf.GGUFWriter(a.dst, arch)
GT = gguf.GGUFValueType
edits = {}
for kv in a.str:
    k, v = kv.split('=', 1)
    edits[k] = (v, GT.STRING)
for kv in a.f32:
    k, v = kv.split('=', 1)
    edits[k] = (float(v), GT.FLOAT32)
for kv in a.u32:
    k, v = kv.split('=', 1)
    edits[k] = (int(v), GT.UINT32)
for f in r.fields.values():
    if f.name == 'general.architecture' or f.name.startswith('GGUF.'):
        continue
    name = f.name
    if name.startswith(old_arch + '.') and arch != old_arch:  # the hyperparameters under the new name
        name = arch + name[len(old_arch):]
    if name in edits:
        continue
    t = f.types[0]
    if t == GT.ARRAY and not f.contents():  # gguf-py writes no empty arrays (the merges of a byte vocabulary)
        continue
    w.add_key_value(name, f.contents(), t, sub_type=f.types[-1] if t == GT.ARRAY else None)
for k, (v, t) in edits.items():
    w.add_key_value(k, v, t)
extra = []
for spec in a.tensor:
    n, count = spec.split('=')
    extra.append((n, np.ones(int(count), dtype=np.float32)))
for spec in a.tensor_values:
    n, vals = spec.split('=')
    extra.append((n, np.array([float(v) for v in vals.split(',')], dtype=np.float32)))
for t in r.tensors:
    w.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
for n, x in extra:
    w.add_tensor_info(n, x.shape, x.dtype, x.nbytes, gguf.GGMLQuantizationType.F32)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_ti_data_to_file()
for t in r.tensors:
    w.write_tensor_data(t.data, tensor_endianess=r.endianess)
for n, x in extra:
    w.write_tensor_data(x)
w.close()
