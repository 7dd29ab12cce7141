#!/bin/bash
# build.sh - `make deb`: the Debian package of this working tree
# (tools/deb/debian/) into $BUILD/kvfs_VERSION_amd64.deb.
# A copy of the tree as git sees it (tracked and new files, not the ignored
# ones, modification times kept) is staged in $BUILD/deb/kvfs-VERSION/ with
# debian/ beside it, and dpkg-buildpackage -b builds it there through the
# top-level Makefile; the objects go to $BUILD/deb/obj/, outside the stage,
# so the next `make deb` recompiles only what changed.  libfuse 3.17 comes
# from $BUILD/third_party (the Makefile built it: static, linked into kvfs).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$PWD/$BUILD;; esac
version=$(sed -n 's/.*KVFS_VERSION_STRING "\(.*\)"/\1/p' index/version.h)
stage=$BUILD/deb/kvfs-$version
obj=$BUILD/deb/obj
rm -rf "$stage"
mkdir -p "$stage" "$obj"
git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
    [ -e "$f" ] || continue                  # deleted, not yet committed
    [ -L "$f" ] && [ -d "$f" ] && continue    # the build/ and models/ links of a worktree
    [[ $f == tools/deb/debian/* ]] && continue
    printf '%s\0' "$f"
done | tar --null -T - -cf - | tar -xpf - -C "$stage"
cp -r tools/deb/debian "$stage/debian"
[ -e "$BUILD/third_party" ] && ln -sfn "$BUILD/third_party" "$obj/third_party"
cd "$stage"
# no -dbgsym package: compressing the debug info took most of a rebuild's time
KVFS_DEB_OBJ=$obj DEB_BUILD_OPTIONS="noddebs ${DEB_BUILD_OPTIONS:-}" dpkg-buildpackage -b -us -uc -j"$(nproc)" > "$BUILD/deb/build.log" 2>&1 || {
    tail -40 "$BUILD/deb/build.log"; echo "kvfs: make deb failed (log: $BUILD/deb/build.log)" >&2; exit 1; }
deb=kvfs_${version}_amd64.deb
mv "$BUILD/deb/$deb" "$BUILD/$deb"
echo "$BUILD/$deb"
