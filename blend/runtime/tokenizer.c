/* tokenizer.c - byte-level BPE from GGUF metadata, matching llama.cpp:
 * special-token partition, the pre-tokenizer regexes named by
 * tokenizer.ggml.pre (PCRE2, UTF + UCP), GPT-2 byte-to-unicode mapping, and
 * merges by rank (lowest first, leftmost on ties). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer.h"

#include <ctype.h>
#include <errno.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"

#define TOKEN_TYPE_NORMAL 1
#define TOKEN_TYPE_UNKNOWN 2
#define TOKEN_TYPE_CONTROL 3
#define TOKEN_TYPE_USER_DEFINED 4
#define TOKEN_TYPE_BYTE 6

/* ---- string -> int hash map (open addressing) ---- */

struct smap {
    const char **keys;
    uint32_t *lens;
    int32_t *vals;
    size_t cap;
};

static uint64_t fnv(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

static int smap_init(struct smap *m, size_t n)
{
    m->cap = 16;
    while (m->cap < n * 2)
        m->cap <<= 1;
    m->keys = calloc(m->cap, sizeof(*m->keys));
    m->lens = calloc(m->cap, sizeof(*m->lens));
    m->vals = calloc(m->cap, sizeof(*m->vals));
    return m->keys && m->lens && m->vals ? 0 : -ENOMEM;
}

static void smap_free(struct smap *m)
{
    free(m->keys);
    free(m->lens);
    free(m->vals);
}

/* keys are not copied: they live in the GGUF mapping or in the tokenizer */
static void smap_put(struct smap *m, const char *k, size_t n, int32_t v)
{
    size_t i = fnv(k, n) & (m->cap - 1);
    while (m->keys[i]) {
        if (m->lens[i] == n && !memcmp(m->keys[i], k, n))
            return; /* first wins, like llama.cpp's token_to_id */
        i = (i + 1) & (m->cap - 1);
    }
    m->keys[i] = k;
    m->lens[i] = (uint32_t)n;
    m->vals[i] = v;
}

static int32_t smap_get(const struct smap *m, const char *k, size_t n)
{
    size_t i = fnv(k, n) & (m->cap - 1);
    while (m->keys[i]) {
        if (m->lens[i] == n && !memcmp(m->keys[i], k, n))
            return m->vals[i];
        i = (i + 1) & (m->cap - 1);
    }
    return -1;
}

#define KVFS_MAX_PRE_REGEXES 6 /* deepseek-llm's list is the longest */

struct kvfs_tokenizer {
    uint32_t n_vocab;
    struct kvfs_gguf_str *tokens;
    int32_t *types;
    struct smap vocab;   /* token text -> id */
    struct smap merges;  /* "left right" -> rank */
    pcre2_code *re[KVFS_MAX_PRE_REGEXES];
    int n_re;
    int32_t bos, eos, eot;
    int add_bos;
    int spm;               /* SentencePiece-style ("llama") vocabulary */
    int ignore_merges;     /* a word that is a token is that token, merges or not (llama.cpp: llama3) */
    int add_space_prefix;  /* SPM: prepend U+2581 to the text */
    float *scores;         /* SPM merge priorities */
    int32_t byte_tok[256]; /* SPM: <0xXX> tokens, -1 if absent */
    int32_t *special;    /* ids matched in text: control, user-defined */
    int n_special;
    uint8_t *rstrip;       /* per id: whitespace after it in the text is dropped (NULL: none does) */
    /* the same, longest first, grouped by first byte: group b of variant v
     * (0: user-defined only, 1: control too) is by_byte[v][first[v][b] ..
     * first[v][b + 1]) -- a vocabulary can hold 100k+ control tokens */
    int32_t *by_byte[2];
    int first[2][257];
    char byte_enc[256][4]; /* GPT-2 byte -> UTF-8 of its code point */
    int byte_dec[0x200];   /* code point -> byte, -1 if none */
};

static void utf8_put(char *out, unsigned cp)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else if (cp < 0x800) {
        out[0] = (char)(0xc0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3f));
        out[2] = 0;
    } else {
        out[0] = (char)(0xe0 | cp >> 12);
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        out[3] = 0;
    }
}

static size_t utf8_len(unsigned char c)
{
    return c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
}

