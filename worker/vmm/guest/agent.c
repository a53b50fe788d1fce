/* The guest agent: PID 1 of every microVM. Boots (guest_init.c), then serves
 * exec, PTY and dial sessions multiplexed over one virtio-serial port
 * (vmmproto.h), reaping every orphan as init must. */
#include "guest.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <linux/random.h>
#include <sys/reboot.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "limits.h"
#include "vmmproto.h"

/* After the main process exits, its output is drained this long (children
 * that keep the pipes open do not hold the session). */
#define DRAIN_AFTER_EXIT_MS 200

typedef struct {
    uint32_t ch;          /* 0: free slot */
    uint8_t kind;
    pid_t pid;
    int fd_in, fd_out, fd_err;   /* -1 when closed; PTY and dial: fd_in == fd_out */
    uint8_t *pending;     /* input not yet written */
    size_t npending;
    int in_eof;           /* host ended input: close fd_in once pending is written */
    int reaped, status;
    long long reaped_at;
    char cgroup[64];
} session_t;

static session_t sessions[SBX_VMM_SESSIONS_MAX];
static int port_fd = -1;
static unsigned cg_seq;

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void send_frame(uint8_t type, uint32_t ch, const void *p, size_t n)
{
    uint8_t h[VMM_FRAME_HEADER];
    vmm_frame_header_put(h, type, ch, (uint32_t)n);
    if (guest_write_all(port_fd, h, sizeof(h)) != 0 || (n > 0 && guest_write_all(port_fd, p, n) != 0))
        guest_say("write port", errno);
}

static void send_error(uint32_t ch, int err, const char *what)
{
    uint8_t buf[512];
    vmm_put_u32(buf, (uint32_t)err);
    int n = snprintf((char *)buf + 4, sizeof(buf) - 4, "%s: %s", what, strerror(err));
    send_frame(VMM_F_ERROR, ch, buf, 4 + (size_t)(n < 0 ? 0 : n >= (int)sizeof(buf) - 4 ? (int)sizeof(buf) - 5 : n));
}

static void close_fd(int *fd) { if (*fd >= 0) close(*fd); *fd = -1; }

/* Kills the session's whole tree: its cgroup (cgroup.kill: nothing escapes by
 * setsid or double fork) and its process group. */
static void session_kill(session_t *s, int sig)
{
    if (s->pid > 0 && !s->reaped)
        kill(-s->pid, sig);
    if (s->cgroup[0] != '\0') {
        char path[128];
        snprintf(path, sizeof(path), "%s/cgroup.kill", s->cgroup);
        int fd = sig == SIGKILL ? open(path, O_WRONLY | O_CLOEXEC) : -1;
        if (fd >= 0) {
            if (write(fd, "1", 1) != 1)
                guest_say("cgroup.kill", errno);
            close(fd);
        }
    }
}

static void session_free(session_t *s)
{
    if (s->fd_in == s->fd_out)
        s->fd_in = -1;
    close_fd(&s->fd_in);
    close_fd(&s->fd_out);
    close_fd(&s->fd_err);
    free(s->pending);
    if (s->cgroup[0] != '\0')
        rmdir(s->cgroup); /* fails while processes remain; harmless */
    memset(s, 0, sizeof(*s));
    s->fd_in = s->fd_out = s->fd_err = -1;
}

static session_t *session_find(uint32_t ch)
{
    for (size_t i = 0; i < SBX_VMM_SESSIONS_MAX; i++)
        if (sessions[i].ch == ch && ch != 0)
            return &sessions[i];
    return NULL;
}

