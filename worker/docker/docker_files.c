/* The Docker backend's file transfers (worker/runtime.h: runtime_files_put,
 * runtime_files_get) over the Engine's archive API on its unix socket:
 * PUT /containers/{id}/archive streams an upload as a chunked request body
 * pulled from the caller (a raw file wrapped in a one-entry tar on the
 * fly), GET streams the archive back (as is, one regular file's content,
 * or a listing), never holding either whole. Docker resolves the path and
 * every member inside the container's root (symlinks too); the worker
 * cleans the path lexically first (tarstream_path_clean). */
#include "docker_internal.h"
#include "jsonx.h"
#include "tarstream.h"

#include <ctype.h>
#include <poll.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* The stat header's base64 JSON, at most. */
#define DOCKER_FILES_STAT_MAX   (16u * 1024u)
/* A listing is handed on in pieces of about this many bytes. */
#define DOCKER_FILES_LIST_FLUSH (16u * 1024u)
/* Docker's error body kept at most. */
#define DOCKER_FILES_ERROR_MAX  4096u
#define DOCKER_FILES_STAT_HEADER "X-Docker-Container-Path-Stat:"
/* After the stat of a download went out: how long its client may take to
 * hang up (it wanted the stat alone) before the body is fetched. */
#define DOCKER_FILES_STAT_LINGER_MS 10

/* True once one of fds is readable or hung up, waiting up to ms for it. */
static bool files_stop_wait(const int *fds, size_t n, int ms)
{
    struct pollfd p[4];
    if (n > 4)
        n = 4;
    for (size_t i = 0; i < n; i++)
        p[i] = (struct pollfd){ .fd = fds[i], .events = POLLIN };
    return n > 0 && poll(p, (nfds_t)n, ms) > 0;
}

/* True once one of fds is readable or hung up (a poll that does not wait). */
static bool files_stop_seen(const int *fds, size_t n) { return files_stop_wait(fds, n, 0); }

/* "/containers/<ref>/archive?path=<escaped>[&noOverwriteDirNonDir=true]". */
static int files_url(const char *ref, const char *path, bool put, char *out, size_t outlen)
{
    char *esc = curl_easy_escape(NULL, path, 0);
    if (!esc)
        return SBX_ENOMEM;
    int n = snprintf(out, outlen, "/containers/%s/archive?path=%s%s", ref, esc,
                     put ? "&noOverwriteDirNonDir=true" : "");
    curl_free(esc);
    return n < 0 || (size_t)n >= outlen ? SBX_ETOOBIG : 0;
}

/* The Engine's words name its container by its 64-digit id, which means
 * nothing to the sandbox's user: each such id becomes "the sandbox". */
static void files_scrub_ids(char *msg)
{
    static const char repl[] = "the sandbox";
    for (char *p = msg; *p; p++) {
        size_t n = 0;
        while (isxdigit((unsigned char)p[n]))
            n++;
        if (n == 64 && (p == msg || !isalnum((unsigned char)p[-1]))) {
            memcpy(p, repl, sizeof repl - 1);
            memmove(p + sizeof repl - 1, p + n, strlen(p + n) + 1);
            p += sizeof repl - 2;
        } else if (n > 0) {
            p += n - 1;
        }
    }
}

/* Maps an Engine answer other than 200 to an error, in the project's
 * words where the Engine's are about its container: path is the sandbox
 * path the transfer was for. */
static int files_engine_error(long status, const sbuf_t *body, const char *what, const char *path, api_error_t *err)
{
    docker_reply_t rep = { .status = status, .body = *body };
    char msg[320];
    docker_reply_message(&rep, msg, sizeof msg);
    files_scrub_ids(msg);
    switch (status) {
    case 404:
        if (strstr(msg, "No such container"))
            return api_error_set(err, API_NOT_FOUND, "the sandbox's container is gone (%s)", msg);
        if (strstr(msg, "Could not find the file") || strstr(msg, "no such file"))
            return api_error_set(err, API_NOT_FOUND,
                                 "no such file or directory in the sandbox: %.200s", path);
        return api_error_set(err, API_NOT_FOUND, "%s", msg);
    case 409:
        return api_error_set(err, API_CONFLICT, "%s", msg);
    case 400:
    case 403:
    case 500:
        return api_error_set(err, API_INVALID_ARGUMENT, "the runtime refused the %s: %s", what, msg);
    default:
        return api_error_set(err, API_RUNTIME_ERROR, "docker answered %ld to the %s: %s", status, what, msg);
    }
}

static size_t files_error_body_cb(char *p, size_t size, size_t nmemb, void *ud)
{
    sbuf_append_bounded(ud, p, size * nmemb);
    return size * nmemb;
}

