/* sandbox-mcp's stdio JSON-RPC loop: one message a line on stdin, answers
 * and notifications on stdout (one writer at a time), each tool call in a
 * thread of its own, cancellation, and the drain when stdin closes. The
 * protocol pieces are in common/mcp.c. */
#include <json-c/json.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "errors.h"
#include "httpc.h"
#include "jsonx.h"
#include "mcp.h"
#include "mcp_int.h"
#include "sbuf.h"

void emit(server_t *s, json_object *msg)
{
    const char *text = json_object_to_json_string_ext(msg, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    pthread_mutex_lock(&s->out_mu);
    fputs(text ? text : "{}", stdout);
    fputc('\n', stdout);
    fflush(stdout);
    pthread_mutex_unlock(&s->out_mu);
    json_object_put(msg);
}

__attribute__((format(printf, 3, 4))) void say(server_t *s, int level, const char *fmt, ...)
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

static void id_key(json_object *id, char out[MCP_ID_KEY_MAX])
{
    snprintf(out, MCP_ID_KEY_MAX, "%s", id ? json_object_to_json_string_ext(id, JSON_C_TO_STRING_PLAIN) : "null");
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
    json_object *result = tool_run(c);
    if (c->cancel) {
        /* The MCP spec: no response for a cancelled request. */
        json_object_put(result);
        say(s, 1, "cancelled: %s (request %s) stopped waiting; anything it started goes on on the server",
            c->tool->def.name, c->id_key);
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

static void start_call(server_t *s, const mcp_msg_t *m, const mcp_tool_t *tool)
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
    char key[MCP_ID_KEY_MAX];
    id_key(rid, key);
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->ncalls; i++)
        if (strcmp(s->calls[i]->id_key, key) == 0)
            s->calls[i]->cancel = 1;
    pthread_mutex_unlock(&s->mu);
}

/* ---------------------------------------------------------------- main loop */

/* Reads one line into b (with its newline, NUL bytes kept: fgets would
 * measure the line at the first NUL and join the next line to it). Returns
 * 1 for a line, 0 at EOF with nothing read, SBX_ETOOBIG when the line passed
 * the cap (the rest of it was read and dropped). */
static int read_line(FILE *in, sbuf_t *b)
{
    sbuf_reset(b);
    char chunk[8192];
    size_t n = 0;
    bool any = false, over = false;
    int c;
    while ((c = getc(in)) != EOF) {
        any = true;
        chunk[n++] = (char)c;
        if (n == sizeof chunk || c == '\n') {
            if (!over && sbuf_append_bounded(b, chunk, n) < 0)
                return SBX_ENOMEM;
            n = 0;
            if (b->truncated)
                over = true;
            if (c == '\n')
                break;
        }
    }
    if (n > 0 && !over && sbuf_append_bounded(b, chunk, n) < 0)
        return SBX_ENOMEM;
    if (b->truncated)
        over = true;
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
        start_call(s, &m, tools_row(tool)); /* tool points into tools_defs() */
    mcp_msg_release(&m);
}


int server_init(server_t *s, const char *level)
{
    memset(s, 0, sizeof *s);
    s->stderr_level = mcp_log_level(level);
    if (s->stderr_level < 0)
        return SBX_EINVAL;
    s->client_level = mcp_log_level("info");
    pthread_mutex_init(&s->out_mu, NULL);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->idle, NULL);
    return 0;
}

/* stdin closed: calls that finish within a grace period still answer (a
 * client that pipes requests in and closes stdin gets its replies); then the
 * rest are cancelled, and we wait for them to leave. */
static void drain_calls(server_t *s)
{
    pthread_mutex_lock(&s->mu);
    s->closing = true;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += MCP_EOF_GRACE_S;
    while (s->ncalls > 0 && pthread_cond_timedwait(&s->idle, &s->mu, &until) == 0)
        ;
    for (int i = 0; i < s->ncalls; i++)
        s->calls[i]->cancel = 1;
    while (s->ncalls > 0)
        pthread_cond_wait(&s->idle, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

void server_run(server_t *s)
{
    sbuf_t line;
    sbuf_init(&line, MCP_MAX_LINE_BYTES);
    for (;;) {
        int r = read_line(stdin, &line);
        if (r == 0)
            break;
        if (r == SBX_ETOOBIG) {
            emit(s, mcp_error(NULL, MCP_PARSE_ERROR, "message longer than 4 MiB"));
            continue;
        }
        if (r < 0) {
            fprintf(stderr, "sandbox-mcp: out of memory reading stdin\n");
            break;
        }
        handle_line(s, sbuf_cstr(&line), line.len);
    }
    drain_calls(s);
    sbuf_release(&line);
}

void server_release(server_t *s)
{
    free(s->url);
    free(s->token);
    free(s->ca_file);
    s->url = s->token = s->ca_file = NULL;
    pthread_cond_destroy(&s->idle);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->out_mu);
}
