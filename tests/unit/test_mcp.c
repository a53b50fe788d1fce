/* Unit tests for the MCP framing and dispatch (common/mcp.c). */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "jsonx.h"
#include "mcp.h"

static const mcp_tool_def_t tools[] = {
    { "echo", "Echo", "Echoes.", "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"string\"}}}",
      "{\"type\":\"object\"}", "{\"readOnlyHint\":true}" },
};
static const mcp_server_info_t info = { "sandbox-mcp", "Sandbox", "0.1.0", "be careful", tools, 1 };

static char *dump(json_object *o)
{
    char *s = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(o);
    return s;
}

/* Decodes text expecting an error response; returns its JSON text. */
static char *decode_error(const char *text)
{
    mcp_msg_t m;
    json_object *err = NULL;
    int r = mcp_decode(text, strlen(text), &m, &err);
    ck_assert_msg(r < 0, "%s decoded", text);
    ck_assert_ptr_nonnull(err);
    return dump(err);
}

START_TEST(test_decode_kinds)
{
    mcp_msg_t m;
    json_object *err = NULL;
    const char *req = "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\"}\r\n";
    ck_assert_int_eq(mcp_decode(req, strlen(req), &m, &err), 0);
    ck_assert_int_eq(m.kind, MCP_MSG_REQUEST);
    ck_assert_str_eq(m.method, "ping");
    ck_assert_int_eq(json_object_get_int(m.id), 7);
    mcp_msg_release(&m);
    const char *note = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":\"a\"}}";
    ck_assert_int_eq(mcp_decode(note, strlen(note), &m, &err), 0);
    ck_assert_int_eq(m.kind, MCP_MSG_NOTIFICATION);
    ck_assert_ptr_nonnull(m.params);
    mcp_msg_release(&m);
    const char *resp = "{\"jsonrpc\":\"2.0\",\"id\":\"s1\",\"result\":{}}";
    ck_assert_int_eq(mcp_decode(resp, strlen(resp), &m, &err), 0);
    ck_assert_int_eq(m.kind, MCP_MSG_RESPONSE);
    mcp_msg_release(&m);
    ck_assert_int_eq(mcp_decode("   \n", 4, &m, &err), 1);
    ck_assert_ptr_null(err);
}
END_TEST

START_TEST(test_decode_errors)
{
    char *s = decode_error("{\"jsonrpc\":\"2.0\",\"id\":1,");
    ck_assert_ptr_nonnull(strstr(s, "\"id\":null"));
    ck_assert_ptr_nonnull(strstr(s, "-32700"));
    free(s);
    s = decode_error("[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]");
    ck_assert_ptr_nonnull(strstr(s, "-32600"));
    ck_assert_ptr_nonnull(strstr(s, "batches"));
    free(s);
    s = decode_error("42");
    ck_assert_ptr_nonnull(strstr(s, "-32600"));
    free(s);
    s = decode_error("{\"id\":3,\"method\":\"ping\"}");
    ck_assert_ptr_nonnull(strstr(s, "\"id\":3"));
    ck_assert_ptr_nonnull(strstr(s, "jsonrpc must be"));
    free(s);
    s = decode_error("{\"jsonrpc\":\"2.0\",\"id\":{\"x\":1},\"method\":\"ping\"}");
    ck_assert_ptr_nonnull(strstr(s, "\"id\":null"));
    ck_assert_ptr_nonnull(strstr(s, "id must be"));
    free(s);
    s = decode_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":[1]}");
    ck_assert_ptr_nonnull(strstr(s, "params must be an object"));
    free(s);
    s = decode_error("{\"jsonrpc\":\"2.0\",\"id\":1}");
    ck_assert_ptr_nonnull(strstr(s, "needs a method"));
    free(s);
    s = decode_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":5}");
    ck_assert_ptr_nonnull(strstr(s, "method must be a string"));
    free(s);
    /* a NUL byte inside the line: a parse error naming it */
    static const char nul_line[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\0\"method\":\"ping\"}\n";
    mcp_msg_t m;
    json_object *err = NULL;
    ck_assert_int_lt(mcp_decode(nul_line, sizeof nul_line - 1, &m, &err), 0);
    s = dump(err);
    ck_assert_ptr_nonnull(strstr(s, "-32700"));
    ck_assert_ptr_nonnull(strstr(s, "a NUL byte at byte 24"));
    free(s);
}
END_TEST

START_TEST(test_negotiate)
{
    ck_assert_str_eq(mcp_negotiate("2025-11-25"), "2025-11-25");
    ck_assert_str_eq(mcp_negotiate("2025-06-18"), "2025-06-18");
    ck_assert_str_eq(mcp_negotiate("2025-03-26"), "2025-03-26");
    ck_assert_str_eq(mcp_negotiate("2024-11-05"), "2024-11-05");
    ck_assert_str_eq(mcp_negotiate("1999-01-01"), MCP_VERSION_LATEST);
    ck_assert_str_eq(mcp_negotiate(NULL), MCP_VERSION_LATEST);
    ck_assert_int_eq(mcp_log_level("debug"), 0);
    ck_assert_int_eq(mcp_log_level("emergency"), 7);
    ck_assert_int_eq(mcp_log_level("loud"), -1);
}
END_TEST

