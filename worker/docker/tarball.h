/* A minimal tar archive built in memory: what `docker import` needs to make
 * the worker's probe image without any file on disk. */
#ifndef SBX_TARBALL_H
#define SBX_TARBALL_H

#include <stddef.h>

/* One ustar header block for the directory plus the two zero blocks that
 * end an archive. */
#define TARBALL_BLOCK_BYTES 512
#define TARBALL_DIR_BYTES   (3 * TARBALL_BLOCK_BYTES)

/* Writes into out an archive holding only the empty directory `name`
 * (mode 0755, owner 0:0, mtime 0; a trailing '/' is added when missing).
 * name must be 1 to 98 bytes of [A-Za-z0-9._-/], not starting with '/'.
 * Returns 0 or SBX_EINVAL. */
int tarball_dir(const char *name, unsigned char out[TARBALL_DIR_BYTES]);

#endif
