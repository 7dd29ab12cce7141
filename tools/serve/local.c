/* local.c - chunks kvfs-serve computes itself with the model it loaded (the
 * CPU backend): a sliding-window model's engine saves only the window's
 * cells of those layers (llama.cpp's state_write), and the mount refuses
 * such a state of more tokens than the window (kvfs(8), llama/).  Documents
 * and conversations past the window are prefilled here instead, as
 * `kvfsctl prefill -M` does, and stored through MNT/incoming/. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "forward.h"
#include "log.h"
#include "model.h"
#include "serve.h"

/* the model's work buffers are not shared between forward passes at once */
static pthread_mutex_t local_lock = PTHREAD_MUTEX_INITIALIZER;

int local_needed(const struct serve *sv, size_t n)
{
    return sv->window && n > sv->window;
}

static int write_chunk(const struct serve *sv, const struct kvfs_writer *w, const char *hash, char *err,
                       size_t errlen)
{
    char path[1200];
    snprintf(path, sizeof(path), "%s/incoming/%s.kv", sv->mount, hash);
    FILE *f = fopen(path, "w"); /* one write: the mount verifies and stores it at close */
    int rc = f ? 0 : -errno;
    if (f && fwrite(w->buf, 1, w->size, f) != w->size)
        rc = -EIO;
    if (f && fclose(f) && !rc)
        rc = -errno;
    if (rc)
        return kvfs_errf(err, errlen, rc, "%s: %s", path, strerror(-rc));
    return 0;
}

int local_prefill(struct serve *sv, const int32_t *ids, size_t n, const uint8_t *salt, const char *hash, char *err,
                  size_t errlen)
{
    struct kvfs_kv_cache cache;
    struct kvfs_writer w;
    uint8_t digest[32];
    char got[KVFS_HASH_HEX_LEN + 1];
    int rc;
    pthread_mutex_lock(&local_lock);
    if ((rc = kvfs_kv_cache_init(sv->model, (int)n, &cache))) {
        pthread_mutex_unlock(&local_lock);
        return kvfs_errf(err, errlen, rc, "no memory for a cache of %zu tokens", n);
    }
    if ((rc = kvfs_forward(sv->model, &cache, ids, (int)n, 0, NULL)))
        kvfs_errf(err, errlen, rc, "the forward pass of %zu tokens failed", n);
    else if ((rc = kvfs_kv_cache_to_chunk_salted(sv->model, &cache, 0, (int)n, ids, sv->chunk_dtype, 0, salt, &w)))
        kvfs_errf(err, errlen, rc, "cannot make the chunk of %zu tokens", n);
    kvfs_kv_cache_free(sv->model, &cache);
    pthread_mutex_unlock(&local_lock);
    if (rc)
        return rc;
    kvfs_content_hash(&w.hdr, digest);
    kvfs_hash_to_hex(digest, got);
    if (strcmp(got, hash))
        rc = kvfs_errf(err, errlen, -EPROTO, "the chunk computed here is %.16s..., not %.16s... (the engine's "
                       "states are of another dtype or flags)", got, hash);
    else if (!(rc = write_chunk(sv, &w, hash, err, errlen)) && !plan_chunk_present(sv, hash))
        rc = kvfs_errf(err, errlen, -EPROTO, "the mount did not store chunk %.16s... (its log says why)", hash);
    kvfs_writer_free(&w);
    if (!rc)
        metrics_add(sv, &sv->m.local_prefills, 1);
    return rc;
}
