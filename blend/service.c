/* service.c - the blend service (service.h). */
#include "service.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "blend.h"
#include "llama_state.h"
#include "blend_internal.h" /* blend_now_s */
#include "loader.h"
#include "model.h"
#include "tokenizer.h"

/* A backend that is not thread_safe (CUDA) runs one blend at a time per
 * context: the model then has a lane for each job slot, the model itself and
 * views of it (kvfs_model_view: own stream and cuBLAS handle, shared
 * weights), and a blend takes a free lane for its length. */
#define MAX_LANES 32
struct loaded_model {
    struct kvfs_model *m;
    struct kvfs_tokenizer *tok;
    uint8_t fp[80];
    struct kvfs_model *lane[MAX_LANES]; /* lane[0] = m; none when the backend is thread_safe */
    int n_lanes;
    uint32_t busy; /* lanes in use (svc->lock) */
};

/* A recipe being blended: later callers of the same key wait for it. */
struct inflight {
    char key[KVFS_HASH_HEX_LEN + 1];
    int done, rc, waiters;
    char err[512];
    struct kvfs_chunk_ref *ref; /* the result, shared with the waiters */
    struct inflight *next;
};

struct kvfs_blend_service {
    struct kvfs_store *store;
    struct loaded_model *models;
    int n_models;
    float min_ratio;
    uint64_t sim_read_bps;
    int direct_io;
    int jobs;
    int pinning;                /* the store's RAM tier is page-locked through a model's backend */
    uint32_t dtype;             /* results' dtype when a recipe names none */
    pthread_mutex_t lock;       /* everything below */
    pthread_cond_t changed;     /* a blend finished or a slot came free */
    struct inflight *inflight;
    int running, closing;
    uint64_t next_ticket, now_serving; /* job slots in arrival order */
    uint64_t n_run, n_cached, n_joined, n_errors, n_not_kept, n_batches, n_batch_shared, n_full_prefill;
    int max_running, max_waiting, waiting;
    /* the idle trimmer: IDLE_TRIM_S after the last blend ended */
    pthread_t trimmer;
    int trimmer_started;
    pthread_cond_t idle_cv; /* CLOCK_MONOTONIC */
    double idle_since;      /* when the last blend ended; 0: busy, or trimmed since */
    uint64_t n_trims;
    double load_s, wait_s, compute_s;
    uint64_t bytes_read;
    struct kvfs_blend_stats last;
};

/* hidden = share of the loading time that overlapped computing */
static double hidden_share(double load_s, double wait_s)
{
    return load_s > 0 ? (load_s - wait_s > 0 ? (load_s - wait_s) / load_s : 0) : 1;
}

static void stats(void *ctx, FILE *f)
{
    struct kvfs_blend_service *svc = ctx;
    pthread_mutex_lock(&svc->lock);
    const struct kvfs_blend_stats *l = &svc->last;
    fprintf(f,
            ",\n  \"blends\": {\"models\": %d, \"run\": %llu, \"served_from_cache\": %llu, \"joined\": %llu, "
            "\"errors\": %llu, \"not_kept\": %llu, \"min_ratio\": %.3f,\n    \"jobs\": %d, \"running\": %d, "
            "\"waiting\": %d, \"max_running\": %d, \"max_waiting\": %d, \"batches\": %llu, \"batch_shared_chunks\": "
            "%llu, \"full_prefills\": %llu, \"idle_trims\": %llu,\n    \"pipeline\": {\"loading_s\": %.6f, \"computing_s\": %.6f, \"waiting_s\": %.6f, "
            "\"bytes_read\": %llu, \"load_hidden\": %.4f},\n    \"last\": {\"tokens\": %d, \"recomputed\": %d, "
            "\"ratio\": %.4f, \"seconds\": %.6f, \"loading_s\": %.6f, \"computing_s\": %.6f, \"waiting_s\": %.6f, "
            "\"bytes_read\": %llu, \"load_hidden\": %.4f, \"chunks_direct\": %d}}",
            svc->n_models, (unsigned long long)svc->n_run, (unsigned long long)svc->n_cached,
            (unsigned long long)svc->n_joined, (unsigned long long)svc->n_errors,
            (unsigned long long)svc->n_not_kept, (double)svc->min_ratio, svc->jobs, svc->running, svc->waiting,
            svc->max_running, svc->max_waiting, (unsigned long long)svc->n_batches,
            (unsigned long long)svc->n_batch_shared, (unsigned long long)svc->n_full_prefill, (unsigned long long)svc->n_trims, svc->load_s, svc->compute_s, svc->wait_s,
            (unsigned long long)svc->bytes_read, hidden_share(svc->load_s, svc->wait_s), l->n_ctx, l->n_selected,
            (double)l->ratio, l->seconds, l->load_s, l->compute_s, l->wait_s, (unsigned long long)l->bytes_read,
            hidden_share(l->load_s, l->wait_s), l->n_direct);
    pthread_mutex_unlock(&svc->lock);
}

