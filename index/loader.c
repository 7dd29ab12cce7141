/* loader.c - layer-wise streaming of chunk layers (see loader.h). */
#include "loader.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#include "object.h"
#include "parallel.h"

/* How a streaming buffer is page-locked: its unlock and that's argument
 * (unpin NULL: it is not) */
struct buf_pin {
    void (*unpin)(void *arg, void *p);
    void *arg;
    int refused; /* the hook refused it once: not asked again while it is kept */
};

struct ld_chunk {
    struct kvfs_header h;
    uint8_t *hdr_buf;            /* disk: the header region h points into */
    struct kvfs_obj_info info;   /* disk: frame table */
    int fd;                      /* disk: object; -1 for RAM/in-memory */
    struct kvfs_chunk_ref *ram;  /* RAM tier handle, or NULL */
    const uint8_t *image;        /* RAM / in-memory image, or NULL */
    uint8_t *layers;             /* disk: n_layer x lbytes decoded layers */
    uint8_t *stage;              /* disk: compressed frames land here */
    size_t layers_len, stage_len;
    uint64_t *stage_off;         /* per layer offset into stage (zstd frames) */
    uint64_t *loff;              /* n_layer + 1: layer l's bytes are [loff[l], loff[l + 1]) of layers */
    /* disk, read with O_DIRECT: each layer's frame in a slot of dbuf that
     * starts and ends on DIRECT_ALIGN, the frame dhead[l] bytes into it */
    int direct;
    int buffered_fd;             /* direct: the object's buffered descriptor, kept for a read O_DIRECT
                                    refuses (EINVAL: an alignment the device wants beyond ours) */
    int dio_refused;             /* it was: reads go through buffered_fd, swapped into fd */
    uint8_t *dbuf;
    size_t dbuf_len;
    struct buf_pin layers_pin, stage_pin, dbuf_pin; /* how each buffer is page-locked (kvfs_loader_set_pin) */
    uint64_t *doff;
    uint32_t *dhead;
    /* remote tier (RADOS): the whole object is assembled here by ranged
     * async reads in layer order, then stored locally at close */
    int remote;
    char hash[KVFS_HASH_HEX_LEN + 1];
    uint8_t *obj;
    uint64_t obj_size;
};

/* streamed = read by this loader (from a local object or from RADOS) */
static int streamed(const struct ld_chunk *c) { return c->fd >= 0 || c->remote; }

/* one frame read: chunk c, layer l, bytes [done, len) of [off, off + len)
 * to read into dst, complete once `need` have come (an O_DIRECT read asks
 * for whole aligned blocks and may stop short at the object's end); the
 * frame itself starts `head` bytes into dst */
struct ld_read {
    int c, l;
    uint8_t *dst;
    uint64_t off, len, done;
    int buf_index;
    uint32_t head;
    uint64_t need;
    int direct;
};

/* O_DIRECT's alignment of offsets, lengths and buffers: the largest logical
 * block size in use */
#define DIRECT_ALIGN 4096u

/* A raw frame read from an object into a buffer of its own (remote, O_DIRECT)
 * sits at its object offset's alignment: used where it landed when that
 * suits any element type (16 bytes, as a layer's place in `layers`), else
 * copied there by the worker (frames are packed: a raw frame after a zstd
 * one starts anywhere) */
#define FRAME_ALIGN 16u
static int raw_in_place(const struct ld_chunk *c, int l)
{
    return (c->remote || c->direct) && c->info.frames[l].codec == KVFS_CODEC_RAW &&
           c->info.frames[l].offset % FRAME_ALIGN == 0;
}

struct kvfs_loader {
    int n, n_layer, first, started, stop;
    struct kvfs_store *store;
    struct kvfs_store_remote rh; /* the store's remote tier (its read hooks), if any */
    int remote;                  /* there is one */
    int remote_in_flight, remote_left, remote_failed;
    pthread_t rio;
    int rio_started;
    struct ld_chunk *ch;
    struct kvfs_loader_opts o;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int *ready;                  /* per layer: chunks verified */
    int *layer_rc;               /* per layer: first error (a frame failed) */
    char (*why)[256];            /* per layer: what was wrong */
    /* decode/verify jobs for the workers */
    struct ld_read *jobs;
    int n_jobs, next_job, jobs_total;
    pthread_t io, *workers;
    int n_workers_started, io_started;
    struct kvfs_loader_stats st;
    double t_start, t_done;
};

/* Big streaming buffers are kept for the next loader (up to BUF_KEEP
 * bytes): fresh memory costs a page fault and zeroing per 4 KiB, which for a
 * large model's chunks (hundreds of MB) takes longer than reading them, and
 * registering fresh buffers with io_uring would fault them all before the
 * first read.  Reused buffers are already resident. */
#define BUF_KEEP ((size_t)1 << 30)
#define BUF_SLOTS 32
static pthread_mutex_t buf_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    void *p;
    size_t len;
    struct buf_pin pin;
} buf_kept[BUF_SLOTS];
static size_t buf_kept_bytes;
/* kvfs_loader_set_pin's hook (under buf_mu) */
static int (*pin_fn)(void *, void *, size_t);
static void *pin_fn_arg, *unpin_fn_arg;
static void (*unpin_fn)(void *, void *);

static size_t buf_round(size_t len) { return (len + 4095) & ~(size_t)4095; }

/* a buffer given back for good: page-locked no more, unmapped */
static void buf_release(void *p, size_t len, struct buf_pin pin)
{
    if (pin.unpin)
        pin.unpin(pin.arg, p);
    munmap(p, len);
}

/* page-locked through the hook (a GPU backend's host_register), if one is
 * set and the buffer is not yet: the device then copies a layer straight
 * from it by DMA.  Kept buffers stay page-locked for the next loader. */
static void buf_lock(void *p, size_t len, struct buf_pin *pin)
{
    if (!p || pin->unpin || pin->refused)
        return;
    pthread_mutex_lock(&buf_mu);
    int (*fn)(void *, void *, size_t) = pin_fn;
    void *arg = pin_fn_arg, *uarg = unpin_fn_arg;
    void (*ufn)(void *, void *) = unpin_fn;
    pthread_mutex_unlock(&buf_mu);
    if (fn && ufn)
        *pin = fn(arg, p, len) == 0 ? (struct buf_pin){ufn, uarg, 0} : (struct buf_pin){NULL, NULL, 1};
}

