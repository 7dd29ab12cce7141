/* answer.c - one completion request: its chunks found in the mount or
 * prefilled by the engine (once, whoever asks), the recipe blended by the
 * mount and restored into a slot, the question computed by the engine and
 * the answer returned in OpenAI's format, streamed or not. */
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <openssl/sha.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kvfs.h"
#include "log.h"
#include "serve.h"
#include "tokenizer.h"

double serve_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct outbuf {
    char *p;
    size_t n, cap, pos;
};

static int out_add(struct outbuf *o, const char *s, size_t n)
{
    if (o->pos == o->n)
        o->pos = o->n = 0;
    if (o->n + n + 1 > o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 4096;
        while (cap < o->n + n + 1)
            cap *= 2;
        char *q = realloc(o->p, cap);
        if (!q)
            return -ENOMEM;
        o->p = q;
        o->cap = cap;
    }
    memcpy(o->p + o->n, s, n);
    o->n += n;
    o->p[o->n] = '\0';
    return 0;
}

/* A request in flight */
struct req {
    struct serve *sv;
    int fd;             /* the client's socket */
    int chat, stream;
    char id[48];
    long long created;
    json_t *body;       /* the client's request */
    struct plan plan;
    struct slot_ref slot;
    int have_slot;
    double t_arrival;
    double t_mark;      /* the end of the last phase timed (mark()) */
    double deadline;    /* a wait for an engine to come back ends here (pool_acquire; 0: not waited yet) */
    int retries;        /* tries again after the engine went down under it */
    int reblended;      /* blended again after a chunk or the result went away before the restore */
    int ahead;          /* blended before its slot (ahead_enter): ahead_name, ahead_ntok */
    char ahead_name[256];
    uint32_t ahead_ntok;
    char down_err[SERVE_ERR]; /* what the engine's last failure was */
    int ttft_done;
    int in_slot;        /* its history was still in the slot it got: not restored */
    json_t *kvfs;       /* what kvfs did, returned as "kvfs" */
    uint8_t salt[KVFS_SALT_BYTES]; /* the tenant's and the request's cache salt, digested */
    int salted;
    /* streaming */
    struct engine_stream *es;
    struct outbuf out;
    int sent_role, finished, done_sent;
    /* the answer, whole (for saving the conversation's turn) */
    struct outbuf answer;
    int answered;       /* the engine finished the answer without an error */
};

static int client_gone(void *arg)
{
    struct req *r = arg;
    if (r->fd < 0)
        return 0;
    struct pollfd p = {.fd = r->fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0)
        return 0;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))
        return 1;
    return 0;
}

char *answer_error_json(int status, const char *msg)
{
    const char *type = status == 400   ? "invalid_request_error"
                       : status == 401 ? "authentication_error"
                       : status == 404 ? "not_found_error"
                       : status == 503 ? "unavailable_error"
                                       : "server_error";
    json_t *j = json_pack("{s:{s:s,s:s,s:i}}", "error", "message", msg, "type", type, "code", status);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return s;
}

static void fail(struct req *r, struct answer_result *res, int status, const char *msg)
{
    res->status = status;
    res->body = answer_error_json(status, msg);
    metrics_add(r->sv, status >= 500 ? &r->sv->m.errors_5xx : &r->sv->m.errors_4xx, 1);
    if (r->sv->verbose)
        kvfs_log(KVFS_LOG_WARN, "kvfs-serve: %d: %s", status, msg);
}

/* the client went away: no answer (main.c closes the connection) */
static void gone(struct req *r, struct answer_result *res)
{
    metrics_add(r->sv, &r->sv->m.disconnects, 1);
    res->status = 499;
}

/* The time since the last mark, added to kvfs.ms.PHASE (what a request's
 * time went to: a slow answer says where) */
static void mark(struct req *r, const char *phase)
{
    double now = serve_now();
    json_t *ms = json_object_get(r->kvfs, "ms");
    if (!ms) {
        ms = json_object();
        json_object_set_new(r->kvfs, "ms", ms);
    }
    double was = json_number_value(json_object_get(ms, phase));
    json_object_set_new(ms, phase, json_real(was + (now - r->t_mark) * 1000.0));
    r->t_mark = now;
}

/* An engine call's rc and HTTP status as one rc: a 503 is an engine that is
 * (re)starting (llama-server's "Loading model"), taken as down */
static int call_rc(int rc, long st)
{
    return rc ? rc : st == 503 ? -EHOSTDOWN : st == 200 ? 0 : -EIO;
}

/* A failed step of the request on its slot (what): -EAGAIN when the engine
 * went down under it (marked down; the request is tried again once one is
 * up), else the answer is the error (status; 499 when the client went
 * away) and rc is returned */
static int step_failed(struct req *r, struct answer_result *res, int rc, int status, const char *what, const char *err)
{
    char msg[SERVE_ERR + 128];
    if (rc == -EHOSTDOWN) {
        pool_engine_down(r->sv, r->slot.engine, err);
        if (snprintf(r->down_err, sizeof(r->down_err), "%s: %s", what, err) >= (int)sizeof(r->down_err))
            r->down_err[sizeof(r->down_err) - 2] = '.';
        return -EAGAIN;
    }
    if (rc == -ECANCELED) {
        gone(r, res);
        return rc;
    }
    /* a long reason is cut, never overflows (the length checked: no truncation warning) */
    if (snprintf(msg, sizeof(msg), "%s: %s", what, err) >= (int)sizeof(msg))
        msg[sizeof(msg) - 2] = '.';
    fail(r, res, status, msg);
    return rc ? rc : -EIO;
}

static json_t *ids_json(const int32_t *ids, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        json_array_append_new(a, json_integer(ids[i]));
    return a;
}

/* The file name an engine saves a chunk's state under in MNT/llama/: with
 * a salt, ".salt-<its 64 hex digits>", which makes the mount store it salted */
static json_t *save_name(const char *what, const char *hash, const uint8_t *salt)
{
    char hex[2 * KVFS_SALT_BYTES + 1] = "";
    for (unsigned i = 0; salt && i < KVFS_SALT_BYTES; i++)
        snprintf(hex + 2 * i, 3, "%02x", salt[i]);
    return salt ? json_sprintf("%s-%.16s.salt-%s.bin", what, hash, hex) : json_sprintf("%s-%.16s.bin", what, hash);
}

/* The engine computes ids in the slot (cache_prompt: after what the slot
 * holds already; else all of them) and saves the slot into MNT/llama/ under
 * filename (consumed), which the mount stores as the chunk of its tokens:
 * 0 once chunk hash is there, -EPROTO when the mount holds no such chunk
 * after the save (err says so), else the engine call's error.  cancel
 * stops the computing, and the save too with cancel_save (a prefill others
 * wait for is saved once computed). */
