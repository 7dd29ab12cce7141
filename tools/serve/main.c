/* main.c - kvfs-serve: options, start-up checks, the HTTP server.
 *
 *   kvfs-serve --mount MNT --engine http://HOST:PORT [--engine ...] [--listen HOST:PORT]
 *
 * At start every engine is asked for its slots, context and model; the
 * model's tokenizer and fingerprint are loaded (the engine's model file, or
 * --model); and every engine saves a short probe state into MNT/llama/,
 * which the mount turns into a chunk of its own model: found under the name
 * computed from the engine's model, the two are the same model (and the
 * engine's --slot-save-path is the mount's llama/); otherwise kvfs-serve
 * refuses to start, naming both. */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <microhttpd.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <systemd/sd-daemon.h>

#include "forward.h" /* kvfs_model_chunk_refusal */
#include "llama_state.h"
#include "service.h" /* kvfs_model_llama_swa */
#include "log.h"
#include "model.h"
#include "serve.h"
#include "tokenizer.h"
#include "version.h"

#define PROBE_TEXT "kvfs-serve start-up probe: the engine's model must be the mount's."
#define MAX_BODY (32u << 20)

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kvfs-serve --mount MNT --engine http://HOST:PORT [--engine ...] [options]\n"
            "\n"
            "An OpenAI-compatible server (POST /v1/chat/completions, /v1/completions, GET\n"
            "/v1/models, /health, /metrics) that answers requests with a 'documents' array,\n"
            "or a prompt cut by the separator, from KV caches blended by the kvfs mount MNT\n"
            "and restored into free slots of llama-server engines started with\n"
            "--slot-save-path MNT/llama/.  See kvfs-serve(1).\n"
            "\n"
            "  --mount MNT          the kvfs mount (started with -o model=, the engines' model;\n"
            "                       -o llama_saves=async frees slots sooner after a turn)\n"
            "  --engine URL         a llama-server (repeat for several); its slots are shared\n"
            "                       by all requests, least busy engine first\n"
            "  --listen HOST:PORT   where to serve (default 127.0.0.1:8090)\n"
            "  --model PATH         the GGUF for tokenizing and naming chunks (default: the\n"
            "                       file the first engine reports in /props)\n"
            "  --name NAME          the model's name in /v1/models and answers (default: the\n"
            "                       model file's name)\n"
            "  --separator STR      cuts a prompt into chunks (default \" # # \", LMCache's)\n"
            "  --ratio R            blend ratio, 0 < R <= 1 (default 0.15; a request's\n"
            "                       blend_ratio overrides it)\n"
            "  --chunk-tokens N     split longer documents into chunks of N tokens (default 512)\n"
            "  --max-connections N  clients at once (default 512)\n"
            "  --engine-wait S      how long a request waits for an engine to come back when\n"
            "                       none is up (restarting), then 503 (default 30; 0: at once)\n"
            "  --api-keys FILE      \"KEY TENANT\" lines: a request needs a key (401 without);\n"
            "                       each tenant's chunks are its own (a cache salt)\n"
            "  --no-save-turns      do not save chat answers as their conversation's history\n"
            "                       (saved by default: the next turn computes only what is new)\n"
            "  --engine-retries N   tries again of a request whose engine went down under it\n"
            "                       before its answer started (default 3)\n"
            "  -v, --verbose        log every refused request\n"
            "  -h, --help           this text\n"
            "  -V, --version        the version\n");
}

static void log_stderr(int level, const char *msg)
{
    fprintf(stderr, "kvfs-serve: %s%s\n", level <= KVFS_LOG_ERR ? "error: " : level == KVFS_LOG_WARN ? "warning: " : "",
            msg);
}

struct conn {
    char *body;
    size_t len;
    int too_large;
    double t0;
};

static struct serve SV;

