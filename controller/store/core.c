/* The store's shared core: roles, events, operation
 * compare-and-set transitions and sandbox phase changes. */
#include "store_int.h"

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

int store__db_error(api_error_t *err)
{
    api_error_set(err, API_UNAVAILABLE, "database unavailable: %s", db_last_error());
    return SBX_EDB;
}

json_object *store__parse_json_text(const char *s)
{
    if (!s)
        return NULL;
    /* What most columns hold (no labels, no selector): no tokener for
     * them, which a list of 100 sandboxes would otherwise make 200 times. */
    if (strcmp(s, "{}") == 0)
        return json_object_new_object();
    if (strcmp(s, "[]") == 0)
        return json_object_new_array();
    return jsonx_parse_stored(s);
}

/* Loads one operation as JSON (no scope check). */
int store__load_op(PGconn *c, const char *op_id, json_object **ret)
{
    return store__fetch_one(c, &store__t_op, " FROM operations o WHERE o.id = $1", 1, (const char *const[]){ op_id },
                            ret);
}

int store__load_sandbox(PGconn *c, const char *sandbox_id, json_object **ret)
{
    return store__fetch_one(c, &store__t_sandbox, SANDBOX_FROM "WHERE s.id = $1", 1,
                            (const char *const[]){ sandbox_id }, ret);
}

/* Runs sql; *ret_hit: it returned exactly one row. 0 or SBX_EDB. */
int store__one_row(PGconn *c, const char *sql, int n, const char *const *p, bool *ret_hit)
{
    PGresult *r = db_exec(c, sql, n, p);
    if (!r)
        return SBX_EDB;
    *ret_hit = PQntuples(r) == 1;
    PQclear(r);
    return 0;
}

int store_worker_unreachable(PGconn *c, const char *worker_id, char *ret, size_t len)
{
    if (!worker_id || !*worker_id)
        return 0;
    int rc = store__one_text(c,
                             "SELECT format('its worker %s is unreachable (%s since %s; its sandboxes are lost at %s "
                             "unless it returns)', name, unreachable_reason, " TS("unreachable_since") ", "
                             TS("lost_at") ") FROM workers WHERE id = $1 AND state = 'unreachable'",
                             1, (const char *const[]){ worker_id }, ret, len);
    return rc == SBX_ENOTFOUND ? 0 : rc < 0 ? rc : 1;
}

int store__refuse_if_away(PGconn *c, const sbx_worker_t *w, const char *what, const char *sandbox_id,
                          api_error_t *err)
{
    if (strcmp(w->state, "unreachable") != 0 && strcmp(w->state, "stopping") != 0)
        return 0;
    char why[400];
    int u = store__worker_away(c, w, why, sizeof why);
    db_rollback(c);
    if (u < 0)
        return store__db_error(err);
    return api_error_set(err, API_UNAVAILABLE, "cannot %s sandbox %s now: %s; retry once it is back", what, sandbox_id,
                         why);
}

int store__worker_away(PGconn *c, const sbx_worker_t *w, char *ret, size_t len)
{
    if (strcmp(w->state, "stopping") == 0) {
        snprintf(ret, len, "its worker %s is stopping (restarting)", w->name);
        return 0;
    }
    int u = store_worker_unreachable(c, w->id, ret, len);
    if (u == 0)
        snprintf(ret, len, "its worker %s is unreachable", w->name);
    return u < 0 ? u : 0;
}

/* Runs sql; the first column of its one row into ret (len bytes).
 * 0, SBX_ENOTFOUND (not exactly one row), SBX_EDB. */
int store__one_text(PGconn *c, const char *sql, int n, const char *const *p, char *ret, size_t len)
{
    PGresult *r = db_exec(c, sql, n, p);
    if (!r)
        return SBX_EDB;
    int rc = PQntuples(r) == 1 ? 0 : SBX_ENOTFOUND;
    if (rc == 0)
        snprintf(ret, len, "%s", db_get(r, 0, 0));
    PQclear(r);
    return rc;
}

/* Begins a transaction and runs head + t's list (an UPDATE … RETURNING).
 * 0 with the one row in *ret (the transaction open); SBX_ENOTFOUND or
 * SBX_EDB with it rolled back. */
int store__begin_returning(PGconn *c, const store_table_t *t, const char *head, int n, const char *const *p,
                           PGresult **ret)
{
    PGresult *r = db_begin(c) < 0 ? NULL : store__exec_cols(c, t, head, "", n, p);
    if (!r || PQntuples(r) != 1) {
        PQclear(r);
        db_rollback(c);
        return r ? SBX_ENOTFOUND : SBX_EDB;
    }
    *ret = r;
    return 0;
}

