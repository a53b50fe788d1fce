/* The worker agent's assignments: the exec result, the executors that run
 * and report them, and the poller that leases them. */
#include "agent_internal.h"
#include "agent_output.h"
#include "b64.h"
#include "errors.h"
#include "forward.h"
#include "health.h"
#include "httpc.h"
#include "ids.h"
#include "jsonx.h"
#include "limits.h"
#include "log.h"
#include "metrics.h"
#include "netaddr.h"
#include "spec.h"
#include "timeutil.h"
#include "utf8.h"
#include "version.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* ---- exec result ------------------------------------------------------- */

/* The largest n' <= n that does not split a UTF-8 sequence of s. */
static size_t agent_utf8_cut(const char *s, size_t n)
{
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
        n--;
    return n;
}

/* Adds stream's kept bytes (the first n of b) as "NAME" text and, when the
 * text cannot carry them exactly, as "NAME_b64" too. */
static int agent_add_stream(json_object *o, const char *name, const sbuf_t *b, size_t n)
{
    return b64_json_add_bytes(o, name, b->data ? b->data : "", n);
}

json_object *agent_exec_result_json(const runtime_exec_result_t *r, size_t max_json_bytes)
{
    size_t lo = r->out.len, le = r->err.len;
    bool cut_out = false, cut_err = false;
    for (;;) {
        json_object *o = json_object_new_object();
        if (!o)
            return NULL;
        jsonx_add_int(o, "exit_code", r->exit_code);
        jsonx_add_int(o, "signal", r->signal);
        jsonx_add_bool(o, "timed_out", r->timed_out);
        jsonx_add_int(o, "duration_ms", r->duration_ms);
        if (agent_add_stream(o, "stdout", &r->out, lo) < 0 || agent_add_stream(o, "stderr", &r->err, le) < 0) {
            json_object_put(o);
            return NULL;
        }
        jsonx_add_bool(o, "stdout_truncated", r->out.truncated || cut_out);
        jsonx_add_bool(o, "stderr_truncated", r->err.truncated || cut_err);
        jsonx_add_int(o, "stdout_bytes", (int64_t)r->out.seen);
        jsonx_add_int(o, "stderr_bytes", (int64_t)r->err.seen);
        const char *text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
        if (!text || strlen(text) <= max_json_bytes || (lo == 0 && le == 0))
            return o;
        json_object_put(o);
        /* Cut the larger stream (both when close) and try again; the cut is
         * on the raw bytes, so text and base64 forms keep the same prefix. */
        if (lo >= le / 2 && lo > 0) {
            lo = agent_utf8_cut(r->out.data, lo / 2);
            cut_out = true;
        }
        if (le >= lo / 2 && le > 0) {
            le = agent_utf8_cut(r->err.data, le / 2);
            cut_err = true;
        }
    }
}

/* ---- executors --------------------------------------------------------- */

typedef struct agent_outcome {
    bool ok;
    api_error_t err;
    char runtime_ref[80];
    json_object *result;     /* exec result, owned */
    bool client_cancelled;   /* an exec a client cancelled: reported as cancelled, with its result */
    runtime_exit_t exit;     /* a create whose container was not running: how it ended */
} agent_outcome_t;

/* The observed fields of a stopped container, for a heartbeat's inventory
 * entry or a create's report (the controller reads them with
 * common/observed.c). */
void agent_add_exit(json_object *o, const runtime_exit_t *e)
{
    jsonx_add_int(o, "exit_code", e->exit_code);
    jsonx_add_bool(o, "oom_killed", e->oom_killed);
    if (e->disk_quota_exceeded)
        jsonx_add_bool(o, "disk_quota_exceeded", true);
    if (e->finished_at[0])
        jsonx_add_str(o, "finished_at", e->finished_at);
    if (e->error[0])
        jsonx_add_str(o, "error", e->error);
    if (e->output_tail)
        jsonx_add_str(o, "output_tail", e->output_tail);
}

/* The assignment's egress_allow (the tenant's policy) into out, each CIDR
 * checked again and canonical, joined by ",". 0, or a negative code with
 * err set (invalid_argument naming the entry). */
static int agent_egress_allow(json_object *job, char *out, size_t outlen, api_error_t *err)
{
    json_object *arr = NULL;
    size_t used = 0;
    out[0] = '\0';
    if (!json_object_object_get_ex(job, "egress_allow", &arr) || json_object_is_type(arr, json_type_null))
        return 0;
    size_t n = json_object_is_type(arr, json_type_array) ? json_object_array_length(arr) : SIZE_MAX;
    if (n > SBX_EGRESS_ALLOW_MAX)
        return api_error_set(err, API_INVALID_ARGUMENT, "the assignment's egress_allow must be at most %d CIDRs",
                             SBX_EGRESS_ALLOW_MAX);
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(arr, i);
        char cidr[NETADDR_CIDR_MAX], why[160];
        bool v6 = false;
        if (!json_object_is_type(e, json_type_string) ||
            netaddr_cidr_parse(json_object_get_string(e), cidr, &v6, why, sizeof why) < 0)
            return api_error_set(err, API_INVALID_ARGUMENT, "the assignment's egress_allow[%zu] is not a CIDR", i);
        int w = snprintf(out + used, outlen - used, "%s%s", used ? "," : "", cidr);
        if (w < 0 || (size_t)w >= outlen - used)
            return api_error_set(err, API_INVALID_ARGUMENT, "the assignment's egress_allow is too long");
        used += (size_t)w;
    }
    return 0;
}

