/* envd's process.Process service over the runtime's shells: each started
 * process is a runtime_shell_open (a terminal when a pty is asked for,
 * else pipes with stdout and stderr apart), held in the forwarder's
 * process table with one thread that reads its output and fans it out to
 * the streams following it (Start's and Connect's), each with a bounded
 * queue; a stream that falls behind is cut, the process goes on. Output
 * no stream follows is dropped. A process outlives its streams: only
 * SendSignal, its own exit, the sandbox going away or the worker stopping
 * end it (docs/worker.md "E2B envd"). */
#include "envd.h"
#include "envd_internal.h"
#include "b64.h"
#include "errors.h"
#include "jsonx.h"
#include "log.h"
#include "shellframe.h"
#include "spec.h"
#include "timeutil.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Processes at once, per sandbox and per worker (more: resource_exhausted). */
#define ENVD_PROC_MAX_PER_SANDBOX 64
#define ENVD_PROC_MAX             1024
/* ... and per tenant (the request line's, which the controller signs):
 * processes outlive their connections, so the tenant's caps on the
 * controller do not bound them; one tenant cannot take the whole table. */
#define ENVD_PROC_MAX_PER_TENANT  256
/* The first pid handed out (worker-wide counter; not the sandbox's pids). */
#define ENVD_FIRST_PID            1000
/* A stream's queue of events not yet sent, at most (then it is cut). */
#define ENVD_SUB_QUEUE_MAX        (1u << 20)
/* Output read at once: a data event in base64 stays within one frame. */
#define ENVD_READ_CHUNK           (32u * 1024u)
/* Stdin waiting to be written to a process, at most; SendInput waits for
 * room up to ENVD_INPUT_WAIT_MS. */
#define ENVD_INPUT_MAX            (256u * 1024u)
#define ENVD_INPUT_WAIT_MS        30000
/* A keepalive event after this long without one on a stream. */
#define ENVD_KEEPALIVE_MS         15000
/* Sandboxes whose /bin/bash presence is remembered. */
#define ENVD_SHELL_CACHE          256

/* An event on its way to one stream. */
typedef struct envd_msg {
    struct envd_msg *next;
    size_t len;
    char data[];
} envd_msg_t;

typedef struct envd_proc envd_proc_t;

/* A stream following a process, owned by its connection's thread. */
typedef struct envd_sub {
    struct envd_sub *next;    /* in its process's list */
    envd_proc_t *proc;        /* NULL once detached (ended, cut) */
    envd_msg_t *head, *tail;
    size_t bytes;
    bool ended;               /* the end event is queued: the stream ends after it */
    bool cut;                 /* it fell ENVD_SUB_QUEUE_MAX behind */
    bool starter;             /* the Start's own stream (its deadline is the process's) */
    bool timed_out;           /* starter: its process was killed at the deadline: ends deadline_exceeded */
    int wake[2];              /* a byte when something was queued */
} envd_sub_t;

struct envd_proc {
    envd_proc_t *next;
    envd_table_t *t;
    forward_t *f;
    int refs;                 /* its thread's and each waiting SendInput's */
    bool started;             /* the shell is open: lookups find it */
    bool ended;               /* its end event went out: lookups no longer find it */
    char sandbox_id[SBX_ID_MAX];
    uint32_t pid;
    char *tag;                /* NULL none */
    char *config;             /* its ProcessConfig as JSON, for List */
    char **argv;              /* the command as it ran (argc strings), for its record */
    size_t argc;
    char caller[ENVD_CALLER_MAX + 1];   /* the Start's caller ("" unknown) */
    char tenant[ENVD_TENANT_MAX + 1];   /* the sandbox's tenant ("" unknown) */
    int64_t t0;               /* when it started (monotonic ms) */
    bool tty;
    runtime_shell_t *sh;
    int fd;
    /* A runtime whose shells are terminals only (an external driver's):
     * a command without a pty and without stdin runs as an exec instead
     * (runtime_exec, its output live through a sink), spec its request. */
    bool exec_mode;
    exec_spec_t spec;
    char ref[80];             /* exec mode: the runtime object it runs in */
    runtime_shell_early_t early;
    int wake[2];              /* a byte when there is stdin, a signal, a resize */
    char *in;                 /* stdin waiting: ENVD_INPUT_MAX bytes once used */
    size_t in_len;
    bool close_stdin;         /* once what waits is written */
    int signal;               /* 9 or 15 asked; 0 none */
    int64_t deadline_ms;      /* Start's connect-timeout-ms: killed then, as envd does; 0 none */
    unsigned want_cols, want_rows;
    envd_sub_t *subs;
    runtime_shell_mux_t mux;  /* the output's framing without a terminal (the thread's own) */
};

struct envd_table {
    pthread_mutex_t mu;
    pthread_cond_t cond;      /* a thread ended; stdin was taken */
    envd_proc_t *procs;
    size_t nprocs;
    size_t threads;           /* process threads running */
    uint32_t next_pid;
    struct {
        char sandbox_id[SBX_ID_MAX];
        bool bash;
    } shells[ENVD_SHELL_CACHE];
    size_t nshells, shells_next;
};

/* ---- the table ---------------------------------------------------------- */

static envd_table_t *envd_table(forward_t *f)
{
    pthread_mutex_lock(&f->mu);
    if (!f->envd) {
        envd_table_t *t = calloc(1, sizeof *t);
        if (t) {
            pthread_mutex_init(&t->mu, NULL);
            pthread_cond_init(&t->cond, NULL);
            t->next_pid = ENVD_FIRST_PID;
            f->envd = t;
        }
    }
    envd_table_t *t = f->envd;
    pthread_mutex_unlock(&f->mu);
    return t;
}

void forward_envd_stop(forward_t *f)
{
    envd_table_t *t = f->envd;
    if (!t)
        return;
    /* Every process thread watches the forwarder's stop pipe: each kills
     * its process, ends its streams and leaves. */
    pthread_mutex_lock(&t->mu);
    if (t->threads > 0)
        log_info(ENVD_COMPONENT, "stopping: ending %zu envd processes", t->threads);
    while (t->threads > 0)
        pthread_cond_wait(&t->cond, &t->mu);
    pthread_mutex_unlock(&t->mu);
    pthread_cond_destroy(&t->cond);
    pthread_mutex_destroy(&t->mu);
    free(t);
    f->envd = NULL;
}

static void envd_wake(int fd)
{
    char b = 1;
    ssize_t w = write(fd, &b, 1);
    (void)w;                      /* a full pipe is already a wake-up */
}

static void envd_drain(int fd)
{
    char buf[64];
    while (read(fd, buf, sizeof buf) > 0)
        ;
}

/* Drops a reference (t->mu held); the last one frees p. */
static void envd_proc_unref(envd_proc_t *p)
{
    if (--p->refs > 0)
        return;
    free(p->tag);
    free(p->config);
    free(p->in);
    for (size_t i = 0; p->argv && i < p->argc; i++)
        free(p->argv[i]);
    free(p->argv);
    exec_spec_release(&p->spec);
    free(p);
}

