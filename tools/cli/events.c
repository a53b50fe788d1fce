/* sandbox events: print or follow the event log. */
#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "errors.h"
#include "jsonx.h"
#include "limits.h"
#include "timeutil.h"
#include "utf8.h"

#define EVENTS_FOLLOW_TAIL 10  /* events --follow starts with the newest this many */
#define EVENTS_KIND_MAX    63

/* A data value of an event line: plain words as they are, other strings
 * JSON-quoted (so spaces and control characters cannot break the line),
 * numbers and booleans as they are, objects and arrays as compact JSON. */
static void print_event_value(json_object *v)
{
    const char *s = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
    bool plain = s && *s;
    for (const char *p = s; plain && *p; p++)
        plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                strchr("._:/@+-,=", *p) != NULL;
    if (plain) {
        fputs(s, stdout);
        return;
    }
    const char *j = json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    cli_put_text(stdout, j ? j : "null");
}

/* ID TIMESTAMP KIND [tenant=T] [sandbox=S] [operation=O] key=value… */
static void print_event_line(json_object *e)
{
    int64_t id = 0;
    jsonx_get_int(e, "id", &id);
    printf("%lld ", (long long)id);
    cli_put_text(stdout, jsonx_get_str(e, "ts"));
    putchar(' ');
    cli_put_text(stdout, jsonx_get_str(e, "kind"));
    static const char *const ref[][2] = { { "tenant", "tenant" }, { "sandbox_id", "sandbox" },
                                          { "operation_id", "operation" } };
    for (size_t i = 0; i < 3; i++) {
        const char *v = jsonx_get_str(e, ref[i][0]);
        if (v) {
            printf(" %s=", ref[i][1]);
            cli_put_text(stdout, v);
        }
    }
    json_object *data = jsonx_get_obj(e, "data");
    if (data) {
        json_object_object_foreach(data, k, v) {
            if (!v)
                continue;
            putchar(' ');
            cli_put_text(stdout, k);
            putchar('=');
            print_event_value(v);
        }
    }
    putchar('\n');
}

int cli_check_events(cli_t *cli, opts_t *o)
{
    if (o->after.set && o->tail.set)
        return cli_usage_error(cli->cmd, "--after and --tail exclude each other");
    if (o->timeout.set && !o->follow)
        return cli_usage_error(cli->cmd, "--timeout needs --follow");
    const char *ids[2][2] = { { "--sandbox", o->sandbox }, { "--operation", o->operation } };
    for (int i = 0; i < 2; i++)
        if (ids[i][1] && (strlen(ids[i][1]) > CLI_ARG_ID_MAX || utf8_has_control(ids[i][1])))
            return cli_usage_error(cli->cmd, "%s '%.40s…' is not an id", ids[i][0], ids[i][1]);
    if (o->kind && (strlen(o->kind) > EVENTS_KIND_MAX || utf8_has_control(o->kind)))
        return cli_usage_error(cli->cmd, "--kind: at most %d printable bytes", EVENTS_KIND_MAX);
    return 0;
}

/* "/v1/events?…" for one read: tail_n > 0 asks for the newest tail_n, else
 * the events after cursor. */
static int events_path(char *buf, size_t n, const opts_t *o, int64_t cursor, int64_t tail_n, int64_t limit,
                       int64_t wait)
{
    int w = tail_n > 0 ? snprintf(buf, n, "/v1/events?tail=%lld", (long long)tail_n)
                       : snprintf(buf, n, "/v1/events?after=%lld&limit=%lld", (long long)cursor, (long long)limit);
    if (w > 0 && wait > 0)
        w += snprintf(buf + w, n - (size_t)w, "&wait=%lld", (long long)wait);
    const char *filters[3][2] = { { "sandbox", o->sandbox }, { "operation", o->operation }, { "kind", o->kind } };
    for (int i = 0; i < 3 && w > 0 && (size_t)w < n; i++) {
        if (!filters[i][1])
            continue;
        char *e = httpc_escape(filters[i][1]);
        if (!e)
            return EXIT_API;
        w += snprintf(buf + w, n - (size_t)w, "&%s=%s", filters[i][0], e);
        free(e);
    }
    return w < 0 || (size_t)w >= n ? EXIT_USAGE : 0;
}

/* Prints the events of one answer that come after *printed (never one
 * twice), at most *left of them when left is not NULL (counted down);
 * returns how many the answer held, or -1 when it is malformed. */