static int compute_and_save(struct serve *sv, const struct slot_ref *slot, const int32_t *ids, size_t n,
                            int cache_prompt, json_t *filename, const char *hash, double timeout_s,
                            serve_cancel_fn cancel, void *arg, int cancel_save, char *err, size_t errlen)
{
    struct engine *e = &sv->engines[slot->engine];
    json_t *out = NULL, *b = json_pack("{s:o,s:i,s:i,s:b}", "prompt", ids_json(ids, n), "n_predict", 0, "id_slot",
                                       slot->id, "cache_prompt", cache_prompt);
    long st;
    char path[64];
    err[0] = '\0';
    int rc = engine_call_json(e, "POST", "/completion", b, timeout_s, cancel, arg, &out, &st, err, errlen);
    rc = call_rc(rc, st); /* apart: st is set by the call */
    json_decref(b);
    json_decref(out);
    out = NULL;
    if (rc) {
        json_decref(filename);
        if (!err[0])
            snprintf(err, errlen, "/completion: HTTP %ld", st);
        return rc;
    }
    b = json_pack("{s:o}", "filename", filename);
    snprintf(path, sizeof(path), "/slots/%d?action=save", slot->id);
    rc = engine_call_json(e, "POST", path, b, 120, cancel_save ? cancel : NULL, arg, &out, &st, err, errlen);
    rc = call_rc(rc, st);
    json_decref(b);
    json_decref(out);
    if (rc) {
        if (!err[0])
            snprintf(err, errlen, "%s: HTTP %ld", path, st);
        return rc;
    }
    if (!plan_chunk_present(sv, hash))
        return kvfs_errf(err, errlen, -EPROTO, "the engine's state of %zu tokens was not stored as chunk %.16s...", n,
                         hash);
    return 0;
}

/* the engine prefills chunk c in our slot and saves its state into
 * MNT/llama/, which the mount stores as the chunk of those tokens */
static int prefill_chunk(struct req *r, struct chunk_plan *c, char *err, size_t errlen)
{
    if (local_needed(r->sv, c->n)) /* past a sliding window: the engine's saved state would not be whole */
        return local_prefill(r->sv, c->ids, c->n, r->plan.salt, c->hash, err, errlen);
    int rc = compute_and_save(r->sv, &r->slot, c->ids, c->n, 0, save_name("kvfs-serve", c->hash, r->plan.salt),
                              c->hash, 0, client_gone, r, 0, err, errlen);
    if (rc == -EPROTO)
        kvfs_errf(err, errlen, rc, "the engine's state of %zu tokens was not stored as chunk %.16s...: is the engine's "
                  "model the mount's, and its --slot-save-path %s/llama/?", c->n, c->hash, r->sv->mount);
    return rc;
}

/* The fleet's claim on chunk c (KVFS_IOC_CLAIM), this request holding the
 * process's: 1 when another host computed it meanwhile (it is in the mount
 * or its pool), 0 to prefill it here holding *fc (libkvfs_claim_end after).
 * Waits in short claims so a client that went away stops it; a failing
 * claim prefills here (the claim saves work, nothing depends on it). */
static int fleet_claim(struct req *r, struct chunk_plan *c, struct libkvfs_claim *fc)
{
    char err[256];
    for (;;) {
        int rc = libkvfs_claim(r->sv->mount, c->hash, 2000, fc, err, sizeof(err));
        if (rc == -ETIMEDOUT && !client_gone(r))
            continue; /* another host is still computing it */
        if (rc && rc != -ENOTTY && rc != -ETIMEDOUT)
            kvfs_log(KVFS_LOG_WARN, "claim of chunk %.16s... failed (%s): prefilled here", c->hash, err);
        return rc ? 0 : fc->present;
    }
}

static const char *source_name(int s)
{
    return s == 0 ? "hit" : s == 1 ? "prefilled" : "joined";
}

/* every chunk in the mount: found, prefilled here, or prefilled by another
 * request (single flight).  Pass 1 prefills what nobody else is prefilling;
 * pass 2 waits for the others (holding no claim while it waits, so two
 * requests never wait for each other). */
static int resolve_chunks(struct req *r, char *err, size_t errlen)
{
    struct serve *sv = r->sv;
    int rc = 0;
    int *pending = calloc((size_t)r->plan.n_chunks + 1, sizeof(int));
    if (!pending)
        return -ENOMEM;
    for (int pass = 0; pass < 2 && !rc; pass++) {
        for (int i = 0; i < r->plan.n_chunks && !rc; i++) {
            struct chunk_plan *c = &r->plan.chunks[i];
            if (pass == 0) {
                if (plan_chunk_present(sv, c->hash)) {
                    metrics_add(sv, &sv->m.chunk_hits, 1);
                    continue;
                }
                metrics_add(sv, &sv->m.chunk_misses, 1);
            } else if (!pending[i])
                continue;
            for (int tries = 0;; tries++) {
                if (pass == 1 && plan_chunk_present(sv, c->hash)) {
                    c->state = 2;
                    metrics_add(sv, &sv->m.prefill_joins, 1);
                    break;
                }
                int cl = pool_prefill_claim(sv, c->hash, pass == 1, client_gone, r);
                if (cl == -EAGAIN) {
                    pending[i] = 1;
                    break;
                }
                if (cl < 0) {
                    rc = kvfs_errf(err, errlen, cl, "the client went away");
                    break;
                }
                if (cl == 0) {
                    if (tries > 3) {
                        rc = kvfs_errf(err, errlen, -EIO, "chunk %.16s...: other requests' prefills failed", c->hash);
                        break;
                    }
                    continue;
                }
                /* ours; another request, or another host, may have finished it just now */
                struct libkvfs_claim fc = {.fd = -1};
                int there = plan_chunk_present(sv, c->hash);
                if (there || fleet_claim(r, c, &fc)) {
                    c->state = 2;
                    if (!there)
                        metrics_add(sv, &sv->m.prefill_joins, 1);
                    pool_prefill_done(sv, c->hash);
                    break;
                }
                rc = prefill_chunk(r, c, err, errlen);
                libkvfs_claim_end(&fc); /* the mount keeps the lease until the chunk is in the pool */
                pool_prefill_done(sv, c->hash);
                if (rc)
                    metrics_add(sv, &sv->m.prefill_errors, 1);
                else {
                    c->state = 1;
                    metrics_add(sv, &sv->m.chunk_prefills, 1);
                }
                break;
            }
        }
    }
    free(pending);
    return rc;
}

