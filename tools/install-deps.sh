#!/bin/sh
# Install the build and test dependencies that are missing (Debian/Ubuntu).
set -e
PKGS="build-essential pkg-config libfuse3-dev fuse3 liburing-dev libzstd-dev zstd
libsqlite3-dev sqlite3 libxxhash-dev libpcre2-dev libssl-dev libopenblas-dev
libopenblas0-pthread attr python3 python3-pip unzip"
missing=""
for p in $PKGS; do
    dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
    echo "kvfs: missing packages:$missing (run as root or install them)" >&2
    exit 1
fi
echo "kvfs: installing:$missing" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null || true
apt-get install -y -q --no-install-recommends $missing >/dev/null
