/* worker/vmm's side of the agent channel (vmmproto.h): the connection to a
 * guest's agent socket, sessions multiplexed on it, and exec, files, PTY and
 * dial on top. */
#include "vmm_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "errors.h"
#include "limits.h"

/* Bytes of one session's unread output the host keeps; beyond, the
 * connection stops reading (and the guest waits) until the caller reads. */
#define SESSION_INBOX_MAX (4u << 20)
/* how long a session's OPEN may wait for the guest's answer: a guest that
 * is alive answers in milliseconds (seconds under TCG); one that does not
 * is stuck, and the caller hears so instead of waiting for ever */
#define SESSION_OPEN_MS   60000

static void session_unlink(vmm_session_t *s)
{
    for (vmm_session_t **p = &s->vm->sessions; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            return;
        }
}

static void session_free(vmm_session_t *s)
{
    if (s == NULL)
        return;
    for (int i = 0; i < 3; i++)
        free(s->in[i]);
    free(s);
}

void vmm__free(vmm_t *vm)
{
    if (vm == NULL)
        return;
    while (vm->sessions) {
        vmm_session_t *s = vm->sessions;
        vm->sessions = s->next;
        session_free(s);
    }
    if (vm->fd >= 0)
        close(vm->fd);
    free(vm->rbuf);
    free(vm);
}

void vmm_detach(vmm_t *vm) { vmm__free(vm); }
const char *vmm_guest_release(const vmm_t *vm) { return vm->release; }
const char *vmm_cgroup_note(const vmm_t *vm) { return vm->cgnote; }
pid_t vmm_pid(const vmm_t *vm) { return vm->pid; }

static vmm_session_t *session_by_ch(vmm_t *vm, uint32_t ch)
{
    for (vmm_session_t *s = vm->sessions; s; s = s->next)
        if (s->ch == ch)
            return s;
    return NULL;
}

static int inbox_add(vmm_session_t *s, int stream, const uint8_t *p, size_t n)
{
    if (s->nin[stream] + n > s->capin[stream]) {
        size_t cap = s->capin[stream] ? s->capin[stream] : 65536;
        while (cap < s->nin[stream] + n)
            cap *= 2;
        uint8_t *np = realloc(s->in[stream], cap);
        if (np == NULL)
            return SBX_ENOMEM;
        s->in[stream] = np;
        s->capin[stream] = cap;
    }
    memcpy(s->in[stream] + s->nin[stream], p, n);
    s->nin[stream] += n;
    return 0;
}

static void dispatch(vmm_t *vm, const vmm_frame_t *f, const uint8_t *p)
{
    if (f->type == VMM_F_HELLO && f->channel == 0) {
        if (f->len >= 4 && vmm_get_u32(p) == VMM_PROTO_VERSION) {
            size_t n = f->len - 4 < sizeof(vm->release) - 1 ? f->len - 4 : sizeof(vm->release) - 1;
            memcpy(vm->release, p + 4, n);
            vm->release[n] = '\0';
            if (vm->release[0] == '\0')
                snprintf(vm->release, sizeof(vm->release), "?");
        } else {
            /* another protocol version: nothing else will be understood */
            vm->bad_version = 1;
            vm->peer_version = f->len >= 4 ? vmm_get_u32(p) : 0;
            vm->broken = 1;
        }
        return;
    }
    vmm_session_t *s = session_by_ch(vm, f->channel);
    if (s == NULL || s->ended)
        return;
    switch (f->type) {
    case VMM_F_OPENED:
        s->opened = 1;
        break;
    case VMM_F_OUT:
    case VMM_F_ERR:
        if (inbox_add(s, f->type == VMM_F_OUT ? 1 : 2, p, f->len) != 0)
            vm->broken = 1;
        break;
    case VMM_F_ERROR:
        s->ended = 1;
        s->err = f->len >= 4 ? (int)vmm_get_u32(p) : EIO;
        snprintf(s->errmsg, sizeof(s->errmsg), "%.*s", f->len > 4 ? (int)(f->len - 4) : 0, (const char *)p + 4);
        break;
    case VMM_F_EXIT:
        s->ended = 1;
        s->how = f->len >= 5 ? p[0] : VMM_EXIT_SIGNAL;
        s->code = f->len >= 5 ? (int)vmm_get_u32(p + 1) : SIGKILL;
        break;
    default:
        break;
    }
}

