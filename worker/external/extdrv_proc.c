/* The supervisor of an external runtime driver (docs/runtime-drivers.md):
 * starts it in its own process group with pipes for the control channel and
 * its stderr, reads its answers into the call table, relays its stderr to
 * the log, and kills and restarts it with back-off when it exits, breaks the
 * protocol or misses a deadline. */
#include "extdrv.h"
#include "fdutil.h"
#include "jsonx.h"
#include "log.h"
#include "sbuf.h"
#include "timeutil.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define EXTDRV_COMPONENT "driver"

extern char **environ;

typedef enum { EXTDRV_DOWN = 0, EXTDRV_READY, EXTDRV_BROKEN } extdrv_state_t;

struct extdrv {
    char **argv;
    size_t argc;
    char rundir[512];
    char streams[600];
    char worker_name[128];
    extdrv_table_t table;
    pthread_mutex_t mu;       /* guards the fields below */
    pthread_cond_t cv;        /* state changes, stop */
    extdrv_state_t state;
    bool stopping;
    pid_t pid;                /* the running driver (its group id too), 0 none */
    bool killed;              /* the current driver was told to die */
    char why[300];            /* why the current driver ended */
    api_error_t down_err;     /* why no driver is ready */
    extdrv_hello_t hello;
    char name[64];            /* the first hello's name */
    atomic_bool have_hello;
    long restarts;
    int64_t gen;              /* counts the drivers started; calls carry the one they went to */
    int in_fd;                /* the driver's stdin (write end), -1 none */
    pthread_mutex_t wmu;      /* one line at a time on in_fd */
    pthread_t sup;
    bool sup_started;
    const atomic_int *cancel;
};

/* ---- the child ----------------------------------------------------------- */

/* The driver's environment: the worker's without its SANDBOX_* settings
 * (a worker token among them), plus SBX_DRIVER_RUNDIR. */
static char **extdrv_env(const char *rundir)
{
    size_t n = 0;
    while (environ && environ[n])
        n++;
    char **env = calloc(n + 2, sizeof *env);
    if (!env)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "SANDBOX_", 8) != 0 && strncmp(environ[i], "SBX_DRIVER_RUNDIR=", 18) != 0)
            env[k++] = environ[i];
    size_t len = strlen(rundir) + sizeof "SBX_DRIVER_RUNDIR=";
    env[k] = malloc(len);
    if (!env[k]) {
        free(env);
        return NULL;
    }
    snprintf(env[k], len, "SBX_DRIVER_RUNDIR=%s", rundir);
    return env;
}

static void extdrv_env_free(char **env)
{
    if (!env)
        return;
    size_t n = 0;
    while (env[n + 1])
        n++;
    free(env[n]); /* the one made here is last */
    free(env);
}

/* Starts the driver: 0 with its pid and the parent's pipe ends. */
static int extdrv_spawn(extdrv_t *d, pid_t *ret_pid, int *ret_in, int *ret_out, int *ret_err, api_error_t *err)
{
    int in[2] = { -1, -1 }, out[2] = { -1, -1 }, er[2] = { -1, -1 };
    char **env = extdrv_env(d->rundir);
    int r = 0;
    if (!env) {
        r = api_error_set(err, API_INTERNAL, "out of memory");
        goto cleanup;
    }
    if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(er, O_CLOEXEC) < 0) {
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot make the driver's pipes: %s", strerror(errno));
        goto cleanup;
    }
    pid_t pid = fork();
    if (pid < 0) {
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot fork the driver: %s", strerror(errno));
        goto cleanup;
    }
    if (pid == 0) {
        setpgid(0, 0);
        /* a worker killed -9 takes its driver along (the supervisor thread
         * that forks lives as long as the runtime); its sandboxes stay */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() == 1)
            _exit(125);
        /* a clean signal state: nothing blocked, nothing ignored (a worker
         * started in the background by a shell ignores SIGINT and SIGQUIT,
         * and terminals in the driver's sandboxes would inherit that) */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        for (int sig = 1; sig < NSIG; sig++)
            if (sig != SIGKILL && sig != SIGSTOP)
                signal(sig, SIG_DFL);
        if (dup2(in[0], 0) < 0 || dup2(out[1], 1) < 0 || dup2(er[1], 2) < 0)
            _exit(126);
        /* stdio only: nothing of the worker's (or a controller's in
         * sandboxd all) reaches the driver or what it starts */
        fd_close_from(3);
        execvpe(d->argv[0], d->argv, env);
        static const char msg[] = "cannot execute the driver\n";
        ssize_t ignored = write(2, msg, sizeof msg - 1);
        (void)ignored;
        _exit(127);
    }
    setpgid(pid, pid);
    *ret_pid = pid;
    *ret_in = in[1];
    *ret_out = out[0];
    *ret_err = er[0];
    in[1] = out[0] = er[0] = -1;