static void set_nonblock(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

/* Forks and execs cmd in a new session and cgroup: pipes, or the PTY slave
 * when pty_slave >= 0. Returns the pid, or -1 with errno (exec's own errno
 * travels back through a close-on-exec pipe). */
static pid_t spawn(session_t *s, const vmm_cmd_t *cmd, int in, int out, int err, int pty_slave)
{
    int ep[2];
    if (pipe2(ep, O_CLOEXEC) != 0)
        return -1;
    snprintf(s->cgroup, sizeof(s->cgroup), "/sys/fs/cgroup/s%u", ++cg_seq);
    if (mkdir(s->cgroup, 0755) != 0)
        s->cgroup[0] = '\0';
    pid_t pid = fork();
    if (pid == 0) {
        close(ep[0]);
        sigset_t all;
        sigfillset(&all);
        sigprocmask(SIG_UNBLOCK, &all, NULL);
        signal(SIGPIPE, SIG_DFL);
        if (s->cgroup[0] != '\0') {
            char path[128];
            snprintf(path, sizeof(path), "%s/cgroup.procs", s->cgroup);
            int fd = open(path, O_WRONLY | O_CLOEXEC);
            if (fd >= 0) {
                if (write(fd, "0", 1) != 1) { /* then only the process group holds the tree */ }
                close(fd);
            }
        }
        setsid();
        if (pty_slave >= 0) {
            ioctl(pty_slave, TIOCSCTTY, 0);
            in = out = err = pty_slave;
        }
        dup2(in, 0);
        dup2(out, 1);
        dup2(err, 2);
        for (int fd = 3; fd < 1024; fd++)
            if (fd != ep[1])
                close(fd);
        for (uint32_t i = 0; i < cmd->envc; i++)
            if (strncmp(cmd->env[i], "PATH=", 5) == 0)
                setenv("PATH", cmd->env[i] + 5, 1);
        if (chdir(cmd->cwd[0] ? cmd->cwd : "/") == 0)
            execvpe(cmd->argv[0], (char *const *)cmd->argv, (char *const *)cmd->env);
        int e = errno;
        if (write(ep[1], &e, sizeof(e)) != (ssize_t)sizeof(e)) { /* the parent sees EOF: treats as exec'd */ }
        _exit(127);
    }
    close(ep[1]);
    if (pid < 0) {
        close(ep[0]);
        return -1;
    }
    int e = 0;
    ssize_t n;
    do
        n = read(ep[0], &e, sizeof(e));
    while (n < 0 && errno == EINTR);
    close(ep[0]);
    if (n == (ssize_t)sizeof(e)) {
        waitpid(pid, NULL, 0);
        errno = e;
        return -1;
    }
    return pid;
}

static void open_cmd(session_t *s, const uint8_t *p, size_t len)
{
    const char *argv[SBX_MAX_ARGV + 1], *env[SBX_MAX_ENV + 1];
    vmm_cmd_t cmd;
    if (vmm_open_cmd_decode(p, len, &cmd, argv, SBX_MAX_ARGV, env, SBX_MAX_ENV) != 0) {
        send_error(s->ch, EINVAL, "open");
        session_free(s);
        return;
    }
    int pin[2] = {-1, -1}, pout[2] = {-1, -1}, perr[2] = {-1, -1}, master = -1, slave = -1;
    pid_t pid = -1;
    if (s->kind == VMM_OPEN_PTY) {
        struct winsize ws = {.ws_row = cmd.rows ? cmd.rows : 24, .ws_col = cmd.cols ? cmd.cols : 80};
        if (openpty(&master, &slave, NULL, NULL, &ws) != 0)
            goto fail;
        fcntl(master, F_SETFD, FD_CLOEXEC);
        fcntl(slave, F_SETFD, FD_CLOEXEC);
        pid = spawn(s, &cmd, -1, -1, -1, slave);
        close(slave);
        if (pid < 0)
            goto fail;
        set_nonblock(master);
        s->fd_in = s->fd_out = master;
    } else {
        if (pipe2(pin, O_CLOEXEC) != 0 || pipe2(pout, O_CLOEXEC) != 0 || pipe2(perr, O_CLOEXEC) != 0)
            goto fail;
        pid = spawn(s, &cmd, pin[0], pout[1], perr[1], -1);
        if (pid < 0)
            goto fail;
        close(pin[0]); close(pout[1]); close(perr[1]);
        s->fd_in = pin[1]; s->fd_out = pout[0]; s->fd_err = perr[0];
        set_nonblock(s->fd_in); set_nonblock(s->fd_out); set_nonblock(s->fd_err);
    }
    s->pid = pid;
    uint8_t b[4];
    vmm_put_u32(b, (uint32_t)pid);
    send_frame(VMM_F_OPENED, s->ch, b, 4);
    return;
fail:;
    int e = errno;
    for (int i = 0; i < 2; i++) {
        if (pin[i] >= 0) close(pin[i]);
        if (pout[i] >= 0) close(pout[i]);
        if (perr[i] >= 0) close(perr[i]);
    }
    if (master >= 0)
        close(master);
    send_error(s->ch, e, cmd.argv[0]);
    session_free(s);
}

static void open_dial(session_t *s, const uint8_t *p, size_t len)
{
    if (len != 3) {
        send_error(s->ch, EINVAL, "dial");
        session_free(s);
        return;
    }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(vmm_get_u16(p + 1)),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        send_error(s->ch, e, "dial 127.0.0.1");
        session_free(s);
        return;
    }
    set_nonblock(fd);
    s->fd_in = s->fd_out = fd;
    uint8_t b[4] = {0};
    send_frame(VMM_F_OPENED, s->ch, b, 4);
}

