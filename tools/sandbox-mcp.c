/* sandbox-mcp: a local stdio MCP server over the Sandbox HTTP API, so coding
 * agents drive the same lifecycle as the CLI (docs/mcp.md). JSON-RPC 2.0,
 * one message per line on stdin/stdout; logs on stderr only. The protocol
 * pieces are in common/mcp.c; here are the I/O loop, the tool calls (one
 * thread each, with its own HTTP client) and cancellation. */
#include <curl/curl.h>
#include <errno.h>
#include <json-c/json.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clientcfg.h"
#include "errors.h"
#include "httpc.h"
#include "jsonx.h"
#include "limits.h"
#include "mcp.h"
#include "sbuf.h"
#include "timeutil.h"
#include "version.h"


#define MCP_MAX_CALLS          16       /* tool calls in flight */
#define MCP_REQUEST_TIMEOUT_MS 30000L   /* one plain API call */
#define MCP_WAIT_DEFAULT_S     300
#define MCP_WAIT_MAX_S         3600
#define MCP_EXEC_DEFAULT_S     60       /* exec timeout when the call names none */
#define MCP_EXEC_SLACK_S       60       /* added to an exec's wait budget */
#define MCP_POLL_WAIT_S        1        /* ?wait= per long-poll: progress and cancel granularity */
#define MCP_RETRY_MS           500
#define MCP_EOF_GRACE_S        2        /* calls may still answer after stdin closed */
#define MCP_PROGRESS_EVERY_MS  900      /* progress notifications at most this often */
#define MCP_PATH_MAX           2048     /* an API path: two ids of 256 bytes percent-encoded fit */
#define MCP_EVENTS_WAIT_MAX_S  30       /* sandbox_events: longest wait for a new event */
#define MCP_LOGS_DEFAULT_TAIL  200      /* sandbox_logs: lines from the end unless the call says */
#define MCP_LOGS_MAX_BYTES     (64 * 1024) /* sandbox_logs: text returned at most (per field) */
#define MCP_LOGS_LINE_MAX      (1024u * 1024u) /* one NDJSON line of the logs answer */

/* ---------------------------------------------------------------- tools */

/* The schemas are written with ' for " (no apostrophes in the texts) and
 * turned into JSON once at start. */
#define STR "{'type':'string'}"
#define KV  "{'type':'object','additionalProperties':{'type':'string'}}"
#define OP_SCHEMA                                                                                               \
    "{'type':'object','description':'An operation (docs/api.md)','properties':{'id':{'type':'string'},"      \
    "'kind':{'type':'string'},'state':{'type':'string','enum':['pending','admitted','leased','running',"    \
    "'succeeded','failed','cancelled']},'sandbox_id':{'type':['string','null']},'error':{'type':['object',"  \
    "'null']},'placement':{'type':['object','null']},'result':{'type':['object','null']}},"                   \
    "'required':['id','kind','state']}"
#define SBX_SCHEMA                                                                                              \
    "{'type':'object','description':'A sandbox (docs/api.md)','properties':{'id':{'type':'string'},"          \
    "'tenant':{'type':'string'},'image':{'type':['string','null']},'phase':{'type':'string'},"               \
    "'isolation':{'type':'string'},'network':{'type':['string','null']},'worker':{'type':['string','null']}," \
    "'expires_at':{'type':['string','null']}},'required':['id','phase']}"
#define EVENT_SCHEMA                                                                                            \
    "{'type':'object','description':'An event (docs/events.md)','properties':{'id':{'type':'integer'},"      \
    "'ts':{'type':'string'},'tenant':{'type':['string','null']},'kind':{'type':'string'},'sandbox_id':"      \
    "{'type':['string','null']},'operation_id':{'type':['string','null']},'data':{'type':'object'}},"       \
    "'required':['id','ts','kind','data']}"
#define ROUTE_SCHEMA                                                                                            \
    "{'type':'object','description':'A public route (docs/api.md)','properties':{'id':{'type':'string'},"     \
    "'name':{'type':'string'},'sandbox_id':{'type':'string'},'port':{'type':'integer'},'auth':{'type':"      \
    "'string','enum':['token','public']},'state':{'type':'string','description':'pending, active or "        \
    "removed'},'url':{'type':'string','description':'the address to give out'},'expires_at':{'type':"        \
    "['string','null']},'created_at':{'type':['string','null']},'removed_at':{'type':['string','null']},"    \
    "'removed_reason':{'type':['string','null']}},'required':['id','port','auth','url']}"
/* wait and timeout_seconds of a tool that starts an operation; d is the
 * default of wait. */
#define WAIT_PROPS_DEFAULT(d)                                                                              \
    "'wait':{'type':'boolean','description':'wait for the operation to finish (default " d ")'},"        \
    "'timeout_seconds':{'type':'integer','minimum':1,'maximum':3600,'description':'how long to wait "     \
    "(default 300); the operation goes on after it'}"
#define WAIT_PROPS WAIT_PROPS_DEFAULT("false")