static void byte_tables(struct kvfs_tokenizer *t)
{
    int n = 0;
    for (int i = 0; i < 0x200; i++)
        t->byte_dec[i] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        unsigned cp = printable ? (unsigned)b : 256u + (unsigned)n++;
        utf8_put(t->byte_enc[b], cp);
        t->byte_dec[cp] = b;
    }
}

/* Pre-tokenizer regexes by tokenizer.ggml.pre, as llama.cpp applies them
 * (each regex splits the pieces the previous one produced). */
static const char *GPT2_RE =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char *LLAMA3_RE =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char *QWEN2_RE =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* GPT-4o's (o200k: gpt-oss), as llama.cpp writes it: its case classes as
 * "a letter but not a-z" and "a letter but not A-Z" */
static const char *GPT4O_RE =
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|"
    "'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|"
    "'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
/* GPT-2's word split without the final catch-all (llama.cpp's mpt, falcon) */
static const char *GPT2_WORDS_RE = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
static const char *QWEN35_RE =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| "
    "?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* DeepSeek's (llama.cpp's lists, letters and CJK given as code point ranges) */
static const char *DEEPSEEK_CJK_RE = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+";
static const char *DEEPSEEK_LLM_LETTERS_RE =
    "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af"
    "\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5"
    "\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba"
    "\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45"
    "\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe"
    "\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc"
    "\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139"
    "\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3"
    "\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06"
    "\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb"
    "\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943]+";
static const char *DEEPSEEK_LLM_PUNCT_RE = "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+";

static int pre_regexes(const char *pre, const char **out)
{
    if (!strcmp(pre, "mpt")) {
        out[0] = GPT2_WORDS_RE;
        return 1;
    }
    if (!strcmp(pre, "falcon")) {
        out[0] = "[\\p{P}\\$\\+<=>\\^~\\|`]+";
        out[1] = GPT2_WORDS_RE;
        out[2] = "[0-9][0-9][0-9]";
        return 3;
    }
    if (!strcmp(pre, "qwen35")) {
        out[0] = QWEN35_RE;
        return 1;
    }
    if (!strcmp(pre, "deepseek-coder")) {
        out[0] = "[\\r\\n]";
        out[1] = "\\s?\\p{L}+";
        out[2] = "\\s?\\p{P}+";
        out[3] = DEEPSEEK_CJK_RE;
        out[4] = "\\p{N}";
        return 5;
    }
    if (!strcmp(pre, "deepseek-llm")) {
        out[0] = "[\\r\\n]";
        out[1] = DEEPSEEK_LLM_LETTERS_RE;
        out[2] = DEEPSEEK_LLM_PUNCT_RE;
        out[3] = "\\s+$";
        out[4] = DEEPSEEK_CJK_RE;
        out[5] = "\\p{N}+";
        return 6;
    }
    if (!strcmp(pre, "smollm") || !strcmp(pre, "starcoder") || !strcmp(pre, "refact") ||
        !strcmp(pre, "command-r")) {
        out[0] = "\\p{N}";
        out[1] = GPT2_RE;
        return 2;
    }
    if (!strcmp(pre, "llama3") || !strcmp(pre, "llama-bpe") || !strcmp(pre, "smaug-bpe")) {
        out[0] = LLAMA3_RE;
        return 1;
    }
    if (!strcmp(pre, "gpt-4o")) {
        out[0] = GPT4O_RE;
        return 1;
    }
    if (!strcmp(pre, "qwen2") || !strcmp(pre, "deepseek-r1-qwen")) {
        out[0] = QWEN2_RE;
        return 1;
    }
    if (!strcmp(pre, "gpt-2") || !strcmp(pre, "default") || !*pre) {
        out[0] = GPT2_RE;
        return 1;
    }
    return -ENOTSUP;
}

void kvfs_tokenizer_free(struct kvfs_tokenizer *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->n_re; i++)
        pcre2_code_free(t->re[i]);
    smap_free(&t->vocab);
    smap_free(&t->merges);
    free(t->tokens);
    free(t->types);
    free(t->special);
    free(t->rstrip);
    free(t->by_byte[0]);
    free(t->by_byte[1]);
    free(t->scores);
    free(t);
}

/* longest special tokens first (ties in id order), so the partition
 * prefers them; then grouped by first byte for each variant */
static int by_len_desc(const void *a, const void *b, void *arg)
{
    const struct kvfs_tokenizer *t = arg;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint64_t lx = t->tokens[x].len, ly = t->tokens[y].len;
    return lx != ly ? (lx < ly ? 1 : -1) : (x > y) - (x < y);
}

