/* main.c - the kvfs daemon: options, store, FUSE session. */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "blends.h"
#include "handle.h"
#include "inode_map.h"
#include "llama.h"
#include "llama_state.h"
#include "mount.h"
#include "ops.h"
#include "passthrough.h"
#include "pending.h"
#include "remote.h"
#include "version.h"
#include "service.h"
#include "systemd.h"


struct kvfs_mount *kvfs_mount_of(fuse_req_t req) { return fuse_req_userdata(req); }

#define OPT(t, p) {t, offsetof(struct kvfs_opts, p), 1}
static const struct fuse_opt kvfs_opt_spec[] = {
    OPT("store=%s", store_dir),     OPT("capacity=%s", capacity), OPT("ram=%s", ram),
    OPT("zstd=%d", zstd_level),     OPT("max_ingest=%s", max_ingest), OPT("verbose", verbose),
    OPT("model=%s", model),         OPT("backend=%s", backend),   OPT("min_ratio=%s", min_ratio),
    OPT("sim_read_bw=%s", sim_read_bw), OPT("blend_jobs=%d", blend_jobs), OPT("blend_cache=%s", blend_cache),
    OPT("rados=%s", rados_pool),    OPT("ceph_conf=%s", ceph_conf), OPT("rados_id=%s", rados_id),
    OPT("rados_keyring=%s", rados_keyring), OPT("rados_namespace=%s", rados_ns),
    OPT("rados_timeout=%d", rados_timeout), OPT("remote_lease=%d", remote_lease), OPT("remote_changes=%d", remote_changes),
    OPT("remote_list=%d", remote_list), OPT("remote_capacity=%s", remote_capacity), OPT("passthrough=%s", passthrough), OPT("kv_quant=%s", kv_quant),
    OPT("cold_reads=%s", cold_reads), OPT("llama_saves=%s", llama_saves),
    OPT("llama_streams=%d", llama_streams), FUSE_OPT_END};

