/* recipe.c - parse and key blend recipes (recipe.h). */
#include "recipe.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "store.h" /* kvfs_errf */

void kvfs_recipe_free(struct kvfs_recipe *r)
{
    free(r->suffix);
    free(r->suffix_ids);
    r->suffix = NULL;
    r->suffix_ids = NULL;
}

/* suffix=TEXT with C escapes \n \t \\ (any other \x is x) */
static char *unescape(const char *s)
{
    char *o = malloc(strlen(s) + 1), *q = o;
    if (!o)
        return NULL;
    for (; *s; s++) {
        if (*s == '\\' && s[1]) {
            s++;
            *q++ = *s == 'n' ? '\n' : *s == 't' ? '\t' : *s;
        } else {
            *q++ = *s;
        }
    }
    *q = '\0';
    return o;
}

static int parse_token_ids(char *list, struct kvfs_recipe *r, int lineno, char *err, size_t errlen)
{
    char *sv = NULL;
    for (char *t = strtok_r(list, ", ", &sv); t; t = strtok_r(NULL, ", ", &sv)) {
        char *end;
        errno = 0;
        long v = strtol(t, &end, 10);
        if (end == t || *end || errno || v < 0 || v > INT32_MAX)
            return kvfs_errf(err, errlen, -EINVAL, "line %d: suffix_tokens takes token ids (0..2^31-1), not '%.40s'",
                             lineno, t);
        int32_t *ni = realloc(r->suffix_ids, sizeof(int32_t) * (size_t)(r->n_suffix_ids + 1));
        if (!ni)
            return -ENOMEM;
        r->suffix_ids = ni;
        r->suffix_ids[r->n_suffix_ids++] = (int32_t)v;
    }
    return 0;
}

static int parse_chunk(const char *line, struct kvfs_recipe *r, int lineno, char *err, size_t errlen)
{
    const char *h = !strncmp(line, "chunk ", 6) ? line + 6 : line;
    uint8_t d[32];
    size_t hl = strlen(h);
    if (hl == KVFS_HASH_HEX_LEN + 3 && !strcmp(h + KVFS_HASH_HEX_LEN, ".kv"))
        hl = KVFS_HASH_HEX_LEN;
    if (hl != KVFS_HASH_HEX_LEN)
        return kvfs_errf(err, errlen, -EINVAL,
                         "line %d: expected a chunk hash, ratio=, select=, dtype=, suffix= or suffix_tokens=", lineno);
    char hex[KVFS_HASH_HEX_LEN + 1];
    memcpy(hex, h, KVFS_HASH_HEX_LEN);
    hex[KVFS_HASH_HEX_LEN] = '\0';
    if (kvfs_hex_to_hash(hex, d) != 0)
        return kvfs_errf(err, errlen, -EINVAL, "line %d: '%s' is not a lowercase hex chunk hash", lineno, hex);
    if (r->n == KVFS_BLEND_MAX_CHUNKS)
        return kvfs_errf(err, errlen, -E2BIG, "line %d: too many chunks (%d at most)", lineno, KVFS_BLEND_MAX_CHUNKS);
    memcpy(r->hashes[r->n++], hex, sizeof(hex));
    return 0;
}

static int parse_line(char *line, struct kvfs_recipe *r, int lineno, char *err, size_t errlen)
{
    if (!strncmp(line, "select=", 7)) {
        if ((r->select = kvfs_blend_select_parse(line + 7)) < 0)
            return kvfs_errf(err, errlen, -EINVAL, "line %d: select must be query, fixed or gradual", lineno);
        return 0;
    }
    if (!strncmp(line, "dtype=", 6)) {
        if (!(r->dtype = kvfs_dtype_parse(line + 6)))
            return kvfs_errf(err, errlen, -EINVAL, "line %d: dtype must be f16, f32, bf16, q8, q4 or q4s", lineno);
        return 0;
    }
    if (!strcmp(line, "ratio=auto")) {
        r->auto_ratio = 1;
        return 0;
    }
    if (!strncmp(line, "ratio=", 6)) {
        char *end;
        r->auto_ratio = 0;
        r->ratio = strtof(line + 6, &end);
        if (end == line + 6 || *end || !kvfs_blend_ratio_ok(r->ratio))
            return kvfs_errf(err, errlen, -EINVAL, "line %d: ratio must be a number in [0, 1] or auto", lineno);
        return 0;
    }
    if (!strncmp(line, "suffix=", 7)) {
        char *o = unescape(line + 7);
        if (!o)
            return -ENOMEM;
        free(r->suffix);
        r->suffix = o;
        return 0;
    }
    if (!strncmp(line, "suffix_tokens=", 14))
        return parse_token_ids(line + 14, r, lineno, err, errlen);
    return parse_chunk(line, r, lineno, err, errlen);
}

