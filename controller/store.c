/* All SQL of the controller: tokens, sandboxes, operations, workers, and the
 * reconcile passes. State changes are compare-and-set UPDATEs checked against
 * the transition table, each with its events row in the same transaction. */
#include "store.h"
#include "aegis.h"
#include "db.h"
#include "ids.h"
#include "jsonx.h"
#include "log.h"
#include "metrics.h"
#include "observed.h"
#include "opstate.h"
#include "token.h"
#include "utf8.h"

#include <sodium.h>

#include <assert.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TS(col) "to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"

#define SANDBOX_COLS \
    "s.id, tn.name, s.spec::text, s.phase, s.desired_state, w.name, s.isolation, s.cpu_millis, s.memory_mib, " \
    "s.ttl_seconds, " TS("s.expires_at") ", " TS("s.created_at") ", " TS("s.updated_at") ", s.classification::text, " \
    "s.failure::text"
#define SANDBOX_FROM \
    " FROM sandboxes s JOIN tenants tn ON tn.id = s.tenant_id LEFT JOIN workers w ON w.id = s.worker_id "

#define OP_COLS \
    "o.id, o.kind, o.state, o.sandbox_id, o.attempt, " TS("o.created_at") ", " TS("o.updated_at") ", " \
    TS("o.finished_at") ", o.error_code, o.error_message, o.placement::text, o.result::text"

static const char *role_names[] = { "admin", "member", "worker" };

const char *role_name(role_t r) { return (unsigned)r < 3 ? role_names[r] : "member"; }

int role_parse(const char *s, role_t *ret)
{
    for (int i = 0; s && i < 3; i++)
        if (strcmp(s, role_names[i]) == 0) {
            *ret = (role_t)i;
            return 0;
        }
    return SBX_EINVAL;
}

static int store_db_error(api_error_t *err)
{
    api_error_set(err, API_UNAVAILABLE, "database unavailable: %s", db_last_error());
    return SBX_EDB;
}

static json_object *parse_json_text(const char *s)
{
    if (!s)
        return NULL;
    json_object *o = NULL;
    if (jsonx_parse(s, strlen(s), &o, NULL) < 0)
        return NULL;
    return o;
}

/* Row of SANDBOX_COLS starting at column `at` → sandbox JSON. */
static json_object *sandbox_json(const PGresult *r, int row)
{
    json_object *o = json_object_new_object();
    json_object *spec = parse_json_text(db_get(r, row, 2));
    jsonx_add_str(o, "id", db_get(r, row, 0));
    jsonx_add_str(o, "tenant", db_get(r, row, 1));
    jsonx_add_str(o, "image", jsonx_get_str(spec, "image"));
    jsonx_add_str(o, "phase", db_get(r, row, 3));
    jsonx_add_str(o, "desired_state", db_get(r, row, 4));
    jsonx_add_str(o, "worker", db_get(r, row, 5));
    jsonx_add_str(o, "isolation", db_get(r, row, 6));
    jsonx_add_int(o, "cpu_millis", db_get_ll(r, row, 7));
    jsonx_add_int(o, "memory_mib", db_get_ll(r, row, 8));
    jsonx_add_int(o, "ttl_seconds", db_get_ll(r, row, 9));
    jsonx_add_str(o, "network", jsonx_get_str(spec, "network"));
    json_object *v;
    jsonx_add(o, "trust", spec && json_object_object_get_ex(spec, "trust", &v) ? json_object_get(v) : NULL);
    jsonx_add(o, "labels", spec && json_object_object_get_ex(spec, "labels", &v) ? json_object_get(v)
                                                                                  : json_object_new_object());
    jsonx_add_str(o, "expires_at", db_get(r, row, 10));
    jsonx_add_str(o, "created_at", db_get(r, row, 11));
    jsonx_add_str(o, "updated_at", db_get(r, row, 12));
    static const char *const flags[] = { "read_only_root", "hardened" };
    for (int i = 0; i < 2; i++)
        jsonx_add_bool(o, flags[i], spec && json_object_object_get_ex(spec, flags[i], &v) &&
                                        json_object_get_boolean(v));
    jsonx_add(o, "selector", spec && json_object_object_get_ex(spec, "selector", &v) ? json_object_get(v)
                                                                                      : json_object_new_object());
    jsonx_add(o, "classification", parse_json_text(db_get(r, row, 13)));
    /* What the runtime observed when the sandbox stopped by itself. */
    jsonx_add(o, "failure", parse_json_text(db_get(r, row, 14)));
    if (spec)
        json_object_put(spec);
    return o;
}

static json_object *op_json(const PGresult *r, int row)
{
    json_object *o = json_object_new_object();
    jsonx_add_str(o, "id", db_get(r, row, 0));
    jsonx_add_str(o, "kind", db_get(r, row, 1));
    jsonx_add_str(o, "state", db_get(r, row, 2));
    jsonx_add_str(o, "sandbox_id", db_get(r, row, 3));
    jsonx_add_int(o, "attempt", db_get_ll(r, row, 4));
    jsonx_add_str(o, "created_at", db_get(r, row, 5));
    jsonx_add_str(o, "updated_at", db_get(r, row, 6));
    jsonx_add_str(o, "finished_at", db_get(r, row, 7));
    if (db_get(r, row, 8)) {
        json_object *e = json_object_new_object();
        jsonx_add_str(e, "code", db_get(r, row, 8));
        jsonx_add_str(e, "message", db_get(r, row, 9) ? db_get(r, row, 9) : "");
        jsonx_add(o, "error", e);
    } else {
        jsonx_add(o, "error", NULL);
    }
    jsonx_add(o, "placement", parse_json_text(db_get(r, row, 10)));
    jsonx_add(o, "result", parse_json_text(db_get(r, row, 11)));
    return o;
}

/* {"<key>": [row_json(r, i) for every row]}; clears r. */
static json_object *rows_object(PGresult *r, const char *key, json_object *(*row_json)(const PGresult *, int))
{
    json_object *arr = json_object_new_array();
    for (int i = 0; i < PQntuples(r); i++)
        json_object_array_add(arr, row_json(r, i));
    PQclear(r);
    json_object *o = json_object_new_object();
    jsonx_add(o, key, arr);
    return o;
}

/* Loads one operation as JSON (no scope check). */
static int load_op(PGconn *c, const char *op_id, json_object **ret)
{
    const char *p[] = { op_id };
    PGresult *r = db_exec(c, "SELECT " OP_COLS " FROM operations o WHERE o.id = $1", 1, p);
    if (!r)
        return SBX_EDB;
    if (PQntuples(r) != 1) {
        PQclear(r);
        return SBX_ENOTFOUND;
    }
    *ret = op_json(r, 0);
    PQclear(r);
    return 0;
}

static int load_sandbox(PGconn *c, const char *sandbox_id, json_object **ret)
{
    const char *p[] = { sandbox_id };
    PGresult *r = db_exec(c, "SELECT " SANDBOX_COLS SANDBOX_FROM "WHERE s.id = $1", 1, p);
    if (!r)
        return SBX_EDB;
    if (PQntuples(r) != 1) {
        PQclear(r);
        return SBX_ENOTFOUND;
    }
    *ret = sandbox_json(r, 0);
    PQclear(r);
    return 0;
}

/* Appends an events row (same transaction as the change it describes). */
static int event_add(PGconn *c, const char *tenant_id, const char *kind, const char *sandbox_id, const char *op_id,
                     json_object *data)
{
    char *d = data ? jsonx_dump(data) : NULL;
    const char *p[] = { tenant_id, kind, sandbox_id, op_id, d ? d : "{}" };
    int r = db_run(c, "INSERT INTO events (tenant_id, kind, sandbox_id, operation_id, data) "
                      "VALUES ($1, $2, $3, $4, $5::jsonb)", 5, p);
    free(d);
    if (data)
        json_object_put(data);
    return r;
}

static metric_family_t *m_op_stage, *m_op_duration, *m_op_finished, *m_lease_expiries;
static pthread_once_t store_metrics_once = PTHREAD_ONCE_INIT;

static void store_metrics_init(void)
{
    m_op_stage = metrics_family("sandbox_operation_stage_duration_seconds", METRIC_HISTOGRAM,
                                "Time operations spend in each stage: queued (accepted to leased), starting "
                                "(leased to running), running (running to finished).",
                                metrics_latency_buckets, metrics_latency_nbuckets);
    m_op_duration = metrics_family("sandbox_operation_duration_seconds", METRIC_HISTOGRAM,
                                   "Time from an operation's acceptance to its end, by kind and final state.",
                                   metrics_latency_buckets, metrics_latency_nbuckets);
    m_op_finished = metrics_family("sandbox_operations_finished_total", METRIC_COUNTER,
                                   "Operations this controller moved to a final state, by kind and state.", NULL, 0);
    m_lease_expiries = metrics_family("sandbox_lease_expiries_total", METRIC_COUNTER,
                                      "Leases that expired (the worker stopped renewing), by what followed: retried "
                                      "or failed.",
                                      NULL, 0);
}

/* Observes the stage that the transition to `to` ends; secs[] are the
 * seconds since created_at, leased_at and started_at (NULL: unknown). */
static void op_observe(const char *kind, op_state_t to, const char *since_created, const char *since_leased,
                       const char *since_started)
{
    pthread_once(&store_metrics_once, store_metrics_init);
    char labels[128];
    const char *stage = NULL, *since = NULL;
    if (to == OP_LEASED) {
        stage = "queued";
        since = since_created;
    } else if (to == OP_RUNNING) {
        stage = "starting";
        since = since_leased;
    } else if (op_state_terminal(to)) {
        stage = "running";
        since = since_started;
    }
    if (stage && since)
        metrics_observe(m_op_stage, metrics_labels(labels, sizeof labels, "kind", kind, "stage", stage, NULL),
                        strtod(since, NULL));
    if (op_state_terminal(to)) {
        metrics_labels(labels, sizeof labels, "kind", kind, "state", op_state_name(to), NULL);
        metrics_add(m_op_finished, labels, 1);
        if (since_created)
            metrics_observe(m_op_duration, labels, strtod(since_created, NULL));
    }
}

/* {"reason": why} for an event. */
static json_object *event_reason(const char *why)
{
    json_object *d = json_object_new_object();
    jsonx_add_str(d, "reason", why);
    return d;
}

/* What an operation event adds from op_cas's RETURNING row: the attempt,
 * the worker holding the lease, the error, an exec's exit code. Never the
 * request or the output (they may hold secrets). */
static void event_data_add_op(json_object *d, const PGresult *r)
{
    if (db_get_ll(r, 0, 3) > 0)
        jsonx_add_int(d, "attempt", db_get_ll(r, 0, 3));
    if (db_get(r, 0, 4))
        jsonx_add_str(d, "worker", db_get(r, 0, 4));
    if (db_get(r, 0, 5)) {
        jsonx_add_str(d, "error_code", db_get(r, 0, 5));
        jsonx_add_str(d, "error_message", db_get(r, 0, 6));
    }
    if (db_get(r, 0, 7))
        jsonx_add_int(d, "exit_code", db_get_ll(r, 0, 7));
}

/* The one place operations change state: asserts the table, then
 * UPDATE … WHERE id = $1 AND state = from, plus an events row.
 * extra_set is appended to SET and may use $4… for extra params.
 * Returns 0, SBX_ECONFLICT when the state had moved, SBX_EDB. */
static int op_cas(PGconn *c, const char *op_id, op_state_t from, op_state_t to, const char *extra_set, int nextra,
                  const char *const *extra, json_object *event_data)
{
    if (!op_transition_allowed(from, to)) {
        log_error("store", "refusing forbidden transition %s -> %s of %s", op_state_name(from), op_state_name(to),
                  op_id);
        if (event_data)
            json_object_put(event_data);
        return SBX_EINVAL;
    }
    char sql[1024];
    snprintf(sql, sizeof sql,
             "UPDATE operations SET state = $2, updated_at = now()%s%s%s "
             "WHERE id = $1 AND state = $3 RETURNING tenant_id, sandbox_id, kind, attempt, "
             "(SELECT name FROM workers w WHERE w.id = lease_worker_id), error_code, left(error_message, 300), "
             "result->>'exit_code', extract(epoch FROM now() - created_at), extract(epoch FROM now() - leased_at), "
             "extract(epoch FROM now() - started_at)",
             op_state_terminal(to) ? ", finished_at = now()"
             : to == OP_LEASED     ? ", leased_at = now(), started_at = NULL"
             : to == OP_RUNNING    ? ", started_at = now()"
                                   : "",
             extra_set ? ", " : "", extra_set ? extra_set : "");
    const char *p[12] = { op_id, op_state_name(to), op_state_name(from) };
    for (int i = 0; i < nextra && i < 9; i++)
        p[3 + i] = extra[i];
    PGresult *r = db_exec(c, sql, 3 + nextra, p);
    if (!r) {
        if (event_data)
            json_object_put(event_data);
        return SBX_EDB;
    }
    if (PQntuples(r) != 1) {
        PQclear(r);
        if (event_data)
            json_object_put(event_data);
        return SBX_ECONFLICT;
    }
    op_observe(db_get(r, 0, 2), to, db_get(r, 0, 8), db_get(r, 0, 9), db_get(r, 0, 10));
    json_object *d = event_data ? event_data : json_object_new_object();
    jsonx_add_str(d, "kind", db_get(r, 0, 2));
    jsonx_add_str(d, "from", op_state_name(from));
    jsonx_add_str(d, "to", op_state_name(to));
    event_data_add_op(d, r);
    char kind[64];
    snprintf(kind, sizeof kind, "operation.%s", op_state_name(to));
    int rc = event_add(c, db_get(r, 0, 0), kind, db_get(r, 0, 1), op_id, d);
    PQclear(r);
    return rc;
}

/* Sets a sandbox's phase (with optional extra SET using $3…) and writes its
 * event, adding event_data's members (taken; may be NULL) to its data. */
static int sandbox_set_phase_ev(PGconn *c, const char *sandbox_id, sandbox_phase_t phase, const char *extra_set,
                                int nextra, const char *const *extra, json_object *event_data)
{
    char sql[1024];
    snprintf(sql, sizeof sql,
             "UPDATE sandboxes SET phase = $2, updated_at = now()%s%s WHERE id = $1 RETURNING tenant_id, "
             "(SELECT name FROM workers w WHERE w.id = worker_id), isolation",
             extra_set ? ", " : "", extra_set ? extra_set : "");
    const char *p[10] = { sandbox_id, sandbox_phase_name(phase) };
    for (int i = 0; i < nextra && i < 8; i++)
        p[2 + i] = extra[i];
    PGresult *r = db_exec(c, sql, 2 + nextra, p);
    if (!r || PQntuples(r) != 1) {
        if (event_data)
            json_object_put(event_data);
        if (!r)
            return SBX_EDB;
        PQclear(r);
        return SBX_ENOTFOUND;
    }
    char kind[64];
    snprintf(kind, sizeof kind, "sandbox.%s", sandbox_phase_name(phase));
    json_object *ed = event_data ? event_data : json_object_new_object();
    jsonx_add_str(ed, "worker", db_get(r, 0, 1));
    if (phase == PH_SCHEDULED)
        jsonx_add_str(ed, "isolation", db_get(r, 0, 2));
    int rc = event_add(c, db_get(r, 0, 0), kind, sandbox_id, NULL, ed);
    PQclear(r);
    /* A sandbox that stops running takes its routes with it, in the same
     * transaction: nothing can reach it through a route afterwards. */
    if (rc == 0 && (phase == PH_DELETING || phase == PH_DELETED || phase == PH_FAILED || phase == PH_LOST)) {
        const char *q[] = { sandbox_id, sandbox_phase_name(phase) };
        rc = db_run(c, "WITH gone AS (UPDATE routes SET state = 'removed', removed_at = now(), "
                       "  removed_reason = 'sandbox ' || $2 WHERE sandbox_id = $1 AND state = 'active' "
                       "  RETURNING id, tenant_id, port, removed_reason) "
                       "INSERT INTO events (tenant_id, kind, sandbox_id, data) SELECT tenant_id, 'route.removed', $1, "
                       "  jsonb_build_object('route', id, 'port', port, 'reason', removed_reason) FROM gone",
                    2, q);
        rc = rc < 0 ? SBX_EDB : 0;
    }
    return rc;
}

static int sandbox_set_phase(PGconn *c, const char *sandbox_id, sandbox_phase_t phase, const char *extra_set,
                             int nextra, const char *const *extra)
{
    return sandbox_set_phase_ev(c, sandbox_id, phase, extra_set, nextra, extra, NULL);
}

/* Gives back the sandbox's share of its worker's capacity, once. */
static int sandbox_release_allocation(PGconn *c, const char *sandbox_id)
{
    const char *p[] = { sandbox_id };
    return db_run(c,
                  "WITH s AS (UPDATE sandboxes SET allocated = false WHERE id = $1 AND allocated "
                  "           RETURNING worker_id, cpu_millis, memory_mib) "
                  "UPDATE workers w SET alloc_cpu_millis = greatest(0, w.alloc_cpu_millis - s.cpu_millis), "
                  "  alloc_memory_mib = greatest(0, w.alloc_memory_mib - s.memory_mib), "
                  "  alloc_slots = greatest(0, w.alloc_slots - 1), updated_at = now() "
                  "FROM s WHERE w.id = s.worker_id",
                  1, p);
}

/* Inside a transaction holding the sandbox row: the sandbox stopped without
 * being asked to. It becomes failed with failure (taken; "at" is added)
 * and output_tail (may be NULL) kept, its event says why (reason and exit
 * code; never the output, which may hold secrets), its capacity is
 * released, and its execs still waiting or running fail at once with
 * sandbox_exited instead of hanging until a timeout. */