static int index_special(struct kvfs_tokenizer *t)
{
    qsort_r(t->special, (size_t)t->n_special, sizeof(int32_t), by_len_desc, t);
    for (int v = 0; v < 2; v++) {
        int count[257] = {0};
        t->by_byte[v] = malloc(sizeof(int32_t) * (size_t)(t->n_special + 1));
        if (!t->by_byte[v])
            return -ENOMEM;
        for (int k = 0; k < t->n_special; k++) {
            int32_t id = t->special[k];
            if ((v == 0 && t->types[id] == TOKEN_TYPE_CONTROL) || !t->tokens[id].len)
                continue;
            count[(unsigned char)t->tokens[id].ptr[0] + 1]++;
        }
        for (int b = 0; b < 256; b++)
            count[b + 1] += count[b];
        memcpy(t->first[v], count, sizeof(count));
        for (int k = 0; k < t->n_special; k++) { /* stable: keeps the length order */
            int32_t id = t->special[k];
            if ((v == 0 && t->types[id] == TOKEN_TYPE_CONTROL) || !t->tokens[id].len)
                continue;
            t->by_byte[v][count[(unsigned char)t->tokens[id].ptr[0]]++] = id;
        }
    }
    return 0;
}

/* llama.cpp gives Phi-3's special tokens (by general.name) the rstrip
 * attribute, all but <unk>, <s> and <|endoftext|>: "<|user|>\nHi" is
 * <|user|> then "Hi" (llama-vocab.cpp, "set attributes by model name"). */
static int set_rstrip(const struct kvfs_gguf *g, struct kvfs_tokenizer *t)
{
    struct kvfs_gguf_str name;
    char low[256];
    if (kvfs_gguf_get_str(g, "general.name", &name))
        return 0;
    size_t n = name.len < sizeof(low) - 1 ? name.len : sizeof(low) - 1;
    for (size_t i = 0; i < n; i++)
        low[i] = (char)tolower((unsigned char)name.ptr[i]);
    low[n] = 0;
    if (!strstr(low, "phi-3") && !strstr(low, "phi3"))
        return 0;
    if (!(t->rstrip = calloc(t->n_vocab, 1)))
        return -ENOMEM;
    for (int k = 0; k < t->n_special; k++)
        t->rstrip[t->special[k]] = 1;
    static const char *const set[] = {"</s>"}, *const unset[] = {"<unk>", "<s>", "<|endoftext|>"};
    for (size_t i = 0; i < sizeof(set) / sizeof(set[0]); i++) {
        int32_t id = smap_get(&t->vocab, set[i], strlen(set[i]));
        if (id >= 0)
            t->rstrip[id] = 1;
    }
    for (size_t i = 0; i < sizeof(unset) / sizeof(unset[0]); i++) {
        int32_t id = smap_get(&t->vocab, unset[i], strlen(unset[i]));
        if (id >= 0)
            t->rstrip[id] = 0;
    }
    return 0;
}

