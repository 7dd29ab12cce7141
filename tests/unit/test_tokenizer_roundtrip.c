/* test_tokenizer_roundtrip.c - byte-level BPE is lossless: detokenize(tokenize(x))
 * == x on real text (licenses) and synthetic Unicode, with SmolLM2's vocabulary.
 * Skips (77) when the model file is absent. */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "gguf.h"
#include "tokenizer.h"

static void roundtrip(const struct kvfs_tokenizer *t, const char *name, const char *text, size_t len,
                      size_t *bytes, size_t *tokens)
{
    int32_t *ids = NULL;
    size_t n = 0;
    char *back = NULL;
    CHECK_EQ(kvfs_tokenize(t, text, len, 0, 0, &ids, &n), 0);
    CHECK_EQ(kvfs_detokenize(t, ids, n, &back), 0);
    if (back && (strlen(back) != len || memcmp(back, text, len) != 0)) {
        fprintf(stderr, "round trip differs: %s\n", name);
        check_failures++;
    }
    *bytes += len;
    *tokens += n;
    free(back);
    free(ids);
}

int main(void)
{
    const char *root = getenv("KVFS_ROOT");
    char path[4096];
    snprintf(path, sizeof(path), "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", root ? root : ".");
    FILE *probe = fopen(path, "rb");
    if (!probe) { printf("skip: %s not present\n", path); return 77; }
    fclose(probe);

    char err[256];
    struct kvfs_gguf *g = NULL;
    struct kvfs_tokenizer *t = NULL;
    CHECK_EQ(kvfs_gguf_open(path, &g, err, sizeof(err)), 0);
    if (!g) { fprintf(stderr, "%s\n", err); return 1; }
    CHECK_EQ(kvfs_tokenizer_load(g, &t, err, sizeof(err)), 0);
    if (!t) { fprintf(stderr, "%s\n", err); kvfs_gguf_close(g); return 1; }

    static const char *const synthetic[] = {
        "CJK 日本語のテキストと中文字符，한국어 문장도 있습니다。",
        "emoji 😀👍🏽🇫🇷 ZWJ 👨‍👩‍👧‍👦, combining e\xcc\x81 a\xcc\x88, Arabic العربية",
        "digits 12345678901234567890 and   runs\t\t\n\n\r\n  of   whitespace   ",
        "<|im_start|>literal control text<|im_end|> stays literal",
        " leading space, trailing space ",
    };
    /* ill-formed UTF-8 is refused before the regexes (PCRE2's JIT, told the
     * text is valid, crashed on F6 A0 90 A4: fuzz_tokenizer) */
    static const char *const ill_formed[] = {
        "\xf6\xa0\x90\xa4", /* above U+10FFFF */
        "\xf4\x90\x80\x80", /* U+110000 */
        "\xed\xa0\x80",      /* a surrogate */
        "\xe0\x80\xaf",      /* overlong '/' */
        "\xf0\x80\x80\xaf", /* overlong '/' */
        "\xc0\xaf",          /* overlong '/' */
        "ok \xff",           /* never a lead byte */
        "cut \xe6\x97",       /* truncated */
    };
    for (size_t i = 0; i < sizeof(ill_formed) / sizeof(ill_formed[0]); i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        CHECK_EQ(kvfs_tokenize(t, ill_formed[i], strlen(ill_formed[i]), 0, 0, &ids, &n), -EILSEQ);
        free(ids);
    }
    size_t bytes = 0, tokens = 0;
    for (size_t i = 0; i < sizeof(synthetic) / sizeof(synthetic[0]); i++)
        roundtrip(t, synthetic[i], synthetic[i], strlen(synthetic[i]), &bytes, &tokens);

    DIR *d = opendir("/usr/share/common-licenses");
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        snprintf(path, sizeof(path), "/usr/share/common-licenses/%s", de->d_name);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        static char buf[1 << 20];
        size_t len = fread(buf, 1, sizeof(buf), f);
        fclose(f);
        roundtrip(t, path, buf, len, &bytes, &tokens);
    }
    if (d) closedir(d);
    printf("%zu bytes, %zu tokens round-tripped\n", bytes, tokens);
    CHECK(bytes > 1000 && tokens > 100);
    kvfs_tokenizer_free(t);
    kvfs_gguf_close(g);
    CHECK_DONE();
}
