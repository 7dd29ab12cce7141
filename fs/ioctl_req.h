/* ioctl_req.h - decoding the KVFS_IOC_BLEND / KVFS_IOC_BLEND_BATCH request
 * structs (kvfs_ioctl.h) as copied from the caller: no FUSE here, so the
 * decoder is fuzzed on its own (tests/fuzz/fuzz_ioctl.c). */
#ifndef KVFS_IOCTL_REQ_H
#define KVFS_IOCTL_REQ_H

#include <stddef.h>

/* The version and flags that lead both structs: 0, or -EINVAL with the
 * reason in err. */
int kvfs_ioctl_header_check(const void *req, char *err, size_t errlen);

/* A batch's recipes, split in place at lines "%%" (the last byte of the
 * cap-byte field is made NUL first): up to max pieces into out; returns
 * how many (max + 1 pieces are never reported: the caller passes one more
 * than it accepts to detect "too many"). */
int kvfs_ioctl_split_batch(char *text, size_t cap, char **out, int max);

#endif