/* Reads what the socket has (waiting up to wait_ms) and dispatches whole
 * frames. want_write: also return when the socket is writable. Returns 0, or
 * SBX_EIO when the stream broke (vm->broken). */
static int pump(vmm_t *vm, int wait_ms, int want_write)
{
    if (vm->broken)
        return SBX_EIO;
    size_t backlog = 0;
    for (vmm_session_t *s = vm->sessions; s; s = s->next)
        backlog = s->nin[1] + s->nin[2] > backlog ? s->nin[1] + s->nin[2] : backlog;
    struct pollfd pf = {.fd = vm->fd, .events = (short)((backlog < SESSION_INBOX_MAX ? POLLIN : 0) | (want_write ? POLLOUT : 0))};
    int pr = poll(&pf, 1, wait_ms);
    if (pr < 0 && errno != EINTR) {
        vm->broken = 1;
        return SBX_EIO;
    }
    if (pr <= 0 || !(pf.revents & (POLLIN | POLLHUP | POLLERR)))
        return 0;
    if (!(pf.events & POLLIN) && !(pf.revents & (POLLHUP | POLLERR)))
        return 0;
    size_t cap = VMM_FRAME_HEADER + SBX_VMM_FRAME_MAX;
    ssize_t n = read(vm->fd, vm->rbuf + vm->rhave, cap - vm->rhave);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    if (n <= 0) {
        vm->broken = 1;
        return SBX_EIO;
    }
    vm->rhave += (size_t)n;
    vm->rtotal += (unsigned long long)n;
    size_t off = 0;
    for (;;) {
        vmm_frame_t f;
        int r = vmm_frame_header_parse(vm->rbuf + off, vm->rhave - off, &f);
        if (r < 0) {
            vm->broken = 1;
            return SBX_EIO;
        }
        if (r > 0 || vm->rhave - off < VMM_FRAME_HEADER + f.len)
            break;
        dispatch(vm, &f, vm->rbuf + off + VMM_FRAME_HEADER);
        off += VMM_FRAME_HEADER + f.len;
    }
    memmove(vm->rbuf, vm->rbuf + off, vm->rhave - off);
    vm->rhave -= off;
    return vm->broken ? SBX_EIO : 0;
}

/* Sends one frame, reading (and dispatching) what comes meanwhile so the
 * guest never waits on us while we wait on it. */
static int send_frame(vmm_t *vm, uint8_t type, uint32_t ch, const void *p, size_t n)
{
    uint8_t h[VMM_FRAME_HEADER];
    vmm_frame_header_put(h, type, ch, (uint32_t)n);
    const uint8_t *parts[2] = {h, p};
    size_t lens[2] = {sizeof(h), n};
    for (int i = 0; i < 2; i++) {
        size_t off = 0;
        while (off < lens[i]) {
            if (vm->broken)
                return SBX_EIO;
            ssize_t w = send(vm->fd, parts[i] + off, lens[i] - off, MSG_NOSIGNAL);
            if (w > 0) {
                off += (size_t)w;
                continue;
            }
            if (w < 0 && errno != EAGAIN && errno != EINTR) {
                vm->broken = 1;
                return SBX_EIO;
            }
            if (pump(vm, 1000, 1) != 0)
                return SBX_EIO;
        }
    }
    return 0;
}

/* The last line QEMU wrote to its log (its stderr) in dir, for an error
 * message: "" when there is none. Read with O_NOFOLLOW (the file is QEMU's
 * user's), at most its last 512 bytes, control characters made spaces. */