static int sandbox_fail_observed(PGconn *c, const char *sandbox_id, json_object *failure, const char *output_tail)
{
    char *ftext = jsonx_dump(failure);
    if (!ftext) {
        json_object_put(failure);
        return SBX_ENOMEM;
    }
    const char *reason = jsonx_get_str(failure, "reason");
    const char *fmsg = jsonx_get_str(failure, "message");
    json_object *ed = json_object_new_object();
    jsonx_add_str(ed, "reason", reason ? reason : "exited");
    int64_t code = 0;
    bool has_code = jsonx_get_int(failure, "exit_code", &code);
    if (has_code)
        jsonx_add_int(ed, "exit_code", code);
    const char *x[] = { ftext, output_tail };
    int rc = sandbox_set_phase_ev(c, sandbox_id, PH_FAILED,
                                  "failure = $3::jsonb || jsonb_build_object('at', " TS("now()") "), "
                                  "output_tail = $4",
                                  2, x, ed);
    if (rc == 0)
        rc = sandbox_release_allocation(c, sandbox_id) < 0 ? SBX_EDB : 0;
    PGresult *r = rc < 0 ? NULL
                         : db_exec(c, "SELECT id, state FROM operations WHERE sandbox_id = $1 AND kind = 'exec' "
                                      "AND state IN ('pending', 'admitted', 'leased', 'running') FOR UPDATE",
                                   1, (const char *const[]){ sandbox_id });
    if (rc == 0 && !r)
        rc = SBX_EDB;
    for (int i = 0; r && i < PQntuples(r) && rc == 0; i++) {
        op_state_t from;
        if (op_state_parse(db_get(r, i, 1), &from) < 0)
            continue;
        char msg[1200];
        snprintf(msg, sizeof msg, "sandbox %s stopped while the command %s: %s", sandbox_id,
                 from == OP_RUNNING ? "ran" : "waited", fmsg ? fmsg : "its main process is not running");
        const char *e[] = { api_code_info(API_SANDBOX_EXITED)->name, msg };
        int x2 = op_cas(c, db_get(r, i, 0), from, OP_FAILED, "error_code = $4, error_message = $5", 2, e,
                        event_reason("sandbox_failed"));
        if (x2 < 0 && x2 != SBX_ECONFLICT)
            rc = x2;
    }
    PQclear(r);
    free(ftext);
    json_object_put(failure);
    return rc;
}

/* ---- tokens and tenants ---- */

int store_token_find(PGconn *c, const char *token_id, char ret_hash[72], auth_info_t *ret)
{
    const char *p[] = { token_id };
    PGresult *r = db_exec(c,
                          "SELECT t.hash, t.role, t.tenant_id, tn.name, "
                          "  (t.revoked_at IS NOT NULL OR (t.expires_at IS NOT NULL AND t.expires_at <= now())) "
                          "FROM api_tokens t JOIN tenants tn ON tn.id = t.tenant_id WHERE t.id = $1",
                          1, p);
    if (!r)
        return SBX_EDB;
    int rc = 0;
    if (PQntuples(r) != 1) {
        rc = SBX_ENOTFOUND;
        goto cleanup;
    }
    if (db_get_bool(r, 0, 4)) {
        rc = SBX_EAUTH;
        goto cleanup;
    }
    memset(ret, 0, sizeof *ret);
    snprintf(ret_hash, 72, "%s", db_get(r, 0, 0));
    snprintf(ret->token_id, sizeof ret->token_id, "%s", token_id);
    snprintf(ret->tenant_id, sizeof ret->tenant_id, "%s", db_get(r, 0, 2));
    snprintf(ret->tenant, sizeof ret->tenant, "%s", db_get(r, 0, 3));
    if (role_parse(db_get(r, 0, 1), &ret->role) < 0)
        rc = SBX_EAUTH;
cleanup:
    PQclear(r);
    return rc;
}

int store_tenant_resolve(PGconn *c, const char *name, bool create, char ret_id[SBX_ID_MAX])
{
    const char *p[] = { name };
    PGresult *r = db_exec(c, "SELECT id FROM tenants WHERE name = $1", 1, p);
    if (!r)
        return SBX_EDB;
    if (PQntuples(r) == 1) {
        snprintf(ret_id, SBX_ID_MAX, "%s", db_get(r, 0, 0));
        PQclear(r);
        return 0;
    }
    PQclear(r);
    if (!create)
        return SBX_ENOTFOUND;
    char id[SBX_ID_MAX];
    ids_new("tnt", id);
    const char *q[] = { id, name };
    /* Concurrent creators: the loser's insert does nothing, then both read. */
    if (db_run(c, "INSERT INTO tenants (id, name) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING", 2, q) < 0)
        return SBX_EDB;
    r = db_exec(c, "SELECT id FROM tenants WHERE name = $1", 1, p);
    if (!r)
        return SBX_EDB;
    int rc = PQntuples(r) == 1 ? 0 : SBX_EDB;
    if (rc == 0)
        snprintf(ret_id, SBX_ID_MAX, "%s", db_get(r, 0, 0));
    PQclear(r);
    return rc;
}

/* Inserts a token for an existing tenant id; ttl_seconds 0 = no expiry.
 * ret_id gets its id, ret_secret the token to show once. */
static int token_insert(PGconn *c, const char *tenant_id, role_t role, const char *name, int64_t ttl_seconds,
                        char ret_id[SBX_ID_MAX], char ret_secret[SBX_TOKEN_MAX])
{
    char id[SBX_ID_MAX], secret[SBX_TOKEN_MAX], hash[TOKEN_HASH_HEX], ttl[24];
    token_generate(id, secret);
    token_hash_hex(secret, hash);
    snprintf(ttl, sizeof ttl, "%lld", (long long)ttl_seconds);
    const char *p[] = { id, tenant_id, role_name(role), name ? name : "", hash, ttl };
    int rc = db_run(c, "INSERT INTO api_tokens (id, tenant_id, role, name, hash, expires_at) VALUES ($1, $2, $3, $4, $5, "
                       "CASE WHEN $6::bigint > 0 THEN now() + make_interval(secs => $6::bigint) END)",
                    6, p);
    if (rc == 0) {
        memcpy(ret_id, id, SBX_ID_MAX);
        memcpy(ret_secret, secret, SBX_TOKEN_MAX);
    }
    sodium_memzero(secret, sizeof secret);
    return rc;
}

int store_token_create(PGconn *c, const char *tenant, role_t role, const char *name, char ret_secret[SBX_TOKEN_MAX],
                       char *err, size_t errlen)
{
    char tenant_id[SBX_ID_MAX], id[SBX_ID_MAX];
    if (store_tenant_resolve(c, tenant, true, tenant_id) < 0) {
        snprintf(err, errlen, "creating tenant %s: %s", tenant, db_last_error());
        return SBX_EDB;
    }
    if (token_insert(c, tenant_id, role, name, 0, id, ret_secret) < 0) {
        snprintf(err, errlen, "storing the token: %s", db_last_error());
        return SBX_EDB;
    }
    return 0;
}

/* ---- tenants and tokens (admin API) ---- */

#define TENANT_COLS "tn.id, tn.name, " TS("tn.created_at") ", tn.policy::text"
#define TOKEN_COLS \
    "t.id, tn.name, t.role, t.name, " TS("t.created_at") ", " TS("t.expires_at") ", " TS("t.revoked_at")

static json_object *tenant_json(const PGresult *r, int row)
{
    json_object *o = json_object_new_object();
    jsonx_add_str(o, "id", db_get(r, row, 0));
    jsonx_add_str(o, "name", db_get(r, row, 1));
    jsonx_add_str(o, "created_at", db_get(r, row, 2));
    jsonx_add(o, "policy", PQnfields(r) > 3 ? parse_json_text(db_get(r, row, 3)) : json_object_new_object());
    return o;
}

static json_object *token_json(const PGresult *r, int row)
{
    json_object *o = json_object_new_object();
    jsonx_add_str(o, "id", db_get(r, row, 0));
    jsonx_add_str(o, "tenant", db_get(r, row, 1));
    jsonx_add_str(o, "role", db_get(r, row, 2));
    jsonx_add_str(o, "name", db_get(r, row, 3));
    jsonx_add_str(o, "created_at", db_get(r, row, 4));
    jsonx_add_str(o, "expires_at", db_get(r, row, 5));
    jsonx_add_str(o, "revoked_at", db_get(r, row, 6));
    return o;
}

int store_tenant_create(PGconn *c, const char *name, json_object **ret, api_error_t *err)
{
    char id[SBX_ID_MAX];
    ids_new("tnt", id);
    const char *p[] = { id, name };
    PGresult *r = db_exec(c, "INSERT INTO tenants (id, name) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING "
                             "RETURNING id, name, " TS("created_at") ", policy::text", 2, p);
    if (!r)
        return store_db_error(err);
    if (PQntuples(r) != 1) {
        PQclear(r);
        return api_error_set(err, API_CONFLICT, "tenant %s already exists", name);
    }
    *ret = json_object_new_object();
    jsonx_add(*ret, "tenant", tenant_json(r, 0));
    PQclear(r);
    return 0;
}

int store_tenant_list(PGconn *c, const char *scope, json_object **ret, api_error_t *err)
{
    const char *p[] = { scope };
    PGresult *r = db_exec(c, "SELECT " TENANT_COLS " FROM tenants tn WHERE ($1::text IS NULL OR tn.id = $1) "
                             "ORDER BY tn.name LIMIT 10000", 1, p);
    if (!r)
        return store_db_error(err);
    *ret = rows_object(r, "tenants", tenant_json);
    return 0;
}

int store_tenant_get(PGconn *c, const char *scope, const char *name, json_object **ret, api_error_t *err)
{
    const char *p[] = { scope, name };
    PGresult *r = db_exec(c, "SELECT " TENANT_COLS " FROM tenants tn WHERE ($1::text IS NULL OR tn.id = $1) "
                             "AND tn.name = $2", 2, p);
    if (!r)
        return store_db_error(err);
    if (PQntuples(r) != 1) {
        PQclear(r);
        return api_error_set(err, API_NOT_FOUND, "no tenant %.64s", name);
    }
    *ret = json_object_new_object();
    jsonx_add(*ret, "tenant", tenant_json(r, 0));
    PQclear(r);
    return 0;
}

static int token_load(PGconn *c, const char *id, json_object **ret)
{
    const char *p[] = { id };
    PGresult *r = db_exec(c, "SELECT " TOKEN_COLS " FROM api_tokens t JOIN tenants tn ON tn.id = t.tenant_id "
                             "WHERE t.id = $1", 1, p);
    if (!r)
        return SBX_EDB;
    if (PQntuples(r) != 1) {
        PQclear(r);
        return SBX_ENOTFOUND;
    }
    *ret = token_json(r, 0);
    PQclear(r);
    return 0;
}

int store_tenant_policy(PGconn *c, const char *tenant_id, policy_t *ret)
{
    const char *p[] = { tenant_id };
    policy_init(ret);
    PGresult *r = db_exec(c, "SELECT policy::text FROM tenants WHERE id = $1", 1, p);
    if (!r)
        return SBX_EDB;
    int rc = SBX_ENOTFOUND;
    if (PQntuples(r) == 1) {
        json_object *o = parse_json_text(db_get(r, 0, 0));
        /* A stored policy was validated on its way in; an unreadable one
         * (edited by hand) denies nothing rather than everything. */
        if (!o || policy_from_json(o, ret, NULL) < 0)
            policy_init(ret);
        if (o)
            json_object_put(o);
        rc = 0;
    }
    PQclear(r);
    return rc;
}

int store_tenant_set_policy(PGconn *c, const char *name, const policy_t *policy, json_object **ret, api_error_t *err)
{
    json_object *pj = policy_to_json(policy);
    char *text = jsonx_dump(pj);
    json_object_put(pj);
    const char *p[] = { name, text };
    PGresult *r = db_begin(c) < 0 ? NULL
                                  : db_exec(c, "UPDATE tenants tn SET policy = $2::jsonb WHERE name = $1 RETURNING "
                                               TENANT_COLS, 2, p);
    free(text);
    if (!r) {
        db_rollback(c);
        return store_db_error(err);
    }
    if (PQntuples(r) != 1) {
        PQclear(r);
        db_rollback(c);
        return api_error_set(err, API_NOT_FOUND, "no tenant %.64s", name);
    }
    json_object *t = tenant_json(r, 0);
    if (event_add(c, db_get(r, 0, 0), "tenant.policy", NULL, NULL, json_object_get(jsonx_get_obj(t, "policy"))) < 0 ||
        db_commit(c) < 0) {
        json_object_put(t);
        PQclear(r);
        db_rollback(c);
        return store_db_error(err);
    }
    PQclear(r);
    *ret = json_object_new_object();
    jsonx_add(*ret, "tenant", t);
    return 0;
}

int store_token_issue(PGconn *c, const char *tenant, role_t role, const char *name, int64_t ttl_seconds,
                      json_object **ret, char ret_secret[SBX_TOKEN_MAX], api_error_t *err)
{
    char tenant_id[SBX_ID_MAX], id[SBX_ID_MAX];
    int rc = store_tenant_resolve(c, tenant, false, tenant_id);
    if (rc == SBX_ENOTFOUND)
        return api_error_set(err, API_NOT_FOUND, "no tenant %.64s (create it first: sandbox tenants create)", tenant);
    if (rc < 0 || token_insert(c, tenant_id, role, name, ttl_seconds, id, ret_secret) < 0)
        return store_db_error(err);
    json_object *t = NULL;
    if (token_load(c, id, &t) < 0)
        return store_db_error(err);
    *ret = t;
    return 0;
}

int store_token_list(PGconn *c, const char *tenant, json_object **ret, api_error_t *err)
{
    const char *p[] = { tenant };
    PGresult *r = db_exec(c, "SELECT " TOKEN_COLS " FROM api_tokens t JOIN tenants tn ON tn.id = t.tenant_id "
                             "WHERE ($1::text IS NULL OR tn.name = $1) ORDER BY t.created_at LIMIT 10000", 1, p);
    if (!r)
        return store_db_error(err);
    *ret = rows_object(r, "tokens", token_json);
    return 0;
}

int store_token_revoke(PGconn *c, const char *id, json_object **ret, api_error_t *err)
{
    const char *p[] = { id };
    PGresult *r = db_exec(c, "UPDATE api_tokens SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1 RETURNING id",
                          1, p);
    if (!r)
        return store_db_error(err);
    bool found = PQntuples(r) == 1;
    PQclear(r);
    if (!found)
        return api_error_set(err, API_NOT_FOUND, "no token %.64s", id);
    json_object *t = NULL;
    if (token_load(c, id, &t) < 0)
        return store_db_error(err);
    *ret = json_object_new_object();
    jsonx_add(*ret, "token", t);
    return 0;
}

/* ---- client requests ---- */

/* When an operation with this idempotency key exists in the tenant:
 * returns 0 and its id/kind/hash; SBX_ENOTFOUND otherwise. */
static int idem_find(PGconn *c, const char *tenant_id, const char *key, char ret_op[SBX_ID_MAX],
                     char ret_sandbox[SBX_ID_MAX], char ret_kind[16], char ret_hash[80])
{
    const char *p[] = { tenant_id, key };
    PGresult *r = db_exec(c, "SELECT id, sandbox_id, kind, coalesce(request_hash, '') FROM operations "
                             "WHERE tenant_id = $1 AND idempotency_key = $2", 2, p);
    if (!r)
        return SBX_EDB;
    int rc = SBX_ENOTFOUND;
    if (PQntuples(r) == 1) {
        snprintf(ret_op, SBX_ID_MAX, "%s", db_get(r, 0, 0));
        snprintf(ret_sandbox, SBX_ID_MAX, "%s", db_get(r, 0, 1));
        snprintf(ret_kind, 16, "%s", db_get(r, 0, 2));
        snprintf(ret_hash, 80, "%s", db_get(r, 0, 3));
        rc = 0;
    }
    PQclear(r);
    return rc;
}

/* Replays an idempotent request: the original operation when kind and body
 * match, 409 otherwise. Returns 1 when replayed, 0 when no such key. */
static int idem_replay(PGconn *c, const char *tenant_id, const char *key, const char *kind, const char *hash,
                       bool with_sandbox, json_object **ret, api_error_t *err)
{
    char op_id[SBX_ID_MAX], sbx_id[SBX_ID_MAX], okind[16], ohash[80];
    int rc = idem_find(c, tenant_id, key, op_id, sbx_id, okind, ohash);
    if (rc == SBX_ENOTFOUND)
        return 0;
    if (rc < 0)
        return store_db_error(err);
    if (strcmp(okind, kind) != 0 || strcmp(ohash, hash) != 0)
        return api_error_set(err, API_CONFLICT,
                             "Idempotency-Key \"%.64s\" was already used for a different %s request (operation %s)",
                             key, okind, op_id);
    json_object *op = NULL, *sbx = NULL;
    if (load_op(c, op_id, &op) < 0)
        return store_db_error(err);
    json_object *o = json_object_new_object();
    if (with_sandbox) {
        if (load_sandbox(c, sbx_id, &sbx) < 0) {
            json_object_put(op);
            json_object_put(o);
            return store_db_error(err);
        }
        jsonx_add(o, "sandbox", sbx);
    }
    jsonx_add(o, "operation", op);
    *ret = o;
    return 1;
}

