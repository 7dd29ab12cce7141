/* kvfsctl remote - the operator's view of a mount's remote tier (kvfs(8),
 * "REMOTE TIER"): list the pool's chunks with their sizes, last uses and
 * pins, pin and unpin chunks for every host, evict.  It reads the pool,
 * namespace, client and config the mount uses from MOUNT/.kvfs/stats and
 * connects to the cluster itself (librados), so it needs that client's key. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "commands.h"
#include "remote.h"
#include "tool_util.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: kvfsctl remote list MOUNT\n"
               "       kvfsctl remote pin|unpin MOUNT HASH...\n"
               "       kvfsctl remote evict [--to SIZE] MOUNT [HASH...]\n"
               "       kvfsctl remote leases MOUNT\n"
               "       kvfsctl remote fsck [--repair] [--min-age S] MOUNT\n"
               "The chunks of the RADOS pool (and namespace) the mount uses, as the fleet's omap\n"
               "indexes list them: size, last use by any host, pin.  A pinned chunk is never\n"
               "evicted, by any host.  evict removes the named chunks (not pinned ones), or without\n"
               "a hash the least recently used until the pool is within --to SIZE (default: the\n"
               "mount's remote_capacity).  leases lists the claims' lease objects (a scan of the\n"
               "pool) and removes the lapsed ones crashed hosts left.  fsck scans the pool's objects\n"
               "against the indexes: objects no index lists, entries whose object is gone; --repair\n"
               "removes them (a stray object younger than --min-age S, default 60, is left: an\n"
               "upload writes the object before its entry).  Exit 1 while problems remain.  Connects\n"
               "as the mount's Ceph client (its key is needed).\n");
}

/* The string or number of "key" in the stats' "remote" member. */
static int stat_field(const char *json, const char *key, char *out, size_t outlen)
{
    char pat[64];
    const char *p = strstr(json, "\"remote\": {");
    snprintf(pat, sizeof(pat), "\"%s\": ", key);
    if (!p || !(p = strstr(p, pat)))
        return -ENOENT;
    p += strlen(pat);
    size_t n = 0;
    if (*p == '"') {
        for (p++; *p && *p != '"' && n + 1 < outlen; p++) {
            if (*p == '\\' && p[1])
                p++;
            out[n++] = *p;
        }
    } else {
        while (*p && *p != ',' && *p != '}' && n + 1 < outlen)
            out[n++] = *p++;
    }
    out[n] = 0;
    return 0;
}

static int read_stats(const char *mount, char **json)
{
    char path[4096];
    uint8_t *buf;
    size_t len;
    snprintf(path, sizeof(path), "%s/.kvfs/stats", mount);
    int rc = tool_read_file(path, &buf, &len);
    if (rc)
        return rc;
    char *s = realloc(buf, len + 1);
    if (!s) {
        free(buf);
        return -ENOMEM;
    }
    s[len] = 0;
    *json = s;
    return 0;
}

/* HASH, HASH.kv or a path to one */
static int hash_arg(const char *arg, char hash[KVFS_HASH_HEX_LEN + 1])
{
    const char *b = strrchr(arg, '/');
    b = b ? b + 1 : arg;
    size_t n = strcspn(b, ".");
    if (n != KVFS_HASH_HEX_LEN || (b[n] && strcmp(b + n, ".kv")))
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!((b[i] >= '0' && b[i] <= '9') || (b[i] >= 'a' && b[i] <= 'f')))
            return -EINVAL;
    memcpy(hash, b, n);
    hash[n] = 0;
    return 0;
}

static int print_entry(void *ctx, const struct kvfs_remote_entry *e)
{
    time_t now = *(time_t *)ctx;
    char when[32] = "-", age[24] = "-";
    if (e->atime_ms > 0) {
        time_t t = (time_t)(e->atime_ms / 1000);
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
        snprintf(age, sizeof(age), "%lld", (long long)(now - t));
    }
    printf("%s %12" PRIu64 " %-20s %8s %-6s %s\n", e->hash, e->size, when, age, e->pinned ? "pinned" : "-",
           e->model);
    return 0;
}

