/* sandbox logs: print or follow a sandbox's output. */
#include <json-c/json.h>
#include <signal.h>
#include <stdatomic.h>
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

/* Set by a signal handler: a lock-free atomic_int is async-signal-safe. */
static atomic_int logs_interrupted;

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
    client_logs_line_t l;
    if (client_logs_line_decode(line, len, &l) < 0) {
        fputs("error: bad_response: a logs line is not a JSON object\n", stderr);
        lo->failed = true;
        return -1;
    }
    if (l.stream) {
        FILE *f = strcmp(l.stream, "stderr") == 0 ? stderr : stdout;
        fwrite(l.data, 1, l.len, f);
        fflush(f);
    } else if (l.is_error) {
        cli_print_error(l.code, l.message);
        lo->failed = true;
    } else if (l.truncated) {
        fprintf(stderr, "sandbox: logs: output cut at %lld bytes; --tail N shows the last N lines\n",
                (long long)l.limit_bytes);
    }
    client_logs_line_release(&l);
    return 0;
}

/* Prints the output so far (or the last --tail N lines), and with --follow
 * what comes next until the sandbox stops; Ctrl-C ends it (130). */
int cli_cmd_logs(cli_t *cli, opts_t *o)
{
    char path[CLI_ARG_ID_MAX * 3 + 96];
    if (cli_path(path, sizeof path, "/v1/sandboxes/", o->pos[0], "/logs") != 0)
        return cli_usage_error(cli->cmd, "SANDBOX too long");
    size_t pl = strlen(path);
    snprintf(path + pl, sizeof path - pl, "?follow=%s", o->follow ? "true" : "false");
    if (o->tail.set) {
        pl = strlen(path);
        snprintf(path + pl, sizeof path - pl, "&tail=%lld", (long long)o->tail.v);
    }
    cli_catch_signals(logs_on_signal, NULL, NULL);
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
