/* blends.c - the blends/ directory: recipes in, blended chunk files out.
 *
 *   blends/NAME.recipe  written by the user (see kvfs(8), "BLENDING")
 *   blends/NAME.kv      the composed cache (format v1, flag BLENDED); the
 *                       blend runs on the first open and is cached by the
 *                       recipe's content
 *   blends/NAME.err     the last error for NAME (empty when none)
 *
 * Blending itself lives in blend/; this file parses recipes, finds the
 * chunks in the store and the model by fingerprint, and keeps results. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "blend.h"
#include "loader.h"
#include "kvfs_fs.h"
#include "tokenizer.h"

struct loaded_model {
    struct kvfs_model *m;
    struct kvfs_tokenizer *tok;
    uint8_t fp[80];
};

struct blend_result {
    uint8_t key[32];   /* SHA-256 of the recipe text */
    uint8_t *image;    /* v1 file image; lives until unmount */
    size_t size;
    struct blend_result *next;
};

struct blend_entry {
    char name[200];
    uint64_t id;
    char *recipe;      /* text */
    char err[512];
    const struct blend_result *result;
    struct blend_entry *next;
};

struct blends {
    pthread_mutex_t lock;     /* entries and results */
    pthread_mutex_t run_lock; /* one blend at a time */
    struct loaded_model *models;
    int n_models;
    struct blend_entry *entries;
    struct blend_result *results;
    uint64_t next_id;
    uint64_t blends_run, blends_cached, blend_errors;
    float min_ratio;          /* -o min_ratio= (ratio=auto floor) */
    uint64_t sim_read_bps;    /* -o sim_read_bw= (testing: a slow tier) */
    struct kvfs_remote *remote; /* chunks only RADOS has stream from it */
    /* the layer pipeline, summed over blends, and the last blend */
    double load_s, wait_s, compute_s;
    uint64_t bytes_read;
    struct kvfs_blend_stats last;
};

static struct blends B = {.lock = PTHREAD_MUTEX_INITIALIZER, .run_lock = PTHREAD_MUTEX_INITIALIZER, .next_id = 1,
                          .min_ratio = 0.15f};

/* hidden = share of the loading time that overlapped computing */
static double hidden_share(double load_s, double wait_s)
{
    return load_s > 0 ? (load_s - wait_s > 0 ? (load_s - wait_s) / load_s : 0) : 1;
}

static void record_pipeline(const struct kvfs_blend_stats *st)
{
    pthread_mutex_lock(&B.lock);
    B.load_s += st->load_s;
    B.wait_s += st->wait_s;
    B.compute_s += st->compute_s;
    B.bytes_read += st->bytes_read;
    B.last = *st;
    pthread_mutex_unlock(&B.lock);
}

static void stats(void *ctx, FILE *f)
{
    (void)ctx;
    pthread_mutex_lock(&B.lock);
    fprintf(f,
            ",\n  \"blends\": {\"models\": %d, \"run\": %llu, \"served_from_cache\": %llu, \"errors\": %llu, "
            "\"min_ratio\": %.3f,\n    \"pipeline\": {\"loading_s\": %.6f, \"computing_s\": %.6f, \"waiting_s\": %.6f, "
            "\"bytes_read\": %llu, \"load_hidden\": %.4f},\n    \"last\": {\"tokens\": %d, \"recomputed\": %d, "
            "\"ratio\": %.4f, \"seconds\": %.6f, \"loading_s\": %.6f, \"computing_s\": %.6f, \"waiting_s\": %.6f, "
            "\"bytes_read\": %llu, \"load_hidden\": %.4f}}",
            B.n_models, (unsigned long long)B.blends_run, (unsigned long long)B.blends_cached,
            (unsigned long long)B.blend_errors, (double)B.min_ratio, B.load_s, B.compute_s, B.wait_s,
            (unsigned long long)B.bytes_read, hidden_share(B.load_s, B.wait_s), B.last.n_ctx, B.last.n_selected,
            (double)B.last.ratio, B.last.seconds, B.last.load_s, B.last.compute_s, B.last.wait_s,
            (unsigned long long)B.last.bytes_read, hidden_share(B.last.load_s, B.last.wait_s));
    pthread_mutex_unlock(&B.lock);
}

