/* remote_populate.c - fill a RADOS pool with N small synthetic chunks, fast,
 * exactly as kvfs uploads them (remote_format.h: the object, its xattrs, its
 * model's index entry and use key, the model registered), so a mount lists
 * them and reads them like any other chunk.  Objects go out asynchronously
 * (a window of in-flight writes), index entries in batched omap writes.
 *
 *   remote_populate CEPH_CONF POOL NAMESPACE N [FIRST]   chunks FIRST..FIRST+N-1
 *     prints "populated N chunks of model ID in S s"; NAMESPACE "-" is the default
 *   remote_populate --chunk I OUT                         chunk I's file image to OUT
 *                                                         (and its name on stdout)
 *   remote_populate --names FIRST N                       the names of chunks FIRST..FIRST+N-1
 * Chunk I is a 1-layer f16 chunk of 2 tokens (I's low and high 32 bits)
 * with values derived from I: the same bytes on every run. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chunk_info.h"
#include "kvformat.h"
#include "object.h"
#include "remote_format.h"

#define WINDOW 256       /* writes in flight */
#define INDEX_BATCH 1000 /* chunks per index write (2 keys each) */

struct synth {
    uint8_t *obj;
    size_t obj_len;
    struct kvfs_chunk_info ci;
};

static void synth_fingerprint(struct kvfs_fingerprint *fp)
{
    memset(fp, 0, sizeof(*fp));
    *fp = (struct kvfs_fingerprint){.n_layer = 1, .n_kv_head = 1, .head_dim = 8, .rope_type = 0,
                                    .rope_theta = 10000.0f, .rope_dim = 8, .n_head = 1, .n_embd = 8};
    memcpy(fp->arch, "llama", 6);
}

/* chunk i's image (w, caller frees) and its header and name */
static int synth_image(uint64_t i, struct kvfs_writer *w, struct kvfs_header *h, char hex[KVFS_HASH_HEX_LEN + 1])
{
    struct kvfs_fingerprint fp;
    synth_fingerprint(&fp);
    uint32_t tok[2] = {(uint32_t)i, (uint32_t)(i >> 32)};
    int rc = kvfs_writer_init(w, &fp, KVFS_DTYPE_F16, 0, 0, 2, tok);
    if (rc)
        return rc;
    float v[32];
    for (int k = 0; k < 32; k++)
        v[k] = (float)((i * 31 + (uint64_t)k) % 1000) / 500.0f - 1.0f;
    kvfs_f32_encode(KVFS_DTYPE_F16, v, 32, kvfs_writer_layer(w, 0));
    uint8_t digest[32];
    char why[128];
    if ((rc = kvfs_writer_finish(w)) || (rc = kvfs_file_verify(w->buf, w->size, h, why, sizeof(why))) ||
        (rc = kvfs_content_hash(h, digest))) {
        kvfs_writer_free(w);
        return rc;
    }
    kvfs_hash_to_hex(digest, hex);
    return 0;
}

/* chunk i as the pool holds it: the store object (raw frames) and its row */
static int synth_chunk(uint64_t i, struct synth *c)
{
    struct kvfs_writer w;
    struct kvfs_header h;
    char hex[KVFS_HASH_HEX_LEN + 1];
    int rc = synth_image(i, &w, &h, hex);
    if (rc)
        return rc;
    rc = kvfs_obj_encode(w.buf, &h, 0, &c->obj, &c->obj_len);
    if (!rc)
        kvfs_info_from_header(&h, hex, c->obj_len, &c->ci);
    kvfs_writer_free(&w);
    return rc;
}

struct window {
    rados_completion_t c[WINDOW];
    int used[WINDOW];
    unsigned next;
    int err;
};

/* slot k's write waited for, its first error kept */
static void window_reap(struct window *win, unsigned k)
{
    if (!win->used[k])
        return;
    rados_aio_wait_for_complete(win->c[k]);
    int rc = rados_aio_get_return_value(win->c[k]);
    if (rc < 0 && !win->err)
        win->err = rc;
    rados_aio_release(win->c[k]);
    win->used[k] = 0;
}

/* a free slot, waiting for the oldest write when all are in flight */
static rados_completion_t *window_slot(struct window *win)
{
    unsigned k = win->next++ % WINDOW;
    window_reap(win, k);
    if (rados_aio_create_completion2(NULL, NULL, &win->c[k]) < 0)
        return NULL;
    win->used[k] = 1;
    return &win->c[k];
}

static int window_drain(struct window *win)
{
    for (unsigned k = 0; k < WINDOW; k++)
        window_reap(win, k);
    return win->err;
}

/* an omap write of n keys to oid, in the window */
static int omap_write(rados_ioctx_t io, struct window *win, const char *oid, char *const *keys, char *const *vals,
                      const size_t *lens, size_t n)
{
    rados_completion_t *c = window_slot(win);
    if (!c)
        return -ENOMEM;
    rados_write_op_t op = rados_create_write_op();
    rados_write_op_omap_set(op, (const char *const *)keys, (const char *const *)vals, lens, n);
    int rc = rados_aio_write_op_operate(op, io, *c, oid, NULL, 0);
    rados_release_write_op(op); /* librados copied what it needs */
    return rc;
}