/* ---- the target --------------------------------------------------------- */

int docker_rt_files_target(runtime_t *base, const char *sandbox_id, const char *worker_name, char ret_ref[80],
                           int64_t *ret_fs_bytes, api_error_t *err)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    json_object *o = NULL, *img = NULL;
    const char *id = NULL;
    int r = docker_sandbox_inspect(rt, sandbox_id, worker_name, "has no container on this worker", &o, &id, err);
    if (r < 0)
        return r;
    snprintf(ret_ref, 80, "%s", id);
    int64_t mib = docker_disk_label(jsonx_get_obj(jsonx_get_obj(o, "Config"), "Labels"));
    const char *image = jsonx_get_str(o, "Image");
    if (image && strncmp(image, "sha256:", 7) == 0)
        image += 7;
    if (ret_fs_bytes && mib > 0 && image && docker_name_ok(image, 80)) {
        /* The container's files are its image's and its writable layer's
         * (at most the quota); the image's Size counts every layer's files. */
        char path[128];
        int64_t size = 0;
        api_error_t ierr;
        snprintf(path, sizeof path, "/images/%s/json", image);
        if (docker_get_json(rt, path, DOCKER_ROUTE_TIMEOUT_MS, &img, &ierr) == 0 && jsonx_get_int(img, "Size", &size) &&
            size >= 0)
            *ret_fs_bytes = size + mib * 1024 * 1024;
    }
    if (img)
        json_object_put(img);
    json_object_put(o);
    return 0;
}

/* ---- put --------------------------------------------------------------- */

typedef enum { PUT_HEADER = 0, PUT_DATA, PUT_TRAILER, PUT_DONE } files_put_phase_t;

typedef struct files_put_io {
    docker_runtime_t *rt;
    const runtime_files_put_req_t *req;
    int64_t bytes;            /* upload bytes read from req->read */
    int64_t quota_room;       /* < 0: no quota */
    int64_t quota_mib;
    bool failed;              /* err is set: abort */
    api_error_t *err;
    /* RAW: the one-entry archive made on the fly */
    files_put_phase_t phase;
    unsigned char hdr[TARSTREAM_HEADER_MAX];
    size_t hdr_len, hdr_off;
    size_t trailer_left;      /* padding + the two zero blocks */
} files_put_io_t;

static size_t files_put_fail(files_put_io_t *io, api_code_t code, const char *msg)
{
    if (!io->failed)
        api_error_set(io->err, code, "%s", msg);
    io->failed = true;
    return CURL_READFUNC_ABORT;
}

/* Counts n more upload bytes against max_bytes and the quota. */
static bool files_put_count(files_put_io_t *io, int64_t n)
{
    io->bytes += n;
    char msg[200];
    if (io->bytes > io->req->max_bytes) {
        snprintf(msg, sizeof msg, "the upload is larger than the %lld bytes a transfer may carry",
                 (long long)io->req->max_bytes);
        files_put_fail(io, API_PAYLOAD_TOO_LARGE, msg);
        return false;
    }
    if (io->quota_room >= 0 && io->bytes > io->quota_room) {
        snprintf(msg, sizeof msg, "the upload does not fit in what the sandbox's disk quota of %lld MiB has left "
                 "(%lld bytes)", (long long)io->quota_mib, (long long)io->quota_room);
        files_put_fail(io, API_PAYLOAD_TOO_LARGE, msg);
        return false;
    }
    return true;
}

/* The reader's result r < 0 as a failure. */
static size_t files_put_read_failed(files_put_io_t *io, ptrdiff_t r)
{
    if (r == RUNTIME_FILES_REFUSED)
        return files_put_fail(io, API_INVALID_ARGUMENT, "the upload was refused");
    return files_put_fail(io, API_CANCELLED, "the upload was aborted before its end");
}

/* RAW: the whole file was read; the upload must end here. Checked before
 * the last piece goes to Docker, so the file is complete only when the
 * upload's end was seen. */
static bool files_put_raw_end(files_put_io_t *io)
{
    char probe[1];
    ptrdiff_t r = io->req->read(io->req->ud, probe, sizeof probe);
    if (r == 0)
        return true;
    if (r > 0) {
        char msg[160];
        snprintf(msg, sizeof msg, "the upload has more than the %lld bytes its size said", (long long)io->req->size);
        if (files_put_count(io, r))
            files_put_fail(io, API_INVALID_ARGUMENT, msg);
        return false;
    }
    files_put_read_failed(io, r);
    return false;
}

