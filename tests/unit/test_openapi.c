/* The OpenAPI document (docs/openapi.json, embedded in the controller) and
 * the code agree: every row of the route table has its operation in the
 * document and every operation of the document is a row (method and path),
 * the probes and the document itself need no token there and everything else
 * does, and the document's error codes are the error table's, each with its
 * status. A route, a code or a status changed on one side only fails here. */
#include <check.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "check_util.h"
#include "errors.h"
#include "openapi.h"
#include "server_int.h"

static json_object *doc;

static void load(void)
{
    doc = json_tokener_parse(openapi_json);
    ck_assert_msg(doc != NULL, "the embedded docs/openapi.json does not parse");
}

static void unload(void)
{
    json_object_put(doc);
    doc = NULL;
}

static json_object *get(json_object *o, const char *key)
{
    json_object *v = NULL;
    return o && json_object_object_get_ex(o, key, &v) ? v : NULL;
}

static const char *method_key(enum evhttp_cmd_type m)
{
    switch (m) {
    case EVHTTP_REQ_GET: return "get";
    case EVHTTP_REQ_POST: return "post";
    case EVHTTP_REQ_PUT: return "put";
    case EVHTTP_REQ_DELETE: return "delete";
    case EVHTTP_REQ_PATCH: return "patch";
    default: return NULL;
    }
}

/* The route table's row for (method, path), or NULL. */
static const api_route_t *row_of(const char *method, const char *path)
{
    for (size_t i = 0; i < api_route_count(); i++) {
        const api_route_t *r = api_route_at(i);
        const char *m = method_key(r->method);
        if (m && strcmp(m, method) == 0 && strcmp(r->tmpl, path) == 0)
            return r;
    }
    return NULL;
}

/* An operation says it needs no token with "security": []. */
static bool needs_no_token(json_object *op)
{
    json_object *sec = get(op, "security");
    return sec && json_object_is_type(sec, json_type_array) && json_object_array_length(sec) == 0;
}

START_TEST(test_every_route_is_in_the_document)
{
    load();
    json_object *paths = get(doc, "paths");
    ck_assert_ptr_nonnull(paths);
    for (size_t i = 0; i < api_route_count(); i++) {
        const api_route_t *r = api_route_at(i);
        const char *m = method_key(r->method);
        ck_assert_msg(m != NULL, "route %s has a method the document cannot say", r->tmpl);
        json_object *op = get(get(paths, r->tmpl), m);
        ck_assert_msg(op != NULL, "%s %s is in the route table but not in docs/openapi.json", m, r->tmpl);
        ck_assert_msg(needs_no_token(op) == (r->role == RR_NONE),
                      "%s %s: the document says it %s a token, the route table that it %s", m, r->tmpl,
                      needs_no_token(op) ? "needs no" : "needs", r->role == RR_NONE ? "needs none" : "needs one");
        ck_assert_msg(get(op, "operationId") && get(op, "responses"), "%s %s has no operationId or responses", m,
                      r->tmpl);
    }
    unload();
}
END_TEST

START_TEST(test_every_documented_operation_is_a_route)
{
    load();
    static const char *const methods[] = { "get", "put", "post", "delete", "options", "head", "patch", "trace" };
    int n = 0;
    json_object_object_foreach(get(doc, "paths"), path, item) {
        for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
            if (!get(item, methods[i]))
                continue;
            n++;
            ck_assert_msg(row_of(methods[i], path) != NULL,
                          "docs/openapi.json has %s %s, which the route table (controller/server_routes.c) lacks",
                          methods[i], path);
        }
    }
    ck_assert_int_eq(n, (int)api_route_count());
    unload();
}
END_TEST

START_TEST(test_error_codes_and_statuses_agree)
{
    load();
    json_object *ec = get(get(get(doc, "components"), "schemas"), "ErrorCode");
    json_object *names = get(ec, "enum"), *statuses = get(ec, "x-status");
    ck_assert_msg(names && statuses, "components.schemas.ErrorCode needs enum and x-status");
    ck_assert_int_eq((int)json_object_array_length(names), API__COUNT);
    for (int c = 0; c < API__COUNT; c++) {
        const api_code_info_t *info = api_code_info((api_code_t)c);
        bool listed = false;
        for (size_t i = 0; i < json_object_array_length(names); i++)
            listed |= strcmp(json_object_get_string(json_object_array_get_idx(names, i)), info->name) == 0;
        ck_assert_msg(listed, "error code %s (common/errors.c) is not in ErrorCode's enum", info->name);
        json_object *st = get(statuses, info->name);
        ck_assert_msg(st != NULL, "ErrorCode's x-status has no status for %s", info->name);
        ck_assert_msg(json_object_get_int(st) == info->http_status, "%s: the document says %d, common/errors.c %d",
                      info->name, json_object_get_int(st), info->http_status);
    }
    /* and nothing the table lacks */
    for (size_t i = 0; i < json_object_array_length(names); i++) {
        const char *name = json_object_get_string(json_object_array_get_idx(names, i));
        ck_assert_msg(api_code_parse(name) >= 0, "ErrorCode lists %s, which common/errors.c does not have", name);
    }
    unload();
}
END_TEST

/* Each status an operation lists as an error names a code the table has at
 * that status: a documented 418 or a 409 on a route that cannot answer one
 * would mislead a client's error mapping. */
START_TEST(test_listed_error_statuses_exist)
{
    load();
    json_object_object_foreach(get(doc, "paths"), path, item) {
        json_object_object_foreach(item, method, op) {
            json_object_object_foreach(get(op, "responses"), status, resp) {
                (void)resp;
                int st = atoi(status);
                if (st < 400)
                    continue;
                bool some = false;
                for (int c = 0; c < API__COUNT; c++)
                    some |= api_code_info((api_code_t)c)->http_status == st;
                /* /readyz answers its own 503 body, not an error code's */
                ck_assert_msg(some || strcmp(path, "/readyz") == 0, "%s %s lists status %d, which no error code has",
                              method, path, st);
            }
        }
    }
    unload();
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("openapi");
    unit_tcase_add(s, "document", UNIT_TESTS(
        test_every_route_is_in_the_document,
        test_every_documented_operation_is_a_route,
        test_error_codes_and_statuses_agree,
        test_listed_error_statuses_exist,
    ));
    return s;
}