/* Takes p out of the table's list (t->mu held). */
static void envd_proc_unlink(envd_table_t *t, envd_proc_t *p)
{
    for (envd_proc_t **pp = &t->procs; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            t->nprocs--;
            return;
        }
}

/* The live process of sandbox the selector names (t->mu held), or NULL. */
static envd_proc_t *envd_proc_find(envd_table_t *t, const char *sandbox_id, uint32_t pid, const char *tag)
{
    for (envd_proc_t *p = t->procs; p; p = p->next)
        if (p->started && !p->ended && strcmp(p->sandbox_id, sandbox_id) == 0 &&
            (tag ? p->tag && strcmp(p->tag, tag) == 0 : p->pid == pid))
            return p;
    return NULL;
}

/* ---- events -------------------------------------------------------------- */

/* Queues a copy of the n bytes of json on sub (t->mu held); a sub past
 * ENVD_SUB_QUEUE_MAX is cut instead. */
static void envd_sub_push(envd_sub_t *s, const char *json, size_t n)
{
    if (s->cut || s->ended)
        return;
    envd_msg_t *m = s->bytes + n > ENVD_SUB_QUEUE_MAX ? NULL : malloc(sizeof *m + n);
    if (!m) {
        s->cut = true;
    } else {
        m->next = NULL;
        m->len = n;
        memcpy(m->data, json, n);
        if (s->tail)
            s->tail->next = m;
        else
            s->head = m;
        s->tail = m;
        s->bytes += n;
    }
    envd_wake(s->wake[1]);
}

/* Queues json for every stream following p (t->mu held); the cut ones
 * leave the list. */
static void envd_publish_locked(envd_proc_t *p, const char *json, size_t n)
{
    for (envd_sub_t **sp = &p->subs; *sp;) {
        envd_sub_t *s = *sp;
        envd_sub_push(s, json, n);
        if (s->cut) {
            *sp = s->next;
            s->proc = NULL;
        } else {
            sp = &s->next;
        }
    }
}

/* A data event of the n output bytes of stream ("stdout", "stderr", "pty"). */
static void envd_publish_data(envd_proc_t *p, const char *stream, const char *data, size_t n)
{
    pthread_mutex_lock(&p->t->mu);
    bool anyone = p->subs != NULL;
    pthread_mutex_unlock(&p->t->mu);
    if (!anyone || n == 0)
        return;                   /* output nobody follows is dropped */
    char *b = b64_encode(data, n);
    size_t cap = (b ? strlen(b) : 0) + 64;
    char *js = b ? malloc(cap) : NULL;
    if (js) {
        int len = snprintf(js, cap, "{\"event\":{\"data\":{\"%s\":\"%s\"}}}", stream, b);
        pthread_mutex_lock(&p->t->mu);
        envd_publish_locked(p, js, (size_t)len);
        pthread_mutex_unlock(&p->t->mu);
    }
    free(js);
    free(b);
}

/* runtime_shell_mux_push's emit. */
static int envd_output_stream(void *ud, int stream, const char *d, size_t n)
{
    envd_publish_data(ud, stream == 1 ? "stdout" : "stderr", d, n);
    return 0;
}

/* The output read from the shell's stream: on a terminal all "pty"; else
 * its framing (RUNTIME_SHELL_MUX_HEADER) undone into stdout and stderr,
 * other streams dropped. */
static void envd_output(envd_proc_t *p, const char *d, size_t n)
{
    if (p->tty)
        envd_publish_data(p, "pty", d, n);
    else
        runtime_shell_mux_push(&p->mux, d, n, envd_output_stream, p);
}

/* ---- the process's thread ----------------------------------------------- */

/* An exec-mode process's output, as the runtime reads it: published in
 * pieces whose data events stay within one frame. */
static void envd_exec_write(void *ud, int stream, const char *d, size_t n)
{
    envd_proc_t *p = ud;
    if (stream != 1 && stream != 2)
        return;
    while (n > 0) {
        size_t k = n < ENVD_READ_CHUNK ? n : ENVD_READ_CHUNK;
        envd_publish_data(p, stream == 1 ? "stdout" : "stderr", d, k);
        d += k;
        n -= k;
    }
}

/* Whether an exec-mode process must be killed now: a signal asked, its
 * lifetime over, the worker stopping. */
static bool envd_exec_cancelled(void *ud)
{
    envd_proc_t *p = ud;
    pthread_mutex_lock(&p->t->mu);
    bool sig = p->signal != 0;
    pthread_mutex_unlock(&p->t->mu);
    return sig || forward_stopping(p->f) || (p->deadline_ms && time_mono_ms() >= p->deadline_ms);
}

/* Runs an exec-mode process to its end: 0 with its exit code, or the
 * signal that killed it (*ret_sig, 9 or 15) or the worker stopping. */
static int envd_exec_run(envd_proc_t *p, int *ret_code, int *ret_sig, bool *ret_stopping, bool *ret_deadline,
                         api_error_t *err)
{
    runtime_output_sink_t sink = { .write = envd_exec_write, .cancelled = envd_exec_cancelled, .ud = p };
    runtime_exec_result_t res;
    /* The output goes to the streams as it comes; the result keeps none. */
    int r = runtime_exec(p->f->rt, p->ref, &p->spec, 1, &sink, &res, err);
    if (r < 0)
        return r;
    pthread_mutex_lock(&p->t->mu);
    *ret_sig = res.cancelled ? (p->signal ? p->signal : 9) : res.timed_out ? 9 : 0;
    *ret_deadline = !res.cancelled && res.timed_out;
    pthread_mutex_unlock(&p->t->mu);
    *ret_stopping = res.cancelled && forward_stopping(p->f);
    *ret_code = res.exit_code;
    runtime_exec_result_release(&res);
    return 0;
}

