/* MCP framing, negotiation and the fixed methods. */
#include "mcp.h"
#include "errors.h"
#include "jsonx.h"

#include <stdio.h>
#include <string.h>

static const char *const versions[] = { "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05", NULL };
static const char *const levels[] = { "debug", "info", "notice", "warning", "error", "critical", "alert",
                                      "emergency", NULL };

const char *mcp_negotiate(const char *requested)
{
    for (int i = 0; requested && versions[i]; i++)
        if (strcmp(requested, versions[i]) == 0)
            return versions[i];
    return MCP_VERSION_LATEST;
}

int mcp_log_level(const char *name)
{
    for (int i = 0; name && levels[i]; i++)
        if (strcmp(name, levels[i]) == 0)
            return i;
    return -1;
}

const char *mcp_log_level_name(int level)
{
    return level >= 0 && level < 8 ? levels[level] : "info";
}

json_object *mcp_id_copy(json_object *id)
{
    if (!id)
        return NULL;
    if (json_object_is_type(id, json_type_string))
        return json_object_new_string(json_object_get_string(id));
    return json_object_new_int64(json_object_get_int64(id));
}

json_object *mcp_result(json_object *id, json_object *result)
{
    json_object *o = json_object_new_object();
    jsonx_add_str(o, "jsonrpc", "2.0");
    jsonx_add(o, "id", mcp_id_copy(id));
    jsonx_add(o, "result", result ? result : json_object_new_object());
    return o;
}

json_object *mcp_error(json_object *id, int code, const char *message)
{
    json_object *o = json_object_new_object();
    jsonx_add_str(o, "jsonrpc", "2.0");
    jsonx_add(o, "id", mcp_id_copy(id));
    json_object *e = json_object_new_object();
    jsonx_add_int(e, "code", code);
    jsonx_add_str(e, "message", message);
    jsonx_add(o, "error", e);
    return o;
}

json_object *mcp_notification(const char *method, json_object *params)
{
    json_object *o = json_object_new_object();
    jsonx_add_str(o, "jsonrpc", "2.0");
    jsonx_add_str(o, "method", method);
    if (params)
        jsonx_add(o, "params", params);
    return o;
}

void mcp_msg_release(mcp_msg_t *m)
{
    if (m && m->root)
        json_object_put(m->root);
    if (m)
        memset(m, 0, sizeof *m);
}

/* A JSON-RPC id: a string or an integer (null is not allowed for requests). */
static bool id_ok(json_object *id)
{
    return id && (json_object_is_type(id, json_type_string) || json_object_is_type(id, json_type_int));
}

