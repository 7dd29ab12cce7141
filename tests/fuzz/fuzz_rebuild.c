/* fuzz_rebuild.c - libFuzzer target: the SQLite-index rebuild
 * (`kvfsctl fsck --rebuild`, index/fsck.c) over a store directory whose
 * one object holds arbitrary bytes (a mutated store object: the header
 * prefix, the layer frame table, zstd frames).  The object is named after
 * the content hash of the chunk its bytes decode to when they do, else
 * after a fixed hash, so that mutations reach both the "named right" and
 * the "content hash differs" paths.  Whatever the bytes: no crash, no
 * leak, and after the rebuild a plain fsck finds the store consistent
 * (the object indexed when it verifies, quarantined in lost+found when
 * not). */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "image.h"
#include "kvformat.h"
#include "object.h"
#include "store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[160]; /* paths below it are built in 256 bytes */

static void quiet(void *ctx, const char *line)
{
    (void)ctx;
    (void)line;
}

static int rm_one(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb, (void)type, (void)ftw;
    return remove(path) && errno != ENOENT ? -1 : 0;
}

static void rm_rf(const char *path)
{
    if (nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS) && errno != ENOENT)
        abort();
}

/* the name the bytes would be stored under: their chunk's content hash */
static void name_of(const uint8_t *data, size_t size, char hex[KVFS_HASH_HEX_LEN + 1])
{
    snprintf(hex, KVFS_HASH_HEX_LEN + 1, "%064d", 7);
    char path[128];
    snprintf(path, sizeof(path), "%s.probe", dir);
    FILE *f = fopen(path, "wb");
    if (!f)
        abort();
    fwrite(data, 1, size, f);
    fclose(f);
    int fd = open(path, O_RDONLY);
    uint8_t *img = NULL, digest[32];
    size_t len = 0;
    char why[256];
    struct kvfs_header h;
    if (fd >= 0 && kvfs_obj_decode_file(fd, (uint64_t)size, &img, &len, why, sizeof(why)) == 0 &&
        kvfs_header_parse(img, len, &h, why, sizeof(why)) == 0 && kvfs_content_hash(&h, digest) == 0)
        kvfs_hash_to_hex(digest, hex);
    kvfs_img_free(img);
    if (fd >= 0)
        close(fd);
    unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0]) { /* $TMPDIR: a tmpfs makes the store's fsyncs free, so the parser gets the CPU */
        const char *tmp = getenv("TMPDIR");
        snprintf(dir, sizeof(dir), "%s/fuzz_rebuild.%d", tmp && *tmp ? tmp : "/tmp", (int)getpid());
    }
    rm_rf(dir);
    char hex[KVFS_HASH_HEX_LEN + 1], path[256];
    name_of(data, size, hex);
    snprintf(path, sizeof(path), "%s/objects/%.2s", dir, hex);
    if (mkdir(dir, 0700) || mkdir((snprintf(path, sizeof(path), "%s/objects", dir), path), 0700))
        abort();
    snprintf(path, sizeof(path), "%s/objects/%.2s", dir, hex);
    if (mkdir(path, 0700))
        abort();
    snprintf(path, sizeof(path), "%s/objects/%.2s/%s.kvo", dir, hex, hex);
    FILE *f = fopen(path, "wb");
    if (!f)
        abort();
    fwrite(data, 1, size, f);
    fclose(f);
    int rc = kvfs_store_fsck(dir, 1, quiet, NULL);
    if (rc && rc != -EUCLEAN)
        abort(); /* the rebuild itself must not fail on a bad object */
    if (kvfs_store_fsck(dir, 0, quiet, NULL) != 0)
        abort(); /* after a rebuild the store is consistent */
    rm_rf(dir);
    return 0;
}