int store_sandbox_create(PGconn *c, const store_limits_t *lim, const create_req_t *req, json_object **ret,
                         bool *ret_replayed, api_error_t *err)
{
    char sbx_id[SBX_ID_MAX], op_id[SBX_ID_MAX], deadline[24], cpu[24], mem[24], ttl[24];
    *ret_replayed = false;
    if (req->idempotency_key) {
        int rr = idem_replay(c, req->tenant_id, req->idempotency_key, "create", req->request_hash, true, ret, err);
        if (rr != 0) {
            *ret_replayed = rr > 0;
            return rr > 0 ? 0 : rr;
        }
    }
    ids_new("sbx", sbx_id);
    ids_new("op", op_id);
    snprintf(deadline, sizeof deadline, "%lld", (long long)lim->deadline_seconds);
    snprintf(cpu, sizeof cpu, "%lld", (long long)req->spec->cpu_millis);
    snprintf(mem, sizeof mem, "%lld", (long long)req->spec->memory_mib);
    snprintf(ttl, sizeof ttl, "%lld", (long long)req->spec->ttl_seconds);
    json_object *sj = spec_to_json(req->spec);
    char *spec_text = jsonx_dump(sj);
    json_object_put(sj);
    if (!spec_text)
        return api_error_set(err, API_INTERNAL, "out of memory");

    if (db_begin(c) < 0)
        goto db_fail;
    if (req->policy) {
        /* Quotas: the tenant row lock serializes concurrent creates of one
         * tenant, so no race can pass a quota. */
        const char *pq[] = { req->tenant_id };
        PGresult *q = db_exec(c, "SELECT 1 FROM tenants WHERE id = $1 FOR UPDATE", 1, pq);
        PQclear(q);
        if (!q)
            goto db_fail;
        q = db_exec(c, "SELECT count(*), coalesce(sum(cpu_millis), 0), coalesce(sum(memory_mib), 0) FROM sandboxes "
                       "WHERE tenant_id = $1 AND desired_state = 'running' AND phase NOT IN ('deleted', 'failed', 'lost')",
                    1, pq);
        if (!q)
            goto db_fail;
        long long n = db_get_ll(q, 0, 0), tcpu = db_get_ll(q, 0, 1), tmem = db_get_ll(q, 0, 2);
        PQclear(q);
        const policy_t *pol = req->policy;
        int denied = 0;
        if (pol->max_sandboxes && n + 1 > pol->max_sandboxes)
            denied = api_error_set(err, API_QUOTA_EXCEEDED, "tenant quota max_sandboxes = %lld: %lld sandboxes live",
                                   (long long)pol->max_sandboxes, n);
        else if (pol->max_total_cpu_millis && tcpu + req->spec->cpu_millis > pol->max_total_cpu_millis)
            denied = api_error_set(err, API_QUOTA_EXCEEDED,
                                   "tenant quota max_total_cpu_millis = %lld: %lld in use, %lld asked",
                                   (long long)pol->max_total_cpu_millis, tcpu, (long long)req->spec->cpu_millis);
        else if (pol->max_total_memory_mib && tmem + req->spec->memory_mib > pol->max_total_memory_mib)
            denied = api_error_set(err, API_QUOTA_EXCEEDED,
                                   "tenant quota max_total_memory_mib = %lld: %lld MiB in use, %lld asked",
                                   (long long)pol->max_total_memory_mib, tmem, (long long)req->spec->memory_mib);
        if (denied) {
            db_rollback(c);
            free(spec_text);
            return SBX_EINVAL;
        }
    }
    char *class_text = req->classification ? jsonx_dump(req->classification) : NULL;
    const char *ps[] = { sbx_id, req->tenant_id, spec_text, isolation_name(req->isolation), cpu, mem, ttl,
                         req->created_by, class_text };
    int ins = db_run(c, "INSERT INTO sandboxes (id, tenant_id, spec, desired_state, phase, isolation, cpu_millis, "
                        "memory_mib, ttl_seconds, created_by, classification) VALUES ($1, $2, $3::jsonb, 'running', "
                        "'pending', $4, $5, $6, $7, $8, $9::jsonb)", 9, ps);
    free(class_text);
    if (ins < 0)
        goto db_fail;
    const char *po[] = { op_id, req->tenant_id, sbx_id, req->idempotency_key, req->request_hash, spec_text, deadline,
                         req->created_by };
    if (db_run(c, "INSERT INTO operations (id, tenant_id, sandbox_id, kind, state, idempotency_key, request_hash, "
                  "request, deadline, created_by) VALUES ($1, $2, $3, 'create', 'pending', $4, $5, $6::jsonb, "
                  "now() + make_interval(secs => $7::bigint), $8)", 8, po) < 0) {
        if (req->idempotency_key && db_last_unique_violation()) {
            /* A concurrent request with the same key won: answer with its operation. */
            db_rollback(c);
            free(spec_text);
            int rr = idem_replay(c, req->tenant_id, req->idempotency_key, "create", req->request_hash, true, ret,
                                 err);
            *ret_replayed = rr > 0;
            return rr > 0 ? 0 : (rr < 0 ? rr : store_db_error(err));
        }
        goto db_fail;
    }
    json_object *sd = json_object_new_object();
    jsonx_add_str(sd, "image", req->spec->image);
    jsonx_add_str(sd, "isolation", isolation_name(req->isolation));
    jsonx_add_str(sd, "network", net_mode_name(req->spec->network));
    jsonx_add_int(sd, "cpu_millis", req->spec->cpu_millis);
    jsonx_add_int(sd, "memory_mib", req->spec->memory_mib);
    jsonx_add_int(sd, "ttl_seconds", req->spec->ttl_seconds);
    if (event_add(c, req->tenant_id, "sandbox.pending", sbx_id, NULL, sd) < 0)
        goto db_fail;
    json_object *ed = json_object_new_object();
    jsonx_add_str(ed, "kind", "create");
    jsonx_add_str(ed, "to", "pending");
    if (event_add(c, req->tenant_id, "operation.pending", sbx_id, op_id, ed) < 0 || db_commit(c) < 0)
        goto db_fail;
    free(spec_text);
    spec_text = NULL;

    json_object *sbx = NULL, *op = NULL;
    if (load_sandbox(c, sbx_id, &sbx) < 0)
        return store_db_error(err);
    if (load_op(c, op_id, &op) < 0) {
        json_object_put(sbx);
        return store_db_error(err);
    }
    *ret = json_object_new_object();
    jsonx_add(*ret, "sandbox", sbx);
    jsonx_add(*ret, "operation", op);
    return 0;
db_fail:
    free(spec_text);
    store_db_error(err);
    db_rollback(c);
    return SBX_EDB;
}

/* Locks the sandbox row in scope. Returns 0 with tenant id and phase. */
static int sandbox_lock(PGconn *c, const char *scope, const char *sandbox_id, char ret_tenant[SBX_ID_MAX],
                        char ret_phase[24], char ret_desired[16], api_error_t *err)
{
    const char *p[] = { sandbox_id, scope };
    PGresult *r = db_exec(c, "SELECT tenant_id, phase, desired_state FROM sandboxes "
                             "WHERE id = $1 AND ($2::text IS NULL OR tenant_id = $2) FOR UPDATE", 2, p);
    if (!r)
        return store_db_error(err);
    if (PQntuples(r) != 1) {
        PQclear(r);
        return api_error_set(err, API_NOT_FOUND, "no sandbox %.64s", sandbox_id);
    }
    snprintf(ret_tenant, SBX_ID_MAX, "%s", db_get(r, 0, 0));
    snprintf(ret_phase, 24, "%s", db_get(r, 0, 1));
    snprintf(ret_desired, 16, "%s", db_get(r, 0, 2));
    PQclear(r);
    return 0;
}

/* Inside a transaction that holds the sandbox row: records the wish to
 * delete, cancels a create that has not been placed, and adds a delete
 * operation (or returns the open one). ret_op gets its id. */
static int sandbox_request_delete(PGconn *c, const store_limits_t *lim, const char *tenant_id, const char *sandbox_id,
                                  const char *idem, const char *hash, const char *created_by, char ret_op[SBX_ID_MAX])
{
    const char *p[] = { sandbox_id };
    PGresult *r = db_exec(c, "SELECT id FROM operations WHERE sandbox_id = $1 AND kind = 'delete' "
                             "AND state IN ('pending', 'admitted', 'leased', 'running', 'succeeded') "
                             "ORDER BY created_at DESC LIMIT 1", 1, p);
    if (!r)
        return SBX_EDB;
    if (PQntuples(r) == 1) {
        snprintf(ret_op, SBX_ID_MAX, "%s", db_get(r, 0, 0));
        PQclear(r);
        return 0;
    }
    PQclear(r);
    if (db_run(c, "UPDATE sandboxes SET desired_state = 'deleted', updated_at = now() WHERE id = $1", 1, p) < 0)
        return SBX_EDB;
    /* A create nobody has taken yet is simply cancelled. */
    r = db_exec(c, "SELECT id, state FROM operations WHERE sandbox_id = $1 AND kind = 'create' "
                   "AND state IN ('pending', 'admitted')", 1, p);
    if (!r)
        return SBX_EDB;
    for (int i = 0; i < PQntuples(r); i++) {
        op_state_t from;
        op_state_parse(db_get(r, i, 1), &from);
        const char *x[] = { "cancelled", "the sandbox was deleted before it was placed" };
        int rc = op_cas(c, db_get(r, i, 0), from, OP_CANCELLED, "error_code = $4, error_message = $5", 2, x, NULL);
        if (rc == SBX_EDB) {
            PQclear(r);
            return SBX_EDB;
        }
    }
    PQclear(r);
    char op_id[SBX_ID_MAX], deadline[24];
    ids_new("op", op_id);
    snprintf(deadline, sizeof deadline, "%lld", (long long)lim->deadline_seconds);
    const char *po[] = { op_id, tenant_id, sandbox_id, idem, hash, deadline, created_by };
    if (db_run(c, "INSERT INTO operations (id, tenant_id, sandbox_id, kind, state, idempotency_key, request_hash, "
                  "deadline, created_by) VALUES ($1, $2, $3, 'delete', 'pending', $4, $5, "
                  "now() + make_interval(secs => $6::bigint), $7)", 7, po) < 0)
        return SBX_EDB;
    json_object *ed = json_object_new_object();
    jsonx_add_str(ed, "kind", "delete");
    jsonx_add_str(ed, "to", "pending");
    if (created_by && (strcmp(created_by, "ttl") == 0 || strcmp(created_by, "retry") == 0))
        jsonx_add_str(ed, "reason", created_by);
    if (event_add(c, tenant_id, "operation.pending", sandbox_id, op_id, ed) < 0)
        return SBX_EDB;
    memcpy(ret_op, op_id, SBX_ID_MAX);
    return 0;
}

int store_sandbox_delete(PGconn *c, const store_limits_t *lim, const char *scope, const char *sandbox_id,
                         const char *idempotency_key, const char *request_hash, const char *created_by,
                         json_object **ret, api_error_t *err)
{
    char tenant_id[SBX_ID_MAX], phase[24], desired[16], op_id[SBX_ID_MAX];
    if (idempotency_key && scope) {
        int rr = idem_replay(c, scope, idempotency_key, "delete", request_hash, false, ret, err);
        if (rr != 0)
            return rr > 0 ? 0 : rr;
    }
    if (db_begin(c) < 0)
        return store_db_error(err);
    int rc = sandbox_lock(c, scope, sandbox_id, tenant_id, phase, desired, err);
    if (rc < 0) {
        db_rollback(c);
        return rc;
    }
    if (sandbox_request_delete(c, lim, tenant_id, sandbox_id, idempotency_key, request_hash, created_by, op_id) < 0 ||
        db_commit(c) < 0) {
        store_db_error(err);
        db_rollback(c);
        return SBX_EDB;
    }
    json_object *op = NULL;
    if (load_op(c, op_id, &op) < 0)
        return store_db_error(err);
    *ret = json_object_new_object();
    jsonx_add(*ret, "operation", op);
    return 0;
}

int store_exec_create(PGconn *c, const store_limits_t *lim, const char *scope, const char *sandbox_id,
                      json_object *exec_request, const char *idempotency_key, const char *request_hash,
                      const char *created_by, json_object **ret, api_error_t *err)
{
    char tenant_id[SBX_ID_MAX], phase[24], desired[16], op_id[SBX_ID_MAX], deadline[24];
    if (idempotency_key && scope) {
        int rr = idem_replay(c, scope, idempotency_key, "exec", request_hash, false, ret, err);
        if (rr != 0)
            return rr > 0 ? 0 : rr;
    }
    if (db_begin(c) < 0)
        return store_db_error(err);
    int rc = sandbox_lock(c, scope, sandbox_id, tenant_id, phase, desired, err);
    if (rc < 0) {
        db_rollback(c);
        return rc;
    }
    if (strcmp(phase, "running") != 0 || strcmp(desired, "running") != 0) {
        /* Say why a failed sandbox stopped. */
        char why[200] = "";
        PGresult *f = db_exec(c, "SELECT failure->>'reason', failure->>'exit_code' FROM sandboxes "
                                 "WHERE id = $1 AND failure IS NOT NULL", 1, (const char *const[]){ sandbox_id });
        if (f && PQntuples(f) == 1 && db_get(f, 0, 0))
            snprintf(why, sizeof why, " (%.60s%s%.20s)", db_get(f, 0, 0), db_get(f, 0, 1) ? ", exit code " : "",
                     db_get(f, 0, 1) ? db_get(f, 0, 1) : "");
        PQclear(f);
        db_rollback(c);
        return api_error_set(err, API_CONFLICT, "sandbox %s is %s%s%s; exec needs a running sandbox", sandbox_id,
                             phase, why, strcmp(desired, "deleted") == 0 ? " and being deleted" : "");
    }
    policy_t pol;
    if (store_tenant_policy(c, tenant_id, &pol) < 0) {
        db_rollback(c);
        return store_db_error(err);
    }
    int64_t asked = 0;
    jsonx_get_int(exec_request, "max_output_bytes", &asked);
    if (pol.exec_output_max_bytes && asked > pol.exec_output_max_bytes) {
        long long cap = (long long)pol.exec_output_max_bytes;
        db_rollback(c);
        policy_release(&pol);
        return api_error_set(err, API_POLICY_DENIED,
                             "max_output_bytes %lld is over the tenant policy exec_output_max_bytes = %lld",
                             (long long)asked, cap);
    }
    if (asked <= 0 && (pol.exec_output_default_bytes || pol.exec_output_max_bytes)) {
        int64_t d = pol.exec_output_default_bytes ? pol.exec_output_default_bytes : lim->exec_output_default;
        if (pol.exec_output_max_bytes && d > pol.exec_output_max_bytes)
            d = pol.exec_output_max_bytes;
        jsonx_add_int(exec_request, "max_output_bytes", d);
    }
    policy_release(&pol);
    ids_new("op", op_id);
    snprintf(deadline, sizeof deadline, "%lld", (long long)lim->deadline_seconds);
    char *req_text = jsonx_dump(exec_request);
    const char *po[] = { op_id, tenant_id, sandbox_id, idempotency_key, request_hash, req_text, deadline, created_by };
    if (db_run(c, "INSERT INTO operations (id, tenant_id, sandbox_id, kind, state, idempotency_key, request_hash, "
                  "request, deadline, created_by) VALUES ($1, $2, $3, 'exec', 'pending', $4, $5, $6::jsonb, "
                  "now() + make_interval(secs => $7::bigint), $8)", 8, po) < 0) {
        free(req_text);
        bool dup = idempotency_key && db_last_unique_violation();
        db_rollback(c);
        if (dup) {
            int rr = idem_replay(c, tenant_id, idempotency_key, "exec", request_hash, false, ret, err);
            return rr > 0 ? 0 : (rr < 0 ? rr : store_db_error(err));
        }
        return store_db_error(err);
    }
    free(req_text);
    json_object *ed = json_object_new_object();
    jsonx_add_str(ed, "kind", "exec");
    jsonx_add_str(ed, "to", "pending");
    if (event_add(c, tenant_id, "operation.pending", sandbox_id, op_id, ed) < 0 || db_commit(c) < 0) {
        store_db_error(err);
        db_rollback(c);
        return SBX_EDB;
    }
    json_object *op = NULL;
    if (load_op(c, op_id, &op) < 0)
        return store_db_error(err);
    *ret = json_object_new_object();
    jsonx_add(*ret, "operation", op);
    return 0;
}

static char *text_array(const char *const *ids, int n);

/* Adds "history":[{"state","at"}…] (from the events table, oldest first) to
 * each operation object of the array. */
static int attach_history(PGconn *c, json_object *ops)
{
    size_t n = json_object_array_length(ops);
    if (n == 0)
        return 0;
    const char **ids = calloc(n, sizeof *ids);
    if (!ids)
        return SBX_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        ids[i] = jsonx_get_str(json_object_array_get_idx(ops, i), "id");
        jsonx_add(json_object_array_get_idx(ops, i), "history", json_object_new_array());
    }
    char *arr = text_array(ids, (int)n);
    if (!arr) {
        free(ids);
        return SBX_ENOMEM;
    }
    const char *p[] = { arr };
    PGresult *r = db_exec(c, "SELECT operation_id, coalesce(data->>'to', substr(kind, 11)), " TS("ts")
                             " FROM events WHERE operation_id = ANY($1::text[]) AND kind LIKE 'operation.%' "
                             "ORDER BY id", 1, p);
    free(arr);
    if (!r) {
        free(ids);
        return SBX_EDB;
    }
    for (int k = 0; k < PQntuples(r); k++) {
        for (size_t i = 0; i < n; i++) {
            if (!ids[i] || strcmp(ids[i], db_get(r, k, 0)) != 0)
                continue;
            json_object *h = json_object_new_object();
            jsonx_add_str(h, "state", db_get(r, k, 1));
            jsonx_add_str(h, "at", db_get(r, k, 2));
            json_object_array_add(jsonx_get_arr(json_object_array_get_idx(ops, i), "history"), h);
        }
    }
    PQclear(r);
    free(ids);
    return 0;
}