cleanup:
    for (int i = 0; i < 2; i++) {
        if (in[i] >= 0 && (i == 0 || r < 0))
            close(in[i]);
        if (out[i] >= 0 && (i == 1 || r < 0))
            close(out[i]);
        if (er[i] >= 0 && (i == 1 || r < 0))
            close(er[i]);
    }
    extdrv_env_free(env);
    return r;
}

/* Kills driver generation gen's process group (once; 0: whichever runs), noting why. */
static void extdrv_kill_gen(extdrv_t *d, int64_t gen, const char *why)
{
    pthread_mutex_lock(&d->mu);
    if (d->pid > 0 && !d->killed && (gen == 0 || gen == d->gen)) {
        d->killed = true;
        snprintf(d->why, sizeof d->why, "%s", why);
        kill(-d->pid, SIGKILL);
    }
    pthread_mutex_unlock(&d->mu);
}

static void extdrv_kill(extdrv_t *d, const char *why) { extdrv_kill_gen(d, 0, why); }

/* ---- the reader and the stderr relay -------------------------------------- */

typedef struct extdrv_io {
    extdrv_t *d;
    int fd;
    pid_t pid;
    int status;               /* the driver's wait status once reaped */
    bool exited;              /* the reader saw it exit (not reaped: its group id stays ours) */
} extdrv_io_t;

/* Handles one line from the driver's stdout; < 0: a protocol error (err). */
static int extdrv_on_line(extdrv_t *d, const char *line, size_t len, api_error_t *err)
{
    extdrv_msg_t m;
    if (extdrv_msg_parse(extdrv_name(d), line, len, &m, err) < 0)
        return SBX_EINVAL;
    if (m.id == 0)
        return 0;
    int r = extdrv_table_complete(&d->table, &m);
    extdrv_msg_release(&m);
    if (r < 0)
        return api_error_set(err, API_RUNTIME_ERROR, "driver %s answered id %lld, which is not in flight",
                             extdrv_name(d), (long long)m.id);
    return 0;
}

/* Reads the driver's stdout until it ends, breaks the protocol or is
 * killed; reaps the driver once it exits. */
