#!/usr/bin/env python3
"""notify_listen.py SOCKET MOUNTPOINT OUT: stands in for systemd's notify
socket (sd_notify(3)).  Each datagram becomes a line of OUT: the sender's
pid and the message; on READY=1 also whether MOUNTPOINT is a fuse.kvfs mount
in /proc/mounts and answers stat() of .kvfs/stats (within 10 s) at that
moment.  Returns after STOPPING=1, or after NOTIFY_LISTEN_SECONDS without a
message (default 120)."""
import os, socket, struct, sys, threading

sock_path, mnt, out_path = sys.argv[1:4]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
s.bind(sock_path)
s.settimeout(float(os.environ.get("NOTIFY_LISTEN_SECONDS", "120")))
open(out_path + ".bound", "w").close()


def mount_answers():
    with open("/proc/mounts") as f:
        mounted = any(l.split()[1:3] == [mnt, "fuse.kvfs"] for l in f)
    done = []
    t = threading.Thread(target=lambda: done.append(os.stat(os.path.join(mnt, ".kvfs/stats"))), daemon=True)
    t.start()
    t.join(10)
    return mounted, bool(done)


with open(out_path, "a", buffering=1) as out:
    while True:
        try:
            msg, anc, _, _ = s.recvmsg(4096, socket.CMSG_SPACE(12))
        except socket.timeout:
            out.write("timeout\n")
            break
        pid = -1
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                pid = struct.unpack("iII", data[:12])[0]
        text = msg.decode(errors="replace").replace("\n", " ")
        line = "pid=%d %s" % (pid, text)
        if "READY=1" in msg.decode(errors="replace").split("\n"):
            mounted, answers = mount_answers()
            line += " | mounted=%d answers=%d" % (mounted, answers)
        out.write(line + "\n")
        if "STOPPING=1" in text:
            break
