#!/bin/sh
# Build llama.cpp's own HTTP server, llama-server, from the llama.cpp source
# carried inside the llama-cpp-python sdist -- the same version the oracle
# uses (tools/install-oracle.sh).  No other source: the sdist comes from PyPI
# through pip, never from a git checkout.
#
#   tools/build-llama-server.sh        -> $BUILD/llama-server/bin/llama-server
#
# Environment:
#   BUILD                  build tree (default: build)
#   LLAMA_CPP_PYTHON_SDIST an already downloaded llama_cpp_python-0.3.36.tar.gz
#                          (default: $BUILD/third_party/<that name>, fetched
#                          with `pip download` when absent)
#   JOBS                   parallel compile jobs (default: 2)
#   FORCE=1                rebuild even when the binary is up to date
#   SOURCE_ONLY=1          only fetch, verify and unpack the source (the oracle tests read its
#                          gguf-py and models/ggml-vocab-*.gguf); make test does this
#   CUDA_ARCH=90           build the CUDA engine instead, for that compute
#                          capability (90: H100/H200), into $BUILD/llama-cuda:
#                          llama-server, llama-bench and llama-quantize over
#                          shared ggml libraries (the GPU device kit carries
#                          them: tools/build-device-kit.sh); needs nvcc
#
# By default CPU only, Release, -march=native (GGML_NATIVE), no OpenSSL (this llama.cpp
# has no LLAMA_CURL any more: it is deprecated and ignored; LLAMA_OPENSSL is
# the switch), no web UI (LLAMA_USE_PREBUILT_UI would download it from a
# Hugging Face bucket at build time), static libraries so the binary stands
# alone.  Only the llama-server target is built.
set -eu

VERSION=0.3.36
NAME=llama_cpp_python-$VERSION
# sha256 of the PyPI sdist llama_cpp_python-0.3.36.tar.gz
SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e

cd "$(dirname "$0")/.."
ROOT=$(pwd)
SCRIPT=$ROOT/tools/build-llama-server.sh
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
TP=$BUILD/third_party
SRC=$TP/$NAME
LLAMA=$SRC/vendor/llama.cpp
OUT=$BUILD/llama-server
BIN=$OUT/bin/llama-server
TARGETS=llama-server
# the CPU engine is tuned for this machine; the CUDA one runs elsewhere
ENGINE_FLAGS="-DGGML_CUDA=OFF -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF"
if [ -n "${CUDA_ARCH:-}" ]; then
    OUT=$BUILD/llama-cuda
    BIN=$OUT/bin/llama-server
    TARGETS="llama-server llama-bench llama-quantize"
    NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
    [ -x "$NVCC" ] || { echo "build-llama-server: error: CUDA_ARCH=$CUDA_ARCH but no nvcc" >&2; exit 1; }
    # portable x86-64-v3 host code, one GPU architecture (a build for all of
    # them takes hours on two cores), shared ggml so three binaries carry one
    # copy of the CUDA kernels
    ENGINE_FLAGS="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=$CUDA_ARCH -DCMAKE_CUDA_COMPILER=$NVCC
        -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DBUILD_SHARED_LIBS=ON
        -DCMAKE_INSTALL_RPATH=\$ORIGIN:\$ORIGIN/../lib -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON
        -DCMAKE_EXE_LINKER_FLAGS=-Wl,--allow-shlib-undefined"
    # (the driver's libcuda.so.1, which libggml-cuda needs, exists only
    # where a GPU does: the programs are linked without it)
fi
JOBS=${JOBS:-2}

say() { echo "build-llama-server: $*" >&2; }
die() { echo "build-llama-server: error: $*" >&2; exit 1; }

