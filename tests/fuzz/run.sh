#!/bin/bash
# Run every fuzz target (build-fuzz/fuzz_*, `make fuzz-build`) for SECONDS
# each, from the seeds in tests/fuzz/corpus/TARGET/; what libFuzzer finds
# goes to $FUZZ_BUILD/corpus/TARGET/ (not the repository), a crash to
# $FUZZ_BUILD/artifacts/.  Prints one line per target (runs, corpus size,
# crashes) and exits non-zero when any target crashed, leaked or timed out.
# Usage: tests/fuzz/run.sh [SECONDS] [TARGET...]   (make fuzz FUZZ_SECONDS=N)
cd "$(dirname "$0")/../.." || exit 1
FUZZ_BUILD=${FUZZ_BUILD:-build-fuzz}
secs=${1:-60}; shift
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(chunk recipe gguf tokenizer llama_state ioctl rebuild serve_plan)
mkdir -p "$FUZZ_BUILD/artifacts"
# fuzz_rebuild writes a store per input under $TMPDIR: on a tmpfs its fsyncs
# cost nothing and the parser gets the CPU (FUZZ_TMPDIR=DIR to choose)
tmp=${FUZZ_TMPDIR:-}
[ -z "$tmp" ] && [ -d /dev/shm ] && [ -w /dev/shm ] && tmp=/dev/shm
failed=0
for t in "${targets[@]}"; do
    bin=$FUZZ_BUILD/fuzz_$t
    [ -x "$bin" ] || { echo "fuzz $t: $bin missing (make fuzz-build)"; failed=1; continue; }
    mkdir -p "$FUZZ_BUILD/corpus/$t"
    log=$FUZZ_BUILD/fuzz_$t.log
    TMPDIR=${tmp:-${TMPDIR:-/tmp}} "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -error_exitcode=99 -print_final_stats=1 \
        -artifact_prefix="$FUZZ_BUILD/artifacts/$t-" "$FUZZ_BUILD/corpus/$t" "tests/fuzz/corpus/$t" > "$log" 2>&1
    rc=$?
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
    echo "fuzz $t: ${secs} s, ${runs:-?} runs, corpus $(ls "$FUZZ_BUILD/corpus/$t" | wc -l) inputs, exit $rc"
    if [ $rc -ne 0 ]; then
        failed=1
        grep -m5 -E 'ERROR|SUMMARY|Test unit written' "$log" | sed 's/^/    /'
    fi
done
exit $failed
