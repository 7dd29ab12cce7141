/* remote_fetch.c - reading a chunk's object out of the pool on a local miss
 * (remote_internal.h): one operation asks for the object's size and its
 * first piece together, then the rest comes in ranged aio reads (each one
 * operation over up to 4 MiB and 64 consecutive layers), several in flight
 * at once (a single large read leaves the OSD, the wire and this
 * host idle in turn); each piece goes into the local store's temporary file
 * as it arrives, in a few reused buffers, so memory stays bounded whatever
 * the object's size and the local copy is written while the rest is still
 * on its way.  The store then decodes, verifies and moves the copy into
 * place, and hands the verified image to the reader that asked. */
#include "remote.h"

#ifdef KVFS_HAVE_RADOS
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <stdio.h>
#include <time.h>

#include <sys/mman.h>
#include <sys/uio.h>

#include "image.h"
#include "object.h"
#include "remote_internal.h"

#define FIRST_BYTES (1u << 20) /* read with the size: holds the prefix of any usual chunk */
#define PIECE_BYTES (4u << 20) /* one ranged read after it */
#define IN_FLIGHT 8            /* reads outstanding at once: 32 MiB of buffers at most */
#define MAX_EXTENTS KVFS_INCOMING_MAX_IOV /* layers one read may span (each lands at its own place) */

/* One part of a piece: object bytes that land at one place. */
struct extent {
    uint8_t *buf;
    size_t len;
    uint32_t layer; /* the image's layer it belongs to (image mode) */
    size_t got;     /* filled in by the read */
    int prval;
};

/* One ranged read: the object bytes [off, off + len), as one RADOS
 * operation with one read per extent.  In image mode a piece spans
 * consecutive layers, each landing at its place in the image; a read per
 * layer instead would cost the OSD an operation per layer (a chunk of 512
 * tokens has 256-400 KiB layers: 30 operations where 2 do). */
struct piece {
    uint64_t off;
    size_t len;
    int n_ext;
    struct extent ext[MAX_EXTENTS];
    rados_read_op_t op;
    long rc;  /* the operation's result, once done */
    int busy; /* submitted, not yet written out */
    int done;
    struct fetch_pipe *p;
};

struct fetch_pipe {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct piece slot[IN_FLIGHT];
};

/* Where the rest of the object goes.  Image mode (every frame raw, the
 * frames tiling the object after its prefix): each read lands in the
 * image at its layers' places and is written to the local copy from there,
 * and a layer is checked against its checksum as soon as all of it came.
 * Otherwise each read lands in a slot buffer, written to the local copy,
 * which the store decodes at the end. */