static int events_print(cli_t *cli, json_object *resp, int64_t *printed, int64_t *left, int64_t *ret_next)
{
    json_object *arr = jsonx_get_arr(resp, "events");
    if (!arr || !jsonx_get_int(resp, "next_after", ret_next)) {
        fputs("error: bad_response: the events answer has no events array or next_after\n", stderr);
        return -1;
    }
    size_t n = json_object_array_length(arr);
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(arr, i);
        int64_t id = 0;
        if (!jsonx_get_int(e, "id", &id) || id <= *printed)
            continue;
        if (left && *left <= 0)
            break;
        if (left)
            (*left)--;
        *printed = id;
        if (cli->json) {
            const char *s = json_object_to_json_string_ext(e, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
            fputs(s ? s : "null", stdout);
            fputc('\n', stdout);
        } else {
            print_event_line(e);
        }
    }
    fflush(stdout);
    return (int)n;
}

/* Where an events run is. */
typedef struct events_run {
    int64_t cursor;    /* the next read asks for events after this */
    int64_t tail_n;    /* > 0: the next read asks for the newest tail_n instead */
    int64_t limit;     /* events per read */
    int64_t printed;   /* the last event printed */
    int64_t left;      /* --count: events still to print */
    int64_t deadline;  /* --follow --timeout (monotonic), else INT64_MAX */
    int64_t backoff;
    bool outage;       /* the last read got no usable answer */
} events_run_t;

/* Prints one answer. Returns the exit code when the run ends with it, or
 * -1 to read on. */
static int events_take(cli_t *cli, const opts_t *o, events_run_t *er, json_object *resp)
{
    int64_t next = er->cursor;
    int n = events_print(cli, resp, &er->printed, o->count.set ? &er->left : NULL, &next);
    if (n < 0)
        return EXIT_API;
    if (o->count.set && er->left <= 0)
        return EXIT_OK;
    if (er->outage) {
        fprintf(stderr, "sandbox: reconnected; continuing after event %lld\n", (long long)er->cursor);
        er->outage = false;
    }
    er->backoff = CLIENT_BACKOFF_START_MS;
    bool was_tail = er->tail_n > 0;
    er->cursor = next > er->cursor || was_tail ? next : er->cursor;
    er->tail_n = 0;
    if (!o->follow && (was_tail || n < er->limit))
        return EXIT_OK;
    return -1;
}

/* A read got no usable answer under --follow: one note, then backoff. */
static void events_outage(cli_t *cli, events_run_t *er, const client_error_t *e)
{
    if (!er->outage) {
        char problem[300];
        cli_problem_text(cli, e, problem, sizeof problem);
        fputs("sandbox: ", stderr);
        cli_put_text(stderr, problem);
        fprintf(stderr, "; retrying from event %lld\n", (long long)er->cursor);
        er->outage = true;
    }
    int64_t left = er->deadline - time_mono_ms();
    client_sleep_ms(&cli->client, er->backoff < left ? er->backoff : left);
    er->backoff = client_backoff_next(er->backoff);
}

/* Without --follow: every retained event after the cursor (page by page),
 * or the newest --tail N, then exit 0. With --follow: long-polls from the
 * last event seen for ever (or --timeout: 124); connection errors and 5xx
 * answers are retried with backoff from that event, so nothing is missed
 * and nothing printed twice. */
int cli_cmd_events(cli_t *cli, opts_t *o)
{
    events_run_t er = {
        .cursor = o->after.set ? o->after.v : 0,
        .tail_n = o->tail.set ? o->tail.v : (o->follow && !o->after.set ? EVENTS_FOLLOW_TAIL : 0),
        .limit = o->limit.set ? o->limit.v : SBX_LIST_DEFAULT,
        .left = o->count.set ? o->count.v : 0,
        .deadline = o->timeout.set ? time_mono_ms() + o->timeout.v * 1000 : INT64_MAX,
        .backoff = CLIENT_BACKOFF_START_MS,
    };
    er.printed = er.cursor;
    for (;;) {
        int64_t wait = 0;
        if (o->follow) {
            int64_t rem = er.deadline - time_mono_ms();
            if (rem <= 0) {
                fprintf(stderr, "sandbox: timed out after %lld s following events (last event %lld)\n",
                        (long long)o->timeout.v, (long long)er.printed);
                return EXIT_TIMEOUT;
            }
            wait = rem / 1000 < CLI_POLL_WAIT_MAX ? rem / 1000 : CLI_POLL_WAIT_MAX;
        }
        char path[1024];
        if (events_path(path, sizeof path, o, er.cursor, er.tail_n, er.limit, wait) != 0)
            return cli_usage_error(cli->cmd, "a filter is too long");
        client_req_t req = { .method = "GET", .path = path, .timeout_ms = (long)(wait + CLIENT_POLL_SLACK_S) * 1000L };
        json_object *resp = NULL;
        client_error_t e;
        if (client_call(&cli->client, &req, &resp, &e) == 0) {
            int rc = events_take(cli, o, &er, resp);
            json_object_put(resp);
            if (rc >= 0)
                return rc;
            continue;
        }
        if (!e.retryable || !o->follow)
            return cli_call_failed(cli, "GET", path, &e);
        events_outage(cli, &er, &e);
    }
}