/* The recipe through the blend ioctl (or as a blends/ file when it is too
 * long for one); *name gets the blend's name */
static int blend(struct req *r, double ratio, char *name, size_t namelen, uint32_t *ntok, char *err, size_t errlen)
{
    struct plan *p = &r->plan;
    size_t cap = (size_t)p->n_chunks * 66 + p->n_suffix * 12 + 128, n = 0;
    char *text = malloc(cap);
    int rc = 0;
    if (!text)
        return -ENOMEM;
    for (int i = 0; i < p->n_chunks; i++)
        n += (size_t)snprintf(text + n, cap - n, "%s\n", p->chunks[i].hash);
    n += (size_t)snprintf(text + n, cap - n, "ratio=%g\nsuffix_tokens=", ratio);
    for (size_t i = 0; i < p->n_suffix; i++)
        n += (size_t)snprintf(text + n, cap - n, "%s%d", i ? "," : "", p->suffix[i]);
    n += (size_t)snprintf(text + n, cap - n, "\n");
    if (n <= LIBKVFS_RECIPE_MAX) {
        char path[4096];
        if ((rc = libkvfs_blend(r->sv->mount, text, path, sizeof(path), ntok, err, errlen)))
            goto out;
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        snprintf(name, namelen, "%.*s", (int)(strlen(base) > 3 ? strlen(base) - 3 : 0), base);
        goto out;
    }
    /* too long for the ioctl: blends/serve-<sha>.recipe */
    unsigned char d[32];
    SHA256((const unsigned char *)text, n, d);
    snprintf(name, namelen, "serve-%02x%02x%02x%02x%02x%02x%02x%02x", d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]);
    char path[1400];
    snprintf(path, sizeof(path), "%s/blends/%s.recipe", r->sv->mount, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = kvfs_errf(err, errlen, -errno, "%s: %s", path, strerror(errno));
        goto out;
    }
    ssize_t w = write(fd, text, n);
    int cr = close(fd);
    if (w != (ssize_t)n || cr) {
        rc = -errno;
        char ep[1400], why[240] = "";
        snprintf(ep, sizeof(ep), "%s/blends/%s.err", r->sv->mount, name);
        int ef = open(ep, O_RDONLY | O_CLOEXEC);
        if (ef >= 0) {
            ssize_t k = read(ef, why, sizeof(why) - 1);
            why[k > 0 ? k : 0] = '\0';
            close(ef);
        }
        rc = kvfs_errf(err, errlen, rc ? rc : -EIO, "recipe %s refused: %s", name, why);
        goto out;
    }
    snprintf(path, sizeof(path), "%s/blends/%s.kv", r->sv->mount, name);
    fd = open(path, O_RDONLY | O_CLOEXEC); /* blends it */
    if (fd < 0) {
        rc = kvfs_errf(err, errlen, -errno, "blend %s: %s (see %s/blends/%s.err)", name, strerror(errno),
                       r->sv->mount, name);
        goto out;
    }
    close(fd);
    *ntok = (uint32_t)p->n_prompt;
out:
    free(text);
    return rc;
}

static json_t *prompt_ids(const struct plan *p, int with_suffix)
{
    json_t *a = json_array();
    for (int i = 0; i < p->n_chunks; i++)
        for (size_t k = 0; k < p->chunks[i].n; k++)
            json_array_append_new(a, json_integer(p->chunks[i].ids[k]));
    for (size_t k = 0; with_suffix && k < p->n_suffix; k++)
        json_array_append_new(a, json_integer(p->suffix[k]));
    return a;
}

/* restore the blend (or a saved history) into our slot; a blend's suffix
 * rows are dropped (trim), so that the engine computes the suffix itself
 * (not for a sliding-window model: serve_once) */
static int restore(struct req *r, const char *name, uint32_t ntok, int trim, char *err, size_t errlen)
{
    struct engine *e = &r->sv->engines[r->slot.engine];
    char path[64];
    json_t *out = NULL, *b = json_pack("{s:s+}", "filename", name, ".llama");
    long st;
    snprintf(path, sizeof(path), "/slots/%d?action=restore", r->slot.id);
    int rc = engine_call_json(e, "POST", path, b, 300, NULL, NULL, &out, &st, err, errlen);
    json_decref(b);
    if ((rc = call_rc(rc, st))) {
        json_decref(out);
        return rc;
    }
    json_int_t n = json_integer_value(json_object_get(out, "n_restored"));
    json_decref(out);
    if (n != (json_int_t)ntok)
        return kvfs_errf(err, errlen, -EPROTO, "restored %lld tokens of llama/%s.llama, the blend has %u",
                         (long long)n, name, ntok);
    if (!trim) /* a history: the answer's prompt starts with all of it */
        return 0;
    /* the documents' tokens alone: the engine keeps the rows they share
     * with the restored cache and drops the suffix's (it evaluates the
     * last document token again to have logits) */
    b = json_pack("{s:o,s:i,s:i,s:b}", "prompt", prompt_ids(&r->plan, 0), "n_predict", 0, "id_slot", r->slot.id,
                  "cache_prompt", 1);
    rc = engine_call_json(e, "POST", "/completion", b, 300, client_gone, r, &out, &st, err, errlen);
    json_decref(b);
    json_decref(out);
    return call_rc(rc, st);
}

/* After a restore that failed with the engine up: did a chunk of the blend,
 * or the blend itself, go away since it was blended (evicted, removed, the
 * recipe forgotten)?  Then the mount cannot make llama/NAME.llama again;
 * 1 and why, else 0. */
static int blend_gone(struct req *r, const char *name, char *why, size_t whylen)
{
    char path[1400];
    struct stat st;
    for (int i = 0; i < r->plan.n_chunks; i++)
        if (!plan_chunk_present(r->sv, r->plan.chunks[i].hash)) {
            snprintf(why, whylen, "chunk %.16s... is no longer in the mount", r->plan.chunks[i].hash);
            return 1;
        }
    snprintf(path, sizeof(path), "%s/llama/%s.llama", r->sv->mount, name);
    if (stat(path, &st) && errno == ENOENT) {
        snprintf(why, whylen, "llama/%s.llama is gone", name);
        return 1;
    }
    return 0;
}

/* Tests only (KVFS_SERVE_TEST_HOLD, kvfs-serve(1) ENVIRONMENT): while that
 * file exists, a request about to restore its blend waits there, so that a
 * test can remove chunks or stop the engine between the blend and the
 * restore. */
static void test_hold(struct req *r, const char *name)
{
    const char *f = r->sv->test_hold;
    if (!f || access(f, F_OK))
        return;
    kvfs_log(KVFS_LOG_WARN, "kvfs-serve: test hook: %s holds before restoring blend %s into slot %d while %s exists",
             r->id, name, r->slot.id, f);
    while (!access(f, F_OK) && !client_gone(r))
        usleep(20 * 1000);
}