static enum MHD_Result reply(struct MHD_Connection *c, int status, char *body, const char *type)
{
    if (!body)
        body = strdup("{}");
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result reply_error(struct MHD_Connection *c, int status, const char *msg)
{
    return reply(c, status, answer_error_json(status, msg), "application/json");
}

static char *health_json(struct serve *sv, int *status)
{
    json_t *es = json_array();
    int up = 0;
    pthread_mutex_lock(&sv->lock);
    for (int i = 0; i < sv->n_engines; i++) {
        struct engine *e = &sv->engines[i];
        up += e->up;
        json_t *o = json_pack("{s:s,s:b,s:i,s:i}", "url", e->url, "up", e->up, "slots", e->n_slots, "busy", e->busy);
        if (!e->up)
            json_object_set_new(o, "reason", json_string(e->down_reason));
        json_array_append_new(es, o);
    }
    int q = sv->queue_len;
    pthread_mutex_unlock(&sv->lock);
    *status = up ? 200 : 503;
    json_t *j = json_pack("{s:s,s:o,s:i}", "status", up ? "ok" : "unavailable", "engines", es, "queued", q);
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return s;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    (void)version;
    struct serve *sv = cls;
    struct conn *cc = *con_cls;
    if (!cc) {
        if (!(cc = calloc(1, sizeof(*cc))))
            return MHD_NO;
        cc->t0 = serve_now();
        *con_cls = cc;
        return MHD_YES;
    }
    if (*upload_size) {
        if (cc->len + *upload_size > MAX_BODY)
            cc->too_large = 1;
        if (!cc->too_large) {
            char *q = realloc(cc->body, cc->len + *upload_size + 1);
            if (!q)
                return MHD_NO;
            cc->body = q;
            memcpy(cc->body + cc->len, upload, *upload_size);
            cc->len += *upload_size;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    int get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (!strcmp(url, "/health") || !strcmp(url, "/v1/health")) {
        if (!get)
            return reply_error(c, 405, "GET only");
        int st;
        char *s = health_json(sv, &st);
        return reply(c, st, s, "application/json");
    }
    if (!strcmp(url, "/metrics")) {
        if (!get)
            return reply_error(c, 405, "GET only");
        return reply(c, 200, metrics_render(sv), "text/plain; version=0.0.4");
    }
    if (!strcmp(url, "/v1/models") || !strcmp(url, "/models")) {
        if (!get)
            return reply_error(c, 405, "GET only");
        json_t *j = json_pack("{s:s,s:[{s:s,s:s,s:I,s:s}]}", "object", "list", "data", "id", sv->model_name, "object",
                              "model", "created", (json_int_t)time(NULL), "owned_by", "kvfs-serve");
        char *s = json_dumps(j, JSON_COMPACT);
        json_decref(j);
        return reply(c, 200, s, "application/json");
    }
    int chat = !strcmp(url, "/v1/chat/completions") || !strcmp(url, "/chat/completions");
    int cmpl = !strcmp(url, "/v1/completions") || !strcmp(url, "/completions");
    if (!chat && !cmpl)
        return reply_error(c, 404, "no such endpoint (POST /v1/chat/completions, /v1/completions; GET /v1/models, "
                                   "/health, /metrics)");
    if (!post)
        return reply_error(c, 405, "POST only");
    if (cc->too_large)
        return reply_error(c, 413, "the request is larger than 32 MiB");
    const char *tenant = NULL;
    if (sv->n_keys && !(tenant = tenants_find(sv, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization")))) {
        metrics_add(sv, &sv->m.errors_4xx, 1);
        return reply_error(c, 401, "an API key is needed: \"Authorization: Bearer KEY\" with a key of --api-keys");
    }
    struct answer_result res;
    answer_request(sv, c, chat, cc->body ? cc->body : "", cc->len, tenant, cc->t0, &res);
    if (res.stream) {
        enum MHD_Result ok = MHD_queue_response(c, (unsigned)res.status, res.stream);
        MHD_destroy_response(res.stream);
        return ok;
    }
    if (res.status == 499) /* the client went away */
        return MHD_NO;
    return reply(c, res.status, res.body, "application/json");
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode t)
{
    (void)cls, (void)c, (void)t;
    struct conn *cc = *con_cls;
    if (cc) {
        free(cc->body);
        free(cc);
        *con_cls = NULL;
    }
}

static int parse_listen(const char *s, struct sockaddr_storage *ss, socklen_t *len, char *err, size_t errlen)
{
    char host[256], *port;
    snprintf(host, sizeof(host), "%s", s);
    if (host[0] == '[') { /* [v6]:port */
        char *e = strchr(host, ']');
        if (!e || e[1] != ':')
            return kvfs_errf(err, errlen, -EINVAL, "--listen %s: HOST:PORT", s);
        *e = '\0';
        port = e + 2;
        memmove(host, host + 1, strlen(host));
    } else {
        port = strrchr(host, ':');
        if (!port)
            return kvfs_errf(err, errlen, -EINVAL, "--listen %s: HOST:PORT", s);
        *port++ = '\0';
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai;
    int g = getaddrinfo(host[0] ? host : NULL, port, &hints, &ai);
    if (g)
        return kvfs_errf(err, errlen, -EINVAL, "--listen %s: %s", s, gai_strerror(g));
    memcpy(ss, ai->ai_addr, ai->ai_addrlen);
    *len = ai->ai_addrlen;
    freeaddrinfo(ai);
    return 0;
}

/* the chunk the mount made of the probe state, to name its model */
static void mount_model_of(struct serve *sv, const int32_t *ids, size_t n, time_t since, char *out, size_t outlen)
{
    char dir[1200];
    snprintf(out, outlen, "nothing: no chunk of the probe's tokens appeared (the mount refused the state: its log says why)");
    snprintf(dir, sizeof(dir), "%s/chunks", sv->mount);
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        char path[1500], hash[KVFS_HASH_HEX_LEN + 1];
        struct stat st;
        if (strlen(de->d_name) != KVFS_HASH_HEX_LEN + 3)
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        if (stat(path, &st) || st.st_mtime + 2 < since)
            continue;
        snprintf(hash, sizeof(hash), "%.64s", de->d_name);
        int32_t *t = NULL;
        size_t k = 0;
        char e[128];
        if (plan_chunk_tokens(sv, hash, NULL, &t, &k, e, sizeof(e)) == 0 && k == n && !memcmp(t, ids, n * sizeof(*t))) {
            char model[64] = "?", arch[32] = "?";
            ssize_t a = getxattr(path, "user.kvfs.model", model, sizeof(model) - 1);
            model[a > 0 ? a : 1] = '\0';
            ssize_t b = getxattr(path, "user.kvfs.arch", arch, sizeof(arch) - 1);
            arch[b > 0 ? b : 1] = '\0';
            snprintf(out, outlen, "a chunk of model %s (%s; chunk %.16s...)", model, arch, hash);
            free(t);
            break;
        }
        free(t);
    }
    closedir(d);
}

/* engine e saves a probe state into MNT/llama/; the chunk must be named as
 * the engine's model names it */
static int probe_engine(struct serve *sv, struct engine *e, char *err, size_t errlen)
{
    int32_t *ids = NULL;
    size_t n = 0;
    json_t *out = NULL, *b = NULL;
    long st;
    char why[SERVE_ERR];
    int rc = kvfs_tokenize(sv->tok, PROBE_TEXT, strlen(PROBE_TEXT), 0, 0, &ids, &n);
    if (rc)
        return kvfs_errf(err, errlen, rc, "cannot tokenize the probe");
    if (sv->window && n > sv->window)
        n = sv->window; /* a longer state of a sliding-window model is not one the mount can take */
    time_t t0 = time(NULL);
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_integer(ids[i]));
    b = json_pack("{s:o,s:i,s:i,s:b}", "prompt", a, "n_predict", 0, "id_slot", 0, "cache_prompt", 0);
    rc = engine_call_json(e, "POST", "/completion", b, 120, NULL, NULL, &out, &st, why, sizeof(why));
    json_decref(b);
    json_decref(out);
    out = NULL;
    if (rc || st != 200) {
        rc = kvfs_errf(err, errlen, rc ? rc : -EIO, "engine %s: the probe prefill failed: %s", e->url, why);
        goto out;
    }
    b = json_pack("{s:s}", "filename", "kvfs-serve-probe.bin");
    rc = engine_call_json(e, "POST", "/slots/0?action=save", b, 120, NULL, NULL, &out, &st, why, sizeof(why));
    json_decref(b);
    if (rc || st != 200) {
        rc = kvfs_errf(err, errlen, rc ? rc : -EIO,
                       "engine %s cannot save its slot into %s/llama/ (%s): start it with --slot-save-path %s/llama/ "
                       "and the mount with the engine's model (-o model=%s)",
                       e->url, sv->mount, why, sv->mount, e->model_path);
        goto out;
    }
    json_decref(out);
    out = NULL;
    static const uint32_t dtypes[] = {KVFS_DTYPE_F16, KVFS_DTYPE_Q8, KVFS_DTYPE_Q4S, KVFS_DTYPE_Q4, KVFS_DTYPE_F32,
                                      KVFS_DTYPE_BF16};
    /* with the model's own flags (LAYER_SHAPES, V_FROM_K) as the mount
     * writes them into the chunk of a saved state */
    uint32_t own = kvfs_model_chunk_flags(sv->model) & ~KVFS_FLAG_KEYS_ROPED;
    const uint32_t flags[] = {KVFS_FLAG_KEYS_ROPED | own, own};
    for (size_t f = 0; f < 2; f++)
        for (size_t d = 0; d < sizeof(dtypes) / sizeof(dtypes[0]); d++) {
            char hex[KVFS_HASH_HEX_LEN + 1], path[1200];
            struct stat s;
            if (kvfs_model_dtype_refusal(sv->model, dtypes[d]))
                continue;
            sv->chunk_dtype = dtypes[d];
            sv->chunk_flags = flags[f];
            if ((rc = plan_chunk_hash(sv, NULL, ids, n, hex)))
                goto out;
            snprintf(path, sizeof(path), "%s/chunks/%s.kv", sv->mount, hex);
            if (stat(path, &s) == 0) {
                /* and the engine restores the mount's view of it (as many
                 * KV streams as its cache: one for -np 1 or a unified
                 * cache, N for -np N with the mount's llama_streams=N) */
                b = json_pack("{s:s+}", "filename", hex, ".llama");
                rc = engine_call_json(e, "POST", "/slots/0?action=restore", b, 120, NULL, NULL, &out, &st, why,
                                      sizeof(why));
                json_decref(b);
                if (rc || st != 200)
                    rc = kvfs_errf(err, errlen, rc ? rc : -EIO,
                                   "engine %s cannot restore %s/llama/%.16s....llama (%s): with several slots (-np N) "
                                   "start llama-server with a unified KV cache (--kv-unified, and "
                                   "--kv-unified-per-slot N for each slot's context), or mount kvfs with "
                                   "-o llama_streams=N (a KV stream per slot)",
                                   e->url, sv->mount, hex, why);
                goto out;
            }
        }
    char fid[17], theirs[256];
    kvfs_fingerprint_id(&sv->fp, fid);
    mount_model_of(sv, ids, n, t0, theirs, sizeof(theirs));
    rc = kvfs_errf(err, errlen, -EPROTO,
                   "engine %s serves %s (kvfs model %s) but the mount %s stored its state as %s: the "
                   "engine's model is not the mount's (or its --slot-save-path is not %s/llama/)",
                   e->url, e->model_path, fid, sv->mount, theirs, sv->mount);
out:
    free(ids);
    json_decref(out);
    return rc;
}

/* the command line into sv and the rest: -1 to go on, else the exit status */
struct serve_args {
    const char *listen, *model, *name;
    int max_conn;
    const char *api_keys;
};

static int parse_args(int argc, char **argv, struct serve *sv, struct serve_args *a)
{
    static const struct option opts[] = {
        {"mount", required_argument, 0, 'm'},         {"engine", required_argument, 0, 'e'},
        {"listen", required_argument, 0, 'l'},        {"model", required_argument, 0, 'M'},
        {"name", required_argument, 0, 'n'},          {"separator", required_argument, 0, 's'},
        {"ratio", required_argument, 0, 'r'},         {"chunk-tokens", required_argument, 0, 'c'},
        {"max-connections", required_argument, 0, 'C'}, {"engine-wait", required_argument, 0, 'w'},
        {"verbose", no_argument, 0, 'v'},            {"no-save-turns", no_argument, 0, 'T'},
        {"api-keys", required_argument, 0, 'K'},
        {"engine-retries", required_argument, 0, 'R'},
        {"help", no_argument, 0, 'h'},                {"version", no_argument, 0, 'V'},
        {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "vhV", opts, NULL)) != -1) {
        char *end;
        switch (o) {
        case 'm':
            snprintf(sv->mount, sizeof(sv->mount), "%s", optarg);
            break;
        case 'e':
            if (sv->n_engines == SERVE_MAX_ENGINES) {
                fprintf(stderr, "kvfs-serve: at most %d engines\n", SERVE_MAX_ENGINES);
                return 2;
            }
            if (strncmp(optarg, "http://", 7)) {
                fprintf(stderr, "kvfs-serve: --engine %s: http://HOST:PORT\n", optarg);
                return 2;
            }
            snprintf(sv->engines[sv->n_engines].url, sizeof(sv->engines[0].url), "%s", optarg);
            size_t ul = strlen(sv->engines[sv->n_engines].url);
            while (ul > 7 && sv->engines[sv->n_engines].url[ul - 1] == '/')
                sv->engines[sv->n_engines].url[--ul] = '\0';
            sv->n_engines++;
            break;
        case 'l':
            a->listen = optarg;
            break;
        case 'T':
            sv->save_turns = 0;
            break;
        case 'K':
            a->api_keys = optarg;
            break;
        case 'R': {
            long n = strtol(optarg, &end, 10);
            if (*end || end == optarg || n < 0 || n > 100) {
                fprintf(stderr, "kvfs-serve: --engine-retries %s: 0 to 100\n", optarg);
                return 2;
            }
            sv->max_retries = (int)n;
            break;
        }
        case 'M':
            a->model = optarg;
            break;
        case 'n':
            a->name = optarg;
            break;
        case 's':
            if (!*optarg || strlen(optarg) >= sizeof(sv->separator)) {
                fprintf(stderr, "kvfs-serve: --separator: 1 to %zu bytes\n", sizeof(sv->separator) - 1);
                return 2;
            }
            snprintf(sv->separator, sizeof(sv->separator), "%s", optarg);
            break;
        case 'r':
            sv->ratio = strtod(optarg, &end);
            if (*end || !(sv->ratio > 0 && sv->ratio <= 1)) {
                fprintf(stderr, "kvfs-serve: --ratio %s: a number in (0, 1]\n", optarg);
                return 2;
            }
            break;
        case 'c':
            sv->chunk_tokens = (int)strtol(optarg, &end, 10);
            if (*end || sv->chunk_tokens < 16) {
                fprintf(stderr, "kvfs-serve: --chunk-tokens %s: a number >= 16\n", optarg);
                return 2;
            }
            break;
        case 'C':
            a->max_conn = (int)strtol(optarg, &end, 10);
            if (*end || a->max_conn < 1) {
                fprintf(stderr, "kvfs-serve: --max-connections %s: a positive number\n", optarg);
                return 2;
            }
            break;
        case 'w':
            sv->engine_wait = strtod(optarg, &end);
            if (*end || !(sv->engine_wait >= 0 && sv->engine_wait <= 86400)) {
                fprintf(stderr, "kvfs-serve: --engine-wait %s: seconds, 0 to 86400\n", optarg);
                return 2;
            }
            break;
        case 'v':
            sv->verbose = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case 'V':
            printf("kvfs-serve %s\n", KVFS_VERSION_STRING);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc || !sv->mount[0] || sv->n_engines == 0) {
        fprintf(stderr, "kvfs-serve: %s\n", optind < argc ? "unexpected arguments" : "--mount and --engine are needed");
        usage(stderr);
        return 2;
    }
    return -1;
}

/* the model kvfs-serve tokenizes and names chunks with: the engine's file
 * unless --model names another copy (0, or the exit status) */
static int load_model(struct serve *sv, const char *model, const char *name)
{
    char err[2048];
    int rc;
    if (!model)
        model = sv->engines[0].model_path;
    if ((rc = kvfs_model_load(model, "cpu", 1, &sv->model, err, sizeof(err)))) {
        fprintf(stderr, "kvfs-serve: cannot load the model %s: %s%s\n", model, err,
                model == sv->engines[0].model_path ? " (the engine's model file; --model names another copy)" : "");
        return 1;
    }
    if ((rc = kvfs_tokenizer_load(sv->model->gguf, &sv->tok, err, sizeof(err)))) {
        fprintf(stderr, "kvfs-serve: %s: %s\n", model, err);
        return 1;
    }
    if (kvfs_model_chunk_refusal(sv->model)) {
        fprintf(stderr, "kvfs-serve: %s: %s\n", model, kvfs_model_chunk_refusal(sv->model));
        return 1;
    }
    {
        /* a sliding-window model's engine saves only the window's cells of
         * those layers: a longer state is computed here (local.c) */
        struct kvfs_llama_swa swa;
        kvfs_model_llama_swa(sv->model, &swa);
        for (int l = 0; swa.n_swa && l < sv->model->hp.n_layer; l++)
            if (swa.local[l])
                sv->window = swa.n_swa;
    }
    sv->fp = sv->model->fp;
    {
        int32_t *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        kvfs_tokenize(sv->tok, "a", 1, 1, 0, &a, &na);
        kvfs_tokenize(sv->tok, "a", 1, 0, 0, &b, &nb);
        sv->add_bos = na > nb;
        sv->bos = kvfs_token_bos(sv->tok);
        free(a);
        free(b);
    }
    const char *base = strrchr(model, '/');
    snprintf(sv->model_name, sizeof(sv->model_name), "%.255s", name ? name : base ? base + 1 : model);
    return 0;
}

int main(int argc, char **argv)
{
    struct serve *sv = &SV;
    struct serve_args args = {"127.0.0.1:8090", NULL, NULL, 512, NULL};
    const char *listen;
    int max_conn, rc = 1, pool_ok = 0;
    char err[2048];
    struct MHD_Daemon *d = NULL;
    sigset_t sigs;
    snprintf(sv->separator, sizeof(sv->separator), " # # ");
    sv->ratio = 0.15;
    sv->chunk_tokens = 512;
    sv->engine_wait = 30;
    sv->max_retries = 3;
    sv->save_turns = 1;
    /* tests only (kvfs-serve(1) ENVIRONMENT): a file whose existence holds
     * restores */
    sv->test_hold = getenv("KVFS_SERVE_TEST_HOLD");
    if (sv->test_hold && !*sv->test_hold)
        sv->test_hold = NULL;
    kvfs_set_log(log_stderr);
    if ((rc = parse_args(argc, argv, sv, &args)) >= 0)
        return rc;
    listen = args.listen;
    max_conn = args.max_conn;
    rc = 1;
    struct stat st;
    char p[1200];
    snprintf(p, sizeof(p), "%.1000s/.kvfs/control", sv->mount);
    if (stat(p, &st)) {
        fprintf(stderr, "kvfs-serve: %s is not a kvfs mount (no .kvfs/control)\n", sv->mount);
        return 1;
    }
    if (args.api_keys && tenants_load(sv, args.api_keys, err, sizeof(err))) {
        fprintf(stderr, "kvfs-serve: %s\n", err);
        tenants_free(sv);
        return 2;
    }
    struct sockaddr_storage ss;
    socklen_t sl;
    if (parse_listen(listen, &ss, &sl, err, sizeof(err))) {
        fprintf(stderr, "kvfs-serve: %s\n", err);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    /* the engines */
    for (int i = 0; i < sv->n_engines; i++)
        if (engine_discover(&sv->engines[i], err, sizeof(err))) {
            fprintf(stderr, "kvfs-serve: engine %s: %s\n", sv->engines[i].url, err);
            goto out;
        }
    if (load_model(sv, args.model, args.name)) {
        rc = 1;
        goto out;
    }
    rc = 1;
    if (memo_init(&sv->tokens, 8192, 128u << 20) || memo_init(&sv->templates, 256, 4u << 20)) {
        fprintf(stderr, "kvfs-serve: out of memory\n");
        goto out;
    }
    pool_ok = 1;
    if (pool_init(sv)) {
        fprintf(stderr, "kvfs-serve: out of memory\n");
        goto out;
    }
    for (int i = 0; i < sv->n_engines; i++)
        if (probe_engine(sv, &sv->engines[i], err, sizeof(err))) {
            fprintf(stderr, "kvfs-serve: refusing to start: %s\n", err);
            goto out;
        }
    if (pool_start_health(sv)) {
        fprintf(stderr, "kvfs-serve: cannot start the health thread\n");
        goto out;
    }
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL); /* before MHD's threads: they inherit it */
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
    if (ss.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, sv, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                         MHD_OPTION_CONNECTION_LIMIT, (unsigned)max_conn, MHD_OPTION_CONNECTION_TIMEOUT, 3600u,
                         MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "kvfs-serve: cannot listen on %s: %s\n", listen, strerror(errno));
        goto out;
    }
    int total = 0;
    for (int i = 0; i < sv->n_engines; i++)
        total += sv->engines[i].n_slots;
    fprintf(stderr, "kvfs-serve: serving %s on http://%s: mount %s, %d engine(s), %d slot(s), chunks %s\n",
            sv->model_name, listen, sv->mount, sv->n_engines, total, kvfs_dtype_name(sv->chunk_dtype));
    if (sv->window)
        fprintf(stderr, "kvfs-serve: sliding window of %u tokens: the engine's states of more tokens are not whole, "
                "longer chunks and turns are computed here (start the engine with --swa-full, else it computes the "
                "whole prompt after a blend's restore)\n", sv->window);
    if (sv->test_hold)
        fprintf(stderr, "kvfs-serve: warning: KVFS_SERVE_TEST_HOLD=%s: a test hook (restores wait while it exists)\n",
                sv->test_hold);
    /* listening, engines probed: kvfs-serve.service (Type=notify) is up */
    sd_notifyf(0, "READY=1\nSTATUS=serving %s on http://%s", sv->model_name, listen);
    int sig;
    sigwait(&sigs, &sig);
    fprintf(stderr, "kvfs-serve: %s: stopping\n", strsignal(sig));
    sd_notify(0, "STOPPING=1");
    rc = 0;
out:
    if (pool_ok)
        pool_stop_health(sv);
    if (d)
        MHD_stop_daemon(d);
    if (pool_ok) {
        answer_drain(sv);
        pool_free(sv);
    }
    kvfs_tokenizer_free(sv->tok);
    kvfs_model_free(sv->model);
    tenants_free(sv);
    memo_free(&sv->tokens);
    memo_free(&sv->templates);
    curl_global_cleanup();
    return rc;
}