static const mcp_tool_def_t tool_templates[] = {
    { "sandbox_create", "Create a sandbox",
      "Creates a disposable sandbox (a container with bounded cpu, memory and lifetime). Describe the work "
      "honestly: untrusted_repo, generated_code and hostile decide the isolation; the server refuses rather "
      "than run it weaker. Network is none unless asked. Leave image out to get the server's default image "
      "(a small local busybox image unless the operator set another). Returns the sandbox and its create "
      "operation; with wait=true, once that operation finished.",
      "{'type':'object','properties':{'image':{'type':'string','description':'container image; when absent "
      "the server uses its default_image (sandbox/busybox:latest unless the operator changed it). Name one "
      "only when the task needs tools the default lacks and the tenant policy allows it'},'tenant':" STR ",'cpu_millis':{'type':'integer','minimum':10,'description':'thousandths "
      "of a core (default 1000)'},'memory_mib':{'type':'integer','minimum':6,'description':'default 512'},"
      "'ttl_seconds':{'type':'integer','minimum':10,'description':'lifetime once running (default 3600)'},"
      "'network':{'type':'string','enum':['none','restricted','open']},'untrusted_repo':{'type':'boolean'},"
      "'generated_code':{'type':'boolean'},'hostile':{'type':'boolean'},'isolation':{'type':'string','enum':"
      "['container','gvisor','microvm'],'description':'the weakest class you accept'},'read_only_root':"
      "{'type':'boolean'},'hardened':{'type':'boolean'},'env':" KV ",'labels':" KV ",'selector':" KV ","
      "'idempotency_key':{'type':'string','description':'retrying with the same key returns the same "
      "sandbox'}," WAIT_PROPS "},'additionalProperties':false}",
      "{'type':'object','properties':{'sandbox':" SBX_SCHEMA ",'operation':" OP_SCHEMA "},"
      "'required':['sandbox','operation']}",
      "{'readOnlyHint':false,'destructiveHint':false,'idempotentHint':false,'openWorldHint':false}" },
    { "sandbox_wait", "Wait for an operation",
      "Waits until an operation (create, delete, exec) succeeded, failed or was cancelled, or the timeout "
      "passed (done=false). A failed operation is reported as an error with its code and message.",
      "{'type':'object','properties':{'operation_id':" STR ",'timeout_seconds':{'type':'integer','minimum':1,"
      "'maximum':3600}},'required':['operation_id'],'additionalProperties':false}",
      "{'type':'object','properties':{'operation':" OP_SCHEMA ",'done':{'type':'boolean'}},"
      "'required':['operation','done']}",
      "{'readOnlyHint':true,'openWorldHint':false}" },
    { "sandbox_exec", "Run a command in a sandbox",
      "Runs argv (an array, no shell) in a running sandbox and waits for it. Output is bounded: check the "
      "truncation flags. A non-zero exit code is a result, not an error.",
      "{'type':'object','properties':{'sandbox_id':" STR ",'argv':{'type':'array','items':{'type':'string'},"
      "'minItems':1},'timeout_seconds':{'type':'integer','minimum':1,'description':'kill the command after "
      "this (default 60)'},'env':" KV ",'cwd':" STR ",'max_output_bytes':{'type':'integer','minimum':1,"
      "'description':'bound per stream'}},'required':['sandbox_id','argv'],'additionalProperties':false}",
      "{'type':'object','properties':{'operation_id':" STR ",'exit_code':{'type':'integer'},'signal':"
      "{'type':'integer'},'timed_out':{'type':'boolean'},'duration_ms':{'type':'integer'},'stdout':" STR ","
      "'stderr':" STR ",'stdout_truncated':{'type':'boolean'},'stderr_truncated':{'type':'boolean'},"
      "'stdout_bytes':{'type':'integer'},'stderr_bytes':{'type':'integer'}},'required':['operation_id',"
      "'exit_code','timed_out','stdout','stderr','stdout_truncated','stderr_truncated']}",
      "{'readOnlyHint':false,'destructiveHint':false,'idempotentHint':false,'openWorldHint':false}" },
    { "sandbox_get", "Show a sandbox",
      "Shows a sandbox with its operations, including why it was placed where it is (or refused).",
      "{'type':'object','properties':{'sandbox_id':" STR "},'required':['sandbox_id'],"
      "'additionalProperties':false}",
      "{'type':'object','properties':{'sandbox':" SBX_SCHEMA ",'operations':{'type':'array','items':" OP_SCHEMA
      "}},'required':['sandbox','operations']}",
      "{'readOnlyHint':true,'openWorldHint':false}" },
    { "sandbox_list", "List sandboxes",
      "Lists the sandboxes this token may see, newest first; deleted ones only with all=true.",
      "{'type':'object','properties':{'tenant':" STR ",'all':{'type':'boolean'},'limit':{'type':'integer',"
      "'minimum':1,'maximum':1000}},'additionalProperties':false}",
      "{'type':'object','properties':{'sandboxes':{'type':'array','items':" SBX_SCHEMA "}},"
      "'required':['sandboxes']}",
      "{'readOnlyHint':true,'openWorldHint':false}" },
    { "sandbox_delete", "Delete a sandbox",
      "Deletes a sandbox and everything it holds. Do this when the task ends, also after a failure.",
      "{'type':'object','properties':{'sandbox_id':" STR ",'idempotency_key':" STR "," WAIT_PROPS "},"
      "'required':['sandbox_id'],'additionalProperties':false}",
      "{'type':'object','properties':{'operation':" OP_SCHEMA "},'required':['operation']}",
      "{'readOnlyHint':false,'destructiveHint':true,'idempotentHint':true,'openWorldHint':false}" },
    { "operation_get", "Show an operation",
      "Shows an operation: kind, state, error, placement and, for exec, the result.",
      "{'type':'object','properties':{'operation_id':" STR "},'required':['operation_id'],"
      "'additionalProperties':false}",
      "{'type':'object','properties':{'operation':" OP_SCHEMA "},'required':['operation']}",
      "{'readOnlyHint':true,'openWorldHint':false}" },
    { "sandbox_share", "Share a port of a sandbox",
      "Gives a port of a running sandbox a public address (a route), to show a web app or an API to a person "
      "or a program outside. Returns route.url and, with auth token (the default), access_token: callers send "
      "it as Authorization: Bearer TOKEN. The access token is shown only in this result and never again: keep "
      "it (a retry with the same idempotency_key returns the route without it). Share only what the task needs, "
      "with a ttl_seconds; the route goes away with sandbox_unshare, its TTL, or the sandbox.",
      "{'type':'object','properties':{'sandbox_id':" STR ",'port':{'type':'integer','minimum':1,'maximum':"
      "65535,'description':'the port the app listens on inside the sandbox'},'ttl_seconds':{'type':'integer',"
      "'minimum':10,'description':'remove the route after this (default: when the sandbox goes)'},'auth':"
      "{'type':'string','enum':['token','public'],'description':'token (default): callers need the access "
      "token; public: anyone with the URL'},'idempotency_key':" STR "," WAIT_PROPS_DEFAULT("true") "},"
      "'required':['sandbox_id','port'],'additionalProperties':false}",
      "{'type':'object','properties':{'route':" ROUTE_SCHEMA ",'operation':" OP_SCHEMA ",'access_token':"
      "{'type':'string','description':'shown only now'}},'required':['route','operation']}",
      "{'readOnlyHint':false,'destructiveHint':false,'idempotentHint':false,'openWorldHint':false}" },
    { "sandbox_routes", "List the routes of a sandbox",
      "Lists the public routes of a sandbox (active ones; removed ones too with all=true), with their URLs. "
      "Access tokens are never shown again.",
      "{'type':'object','properties':{'sandbox_id':" STR ",'all':{'type':'boolean','description':'include "
      "removed routes'}},'required':['sandbox_id'],'additionalProperties':false}",
      "{'type':'object','properties':{'routes':{'type':'array','items':" ROUTE_SCHEMA "}},'required':['routes']}",
      "{'readOnlyHint':true,'openWorldHint':false}" },
    { "sandbox_unshare", "Remove a route",
      "Removes a public route of a sandbox: its URL stops answering. Do this as soon as nobody needs the "
      "address any more; deleting the sandbox removes its routes as well.",
      "{'type':'object','properties':{'sandbox_id':" STR ",'route_id':" STR "," WAIT_PROPS_DEFAULT("true") "},"
      "'required':['sandbox_id','route_id'],'additionalProperties':false}",
      "{'type':'object','properties':{'operation':" OP_SCHEMA "},'required':['operation']}",
      "{'readOnlyHint':false,'destructiveHint':true,'idempotentHint':true,'openWorldHint':false}" },
    { "sandbox_events", "List events",
      "Lists what happened, oldest first: sandbox phases (sandbox.pending ... sandbox.running, sandbox.deleted, "
      "failed, lost), operation states (operation.admitted ... operation.succeeded or failed, with error codes "
      "and exec exit codes), routes and workers. A cursor: pass after = the next_after of the previous call "
      "to get only newer events, none missed and none twice (after 0, the default, starts at the oldest kept). "
      "With wait (seconds, at most 30) the call waits for a new event when there is none yet and returns an "
      "empty list when none came. Filter by sandbox_id, operation_id or kind (exact, or a prefix such as "
      "operation.*). Event data never holds secrets.",
      "{'type':'object','properties':{'sandbox_id':" STR ",'operation_id':" STR ",'kind':{'type':'string',"
      "'description':'e.g. sandbox.running, or operation.* for every operation state'},'after':{'type':"
      "'integer','minimum':0,'description':'the next_after of the previous call (default 0: from the "
      "oldest)'},'wait':{'type':'integer','minimum':0,'maximum':30,'description':'seconds to wait for a new "
      "event when there is none (default 0)'},'limit':{'type':'integer','minimum':1,'maximum':1000,"
      "'description':'at most this many (default 100)'}},'additionalProperties':false}",
      "{'type':'object','properties':{'events':{'type':'array','items':" EVENT_SCHEMA "},'next_after':{'type':"
      "'integer','description':'pass as after next time'}},'required':['events','next_after']}",
      "{'readOnlyHint':true,'openWorldHint':false}" },
    { "sandbox_logs", "Read a sandbox's output",
      "Returns what the sandbox's main process wrote to stdout and stderr: the last tail lines (default 200), "
      "at most 64 KiB (truncated=true when cut). text has both streams in the order written; once the "
      "container is gone it is the tail the controller kept, stdout and stderr merged. Output of commands run "
      "with sandbox_exec is in that call's result, not here.",
      "{'type':'object','properties':{'sandbox_id':" STR ",'tail':{'type':'integer','minimum':0,'maximum':"
      "1000000,'description':'lines from the end (default 200)'}},'required':['sandbox_id'],"
      "'additionalProperties':false}",
      "{'type':'object','properties':{'text':" STR ",'stdout':" STR ",'stderr':" STR ",'truncated':{'type':"
      "'boolean'}},'required':['text','stdout','stderr','truncated']}",
      "{'readOnlyHint':true,'openWorldHint':false}" },
};
#define NTOOLS (sizeof tool_templates / sizeof tool_templates[0])

