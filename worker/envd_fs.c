/* envd's filesystem.Filesystem service and its /files endpoint over the
 * runtime's file transfers: Stat and ListDir read the runtime's stat and
 * archive of a path, MakeDir unpacks a tar of the missing directories,
 * Move and Remove run mv and rm in the sandbox (its image must have them;
 * busybox has), GET /files is a raw download and POST /files a raw upload
 * per file (multipart/form-data parts, or an application/octet-stream
 * body), each spooled to an unlinked temporary file first: the runtime
 * needs a raw upload's size before its bytes. Paths are as envd takes
 * them, relative ones relative to "/" (E2B: to the user's home). */
#include "envd.h"
#include "envd_internal.h"
#include "errors.h"
#include "jsonx.h"
#include "log.h"
#include "spec.h"
#include "tarstream.h"
#include "timeutil.h"
#include "utf8.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/statvfs.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

/* A ListDir answers at most this many entries (more: resource_exhausted). */
#define ENVD_LIST_MAX       SBX_FILES_LIST_MAX
/* A ListDir's answer, at most (an estimate of its JSON as it is built). */
#define ENVD_LIST_BYTES_MAX (16 * 1024 * 1024)
/* MakeDir makes at most this many missing directories at once. */
#define ENVD_MKDIR_DEPTH    64
/* mv and rm: their time, and the output kept for a message. */
#define ENVD_TOOL_TIMEOUT_S 60
#define ENVD_TOOL_OUTPUT    2048
/* Files one upload may carry, at most. */
#define ENVD_UPLOAD_FILES   1000

/* ---- entries ------------------------------------------------------------ */

/* An EntryInfo of the proto3-JSON form (owner and group are the sandbox's
 * user: no runtime says a file's owner by name). */
static json_object *envd_entry(const char *name, const char *type, const char *path, int64_t size, unsigned mode,
                               const char *mtime, const char *link)
{
    json_object *e = json_object_new_object();
    if (!e)
        return NULL;
    char perms[16], ts[48], sz[24];
    char *n = utf8_sanitize(name, strlen(name)), *p = utf8_sanitize(path, strlen(path));
    jsonx_add_str(e, "name", n ? n : "");
    jsonx_add_str(e, "type", strcmp(type, "dir") == 0       ? "FILE_TYPE_DIRECTORY"
                             : strcmp(type, "symlink") == 0 ? "FILE_TYPE_SYMLINK"
                             : strcmp(type, "file") == 0    ? "FILE_TYPE_FILE"
                                                            : "FILE_TYPE_UNSPECIFIED");
    jsonx_add_str(e, "path", p ? p : "");
    snprintf(sz, sizeof sz, "%lld", (long long)size);
    if (size != 0)
        jsonx_add_str(e, "size", sz);     /* int64: a string in proto3 JSON */
    if ((mode & 0777) != 0)
        jsonx_add_int(e, "mode", mode & 0777);  /* Go's FileMode.Perm(), as envd */
    envd_permissions(type, mode, perms, sizeof perms);
    jsonx_add_str(e, "permissions", perms);
    jsonx_add_str(e, "owner", "root");
    jsonx_add_str(e, "group", "root");
    if (mtime && envd_timestamp_normalize(mtime, ts, sizeof ts) == 0)
        jsonx_add_str(e, "modifiedTime", ts);
    if (strcmp(type, "symlink") == 0 && link) {
        char *l = utf8_sanitize(link, strlen(link));
        jsonx_add_str(e, "symlinkTarget", l ? l : "");
        free(l);
    }
    free(n);
    free(p);
    return e;
}

static json_object *envd_entry_of_stat(const runtime_files_stat_t *st, const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *name = strcmp(path, "/") == 0 ? "/" : slash ? slash + 1 : path;
    return envd_entry(name, st->type, path, st->size, st->mode, st->mtime, st->link_target);
}

/* The request's path member, resolved into out: false after answering
 * invalid_argument. */
static bool envd_req_path(envd_call_t *k, json_object *msg, const char *key, char *out)
{
    const char *p = NULL;
    if (!envd_msg_str(msg, key, &p) || !p || envd_path_resolve(p, out) < 0) {
        envd_rpc_error(k, "invalid_argument", "the request's %s must be a path without control bytes (NUL "
                       "included), at most %d bytes", key, SBX_FILES_PATH_MAX);
        return false;
    }
    return true;
}

/* Answers the error of a stat or transfer of path. */
static void envd_fs_error(envd_call_t *k, const char *path, const api_error_t *err)
{
    if (err->code == API_NOT_FOUND)
        envd_rpc_error(k, "not_found", "path not found: %.300s", path);
    else
        envd_rpc_error(k, envd_code_of(err), "%s", err->message);
}

/* ---- Stat --------------------------------------------------------------- */

void envd_fs_stat(envd_call_t *k, json_object *msg)
{
    char path[SBX_FILES_PATH_MAX + 1];
    runtime_files_stat_t *st = malloc(sizeof *st);
    api_error_t err;
    if (!st) {
        envd_rpc_error(k, "resource_exhausted", "the worker is out of memory");
        return;
    }
    if (envd_req_path(k, msg, "path", path)) {
        if (envd_stat(k, path, st, &err) < 0) {
            envd_fs_error(k, path, &err);
        } else {
            json_object *o = json_object_new_object();
            if (o)
                jsonx_add(o, "entry", envd_entry_of_stat(st, path));
            envd_rpc_ok(k, o);
        }
    }
    free(st);
}