static int load_models(struct kvfs_blend_service *svc, const char *paths, const char *backend, char *err,
                       size_t errlen)
{
    char *list = strdup(paths), *save = NULL;
    int rc = 0;
    if (!list)
        return -ENOMEM;
    for (char *p = strtok_r(list, ":", &save); p && !rc; p = strtok_r(NULL, ":", &save)) {
        struct loaded_model lm = {0};
        char why[512] = "";
        if ((rc = kvfs_model_load(p, backend, 0, &lm.m, why, sizeof(why))) ||
            (rc = kvfs_tokenizer_load(lm.m->gguf, &lm.tok, why, sizeof(why)))) {
            kvfs_errf(err, errlen, rc, "cannot load model %s: %s", p, why[0] ? why : strerror(-rc));
        } else if (kvfs_model_chunk_refusal(lm.m)) {
            rc = kvfs_errf(err, errlen, -ENOTSUP, "model %s: %s", p, kvfs_model_chunk_refusal(lm.m));
        } else if ((rc = kvfs_blend_selftest(lm.m))) {
            kvfs_errf(err, errlen, rc, "model %s fails the RoPE re-rotation self-test; refusing it", p);
        } else {
            struct loaded_model *nm = realloc(svc->models, sizeof(*nm) * (size_t)(svc->n_models + 1));
            if (!nm) {
                rc = -ENOMEM;
            } else {
                kvfs_fingerprint_encode(&lm.m->fp, lm.fp);
                svc->models = nm;
                svc->models[svc->n_models++] = lm;
                kvfs_log(KVFS_LOG_INFO, "model %s loaded for blending (%s, backend %s)", p, lm.m->hp.arch,
                         lm.m->be.iface->name);
                continue;
            }
        }
        kvfs_tokenizer_free(lm.tok);
        kvfs_model_free(lm.m);
    }
    free(list);
    return rc;
}

/* Once no blend has run for IDLE_TRIM_S, the backends' scratch, the
 * loader's streaming buffers and what malloc kept go back to the system, so
 * an idle daemon's RSS is the model and the RAM tier (kvfs(8) SERVING).
 * Not at once: a client sending one request after another would fault
 * every buffer in again for each. */
#define IDLE_TRIM_S 2.0

static void trim_now(struct kvfs_blend_service *svc)
{
    for (int i = 0; i < svc->n_models; i++) {
        const struct kvfs_backend *be = &svc->models[i].m->be;
        if (be->iface && be->iface->trim)
            be->iface->trim(be->ctx);
    }
    kvfs_loader_trim();
    malloc_trim(0);
}

static void *trimmer(void *arg)
{
    struct kvfs_blend_service *svc = arg;
    pthread_mutex_lock(&svc->lock);
    while (!svc->closing) {
        int due = svc->running == 0 && svc->waiting == 0 && svc->idle_since > 0;
        double deadline = due ? svc->idle_since + IDLE_TRIM_S : blend_now_s() + 3600; /* monotonic */
        if (due && deadline <= blend_now_s()) {
            svc->idle_since = 0;
            svc->n_trims++;
            pthread_mutex_unlock(&svc->lock); /* a blend that starts meanwhile keeps what it takes */
            trim_now(svc);
            pthread_mutex_lock(&svc->lock);
            continue;
        }
        struct timespec ts = {(time_t)deadline, (long)((deadline - (double)(time_t)deadline) * 1e9)};
        pthread_cond_timedwait(&svc->idle_cv, &svc->lock, &ts);
    }
    pthread_mutex_unlock(&svc->lock);
    return NULL;
}

/* The RAM tier page-locked through a GPU backend: its chunks then reach
 * the device by DMA with no staging copy (KVFS_PIN_RAM=0: not). */
static int pin_image(void *arg, void *p, size_t n)
{
    const struct kvfs_model *m = arg;
    return m->be.iface->host_register(m->be.ctx, p, n);
}

static void unpin_image(void *arg, void *p)
{
    const struct kvfs_backend_iface *be = arg; /* the plugin's table: outlives the model */
    be->host_unregister(NULL, p);
}

int kvfs_blend_pin_store(struct kvfs_store *s, const struct kvfs_model *m)
{
    const struct kvfs_backend_iface *be = m->be.iface;
    if (!be->host_register || !be->host_unregister)
        return 0;
    kvfs_store_set_pin(s, pin_image, (void *)m, unpin_image, (void *)be);
    const char *e = getenv("KVFS_PIN_LOADER"); /* and the loader's buffers: until measured on a GPU, asked for */
    if (e && !strcmp(e, "1"))
        kvfs_blend_pin_loader(m, 1);
    return 1;
}

int kvfs_blend_pin_loader(const struct kvfs_model *m, int on)
{
    const struct kvfs_backend_iface *be = m ? m->be.iface : NULL;
    if (!on || !be || !be->host_register || !be->host_unregister) {
        kvfs_loader_set_pin(NULL, NULL, NULL, NULL);
        return 0;
    }
    kvfs_loader_set_pin(pin_image, (void *)m, unpin_image, (void *)be);
    return 1;
}

