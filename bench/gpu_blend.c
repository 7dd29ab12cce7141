/* gpu_blend.c - blend TTFT vs full prefill on the CUDA backend with a
 * synthetic model of Llama-3-8B's shapes (32 layers, 4096 wide, 32 heads,
 * 8 KV heads, head_dim 128, ffn 14336; random f32 weights made in memory,
 * nothing downloaded; vocabulary cut to 32768): 6 chunks x 512 tokens + a
 * 32-token query.  Also: the layer-wise loader's bandwidth from store files
 * to GPU memory vs the host-to-device copy limit, and blend TTFT with the
 * chunks read from the store (page cache dropped where permitted).
 * With a GGUF (e.g. the 8B-shaped Q4_K_M file of tools/mkmodel-8b.py) the
 * same runs use that model, weights kept as the file has them, and the
 * device memory it takes and full-prefill tokens/s at 512 and 3,104 tokens
 * are printed too (what bench/device.sh sets beside llama.cpp's llama-bench).
 * GPU_BLEND_PREFILL_ONLY=1 stops after the prefill figures; GPU_BLEND_LOADER_ONLY=1
 * measures only the loader (the CPU backend: a quick check of the disk's
 * side); GPU_BLEND_NO_AB=1 leaves out the CUDA A/B of split attention.
 * Cold objects are read O_DIRECT as the daemon reads them, and buffered
 * beside it (an A/B row).
 * Usage: gpu_blend [backend [MODEL.gguf]] */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "blend.h"
#include "service.h"
#include "forward.h"
#include "loader.h"
#include "model.h"
#include "store.h"
#ifdef KVFS_HAVE_CUDA
#include <cuda_runtime.h>
#endif

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rs = 99;
static float frand(void)
{
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    return ((float)(rs >> 40) / (float)(1 << 24) - 0.5f);
}

static struct kvfs_weight *W(struct kvfs_model *m, const float *src, int out, int in)
{
    struct kvfs_weight *w = NULL;
    if (m->be.iface->weight_create(m->be.ctx, src, out, in, &w)) {
        fprintf(stderr, "weight alloc failed\n");
        exit(1);
    }
    return w;
}

static float *V(struct kvfs_model *m, const float *src, int n)
{
    float *d;
    m->be.iface->alloc(m->be.ctx, sizeof(float) * n, (void **)&d);
    m->be.iface->upload(m->be.ctx, d, src, sizeof(float) * n);
    return d;
}

