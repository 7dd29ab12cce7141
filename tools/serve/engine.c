/* engine.c - llama-server through libcurl: JSON calls and streamed events. */
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "serve.h"

struct buf {
    char *p;
    size_t n, cap;
    size_t limit;
};

static int buf_add(struct buf *b, const char *d, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q)
            return -ENOMEM;
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
    b->p[b->n] = '\0';
    return 0;
}

static size_t on_body(char *d, size_t size, size_t nmemb, void *arg)
{
    struct buf *b = arg;
    size_t n = size * nmemb;
    if ((b->limit && b->n + n > b->limit) || buf_add(b, d, n))
        return 0; /* curl fails the transfer */
    return n;
}

struct cancel_ctx {
    serve_cancel_fn fn;
    void *arg;
    int cancelled;
};

static int on_progress(void *arg, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    (void)a, (void)b, (void)c, (void)d;
    struct cancel_ctx *cc = arg;
    if (cc->fn && cc->fn(cc->arg)) {
        cc->cancelled = 1;
        return 1;
    }
    return 0;
}

static int curl_errno(CURLcode c)
{
    switch (c) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_GOT_NOTHING:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_PARTIAL_FILE: /* the connection closed mid-reply: the engine went away */
        return -EHOSTDOWN;
    case CURLE_OPERATION_TIMEDOUT:
        return -ETIMEDOUT;
    case CURLE_ABORTED_BY_CALLBACK:
        return -ECANCELED;
    default:
        return -EIO;
    }
}

int engine_call(const struct engine *e, const char *method, const char *path, const char *body, double timeout_s,
                serve_cancel_fn cancel, void *cancel_arg, json_t **out, long *status, char *err, size_t errlen)
{
    char url[1400];
    struct buf b = {.limit = 256u << 20};
    struct curl_slist *hdr = NULL;
    struct cancel_ctx cc = {cancel, cancel_arg, 0};
    int rc = 0;
    *out = NULL;
    *status = 0;
    snprintf(url, sizeof(url), "%s%s", e->url, path);
    CURL *c = curl_easy_init();
    if (!c)
        return kvfs_errf(err, errlen, -ENOMEM, "curl_easy_init failed");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 3000L);
    if (timeout_s > 0)
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(timeout_s * 1000));
    if (cancel) {
        curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(c, CURLOPT_XFERINFODATA, &cc);
    }
    if (!strcmp(method, "POST")) {
        hdr = curl_slist_append(hdr, "Content-Type: application/json");
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body ? body : "{}");
    }
    CURLcode cr = curl_easy_perform(c);
    if (cr != CURLE_OK) {
        rc = cc.cancelled ? -ECANCELED : curl_errno(cr);
        kvfs_errf(err, errlen, rc, "%s %s: %s", method, url, curl_easy_strerror(cr));
        goto out;
    }
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
    if (b.n) {
        json_error_t je;
        *out = json_loadb(b.p, b.n, 0, &je);
    }
    if (*status >= 400) {
        json_t *m = *out ? json_object_get(json_object_get(*out, "error"), "message") : NULL;
        kvfs_errf(err, errlen, -EIO, "%s %s: HTTP %ld: %s", method, path, *status,
                  json_is_string(m) ? json_string_value(m) : (b.p ? b.p : ""));
    }
out:
    curl_slist_free_all(hdr);
    curl_easy_cleanup(c);
    free(b.p);
    return rc;
}

int engine_call_json(const struct engine *e, const char *method, const char *path, json_t *body, double timeout_s,
                     serve_cancel_fn cancel, void *cancel_arg, json_t **out, long *status, char *err, size_t errlen)
{
    char *text = json_dumps(body, JSON_COMPACT);
    if (!text)
        return kvfs_errf(err, errlen, -ENOMEM, "cannot encode the request to the engine");
    int rc = engine_call(e, method, path, text, timeout_s, cancel, cancel_arg, out, status, err, errlen);
    free(text);
    return rc;
}

int engine_discover(struct engine *e, char *err, size_t errlen)
{
    json_t *r = NULL;
    long st;
    int rc = engine_call(e, "GET", "/props", NULL, 10, NULL, NULL, &r, &st, err, errlen);
    if (rc)
        return rc;
    if (st != 200 || !json_is_object(r)) {
        rc = kvfs_errf(err, errlen, -EPROTO, "%s/props: HTTP %ld, not llama-server's properties", e->url, st);
        goto out;
    }
    json_t *ns = json_object_get(r, "total_slots");
    json_t *mp = json_object_get(r, "model_path");
    json_t *nc = json_object_get(json_object_get(r, "default_generation_settings"), "n_ctx");
    if (!json_is_integer(ns) || json_integer_value(ns) < 1 || !json_is_string(mp) || !json_is_integer(nc)) {
        rc = kvfs_errf(err, errlen, -EPROTO, "%s/props has no total_slots, model_path or n_ctx: not llama-server?",
                       e->url);
        goto out;
    }
    e->n_slots = (int)json_integer_value(ns);
    e->n_ctx = (int)json_integer_value(nc);
    snprintf(e->model_path, sizeof(e->model_path), "%s", json_string_value(mp));
out:
    json_decref(r);
    return rc;
}

