/* Unit tests for the worker's envd calls end to end (worker/envd*.c): a
 * real forwarder on loopback over a fake runtime whose shells are
 * socketpairs the test plays the process on, and whose files are a few
 * fixed paths. */
#include <check.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "b64.h"
#include "check_util.h"
#include "envd.h"
#include "errors.h"
#include "forward.h"
#include "grant.h"
#include "jsonx.h"
#include "logframe.h"
#include "tarstream.h"
#include "timeutil.h"

#define TOKEN "sbt_aaaaaaaaaaaaaaaaaaaaaaaaaa_0123456789012345678901234567890123456789012"
#define MAX_SHELLS 8

/* ---- the fake runtime ----------------------------------------------------- */

struct runtime_shell {
    int fd;
    int idx;
};

typedef struct fake_rt {
    runtime_t base;
    pthread_mutex_t mu;
    bool has_bash;
    int exit_code;
    int nshells;
    int term[MAX_SHELLS];         /* the process's end of each shell */
    char argv[MAX_SHELLS][512];   /* its argv joined by '|' */
    bool tty[MAX_SHELLS];
    atomic_int closed[MAX_SHELLS];
    char put_path[4][256];        /* raw puts: path and content */
    char put_data[4][64];
    bool put_parents[4];
    atomic_int nputs;
    char exec_argv[512];
    char made[8][256];            /* directories a tar put made (absolute) */
    atomic_int nmade;
    const char *tree;             /* the tar a get of /tmp in tar form answers */
    size_t tree_len;
    char session[512];            /* the last ended process's record: "argv|...;exit;tty;caller" */
    atomic_int sessions;
    bool terminals_only;          /* shells are terminals only (an external driver's): execs run commands */
    atomic_int exec_block;        /* such an exec runs until it is cancelled */
    int64_t fs_bytes;             /* the sandbox's filesystem size files_target says */
    atomic_int endless;           /* a tar get of /tmp streams a huge file until a stop descriptor is readable */
    atomic_int endless_stopped;   /* such a get ended (a stop descriptor, or its reader refused more) */
} fake_rt_t;

static int fake_target(runtime_t *rt, const char *sandbox_id, const char *worker_name, char ret_ref[80],
                       int64_t *ret_fs_bytes, api_error_t *err)
{
    (void)err;
    ck_assert_str_eq(sandbox_id, "sbx_b");
    ck_assert_str_eq(worker_name, "w1");
    snprintf(ret_ref, 80, "ctr_fake");
    if (ret_fs_bytes)
        *ret_fs_bytes = ((fake_rt_t *)rt)->fs_bytes;
    return 0;
}

static int fake_open(runtime_t *rt, const runtime_shell_req_t *req, runtime_shell_t **ret, int *ret_fd,
                     runtime_shell_early_t *ret_early, api_error_t *err)
{
    fake_rt_t *fr = (fake_rt_t *)rt;
    int sv[2];
    if (fr->terminals_only && !req->tty)
        return api_error_set(err, API_UNAVAILABLE, "driver fake streams no stdin without a terminal");
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0)
        return api_error_set(err, API_RUNTIME_ERROR, "socketpair failed");
    pthread_mutex_lock(&fr->mu);
    int i = fr->nshells++;
    ck_assert_int_lt(i, MAX_SHELLS);
    fr->term[i] = sv[1];
    fr->tty[i] = req->tty;
    size_t n = 0;
    for (size_t a = 0; a < req->argc; a++)
        n += (size_t)snprintf(fr->argv[i] + n, sizeof fr->argv[i] - n, "%s%s", a ? "|" : "", req->argv[a]);
    pthread_mutex_unlock(&fr->mu);
    runtime_shell_t *s = unit_xmalloc(sizeof *s);
    s->fd = sv[0];
    s->idx = i;
    *ret = s;
    *ret_fd = sv[0];
    ret_early->data = NULL;
    ret_early->len = 0;
    return 0;
}

static int fake_resize(runtime_t *rt, runtime_shell_t *s, unsigned cols, unsigned rows, api_error_t *err)
{
    (void)rt, (void)s, (void)cols, (void)rows, (void)err;
    return 0;
}

static int fake_exit_code(runtime_t *rt, runtime_shell_t *s, int *ret_code, api_error_t *err)
{
    (void)s, (void)err;
    *ret_code = ((fake_rt_t *)rt)->exit_code;
    return 0;
}

static void fake_close(runtime_t *rt, runtime_shell_t *s)
{
    if (!s)
        return;
    atomic_store(&((fake_rt_t *)rt)->closed[s->idx], 1);
    close(s->fd);
    free(s);
}

/* Files: /tmp/a.txt holds "hello file\n"; /tmp is a directory; /bin/bash
 * exists when has_bash; nothing else does. */
static bool fake_made(fake_rt_t *fr, const char *path)
{
    for (int i = 0; i < atomic_load(&fr->nmade); i++)
        if (strcmp(fr->made[i], path) == 0)
            return true;
    return false;
}

typedef struct tar_put {
    fake_rt_t *fr;
    const char *dir;
} tar_put_t;

static int fake_tar_entry(void *ud, const tarstream_entry_t *e)
{
    tar_put_t *t = ud;
    ck_assert_int_eq(e->type, '5');
    ck_assert_uint_eq(e->mode, 0755);
    int i = atomic_fetch_add(&t->fr->nmade, 1);
    ck_assert_int_lt(i, 8);
    size_t n = strlen(e->name);
    ck_assert_uint_lt(n, 100);
    ck_assert_int_eq(e->name[n - 1], '/');
    snprintf(t->fr->made[i], sizeof t->fr->made[i], "%s/%.*s", strcmp(t->dir, "/") == 0 ? "" : t->dir, (int)(n - 1),
             e->name);
    return 0;
}

static void tar_add(char *buf, size_t *len, const char *name, char type, const char *link, int64_t size,
                    unsigned mode);

/* The archive of a /tmp holding a sparse file of 1 GiB, streamed slowly as
 * a runtime does, until a stop descriptor is readable (a runtime's check). */
static int fake_endless(fake_rt_t *fr, const runtime_files_get_req_t *req)
{
    static char head[2 * TARSTREAM_BLOCK + 1024];
    size_t n = 0;
    tar_add(head, &n, "tmp/", '5', NULL, 0, 01777);
    tar_add(head, &n, "tmp/sparse", '0', NULL, 0, 0644);
    snprintf(head + TARSTREAM_BLOCK + 124, 12, "%011llo", 1ULL << 30);
    tarstream_checksum((unsigned char *)head + TARSTREAM_BLOCK);
    if (req->on_data(req->ud, head, 2 * TARSTREAM_BLOCK) < 0)
        return 0;
    static const char zeros[4096];
    for (;;) {
        for (size_t i = 0; i < req->nstop_fds; i++) {
            struct pollfd p = { .fd = req->stop_fds[i], .events = POLLIN };
            if (poll(&p, 1, 0) > 0) {
                atomic_store(&fr->endless_stopped, 1);
                return 0;
            }
        }
        /* the reader may refuse more before the stop descriptor is seen:
         * either way, the walk ended */
        if (req->on_data(req->ud, zeros, sizeof zeros) < 0) {
            atomic_store(&fr->endless_stopped, 1);
            return 0;
        }
        usleep(1000);
    }
}

static int fake_get(runtime_t *rt, const runtime_files_get_req_t *req, api_error_t *err)
{
    fake_rt_t *fr = (fake_rt_t *)rt;
    runtime_files_stat_t st = { .mode = 0644, .type = "file", .mtime = "2020-01-02T03:04:05.5+01:00" };
    const char *body = NULL;
    if (strcmp(req->path, "/tmp/a.txt") == 0) {
        snprintf(st.name, sizeof st.name, "a.txt");
        body = "hello file\n";
        st.size = 11;
    } else if (strcmp(req->path, "/tmp") == 0) {
        snprintf(st.name, sizeof st.name, "tmp");
        st.type = "dir";
        st.mode = 01777;
    } else if (fake_made(fr, req->path)) {
        snprintf(st.name, sizeof st.name, "%s", strrchr(req->path, '/') + 1);
        st.type = "dir";
        st.mode = 0755;
    } else if (strcmp(req->path, "/bin/bash") == 0 && fr->has_bash) {
        snprintf(st.name, sizeof st.name, "bash");
        st.size = 1000;
    } else {
        return api_error_set(err, API_NOT_FOUND, "no such path in the fake: %s", req->path);
    }
    if (req->format == RUNTIME_FILES_RAW && strcmp(st.type, "file") != 0)
        return api_error_set(err, API_INVALID_ARGUMENT, "%s is a directory; use the tar form", st.name);
    if (req->on_stat && req->on_stat(req->ud, &st) < 0)
        return 0;
    if (req->format == RUNTIME_FILES_RAW && body)
        req->on_data(req->ud, body, strlen(body));
    pthread_mutex_lock(&fr->mu);     /* a watch test changes the tree meanwhile */
    const char *tree = fr->tree;
    size_t tree_len = fr->tree_len;
    pthread_mutex_unlock(&fr->mu);
    if (req->format == RUNTIME_FILES_TAR && atomic_load(&fr->endless))
        return fake_endless(fr, req);
    if (req->format == RUNTIME_FILES_TAR && tree)
        for (size_t off = 0; off < tree_len; off += 700) /* in pieces, as a runtime's stream comes */
            if (req->on_data(req->ud, tree + off, tree_len - off < 700 ? tree_len - off : 700) < 0)
                return 0;
    return 0;
}

