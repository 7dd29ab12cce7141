/* pool.c - the engines' slots and the queue for them, the queue to blend
 * before a slot, single-flight prefills, engine health, metrics. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "serve.h"

struct waiter {
    struct waiter *next, *prev;
};

struct inflight {
    struct inflight *next;
    char hash[KVFS_HASH_HEX_LEN + 1];
};

const double serve_ttft_bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
const int serve_ttft_n = (int)(sizeof(serve_ttft_bounds) / sizeof(serve_ttft_bounds[0]));

/* A FIFO of waiters (under sv->lock): the slots' queue and the queue to
 * blend ahead.  front: at the head (a request that lost its slot). */
static void queue_join(struct waiter **head, struct waiter **tail, struct waiter *w, int front)
{
    if (front) {
        w->next = *head;
        if (*head)
            (*head)->prev = w;
        else
            *tail = w;
        *head = w;
    } else {
        w->prev = *tail;
        if (*tail)
            (*tail)->next = w;
        else
            *head = w;
        *tail = w;
    }
}

static void queue_leave(struct waiter **head, struct waiter **tail, struct waiter *w)
{
    if (w->prev)
        w->prev->next = w->next;
    else
        *head = w->next;
    if (w->next)
        w->next->prev = w->prev;
    else
        *tail = w->prev;
}

static pthread_t health_thread;
static int health_started;

static void abs_in(struct timespec *ts, double s)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    long ns = ts->tv_nsec + (long)(s * 1e9);
    ts->tv_sec += ns / 1000000000L;
    ts->tv_nsec = ns % 1000000000L;
}

int pool_init(struct serve *sv)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&sv->lock, NULL);
    pthread_cond_init(&sv->cond, &ca);
    pthread_condattr_destroy(&ca);
    for (int i = 0; i < sv->n_engines; i++) {
        struct engine *e = &sv->engines[i];
        e->slot_busy = calloc((size_t)e->n_slots, 1);
        e->slot_held = calloc((size_t)e->n_slots, sizeof(*e->slot_held));
        e->slot_used = calloc((size_t)e->n_slots, sizeof(*e->slot_used));
        if (!e->slot_busy || !e->slot_held || !e->slot_used)
            return -ENOMEM;
        e->slot_cap = e->n_slots;
        e->up = 1;
    }
    return 0;
}

void pool_free(struct serve *sv)
{
    for (int i = 0; i < sv->n_engines; i++) {
        free(sv->engines[i].slot_busy);
        free(sv->engines[i].slot_held);
        free(sv->engines[i].slot_used);
    }
    while (sv->inflight) {
        struct inflight *f = sv->inflight;
        sv->inflight = f->next;
        free(f);
    }
    pthread_cond_destroy(&sv->cond);
    pthread_mutex_destroy(&sv->lock);
}

/* the up engine with a free slot and the fewest busy ones (relative to its
 * slots); -1 if none */
static int pick_engine(struct serve *sv)
{
    int best = -1;
    for (int i = 0; i < sv->n_engines; i++) {
        struct engine *e = &sv->engines[i];
        if (!e->up || e->busy >= e->n_slots)
            continue;
        if (best < 0 || (long)e->busy * sv->engines[best].n_slots < (long)sv->engines[best].busy * e->n_slots)
            best = i;
    }
    return best;
}

static int any_up(struct serve *sv)
{
    for (int i = 0; i < sv->n_engines; i++)
        if (sv->engines[i].up)
            return 1;
    return 0;
}

/* no engine is up: 0 while the request may wait for one (*deadline set at
 * the first call, --engine-wait from now), else -EHOSTDOWN with how long it
 * waited and why the engines are down.  Under sv->lock. */
