"""llama.cpp's gguf-py: from GGUF_PY, else the llama.cpp source the pinned
llama-cpp-python sdist carries (build/third_party, unpacked by make test or
tools/build-llama-server.sh).  import_gguf() returns the module or raises
ImportError."""
import glob
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))


def import_gguf():
    if os.environ.get('GGUF_PY'):
        sys.path.insert(0, os.environ['GGUF_PY'])
    for p in sorted(glob.glob(os.path.join(ROOT, 'build', 'third_party', 'llama_cpp_python-*', 'vendor', 'llama.cpp',
                                           'gguf-py'))):
        sys.path.insert(0, p)
    import gguf
    return gguf