static size_t files_put_raw(files_put_io_t *io, char *buf, size_t cap)
{
    const runtime_files_put_req_t *req = io->req;
    if (io->phase == PUT_HEADER) {
        if (io->hdr_off == 0 && req->size == 0 && !files_put_raw_end(io))
            return CURL_READFUNC_ABORT;
        size_t k = io->hdr_len - io->hdr_off < cap ? io->hdr_len - io->hdr_off : cap;
        memcpy(buf, io->hdr + io->hdr_off, k);
        io->hdr_off += k;
        if (io->hdr_off == io->hdr_len) {
            io->phase = req->size == 0 ? PUT_TRAILER : PUT_DATA;
            io->trailer_left = tarstream_padding(req->size) + TARSTREAM_TRAILER;
        }
        return k;
    }
    if (io->phase == PUT_DATA) {
        int64_t left = req->size - io->bytes;
        size_t want = left < (int64_t)cap ? (size_t)left : cap;
        ptrdiff_t r = req->read(req->ud, buf, want);
        if (r < 0)
            return files_put_read_failed(io, r);
        if (r == 0) {
            char msg[160];
            snprintf(msg, sizeof msg, "the upload ended after %lld of the %lld bytes its size said",
                     (long long)io->bytes, (long long)req->size);
            return files_put_fail(io, API_INVALID_ARGUMENT, msg);
        }
        if (!files_put_count(io, r))
            return CURL_READFUNC_ABORT;
        if (io->bytes == req->size) {
            if (!files_put_raw_end(io))
                return CURL_READFUNC_ABORT;
            io->phase = PUT_TRAILER;
        }
        return (size_t)r;
    }
    if (io->phase == PUT_TRAILER) {
        size_t k = io->trailer_left < cap ? io->trailer_left : cap;
        memset(buf, 0, k);
        io->trailer_left -= k;
        if (io->trailer_left == 0)
            io->phase = PUT_DONE;
        return k;
    }
    return 0;
}

static size_t files_put_read_cb(char *buf, size_t size, size_t nitems, void *ud)
{
    files_put_io_t *io = ud;
    size_t cap = size * nitems;
    if (io->failed)
        return CURL_READFUNC_ABORT;
    if (docker_cancelled(io->rt))
        return files_put_fail(io, API_CANCELLED, "the worker is shutting down");
    if (files_stop_seen(io->req->stop_fds, io->req->nstop_fds))
        return files_put_fail(io, API_CANCELLED, "the transfer was stopped");
    if (cap == 0)
        return 0;
    if (io->req->format == RUNTIME_FILES_RAW)
        return files_put_raw(io, buf, cap);
    ptrdiff_t r = io->req->read(io->req->ud, buf, cap);
    if (r < 0)
        return files_put_read_failed(io, r);
    if (r > 0 && !files_put_count(io, r))
        return CURL_READFUNC_ABORT;
    return (size_t)r;
}

/* True when clean is dir or below it. */
static bool files_under(const char *clean, const char *dir)
{
    size_t n = strlen(dir);
    return strncmp(clean, dir, n) == 0 && (clean[n] == '\0' || clean[n] == '/');
}

/* What a transfer needs to know of container ref: whether it runs and its
 * disk quota (RUNTIME_LABEL_DISK_MIB, 0 none). Under gVisor, /tmp and
 * /dev are the sandbox's own tmpfs, which the Engine's archive API
 * (working on the container's root on the host) cannot reach: a transfer
 * there would vanish or miss, so it is refused. */
static int files_inspect(docker_runtime_t *rt, const char *ref, const char *clean, bool *ret_running,
                         int64_t *ret_disk_mib, api_error_t *err)
{
    char path[160];
    json_object *o = NULL;
    snprintf(path, sizeof path, "/containers/%s/json", ref);
    int r = docker_get_json(rt, path, DOCKER_ROUTE_TIMEOUT_MS, &o, err);
    if (r < 0)
        return r;
    bool running = false;
    jsonx_get_bool(jsonx_get_obj(o, "State"), "Running", &running);
    int64_t mib = docker_disk_label(jsonx_get_obj(jsonx_get_obj(o, "Config"), "Labels"));
    const char *runtime = jsonx_get_str(jsonx_get_obj(o, "HostConfig"), "Runtime");
    bool gvisor = runtime && rt->gvisor_runtime[0] && strcmp(runtime, rt->gvisor_runtime) == 0;
    *ret_running = running;
    *ret_disk_mib = mib;
    json_object_put(o);
    if (gvisor && (files_under(clean, "/tmp") || files_under(clean, "/dev")))
        return api_error_set(err, API_INVALID_ARGUMENT, "in a gvisor sandbox %s is on the sandbox's own tmpfs, out "
                             "of the worker's reach: use a directory of the root filesystem (/work, /home, ...)",
                             files_under(clean, "/tmp") ? "/tmp" : "/dev");
    return 0;
}

