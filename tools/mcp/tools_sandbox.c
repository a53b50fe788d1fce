/* sandbox-mcp's sandbox and operation tools: sandbox_create, sandbox_wait,
 * sandbox_exec, sandbox_get, sandbox_list, sandbox_delete, sandbox_extend,
 * sandbox_pause, sandbox_resume, sandbox_network, sandbox_network_log, operation_get. */
#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "errors.h"
#include "httpc.h"
#include "jsonx.h"
#include "limits.h"
#include "mcp.h"
#include "mcp_int.h"

json_object *tool_create(call_t *c, json_object *args)
{
    json_object *bad = NULL;
    bool wait = false, done = false;
    int64_t tmo;
    const char *idem = NULL;
    if (!tool_arg_wait(args, false, &wait, &tmo, &bad) || !tool_arg_str(args, "idempotency_key", &idem, &bad))
        return bad;
    json_object *body = NULL;
    if (client_create_body_args(args, &body) < 0)
        return mcp_tool_error("internal", "out of memory");
    json_object *resp = NULL;
    json_object *failed = op_request(c, "POST", "/v1/sandboxes", body, idem, "created", wait, tmo, &resp, &done);
    json_object_put(body);
    if (failed)
        return failed;
    const char *sbx = jsonx_get_str(jsonx_get_obj(resp, "sandbox"), "id");
    if (!sbx) {
        json_object_put(resp);
        return mcp_tool_error("bad_response", "the create answer names no sandbox");
    }
    if (wait) {
        /* The sandbox as it is now (running once the create succeeded). */
        char path[MCP_PATH_MAX];
        json_object *got = NULL;
        api_err_t e;
        if (tool_id_path(path, sizeof path, "/v1/sandboxes/", sbx, NULL, &bad) &&
            api(c, "GET", path, NULL, NULL, deadline_in(MCP_REQUEST_TIMEOUT_MS), &got, &e) == 0 &&
            jsonx_get_obj(got, "sandbox"))
            jsonx_add(resp, "sandbox", json_object_get(jsonx_get_obj(got, "sandbox")));
        if (got)
            json_object_put(got);
        if (bad)
            json_object_put(bad);
    }
    return mcp_tool_ok(resp);
}

json_object *tool_wait(call_t *c, json_object *args)
{
    json_object *bad = NULL;
    int64_t tmo;
    const char *op_id = NULL;
    if (!tool_arg_str(args, "operation_id", &op_id, &bad) ||
        !tool_arg_int(args, "timeout_seconds", 1, MCP_WAIT_MAX_S, MCP_WAIT_DEFAULT_S, &tmo, &bad))
        return bad;
    json_object *op = NULL;
    bool done = false;
    json_object *failed = wait_outcome(c, op_id, tmo, &op, &done);
    if (failed)
        return failed;
    json_object *result = json_object_new_object();
    jsonx_add(result, "operation", op);
    jsonx_add_bool(result, "done", done);
    return mcp_tool_ok(result);
}