static mcp_tool_def_t tools[NTOOLS];
static char *tool_texts[NTOOLS * 3];
static json_object *tool_inputs[NTOOLS];  /* each tool's inputSchema, parsed once */

static char *dequote(const char *s)
{
    char *d = strdup(s);
    for (char *p = d; p && *p; p++)
        if (*p == '\'')
            *p = '"';
    return d;
}

static int tools_init(void)
{
    for (size_t i = 0; i < NTOOLS; i++) {
        tools[i] = tool_templates[i];
        tool_texts[3 * i] = dequote(tool_templates[i].input_schema);
        tool_texts[3 * i + 1] = dequote(tool_templates[i].output_schema);
        tool_texts[3 * i + 2] = dequote(tool_templates[i].annotations);
        if (!tool_texts[3 * i] || !tool_texts[3 * i + 1] || !tool_texts[3 * i + 2])
            return SBX_ENOMEM;
        tools[i].input_schema = tool_texts[3 * i];
        tools[i].output_schema = tool_texts[3 * i + 1];
        tools[i].annotations = tool_texts[3 * i + 2];
        if (jsonx_parse(tools[i].input_schema, strlen(tools[i].input_schema), &tool_inputs[i], NULL) < 0)
            return SBX_EINVAL;
    }
    return 0;
}

/* ---------------------------------------------------------------- server */

typedef struct call call_t;

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
    char config_error[512];          /* the configuration could not be read */
    mcp_server_info_t info;
} server_t;

struct call {
    server_t *srv;
    json_object *id;                 /* the request's id (owned copy) */
    char id_key[160];                /* its JSON text, to match notifications/cancelled */
    const mcp_tool_def_t *tool;
    json_object *args;               /* owned reference */
    json_object *progress_token;     /* owned copy, or NULL */
    int64_t progress;                /* last progress value sent */
    atomic_int cancel;
    httpc_t *http;
};