static void *envd_proc_main(void *arg)
{
    envd_proc_t *p = arg;
    envd_table_t *t = p->t;
    runtime_t *rt = p->f->rt;
    /* Stdin's buffer only for a process that can be sent input (a
     * terminal, or stdin asked for): most commands never are. */
    bool wants_input = p->tty || !p->close_stdin;
    char *buf = malloc(ENVD_READ_CHUNK), *pend = wants_input ? malloc(ENVD_INPUT_MAX) : NULL;
    size_t pend_off = 0, pend_len = 0;
    bool stdin_closed = false, stopping = false, deadline = false;
    int sig = 0;
    api_error_t err;
    int exec_code = -1;
    bool exec_done = false;
    if (!buf || (wants_input && !pend)) {
        sig = 9;                  /* out of memory: the process cannot be followed */
        goto ended;
    }
    if (p->exec_mode) {
        if (envd_exec_run(p, &exec_code, &sig, &stopping, &deadline, &err) < 0) {
            log_warn(ENVD_COMPONENT, "envd process %u in sandbox %s: %s", p->pid, p->sandbox_id, err.message);
            exec_code = -1;
        } else {
            exec_done = sig == 0 && !stopping;
        }
        if (stopping)
            sig = 0;
        goto ended;
    }
    if (p->early.len)
        envd_output(p, p->early.data, p->early.len);
    for (;;) {
        pthread_mutex_lock(&t->mu);
        sig = p->signal;
        if (pend_len == 0 && p->in_len > 0) {
            memcpy(pend, p->in, p->in_len);
            pend_off = 0;
            pend_len = p->in_len;
            p->in_len = 0;
            pthread_cond_broadcast(&t->cond);
        }
        bool close_now = p->close_stdin && !stdin_closed && pend_len == 0;
        unsigned cols = p->want_cols, rows = p->want_rows;
        p->want_cols = p->want_rows = 0;
        pthread_mutex_unlock(&t->mu);
        if (sig)
            break;
        if (cols && runtime_shell_resize(rt, p->sh, cols, rows, &err) < 0)
            log_debug(ENVD_COMPONENT, "envd process %u in sandbox %s: resize: %s", p->pid, p->sandbox_id,
                      err.message);
        if (close_now) {
            stdin_closed = true;
            if (p->tty) {
                pend[0] = 0x04;   /* the terminal's end of input (Ctrl-D) */
                pend_off = 0;
                pend_len = 1;
            } else {
                shutdown(p->fd, SHUT_WR);
            }
        }
        struct pollfd pf[3] = {
            { .fd = p->fd, .events = (short)(POLLIN | (pend_len ? POLLOUT : 0)) },
            { .fd = p->wake[0], .events = POLLIN },
            { .fd = p->f->stop_pipe[0], .events = POLLIN },
        };
        int wait = -1;
        if (p->deadline_ms) {
            int64_t left = p->deadline_ms - time_mono_ms();
            if (left <= 0) {
                sig = 9;          /* its lifetime (the Start's timeout) is over */
                deadline = true;
                break;
            }
            wait = left > 60000 ? 60000 : (int)left;
        }
        if (poll(pf, 3, wait) < 0) {
            if (errno == EINTR)
                continue;
            sig = 9;
            break;
        }
        if (pf[2].revents) {
            stopping = true;
            break;
        }
        if (pf[1].revents)
            envd_drain(p->wake[0]);
        if (pend_len && (pf[0].revents & (POLLOUT | POLLERR | POLLHUP))) {
            ssize_t w = send(p->fd, pend + pend_off, pend_len - pend_off, MSG_NOSIGNAL);
            if (w > 0) {
                pend_off += (size_t)w;
                if (pend_off == pend_len)
                    pend_off = pend_len = 0;
            } else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                pend_off = pend_len = 0; /* the process reads no more: its output will end */
            }
        }
        if (pf[0].revents & (POLLIN | POLLERR | POLLHUP)) {
            ssize_t got = recv(p->fd, buf, ENVD_READ_CHUNK, 0);
            if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
                break;
            if (got > 0)
                envd_output(p, buf, (size_t)got);
        }
    }
ended:;
    /* The end event: killed (a signal, the worker stopping) or exited. */
    int code = -1;
    char status[64], msg[200];
    bool exited = false;
    if (sig || stopping) {
        if (p->sh)
            runtime_shell_close(rt, p->sh);
        p->sh = NULL;
        snprintf(status, sizeof status, "%s", sig == 15 ? "signal: terminated" : "signal: killed");
        snprintf(msg, sizeof msg, "%s", stopping ? "the worker is shutting down" : status);
    } else if (p->exec_mode && !exec_done) {
        snprintf(status, sizeof status, "unknown");
        snprintf(msg, sizeof msg, "the worker could not run the command: %.150s", err.message);
    } else if (p->exec_mode) {
        code = exec_code;
        exited = true;
        snprintf(status, sizeof status, "exit status %d", code);
        snprintf(msg, sizeof msg, "%s", status);
    } else if (runtime_shell_exit_code(rt, p->sh, &code, &err) < 0) {
        log_warn(ENVD_COMPONENT, "envd process %u in sandbox %s: %s", p->pid, p->sandbox_id, err.message);
        code = -1;
        snprintf(status, sizeof status, "unknown");
        snprintf(msg, sizeof msg, "the worker could not learn the exit code: %.150s", err.message);
    } else {
        exited = true;
        snprintf(status, sizeof status, "exit status %d", code);
        snprintf(msg, sizeof msg, "%s", status);
    }
    json_object *end = json_object_new_object(), *ev = json_object_new_object(), *o = json_object_new_object();
    char *js = NULL;
    if (end && ev && o) {
        if (code != 0)
            jsonx_add_int(end, "exitCode", code);
        if (exited)
            jsonx_add_bool(end, "exited", true);
        jsonx_add_str(end, "status", status);
        if (code != 0)
            jsonx_add_str(end, "error", msg);
        jsonx_add(ev, "end", end);
        jsonx_add(o, "event", ev);
        end = ev = NULL;
        js = jsonx_dump(o);
    }
    if (end)
        json_object_put(end);
    if (ev)
        json_object_put(ev);
    if (o)
        json_object_put(o);
    pthread_mutex_lock(&t->mu);
    /* Killed at the Start's deadline: its own stream ends as the call
     * timing out (deadline_exceeded, as envd's context does), which the
     * SDKs take for their TimeoutError, not as the process's end; any
     * other stream following it sees the end event. */
    for (envd_sub_t *s = p->subs; deadline && s; s = s->next)
        if (s->starter) {
            s->timed_out = true;
            s->ended = true;
        }
    if (js)
        envd_publish_locked(p, js, strlen(js));
    for (envd_sub_t *s = p->subs, *next; s; s = next) {
        next = s->next;
        s->ended = true;
        s->proc = NULL;
        envd_wake(s->wake[1]);
    }
    p->subs = NULL;
    p->ended = true;
    envd_proc_unlink(t, p);
    pthread_cond_broadcast(&t->cond);
    pthread_mutex_unlock(&t->mu);
    free(js);
    if (p->sh)
        runtime_shell_close(rt, p->sh);
    p->sh = NULL;
    close(p->wake[0]);
    close(p->wake[1]);
    log_debug(ENVD_COMPONENT, "envd process %u in sandbox %s ended: %s", p->pid, p->sandbox_id,
              stopping ? "the worker is shutting down" : status);
    if (p->f->session_done) {
        /* Its record: the agent reports it as an exec operation. */
        forward_session_t rec = { .sandbox_id = p->sandbox_id, .argv = (const char *const *)p->argv,
                                  .argc = p->argc, .tty = p->tty, .exit_code = exited ? code : -1,
                                  .duration_ms = time_mono_ms() - p->t0, .caller = p->caller[0] ? p->caller : NULL };
        p->f->session_done(p->f->session_ud, &rec);
    }
    free(buf);
    free(pend);
    pthread_mutex_lock(&t->mu);
    envd_proc_unref(p);
    t->threads--;
    pthread_cond_broadcast(&t->cond);
    pthread_mutex_unlock(&t->mu); /* last: forward_envd_stop may free t once threads is 0 */
    return NULL;
}

