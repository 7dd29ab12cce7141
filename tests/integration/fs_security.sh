#!/bin/bash
# Security (issue 19): a mount is private by default (other users cannot
# even list it); with allow_other the kernel enforces the mode bits kvfs
# reports (default_permissions is always on): another user reads chunks but
# cannot add, remove, pin or blend; recipes and the blend ioctl name chunks
# by hash only, so '../' and absolute paths are refused; a symlink planted in
# the store is never followed.
. "$(dirname "$0")/../lib.sh"
[ "$(id -u)" -eq 0 ] || skip "needs root (to act as another user)"
command -v setpriv >/dev/null || skip "setpriv missing"
NOBODY="setpriv --reuid=65534 --regid=65534 --clear-groups" # a command prefix, usable inside sh -c
$NOBODY true 2>/dev/null || skip "cannot switch to uid 65534"
check "uid 65534 really is another user" test "$($NOBODY id -u)" = 65534
chmod 755 "$T" # other users may reach the mount points under it
"$KVFSCTL" synth -o "$T/c1.kv" --tokens 8 --seed 1 > "$T/h1"
"$KVFSCTL" synth -o "$T/c2.kv" --tokens 8 --seed 2 > "$T/h2"
h1=$(cat "$T/h1"); h2=$(cat "$T/h2")

# the default: private
mount_kvfs priv || exit 1
P=$T/priv.mnt
cp "$T/c1.kv" "$P/chunks/$h1.kv"
check "default mount: another user cannot list it (EACCES)" sh -c "! $NOBODY ls '$P' 2>$T/err; grep -q 'Permission denied' $T/err"
check "... nor read a chunk (EACCES)" sh -c "! $NOBODY cat '$P/chunks/$h1.kv' 2>$T/err; grep -q 'Permission denied' $T/err"
check "... the owner can" cmp "$T/c1.kv" "$P/chunks/$h1.kv"
unmount_kvfs priv

# allow_other: the mode bits, enforced by the kernel
mount_kvfs shared allow_other || exit 1
S=$T/shared.mnt
cp "$T/c1.kv" "$S/chunks/$h1.kv"
check "allow_other: another user lists chunks/" sh -c "$NOBODY ls '$S/chunks' | grep -q '$h1'"
check "... and reads a chunk (0644)" sh -c "$NOBODY cat '$S/chunks/$h1.kv' | cmp - '$T/c1.kv'"
check "... but cannot remove it (EACCES)" sh -c "! $NOBODY rm -f '$S/chunks/$h1.kv' 2>$T/err; grep -q 'Permission denied' $T/err"
check "... which is still there" cmp "$T/c1.kv" "$S/chunks/$h1.kv"
check "... cannot add one under its name (EACCES)" sh -c "! $NOBODY cp '$T/c2.kv' '$S/chunks/$h2.kv' 2>$T/err; grep -q 'Permission denied' $T/err"
check "... nor through incoming/ (EACCES)" sh -c "! $NOBODY cp '$T/c2.kv' '$S/incoming/x.kv' 2>$T/err; grep -q 'Permission denied' $T/err"
check "... so the store holds one chunk" test "$(ls "$S/chunks" | wc -l)" -eq 1
check "... cannot pin it (EACCES)" sh -c "! $NOBODY setfattr -n user.kvfs.pinned -v 1 '$S/chunks/$h1.kv' 2>$T/err; grep -q 'Permission denied' $T/err"
check "... cannot write a recipe (EACCES)" sh -c "! $NOBODY sh -c 'printf \"%s\nsuffix=x\n\" $h1 > $S/blends/r.recipe' 2>$T/err; grep -q 'Permission denied' $T/err"
check "... the owner can remove it" rm "$S/chunks/$h1.kv"
check "daemon alive" kill -0 "$MNT_PID"
unmount_kvfs shared

# paths in recipes and in the ioctl: hashes only
mount_kvfs p || exit 1
M=$T/p.mnt
cp "$T/c1.kv" "$M/chunks/$h1.kv"
n=0
for bad in "../../../etc/passwd" "/etc/passwd" "../chunks/$h1.kv" "$M/chunks/$h1.kv" "chunk /etc/passwd" \
           "chunk ../$h1.kv" "$h1/../../etc/passwd"; do
    n=$((n + 1))
    printf '%s\nsuffix=x\n' "$bad" > "$T/bad$n.recipe"
    check "recipe naming '$bad' refused" sh -c "! cp '$T/bad$n.recipe' '$M/blends/bad$n.recipe' 2>/dev/null"
    check "... its .err names the line" grep -q "line 1:" "$M/blends/bad$n.err"
done
check "the blend ioctl refuses them too, with EINVAL" env PYTHONPATH="$KVFS_ROOT/python" python3 - "$M" "$h1" <<'EOF'
import errno, sys, kvfs
mnt, h = sys.argv[1], sys.argv[2]
for bad in ("../../../etc/passwd", "/etc/passwd", "../chunks/%s.kv" % h, "%s/chunks/%s.kv" % (mnt, h)):
    try:
        kvfs.blend_recipe(mnt, "%s\nsuffix=x\n" % bad)
    except kvfs.KvfsError as e:
        assert e.errno == errno.EINVAL, (bad, e)
        continue
    raise SystemExit("ioctl accepted %r" % bad)
EOF
unmount_kvfs p

# a symlink planted in the store is not followed
obj=$(find "$T/p.store" -type f -name "$h1*" | head -1)
check "the chunk's object is a file in the store" test -f "$obj"
rm -f "$obj" && ln -s /etc/passwd "$obj"
mount_kvfs p || exit 1
check "a chunk whose object is a symlink to /etc/passwd never serves it" sh -c "! cat '$M/chunks/$h1.kv' 2>/dev/null | grep -q root:"
check "... and fsck reports it" sh -c "! '$KVFSCTL' fsck '$T/p.store' >'$T/fsck.out' 2>&1; grep -q '$h1' '$T/fsck.out'"
check "daemon alive" kill -0 "$MNT_PID"
finish
