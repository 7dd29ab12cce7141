/* control.c - MOUNT/.kvfs/control: the KVFS_IOC_BLEND ioctl (kvfs_ioctl.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <openssl/evp.h>

#include "kvfs_fs.h"
#include "kvfs_ioctl.h"

void kvfs_control_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg, struct fuse_file_info *fi,
                        unsigned flags, const void *in_buf, size_t in_bufsz, size_t out_bufsz)
{
    (void)arg;
    (void)fi;
    struct kvfs_mount *m = kvfs_mount_of(req);
    if (ino != INO_CONTROL || cmd != (unsigned int)KVFS_IOC_BLEND) {
        fuse_reply_err(req, ENOTTY);
        return;
    }
    if ((flags & FUSE_IOCTL_COMPAT) || in_bufsz < sizeof(struct kvfs_blend_req) ||
        out_bufsz < sizeof(struct kvfs_blend_req)) {
        fuse_reply_err(req, EINVAL);
        return;
    }
    struct kvfs_blend_req r;
    memcpy(&r, in_buf, sizeof(r));
    int rc = 0;
    r.status = 0;
    r.n_tokens = 0;
    r.path[0] = r.error[0] = '\0';
    r.recipe[sizeof(r.recipe) - 1] = '\0';
    if (r.version != KVFS_IOCTL_VERSION || r.flags != 0) {
        snprintf(r.error, sizeof(r.error), "unsupported request version %u or flags 0x%x", r.version, r.flags);
        rc = -EINVAL;
        goto reply;
    }
    /* the blend is named by its recipe, so equal requests share a result */
    uint8_t d[32];
    unsigned dl = 0;
    EVP_Digest(r.recipe, strlen(r.recipe), d, &dl, EVP_sha256(), NULL);
    char base[32], name[48], err[512] = "";
    snprintf(base, sizeof(base), "ioctl-%02x%02x%02x%02x%02x%02x%02x%02x", d[0], d[1], d[2], d[3], d[4], d[5], d[6],
             d[7]);
    snprintf(name, sizeof(name), "%s.recipe", base);
    if ((rc = blends_set_recipe(m, name, r.recipe, strlen(r.recipe), err, sizeof(err)))) {
        snprintf(r.error, sizeof(r.error), "%.230s", err);
        goto reply;
    }
    fuse_ino_t kv = blends_ino_of(m, base);
    struct kvfs_chunk_ref *ref = NULL;
    if (!kv) {
        rc = -EIO;
        goto reply;
    }
    if ((rc = blends_open_kv(m, kv, &ref))) {
        char *t = NULL;
        blends_text(m, kv + 1, &t); /* NAME.err */
        snprintf(r.error, sizeof(r.error), "%.230s", t ? t : strerror(-rc));
        free(t);
        goto reply;
    }
    /* the result stays in the store's tiers for the caller's open */
    struct kvfs_header h;
    if (kvfs_header_parse(kvfs_chunk_data(ref), kvfs_chunk_size(ref), &h, NULL, 0) == 0)
        r.n_tokens = h.n_tokens;
    kvfs_chunk_release(ref);
    snprintf(r.path, sizeof(r.path), "blends/%s.kv", base);
reply:
    r.status = rc;
    if (rc)
        kvfs_log(KVFS_LOG_ERR, "KVFS_IOC_BLEND failed: %s", r.error[0] ? r.error : strerror(-rc));
    fuse_reply_ioctl(req, 0, &r, sizeof(r)); /* status carries the error; the struct always comes back */
}
