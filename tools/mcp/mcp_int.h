/* What the pieces of sandbox-mcp share: the server and call state, the tool
 * table (tools.c) and its handlers (tools_*.c), the stdio loop (server.c)
 * and the API calls (tools/sandbox-mcp.c). Internal to the binary. */
#ifndef SBX_MCP_INT_H
#define SBX_MCP_INT_H

#include <json-c/json.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client.h"
#include "httpc.h"
#include "mcp.h"

#define MCP_MAX_CALLS          16       /* tool calls in flight */
#define MCP_REQUEST_TIMEOUT_MS 30000L   /* one plain API call */
#define MCP_OUTPUT_WAIT_MAX_S  20       /* sandbox_exec_output's wait: inside one plain call */
#define MCP_WAIT_DEFAULT_S     300
#define MCP_WAIT_MAX_S         3600
#define MCP_EXEC_DEFAULT_S     600      /* exec timeout when the call names none: the CLI's and the API's */
#define MCP_GET_OPS_MAX        10       /* operations sandbox_get shows, newest first, compact */
#define MCP_EXEC_SLACK_S       60       /* added to an exec's wait budget */
#define MCP_POLL_WAIT_S        1        /* ?wait= per long-poll: progress and cancel granularity */
#define MCP_EOF_GRACE_S        2        /* calls may still answer after stdin closed */
#define MCP_PROGRESS_EVERY_MS  900      /* progress notifications at most this often */
/* A running exec's progress message carries the last line of its output:
 * looked for in its last bytes, cut to a line that fits a message. */
#define MCP_PROGRESS_TAIL_BYTES 512
#define MCP_PROGRESS_LINE_BYTES 160
#define MCP_PATH_MAX           2048     /* an API path: two ids of 256 bytes percent-encoded fit */
#define MCP_EVENTS_WAIT_MAX_S  30       /* sandbox_events: longest wait for a new event */
#define MCP_LOGS_DEFAULT_TAIL  200      /* sandbox_logs: lines from the end unless the call says */
#define MCP_LOGS_MAX_BYTES     (64 * 1024) /* sandbox_logs: text returned at most (per field) */
#define MCP_LOGS_LINE_MAX      (1024u * 1024u) /* one NDJSON line of the logs answer */
#define MCP_ID_KEY_MAX         160      /* a request id's JSON text, to match notifications/cancelled */
/* sandbox_write_file / sandbox_read_file: the most bytes a content carries
 * (base64 of it still fits a 4 MiB JSON-RPC line), and what a read returns
 * unless the call says. */
#define MCP_FILE_MAX_BYTES     (2u * 1024u * 1024u)
#define MCP_FILE_READ_DEFAULT  (256 * 1024)
#define MCP_FORK_MAX           32       /* sandbox_fork: sandboxes one call makes at most */
#define MCP_POST_ATTEMPTS      3        /* sandbox_fork: a POST whose answer was lost, sent again with its key */

typedef struct call call_t;
typedef struct mcp_tool mcp_tool_t;

/* ---------------------------------------------------------------- the tool table (tools.c) */

/* A tool's handler: checks its own argument values and returns the tool
 * result (mcp_tool_ok or mcp_tool_error; new reference). Names and required
 * arguments were checked against the schema before. */
typedef json_object *mcp_tool_fn_t(call_t *c, json_object *args);

/* One row of the tool table: what tools/list shows, as data (the schemas
 * and annotations are JSON written with ' for ", no apostrophes in the
 * texts), and the handler a tools/call of that name runs. */
struct mcp_tool {
    mcp_tool_def_t def;
    mcp_tool_fn_t *run;
};

/* The table, in tools/list order, and its length. */
extern const mcp_tool_t tool_table[];
extern const size_t tool_count;

/* Turns the table's texts into JSON once at start (defs for tools/list,
 * parsed input schemas for tool_args_check). Returns 0, SBX_ENOMEM, or
 * SBX_EINVAL when a schema does not parse. tools_release frees it all. */
