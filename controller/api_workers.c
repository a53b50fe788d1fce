/* Worker endpoints: register, heartbeat, long-poll for assignments, report. */
#include "api.h"
#include "db.h"
#include "ids.h"
#include "jsonx.h"
#include "limits.h"
#include "log.h"
#include "metrics.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

/* ---- worker identity ---------------------------------------------------- */

/* The (token, worker) pairs already logged and written as an event: a
 * stolen token retrying is one line and one event, not a flood. A ring of
 * hashes: at most SBX_WORKER_DENIED_SEEN_MAX pairs are remembered. */
static struct {
    pthread_mutex_t mu;
    uint64_t seen[SBX_WORKER_DENIED_SEEN_MAX];
    unsigned next;
} worker_denied_log = { .mu = PTHREAD_MUTEX_INITIALIZER };

static metric_family_t *m_identity_denied;
static pthread_once_t worker_metrics_once = PTHREAD_ONCE_INIT;

static void worker_metrics_init(void)
{
    m_identity_denied = metrics_family("sandbox_worker_identity_denied_total", METRIC_COUNTER,
                                       "Worker requests refused because the worker token does not act for that "
                                       "worker, by endpoint.", NULL, 0);
}

/* FNV-1a of token and worker; true the first time the pair is seen. */
static bool worker_denied_first(const char *token_id, const char *worker)
{
    uint64_t h = 1469598103934665603ULL;
    for (const char *s = token_id; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    h = (h ^ 0xffu) * 1099511628211ULL;
    for (const char *s = worker; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    h |= 1; /* 0 marks an empty slot */
    bool first = true;
    pthread_mutex_lock(&worker_denied_log.mu);
    for (unsigned i = 0; i < SBX_WORKER_DENIED_SEEN_MAX && first; i++)
        first = worker_denied_log.seen[i] != h;
    if (first) {
        worker_denied_log.seen[worker_denied_log.next] = h;
        worker_denied_log.next = (worker_denied_log.next + 1) % SBX_WORKER_DENIED_SEEN_MAX;
    }
    pthread_mutex_unlock(&worker_denied_log.mu);
    return first;
}

/* Answers 403 forbidden with msg for a worker token acting as a worker it
 * does not act for; counts it, and logs it and writes the
 * worker.identity_denied event once per (token, worker). */
static void worker_identity_denied(req_t *rq, const char *endpoint, const char *worker, const char *msg)
{
    pthread_once(&worker_metrics_once, worker_metrics_init);
    char labels[64];
    metrics_add(m_identity_denied, metrics_labels(labels, sizeof labels, "endpoint", endpoint, NULL), 1);
    if (worker_denied_first(rq->auth.token_id, worker)) {
        log_warn("controller", "worker token %s (tenant %s) refused as worker %.128s at %s: %s (logged once)",
                 rq->auth.token_id, rq->auth.tenant, worker, endpoint, msg);
        if (store_worker_identity_denied_event(rq->db, rq->auth.token_id, worker, msg) < 0)
            log_warn("controller", "cannot write the worker.identity_denied event: %s", db_last_error());
    }
    http_reply_error(rq, API_FORBIDDEN, "%s", msg);
}

/* Whether the request's token may act as worker id: a malformed id is 404
 * (register again), another worker's 403; an unknown one is 404 unless
 * missing_ok (the handler's store call then says so, after checking the
 * body). Replies when not. */
bool api_worker_id_ok(req_t *rq, const char *endpoint, const char *id, bool missing_ok)
{
    if (!ids_valid("wrk", id)) {
        http_reply_error(rq, API_NOT_FOUND, "no worker %.64s; register again", id);
        return false;
    }
    if (auth_worker_known(rq->auth.token_id, id))
        return true;
    char name[SBX_MAX_NAME_BYTES + 1] = "", bound[SBX_MAX_NAME_BYTES + 1] = "";
    int rc = store_worker_authorize(rq->db, rq->auth.token_id, id, name, bound);
    if (rc == 0)
        auth_worker_remember(rq->auth.token_id, id);
    if (rc == 0 || (rc == SBX_ENOTFOUND && missing_ok))
        return true;
    if (rc == SBX_ENOTFOUND) {
        http_reply_error(rq, API_NOT_FOUND, "no worker %s; register again", id);
    } else if (rc == SBX_EPERM) {
        api_error_t e;
        if (bound[0])
            snprintf(e.message, sizeof e.message, "this worker token acts for worker %s, not %s (%s)", bound, name, id);
        else
            snprintf(e.message, sizeof e.message, "this worker token does not act for worker %s (%s): it is bound to "
                     "no worker and did not register it", name, id);
        worker_identity_denied(rq, endpoint, id, e.message);
    } else {
        http_reply_error(rq, API_UNAVAILABLE, "database unavailable: %s", db_last_error());
    }
    return false;
}

void api_worker_register(req_t *rq)
{
    json_object *body = NULL, *w = NULL;
    api_error_t err;
    if (http_read_json(rq, (size_t)rq->ctl->max_body_client, &body) < 0)
        return;
    int rc = store_worker_register(rq->db, body, rq->auth.token_id, &w, &err);
    if (rc == SBX_EPERM) {
        worker_identity_denied(rq, "register", jsonx_get_str(body, "name"), err.message);
        json_object_put(body);
        return;
    }
    if (rc < 0) {
        json_object_put(body);
        http_reply_api_error(rq, &err);
        return;
    }
    json_object_put(body);
    log_info("controller", "worker %s registered (%s)", jsonx_get_str(w, "name"), jsonx_get_str(w, "id"));
    char cluster[64] = "";
    if (store_cluster_id(rq->db, cluster) < 0) {
        json_object_put(w);
        http_reply_error(rq, API_UNAVAILABLE, "database unavailable: %s", db_last_error());
        return;
    }
    json_object *resp = json_object_new_object();
    jsonx_add(resp, "worker", w);
    jsonx_add_str(resp, "cluster_id", cluster);
    jsonx_add_int(resp, "lease_seconds", rq->ctl->lim.lease_seconds);
    jsonx_add_int(resp, "heartbeat_seconds", cfg_int(&rq->ctl->cfg, CFG_HEARTBEAT_SECONDS));
    controller_kick_reconcile(rq->ctl);
    http_reply_json(rq, 200, resp);
}

void api_worker_heartbeat(req_t *rq, const char *id)
{
    if (!api_worker_id_ok(rq, "heartbeat", id, true))
        return;
    json_object *body = NULL, *resp = NULL;
    api_error_t err;
    if (http_read_json(rq, SBX_MAX_BODY_BYTES, &body) < 0)
        return;
    int rc = store_worker_heartbeat(rq->db, &rq->ctl->lim, id, body, &resp, &err);
    json_object_put(body);
    if (rc < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    http_reply_json(rq, 200, resp);
}

static bool poll_id_ok(const char *s, size_t n)
{
    if (n == 0 || n > SBX_POLL_ID_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '-' && s[i] != '_')
            return false;
    return true;
}

/* Splits "a,b,c" (checked ids, at most SBX_POLL_UNANSWERED_MAX) into buf
 * and out; their count, or -1. */
static int poll_ids_split(const char *list, char *buf, const char **out)
{
    int n = 0;
    strcpy(buf, list);
    for (char *p = buf, *next; p; p = next) {
        next = strchr(p, ',');
        if (next)
            *next++ = '\0';
        if (n == SBX_POLL_UNANSWERED_MAX || !poll_id_ok(p, strlen(p)))
            return -1;
        out[n++] = p;
    }
    return n;
}

void api_worker_poll(req_t *rq, const char *id)
{
    int wait = 0;
    if (!api_worker_id_ok(rq, "poll", id, false) || http_wait_param(rq, &wait) < 0)
        return;
    /* max: what the worker's queue has room for (older workers: none, the
     * most one poll takes). */
    const char *mx = http_query(rq, "max");
    rq->poll_max = SBX_CLAIM_MAX;
    if (mx) {
        char *end;
        errno = 0;
        long v = strtol(mx, &end, 10);
        if (errno || end == mx || *end || v < 1) {
            http_reply_error(rq, API_INVALID_ARGUMENT, "max must be a whole number of assignments (1 to %d)",
                             SBX_CLAIM_MAX);
            return;
        }
        rq->poll_max = v > SBX_CLAIM_MAX ? SBX_CLAIM_MAX : (int)v;
    }
    /* tenant_executors: what one tenant may hold of the worker's executors
     * (its worker_tenant_executors_percent share; absent: no share of the
     * worker's, the tenant policy's max_executors_per_worker alone). */
    const char *te = http_query(rq, "tenant_executors");
    rq->poll_tenant_cap = 0;
    rq->poll_held = false;
    if (te) {
        char *end;
        errno = 0;
        long v = strtol(te, &end, 10);
        if (errno || end == te || *end || v < 1 || v > SBX_WORKER_EXECUTORS_MAX) {
            http_reply_error(rq, API_INVALID_ARGUMENT, "tenant_executors must be a whole number from 1 to %d",
                             SBX_WORKER_EXECUTORS_MAX);
            return;
        }
        rq->poll_tenant_cap = (int)v;
    }
    /* poll: the id the worker gave this poll, recorded on what it hands
     * out; unanswered: polls of this worker whose answers never reached it
     * (their operations never started: handed out again, below). So is
     * what this poll's own id claimed already: a worker never uses an id
     * twice, so this is the same request sent again, which a client
     * (libcurl) does when a reused connection closed before any answer. */
    const char *pid = http_query(rq, "poll"), *un = http_query(rq, "unanswered");
    char unbuf[SBX_POLL_UNANSWERED_MAX * (SBX_POLL_ID_MAX + 1) + 1];
    const char *polls[SBX_POLL_UNANSWERED_MAX + 1];
    int npolls = 0;
    rq->poll_id[0] = '\0';
    if (pid && !poll_id_ok(pid, strlen(pid))) {
        http_reply_error(rq, API_INVALID_ARGUMENT,
                         "poll must be 1 to %d letters, digits, '-' or '_' (an id the worker makes for each poll)",
                         SBX_POLL_ID_MAX);
        return;
    }
    if (pid)
        snprintf(rq->poll_id, sizeof rq->poll_id, "%s", pid);
    if (un && (strlen(un) >= sizeof unbuf || (npolls = poll_ids_split(un, unbuf, polls)) < 0)) {
        http_reply_error(rq, API_INVALID_ARGUMENT,
                         "unanswered must be at most %d poll ids, comma-separated (polls whose answers never reached "
                         "the worker)",
                         SBX_POLL_UNANSWERED_MAX);
        return;
    }
    if (pid)
        polls[npolls++] = rq->poll_id;
    if (npolls > 0) {
        api_error_t err;
        int back = 0;
        if (store_worker_unclaim(rq->db, &rq->ctl->lim, id, polls, npolls, &back, &err) < 0) {
            http_reply_api_error(rq, &err);
            return;
        }
        if (back > 0)
            log_info("controller", "worker %s got no answer to a poll: %d operations it never started handed out "
                                   "again", id, back);
    }
    snprintf(rq->park_id, sizeof rq->park_id, "%s", id);
    rq->poll_gen = server_poll_begin(id);
    if (wait > 0) {
        /* A worker polls again right after each report, usually with
         * nothing leased to it yet: an index read says so, where the claim
         * (a statement that writes, and runs the events triggers even when
         * it claims nothing) would have said it more dearly. What is
         * leased later wakes the parked poll (store_workers_with_leases
         * again, then the claim). */
        const char *ids[] = { id };
        bool leased = true;
        if (store_workers_with_leases(rq->db, ids, 1, &leased) < 0) {
            http_reply_error(rq, API_UNAVAILABLE, "database unavailable: %s", db_last_error());
            return;
        }
        if (!leased) {
            http_park(rq, PARK_POLL, id, wait);
            return;
        }
    }
    if (api_poll_resume(rq, wait == 0))
        return;
    http_park(rq, PARK_POLL, id, wait);
}

bool api_poll_resume(req_t *rq, bool final)
{
    json_object *resp = NULL;
    api_error_t err;
    int n = 0;
    if (!server_poll_current(rq->park_id, rq->poll_gen)) {
        /* The worker polls again elsewhere: this one takes nothing. */
        resp = json_object_new_object();
        jsonx_add(resp, "assignments", json_object_new_array());
        http_reply_json(rq, 200, resp);
        return true;
    }
    if (store_worker_claim(rq->db, &rq->ctl->lim, rq->park_id, rq->poll_max, rq->poll_tenant_cap, rq->poll_id,
                           &resp, &n, &err) < 0) {
        http_reply_api_error(rq, &err);
        return true;
    }
    if (n == 0 && !final) {
        /* Something was leased (the claim runs only then) and nothing could
         * be taken: tenants at their executor cap here. An end of one of
         * this worker's operations looks again (api_worker_report). */
        rq->poll_held = true;
        json_object_put(resp);
        return false;
    }
    http_reply_json(rq, 200, resp);
    return true;
}

void api_worker_report(req_t *rq, const char *id)
{
    if (!api_worker_id_ok(rq, "report", id, true))
        return;
    json_object *body = NULL, *resp = NULL;
    api_error_t err;
    if (http_read_json(rq, SBX_MAX_BODY_BYTES, &body) < 0)
        return;
    int rc = store_worker_report(rq->db, id, body, &resp, &err);
    json_object_put(body);
    if (rc < 0) {
        if (err.code == API_STALE_LEASE)
            log_warn("controller", "%s", err.message);
        http_reply_api_error(rq, &err);
        return;
    }
    /* The operation ended: its waiters and event readers look again, and
     * so does this worker's poll when a tenant's executor cap held it back
     * (one of its executors is free now; a poll parked on another
     * controller claims at its next wake-up or its wait's end). An end of a
     * create or a delete may let the loop place what waited (room freed, a
     * delete behind its create); an exec's end frees no room. */
    json_object *op = jsonx_get_obj(resp, "operation");
    const char *op_id = jsonx_get_str(op, "id"), *kind = jsonx_get_str(op, "kind");
    const char *named[] = { op_id, id };
    if (op_id)
        controller_wake(rq->ctl, WAKE_EVENTS | WAKE_POLL_FREED, named, 2);
    else
        controller_wake(rq->ctl, WAKE_ALL | WAKE_POLL_FREED, named + 1, 1);
    if (!kind || strcmp(kind, "exec") != 0 || atomic_load(&rq->ctl->builds_active))
        controller_kick_reconcile(rq->ctl);
    http_reply_json(rq, 200, resp);
}

/* One ended process of a sessions report, checked strictly: 0 with rec
 * filled (argv pointing into o), or SBX_EINVAL with err naming the field. */
static int session_parse(json_object *o, size_t i, shell_record_t *rec, const char **argv, api_error_t *err)
{
    static const char *const keys[] = { "sandbox_id", "argv", "tty", "exit_code", "duration_ms", "caller", NULL };
    if (!json_object_is_type(o, json_type_object))
        return api_error_set(err, API_INVALID_ARGUMENT, "sessions[%zu] must be an object", i);
    json_object_object_foreach(o, key, val) {
        (void)val;
        bool known = false;
        for (int k = 0; keys[k] && !known; k++)
            known = strcmp(key, keys[k]) == 0;
        if (!known)
            return api_error_set(err, API_INVALID_ARGUMENT, "sessions[%zu] has an unknown field", i);
    }
    const char *sid = jsonx_get_str(o, "sandbox_id"), *caller = jsonx_get_str(o, "caller");
    json_object *av = jsonx_get_arr(o, "argv");
    int64_t code = 0, ms = 0;
    bool tty = false;
    if (!sid || !ids_valid("sbx", sid))
        return api_error_set(err, API_INVALID_ARGUMENT, "sessions[%zu].sandbox_id must be a sandbox id", i);
    if (!av || json_object_array_length(av) < 1 || json_object_array_length(av) > SBX_MAX_ARGV)
        return api_error_set(err, API_INVALID_ARGUMENT, "sessions[%zu].argv must hold 1 to %d strings", i, SBX_MAX_ARGV);
    size_t n = json_object_array_length(av), total = 0;
    for (size_t k = 0; k < n; k++) {
        json_object *a = json_object_array_get_idx(av, k);
        if (!json_object_is_type(a, json_type_string))
            return api_error_set(err, API_INVALID_ARGUMENT, "sessions[%zu].argv[%zu] must be a string", i, k);
        total += (size_t)json_object_get_string_len(a);
        argv[k] = json_object_get_string(a);
    }
    if (total > SBX_MAX_ARGV_BYTES)
        return api_error_set(err, API_INVALID_ARGUMENT, "sessions[%zu].argv holds more than %u bytes", i,
                             SBX_MAX_ARGV_BYTES);
    if (!jsonx_get_bool(o, "tty", &tty) || !jsonx_get_int(o, "exit_code", &code) || code < -1 || code > 0x7fffffff ||
        !jsonx_get_int(o, "duration_ms", &ms) || ms < 0)
        return api_error_set(err, API_INVALID_ARGUMENT, "sessions[%zu] needs tty (boolean), exit_code (-1 or more) and "
                             "duration_ms (0 or more)", i);
    if (caller && !ids_valid("tok", caller))
        return api_error_set(err, API_INVALID_ARGUMENT, "sessions[%zu].caller must be a token id", i);
    *rec = (shell_record_t){ .sandbox_id = sid, .argv = argv, .argc = n, .tty = tty, .exit_code = (int)code,
                             .duration_ms = ms, .created_by = caller, .via = "e2b" };
    return 0;
}

void api_worker_sessions(req_t *rq, const char *id)
{
    if (!api_worker_id_ok(rq, "sessions", id, true))
        return;
    json_object *body = NULL;
    api_error_t err;
    if (http_read_json(rq, SBX_MAX_BODY_BYTES, &body) < 0)
        return;
    json_object *list = jsonx_get_arr(body, "sessions");
    size_t n = list ? json_object_array_length(list) : 0;
    if (!list || json_object_object_length(body) != 1 || n > SBX_WORKER_SESSIONS_MAX) {
        json_object_put(body);
        http_reply_error(rq, API_INVALID_ARGUMENT, "the body is {\"sessions\":[…]} with at most %d entries",
                         SBX_WORKER_SESSIONS_MAX);
        return;
    }
    /* All or nothing is judged first: a malformed entry refuses the body. */
    static __thread const char *argv[SBX_MAX_ARGV];
    for (size_t i = 0; i < n; i++) {
        shell_record_t rec;
        if (session_parse(json_object_array_get_idx(list, i), i, &rec, argv, &err) < 0) {
            json_object_put(body);
            http_reply_api_error(rq, &err);
            return;
        }
    }
    int recorded = 0;
    for (size_t i = 0; i < n; i++) {
        shell_record_t rec;
        char op_id[SBX_ID_MAX];
        session_parse(json_object_array_get_idx(list, i), i, &rec, argv, &err);
        /* Only for sandboxes this worker runs; the caller's token id or,
         * when the worker does not know it, the worker's own. */
        rec.worker_id = id;
        if (!rec.created_by)
            rec.created_by = rq->auth.token_id;
        if (store_shell_record(rq->db, &rq->ctl->lim, &rec, op_id, &err) < 0) {
            if (err.code != API_NOT_FOUND) {
                json_object_put(body);
                http_reply_api_error(rq, &err);
                return;
            }
            log_warn("controller", "worker %s reported a process of sandbox %s, which it does not run", id,
                     rec.sandbox_id);
            continue;
        }
        recorded++;
    }
    json_object_put(body);
    if (recorded)
        controller_wake(rq->ctl, WAKE_EVENTS, NULL, 0);
    json_object *o = json_object_new_object();
    jsonx_add_int(o, "recorded", recorded);
    http_reply_json(rq, 200, o);
}

void api_worker_output(req_t *rq, const char *id)
{
    if (!api_worker_id_ok(rq, "output", id, true))
        return;
    json_object *body = NULL;
    api_error_t err;
    if (http_read_json(rq, SBX_MAX_BODY_BYTES, &body) < 0)
        return;
    int rc = store_output_append(rq->db, &rq->ctl->lim, id, body, &err);
    json_object_put(body);
    if (rc < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    controller_wake(rq->ctl, WAKE_OUTPUT, NULL, 0);
    http_reply_json(rq, 200, json_object_new_object());
}

void api_worker_list(req_t *rq)
{
    json_object *resp = NULL;
    api_error_t err;
    if (store_worker_list(rq->db, &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    http_reply_json(rq, 200, resp);
}

void api_worker_drain(req_t *rq, const char *name, bool drain)
{
    json_object *resp = NULL;
    api_error_t err;
    if (store_worker_set_draining(rq->db, name, drain, &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    log_info("controller", "worker %s %s by %s", name, drain ? "drained" : "resumed", rq->auth.token_id);
    if (!drain)
        controller_kick_reconcile(rq->ctl);
    http_reply_json(rq, 200, resp);
}