static int fake_put(runtime_t *rt, const runtime_files_put_req_t *req, int64_t *ret_bytes, api_error_t *err)
{
    fake_rt_t *fr = (fake_rt_t *)rt;
    if (req->format == RUNTIME_FILES_TAR) {
        /* MakeDir: directory entries only, unpacked into an existing directory */
        tar_put_t t = { .fr = fr, .dir = req->path };
        tarstream_t ts;
        ck_assert_int_eq(tarstream_init(&ts, fake_tar_entry, NULL, &t), 0);
        char buf[512];
        ptrdiff_t n;
        while ((n = req->read(req->ud, buf, sizeof buf)) > 0)
            ck_assert_int_eq(tarstream_push(&ts, buf, (size_t)n), 0);
        ck_assert_int_eq(n, 0);
        ck_assert_int_eq(ts.state, TARSTREAM_END);
        tarstream_release(&ts);
        *ret_bytes = 0;
        return 0;
    }
    int i = atomic_fetch_add(&fr->nputs, 1);
    ck_assert_int_lt(i, 4);
    ck_assert_int_eq(req->format, RUNTIME_FILES_RAW);
    snprintf(fr->put_path[i], sizeof fr->put_path[i], "%s", req->path);
    fr->put_parents[i] = req->parents;
    size_t got = 0;
    for (;;) {
        char buf[7];
        ptrdiff_t n = req->read(req->ud, buf, sizeof buf);
        if (n < 0)
            return api_error_set(err, API_CANCELLED, "aborted");
        if (n == 0)
            break;
        ck_assert_uint_lt(got + (size_t)n, sizeof fr->put_data[i]);
        memcpy(fr->put_data[i] + got, buf, (size_t)n);
        got += (size_t)n;
    }
    ck_assert_int_eq((int64_t)got, req->size);
    *ret_bytes = (int64_t)got;
    return 0;
}

static int fake_exec(runtime_t *rt, const char *ref, const exec_spec_t *spec, size_t max_output,
                     const runtime_output_sink_t *sink, runtime_exec_result_t *ret, api_error_t *err)
{
    fake_rt_t *fr = (fake_rt_t *)rt;
    (void)ref, (void)max_output, (void)sink, (void)err;
    memset(ret, 0, sizeof *ret);
    size_t n = 0;
    for (size_t a = 0; a < spec->argc; a++)
        n += (size_t)snprintf(fr->exec_argv + n, sizeof fr->exec_argv - n, "%s%s", a ? "|" : "", spec->argv[a]);
    if (fr->terminals_only && sink && strcmp(spec->argv[0], "/bin/sh") == 0) {
        /* a process run as an exec: output through the sink, then its end */
        ck_assert(!spec->has_stdin);
        ck_assert_int_eq(spec->env.n, 1);
        sink->write(sink->ud, 1, "out\n", 4);
        sink->write(sink->ud, 2, "err\n", 4);
        while (atomic_load(&fr->exec_block) && !sink->cancelled(sink->ud))
            usleep(10000);
        ret->cancelled = atomic_load(&fr->exec_block) != 0;
        ret->exit_code = ret->cancelled ? 137 : fr->exit_code;
    }
    return 0;
}

static const runtime_ops_t fake_ops = {
    .name = "envd-fake", .files_target = fake_target, .files_get = fake_get, .files_put = fake_put,
    .exec = fake_exec, .shell_open = fake_open, .shell_resize = fake_resize, .shell_exit_code = fake_exit_code,
    .shell_close = fake_close,
};

static void worker_id_cb(void *ud, char *ret, size_t retlen) { snprintf(ret, retlen, "%s", (const char *)ud); }

/* forward_session_fn: records the ended process. */
static void session_cb(void *ud, const forward_session_t *s)
{
    fake_rt_t *fr = ud;
    char argv[256] = "";
    size_t n = 0;
    for (size_t i = 0; i < s->argc; i++)
        n += (size_t)snprintf(argv + n, sizeof argv - n, "%s%s", i ? "|" : "", s->argv[i]);
    ck_assert_str_eq(s->sandbox_id, "sbx_b");
    ck_assert_int_ge(s->duration_ms, 0);
    pthread_mutex_lock(&fr->mu);
    snprintf(fr->session, sizeof fr->session, "%s;%d;%d;%s", argv, s->exit_code, s->tty, s->caller ? s->caller : "-");
    pthread_mutex_unlock(&fr->mu);
    atomic_fetch_add(&fr->sessions, 1);
}

/* The forwarder's files_max_bytes for the next start (0: its default). */
static int64_t start_files_max;

static forward_t *start(fake_rt_t *fr)
{
    memset(fr, 0, sizeof *fr);
    fr->base.ops = &fake_ops;
    pthread_mutex_init(&fr->mu, NULL);
    for (int i = 0; i < MAX_SHELLS; i++)
        fr->term[i] = -1;
    forward_options_t o = { .listen = "127.0.0.1:0", .max_connections = 16, .token = TOKEN, .worker_name = "w1",
                            .rt = &fr->base, .worker_id = worker_id_cb, .worker_id_ud = (void *)"wrk_a",
                            .session_done = session_cb, .session_ud = fr, .files_max_bytes = start_files_max };
    forward_t *f = NULL;
    char err[256] = "";
    ck_assert_msg(forward_new(&o, &f, err, sizeof err) == 0, "forward_new: %s", err);
    ck_assert_msg(forward_start(f, err, sizeof err) == 0, "forward_start: %s", err);
    return f;
}

static void finish(fake_rt_t *fr, forward_t *f)
{
    forward_free(f);
    for (int i = 0; i < fr->nshells; i++)
        if (fr->term[i] >= 0)
            close(fr->term[i]);
    pthread_mutex_destroy(&fr->mu);
}

/* ---- the controller's side -------------------------------------------- */

/* A receive buffer for the next connections (0: the system's): set before
 * the connect, so the window it advertises stays within it. */
static int dial_rcvbuf;

static int dial(const forward_t *f)
{
    int port = (int)strtol(strrchr(forward_address(f), ':') + 1, NULL, 10);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    if (dial_rcvbuf)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &dial_rcvbuf, sizeof dial_rcvbuf);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    return fd;
}