int kvfs_blend_service_open(struct kvfs_store *s, const struct kvfs_blend_service_opts *o,
                            struct kvfs_blend_service **out, char *err, size_t errlen)
{
    struct kvfs_blend_service *svc = calloc(1, sizeof(*svc));
    if (!svc)
        return -ENOMEM;
    svc->store = s;
    if (!kvfs_blend_min_ratio_ok(o->min_ratio)) {
        free(svc);
        return kvfs_errf(err, errlen, -EINVAL, "min_ratio %g is outside (0, 1]", (double)o->min_ratio);
    }
    svc->min_ratio = o->min_ratio;
    svc->dtype = o->dtype ? o->dtype : KVFS_DTYPE_F16;
    svc->sim_read_bps = o->sim_read_bps;
    svc->direct_io = o->direct_io;
    svc->jobs = o->jobs > 0 ? o->jobs : 2;
    pthread_mutex_init(&svc->lock, NULL);
    pthread_cond_init(&svc->changed, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&svc->idle_cv, &ca);
    pthread_condattr_destroy(&ca);
    int rc = 0;
    if (o->model_paths && *o->model_paths &&
        (rc = load_models(svc, o->model_paths, o->backend ? o->backend : "auto", err, errlen))) {
        kvfs_blend_service_close(svc);
        return rc;
    }
    if (svc->jobs > MAX_LANES)
        svc->jobs = MAX_LANES;
    for (int i = 0; i < svc->n_models; i++) {
        struct loaded_model *lm = &svc->models[i];
        /* KVFS_BLEND_LANES=1: lanes on a thread_safe backend too (tests) */
        const char *force = getenv("KVFS_BLEND_LANES");
        if (lm->m->be.iface->thread_safe && !(force && !strcmp(force, "1")))
            continue;
        lm->lane[lm->n_lanes++] = lm->m;
        while (lm->n_lanes < svc->jobs && kvfs_model_view(lm->m, &lm->lane[lm->n_lanes]) == 0)
            lm->n_lanes++;
        if (lm->n_lanes < svc->jobs) {
            kvfs_log(KVFS_LOG_INFO, "backend %s: %d contexts for blends at once (jobs=%d -> %d)",
                     lm->m->be.iface->name, lm->n_lanes, svc->jobs, lm->n_lanes);
            svc->jobs = lm->n_lanes;
        } else {
            kvfs_log(KVFS_LOG_INFO, "backend %s: %d contexts (streams) for blends at once", lm->m->be.iface->name,
                     lm->n_lanes);
        }
    }
    const char *pin_env = getenv("KVFS_PIN_RAM");
    for (int i = 0; i < svc->n_models && !svc->pinning && !(pin_env && !strcmp(pin_env, "0")); i++)
        svc->pinning = kvfs_blend_pin_store(s, svc->models[i].m);
    kvfs_store_add_stats(s, stats, svc);
    *out = svc;
    return 0;
}

void kvfs_blend_service_close(struct kvfs_blend_service *svc)
{
    if (!svc)
        return;
    pthread_mutex_lock(&svc->lock);
    svc->closing = 1;
    while (svc->running || svc->inflight)
        pthread_cond_wait(&svc->changed, &svc->lock);
    pthread_cond_signal(&svc->idle_cv);
    pthread_mutex_unlock(&svc->lock);
    if (svc->trimmer_started)
        pthread_join(svc->trimmer, NULL);
    if (svc->pinning) {
        kvfs_store_set_pin(svc->store, NULL, NULL, NULL, NULL);
        kvfs_loader_set_pin(NULL, NULL, NULL, NULL); /* no blend runs now: the kept buffers let go */
    }
    for (int i = 0; i < svc->n_models; i++) {
        kvfs_tokenizer_free(svc->models[i].tok);
        for (int k = svc->models[i].n_lanes - 1; k > 0; k--) /* the views before the model */
            kvfs_model_free(svc->models[i].lane[k]);
        kvfs_model_free(svc->models[i].m);
    }
    free(svc->models);
    pthread_cond_destroy(&svc->changed);
    pthread_cond_destroy(&svc->idle_cv);
    pthread_mutex_destroy(&svc->lock);
    free(svc);
}

int kvfs_blend_service_model(const struct kvfs_blend_service *svc, int i, struct kvfs_fingerprint *fp,
                             uint32_t *n_vocab)
{
    if (!svc || i < 0 || i >= svc->n_models)
        return -ENODEV;
    *fp = svc->models[i].m->fp;
    *n_vocab = (uint32_t)svc->models[i].m->hp.n_vocab;
    return 0;
}