static void emit(server_t *s, json_object *msg)
{
    const char *text = json_object_to_json_string_ext(msg, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    pthread_mutex_lock(&s->out_mu);
    fputs(text ? text : "{}", stdout);
    fputc('\n', stdout);
    fflush(stdout);
    pthread_mutex_unlock(&s->out_mu);
    json_object_put(msg);
}

__attribute__((format(printf, 3, 4))) static void say(server_t *s, int level, const char *fmt, ...)
{
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (level >= s->stderr_level)
        fprintf(stderr, "sandbox-mcp: %s: %s\n", mcp_log_level_name(level), text);
    pthread_mutex_lock(&s->mu);
    bool send = level >= s->client_level && !s->closing;
    pthread_mutex_unlock(&s->mu);
    if (send) {
        json_object *p = json_object_new_object();
        jsonx_add_str(p, "level", mcp_log_level_name(level));
        jsonx_add_str(p, "logger", "sandbox-mcp");
        jsonx_add_str(p, "data", text);
        emit(s, mcp_notification("notifications/message", p));
    }
}

static void id_key(json_object *id, char out[160])
{
    snprintf(out, 160, "%s", id ? json_object_to_json_string_ext(id, JSON_C_TO_STRING_PLAIN) : "null");
}

/* ---------------------------------------------------------------- API */

typedef struct api_err {
    char code[64];
    char message[512];
} api_err_t;

static bool cancelled(call_t *c, api_err_t *e)
{
    if (!c->cancel)
        return false;
    snprintf(e->code, sizeof e->code, "cancelled");
    snprintf(e->message, sizeof e->message, "the client cancelled the call");
    return true;
}

/* One API call. Returns 0 with *ret (a 2xx JSON object, new reference), or
 * SBX_EIO with e filled: the API's error code and message, "unavailable"
 * when the controller cannot be reached, "cancelled". retry_transport:
 * transport errors and 502-504 are retried until deadline_ms (monotonic). */
static int api(call_t *c, const char *method, const char *path, json_object *body, const char *idem,
               int64_t deadline_ms, json_object **ret, api_err_t *e)
{
    char hdr[200];
    const char *headers[2] = { NULL, NULL };
    if (idem) {
        snprintf(hdr, sizeof hdr, "Idempotency-Key: %.160s", idem);
        headers[0] = hdr;
    }
    *ret = NULL;
    for (;;) {
        if (cancelled(c, e))
            return SBX_EIO;
        httpc_response_t resp;
        int64_t left = deadline_ms - time_mono_ms();
        long tmo = left > MCP_REQUEST_TIMEOUT_MS ? MCP_REQUEST_TIMEOUT_MS : (left < 1000 ? 1000 : (long)left);
        int r = httpc_request(c->http, method, path, body, headers, tmo, &resp);
        if (cancelled(c, e)) {
            httpc_response_release(&resp);
            return SBX_EIO;
        }
        if (r == 0 && resp.status >= 200 && resp.status < 300 && resp.json &&
            json_object_is_type(resp.json, json_type_object)) {
            *ret = json_object_get(resp.json);
            httpc_response_release(&resp);
            return 0;
        }
        bool retry = r < 0 || resp.status == 0 || resp.status == 502 || resp.status == 503 || resp.status == 504;
        if (retry && time_mono_ms() + MCP_RETRY_MS < deadline_ms && strcmp(method, "GET") == 0) {
            httpc_response_release(&resp);
            usleep(MCP_RETRY_MS * 1000);
            continue;
        }
        if (r < 0 || resp.status == 0) {
            snprintf(e->code, sizeof e->code, "unavailable");
            snprintf(e->message, sizeof e->message, "cannot reach the controller at %s: %s", c->srv->url,
                     resp.error[0] ? resp.error : sbx_strerror(r));
        } else if (resp.status >= 200 && resp.status < 300) {
            snprintf(e->code, sizeof e->code, "bad_response");
            snprintf(e->message, sizeof e->message, "%s %s answered %ld without a JSON object", method, path,
                     resp.status);
        } else {
            const char *code = NULL, *msg = NULL;
            httpc_api_error(&resp, &code, &msg);
            snprintf(e->code, sizeof e->code, "%s", code ? code : "error");
            snprintf(e->message, sizeof e->message, "%s", msg ? msg : "");
        }
        httpc_response_release(&resp);
        return SBX_EIO;
    }
}

static void progress(call_t *c, int64_t value, int64_t total_s, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Sends notifications/progress when the call asked for it; value must grow
 * from one notification to the next. */
static void progress(call_t *c, int64_t value, int64_t total_s, const char *fmt, ...)
{
    if (!c->progress_token || c->cancel)
        return;
    char text[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    json_object *p = json_object_new_object();
    jsonx_add(p, "progressToken", mcp_id_copy(c->progress_token));
    if (value <= c->progress)
        value = c->progress + 1;
    c->progress = value;
    jsonx_add_int(p, "progress", value);
    if (total_s > 0 && value <= total_s)
        jsonx_add_int(p, "total", total_s);
    jsonx_add_str(p, "message", text);
    emit(c->srv, mcp_notification("notifications/progress", p));
}

static bool op_terminal(const char *state)
{
    return state && (strcmp(state, "succeeded") == 0 || strcmp(state, "failed") == 0 ||
                     strcmp(state, "cancelled") == 0);
}

/* Waits for an operation: *ret_op is the last seen (new reference), *done
 * whether it is terminal. Returns 0, or SBX_EIO with e (unreachable at the
 * end, not found, cancelled). */
static int wait_op(call_t *c, const char *op_id, int64_t timeout_s, json_object **ret_op, bool *done, api_err_t *e)
{
    char *esc = httpc_escape(op_id);
    if (!esc) {
        snprintf(e->code, sizeof e->code, "internal");
        snprintf(e->message, sizeof e->message, "out of memory");
        return SBX_EIO;
    }
    int64_t start = time_mono_ms(), deadline = start + timeout_s * 1000, last_sent = start;
    char path[256];
    *ret_op = NULL;
    *done = false;
    int rc = 0;
    for (;;) {
        int64_t left_ms = deadline - time_mono_ms();
        int w = left_ms >= MCP_POLL_WAIT_S * 1000 ? MCP_POLL_WAIT_S : 0;
        snprintf(path, sizeof path, "/v1/operations/%s?wait=%d", esc, w);
        json_object *resp = NULL;
        rc = api(c, "GET", path, NULL, NULL, deadline + 5000, &resp, e);
        if (rc < 0)
            break;
        json_object *op = jsonx_get_obj(resp, "operation");
        if (*ret_op)
            json_object_put(*ret_op);
        *ret_op = op ? json_object_get(op) : NULL;
        json_object_put(resp);
        const char *state = jsonx_get_str(*ret_op, "state");
        if (op_terminal(state)) {
            *done = true;
            break;
        }
        int64_t now = time_mono_ms();
        if (now >= deadline)
            break;
        if (w == 0) {
            /* Under a second left: sleep it away in short steps (a cancel
             * still ends it) and look once more, rather than spin. */
            int64_t nap = deadline - now < 200 ? deadline - now : 200;
            usleep((useconds_t)nap * 1000);
            if (cancelled(c, e)) {
                rc = SBX_EIO;
                break;
            }
        }
        /* About one progress notification a second (a long-poll may come
         * back a little early or late): progress counts the seconds
         * waited, total the seconds allowed. */
        now = time_mono_ms();
        if (now - last_sent >= MCP_PROGRESS_EVERY_MS) {
            last_sent = now;
            int64_t waited = (now - start + 500) / 1000;
            progress(c, waited, timeout_s, "%s is %s after %llds", op_id, state ? state : "?", (long long)waited);
        }
    }
    free(esc);
    return rc;
}

/* ---------------------------------------------------------------- arguments */

/* Checks the call's arguments against the names the tool knows and the
 * required ones; returns an isError result, or NULL when fine. */
static json_object *check_args(const mcp_tool_def_t *t, json_object *args)
{
    json_object *schema = tool_inputs[t - tools], *props = NULL, *req = NULL;
    json_object_object_get_ex(schema, "properties", &props);
    json_object_object_get_ex(schema, "required", &req);
    json_object *bad = NULL;
    char msg[300];
    json_object_object_foreach(args, k, v) {
        (void)v;
        if (!props || !json_object_object_get_ex(props, k, NULL)) {
            snprintf(msg, sizeof msg, "unknown argument \"%.64s\" for %s", k, t->name);
            bad = mcp_tool_error("invalid_argument", msg);
            break;
        }
    }
    for (size_t i = 0; !bad && req && i < json_object_array_length(req); i++) {
        const char *k = json_object_get_string(json_object_array_get_idx(req, i));
        json_object *v = NULL;
        if (!json_object_object_get_ex(args, k, &v) || !v) {
            snprintf(msg, sizeof msg, "%s needs the argument \"%s\"", t->name, k);
            bad = mcp_tool_error("invalid_argument", msg);
        }
    }
    return bad;
}

/* An optional integer argument in [min, max]; returns false (with *bad set)
 * when present but wrong. */
static bool int_arg(json_object *args, const char *k, int64_t min, int64_t max, int64_t def, int64_t *ret,
                    json_object **bad)
{
    json_object *v = NULL;
    *ret = def;
    if (!json_object_object_get_ex(args, k, &v) || !v)
        return true;
    if (!json_object_is_type(v, json_type_int) || json_object_get_int64(v) < min || json_object_get_int64(v) > max) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s must be an integer from %lld to %lld", k, (long long)min, (long long)max);
        *bad = mcp_tool_error("invalid_argument", msg);
        return false;
    }
    *ret = json_object_get_int64(v);
    return true;
}

/* An optional boolean argument, def when absent. */
static bool bool_arg(json_object *args, const char *k, bool def, bool *ret, json_object **bad)
{
    json_object *v = NULL;
    *ret = def;
    if (!json_object_object_get_ex(args, k, &v) || !v)
        return true;
    if (!json_object_is_type(v, json_type_boolean)) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s must be true or false", k);
        *bad = mcp_tool_error("invalid_argument", msg);
        return false;
    }
    *ret = json_object_get_boolean(v);
    return true;
}

static bool str_arg(json_object *args, const char *k, const char **ret, json_object **bad)
{
    json_object *v = NULL;
    *ret = NULL;
    if (!json_object_object_get_ex(args, k, &v) || !v)
        return true;
    if (!json_object_is_type(v, json_type_string) || json_object_get_string_len(v) == 0 ||
        json_object_get_string_len(v) > 256) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s must be a string of 1 to 256 bytes", k);
        *bad = mcp_tool_error("invalid_argument", msg);
        return false;
    }
    *ret = json_object_get_string(v);
    return true;
}

