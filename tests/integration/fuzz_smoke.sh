#!/bin/bash
# The fuzz targets (tests/fuzz/, issue 19) built with clang + libFuzzer +
# ASan/UBSan and run briefly from their seed corpora: the chunk header and
# verification, the recipe parser, the GGUF reader, the tokenizer, the
# llama.cpp state reader, the ioctl request decoder, kvfs-serve's request
# planner.  Any crash, leak, sanitizer report or timeout fails.  `make fuzz`
# runs them for longer.
. "$(dirname "$0")/../lib.sh"
command -v clang >/dev/null || skip "clang missing (apt-get install clang)"
printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' > "$T/probe.c"
clang -fsanitize=fuzzer "$T/probe.c" -o "$T/probe" 2>/dev/null || skip "clang cannot build libFuzzer targets"
FB=$BUILD/fuzz # BUILD is absolute here (lib.sh)
check "make fuzz-build" bash -c 'make --no-print-directory -C "$1" FUZZ_BUILD="$2" fuzz-build > "$3" 2>&1' \
    bash "$KVFS_ROOT" "$FB" "$T/build.log"
for t in chunk recipe gguf tokenizer llama_state ioctl rebuild serve_plan; do
    check "seeds of $t are there" test -n "$(ls "$KVFS_ROOT/tests/fuzz/corpus/$t")"
    check "fuzz_$t: 5 s from its seeds, no crash, leak or timeout" \
        env FUZZ_BUILD="$FB" "$KVFS_ROOT/tests/fuzz/run.sh" 5 "$t"
done
finish
