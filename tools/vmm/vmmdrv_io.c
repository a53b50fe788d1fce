/* sandbox-vmm's byte-moving calls: exec, shell_open and dial as sessions of
 * the VM's agent relayed to the worker's stream (the VM's lock is held for
 * one short read or write at a time, so several sessions share one VM), and
 * files_put / files_get through busybox tar in the guest's /.sbx. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "errors.h"
#include "limits.h"
#include "shellframe.h"
#include "vmmdrv.h"

#define SLICE_MS     20
#define FILES_MS     600000L
#define F_DATA       1
#define F_RESIZE     2
#define F_EOF        3
#define F_EXIT       4
#define F_STDERR     5
#define LIST_BUF     (4u << 20)
#define BB           "/.sbx/busybox"

static const char *const base_env[] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                       "HOME=/root"};
#define BASE_ENV_N 2

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const char *pstr(json_object *p, const char *key)
{
    json_object *v;
    return json_object_object_get_ex(p, key, &v) && json_object_is_type(v, json_type_string)
               ? json_object_get_string(v) : NULL;
}

static int64_t pint(json_object *p, const char *key, int64_t dflt)
{
    json_object *v;
    return json_object_object_get_ex(p, key, &v) && json_object_is_type(v, json_type_int) ? json_object_get_int64(v)
                                                                                            : dflt;
}

/* A command as the agent takes it: argv and env ("K=V", each name once: the
 * call's over the sandbox's over the base). */
typedef struct {
    vmm_cmd_t cmd;
    const char **argv, **env;
    char **owned;            /* env strings we made */
    size_t nowned;
    char **senv;
    size_t nsenv;
    char workdir[1024];      /* the image's WorkingDir: the default cwd */
} cmdbuf_t;

/* Appends kv to env[*k] unless its name is there already. */
static void env_add(const char **env, size_t *k, const char *kv)
{
    const char *eq = strchr(kv, '=');
    size_t n = eq ? (size_t)(eq - kv) + 1 : strlen(kv);
    for (size_t i = 0; i < *k; i++)
        if (strncmp(env[i], kv, n) == 0)
            return;
    env[(*k)++] = kv;
}

static void cmd_free(cmdbuf_t *c)
{
    free(c->argv);
    free(c->env);
    vmmdrv_strv_free(c->owned, c->nowned);
    vmmdrv_strv_free(c->senv, c->nsenv);
}

static int cmd_make(vmmdrv_t *d, const char *ref, json_object *p, const char *term, cmdbuf_t *c, vmmdrv_call_t *call)
{
    memset(c, 0, sizeof(*c));
    json_object *argv, *env = NULL;
    if (!json_object_object_get_ex(p, "argv", &argv) || !json_object_is_type(argv, json_type_array) ||
        json_object_array_length(argv) == 0 || json_object_array_length(argv) > SBX_MAX_ARGV) {
        vmmdrv_fail(call, "invalid_argument", "argv must be a non-empty array of at most %d strings", SBX_MAX_ARGV);
        return -1;
    }
    size_t na = json_object_array_length(argv);
    json_object_object_get_ex(p, "env", &env);
    size_t ne = env && json_object_is_type(env, json_type_object) ? (size_t)json_object_object_length(env) : 0;
    c->senv = vmmdrv_vm_env(d, ref, &c->nsenv, c->workdir, sizeof(c->workdir));
    c->argv = calloc(na + 1, sizeof(char *));
    c->env = calloc(BASE_ENV_N + c->nsenv + ne + 2, sizeof(char *));
    c->owned = calloc(ne + 1, sizeof(char *));
    if (c->argv == NULL || c->env == NULL || c->owned == NULL || ne + c->nsenv + 3 > SBX_MAX_ENV) {
        vmmdrv_fail(call, "invalid_argument", "too many environment variables");
        return -1;
    }
    for (size_t i = 0; i < na; i++) {
        json_object *a = json_object_array_get_idx(argv, i);
        if (!json_object_is_type(a, json_type_string)) {
            vmmdrv_fail(call, "invalid_argument", "argv must hold strings");
            return -1;
        }
        c->argv[i] = json_object_get_string(a);
    }
    size_t k = 0;
    if (ne > 0) {
        json_object_object_foreach(env, key, val) {
            if (!json_object_is_type(val, json_type_string) || strchr(key, '=') || !key[0])
                continue;
            size_t len = strlen(key) + strlen(json_object_get_string(val)) + 2;
            if ((c->owned[c->nowned] = malloc(len)) == NULL)
                continue;
            snprintf(c->owned[c->nowned], len, "%s=%s", key, json_object_get_string(val));
            env_add(c->env, &k, c->owned[c->nowned++]);
        }
    }
    if (term)
        env_add(c->env, &k, term);
    for (size_t i = 0; i < c->nsenv; i++)
        env_add(c->env, &k, c->senv[i]);
    for (size_t i = 0; i < BASE_ENV_N; i++)
        env_add(c->env, &k, base_env[i]);
    c->cmd.argv = c->argv;
    c->cmd.argc = (uint32_t)na;
    c->cmd.env = c->env;
    c->cmd.envc = (uint32_t)k;
    c->cmd.cwd = pstr(p, "cwd") ? pstr(p, "cwd") : c->workdir[0] == '/' ? c->workdir : "/";
    c->cmd.rows = (uint16_t)pint(p, "rows", 24);
    c->cmd.cols = (uint16_t)pint(p, "cols", 80);
    return 0;
}