void kvfs_model_llama_swa(const struct kvfs_model *m, struct kvfs_llama_swa *swa)
{
    memset(swa, 0, sizeof(*swa));
    for (int l = 0; l < m->hp.n_layer && l < (int)KVFS_MAX_LAYERS; l++)
        if ((swa->local[l] = m->layers[l].window > 0))
            swa->n_swa = (uint32_t)m->layers[l].window;
    if ((swa->shaped = kvfs_model_shaped(m) && m->hp.n_layer <= (int)KVFS_MAX_LAYERS))
        kvfs_model_layer_shapes(m, swa->shape);
    swa->v_narrow = m->hp.mla_mha_rank > 0;
}

int kvfs_blend_service_swa(const struct kvfs_blend_service *svc, const struct kvfs_fingerprint *fp,
                           struct kvfs_llama_swa *swa)
{
    uint8_t enc[80];
    memset(swa, 0, sizeof(*swa));
    kvfs_fingerprint_encode(fp, enc);
    for (int i = 0; svc && i < svc->n_models; i++)
        if (!memcmp(svc->models[i].fp, enc, 80)) {
            kvfs_model_llama_swa(svc->models[i].m, swa);
            return 0;
        }
    return -ENODEV;
}

void kvfs_blend_service_key(const struct kvfs_blend_service *svc, const struct kvfs_recipe *r,
                            char key[KVFS_HASH_HEX_LEN + 1])
{
    kvfs_recipe_key(r, svc->min_ratio, svc->dtype, key);
}

static const struct loaded_model *model_for(const struct kvfs_blend_service *svc, const struct kvfs_header *h)
{
    uint8_t fp[80];
    kvfs_fingerprint_encode(&h->fp, fp);
    for (int i = 0; i < svc->n_models; i++)
        if (!memcmp(svc->models[i].fp, fp, 80))
            return &svc->models[i];
    return NULL;
}

/* The one model every chunk of the loader was computed by. */
static int model_of_chunks(const struct kvfs_blend_service *svc, struct kvfs_loader *ld,
                           const struct kvfs_recipe *r, const struct loaded_model **out, char *err, size_t errlen)
{
    const struct loaded_model *lm = NULL;
    for (int i = 0; i < kvfs_loader_count(ld); i++) {
        const struct loaded_model *this = model_for(svc, kvfs_loader_header(ld, i));
        if (!this)
            return kvfs_errf(err, errlen, svc->n_models ? -EINVAL : -ENODEV,
                             "chunk %s: no loaded model has its fingerprint (%s; start kvfs with -o model=PATH)",
                             r->hashes[i], svc->n_models ? "other model" : "no model loaded");
        if (lm && lm != this)
            return kvfs_errf(err, errlen, -EINVAL, "chunks come from different models");
        lm = this;
    }
    *out = lm;
    return 0;
}

/* The query as token ids (*owned: to free, may be NULL). */
static int query_tokens(const struct loaded_model *lm, const struct kvfs_recipe *r, const int32_t **ids, size_t *n,
                        int32_t **owned, char *err, size_t errlen)
{
    *owned = NULL;
    if (r->n_suffix_ids) {
        *ids = r->suffix_ids;
        *n = (size_t)r->n_suffix_ids;
        return 0;
    }
    int rc = kvfs_tokenize(lm->tok, r->suffix, strlen(r->suffix), 0, 0, owned, n);
    if (rc || !*n) {
        free(*owned);
        *owned = NULL;
        return kvfs_errf(err, errlen, rc ? rc : -EINVAL, "cannot tokenize the query (suffix=)");
    }
    *ids = *owned;
    return 0;
}

static void blend_opts_of(const struct kvfs_blend_service *svc, const struct kvfs_recipe *r,
                          struct kvfs_blend_opts *bo)
{
    kvfs_blend_opts_init(bo, r->ratio);
    kvfs_blend_opts_floor(bo);
    bo->auto_ratio = r->auto_ratio;
    bo->select = r->select;
    bo->min_ratio = svc->min_ratio;
}

static void record(struct kvfs_blend_service *svc, const struct kvfs_blend_stats *st)
{
    pthread_mutex_lock(&svc->lock);
    svc->load_s += st->load_s;
    svc->wait_s += st->wait_s;
    svc->compute_s += st->compute_s;
    svc->bytes_read += st->bytes_read;
    svc->n_full_prefill += (uint64_t)st->full_prefill;
    svc->last = *st;
    pthread_mutex_unlock(&svc->lock);
}

/* The blended cache as a v1 file image; full: every row was recomputed
 * (the floor's full prefill), flagged FULL_PREFILL */