static int down_wait_over(struct serve *sv, double *deadline, char *err, size_t errlen)
{
    double now = serve_now();
    if (*deadline == 0)
        *deadline = now + sv->engine_wait;
    if (now < *deadline)
        return 0;
    char waited[96] = "";
    if (sv->engine_wait > 0)
        snprintf(waited, sizeof(waited), "none came back in %g s (--engine-wait): ", sv->engine_wait);
    if (sv->n_engines == 1)
        return kvfs_errf(err, errlen, -EHOSTDOWN, "%sthe engine %s is down: %s", waited, sv->engines[0].url,
                         sv->engines[0].down_reason);
    return kvfs_errf(err, errlen, -EHOSTDOWN, "%sall %d engines are down (%s: %s)", waited, sv->n_engines,
                     sv->engines[0].url, sv->engines[0].down_reason);
}

int pool_wait_up(struct serve *sv, double *deadline, serve_cancel_fn cancel, void *arg, int *engine, char *err,
                 size_t errlen)
{
    int rc = 0, counted = 0;
    pthread_mutex_lock(&sv->lock);
    for (;;) {
        int e = -1;
        for (int i = 0; i < sv->n_engines && e < 0; i++)
            if (sv->engines[i].up)
                e = i;
        if (e >= 0) {
            *engine = e;
            break;
        }
        if (sv->stopping || (cancel && cancel(arg))) {
            rc = kvfs_errf(err, errlen, -ECANCELED, "the client went away while waiting for an engine");
            break;
        }
        if ((rc = down_wait_over(sv, deadline, err, errlen)))
            break;
        if (!counted) {
            sv->queue_len++;
            counted = 1;
        }
        struct timespec ts;
        abs_in(&ts, 0.1);
        pthread_cond_timedwait(&sv->cond, &sv->lock, &ts);
    }
    if (counted)
        sv->queue_len--;
    pthread_mutex_unlock(&sv->lock);
    return rc;
}

/* the free slot of an up engine that holds want (*engine, *slot), or 0 */
static int find_held(struct serve *sv, const char *want, int *engine, int *slot)
{
    for (int i = 0; want && i < sv->n_engines; i++) {
        struct engine *e = &sv->engines[i];
        for (int s = 0; e->up && e->busy < e->n_slots && s < e->n_slots; s++)
            if (!e->slot_busy[s] && !strcmp(e->slot_held[s], want)) {
                *engine = i;
                *slot = s;
                return 1;
            }
    }
    return 0;
}

/* engine e's free slot to give a request that finds no state of its own
 * there: one holding nothing, else the least recently used */
static int spare_slot(const struct engine *e)
{
    int best = -1;
    for (int s = 0; s < e->n_slots; s++) {
        if (e->slot_busy[s])
            continue;
        if (best < 0 || (!e->slot_held[s][0] && e->slot_held[best][0]) ||
            (!e->slot_held[s][0] == !e->slot_held[best][0] && e->slot_used[s] < e->slot_used[best]))
            best = s;
    }
    return best;
}

int pool_acquire(struct serve *sv, struct slot_ref *out, int front, double *deadline, serve_cancel_fn cancel,
                 void *arg, char *err, size_t errlen)
{
    return pool_acquire_held(sv, out, front, NULL, NULL, deadline, cancel, arg, err, errlen);
}

void pool_slot_holds(struct serve *sv, const struct slot_ref *s, const char *hash)
{
    pthread_mutex_lock(&sv->lock);
    struct engine *e = &sv->engines[s->engine];
    if (s->id < e->slot_cap)
        snprintf(e->slot_held[s->id], sizeof(e->slot_held[s->id]), "%s", hash);
    pthread_mutex_unlock(&sv->lock);
}

