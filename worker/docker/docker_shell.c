/* The Docker backend's interactive shells (worker/runtime.h:
 * runtime_shell_*): an Engine exec with Tty, started on a hijacked
 * connection (docker_attach.c) that carries the terminal both ways, resized
 * with POST /exec/{id}/resize, its exit code from GET /exec/{id}/json, and
 * killed as a timed-out exec is (host processes, or inside gVisor) when the
 * session ends before the command. */
#include "docker_internal.h"
#include "jsonx.h"
#include "timeutil.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A resize right after the start may come before Docker has the process:
 * it is tried again for this long. */
#define DOCKER_SHELL_RESIZE_RETRY_MS 2000
/* A shell closed before Docker runs its process waits this long for it to. */
#define DOCKER_SHELL_START_WAIT_MS 2000

struct runtime_shell {
    char exec_id[80];
    docker_gvisor_exec_t gv;
    docker_hijack_t hj;
};

/* POST /containers/{ref}/exec with all three streams attached, a terminal
 * when req->tty. */
static int shell_create(docker_runtime_t *rt, const runtime_shell_req_t *req, char exec_id[80], api_error_t *err)
{
    char path[160];
    docker_reply_t rep;
    memset(&rep, 0, sizeof rep);
    json_object *body = json_object_new_object(), *cmd = json_object_new_array(), *env = json_object_new_array();
    int r = 0;
    if (!body || !cmd || !env) {
        json_object_put(cmd);
        json_object_put(env);
        r = api_error_set(err, API_INTERNAL, "out of memory");
        goto cleanup;
    }
    for (size_t i = 0; i < req->argc; i++)
        json_object_array_add(cmd, json_object_new_string(req->argv[i]));
    if (req->tty)
        json_object_array_add(env, json_object_new_string("TERM=xterm"));
    for (size_t i = 0; req->env && i < req->envc; i++)
        json_object_array_add(env, json_object_new_string(req->env[i]));
    jsonx_add_bool(body, "AttachStdin", true);
    jsonx_add_bool(body, "AttachStdout", true);
    jsonx_add_bool(body, "AttachStderr", true);
    jsonx_add_bool(body, "Tty", req->tty);
    jsonx_add(body, "Cmd", cmd);
    jsonx_add(body, "Env", env);
    if (req->cwd)
        jsonx_add_str(body, "WorkingDir", req->cwd);
    snprintf(path, sizeof path, "/containers/%s/exec", req->ref);
    if ((r = docker_call(rt, "POST", path, body, DOCKER_CALL_TIMEOUT_MS, &rep, err)) < 0)
        goto cleanup;
    if (rep.status == 404) {
        r = api_error_set(err, API_RUNTIME_ERROR, "sandbox container not found");
    } else if (rep.status == 409) {
        r = api_error_set(err, API_SANDBOX_EXITED, "the sandbox is not running");
    } else if (rep.status != 201 || !docker_reply_id(&rep, exec_id)) {
        char msg[320];
        docker_reply_message(&rep, msg, sizeof msg);
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot start a shell in the sandbox: %s", msg);
    }
cleanup:
    if (body)
        json_object_put(body);
    docker_reply_release(&rep);
    return r;
}

/* One resize call: 0, or < 0 with Docker's answer in err. */
static int shell_resize_once(docker_runtime_t *rt, const char *exec_id, unsigned cols, unsigned rows,
                             api_error_t *err)
{
    char path[200];
    docker_reply_t rep;
    memset(&rep, 0, sizeof rep);
    snprintf(path, sizeof path, "/exec/%s/resize?h=%u&w=%u", exec_id, rows, cols);
    int r = docker_call(rt, "POST", path, NULL, DOCKER_CALL_TIMEOUT_MS, &rep, err);
    if (r == 0 && rep.status != 200 && rep.status != 201) {
        char msg[320];
        docker_reply_message(&rep, msg, sizeof msg);
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot resize the terminal: %s", msg);
    }
    docker_reply_release(&rep);
    return r;
}

