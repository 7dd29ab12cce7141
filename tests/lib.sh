# lib.sh - helpers for integration tests that mount kvfs for real.
# Each test gets a private temp dir; mounts are always unmounted on exit.
set -u
KVFS_ROOT=${KVFS_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$KVFS_ROOT/$BUILD;; esac
KVFS=$BUILD/kvfs
KVFSCTL=$BUILD/kvfsctl
. "$KVFS_ROOT/tests/ports.sh" # free_port
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
T=$(mktemp -d /tmp/kvfs-it.XXXXXX)
MOUNTS=()
PIDS=()
FAILS=0

cleanup() {
    for mp in "${MOUNTS[@]}"; do
        fusermount3 -u "$mp" 2>/dev/null || fusermount3 -uz "$mp" 2>/dev/null
    done
    for pid in "${PIDS[@]}"; do
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null
    done
    if [ "$FAILS" -eq 0 ] && [ -z "${KEEP:-}" ]; then rm -rf "$T"; else echo "kept $T for inspection"; fi
}
trap cleanup EXIT

skip() { echo "skip: $*"; exit 77; }
[ -e /dev/fuse ] || skip "/dev/fuse missing"
command -v fusermount3 >/dev/null || skip "fusermount3 missing"
[ -x "$KVFS" ] || { echo "FAIL: $KVFS not built"; exit 1; }

fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
ok() { echo "ok: $*"; }
check() { # check DESCRIPTION COMMAND...
    local d=$1; shift
    if "$@"; then ok "$d"; else fail "$d"; fi
}
finish() {
    # unmount everything, let the daemons exit, then look for sanitizer reports
    for mp in "${MOUNTS[@]}"; do fusermount3 -u "$mp" 2>/dev/null; done
    for pid in "${PIDS[@]}"; do
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    done
    if grep -l -E "ERROR: (Address|Leak)Sanitizer|runtime error:" "$T"/*.log 2>/dev/null; then
        fail "sanitizer reports in the daemon logs:"
        grep -h -A12 -E "ERROR: (Address|Leak)Sanitizer|runtime error:" "$T"/*.log | head -60
    fi
    if [ "$FAILS" -ne 0 ]; then echo "$FAILS check(s) failed"; exit 1; fi
    echo "all checks passed"; exit 0
}

# mount_kvfs NAME [OPTIONS]: mounts $T/NAME.mnt on store $T/NAME.store,
# log in $T/NAME.log; sets MNT_PID.  Waits until the mount answers.
# KVFS_PASSTHROUGH=on|off|auto: every mount's passthrough= unless the test
# sets it (.ci/run runs the suite once with the default, auto, and once off)
mount_kvfs() {
    local name=$1 opts=${2:-}
    [ -n "${KVFS_PASSTHROUGH:-}" ] && [[ ",$opts," != *,passthrough=* ]] && opts=${opts:+$opts,}passthrough=$KVFS_PASSTHROUGH
    local mp=$T/$name.mnt store=$T/$name.store
    mkdir -p "$mp" "$store"
    "$KVFS" -f -o "store=$store${opts:+,$opts}" "$mp" >>"$T/$name.log" 2>&1 &
    MNT_PID=$!
    PIDS+=("$MNT_PID")
    for _ in $(seq 600); do # up to 30 s: loading a model (model=) under ASan takes a while
        if mountpoint -q "$mp" && [ -e "$mp/.kvfs/stats" ]; then
            MOUNTS+=("$mp")
            return 0
        fi
        kill -0 "$MNT_PID" 2>/dev/null || break
        sleep 0.05
    done
    echo "mount of $mp failed:"; cat "$T/$name.log"
    return 1
}

unmount_kvfs() { # unmount_kvfs NAME: clean unmount, waits for the daemon
    local mp=$T/$1.mnt
    fusermount3 -u "$mp" || return 1
    wait "$MNT_PID" 2>/dev/null
    return 0
}

# license_chunk MOUNT LICENSE BYTES: the license's first BYTES prefilled with
# $MODEL; prints the hash.  Where the licenses are not installed (a bare GPU
# machine), BYTES of random base64 text instead.
license_chunk() {
    local f=$T/${2}.${3}.txt
    head -c "$3" "/usr/share/common-licenses/$2" > "$f" 2>/dev/null || head -c "$3" /dev/urandom | base64 > "$f"
    "$KVFSCTL" prefill -m "$MODEL" -M "$1" "$f" 2>/dev/null | cut -d' ' -f1
}

# direct_io_ok DIR: 1 if files in DIR can be opened O_DIRECT (not on tmpfs
# before Linux 6.6), else 0
direct_io_ok() {
    python3 -c "import os, sys
p = sys.argv[1] + '/.dio-probe'
try:
    os.close(os.open(p, os.O_CREAT | os.O_RDWR | os.O_DIRECT, 0o600)); print(1)
except OSError:
    print(0)
finally:
    try: os.unlink(p)
    except OSError: pass" "$1"
}

# license_chunks MOUNT BYTES LICENSE...: license_chunk of each license, the
# hashes in h[1], h[2], ...
license_chunks() {
    local mnt=$1 bytes=$2 lic i=0
    shift 2
    for lic in "$@"; do
        i=$((i + 1))
        h[$i]=$(license_chunk "$mnt" "$lic" "$bytes")
    done
}

# blend_vs_local MOUNT: with $MODEL, the question $Q and the chunk hashes
# h[1..2], a 0.15 blend through MOUNT equals `kvfsctl blend --local` of the
# same chunks byte for byte, and ratio 1.0 equals a full prefill of its tokens
blend_vs_local() {
    local mnt=$1 ids
    "$KVFSCTL" blend -M "$mnt" --name r --ratio 0.15 --suffix "$Q" ${h[1]} ${h[2]} > /dev/null
    "$KVFSCTL" blend --local -m "$MODEL" -o "$T/local.kv" --ratio 0.15 --suffix "$Q" \
        "$mnt/chunks/${h[1]}.kv" "$mnt/chunks/${h[2]}.kv" 2>/dev/null
    check "blend through the mount == in-process blend" cmp "$T/local.kv" "$mnt/blends/r.kv"
    "$KVFSCTL" blend --local -m "$MODEL" -o "$T/full.kv" --ratio 1.0 --suffix "$Q" \
        "$mnt/chunks/${h[1]}.kv" "$mnt/chunks/${h[2]}.kv" 2>/dev/null
    ids=$("$KVFSCTL" info --json --tokens "$T/full.kv" |
        python3 -c 'import json,sys; print(",".join(map(str, json.load(sys.stdin)["tokens"])))')
    "$KVFSCTL" prefill -m "$MODEL" -o "$T/ref.kv" --ids "$ids" > /dev/null 2>&1
    check "ratio 1.0 = a full prefill" "$KVFSCTL" compare --max-err 0 "$T/full.kv" "$T/ref.kv"
}

# view_restores_and_imports MOUNT: with $MODEL, chunk h[1]'s llama/ views
# (V rows, and V transposed without flash attention) restored by llama.cpp
# give its own eval of the state's tokens + 3 more (llama_restore_check.py:
# 0.01 nats V transposed; 0.05 with flash attention, whose batch and
# continuation sum in f16 otherwise), and each imported back is the very
# same chunk.  The caller checks llama-cpp-python is there.
view_restores_and_imports() {
    local mnt=$1 out rc R=$KVFS_ROOT/tests/oracle/llama_restore_check.py
    cp "$mnt/llama/${h[1]}.vt.llama" "$T/vt.llama"
    cp "$mnt/llama/${h[1]}.llama" "$T/v.llama"
    out=$(python3 "$R" "$MODEL" "$T/vt.llama" 72,58,97 0.01 --no-flash-attn 2>/dev/null); rc=$?
    check "llama.cpp restores the view, V transposed: $out" test $rc = 0
    out=$(python3 "$R" "$MODEL" "$T/v.llama" 72,58,97 0.05 2>/dev/null); rc=$?
    check "... and with flash attention: $out" test $rc = 0
    check "kvfsctl import of the view: the very same chunk" sh -c \
        "'$KVFSCTL' import -m '$MODEL' -o '$T/imp.kv' '$T/v.llama' > /dev/null && cmp '$T/imp.kv' '$mnt/chunks/${h[1]}.kv'"
    check "... and of the V-transposed view" sh -c \
        "'$KVFSCTL' import -m '$MODEL' -o '$T/imp2.kv' '$T/vt.llama' > /dev/null && cmp '$T/imp2.kv' '$mnt/chunks/${h[1]}.kv'"
}

# blends_at_once MOUNT CHUNK_DIR MAX_ERR [greedy]: with $MODEL, the question
# $Q and the chunk hashes h[1..3], 8 distinct recipes (the question numbered)
# blended at once through MOUNT's daemon (blend_jobs lanes serve blend after
# blend); each checked against `kvfsctl blend --local` of the same chunks
# (CHUNK_DIR) within MAX_ERR, and with "greedy" for the same greedy tokens;
# then that several ran at once (the daemon's max_running).
blends_at_once() {
    local mnt=$1 dir=$2 max_err=$3 greedy=${4:-} r g1 g2 pids=()
    for r in 1 2 3 4 5 6 7 8; do
        "$KVFSCTL" blend -M "$mnt" --name "c$r" --ratio 0.15 --suffix "$Q ($r)" ${h[$((r % 3 + 1))]} ${h[1]} ${h[2]} \
            > /dev/null 2> "$T/c$r.err" &
        pids+=($!)
    done
    wait "${pids[@]}" # not a bare wait: the daemons are this shell's children too
    for r in 1 2 3 4 5 6 7 8; do
        "$KVFSCTL" blend --local -m "$MODEL" -o "$T/c$r-local.kv" --ratio 0.15 --suffix "$Q ($r)" \
            "$dir/${h[$((r % 3 + 1))]}.kv" "$dir/${h[1]}.kv" "$dir/${h[2]}.kv" 2>/dev/null
        if [ -n "$greedy" ]; then
            g1=$("$KVFSCTL" generate -m "$MODEL" --kv "$mnt/blends/c$r.kv" -n 8 --ids 2>/dev/null)
            g2=$("$KVFSCTL" generate -m "$MODEL" --kv "$T/c$r-local.kv" -n 8 --ids 2>/dev/null)
            check "blend $r of 8 at once: greedy tokens ($g1) == the in-process blend's" test -n "$g1" -a "$g1" = "$g2"
        fi
        check "blend $r of 8 at once: K/V within $max_err of the in-process blend's ($("$KVFSCTL" compare \
            "$mnt/blends/c$r.kv" "$T/c$r-local.kv" 2>&1 | tail -n 1))" \
            "$KVFSCTL" compare --max-err "$max_err" "$mnt/blends/c$r.kv" "$T/c$r-local.kv"
    done
    check "blends ran at once ($(grep -o '"max_running": [0-9]*' "$mnt/.kvfs/stats"))" \
        sh -c "grep -o '\"max_running\": [0-9]*' '$mnt/.kvfs/stats' | awk '{exit !(\$2 >= 2)}'"
}

synth() { # synth FILE [synth options]: prints the hash
    local f=$1; shift
    "$KVFSCTL" synth -o "$f" "$@"
}
