/* ioctl_req.c - decoding ioctl request structs (ioctl_req.h). */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "ioctl_req.h"
#include "kvfs_ioctl.h"
#include "log.h"

int kvfs_ioctl_header_check(const void *req, char *err, size_t errlen)
{
    uint32_t hdr[2];
    memcpy(hdr, req, sizeof(hdr));
    if (hdr[0] != KVFS_IOCTL_VERSION || hdr[1] != 0)
        return kvfs_errf(err, errlen, -EINVAL, "unsupported request version %u or flags 0x%x", hdr[0], hdr[1]);
    return 0;
}

int kvfs_ioctl_split_batch(char *text, size_t cap, char **out, int max)
{
    int n = 0;
    if (cap == 0)
        return 0;
    text[cap - 1] = '\0';
    char *p = text;
    while (*p && n < max) {
        out[n++] = p;
        char *sep = strstr(p, "\n%%\n");
        if (!sep) { /* a "%%" line that ends the text (not the first "\n%%": "%%x" is not a separator) */
            size_t len = strlen(p);
            sep = len >= 3 && !memcmp(p + len - 3, "\n%%", 3) ? p + len - 3 : NULL;
        }
        if (!sep)
            break;
        sep[1] = '\0';
        p = sep + 3 + (sep[3] == '\n');
    }
    return n;
}
