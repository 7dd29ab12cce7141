/* tenants.c - --api-keys FILE: who may ask, and under which tenant's cache
 * salt.  One "KEY TENANT" pair per line; blank lines and lines starting
 * with # are skipped.  A request names its key as "Authorization: Bearer
 * KEY" (OpenAI's clients do). */
#include <errno.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "log.h"
#include "serve.h"

struct tenant_key {
    char *key, *tenant;
};

static void trim(char *s)
{
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t'))
        s[--n] = '\0';
}

int tenants_load(struct serve *sv, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "re");
    char line[1024];
    int rc = 0, no = 0;
    struct stat st;
    if (!f)
        return kvfs_errf(err, errlen, -errno, "--api-keys %s: %s", path, strerror(errno));
    if (!fstat(fileno(f), &st) && (st.st_mode & 077))
        kvfs_log(KVFS_LOG_WARN, "kvfs-serve: --api-keys %s is readable by others (mode %03o): chmod 600 it",
                 path, (unsigned)(st.st_mode & 0777));
    while (fgets(line, sizeof(line), f)) {
        no++;
        if (!strchr(line, '\n') && !feof(f)) {
            rc = kvfs_errf(err, errlen, -EINVAL, "--api-keys %s:%d: a line over %zu bytes", path, no, sizeof(line) - 2);
            goto out;
        }
        trim(line);
        char *p = line + strspn(line, " \t");
        if (!*p || *p == '#')
            continue;
        char *key = strtok(p, " \t"), *tenant = strtok(NULL, " \t"), *extra = strtok(NULL, " \t");
        if (!tenant || extra) {
            rc = kvfs_errf(err, errlen, -EINVAL, "--api-keys %s:%d: want \"KEY TENANT\" (two words)", path, no);
            goto out;
        }
        if (strlen(key) < 16) {
            rc = kvfs_errf(err, errlen, -EINVAL, "--api-keys %s:%d: a key of %zu characters; keys have at least 16",
                           path, no, strlen(key));
            goto out;
        }
        for (int i = 0; i < sv->n_keys; i++)
            if (!strcmp(sv->keys[i].key, key)) {
                rc = kvfs_errf(err, errlen, -EINVAL, "--api-keys %s:%d: a key given on an earlier line again", path,
                               no);
                goto out;
            }
        struct tenant_key *k = realloc(sv->keys, sizeof(*k) * (size_t)(sv->n_keys + 1));
        if (!k) {
            rc = -ENOMEM;
            goto out;
        }
        sv->keys = k;
        k[sv->n_keys].key = strdup(key);
        k[sv->n_keys].tenant = strdup(tenant);
        if (!k[sv->n_keys].key || !k[sv->n_keys].tenant) {
            free(k[sv->n_keys].key);
            free(k[sv->n_keys].tenant);
            rc = -ENOMEM;
            goto out;
        }
        sv->n_keys++;
    }
    if (!sv->n_keys)
        rc = kvfs_errf(err, errlen, -EINVAL, "--api-keys %s: no keys in it", path);
out:
    fclose(f);
    return rc;
}

const char *tenants_find(const struct serve *sv, const char *authorization)
{
    static const char bearer[] = "Bearer ";
    if (!authorization || strncasecmp(authorization, bearer, sizeof(bearer) - 1))
        return NULL;
    const char *key = authorization + sizeof(bearer) - 1;
    size_t n = strlen(key);
    const char *found = NULL;
    for (int i = 0; i < sv->n_keys; i++) /* every key compared, in constant time */
        if (strlen(sv->keys[i].key) == n && !CRYPTO_memcmp(sv->keys[i].key, key, n))
            found = sv->keys[i].tenant;
    return found;
}

void tenants_free(struct serve *sv)
{
    for (int i = 0; i < sv->n_keys; i++) {
        OPENSSL_cleanse(sv->keys[i].key, strlen(sv->keys[i].key));
        free(sv->keys[i].key);
        free(sv->keys[i].tenant);
    }
    free(sv->keys);
    sv->keys = NULL;
    sv->n_keys = 0;
}
