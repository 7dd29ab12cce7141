/* libkvfs.c - libkvfs(3): chunk files as views over a mapping, and the
 * blend ioctls.  Parsing and verification are index/kvformat.c's, compiled
 * into the library with hidden visibility (see the Makefile). */
#include "kvfs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvformat.h"
#include "kvfs_ioctl.h"
#include "kvquant.h"
#include "log.h" /* kvfs_errf */

/* Token ids and K/V are handed out as the file's own bytes. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "libkvfs hands out the file's little-endian bytes as they are: little-endian hosts only"
#endif

_Static_assert(LIBKVFS_DTYPE_F32 == KVFS_DTYPE_F32 && LIBKVFS_DTYPE_F16 == KVFS_DTYPE_F16 &&
                   LIBKVFS_DTYPE_BF16 == KVFS_DTYPE_BF16 && LIBKVFS_DTYPE_Q8 == KVFS_DTYPE_Q8 &&
                   LIBKVFS_DTYPE_Q4 == KVFS_DTYPE_Q4 && LIBKVFS_DTYPE_Q4S == KVFS_DTYPE_Q4S,
               "public dtypes are the format's");
_Static_assert(LIBKVFS_FLAG_KEYS_ROPED == KVFS_FLAG_KEYS_ROPED && LIBKVFS_FLAG_BLENDED == KVFS_FLAG_BLENDED &&
                   LIBKVFS_FLAG_FULL_PREFILL == KVFS_FLAG_FULL_PREFILL && LIBKVFS_FLAG_SALTED == KVFS_FLAG_SALTED &&
                   LIBKVFS_FLAG_V_FROM_K == KVFS_FLAG_V_FROM_K && LIBKVFS_FLAG_LAYER_SHAPES == KVFS_FLAG_LAYER_SHAPES &&
                   LIBKVFS_FLAG_V_NARROW == KVFS_FLAG_V_NARROW,
               "public flags are the format's");
_Static_assert(LIBKVFS_ROPE_NORM == KVFS_ROPE_NORM && LIBKVFS_ROPE_NEOX == KVFS_ROPE_NEOX,
               "public rope types are the format's");
_Static_assert(LIBKVFS_RECIPE_MAX + 1 == sizeof(((struct kvfs_blend_req *)0)->recipe), "recipe size");
_Static_assert(LIBKVFS_BATCH_BYTES + 1 == sizeof(((struct kvfs_blend_batch_req *)0)->recipes), "batch size");
_Static_assert(LIBKVFS_BATCH_MAX == KVFS_BATCH_MAX, "batch count");

struct libkvfs_file {
    const uint8_t *base;
    size_t len;
    enum { HELD_NONE, HELD_MAPPED, HELD_MALLOC } held; /* how base goes */
    struct kvfs_header hdr;
    struct libkvfs_info info;
};