/* ---- streaming ---- */

struct engine_stream {
    CURLM *multi;
    CURL *easy;
    struct curl_slist *hdr;
    char *body;
    struct buf in;   /* bytes received, not parsed yet */
    size_t pos;      /* parsed up to here */
    int done;        /* the transfer finished */
    CURLcode result;
    long status;
    char url[1400];
};

static size_t on_stream(char *d, size_t size, size_t nmemb, void *arg)
{
    struct engine_stream *s = arg;
    size_t n = size * nmemb;
    if (s->pos > 0 && s->pos == s->in.n) { /* all parsed: start over */
        s->in.n = s->pos = 0;
    }
    if (s->in.n + n > (64u << 20) || buf_add(&s->in, d, n))
        return 0;
    return n;
}

int engine_stream_open(const struct engine *e, const char *path, json_t *body, struct engine_stream **out,
                       char *err, size_t errlen)
{
    struct engine_stream *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->body = json_dumps(body, JSON_COMPACT);
    s->multi = curl_multi_init();
    s->easy = curl_easy_init();
    if (!s->body || !s->multi || !s->easy) {
        engine_stream_close(s);
        return kvfs_errf(err, errlen, -ENOMEM, "cannot start the stream");
    }
    snprintf(s->url, sizeof(s->url), "%s%s", e->url, path);
    s->hdr = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(s->easy, CURLOPT_URL, s->url);
    curl_easy_setopt(s->easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(s->easy, CURLOPT_HTTPHEADER, s->hdr);
    curl_easy_setopt(s->easy, CURLOPT_POSTFIELDS, s->body);
    curl_easy_setopt(s->easy, CURLOPT_WRITEFUNCTION, on_stream);
    curl_easy_setopt(s->easy, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(s->easy, CURLOPT_CONNECTTIMEOUT_MS, 3000L);
    curl_multi_add_handle(s->multi, s->easy);
    *out = s;
    return 0;
}

/* one event from the bytes received: "data: {...}" lines separated by blank lines */
static int parse_event(struct engine_stream *s, json_t **ev)
{
    while (s->pos < s->in.n) {
        char *start = s->in.p + s->pos;
        char *nl = memchr(start, '\n', s->in.n - s->pos);
        if (!nl)
            return 0;
        size_t len = (size_t)(nl - start);
        s->pos += len + 1;
        if (len && start[len - 1] == '\r')
            len--;
        if (len > 6 && !strncmp(start, "data: ", 6)) {
            if (len - 6 == 6 && !strncmp(start + 6, "[DONE]", 6))
                continue;
            json_error_t je;
            json_t *j = json_loadb(start + 6, len - 6, 0, &je);
            if (j) {
                *ev = j;
                return 1;
            }
        } else if (len > 0 && start[0] == '{') { /* an error reply, not an event stream */
            json_error_t je;
            json_t *j = json_loadb(start, len, 0, &je);
            if (j) {
                *ev = j;
                return 1;
            }
        }
    }
    return 0;
}

int engine_stream_next(struct engine_stream *s, double timeout_s, json_t **ev, char *err, size_t errlen)
{
    *ev = NULL;
    double t_end = serve_now() + timeout_s;
    for (;;) {
        if (parse_event(s, ev))
            return 0;
        if (s->done) {
            if (s->pos < s->in.n && s->in.p[s->in.n - 1] != '\n' && buf_add(&s->in, "\n", 1) == 0)
                continue; /* a last line without its newline */
            if (s->result != CURLE_OK)
                return kvfs_errf(err, errlen, curl_errno(s->result), "%s: %s", s->url,
                                 curl_easy_strerror(s->result));
            return 0;
        }
        int running = 0;
        curl_multi_perform(s->multi, &running);
        CURLMsg *m;
        int q;
        while ((m = curl_multi_info_read(s->multi, &q)))
            if (m->msg == CURLMSG_DONE) {
                s->done = 1;
                s->result = m->data.result;
                curl_easy_getinfo(s->easy, CURLINFO_RESPONSE_CODE, &s->status);
            }
        if (s->done)
            continue;
        if (parse_event(s, ev))
            return 0;
        double left = t_end - serve_now();
        if (left <= 0)
            return -ETIMEDOUT;
        curl_multi_poll(s->multi, NULL, 0, left > 0.1 ? 100 : (int)(left * 1000) + 1, NULL);
    }
}

void engine_stream_close(struct engine_stream *s)
{
    if (!s)
        return;
    if (s->multi && s->easy)
        curl_multi_remove_handle(s->multi, s->easy);
    if (s->easy)
        curl_easy_cleanup(s->easy);
    if (s->multi)
        curl_multi_cleanup(s->multi);
    curl_slist_free_all(s->hdr);
    free(s->body);
    free(s->in.p);
    free(s);
}
