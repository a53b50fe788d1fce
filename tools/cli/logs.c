/* sandbox logs: print or follow a sandbox's output. */
#include <json-c/json.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "errors.h"
#include "jsonx.h"
#include "limits.h"

/* One NDJSON line of a logs answer: at most LOGFRAME_PAYLOAD_MAX bytes of
 * output, JSON-escaped (up to 6 bytes each). */
#define LOGS_LINE_MAX        (1024u * 1024u)
#define LOGS_READ_TIMEOUT_MS 120000L      /* a read without --follow */
#define EXIT_INTERRUPTED     130          /* Ctrl-C, as a shell reports SIGINT */

static volatile int logs_interrupted;

static void logs_on_signal(int sig)
{
    (void)sig;
    logs_interrupted = 1;
}

typedef struct logs_out {
    cli_t *cli;
    bool failed;   /* an error line, or a line that is not one of ours */
} logs_out_t;

/* httpc_line_fn: --json prints each line as it came; otherwise stdout
 * chunks go to stdout and stderr chunks to stderr, flushed at once. */
static int logs_line(void *ud, const char *line, size_t len)
{
    logs_out_t *lo = ud;
    if (lo->cli->json) {
        fwrite(line, 1, len, stdout);
        fputc('\n', stdout);
        fflush(stdout);
        return 0;
    }
    json_object *o = NULL, *data = NULL;
    if (jsonx_parse(line, len, &o, NULL) < 0 || !json_object_is_type(o, json_type_object)) {
        fputs("error: bad_response: a logs line is not a JSON object\n", stderr);
        json_object_put(o);
        lo->failed = true;
        return -1;
    }
    const char *stream = jsonx_get_str(o, "stream");
    json_object *err = jsonx_get_obj(o, "error");
    bool truncated = false;
    jsonx_get_bool(o, "truncated", &truncated);
    if (stream && json_object_object_get_ex(o, "data", &data) && json_object_is_type(data, json_type_string)) {
        FILE *f = strcmp(stream, "stderr") == 0 ? stderr : stdout;
        fwrite(json_object_get_string(data), 1, (size_t)json_object_get_string_len(data), f);
        fflush(f);
    } else if (err) {
        const char *code = jsonx_get_str(err, "code"), *msg = jsonx_get_str(err, "message");
        cli_print_error(code ? code : "error", msg ? msg : "the log stream failed");
        lo->failed = true;
    } else if (truncated) {
        int64_t limit = 0;
        jsonx_get_int(o, "limit_bytes", &limit);
        fprintf(stderr, "sandbox: logs: output cut at %lld bytes; --tail N shows the last N lines\n",
                (long long)limit);
    }
    json_object_put(o);
    return 0;
}

/* Prints the output so far (or the last --tail N lines), and with --follow
 * what comes next until the sandbox stops; Ctrl-C ends it (130). */
int cli_cmd_logs(cli_t *cli, opts_t *o)
{
    char path[CLI_ARG_ID_MAX * 3 + 96];
    if (cli_path(path, sizeof path, "/v1/sandboxes/", o->pos[0], "/logs") != 0)
        return cli_usage_error(cli->cmd, "SANDBOX_ID too long");
    size_t pl = strlen(path);
    snprintf(path + pl, sizeof path - pl, "?follow=%s", o->follow ? "true" : "false");
    if (o->tail.set) {
        pl = strlen(path);
        snprintf(path + pl, sizeof path - pl, "&tail=%lld", (long long)o->tail.v);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = logs_on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    httpc_set_abort_flag(cli->http, &logs_interrupted);
    logs_out_t lo = { .cli = cli };
    httpc_response_t resp;
    int r = httpc_stream_lines(cli->http, path, o->follow ? 0 : LOGS_READ_TIMEOUT_MS, LOGS_LINE_MAX, logs_line, &lo,
                               &resp);
    int rc = EXIT_OK;
    if (logs_interrupted)
        rc = EXIT_INTERRUPTED;
    else if (lo.failed)
        rc = EXIT_API;
    else if (r < 0 && resp.status >= 200 && resp.status < 300) {
        fputs("error: bad_response: GET ", stderr);
        cli_put_text(stderr, path);
        fputs(": ", stderr);
        cli_put_text(stderr, resp.error);
        fputc('\n', stderr);
        rc = EXIT_API;
    } else if (r < 0 || resp.status < 200 || resp.status >= 300) {
        client_error_t e;
        client_error_decode(&cli->client, "GET", path, r, &resp, &e);
        rc = cli_call_failed(cli, "GET", path, &e);
    }
    httpc_response_release(&resp);
    return rc;
}