/* Copies args[k] into body[k] when present. */
static void pass(json_object *body, json_object *args, const char *k)
{
    json_object *v = NULL;
    if (json_object_object_get_ex(args, k, &v) && v)
        jsonx_add(body, k, json_object_get(v));
}

static json_object *api_failure(const api_err_t *e) { return mcp_tool_error(e->code, e->message); }

/* Writes prefix, id percent-encoded and suffix (NULL: none) into out;
 * returns false (with *bad set) when that does not fit. */
static bool id_path(char *out, size_t n, const char *prefix, const char *id, const char *suffix, json_object **bad)
{
    char *esc = httpc_escape(id);
    int len = esc ? snprintf(out, n, "%s%s%s", prefix, esc, suffix ? suffix : "") : -1;
    free(esc);
    if (len < 0 || (size_t)len >= n) {
        *bad = mcp_tool_error("internal", "cannot build the request path");
        return false;
    }
    return true;
}

/* The error of a finished operation that did not succeed. */
static json_object *op_failure(json_object *op)
{
    json_object *err = jsonx_get_obj(op, "error");
    const char *state = jsonx_get_str(op, "state");
    const char *code = jsonx_get_str(err, "code");
    const char *msg = jsonx_get_str(err, "message");
    char text[700];
    snprintf(text, sizeof text, "operation %s %s: %s", jsonx_get_str(op, "id") ? jsonx_get_str(op, "id") : "?",
             state ? state : "?", msg ? msg : "no message");
    return mcp_tool_error(code ? code : (state ? state : "failed"), text);
}

static int64_t deadline_in(int64_t ms) { return time_mono_ms() + ms; }

/* GET path; its answer is the tool's result. */
static json_object *get_result(call_t *c, const char *path)
{
    json_object *resp = NULL;
    api_err_t e;
    if (api(c, "GET", path, NULL, NULL, deadline_in(MCP_REQUEST_TIMEOUT_MS), &resp, &e) < 0)
        return api_failure(&e);
    return mcp_tool_ok(resp);
}

/* Waits for an operation. Returns the isError result to give back when the
 * wait failed or the operation finished without succeeding; else NULL with
 * *ret_op (new reference: succeeded, or still going when *ret_done is
 * false). */
static json_object *wait_outcome(call_t *c, const char *op_id, int64_t timeout_s, json_object **ret_op,
                                 bool *ret_done)
{
    api_err_t e;
    *ret_op = NULL;
    if (wait_op(c, op_id, timeout_s, ret_op, ret_done, &e) < 0) {
        if (*ret_op)
            json_object_put(*ret_op);
        *ret_op = NULL;
        return api_failure(&e);
    }
    if (*ret_done && strcmp(jsonx_get_str(*ret_op, "state"), "succeeded") != 0) {
        json_object *out = op_failure(*ret_op);
        json_object_put(*ret_op);
        *ret_op = NULL;
        return out;
    }
    return NULL;
}

/* Sends a request that starts an operation (the 2xx answer carries
 * "operation") and logs "what SANDBOX (operation ID)" unless what is NULL.
 * Without wait, *ret is the answer. With wait, it is the answer with its
 * "operation" replaced by the operation once it succeeded, or as it was
 * when timeout_s passed (*ret_done false). Returns NULL with *ret (new
 * reference), or the isError result to give back: the API refused, the
 * answer names no operation, the operation failed, the wait failed. */
static json_object *op_request(call_t *c, const char *method, const char *path, json_object *body, const char *idem,
                               const char *what, bool wait, int64_t timeout_s, json_object **ret, bool *ret_done)
{
    json_object *resp = NULL, *op = NULL;
    api_err_t e;
    *ret = NULL;
    *ret_done = false;
    if (api(c, method, path, body, idem, deadline_in(MCP_REQUEST_TIMEOUT_MS), &resp, &e) < 0)
        return api_failure(&e);
    json_object *started = jsonx_get_obj(resp, "operation");
    const char *op_id = jsonx_get_str(started, "id");
    if (!op_id || strlen(op_id) > SBX_ID_MAX) {
        json_object_put(resp);
        return mcp_tool_error("bad_response", "the answer names no operation");
    }
    if (what)
        say(c->srv, 1, "%s %s (operation %s)", what,
            jsonx_get_str(started, "sandbox_id") ? jsonx_get_str(started, "sandbox_id") : "?", op_id);
    if (wait) {
        /* A copy: the wait replaces the object op_id points into. */
        char opid[SBX_ID_MAX + 1];
        snprintf(opid, sizeof opid, "%s", op_id);
        json_object *failed = wait_outcome(c, opid, timeout_s, &op, ret_done);
        if (failed) {
            json_object_put(resp);
            return failed;
        }
        jsonx_add(resp, "operation", op);
    }
    *ret = resp;
    return NULL;
}

/* ---------------------------------------------------------------- the tools */

