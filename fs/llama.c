/* llama.c - the llama/ directory: llama.cpp's sequence-state view of every
 * chunk and blend, and a drop box for the states llama.cpp saves.
 *
 *   llama/<hash>.llama      chunk <hash> as a state file (V rows: engines
 *                           with flash attention, llama-server's default)
 *   llama/<hash>.vt.llama   the same with V transposed (no flash attention,
 *                           llama-cpp-python's default); not listed
 *   llama/NAME.llama        blend NAME's result (blended on open), and
 *   llama/NAME.vt.llama
 *   llama/ANYTHING-ELSE     written (llama-server --slot-save-path MOUNT/llama
 *                           and /slots/N?action=save): stored at close as a
 *                           chunk of the mount's first model, then gone;
 *                           salted when the name holds .salt-<64 hex>
 *
 * One directory serves both ways because llama-server reads and writes its
 * slot files in one directory, by plain names.  The conversion is
 * index/llama_state.c's. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "blends.h"
#include "chunks.h"
#include "handle.h"
#include "inode_map.h"
#include "llama.h"
#include "llama_state.h"
#include "log.h"
#include "pending.h"
#include "profile.h"
#include "service.h"

static const char SUFFIX[] = ".llama", VT_SUFFIX[] = ".vt.llama";

/* NAME.llama / NAME.vt.llama -> base and vt; -ENOENT for other names */
static int split(const char *name, char *base, size_t cap, int *vt)
{
    size_t n = strlen(name), s = strlen(SUFFIX), v = strlen(VT_SUFFIX);
    *vt = n > v && !strcmp(name + n - v, VT_SUFFIX);
    size_t el = *vt ? v : s;
    if (n <= el || n - el >= cap || strcmp(name + n - s, SUFFIX))
        return -ENOENT;
    memcpy(base, name, n - el);
    base[n - el] = '\0';
    return 0;
}

uint64_t llama_chunk_ino(const char *hash, int vt)
{
    return kvfs_chunk_ino(hash) | INO_LLAMA_BIT | (vt ? INO_VT_BIT : 0);
}

/* The state size of chunk c: from a loaded model of its fingerprint (its
 * shapes), else from the chunk's own header. */
static int view_size(struct kvfs_mount *m, const struct kvfs_chunk_info *c, uint64_t *size)
{
    struct kvfs_fingerprint fp;
    uint32_t n_vocab;
    char id[17];
    for (int i = 0; kvfs_blend_service_model(m->svc, i, &fp, &n_vocab) == 0; i++) {
        kvfs_fingerprint_id(&fp, id);
        if (!strcmp(id, c->model) && fp.n_layer == c->n_layer) {
            /* MLA: K alone; gemma4: each layer's own width and shared-KV
             * layers left out: from the chunk's header below */
            if (!strncmp(fp.arch, "deepseek2", sizeof(fp.arch)) || !strncmp(fp.arch, "gemma4", sizeof(fp.arch)))
                break;
            struct kvfs_llama_swa swa;
            kvfs_blend_service_swa(m->svc, &fp, &swa);
            *size = kvfs_llama_state_size_swa(c->n_tokens, fp.n_layer, (uint64_t)fp.n_kv_head * fp.head_dim,
                                              m->opts.llama_streams, &swa);
            return 0;
        }
    }
    struct kvfs_chunk_ref *ref;
    struct kvfs_header h;
    struct kvfs_llama_view v;
    struct kvfs_llama_swa swa;
    int rc = kvfs_store_get(m->store, c->hash, &ref);
    if (rc)
        return rc;
    /* the model's SWA layers when it is loaded (none known otherwise), as view_of_ref opens it */
    if (!(rc = kvfs_header_parse(kvfs_chunk_data(ref), kvfs_chunk_size(ref), &h, NULL, 0)) &&
        (kvfs_blend_service_swa(m->svc, &h.fp, &swa), !(rc = kvfs_llama_view_init_swa(&v, &h, 0, m->opts.llama_streams,
                                                                                      &swa)))) {
        *size = v.size;
        kvfs_llama_view_free(&v);
    }
    kvfs_chunk_release(ref);
    return rc;
}

static int chunk_view_attr(struct kvfs_mount *m, const struct kvfs_chunk_info *c, int vt, struct stat *st)
{
    uint64_t size;
    int rc = view_size(m, c, &size);
    if (rc)
        return rc;
    memset(st, 0, sizeof(*st));
    st->st_ino = llama_chunk_ino(c->hash, vt);
    st->st_mode = S_IFREG | 0444;
    st->st_nlink = 1;
    st->st_uid = getuid();
    st->st_gid = getgid();
    st->st_size = (off_t)size;
    st->st_blksize = 1 << 20;
    st->st_mtim.tv_sec = (time_t)(c->created_ns / 1000000000);
    st->st_mtim.tv_nsec = (long)(c->created_ns % 1000000000);
    st->st_ctim = st->st_mtim;
    st->st_atim.tv_sec = (time_t)(c->accessed_ns / 1000000000);
    st->st_atim.tv_nsec = (long)(c->accessed_ns % 1000000000);
    return 0;
}

