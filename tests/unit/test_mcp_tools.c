/* Unit tests for sandbox-mcp's tool table (tools/mcp/tools.c): every row of
 * the real table, its schemas as tools/list shows them, its handler, and the
 * dispatch from mcp_handle's answer back to the row. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "jsonx.h"
#include "mcp.h"
#include "mcp_int.h"

/* The handlers call these (tools/sandbox-mcp.c, not linked here); the
 * checks below never run a handler. */
int api(call_t *c, const char *method, const char *path, json_object *body, const char *idem, int64_t deadline_ms,
        json_object **ret, api_err_t *e)
{
    (void)c, (void)method, (void)path, (void)body, (void)idem, (void)deadline_ms, (void)ret, (void)e;
    ck_abort_msg("api called");
    return -1;
}
json_object *api_failure(const api_err_t *e)
{
    (void)e;
    ck_abort_msg("api_failure called");
    return NULL;
}
json_object *op_failure(json_object *op)
{
    (void)op;
    ck_abort_msg("op_failure called");
    return NULL;
}
int64_t deadline_in(int64_t ms) { return ms; }
json_object *get_result(call_t *c, const char *path)
{
    (void)c, (void)path;
    ck_abort_msg("get_result called");
    return NULL;
}
/* A canned GET /v1/sandboxes/{id} with 14 operations: a create placed
 * with its scores and reasons, 13 execs with output; shape applied. */
static char last_path[256];
static int canned_ops = 14;
json_object *get_result_shaped(call_t *c, const char *path, void (*shape)(json_object *resp))
{
    (void)c;
    snprintf(last_path, sizeof last_path, "%s", path);
    json_object *resp = NULL, *ops = json_object_new_array();
    for (int i = canned_ops - 1; i >= 0; i--) {
        char op[2048];
        if (i == 0)
            snprintf(op, sizeof op,
                     "{\"id\":\"op_c\",\"kind\":\"create\",\"state\":\"succeeded\",\"attempt\":1,"
                     "\"created_at\":\"t0\",\"error\":null,\"placement\":{\"worker\":\"w1\",\"summary\":"
                     "\"placed on w1\",\"score\":{\"score\":950},\"reasons\":[\"w1: chosen\",\"w2: filtered\"]},"
                     "\"result\":null,\"history\":[{\"to\":\"leased\"},{\"to\":\"running\"}]}");
        else
            snprintf(op, sizeof op,
                     "{\"id\":\"op_e%d\",\"kind\":\"exec\",\"state\":\"%s\",\"created_at\":\"t%d\","
                     "\"error\":%s,\"placement\":null,\"result\":{\"exit_code\":%d,\"stdout\":\"%0200d\","
                     "\"stderr\":\"\",\"duration_ms\":7},\"history\":[{\"to\":\"running\"}]}",
                     i, i == canned_ops - 1 ? "failed" : "succeeded", i,
                     i == canned_ops - 1 ? "{\"code\":\"sandbox_exited\",\"message\":\"gone\",\"details\":{}}" : "null", i % 3, 0);
        json_object *o = NULL;
        ck_assert_int_eq(jsonx_parse(op, strlen(op), &o, NULL), 0);
        json_object_array_add(ops, o);
    }
    const char *sbx = "{\"sandbox\":{\"id\":\"sbx_1\",\"phase\":\"running\"}}";
    ck_assert_int_eq(jsonx_parse(sbx, strlen(sbx), &resp, NULL), 0);
    jsonx_add(resp, "operations", ops);
    if (shape)
        shape(resp);
    return mcp_tool_ok(resp);
}
json_object *wait_outcome(call_t *c, const char *op_id, int64_t timeout_s, json_object **ret_op, bool *ret_done)
{
    (void)c, (void)op_id, (void)timeout_s, (void)ret_op, (void)ret_done;
    ck_abort_msg("wait_outcome called");
    return NULL;
}
json_object *op_request(call_t *c, const char *method, const char *path, json_object *body, const char *idem,
                        const char *what, bool wait, int64_t timeout_s, json_object **ret, bool *ret_done)
{
    (void)c, (void)method, (void)path, (void)body, (void)idem, (void)what, (void)wait, (void)timeout_s, (void)ret,
        (void)ret_done;
    ck_abort_msg("op_request called");
    return NULL;
}

