/* The Docker backend's logs: the owned-container inspect (also the start of
 * a dial, docker_dial.c), the logs target and the logs stream. */
#include "docker_internal.h"
#include "docker_stream.h"
#include "jsonx.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* ---- the owned container ---------------------------------------------- */

int docker_sandbox_inspect(docker_runtime_t *rt, const char *sandbox_id, const char *worker_name,
                           const char *missing, json_object **ret, const char **ret_id, api_error_t *err)
{
    char name[SBX_ID_MAX + 8];
    json_object *o = NULL;
    const char *id = NULL;
    if (!docker_name_ok(sandbox_id, SBX_ID_MAX) || !worker_name)
        return api_error_set(err, API_INVALID_ARGUMENT, "malformed sandbox id");
    snprintf(name, sizeof name, "sbx-%s", sandbox_id);
    int r = docker_container_inspect(rt, name, DOCKER_ROUTE_TIMEOUT_MS, &o, &id, err);
    if (r < 0)
        return r == SBX_ENOTFOUND ? api_error_set(err, API_NOT_FOUND, "sandbox %s %s", sandbox_id, missing) : r;
    json_object *labels = jsonx_get_obj(jsonx_get_obj(o, "Config"), "Labels");
    const char *owner = jsonx_get_str(labels, RUNTIME_LABEL_SANDBOX);
    const char *maker = jsonx_get_str(labels, RUNTIME_LABEL_WORKER);
    const char *managed = jsonx_get_str(labels, RUNTIME_LABEL_MANAGED);
    if (!owner || strcmp(owner, sandbox_id) != 0 || !maker || strcmp(maker, worker_name) != 0 || !managed ||
        strcmp(managed, RUNTIME_MANAGED_SANDBOX) != 0) {
        json_object_put(o);
        return api_error_set(err, API_NOT_FOUND, "sandbox %s %s", sandbox_id, missing);
    }
    *ret = o;
    *ret_id = id;
    return 0;
}

/* True when labels has key = want. */
static bool docker_label_is(json_object *labels, const char *key, const char *want)
{
    const char *v = jsonx_get_str(labels, key);
    return v && want && strcmp(v, want) == 0;
}

int docker_rt_check_owner(runtime_t *base, const runtime_owner_t *who, const char *ref, char ret_ref[80],
                          api_error_t *err)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    char name[SBX_ID_MAX + 8];
    const char *target = ref;
    const char *worker = who->worker_name ? who->worker_name : rt->worker_name;
    json_object *o = NULL;
    const char *id = NULL;
    if (!who->sandbox_id || !docker_name_ok(who->sandbox_id, SBX_ID_MAX))
        return api_error_set(err, API_INVALID_ARGUMENT, "malformed sandbox id");
    if (!ref || !*ref) {
        snprintf(name, sizeof name, "sbx-%s", who->sandbox_id);
        target = name;
    } else if (!docker_name_ok(ref, 80)) {
        api_error_set(err, API_NOT_FOUND, "runtime ref of sandbox %s is malformed; refused", who->sandbox_id);
        return SBX_EPERM;
    }
    int r = docker_container_inspect(rt, target, DOCKER_CALL_TIMEOUT_MS, &o, &id, err);
    if (r == SBX_ENOTFOUND) {
        api_error_set(err, API_NOT_FOUND, "sandbox %s has no container on this worker", who->sandbox_id);
        return SBX_ENOTFOUND;
    }
    if (r < 0)
        return r;
    json_object *labels = jsonx_get_obj(jsonx_get_obj(o, "Config"), "Labels");
    const char *bad = NULL;
    if (!docker_label_is(labels, RUNTIME_LABEL_MANAGED, RUNTIME_MANAGED_SANDBOX))
        bad = RUNTIME_LABEL_MANAGED;
    else if (!docker_label_is(labels, RUNTIME_LABEL_SANDBOX, who->sandbox_id))
        bad = RUNTIME_LABEL_SANDBOX;
    else if (who->cluster_id && *who->cluster_id && !docker_label_is(labels, RUNTIME_LABEL_CLUSTER, who->cluster_id))
        bad = RUNTIME_LABEL_CLUSTER;
    else if (!docker_label_is(labels, RUNTIME_LABEL_WORKER, worker))
        bad = RUNTIME_LABEL_WORKER;
    if (bad) {
        api_error_set(err, API_NOT_FOUND, "container %.12s is not sandbox %s's on this worker (its %s label "
                      "differs); refused", id, who->sandbox_id, bad);
        r = SBX_EPERM;
    } else {
        snprintf(ret_ref, 80, "%s", id);
    }
    json_object_put(o);
    return r;
}

/* ---- logs -------------------------------------------------------------- */

int docker_rt_logs_target(runtime_t *base, const char *sandbox_id, const char *worker_name, char ret_ref[80],
                          api_error_t *err)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    json_object *o = NULL;
    const char *id = NULL;
    int r = docker_sandbox_inspect(rt, sandbox_id, worker_name, "has no container on this worker", &o, &id, err);
    if (r < 0)
        goto cleanup;
    snprintf(ret_ref, 80, "%s", id);