/* the engine's /completion request for the client's parameters */
static json_t *completion_body(struct req *r)
{
    json_t *b = json_object(), *v;
    json_object_set_new(b, "prompt", prompt_ids(&r->plan, 1));
    json_object_set_new(b, "id_slot", json_integer(r->slot.id));
    json_object_set_new(b, "cache_prompt", json_true());
    json_object_set_new(b, "stream", json_boolean(r->stream));
    json_object_set_new(b, "return_tokens", json_true());
    json_int_t np = r->chat ? -1 : 16;
    if (json_is_integer(v = json_object_get(r->body, "max_completion_tokens")) ||
        json_is_integer(v = json_object_get(r->body, "max_tokens")))
        np = json_integer_value(v);
    json_object_set_new(b, "n_predict", json_integer(np));
    static const char *pass[] = {"temperature", "top_p", "top_k", "min_p", "seed", "stop", "presence_penalty",
                                 "frequency_penalty", "repeat_penalty", "n_probs", "logit_bias", "grammar",
                                 "json_schema", "typical_p", "mirostat", "ignore_eos", NULL};
    for (int i = 0; pass[i]; i++)
        if ((v = json_object_get(r->body, pass[i])) && !json_is_null(v))
            json_object_set(b, pass[i], v);
    return b;
}

static const char *finish_reason(json_t *ev)
{
    const char *st = json_string_value(json_object_get(ev, "stop_type"));
    return st && !strcmp(st, "limit") ? "length" : "stop";
}

static json_t *usage(struct req *r, json_t *ev)
{
    json_int_t np = json_integer_value(json_object_get(ev, "tokens_predicted"));
    return json_pack("{s:I,s:I,s:I}", "prompt_tokens", (json_int_t)r->plan.n_prompt, "completion_tokens", np,
                     "total_tokens", (json_int_t)r->plan.n_prompt + np);
}

static void account(struct req *r, json_t *ev)
{
    struct serve *sv = r->sv;
    json_t *t = json_object_get(ev, "timings");
    pthread_mutex_lock(&sv->lock);
    sv->m.prompt_tokens += r->plan.n_prompt;
    json_int_t computed = json_integer_value(json_object_get(t, "prompt_n"));
    sv->m.computed_tokens += (uint64_t)computed;
    /* kept in its slot, the history should cost nothing: the engine
     * computing well past the new turn lost it (it is counted) */
    if (r->in_slot && computed > (json_int_t)r->plan.n_suffix + 8) {
        sv->m.history_slot_misses++;
        json_object_set_new(json_object_get(r->kvfs, "history"), "slot_miss", json_true());
    }
    sv->m.completion_tokens += (uint64_t)json_integer_value(json_object_get(ev, "tokens_predicted"));
    pthread_mutex_unlock(&sv->lock);
}

static json_t *base_object(struct req *r, const char *object)
{
    return json_pack("{s:s,s:s,s:I,s:s}", "id", r->id, "object", object, "created", (json_int_t)r->created, "model",
                     r->sv->model_name);
}

