/* The Docker backend's exec: the Engine exec, its bounded output, and the
 * timeout kill (host processes, or inside gVisor through runsc). */
#include "docker_internal.h"
#include "docker_stream.h"
#include "jsonx.h"
#include "timeutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- exec -------------------------------------------------------------- */

bool docker_pid_in_container(pid_t pid, const char *container_id)
{
    char path[64], buf[8192];
    snprintf(path, sizeof path, "/proc/%d/cgroup", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    return strstr(buf, container_id) != NULL;
}

static bool docker_pid_known(const pid_t *pids, size_t n, pid_t p)
{
    for (size_t i = 0; i < n; i++)
        if (pids[i] == p)
            return true;
    return false;
}

void docker_pid_children(pid_t pid, pid_t *pids, size_t *n, size_t max)
{
    char path[96];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL && *n < max) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        char cpath[160], buf[4096];
        snprintf(cpath, sizeof cpath, "/proc/%d/task/%.20s/children", (int)pid, de->d_name);
        int fd = open(cpath, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t len = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (len <= 0)
            continue;
        buf[len] = '\0';
        char *p = buf;
        while (*p && *n < max) {
            char *end;
            errno = 0;
            long v = strtol(p, &end, 10);
            if (end == p)
                break;
            if (errno == 0 && v > 1 && !docker_pid_known(pids, *n, (pid_t)v))
                pids[(*n)++] = (pid_t)v;
            p = end;
        }
    }
    closedir(d);
}

/* SIGKILLs root and all its descendants. The tree is frozen with SIGSTOP
 * while it is walked so a forking process cannot escape between the walk
 * and the kill. Every pid is checked to belong to the container first.
 * Returns the number of processes signalled. */
static size_t docker_kill_tree(pid_t root, const char *container_id)
{
    size_t killed = 0;
    pid_t *pids = calloc(DOCKER_KILL_MAX_PIDS, sizeof *pids);
    if (!pids)
        return 0;
    size_t n = 0, stopped = 0;
    if (docker_pid_in_container(root, container_id))
        pids[n++] = root;
    for (int round = 0; round < 5 && n > 0; round++) {
        size_t before = n;
        for (size_t i = 0; i < n; i++)
            docker_pid_children(pids[i], pids, &n, DOCKER_KILL_MAX_PIDS);
        for (; stopped < n; stopped++) {
            if (docker_pid_in_container(pids[stopped], container_id))
                kill(pids[stopped], SIGSTOP);
            else
                pids[stopped] = 0;
        }
        if (n == before && round > 0)
            break;
    }
    for (size_t i = 0; i < n; i++)
        if (pids[i] > 1 && kill(pids[i], SIGKILL) == 0)
            killed++;
    free(pids);
    return killed;
}


/* Finds out whether ref runs under gVisor and, if so, the largest pid in
 * the sandbox now: the exec's processes will be the ones above it. */
void docker_gvisor_exec_prepare(docker_runtime_t *rt, const char *ref, docker_gvisor_exec_t *gv)
{
    char path[160];
    json_object *o = NULL;
    api_error_t ierr;
    runsc_host_t host;
    runsc_proc_t *procs = NULL;
    size_t np = 0;
    memset(gv, 0, sizeof *gv);
    gv->after_pid = -1;
    snprintf(path, sizeof path, "/containers/%s/json", ref);
    if (docker_get_json(rt, path, DOCKER_CALL_TIMEOUT_MS, &o, &ierr) < 0)
        return; /* the exec itself will report the missing container */
    const char *runtime = jsonx_get_str(jsonx_get_obj(o, "HostConfig"), "Runtime");
    const char *id = jsonx_get_str(o, "Id");
    int64_t pid = 0;
    jsonx_get_int(jsonx_get_obj(o, "State"), "Pid", &pid);
    if (!runtime || strcmp(runtime, rt->gvisor_runtime) != 0 || !id || !docker_name_ok(id, 80))
        goto cleanup;
    gv->gvisor = true;
    snprintf(gv->container_id, sizeof gv->container_id, "%s", id);
    if (!rt->runsc_exe[0]) {
        snprintf(gv->note, sizeof gv->note, "the runsc binary dockerd uses is not visible to the worker");
        goto cleanup;
    }
    if (pid <= 1 || runsc_host_from_pid((pid_t)pid, id, NULL, rt->runsc_exe, &host) < 0) {
        snprintf(gv->note, sizeof gv->note, "the sandbox's host pid %lld is not its runsc process",
                 (long long)pid);
        goto cleanup;
    }
    if (runsc_ps(&host, id, &procs, &np) < 0) {
        snprintf(gv->note, sizeof gv->note, "runsc ps failed before the command started");
        goto cleanup;
    }
    gv->after_pid = runsc_max_pid(procs, np);
cleanup:
    free(procs);
    if (o)
        json_object_put(o);
}

