/* The Docker backend's create: image pulls, the start and its
 * confirmation, and what a stopped container left (exit, output tail). */
#include "docker_internal.h"
#include "docker_stream.h"
#include "imageref.h"
#include "jsonx.h"
#include "netaddr.h"
#include "log.h"
#include "observed.h"
#include "timeutil.h"
#include "utf8.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- images ------------------------------------------------------------ */

void docker_pull_line(docker_pull_t *p)
{
    json_object *o = NULL;
    if (!p->line.truncated && p->line.len > 0 && jsonx_parse(p->line.data, p->line.len, &o, NULL) == 0) {
        const char *e = jsonx_get_str(o, "error");
        if (!e)
            e = jsonx_get_str(jsonx_get_obj(o, "errorDetail"), "message");
        if (!e && jsonx_get_obj(o, "errorDetail"))
            e = "pull failed";
        if (!e && !jsonx_get_str(o, "status"))
            e = jsonx_get_str(o, "message"); /* a non-200 answer is {"message":...} */
        if (e && !p->failed) {
            snprintf(p->error, sizeof p->error, "%s", e);
            p->failed = true;
        }
        json_object_put(o);
    }
    sbuf_reset(&p->line);
}

size_t docker_pull_write_cb(char *s, size_t size, size_t nmemb, void *ud)
{
    docker_pull_t *p = ud;
    size_t n = size * nmemb;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\n') {
            docker_pull_line(p);
        } else if (sbuf_append_bounded(&p->line, &s[i], 1) < 0) {
            return 0;
        }
    }
    return n;
}

static int docker_image_pull(docker_runtime_t *rt, const char *image, api_error_t *err)
{
    int r = 0;
    char repo[SBX_MAX_IMAGE_BYTES + 1], tag[SBX_MAX_IMAGE_BYTES + 1], path[2048];
    char *erepo = NULL, *etag = NULL;
    docker_pull_t p;
    char why[400];
    memset(&p, 0, sizeof p);
    sbuf_init(&p.line, DOCKER_PULL_LINE_BYTES);
    /* The controller judged the reference at admission; the worker's own
     * image_registries judges it again before dockerd contacts anything. */
    if (imageref_check(rt->image_registries, image, why, sizeof why) < 0) {
        r = api_error_set(err, API_POLICY_DENIED, "this worker does not pull from there: %s", why);
        goto cleanup;
    }
    if (docker_image_split(image, repo, sizeof repo, tag, sizeof tag) < 0) {
        r = api_error_set(err, API_IMAGE_UNAVAILABLE, "image reference \"%.200s\" is not valid", image);
        goto cleanup;
    }
    erepo = curl_easy_escape(NULL, repo, 0);
    etag = curl_easy_escape(NULL, tag, 0);
    if (!erepo || !etag) {
        api_error_set(err, API_INTERNAL, "out of memory");
        r = SBX_ENOMEM;
        goto cleanup;
    }
    snprintf(path, sizeof path, "/images/create?fromImage=%s&tag=%s", erepo, etag);
    long status = 0;
    r = docker_call_ex(rt, "POST", path, NULL, DOCKER_PULL_TIMEOUT_MS, docker_pull_write_cb, &p, &status, err);
    if (r < 0)
        goto cleanup;
    docker_pull_line(&p); /* a last line without a newline */
    if (status != 200 || p.failed) {
        /* Only fixed text goes back: Docker's message may quote whatever the
         * registry answered. The operator finds it in the worker's log. */
        imageref_pull_kind_t kind = imageref_pull_kind(p.failed ? p.error : NULL, status == 200 ? 0 : status);
        char msg[sizeof err->message];
        imageref_pull_message(image, kind, msg, sizeof msg);
        log_warn("worker", "pull of image %.200s failed (%s, HTTP status %ld): %s", image,
                 imageref_pull_kind_name(kind), status, p.failed ? p.error : "docker answered without a reason");
        r = api_error_set(err, API_IMAGE_UNAVAILABLE, "%s", msg);
        goto cleanup;
    }
cleanup:
    curl_free(erepo);
    curl_free(etag);
    sbuf_release(&p.line);
    return r;
}