/* ---- a session relayed to a framed stream (exec, shell) ---- */

typedef struct {
    vmmdrv_t *d;
    vmmdrv_vm_t *v;
    vmm_session_t *s;
    int fd;                  /* the worker's stream */
    int pty;
    long long deadline;      /* 0: none */
    volatile int cancel;
    int timed_out, cancelled, in_open, code;
    char tok[40];
} relay_t;

/* One frame from the worker to the session; -1 when the stream ended or is bad. */
static int relay_in(relay_t *r)
{
    unsigned char buf[SHELLFRAME_PAYLOAD_MAX];
    size_t n = 0;
    int type = 0, rc = vmmdrv_frame_recv(r->fd, &type, buf, &n);
    if (rc <= 0)
        return -1;
    pthread_mutex_lock(&r->v->mu);
    if (type == F_DATA && n > 0)
        rc = vmm_session_write(r->s, buf, n);
    else if (type == F_EOF)
        rc = vmm_session_write(r->s, NULL, 0);
    else if (type == F_RESIZE && n == 4 && r->pty)
        rc = vmm_session_resize(r->s, (unsigned)(buf[2] << 8 | buf[3]), (unsigned)(buf[0] << 8 | buf[1]));
    else
        rc = 0;
    pthread_mutex_unlock(&r->v->mu);
    if (type == F_EOF)
        r->in_open = 0;
    return rc == 0 ? 0 : -1;
}

/* Relays until the session's exit; returns 0, or SBX_EIO when the VM's channel broke. */
static int relay_run(relay_t *r)
{
    static __thread unsigned char buf[SHELLFRAME_PAYLOAD_MAX];
    int killed = 0;
    r->in_open = 1;
    for (;;) {
        if (!killed && (r->cancel || (r->deadline && now_ms() >= r->deadline))) {
            pthread_mutex_lock(&r->v->mu);
            vmm_session_kill(r->s, 9);
            pthread_mutex_unlock(&r->v->mu);
            killed = 1;
            r->timed_out = !r->cancel;
            r->cancelled = r->cancel;
        }
        if (r->in_open) {
            struct pollfd pf = {.fd = r->fd, .events = POLLIN};
            if (poll(&pf, 1, 0) > 0 && relay_in(r) != 0) { /* the worker went: kill the tree */
                r->in_open = 0;
                if (!killed)
                    r->cancel = 1;
            }
        }
        int stream = 1, code = 0;
        pthread_mutex_lock(&r->v->mu);
        long n = vmm_session_read_stream(r->s, buf, sizeof(buf), SLICE_MS, &stream, &code);
        pthread_mutex_unlock(&r->v->mu);
        if (n > 0) {
            vmmdrv_frame_send(r->fd, stream == 2 && !r->pty ? F_STDERR : F_DATA, buf, (size_t)n);
        } else if (n == 0) {
            r->code = killed ? 137 : code;
            return 0;
        } else if (n != SBX_ETIMEOUT) {
            r->code = -1;
            return SBX_EIO;
        }
    }
}

static void send_exit(int fd, int code)
{
    unsigned char b[4] = {(unsigned char)((uint32_t)code >> 24), (unsigned char)((uint32_t)code >> 16),
                          (unsigned char)((uint32_t)code >> 8), (unsigned char)code};
    vmmdrv_frame_send(fd, F_EXIT, b, 4);
    shutdown(fd, SHUT_RDWR);
    close(fd);
}

