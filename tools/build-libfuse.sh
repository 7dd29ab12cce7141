#!/bin/sh
# Build libfuse 3.17 (FUSE passthrough: fuse_passthrough_open, backing_id,
# FUSE_CAP_PASSTHROUGH) from Debian's own source package, trixie's fuse3,
# into the build tree, for systems whose libfuse is older (Debian 12 ships
# 3.14).  Nothing on the system changes: apt reads a private sources list and
# lists directory under the build tree (the archive's signatures are checked
# with the system's Debian keyring), dpkg-source applies Debian's patches,
# meson builds a static libfuse3.a that kvfs links.
#
#   tools/build-libfuse.sh   -> $BUILD/third_party/fuse3/inst/{lib/libfuse3.a,include/fuse3}
#
# Environment:
#   BUILD     build tree (default: build)
#   FORCE=1   rebuild even when the library is there
#   FUSE_SUITE, FUSE_DEB_VERSION   another Debian suite / source version
#             (FUSE_SUITE=sid: 3.18, for the FUSE-over-io_uring measurement)
# Needs: apt-get (source download only, any user), dpkg-source (dpkg-dev),
# meson and ninja (tools/install-deps.sh installs them).
set -eu

SUITE=${FUSE_SUITE:-trixie}                                   # sid: 3.18 (FUSE over io_uring)
PACKAGE=fuse3
VERSION=${FUSE_DEB_VERSION:-$(if [ "$SUITE" = trixie ]; then echo 3.17.2-3; fi)} # trixie: the version tested

cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
TP=$BUILD/third_party/fuse3
INST=$TP/inst
LIB=$INST/lib/libfuse3.a

if [ -f "$LIB" ] && [ "${FORCE:-0}" != 1 ]; then
    exit 0
fi
for c in apt-get dpkg-source meson ninja; do
    command -v $c >/dev/null || {
        echo "kvfs: building libfuse 3.17 needs $c (make deps installs it); or build with FUSE=system (no passthrough)" >&2
        exit 1
    }
done

echo "kvfs: building libfuse from Debian $SUITE's $PACKAGE source into $TP" >&2
rm -rf "$TP"
mkdir -p "$TP/apt/lists/partial" "$TP/apt/parts" "$TP/dl"
# deb822 sources in a private parts directory; no system sources list
cat > "$TP/apt/parts/$SUITE-src.sources" <<EOF
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: $SUITE
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
APT="-o Dir::Etc::sourcelist=/dev/null -o Dir::Etc::sourceparts=$TP/apt/parts -o Dir::State::Lists=$TP/apt/lists
     -o Dir::Cache=$TP/apt/cache -o APT::Sandbox::User=root -q"
mkdir -p "$TP/apt/cache"
# shellcheck disable=SC2086
apt-get $APT update >"$TP/apt.log" 2>&1 || { echo "kvfs: apt-get update for $SUITE sources failed (see $TP/apt.log)" >&2; exit 1; }
# the version this was tested with, else whatever trixie carries now (a
# Debian revision newer than the one pinned: it is still 3.17)
# shellcheck disable=SC2086
(cd "$TP/dl" && { { [ -n "$VERSION" ] && apt-get $APT source --download-only "$PACKAGE=$VERSION" >>"$TP/apt.log" 2>&1; } ||
    apt-get $APT source --download-only "$PACKAGE" >>"$TP/apt.log" 2>&1; }) || {
    echo "kvfs: cannot download the $PACKAGE source from Debian $SUITE (see $TP/apt.log)" >&2
    exit 1
}
DSC=$(ls "$TP/dl/${PACKAGE}"_*.dsc | head -1)
# apt checked the .dsc against the signed Sources index; dpkg-source checks
# the tarballs against the .dsc and applies Debian's patches
dpkg-source -x "$DSC" "$TP/src" >"$TP/dpkg-source.log" 2>&1 || {
    echo "kvfs: dpkg-source failed (see $TP/dpkg-source.log)" >&2
    exit 1
}
(cd "$TP/src" &&
    meson setup "$TP/bld" --prefix="$INST" --libdir=lib -Ddefault_library=static -Dbuildtype=release \
        -Dutils=false -Dexamples=false -Dtests=false -Duseroot=false -Dinitscriptdir= \
        -Dudevrulesdir="$INST/udev" >"$TP/meson.log" 2>&1 &&
    ninja -C "$TP/bld" >>"$TP/meson.log" 2>&1 && ninja -C "$TP/bld" install >>"$TP/meson.log" 2>&1) || {
    echo "kvfs: building libfuse failed (see $TP/meson.log)" >&2
    exit 1
}
test -f "$LIB"
pkg-config --atleast-version=3.17.1 "$INST/lib/pkgconfig/fuse3.pc" || {
    echo "kvfs: the libfuse built from $(basename "$DSC") is older than 3.17.1: no passthrough" >&2
    exit 1
}
echo "kvfs: libfuse $(pkg-config --modversion "$INST/lib/pkgconfig/fuse3.pc") built from $(basename "$DSC"): $LIB" >&2