struct plan {
    uint64_t next, size;     /* next object byte to ask for; the object's bytes */
    uint8_t *slot_buf[IN_FLIGHT];
    /* image mode */
    uint8_t *img;
    const struct kvfs_obj_info *info;
    const struct kvfs_header *hdr;
    uint32_t layer;          /* the layer next belongs to */
    uint64_t *left;          /* bytes of each layer still to come */
    /* KVFS_FETCH_PROFILE: seconds spent waiting for replies, writing the
     * local copy, checking layers; reads sent */
    double wait_s, write_s, verify_s;
    unsigned reads;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void piece_done(rados_completion_t c, void *arg)
{
    struct piece *pc = arg;
    long rc = rados_aio_get_return_value(c);
    rados_aio_release(c); /* allowed once the callback runs */
    pthread_mutex_lock(&pc->p->mu);
    pc->rc = rc;
    pc->done = 1;
    pthread_cond_signal(&pc->p->cv);
    pthread_mutex_unlock(&pc->p->mu);
}

/* layer l's bytes, and where it starts in the image (layers differ in size
 * in a LAYER_SHAPES chunk: gemma4's; a shared-KV layer has none) */
static uint64_t layer_bytes(const struct plan *pl, uint32_t l) { return kvfs_layer_bytes(pl->hdr, l); }
static uint8_t *layer_at(const struct plan *pl, uint32_t l) { return pl->img + kvfs_layer_offset(pl->hdr, l); }

/* The next range to read into slot i: 0, or 1 when everything is asked for. */
static int plan_next(struct plan *pl, int i, struct piece *pc)
{
    if (pl->next >= pl->size)
        return 1;
    pc->off = pl->next;
    pc->len = 0;
    pc->n_ext = 0;
    if (!pl->img) { /* one extent, into the slot's buffer */
        pc->len = pl->size - pl->next > PIECE_BYTES ? PIECE_BYTES : (size_t)(pl->size - pl->next);
        pc->ext[pc->n_ext++] = (struct extent){.buf = pl->slot_buf[i], .len = pc->len};
        pl->next += pc->len;
        return 0;
    }
    /* image mode: consecutive layers (the frames are raw, back to back),
     * up to a piece's bytes, each extent within one layer */
    while (pl->next < pl->size && pc->len < PIECE_BYTES && pc->n_ext < MAX_EXTENTS) {
        while (pl->next >= pl->info->frames[pl->layer].offset + layer_bytes(pl, pl->layer))
            pl->layer++;
        uint64_t in_layer = pl->next - pl->info->frames[pl->layer].offset, lb = layer_bytes(pl, pl->layer);
        size_t len = PIECE_BYTES - pc->len;
        if (len > lb - in_layer)
            len = (size_t)(lb - in_layer);
        pc->ext[pc->n_ext++] =
            (struct extent){.buf = layer_at(pl, pl->layer) + in_layer, .len = len, .layer = pl->layer};
        pc->len += len;
        pl->next += len;
    }
    return 0;
}

static int submit(rados_ioctx_t io, const char *hash, struct piece *pc)
{
    rados_completion_t c;
    if (!(pc->op = rados_create_read_op()))
        return -ENOMEM;
    int rc = rados_aio_create_completion2(pc, piece_done, &c);
    if (rc < 0) {
        rados_release_read_op(pc->op);
        return rc;
    }
    uint64_t off = pc->off;
    for (int e = 0; e < pc->n_ext; e++) {
        struct extent *x = &pc->ext[e];
        x->got = 0;
        x->prval = 0;
        rados_read_op_read(pc->op, off, x->len, (char *)x->buf, &x->got, &x->prval);
        off += x->len;
    }
    pc->rc = 0;
    pc->done = 0;
    pc->busy = 1;
    if ((rc = rados_aio_read_op_operate(pc->op, io, c, hash, 0)) < 0) {
        pc->busy = 0;
        rados_aio_release(c);
        rados_release_read_op(pc->op);
        pc->op = NULL;
    }
    return rc;
}

/* A layer all of whose bytes are in the image: its checksum, its padding. */
static int layer_complete(struct plan *pl, uint32_t l, char *err, size_t errlen)
{
    uint8_t *p = layer_at(pl, l), *end = layer_at(pl, l + 1);
    uint64_t lb = layer_bytes(pl, l);
    if (kvfs_layer_verify(pl->hdr, l, p, lb))
        return kvfs_errf(err, errlen, -EBADMSG, "bad object: layer %u: checksum mismatch or corrupt frame", l);
    memset(p + lb, 0, (size_t)(end - p - lb));
    return 0;
}

/* A piece arrived (outside the pipe's lock): into the local copy, and in
 * image mode each layer checked once complete. */
static int piece_arrived(struct plan *pl, struct kvfs_store_incoming *in, struct piece *pc, char *err, size_t errlen)
{
    struct iovec iov[MAX_EXTENTS];
    rados_release_read_op(pc->op);
    pc->op = NULL;
    if (pc->rc < 0)
        return (int)pc->rc;
    for (int e = 0; e < pc->n_ext; e++) {
        if (pc->ext[e].prval < 0)
            return pc->ext[e].prval;
        if (pc->ext[e].got != pc->ext[e].len)
            return -EIO; /* short: the object changed, or a broken reply */
        iov[e] = (struct iovec){.iov_base = pc->ext[e].buf, .iov_len = pc->ext[e].len};
    }
    double t0 = now_s();
    int rc = kvfs_store_incoming_writev(in, iov, pc->n_ext, pc->off, err, errlen);
    double t1 = now_s();
    pl->write_s += t1 - t0;
    for (int e = 0; e < pc->n_ext && !rc && pl->img; e++)
        if ((pl->left[pc->ext[e].layer] -= pc->ext[e].len) == 0)
            rc = layer_complete(pl, pc->ext[e].layer, err, errlen);
    pl->verify_s += now_s() - t1;
    return rc;
}

/* Stream the rest of the object as planned, IN_FLIGHT reads at once.  On an
 * error it stops asking and waits for the reads still out (their buffers
 * are freed after).  0 or -errno. */
static int stream_rest(rados_ioctx_t io, const char *hash, struct plan *pl, struct kvfs_store_incoming *in,
                       char *err, size_t errlen)
{
    struct fetch_pipe p;
    int rc = 0, n_busy = 0, n_slots = 0;
    memset(&p, 0, sizeof(p));
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.cv, NULL);
    for (; n_slots < IN_FLIGHT && (uint64_t)n_slots * PIECE_BYTES < pl->size - pl->next; n_slots++) {
        p.slot[n_slots].p = &p;
        if (!pl->img && !(pl->slot_buf[n_slots] = malloc(PIECE_BYTES))) {
            rc = -ENOMEM;
            goto out;
        }
    }
    pthread_mutex_lock(&p.mu);
    for (;;) {
        /* keep every free slot reading while there is more to read */
        for (int i = 0; i < n_slots && !rc; i++) {
            if (p.slot[i].busy)
                continue;
            if (plan_next(pl, i, &p.slot[i]))
                break;
            if ((rc = submit(io, hash, &p.slot[i])) == 0) {
                n_busy++;
                pl->reads++;
            }
        }
        if (!n_busy)
            break;
        struct piece *pc = NULL;
        while (!pc) {
            for (int i = 0; i < n_slots && !pc; i++)
                if (p.slot[i].busy && p.slot[i].done)
                    pc = &p.slot[i];
            if (!pc) {
                double t0 = now_s();
                pthread_cond_wait(&p.cv, &p.mu);
                pl->wait_s += now_s() - t0;
            }
        }
        pthread_mutex_unlock(&p.mu);
        /* written and checked outside the lock: the other reads keep arriving */
        if (!rc) {
            rc = piece_arrived(pl, in, pc, err, errlen);
        } else {
            rados_release_read_op(pc->op);
            pc->op = NULL;
        }
        pthread_mutex_lock(&p.mu);
        pc->busy = 0;
        n_busy--;
    }
    pthread_mutex_unlock(&p.mu);
out:
    for (int i = 0; i < n_slots; i++)
        free(pl->slot_buf[i]);
    pthread_mutex_destroy(&p.mu);
    pthread_cond_destroy(&p.cv);
    return rc;
}