int llama_lookup(struct kvfs_mount *m, const char *name, struct stat *st)
{
    char base[256], hash[KVFS_HASH_HEX_LEN + 1], kvname[KVFS_HASH_HEX_LEN + 4];
    int vt;
    struct kvfs_chunk_info c;
    if (split(name, base, sizeof(base), &vt))
        return -ENOENT;
    snprintf(kvname, sizeof(kvname), "%.64s.kv", base);
    if (strlen(base) == KVFS_HASH_HEX_LEN && kvfs_parse_chunk_name(kvname, hash) == 0 &&
        (kvfs_store_stat_known(m->store, hash, &c) == 0 || kvfs_store_lookup(m->store, hash, &c) == 0)) {
        int rc = chunk_view_attr(m, &c, vt, st);
        if (!rc) { /* counted before the kernel can forget it */
            pthread_mutex_lock(&m->lock);
            rc = ino_map_put(m->inos, st->st_ino, hash, 1);
            pthread_mutex_unlock(&m->lock);
        }
        return rc;
    }
    return blends_lookup_kind(m, base, vt ? BLEND_LLAMA_VT : BLEND_LLAMA, st);
}

int llama_chunk_getattr(struct kvfs_mount *m, fuse_ino_t ino, struct stat *st)
{
    char hash[KVFS_HASH_HEX_LEN + 1];
    struct kvfs_chunk_info c;
    pthread_mutex_lock(&m->lock);
    int rc = ino_map_get(m->inos, ino, hash);
    pthread_mutex_unlock(&m->lock);
    if (!rc)
        rc = kvfs_store_stat_known(m->store, hash, &c);
    return rc ? rc : chunk_view_attr(m, &c, node_llama_vt(ino), st);
}

int llama_attr_of_hash(struct kvfs_mount *m, const char *hash, struct stat *st)
{
    struct kvfs_chunk_info c;
    int rc = kvfs_store_stat_known(m->store, hash, &c);
    return rc ? rc : chunk_view_attr(m, &c, 0, st);
}

/* The view over h->ref (a chunk or a blend result) into h. */
static int view_of_ref(struct kvfs_mount *m, struct fh *h, int vt, uint32_t n_streams)
{
    struct kvfs_header hdr;
    struct kvfs_llama_swa swa;
    int rc = kvfs_header_parse(kvfs_chunk_data(h->ref), kvfs_chunk_size(h->ref), &hdr, NULL, 0);
    if (rc)
        return rc;
    if (!(h->view = calloc(1, sizeof(*h->view))))
        return -ENOMEM;
    kvfs_blend_service_swa(m->svc, &hdr.fp, &swa); /* none for a model not loaded, as view_size says */
    if ((rc = kvfs_llama_view_init_swa(h->view, &hdr, vt, n_streams, &swa))) {
        free(h->view);
        h->view = NULL;
    }
    return rc;
}

int llama_open(struct kvfs_mount *m, fuse_ino_t ino, struct fh *h)
{
    int rc, vt;
    if (!node_is_chunk(ino)) {
        vt = node_blend_kind(ino) == BLEND_LLAMA_VT;
        if ((rc = blends_open_kv(m, ino, &h->ref)))
            return rc;
        h->blend_ino = ino;
    } else {
        char hash[KVFS_HASH_HEX_LEN + 1];
        vt = node_llama_vt(ino);
        pthread_mutex_lock(&m->lock);
        rc = ino_map_get(m->inos, ino, hash);
        pthread_mutex_unlock(&m->lock);
        double t0 = ingest_profile() ? ingest_clock() : 0;
        if (rc || (rc = kvfs_store_get_private(m->store, hash, &h->ref))) /* a view: read through us anyway */
            return rc;
        if (ingest_profile()) {
            h->opened_at = ingest_clock();
            fprintf(stderr, "kvfs: view open %.12s: chunk image %.4f s\n", hash, h->opened_at - t0);
        }
    }
    return view_of_ref(m, h, vt, m->opts.llama_streams); /* on error the handle's release frees the ref */
}

int llama_list(struct kvfs_mount *m, int (*fn)(void *ctx, const char *name, fuse_ino_t ino), void *ctx)
{
    return blends_list_llama(m, fn, ctx);
}