static void agent_run_create(agent_t *a, json_object *job, agent_outcome_t *o)
{
    char allow[SBX_EGRESS_ALLOW_MAX * NETADDR_CIDR_MAX];
    char cluster[64];
    agent_cluster_id(a, cluster);
    sandbox_spec_t spec;
    isolation_t iso = ISO_CONTAINER;
    const char *sbx = jsonx_get_str(job, "sandbox_id");
    const char *iso_name = jsonx_get_str(job, "isolation");
    if (agent_egress_allow(job, allow, sizeof allow, &o->err) < 0)
        return;
    if (spec_from_json(jsonx_get_obj(job, "spec"), &spec, &o->err) < 0)
        return;
    if (iso_name && isolation_parse(iso_name, &iso) < 0) {
        api_error_set(&o->err, API_ISOLATION_UNAVAILABLE, "unknown isolation class \"%.40s\"", iso_name);
        spec_release(&spec);
        return;
    }
    json_object *secrets = jsonx_get_arr(job, "secrets");
    if (spec.nsecrets > 0 && (!secrets || json_object_array_length(secrets) != spec.nsecrets)) {
        const char *why = jsonx_get_str(job, "secrets_error");
        api_error_set(&o->err, API_UNAVAILABLE, "the sandbox's secrets did not come with its create: %s",
                      why ? why : "the controller sent none");
        spec_release(&spec);
        return;
    }
    runtime_create_req_t req = {
        .sandbox_id = sbx,
        .tenant = jsonx_get_str(job, "tenant"),
        .spec = &spec,
        .isolation = iso,
        .cluster_id = cluster,
        .worker_name = a->name,
        .egress_allow = allow,
        .secrets = spec.nsecrets > 0 ? secrets : NULL,
    };
    bool memory = false;
    req.ret_memory = &memory;
    if (!sbx)
        api_error_set(&o->err, API_INVALID_ARGUMENT, "the assignment has no sandbox_id");
    else if (runtime_create(a->rt, &req, o->runtime_ref, &o->exit, &o->err) == 0) {
        o->ok = true;
        if (spec.from && *spec.from) { /* whether it resumed the snapshot's memory or booted */
            o->result = json_object_new_object();
            jsonx_add_bool(o->result, "memory", memory);
        }
    }
    spec_release(&spec);
}

int agent_check_owner(agent_t *a, const char *sandbox_id, const char *ref, char ret_ref[80], api_error_t *err)
{
    char cluster[64];
    agent_cluster_id(a, cluster);
    runtime_owner_t who = { .sandbox_id = sandbox_id, .cluster_id = cluster, .worker_name = a->name };
    int r = runtime_check_owner(a->rt, &who, ref, ret_ref, err);
    if (r == SBX_EPERM)
        log_warn(AGENT_COMPONENT, "refused an assignment for sandbox %s: %s", sandbox_id, err->message);
    return r;
}

static void agent_run_delete(agent_t *a, json_object *job, agent_outcome_t *o)
{
    const char *sbx = jsonx_get_str(job, "sandbox_id");
    const char *ref = jsonx_get_str(job, "runtime_ref");
    char own[80];
    if (!sbx && !ref) {
        api_error_set(&o->err, API_INVALID_ARGUMENT, "the assignment names neither sandbox_id nor runtime_ref");
        return;
    }
    if (!sbx) {
        api_error_set(&o->err, API_INVALID_ARGUMENT, "the assignment has no sandbox_id (a runtime_ref alone is not "
                      "trusted)");
        return;
    }
    if (ref) {
        /* The controller's ref must be this sandbox's container; one that
         * is gone already leaves the removal by label. */
        int r = agent_check_owner(a, sbx, ref, own, &o->err);
        if (r < 0 && r != SBX_ENOTFOUND)
            return;
        ref = r == 0 ? own : NULL;
    }
    if (runtime_remove(a->rt, sbx, ref, &o->err) == 0)
        o->ok = true;
}

/* Runs an exec; with c, its output is sent on live as it comes
 * (agent_output.c), all of it before the report. */