json_object *tool_exec(call_t *c, json_object *args)
{
    json_object *bad = NULL;
    const char *sbx = NULL;
    int64_t tmo, maxout;
    char path[MCP_PATH_MAX];
    if (!tool_arg_str(args, "sandbox_id", &sbx, &bad) ||
        !tool_arg_int(args, "timeout_seconds", 1, SBX_EXEC_TIMEOUT_MAX, MCP_EXEC_DEFAULT_S, &tmo, &bad) ||
        !tool_arg_int(args, "max_output_bytes", 1, SBX_EXEC_OUTPUT_CEILING, 0, &maxout, &bad) ||
        !tool_id_path(path, sizeof path, "/v1/sandboxes/", sbx, "/exec", &bad))
        return bad;
    bool detach = false;
    if (!tool_arg_bool(args, "detach", false, &detach, &bad))
        return bad;
    json_object *body = NULL;
    if (client_exec_body_args(args, &body) < 0)
        return mcp_tool_error("internal", "out of memory");
    jsonx_add_int(body, "timeout_seconds", tmo);   /* the tool's default when the call names none */
    json_object *resp = NULL;
    bool done = false;
    json_object *out =
        op_request(c, "POST", path, body, NULL, NULL, !detach, tmo + MCP_EXEC_SLACK_S, &resp, &done);
    json_object_put(body);
    if (out)
        return out;
    json_object *op = jsonx_get_obj(resp, "operation");
    const char *opid = jsonx_get_str(op, "id");
    if (detach) {
        /* Started: its output is read with sandbox_exec_output, ended with sandbox_cancel. */
        json_object *result = json_object_new_object();
        jsonx_add_str(result, "operation_id", opid);
        jsonx_add_str(result, "state", jsonx_get_str(op, "state"));
        jsonx_add_bool(result, "detached", true);
        out = mcp_tool_ok(result);
    } else if (!done) {
        char msg[200];
        snprintf(msg, sizeof msg, "exec %s did not finish within %llds; see operation_get", opid,
                 (long long)(tmo + MCP_EXEC_SLACK_S));
        out = mcp_tool_error("timeout", msg);
    } else {
        json_object *res = jsonx_get_obj(op, "result");
        json_object *result = json_object_new_object();
        jsonx_add_str(result, "operation_id", opid);
        static const char *const keys[] = { "exit_code", "signal", "timed_out", "duration_ms", "stdout", "stderr",
                                            "stdout_truncated", "stderr_truncated", "stdout_bytes", "stderr_bytes",
                                            "stdout_b64", "stderr_b64", NULL };
        for (int i = 0; keys[i]; i++)
            tool_arg_copy(result, res, keys[i]);
        out = mcp_tool_ok(result);
    }
    json_object_put(resp);
    return out;
}

static json_object *get_one(call_t *c, const char *prefix, const char *id_arg, json_object *args)
{
    json_object *bad = NULL;
    const char *id = NULL;
    char path[MCP_PATH_MAX];
    if (!tool_arg_str(args, id_arg, &id, &bad) || !tool_id_path(path, sizeof path, prefix, id, NULL, &bad))
        return bad;
    return get_result(c, path);
}

/* A new object with those of keys (NULL-terminated) that from has, not
 * null. */
static json_object *pick(json_object *from, const char *const *keys)
{
    json_object *o = json_object_new_object(), *v;
    for (; *keys; keys++)
        if (json_object_object_get_ex(from, *keys, &v) && v)
            jsonx_add(o, *keys, json_object_get(v));
    return o;
}

/* One operation as sandbox_get shows it: what it was and how it ended; the
 * output, the placement's scores and reasons and the history stay with
 * operation_get. */
static json_object *op_compact(json_object *op)
{
    static const char *const keys[] = { "id", "kind", "state", "attempt", "created_at", "finished_at", NULL };
    static const char *const ekeys[] = { "code", "message", NULL }, *const pkeys[] = { "worker", "summary", NULL };
    static const char *const rkeys[] = { "exit_code", "signal", "timed_out", "duration_ms", "cancelled", NULL };
    json_object *o = pick(op, keys), *err = jsonx_get_obj(op, "error"), *pl = jsonx_get_obj(op, "placement"),
                *res = jsonx_get_obj(op, "result");
    const char *kind = jsonx_get_str(op, "kind");
    if (err)
        jsonx_add(o, "error", pick(err, ekeys));
    if (pl)
        jsonx_add(o, "placement", pick(pl, pkeys));
    if (res && kind && strcmp(kind, "exec") == 0)
        jsonx_add(o, "result", pick(res, rkeys));
    return o;
}

/* sandbox_get's answer: the sandbox, its newest MCP_GET_OPS_MAX operations
 * compact (an agent's context pays for every byte: 35 execs made 10 KB). */