void blends_set_remote(struct kvfs_remote *r)
{
    pthread_mutex_lock(&B.run_lock); /* not while a blend runs */
    B.remote = r;
    pthread_mutex_unlock(&B.run_lock);
}

int blends_init(struct kvfs_mount *mnt, const char *model_paths, const char *backend, float min_ratio,
                uint64_t sim_read_bps)
{
    B.min_ratio = min_ratio;
    B.sim_read_bps = sim_read_bps;
    kvfs_store_add_stats(mnt->store, stats, NULL);
    if (!model_paths || !*model_paths)
        return 0;
    char *list = strdup(model_paths), *save = NULL;
    if (!list)
        return -ENOMEM;
    int rc = 0;
    for (char *p = strtok_r(list, ":", &save); p && !rc; p = strtok_r(NULL, ":", &save)) {
        struct loaded_model lm = {0};
        char err[512] = "";
        if ((rc = kvfs_model_load(p, backend ? backend : "auto", 0, &lm.m, err, sizeof(err))) ||
            (rc = kvfs_tokenizer_load(lm.m->gguf, &lm.tok, err, sizeof(err)))) {
            fprintf(stderr, "kvfs: cannot load model %s: %s\n", p, err[0] ? err : strerror(-rc));
            kvfs_model_free(lm.m);
            break;
        }
        if ((rc = kvfs_blend_selftest(lm.m))) {
            fprintf(stderr, "kvfs: model %s fails the RoPE re-rotation self-test; refusing it\n", p);
            kvfs_tokenizer_free(lm.tok);
            kvfs_model_free(lm.m);
            break;
        }
        kvfs_fingerprint_encode(&lm.m->fp, lm.fp);
        struct loaded_model *nm = realloc(B.models, sizeof(*nm) * (size_t)(B.n_models + 1));
        if (!nm) {
            rc = -ENOMEM;
            break;
        }
        B.models = nm;
        B.models[B.n_models++] = lm;
        kvfs_log(KVFS_LOG_INFO, "model %s loaded for blending (%s, backend %s)", p, lm.m->hp.arch,
                 lm.m->be.iface->name);
    }
    free(list);
    return rc;
}

void blends_free(void)
{
    for (int i = 0; i < B.n_models; i++) {
        kvfs_tokenizer_free(B.models[i].tok);
        kvfs_model_free(B.models[i].m);
    }
    free(B.models);
    while (B.entries) {
        struct blend_entry *e = B.entries;
        B.entries = e->next;
        free(e->recipe);
        free(e);
    }
    while (B.results) {
        struct blend_result *r = B.results;
        B.results = r->next;
        free(r->image);
        free(r);
    }
}

/* names: NAME.recipe, NAME.kv, NAME.err -> kind 0, 1, 2 */
static int split_name(const char *name, char *base, size_t cap)
{
    static const char *ext[] = {".recipe", ".kv", ".err"};
    size_t n = strlen(name);
    for (int k = 0; k < 3; k++) {
        size_t el = strlen(ext[k]);
        if (n > el && n - el < cap && !strcmp(name + n - el, ext[k])) {
            memcpy(base, name, n - el);
            base[n - el] = '\0';
            for (size_t i = 0; i < n - el; i++)
                if (base[i] == '/' || (unsigned char)base[i] < 32)
                    return -EINVAL;
            return k;
        }
    }
    return -EINVAL;
}

static struct blend_entry *find(const char *base)
{
    for (struct blend_entry *e = B.entries; e; e = e->next)
        if (!strcmp(e->name, base))
            return e;
    return NULL;
}

static struct blend_entry *find_id(uint64_t id)
{
    for (struct blend_entry *e = B.entries; e; e = e->next)
        if (e->id == id)
            return e;
    return NULL;
}