int store_sandbox_get(PGconn *c, const char *scope, const char *sandbox_id, json_object **ret, api_error_t *err)
{
    const char *p[] = { sandbox_id, scope };
    PGresult *r = db_exec(c, "SELECT " SANDBOX_COLS SANDBOX_FROM "WHERE s.id = $1 AND ($2::text IS NULL OR s.tenant_id = $2)",
                          2, p);
    if (!r)
        return store_db_error(err);
    if (PQntuples(r) != 1) {
        PQclear(r);
        return api_error_set(err, API_NOT_FOUND, "no sandbox %.64s", sandbox_id);
    }
    json_object *sbx = sandbox_json(r, 0);
    PQclear(r);
    r = db_exec(c, "SELECT " OP_COLS " FROM operations o WHERE o.sandbox_id = $1 ORDER BY o.created_at DESC LIMIT 20",
                1, p);
    if (!r) {
        json_object_put(sbx);
        return store_db_error(err);
    }
    json_object *ops = json_object_new_array();
    for (int i = 0; i < PQntuples(r); i++)
        json_object_array_add(ops, op_json(r, i));
    PQclear(r);
    if (attach_history(c, ops) < 0) {
        json_object_put(ops);
        json_object_put(sbx);
        return store_db_error(err);
    }
    *ret = json_object_new_object();
    jsonx_add(*ret, "sandbox", sbx);
    jsonx_add(*ret, "operations", ops);
    return 0;
}

int store_sandbox_list(PGconn *c, const char *scope, const char *tenant_name, bool include_deleted, int limit,
                       json_object **ret, api_error_t *err)
{
    char lim[16];
    snprintf(lim, sizeof lim, "%d", limit);
    const char *p[] = { scope, tenant_name, include_deleted ? "t" : "f", lim };
    PGresult *r = db_exec(c, "SELECT " SANDBOX_COLS SANDBOX_FROM
                             "WHERE ($1::text IS NULL OR s.tenant_id = $1) AND ($2::text IS NULL OR tn.name = $2) "
                             "AND ($3::boolean OR s.phase <> 'deleted') ORDER BY s.created_at DESC LIMIT $4::int",
                          4, p);
    if (!r)
        return store_db_error(err);
    *ret = rows_object(r, "sandboxes", sandbox_json);
    return 0;
}

int store_operation_get(PGconn *c, const char *scope, const char *op_id, json_object **ret, bool *ret_terminal,
                        api_error_t *err)
{
    const char *p[] = { op_id, scope };
    PGresult *r = db_exec(c, "SELECT " OP_COLS " FROM operations o WHERE o.id = $1 AND ($2::text IS NULL OR o.tenant_id = $2)",
                          2, p);
    if (!r)
        return store_db_error(err);
    if (PQntuples(r) != 1) {
        PQclear(r);
        return api_error_set(err, API_NOT_FOUND, "no operation %.64s", op_id);
    }
    op_state_t st = OP_PENDING;
    op_state_parse(db_get(r, 0, 2), &st);
    if (ret_terminal)
        *ret_terminal = op_state_terminal(st);
    json_object *one = json_object_new_array();
    json_object_array_add(one, op_json(r, 0));
    PQclear(r);
    if (attach_history(c, one) < 0) {
        json_object_put(one);
        return store_db_error(err);
    }
    *ret = json_object_new_object();
    jsonx_add(*ret, "operation", json_object_get(json_object_array_get_idx(one, 0)));
    json_object_put(one);
    return 0;
}

/* Builds a text[] literal {"a","b"} from ids (ids contain only [a-z0-9_]). */
static char *text_array(const char *const *ids, int n)
{
    size_t len = 3;
    for (int i = 0; i < n; i++)
        len += strlen(ids[i]) + 3;
    char *s = malloc(len);
    if (!s)
        return NULL;
    size_t o = 0;
    s[o++] = '{';
    for (int i = 0; i < n; i++) {
        o += (size_t)snprintf(s + o, len - o, "%s\"%s\"", i ? "," : "", ids[i]);
    }
    s[o++] = '}';
    s[o] = '\0';
    return s;
}

/* Sets ret_flags[i] for each ids[i] the query (taking $1 text[]) returns. */
static int flag_ids(PGconn *c, const char *sql, const char *const *ids, int n, bool *ret_flags)
{
    for (int i = 0; i < n; i++)
        ret_flags[i] = false;
    if (n == 0)
        return 0;
    char *arr = text_array(ids, n);
    if (!arr)
        return SBX_ENOMEM;
    const char *p[] = { arr };
    PGresult *r = db_exec(c, sql, 1, p);
    free(arr);
    if (!r)
        return SBX_EDB;
    for (int k = 0; k < PQntuples(r); k++)
        for (int i = 0; i < n; i++)
            if (strcmp(ids[i], db_get(r, k, 0)) == 0)
                ret_flags[i] = true;
    PQclear(r);
    return 0;
}

int store_operations_terminal(PGconn *c, const char *const *ids, int n, bool *ret_flags)
{
    return flag_ids(c, "SELECT id FROM operations WHERE id = ANY($1::text[]) "
                       "AND state IN ('succeeded', 'failed', 'cancelled')", ids, n, ret_flags);
}

int store_workers_with_leases(PGconn *c, const char *const *ids, int n, bool *ret_flags)
{
    return flag_ids(c, "SELECT DISTINCT lease_worker_id FROM operations WHERE lease_worker_id = ANY($1::text[]) "
                       "AND state = 'leased'", ids, n, ret_flags);
}

/* ---- workers ---- */

#define WORKER_COLS \
    "id, name, labels::text, array_to_json(isolation)::text, runtime, cpu_millis, memory_mib, slots, " \
    "alloc_cpu_millis, alloc_memory_mib, alloc_slots, version, state, " TS("last_heartbeat") ", " TS("created_at") \
    ", networks::text, probes::text, jsonb_array_length(images), route_address"

static json_object *worker_json(const PGresult *r, int row)
{
    json_object *o = json_object_new_object();
    jsonx_add_str(o, "id", db_get(r, row, 0));
    jsonx_add_str(o, "name", db_get(r, row, 1));
    jsonx_add(o, "labels", parse_json_text(db_get(r, row, 2)));
    jsonx_add(o, "isolation", parse_json_text(db_get(r, row, 3)));
    jsonx_add_str(o, "runtime", db_get(r, row, 4));
    json_object *cap = json_object_new_object();
    jsonx_add_int(cap, "cpu_millis", db_get_ll(r, row, 5));
    jsonx_add_int(cap, "memory_mib", db_get_ll(r, row, 6));
    jsonx_add_int(cap, "slots", db_get_ll(r, row, 7));
    jsonx_add(o, "capacity", cap);
    json_object *al = json_object_new_object();
    jsonx_add_int(al, "cpu_millis", db_get_ll(r, row, 8));
    jsonx_add_int(al, "memory_mib", db_get_ll(r, row, 9));
    jsonx_add_int(al, "slots", db_get_ll(r, row, 10));
    jsonx_add(o, "allocated", al);
    jsonx_add_str(o, "version", db_get(r, row, 11));
    jsonx_add_str(o, "state", db_get(r, row, 12));
    jsonx_add_str(o, "last_heartbeat", db_get(r, row, 13));
    jsonx_add_str(o, "created_at", db_get(r, row, 14));
    jsonx_add(o, "networks", parse_json_text(db_get(r, row, 15)));
    jsonx_add(o, "probes", parse_json_text(db_get(r, row, 16)));
    jsonx_add_int(o, "images_present", db_get_ll(r, row, 17));
    if (!PQgetisnull(r, row, 18))
        jsonx_add_str(o, "route_address", db_get(r, row, 18));
    return o;
}

#define WORKER_MAX_IMAGES 512

/* The images a worker reports: an array of at most WORKER_MAX_IMAGES
 * names. Returns the JSON text to store (malloc'd), NULL when absent, or
 * sets err. */
static int worker_images_text(json_object *body, char **ret, api_error_t *err)
{
    json_object *a = NULL;
    *ret = NULL;
    if (!json_object_object_get_ex(body, "images", &a) || json_object_is_type(a, json_type_null))
        return 0;
    if (!json_object_is_type(a, json_type_array) || json_object_array_length(a) > WORKER_MAX_IMAGES)
        return api_error_set(err, API_INVALID_ARGUMENT, "images must be an array of at most %d names",
                             WORKER_MAX_IMAGES);
    for (size_t i = 0; i < json_object_array_length(a); i++) {
        json_object *e = json_object_array_get_idx(a, i);
        if (!json_object_is_type(e, json_type_string) || json_object_get_string_len(e) == 0 ||
            json_object_get_string_len(e) > SBX_MAX_IMAGE_BYTES)
            return api_error_set(err, API_INVALID_ARGUMENT, "images[%zu] must be an image name", i);
    }
    *ret = jsonx_dump(a);
    return *ret ? 0 : api_error_set(err, API_INTERNAL, "out of memory");
}

/* The register body's "networks" ({"class":["mode",…]}, only offered
 * classes) and "probes" ({"class":"text"}), normalised. A worker that says
 * nothing about networks offers only "none": it is never assumed to
 * isolate a network it did not describe. */
static int worker_caps_text(json_object *body, unsigned offered, char **ret_networks, char **ret_probes,
                            api_error_t *err)
{
    json_object *nets = NULL, *probes = NULL;
    json_object_object_get_ex(body, "networks", &nets);
    json_object_object_get_ex(body, "probes", &probes);
    if (nets && !json_object_is_type(nets, json_type_null) && !json_object_is_type(nets, json_type_object))
        return api_error_set(err, API_INVALID_ARGUMENT, "networks must be an object of class: [modes]");
    if (probes && !json_object_is_type(probes, json_type_null) && !json_object_is_type(probes, json_type_object))
        return api_error_set(err, API_INVALID_ARGUMENT, "probes must be an object of class: text");
    json_object *n = json_object_new_object(), *p = json_object_new_object();
    for (int c = ISO_CONTAINER; c <= ISO_MICROVM; c++) {
        const char *cname = isolation_name((isolation_t)c);
        json_object *v;
        if (probes && json_object_is_type(probes, json_type_object) && json_object_object_get_ex(probes, cname, &v)) {
            if (!json_object_is_type(v, json_type_string) || json_object_get_string_len(v) > 512) {
                json_object_put(n);
                json_object_put(p);
                return api_error_set(err, API_INVALID_ARGUMENT, "probes.%s must be a text of at most 512 bytes",
                                     cname);
            }
            jsonx_add(p, cname, json_object_get(v));
        }
        if (!(offered & (1u << c)))
            continue;
        unsigned modes = 1u << NET_NONE;
        if (nets && json_object_is_type(nets, json_type_object) && json_object_object_get_ex(nets, cname, &v)) {
            modes = 0;
            size_t len = json_object_is_type(v, json_type_array) ? json_object_array_length(v) : 0;
            for (size_t i = 0; i < len; i++) {
                json_object *e = json_object_array_get_idx(v, i);
                net_mode_t m;
                if (!json_object_is_type(e, json_type_string) || net_mode_parse(json_object_get_string(e), &m) < 0)
                    len = 0, modes = 0;
                else
                    modes |= 1u << m;
            }
            if (!json_object_is_type(v, json_type_array) || (len == 0 && json_object_array_length(v) > 0)) {
                json_object_put(n);
                json_object_put(p);
                return api_error_set(err, API_INVALID_ARGUMENT, "networks.%s must list none, restricted or open",
                                     cname);
            }
        }
        json_object *a = json_object_new_array();
        for (int m = NET_NONE; m <= NET_OPEN; m++)
            if (modes & (1u << m))
                json_object_array_add(a, json_object_new_string(net_mode_name((net_mode_t)m)));
        jsonx_add(n, cname, a);
    }
    *ret_networks = jsonx_dump(n);
    *ret_probes = jsonx_dump(p);
    json_object_put(n);
    json_object_put(p);
    return 0;
}

static bool worker_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > SBX_MAX_NAME_BYTES)
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || strchr("._-", *s)))
            return false;
    return true;
}

/* "host:port" or "[v6]:port" a controller can connect to; NULL when absent. */
static int route_address_check(json_object *body, const char **ret, api_error_t *err)
{
    *ret = NULL;
    json_object *v = NULL;
    if (!json_object_object_get_ex(body, "route_address", &v) || json_object_is_type(v, json_type_null))
        return 0;
    const char *a = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
    const char *colon = a ? strrchr(a, ':') : NULL;
    char *end = NULL;
    long port = colon ? strtol(colon + 1, &end, 10) : 0;
    bool ok = a && colon && colon != a && strlen(a) <= 255 && *end == '\0' && port >= 1 && port <= 65535;
    for (const char *p = a; ok && *p; p++)
        ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || strchr(".-:[]", *p);
    if (!ok)
        return api_error_set(err, API_INVALID_ARGUMENT, "route_address must be host:port");
    *ret = a;
    return 0;
}

int store_worker_register(PGconn *c, json_object *body, const char *token_id, json_object **ret, api_error_t *err)
{
    const char *name = jsonx_get_str(body, "name");
    const char *runtime = jsonx_get_str(body, "runtime");
    json_object *iso = jsonx_get_arr(body, "isolation");
    json_object *cap = jsonx_get_obj(body, "capacity");
    json_object *labels = jsonx_get_obj(body, "labels");
    const char *version = jsonx_get_str(body, "version");
    int64_t cpu = 0, mem = 0, slots = 0;
    if (!name || !worker_name_ok(name))
        return api_error_set(err, API_INVALID_ARGUMENT, "name must be 1 to 128 letters, digits, . _ or -");
    if (!runtime || strlen(runtime) > 32)
        return api_error_set(err, API_INVALID_ARGUMENT, "runtime is required");
    if (!iso || json_object_array_length(iso) == 0 || json_object_array_length(iso) > 3)
        return api_error_set(err, API_INVALID_ARGUMENT, "isolation must list 1 to 3 classes");
    if (!cap || !jsonx_get_int(cap, "cpu_millis", &cpu) || !jsonx_get_int(cap, "memory_mib", &mem) ||
        !jsonx_get_int(cap, "slots", &slots) || cpu < 0 || mem < 0 || slots < 0 || cpu > 100000000 ||
        mem > 1000000000 || slots > 100000)
        return api_error_set(err, API_INVALID_ARGUMENT, "capacity needs cpu_millis, memory_mib and slots in range");
    char iso_lit[64] = "{";
    unsigned offered = 0;
    for (size_t i = 0; i < json_object_array_length(iso); i++) {
        json_object *e = json_object_array_get_idx(iso, i);
        isolation_t cls;
        if (!json_object_is_type(e, json_type_string) || isolation_parse(json_object_get_string(e), &cls) < 0)
            return api_error_set(err, API_INVALID_ARGUMENT, "isolation classes are container, gvisor, microvm");
        size_t l = strlen(iso_lit);
        snprintf(iso_lit + l, sizeof iso_lit - l, "%s%s", i ? "," : "", isolation_name(cls));
        offered |= 1u << cls;
    }
    size_t l = strlen(iso_lit);
    snprintf(iso_lit + l, sizeof iso_lit - l, "}");
    const char *route_address = NULL;
    if (route_address_check(body, &route_address, err) < 0)
        return SBX_EINVAL;
    char *nets_text = NULL, *probes_text = NULL, *images_text = NULL;
    if (worker_caps_text(body, offered, &nets_text, &probes_text, err) < 0)
        return SBX_EINVAL;
    if (worker_images_text(body, &images_text, err) < 0) {
        free(nets_text);
        free(probes_text);
        return SBX_EINVAL;
    }
    kv_list_t lab;
    if (kv_list_from_json(labels, "labels", false, SBX_MAX_LABELS, &lab, err) < 0) {
        free(nets_text);
        free(probes_text);
        free(images_text);
        return SBX_EINVAL;
    }
    json_object *lj = kv_list_to_json(&lab);
    kv_list_release(&lab);
    char *labels_text = jsonx_dump(lj);
    json_object_put(lj);
    char id[SBX_ID_MAX], cpus[24], mems[24], slotss[24];
    ids_new("wrk", id);
    snprintf(cpus, sizeof cpus, "%lld", (long long)cpu);
    snprintf(mems, sizeof mems, "%lld", (long long)mem);
    snprintf(slotss, sizeof slotss, "%lld", (long long)slots);
    const char *p[] = { id, name, labels_text, iso_lit, runtime, cpus, mems, slotss, version ? version : "",
                        nets_text, probes_text, images_text ? images_text : "[]", route_address, token_id };
    PGresult *r = db_begin(c) < 0 ? NULL : db_exec(c,
                          "INSERT INTO workers (id, name, labels, isolation, runtime, cpu_millis, memory_mib, slots, "
                          "version, state, networks, probes, images, route_address, token_id) VALUES ($1, $2, "
                          "$3::jsonb, $4::text[], $5, $6, $7, $8, $9, 'ready', $10::jsonb, $11::jsonb, $12::jsonb, "
                          "$13, $14) "
                          "ON CONFLICT (name) DO UPDATE SET labels = EXCLUDED.labels, isolation = EXCLUDED.isolation, "
                          "runtime = EXCLUDED.runtime, cpu_millis = EXCLUDED.cpu_millis, "
                          "memory_mib = EXCLUDED.memory_mib, slots = EXCLUDED.slots, version = EXCLUDED.version, "
                          "networks = EXCLUDED.networks, probes = EXCLUDED.probes, images = EXCLUDED.images, "
                          "route_address = EXCLUDED.route_address, token_id = EXCLUDED.token_id, "
                          "state = CASE WHEN workers.state = 'draining' THEN 'draining' ELSE 'ready' END, "
                          "last_heartbeat = now(), updated_at = now() RETURNING " WORKER_COLS,
                          14, p);
    free(labels_text);
    free(nets_text);
    free(probes_text);
    free(images_text);
    json_object *ed = json_object_new_object();
    jsonx_add_str(ed, "worker", name);
    jsonx_add_str(ed, "worker_id", r ? db_get(r, 0, 0) : NULL);
    if (!r || event_add(c, NULL, "worker.registered", NULL, NULL, ed) < 0 || db_commit(c) < 0) {
        PQclear(r);
        store_db_error(err);
        db_rollback(c);
        return SBX_EDB;
    }
    *ret = worker_json(r, 0);
    PQclear(r);
    return 0;
}