static void sandbox_compact(json_object *resp)
{
    json_object *ops = jsonx_get_arr(resp, "operations");
    if (!ops)
        return;
    size_t n = json_object_array_length(ops);
    json_object *out = json_object_new_array();
    for (size_t i = 0; i < n && i < MCP_GET_OPS_MAX; i++)
        json_object_array_add(out, op_compact(json_object_array_get_idx(ops, i)));
    jsonx_add(resp, "operations", out);
    jsonx_add_str(resp, "operations_note",
                  n > MCP_GET_OPS_MAX ? "the newest operations, in short; operation_get OPERATION_ID shows one whole "
                                        "(output, placement reasons, history)"
                                      : "in short; operation_get OPERATION_ID shows one whole (output, placement "
                                        "reasons, history)");
}

json_object *tool_get(call_t *c, json_object *args)
{
    json_object *bad = NULL;
    const char *id = NULL;
    char path[MCP_PATH_MAX];
    if (!tool_arg_str(args, "sandbox_id", &id, &bad) || !tool_id_path(path, sizeof path, "/v1/sandboxes/", id, NULL, &bad))
        return bad;
    return get_result_shaped(c, path, sandbox_compact);
}

json_object *tool_operation(call_t *c, json_object *args)
{
    return get_one(c, "/v1/operations/", "operation_id", args);
}

json_object *tool_exec_output(call_t *c, json_object *args)
{
    json_object *bad = NULL;
    const char *op = NULL;
    int64_t offset, wait;
    char path[MCP_PATH_MAX], full[MCP_PATH_MAX + 64];
    if (!tool_arg_str(args, "operation_id", &op, &bad) ||
        !tool_arg_int(args, "offset", 0, SBX_OUTPUT_OFFSET_MAX, 0, &offset, &bad) ||
        !tool_arg_int(args, "wait_seconds", 0, MCP_OUTPUT_WAIT_MAX_S, 0, &wait, &bad) ||
        !tool_id_path(path, sizeof path, "/v1/operations/", op, "/output", &bad))
        return bad;
    snprintf(full, sizeof full, "%s?offset=%lld&wait=%lld", path, (long long)offset, (long long)wait);
    return get_result(c, full);
}

json_object *tool_cancel(call_t *c, json_object *args)
{
    json_object *bad = NULL;
    const char *op = NULL;
    char path[MCP_PATH_MAX];
    if (!tool_arg_str(args, "operation_id", &op, &bad) ||
        !tool_id_path(path, sizeof path, "/v1/operations/", op, "/cancel", &bad))
        return bad;
    json_object *resp = NULL;
    bool done = false;
    json_object *out = op_request(c, "POST", path, NULL, NULL, NULL, false, 0, &resp, &done);
    return out ? out : mcp_tool_ok(resp);
}

json_object *tool_list(call_t *c, json_object *args)
{
    json_object *bad = NULL;
    const char *tenant = NULL, *after = NULL;
    bool all = false;
    int64_t limit;
    if (!tool_arg_str(args, "tenant", &tenant, &bad) || !tool_arg_bool(args, "all", false, &all, &bad) ||
        !tool_arg_int(args, "limit", 1, SBX_LIST_MAX, 0, &limit, &bad) || !tool_arg_str(args, "after", &after, &bad))
        return bad;
    if (after && strlen(after) > 128)
        return mcp_tool_error("invalid_argument", "after must be the next cursor of a previous sandbox_list answer");
    char path[4096] = "/v1/sandboxes";
    const char *sep = "?";
    if (tenant) {
        char *esc = httpc_escape(tenant);
        size_t l = strlen(path);
        snprintf(path + l, sizeof path - l, "%stenant=%s", sep, esc ? esc : "");
        free(esc);
        sep = "&";
    }
    if (all) {
        size_t l = strlen(path);
        snprintf(path + l, sizeof path - l, "%sall=true", sep);
        sep = "&";
    }
    if (limit > 0) {
        size_t l = strlen(path);
        snprintf(path + l, sizeof path - l, "%slimit=%lld", sep, (long long)limit);
        sep = "&";
    }
    if (after) {
        char *esc = httpc_escape(after);
        size_t l = strlen(path);
        snprintf(path + l, sizeof path - l, "%safter=%s", sep, esc ? esc : "");
        free(esc);
        sep = "&";
    }
    /* labels {"K":"V"}: all of them (label=K=V,…); phase "running,failed" */
    json_object *labels = NULL;
    const char *phase = NULL;
    if (!tool_arg_str(args, "phase", &phase, &bad))
        return bad;
    if (json_object_object_get_ex(args, "labels", &labels) && labels) {
        if (!json_object_is_type(labels, json_type_object))
            return mcp_tool_error("invalid_argument", "labels must be an object of label names to values");
        size_t l = strlen(path);
        if (client_labels_query(labels, sep, path, sizeof path, &l) < 0)
            return mcp_tool_error("invalid_argument", "tenant, labels, phase and after are too long together");
        sep = "&";
    }
    if (phase) {
        char *esc = httpc_escape(phase);
        size_t l = strlen(path);
        snprintf(path + l, sizeof path - l, "%sphase=%s", sep, esc ? esc : "");
        free(esc);
    }
    if (strlen(path) >= sizeof path - 1)
        return mcp_tool_error("invalid_argument", "tenant, labels, phase and after are too long together");
    return get_result(c, path);
}