/* Makes sure the image is present, pulling it when Docker does not have it. */
static int docker_image_ensure(docker_runtime_t *rt, const char *image, api_error_t *err)
{
    int r = 0;
    char path[SBX_MAX_IMAGE_BYTES + 64];
    docker_reply_t rep;
    memset(&rep, 0, sizeof rep);
    if (!docker_image_ok(image))
        return api_error_set(err, API_IMAGE_UNAVAILABLE, "image reference \"%.200s\" is not valid", image);
    snprintf(path, sizeof path, "/images/%s/json", image);
    r = docker_call(rt, "GET", path, NULL, DOCKER_CALL_TIMEOUT_MS, &rep, err);
    if (r < 0)
        goto cleanup;
    if (rep.status == 200)
        goto cleanup;
    if (rep.status != 404) {
        char msg[320];
        docker_reply_message(&rep, msg, sizeof msg);
        r = api_error_set(err, API_RUNTIME_ERROR, "docker image inspect %.200s: %s", image, msg);
        goto cleanup;
    }
    r = docker_image_pull(rt, image, err);
cleanup:
    docker_reply_release(&rep);
    return r;
}

/* ---- what a stopped container left ------------------------------------ */

/* The last bytes of a demultiplexed log stream: each write is
 * demultiplexed into `chunk`, whose end is then kept in `keep`. */
typedef struct docker_tail {
    docker_stream_t demux;
    sbuf_t chunk;
    char *keep;          /* 2 * max bytes */
    size_t len, max;
    bool failed;
} docker_tail_t;

static size_t docker_tail_write_cb(char *p, size_t size, size_t nmemb, void *ud)
{
    docker_tail_t *t = ud;
    size_t n = size * nmemb;
    sbuf_reset(&t->chunk);
    if (docker_stream_push(&t->demux, p, n) < 0) {
        t->failed = true;
        return 0;
    }
    const char *d = t->chunk.data;
    size_t m = t->chunk.len;
    if (m == 0) /* a frame header alone: no bytes (and data may be NULL) */
        return n;
    if (m >= t->max) {
        memcpy(t->keep, d + m - t->max, t->max);
        t->len = t->max;
    } else {
        if (t->len + m > 2 * t->max) {
            memmove(t->keep, t->keep + t->len - (t->max - m), t->max - m);
            t->len = t->max - m;
        }
        memcpy(t->keep + t->len, d, m);
        t->len += m;
    }
    return n;
}

/* The last at most max bytes of container id's main process output (stdout
 * and stderr in the order written), UTF-8 repaired: GET
 * /containers/{id}/logs?stdout=1&stderr=1&tail=N, demultiplexed. *ret is
 * malloc'd, or NULL when the container wrote nothing. Reusable for any
 * container of ours; bounded to DOCKER_DETAIL_TIMEOUT_MS. */
static int docker_container_logs_tail(docker_runtime_t *rt, const char *id, size_t max, char **ret, api_error_t *err)
{
    int r = 0;
    char path[256];
    long status = 0;
    docker_tail_t t;
    memset(&t, 0, sizeof t);
    *ret = NULL;
    if (!docker_name_ok(id, 80) || max == 0)
        return api_error_set(err, API_INVALID_ARGUMENT, "malformed container id");
    t.max = max;
    t.keep = malloc(2 * max);
    /* One write of libcurl is at most CURL_MAX_WRITE_SIZE; the chunk never
     * has to drop anything. */
    sbuf_init(&t.chunk, 4 * CURL_MAX_WRITE_SIZE);
    docker_stream_init(&t.demux, &t.chunk, &t.chunk);
    if (!t.keep) {
        r = api_error_set(err, API_INTERNAL, "out of memory");
        goto cleanup;
    }
    snprintf(path, sizeof path, "/containers/%s/logs?stdout=1&stderr=1&tail=%d", id, DOCKER_LOGS_TAIL_LINES);
    r = docker_call_raw(rt, "GET", path, NULL, 0, NULL, DOCKER_DETAIL_TIMEOUT_MS, docker_tail_write_cb, &t, &status,
                        err);
    if (r < 0)
        goto cleanup;
    if (status != 200 || t.failed) {
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot read the logs of container %.12s: HTTP status %ld", id,
                          status);
        goto cleanup;
    }
    if (t.len > 0 && !(*ret = utf8_tail(t.keep, t.len, max)))
        r = api_error_set(err, API_INTERNAL, "out of memory");