static void fill_attr(const struct blend_entry *e, int kind, struct stat *st)
{
    memset(st, 0, sizeof(*st));
    st->st_ino = INO_BLEND_BASE + e->id * 4 + (uint64_t)kind;
    st->st_mode = S_IFREG | (kind == 0 ? 0644 : 0444);
    st->st_nlink = 1;
    st->st_uid = getuid();
    st->st_gid = getgid();
    st->st_size = kind == 0 ? (off_t)strlen(e->recipe) : kind == 2 ? (off_t)strlen(e->err)
                : e->result ? (off_t)e->result->size : 0;
    clock_gettime(CLOCK_REALTIME, &st->st_mtim);
    st->st_atim = st->st_ctim = st->st_mtim;
}

int blends_lookup(const char *name, struct stat *st)
{
    char base[200];
    int kind = split_name(name, base, sizeof(base));
    if (kind < 0)
        return -ENOENT;
    pthread_mutex_lock(&B.lock);
    struct blend_entry *e = find(base);
    if (e)
        fill_attr(e, kind, st);
    pthread_mutex_unlock(&B.lock);
    return e ? 0 : -ENOENT;
}

int blends_getattr(fuse_ino_t ino, struct stat *st)
{
    pthread_mutex_lock(&B.lock);
    struct blend_entry *e = find_id((ino - INO_BLEND_BASE) / 4);
    if (e)
        fill_attr(e, (int)((ino - INO_BLEND_BASE) % 4), st);
    pthread_mutex_unlock(&B.lock);
    return e ? 0 : -ENOENT;
}

size_t blends_list(char (*names)[256], fuse_ino_t *inos, size_t max)
{
    static const char *ext[] = {".recipe", ".kv", ".err"};
    size_t n = 0;
    pthread_mutex_lock(&B.lock);
    for (struct blend_entry *e = B.entries; e; e = e->next)
        for (int k = 0; k < 3 && n < max; k++) {
            snprintf(names[n], 256, "%s%s", e->name, ext[k]);
            inos[n++] = INO_BLEND_BASE + e->id * 4 + (uint64_t)k;
        }
    pthread_mutex_unlock(&B.lock);
    return n;
}

int blends_check_new_name(const char *name)
{
    char base[200];
    return split_name(name, base, sizeof(base)) == 0 ? 0 : -EPERM;
}

/* ---- recipes ---- */

struct recipe {
    char hashes[64][KVFS_HASH_HEX_LEN + 1];
    int n;
    float ratio;
    int auto_ratio;    /* ratio=auto: the loading controller decides */
    int select;        /* KVFS_BLEND_SELECT_* */
    char *suffix;      /* unescaped text, or NULL */
    int32_t *suffix_ids;
    int n_suffix_ids;
};

static void recipe_free(struct recipe *r)
{
    free(r->suffix);
    free(r->suffix_ids);
}

