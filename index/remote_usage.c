/* remote_usage.c - the namespace's running usage, a counter per model index
 * changed in the same write as the entries it counts (remote_usage.h). */
#include "remote_usage.h"

#ifdef KVFS_HAVE_RADOS
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remote_format.h"

#define CAS_TRIES 32 /* writes racing on one index: each retry re-reads it */

/* What a write needs to know of an index first: whether the object exists,
 * its counter, and the chunk's entry and pin. */
struct index_state {
    int exists;
    struct remote_counter c;
    int listed, pinned;
    uint64_t osize; /* the entry's object bytes */
};

/* a decimal value: 1 and *v, or 0 when it is not one */
static int decimal(const char *val, size_t vlen, uint64_t *v)
{
    char t[24], *end;
    if (vlen == 0 || vlen >= sizeof(t) || val[0] < '0' || val[0] > '9')
        return 0;
    memcpy(t, val, vlen);
    t[vlen] = 0;
    *v = strtoull(t, &end, 10);
    return *end == 0;
}

/* the value a write leaves: one past what it read (none read: 1) */
static size_t next_gen(const struct remote_counter *c, char out[24], uint64_t *next)
{
    uint64_t g = 0;
    decimal(c->gen, strlen(c->gen), &g);
    *next = g + 1;
    return (size_t)snprintf(out, 24, "%" PRIu64, g + 1);
}

void remote_chg_key(uint64_t gen, char key[KVFS_REMOTE_CHG_KEY_MAX])
{
    snprintf(key, KVFS_REMOTE_CHG_KEY_MAX, KVFS_REMOTE_CHG_PREFIX "%016" PRIx64, gen);
}

int remote_chg_gen(const char *key, size_t klen, uint64_t *gen)
{
    size_t plen = strlen(KVFS_REMOTE_CHG_PREFIX);
    if (klen != KVFS_REMOTE_CHG_KEY_MAX - 1 || memcmp(key, KVFS_REMOTE_CHG_PREFIX, plen))
        return 0;
    uint64_t g = 0;
    for (size_t i = plen; i < klen; i++) {
        char ch = key[i];
        if (ch >= '0' && ch <= '9')
            g = g << 4 | (uint64_t)(ch - '0');
        else if (ch >= 'a' && ch <= 'f')
            g = g << 4 | (uint64_t)(ch - 'a' + 10);
        else
            return 0;
    }
    *gen = g;
    return 1;
}

/* The change log's part of a write that leaves generation gen: its key
 * (set by the caller) and, when the log is full, the key it pushes out
 * (removed here).  0 when no log is kept. */
static int chg_log(rados_write_op_t op, uint64_t gen, int keep, char key[KVFS_REMOTE_CHG_KEY_MAX])
{
    if (keep <= 0)
        return 0;
    remote_chg_key(gen, key);
    if (gen > (uint64_t)keep) {
        char old[KVFS_REMOTE_CHG_KEY_MAX];
        const char *rm[1] = {old};
        remote_chg_key(gen - (uint64_t)keep, old);
        rados_write_op_omap_rm_keys(op, rm, 1);
    }
    return 1;
}

/* hash NULL: the counter alone */
static int index_state_read(rados_ioctx_t io, const char *model, const char *hash, struct index_state *s)
{
    char oid[KVFS_REMOTE_OID_MAX], pkey[KVFS_HASH_HEX_LEN + 3];
    const char *keys[4] = {KVFS_REMOTE_USAGE_KEY, KVFS_REMOTE_GEN_KEY, hash, pkey};
    kvfs_remote_index_oid(model, oid);
    if (hash)
        snprintf(pkey, sizeof(pkey), "%.64s.p", hash);
    memset(s, 0, sizeof(*s));
    rados_read_op_t op = rados_create_read_op();
    rados_omap_iter_t it = NULL;
    int prval = 0;
    rados_read_op_omap_get_vals_by_keys(op, keys, hash ? 4 : 2, &it, &prval);
    int rc = rados_read_op_operate(op, io, oid, 0);
    if (rc == -ENOENT) { /* no index yet: nothing counted, the first write creates it */
        s->c.present = 1;
        rc = 0;
    } else if (rc == 0 && prval < 0) {
        rc = prval;
    } else if (rc == 0) {
        s->exists = 1;
        char *key, *val;
        size_t klen, vlen;
        while (rados_omap_get_next2(it, &key, &val, &klen, &vlen) == 0 && key) {
            if (klen == strlen(KVFS_REMOTE_USAGE_KEY) && !memcmp(key, KVFS_REMOTE_USAGE_KEY, klen))
                s->c.present = decimal(val, vlen, &s->c.bytes);
            else if (klen == strlen(KVFS_REMOTE_GEN_KEY) && !memcmp(key, KVFS_REMOTE_GEN_KEY, klen) &&
                     vlen < sizeof(s->c.gen)) {
                memcpy(s->c.gen, val, vlen);
                s->c.gen[vlen] = 0;
            }
            else if (hash && klen == KVFS_HASH_HEX_LEN && !memcmp(key, hash, klen)) {
                s->listed = 1;
                s->osize = remote_entry_osize(val, vlen);
            } else if (hash && klen == KVFS_HASH_HEX_LEN + 2 && !memcmp(key, pkey, klen))
                s->pinned = 1;
        }
    }
    if (it)
        rados_omap_get_end(it);
    rados_release_read_op(op);
    return rc;
}