static json_object *exec_result(int code, int sig, int timed_out, int cancelled, long long ms)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "exit_code", json_object_new_int(code));
    json_object_object_add(o, "signal", json_object_new_int(sig));
    json_object_object_add(o, "timed_out", json_object_new_boolean(timed_out));
    json_object_object_add(o, "cancelled", json_object_new_boolean(cancelled));
    json_object_object_add(o, "duration_ms", json_object_new_int64(ms));
    return o;
}

json_object *vmmdrv_m_exec(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call)
{
    const char *ref = pstr(p, "ref"), *tok = pstr(p, "stream");
    long long t0 = now_ms();
    cmdbuf_t c;
    if (cmd_make(d, ref ? ref : "", p, NULL, &c, call) != 0) {
        cmd_free(&c);
        return NULL;
    }
    vmmdrv_vm_t *v = vmmdrv_vm_get(d, ref, call);
    if (v == NULL) {
        cmd_free(&c);
        return NULL;
    }
    pthread_mutex_unlock(&v->mu);
    int fd = vmmdrv_stream_take(tok, call);
    if (fd < 0) {
        pthread_mutex_lock(&v->mu);
        vmmdrv_vm_put(d, v, 0);
        cmd_free(&c);
        return NULL;
    }
    relay_t r = {.d = d, .v = v, .fd = fd};
    int64_t to = pint(p, "timeout_seconds", 0);
    r.deadline = to > 0 ? t0 + to * 1000 : 0;
    char why[VMM_WHY_MAX] = "";
    pthread_mutex_lock(&v->mu);
    int rc = vmm_exec_open(v->vm, &c.cmd, &r.s, why);
    pthread_mutex_unlock(&v->mu);
    cmd_free(&c);
    if (rc == SBX_ENOTFOUND || rc == SBX_ERUNTIME || rc == SBX_EINVAL) { /* could not start: 127 / 126 */
        char msg[VMM_WHY_MAX + 16];
        int n = snprintf(msg, sizeof(msg), "exec: %s\n", why);
        vmmdrv_frame_send(fd, F_STDERR, msg, (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1);
        int code = rc == SBX_ENOTFOUND && !strstr(why, "ermission") ? 127 : 126;
        send_exit(fd, code);
        pthread_mutex_lock(&v->mu);
        vmmdrv_vm_put(d, v, 0);
        return exec_result(code, 0, 0, 0, now_ms() - t0);
    }
    if (rc != 0) {
        close(fd);
        pthread_mutex_lock(&v->mu);
        vmmdrv_vm_put(d, v, 1);
        return vmmdrv_fail(call, "sandbox_exited", "the VM's agent channel broke: %s", why);
    }
    snprintf(r.tok, sizeof(r.tok), "%s", tok);
    vmmdrv_exec_register(r.tok, &r.cancel);
    rc = relay_run(&r);
    vmmdrv_exec_unregister(r.tok);
    pthread_mutex_lock(&v->mu);
    vmm_session_close(r.s);
    vmmdrv_vm_put(d, v, rc != 0);
    send_exit(fd, r.code);
    if (rc != 0)
        return vmmdrv_fail(call, "sandbox_exited", "the VM stopped during the exec");
    int sig = r.timed_out || r.cancelled ? 9 : r.code > 128 && r.code < 160 ? r.code - 128 : 0;
    return exec_result(r.code, sig, r.timed_out, r.cancelled, now_ms() - t0);
}

/* ---- shell_open, dial: the response first, then a thread relays ---- */

static void *shell_thread(void *arg)
{
    relay_t *r = arg;
    int rc = relay_run(r);
    pthread_mutex_lock(&r->v->mu);
    vmm_session_close(r->s);
    vmmdrv_vm_put(r->d, r->v, rc != 0);
    send_exit(r->fd, r->code);
    free(r);
    return NULL;
}

/* Takes the stream and the VM for a session call; 0 with *ret (its s still NULL). */
static int session_begin(vmmdrv_t *d, json_object *p, relay_t **ret, vmmdrv_call_t *call)
{
    relay_t *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        vmmdrv_fail(call, "runtime_error", "out of memory");
        return -1;
    }
    r->d = d;
    if ((r->v = vmmdrv_vm_get(d, pstr(p, "ref"), call)) == NULL) {
        free(r);
        return -1;
    }
    pthread_mutex_unlock(&r->v->mu);
    if ((r->fd = vmmdrv_stream_take(pstr(p, "stream"), call)) < 0) {
        pthread_mutex_lock(&r->v->mu);
        vmmdrv_vm_put(d, r->v, 0);
        free(r);
        return -1;
    }
    pthread_mutex_lock(&r->v->mu);
    *ret = r;
    return 0;
}