/* Image mode, if the object allows it (every frame raw, back to back after
 * the prefix, the prefix within the first piece): the image, its header
 * copied in, and the frame bytes the first piece holds copied to their
 * layers; 0 = image mode ready, 1 = not this object, -errno. */
static int plan_image(struct plan *pl, const uint8_t *first, size_t got, uint64_t size,
                      const struct kvfs_obj_info *info, const uint8_t *hb, const struct kvfs_header *hdr,
                      char *err, size_t errlen)
{
    uint64_t pos = info->header_offset + info->header_size;
    pl->hdr = hdr;
    for (uint32_t l = 0; l < info->n_layer; l++) {
        if (info->frames[l].codec != KVFS_CODEC_RAW || info->frames[l].offset != pos)
            return 1;
        pos += layer_bytes(pl, l);
    }
    if (pos != size || info->header_offset + info->header_size > got)
        return 1;
    size_t huge = (size_t)2 << 20, align = info->logical_size >= 2 * huge ? huge : KVFS_ALIGN;
    if (!(pl->left = malloc(sizeof(*pl->left) * info->n_layer)) ||
        kvfs_img_alloc(info->logical_size, align, &pl->img)) {
        free(pl->left);
        pl->left = NULL;
        return kvfs_errf(err, errlen, -ENOMEM, "no memory for a %llu-byte image",
                         (unsigned long long)info->logical_size);
    }
#ifdef MADV_HUGEPAGE
    if (align == huge)
        madvise(pl->img, info->logical_size & ~(huge - 1), MADV_HUGEPAGE);
#endif
    memcpy(pl->img, hb, info->header_size);
    pl->info = info;
    int rc = 0;
    for (uint32_t l = 0; l < info->n_layer; l++) {
        uint64_t off = info->frames[l].offset, have = got > off ? got - off : 0;
        uint64_t lb = layer_bytes(pl, l);
        if (have > lb)
            have = lb;
        memcpy(layer_at(pl, l), first + off, (size_t)have);
        pl->left[l] = lb - have;
        if (!pl->left[l] && !rc)
            rc = layer_complete(pl, l, err, errlen);
    }
    return rc;
}