/* The container must run; when it has a disk quota, what is left of it
 * (quota minus its writable layer) bounds the upload. */
static int files_put_check(files_put_io_t *io, const char *ref, const char *clean, api_error_t *err)
{
    bool running = false;
    int64_t mib = 0;
    int r = files_inspect(io->rt, ref, clean, &running, &mib, err);
    if (r < 0)
        return r;
    if (!running)
        return api_error_set(err, API_CONFLICT, "the sandbox's container is not running");
    io->quota_room = -1;
    if (mib <= 0)
        return 0;
    int64_t used = 0;
    if ((r = docker_container_size_rw(io->rt, ref, &used, err)) < 0)
        return r;
    io->quota_mib = mib;
    io->quota_room = mib * 1024 * 1024 - used;
    if (io->quota_room < 0)
        io->quota_room = 0;
    return 0;
}

struct files_get_io;
static size_t files_get_header_cb(char *p, size_t size, size_t nmemb, void *ud);

/* The Engine's HEAD of path's archive in container ref, which needs nothing
 * in the image and costs about a millisecond (a GET readies the whole
 * archive, about 100 ms, before its first byte): the status (200, 404…),
 * its stat header into io->stat_b64 when io is not NULL, or < 0 with err. */
static long files_head(docker_runtime_t *rt, const char *ref, const char *path, struct files_get_io *io,
                       api_error_t *err)
{
    char url[3 * SBX_FILES_PATH_MAX + 256];
    struct curl_slist *hl = NULL;
    if (files_url(ref, path, false, url, sizeof url) < 0)
        return api_error_set(err, API_INVALID_ARGUMENT, "the path is too long");
    CURL *h = docker_handle_new(rt, "HEAD", url, NULL, 0, NULL, DOCKER_ROUTE_TIMEOUT_MS, &hl);
    if (!h)
        return api_error_set(err, API_INTERNAL, "out of memory");
    curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    if (io) {
        curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, files_get_header_cb);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, io);
    }
    CURLcode cr = curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(h);
    curl_slist_free_all(hl);
    if (cr != CURLE_OK)
        return docker_transport_error(rt, cr, err);
    return status;
}

/* Whether path exists in container ref: 1, 0, or < 0 with err. */
static int files_exists(docker_runtime_t *rt, const char *ref, const char *path, api_error_t *err)
{
    long status = files_head(rt, ref, path, NULL, err);
    if (status < 0)
        return (int)status;
    if (status == 200)
        return 1;
    if (status == 404)
        return 0;
    return api_error_set(err, API_RUNTIME_ERROR, "docker answered %ld to the stat of %s", status, path);
}

/* RAW with parents: the deepest directory above clean's file that exists
 * (into dir), and the file's name below it (into name: "a/b/f"), which the
 * Engine's unpacking makes the missing directories of (0755). */
static int files_parents_split(docker_runtime_t *rt, const char *ref, const char *clean, char *dir, size_t dircap,
                               char *name, size_t namecap, api_error_t *err)
{
    char cur[SBX_FILES_PATH_MAX + 1];
    snprintf(cur, sizeof cur, "%s", clean);
    for (int depth = 0; depth < 64; depth++) {
        char *slash = strrchr(cur, '/');
        if (!slash)
            break;
        if (slash == cur) {
            snprintf(dir, dircap, "/");
            break;
        }
        *slash = '\0';
        int e = files_exists(rt, ref, cur, err);
        if (e < 0)
            return e;
        if (e == 1) {
            snprintf(dir, dircap, "%s", cur);
            break;
        }
    }
    size_t dl = strcmp(dir, "/") == 0 ? 0 : strlen(dir);
    if ((size_t)snprintf(name, namecap, "%s", clean + dl + 1) >= namecap)
        return api_error_set(err, API_INVALID_ARGUMENT, "the file's path below its deepest existing directory is "
                             "over %d bytes", TARSTREAM_NAME_MAX);
    return 0;
}

/* XFERINFOFUNCTION (about once a second, also while Docker takes nothing):
 * the worker stopping or a stop descriptor ends the transfer. */
static int files_put_xferinfo_cb(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    files_put_io_t *io = ud;
    (void)dt, (void)dn, (void)ut, (void)un;
    if (docker_cancelled(io->rt)) {
        files_put_fail(io, API_CANCELLED, "the worker is shutting down");
        return 1;
    }
    if (files_stop_seen(io->req->stop_fds, io->req->nstop_fds)) {
        files_put_fail(io, API_CANCELLED, "the transfer was stopped");
        return 1;
    }
    return 0;
}

