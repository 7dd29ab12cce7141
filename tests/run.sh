#!/bin/bash
# Run every test: unit binaries (build/tests/test_*) and integration scripts
# (tests/integration/*.sh, tests/oracle/*.sh).  Exit status of a test:
# 0 pass, 77 skip, anything else fail.  Last line: "N passed, N failed, N skipped".
# Usage: tests/run.sh [gpu|engines] [PATTERN]
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
    if [[ "$t" == *.sh ]]; then bash "$t" >"$log" 2>&1; else "$t" >"$log" 2>&1; fi
    rc=$?
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