/* ---- walking a directory (ListDir, WatchDir) ------------------------------- */

/* Why a walk stopped before the archive's end. */
typedef enum {
    ENVD_WALK_ON = 0,
    ENVD_WALK_FULL,           /* more than ENVD_LIST_MAX entries to list */
    ENVD_WALK_CROWDED,        /* more than ENVD_WALK_SEEN_MAX entries seen */
    ENVD_WALK_HEAVY,          /* more than budget archive bytes */
    ENVD_WALK_LATE,           /* the call's deadline passed */
    ENVD_WALK_REFUSED,        /* the callback said stop */
} envd_walk_stop_t;

typedef struct envd_walk {
    int64_t depth;
    tarstream_t tar;
    char root[SBX_FILES_PATH_MAX + 1];   /* the archive's first entry's name, without '/' */
    bool have_root;
    size_t count;             /* entries listed */
    size_t seen;              /* entries in the archive */
    int64_t bytes, budget;    /* archive bytes read, and their bound */
    int64_t deadline_ms;      /* 0 none */
    envd_walk_stop_t stop;
    int refusal;              /* the callback's value (ENVD_WALK_REFUSED) */
    envd_walk_fn fn;
    void *ud;
} envd_walk_t;

static int envd_walk_entry(void *ud, const tarstream_entry_t *e)
{
    envd_walk_t *w = ud;
    char name[SBX_FILES_PATH_MAX + 1];
    const char *nm = e->name;
    if (++w->seen > ENVD_WALK_SEEN_MAX) {
        w->stop = ENVD_WALK_CROWDED;
        return SBX_ETOOBIG;
    }
    while (*nm == '/')
        nm++;                     /* the archive of / names its members "/bin", ... */
    snprintf(name, sizeof name, "%s", nm);
    size_t n = strlen(name);
    while (n > 0 && name[n - 1] == '/')
        name[--n] = '\0';
    if (!w->have_root) {
        /* The path itself ("work/" for /work; for / no name at all). */
        snprintf(w->root, sizeof w->root, "%s", strcmp(name, ".") == 0 ? "" : name);
        w->have_root = true;
        return 0;
    }
    const char *rel = name;
    size_t rl = strlen(w->root);
    if (rl > 0) {
        if (strncmp(name, w->root, rl) != 0 || name[rl] != '/')
            return 0;             /* not below the path: not ours to list */
        rel = name + rl + 1;
    }
    if (!*rel)
        return 0;
    int64_t level = 1;
    for (const char *p = rel; *p; p++)
        level += *p == '/';
    if (level > w->depth)
        return 0;
    if (w->count >= ENVD_LIST_MAX) {
        w->stop = ENVD_WALK_FULL;
        return SBX_ETOOBIG;
    }
    w->count++;
    int r = w->fn(w->ud, rel, e);
    if (r < 0) {
        w->stop = ENVD_WALK_REFUSED;
        w->refusal = r;
    }
    return r;
}

static int envd_walk_data(void *ud, const char *p, size_t n)
{
    envd_walk_t *w = ud;
    if ((w->bytes += (int64_t)n) > w->budget) {
        w->stop = ENVD_WALK_HEAVY;
        return SBX_ETOOBIG;
    }
    if (w->deadline_ms && time_mono_ms() >= w->deadline_ms) {
        w->stop = ENVD_WALK_LATE;
        return SBX_ETOOBIG;
    }
    return tarstream_push(&w->tar, p, n) < 0 ? SBX_EIO : 0;
}

/* A descriptor readable once the call's deadline passes (the walk's stop
 * descriptor: a runtime that stalls sends no bytes to check the time by);
 * -1 without a deadline or a timerfd. */