static json_object *tool_create(call_t *c, json_object *args)
{
    json_object *bad = NULL;
    bool wait = false, done = false;
    int64_t tmo;
    const char *idem = NULL;
    if (!bool_arg(args, "wait", false, &wait, &bad) ||
        !int_arg(args, "timeout_seconds", 1, MCP_WAIT_MAX_S, MCP_WAIT_DEFAULT_S, &tmo, &bad) ||
        !str_arg(args, "idempotency_key", &idem, &bad))
        return bad;
    json_object *body = json_object_new_object();
    static const char *const direct[] = { "image", "tenant", "cpu_millis", "memory_mib", "ttl_seconds", "network",
                                          "isolation", "read_only_root", "hardened", "env", "labels", "selector",
                                          NULL };
    for (int i = 0; direct[i]; i++)
        pass(body, args, direct[i]);
    json_object *trust = json_object_new_object();
    pass(trust, args, "untrusted_repo");
    pass(trust, args, "generated_code");
    pass(trust, args, "hostile");
    jsonx_add(body, "trust", trust);
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
        if (id_path(path, sizeof path, "/v1/sandboxes/", sbx, NULL, &bad) &&
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

static json_object *tool_wait(call_t *c, json_object *args)
{
    json_object *bad = NULL;
    int64_t tmo;
    const char *op_id = NULL;
    if (!str_arg(args, "operation_id", &op_id, &bad) ||
        !int_arg(args, "timeout_seconds", 1, MCP_WAIT_MAX_S, MCP_WAIT_DEFAULT_S, &tmo, &bad))
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

static json_object *tool_exec(call_t *c, json_object *args)
{
    json_object *bad = NULL;
    const char *sbx = NULL;
    int64_t tmo, maxout;
    char path[MCP_PATH_MAX];
    if (!str_arg(args, "sandbox_id", &sbx, &bad) ||
        !int_arg(args, "timeout_seconds", 1, SBX_EXEC_TIMEOUT_MAX, MCP_EXEC_DEFAULT_S, &tmo, &bad) ||
        !int_arg(args, "max_output_bytes", 1, SBX_EXEC_OUTPUT_CEILING, 0, &maxout, &bad) ||
        !id_path(path, sizeof path, "/v1/sandboxes/", sbx, "/exec", &bad))
        return bad;
    json_object *body = json_object_new_object();
    pass(body, args, "argv");
    pass(body, args, "env");
    pass(body, args, "cwd");
    jsonx_add_int(body, "timeout_seconds", tmo);
    if (maxout > 0)
        jsonx_add_int(body, "max_output_bytes", maxout);
    json_object *resp = NULL;
    bool done = false;
    json_object *out = op_request(c, "POST", path, body, NULL, NULL, true, tmo + MCP_EXEC_SLACK_S, &resp, &done);
    json_object_put(body);
    if (out)
        return out;
    json_object *op = jsonx_get_obj(resp, "operation");
    const char *opid = jsonx_get_str(op, "id");
    if (!done) {
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
                                            NULL };
        for (int i = 0; keys[i]; i++)
            pass(result, res, keys[i]);
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
    if (!str_arg(args, id_arg, &id, &bad) || !id_path(path, sizeof path, prefix, id, NULL, &bad))
        return bad;
    return get_result(c, path);
}

static json_object *tool_get(call_t *c, json_object *args) { return get_one(c, "/v1/sandboxes/", "sandbox_id", args); }

static json_object *tool_operation(call_t *c, json_object *args)
{
    return get_one(c, "/v1/operations/", "operation_id", args);
}

static json_object *tool_list(call_t *c, json_object *args)
{
    json_object *bad = NULL;
    const char *tenant = NULL;
    bool all = false;
    int64_t limit;
    if (!str_arg(args, "tenant", &tenant, &bad) || !bool_arg(args, "all", false, &all, &bad) ||
        !int_arg(args, "limit", 1, SBX_LIST_MAX, 0, &limit, &bad))
        return bad;
    char path[400] = "/v1/sandboxes";
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
    }
    return get_result(c, path);
}

static json_object *tool_delete(call_t *c, json_object *args)
{
    json_object *bad = NULL;
    const char *sbx = NULL, *idem = NULL;
    bool wait = false, done = false;
    int64_t tmo;
    char path[MCP_PATH_MAX];
    if (!str_arg(args, "sandbox_id", &sbx, &bad) || !str_arg(args, "idempotency_key", &idem, &bad) ||
        !bool_arg(args, "wait", false, &wait, &bad) ||
        !int_arg(args, "timeout_seconds", 1, MCP_WAIT_MAX_S, MCP_WAIT_DEFAULT_S, &tmo, &bad) ||
        !id_path(path, sizeof path, "/v1/sandboxes/", sbx, NULL, &bad))
        return bad;
    json_object *resp = NULL;
    json_object *failed = op_request(c, "DELETE", path, NULL, idem, "deleting", wait, tmo, &resp, &done);
    return failed ? failed : mcp_tool_ok(resp);
}

static json_object *tool_share(call_t *c, json_object *args)
{
    json_object *bad = NULL;
    const char *sbx = NULL, *idem = NULL, *auth = NULL;
    bool wait = true, done = false;
    int64_t port, ttl, tmo;
    char path[MCP_PATH_MAX];
    if (!str_arg(args, "sandbox_id", &sbx, &bad) || !int_arg(args, "port", 1, 65535, 0, &port, &bad) ||
        !int_arg(args, "ttl_seconds", 10, INT32_MAX, 0, &ttl, &bad) || !str_arg(args, "auth", &auth, &bad) ||
        !str_arg(args, "idempotency_key", &idem, &bad) || !bool_arg(args, "wait", true, &wait, &bad) ||
        !int_arg(args, "timeout_seconds", 1, MCP_WAIT_MAX_S, MCP_WAIT_DEFAULT_S, &tmo, &bad) ||
        !id_path(path, sizeof path, "/v1/sandboxes/", sbx, "/routes", &bad))
        return bad;
    json_object *body = json_object_new_object();
    jsonx_add_int(body, "port", port);
    if (ttl > 0)
        jsonx_add_int(body, "ttl_seconds", ttl);
    if (auth)
        jsonx_add_str(body, "auth", auth);
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

static json_object *tool_routes(call_t *c, json_object *args)
{
    json_object *bad = NULL;
    const char *sbx = NULL;
    bool all = false;
    char path[MCP_PATH_MAX];
    if (!str_arg(args, "sandbox_id", &sbx, &bad) || !bool_arg(args, "all", false, &all, &bad) ||
        !id_path(path, sizeof path, "/v1/sandboxes/", sbx, all ? "/routes?all=true" : "/routes", &bad))
        return bad;
    return get_result(c, path);
}

static json_object *tool_unshare(call_t *c, json_object *args)
{
    json_object *bad = NULL;
    const char *sbx = NULL, *rid = NULL;
    bool wait = true, done = false;
    int64_t tmo;
    char tail[MCP_PATH_MAX], path[MCP_PATH_MAX];
    if (!str_arg(args, "sandbox_id", &sbx, &bad) || !str_arg(args, "route_id", &rid, &bad) ||
        !bool_arg(args, "wait", true, &wait, &bad) ||
        !int_arg(args, "timeout_seconds", 1, MCP_WAIT_MAX_S, MCP_WAIT_DEFAULT_S, &tmo, &bad) ||
        !id_path(tail, sizeof tail, "/routes/", rid, NULL, &bad) ||
        !id_path(path, sizeof path, "/v1/sandboxes/", sbx, tail, &bad))
        return bad;
    json_object *resp = NULL;
    json_object *failed = op_request(c, "DELETE", path, NULL, NULL, "unsharing a route of", wait, tmo, &resp, &done);
    return failed ? failed : mcp_tool_ok(resp);
}

static json_object *tool_events(call_t *c, json_object *args)
{
    json_object *bad = NULL;
    const char *sbx = NULL, *op = NULL, *kind = NULL;
    int64_t after, wait, limit;
    if (!str_arg(args, "sandbox_id", &sbx, &bad) || !str_arg(args, "operation_id", &op, &bad) ||
        !str_arg(args, "kind", &kind, &bad) || !int_arg(args, "after", 0, INT64_MAX, 0, &after, &bad) ||
        !int_arg(args, "wait", 0, MCP_EVENTS_WAIT_MAX_S, 0, &wait, &bad) ||
        !int_arg(args, "limit", 1, SBX_LIST_MAX, SBX_LIST_DEFAULT, &limit, &bad))
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
    json_object *o = NULL, *data = NULL;
    if (jsonx_parse(line, len, &o, NULL) < 0 || !json_object_is_type(o, json_type_object)) {
        json_object_put(o);
        snprintf(l->code, sizeof l->code, "bad_response");
        snprintf(l->message, sizeof l->message, "a line of the logs answer is not a JSON object");
        return -1;
    }
    const char *stream = jsonx_get_str(o, "stream");
    json_object *err = jsonx_get_obj(o, "error");
    bool cut = false;
    jsonx_get_bool(o, "truncated", &cut);
    if (stream && json_object_object_get_ex(o, "data", &data) && json_object_is_type(data, json_type_string)) {
        const char *d = json_object_get_string(data);
        size_t n = (size_t)json_object_get_string_len(data);
        sbuf_append_bounded(&l->text, d, n);
        sbuf_append_bounded(strcmp(stream, "stderr") == 0 ? &l->err : &l->out, d, n);
    } else if (err) {
        const char *code = jsonx_get_str(err, "code"), *msg = jsonx_get_str(err, "message");
        snprintf(l->code, sizeof l->code, "%s", code ? code : "error");
        snprintf(l->message, sizeof l->message, "%s", msg ? msg : "the log stream failed");
    }
    l->truncated = l->truncated || cut || l->text.truncated || l->out.truncated || l->err.truncated;
    json_object_put(o);
    return l->text.truncated ? -1 : 0; /* enough: stop reading */
}

static json_object *tool_logs(call_t *c, json_object *args)
{
    json_object *bad = NULL;
    const char *sbx = NULL;
    int64_t tail;
    char path[MCP_PATH_MAX];
    if (!str_arg(args, "sandbox_id", &sbx, &bad) ||
        !int_arg(args, "tail", 0, SBX_LOGS_TAIL_MAX, MCP_LOGS_DEFAULT_TAIL, &tail, &bad) ||
        !id_path(path, sizeof path, "/v1/sandboxes/", sbx, "/logs", &bad))
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

static json_object *run_tool(call_t *c)
{
    server_t *s = c->srv;
    json_object *bad = check_args(c->tool, c->args);
    if (bad)
        return bad;
    if (s->config_error[0])
        return mcp_tool_error("invalid_configuration", s->config_error);
    if (!s->token)
        return mcp_tool_error("unauthenticated",
                              "sandbox-mcp has no API token: set SANDBOX_TOKEN in the MCP client's configuration "
                              "for this server (or put 'token = ...' in ~/.config/sandbox/config) and restart it");
    if (httpc_new(s->url, s->token, &c->http) < 0)
        return mcp_tool_error("internal", "cannot set up the HTTP client");
    httpc_set_abort_flag(c->http, &c->cancel);
    static const struct {
        const char *name;
        json_object *(*fn)(call_t *, json_object *);
    } table[] = {
        { "sandbox_create", tool_create }, { "sandbox_wait", tool_wait },     { "sandbox_exec", tool_exec },
        { "sandbox_get", tool_get },       { "sandbox_list", tool_list },     { "sandbox_delete", tool_delete },
        { "operation_get", tool_operation }, { "sandbox_share", tool_share },   { "sandbox_routes", tool_routes },
        { "sandbox_unshare", tool_unshare }, { "sandbox_events", tool_events }, { "sandbox_logs", tool_logs },
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(table[i].name, c->tool->name) == 0)
            return table[i].fn(c, c->args);
    return mcp_tool_error("internal", "tool without an implementation");
}

/* ---------------------------------------------------------------- calls */

static void call_free(call_t *c)
{
    if (c->http)
        httpc_free(c->http);
    json_object_put(c->id);
    json_object_put(c->args);
    if (c->progress_token)
        json_object_put(c->progress_token);
    free(c);
}

static void *call_main(void *p)
{
    call_t *c = p;
    server_t *s = c->srv;
    json_object *result = run_tool(c);
    if (c->cancel) {
        /* The MCP spec: no response for a cancelled request. */
        json_object_put(result);
        say(s, 1, "cancelled: %s (request %s) stopped waiting; anything it started goes on on the server",
            c->tool->name, c->id_key);
    } else {
        emit(s, mcp_result(c->id, result));
    }
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->ncalls; i++)
        if (s->calls[i] == c) {
            s->calls[i] = s->calls[--s->ncalls];
            break;
        }
    pthread_cond_broadcast(&s->idle);
    pthread_mutex_unlock(&s->mu);
    call_free(c);
    return NULL;
}

static void start_call(server_t *s, const mcp_msg_t *m, const mcp_tool_def_t *tool)
{
    call_t *c = calloc(1, sizeof *c);
    if (!c) {
        emit(s, mcp_error(m->id, MCP_INTERNAL_ERROR, "out of memory"));
        return;
    }
    c->srv = s;
    c->tool = tool;
    c->id = mcp_id_copy(m->id);
    id_key(m->id, c->id_key);
    json_object *args = NULL;
    json_object_object_get_ex(m->params, "arguments", &args);
    c->args = args ? json_object_get(args) : json_object_new_object();
    json_object *tok = mcp_progress_token(m->params);
    c->progress_token = tok ? mcp_id_copy(tok) : NULL;
    pthread_mutex_lock(&s->mu);
    bool room = s->ncalls < MCP_MAX_CALLS;
    bool dup = false;
    for (int i = 0; i < s->ncalls; i++)
        dup = dup || strcmp(s->calls[i]->id_key, c->id_key) == 0;
    if (room && !dup)
        s->calls[s->ncalls++] = c;
    pthread_mutex_unlock(&s->mu);
    if (!room || dup) {
        emit(s, mcp_error(m->id, MCP_INVALID_REQUEST,
                          dup ? "a request with this id is still running" : "too many tool calls in flight (16)"));
        call_free(c);
        return;
    }
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&th, &attr, call_main, c) != 0) {
        pthread_mutex_lock(&s->mu);
        s->ncalls--;
        pthread_mutex_unlock(&s->mu);
        emit(s, mcp_error(m->id, MCP_INTERNAL_ERROR, "cannot start a thread"));
        call_free(c);
    }
    pthread_attr_destroy(&attr);
}

static void cancel_call(server_t *s, json_object *params)
{
    json_object *rid = NULL;
    if (!params || !json_object_object_get_ex(params, "requestId", &rid) || !rid)
        return;
    char key[160];
    id_key(rid, key);
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->ncalls; i++)
        if (strcmp(s->calls[i]->id_key, key) == 0)
            s->calls[i]->cancel = 1;
    pthread_mutex_unlock(&s->mu);
}