static char *whole_answer(struct req *r, json_t *ev)
{
    json_t *o = base_object(r, r->chat ? "chat.completion" : "text_completion");
    json_t *content = json_object_get(ev, "content");
    json_t *choice;
    if (r->chat)
        choice = json_pack("{s:i,s:{s:s,s:O},s:s}", "index", 0, "message", "role", "assistant", "content", content,
                           "finish_reason", finish_reason(ev));
    else
        choice = json_pack("{s:i,s:O,s:n,s:s}", "index", 0, "text", content, "logprobs", "finish_reason",
                           finish_reason(ev));
    json_object_set_new(o, "choices", json_pack("[o]", choice));
    json_object_set_new(o, "usage", usage(r, ev));
    json_t *t = json_object_get(ev, "timings");
    if (t)
        json_object_set(o, "timings", t);
    json_t *tk = json_object_get(ev, "tokens");
    if (tk && json_is_true(json_object_get(r->body, "return_tokens")))
        json_object_set(r->kvfs, "tokens", tk);
    json_object_set(o, "kvfs", r->kvfs);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

/* one engine event as OpenAI chunks appended to r->out */
static int stream_event(struct req *r, json_t *ev)
{
    json_t *err = json_object_get(ev, "error");
    char *s;
    if (err) {
        json_t *o = json_pack("{s:O}", "error", err);
        s = json_dumps(o, JSON_COMPACT);
        json_decref(o);
        r->finished = 1;
        goto emit;
    }
    const char *content = json_string_value(json_object_get(ev, "content"));
    int stop = json_is_true(json_object_get(ev, "stop"));
    if (content && *content && out_add(&r->answer, content, strlen(content)))
        return -ENOMEM;
    if (!r->ttft_done && ((content && *content) || stop)) {
        r->ttft_done = 1;
        mark(r, "first_token");
        metrics_ttft(r->sv, serve_now() - r->t_arrival);
    }
    json_t *o = base_object(r, r->chat ? "chat.completion.chunk" : "text_completion");
    json_t *choice;
    if (r->chat) {
        json_t *delta = json_object();
        if (!r->sent_role) {
            json_object_set_new(delta, "role", json_string("assistant"));
            r->sent_role = 1;
        }
        if (content && (*content || !stop))
            json_object_set_new(delta, "content", json_string(content));
        choice = json_pack("{s:i,s:o}", "index", 0, "delta", delta);
    } else
        choice = json_pack("{s:i,s:s,s:n}", "index", 0, "text", content ? content : "", "logprobs");
    json_object_set_new(choice, "finish_reason", stop ? json_string(finish_reason(ev)) : json_null());
    json_object_set_new(o, "choices", json_pack("[o]", choice));
    if (stop) {
        account(r, ev);
        json_object_set_new(o, "usage", usage(r, ev));
        json_t *t = json_object_get(ev, "timings");
        if (t)
            json_object_set(o, "timings", t);
        json_object_set(o, "kvfs", r->kvfs);
        r->finished = 1;
        r->answered = 1;
    }
    s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
emit:
    if (!s)
        return -ENOMEM;
    int rc = out_add(&r->out, "data: ", 6);
    if (!rc)
        rc = out_add(&r->out, s, strlen(s));
    if (!rc)
        rc = out_add(&r->out, "\n\n", 2);
    free(s);
    return rc;
}

/* The history went away between the plan and its restore: its tokens
 * become the start of the suffix (the engine computes the whole prompt) */
static int history_lost(struct req *r)
{
    struct plan *p = &r->plan;
    struct chunk_plan *h = &p->chunks[0];
    int32_t *s = malloc(sizeof(int32_t) * (h->n + p->n_suffix));
    if (!s)
        return -ENOMEM;
    memcpy(s, h->ids, sizeof(int32_t) * h->n);
    memcpy(s + h->n, p->suffix, sizeof(int32_t) * p->n_suffix);
    free(p->suffix);
    p->suffix = s;
    p->n_suffix += h->n;
    free(h->ids);
    free(p->chunks);
    p->chunks = NULL;
    p->n_chunks = 0;
    p->direct = 0;
    p->history = -1;
    return 0;
}

/* ---- a turn saved: after a chat answer, the conversation so far (the
 * prompt as the next turn makes it, and the answer) is computed in the
 * answer's slot, which holds nearly all of it already, and saved into the
 * mount's llama/ as the chunk of those tokens: the next turn's history,
 * found by its content hash from any slot, server or restart ---- */
struct turn_save {
    struct serve *sv;
    struct slot_ref slot;
    uint8_t salt[KVFS_SALT_BYTES];
    int salted;
    int32_t *ids;
    size_t n;
    char hash[KVFS_HASH_HEX_LEN + 1];
};

static int stopping(void *arg)
{
    struct serve *sv = arg;
    pthread_mutex_lock(&sv->lock);
    int s = sv->stopping;
    pthread_mutex_unlock(&sv->lock);
    return s;
}

static void *save_turn(void *arg)
{
    struct turn_save *t = arg;
    struct serve *sv = t->sv;
    struct engine *e = &sv->engines[t->slot.engine];
    char err[SERVE_ERR] = "";
    int rc = 0;
    if (plan_chunk_present(sv, t->hash))
        goto done; /* saved before (the same conversation again) */
    if (local_needed(sv, t->n)) {
        /* past a sliding window the engine's state holds only the window's
         * cells of those layers: computed here, the slot free meanwhile */
        pool_release(sv, &t->slot);
        t->slot.id = -1;
        rc = local_prefill(sv, t->ids, t->n, t->salted ? t->salt : NULL, t->hash, err, sizeof(err));
        goto done;
    }
    /* twice at most: once (under a sanitizer's slowness) the saved state held
     * the prompt without the answer; the second try computes it again */
    for (int attempt = 0; attempt < 2; attempt++)
        if ((rc = compute_and_save(sv, &t->slot, t->ids, t->n, 1,
                                   save_name("kvfs-serve-turn", t->hash, t->salted ? t->salt : NULL), t->hash, 300,
                                   stopping, sv, 1, err, sizeof(err))) != -EPROTO)
            break;
    if (!rc) /* the slot holds exactly these tokens now: the next turn may find them there */
        pool_slot_holds(sv, &t->slot, t->hash);
done:
    if (rc) {
        metrics_add(sv, &sv->m.turn_save_errors, 1);
        if (rc != -ECANCELED)
            kvfs_log(KVFS_LOG_WARN, "kvfs-serve: saving a conversation's turn (%zu tokens) %s %s: %s", t->n,
                     t->slot.id >= 0 ? "from a slot of" : "computed here for", e->url, err);
        if (rc == -EHOSTDOWN)
            pool_engine_down(sv, t->slot.engine, err);
    } else
        metrics_add(sv, &sv->m.turn_saves, 1);
    if (t->slot.id >= 0)
        pool_release(sv, &t->slot);
    free(t->ids);
    free(t);
    pthread_mutex_lock(&sv->lock);
    sv->n_savers--;
    pthread_cond_broadcast(&sv->cond);
    pthread_mutex_unlock(&sv->lock);
    return NULL;
}

/* Save r's turn from its slot (a thread of its own: the client has its
 * answer); 1 when the slot went with it */
static int turn_save_start(struct req *r)
{
    struct serve *sv = r->sv;
    if (!sv->save_turns || !r->chat || !r->answered || !r->plan.canon || stopping(sv))
        return 0;
    struct turn_save *t = calloc(1, sizeof(*t));
    int32_t *a = NULL;
    size_t na = 0;
    pthread_t th;
    pthread_attr_t at;
    if (!t)
        return 0;
    t->sv = sv;
    t->slot = r->slot;
    if ((r->answer.n && kvfs_tokenize(sv->tok, r->answer.p, r->answer.n, 0, 1, &a, &na)) ||
        !(t->ids = malloc(sizeof(int32_t) * (r->plan.n_canon + na + 1))))
        goto fail;
    memcpy(t->ids, r->plan.canon, sizeof(int32_t) * r->plan.n_canon);
    if (na)
        memcpy(t->ids + r->plan.n_canon, a, sizeof(int32_t) * na);
    t->n = r->plan.n_canon + na;
    if ((t->salted = r->salted))
        memcpy(t->salt, r->salt, KVFS_SALT_BYTES);
    if (plan_chunk_hash(sv, t->salted ? t->salt : NULL, t->ids, t->n, t->hash))
        goto fail;
    pthread_mutex_lock(&sv->lock);
    sv->n_savers++;
    pthread_mutex_unlock(&sv->lock);
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&th, &at, save_turn, t);
    pthread_attr_destroy(&at);
    if (rc) {
        pthread_mutex_lock(&sv->lock);
        sv->n_savers--;
        pthread_mutex_unlock(&sv->lock);
        goto fail;
    }
    free(a);
    return 1;
fail:
    metrics_add(sv, &sv->m.turn_save_errors, 1);
    free(a);
    free(t->ids);
    free(t);
    return 0;
}

void answer_drain(struct serve *sv)
{
    pthread_mutex_lock(&sv->lock);
    sv->stopping = 1;
    while (sv->n_savers > 0)
        pthread_cond_wait(&sv->cond, &sv->lock);
    pthread_mutex_unlock(&sv->lock);
}