static json_object *session_start(relay_t *r, void *(*fn)(void *), vmmdrv_call_t *call)
{
    pthread_t t;
    pthread_mutex_unlock(&r->v->mu);
    if (pthread_create(&t, NULL, fn, r) != 0) {
        pthread_mutex_lock(&r->v->mu);
        vmm_session_close(r->s);
        vmmdrv_vm_put(r->d, r->v, 0);
        close(r->fd);
        free(r);
        return vmmdrv_fail(call, "runtime_error", "cannot start a thread");
    }
    pthread_detach(t);
    return json_object_new_object();
}

static json_object *session_failed(relay_t *r, int rc, const char *code, const char *why, vmmdrv_call_t *call)
{
    vmmdrv_vm_put(r->d, r->v, rc == SBX_EIO);
    close(r->fd);
    free(r);
    return vmmdrv_fail(call, code, "%s", why);
}

json_object *vmmdrv_m_shell_open(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call)
{
    relay_t *r;
    cmdbuf_t c;
    if (cmd_make(d, pstr(p, "ref") ? pstr(p, "ref") : "", p, "TERM=xterm", &c, call) != 0 ||
        session_begin(d, p, &r, call) != 0) {
        cmd_free(&c);
        return NULL;
    }
    char why[VMM_WHY_MAX] = "";
    r->pty = 1;
    int rc = vmm_shell_open(r->v->vm, &c.cmd, &r->s, why);
    cmd_free(&c);
    if (rc != 0)
        return session_failed(r, rc, rc == SBX_ENOTFOUND ? "not_found" : "runtime_error", why, call);
    return session_start(r, shell_thread, call);
}

static void *dial_thread(void *arg)
{
    relay_t *r = arg;
    static __thread unsigned char buf[65536];
    int in_open = 1, broken = 0;
    for (;;) {
        if (in_open) {
            struct pollfd pf = {.fd = r->fd, .events = POLLIN};
            if (poll(&pf, 1, 0) > 0) {
                ssize_t n = read(r->fd, buf, sizeof(buf));
                pthread_mutex_lock(&r->v->mu);
                int rc = vmm_session_write(r->s, n > 0 ? buf : NULL, n > 0 ? (size_t)n : 0);
                pthread_mutex_unlock(&r->v->mu);
                in_open = n > 0 && rc == 0;
            }
        }
        int code = 0;
        pthread_mutex_lock(&r->v->mu);
        long n = vmm_session_read(r->s, buf, sizeof(buf), SLICE_MS, &code);
        pthread_mutex_unlock(&r->v->mu);
        if (n > 0) {
            const unsigned char *c = buf;
            while (n > 0) {
                ssize_t w = send(r->fd, c, (size_t)n, MSG_NOSIGNAL);
                if (w <= 0)
                    break;
                c += w;
                n -= w;
            }
            if (n > 0)
                break;
        } else if (n == 0) {
            break;
        } else if (n != SBX_ETIMEOUT) {
            broken = 1;
            break;
        }
    }
    shutdown(r->fd, SHUT_WR);
    pthread_mutex_lock(&r->v->mu);
    vmm_session_close(r->s);
    vmmdrv_vm_put(r->d, r->v, broken);
    close(r->fd);
    free(r);
    return NULL;
}

json_object *vmmdrv_m_dial(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call)
{
    int64_t port = pint(p, "port", 0);
    if (port < 1 || port > 65535)
        return vmmdrv_fail(call, "invalid_argument", "bad port");
    relay_t *r;
    if (session_begin(d, p, &r, call) != 0)
        return NULL;
    char why[VMM_WHY_MAX] = "";
    int rc = vmm_dial(r->v->vm, (unsigned)port, &r->s, why);
    if (rc != 0)
        return session_failed(r, rc, rc == SBX_EIO ? "runtime_error" : "unavailable", why, call);
    return session_start(r, dial_thread, call);
}

/* ---- files ---- */

typedef struct {
    char small[8192];
    char *buf;               /* NULL: small */
    size_t n, cap;           /* cap 0: sizeof(small) */
    int fd;                  /* >= 0: stdout goes there */
} collect_t;