cleanup:
    free(t.keep);
    sbuf_release(&t.chunk);
    return r;
}

int docker_container_exit(docker_runtime_t *rt, const char *id, runtime_exit_t *ret, api_error_t *err)
{
    json_object *o = NULL;
    const char *cid = NULL;
    int r = docker_container_inspect(rt, id, DOCKER_DETAIL_TIMEOUT_MS, &o, &cid, err);
    if (r < 0)
        return r;
    docker_exit_from_inspect(o, ret);
    /* Only a SIGKILL can be the disk watch's (a walk of the layer costs). */
    ret->disk_quota_exceeded = observed_stopped(ret->state) && ret->exit_code == 137 && docker_disk_exceeded(rt, o);
    json_object_put(o);
    api_error_t ignored;
    free(ret->output_tail);
    ret->output_tail = NULL;
    docker_container_logs_tail(rt, id, SBX_OUTPUT_TAIL_MAX, &ret->output_tail, &ignored);
    return 0;
}

void docker_exit_message(const runtime_exit_t *e, char *out, size_t outlen)
{
    observed_t ob;
    memset(&ob, 0, sizeof ob);
    snprintf(ob.state, sizeof ob.state, "%s", e->state[0] ? e->state : "unknown");
    ob.has_exit_code = e->known && e->exit_code >= 0;
    ob.exit_code = e->exit_code;
    ob.oom_killed = e->oom_killed;
    ob.disk_quota_exceeded = e->disk_quota_exceeded;
    snprintf(ob.finished_at, sizeof ob.finished_at, "%s", e->finished_at);
    snprintf(ob.error, sizeof ob.error, "%s", e->error);
    ob.output_tail = e->output_tail;
    ob.output_tail_len = e->output_tail ? strlen(e->output_tail) : 0;
    observed_message(&ob, out, outlen);
}

/* ---- containers -------------------------------------------------------- */

static int docker_container_start(docker_runtime_t *rt, const char *id, api_error_t *err)
{
    char path[256];
    docker_reply_t rep;
    snprintf(path, sizeof path, "/containers/%s/start", id);
    int r = docker_call(rt, "POST", path, NULL, DOCKER_CALL_TIMEOUT_MS, &rep, err);
    if (r == 0 && rep.status != 204 && rep.status != 304) {
        char msg[320];
        docker_reply_message(&rep, msg, sizeof msg);
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot start the sandbox container: %s", msg);
    }
    docker_reply_release(&rep);
    return r;
}

int docker_container_delete(docker_runtime_t *rt, const char *ref, api_error_t *err)
{
    char path[256];
    docker_reply_t rep;
    snprintf(path, sizeof path, "/containers/%s?force=true&v=true", ref);
    int r = docker_call(rt, "DELETE", path, NULL, DOCKER_REMOVE_TIMEOUT_MS, &rep, err);
    /* 404: already gone; 409: Docker is already removing it. */
    if (r == 0 && rep.status != 204 && rep.status != 200 && rep.status != 404 && rep.status != 409) {
        char msg[320];
        docker_reply_message(&rep, msg, sizeof msg);
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot remove container %.80s: %s", ref, msg);
    }
    docker_reply_release(&rep);
    return r;
}

/* Starts the removal of a container after a failed start and keeps the
 * start's error in err. */