int docker_rt_shell_open(runtime_t *base, const runtime_shell_req_t *req, runtime_shell_t **ret, int *ret_fd,
                         runtime_shell_early_t *ret_early, api_error_t *err)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    int r = 0;
    char path[160];
    *ret = NULL;
    *ret_fd = -1;
    ret_early->data = NULL;
    ret_early->len = 0;
    if (!req->ref || !docker_name_ok(req->ref, 80))
        return api_error_set(err, API_RUNTIME_ERROR, "sandbox container not found");
    if (!req->argv || req->argc == 0)
        return api_error_set(err, API_INVALID_ARGUMENT, "argv must name a command");
    runtime_shell_t *s = calloc(1, sizeof *s);
    if (!s)
        return api_error_set(err, API_INTERNAL, "out of memory");
    s->hj.fd = -1;
    s->gv.after_pid = -1;
    if (rt->offered[ISO_GVISOR])
        docker_gvisor_exec_prepare(rt, req->ref, &s->gv);
    if ((r = shell_create(rt, req, s->exec_id, err)) < 0)
        goto cleanup;
    snprintf(path, sizeof path, "/exec/%s/start", s->exec_id);
    const char *start_body = req->tty ? "{\"Detach\":false,\"Tty\":true}" : "{\"Detach\":false,\"Tty\":false}";
    if ((r = docker_hijack_open(rt, path, start_body, strlen(start_body), DOCKER_CALL_TIMEOUT_MS, &s->hj, err)) < 0)
        goto cleanup;
    if (s->hj.status != 101) {
        /* Not upgraded: the connection is still HTTP, and keystrokes written
         * to it would be read by the Engine as its next request. */
        docker_reply_t rep = { .status = s->hj.status, .body = s->hj.early };
        char emsg[320];
        docker_reply_message(&rep, emsg, sizeof emsg);
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot start the shell: %s", emsg);
        goto cleanup;
    }
    /* The first size: Docker may not have the process yet. */
    int64_t until = time_deadline_ms(DOCKER_SHELL_RESIZE_RETRY_MS);
    api_error_t rerr;
    while (req->tty && shell_resize_once(rt, s->exec_id, req->cols, req->rows, &rerr) < 0 &&
           time_left_ms(until) > 0 && !docker_cancelled(rt))
        usleep(20000);
    *ret_fd = s->hj.fd;
    ret_early->data = s->hj.early.data;
    ret_early->len = s->hj.early.len;
    *ret = s;
    s = NULL;
cleanup:
    if (s)
        docker_rt_shell_close(base, s);
    return r;
}

int docker_rt_shell_resize(runtime_t *base, runtime_shell_t *s, unsigned cols, unsigned rows, api_error_t *err)
{
    return shell_resize_once((docker_runtime_t *)base, s->exec_id, cols, rows, err);
}

int docker_rt_shell_exit_code(runtime_t *base, runtime_shell_t *s, int *ret_code, api_error_t *err)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    int64_t until = time_deadline_ms(DOCKER_EXIT_WAIT_MS);
    for (;;) {
        bool running = false;
        int code = -1;
        pid_t pid = 0;
        int r = docker_exec_inspect(rt, s->exec_id, &running, &code, &pid, NULL, err);
        if (r < 0)
            return r;
        if (!running && code >= 0) {
            *ret_code = code;
            return 0;
        }
        if (time_left_ms(until) == 0)
            return api_error_set(err, API_RUNTIME_ERROR, "the shell's terminal closed but docker reports no exit code");
        usleep(20000);
    }
}

void docker_rt_shell_close(runtime_t *base, runtime_shell_t *s)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    if (!s)
        return;
    if (s->exec_id[0]) {
        /* Closed right after its start, the exec may not run yet (not
         * running, no exit code, no pid): wait for it to, as the resize
         * does, or it would be left running. */
        int64_t until = time_deadline_ms(DOCKER_SHELL_START_WAIT_MS);
        for (;;) {
            bool running = false;
            int code = -1;
            pid_t pid = 0;
            api_error_t ignored;
            if (docker_exec_inspect(rt, s->exec_id, &running, &code, &pid, NULL, &ignored) < 0)
                break;
            if (running) {
                runtime_exec_result_t res;
                memset(&res, 0, sizeof res);
                docker_exec_kill(rt, s->exec_id, &s->gv, &res);
                break;
            }
            if (code >= 0 || pid != 0 || time_left_ms(until) == 0)
                break; /* it ended */
            usleep(20000);
        }
    }
    docker_hijack_close(&s->hj);
    free(s);
}