static void usage(const char *prog)
{
    printf("usage: %s [options] [STORE] MOUNTPOINT\n\n"
           "Mount kvfs, a filesystem of LLM KV-cache chunks (see kvfs(8)).  STORE, as an\n"
           "/etc/fstab line gives it through mount.fuse3, is the store directory (store=).\n\n"
           "kvfs options (-o name=value,...):\n"
           "  store=DIR          backing store (default $XDG_DATA_HOME/kvfs, /var/lib/kvfs for root)\n"
           "  capacity=SIZE      hard limit on stored bytes, e.g. 10G (default: unlimited)\n"
           "  ram=SIZE           RAM tier for decoded chunks (default 256M; 0 = off)\n"
           "  zstd=LEVEL         zstd level for stored layers, 0 = raw (default 1)\n"
           "  max_ingest=SIZE    largest file accepted for ingest (default 4G)\n"
           "  model=PATH[:PATH]  GGUF model(s) for blending (blends/); picked by the chunks' fingerprint\n"
           "  backend=NAME       blending backend: auto (CUDA if a GPU is present), cpu, cuda\n"
           "  min_ratio=R        floor of the recompute ratio picked by ratio=auto (default 0.15)\n"
           "  blend_jobs=N       blends that run at once (default 2; on CUDA each has a stream)\n"
           "  blend_cache=SIZE   disk for blend results, within capacity (default 1G)\n"
           "  sim_read_bw=SIZE   testing: throttle the blend loader's reads to SIZE bytes/s\n"
           "  cold_reads=MODE    auto (default: O_DIRECT for chunk objects out of the page cache),\n"
           "                     direct or buffered: how blends read chunks from the disk\n"
           "  rados=POOL         shared remote tier on this Ceph RADOS pool (see kvfs(8))\n"
           "  ceph_conf=FILE     Ceph config (default: librados' search, /etc/ceph/ceph.conf)\n"
           "  rados_id=NAME      Ceph client id (default admin)\n"
           "  rados_keyring=FILE that client's cephx keyring (default: the Ceph config's)\n"
           "  rados_namespace=NS every object in this RADOS namespace (a tenant's; default none)\n"
           "  rados_timeout=S    bound on every remote call, seconds (default 5)\n"
           "  remote_list=S      refresh the listing of the fleet's chunks every S seconds\n"
           "                     (default 30; -1: list only chunks this host has)\n"
           "  remote_capacity=SIZE keep the pool's chunks within SIZE, evicting the least\n"
           "                     recently used unpinned ones across the fleet; quota (default):\n"
           "                     the pool's max_bytes quota less a sixteenth; none: unbounded\n"
           "  remote_lease=S     a claim's lease in RADOS lapses S seconds after its holder\n"
           "                     stops renewing it (a crash; default 30)\n"
           "  remote_changes=N   each model index logs its last N changes, so other hosts'\n"
           "                     listings read only those (default 1024; -1: no log)\n"
           "  passthrough=MODE   auto (default), on or off: the kernel reads chunks and blend\n"
           "                     results itself (FUSE passthrough, libfuse >= 3.17)\n"
           "  kv_quant=Q         q8, q4, q4s or none (default): store chunks the mount names itself\n"
           "                     (incoming/, llama/, blend results) as 8- or 4-bit K/V\n"
           "  llama_streams=N    llama/ views hold N KV streams: llama-server -np N without -kvu\n"
           "                     restores only states of its N streams (default 1: a unified cache)\n"
           "  llama_saves=MODE   sync (default): a state saved into llama/ is on the disk when its\n"
           "                     close returns; async: converted and checked by then, written\n"
           "                     after (llama-server stalls less; kvfs-serve's turn saves)\n"
           "  verbose            log every stored and removed chunk\n\n"
           "general options:\n"
           "  -f                 stay in the foreground (logs to stderr)\n"
           "  -d                 FUSE debug output (implies -f)\n"
           "  -s                 single-threaded\n"
           "  -h, --help         this help\n"
           "  -V, --version      version\n"
           "  -o OPTION,...      any libfuse mount option; libfuse lists these:\n",
           prog);
    fuse_lowlevel_help();
    printf("\nUnmount with: fusermount3 -u MOUNTPOINT (or SIGTERM to the daemon).\n");
}

/* Logs go to stderr with -f; otherwise to syslog, or, on a host without
 * /dev/log (where syslog() would drop every line), appended to STORE/kvfs.log. */
static int use_syslog, use_journal;
static FILE *log_file;
static void log_line(int level, const char *msg)
{
    if (use_syslog) {
        syslog(level, "%s", msg);
        return;
    }
    if (use_journal) { /* the journal stamps lines itself; <N> is their priority (sd-daemon(3)) */
        fprintf(stderr, "<%d>%s\n", level, msg);
        return;
    }
    const char *tag = level <= KVFS_LOG_ERR ? "error" : level == KVFS_LOG_WARN ? "warning"
                    : level == KVFS_LOG_INFO ? "info" : "debug";
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    localtime_r(&ts.tv_sec, &tm);
    if (log_file) /* a file outlives the run: the date and the pid too */
        fprintf(log_file, "%04d-%02d-%02d %02d:%02d:%02d.%03ld kvfs[%d]: %s: %s\n", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000,
                (int)getpid(), tag, msg);
    else
        fprintf(stderr, "%02d:%02d:%02d.%03ld kvfs: %s: %s\n", tm.tm_hour, tm.tm_min, tm.tm_sec,
                ts.tv_nsec / 1000000, tag, msg);
}

static void log_to_daemon_log(const char *store_dir)
{
    if (access("/dev/log", F_OK) == 0) {
        openlog("kvfs", LOG_PID, LOG_DAEMON);
        use_syslog = 1;
        return;
    }
    char path[4096];
    snprintf(path, sizeof(path), "%s/kvfs.log", store_dir);
    FILE *f = fopen(path, "ae");
    if (!f) {
        fprintf(stderr, "kvfs: no syslog (/dev/log) and cannot open %s: %s; the daemon's log is lost\n", path,
                strerror(errno));
        use_syslog = 1;
        return;
    }
    setvbuf(f, NULL, _IOLBF, 0);
    fprintf(stderr, "kvfs: no syslog (/dev/log): logging to %s\n", path);
    log_file = f;
}