int kvfs_tokenizer_load(const struct kvfs_gguf *g, struct kvfs_tokenizer **out, char *err, size_t errlen)
{
    struct kvfs_gguf_str model, pre = {0, ""};
    int rc;
    if ((rc = kvfs_gguf_get_str(g, "tokenizer.ggml.model", &model))) {
        snprintf(err, errlen, "no tokenizer in the model (tokenizer.ggml.model)");
        return rc;
    }
    int spm = model.len == 5 && !memcmp(model.ptr, "llama", 5);
    if (!spm && (model.len != 4 || memcmp(model.ptr, "gpt2", 4))) {
        snprintf(err, errlen, "tokenizer model '%.*s' is not supported ('gpt2' byte-level BPE and 'llama' "
                 "SentencePiece are)", (int)model.len, model.ptr);
        return -ENOTSUP;
    }
    kvfs_gguf_get_str(g, "tokenizer.ggml.pre", &pre);
    char pre_name[64];
    snprintf(pre_name, sizeof(pre_name), "%.*s", (int)(pre.len < 63 ? pre.len : 63), pre.ptr);
    const struct kvfs_gguf_kv *toks = kvfs_gguf_find(g, "tokenizer.ggml.tokens");
    const struct kvfs_gguf_kv *types = kvfs_gguf_find(g, "tokenizer.ggml.token_type");
    const struct kvfs_gguf_kv *merges = kvfs_gguf_find(g, "tokenizer.ggml.merges");
    const struct kvfs_gguf_kv *scores = kvfs_gguf_find(g, "tokenizer.ggml.scores");
    if (!toks || (!spm && !merges) || (spm && !scores) || toks->arr_len == 0 || toks->arr_len > (1u << 24)) {
        snprintf(err, errlen, "tokenizer tokens or merges missing");
        return -EINVAL;
    }
    struct kvfs_tokenizer *t = calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    t->n_vocab = (uint32_t)toks->arr_len;
    t->spm = spm;
    t->tokens = calloc(t->n_vocab, sizeof(*t->tokens));
    t->types = calloc(t->n_vocab, sizeof(*t->types));
    t->special = calloc(t->n_vocab, sizeof(*t->special));
    if (!t->tokens || !t->types || !t->special || smap_init(&t->vocab, t->n_vocab) ||
        smap_init(&t->merges, merges ? merges->arr_len : 0)) {
        rc = -ENOMEM;
        goto fail;
    }
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        if ((rc = kvfs_gguf_arr_str(toks, i, &t->tokens[i])))
            goto fail;
        int32_t ty = TOKEN_TYPE_NORMAL;
        if (types)
            kvfs_gguf_arr_i32(types, i, &ty);
        t->types[i] = ty;
        smap_put(&t->vocab, t->tokens[i].ptr, t->tokens[i].len, (int32_t)i);
        if (ty == TOKEN_TYPE_CONTROL || ty == TOKEN_TYPE_USER_DEFINED)
            t->special[t->n_special++] = (int32_t)i;
    }
    for (uint64_t i = 0; merges && i < merges->arr_len; i++) {
        struct kvfs_gguf_str ms;
        if ((rc = kvfs_gguf_arr_str(merges, i, &ms)))
            goto fail;
        smap_put(&t->merges, ms.ptr, ms.len, (int32_t)i);
    }
    if ((rc = index_special(t)) || (rc = set_rstrip(g, t)))
        goto fail;
    const char *res[KVFS_MAX_PRE_REGEXES];
    int n = spm ? 0 : pre_regexes(pre_name, res);
    t->ignore_merges = !spm && (!strcmp(pre_name, "llama3") || !strcmp(pre_name, "llama-bpe"));
    if (n < 0) {
        snprintf(err, errlen, "pre-tokenizer '%s' is not supported", pre_name);
        rc = -ENOTSUP;
        goto fail;
    }
    for (int i = 0; i < n; i++) {
        int ec;
        PCRE2_SIZE eo;
        t->re[i] = pcre2_compile((PCRE2_SPTR)res[i], PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
        if (!t->re[i]) {
            snprintf(err, errlen, "pre-tokenizer regex %d does not compile", i);
            rc = -EINVAL;
            goto fail;
        }
        pcre2_jit_compile(t->re[i], PCRE2_JIT_COMPLETE);
        t->n_re++;
    }
    uint32_t v;
    t->bos = kvfs_gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &v) == 0 ? (int32_t)v : -1;
    t->eos = kvfs_gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &v) == 0 ? (int32_t)v : -1;
    t->eot = kvfs_gguf_get_u32(g, "tokenizer.ggml.eot_token_id", &v) == 0 ? (int32_t)v : -1;
    /* SentencePiece models want BOS unless they say otherwise, and so do the
     * byte-level pre-tokenizers llama.cpp defaults to it (llama-vocab.cpp:
     * Llama 3's vocabulary without the key still starts with BOS) */
    static const char *const bos_pres[] = {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
                                           "midm-2.0", "lfm2", "jina-v5-nano", "tekken", "chameleon"};
    t->add_bos = spm;
    for (size_t i = 0; !spm && i < sizeof(bos_pres) / sizeof(bos_pres[0]); i++)
        t->add_bos |= !strcmp(pre_name, bos_pres[i]);
    kvfs_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos);
    t->add_space_prefix = spm;
    kvfs_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix);
    if (spm) {
        t->scores = calloc(t->n_vocab, sizeof(float));
        if (!t->scores) {
            rc = -ENOMEM;
            goto fail;
        }
        for (uint32_t i = 0; i < t->n_vocab; i++)
            kvfs_gguf_arr_f32(scores, i, &t->scores[i]);
        for (int b = 0; b < 256; b++) {
            char name[8];
            snprintf(name, sizeof(name), "<0x%02X>", b);
            t->byte_tok[b] = smap_get(&t->vocab, name, 6);
        }
    }
    byte_tables(t);
    *out = t;
    return 0;