static void qemu_last_words(const char *dir, char *out, size_t cap)
{
    char path[VMM_PATH_MAX], buf[513];
    out[0] = '\0';
    if (vmm__path(path, sizeof(path), "%s/qemu.log", dir) != 0)
        return;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return;
    off_t end = lseek(fd, 0, SEEK_END);
    ssize_t n = end < 0 ? -1 : pread(fd, buf, sizeof(buf) - 1, end > 512 ? end - 512 : 0);
    close(fd);
    if (n <= 0)
        return;
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        n--;
    buf[n] = '\0';
    char *line = strrchr(buf, '\n');
    line = line ? line + 1 : buf;
    for (char *p = line; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = ' ';
    size_t len = strlen(line);
    if (len >= cap)
        len = cap - 1;
    memcpy(out, line, len);
    out[len] = '\0';
}

int vmm__agent_connect(vmm_t *vm, long timeout_ms, char *why)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (vmm__path(a.sun_path, sizeof(a.sun_path), "%s/agent.sock", vm->dir) != 0) {
        vmm__why(why, "state path too long for a unix socket: %s", vm->dir);
        return SBX_ETOOBIG;
    }
    if (vm->rbuf == NULL && (vm->rbuf = malloc(VMM_FRAME_HEADER + SBX_VMM_FRAME_MAX)) == NULL)
        return SBX_ENOMEM;
    long long deadline = vmm__now_ms() + timeout_ms, next_hello = 0;
    while (vmm__now_ms() < deadline) {
        int st;
        /* a child of ours that exited is a zombie kill() still finds */
        if (vm->pid > 0 && (waitpid(vm->pid, &st, WNOHANG) == vm->pid || kill(vm->pid, 0) != 0)) {
            char said[128];
            qemu_last_words(vm->dir, said, sizeof(said));
            vmm__why(why, "QEMU exited while the guest booted%s%s (see %s/console.log)", said[0] ? ": " : "", said,
                     vm->dir);
            return SBX_ERUNTIME;
        }
        if (vm->fd < 0) {
            int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
            if (fd < 0)
                return SBX_EIO;
            if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
                close(fd);
                struct timespec ts = {0, 20 * 1000 * 1000};
                nanosleep(&ts, NULL);
                continue;
            }
            vm->fd = fd;
            vm->broken = 0;
            vm->rhave = 0;
        }
        if (vmm__now_ms() >= next_hello) {
            uint8_t b[4 + VMM_HELLO_SEED + VMM_HELLO_CLOCK];
            struct timespec now;
            vmm_put_u32(b, VMM_PROTO_VERSION);
            if (getrandom(b + 4, VMM_HELLO_SEED, 0) != (ssize_t)VMM_HELLO_SEED) {
                vmm__why(why, "getrandom: %s", strerror(errno));
                return SBX_EIO;
            }
            clock_gettime(CLOCK_REALTIME, &now);
            vmm_put_u32(b + 4 + VMM_HELLO_SEED, (uint32_t)((uint64_t)now.tv_sec & 0xffffffffu));
            vmm_put_u32(b + 4 + VMM_HELLO_SEED + 4, (uint32_t)((uint64_t)now.tv_sec >> 32));
            vmm_put_u32(b + 4 + VMM_HELLO_SEED + 8, (uint32_t)now.tv_nsec);
            int src = send_frame(vm, VMM_F_HELLO, 0, b, sizeof(b));
            explicit_bzero(b, sizeof(b));
            if (src != 0)
                goto reconnect;
            next_hello = vmm__now_ms() + 2000;
        }
        if (pump(vm, 20, 0) != 0) {
            if (vm->bad_version) {
                vmm__why(why, "the guest agent speaks protocol version %u, not %u", vm->peer_version, VMM_PROTO_VERSION);
                return SBX_EUNAVAIL;
            }
            goto reconnect;
        }
        if (vm->release[0] != '\0')
            return 0;
        continue;
    reconnect:
        if (vm->release[0] == '\0' && vm->broken && vm->fd >= 0) {
            close(vm->fd);
            vm->fd = -1;
        }
    }
    vmm__why(why, "the guest agent did not answer in %ld ms (see %s/console.log)", timeout_ms, vm->dir);
    return SBX_ETIMEOUT;
}

int vmm__agent_quiesce(vmm_t *vm, long quiet_ms, long max_ms)
{
    long long now = vmm__now_ms(), end = now + max_ms, quiet_from = now;
    unsigned long long seen = vm->rtotal;
    while ((now = vmm__now_ms()) < end && now - quiet_from < quiet_ms) {
        if (pump(vm, 20, 0) != 0)
            return SBX_EIO;
        if (vm->rtotal != seen) {
            seen = vm->rtotal;
            quiet_from = vmm__now_ms();
        }
    }
    return now - quiet_from >= quiet_ms ? 0 : SBX_ETIMEOUT;
}

/* ---- sessions ---- */