/* ---- streams ------------------------------------------------------------- */

static envd_sub_t *envd_sub_new(void)
{
    envd_sub_t *s = calloc(1, sizeof *s);
    if (s && pipe2(s->wake, O_CLOEXEC | O_NONBLOCK) < 0) {
        free(s);
        return NULL;
    }
    return s;
}

/* Leaves the process (if still following it) and frees s. */
static void envd_sub_free(envd_table_t *t, envd_sub_t *s)
{
    pthread_mutex_lock(&t->mu);
    if (s->proc)
        for (envd_sub_t **sp = &s->proc->subs; *sp; sp = &(*sp)->next)
            if (*sp == s) {
                *sp = s->next;
                break;
            }
    s->proc = NULL;
    pthread_mutex_unlock(&t->mu);
    for (envd_msg_t *m = s->head, *next; m; m = next) {
        next = m->next;
        free(m);
    }
    close(s->wake[0]);
    close(s->wake[1]);
    free(s);
}

/* Sends what is queued on s as it comes, keepalives while quiet, until
 * the process ends (then the end-of-stream), s is cut, the controller
 * goes, the call's deadline passes or the worker stops; frees s. */
static void envd_stream_run(envd_call_t *k, envd_table_t *t, envd_sub_t *s)
{
    forward_conn_t *c = k->c;
    static const char keepalive[] = "{\"event\":{\"keepalive\":{}}}";
    int64_t last = time_mono_ms();
    for (;;) {
        pthread_mutex_lock(&t->mu);
        envd_msg_t *m = s->head;
        s->head = s->tail = NULL;
        s->bytes = 0;
        bool ended = s->ended, cut = s->cut, timed_out = s->timed_out;
        pthread_mutex_unlock(&t->mu);
        bool failed = false;
        for (envd_msg_t *next; m; m = next) {
            next = m->next;
            if (!failed && envd_stream_send(k, m->data, m->len) < 0)
                failed = true;
            free(m);
            last = time_mono_ms();
        }
        if (failed)
            break;
        if (ended && timed_out) {
            envd_stream_end(k, "deadline_exceeded", "the call's timeout (connect-timeout-ms) passed; the process "
                            "was killed");
            break;
        }
        if (ended) {
            envd_stream_end(k, NULL, NULL);
            break;
        }
        if (cut) {
            envd_stream_end(k, "resource_exhausted", "this stream fell more than 1 MiB behind the process's "
                            "output and was cut; the process goes on: Connect to it again to follow it");
            break;
        }
        int64_t now = time_mono_ms();
        if (k->deadline_ms && now >= k->deadline_ms) {
            envd_stream_end(k, "deadline_exceeded", "the call's timeout (connect-timeout-ms) passed; the process "
                            "goes on");
            break;
        }
        int64_t wait = last + ENVD_KEEPALIVE_MS - now;
        if (k->deadline_ms && k->deadline_ms - now < wait)
            wait = k->deadline_ms - now;
        bool pending = forward_client_pending(c);
        struct pollfd pf[3] = {
            { .fd = s->wake[0], .events = POLLIN },
            { .fd = c->client, .events = POLLIN },
            { .fd = c->f->stop_pipe[0], .events = POLLIN },
        };
        int n = poll(pf, 3, pending ? 0 : wait < 0 ? 0 : (int)wait);
        if (n < 0 && errno != EINTR)
            break;
        if (n > 0 && pf[2].revents) {
            envd_stream_end(k, "unavailable", "the worker is shutting down");
            break;
        }
        if (pending || (n > 0 && pf[1].revents)) {
            /* Nothing comes after the body's END frame: readable means the
             * controller closed (or misbehaves); either ends the stream. */
            break;
        }
        if (n > 0 && pf[0].revents)
            envd_drain(s->wake[0]);
        if (time_mono_ms() - last >= ENVD_KEEPALIVE_MS) {
            if (envd_stream_send(k, keepalive, sizeof keepalive - 1) < 0)
                break;
            last = time_mono_ms();
        }
    }
    envd_sub_free(t, s);
}

/* ---- requests ----------------------------------------------------------- */

/* A ProcessSelector ({"pid":N} or {"tag":"T"}) under key of msg: 0 with
 * *ret_pid or *ret_tag (pointing into msg); SBX_EINVAL with a reason. */
static int envd_selector(json_object *msg, uint32_t *ret_pid, const char **ret_tag, char *why, size_t whylen)
{
    json_object *sel = jsonx_get_obj(msg, "process"), *v;
    *ret_tag = NULL;
    if (sel && json_object_object_get_ex(sel, "tag", &v) && json_object_is_type(v, json_type_string)) {
        *ret_tag = json_object_get_string(v);
        return 0;
    }
    int64_t pid = 0;
    if (sel && jsonx_get_int(sel, "pid", &pid) && pid >= 0 && pid <= UINT32_MAX) {
        *ret_pid = (uint32_t)pid;
        return 0;
    }
    snprintf(why, whylen,
             "the request must name its process: {\"process\":{\"pid\":N}} or {\"process\":{\"tag\":\"T\"}}");
    return SBX_EINVAL;
}

/* The live process a request names, with a reference (envd_proc_release),
 * or NULL after answering not_found or invalid_argument. */
static envd_proc_t *envd_proc_get(envd_call_t *k, envd_table_t *t, json_object *msg)
{
    uint32_t pid = 0;
    const char *tag = NULL;
    char why[200];
    if (envd_selector(msg, &pid, &tag, why, sizeof why) < 0) {
        envd_rpc_error(k, "invalid_argument", "%s", why);
        return NULL;
    }
    pthread_mutex_lock(&t->mu);
    envd_proc_t *p = envd_proc_find(t, k->c->sandbox_id, pid, tag);
    if (p)
        p->refs++;
    pthread_mutex_unlock(&t->mu);
    if (!p) {
        if (tag)
            envd_rpc_error(k, "not_found", "process with tag %.100s not found", tag);
        else
            envd_rpc_error(k, "not_found", "process with pid %u not found", pid);
    }
    return p;
}

static void envd_proc_release(envd_table_t *t, envd_proc_t *p)
{
    pthread_mutex_lock(&t->mu);
    envd_proc_unref(p);
    pthread_mutex_unlock(&t->mu);
}

/* Whether the sandbox has /bin/bash (remembered per sandbox): the SDK
 * runs every command with it, and busybox images have only /bin/sh. */