/* Writes what input is pending; closes (or shuts) the input at its end. */
static void flush_input(session_t *s)
{
    while (s->npending > 0 && s->fd_in >= 0) {
        ssize_t w = write(s->fd_in, s->pending, s->npending);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN)
            return;
        if (w < 0) { /* the reader went away: drop the input */
            s->npending = 0;
            break;
        }
        memmove(s->pending, s->pending + w, s->npending - (size_t)w);
        s->npending -= (size_t)w;
    }
    if (s->in_eof && s->npending == 0 && s->fd_in >= 0) {
        if (s->kind == VMM_OPEN_DIAL)
            shutdown(s->fd_in, SHUT_WR);
        else if (s->kind == VMM_OPEN_EXEC)
            close_fd(&s->fd_in);
        s->in_eof = 0;
    }
}

static void drop_all(void);

static void handle_frame(const vmm_frame_t *f, const uint8_t *p)
{
    if (f->type == VMM_F_HELLO) {
        /* the host's seed: VMs restored from one template share the kernel's
         * random state until it is reseeded from outside */
        if (f->len >= 4 + VMM_HELLO_SEED) {
            struct {
                int entropy_count, buf_size;
                uint8_t buf[VMM_HELLO_SEED];
            } seed = {VMM_HELLO_SEED * 8, VMM_HELLO_SEED, {0}};
            memcpy(seed.buf, p + 4, VMM_HELLO_SEED);
            int fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
            if (fd < 0 || ioctl(fd, RNDADDENTROPY, &seed) != 0 || ioctl(fd, RNDRESEEDCRNG) != 0)
                guest_say("reseed", errno);
            if (fd >= 0)
                close(fd);
            memset(&seed, 0, sizeof(seed));
        }
        if (f->len >= 4 + VMM_HELLO_SEED + VMM_HELLO_CLOCK) {
            const uint8_t *c = p + 4 + VMM_HELLO_SEED;
            struct timespec ts = {.tv_sec = (time_t)((uint64_t)vmm_get_u32(c + 4) << 32 | vmm_get_u32(c)),
                                  .tv_nsec = (long)(vmm_get_u32(c + 8) % 1000000000u)};
            if (ts.tv_sec > 0 && clock_settime(CLOCK_REALTIME, &ts) != 0)
                guest_say("set the clock", errno);
        }
        /* a new host: what an earlier one started (a restored VM's) is not its */
        drop_all();
        struct utsname u;
        uname(&u);
        uint8_t b[4 + sizeof(u.release)];
        vmm_put_u32(b, VMM_PROTO_VERSION);
        size_t n = strlen(u.release);
        memcpy(b + 4, u.release, n);
        send_frame(VMM_F_HELLO, 0, b, 4 + n);
        return;
    }
    session_t *s = session_find(f->channel);
    if (f->type == VMM_F_OPEN) {
        if (s != NULL || f->channel == 0 || f->len < 1) {
            send_error(f->channel, s ? EEXIST : EINVAL, "open");
            return;
        }
        for (size_t i = 0; i < SBX_VMM_SESSIONS_MAX && s == NULL; i++)
            if (sessions[i].ch == 0)
                s = &sessions[i];
        if (s == NULL) {
            send_error(f->channel, EAGAIN, "too many sessions");
            return;
        }
        s->ch = f->channel;
        s->kind = p[0];
        if (p[0] == VMM_OPEN_DIAL)
            open_dial(s, p, f->len);
        else
            open_cmd(s, p, f->len);
        return;
    }
    if (s == NULL)
        return; /* a late frame for a session that ended */
    switch (f->type) {
    case VMM_F_IN:
        if (f->len == 0) {
            s->in_eof = 1;
        } else if (s->fd_in >= 0) {
            uint8_t *np = realloc(s->pending, s->npending + f->len);
            if (np == NULL)
                break;
            s->pending = np;
            memcpy(s->pending + s->npending, p, f->len);
            s->npending += f->len;
        }
        flush_input(s);
        break;
    case VMM_F_RESIZE:
        if (f->len == 4 && s->kind == VMM_OPEN_PTY && s->fd_out >= 0) {
            struct winsize ws = {.ws_row = vmm_get_u16(p), .ws_col = vmm_get_u16(p + 2)};
            ioctl(s->fd_out, TIOCSWINSZ, &ws);
        }
        break;
    case VMM_F_KILL:
        session_kill(s, f->len == 4 ? (int)vmm_get_u32(p) : SIGKILL);
        break;
    case VMM_F_CLOSE:
        session_kill(s, SIGKILL);
        session_free(s);
        break;
    default:
        break;
    }
}