int docker_rt_files_put(runtime_t *base, const runtime_files_put_req_t *req, int64_t *ret_bytes, api_error_t *err)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    char clean[SBX_FILES_PATH_MAX + 1], url[3 * SBX_FILES_PATH_MAX + 256];
    struct curl_slist *hl = NULL;
    CURL *h = NULL;
    sbuf_t body;
    sbuf_init(&body, DOCKER_FILES_ERROR_MAX);
    files_put_io_t io = { .rt = rt, .req = req, .err = err, .quota_room = -1 };
    int r = 0;
    *ret_bytes = 0;
    if (!req->ref || !docker_name_ok(req->ref, 80) || !req->read || req->max_bytes <= 0 || req->nstop_fds > 4 ||
        (req->format != RUNTIME_FILES_TAR && req->format != RUNTIME_FILES_RAW))
        return api_error_set(err, API_INVALID_ARGUMENT, "malformed upload request");
    if (tarstream_path_clean(req->path, clean) < 0)
        return api_error_set(err, API_INVALID_ARGUMENT, "the path must be absolute, at most %d bytes, without "
                             "control characters", SBX_FILES_PATH_MAX);
    const char *dir = clean;
    if ((r = files_put_check(&io, req->ref, clean, err)) < 0)
        goto cleanup;
    char pdir[SBX_FILES_PATH_MAX + 1] = "", pname[SBX_FILES_PATH_MAX + 1] = "";
    if (req->format == RUNTIME_FILES_RAW) {
        char *slash = strrchr(clean, '/');
        const char *name = slash + 1;
        if (!*name)
            return api_error_set(err, API_INVALID_ARGUMENT, "a raw upload's path must name a file, not /");
        if (req->parents) {
            if ((r = files_parents_split(rt, req->ref, clean, pdir, sizeof pdir, pname, sizeof pname, err)) < 0)
                goto cleanup;
            name = pname;
        }
        if (req->size < 0)
            return api_error_set(err, API_INVALID_ARGUMENT, "a raw upload needs its size");
        if (req->size > req->max_bytes)
            return api_error_set(err, API_PAYLOAD_TOO_LARGE, "the upload is larger than the %lld bytes a "
                                 "transfer may carry", (long long)req->max_bytes);
        int hn = req->parents ? tarstream_file_header_rel(name, req->size, req->mode, (int64_t)time(NULL), io.hdr)
                              : tarstream_file_header(name, req->size, req->mode, (int64_t)time(NULL), io.hdr);
        if (hn < 0)
            return api_error_set(err, API_INVALID_ARGUMENT, "a raw upload's file name must be 1 to %d bytes "
                                 "without control characters", TARSTREAM_NAME_MAX);
        io.hdr_len = (size_t)hn;
        *slash = '\0';
        dir = req->parents ? pdir : slash == clean ? "/" : clean;
    }
    if (req->format == RUNTIME_FILES_RAW && io.quota_room >= 0 && req->size > io.quota_room) {
        r = api_error_set(err, API_PAYLOAD_TOO_LARGE, "the upload's %lld bytes do not fit in what the sandbox's "
                          "disk quota of %lld MiB has left (%lld bytes)", (long long)req->size,
                          (long long)io.quota_mib, (long long)io.quota_room);
        goto cleanup;
    }
    if ((r = files_url(req->ref, dir, true, url, sizeof url)) < 0) {
        r = api_error_set(err, API_INVALID_ARGUMENT, "the path is too long");
        goto cleanup;
    }
    h = docker_handle_new(rt, "PUT", url, NULL, 0, NULL, 0, &hl);
    if (!h) {
        r = api_error_set(err, API_INTERNAL, "out of memory");
        goto cleanup;
    }
    hl = curl_slist_append(hl, "Content-Type: application/x-tar");
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(h, CURLOPT_READFUNCTION, files_put_read_cb);
    curl_easy_setopt(h, CURLOPT_READDATA, &io);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, files_error_body_cb);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, files_put_xferinfo_cb);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, &io);
    CURLcode cr = curl_easy_perform(h);
    if (io.failed) {
        r = SBX_EIO;              /* err already says why */
        goto cleanup;
    }
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    if (cr != CURLE_OK && status == 0) {
        r = docker_transport_error(rt, cr, err);
        goto cleanup;
    }
    if (status != 200) {
        r = files_engine_error(status, &body, "upload", req->path, err);
        goto cleanup;
    }
    if (cr != CURLE_OK) {
        r = docker_transport_error(rt, cr, err);
        goto cleanup;
    }
    *ret_bytes = io.bytes;