/* {"sandbox":…,"operation":…} (sandbox_id NULL: the operation alone) as
 * a new object in *ret; 0, or SBX_EDB with err set. */
int store__op_reply(PGconn *c, const char *sandbox_id, const char *op_id, json_object **ret, api_error_t *err)
{
    json_object *sbx = NULL, *op = NULL;
    if ((sandbox_id && store__load_sandbox(c, sandbox_id, &sbx) < 0) || store__load_op(c, op_id, &op) < 0) {
        if (sbx)
            json_object_put(sbx);
        return store__db_error(err);
    }
    *ret = json_object_new_object();
    if (sbx)
        jsonx_add(*ret, "sandbox", sbx);
    jsonx_add(*ret, "operation", op);
    return 0;
}

/* Appends an events row (same transaction as the change it describes). */
int store__event_add(PGconn *c, const char *tenant_id, const char *kind, const char *sandbox_id, const char *op_id,
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

static metric_family_t *m_op_stage, *m_op_duration, *m_op_finished;
metric_family_t *store__m_lease_expiries, *store__m_placed_now;
pthread_once_t store__metrics_once = PTHREAD_ONCE_INIT;

void store__metrics_init(void)
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
    store__m_placed_now = metrics_family("sandbox_operations_placed_on_request_total", METRIC_COUNTER,
                                         "Operations admitted and placed (leased, or finished or refused) in their "
                                         "own request's transaction rather than by the reconcile loop, by kind.",
                                         NULL, 0);
    store__m_lease_expiries = metrics_family("sandbox_lease_expiries_total", METRIC_COUNTER,
                                      "Leases that expired (the worker stopped renewing), by what followed: retried "
                                      "or failed.",
                                      NULL, 0);
}

/* Observes the stage that the transition to `to` ends; secs[] are the
 * seconds since created_at, leased_at and started_at (NULL: unknown). */
