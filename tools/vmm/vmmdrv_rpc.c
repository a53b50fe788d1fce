/* sandbox-vmm's control channel (newline JSON-RPC 2.0 on stdin/stdout, one
 * thread per request, every answer written whole under one lock) and its
 * stream socket (a connection says its token, then is the call's stream). */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "limits.h"
#include "shellframe.h"
#include "vmmdrv.h"

#define STREAM_WAIT_MS 10000
#define TOKENS_MAX     256
#define THREADS_MAX    256

json_object *vmmdrv_m_hello(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call);

static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t tok_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t tok_cv = PTHREAD_COND_INITIALIZER;
static struct { char tok[33]; int fd; long long at; } pending[TOKENS_MAX];
static struct { char tok[33]; volatile int *flag; } running[TOKENS_MAX];
static int threads;

json_object *vmmdrv_fail(vmmdrv_call_t *call, const char *code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(call->msg, sizeof(call->msg), fmt, ap);
    va_end(ap);
    call->code = code;
    return NULL;
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int tok_ok(const char *t)
{
    size_t n = strlen(t);
    if (n != 32)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((t[i] >= '0' && t[i] <= '9') || (t[i] >= 'a' && t[i] <= 'f')))
            return 0;
    return 1;
}

/* ---- streams ---- */

static void *stream_hello(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char tok[34];
    size_t n = 0;
    long long deadline = now_ms() + STREAM_WAIT_MS;
    while (n < sizeof(tok) - 1) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        long long left = deadline - now_ms();
        if (left <= 0 || poll(&pf, 1, (int)left) <= 0 || read(fd, tok + n, 1) != 1)
            break;
        if (tok[n] == '\n')
            break;
        n++;
    }
    tok[n] = '\0';
    if (!tok_ok(tok)) {
        close(fd);
        return NULL;
    }
    pthread_mutex_lock(&tok_mu);
    int slot = -1;
    for (int i = 0; i < TOKENS_MAX; i++) {
        if (pending[i].fd > 0 && now_ms() - pending[i].at > STREAM_WAIT_MS) { /* nobody came for it */
            close(pending[i].fd);
            pending[i].fd = 0;
        }
        if (pending[i].fd == 0 && slot < 0)
            slot = i;
    }
    if (slot >= 0) {
        snprintf(pending[slot].tok, sizeof(pending[slot].tok), "%s", tok);
        pending[slot].fd = fd;
        pending[slot].at = now_ms();
        pthread_cond_broadcast(&tok_cv);
    } else {
        close(fd);
    }
    pthread_mutex_unlock(&tok_mu);
    return NULL;
}

static void *stream_server(void *arg)
{
    int srv = (int)(intptr_t)arg;
    for (;;) {
        int fd = accept4(srv, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE) {
                struct timespec ts = {0, 50 * 1000 * 1000};
                nanosleep(&ts, NULL);
                continue;
            }
            return NULL;
        }
        pthread_t t;
        if (pthread_create(&t, NULL, stream_hello, (void *)(intptr_t)fd) != 0)
            close(fd);
        else
            pthread_detach(t);
    }
}

