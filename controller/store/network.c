/* A live change of a sandbox's egress rules (issue 33, docs/network.md): an
 * operation of kind "network" leased to the worker the sandbox is on, as a
 * pause is, whose request holds the new rules (within the tenant's); the
 * worker hands them to its egress filter and its success writes them into
 * the sandbox's spec, with a sandbox.network event. */
#include "store_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int store_sandbox_network(PGconn *c, const store_limits_t *lim, const char *scope, const char *sandbox_id,
                          const egress_rules_t *rules, const char *idempotency_key, const char *request_hash,
                          const char *created_by, json_object **ret, api_error_t *err)
{
    static const char kind[] = "network";
    char tenant_id[SBX_ID_MAX], phase[24], desired[16], op_id[SBX_ID_MAX];
    sbx_worker_t w;
    policy_t pol;
    int rc = store__sandbox_request_begin(c, scope, sandbox_id, idempotency_key, kind, request_hash, ret, tenant_id,
                                          phase, desired, &w, &pol, err);
    if (rc != 0)
        return rc > 0 ? 0 : rc;
    /* the tighter of tenant and request, as at create */
    egress_rules_t eff;
    memset(&eff, 0, sizeof eff);
    rc = egress_rules_within(&pol.egress, rules, "egress", &eff, err);
    policy_release(&pol);
    if (rc < 0) {
        db_rollback(c);
        return rc;
    }
    if (strcmp(phase, "running") != 0 || strcmp(desired, "running") != 0) {
        int r;
        if (strcmp(desired, "running") == 0 && strcmp(phase, "paused") == 0)
            r = api_error_set(err, API_CONFLICT, "sandbox %s is paused: resume it (sandbox resume %s), then change "
                              "its rules", sandbox_id, sandbox_id);
        else
            r = store__not_running(c, sandbox_id, phase, desired, "a network change", err);
        db_rollback(c);
        egress_rules_release(&eff);
        return r;
    }
    if ((rc = store__refuse_if_away(c, &w, "change the rules of", sandbox_id, err)) < 0) {
        egress_rules_release(&eff);
        return rc;
    }
    /* Only a sandbox made with rules is on the worker's filtered network;
     * one change at a time (the last one asked for is the one that stays). */
    PGresult *r = db_exec(c,
                          "SELECT s.spec ? 'egress', (SELECT o.id FROM operations o WHERE o.sandbox_id = s.id "
                          "  AND o.kind IN ('network', 'pause', 'resume') AND o.state IN ('pending', 'admitted', "
                          "  'leased', 'running') ORDER BY o.created_at LIMIT 1) FROM sandboxes s WHERE s.id = $1",
                          1, (const char *const[]){ sandbox_id });
    if (!r || PQntuples(r) != 1) {
        PQclear(r);
        db_rollback(c);
        egress_rules_release(&eff);
        return store__db_error(err);
    }
    bool filtered = db_get(r, 0, 0) && strcmp(db_get(r, 0, 0), "t") == 0;
    char open_op[SBX_ID_MAX] = "";
    if (db_get(r, 0, 1))
        snprintf(open_op, sizeof open_op, "%s", db_get(r, 0, 1));
    PQclear(r);
    if (!filtered || *open_op) {
        db_rollback(c);
        egress_rules_release(&eff);
        if (!filtered)
            return api_error_set(err, API_CONFLICT, "sandbox %s was created without egress rules: its network is "
                                 "not filtered by name (create one with --allow/--deny, or egress in the request)",
                                 sandbox_id);
        return api_error_set(err, API_CONFLICT, "sandbox %s has a network change, pause or resume in progress "
                             "(operation %s): wait for it (sandbox wait %s)", sandbox_id, open_op, open_op);
    }
    json_object *req = json_object_new_object();
    jsonx_add(req, "egress", egress_rules_to_json(&eff));
    egress_rules_release(&eff);
    char *req_text = jsonx_dump(req);
    json_object_put(req);
    if (!req_text) {
        db_rollback(c);
        return api_error_set(err, API_INTERNAL, "out of memory");
    }
    json_object *op = NULL;
    bool leased = false;
    op_origin_t from = { .idempotency_key = idempotency_key, .request_hash = request_hash, .created_by = created_by };
    rc = store__worker_op_insert(c, lim, tenant_id, sandbox_id, &w, kind, req_text, &from, NULL, op_id, &leased, &op);
    free(req_text);
    return store__worker_op_end(c, rc, tenant_id, kind, &from, op_id, leased, op, ret, err);
}