/* A descriptor that cannot be mapped (a pipe) is read whole. */
static int read_all(int fd, uint8_t **out, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    if (!buf)
        return -ENOMEM;
    for (;;) {
        if (n == cap) {
            uint8_t *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                return -ENOMEM;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int rc = -errno;
            free(buf);
            return rc;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    *out = buf;
    *len = n;
    return 0;
}

static int load(int fd, struct libkvfs_file *f)
{
    static const uint8_t empty[1];
    struct stat st;
    if (fstat(fd, &st) != 0)
        return -errno;
    if (S_ISREG(st.st_mode)) {
        if (st.st_size == 0) { /* mmap refuses it; the parser says "truncated" */
            f->base = empty;
            return 0;
        }
        /* MAP_PRIVATE: kvfs serves blend results with direct_io, which the
         * kernel maps only privately */
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p != MAP_FAILED) {
            f->base = p;
            f->len = (size_t)st.st_size;
            f->held = HELD_MAPPED;
            return 0;
        }
        if (errno != ENODEV)
            return -errno;
    }
    uint8_t *buf = NULL;
    int rc = read_all(fd, &buf, &f->len);
    if (!rc) {
        f->base = buf;
        f->held = HELD_MALLOC;
    }
    return rc;
}

static void fill_info(struct libkvfs_file *f)
{
    const struct kvfs_header *h = &f->hdr;
    struct libkvfs_info *in = &f->info;
    uint8_t digest[32];
    in->version = h->version;
    in->dtype = h->dtype;
    in->elem_size = (uint32_t)kvfs_dtype_size(h->dtype);
    in->flags = h->flags;
    in->n_tokens = h->n_tokens;
    in->pos0 = h->pos0;
    in->n_layer = h->fp.n_layer;
    in->n_head = h->fp.n_head;
    in->n_kv_head = h->fp.n_kv_head;
    in->head_dim = h->fp.head_dim;
    in->n_embd = h->fp.n_embd;
    in->rope_type = h->fp.rope_type;
    in->rope_theta = h->fp.rope_theta;
    in->rope_dim = h->fp.rope_dim;
    memcpy(in->arch, h->fp.arch, sizeof(in->arch)); /* NUL-terminated: the parser checked */
    memcpy(in->model_id, h->fp.model_id, sizeof(in->model_id));
    kvfs_fingerprint_id(&h->fp, in->model);
    if (kvfs_content_hash(h, digest) != 0)
        memset(digest, 0, sizeof(digest));
    kvfs_hash_to_hex(digest, in->hash);
    /* at offset 128 of a page-aligned mapping or a malloc'ed buffer: aligned */
    in->tokens = (const uint32_t *)(const void *)h->token_bytes;
    in->header_size = h->header_size;
    in->file_size = h->file_size;
    int shaped = (h->flags & KVFS_FLAG_LAYER_SHAPES) != 0; /* layers differ: no one size */
    in->layer_bytes = shaped ? 0 : kvfs_layer_bytes(h, 0);
    in->layer_stride = shaped ? 0 : (in->layer_bytes + KVFS_ALIGN - 1) / KVFS_ALIGN * KVFS_ALIGN;
    in->salt = h->salt;
}

static int check(struct libkvfs_file *f, unsigned flags, char *err, size_t errlen)
{
    char why[256] = "";
    int rc;
    if (flags & LIBKVFS_OPEN_NO_VERIFY) {
        rc = kvfs_header_parse(f->base, f->len, &f->hdr, why, sizeof(why));
        /* views must not reach past the end, verified or not */
        if (!rc && f->len != f->hdr.file_size)
            rc = kvfs_errf(why, sizeof(why), -EINVAL, "%s: %zu bytes, header says %llu",
                           f->len < f->hdr.file_size ? "truncated" : "trailing data", f->len,
                           (unsigned long long)f->hdr.file_size);
    } else {
        rc = kvfs_file_verify(f->base, f->len, &f->hdr, why, sizeof(why));
    }
    if (rc)
        return kvfs_errf(err, errlen, rc, "invalid chunk: %s", why);
    return 0;
}

int libkvfs_open_fd(int fd, unsigned flags, struct libkvfs_file **out, char *err, size_t errlen)
{
    *out = NULL;
    if (flags & ~LIBKVFS_OPEN_NO_VERIFY)
        return kvfs_errf(err, errlen, -EINVAL, "unknown open flags 0x%x", flags);
    struct libkvfs_file *f = calloc(1, sizeof(*f));
    if (!f)
        return kvfs_errf(err, errlen, -ENOMEM, "%s", strerror(ENOMEM));
    int rc = load(fd, f);
    if (rc) {
        kvfs_errf(err, errlen, rc, "%s", strerror(-rc));
        goto fail;
    }
    if ((rc = check(f, flags, err, errlen)))
        goto fail;
    fill_info(f);
    *out = f;
    return 0;
fail:
    libkvfs_close(f);
    return rc;
}

int libkvfs_open(const char *path, unsigned flags, struct libkvfs_file **out, char *err, size_t errlen)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int rc = -errno;
        return kvfs_errf(err, errlen, rc, "%s", strerror(-rc));
    }
    int rc = libkvfs_open_fd(fd, flags, out, err, errlen);
    close(fd); /* a mapping outlives its descriptor */
    return rc;
}

void libkvfs_close(struct libkvfs_file *f)
{
    if (!f)
        return;
    if (f->held == HELD_MAPPED)
        munmap((void *)f->base, f->len);
    else if (f->held == HELD_MALLOC)
        free((void *)f->base);
    free(f);
}

const struct libkvfs_info *libkvfs_info(const struct libkvfs_file *f) { return &f->info; }

const void *libkvfs_data(const struct libkvfs_file *f, size_t *len)
{
    *len = f->len;
    return f->base;
}

static const uint8_t *layer_at(const struct libkvfs_file *f, uint32_t layer)
{
    return f->base + kvfs_layer_offset(&f->hdr, layer);
}

/* the layer whose cache LAYER attends over (itself but with LAYER_SHAPES) */
static uint32_t cache_layer(const struct libkvfs_file *f, uint32_t layer)
{
    struct kvfs_layer_shape s;
    kvfs_layer_shape_get(&f->hdr, layer, &s);
    return s.kv_source;
}