static void on_collect(void *arg, int stream, const void *p, size_t n)
{
    collect_t *c = arg;
    if (stream == 1 && c->fd >= 0) {
        const char *q = p;
        while (n > 0) {
            ssize_t w = send(c->fd, q, n, MSG_NOSIGNAL);
            if (w <= 0)
                return;
            q += w;
            n -= (size_t)w;
        }
        return;
    }
    char *b = c->buf ? c->buf : c->small;
    size_t cap = c->buf ? c->cap : sizeof(c->small);
    size_t k = n < cap - 1 - c->n ? n : cap - 1 - c->n;
    memcpy(b + c->n, p, k);
    c->n += k;
    b[c->n] = '\0';
}

/* Runs argv in the guest under the VM's lock (held by the caller); exit code, or -1. */
static int guest_run(vmm_t *vm, const char *const *argv, int stdin_fd, collect_t *out, size_t max, char *why)
{
    vmm_exec_req_t req = {.stdin_fd = stdin_fd, .max_output = max, .timeout_ms = FILES_MS,
                          .on_output = on_collect, .arg = out};
    uint32_t n = 0;
    while (argv[n])
        n++;
    req.cmd.argv = argv;
    req.cmd.argc = n;
    req.cmd.env = base_env;
    req.cmd.envc = BASE_ENV_N;
    req.cmd.cwd = "/";
    vmm_exec_result_t r;
    if (vmm_exec(vm, &req, &r, why) != 0)
        return -1;
    return r.how == VMM_EXIT_SIGNAL ? 128 + r.code : r.code;
}

/* The stat of path in the guest (not following a final symlink) as the doc's object. */
static json_object *guest_stat(vmm_t *vm, const char *path, vmmdrv_call_t *call)
{
    const char *argv[] = {BB, "sh", "-c",
                          "B=/.sbx/busybox; $B stat -c '%s %a %Y %F' -- \"$1\" || exit 3;"
                          " [ -L \"$1\" ] && $B readlink -- \"$1\"; exit 0", "sh", path, NULL};
    collect_t c = {.fd = -1};
    char why[VMM_WHY_MAX] = "";
    int rc = guest_run(vm, argv, -1, &c, sizeof(c.small), why);
    unsigned long long size = 0;
    unsigned mode = 0;
    long long mtime = 0;
    char type[64] = "", *nl = strchr(c.small, '\n');
    if (rc < 0)
        return vmmdrv_fail(call, "sandbox_exited", "the VM's agent channel broke: %s", why);
    if (rc != 0 || sscanf(c.small, "%llu %o %lld %63[^\n]", &size, &mode, &mtime, type) != 4)
        return vmmdrv_fail(call, "not_found", "no such file %.300s", path);
    json_object *o = json_object_new_object();
    const char *slash = strrchr(path, '/');
    const char *name = slash && slash[1] ? slash + 1 : path;
    const char *t = strcmp(type, "regular file") == 0 || strcmp(type, "regular empty file") == 0 ? "file"
                    : strcmp(type, "directory") == 0 ? "dir" : strcmp(type, "symbolic link") == 0 ? "symlink" : "other";
    char when[32];
    time_t tt = (time_t)mtime;
    struct tm tm;
    gmtime_r(&tt, &tm);
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
    char target[4096] = "";
    if (strcmp(t, "symlink") == 0 && nl)
        sscanf(nl + 1, "%4095[^\n]", target);
    json_object_object_add(o, "name", json_object_new_string(name));
    json_object_object_add(o, "size", json_object_new_int64((int64_t)size));
    json_object_object_add(o, "mode", json_object_new_int((int)(mode & 07777)));
    json_object_object_add(o, "type", json_object_new_string(t));
    json_object_object_add(o, "mtime", json_object_new_string(when));
    json_object_object_add(o, "link_target", json_object_new_string(target));
    return o;
}

static int path_ok(const char *path)
{
    return path && path[0] == '/' && strlen(path) < 4096 && !strchr(path, '\n');
}

typedef struct {
    int in, out;             /* the worker's stream, the pipe's write end */
    int64_t max, size;       /* max_bytes; raw: exactly size (else -1) */
    int64_t got;
    int too_big, bad;        /* over max / a short or reset upload */
    char name[256];
    unsigned mode;
} feed_t;

/* A ustar header for one regular file. */
static void tar_header(unsigned char h[512], const char *name, unsigned mode, int64_t size)
{
    memset(h, 0, 512);
    snprintf((char *)h, 100, "%.99s", name);
    snprintf((char *)h + 100, 8, "%07o", mode & 07777);
    snprintf((char *)h + 108, 8, "%07o", 0);
    snprintf((char *)h + 116, 8, "%07o", 0);
    char num[32];
    snprintf(num, sizeof(num), "%011llo", (unsigned long long)size & 077777777777ull);
    memcpy(h + 124, num, 12);
    snprintf(num, sizeof(num), "%011llo", (unsigned long long)time(NULL) & 077777777777ull);
    memcpy(h + 136, num, 12);
    h[156] = '0';
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
}