static void send_all(int fd, const void *p, size_t n)
{
    ck_assert_int_eq(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

/* The request line's caller (NULL: none said). */
static const char *call_caller;

/* Opens a call: preamble, request line, the body as frames and the END
 * frame. Returns the connection. */
static int call_open(const forward_t *f, const char *method, const char *path, const char *query, const char *headers,
                     const char *body, size_t n)
{
    char line[4096];
    snprintf(line, sizeof line, "{\"op\":\"envd\",\"method\":\"%s\",\"path\":\"%s\",\"query\":\"%s\",\"headers\":%s,"
             "\"body\":%zu,\"max_bytes\":1048576%s%s%s}", method, path, query, headers, n,
             call_caller ? ",\"caller\":\"" : "", call_caller ? call_caller : "", call_caller ? "\"" : "");
    unsigned char key[GRANT_KEY_BYTES];
    grant_key_from_token(TOKEN, key);
    grant_t g = { .worker_id = "wrk_a", .sandbox_id = "sbx_b", .purpose = GRANT_ENVD,
                  .expires_unix = time(NULL) + 60 };
    grant_files_digest(line, strlen(line), g.files_digest);
    char text[GRANT_MAX], pre[8192];
    ck_assert_int_eq(grant_sign(key, &g, text), 0);
    int len = snprintf(pre, sizeof pre, "%s %s\r\n%s\r\n", FORWARD_PROTOCOL, text, line);
    int fd = dial(f);
    send_all(fd, pre, (size_t)len);
    for (size_t off = 0; off < n;) {
        size_t k = n - off > 1000 ? 1000 : n - off; /* small frames: the body in pieces */
        unsigned char h[LOGFRAME_HEADER_BYTES];
        logframe_header(h, LOGFRAME_STDOUT, (uint32_t)k);
        send_all(fd, h, sizeof h);
        send_all(fd, body + off, k);
        off += k;
    }
    unsigned char h[LOGFRAME_HEADER_BYTES];
    logframe_header(h, LOGFRAME_END, 0);
    send_all(fd, h, sizeof h);
    return fd;
}

/* Reads exactly n bytes (5 s at most); false when the connection ended. */
static bool read_exact(int fd, void *buf, size_t n)
{
    size_t got = 0;
    int64_t deadline = time_mono_ms() + 5000;
    while (got < n && time_mono_ms() < deadline) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        if (poll(&p, 1, 100) <= 0)
            continue;
        ssize_t r = recv(fd, (char *)buf + got, n - got, 0);
        if (r <= 0)
            return false;
        got += (size_t)r;
    }
    return got == n;
}

/* The answer line's status and content type. */
static int read_head(int fd, char *ct, size_t ctlen)
{
    char line[2048];
    size_t n = 0;
    while (n + 1 < sizeof line && read_exact(fd, line + n, 1)) {
        if (++n >= 2 && line[n - 2] == '\r' && line[n - 1] == '\n')
            break;
    }
    line[n] = '\0';
    static const char ok[] = "SANDBOX-FORWARD/1 200 ok ";
    ck_assert_msg(strncmp(line, ok, sizeof ok - 1) == 0, "answer line: %s", line);
    json_object *o = unit_json(line + sizeof ok - 1);
    int64_t status = 0;
    ck_assert(jsonx_get_int(o, "status", &status));
    json_object *h = jsonx_get_obj(o, "headers");
    const char *c = h ? jsonx_get_str(h, "content-type") : NULL;
    snprintf(ct, ctlen, "%s", c ? c : "");
    json_object_put(o);
    return (int)status;
}

/* The next frame: its type, payload into buf (NUL-terminated). */
static int read_frame(int fd, char *buf, size_t cap, size_t *ret_len)
{
    unsigned char h[LOGFRAME_HEADER_BYTES];
    ck_assert_msg(read_exact(fd, h, sizeof h), "no frame came");
    uint32_t len = (uint32_t)h[1] << 24 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 8 | h[4];
    ck_assert_uint_lt(len, cap);
    ck_assert(read_exact(fd, buf, len));
    buf[len] = '\0';
    *ret_len = len;
    return h[0];
}

/* A whole (non-stream) answer: status, content type, body. */
static int read_answer(int fd, char *ct, size_t ctlen, char *body, size_t cap)
{
    int status = read_head(fd, ct, ctlen);
    size_t off = 0;
    for (;;) {
        size_t n;
        int t = read_frame(fd, body + off, cap - off, &n);
        if (t == LOGFRAME_END) {
            ck_assert_msg(n == 0, "the body was cut: %s", body + off);
            body[off] = '\0';
            return status;
        }
        ck_assert_int_eq(t, LOGFRAME_STDOUT);
        off += n;
    }
}

/* One unary call with its whole answer. */
static int unary(const forward_t *f, const char *path, const char *msg, char *body, size_t cap)
{
    int fd = call_open(f, "POST", path, "", "{\"content-type\":\"application/json\"}", msg, strlen(msg));
    char ct[128];
    int status = read_answer(fd, ct, sizeof ct, body, cap);
    ck_assert_str_eq(ct, "application/json");
    close(fd);
    return status;
}

/* A stream call: sends the enveloped message, checks the 200 head. */
static int stream_open(const forward_t *f, const char *path, const char *msg, const char *headers)
{
    char body[4096];
    size_t n = strlen(msg);
    envd_envelope_header((unsigned char *)body, 0, (uint32_t)n);
    memcpy(body + ENVD_ENVELOPE_HEADER, msg, n);
    int fd = call_open(f, "POST", path, "", headers, body, n + ENVD_ENVELOPE_HEADER);
    char ct[128];
    ck_assert_int_eq(read_head(fd, ct, sizeof ct), 200);
    ck_assert_str_eq(ct, "application/connect+json");
    return fd;
}

/* The next envelope of a stream, keepalives skipped: its flags; its JSON
 * into out. */
static int stream_next(int fd, char *out, size_t cap)
{
    for (;;) {
        char buf[70000];
        size_t n;
        int t = read_frame(fd, buf, sizeof buf, &n);
        ck_assert_msg(t == LOGFRAME_STDOUT, "frame type %d: %s", t, buf);
        ck_assert_uint_ge(n, ENVD_ENVELOPE_HEADER);
        unsigned char *h = (unsigned char *)buf;
        uint32_t len = (uint32_t)h[1] << 24 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 8 | h[4];
        ck_assert_uint_eq(len, n - ENVD_ENVELOPE_HEADER);
        ck_assert_uint_lt(len, cap);
        memcpy(out, buf + ENVD_ENVELOPE_HEADER, len);
        out[len] = '\0';
        if (!strstr(out, "keepalive"))
            return h[0];
    }
}

/* Waits until the fake has shell i open. */
static int term_of(fake_rt_t *fr, int i)
{
    for (int k = 0; k < 200; k++) {
        pthread_mutex_lock(&fr->mu);
        int fd = fr->nshells > i ? fr->term[i] : -1;
        pthread_mutex_unlock(&fr->mu);
        if (fd >= 0)
            return fd;
        usleep(10000);
    }
    ck_abort_msg("shell %d was not opened", i);
    return -1;
}

/* Writes a framed output piece (RUNTIME_SHELL_MUX_HEADER) as the process. */
static void term_write(int fd, int stream, const char *s)
{
    unsigned char h[RUNTIME_SHELL_MUX_HEADER] = { (unsigned char)stream, 0, 0, 0, 0, 0, 0, (unsigned char)strlen(s) };
    send_all(fd, h, sizeof h);
    send_all(fd, s, strlen(s));
}

static void wait_closed(fake_rt_t *fr, int i)
{
    for (int k = 0; k < 300 && !atomic_load(&fr->closed[i]); k++)
        usleep(10000);
    ck_assert_int_eq(atomic_load(&fr->closed[i]), 1);
}

#define STREAM_CT "{\"content-type\":\"application/connect+json\",\"connect-protocol-version\":\"1\"}"

/* ---- tests -------------------------------------------------------------- */

START_TEST(test_start_streams_output_in_order_then_the_exit_code)
{
    fake_rt_t fr;
    forward_t *f = start(&fr);
    fr.exit_code = 3;
    int fd = stream_open(f, "/process.Process/Start",
                         "{\"process\":{\"cmd\":\"/bin/bash\",\"args\":[\"-l\",\"-c\",\"echo hello\"],\"envs\":{\"A\":\"1\"}},"
                         "\"stdin\":false}", STREAM_CT);
    char ev[4096];
    ck_assert_int_eq(stream_next(fd, ev, sizeof ev), 0);
    ck_assert_str_eq(ev, "{\"event\":{\"start\":{\"pid\":1000}}}");
    int term = term_of(&fr, 0);
    /* No /bin/bash in the fake: /bin/sh without bash's -l. */
    ck_assert_str_eq(fr.argv[0], "/bin/sh|-c|echo hello");
    ck_assert(!fr.tty[0]);
    /* stdin was not asked for: it is closed at once. */
    char b;
    for (int k = 0; k < 100 && recv(term, &b, 1, 0) < 0; k++)
        usleep(10000);
    ck_assert_int_eq(recv(term, &b, 1, 0), 0);
    term_write(term, 1, "hello\n");
    term_write(term, 2, "oops\n");
    term_write(term, 1, "bye\n");
    shutdown(term, SHUT_WR);
    ck_assert_int_eq(stream_next(fd, ev, sizeof ev), 0);
    ck_assert_str_eq(ev, "{\"event\":{\"data\":{\"stdout\":\"aGVsbG8K\"}}}");
    ck_assert_int_eq(stream_next(fd, ev, sizeof ev), 0);
    ck_assert_str_eq(ev, "{\"event\":{\"data\":{\"stderr\":\"b29wcwo=\"}}}");
    ck_assert_int_eq(stream_next(fd, ev, sizeof ev), 0);
    ck_assert_str_eq(ev, "{\"event\":{\"data\":{\"stdout\":\"YnllCg==\"}}}");
    ck_assert_int_eq(stream_next(fd, ev, sizeof ev), 0);
    ck_assert_str_eq(ev, "{\"event\":{\"end\":{\"exitCode\":3,\"exited\":true,\"status\":\"exit status 3\","
                         "\"error\":\"exit status 3\"}}}");
    ck_assert_int_eq(stream_next(fd, ev, sizeof ev), ENVD_FLAG_END_STREAM);
    ck_assert_str_eq(ev, "{}");
    size_t n;
    ck_assert_int_eq(read_frame(fd, ev, sizeof ev, &n), LOGFRAME_END);
    ck_assert_uint_eq(n, 0);
    close(fd);
    wait_closed(&fr, 0);
    finish(&fr, f);
}
END_TEST

START_TEST(test_start_then_send_input_then_close_stdin)
{
    fake_rt_t fr;
    forward_t *f = start(&fr);
    fr.has_bash = true;
    call_caller = "tok_abc123";
    int fd = stream_open(f, "/process.Process/Start",
                         "{\"process\":{\"cmd\":\"/bin/bash\",\"args\":[\"-l\",\"-c\",\"cat\"]},\"stdin\":true}",
                         STREAM_CT);
    call_caller = NULL;
    char ev[4096], body[4096];
    ck_assert_int_eq(stream_next(fd, ev, sizeof ev), 0);
    ck_assert_str_eq(ev, "{\"event\":{\"start\":{\"pid\":1000}}}");
    int term = term_of(&fr, 0);
    ck_assert_str_eq(fr.argv[0], "/bin/bash|-l|-c|cat");
    ck_assert_int_eq(unary(f, "/process.Process/SendInput",
                           "{\"process\":{\"pid\":1000},\"input\":{\"stdin\":\"aGkK\"}}", body, sizeof body), 200);
    ck_assert_str_eq(body, "{}");
    char in[8] = "";
    ck_assert(read_exact(term, in, 3));
    ck_assert(memcmp(in, "hi\n", 3) == 0);
    /* a pty input to a process without one is refused */
    ck_assert_int_eq(unary(f, "/process.Process/SendInput",
                           "{\"process\":{\"pid\":1000},\"input\":{\"pty\":\"aGkK\"}}", body, sizeof body), 400);
    ck_assert_int_eq(unary(f, "/process.Process/CloseStdin", "{\"process\":{\"pid\":1000}}", body, sizeof body), 200);
    ck_assert(!read_exact(term, in, 1)); /* EOF: stdin closed */
    ck_assert_int_eq(unary(f, "/process.Process/SendInput",
                           "{\"process\":{\"pid\":1000},\"input\":{\"stdin\":\"aGkK\"}}", body, sizeof body), 500);
    ck_assert(strstr(body, "\"code\":\"internal\""));
    term_write(term, 1, "hi\n");
    shutdown(term, SHUT_WR);
    ck_assert_int_eq(stream_next(fd, ev, sizeof ev), 0);
    ck_assert_str_eq(ev, "{\"event\":{\"data\":{\"stdout\":\"aGkK\"}}}");
    ck_assert_int_eq(stream_next(fd, ev, sizeof ev), 0);
    ck_assert_str_eq(ev, "{\"event\":{\"end\":{\"exited\":true,\"status\":\"exit status 0\"}}}");
    ck_assert_int_eq(stream_next(fd, ev, sizeof ev), ENVD_FLAG_END_STREAM);
    close(fd);
    wait_closed(&fr, 0);
    /* Its record went to the agent: the command as it ran, who started it. */
    for (int i = 0; i < 200 && !atomic_load(&fr.sessions); i++)
        usleep(10000);
    ck_assert_int_eq(atomic_load(&fr.sessions), 1);
    ck_assert_str_eq(fr.session, "/bin/bash|-l|-c|cat;0;0;tok_abc123");
    /* Once ended, the process is gone from the table. */
    ck_assert_int_eq(unary(f, "/process.Process/List", "{}", body, sizeof body), 200);
    ck_assert_str_eq(body, "{\"processes\":[]}");
    finish(&fr, f);
}
END_TEST

START_TEST(test_a_background_process_outlives_its_stream_until_send_signal)
{
    fake_rt_t fr;
    forward_t *f = start(&fr);
    fr.has_bash = true;
    int fd = stream_open(f, "/process.Process/Start",
                         "{\"process\":{\"cmd\":\"/bin/bash\",\"args\":[\"-l\",\"-c\",\"sleep 100\"],\"cwd\":\"/tmp\"},"
                         "\"tag\":\"bg\"}", STREAM_CT);
    char ev[4096], body[4096];
    ck_assert_int_eq(stream_next(fd, ev, sizeof ev), 0);
    int term = term_of(&fr, 0);
    close(fd);                    /* the client's stream ends: the process goes on */
    term_write(term, 1, "unseen\n");
    usleep(200000);
    ck_assert_int_eq(atomic_load(&fr.closed[0]), 0);
    ck_assert_int_eq(unary(f, "/process.Process/List", "{}", body, sizeof body), 200);
    ck_assert_str_eq(body, "{\"processes\":[{\"config\":{\"cmd\":\"/bin/bash\",\"args\":[\"-l\",\"-c\",\"sleep 100\"],"
                           "\"envs\":{},\"cwd\":\"/tmp\"},\"pid\":1000,\"tag\":\"bg\"}]}");
    /* Connect follows it again: the start event first, then new output. */
    int fd2 = stream_open(f, "/process.Process/Connect", "{\"process\":{\"tag\":\"bg\"}}", STREAM_CT);
    ck_assert_int_eq(stream_next(fd2, ev, sizeof ev), 0);
    ck_assert_str_eq(ev, "{\"event\":{\"start\":{\"pid\":1000}}}");
    term_write(term, 2, "again\n");
    ck_assert_int_eq(stream_next(fd2, ev, sizeof ev), 0);
    ck_assert_str_eq(ev, "{\"event\":{\"data\":{\"stderr\":\"YWdhaW4K\"}}}");
    ck_assert_int_eq(unary(f, "/process.Process/SendSignal", "{\"process\":{\"pid\":1000},\"signal\":\"SIGNAL_SIGKILL\"}",
                           body, sizeof body), 200);
    wait_closed(&fr, 0);
    ck_assert_int_eq(stream_next(fd2, ev, sizeof ev), 0);
    ck_assert_str_eq(ev, "{\"event\":{\"end\":{\"exitCode\":-1,\"status\":\"signal: killed\",\"error\":\"signal: killed\"}}}");
    ck_assert_int_eq(stream_next(fd2, ev, sizeof ev), ENVD_FLAG_END_STREAM);
    close(fd2);
    for (int i = 0; i < 200 && !atomic_load(&fr.sessions); i++)
        usleep(10000);
    ck_assert_int_eq(atomic_load(&fr.sessions), 1);
    pthread_mutex_lock(&fr.mu);
    ck_assert_str_eq(fr.session, "/bin/bash|-l|-c|sleep 100;-1;0;-");
    pthread_mutex_unlock(&fr.mu);
    /* gone now: kill and connect say not_found */
    ck_assert_int_eq(unary(f, "/process.Process/SendSignal", "{\"process\":{\"pid\":1000},\"signal\":\"SIGNAL_SIGKILL\"}",
                           body, sizeof body), 404);
    ck_assert_str_eq(body, "{\"code\":\"not_found\",\"message\":\"process with pid 1000 not found\"}");
    int fd3 = stream_open(f, "/process.Process/Connect", "{\"process\":{\"pid\":1000}}", STREAM_CT);
    ck_assert_int_eq(stream_next(fd3, ev, sizeof ev), ENVD_FLAG_END_STREAM);
    ck_assert_str_eq(ev, "{\"error\":{\"code\":\"not_found\",\"message\":\"process with pid 1000 not found\"}}");
    close(fd3);
    finish(&fr, f);
}
END_TEST

/* The Start's connect-timeout-ms is the process's lifetime: killed then,
 * its own stream ends deadline_exceeded (the SDKs' TimeoutError), while
 * another stream following it sees the end event. */
START_TEST(test_a_start_past_its_deadline_ends_deadline_exceeded)
{
    fake_rt_t fr;
    forward_t *f = start(&fr);
    fr.has_bash = true;
    int fd = stream_open(f, "/process.Process/Start",
                         "{\"process\":{\"cmd\":\"/bin/bash\",\"args\":[\"-l\",\"-c\",\"sleep 100\"]},"
                         "\"tag\":\"late\"}",
                         "{\"content-type\":\"application/connect+json\",\"connect-protocol-version\":\"1\","
                         "\"connect-timeout-ms\":\"700\"}");
    char ev[4096];
    ck_assert_int_eq(stream_next(fd, ev, sizeof ev), 0);
    ck_assert_str_eq(ev, "{\"event\":{\"start\":{\"pid\":1000}}}");
    int fd2 = stream_open(f, "/process.Process/Connect", "{\"process\":{\"tag\":\"late\"}}", STREAM_CT);
    ck_assert_int_eq(stream_next(fd2, ev, sizeof ev), 0);
    ck_assert_str_eq(ev, "{\"event\":{\"start\":{\"pid\":1000}}}");
    wait_closed(&fr, 0);
    ck_assert_int_eq(stream_next(fd, ev, sizeof ev), ENVD_FLAG_END_STREAM);
    ck_assert_msg(strstr(ev, "\"code\":\"deadline_exceeded\"") && !strstr(ev, "\"end\""), "%s", ev);
    close(fd);
    ck_assert_int_eq(stream_next(fd2, ev, sizeof ev), 0);
    ck_assert_str_eq(ev, "{\"event\":{\"end\":{\"exitCode\":-1,\"status\":\"signal: killed\","
                         "\"error\":\"signal: killed\"}}}");
    ck_assert_int_eq(stream_next(fd2, ev, sizeof ev), ENVD_FLAG_END_STREAM);
    close(fd2);
    finish(&fr, f);
}
END_TEST

START_TEST(test_a_runtime_with_terminal_shells_only_runs_commands_as_execs)
{
    fake_rt_t fr;
    forward_t *f = start(&fr);
    fr.terminals_only = true;
    fr.exit_code = 5;
    const char *cmd = "{\"process\":{\"cmd\":\"/bin/bash\",\"args\":[\"-l\",\"-c\",\"%s\"],\"envs\":{\"A\":\"1\"}},"
                      "\"stdin\":%s}";
    char msg[256], ev[4096], body[4096];
    snprintf(msg, sizeof msg, cmd, "echo hi", "false");
    int fd = stream_open(f, "/process.Process/Start", msg, STREAM_CT);
    ck_assert_int_eq(stream_next(fd, ev, sizeof ev), 0);
    ck_assert_str_eq(ev, "{\"event\":{\"start\":{\"pid\":1000}}}");
    ck_assert_int_eq(stream_next(fd, ev, sizeof ev), 0);
    ck_assert_str_eq(ev, "{\"event\":{\"data\":{\"stdout\":\"b3V0Cg==\"}}}");
    ck_assert_int_eq(stream_next(fd, ev, sizeof ev), 0);
    ck_assert_str_eq(ev, "{\"event\":{\"data\":{\"stderr\":\"ZXJyCg==\"}}}");
    ck_assert_int_eq(stream_next(fd, ev, sizeof ev), 0);
    ck_assert_str_eq(ev, "{\"event\":{\"end\":{\"exitCode\":5,\"exited\":true,\"status\":\"exit status 5\","
                         "\"error\":\"exit status 5\"}}}");
    ck_assert_int_eq(stream_next(fd, ev, sizeof ev), ENVD_FLAG_END_STREAM);
    close(fd);
    ck_assert_str_eq(fr.exec_argv, "/bin/sh|-c|echo hi");
    for (int i = 0; i < 200 && !atomic_load(&fr.sessions); i++)
        usleep(10000);
    pthread_mutex_lock(&fr.mu);
    ck_assert_str_eq(fr.session, "/bin/sh|-c|echo hi;5;0;-");
    pthread_mutex_unlock(&fr.mu);
    /* one that runs until SendSignal kills it */
    atomic_store(&fr.exec_block, 1);
    snprintf(msg, sizeof msg, cmd, "sleep 100", "false");
    fd = stream_open(f, "/process.Process/Start", msg, STREAM_CT);
    ck_assert_int_eq(stream_next(fd, ev, sizeof ev), 0);
    ck_assert_str_eq(ev, "{\"event\":{\"start\":{\"pid\":1001}}}");
    ck_assert_int_eq(stream_next(fd, ev, sizeof ev), 0);
    ck_assert_int_eq(stream_next(fd, ev, sizeof ev), 0);
    ck_assert_int_eq(unary(f, "/process.Process/SendInput", "{\"process\":{\"pid\":1001},\"input\":{\"stdin\":\"eAo=\"}}",
                           body, sizeof body), 500);
    ck_assert_int_eq(unary(f, "/process.Process/SendSignal", "{\"process\":{\"pid\":1001},\"signal\":\"SIGNAL_SIGKILL\"}",
                           body, sizeof body), 200);
    ck_assert_int_eq(stream_next(fd, ev, sizeof ev), 0);
    ck_assert_str_eq(ev, "{\"event\":{\"end\":{\"exitCode\":-1,\"status\":\"signal: killed\",\"error\":\"signal: killed\"}}}");
    ck_assert_int_eq(stream_next(fd, ev, sizeof ev), ENVD_FLAG_END_STREAM);
    close(fd);
    /* stdin without a terminal cannot be had there: unimplemented, with why */
    snprintf(msg, sizeof msg, cmd, "cat", "true");
    fd = stream_open(f, "/process.Process/Start", msg, STREAM_CT);
    ck_assert_int_eq(stream_next(fd, ev, sizeof ev), ENVD_FLAG_END_STREAM);
    ck_assert_str_eq(ev, "{\"error\":{\"code\":\"unimplemented\",\"message\":\"driver fake streams no stdin without a "
                         "terminal\"}}");
    close(fd);
    finish(&fr, f);
}
END_TEST

START_TEST(test_stopping_the_forwarder_ends_running_processes)
{
    fake_rt_t fr;
    forward_t *f = start(&fr);
    fr.has_bash = true;
    int fd = stream_open(f, "/process.Process/Start",
                         "{\"process\":{\"cmd\":\"/bin/bash\",\"args\":[\"-i\",\"-l\"]},\"pty\":{\"size\":{\"cols\":80,"
                         "\"rows\":24}}}", STREAM_CT);
    char ev[4096], body[4096];
    ck_assert_int_eq(stream_next(fd, ev, sizeof ev), 0);
    int term = term_of(&fr, 0);
    ck_assert(fr.tty[0]);
    send_all(term, "$ ", 2);
    ck_assert_int_eq(stream_next(fd, ev, sizeof ev), 0);
    ck_assert_str_eq(ev, "{\"event\":{\"data\":{\"pty\":\"JCA=\"}}}");
    ck_assert_int_eq(unary(f, "/process.Process/Update", "{\"process\":{\"pid\":1000},\"pty\":{\"size\":{\"cols\":100,"
                           "\"rows\":40}}}", body, sizeof body), 200);
    ck_assert_int_eq(unary(f, "/process.Process/SendInput", "{\"process\":{\"pid\":1000},\"input\":{\"pty\":\"bHMK\"}}",
                           body, sizeof body), 200);
    char in[4];
    ck_assert(read_exact(term, in, 3));
    ck_assert(memcmp(in, "ls\n", 3) == 0);
    close(fd);
    /* A second process the forwarder must end too, no stream following it. */
    int fd2 = stream_open(f, "/process.Process/Start", "{\"process\":{\"cmd\":\"/bin/sleep\",\"args\":[\"9\"]}}",
                          STREAM_CT);
    ck_assert_int_eq(stream_next(fd2, ev, sizeof ev), 0);
    close(fd2);
    term_of(&fr, 1);
    forward_stop(f);
    ck_assert_int_eq(atomic_load(&fr.closed[0]), 1);
    ck_assert_int_eq(atomic_load(&fr.closed[1]), 1);
    finish(&fr, f);
}
END_TEST

START_TEST(test_files_upload_multipart_then_download)
{
    fake_rt_t fr;
    forward_t *f = start(&fr);
    static const char mp[] = "--XyZ\r\n"
                             "Content-Disposition: form-data; name=\"file\"; filename=\"/tmp/a.txt\"\r\n"
                             "Content-Type: application/octet-stream\r\n\r\n"
                             "AAA\r\n"
                             "--XyZ\r\n"
                             "Content-Disposition: form-data; name=\"other\"\r\n\r\n"
                             "ignored\r\n"
                             "--XyZ\r\n"
                             "Content-Disposition: form-data; name=\"file\"; filename=\"rel/b.bin\"\r\n\r\n"
                             "\x00\x01\x02\xff\r\n"
                             "--XyZ--\r\n";
    int fd = call_open(f, "POST", "/files", "username=user",
                       "{\"content-type\":\"multipart/form-data; boundary=XyZ\"}", mp, sizeof mp - 1);
    char ct[128], body[4096];
    ck_assert_int_eq(read_answer(fd, ct, sizeof ct, body, sizeof body), 200);
    close(fd);
    ck_assert_str_eq(ct, "application/json");
    ck_assert_str_eq(body, "[{\"name\":\"a.txt\",\"type\":\"file\",\"path\":\"/tmp/a.txt\"},"
                           "{\"name\":\"b.bin\",\"type\":\"file\",\"path\":\"/rel/b.bin\"}]");
    ck_assert_int_eq(atomic_load(&fr.nputs), 2);
    ck_assert_str_eq(fr.put_path[0], "/tmp/a.txt");
    ck_assert_str_eq(fr.put_data[0], "AAA");
    ck_assert(fr.put_parents[0]);
    ck_assert_str_eq(fr.put_path[1], "/rel/b.bin");
    ck_assert(memcmp(fr.put_data[1], "\x00\x01\x02\xff", 4) == 0);
    /* the octet-stream form: the query's path */
    fd = call_open(f, "POST", "/files", "path=%2Ftmp%2Fs.txt", "{\"content-type\":\"application/octet-stream\"}",
                   "streamed", 8);
    ck_assert_int_eq(read_answer(fd, ct, sizeof ct, body, sizeof body), 200);
    close(fd);
    ck_assert_str_eq(fr.put_path[2], "/tmp/s.txt");
    ck_assert_str_eq(fr.put_data[2], "streamed");
    /* download */
    fd = call_open(f, "GET", "/files", "path=%2Ftmp%2Fa.txt&username=user", "{}", NULL, 0);
    ck_assert_int_eq(read_answer(fd, ct, sizeof ct, body, sizeof body), 200);
    close(fd);
    ck_assert_str_eq(ct, "application/octet-stream");
    ck_assert_str_eq(body, "hello file\n");
    fd = call_open(f, "GET", "/files", "path=%2Fmissing", "{}", NULL, 0);
    ck_assert_int_eq(read_answer(fd, ct, sizeof ct, body, sizeof body), 404);
    close(fd);
    ck_assert(strstr(body, "\"code\":404"));
    fd = call_open(f, "GET", "/files", "path=%2Ftmp", "{}", NULL, 0);
    ck_assert_int_eq(read_answer(fd, ct, sizeof ct, body, sizeof body), 400);
    close(fd);
    /* a malformed upload */
    fd = call_open(f, "POST", "/files", "", "{\"content-type\":\"multipart/form-data; boundary=XyZ\"}", "--XyZ\r\nA", 9);
    ck_assert_int_eq(read_answer(fd, ct, sizeof ct, body, sizeof body), 400);
    close(fd);
    finish(&fr, f);
}
END_TEST

START_TEST(test_health_filesystem_calls_and_unimplemented_ones)
{
    fake_rt_t fr;
    forward_t *f = start(&fr);
    char ct[128], body[4096], ev[4096];
    int fd = call_open(f, "GET", "/health", "", "{}", NULL, 0);
    ck_assert_int_eq(read_answer(fd, ct, sizeof ct, body, sizeof body), 204);
    close(fd);
    ck_assert_int_eq(unary(f, "/filesystem.Filesystem/Stat", "{\"path\":\"/tmp/a.txt\"}", body, sizeof body), 200);
    ck_assert_str_eq(body, "{\"entry\":{\"name\":\"a.txt\",\"type\":\"FILE_TYPE_FILE\",\"path\":\"/tmp/a.txt\","
                           "\"size\":\"11\",\"mode\":420,\"permissions\":\"-rw-r--r--\",\"owner\":\"root\",\"group\":"
                           "\"root\",\"modifiedTime\":\"2020-01-02T02:04:05.500Z\"}}");
    ck_assert_int_eq(unary(f, "/filesystem.Filesystem/Stat", "{\"path\":\"/nope\"}", body, sizeof body), 404);
    ck_assert(strstr(body, "\"code\":\"not_found\""));
    ck_assert_int_eq(unary(f, "/filesystem.Filesystem/MakeDir", "{\"path\":\"/tmp\"}", body, sizeof body), 409);
    ck_assert(strstr(body, "\"code\":\"already_exists\""));
    ck_assert_int_eq(unary(f, "/filesystem.Filesystem/Remove", "{\"path\":\"/tmp/x y\"}", body, sizeof body), 200);
    ck_assert_str_eq(fr.exec_argv, "rm|-rf|--|/tmp/x y");
    ck_assert_int_eq(unary(f, "/filesystem.Filesystem/Move", "{\"source\":\"/tmp/a.txt\",\"destination\":\"/tmp\"}",
                           body, sizeof body), 200);
    ck_assert_str_eq(fr.exec_argv, "mv|--|/tmp/a.txt|/tmp");
    ck_assert(strstr(body, "FILE_TYPE_DIRECTORY"));
    /* a client stream: unimplemented as a stream, not refused for its content type */
    fd = stream_open(f, "/process.Process/StreamInput", "{}", STREAM_CT);
    ck_assert_int_eq(stream_next(fd, ev, sizeof ev), ENVD_FLAG_END_STREAM);
    ck_assert_msg(strstr(ev, "\"code\":\"unimplemented\""), "%s", ev);
    close(fd);
    ck_assert_int_eq(unary(f, "/filesystem.Filesystem/CreateWatcher", "{\"path\":\"/tmp\"}", body, sizeof body), 501);
    fd = stream_open(f, "/filesystem.Filesystem/WatchDir", "{\"path\":\"/nope\"}", STREAM_CT);
    ck_assert_int_eq(stream_next(fd, ev, sizeof ev), ENVD_FLAG_END_STREAM);
    ck_assert(strstr(ev, "not_found"));
    close(fd);
    ck_assert_int_eq(unary(f, "/process.Process/SendSignal", "{\"process\":{\"pid\":7}}", body, sizeof body), 400);
    ck_assert_int_eq(unary(f, "/process.Process/List", "[1]", body, sizeof body), 400);
    fd = call_open(f, "GET", "/nothing", "", "{}", NULL, 0);
    ck_assert_int_eq(read_answer(fd, ct, sizeof ct, body, sizeof body), 404);
    close(fd);
    /* an unknown path or method with a body: still 404 and 405 */
    static char big[8192];
    memset(big, 'x', sizeof big);
    fd = call_open(f, "POST", "/nothing", "", "{}", big, sizeof big);
    ck_assert_int_eq(read_answer(fd, ct, sizeof ct, body, sizeof body), 404);
    close(fd);
    fd = call_open(f, "PUT", "/filesystem.Filesystem/Stat", "", "{}", big, sizeof big);
    ck_assert_int_eq(read_answer(fd, ct, sizeof ct, body, sizeof body), 405);
    close(fd);
    /* a NUL in a string is refused, not cut at */
    ck_assert_int_eq(unary(f, "/filesystem.Filesystem/Stat", "{\"path\":\"/tmp/a.txt\\u0000/x\"}", body,
                           sizeof body), 400);
    ck_assert_msg(strstr(body, "invalid_argument") && strstr(body, "path") && strstr(body, "NUL"), "%s", body);
    /* each call takes a message of its own size: Stat at most 64 KiB */
    static char msg[70 * 1024];
    int n = snprintf(msg, sizeof msg, "{\"path\":\"/tmp/a.txt\",\"x\":\"");
    memset(msg + n, 'a', sizeof msg - (size_t)n - 3);
    memcpy(msg + sizeof msg - 3, "\"}", 3);
    ck_assert_int_eq(unary(f, "/filesystem.Filesystem/Stat", msg, body, sizeof body), 429);
    ck_assert_msg(strstr(body, "resource_exhausted") && strstr(body, "65536"), "%s", body);
    finish(&fr, f);
}
END_TEST

START_TEST(test_envd_grant_binds_its_request_line)
{
    fake_rt_t fr;
    forward_t *f = start(&fr);
    /* A line signed for /health sent as another: refused before anything runs. */
    const char *line = "{\"op\":\"envd\",\"method\":\"GET\",\"path\":\"/health\",\"query\":\"\",\"headers\":{},\"body\":0,"
                       "\"max_bytes\":1}";
    const char *other = "{\"op\":\"envd\",\"method\":\"GET\",\"path\":\"/files\",\"query\":\"path=%2Fetc%2Fshadow\","
                        "\"headers\":{},\"body\":0,\"max_bytes\":1}";
    unsigned char key[GRANT_KEY_BYTES];
    grant_key_from_token(TOKEN, key);
    grant_t g = { .worker_id = "wrk_a", .sandbox_id = "sbx_b", .purpose = GRANT_ENVD,
                  .expires_unix = time(NULL) + 60 };
    grant_files_digest(line, strlen(line), g.files_digest);
    char text[GRANT_MAX], pre[4096], reply[512];
    ck_assert_int_eq(grant_sign(key, &g, text), 0);
    int len = snprintf(pre, sizeof pre, "%s %s\r\n%s\r\n", FORWARD_PROTOCOL, text, other);
    int fd = dial(f);
    send_all(fd, pre, (size_t)len);
    size_t n = 0;
    while (n + 1 < sizeof reply && read_exact(fd, reply + n, 1))
        n++;
    reply[n] = '\0';
    close(fd);
    ck_assert_str_eq(reply, "SANDBOX-FORWARD/1 403 forbidden the request does not match its grant\r\n");
    finish(&fr, f);
}
END_TEST

/* Appends a ustar entry (name at most 99 bytes) with size bytes of c. */
static void tar_add(char *buf, size_t *len, const char *name, char type, const char *link, int64_t size, unsigned mode)
{
    unsigned char *h = (unsigned char *)buf + *len;
    memset(h, 0, TARSTREAM_BLOCK);
    memcpy(h, name, strlen(name));
    snprintf((char *)h + 100, 8, "%07o", mode);
    snprintf((char *)h + 108, 8, "%07o", 0);
    snprintf((char *)h + 116, 8, "%07o", 0);
    snprintf((char *)h + 124, 12, "%011llo", (unsigned long long)size);
    snprintf((char *)h + 136, 12, "%011o", 1577934245); /* 2020-01-02T03:04:05Z */
    h[156] = (unsigned char)type;
    if (link)
        memcpy(h + 157, link, strlen(link));
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    tarstream_checksum(h);
    *len += TARSTREAM_BLOCK;
    memset(buf + *len, 'x', (size_t)size);
    *len += (size_t)size + tarstream_padding(size);
}

START_TEST(test_list_dir_to_its_depth_and_make_dir)
{
    fake_rt_t fr;
    forward_t *f = start(&fr);
    static char tree[16 * 1024];
    size_t n = 0;
    tar_add(tree, &n, "tmp/", '5', NULL, 0, 01777);
    tar_add(tree, &n, "tmp/a.txt", '0', NULL, 11, 0644);
    tar_add(tree, &n, "tmp/d/", '5', NULL, 0, 0700);
    tar_add(tree, &n, "tmp/d/e.txt", '0', NULL, 600, 0600);
    tar_add(tree, &n, "tmp/d/f/", '5', NULL, 0, 0755);
    tar_add(tree, &n, "tmp/d/f/g", '0', NULL, 1, 0644);
    tar_add(tree, &n, "tmp/l", '2', "/etc/hosts", 0, 0777);
    memset(tree + n, 0, 2 * TARSTREAM_BLOCK);
    n += 2 * TARSTREAM_BLOCK;
    fr.tree = tree;
    fr.tree_len = n;
    char body[8192];
    ck_assert_int_eq(unary(f, "/filesystem.Filesystem/ListDir", "{\"path\":\"/tmp\"}", body, sizeof body), 200);
    json_object *o = unit_json(body), *e = jsonx_get_arr(o, "entries");
    ck_assert_uint_eq(json_object_array_length(e), 3);
    ck_assert_str_eq(jsonx_get_str(json_object_array_get_idx(e, 0), "path"), "/tmp/a.txt");
    ck_assert_str_eq(jsonx_get_str(json_object_array_get_idx(e, 0), "size"), "11");
    ck_assert_str_eq(jsonx_get_str(json_object_array_get_idx(e, 1), "type"), "FILE_TYPE_DIRECTORY");
    ck_assert_str_eq(jsonx_get_str(json_object_array_get_idx(e, 1), "permissions"), "drwx------");
    ck_assert_str_eq(jsonx_get_str(json_object_array_get_idx(e, 2), "type"), "FILE_TYPE_SYMLINK");
    ck_assert_str_eq(jsonx_get_str(json_object_array_get_idx(e, 2), "symlinkTarget"), "/etc/hosts");
    ck_assert_str_eq(jsonx_get_str(json_object_array_get_idx(e, 2), "modifiedTime"), "2020-01-02T03:04:05Z");
    json_object_put(o);
    ck_assert_int_eq(unary(f, "/filesystem.Filesystem/ListDir", "{\"path\":\"/tmp\",\"depth\":2}", body, sizeof body),
                     200);
    o = unit_json(body);
    e = jsonx_get_arr(o, "entries");
    ck_assert_uint_eq(json_object_array_length(e), 5);
    ck_assert_str_eq(jsonx_get_str(json_object_array_get_idx(e, 2), "path"), "/tmp/d/e.txt");
    ck_assert_str_eq(jsonx_get_str(json_object_array_get_idx(e, 2), "name"), "e.txt");
    json_object_put(o);
    ck_assert_int_eq(unary(f, "/filesystem.Filesystem/ListDir", "{\"path\":\"/tmp/a.txt\"}", body, sizeof body), 400);
    ck_assert_int_eq(unary(f, "/filesystem.Filesystem/ListDir", "{\"path\":\"/none\"}", body, sizeof body), 404);
    /* MakeDir: the missing directories are unpacked into /tmp, the deepest one that exists. */
    ck_assert_int_eq(unary(f, "/filesystem.Filesystem/MakeDir", "{\"path\":\"tmp/new/sub\"}", body, sizeof body), 200);
    ck_assert_int_eq(atomic_load(&fr.nmade), 2);
    ck_assert_str_eq(fr.made[0], "/tmp/new");
    ck_assert_str_eq(fr.made[1], "/tmp/new/sub");
    o = unit_json(body);
    ck_assert_str_eq(jsonx_get_str(jsonx_get_obj(o, "entry"), "path"), "/tmp/new/sub");
    ck_assert_str_eq(jsonx_get_str(jsonx_get_obj(o, "entry"), "type"), "FILE_TYPE_DIRECTORY");
    json_object_put(o);
    ck_assert_int_eq(unary(f, "/filesystem.Filesystem/MakeDir", "{\"path\":\"/tmp/new\"}", body, sizeof body), 409);
    ck_assert_int_eq(unary(f, "/filesystem.Filesystem/MakeDir", "{\"path\":\"/tmp/a.txt/x\"}", body, sizeof body), 400);
    finish(&fr, f);
}
END_TEST

START_TEST(test_a_stream_that_falls_behind_is_cut_and_the_process_goes_on)
{
    fake_rt_t fr;
    forward_t *f = start(&fr);
    fr.has_bash = true;
    dial_rcvbuf = 4096;
    int fd = stream_open(f, "/process.Process/Start",
                         "{\"process\":{\"cmd\":\"/bin/bash\",\"args\":[\"-l\",\"-c\",\"yes\"]}}", STREAM_CT);
    dial_rcvbuf = 0;
    char ev[70000], body[4096];
    ck_assert_int_eq(stream_next(fd, ev, sizeof ev), 0);
    int term = term_of(&fr, 0);
    /* 9 MB of output the client does not read: more than the sockets hold */
    static char chunk[60000];
    memset(chunk, 'y', sizeof chunk);
    unsigned char h[RUNTIME_SHELL_MUX_HEADER] = { 1, 0, 0, 0, 0, 0, (unsigned char)(sizeof chunk >> 8),
                                                  (unsigned char)(sizeof chunk & 0xff) };
    for (int i = 0; i < 150; i++) {
        size_t off = 0;
        while (off < sizeof h) {
            ssize_t w = send(term, h + off, sizeof h - off, MSG_NOSIGNAL);
            if (w > 0)
                off += (size_t)w;
            else
                usleep(1000);
        }
        for (off = 0; off < sizeof chunk;) {
            ssize_t w = send(term, chunk + off, sizeof chunk - off, MSG_NOSIGNAL);
            if (w > 0)
                off += (size_t)w;
            else
                usleep(1000);
        }
    }
    /* the client reads now: what was queued, then the cut */
    int flags, datas = 0;
    while ((flags = stream_next(fd, ev, sizeof ev)) == 0) {
        ck_assert(strstr(ev, "\"stdout\""));
        datas++;
    }
    ck_assert_int_eq(flags, ENVD_FLAG_END_STREAM);
    ck_assert_msg(strstr(ev, "resource_exhausted"), "%s", ev);
    ck_assert_int_lt(datas, 150 * 2);
    close(fd);
    ck_assert_int_eq(atomic_load(&fr.closed[0]), 0);
    ck_assert_int_eq(unary(f, "/process.Process/List", "{}", body, sizeof body), 200);
    ck_assert(strstr(body, "\"pid\":1000"));
    finish(&fr, f);
}
END_TEST

/* A tree for /tmp holding the given files (name, size pairs, NULL-ended). */
static size_t tree_of(char *buf, const char *const *names, const int64_t *sizes)
{
    size_t n = 0;
    tar_add(buf, &n, "tmp/", '5', NULL, 0, 01777);
    for (size_t i = 0; names[i]; i++)
        tar_add(buf, &n, names[i], '0', NULL, sizes[i], 0644);
    memset(buf + n, 0, 2 * TARSTREAM_BLOCK);
    return n + 2 * TARSTREAM_BLOCK;
}

START_TEST(test_watch_dir_reports_what_changed_between_walks)
{
    fake_rt_t fr;
    forward_t *f = start(&fr);
    static char a[8192], b[8192], c[8192];
    size_t an = tree_of(a, (const char *const[]){ "tmp/a.txt", NULL }, (const int64_t[]){ 1 });
    size_t bn = tree_of(b, (const char *const[]){ "tmp/a.txt", "tmp/b.txt", NULL }, (const int64_t[]){ 2, 1 });
    size_t cn = tree_of(c, (const char *const[]){ "tmp/b.txt", NULL }, (const int64_t[]){ 1 });
    fr.tree = a;
    fr.tree_len = an;
    char ev[4096];
    int fd = stream_open(f, "/filesystem.Filesystem/WatchDir", "{\"path\":\"/tmp\",\"includeEntry\":true}", STREAM_CT);
    ck_assert_int_eq(stream_next(fd, ev, sizeof ev), 0);
    ck_assert_str_eq(ev, "{\"start\":{}}");
    pthread_mutex_lock(&fr.mu);
    fr.tree = b;
    fr.tree_len = bn;
    pthread_mutex_unlock(&fr.mu);
    ck_assert_int_eq(stream_next(fd, ev, sizeof ev), 0);
    ck_assert_msg(strstr(ev, "{\"filesystem\":{\"name\":\"a.txt\",\"type\":\"EVENT_TYPE_WRITE\",\"entry\":{\"name\":"
                             "\"a.txt\",\"type\":\"FILE_TYPE_FILE\",\"path\":\"/tmp/a.txt\",\"size\":\"2\"") == ev, "%s", ev);
    ck_assert_int_eq(stream_next(fd, ev, sizeof ev), 0);
    ck_assert_msg(strstr(ev, "{\"filesystem\":{\"name\":\"b.txt\",\"type\":\"EVENT_TYPE_CREATE\"") == ev, "%s", ev);
    pthread_mutex_lock(&fr.mu);
    fr.tree = c;
    fr.tree_len = cn;
    pthread_mutex_unlock(&fr.mu);
    ck_assert_int_eq(stream_next(fd, ev, sizeof ev), 0);
    ck_assert_str_eq(ev, "{\"filesystem\":{\"name\":\"a.txt\",\"type\":\"EVENT_TYPE_REMOVE\"}}");
    close(fd);                    /* the watch ends with its stream */
    finish(&fr, f);
}
END_TEST

/* Appends a GNU long name ('L') or long link ('K') for the next entry. */
static void tar_long(char *buf, size_t *len, char type, const char *s)
{
    size_t at = *len + TARSTREAM_BLOCK;
    tar_add(buf, len, "././@LongLink", type, NULL, (int64_t)strlen(s) + 1, 0644);
    memcpy(buf + at, s, strlen(s) + 1);
}

START_TEST(test_a_watch_event_too_large_for_a_frame_goes_without_its_entry)
{
    fake_rt_t fr;
    forward_t *f = start(&fr);
    static char a[8192], b[32768], name[4100], link[4001];
    size_t an = tree_of(a, (const char *const[]){ "tmp/a.txt", NULL }, (const int64_t[]){ 1 });
    size_t bn = 0;
    tar_add(b, &bn, "tmp/", '5', NULL, 0, 01777);
    tar_add(b, &bn, "tmp/a.txt", '0', NULL, 1, 0644);
    /* a symlink whose name and target are 4000 control bytes: 6 bytes each as JSON */
    memcpy(name, "tmp/", 4);
    memset(name + 4, '\x01', 4000);
    memset(link, '\x01', 4000);
    tar_long(b, &bn, 'L', name);
    tar_long(b, &bn, 'K', link);
    tar_add(b, &bn, "long", '2', NULL, 0, 0777);
    tar_add(b, &bn, "tmp/c\xff", '0', NULL, 1, 0644);   /* not UTF-8: sanitized as entry names are */
    memset(b + bn, 0, 2 * TARSTREAM_BLOCK);
    bn += 2 * TARSTREAM_BLOCK;
    fr.tree = a;
    fr.tree_len = an;
    static char ev[70000];
    int fd = stream_open(f, "/filesystem.Filesystem/WatchDir", "{\"path\":\"/tmp\",\"includeEntry\":true}", STREAM_CT);
    ck_assert_int_eq(stream_next(fd, ev, sizeof ev), 0);
    pthread_mutex_lock(&fr.mu);
    fr.tree = b;
    fr.tree_len = bn;
    pthread_mutex_unlock(&fr.mu);
    ck_assert_int_eq(stream_next(fd, ev, sizeof ev), 0);
    ck_assert_msg(strstr(ev, "{\"filesystem\":{\"name\":\"\\u0001\\u0001") == ev, "%.200s", ev);
    ck_assert(strstr(ev, "EVENT_TYPE_CREATE"));
    ck_assert_ptr_null(strstr(ev, "\"entry\""));
    ck_assert_uint_gt(strlen(ev), 24000);
    ck_assert_int_eq(stream_next(fd, ev, sizeof ev), 0);
    ck_assert_msg(strstr(ev, "{\"filesystem\":{\"name\":\"c\xef\xbf\xbd\",\"type\":\"EVENT_TYPE_CREATE\",\"entry\":") == ev,
                  "%s", ev);
    close(fd);
    finish(&fr, f);
}
END_TEST

START_TEST(test_a_walk_is_bounded_by_bytes_answer_size_deadline_and_the_client)
{
    fake_rt_t fr;
    forward_t *f = start(&fr);
    static char tree[16 * 1024];
    size_t n = tree_of(tree, (const char *const[]){ "tmp/a.txt", "tmp/b.txt", NULL }, (const int64_t[]){ 3000, 3000 });
    fr.tree = tree;
    fr.tree_len = n;
    char body[8192], ct[128], ev[4096];
    /* the archive's bytes: at most the sandbox's filesystem size */
    fr.fs_bytes = 4096;
    ck_assert_int_eq(unary(f, "/filesystem.Filesystem/ListDir", "{\"path\":\"/tmp\"}", body, sizeof body), 429);
    ck_assert_msg(strstr(body, "resource_exhausted") && strstr(body, "4096 bytes") &&
                  strstr(body, "smaller directory"), "%s", body);
    int fd = stream_open(f, "/filesystem.Filesystem/WatchDir", "{\"path\":\"/tmp\"}", STREAM_CT);
    ck_assert_int_eq(stream_next(fd, ev, sizeof ev), ENVD_FLAG_END_STREAM);
    ck_assert_msg(strstr(ev, "resource_exhausted") && strstr(ev, "4096 bytes"), "%s", ev);
    close(fd);
    fr.fs_bytes = 0;
    ck_assert_int_eq(unary(f, "/filesystem.Filesystem/ListDir", "{\"path\":\"/tmp\"}", body, sizeof body), 200);
    /* the answer's JSON: 9000 symlinks with long names and targets are more than 16 MiB escaped */
    size_t cap = 9003 * TARSTREAM_BLOCK;         /* the directory, 9000 links, the end */
    char *many = malloc(cap);
    ck_assert_ptr_nonnull(many);
    n = 0;
    tar_add(many, &n, "tmp/", '5', NULL, 0, 01777);
    char name[100], link[100];
    memset(link, '\x01', 99);
    link[99] = '\0';
    for (int i = 0; i < 9000; i++) {
        char idx[8];
        snprintf(idx, sizeof idx, "%05d", i);
        memset(name, '\x01', 99);
        name[99] = '\0';
        memcpy(name, "tmp/", 4);
        memcpy(name + 4, idx, 5);
        tar_add(many, &n, name, '2', link, 0, 0777);
    }
    memset(many + n, 0, 2 * TARSTREAM_BLOCK);
    n += 2 * TARSTREAM_BLOCK;
    ck_assert_uint_eq(n, cap);
    pthread_mutex_lock(&fr.mu);
    fr.tree = many;
    fr.tree_len = n;
    pthread_mutex_unlock(&fr.mu);
    ck_assert_int_eq(unary(f, "/filesystem.Filesystem/ListDir", "{\"path\":\"/tmp\"}", body, sizeof body), 429);
    ck_assert_msg(strstr(body, "resource_exhausted") && strstr(body, "16777216 bytes of JSON"), "%s", body);
    pthread_mutex_lock(&fr.mu);
    fr.tree = NULL;
    fr.tree_len = 0;
    pthread_mutex_unlock(&fr.mu);
    free(many);
    /* a slow, huge archive: the call's deadline ends the walk */
    atomic_store(&fr.endless, 1);
    static const char msg[] = "{\"path\":\"/tmp\"}";
    fd = call_open(f, "POST", "/filesystem.Filesystem/ListDir", "",
                   "{\"content-type\":\"application/json\",\"connect-timeout-ms\":\"300\"}", msg, sizeof msg - 1);
    ck_assert_int_eq(read_answer(fd, ct, sizeof ct, body, sizeof body), 504);
    close(fd);
    ck_assert_msg(strstr(body, "deadline_exceeded"), "%s", body);
    /* the answer goes out first; the archive's producer (another thread)
     * sees the cancel a moment later (a fresh-clone run read 0 at once) */
    for (int i = 0; i < 300 && !atomic_load(&fr.endless_stopped); i++)
        usleep(10000);
    ck_assert_int_eq(atomic_load(&fr.endless_stopped), 1);
    /* and the controller's leaving ends it */
    atomic_store(&fr.endless_stopped, 0);
    fd = call_open(f, "POST", "/filesystem.Filesystem/ListDir", "", "{\"content-type\":\"application/json\"}", msg,
                   sizeof msg - 1);
    usleep(100000);
    close(fd);
    for (int i = 0; i < 300 && !atomic_load(&fr.endless_stopped); i++)
        usleep(10000);
    ck_assert_int_eq(atomic_load(&fr.endless_stopped), 1);
    finish(&fr, f);
}
END_TEST

START_TEST(test_an_upload_is_bounded_by_the_workers_files_max_bytes)
{
    fake_rt_t fr;
    start_files_max = 4;
    forward_t *f = start(&fr);
    start_files_max = 0;
    char ct[128], body[4096];
    int fd = call_open(f, "POST", "/files", "path=%2Ftmp%2Fs.txt", "{\"content-type\":\"application/octet-stream\"}",
                       "streamed", 8);
    ck_assert_int_eq(read_answer(fd, ct, sizeof ct, body, sizeof body), 413);
    close(fd);
    ck_assert_msg(strstr(body, "\"code\":413") && strstr(body, "4 bytes"), "%s", body);
    ck_assert_int_eq(atomic_load(&fr.nputs), 0);
    fd = call_open(f, "POST", "/files", "path=%2Ftmp%2Fs.txt", "{\"content-type\":\"application/octet-stream\"}",
                   "four", 4);
    ck_assert_int_eq(read_answer(fd, ct, sizeof ct, body, sizeof body), 200);
    close(fd);
    ck_assert_str_eq(fr.put_data[0], "four");
    finish(&fr, f);
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("envd");
    TCase *tc = unit_tcase_add(s, "process", UNIT_TESTS(test_start_streams_output_in_order_then_the_exit_code,
                                                        test_start_then_send_input_then_close_stdin,
                                                        test_a_background_process_outlives_its_stream_until_send_signal,
                                                        test_a_start_past_its_deadline_ends_deadline_exceeded,
                                                        test_a_runtime_with_terminal_shells_only_runs_commands_as_execs,
                                                        test_stopping_the_forwarder_ends_running_processes,
                                                        test_a_stream_that_falls_behind_is_cut_and_the_process_goes_on, ));
    tcase_set_timeout(tc, 30);
    tc = unit_tcase_add(s, "files", UNIT_TESTS(test_files_upload_multipart_then_download,
                                               test_health_filesystem_calls_and_unimplemented_ones,
                                               test_list_dir_to_its_depth_and_make_dir,
                                               test_watch_dir_reports_what_changed_between_walks,
                                               test_envd_grant_binds_its_request_line,
                                               test_a_walk_is_bounded_by_bytes_answer_size_deadline_and_the_client,
                                               test_a_watch_event_too_large_for_a_frame_goes_without_its_entry,
                                               test_an_upload_is_bounded_by_the_workers_files_max_bytes, ));
    tcase_set_timeout(tc, 30);
    return s;
}