/* ---------------------------------------------------------------- main loop */

/* Reads one line into b (without the newline). Returns 1 for a line, 0 at
 * EOF with nothing read, SBX_ETOOBIG when the line passed the cap (the
 * rest of it was read and dropped). */
static int read_line(FILE *in, sbuf_t *b)
{
    sbuf_reset(b);
    char chunk[8192];
    bool any = false, over = false;
    while (fgets(chunk, sizeof chunk, in)) {
        any = true;
        size_t n = strlen(chunk);
        bool nl = n > 0 && chunk[n - 1] == '\n';
        if (!over && sbuf_append_bounded(b, chunk, n) < 0)
            return SBX_ENOMEM;
        if (b->truncated)
            over = true;
        if (nl)
            break;
    }
    if (!any)
        return 0;
    return over ? SBX_ETOOBIG : 1;
}

static void handle_line(server_t *s, const char *line, size_t len)
{
    mcp_msg_t m;
    json_object *err = NULL;
    int r = mcp_decode(line, len, &m, &err);
    if (r == 1)
        return;
    if (r < 0) {
        say(s, 3, "refused a message: %s", jsonx_get_str(jsonx_get_obj(err, "error"), "message"));
        emit(s, err);
        return;
    }
    if (m.kind == MCP_MSG_RESPONSE) {
        mcp_msg_release(&m);
        return;
    }
    if (m.kind == MCP_MSG_NOTIFICATION) {
        if (strcmp(m.method, "notifications/cancelled") == 0)
            cancel_call(s, m.params);
        mcp_msg_release(&m);
        return;
    }
    const mcp_tool_def_t *tool = NULL;
    pthread_mutex_lock(&s->mu);
    int level = s->client_level;
    pthread_mutex_unlock(&s->mu);
    json_object *resp = mcp_handle(&s->info, &m, &level, &tool);
    pthread_mutex_lock(&s->mu);
    s->client_level = level;
    pthread_mutex_unlock(&s->mu);
    if (resp)
        emit(s, resp);
    else if (tool)
        start_call(s, &m, tool);
    mcp_msg_release(&m);
}

