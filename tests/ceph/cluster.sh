#!/bin/bash
# tests/ceph/cluster.sh - a throwaway Ceph cluster on loopback for kvfs's remote-tier tests.
# Adapted from ../shared/tools/ceph-test-cluster.sh (known to work on our 2-core hosts).
#
#   tests/ceph/cluster.sh start DIR [bluestore|memstore] [NOSD]   prints CEPH_CONF path, pool "kvfs"
#     (CEPHX=1: cephx authentication on, client.admin's keyring in DIR/keyring, named by the config)
#   tests/ceph/cluster.sh stop  DIR                               kills daemons, removes DIR
#   tests/ceph/cluster.sh kill-osd DIR ID | start-osd DIR ID      fault injection (kill -9 / restart)
#
# Root, no systemd: 1 mon + NOSD (default 3) OSDs, auth none, pool size 2 / min_size 1.
# bluestore (default) keeps data across OSD restarts, on 4 GiB *sparse* files; memstore loses
# an OSD's data on restart (a weaker fault test), but starts faster. MONPORT (default 40100)
# must differ between clusters running at the same time; the port is fixed in ceph.conf.
# BLUESTORE_BYTES: each OSD's sparse block file (default 4 GiB; a million small objects need more).
# Exit 77 (with a line saying "skip") when the Ceph packages are missing and cannot be installed.
set -euo pipefail
CMD=${1:?usage: cluster.sh start|stop|kill-osd|start-osd DIR ...}; B=${2:?DIR}
PORT=${MONPORT:-40100}
export CEPH_CONF="$B/ceph.conf"