cleanup:
    if (h)
        curl_easy_cleanup(h);
    curl_slist_free_all(hl);
    sbuf_release(&body);
    return r < 0 ? r : 0;
}

/* ---- get --------------------------------------------------------------- */

typedef struct files_get_io {
    docker_runtime_t *rt;
    const runtime_files_get_req_t *req;
    CURL *h;
    long status;
    sbuf_t stat_b64;          /* the stat header's value */
    sbuf_t error_body;
    bool stat_done;
    bool stop;                /* a callback or a stop descriptor ended it: not an error */
    bool list_full;           /* LIST: SBX_FILES_LIST_MAX entries listed; the transfer was cut */
    bool failed;              /* err is set */
    api_error_t *err;
    tarstream_t tar;          /* RAW, LIST */
    bool raw_seen;            /* RAW: the file's entry came */
    tarstream_list_t list;    /* LIST */
    sbuf_t list_out;
} files_get_io_t;

/* Decodes the stat header (base64 JSON; docker_path_stat_parse). */
static int files_stat_parse(const sbuf_t *b64, runtime_files_stat_t *st, api_error_t *err)
{
    memset(st, 0, sizeof *st);
    size_t n = b64->len;
    const char *s = b64->data ? b64->data : "";
    while (n > 0 && (s[n - 1] == '\r' || s[n - 1] == '\n' || s[n - 1] == ' '))
        n--;
    while (n > 0 && *s == ' ') {
        s++;
        n--;
    }
    unsigned char *bin = malloc(n + 1);
    size_t bl = 0;
    json_object *o = NULL;
    int r = 0;
    if (!bin || sodium_base642bin(bin, n + 1, s, n, NULL, &bl, NULL, sodium_base64_VARIANT_ORIGINAL) != 0 ||
        jsonx_parse((const char *)bin, bl, &o, err) < 0)
        r = api_error_set(err, API_RUNTIME_ERROR, "docker sent no readable stat of the path");
    else if (!docker_path_stat_parse(o, st))
        r = api_error_set(err, API_RUNTIME_ERROR, "docker sent an incomplete stat of the path");
    if (o)
        json_object_put(o);
    free(bin);
    return r;
}

static size_t files_get_header_cb(char *p, size_t size, size_t nmemb, void *ud)
{
    files_get_io_t *io = ud;
    size_t n = size * nmemb, hl = sizeof DOCKER_FILES_STAT_HEADER - 1;
    if (n > hl && strncasecmp(p, DOCKER_FILES_STAT_HEADER, hl) == 0) {
        sbuf_reset(&io->stat_b64);
        sbuf_append_bounded(&io->stat_b64, p + hl, n - hl);
    }
    return n;
}

static int files_get_fail(files_get_io_t *io, api_code_t code, const char *msg)
{
    if (!io->failed)
        api_error_set(io->err, code, "%s", msg);
    io->failed = true;
    return SBX_EIO;
}

/* Hands the listing gathered so far on. */
static int files_list_flush(files_get_io_t *io)
{
    if (io->list_out.len == 0)
        return 0;
    int r = io->req->on_data(io->req->ud, io->list_out.data, io->list_out.len);
    sbuf_reset(&io->list_out);
    if (r < 0)
        io->stop = true;
    return r;
}

static int files_tar_entry_cb(void *ud, const tarstream_entry_t *e)
{
    files_get_io_t *io = ud;
    if (io->req->format == RUNTIME_FILES_RAW) {
        if (io->raw_seen) {
            io->stop = true;      /* the file's content is complete */
            return SBX_EIO;
        }
        io->raw_seen = true;
        if (strcmp(tarstream_kind(e->type), "file") != 0)
            return files_get_fail(io, API_INVALID_ARGUMENT, "the path is not a regular file; use the tar form");
        return 0;
    }
    int r = tarstream_list_add(&io->list, e, &io->list_out);
    if (r < 0)
        return files_get_fail(io, API_INTERNAL, "out of memory");
    if (r == 2) {
        io->list_full = true;     /* the rest is not read: the listing ends here */
        return SBX_EIO;
    }
    if (io->list_out.len >= DOCKER_FILES_LIST_FLUSH && files_list_flush(io) < 0)
        return SBX_EIO;
    return 0;
}

static int files_tar_data_cb(void *ud, const char *data, size_t n)
{
    files_get_io_t *io = ud;
    if (io->req->on_data(io->req->ud, data, n) < 0) {
        io->stop = true;
        return SBX_EIO;
    }
    return 0;
}