static void req_free(struct req *r)
{
    if (!r)
        return;
    engine_stream_close(r->es);
    if (r->have_slot && !turn_save_start(r))
        pool_release(r->sv, &r->slot);
    plan_free(&r->plan);
    json_decref(r->body);
    json_decref(r->kvfs);
    free(r->out.p);
    free(r->answer.p);
    free(r);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct req *r = cls;
    for (;;) {
        if (r->out.n > r->out.pos) {
            size_t k = r->out.n - r->out.pos < max ? r->out.n - r->out.pos : max;
            memcpy(buf, r->out.p + r->out.pos, k);
            r->out.pos += k;
            return (ssize_t)k;
        }
        if (r->done_sent)
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (r->finished) {
            out_add(&r->out, "data: [DONE]\n\n", 14);
            r->done_sent = 1;
            continue;
        }
        if (client_gone(r))
            return MHD_CONTENT_READER_END_WITH_ERROR;
        json_t *ev = NULL;
        char err[SERVE_ERR];
        int rc = engine_stream_next(r->es, 0.2, &ev, err, sizeof(err));
        if (rc == -ETIMEDOUT)
            continue;
        if (rc || !ev) {
            char msg[SERVE_ERR + 160];
            if (rc == -EHOSTDOWN)
                pool_engine_down(r->sv, r->slot.engine, err);
            /* tokens were sent: the answer cannot be tried again */
            if (snprintf(msg, sizeof(msg), "the engine %s failed after the answer had started streaming, so it "
                         "cannot be tried again: %s", r->sv->engines[r->slot.engine].url,
                         rc ? err : "its stream ended early") >= (int)sizeof(msg))
                msg[sizeof(msg) - 2] = '.';
            json_t *e = json_pack("{s:{s:s,s:s}}", "error", "message", msg, "type", "server_error");
            stream_event(r, e);
            json_decref(e);
            r->finished = 1;
            continue;
        }
        if (stream_event(r, ev))
            r->finished = 1;
        json_decref(ev);
    }
}

static void stream_done(void *cls)
{
    struct req *r = cls;
    if (!r->finished)
        metrics_add(r->sv, &r->sv->m.disconnects, 1);
    req_free(r); /* closes the engine's stream (it stops generating) and frees the slot */
}

static json_t *chunks_json(const struct plan *p)
{
    json_t *cs = json_array();
    for (int i = 0; i < p->n_chunks; i++)
        json_array_append_new(cs, json_pack("{s:s,s:I,s:s}", "hash", p->chunks[i].hash, "tokens",
                                            (json_int_t)p->chunks[i].n, "source", source_name(p->chunks[i].state)));
    return cs;
}

/* When every chunk is in the mount, the blend needs no engine: made before
 * the slot, it runs while the request would wait for one (ahead_enter).  A
 * chunk missing (the engine prefills it in the slot) or a blend that fails
 * here leaves the blend to serve_once, as without it.  -ECANCELED when the
 * client went away. */
static int blend_ahead(struct req *r, double ratio)
{
    struct serve *sv = r->sv;
    char err[SERVE_ERR];
    if (r->ahead || r->plan.direct || r->plan.n_chunks == 0)
        return 0;
    for (int i = 0; i < r->plan.n_chunks; i++)
        if (!plan_chunk_present(sv, r->plan.chunks[i].hash))
            return 0;
    int rc = ahead_enter(sv, client_gone, r);
    if (rc)
        return rc;
    mark(r, "queue");
    rc = blend(r, ratio, r->ahead_name, sizeof(r->ahead_name), &r->ahead_ntok, err, sizeof(err));
    ahead_leave(sv);
    mark(r, "blend");
    if (rc) { /* a chunk evicted since it was looked up, perhaps: the slot's way */
        kvfs_log(KVFS_LOG_INFO, "kvfs-serve: %s: the blend before a slot failed (%s): blending in the slot", r->id,
                 err);
        return 0;
    }
    metrics_add(sv, &sv->m.chunk_hits, (uint64_t)r->plan.n_chunks);
    metrics_add(sv, &sv->m.blends_ahead, 1);
    json_object_set_new(r->kvfs, "chunks", chunks_json(&r->plan));
    json_object_set_new(r->kvfs, "blended_ahead", json_true());
    r->ahead = 1;
    return 0;
}

/* Does our slot still hold a state of n tokens (the conversation saved from
 * it)?  The engine's /slots says how many tokens the slot's last task left
 * there; an engine restarted since has none.  Any failure says no (the
 * history is restored, as without the slot). */
static int slot_holds(struct req *r, size_t n)
{
    json_t *out = NULL, *sl;
    long st;
    char err[SERVE_ERR];
    size_t i;
    int yes = 0;
    int rc = engine_call(&r->sv->engines[r->slot.engine], "GET", "/slots", NULL, 10, client_gone, r, &out, &st, err,
                         sizeof(err));
    if (!rc && st == 200 && json_is_array(out))
        json_array_foreach(out, i, sl) {
            if (json_integer_value(json_object_get(sl, "id")) == r->slot.id)
                yes = !json_is_true(json_object_get(sl, "is_processing")) &&
                      json_integer_value(json_object_get(sl, "n_prompt_tokens")) == (json_int_t)n;
        }
    json_decref(out);
    return yes;
}

/* One try at a request from its slot on: a slot, the chunks found or
 * prefilled, the blend restored into the slot (blended again once when a
 * chunk or the result went away in between), the answer: whole, or its
 * first token when streaming (which commits the stream).  0 with res
 * filled; -EAGAIN when the engine went down under it before the answer
 * started (the caller releases the slot and tries again); another -errno
 * with res the error. */