static bool envd_has_bash(envd_call_t *k, envd_table_t *t)
{
    const char *id = k->c->sandbox_id;
    pthread_mutex_lock(&t->mu);
    for (size_t i = 0; i < t->nshells; i++)
        if (strcmp(t->shells[i].sandbox_id, id) == 0) {
            bool b = t->shells[i].bash;
            pthread_mutex_unlock(&t->mu);
            return b;
        }
    pthread_mutex_unlock(&t->mu);
    runtime_files_stat_t *st = malloc(sizeof *st);
    api_error_t err;
    int r = st ? envd_stat(k, "/bin/bash", st, &err) : SBX_ENOMEM;
    free(st);
    if (r < 0 && (!st || err.code != API_NOT_FOUND))
        return true;              /* not known: let the start say what is wrong */
    bool bash = r == 0;
    pthread_mutex_lock(&t->mu);
    size_t i = t->nshells < ENVD_SHELL_CACHE ? t->nshells++ : t->shells_next++ % ENVD_SHELL_CACHE;
    snprintf(t->shells[i].sandbox_id, sizeof t->shells[i].sandbox_id, "%s", id);
    t->shells[i].bash = bash;
    pthread_mutex_unlock(&t->mu);
    return bash;
}

/* A StartRequest, read. */
typedef struct envd_start {
    const char *cmd;
    char **argv;              /* argc strings, NULL-ended */
    size_t argc;
    kv_list_t env;
    char **envv;              /* "K=V", envc */
    size_t envc;
    char cwd[SBX_FILES_PATH_MAX + 1];   /* "" none */
    bool tty;
    unsigned cols, rows;
    bool stdin_open;
    const char *tag;
    char *config;             /* its ProcessConfig as JSON, for List */
} envd_start_t;

static void envd_start_release(envd_start_t *s)
{
    if (s->argv)
        for (size_t i = 0; i < s->argc; i++)
            free(s->argv[i]);
    free(s->argv);
    if (s->envv)
        for (size_t i = 0; i < s->envc; i++)
            free(s->envv[i]);
    free(s->envv);
    kv_list_release(&s->env);
    free(s->config);
}

/* The exec request of an exec-mode process (envd_proc_t.exec_mode): the
 * Start's command, env and cwd, no stdin, its lifetime as the timeout
 * (none: the longest an exec may run). 0, or < 0 with err. */
static int envd_exec_spec(const envd_start_t *s, int64_t deadline_ms, exec_spec_t *ret, api_error_t *err)
{
    memset(ret, 0, sizeof *ret);
    ret->argv = calloc(s->argc + 1, sizeof *ret->argv);
    if (!ret->argv)
        return api_error_set(err, API_INTERNAL, "out of memory");
    for (size_t i = 0; i < s->argc; i++)
        if (!(ret->argv[i] = strdup(s->argv[i]))) {
            exec_spec_release(ret);
            return api_error_set(err, API_INTERNAL, "out of memory");
        }
    ret->argc = s->argc;
    if (s->env.n && !(ret->env.items = calloc(s->env.n, sizeof *ret->env.items))) {
        exec_spec_release(ret);
        return api_error_set(err, API_INTERNAL, "out of memory");
    }
    for (size_t i = 0; i < s->env.n; i++) {
        kv_t *e = &ret->env.items[ret->env.n];
        e->key = strdup(s->env.items[i].key);
        e->value = strdup(s->env.items[i].value);
        ret->env.n++;
        if (!e->key || !e->value) {
            exec_spec_release(ret);
            return api_error_set(err, API_INTERNAL, "out of memory");
        }
    }
    if (s->cwd[0] && !(ret->cwd = strdup(s->cwd))) {
        exec_spec_release(ret);
        return api_error_set(err, API_INTERNAL, "out of memory");
    }
    int64_t left = deadline_ms ? deadline_ms - time_mono_ms() : 0;
    ret->timeout_seconds = deadline_ms ? (left <= 0 ? 1 : (left + 999) / 1000) : SBX_EXEC_TIMEOUT_MAX;
    if (ret->timeout_seconds > SBX_EXEC_TIMEOUT_MAX)
        ret->timeout_seconds = SBX_EXEC_TIMEOUT_MAX;
    ret->max_output_bytes = 1;
    return 0;
}

/* A size member {"cols":N,"rows":N} under pty.size: 0, or SBX_EINVAL. */
static int envd_pty_size(json_object *pty, unsigned *cols, unsigned *rows)
{
    json_object *size = jsonx_get_obj(pty, "size");
    int64_t c = 0, r = 0;
    if (!size || !jsonx_get_int(size, "cols", &c) || !jsonx_get_int(size, "rows", &r) || c < 1 ||
        c > SHELLFRAME_SIZE_MAX || r < 1 || r > SHELLFRAME_SIZE_MAX)
        return SBX_EINVAL;
    *cols = (unsigned)c;
    *rows = (unsigned)r;
    return 0;
}