/* The timeout kill under gVisor. Docker's exec pid is the host runsc-exec
 * process; killing it only ends the stream, so the exec's process tree is
 * first killed inside the sandbox (runsc kill --pid, see runsc.h), then the
 * runsc-exec process. Both are checked first: the pid must be the
 * configured runsc binary running `exec` for this container and exec. */
static void docker_gvisor_kill(docker_runtime_t *rt, const docker_gvisor_exec_t *gv, const char *exec_id, pid_t pid,
                               runtime_exec_result_t *ret)
{
    runsc_host_t host;
    const char *cid = gv->container_id;
    if (!rt->runsc_exe[0] || runsc_host_from_pid(pid, cid, exec_id, rt->runsc_exe, &host) < 0) {
        snprintf(ret->warning, sizeof ret->warning,
                 "exec pid %d is not the runsc exec of container %.12s: nothing killed", (int)pid, cid);
        return;
    }
    if (gv->after_pid < 0) {
        snprintf(ret->warning, sizeof ret->warning,
                 "the command may still run inside the gVisor sandbox: %s", gv->note);
    } else {
        size_t killed = 0;
        int r = runsc_kill_exec_tree(&host, cid, gv->after_pid, &killed);
        if (r == SBX_ECONFLICT)
            snprintf(ret->warning, sizeof ret->warning,
                     "the command may still run inside the gVisor sandbox: other commands started after it "
                     "still run, so which process is its own is unknown");
        else if (r < 0 && r != SBX_ENOTFOUND)
            snprintf(ret->warning, sizeof ret->warning,
                     "the command may still run inside the gVisor sandbox: runsc ps failed (%s)", sbx_strerror(r));
    }
    if (runsc_pid_matches(pid, cid, exec_id, rt->runsc_exe))
        kill(pid, SIGKILL);
}

typedef struct docker_exec_io {
    CURL *h;
    docker_stream_t demux;
    sbuf_t error_body;   /* the body of a non-200 answer to exec start */
    long status;
} docker_exec_io_t;

static size_t docker_exec_write_cb(char *p, size_t size, size_t nmemb, void *ud)
{
    docker_exec_io_t *io = ud;
    size_t n = size * nmemb;
    if (io->status == 0)
        curl_easy_getinfo(io->h, CURLINFO_RESPONSE_CODE, &io->status);
    if (io->status != 200 && io->status != 101)
        return sbuf_append_bounded(&io->error_body, p, n) < 0 ? 0 : n;
    return docker_stream_push(&io->demux, p, n) < 0 ? 0 : n;
}

/* GET /exec/{id}/json: Running, ExitCode (-1 while unknown), Pid and, when
 * ret_container is not NULL, the full container id. */
int docker_exec_inspect(docker_runtime_t *rt, const char *exec_id, bool *ret_running, int *ret_exit,
                               pid_t *ret_pid, char ret_container[80], api_error_t *err)
{
    char path[160];
    docker_reply_t rep;
    snprintf(path, sizeof path, "/exec/%s/json", exec_id);
    int r = docker_call(rt, "GET", path, NULL, DOCKER_CALL_TIMEOUT_MS, &rep, err);
    if (r < 0) {
        docker_reply_release(&rep);
        return r;
    }
    json_object *o = docker_reply_json(&rep);
    if (rep.status != 200 || !o) {
        char msg[320];
        docker_reply_message(&rep, msg, sizeof msg);
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot inspect exec: %s", msg);
    } else {
        docker_exec_state_t st;
        docker_exec_from_inspect(o, &st);
        if (ret_container)
            snprintf(ret_container, 80, "%s", st.container);
        *ret_running = st.running;
        *ret_exit = st.exit_code;
        *ret_pid = st.pid;
    }
    if (o)
        json_object_put(o);
    docker_reply_release(&rep);
    return r;
}