static void agent_run_exec(agent_t *a, httpc_t *c, json_object *job, agent_outcome_t *o)
{
    exec_spec_t spec;
    runtime_exec_result_t res;
    char own[80];
    const char *ref = jsonx_get_str(job, "runtime_ref");
    const char *sbx = jsonx_get_str(job, "sandbox_id");
    if (!sbx) {
        api_error_set(&o->err, API_INVALID_ARGUMENT, "the assignment has no sandbox_id");
        return;
    }
    if (exec_spec_from_json(jsonx_get_obj(job, "exec"), &spec, &o->err) < 0)
        return;
    /* Only in this sandbox's own container (ref, or without one the
     * container named for the sandbox), whatever the controller says. */
    int owned = agent_check_owner(a, sbx, ref, own, &o->err);
    if (owned < 0) {
        if (owned == SBX_ENOTFOUND)
            api_error_set(&o->err, API_RUNTIME_ERROR, "sandbox container not found");
        exec_spec_release(&spec);
        return;
    }
    ref = own;
    size_t max = spec.max_output_bytes > 0 ? (size_t)spec.max_output_bytes : SBX_EXEC_OUTPUT_DEFAULT;
    int64_t attempt = 0;
    jsonx_get_int(job, "attempt", &attempt);
    agent_output_t *live = calloc(1, sizeof *live);
    if (live)
        agent_output_init(live, a, c, jsonx_get_str(job, "operation_id"), attempt);
    int rc = runtime_exec(a->rt, ref, &spec, max, live ? &live->sink : NULL, &res, &o->err);
    if (live) {
        /* A command that never started: what the stream carried was the
         * runtime's own message (moved to the result's stderr), not output. */
        static const char marker[] = "OCI runtime exec failed";
        if (rc < 0 || (res.out.len == 0 && res.err.len >= sizeof marker - 1 &&
                       memcmp(res.err.data, marker, sizeof marker - 1) == 0))
            agent_output_discard(live);
        agent_output_flush(live, true);
        agent_output_release(live);
        free(live);
    }
    if (rc == 0) {
        if (res.warning[0])
            log_warn(AGENT_COMPONENT, "exec in sandbox %s: %s", sbx ? sbx : ref, res.warning);
        o->result = agent_exec_result_json(&res, AGENT_RESULT_MAX_BYTES);
        if (!o->result)
            api_error_set(&o->err, API_INTERNAL, "out of memory building the exec result");
        else if (res.cancelled) {
            o->client_cancelled = true;
            jsonx_add_bool(o->result, "cancelled", true);
            api_error_set(&o->err, API_CANCELLED, "cancelled by a client: the command's process tree was killed");
        } else
            o->ok = true;
        runtime_exec_result_release(&res);
    } else if (o->err.code == API_CANCELLED) {
        /* An exec is not safe to run twice: fail it rather than let the
         * lease expire and the command run again elsewhere. */
        o->err.code = API_RUNTIME_ERROR;
    }
    exec_spec_release(&spec);
}

/* Saves the sandbox's filesystem as the assignment's snapshot: only this
 * sandbox's own object, whatever the controller says. */
static void agent_run_snapshot(agent_t *a, json_object *job, agent_outcome_t *o)
{
    char own[80], cluster[64];
    const char *sbx = jsonx_get_str(job, "sandbox_id");
    const char *snp = jsonx_get_str(jsonx_get_obj(job, "snapshot"), "snapshot_id");
    if (!sbx || !snp || !ids_valid("snp", snp)) {
        api_error_set(&o->err, API_INVALID_ARGUMENT, "the assignment names no sandbox_id or snapshot");
        return;
    }
    int owned = agent_check_owner(a, sbx, jsonx_get_str(job, "runtime_ref"), own, &o->err);
    if (owned < 0) {
        if (owned == SBX_ENOTFOUND)
            api_error_set(&o->err, API_RUNTIME_ERROR, "sandbox container not found");
        return;
    }
    agent_cluster_id(a, cluster);
    runtime_snapshot_req_t req = { .ref = own, .snapshot_id = snp, .tenant = jsonx_get_str(job, "tenant"),
                                   .cluster_id = cluster, .worker_name = a->name,
                                   .config = jsonx_get_obj(jsonx_get_obj(job, "snapshot"), "config") };
    jsonx_get_bool(jsonx_get_obj(job, "snapshot"), "memory", &req.memory);
    runtime_snapshot_t snap;
    if (runtime_snapshot_create(a->rt, &req, &snap, &o->err) < 0)
        return;
    o->result = json_object_new_object();
    jsonx_add_str(o->result, "snapshot_id", snp);
    if (snap.size_bytes >= 0)
        jsonx_add_int(o->result, "size_bytes", snap.size_bytes);
    if (snap.image_bytes >= 0)
        jsonx_add_int(o->result, "image_bytes", snap.image_bytes);
    jsonx_add_bool(o->result, "memory", snap.memory);
    o->ok = true;
}

/* ---- a snapshot's copy: the bytes through the controller into Docker ---- */

typedef struct copy_fetch {
    httpc_t *c;
    char path[256];
    int fd;                  /* the pipe's write end: closed when the answer ends */
    int rc;                  /* the transfer's */
    httpc_response_t resp;
    int64_t bytes;
} copy_fetch_t;