/* *len: the size wanted; set to the size of the buffer returned; *pin: how
 * it is page-locked (a kept buffer may be) */
static void *buf_get(size_t *lenp, struct buf_pin *pin)
{
    *pin = (struct buf_pin){0};
    size_t len = buf_round(*lenp);
    *lenp = len;
    pthread_mutex_lock(&buf_mu);
    int best = -1;
    for (int i = 0; i < BUF_SLOTS; i++) /* the smallest kept buffer that fits, at most 2x too big */
        if (buf_kept[i].p && buf_kept[i].len >= len && buf_kept[i].len <= 2 * len &&
            (best < 0 || buf_kept[i].len < buf_kept[best].len))
            best = i;
    if (best >= 0) {
        void *p = buf_kept[best].p;
        *lenp = buf_kept[best].len;
        *pin = buf_kept[best].pin;
        buf_kept_bytes -= buf_kept[best].len;
        buf_kept[best].p = NULL;
        pthread_mutex_unlock(&buf_mu);
        return p;
    }
    pthread_mutex_unlock(&buf_mu);
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, len, MADV_HUGEPAGE); /* fewer faults where THP is available; harmless otherwise */
#endif
    return p;
}

/* len: the size buf_get reported */
static void buf_put(void *p, size_t len, struct buf_pin pin)
{
    if (!p)
        return;
    pthread_mutex_lock(&buf_mu);
    for (int i = 0; i < BUF_SLOTS && buf_kept_bytes + len <= BUF_KEEP; i++)
        if (!buf_kept[i].p) {
            buf_kept[i].p = p;
            buf_kept[i].len = len;
            buf_kept[i].pin = pin;
            buf_kept_bytes += len;
            pthread_mutex_unlock(&buf_mu);
            return;
        }
    pthread_mutex_unlock(&buf_mu);
    buf_release(p, len, pin);
}

/* every kept buffer taken out of the list (under buf_mu) into out[]; its count */
static int take_kept_locked(void **p, size_t *len, struct buf_pin *pin)
{
    int n = 0;
    for (int i = 0; i < BUF_SLOTS; i++)
        if (buf_kept[i].p) {
            p[n] = buf_kept[i].p, len[n] = buf_kept[i].len, pin[n++] = buf_kept[i].pin;
            buf_kept[i].p = NULL;
        }
    buf_kept_bytes = 0;
    return n;
}

/* released outside the lock: unlocking a GiB takes a while, and a blend
 * starting meanwhile must not wait for it */
static void release_all(void **p, size_t *len, struct buf_pin *pin, int n)
{
    for (int i = 0; i < n; i++)
        buf_release(p[i], len[i], pin[i]);
}

void kvfs_loader_trim(void)
{
    void *p[BUF_SLOTS];
    size_t len[BUF_SLOTS];
    struct buf_pin pin[BUF_SLOTS];
    pthread_mutex_lock(&buf_mu);
    int n = take_kept_locked(p, len, pin);
    pthread_mutex_unlock(&buf_mu);
    release_all(p, len, pin, n);
}