int remote_counter_read(rados_ioctx_t io, const char *model, struct remote_counter *c)
{
    struct index_state s;
    int rc = index_state_read(io, model, NULL, &s);
    *c = s.c;
    return rc;
}

/* the write's precondition: the index as it was read */
static void cas_guard(rados_write_op_t op, const struct index_state *s, int *prval)
{
    if (!s->exists)
        rados_write_op_create(op, LIBRADOS_CREATE_EXCLUSIVE, NULL);
    else /* an absent generation compares as "" */
        rados_write_op_omap_cmp(op, KVFS_REMOTE_GEN_KEY, LIBRADOS_CMPXATTR_OP_EQ, s->c.gen, strlen(s->c.gen), prval);
}

int remote_index_put(rados_ioctx_t io, const char *model, const char *hash, const char *entry, size_t elen,
                     const char *akey, const char *aval, size_t alen, int keep)
{
    char oid[KVFS_REMOTE_OID_MAX], count[24], gen[24], ckey[KVFS_REMOTE_CHG_KEY_MAX], change[256];
    size_t clen = (size_t)snprintf(change, sizeof(change), "+ %.64s %.*s", hash, (int)elen, entry);
    if (clen >= sizeof(change))
        return -EINVAL;
    uint64_t osize = remote_entry_osize(entry, elen);
    kvfs_remote_index_oid(model, oid);
    for (int tries = 0; tries < CAS_TRIES; tries++) {
        struct index_state s;
        int rc = index_state_read(io, model, hash, &s), prval = 0;
        if (rc < 0)
            return rc;
        uint64_t g;
        const char *keys[5] = {hash, akey, KVFS_REMOTE_GEN_KEY, ckey, KVFS_REMOTE_USAGE_KEY},
                   *vals[5] = {entry, aval, gen, change, count};
        size_t lens[5] = {elen, alen, next_gen(&s.c, gen, &g), clen, 0}, n = 3;
        rados_write_op_t op = rados_create_write_op();
        cas_guard(op, &s, &prval);
        if (!chg_log(op, g, keep, ckey)) /* no log: the counter takes its place */
            keys[3] = KVFS_REMOTE_USAGE_KEY, vals[3] = count;
        else
            n++;
        if (s.c.present) { /* unknown stays unknown until a full read counts it */
            uint64_t was = s.listed ? s.osize : 0; /* the same chunk again: its new object replaces the old */
            uint64_t now = s.c.bytes - (was < s.c.bytes ? was : s.c.bytes) + osize;
            lens[n] = (size_t)snprintf(count, sizeof(count), "%" PRIu64, now);
            n++;
        }
        rados_write_op_omap_set(op, keys, vals, lens, n);
        rc = rados_write_op_operate(op, io, oid, NULL, 0);
        rados_release_write_op(op);
        if (rc != -ECANCELED && rc != -EEXIST)
            return rc;
    }
    return -EBUSY;
}