static int envd_start_parse(envd_call_t *k, envd_table_t *t, json_object *msg, envd_start_t *s, char *why,
                            size_t whylen)
{
    json_object *proc = jsonx_get_obj(msg, "process"), *args, *envs, *v;
    api_error_t err;
    memset(s, 0, sizeof *s);
    if (!proc || !envd_msg_str(proc, "cmd", &s->cmd) || !s->cmd || !*s->cmd || strlen(s->cmd) > SBX_MAX_PATH_BYTES) {
        snprintf(why, whylen, "the request's process must say its cmd (a string without NUL)");
        return SBX_EINVAL;
    }
    args = json_object_object_get_ex(proc, "args", &v) ? v : NULL;
    size_t nargs = args && json_object_is_type(args, json_type_array) ? json_object_array_length(args) : 0;
    if ((args && !json_object_is_type(args, json_type_array)) || nargs + 1 > SBX_MAX_ARGV) {
        snprintf(why, whylen, "the process's args must be an array of at most %d strings", SBX_MAX_ARGV - 1);
        return SBX_EINVAL;
    }
    /* No /bin/bash (a busybox image): its /bin/sh, without bash's -l. */
    bool to_sh = strcmp(s->cmd, "/bin/bash") == 0 && !envd_has_bash(k, t);
    if (!(s->argv = calloc(nargs + 2, sizeof *s->argv)) || !(s->argv[0] = strdup(to_sh ? "/bin/sh" : s->cmd))) {
        snprintf(why, whylen, "out of memory");
        return SBX_ENOMEM;
    }
    s->argc = 1;
    size_t total = strlen(s->argv[0]);
    for (size_t i = 0; i < nargs; i++) {
        json_object *a = json_object_array_get_idx(args, i);
        const char *as = json_object_is_type(a, json_type_string) ? json_object_get_string(a) : NULL;
        if (!as || strlen(as) != (size_t)json_object_get_string_len(a) || (total += strlen(as)) > SBX_MAX_ARGV_BYTES) {
            snprintf(why, whylen, "the process's args must be strings without NUL, at most %u bytes in all",
                     SBX_MAX_ARGV_BYTES);
            return SBX_EINVAL;
        }
        if (to_sh && strcmp(as, "-l") == 0)
            continue;
        if (!(s->argv[s->argc] = strdup(as))) {
            snprintf(why, whylen, "out of memory");
            return SBX_ENOMEM;
        }
        s->argc++;
    }
    envs = json_object_object_get_ex(proc, "envs", &v) ? v : NULL;
    if (envs && (!json_object_is_type(envs, json_type_object) ||
                 kv_list_from_json(envs, "envs", true, SBX_MAX_ENV, &s->env, &err) < 0)) {
        snprintf(why, whylen, "the process's envs must be an object of at most %d strings named as shell "
                 "variables: %.200s", SBX_MAX_ENV,
                 envs && json_object_is_type(envs, json_type_object) ? err.message : "");
        return SBX_EINVAL;
    }
    if (s->env.n && !(s->envv = calloc(s->env.n + 1, sizeof *s->envv))) {
        snprintf(why, whylen, "out of memory");
        return SBX_ENOMEM;
    }
    for (size_t i = 0; i < s->env.n; i++) {
        size_t n = strlen(s->env.items[i].key) + strlen(s->env.items[i].value) + 2;
        if (!(s->envv[i] = malloc(n))) {
            snprintf(why, whylen, "out of memory");
            return SBX_ENOMEM;
        }
        snprintf(s->envv[i], n, "%s=%s", s->env.items[i].key, s->env.items[i].value);
        s->envc = i + 1;
    }
    /* No cwd: the sandbox's own working directory (E2B's default, the
     * user's home, may not exist here). */
    const char *cwd = NULL;
    if (!envd_msg_str(proc, "cwd", &cwd) || (cwd && *cwd && envd_path_resolve(cwd, s->cwd) < 0)) {
        snprintf(why, whylen, "the process's cwd must be a path without control bytes");
        return SBX_EINVAL;
    }
    json_object *pty = jsonx_get_obj(msg, "pty");
    if (pty) {
        if (envd_pty_size(pty, &s->cols, &s->rows) < 0) {
            snprintf(why, whylen, "the request's pty must say its size: {\"size\":{\"cols\":N,\"rows\":N}}, each "
                     "1 to %d", SHELLFRAME_SIZE_MAX);
            return SBX_EINVAL;
        }
        s->tty = true;
    }
    jsonx_get_bool(msg, "stdin", &s->stdin_open);
    if (!envd_msg_str(msg, "tag", &s->tag) || (s->tag && (!*s->tag || strlen(s->tag) > 256))) {
        snprintf(why, whylen, "the request's tag must be 1 to 256 bytes without NUL");
        return SBX_EINVAL;
    }
    /* List answers the config as it was asked for. */
    json_object *cfg = json_object_new_object();
    if (cfg) {
        jsonx_add_str(cfg, "cmd", s->cmd);
        json_object *a = json_object_new_array(), *e = kv_list_to_json(&s->env);
        for (size_t i = 0; a && i < nargs; i++)
            json_object_array_add(a, json_object_get(json_object_array_get_idx(args, i)));
        jsonx_add(cfg, "args", a);
        jsonx_add(cfg, "envs", e);
        if (cwd && *cwd)
            jsonx_add_str(cfg, "cwd", cwd);
        s->config = jsonx_dump(cfg);
        json_object_put(cfg);
    }
    if (!s->config) {
        snprintf(why, whylen, "out of memory");
        return SBX_ENOMEM;
    }
    return 0;
}