static int envd_deadline_fd(int64_t deadline_ms)
{
    if (!deadline_ms)
        return -1;
    int fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    if (fd < 0)
        return -1;
    /* time_mono_ms is CLOCK_MONOTONIC */
    struct itimerspec its = { .it_value = { .tv_sec = (time_t)(deadline_ms / 1000),
                                            .tv_nsec = (long)(deadline_ms % 1000) * 1000000L } };
    if (timerfd_settime(fd, TFD_TIMER_ABSTIME, &its, NULL) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Whether the controller left: it sends nothing after the body's END
 * frame, so its side readable (EOF, an error, a TLS close) means it did. */
static bool envd_client_left(envd_call_t *k)
{
    struct pollfd pf = { .fd = k->c->client, .events = POLLIN };
    if (forward_client_pending(k->c) || poll(&pf, 1, 0) > 0)
        k->gone = true;
    return k->gone;
}

int envd_walk(envd_call_t *k, const char *path, int64_t depth, int64_t budget, envd_walk_fn fn, void *ud,
              const char **ret_code, char *msg, size_t msglen)
{
    runtime_files_stat_t *st = malloc(sizeof *st);
    envd_walk_t *w = calloc(1, sizeof *w);
    api_error_t err;
    int r = SBX_EIO;
    *ret_code = "resource_exhausted";
    snprintf(msg, msglen, "the worker is out of memory");
    if (!st || !w || tarstream_init(&w->tar, envd_walk_entry, NULL, w) < 0) {
        free(st);
        free(w);
        return SBX_ENOMEM;
    }
    w->depth = depth;
    w->fn = fn;
    w->ud = ud;
    w->budget = k->fs_bytes > 0 && k->fs_bytes < budget ? k->fs_bytes : budget;
    w->deadline_ms = k->deadline_ms;
    if (envd_stat(k, path, st, &err) < 0) {
        *ret_code = err.code == API_NOT_FOUND ? "not_found" : envd_code_of(&err);
        if (err.code == API_NOT_FOUND)
            snprintf(msg, msglen, "path not found: %.300s", path);
        else
            snprintf(msg, msglen, "%s", err.message);
        goto cleanup;
    }
    if (strcmp(st->type, "dir") != 0) {
        *ret_code = "invalid_argument";
        snprintf(msg, msglen, "path is not a directory: %.300s", path);
        goto cleanup;
    }
    /* The walk ends with the worker, the controller's leaving or the deadline. */
    int tfd = envd_deadline_fd(k->deadline_ms);
    int stop_fds[3] = { k->c->f->stop_pipe[0], k->c->client, tfd };
    runtime_files_get_req_t req = { .ref = k->ref, .path = path, .format = RUNTIME_FILES_TAR,
                                    .on_data = envd_walk_data, .ud = w, .stop_fds = stop_fds,
                                    .nstop_fds = tfd >= 0 ? 3 : 2 };
    int gr = runtime_files_get(k->c->f->rt, &req, &err);
    if (tfd >= 0)
        close(tfd);
    if (w->stop == ENVD_WALK_FULL) {
        snprintf(msg, msglen, "%.300s holds more than %d entries down to depth %lld: list a smaller directory or "
                 "fewer levels (depth)", path, ENVD_LIST_MAX, (long long)depth);
    } else if (w->stop == ENVD_WALK_CROWDED) {
        snprintf(msg, msglen, "the tree below %.300s holds more than %d entries, which the worker reads whatever the "
                 "depth: list or watch a smaller directory", path, ENVD_WALK_SEEN_MAX);
    } else if (w->stop == ENVD_WALK_HEAVY) {
        snprintf(msg, msglen, "the tree below %.300s is larger than the %lld bytes the worker reads to list or "
                 "watch it (file contents included, whatever the depth): list or watch a smaller directory", path,
                 (long long)w->budget);
    } else if (w->stop == ENVD_WALK_REFUSED) {
        r = w->refusal == SBX_ETOOBIG ? SBX_ETOOBIG : SBX_ENOMEM;   /* the callback's own bound, else memory */
        goto cleanup;
    } else if (forward_stopping(k->c->f)) {
        *ret_code = "unavailable";
        snprintf(msg, msglen, "the worker is shutting down");
    } else if (w->stop == ENVD_WALK_LATE || (k->deadline_ms && time_mono_ms() >= k->deadline_ms)) {
        *ret_code = "deadline_exceeded";
        snprintf(msg, msglen, "the call's timeout (connect-timeout-ms) passed while the worker read %.300s", path);
    } else if (envd_client_left(k)) {
        *ret_code = "canceled";
        snprintf(msg, msglen, "the client went away");
    } else if (gr < 0) {
        *ret_code = err.code == API_NOT_FOUND ? "not_found" : envd_code_of(&err);
        snprintf(msg, msglen, "%s", err.message);
    } else if (w->tar.state != TARSTREAM_END && tarstream_finish(&w->tar) < 0) {
        *ret_code = "internal";
        snprintf(msg, msglen, "the runtime's archive of %.300s is not a tar stream: %s", path, w->tar.error);
    } else {
        r = 0;
    }
cleanup:
    tarstream_release(&w->tar);
    free(w);
    free(st);
    return r;
}

/* ---- ListDir ------------------------------------------------------------- */

typedef struct envd_list {
    const char *base;         /* the listed path */
    json_object *entries;
    size_t bytes;             /* the answer's JSON so far, at most (an estimate) */
} envd_list_t;

json_object *envd_entry_of_tar(const char *base, const char *rel, const tarstream_entry_t *e)
{
    char path[2 * SBX_FILES_PATH_MAX + 2], mtime[48];
    snprintf(path, sizeof path, "%s/%s", strcmp(base, "/") == 0 ? "" : base, rel);
    tarstream_time_rfc3339(e->mtime, mtime, sizeof mtime);
    const char *slash = strrchr(rel, '/');
    const char *kind = e->type == '1' ? "file" : tarstream_kind(e->type); /* a hard link is a file */
    return envd_entry(slash ? slash + 1 : rel, kind, path, e->size, e->mode, mtime, e->link);
}

static int envd_list_entry(void *ud, const char *rel, const tarstream_entry_t *e)
{
    envd_list_t *l = ud;
    /* json-c writes a control byte as \u00XX: a name, path and symlink
     * target cost up to 6 times their bytes, the other members about 256. */
    l->bytes += 6 * (2 * strlen(rel) + strlen(l->base) + 1 + strlen(e->link)) + 256;
    if (l->bytes > ENVD_LIST_BYTES_MAX)
        return SBX_ETOOBIG;
    json_object *o = envd_entry_of_tar(l->base, rel, e);
    if (!o)
        return SBX_ENOMEM;
    json_object_array_add(l->entries, o);
    return 0;
}

void envd_fs_list_dir(envd_call_t *k, json_object *msg)
{
    char path[SBX_FILES_PATH_MAX + 1], why[400];
    const char *code = NULL;
    int64_t depth = 1;
    if (!envd_req_path(k, msg, "path", path))
        return;
    if (json_object_object_get_ex(msg, "depth", NULL) && (!jsonx_get_int(msg, "depth", &depth) || depth < 0)) {
        envd_rpc_error(k, "invalid_argument", "the request's depth must be a count of levels");
        return;
    }
    envd_list_t l = { .base = path, .entries = json_object_new_array() };
    if (!l.entries) {
        envd_rpc_error(k, "resource_exhausted", "the worker is out of memory");
        return;
    }
    int r = envd_walk(k, path, depth < 1 ? 1 : depth, ENVD_WALK_LIST_BYTES, envd_list_entry, &l, &code, why,
                      sizeof why);
    if (r == SBX_ETOOBIG)
        envd_rpc_error(k, "resource_exhausted", "the listing of %.300s is larger than the %d bytes of JSON an answer "
                       "may carry: list a smaller directory or fewer levels (depth)", path, ENVD_LIST_BYTES_MAX);
    else if (r < 0 && !k->gone)
        envd_rpc_error(k, code, "%s", why);
    if (r < 0) {
        json_object_put(l.entries);
        return;
    }
    json_object *o = json_object_new_object();
    if (o)
        jsonx_add(o, "entries", l.entries);
    else
        json_object_put(l.entries);
    envd_rpc_ok(k, o);
}

/* ---- MakeDir ------------------------------------------------------------- */

/* A ustar header of directory name (relative, ending in '/'), 0755, owner
 * 0:0, into h: 0, or SBX_EINVAL when the name does not fit ustar's name
 * and prefix fields. */
static int envd_dir_header(const char *name, int64_t mtime, unsigned char h[TARSTREAM_BLOCK])
{
    size_t n = strlen(name);
    const char *nm = name;
    size_t pl = 0;
    memset(h, 0, TARSTREAM_BLOCK);
    if (n > 100) {
        /* ustar's prefix (155) and name (100), split at a '/'. */
        const char *cut = NULL;
        for (const char *p = name; *p && (size_t)(p - name) <= 155; p++)
            if (*p == '/' && n - (size_t)(p - name) - 1 <= 100 && p > name)
                cut = p;
        if (!cut)
            return SBX_EINVAL;
        pl = (size_t)(cut - name);
        nm = cut + 1;
        memcpy(h + 345, name, pl);
    }
    memcpy(h, nm, strlen(nm));
    snprintf((char *)h + 100, 8, "%07o", 0755);
    snprintf((char *)h + 108, 8, "%07o", 0);
    snprintf((char *)h + 116, 8, "%07o", 0);
    snprintf((char *)h + 124, 12, "%011o", 0);
    snprintf((char *)h + 136, 12, "%011llo", (unsigned long long)mtime);
    h[156] = '5';
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    tarstream_checksum(h);
    return 0;
}

typedef struct envd_mem {
    const char *p;
    size_t len, off;
} envd_mem_t;

static ptrdiff_t envd_mem_read(void *ud, char *buf, size_t cap)
{
    envd_mem_t *m = ud;
    size_t n = m->len - m->off < cap ? m->len - m->off : cap;
    memcpy(buf, m->p + m->off, n);
    m->off += n;
    return (ptrdiff_t)n;
}

void envd_fs_make_dir(envd_call_t *k, json_object *msg)
{
    char path[SBX_FILES_PATH_MAX + 1], dir[SBX_FILES_PATH_MAX + 1];
    runtime_files_stat_t *st = malloc(sizeof *st);
    unsigned char *tar = malloc((ENVD_MKDIR_DEPTH + 2) * TARSTREAM_BLOCK);
    api_error_t err;
    if (!st || !tar) {
        envd_rpc_error(k, "resource_exhausted", "the worker is out of memory");
        goto cleanup;
    }
    if (!envd_req_path(k, msg, "path", path))
        goto cleanup;
    int r = envd_stat(k, path, st, &err);
    if (r == 0) {
        if (strcmp(st->type, "dir") == 0)
            envd_rpc_error(k, "already_exists", "directory already exists: %.300s", path);
        else
            envd_rpc_error(k, "invalid_argument", "path already exists but it is not a directory: %.300s", path);
        goto cleanup;
    }
    if (err.code != API_NOT_FOUND) {
        envd_fs_error(k, path, &err);
        goto cleanup;
    }
    /* The deepest directory that exists: the new ones are unpacked into
     * it, so no directory that exists is touched (an archive's entry for
     * one would set its mode, owner and time). */
    snprintf(dir, sizeof dir, "%s", path);
    size_t missing = 1;
    for (;;) {
        char *slash = strrchr(dir, '/');
        if (slash == dir) {
            dir[1] = '\0';
            break;
        }
        *slash = '\0';
        r = envd_stat(k, dir, st, &err);
        if (r == 0 && strcmp(st->type, "dir") != 0) {
            envd_rpc_error(k, "invalid_argument", "%.300s is not a directory", dir);
            goto cleanup;
        }
        if (r == 0)
            break;
        if (err.code != API_NOT_FOUND) {
            envd_fs_error(k, dir, &err);
            goto cleanup;
        }
        if (++missing > ENVD_MKDIR_DEPTH) {
            envd_rpc_error(k, "invalid_argument", "MakeDir makes at most %d levels of directories at once",
                           ENVD_MKDIR_DEPTH);
            goto cleanup;
        }
    }
    const char *rel = path + (strcmp(dir, "/") == 0 ? 1 : strlen(dir) + 1);
    size_t len = 0;
    int64_t now = (int64_t)time(NULL);
    for (const char *p = rel;; p++) {
        if (*p != '/' && *p)
            continue;
        char name[SBX_FILES_PATH_MAX + 2];
        snprintf(name, sizeof name, "%.*s/", (int)(p - rel), rel);
        if (envd_dir_header(name, now, tar + len) < 0) {
            envd_rpc_error(k, "invalid_argument", "the new directory's path is too long to make");
            goto cleanup;
        }
        len += TARSTREAM_BLOCK;
        if (!*p)
            break;
    }
    memset(tar + len, 0, TARSTREAM_TRAILER);
    len += TARSTREAM_TRAILER;
    envd_mem_t mem = { .p = (const char *)tar, .len = len };
    int stop_fds[1] = { k->c->f->stop_pipe[0] };
    runtime_files_put_req_t req = { .ref = k->ref, .path = dir, .format = RUNTIME_FILES_TAR,
                                    .max_bytes = (int64_t)len, .read = envd_mem_read, .ud = &mem,
                                    .stop_fds = stop_fds, .nstop_fds = 1 };
    int64_t bytes = 0;
    if (runtime_files_put(k->c->f->rt, &req, &bytes, &err) < 0 || envd_stat(k, path, st, &err) < 0) {
        envd_fs_error(k, path, &err);
        goto cleanup;
    }
    json_object *o = json_object_new_object();
    if (o)
        jsonx_add(o, "entry", envd_entry_of_stat(st, path));
    envd_rpc_ok(k, o);
cleanup:
    free(st);
    free(tar);
}

/* ---- Move, Remove ---------------------------------------------------------- */

/* Runs argv (a tool of the image) in the sandbox: 0, or < 0 after
 * answering the error. */
static int envd_tool(envd_call_t *k, char **argv, size_t argc)
{
    exec_spec_t spec = { .argv = argv, .argc = argc, .timeout_seconds = ENVD_TOOL_TIMEOUT_S };
    runtime_exec_result_t res;
    api_error_t err;
    memset(&res, 0, sizeof res);  /* released on every path */
    int r = runtime_exec(k->c->f->rt, k->ref, &spec, ENVD_TOOL_OUTPUT, NULL, &res, &err);
    if (r < 0) {
        envd_rpc_error(k, err.code == API_SANDBOX_EXITED ? "failed_precondition" : envd_code_of(&err), "%s",
                       err.message);
    } else if (res.exit_code == 126 || res.exit_code == 127) {
        envd_rpc_error(k, "failed_precondition", "the sandbox's image has no %s, which this call needs", argv[0]);
        r = SBX_EUNAVAIL;
    } else if (res.exit_code != 0) {
        char *e = utf8_sanitize(res.err.data ? res.err.data : "", res.err.len);
        size_t n = e ? strlen(e) : 0;
        while (n > 0 && (e[n - 1] == '\n' || e[n - 1] == '\r'))
            e[--n] = '\0';
        envd_rpc_error(k, "unknown", "%s failed (exit code %d): %.400s", argv[0], res.exit_code,
                       e && *e ? e : "no message");
        free(e);
        r = SBX_EIO;
    }
    runtime_exec_result_release(&res);
    return r;
}

void envd_fs_move(envd_call_t *k, json_object *msg)
{
    char src[SBX_FILES_PATH_MAX + 1], dst[SBX_FILES_PATH_MAX + 1];
    runtime_files_stat_t *st = malloc(sizeof *st);
    api_error_t err;
    if (!st) {
        envd_rpc_error(k, "resource_exhausted", "the worker is out of memory");
        return;
    }
    if (!envd_req_path(k, msg, "source", src) || !envd_req_path(k, msg, "destination", dst))
        goto cleanup;
    if (envd_stat(k, src, st, &err) < 0) {
        envd_fs_error(k, src, &err);
        goto cleanup;
    }
    char *argv[] = { "mv", "--", src, dst, NULL };
    if (envd_tool(k, argv, 4) < 0)
        goto cleanup;
    if (envd_stat(k, dst, st, &err) < 0) {
        envd_fs_error(k, dst, &err);
        goto cleanup;
    }
    json_object *o = json_object_new_object();
    if (o)
        jsonx_add(o, "entry", envd_entry_of_stat(st, dst));
    envd_rpc_ok(k, o);
cleanup:
    free(st);
}

void envd_fs_remove(envd_call_t *k, json_object *msg)
{
    char path[SBX_FILES_PATH_MAX + 1];
    if (!envd_req_path(k, msg, "path", path))
        return;
    if (strcmp(path, "/") == 0) {
        envd_rpc_error(k, "invalid_argument", "the sandbox's root directory is not removed");
        return;
    }
    char *argv[] = { "rm", "-rf", "--", path, NULL };
    if (envd_tool(k, argv, 4) == 0)
        envd_rpc_ok(k, NULL);
}

/* ---- GET /files -------------------------------------------------------- */

typedef struct envd_down {
    envd_call_t *k;
    int64_t max_bytes;        /* the worker's files_max_bytes */
    int64_t bytes;
    int64_t too_big;          /* the stat's size past max_bytes; 0 none */
    char cut[200];            /* why the body stopped midway ("" none) */
} envd_down_t;

static int envd_down_stat(void *ud, const runtime_files_stat_t *st)
{
    envd_down_t *d = ud;
    if (st->size > d->max_bytes) {
        d->too_big = st->size;
        return SBX_ETOOBIG;
    }
    return envd_answer_head(d->k, 200, "application/octet-stream");
}

static int envd_down_data(void *ud, const char *p, size_t n)
{
    envd_down_t *d = ud;
    if (d->bytes + (int64_t)n > d->max_bytes) {
        snprintf(d->cut, sizeof d->cut, "the file is larger than the %lld bytes a transfer may carry",
                 (long long)d->max_bytes);
        return SBX_ETOOBIG;
    }
    d->bytes += (int64_t)n;
    return envd_answer_body(d->k, p, n);
}

void envd_files_get(envd_call_t *k, json_object *msg)
{
    (void)msg;
    char raw[SBX_FILES_PATH_MAX + 1], path[SBX_FILES_PATH_MAX + 1];
    api_error_t err;
    int q = envd_query_param(k->q.query, "path", raw, sizeof raw);
    if (q <= 0 || envd_path_resolve(raw, path) < 0) {
        envd_http_error(k, 400, "the query must name the file: ?path=P, without control bytes");
        return;
    }
    envd_down_t d = { .k = k, .max_bytes = k->c->f->files_max_bytes };
    int stop_fds[2] = { k->c->client, k->c->f->stop_pipe[0] };
    runtime_files_get_req_t req = { .ref = k->ref, .path = path, .format = RUNTIME_FILES_RAW,
                                    .on_stat = envd_down_stat, .on_data = envd_down_data, .ud = &d,
                                    .stop_fds = stop_fds, .nstop_fds = 2 };
    int r = runtime_files_get(k->c->f->rt, &req, &err);
    if (!k->answered) {
        if (d.too_big)
            envd_http_error(k, 413, "the file is %lld bytes, more than the %lld bytes a transfer may carry",
                            (long long)d.too_big, (long long)d.max_bytes);
        else if (r < 0 && err.code == API_NOT_FOUND)
            envd_http_error(k, 404, "path not found: %.300s", path);
        else if (r < 0 && err.code == API_INVALID_ARGUMENT)
            envd_http_error(k, 400, "%.300s: %s", path, err.message);
        else if (r < 0)
            envd_http_error(k, 502, "the worker cannot read the file: %s", err.message);
        else if (forward_stopping(k->c->f))
            envd_http_error(k, 503, "the worker is shutting down");
        return;                   /* else the controller went away */
    }
    envd_answer_end(k, d.cut[0] ? d.cut : r < 0 ? err.message : forward_stopping(k->c->f)
                                                                  ? "the worker is shutting down" : "");
}

/* ---- POST /files ---------------------------------------------------------- */

typedef struct envd_up {
    envd_call_t *k;
    const char *query_path;   /* the query's path, resolved; NULL none */
    int spool;                /* the current file's bytes; -1 none */
    bool skip;                /* the current part is not a file */
    char path[SBX_FILES_PATH_MAX + 1];   /* where the current file goes */
    int64_t max;              /* the upload's bound: the line's max_bytes within files_max_bytes */
    int64_t total;            /* bytes of every file so far (max bounds them) */
    int64_t size;             /* of the current file */
    int64_t room;             /* what the current file may spool before the disk's reserve */
    int64_t spooled;          /* its bytes counted in envd_spooled */
    size_t files;
    json_object *written;     /* the answer: [{"name","type","path"}] */
    int status;               /* an error's HTTP status; 0 none */
    char why[400];
} envd_up_t;

static int envd_up_fail(envd_up_t *u, int status, const char *why)
{
    if (!u->status) {
        u->status = status;
        snprintf(u->why, sizeof u->why, "%s", why);
    }
    return SBX_EINVAL;
}

/* The bytes every upload on the worker holds in its spool files now
 * (ENVD_SPOOL_TOTAL_MAX bounds them): the spool is the host's disk, which
 * every sandbox on it shares. */
static _Atomic int64_t envd_spooled;

/* Gives the current file's spooled bytes back to envd_spooled. */
static void envd_up_unspool(envd_up_t *u)
{
    atomic_fetch_sub(&envd_spooled, u->spooled);
    u->spooled = 0;
}

static const char *envd_spool_dir(void)
{
    const char *dir = getenv("TMPDIR");
    return dir && *dir ? dir : "/tmp";
}

/* A temporary file nobody else can open: unlinked at once. */
static int envd_spool_open(void)
{
    char tmpl[512];
    snprintf(tmpl, sizeof tmpl, "%s/sbx-envd-XXXXXX", envd_spool_dir());
    int fd = mkostemp(tmpl, O_CLOEXEC);
    if (fd >= 0)
        unlink(tmpl);
    return fd;
}

static int envd_up_begin_file(envd_up_t *u, const char *where)
{
    if (u->files >= ENVD_UPLOAD_FILES)
        return envd_up_fail(u, 400, "an upload carries at most 1000 files");
    if (u->query_path && u->files > 0)
        return envd_up_fail(u, 400, "a path in the query takes one file: name each file by its part's filename "
                            "instead");
    if (!u->query_path && (!*where || envd_path_resolve(where, u->path) < 0))
        return envd_up_fail(u, 400, "each file part must name its path in its filename (or the query its path)");
    if (u->query_path)
        snprintf(u->path, sizeof u->path, "%s", u->query_path);
    if (strcmp(u->path, "/") == 0)
        return envd_up_fail(u, 400, "a file cannot be written as /");
    /* The spool's filesystem keeps ENVD_SPOOL_RESERVE free: it is often
     * the one of the runtime's images and containers. */
    struct statvfs sv;
    char why[200];
    if (statvfs(envd_spool_dir(), &sv) < 0) {
        snprintf(why, sizeof why, "the worker cannot check its spool's free space: %s", strerror(errno));
        return envd_up_fail(u, 507, why);
    }
    int64_t room = (int64_t)((uint64_t)sv.f_bavail * sv.f_frsize) - ENVD_SPOOL_RESERVE;
    if (room <= 0 || (u->k->q.body > 0 && u->k->q.body > room))
        return envd_up_fail(u, 507, "the worker's disk is too full to take this upload: retry later, or upload "
                            "less at once");
    u->room = room;
    if ((u->spool = envd_spool_open()) < 0) {
        snprintf(why, sizeof why, "the worker cannot make a temporary file: %s", strerror(errno));
        return envd_up_fail(u, 507, why);
    }
    u->size = 0;
    return 0;
}

static int envd_up_data(envd_up_t *u, const char *p, size_t n)
{
    if (u->skip || u->spool < 0)
        return 0;
    if (u->total + (int64_t)n > u->max) {
        char why[160];
        snprintf(why, sizeof why, "the upload is larger than the %lld bytes a transfer may carry",
                 (long long)u->max);
        return envd_up_fail(u, 413, why);
    }
    if (u->size + (int64_t)n > u->room)
        return envd_up_fail(u, 507, "the worker's disk is too full to take this upload: retry later, or upload "
                            "less at once");
    if (atomic_fetch_add(&envd_spooled, (int64_t)n) + (int64_t)n > ENVD_SPOOL_TOTAL_MAX) {
        atomic_fetch_sub(&envd_spooled, (int64_t)n);
        char why[200];
        snprintf(why, sizeof why, "the worker's upload spool is full (%lld bytes of uploads in flight): retry later",
                 (long long)ENVD_SPOOL_TOTAL_MAX);
        return envd_up_fail(u, 507, why);
    }
    u->spooled += (int64_t)n;
    for (size_t off = 0; off < n;) {
        ssize_t w = write(u->spool, p + off, n - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            char why[200];
            snprintf(why, sizeof why, "the worker cannot keep the upload: %s", strerror(errno));
            return envd_up_fail(u, 507, why);
        }
        off += (size_t)w;
    }
    u->total += (int64_t)n;
    u->size += (int64_t)n;
    return 0;
}

static ptrdiff_t envd_spool_read(void *ud, char *buf, size_t cap)
{
    envd_up_t *u = ud;
    for (;;) {
        ssize_t n = read(u->spool, buf, cap);
        if (n < 0 && errno == EINTR)
            continue;
        return n < 0 ? RUNTIME_FILES_ABORTED : n;
    }
}

/* The spooled file into the sandbox (its missing directories made). */
static int envd_up_end_file(envd_up_t *u)
{
    envd_call_t *k = u->k;
    api_error_t err;
    if (u->skip || u->spool < 0)
        return 0;
    int64_t bytes = 0;
    int stop_fds[1] = { k->c->f->stop_pipe[0] };
    runtime_files_put_req_t req = { .ref = k->ref, .path = u->path, .format = RUNTIME_FILES_RAW, .size = u->size,
                                    .mode = 0644, .parents = true, .max_bytes = u->size > 0 ? u->size : 1,
                                    .read = envd_spool_read, .ud = u, .stop_fds = stop_fds, .nstop_fds = 1 };
    int r = lseek(u->spool, 0, SEEK_SET) == 0 ? runtime_files_put(k->c->f->rt, &req, &bytes, &err)
                                              : api_error_set(&err, API_INTERNAL, "the spooled upload is lost");
    close(u->spool);
    u->spool = -1;
    envd_up_unspool(u);
    if (r < 0) {
        char why[400];
        snprintf(why, sizeof why, "%.200s: %.190s", u->path, err.message);
        return envd_up_fail(u, err.code == API_NOT_FOUND ? 404 : err.code == API_PAYLOAD_TOO_LARGE ? 507
                               : err.code == API_INVALID_ARGUMENT ? 400 : err.code == API_CANCELLED ? 503 : 502,
                            why);
    }
    json_object *e = json_object_new_object();
    const char *slash = strrchr(u->path, '/');
    if (!e)
        return envd_up_fail(u, 507, "the worker is out of memory");
    jsonx_add_str(e, "name", slash ? slash + 1 : u->path);
    jsonx_add_str(e, "type", "file");
    jsonx_add_str(e, "path", u->path);
    json_object_array_add(u->written, e);
    u->files++;
    return 0;
}

static int envd_mp_begin(void *ud, const char *name, const char *filename)
{
    envd_up_t *u = ud;
    u->skip = strcmp(name, "file") != 0; /* only "file" parts are files, as envd's */
    return u->skip ? 0 : envd_up_begin_file(u, filename);
}

static int envd_mp_data(void *ud, const char *p, size_t n) { return envd_up_data(ud, p, n); }

static int envd_mp_end(void *ud) { return envd_up_end_file(ud); }

void envd_files_post(envd_call_t *k, json_object *msg)
{
    (void)msg;
    char raw[SBX_FILES_PATH_MAX + 1], qpath[SBX_FILES_PATH_MAX + 1], boundary[ENVD_MP_BOUNDARY_MAX + 1];
    const char *ct = envd_req_header(&k->q, "content-type");
    int64_t fmax = k->c->f->files_max_bytes > 0 ? k->c->f->files_max_bytes : SBX_FILES_MAX_BYTES_MAX;
    envd_up_t u = { .k = k, .spool = -1, .written = json_object_new_array(),
                    .max = k->q.max_bytes < fmax ? k->q.max_bytes : fmax };
    envd_mp_t mp = { 0 };
    bool multipart = envd_mp_boundary(ct, boundary, sizeof boundary) == 0;
    bool octets = ct && strncasecmp(ct, "application/octet-stream", 24) == 0;
    char *buf = malloc(FORWARD_BUFFER_BYTES);
    int q = envd_query_param(k->q.query, "path", raw, sizeof raw);
    if (!u.written || !buf) {
        envd_up_fail(&u, 507, "the worker is out of memory");
    } else if (q < 0 || (q == 1 && envd_path_resolve(raw, qpath) < 0)) {
        envd_up_fail(&u, 400, "the query's path must be a path without control bytes");
    } else if (envd_req_header(&k->q, "content-encoding") &&
               strcasecmp(envd_req_header(&k->q, "content-encoding"), "identity") != 0) {
        envd_up_fail(&u, 400, "compressed uploads (gzip) are not served: upload without gzip");
    } else if (!multipart && !octets) {
        envd_up_fail(&u, 400, "an upload is multipart/form-data (with its boundary) or application/octet-stream");
    } else if (octets && q != 1) {
        envd_up_fail(&u, 400, "an application/octet-stream upload needs the query's path");
    } else {
        u.query_path = q == 1 ? qpath : NULL;
        envd_mp_callbacks_t cb = { envd_mp_begin, envd_mp_data, envd_mp_end };
        if (multipart && envd_mp_init(&mp, boundary, &cb, &u) < 0)
            envd_up_fail(&u, 400, "the upload's multipart boundary is malformed");
        else if (octets)
            envd_up_begin_file(&u, "");
    }
    bool body_ok = false;
    while (!u.status) {
        ptrdiff_t n = envd_body_read(k, buf, FORWARD_BUFFER_BYTES);
        if (n < 0) {
            if (n == SBX_EINVAL)
                forward_refuse(k->c, 400, "invalid_argument", "%s", k->why);
            else if (forward_stopping(k->c->f))
                forward_refuse(k->c, 503, "busy", "the worker is shutting down");
            goto cleanup;         /* else nobody is there to answer */
        }
        if (n == 0) {
            body_ok = true;
            break;
        }
        if (multipart && envd_mp_push(&mp, buf, (size_t)n) < 0 && !u.status)
            envd_up_fail(&u, 400, mp.error[0] ? mp.error : "the multipart body is malformed");
        if (octets)
            envd_up_data(&u, buf, (size_t)n);
    }
    if (!u.status && multipart && envd_mp_finish(&mp) < 0)
        envd_up_fail(&u, 400, mp.error);
    if (!u.status && octets)
        envd_up_end_file(&u);
    if (!u.status && u.files == 0)
        envd_up_fail(&u, 400, "the upload carries no file part (form name \"file\")");
    if (u.status) {
        envd_http_error(k, u.status, "%s", u.why);
        if (!body_ok)
            forward_linger(k->c); /* the rest of the body, so the close does not reset the answer */
    } else {
        char *js = jsonx_dump(u.written);
        envd_answer(k, 200, "application/json", js ? js : "[]", js ? strlen(js) : 2);
        free(js);
    }
cleanup:
    if (u.spool >= 0)
        close(u.spool);
    envd_up_unspool(&u);
    if (u.written)
        json_object_put(u.written);
    envd_mp_release(&mp);
    free(buf);
}