int pool_acquire_held(struct serve *sv, struct slot_ref *out, int front, const char *want, int *held,
                      double *deadline, serve_cancel_fn cancel, void *arg, char *err, size_t errlen)
{
    static uint64_t clock;
    struct waiter w = {0};
    int rc = 0;
    if (held)
        *held = 0;
    pthread_mutex_lock(&sv->lock);
    /* join the queue: at its end, or at its head when the request had a
     * slot already and lost it to an engine that went down */
    queue_join(&sv->queue_head, &sv->queue_tail, &w, front);
    sv->queue_len++;
    for (;;) {
        int e = -1, s = -1, mine = sv->queue_head == &w && find_held(sv, want, &e, &s);
        if (sv->queue_head == &w && (mine || (e = pick_engine(sv)) >= 0)) {
            struct engine *en = &sv->engines[e];
            if (!mine)
                s = spare_slot(en);
            en->slot_busy[s] = 1;
            en->busy++;
            en->slot_used[s] = ++clock;
            en->slot_held[s][0] = '\0';
            out->engine = e;
            out->id = s;
            if (held)
                *held = mine;
            break;
        }
        if (sv->stopping || (cancel && cancel(arg))) {
            rc = kvfs_errf(err, errlen, -ECANCELED, "the client went away while queued");
            break;
        }
        /* no engine up: wait for one to come back (the health thread
         * probes them), up to the deadline */
        if (!any_up(sv) && (rc = down_wait_over(sv, deadline, err, errlen)))
            break;
        struct timespec ts;
        abs_in(&ts, 0.1);
        pthread_cond_timedwait(&sv->cond, &sv->lock, &ts);
    }
    queue_leave(&sv->queue_head, &sv->queue_tail, &w);
    sv->queue_len--;
    pthread_cond_broadcast(&sv->cond); /* the next one may be served too */
    pthread_mutex_unlock(&sv->lock);
    return rc;
}

void pool_release(struct serve *sv, const struct slot_ref *s)
{
    pthread_mutex_lock(&sv->lock);
    struct engine *e = &sv->engines[s->engine];
    if (e->slot_busy[s->id]) {
        e->slot_busy[s->id] = 0;
        e->busy--;
    }
    pthread_cond_broadcast(&sv->cond);
    pthread_mutex_unlock(&sv->lock);
}

/* Blends made before a slot.  A blend of chunks the mount holds needs no
 * engine, so a request blends while it would otherwise wait for a slot, and
 * holds a slot only for the restore and the answer.  At most as many
 * requests blend ahead as the up engines have slots (FIFO): more would only
 * make blends that wait for slots, hold the mount's blend ioctls (and its
 * FUSE threads) and slow the blends of the requests that are next. */
static int ahead_cap(struct serve *sv)
{
    int n = 0;
    for (int i = 0; i < sv->n_engines; i++)
        if (sv->engines[i].up)
            n += sv->engines[i].n_slots;
    return n > 0 ? n : 1;
}

int ahead_enter(struct serve *sv, serve_cancel_fn cancel, void *arg)
{
    struct waiter w = {0};
    int rc = 0;
    pthread_mutex_lock(&sv->lock);
    queue_join(&sv->ahead_head, &sv->ahead_tail, &w, 0);
    sv->queue_len++; /* waiting, as for a slot: the queue depth */
    while (!(sv->ahead_head == &w && sv->ahead_running < ahead_cap(sv))) {
        if (sv->stopping || (cancel && cancel(arg))) {
            rc = -ECANCELED;
            break;
        }
        struct timespec ts;
        abs_in(&ts, 0.1); /* a client that went away is seen within 0.1 s */
        pthread_cond_timedwait(&sv->cond, &sv->lock, &ts);
    }
    queue_leave(&sv->ahead_head, &sv->ahead_tail, &w);
    sv->queue_len--;
    if (!rc)
        sv->ahead_running++;
    pthread_cond_broadcast(&sv->cond); /* the next one may go too */
    pthread_mutex_unlock(&sv->lock);
    return rc;
}

void ahead_leave(struct serve *sv)
{
    pthread_mutex_lock(&sv->lock);
    sv->ahead_running--;
    pthread_cond_broadcast(&sv->cond);
    pthread_mutex_unlock(&sv->lock);
}

void pool_engine_down(struct serve *sv, int engine, const char *why)
{
    pthread_mutex_lock(&sv->lock);
    struct engine *e = &sv->engines[engine];
    if (e->up)
        kvfs_log(KVFS_LOG_WARN, "kvfs-serve: engine %s is down: %s", e->url, why);
    e->up = 0;
    memset(e->slot_held, 0, sizeof(*e->slot_held) * (size_t)e->slot_cap); /* a restart empties its slots */
    snprintf(e->down_reason, sizeof(e->down_reason), "%s", why);
    pthread_cond_broadcast(&sv->cond);
    pthread_mutex_unlock(&sv->lock);
}

