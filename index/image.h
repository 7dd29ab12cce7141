/* image.h - decoded chunk and blend images, optionally in memfds the kernel
 * can serve directly (FUSE passthrough): see image.c. */
#ifndef KVFS_IMAGE_H
#define KVFS_IMAGE_H

#include <stddef.h>
#include <stdint.h>

/* On: new images are memfds mapped shared (the daemon, when passthrough is
 * active).  Off (the default): aligned heap memory. */
void kvfs_img_set_shared(int on);
/* Where shared images live: "heap" (off), "tmpfs (...)" or "memfd". */
const char *kvfs_img_backing(void);
/* len bytes for an image (align: for heap images); 0 or -ENOMEM */
int kvfs_img_alloc(size_t len, size_t align, uint8_t **out);
/* The memfd behind a shared image (valid while the image lives), or -1. */
int kvfs_img_fd(const void *img);
/* A heap image (e.g. a writer's buffer) moved into a shared one when shared
 * images are on and a memfd can be had; *img may change.  Always 0: an image
 * that stays on the heap is still served, through the daemon. */
int kvfs_img_adopt(uint8_t **img, size_t len);
/* Frees an image of either kind (NULL: nothing). */
void kvfs_img_free(void *img);

#endif