json_object *tool_images(call_t *c, json_object *args)
{
    json_object *bad = NULL;
    const char *tenant = NULL;
    if (!tool_arg_str(args, "tenant", &tenant, &bad))
        return bad;
    char path[600] = "/v1/images";
    if (tenant) {
        char *esc = httpc_escape(tenant);
        snprintf(path + strlen(path), sizeof path - strlen(path), "?tenant=%s", esc ? esc : "");
        free(esc);
    }
    return get_result(c, path);
}

json_object *tool_delete(call_t *c, json_object *args)
{
    json_object *bad = NULL;
    const char *sbx = NULL, *idem = NULL;
    bool wait = false;
    int64_t tmo;
    char path[MCP_PATH_MAX];
    if (!tool_arg_str(args, "sandbox_id", &sbx, &bad) || !tool_arg_str(args, "idempotency_key", &idem, &bad) ||
        !tool_arg_wait(args, false, &wait, &tmo, &bad) ||
        !tool_id_path(path, sizeof path, "/v1/sandboxes/", sbx, NULL, &bad))
        return bad;
    return tool_op_result(c, "DELETE", path, idem, "deleting", wait, tmo);
}

json_object *tool_extend(call_t *c, json_object *args)
{
    json_object *bad = NULL;
    const char *sbx = NULL, *idem = NULL;
    int64_t ttl;
    char path[MCP_PATH_MAX];
    if (!tool_arg_str(args, "sandbox_id", &sbx, &bad) ||
        !tool_arg_int(args, "ttl_seconds", SBX_EXTEND_TTL_SECONDS_MIN, SBX_TTL_SECONDS_MAX, 0, &ttl, &bad) ||
        !tool_arg_str(args, "idempotency_key", &idem, &bad) ||
        !tool_id_path(path, sizeof path, "/v1/sandboxes/", sbx, "/extend", &bad))
        return bad;
    client_extend_spec_t spec = { .ttl_seconds = ttl };
    json_object *body = NULL, *resp = NULL;
    if (client_extend_body(&spec, &body) < 0)
        return mcp_tool_error("internal", "out of memory");
    bool done = false;
    /* No wait: the controller finishes an extend before it answers. */
    json_object *failed = op_request(c, "POST", path, body, idem, "extending", false, 0, &resp, &done);
    json_object_put(body);
    if (failed)
        return failed;
    json_object *op = jsonx_get_obj(resp, "operation");
    if (strcmp(jsonx_get_str(op, "state") ? jsonx_get_str(op, "state") : "", "succeeded") != 0) {
        json_object *out = op_failure(op);
        json_object_put(resp);
        return out;
    }
    /* The new expiry beside the operation, where an agent looks first. */
    json_object *res = jsonx_get_obj(op, "result");
    jsonx_add_str(resp, "expires_at", jsonx_get_str(res, "expires_at"));
    jsonx_add_str(resp, "previous_expires_at", jsonx_get_str(res, "previous_expires_at"));
    return mcp_tool_ok(resp);
}