cleanup:
    if (o)
        json_object_put(o);
    return r;
}

typedef struct docker_logs_io {
    CURL *h;
    long status;
    docker_stream_t demux;
    sbuf_t out, err;          /* one frame's payload at a time */
    sbuf_t error_body;        /* a non-200 answer */
    const runtime_logs_req_t *req;
    bool stop;                /* on_output asked to stop */
} docker_logs_io_t;

/* Hands what the demultiplexer collected to on_output (stdout first: a
 * frame ends before the next starts, so at most one of them has bytes). */
static int docker_logs_flush(docker_logs_io_t *io)
{
    sbuf_t *bufs[2] = { &io->out, &io->err };
    for (int i = 0; i < 2; i++) {
        if (bufs[i]->len == 0)
            continue;
        int r = io->req->on_output(io->req->ud, i + 1, bufs[i]->data, bufs[i]->len);
        sbuf_reset(bufs[i]);
        if (r < 0)
            return r;
    }
    return 0;
}

static size_t docker_logs_write_cb(char *p, size_t size, size_t nmemb, void *ud)
{
    docker_logs_io_t *io = ud;
    size_t n = size * nmemb, off = 0;
    if (io->status == 0)
        curl_easy_getinfo(io->h, CURLINFO_RESPONSE_CODE, &io->status);
    if (io->status != 200)
        return sbuf_append_bounded(&io->error_body, p, n) < 0 ? 0 : n;
    /* Fed frame by frame, so stdout and stderr keep their order. */
    while (off < n) {
        size_t take = io->demux.remaining > 0 ? io->demux.remaining : DOCKER_STREAM_HEADER_BYTES - io->demux.header_len;
        if (take > n - off)
            take = n - off;
        if (docker_stream_push(&io->demux, p + off, take) < 0)
            return 0;
        off += take;
        if ((io->demux.remaining == 0 || io->out.len + io->err.len >= 16384) && docker_logs_flush(io) < 0) {
            io->stop = true;
            return 0;
        }
    }
    return n;
}

int docker_rt_logs_stream(runtime_t *base, const char *ref, const runtime_logs_req_t *req, api_error_t *err)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    int r = 0;
    char path[256], tail[24];
    docker_multi_t dm = { 0 };
    docker_logs_io_t io;
    memset(&io, 0, sizeof io);
    io.req = req;
    sbuf_init(&io.out, 0);
    sbuf_init(&io.err, 0);
    sbuf_init(&io.error_body, 4096);
    docker_stream_init(&io.demux, &io.out, &io.err);
    if (!ref || !docker_name_ok(ref, 80) || !req->on_output || req->nstop_fds > 4)
        return api_error_set(err, API_INVALID_ARGUMENT, "malformed logs request");
    if (req->tail < 0)
        snprintf(tail, sizeof tail, "all");
    else
        snprintf(tail, sizeof tail, "%lld", (long long)req->tail);
    snprintf(path, sizeof path, "/containers/%s/logs?stdout=1&stderr=1&follow=%d&tail=%s", ref, req->follow ? 1 : 0,
             tail);
    /* Our loop watches the cancel flag and the stop descriptors itself. */
    if (docker_multi_open(&dm, rt, "GET", path, NULL, 0, NULL, docker_logs_write_cb, &io) < 0) {
        r = api_error_set(err, API_INTERNAL, "out of memory");
        goto cleanup;
    }
    io.h = dm.h;
    int running = 1;
    while (running) {
        if ((r = docker_multi_perform(&dm, "logs", &running, err)) < 0)
            goto cleanup;
        if (!running || io.stop)
            break;
        if (docker_cancelled(rt)) {
            r = api_error_set(err, API_CANCELLED, "the worker is shutting down");
            goto cleanup;
        }
        struct curl_waitfd wfd[4];
        for (size_t i = 0; i < req->nstop_fds; i++)
            wfd[i] = (struct curl_waitfd){ .fd = req->stop_fds[i], .events = CURL_WAIT_POLLIN, .revents = 0 };
        curl_multi_poll(dm.m, wfd, (unsigned)req->nstop_fds, 200, NULL);
        for (size_t i = 0; i < req->nstop_fds; i++)
            if (wfd[i].revents)
                goto cleanup;     /* asked to stop: not an error */
    }
    if (io.stop)
        goto cleanup;
    if ((r = docker_multi_result(&dm, rt, &io.status, err)) < 0)
        goto cleanup;
    if (io.status == 404) {
        r = api_error_set(err, API_NOT_FOUND, "the sandbox's container is gone");
        goto cleanup;
    }
    if (io.status != 200) {
        docker_reply_t rep = { .status = io.status, .body = io.error_body };
        char emsg[320];
        docker_reply_message(&rep, emsg, sizeof emsg);
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot read the sandbox's logs: %s", emsg);
        goto cleanup;
    }
    docker_logs_flush(&io);
cleanup:
    docker_multi_close(&dm);
    sbuf_release(&io.out);
    sbuf_release(&io.err);
    sbuf_release(&io.error_body);
    return r;
}