fail:
    kvfs_tokenizer_free(t);
    return rc;
}

/* ---- output buffer ---- */

struct ids {
    int32_t *v;
    size_t n, cap;
    int err;
};

static void push(struct ids *o, int32_t id)
{
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 256;
        int32_t *nv = realloc(o->v, cap * sizeof(int32_t));
        if (!nv) {
            o->err = -ENOMEM;
            return;
        }
        o->v = nv;
        o->cap = cap;
    }
    o->v[o->n++] = id;
}

/* ---- BPE on one pre-tokenized word ---- */

struct sym {
    int start, len; /* in the byte-encoded word */
    int prev, next;
};

/* Join symbol `at` with its right neighbour (both BPE and SentencePiece);
 * the neighbour is gone (len 0). */
static void sym_merge(struct sym *s, int at)
{
    int j = s[at].next;
    s[at].len += s[j].len;
    s[at].next = s[j].next;
    if (s[j].next != -1)
        s[s[j].next].prev = at;
    s[j].len = 0;
}

/* The merge loop shared by BPE and SentencePiece: while some adjacent pair
 * may merge, merge the one of highest priority, the leftmost on ties.  A
 * heap of candidate pairs, stale entries skipped when popped (one of the
 * two has grown or gone), as llama.cpp does: O(n log n) where rescanning
 * every pair after each merge was O(n^2) (a 100 KB Gemma 3 prompt took 46 s
 * to tokenize, a 20 KB run of letters 3 s with SmolLM2's BPE). */
struct pair_cand {
    double prio;
    int left, right, len; /* len: the two symbols' lengths together when pushed */
};

/* whether pair (left, right) may merge, and its priority (higher first) */
typedef int (*pair_prio_fn)(const void *ctx, const struct sym *s, int left, int right, double *prio);

static int cand_before(const struct sym *s, const struct pair_cand *a, const struct pair_cand *b)
{
    return a->prio != b->prio ? a->prio > b->prio : s[a->left].start < s[b->left].start;
}

static void cand_push(struct pair_cand *h, int *n, const struct sym *s, const void *ctx, pair_prio_fn prio, int left)
{
    int right = s[left].next;
    double pr;
    if (right == -1 || !prio(ctx, s, left, right, &pr))
        return;
    int i = (*n)++;
    h[i] = (struct pair_cand){pr, left, right, s[left].len + s[right].len};
    for (; i > 0 && cand_before(s, &h[i], &h[(i - 1) / 2]); i = (i - 1) / 2) {
        struct pair_cand t = h[i];
        h[i] = h[(i - 1) / 2];
        h[(i - 1) / 2] = t;
    }
}

static struct pair_cand cand_pop(struct pair_cand *h, int *n, const struct sym *s)
{
    struct pair_cand top = h[0];
    h[0] = h[--(*n)];
    for (int i = 0;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < *n && cand_before(s, &h[l], &h[m]))
            m = l;
        if (r < *n && cand_before(s, &h[r], &h[m]))
            m = r;
        if (m == i)
            break;
        struct pair_cand t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
    return top;
}

/* ns symbols linked from s[0]; -ENOMEM or 0.  Each merge pushes at most two
 * pairs, so 2 * ns entries are enough. */
static int merge_pairs(struct sym *s, int ns, const void *ctx, pair_prio_fn prio)
{
    if (ns < 2)
        return 0;
    struct pair_cand *h = malloc(sizeof(*h) * (size_t)ns * 2);
    int n = 0;
    if (!h)
        return -ENOMEM;
    for (int i = 0; s[i].next != -1; i = s[i].next)
        cand_push(h, &n, s, ctx, prio, i);
    while (n > 0) {
        struct pair_cand c = cand_pop(h, &n, s);
        if (!s[c.left].len || !s[c.right].len || s[c.left].next != c.right || s[c.left].len + s[c.right].len != c.len)
            continue; /* stale */
        sym_merge(s, c.left);
        if (s[c.left].prev != -1)
            cand_push(h, &n, s, ctx, prio, s[c.left].prev);
        cand_push(h, &n, s, ctx, prio, c.left);
    }
    free(h);
    return 0;
}

