# ioctl_blend.py MOUNT RECIPE: issue KVFS_IOC_BLEND (fs/kvfs_ioctl.h) on MOUNT/.kvfs/control;
# prints "status n_tokens path error".
import fcntl, os, struct, sys
mnt, recipe = sys.argv[1], sys.argv[2]
size = 8192
IOC = (3 << 30) | (size << 16) | (ord('k') << 8) | 1   # _IOWR('k', 1, 8192 bytes)
buf = bytearray(size)
struct.pack_into('<IIiI', buf, 0, 1, 0, 0, 0)
r = recipe.encode()
buf[272:272 + len(r)] = r
fd = os.open(os.path.join(mnt, '.kvfs/control'), os.O_RDONLY)
fcntl.ioctl(fd, IOC, buf, True)
os.close(fd)
version, flags, status, ntok = struct.unpack_from('<IIiI', buf, 0)
path = bytes(buf[16:272]).split(b'\0')[0].decode()
err = bytes(buf[272 + 7680:]).split(b'\0')[0].decode()
print(status, ntok, path, err)
