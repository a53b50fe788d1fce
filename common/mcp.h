/* The MCP wire protocol as pure functions: JSON-RPC 2.0 framing (one
 * message per line), version negotiation, the fixed methods (initialize,
 * ping, tools/list, logging/setLevel) and tool-result shapes. No I/O and no
 * threads: tools/sandbox-mcp.c reads lines, calls these, and runs tool
 * calls. */
#ifndef SBX_MCP_H
#define SBX_MCP_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>

/* JSON-RPC error codes. */
#define MCP_PARSE_ERROR      (-32700)
#define MCP_INVALID_REQUEST  (-32600)
#define MCP_METHOD_NOT_FOUND (-32601)
#define MCP_INVALID_PARAMS   (-32602)
#define MCP_INTERNAL_ERROR   (-32603)

/* The longest line read; longer ones are a parse error. */
#define MCP_MAX_LINE_BYTES   (4u * 1024u * 1024u)

#define MCP_VERSION_LATEST   "2025-11-25"

typedef enum { MCP_MSG_REQUEST, MCP_MSG_NOTIFICATION, MCP_MSG_RESPONSE } mcp_msg_kind_t;

typedef struct mcp_msg {
    mcp_msg_kind_t kind;
    json_object *root;    /* owned: the whole message */
    json_object *id;      /* borrowed from root: a string or integer (requests, responses) */
    const char *method;   /* borrowed (requests, notifications) */
    json_object *params;  /* borrowed; NULL when absent */
} mcp_msg_t;

/* Decodes one line. Returns 0 with *ret filled (release with
 * mcp_msg_release), or a negative code with *ret_error set to the error
 * response to send (id null for a parse error, the request's id when it can
 * be read). An empty line returns 1 with nothing to send. */
int mcp_decode(const char *line, size_t len, mcp_msg_t *ret, json_object **ret_error);
void mcp_msg_release(mcp_msg_t *m);

/* A copy of a JSON-RPC id (a string or an integer). New reference. */
json_object *mcp_id_copy(json_object *id);

/* {"jsonrpc":"2.0","id":id,"result":result}; takes result, copies id. */
json_object *mcp_result(json_object *id, json_object *result);
/* {"jsonrpc":"2.0","id":id|null,"error":{"code","message"}}; copies id. */
json_object *mcp_error(json_object *id, int code, const char *message);
/* {"jsonrpc":"2.0","method":method,"params":params}; takes params. */
json_object *mcp_notification(const char *method, json_object *params);

/* The version to answer an initialize asking for `requested` with: it
 * when we support it, else our newest. */
const char *mcp_negotiate(const char *requested);

/* Log levels of logging/setLevel, in increasing severity; -1 when unknown. */
int mcp_log_level(const char *name);
const char *mcp_log_level_name(int level);

/* One tool as tools/list shows it. The schemas and annotations are JSON
 * texts (checked by the unit tests). */
typedef struct mcp_tool_def {
    const char *name;
    const char *title;
    const char *description;
    const char *input_schema;
    const char *output_schema;
    const char *annotations;
} mcp_tool_def_t;

/* The server's fixed state for the simple methods. */
typedef struct mcp_server_info {
    const char *name, *title, *version, *instructions;
    const mcp_tool_def_t *tools;
    size_t ntools;
} mcp_server_info_t;

/* Answers the methods that need no I/O: initialize, ping, tools/list,
 * logging/setLevel (*log_level updated), and any unknown method (-32601).
 * Returns the response to send, or NULL when the method is tools/call (the
 * caller runs it) — after checking its params: an unknown tool or a
 * malformed call is answered here (-32602). *ret_tool then names the tool. */
json_object *mcp_handle(const mcp_server_info_t *info, const mcp_msg_t *m, int *log_level,
                        const mcp_tool_def_t **ret_tool);

/* A tool result: {"content":[{"type":"text","text":<JSON of structured>}],
 * "structuredContent":structured, "isError":false}. Takes structured. */
json_object *mcp_tool_ok(json_object *structured);
/* A tool execution error: {"content":[{"type":"text","text":
 * "{\"error\":{\"code\":…,\"message\":…}}"}],"isError":true}. */
json_object *mcp_tool_error(const char *code, const char *message);

/* The params' _meta.progressToken (a string or integer), or NULL. Borrowed. */
json_object *mcp_progress_token(json_object *params);

#endif