static int populate(rados_ioctx_t io, uint64_t first, uint64_t n, char model[17])
{
    static char keys[2 * INDEX_BATCH][KVFS_HASH_HEX_LEN + 3], vals[2 * INDEX_BATCH][128];
    char *kp[2 * INDEX_BATCH], *vp[2 * INDEX_BATCH];
    size_t lens[2 * INDEX_BATCH], nk = 0;
    char oid[KVFS_REMOTE_OID_MAX] = "";
    struct window win = {0};
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    int rc = 0;
    for (size_t k = 0; k < 2 * INDEX_BATCH; k++)
        kp[k] = keys[k], vp[k] = vals[k];
    for (uint64_t i = first; i < first + n && !rc && !win.err; i++) {
        struct synth c;
        if ((rc = synth_chunk(i, &c)))
            break;
        if (!oid[0]) {
            memcpy(model, c.ci.model, 17);
            kvfs_remote_index_oid(model, oid);
        }
        rados_completion_t *slot = window_slot(&win);
        if (!slot) {
            free(c.obj);
            rc = -ENOMEM;
            break;
        }
        rados_write_op_t op = rados_create_write_op();
        kvfs_remote_object_op(op, &c.ci, c.obj, c.obj_len);
        rc = rados_aio_write_op_operate(op, io, *slot, c.ci.hash, NULL, 0);
        rados_release_write_op(op);
        snprintf(keys[nk], sizeof(keys[nk]), "%s", c.ci.hash);
        lens[nk] = kvfs_remote_index_entry(&c.ci, c.obj_len, vals[nk], sizeof(vals[nk]));
        nk++;
        lens[nk] = kvfs_remote_use_key(c.ci.hash, ms, keys[nk], vals[nk], sizeof(vals[nk]));
        nk++;
        free(c.obj);
        if (!rc && nk == 2 * INDEX_BATCH) {
            rc = omap_write(io, &win, oid, kp, vp, lens, nk);
            nk = 0;
        }
        if ((i - first + 1) % 100000 == 0)
            fprintf(stderr, "remote_populate: %llu/%llu\n", (unsigned long long)(i - first + 1),
                    (unsigned long long)n);
    }
    if (!rc && nk)
        rc = omap_write(io, &win, oid, kp, vp, lens, nk);
    if (!rc && oid[0]) { /* the registry, so hosts find the index */
        char mk[17], mv[1] = "";
        char *mkp[1] = {mk}, *mvp[1] = {mv};
        size_t ml[1] = {0};
        memcpy(mk, model, 17);
        rc = omap_write(io, &win, KVFS_REMOTE_MODELS_OID, mkp, mvp, ml, 1);
    }
    int drc = window_drain(&win);
    return rc ? rc : drc;
}

/* chunk i's image into path (none: only its name printed), its name printed */
static int write_chunk_file(uint64_t i, const char *path)
{
    struct kvfs_writer w;
    struct kvfs_header h;
    char hex[KVFS_HASH_HEX_LEN + 1];
    int rc = synth_image(i, &w, &h, hex);
    if (rc)
        return rc;
    FILE *f = path ? fopen(path, "wb") : NULL;
    if (path && (!f || fwrite(w.buf, 1, w.size, f) != w.size))
        rc = -EIO;
    if (f && fclose(f))
        rc = -EIO;
    kvfs_writer_free(&w);
    if (!rc)
        printf("%s\n", hex);
    return rc;
}

static int print_names(uint64_t first, uint64_t n)
{
    int rc = 0;
    for (uint64_t i = first; i < first + n && !rc; i++)
        rc = write_chunk_file(i, NULL);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "--chunk"))
        return write_chunk_file(strtoull(argv[2], NULL, 10), argv[3]) ? 1 : 0;
    if (argc == 4 && !strcmp(argv[1], "--names"))
        return print_names(strtoull(argv[2], NULL, 10), strtoull(argv[3], NULL, 10)) ? 1 : 0;
    if (argc != 5 && argc != 6) {
        fprintf(stderr, "usage: remote_populate CEPH_CONF POOL NAMESPACE N [FIRST]\n"
                        "       remote_populate --chunk I OUT\n"
                        "       remote_populate --names FIRST N\n");
        return 2;
    }
    uint64_t n = strtoull(argv[4], NULL, 10), first = argc == 6 ? strtoull(argv[5], NULL, 10) : 0;
    rados_t cl;
    rados_ioctx_t io;
    int rc;
    if ((rc = rados_create(&cl, NULL)) < 0) {
        fprintf(stderr, "remote_populate: rados_create: %s\n", strerror(-rc));
        return 1;
    }
    /* a bulk load on a busy cluster: an op waits as long as it takes (the
     * config's bounds are for a mount's calls) */
    if ((rc = rados_conf_read_file(cl, argv[1])) < 0 || (rc = rados_conf_set(cl, "rados_osd_op_timeout", "0")) < 0 ||
        (rc = rados_conf_set(cl, "rados_mon_op_timeout", "60")) < 0 || (rc = rados_connect(cl)) < 0 ||
        (rc = rados_ioctx_create(cl, argv[2], &io)) < 0) {
        fprintf(stderr, "remote_populate: cannot reach pool %s: %s\n", argv[2], strerror(-rc));
        rados_shutdown(cl);
        return 1;
    }
    if (strcmp(argv[3], "-"))
        rados_ioctx_set_namespace(io, argv[3]);
    struct timespec t0, t1;
    char model[17] = "";
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rc = populate(io, first, n, model);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    rados_ioctx_destroy(io);
    rados_shutdown(cl);
    if (rc) {
        fprintf(stderr, "remote_populate: %s\n", strerror(-rc));
        return 1;
    }
    printf("populated %llu chunks of model %s in %.1f s\n", (unsigned long long)n, model,
           (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9);
    return 0;
}