struct bpe_ctx {
    const struct kvfs_tokenizer *t;
    const char *enc;
};

/* BPE: the pair "a b" in the merges list, lower rank first */
static int bpe_prio(const void *ctx, const struct sym *s, int i, int j, double *prio)
{
    const struct bpe_ctx *b = ctx;
    char key[1024];
    size_t kl = (size_t)s[i].len + 1 + (size_t)s[j].len;
    if (kl >= sizeof(key))
        return 0;
    memcpy(key, b->enc + s[i].start, (size_t)s[i].len);
    key[s[i].len] = ' ';
    memcpy(key + s[i].len + 1, b->enc + s[j].start, (size_t)s[j].len);
    int32_t r = smap_get(&b->t->merges, key, kl);
    if (r < 0)
        return 0;
    *prio = -(double)r;
    return 1;
}

/* SentencePiece: the concatenation is a token, higher score first */
static int spm_prio(const void *ctx, const struct sym *s, int i, int j, double *prio)
{
    const struct bpe_ctx *b = ctx;
    int32_t id = smap_get(&b->t->vocab, b->enc + s[i].start, (size_t)(s[i].len + s[j].len));
    if (id < 0)
        return 0;
    *prio = b->t->scores[id];
    return 1;
}

static void bpe_word(const struct kvfs_tokenizer *t, const char *w, size_t wl, struct ids *o)
{
    /* byte-encode */
    char *enc = malloc(wl * 2 + 1);
    struct sym *s = malloc(sizeof(*s) * (wl + 1));
    if (!enc || !s) {
        free(enc);
        free(s);
        o->err = -ENOMEM;
        return;
    }
    size_t el = 0;
    int ns = 0;
    for (size_t i = 0; i < wl; i++) {
        const char *e = t->byte_enc[(uint8_t)w[i]];
        size_t l = strlen(e);
        s[ns] = (struct sym){(int)el, (int)l, ns - 1, ns + 1};
        memcpy(enc + el, e, l);
        el += l;
        ns++;
    }
    s[ns - 1].next = -1;
    /* llama3's pre-tokenizer: a whole word in the vocabulary is taken as
     * it is, though the merges might not reach it (llama.cpp's ignore_merges) */
    int32_t whole = t->ignore_merges ? smap_get(&t->vocab, enc, el) : -1;
    if (whole >= 0) {
        push(o, whole);
        free(enc);
        free(s);
        return;
    }
    struct bpe_ctx bc = {t, enc};
    if ((o->err = merge_pairs(s, ns, &bc, bpe_prio))) {
        free(enc);
        free(s);
        return;
    }
    for (int i = 0; i != -1; i = s[i].next) {
        int32_t id = smap_get(&t->vocab, enc + s[i].start, (size_t)s[i].len);
        if (id >= 0) {
            push(o, id);
            continue;
        }
        /* unknown symbol: fall back to its characters (byte tokens) */
        for (int k = 0; k < s[i].len;) {
            size_t cl = utf8_len((unsigned char)enc[s[i].start + k]);
            int32_t cid = smap_get(&t->vocab, enc + s[i].start + k, cl);
            if (cid >= 0)
                push(o, cid);
            k += (int)cl;
        }
    }
    free(enc);
    free(s);
}

/* SentencePiece: spaces become U+2581, then adjacent symbols merge while
 * their concatenation is a token, highest score first (leftmost on ties);
 * what is not a token falls back to <0xXX> byte tokens. */
