# Sourced by tests/lib.sh and tests/ceph/lib.sh (the benchmarks' clusters):
# free_port [N]: a port P with P..P+N-1 (N default 1) free on 127.0.0.1 and
# all below the kernel's ephemeral range, so no client socket (a mount's
# connection to an OSD, curl) can hold one between this call and the bind;
# starts at a random point so that runs side by side rarely meet
free_port() {
    python3 -c "import random, socket, sys
n = int(sys.argv[1])
lo = int(open('/proc/sys/net/ipv4/ip_local_port_range').read().split()[0])
top = min(lo, 32768) - n
for p in random.sample(range(10000, top), min(4000, top - 10000)):
    socks = []
    try:
        for q in range(p, p + n):
            s = socket.socket(); socks.append(s); s.bind(('127.0.0.1', q))
    except OSError:
        continue
    finally:
        for s in socks: s.close()
    print(p); sys.exit(0)
sys.exit('free_port: no %d free ports below %d' % (n, top + n))" "${1:-1}"
}