/* Room for n slots' flags (under the lock).  Flags of slots beyond a
 * smaller count stay until their requests release them. */
static int engine_resize(struct engine *e, int n)
{
    if (n <= e->slot_cap)
        return 0;
    unsigned char *b = realloc(e->slot_busy, (size_t)n);
    if (!b)
        return -ENOMEM;
    e->slot_busy = b;
    char(*h)[KVFS_HASH_HEX_LEN + 1] = realloc(e->slot_held, sizeof(*h) * (size_t)n);
    if (!h)
        return -ENOMEM;
    e->slot_held = h;
    uint64_t *u = realloc(e->slot_used, sizeof(*u) * (size_t)n);
    if (!u)
        return -ENOMEM;
    e->slot_used = u;
    memset(b + e->slot_cap, 0, (size_t)(n - e->slot_cap));
    memset(h + e->slot_cap, 0, sizeof(*h) * (size_t)(n - e->slot_cap));
    memset(u + e->slot_cap, 0, sizeof(*u) * (size_t)(n - e->slot_cap));
    e->slot_cap = n;
    return 0;
}

static void *health_main(void *arg)
{
    struct serve *sv = arg;
    for (;;) {
        pthread_mutex_lock(&sv->lock);
        int stop = sv->stopping;
        pthread_mutex_unlock(&sv->lock);
        if (stop)
            break;
        for (int i = 0; i < sv->n_engines; i++) {
            struct engine *e = &sv->engines[i];
            json_t *r = NULL;
            long st = 0;
            char err[256];
            int rc = engine_call(e, "GET", "/health", NULL, 2, NULL, NULL, &r, &st, err, sizeof(err));
            json_decref(r);
            int ok = rc == 0 && st == 200;
            pthread_mutex_lock(&sv->lock);
            int was_up = e->up;
            pthread_mutex_unlock(&sv->lock);
            struct engine now = {0};
            char why[512] = "";
            if (ok && !was_up) { /* back: perhaps restarted with other slots, context or model */
                snprintf(now.url, sizeof(now.url), "%s", e->url);
                if (engine_discover(&now, why, sizeof(why)))
                    ok = 0;
            }
            pthread_mutex_lock(&sv->lock);
            if (ok && !e->up && strcmp(now.model_path, e->model_path)) {
                char r[sizeof(e->down_reason)];
                snprintf(r, sizeof(r), "it came back with model %.200s, not %.200s: not used (restart kvfs-serve "
                         "to serve another model)", now.model_path, e->model_path);
                if (strcmp(r, e->down_reason)) {
                    snprintf(e->down_reason, sizeof(e->down_reason), "%s", r);
                    kvfs_log(KVFS_LOG_WARN, "kvfs-serve: engine %s: %s", e->url, r);
                }
            } else if (ok && !e->up && engine_resize(e, now.n_slots) == 0) {
                if (now.n_slots != e->n_slots || now.n_ctx != e->n_ctx)
                    kvfs_log(KVFS_LOG_WARN, "kvfs-serve: engine %s came back with %d slots of %d tokens (was %d of %d)",
                             e->url, now.n_slots, now.n_ctx, e->n_slots, e->n_ctx);
                e->n_slots = now.n_slots;
                e->n_ctx = now.n_ctx;
                e->up = 1;
                memo_clear(&sv->templates); /* restarted: perhaps with another --chat-template */
                kvfs_log(KVFS_LOG_WARN, "kvfs-serve: engine %s is back", e->url);
                pthread_cond_broadcast(&sv->cond);
            } else if (!ok && !e->up && why[0] && strcmp(why, e->down_reason)) {
                snprintf(e->down_reason, sizeof(e->down_reason), "%s", why);
            } else if (!ok && e->up) {
                e->up = 0;
                if (rc)
                    snprintf(e->down_reason, sizeof(e->down_reason), "%s", err);
                else
                    snprintf(e->down_reason, sizeof(e->down_reason), "/health answered HTTP %ld (loading?)", st);
                kvfs_log(KVFS_LOG_WARN, "kvfs-serve: engine %s is down: %s", e->url, e->down_reason);
                pthread_cond_broadcast(&sv->cond);
            }
            pthread_mutex_unlock(&sv->lock);
        }
        usleep(500 * 1000);
    }
    return NULL;
}