static int to_image(const struct kvfs_model *m, struct kvfs_kv_cache *c, const int32_t *tokens, int full,
                    uint32_t dtype, uint8_t **img, size_t *len, char *err, size_t errlen)
{
    struct kvfs_writer w;
    uint32_t flags = KVFS_FLAG_BLENDED | (full ? KVFS_FLAG_FULL_PREFILL : 0);
    const char *why = kvfs_model_dtype_refusal(m, dtype); /* layers of their own widths (gemma4) */
    if (why)
        return kvfs_errf(err, errlen, -EINVAL, "dtype %s: %s", kvfs_dtype_name(dtype), why);
    if (kvfs_dtype_quantized(dtype) && !kvfs_model_shaped(m) && c->kv_dim % 64)
        return kvfs_errf(err, errlen, -EINVAL, "dtype %s needs K/V rows of a multiple of 64 values; this model's "
                         "are %d", kvfs_dtype_name(dtype), c->kv_dim);
    int rc = kvfs_kv_cache_to_chunk_flags(m, c, 0, c->n, tokens, dtype, flags, &w);
    if (rc)
        return kvfs_errf(err, errlen, rc, "cannot write the blended cache: %s", strerror(-rc));
    *img = w.buf;
    *len = w.size;
    return 0;
}

/* The model a blend runs on: lm's own where its backend is thread_safe,
 * else a free lane (there is one for each job slot, so none waits long). */
static struct kvfs_model *lane_take(struct kvfs_blend_service *svc, const struct loaded_model *clm)
{
    struct loaded_model *lm = (struct loaded_model *)clm; /* busy is the service's, under its lock */
    if (!lm->n_lanes)
        return lm->m;
    pthread_mutex_lock(&svc->lock);
    int k;
    for (;;) {
        for (k = 0; k < lm->n_lanes && (lm->busy >> k & 1); k++)
            ;
        if (k < lm->n_lanes)
            break;
        pthread_cond_wait(&svc->changed, &svc->lock);
    }
    lm->busy |= 1u << k;
    pthread_mutex_unlock(&svc->lock);
    return lm->lane[k];
}

static void lane_give(struct kvfs_blend_service *svc, const struct loaded_model *clm, struct kvfs_model *m)
{
    struct loaded_model *lm = (struct loaded_model *)clm;
    if (!lm->n_lanes || !m)
        return;
    pthread_mutex_lock(&svc->lock);
    for (int k = 0; k < lm->n_lanes; k++)
        if (lm->lane[k] == m)
            lm->busy &= ~(1u << k);
    pthread_cond_broadcast(&svc->changed);
    pthread_mutex_unlock(&svc->lock);
}

static int run_blend(struct kvfs_blend_service *svc, const struct kvfs_recipe *r, uint8_t **img, size_t *len,
                     char *err, size_t errlen)
{
    struct kvfs_model *m = NULL;
    const char *hashes[KVFS_BLEND_MAX_CHUNKS];
    for (int i = 0; i < r->n; i++)
        hashes[i] = r->hashes[i];
    struct kvfs_loader_opts lo = {.throttle_bps = svc->sim_read_bps, /* chunks only RADOS has stream from it */
                                  .direct_io = svc->direct_io};
    struct kvfs_loader *ld = NULL;
    const struct loaded_model *lm = NULL;
    const int32_t *suffix = NULL;
    int32_t *owned = NULL, *tokens = NULL;
    size_t n_suffix = 0;
    struct kvfs_kv_cache c;
    struct kvfs_blend_stats st;
    struct kvfs_blend_opts bo;
    int rc;
    if ((rc = kvfs_loader_open(svc->store, hashes, r->n, &lo, &ld, err, errlen)) ||
        (rc = model_of_chunks(svc, ld, r, &lm, err, errlen)) ||
        (rc = query_tokens(lm, r, &suffix, &n_suffix, &owned, err, errlen)))
        goto out;
    blend_opts_of(svc, r, &bo);
    m = lane_take(svc, lm);
    if ((rc = kvfs_blend_stream(m, ld, suffix, (int)n_suffix, &bo, &c, &tokens, NULL, &st, err, errlen)))
        goto out;
    record(svc, &st);
    rc = to_image(m, &c, tokens, st.full_prefill, r->dtype ? r->dtype : svc->dtype, img, len, err, errlen);
    kvfs_kv_cache_free(m, &c);
    if (!rc)
        kvfs_log(KVFS_LOG_INFO,
                 "blended %d chunks + %zu query tokens (%d tokens, %d recomputed, ratio %.2f%s%s) in %.3f s "
                 "(loading %.3f s, waited %.3f s)",
                 r->n, n_suffix, st.n_ctx, st.n_selected, (double)st.ratio, r->auto_ratio ? " auto" : "",
                 st.full_prefill ? ", short: prefilled in full" : "",
                 st.seconds, st.load_s, st.wait_s);
out:
    if (lm)
        lane_give(svc, lm, m);
    free(tokens);
    free(owned);
    kvfs_loader_close(ld);
    return rc;
}

static struct inflight *find_inflight(struct kvfs_blend_service *svc, const char *key)
{
    for (struct inflight *f = svc->inflight; f; f = f->next)
        if (!strcmp(f->key, key))
            return f;
    return NULL;
}

static void unlink_inflight(struct kvfs_blend_service *svc, struct inflight *f)
{
    for (struct inflight **pp = &svc->inflight; *pp; pp = &(*pp)->next)
        if (*pp == f) {
            *pp = f->next;
            break;
        }
}