static void docker_container_discard(docker_runtime_t *rt, const char *id)
{
    api_error_t ignored;
    docker_container_delete(rt, id, &ignored);
}

int docker_container_inspect(docker_runtime_t *rt, const char *name, long timeout_ms, json_object **ret,
                             const char **ret_id, api_error_t *err)
{
    char path[256];
    docker_reply_t rep;
    *ret = NULL;
    *ret_id = NULL;
    snprintf(path, sizeof path, "/containers/%s/json", name);
    int r = docker_call(rt, "GET", path, NULL, timeout_ms, &rep, err);
    if (r < 0)
        goto cleanup;
    if (rep.status == 404) {
        api_error_set(err, API_NOT_FOUND, "no container %s", name);
        r = SBX_ENOTFOUND;
        goto cleanup;
    }
    json_object *o = docker_reply_json(&rep);
    const char *id = jsonx_get_str(o, "Id");
    if (rep.status != 200 || !id || !docker_name_ok(id, 80)) {
        char msg[320];
        docker_reply_message(&rep, msg, sizeof msg);
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot inspect container %s: %s", name,
                          rep.body.truncated ? "the reply is too large" : msg);
        if (o)
            json_object_put(o);
        goto cleanup;
    }
    *ret = o;
    *ret_id = id;
cleanup:
    docker_reply_release(&rep);
    return r;
}

/* True when a child of pid (docker-init, the container's pid 1 under Init)
 * runs another program than pid itself: the main process was exec'd. */
static bool docker_main_execd(pid_t pid)
{
    char path[64];
    struct stat self, child;
    snprintf(path, sizeof path, "/proc/%d/exe", (int)pid);
    if (stat(path, &self) < 0)
        return false;
    pid_t kids[16];
    size_t n = 0;
    docker_pid_children(pid, kids, &n, sizeof kids / sizeof kids[0]);
    for (size_t i = 0; i < n; i++) {
        snprintf(path, sizeof path, "/proc/%d/exe", (int)kids[i]);
        if (stat(path, &child) == 0 && (child.st_dev != self.st_dev || child.st_ino != self.st_ino))
            return true;
    }
    return false;
}

/* After a start: asks Docker until it confirms the main process running
 * (docker-init has exec'd it, seen in /proc when watch_procs) or the
 * container stopped, at most DOCKER_START_CONFIRM_MS (then running is
 * taken as confirmed: a later death is the heartbeat's to see). A stopped
 * container is API_SANDBOX_EXITED with *ret_exit filled. */
static int docker_container_confirm(docker_runtime_t *rt, const char *id, bool watch_procs, runtime_exit_t *ret_exit,
                                    api_error_t *err)
{
    int64_t until = time_deadline_ms(DOCKER_START_CONFIRM_MS);
    for (;;) {
        json_object *o = NULL;
        const char *cid = NULL;
        int r = docker_container_inspect(rt, id, DOCKER_CALL_TIMEOUT_MS, &o, &cid, err);
        if (r < 0) {
            if (r == SBX_ENOTFOUND)
                r = api_error_set(err, API_SANDBOX_EXITED, "the sandbox container was removed right after its start");
            return r;
        }
        json_object *st = jsonx_get_obj(o, "State");
        bool running = false;
        int64_t pid = 0;
        jsonx_get_bool(st, "Running", &running);
        jsonx_get_int(st, "Pid", &pid);
        if (!running) {
            runtime_exit_t e;
            memset(&e, 0, sizeof e);
            docker_exit_from_inspect(o, &e);
            json_object_put(o);
            api_error_t ignored;
            docker_container_logs_tail(rt, id, SBX_OUTPUT_TAIL_MAX, &e.output_tail, &ignored);
            char msg[sizeof err->message];
            docker_exit_message(&e, msg, sizeof msg);
            api_error_set(err, API_SANDBOX_EXITED, "the sandbox is not running after its start: %s", msg);
            if (ret_exit) {
                runtime_exit_release(ret_exit);
                *ret_exit = e;
            } else {
                runtime_exit_release(&e);
            }
            return SBX_ERUNTIME;
        }
        bool ours = pid > 1 && docker_pid_in_container((pid_t)pid, cid);
        bool alien = pid > 1 && !ours && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
        json_object_put(o);
        /* Another pid namespace (alien): nothing to watch in /proc. */
        if (!watch_procs || alien || (ours && docker_main_execd((pid_t)pid)))
            return 0;
        if (time_mono_ms() >= until)
            return 0;
        if (docker_cancelled(rt))
            return api_error_set(err, API_CANCELLED, "the worker is shutting down");
        usleep(DOCKER_START_POLL_US);
    }
}