/* The first body byte of a 200: the stat goes to on_stat (a raw get of
 * anything but a regular file is refused first). */
static int files_get_begin(files_get_io_t *io)
{
    runtime_files_stat_t *st = malloc(sizeof *st);
    if (!st)
        return files_get_fail(io, API_INTERNAL, "out of memory");
    api_error_t e;
    int r = files_stat_parse(&io->stat_b64, st, &e);
    if (r < 0) {
        r = files_get_fail(io, e.code, e.message);
    } else if (io->req->format == RUNTIME_FILES_RAW && strcmp(st->type, "file") != 0) {
        char msg[400];
        snprintf(msg, sizeof msg, "%.255s is %s; use the tar form", st->name,
                 strcmp(st->type, "dir") == 0 ? "a directory" : strcmp(st->type, "symlink") == 0 ? "a symlink"
                                                                                               : "not a regular file");
        r = files_get_fail(io, API_INVALID_ARGUMENT, msg);
    } else {
        io->stat_done = true;
        if (io->req->on_stat && io->req->on_stat(io->req->ud, st) < 0) {
            io->stop = true;
            r = SBX_EIO;
        } else if (io->req->format == RUNTIME_FILES_LIST &&
                   sbuf_append(&io->list_out, TARSTREAM_LIST_HEAD, strlen(TARSTREAM_LIST_HEAD)) < 0) {
            r = files_get_fail(io, API_INTERNAL, "out of memory");
        }
    }
    free(st);
    return r;
}

static size_t files_get_write_cb(char *p, size_t size, size_t nmemb, void *ud)
{
    files_get_io_t *io = ud;
    size_t n = size * nmemb;
    if (io->status == 0)
        curl_easy_getinfo(io->h, CURLINFO_RESPONSE_CODE, &io->status);
    if (io->status != 200) {
        sbuf_append_bounded(&io->error_body, p, n);
        return n;
    }
    if (io->failed || io->stop || io->list_full)
        return 0;
    if (!io->stat_done && files_get_begin(io) < 0)
        return 0;
    if (io->req->format == RUNTIME_FILES_TAR) {
        if (io->req->on_data(io->req->ud, p, n) < 0) {
            io->stop = true;
            return 0;
        }
        return n;
    }
    int r = tarstream_push(&io->tar, p, n);
    if (r < 0 && !io->stop && !io->failed && !io->list_full)
        files_get_fail(io, API_RUNTIME_ERROR, io->tar.error);
    return r < 0 ? 0 : n;
}

static int files_get_xferinfo_cb(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    files_get_io_t *io = ud;
    (void)dt, (void)dn, (void)ut, (void)un;
    if (docker_cancelled(io->rt))
        return 1;
    if (files_stop_seen(io->req->stop_fds, io->req->nstop_fds)) {
        io->stop = true;
        return 1;
    }
    return 0;
}

/* After a 200 transfer ended: the end of a raw file or a listing. */
static int files_get_end(files_get_io_t *io, api_error_t *err)
{
    if (!io->stat_done) {
        int r = files_get_begin(io);
        if (r < 0)
            return io->failed ? r : 0;
    }
    if (io->req->format == RUNTIME_FILES_TAR)
        return 0;
    if (io->req->format == RUNTIME_FILES_RAW) {
        if (!io->raw_seen || tarstream_finish(&io->tar) < 0)
            return api_error_set(err, API_RUNTIME_ERROR, "docker's archive of the file ended early");
        return 0;
    }
    if (!io->list.truncated && tarstream_finish(&io->tar) < 0)
        return api_error_set(err, API_RUNTIME_ERROR, "docker's archive of the directory ended early");
    if (tarstream_list_tail(&io->list, &io->list_out) < 0)
        return api_error_set(err, API_INTERNAL, "out of memory");
    files_list_flush(io);
    return 0;
}

