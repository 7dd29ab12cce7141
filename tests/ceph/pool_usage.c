/* pool_usage - the bytes of kvfs chunk objects (names of 64 hex digits) in
 * one pool and namespace, measured by listing and stat-ing every object
 * (not from kvfs's own indexes): the truth remote_capacity is held to.
 *   cc -O2 -o pool_usage tests/ceph/pool_usage.c -lrados
 *   pool_usage CONF POOL NS            one sample: "BYTES OBJECTS"
 *   pool_usage CONF POOL NS STOPFILE   sample until STOPFILE exists, then
 *                                      "SAMPLES MAX_BYTES MAX_OBJECTS" */
#include <rados/librados.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int sample(rados_ioctx_t io, uint64_t *bytes, int *objects)
{
    rados_list_ctx_t l;
    const char *oid;
    *bytes = 0;
    *objects = 0;
    if (rados_nobjects_list_open(io, &l) < 0)
        return -1;
    while (rados_nobjects_list_next(l, &oid, NULL, NULL) == 0) {
        if (strlen(oid) != 64 || strspn(oid, "0123456789abcdef") != 64)
            continue;
        uint64_t sz;
        time_t mt;
        if (rados_stat(io, oid, &sz, &mt) == 0) { /* gone meanwhile: not there */
            *bytes += sz;
            (*objects)++;
        }
    }
    rados_nobjects_list_close(l);
    return 0;
}

int main(int argc, char **argv)
{
    rados_t c;
    rados_ioctx_t io;
    if (argc < 4) {
        fprintf(stderr, "usage: pool_usage CONF POOL NS [STOPFILE]\n");
        return 2;
    }
    if (rados_create(&c, NULL) < 0 || rados_conf_read_file(c, argv[1]) < 0 || rados_connect(c) < 0 ||
        rados_ioctx_create(c, argv[2], &io) < 0) {
        fprintf(stderr, "pool_usage: cannot connect\n");
        return 1;
    }
    rados_ioctx_set_namespace(io, argv[3]);
    uint64_t bytes, max = 0;
    int objs, max_objs = 0;
    long n = 0;
    if (argc == 4) {
        if (sample(io, &bytes, &objs))
            return 1;
        printf("%llu %d\n", (unsigned long long)bytes, objs);
    } else {
        while (access(argv[4], F_OK) != 0) {
            if (sample(io, &bytes, &objs) == 0) {
                n++;
                if (bytes > max)
                    max = bytes;
                if (objs > max_objs)
                    max_objs = objs;
            }
            usleep(20000);
        }
        printf("%ld %llu %d\n", n, (unsigned long long)max, max_objs);
    }
    rados_ioctx_destroy(io);
    rados_shutdown(c);
    return 0;
}