static char *default_store(void)
{
    const char *xdg = getenv("XDG_DATA_HOME"), *home = getenv("HOME");
    char buf[4096];
    if (geteuid() == 0)
        snprintf(buf, sizeof(buf), "/var/lib/kvfs");
    else if (xdg && *xdg)
        snprintf(buf, sizeof(buf), "%s/kvfs", xdg);
    else if (home && *home)
        snprintf(buf, sizeof(buf), "%s/.local/share/kvfs", home);
    else
        return NULL;
    return strdup(buf);
}

static int size_opt(const char *name, const char *val, uint64_t dflt, uint64_t *out)
{
    if (!val) {
        *out = dflt;
        return 0;
    }
    if (kvfs_parse_size(val, out) != 0) {
        fprintf(stderr, "kvfs: invalid %s '%s' (expected a size like 512M or 10G)\n", name, val);
        return -EINVAL;
    }
    return 0;
}

/* The mountpoint's absolute path (the daemon leaves its directory), and
 * whether the readahead is tuned (not with -s, as before). */
static char *mount_path;
static int tune_readahead;
static const char *store_for_status;

/* Runs on its own thread once the session serves requests (from init):
 * stat() of the mountpoint is a FUSE request to ourselves, so when it
 * returns the mount answers.  Then the kernel may read ahead in 1 MiB+
 * steps on our mount (best effort), and the service manager hears READY=1. */
static void *settle_mount(void *arg)
{
    char *path = arg; /* its own copy: the thread may outlive a quick unmount */
    struct stat st;
    if (stat(path, &st) != 0) {
        kvfs_log(KVFS_LOG_WARN, "stat %s: %s", path, strerror(errno));
    } else if (tune_readahead) {
        char p[128];
        snprintf(p, sizeof(p), "/sys/class/bdi/%u:%u/read_ahead_kb", major(st.st_dev), minor(st.st_dev));
        FILE *f = fopen(p, "w");
        if (f) {
            fprintf(f, "4096\n");
            fclose(f);
        }
    }
    systemd_notify_ready(path, path + strlen(path) + 1);
    free(path);
    return NULL;
}

static void kvfs_init(void *userdata, struct fuse_conn_info *conn)
{
    passthrough_init(userdata, conn);
    conn->max_write = 1u << 20;
    conn->max_readahead = 4u << 20;
    if (conn->capable & FUSE_CAP_READDIRPLUS)
        conn->want |= FUSE_CAP_READDIRPLUS;
    conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO; /* always plus: ls -l needs no lookups */
    if (conn->capable & FUSE_CAP_ASYNC_READ)
        conn->want |= FUSE_CAP_ASYNC_READ;
    /* lookups in one directory at once: a lookup may fetch a chunk from
     * the remote tier, and others must not queue behind it */
    if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
        conn->want |= FUSE_CAP_PARALLEL_DIROPS;
#ifdef FUSE_CAP_DIRECT_IO_ALLOW_MMAP
    /* blend results are direct_io when read through the daemon: without
     * this an mmap of one fails with ENODEV */
    if (conn->capable & FUSE_CAP_DIRECT_IO_ALLOW_MMAP)
        conn->want |= FUSE_CAP_DIRECT_IO_ALLOW_MMAP;
#endif
    pthread_t t;
    char *paths = NULL; /* "MOUNTPOINT\0STORE" */
    if (mount_path && asprintf(&paths, "%s%c%s", mount_path, 0, store_for_status) < 0)
        paths = NULL; /* asprintf leaves it undefined */
    if (paths && pthread_create(&t, NULL, settle_mount, paths) == 0) {
        pthread_detach(t);
    } else {
        free(paths);
        systemd_notify_ready(mount_path ? mount_path : "?", store_for_status);
    }
}