/* Kills exec_id's process tree (its deadline passed, or the worker is
 * shutting down); what could not be killed goes to ret->warning. */
void docker_exec_kill(docker_runtime_t *rt, const char *exec_id, const docker_gvisor_exec_t *gv,
                             runtime_exec_result_t *ret)
{
    bool still = false;
    int code = -1;
    pid_t pid = 0;
    char cid[80];
    api_error_t ignored;
    /* The full container id (ref may be a name) to check pids by. */
    if (docker_exec_inspect(rt, exec_id, &still, &code, &pid, cid, &ignored) < 0 || pid <= 1 || !cid[0])
        snprintf(ret->warning, sizeof ret->warning, "docker gave no pid for the exec: nothing killed");
    else if (gv->gvisor)
        docker_gvisor_kill(rt, gv, exec_id, pid, ret);
    else if (docker_kill_tree(pid, cid) == 0)
        snprintf(ret->warning, sizeof ret->warning,
                 "exec pid %d is not in the container's cgroup (another pid namespace?): nothing killed", (int)pid);
}

/* True once a client cancelled the exec (the sink says so). */
static bool docker_exec_client_cancelled(const runtime_output_sink_t *sink)
{
    return sink && sink->cancelled && sink->cancelled(sink->ud);
}

/* Hands the output parsed by d to sink as well (none when sink is NULL). */
static void docker_exec_tap(docker_stream_t *d, const runtime_output_sink_t *sink)
{
    if (sink && sink->write) {
        d->tap = sink->write;
        d->tap_ud = sink->ud;
    }
}

/* Runs POST /exec/{id}/start and demultiplexes its stream into ret until it
 * ends, the deadline passes (then the process tree is killed) or the worker
 * is cancelled. */
static int docker_exec_stream(docker_runtime_t *rt, const char *exec_id, const docker_gvisor_exec_t *gv,
                              int64_t deadline_ms, const runtime_output_sink_t *sink, runtime_exec_result_t *ret,
                              bool *ret_killed, api_error_t *err)
{
    int r = 0;
    char path[160];
    docker_multi_t dm = { 0 };
    docker_exec_io_t io;
    memset(&io, 0, sizeof io);
    sbuf_init(&io.error_body, 4096);
    docker_stream_init(&io.demux, &ret->out, &ret->err);
    docker_exec_tap(&io.demux, sink);
    *ret_killed = false;

    snprintf(path, sizeof path, "/exec/%s/start", exec_id);
    static const char start_body[] = "{\"Detach\":false,\"Tty\":false}";
    /* The deadline is ours; libcurl's progress callback would only see the
     * cancel flag about once a second, the loop below sees it sooner. */
    if (docker_multi_open(&dm, rt, "POST", path, start_body, sizeof start_body - 1, "application/json",
                          docker_exec_write_cb, &io) < 0) {
        api_error_set(err, API_INTERNAL, "out of memory");
        r = SBX_ENOMEM;
        goto cleanup;
    }
    io.h = dm.h;

    int running = 1;
    while (running) {
        if ((r = docker_multi_perform(&dm, "exec", &running, err)) < 0)
            goto cleanup;
        if (!running)
            break;
        int left = time_left_ms(deadline_ms);
        if (left == 0 || docker_cancelled(rt) || docker_exec_client_cancelled(sink)) {
            docker_exec_kill(rt, exec_id, gv, ret);
            *ret_killed = true;
            goto cleanup; /* stop reading: the stream may be held open by escaped processes */
        }
        curl_multi_poll(dm.m, NULL, 0, left < 100 ? left : 100, NULL);
        if (sink && sink->tick)
            sink->tick(sink->ud);
    }
    if ((r = docker_multi_result(&dm, rt, &io.status, err)) < 0)
        goto cleanup;
    if (io.status == 404) {
        r = api_error_set(err, API_RUNTIME_ERROR, "sandbox container not found");
        goto cleanup;
    }
    if (io.status != 200 && io.status != 101) {
        docker_reply_t rep = { .status = io.status, .body = io.error_body };
        char emsg[320];
        docker_reply_message(&rep, emsg, sizeof emsg);
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot start the command: %s", emsg);
        goto cleanup;
    }
cleanup:
    docker_multi_close(&dm);
    sbuf_release(&io.error_body);
    return r;
}

