/* plan.c - an OpenAI request as chunks and a suffix.
 *
 * Chat: the messages are rendered by the engine's own chat template
 * (llama-server's /apply-template) with a marker in place of the last user
 * message's text.  What comes before the marker (system prompt, earlier
 * turns, the user turn's header) is the first chunk; the documents follow,
 * one chunk each (split every --chunk-tokens tokens); the question and what
 * the template puts after it (end of turn, the assistant's header) are the
 * suffix, which the engine computes.  Completions: the documents are the
 * chunks and the prompt the suffix.  In both, a prompt or last user message
 * holding the separator (LMCache's " # # ") is cut there: every segment but
 * the last is a chunk, the separator itself is not part of the prompt. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "serve.h"
#include "tokenizer.h"

#define MARK "\x1fKVFS-SERVE-QUESTION\x1f"

int plan_chunk_hash(const struct serve *sv, const int32_t *ids, size_t n, char hex[KVFS_HASH_HEX_LEN + 1])
{
    uint8_t *tb = malloc(4 * n + 1), d[32];
    if (!tb)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)ids[i];
        tb[4 * i] = (uint8_t)v, tb[4 * i + 1] = (uint8_t)(v >> 8), tb[4 * i + 2] = (uint8_t)(v >> 16),
        tb[4 * i + 3] = (uint8_t)(v >> 24);
    }
    struct kvfs_header h = {.dtype = sv->chunk_dtype, .flags = sv->chunk_flags, .n_tokens = (uint32_t)n,
                            .pos0 = 0, .fp = sv->fp, .token_bytes = tb};
    int rc = kvfs_content_hash(&h, d);
    free(tb);
    if (rc)
        return rc;
    kvfs_hash_to_hex(d, hex);
    return 0;
}

int plan_chunk_tokens(const struct serve *sv, const char *hash, int32_t **ids, size_t *n, char *err, size_t errlen)
{
    char path[1200];
    uint8_t fixed[KVFS_FIXED_HEADER_SIZE], *buf = NULL;
    struct kvfs_header h;
    int rc = 0;
    snprintf(path, sizeof(path), "%s/chunks/%s.kv", sv->mount, hash);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return kvfs_errf(err, errlen, -errno, "chunk %s: %s", hash, errno == ENOENT ? "not in the mount" : strerror(errno));
    if (pread(fd, fixed, sizeof(fixed), 0) != (ssize_t)sizeof(fixed)) {
        rc = kvfs_errf(err, errlen, -EIO, "chunk %s: cannot read its header", hash);
        goto out;
    }
    uint32_t hs = (uint32_t)fixed[12] | (uint32_t)fixed[13] << 8 | (uint32_t)fixed[14] << 16 |
                  (uint32_t)fixed[15] << 24;
    if (hs < KVFS_FIXED_HEADER_SIZE || hs > (80u << 20)) {
        rc = kvfs_errf(err, errlen, -EINVAL, "chunk %s: bad header size %u", hash, hs);
        goto out;
    }
    if (!(buf = malloc(hs))) {
        rc = -ENOMEM;
        goto out;
    }
    if (pread(fd, buf, hs, 0) != (ssize_t)hs) {
        rc = kvfs_errf(err, errlen, -EIO, "chunk %s: short header", hash);
        goto out;
    }
    char why[256];
    if ((rc = kvfs_header_parse(buf, hs, &h, why, sizeof(why)))) {
        kvfs_errf(err, errlen, rc, "chunk %s: %s", hash, why);
        goto out;
    }
    if (!(*ids = malloc(sizeof(int32_t) * h.n_tokens))) {
        rc = -ENOMEM;
        goto out;
    }
    for (uint32_t i = 0; i < h.n_tokens; i++)
        (*ids)[i] = (int32_t)kvfs_header_token(&h, i);
    *n = h.n_tokens;
out:
    free(buf);
    close(fd);
    return rc;
}

static int tokenize(const struct serve *sv, const char *text, size_t len, int bos, int special, int32_t **ids,
                    size_t *n, char *err, size_t errlen, const char *what)
{
    *ids = NULL;
    *n = 0;
    if (len == 0 && !bos)
        return 0;
    int rc = kvfs_tokenize(sv->tok, text, len, bos, special, ids, n);
    if (rc == -EILSEQ)
        return kvfs_errf(err, errlen, -EINVAL, "%s is not valid UTF-8", what);
    if (rc)
        return kvfs_errf(err, errlen, rc, "%s: cannot tokenize: %s", what, strerror(-rc));
    return 0;
}

static int add_chunk(struct plan *p, int32_t *ids, size_t n, const char *hash)
{
    struct chunk_plan *c = realloc(p->chunks, sizeof(*c) * (size_t)(p->n_chunks + 1));
    if (!c)
        return -ENOMEM;
    p->chunks = c;
    c = &p->chunks[p->n_chunks++];
    memset(c, 0, sizeof(*c));
    c->ids = ids;
    c->n = n;
    if (hash) {
        snprintf(c->hash, sizeof(c->hash), "%s", hash);
        c->given_hash = 1;
    }
    return 0;
}

/* a text as one or several chunks of at most chunk_tokens */
static int add_text_chunks(struct serve *sv, struct plan *p, const char *text, size_t len, int bos, int special,
                           const char *what, char *err, size_t errlen)
{
    int32_t *ids;
    size_t n;
    int rc = tokenize(sv, text, len, bos, special, &ids, &n, err, errlen, what);
    if (rc || n == 0) {
        free(ids);
        return rc;
    }
    size_t step = sv->chunk_tokens > 0 ? (size_t)sv->chunk_tokens : n;
    for (size_t off = 0; off < n; off += step) {
        size_t k = n - off < step ? n - off : step;
        int32_t *part = malloc(sizeof(int32_t) * k);
        if (!part) {
            free(ids);
            return -ENOMEM;
        }
        memcpy(part, ids + off, sizeof(int32_t) * k);
        if ((rc = add_chunk(p, part, k, NULL))) {
            free(part);
            free(ids);
            return rc;
        }
    }
    free(ids);
    return 0;
}