/* Wait for someone else's blend of the same recipe (lock held). */
static int join(struct kvfs_blend_service *svc, struct inflight *f, struct kvfs_chunk_ref **ref, char *err,
                size_t errlen)
{
    f->waiters++;
    while (!f->done)
        pthread_cond_wait(&svc->changed, &svc->lock);
    int rc = f->rc;
    if (rc)
        kvfs_errf(err, errlen, rc, "%s", f->err);
    else if (!(*ref = kvfs_chunk_ref_dup(f->ref)))
        rc = -ENOMEM;
    if (--f->waiters == 0) {
        unlink_inflight(svc, f);
        kvfs_chunk_release(f->ref);
        free(f);
        pthread_cond_broadcast(&svc->changed);
    }
    return rc;
}

/* Wait for one of the jobs slots, first come first served (lock held):
 * a condition variable wakes waiters in no particular order, and under load
 * an unlucky request could wait for many others (the TTFT tail). */
static void take_slot(struct kvfs_blend_service *svc)
{
    uint64_t ticket = svc->next_ticket++;
    svc->waiting++;
    if (svc->waiting > svc->max_waiting)
        svc->max_waiting = svc->waiting;
    while (ticket != svc->now_serving || svc->running >= svc->jobs)
        pthread_cond_wait(&svc->changed, &svc->lock);
    svc->now_serving++;
    pthread_cond_broadcast(&svc->changed); /* the next ticket may fit too */
    svc->waiting--;
    svc->running++;
    if (svc->running > svc->max_running)
        svc->max_running = svc->running;
}

static void give_slot(struct kvfs_blend_service *svc)
{
    svc->running--;
    pthread_cond_broadcast(&svc->changed);
    if (svc->running == 0 && svc->waiting == 0) {
        svc->idle_since = blend_now_s();
        /* started at the first blend, not at open: the daemon forks after
         * opening the service, and a thread made before would stay in the
         * parent, its wait on idle_cv left behind in the child for
         * pthread_cond_destroy to wait on forever at unmount */
        if (!svc->trimmer_started && !svc->closing)
            svc->trimmer_started = pthread_create(&svc->trimmer, NULL, trimmer, svc) == 0;
        pthread_cond_signal(&svc->idle_cv);
    }
}

/* A blend's outcome (its image, or rc with err) kept in the store and
 * handed to everyone waiting for f (lock not held).  Takes img. */
static void publish(struct kvfs_blend_service *svc, struct inflight *f, int rc, uint8_t *img, size_t len, char *err,
                    size_t errlen)
{
    char why[512] = "";
    int kept = 0;
    if (!rc && (rc = kvfs_store_put_result(svc->store, f->key, img, len, &f->ref, &kept, why, sizeof(why))))
        kvfs_errf(err, errlen, rc, "cannot keep the blended cache: %s", why);
    if (!rc && !kept)
        kvfs_log(KVFS_LOG_WARN, "blend result %s served but not kept: %s", f->key, why);
    pthread_mutex_lock(&svc->lock);
    f->done = 1;
    f->rc = rc;
    snprintf(f->err, sizeof(f->err), "%s", rc ? (err[0] ? err : strerror(-rc)) : "");
    if (rc)
        svc->n_errors++;
    else
        svc->n_run++;
    svc->n_not_kept += !rc && !kept;
    pthread_cond_broadcast(&svc->changed);
    pthread_mutex_unlock(&svc->lock);
}

/* Blend under a job slot and publish the result to the waiters (lock held
 * on entry and on return). */
static int produce(struct kvfs_blend_service *svc, struct inflight *f, const struct kvfs_recipe *r,
                   struct kvfs_chunk_ref **ref, char *err, size_t errlen)
{
    uint8_t *img = NULL;
    size_t len = 0;
    take_slot(svc);
    f->waiters++; /* f stays until this producer has joined it too */
    pthread_mutex_unlock(&svc->lock);
    int rc = run_blend(svc, r, &img, &len, err, errlen);
    publish(svc, f, rc, img, len, err, errlen);
    pthread_mutex_lock(&svc->lock);
    give_slot(svc);
    f->waiters--; /* join counts itself again */
    return join(svc, f, ref, err, errlen);
}

int kvfs_blend_service_get(struct kvfs_blend_service *svc, const struct kvfs_keyed_recipe *kr,
                           struct kvfs_chunk_ref **ref, char *err, size_t errlen)
{
    const char *key = kr->key;
    *ref = NULL;
    if (kvfs_store_get_result(svc->store, key, ref) == 0) {
        pthread_mutex_lock(&svc->lock);
        svc->n_cached++;
        pthread_mutex_unlock(&svc->lock);
        return 0;
    }
    pthread_mutex_lock(&svc->lock);
    struct inflight *f = find_inflight(svc, key);
    int rc;
    if (f) {
        svc->n_joined++;
        rc = join(svc, f, ref, err, errlen);
    } else if (!(f = calloc(1, sizeof(*f)))) {
        rc = -ENOMEM;
    } else {
        memcpy(f->key, key, sizeof(f->key));
        f->next = svc->inflight;
        svc->inflight = f;
        rc = produce(svc, f, &kr->r, ref, err, errlen);
    }
    pthread_mutex_unlock(&svc->lock);
    return rc;
}