static int copy_fetch_write(void *ud, const char *data, size_t n)
{
    copy_fetch_t *f = ud;
    while (n > 0) {
        ssize_t w = write(f->fd, data, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return SBX_EIO; /* the load stopped reading: abort */
        data += w;
        n -= (size_t)w;
        f->bytes += w;
    }
    return 0;
}

static void *copy_fetch_main(void *arg)
{
    copy_fetch_t *f = arg;
    f->rc = httpc_transfer(f->c, "GET", f->path, -1, NULL, copy_fetch_write, f, NULL, NULL, 0, &f->resp);
    close(f->fd);
    f->fd = -1;
    return NULL;
}

static ptrdiff_t copy_pipe_read(void *ud, char *buf, size_t cap)
{
    int fd = *(int *)ud;
    for (;;) {
        ssize_t r = read(fd, buf, cap);
        if (r < 0 && errno == EINTR)
            continue;
        return r < 0 ? -1 : (ptrdiff_t)r;
    }
}

/* Takes a copy of another worker's snapshot: the controller streams it
 * (GET /v1/workers/{id}/snapshots/{snp}/export, allowed only while this
 * operation is leased here) and the runtime loads it as this worker's. */
static void agent_run_snapshot_copy(agent_t *a, httpc_t *c, json_object *job, agent_outcome_t *o)
{
    char cluster[64], wid[AGENT_WORKER_ID_MAX];
    const char *snp = jsonx_get_str(jsonx_get_obj(job, "snapshot_copy"), "snapshot_id");
    if (!snp || !ids_valid("snp", snp)) {
        api_error_set(&o->err, API_INVALID_ARGUMENT, "the assignment names no snapshot to copy");
        return;
    }
    /* the class of the snapshot's sandboxes picks the backend that takes it
     * (a controller before microvm copies names none: a container's) */
    isolation_t iso = ISO_CONTAINER;
    const char *iso_text = jsonx_get_str(jsonx_get_obj(job, "snapshot_copy"), "isolation");
    if (iso_text && isolation_parse(iso_text, &iso) < 0) {
        api_error_set(&o->err, API_INVALID_ARGUMENT, "the copy names no class here: %.32s", iso_text);
        return;
    }
    pthread_mutex_lock(&a->mu);
    snprintf(wid, sizeof wid, "%s", a->worker_id);
    pthread_mutex_unlock(&a->mu);
    httpc_t *own = c ? NULL : agent_client(a, NULL, "a snapshot copy");
    copy_fetch_t f = { .c = c ? c : own, .fd = -1 };
    if (!f.c) {
        api_error_set(&o->err, API_UNAVAILABLE, "cannot reach the controller for the snapshot's bytes");
        return;
    }
    snprintf(f.path, sizeof f.path, "/v1/workers/%s/snapshots/%s/export", wid, snp);
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) < 0) {
        api_error_set(&o->err, API_INTERNAL, "pipe: %s", strerror(errno));
        if (own)
            httpc_free(own);
        return;
    }
    f.fd = fds[1];
    pthread_t th;
    if (pthread_create(&th, NULL, copy_fetch_main, &f) != 0) {
        close(fds[0]);
        close(fds[1]);
        api_error_set(&o->err, API_INTERNAL, "cannot start the copy's reader");
        if (own)
            httpc_free(own);
        return;
    }
    agent_cluster_id(a, cluster);
    runtime_snapshot_req_t req = { .snapshot_id = snp, .tenant = jsonx_get_str(job, "tenant"), .cluster_id = cluster,
                                   .worker_name = a->name, .isolation = iso };
    runtime_snapshot_t snap;
    api_error_t ierr;
    int r = runtime_snapshot_import(a->rt, &req, copy_pipe_read, &fds[0], &snap, &ierr);
    close(fds[0]); /* a load that stopped early ends the transfer too */
    pthread_join(th, NULL);
    if (f.rc < 0 || f.resp.status != 200) {
        const char *code = NULL, *msg = NULL;
        httpc_api_error(&f.resp, &code, &msg);
        api_error_set(&o->err, API_UNAVAILABLE, "the snapshot's bytes did not come through the controller: %s",
                      f.rc < 0 ? (f.resp.error[0] ? f.resp.error : "the transfer failed") : msg ? msg : "refused");
    } else if (r < 0) {
        o->err = ierr;
    } else {
        o->result = json_object_new_object();
        jsonx_add_str(o->result, "snapshot_id", snp);
        jsonx_add_int(o->result, "bytes", f.bytes);
        if (snap.image_bytes >= 0)
            jsonx_add_int(o->result, "image_bytes", snap.image_bytes);
        o->ok = true;
    }
    httpc_response_release(&f.resp);
    if (own)
        httpc_free(own);
}

/* The object of the assignment's sandbox into own (its sandbox_id and
 * runtime_ref, checked as this worker's): 0, or an error in err. */
static int agent_own_sandbox(agent_t *a, json_object *job, char own[80], api_error_t *err)
{
    const char *sbx = jsonx_get_str(job, "sandbox_id");
    if (!sbx)
        return api_error_set(err, API_INVALID_ARGUMENT, "the assignment has no sandbox_id");
    int owned = agent_check_owner(a, sbx, jsonx_get_str(job, "runtime_ref"), own, err);
    if (owned == SBX_ENOTFOUND)
        api_error_set(err, API_RUNTIME_ERROR, "sandbox container not found");
    return owned < 0 ? owned : 0;
}

/* Pauses or resumes the assignment's sandbox: only its own object. */
static void agent_run_pause(agent_t *a, json_object *job, bool resume, agent_outcome_t *o)
{
    char own[80];
    const char *sbx = jsonx_get_str(job, "sandbox_id");
    if (agent_own_sandbox(a, job, own, &o->err) < 0)
        return;
    bool memory = false;
    int rc = resume ? runtime_resume(a->rt, sbx, own, &o->exit, &o->err) : runtime_pause(a->rt, own, &memory, &o->err);
    if (rc < 0)
        return;
    o->result = json_object_new_object();
    if (!resume)
        jsonx_add_bool(o->result, "memory", memory);
    o->ok = true;
}