static int is_hash(const char *s)
{
    if (strlen(s) != KVFS_HASH_HEX_LEN)
        return 0;
    for (const char *c = s; *c; c++)
        if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f')))
            return 0;
    return 1;
}

static int add_documents(struct serve *sv, struct plan *p, json_t *docs, char *err, size_t errlen)
{
    if (!docs || json_is_null(docs))
        return 0;
    if (!json_is_array(docs))
        return kvfs_errf(err, errlen, -EINVAL, "'documents' must be an array of texts or chunk hashes");
    size_t i;
    json_t *d;
    json_array_foreach(docs, i, d) {
        char what[64];
        snprintf(what, sizeof(what), "documents[%zu]", i);
        const char *text = NULL, *hash = NULL;
        size_t len = 0;
        if (json_is_string(d)) {
            text = json_string_value(d);
            len = json_string_length(d);
            if (is_hash(text))
                hash = text, text = NULL;
        } else if (json_is_object(d)) {
            json_t *t = json_object_get(d, "text"), *h = json_object_get(d, "hash");
            if (json_is_string(t))
                text = json_string_value(t), len = json_string_length(t);
            else if (json_is_string(h))
                hash = json_string_value(h);
        }
        if (!text && !hash)
            return kvfs_errf(err, errlen, -EINVAL, "%s: a text, a 64-hex chunk hash, {\"text\": ...} or {\"hash\": ...}",
                             what);
        if (hash && !is_hash(hash))
            return kvfs_errf(err, errlen, -EINVAL, "%s: '%s' is not a chunk hash (64 lowercase hex digits)", what, hash);
        int rc;
        if (hash) {
            int32_t *ids;
            size_t n;
            char why[300];
            if ((rc = plan_chunk_tokens(sv, hash, &ids, &n, why, sizeof(why))))
                return kvfs_errf(err, errlen, rc == -ENOENT ? -EINVAL : rc, "%s: %s", what, why);
            if ((rc = add_chunk(p, ids, n, hash))) {
                free(ids);
                return rc;
            }
        } else if ((rc = add_text_chunks(sv, p, text, len, 0, 0, what, err, errlen)))
            return rc;
    }
    return 0;
}

/* Cut text at the separator: every segment but the last becomes chunks;
 * *last and *last_len the last segment */
static int split_separator(struct serve *sv, struct plan *p, const char *text, size_t len, const char **last,
                           size_t *last_len, const char *what, char *err, size_t errlen)
{
    size_t sl = strlen(sv->separator);
    const char *s = text, *end = text + len;
    int seg = 0;
    for (;;) {
        const char *hit = sl ? memmem(s, (size_t)(end - s), sv->separator, sl) : NULL;
        if (!hit)
            break;
        char w[96];
        snprintf(w, sizeof(w), "%s (segment %d)", what, seg++);
        int rc = add_text_chunks(sv, p, s, (size_t)(hit - s), 0, 1, w, err, errlen);
        if (rc)
            return rc;
        s = hit + sl;
    }
    *last = s;
    *last_len = (size_t)(end - s);
    return 0;
}

static int append_ids(int32_t **dst, size_t *n, const int32_t *src, size_t k)
{
    if (!k)
        return 0;
    int32_t *q = realloc(*dst, sizeof(int32_t) * (*n + k));
    if (!q)
        return -ENOMEM;
    memcpy(q + *n, src, sizeof(int32_t) * k);
    *dst = q;
    *n += k;
    return 0;
}