int mcp_decode(const char *line, size_t len, mcp_msg_t *ret, json_object **ret_error)
{
    memset(ret, 0, sizeof *ret);
    *ret_error = NULL;
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' ' ||
                       line[len - 1] == '\t'))
        len--;
    size_t skip = 0;
    while (skip < len && (line[skip] == ' ' || line[skip] == '\t'))
        skip++;
    if (skip == len)
        return 1;
    if (len > MCP_MAX_LINE_BYTES) {
        *ret_error = mcp_error(NULL, MCP_PARSE_ERROR, "message longer than 4 MiB");
        return SBX_EINVAL;
    }
    const char *nul = memchr(line + skip, '\0', len - skip);
    if (nul) {
        char why[80];
        snprintf(why, sizeof why, "parse error: a NUL byte at byte %zu", (size_t)(nul - line));
        *ret_error = mcp_error(NULL, MCP_PARSE_ERROR, why);
        return SBX_EINVAL;
    }
    json_object *root = NULL;
    api_error_t perr;
    if (jsonx_parse(line + skip, len - skip, &root, &perr) < 0 || !root) {
        char why[300];
        snprintf(why, sizeof why, "parse error: %.280s", perr.message);
        *ret_error = mcp_error(NULL, MCP_PARSE_ERROR, why);
        return SBX_EINVAL;
    }
    if (json_object_is_type(root, json_type_array)) {
        json_object_put(root);
        *ret_error = mcp_error(NULL, MCP_INVALID_REQUEST, "batches are not supported; send one message a line");
        return SBX_EINVAL;
    }
    if (!json_object_is_type(root, json_type_object)) {
        json_object_put(root);
        *ret_error = mcp_error(NULL, MCP_INVALID_REQUEST, "a message must be a JSON object");
        return SBX_EINVAL;
    }
    json_object *id = NULL, *method = NULL, *params = NULL, *v = NULL;
    bool has_id = json_object_object_get_ex(root, "id", &id);
    json_object_object_get_ex(root, "method", &method);
    json_object_object_get_ex(root, "params", &params);
    const char *jv = json_object_object_get_ex(root, "jsonrpc", &v) && json_object_is_type(v, json_type_string)
                         ? json_object_get_string(v)
                         : NULL;
    json_object *reply_id = has_id && id_ok(id) ? id : NULL;
    const char *bad = NULL;
    if (!jv || strcmp(jv, "2.0") != 0)
        bad = "jsonrpc must be \"2.0\"";
    else if (has_id && !id_ok(id))
        bad = "id must be a string or an integer";
    else if (method && !json_object_is_type(method, json_type_string))
        bad = "method must be a string";
    else if (params && !json_object_is_type(params, json_type_object) && !json_object_is_type(params, json_type_null))
        bad = "params must be an object";
    else if (!method && !(has_id && (json_object_object_get_ex(root, "result", NULL) ||
                                     json_object_object_get_ex(root, "error", NULL))))
        bad = "a message needs a method, or a result or error with an id";
    if (bad) {
        *ret_error = mcp_error(reply_id, MCP_INVALID_REQUEST, bad);
        json_object_put(root);
        return SBX_EINVAL;
    }
    ret->root = root;
    ret->id = has_id ? id : NULL;
    ret->params = params && json_object_is_type(params, json_type_object) ? params : NULL;
    if (!method) {
        ret->kind = MCP_MSG_RESPONSE;
    } else {
        ret->method = json_object_get_string(method);
        ret->kind = has_id ? MCP_MSG_REQUEST : MCP_MSG_NOTIFICATION;
    }
    return 0;
}

static json_object *parse_text(const char *s)
{
    json_object *o = NULL;
    if (!s || jsonx_parse(s, strlen(s), &o, NULL) < 0)
        return NULL;
    return o;
}

static json_object *tools_list(const mcp_server_info_t *info)
{
    json_object *arr = json_object_new_array();
    for (size_t i = 0; i < info->ntools; i++) {
        const mcp_tool_def_t *t = &info->tools[i];
        json_object *o = json_object_new_object();
        jsonx_add_str(o, "name", t->name);
        if (t->title)
            jsonx_add_str(o, "title", t->title);
        jsonx_add_str(o, "description", t->description);
        jsonx_add(o, "inputSchema", parse_text(t->input_schema));
        if (t->output_schema)
            jsonx_add(o, "outputSchema", parse_text(t->output_schema));
        if (t->annotations)
            jsonx_add(o, "annotations", parse_text(t->annotations));
        json_object_array_add(arr, o);
    }
    json_object *r = json_object_new_object();
    jsonx_add(r, "tools", arr);
    return r;
}