static int drop_caches(void)
{
    sync();
    FILE *f = fopen("/proc/sys/vm/drop_caches", "w");
    if (!f)
        return 0;
    int ok = fputs("3\n", f) >= 0;
    return fclose(f) == 0 && ok;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* host-to-device copy limit: cudaMemcpy from pinned (and pageable) memory */
static void h2d_limit(double *pinned_gbs, double *pageable_gbs)
{
    *pinned_gbs = *pageable_gbs = 0;
#ifdef KVFS_HAVE_CUDA
    size_t bytes = (size_t)256 << 20;
    void *hp = NULL, *dev = NULL, *pg = malloc(bytes);
    if (cudaMallocHost(&hp, bytes) != cudaSuccess || cudaMalloc(&dev, bytes) != cudaSuccess || !pg)
        return;
    memset(hp, 1, bytes);
    memset(pg, 1, bytes);
    double a[5], b[5];
    for (int i = 0; i < 5; i++) {
        double t = now();
        cudaMemcpy(dev, hp, bytes, cudaMemcpyHostToDevice);
        a[i] = bytes / (now() - t) / 1e9;
        t = now();
        cudaMemcpy(dev, pg, bytes, cudaMemcpyHostToDevice);
        b[i] = bytes / (now() - t) / 1e9;
    }
    *pinned_gbs = median(a, 5);
    *pageable_gbs = median(b, 5);
    cudaFreeHost(hp);
    cudaFree(dev);
    free(pg);
#endif
}

/* Stream every layer of the chunks from the store into a device cache with
 * the layer-wise loader; seconds until the last layer is on the device. */
/* the loader's options for every load and blend below (the default: O_DIRECT
 * for objects out of the page cache); A/B rows change them for a while */
static struct kvfs_loader_opts bench_lo;

static double load_to_device(struct kvfs_model *m, struct kvfs_store *st, const char *const *hashes, int k,
                             int rows)
{
    struct kvfs_loader *ld;
    struct kvfs_kv_cache c;
    char err[256];
    double t = now();
    if (kvfs_loader_open(st, hashes, k, &bench_lo, &ld, err, sizeof(err)) || kvfs_kv_cache_init(m, rows, &c)) {
        fprintf(stderr, "loader: %s\n", err);
        exit(1);
    }
    kvfs_loader_start(ld, 0);
    for (int l = 0; l < m->hp.n_layer; l++) {
        const void *data[KVFS_BLEND_MAX_CHUNKS];
        if (kvfs_loader_wait(ld, l, data, err, sizeof(err))) {
            fprintf(stderr, "loader: %s\n", err);
            exit(1);
        }
        for (int i = 0, row = 0; i < k; i++) {
            const struct kvfs_header *h = kvfs_loader_header(ld, i);
            kvfs_kv_cache_load_layer(m, &c, row, h, l, data[i]);
            row += (int)h->n_tokens;
        }
    }
    m->be.iface->synchronize(m->be.ctx);
    t = now() - t;
    kvfs_loader_close(ld);
    kvfs_kv_cache_free(m, &c);
    return t;
}

/* the loader alone: every layer of k chunks read and verified, nothing
 * copied on (what the disk and the loader's threads give) */
static double load_only(struct kvfs_store *st, const char *const *hashes, int k, int n_layer)
{
    struct kvfs_loader *ld;
    char err[256];
    double t = now();
    if (kvfs_loader_open(st, hashes, k, &bench_lo, &ld, err, sizeof(err)) || kvfs_loader_start(ld, 0)) {
        fprintf(stderr, "loader: %s\n", err);
        exit(1);
    }
    for (int l = 0; l < n_layer; l++) {
        const void *data[KVFS_BLEND_MAX_CHUNKS];
        if (kvfs_loader_wait(ld, l, data, err, sizeof(err))) {
            fprintf(stderr, "loader: %s\n", err);
            exit(1);
        }
    }
    t = now() - t;
    kvfs_loader_close(ld);
    return t;
}

/* Blend the K chunks + Q-token query streamed from a store with the
 * layer-wise loader; seconds from opening the loader to the logits. */
enum { K = 6, L = 512, Q = 32 };
static double stream_blend(struct kvfs_model *m, struct kvfs_store *st, const char *const *hashes,
                           const int32_t *query, const struct kvfs_blend_opts *bo, float *logits,
                           struct kvfs_blend_stats *bs)
{
    struct kvfs_loader *ld;
    struct kvfs_kv_cache bc;
    int32_t *bt;
    char err[256];
    double t = now();
    if (kvfs_loader_open(st, hashes, K, &bench_lo, &ld, err, sizeof(err)) ||
        kvfs_blend_stream(m, ld, query, Q, bo, &bc, &bt, logits, bs, err, sizeof(err))) {
        fprintf(stderr, "blend from a store: %s\n", err);
        exit(1);
    }
    t = now() - t;
    kvfs_loader_close(ld);
    kvfs_kv_cache_free(m, &bc);
    free(bt);
    return t;
}

/* the store's RAM tier page-locked through the model's backend, as the
 * daemon's blend service does (blend/service.c), or not */
static void set_pinning(struct kvfs_store *st, const struct kvfs_model *m, int on)
{
    if (!on || !kvfs_blend_pin_store(st, m))
        kvfs_store_set_pin(st, NULL, NULL, NULL, NULL);
}

/* device memory in use (bytes), or 0 when it cannot be read */
static size_t device_used(void)
{
#ifdef KVFS_HAVE_CUDA
    size_t free_b = 0, total = 0;
    if (cudaMemGetInfo(&free_b, &total) == cudaSuccess)
        return total - free_b;
    cudaGetLastError();
#endif
    return 0;
}

static struct kvfs_model *synthetic_model(const char *backend)
{
    struct kvfs_model *m = calloc(1, sizeof(*m));
    struct kvfs_hparams *hp = &m->hp;
    *hp = (struct kvfs_hparams){.arch = "llama", .n_layer = 32, .n_embd = 4096, .n_head = 32, .n_kv_head = 8,
                                .head_dim = 128, .n_ff = 14336, .n_vocab = 32768, .n_ctx_train = 8192,
                                .rms_eps = 1e-5f, .rope_theta = 500000.0f, .rope_dim = 128,
                                .rope_style = KVFS_ROPE_STYLE_NORM, .q_dim = 4096,
                                .attn_scale = 1.0f / sqrtf(128.0f)};
    if (kvfs_backend_init_by_name(backend, 0, &m->be) != 0) {
        free(m);
        return NULL;
    }
    double t0 = now();
    size_t big = (size_t)14336 * 4096;
    float *h = malloc(sizeof(float) * (big + 1024)), *ones = malloc(sizeof(float) * 4096);
    for (size_t i = 0; i < big + 1024; i++)
        h[i] = frand() * 0.04f;
    for (int i = 0; i < 4096; i++)
        ones[i] = 1.0f;
    float *emb = malloc(sizeof(float) * (size_t)hp->n_vocab * 4096);
    for (size_t i = 0; i < (size_t)hp->n_vocab * 4096; i++)
        emb[i] = frand();
    m->tok_embd = V(m, emb, hp->n_vocab * 4096);
    m->output = W(m, emb, hp->n_vocab, 4096);
    m->output_norm = V(m, ones, 4096);
    m->layers = calloc(32, sizeof(*m->layers));
    for (int l = 0; l < 32; l++) {
        struct kvfs_layer_weights *L = &m->layers[l];
        L->attn_norm = V(m, ones, 4096);
        L->ffn_norm = V(m, ones, 4096);
        L->wq = W(m, h + l, 4096, 4096);
        L->wk = W(m, h + 7 * l, 1024, 4096);
        L->wv = W(m, h + 13 * l, 1024, 4096);
        L->wo = W(m, h + 17 * l, 4096, 4096);
        L->w_gate = W(m, h, 14336, 4096);
        L->w_up = W(m, h + 3, 14336, 4096);
        L->w_down = W(m, h + 5, 4096, 14336);
    }
    struct kvfs_fingerprint *fp = &m->fp;
    *fp = (struct kvfs_fingerprint){32, 8, 128, KVFS_ROPE_NORM, 500000.0f, 128, "llama", {0}, 32, 4096};
    memcpy(fp->model_id, "synthetic-llama-3-8b-shapes.....", 32);
    free(h);
    free(ones);
    free(emb);
    printf("model built in %.1f s (backend %s)\n", now() - t0, m->be.iface->name);
    return m;
}

/* A view of m (the same weights, a backend context of its own) whose
 * attention never splits its keys (KVFS_CUDA_ATTN_SPLIT=0, read when the
 * context is made), for the A/B rows; NULL, said on stderr, when it fails */
static struct kvfs_model *unsplit_view(struct kvfs_model *m, const char *what)
{
    struct kvfs_model *m0 = NULL;
    setenv("KVFS_CUDA_ATTN_SPLIT", "0", 1);
    int rc = kvfs_model_view(m, &m0);
    unsetenv("KVFS_CUDA_ATTN_SPLIT");
    if (rc) {
        fprintf(stderr, "gpu_blend: %s view: %s\n", what, strerror(-rc));
        return NULL;
    }
    return m0;
}

/* median seconds of a full prefill of the first n tokens */
static double prefill_s(struct kvfs_model *m, const int32_t *toks, int n, float *logits)
{
    double t[5];
    for (int rep = 0; rep < 5; rep++) {
        struct kvfs_kv_cache c;
        if (kvfs_kv_cache_init(m, n, &c)) {
            fprintf(stderr, "cache alloc failed\n");
            exit(1);
        }
        double t0 = now();
        if (kvfs_forward(m, &c, toks, n, 0, logits)) {
            fprintf(stderr, "prefill of %d tokens failed\n", n);
            exit(1);
        }
        t[rep] = now() - t0;
        kvfs_kv_cache_free(m, &c);
    }
    return median(t, 5);
}

/* One of N clients blending at once, each on a lane of its own (a view of
 * the model: its own stream and cuBLAS handle, as the daemon's blend_jobs),
 * chunks from the RAM tier, a question of its own each time. */
struct client {
    struct kvfs_model *m;
    struct kvfs_store *st;
    const char *const *hashes;
    const int32_t *query;
    int id, n_blends;
};

static void *client_run(void *arg)
{
    struct client *c = arg;
    int32_t q[Q];
    struct kvfs_blend_opts bo;
    kvfs_blend_opts_init(&bo, 0.15f);
    bo.select = KVFS_BLEND_SELECT_QUERY;
    for (int b = 0; b < c->n_blends; b++) {
        memcpy(q, c->query, sizeof(q));
        q[Q - 1] = (int32_t)((300u + (unsigned)(c->id * 131 + b * 17) % 1000u) % (unsigned)c->m->hp.n_vocab);
        stream_blend(c->m, c->st, c->hashes, q, &bo, NULL, NULL);
    }
    return NULL;
}

/* this process's CPU seconds so far, user and system, every thread */
static double cpu_s(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru))
        return 0;
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)ru.ru_stime.tv_usec;
}