static int parse_recipe(const char *text, struct recipe *r, char *err, size_t errlen)
{
    memset(r, 0, sizeof(*r));
    r->ratio = 0.15f;
    r->select = KVFS_BLEND_SELECT_DEFAULT;
    char *copy = strdup(text), *save = NULL;
    int rc = 0, lineno = 0;
    if (!copy)
        return -ENOMEM;
    for (char *line = strtok_r(copy, "\n", &save); line && !rc; line = strtok_r(NULL, "\n", &save)) {
        lineno++;
        while (isspace((unsigned char)*line))
            line++;
        size_t l = strlen(line);
        while (l && isspace((unsigned char)line[l - 1]) && strncmp(line, "suffix=", 7))
            line[--l] = '\0';
        if (!*line || *line == '#')
            continue;
        if (!strncmp(line, "select=", 7)) {
            if ((r->select = kvfs_blend_select_parse(line + 7)) < 0) {
                snprintf(err, errlen, "line %d: select must be query, fixed or gradual", lineno);
                rc = -EINVAL;
            }
        } else if (!strcmp(line, "ratio=auto")) {
            r->auto_ratio = 1;
        } else if (!strncmp(line, "ratio=", 6)) {
            char *end;
            r->auto_ratio = 0;
            r->ratio = strtof(line + 6, &end);
            if (end == line + 6 || *end || !(r->ratio >= 0 && r->ratio <= 1)) {
                snprintf(err, errlen, "line %d: ratio must be a number in [0, 1] or auto", lineno);
                rc = -EINVAL;
            }
        } else if (!strncmp(line, "suffix=", 7)) {
            const char *s = line + 7;
            char *o = malloc(strlen(s) + 1), *q = o;
            if (!o) {
                rc = -ENOMEM;
                break;
            }
            for (; *s; s++) { /* C escapes: \n \t \\ */
                if (*s == '\\' && s[1]) {
                    s++;
                    *q++ = *s == 'n' ? '\n' : *s == 't' ? '\t' : *s;
                } else {
                    *q++ = *s;
                }
            }
            *q = '\0';
            free(r->suffix);
            r->suffix = o;
        } else if (!strncmp(line, "suffix_tokens=", 14)) {
            char *s2 = line + 14, *sv = NULL;
            for (char *t = strtok_r(s2, ", ", &sv); t; t = strtok_r(NULL, ", ", &sv)) {
                int32_t *ni = realloc(r->suffix_ids, sizeof(int32_t) * (size_t)(r->n_suffix_ids + 1));
                if (!ni) {
                    rc = -ENOMEM;
                    break;
                }
                r->suffix_ids = ni;
                r->suffix_ids[r->n_suffix_ids++] = (int32_t)strtol(t, NULL, 10);
            }
        } else {
            const char *h = !strncmp(line, "chunk ", 6) ? line + 6 : line;
            char hex[KVFS_HASH_HEX_LEN + 1];
            uint8_t d[32];
            size_t hl = strlen(h);
            if (hl == KVFS_HASH_HEX_LEN + 3 && !strcmp(h + KVFS_HASH_HEX_LEN, ".kv"))
                hl = KVFS_HASH_HEX_LEN;
            if (hl != KVFS_HASH_HEX_LEN) {
                snprintf(err, errlen, "line %d: expected a chunk hash, ratio=, select=, suffix= or suffix_tokens=", lineno);
                rc = -EINVAL;
                break;
            }
            memcpy(hex, h, KVFS_HASH_HEX_LEN);
            hex[KVFS_HASH_HEX_LEN] = '\0';
            if (kvfs_hex_to_hash(hex, d) != 0) {
                snprintf(err, errlen, "line %d: '%s' is not a lowercase hex chunk hash", lineno, hex);
                rc = -EINVAL;
            } else if (r->n == 64) {
                snprintf(err, errlen, "too many chunks (64 at most)");
                rc = -E2BIG;
            } else {
                memcpy(r->hashes[r->n++], hex, sizeof(hex));
            }
        }
    }
    free(copy);
    if (!rc && r->n == 0) {
        snprintf(err, errlen, "a recipe names at least one chunk hash");
        rc = -EINVAL;
    }
    if (!rc && !r->suffix && !r->n_suffix_ids) {
        snprintf(err, errlen, "a recipe needs the query: suffix=TEXT or suffix_tokens=ID,...");
        rc = -EINVAL;
    }
    if (rc)
        recipe_free(r);
    return rc;
}

int blends_set_recipe(const char *name, const void *buf, size_t len, char *err, size_t errlen)
{
    char base[200];
    if (split_name(name, base, sizeof(base)) != 0)
        return -EPERM;
    char *text = malloc(len + 1);
    if (!text)
        return -ENOMEM;
    memcpy(text, buf, len);
    text[len] = '\0';
    struct recipe r;
    int rc = memchr(buf, '\0', len) ? (snprintf(err, errlen, "recipe contains NUL bytes"), -EINVAL)
                                     : parse_recipe(text, &r, err, errlen);
    pthread_mutex_lock(&B.lock);
    struct blend_entry *e = find(base);
    if (!e && (e = calloc(1, sizeof(*e)))) {
        snprintf(e->name, sizeof(e->name), "%s", base);
        e->id = B.next_id++;
        e->next = B.entries;
        B.entries = e;
    }
    if (e) {
        if (rc == 0) {
            free(e->recipe);
            e->recipe = text;
            text = NULL;
            e->result = NULL;
            e->err[0] = '\0';
        } else {
            snprintf(e->err, sizeof(e->err), "%.500s\n", err);
            if (!e->recipe)
                e->recipe = strdup("");
        }
    }
    pthread_mutex_unlock(&B.lock);
    if (rc == 0)
        recipe_free(&r);
    free(text);
    return e ? rc : -ENOMEM;
}