int store_cluster_id(PGconn *c, char ret[64])
{
    PGresult *r = db_exec(c, "SELECT id FROM cluster", 0, NULL);
    if (!r)
        return SBX_EDB;
    int rc = PQntuples(r) == 1 ? 0 : SBX_ENOTFOUND;
    if (rc == 0)
        snprintf(ret, 64, "%s", db_get(r, 0, 0));
    PQclear(r);
    return rc;
}

int store_worker_exists(PGconn *c, const char *worker_id, bool *ret)
{
    const char *p[] = { worker_id };
    PGresult *r = db_exec(c, "SELECT 1 FROM workers WHERE id = $1", 1, p);
    if (!r)
        return SBX_EDB;
    *ret = PQntuples(r) == 1;
    PQclear(r);
    return 0;
}

/* Seconds a phase change is trusted over a worker's inventory snapshot (the
 * snapshot may predate a report that arrived before it). */
static int64_t inventory_grace_seconds(const store_limits_t *lim)
{
    return lim->heartbeat_seconds * 2 + 5;
}

/* A string member of an inventory entry: absent (NULL) when optional, else
 * a string of at most max bytes without control characters. */
static int inventory_str(json_object *e, const char *key, size_t i, size_t max, bool required, const char **ret,
                         api_error_t *err)
{
    json_object *v;
    *ret = NULL;
    if (!json_object_object_get_ex(e, key, &v) || json_object_is_type(v, json_type_null)) {
        if (required)
            return api_error_set(err, API_INVALID_ARGUMENT, "inventory[%zu].%s is required", i, key);
        return 0;
    }
    const char *s = json_object_get_string(v);
    size_t n = (size_t)json_object_get_string_len(v);
    if (!json_object_is_type(v, json_type_string) || n > max || strlen(s) != n || utf8_has_control(s))
        return api_error_set(err, API_INVALID_ARGUMENT, "inventory[%zu].%s must be a string of at most %zu bytes "
                             "without control characters", i, key, max);
    *ret = s;
    return 0;
}

/* Checks every inventory entry strictly (a worker's body is not trusted:
 * types, sizes, the observed fields through common/observed.c) and makes
 * *ret_text, the entries as kept on the worker row and matched in SQL:
 * identity and state only, never the output tails. */
static int inventory_check(json_object *inv, char **ret_text, api_error_t *err)
{
    size_t n = json_object_array_length(inv);
    json_object *kept = json_object_new_array();
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(inv, i);
        const char *sbx, *tenant, *ref;
        char what[48];
        observed_t ob;
        snprintf(what, sizeof what, "inventory[%zu]", i);
        if (!json_object_is_type(e, json_type_object)) {
            json_object_put(kept);
            return api_error_set(err, API_INVALID_ARGUMENT, "%s must be an object", what);
        }
        if (inventory_str(e, "sandbox_id", i, SBX_ID_MAX - 1, true, &sbx, err) < 0 ||
            inventory_str(e, "tenant", i, 63, false, &tenant, err) < 0 ||
            inventory_str(e, "ref", i, 128, false, &ref, err) < 0 || observed_from_json(e, what, &ob, err) < 0) {
            json_object_put(kept);
            return SBX_EINVAL;
        }
        json_object *k = json_object_new_object();
        jsonx_add_str(k, "sandbox_id", sbx);
        jsonx_add_str(k, "tenant", tenant ? tenant : "");
        jsonx_add_str(k, "ref", ref ? ref : "");
        jsonx_add_str(k, "state", ob.state);
        json_object_array_add(kept, k);
    }
    *ret_text = jsonx_dump(kept);
    json_object_put(kept);
    if (!*ret_text)
        return api_error_set(err, API_INTERNAL, "out of memory");
    return 0;
}

/* Compares a worker's inventory with what the controller wants, inside the
 * heartbeat's transaction: runtime objects it no longer wants go into
 * `remove` (orphans); running sandboxes of this worker whose container
 * stopped (the entry's observed details) or vanished become failed, with
 * the failure the runtime observed. Both respect the inventory grace (the
 * snapshot may predate a report), except a container that finished after
 * the controller last changed the sandbox: that is no stale snapshot. */
static int heartbeat_reconcile(PGconn *c, const store_limits_t *lim, const char *worker_id, json_object *inv,
                               const char *inv_text, json_object *remove)
{
    char grace[24];
    snprintf(grace, sizeof grace, "%lld", (long long)inventory_grace_seconds(lim));
    const char *p[] = { worker_id, inv_text, grace };
    int rc = 0;
    /* Stopped containers first: the orphan pass below then lists them for
     * removal in the same answer. At most a batch a beat; the rest next. */
    size_t n = json_object_array_length(inv), done = 0;
    for (size_t i = 0; i < n && rc == 0 && done < SBX_RECONCILE_BATCH; i++) {
        json_object *e = json_object_array_get_idx(inv, i);
        observed_t ob;
        if (observed_from_json(e, "inventory", &ob, NULL) < 0 || !observed_stopped(ob.state) || !ob.has_exit_code)
            continue; /* running, or its details come with a later beat */
        done++;
        const char *sbx = jsonx_get_str(e, "sandbox_id");
        const char *ref = jsonx_get_str(e, "ref");
        const char *fin = observed_time_known(ob.finished_at) ? ob.finished_at : NULL;
        const char *q[] = { sbx, worker_id, grace, fin, ref };
        PGresult *r = db_exec(c,
                              "SELECT 1 FROM sandboxes s WHERE s.id = $1 AND s.worker_id = $2 AND s.phase = 'running' "
                              "AND (s.runtime_ref IS NULL OR $5::text IS NULL OR s.runtime_ref = $5) "
                              "AND (s.updated_at < now() - make_interval(secs => $3::bigint) "
                              "     OR ($4::timestamptz IS NOT NULL AND $4::timestamptz > s.updated_at)) "
                              "FOR UPDATE OF s SKIP LOCKED",
                              5, q);
        if (!r)
            return SBX_EDB;
        bool fail = PQntuples(r) == 1;
        PQclear(r);
        if (!fail)
            continue;
        json_object *f = observed_failure_json(&ob);
        log_warn("store", "sandbox %s on worker %s stopped: %s", sbx, worker_id, jsonx_get_str(f, "message"));
        char *tail = ob.output_tail ? strndup(ob.output_tail, ob.output_tail_len) : NULL;
        rc = sandbox_fail_observed(c, sbx, f, tail);
        free(tail);
    }
    if (rc < 0)
        return rc;
    PGresult *r = db_exec(c,
                          "SELECT e->>'sandbox_id', e->>'ref' FROM jsonb_array_elements($2::jsonb) e "
                          "LEFT JOIN sandboxes s ON s.id = e->>'sandbox_id' "
                          "WHERE s.id IS NULL OR s.phase IN ('deleted', 'failed', 'lost') "
                          "   OR (s.worker_id IS DISTINCT FROM $1 "
                          "       AND s.updated_at < now() - make_interval(secs => $3::bigint)) "
                          "LIMIT 256",
                          3, p);
    if (!r)
        return SBX_EDB;
    for (int i = 0; i < PQntuples(r); i++) {
        json_object *o = json_object_new_object();
        jsonx_add_str(o, "sandbox_id", db_get(r, i, 0));
        jsonx_add_str(o, "ref", db_get(r, i, 1));
        json_object_array_add(remove, o);
    }
    PQclear(r);
    r = db_exec(c,
                "SELECT s.id FROM sandboxes s WHERE s.worker_id = $1 AND s.phase = 'running' "
                "AND s.updated_at < now() - make_interval(secs => $3::bigint) "
                "AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements($2::jsonb) e WHERE e->>'sandbox_id' = s.id) "
                "FOR UPDATE OF s SKIP LOCKED",
                3, p);
    if (!r)
        return SBX_EDB;
    for (int i = 0; i < PQntuples(r) && rc == 0; i++) {
        const char *sbx = db_get(r, i, 0);
        /* The worker is alive and says the container is gone: a known
         * end (failed, reason removed), not an unknown one (lost). */
        log_warn("store", "sandbox %s: its container vanished from worker %s; marking it failed (removed)", sbx,
                 worker_id);
        rc = sandbox_fail_observed(c, sbx, observed_removed_failure_json(), NULL);
    }
    PQclear(r);
    return rc;
}

int store_worker_heartbeat(PGconn *c, const store_limits_t *lim, const char *worker_id, json_object *body,
                           json_object **ret, api_error_t *err)
{
    /* No inventory means the worker could not list its runtime: the
     * heartbeat still counts, and the last known inventory stays. */
    json_object *inv = NULL;
    if (json_object_object_get_ex(body, "inventory", &inv) && !json_object_is_type(inv, json_type_null) &&
        !json_object_is_type(inv, json_type_array))
        return api_error_set(err, API_INVALID_ARGUMENT, "inventory must be an array");
    if (inv && json_object_is_type(inv, json_type_array) && json_object_array_length(inv) > SBX_MAX_INVENTORY)
        return api_error_set(err, API_INVALID_ARGUMENT, "inventory has more than %d entries", SBX_MAX_INVENTORY);
    char *inv_text = NULL;
    if (inv && json_object_is_type(inv, json_type_array) && inventory_check(inv, &inv_text, err) < 0)
        return SBX_EINVAL;
    char *images_text = NULL;
    if (worker_images_text(body, &images_text, err) < 0) {
        free(inv_text);
        return SBX_EINVAL;
    }
    char lease[24];
    snprintf(lease, sizeof lease, "%lld", (long long)lim->lease_seconds);
    const char *p[] = { worker_id, inv_text, images_text };
    if (db_begin(c) < 0) {
        free(inv_text);
        free(images_text);
        return store_db_error(err);
    }
    /* Heard again after it was lost: say so, in the heartbeat's transaction. */
    if (db_run(c, "INSERT INTO events (kind, data) SELECT 'worker.ready', jsonb_build_object('worker', name, "
                  "'worker_id', id, 'reason', 'heard again') FROM workers WHERE id = $1 AND state = 'lost'",
               1, p) < 0) {
        free(images_text);
        goto db_fail;
    }
    PGresult *r = db_exec(c, "UPDATE workers SET last_heartbeat = now(), inventory = coalesce($2::jsonb, inventory), "
                             "images = coalesce($3::jsonb, images), updated_at = now(), "
                             "state = CASE WHEN state = 'lost' THEN 'ready' ELSE state END "
                             "WHERE id = $1 RETURNING " WORKER_COLS, 3, p);
    free(images_text);
    if (!r)
        goto db_fail;
    if (PQntuples(r) != 1) {
        PQclear(r);
        db_rollback(c);
        free(inv_text);
        return api_error_set(err, API_NOT_FOUND, "no worker %.64s; register again", worker_id);
    }
    /* Leases are renewed only for what the worker says it holds (and for
     * what it has not been handed yet): an assignment that went to a
     * connection nobody read expires instead of living for ever. */
    json_object *holding = NULL;
    char *holding_text = NULL;
    if (json_object_object_get_ex(body, "holding", &holding) && json_object_is_type(holding, json_type_array) &&
        json_object_array_length(holding) <= SBX_MAX_INVENTORY)
        holding_text = jsonx_dump(holding);
    const char *pl[] = { worker_id, lease, holding_text };
    int renew = db_run(c, "UPDATE operations SET lease_expires_at = now() + make_interval(secs => $2::bigint) "
                          "WHERE lease_worker_id = $1 AND (state = 'leased' OR (state = 'running' AND "
                          "  ($3::jsonb IS NULL OR id IN (SELECT jsonb_array_elements_text($3::jsonb)))))",
                       3, pl);
    free(holding_text);
    if (renew < 0) {
        PQclear(r);
        goto db_fail;
    }
    json_object *remove = json_object_new_array();
    if (inv_text && heartbeat_reconcile(c, lim, worker_id, inv, inv_text, remove) < 0) {
        json_object_put(remove);
        PQclear(r);
        goto db_fail;
    }
    if (db_commit(c) < 0) {
        json_object_put(remove);
        PQclear(r);
        goto db_fail;
    }
    free(inv_text);
    *ret = json_object_new_object();
    jsonx_add(*ret, "worker", worker_json(r, 0));
    jsonx_add(*ret, "remove", remove);
    PQclear(r);
    return 0;
db_fail:
    free(inv_text);
    store_db_error(err);
    db_rollback(c);
    return SBX_EDB;
}

int store_worker_set_draining(PGconn *c, const char *name, bool drain, json_object **ret, api_error_t *err)
{
    const char *p[] = { name, drain ? "draining" : "ready" };
    /* A lost worker stays lost until it is heard again. */
    PGresult *r = db_begin(c) < 0 ? NULL : db_exec(c, "UPDATE workers SET state = CASE WHEN state = 'lost' THEN 'lost' ELSE $2 END, "
                             "updated_at = now() WHERE name = $1 RETURNING " WORKER_COLS, 2, p);
    if (!r) {
        db_rollback(c);
        return store_db_error(err);
    }
    if (PQntuples(r) != 1) {
        PQclear(r);
        db_rollback(c);
        return api_error_set(err, API_NOT_FOUND, "no worker named %.128s", name);
    }
    json_object *ed = json_object_new_object();
    jsonx_add_str(ed, "worker", name);
    jsonx_add_str(ed, "worker_id", db_get(r, 0, 0));
    if (event_add(c, NULL, drain ? "worker.draining" : "worker.resumed", NULL, NULL, ed) < 0 || db_commit(c) < 0) {
        PQclear(r);
        db_rollback(c);
        return store_db_error(err);
    }
    *ret = json_object_new_object();
    jsonx_add(*ret, "worker", worker_json(r, 0));
    PQclear(r);
    return 0;
}

int store_worker_list(PGconn *c, json_object **ret, api_error_t *err)
{
    PGresult *r = db_exec(c, "SELECT " WORKER_COLS " FROM workers ORDER BY name", 0, NULL);
    if (!r)
        return store_db_error(err);
    *ret = rows_object(r, "workers", worker_json);
    return 0;
}

int store_worker_claim(PGconn *c, const store_limits_t *lim, const char *worker_id, json_object **ret, int *ret_n,
                       api_error_t *err)
{
    *ret_n = 0;
    if (db_begin(c) < 0)
        return store_db_error(err);
    const char *p[] = { worker_id };
    PGresult *r = db_exec(c,
                          "SELECT o.id, o.kind, o.attempt, o.sandbox_id, tn.name, s.isolation, s.runtime_ref, "
                          "  s.spec::text, o.request::text "
                          "FROM operations o JOIN sandboxes s ON s.id = o.sandbox_id "
                          "JOIN tenants tn ON tn.id = o.tenant_id "
                          "WHERE o.lease_worker_id = $1 AND o.state = 'leased' "
                          "ORDER BY o.created_at LIMIT 64 FOR UPDATE OF o SKIP LOCKED",
                          1, p);
    if (!r)
        goto db_fail;
    json_object *arr = json_object_new_array();
    for (int i = 0; i < PQntuples(r); i++) {
        const char *op_id = db_get(r, i, 0), *kind = db_get(r, i, 1), *sbx = db_get(r, i, 3);
        /* Handing it out starts a fresh lease: from now on only the
         * worker's heartbeats (naming it as held) renew it. */
        char lease[24];
        snprintf(lease, sizeof lease, "%lld", (long long)lim->lease_seconds);
        const char *lx[] = { lease };
        int rc = op_cas(c, op_id, OP_LEASED, OP_RUNNING, "lease_expires_at = now() + make_interval(secs => $4::bigint)",
                        1, lx, NULL);
        if (rc == SBX_ECONFLICT)
            continue;
        if (rc < 0) {
            json_object_put(arr);
            PQclear(r);
            goto db_fail;
        }
        if (strcmp(kind, "create") == 0 && sandbox_set_phase(c, sbx, PH_PROVISIONING, NULL, 0, NULL) < 0) {
            json_object_put(arr);
            PQclear(r);
            goto db_fail;
        }
        json_object *a = json_object_new_object();
        jsonx_add_str(a, "operation_id", op_id);
        jsonx_add_str(a, "kind", kind);
        jsonx_add_int(a, "attempt", db_get_ll(r, i, 2));
        jsonx_add_str(a, "sandbox_id", sbx);
        jsonx_add_str(a, "tenant", db_get(r, i, 4));
        jsonx_add_str(a, "isolation", db_get(r, i, 5));
        jsonx_add_str(a, "runtime_ref", db_get(r, i, 6));
        jsonx_add(a, "spec", parse_json_text(db_get(r, i, 7)));
        if (strcmp(kind, "exec") == 0) {
            json_object *ex = parse_json_text(db_get(r, i, 8));
            int64_t mo = 0;
            if (ex && (!jsonx_get_int(ex, "max_output_bytes", &mo) || mo <= 0))
                jsonx_add_int(ex, "max_output_bytes", lim->exec_output_default);
            jsonx_add(a, "exec", ex);
        }
        json_object_array_add(arr, a);
        (*ret_n)++;
    }
    PQclear(r);
    if (db_commit(c) < 0) {
        json_object_put(arr);
        goto db_fail;
    }
    *ret = json_object_new_object();
    jsonx_add(*ret, "assignments", arr);
    return 0;
db_fail:
    *ret_n = 0;
    store_db_error(err);
    db_rollback(c);
    return SBX_EDB;
}