/* text of a message's content: a string, or an array of {"type": "text", "text": ...} */
static int content_text(json_t *c, char **out, size_t *len)
{
    if (json_is_string(c)) {
        *out = strndup(json_string_value(c), json_string_length(c));
        *len = json_string_length(c);
        return *out ? 0 : -ENOMEM;
    }
    if (!json_is_array(c))
        return -EINVAL;
    size_t i, n = 0;
    json_t *part;
    char *s = calloc(1, 1);
    if (!s)
        return -ENOMEM;
    json_array_foreach(c, i, part) {
        json_t *t = json_object_get(part, "text");
        if (!json_is_string(t)) {
            free(s);
            return -EINVAL;
        }
        size_t k = json_string_length(t);
        char *q = realloc(s, n + k + 1);
        if (!q) {
            free(s);
            return -ENOMEM;
        }
        s = q;
        memcpy(s + n, json_string_value(t), k);
        n += k;
        s[n] = '\0';
    }
    *out = s;
    *len = n;
    return 0;
}

static int plan_chat(struct serve *sv, const struct engine *e, json_t *req, struct plan *p, char *err, size_t errlen)
{
    json_t *msgs = json_object_get(req, "messages"), *copy = NULL, *tr = NULL, *body = NULL;
    char *question = NULL, *head = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    int rc = 0;
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return kvfs_errf(err, errlen, -EINVAL, "'messages' must be a non-empty array");
    size_t i, last_user = (size_t)-1;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        json_t *role = json_object_get(m, "role");
        if (!json_is_object(m) || !json_is_string(role))
            return kvfs_errf(err, errlen, -EINVAL, "messages[%zu]: an object with a 'role' and a 'content'", i);
        json_t *c = json_object_get(m, "content");
        if (c && !json_is_null(c) && !json_is_string(c) && !json_is_array(c))
            return kvfs_errf(err, errlen, -EINVAL, "messages[%zu].content: a string or an array of text parts", i);
        if (!strcmp(json_string_value(role), "user"))
            last_user = i;
    }
    if (last_user == (size_t)-1)
        return kvfs_errf(err, errlen, -EINVAL, "'messages' has no user message");
    size_t qlen;
    if ((rc = content_text(json_object_get(json_array_get(msgs, last_user), "content"), &question, &qlen))) {
        if (rc == -EINVAL)
            kvfs_errf(err, errlen, rc, "messages[%zu].content: a string or an array of text parts", last_user);
        goto out;
    }
    /* the template, as the engine applies it, around a marker */
    if (!(copy = json_deep_copy(msgs))) {
        rc = -ENOMEM;
        goto out;
    }
    json_object_set_new(json_array_get(copy, last_user), "content", json_string(MARK));
    body = json_pack("{s:O}", "messages", copy);
    long st;
    if ((rc = engine_call_json(e, "POST", "/apply-template", body, 30, NULL, NULL, &tr, &st, err, errlen)))
        goto out;
    json_t *pr = json_object_get(tr, "prompt");
    if (st != 200 || !json_is_string(pr)) {
        rc = kvfs_errf(err, errlen, st >= 400 && st < 500 ? -EINVAL : -EIO, "the engine's chat template: %s",
                       st == 200 ? "no prompt in its answer" : err);
        goto out;
    }
    const char *rendered = json_string_value(pr), *mk = strstr(rendered, MARK);
    if (!mk || strstr(mk + 1, MARK)) {
        rc = kvfs_errf(err, errlen, -EINVAL, "the engine's chat template does not show the last user message once");
        goto out;
    }
    size_t head_len = (size_t)(mk - rendered);
    const char *tail = mk + strlen(MARK);
    const char *q = question;
    size_t ql = qlen;
    /* documents: the array, then the separator's segments */
    struct plan docs = {0};
    if ((rc = add_documents(sv, &docs, json_object_get(req, "documents"), err, errlen)) ||
        (rc = split_separator(sv, &docs, question, qlen, &q, &ql, "the last user message", err, errlen))) {
        *p = docs;
        goto out;
    }
    if (docs.n_chunks == 0) { /* no documents: the whole prompt, as the engine would tokenize it */
        size_t tl = strlen(tail);
        if (!(head = malloc(head_len + qlen + tl + 1))) {
            rc = -ENOMEM;
            goto out;
        }
        memcpy(head, rendered, head_len);
        memcpy(head + head_len, question, qlen);
        memcpy(head + head_len + qlen, tail, tl + 1);
        rc = tokenize(sv, head, head_len + qlen + tl, 1, 1, &p->suffix, &p->n_suffix, err, errlen, "the prompt");
        goto out;
    }
    /* the template's head first, then the documents */
    struct plan hp = {0};
    if ((rc = add_text_chunks(sv, &hp, rendered, head_len, 1, 1, "the chat template's head", err, errlen))) {
        plan_free(&hp);
        plan_free(&docs);
        goto out;
    }
    /* then the documents' chunks, moved over */
    for (int k = 0; k < docs.n_chunks; k++)
        if ((rc = add_chunk(&hp, docs.chunks[k].ids, docs.chunks[k].n, docs.chunks[k].given_hash ? docs.chunks[k].hash : NULL))) {
            plan_free(&hp);
            plan_free(&docs);
            goto out;
        } else
            docs.chunks[k].ids = NULL;
    plan_free(&docs);
    *p = hp;
    /* the suffix: the question, then the template's tail */
    int32_t *t2 = NULL;
    size_t n2 = 0;
    if ((rc = tokenize(sv, q, ql, 0, 1, &ids, &n_ids, err, errlen, "the question")) ||
        (rc = tokenize(sv, tail, strlen(tail), 0, 1, &t2, &n2, err, errlen, "the chat template's tail")) ||
        (rc = append_ids(&ids, &n_ids, t2, n2))) {
        free(t2);
        goto out;
    }
    free(t2);
    p->suffix = ids;
    p->n_suffix = n_ids;
    ids = NULL;