int store__sandbox_network_set(PGconn *c, const char *op_id, const char *sandbox_id)
{
    const char *p[] = { op_id, sandbox_id };
    PGresult *r = db_exec(c,
                          "UPDATE sandboxes s SET spec = jsonb_set(s.spec, '{egress}', o.request->'egress'), "
                          "  updated_at = now() FROM operations o "
                          "WHERE o.id = $1 AND s.id = $2 AND o.request ? 'egress' "
                          "RETURNING s.tenant_id, (o.request->'egress')::text",
                          2, p);
    if (!r)
        return SBX_EDB;
    int rc = 0;
    if (PQntuples(r) == 1) {
        json_object *ed = json_object_new_object();
        jsonx_add(ed, "egress", store__parse_json_text(db_get(r, 0, 1)));
        rc = store__event_add(c, db_get(r, 0, 0), "sandbox.network", sandbox_id, op_id, ed);
    }
    PQclear(r);
    return rc < 0 ? SBX_EDB : 0;
}

/* ---- the network log (docs/network.md#the-network-log) ------------------ */

static metric_family_t *m_egress, *m_egress_bytes;
static pthread_once_t netlog_metrics_once = PTHREAD_ONCE_INIT;

static void netlog_metrics_init(void)
{
    m_egress = metrics_family("sandbox_egress_total", METRIC_COUNTER,
                              "DNS queries and TCP connections of sandboxes with egress rules that their workers' "
                              "filters reported, by tenant, kind (dns, tcp) and verdict (allowed, refused).",
                              NULL, 0);
    m_egress_bytes = metrics_family("sandbox_egress_bytes_total", METRIC_COUNTER,
                                    "Bytes the workers' egress filters relayed for sandboxes' allowed connections, "
                                    "by tenant and direction (out: from the sandbox, in: to it).",
                                    NULL, 0);
}

/* One reported record, checked: what the table takes. */
static int netlog_check(json_object *e, size_t i, api_error_t *err)
{
    static const char *const known[] = { "at_ms", "sandbox", "tenant", "kind", "name", "addr", "port", "qtype",
                                         "verdict", "why", "bytes_out", "bytes_in", NULL };
    if (!json_object_is_type(e, json_type_object))
        return api_error_set(err, API_INVALID_ARGUMENT, "records[%zu] is not an object", i);
    json_object_object_foreach(e, k, v) {
        (void)v;
        bool ok = false;
        for (int j = 0; known[j] && !ok; j++)
            ok = strcmp(k, known[j]) == 0;
        if (!ok)
            return api_error_set(err, API_INVALID_ARGUMENT, "records[%zu]: unknown field \"%.40s\"", i, k);
    }
    const char *sbx = jsonx_get_str(e, "sandbox"), *kind = jsonx_get_str(e, "kind");
    const char *verdict = jsonx_get_str(e, "verdict"), *name = jsonx_get_str(e, "name");
    const char *why = jsonx_get_str(e, "why"), *addr = jsonx_get_str(e, "addr");
    int64_t at = 0, port = 0, bo = 0, bi = 0;
    if (!sbx || !ids_valid("sbx", sbx))
        return api_error_set(err, API_INVALID_ARGUMENT, "records[%zu].sandbox is not a sandbox id", i);
    if (!kind || (strcmp(kind, "dns") != 0 && strcmp(kind, "tcp") != 0 && strcmp(kind, "udp") != 0))
        return api_error_set(err, API_INVALID_ARGUMENT, "records[%zu].kind is dns, tcp or udp", i);
    if (!verdict || (strcmp(verdict, "allowed") != 0 && strcmp(verdict, "refused") != 0))
        return api_error_set(err, API_INVALID_ARGUMENT, "records[%zu].verdict is allowed or refused", i);
    if (!name || strlen(name) > EGRESS_DOMAIN_MAX || !why || strlen(why) > 200 || (addr && strlen(addr) > 47))
        return api_error_set(err, API_INVALID_ARGUMENT, "records[%zu]: name (at most %d bytes) and why (at most "
                             "200) are required, addr at most 47 bytes", i, EGRESS_DOMAIN_MAX);
    if (!utf8_valid(name, strlen(name)) || utf8_has_control(name) || !utf8_valid(why, strlen(why)) ||
        utf8_has_control(why) || (addr && (!utf8_valid(addr, strlen(addr)) || utf8_has_control(addr))))
        return api_error_set(err, API_INVALID_ARGUMENT, "records[%zu]: text that is not printable UTF-8", i);
    if (!jsonx_get_int(e, "at_ms", &at) || at < 0 || at > 32503680000000LL)
        return api_error_set(err, API_INVALID_ARGUMENT, "records[%zu].at_ms is a time in milliseconds", i);
    if ((jsonx_get_int(e, "port", &port) || jsonx_get_int(e, "qtype", &port)) && (port < 0 || port > 65535))
        return api_error_set(err, API_INVALID_ARGUMENT, "records[%zu]: port or qtype from 0 to 65535", i);
    if ((jsonx_get_int(e, "bytes_out", &bo) && bo < 0) || (jsonx_get_int(e, "bytes_in", &bi) && bi < 0))
        return api_error_set(err, API_INVALID_ARGUMENT, "records[%zu]: bytes are not negative", i);
    return 0;
}