int store_worker_report(PGconn *c, const char *worker_id, json_object *body, json_object **ret, api_error_t *err)
{
    const char *op_id = jsonx_get_str(body, "operation_id");
    const char *outcome = jsonx_get_str(body, "outcome");
    int64_t attempt = -1;
    if (!op_id || !ids_valid("op", op_id))
        return api_error_set(err, API_INVALID_ARGUMENT, "operation_id is required");
    if (!jsonx_get_int(body, "attempt", &attempt))
        return api_error_set(err, API_INVALID_ARGUMENT, "attempt (the fencing token) is required");
    if (!outcome || (strcmp(outcome, "succeeded") != 0 && strcmp(outcome, "failed") != 0))
        return api_error_set(err, API_INVALID_ARGUMENT, "outcome must be succeeded or failed");
    bool ok = strcmp(outcome, "succeeded") == 0;
    json_object *result = jsonx_get_obj(body, "result");
    json_object *error = jsonx_get_obj(body, "error");
    const char *runtime_ref = jsonx_get_str(body, "runtime_ref");
    if (runtime_ref && strlen(runtime_ref) > 128)
        return api_error_set(err, API_INVALID_ARGUMENT, "runtime_ref is too long");
    /* A failed create whose container was not running: what the runtime saw. */
    json_object *obs_json = NULL;
    observed_t ob;
    bool observed = json_object_object_get_ex(body, "observed", &obs_json) &&
                    !json_object_is_type(obs_json, json_type_null);
    if (observed && observed_from_json(obs_json, "observed", &ob, err) < 0)
        return SBX_EINVAL;

    if (db_begin(c) < 0)
        return store_db_error(err);
    const char *p[] = { op_id };
    PGresult *r = db_exec(c, "SELECT kind, state, attempt, coalesce(lease_worker_id, ''), sandbox_id "
                             "FROM operations WHERE id = $1 FOR UPDATE", 1, p);
    if (!r)
        goto db_fail;
    if (PQntuples(r) != 1) {
        PQclear(r);
        db_rollback(c);
        return api_error_set(err, API_NOT_FOUND, "no operation %s", op_id);
    }
    char kind[16], sbx[SBX_ID_MAX];
    snprintf(kind, sizeof kind, "%s", db_get(r, 0, 0));
    snprintf(sbx, sizeof sbx, "%s", db_get(r, 0, 4));
    bool fresh = strcmp(db_get(r, 0, 1), "running") == 0 && db_get_ll(r, 0, 2) == attempt &&
                 strcmp(db_get(r, 0, 3), worker_id) == 0;
    if (!fresh) {
        api_error_set(err, API_STALE_LEASE,
                      "report refused: operation %s is %s at attempt %lld leased to %s; this report holds attempt %lld",
                      op_id, db_get(r, 0, 1), db_get_ll(r, 0, 2), *db_get(r, 0, 3) ? db_get(r, 0, 3) : "nobody",
                      (long long)attempt);
        PQclear(r);
        db_rollback(c);
        return SBX_EINVAL;
    }
    PQclear(r);

    int rc;
    if (ok) {
        char *res = result ? jsonx_dump(result) : NULL;
        const char *x[] = { res };
        rc = op_cas(c, op_id, OP_RUNNING, OP_SUCCEEDED, res ? "result = $4::jsonb" : NULL, res ? 1 : 0, x, NULL);
        free(res);
        if (rc < 0)
            goto cas_fail;
        if (strcmp(kind, "create") == 0) {
            const char *y[] = { runtime_ref };
            if (sandbox_set_phase(c, sbx, PH_RUNNING,
                                  "runtime_ref = $3, expires_at = now() + make_interval(secs => ttl_seconds), "
                                  "observed_generation = generation", 1, y) < 0)
                goto db_fail;
        } else if (strcmp(kind, "delete") == 0) {
            if (sandbox_set_phase(c, sbx, PH_DELETED, "deleted_at = now(), runtime_ref = NULL", 0, NULL) < 0 ||
                sandbox_release_allocation(c, sbx) < 0)
                goto db_fail;
        }
    } else {
        const char *code = jsonx_get_str(error, "code");
        const char *msg = jsonx_get_str(error, "message");
        if (!code || api_code_parse(code) < 0)
            code = "runtime_error";
        char mbuf[1024];
        snprintf(mbuf, sizeof mbuf, "%s", msg ? msg : "the worker reported a failure without a message");
        const char *x[] = { code, mbuf };
        rc = op_cas(c, op_id, OP_RUNNING, OP_FAILED, "error_code = $4, error_message = $5", 2, x, NULL);
        if (rc < 0)
            goto cas_fail;
        if (strcmp(kind, "create") == 0 && observed) {
            char *tail = ob.output_tail ? strndup(ob.output_tail, ob.output_tail_len) : NULL;
            int x2 = sandbox_fail_observed(c, sbx, observed_failure_json(&ob), tail);
            free(tail);
            if (x2 < 0)
                goto db_fail;
        } else if (strcmp(kind, "create") == 0) {
            if (sandbox_set_phase(c, sbx, PH_FAILED, NULL, 0, NULL) < 0 || sandbox_release_allocation(c, sbx) < 0)
                goto db_fail;
        }
    }
    if (db_commit(c) < 0)
        goto db_fail;
    json_object *op = NULL;
    if (load_op(c, op_id, &op) < 0)
        return store_db_error(err);
    *ret = json_object_new_object();
    jsonx_add(*ret, "operation", op);
    return 0;
cas_fail:
    db_rollback(c);
    if (rc == SBX_ECONFLICT)
        return api_error_set(err, API_STALE_LEASE, "report refused: operation %s changed state", op_id);
    return store_db_error(err);
db_fail:
    store_db_error(err);
    db_rollback(c);
    return SBX_EDB;
}

/* ---- reconcile passes ---- */

static int cmd_rows(PGresult *r)
{
    const char *t = PQcmdTuples(r);
    return t && *t ? (int)strtol(t, NULL, 10) : 0;
}

int store_admit_pending(PGconn *c, int *ret_changed)
{
    assert(op_transition_allowed(OP_PENDING, OP_ADMITTED));
    /* One statement: claim, move, and write the events rows atomically. */
    PGresult *r = db_exec(c,
                          "WITH claimed AS (SELECT id FROM operations WHERE state = 'pending' ORDER BY created_at "
                          "  LIMIT 100 FOR UPDATE SKIP LOCKED), "
                          "moved AS (UPDATE operations o SET state = 'admitted', updated_at = now() FROM claimed "
                          "  WHERE o.id = claimed.id AND o.state = 'pending' "
                          "  RETURNING o.id, o.tenant_id, o.sandbox_id, o.kind) "
                          "INSERT INTO events (tenant_id, kind, sandbox_id, operation_id, data) "
                          "SELECT tenant_id, 'operation.admitted', sandbox_id, id, "
                          "  jsonb_build_object('kind', kind, 'from', 'pending', 'to', 'admitted') FROM moved",
                          0, NULL);
    if (!r)
        return SBX_EDB;
    *ret_changed += cmd_rows(r);
    PQclear(r);
    return 0;
}

/* Ids of up to `limit` operations in `state`, oldest first (not locked: each
 * is then claimed in its own transaction with SKIP LOCKED). */
static PGresult *ops_in_state(PGconn *c, const char *where)
{
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT id FROM operations WHERE %s ORDER BY created_at LIMIT 100", where);
    return db_exec(c, sql, 0, NULL);
}

/* Fails an admitted operation with an error code, and its sandbox when it
 * is a create. Inside the caller's transaction. */
static int op_fail_admitted(PGconn *c, const char *op_id, const char *kind, const char *sbx, const char *code,
                            const char *msg, json_object *placement)
{
    char *pl = placement ? jsonx_dump(placement) : NULL;
    const char *x[] = { code, msg, pl };
    int rc = op_cas(c, op_id, OP_ADMITTED, OP_FAILED,
                    pl ? "error_code = $4, error_message = $5, placement = $6::jsonb"
                       : "error_code = $4, error_message = $5",
                    pl ? 3 : 2, x, NULL);
    free(pl);
    if (rc < 0)
        return rc;
    if (strcmp(kind, "create") == 0)
        return sandbox_set_phase(c, sbx, PH_FAILED, NULL, 0, NULL);
    return 0;
}

static int op_lease(PGconn *c, const store_limits_t *lim, const char *op_id, const char *worker_id,
                    json_object *placement)
{
    char lease[24];
    snprintf(lease, sizeof lease, "%lld", (long long)lim->lease_seconds);
    char *pl = placement ? jsonx_dump(placement) : NULL;
    const char *x[] = { worker_id, lease, pl };
    int rc = op_cas(c, op_id, OP_ADMITTED, OP_LEASED,
                    "attempt = attempt + 1, lease_worker_id = $4, "
                    "lease_expires_at = now() + make_interval(secs => $5::bigint), placement = $6::jsonb",
                    3, x, NULL);
    free(pl);
    return rc;
}

/* The reasons of a placement decision: the summary, then one sentence per
 * worker (the chosen one first), at most AEGIS_REASONS_MAX of them. */
#define AEGIS_REASONS_MAX 24

static json_object *placement_json(const char *worker, const char *summary, const aegis_verdict_t *vs, int n,
                                   int best, const aegis_request_t *rq)
{
    json_object *pl = json_object_new_object();
    jsonx_add_str(pl, "worker", worker);
    jsonx_add_str(pl, "summary", summary);
    jsonx_add_str(pl, "needs", isolation_name(rq->need));
    jsonx_add_str(pl, "isolation", best >= 0 ? isolation_name(vs[best].run_as) : NULL);
    json_object *reasons = json_object_new_array();
    if (best >= 0)
        json_object_array_add(reasons, json_object_new_string(vs[best].why));
    int shown = best >= 0;
    for (int i = 0; i < n; i++) {
        if (i == best)
            continue;
        if (shown >= AEGIS_REASONS_MAX) {
            char more[64];
            snprintf(more, sizeof more, "and %d more worker(s)", n - i - (best > i ? 1 : 0));
            json_object_array_add(reasons, json_object_new_string(more));
            break;
        }
        json_object_array_add(reasons, json_object_new_string(vs[i].why));
        shown++;
    }
    if (n == 0)
        json_object_array_add(reasons, json_object_new_string("no worker has registered"));
    jsonx_add(pl, "reasons", reasons);
    if (best >= 0) {
        json_object *sc = json_object_new_object();
        jsonx_add_int(sc, "score", vs[best].score);
        jsonx_add_int(sc, "fit", vs[best].fit);
        jsonx_add_int(sc, "image", vs[best].image);
        jsonx_add_int(sc, "spread", vs[best].spread);
        jsonx_add(pl, "score", sc);
    }
    return pl;
}

/* Placement of a create through AEGIS. Returns 1 when leased or refused,
 * 0 when it must wait (the reasons are kept on the operation), negative on
 * error. */
static int place_create(PGconn *c, const store_limits_t *lim, const char *op_id, const char *sbx,
                        const char *tenant_id, const char *iso_text, const char *spec_text, int64_t cpu, int64_t mem)
{
    aegis_request_t rq = { .need = ISO_CONTAINER, .network = NET_NONE, .cpu = cpu, .mem = mem };
    isolation_parse(iso_text, &rq.need);
    json_object *spec = parse_json_text(spec_text);
    const char *image = jsonx_get_str(spec, "image");
    const char *net = jsonx_get_str(spec, "network");
    if (net)
        net_mode_parse(net, &rq.network);
    kv_list_t selector = { 0 };
    json_object *sel = NULL;
    api_error_t ignored;
    if (spec && json_object_object_get_ex(spec, "selector", &sel))
        kv_list_from_json(sel, "selector", false, SBX_MAX_LABELS, &selector, &ignored);
    rq.selector = &selector;
    char ref[SBX_MAX_IMAGE_BYTES + 16];
    aegis_image_ref(image ? image : "", ref, sizeof ref);
    json_object_put(spec);

    char tmo[24];
    snprintf(tmo, sizeof tmo, "%lld", (long long)lim->worker_timeout_seconds);
    const char *p[] = { tmo, ref, tenant_id };
    PGresult *r = db_exec(c,
                          "SELECT w.id, w.name, w.state, w.last_heartbeat > now() - make_interval(secs => $1::bigint), "
                          "  w.labels::text, array_to_string(w.isolation, ','), w.networks::text, w.cpu_millis, "
                          "  w.memory_mib, w.cpu_millis - w.alloc_cpu_millis, w.memory_mib - w.alloc_memory_mib, "
                          "  w.slots - w.alloc_slots, w.images ? $2, "
                          "  (SELECT count(*) FROM sandboxes s WHERE s.worker_id = w.id AND s.tenant_id = $3 "
                          "     AND s.phase IN ('scheduled', 'provisioning', 'running')) "
                          "FROM workers w WHERE w.state <> 'lost' ORDER BY w.name LIMIT 1000",
                          3, p);
    if (!r) {
        kv_list_release(&selector);
        return SBX_EDB;
    }
    int n = PQntuples(r);
    aegis_worker_t *ws = calloc((size_t)(n ? n : 1), sizeof *ws);
    aegis_verdict_t *vs = calloc((size_t)(n ? n : 1), sizeof *vs);
    if (!ws || !vs) {
        free(ws);
        free(vs);
        PQclear(r);
        kv_list_release(&selector);
        return SBX_ENOMEM;
    }
    for (int i = 0; i < n; i++) {
        aegis_worker_t *w = &ws[i];
        w->id = db_get(r, i, 0);
        w->name = db_get(r, i, 1);
        w->state = db_get(r, i, 2);
        w->fresh = strcmp(db_get(r, i, 3), "t") == 0;
        w->labels = parse_json_text(db_get(r, i, 4));
        const char *cl = db_get(r, i, 5);
        while (cl && *cl) {
            const char *end = strchr(cl, ',');
            size_t len = end ? (size_t)(end - cl) : strlen(cl);
            char name[16];
            isolation_t have;
            snprintf(name, sizeof name, "%.*s", (int)(len < 15 ? len : 15), cl);
            if (isolation_parse(name, &have) == 0)
                w->classes |= 1u << have;
            cl = end ? end + 1 : NULL;
        }
        json_object *nets = parse_json_text(db_get(r, i, 6));
        for (int k = ISO_CONTAINER; k <= ISO_MICROVM; k++) {
            json_object *modes = NULL;
            if (!nets || !json_object_object_get_ex(nets, isolation_name((isolation_t)k), &modes) ||
                !json_object_is_type(modes, json_type_array))
                continue;
            for (size_t j = 0; j < json_object_array_length(modes); j++) {
                net_mode_t m;
                if (net_mode_parse(json_object_get_string(json_object_array_get_idx(modes, j)), &m) == 0)
                    w->networks[k] |= 1u << m;
            }
        }
        if (nets)
            json_object_put(nets);
        w->cap_cpu = db_get_ll(r, i, 7);
        w->cap_mem = db_get_ll(r, i, 8);
        w->free_cpu = db_get_ll(r, i, 9);
        w->free_mem = db_get_ll(r, i, 10);
        w->free_slots = db_get_ll(r, i, 11);
        w->has_image = strcmp(db_get(r, i, 12), "t") == 0;
        w->tenant_sandboxes = db_get_ll(r, i, 13);
    }

    int rc = 0;
    for (;;) {
        int best = -1;
        char summary[512];
        aegis_outcome_t out = aegis_decide(&rq, ws, (size_t)n, vs, &best, summary, sizeof summary);
        if (out == AEGIS_REFUSE) {
            json_object *pl = placement_json(NULL, summary, vs, n, -1, &rq);
            rc = op_fail_admitted(c, op_id, "create", sbx, "isolation_unavailable", summary, pl);
            json_object_put(pl);
            if (rc == 0)
                rc = 1;
            break;
        }
        if (out == AEGIS_WAIT) {
            /* Keep why it waits where `sandbox get` shows it; written only
             * when the explanation changes. */
            json_object *pl = placement_json(NULL, summary, vs, n, -1, &rq);
            char *pt = jsonx_dump(pl);
            json_object_put(pl);
            const char *q[] = { op_id, pt };
            rc = db_run(c, "UPDATE operations SET placement = $2::jsonb WHERE id = $1 AND state = 'admitted' "
                           "AND placement IS DISTINCT FROM $2::jsonb", 2, q);
            free(pt);
            rc = rc < 0 ? rc : 0;
            break;
        }
        aegis_worker_t *k = &ws[best];
        char cpus[24], mems[24];
        snprintf(cpus, sizeof cpus, "%lld", (long long)cpu);
        snprintf(mems, sizeof mems, "%lld", (long long)mem);
        const char *q[] = { k->id, cpus, mems };
        PGresult *u = db_exec(c,
                              "UPDATE workers SET alloc_cpu_millis = alloc_cpu_millis + $2, "
                              "  alloc_memory_mib = alloc_memory_mib + $3, alloc_slots = alloc_slots + 1, "
                              "  updated_at = now() "
                              "WHERE id = $1 AND state = 'ready' AND alloc_cpu_millis + $2 <= cpu_millis "
                              "  AND alloc_memory_mib + $3 <= memory_mib AND alloc_slots + 1 <= slots RETURNING id",
                              3, q);
        if (!u) {
            rc = SBX_EDB;
            break;
        }
        bool got = PQntuples(u) == 1;
        PQclear(u);
        if (!got) {
            /* Another controller took the room meanwhile: decide again
             * without this worker's stale numbers. */
            k->free_slots = 0;
            continue;
        }
        json_object *pl = placement_json(k->name, summary, vs, n, best, &rq);
        rc = op_lease(c, lim, op_id, k->id, pl);
        json_object_put(pl);
        if (rc < 0)
            break;
        const char *y[] = { k->id, isolation_name(vs[best].run_as) };
        rc = sandbox_set_phase(c, sbx, PH_SCHEDULED, "worker_id = $3, allocated = true, isolation = $4", 2, y);
        if (rc == 0)
            rc = 1;
        break;
    }
    for (int i = 0; i < n; i++)
        if (ws[i].labels)
            json_object_put(ws[i].labels);
    free(ws);
    free(vs);
    PQclear(r);
    kv_list_release(&selector);
    return rc;
}

/* ---- routes ---- */

#define ROUTE_COLS \
    "r.id, r.name, r.sandbox_id, r.port, r.auth, r.state, " TS("r.expires_at") ", " TS("r.created_at") ", " \
    TS("r.removed_at") ", r.removed_reason"