/* remote_capacity=quota (the pool's quota, as when unset) or none (unbounded) */
static int remote_capacity_words(const char *v)
{
    return !v || !strcmp(v, "quota") || !strcmp(v, "none");
}

/* The options turned into values (kvfs(8) has their meaning). */
struct settings {
    uint64_t capacity, ram, max_ingest, blend_cache, sim_read_bps, remote_capacity;
    float min_ratio;
    int direct_io; /* cold_reads: 0 auto, 1 direct, -1 buffered (kvfs_loader_opts) */
};

/* 0, or 2 (a usage error) after saying what is wrong. */
static int check_options(struct kvfs_mount *m, struct settings *st)
{
    if (size_opt("capacity", m->opts.capacity, 0, &st->capacity) ||
        size_opt("blend_cache", m->opts.blend_cache, 1ull << 30, &st->blend_cache) ||
        size_opt("ram", m->opts.ram, 256ull << 20, &st->ram) ||
        size_opt("max_ingest", m->opts.max_ingest, 4ull << 30, &st->max_ingest) ||
        (!remote_capacity_words(m->opts.remote_capacity) &&
         size_opt("remote_capacity", m->opts.remote_capacity, 0, &st->remote_capacity)))
        return 2;
    if (m->opts.remote_capacity && !m->opts.rados_pool) {
        fprintf(stderr, "kvfs: remote_capacity= needs rados=POOL\n");
        return 2;
    }
    if (m->opts.zstd_level < 0 || m->opts.zstd_level > 19) {
        fprintf(stderr, "kvfs: zstd level %d out of range 0..19\n", m->opts.zstd_level);
        return 2;
    }
    m->max_ingest = st->max_ingest;
    if (kvfs_blend_min_ratio_parse(m->opts.min_ratio, &st->min_ratio)) {
        fprintf(stderr, "kvfs: min_ratio=%s: expected a number in (0, 1]\n", m->opts.min_ratio);
        return 2;
    }
    if (m->opts.sim_read_bw && kvfs_parse_size(m->opts.sim_read_bw, &st->sim_read_bps)) {
        fprintf(stderr, "kvfs: sim_read_bw=%s: expected a size like 50M\n", m->opts.sim_read_bw);
        return 2;
    }
    if (m->opts.backend && strcmp(m->opts.backend, "auto") && strcmp(m->opts.backend, "cpu") &&
        strcmp(m->opts.backend, "cuda")) {
        fprintf(stderr, "kvfs: backend=%s: expected auto, cpu or cuda\n", m->opts.backend);
        return 2;
    }
    if (m->opts.blend_jobs < 0 || m->opts.blend_jobs > 64) {
        fprintf(stderr, "kvfs: blend_jobs=%d: expected 1 to 64\n", m->opts.blend_jobs);
        return 2;
    }
    if (m->opts.llama_streams == 0)
        m->opts.llama_streams = 1;
    if (m->opts.llama_streams < 1 || m->opts.llama_streams > KVFS_LLAMA_MAX_STREAMS) {
        fprintf(stderr, "kvfs: llama_streams=%d: expected 1 to %d (llama-server's -np)\n", m->opts.llama_streams,
                KVFS_LLAMA_MAX_STREAMS);
        return 2;
    }
    if (m->opts.kv_quant && strcmp(m->opts.kv_quant, "none") &&
        !((m->kv_quant = kvfs_dtype_parse(m->opts.kv_quant)) && kvfs_dtype_quantized(m->kv_quant))) {
        fprintf(stderr, "kvfs: kv_quant=%s: expected q8, q4, q4s or none\n", m->opts.kv_quant);
        return 2;
    }
    if (m->opts.cold_reads && strcmp(m->opts.cold_reads, "auto")) {
        if (!strcmp(m->opts.cold_reads, "direct"))
            st->direct_io = 1;
        else if (!strcmp(m->opts.cold_reads, "buffered"))
            st->direct_io = -1;
        else {
            fprintf(stderr, "kvfs: cold_reads=%s: expected auto, direct or buffered\n", m->opts.cold_reads);
            return 2;
        }
    }
    if (m->opts.llama_saves && strcmp(m->opts.llama_saves, "sync")) {
        if (strcmp(m->opts.llama_saves, "async")) {
            fprintf(stderr, "kvfs: llama_saves=%s: expected sync or async\n", m->opts.llama_saves);
            return 2;
        }
        m->llama_async = 1;
    }
    if (passthrough_parse(m, m->opts.passthrough)) {
        fprintf(stderr, "kvfs: passthrough=%s: expected auto, on or off\n", m->opts.passthrough);
        return 2;
    }
    if (!m->opts.store_dir && !(m->opts.store_dir = default_store())) {
        fprintf(stderr, "kvfs: no store directory: pass -o store=DIR\n");
        return 2;
    }
    if (m->opts.store_dir[0] != '/') { /* the daemon leaves its directory (fuse_daemonize) */
        char cwd[4096], *abs;
        if (!getcwd(cwd, sizeof(cwd)) || asprintf(&abs, "%s/%s", cwd, m->opts.store_dir) < 0) {
            fprintf(stderr, "kvfs: cannot make the store path %s absolute\n", m->opts.store_dir);
            return 2;
        }
        free(m->opts.store_dir);
        m->opts.store_dir = abs;
    }
    return 0;
}

