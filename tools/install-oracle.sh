#!/bin/sh
# Install llama-cpp-python, built from source, as the independent oracle.
set -e
python3 -c 'import llama_cpp' 2>/dev/null && exit 0
echo "kvfs: building llama-cpp-python from source (several minutes) ..." >&2
CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_CURL=OFF" \
    python3 -m pip install --quiet --no-binary llama-cpp-python "llama-cpp-python==0.3.36" numpy