static json_object *route_json(const PGresult *r, int row)
{
    json_object *o = json_object_new_object();
    jsonx_add_str(o, "id", db_get(r, row, 0));
    jsonx_add_str(o, "name", db_get(r, row, 1));
    jsonx_add_str(o, "sandbox_id", db_get(r, row, 2));
    jsonx_add_int(o, "port", db_get_ll(r, row, 3));
    jsonx_add_str(o, "auth", db_get(r, row, 4));
    jsonx_add_str(o, "state", db_get(r, row, 5));
    jsonx_add_str(o, "expires_at", db_get(r, row, 6));
    jsonx_add_str(o, "created_at", db_get(r, row, 7));
    jsonx_add_str(o, "removed_at", db_get(r, row, 8));
    jsonx_add_str(o, "removed_reason", db_get(r, row, 9));
    return o;
}

/* Inserts a pending operation of kind on the locked sandbox, with its
 * event. */
static int op_insert_pending(PGconn *c, const store_limits_t *lim, const char *kind, const char *tenant_id,
                             const char *sandbox_id, const char *op_id, json_object *request, const char *idem,
                             const char *hash, const char *created_by)
{
    char deadline[24];
    snprintf(deadline, sizeof deadline, "%lld", (long long)lim->deadline_seconds);
    char *req_text = jsonx_dump(request);
    const char *po[] = { op_id, tenant_id, sandbox_id, kind, idem, hash, req_text, deadline, created_by };
    int rc = db_run(c, "INSERT INTO operations (id, tenant_id, sandbox_id, kind, state, idempotency_key, "
                       "request_hash, request, deadline, created_by) VALUES ($1, $2, $3, $4, 'pending', $5, $6, "
                       "$7::jsonb, now() + make_interval(secs => $8::bigint), $9)",
                    9, po);
    free(req_text);
    if (rc < 0)
        return SBX_EDB;
    json_object *ed = json_object_new_object();
    jsonx_add_str(ed, "kind", kind);
    jsonx_add_str(ed, "to", "pending");
    return event_add(c, tenant_id, "operation.pending", sandbox_id, op_id, ed);
}

int store_route_share(PGconn *c, const store_limits_t *lim, const share_req_t *req, json_object **ret,
                      api_error_t *err)
{
    char tenant_id[SBX_ID_MAX], phase[24], desired[16], op_id[SBX_ID_MAX];
    if (req->idempotency_key && req->scope) {
        int rr = idem_replay(c, req->scope, req->idempotency_key, "share", req->request_hash, false, ret, err);
        if (rr != 0)
            return rr > 0 ? 0 : rr;
    }
    if (db_begin(c) < 0)
        return store_db_error(err);
    int rc = sandbox_lock(c, req->scope, req->sandbox_id, tenant_id, phase, desired, err);
    if (rc < 0) {
        db_rollback(c);
        return rc;
    }
    if (strcmp(phase, "running") != 0 || strcmp(desired, "running") != 0) {
        db_rollback(c);
        return api_error_set(err, API_CONFLICT, "sandbox %s is %s%s; only a running sandbox can be shared",
                             req->sandbox_id, phase, strcmp(desired, "deleted") == 0 ? " and being deleted" : "");
    }
    /* A worker reaches a sandbox's port from the sandbox's network
     * namespace; under gVisor the network stack is inside the sandbox. */
    const char *ip[] = { req->sandbox_id };
    PGresult *ir = db_exec(c, "SELECT isolation FROM sandboxes WHERE id = $1", 1, ip);
    if (!ir) {
        db_rollback(c);
        return store_db_error(err);
    }
    bool gvisor = PQntuples(ir) == 1 && strcmp(db_get(ir, 0, 0), "gvisor") == 0;
    PQclear(ir);
    if (gvisor) {
        db_rollback(c);
        return api_error_set(err, API_CONFLICT, "sandbox %s runs under gVisor, whose network stack is inside the "
                             "sandbox: its ports cannot be shared", req->sandbox_id);
    }
    policy_t pol;
    if (store_tenant_policy(c, tenant_id, &pol) < 0) {
        db_rollback(c);
        return store_db_error(err);
    }
    bool routes_denied = pol.routes == 0;
    policy_release(&pol);
    if (routes_denied) {
        db_rollback(c);
        return api_error_set(err, API_POLICY_DENIED, "the tenant policy does not allow public routes (routes = false)");
    }
    json_object *request = json_object_new_object();
    jsonx_add_str(request, "route_id", req->route_id);
    jsonx_add_str(request, "name", req->route_name);
    jsonx_add_int(request, "port", req->port);
    jsonx_add_str(request, "auth", req->token_auth ? "token" : "public");
    jsonx_add_str(request, "secret_hash", req->token_auth ? req->secret_hash : NULL);
    jsonx_add_int(request, "ttl_seconds", req->ttl_seconds);
    ids_new("op", op_id);
    rc = op_insert_pending(c, lim, "share", tenant_id, req->sandbox_id, op_id, request, req->idempotency_key,
                           req->request_hash, req->created_by);
    json_object_put(request);
    if (rc < 0 || db_commit(c) < 0) {
        bool dup = req->idempotency_key && db_last_unique_violation();
        db_rollback(c);
        if (dup) {
            int rr = idem_replay(c, tenant_id, req->idempotency_key, "share", req->request_hash, false, ret, err);
            return rr > 0 ? 0 : (rr < 0 ? rr : store_db_error(err));
        }
        return store_db_error(err);
    }
    json_object *op = NULL;
    if (load_op(c, op_id, &op) < 0)
        return store_db_error(err);
    *ret = json_object_new_object();
    jsonx_add(*ret, "operation", op);
    json_object *route = json_object_new_object();
    jsonx_add_str(route, "id", req->route_id);
    jsonx_add_str(route, "name", req->route_name);
    jsonx_add_str(route, "sandbox_id", req->sandbox_id);
    jsonx_add_int(route, "port", req->port);
    jsonx_add_str(route, "auth", req->token_auth ? "token" : "public");
    jsonx_add_str(route, "state", "pending");
    jsonx_add(*ret, "route", route);
    return 0;
}

int store_route_unshare(PGconn *c, const store_limits_t *lim, const char *scope, const char *sandbox_id,
                        const char *route_id, const char *created_by, json_object **ret, api_error_t *err)
{
    char tenant_id[SBX_ID_MAX], phase[24], desired[16], op_id[SBX_ID_MAX];
    if (db_begin(c) < 0)
        return store_db_error(err);
    int rc = sandbox_lock(c, scope, sandbox_id, tenant_id, phase, desired, err);
    if (rc < 0) {
        db_rollback(c);
        return rc;
    }
    const char *p[] = { route_id, sandbox_id };
    PGresult *r = db_exec(c, "SELECT 1 FROM routes WHERE id = $1 AND sandbox_id = $2", 2, p);
    if (!r) {
        db_rollback(c);
        return store_db_error(err);
    }
    bool found = PQntuples(r) == 1;
    PQclear(r);
    if (!found) {
        db_rollback(c);
        return api_error_set(err, API_NOT_FOUND, "sandbox %s has no route %.64s", sandbox_id, route_id);
    }
    json_object *request = json_object_new_object();
    jsonx_add_str(request, "route_id", route_id);
    ids_new("op", op_id);
    rc = op_insert_pending(c, lim, "unshare", tenant_id, sandbox_id, op_id, request, NULL, NULL, created_by);
    json_object_put(request);
    if (rc < 0 || db_commit(c) < 0) {
        db_rollback(c);
        return store_db_error(err);
    }
    json_object *op = NULL;
    if (load_op(c, op_id, &op) < 0)
        return store_db_error(err);
    *ret = json_object_new_object();
    jsonx_add(*ret, "operation", op);
    return 0;
}

int store_routes_list(PGconn *c, const char *scope, const char *sandbox_id, bool all, json_object **ret,
                      api_error_t *err)
{
    const char *p[] = { sandbox_id, scope };
    PGresult *r = db_exec(c, "SELECT 1 FROM sandboxes WHERE id = $1 AND ($2::text IS NULL OR tenant_id = $2)", 2, p);
    if (!r)
        return store_db_error(err);
    bool found = PQntuples(r) == 1;
    PQclear(r);
    if (!found)
        return api_error_set(err, API_NOT_FOUND, "no sandbox %.64s", sandbox_id);
    r = db_exec(c, all ? "SELECT " ROUTE_COLS " FROM routes r WHERE r.sandbox_id = $1 ORDER BY r.created_at"
                       : "SELECT " ROUTE_COLS " FROM routes r WHERE r.sandbox_id = $1 AND r.state = 'active' "
                         "ORDER BY r.created_at",
                1, p);
    if (!r)
        return store_db_error(err);
    *ret = rows_object(r, "routes", route_json);
    return 0;
}

/* Completes a share or unshare inside place_one's transaction (the
 * sandbox row is locked). Returns 1 when the operation finished. */
static int place_route_op(PGconn *c, const char *op_id, const char *kind, const char *sbx, const char *phase,
                          const char *tenant_id)
{
    const char *q[] = { op_id };
    PGresult *r = db_exec(c, "SELECT request::text, created_by FROM operations WHERE id = $1", 1, q);
    if (!r || PQntuples(r) != 1) {
        PQclear(r);
        return SBX_EDB;
    }
    json_object *req = parse_json_text(db_get(r, 0, 0));
    char created_by[SBX_ID_MAX];
    snprintf(created_by, sizeof created_by, "%s", db_get(r, 0, 1) ? db_get(r, 0, 1) : "");
    PQclear(r);
    const char *route_id = jsonx_get_str(req, "route_id");
    int rc;
    if (strcmp(kind, "unshare") == 0) {
        const char *u[] = { route_id ? route_id : "", sbx, op_id };
        rc = db_run(c, "WITH gone AS (UPDATE routes SET state = 'removed', removed_at = now(), "
                       "  removed_reason = 'unshare' WHERE id = $1 AND sandbox_id = $2 AND state = 'active' "
                       "  RETURNING id, tenant_id, port) "
                       "INSERT INTO events (tenant_id, kind, sandbox_id, operation_id, data) SELECT tenant_id, "
                       "  'route.removed', $2, $3, jsonb_build_object('route', id, 'port', port, 'reason', 'unshare') "
                       "FROM gone",
                    3, u);
        if (rc >= 0)
            rc = op_cas(c, op_id, OP_ADMITTED, OP_SUCCEEDED, NULL, 0, NULL, NULL);
    } else if (strcmp(phase, "running") != 0) {
        char msg[160];
        snprintf(msg, sizeof msg, "sandbox %s is %s; only a running sandbox can be shared", sbx, phase);
        rc = op_fail_admitted(c, op_id, kind, sbx, "conflict", msg, NULL);
    } else {
        int64_t port = 0, ttl = 0;
        jsonx_get_int(req, "port", &port);
        jsonx_get_int(req, "ttl_seconds", &ttl);
        char ports[16], ttls[24];
        snprintf(ports, sizeof ports, "%lld", (long long)port);
        snprintf(ttls, sizeof ttls, "%lld", (long long)ttl);
        const char *ins[] = { route_id ? route_id : "", jsonx_get_str(req, "name"), sbx, tenant_id, ports,
                              jsonx_get_str(req, "auth"), jsonx_get_str(req, "secret_hash"), ttls, created_by };
        r = db_exec(c, "INSERT INTO routes AS r (id, name, sandbox_id, tenant_id, port, auth, secret_hash, expires_at, "
                       "created_by) VALUES ($1, $2, $3, $4, $5::int, $6, $7, CASE WHEN $8::bigint > 0 THEN now() + "
                       "make_interval(secs => $8::bigint) END, nullif($9, '')) RETURNING " ROUTE_COLS,
                    9, ins);
        rc = r && PQntuples(r) == 1 ? 0 : SBX_EDB;
        if (rc == 0) {
            /* Not the route's name: it is the unguessable address. */
            json_object *ed = json_object_new_object();
            jsonx_add_str(ed, "route", db_get(r, 0, 0));
            jsonx_add_int(ed, "port", db_get_ll(r, 0, 3));
            jsonx_add_str(ed, "auth", db_get(r, 0, 4));
            jsonx_add_str(ed, "expires_at", db_get(r, 0, 6));
            rc = event_add(c, tenant_id, "route.shared", sbx, op_id, ed);
        }
        if (rc == 0) {
            json_object *res = json_object_new_object();
            jsonx_add(res, "route", route_json(r, 0));
            char *rt = jsonx_dump(res);
            json_object_put(res);
            const char *x[] = { rt };
            rc = op_cas(c, op_id, OP_ADMITTED, OP_SUCCEEDED, "result = $4::jsonb", 1, x, NULL);
            free(rt);
        }
        PQclear(r);
    }
    if (req)
        json_object_put(req);
    return rc < 0 ? rc : 1;
}

int store_expire_routes(PGconn *c, int *ret_changed)
{
    PGresult *r = db_exec(c,
                          "WITH gone AS (UPDATE routes SET state = 'removed', removed_at = now(), "
                          "  removed_reason = 'expired' WHERE id IN (SELECT id FROM routes WHERE state = 'active' "
                          "  AND expires_at < now() ORDER BY expires_at LIMIT 500 FOR UPDATE SKIP LOCKED) "
                          "  RETURNING id, tenant_id, sandbox_id, port) "
                          "INSERT INTO events (tenant_id, kind, sandbox_id, data) "
                          "SELECT tenant_id, 'route.expired', sandbox_id, "
                          "  jsonb_build_object('route', id, 'port', port, 'reason', 'expired') FROM gone "
                          "RETURNING 1",
                          0, NULL);
    if (!r)
        return SBX_EDB;
    *ret_changed += PQntuples(r);
    PQclear(r);
    return 0;
}

int store_route_target(PGconn *c, const char *name, route_target_t *ret)
{
    memset(ret, 0, sizeof *ret);
    const char *p[] = { name };
    PGresult *r = db_exec(c,
                          "SELECT r.id, r.sandbox_id, r.tenant_id, s.worker_id, r.port, r.auth, "
                          "  coalesce(r.secret_hash, ''), coalesce(w.route_address, ''), "
                          "  CASE WHEN t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > now()) "
                          "       THEN coalesce(t.hash, '') ELSE '' END "
                          "FROM routes r JOIN sandboxes s ON s.id = r.sandbox_id "
                          "JOIN workers w ON w.id = s.worker_id "
                          "LEFT JOIN api_tokens t ON t.id = w.token_id "
                          "WHERE r.name = $1 AND r.state = 'active' AND (r.expires_at IS NULL OR r.expires_at > now()) "
                          "  AND s.phase = 'running' AND w.state <> 'lost'",
                          1, p);
    if (!r)
        return SBX_EDB;
    int rc = PQntuples(r) == 1 ? 0 : SBX_ENOTFOUND;
    if (rc == 0) {
        snprintf(ret->route_id, sizeof ret->route_id, "%s", db_get(r, 0, 0));
        snprintf(ret->sandbox_id, sizeof ret->sandbox_id, "%s", db_get(r, 0, 1));
        snprintf(ret->tenant_id, sizeof ret->tenant_id, "%s", db_get(r, 0, 2));
        snprintf(ret->worker_id, sizeof ret->worker_id, "%s", db_get(r, 0, 3));
        ret->port = (int)db_get_ll(r, 0, 4);
        ret->token_auth = strcmp(db_get(r, 0, 5), "token") == 0;
        snprintf(ret->secret_hash, sizeof ret->secret_hash, "%s", db_get(r, 0, 6));
        snprintf(ret->worker_address, sizeof ret->worker_address, "%s", db_get(r, 0, 7));
        snprintf(ret->worker_token_hash, sizeof ret->worker_token_hash, "%s", db_get(r, 0, 8));
    }
    PQclear(r);
    return rc;
}

int store_routes_alive(PGconn *c, const char *const *names, int n, bool *ret_flags)
{
    return flag_ids(c, "SELECT name FROM routes WHERE name = ANY($1::text[]) AND state = 'active' "
                       "AND (expires_at IS NULL OR expires_at > now())", names, n, ret_flags);
}

/* One admitted operation in its own transaction. Returns 1 when it moved
 * (leased, failed or finished), 2 when leased, 0 when it waits. */