int remote_index_remove(rados_ioctx_t io, const char *model, const char *hash, uint64_t *size, int keep)
{
    char oid[KVFS_REMOTE_OID_MAX], akey[KVFS_HASH_HEX_LEN + 3], pkey[KVFS_HASH_HEX_LEN + 3], count[24], gen[24],
        ckey[KVFS_REMOTE_CHG_KEY_MAX], change[KVFS_HASH_HEX_LEN + 3];
    size_t clen = (size_t)snprintf(change, sizeof(change), "- %.64s", hash);
    kvfs_remote_index_oid(model, oid);
    snprintf(akey, sizeof(akey), "%.64s.a", hash);
    snprintf(pkey, sizeof(pkey), "%.64s.p", hash);
    for (int tries = 0; tries < CAS_TRIES; tries++) {
        struct index_state s;
        int rc = index_state_read(io, model, hash, &s), prval = 0, pin_prval = 0;
        if (rc < 0)
            return rc;
        if (!s.exists || !s.listed)
            return -ENOENT;
        if (s.pinned)
            return -EBUSY;
        uint64_t g;
        const char *rm[2] = {hash, akey}, *keys[3] = {KVFS_REMOTE_GEN_KEY, ckey, KVFS_REMOTE_USAGE_KEY},
                   *vals[3] = {gen, change, count};
        size_t lens[3] = {next_gen(&s.c, gen, &g), clen, 0}, n = 1;
        rados_write_op_t op = rados_create_write_op();
        cas_guard(op, &s, &prval);
        /* a pin set since the read cancels it (a kvfs before the change log
         * pins without moving the generation) */
        rados_write_op_omap_cmp(op, pkey, LIBRADOS_CMPXATTR_OP_EQ, "", 0, &pin_prval);
        rados_write_op_omap_rm_keys(op, rm, 2);
        if (!chg_log(op, g, keep, ckey)) /* no log: the counter takes its place */
            keys[1] = KVFS_REMOTE_USAGE_KEY, vals[1] = count;
        else
            n++;
        if (s.c.present) {
            lens[n] = (size_t)snprintf(count, sizeof(count), "%" PRIu64,
                                       s.c.bytes - (s.osize < s.c.bytes ? s.osize : s.c.bytes));
            n++;
        }
        rados_write_op_omap_set(op, keys, vals, lens, n);
        rc = rados_write_op_operate(op, io, oid, NULL, 0);
        rados_release_write_op(op);
        if (rc == 0)
            *size = s.osize;
        if (rc != -ECANCELED)
            return rc;
    }
    return -EBUSY;
}

int remote_index_pin(rados_ioctx_t io, const char *model, const char *hash, int pin, int keep)
{
    char oid[KVFS_REMOTE_OID_MAX], pkey[KVFS_HASH_HEX_LEN + 3], gen[24], ckey[KVFS_REMOTE_CHG_KEY_MAX],
        change[KVFS_HASH_HEX_LEN + 3];
    size_t clen = (size_t)snprintf(change, sizeof(change), "%c %.64s", pin ? 'p' : 'u', hash);
    kvfs_remote_index_oid(model, oid);
    snprintf(pkey, sizeof(pkey), "%.64s.p", hash);
    for (int tries = 0; tries < CAS_TRIES; tries++) {
        struct index_state s;
        int rc = index_state_read(io, model, hash, &s), prval = 0, listed_prval = 0;
        if (rc < 0)
            return rc;
        if (!s.exists || !s.listed)
            return -ENOENT;
        if (s.pinned == !!pin)
            return 0; /* as asked already: nothing written, no generation */
        uint64_t g;
        const char *keys[3] = {KVFS_REMOTE_GEN_KEY, ckey, pkey}, *vals[3] = {gen, change, "1"};
        size_t lens[3] = {next_gen(&s.c, gen, &g), clen, 1}, n = 1;
        rados_write_op_t op = rados_create_write_op();
        cas_guard(op, &s, &prval);
        /* only while the index lists it (a removal by a kvfs without
         * generations moves none): a pin never outlives an eviction */
        rados_write_op_omap_cmp(op, hash, LIBRADOS_CMPXATTR_OP_GT, "", 0, &listed_prval);
        if (chg_log(op, g, keep, ckey))
            n++;
        else
            keys[1] = pkey, vals[1] = "1", lens[1] = 1;
        if (pin)
            n++;
        else {
            const char *rm[1] = {pkey};
            rados_write_op_omap_rm_keys(op, rm, 1);
        }
        rados_write_op_omap_set(op, keys, vals, lens, n);
        rc = rados_write_op_operate(op, io, oid, NULL, 0);
        rados_release_write_op(op);
        if (rc != -ECANCELED)
            return rc;
    }
    return -EBUSY;
}

int remote_usage_reconcile(rados_ioctx_t io, const char *model, const struct remote_counter *before,
                           uint64_t counted)
{
    if (before->present && before->bytes == counted)
        return 0;
    char oid[KVFS_REMOTE_OID_MAX], count[24];
    const char *keys[1] = {KVFS_REMOTE_USAGE_KEY}, *vals[1] = {count};
    size_t lens[1] = {(size_t)snprintf(count, sizeof(count), "%" PRIu64, counted)};
    int prval = 0;
    kvfs_remote_index_oid(model, oid);
    rados_write_op_t op = rados_create_write_op();
    /* only if no write came since it was read: then the full read saw
     * exactly the entries it counts */
    rados_write_op_omap_cmp(op, KVFS_REMOTE_GEN_KEY, LIBRADOS_CMPXATTR_OP_EQ, before->gen, strlen(before->gen), &prval);
    rados_write_op_omap_set(op, keys, vals, lens, 1);
    int rc = rados_write_op_operate(op, io, oid, NULL, 0);
    rados_release_write_op(op);
    if (rc == -ECANCELED || rc == -ENOENT)
        return 0;
    return rc < 0 ? rc : 1;
}

#endif
