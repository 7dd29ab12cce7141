/* version.h - the release of kvfs, kvfsctl and the file formats they write. */
#ifndef KVFS_VERSION_H
#define KVFS_VERSION_H

#define KVFS_VERSION_STRING "0.1.0"

#endif