/* One daemon per store: a second (an fstab line mounted twice stacks a
 * second FUSE mount; two mounts naming one store) would change the index
 * under the first.  The lock is STORE/kvfs.lock's, held until we exit (the
 * forked daemon shares it); a daemon still closing the store after its
 * unmount is waited for, 10 s at most.  The fd, or -errno after saying so. */
static int lock_store(const char *dir)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s", dir);
    for (char *c = path + 1; *c; c++) /* the store's own mkdir -p comes later */
        if (*c == '/') {
            *c = 0;
            mkdir(path, 0755);
            *c = '/';
        }
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/kvfs.lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        fprintf(stderr, "kvfs: cannot open %s: %s\n", path, strerror(errno));
        return -errno;
    }
    for (int tries = 0; flock(fd, LOCK_EX | LOCK_NB) != 0; tries++) {
        if (errno != EWOULDBLOCK || tries == 100) {
            char pid[32] = "";
            ssize_t n = pread(fd, pid, sizeof(pid) - 1, 0);
            pid[n > 0 ? n : 0] = 0;
            pid[strcspn(pid, "\n")] = 0;
            fprintf(stderr, "kvfs: store %s is in use by another kvfs%s%s%s\n", dir, pid[0] ? " (pid " : "", pid,
                    pid[0] ? ")" : "");
            close(fd);
            return -EBUSY;
        }
        usleep(100 * 1000);
    }
    return fd;
}

/* After fuse_daemonize: the pid that holds the lock, for the message above. */
static void note_lock_pid(int fd)
{
    char pid[32];
    int n = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, n, 0) != n)
        kvfs_log(KVFS_LOG_DEBUG, "kvfs.lock: cannot write our pid");
}

/* The store, the blend service (models) and the namespace's tables. */
static int open_mount(struct kvfs_mount *m, const struct settings *st)
{
    struct kvfs_store_opts so = {.dir = m->opts.store_dir, .capacity = st->capacity, .ram_bytes = st->ram,
                                 .zstd_level = m->opts.zstd_level, .result_capacity = st->blend_cache};
    struct kvfs_blend_service_opts bso = {.model_paths = m->opts.model, .backend = m->opts.backend,
                                          .min_ratio = st->min_ratio, .sim_read_bps = st->sim_read_bps,
                                          .jobs = m->opts.blend_jobs, .dtype = m->kv_quant,
                                          .direct_io = st->direct_io};
    char err[512] = "";
    pthread_mutex_init(&m->fh_lock, NULL); /* close_mount takes it, whatever failed here */
    int rc = kvfs_store_open(&so, &m->store, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "kvfs: cannot open store %s: %s\n", m->opts.store_dir, err[0] ? err : strerror(-rc));
        return rc;
    }
    pthread_mutex_init(&m->lock, NULL);
    if ((rc = kvfs_blend_service_open(m->store, &bso, &m->svc, err, sizeof(err)))) {
        fprintf(stderr, "kvfs: %s\n", err[0] ? err : strerror(-rc));
        return rc;
    }
    if ((rc = blends_init(m)))
        return rc;
    m->hooks = (struct fs_hooks){pending_put, blends_release, passthrough_abandon, blends_set_recipe, llama_ingest};
    kvfs_store_add_stats(m->store, passthrough_stats, m);
    kvfs_store_add_stats(m->store, kvfs_cpu_stats, NULL);
    m->mount_time = time(NULL);
    return (m->inos = ino_map_new()) ? 0 : -ENOMEM;
}

