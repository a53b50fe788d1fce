/* The API's route table (api_routes[]) and its lookups: which row a request
 * fits, 404 vs 405, who may call it, and its label for metrics and logs. */
#include "server_int.h"
#include "api.h"
#include "client_files.h"

#include <stddef.h>
#include <string.h>

static void api_worker_drain_on(req_t *rq, const char *name) { api_worker_drain(rq, name, true); }
static void api_worker_drain_off(req_t *rq, const char *name) { api_worker_drain(rq, name, false); }

#define DENY_CLIENT "a %s token cannot call client endpoints"
#define DENY_WORKER "worker endpoints need a worker token, not a %s token"

/* Adding an endpoint is a row here and its handler in an api_*.c file. */
static const api_route_t api_routes[] = {
    { EVHTTP_REQ_GET, "/healthz", RR_NONE, RF_ROUTINE | RF_HEAD, NULL, api_healthz, NULL, NULL },
    { EVHTTP_REQ_GET, "/readyz", RR_NONE, RF_ROUTINE | RF_HEAD, NULL, api_readyz, NULL, NULL },
    { EVHTTP_REQ_GET, "/metrics", RR_NONE, RF_ROUTINE | RF_HEAD, NULL, api_metrics, NULL, NULL },
    { EVHTTP_REQ_POST, "/v1/sandboxes", RR_CLIENT, RF_OPERATION, DENY_CLIENT, api_sandbox_create, NULL, NULL },
    { EVHTTP_REQ_GET, "/v1/sandboxes", RR_CLIENT, 0, DENY_CLIENT, api_sandbox_list, NULL, NULL },
    { EVHTTP_REQ_GET, "/v1/sandboxes/{id}", RR_CLIENT, 0, DENY_CLIENT, NULL, api_sandbox_get, NULL },
    { EVHTTP_REQ_DELETE, "/v1/sandboxes/{id}", RR_CLIENT, RF_OPERATION, DENY_CLIENT, NULL, api_sandbox_delete,
      NULL },
    { EVHTTP_REQ_POST, "/v1/sandboxes/{id}/exec", RR_CLIENT, RF_OPERATION, DENY_CLIENT, NULL, api_sandbox_exec,
      NULL },
    { EVHTTP_REQ_POST, "/v1/sandboxes/{id}/extend", RR_CLIENT, RF_OPERATION, DENY_CLIENT, NULL, api_sandbox_extend,
      NULL },
    { EVHTTP_REQ_PATCH, "/v1/sandboxes/{id}/network", RR_CLIENT, RF_OPERATION, DENY_CLIENT, NULL,
      api_sandbox_network, NULL },
    { EVHTTP_REQ_GET, "/v1/sandboxes/{id}/network/log", RR_CLIENT, 0, DENY_CLIENT, NULL, api_sandbox_network_log,
      NULL },
    { EVHTTP_REQ_POST, "/v1/sandboxes/{id}/pause", RR_CLIENT, RF_OPERATION, DENY_CLIENT, NULL, api_sandbox_pause,
      NULL },
    { EVHTTP_REQ_POST, "/v1/sandboxes/{id}/resume", RR_CLIENT, RF_OPERATION, DENY_CLIENT, NULL, api_sandbox_resume,
      NULL },
    { EVHTTP_REQ_POST, "/v1/sandboxes/{id}/snapshots", RR_CLIENT, RF_OPERATION, DENY_CLIENT, NULL,
      api_snapshot_create, NULL },
    { EVHTTP_REQ_GET, "/v1/snapshots", RR_CLIENT, 0, DENY_CLIENT, api_snapshot_list, NULL, NULL },
    { EVHTTP_REQ_GET, "/v1/snapshots/{id}", RR_CLIENT, 0, DENY_CLIENT, NULL, api_snapshot_get, NULL },
    { EVHTTP_REQ_DELETE, "/v1/snapshots/{id}", RR_CLIENT, 0, DENY_CLIENT, NULL, api_snapshot_delete, NULL },
    { EVHTTP_REQ_POST, "/v1/snapshots/{id}/copies", RR_CLIENT, RF_OPERATION, DENY_CLIENT, NULL, api_snapshot_copy,
      NULL },
    { EVHTTP_REQ_POST, "/v1/secrets", RR_CLIENT, 0, DENY_CLIENT, api_secret_create, NULL, NULL },
    { EVHTTP_REQ_GET, "/v1/secrets", RR_CLIENT, 0, DENY_CLIENT, api_secret_list, NULL, NULL },
    { EVHTTP_REQ_DELETE, "/v1/secrets/{id}", RR_CLIENT, 0, DENY_CLIENT, NULL, api_secret_delete, NULL },
    { EVHTTP_REQ_POST, "/v1/volumes", RR_CLIENT, RF_OPERATION, DENY_CLIENT, api_volume_create, NULL, NULL },
    { EVHTTP_REQ_GET, "/v1/volumes", RR_CLIENT, 0, DENY_CLIENT, api_volume_list, NULL, NULL },
    { EVHTTP_REQ_GET, "/v1/volumes/{id}", RR_CLIENT, 0, DENY_CLIENT, NULL, api_volume_get, NULL },
    { EVHTTP_REQ_DELETE, "/v1/volumes/{id}", RR_CLIENT, 0, DENY_CLIENT, NULL, api_volume_delete, NULL },
    { EVHTTP_REQ_GET, "/v1/templates", RR_CLIENT, 0, DENY_CLIENT, api_template_list, NULL, NULL },
    { EVHTTP_REQ_GET, "/v1/templates/{id}", RR_CLIENT, 0, DENY_CLIENT, NULL, api_template_get, NULL },
    { EVHTTP_REQ_DELETE, "/v1/templates/{id}", RR_CLIENT, 0, DENY_CLIENT, NULL, api_template_delete, NULL },
    { EVHTTP_REQ_POST, "/v1/templates/{id}/builds", RR_CLIENT, RF_OPERATION, DENY_CLIENT, NULL, api_build_create,
      NULL },
    { EVHTTP_REQ_GET, "/v1/templates/{id}/builds", RR_CLIENT, 0, DENY_CLIENT, NULL, api_build_list, NULL },
    { EVHTTP_REQ_GET, "/v1/templates/{id}/builds/{build}", RR_CLIENT, 0, DENY_CLIENT, NULL, NULL, api_build_get },
    { EVHTTP_REQ_DELETE, "/v1/templates/{id}/builds/{build}", RR_CLIENT, 0, DENY_CLIENT, NULL, NULL,
      api_build_cancel },
    { EVHTTP_REQ_PUT, "/v1/build-files/{id}", RR_CLIENT, 0, DENY_CLIENT, NULL, api_build_file_put, NULL },
    { EVHTTP_REQ_GET, "/v1/sandboxes/{id}/logs", RR_CLIENT, 0, DENY_CLIENT, NULL, api_sandbox_logs, NULL },
    { EVHTTP_REQ_PUT, "/v1/sandboxes/{id}/files", RR_CLIENT, RF_OPERATION, DENY_CLIENT, NULL, api_sandbox_files_put,
      NULL },
    { EVHTTP_REQ_GET, "/v1/sandboxes/{id}/files", RR_CLIENT, 0, DENY_CLIENT, NULL, api_sandbox_files_get, NULL },
    { EVHTTP_REQ_POST, "/v1/sandboxes/{id}/shell", RR_CLIENT, RF_OPERATION, DENY_CLIENT, NULL, api_sandbox_shell,
      NULL },
    { EVHTTP_REQ_POST, "/v1/sandboxes/{id}/routes", RR_CLIENT, RF_OPERATION, DENY_CLIENT, NULL, api_route_share,
      NULL },
    { EVHTTP_REQ_GET, "/v1/sandboxes/{id}/routes", RR_CLIENT, 0, DENY_CLIENT, NULL, api_routes_list, NULL },
    { EVHTTP_REQ_DELETE, "/v1/sandboxes/{id}/routes/{route}", RR_CLIENT, RF_OPERATION, DENY_CLIENT, NULL, NULL,
      api_route_unshare },
    { EVHTTP_REQ_GET, "/v1/operations/{id}", RR_CLIENT, 0, DENY_CLIENT, NULL, api_operation_get, NULL },
    { EVHTTP_REQ_GET, "/v1/operations/{id}/output", RR_CLIENT, 0, DENY_CLIENT, NULL, api_operation_output, NULL },
    { EVHTTP_REQ_POST, "/v1/operations/{id}/cancel", RR_CLIENT, RF_OPERATION, DENY_CLIENT, NULL, api_operation_cancel,
      NULL },
    { EVHTTP_REQ_GET, "/v1/openapi.json", RR_NONE, RF_HEAD, NULL, api_openapi, NULL, NULL },
    { EVHTTP_REQ_GET, "/setup.sh", RR_NONE, RF_HEAD, NULL, client_setup_route, NULL, NULL },
    { EVHTTP_REQ_GET, "/client/{file}", RR_NONE, RF_HEAD, NULL, NULL, client_file_route, NULL },
    { EVHTTP_REQ_GET, "/v1/version", RR_CLIENT, 0, DENY_CLIENT, api_version, NULL, NULL },
    { EVHTTP_REQ_GET, "/v1/images", RR_CLIENT, 0, DENY_CLIENT, api_images_list, NULL, NULL },
    { EVHTTP_REQ_GET, "/v1/events", RR_CLIENT, 0, "a %s token cannot read events", api_events_list, NULL, NULL },
    { EVHTTP_REQ_POST, "/v1/pools", RR_CLIENT, 0, DENY_CLIENT, api_pool_create, NULL, NULL },
    { EVHTTP_REQ_GET, "/v1/pools", RR_CLIENT, 0, DENY_CLIENT, api_pool_list, NULL, NULL },
    { EVHTTP_REQ_GET, "/v1/pools/{id}", RR_CLIENT, 0, DENY_CLIENT, NULL, api_pool_get, NULL },
    { EVHTTP_REQ_DELETE, "/v1/pools/{id}", RR_CLIENT, 0, DENY_CLIENT, NULL, api_pool_delete, NULL },
    { EVHTTP_REQ_POST, "/v1/tenants", RR_CLIENT, 0, DENY_CLIENT, api_tenant_create, NULL, NULL },
    { EVHTTP_REQ_GET, "/v1/tenants", RR_CLIENT, 0, DENY_CLIENT, api_tenant_list, NULL, NULL },
    { EVHTTP_REQ_GET, "/v1/tenants/{id}", RR_CLIENT, 0, DENY_CLIENT, NULL, api_tenant_get, NULL },
    { EVHTTP_REQ_DELETE, "/v1/tenants/{id}", RR_CLIENT, 0, DENY_CLIENT, NULL, api_tenant_delete, NULL },
    { EVHTTP_REQ_PUT, "/v1/tenants/{id}/policy", RR_CLIENT, 0, DENY_CLIENT, NULL, api_tenant_set_policy, NULL },
    { EVHTTP_REQ_POST, "/v1/tokens", RR_CLIENT, 0, DENY_CLIENT, api_token_create, NULL, NULL },
    { EVHTTP_REQ_GET, "/v1/tokens", RR_CLIENT, 0, DENY_CLIENT, api_token_list, NULL, NULL },
    { EVHTTP_REQ_DELETE, "/v1/tokens/{id}", RR_CLIENT, 0, DENY_CLIENT, NULL, api_token_revoke, NULL },
    { EVHTTP_REQ_GET, "/v1/workers", RR_ADMIN, 0, "listing workers needs an admin token, not a %s token",
      api_worker_list, NULL, NULL },
    { EVHTTP_REQ_POST, "/v1/workers/{id}/drain", RR_ADMIN, 0, "draining workers needs an admin token, not a %s token",
      NULL, api_worker_drain_on, NULL },
    { EVHTTP_REQ_POST, "/v1/workers/{id}/resume", RR_ADMIN, 0,
      "resuming workers needs an admin token, not a %s token", NULL, api_worker_drain_off, NULL },
    { EVHTTP_REQ_POST, "/v1/workers/register", RR_WORKER, 0, DENY_WORKER, api_worker_register, NULL, NULL },
    { EVHTTP_REQ_POST, "/v1/workers/{id}/heartbeat", RR_WORKER, RF_ROUTINE, DENY_WORKER, NULL, api_worker_heartbeat,
      NULL },
    { EVHTTP_REQ_GET, "/v1/workers/{id}/poll", RR_WORKER, RF_ROUTINE, DENY_WORKER, NULL, api_worker_poll, NULL },
    { EVHTTP_REQ_POST, "/v1/workers/{id}/report", RR_WORKER, 0, DENY_WORKER, NULL, api_worker_report, NULL },
    { EVHTTP_REQ_POST, "/v1/workers/{id}/output", RR_WORKER, RF_ROUTINE, DENY_WORKER, NULL, api_worker_output, NULL },
    { EVHTTP_REQ_POST, "/v1/workers/{id}/network-log", RR_WORKER, 0, DENY_WORKER, NULL, api_worker_network_log,
      NULL },
    { EVHTTP_REQ_POST, "/v1/workers/{id}/sessions", RR_WORKER, 0, DENY_WORKER, NULL, api_worker_sessions, NULL },
    { EVHTTP_REQ_GET, "/v1/workers/{id}/snapshots/{snapshot}/export", RR_WORKER, 0, DENY_WORKER, NULL, NULL,
      api_worker_snapshot_export },
};
#define API_NROUTES (sizeof api_routes / sizeof api_routes[0])