void envd_process_start(envd_call_t *k, json_object *msg)
{
    forward_t *f = k->c->f;
    envd_table_t *t = envd_table(f);
    envd_start_t s;
    char why[400];
    api_error_t err;
    envd_proc_t *p = NULL;
    envd_sub_t *sub = NULL;
    if (!t) {
        if (envd_stream_begin(k) == 0)
            envd_stream_end(k, "resource_exhausted", "the worker is out of memory");
        return;
    }
    int r = envd_start_parse(k, t, msg, &s, why, sizeof why);
    if (r < 0) {
        if (envd_stream_begin(k) == 0)
            envd_stream_end(k, r == SBX_ENOMEM ? "resource_exhausted" : "invalid_argument", why);
        envd_start_release(&s);
        return;
    }
    if (s.cwd[0]) {
        /* As envd: a cwd that is not there is the request's fault. A stat
         * the runtime cannot make (gVisor's own /tmp) leaves it to the
         * process's start. */
        runtime_files_stat_t *st = malloc(sizeof *st);
        r = st ? envd_stat(k, s.cwd, st, &err) : api_error_set(&err, API_INTERNAL, "out of memory");
        if (r == 0 && strcmp(st->type, "dir") != 0)
            r = api_error_set(&err, API_INVALID_ARGUMENT, "cwd '%.300s' is not a directory", s.cwd);
        else if (r < 0 && err.code == API_NOT_FOUND)
            r = api_error_set(&err, API_INVALID_ARGUMENT, "cwd '%.300s' does not exist", s.cwd);
        else if (r < 0 && err.code == API_INVALID_ARGUMENT)
            r = 0;
        free(st);
        if (r < 0) {
            if (envd_stream_begin(k) == 0)
                envd_stream_end(k, envd_code_of(&err), err.message);
            envd_start_release(&s);
            return;
        }
    }
    /* A place in the table first (the bounds), the shell after. */
    pthread_mutex_lock(&t->mu);
    size_t mine = 0, theirs = 0;
    for (envd_proc_t *q = t->procs; q; q = q->next) {
        mine += strcmp(q->sandbox_id, k->c->sandbox_id) == 0;
        theirs += k->q.tenant[0] && strcmp(q->tenant, k->q.tenant) == 0;
    }
    bool tag_taken = s.tag && envd_proc_find(t, k->c->sandbox_id, 0, s.tag);
    bool full = t->nprocs >= ENVD_PROC_MAX, tenant_full = theirs >= ENVD_PROC_MAX_PER_TENANT;
    if (mine < ENVD_PROC_MAX_PER_SANDBOX && !full && !tenant_full && !tag_taken &&
        (p = calloc(1, sizeof *p)) && (sub = envd_sub_new())) {
        p->t = t;
        p->f = f;
        p->refs = 1;
        p->pid = t->next_pid++;
        p->fd = -1;
        p->wake[0] = p->wake[1] = -1;
        snprintf(p->sandbox_id, sizeof p->sandbox_id, "%s", k->c->sandbox_id);
        snprintf(p->tenant, sizeof p->tenant, "%s", k->q.tenant);
        p->next = t->procs;
        t->procs = p;
        t->nprocs++;
    }
    pthread_mutex_unlock(&t->mu);
    if (!p || !sub) {
        if (p && !sub)
            free(p);              /* never in the table */
        if (envd_stream_begin(k) == 0) {
            if (tag_taken)
                envd_stream_end(k, "already_exists", "a process with this tag runs already");
            else if (mine >= ENVD_PROC_MAX_PER_SANDBOX)
                envd_stream_end(k, "resource_exhausted", "the sandbox runs 64 processes already: end one first");
            else if (full)
                envd_stream_end(k, "resource_exhausted", "the worker runs 1024 processes already");
            else if (tenant_full)
                envd_stream_end(k, "resource_exhausted", "the tenant runs 256 processes on this worker already: "
                                "end some first");
            else
                envd_stream_end(k, "resource_exhausted", "the worker is out of memory");
        }
        envd_start_release(&s);
        return;
    }
    runtime_shell_req_t req = { .ref = k->ref, .argv = (const char *const *)s.argv, .argc = s.argc,
                                .cols = s.tty ? s.cols : 80, .rows = s.tty ? s.rows : 24, .tty = s.tty,
                                .env = (const char *const *)s.envv, .envc = s.envc, .cwd = s.cwd[0] ? s.cwd : NULL };
    r = runtime_shell_open(f->rt, &req, &p->sh, &p->fd, &p->early, &err);
    if (r < 0 && err.code == API_UNAVAILABLE && !s.tty && !s.stdin_open) {
        /* Shells here are terminals only: a command that needs neither a
         * terminal nor stdin runs as an exec, its output as live. */
        p->exec_mode = true;
        p->sh = NULL;
        p->fd = -1;
        snprintf(p->ref, sizeof p->ref, "%s", k->ref);
        r = envd_exec_spec(&s, k->deadline_ms, &p->spec, &err);
    }
    bool made = r == 0 && pipe2(p->wake, O_CLOEXEC | O_NONBLOCK) == 0 && (!s.tag || (p->tag = strdup(s.tag)));
    pthread_t th;
    pthread_attr_t attr;
    if (made) {
        p->tty = s.tty;
        p->config = s.config;
        s.config = NULL;
        p->argv = s.argv;         /* taken: the command as it runs (an exec's spec has its own copy) */
        p->argc = s.argc;
        s.argv = NULL;
        s.argc = 0;
        snprintf(p->caller, sizeof p->caller, "%s", k->q.caller);
        p->t0 = time_mono_ms();
        p->close_stdin = !s.stdin_open && !s.tty;  /* no stdin asked for: its EOF at once */
        /* The Start's timeout is the process's lifetime (envd's
         * exec.CommandContext); its stream ends with the end event. */
        p->deadline_ms = k->deadline_ms;
        k->deadline_ms = 0;
        char start[64];
        int n = snprintf(start, sizeof start, "{\"event\":{\"start\":{\"pid\":%u}}}", p->pid);
        log_debug(ENVD_COMPONENT, "envd process %u in sandbox %s: %s%s", p->pid, k->c->sandbox_id, p->argv[0],
                  p->tty ? " (pty)" : "");
        pthread_mutex_lock(&t->mu);
        sub->proc = p;
        sub->starter = true;
        p->subs = sub;
        envd_sub_push(sub, start, (size_t)n);
        p->refs++;                /* ours until the process can be found: its thread may end it first */
        t->threads++;
        pthread_mutex_unlock(&t->mu);
        made = pthread_attr_init(&attr) == 0;
        if (made) {
            pthread_attr_setstacksize(&attr, FORWARD_THREAD_STACK_BYTES);
            pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
            made = pthread_create(&th, &attr, envd_proc_main, p) == 0;
            pthread_attr_destroy(&attr);
        }
        pthread_mutex_lock(&t->mu);
        if (made) {
            p->started = !p->ended;
            envd_proc_unref(p);
        } else {
            t->threads--;
            p->refs--;
            p->subs = NULL;
            sub->proc = NULL;
            snprintf(why, sizeof why, "the worker cannot start a thread for the process");
        }
        pthread_mutex_unlock(&t->mu);
    } else {
        snprintf(why, sizeof why, "%.390s", r < 0 ? err.message : "out of memory");
    }
    if (!made) {
        runtime_shell_close(f->rt, p->sh);
        if (p->wake[0] >= 0) {
            close(p->wake[0]);
            close(p->wake[1]);
        }
        pthread_mutex_lock(&t->mu);
        envd_proc_unlink(t, p);
        envd_proc_unref(p);
        pthread_mutex_unlock(&t->mu);
        /* A runtime without such shells (an external driver's are
         * terminals only) cannot serve the call: unimplemented, not the
         * "unavailable" the SDK would take for a sandbox gone. */
        if (envd_stream_begin(k) == 0)
            envd_stream_end(k, r < 0 && err.code == API_SANDBOX_EXITED ? "failed_precondition"
                               : r < 0 && err.code == API_UNAVAILABLE  ? "unimplemented"
                               : r < 0                                 ? envd_code_of(&err)
                                                                       : "resource_exhausted", why);
        envd_sub_free(t, sub);
        envd_start_release(&s);
        return;
    }
    envd_start_release(&s);
    /* From here p is its thread's: the stream follows it through sub. */
    if (envd_stream_begin(k) < 0) {
        envd_sub_free(t, sub);
        return;
    }
    envd_stream_run(k, t, sub);
}

void envd_process_connect(envd_call_t *k, json_object *msg)
{
    envd_table_t *t = envd_table(k->c->f);
    envd_sub_t *sub = envd_sub_new();
    uint32_t pid = 0;
    const char *tag = NULL;
    char why[200];
    const char *code = NULL;
    if (!t || !sub) {
        code = "resource_exhausted";
        snprintf(why, sizeof why, "the worker is out of memory");
    } else if (envd_selector(msg, &pid, &tag, why, sizeof why) < 0) {
        code = "invalid_argument";
    } else {
        pthread_mutex_lock(&t->mu);
        envd_proc_t *p = envd_proc_find(t, k->c->sandbox_id, pid, tag);
        if (p) {
            char start[64];
            int n = snprintf(start, sizeof start, "{\"event\":{\"start\":{\"pid\":%u}}}", p->pid);
            envd_sub_push(sub, start, (size_t)n);
            sub->proc = p;
            sub->next = p->subs;
            p->subs = sub;
        }
        pthread_mutex_unlock(&t->mu);
        if (!p) {
            code = "not_found";
            if (tag)
                snprintf(why, sizeof why, "process with tag %.100s not found", tag);
            else
                snprintf(why, sizeof why, "process with pid %u not found", pid);
        }
    }
    if (code) {
        if (sub)
            envd_sub_free(t, sub);
        if (envd_stream_begin(k) == 0)
            envd_stream_end(k, code, why);
        return;
    }
    if (envd_stream_begin(k) < 0) {
        envd_sub_free(t, sub);
        return;
    }
    envd_stream_run(k, t, sub);
}

