/* memo.c - small bounded caches of derived values (serve.h, "memo"): the
 * tokens of a document text, the engine's rendering of a chat template.
 * Popular documents come back in request after request (retrieval is
 * Zipf-like); tokenizing and hashing them again was most of the front's own
 * time on a request whose blend is cached.  Keys are SHA-256 digests of
 * what determines the value; least recently used entries go first. */
#include <errno.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

struct memo_entry {
    unsigned char key[32];
    void *val;
    size_t len;
    uint64_t used; /* the memo's clock at its last use */
};

int memo_init(struct memo *m, int cap, size_t max_bytes)
{
    memset(m, 0, sizeof(*m));
    if (!(m->e = calloc((size_t)cap, sizeof(*m->e))))
        return -ENOMEM;
    m->cap = cap;
    m->max_bytes = max_bytes;
    pthread_mutex_init(&m->lock, NULL);
    return 0;
}

static void drop(struct memo *m, int i)
{
    m->bytes -= m->e[i].len;
    free(m->e[i].val);
    m->e[i] = m->e[--m->n];
}

void memo_clear(struct memo *m)
{
    pthread_mutex_lock(&m->lock);
    while (m->n)
        drop(m, m->n - 1);
    pthread_mutex_unlock(&m->lock);
}

void memo_free(struct memo *m)
{
    if (!m->e)
        return;
    memo_clear(m);
    free(m->e);
    pthread_mutex_destroy(&m->lock);
    memset(m, 0, sizeof(*m));
}

int memo_key(unsigned char key[32], const void *a, size_t alen, const void *b, size_t blen)
{
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    unsigned int n = 0;
    /* the length first: (a, b) and (a', b') with a+b == a'+b' differ */
    int ok = c && EVP_DigestInit_ex(c, EVP_sha256(), NULL) && EVP_DigestUpdate(c, &alen, sizeof(alen)) &&
             EVP_DigestUpdate(c, a, alen) && EVP_DigestUpdate(c, b, blen) && EVP_DigestFinal_ex(c, key, &n);
    EVP_MD_CTX_free(c);
    return ok ? 0 : -EIO;
}

int memo_get(struct memo *m, const unsigned char key[32], void **val, size_t *len)
{
    int rc = -ENOENT;
    *val = NULL;
    pthread_mutex_lock(&m->lock);
    for (int i = 0; i < m->n; i++)
        if (!memcmp(m->e[i].key, key, 32)) {
            m->e[i].used = ++m->clock;
            if ((*val = malloc(m->e[i].len ? m->e[i].len : 1))) {
                memcpy(*val, m->e[i].val, m->e[i].len);
                *len = m->e[i].len;
                rc = 0;
            } else
                rc = -ENOMEM;
            break;
        }
    if (rc == -ENOENT)
        m->misses++;
    else if (!rc)
        m->hits++;
    pthread_mutex_unlock(&m->lock);
    return rc;
}

void memo_put(struct memo *m, const unsigned char key[32], const void *val, size_t len)
{
    if (!m->e || len > m->max_bytes / 4)
        return;
    void *copy = malloc(len ? len : 1);
    if (!copy)
        return; /* a cache: nothing lost */
    memcpy(copy, val, len);
    pthread_mutex_lock(&m->lock);
    for (int i = 0; i < m->n; i++)
        if (!memcmp(m->e[i].key, key, 32)) { /* another request put it meanwhile */
            drop(m, i);
            break;
        }
    while (m->n && (m->n == m->cap || m->bytes + len > m->max_bytes)) {
        int lru = 0;
        for (int i = 1; i < m->n; i++)
            if (m->e[i].used < m->e[lru].used)
                lru = i;
        drop(m, lru);
    }
    struct memo_entry *e = &m->e[m->n++];
    memcpy(e->key, key, 32);
    e->val = copy;
    e->len = len;
    e->used = ++m->clock;
    m->bytes += len;
    pthread_mutex_unlock(&m->lock);
}

void memo_stats(struct memo *m, uint64_t *hits, uint64_t *misses, int *entries, size_t *bytes)
{
    pthread_mutex_lock(&m->lock);
    *hits = m->hits, *misses = m->misses, *entries = m->n, *bytes = m->bytes;
    pthread_mutex_unlock(&m->lock);
}
