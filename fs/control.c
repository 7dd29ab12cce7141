/* control.c - MOUNT/.kvfs/control: the KVFS_IOC_BLEND,
 * KVFS_IOC_BLEND_BATCH and KVFS_IOC_CLAIM ioctls (kvfs_ioctl.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "blends.h"
#include "control.h"
#include "mount.h"
#include "node.h"
#include "ioctl_req.h"
#include "kvfs_ioctl.h"
#include "remote.h"
#include "store.h"

/* A recipe from an ioctl becomes blends/ioctl-<first 8 bytes of its
 * SHA-256>.recipe, so equal requests share a name and a result.  *kv gets
 * NAME.kv's inode; err the reason a recipe is refused. */
static int name_recipe(struct kvfs_mount *m, const char *text, char base[32], fuse_ino_t *kv, char *err,
                       size_t errlen)
{
    uint8_t d[32];
    unsigned dl = 0;
    char name[48];
    EVP_Digest(text, strlen(text), d, &dl, EVP_sha256(), NULL);
    snprintf(base, 32, "ioctl-%02x%02x%02x%02x%02x%02x%02x%02x", d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]);
    snprintf(name, sizeof(name), "%s.recipe", base);
    int rc = blends_set_recipe(m, name, text, strlen(text), 0, err, errlen);
    if (!rc && !*text)
        rc = kvfs_errf(err, errlen, -EINVAL, "the recipe is empty");
    if (!rc && !(*kv = blends_ino_of(m, base)))
        rc = -EIO;
    return rc;
}

static int tokens_of(struct kvfs_chunk_ref *ref)
{
    struct kvfs_header h;
    return kvfs_header_parse(kvfs_chunk_data(ref), kvfs_chunk_size(ref), &h, NULL, 0) == 0 ? (int)h.n_tokens : 0;
}

static void blend_one(struct kvfs_mount *m, struct kvfs_blend_req *r)
{
    char base[32], err[512] = "";
    fuse_ino_t kv = 0;
    struct kvfs_chunk_ref *ref = NULL;
    int rc;
    r->recipe[sizeof(r->recipe) - 1] = '\0';
    if ((rc = name_recipe(m, r->recipe, base, &kv, err, sizeof(err)))) {
        snprintf(r->error, sizeof(r->error), "%.230s", err[0] ? err : strerror(-rc));
    } else if ((rc = blends_open_kv(m, kv, &ref))) {
        char *t = NULL;
        blends_text(m, kv + 1, &t); /* NAME.err */
        snprintf(r->error, sizeof(r->error), "%.230s", t ? t : strerror(-rc));
        free(t);
    } else {
        /* the result stays in the store's tiers for the caller's open */
        r->n_tokens = (uint32_t)tokens_of(ref);
        snprintf(r->path, sizeof(r->path), "blends/%s.kv", base);
        kvfs_chunk_release(ref);
    }
    r->status = rc;
    if (rc)
        kvfs_log(KVFS_LOG_ERR, "KVFS_IOC_BLEND failed: %s", r->error[0] ? r->error : strerror(-rc));
}