json_object *mcp_handle(const mcp_server_info_t *info, const mcp_msg_t *m, int *log_level,
                        const mcp_tool_def_t **ret_tool)
{
    *ret_tool = NULL;
    const char *meth = m->method ? m->method : "";
    if (strcmp(meth, "initialize") == 0) {
        const char *asked = jsonx_get_str(m->params, "protocolVersion");
        json_object *r = json_object_new_object();
        jsonx_add_str(r, "protocolVersion", mcp_negotiate(asked));
        json_object *caps = json_object_new_object();
        json_object *tools = json_object_new_object();
        jsonx_add_bool(tools, "listChanged", false);
        jsonx_add(caps, "tools", tools);
        jsonx_add(caps, "logging", json_object_new_object());
        jsonx_add(r, "capabilities", caps);
        json_object *si = json_object_new_object();
        jsonx_add_str(si, "name", info->name);
        if (info->title)
            jsonx_add_str(si, "title", info->title);
        jsonx_add_str(si, "version", info->version);
        jsonx_add(r, "serverInfo", si);
        if (info->instructions)
            jsonx_add_str(r, "instructions", info->instructions);
        return mcp_result(m->id, r);
    }
    if (strcmp(meth, "ping") == 0)
        return mcp_result(m->id, json_object_new_object());
    if (strcmp(meth, "tools/list") == 0)
        return mcp_result(m->id, tools_list(info));
    if (strcmp(meth, "logging/setLevel") == 0) {
        int lvl = mcp_log_level(jsonx_get_str(m->params, "level"));
        if (lvl < 0)
            return mcp_error(m->id, MCP_INVALID_PARAMS,
                             "level must be one of debug, info, notice, warning, error, critical, alert, emergency");
        *log_level = lvl;
        return mcp_result(m->id, json_object_new_object());
    }
    if (strcmp(meth, "tools/call") == 0) {
        const char *name = jsonx_get_str(m->params, "name");
        json_object *args = NULL;
        if (!name)
            return mcp_error(m->id, MCP_INVALID_PARAMS, "tools/call needs params.name");
        if (m->params && json_object_object_get_ex(m->params, "arguments", &args) && args &&
            !json_object_is_type(args, json_type_object))
            return mcp_error(m->id, MCP_INVALID_PARAMS, "params.arguments must be an object");
        for (size_t i = 0; i < info->ntools; i++)
            if (strcmp(info->tools[i].name, name) == 0) {
                *ret_tool = &info->tools[i];
                return NULL;
            }
        char msg[200];
        snprintf(msg, sizeof msg, "unknown tool: %.120s", name);
        return mcp_error(m->id, MCP_INVALID_PARAMS, msg);
    }
    char msg[200];
    snprintf(msg, sizeof msg, "method not found: %.120s", meth);
    return mcp_error(m->id, MCP_METHOD_NOT_FOUND, msg);
}

/* {"content":[{"type":"text","text":<JSON of body>}]} plus the rest of a
 * tool result: structuredContent (taken; NULL for none) and isError. */
static json_object *tool_result(json_object *body, json_object *structured, bool is_error)
{
    json_object *r = json_object_new_object();
    json_object *content = json_object_new_array();
    json_object *text = json_object_new_object();
    jsonx_add_str(text, "type", "text");
    const char *s = json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    jsonx_add_str(text, "text", s ? s : "{}");
    json_object_array_add(content, text);
    jsonx_add(r, "content", content);
    if (structured)
        jsonx_add(r, "structuredContent", structured);
    jsonx_add_bool(r, "isError", is_error);
    return r;
}

json_object *mcp_tool_ok(json_object *structured) { return tool_result(structured, structured, false); }

json_object *mcp_tool_error(const char *code, const char *message)
{
    json_object *body = json_object_new_object();
    json_object *e = json_object_new_object();
    jsonx_add_str(e, "code", code ? code : "internal");
    jsonx_add_str(e, "message", message ? message : "");
    jsonx_add(body, "error", e);
    json_object *r = tool_result(body, NULL, true);
    json_object_put(body);
    return r;
}

json_object *mcp_progress_token(json_object *params)
{
    json_object *meta = NULL, *tok = NULL;
    if (!params || !json_object_object_get_ex(params, "_meta", &meta) || !json_object_is_type(meta, json_type_object) ||
        !json_object_object_get_ex(meta, "progressToken", &tok))
        return NULL;
    if (json_object_is_type(tok, json_type_string) || json_object_is_type(tok, json_type_int))
        return tok;
    return NULL;
}
