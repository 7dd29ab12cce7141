/* serve.h - kvfs-serve, an OpenAI-compatible front that answers RAG requests
 * through a kvfs mount and llama-server (kvfs-serve(1)).
 *
 *   engine.c   the client side: llama-server over libcurl (JSON calls and
 *              the token stream), engine discovery and health
 *   pool.c     slots of every engine, the FIFO queue for them (least busy
 *              engine first), blends before a slot, single-flight
 *              prefills, metrics
 *   plan.c     an OpenAI request turned into chunks and a suffix: the chat
 *              template as the engine applies it, documents, the separator
 *   answer.c   the pipeline (chunks found or prefilled, blend, restore,
 *              completion) and the OpenAI responses, streamed or not
 *   local.c    chunks computed here with the model (CPU): the states a
 *              sliding-window model's engine cannot hand the mount
 *   tenants.c  --api-keys: keys and their tenants (each its own cache salt)
 *   memo.c     bounded caches: documents' tokens, chat template renderings
 *   main.c     options, the start-up checks, the HTTP server (libmicrohttpd)
 *
 * Every function returns 0 or a negative errno and says why in err. */
#ifndef KVFS_SERVE_H
#define KVFS_SERVE_H

#include <jansson.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "kvformat.h"

struct kvfs_tokenizer;
struct kvfs_model;

#define SERVE_MAX_ENGINES 16
#define SERVE_ERR 512

/* One llama-server */
struct engine {
    char url[256];        /* http://host:port, no trailing slash */
    char model_path[1024];/* its /props model_path */
    int n_slots;          /* /props total_slots */
    int n_ctx;            /* per slot (default_generation_settings.n_ctx) */
    int busy;             /* slots handed out */
    int up;               /* answered its last call */
    char down_reason[512];
    unsigned char *slot_busy; /* [slot_cap]: n_slots now, more when it came back with fewer */
    int slot_cap;
    /* [slot_cap]: the conversation state each slot holds as its last turn
     * saved it (the chunk hash of exactly those tokens; "" none or
     * unknown), and when it was last handed out: a returning conversation
     * gets its slot back and skips the restore (pool_acquire) */
    char (*slot_held)[KVFS_HASH_HEX_LEN + 1];
    uint64_t *slot_used;
};

/* A slot handed to one request */
struct slot_ref {
    int engine;
    int id;
};

struct serve_metrics {
    uint64_t requests, errors_4xx, errors_5xx, disconnects;
    uint64_t chunk_hits, chunk_misses, chunk_prefills, prefill_joins, prefill_errors;
    uint64_t blends, blends_ahead, blend_errors, full_prefills, restores;
    uint64_t reblends, engine_retries, local_prefills;
    uint64_t history_hits, history_misses, history_restores, turn_saves, turn_save_errors;
    uint64_t history_in_slot, history_slot_misses;
    uint64_t prompt_tokens, computed_tokens, completion_tokens;
    uint64_t ttft_count;
    double ttft_sum;
    uint64_t ttft_bucket[16];  /* cumulative at render time; counts per bucket here */
};

/* A bounded cache, least recently used out (memo.c) */
struct memo_entry;
struct memo {
    struct memo_entry *e;
    int n, cap;
    size_t bytes, max_bytes;
    uint64_t clock, hits, misses;
    pthread_mutex_t lock;
};

struct serve {
    /* options */
    char mount[1024];
    char separator[64];
    char model_name[256]; /* what /v1/models says */
    double ratio;
    int chunk_tokens;
    int verbose;
    int save_turns;       /* chat answers saved as the next turn's history (--no-save-turns: 0) */
    double engine_wait;   /* --engine-wait: how long a request waits for an engine to come back */
    int max_retries;      /* --engine-retries: tries again of a request whose engine went down under it */
    const char *test_hold;/* KVFS_SERVE_TEST_HOLD (tests only): while this file exists, restores wait */
    /* the model: tokenizer and fingerprint (for chunk names) */
    struct kvfs_model *model;
    struct kvfs_tokenizer *tok;
    struct kvfs_fingerprint fp;
    uint32_t chunk_dtype; /* of the chunks the mount makes of the engine's states */
    uint32_t chunk_flags;
    uint32_t window;      /* a sliding-window model's window: the engine's saved states of more tokens are not
                           * whole (llama.cpp keeps only the window's cells of those layers); 0: none */
    int add_bos;
    int32_t bos;
    /* engines and slots */
    struct engine engines[SERVE_MAX_ENGINES];
    int n_engines;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct waiter *queue_head, *queue_tail;
    int queue_len;
    /* blends before a slot (pool.c: ahead_enter) */
    struct waiter *ahead_head, *ahead_tail;
    int ahead_running;
    /* single-flight prefills */
    struct inflight *inflight;
    /* metrics (under lock) */
    struct serve_metrics m;
    int stopping;
    int n_savers;         /* turns being saved (threads holding a slot) */
    struct memo tokens;    /* a text's tokens (documents come back) */
    struct memo templates; /* the engine's renderings of a conversation's template */
    /* --api-keys */
    struct tenant_key *keys;
    int n_keys;
};