size_t api_route_count(void)
{
    return API_NROUTES;
}

const api_route_t *api_route_at(size_t i)
{
    return i < API_NROUTES ? &api_routes[i] : NULL;
}

/* True when rq's path fits tmpl segment by segment; fills ret_params with
 * the segments {x} stood for (at most 2). A literal segment of a template
 * wins over a {x} of another one because literal rows are not shadowed:
 * no two templates of the table fit the same path. */
static bool route_path_fits(const char *tmpl, const req_t *rq, const char *ret_params[2])
{
    int seg = 0, np = 0;
    const char *t = tmpl;
    while (*t == '/') {
        t++;
        size_t l = strcspn(t, "/");
        if (seg >= rq->nsegs || l == 0)
            return false;
        if (t[0] == '{') {
            if (np < 2)
                ret_params[np++] = rq->segs[seg];
        } else if (strlen(rq->segs[seg]) != l || memcmp(rq->segs[seg], t, l) != 0) {
            return false;
        }
        seg++;
        t += l;
    }
    return seg == rq->nsegs;
}

static bool route_method_fits(const api_route_t *r, enum evhttp_cmd_type m)
{
    return r->method == m || ((r->flags & RF_HEAD) && m == EVHTTP_REQ_HEAD && r->method == EVHTTP_REQ_GET);
}