/* ---- batches ---- */

struct batch_item {
    const struct kvfs_recipe *r;
    struct inflight *f;  /* the blend to join for the result */
    int owner;           /* this batch blends it */
    int done;
    char err[512];
};

struct batch_run {
    struct kvfs_blend_service *svc;
    const struct loaded_model *lm;
    struct batch_item **members;
    struct kvfs_model *m; /* the lane the batch runs on */
};

static int batch_done(void *ctx, int i, const struct kvfs_kv_cache *c, const int32_t *tokens,
                      const struct kvfs_blend_stats *st)
{
    struct batch_run *br = ctx;
    struct batch_item *it = br->members[i];
    uint8_t *img = NULL;
    size_t len = 0;
    record(br->svc, st);
    uint32_t dtype = it->r->dtype ? it->r->dtype : br->svc->dtype;
    int rc = to_image(br->m, (struct kvfs_kv_cache *)c, tokens, st->full_prefill, dtype, &img, &len, it->err,
                      sizeof(it->err));
    it->done = 1;
    publish(br->svc, it->f, rc, img, len, it->err, sizeof(it->err));
    return 0; /* one member's failure does not stop the others */
}

static int batchable(const struct kvfs_recipe *r)
{
    return r->select == KVFS_BLEND_SELECT_QUERY && !r->auto_ratio && r->ratio > 0.0f && r->ratio < 1.0f;
}

/* Owned items it[0..n) that share their first chunk and ratio: one loader
 * over the union of their chunks and kvfs_blend_batch over their common
 * leading chunks.  Returns -EAGAIN when they cannot batch (the caller blends
 * them one by one). */
static int run_group(struct kvfs_blend_service *svc, struct batch_item **it, int n, char *err, size_t errlen)
{
    const char *hashes[KVFS_BLEND_MAX_CHUNKS];
    int n_union = 0, n_shared = it[0]->r->n, rc;
    struct kvfs_blend_member *mb = calloc((size_t)n, sizeof(*mb));
    int (*maps)[KVFS_BLEND_MAX_CHUNKS] = calloc((size_t)n, sizeof(*maps));
    int32_t **owned = calloc((size_t)n, sizeof(*owned));
    struct kvfs_loader *ld = NULL;
    const struct loaded_model *lm = NULL;
    if (!mb || !maps || !owned) {
        rc = -ENOMEM;
        goto out;
    }
    for (int i = 1; i < n; i++) {
        int p = kvfs_recipe_common_prefix(it[0]->r, it[i]->r);
        n_shared = p < n_shared ? p : n_shared;
    }
    for (int i = 0; i < n; i++)
        for (int k = 0; k < it[i]->r->n; k++) {
            int u = 0;
            while (u < n_union && strcmp(hashes[u], it[i]->r->hashes[k]))
                u++;
            if (u == n_union) {
                if (n_union == KVFS_BLEND_MAX_CHUNKS) {
                    rc = -EAGAIN; /* too many distinct chunks for one loader */
                    goto out;
                }
                hashes[n_union++] = it[i]->r->hashes[k];
            }
            maps[i][k] = u;
        }
    struct kvfs_loader_opts lo = {.throttle_bps = svc->sim_read_bps, /* chunks only RADOS has stream from it */
                                  .direct_io = svc->direct_io};
    if ((rc = kvfs_loader_open(svc->store, hashes, n_union, &lo, &ld, err, errlen)))
        goto out;
    struct kvfs_recipe all = {.n = n_union};
    for (int u = 0; u < n_union; u++)
        memcpy(all.hashes[u], hashes[u], KVFS_HASH_HEX_LEN + 1);
    if ((rc = model_of_chunks(svc, ld, &all, &lm, err, errlen)))
        goto out;
    for (int i = 0; i < n; i++) {
        size_t ns = 0;
        const int32_t *ids = NULL;
        if ((rc = query_tokens(lm, it[i]->r, &ids, &ns, &owned[i], err, errlen)))
            goto out;
        mb[i] = (struct kvfs_blend_member){maps[i], it[i]->r->n, ids, (int)ns};
    }
    struct kvfs_blend_opts bo;
    blend_opts_of(svc, it[0]->r, &bo);
    /* a member short enough for a full prefill (the floor) is blended on
     * its own, as it would be outside a batch */
    for (int i = 0; i < n; i++) {
        int n_ctx = mb[i].n_suffix;
        for (int k = 0; k < mb[i].n_chunks; k++)
            n_ctx += (int)kvfs_loader_header(ld, maps[i][k])->n_tokens;
        if (n_ctx <= bo.full_below) {
            rc = -EAGAIN;
            goto out;
        }
    }
    struct batch_run br = {svc, lm, it, lane_take(svc, lm)};
    rc = kvfs_blend_batch(br.m, ld, mb, n, n_shared, &bo, batch_done, &br, err, errlen);
    lane_give(svc, lm, br.m);
    if (!rc) {
        pthread_mutex_lock(&svc->lock);
        svc->n_batches++;
        svc->n_batch_shared += (uint64_t)n_shared;
        pthread_mutex_unlock(&svc->lock);
        kvfs_log(KVFS_LOG_INFO, "blended a batch of %d recipes sharing %d leading chunks (%d distinct chunks)", n,
                 n_shared, n_union);
    }
out:
    kvfs_loader_close(ld);
    for (int i = 0; owned && i < n; i++)
        free(owned[i]);
    free(owned);
    free(maps);
    free(mb);
    return rc;
}

