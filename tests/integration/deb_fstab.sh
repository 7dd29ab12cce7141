#!/bin/bash
# The Debian package as an operator uses it (README "Installing as a
# package", kvfs(8) FSTAB): `make deb`, dpkg -i, an /etc/fstab line of type
# fuse.kvfs mounted by mount(8) through mount.fuse3, a chunk in and read back
# byte for byte, umount, dpkg --purge.  Root only; /etc/fstab is restored
# and the package purged whatever happens.
. "$(dirname "$0")/../lib.sh"
[ "$(id -u)" = 0 ] || skip "not root (installs a package, edits /etc/fstab)"
command -v dpkg-buildpackage >/dev/null || skip "dpkg-buildpackage missing (apt-get install dpkg-dev)"
command -v dh >/dev/null || "$KVFS_ROOT/tools/install-deps.sh" deb >/dev/null 2>&1
command -v dh >/dev/null || skip "debhelper missing and not installable (apt-get install debhelper)"
command -v mount.fuse3 >/dev/null || [ -x /sbin/mount.fuse3 ] || skip "mount.fuse3 missing (fuse3)"
if dpkg-query -W -f '${Status}' kvfs 2>/dev/null | grep -q "ok installed"; then
    skip "a kvfs package is installed on this host: not replacing it"
fi
exec 9>/run/lock/kvfs-deb-test.lock # one at a time: /etc/fstab is the host's
flock -w 600 9 || skip "another deb_fstab test holds /run/lock/kvfs-deb-test.lock"

MNT=$T/mnt STORE=$T/store
FSTAB_SAVED=$T/fstab.orig
INSTALLED=
deb_cleanup() {
    if grep -q " $MNT " /proc/mounts; then umount "$MNT" 2>/dev/null || umount -l "$MNT"; fi
    [ -f "$FSTAB_SAVED" ] && cat "$FSTAB_SAVED" > /etc/fstab
    [ -n "$INSTALLED" ] && dpkg --purge kvfs >/dev/null 2>&1
}
trap 'deb_cleanup; cleanup' EXIT
trap 'exit 1' TERM INT HUP
mkdir -p "$MNT" "$STORE"

t0=$EPOCHREALTIME
deb=$(make -s -C "$KVFS_ROOT" BUILD="$BUILD" deb 2>"$T/deb.err" | tail -1)
t1=$EPOCHREALTIME
[ -f "$deb" ] || { cat "$T/deb.err"; fail "make deb built no package"; finish; }
ok "make deb: $deb ($(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.0f", b-a}') s)"
INSTALLED=1
check "dpkg -i" dpkg -i "$deb"
for f in /usr/bin/kvfs /usr/bin/kvfsctl /usr/bin/kvfs-serve /usr/share/man/man8/kvfs.8.gz \
         /usr/share/man/man1/kvfsctl.1.gz /usr/share/man/man1/kvfs-serve.1.gz /usr/share/man/man5/kvfs.5.gz \
         /lib/systemd/system/kvfs@.service /lib/systemd/system/kvfs-serve.service /etc/default/kvfs-serve \
         /usr/lib/x86_64-linux-gnu/libkvfs.so.1 /usr/include/kvfs.h; do
    check "dpkg -L lists $f" sh -c "dpkg -L kvfs | grep -qx '$f' && test -e '$f'"
done
check "kvfs needs no libfuse of the build tree (none, or the system's)" \
    sh -c "! ldd /usr/bin/kvfs | grep -q -e 'not found' -e '$KVFS_ROOT'"
check "the installed kvfs runs" sh -c "/usr/bin/kvfs --version | grep -q '^kvfs '"

cp /etc/fstab "$FSTAB_SAVED"
echo "$STORE $MNT fuse.kvfs defaults,noauto,nofail,nodev,nosuid,_netdev,x-systemd.mount-timeout=5min,ram=64M,zstd=3 0 0" >> /etc/fstab
check "mount MOUNTPOINT from the fstab line" sh -c "mount '$MNT' 2>'$T/mount.err'"
check "/proc/mounts: the store, fuse.kvfs, nodev,nosuid" \
    grep -q "^$STORE $MNT fuse.kvfs rw,nosuid,nodev," /proc/mounts
pid=$(pgrep -f -- "kvfs $STORE $MNT" | head -1)
check "the daemon is the package's /usr/bin/kvfs" test "$(readlink "/proc/${pid:-0}/exe")" = /usr/bin/kvfs
check "its options came through (ram=64M, zstd=3)" grep -q "ram 64M, zstd 3" "$T/mount.err"
# boot's mount -a (here on a copy of the line without noauto) sees it mounted
sed -n "\| $MNT |s/noauto,//p" /etc/fstab > "$T/fstab.auto"
check "mount -a: the line is mounted already, nothing stacked" \
    sh -c "mount -a -T '$T/fstab.auto' && test \$(grep -c ' $MNT ' /proc/mounts) -eq 1"
h=$(/usr/bin/kvfsctl synth -o "$T/one.kv" --layers 30 --tokens 512 --kv-heads 3 --seed 7)
check "cp a chunk in" cp "$T/one.kv" "$MNT/chunks/$h.kv"
check "read it back byte for byte" cmp "$T/one.kv" "$MNT/chunks/$h.kv"
check "umount MOUNTPOINT" umount "$MNT"
check "unmounted" sh -c "! grep -q ' $MNT ' /proc/mounts"
for _ in $(seq 100); do kill -0 "${pid:-0}" 2>/dev/null || break; sleep 0.05; done
check "the daemon has exited" sh -c "! kill -0 ${pid:-0} 2>/dev/null"
check "remount from fstab: the chunk is still there" sh -c "mount '$MNT' && cmp '$T/one.kv' '$MNT/chunks/$h.kv' && umount '$MNT'"

if command -v systemd-analyze >/dev/null; then
    ln -s /lib/systemd/system/kvfs@.service "$T/kvfs@mnt-kvfs.service"
    check "systemd-analyze verify: the installed kvfs@ unit" \
        sh -c "systemd-analyze verify --man=no '$T/kvfs@mnt-kvfs.service' >'$T/verify.out' 2>&1 || { cat '$T/verify.out'; false; }"
fi

check "dpkg --purge kvfs" dpkg --purge kvfs
INSTALLED=
check "purged: no /usr/bin/kvfs, no units" sh -c "! test -e /usr/bin/kvfs && ! test -e /lib/systemd/system/kvfs@.service"
check "purged: /etc/default/kvfs-serve gone too" test ! -e /etc/default/kvfs-serve
check "nothing left mounted" sh -c "! grep -q ' $MNT ' /proc/mounts"
cat "$FSTAB_SAVED" > /etc/fstab
check "/etc/fstab restored" cmp "$FSTAB_SAVED" /etc/fstab
finish