/* The row for rq: *ret_path the first row whose path fits (any method; NULL
 * when none), the return value the row whose method fits too (NULL: none). */
const api_route_t *route_lookup_in(const api_route_t *table, size_t n, const req_t *rq,
                                   const api_route_t **ret_path, const char *ret_params[2])
{
    *ret_path = NULL;
    for (size_t i = 0; i < n; i++) {
        const char *params[2] = { NULL, NULL };
        if (!route_path_fits(table[i].tmpl, rq, params))
            continue;
        if (!*ret_path)
            *ret_path = &table[i];
        if (route_method_fits(&table[i], rq->method)) {
            ret_params[0] = params[0];
            ret_params[1] = params[1];
            return &table[i];
        }
    }
    return NULL;
}

const api_route_t *route_lookup(const req_t *rq, const api_route_t **ret_path, const char *ret_params[2])
{
    return route_lookup_in(api_routes, API_NROUTES, rq, ret_path, ret_params);
}

/* The route's label for metrics and logs: its template, or "other". */
const char *route_template(const req_t *rq)
{
    const api_route_t *path;
    const char *params[2];
    const api_route_t *r = route_lookup(rq, &path, params);
    return r ? r->tmpl : path ? path->tmpl : "other";
}

bool route_role_ok(route_role_t need, role_t have)
{
    switch (need) {
    case RR_NONE: return true;
    case RR_CLIENT: return have == ROLE_ADMIN || have == ROLE_MEMBER;
    case RR_ADMIN: return have == ROLE_ADMIN;
    case RR_WORKER: return have == ROLE_WORKER;
    }
    return false;
}