/* Runs one request through mcp_handle; returns the response text (NULL
 * for a tools/call handed to the caller). */
static char *handle(const char *text, int *level, const mcp_tool_def_t **tool)
{
    mcp_msg_t m;
    json_object *err = NULL;
    ck_assert_int_eq(mcp_decode(text, strlen(text), &m, &err), 0);
    json_object *r = mcp_handle(&info, &m, level, tool);
    mcp_msg_release(&m);
    return r ? dump(r) : NULL;
}

START_TEST(test_dispatch)
{
    int level = 1;
    const mcp_tool_def_t *tool = NULL;
    char *s = handle("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
                     "\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{\"name\":\"c\",\"version\":\"1\"}}}",
                     &level, &tool);
    ck_assert_ptr_nonnull(strstr(s, "\"protocolVersion\":\"2025-06-18\""));
    ck_assert_ptr_nonnull(strstr(s, "\"tools\":{\"listChanged\":false}"));
    ck_assert_ptr_nonnull(strstr(s, "\"logging\":{}"));
    ck_assert_ptr_nonnull(strstr(s, "\"serverInfo\":{\"name\":\"sandbox-mcp\""));
    ck_assert_ptr_nonnull(strstr(s, "\"instructions\":\"be careful\""));
    free(s);
    s = handle("{\"jsonrpc\":\"2.0\",\"id\":\"p\",\"method\":\"ping\"}", &level, &tool);
    ck_assert_str_eq(s, "{\"jsonrpc\":\"2.0\",\"id\":\"p\",\"result\":{}}");
    free(s);
    s = handle("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}", &level, &tool);
    ck_assert_ptr_nonnull(strstr(s, "\"name\":\"echo\""));
    ck_assert_ptr_nonnull(strstr(s, "\"inputSchema\":{\"type\":\"object\""));
    ck_assert_ptr_nonnull(strstr(s, "\"outputSchema\":{\"type\":\"object\"}"));
    ck_assert_ptr_nonnull(strstr(s, "\"annotations\":{\"readOnlyHint\":true}"));
    free(s);
    s = handle("{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"logging/setLevel\",\"params\":{\"level\":\"error\"}}",
               &level, &tool);
    ck_assert_int_eq(level, 4);
    free(s);
    s = handle("{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"logging/setLevel\",\"params\":{\"level\":\"x\"}}", &level,
               &tool);
    ck_assert_ptr_nonnull(strstr(s, "-32602"));
    ck_assert_int_eq(level, 4);
    free(s);
    s = handle("{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"server/discover\"}", &level, &tool);
    ck_assert_ptr_nonnull(strstr(s, "-32601"));
    ck_assert_ptr_nonnull(strstr(s, "\"id\":5"));
    free(s);
    s = handle("{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\","
               "\"arguments\":{\"x\":\"y\"}}}",
               &level, &tool);
    ck_assert_ptr_null(s);
    ck_assert_ptr_eq(tool, &tools[0]);
    s = handle("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":\"nope\"}}", &level, &tool);
    ck_assert_ptr_nonnull(strstr(s, "-32602"));
    ck_assert_ptr_nonnull(strstr(s, "unknown tool: nope"));
    free(s);
    s = handle("{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\","
               "\"arguments\":[1]}}",
               &level, &tool);
    ck_assert_ptr_nonnull(strstr(s, "arguments must be an object"));
    free(s);
}
END_TEST

START_TEST(test_results)
{
    json_object *sc = json_object_new_object();
    jsonx_add_int(sc, "a", 1);
    char *s = dump(mcp_tool_ok(sc));
    ck_assert_str_eq(s, "{\"content\":[{\"type\":\"text\",\"text\":\"{\\\"a\\\":1}\"}],\"structuredContent\":{\"a\":1},"
                        "\"isError\":false}");
    free(s);
    s = dump(mcp_tool_error("not_found", "no sandbox sbx_x"));
    ck_assert_str_eq(s, "{\"content\":[{\"type\":\"text\",\"text\":\"{\\\"error\\\":{\\\"code\\\":\\\"not_found\\\","
                        "\\\"message\\\":\\\"no sandbox sbx_x\\\"}}\"}],\"isError\":true}");
    free(s);
    json_object *p = NULL;
    ck_assert_int_eq(jsonx_parse("{\"_meta\":{\"progressToken\":\"t1\"}}", 32, &p, NULL), 0);
    ck_assert_str_eq(json_object_get_string(mcp_progress_token(p)), "t1");
    json_object_put(p);
    ck_assert_int_eq(jsonx_parse("{\"_meta\":{\"progressToken\":[1]}}", 31, &p, NULL), 0);
    ck_assert_ptr_null(mcp_progress_token(p));
    json_object_put(p);
    s = dump(mcp_notification("notifications/progress", NULL));
    ck_assert_str_eq(s, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}");
    free(s);
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("mcp");
    unit_tcase_add(s, "protocol", UNIT_TESTS(
        test_decode_kinds, test_decode_errors, test_negotiate, test_dispatch, test_results,));
    return s;
}