static int place_one(PGconn *c, const store_limits_t *lim, const char *op_id)
{
    if (db_begin(c) < 0)
        return SBX_EDB;
    const char *p[] = { op_id };
    PGresult *r = db_exec(c,
                          "SELECT o.kind, o.sandbox_id, s.phase, coalesce(s.worker_id, ''), s.isolation, "
                          "  s.cpu_millis, s.memory_mib, coalesce(w.state, ''), coalesce(w.name, ''), s.tenant_id, "
                          "  s.spec::text "
                          "FROM operations o JOIN sandboxes s ON s.id = o.sandbox_id "
                          "LEFT JOIN workers w ON w.id = s.worker_id "
                          "WHERE o.id = $1 AND o.state = 'admitted' FOR UPDATE OF o, s SKIP LOCKED",
                          1, p);
    if (!r) {
        db_rollback(c);
        return SBX_EDB;
    }
    if (PQntuples(r) != 1) {
        PQclear(r);
        db_rollback(c);
        return 0;
    }
    char kind[16], sbx[SBX_ID_MAX], phase[24], worker[SBX_ID_MAX], iso[16], wstate[16], wname[SBX_MAX_NAME_BYTES + 1];
    snprintf(kind, sizeof kind, "%s", db_get(r, 0, 0));
    snprintf(sbx, sizeof sbx, "%s", db_get(r, 0, 1));
    snprintf(phase, sizeof phase, "%s", db_get(r, 0, 2));
    snprintf(worker, sizeof worker, "%s", db_get(r, 0, 3));
    snprintf(iso, sizeof iso, "%s", db_get(r, 0, 4));
    int64_t cpu = db_get_ll(r, 0, 5), mem = db_get_ll(r, 0, 6);
    snprintf(wstate, sizeof wstate, "%s", db_get(r, 0, 7));
    snprintf(wname, sizeof wname, "%s", db_get(r, 0, 8));
    char tenant_id[SBX_ID_MAX];
    snprintf(tenant_id, sizeof tenant_id, "%s", db_get(r, 0, 9));
    char *spec_text = strdup(db_get(r, 0, 10) ? db_get(r, 0, 10) : "{}");
    PQclear(r);

    int rc = 0;
    if (strcmp(kind, "create") == 0) {
        rc = spec_text ? place_create(c, lim, op_id, sbx, tenant_id, iso, spec_text, cpu, mem) : SBX_ENOMEM;
        free(spec_text);
        if (rc > 0) {
            /* place_create leased or failed it; tell which for the wake-up. */
            const char *q[] = { op_id };
            PGresult *s = db_exec(c, "SELECT state FROM operations WHERE id = $1", 1, q);
            if (s && PQntuples(s) == 1 && strcmp(db_get(s, 0, 0), "leased") == 0)
                rc = 2;
            PQclear(s);
        }
    } else if (strcmp(kind, "share") == 0 || strcmp(kind, "unshare") == 0) {
        free(spec_text);
        /* The controller completes these by itself. */
        rc = place_route_op(c, op_id, kind, sbx, phase, tenant_id);
    } else {
        free(spec_text);
        /* delete and exec run where the sandbox is. Wait while another
         * operation of the sandbox is in a worker's hands. */
        PGresult *busy = db_exec(c, "SELECT count(*) FROM operations WHERE sandbox_id = $1 AND id <> $2 "
                                    "AND state IN ('leased', 'running') AND kind <> 'exec'",
                                 2, (const char *const[]){ sbx, op_id });
        if (!busy) {
            db_rollback(c);
            return SBX_EDB;
        }
        bool blocked = db_get_ll(busy, 0, 0) > 0;
        PQclear(busy);
        if (strcmp(kind, "delete") == 0) {
            if (blocked) {
                rc = 0;
            } else if (!*worker || strcmp(wstate, "lost") == 0 || strcmp(phase, "pending") == 0) {
                /* Nothing was ever started (or its worker is gone): the
                 * controller completes the delete by itself. */
                rc = op_cas(c, op_id, OP_ADMITTED, OP_SUCCEEDED, NULL, 0, NULL, NULL);
                if (rc == 0)
                    rc = sandbox_set_phase(c, sbx, PH_DELETED, "deleted_at = now()", 0, NULL);
                if (rc == 0)
                    rc = sandbox_release_allocation(c, sbx);
                if (rc == 0)
                    rc = 1;
            } else {
                json_object *pl = json_object_new_object();
                jsonx_add_str(pl, "worker", wname);
                json_object *rs = json_object_new_array();
                json_object_array_add(rs, json_object_new_string("deleted where the sandbox runs"));
                jsonx_add(pl, "reasons", rs);
                rc = op_lease(c, lim, op_id, worker, pl);
                json_object_put(pl);
                if (rc == 0 && strcmp(phase, "deleting") != 0)
                    rc = sandbox_set_phase(c, sbx, PH_DELETING, NULL, 0, NULL);
                if (rc == 0)
                    rc = 2;
            }
        } else { /* exec */
            if (strcmp(phase, "running") != 0 || !*worker) {
                char msg[128];
                snprintf(msg, sizeof msg, "sandbox %s is %s; exec needs a running sandbox", sbx, phase);
                rc = op_fail_admitted(c, op_id, kind, sbx, "conflict", msg, NULL);
                if (rc == 0)
                    rc = 1;
            } else {
                json_object *pl = json_object_new_object();
                jsonx_add_str(pl, "worker", wname);
                json_object *rs = json_object_new_array();
                json_object_array_add(rs, json_object_new_string("runs where the sandbox runs"));
                jsonx_add(pl, "reasons", rs);
                rc = op_lease(c, lim, op_id, worker, pl);
                json_object_put(pl);
                if (rc == 0)
                    rc = 2;
            }
        }
    }
    if (rc < 0) {
        db_rollback(c);
        return rc == SBX_ECONFLICT ? 0 : rc;
    }
    /* rc 0 (waiting) commits too: the reasons it waits may have changed. */
    if (db_commit(c) < 0) {
        db_rollback(c);
        return SBX_EDB;
    }
    return rc;
}

int store_place_admitted(PGconn *c, const store_limits_t *lim, int *ret_changed, int *ret_leased)
{
    PGresult *r = ops_in_state(c, "state = 'admitted'");
    if (!r)
        return SBX_EDB;
    int rc = 0;
    for (int i = 0; i < PQntuples(r); i++) {
        int m = place_one(c, lim, db_get(r, i, 0));
        if (m < 0) {
            rc = m;
            break;
        }
        if (m > 0)
            (*ret_changed)++;
        if (m == 2)
            (*ret_leased)++;
    }
    PQclear(r);
    return rc;
}

int store_expire_leases(PGconn *c, const store_limits_t *lim, int *ret_changed)
{
    PGresult *r = ops_in_state(c, "state IN ('leased', 'running') AND lease_expires_at < now()");
    if (!r)
        return SBX_EDB;
    int rc = 0;
    for (int i = 0; i < PQntuples(r) && rc == 0; i++) {
        const char *op_id = db_get(r, i, 0);
        if (db_begin(c) < 0) {
            rc = SBX_EDB;
            break;
        }
        const char *p[] = { op_id };
        PGresult *o = db_exec(c, "SELECT kind, state, attempt, sandbox_id FROM operations WHERE id = $1 "
                                 "AND state IN ('leased', 'running') AND lease_expires_at < now() "
                                 "FOR UPDATE SKIP LOCKED", 1, p);
        if (!o || PQntuples(o) != 1) {
            PQclear(o);
            db_rollback(c);
            continue;
        }
        char kind[16], sbx[SBX_ID_MAX];
        op_state_t from;
        snprintf(kind, sizeof kind, "%s", db_get(o, 0, 0));
        op_state_parse(db_get(o, 0, 1), &from);
        int64_t attempt = db_get_ll(o, 0, 2);
        snprintf(sbx, sizeof sbx, "%s", db_get(o, 0, 3));
        PQclear(o);
        int x;
        /* exec is not safe to repeat: it may have run. create and delete are. */
        bool give_up = strcmp(kind, "exec") == 0 || attempt >= lim->max_attempts;
        if (give_up) {
            char msg[160];
            snprintf(msg, sizeof msg, "the worker stopped renewing its lease (attempt %lld of %lld)%s",
                     (long long)attempt, (long long)lim->max_attempts,
                     strcmp(kind, "exec") == 0 ? "; exec is not retried because it may have run" : "");
            const char *e[] = { "worker_lost", msg };
            x = op_cas(c, op_id, from, OP_FAILED, "error_code = $4, error_message = $5, lease_worker_id = NULL", 2, e,
                       event_reason("lease_expired"));
            if (x == 0 && strcmp(kind, "create") == 0) {
                x = sandbox_set_phase(c, sbx, PH_FAILED, NULL, 0, NULL);
                if (x == 0)
                    x = sandbox_release_allocation(c, sbx);
            }
        } else {
            x = op_cas(c, op_id, from, OP_ADMITTED, "lease_worker_id = NULL, lease_expires_at = NULL", 0, NULL,
                       event_reason("lease_expired"));
            if (x == 0 && strcmp(kind, "create") == 0) {
                x = sandbox_release_allocation(c, sbx);
                if (x == 0)
                    x = sandbox_set_phase(c, sbx, PH_PENDING, "worker_id = NULL", 0, NULL);
            }
        }
        if (x < 0) {
            db_rollback(c);
            if (x != SBX_ECONFLICT)
                rc = x;
            continue;
        }
        if (db_commit(c) < 0) {
            db_rollback(c);
            rc = SBX_EDB;
            break;
        }
        pthread_once(&store_metrics_once, store_metrics_init);
        metrics_add(m_lease_expiries, give_up ? "outcome=\"failed\"" : "outcome=\"retried\"", 1);
        (*ret_changed)++;
    }
    PQclear(r);
    return rc;
}

int store_fail_overdue(PGconn *c, int *ret_changed)
{
    PGresult *r = ops_in_state(c, "state IN ('pending', 'admitted') AND deadline < now()");
    if (!r)
        return SBX_EDB;
    int rc = 0;
    for (int i = 0; i < PQntuples(r) && rc == 0; i++) {
        const char *op_id = db_get(r, i, 0);
        if (db_begin(c) < 0) {
            rc = SBX_EDB;
            break;
        }
        const char *p[] = { op_id };
        PGresult *o = db_exec(c, "SELECT kind, state, sandbox_id FROM operations WHERE id = $1 "
                                 "AND state IN ('pending', 'admitted') FOR UPDATE SKIP LOCKED", 1, p);
        if (!o || PQntuples(o) != 1) {
            PQclear(o);
            db_rollback(c);
            continue;
        }
        op_state_t from;
        char kind[16], sbx[SBX_ID_MAX];
        snprintf(kind, sizeof kind, "%s", db_get(o, 0, 0));
        op_state_parse(db_get(o, 0, 1), &from);
        snprintf(sbx, sizeof sbx, "%s", db_get(o, 0, 2));
        PQclear(o);
        const char *e[] = { "timeout", "no worker could take the operation before its deadline "
                                       "(no ready worker with enough free capacity)" };
        int x = op_cas(c, op_id, from, OP_FAILED, "error_code = $4, error_message = $5", 2, e,
                       event_reason("deadline"));
        if (x == 0 && strcmp(kind, "create") == 0)
            x = sandbox_set_phase(c, sbx, PH_FAILED, NULL, 0, NULL);
        if (x < 0 || db_commit(c) < 0) {
            db_rollback(c);
            if (x != SBX_ECONFLICT)
                rc = SBX_EDB;
            continue;
        }
        (*ret_changed)++;
    }
    PQclear(r);
    return rc;
}

/* For each sandbox select_sql names: in its own transaction, lock the row
 * if it still matches lock_cond (a WHERE fragment on $1 = id), write
 * event_kind (may be NULL) and request its deletion. */
static int request_deletes(PGconn *c, const store_limits_t *lim, const char *select_sql, const char *lock_cond,
                           const char *event_kind, const char *created_by, int *ret_changed)
{
    PGresult *r = db_exec(c, select_sql, 0, NULL);
    if (!r)
        return SBX_EDB;
    char lock_sql[512];
    snprintf(lock_sql, sizeof lock_sql, "SELECT tenant_id FROM sandboxes WHERE id = $1 AND %s FOR UPDATE SKIP LOCKED",
             lock_cond);
    int rc = 0;
    for (int i = 0; i < PQntuples(r); i++) {
        const char *sbx = db_get(r, i, 0);
        if (db_begin(c) < 0) {
            rc = SBX_EDB;
            break;
        }
        const char *p[] = { sbx };
        PGresult *s = db_exec(c, lock_sql, 1, p);
        if (!s || PQntuples(s) != 1) {
            PQclear(s);
            db_rollback(c);
            continue;
        }
        char tenant[SBX_ID_MAX], op[SBX_ID_MAX];
        snprintf(tenant, sizeof tenant, "%s", db_get(s, 0, 0));
        PQclear(s);
        if ((event_kind && event_add(c, tenant, event_kind, sbx, NULL, NULL) < 0) ||
            sandbox_request_delete(c, lim, tenant, sbx, NULL, NULL, created_by, op) < 0 || db_commit(c) < 0) {
            db_rollback(c);
            rc = SBX_EDB;
            break;
        }
        (*ret_changed)++;
    }
    PQclear(r);
    return rc;
}

int store_expire_ttls(PGconn *c, const store_limits_t *lim, int *ret_changed)
{
    return request_deletes(c, lim,
                           "SELECT id FROM sandboxes WHERE desired_state = 'running' AND expires_at < now() "
                           "ORDER BY expires_at LIMIT 100",
                           "desired_state = 'running' AND expires_at < now()", "sandbox.expired", "ttl", ret_changed);
}

int store_retry_deletes(PGconn *c, const store_limits_t *lim, int *ret_changed)
{
    /* A sandbox that should be gone, whose last delete failed a while ago
     * and nothing else is deleting it: try again (never in a tight loop). */
    return request_deletes(c, lim,
                           "SELECT s.id FROM sandboxes s WHERE s.desired_state = 'deleted' AND s.phase <> 'deleted' "
                           "AND NOT EXISTS (SELECT 1 FROM operations o WHERE o.sandbox_id = s.id AND o.kind = 'delete' "
                           "  AND (o.state IN ('pending', 'admitted', 'leased', 'running', 'succeeded') "
                           "       OR o.finished_at > now() - interval '30 seconds')) "
                           "ORDER BY s.updated_at LIMIT 100",
                           "desired_state = 'deleted' AND phase <> 'deleted'", NULL, "retry", ret_changed);
}

int store_mark_lost_workers(PGconn *c, const store_limits_t *lim, int *ret_changed)
{
    char tmo[24];
    snprintf(tmo, sizeof tmo, "%lld", (long long)lim->worker_timeout_seconds);
    const char *p[] = { tmo };
    PGresult *r = db_exec(c,
                          "WITH lost AS (UPDATE workers SET state = 'lost', updated_at = now() "
                          "  WHERE state IN ('ready', 'draining') "
                          "  AND last_heartbeat < now() - make_interval(secs => $1::bigint) RETURNING id, name) "
                          "INSERT INTO events (kind, data) SELECT 'worker.lost', "
                          "  jsonb_build_object('worker', name, 'worker_id', id) FROM lost",
                          1, p);
    if (!r)
        return SBX_EDB;
    *ret_changed += cmd_rows(r);
    PQclear(r);
    /* Running sandboxes of lost workers are lost, and their share of
     * capacity is released. (Operations in flight there resolve through
     * their leases, which no heartbeat extends any more.) */
    r = db_exec(c, "SELECT s.id FROM sandboxes s JOIN workers w ON w.id = s.worker_id "
                   "WHERE w.state = 'lost' AND s.phase = 'running' LIMIT 500", 0, NULL);
    if (!r)
        return SBX_EDB;
    int rc = 0;
    for (int i = 0; i < PQntuples(r) && rc == 0; i++) {
        const char *sbx = db_get(r, i, 0);
        if (db_begin(c) < 0) {
            rc = SBX_EDB;
            break;
        }
        const char *q[] = { sbx };
        PGresult *l = db_exec(c, "SELECT 1 FROM sandboxes WHERE id = $1 AND phase = 'running' FOR UPDATE SKIP LOCKED",
                              1, q);
        bool mine = l && PQntuples(l) == 1;
        PQclear(l);
        if (!mine) {
            db_rollback(c);
            continue;
        }
        if (sandbox_set_phase(c, sbx, PH_LOST, NULL, 0, NULL) < 0 || sandbox_release_allocation(c, sbx) < 0 ||
            db_commit(c) < 0) {
            db_rollback(c);
            rc = SBX_EDB;
            break;
        }
        (*ret_changed)++;
    }
    PQclear(r);
    return rc;
}

/* Runs one bounded DELETE until it removes less than a batch. */
static int prune_batches(PGconn *c, const char *sql, const char *seconds, long long *ret_rows)
{
    for (int i = 0; i < SBX_RETENTION_MAX_BATCHES; i++) {
        const char *p[] = { seconds };
        PGresult *r = db_exec(c, sql, 1, p);
        if (!r)
            return SBX_EDB;
        int n = cmd_rows(r);
        PQclear(r);
        *ret_rows += n;
        if (n < SBX_RETENTION_BATCH)
            break;
    }
    return 0;
}

#define STR_(x) #x
#define STR(x) STR_(x)

int store_prune(PGconn *c, int64_t operations_seconds, int64_t events_seconds, store_pruned_t *ret_pruned)
{
    memset(ret_pruned, 0, sizeof *ret_pruned);
    char ops_s[32], ev_s[32];
    snprintf(ops_s, sizeof ops_s, "%lld", (long long)operations_seconds);
    snprintf(ev_s, sizeof ev_s, "%lld", (long long)events_seconds);
    int rc;
    if ((rc = prune_batches(c,
                            "DELETE FROM events WHERE id IN (SELECT id FROM events "
                            "  WHERE ts < now() - make_interval(secs => $1::bigint) ORDER BY ts "
                            "  LIMIT " STR(SBX_RETENTION_BATCH) " FOR UPDATE SKIP LOCKED)",
                            ev_s, &ret_pruned->events)) < 0 ||
        (rc = prune_batches(c,
                            "DELETE FROM operations WHERE id IN (SELECT id FROM operations "
                            "  WHERE finished_at < now() - make_interval(secs => $1::bigint) "
                            "  LIMIT " STR(SBX_RETENTION_BATCH) " FOR UPDATE SKIP LOCKED)",
                            ops_s, &ret_pruned->operations)) < 0 ||
        (rc = prune_batches(c,
                            "DELETE FROM routes WHERE id IN (SELECT id FROM routes "
                            "  WHERE state = 'removed' AND removed_at < now() - make_interval(secs => $1::bigint) "
                            "  LIMIT " STR(SBX_RETENTION_BATCH) " FOR UPDATE SKIP LOCKED)",
                            ops_s, &ret_pruned->routes)) < 0)
        return rc;
    /* A deleted sandbox goes once nothing refers to it any more. */
    rc = prune_batches(c,
                       "WITH gone AS (SELECT s.id FROM sandboxes s "
                       "  WHERE s.phase = 'deleted' AND s.deleted_at < now() - make_interval(secs => $1::bigint) "
                       "  AND NOT EXISTS (SELECT 1 FROM operations o WHERE o.sandbox_id = s.id) "
                       "  AND NOT EXISTS (SELECT 1 FROM routes r WHERE r.sandbox_id = s.id AND r.state = 'active') "
                       "  LIMIT " STR(SBX_RETENTION_BATCH) " FOR UPDATE SKIP LOCKED), "
                       "r AS (DELETE FROM routes WHERE sandbox_id IN (SELECT id FROM gone)) "
                       "DELETE FROM sandboxes WHERE id IN (SELECT id FROM gone)",
                       ops_s, &ret_pruned->sandboxes);
    return rc;
}
