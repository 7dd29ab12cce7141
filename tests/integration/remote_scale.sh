#!/bin/bash
# A fresh host lists a pool of many chunks in bounded memory (issue 44,
# "Scale, measured"; the figures at a million chunks are
# bench/remote_scale.sh's).  Two namespaces of pool kvfs
# filled by bench/remote_populate, which writes kvfs's own object and index
# formats: "small" with 20,000 chunks, "big" with 50,000.  A fresh host
# (empty store) on each: ls of chunks/ lists every populated name exactly
# once (against the names remote_populate computes), sampled chunks read
# byte for byte through the mount, and the big pool's host peaks (VmHWM)
# less than 40 bytes per extra chunk above the small pool's: a listing kept
# in memory, a 64-byte name per chunk, would not (not checked under a
# sanitizer, whose quarantine keeps freed memory).  A stat of a name the pool
# lacks sends one RADOS op (counted by the mount's objecter, through an
# admin socket of its own).
. "$(dirname "$0")/../lib.sh"
ldd "$KVFS" | grep -q librados || skip "kvfs was built without librados (librados-dev missing): remote tier not tested"
POP=$BUILD/remote_populate
[ -x "$POP" ] || { echo "FAIL: $POP not built"; exit 1; }
. "$KVFS_ROOT/tests/ceph/lib.sh"
ceph_test_cluster
SMALL=20000 BIG=50000

kib() { awk '$1 == "VmHWM:" {print $2}' "/proc/$1/status"; }
ops() { ceph --admin-daemon "$1" perf dump objecter | python3 -c "import json,sys; print(json.load(sys.stdin)['objecter']['op_send'])"; }
declare -A HWM
for ns in small big; do
    n=$SMALL; [ $ns = big ] && n=$BIG
    check "$n synthetic chunks into namespace $ns" sh -c "'$POP' '$CEPH_CONF' kvfs $ns $n > '$T/pop.$ns'"
    sed "s|^admin socket =\$|admin socket = $T/$ns.asok|" "$CEPH_CONF" > "$T/$ns.conf"
    mount_kvfs $ns "rados=kvfs,ceph_conf=$T/$ns.conf,rados_timeout=3,rados_namespace=$ns,remote_list=3600" || exit 1
    M=$T/$ns.mnt
    check "a fresh host on $ns lists all $n" \
        sh -c "for i in \$(seq 600); do [ \$(python3 -c \"import json; print(json.load(open('$M/.kvfs/stats'))['remote']['listed'])\") -ge $n ] && exit 0; sleep 0.1; done; exit 1"
    ls "$M/chunks" | sed 's/\.kv$//' > "$T/ls.$ns"
    "$POP" --names 0 $n | sort > "$T/names.$ns"
    check "... ls of chunks/ lists every populated name once ($(wc -l < "$T/ls.$ns") of $n)" cmp -s "$T/ls.$ns" "$T/names.$ns"
    check "... ls again: the same" sh -c "ls '$M/chunks' | sed 's/\.kv\$//' | cmp -s - '$T/ls.$ns'"
    HWM[$ns]=$(kib "$MNT_PID")
    for i in 0 $((n / 3)) $((n - 1)); do
        h=$("$POP" --chunk $i "$T/c$i.kv")
        check "... chunk $i read byte for byte" cmp -s "$T/c$i.kv" "$M/chunks/$h.kv"
    done
    a=$(ops "$T/$ns.asok")
    for k in $(seq 20); do stat "$M/chunks/$(printf '%064x' $((0xbad000 + k))).kv" >/dev/null 2>&1; done
    b=$(ops "$T/$ns.asok")
    check "... 20 stats of names the pool lacks: one RADOS op each ($((b - a)))" test $((b - a)) -eq 20
    check "... and the names are not there" test ! -e "$M/chunks/$(printf '%064x' $((0xbad000 + 1))).kv"
done
echo "  peak RSS: $((HWM[small] / 1024)) MiB with $SMALL chunks, $((HWM[big] / 1024)) MiB with $BIG"
if ldd "$KVFS" | grep -q 'libasan\|libtsan'; then
    echo "  (a sanitizer build: its quarantine keeps freed memory; the bound is not checked)"
else
    check "the bigger pool's host peaks less than 40 bytes per extra chunk higher ($(( (HWM[big] - HWM[small]) * 1024 / (BIG - SMALL) )))" \
        test $(( (HWM[big] - HWM[small]) * 1024 )) -lt $(( 40 * (BIG - SMALL) ))
fi
finish
