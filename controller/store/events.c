/* Reads of the events table for the events API: the commit-safe horizon and
 * the cursor query, each served by one index (PK, events_tenant,
 * events_sandbox, events_operation). */
#include "store_int.h"

int store_events_horizon(PGconn *c, int64_t *ret_horizon, int64_t *ret_newest)
{
    /* Two statements on purpose: the newest id must be read with a snapshot
     * taken after the horizon was computed. */
    PGresult *r = db_exec(c, "SELECT coalesce(sandbox_events_horizon(), 0)", 0, NULL);
    if (!r)
        return SBX_EDB;
    int64_t h = PQntuples(r) == 1 ? db_get_ll(r, 0, 0) : 0;
    PQclear(r);
    r = db_exec(c, "SELECT coalesce(max(id), 0) FROM events", 0, NULL);
    if (!r)
        return SBX_EDB;
    *ret_newest = PQntuples(r) == 1 ? db_get_ll(r, 0, 0) : 0;
    *ret_horizon = h;
    PQclear(r);
    return 0;
}

/* Appends " AND <cond>" naming parameter $n+1 to sql and the value to p. */
static void add_cond(char *sql, size_t n, const char *fmt, const char **p, int *np, const char *value)
{
    size_t l = strlen(sql);
    char cond[96];
    snprintf(cond, sizeof cond, fmt, *np + 1);
    snprintf(sql + l, n - l, " AND %s", cond);
    p[(*np)++] = value;
}

int store_events_list(PGconn *c, const events_query_t *q, int64_t horizon, json_object **ret_events,
                      int64_t *ret_last, api_error_t *err)
{
    char sql[1024], hs[24], as[24], ls[16];
    const char *p[8];
    int np = 0;
    snprintf(hs, sizeof hs, "%lld", (long long)horizon);
    snprintf(as, sizeof as, "%lld", (long long)(q->tail > 0 ? 0 : q->after));
    snprintf(ls, sizeof ls, "%d", q->tail > 0 ? q->tail : q->limit);
    /* Only the conditions asked for, so the planner sees one index to use:
     * the sandbox's or operation's when filtered, else the tenant's, else
     * the primary key. The tenant then is a filter on few rows. */
    snprintf(sql, sizeof sql, " FROM events e LEFT JOIN tenants tn ON tn.id = e.tenant_id WHERE e.id <= $1::bigint");
    p[np++] = hs;
    if (q->tail <= 0)
        add_cond(sql, sizeof sql, "e.id > $%d::bigint", p, &np, as);
    if (q->sandbox_id[0])
        add_cond(sql, sizeof sql, "e.sandbox_id = $%d", p, &np, q->sandbox_id);
    if (q->operation_id[0])
        add_cond(sql, sizeof sql, "e.operation_id = $%d", p, &np, q->operation_id);
    if (q->scope)
        add_cond(sql, sizeof sql, "e.tenant_id = $%d", p, &np, q->scope);
    if (q->kind[0])
        add_cond(sql, sizeof sql, q->kind_prefix ? "starts_with(e.kind, $%d)" : "e.kind = $%d", p, &np, q->kind);
    size_t l = strlen(sql);
    snprintf(sql + l, sizeof sql - l, " ORDER BY e.id %s LIMIT $%d::int", q->tail > 0 ? "DESC" : "ASC", np + 1);
    p[np++] = ls;
    PGresult *r = store__exec_cols(c, &store__t_event, "SELECT ", sql, np, p);
    if (!r) {
        api_error_set(err, API_UNAVAILABLE, "database unavailable: %s", db_last_error());
        return SBX_EDB;
    }
    int n = PQntuples(r);
    json_object *arr = json_object_new_array();
    int64_t last = 0;
    for (int i = 0; i < n; i++) {
        int row = q->tail > 0 ? n - 1 - i : i;
        json_object *e = store__row_json(&store__t_event, r, row);
        jsonx_get_int(e, "id", &last);
        json_object_array_add(arr, e);
    }
    PQclear(r);
    *ret_events = arr;
    *ret_last = last;
    return 0;
}