/* A start that Docker refused: when the container shows why (the runtime
 * could not run its process), that is API_SANDBOX_EXITED with *ret_exit
 * filled; otherwise err keeps the start's error. */
static void docker_start_failure(docker_runtime_t *rt, const char *id, runtime_exit_t *ret_exit, api_error_t *err)
{
    if (err->code == API_CANCELLED)
        return;
    runtime_exit_t e;
    memset(&e, 0, sizeof e);
    api_error_t ignored;
    if (docker_container_exit(rt, id, &e, &ignored) < 0 || (!e.error[0] && e.exit_code <= 0)) {
        runtime_exit_release(&e);
        return;
    }
    if (!e.error[0]) {
        /* The start's own message says why. */
        const char *m = strstr(err->message, ": ");
        docker_text_line(m ? m + 2 : err->message, e.error, sizeof e.error);
    }
    char msg[sizeof err->message];
    docker_exit_message(&e, msg, sizeof msg);
    api_error_set(err, API_SANDBOX_EXITED, "the sandbox could not start: %s", msg);
    if (ret_exit) {
        runtime_exit_release(ret_exit);
        *ret_exit = e;
    } else {
        runtime_exit_release(&e);
    }
}

/* Starts container id when start is true, then waits for the runtime to
 * confirm its main process running. A start Docker refuses, or a container
 * that stopped, is removed and SBX_ERUNTIME with err and *ret_exit saying
 * why; a shutdown during the wait (API_CANCELLED) leaves it for the retried
 * create to adopt. */
static int docker_container_run(docker_runtime_t *rt, const char *id, bool start, bool watch_procs,
                                runtime_exit_t *ret_exit, api_error_t *err)
{
    if (start && docker_container_start(rt, id, err) < 0) {
        docker_start_failure(rt, id, ret_exit, err);
        docker_container_discard(rt, id);
        return SBX_ERUNTIME;
    }
    if (docker_container_confirm(rt, id, watch_procs, ret_exit, err) < 0) {
        if (err->code != API_CANCELLED)
            docker_container_discard(rt, id);
        return SBX_ERUNTIME;
    }
    return 0;
}

/* ---- pause and resume --------------------------------------------------- */

int docker_rt_pause(runtime_t *base, const char *ref, bool *ret_memory, api_error_t *err)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    char path[160];
    docker_reply_t rep;
    *ret_memory = false; /* a stop: the files stay, the processes end */
    if (!docker_name_ok(ref, 80))
        return api_error_set(err, API_INVALID_ARGUMENT, "malformed container reference");
    /* docker-init forwards the stop signal; `sleep` ends at once. A main
     * process that ignores it is killed after the grace. */
    snprintf(path, sizeof path, "/containers/%s/stop?t=%d", ref, DOCKER_PAUSE_GRACE_S);
    int r = docker_call(rt, "POST", path, NULL, DOCKER_REMOVE_TIMEOUT_MS, &rep, err);
    if (r < 0)
        return r;
    if (rep.status == 404)
        r = api_error_set(err, API_NOT_FOUND, "sandbox container %.80s not found", ref);
    else if (rep.status != 204 && rep.status != 304) { /* 304: stopped already (a retried pause) */
        char msg[320];
        docker_reply_message(&rep, msg, sizeof msg);
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot stop the sandbox container: %s", msg);
    }
    docker_reply_release(&rep);
    return r;
}