static void setup(void) { ck_assert_int_eq(tools_init(), 0); }
static void teardown(void) { tools_release(); }

static json_object *parse(const char *tool, const char *what, const char *text)
{
    json_object *o = NULL;
    ck_assert_msg(text != NULL, "%s: no %s", tool, what);
    ck_assert_msg(jsonx_parse(text, strlen(text), &o, NULL) == 0, "%s: the %s does not parse: %s", tool, what, text);
    ck_assert_msg(json_object_is_type(o, json_type_object), "%s: the %s is not an object", tool, what);
    return o;
}

/* A JSON Schema type: a type name or an array of them. */
static bool has_type(json_object *schema)
{
    json_object *t = NULL;
    if (!json_object_object_get_ex(schema, "type", &t) || !t)
        return false;
    if (json_object_is_type(t, json_type_string))
        return json_object_get_string_len(t) > 0;
    if (!json_object_is_type(t, json_type_array) || json_object_array_length(t) == 0)
        return false;
    for (size_t i = 0; i < json_object_array_length(t); i++)
        if (!json_object_is_type(json_object_array_get_idx(t, i), json_type_string))
            return false;
    return true;
}

/* Checks an object schema at path (and the object schemas inside it):
 * type object, properties an object, each property an object with a type
 * (and a description when described is set), every required name a
 * property. */
static void check_object_schema(const char *path, json_object *schema, bool described)
{
    ck_assert_msg(json_object_is_type(schema, json_type_object), "%s is not an object", path);
    const char *type = jsonx_get_str(schema, "type");
    ck_assert_msg(type && strcmp(type, "object") == 0, "%s: type is %s, not object", path, type ? type : "(none)");
    json_object *props = jsonx_get_obj(schema, "properties");
    json_object *req = jsonx_get_arr(schema, "required");
    if (!props) {
        ck_assert_msg(!json_object_object_get_ex(schema, "properties", NULL), "%s: properties is not an object", path);
        ck_assert_msg(!req, "%s: required without properties", path);
        return;
    }
    json_object_object_foreach(props, name, prop) {
        char sub[512];
        snprintf(sub, sizeof sub, "%s.%s", path, name);
        ck_assert_msg(prop && json_object_is_type(prop, json_type_object), "%s is not a schema", sub);
        ck_assert_msg(has_type(prop), "%s has no type", sub);
        const char *desc = jsonx_get_str(prop, "description");
        ck_assert_msg(!described || (desc && desc[0]), "%s has no description", sub);
        if (jsonx_get_obj(prop, "properties"))
            check_object_schema(sub, prop, false);
        json_object *items = jsonx_get_obj(prop, "items");
        if (items && jsonx_get_obj(items, "properties"))
            check_object_schema(sub, items, false);
    }
    for (size_t i = 0; req && i < json_object_array_length(req); i++) {
        json_object *r = json_object_array_get_idx(req, i);
        ck_assert_msg(json_object_is_type(r, json_type_string), "%s: required[%zu] is not a string", path, i);
        ck_assert_msg(json_object_object_get_ex(props, json_object_get_string(r), NULL),
                      "%s: required names %s, which is not a property", path, json_object_get_string(r));
    }
}

/* Parses a tool's schema text and checks it as an object schema; returns
 * it (new reference). */
static json_object *check_schema(const char *tool, const char *what, const char *text, bool described)
{
    json_object *o = parse(tool, what, text);
    char path[128];
    snprintf(path, sizeof path, "%s.%s", tool, what);
    check_object_schema(path, o, described);
    return o;
}

/* The MCP name rule, as strict as the strictest client: 1 to 64 of
 * A-Z a-z 0-9 _ -. */
static bool name_ok(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n < 1 || n > 64)
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = name[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
              ch == '-'))
            return false;
    }
    return true;
}