extern const double serve_ttft_bounds[]; /* histogram bounds, seconds */
extern const int serve_ttft_n;

/* ---- engine.c ---- */
/* Calls are cancelled when cancel(arg) returns nonzero (a client gone). */
typedef int (*serve_cancel_fn)(void *arg);
/* method "GET" or "POST"; body NULL or JSON text; *out the parsed JSON reply
 * (NULL when the body is not JSON), *status the HTTP status.  -EHOSTDOWN when
 * the engine cannot be reached or the connection broke before the reply's
 * end (the engine went away), -ETIMEDOUT, -ECANCELED, -EIO. */
int engine_call(const struct engine *e, const char *method, const char *path, const char *body, double timeout_s,
                serve_cancel_fn cancel, void *cancel_arg, json_t **out, long *status, char *err, size_t errlen);
/* The same with body a JSON value (not consumed) */
int engine_call_json(const struct engine *e, const char *method, const char *path, json_t *body, double timeout_s,
                     serve_cancel_fn cancel, void *cancel_arg, json_t **out, long *status, char *err, size_t errlen);
/* /props: slots, context, model path */
int engine_discover(struct engine *e, char *err, size_t errlen);

/* A streamed completion: the engine's server-sent events, one JSON object
 * each, read as they come. */
struct engine_stream;
int engine_stream_open(const struct engine *e, const char *path, json_t *body, struct engine_stream **out,
                       char *err, size_t errlen);
/* Next event (*ev, to json_decref) or *ev NULL at the end.  Waits at most
 * timeout_s for it (-ETIMEDOUT; call again) */
int engine_stream_next(struct engine_stream *s, double timeout_s, json_t **ev, char *err, size_t errlen);
void engine_stream_close(struct engine_stream *s);

/* ---- memo.c ---- */
int memo_init(struct memo *m, int cap, size_t max_bytes);
void memo_free(struct memo *m);
void memo_clear(struct memo *m);
/* the key of (a, b): SHA-256; -EIO when it cannot be made (then no memo) */
int memo_key(unsigned char key[32], const void *a, size_t alen, const void *b, size_t blen);
/* a malloc'ed copy of the value: 0, -ENOENT, -ENOMEM */
int memo_get(struct memo *m, const unsigned char key[32], void **val, size_t *len);
void memo_put(struct memo *m, const unsigned char key[32], const void *val, size_t len);
void memo_stats(struct memo *m, uint64_t *hits, uint64_t *misses, int *entries, size_t *bytes);

/* ---- local.c ---- */
/* 1 when the engine cannot save a state of n tokens whole (past the window) */
int local_needed(const struct serve *sv, size_t n);
/* Compute ids[0..n) with kvfs-serve's model (one at a time) and store them
 * through MNT/incoming/ as chunk hash (salt: the tenant's digest or NULL):
 * 0 once the mount holds it, -EPROTO when the chunk is not named hash */
int local_prefill(struct serve *sv, const int32_t *ids, size_t n, const uint8_t *salt, const char *hash, char *err,
                  size_t errlen);

/* ---- tenants.c ---- */
int tenants_load(struct serve *sv, const char *path, char *err, size_t errlen);
/* the tenant of an "Authorization: Bearer KEY" header, or NULL */
const char *tenants_find(const struct serve *sv, const char *authorization);
void tenants_free(struct serve *sv);

/* ---- pool.c ---- */
int pool_init(struct serve *sv);
void pool_free(struct serve *sv);
/* Wait for a free slot (FIFO, least busy engine first; front: at the head of
 * the queue, for a request that lost its slot to an engine that went down).
 * While no engine is up the request waits for one to come back until
 * *deadline (serve_now() time; 0: set to now + engine_wait when it first
 * finds none up; the caller sets it back to 0 once it holds a slot, so
 * that each outage is waited engine_wait): -EHOSTDOWN
 * after that (err says how long and why they are down).  -ECANCELED when
 * cancel() said so (the request leaves the queue). */
int pool_acquire(struct serve *sv, struct slot_ref *out, int front, double *deadline, serve_cancel_fn cancel,
                 void *arg, char *err, size_t errlen);
/* The same, preferring the free slot that holds state want (a
 * conversation's history hash; NULL: none): *held 1 when the slot given
 * holds it.  Otherwise the free slot holding nothing, or used least
 * recently, so that conversations stay longer in slots.  The slot given
 * forgets what it held (its new user changes it). */
int pool_acquire_held(struct serve *sv, struct slot_ref *out, int front, const char *want, int *held,
                      double *deadline, serve_cancel_fn cancel, void *arg, char *err, size_t errlen);
