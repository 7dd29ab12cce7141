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
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "serve.h"
#include "tokenizer.h"

/* in place of message i's content while the template is rendered */
#define MARK_FMT "\x1fKVFS-SERVE-M%zu\x1f"

int plan_chunk_hash(const struct serve *sv, const uint8_t *salt, const int32_t *ids, size_t n,
                    char hex[KVFS_HASH_HEX_LEN + 1])
{
    return kvfs_ids_chunk_hash(&sv->fp, sv->chunk_dtype, sv->chunk_flags, 0, ids, n, salt, hex);
}

int plan_chunk_present(const struct serve *sv, const char *hash)
{
    char path[1200];
    struct stat st;
    snprintf(path, sizeof(path), "%s/chunks/%s.kv", sv->mount, hash);
    return stat(path, &st) == 0;
}

int plan_chunk_tokens(const struct serve *sv, const char *hash, const uint8_t *salt, int32_t **ids, size_t *n,
                      char *err, size_t errlen)
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
    if (!salt != !h.salt || (salt && memcmp(salt, h.salt, KVFS_SALT_BYTES))) {
        /* another tenant's (or cache salt's): as if it were not there */
        rc = kvfs_errf(err, errlen, -ENOENT, "chunk %s: not in the mount", hash);
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

static int tokenize(struct serve *sv, const char *text, size_t len, int bos, int special, int32_t **ids,
                    size_t *n, char *err, size_t errlen, const char *what)
{
    *ids = NULL;
    *n = 0;
    if (len == 0 && !bos)
        return 0;
    /* long texts (documents, come again and again) through the memo */
    struct memo *memo = &sv->tokens;
    unsigned char key[32];
    const char how[2] = {(char)bos, (char)special};
    int memo_ok = len >= 256 && memo->e && memo_key(key, text, len, how, 2) == 0;
    void *v;
    size_t vl;
    if (memo_ok && memo_get(memo, key, &v, &vl) == 0) {
        *ids = v;
        *n = vl / sizeof(int32_t);
        return 0;
    }
    int rc = kvfs_tokenize(sv->tok, text, len, bos, special, ids, n);
    if (!rc && memo_ok)
        memo_put(memo, key, *ids, *n * sizeof(int32_t));
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
            if ((rc = plan_chunk_tokens(sv, hash, p->salt, &ids, &n, why, sizeof(why))))
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

/* A message's content as text ("" for null: an assistant turn of tool calls) */
static int message_text(json_t *m, size_t idx, char **out, size_t *len, char *err, size_t errlen)
{
    json_t *c = json_object_get(m, "content");
    if (!c || json_is_null(c)) {
        *len = 0;
        return (*out = strdup("")) ? 0 : -ENOMEM;
    }
    int rc = content_text(c, out, len);
    if (rc == -EINVAL)
        kvfs_errf(err, errlen, rc, "messages[%zu].content: a string or an array of text parts", idx);
    return rc;
}

/* A user message's documents (its own "documents", then extra: the
 * request's, for the last one) and its separator segments as chunks in
 * docs; q and ql what is left: the question.  The same for every turn, so
 * that an earlier turn's tokens come out as they were computed. */
static int user_content(struct serve *sv, json_t *m, json_t *extra, const char *text, size_t len, size_t idx,
                        struct plan *docs, const char **q, size_t *ql, char *err, size_t errlen)
{
    char what[64];
    snprintf(what, sizeof(what), "messages[%zu]", idx);
    int rc = add_documents(sv, docs, json_object_get(m, "documents"), err, errlen);
    if (!rc)
        rc = add_documents(sv, docs, extra, err, errlen);
    if (!rc)
        rc = split_separator(sv, docs, text, len, q, ql, what, err, errlen);
    return rc;
}

static int append_plan_ids(int32_t **dst, size_t *n, const struct plan *docs)
{
    int rc = 0;
    for (int k = 0; !rc && k < docs->n_chunks; k++)
        rc = append_ids(dst, n, docs->chunks[k].ids, docs->chunks[k].n);
    return rc;
}

/* tokens appended to *dst */
static int append_text(struct serve *sv, int32_t **dst, size_t *n, const char *text, size_t len, int bos,
                       const char *what, char *err, size_t errlen)
{
    int32_t *ids = NULL;
    size_t k = 0;
    int rc = tokenize(sv, text, len, bos, 1, &ids, &k, err, errlen, what);
    if (!rc)
        rc = append_ids(dst, n, ids, k);
    free(ids);
    return rc;
}

/* ids[0..n) as chunks of at most chunk_tokens */
static int add_id_chunks(struct serve *sv, struct plan *p, const int32_t *ids, size_t n)
{
    size_t step = sv->chunk_tokens > 0 ? (size_t)sv->chunk_tokens : n;
    for (size_t off = 0; off < n; off += step) {
        size_t k = n - off < step ? n - off : step;
        int32_t *part = malloc(sizeof(int32_t) * k);
        if (!part)
            return -ENOMEM;
        memcpy(part, ids + off, sizeof(int32_t) * k);
        int rc = add_chunk(p, part, k, NULL);
        if (rc) {
            free(part);
            return rc;
        }
    }
    return 0;
}

/* The messages rendered by the engine's template with a marker in place of
 * the content of every marked message (marked[0..nm), in order); pos[k] the
 * offset of marker k.  -ESRCH when the template does not show each marker
 * once, in order. */
static int render_marked(struct memo *templates, const struct engine *e, json_t *msgs, const size_t *marked,
                         size_t nm, json_t **tr, const char **rendered, size_t *pos, char *err, size_t errlen)
{
    json_t *copy = json_deep_copy(msgs), *body = NULL;
    int rc = 0;
    long st;
    *tr = NULL;
    if (!copy)
        return -ENOMEM;
    for (size_t k = 0; k < nm; k++)
        json_object_set_new(json_array_get(copy, marked[k]), "content", json_sprintf(MARK_FMT, marked[k]));
    body = json_pack("{s:O}", "messages", copy);
    /* the same conversation's template (every first turn with the same
     * system prompt) through the memo */
    char *text = json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS);
    unsigned char key[32];
    void *v = NULL;
    size_t vl;
    int memo_ok = text && memo_key(key, e->url, strlen(e->url), text, strlen(text)) == 0;
    free(text);
    if (memo_ok && memo_get(templates, key, &v, &vl) == 0) {
        *tr = json_pack("{s:s%}", "prompt", (const char *)v, vl);
        free(v);
        st = 200;
        if (!*tr) {
            rc = -ENOMEM;
            goto out;
        }
    } else if ((rc = engine_call_json(e, "POST", "/apply-template", body, 30, NULL, NULL, tr, &st, err, errlen)))
        goto out;
    else if (memo_ok && st == 200 && json_is_string(json_object_get(*tr, "prompt")))
        memo_put(templates, key, json_string_value(json_object_get(*tr, "prompt")),
                 json_string_length(json_object_get(*tr, "prompt")));
    json_t *pr = json_object_get(*tr, "prompt");
    if (st != 200 || !json_is_string(pr)) {
        char why[SERVE_ERR]; /* err holds the engine's reason: copied, not printed into itself */
        snprintf(why, sizeof(why), "%s", st == 200 ? "no prompt in its answer" : err);
        rc = kvfs_errf(err, errlen, st >= 400 && st < 500 ? -EINVAL : -EIO, "the engine's chat template: %s", why);
        goto out;
    }
    *rendered = json_string_value(pr);
    size_t from = 0;
    for (size_t k = 0; k < nm; k++) {
        char mk[48];
        snprintf(mk, sizeof(mk), MARK_FMT, marked[k]);
        const char *hit = strstr(*rendered + from, mk);
        if (!hit || strstr(hit + 1, mk) || strstr(*rendered, mk) != hit) {
            rc = -ESRCH;
            goto out;
        }
        pos[k] = (size_t)(hit - *rendered);
        from = pos[k] + strlen(mk);
    }
out:
    json_decref(body);
    json_decref(copy);
    return rc;
}

/* Chat.  The prompt's tokens are made the same way in every turn of a
 * conversation (the template's text between the messages, each user
 * message's documents and segments, each answer, tokenized apart), so that
 * turn n's tokens up to the end of the last answer are exactly what turn
 * n-1 computed plus that answer: the conversation's history, which
 * kvfs-serve saved into the mount after turn n-1 (answer.c) under its
 * content hash.  Found, it is the first chunk and only the rest is
 * computed. */
static int plan_chat(struct serve *sv, const struct engine *e, json_t *req, struct plan *p, char *err, size_t errlen)
{
    json_t *msgs = json_object_get(req, "messages"), *tr = NULL;
    int32_t *prefix = NULL, *tail = NULL, *q_ids = NULL;
    size_t n_prefix = 0, n_tail = 0, n_q = 0, n_hist = 0;
    size_t *marked = NULL, *pos = NULL, nm = 0;
    char *text = NULL, *whole = NULL;
    struct plan docs = {.salt = p->salt}, out = {.salt = p->salt};
    int rc = 0;
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return kvfs_errf(err, errlen, -EINVAL, "'messages' must be a non-empty array");
    size_t i, last_user = (size_t)-1, nmsg = json_array_size(msgs);
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
    if (!(marked = malloc(sizeof(size_t) * nmsg)) || !(pos = malloc(sizeof(size_t) * nmsg))) {
        rc = -ENOMEM;
        goto out;
    }
    /* user and assistant messages up to the last user message are marked;
     * a template that does not show them each once gets the last one alone
     * (no history then) */
    size_t last_asst = (size_t)-1;
    for (i = 0; i <= last_user; i++) {
        const char *role = json_string_value(json_object_get(json_array_get(msgs, i), "role"));
        if (!strcmp(role, "user") || !strcmp(role, "assistant"))
            marked[nm++] = i;
        if (!strcmp(role, "assistant"))
            last_asst = i;
    }
    const char *rendered = NULL;
    rc = render_marked(&sv->templates, e, msgs, marked, nm, &tr, &rendered, pos, err, errlen);
    if (rc == -ESRCH && nm > 1) {
        json_decref(tr);
        marked[0] = last_user, nm = 1, last_asst = (size_t)-1;
        rc = render_marked(&sv->templates, e, msgs, marked, nm, &tr, &rendered, pos, err, errlen);
    }
    if (rc == -ESRCH)
        rc = kvfs_errf(err, errlen, -EINVAL, "the engine's chat template does not show the last user message once");
    if (rc)
        goto out;

    /* the prefix: everything before the last user message's content */
    size_t prev = 0;
    for (size_t k = 0; k < nm; k++) {
        size_t j = marked[k];
        char what[64], mk[48];
        snprintf(what, sizeof(what), "the chat template before messages[%zu]", j);
        if ((rc = append_text(sv, &prefix, &n_prefix, rendered + prev, pos[k] - prev, k == 0, what, err, errlen)))
            goto out;
        prev = pos[k] + (size_t)snprintf(mk, sizeof(mk), MARK_FMT, j);
        json_t *mj = json_array_get(msgs, j);
        size_t len;
        free(text);
        text = NULL;
        if ((rc = message_text(mj, j, &text, &len, err, errlen)))
            goto out;
        snprintf(what, sizeof(what), "messages[%zu]", j);
        if (j == last_user) {
            const char *q;
            size_t ql;
            if ((rc = user_content(sv, mj, json_object_get(req, "documents"), text, len, j, &docs, &q, &ql, err,
                                   errlen)) ||
                (rc = tokenize(sv, q, ql, 0, 1, &q_ids, &n_q, err, errlen, "the question")))
                goto out;
            break;
        }
        if (!strcmp(json_string_value(json_object_get(mj, "role")), "user")) {
            struct plan earlier = {.salt = p->salt};
            const char *q;
            size_t ql;
            if (!(rc = user_content(sv, mj, NULL, text, len, j, &earlier, &q, &ql, err, errlen)) &&
                !(rc = append_plan_ids(&prefix, &n_prefix, &earlier)))
                rc = append_text(sv, &prefix, &n_prefix, q, ql, 0, what, err, errlen);
            plan_free(&earlier);
        } else
            rc = append_text(sv, &prefix, &n_prefix, text, len, 0, what, err, errlen);
        if (rc)
            goto out;
        if (j == last_asst)
            n_hist = n_prefix;
    }
    char mk[48];
    snprintf(mk, sizeof(mk), MARK_FMT, last_user);
    const char *after = rendered + pos[nm - 1] + strlen(mk);
    if ((rc = tokenize(sv, after, strlen(after), 0, 1, &tail, &n_tail, err, errlen, "the chat template's tail")))
        goto out;

    /* the prompt as the next turn will see it (saved with the answer) */
    if ((rc = append_ids(&p->canon, &p->n_canon, prefix, n_prefix)) ||
        (rc = append_plan_ids(&p->canon, &p->n_canon, &docs)) ||
        (rc = append_ids(&p->canon, &p->n_canon, q_ids, n_q)) ||
        (rc = append_ids(&p->canon, &p->n_canon, tail, n_tail)))
        goto out;

    /* the history: the last answer and all before it, saved by an earlier turn? */
    size_t body_from = 0; /* prefix tokens after the history */
    if (n_hist > 0) {
        p->n_history = n_hist;
        if ((rc = plan_chunk_hash(sv, p->salt, prefix, n_hist, p->history_hash)))
            goto out;
        p->history = plan_chunk_present(sv, p->history_hash) ? 1 : -1;
        if (p->history == 1) {
            int32_t *h = malloc(sizeof(int32_t) * n_hist);
            if (!h || (rc = add_chunk(&out, h, n_hist, NULL))) {
                free(h);
                rc = rc ? rc : -ENOMEM;
                goto out;
            }
            memcpy(h, prefix, sizeof(int32_t) * n_hist);
            body_from = n_hist;
        }
    }
    if (docs.n_chunks == 0) {
        if (p->history == 1) { /* the history restored as it is; the rest computed */
            p->direct = 1;
            if ((rc = append_ids(&out.suffix, &out.n_suffix, prefix + body_from, n_prefix - body_from)))
                goto out;
        } else if (n_hist > 0 || nm > 1) { /* the whole prompt computed, as the next turn will see it */
            if ((rc = append_ids(&out.suffix, &out.n_suffix, prefix, n_prefix)))
                goto out;
        } else { /* a first turn without documents: the prompt as the engine itself tokenizes it */
            size_t ql = 0;
            free(text);
            text = NULL;
            if ((rc = message_text(json_array_get(msgs, last_user), last_user, &text, &ql, err, errlen)))
                goto out;
            size_t hl = pos[0], al = strlen(after);
            if (!(whole = malloc(hl + ql + al + 1))) {
                rc = -ENOMEM;
                goto out;
            }
            memcpy(whole, rendered, hl);
            memcpy(whole + hl, text, ql);
            memcpy(whole + hl + ql, after, al + 1);
            rc = tokenize(sv, whole, hl + ql + al, 1, 1, &out.suffix, &out.n_suffix, err, errlen, "the prompt");
            goto done;
        }
    } else {
        /* the template's text (after the history) as chunks, then the documents */
        if ((rc = add_id_chunks(sv, &out, prefix + body_from, n_prefix - body_from)))
            goto out;
        for (int k = 0; k < docs.n_chunks; k++) {
            if ((rc = add_chunk(&out, docs.chunks[k].ids, docs.chunks[k].n,
                                docs.chunks[k].given_hash ? docs.chunks[k].hash : NULL)))
                goto out;
            docs.chunks[k].ids = NULL;
        }
    }
    if ((rc = append_ids(&out.suffix, &out.n_suffix, q_ids, n_q)) ||
        (rc = append_ids(&out.suffix, &out.n_suffix, tail, n_tail)))
        goto out;
done:
    p->chunks = out.chunks, p->n_chunks = out.n_chunks;
    p->suffix = out.suffix, p->n_suffix = out.n_suffix;
    memset(&out, 0, sizeof(out));
out:
    plan_free(&out);
    plan_free(&docs);
    free(prefix);
    free(tail);
    free(q_ids);
    free(marked);
    free(pos);
    free(text);
    free(whole);
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

int plan_build(struct serve *sv, const struct engine *e, json_t *req, int chat, const uint8_t *salt, struct plan *p,
               char *err, size_t errlen)
{
    memset(p, 0, sizeof(*p));
    p->salt = salt;
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
        if (!p->chunks[i].given_hash && (rc = plan_chunk_hash(sv, p->salt, p->chunks[i].ids, p->chunks[i].n,
                                                                   p->chunks[i].hash)))
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
    free(p->canon);
    memset(p, 0, sizeof(*p));
}