/* prompts/s of n clients at once, each blending `each` prompts; *cores: the
 * host CPU they kept busy (CPU seconds over wall seconds), which says
 * whether more lanes wait for the host or for the device */
static double clients_at_once(struct kvfs_model *m, struct kvfs_store *st, const char *const *hashes,
                              const int32_t *query, int n, int each, double *cores)
{
    struct client cl[16];
    pthread_t th[16];
    for (int i = 0; i < n; i++) {
        cl[i] = (struct client){m, st, hashes, query, i, each};
        if (i > 0 && kvfs_model_view(m, &cl[i].m)) {
            fprintf(stderr, "cannot make a lane for client %d\n", i);
            exit(1);
        }
    }
    double t = now(), c0 = cpu_s();
    for (int i = 0; i < n; i++)
        pthread_create(&th[i], NULL, client_run, &cl[i]);
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    t = now() - t;
    *cores = (cpu_s() - c0) / t;
    for (int i = 1; i < n; i++)
        kvfs_model_free(cl[i].m);
    return n * each / t;
}

int main(int argc, char **argv)
{
    const char *backend = argc > 1 ? argv[1] : "cuda";
    const char *path = argc > 2 ? argv[2] : NULL;
    setvbuf(stdout, NULL, _IOLBF, 0); /* each figure lands in the file as it comes (a run may be cut short) */
    /* the backend behind the profiling wrappers, off but for the profiled
     * blends at the end (off, a wrapper only passes the call on) */
    setenv("KVFS_BACKEND_PROFILE", "wrap", 0);
    struct kvfs_model *m = NULL;
    if (path) {
        char lerr[256];
        size_t before = device_used();
        double t0 = now();
        int rc = kvfs_model_load(path, backend, 0, &m, lerr, sizeof(lerr));
        if (rc == -ENODEV) {
            printf("skip: backend %s unavailable\n", backend);
            return 77;
        }
        if (rc) {
            fprintf(stderr, "gpu_blend: %s: %s\n", path, lerr);
            return 1;
        }
        struct stat sb;
        size_t after = device_used(), used = after > before ? after - before : 0;
        printf("model %s loaded in %.1f s (backend %s)\n", path, now() - t0, m->be.iface->name);
        if (used && stat(path, &sb) == 0)
            printf("device memory for the model: %.2f GiB for a %.2f GiB file (%.2fx)\n", used / 1073741824.0,
                   sb.st_size / 1073741824.0, (double)used / (double)sb.st_size);
    } else if (!(m = synthetic_model(backend))) {
        printf("skip: backend %s unavailable\n", backend);
        return 77;
    }
    struct kvfs_hparams *hp = &m->hp;
    int32_t *toks = malloc(sizeof(int32_t) * (K * L + Q));
    for (int i = 0; i < K * L + Q; i++) /* ids past the byte tokens, as llama-bench's random ones */
        toks[i] = hp->n_vocab > 600 ? (int32_t)(300 + (i * 7919u) % (unsigned)(hp->n_vocab - 300))
                                    : (int32_t)((i * 7919u) % (unsigned)hp->n_vocab);
    float *lf0 = malloc(sizeof(float) * hp->n_vocab);
    int loader_only = getenv("GPU_BLEND_LOADER_ONLY") != NULL; /* the loader's rows only (quick checks) */
    double p512 = loader_only ? 1 : prefill_s(m, toks, 512, lf0), pfull = loader_only ? 1 : prefill_s(m, toks, K * L + Q, lf0);
    const char *attn = getenv("KVFS_CUDA_ATTN");
    printf("full prefill: %d tokens %.1f ms (%.0f tokens/s), %d tokens %.1f ms (%.0f tokens/s) (medians of 5; "
           "attention %s)\n", 512, 1e3 * p512, 512 / p512, K * L + Q, 1e3 * pfull, (K * L + Q) / pfull,
           attn && !strcmp(attn, "f32") ? "f32" : "default");
    /* the same prefills with the attention's keys never split: the split
     * model costs a causal prefill as whole tiles, so a long one may split
     * (attention_tc.cu's pick_split); this says whether that costs time */
    if (!loader_only && !strcmp(backend, "cuda") && !getenv("GPU_BLEND_NO_AB")) {
        struct kvfs_model *m0 = unsplit_view(m, "prefill A/B");
        if (m0) {
            prefill_s(m0, toks, 512, lf0); /* its first: device buffers */
            double u512 = prefill_s(m0, toks, 512, lf0), ufull = prefill_s(m0, toks, K * L + Q, lf0);
            printf("A/B, full prefill with the attention's keys never split: %d tokens %.1f ms (%.2fx the split "
                   "as planned), %d tokens %.1f ms (%.2fx)\n", 512, 1e3 * u512, u512 / p512, K * L + Q, 1e3 * ufull,
                   ufull / pfull);
            kvfs_model_free(m0);
        }
    }
    free(lf0);
    fflush(stdout);
    if (getenv("GPU_BLEND_PREFILL_ONLY"))
        return 0;
    struct kvfs_writer w[K], w4[K];
    struct kvfs_blend_chunk ch[K];
    for (int i = 0; i < K; i++) {
        struct kvfs_kv_cache c;
        kvfs_kv_cache_init(m, L, &c);
        if (kvfs_forward(m, &c, toks + i * L, L, 0, NULL) ||
            kvfs_kv_cache_to_chunk(m, &c, 0, L, toks + i * L, KVFS_DTYPE_F16, &w[i]) ||
            kvfs_kv_cache_to_chunk(m, &c, 0, L, toks + i * L, KVFS_DTYPE_Q4S, &w4[i])) {
            fprintf(stderr, "chunk prefill failed\n");
            return 1;
        }
        kvfs_kv_cache_free(m, &c);
        ch[i] = (struct kvfs_blend_chunk){w[i].buf, w[i].size};
        /* in memory and page-locked, as the daemon keeps its RAM tier */
        if (m->be.iface->host_register)
            m->be.iface->host_register(m->be.ctx, w[i].buf, w[i].size);
    }
    /* the chunks as files in a store (zstd level 1, the daemon's default) */
    char dir[256], err0[256], hashes[K][KVFS_HASH_HEX_LEN + 1];
    const char *hp_[K];
    snprintf(dir, sizeof(dir), "%s/kvfs-gpu-bench.%d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    char dir_ram[300], dir_raw[300], dir_q4[300];
    snprintf(dir_ram, sizeof(dir_ram), "%s.ram", dir);
    snprintf(dir_raw, sizeof(dir_raw), "%s.raw", dir);
    snprintf(dir_q4, sizeof(dir_q4), "%s.q4s", dir);
    struct kvfs_store_opts so = {.dir = dir, .zstd_level = 1, .no_sync = 1},
                           so_ram = {.dir = dir_ram, .ram_bytes = (uint64_t)2 << 30, .zstd_level = 1, .no_sync = 1},
                           so_raw = {.dir = dir_raw, .no_sync = 1},
                           so_q4 = {.dir = dir_q4, .zstd_level = 1, .no_sync = 1};
    struct kvfs_store *store, *store_ram, *store_raw, *store_q4;
    char hashes_q4[K][KVFS_HASH_HEX_LEN + 1];
    const char *hq_[K];
    if (kvfs_store_open(&so, &store, err0, sizeof(err0)) || kvfs_store_open(&so_ram, &store_ram, err0, sizeof(err0)) ||
        kvfs_store_open(&so_raw, &store_raw, err0, sizeof(err0)) ||
        kvfs_store_open(&so_q4, &store_q4, err0, sizeof(err0))) {
        fprintf(stderr, "store: %s\n", err0);
        return 1;
    }
    uint64_t layer_bytes = 0;
    for (int i = 0; i < K; i++) {
        if (kvfs_store_put(store, w[i].buf, w[i].size, NULL, hashes[i], err0, sizeof(err0))) {
            fprintf(stderr, "store put: %s\n", err0);
            return 1;
        }
        hp_[i] = hashes[i];
        if (kvfs_store_put(store_q4, w4[i].buf, w4[i].size, NULL, hashes_q4[i], err0, sizeof(err0))) {
            fprintf(stderr, "store put (q4s): %s\n", err0);
            return 1;
        }
        hq_[i] = hashes_q4[i];
        struct kvfs_chunk_ref *ref; /* the second store keeps it in its RAM tier */
        if (kvfs_store_put(store_raw, w[i].buf, w[i].size, NULL, NULL, err0, sizeof(err0)) ||
            kvfs_store_put(store_ram, w[i].buf, w[i].size, NULL, NULL, err0, sizeof(err0)) ||
            kvfs_store_get(store_ram, hashes[i], &ref) || !kvfs_chunk_data(ref)) {
            fprintf(stderr, "RAM store: %s\n", err0);
            return 1;
        }
        kvfs_chunk_release(ref);
        layer_bytes += (uint64_t)hp->n_layer * 2 * L * hp->n_kv_head * hp->head_dim * 2; /* f16 K and V */
    }
    double q4_bl[5], pin_gbs, page_gbs, cold[3], warm[3], st_bl[5], st_wait[5], st_load[5], ram_bl[5], auto_bl[5], auto_ratio[5], auto_rows[5], raw_cold[3], raw_warm[3];
    double ram_pinned[3], ram_paged[3], ram_bl_paged[5];
    int dropped = 1;
    h2d_limit(&pin_gbs, &page_gbs);
    for (int rep = 0; rep < 3; rep++) {
        set_pinning(store_ram, m, 0);
        ram_paged[rep] = layer_bytes / load_to_device(m, store_ram, hp_, K, K * L) / 1e9;
        set_pinning(store_ram, m, 1);
        ram_pinned[rep] = layer_bytes / load_to_device(m, store_ram, hp_, K, K * L) / 1e9;
    }
    /* cold objects, the default (O_DIRECT for them) and buffered through
     * the page cache (direct_io -1), taking turns; q4s objects the same */
    double cold_buf[3], q4_cold[3], q4_cold_buf[3];
    uint64_t q4_bytes = 0;
    for (int i = 0; i < K; i++)
        q4_bytes += w4[i].size;
    for (int rep = 0; rep < 3; rep++) {
        dropped &= drop_caches();
        cold[rep] = layer_bytes / load_to_device(m, store, hp_, K, K * L) / 1e9;
        warm[rep] = layer_bytes / load_to_device(m, store, hp_, K, K * L) / 1e9;
        drop_caches();
        raw_cold[rep] = layer_bytes / load_to_device(m, store_raw, hp_, K, K * L) / 1e9;
        raw_warm[rep] = layer_bytes / load_to_device(m, store_raw, hp_, K, K * L) / 1e9;
        bench_lo.direct_io = -1;
        drop_caches();
        cold_buf[rep] = layer_bytes / load_to_device(m, store, hp_, K, K * L) / 1e9;
        drop_caches();
        q4_cold_buf[rep] = q4_bytes / load_to_device(m, store_q4, hq_, K, K * L) / 1e9;
        bench_lo.direct_io = 0;
        drop_caches();
        q4_cold[rep] = q4_bytes / load_to_device(m, store_q4, hq_, K, K * L) / 1e9;
    }
    printf("host-to-device copy limit: %.1f GB/s from pinned memory, %.1f GB/s from pageable\n", pin_gbs, page_gbs);
    printf("loader, the store's RAM tier to GPU memory: %.1f GB/s page-locked (%.0f%% of pinned cudaMemcpy), "
           "%.1f GB/s not (staged) (medians of 3)\n", median(ram_pinned, 3), 100 * median(ram_pinned, 3) / pin_gbs,
           median(ram_paged, 3));
    printf("loader, store files to GPU memory (%.0f MB of f16 K/V in %d layers): %.1f GB/s with the page cache %s, "
           "%.1f GB/s warm (medians of 3)\n", layer_bytes / 1e6, hp->n_layer, median(cold, 3),
           dropped ? "dropped" : "NOT dropped (no permission)", median(warm, 3));
    printf("the same from uncompressed objects (zstd=0): %.1f GB/s with the page cache %s, %.1f GB/s warm\n",
           median(raw_cold, 3), dropped ? "dropped" : "NOT dropped", median(raw_warm, 3));
    printf("A/B, cold objects (page cache %s): f16 %.1f GB/s read O_DIRECT (the default) / %.1f GB/s buffered (%.2fx); "
           "q4s (%.0f MB of images) %.2f / %.2f GB/s of image bytes (%.2fx) (medians of 3, alternating)\n",
           dropped ? "dropped" : "NOT dropped", median(cold, 3), median(cold_buf, 3), median(cold, 3) / median(cold_buf, 3),
           q4_bytes / 1e6, median(q4_cold, 3), median(q4_cold_buf, 3), median(q4_cold, 3) / median(q4_cold_buf, 3));
    /* A/B: the loader's buffers page-locked (KVFS_PIN_LOADER=1) or not,
     * uncompressed objects warm in the page cache: the first load on fresh
     * buffers (locking them, or faulting them in), then 3 more on the same */
    if (kvfs_blend_pin_loader(m, 0) == 0 && m->be.iface->host_register) {
        double first[2], steady[2][3];
        load_to_device(m, store_raw, hp_, K, K * L); /* the page cache warm */
        for (int lock = 0; lock < 2; lock++) {
            kvfs_blend_pin_loader(m, lock);
            kvfs_loader_trim(); /* fresh buffers */
            first[lock] = layer_bytes / load_to_device(m, store_raw, hp_, K, K * L) / 1e9;
            for (int rep = 0; rep < 3; rep++)
                steady[lock][rep] = layer_bytes / load_to_device(m, store_raw, hp_, K, K * L) / 1e9;
        }
        kvfs_blend_pin_loader(m, 0); /* the default */
        printf("A/B, the loader's buffers page-locked / not (uncompressed objects, page cache warm): %.1f / %.1f GB/s "
               "(%.2fx; medians of 3 on kept buffers); the first load on fresh buffers %.1f / %.1f GB/s\n",
               median(steady[1], 3), median(steady[0], 3), median(steady[1], 3) / median(steady[0], 3), first[1],
               first[0]);
    }
    if (loader_only) { /* and the loader alone, cold, O_DIRECT / buffered taking turns */
        for (int raw = 0; raw <= 1; raw++) {
            double a[5], b[5];
            struct kvfs_store *from = raw ? store_raw : store;
            for (int rep = 0; rep < 5; rep++) {
                bench_lo.direct_io = 0;
                drop_caches();
                a[rep] = layer_bytes / load_only(from, hp_, K, hp->n_layer) / 1e9;
                bench_lo.direct_io = -1;
                drop_caches();
                b[rep] = layer_bytes / load_only(from, hp_, K, hp->n_layer) / 1e9;
            }
            bench_lo.direct_io = 0;
            printf("A/B, the loader alone (read, %sverify; nothing uploaded), cold %s objects: %.2f GB/s O_DIRECT / "
                   "%.2f GB/s buffered (%.2fx; medians of 5, alternating)\n", raw ? "" : "decompress, ",
                   raw ? "uncompressed" : "zstd", median(a, 5), median(b, 5), median(a, 5) / median(b, 5));
        }
        return 0;
    }
    float *lf = malloc(sizeof(float) * hp->n_vocab), *lb = malloc(sizeof(float) * hp->n_vocab);
    enum { REPS = 5 };
    enum { NB = 5 };
    double full[REPS], bl[NB][REPS], qst_bl[REPS];
    /* the published rows select the CacheBlend way (fixed); query is the default since */
    float ratios[NB] = {0.0f, 0.15f, 1.0f, 0.15f, 0.15f};
    int selects[NB] = {KVFS_BLEND_SELECT_FIXED, KVFS_BLEND_SELECT_FIXED, KVFS_BLEND_SELECT_FIXED,
                       KVFS_BLEND_SELECT_QUERY, KVFS_BLEND_SELECT_QUERY};
    float shifts[NB] = {-1, -1, -1, -1, 0.0f}; /* the last: query selection without the chunk shift (its cost) */
    char err[256];
    for (int rep = 0; rep < REPS; rep++) {
        struct kvfs_kv_cache c;
        kvfs_kv_cache_init(m, K * L + Q, &c);
        double t = now();
        kvfs_forward(m, &c, toks, K * L + Q, 0, lf);
        full[rep] = now() - t;
        kvfs_kv_cache_free(m, &c);
        for (int r = 0; r < NB; r++) {
            struct kvfs_kv_cache bc;
            int32_t *bt;
            t = now();
            struct kvfs_blend_stats bs0;
            struct kvfs_blend_opts bo0;
            kvfs_blend_opts_init(&bo0, ratios[r]);
            bo0.select = selects[r];
            if (shifts[r] >= 0)
                bo0.shift = shifts[r];
            if (kvfs_blend_ex(m, ch, K, toks + K * L, Q, &bo0, &bc, &bt, lb, &bs0, err, sizeof(err))) {
                fprintf(stderr, "blend: %s\n", err);
                return 1;
            }
            bl[r][rep] = now() - t;
            if (rep == REPS - 1)
                printf("ratio %.2f %s%s (last run): %d rows recomputed per layer, waited %.1f ms for layers, %.1f ms in all\n",
                       (double)ratios[r], kvfs_blend_select_name(selects[r]), shifts[r] == 0.0f ? " no shift" : "",
                       bs0.n_selected, 1e3 * bs0.wait_s,
                       1e3 * bs0.seconds);
            kvfs_kv_cache_free(m, &bc);
            free(bt);
        }
        /* ratio 0.15 from the RAM tier (the daemon's hot chunks) */
        struct kvfs_blend_opts bo;
        struct kvfs_blend_stats bs;
        kvfs_blend_opts_init(&bo, 0.15f);
        bo.select = KVFS_BLEND_SELECT_QUERY;
        drop_caches();
        qst_bl[rep] = stream_blend(m, store, hp_, toks + K * L, &bo, lb, &bs);
        ram_bl[rep] = stream_blend(m, store_ram, hp_, toks + K * L, &bo, lb, &bs);
        set_pinning(store_ram, m, 0);
        ram_bl_paged[rep] = stream_blend(m, store_ram, hp_, toks + K * L, &bo, lb, &bs);
        set_pinning(store_ram, m, 1);
        bo.select = KVFS_BLEND_SELECT_FIXED;
        /* ratio 0.15 streaming the chunks from the store's files */
        drop_caches();
        st_bl[rep] = stream_blend(m, store, hp_, toks + K * L, &bo, lb, &bs);
        st_wait[rep] = bs.wait_s;
        st_load[rep] = bs.load_s;
        /* the same from q4s chunks (4.25 bits a value on disk) */
        drop_caches();
        bo.select = KVFS_BLEND_SELECT_QUERY;
        q4_bl[rep] = stream_blend(m, store_q4, hq_, toks + K * L, &bo, lb, &bs);
        bo.select = KVFS_BLEND_SELECT_FIXED;
        /* ratio=auto from the same cold files: the controller spends the
         * time the disk takes anyway on a higher ratio */
        bo.auto_ratio = 1;
        bo.min_ratio = 0.15f;
        drop_caches();
        auto_bl[rep] = stream_blend(m, store, hp_, toks + K * L, &bo, lb, &bs);
        auto_ratio[rep] = bs.ratio;
        auto_rows[rep] = bs.n_selected;
    }
#define MED(a) median(a, REPS)
    printf("| method | TTFT ms (median of 5) | speedup vs full prefill |\n|---|---|---|\n");
    printf("| full prefill (%d tokens) | %.1f | 1.00x |\n", K * L + Q, 1e3 * MED(full));
    for (int r = 0; r < NB; r++)
        printf("| blend ratio %.2f, %s selection%s | %.1f | %.2fx |\n", (double)ratios[r], kvfs_blend_select_name(selects[r]),
               shifts[r] == 0.0f ? ", no chunk shift" : "", 1e3 * MED(bl[r]), MED(full) / MED(bl[r]));
    printf("| blend ratio 0.15, query selection, chunks streamed from store files%s | %.1f | %.2fx |\n",
           dropped ? " (page cache dropped)" : "", 1e3 * MED(qst_bl), MED(full) / MED(qst_bl));
    printf("| blend ratio 0.15, query selection, q4s chunks streamed from store files%s | %.1f | %.2fx |\n",
           dropped ? " (page cache dropped)" : "", 1e3 * MED(q4_bl), MED(full) / MED(q4_bl));
    printf("| blend ratio 0.15, query selection, chunks in the store's RAM tier | %.1f | %.2fx |\n", 1e3 * MED(ram_bl),
           MED(full) / MED(ram_bl));
    printf("| blend ratio 0.15, query selection, chunks in the RAM tier not page-locked | %.1f | %.2fx |\n",
           1e3 * MED(ram_bl_paged), MED(full) / MED(ram_bl_paged));
    printf("| blend ratio 0.15, fixed selection, chunks streamed from store files%s | %.1f | %.2fx |\n",
           dropped ? " (page cache dropped)" : "", 1e3 * MED(st_bl), MED(full) / MED(st_bl));
    printf("| blend ratio=auto, fixed selection (picked %.2f, then %.0f rows per layer on average; medians), chunks streamed from store "
           "files%s | %.1f | %.2fx |\n",
           MED(auto_ratio), MED(auto_rows), dropped ? " (page cache dropped)" : "", 1e3 * MED(auto_bl), MED(full) / MED(auto_bl));
    printf("\nstreamed blend: loading took %.1f ms, of which the blend waited %.1f ms (medians)\n",
           1e3 * MED(st_load), 1e3 * MED(st_wait));
    /* where a blend's time goes (KVFS_BLEND_PROFILE: each phase waited
     * for), RAM tier, fixed and query selection, to stderr */
    setenv("KVFS_BLEND_PROFILE", "1", 1);
    for (int sel = 0; sel < 2; sel++) {
        struct kvfs_blend_opts bo;
        struct kvfs_blend_stats bs;
        kvfs_blend_opts_init(&bo, 0.15f);
        bo.select = sel ? KVFS_BLEND_SELECT_QUERY : KVFS_BLEND_SELECT_FIXED;
        fprintf(stderr, "profile, %s selection, RAM tier:\n", kvfs_blend_select_name(bo.select));
        stream_blend(m, store_ram, hp_, toks + K * L, &bo, lb, &bs);
        kvfs_backend_profile_enable(1);
        stream_blend(m, store_ram, hp_, toks + K * L, &bo, lb, &bs);
        kvfs_backend_profile_enable(0);
        kvfs_backend_profile_take(stderr, kvfs_blend_select_name(bo.select));
    }
    unsetenv("KVFS_BLEND_PROFILE");
    /* A/B in one run: the query blend from the RAM tier with the attention's
     * keys split for few query rows (the default) and unsplit: a view of the
     * model (the same weights, a backend context of its own, which reads
     * KVFS_CUDA_ATTN_SPLIT=0), the two taking turns; then where the
     * unsplit one's time goes, to stderr beside the profiles above */
    if (!strcmp(backend, "cuda") && !getenv("GPU_BLEND_NO_AB")) {
        struct kvfs_model *m0 = unsplit_view(m, "A/B");
        if (m0) {
            struct kvfs_blend_opts bo;
            struct kvfs_blend_stats bs;
            kvfs_blend_opts_init(&bo, 0.15f);
            bo.select = KVFS_BLEND_SELECT_QUERY;
            double split_bl[REPS], unsplit_bl[REPS];
            stream_blend(m0, store_ram, hp_, toks + K * L, &bo, lb, &bs); /* its first: device buffers */
            for (int rep = 0; rep < REPS; rep++) {
                split_bl[rep] = stream_blend(m, store_ram, hp_, toks + K * L, &bo, lb, &bs);
                unsplit_bl[rep] = stream_blend(m0, store_ram, hp_, toks + K * L, &bo, lb, &bs);
            }
            printf("A/B, blend ratio 0.15 query selection from the RAM tier: attention keys split for few query rows "
                   "%.1f ms, unsplit %.1f ms (%.2fx; medians of %d, alternating)\n", 1e3 * MED(split_bl),
                   1e3 * MED(unsplit_bl), MED(unsplit_bl) / MED(split_bl), REPS);
            setenv("KVFS_BLEND_PROFILE", "1", 1);
            fprintf(stderr, "profile, query selection, RAM tier, attention keys unsplit:\n");
            kvfs_backend_profile_enable(1);
            stream_blend(m0, store_ram, hp_, toks + K * L, &bo, lb, &bs);
            kvfs_backend_profile_enable(0);
            kvfs_backend_profile_take(stderr, "query, unsplit");
            unsetenv("KVFS_BLEND_PROFILE");
            kvfs_model_free(m0);
        }
    }
    /* clients at once, chunks in the RAM tier: 1 (the same loop alone), 2,
     * 4 and 8, so the curve says where the lanes stop adding */
    const int n_clients[4] = {1, 2, 4, 8};
    double rate[4], cores[4];
    for (int i = 0; i < 4; i++)
        rate[i] = clients_at_once(m, store_ram, hp_, toks + K * L, n_clients[i], n_clients[i] == 1 ? 8 : 4, &cores[i]);
    printf("clients at once, blend ratio 0.15 query selection from the RAM tier: 1 client %.2f prompts/s, "
           "8 clients %.2f prompts/s (%.2fx)\n", rate[0], rate[3], rate[3] / rate[0]);
    printf("clients at once, the curve: 1, 2, 4, 8 clients %.2f, %.2f, %.2f, %.2f prompts/s; host CPU busy "
           "%.1f, %.1f, %.1f, %.1f cores of %ld\n", rate[0], rate[1], rate[2], rate[3], cores[0], cores[1], cores[2],
           cores[3], sysconf(_SC_NPROCESSORS_ONLN));
    kvfs_store_close(store);
    kvfs_store_close(store_ram);
    kvfs_store_close(store_raw);
    kvfs_store_close(store_q4);
    char cmd[1400];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s' '%s' '%s'", dir, dir_ram, dir_raw, dir_q4);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return 0;
}
