/* The database snapshot /metrics shows: what exists now, by state, as
 * Prometheus gauge families. Each query reads a small table or groups by
 * indexed columns; retention bounds operations. */
#include "store_int.h"
#include "sbuf.h"

/* One gauge family from a query whose rows are (label values..., value). */
typedef struct gauge {
    const char *name, *help;
    const char *labels[2];
    int nlabels;
    const char *sql;
} gauge_t;

/* A worker resource sum by state: capacity or what is allocated of it. */
#define WORKER_RESOURCES(cpu, mem, slots)                                                                         \
    "SELECT state, r, sum(v) FROM workers, LATERAL (VALUES ('cpu_millis', " cpu "::numeric), "                    \
    "('memory_bytes', " mem "::numeric * 1048576), ('slots', " slots "::numeric)) AS x(r, v) "                    \
    "GROUP BY 1, 2 ORDER BY 1, 2"

static const gauge_t gauges[] = {
    { "sandbox_operations", "Operations in the database, by kind and state.", { "kind", "state" }, 2,
      "SELECT kind, state, count(*) FROM operations GROUP BY 1, 2 ORDER BY 1, 2" },
    { "sandbox_sandboxes", "Sandboxes in the database, by phase.", { "phase" }, 1,
      "SELECT phase, count(*) FROM sandboxes GROUP BY 1 ORDER BY 1" },
    { "sandbox_workers", "Registered workers, by state.", { "state" }, 1,
      "SELECT state, count(*) FROM workers GROUP BY 1 ORDER BY 1" },
    { "sandbox_workers_capacity",
      "Capacity of the workers, by worker state and resource (cpu in millicores, memory in bytes).",
      { "state", "resource" }, 2, WORKER_RESOURCES("cpu_millis", "memory_mib", "slots") },
    { "sandbox_workers_allocated",
      "Allocated on the workers, by worker state and resource (cpu in millicores, memory in bytes).",
      { "state", "resource" }, 2, WORKER_RESOURCES("alloc_cpu_millis", "alloc_memory_mib", "alloc_slots") },
    { "sandbox_tenant_usage",
      "What each tenant's live sandboxes hold now, by tenant and resource (sandboxes; cpu in millicores; memory in "
      "bytes); a tenant holding nothing is left out.",
      { "tenant", "resource" }, 2,
      "SELECT tn.name, x.r, x.v FROM (SELECT tenant_id, sum(live) AS n, sum(live_cpu_millis) AS cpu, "
      "sum(live_memory_mib) AS mem FROM sandbox_usage_now WHERE worker_id = '' GROUP BY 1) u "
      "JOIN tenants tn ON tn.id = u.tenant_id AND tn.deleted_at IS NULL, "
      "LATERAL (VALUES ('sandboxes', u.n::numeric), ('cpu_millis', u.cpu::numeric), "
      "('memory_bytes', u.mem::numeric * 1048576)) AS x(r, v) WHERE u.n > 0 ORDER BY 1, 2" },
    { "sandbox_routes_active", "Active public routes.", { NULL }, 0,
      "SELECT count(*) FROM routes WHERE state = 'active'" },
    { "sandbox_events_last_id", "Id of the newest event.", { NULL }, 0, "SELECT coalesce(max(id), 0) FROM events" },
    { "sandbox_db_connections",
      "Connections of every sandboxd process to this database, by PostgreSQL state (active, idle, idle in "
      "transaction, ...).",
      { "state" }, 1,
      "SELECT coalesce(state, 'unknown'), count(*) FROM pg_stat_activity "
      "WHERE datname = current_database() AND application_name = 'sandboxd' GROUP BY 1 ORDER BY 1" },
};

static int render_gauge(sbuf_t *out, PGconn *c, const gauge_t *g)
{
    PGresult *r = db_exec(c, g->sql, 0, NULL);
    if (!r)
        return -1;
    int rc = sbuf_printf(out, "# HELP %s %s\n# TYPE %s gauge\n", g->name, g->help, g->name);
    for (int i = 0; rc == 0 && i < PQntuples(r); i++) {
        char labels[512] = "";
        size_t n = 0;
        for (int k = 0; k < g->nlabels; k++) {
            char one[256];
            metrics_labels(one, sizeof one, g->labels[k], db_get(r, i, k) ? db_get(r, i, k) : "", NULL);
            int w = snprintf(labels + n, sizeof labels - n, "%s%s", k ? "," : "", one);
            if (w < 0 || (size_t)w >= sizeof labels - n)
                break;
            n += (size_t)w;
        }
        const char *v = db_get(r, i, g->nlabels);
        rc = g->nlabels ? sbuf_printf(out, "%s{%s} %s\n", g->name, labels, v ? v : "0")
                        : sbuf_printf(out, "%s %s\n", g->name, v ? v : "0");
    }
    PQclear(r);
    return rc;
}

int store_stats_render(PGconn *c, sbuf_t *out)
{
    for (size_t i = 0; i < sizeof gauges / sizeof gauges[0]; i++)
        if (render_gauge(out, c, &gauges[i]) < 0)
            return -1;
    return 0;
}