/* Gives the assignment's sandbox its new egress rules (docs/network.md). */
static void agent_run_network(agent_t *a, json_object *job, agent_outcome_t *o)
{
    char own[80];
    const char *sbx = jsonx_get_str(job, "sandbox_id");
    json_object *egress = jsonx_get_obj(jsonx_get_obj(job, "network"), "egress");
    if (!egress || !json_object_is_type(egress, json_type_object)) {
        api_error_set(&o->err, API_INVALID_ARGUMENT, "the assignment has no network.egress");
        return;
    }
    if (agent_own_sandbox(a, job, own, &o->err) < 0)
        return;
    if (runtime_egress_set(a->rt, sbx, own, egress, &o->err) < 0)
        return;
    o->result = json_object_new_object();
    jsonx_add(o->result, "egress", json_object_get(egress));
    o->ok = true;
}

/* Sends a report, retrying transport failures and 5xx a few times. */
static void agent_report(agent_t *a, httpc_t *c, const char *op_id, json_object *body)
{
    int64_t backoff = 250;
    /* Keep trying while the lease may still be ours (a controller restart
     * or a database outage); after that the report would be stale anyway. */
    pthread_mutex_lock(&a->mu);
    int64_t give_up = time_deadline_ms((a->lease_seconds + 5) * 1000);
    pthread_mutex_unlock(&a->mu);
    for (int attempt = 1;; attempt++) {
        bool last = attempt >= AGENT_REPORT_ATTEMPTS && time_mono_ms() >= give_up;
        char wid[AGENT_WORKER_ID_MAX], path[AGENT_WORKER_ID_MAX + 32];
        agent_worker_id(a, wid, sizeof wid);
        snprintf(path, sizeof path, "/v1/workers/%s/report", wid);
        httpc_response_t resp;
        int rc = httpc_request(c, "POST", path, body, NULL, AGENT_HTTP_TIMEOUT_MS, &resp);
        const char *code = "", *msg = "";
        if (rc == 0)
            httpc_api_error(&resp, &code, &msg);
        if (rc == 0 && resp.status == 200) {
            agent_contact(a);
            log_debug(AGENT_COMPONENT, "reported operation %s", op_id);
            httpc_response_release(&resp);
            return;
        }
        if (rc == 0 && resp.status == 409) {
            log_warn(AGENT_COMPONENT, "report of operation %s refused (%s: %s); dropped", op_id, code, msg);
            httpc_response_release(&resp);
            return;
        }
        if (rc == 0 && resp.status >= 400 && resp.status < 500 && resp.status != 404 && resp.status != 408 &&
            resp.status != 429) {
            log_error(AGENT_COMPONENT, "report of operation %s rejected: HTTP %ld %s: %s", op_id, resp.status, code,
                      msg);
            httpc_response_release(&resp);
            return;
        }
        if (last) {
            log_error(AGENT_COMPONENT, "failed to report operation %s after %d attempts: %s; its lease will expire",
                      op_id, attempt, rc < 0 ? resp.error : msg);
        } else {
            log_debug(AGENT_COMPONENT, "report of operation %s failed (%s), retrying", op_id,
                      rc < 0 ? resp.error : msg);
        }
        httpc_response_release(&resp);
        if (last)
            return;
        if (rc < 0)
            agent_failover(a, c);
        usleep((useconds_t)backoff * 1000);
        backoff = backoff * 2 > 2000 ? 2000 : backoff * 2;
    }
}

static void agent_run_scoped(agent_t *a, httpc_t *c, json_object *job);

/* Runs one assignment with its ids on every line logged meanwhile. */
static void agent_run(agent_t *a, httpc_t *c, json_object *job)
{
    log_ctx_t ctx = { .sandbox = jsonx_get_str(job, "sandbox_id"),
                      .operation = jsonx_get_str(job, "operation_id") };
    log_scope_set(&ctx);
    agent_run_scoped(a, c, job);
    log_scope_clear();
}

static json_object *agent_run_assignment_on(agent_t *a, httpc_t *c, json_object *job);

static void agent_run_scoped(agent_t *a, httpc_t *c, json_object *job)
{
    json_object *body = agent_run_assignment_on(a, c, job);
    if (!body)
        return;
    agent_report(a, c, jsonx_get_str(job, "operation_id"), body);
    json_object_put(body);
}

json_object *agent_run_assignment(agent_t *a, json_object *job) { return agent_run_assignment_on(a, NULL, job); }

/* agent_run_assignment, with c for what an assignment sends while it runs
 * (an exec's live output; NULL: nothing). */
