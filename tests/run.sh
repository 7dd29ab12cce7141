#!/bin/bash
# Run every test: unit binaries (build/tests/test_*) and integration scripts
# (tests/integration/*.sh, tests/oracle/*.sh).  Exit status of a test:
# 0 pass, 77 skip, anything else fail.  Last line: "N passed, N failed, N skipped".
# Usage: tests/run.sh [gpu|engines] [PATTERN]
# TEST_TIMEOUT=S: a test still running after S seconds is killed and fails
# (the GPU machine's time is counted: a hang must not eat it).
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
export BUILD KVFS_ROOT=$PWD
suite=default
[ "$1" = gpu ] || [ "$1" = engines ] && { suite=$1; shift; }
pattern=${1:-}
logdir=$BUILD/test-logs
mkdir -p "$logdir"

tests=()
if [ $suite = gpu ]; then
    for t in "$BUILD"/tests/gpu_test_*; do [ -x "$t" ] && tests+=("$t"); done
    for t in tests/gpu/*.sh; do [ -f "$t" ] && tests+=("$t"); done
elif [ $suite = engines ]; then # real engines built from source (make test-engines)
    for t in tests/engines/*.sh; do [ -f "$t" ] && tests+=("$t"); done
else
    for t in "$BUILD"/tests/test_*; do [ -x "$t" ] && tests+=("$t"); done
    for t in tests/integration/*.sh tests/oracle/*.sh; do [ -f "$t" ] && tests+=("$t"); done
fi

pass=0; fail=0; skip=0; failed=()
for t in "${tests[@]}"; do
    name=$(basename "$t"); name=${name%.sh}
    [ -n "$pattern" ] && [[ "$name" != *$pattern* ]] && continue
    log=$logdir/$name.log
    start=$EPOCHREALTIME
    lim=()
    [ -n "${TEST_TIMEOUT:-}" ] && lim=(timeout -k 5 "$TEST_TIMEOUT")
    if [[ "$t" == *.sh ]]; then "${lim[@]}" bash "$t" >"$log" 2>&1; else "${lim[@]}" "$t" >"$log" 2>&1; fi
    rc=$?
    [ $rc = 124 ] && [ -n "${TEST_TIMEOUT:-}" ] && echo "killed after ${TEST_TIMEOUT}s (TEST_TIMEOUT)" >> "$log"
    secs=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.1f", b-a}')
    case $rc in
        0)  pass=$((pass+1)); echo "PASS $name (${secs}s)";;
        77) skip=$((skip+1)); echo "SKIP $name: $(grep -m1 -i skip "$log" | cut -c1-160)";;
        *)  fail=$((fail+1)); failed+=("$name"); echo "FAIL $name (rc=$rc, ${secs}s), log: $log"
            tail -n 25 "$log" | sed 's/^/    | /';;
    esac
done
[ ${#failed[@]} -gt 0 ] && echo "failed: ${failed[*]}"
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