int docker_rt_resume(runtime_t *base, const char *sandbox_id, const char *ref, runtime_exit_t *ret_exit,
                     api_error_t *err)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    json_object *o = NULL;
    const char *id = NULL;
    int r = docker_container_inspect(rt, ref, DOCKER_CALL_TIMEOUT_MS, &o, &id, err);
    if (r < 0)
        return r == SBX_ENOTFOUND ? api_error_set(err, API_NOT_FOUND, "sandbox container %.80s not found", ref) : r;
    char cid[80], allow[SBX_EGRESS_ALLOW_MAX * NETADDR_CIDR_MAX] = "";
    snprintf(cid, sizeof cid, "%s", id);
    json_object *hc = jsonx_get_obj(o, "HostConfig");
    const char *runtime = jsonx_get_str(hc, "Runtime");
    const char *a = jsonx_get_str(jsonx_get_obj(jsonx_get_obj(o, "Config"), "Labels"), RUNTIME_LABEL_EGRESS_ALLOW);
    if (a)
        snprintf(allow, sizeof allow, "%s", a);
    bool filtered = jsonx_get_str(jsonx_get_obj(jsonx_get_obj(o, "Config"), "Labels"), RUNTIME_LABEL_EGRESS) != NULL;
    bool watch_procs = !(runtime && rt->gvisor_runtime[0] && strcmp(runtime, rt->gvisor_runtime) == 0);
    json_object_put(o);
    /* The container is kept whatever happens: its files are the point. */
    if (docker_container_start(rt, cid, err) < 0) {
        docker_start_failure(rt, cid, ret_exit, err);
        return SBX_ERUNTIME;
    }
    if (docker_container_confirm(rt, cid, watch_procs, ret_exit, err) < 0)
        return SBX_ERUNTIME;
    /* Its address may be another after a start: the filter learns it
     * (until then the filter refuses whatever it sends) */
    if (filtered && (r = docker_filter_add(rt, sandbox_id, cid, err)) < 0) {
        bool ignored;
        api_error_t e2;
        docker_rt_pause(base, cid, &ignored, &e2);
        return r;
    }
    /* and its egress_allow rules follow it (a sandbox that had them never
     * runs without them). */
    if (*allow && !filtered) {
        docker_egress_allow_drop(rt, sandbox_id);
        if ((r = docker_egress_allow_add(rt, sandbox_id, cid, allow, err)) < 0) {
            bool ignored;
            api_error_t e2;
            docker_rt_pause(base, cid, &ignored, &e2);
            return r;
        }
    }
    return 0;
}

/* The container named for the sandbox already exists (a retried create):
 * checks it is ours, starts it when needed and returns its id. */
static int docker_container_adopt(docker_runtime_t *rt, const runtime_create_req_t *req, const char *name,
                                  bool watch_procs, char ret_ref[80], runtime_exit_t *ret_exit, api_error_t *err)
{
    json_object *o = NULL;
    const char *id = NULL;
    int r = docker_container_inspect(rt, name, DOCKER_CALL_TIMEOUT_MS, &o, &id, err);
    if (r < 0) {
        if (r == SBX_ENOTFOUND) /* removed since the create said it exists */
            r = api_error_set(err, API_RUNTIME_ERROR, "container %s vanished while being created", name);
        goto cleanup;
    }
    const char *owner = jsonx_get_str(jsonx_get_obj(jsonx_get_obj(o, "Config"), "Labels"), RUNTIME_LABEL_SANDBOX);
    if (!owner || strcmp(owner, req->sandbox_id) != 0) {
        r = api_error_set(err, API_RUNTIME_ERROR, "a container named %s exists that is not managed for this sandbox",
                          name);
        goto cleanup;
    }
    bool running = false;
    jsonx_get_bool(jsonx_get_obj(o, "State"), "Running", &running);
    r = docker_container_run(rt, id, !running, watch_procs, ret_exit, err);
    if (r < 0)
        goto cleanup;
    snprintf(ret_ref, 80, "%s", id);
cleanup:
    if (o)
        json_object_put(o);
    return r;
}