static json_object *agent_run_assignment_on(agent_t *a, httpc_t *c, json_object *job)
{
    const char *op_id = jsonx_get_str(job, "operation_id");
    const char *kind = jsonx_get_str(job, "kind");
    int64_t attempt = 0;
    agent_outcome_t o;
    memset(&o, 0, sizeof o);
    if (!op_id || !jsonx_get_int(job, "attempt", &attempt)) {
        log_error(AGENT_COMPONENT, "dropped an assignment without operation_id or attempt");
        return NULL;
    }
    int64_t t0 = time_mono_ms();
    log_info(AGENT_COMPONENT, "running %s operation %s attempt %lld sandbox %s", kind ? kind : "?", op_id,
             (long long)attempt, jsonx_get_str(job, "sandbox_id") ? jsonx_get_str(job, "sandbox_id") : "-");
    if (kind && strcmp(kind, "create") == 0)
        agent_run_create(a, job, &o);
    else if (kind && strcmp(kind, "delete") == 0)
        agent_run_delete(a, job, &o);
    else if (kind && strcmp(kind, "exec") == 0)
        agent_run_exec(a, c, job, &o);
    else if (kind && strcmp(kind, "snapshot") == 0)
        agent_run_snapshot(a, job, &o);
    else if (kind && strcmp(kind, "snapshot_copy") == 0)
        agent_run_snapshot_copy(a, c, job, &o);
    else if (kind && (strcmp(kind, "pause") == 0 || strcmp(kind, "resume") == 0))
        agent_run_pause(a, job, strcmp(kind, "resume") == 0, &o);
    else if (kind && strcmp(kind, "network") == 0)
        agent_run_network(a, job, &o);
    else
        api_error_set(&o.err, API_INVALID_ARGUMENT, "unknown assignment kind \"%.40s\"", kind ? kind : "");

    char labels[96];
    const char *kind_label = agent_kind_label(kind);
    metrics_observe(agent_m_assignment_seconds, metrics_labels(labels, sizeof labels, "kind", kind_label, NULL),
                    (double)(time_mono_ms() - t0) / 1000.0);
    metrics_add(agent_m_assignments,
                metrics_labels(labels, sizeof labels, "kind", kind_label, "outcome",
                               o.ok ? "succeeded" : o.err.code == API_CANCELLED ? "cancelled" : "failed", NULL),
                1);
    if (!o.ok && o.err.code == API_CANCELLED && !o.client_cancelled) {
        /* create and delete are idempotent: the lease expires and the
         * operation is leased again. */
        log_info(AGENT_COMPONENT, "left operation %s to its lease expiry: %s", op_id, o.err.message);
        runtime_exit_release(&o.exit);
        return NULL;
    }
    if (o.ok)
        log_info(AGENT_COMPONENT, "operation %s succeeded in %lld ms", op_id, (long long)(time_mono_ms() - t0));
    else
        log_warn(AGENT_COMPONENT, "operation %s failed: %s: %s", op_id, api_code_info(o.err.code)->name,
                 o.err.message);

    json_object *body = json_object_new_object();
    jsonx_add_str(body, "operation_id", op_id);
    jsonx_add_int(body, "attempt", attempt);
    jsonx_add_str(body, "outcome", o.ok ? "succeeded" : "failed");
    if (!o.ok) {
        json_object *e = json_object_new_object();
        jsonx_add_str(e, "code", api_code_info(o.err.code)->name);
        jsonx_add_str(e, "message", o.err.message);
        jsonx_add(body, "error", e);
    }
    if (o.result) {
        jsonx_add(body, "result", o.result);
        o.result = NULL;
    }
    if (o.ok && o.runtime_ref[0])
        jsonx_add_str(body, "runtime_ref", o.runtime_ref);
    if (!o.ok && o.exit.known) {
        json_object *ob = json_object_new_object();
        jsonx_add_str(ob, "state", o.exit.state);
        agent_add_exit(ob, &o.exit);
        jsonx_add(body, "observed", ob);
    }
    runtime_exit_release(&o.exit);
    return body;
}

int agent_tenant_executors(int executors, int percent)
{
    if (percent >= 100 || executors <= 1)
        return executors > 0 ? executors : 1;
    int n = (int)((int64_t)executors * (percent > 0 ? percent : 1) / 100);
    return n >= 1 ? n : 1;
}

static bool tenant_seen(const char *const *seen, int n, const char *t)
{
    for (int i = 0; i < n; i++)
        if (strcmp(seen[i], t) == 0)
            return true;
    return false;
}

size_t agent_queue_pick(json_object *const *queue, size_t qcap, size_t qhead, size_t qlen,
                        const char (*running)[SBX_MAX_NAME_BYTES + 1], int nrun)
{
    /* The tenants with work here (running or queued), for the share. */
    const char *seen[AGENT_PICK_TENANTS];
    int nseen = 0;
    for (int i = 0; i < nrun && nseen < AGENT_PICK_TENANTS; i++)
        if (running[i][0] && !tenant_seen(seen, nseen, running[i]))
            seen[nseen++] = running[i];
    for (size_t k = 0; k < qlen && nseen < AGENT_PICK_TENANTS; k++) {
        const char *t = jsonx_get_str(queue[(qhead + k) % qcap], "tenant");
        if (!tenant_seen(seen, nseen, t ? t : ""))
            seen[nseen++] = t ? t : "";
    }
    int share = nseen > 0 ? (nrun + nseen - 1) / nseen : nrun;
    size_t best = SIZE_MAX;
    int best_n = -1;
    for (size_t k = 0; k < qlen; k++) {
        const char *t = jsonx_get_str(queue[(qhead + k) % qcap], "tenant");
        int n = 0;
        for (int i = 0; i < nrun; i++)
            n += running[i][0] && strcmp(running[i], t ? t : "") == 0;
        if (n >= share)
            continue; /* its share of the executors is taken */
        if (best_n < 0 || n < best_n) {
            best = k;
            best_n = n;
            if (n == 0)
                break;
        }
    }
    return best;
}