/* ---- running a blend ---- */

static const struct loaded_model *model_for(const struct kvfs_header *h)
{
    uint8_t fp[80];
    kvfs_fingerprint_encode(&h->fp, fp);
    for (int i = 0; i < B.n_models; i++)
        if (!memcmp(B.models[i].fp, fp, 80))
            return &B.models[i];
    return NULL;
}

static int run_blend(struct kvfs_mount *mnt, const char *recipe_text, uint8_t **image, size_t *size, char *err,
                     size_t errlen)
{
    struct recipe r;
    int rc = parse_recipe(recipe_text, &r, err, errlen);
    if (rc)
        return rc;
    const char *hashes[64];
    for (int i = 0; i < r.n; i++)
        hashes[i] = r.hashes[i];
    struct kvfs_loader *ld = NULL;
    struct kvfs_loader_opts lo = {.throttle_bps = B.sim_read_bps, .remote = B.remote};
    const struct loaded_model *lm = NULL;
    if ((rc = kvfs_loader_open(mnt->store, hashes, r.n, &lo, &ld, err, errlen)))
        goto out;
    for (int i = 0; i < r.n; i++) {
        const struct loaded_model *this = model_for(kvfs_loader_header(ld, i));
        if (!this) {
            snprintf(err, errlen, "chunk %s: no loaded model has its fingerprint (%s; start kvfs with -o model=PATH)",
                     r.hashes[i], B.n_models ? "other model" : "no model loaded");
            rc = B.n_models ? -EINVAL : -ENODEV;
            goto out;
        }
        if (lm && lm != this) {
            snprintf(err, errlen, "chunks come from different models");
            rc = -EINVAL;
            goto out;
        }
        lm = this;
    }
    int32_t *suffix = r.suffix_ids;
    size_t n_suffix = (size_t)r.n_suffix_ids;
    int32_t *tok_ids = NULL;
    if (!suffix) {
        if ((rc = kvfs_tokenize(lm->tok, r.suffix, strlen(r.suffix), 0, 0, &tok_ids, &n_suffix)) || !n_suffix) {
            snprintf(err, errlen, "cannot tokenize the suffix");
            rc = rc ? rc : -EINVAL;
            goto out;
        }
        suffix = tok_ids;
    }
    struct kvfs_kv_cache c;
    int32_t *tokens;
    struct kvfs_blend_stats st;
    struct kvfs_blend_opts bo;
    kvfs_blend_opts_init(&bo, r.ratio);
    bo.auto_ratio = r.auto_ratio;
    bo.select = r.select;
    bo.min_ratio = B.min_ratio;
    rc = kvfs_blend_stream(lm->m, ld, suffix, (int)n_suffix, &bo, &c, &tokens, NULL, &st, err, errlen);
    free(tok_ids);
    if (rc)
        goto out;
    record_pipeline(&st);
    struct kvfs_writer w;
    rc = kvfs_kv_cache_to_chunk_flags(lm->m, &c, 0, c.n, tokens, KVFS_DTYPE_F16, KVFS_FLAG_BLENDED, &w);
    kvfs_kv_cache_free(lm->m, &c);
    free(tokens);
    if (rc) {
        snprintf(err, errlen, "cannot write the blended cache: %s", strerror(-rc));
        goto out;
    }
    *image = w.buf;
    *size = w.size;
    kvfs_log(KVFS_LOG_INFO,
             "blended %d chunks + %zu query tokens (%d tokens, %d recomputed, ratio %.2f%s) in %.3f s "
             "(loading %.3f s, waited %.3f s)",
             r.n, n_suffix, st.n_ctx, st.n_selected, (double)st.ratio, r.auto_ratio ? " auto" : "", st.seconds,
             st.load_s, st.wait_s);
out:
    kvfs_loader_close(ld);
    recipe_free(&r);
    return rc;
}