static void spm_fragment(const struct kvfs_tokenizer *t, const char *p, size_t len, int first, struct ids *o)
{
    if (len == 0)
        return;
    size_t cap = len * 3 + 4, el = 0;
    char *enc = malloc(cap);
    struct sym *s = malloc(sizeof(*s) * (len + 2));
    if (!enc || !s) {
        free(enc);
        free(s);
        o->err = -ENOMEM;
        return;
    }
    if (first && t->add_space_prefix) {
        memcpy(enc, "\xe2\x96\x81", 3);
        el = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (p[i] == ' ') {
            memcpy(enc + el, "\xe2\x96\x81", 3);
            el += 3;
        } else {
            enc[el++] = p[i];
        }
    }
    int ns = 0;
    for (size_t i = 0; i < el;) {
        size_t cl = utf8_len((unsigned char)enc[i]);
        if (i + cl > el)
            cl = el - i;
        s[ns] = (struct sym){(int)i, (int)cl, ns - 1, ns + 1};
        ns++;
        i += cl;
    }
    if (ns)
        s[ns - 1].next = -1;
    struct bpe_ctx bc = {t, enc};
    if ((o->err = merge_pairs(s, ns, &bc, spm_prio))) {
        free(enc);
        free(s);
        return;
    }
    for (int i = 0; ns && i != -1; i = s[i].next) {
        int32_t id = smap_get(&t->vocab, enc + s[i].start, (size_t)s[i].len);
        if (id >= 0) {
            push(o, id);
            continue;
        }
        for (int k = 0; k < s[i].len; k++) {
            int32_t b = t->byte_tok[(uint8_t)enc[s[i].start + k]];
            if (b >= 0)
                push(o, b);
        }
    }
    free(enc);
    free(s);
}

/* Split [p, p+len) with regex r (index ri) and recurse into the next regex;
 * the gaps between matches are pieces too, as in llama.cpp. */
static void split(const struct kvfs_tokenizer *t, int ri, const char *p, size_t len, struct ids *o)
{
    if (len == 0)
        return;
    if (ri == t->n_re) {
        bpe_word(t, p, len, o);
        return;
    }
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(t->re[ri], NULL);
    if (!md) {
        o->err = -ENOMEM;
        return;
    }
    size_t at = 0, last = 0;
    while (at < len && !o->err) {
        int rc = pcre2_match(t->re[ri], (PCRE2_SPTR)p, len, at, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc < 0)
            break;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) { /* empty match: step one character */
            at = ms + utf8_len((unsigned char)p[ms]);
            continue;
        }
        if (ms > last)
            split(t, ri + 1, p + last, ms - last, o);
        split(t, ri + 1, p + ms, me - ms, o);
        last = at = me;
    }
    if (last < len && !o->err)
        split(t, ri + 1, p + last, len - last, o);
    pcre2_match_data_free(md);
}

/* Strict UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing above
 * U+10FFFF).  The regexes are matched with PCRE2_NO_UTF_CHECK, and PCRE2's
 * JIT code may crash on what it was promised is valid (fuzz_tokenizer found
 * F6 A0 90 A4, a code point above U+10FFFF, taking the daemon down). */
static int utf8_valid(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t l = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!l || i + l > n)
            return 0;
        unsigned cp = l == 1 ? c : c & (0x7fu >> l);
        for (size_t k = 1; k < l; k++) {
            if (((unsigned char)s[i + k] >> 6) != 2)
                return 0;
            cp = cp << 6 | ((unsigned char)s[i + k] & 0x3f);
        }
        if ((l == 2 && cp < 0x80) || (l == 3 && cp < 0x800) || (l == 4 && cp < 0x10000) || cp > 0x10ffff ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += l;
    }
    return 1;
}

int kvfs_tokenize(const struct kvfs_tokenizer *t, const char *text, size_t len, int add_bos, int parse_special,
                  int32_t **ids, size_t *n_ids)
{
    struct ids o = {0};
    if (add_bos && t->add_bos && t->bos >= 0)
        push(&o, t->bos);
    if (!utf8_valid(text, len)) {
        free(o.v);
        return -EILSEQ; /* the regexes run in UTF mode */
    }
    size_t start = 0, i = 0;
    while (i < len && !o.err) {
        int matched = -1, v = parse_special ? 1 : 0, b = (unsigned char)text[i];
        for (int k = t->first[v][b]; k < t->first[v][b + 1]; k++) {
            int32_t id = t->by_byte[v][k];
            const struct kvfs_gguf_str *s = &t->tokens[id];
            if (s->len && s->len <= len - i && !memcmp(text + i, s->ptr, s->len)) {
                matched = id;
                break;
            }
        }
        if (matched < 0) {
            i++;
            continue;
        }
        if (t->spm)
            spm_fragment(t, text + start, i - start, 1, &o);
        else
            split(t, 0, text + start, i - start, &o);
        push(&o, matched);
        i += t->tokens[matched].len;
        while (t->rstrip && t->rstrip[matched] && i < len && isspace((unsigned char)text[i]))
            i++;
        start = i;
    }
    if (!o.err && t->spm)
        spm_fragment(t, text + start, len - start, 1, &o);
    else if (!o.err)
        split(t, 0, text + start, len - start, &o);
    if (o.err) {
        free(o.v);
        return o.err;
    }
    *ids = o.v ? o.v : malloc(sizeof(int32_t));
    *n_ids = o.n;
    return *ids ? 0 : -ENOMEM;
}

