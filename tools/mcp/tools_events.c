/* sandbox-mcp's observing tools: sandbox_events (a cursor with long-polls) and
 * sandbox_logs (the NDJSON logs answer collected into bounded text). */
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
#include "sbuf.h"
#include "timeutil.h"

json_object *tool_events(call_t *c, json_object *args)
{
    json_object *bad = NULL;
    const char *sbx = NULL, *op = NULL, *kind = NULL;
    int64_t after, wait, limit;
    if (!tool_arg_str(args, "sandbox_id", &sbx, &bad) || !tool_arg_str(args, "operation_id", &op, &bad) ||
        !tool_arg_str(args, "kind", &kind, &bad) || !tool_arg_int(args, "after", 0, INT64_MAX, 0, &after, &bad) ||
        !tool_arg_int(args, "wait", 0, MCP_EVENTS_WAIT_MAX_S, 0, &wait, &bad) ||
        !tool_arg_int(args, "limit", 1, SBX_LIST_MAX, SBX_LIST_DEFAULT, &limit, &bad))
        return bad;
    char base[MCP_PATH_MAX];
    int len = snprintf(base, sizeof base, "/v1/events?after=%lld&limit=%lld", (long long)after, (long long)limit);
    const char *filters[3][2] = { { "sandbox", sbx }, { "operation", op }, { "kind", kind } };
    for (int i = 0; i < 3; i++) {
        if (!filters[i][1])
            continue;
        char *esc = httpc_escape(filters[i][1]);
        len += snprintf(base + len, sizeof base - (size_t)len, "&%s=%s", filters[i][0], esc ? esc : "");
        free(esc);
        if ((size_t)len >= sizeof base - 16)
            return mcp_tool_error("internal", "cannot build the request path");
    }
    /* Long-polls of at most MCP_POLL_WAIT_S each, so a cancellation stops
     * the call at once; an event still wakes each of them immediately. */
    int64_t deadline = time_mono_ms() + wait * 1000;
    for (;;) {
        int64_t left = deadline - time_mono_ms();
        int64_t w = left >= MCP_POLL_WAIT_S * 1000 ? MCP_POLL_WAIT_S : 0;
        char path[MCP_PATH_MAX + 16];
        snprintf(path, sizeof path, "%s&wait=%lld", base, (long long)w);
        json_object *resp = NULL;
        api_err_t e;
        if (api(c, "GET", path, NULL, NULL, deadline_in(MCP_REQUEST_TIMEOUT_MS), &resp, &e) < 0)
            return api_failure(&e);
        json_object *events = jsonx_get_arr(resp, "events");
        if (!events) {
            json_object_put(resp);
            return mcp_tool_error("bad_response", "the events answer has no events array");
        }
        if (json_object_array_length(events) > 0 || w == 0)
            return mcp_tool_ok(resp);
        json_object_put(resp);
    }
}

/* sandbox_logs: the NDJSON answer collected into bounded text. */
typedef struct mcp_logs {
    sbuf_t text, out, err;
    bool truncated;
    char code[64], message[512];   /* an error line of the stream */
} mcp_logs_t;

static int logs_collect(void *ud, const char *line, size_t len)
{
    mcp_logs_t *l = ud;
    client_logs_line_t ll;
    if (client_logs_line_decode(line, len, &ll) < 0) {
        snprintf(l->code, sizeof l->code, "bad_response");
        snprintf(l->message, sizeof l->message, "a line of the logs answer is not a JSON object");
        return -1;
    }
    if (ll.stream) {
        sbuf_append_bounded(&l->text, ll.data, ll.len);
        sbuf_append_bounded(strcmp(ll.stream, "stderr") == 0 ? &l->err : &l->out, ll.data, ll.len);
    } else if (ll.is_error) {
        snprintf(l->code, sizeof l->code, "%s", ll.code);
        snprintf(l->message, sizeof l->message, "%s", ll.message);
    }
    l->truncated = l->truncated || ll.truncated || l->text.truncated || l->out.truncated || l->err.truncated;
    client_logs_line_release(&ll);
    return l->text.truncated ? -1 : 0; /* enough: stop reading */
}

json_object *tool_logs(call_t *c, json_object *args)
{
    json_object *bad = NULL;
    const char *sbx = NULL;
    int64_t tail;
    char path[MCP_PATH_MAX];
    if (!tool_arg_str(args, "sandbox_id", &sbx, &bad) ||
        !tool_arg_int(args, "tail", 0, SBX_LOGS_TAIL_MAX, MCP_LOGS_DEFAULT_TAIL, &tail, &bad) ||
        !tool_id_path(path, sizeof path, "/v1/sandboxes/", sbx, "/logs", &bad))
        return bad;
    size_t pl = strlen(path);
    snprintf(path + pl, sizeof path - pl, "?follow=false&tail=%lld", (long long)tail);
    mcp_logs_t l;
    memset(&l, 0, sizeof l);
    sbuf_init(&l.text, MCP_LOGS_MAX_BYTES);
    sbuf_init(&l.out, MCP_LOGS_MAX_BYTES);
    sbuf_init(&l.err, MCP_LOGS_MAX_BYTES);
    httpc_response_t resp;
    int r = httpc_stream_lines(c->http, path, MCP_REQUEST_TIMEOUT_MS, MCP_LOGS_LINE_MAX, logs_collect, &l, &resp);
    json_object *out = NULL;
    if (c->cancel) {
        out = mcp_tool_error("cancelled", "the client cancelled the call");
    } else if (l.code[0]) {
        out = mcp_tool_error(l.code, l.message);
    } else if (resp.status >= 200 && resp.status < 300 && (r == 0 || (r == SBX_ECANCELLED && l.truncated))) {
        json_object *res = json_object_new_object();
        jsonx_add_str(res, "text", sbuf_cstr(&l.text));
        jsonx_add_str(res, "stdout", sbuf_cstr(&l.out));
        jsonx_add_str(res, "stderr", sbuf_cstr(&l.err));
        jsonx_add_bool(res, "truncated", l.truncated);
        out = mcp_tool_ok(res);
    } else if (r < 0 || resp.status == 0) {
        char msg[400];
        snprintf(msg, sizeof msg, "cannot read the logs from the controller at %s: %s", c->srv->url,
                 resp.error[0] ? resp.error : sbx_strerror(r));
        out = mcp_tool_error("unavailable", msg);
    } else {
        const char *code = NULL, *msg = NULL;
        httpc_api_error(&resp, &code, &msg);
        out = mcp_tool_error(code ? code : "error", msg ? msg : "");
    }
    httpc_response_release(&resp);
    sbuf_release(&l.text);
    sbuf_release(&l.out);
    sbuf_release(&l.err);
    return out;
}