TARBALL=${LLAMA_CPP_PYTHON_SDIST:-$TP/$NAME.tar.gz}
case $TARBALL in /*) ;; *) TARBALL=$ROOT/$TARBALL ;; esac

# Up to date: the binary is newer than the sdist, its unpacked tree and this script.
if [ "${FORCE:-0}" != 1 ] && [ -x "$BIN" ] && [ -f "$TARBALL" ] &&
   [ -z "$(find "$TARBALL" "$SCRIPT" "$SRC/.unpacked" -newer "$BIN" 2>/dev/null)" ]; then
    say "up to date: $BIN"
    echo "$BIN"
    exit 0
fi

# SOURCE_ONLY=1: only the verified, unpacked llama.cpp source (its gguf-py
# and models/ggml-vocab-* are what some oracle tests read)
tools="cmake ninja cc c++ tar python3"
[ "${SOURCE_ONLY:-0}" = 1 ] && tools="tar python3"
for t in $tools; do
    command -v "$t" >/dev/null 2>&1 || die "'$t' not found (tools/install-deps.sh installs the build tools)"
done

mkdir -p "$TP"

# 1. the sdist
if [ ! -f "$TARBALL" ]; then
    [ -n "${LLAMA_CPP_PYTHON_SDIST:-}" ] && die "LLAMA_CPP_PYTHON_SDIST=$LLAMA_CPP_PYTHON_SDIST: no such file"
    say "downloading the llama-cpp-python==$VERSION sdist from PyPI into $TP ..."
    dl=$(mktemp -d "$TP/dl.XXXXXX")
    if ! python3 -m pip download --no-deps --no-binary :all: \
            "llama-cpp-python==$VERSION" -d "$dl" >&2; then
        rm -rf "$dl"
        die "pip download of llama-cpp-python==$VERSION failed (network? set LLAMA_CPP_PYTHON_SDIST to a downloaded $NAME.tar.gz)"
    fi
    [ -f "$dl/$NAME.tar.gz" ] || { ls -l "$dl" >&2; rm -rf "$dl"; die "pip did not produce $NAME.tar.gz"; }
    mv "$dl/$NAME.tar.gz" "$TARBALL"
    rm -rf "$dl"
fi
say "sdist: $TARBALL"
if command -v sha256sum >/dev/null 2>&1; then
    sum=$(sha256sum "$TARBALL" | cut -d' ' -f1)
    [ "$sum" = "$SHA256" ] ||
        die "$TARBALL: sha256 $sum, expected $SHA256 (not the PyPI sdist of llama-cpp-python==$VERSION?)"
fi

# 2. unpack (whole sdist: its .git/modules lets llama.cpp's build-info name the commit)
if [ ! -f "$SRC/.unpacked" ] || [ "$TARBALL" -nt "$SRC/.unpacked" ]; then
    say "unpacking into $SRC ..."
    tmp=$(mktemp -d "$TP/unpack.XXXXXX")
    tar -xzf "$TARBALL" -C "$tmp" || { rm -rf "$tmp"; die "cannot unpack $TARBALL"; }
    [ -f "$tmp/$NAME/vendor/llama.cpp/tools/server/CMakeLists.txt" ] ||
        { rm -rf "$tmp"; die "$TARBALL carries no vendor/llama.cpp/tools/server"; }
    rm -rf "$SRC"
    mv "$tmp/$NAME" "$SRC"
    rm -rf "$tmp"
    touch "$SRC/.unpacked"
    rm -f "$OUT/CMakeCache.txt"   # new source: configure afresh
fi
commit=$(git -C "$LLAMA" rev-parse --short HEAD 2>/dev/null || echo unknown)
say "llama.cpp source: $LLAMA (commit $commit)"
if [ "${SOURCE_ONLY:-0}" = 1 ]; then
    echo "$LLAMA"
    exit 0
fi

# 3. configure
start=$(date +%s)
say "configuring (cmake, Ninja, Release) in $OUT ..."
# shellcheck disable=SC2086 # ENGINE_FLAGS is a list of words
nice -n 19 cmake -S "$LLAMA" -B "$OUT" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release \
    $ENGINE_FLAGS \
    -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_TOOLS=ON \
    -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_TOOLS_INSTALL=OFF \
    >"$OUT.configure.log" 2>&1 ||
    { tail -n 40 "$OUT.configure.log" >&2; die "cmake configure failed (log: $OUT.configure.log)"; }

# 4. build only the targets wanted
say "building $TARGETS (nice -n 19, -j$JOBS; takes a while) ..."
# shellcheck disable=SC2086
nice -n 19 cmake --build "$OUT" --target $TARGETS -j "$JOBS" >&2 ||
    die "build failed (see the compiler output above; build tree: $OUT)"
[ -x "$BIN" ] || die "build finished but $BIN is missing"
touch "$BIN"
say "built $BIN in $(( $(date +%s) - start ))s"
echo "$BIN"