static void close_mount(struct kvfs_mount *m)
{
    fh_release_all(m); /* first: they hold drafts, blend names and images */
    while (m->pending) {
        struct pending *p = m->pending;
        m->pending = p->next;
        free(p->buf);
        free(p);
    }
    ino_map_free(m->inos);
    passthrough_free(m);
    blends_free(m);
    kvfs_blend_service_close(m->svc);
    kvfs_store_close(m->store);
}

/* After daemonizing (the tier runs a worker thread); NULL without rados=. */
static int open_remote(struct kvfs_mount *m, struct kvfs_remote **out)
{
    struct kvfs_remote_opts ro = {.pool = m->opts.rados_pool, .ceph_conf = m->opts.ceph_conf,
                                  .rados_id = m->opts.rados_id, .keyring = m->opts.rados_keyring,
                                  .ns = m->opts.rados_ns, .timeout_s = m->opts.rados_timeout,
                                  .list_refresh_s = m->opts.remote_list, .lease_s = m->opts.remote_lease,
                                  .changes = m->opts.remote_changes};
    /* unset or "quota": the pool's quota; "none": unbounded; SIZE (checked by check_options) */
    ro.capacity_quota = !m->opts.remote_capacity || !strcmp(m->opts.remote_capacity, "quota");
    if (!remote_capacity_words(m->opts.remote_capacity))
        kvfs_parse_size(m->opts.remote_capacity, &ro.capacity);
    char err[512] = "";
    *out = NULL;
    if (!m->opts.rados_pool)
        return 0;
    int rc = kvfs_remote_open(m->store, &ro, out, err, sizeof(err));
    if (rc) {
        kvfs_log(KVFS_LOG_ERR, "remote tier: %s", err);
        return rc;
    }
    kvfs_store_add_stats(m->store, kvfs_remote_stats, *out);
    kvfs_log(KVFS_LOG_INFO, "remote tier: RADOS pool %s%s%s (%s), calls bounded by %d s", m->opts.rados_pool,
             m->opts.rados_ns ? ", namespace " : "", m->opts.rados_ns ? m->opts.rados_ns : "", kvfs_remote_state(*out), m->opts.rados_timeout > 0 ? m->opts.rados_timeout : 5);
    return 0;
}