int libkvfs_layer(const struct libkvfs_file *f, uint32_t layer, struct libkvfs_view *k, struct libkvfs_view *v)
{
    if (layer >= f->info.n_layer)
        return -ERANGE;
    if (kvfs_dtype_quantized(f->info.dtype) || (v && (f->info.flags & LIBKVFS_FLAG_V_FROM_K)))
        return -EOPNOTSUPP;
    const struct libkvfs_info *in = &f->info;
    struct kvfs_layer_shape sh;
    layer = cache_layer(f, layer);
    kvfs_layer_shape_get(&f->hdr, layer, &sh);
    uint64_t lbytes = kvfs_layer_bytes(&f->hdr, layer);
    uint64_t k_bytes = in->flags & LIBKVFS_FLAG_V_FROM_K ? lbytes : lbytes / 2;
    struct libkvfs_view view = {layer_at(f, layer), in->dtype, in->elem_size, in->n_tokens, sh.n_kv_head,
                                sh.head_dim, k_bytes};
    if (k)
        *k = view;
    if (v) {
        view.data = (const uint8_t *)view.data + view.bytes; /* V follows K */
        *v = view;
    }
    return 0;
}

int libkvfs_layer_shape(const struct libkvfs_file *f, uint32_t layer, struct libkvfs_layer_shape *out)
{
    if (layer >= f->info.n_layer)
        return -ERANGE;
    struct kvfs_layer_shape s;
    kvfs_layer_shape_get(&f->hdr, layer, &s);
    *out = (struct libkvfs_layer_shape){s.n_kv_head, s.head_dim, s.rope_dim, s.kv_source};
    return 0;
}

int libkvfs_layer_f32(const struct libkvfs_file *f, uint32_t layer, float *k, float *v)
{
    if (layer >= f->info.n_layer)
        return -ERANGE;
    layer = cache_layer(f, layer);
    return kvfs_layer_decode(&f->hdr, layer, layer_at(f, layer), k, v);
}

int libkvfs_verify_layer(const struct libkvfs_file *f, uint32_t layer)
{
    if (layer >= f->info.n_layer)
        return -ERANGE;
    return kvfs_layer_verify(&f->hdr, layer, layer_at(f, layer), kvfs_layer_bytes(&f->hdr, layer));
}

const char *libkvfs_dtype_name(uint32_t dtype)
{
    return kvfs_dtype_name(dtype);
}

/* ioctl REQ on MOUNT/.kvfs/control; err names the file on failure. */
static int control_ioctl(const char *mount, unsigned long request, void *req, char *err, size_t errlen)
{
    char ctl[4096];
    if ((size_t)snprintf(ctl, sizeof(ctl), "%s/.kvfs/control", mount) >= sizeof(ctl))
        return kvfs_errf(err, errlen, -ENAMETOOLONG, "%s: mount path too long", mount);
    int fd = open(ctl, O_RDONLY | O_CLOEXEC), rc = 0;
    if (fd < 0 || ioctl(fd, request, req) != 0)
        rc = kvfs_errf(err, errlen, -errno, "%s: %s", ctl, strerror(errno));
    if (fd >= 0)
        close(fd);
    return rc;
}

/* MOUNT/REL into out[outlen] */
static int mount_path(const char *mount, const char *rel, char *out, size_t outlen)
{
    int n = snprintf(out, outlen, "%s/%s", mount, rel);
    return n >= 0 && (size_t)n < outlen ? 0 : -ENAMETOOLONG;
}

int libkvfs_blend(const char *mount, const char *recipe, char *path, size_t pathlen, uint32_t *n_tokens,
                  char *err, size_t errlen)
{
    size_t len = strlen(recipe);
    if (len > LIBKVFS_RECIPE_MAX)
        return kvfs_errf(err, errlen, -E2BIG, "recipe of %zu bytes, the ioctl takes %d", len, LIBKVFS_RECIPE_MAX);
    struct kvfs_blend_req *r = calloc(1, sizeof(*r));
    if (!r)
        return kvfs_errf(err, errlen, -ENOMEM, "%s", strerror(ENOMEM));
    r->version = KVFS_IOCTL_VERSION;
    memcpy(r->recipe, recipe, len);
    int rc = control_ioctl(mount, KVFS_IOC_BLEND, r, err, errlen);
    if (rc)
        goto out;
    if (r->status) {
        rc = r->status < 0 ? r->status : -EIO;
        r->error[sizeof(r->error) - 1] = '\0';
        for (size_t n = strlen(r->error); n && r->error[n - 1] == '\n'; n--)
            r->error[n - 1] = '\0'; /* NAME.err's text ends its line */
        kvfs_errf(err, errlen, rc, "%s", r->error[0] ? r->error : strerror(-rc));
        goto out;
    }
    r->path[sizeof(r->path) - 1] = '\0';
    if ((rc = mount_path(mount, r->path, path, pathlen))) {
        kvfs_errf(err, errlen, rc, "result path longer than %zu bytes", pathlen);
        goto out;
    }
    if (n_tokens)
        *n_tokens = r->n_tokens;
out:
    free(r);
    return rc;
}