int kvfs_token_piece(const struct kvfs_tokenizer *t, int32_t id, char *buf, size_t cap)
{
    if (id < 0 || (uint32_t)id >= t->n_vocab)
        return -EINVAL;
    const struct kvfs_gguf_str *s = &t->tokens[id];
    size_t n = 0;
    if (t->spm && (t->types[id] == TOKEN_TYPE_NORMAL || t->types[id] == TOKEN_TYPE_BYTE)) {
        if (t->types[id] == TOKEN_TYPE_BYTE || (s->len == 6 && !memcmp(s->ptr, "<0x", 3))) {
            unsigned v = 0;
            if (sscanf(s->ptr + 3, "%2X", &v) == 1 && n < cap)
                buf[n] = (char)v;
            return 1;
        }
        for (size_t i = 0; i < s->len;) {
            if (i + 3 <= s->len && !memcmp(s->ptr + i, "\xe2\x96\x81", 3)) {
                if (n < cap)
                    buf[n] = ' ';
                n++;
                i += 3;
            } else {
                if (n < cap)
                    buf[n] = s->ptr[i];
                n++;
                i++;
            }
        }
        return (int)n;
    }
    if (t->types[id] != TOKEN_TYPE_NORMAL) { /* special tokens render as written */
        for (size_t i = 0; i < s->len && n < cap; i++)
            buf[n++] = s->ptr[i];
        return (int)n;
    }
    for (size_t i = 0; i < s->len;) {
        size_t cl = utf8_len((unsigned char)s->ptr[i]);
        unsigned cp = (unsigned char)s->ptr[i];
        if (cl == 2 && i + 1 < s->len)
            cp = ((cp & 0x1f) << 6) | ((unsigned char)s->ptr[i + 1] & 0x3f);
        else if (cl > 2)
            cp = 0x10000; /* not a byte-level character */
        int b = cp < 0x200 ? t->byte_dec[cp] : -1;
        if (b >= 0) {
            if (n < cap)
                buf[n] = (char)b;
            n++;
        } else {
            for (size_t k = 0; k < cl && i + k < s->len; k++, n++)
                if (n < cap)
                    buf[n] = s->ptr[i + k];
        }
        i += cl;
    }
    return (int)n;
}

int kvfs_detokenize(const struct kvfs_tokenizer *t, const int32_t *ids, size_t n, char **text)
{
    size_t cap = 64, len = 0;
    char *out = malloc(cap);
    for (size_t i = 0; i < n && out; i++) {
        char piece[512];
        int l = kvfs_token_piece(t, ids[i], piece, sizeof(piece));
        if (l < 0) {
            free(out);
            return l;
        }
        if (len + (size_t)l + 1 > cap) {
            while (len + (size_t)l + 1 > cap)
                cap *= 2;
            char *no = realloc(out, cap);
            if (!no) {
                free(out);
                return -ENOMEM;
            }
            out = no;
        }
        memcpy(out + len, piece, (size_t)l);
        len += (size_t)l;
    }
    if (!out)
        return -ENOMEM;
    out[len] = '\0';
    *text = out;
    return 0;
}

int32_t kvfs_token_bos(const struct kvfs_tokenizer *t) { return t->bos; }
int32_t kvfs_token_eos(const struct kvfs_tokenizer *t) { return t->eos; }
int kvfs_token_is_eog(const struct kvfs_tokenizer *t, int32_t id)
{
    return id == t->eos || (t->eot >= 0 && id == t->eot) ||
           (id >= 0 && (uint32_t)id < t->n_vocab && t->tokens[id].len == 10 &&
            !memcmp(t->tokens[id].ptr, "<|im_end|>", 10));
}
int kvfs_token_is_control(const struct kvfs_tokenizer *t, int32_t id)
{
    return id >= 0 && (uint32_t)id < t->n_vocab && t->types[id] == TOKEN_TYPE_CONTROL;
}
uint32_t kvfs_vocab_size(const struct kvfs_tokenizer *t) { return t->n_vocab; }
