/* Unpacking a downloaded tar into the user's folder (see untar.h). */
#include "untar.h"
#include "errors.h"
#include "fdutil.h"
#include "limits.h"
#include "sbuf.h"
#include "tarstream.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* A member name quoted in a message, at most (bytes). */
#define UNTAR_QUOTE_MAX 200

/* A file this unpacking wrote: what a hard link may point at. */
typedef struct untar_file {
    dev_t dev;
    ino_t ino;
} untar_file_t;

struct untar {
    untar_opts_t o;
    char *from, *to;
    tarstream_t tar;
    bool failed;
    bool top_seen;
    char error[600];
    /* the regular file being written */
    int out_fd;
    int64_t out_left;
    unsigned out_mode;
    int64_t out_mtime;
    char out_name[UNTAR_QUOTE_MAX + 8];
    /* files written (an open-addressing set; slots 0 are empty) */
    untar_file_t *files;
    size_t files_cap, files_n;
    bool files_full;
    /* directories to finish: "path\0" records, with their mode and mtime */
    sbuf_t dirs;
    size_t ndirs;
    uint64_t skipped;
};

/* ---- messages ---------------------------------------------------------- */

static void untar_quote(const char *name, char *out, size_t outlen)
{
    size_t n = 0, i = 0;
    for (; name[i] && i < UNTAR_QUOTE_MAX && n + 4 < outlen; i++)
        out[n++] = (unsigned char)name[i] < 0x20 || name[i] == 0x7f ? '?' : name[i];
    if (name[i] && n + 4 < outlen) {
        memcpy(out + n, "...", 3);
        n += 3;
    }
    out[n] = '\0';
}