int store_network_log_add(PGconn *c, const char *worker_id, json_object *records, int64_t *ret_recorded,
                          int64_t *ret_skipped, api_error_t *err)
{
    *ret_recorded = *ret_skipped = 0;
    size_t n = json_object_is_type(records, json_type_array) ? json_object_array_length(records) : 0;
    if (!json_object_is_type(records, json_type_array) || n > STORE_NETLOG_BATCH_MAX)
        return api_error_set(err, API_INVALID_ARGUMENT, "records is an array of at most %d", STORE_NETLOG_BATCH_MAX);
    /* A record the table cannot take is left out, counted, and named once
     * in the log: the rest of the batch is still worth keeping. */
    json_object *good = json_object_new_array();
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(records, i);
        api_error_t why;
        if (netlog_check(e, i, &why) == 0) {
            json_object_array_add(good, json_object_get(e));
        } else if ((*ret_skipped)++ == 0) {
            log_warn("controller", "worker %s reported a network record the log cannot take: %s", worker_id,
                     why.message);
        }
    }
    if (json_object_array_length(good) == 0) {
        json_object_put(good);
        return 0;
    }
    char *text = jsonx_dump(good), keep[16];
    json_object_put(good);
    if (!text)
        return api_error_set(err, API_INTERNAL, "out of memory");
    snprintf(keep, sizeof keep, "%d", STORE_NETLOG_KEEP);
    const char *p[] = { worker_id, text, keep };
    /* Only for sandboxes this worker runs (a worker token cannot write into
     * another's log); the tenant is the sandbox's, not what the worker says.
     * Then each sandbox keeps its newest $3. The answer: what was recorded,
     * by tenant, kind and verdict, for the metrics. */
    PGresult *r = db_exec(c,
                          "WITH x AS (SELECT * FROM jsonb_to_recordset($2::jsonb) AS x(at_ms bigint, sandbox text, "
                          "  kind text, verdict text, name text, addr text, port int, qtype int, why text, "
                          "  bytes_out bigint, bytes_in bigint)), "
                          "ins AS (INSERT INTO network_log (tenant_id, sandbox_id, at, kind, verdict, name, addr, "
                          "  port, why, bytes_out, bytes_in) "
                          "  SELECT s.tenant_id, s.id, to_timestamp(x.at_ms / 1000.0), x.kind, x.verdict, x.name, "
                          "  x.addr, coalesce(x.port, x.qtype), x.why, x.bytes_out, x.bytes_in "
                          "  FROM x JOIN sandboxes s ON s.id = x.sandbox AND s.worker_id = $1 "
                          "  RETURNING tenant_id, sandbox_id, kind, verdict, bytes_out, bytes_in), "
                          "cut AS (SELECT u.sandbox_id, (SELECT l.id FROM network_log l WHERE l.sandbox_id = "
                          "  u.sandbox_id ORDER BY l.id DESC OFFSET $3::int LIMIT 1) AS below "
                          "  FROM (SELECT DISTINCT sandbox_id FROM ins) u), "
                          "del AS (DELETE FROM network_log l USING cut WHERE l.sandbox_id = cut.sandbox_id "
                          "  AND l.id <= cut.below) "
                          "SELECT t.name, ins.kind, ins.verdict, count(*), coalesce(sum(ins.bytes_out), 0), "
                          "  coalesce(sum(ins.bytes_in), 0) FROM ins JOIN tenants t ON t.id = ins.tenant_id "
                          "GROUP BY 1, 2, 3",
                          3, p);
    free(text);
    if (!r)
        return store__db_error(err);
    pthread_once(&netlog_metrics_once, netlog_metrics_init);
    for (int i = 0; i < PQntuples(r); i++) {
        char labels[SBX_MAX_NAME_BYTES + 96];
        int64_t cnt = db_get_ll(r, i, 3);
        *ret_recorded += cnt;
        metrics_add(m_egress, metrics_labels(labels, sizeof labels, "tenant", db_get(r, i, 0), "kind",
                                             db_get(r, i, 1), "verdict", db_get(r, i, 2), NULL), (double)cnt);
        metrics_add(m_egress_bytes, metrics_labels(labels, sizeof labels, "tenant", db_get(r, i, 0), "direction",
                                                   "out", NULL), (double)db_get_ll(r, i, 4));
        metrics_add(m_egress_bytes, metrics_labels(labels, sizeof labels, "tenant", db_get(r, i, 0), "direction",
                                                   "in", NULL), (double)db_get_ll(r, i, 5));
    }
    PQclear(r);
    return 0;
}