void *agent_executor_main(void *arg)
{
    agent_t *a = arg;
    httpc_t *c = NULL;
    pthread_mutex_lock(&a->mu);
    int slot = a->exec_slots++;
    pthread_mutex_unlock(&a->mu);
    if (!(c = agent_client(a, NULL, "an executor")))
        return NULL;
    for (;;) {
        pthread_mutex_lock(&a->mu);
        size_t k = SIZE_MAX;
        /* Wait for an assignment whose tenant is under its share of the
         * executors (all of them when it is the only tenant with work). */
        while (!a->exec_stop &&
               (a->qlen == 0 ||
                (k = agent_queue_pick(a->queue, a->qcap, a->qhead, a->qlen, a->inflight_tenant, a->executors)) ==
                    SIZE_MAX))
            pthread_cond_wait(&a->cond, &a->mu);
        if (a->qlen == 0) {
            pthread_mutex_unlock(&a->mu);
            break;
        }
        if (k == SIZE_MAX) /* stopping: take the oldest */
            k = 0;
        /* The chosen one leaves the ring; those before it move up. */
        json_object *job = a->queue[(a->qhead + k) % a->qcap];
        for (size_t i = k; i > 0; i--)
            a->queue[(a->qhead + i) % a->qcap] = a->queue[(a->qhead + i - 1) % a->qcap];
        a->qhead = (a->qhead + 1) % a->qcap;
        a->qlen--;
        a->busy++;
        metrics_set(agent_m_running, NULL, a->busy);
        const char *job_sbx = jsonx_get_str(job, "sandbox_id"), *job_tenant = jsonx_get_str(job, "tenant");
        if (slot < a->executors) {
            snprintf(a->inflight[slot], SBX_ID_MAX, "%s", job_sbx ? job_sbx : "");
            snprintf(a->inflight_tenant[slot], sizeof a->inflight_tenant[slot], "%s", job_tenant ? job_tenant : "");
        }
        pthread_cond_broadcast(&a->cond);
        pthread_mutex_unlock(&a->mu);

        agent_run(a, c, job);
        agent_release(a, jsonx_get_str(job, "operation_id"));
        json_object_put(job);

        pthread_mutex_lock(&a->mu);
        if (slot < a->executors)
            a->inflight[slot][0] = a->inflight_tenant[slot][0] = '\0';
        a->busy--;
        metrics_set(agent_m_running, NULL, a->busy);
        pthread_cond_broadcast(&a->cond);
        pthread_mutex_unlock(&a->mu);
    }
    httpc_free(c);
    return NULL;
}

/* ---- poller ------------------------------------------------------------ */

/* Queues one assignment (takes the reference), waiting for room. Returns
 * false when the agent stops first (the assignment is then released). */
static bool agent_enqueue(agent_t *a, json_object *job)
{
    pthread_mutex_lock(&a->mu);
    while (a->qlen == a->qcap && !agent_flag(&a->stop_poll))
        pthread_cond_wait(&a->cond, &a->mu);
    if (a->qlen == a->qcap) {
        pthread_mutex_unlock(&a->mu);
        json_object_put(job);
        return false;
    }
    a->queue[(a->qhead + a->qlen) % a->qcap] = job;
    a->qlen++;
    pthread_cond_broadcast(&a->cond);
    pthread_mutex_unlock(&a->mu);
    return true;
}

void agent_unanswered_add(agent_unanswered_t *u, const char *id, int64_t now)
{
    if (u->n == SBX_POLL_UNANSWERED_MAX) {
        memmove(&u->id[0], &u->id[1], sizeof u->id[0] * (SBX_POLL_UNANSWERED_MAX - 1));
        memmove(&u->failed_at[0], &u->failed_at[1], sizeof u->failed_at[0] * (SBX_POLL_UNANSWERED_MAX - 1));
        u->n--;
    }
    snprintf(u->id[u->n], sizeof u->id[u->n], "%s", id);
    u->failed_at[u->n] = now;
    u->n++;
}

void agent_unanswered_answered(agent_unanswered_t *u, int64_t now)
{
    int k = 0;
    for (int i = 0; i < u->n; i++)
        if (now - u->failed_at[i] < AGENT_UNANSWERED_KEEP_MS) {
            if (k != i) {
                memcpy(u->id[k], u->id[i], sizeof u->id[k]);
                u->failed_at[k] = u->failed_at[i];
            }
            k++;
        }
    u->n = k;
}

void agent_unanswered_query(const agent_unanswered_t *u, char *out, size_t cap)
{
    size_t len = 0;
    if (cap)
        out[0] = '\0';
    for (int i = 0; i < u->n && len < cap; i++) {
        int w = snprintf(out + len, cap - len, "%s%s", i ? "," : "&unanswered=", u->id[i]);
        if (w < 0 || (size_t)w >= cap - len) {
            out[len] = '\0';
            break;
        }
        len += (size_t)w;
    }
}