static int untar_fail(untar_t *u, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int untar_fail(untar_t *u, const char *fmt, ...)
{
    if (!u->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(u->error, sizeof u->error, fmt, ap);
        va_end(ap);
    }
    u->failed = true;
    return SBX_EINVAL;
}

/* Why name is not from or below it. */
static const char *untar_name_problem(const char *name)
{
    if (name[0] == '/')
        return "has an absolute name";
    for (const char *p = name; *p;) {
        size_t n = strcspn(p, "/");
        if ((n == 2 && p[0] == '.' && p[1] == '.') || (n == 1 && p[0] == '.'))
            return "has a '.' or '..' component";
        if (n == 0)
            return "has an empty component ('//')";
        p += n + (p[n] == '/');
    }
    return "is not the copied path's own name or below it";
}

static bool untar_component_ok(const char *c)
{
    return c && *c && !strchr(c, '/') && strcmp(c, ".") != 0 && strcmp(c, "..") != 0 && strlen(c) <= NAME_MAX;
}

/* ---- the set of files written ------------------------------------------ */

static size_t untar_file_slot(const untar_file_t *tab, size_t cap, dev_t dev, ino_t ino)
{
    uint64_t h = ((uint64_t)dev * 0x9e3779b97f4a7c15ULL) ^ ((uint64_t)ino * 0xc2b2ae3d27d4eb4fULL);
    size_t i = (size_t)(h & (cap - 1));
    while (tab[i].ino != 0 && !(tab[i].dev == dev && tab[i].ino == ino))
        i = (i + 1) & (cap - 1);
    return i;
}

static bool untar_file_known(const untar_t *u, dev_t dev, ino_t ino)
{
    if (!u->files || ino == 0)
        return false;
    size_t i = untar_file_slot(u->files, u->files_cap, dev, ino);
    return u->files[i].ino == ino && u->files[i].dev == dev;
}

/* Remembers a file written; past SBX_CP_LINK_TARGETS_MAX files it is not
 * (a hard link to it is then refused). */
static void untar_file_add(untar_t *u, dev_t dev, ino_t ino)
{
    if (ino == 0 || u->files_n >= SBX_CP_LINK_TARGETS_MAX) {
        u->files_full = u->files_full || ino != 0;
        return;
    }
    if ((u->files_n + 1) * 2 > u->files_cap) {
        size_t cap = u->files_cap ? u->files_cap * 2 : 256;
        untar_file_t *tab = calloc(cap, sizeof *tab);
        if (!tab) {
            u->files_full = true;
            return;
        }
        for (size_t i = 0; i < u->files_cap; i++)
            if (u->files[i].ino)
                tab[untar_file_slot(tab, cap, u->files[i].dev, u->files[i].ino)] = u->files[i];
        free(u->files);
        u->files = tab;
        u->files_cap = cap;
    }
    size_t i = untar_file_slot(u->files, u->files_cap, dev, ino);
    if (u->files[i].ino == 0) {
        u->files[i] = (untar_file_t){ .dev = dev, .ino = ino };
        u->files_n++;
    }
}

/* ---- walking ----------------------------------------------------------- */

/* The path of a member in the copy: "to" then rest's components. */
typedef struct untar_path {
    char buf[SBX_FILES_PATH_MAX + NAME_MAX + 2];
    const char *comp[SBX_FILES_PATH_MAX / 2 + 2];
    size_t n;
} untar_path_t;

static int untar_path(untar_t *u, const char *rest, size_t rl, untar_path_t *p)
{
    size_t tl = strlen(u->to);
    memcpy(p->buf, u->to, tl + 1);
    p->comp[0] = p->buf;
    p->n = 1;
    size_t off = tl + 1;
    for (size_t i = 0; i < rl;) {
        size_t j = i;
        while (j < rl && rest[j] != '/')
            j++;
        memcpy(p->buf + off, rest + i, j - i);
        p->buf[off + j - i] = '\0';
        p->comp[p->n++] = p->buf + off;
        off += j - i + 1;
        i = j + 1;
    }
    return 0;
}

/* Opens the directory holding the last component of p: every component
 * before it opened with O_NOFOLLOW from dir_fd, made (0777 less the umask)
 * when missing and create. Returns the fd or < 0 with the error set. */
static int untar_parent(untar_t *u, const untar_path_t *p, const char *member, bool create)
{
    int fd = fd_dup_cloexec(u->o.dir_fd);
    if (fd < 0)
        return untar_fail(u, "cannot unpack %s: %s", member, strerror(errno));
    for (size_t i = 0; i + 1 < p->n; i++) {
        int next = openat(fd, p->comp[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (next < 0 && errno == ENOENT && create) {
            if (mkdirat(fd, p->comp[i], 0777) < 0 && errno != EEXIST) {
                int e = errno;
                close(fd);
                return untar_fail(u, "cannot unpack %s: cannot make directory %s: %s", member, p->comp[i],
                                  strerror(e));
            }
            next = openat(fd, p->comp[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        }
        if (next < 0) {
            int e = errno;
            struct stat st;
            bool link = fstatat(fd, p->comp[i], &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
            close(fd);
            char q[UNTAR_QUOTE_MAX + 8];
            untar_quote(p->comp[i], q, sizeof q);
            if (link)
                return untar_fail(u, "refused member %s: it would go through the symlink %s, which is not followed",
                                  member, q);
            return untar_fail(u, "cannot unpack %s: %s: %s", member, q, e == ENOTDIR ? "not a directory"
                                                                                       : strerror(e));
        }
        close(fd);
        fd = next;
    }
    return fd;
}

/* Makes room for a new entry name in parent: a missing one is fine; a
 * directory is kept when want_dir (else refused); a symlink where a
 * directory is wanted is refused; anything else is removed (never written
 * through). *ret_exists says a directory was kept. */
static int untar_clear(untar_t *u, int parent, const char *name, bool want_dir, const char *member,
                       bool *ret_exists)
{
    struct stat st;
    *ret_exists = false;
    if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? 0 : untar_fail(u, "cannot unpack %s: %s", member, strerror(errno));
    if (S_ISDIR(st.st_mode)) {
        if (want_dir) {
            *ret_exists = true;
            return 0;
        }
        return untar_fail(u, "cannot unpack %s: a directory of that name is in the way", member);
    }
    if (want_dir && S_ISLNK(st.st_mode))
        return untar_fail(u, "refused member %s: a symlink of that name is where the copy needs a directory, and "
                          "it is not followed", member);
    if (unlinkat(parent, name, 0) < 0)
        return untar_fail(u, "cannot unpack %s: cannot remove what is in the way: %s", member, strerror(errno));
    return 0;
}

/* ---- members ------------------------------------------------------------ */

static struct timespec untar_ts(int64_t t)
{
    return (struct timespec){ .tv_sec = (time_t)(t < 0 ? 0 : t), .tv_nsec = 0 };
}

/* The regular file being written is complete: its mode and mtime. */
static int untar_file_done(untar_t *u)
{
    int fd = u->out_fd, r = 0;
    u->out_fd = -1;
    struct stat st;
    struct timespec ts[2] = { { .tv_nsec = UTIME_NOW }, untar_ts(u->out_mtime) };
    if (fchmod(fd, u->out_mode & 0777) < 0 || futimens(fd, ts) < 0 || fstat(fd, &st) < 0)
        r = untar_fail(u, "cannot finish %s: %s", u->out_name, strerror(errno));
    else
        untar_file_add(u, st.st_dev, st.st_ino);
    if (close(fd) < 0 && r == 0)
        r = untar_fail(u, "cannot write %s: %s", u->out_name, strerror(errno));
    return r;
}

static int untar_dir(untar_t *u, int parent, const untar_path_t *p, const tarstream_entry_t *e, const char *q)
{
    const char *name = p->comp[p->n - 1];
    bool exists = false;
    if (untar_clear(u, parent, name, true, q, &exists) < 0)
        return SBX_EINVAL;
    if (!exists && mkdirat(parent, name, 0700) < 0)
        return untar_fail(u, "cannot make directory %s: %s", q, strerror(errno));
    if (u->ndirs >= SBX_CP_DIRS_MAX)
        return untar_fail(u, "the archive has more than %d directories", SBX_CP_DIRS_MAX);
    /* "path\0" mode mtime, restored after the contents (a 0555 directory still gets its files) */
    for (size_t i = 0; i < p->n; i++)
        if (sbuf_append(&u->dirs, p->comp[i], strlen(p->comp[i])) < 0 ||
            sbuf_append(&u->dirs, i + 1 < p->n ? "/" : "", i + 1 < p->n ? 1 : 0) < 0)
            return untar_fail(u, "the archive's directory names are more than %u bytes", SBX_CP_DIR_NAMES_MAX);
    unsigned mode = e->mode & 0777;
    int64_t mtime = e->mtime;
    if (sbuf_append(&u->dirs, "", 1) < 0 || sbuf_append(&u->dirs, (const char *)&mode, sizeof mode) < 0 ||
        sbuf_append(&u->dirs, (const char *)&mtime, sizeof mtime) < 0)
        return untar_fail(u, "the archive's directory names are more than %u bytes", SBX_CP_DIR_NAMES_MAX);
    u->ndirs++;
    return 0;
}

static int untar_file(untar_t *u, int parent, const untar_path_t *p, const tarstream_entry_t *e, const char *q)
{
    const char *name = p->comp[p->n - 1];
    bool exists = false;
    if (untar_clear(u, parent, name, false, q, &exists) < 0)
        return SBX_EINVAL;
    int fd = openat(parent, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return untar_fail(u, "cannot create %s: %s", q, strerror(errno));
    u->out_fd = fd;
    u->out_left = e->size;
    u->out_mode = e->mode;
    u->out_mtime = e->mtime;
    snprintf(u->out_name, sizeof u->out_name, "%s", q);
    return e->size == 0 ? untar_file_done(u) : 0;
}

static int untar_symlink(untar_t *u, int parent, const untar_path_t *p, const tarstream_entry_t *e, const char *q)
{
    const char *name = p->comp[p->n - 1];
    bool exists = false;
    if (untar_clear(u, parent, name, false, q, &exists) < 0)
        return SBX_EINVAL;
    if (symlinkat(e->link, parent, name) < 0)
        return untar_fail(u, "cannot make symlink %s: %s", q, strerror(errno));
    struct timespec ts[2] = { { .tv_nsec = UTIME_NOW }, untar_ts(e->mtime) };
    utimensat(parent, name, ts, AT_SYMLINK_NOFOLLOW);  /* best effort, as tar */
    return 0;
}

static int untar_hardlink(untar_t *u, int parent, const untar_path_t *p, const tarstream_entry_t *e, const char *q)
{
    const char *rest = NULL;
    size_t rl = 0;
    char ql[UNTAR_QUOTE_MAX + 8];
    untar_quote(e->link, ql, sizeof ql);
    if (tarstream_name_under(e->link, u->from, &rest, &rl) < 0)
        return untar_fail(u, "refused member %s: a hard link to %s, outside the copy", q, ql);
    untar_path_t *tp = malloc(sizeof *tp);
    if (!tp)
        return untar_fail(u, "out of memory");
    untar_path(u, rest, rl, tp);
    int tparent = untar_parent(u, tp, q, false);
    int r = 0;
    struct stat st;
    if (tparent < 0) {
        r = SBX_EINVAL;
    } else if (fstatat(tparent, tp->comp[tp->n - 1], &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode) ||
               !untar_file_known(u, st.st_dev, st.st_ino)) {
        r = untar_fail(u, "refused member %s: a hard link to %s, which is not a file this copy wrote%s", q, ql,
                       u->files_full ? " (or one past the files it keeps track of)" : "");
    } else {
        const char *name = p->comp[p->n - 1];
        struct stat cur;
        bool exists = false;
        if (fstatat(parent, name, &cur, AT_SYMLINK_NOFOLLOW) == 0 && cur.st_dev == st.st_dev &&
            cur.st_ino == st.st_ino)
            r = 0;                /* already that file */
        else if (untar_clear(u, parent, name, false, q, &exists) < 0)
            r = SBX_EINVAL;
        else if (linkat(tparent, tp->comp[tp->n - 1], parent, name, 0) < 0)
            r = untar_fail(u, "cannot make hard link %s: %s", q, strerror(errno));
    }
    if (tparent >= 0)
        close(tparent);
    free(tp);
    return r;
}

static int untar_entry(void *ud, const tarstream_entry_t *e)
{
    untar_t *u = ud;
    char q[UNTAR_QUOTE_MAX + 8];
    untar_quote(e->name, q, sizeof q);
    if (u->out_fd >= 0)
        return untar_fail(u, "the archive is malformed: %s began before %s ended", q, u->out_name);
    const char *rest = NULL;
    size_t rl = 0;
    if (tarstream_name_under(e->name, u->from, &rest, &rl) < 0)
        return untar_fail(u, "refused member %s: it %s; nothing outside the copy is written", q,
                          untar_name_problem(e->name));
    if (e->sparse)
        return untar_fail(u, "refused member %s: a sparse file (%s, %lld bytes once unpacked)", q, e->sparse_kind,
                          (long long)e->realsize);
    switch (e->type) {
    case '0': case '\0': case '7': case '5': case '2': case '1':
        break;
    case '3': case '4': case '6':
        if (u->skipped++ < SBX_CP_WARN_MAX && u->o.warn)
            fprintf(u->o.warn, "sandbox: cp: skipped %s: a %s (devices and FIFOs are not copied)\n", q,
                    e->type == '3' ? "character device" : e->type == '4' ? "block device" : "FIFO");
        return 0;
    default:
        return untar_fail(u, "refused member %s: tar type '%c', which cp does not unpack", q,
                          (unsigned char)e->type >= 0x20 && e->type != 0x7f ? e->type : '?');
    }
    u->top_seen = true;
    untar_path_t *p = malloc(sizeof *p);
    if (!p)
        return untar_fail(u, "out of memory");
    untar_path(u, rest, rl, p);
    int r = SBX_EINVAL;
    int parent = untar_parent(u, p, q, true);
    if (parent >= 0) {
        if (e->type == '5')
            r = untar_dir(u, parent, p, e, q);
        else if (e->type == '2')
            r = untar_symlink(u, parent, p, e, q);
        else if (e->type == '1')
            r = untar_hardlink(u, parent, p, e, q);
        else
            r = untar_file(u, parent, p, e, q);
        close(parent);
    }
    free(p);
    return r;
}

static int untar_data(void *ud, const char *data, size_t n)
{
    untar_t *u = ud;
    if (u->out_fd < 0)
        return 0;                 /* a skipped member's content */
    while (n > 0) {
        ssize_t w = write(u->out_fd, data, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return untar_fail(u, "cannot write %s: %s", u->out_name, w < 0 ? strerror(errno) : "nothing written");
        data += w;
        n -= (size_t)w;
        u->out_left -= w;
    }
    return u->out_left == 0 ? untar_file_done(u) : 0;
}

/* ---- the unpacking ------------------------------------------------------ */

int untar_new(const untar_opts_t *o, untar_t **ret)
{
    if (!untar_component_ok(o->from) || !untar_component_ok(o->to) || o->dir_fd < 0)
        return SBX_EINVAL;
    untar_t *u = calloc(1, sizeof *u);
    if (!u)
        return SBX_ENOMEM;
    u->o = *o;
    u->out_fd = -1;
    u->from = strdup(o->from);
    u->to = strdup(o->to);
    sbuf_init(&u->dirs, SBX_CP_DIR_NAMES_MAX);
    if (!u->from || !u->to || tarstream_init(&u->tar, untar_entry, untar_data, u) < 0) {
        free(u->from);
        free(u->to);
        free(u);
        return SBX_ENOMEM;
    }
    u->o.from = u->from;
    u->o.to = u->to;
    *ret = u;
    return 0;
}

int untar_push(untar_t *u, const char *data, size_t n)
{
    if (u->failed)
        return SBX_EINVAL;
    int r = tarstream_push(&u->tar, data, n);
    if (r < 0 && !u->failed)
        untar_fail(u, "the archive is malformed: %s", u->tar.error);
    return r < 0 ? SBX_EINVAL : 0;
}

/* Gives the directory at path (relative to dir_fd) mode and mtime,
 * walking it without following symlinks. */
static int untar_dir_finish(untar_t *u, const char *path, unsigned mode, int64_t mtime)
{
    int fd = fd_dup_cloexec(u->o.dir_fd);
    char comp[NAME_MAX + 1];
    for (const char *p = path; fd >= 0 && *p;) {
        size_t n = strcspn(p, "/");
        if (n > NAME_MAX) {
            close(fd);
            fd = -1;
            break;
        }
        memcpy(comp, p, n);
        comp[n] = '\0';
        int next = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        close(fd);
        fd = next;
        p += n + (p[n] == '/');
    }
    char q[UNTAR_QUOTE_MAX + 8];
    untar_quote(path, q, sizeof q);
    if (fd < 0)
        return untar_fail(u, "cannot finish directory %s: %s", q, strerror(errno));
    struct timespec ts[2] = { { .tv_nsec = UTIME_NOW }, untar_ts(mtime) };
    int r = fchmod(fd, mode & 0777) < 0 || futimens(fd, ts) < 0
                ? untar_fail(u, "cannot finish directory %s: %s", q, strerror(errno)) : 0;
    close(fd);
    return r;
}

int untar_finish(untar_t *u)
{
    if (u->failed)
        return SBX_EINVAL;
    if (tarstream_finish(&u->tar) < 0)
        return untar_fail(u, "the archive is malformed: %s", u->tar.error);
    if (u->out_fd >= 0)
        return untar_fail(u, "the archive ends inside %s", u->out_name);
    if (!u->top_seen)
        return untar_fail(u, "the archive holds nothing to copy");
    /* the records, last first: a directory's contents were recorded after it */
    const size_t tail = sizeof(unsigned) + sizeof(int64_t);
    size_t *starts = u->ndirs ? malloc(u->ndirs * sizeof *starts) : NULL;
    if (u->ndirs && !starts)
        return untar_fail(u, "out of memory");
    size_t k = 0;
    for (size_t off = 0; off < u->dirs.len && k < u->ndirs; k++) {
        starts[k] = off;
        off += strlen(u->dirs.data + off) + 1 + tail;
    }
    int r = 0;
    while (k > 0 && r == 0) {
        const char *rec = u->dirs.data + starts[--k];
        unsigned mode;
        int64_t mtime;
        memcpy(&mode, rec + strlen(rec) + 1, sizeof mode);
        memcpy(&mtime, rec + strlen(rec) + 1 + sizeof mode, sizeof mtime);
        r = untar_dir_finish(u, rec, mode, mtime);
    }
    free(starts);
    if (r == 0 && u->skipped > SBX_CP_WARN_MAX && u->o.warn)
        fprintf(u->o.warn, "sandbox: cp: skipped %llu more devices and FIFOs\n",
                (unsigned long long)(u->skipped - SBX_CP_WARN_MAX));
    return r;
}

const char *untar_error(const untar_t *u)
{
    return u->error;
}

uint64_t untar_skipped(const untar_t *u)
{
    return u->skipped;
}

void untar_free(untar_t *u)
{
    if (!u)
        return;
    if (u->out_fd >= 0)
        close(u->out_fd);
    tarstream_release(&u->tar);
    sbuf_release(&u->dirs);
    free(u->files);
    free(u->from);
    free(u->to);
    free(u);
}