int tools_init(void);
void tools_release(void);

/* The table as tools/list shows it (tool_count entries, after tools_init);
 * mcp_handle's tool points into it. */
const mcp_tool_def_t *tools_defs(void);

/* The row of a def from tools_defs() (by position, not by name). */
const mcp_tool_t *tools_row(const mcp_tool_def_t *def);

/* Row's parsed input schema (borrowed; after tools_init). */
json_object *tools_input_schema(const mcp_tool_t *row);

/* Checks a call's arguments against the names the tool's schema knows and
 * the required ones; returns an isError result, or NULL when fine. */
json_object *tool_args_check(const mcp_tool_t *row, json_object *args);

/* Sends a request that starts an operation (op_request) and gives back its
 * answer as the tool's result, or op_request's isError result. */
json_object *tool_op_result(call_t *c, const char *method, const char *path, const char *idem, const char *what,
                            bool wait, int64_t timeout_s);

/* Runs the call's tool: the schema check, the configuration and token
 * checks, its HTTP client, then the row's handler. Returns the result. */
json_object *tool_run(call_t *c);

/* Argument readers: an absent argument gives the default and true; a
 * present but wrong one returns false with *bad set to the isError result. */
bool tool_arg_int(json_object *args, const char *k, int64_t min, int64_t max, int64_t def, int64_t *ret,
                  json_object **bad);
bool tool_arg_bool(json_object *args, const char *k, bool def, bool *ret, json_object **bad);
/* wait (default def_wait) and timeout_seconds (1 to MCP_WAIT_MAX_S, default
 * MCP_WAIT_DEFAULT_S) of a tool that starts an operation (WAIT_PROPS). */
bool tool_arg_wait(json_object *args, bool def_wait, bool *ret_wait, int64_t *ret_timeout_s, json_object **bad);
/* A string of 1 to 256 bytes, borrowed from args; NULL when absent. */
bool tool_arg_str(json_object *args, const char *k, const char **ret, json_object **bad);
/* Copies args[k] into body[k] when present. */
void tool_arg_copy(json_object *body, json_object *args, const char *k);
/* Writes prefix, id percent-encoded and suffix (NULL: none) into out;
 * returns false (with *bad set) when that does not fit. */
bool tool_id_path(char *out, size_t n, const char *prefix, const char *id, const char *suffix, json_object **bad);

/* The handlers: tools_sandbox.c, tools_routes.c, tools_events.c, tools_files.c, tools_snapshots.c,
 * tools_volumes.c. */
mcp_tool_fn_t tool_create, tool_wait, tool_exec, tool_get, tool_list, tool_delete, tool_extend, tool_operation,
    tool_exec_output, tool_cancel;
mcp_tool_fn_t tool_share, tool_routes, tool_unshare;
mcp_tool_fn_t tool_pools, tool_images, tool_pause, tool_resume, tool_network, tool_network_log; /* tools_sandbox.c */
mcp_tool_fn_t tool_events, tool_logs;
mcp_tool_fn_t tool_write_file, tool_read_file, tool_list_files; /* tools_files.c */
mcp_tool_fn_t tool_snapshot, tool_snapshots, tool_snapshot_delete, tool_snapshot_copy, tool_fork, tool_templates,
    tool_template_build; /* tools_snapshots.c */
mcp_tool_fn_t tool_volume_create, tool_volumes, tool_volume_delete; /* tools_volumes.c */

/* ---------------------------------------------------------------- the server (server.c) */