int vmmdrv_stream_take(const char *tok, vmmdrv_call_t *call)
{
    if (tok == NULL || !tok_ok(tok)) {
        vmmdrv_fail(call, "invalid_argument", "bad stream token");
        return -1;
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += STREAM_WAIT_MS / 1000;
    pthread_mutex_lock(&tok_mu);
    for (;;) {
        for (int i = 0; i < TOKENS_MAX; i++) {
            if (pending[i].fd > 0 && strcmp(pending[i].tok, tok) == 0) {
                int fd = pending[i].fd;
                pending[i].fd = 0;
                pthread_mutex_unlock(&tok_mu);
                return fd;
            }
        }
        if (pthread_cond_timedwait(&tok_cv, &tok_mu, &until) == ETIMEDOUT)
            break;
    }
    pthread_mutex_unlock(&tok_mu);
    vmmdrv_fail(call, "invalid_argument", "the stream never connected");
    return -1;
}

int vmmdrv_write_all(int fd, const void *p, size_t n)
{
    const unsigned char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

static int read_all(int fd, void *p, size_t n)
{
    unsigned char *c = p;
    while (n > 0) {
        ssize_t r = read(fd, c, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r == 0 ? 0 : -1;
        c += r;
        n -= (size_t)r;
    }
    return 1;
}

int vmmdrv_frame_send(int fd, int type, const void *p, size_t n)
{
    const unsigned char *c = p;
    do {
        size_t k = n > SHELLFRAME_PAYLOAD_MAX ? SHELLFRAME_PAYLOAD_MAX : n;
        unsigned char h[5] = {(unsigned char)type, (unsigned char)(k >> 24), (unsigned char)(k >> 16),
                              (unsigned char)(k >> 8), (unsigned char)k};
        if (vmmdrv_write_all(fd, h, 5) != 0 || (k > 0 && vmmdrv_write_all(fd, c, k) != 0))
            return -1;
        c += k;
        n -= k;
    } while (n > 0);
    return 0;
}

int vmmdrv_frame_recv(int fd, int *type, unsigned char *buf, size_t *n)
{
    unsigned char h[5];
    int r = read_all(fd, h, 5);
    if (r <= 0)
        return r;
    uint32_t len = (uint32_t)h[1] << 24 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 8 | h[4];
    if (len > SHELLFRAME_PAYLOAD_MAX || h[0] < 1 || h[0] > 5)
        return -1;
    if (len > 0 && read_all(fd, buf, len) != 1)
        return -1;
    *type = h[0];
    *n = len;
    return 1;
}

void vmmdrv_exec_register(const char *tok, volatile int *flag)
{
    pthread_mutex_lock(&tok_mu);
    for (int i = 0; i < TOKENS_MAX; i++) {
        if (running[i].flag == NULL) {
            snprintf(running[i].tok, sizeof(running[i].tok), "%s", tok);
            running[i].flag = flag;
            break;
        }
    }
    pthread_mutex_unlock(&tok_mu);
}

void vmmdrv_exec_unregister(const char *tok)
{
    pthread_mutex_lock(&tok_mu);
    for (int i = 0; i < TOKENS_MAX; i++)
        if (running[i].flag != NULL && strcmp(running[i].tok, tok) == 0)
            running[i].flag = NULL;
    pthread_mutex_unlock(&tok_mu);
}

int vmmdrv_exec_cancel(const char *tok)
{
    int found = 0;
    pthread_mutex_lock(&tok_mu);
    for (int i = 0; tok != NULL && i < TOKENS_MAX; i++) {
        if (running[i].flag != NULL && strcmp(running[i].tok, tok) == 0) {
            *running[i].flag = 1;
            found = 1;
        }
    }
    pthread_mutex_unlock(&tok_mu);
    return found;
}

/* ---- requests ---- */

static json_object *m_cancel(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call)
{
    (void)d;
    (void)call;
    json_object *v;
    vmmdrv_exec_cancel(json_object_object_get_ex(p, "stream", &v) ? json_object_get_string(v) : NULL);
    return json_object_new_object();
}

static json_object *m_shutdown(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call)
{
    (void)d;
    (void)p;
    (void)call;
    return json_object_new_object();
}

typedef json_object *(*method_fn)(vmmdrv_t *, json_object *, vmmdrv_call_t *);
static const struct { const char *name; method_fn fn; } methods[] = {
    {"hello", vmmdrv_m_hello},         {"create", vmmdrv_m_create},       {"remove", vmmdrv_m_remove},
    {"inspect", vmmdrv_m_inspect},     {"inventory", vmmdrv_m_inventory}, {"images", vmmdrv_m_images},
    {"exec", vmmdrv_m_exec},           {"cancel", m_cancel},              {"files_put", vmmdrv_m_files_put},
    {"files_get", vmmdrv_m_files_get}, {"dial", vmmdrv_m_dial},           {"shell_open", vmmdrv_m_shell_open},
    {"shutdown", m_shutdown},          {"pause", vmmdrv_m_pause},         {"resume", vmmdrv_m_resume},
    {"snapshot", vmmdrv_m_snapshot},   {"snapshots", vmmdrv_m_snapshots},
    {"snapshot_remove", vmmdrv_m_snapshot_remove}, {"snapshot_export", vmmdrv_m_snapshot_export},
    {"snapshot_import", vmmdrv_m_snapshot_import},
};

static void respond(json_object *id, json_object *result, const vmmdrv_call_t *call)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "jsonrpc", json_object_new_string("2.0"));
    json_object_object_add(o, "id", json_object_get(id));
    if (result != NULL) {
        json_object_object_add(o, "result", result);
    } else {
        json_object *e = json_object_new_object(), *data = json_object_new_object();
        json_object_object_add(e, "code", json_object_new_int(-32000));
        json_object_object_add(e, "message", json_object_new_string(call->msg[0] ? call->msg : "failed"));
        json_object_object_add(data, "code", json_object_new_string(call->code ? call->code : "runtime_error"));
        json_object_object_add(e, "data", data);
        json_object_object_add(o, "error", e);
    }
    const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
    pthread_mutex_lock(&out_mu);
    fputs(s, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    pthread_mutex_unlock(&out_mu);
    json_object_put(o);
}

typedef struct {
    vmmdrv_t *d;
    json_object *req;
} job_t;

static void *handle(void *arg)
{
    job_t *j = arg;
    json_object *id = NULL, *m = NULL, *p = NULL;
    json_object_object_get_ex(j->req, "id", &id);
    json_object_object_get_ex(j->req, "method", &m);
    if (!json_object_object_get_ex(j->req, "params", &p) || !json_object_is_type(p, json_type_object))
        p = NULL;
    json_object *params = p ? json_object_get(p) : json_object_new_object();
    vmmdrv_call_t call = {0};
    json_object *result = NULL;
    const char *name = m ? json_object_get_string(m) : "";
    size_t i = 0;
    for (; i < sizeof(methods) / sizeof(methods[0]); i++)
        if (strcmp(methods[i].name, name) == 0)
            break;
    if (i == sizeof(methods) / sizeof(methods[0]))
        vmmdrv_fail(&call, "invalid_argument", "unknown method %.64s", name);
    else
        result = methods[i].fn(j->d, params, &call);
    if (id != NULL)
        respond(id, result, &call);
    else
        json_object_put(result);
    if (call.after)
        call.after(call.after_arg);
    json_object_put(params);
    if (strcmp(name, "shutdown") == 0)
        _exit(0);
    json_object_put(j->req);
    free(j);
    pthread_mutex_lock(&out_mu);
    threads--;
    pthread_mutex_unlock(&out_mu);
    return NULL;
}

static int stream_listen(vmmdrv_t *d)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if ((size_t)snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/streams.sock", d->rundir) >= sizeof(sa.sun_path))
        return -1;
    unlink(sa.sun_path);
    int srv = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (srv < 0 || bind(srv, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(srv, 64) != 0) {
        if (srv >= 0)
            close(srv);
        return -1;
    }
    return srv;
}

static void dispatch_line(vmmdrv_t *d, const char *line, size_t n)
{
    json_object *req = json_tokener_parse(line);
    if (req == NULL || !json_object_is_type(req, json_type_object) || n == 0) {
        fprintf(stderr, "sandbox-vmm: a request that is not a JSON object is ignored\n");
        json_object_put(req);
        return;
    }
    job_t *j = malloc(sizeof(*j));
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_mutex_lock(&out_mu);
    int busy = threads >= THREADS_MAX;
    if (!busy)
        threads++;
    pthread_mutex_unlock(&out_mu);
    if (j != NULL && !busy) {
        j->d = d;
        j->req = req;
        if (pthread_create(&t, &attr, handle, j) == 0) {
            pthread_attr_destroy(&attr);
            return;
        }
        pthread_mutex_lock(&out_mu);
        threads--;
        pthread_mutex_unlock(&out_mu);
    }
    pthread_attr_destroy(&attr);
    vmmdrv_call_t call = {0};
    vmmdrv_fail(&call, "unavailable", "sandbox-vmm is busy (%d calls in flight)", THREADS_MAX);
    json_object *id;
    if (json_object_object_get_ex(req, "id", &id))
        respond(id, NULL, &call);
    json_object_put(req);
    free(j);
}

int vmmdrv_serve(vmmdrv_t *d)
{
    int srv = stream_listen(d);
    if (srv < 0) {
        fprintf(stderr, "sandbox-vmm: cannot listen on %s/streams.sock: %s\n", d->rundir, strerror(errno));
        return 1;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, stream_server, (void *)(intptr_t)srv) != 0)
        return 1;
    pthread_detach(t);
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, stdin)) >= 0) {
        if ((size_t)n > SBX_DRIVER_LINE_MAX) {
            fprintf(stderr, "sandbox-vmm: a request over %u bytes is ignored\n", SBX_DRIVER_LINE_MAX);
            continue;
        }
        dispatch_line(d, line, (size_t)n);
    }
    free(line);
    return 0;
}