static int session_open(vmm_t *vm, uint8_t kind, const uint8_t *payload, size_t n, vmm_session_t **ret, char *why)
{
    if (vm->broken) {
        vmm__why(why, "the agent channel broke");
        return SBX_EIO;
    }
    vmm_session_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return SBX_ENOMEM;
    s->vm = vm;
    s->kind = kind;
    do
        s->ch = ++vm->next_ch;
    while (s->ch == 0 || session_by_ch(vm, s->ch) != NULL);
    s->next = vm->sessions;
    vm->sessions = s;
    int rc = send_frame(vm, VMM_F_OPEN, s->ch, payload, n);
    long long deadline = vmm__now_ms() + SESSION_OPEN_MS;
    while (rc == 0 && !s->opened && !s->ended && vmm__now_ms() < deadline)
        rc = pump(vm, 1000, 0);
    if (rc == 0 && !s->opened && !s->ended) {
        send_frame(vm, VMM_F_CLOSE, s->ch, NULL, 0); /* should it open late: forgotten */
        vmm__why(why, "the guest agent did not answer in %d s (see %s/console.log)", SESSION_OPEN_MS / 1000, vm->dir);
        session_unlink(s);
        session_free(s);
        return SBX_ETIMEOUT;
    }
    if (rc != 0 || !s->opened) {
        if (rc != 0)
            vmm__why(why, "the agent channel broke");
        else
            vmm__why(why, "%s", s->errmsg);
        int e = s->err;
        session_unlink(s);
        session_free(s);
        return rc != 0 ? rc : e == ENOENT || e == EACCES || e == ENOEXEC || e == ENOTDIR ? SBX_ENOTFOUND
                            : e == ECONNREFUSED ? SBX_EUNAVAIL : SBX_ERUNTIME;
    }
    *ret = s;
    return 0;
}

static int open_cmd(vmm_t *vm, uint8_t kind, const vmm_cmd_t *cmd, vmm_session_t **ret, char *why)
{
    uint8_t *buf = malloc(SBX_VMM_FRAME_MAX);
    if (buf == NULL)
        return SBX_ENOMEM;
    long n = vmm_open_cmd_encode(kind, cmd, buf, SBX_VMM_FRAME_MAX);
    int rc;
    if (n < 0) {
        vmm__why(why, "bad command (empty argv, too many or too large arguments)");
        rc = SBX_EINVAL;
    } else {
        rc = session_open(vm, kind, buf, (size_t)n, ret, why);
    }
    free(buf);
    return rc;
}

int vmm_shell_open(vmm_t *vm, const vmm_cmd_t *cmd, vmm_session_t **ret_s, char *ret_why)
{
    return open_cmd(vm, VMM_OPEN_PTY, cmd, ret_s, ret_why);
}

int vmm_dial(vmm_t *vm, unsigned port, vmm_session_t **ret_s, char *ret_why)
{
    if (port == 0 || port > 65535) {
        vmm__why(ret_why, "bad port %u", port);
        return SBX_EINVAL;
    }
    uint8_t b[3] = {VMM_OPEN_DIAL};
    vmm_put_u16(b + 1, (uint16_t)port);
    int rc = session_open(vm, VMM_OPEN_DIAL, b, 3, ret_s, ret_why);
    if (rc == SBX_EUNAVAIL || rc == SBX_ERUNTIME)
        vmm__why(ret_why, "nothing listens on port %u in the guest", port);
    return rc;
}

int vmm_session_write(vmm_session_t *s, const void *p, size_t n)
{
    const uint8_t *c = p;
    if (n == 0)
        return send_frame(s->vm, VMM_F_IN, s->ch, NULL, 0);
    while (n > 0) {
        size_t k = n < VMM_DATA_CHUNK ? n : VMM_DATA_CHUNK;
        int rc = send_frame(s->vm, VMM_F_IN, s->ch, c, k);
        if (rc != 0)
            return rc;
        c += k;
        n -= k;
    }
    return 0;
}

int vmm_session_resize(vmm_session_t *s, unsigned rows, unsigned cols)
{
    uint8_t b[4];
    vmm_put_u16(b, (uint16_t)rows);
    vmm_put_u16(b + 2, (uint16_t)cols);
    return send_frame(s->vm, VMM_F_RESIZE, s->ch, b, 4);
}

static size_t take(vmm_session_t *s, int stream, void *buf, size_t cap)
{
    size_t k = s->nin[stream] < cap ? s->nin[stream] : cap;
    memcpy(buf, s->in[stream], k);
    memmove(s->in[stream], s->in[stream] + k, s->nin[stream] - k);
    s->nin[stream] -= k;
    return k;
}

