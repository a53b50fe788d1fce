/* sandbox-mcp: a local stdio MCP server over the Sandbox HTTP API, so coding
 * agents drive the same lifecycle as the CLI (docs/mcp.md). JSON-RPC 2.0,
 * one message per line on stdin/stdout; logs on stderr only. The protocol
 * pieces are in common/mcp.c, the stdio loop and the call threads in
 * tools/mcp/server.c, the tool table and handlers in tools/mcp/tools*.c;
 * here are the API calls the handlers make, and main. */
#include <curl/curl.h>
#include <json-c/json.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "clientcfg.h"
#include "errors.h"
#include "httpc.h"
#include "jsonx.h"
#include "limits.h"
#include "mcp.h"
#include "timeutil.h"
#include "utf8.h"
#include "version.h"

#include "mcp/mcp_int.h"

/* ---------------------------------------------------------------- API */

#define MCP_WAIT_GRACE_MS 5000 /* a wait retries an unreachable controller this long past its timeout */

/* The calls are client_call and client_wait_op (client/client.h); a
 * notifications/cancelled for the call stops them. */
static bool call_cancelled(void *ud)
{
    return atomic_load(&((call_t *)ud)->cancel) != 0;
}

static client_t call_client(call_t *c)
{
    return (client_t){ .http = c->http, .url = c->srv->url, .cancelled = call_cancelled, .cancel_ud = c };
}

/* One API call. Returns 0 with *ret (a 2xx JSON object, new reference), or
 * SBX_EIO with e filled: the API's error code and message, "unavailable"
 * when the controller cannot be reached, "cancelled". A GET's transport
 * errors and 502-504 are retried until deadline_ms (monotonic). */
int api(call_t *c, const char *method, const char *path, json_object *body, const char *idem,
               int64_t deadline_ms, json_object **ret, api_err_t *e)
{
    client_t cl = call_client(c);
    client_req_t req = { .method = method, .path = path, .body = body, .idem_key = idem,
                         .retry_until_ms = deadline_ms };
    return client_call(&cl, &req, ret, e) < 0 ? SBX_EIO : 0;
}

/* Sends notifications/progress when the call asked for it; value must grow
 * from one notification to the next. */
void progress(call_t *c, int64_t value, int64_t total_s, const char *fmt, ...)
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

/* client_wait_t.on_progress: about one notification a second (a long-poll
 * may come back a little early or late); progress counts the seconds
 * waited, total the seconds allowed. */
typedef struct wait_progress {
    call_t *c;
    const char *op_id;
    int64_t timeout_s;
    int64_t last_sent_ms;
    int64_t out_offset;                 /* a running exec's output read so far */
    char tail[MCP_PROGRESS_TAIL_BYTES]; /* its last bytes, as text */
    size_t tail_len;
} wait_progress_t;

/* client_follow_t.on_chunk: keeps the last bytes of the output. */
static void progress_chunk(void *ud, const char *stream, int64_t offset, const char *p, size_t n)
{
    (void)stream;
    (void)offset;
    wait_progress_t *wp = ud;
    if (n >= sizeof wp->tail) {
        p += n - sizeof wp->tail;
        n = sizeof wp->tail;
    }
    size_t keep = wp->tail_len + n > sizeof wp->tail ? sizeof wp->tail - n : wp->tail_len;
    memmove(wp->tail, wp->tail + wp->tail_len - keep, keep);
    memcpy(wp->tail + keep, p, n);
    wp->tail_len = keep + n;
}

/* The last non-empty line of a running exec's output so far, made safe for
 * a message (control bytes as spaces), into line; "" when there is none. */
static void progress_last_line(wait_progress_t *wp, char *line, size_t len)
{
    client_t cl = call_client(wp->c);
    client_follow_t f = { .timeout_s = 0, .on_chunk = progress_chunk, .ud = wp };
    bool done = false;
    api_err_t e;
    client_follow_output(&cl, wp->op_id, &wp->out_offset, &f, &done, &e);
    size_t end = wp->tail_len;
    while (end > 0 && (wp->tail[end - 1] == '\n' || wp->tail[end - 1] == '\r'))
        end--;
    size_t start = end;
    while (start > 0 && wp->tail[start - 1] != '\n')
        start--;
    char *text = utf8_sanitize(wp->tail + start, end - start);
    line[0] = '\0';
    if (!text)
        return;
    snprintf(line, len, "%s", text);
    free(text);
    for (char *q = line; *q; q++)
        if ((unsigned char)*q < 0x20 || *q == 0x7f)
            *q = ' ';
}