/* sandbox_pause, sandbox_resume (docs/pause.md): the operation, waited for
 * unless wait is false; beside a pause's, the memory its result says was
 * kept. */
static json_object *pause_or_resume(call_t *c, json_object *args, bool pause)
{
    json_object *bad = NULL;
    const char *sbx = NULL;
    bool wait = true, done = false;
    int64_t tmo;
    char path[MCP_PATH_MAX];
    if (!tool_arg_str(args, "sandbox_id", &sbx, &bad) || !tool_arg_wait(args, true, &wait, &tmo, &bad) ||
        !tool_id_path(path, sizeof path, "/v1/sandboxes/", sbx, pause ? "/pause" : "/resume", &bad))
        return bad;
    json_object *resp = NULL;
    json_object *failed =
        op_request(c, "POST", path, NULL, NULL, pause ? "pausing" : "resuming", wait, tmo, &resp, &done);
    if (failed)
        return failed;
    bool memory = false;
    if (pause && done && jsonx_get_bool(jsonx_get_obj(jsonx_get_obj(resp, "operation"), "result"), "memory", &memory))
        jsonx_add_bool(resp, "memory", memory);
    return mcp_tool_ok(resp);
}

json_object *tool_pause(call_t *c, json_object *args) { return pause_or_resume(c, args, true); }
json_object *tool_resume(call_t *c, json_object *args) { return pause_or_resume(c, args, false); }

/* sandbox_network (docs/network.md): the change's operation, waited for
 * unless wait is false. */
json_object *tool_network(call_t *c, json_object *args)
{
    json_object *bad = NULL, *eg = NULL;
    const char *sbx = NULL;
    bool wait = true, done = false;
    int64_t tmo;
    char path[MCP_PATH_MAX];
    if (!tool_arg_str(args, "sandbox_id", &sbx, &bad) || !tool_arg_wait(args, true, &wait, &tmo, &bad) ||
        !tool_id_path(path, sizeof path, "/v1/sandboxes/", sbx, "/network", &bad))
        return bad;
    if (!json_object_object_get_ex(args, "egress", &eg) || !json_object_is_type(eg, json_type_object))
        return mcp_tool_error("invalid_argument", "egress is required: {allow:[...],deny:[...],default:'deny'}");
    json_object *body = json_object_new_object(), *resp = NULL;
    jsonx_add(body, "egress", json_object_get(eg));
    json_object *failed = op_request(c, "PATCH", path, body, NULL, "changing the egress rules of", wait, tmo, &resp, &done);
    json_object_put(body);
    if (failed)
        return failed;
    return mcp_tool_ok(resp);
}

/* sandbox_network_log: GET …/network/log with its filters. */
json_object *tool_network_log(call_t *c, json_object *args)
{
    json_object *bad = NULL;
    const char *sbx = NULL, *verdict = NULL;
    int64_t after, limit;
    char path[MCP_PATH_MAX], full[MCP_PATH_MAX + 96];
    if (!tool_arg_str(args, "sandbox_id", &sbx, &bad) || !tool_arg_int(args, "after", 0, INT64_MAX, 0, &after, &bad) ||
        !tool_arg_int(args, "limit", 1, SBX_LIST_MAX, SBX_LIST_DEFAULT, &limit, &bad) ||
        !tool_id_path(path, sizeof path, "/v1/sandboxes/", sbx, "/network/log", &bad))
        return bad;
    verdict = jsonx_get_str(args, "verdict");
    if (verdict && strcmp(verdict, "allowed") != 0 && strcmp(verdict, "refused") != 0)
        return mcp_tool_error("invalid_argument", "verdict is allowed or refused");
    snprintf(full, sizeof full, "%s?after=%lld&limit=%lld%s%s", path, (long long)after, (long long)limit,
             verdict ? "&verdict=" : "", verdict ? verdict : "");
    return get_result(c, full);
}

json_object *tool_pools(call_t *c, json_object *args)
{
    (void)args;
    return get_result(c, "/v1/pools");
}