static void *extdrv_reader_main(void *arg)
{
    extdrv_io_t *io = arg;
    extdrv_t *d = io->d;
    sbuf_t line;
    char buf[65536];
    bool stop = false;
    sbuf_init(&line, SBX_DRIVER_LINE_MAX);
    while (!stop) {
        struct pollfd p = { .fd = io->fd, .events = POLLIN };
        int n = poll(&p, 1, 200);
        siginfo_t si;
        memset(&si, 0, sizeof si);
        if (!io->exited && waitid(P_PID, (id_t)io->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == io->pid)
            io->exited = true;
        if (n <= 0) {
            pthread_mutex_lock(&d->mu);
            stop = d->killed && io->exited;
            pthread_mutex_unlock(&d->mu);
            if (io->exited && n == 0)
                stop = true; /* exited; what it wrote is read (poll said nothing more) */
            continue;
        }
        ssize_t got = read(io->fd, buf, sizeof buf);
        if (got < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (got <= 0) {
            /* its end, or only its stdout's? (an exit closes the pipe first) */
            for (int i = 0; i < 10 && !io->exited; i++) {
                siginfo_t si;
                memset(&si, 0, sizeof si);
                if (waitid(P_PID, (id_t)io->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == io->pid)
                    io->exited = true;
                else
                    usleep(50000);
            }
            extdrv_kill(d, io->exited ? "it exited" : got == 0 ? "it closed its stdout" : "its stdout failed");
            break;
        }
        for (ssize_t i = 0; i < got && !stop; ) {
            const char *nl = memchr(buf + i, '\n', (size_t)(got - i));
            size_t take = nl ? (size_t)(nl - (buf + i)) : (size_t)(got - i);
            if (line.len + take + 1 > SBX_DRIVER_LINE_MAX) {
                extdrv_kill(d, "it sent a line over 1 MiB");
                stop = true;
                break;
            }
            sbuf_append(&line, buf + i, take);
            i += (ssize_t)take;
            if (!nl)
                break;
            i++;
            api_error_t perr;
            if (extdrv_on_line(d, line.data ? line.data : "", line.len, &perr) < 0) {
                log_warn(EXTDRV_COMPONENT, "%s", perr.message);
                extdrv_kill(d, "it broke the protocol");
                stop = true;
            }
            sbuf_reset(&line);
        }
    }
    sbuf_release(&line);
    return NULL;
}

/* Relays the driver's stderr lines to the log, each cut at
 * SBX_DRIVER_STDERR_LINE_MAX bytes. */
static void *extdrv_stderr_main(void *arg)
{
    extdrv_io_t *io = arg;
    char line[SBX_DRIVER_STDERR_LINE_MAX + 1];
    size_t len = 0;
    bool cut = false;
    char buf[4096];
    for (;;) {
        ssize_t got = read(io->fd, buf, sizeof buf);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        for (ssize_t i = 0; i < got; i++) {
            if (buf[i] == '\n') {
                line[len] = '\0';
                log_info(EXTDRV_COMPONENT, "driver: %s%s", line, cut ? " [cut]" : "");
                len = 0;
                cut = false;
            } else if (len < SBX_DRIVER_STDERR_LINE_MAX) {
                line[len++] = buf[i] == '\r' ? ' ' : buf[i];
            } else {
                cut = true;
            }
        }
    }
    if (len) {
        line[len] = '\0';
        log_info(EXTDRV_COMPONENT, "driver: %s", line);
    }
    return NULL;
}

/* ---- calls ---------------------------------------------------------------- */

/* Writes the whole line to the driver's stdin by deadline_ms. */
static int extdrv_write_line(extdrv_t *d, int fd, const char *line, size_t len, int64_t deadline_ms,
                             api_error_t *err)
{
    size_t off = 0;
    while (off < len) {
        struct pollfd p = { .fd = fd, .events = POLLOUT };
        int64_t left = deadline_ms - time_mono_ms();
        if (left <= 0)
            return api_error_set(err, API_RUNTIME_ERROR, "driver %s does not read its stdin", extdrv_name(d));
        if (poll(&p, 1, left > 200 ? 200 : (int)left) <= 0)
            continue;
        ssize_t w = write(fd, line + off, len - off);
        if (w < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (w < 0)
            return api_error_set(err, API_RUNTIME_ERROR, "driver %s is not running (its stdin: %s)",
                                 extdrv_name(d), strerror(errno));
        off += (size_t)w;
    }
    return 0;
}

/* Sends method to the driver now running (no wait for ready). */
static int extdrv_send_now(extdrv_t *d, int fd, const char *method, json_object *params, int64_t deadline_ms,
                           extdrv_call_t **ret_call, api_error_t *err)
{
    size_t len = 0;
    extdrv_call_t *c = extdrv_table_add(&d->table, deadline_ms);
    char *line = c ? extdrv_request_line(c->id, method, params, &len) : NULL;
    if (c) {
        pthread_mutex_lock(&d->mu);
        c->gen = d->gen;
        pthread_mutex_unlock(&d->mu);
    }
    if (!line) {
        extdrv_table_remove(&d->table, c);
        return api_error_set(err, API_INTERNAL, "out of memory");
    }
    if (len > SBX_DRIVER_LINE_MAX) {
        free(line);
        extdrv_table_remove(&d->table, c);
        return api_error_set(err, API_PAYLOAD_TOO_LARGE, "the %s request is over 1 MiB", method);
    }
    pthread_mutex_lock(&d->wmu);
    int r = extdrv_write_line(d, fd, line, len, deadline_ms, err);
    pthread_mutex_unlock(&d->wmu);
    free(line);
    if (r < 0) {
        extdrv_table_remove(&d->table, c);
        return r;
    }
    *ret_call = c;
    return 0;
}

int extdrv_send(extdrv_t *d, const char *method, json_object *params, long timeout_ms, extdrv_call_t **ret_call,
                api_error_t *err)
{
    int64_t deadline = time_deadline_ms(timeout_ms);
    int r = 0, fd = -1;
    pthread_mutex_lock(&d->mu);
    while (d->state == EXTDRV_DOWN && !d->stopping) {
        if (d->cancel && atomic_load(d->cancel))
            break;
        int64_t now = time_mono_ms();
        if (now >= deadline)
            break;
        int64_t until = deadline < now + 100 ? deadline : now + 100;
        struct timespec ts = { .tv_sec = (time_t)(until / 1000), .tv_nsec = (long)(until % 1000) * 1000000L };
        pthread_cond_timedwait(&d->cv, &d->mu, &ts);
    }
    if (d->state == EXTDRV_READY)
        fd = d->in_fd;
    else if (d->cancel && atomic_load(d->cancel))
        r = api_error_set(err, API_CANCELLED, "the worker is stopping");
    else
        r = api_error_set(err, API_RUNTIME_ERROR, "driver %s is not running: %s", extdrv_name(d),
                          d->down_err.message[0] ? d->down_err.message : "it has not started yet");
    pthread_mutex_unlock(&d->mu);
    if (r == 0)
        r = extdrv_send_now(d, fd, method, params, deadline, ret_call, err);
    if (params)
        json_object_put(params);
    return r;
}

int extdrv_finish(extdrv_t *d, extdrv_call_t *c, json_object **ret_result, api_error_t *err)
{
    int w = extdrv_table_wait(&d->table, c, d->cancel);
    int r = 0;
    if (w == SBX_ETIMEOUT) {
        char why[200];
        snprintf(why, sizeof why, "it did not answer call %lld in time", (long long)c->id);
        extdrv_kill_gen(d, c->gen, why); /* not a driver started since */
        r = api_error_set(err, API_RUNTIME_ERROR,
                          "driver %s did not answer in time; it was killed and is being restarted", extdrv_name(d));
    } else if (w == SBX_ECANCELLED) {
        r = api_error_set(err, API_CANCELLED, "the worker is stopping");
    } else if (c->rc < 0) {
        *err = c->err;
        r = c->rc;
    } else if (ret_result) {
        *ret_result = c->result;
        c->result = NULL;
    }
    extdrv_table_remove(&d->table, c);
    return r;
}

int extdrv_call(extdrv_t *d, const char *method, json_object *params, long timeout_ms, json_object **ret_result,
                api_error_t *err)
{
    extdrv_call_t *c = NULL;
    int r = extdrv_send(d, method, params, timeout_ms, &c, err);
    if (r < 0)
        return r;
    return extdrv_finish(d, c, ret_result, err);
}

bool extdrv_call_done(extdrv_t *d, extdrv_call_t *c) { return extdrv_table_done(&d->table, c); }

void extdrv_call_extend(extdrv_t *d, extdrv_call_t *c, long timeout_ms)
{
    extdrv_table_set_deadline(&d->table, c, time_deadline_ms(timeout_ms));
}

/* ---- the supervisor thread ------------------------------------------------ */

/* Says hello to the driver just started: 0 once it answered protocol 1. */
static int extdrv_hello(extdrv_t *d, int in_fd, api_error_t *err)
{
    json_object *p = json_object_new_object(), *protos = json_object_new_array(), *res = NULL;
    json_object_array_add(protos, json_object_new_int(EXTDRV_PROTOCOL));
    jsonx_add(p, "protocols", protos);
    jsonx_add_str(p, "worker", d->worker_name);
    extdrv_call_t *c = NULL;
    int r = extdrv_send_now(d, in_fd, "hello", p, time_deadline_ms(EXTDRV_HELLO_MS), &c, err);
    json_object_put(p);
    if (r < 0)
        return r;
    int w = extdrv_table_wait(&d->table, c, NULL);
    if (w == SBX_ETIMEOUT)
        r = api_error_set(err, API_RUNTIME_ERROR, "the driver did not answer hello within %d s",
                          EXTDRV_HELLO_MS / 1000);
    else if (c->rc < 0) {
        *err = c->err;
        r = c->rc;
    } else {
        res = c->result;
        c->result = NULL;
    }
    extdrv_table_remove(&d->table, c);
    if (r < 0)
        return r;
    extdrv_hello_t h;
    r = extdrv_hello_parse(res, &h, err);
    json_object_put(res);
    if (r < 0)
        return r;
    pthread_mutex_lock(&d->mu);
    d->hello = h;
    if (!d->have_hello)
        snprintf(d->name, sizeof d->name, "%s", h.name); /* never rewritten: read without the lock */
    d->have_hello = true;
    pthread_mutex_unlock(&d->mu);
    return 0;
}

/* Runs one driver from its start to its end; returns how long it lived. */
static int64_t extdrv_run_once(extdrv_t *d)
{
    pid_t pid = 0;
    int in_fd = -1, out_fd = -1, err_fd = -1;
    api_error_t err;
    int64_t t0 = time_mono_ms();
    if (extdrv_spawn(d, &pid, &in_fd, &out_fd, &err_fd, &err) < 0) {
        pthread_mutex_lock(&d->mu);
        d->down_err = err;
        pthread_mutex_unlock(&d->mu);
        log_warn(EXTDRV_COMPONENT, "failed to start the driver %s: %s", d->argv[0], err.message);
        return 0;
    }
    pthread_mutex_lock(&d->mu);
    d->pid = pid;
    d->gen++;
    d->killed = false;
    d->why[0] = '\0';
    pthread_mutex_unlock(&d->mu);
    extdrv_io_t rio = { .d = d, .fd = out_fd, .pid = pid }, eio = { .d = d, .fd = err_fd, .pid = pid };
    pthread_t reader, relay;
    bool have_reader = pthread_create(&reader, NULL, extdrv_reader_main, &rio) == 0;
    bool have_relay = pthread_create(&relay, NULL, extdrv_stderr_main, &eio) == 0;
    if (!have_reader)
        extdrv_kill(d, "no reader thread");
    else if (extdrv_hello(d, in_fd, &err) < 0) {
        log_warn(EXTDRV_COMPONENT, "driver %s: %s", d->argv[0], err.message);
        pthread_mutex_lock(&d->mu);
        d->down_err = err;
        if (strstr(err.message, "speaks protocol"))
            d->state = EXTDRV_BROKEN;
        pthread_mutex_unlock(&d->mu);
        extdrv_kill(d, "its hello failed");
    } else {
        pthread_mutex_lock(&d->mu);
        d->state = EXTDRV_READY;
        d->in_fd = in_fd;
        d->down_err.message[0] = '\0';
        pthread_cond_broadcast(&d->cv);
        pthread_mutex_unlock(&d->mu);
        log_info(EXTDRV_COMPONENT, "driver %s %s ready (pid %d, protocol %d)", d->hello.name, d->hello.version,
                 (int)pid, EXTDRV_PROTOCOL);
    }
    if (have_reader)
        pthread_join(reader, NULL);
    pthread_mutex_lock(&d->mu);
    if (d->state == EXTDRV_READY)
        d->state = EXTDRV_DOWN;
    d->in_fd = -1;
    if (!d->killed) {
        d->killed = true;
        snprintf(d->why, sizeof d->why, "it exited");
    }
    char why[300];
    snprintf(why, sizeof why, "%s", d->why);
    pthread_mutex_unlock(&d->mu);
    kill(-pid, SIGKILL); /* whatever of its group is left (the leader is not reaped yet: the id is still its) */
    pthread_mutex_lock(&d->wmu); /* no writer is between its poll and its write */
    close(in_fd);
    pthread_mutex_unlock(&d->wmu);
    waitpid(pid, &rio.status, 0);
    if (have_relay)
        pthread_join(relay, NULL);
    close(out_fd);
    close(err_fd);
    char msg[400];
    snprintf(msg, sizeof msg, "driver %s restarted: %s", extdrv_name(d), why);
    extdrv_table_fail_all(&d->table, API_RUNTIME_ERROR, msg);
    pthread_mutex_lock(&d->mu);
    d->pid = 0;
    if (!d->down_err.message[0])
        api_error_set(&d->down_err, API_RUNTIME_ERROR, "%s", msg);
    bool quiet = d->stopping;
    pthread_mutex_unlock(&d->mu);
    if (!quiet) {
        int st = rio.status;
        log_warn(EXTDRV_COMPONENT, "driver %s (pid %d) ended: %s (%s %d)", extdrv_name(d), (int)pid, why,
                 WIFSIGNALED(st) ? "signal" : "exit status", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
    }
    return time_mono_ms() - t0;
}

static void *extdrv_sup_main(void *arg)
{
    extdrv_t *d = arg;
    int64_t backoff = SBX_DRIVER_BACKOFF_MIN_MS;
    for (;;) {
        pthread_mutex_lock(&d->mu);
        bool done = d->stopping || d->state == EXTDRV_BROKEN;
        pthread_mutex_unlock(&d->mu);
        if (done)
            break;
        int64_t lived = extdrv_run_once(d);
        if (lived >= SBX_DRIVER_STABLE_MS)
            backoff = SBX_DRIVER_BACKOFF_MIN_MS;
        pthread_mutex_lock(&d->mu);
        if (!d->stopping && d->state != EXTDRV_BROKEN) {
            d->restarts++;
            log_info(EXTDRV_COMPONENT, "restarting driver %s in %lld ms", d->argv[0], (long long)backoff);
            int64_t until = time_mono_ms() + backoff;
            while (!d->stopping && time_mono_ms() < until) {
                struct timespec ts = { .tv_sec = (time_t)(until / 1000), .tv_nsec = (long)(until % 1000) * 1000000L };
                pthread_cond_timedwait(&d->cv, &d->mu, &ts);
            }
        }
        pthread_mutex_unlock(&d->mu);
        backoff = backoff * 2 > SBX_DRIVER_BACKOFF_MAX_MS ? SBX_DRIVER_BACKOFF_MAX_MS : backoff * 2;
    }
    return NULL;
}

/* ---- life cycle ------------------------------------------------------------- */

static void extdrv_free(extdrv_t *d)
{
    if (!d)
        return;
    for (size_t i = 0; d->argv && i < d->argc; i++)
        free(d->argv[i]);
    free(d->argv);
    extdrv_table_release(&d->table);
    pthread_mutex_destroy(&d->mu);
    pthread_mutex_destroy(&d->wmu);
    pthread_cond_destroy(&d->cv);
    free(d);
}

int extdrv_start(const char *const *argv, size_t argc, const char *rundir, const char *worker_name,
                 extdrv_t **ret, api_error_t *err)
{
    extdrv_t *d = calloc(1, sizeof *d);
    if (!d)
        return api_error_set(err, API_INTERNAL, "out of memory");
    extdrv_table_init(&d->table);
    pthread_mutex_init(&d->mu, NULL);
    pthread_mutex_init(&d->wmu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&d->cv, &ca);
    pthread_condattr_destroy(&ca);
    d->in_fd = -1;
    snprintf(d->rundir, sizeof d->rundir, "%s", rundir);
    snprintf(d->streams, sizeof d->streams, "%s/streams.sock", rundir);
    snprintf(d->worker_name, sizeof d->worker_name, "%s", worker_name ? worker_name : "");
    d->argv = calloc(argc + 1, sizeof *d->argv);
    for (size_t i = 0; d->argv && i < argc; i++, d->argc++)
        if (!(d->argv[i] = strdup(argv[i])))
            break;
    if (!d->argv || d->argc != argc || pthread_create(&d->sup, NULL, extdrv_sup_main, d) != 0) {
        extdrv_free(d);
        return api_error_set(err, API_INTERNAL, "out of memory");
    }
    d->sup_started = true;
    *ret = d;
    return 0;
}

int extdrv_wait_ready(extdrv_t *d, long timeout_ms, extdrv_hello_t *ret, api_error_t *err)
{
    int64_t deadline = time_deadline_ms(timeout_ms);
    int r = 0;
    pthread_mutex_lock(&d->mu);
    while (d->state == EXTDRV_DOWN && !d->stopping && time_mono_ms() < deadline) {
        int64_t until = deadline;
        struct timespec ts = { .tv_sec = (time_t)(until / 1000), .tv_nsec = (long)(until % 1000) * 1000000L };
        pthread_cond_timedwait(&d->cv, &d->mu, &ts);
    }
    if (d->state == EXTDRV_READY)
        *ret = d->hello;
    else
        r = api_error_set(err, API_RUNTIME_ERROR, "%s",
                          d->down_err.message[0] ? d->down_err.message : "the driver did not answer hello in time");
    pthread_mutex_unlock(&d->mu);
    return r;
}

const char *extdrv_name(extdrv_t *d)
{
    return atomic_load(&d->have_hello) ? d->name : (d->argv && d->argv[0] ? d->argv[0] : "driver");
}

const char *extdrv_streams_path(extdrv_t *d) { return d->streams; }

long extdrv_restarts(extdrv_t *d)
{
    pthread_mutex_lock(&d->mu);
    long n = d->restarts;
    pthread_mutex_unlock(&d->mu);
    return n;
}

void extdrv_set_cancel(extdrv_t *d, const atomic_int *flag) { d->cancel = flag; }

void extdrv_stop(extdrv_t *d)
{
    if (!d)
        return;
    /* stopping first: the driver's exit after shutdown is not a restart */
    pthread_mutex_lock(&d->mu);
    bool ready = d->state == EXTDRV_READY;
    d->stopping = true;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    if (ready) {
        api_error_t ignored;
        d->cancel = NULL; /* the worker's stop flag is set by now */
        extdrv_call(d, "shutdown", NULL, EXTDRV_SHORT_MS, NULL, &ignored);
    }
    pthread_mutex_lock(&d->mu);
    pid_t pid = d->pid;
    pthread_mutex_unlock(&d->mu);
    if (pid > 0) {
        /* it was asked to exit: give it a moment, then its group goes */
        for (int i = 0; i < 50; i++) {
            pthread_mutex_lock(&d->mu);
            pid = d->pid;
            pthread_mutex_unlock(&d->mu);
            if (pid <= 0)
                break;
            if (i == 30)
                kill(-pid, SIGTERM);
            usleep(100000);
        }
        extdrv_kill(d, "the worker is stopping");
    }
    if (d->sup_started)
        pthread_join(d->sup, NULL);
    extdrv_free(d);
}
