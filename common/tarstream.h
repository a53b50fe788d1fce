/* Tar streams, piece by piece: what file transfers need of the format
 * without holding an archive in memory (the worker's Docker backend,
 * worker/docker/docker_files.c, and forwarder; the CLI's sandbox cp). A header writer for the one-entry archive a raw upload becomes,
 * a streaming reader that takes the Engine's archive in pieces of any size
 * and calls back once per entry (PAX 'x' and GNU 'L'/'K' long names and
 * links handled) and with each entry's content, and the listing a
 * directory's entries become. Pure: no I/O, no Docker. */
#ifndef SBX_TARSTREAM_H
#define SBX_TARSTREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "limits.h"
#include "sbuf.h"

#define TARSTREAM_BLOCK       512
/* A regular file's header: a PAX header block and its data block (for a
 * name over 100 bytes) and the ustar block. */
#define TARSTREAM_HEADER_MAX  (3 * TARSTREAM_BLOCK)
/* The end of an archive: two zero blocks. */
#define TARSTREAM_TRAILER     (2 * TARSTREAM_BLOCK)
/* A file name (one path component) the writer takes: at most NAME_MAX. */
#define TARSTREAM_NAME_MAX    255
/* The content of a PAX header or a GNU long name the reader keeps at most
 * (more is an error: no archive of the Engine's needs it). */
#define TARSTREAM_META_MAX    (64u * 1024u)
/* A name or link target longer than SBX_FILES_PATH_MAX is refused. */

/* Writes the header of a regular file `name` (a single component: no '/',
 * not "." or "..", no control bytes, 1..TARSTREAM_NAME_MAX bytes) of size
 * bytes, permission bits mode (07777), owner 0:0 and mtime into out.
 * Returns its length (a multiple of TARSTREAM_BLOCK), or SBX_EINVAL. */
int tarstream_file_header(const char *name, int64_t size, unsigned mode, int64_t mtime,
                          unsigned char out[TARSTREAM_HEADER_MAX]);
/* As tarstream_file_header, name a relative path of such components
 * ("a/b/f"): unpacking makes the directories above the file. */
int tarstream_file_header_rel(const char *name, int64_t size, unsigned mode, int64_t mtime,
                              unsigned char out[TARSTREAM_HEADER_MAX]);

/* Writes the checksum of ustar header block h (the byte sum with the
 * field itself as spaces, six octal digits, NUL, space). */
void tarstream_checksum(unsigned char h[TARSTREAM_BLOCK]);

/* The padding after size content bytes, to the next block. */
size_t tarstream_padding(int64_t size);

/* One entry as the reader sees it (PAX and GNU names applied). */
typedef struct tarstream_entry {
    char name[SBX_FILES_PATH_MAX + 1];   /* as in the archive, a leading "./" removed (a PAX sparse
                                          * member: its GNU.sparse.name) */
    char link[SBX_FILES_PATH_MAX + 1];   /* symlink or hard link target, else "" */
    char type;                           /* the typeflag: '0' file, '5' dir, '2' symlink, '1' link, ...
                                          * (an old '\0' entry whose name ends in '/' is '5') */
    int64_t size;                        /* content bytes that follow in the archive */
    unsigned mode;                       /* 07777 bits */
    int64_t mtime;                       /* seconds since the epoch */
    bool sparse;                         /* a sparse file: holes the archive leaves out */
    const char *sparse_kind;             /* then its dialect (static text), else NULL */
    int64_t realsize;                    /* the file's size once unpacked (sparse: the apparent size,
                                          * as far as the archive says; else size) */
} tarstream_entry_t;

/* The sparse dialects the reader knows (entry.sparse_kind). */
#define TARSTREAM_SPARSE_GNU    "GNU 'S'"
#define TARSTREAM_SPARSE_PAX00  "PAX 0.0"
#define TARSTREAM_SPARSE_PAX01  "PAX 0.1"
#define TARSTREAM_SPARSE_PAX10  "PAX 1.0"
#define TARSTREAM_SPARSE_PAX    "PAX GNU.sparse"

/* The kind of an entry for a listing: "file", "dir", "symlink", "other". */
const char *tarstream_kind(char type);

/* Called once per entry before its content; < 0 stops the reader (push
 * returns the value). */