typedef struct server {
    pthread_mutex_t out_mu;          /* one writer of stdout at a time */
    pthread_mutex_t mu;              /* calls, client_level */
    pthread_cond_t idle;             /* a call finished */
    call_t *calls[MCP_MAX_CALLS];
    int ncalls;
    int client_level;                /* notifications/message at or above this */
    bool closing;                    /* stdin closed: no more log notifications */
    int stderr_level;                /* stderr lines at or above this */
    char *url, *token;               /* token NULL: every tool call says how to set one */
    char *ca_file;                   /* SANDBOX_CA_FILE / config 'ca_file'; NULL: the system's CAs */
    char config_error[512];          /* the configuration could not be read */
    mcp_server_info_t info;
} server_t;

struct call {
    server_t *srv;
    json_object *id;                 /* the request's id (owned copy) */
    char id_key[MCP_ID_KEY_MAX];     /* its JSON text, to match notifications/cancelled */
    const mcp_tool_t *tool;          /* its row of the tool table */
    json_object *args;               /* owned reference */
    json_object *progress_token;     /* owned copy, or NULL */
    int64_t progress;                /* last progress value sent */
    atomic_int cancel;
    httpc_t *http;
};

/* Writes msg as one line on stdout (one writer at a time); takes msg. */
void emit(server_t *s, json_object *msg);

/* Logs a line on stderr at or above the stderr level and sends it as
 * notifications/message at or above the client's level. */
__attribute__((format(printf, 3, 4))) void say(server_t *s, int level, const char *fmt, ...);

/* Initialises s's locks and levels; level is the stderr log level's name.
 * Returns 0, or SBX_EINVAL for an unknown level. */
int server_init(server_t *s, const char *level);

/* Reads stdin to its end, one message a line, answering and starting tool
 * calls; then lets the calls finish (a short grace, then cancelled) and
 * returns once none is left. */
void server_run(server_t *s);

/* Frees what server_init and the configuration put into s. */
void server_release(server_t *s);

/* ---------------------------------------------------------------- API calls (tools/sandbox-mcp.c) */

/* A failed call: client_error_t (client/client.h), {code, message} and more. */
typedef client_error_t api_err_t;

/* One API call. Returns 0 with *ret (a 2xx JSON object, new reference), or
 * SBX_EIO with e filled: the API's error code and message, "unavailable"
 * when the controller cannot be reached, "cancelled". GETs are retried on
 * transport errors and 502-504 until deadline_ms (monotonic). */
int api(call_t *c, const char *method, const char *path, json_object *body, const char *idem, int64_t deadline_ms,
        json_object **ret, api_err_t *e);

/* Sends notifications/progress when the call asked for it. */
void progress(call_t *c, int64_t value, int64_t total_s, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Waits for an operation: *ret_op is the last seen (new reference), *done
 * whether it is terminal. Returns 0, or SBX_EIO with e. */
int wait_op(call_t *c, const char *op_id, int64_t timeout_s, json_object **ret_op, bool *done, api_err_t *e);

/* The isError result of a failed API call. */
json_object *api_failure(const api_err_t *e);

/* The error of a finished operation that did not succeed. */
json_object *op_failure(json_object *op);

/* The monotonic time ms from now. */
int64_t deadline_in(int64_t ms);

/* GET path; its answer is the tool's result. */
json_object *get_result(call_t *c, const char *path);
/* As get_result, shape(resp) first changing the answer in place (what an
 * agent's context gets). */
json_object *get_result_shaped(call_t *c, const char *path, void (*shape)(json_object *resp));

/* Waits for an operation. Returns the isError result to give back when the
 * wait failed or the operation finished without succeeding; else NULL with
 * *ret_op (new reference) and *ret_done. */
json_object *wait_outcome(call_t *c, const char *op_id, int64_t timeout_s, json_object **ret_op, bool *ret_done);

/* Sends a request that starts an operation and, with wait, waits for it.
 * Returns NULL with *ret (new reference), or the isError result to give
 * back. See tools/sandbox-mcp.c. */
json_object *op_request(call_t *c, const char *method, const char *path, json_object *body, const char *idem,
                        const char *what, bool wait, int64_t timeout_s, json_object **ret, bool *ret_done);

#endif