static void wait_progressed(void *ud, json_object *op, int64_t waited_ms)
{
    wait_progress_t *wp = ud;
    if (waited_ms - wp->last_sent_ms < MCP_PROGRESS_EVERY_MS)
        return;
    wp->last_sent_ms = waited_ms;
    int64_t waited = (waited_ms + 500) / 1000;
    const char *state = jsonx_get_str(op, "state"), *kind = jsonx_get_str(op, "kind");
    char line[MCP_PROGRESS_LINE_BYTES] = "";
    /* A running exec's progress carries its latest output line. */
    if (wp->c->progress_token && kind && strcmp(kind, "exec") == 0 && state && strcmp(state, "running") == 0)
        progress_last_line(wp, line, sizeof line);
    progress(wp->c, waited, wp->timeout_s, "%s is %s after %llds%s%s", wp->op_id, state ? state : "?",
             (long long)waited, line[0] ? ": " : "", line);
}

/* Waits for an operation: *ret_op is the last seen (new reference), *done
 * whether it is terminal. Returns 0, or SBX_EIO with e (unreachable at the
 * end, not found, cancelled). */
int wait_op(call_t *c, const char *op_id, int64_t timeout_s, json_object **ret_op, bool *done, api_err_t *e)
{
    client_t cl = call_client(c);
    wait_progress_t wp = { .c = c, .op_id = op_id, .timeout_s = timeout_s };
    client_wait_t w = { .timeout_s = timeout_s, .poll_wait_s = MCP_POLL_WAIT_S, .outage_grace_ms = MCP_WAIT_GRACE_MS,
                        .on_progress = wait_progressed, .ud = &wp };
    client_wait_result_t wr;
    int r = client_wait_op(&cl, op_id, &w, &wr, e);
    if (r == SBX_ETOOBIG) {
        memset(e, 0, sizeof *e);
        snprintf(e->code, sizeof e->code, "internal");
        snprintf(e->message, sizeof e->message, "cannot build the request path");
    } else if (r == 0 && !wr.done && wr.failing) {
        *e = wr.last_error; /* the controller was still unreachable at the end */
        r = SBX_EIO;
    }
    *ret_op = wr.op ? json_object_get(wr.op) : NULL;
    *done = wr.done;
    client_wait_result_release(&wr);
    return r < 0 ? SBX_EIO : 0;
}

json_object *api_failure(const api_err_t *e) { return mcp_tool_error(e->code, e->message); }

/* The error of a finished operation that did not succeed. */
json_object *op_failure(json_object *op)
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

int64_t deadline_in(int64_t ms) { return time_mono_ms() + ms; }

/* GET path; its answer is the tool's result. */
json_object *get_result(call_t *c, const char *path) { return get_result_shaped(c, path, NULL); }

json_object *get_result_shaped(call_t *c, const char *path, void (*shape)(json_object *resp))
{
    json_object *resp = NULL;
    api_err_t e;
    if (api(c, "GET", path, NULL, NULL, deadline_in(MCP_REQUEST_TIMEOUT_MS), &resp, &e) < 0)
        return api_failure(&e);
    if (shape)
        shape(resp);
    return mcp_tool_ok(resp);
}

/* Waits for an operation. Returns the isError result to give back when the
 * wait failed or the operation finished without succeeding; else NULL with
 * *ret_op (new reference: succeeded, or still going when *ret_done is
 * false). */