const char *method_name(enum evhttp_cmd_type m)
{
    switch (m) {
    case EVHTTP_REQ_GET: return "GET";
    case EVHTTP_REQ_POST: return "POST";
    case EVHTTP_REQ_PUT: return "PUT";
    case EVHTTP_REQ_DELETE: return "DELETE";
    case EVHTTP_REQ_HEAD: return "HEAD";
    case EVHTTP_REQ_PATCH: return "PATCH";
    case EVHTTP_REQ_OPTIONS: return "OPTIONS";
    default: return "OTHER";
    }
}

/* The row of a template route_template returned (NULL for "other"). */
static const api_route_t *route_of_template(const char *tmpl)
{
    for (size_t i = 0; i < API_NROUTES; i++)
        if (api_routes[i].tmpl == tmpl)
            return &api_routes[i];
    return NULL;
}

/* Polls, heartbeats and probes are frequent and routine: debug level. */
bool route_is_routine(const char *tmpl)
{
    const api_route_t *r = route_of_template(tmpl);
    return r && (r->flags & RF_ROUTINE);
}

/* The probes answer without the database (readyz and metrics report it). */
bool route_is_probe(const char *tmpl)
{
    const api_route_t *r = route_of_template(tmpl);
    return r && r->role == RR_NONE;
}
