/* What controller/server.c and controller/server_routes.c share: the route
 * table's row type and its lookups (docs/architecture.md, "How to add an
 * endpoint"). Internal to the HTTP server. */
#ifndef SBX_SERVER_INT_H
#define SBX_SERVER_INT_H

#include <event2/http.h>
#include <stdbool.h>
#include <stddef.h>

#include "server.h"

/* Who may call a route: nobody needs a token (the probes), or a client
 * (admin or member), an admin, or a worker token. */
typedef enum { RR_NONE, RR_CLIENT, RR_ADMIN, RR_WORKER } route_role_t;

/* RF_ROUTINE: frequent and routine (probes, polls, heartbeats), logged at
 * debug. RF_HEAD: HEAD is answered like GET. RF_OPERATION: the request
 * starts an operation, so the tenant's operation rate applies. */
enum { RF_ROUTINE = 1u, RF_HEAD = 2u, RF_OPERATION = 4u };

/* One endpoint: its method and path template ({x} matches one segment and
 * is passed to the handler, in order), who may call it, and the handler
 * taking as many path parameters as the template has (h0, h1 or h2). The
 * template is also the route's metrics label and access-log field: ids
 * become {id}, so label sets stay few whatever clients send. */
typedef struct api_route {
    enum evhttp_cmd_type method;
    const char *tmpl;
    route_role_t role;
    unsigned flags;
    const char *deny;   /* the 403 for another role; %s is the token's role */
    void (*h0)(req_t *rq);
    void (*h1)(req_t *rq, const char *a);
    void (*h2)(req_t *rq, const char *a, const char *b);
} api_route_t;

/* The table's rows, for tests that compare it with the OpenAPI document
 * (tests/unit/test_openapi.c): how many, and row i (NULL past the end). */
size_t api_route_count(void);
const api_route_t *api_route_at(size_t i);

/* The row for rq: *ret_path the first row whose path fits (any method; NULL
 * when none), the return value the row whose method fits too (NULL: none). */
const api_route_t *route_lookup(const req_t *rq, const api_route_t **ret_path, const char *ret_params[2]);
/* The same over another table (the E2B dialect's, controller/e2b.c). */
const api_route_t *route_lookup_in(const api_route_t *table, size_t n, const req_t *rq,
                                   const api_route_t **ret_path, const char *ret_params[2]);
/* The route's label for metrics and logs: its template, or "other". */
const char *route_template(const req_t *rq);
/* Whether a token of role have may call a route that needs need. */
bool route_role_ok(route_role_t need, role_t have);
/* The method's name for logs and metrics ("OTHER" for the rest). */
const char *method_name(enum evhttp_cmd_type m);
/* Polls, heartbeats and probes are frequent and routine: logged at debug. */
bool route_is_routine(const char *tmpl);
/* The probes answer without the database (readyz and metrics report it). */
bool route_is_probe(const char *tmpl);

/* A client request's token (NULL: none; missing is the 401's message):
 * its request rate checked before and after the lookup (429), the token
 * authenticated into rq->auth (401, 503), the log scope entered. 0, or
 * < 0 once answered. route() does this for /v1; controller/e2b.c for the
 * E2B dialects, whose token comes in other headers. */
int server_client_auth(req_t *rq, const char *token, const char *missing);
/* After the token: 404 when no row's path fits (what names the dialect in
 * the message: "" or "E2B "), 405 when none takes the method, 403 for a
 * token of the wrong role, 429 when the row starts an operation over the
 * tenant's rate. 0, or < 0 once answered. */
int server_route_checks(req_t *rq, const api_route_t *path, const api_route_t *r, const char *what);
/* Runs the row's handler with its path parameters. */
void server_route_call(req_t *rq, const api_route_t *r, const char *params[2]);
/* The E2B dialects under /e2b (controller/e2b.c). */
void e2b_route(req_t *rq);
/* /console and its files (console.c). */
void console_route(req_t *rq);
#endif