typedef int (*tarstream_entry_fn)(void *ud, const tarstream_entry_t *e);
/* The content of the current entry, in order, n > 0; < 0 stops. */
typedef int (*tarstream_data_fn)(void *ud, const char *data, size_t n);

typedef enum {
    TARSTREAM_HEADER = 0,    /* collecting a header block */
    TARSTREAM_CONTENT,       /* an entry's content */
    TARSTREAM_META,          /* a PAX / GNU long-name entry's content */
    TARSTREAM_PAD,           /* the padding after content */
    TARSTREAM_SPARSE_EXT,    /* the extension blocks after a GNU 'S' header */
    TARSTREAM_END,           /* two zero blocks seen: the rest is ignored */
} tarstream_state_t;

/* The bytes of the headers that describe one entry before its own header
 * block (a PAX 'x' header, GNU 'L' and 'K' long names, each with its
 * blocks), or of one PAX 'g' header, at most: what a reader holds back
 * before it can judge an entry (tarstream_gate). */
#define TARSTREAM_PREFIX_MAX  (TARSTREAM_META_MAX + 2 * (SBX_FILES_PATH_MAX + 1) + 8 * TARSTREAM_BLOCK)

typedef struct tarstream {
    tarstream_state_t state;
    unsigned char block[TARSTREAM_BLOCK];
    size_t block_len;
    int64_t remaining;       /* content (or meta) bytes left of the entry */
    size_t pad;              /* padding bytes left */
    int zero_blocks;         /* consecutive zero header blocks */
    char meta_type;          /* 'x', 'g', 'L', 'K' while in TARSTREAM_META */
    char *meta;              /* TARSTREAM_META_MAX bytes (tarstream_init) */
    size_t meta_len;
    /* What the last PAX 'x' or GNU entry said about the next entry. */
    bool have_x, have_l, have_k;           /* which headers came for it */
    bool next_name, next_link, next_size, next_mtime;
    bool pax_path, pax_linkpath;           /* the PAX header named them */
    bool sparse_name;                      /* pending_name is GNU.sparse.name */
    const char *next_sparse;               /* a PAX sparse dialect, or NULL */
    bool next_realsize;
    char *pending_name;      /* SBX_FILES_PATH_MAX + 1 each */
    char *pending_link;
    int64_t pending_size, pending_mtime, pending_realsize;
    uint64_t offset;         /* bytes taken so far */
    uint64_t judged;         /* of which the first ones belong to entries on_entry accepted (with their
                              * content and padding), to complete PAX 'g' headers or to the end blocks */
    uint64_t prefix;         /* bytes of the headers pending for the next entry */
    tarstream_entry_t entry; /* the current entry */
    tarstream_entry_fn on_entry;
    tarstream_data_fn on_data;
    void *ud;
    char error[160];         /* why the stream was refused */
} tarstream_t;

/* Prepares t (0 or SBX_ENOMEM); tarstream_release frees what it holds.
 * on_data may be NULL (contents skipped). */
int tarstream_init(tarstream_t *t, tarstream_entry_fn on_entry, tarstream_data_fn on_data, void *ud);
void tarstream_release(tarstream_t *t);

/* Takes n more bytes of the stream. 0, a callback's negative value, or
 * SBX_EINVAL with t->error: a bad checksum or number, a name past
 * SBX_FILES_PATH_MAX, an oversized PAX header, a link, symlink, device,
 * directory or FIFO entry that says it has content, a zero block followed
 * by a header, and headers that readers disagree on (two PAX 'x' headers
 * or two GNU long names for one entry, a GNU long name and a PAX path for
 * one entry, a PAX 'g' header between an entry's own headers, headers
 * with no entry after them). So the reader splits a stream into the same
 * entries as Go's archive/tar (Docker) and GNU tar, or refuses it. */
int tarstream_push(tarstream_t *t, const char *data, size_t n);

/* At the stream's end: 0 when it ended between entries (with or without
 * its zero blocks), SBX_EINVAL "the archive ends inside an entry" else. */
int tarstream_finish(tarstream_t *t);

/* Checks that an entry's name is the archive's top name `top` (one path
 * component; "" for the archive of "/", whose names may start with '/')
 * or a path below it: relative, no "." or ".." component, no empty one
 * (a trailing '/' aside). *ret_rest and *ret_len are what follows "top/" in
 * name (length 0 for top itself; a trailing '/' not counted), pointing
 * into name. 0 or SBX_EINVAL. */