static void blend_batch(struct kvfs_mount *m, struct kvfs_blend_batch_req *r)
{
    char *texts[KVFS_BATCH_MAX + 1], bases[KVFS_BATCH_MAX][32], (*errs)[512] = calloc(KVFS_BATCH_MAX, 512);
    fuse_ino_t inos[KVFS_BATCH_MAX];
    struct kvfs_chunk_ref *refs[KVFS_BATCH_MAX];
    int rcs[KVFS_BATCH_MAX], named[KVFS_BATCH_MAX], n_named = 0, first = 0;
    int n = kvfs_ioctl_split_batch(r->recipes, sizeof(r->recipes), texts, KVFS_BATCH_MAX + 1);
    r->n = (uint32_t)n;
    if (!errs || n > KVFS_BATCH_MAX || n == 0) {
        r->status = !errs ? -ENOMEM : n ? -E2BIG : -EINVAL;
        snprintf(r->results, sizeof(r->results), "%d %s\n", r->status,
                 !errs ? "out of memory" : n ? "more than 32 recipes in one batch" : "no recipe");
        kvfs_log(KVFS_LOG_ERR, "KVFS_IOC_BLEND_BATCH refused: %s", r->results);
        free(errs);
        return;
    }
    for (int i = 0; i < n; i++) {
        rcs[i] = name_recipe(m, texts[i], bases[i], &inos[i], errs[i], 512);
        refs[i] = NULL;
        if (!rcs[i]) {
            inos[n_named] = inos[i];
            named[n_named++] = i;
        }
    }
    struct kvfs_chunk_ref *nrefs[KVFS_BATCH_MAX];
    int nrcs[KVFS_BATCH_MAX];
    char (*nerrs)[512] = calloc(KVFS_BATCH_MAX, 512);
    if (!nerrs) {
        for (int k = 0; k < n_named; k++)
            rcs[named[k]] = -ENOMEM;
        n_named = 0;
    }
    if (n_named)
        blends_open_batch(m, inos, n_named, nrefs, nrcs, nerrs);
    for (int k = 0; k < n_named; k++) {
        int i = named[k];
        rcs[i] = nrcs[k];
        refs[i] = nrefs[k];
        memcpy(errs[i], nerrs[k], 512);
    }
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        int w = rcs[i] ? snprintf(r->results + used, sizeof(r->results) - used, "%d %.100s\n", rcs[i],
                                  errs[i][0] ? errs[i] : strerror(-rcs[i]))
                       : snprintf(r->results + used, sizeof(r->results) - used, "0 %d blends/%s.kv\n",
                                  tokens_of(refs[i]), bases[i]);
        used += w > 0 && (size_t)w < sizeof(r->results) - used ? (size_t)w : 0;
        if (rcs[i] && !first)
            first = rcs[i];
        kvfs_chunk_release(refs[i]);
    }
    r->status = first;
    if (first)
        kvfs_log(KVFS_LOG_ERR, "KVFS_IOC_BLEND_BATCH: %d of %d recipes failed (first: %s)", n - n_named, n,
                 strerror(-first));
    free(nerrs);
    free(errs);
}

/* a waiting claim stops for its caller's signal or the daemon's exit (unmount waits for it) */
static int interrupted(void *req)
{
    struct kvfs_mount *m = kvfs_mount_of(req);
    return fuse_req_interrupted(req) || (m->se && fuse_session_exited(m->se));
}

/* The claim's owner is the open file (its handle): closing it ends the
 * leases it took and did not produce (kvfs_control_release). */
static void claim(struct kvfs_mount *m, fuse_req_t req, uint64_t owner, struct kvfs_claim_req *r)
{
    char err[256] = "";
    int rc = 0, waited = 0;
    r->hash[sizeof(r->hash) - 1] = '\0';
    for (char *p = r->hash; *p; p++) /* chunk names are lowercase */
        if (*p >= 'A' && *p <= 'F')
            *p = (char)(*p - 'A' + 'a');
    uint8_t d[32];
    if (strlen(r->hash) != KVFS_HASH_HEX_LEN || kvfs_hex_to_hash(r->hash, d) != 0) {
        rc = kvfs_errf(err, sizeof(err), -EINVAL, "not a chunk hash (64 hex)");
    } else if (r->op == KVFS_CLAIM_RELEASE) {
        rc = m->remote ? kvfs_remote_unclaim(m->remote, r->hash, owner) : 0;
        if (rc == -ENOENT)
            snprintf(err, sizeof(err), "this file holds no lease of %s", r->hash);
    } else if (r->op != KVFS_CLAIM_TAKE) {
        rc = kvfs_errf(err, sizeof(err), -EINVAL, "unknown op %u", r->op);
    } else if (!m->remote) { /* nothing to coordinate with */
        struct kvfs_chunk_info ci;
        r->result = kvfs_store_stat(m->store, r->hash, &ci) == 0 ? KVFS_CLAIM_PRESENT : KVFS_CLAIM_YOURS;
    } else {
        rc = kvfs_remote_claim(m->remote, r->hash, owner, (int)(r->timeout_ms > 86400000u ? 86400000u : r->timeout_ms),
                               interrupted, req, &waited, err, sizeof(err));
        if (rc >= 0) {
            r->result = rc == KVFS_CLAIMED_PRESENT ? KVFS_CLAIM_PRESENT : KVFS_CLAIM_YOURS;
            r->scope = rc != KVFS_CLAIMED_LOCAL;
            rc = 0;
        }
    }
    r->waited_ms = (uint32_t)waited;
    r->status = rc;
    if (rc) {
        snprintf(r->error, sizeof(r->error), "%.150s", err[0] ? err : strerror(-rc));
        /* a wait that ran out is the caller's to handle (kvfs-serve claims again) */
        kvfs_log(rc == -ETIMEDOUT || rc == -EAGAIN ? KVFS_LOG_DEBUG : rc == -ENOENT || rc == -EINTR ? KVFS_LOG_WARN : KVFS_LOG_ERR,
                 "KVFS_IOC_CLAIM: %s", r->error);
    }
}