int vmm_exec_open(vmm_t *vm, const vmm_cmd_t *cmd, vmm_session_t **ret_s, char *ret_why)
{
    return open_cmd(vm, VMM_OPEN_EXEC, cmd, ret_s, ret_why);
}

int vmm_session_kill(vmm_session_t *s, int sig)
{
    if (s->ended)
        return 0;
    uint8_t b[4];
    vmm_put_u32(b, (uint32_t)sig);
    return send_frame(s->vm, VMM_F_KILL, s->ch, b, 4);
}

long vmm_session_read(vmm_session_t *s, void *buf, size_t cap, long timeout_ms, int *ret_exit_code)
{
    return vmm_session_read_stream(s, buf, cap, timeout_ms, NULL, ret_exit_code);
}

long vmm_session_read_stream(vmm_session_t *s, void *buf, size_t cap, long timeout_ms, int *ret_stream,
                             int *ret_exit_code)
{
    long long deadline = vmm__now_ms() + timeout_ms;
    for (;;) {
        for (int st = 1; st <= 2; st++) {
            if (s->nin[st] > 0) {
                if (ret_stream)
                    *ret_stream = st;
                return (long)take(s, st, buf, cap);
            }
        }
        if (s->ended) {
            if (ret_exit_code)
                *ret_exit_code = s->how == VMM_EXIT_SIGNAL ? 128 + s->code : s->code;
            return 0;
        }
        long long left = deadline - vmm__now_ms();
        if (left <= 0)
            return SBX_ETIMEOUT;
        if (pump(s->vm, (int)(left < 1000 ? left : 1000), 0) != 0)
            return SBX_EIO;
    }
}

void vmm_session_close(vmm_session_t *s)
{
    if (s == NULL)
        return;
    if (!s->ended && !s->vm->broken)
        send_frame(s->vm, VMM_F_CLOSE, s->ch, NULL, 0);
    session_unlink(s);
    session_free(s);
}

/* ---- exec ---- */

static void deliver(const vmm_exec_req_t *req, vmm_exec_result_t *r, vmm_session_t *s, size_t max)
{
    for (int st = 1; st <= 2; st++) {
        size_t n = s->nin[st];
        if (n == 0)
            continue;
        r->bytes[st] += n;
        uint64_t before = r->bytes[st] - n;
        size_t keep = before >= max ? 0 : (max - before < n ? (size_t)(max - before) : n);
        if (keep < n)
            r->truncated[st] = 1;
        if (keep > 0 && req->on_output)
            req->on_output(req->arg, st, s->in[st], keep);
        s->nin[st] = 0;
    }
}

int vmm_exec(vmm_t *vm, const vmm_exec_req_t *req, vmm_exec_result_t *ret, char *ret_why)
{
    vmm_session_t *s = NULL;
    vmm_exec_result_t r;
    memset(&r, 0, sizeof(r));
    size_t max = req->max_output ? req->max_output : SBX_EXEC_OUTPUT_DEFAULT;
    long long deadline = req->timeout_ms > 0 ? vmm__now_ms() + req->timeout_ms : 0;
    int rc = open_cmd(vm, VMM_OPEN_EXEC, &req->cmd, &s, ret_why);
    if (rc != 0)
        return rc;
    if (req->stdin_len > 0)
        rc = vmm_session_write(s, req->stdin_data, req->stdin_len);
    int in_fd = req->stdin_fd, killed = 0;
    if (in_fd < 0 && rc == 0)
        rc = vmm_session_write(s, NULL, 0);
    char *chunk = in_fd >= 0 ? malloc(VMM_DATA_CHUNK) : NULL;
    while (rc == 0 && !s->ended) {
        if (in_fd >= 0 && chunk != NULL) {
            /* stdin from a fd: a chunk whenever the fd has one, between pumps */
            struct pollfd pf = {.fd = in_fd, .events = POLLIN};
            if (poll(&pf, 1, 0) > 0) {
                ssize_t n = read(in_fd, chunk, VMM_DATA_CHUNK);
                if (n > 0) {
                    rc = vmm_session_write(s, chunk, (size_t)n);
                } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
                    rc = vmm_session_write(s, NULL, 0);
                    in_fd = -1;
                }
            }
        }
        if (rc == 0)
            rc = pump(vm, in_fd >= 0 ? 5 : 100, 0);
        deliver(req, &r, s, max);
        if (rc == 0 && deadline && !killed && vmm__now_ms() >= deadline) {
            uint8_t b[4];
            vmm_put_u32(b, SIGKILL);
            rc = send_frame(vm, VMM_F_KILL, s->ch, b, 4);
            killed = 1;
            r.timed_out = 1;
        }
    }
    free(chunk);
    deliver(req, &r, s, max);
    if (rc != 0) {
        vmm__why(ret_why, "the agent channel broke");
    } else {
        r.how = s->how;
        r.code = s->code;
        *ret = r;
    }
    session_unlink(s);
    session_free(s);
    return rc;
}