START_TEST(test_rows)
{
    ck_assert_uint_ge(tool_count, 1);
    const mcp_tool_def_t *defs = tools_defs();
    for (size_t i = 0; i < tool_count; i++) {
        const mcp_tool_t *row = &tool_table[i];
        const char *name = row->def.name;
        ck_assert_msg(name_ok(name), "row %zu: tool name \"%s\" breaks the MCP name rule", i, name ? name : "");
        for (size_t j = 0; j < i; j++)
            ck_assert_msg(strcmp(tool_table[j].def.name, name) != 0, "tool %s is in the table twice", name);
        ck_assert_msg(row->run != NULL, "tool %s has no handler", name);
        ck_assert_msg(row->def.title && row->def.title[0], "tool %s has no title", name);
        ck_assert_msg(row->def.description && row->def.description[0], "tool %s has no description", name);
        ck_assert_str_eq(defs[i].name, name);
        ck_assert_ptr_eq(tools_row(&defs[i]), row);
    }
    ck_assert_ptr_null(tools_row(&tool_table[0].def));
}
END_TEST

START_TEST(test_input_schemas)
{
    const mcp_tool_def_t *defs = tools_defs();
    for (size_t i = 0; i < tool_count; i++) {
        const char *name = defs[i].name;
        json_object *in = check_schema(name, "inputSchema", defs[i].input_schema, true);
        bool extra = true;
        ck_assert_msg(jsonx_get_bool(in, "additionalProperties", &extra) && !extra,
                      "%s.inputSchema: additionalProperties is not false (unknown arguments are refused)", name);
        /* What tool_args_check reads is the same schema. */
        ck_assert_str_eq(json_object_to_json_string(tools_input_schema(&tool_table[i])),
                         json_object_to_json_string(in));
        json_object_put(in);
    }
}
END_TEST

START_TEST(test_output_schemas_and_annotations)
{
    const mcp_tool_def_t *defs = tools_defs();
    for (size_t i = 0; i < tool_count; i++) {
        const char *name = defs[i].name;
        json_object_put(check_schema(name, "outputSchema", defs[i].output_schema, false));
        json_object *ann = parse(name, "annotations", defs[i].annotations);
        json_object_object_foreach(ann, k, v) {
            size_t n = strlen(k);
            ck_assert_msg(n > 4 && strcmp(k + n - 4, "Hint") == 0, "%s: annotation %s is not a hint", name, k);
            ck_assert_msg(v && json_object_is_type(v, json_type_boolean), "%s: %s is not a boolean", name, k);
        }
        ck_assert_msg(json_object_object_get_ex(ann, "readOnlyHint", NULL), "%s: no readOnlyHint", name);
        json_object_put(ann);
    }
}
END_TEST

/* tools/list shows the table, and a tools/call of each name comes back to
 * its own row. */
START_TEST(test_dispatch_to_rows)
{
    mcp_server_info_t info = { "sandbox-mcp", "Sandbox", "0", "x", tools_defs(), tool_count };
    for (size_t i = 0; i < tool_count; i++) {
        char text[256];
        snprintf(text, sizeof text,
                 "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"%s\"}}",
                 tool_table[i].def.name);
        mcp_msg_t m;
        json_object *err = NULL;
        ck_assert_int_eq(mcp_decode(text, strlen(text), &m, &err), 0);
        int level = 1;
        const mcp_tool_def_t *def = NULL;
        json_object *resp = mcp_handle(&info, &m, &level, &def);
        ck_assert_ptr_null(resp);
        ck_assert_ptr_eq(tools_row(def), &tool_table[i]);
        mcp_msg_release(&m);
    }
}
END_TEST