int tarstream_name_under(const char *name, const char *top, const char **ret_rest, size_t *ret_len);

/* ---- a gate: the stream handed on only as its entries are judged ------- */

/* Bytes a gate holds at most: the headers pending for one entry, its
 * header block and one piece of TARSTREAM_GATE_PIECE. */
#define TARSTREAM_GATE_PIECE  SBX_TAR_GATE_PIECE
#define TARSTREAM_GATE_CAP    (TARSTREAM_PREFIX_MAX + 2 * TARSTREAM_BLOCK + TARSTREAM_GATE_PIECE)

/* A tar stream on its way somewhere: bytes are pushed in, and only those
 * of entries the judge (the on_entry callback) accepted come out, with
 * their headers, content and padding; a refused entry's headers never do.
 * What follows the archive's end blocks is dropped. */
typedef struct tarstream_gate {
    tarstream_t tar;
    unsigned char *buf;      /* TARSTREAM_GATE_CAP: buf[start, start + len) pushed, not taken */
    size_t start, len;
    uint64_t taken;          /* stream offset of buf[start] */
} tarstream_gate_t;

/* Prepares g with judge (may be NULL: every entry passes; the reader's own
 * refusals still stand) and ud. 0 or SBX_ENOMEM; tarstream_gate_release
 * frees it. */
int tarstream_gate_init(tarstream_gate_t *g, tarstream_entry_fn judge, void *ud);
void tarstream_gate_release(tarstream_gate_t *g);

/* How many bytes tarstream_gate_push takes now (> 0 once the ready bytes
 * were taken). */
size_t tarstream_gate_room(const tarstream_gate_t *g);

/* Takes n <= room bytes. 0; the judge's negative value; SBX_EINVAL with
 * g->tar.error when the reader refused the stream (tarstream_push). */
int tarstream_gate_push(tarstream_gate_t *g, const char *data, size_t n);

/* The judged bytes waiting to be handed on: *ret_n of them at the returned
 * pointer (valid until the next push or consume). */
const char *tarstream_gate_ready(const tarstream_gate_t *g, size_t *ret_n);

/* n <= ready bytes were handed on. */
void tarstream_gate_consume(tarstream_gate_t *g, size_t n);

/* At the stream's end (tarstream_finish): 0 when it ended between entries,
 * so nothing is held back any more; SBX_EINVAL with g->tar.error else. */
int tarstream_gate_finish(tarstream_gate_t *g);

/* A directory listing of direct children, written out as it goes: the
 * archive of path P has a first entry ("work/" for /work, or the file's
 * own name), and the children are the entries one component below it. */
typedef struct tarstream_list {
    char root[SBX_FILES_PATH_MAX + 1];   /* the first entry's name without '/'; "" before it */
    bool have_root;
    bool root_is_dir;
    size_t count;
    size_t max;              /* entries kept at most */
    bool truncated;
} tarstream_list_t;

void tarstream_list_init(tarstream_list_t *l, size_t max);

/* Takes one entry. Appends its JSON object (with a leading "," after the
 * first) to out when it is a direct child (or, for a path that is not a
 * directory, the path itself). Returns 1 when it was listed, 0 when it was
 * not one to list, 2 when the listing is full (l->truncated: the caller
 * may stop reading), SBX_ENOMEM. */
int tarstream_list_add(tarstream_list_t *l, const tarstream_entry_t *e, sbuf_t *out);

/* The document's head and tail: "{\"entries\":[" and
 * "],\"truncated\":B}". */
#define TARSTREAM_LIST_HEAD "{\"entries\":["
int tarstream_list_tail(const tarstream_list_t *l, sbuf_t *out);

/* Cleans an absolute path lexically into out (SBX_FILES_PATH_MAX + 1):
 * repeated '/' and "." components dropped, ".." removes the component
 * before it and stays at "/" at the root (so "/../../etc/x" is "/etc/x",
 * inside the container's root); no trailing '/' but for "/" itself.
 * SBX_EINVAL for a path that is not absolute, has a control byte, or is
 * longer than SBX_FILES_PATH_MAX. */
int tarstream_path_clean(const char *path, char *out);

/* RFC 3339 UTC ("2026-01-02T03:04:05Z") of t into out (at least 32 bytes). */
void tarstream_time_rfc3339(int64_t t, char *out, size_t outlen);

#endif