int remote_fetch_object(rados_ioctx_t io, const char *hash, struct kvfs_store *s, struct kvfs_chunk_ref **ref,
                        uint64_t *size_out, char *err, size_t errlen)
{
    uint64_t size = 0;
    time_t mtime;
    size_t got = 0;
    int stat_rc = 0, read_rc = 0, rc;
    struct kvfs_store_incoming in = {.fd = -1};
    struct plan pl = {0};
    struct kvfs_obj_info info = {0};
    struct kvfs_header hdr;
    uint8_t *hb = NULL;
    char why[256];
    err[0] = '\0';
    double t_start = now_s(), t_first = 0, t_stream = 0;
    uint8_t *first = malloc(FIRST_BYTES);
    if (!first)
        return -ENOMEM;
    /* the size and the first piece in one round trip (a name the pool lacks
     * costs this one operation, as a stat did) */
    rados_read_op_t op = rados_create_read_op();
    if (!op) {
        free(first);
        return -ENOMEM;
    }
    rados_read_op_stat(op, &size, &mtime, &stat_rc);
    rados_read_op_read(op, 0, FIRST_BYTES, (char *)first, &got, &read_rc);
    rc = rados_read_op_operate(op, io, hash, 0);
    rados_release_read_op(op);
    if (!rc)
        rc = stat_rc < 0 ? stat_rc : read_rc < 0 ? read_rc : 0;
    if (!rc && got != (size < FIRST_BYTES ? size : FIRST_BYTES))
        rc = -EIO; /* short: the object changed under us, or a broken reply */
    *size_out = size;
    t_first = now_s();
    if (rc)
        goto out;
    if ((rc = kvfs_store_incoming_open(s, hash, &in, err, errlen)) ||
        (rc = kvfs_store_incoming_write(&in, first, got, 0, err, errlen)))
        goto out;
    pl.next = got;
    pl.size = size;
    /* the prefix, from the local copy's first bytes; an object this cannot
     * read goes the general way, where the store says what is wrong */
    int image = kvfs_obj_read_prefix(in.fd, size, &info, &hb, &hdr, why, sizeof(why)) == 0 ? 0 : 1;
    if (!image && (image = plan_image(&pl, first, got, size, &info, hb, &hdr, err, errlen)) < 0) {
        rc = image;
        goto out;
    }
    free(first);
    first = NULL;
    if ((rc = stream_rest(io, hash, &pl, &in, err, errlen)))
        goto out;
    t_stream = now_s();
    /* every byte here (and in image mode checked): make durable, move into place */
    if (image == 0) {
        rc = kvfs_store_incoming_finish_image(&in, size, hash, pl.img, info.logical_size, ref, err, errlen);
        pl.img = NULL; /* taken */
    } else {
        rc = kvfs_store_incoming_finish(&in, size, hash, ref, err, errlen);
    }
    if (getenv("KVFS_FETCH_PROFILE"))
        fprintf(stderr,
                "kvfs: fetch %.12s %llu B: first op %.4f s, rest %.4f s in %u reads (replies awaited %.4f, local copy "
                "written %.4f, layers checked %.4f), finish %.4f s (%s mode), done at %.4f\n",
                hash, (unsigned long long)size, t_first - t_start, t_stream - t_first, pl.reads, pl.wait_s, pl.write_s,
                pl.verify_s, now_s() - t_stream, image == 0 ? "image" : "file", now_s());
out:
    if (pl.img)
        kvfs_img_free(pl.img);
    free(pl.left);
    free(hb);
    kvfs_obj_info_free(&info);
    free(first);
    kvfs_store_incoming_abort(&in);
    return rc;
}
#endif