/* Mount, serve until unmounted, unmount: the loop's result (0 = clean). */
static int serve(struct kvfs_mount *m, struct fuse_args *args, const struct fuse_cmdline_opts *cl)
{
    struct fuse_lowlevel_ops ops = kvfs_ll_ops;
    struct kvfs_remote *remote = NULL;
    int ret = 1;
    ops.init = kvfs_init;
    struct fuse_session *se = fuse_session_new(args, &ops, sizeof(ops), m);
    if (!se) { /* libfuse said which option it does not know */
        fprintf(stderr, "kvfs: cannot start the FUSE session (kvfs(8) lists the options)\n");
        return 1;
    }
    if (fuse_set_signal_handlers(se) != 0)
        goto destroy_session;
    /* before the mount: resolving the path afterwards would ask ourselves */
    mount_path = realpath(cl->mountpoint, NULL);
    tune_readahead = !cl->singlethread;
    store_for_status = m->opts.store_dir;
    if (fuse_session_mount(se, cl->mountpoint) != 0) {
        fprintf(stderr, "kvfs: cannot mount on %s\n", cl->mountpoint);
        goto remove_handlers;
    }
    kvfs_log(KVFS_LOG_INFO, "mounted %s on %s (%llu chunks, capacity %s, ram %s, zstd %d)", m->opts.store_dir,
             cl->mountpoint, (unsigned long long)kvfs_store_count(m->store),
             m->opts.capacity ? m->opts.capacity : "unlimited", m->opts.ram ? m->opts.ram : "256M",
             m->opts.zstd_level);
    if (!cl->foreground)
        log_to_daemon_log(m->opts.store_dir);
    fuse_daemonize(cl->foreground);
    note_lock_pid(m->lock_fd);
    int looped = 0; /* ret is the loop's (a signal's number) only then: a failure before it is 1 too, SIGHUP's */
    if (open_remote(m, &remote) == 0) {
        m->remote = remote;
        m->se = se;
        looped = 1;
        if (cl->singlethread) {
            ret = fuse_session_loop(se);
        } else {
            struct fuse_loop_config *lc = fuse_loop_cfg_create();
            fuse_loop_cfg_set_max_threads(lc, 16);
            fuse_loop_cfg_set_idle_threads(lc, 8);
            ret = fuse_session_loop_mt(se, lc);
            fuse_loop_cfg_destroy(lc);
        }
    }
    /* libfuse returns the signal that ended the loop: a stop asked for by
     * SIGTERM, SIGINT or SIGHUP is clean (systemd counts 1 as a failure) */
    if (looped && (ret == SIGTERM || ret == SIGINT || ret == SIGHUP)) {
        kvfs_log(KVFS_LOG_INFO, "%s: stopping", strsignal(ret));
        ret = 0;
    }
    kvfs_log(KVFS_LOG_INFO, "unmounting %s", cl->mountpoint);
    systemd_notify_stopping();
    fuse_session_unmount(se);
    kvfs_store_flush(m->store); /* saves closed before the unmount: stored, and told to the remote tier */
    m->remote = NULL;
    kvfs_remote_close(remote);
remove_handlers:
    fuse_remove_signal_handlers(se);
destroy_session:
    fuse_session_destroy(se);
    return ret;
}

static void free_opts(struct kvfs_opts *o)
{
    char *strs[] = {o->store_dir, o->capacity, o->ram, o->max_ingest, o->model, o->backend, o->min_ratio, o->kv_quant,
                    o->sim_read_bw, o->blend_cache, o->rados_pool, o->ceph_conf, o->rados_id, o->rados_keyring, o->rados_ns, o->passthrough,
                    o->remote_capacity, o->cold_reads, o->llama_saves};
    for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++)
        free(strs[i]);
}

/* The words that are not options: MOUNTPOINT, or SOURCE MOUNTPOINT as
 * mount.fuse3 passes them for an /etc/fstab line. */
static char *words[2];
static int n_words;
static int take_word(void *data, const char *arg, int key, struct fuse_args *outargs)
{
    (void)data;
    (void)outargs;
    if (key != FUSE_OPT_KEY_NONOPT)
        return 1; /* libfuse's, kept for fuse_parse_cmdline and the session */
    if (n_words == 2) {
        fprintf(stderr, "kvfs: unexpected argument '%s' (usage: kvfs [-o OPTIONS] [STORE] MOUNTPOINT)\n", arg);
        return -1;
    }
    return (words[n_words++] = strdup(arg)) ? 0 : -1;
}

/* SOURCE is the store directory, as a block device is a filesystem's
 * ("kvfs" or "none": store= or the default store).  It becomes the mount's
 * fsname, so /proc/mounts shows the fstab line's source and mount -a knows
 * the line is mounted.  0, or 2 after saying what is wrong. */