int store_network_log_list(PGconn *c, const char *scope, const char *sandbox_id, int64_t after, int64_t limit,
                           const char *verdict, json_object **ret, api_error_t *err)
{
    char afters[24], limits[24];
    snprintf(afters, sizeof afters, "%lld", (long long)after);
    snprintf(limits, sizeof limits, "%lld", (long long)limit);
    const char *p[] = { sandbox_id, scope };
    PGresult *r = db_exec(c, "SELECT 1 FROM sandboxes s WHERE s.id = $1 AND ($2::text IS NULL OR s.tenant_id = $2)",
                          2, p);
    if (!r)
        return store__db_error(err);
    bool found = PQntuples(r) == 1;
    PQclear(r);
    if (!found)
        return api_error_set(err, API_NOT_FOUND, "no sandbox %.64s", sandbox_id);
    const char *q[] = { sandbox_id, afters, limits, verdict };
    r = db_exec(c,
                "SELECT id, " TS("at") ", kind, verdict, name, addr, port, why, bytes_out, bytes_in "
                "FROM network_log WHERE sandbox_id = $1 AND id > $2::bigint "
                "AND ($4::text IS NULL OR verdict = $4) ORDER BY id LIMIT $3::int",
                4, q);
    if (!r)
        return store__db_error(err);
    json_object *arr = json_object_new_array();
    int64_t last = after;
    for (int i = 0; i < PQntuples(r); i++) {
        json_object *e = json_object_new_object();
        last = db_get_ll(r, i, 0);
        jsonx_add_int(e, "id", last);
        jsonx_add_str(e, "at", db_get(r, i, 1));
        jsonx_add_str(e, "kind", db_get(r, i, 2));
        jsonx_add_str(e, "verdict", db_get(r, i, 3));
        jsonx_add_str(e, "name", db_get(r, i, 4));
        if (db_get(r, i, 5))
            jsonx_add_str(e, "addr", db_get(r, i, 5));
        if (db_get(r, i, 6))
            jsonx_add_int(e, strcmp(db_get(r, i, 2), "dns") == 0 ? "qtype" : "port", db_get_ll(r, i, 6));
        jsonx_add_str(e, "why", db_get(r, i, 7));
        if (db_get(r, i, 8))
            jsonx_add_int(e, "bytes_out", db_get_ll(r, i, 8));
        if (db_get(r, i, 9))
            jsonx_add_int(e, "bytes_in", db_get_ll(r, i, 9));
        json_object_array_add(arr, e);
    }
    PQclear(r);
    *ret = json_object_new_object();
    jsonx_add(*ret, "entries", arr);
    jsonx_add_int(*ret, "next_after", last);
    return 0;
}