int blends_open_kv(struct kvfs_mount *mnt, fuse_ino_t ino, const uint8_t **image, size_t *size)
{
    uint64_t id = (ino - INO_BLEND_BASE) / 4;
    uint8_t key[32];
    char *recipe = NULL, err[512] = "";
    int rc = 0;
    pthread_mutex_lock(&B.lock);
    struct blend_entry *e = find_id(id);
    if (!e || !e->recipe || !*e->recipe)
        rc = e ? -EINVAL : -ENOENT;
    else
        recipe = strdup(e->recipe);
    pthread_mutex_unlock(&B.lock);
    if (rc || !recipe)
        return rc ? rc : -ENOMEM;
    unsigned kl = 0;
    EVP_Digest(recipe, strlen(recipe), key, &kl, EVP_sha256(), NULL);
    pthread_mutex_lock(&B.run_lock); /* one blend at a time; others wait for its result */
    const struct blend_result *res = NULL;
    pthread_mutex_lock(&B.lock);
    for (struct blend_result *r = B.results; r; r = r->next)
        if (!memcmp(r->key, key, 32))
            res = r;
    pthread_mutex_unlock(&B.lock);
    if (res) {
        B.blends_cached++;
    } else {
        uint8_t *img = NULL;
        size_t len = 0;
        rc = run_blend(mnt, recipe, &img, &len, err, sizeof(err));
        if (!rc) {
            struct blend_result *nr = calloc(1, sizeof(*nr));
            if (!nr) {
                free(img);
                rc = -ENOMEM;
            } else {
                memcpy(nr->key, key, 32);
                nr->image = img;
                nr->size = len;
                pthread_mutex_lock(&B.lock);
                nr->next = B.results;
                B.results = nr;
                pthread_mutex_unlock(&B.lock);
                res = nr;
                B.blends_run++;
            }
        } else {
            B.blend_errors++;
        }
    }
    pthread_mutex_unlock(&B.run_lock);
    pthread_mutex_lock(&B.lock);
    if ((e = find_id(id))) {
        if (rc) {
            snprintf(e->err, sizeof(e->err), "%.500s\n", err[0] ? err : strerror(-rc));
        } else {
            e->err[0] = '\0';
            e->result = res;
        }
    }
    pthread_mutex_unlock(&B.lock);
    if (rc)
        kvfs_log(KVFS_LOG_ERR, "blend %s failed: %s", e ? e->name : "?", err[0] ? err : strerror(-rc));
    free(recipe);
    if (!rc) {
        *image = res->image;
        *size = res->size;
    }
    return rc;
}

fuse_ino_t blends_ino_of(const char *base)
{
    pthread_mutex_lock(&B.lock);
    struct blend_entry *e = find(base);
    fuse_ino_t ino = e ? INO_BLEND_BASE + e->id * 4 + 1 : 0;
    pthread_mutex_unlock(&B.lock);
    return ino;
}

int blends_recipe_name(fuse_ino_t ino, char *out, size_t cap)
{
    pthread_mutex_lock(&B.lock);
    struct blend_entry *e = find_id((ino - INO_BLEND_BASE) / 4);
    if (e)
        snprintf(out, cap, "%s.recipe", e->name);
    pthread_mutex_unlock(&B.lock);
    return e ? 0 : -ENOENT;
}

/* Text of NAME.recipe or NAME.err (malloc'ed). */
int blends_text(fuse_ino_t ino, char **text)
{
    int kind = (int)((ino - INO_BLEND_BASE) % 4);
    pthread_mutex_lock(&B.lock);
    struct blend_entry *e = find_id((ino - INO_BLEND_BASE) / 4);
    *text = e ? strdup(kind == 0 ? e->recipe : e->err) : NULL;
    pthread_mutex_unlock(&B.lock);
    return e ? (*text ? 0 : -ENOMEM) : -ENOENT;
}