/* Sends EXIT and frees the session once it has ended: a dial when its socket
 * closed, a command when reaped and its output drained (or the drain time passed). */
static void maybe_finish(session_t *s)
{
    if (s->ch == 0)
        return;
    uint8_t b[5] = {0};
    if (s->kind == VMM_OPEN_DIAL) {
        if (s->fd_out >= 0)
            return;
    } else {
        if (!s->reaped)
            return;
        int drained = s->fd_out < 0 && s->fd_err < 0;
        if (!drained && now_ms() - s->reaped_at < DRAIN_AFTER_EXIT_MS)
            return;
        if (WIFSIGNALED(s->status)) {
            b[0] = VMM_EXIT_SIGNAL;
            vmm_put_u32(b + 1, (uint32_t)WTERMSIG(s->status));
        } else {
            vmm_put_u32(b + 1, (uint32_t)WEXITSTATUS(s->status));
        }
    }
    send_frame(VMM_F_EXIT, s->ch, b, 5);
    session_free(s);
}

static void pump_output(session_t *s, int *fd, uint8_t type)
{
    static uint8_t buf[VMM_DATA_CHUNK];
    ssize_t n = read(*fd, buf, sizeof(buf));
    if (n > 0) {
        send_frame(type, s->ch, buf, (size_t)n);
        return;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    /* EOF, or EIO from a PTY whose last holder closed it */
    if (*fd == s->fd_in)
        s->fd_in = -1;
    close_fd(fd);
}

static void reap(void)
{
    int st;
    pid_t pid;
    while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
        for (size_t i = 0; i < SBX_VMM_SESSIONS_MAX; i++)
            if (sessions[i].ch != 0 && sessions[i].pid == pid) {
                sessions[i].reaped = 1;
                sessions[i].status = st;
                sessions[i].reaped_at = now_ms();
            }
    }
}

/* The host went away: what it started goes too. */
static void drop_all(void)
{
    for (size_t i = 0; i < SBX_VMM_SESSIONS_MAX; i++)
        if (sessions[i].ch != 0) {
            session_kill(&sessions[i], SIGKILL);
            session_free(&sessions[i]);
        }
}

/* Reads what the port has into rbuf (have bytes held, cap in all) and handles
 * every whole frame; a broken stream drops the host's sessions. */
static void read_port(int port, uint8_t *rbuf, size_t cap, size_t *have)
{
    ssize_t r = read(port, rbuf + *have, cap - *have);
    if (r > 0)
        *have += (size_t)r;
    size_t off = 0;
    for (;;) {
        vmm_frame_t f;
        int pr = vmm_frame_header_parse(rbuf + off, *have - off, &f);
        if (pr < 0) { /* resynchronise on the next connection */
            guest_say("bad frame from host; dropping its sessions", 0);
            drop_all();
            off = *have;
            break;
        }
        if (pr > 0 || *have - off < VMM_FRAME_HEADER + f.len)
            break;
        handle_frame(&f, rbuf + off + VMM_FRAME_HEADER);
        off += VMM_FRAME_HEADER + f.len;
    }
    memmove(rbuf, rbuf + off, *have - off);
    *have -= off;
}