/* As docker_exec_stream, for an exec with stdin: the start goes over a
 * hijacked connection (docker_attach.c), spec's stdin is written to it and
 * the write side closed at its end (the command sees EOF), while the
 * output is read from it. A command that exits without reading all of its
 * stdin is not an error: the rest is dropped. */
static int docker_exec_stream_stdin(docker_runtime_t *rt, const char *exec_id, const docker_gvisor_exec_t *gv,
                                    const exec_spec_t *spec, int64_t deadline_ms,
                                    const runtime_output_sink_t *sink, runtime_exec_result_t *ret,
                                    bool *ret_killed, api_error_t *err)
{
    int r = 0;
    char path[160];
    docker_hijack_t hj = { .fd = -1 };
    docker_stream_t demux;
    docker_stream_init(&demux, &ret->out, &ret->err);
    docker_exec_tap(&demux, sink);
    *ret_killed = false;
    snprintf(path, sizeof path, "/exec/%s/start", exec_id);
    static const char start_body[] = "{\"Detach\":false,\"Tty\":false}";
    if ((r = docker_hijack_open(rt, path, start_body, sizeof start_body - 1, DOCKER_CALL_TIMEOUT_MS, &hj, err)) < 0)
        return r;
    if (hj.status == 404) {
        r = api_error_set(err, API_RUNTIME_ERROR, "sandbox container not found");
        goto cleanup;
    }
    /* Only an upgraded connection takes stdin: on any other answer the
     * connection is still HTTP, and the tenant's bytes written to it would
     * be read by the Engine as its next request. */
    if (hj.status != 101) {
        docker_reply_t rep = { .status = hj.status, .body = hj.early };
        char emsg[320];
        docker_reply_message(&rep, emsg, sizeof emsg);
        if (hj.status == 200)
            snprintf(emsg, sizeof emsg, "docker did not upgrade the connection (HTTP 200), so stdin cannot be sent");
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot start the command: %s", emsg);
        goto cleanup;
    }
    if (docker_stream_push(&demux, hj.early.data ? hj.early.data : "", hj.early.len) < 0) {
        r = api_error_set(err, API_INTERNAL, "out of memory");
        goto cleanup;
    }
    size_t sent = 0;
    bool wr_open = true;
    if (spec->stdin_len == 0) {
        shutdown(hj.fd, SHUT_WR);
        wr_open = false;
    }
    for (;;) {
        int left = time_left_ms(deadline_ms);
        if (left == 0 || docker_cancelled(rt) || docker_exec_client_cancelled(sink)) {
            docker_exec_kill(rt, exec_id, gv, ret);
            *ret_killed = true;
            goto cleanup;
        }
        struct pollfd p = { .fd = hj.fd, .events = (short)(POLLIN | (wr_open ? POLLOUT : 0)) };
        int n = poll(&p, 1, left < 100 ? left : 100);
        if (sink && sink->tick)
            sink->tick(sink->ud);
        if (n < 0 && errno != EINTR) {
            r = api_error_set(err, API_RUNTIME_ERROR, "docker exec stream: poll: %s", strerror(errno));
            goto cleanup;
        }
        if (n <= 0)
            continue;
        if (wr_open && (p.revents & (POLLOUT | POLLERR | POLLHUP))) {
            ssize_t w = send(hj.fd, spec->stdin_data + sent, spec->stdin_len - sent, MSG_NOSIGNAL);
            if (w > 0)
                sent += (size_t)w;
            /* Written, or the command no longer reads: its stdin ends. */
            if (sent == spec->stdin_len || (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
                shutdown(hj.fd, SHUT_WR);
                wr_open = false;
            }
        }
        if (p.revents & (POLLIN | POLLERR | POLLHUP)) {
            char buf[16384];
            ssize_t got = recv(hj.fd, buf, sizeof buf, 0);
            if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
                break; /* the output ended (Docker closes the stream when the command has exited) */
            if (got > 0 && docker_stream_push(&demux, buf, (size_t)got) < 0) {
                r = api_error_set(err, API_INTERNAL, "out of memory");
                goto cleanup;
            }
        }
    }
cleanup:
    docker_hijack_close(&hj);
    return r;
}

/* Docker reports a command it could not start ("executable file not found")
 * as exit code 126 with its own message on the stdout stream; make that look
 * like a shell's answer: 127 (not found) or 126, message on stderr. A
 * working directory that does not exist is the request's fault, not the
 * command's: SBX_EINVAL with API_INVALID_ARGUMENT naming it. */
static int docker_exec_fix_start_failure(runtime_exec_result_t *res, const exec_spec_t *spec, api_error_t *err)
{
    static const char marker[] = "OCI runtime exec failed";
    if (res->exit_code != 126 || res->out.len < sizeof marker - 1 ||
        memcmp(res->out.data, marker, sizeof marker - 1) != 0 || res->err.len != 0)
        return 0;
    const char *s = sbuf_cstr(&res->out);
    if (spec->cwd && strstr(s, "chdir to cwd"))
        return api_error_set(err, API_INVALID_ARGUMENT,
                             "cwd %.200s does not exist in the sandbox (or is not a directory)", spec->cwd);
    bool missing = strstr(s, "executable file not found") || strstr(s, "no such file or directory");
    if (missing)
        res->exit_code = 127;
    /* In the project's words, as a shell would say it: the command, then
     * the cause (the runtime's text after the command's name, without its
     * trailing ": unknown"), never the OCI runtime's preamble. */
    const char *argv0 = spec->argv && spec->argv[0] ? spec->argv[0] : "the command";
    char cause[240] = "";
    const char *c = strstr(s, "\": ");
    if (c) {
        c += 3;
        size_t n = strcspn(c, "\r\n");
        const char *tail = ": unknown";
        if (n >= strlen(tail) && memcmp(c + n - strlen(tail), tail, strlen(tail)) == 0)
            n -= strlen(tail);
        snprintf(cause, sizeof cause, "%.*s", (int)(n < sizeof cause - 1 ? n : sizeof cause - 1), c);
    }
    sbuf_reset(&res->out);
    sbuf_reset(&res->err);
    if (missing)
        sbuf_printf(&res->err, "sandbox: %.200s: command not found in the sandbox (%s)\n", argv0,
                    *cause ? cause : "no such file, or not in its PATH");
    else
        sbuf_printf(&res->err, "sandbox: %.200s: cannot be run in the sandbox (%s)\n", argv0,
                    *cause ? cause : "permission denied, or not an executable");
    return 0;
}

/* Creates the exec of spec in container ref: its id in exec_id. A missing
 * container is API_RUNTIME_ERROR "sandbox container not found", a stopped
 * one API_SANDBOX_EXITED saying how it ended. */
static int docker_exec_create(docker_runtime_t *rt, const char *ref, const exec_spec_t *spec, char exec_id[80],
                              api_error_t *err)
{
    int r = 0;
    char path[160];
    docker_reply_t rep;
    memset(&rep, 0, sizeof rep);
    json_object *body = json_object_new_object();
    jsonx_add_bool(body, "AttachStdin", spec->has_stdin);
    jsonx_add_bool(body, "AttachStdout", true);
    jsonx_add_bool(body, "AttachStderr", true);
    jsonx_add_bool(body, "Tty", false);
    jsonx_add(body, "Cmd", docker_json_strings((const char *const *)spec->argv));
    jsonx_add(body, "Env", docker_json_env(&spec->env));
    if (spec->cwd)
        jsonx_add_str(body, "WorkingDir", spec->cwd);
    if (spec->user)
        jsonx_add_str(body, "User", spec->user);
    snprintf(path, sizeof path, "/containers/%s/exec", ref);
    r = docker_call(rt, "POST", path, body, DOCKER_CALL_TIMEOUT_MS, &rep, err);
    if (r < 0)
        goto cleanup;
    if (rep.status == 404) {
        r = api_error_set(err, API_RUNTIME_ERROR, "sandbox container not found");
        goto cleanup;
    }
    if (rep.status == 409) {
        /* Docker: "container ... is not running". Say how it ended. */
        runtime_exit_t e;
        memset(&e, 0, sizeof e);
        api_error_t ignored;
        char msg[400] = "its state is unknown";
        if (docker_container_exit(rt, ref, &e, &ignored) == 0)
            docker_exit_message(&e, msg, sizeof msg);
        runtime_exit_release(&e);
        r = api_error_set(err, API_SANDBOX_EXITED, "the sandbox is not running: %s", msg);
        goto cleanup;
    }
    if (rep.status != 201 || !docker_reply_id(&rep, exec_id)) {
        char msg[320];
        docker_reply_message(&rep, msg, sizeof msg);
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot run the command in the sandbox: %s", msg);
        goto cleanup;
    }
cleanup:
    json_object_put(body);
    docker_reply_release(&rep);
    return r;
}

/* The exit code of exec_id into ret->exit_code: the stream ends when the
 * process closes its output, and Docker records the code a moment later
 * (at most DOCKER_EXIT_WAIT_MS). */
static int docker_exec_wait_exit(docker_runtime_t *rt, const char *exec_id, runtime_exec_result_t *ret,
                                 api_error_t *err)
{
    int64_t wait_until = time_deadline_ms(DOCKER_EXIT_WAIT_MS);
    for (;;) {
        bool running = false;
        int code = -1;
        pid_t pid = 0;
        int r = docker_exec_inspect(rt, exec_id, &running, &code, &pid, NULL, err);
        if (r < 0)
            return r;
        if (!running && code >= 0) {
            ret->exit_code = code;
            return 0;
        }
        if (time_mono_ms() >= wait_until)
            return api_error_set(err, API_RUNTIME_ERROR,
                                 "the command's output ended but docker reports no exit code");
        usleep(20000);
    }
}

/* The OCI runtime's "could not start" text arrives as the first bytes of
 * stdout; the live output must not show it either (the result gets the
 * project's words instead, docker_exec_fix_start_failure). Stdout is held
 * while it is a prefix of the marker, and all of it (up to the guard's
 * buffer) once it starts with it; anything else passes at once. */
#define EXEC_GUARD_MARKER "OCI runtime exec failed"
typedef struct exec_guard {
    runtime_output_sink_t sink;    /* ours: write is exec_guard_write */
    const runtime_output_sink_t *to;
    char held[1024];
    size_t n;
    int state;                     /* 0 deciding, 1 passing, 2 holding the marker's line */
} exec_guard_t;

static void exec_guard_flush(exec_guard_t *g)
{
    if (g->n)
        g->to->write(g->to->ud, 1, g->held, g->n);
    g->n = 0;
    g->state = 1;
}

static void exec_guard_write(void *ud, int stream, const char *p, size_t n)
{
    exec_guard_t *g = ud;
    if (stream != 1 || g->state == 1) {
        g->to->write(g->to->ud, stream, p, n);
        return;
    }
    static const char marker[] = EXEC_GUARD_MARKER;
    if (n > sizeof g->held - g->n) {
        exec_guard_flush(g);
        g->to->write(g->to->ud, stream, p, n);
        return;
    }
    memcpy(g->held + g->n, p, n);
    g->n += n;
    size_t cmp = g->n < sizeof marker - 1 ? g->n : sizeof marker - 1;
    if (memcmp(g->held, marker, cmp) != 0)
        exec_guard_flush(g);
    else if (g->n >= sizeof marker - 1)
        g->state = 2;
}

static bool exec_guard_cancelled(void *ud)
{
    exec_guard_t *g = ud;
    return g->to->cancelled && g->to->cancelled(g->to->ud);
}

static void exec_guard_tick(void *ud)
{
    exec_guard_t *g = ud;
    if (g->to->tick)
        g->to->tick(g->to->ud);
}

int docker_rt_exec(runtime_t *base, const char *ref, const exec_spec_t *spec, size_t max_output,
                   const runtime_output_sink_t *sink, runtime_exec_result_t *ret, api_error_t *err)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    int r = 0;
    char exec_id[80];
    exec_guard_t guard = { .to = NULL };
    memset(ret, 0, sizeof *ret);
    if (max_output == 0)
        max_output = SBX_EXEC_OUTPUT_DEFAULT;
    sbuf_init(&ret->out, max_output);
    sbuf_init(&ret->err, max_output);
    int64_t start = time_mono_ms();
    int64_t timeout_s = spec->timeout_seconds > 0 ? spec->timeout_seconds : EXEC_DEFAULT_TIMEOUT;
    int64_t deadline = start + timeout_s * 1000;

    if (!ref || !docker_name_ok(ref, 80))
        return api_error_set(err, API_RUNTIME_ERROR, "sandbox container not found");
    if (!spec->argv || spec->argc == 0)
        return api_error_set(err, API_INVALID_ARGUMENT, "argv must name a command");

    /* Under gVisor the timeout kill needs to know the sandbox's pids from
     * before the command started. */
    docker_gvisor_exec_t gv = { .gvisor = false, .after_pid = -1 };
    if (rt->offered[ISO_GVISOR])
        docker_gvisor_exec_prepare(rt, ref, &gv);

    if ((r = docker_exec_create(rt, ref, spec, exec_id, err)) < 0)
        goto cleanup;

    guard.to = sink;
    if (sink && sink->write) {
        guard.sink = (runtime_output_sink_t){ .write = exec_guard_write, .tick = exec_guard_tick,
                                              .cancelled = exec_guard_cancelled, .ud = &guard };
        sink = &guard.sink;
    }
    bool killed = false;
    if (spec->has_stdin)
        r = docker_exec_stream_stdin(rt, exec_id, &gv, spec, deadline, sink, ret, &killed, err);
    else
        r = docker_exec_stream(rt, exec_id, &gv, deadline, sink, ret, &killed, err);
    if (r < 0)
        goto cleanup;
    if (killed) {
        ret->duration_ms = time_mono_ms() - start;
        if (docker_cancelled(rt)) {
            r = api_error_set(err, API_CANCELLED, "the worker shut down while the command ran; it was killed");
            goto cleanup;
        }
        if (docker_exec_client_cancelled(sink))
            ret->cancelled = true;
        else
            ret->timed_out = true;
        ret->signal = SIGKILL;
        ret->exit_code = 128 + SIGKILL;
        goto cleanup;
    }

    if ((r = docker_exec_wait_exit(rt, exec_id, ret, err)) < 0)
        goto cleanup;
    /* Docker folds a fatal signal N into exit code 128+N, as a shell does. */
    if (ret->exit_code > 128 && ret->exit_code < 128 + 65)
        ret->signal = ret->exit_code - 128;
    r = docker_exec_fix_start_failure(ret, spec, err);
    ret->duration_ms = time_mono_ms() - start;
    if (guard.to && guard.to->write) {
        /* a start failure's text gives way to the project's words */
        if (r == 0 && guard.state == 2 && ret->out.len == 0 && ret->err.len > 0) {
            guard.n = 0;
            guard.to->write(guard.to->ud, 2, ret->err.data, ret->err.len);
        }
        exec_guard_flush(&guard);
    }
cleanup:
    if (guard.to && guard.to->write) {
        if (r < 0 && guard.state == 2)
            guard.n = 0;          /* a start failure refused whole (a missing cwd): its text is no output */
        exec_guard_flush(&guard); /* a kill or another error: what was held is output too */
    }
    if (r < 0)
        runtime_exec_result_release(ret);
    return r;
}