/* What a create runs with: the class's runtime and the network for the
 * mode, or API_ISOLATION_UNAVAILABLE naming both when this worker cannot
 * provide that combination (never a weaker one instead). */
static int docker_create_plan(docker_runtime_t *rt, isolation_t iso, net_mode_t net, bool filtered,
                              docker_create_plan_t *ret, api_error_t *err)
{
    if ((int)iso < 0 || (int)iso >= DOCKER_CLASSES || !rt->offered[iso])
        return api_error_set(err, API_ISOLATION_UNAVAILABLE,
                             "this worker cannot run isolation %s with network %s: the class is not offered (%s)",
                             isolation_name(iso), net_mode_name(net),
                             (int)iso >= 0 && (int)iso < DOCKER_CLASSES && rt->considered[iso]
                                 ? rt->probe[iso]
                                 : "the docker runtime has no such class");
    if (!filtered && ((int)net < 0 || (int)net >= DOCKER_MODES || !(rt->net_modes[iso] & (1u << net))))
        return api_error_set(err, API_ISOLATION_UNAVAILABLE,
                             "this worker cannot run isolation %s with network %s: %s", isolation_name(iso),
                             net_mode_name(net),
                             (int)net >= 0 && (int)net < DOCKER_MODES ? rt->net_why[iso][net] : "unknown mode");
    ret->runtime = iso == ISO_GVISOR ? rt->gvisor_runtime : NULL;
    ret->network_mode = net == NET_NONE ? "none" : rt->net_name[net];
    ret->storage_quota = rt->storage_quota;
    ret->image = NULL;
    ret->mounts = NULL;
    ret->filter_dns = NULL;
    if (filtered) { /* egress rules by domain: the filtered network, never plain open */
        if (!(rt->net_modes[iso] & (1u << NET_OFFER_FILTERED)))
            return api_error_set(err, API_ISOLATION_UNAVAILABLE,
                                 "this worker cannot run isolation %s with egress rules by domain: %s",
                                 isolation_name(iso), rt->net_why[iso][NET_OFFER_FILTERED]);
        if (docker_network_ensure(rt, (net_mode_t)NET_OFFER_FILTERED, err) < 0 || docker_filter_check(rt, err) < 0) {
            char why[sizeof err->message];
            snprintf(why, sizeof why, "%s", err->message);
            return api_error_set(err, err->code, "isolation %s with egress rules by domain: %s", isolation_name(iso),
                                 why);
        }
        ret->network_mode = rt->net_name[NET_OFFER_FILTERED];
        ret->filter_dns = rt->filter_gw;
        return 0;
    }
    if (net != NET_NONE &&
        (docker_network_ensure(rt, net, err) < 0 || (net == NET_OPEN && docker_egress_check(rt, err) < 0))) {
        /* The network (or its egress rules) was fine at start; someone removed or replaced it. */
        char why[sizeof err->message];
        snprintf(why, sizeof why, "%s", err->message);
        return api_error_set(err, err->code, "isolation %s with network %s: %s", isolation_name(iso),
                             net_mode_name(net), why);
    }
    return 0;
}