static void usage(FILE *f)
{
    fputs("usage: sandbox-mcp [--url URL] [--token TOKEN] [--log-level LEVEL]\n"
          "\n"
          "A local MCP server (stdio, JSON-RPC 2.0, one message per line) exposing the\n"
          "Sandbox lifecycle as tools: sandbox_create, sandbox_wait, sandbox_exec,\n"
          "sandbox_get, sandbox_list, sandbox_delete, operation_get, sandbox_share,\n"
          "sandbox_routes, sandbox_unshare, sandbox_events, sandbox_logs. Started by an MCP client\n"
          "(Claude Code, Codex, Gemini CLI, Cursor, ...); see docs/mcp.md.\n"
          "\n"
          "  --url URL          controller URL (else SANDBOX_URL, the config file,\n"
          "                     http://127.0.0.1:8080)\n"
          "  --token TOKEN      API token (else SANDBOX_TOKEN, the config file)\n"
          "  --log-level LEVEL  stderr log level: debug, info (default), warning or error\n"
          "  -h, --help         show this help\n"
          "  --version          print the version\n"
          "\n"
          "stdout carries only protocol messages; logs go to stderr. Exits 0 when\n"
          "stdin closes. Without a token it still starts: tool calls then return an\n"
          "error saying how to set one.\n",
          f);
}

int main(int argc, char **argv)
{
    const char *url = NULL, *token = NULL, *level = "info";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **dst = strcmp(a, "--url") == 0 ? &url : strcmp(a, "--token") == 0 ? &token
                                                         : strcmp(a, "--log-level") == 0 ? &level : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(a, "--version") == 0) {
            printf("sandbox-mcp %s\n", SBX_VERSION);
            return 0;
        }
        if (!dst || i + 1 >= argc) {
            fprintf(stderr, "sandbox-mcp: %s '%s'\nsee 'sandbox-mcp --help'\n",
                    dst ? "missing a value after" : "unknown argument", a);
            return 2;
        }
        *dst = argv[++i];
    }
    server_t s;
    memset(&s, 0, sizeof s);
    s.stderr_level = mcp_log_level(level);
    if (s.stderr_level < 0) {
        fprintf(stderr, "sandbox-mcp: --log-level must be debug, info, warning or error\n");
        return 2;
    }
    s.client_level = mcp_log_level("info");
    /* A client that stops reading must not kill us mid-write. */
    signal(SIGPIPE, SIG_IGN);
    pthread_mutex_init(&s.out_mu, NULL);
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.idle, NULL);
    if (tools_init() < 0 || curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
        fprintf(stderr, "sandbox-mcp: cannot initialise\n");
        return 1;
    }
    client_config_t cc;
    if (client_config_resolve(url, token, &cc, s.config_error, sizeof s.config_error) == 0) {
        s.url = cc.url;
        s.token = cc.token;
        cc.url = cc.token = NULL;
    }
    for (int i = 0; i < 2; i++)
        if (cc.warnings[i][0])
            fprintf(stderr, "sandbox-mcp: warning: %s\n", cc.warnings[i]);
    client_config_release(&cc);
    if (s.config_error[0])
        fprintf(stderr, "sandbox-mcp: warning: %s (every tool call will say so)\n", s.config_error);
    else if (!s.token)
        fprintf(stderr, "sandbox-mcp: warning: no API token (set SANDBOX_TOKEN); tool calls will fail until then\n");
    s.info = (mcp_server_info_t){
        .name = "sandbox-mcp",
        .title = "Sandbox",
        .version = SBX_VERSION,
        .instructions = "Disposable sandboxes for running code. Create the smallest suitable sandbox, describe "
                        "how much you trust the code, wait for operations instead of assuming success, run argv "
                        "arrays (no shell strings from untrusted input), check truncation flags, and delete the "
                        "sandbox when the task ends. Share a port only when someone outside must reach it, keep "
                        "the access token (it is shown once), and unshare when it is no longer needed.",
        .tools = tools,
        .ntools = NTOOLS,
    };

    sbuf_t line;
    sbuf_init(&line, MCP_MAX_LINE_BYTES);
    for (;;) {
        int r = read_line(stdin, &line);
        if (r == 0)
            break;
        if (r == SBX_ETOOBIG) {
            emit(&s, mcp_error(NULL, MCP_PARSE_ERROR, "message longer than 4 MiB"));
            continue;
        }
        if (r < 0) {
            fprintf(stderr, "sandbox-mcp: out of memory reading stdin\n");
            break;
        }
        handle_line(&s, sbuf_cstr(&line), line.len);
    }
    /* stdin closed: calls that finish within a grace period still answer
     * (a client that pipes requests in and closes stdin gets its replies);
     * then the rest are cancelled, and we wait for them to leave. */
    pthread_mutex_lock(&s.mu);
    s.closing = true;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += MCP_EOF_GRACE_S;
    while (s.ncalls > 0 && pthread_cond_timedwait(&s.idle, &s.mu, &until) == 0)
        ;
    for (int i = 0; i < s.ncalls; i++)
        s.calls[i]->cancel = 1;
    while (s.ncalls > 0)
        pthread_cond_wait(&s.idle, &s.mu);
    pthread_mutex_unlock(&s.mu);
    sbuf_release(&line);
    for (size_t i = 0; i < NTOOLS * 3; i++)
        free(tool_texts[i]);
    for (size_t i = 0; i < NTOOLS; i++)
        if (tool_inputs[i])
            json_object_put(tool_inputs[i]);
    free(s.url);
    free(s.token);
    curl_global_cleanup();
    return 0;
}