/* The slot now holds exactly the tokens of chunk hash (a turn saved from it) */
void pool_slot_holds(struct serve *sv, const struct slot_ref *s, const char *hash);
/* Wait until an engine is up (*engine: the first), with the same deadline;
 * counted in the queue depth while it waits.  -EHOSTDOWN, -ECANCELED. */
int pool_wait_up(struct serve *sv, double *deadline, serve_cancel_fn cancel, void *arg, int *engine, char *err,
                 size_t errlen);
void pool_release(struct serve *sv, const struct slot_ref *s);
void pool_engine_down(struct serve *sv, int engine, const char *why);
/* Health: probes engines that are down (a thread of its own) */
int pool_start_health(struct serve *sv);
void pool_stop_health(struct serve *sv);

/* Single flight: 1 = the caller prefills hash (then pool_prefill_done),
 * 0 = another request was prefilling it and has finished (look again),
 * -EAGAIN = another request is prefilling it and wait is 0, <0 error */
int pool_prefill_claim(struct serve *sv, const char *hash, int wait, serve_cancel_fn cancel, void *arg);
void pool_prefill_done(struct serve *sv, const char *hash);

void metrics_add(struct serve *sv, uint64_t *counter, uint64_t n);
void metrics_ttft(struct serve *sv, double seconds);
/* Prometheus text format; malloc'ed */
char *metrics_render(struct serve *sv);

/* Wait for a turn to blend before holding a slot (FIFO; at most the up
 * engines' slots at once): 0, then ahead_leave; -ECANCELED when cancel()
 * said so or kvfs-serve is stopping. */
int ahead_enter(struct serve *sv, serve_cancel_fn cancel, void *arg);
void ahead_leave(struct serve *sv);

/* ---- plan.c ---- */
struct chunk_plan {
    int32_t *ids;  /* tokens (NULL until known for a hash given by the client) */
    size_t n;
    char hash[KVFS_HASH_HEX_LEN + 1];
    int given_hash;   /* the client named it by hash */
    int state;        /* 0 hit, 1 miss prefilled here, 2 miss prefilled by another request */
};

struct plan {
    int chat;
    struct chunk_plan *chunks;
    int n_chunks;
    int32_t *suffix; /* the question and the template's tail */
    size_t n_suffix;
    size_t n_prompt; /* chunks + suffix */
    /* chat: the prompt's tokens as the conversation's next turn makes them
     * (the history it looks for is these and the answer) */
    int32_t *canon;
    size_t n_canon;
    /* the conversation's history (its last answer and all before it): 0
     * none (a first turn), 1 found in the mount (the first chunk), -1 not
     * found */
    int history;
    size_t n_history;
    char history_hash[KVFS_HASH_HEX_LEN + 1];
    int direct; /* the history is the only chunk: restored as it is, not blended */
    const uint8_t *salt; /* the tenant's cache salt (KVFS_SALT_BYTES, the request's), or NULL */
};

/* Build the plan of request req.  -EINVAL (400) with the reason in err;
 * -EHOSTDOWN when the engine (chat template) cannot be reached. */
int plan_build(struct serve *sv, const struct engine *e, json_t *req, int chat, const uint8_t *salt, struct plan *p,
               char *err, size_t errlen);
void plan_free(struct plan *p);
/* the content hash of a chunk of the mount's model with these tokens (and
 * this salt digest, or NULL) */
int plan_chunk_hash(const struct serve *sv, const uint8_t *salt, const int32_t *ids, size_t n,
                    char hex[KVFS_HASH_HEX_LEN + 1]);
/* 1 when MNT/chunks/HASH.kv exists */
int plan_chunk_present(const struct serve *sv, const char *hash);
/* tokens of MNT/chunks/HASH.kv from its header: -ENOENT when absent or
 * not of this salt (NULL: an unsalted chunk) */
int plan_chunk_tokens(const struct serve *sv, const char *hash, const uint8_t *salt, int32_t **ids, size_t *n,
                      char *err, size_t errlen);

/* ---- answer.c ---- */
struct MHD_Connection;
struct answer_result {
    int status;                    /* HTTP status */
    char *body;                    /* malloc'ed; NULL when streaming */
    struct MHD_Response *stream;   /* a streaming response */
};
/* Serve a completion request (chat or not) from body[0..len) for tenant
 * (--api-keys; NULL without) */
void answer_request(struct serve *sv, struct MHD_Connection *conn, int chat, const char *body, size_t len,
                    const char *tenant, double t_arrival, struct answer_result *res);
/* {"error": {...}} text, malloc'ed */
char *answer_error_json(int status, const char *msg);
/* at the end: no more turns saved; waits for those being saved */
void answer_drain(struct serve *sv);
double serve_now(void);

#endif