/* Copies the upload into the pipe (raw: wrapped as a one-file tar, whose end is
 * written only when exactly size bytes came), counting against max. */
static void *feed_thread(void *arg)
{
    feed_t *f = arg;
    static __thread char buf[65536];
    if (f->size >= 0) {
        unsigned char h[512];
        tar_header(h, f->name, f->mode, f->size);
        if (vmmdrv_write_all(f->out, h, 512) != 0)
            f->bad = 1;
    }
    for (;;) {
        ssize_t n = read(f->in, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) { /* a reset: the client aborted */
            f->bad = 1;
            break;
        }
        if (n == 0)
            break;
        f->got += n;
        if (f->got > f->max || (f->size >= 0 && f->got > f->size)) {
            f->too_big = f->got > f->max;
            f->bad = 1;
            break;
        }
        if (vmmdrv_write_all(f->out, buf, (size_t)n) != 0) {
            f->bad = 1;
            break;
        }
    }
    if (!f->bad && f->size >= 0 && f->got == f->size) {
        static const char zero[1024];
        size_t pad = (size_t)((512 - f->size % 512) % 512);
        if (vmmdrv_write_all(f->out, zero, pad) != 0 || vmmdrv_write_all(f->out, zero, 1024) != 0)
            f->bad = 1;
    } else if (f->size >= 0 && f->got != f->size) {
        f->bad = 1;
    }
    close(f->out);
    return NULL;
}

/* Unpacks what the feeder gives into dir in the guest. 0, or the call's error. */
static int put_into(vmm_t *vm, const char *dir, feed_t *f, vmmdrv_call_t *call)
{
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) != 0) {
        vmmdrv_fail(call, "runtime_error", "pipe: %s", strerror(errno));
        return -1;
    }
    f->out = pfd[1];
    pthread_t t;
    if (pthread_create(&t, NULL, feed_thread, f) != 0) {
        close(pfd[0]);
        close(pfd[1]);
        vmmdrv_fail(call, "runtime_error", "cannot start a thread");
        return -1;
    }
    char why[VMM_WHY_MAX] = "";
    int rc = vmm_files_put(vm, dir, pfd[0], FILES_MS, why);
    close(pfd[0]); /* a feeder still writing gets EPIPE */
    pthread_join(t, NULL);
    if (f->too_big)
        vmmdrv_fail(call, "payload_too_large", "the upload is over %lld bytes", (long long)f->max);
    else if (f->bad)
        vmmdrv_fail(call, "invalid_argument", "the upload ended early or was not %lld bytes", (long long)f->size);
    else if (rc != 0)
        vmmdrv_fail(call, rc == SBX_EIO ? "sandbox_exited" : "invalid_argument", "unpack into %.200s: %s", dir, why);
    return f->too_big || f->bad || rc != 0 ? -1 : 0;
}

/* A raw upload: a one-file tar into a fresh directory beside path, then renamed over it. */
static int put_raw(vmm_t *vm, const char *path, feed_t *f, vmmdrv_call_t *call)
{
    char dir[4096], tmp[4200], why[VMM_WHY_MAX] = "";
    const char *slash = strrchr(path, '/');
    snprintf(dir, sizeof(dir), "%.*s", (int)(slash == path ? 1 : slash - path), path);
    snprintf(f->name, sizeof(f->name), "f"); /* the member's name in the fresh directory */
    unsigned char rnd[6];
    if (!slash[1] || f->size > 077777777777ll || getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
        vmmdrv_fail(call, "invalid_argument", "bad path %.300s", path);
        return -1;
    }
    snprintf(tmp, sizeof(tmp), "%s/.sbx-put-%02x%02x%02x%02x%02x%02x", strcmp(dir, "/") ? dir : "", rnd[0], rnd[1],
             rnd[2], rnd[3], rnd[4], rnd[5]);
    const char *mk[] = {BB, "sh", "-c", "[ -d \"$1\" ] && /.sbx/busybox mkdir -m 700 -- \"$2\"", "sh", dir, tmp, NULL};
    collect_t c = {.fd = -1};
    int rc = guest_run(vm, mk, -1, &c, sizeof(c.small), why);
    if (rc != 0) {
        vmmdrv_fail(call, rc < 0 ? "sandbox_exited" : "not_found", "no such directory %.300s", dir);
        return -1;
    }
    rc = put_into(vm, tmp, f, call);
    char full[4500];
    snprintf(full, sizeof(full), "%s/%s", tmp, f->name);
    const char *mv[] = {BB, "sh", "-c", "/.sbx/busybox mv -f -- \"$1\" \"$2\"", "sh", full, path, NULL};
    const char *rm[] = {BB, "rm", "-rf", "--", tmp, NULL};
    if (rc == 0 && guest_run(vm, mv, -1, &c, sizeof(c.small), why) != 0) {
        vmmdrv_fail(call, "invalid_argument", "cannot write %.300s: %.200s", path, c.small);
        rc = -1;
    }
    guest_run(vm, rm, -1, &c, sizeof(c.small), why);
    return rc;
}