/* A fresh poll id: 16 hex digits. */
static void agent_poll_id(char *out, size_t cap)
{
    static _Atomic uint64_t counter;
    uint64_t v;
    if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v)
        v = ((uint64_t)time_mono_ms() << 20) ^ (uint64_t)getpid() ^ atomic_fetch_add(&counter, 1);
    snprintf(out, cap, "%016llx", (unsigned long long)v);
}

void *agent_poller_main(void *arg)
{
    agent_t *a = arg;
    httpc_t *c = NULL;
    int last_kind = 0;
    int64_t backoff = AGENT_BACKOFF_MIN_MS;
    agent_unanswered_t unanswered = { .n = 0 };
    if (!(c = agent_client(a, &a->stop_poll, "the poller")))
        return NULL;
    while (!agent_flag(&a->stop_poll)) {
        pthread_mutex_lock(&a->mu);
        bool must_register = !a->registered || a->need_register;
        pthread_mutex_unlock(&a->mu);
        if (must_register) {
            if (agent_register(a, c) < 0)
                break;
            last_kind = 0;
            continue;
        }
        /* Ask only for what the queue has room for: the rest stays leased
         * in the database, where tenants take turns (a worker holding many
         * of one tenant's assignments would make another's wait behind
         * them all). */
        pthread_mutex_lock(&a->mu);
        while (a->qlen >= a->qcap && !agent_flag(&a->stop_poll))
            pthread_cond_wait(&a->cond, &a->mu);
        size_t room = a->qcap - (a->qlen < a->qcap ? a->qlen : a->qcap);
        pthread_mutex_unlock(&a->mu);
        if (agent_flag(&a->stop_poll))
            break;
        int max = room < 1 ? 1 : room > SBX_CLAIM_MAX ? SBX_CLAIM_MAX : (int)room;
        char wid[AGENT_WORKER_ID_MAX], path[AGENT_WORKER_ID_MAX + 480], cap[40] = "", pid[SBX_POLL_ID_MAX + 1],
            un[SBX_POLL_UNANSWERED_MAX * (SBX_POLL_ID_MAX + 1) + 16];
        agent_worker_id(a, wid, sizeof wid);
        /* One tenant's long commands (detached execs) hold an executor until
         * they end: the claim hands this worker at most tenant_executors of a
         * tenant's at once, so the others always find one free. */
        if (a->tenant_executors < a->executors)
            snprintf(cap, sizeof cap, "&tenant_executors=%d", a->tenant_executors);
        /* Each poll has an id, which its claim records: when its answer
         * does not arrive, the next polls say so and what it claimed is
         * handed out again (this worker never started it). */
        agent_poll_id(pid, sizeof pid);
        agent_unanswered_query(&unanswered, un, sizeof un);
        snprintf(path, sizeof path, "/v1/workers/%s/poll?wait=%d&max=%d%s&poll=%s%s", wid, AGENT_POLL_WAIT_S, max,
                 cap, pid, un);
        httpc_response_t resp;
        int rc = httpc_request(c, "GET", path, NULL, NULL, AGENT_POLL_TIMEOUT_MS, &resp);
        if (agent_flag(&a->stop_poll)) {
            httpc_response_release(&resp);
            break;
        }
        json_object *list = rc == 0 && resp.status == 200 ? jsonx_get_arr(resp.json, "assignments") : NULL;
        /* Anything but the list (a proxy's 502 too) may hide a claim; to
         * name a poll that claimed nothing is harmless. */
        if (list)
            agent_unanswered_answered(&unanswered, time_mono_ms());
        else
            agent_unanswered_add(&unanswered, pid, time_mono_ms());
        if (list) {
            agent_contact(a);
            backoff = AGENT_BACKOFF_MIN_MS;
            last_kind = 0;
            size_t n = json_object_array_length(list);
            for (size_t i = 0; i < n; i++) {
                json_object *job = json_object_get(json_object_array_get_idx(list, i));
                char held_id[SBX_ID_MAX];
                snprintf(held_id, sizeof held_id, "%s",
                         jsonx_get_str(job, "operation_id") ? jsonx_get_str(job, "operation_id") : "");
                agent_hold(a, held_id);
                if (!agent_enqueue(a, job)) {
                    agent_release(a, held_id);
                    log_warn(AGENT_COMPONENT, "stopping: left %zu received assignments to their lease expiry",
                             n - i);
                    break;
                }
            }
            httpc_response_release(&resp);
            continue;
        }
        if (rc == 0 && resp.status == 404) {
            log_warn(AGENT_COMPONENT, "the controller does not know worker %s; registering again", wid);
            pthread_mutex_lock(&a->mu);
            a->need_register = true;
            pthread_mutex_unlock(&a->mu);
            httpc_response_release(&resp);
            continue;
        }
        agent_exchange_failed(a, c, &last_kind, rc, &resp, "poll the controller");
        httpc_response_release(&resp);
        agent_backoff(a, &backoff, &a->stop_poll);
    }
    httpc_free(c);
    return NULL;
}