static int print_lease(void *ctx, const char *hash, int held)
{
    (void)ctx;
    printf("%s %s\n", hash, held ? "held" : "lapsed, removed");
    return 0;
}

static int print_problem(void *ctx, const struct kvfs_remote_problem *p)
{
    (void)ctx;
    int stray = p->kind == KVFS_REMOTE_STRAY_OBJECT;
    printf("%s %s %12" PRIu64 " %-16s %s\n", stray ? "stray-object  " : "missing-object", p->hash, p->size,
           p->model[0] ? p->model : "-",
           p->repaired ? (stray ? "removed" : "entry removed")
                       : p->repair_rc ? strerror(-p->repair_rc) : stray ? "no index lists it" : "listed, gone");
    return 0;
}

static int to_size(void *dst, const char *arg)
{
    if (kvfs_parse_size(arg, dst)) {
        fprintf(stderr, "kvfsctl remote: --to %s: expected a size like 64M\n", arg);
        return -EINVAL;
    }
    return 0;
}

int cmd_remote(int argc, char **argv)
{
    uint64_t to = 0;
    int repair = 0, min_age = 60;
    const struct tool_opt opts[] = {TOOL_OPT_CALL("to", 0, to_size, &to), TOOL_OPT("repair", 0, FLAG, &repair),
                                    TOOL_OPT("min-age", 0, INT, &min_age), {0}};
    const struct tool_cmd cmd = {usage, opts, 2, -1};
    int rc = tool_parse_args(&cmd, argc, argv);
    if (rc != TOOL_ARGS_OK)
        return rc;
    const char *verb = argv[optind], *mount = argv[optind + 1];
    char **hashes = argv + optind + 2;
    int n_hashes = argc - optind - 2;
    int list = !strcmp(verb, "list"), pin = !strcmp(verb, "pin"), unpin = !strcmp(verb, "unpin"),
        evict = !strcmp(verb, "evict"), leases = !strcmp(verb, "leases"), fsck = !strcmp(verb, "fsck");
    if (!list && !pin && !unpin && !evict && !leases && !fsck) {
        fprintf(stderr, "kvfsctl remote: unknown action '%s'\n", verb);
        usage(stderr);
        return 2;
    }
    if (((list || leases || fsck) && n_hashes) || ((pin || unpin) && !n_hashes) || min_age < 0 ||
        ((repair || min_age != 60) && !fsck)) {
        usage(stderr);
        return 2;
    }
    char hash[KVFS_HASH_HEX_LEN + 1];
    for (int i = 0; i < n_hashes; i++)
        if (hash_arg(hashes[i], hash)) {
            fprintf(stderr, "kvfsctl remote: %s: not a chunk hash (64 hex digits)\n", hashes[i]);
            return 2;
        }
    char *json = NULL;
    if ((rc = read_stats(mount, &json))) {
        fprintf(stderr, "kvfsctl remote: %s/.kvfs/stats: %s (is it a kvfs mount?)\n", mount, strerror(-rc));
        return 1;
    }
    char pool[256], ns[80] = "", id[128] = "", conf[4096] = "", keyring[4096] = "", cap[32] = "0", tmo[16] = "5", kept[16] = "";
    if (stat_field(json, "pool", pool, sizeof(pool))) {
        fprintf(stderr, "kvfsctl remote: %s has no remote tier (mount it with rados=POOL)\n", mount);
        free(json);
        return 1;
    }
    stat_field(json, "namespace", ns, sizeof(ns));
    stat_field(json, "rados_id", id, sizeof(id));
    stat_field(json, "ceph_conf", conf, sizeof(conf));
    stat_field(json, "keyring", keyring, sizeof(keyring));
    stat_field(json, "capacity", cap, sizeof(cap));
    stat_field(json, "timeout_s", tmo, sizeof(tmo));
    stat_field(json, "changes_kept", kept, sizeof(kept)); /* evictions log their changes as the mount does */
    free(json);
    struct kvfs_remote_opts o = {.pool = pool, .ns = ns, .rados_id = id[0] ? id : NULL,
                                 .ceph_conf = conf[0] ? conf : NULL, .keyring = keyring[0] ? keyring : NULL,
                                 .timeout_s = atoi(tmo), .capacity = strtoull(cap, NULL, 10),
                                 .changes = !kept[0] ? 0 : atoi(kept) > 0 ? atoi(kept) : -1};
    struct kvfs_remote *r;
    char err[512] = "";
    kvfs_set_log_level(KVFS_LOG_WARN); /* this command says what it evicted itself */
    if ((rc = kvfs_remote_connect(&o, &r, err, sizeof(err)))) {
        fprintf(stderr, "kvfsctl remote: %s\n", err[0] ? err : strerror(-rc));
        return 1;
    }
    int status = 0;
    if (list) {
        uint64_t usage = 0;
        time_t now = time(NULL);
        printf("%-64s %12s %-20s %8s %-6s %s\n", "hash", "bytes", "last_used", "age_s", "pin", "model");
        long n = kvfs_remote_entries(r, print_entry, &now, &usage);
        if (n < 0) {
            fprintf(stderr, "kvfsctl remote: cannot read the pool's indexes: %s\n", strerror((int)-n));
            status = 1;
        } else {
            printf("%ld chunks, %" PRIu64 " bytes", n, usage);
            if (o.capacity)
                printf(" of remote_capacity %" PRIu64, o.capacity);
            printf(" (pool %s%s%s)\n", pool, ns[0] ? ", namespace " : "", ns);
        }
    } else if (leases) {
        long n = kvfs_remote_leases(r, print_lease, NULL);
        if (n < 0) {
            fprintf(stderr, "kvfsctl remote: cannot list the pool's objects: %s\n", strerror((int)-n));
            status = 1;
        } else {
            printf("%ld leases\n", n);
        }
    } else if (fsck) {
        struct kvfs_remote_fsck_sum sum;
        rc = kvfs_remote_fsck(r, repair, min_age, print_problem, NULL, &sum, err, sizeof(err));
        if (rc) {
            fprintf(stderr, "kvfsctl remote: fsck: %s\n", err);
            status = 1;
        } else {
            printf("%" PRIu64 " objects, %" PRIu64 " index entries: %" PRIu64 " stray objects, %" PRIu64
                   " missing objects, %" PRIu64 " repaired; %" PRIu64 " stray use/pin keys%s; %" PRIu64
                   " usage counters set right; %" PRIu64 " objects younger than %d s not judged\n",
                   sum.objects, sum.entries, sum.stray, sum.missing, sum.repaired, sum.stray_keys,
                   repair ? " removed" : "", sum.counters_set, sum.young, min_age);
            status = sum.stray + sum.missing > sum.repaired;
        }
    } else if (pin || unpin) {
        for (int i = 0; i < n_hashes; i++) {
            hash_arg(hashes[i], hash);
            if ((rc = kvfs_remote_pin(r, hash, pin))) {
                fprintf(stderr, "kvfsctl remote: %s %s: %s\n", verb, hash,
                        rc == -ENOENT ? "not in the pool" : strerror(-rc));
                status = 1;
            } else {
                printf("%s %s\n", pin ? "pinned" : "unpinned", hash);
            }
        }
    } else if (n_hashes) {
        for (int i = 0; i < n_hashes; i++) {
            hash_arg(hashes[i], hash);
            if ((rc = kvfs_remote_evict(r, hash, 0, NULL, NULL, err, sizeof(err)))) {
                fprintf(stderr, "kvfsctl remote: evict: %s\n", err);
                status = 1;
            } else {
                printf("evicted %s\n", hash);
            }
        }
    } else {
        uint64_t target = to ? to : o.capacity, n = 0, bytes = 0;
        if (!target) {
            fprintf(stderr, "kvfsctl remote: evict: the mount has no remote_capacity; give --to SIZE or hashes\n");
            status = 2;
        } else if ((rc = kvfs_remote_evict(r, NULL, target, &n, &bytes, err, sizeof(err)))) {
            fprintf(stderr, "kvfsctl remote: evict: %s (evicted %" PRIu64 " chunks first)\n", err, n);
            status = 1;
        } else {
            printf("evicted %" PRIu64 " chunks, %" PRIu64 " bytes\n", n, bytes);
        }
    }
    kvfs_remote_close(r);
    return status;
}