json_object *vmmdrv_m_files_put(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call)
{
    const char *path = pstr(p, "path"), *fmt = pstr(p, "format") ? pstr(p, "format") : "tar";
    if (!path_ok(path) || (strcmp(fmt, "tar") != 0 && strcmp(fmt, "raw") != 0))
        return vmmdrv_fail(call, "invalid_argument", "files_put needs an absolute path and format tar or raw");
    feed_t f = {.max = pint(p, "max_bytes", (int64_t)1 << 40), .size = -1, .mode = (unsigned)pint(p, "mode", 0644)};
    if (strcmp(fmt, "raw") == 0 && (f.size = pint(p, "size", -1)) < 0)
        return vmmdrv_fail(call, "invalid_argument", "a raw upload needs its size");
    vmmdrv_vm_t *v = vmmdrv_vm_get(d, pstr(p, "ref"), call);
    if (v == NULL)
        return NULL;
    pthread_mutex_unlock(&v->mu);
    f.in = vmmdrv_stream_take(pstr(p, "stream"), call);
    pthread_mutex_lock(&v->mu);
    if (f.in < 0) {
        vmmdrv_vm_put(d, v, 0);
        return NULL;
    }
    int rc = f.size >= 0 ? put_raw(v->vm, path, &f, call) : put_into(v->vm, path, &f, call);
    vmmdrv_vm_put(d, v, call->code && strcmp(call->code, "sandbox_exited") == 0);
    close(f.in);
    if (rc != 0)
        return NULL;
    json_object *o = json_object_new_object();
    json_object_object_add(o, "bytes", json_object_new_int64(f.got));
    return o;
}

typedef struct {
    vmmdrv_t *d;
    vmmdrv_vm_t *v;
    int fd;
    char path[4096], fmt[8];
} get_t;

static const char list_sh[] =
    "cd -- \"$1\" || exit 3; B=/.sbx/busybox; n=0;"
    " for f in * .*; do [ \"$f\" = . ] || [ \"$f\" = .. ] && continue;"
    " [ -e \"$f\" ] || [ -L \"$f\" ] || continue; n=$((n+1)); [ $n -gt 10000 ] && { echo TRUNCATED; break; };"
    " t=''; [ -L \"$f\" ] && t=$($B readlink -- \"$f\");"
    " $B stat -c '%s %a %Y %F' -- \"$f\" | $B tr '\\n' ' '; printf '|%s|%s\\n' \"$t\" \"$f\"; done";

static int list_entry(json_object *arr, char *line)
{
    unsigned long long size = 0;
    unsigned mode = 0;
    long long mtime = 0;
    char type[64] = "";
    char *bar = strchr(line, '|');
    char *bar2 = bar ? strchr(bar + 1, '|') : NULL;
    if (bar2 == NULL || sscanf(line, "%llu %o %lld %63[^|]", &size, &mode, &mtime, type) != 4)
        return -1;
    *bar2 = '\0';
    size_t tl = strlen(type);
    while (tl > 0 && type[tl - 1] == ' ')
        type[--tl] = '\0';
    const char *t = strncmp(type, "regular", 7) == 0 ? "file" : strcmp(type, "directory") == 0 ? "dir"
                    : strcmp(type, "symbolic link") == 0 ? "symlink" : "other";
    char when[32];
    time_t tt = (time_t)mtime;
    struct tm tm;
    gmtime_r(&tt, &tm);
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
    json_object *e = json_object_new_object();
    json_object_object_add(e, "name", json_object_new_string(bar2 + 1));
    json_object_object_add(e, "type", json_object_new_string(t));
    json_object_object_add(e, "size", json_object_new_int64((int64_t)size));
    json_object_object_add(e, "mode", json_object_new_int((int)(mode & 07777)));
    json_object_object_add(e, "mtime", json_object_new_string(when));
    json_object_object_add(e, "link_target", json_object_new_string(bar + 1));
    json_object_array_add(arr, e);
    return 0;
}