void guest_serve(int port)
{
    port_fd = port;
    for (size_t i = 0; i < SBX_VMM_SESSIONS_MAX; i++)
        session_free(&sessions[i]);
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    size_t cap = VMM_FRAME_HEADER + SBX_VMM_FRAME_MAX, have = 0;
    uint8_t *rbuf = malloc(cap);
    if (rbuf == NULL || sfd < 0) {
        guest_say("agent setup", errno);
        return;
    }
    int connected = 0;
    for (;;) {
        struct pollfd pf[2 + 3 * SBX_VMM_SESSIONS_MAX];
        session_t *who[2 + 3 * SBX_VMM_SESSIONS_MAX];
        int *whofd[2 + 3 * SBX_VMM_SESSIONS_MAX];
        nfds_t n = 0;
        size_t backlog = 0;
        for (size_t i = 0; i < SBX_VMM_SESSIONS_MAX; i++)
            backlog = sessions[i].npending > backlog ? sessions[i].npending : backlog;
        pf[n] = (struct pollfd){.fd = sfd, .events = POLLIN};
        who[n++] = NULL;
        pf[n] = (struct pollfd){.fd = port, .events = backlog < SBX_VMM_INPUT_PENDING_MAX ? POLLIN : 0};
        who[n++] = NULL;
        for (size_t i = 0; i < SBX_VMM_SESSIONS_MAX; i++) {
            session_t *s = &sessions[i];
            if (s->ch == 0)
                continue;
            if (s->fd_out >= 0) {
                pf[n] = (struct pollfd){.fd = s->fd_out, .events = POLLIN | (s->fd_out == s->fd_in && s->npending ? POLLOUT : 0)};
                who[n] = s; whofd[n++] = &s->fd_out;
            }
            if (s->fd_err >= 0) {
                pf[n] = (struct pollfd){.fd = s->fd_err, .events = POLLIN};
                who[n] = s; whofd[n++] = &s->fd_err;
            }
            if (s->fd_in >= 0 && s->fd_in != s->fd_out && s->npending) {
                pf[n] = (struct pollfd){.fd = s->fd_in, .events = POLLOUT};
                who[n] = s; whofd[n++] = &s->fd_in;
            }
        }
        int rc = poll(pf, n, 50);
        if (rc < 0 && errno != EINTR)
            guest_say("poll", errno);
        if (rc <= 0) {
            for (size_t i = 0; i < SBX_VMM_SESSIONS_MAX; i++)
                maybe_finish(&sessions[i]);
            continue;
        }
        if (pf[0].revents) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof(si)) > 0) {}
            reap();
        }
        if (pf[1].revents & POLLHUP) {
            /* no host on the other end: forget its sessions and any half frame */
            if (connected)
                drop_all();
            connected = 0;
            have = 0;
            struct timespec ts = {0, 50 * 1000 * 1000};
            nanosleep(&ts, NULL);
        } else if (pf[1].revents & POLLIN) {
            connected = 1;
            read_port(port, rbuf, cap, &have);
        }
        for (nfds_t i = 2; i < n; i++) {
            session_t *s = who[i];
            if (s->ch == 0 || *whofd[i] < 0 || pf[i].revents == 0)
                continue;
            if (pf[i].revents & POLLOUT)
                flush_input(s);
            if (pf[i].revents & (POLLIN | POLLHUP | POLLERR)) {
                if (whofd[i] == &s->fd_in) { /* the reader closed its input */
                    s->npending = 0;
                    close_fd(&s->fd_in);
                } else {
                    pump_output(s, whofd[i], whofd[i] == &s->fd_err ? VMM_F_ERR : VMM_F_OUT);
                }
            }
        }
        for (size_t i = 0; i < SBX_VMM_SESSIONS_MAX; i++)
            maybe_finish(&sessions[i]);
    }
}

int main(void)
{
    setenv("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", 1);
    signal(SIGPIPE, SIG_IGN);
    if (getpid() != 1) {
        dprintf(2, "sbx-agent: runs as a microVM's init only\n");
        return 2;
    }
    if (guest_boot() == 0) {
        int port = -1;
        for (int i = 0; i < 100 && (port = guest_open_port(GUEST_PORT_NAME)) < 0; i++) {
            struct timespec ts = {0, 50 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        if (port >= 0) {
            guest_say("ready", 0);
            guest_serve(port);
        } else {
            guest_say("no agent port", errno);
        }
    }
    sync();
    reboot(RB_POWER_OFF);
    return 1;
}
