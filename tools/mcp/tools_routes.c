/* sandbox-mcp's route tools: sandbox_share, sandbox_routes, sandbox_unshare. */
#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "httpc.h"
#include "jsonx.h"
#include "limits.h"
#include "mcp.h"
#include "mcp_int.h"

json_object *tool_share(call_t *c, json_object *args)
{
    json_object *bad = NULL;
    const char *sbx = NULL, *idem = NULL, *auth = NULL;
    bool wait = true, done = false;
    int64_t port, ttl, tmo;
    char path[MCP_PATH_MAX];
    if (!tool_arg_str(args, "sandbox_id", &sbx, &bad) || !tool_arg_int(args, "port", 1, 65535, 0, &port, &bad) ||
        !tool_arg_int(args, "ttl_seconds", 10, INT32_MAX, 0, &ttl, &bad) || !tool_arg_str(args, "auth", &auth, &bad) ||
        !tool_arg_str(args, "idempotency_key", &idem, &bad) || !tool_arg_wait(args, true, &wait, &tmo, &bad) ||
        !tool_id_path(path, sizeof path, "/v1/sandboxes/", sbx, "/routes", &bad))
        return bad;
    client_share_spec_t spec = { .port = port, .ttl_seconds = { ttl, ttl > 0 }, .auth = auth };
    json_object *body = NULL;
    if (client_share_body(&spec, &body) < 0)
        return mcp_tool_error("internal", "out of memory");
    json_object *resp = NULL;
    json_object *failed = op_request(c, "POST", path, body, idem, "sharing a port of", wait, tmo, &resp, &done);
    json_object_put(body);
    if (failed)
        return failed;
    /* The answer's route has the URL; the finished operation's, the state
     * and expiry the route got: the result has both. */
    json_object *route = jsonx_get_obj(resp, "route");
    json_object *made = jsonx_get_obj(jsonx_get_obj(jsonx_get_obj(resp, "operation"), "result"), "route");
    if (!route) {
        json_object_put(resp);
        return mcp_tool_error("bad_response", "the share answer has no route");
    }
    if (made) {
        json_object_object_foreach(made, k, v)
            jsonx_add(route, k, v ? json_object_get(v) : NULL);
    }
    return mcp_tool_ok(resp);
}

json_object *tool_routes(call_t *c, json_object *args)
{
    json_object *bad = NULL;
    const char *sbx = NULL;
    bool all = false;
    char path[MCP_PATH_MAX];
    if (!tool_arg_str(args, "sandbox_id", &sbx, &bad) || !tool_arg_bool(args, "all", false, &all, &bad) ||
        !tool_id_path(path, sizeof path, "/v1/sandboxes/", sbx, all ? "/routes?all=true" : "/routes", &bad))
        return bad;
    return get_result(c, path);
}

json_object *tool_unshare(call_t *c, json_object *args)
{
    json_object *bad = NULL;
    const char *sbx = NULL, *rid = NULL;
    bool wait = true;
    int64_t tmo;
    char tail[MCP_PATH_MAX], path[MCP_PATH_MAX];
    if (!tool_arg_str(args, "sandbox_id", &sbx, &bad) || !tool_arg_str(args, "route_id", &rid, &bad) ||
        !tool_arg_wait(args, true, &wait, &tmo, &bad) ||
        !tool_id_path(tail, sizeof tail, "/routes/", rid, NULL, &bad) ||
        !tool_id_path(path, sizeof path, "/v1/sandboxes/", sbx, tail, &bad))
        return bad;
    return tool_op_result(c, "DELETE", path, NULL, "unsharing a route of", wait, tmo);
}