int kvfs_recipe_parse(const char *text, size_t len, struct kvfs_recipe *r, char *err, size_t errlen)
{
    memset(r, 0, sizeof(*r));
    r->ratio = KVFS_BLEND_DEFAULT_RATIO;
    r->select = KVFS_BLEND_SELECT_DEFAULT;
    if (memchr(text, '\0', len))
        return kvfs_errf(err, errlen, -EINVAL, "recipe contains NUL bytes");
    char *copy = malloc(len + 1), *rest;
    int rc = 0, lineno = 0;
    if (!copy)
        return -ENOMEM;
    memcpy(copy, text, len);
    copy[len] = '\0';
    rest = copy;
    /* lines are counted as the user sees them, blank ones included */
    for (char *line; !rc && (line = strsep(&rest, "\n"));) {
        lineno++;
        while (isspace((unsigned char)*line))
            line++;
        size_t l = strlen(line);
        /* trailing spaces are noise, except inside the query text */
        while (l && isspace((unsigned char)line[l - 1]) && strncmp(line, "suffix=", 7))
            line[--l] = '\0';
        if (*line && *line != '#')
            rc = parse_line(line, r, lineno, err, errlen);
    }
    free(copy);
    if (!rc && r->n == 0)
        rc = kvfs_errf(err, errlen, -EINVAL, "a recipe names at least one chunk hash");
    if (!rc && !r->suffix && !r->n_suffix_ids)
        rc = kvfs_errf(err, errlen, -EINVAL, "a recipe needs the query: suffix=TEXT or suffix_tokens=ID,...");
    r->incomplete = rc == -EINVAL && (r->n == 0 || (!r->suffix && !r->n_suffix_ids));
    if (!rc && r->suffix && !*r->suffix && !r->n_suffix_ids)
        rc = kvfs_errf(err, errlen, -EINVAL, "the query (suffix=) is empty");
    if (rc)
        kvfs_recipe_free(r);
    return rc;
}

void kvfs_recipe_key(const struct kvfs_recipe *r, float min_ratio, uint32_t dtype_default,
                     char hex[KVFS_HASH_HEX_LEN + 1])
{
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    uint8_t d[32];
    unsigned dl = 0;
    char head[96];
    /* the controller's floor is part of an auto blend's meaning */
    int hl = snprintf(head, sizeof(head), "kvfs-blend-v1\n%d\n%s\n", r->n, kvfs_blend_select_name(r->select));
    if (r->auto_ratio)
        hl += snprintf(head + hl, sizeof(head) - (size_t)hl, "auto %.6f\n", (double)min_ratio);
    else
        hl += snprintf(head + hl, sizeof(head) - (size_t)hl, "%.6f\n", (double)r->ratio);
    uint32_t dtype = r->dtype ? r->dtype : dtype_default;
    if (dtype && dtype != KVFS_DTYPE_F16)
        hl += snprintf(head + hl, sizeof(head) - (size_t)hl, "dtype %s\n", kvfs_dtype_name(dtype));
    if (!md) { /* out of memory: a key no recipe shares, so nothing is served wrongly */
        snprintf(hex, KVFS_HASH_HEX_LEN + 1, "%064x", 0);
        return;
    }
    EVP_DigestInit_ex(md, EVP_sha256(), NULL);
    EVP_DigestUpdate(md, head, (size_t)hl);
    for (int i = 0; i < r->n; i++)
        EVP_DigestUpdate(md, r->hashes[i], KVFS_HASH_HEX_LEN);
    if (r->n_suffix_ids) {
        EVP_DigestUpdate(md, "\nids\n", 5);
        EVP_DigestUpdate(md, r->suffix_ids, sizeof(int32_t) * (size_t)r->n_suffix_ids);
    } else {
        EVP_DigestUpdate(md, "\ntext\n", 6);
        EVP_DigestUpdate(md, r->suffix, strlen(r->suffix));
    }
    EVP_DigestFinal_ex(md, d, &dl);
    EVP_MD_CTX_free(md);
    kvfs_hash_to_hex(d, hex);
}

int kvfs_recipe_common_prefix(const struct kvfs_recipe *a, const struct kvfs_recipe *b)
{
    int n = 0;
    while (n < a->n && n < b->n && !strcmp(a->hashes[n], b->hashes[n]))
        n++;
    return n;
}