json_object *wait_outcome(call_t *c, const char *op_id, int64_t timeout_s, json_object **ret_op,
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
json_object *op_request(call_t *c, const char *method, const char *path, json_object *body, const char *idem,
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

/* ---------------------------------------------------------------- main */

static void usage(FILE *f)
{
    fputs("usage: sandbox-mcp [--url URL] [--token TOKEN] [--context NAME] [--log-level LEVEL]\n"
          "\n"
          "A local MCP server (stdio, JSON-RPC 2.0, one message per line) exposing the\n"
          "Sandbox lifecycle as tools: sandbox_create, sandbox_wait, sandbox_exec,\n"
          "sandbox_exec_output, sandbox_cancel, sandbox_get, sandbox_list, sandbox_delete,\n"
          "sandbox_extend, sandbox_pause, sandbox_resume, sandbox_network,\n"
          "sandbox_network_log, operation_get, sandbox_share, sandbox_routes,\n"
          "sandbox_unshare,\n"
          "sandbox_events, sandbox_logs, sandbox_write_file, sandbox_read_file,\n"
          "sandbox_list_files, sandbox_pools, sandbox_list_images, sandbox_snapshot,\n"
          "sandbox_snapshots, sandbox_snapshot_delete, sandbox_fork, sandbox_templates,\n"
          "sandbox_template_build, sandbox_volume_create, sandbox_volumes,\n"
          "sandbox_volume_delete. Started by\n"
          "an MCP client (Claude Code, Codex, Gemini CLI, Cursor, ...); see docs/mcp.md.\n"
          "\n"
          "  --url URL          controller URL (else SANDBOX_URL, the config file,\n"
          "                     http://127.0.0.1:8080)\n"
          "  --token TOKEN      API token (else SANDBOX_TOKEN, the config file)\n"
          "                     (an https URL is verified against SANDBOX_CA_FILE or the\n"
          "                     config file's 'ca_file' when set, else the system's CAs)\n"
          "  --context NAME     the config file's [context NAME] (else SANDBOX_CONTEXT,\n"
          "                     the file's 'context = NAME'); see docs/client-setup.md\n"
          "  --log-level LEVEL  stderr log level: debug, info (default), warning or error\n"
          "  -h, --help         show this help\n"
          "  --version          print the version\n"
          "\n"
          "stdout carries only protocol messages; logs go to stderr. Exits 0 when\n"
          "stdin closes. Without a token it still starts: tool calls then return an\n"
          "error saying how to set one.\n",
          f);
}


/* Reads the command line into *url, *token and *level. Returns -1 to go
 * on, else the exit code (0 after --help or --version, 2 for a bad one). */
static int parse_args(int argc, char **argv, const char **url, const char **token, const char **context,
                      const char **level)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **dst = strcmp(a, "--url") == 0 ? url : strcmp(a, "--token") == 0 ? token
                           : strcmp(a, "--context") == 0 ? context : strcmp(a, "--log-level") == 0 ? level : NULL;
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
    return -1;
}

/* Resolves the controller URL and token (flags, environment, config file)
 * into s, warning on stderr about what tool calls will then refuse. */
static void resolve_config(server_t *s, const char *url, const char *token, const char *context)
{
    client_config_t cc;
    if (client_config_resolve(url, token, context, &cc, s->config_error, sizeof s->config_error) == 0) {
        s->url = cc.url;
        s->token = cc.token;
        s->ca_file = cc.ca_file;
        cc.url = cc.token = cc.ca_file = NULL;
    }
    for (int i = 0; i < 2; i++)
        if (cc.warnings[i][0])
            fprintf(stderr, "sandbox-mcp: warning: %s\n", cc.warnings[i]);
    client_config_release(&cc);
    if (s->config_error[0])
        fprintf(stderr, "sandbox-mcp: warning: %s (every tool call will say so)\n", s->config_error);
    else if (!s->token)
        fprintf(stderr, "sandbox-mcp: warning: no API token (set SANDBOX_TOKEN); tool calls will fail until then\n");
}

int main(int argc, char **argv)
{
    const char *url = NULL, *token = NULL, *context = NULL, *level = "info";
    int rc = parse_args(argc, argv, &url, &token, &context, &level);
    if (rc >= 0)
        return rc;
    server_t s;
    if (server_init(&s, level) < 0) {
        fprintf(stderr, "sandbox-mcp: --log-level must be debug, info, warning or error\n");
        return 2;
    }
    /* A client that stops reading must not kill us mid-write. */
    signal(SIGPIPE, SIG_IGN);
    if (tools_init() < 0 || curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
        fprintf(stderr, "sandbox-mcp: cannot initialise\n");
        return 1;
    }
    resolve_config(&s, url, token, context);
    s.info = (mcp_server_info_t){
        .name = "sandbox-mcp",
        .title = "Sandbox",
        .version = SBX_VERSION,
        .instructions = "Disposable sandboxes for running code. Create the smallest suitable sandbox, describe "
                        "how much you trust the code, wait for operations instead of assuming success, run argv "
                        "arrays (no shell strings from untrusted input), check truncation flags, and delete the "
                        "sandbox when the task ends. Share a port only when someone outside must reach it, keep "
                        "the access token (it is shown once), and unshare when it is no longer needed.",
        .tools = tools_defs(),
        .ntools = tool_count,
    };
    server_run(&s);
    tools_release();
    server_release(&s);
    curl_global_cleanup();
    return 0;
}