int docker_rt_create(runtime_t *base, const runtime_create_req_t *req, char ret_ref[80],
                     runtime_exit_t *ret_exit, api_error_t *err)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    int r = 0;
    char name[SBX_ID_MAX + 8], path[256], id[80];
    json_object *body = NULL, *mounts = NULL;
    docker_reply_t rep;
    docker_create_plan_t plan = { 0 };
    memset(&rep, 0, sizeof rep);
    if (!docker_name_ok(req->sandbox_id, SBX_ID_MAX) || !req->spec || !req->spec->image)
        return api_error_set(err, API_INVALID_ARGUMENT, "malformed create request (sandbox id or image)");
    bool filtered = req->spec->network == NET_OPEN && req->spec->egress.set;
    r = docker_create_plan(rt, req->isolation, req->spec->network, filtered, &plan, err);
    if (r < 0)
        return r;
    snprintf(name, sizeof name, "sbx-%s", req->sandbox_id);

    char snap_image[128];
    if (req->spec->from) {
        /* Only this tenant's snapshot that this worker made, never a pull. */
        r = docker_snapshot_image_for(rt, req->spec->from, req->tenant ? req->tenant : req->spec->tenant,
                                      req->cluster_id, req->worker_name, snap_image, sizeof snap_image, err);
        if (r < 0)
            goto cleanup;
        plan.image = snap_image;
    } else if (spec_image_is_snapshot(req->spec->image)) {
        r = api_error_set(err, API_POLICY_DENIED, "image %.200s names the snapshot repository %s: start from a "
                          "snapshot with from", req->spec->image, SPEC_SNAPSHOT_REPO);
        goto cleanup;
    } else {
        r = docker_image_ensure(rt, req->spec->image, err);
        if (r < 0)
            goto cleanup;
    }

    if (req->spec->nvolumes > 0) {
        r = docker_volumes_attach(rt, req, &mounts, err);
        if (r < 0)
            goto cleanup;
        plan.mounts = mounts;
    }
    body = docker_sandbox_body(req, &plan);
    snprintf(path, sizeof path, "/containers/create?name=%s", name);
    r = docker_call(rt, "POST", path, body, DOCKER_CALL_TIMEOUT_MS, &rep, err);
    if (r < 0)
        goto cleanup;
    /* Under gVisor the container's processes are inside the sandbox, not
     * in /proc: only Docker's state is asked. */
    bool watch_procs = plan.runtime == NULL;
    if (rep.status == 409) {
        r = docker_container_adopt(rt, req, name, watch_procs, ret_ref, ret_exit, err);
        goto cleanup;
    }
    if (rep.status != 201) {
        char msg[320];
        docker_reply_message(&rep, msg, sizeof msg);
        r = api_error_set(err, rep.status == 404 ? API_IMAGE_UNAVAILABLE : API_RUNTIME_ERROR,
                          "cannot create the sandbox container: %s", msg);
        goto cleanup;
    }
    if (!docker_reply_id(&rep, id)) {
        r = api_error_set(err, API_RUNTIME_ERROR, "docker created a container but returned no usable id");
        goto cleanup;
    }
    /* its secrets: a CA of its own in its trust store before anything runs */
    if (filtered && req->secrets && json_object_array_length(req->secrets) > 0 &&
        (r = docker_secrets_prepare(rt, req->sandbox_id, id, req->secrets, err)) < 0) {
        docker_container_discard(rt, id);
        goto cleanup;
    }
    r = docker_container_run(rt, id, true, watch_procs, ret_exit, err);
    if (r < 0)
        goto cleanup;
    snprintf(ret_ref, 80, "%s", id);
cleanup:
    /* The tenant's egress_allow, now that the container has its address;
     * a sandbox that asked for it never runs without it. */
    if (r == 0 && !filtered && req->spec->network == NET_OPEN && req->egress_allow && *req->egress_allow &&
        (r = docker_egress_allow_add(rt, req->sandbox_id, ret_ref, req->egress_allow, err)) < 0) {
        docker_container_discard(rt, ret_ref);
        ret_ref[0] = '\0';
    }
    /* its egress rules, in the filter before anything of it runs for long
     * (until then the filter refuses everything it sends) */
    if (r == 0 && filtered && (r = docker_filter_add(rt, req->sandbox_id, ret_ref, err)) < 0) {
        docker_container_discard(rt, ret_ref);
        ret_ref[0] = '\0';
    }
    /* a sandbox that did not start keeps no mount of its volumes */
    if (r < 0 && mounts)
        docker_volumes_release(rt, req->sandbox_id);
    if (mounts)
        json_object_put(mounts);
    json_object_put(body);
    docker_reply_release(&rep);
    return r;
}