static int take_source(struct kvfs_opts *o, struct fuse_args *args)
{
    if (n_words == 0)
        return 0; /* fuse_parse_cmdline finds no mountpoint */
    if (n_words == 2) {
        const char *src = words[0];
        if (strcmp(src, "kvfs") && strcmp(src, "none")) {
            if (o->store_dir && strcmp(o->store_dir, src)) {
                fprintf(stderr, "kvfs: the source %s and store=%s name two stores: give one\n", src, o->store_dir);
                return 2;
            }
            if (!o->store_dir && !(o->store_dir = strdup(src)))
                return 1;
        }
        char fsname[4200], *opt = NULL;
        snprintf(fsname, sizeof(fsname), "fsname=%s", src);
        /* first, so that an fsname= of the caller's wins; an fsname= drops
         * libfuse's default subtype (fuse.kvfs, the fstab line's type) */
        if (fuse_opt_add_opt_escaped(&opt, fsname) || fuse_opt_add_opt(&opt, "subtype=kvfs") ||
            fuse_opt_insert_arg(args, 1, "-o") ||
            fuse_opt_insert_arg(args, 2, opt)) {
            free(opt);
            return 1;
        }
        free(opt);
    }
    return fuse_opt_add_arg(args, words[n_words - 1]) ? 1 : 0;
}

int main(int argc, char *argv[])
{
    struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
    struct fuse_cmdline_opts cl = {0};
    struct kvfs_mount m;
    struct settings st = {0};
    int ret = 1;
    memset(&m, 0, sizeof(m));
    m.opts.zstd_level = 1;
    /* blends allocate and free tens of MB per request: with glibc's
     * adaptive mmap threshold those buffers end up in arenas that never
     * shrink, and RSS creeps with the number of requests; a fixed threshold
     * returns them to the system (blend_serve.sh measures the RSS) */
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
    /* passthrough holds one descriptor per decoded image (a memfd): as many
     * as the hard limit allows (beyond it, images are read through us) */
    struct rlimit nofile;
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
        nofile.rlim_cur = nofile.rlim_max;
        setrlimit(RLIMIT_NOFILE, &nofile);
    }
    if (fuse_opt_parse(&args, &m.opts, kvfs_opt_spec, take_word) != 0) {
        ret = 2;
        goto out;
    }
    if ((ret = take_source(&m.opts, &args)))
        goto out;
    ret = 1;
    /* the kernel checks every access against the mode bits kvfs reports:
     * with allow_other, other users read chunks (0644) but cannot add,
     * remove, pin or blend (the directories are the owner's, 0755) */
    if (fuse_opt_add_arg(&args, "-odefault_permissions") != 0)
        goto out;
    if (fuse_parse_cmdline(&args, &cl) != 0) {
        fprintf(stderr, "kvfs: bad arguments (try --help)\n");
        ret = 2;
    } else if (cl.show_help) {
        usage(argv[0]);
        ret = 0;
    } else if (cl.show_version) {
        printf("kvfs %s (libfuse %s)\n", KVFS_VERSION_STRING, fuse_pkgversion());
        kvfs_cpu_describe(stdout);
        ret = 0;
    } else if (!cl.mountpoint) {
        fprintf(stderr, "kvfs: no mountpoint given (usage: kvfs [-f] [-o store=DIR,...] [STORE] MOUNTPOINT)\n");
        ret = 2;
    } else if (!(ret = check_options(&m, &st))) {
        use_journal = cl.foreground && systemd_stderr_is_journal();
        kvfs_set_log(log_line);
        kvfs_set_log_level(m.opts.verbose ? KVFS_LOG_DEBUG : KVFS_LOG_INFO);
        if ((m.lock_fd = lock_store(m.opts.store_dir)) >= 0) {
            ret = open_mount(&m, &st) || serve(&m, &args, &cl) ? 1 : 0;
            close_mount(&m);
            close(m.lock_fd);
        } else {
            ret = 1;
        }
    }
out:
    free(cl.mountpoint);
    free(mount_path);
    free(words[0]);
    free(words[1]);
    fuse_opt_free_args(&args);
    free_opts(&m.opts);
    return ret; /* 0, 1 (failed) or 2 (usage) */
}