int llama_ingest(struct kvfs_mount *m, const char *name, const void *buf, size_t len,
                 char hash[KVFS_HASH_HEX_LEN + 1], char *err, size_t errlen)
{
    struct kvfs_fingerprint fp;
    struct kvfs_writer w;
    uint32_t n_vocab;
    uint8_t salt[32];
    int salted = kvfs_llama_name_salt(name, salt, err, errlen);
    if (salted < 0) /* refused at create already; a draft's name cannot change */
        return salted;
    if (kvfs_blend_service_model(m->svc, 0, &fp, &n_vocab))
        return kvfs_errf(err, errlen, -ENODEV, "a llama.cpp state names no model and this mount has none "
                         "(-o model=PATH; or kvfsctl import -m MODEL)");
    struct kvfs_llama_swa swa;
    kvfs_blend_service_swa(m->svc, &fp, &swa);
    double t0 = ingest_profile() ? ingest_clock() : 0;
    int rc = kvfs_llama_state_to_chunk_swa(buf, len, &fp, n_vocab, &swa, salted ? salt : NULL, &w, err, errlen);
    if (rc)
        return rc;
    double t1 = ingest_profile() ? ingest_clock() : 0;
    rc = ingest_put_keep(m, &w.buf, w.size, m->llama_async, hash, err, errlen);
    kvfs_writer_free(&w); /* what the RAM tier did not take */
    if (ingest_profile())
        fprintf(stderr, "kvfs: ingest llama/%s: to a chunk %.4f s, stored %.4f s\n", name, t1 - t0,
                ingest_clock() - t1);
    return rc;
}

/* ---- the llama/ directory's operations (node.h) ---- */

static int dir_lookup(struct kvfs_mount *m, const char *name, struct stat *st, double *timeout)
{
    int rc = llama_lookup(m, name, st);
    *timeout = rc ? 0 : node_timeout(st->st_ino);
    return rc;
}

static void dir_chunk_entry(const char *hash, char *name, size_t cap, struct stat *st)
{
    snprintf(name, cap, "%s.llama", hash);
    st->st_ino = llama_chunk_ino(hash, 0);
    st->st_mode = S_IFREG | 0444;
}

/* a state to store: any name, but a salt it asks for must be well formed
 * (refused here, at create, rather than after llama.cpp wrote it all) */
static int dir_new_name(const char *name)
{
    char why[512];
    uint8_t salt[32];
    if (strlen(name) >= 256)
        return -ENAMETOOLONG;
    if (kvfs_llama_name_salt(name, salt, why, sizeof(why)) < 0) {
        kvfs_log(KVFS_LOG_ERR, "refused llama/%s: %s", name, why);
        return -EINVAL;
    }
    return 0;
}

/* views go with their chunk or recipe */
static int dir_unlink(struct kvfs_mount *m, const char *name)
{
    struct stat st = {0};
    int rc = llama_lookup(m, name, &st) ? -ENOENT : -EPERM;
    if (rc == -EPERM && node_is_chunk(st.st_ino)) /* that lookup was counted: no kernel forget will come */
        forget_chunks(m, &(struct fuse_forget_data){.ino = st.st_ino, .nlookup = 1}, 1);
    return rc;
}

static int dir_getattr(struct kvfs_mount *m, fuse_ino_t ino, struct stat *st)
{
    if (ino == INO_LLAMA) {
        dir_attr(m, ino, st);
        return 0;
    }
    return node_is_chunk(ino) ? llama_chunk_getattr(m, ino, st) : blends_getattr(m, ino, st);
}

static void dir_open(struct kvfs_mount *m, fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    int rdonly = (fi->flags & O_ACCMODE) == O_RDONLY, rc;
    if (ino == INO_LLAMA) {
        fuse_reply_err(req, EISDIR);
        return;
    }
    struct fh *h = rdonly ? fh_new(FH_CHUNK) : NULL;
    if (!h) {
        fuse_reply_err(req, rdonly ? ENOMEM : EACCES);
        return;
    }
    if ((rc = llama_open(m, ino, h))) {
        fh_unhold(m, h); /* what it got so far goes with it */
        fuse_reply_err(req, -rc);
        return;
    }
    if (node_is_chunk(ino))
        fi->keep_cache = 1;
    else
        fi->direct_io = 1; /* a recipe rewritten: new bytes */
    reply_open(m, req, fi, h);
}

/* a chunk's view has its chunk's xattrs; a blend's, none */
static int dir_getxattr(struct kvfs_mount *m, fuse_ino_t ino, const char *name, char *val, size_t len)
{
    return node_is_chunk(ino) ? chunk_getxattr(m, ino, name, val, len) : -ENODATA;
}

static size_t dir_listxattr(fuse_ino_t ino, const char *const **names)
{
    return node_is_chunk(ino) ? chunk_listxattr(ino, names) : 0;
}

static int dir_setxattr(struct kvfs_mount *m, fuse_ino_t ino, const char *name, const char *value, size_t size)
{
    return node_is_chunk(ino) ? chunk_setxattr(m, ino, name, value, size) : -EPERM;
}

const struct dir_ops llama_ops = {
    .ino = INO_LLAMA, .drafts = DRAFTS_LISTED, .lists_chunks = 1, .lookup = dir_lookup, .list = llama_list,
    .chunk_entry = dir_chunk_entry, .chunk_attr = llama_attr_of_hash, .new_name = dir_new_name,
    .unlink = dir_unlink, .getattr = dir_getattr, .open = dir_open,
    .getxattr = dir_getxattr, .listxattr = dir_listxattr, .setxattr = dir_setxattr,
};