need_packages() {
    command -v ceph-mon >/dev/null && command -v ceph-osd >/dev/null && command -v rados >/dev/null && return 0
    [ "$(id -u)" = 0 ] || { echo "skip: Ceph packages missing and not root to install them"; exit 77; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        ceph-mon ceph-osd ceph-common librados-dev >"${TMPDIR:-/tmp}/kvfs-ceph-apt.log" 2>&1 ||
        { echo "skip: cannot install ceph-mon ceph-osd ceph-common (see ${TMPDIR:-/tmp}/kvfs-ceph-apt.log)"; exit 77; }
}

stop_all() {
    [ -d "$B/run" ] || return 0
    local f p
    for f in "$B"/run/osd.*.pid "$B"/run/mon.*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true; done
    # wait at most 10 s per daemon, then SIGKILL: a stop must never hang a test run
    for f in "$B"/run/*.pid; do
        [ -f "$f" ] || continue; p=$(cat "$f")
        for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$p" 2>/dev/null || true
    done
}

case $CMD in
stop)     stop_all; rm -rf "$B"; exit 0;;
kill-osd) kill -9 "$(cat "$B/run/osd.$3.pid")"; exit 0;;
start-osd) ceph-osd -i "$3" >>"$B/log/start.log" 2>&1; exit 0;;
start)    ;;
*)        echo "cluster.sh: unknown command $CMD" >&2; exit 2;;
esac

STORE=${3:-bluestore}; NOSD=${4:-3}
need_packages
[ "$(id -u)" = 0 ] || { echo "skip: a test cluster needs root"; exit 77; }
stop_all; rm -rf "$B"
# a taken port would only show as the monitor's bind retries in its log
python3 -c "import socket, sys
for p in (int(sys.argv[1]), int(sys.argv[1]) + 1):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try: s.bind(('127.0.0.1', p))
    except OSError as e: sys.exit('cluster.sh: monitor port %d: %s (choose another MONPORT)' % (p, e.strerror))
    finally: s.close()" "$PORT" || exit 1
mkdir -p "$B"/{run,log,crash,mon.a}
# on any failure below, leave nothing running
trap 'rc=$?; [ $rc -ne 0 ] && { echo "cluster.sh: start failed (rc=$rc), logs in $B/log" >&2; tail -n 20 "$B"/log/*.log >&2 2>/dev/null; stop_all; }' EXIT

AUTH=none; [ "${CEPHX:-0}" = 1 ] && AUTH=cephx
FSID=$(uuidgen); MONADDR="[v2:127.0.0.1:$PORT,v1:127.0.0.1:$((PORT+1))]"
cat > "$CEPH_CONF" <<CONF
[global]
fsid = $FSID
mon host = $MONADDR
public addr = 127.0.0.1
public network = 127.0.0.0/8
ms bind ipv4 = true
ms bind ipv6 = false
auth cluster required = $AUTH
auth service required = $AUTH
auth client required = $AUTH
keyring = $B/keyring
mon warn on insecure global id reclaim allowed = false
run dir = $B/run
pid file = $B/run/\$name.pid
crash dir = $B/crash
osd pool default size = 2
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool delete = true
mon osd down out interval = 10
# one host: without these a hung OSD is never marked down
mon osd min down reporters = 1
mon osd reporter subtree level = osd
mon data avail warn = 1
mon data avail crit = 0
osd heartbeat interval = 1
osd heartbeat grace = 5
[mon]
mon data = $B/mon.\$id
admin socket = $B/run/\$name.asok
log file = $B/log/\$name.log
[osd]
osd data = $B/osd.\$id
keyring = $B/osd.\$id/keyring
admin socket = $B/run/\$name.asok
log file = $B/log/\$name.log
osd objectstore = $STORE
memstore device bytes = 1073741824
bluestore block create = true
bluestore block size = ${BLUESTORE_BYTES:-4294967296}
bluestore fsck on mount = false
bluestore cache autotune = false
bluestore cache size = 134217728
osd memory target = 939524096
osd max object size = 134217728
[client]
# clients must not share an admin socket or log file with each other or the daemons
admin socket =
log file =
# bounded client waits (kvfs documents these bounds): reconnect fast after an OSD dies
objecter tick interval = 1
objecter timeout = 2
rados osd op timeout = 5
rados mon op timeout = 5
client mount timeout = 5
CONF
monmaptool --create --fsid "$FSID" --addv a "$MONADDR" "$B/monmap" >/dev/null
if [ $AUTH = cephx ]; then
    ceph-authtool --create-keyring "$B/mon.keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
    ceph-authtool --create-keyring "$B/keyring" --gen-key -n client.admin --cap mon 'allow *' --cap osd 'allow *' \
        --cap mgr 'allow *' >/dev/null
    ceph-authtool "$B/mon.keyring" --import-keyring "$B/keyring" >/dev/null
    ceph-mon --mkfs -i a --monmap "$B/monmap" --keyring "$B/mon.keyring"
else
    ceph-mon --mkfs -i a --monmap "$B/monmap"
fi
ceph-mon -i a
for i in $(seq 0 $((NOSD-1))); do
    U=$(uuidgen)
    if [ $AUTH = cephx ]; then
        KEY=$(ceph-authtool --gen-print-key)
        id=$(echo "{\"cephx_secret\": \"$KEY\"}" | timeout 30 ceph osd new "$U" -i -)
        mkdir -p "$B/osd.$id"
        ceph-authtool --create-keyring "$B/osd.$id/keyring" --name "osd.$id" --add-key "$KEY" >/dev/null
    else
        id=$(timeout 30 ceph osd new "$U")
    fi
    mkdir -p "$B/osd.$id"
    ceph-osd -i "$id" --mkfs --osd-uuid "$U" >>"$B/log/mkfs.log" 2>&1
    ceph-osd -i "$id" >>"$B/log/start.log" 2>&1
done
timeout 30 ceph osd pool create kvfs 8 8 replicated >/dev/null 2>&1
timeout 30 ceph osd pool application enable kvfs rados >/dev/null 2>&1
# ready once a write succeeds (all PGs of the pool have peered)
echo ready | timeout 60 rados -p kvfs put _probe -
timeout 30 rados -p kvfs rm _probe
trap - EXIT
echo "$CEPH_CONF"
