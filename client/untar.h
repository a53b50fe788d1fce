/* Unpacking a downloaded tar into the user's folder (sandbox cp SBX:/path
 * DEST): the archive is data, not instructions. Every member must be the
 * archive's top name or below it; it is written only inside the copy,
 * walking each path component with openat(O_NOFOLLOW) from a directory the
 * caller opened, so no symlink is ever followed (one that was in the
 * folder, or one the archive made); an existing non-directory in the way
 * is removed and made anew, never written through; devices and FIFOs are
 * skipped with a warning; hard links only to files this unpacking wrote;
 * modes masked to 0777, owners never set; sparse members refused.
 * Directories get their modes and mtimes after their contents. */
#ifndef SBX_UNTAR_H
#define SBX_UNTAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct untar untar_t;

typedef struct untar_opts {
    int dir_fd;              /* the directory the copy is made in (the caller's; not closed) */
    const char *from;        /* the archive's top name: one path component */
    const char *to;          /* the name the copy gets in dir_fd: one path component */
    FILE *warn;              /* a line per skipped member, at most SBX_CP_WARN_MAX (NULL: none) */
} untar_opts_t;

/* A new unpacking (*ret, untar_free). SBX_EINVAL when from or to is not one
 * component (empty, ".", "..", a '/'), SBX_ENOMEM. */
int untar_new(const untar_opts_t *o, untar_t **ret);

/* Takes n more bytes of the archive. 0, or < 0 once a member was refused
 * or could not be written: untar_error says which and why; what was
 * written before stays. Nothing more is taken after an error. */
int untar_push(untar_t *u, const char *data, size_t n);

/* At the archive's end: checks it ended between members and held the top
 * member, then gives directories their modes and mtimes. 0 or < 0 with
 * untar_error. */
int untar_finish(untar_t *u);

/* Why the unpacking failed: one line, member names with control bytes as
 * '?' ("" while it did not). */
const char *untar_error(const untar_t *u);

/* Members skipped (devices, FIFOs). */
uint64_t untar_skipped(const untar_t *u);

/* Frees u (NULL is fine), closing a file it was writing. */
void untar_free(untar_t *u);

#endif
