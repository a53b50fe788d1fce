/* /healthz, /readyz and /metrics: what load balancers, orchestrators and
 * Prometheus ask the controller. */
#include "api.h"
#include "db.h"
#include "jsonx.h"
#include "metrics.h"
#include "migrate.h"
#include "sbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The rendered page stays far below this; the cap only bounds a bug. */
#define METRICS_MAX_BYTES (8u * 1024u * 1024u)

void api_healthz(req_t *rq)
{
    json_object *o = json_object_new_object();
    jsonx_add_str(o, "status", "ok");
    http_reply_json(rq, 200, o);
}

/* Checks the thread's connection and the schema; err says what failed. */
static int database_ready(req_t *rq, char *err, size_t errlen)
{
    if (http_db(rq) < 0) {
        snprintf(err, errlen, "database unreachable: %s", db_last_error());
        return -1;
    }
    char why[400];
    if (migrate_check_current(rq->db, why, sizeof why) < 0) {
        snprintf(err, errlen, "database not ready: %s", why);
        return -1;
    }
    return 0;
}

void api_readyz(req_t *rq)
{
    char err[512] = "";
    bool ok = database_ready(rq, err, sizeof err) == 0;
    json_object *o = json_object_new_object();
    jsonx_add_str(o, "status", ok ? "ready" : "unready");
    json_object *checks = json_object_new_object();
    json_object *db = json_object_new_object();
    json_object_object_add(db, "ok", json_object_new_boolean(ok));
    if (!ok)
        jsonx_add_str(db, "error", err);
    json_object_object_add(checks, "database", db);
    json_object_object_add(o, "checks", checks);
    http_reply_json(rq, ok ? 200 : 503, o);
}

/* One gauge family from a query whose rows are (label values..., value). */
static int render_query(sbuf_t *out, PGconn *c, const char *name, const char *help, const char *const *label_names,
                        int nlabels, const char *sql)
{
    PGresult *r = db_exec(c, sql, 0, NULL);
    if (!r)
        return -1;
    int rc = sbuf_printf(out, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name);
    for (int i = 0; rc == 0 && i < PQntuples(r); i++) {
        char labels[512] = "";
        size_t n = 0;
        for (int k = 0; k < nlabels; k++) {
            char one[256];
            metrics_labels(one, sizeof one, label_names[k], db_get(r, i, k) ? db_get(r, i, k) : "", NULL);
            int w = snprintf(labels + n, sizeof labels - n, "%s%s", k ? "," : "", one);
            if (w < 0 || (size_t)w >= sizeof labels - n)
                break;
            n += (size_t)w;
        }
        const char *v = db_get(r, i, nlabels);
        rc = nlabels ? sbuf_printf(out, "%s{%s} %s\n", name, labels, v ? v : "0")
                     : sbuf_printf(out, "%s %s\n", name, v ? v : "0");
    }
    PQclear(r);
    return rc;
}

/* A snapshot of the tables: what exists now, by state. Each query reads a
 * small table or groups by indexed columns; retention bounds operations. */
static int render_database(sbuf_t *out, PGconn *c)
{
    static const char *const kind_state[] = { "kind", "state" };
    static const char *const phase[] = { "phase" };
    static const char *const state[] = { "state" };
    static const char *const state_resource[] = { "state", "resource" };
    if (render_query(out, c, "sandbox_operations", "Operations in the database, by kind and state.", kind_state, 2,
                     "SELECT kind, state, count(*) FROM operations GROUP BY 1, 2 ORDER BY 1, 2") < 0 ||
        render_query(out, c, "sandbox_sandboxes", "Sandboxes in the database, by phase.", phase, 1,
                     "SELECT phase, count(*) FROM sandboxes GROUP BY 1 ORDER BY 1") < 0 ||
        render_query(out, c, "sandbox_workers", "Registered workers, by state.", state, 1,
                     "SELECT state, count(*) FROM workers GROUP BY 1 ORDER BY 1") < 0 ||
        render_query(out, c, "sandbox_workers_capacity", "Capacity of the workers, by worker state and resource "
                     "(cpu in millicores, memory in bytes).", state_resource, 2,
                     "SELECT state, r, sum(v) FROM workers, LATERAL (VALUES ('cpu_millis', cpu_millis::numeric), "
                     "('memory_bytes', memory_mib::numeric * 1048576), ('slots', slots::numeric)) AS x(r, v) "
                     "GROUP BY 1, 2 ORDER BY 1, 2") < 0 ||
        render_query(out, c, "sandbox_workers_allocated", "Allocated on the workers, by worker state and resource "
                     "(cpu in millicores, memory in bytes).", state_resource, 2,
                     "SELECT state, r, sum(v) FROM workers, LATERAL (VALUES ('cpu_millis', alloc_cpu_millis::numeric), "
                     "('memory_bytes', alloc_memory_mib::numeric * 1048576), ('slots', alloc_slots::numeric)) AS x(r, v) "
                     "GROUP BY 1, 2 ORDER BY 1, 2") < 0 ||
        render_query(out, c, "sandbox_routes_active", "Active public routes.", NULL, 0,
                     "SELECT count(*) FROM routes WHERE state = 'active'") < 0 ||
        render_query(out, c, "sandbox_events_last_id", "Id of the newest event.", NULL, 0,
                     "SELECT coalesce(max(id), 0) FROM events") < 0 ||
        render_query(out, c, "sandbox_db_connections", "Connections of every sandboxd process to this database, "
                     "by PostgreSQL state (active, idle, idle in transaction, ...).", state, 1,
                     "SELECT coalesce(state, 'unknown'), count(*) FROM pg_stat_activity "
                     "WHERE datname = current_database() AND application_name = 'sandboxd' GROUP BY 1 ORDER BY 1") < 0)
        return -1;
    return 0;
}

void api_metrics(req_t *rq)
{
    sbuf_t out;
    sbuf_init(&out, METRICS_MAX_BYTES);
    bool db_up = false;
    if (http_db(rq) == 0) {
        sbuf_t snap;
        sbuf_init(&snap, METRICS_MAX_BYTES / 2);
        if (render_database(&snap, rq->db) == 0) {
            db_up = true;
            sbuf_append(&out, snap.data ? snap.data : "", snap.len);
        }
        sbuf_release(&snap);
    }
    sbuf_printf(&out,
                "# HELP sandbox_database_up Whether this scrape could read the database (1) or not (0).\n"
                "# TYPE sandbox_database_up gauge\nsandbox_database_up %d\n",
                db_up ? 1 : 0);
    metrics_render(&out);
    http_reply_text(rq, 200, "text/plain; version=0.0.4; charset=utf-8", out.data ? out.data : "", out.len);
    sbuf_release(&out);
}
