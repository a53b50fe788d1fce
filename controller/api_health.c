/* /healthz, /readyz and /metrics: what load balancers, orchestrators and
 * Prometheus ask the controller. */
#include "api.h"
#include "migrate_data.h"
#include "openapi.h"
#include "version.h"
#include "db.h"
#include "store.h"
#include "jsonx.h"
#include "metrics.h"
#include "migrate.h"
#include "sbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The rendered page stays far below this; the cap only bounds a bug. */
#define METRICS_MAX_BYTES (8u * 1024u * 1024u)

/* GET /v1/version: what this controller is and how many workers run each
 * version, for `sandbox version` and an operator checking skew. */
void api_version(req_t *rq)
{
    json_object *o = json_object_new_object();
    jsonx_add_str(o, "version", SBX_VERSION);
    jsonx_add_str(o, "api", "v1");
    const char *last = migration_file_count > 0 ? migration_files[migration_file_count - 1].name : "";
    char schema[8] = "";
    snprintf(schema, sizeof schema, "%.4s", last);
    jsonx_add_str(o, "schema", schema);
    /* the workers' versions, counted (names are for admins: GET
     * /v1/workers); left out when the database does not answer */
    json_object *wv = NULL;
    if (http_db(rq) == 0 && store_worker_versions(rq->db, &wv) == 0)
        jsonx_add(o, "workers", wv);
    http_reply_json(rq, 200, o);
}

/* GET /v1/openapi.json: the API's OpenAPI document, as built in; no token,
 * so a client or a code generator can read it before it has one. */
void api_openapi(req_t *rq)
{
    http_reply_text(rq, 200, "application/json", openapi_json, openapi_json_len);
}

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

void api_metrics(req_t *rq)
{
    sbuf_t out;
    sbuf_init(&out, METRICS_MAX_BYTES);
    bool db_up = false;
    if (http_db(rq) == 0) {
        sbuf_t snap;
        sbuf_init(&snap, METRICS_MAX_BYTES / 2);
        if (store_stats_render(rq->db, &snap) == 0) {
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