/* ---- files: busybox tar in the guest's /.sbx ---- */

static void keep_stderr(void *arg, int stream, const void *p, size_t n)
{
    char *why = arg;
    if (stream != 2 || why == NULL)
        return;
    size_t l = strlen(why);
    if (l + 1 < VMM_WHY_MAX)
        snprintf(why + l, VMM_WHY_MAX - l, "%.*s", (int)n, (const char *)p);
}

typedef struct {
    int fd;
    int failed;
    char *why;
} tar_out_t;

static void to_fd(void *arg, int stream, const void *p, size_t n)
{
    tar_out_t *t = arg;
    if (stream == 2) {
        keep_stderr(t->why, 2, p, n);
        return;
    }
    const char *c = p;
    while (n > 0 && !t->failed) {
        ssize_t w = write(t->fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            t->failed = 1;
            break;
        }
        c += w;
        n -= (size_t)w;
    }
}

static int tar_result(int rc, const vmm_exec_result_t *r, const char *what, char *why)
{
    if (rc != 0)
        return rc;
    if (r->timed_out) {
        vmm__why(why, "%s: timed out", what);
        return SBX_ETIMEOUT;
    }
    if (r->how != VMM_EXIT_CODE || r->code != 0) {
        if (why != NULL && why[0] == '\0')
            vmm__why(why, "%s: tar exit %d", what, r->code);
        if (why != NULL)
            why[strcspn(why, "\n")] = '\0';
        return SBX_ERUNTIME;
    }
    return 0;
}

int vmm_files_put(vmm_t *vm, const char *dir, int tar_fd, long timeout_ms, char *ret_why)
{
    const char *argv[] = {"/.sbx/busybox", "tar", "-x", "-f", "-", "-C", dir, NULL};
    vmm_exec_req_t req = {.cmd = {.argv = argv, .argc = 7, .cwd = "/"}, .stdin_fd = tar_fd,
                          .max_output = VMM_WHY_MAX, .timeout_ms = timeout_ms, .on_output = keep_stderr, .arg = ret_why};
    vmm_exec_result_t r;
    if (ret_why)
        ret_why[0] = '\0';
    int rc = vmm_exec(vm, &req, &r, ret_why);
    return tar_result(rc, &r, "upload", ret_why);
}

int vmm_files_get(vmm_t *vm, const char *path, int out_fd, long timeout_ms, char *ret_why)
{
    char a[VMM_PATH_MAX], b[VMM_PATH_MAX];
    if (path == NULL || path[0] != '/' || vmm__path(a, sizeof(a), "%s", path) != 0) {
        vmm__why(ret_why, "the path must be absolute");
        return SBX_EINVAL;
    }
    snprintf(b, sizeof(b), "%s", path);
    const char *parent = dirname(a), *name = basename(b);
    const char *argv[] = {"/.sbx/busybox", "tar", "-c", "-f", "-", "-C", parent, name, NULL};
    tar_out_t t = {.fd = out_fd, .why = ret_why};
    vmm_exec_req_t req = {.cmd = {.argv = argv, .argc = 8, .cwd = "/"}, .stdin_fd = -1,
                          .max_output = SIZE_MAX, .timeout_ms = timeout_ms, .on_output = to_fd, .arg = &t};
    vmm_exec_result_t r;
    if (ret_why)
        ret_why[0] = '\0';
    int rc = vmm_exec(vm, &req, &r, ret_why);
    if (rc == 0 && t.failed) {
        vmm__why(ret_why, "download: writing the tar stream failed");
        return SBX_EIO;
    }
    return tar_result(rc, &r, "download", ret_why);
}