void envd_process_list(envd_call_t *k, json_object *msg)
{
    (void)msg;
    envd_table_t *t = envd_table(k->c->f);
    json_object *o = json_object_new_object(), *arr = json_object_new_array();
    if (!t || !o || !arr) {
        if (o)
            json_object_put(o);
        if (arr)
            json_object_put(arr);
        envd_rpc_error(k, "resource_exhausted", "the worker is out of memory");
        return;
    }
    pthread_mutex_lock(&t->mu);
    for (envd_proc_t *p = t->procs; p; p = p->next) {
        if (!p->started || p->ended || strcmp(p->sandbox_id, k->c->sandbox_id) != 0)
            continue;
        json_object *e = json_object_new_object();
        if (!e)
            continue;
        jsonx_add(e, "config", jsonx_parse_stored(p->config));
        jsonx_add_int(e, "pid", p->pid);
        if (p->tag)
            jsonx_add_str(e, "tag", p->tag);
        json_object_array_add(arr, e);
    }
    pthread_mutex_unlock(&t->mu);
    jsonx_add(o, "processes", arr);
    envd_rpc_ok(k, o);
}

void envd_process_send_input(envd_call_t *k, json_object *msg)
{
    envd_table_t *t = envd_table(k->c->f);
    json_object *in = jsonx_get_obj(msg, "input");
    const char *b = NULL;
    bool pty = false, ok = !in || envd_msg_str(in, "stdin", &b);
    if (ok && in && !b && envd_msg_str(in, "pty", &b) && b)
        pty = true;
    if (!ok)
        b = NULL;                 /* a NUL in the base64: refused below as malformed */
    char *data = NULL;
    size_t n = 0;
    if (!t) {
        envd_rpc_error(k, "resource_exhausted", "the worker is out of memory");
        return;
    }
    if (!b || b64_decode(b, strlen(b), ENVD_RPC_BODY_MAX, &data, &n) < 0) {
        envd_rpc_error(k, "invalid_argument", "the request's input must be {\"stdin\":B64} or {\"pty\":B64}, "
                       "standard base64");
        return;
    }
    envd_proc_t *p = envd_proc_get(k, t, msg);
    if (!p) {
        free(data);
        return;
    }
    const char *fail = NULL, *code = "failed_precondition";
    if (pty != p->tty)
        fail = pty ? "the process has no pty: send stdin" : "the process runs on a pty: send pty input";
    size_t off = 0;
    int64_t deadline = time_deadline_ms(ENVD_INPUT_WAIT_MS);
    pthread_mutex_lock(&t->mu);
    if (!fail && p->close_stdin) {
        fail = "error writing to stdin: stdin not enabled or closed";
        code = "internal";       /* envd's code for it */
    }
    if (!fail && !p->in && !(p->in = malloc(ENVD_INPUT_MAX))) {
        fail = "the worker is out of memory";
        code = "resource_exhausted";
    }
    while (!fail && off < n) {
        if (p->ended) {
            fail = "the process ended";
            break;
        }
        size_t room = ENVD_INPUT_MAX - p->in_len, m = n - off < room ? n - off : room;
        if (m > 0) {
            memcpy(p->in + p->in_len, data + off, m);
            p->in_len += m;
            off += m;
            envd_wake(p->wake[1]);
            continue;
        }
        int left = time_left_ms(deadline);
        if (left == 0) {
            fail = "the process has not read its stdin for 30 s";
            code = "deadline_exceeded";
            break;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t ns = ts.tv_nsec + (int64_t)(left < 500 ? left : 500) * 1000000;
        ts.tv_sec += ns / 1000000000;
        ts.tv_nsec = ns % 1000000000;
        pthread_cond_timedwait(&t->cond, &t->mu, &ts);
    }
    pthread_mutex_unlock(&t->mu);
    envd_proc_release(t, p);
    free(data);
    if (fail)
        envd_rpc_error(k, code, "%s", fail);
    else
        envd_rpc_ok(k, NULL);
}

void envd_process_close_stdin(envd_call_t *k, json_object *msg)
{
    envd_table_t *t = envd_table(k->c->f);
    if (!t) {
        envd_rpc_error(k, "resource_exhausted", "the worker is out of memory");
        return;
    }
    envd_proc_t *p = envd_proc_get(k, t, msg);
    if (!p)
        return;
    pthread_mutex_lock(&t->mu);
    p->close_stdin = true;
    if (!p->ended)
        envd_wake(p->wake[1]);
    pthread_mutex_unlock(&t->mu);
    envd_proc_release(t, p);
    envd_rpc_ok(k, NULL);
}

void envd_process_send_signal(envd_call_t *k, json_object *msg)
{
    envd_table_t *t = envd_table(k->c->f);
    json_object *v = NULL;
    int sig = 0;
    if (json_object_object_get_ex(msg, "signal", &v)) {
        const char *name = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
        int64_t num = json_object_is_type(v, json_type_int) ? json_object_get_int64(v) : 0;
        if ((name && strcmp(name, "SIGNAL_SIGKILL") == 0) || num == 9)
            sig = 9;
        else if ((name && strcmp(name, "SIGNAL_SIGTERM") == 0) || num == 15)
            sig = 15;
    }
    if (!t) {
        envd_rpc_error(k, "resource_exhausted", "the worker is out of memory");
        return;
    }
    if (!sig) {
        envd_rpc_error(k, "invalid_argument", "the request's signal must be SIGNAL_SIGKILL or SIGNAL_SIGTERM");
        return;
    }
    envd_proc_t *p = envd_proc_get(k, t, msg);
    if (!p)
        return;
    /* Either ends the process with its process tree (the runtime's shell
     * close): a runtime has no way to send one signal into a sandbox. */
    pthread_mutex_lock(&t->mu);
    if (!p->signal)
        p->signal = sig;
    if (!p->ended)
        envd_wake(p->wake[1]);
    pthread_mutex_unlock(&t->mu);
    envd_proc_release(t, p);
    envd_rpc_ok(k, NULL);
}

void envd_process_update(envd_call_t *k, json_object *msg)
{
    envd_table_t *t = envd_table(k->c->f);
    json_object *pty = jsonx_get_obj(msg, "pty");
    unsigned cols = 0, rows = 0;
    if (!t) {
        envd_rpc_error(k, "resource_exhausted", "the worker is out of memory");
        return;
    }
    if (pty && envd_pty_size(pty, &cols, &rows) < 0) {
        envd_rpc_error(k, "invalid_argument", "the request's pty must say its size: {\"size\":{\"cols\":N,"
                       "\"rows\":N}}, each 1 to %d", SHELLFRAME_SIZE_MAX);
        return;
    }
    envd_proc_t *p = envd_proc_get(k, t, msg);
    if (!p)
        return;
    bool tty = p->tty;
    if (tty && cols) {
        pthread_mutex_lock(&t->mu);
        p->want_cols = cols;
        p->want_rows = rows;
        if (!p->ended)
            envd_wake(p->wake[1]);
        pthread_mutex_unlock(&t->mu);
    }
    envd_proc_release(t, p);
    if (!tty && cols)
        envd_rpc_error(k, "failed_precondition", "the process has no pty to resize");
    else
        envd_rpc_ok(k, NULL);
}