static int serve_once(struct req *r, double ratio, struct answer_result *res)
{
    struct serve *sv = r->sv;
    char err[SERVE_ERR] = "", msg[SERVE_ERR + 128];
    int rc;
    if ((rc = blend_ahead(r, ratio))) {
        gone(r, res);
        return rc;
    }
    if ((rc = pool_acquire_held(sv, &r->slot, r->retries > 0, r->plan.direct ? r->plan.history_hash : NULL,
                                &r->in_slot, &r->deadline, client_gone, r, err, sizeof(err)))) {
        if (rc == -ECANCELED)
            gone(r, res);
        else
            fail(r, res, 503, err);
        return rc;
    }
    r->deadline = 0; /* an engine was up: a later outage gets --engine-wait of its own */
    r->have_slot = 1;
    mark(r, "queue");
    struct engine *e = &sv->engines[r->slot.engine];
    json_object_set_new(r->kvfs, "engine", json_string(e->url));
    json_object_set_new(r->kvfs, "slot", json_integer(r->slot.id));
    if (r->retries)
        json_object_set_new(r->kvfs, "retries", json_integer(r->retries));
    if (r->plan.history)
        json_object_set_new(r->kvfs, "history", json_pack("{s:s,s:I,s:b}", "hash", r->plan.history_hash, "tokens",
                                                          (json_int_t)r->plan.n_history, "found",
                                                          r->plan.history == 1));
    if (r->in_slot && !slot_holds(r, r->plan.n_history))
        r->in_slot = 0; /* the engine restarted, or another client used the slot */
    if (r->in_slot) {
        /* the slot holds the conversation as its last turn left it: the
         * engine keeps it (cache_prompt) and computes only the new turn */
        metrics_add(sv, &sv->m.history_in_slot, 1);
        json_object_set_new(json_object_get(r->kvfs, "history"), "in_slot", json_true());
        json_object_set_new(r->kvfs, "blend", json_null());
    } else if (r->plan.direct) {
        /* the conversation's saved history, restored as it is */
        rc = restore(r, r->plan.history_hash, (uint32_t)r->plan.n_history, 0, err, sizeof(err));
        mark(r, "restore");
        if (rc && rc != -EHOSTDOWN && rc != -ECANCELED && !plan_chunk_present(sv, r->plan.history_hash)) {
            kvfs_log(KVFS_LOG_WARN, "kvfs-serve: %s: the history %.16s... left the mount before its restore (%s): "
                     "the whole prompt computed", r->id, r->plan.history_hash, err);
            if ((rc = history_lost(r))) {
                fail(r, res, 500, "out of memory");
                return rc;
            }
            json_object_set_new(json_object_get(r->kvfs, "history"), "found", json_false());
        } else if (rc) {
            if (snprintf(msg, sizeof(msg), "restoring the history %.16s... into slot %d of %s", r->plan.history_hash,
                         r->slot.id, e->url) >= (int)sizeof(msg))
                msg[sizeof(msg) - 2] = '.';
            return step_failed(r, res, rc, 502, msg, err);
        } else {
            metrics_add(sv, &sv->m.history_restores, 1);
            json_object_set_new(r->kvfs, "blend", json_null());
        }
    }
    if (r->plan.n_chunks == 0) {
        metrics_add(sv, &sv->m.full_prefills, 1);
        json_object_set_new(r->kvfs, "blend", json_null());
    }
    for (int again = 0; r->plan.n_chunks > 0 && !r->plan.direct; again++) {
        uint32_t ntok = 0;
        char name[256], why[320];
        if (r->ahead && !again) {
            snprintf(name, sizeof(name), "%s", r->ahead_name);
            ntok = r->ahead_ntok;
        } else {
            if ((rc = resolve_chunks(r, err, sizeof(err))))
                return step_failed(r, res, rc, 502, "prefilling the documents", err);
            mark(r, "chunks");
            json_object_set_new(r->kvfs, "chunks", chunks_json(&r->plan));
            if ((rc = blend(r, ratio, name, sizeof(name), &ntok, err, sizeof(err)))) {
                metrics_add(sv, &sv->m.blend_errors, 1);
                snprintf(msg, sizeof(msg), "the mount's blend: %s", err);
                fail(r, res, 500, msg);
                return rc;
            }
            mark(r, "blend");
        }
        test_hold(r, name);
        /* a sliding-window model's restored state holds the window's last
         * cells of those layers: cut back to the documents, llama-server
         * finds the window's cells missing and prefills it all again; kept
         * whole, the engine evaluates the last token on the blend's
         * question rows (which the mount computes in full) */
        rc = restore(r, name, ntok, !sv->window, err, sizeof(err));
        mark(r, "restore");
        if (rc && rc != -EHOSTDOWN && rc != -ECANCELED && !again && blend_gone(r, name, why, sizeof(why))) {
            /* evicted or removed between the blend and the restore: the
             * chunks found or prefilled again, blended again, once */
            kvfs_log(KVFS_LOG_WARN, "kvfs-serve: %s: restoring blend %s failed (%s): %s since the blend: blending "
                     "it again", r->id, name, err, why);
            metrics_add(sv, &sv->m.reblends, 1);
            r->reblended = 1;
            continue;
        }
        if (rc) {
            if (rc != -EHOSTDOWN)
                metrics_add(sv, &sv->m.blend_errors, 1);
            if (snprintf(msg, sizeof(msg), "restoring blend %s into slot %d of %s", name, r->slot.id, e->url) >=
                (int)sizeof(msg))
                msg[sizeof(msg) - 2] = '.';
            return step_failed(r, res, rc, 502, msg, err);
        }
        metrics_add(sv, &sv->m.blends, 1);
        json_object_set_new(r->kvfs, "blend", json_string(name));
        json_object_set_new(r->kvfs, "blend_tokens", json_integer(ntok));
        json_object_set_new(r->kvfs, "ratio", json_real(ratio));
        if (r->reblended)
            json_object_set_new(r->kvfs, "reblended", json_true());
        break;
    }

    /* the answer */
    json_t *body = completion_body(r);
    if (r->stream) {
        rc = engine_stream_open(e, "/completion", body, &r->es, err, sizeof(err));
        json_decref(body);
        if (rc) /* nothing reached the client: an engine gone is a request tried again */
            return step_failed(r, res, rc, 502, "the engine's answer", err);
        /* the first token before the stream is answered: until then an
         * engine that goes down is a request tried again */
        while (!r->ttft_done && !r->finished) {
            json_t *ev = NULL;
            rc = engine_stream_next(r->es, 0.2, &ev, err, sizeof(err));
            if (rc == -ETIMEDOUT) {
                if (client_gone(r))
                    return step_failed(r, res, -ECANCELED, 499, "", "");
                continue;
            }
            if (!rc && !ev)
                rc = kvfs_errf(err, sizeof(err), -EIO, "its stream ended before the first token");
            if (rc)
                return step_failed(r, res, rc, 502, "the engine's answer", err);
            rc = stream_event(r, ev);
            json_decref(ev);
            if (rc) {
                fail(r, res, 500, "out of memory");
                return rc;
            }
        }
        res->stream = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, r, stream_done);
        if (!res->stream) {
            fail(r, res, 500, "cannot create the streaming response");
            return -ENOMEM;
        }
        MHD_add_response_header(res->stream, "Content-Type", "text/event-stream");
        MHD_add_response_header(res->stream, "Cache-Control", "no-cache");
        res->status = 200;
        return 0;
    }
    json_t *out = NULL;
    long st;
    rc = engine_call_json(e, "POST", "/completion", body, 0, client_gone, r, &out, &st, err, sizeof(err));
    json_decref(body);
    if ((rc = call_rc(rc, st))) {
        json_decref(out);
        return step_failed(r, res, rc, st == 400 ? 400 : 502, "the engine's answer", err);
    }
    json_t *t = json_object_get(out, "timings");
    double pred_ms = json_number_value(json_object_get(t, "predicted_ms"));
    double per_ms = json_number_value(json_object_get(t, "predicted_per_token_ms"));
    double ttft = serve_now() - r->t_arrival - (pred_ms - per_ms) / 1000.0;
    metrics_ttft(sv, ttft > 0 ? ttft : 0);
    mark(r, "answer");
    account(r, out);
    const char *content = json_string_value(json_object_get(out, "content"));
    if (content && out_add(&r->answer, content, strlen(content)) == 0)
        r->answered = 1;
    res->status = 200;
    res->body = whole_answer(r, out);
    json_decref(out);
    return 0;
}

