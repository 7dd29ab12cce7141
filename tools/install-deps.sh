#!/bin/sh
# Install the build and test dependencies that are missing (Debian/Ubuntu;
# meson, ninja and dpkg-dev build libfuse 3.17 from source: tools/build-libfuse.sh).
# The Ceph packages (remote tier: librados to build it, a mon and OSDs for its
# tests) are optional: without them kvfs builds without rados= and the
# remote-tier tests skip, saying so.
set -e
PKGS="build-essential pkg-config libfuse3-dev fuse3 liburing-dev libzstd-dev zstd
libsqlite3-dev sqlite3 libxxhash-dev libpcre2-dev libssl-dev libopenblas-dev
libopenblas0-pthread attr python3 python3-pip unzip bc meson ninja-build dpkg-dev clang
libmicrohttpd-dev libcurl4-openssl-dev libjansson-dev curl libsystemd-dev"
CEPH_PKGS="librados-dev ceph-mon ceph-osd ceph-common"
# `install-deps.sh deb`: also what `make deb` needs (dpkg-buildpackage, dh)
[ "${1:-}" = deb ] && PKGS="$PKGS debhelper"
missing=""
for p in $PKGS; do
    dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
missing_ceph=""
for p in $CEPH_PKGS; do
    dpkg -s "$p" >/dev/null 2>&1 || missing_ceph="$missing_ceph $p"
done
[ -z "$missing$missing_ceph" ] && exit 0
if [ "$(id -u)" != 0 ]; then
    [ -n "$missing" ] && { echo "kvfs: missing packages:$missing (run as root or install them)" >&2; exit 1; }
    echo "kvfs: note: Ceph packages missing:$missing_ceph (remote tier not built, its tests skip)" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null || true
if [ -n "$missing" ]; then
    echo "kvfs: installing:$missing" >&2
    apt-get install -y -q --no-install-recommends $missing >/dev/null
fi
if [ -n "$missing_ceph" ]; then
    echo "kvfs: installing:$missing_ceph" >&2
    apt-get install -y -q --no-install-recommends $missing_ceph >/dev/null ||
        echo "kvfs: note: cannot install the Ceph packages (remote tier not built, its tests skip)" >&2
fi
exit 0