int pool_start_health(struct serve *sv)
{
    int rc = pthread_create(&health_thread, NULL, health_main, sv);
    if (rc)
        return -rc;
    health_started = 1;
    return 0;
}

void pool_stop_health(struct serve *sv)
{
    pthread_mutex_lock(&sv->lock);
    sv->stopping = 1;
    pthread_cond_broadcast(&sv->cond);
    pthread_mutex_unlock(&sv->lock);
    if (health_started)
        pthread_join(health_thread, NULL);
    health_started = 0;
}

/* ---- single flight ---- */

static struct inflight *find_inflight(struct serve *sv, const char *hash)
{
    for (struct inflight *f = sv->inflight; f; f = f->next)
        if (!strcmp(f->hash, hash))
            return f;
    return NULL;
}

int pool_prefill_claim(struct serve *sv, const char *hash, int wait, serve_cancel_fn cancel, void *arg)
{
    int waited = 0;
    pthread_mutex_lock(&sv->lock);
    while (find_inflight(sv, hash)) {
        if (!wait) {
            pthread_mutex_unlock(&sv->lock);
            return -EAGAIN;
        }
        waited = 1;
        if (cancel && cancel(arg)) {
            pthread_mutex_unlock(&sv->lock);
            return -ECANCELED;
        }
        struct timespec ts;
        abs_in(&ts, 0.1);
        pthread_cond_timedwait(&sv->cond, &sv->lock, &ts);
    }
    if (waited) {
        pthread_mutex_unlock(&sv->lock);
        return 0; /* the caller looks again: there now, or claims it */
    }
    struct inflight *f = calloc(1, sizeof(*f));
    if (!f) {
        pthread_mutex_unlock(&sv->lock);
        return -ENOMEM;
    }
    snprintf(f->hash, sizeof(f->hash), "%s", hash);
    f->next = sv->inflight;
    sv->inflight = f;
    pthread_mutex_unlock(&sv->lock);
    return 1;
}

void pool_prefill_done(struct serve *sv, const char *hash)
{
    pthread_mutex_lock(&sv->lock);
    for (struct inflight **pp = &sv->inflight; *pp; pp = &(*pp)->next)
        if (!strcmp((*pp)->hash, hash)) {
            struct inflight *f = *pp;
            *pp = f->next;
            free(f);
            break;
        }
    pthread_cond_broadcast(&sv->cond);
    pthread_mutex_unlock(&sv->lock);
}

/* ---- metrics ---- */

void metrics_add(struct serve *sv, uint64_t *counter, uint64_t n)
{
    pthread_mutex_lock(&sv->lock);
    *counter += n;
    pthread_mutex_unlock(&sv->lock);
}

void metrics_ttft(struct serve *sv, double s)
{
    pthread_mutex_lock(&sv->lock);
    sv->m.ttft_count++;
    sv->m.ttft_sum += s;
    int b = 0;
    while (b < serve_ttft_n && s > serve_ttft_bounds[b])
        b++;
    sv->m.ttft_bucket[b]++;
    pthread_mutex_unlock(&sv->lock);
}

struct text {
    char *p;
    size_t n, cap;
};

__attribute__((format(printf, 2, 3))) static void put(struct text *t, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int k = vsnprintf(t->p ? t->p + t->n : NULL, t->p ? t->cap - t->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0)
            return;
        if (t->p && t->n + (size_t)k < t->cap) {
            t->n += (size_t)k;
            return;
        }
        size_t cap = t->cap ? t->cap * 2 : 8192;
        while (cap < t->n + (size_t)k + 1)
            cap *= 2;
        char *q = realloc(t->p, cap);
        if (!q)
            return;
        t->p = q;
        t->cap = cap;
    }
}