void kvfs_loader_set_pin(int (*pin)(void *arg, void *p, size_t n), void *pin_arg, void (*unpin)(void *arg, void *p),
                         void *unpin_arg)
{
    void *kp[BUF_SLOTS];
    size_t klen[BUF_SLOTS];
    struct buf_pin kpin[BUF_SLOTS];
    int n = 0;
    pthread_mutex_lock(&buf_mu);
    if (!pin || !unpin) /* off: what was locked through the old hook is let go (no loader runs: the caller's word) */
        n = take_kept_locked(kp, klen, kpin);
    pin_fn = pin && unpin ? pin : NULL;
    unpin_fn = pin && unpin ? unpin : NULL;
    pin_fn_arg = pin_arg;
    unpin_fn_arg = unpin_arg;
    pthread_mutex_unlock(&buf_mu);
    release_all(kp, klen, kpin, n);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Record the first error of a layer (-1: every layer) and wake waiters.
 * Errors are per layer: the layers before a bad one still arrive. */
static void fail(struct kvfs_loader *ld, int layer, int rc, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void fail(struct kvfs_loader *ld, int layer, int rc, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&ld->lock);
    int logged = 0;
    for (int l = layer < 0 ? 0 : layer; l < (layer < 0 ? ld->n_layer : layer + 1); l++) {
        if (ld->layer_rc[l])
            continue;
        ld->layer_rc[l] = rc;
        snprintf(ld->why[l], sizeof(ld->why[l]), "%s", msg);
        if (!logged++)
            kvfs_log(KVFS_LOG_ERR, "loader: %s", msg);
    }
    pthread_cond_broadcast(&ld->cond);
    pthread_mutex_unlock(&ld->lock);
}

static void layer_done(struct kvfs_loader *ld, int l)
{
    pthread_mutex_lock(&ld->lock);
    if (++ld->ready[l] == ld->n && l == ld->n_layer - 1)
        ld->t_done = now_s();
    pthread_cond_broadcast(&ld->cond);
    pthread_mutex_unlock(&ld->lock);
}

/* Worker: take finished reads, decompress if needed, verify the checksum. */
static void *worker_main(void *arg)
{
    struct kvfs_loader *ld = arg;
    ZSTD_DCtx *z = ZSTD_createDCtx();
    for (;;) {
        pthread_mutex_lock(&ld->lock);
        while (!ld->stop && ld->next_job >= ld->n_jobs && ld->next_job < ld->jobs_total)
            pthread_cond_wait(&ld->cond, &ld->lock);
        if (ld->stop || ld->next_job >= ld->jobs_total) {
            pthread_mutex_unlock(&ld->lock);
            break;
        }
        struct ld_read r = ld->jobs[ld->next_job++];
        pthread_mutex_unlock(&ld->lock);
        struct ld_chunk *c = &ld->ch[r.c];
        uint64_t lbytes = c->loff[r.l + 1] - c->loff[r.l];
        uint8_t *frame = r.dst + r.head; /* the stored frame, need - head bytes */
        int zstd = c->info.frames[r.l].codec == KVFS_CODEC_ZSTD;
        int moved = !zstd && (c->remote || c->direct) && !raw_in_place(c, r.l);
        uint8_t *layer = zstd || moved ? c->layers + c->loff[r.l] : frame;
        int rc = 0;
        if (zstd) {
            size_t got = z ? ZSTD_decompressDCtx(z, layer, lbytes, frame, r.need - r.head) : 0;
            if (!z)
                rc = -ENOMEM;
            else if (ZSTD_isError(got) || got != lbytes)
                rc = -EBADMSG;
        } else if (moved) {
            memcpy(layer, frame, lbytes); /* a raw frame's stored size is its layer's (kvfs_obj_read_prefix) */
        }
        if (!rc)
            rc = kvfs_layer_verify(&c->h, (uint32_t)r.l, layer, lbytes);
        if (rc)
            fail(ld, r.l, rc, "chunk %d layer %d: %s", r.c + 1, r.l,
                 rc == -EBADMSG ? "checksum mismatch or corrupt frame" : strerror(-rc));
        else
            layer_done(ld, r.l);
    }
    ZSTD_freeDCtx(z);
    return NULL;
}

static void push_job(struct kvfs_loader *ld, const struct ld_read *r)
{
    pthread_mutex_lock(&ld->lock);
    ld->jobs[ld->n_jobs++] = *r;
    ld->st.bytes_read += r->need - r->head;
    pthread_cond_broadcast(&ld->cond);
    pthread_mutex_unlock(&ld->lock);
}

static int should_stop(struct kvfs_loader *ld)
{
    pthread_mutex_lock(&ld->lock);
    int s = ld->stop;
    pthread_mutex_unlock(&ld->lock);
    return s;
}

/* Simulated slow tier: sleep until `bytes` fit under the bandwidth cap. */
static void throttle(struct kvfs_loader *ld, uint64_t bytes)
{
    if (!ld->o.throttle_bps)
        return;
    double due = ld->t_start + (double)bytes / (double)ld->o.throttle_bps, t = now_s();
    if (due > t) {
        struct timespec ts = {(time_t)(due - t), (long)((due - t - (double)(time_t)(due - t)) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

/* r goes O_DIRECT now (its chunk's reads were not refused) */
static int odirect(const struct kvfs_loader *ld, const struct ld_read *r)
{
    return r->direct && !ld->ch[r->c].dio_refused;
}

/* A read O_DIRECT refused with EINVAL (the device wants an alignment past
 * DIRECT_ALIGN): that chunk's reads go through its buffered descriptor from
 * now on (the I/O thread's own fields), into the same slots; 1 if so */
static int refuse_direct(struct kvfs_loader *ld, struct ld_read *r, int err)
{
    struct ld_chunk *c = &ld->ch[r->c];
    if (err != -EINVAL || !odirect(ld, r) || c->buffered_fd < 0)
        return 0;
    int fd = c->fd;
    c->fd = c->buffered_fd;
    c->buffered_fd = fd; /* closed with the chunk: reads still in flight hold it */
    c->dio_refused = 1;
    kvfs_log(KVFS_LOG_WARN, "loader: chunk %d: O_DIRECT read refused (alignment); reading it buffered", r->c + 1);
    return 1;
}

/* max_read (tests) for this read: whole aligned blocks for O_DIRECT */
static uint64_t read_cap(const struct kvfs_loader *ld, const struct ld_read *r)
{
    uint64_t cap = ld->o.max_read;
    if (cap && odirect(ld, r))
        cap = cap < DIRECT_ALIGN ? DIRECT_ALIGN : cap / DIRECT_ALIGN * DIRECT_ALIGN;
    return cap;
}

static void prep_read(struct kvfs_loader *ld, struct io_uring *ring, struct ld_read *r, int fixed)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
    uint64_t n = r->len - r->done, cap = read_cap(ld, r);
    if (cap && n > cap)
        n = cap;
    if (fixed)
        io_uring_prep_read_fixed(sqe, ld->ch[r->c].fd, r->dst + r->done, (unsigned)n, r->off + r->done, r->buf_index);
    else
        io_uring_prep_read(sqe, ld->ch[r->c].fd, r->dst + r->done, (unsigned)n, r->off + r->done);
    io_uring_sqe_set_data(sqe, r);
}

/* The buffers to register: each disk chunk's layer area (its index in
 * buf_of[3c]), staging area (buf_of[3c + 1]) and O_DIRECT slots (buf_of[3c
 * + 2]), -1 where none; returns their count. */
static int disk_buffers(struct kvfs_loader *ld, struct iovec *iov, int *buf_of)
{
    int n_iov = 0;
    for (int c = 0; c < ld->n; c++) {
        struct ld_chunk *ch = &ld->ch[c];
        buf_of[3 * c] = buf_of[3 * c + 1] = buf_of[3 * c + 2] = -1;
        if (ch->fd < 0)
            continue;
        if (ch->direct) {
            if (ch->doff[ld->n_layer]) { /* a zero-length buffer would fail the whole registration */
                buf_of[3 * c + 2] = n_iov;
                iov[n_iov++] = (struct iovec){ch->dbuf, (size_t)ch->doff[ld->n_layer]};
            }
            continue;
        }
        buf_of[3 * c] = n_iov;
        iov[n_iov++] = (struct iovec){ch->layers, (size_t)ch->loff[ld->n_layer]};
        if (ch->stage) {
            buf_of[3 * c + 1] = n_iov;
            iov[n_iov++] = (struct iovec){ch->stage, ch->stage_off[ld->n_layer]};
        }
    }
    return n_iov;
}

/* Every disk chunk's frames for layers first.., in layer order. */
static void plan_reads(struct kvfs_loader *ld, struct ld_read *reads, const int *buf_of)
{
    int k = 0;
    for (int l = ld->first; l < ld->n_layer; l++)
        for (int c = 0; c < ld->n; c++) {
            struct ld_chunk *ch = &ld->ch[c];
            if (ch->fd < 0)
                continue;
            const struct kvfs_obj_frame *f = &ch->info.frames[l];
            int z = f->codec == KVFS_CODEC_ZSTD;
            if (ch->direct) { /* whole aligned blocks around the frame, into its slot */
                uint32_t head = ch->dhead[l];
                reads[k++] = (struct ld_read){c, l, ch->dbuf + ch->doff[l], f->offset - head,
                                              ch->doff[l + 1] - ch->doff[l], 0, buf_of[3 * c + 2], head,
                                              head + f->stored_size, 1};
                if (!f->stored_size)
                    reads[k - 1].len = 0; /* nothing stored: nothing to read */
                continue;
            }
            reads[k++] = (struct ld_read){c, l, z ? ch->stage + ch->stage_off[l] : ch->layers + ch->loff[l],
                                          f->offset, f->stored_size, 0, buf_of[3 * c + z], 0, f->stored_size, 0};
        }
}

/* Without io_uring: one frame with plain preads (short reads continue
 * where they stopped), then to the workers or failed. */
static void pread_frame(struct kvfs_loader *ld, struct ld_read *r)
{
    int rc = 0;
    uint64_t cap = read_cap(ld, r);
    while (r->done < r->need && !rc) {
        uint64_t n = r->len - r->done;
        if (cap && n > cap)
            n = cap;
        if (odirect(ld, r) && r->done % DIRECT_ALIGN) { /* an O_DIRECT read stopped mid-block: the object ended */
            rc = -EIO;
            break;
        }
        ssize_t got = pread(ld->ch[r->c].fd, r->dst + r->done, n, (off_t)(r->off + r->done));
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0 && refuse_direct(ld, r, -errno))
            continue;
        rc = got < 0 ? -errno : got == 0 ? -EIO : 0;
        if (!rc)
            r->done += (uint64_t)got;
    }
    if (rc)
        fail(ld, r->l, rc, "chunk %d layer %d: %s", r->c + 1, r->l, rc == -EIO ? "object truncated" : strerror(-rc));
    else
        push_job(ld, r);
}

/* One completion: the frame read (to the workers) or failed, 1; or short,
 * the rest asked for, 0. */
static int reap_one(struct kvfs_loader *ld, struct io_uring *ring, struct io_uring_cqe *cqe, int fixed,
                    int *in_flight)
{
    struct ld_read *r = io_uring_cqe_get_data(cqe);
    int res = cqe->res;
    io_uring_cqe_seen(ring, cqe);
    (*in_flight)--;
    if (res < 0 && res != -EINTR && res != -EAGAIN && !refuse_direct(ld, r, res)) {
        fail(ld, r->l, res, "chunk %d layer %d: read failed: %s", r->c + 1, r->l, strerror(-res));
        return 1;
    }
    if (res > 0)
        r->done += (uint64_t)res;
    /* the object ends before its frame table says (an O_DIRECT read that
     * stopped mid-block has reached the end too) */
    if (r->done < r->need && (res == 0 || (odirect(ld, r) && r->done % DIRECT_ALIGN))) {
        fail(ld, r->l, -EIO, "chunk %d layer %d: object truncated", r->c + 1, r->l);
        return 1;
    }
    if (r->done < r->need) { /* short read: ask for the rest */
        prep_read(ld, ring, r, fixed && r->buf_index >= 0);
        (*in_flight)++;
        io_uring_submit(ring);
        return 0;
    }
    push_job(ld, r);
    return 1;
}

/* I/O thread: every disk chunk's frames for layers first.., in layer order. */
static void *io_main(void *arg)
{
    struct kvfs_loader *ld = arg;
    int n_disk = 0, total = 0;
    for (int c = 0; c < ld->n; c++)
        n_disk += ld->ch[c].fd >= 0; /* remote chunks: remote_main */
    total = n_disk * (ld->n_layer - ld->first);
    struct ld_read *reads = calloc((size_t)total + 1, sizeof(*reads));
    struct iovec *iov = calloc((size_t)ld->n * 3 + 1, sizeof(*iov));
    int *buf_of = calloc((size_t)ld->n * 3 + 1, sizeof(int));
    struct io_uring ring;
    int have_ring = 0, fixed = 0, rc = 0;
    if (!reads || !iov || !buf_of) {
        rc = -ENOMEM;
        goto out;
    }
    /* registered buffers: each disk chunk's layer area and staging area */
    int n_iov = disk_buffers(ld, iov, buf_of);
    unsigned depth = ld->o.queue_depth ? ld->o.queue_depth : 32;
    if (io_uring_queue_init(depth, &ring, 0) == 0) {
        have_ring = 1;
        fixed = n_iov > 0 && io_uring_register_buffers(&ring, iov, (unsigned)n_iov) == 0;
    }
    /* under the lock: a blend whose chunks all stream from the remote tier
     * reads its stats without ever waiting on this thread (a TSan report) */
    pthread_mutex_lock(&ld->lock);
    ld->st.uring = have_ring;
    pthread_mutex_unlock(&ld->lock);
    plan_reads(ld, reads, buf_of);
    uint64_t submitted_bytes = 0;
    int next = 0, in_flight = 0, completed = 0;
    while (completed < total && !rc) {
        if (should_stop(ld))
            break;
        if (!have_ring) { /* fallback: plain preads, one frame at a time */
            struct ld_read *r = &reads[next++];
            throttle(ld, submitted_bytes += r->need - r->head);
            pread_frame(ld, r);
            completed++;
            continue;
        }
        /* keep the ring full, then reap what completed */
        int queued = 0;
        while (next < total && in_flight < (int)depth) {
            struct ld_read *r = &reads[next++];
            if (!r->len) { /* a layer that stores nothing (kvfs(5), Layer shapes): nothing to read */
                push_job(ld, r);
                completed++;
                continue;
            }
            throttle(ld, submitted_bytes += r->need - r->head);
            prep_read(ld, &ring, r, fixed && r->buf_index >= 0);
            in_flight++;
            queued++;
            if (ld->o.throttle_bps)
                break; /* a throttled tier trickles in: one frame at a time */
        }
        if (queued && (rc = io_uring_submit(&ring)) < 0)
            break;
        rc = 0;
        if (!in_flight) /* only empty layers were taken: none to wait for */
            continue;
        struct io_uring_cqe *cqe;
        if ((rc = io_uring_wait_cqe(&ring, &cqe)) < 0) {
            if (rc == -EINTR) {
                rc = 0;
                continue;
            }
            break;
        }
        rc = 0;
        do
            completed += reap_one(ld, &ring, cqe, fixed, &in_flight);
        while (io_uring_peek_cqe(&ring, &cqe) == 0);
    }
    /* let in-flight reads land before their buffers can be freed */
    while (have_ring && in_flight > 0) {
        struct io_uring_cqe *cqe;
        if (io_uring_wait_cqe(&ring, &cqe) < 0)
            break;
        io_uring_cqe_seen(&ring, cqe);
        in_flight--;
    }
    /* O_DIRECT reads fill no page cache: once every read is in, the kernel
     * reads the cold objects again in the background, so the next blend of
     * them finds them warm (a buffered read, as before O_DIRECT) */
    for (int c = 0; c < ld->n && !rc && completed == total; c++)
        if (ld->ch[c].direct)
            posix_fadvise(ld->ch[c].fd, 0, 0, POSIX_FADV_WILLNEED);
out:
    if (rc)
        fail(ld, -1, rc, "layer streaming stopped: %s", strerror(-rc));
    if (have_ring)
        io_uring_queue_exit(&ring);
    free(buf_of);
    free(reads);
    free(iov);
    return NULL;
}

static int loader_alloc(int n, struct kvfs_loader **out)
{
    struct kvfs_loader *ld = calloc(1, sizeof(*ld));
    if (!ld || !(ld->ch = calloc((size_t)n, sizeof(*ld->ch)))) {
        free(ld);
        return -ENOMEM;
    }
    ld->n = n;
    for (int i = 0; i < n; i++)
        ld->ch[i].fd = ld->ch[i].buffered_fd = -1;
    pthread_mutex_init(&ld->lock, NULL);
    pthread_cond_init(&ld->cond, NULL);
    *out = ld;
    return 0;
}

/* All chunks must agree on the layer count (the blend checks the rest). */
static int loader_finish_open(struct kvfs_loader *ld, char *err, size_t errlen)
{
    ld->n_layer = (int)ld->ch[0].h.fp.n_layer;
    for (int i = 0; i < ld->n; i++) {
        if ((int)ld->ch[i].h.fp.n_layer != ld->n_layer)
            return kvfs_errf(err, errlen, -EINVAL, "chunk %d has %u layers, chunk 1 has %d", i + 1,
                             ld->ch[i].h.fp.n_layer, ld->n_layer);
        if (!(ld->ch[i].loff = calloc((size_t)ld->n_layer + 1, sizeof(uint64_t))))
            return -ENOMEM;
        for (int l = 0; l < ld->n_layer; l++) /* packed: a layer that stores nothing takes no room */
            ld->ch[i].loff[l + 1] = ld->ch[i].loff[l] + kvfs_layer_bytes(&ld->ch[i].h, (uint32_t)l);
    }
    if (!(ld->ready = calloc((size_t)ld->n_layer + 1, sizeof(int))) ||
        !(ld->layer_rc = calloc((size_t)ld->n_layer + 1, sizeof(int))) ||
        !(ld->why = calloc((size_t)ld->n_layer + 1, sizeof(*ld->why))))
        return -ENOMEM;
    return 0;
}

int kvfs_loader_open_images(const void *const *images, const size_t *lens, int n, struct kvfs_loader **out,
                            char *err, size_t errlen)
{
    struct kvfs_loader *ld;
    int rc;
    if (n < 1)
        return kvfs_errf(err, errlen, -EINVAL, "no chunks");
    if ((rc = loader_alloc(n, &ld)))
        return rc;
    for (int i = 0; i < n && !rc; i++) {
        char why[200];
        if ((rc = kvfs_header_parse(images[i], lens[i], &ld->ch[i].h, why, sizeof(why))))
            kvfs_errf(err, errlen, rc, "chunk %d: %s", i + 1, why);
        ld->ch[i].image = images[i];
    }
    if (!rc)
        rc = loader_finish_open(ld, err, errlen);
    if (rc) {
        kvfs_loader_close(ld);
        return rc;
    }
    *out = ld;
    return 0;
}

/* A chunk only the remote tier has: its object's prefix (fixed part, frame
 * table, v1 header) now, the frames later by ranged async reads. */
static int open_remote(struct kvfs_loader *ld, struct ld_chunk *c, const char *hash, char *why, size_t whylen)
{
    uint64_t size;
    int rc = ld->rh.size(ld->rh.ctx, hash, &size);
    if (rc)
        return rc == -ENOENT ? -ENOENT : kvfs_errf(why, whylen, rc, "remote tier: %s", strerror(-rc));
    if (size < KVFS_OBJ_FIXED || !(c->obj = malloc(size)))
        return kvfs_errf(why, whylen, size < KVFS_OBJ_FIXED ? -EBADMSG : -ENOMEM, "remote object of %llu bytes",
                         (unsigned long long)size);
    c->obj_size = size;
    memcpy(c->hash, hash, KVFS_HASH_HEX_LEN + 1);
    long got = ld->rh.read_range(ld->rh.ctx, hash, 0, c->obj, KVFS_OBJ_FIXED);
    if (got != KVFS_OBJ_FIXED)
        return kvfs_errf(why, whylen, got < 0 ? (int)got : -EBADMSG, "remote object: cannot read its prefix");
    uint32_t n_layer, hsize;
    memcpy(&n_layer, c->obj + 12, 4);
    memcpy(&hsize, c->obj + 24, 4);
    uint64_t prefix = KVFS_OBJ_FIXED + (uint64_t)KVFS_OBJ_ENTRY * n_layer + hsize;
    if (n_layer > 4096 || prefix > size)
        return kvfs_errf(why, whylen, -EBADMSG, "remote object %s: malformed prefix", hash);
    got = ld->rh.read_range(ld->rh.ctx, hash, 0, c->obj, prefix);
    if (got < 0 || (uint64_t)got != prefix)
        return kvfs_errf(why, whylen, got < 0 ? (int)got : -EBADMSG, "remote object: short prefix");
    /* the object parser reads from a descriptor */
    int fd = memfd_create("kvfs-remote-prefix", MFD_CLOEXEC);
    if (fd < 0)
        return -errno;
    rc = kvfs_write_full(fd, c->obj, prefix);
    if (!rc)
        rc = kvfs_obj_read_prefix(fd, size, &c->info, &c->hdr_buf, &c->h, why, whylen);
    close(fd);
    if (!rc)
        c->remote = 1;
    return rc;
}

/* The share of an object's pages in the page cache (1 where it cannot be
 * told: stay buffered).  mincore reports the page cache for a file the
 * caller may write (the daemon's own store). */
static double cached_share(int fd, uint64_t size)
{
    long pg = sysconf(_SC_PAGESIZE);
    if (!size || pg <= 0)
        return 1.0;
    size_t pages = (size_t)((size + (uint64_t)pg - 1) / (uint64_t)pg), in = 0;
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED)
        return 1.0;
    unsigned char *vec = malloc(pages);
    double share = 1.0;
    if (vec && mincore(map, (size_t)size, vec) == 0) {
        for (size_t i = 0; i < pages; i++)
            in += vec[i] & 1;
        share = (double)in / (double)pages;
    }
    free(vec);
    munmap(map, (size_t)size);
    return share;
}

/* The chunk's object again, opened O_DIRECT (through /proc/self/fd: the same
 * file even if it was removed meanwhile); 1 if so, 0 where the filesystem
 * does not allow it (tmpfs) and the buffered descriptor stays. */
static int reopen_direct(struct ld_chunk *c)
{
#ifdef STATX_DIOALIGN
    /* a device that wants more alignment than our slots have, or a file
     * that has no O_DIRECT (0): stay buffered */
    struct statx sx;
    if (statx(c->fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 && (sx.stx_mask & STATX_DIOALIGN) &&
        (!sx.stx_dio_offset_align || sx.stx_dio_offset_align > DIRECT_ALIGN || sx.stx_dio_mem_align > DIRECT_ALIGN))
        return 0;
#endif
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", c->fd);
    int fd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
    if (fd < 0)
        return 0;
    c->buffered_fd = c->fd;
    c->fd = fd;
    return 1;
}

/* O_DIRECT slots: each layer's frame within whole DIRECT_ALIGN blocks of
 * the object, in a slot of its own (reads land whole blocks: a shared
 * buffer would have neighbours' blocks overwritten) */
static int direct_slots(const struct kvfs_loader *ld, struct ld_chunk *c)
{
    if (!(c->doff = calloc((size_t)ld->n_layer + 1, sizeof(uint64_t))) ||
        !(c->dhead = calloc((size_t)ld->n_layer + 1, sizeof(uint32_t))))
        return -ENOMEM;
    uint64_t at = 0;
    for (int l = 0; l < ld->n_layer; l++) {
        const struct kvfs_obj_frame *f = &c->info.frames[l];
        c->doff[l] = at;
        if (!f->stored_size)
            continue;
        c->dhead[l] = (uint32_t)(f->offset % DIRECT_ALIGN);
        at += (c->dhead[l] + f->stored_size + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN;
    }
    c->doff[ld->n_layer] = at;
    c->dbuf_len = at + 1;
    if (!(c->dbuf = buf_get(&c->dbuf_len, &c->dbuf_pin))) /* page-aligned: mmap's */
        return -ENOMEM;
    /* raw frames go to the device from where they land; a chunk of zstd
     * frames only is decoded into `layers` (locked there): not locked */
    int in_place = 0;
    for (int l = 0; l < ld->n_layer && !in_place; l++)
        in_place = c->info.frames[l].stored_size && raw_in_place(c, l);
    if (in_place)
        buf_lock(c->dbuf, c->dbuf_len, &c->dbuf_pin);
    return 0;
}

struct remote_read {
    struct kvfs_loader *ld;
    struct ld_read r;
};

static void remote_done(void *arg, long res)
{
    struct remote_read *rr = arg;
    struct kvfs_loader *ld = rr->ld;
    struct ld_read *r = &rr->r;
    if (res >= 0 && (uint64_t)res != r->len)
        res = -EIO;
    if (res < 0) {
        fail(ld, r->l, (int)res, "chunk %d layer %d: remote read failed: %s", r->c + 1, r->l, strerror((int)-res));
    } else if (r->l >= ld->first) {
        push_job(ld, r);
    }
    pthread_mutex_lock(&ld->lock);
    ld->remote_in_flight--;
    ld->remote_left--;
    if (res < 0)
        ld->remote_failed = 1;
    pthread_cond_broadcast(&ld->cond);
    pthread_mutex_unlock(&ld->lock);
    free(rr);
}

/* Remote chunks: every frame (layer 0 too, so the object can be kept
 * locally afterwards) in layer order, at most 16 reads in flight. */
static void *remote_main(void *arg)
{
    struct kvfs_loader *ld = arg;
    uint64_t submitted = 0;
    for (int l = 0; l < ld->n_layer; l++)
        for (int c = 0; c < ld->n; c++) {
            struct ld_chunk *ch = &ld->ch[c];
            if (!ch->remote)
                continue;
            const struct kvfs_obj_frame *f = &ch->info.frames[l];
            pthread_mutex_lock(&ld->lock);
            while (ld->remote_in_flight >= 16 && !ld->stop)
                pthread_cond_wait(&ld->cond, &ld->lock);
            int stop = ld->stop;
            if (!stop)
                ld->remote_in_flight++;
            pthread_mutex_unlock(&ld->lock);
            struct remote_read *rr = stop ? NULL : malloc(sizeof(*rr));
            int rc = stop ? -ECANCELED : !rr ? -ENOMEM : 0;
            if (!rc) {
                *rr = (struct remote_read){
                    ld, {c, l, ch->obj + f->offset, f->offset, f->stored_size, 0, -1, 0, f->stored_size, 0}};
                throttle(ld, submitted += f->stored_size);
                rc = ld->rh.aio_read(ld->rh.ctx, ch->hash, f->offset, ch->obj + f->offset, f->stored_size,
                                          remote_done, rr);
            }
            if (rc) {
                free(rr);
                if (rc != -ECANCELED)
                    fail(ld, l, rc, "chunk %d layer %d: remote read: %s", c + 1, l, strerror(-rc));
                pthread_mutex_lock(&ld->lock);
                if (!stop)
                    ld->remote_in_flight--;
                ld->remote_left--;
                ld->remote_failed = 1;
                pthread_cond_broadcast(&ld->cond);
                pthread_mutex_unlock(&ld->lock);
            }
        }
    return NULL;
}

int kvfs_loader_open(struct kvfs_store *s, const char *const *hashes, int n, const struct kvfs_loader_opts *o,
                     struct kvfs_loader **out, char *err, size_t errlen)
{
    struct kvfs_loader *ld;
    int rc;
    if (n < 1)
        return kvfs_errf(err, errlen, -EINVAL, "no chunks");
    if ((rc = loader_alloc(n, &ld)))
        return rc;
    if (o)
        ld->o = *o;
    ld->store = s;
    ld->remote = (!o || !o->local_only) && kvfs_store_get_remote(s, &ld->rh) == 0 && ld->rh.aio_read;
    for (int i = 0; i < n && !rc; i++) {
        struct ld_chunk *c = &ld->ch[i];
        char why[200] = "";
        rc = ld->remote ? kvfs_store_open_stream_local(s, hashes[i], &c->ram, &c->fd)
                        : kvfs_store_open_stream(s, hashes[i], &c->ram, &c->fd);
        if (rc == -ENOENT && ld->remote && (rc = open_remote(ld, c, hashes[i], why, sizeof(why))) == 0) {
            ld->st.n_remote++;
        } else if (rc) {
            kvfs_errf(err, errlen, rc, "chunk %s: %s", hashes[i],
                      rc == -ENOENT ? "not in this store" : why[0] ? why : strerror(-rc));
            break;
        } else if (c->ram) {
            c->image = kvfs_chunk_data(c->ram);
            rc = kvfs_header_parse(c->image, kvfs_chunk_size(c->ram), &c->h, why, sizeof(why));
            ld->st.n_ram++;
        } else {
            struct stat st;
            /* cold or not is asked before the prefix is read: that read's
             * readahead brings in a small object whole */
            int cold = 0;
            rc = fstat(c->fd, &st) ? -errno : 0;
            if (!rc && ld->o.direct_io >= 0)
                cold = ld->o.direct_io > 0 || cached_share(c->fd, (uint64_t)st.st_size) < 0.5;
            if (!rc)
                rc = kvfs_obj_read_prefix(c->fd, (uint64_t)st.st_size, &c->info, &c->hdr_buf, &c->h, why, sizeof(why));
            ld->st.n_disk++;
            if (!rc && cold) {
                c->direct = reopen_direct(c);
                ld->st.n_direct += c->direct;
            }
        }
        if (rc)
            kvfs_errf(err, errlen, rc, "chunk %s: %s", hashes[i], why);
    }
    if (!rc)
        rc = loader_finish_open(ld, err, errlen);
    /* buffers for the disk chunks: decoded layers, and staging for zstd
     * frames (O_DIRECT: a slot of whole blocks for each frame instead) */
    for (int i = 0; i < n && !rc; i++) {
        struct ld_chunk *c = &ld->ch[i];
        if (!streamed(c))
            continue;
        if (c->direct && (rc = direct_slots(ld, c)))
            break;
        c->layers_len = (size_t)c->loff[ld->n_layer] + 1;
        if (!(c->layers = buf_get(&c->layers_len, &c->layers_pin))) {
            rc = -ENOMEM;
            break;
        }
        if (!(c->stage_off = calloc((size_t)ld->n_layer + 1, sizeof(uint64_t)))) {
            rc = -ENOMEM;
            break;
        }
        uint64_t z = 0;
        for (int l = 0; l < ld->n_layer; l++) {
            c->stage_off[l] = z;
            if (c->info.frames[l].codec == KVFS_CODEC_ZSTD && !c->direct)
                z += c->info.frames[l].stored_size;
        }
        c->stage_off[ld->n_layer] = z;
        c->stage_len = z;
        /* compressed frames are never copied to a device: not locked (a kept
         * buffer that was comes back as it is) */
        if (z && !(c->stage = buf_get(&c->stage_len, &c->stage_pin))) {
            rc = -ENOMEM;
            break;
        }
        /* decoded layers are handed out from `layers` (buffered reads, zstd
         * frames, raw frames moved there); an O_DIRECT chunk of aligned raw
         * frames only from its slots: its `layers` stays untouched */
        int from_layers = !c->direct;
        for (int l = 0; l < ld->n_layer && !from_layers; l++)
            from_layers = c->info.frames[l].codec != KVFS_CODEC_RAW || !raw_in_place(c, l);
        if (from_layers)
            buf_lock(c->layers, c->layers_len, &c->layers_pin);
    }
    if (rc) {
        kvfs_loader_close(ld);
        return rc;
    }
    *out = ld;
    return 0;
}

int kvfs_loader_count(const struct kvfs_loader *ld) { return ld->n; }

const struct kvfs_header *kvfs_loader_header(const struct kvfs_loader *ld, int i) { return &ld->ch[i].h; }

int kvfs_loader_start(struct kvfs_loader *ld, int first_layer)
{
    if (ld->started)
        return 0;
    if (first_layer < 0 || first_layer > ld->n_layer)
        return -EINVAL;
    ld->started = 1;
    ld->first = first_layer;
    ld->t_start = now_s();
    /* in-memory chunks are ready at once */
    int n_mem = 0;
    for (int c = 0; c < ld->n; c++)
        n_mem += !streamed(&ld->ch[c]);
    for (int l = first_layer; l < ld->n_layer; l++)
        ld->ready[l] = n_mem;
    int n_disk = ld->n - n_mem, n_remote = 0;
    for (int c = 0; c < ld->n; c++)
        n_remote += ld->ch[c].remote;
    ld->remote_left = n_remote * ld->n_layer;
    if (!n_disk || first_layer == ld->n_layer) {
        ld->t_done = ld->t_start;
        return 0;
    }
    ld->jobs_total = n_disk * (ld->n_layer - first_layer);
    if (!(ld->jobs = calloc((size_t)ld->jobs_total, sizeof(*ld->jobs))))
        return -ENOMEM;
    /* default: one worker per core beyond the blend's own thread, 2 to 8 */
    int spare = kvfs_cores(9) - 1;
    int nw = ld->o.n_workers > 0 ? ld->o.n_workers : spare < 2 ? 2 : spare;
    if (!(ld->workers = calloc((size_t)nw, sizeof(pthread_t))))
        return -ENOMEM;
    for (int i = 0; i < nw; i++) {
        if (pthread_create(&ld->workers[i], NULL, worker_main, ld))
            break;
        ld->n_workers_started++;
    }
    if (!ld->n_workers_started || pthread_create(&ld->io, NULL, io_main, ld)) {
        fail(ld, -1, -EAGAIN, "cannot start the loader's threads");
        return -EAGAIN;
    }
    ld->io_started = 1;
    if (n_remote) {
        if (pthread_create(&ld->rio, NULL, remote_main, ld)) {
            fail(ld, -1, -EAGAIN, "cannot start the loader's remote reader");
            return -EAGAIN;
        }
        ld->rio_started = 1;
    }
    return 0;
}

int kvfs_loader_wait(struct kvfs_loader *ld, int layer, const void **data, char *err, size_t errlen)
{
    if (layer < 0 || layer >= ld->n_layer || !ld->started || layer < ld->first)
        return kvfs_errf(err, errlen, -EINVAL, "layer %d was not requested", layer);
    double t0 = now_s();
    pthread_mutex_lock(&ld->lock);
    while (ld->ready[layer] < ld->n && !ld->layer_rc[layer])
        pthread_cond_wait(&ld->cond, &ld->lock);
    int rc = ld->ready[layer] == ld->n ? 0 : ld->layer_rc[layer];
    if (rc)
        kvfs_errf(err, errlen, rc, "%s", ld->why[layer]);
    ld->st.wait_s += now_s() - t0;
    pthread_mutex_unlock(&ld->lock);
    if (rc)
        return rc;
    for (int c = 0; c < ld->n; c++) {
        const struct ld_chunk *ch = &ld->ch[c];
        /* a raw frame is used where it landed (remote, O_DIRECT); the frame
         * table is there only for chunks read from an object */
        int raw = raw_in_place(ch, layer);
        data[c] = ch->remote && raw  ? (const void *)(ch->obj + ch->info.frames[layer].offset)
                  : ch->direct && raw ? (const void *)(ch->dbuf + ch->doff[layer] + ch->dhead[layer])
                  : streamed(ch) ? (const void *)(ch->layers + ch->loff[layer])
                              : (const void *)(ch->image + kvfs_layer_offset(&ch->h, (uint32_t)layer));
    }
    return 0;
}

void kvfs_loader_progress(const struct kvfs_loader *ld, uint64_t *done, uint64_t *total, double *elapsed)
{
    uint64_t t = 0;
    for (int c = 0; c < ld->n; c++)
        if (streamed(&ld->ch[c]))
            for (int l = ld->first; l < ld->n_layer; l++)
                t += ld->ch[c].info.frames[l].stored_size;
    pthread_mutex_lock((pthread_mutex_t *)&ld->lock);
    *done = ld->st.bytes_read;
    *elapsed = ld->t_done > 0 ? ld->t_done - ld->t_start : now_s() - ld->t_start;
    pthread_mutex_unlock((pthread_mutex_t *)&ld->lock);
    *total = t;
}

void kvfs_loader_get_stats(const struct kvfs_loader *ld, struct kvfs_loader_stats *st)
{
    pthread_mutex_lock((pthread_mutex_t *)&ld->lock);
    *st = ld->st;
    st->bytes_layers = 0;
    for (int c = 0; c < ld->n; c++)
        st->bytes_layers += ld->ch[c].loff[ld->n_layer] - ld->ch[c].loff[ld->first];
    st->load_s = ld->t_done > 0 ? ld->t_done - ld->t_start : 0;
    pthread_mutex_unlock((pthread_mutex_t *)&ld->lock);
}

void kvfs_loader_close(struct kvfs_loader *ld)
{
    if (!ld)
        return;
    pthread_mutex_lock(&ld->lock);
    ld->stop = 1;
    pthread_cond_broadcast(&ld->cond);
    pthread_mutex_unlock(&ld->lock);
    if (ld->io_started)
        pthread_join(ld->io, NULL);
    if (ld->rio_started) {
        pthread_join(ld->rio, NULL);
        /* in-flight reads land in our buffers: wait for every callback */
        pthread_mutex_lock(&ld->lock);
        while (ld->remote_in_flight > 0)
            pthread_cond_wait(&ld->cond, &ld->lock);
        int complete = ld->remote_left == 0 && !ld->remote_failed;
        pthread_mutex_unlock(&ld->lock);
        /* a fully streamed remote object fills the local tiers (verified
         * again, like any ingest) */
        for (int i = 0; i < ld->n && complete; i++) {
            struct ld_chunk *c = &ld->ch[i];
            char err[256] = "";
            if (!c->remote)
                continue;
            if (kvfs_store_put_object(ld->store, c->obj, c->obj_size, c->hash, err, sizeof(err)) == 0) {
                ld->rh.note_fetched(ld->rh.ctx, c->hash);
                kvfs_log(KVFS_LOG_INFO, "loader: streamed chunk %s from the remote tier (%llu bytes), kept locally",
                         c->hash, (unsigned long long)c->obj_size);
            } else
                kvfs_log(KVFS_LOG_WARN, "loader: streamed remote chunk %s not kept locally: %s", c->hash, err);
        }
    }
    for (int i = 0; i < ld->n_workers_started; i++)
        pthread_join(ld->workers[i], NULL);
    for (int i = 0; i < ld->n; i++) {
        struct ld_chunk *c = &ld->ch[i];
        if (c->fd >= 0)
            close(c->fd);
        if (c->buffered_fd >= 0)
            close(c->buffered_fd);
        if (c->ram)
            kvfs_chunk_release(c->ram);
        kvfs_obj_info_free(&c->info);
        free(c->hdr_buf);
        buf_put(c->layers, c->layers_len, c->layers_pin);
        buf_put(c->stage, c->stage_len, c->stage_pin);
        buf_put(c->dbuf, c->dbuf_len, c->dbuf_pin);
        free(c->doff);
        free(c->dhead);
        free(c->stage_off);
        free(c->loff);
        free(c->obj);
    }
    free(ld->ch);
    free(ld->ready);
    free(ld->layer_rc);
    free(ld->why);
    free(ld->jobs);
    free(ld->workers);
    pthread_mutex_destroy(&ld->lock);
    pthread_cond_destroy(&ld->cond);
    free(ld);
}
