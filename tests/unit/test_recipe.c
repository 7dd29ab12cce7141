/* test_recipe.c - blend recipes (blend/recipe.h) without a model or FUSE:
 * every line kind, comments and blank lines, errors with the line the user
 * sees, NUL bytes, too many chunks, empty or missing query, bad token ids,
 * the NAME.kv and `chunk NAME` forms; the canonical key (equal for recipes
 * that mean the same, different when the blend would differ, auto keyed by
 * its floor) and the common chunk prefix. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "recipe.h"

#define H4(c) c c c c
#define H16(c) H4(c) H4(c) H4(c) H4(c)
#define H(c) H16(c) H16(c) H16(c) H16(c) /* 64 times */
static const char HA[] = H("a"), HB[] = H("b"), HC[] = H("c"), HD[] = H("d");

static char err[512];

static int parse(const char *text, struct kvfs_recipe *r)
{
    err[0] = '\0';
    return kvfs_recipe_parse(text, strlen(text), r, err, sizeof(err));
}

/* parse, expect rc and an error containing want (NULL: any) */
static int refused(const char *text, int rc, const char *want)
{
    struct kvfs_recipe r;
    int got = parse(text, &r);
    if (got == 0)
        kvfs_recipe_free(&r);
    if (got != rc || (want && !strstr(err, want))) {
        fprintf(stderr, "recipe %.60s...: rc %d (want %d), err '%s' (want '%s')\n", text, got, rc, err,
                want ? want : "");
        return 0;
    }
    return 1;
}

/* the key of a recipe text (with a min_ratio floor) */
static int key_of(const char *text, float min_ratio, char key[KVFS_HASH_HEX_LEN + 1])
{
    struct kvfs_recipe r;
    int rc = parse(text, &r);
    if (rc) {
        fprintf(stderr, "unexpected parse error for key: %s\n", err);
        snprintf(key, KVFS_HASH_HEX_LEN + 1, "parse error %d", rc);
        return rc;
    }
    kvfs_recipe_key(&r, min_ratio, 0, key);
    kvfs_recipe_free(&r);
    return 0;
}

static int same_key(const char *a, const char *b, float min_a, float min_b)
{
    char ka[KVFS_HASH_HEX_LEN + 1], kb[KVFS_HASH_HEX_LEN + 1];
    if (key_of(a, min_a, ka) || key_of(b, min_b, kb))
        return -1;
    return strcmp(ka, kb) == 0;
}

/* printf into one of 64 rotating buffers (enough for every string in use at once) */
static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char bufs[64][8192];
static int nbuf;
static char *fmt(const char *f, ...)
{
    char *b = bufs[nbuf++ % 64];
    va_list ap;
    va_start(ap, f);
    vsnprintf(b, sizeof(bufs[0]), f, ap);
    va_end(ap);
    return b;
}