void answer_request(struct serve *sv, struct MHD_Connection *conn, int chat, const char *text, size_t len,
                    const char *tenant, double t_arrival, struct answer_result *res)
{
    char err[SERVE_ERR] = "", msg[SERVE_ERR + 128];
    struct req *r = calloc(1, sizeof(*r));
    int rc;
    memset(res, 0, sizeof(*res));
    metrics_add(sv, &sv->m.requests, 1);
    if (!r) {
        res->status = 500;
        res->body = answer_error_json(500, "out of memory");
        return;
    }
    r->sv = sv;
    r->chat = chat;
    r->t_arrival = r->t_mark = t_arrival;
    r->created = (long long)time(NULL);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    r->fd = ci ? ci->connect_fd : -1;
    static unsigned long long seq;
    snprintf(r->id, sizeof(r->id), "%s-kvfs%llx%llx", chat ? "chatcmpl" : "cmpl", (unsigned long long)r->created,
             __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED));
    r->kvfs = json_object();

    json_error_t je;
    r->body = json_loadb(text, len, 0, &je);
    if (!r->body) {
        if (strstr(je.text, "UTF-8") || strstr(je.text, "decode byte"))
            snprintf(msg, sizeof(msg), "the request is not valid UTF-8 (%s, at byte %d)", je.text, je.position);
        else
            snprintf(msg, sizeof(msg), "the request is not valid JSON: %s (line %d, column %d)", je.text, je.line,
                     je.column);
        fail(r, res, 400, msg);
        goto done;
    }
    if (!json_is_object(r->body)) {
        fail(r, res, 400, "the request must be a JSON object");
        goto done;
    }
    json_t *v = json_object_get(r->body, "n");
    if (v && !json_is_null(v) && (!json_is_integer(v) || json_integer_value(v) != 1)) {
        fail(r, res, 400, "'n' must be 1: one answer per request");
        goto done;
    }
    /* the cache salt: the tenant's and the request's (vLLM's cache_salt),
     * so that no other tenant or salt can find or detect these chunks */
    v = json_object_get(r->body, "cache_salt");
    if (v && !json_is_null(v) && (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > 1024)) {
        fail(r, res, 400, "'cache_salt' must be a string of 1 to 1024 bytes");
        goto done;
    }
    if (tenant || (v && !json_is_null(v))) {
        const char *cs = v && !json_is_null(v) ? json_string_value(v) : "";
        size_t tl = tenant ? strlen(tenant) : 0, cl = strlen(cs);
        char *both = malloc(tl + 1 + cl); /* tenant NUL cache_salt */
        if (both) {
            memcpy(both, tenant ? tenant : "", tl);
            both[tl] = '\0';
            memcpy(both + tl + 1, cs, cl);
        }
        if (!both || kvfs_salt_digest(both, tl + 1 + cl, r->salt)) {
            free(both);
            fail(r, res, 500, "cannot digest the cache salt");
            goto done;
        }
        free(both);
        r->salted = 1;
    }
    r->stream = json_is_true(json_object_get(r->body, "stream"));
    double ratio = sv->ratio;
    v = json_object_get(r->body, "blend_ratio");
    if (v && !json_is_null(v)) {
        if (!json_is_number(v) || json_number_value(v) <= 0 || json_number_value(v) > 1) {
            fail(r, res, 400, "'blend_ratio' must be a number in (0, 1]");
            goto done;
        }
        ratio = json_number_value(v);
    }
    /* the plan: an engine that is up renders the chat template (one is
     * waited for, --engine-wait, when none is) */
    int e0 = -1;
    for (;;) {
        if ((rc = pool_wait_up(sv, &r->deadline, client_gone, r, &e0, err, sizeof(err)))) {
            if (rc == -ECANCELED)
                gone(r, res);
            else
                fail(r, res, 503, err);
            goto done;
        }
        rc = plan_build(sv, &sv->engines[e0], r->body, chat, r->salted ? r->salt : NULL, &r->plan, err, sizeof(err));
        if (rc != -EHOSTDOWN)
            break;
        pool_engine_down(sv, e0, err);
        plan_free(&r->plan);
        if (r->retries >= sv->max_retries) {
            snprintf(msg, sizeof(msg), "the engine %s is down: %s", sv->engines[e0].url, err);
            fail(r, res, 503, msg);
            goto done;
        }
        r->retries++;
        metrics_add(sv, &sv->m.engine_retries, 1);
    }
    if (rc) {
        fail(r, res, rc == -EINVAL ? 400 : 500, err);
        goto done;
    }
    mark(r, "plan");
    int n_ctx = sv->engines[e0].n_ctx;
    if (r->plan.n_prompt >= (size_t)n_ctx) {
        snprintf(msg, sizeof(msg),
                 "the prompt is %zu tokens and the context %d: %zu tokens over (at least one must be left for the "
                 "answer)",
                 r->plan.n_prompt, n_ctx, r->plan.n_prompt + 1 - (size_t)n_ctx);
        fail(r, res, 400, msg);
        goto done;
    }
    if (r->plan.history)
        metrics_add(sv, r->plan.history == 1 ? &sv->m.history_hits : &sv->m.history_misses, 1);
    if (json_is_true(json_object_get(r->body, "return_prompt_tokens")))
        json_object_set_new(r->kvfs, "prompt_tokens", prompt_ids(&r->plan, 1));
    json_object_set_new(r->kvfs, "suffix_tokens", json_integer((json_int_t)r->plan.n_suffix));

    /* from the slot on, tried again (at most --engine-retries times) when
     * the engine goes down before the answer has started */
    for (;;) {
        rc = serve_once(r, ratio, res);
        if (rc != -EAGAIN)
            break;
        engine_stream_close(r->es);
        r->es = NULL;
        r->out.n = r->out.pos = 0;
        r->sent_role = r->finished = 0;
        pool_release(sv, &r->slot);
        r->have_slot = 0;
        if (r->retries >= sv->max_retries) {
            snprintf(msg, sizeof(msg), "the engine went down under this request %d times; the last: %s",
                     r->retries + 1, r->down_err);
            fail(r, res, 503, msg);
            break;
        }
        r->retries++;
        metrics_add(sv, &sv->m.engine_retries, 1);
        kvfs_log(KVFS_LOG_WARN, "kvfs-serve: %s: the engine went down under it (%s): tried again once one is up",
                 r->id, r->down_err);
    }
    if (res->stream)
        return; /* r lives on with the stream */
done:
    req_free(r);
}