int docker_rt_files_get(runtime_t *base, const runtime_files_get_req_t *req, api_error_t *err)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    char clean[SBX_FILES_PATH_MAX + 1], url[3 * SBX_FILES_PATH_MAX + 256];
    struct curl_slist *hl = NULL;
    files_get_io_t io;
    memset(&io, 0, sizeof io);
    io.rt = rt;
    io.req = req;
    io.err = err;
    sbuf_init(&io.stat_b64, DOCKER_FILES_STAT_MAX);
    sbuf_init(&io.error_body, DOCKER_FILES_ERROR_MAX);
    sbuf_init(&io.list_out, 0);
    tarstream_list_init(&io.list, SBX_FILES_LIST_MAX);
    int r = 0;
    if (!req->ref || !docker_name_ok(req->ref, 80) || !req->on_data || req->nstop_fds > 4 ||
        (req->format != RUNTIME_FILES_TAR && req->format != RUNTIME_FILES_RAW && req->format != RUNTIME_FILES_LIST))
        return api_error_set(err, API_INVALID_ARGUMENT, "malformed download request");
    if (tarstream_path_clean(req->path, clean) < 0)
        return api_error_set(err, API_INVALID_ARGUMENT, "the path must be absolute, at most %d bytes, without "
                             "control characters", SBX_FILES_PATH_MAX);
    bool running = false;
    int64_t mib = 0;
    if ((r = files_inspect(rt, req->ref, clean, &running, &mib, err)) < 0)
        return r;
    if (req->format != RUNTIME_FILES_TAR &&
        tarstream_init(&io.tar, files_tar_entry_cb, req->format == RUNTIME_FILES_RAW ? files_tar_data_cb : NULL,
                       &io) < 0)
        return api_error_set(err, API_INTERNAL, "out of memory");
    /* A tar of "DIR/." holds DIR's contents (entries "./…"), as docker cp
     * has it: the Engine's own rule, given the cleaned path with it. */
    char dotted[SBX_FILES_PATH_MAX + 3];
    size_t pl = strlen(req->path);
    bool contents = req->format == RUNTIME_FILES_TAR && pl >= 2 && strcmp(req->path + pl - 2, "/.") == 0 &&
                    strcmp(clean, "/") != 0;
    snprintf(dotted, sizeof dotted, "%s%s", clean, contents ? "/." : "");
    if (files_url(req->ref, dotted, false, url, sizeof url) < 0) {
        r = api_error_set(err, API_INVALID_ARGUMENT, "the path is too long");
        goto cleanup;
    }
    /* The stat first, from the HEAD: a client that wanted only the stat
     * (sandbox cp asks one before each upload) has it at once and hangs
     * up, and the GET is not made; a download waits up to
     * DOCKER_FILES_STAT_LINGER_MS more for it. When the HEAD says anything
     * but 200, the GET says it as before (its error has the words). */
    api_error_t head_err; /* a HEAD that failed leaves the words to the GET */
    if (files_head(rt, req->ref, clean, &io, &head_err) == 200 && io.stat_b64.len > 0) {
        if (files_get_begin(&io) < 0) {
            r = io.failed ? SBX_EIO : 0;
            goto cleanup;
        }
        if (files_stop_wait(req->stop_fds, req->nstop_fds, DOCKER_FILES_STAT_LINGER_MS))
            goto cleanup;
    }
    io.h = docker_handle_new(rt, "GET", url, NULL, 0, NULL, 0, &hl);
    if (!io.h) {
        r = api_error_set(err, API_INTERNAL, "out of memory");
        goto cleanup;
    }
    curl_easy_setopt(io.h, CURLOPT_HEADERFUNCTION, files_get_header_cb);
    curl_easy_setopt(io.h, CURLOPT_HEADERDATA, &io);
    curl_easy_setopt(io.h, CURLOPT_WRITEFUNCTION, files_get_write_cb);
    curl_easy_setopt(io.h, CURLOPT_WRITEDATA, &io);
    curl_easy_setopt(io.h, CURLOPT_XFERINFOFUNCTION, files_get_xferinfo_cb);
    curl_easy_setopt(io.h, CURLOPT_XFERINFODATA, &io);
    CURLcode cr = curl_easy_perform(io.h);
    if (io.failed) {
        r = SBX_EIO;
        goto cleanup;
    }
    if (io.stop)
        goto cleanup;             /* asked to stop: not an error */
    if (io.list_full) {
        r = files_get_end(&io, err);
        goto cleanup;
    }
    if (io.status == 0)
        curl_easy_getinfo(io.h, CURLINFO_RESPONSE_CODE, &io.status);
    if (cr != CURLE_OK) {
        r = docker_transport_error(rt, cr, err);
        goto cleanup;
    }
    if (io.status != 200) {
        r = files_engine_error(io.status, &io.error_body, "download", req->path, err);
        goto cleanup;
    }
    r = files_get_end(&io, err);
cleanup:
    if (io.h)
        curl_easy_cleanup(io.h);
    curl_slist_free_all(hl);
    if (req->format != RUNTIME_FILES_TAR)
        tarstream_release(&io.tar);
    sbuf_release(&io.stat_b64);
    sbuf_release(&io.error_body);
    sbuf_release(&io.list_out);
    return r < 0 ? r : 0;
}