int main(void)
{
    struct kvfs_recipe r;
    CHECK_EQ(strlen(HA), KVFS_HASH_HEX_LEN);

    /* every line kind, with comments, blank lines and surrounding spaces */
    const char *full = fmt("# a RAG prompt\n"
                           "\n"
                           "ratio=0.3\n"
                           "   select=fixed   \n"
                           "%s\n"
                           "chunk %s\n"
                           "\t%s.kv\n"
                           "chunk %s.kv\n"
                           "   # indented comment\n"
                           "suffix=\\nQuestion: a\\tb \\\\ c\\q?\\nAnswer: \n",
                           HA, HB, HC, HA);
    CHECK_EQ(parse(full, &r), 0);
    CHECK_EQ(r.n, 4);
    CHECK(!strcmp(r.hashes[0], HA));
    CHECK(!strcmp(r.hashes[1], HB));
    CHECK(!strcmp(r.hashes[2], HC)); /* NAME.kv: the hash without .kv */
    CHECK(!strcmp(r.hashes[3], HA)); /* the same chunk twice is kept twice */
    CHECK(r.ratio > 0.2999f && r.ratio < 0.3001f);
    CHECK_EQ(r.auto_ratio, 0);
    CHECK_EQ(r.select, KVFS_BLEND_SELECT_FIXED);
    /* escapes: \n \t \\, any other \x is x; trailing spaces of the query kept */
    CHECK(r.suffix && !strcmp(r.suffix, "\nQuestion: a\tb \\ cq?\nAnswer: "));
    CHECK_EQ(r.n_suffix_ids, 0);
    CHECK(r.suffix_ids == NULL);
    kvfs_recipe_free(&r);
    CHECK(r.suffix == NULL && r.suffix_ids == NULL); /* free is idempotent */
    kvfs_recipe_free(&r);

    /* defaults: ratio 0.15, query selection */
    CHECK_EQ(parse(fmt("%s\nsuffix=q\n", HA), &r), 0);
    CHECK(r.ratio == KVFS_BLEND_DEFAULT_RATIO);
    CHECK_EQ(r.select, KVFS_BLEND_SELECT_DEFAULT);
    CHECK_EQ(r.auto_ratio, 0);
    CHECK(!strcmp(r.suffix, "q"));
    kvfs_recipe_free(&r);
    /* no trailing newline, CRLF line ends on chunk and option lines */
    CHECK_EQ(parse(fmt("ratio=auto\r\nselect=gradual\r\n%s\r\nsuffix=q", HD), &r), 0);
    CHECK_EQ(r.auto_ratio, 1);
    CHECK_EQ(r.select, KVFS_BLEND_SELECT_GRADUAL);
    CHECK_EQ(r.n, 1);
    CHECK(!strcmp(r.hashes[0], HD));
    kvfs_recipe_free(&r);
    /* select=query, ratio bounds 0 and 1, the last ratio= wins over auto */
    CHECK_EQ(parse(fmt("select=query\nratio=auto\nratio=1\n%s\nsuffix=q\n", HA), &r), 0);
    CHECK_EQ(r.select, KVFS_BLEND_SELECT_QUERY);
    CHECK_EQ(r.auto_ratio, 0);
    CHECK(r.ratio == 1.0f);
    kvfs_recipe_free(&r);
    CHECK_EQ(parse(fmt("ratio=0\n%s\nsuffix=q\n", HA), &r), 0);
    CHECK(r.ratio == 0.0f);
    kvfs_recipe_free(&r);

    /* suffix_tokens: ids separated by commas and/or spaces */
    CHECK_EQ(parse(fmt("%s\nsuffix_tokens=1, 2,3 2147483647\n", HB), &r), 0);
    CHECK_EQ(r.n_suffix_ids, 4);
    if (r.n_suffix_ids == 4) {
        CHECK_EQ(r.suffix_ids[0], 1);
        CHECK_EQ(r.suffix_ids[1], 2);
        CHECK_EQ(r.suffix_ids[2], 3);
        CHECK_EQ(r.suffix_ids[3], 2147483647);
    }
    CHECK(r.suffix == NULL);
    kvfs_recipe_free(&r);

    /* exactly 64 chunks is fine, 65 is -E2BIG on the 65th chunk's line */
    {
        static char big[80 * 70];
        size_t o = 0;
        o += (size_t)snprintf(big + o, sizeof(big) - o, "suffix=q\n");
        for (int i = 0; i < KVFS_BLEND_MAX_CHUNKS; i++)
            o += (size_t)snprintf(big + o, sizeof(big) - o, "%s\n", i % 2 ? HA : HB);
        CHECK_EQ(parse(big, &r), 0);
        CHECK_EQ(r.n, KVFS_BLEND_MAX_CHUNKS);
        kvfs_recipe_free(&r);
        snprintf(big + o, sizeof(big) - o, "%s\n", HC);
        CHECK(refused(big, -E2BIG, "line 66: too many chunks"));
    }

    /* errors name the line as the user sees it (1-based, blank and comment
     * lines counted) */
    CHECK(refused(fmt("%s\nratio=2\nsuffix=q\n", HA), -EINVAL, "line 2: ratio"));
    CHECK(refused(fmt("%s\nratio=-0.1\nsuffix=q\n", HA), -EINVAL, "line 2: ratio"));
    CHECK(refused(fmt("%s\nratio=0.2x\nsuffix=q\n", HA), -EINVAL, "line 2: ratio"));
    CHECK(refused(fmt("%s\nratio=\nsuffix=q\n", HA), -EINVAL, "line 2: ratio"));
    CHECK(refused(fmt("%s\nratio=nan\nsuffix=q\n", HA), -EINVAL, "line 2: ratio"));
    CHECK(refused(fmt("# c\n%s\nselect=best\nsuffix=q\n", HA), -EINVAL, "line 3: select"));
    CHECK(refused(fmt("# c\n  # c\n%s\nsuffx=q\n", HA), -EINVAL, "line 4: expected a chunk hash"));
    CHECK(refused("not-a-hash\nsuffix=x\n", -EINVAL, "line 1: expected a chunk hash"));
    /* a blank line (empty, or only spaces) counts as a line */
    CHECK(refused(fmt("%s\n   \nratio=7\nsuffix=q\n", HA), -EINVAL, "line 3: ratio"));
    CHECK(refused(fmt("%s\n\nratio=7\nsuffix=q\n", HA), -EINVAL, "line 3: ratio"));
    CHECK(refused(fmt("\n\n%s\n\nratio=7\nsuffix=q\n", HA), -EINVAL, "line 5: ratio"));
    /* hashes: 64 lowercase hex digits, nothing else */
    {
        char up[KVFS_HASH_HEX_LEN + 1], bad[KVFS_HASH_HEX_LEN + 1];
        memcpy(up, HA, sizeof(up));
        up[10] = 'A';
        CHECK(refused(fmt("%s\nsuffix=q\n", up), -EINVAL, "line 1: "));
        CHECK(strstr(err, "lowercase hex") != NULL);
        memcpy(bad, HA, sizeof(bad));
        bad[63] = 'g';
        CHECK(refused(fmt("suffix=q\n%s\n", bad), -EINVAL, "line 2: "));
        CHECK(refused(fmt("suffix=q\n%.63s\n", HA), -EINVAL, "line 2: expected a chunk hash"));
        CHECK(refused(fmt("suffix=q\n%s0\n", HA), -EINVAL, "line 2: expected a chunk hash"));
        CHECK(refused(fmt("suffix=q\n%s.kvx\n", HA), -EINVAL, "line 2: expected a chunk hash"));
        CHECK(refused(fmt("suffix=q\nchunk  %s\n", HA), -EINVAL, "line 2: "));
        CHECK(refused(fmt("suffix=q\nchunk\n"), -EINVAL, "line 2: "));
    }
    /* bad suffix_tokens */
    CHECK(refused(fmt("%s\nsuffix_tokens=1,x,3\n", HA), -EINVAL, "line 2: suffix_tokens"));
    CHECK(refused(fmt("%s\nsuffix_tokens=-1\n", HA), -EINVAL, "line 2: suffix_tokens"));
    CHECK(refused(fmt("%s\nsuffix_tokens=2147483648\n", HA), -EINVAL, "line 2: suffix_tokens"));
    CHECK(refused(fmt("%s\n#\nsuffix_tokens=12abc\n", HA), -EINVAL, "line 3: suffix_tokens"));
    CHECK(refused(fmt("%s\nsuffix_tokens=99999999999999999999\n", HA), -EINVAL, "suffix_tokens"));
    /* the query: missing, empty, or an empty id list */
    CHECK(refused(fmt("%s\n", HA), -EINVAL, "needs the query"));
    CHECK(refused(fmt("%s\nsuffix=\n", HA), -EINVAL, "empty"));
    CHECK(refused(fmt("%s\nsuffix_tokens=\n", HA), -EINVAL, "needs the query"));
    /* no chunk at all, or nothing at all */
    CHECK(refused("suffix=q\n", -EINVAL, "at least one chunk"));
    CHECK(refused("# only a comment\n\n", -EINVAL, "at least one chunk"));
    CHECK(refused("", -EINVAL, "at least one chunk"));
    /* NUL bytes anywhere are refused (len counts past them) */
    {
        char t[200];
        int n = snprintf(t, sizeof(t), "%s\nsuffix=ab", HA);
        t[n - 1] = '\0'; /* "suffix=a\0" */
        err[0] = '\0';
        CHECK_EQ(kvfs_recipe_parse(t, (size_t)n, &r, err, sizeof(err)), -EINVAL);
        CHECK(strstr(err, "NUL") != NULL);
        n = snprintf(t, sizeof(t), "%s\nsuffix=q\n", HA);
        t[n] = '\0';
        err[0] = '\0';
        CHECK_EQ(kvfs_recipe_parse(t, (size_t)n + 1, &r, err, sizeof(err)), -EINVAL);
        CHECK(strstr(err, "NUL") != NULL);
        /* and the same text without the NUL parses */
        CHECK_EQ(kvfs_recipe_parse(t, (size_t)n, &r, err, sizeof(err)), 0);
        kvfs_recipe_free(&r);
    }

    /* keys: the same blend, written differently */
    const char *base = fmt("ratio=0.3\nselect=fixed\n%s\n%s\nsuffix=\\nQ: why?\n", HA, HB);
    CHECK_EQ(same_key(base, fmt("# reordered options, comments, spaces\n\n  %s  \nselect=fixed\n"
                                "suffix=\\nQ: why?\n\t\n%s.kv\n ratio=0.30\n",
                                HA, HB),
                      0.15f, 0.15f),
             1);
    CHECK_EQ(same_key(base, fmt("chunk %s\nchunk %s\nratio=0.3\nselect=fixed\nsuffix=\\nQ: why?", HA, HB), 0.15f,
                      0.15f),
             1);
    /* the min_ratio floor is no part of a fixed ratio's key */
    CHECK_EQ(same_key(base, base, 0.15f, 0.5f), 1);
    /* ... but different blends have different keys */
    CHECK_EQ(same_key(base, fmt("ratio=0.31\nselect=fixed\n%s\n%s\nsuffix=\\nQ: why?\n", HA, HB), 0.15f, 0.15f), 0);
    CHECK_EQ(same_key(base, fmt("ratio=0.3\nselect=query\n%s\n%s\nsuffix=\\nQ: why?\n", HA, HB), 0.15f, 0.15f), 0);
    CHECK_EQ(same_key(base, fmt("ratio=0.3\nselect=gradual\n%s\n%s\nsuffix=\\nQ: why?\n", HA, HB), 0.15f, 0.15f),
             0);
    CHECK_EQ(same_key(base, fmt("ratio=0.3\nselect=fixed\n%s\n%s\nsuffix=\\nQ: why?\n", HB, HA), 0.15f, 0.15f), 0);
    CHECK_EQ(same_key(base, fmt("ratio=0.3\nselect=fixed\n%s\nsuffix=\\nQ: why?\n", HA), 0.15f, 0.15f), 0);
    CHECK_EQ(same_key(base, fmt("ratio=0.3\nselect=fixed\n%s\n%s\n%s\nsuffix=\\nQ: why?\n", HA, HB, HB), 0.15f,
                      0.15f),
             0);
    CHECK_EQ(same_key(base, fmt("ratio=0.3\nselect=fixed\n%s\n%s\nsuffix=\\nQ: why!\n", HA, HB), 0.15f, 0.15f), 0);
    CHECK_EQ(same_key(base, fmt("ratio=0.3\nselect=fixed\n%s\n%s\nsuffix=\\nQ: why? \n", HA, HB), 0.15f, 0.15f), 0);
    /* query as ids vs text; different ids */
    CHECK_EQ(same_key(fmt("%s\nsuffix_tokens=1,2\n", HA), fmt("%s\nsuffix_tokens=1 , 2\n", HA), 0.15f, 0.15f), 1);
    CHECK_EQ(same_key(fmt("%s\nsuffix_tokens=1,2\n", HA), fmt("%s\nsuffix_tokens=2,1\n", HA), 0.15f, 0.15f), 0);
    CHECK_EQ(same_key(fmt("%s\nsuffix_tokens=1,2\n", HA), fmt("%s\nsuffix=12\n", HA), 0.15f, 0.15f), 0);
    /* auto: keyed by the floor it runs with, and not equal to a fixed ratio */
    const char *au = fmt("ratio=auto\n%s\nsuffix=q\n", HC);
    CHECK_EQ(same_key(au, au, 0.15f, 0.15f), 1);
    CHECK_EQ(same_key(au, fmt("# the same\nsuffix=q\nratio=auto\n%s.kv\n", HC), 0.2f, 0.2f), 1);
    CHECK_EQ(same_key(au, au, 0.15f, 0.2f), 0);
    CHECK_EQ(same_key(au, fmt("ratio=0.15\n%s\nsuffix=q\n", HC), 0.15f, 0.15f), 0);
    /* a key is 64 lowercase hex digits */
    {
        char k[KVFS_HASH_HEX_LEN + 1];
        CHECK_EQ(key_of(base, 0.15f, k), 0);
        CHECK_EQ(strlen(k), KVFS_HASH_HEX_LEN);
        CHECK(strspn(k, "0123456789abcdef") == KVFS_HASH_HEX_LEN);
    }

    /* the leading chunk list two recipes share */
    {
        struct kvfs_recipe a, b;
        CHECK_EQ(parse(fmt("%s\n%s\n%s\nsuffix=q\n", HA, HB, HC), &a), 0);
        CHECK_EQ(parse(fmt("%s\n%s\n%s\nsuffix=other\n", HA, HB, HD), &b), 0);
        CHECK_EQ(kvfs_recipe_common_prefix(&a, &b), 2);
        CHECK_EQ(kvfs_recipe_common_prefix(&b, &a), 2);
        CHECK_EQ(kvfs_recipe_common_prefix(&a, &a), 3);
        kvfs_recipe_free(&b);
        CHECK_EQ(parse(fmt("%s\nsuffix=q\n", HA), &b), 0); /* a prefix of a */
        CHECK_EQ(kvfs_recipe_common_prefix(&a, &b), 1);
        CHECK_EQ(kvfs_recipe_common_prefix(&b, &a), 1);
        kvfs_recipe_free(&b);
        CHECK_EQ(parse(fmt("%s\n%s\n%s\nsuffix=q\n", HB, HA, HC), &b), 0); /* same set, other order */
        CHECK_EQ(kvfs_recipe_common_prefix(&a, &b), 0);
        kvfs_recipe_free(&b);
        kvfs_recipe_free(&a);
    }
    CHECK_DONE();
}