/* The list form: one JSON document of path's children (the guest's listing
 * goes through a temporary file: it may be larger than a collect buffer). */
static void get_list(get_t *g)
{
    const char *argv[] = {BB, "sh", "-c", list_sh, "sh", g->path, NULL};
    char why[VMM_WHY_MAX] = "";
    json_object *doc = json_object_new_object(), *arr = json_object_new_array();
    int truncated = 0;
    collect_t c = {.fd = -1, .cap = LIST_BUF};
    if ((c.buf = malloc(LIST_BUF)) != NULL) {
        c.buf[0] = '\0';
        guest_run(g->v->vm, argv, -1, &c, LIST_BUF, why);
        char *line = c.buf;
        while (line && *line) {
            char *nl = strchr(line, '\n');
            if (nl)
                *nl = '\0';
            if (strcmp(line, "TRUNCATED") == 0)
                truncated = 1;
            else
                list_entry(arr, line);
            line = nl ? nl + 1 : NULL;
        }
        truncated |= c.n >= LIST_BUF - 1;
        free(c.buf);
    }
    json_object_object_add(doc, "entries", arr);
    json_object_object_add(doc, "truncated", json_object_new_boolean(truncated));
    const char *s = json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PLAIN);
    vmmdrv_write_all(g->fd, s, strlen(s));
    json_object_put(doc);
}

static void get_body(void *arg)
{
    get_t *g = arg;
    char why[VMM_WHY_MAX] = "";
    if (strcmp(g->fmt, "list") == 0) {
        get_list(g);
    } else if (strcmp(g->fmt, "raw") == 0) {
        const char *argv[] = {BB, "cat", "--", g->path, NULL};
        collect_t c = {.fd = g->fd};
        guest_run(g->v->vm, argv, -1, &c, SIZE_MAX / 2, why);
    } else {
        vmm_files_get(g->v->vm, g->path, g->fd, FILES_MS, why);
    }
    shutdown(g->fd, SHUT_WR);
    close(g->fd);
    vmmdrv_vm_put(g->d, g->v, 0);
    free(g);
}

json_object *vmmdrv_m_files_get(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call)
{
    const char *path = pstr(p, "path"), *fmt = pstr(p, "format") ? pstr(p, "format") : "tar";
    if (!path_ok(path) || (strcmp(fmt, "tar") && strcmp(fmt, "raw") && strcmp(fmt, "list")))
        return vmmdrv_fail(call, "invalid_argument", "files_get needs an absolute path and format tar, raw or list");
    get_t *g = calloc(1, sizeof(*g));
    if (g == NULL)
        return vmmdrv_fail(call, "runtime_error", "out of memory");
    g->d = d;
    snprintf(g->path, sizeof(g->path), "%s", path);
    snprintf(g->fmt, sizeof(g->fmt), "%s", fmt);
    if ((g->v = vmmdrv_vm_get(d, pstr(p, "ref"), call)) == NULL) {
        free(g);
        return NULL;
    }
    json_object *st = guest_stat(g->v->vm, path, call), *t;
    const char *type = st && json_object_object_get_ex(st, "type", &t) ? json_object_get_string(t) : "";
    if (st != NULL && strcmp(fmt, "raw") == 0 && strcmp(type, "file") != 0) {
        json_object_put(st);
        st = vmmdrv_fail(call, "invalid_argument", "%.300s is a directory; use the tar form", path);
    } else if (st != NULL && strcmp(fmt, "list") == 0 && strcmp(type, "dir") != 0) {
        json_object_put(st);
        st = vmmdrv_fail(call, "invalid_argument", "%.300s is not a directory", path);
    }
    if (st == NULL) {
        vmmdrv_vm_put(d, g->v, call->code && strcmp(call->code, "sandbox_exited") == 0);
        free(g);
        return NULL;
    }
    pthread_mutex_unlock(&g->v->mu);
    g->fd = vmmdrv_stream_take(pstr(p, "stream"), call);
    pthread_mutex_lock(&g->v->mu);
    if (g->fd < 0) {
        json_object_put(st);
        vmmdrv_vm_put(d, g->v, 0);
        free(g);
        return NULL;
    }
    call->after = get_body; /* the body after the answer; the VM stays locked for it */
    call->after_arg = g;
    json_object *o = json_object_new_object();
    json_object_object_add(o, "stat", st);
    return o;
}