/* Unknown and missing arguments are refused from the schema. */
START_TEST(test_args_check)
{
    for (size_t i = 0; i < tool_count; i++) {
        const mcp_tool_t *row = &tool_table[i];
        json_object *args = json_object_new_object();
        jsonx_add_str(args, "no_such_argument", "x");
        json_object *bad = tool_args_check(row, args);
        ck_assert_msg(bad != NULL, "%s takes an unknown argument", row->def.name);
        ck_assert_ptr_nonnull(strstr(json_object_to_json_string(bad), "unknown argument"));
        json_object_put(bad);
        json_object_put(args);
        json_object *req = jsonx_get_arr(tools_input_schema(row), "required");
        args = json_object_new_object();
        bad = tool_args_check(row, args);
        if (req && json_object_array_length(req) > 0) {
            ck_assert_msg(bad != NULL, "%s runs without its required arguments", row->def.name);
            ck_assert_ptr_nonnull(strstr(json_object_to_json_string(bad), "needs the argument"));
            json_object_put(bad);
        } else {
            ck_assert_msg(bad == NULL, "%s refuses no arguments though it requires none", row->def.name);
        }
        json_object_put(args);
    }
}
END_TEST

/* sandbox_get keeps an agent's context small: the newest operations only,
 * in short (no output, no placement reasons, no history). */
START_TEST(test_sandbox_get_is_compact)
{
    json_object *args = json_object_new_object();
    jsonx_add_str(args, "sandbox_id", "sbx_1");
    json_object *res = tool_get(NULL, args);
    json_object_put(args);
    ck_assert_str_eq(last_path, "/v1/sandboxes/sbx_1");
    json_object *sc = jsonx_get_obj(res, "structuredContent");
    ck_assert_ptr_nonnull(sc);
    json_object *ops = jsonx_get_arr(sc, "operations");
    ck_assert_int_eq((int)json_object_array_length(ops), MCP_GET_OPS_MAX);
    json_object *newest = json_object_array_get_idx(ops, 0);
    ck_assert_str_eq(jsonx_get_str(newest, "id"), "op_e13");
    ck_assert_str_eq(jsonx_get_str(jsonx_get_obj(newest, "error"), "code"), "sandbox_exited");
    ck_assert(!json_object_object_get_ex(jsonx_get_obj(newest, "error"), "details", NULL));
    json_object *r = jsonx_get_obj(newest, "result");
    int64_t ec = -1;
    ck_assert(jsonx_get_int(r, "exit_code", &ec) && ec == 1);
    ck_assert(!json_object_object_get_ex(r, "stdout", NULL));
    ck_assert(!json_object_object_get_ex(newest, "history", NULL));
    ck_assert_ptr_nonnull(jsonx_get_str(sc, "operations_note"));
    const char *text = json_object_to_json_string(sc);
    ck_assert_msg(strlen(text) < 2500, "sandbox_get answered %zu bytes", strlen(text));
    json_object_put(res);
}
END_TEST

/* The placement of a create is its worker and summary, not its scores. */
START_TEST(test_sandbox_get_placement_is_its_summary)
{
    canned_ops = 3;
    json_object *args = json_object_new_object();
    jsonx_add_str(args, "sandbox_id", "sbx_1");
    json_object *res = tool_get(NULL, args);
    json_object_put(args);
    canned_ops = 14;
    json_object *ops = jsonx_get_arr(jsonx_get_obj(res, "structuredContent"), "operations");
    ck_assert_int_eq((int)json_object_array_length(ops), 3);
    json_object *create = json_object_array_get_idx(ops, 2);
    ck_assert_str_eq(jsonx_get_str(create, "kind"), "create");
    json_object *pl = jsonx_get_obj(create, "placement");
    ck_assert_str_eq(jsonx_get_str(pl, "worker"), "w1");
    ck_assert_str_eq(jsonx_get_str(pl, "summary"), "placed on w1");
    ck_assert(!json_object_object_get_ex(pl, "reasons", NULL) && !json_object_object_get_ex(pl, "score", NULL));
    ck_assert(!json_object_object_get_ex(create, "result", NULL));
    json_object_put(res);
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("mcp_tools");
    TCase *tc = unit_tcase_add(s, "table", UNIT_TESTS(
        test_rows, test_input_schemas, test_output_schemas_and_annotations, test_dispatch_to_rows, test_args_check,
        test_sandbox_get_is_compact, test_sandbox_get_placement_is_its_summary,));
    tcase_add_checked_fixture(tc, setup, teardown);
    return s;
}