void store__op_observe(const char *kind, op_state_t to, const char *since_created, const char *since_leased,
                       const char *since_started)
{
    pthread_once(&store__metrics_once, store__metrics_init);
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
json_object *store__event_reason(const char *why)
{
    json_object *d = json_object_new_object();
    jsonx_add_str(d, "reason", why);
    return d;
}

/* The one place operations change state: asserts the table, then
 * UPDATE … WHERE id = $1 AND state = from and its events row, in one
 * statement (the event's data built from the updated row: the attempt, the
 * worker holding the lease, the error, an exec's exit code; never the
 * request or the output, which may hold secrets; event_data's members,
 * taken, come first). extra_set is appended to SET and may use $4… for
 * extra params. Returns 0, SBX_ECONFLICT when the state had moved, SBX_EDB. */
int store__op_cas(PGconn *c, const char *op_id, op_state_t from, op_state_t to, const char *extra_set, int nextra,
                  const char *const *extra, json_object *event_data)
{
    return store__op_cas_ex(c, op_id, from, to, extra_set, NULL, nextra, extra, event_data, NULL);
}

int store__op_cas_ex(PGconn *c, const char *op_id, op_state_t from, op_state_t to, const char *extra_set,
                     const char *extra_where, int nextra, const char *const *extra, json_object *event_data,
                     json_object **ret_op)
{
    char *ed = event_data ? jsonx_dump(event_data) : NULL;
    if (event_data)
        json_object_put(event_data);
    if (!op_transition_allowed(from, to)) {
        log_error("store", "refusing forbidden transition %s -> %s of %s", op_state_name(from), op_state_name(to),
                  op_id);
        free(ed);
        return SBX_EINVAL;
    }
    if (nextra > 8)
        nextra = 8;
    char sql[2048];
    snprintf(sql, sizeof sql,
             "WITH o AS (UPDATE operations SET state = $2, updated_at = now()%s%s%s "
             "  WHERE id = $1 AND state = $3%s%s RETURNING id, tenant_id, sandbox_id, kind, attempt, lease_worker_id, "
             "  error_code%s, left(error_message, 300) AS em, "
             "  result->'exit_code' AS ec, extract(epoch FROM now() - created_at) AS sc, "
             "  extract(epoch FROM now() - leased_at) AS sl, extract(epoch FROM now() - started_at) AS ss), "
             "e AS (INSERT INTO events (tenant_id, kind, sandbox_id, operation_id, data) "
             "  SELECT tenant_id, 'operation.' || $2::text, sandbox_id, $1, coalesce($%d::jsonb, '{}') || "
             "  jsonb_strip_nulls(jsonb_build_object('kind', kind, 'from', $3::text, 'to', $2::text, "
             "  'attempt', CASE WHEN attempt > 0 THEN attempt END, "
             "  'worker', (SELECT name FROM workers w WHERE w.id = o.lease_worker_id), 'error_code', error_code, "
             "  'error_message', CASE WHEN error_code IS NOT NULL THEN em END, "
             "  'exit_code', CASE WHEN jsonb_typeof(ec) = 'number' THEN ec END)) FROM o) "
             "%s",
             op_state_terminal(to) ? ", finished_at = now()"
             : to == OP_LEASED     ? ", leased_at = now(), started_at = NULL"
             : to == OP_RUNNING    ? ", started_at = now()"
                                   : "",
             extra_set ? ", " : "", extra_set ? extra_set : "", extra_where ? " AND " : "",
             extra_where ? extra_where : "",
             /* what the answer's operation shows (never the request, which
              * may be 512 KiB of stdin) */
             ret_op ? ", state, created_at, updated_at, finished_at, placement, result, error_message" : "",
             4 + nextra, ret_op ? "SELECT " : "SELECT o.kind, o.sc, o.sl, o.ss FROM o");
    const char *p[12] = { op_id, op_state_name(to), op_state_name(from) };
    for (int i = 0; i < nextra; i++)
        p[3 + i] = extra[i];
    p[3 + nextra] = ed;
    /* With ret_op: the table's columns, then the four above. */
    PGresult *r = ret_op ? store__exec_cols(c, &store__t_op, sql, ", o.kind, o.sc, o.sl, o.ss FROM o", 4 + nextra, p)
                         : db_exec(c, sql, 4 + nextra, p);
    free(ed);
    if (!r)
        return SBX_EDB;
    if (PQntuples(r) != 1) {
        PQclear(r);
        return SBX_ECONFLICT;
    }
    int k = ret_op ? PQnfields(r) - 4 : 0;
    store__op_observe(db_get(r, 0, k), to, db_get(r, 0, k + 1), db_get(r, 0, k + 2), db_get(r, 0, k + 3));
    if (ret_op)
        *ret_op = store__row_json(&store__t_op, r, 0);
    PQclear(r);
    return 0;
}

/* One step of store__op_insert's path: the event data store__op_cas would
 * have written for from → to (attempt and worker only once leased). */
static json_object *op_insert_step(const op_insert_t *o, op_state_t from, op_state_t to)
{
    json_object *d = json_object_new_object();
    jsonx_add_str(d, "kind", o->kind);
    if (from != to)
        jsonx_add_str(d, "from", op_state_name(from));
    jsonx_add_str(d, "to", op_state_name(to));
    if (to == OP_LEASED) {
        jsonx_add_int(d, "attempt", 1);
        if (o->worker_name)
            jsonx_add_str(d, "worker", o->worker_name);
    }
    json_object *ec = NULL;
    if (op_state_terminal(to) && o->result && json_object_object_get_ex(o->result, "exit_code", &ec) &&
        (json_object_is_type(ec, json_type_int) || json_object_is_type(ec, json_type_double)))
        jsonx_add(d, "exit_code", json_object_get(ec));
    return d;
}

/* {"kind","operation_id","data"}: one events row for STORE_EVENTS_INSERT. */
json_object *store__event_json(const char *kind, const char *op_id, json_object *data)
{
    json_object *e = json_object_new_object();
    jsonx_add_str(e, "kind", kind);
    if (op_id)
        jsonx_add_str(e, "operation_id", op_id);
    jsonx_add(e, "data", data ? data : json_object_new_object());
    return e;
}

int store__op_insert_events(const op_insert_t *o, json_object *arr)
{
    op_state_t path[3] = { OP_PENDING };
    int n = 1;
    if (o->state == OP_LEASED || o->state == OP_SUCCEEDED) {
        path[n++] = OP_ADMITTED;
        path[n++] = o->state;
    } else if (o->state != OP_PENDING) {
        json_object_put(o->pending_data);
        return SBX_EINVAL;
    }
    for (int i = 0; i < n; i++) {
        assert(i == 0 || op_transition_allowed(path[i - 1], path[i]));
        json_object *d = op_insert_step(o, i ? path[i - 1] : OP_PENDING, path[i]);
        if (i == 0 && o->pending_data) {
            json_object_object_foreach(o->pending_data, k, v) jsonx_add(d, k, json_object_get(v));
        }
        char kind[32];
        snprintf(kind, sizeof kind, "operation.%s", op_state_name(path[i]));
        json_object_array_add(arr, store__event_json(kind, o->id, d));
    }
    json_object_put(o->pending_data);
    return 0;
}

int store__op_insert(PGconn *c, const op_insert_t *o, json_object **ret_op)
{
    json_object *steps = json_object_new_array();
    if (store__op_insert_events(o, steps) < 0) {
        json_object_put(steps);
        return SBX_EINVAL;
    }
    char deadline[24], lease[24];
    snprintf(deadline, sizeof deadline, "%lld", (long long)o->deadline_seconds);
    snprintf(lease, sizeof lease, "%lld", (long long)o->lease_seconds);
    bool leased = o->state == OP_LEASED;
    char *steps_text = jsonx_dump(steps), *pl = leased && o->placement ? jsonx_dump(o->placement) : NULL,
         *res = o->state == OP_SUCCEEDED && o->result ? jsonx_dump(o->result) : NULL;
    json_object_put(steps);
    const char *p[] = { o->id, o->tenant_id, o->sandbox_id, o->kind, op_state_name(o->state), o->idempotency_key,
                        o->request_hash, o->request_text, deadline, o->created_by, leased ? o->worker_id : NULL,
                        lease, pl, res, steps_text };
    const store_table_t *t = &store__t_op;
    PGresult *r = store__exec_cols(
        c, t,
        "WITH o AS (INSERT INTO operations AS o (id, tenant_id, sandbox_id, kind, state, idempotency_key, "
        "  request_hash, request, deadline, created_by, attempt, lease_worker_id, lease_expires_at, leased_at, "
        "  placement, result, finished_at) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7, coalesce($8::jsonb, '{}'), now() + make_interval(secs => $9::bigint), "
        "  $10, CASE WHEN $11::text IS NULL THEN 0 ELSE 1 END, $11, CASE WHEN $11::text IS NOT NULL THEN "
        "  now() + make_interval(secs => $12::bigint) END, CASE WHEN $11::text IS NOT NULL THEN now() END, "
        "  $13::jsonb, $14::jsonb, CASE WHEN $5 IN ('succeeded', 'failed', 'cancelled') THEN now() END) "
        "RETURNING ",
        "), e AS (" STORE_EVENTS_INSERT("$2", "$3", "$15") ") SELECT * FROM o", 15, p);
    free(steps_text);
    free(pl);
    free(res);
    if (!r)
        return SBX_EDB;
    if (PQntuples(r) != 1) {
        PQclear(r);
        return SBX_EDB;
    }
    if (o->state != OP_PENDING)
        store__op_observe(o->kind, o->state, "0", NULL, NULL);
    if (ret_op)
        *ret_op = store__row_json(t, r, 0);
    PQclear(r);
    return 0;
}

/* Sets a sandbox's phase (with optional extra SET using $3…) and writes its
 * event, adding event_data's members (taken; may be NULL) to its data, in
 * one statement. A sandbox that stops running takes its routes with it in
 * the same statement: nothing can reach it through a route afterwards. */
static int sandbox_set_phase_ev(PGconn *c, const char *sandbox_id, sandbox_phase_t phase, const char *extra_set,
                                int nextra, const char *const *extra, json_object *event_data, const char *from)
{
    char *ed = event_data ? jsonx_dump(event_data) : NULL;
    if (event_data)
        json_object_put(event_data);
    if (nextra > 7)
        nextra = 7;
    bool gone = phase == PH_DELETING || phase == PH_DELETED || phase == PH_FAILED || phase == PH_LOST;
    char sql[2048];
    snprintf(sql, sizeof sql,
             "WITH u AS (UPDATE sandboxes SET phase = $2, updated_at = now()%s%s WHERE id = $1 "
             "  AND ($%d::text IS NULL OR phase = $%d) RETURNING tenant_id, worker_id, isolation), "
             "e AS (INSERT INTO events (tenant_id, kind, sandbox_id, data) SELECT tenant_id, 'sandbox.' || $2::text, "
             "  $1, coalesce($%d::jsonb, '{}') || jsonb_build_object('worker', "
             "  (SELECT name FROM workers w WHERE w.id = u.worker_id))%s FROM u)%s "
             "SELECT 1 FROM u",
             extra_set ? ", " : "", extra_set ? extra_set : "", 4 + nextra, 4 + nextra, 3 + nextra,
             phase == PH_SCHEDULED ? " || jsonb_build_object('isolation', isolation)" : "",
             gone ? ", g AS (UPDATE routes SET state = 'removed', removed_at = now(), "
                    "  removed_reason = 'sandbox ' || $2::text WHERE sandbox_id = $1 AND state = 'active' "
                    "  AND EXISTS (SELECT 1 FROM u) RETURNING id, tenant_id, port, removed_reason), "
                    "ge AS (INSERT INTO events (tenant_id, kind, sandbox_id, data) SELECT tenant_id, 'route.removed', "
                    "  $1, jsonb_build_object('route', id, 'port', port, 'reason', removed_reason) FROM g)"
                  : "");
    const char *p[11] = { sandbox_id, sandbox_phase_name(phase) };
    for (int i = 0; i < nextra; i++)
        p[2 + i] = extra[i];
    p[2 + nextra] = ed;
    p[3 + nextra] = from;
    PGresult *r = db_exec(c, sql, 4 + nextra, p);
    free(ed);
    if (!r)
        return SBX_EDB;
    int rc = PQntuples(r) == 1 ? 0 : SBX_ENOTFOUND;
    PQclear(r);
    return rc;
}

int store__sandbox_set_phase_if(PGconn *c, const char *sandbox_id, sandbox_phase_t phase, const char *from,
                                const char *extra_set, int nextra, const char *const *extra, json_object *event_data)
{
    return sandbox_set_phase_ev(c, sandbox_id, phase, extra_set, nextra, extra, event_data, from);
}

int store__sandbox_set_phase(PGconn *c, const char *sandbox_id, sandbox_phase_t phase, const char *extra_set,
                             int nextra, const char *const *extra)
{
    return sandbox_set_phase_ev(c, sandbox_id, phase, extra_set, nextra, extra, NULL, NULL);
}

/* Gives back the sandbox's share of its worker's capacity, once. It locks
 * the worker row: call it after every operation and sandbox row the
 * transaction will lock (lock order, docs/architecture.md "Concurrency"). */
int store__sandbox_release_allocation(PGconn *c, const char *sandbox_id)
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
int store__sandbox_fail_observed(PGconn *c, const char *sandbox_id, json_object *failure, const char *output_tail)
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
                                  2, x, ed, NULL);
    /* Its execs before its capacity: the worker row is locked last (lock
     * order, docs/architecture.md "Concurrency"), the execs in id order. */
    PGresult *r = rc < 0 ? NULL
                         : db_exec(c, "SELECT id, state FROM operations WHERE sandbox_id = $1 AND kind = 'exec' "
                                      "AND state IN ('pending', 'admitted', 'leased', 'running') ORDER BY id FOR UPDATE",
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
        int x2 = store__op_cas(c, db_get(r, i, 0), from, OP_FAILED, "error_code = $4, error_message = $5", 2, e,
                        store__event_reason("sandbox_failed"));
        if (x2 < 0 && x2 != SBX_ECONFLICT)
            rc = x2;
    }
    PQclear(r);
    if (rc == 0)
        rc = store__sandbox_release_allocation(c, sandbox_id) < 0 ? SBX_EDB : 0;
    free(ftext);
    json_object_put(failure);
    return rc;
}