void kvfs_control_release(struct kvfs_mount *m, uint64_t owner)
{
    if (m->remote)
        kvfs_remote_unclaim(m->remote, NULL, owner);
}

void kvfs_control_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg, struct fuse_file_info *fi,
                        unsigned flags, const void *in_buf, size_t in_bufsz, size_t out_bufsz)
{
    (void)arg;
    struct kvfs_mount *m = kvfs_mount_of(req);
    int one = cmd == (unsigned int)KVFS_IOC_BLEND, batch = cmd == (unsigned int)KVFS_IOC_BLEND_BATCH;
    int cl = cmd == (unsigned int)KVFS_IOC_CLAIM;
    size_t need = one ? sizeof(struct kvfs_blend_req) : cl ? sizeof(struct kvfs_claim_req)
                                                          : sizeof(struct kvfs_blend_batch_req);
    if (ino != INO_CONTROL || (!one && !batch && !cl)) {
        fuse_reply_err(req, ENOTTY);
        return;
    }
    if ((flags & FUSE_IOCTL_COMPAT) || in_bufsz < need || out_bufsz < need) {
        fuse_reply_err(req, EINVAL);
        return;
    }
    void *buf = malloc(need);
    if (!buf) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    memcpy(buf, in_buf, need);
    char why[160] = "";
    int bad = kvfs_ioctl_header_check(buf, why, sizeof(why)); /* version and flags lead both structs */
    if (cl) {
        struct kvfs_claim_req *r = buf;
        r->status = 0;
        r->result = r->waited_ms = r->scope = 0;
        r->error[0] = '\0';
        if (bad) {
            snprintf(r->error, sizeof(r->error), "%.150s", why);
            r->status = bad;
        } else {
            claim(m, req, fi ? fi->fh : 0, r);
        }
    } else if (one) {
        struct kvfs_blend_req *r = buf;
        r->status = 0;
        r->n_tokens = 0;
        r->path[0] = r->error[0] = '\0';
        if (bad) {
            snprintf(r->error, sizeof(r->error), "%s", why);
            r->status = bad;
            kvfs_log(KVFS_LOG_ERR, "KVFS_IOC_BLEND failed: %s", r->error);
        } else {
            blend_one(m, r);
        }
    } else {
        struct kvfs_blend_batch_req *r = buf;
        r->status = 0;
        r->n = 0;
        r->results[0] = '\0';
        if (bad) {
            snprintf(r->results, sizeof(r->results), "%d %s\n", bad, why);
            r->status = bad;
            kvfs_log(KVFS_LOG_ERR, "KVFS_IOC_BLEND_BATCH failed: %s", r->results);
        } else {
            blend_batch(m, r);
        }
    }
    fuse_reply_ioctl(req, 0, buf, need); /* status carries the error; the struct always comes back */
    free(buf);
}