/* One line of a batch's results: "0 TOKENS PATH" or "-ERRNO REASON". */
static void parse_result(const char *mount, char *line, struct libkvfs_blend_result *res)
{
    char *end;
    long st = strtol(line, &end, 10);
    memset(res, 0, sizeof(*res));
    if (end == line || st > 0) {
        res->status = -EPROTO;
        snprintf(res->error, sizeof(res->error), "%s", line);
        return;
    }
    res->status = (int)st;
    char *rest = *end == ' ' ? end + 1 : end;
    if (st) {
        snprintf(res->error, sizeof(res->error), "%s", rest);
        return;
    }
    unsigned long ntok = strtoul(rest, &end, 10);
    if (end == rest || *end != ' ' || mount_path(mount, end + 1, res->path, sizeof(res->path))) {
        res->status = -EPROTO;
        snprintf(res->error, sizeof(res->error), "unreadable result: %s", line);
        return;
    }
    res->n_tokens = (uint32_t)ntok;
}

int libkvfs_blend_batch(const char *mount, const char *recipes, struct libkvfs_blend_result *results,
                        int max_results, int *n_results, char *err, size_t errlen)
{
    *n_results = 0;
    size_t len = strlen(recipes);
    if (len > LIBKVFS_BATCH_BYTES)
        return kvfs_errf(err, errlen, -E2BIG, "%zu bytes of recipes, a batch takes %d", len, LIBKVFS_BATCH_BYTES);
    struct kvfs_blend_batch_req *r = calloc(1, sizeof(*r));
    if (!r)
        return kvfs_errf(err, errlen, -ENOMEM, "%s", strerror(ENOMEM));
    r->version = KVFS_IOCTL_VERSION;
    memcpy(r->recipes, recipes, len);
    int rc = control_ioctl(mount, KVFS_IOC_BLEND_BATCH, r, err, errlen);
    if (rc)
        goto out;
    r->results[sizeof(r->results) - 1] = '\0';
    char *save = NULL;
    for (char *line = strtok_r(r->results, "\n", &save); line && *n_results < max_results;
         line = strtok_r(NULL, "\n", &save))
        parse_result(mount, line, &results[(*n_results)++]);
    rc = r->status < 0 ? r->status : r->status ? -EIO : 0;
    if (rc)
        kvfs_errf(err, errlen, rc, "%s", strerror(-rc));
out:
    free(r);
    return rc;
}

int libkvfs_claim(const char *mount, const char *hash, uint32_t timeout_ms, struct libkvfs_claim *c, char *err,
                  size_t errlen)
{
    char ctl[4096];
    struct kvfs_claim_req r;
    memset(c, 0, sizeof(*c));
    c->fd = -1;
    if (strlen(hash) != 64)
        return kvfs_errf(err, errlen, -EINVAL, "%s: not a chunk hash (64 hex)", hash);
    if ((size_t)snprintf(ctl, sizeof(ctl), "%s/.kvfs/control", mount) >= sizeof(ctl))
        return kvfs_errf(err, errlen, -ENAMETOOLONG, "%s: mount path too long", mount);
    /* the descriptor owns the lease: closing it (or dying) ends it */
    int fd = open(ctl, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return kvfs_errf(err, errlen, -errno, "%s: %s", ctl, strerror(errno));
    int rc = 0;
    uint32_t waited = 0;
    for (;;) {
        memset(&r, 0, sizeof(r));
        r.version = KVFS_IOCTL_VERSION;
        r.op = KVFS_CLAIM_TAKE;
        r.timeout_ms = timeout_ms - waited;
        memcpy(r.hash, hash, 64);
        if (ioctl(fd, KVFS_IOC_CLAIM, &r) != 0) {
            rc = kvfs_errf(err, errlen, -errno, "%s: %s", ctl, strerror(errno));
            break;
        }
        waited += r.waited_ms;
        /* EAGAIN: the mount has as many claims waiting as it lets wait; ask again */
        if (r.status != -EAGAIN || waited + 200 >= timeout_ms)
            break;
        usleep(200 * 1000);
        waited += 200;
    }
    r.waited_ms = waited;
    if (!rc && r.status) {
        rc = r.status < 0 ? r.status : -EIO;
        r.error[sizeof(r.error) - 1] = '\0';
        kvfs_errf(err, errlen, rc, "%s", r.error[0] ? r.error : strerror(-rc));
    }
    if (rc || r.result == KVFS_CLAIM_PRESENT) {
        close(fd);
        fd = -1;
    }
    if (!rc) {
        c->fd = fd;
        c->present = r.result == KVFS_CLAIM_PRESENT;
        c->fleet = r.scope == 1;
        c->waited_ms = r.waited_ms;
    }
    return rc;
}

void libkvfs_claim_end(struct libkvfs_claim *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}