int store__op_record_done(PGconn *c, const store_limits_t *lim, const char *kind, const char *tenant_id,
                          const char *sandbox_id, const op_origin_t *from, const char *request_text, const char *op_id,
                          json_object *result)
{
    char deadline[24];
    snprintf(deadline, sizeof deadline, "%lld", (long long)lim->deadline_seconds);
    const char *po[] = { op_id,          tenant_id, sandbox_id, from->idempotency_key, from->request_hash,
                         request_text,   deadline,  from->created_by, kind };
    if (db_run(c, "INSERT INTO operations (id, tenant_id, sandbox_id, kind, state, idempotency_key, request_hash, "
                  "request, deadline, created_by) VALUES ($1, $2, $3, $9, 'pending', $4, $5, $6::jsonb, "
                  "now() + make_interval(secs => $7::bigint), $8)",
               9, po) < 0)
        return SBX_EDB;
    json_object *ed = json_object_new_object();
    jsonx_add_str(ed, "kind", kind);
    jsonx_add_str(ed, "to", "pending");
    if (store__event_add(c, tenant_id, "operation.pending", sandbox_id, op_id, ed) < 0)
        return SBX_EDB;
    char *res = jsonx_dump(result);
    const char *x[] = { res };
    int rc = store__op_cas(c, op_id, OP_PENDING, OP_ADMITTED, NULL, 0, NULL, NULL);
    if (rc == 0)
        rc = store__op_cas(c, op_id, OP_ADMITTED, OP_SUCCEEDED, "result = $4::jsonb", 1, x, NULL);
    free(res);
    return rc == 0 ? 0 : SBX_EDB;
}

int store__cmd_rows(PGresult *r)
{
    const char *t = PQcmdTuples(r);
    return t && *t ? (int)strtol(t, NULL, 10) : 0;
}