static void counter(struct text *t, const char *name, const char *help, uint64_t v)
{
    put(t, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name, (unsigned long long)v);
}

char *metrics_render(struct serve *sv)
{
    struct text t = {0};
    pthread_mutex_lock(&sv->lock);
    struct serve_metrics m = sv->m;
    counter(&t, "kvfs_serve_requests_total", "Completion requests received.", m.requests);
    counter(&t, "kvfs_serve_client_errors_total", "Requests answered 4xx.", m.errors_4xx);
    counter(&t, "kvfs_serve_server_errors_total", "Requests answered 5xx.", m.errors_5xx);
    counter(&t, "kvfs_serve_client_disconnects_total", "Clients that went away before their answer ended.",
            m.disconnects);
    counter(&t, "kvfs_serve_chunk_hits_total", "Document chunks found in the mount.", m.chunk_hits);
    counter(&t, "kvfs_serve_chunk_misses_total", "Document chunks not in the mount when asked for.", m.chunk_misses);
    counter(&t, "kvfs_serve_chunk_prefills_total", "Chunks prefilled by an engine and saved into the mount.",
            m.chunk_prefills);
    counter(&t, "kvfs_serve_chunk_prefill_joins_total",
            "Misses served by another request's prefill, or another host's (single flight, claims).",
            m.prefill_joins);
    counter(&t, "kvfs_serve_chunk_prefill_errors_total", "Prefills that failed.", m.prefill_errors);
    counter(&t, "kvfs_serve_local_prefills_total",
            "Chunks and turns computed by kvfs-serve itself (past a sliding-window model's window).", m.local_prefills);
    counter(&t, "kvfs_serve_blends_total", "Blends made by the mount and restored into a slot.", m.blends);
    counter(&t, "kvfs_serve_blends_ahead_total",
            "Blends made before the request held a slot (every chunk was in the mount): the wait for a slot hidden.",
            m.blends_ahead);
    counter(&t, "kvfs_serve_blend_errors_total", "Blends or restores that failed.", m.blend_errors);
    counter(&t, "kvfs_serve_reblends_total",
            "Blends made again: a chunk or the result went away between the blend and the restore.", m.reblends);
    counter(&t, "kvfs_serve_engine_retries_total",
            "Requests tried again from their slot on because their engine went down before they answered.",
            m.engine_retries);
    counter(&t, "kvfs_serve_history_hits_total",
            "Chat turns whose conversation so far was found saved in the mount.", m.history_hits);
    counter(&t, "kvfs_serve_history_misses_total",
            "Chat turns after an answer whose conversation so far was not in the mount (computed again).",
            m.history_misses);
    counter(&t, "kvfs_serve_history_restores_total",
            "Saved conversations restored into a slot as they are (no documents to blend with them).",
            m.history_restores);
    counter(&t, "kvfs_serve_history_in_slot_total",
            "Saved conversations found still in the slot their last turn left them in: no restore.",
            m.history_in_slot);
    counter(&t, "kvfs_serve_history_slot_misses_total",
            "Conversations expected in their slot whose engine computed more than the new turn (it lost them).",
            m.history_slot_misses);
    counter(&t, "kvfs_serve_turn_saves_total", "Chat turns saved into the mount as the next turn's history.",
            m.turn_saves);
    counter(&t, "kvfs_serve_turn_save_errors_total", "Chat turns that could not be saved.", m.turn_save_errors);
    struct memo *memos[2] = {&sv->tokens, &sv->templates};
    static const char *memo_names[2] = {"tokens", "templates"};
    uint64_t mh[2] = {0}, mm[2] = {0};
    size_t mb[2] = {0};
    for (int i = 0; i < 2; i++) {
        int n;
        if (memos[i]->e)
            memo_stats(memos[i], &mh[i], &mm[i], &n, &mb[i]);
    }
    put(&t, "# HELP kvfs_serve_memo_hits_total Documents found tokenized (memo=tokens), chat templates found rendered "
            "(memo=templates).\n# TYPE kvfs_serve_memo_hits_total counter\n");
    for (int i = 0; i < 2; i++)
        put(&t, "kvfs_serve_memo_hits_total{memo=\"%s\"} %llu\n", memo_names[i], (unsigned long long)mh[i]);
    put(&t, "# HELP kvfs_serve_memo_misses_total Texts tokenized, templates rendered by the engine.\n"
            "# TYPE kvfs_serve_memo_misses_total counter\n");
    for (int i = 0; i < 2; i++)
        put(&t, "kvfs_serve_memo_misses_total{memo=\"%s\"} %llu\n", memo_names[i], (unsigned long long)mm[i]);
    put(&t, "# HELP kvfs_serve_memo_bytes What the memos hold.\n# TYPE kvfs_serve_memo_bytes gauge\n");
    for (int i = 0; i < 2; i++)
        put(&t, "kvfs_serve_memo_bytes{memo=\"%s\"} %zu\n", memo_names[i], mb[i]);
    counter(&t, "kvfs_serve_full_prefills_total", "Requests without documents, prefilled in full by the engine.",
            m.full_prefills);
    counter(&t, "kvfs_serve_prompt_tokens_total", "Prompt tokens of the requests answered.", m.prompt_tokens);
    counter(&t, "kvfs_serve_computed_prompt_tokens_total", "Prompt tokens the engines computed (timings.prompt_n).",
            m.computed_tokens);
    counter(&t, "kvfs_serve_completion_tokens_total", "Tokens generated.", m.completion_tokens);
    put(&t, "# HELP kvfs_serve_ttft_seconds Time from a request's arrival to its first answer token.\n"
            "# TYPE kvfs_serve_ttft_seconds histogram\n");
    uint64_t cum = 0;
    for (int b = 0; b < serve_ttft_n; b++) {
        cum += m.ttft_bucket[b];
        put(&t, "kvfs_serve_ttft_seconds_bucket{le=\"%g\"} %llu\n", serve_ttft_bounds[b], (unsigned long long)cum);
    }
    cum += m.ttft_bucket[serve_ttft_n];
    put(&t, "kvfs_serve_ttft_seconds_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)cum);
    put(&t, "kvfs_serve_ttft_seconds_sum %.6f\nkvfs_serve_ttft_seconds_count %llu\n", m.ttft_sum,
        (unsigned long long)m.ttft_count);
    put(&t, "# HELP kvfs_serve_queue_depth Requests waiting for a slot, for their turn to blend before one, or for "
            "an engine to come back.\n# TYPE kvfs_serve_queue_depth gauge\n"
            "kvfs_serve_queue_depth %d\n",
        sv->queue_len);
    put(&t, "# HELP kvfs_serve_slots_busy Slots handed to requests, per engine.\n"
            "# TYPE kvfs_serve_slots_busy gauge\n");
    for (int i = 0; i < sv->n_engines; i++)
        put(&t, "kvfs_serve_slots_busy{engine=\"%s\"} %d\n", sv->engines[i].url, sv->engines[i].busy);
    put(&t, "# HELP kvfs_serve_slots Slots per engine.\n# TYPE kvfs_serve_slots gauge\n");
    for (int i = 0; i < sv->n_engines; i++)
        put(&t, "kvfs_serve_slots{engine=\"%s\"} %d\n", sv->engines[i].url, sv->engines[i].n_slots);
    put(&t, "# HELP kvfs_serve_engine_up Whether an engine answers.\n# TYPE kvfs_serve_engine_up gauge\n");
    for (int i = 0; i < sv->n_engines; i++)
        put(&t, "kvfs_serve_engine_up{engine=\"%s\"} %d\n", sv->engines[i].url, sv->engines[i].up);
    pthread_mutex_unlock(&sv->lock);
    return t.p;
}