/* Blend the owned items: groups that share a first chunk and ratio as
 * batches, the rest (and any group that fails as a batch) one by one. */
static void run_owned(struct kvfs_blend_service *svc, struct batch_item *items, int n)
{
    struct batch_item **group = calloc((size_t)n, sizeof(*group));
    for (int i = 0; group && i < n; i++) {
        if (!items[i].owner || items[i].done)
            continue;
        int g = 0;
        for (int j = i; j < n; j++)
            if (items[j].owner && !items[j].done && batchable(items[j].r) && batchable(items[i].r) &&
                items[j].r->ratio == items[i].r->ratio && !strcmp(items[j].r->hashes[0], items[i].r->hashes[0]))
                group[g++] = &items[j];
        if (g >= 2) {
            char err[512] = "";
            int rc = run_group(svc, group, g, err, sizeof(err));
            for (int k = 0; k < g; k++) /* an error before any member finished: each gets it */
                if (rc && rc != -EAGAIN && !group[k]->done) {
                    snprintf(group[k]->err, sizeof(group[k]->err), "%s", err);
                    group[k]->done = 1;
                    publish(svc, group[k]->f, rc, NULL, 0, group[k]->err, sizeof(group[k]->err));
                }
        }
    }
    for (int i = 0; i < n; i++) { /* the rest one by one */
        if (!items[i].owner || items[i].done)
            continue;
        uint8_t *img = NULL;
        size_t len = 0;
        int rc = run_blend(svc, items[i].r, &img, &len, items[i].err, sizeof(items[i].err));
        items[i].done = 1;
        publish(svc, items[i].f, rc, img, len, items[i].err, sizeof(items[i].err));
    }
    free(group);
}

int kvfs_blend_service_get_batch(struct kvfs_blend_service *svc, const struct kvfs_keyed_recipe *const *kr, int n,
                                 struct kvfs_chunk_ref **refs, int *rcs, char (*errs)[512])
{
    struct batch_item *items = calloc((size_t)n, sizeof(*items));
    int first = 0, n_owned = 0;
    if (!items)
        return -ENOMEM;
    for (int i = 0; i < n; i++) { /* served from the tiers: no blend, no lock */
        items[i].r = &kr[i]->r;
        refs[i] = NULL;
        rcs[i] = 0;
        items[i].done = kvfs_store_get_result(svc->store, kr[i]->key, &refs[i]) == 0;
    }
    pthread_mutex_lock(&svc->lock);
    for (int i = 0; i < n; i++) {
        const char *key = kr[i]->key;
        if (items[i].done) {
            svc->n_cached++;
            continue;
        }
        if ((items[i].f = find_inflight(svc, key))) { /* another caller's, or an earlier item's */
            svc->n_joined++;
            continue;
        }
        if (!(items[i].f = calloc(1, sizeof(*items[i].f)))) {
            rcs[i] = -ENOMEM;
            items[i].done = 1;
            continue;
        }
        memcpy(items[i].f->key, key, KVFS_HASH_HEX_LEN + 1);
        items[i].f->next = svc->inflight;
        svc->inflight = items[i].f;
        items[i].owner = 1;
        n_owned++;
    }
    for (int i = 0; i < n; i++) /* hold every blend we will read until we have joined it */
        if (items[i].f)
            items[i].f->waiters++;
    if (n_owned) { /* a batch takes one job slot */
        take_slot(svc);
        pthread_mutex_unlock(&svc->lock);
        run_owned(svc, items, n);
        pthread_mutex_lock(&svc->lock);
        give_slot(svc);
    }
    for (int i = 0; i < n; i++) {
        if (!items[i].f)
            continue;
        items[i].f->waiters--; /* join counts itself again */
        char *e = errs ? errs[i] : items[i].err;
        rcs[i] = join(svc, items[i].f, &refs[i], e, 512);
    }
    pthread_mutex_unlock(&svc->lock);
    for (int i = 0; i < n; i++)
        if (rcs[i] && !first)
            first = rcs[i];
    free(items);
    return first;
}