out:
    free(ids);
    free(head);
    free(question);
    json_decref(body);
    json_decref(copy);
    json_decref(tr);
    return rc;
}

static int plan_completion(struct serve *sv, json_t *req, struct plan *p, char *err, size_t errlen)
{
    json_t *prompt = json_object_get(req, "prompt");
    if (json_is_array(prompt) && json_array_size(prompt) == 1 && json_is_string(json_array_get(prompt, 0)))
        prompt = json_array_get(prompt, 0);
    if (!json_is_string(prompt))
        return kvfs_errf(err, errlen, -EINVAL, "'prompt' must be a string");
    const char *text = json_string_value(prompt), *q = text;
    size_t len = json_string_length(prompt), ql = len;
    int rc;
    if ((rc = add_documents(sv, p, json_object_get(req, "documents"), err, errlen)) ||
        (rc = split_separator(sv, p, text, len, &q, &ql, "the prompt", err, errlen)))
        return rc;
    if (p->n_chunks == 0)
        return tokenize(sv, text, len, 1, 1, &p->suffix, &p->n_suffix, err, errlen, "the prompt");
    if (sv->add_bos && sv->bos >= 0 && !p->chunks[0].given_hash && (p->chunks[0].n == 0 || p->chunks[0].ids[0] != sv->bos)) {
        /* the model wants BOS at the start of the prompt: in the first chunk */
        int32_t *b = malloc(sizeof(int32_t) * (p->chunks[0].n + 1));
        if (!b)
            return -ENOMEM;
        b[0] = sv->bos;
        memcpy(b + 1, p->chunks[0].ids, sizeof(int32_t) * p->chunks[0].n);
        free(p->chunks[0].ids);
        p->chunks[0].ids = b;
        p->chunks[0].n++;
    }
    if (ql == 0)
        return kvfs_errf(err, errlen, -EINVAL, "nothing after the documents: the prompt needs a question");
    return tokenize(sv, q, ql, 0, 1, &p->suffix, &p->n_suffix, err, errlen, "the question");
}

int plan_build(struct serve *sv, const struct engine *e, json_t *req, int chat, struct plan *p, char *err,
               size_t errlen)
{
    memset(p, 0, sizeof(*p));
    p->chat = chat;
    int rc = chat ? plan_chat(sv, e, req, p, err, errlen) : plan_completion(sv, req, p, err, errlen);
    if (rc)
        return rc;
    if (p->n_chunks > 64)
        return kvfs_errf(err, errlen, -EINVAL, "%d chunks: a blend takes at most 64 (fewer documents, or a larger "
                         "--chunk-tokens)", p->n_chunks);
    if (p->n_suffix == 0)
        return kvfs_errf(err, errlen, -EINVAL, "the prompt is empty");
    p->n_prompt = p->n_suffix;
    for (int i = 0; i < p->n_chunks; i++) {
        p->n_prompt += p->chunks[i].n;
        if (!p->chunks[i].given_hash && (rc = plan_chunk_hash(sv, p->chunks[i].ids, p->chunks[i].n, p->chunks[i].hash)))
            return rc;
    }
    return 0;
}

void plan_free(struct plan *p)
{
    for (int i = 0; i < p->n_chunks; i++)
        free(p->chunks[i].ids);
    free(p->chunks);
    free(p->suffix);
    memset(p, 0, sizeof(*p));
}
