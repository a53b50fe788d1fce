/* sandbox: API calls and waits over the client library, with the CLI's
 * wording of errors, outages and timeouts on stderr. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "errors.h"
#include "jsonx.h"

/* "error: CODE: METHOD URLPATH" on stderr, the start of a failed call's line. */
static void print_call(cli_t *cli, const char *code, const char *method, const char *path)
{
    fprintf(stderr, "error: %s: %s ", code, method);
    cli_put_text(stderr, cli->url);
    cli_put_text(stderr, path);
}

int cli_call_failed(cli_t *cli, const char *method, const char *path, const client_error_t *e)
{
    switch (e->kind) {
    case CLIENT_E_UNREACHABLE:
        print_call(cli, "unreachable", method, path);
        fputs(": ", stderr);
        cli_put_text(stderr, e->detail[0] ? e->detail : "no response");
        fputc('\n', stderr);
        return EXIT_API;
    case CLIENT_E_BAD_RESPONSE:
        print_call(cli, "bad_response", method, path);
        fprintf(stderr, " answered %ld without a JSON object\n", e->status);
        return EXIT_API;
    case CLIENT_E_HTTP:
        print_call(cli, "http_error", method, path);
        /* a message that names the status itself (httpc_api_error's for a
         * proxy's answer) follows "answered" without saying it twice */
        if (strncmp(e->message, "HTTP ", 5) == 0)
            fputs(" answered ", stderr);
        else
            fprintf(stderr, " answered HTTP %ld: ", e->status);
        cli_put_text(stderr, e->message);
        fputc('\n', stderr);
        return EXIT_API;
    default:
        break;
    }
    cli_print_error(e->code, e->message);
    if (e->kind != CLIENT_E_API)
        return EXIT_API;
    int ac = api_code_parse(e->code);
    return ac >= 0 ? api_code_info((api_code_t)ac)->cli_exit : EXIT_API;
}

int cli_call(cli_t *cli, const char *method, const char *path, json_object *body, const char *idem_key,
             json_object **ret)
{
    client_req_t req = { .method = method, .path = path, .body = body, .idem_key = idem_key };
    client_error_t e;
    if (client_call(&cli->client, &req, ret, &e) < 0)
        return cli_call_failed(cli, method, path, &e);
    return 0;
}

int cli_call_id(cli_t *cli, const char *method, const char *prefix, const char *id, const char *suffix,
                const char *what, json_object *body, const char *idem_key, json_object **ret)
{
    char path[CLIENT_PATH_MAX];
    if (cli_path(path, sizeof path, prefix, id, suffix) != 0)
        return cli_usage_error(cli->cmd, "%s too long", what);
    return cli_call(cli, method, path, body, idem_key, ret);
}

int cli_print_listing(cli_t *cli, int rc, json_object *resp, const char *one, const char *many,
                      void (*row)(json_object *))
{
    if (rc != 0)
        return rc;
    cli_print_one_or_list(cli, resp, one, many, row);
    json_object_put(resp);
    return 0;
}

void cli_problem_text(const cli_t *cli, const client_error_t *e, char *buf, size_t n)
{
    if (e->status == 0)
        snprintf(buf, n, "cannot reach %s: %s", cli->url, e->detail[0] ? e->detail : "no response");
    else
        snprintf(buf, n, "%s answered HTTP %ld", cli->url, e->status);
}

int cli_path(char *buf, size_t n, const char *prefix, const char *id, const char *suffix)
{
    int r = client_path(buf, n, prefix, id, suffix);
    return r == 0 ? 0 : r == SBX_ENOMEM ? EXIT_API : EXIT_USAGE;
}

/* Prints why a terminal, unsuccessful operation ended. */
static void op_print_failure(json_object *op)
{
    json_object *err = jsonx_get_obj(op, "error");
    const char *state = jsonx_get_str(op, "state");
    const char *code = jsonx_get_str(err, "code");
    const char *msg = jsonx_get_str(err, "message");
    if (code || msg) {
        cli_print_error(code ? code : (state ? state : "failed"), msg ? msg : "no message");
        return;
    }
    bool cancelled = state && strcmp(state, "cancelled") == 0;
    fputs("error: ", stderr);
    fputs(cancelled ? "cancelled" : "failed", stderr);
    fputs(": operation ", stderr);
    cli_put_text(stderr, jsonx_get_str(op, "id"));
    fputs(cancelled ? " was cancelled\n" : " failed\n", stderr);
}

/* client_wait_t.on_outage: one note when answers stop, one when they return. */
void cli_outage_note(cli_t *cli, const client_error_t *e)
{
    if (!e) {
        fputs("sandbox: reconnected\n", stderr);
        return;
    }
    char problem[300];
    cli_problem_text(cli, e, problem, sizeof problem);
    fputs("sandbox: ", stderr);
    cli_put_text(stderr, problem);
    fputs("; retrying\n", stderr);
}

static void wait_outage(void *ud, const client_error_t *e) { cli_outage_note(ud, e); }

static void print_wait_timeout(cli_t *cli, const char *op_id, int64_t timeout_s, const client_wait_result_t *wr)
{
    fprintf(stderr, "sandbox: timed out after %lld s waiting for ", (long long)timeout_s);
    cli_put_text(stderr, op_id);
    if (wr->op) {
        fputs(" (state: ", stderr);
        cli_put_text(stderr, jsonx_get_str(wr->op, "state"));
        fputc(')', stderr);
    } else if (wr->last_error.kind != CLIENT_E_NONE) {
        char problem[300];
        cli_problem_text(cli, &wr->last_error, problem, sizeof problem);
        fputs(" (", stderr);
        cli_put_text(stderr, problem);
        fputc(')', stderr);
    }
    fputc('\n', stderr);
}

int cli_wait(cli_t *cli, const char *op_id, int64_t timeout_s, json_object **ret_last)
{
    client_wait_t w = { .timeout_s = timeout_s, .poll_wait_s = CLI_POLL_WAIT_MAX, .on_outage = wait_outage,
                        .ud = cli };
    client_wait_result_t wr;
    client_error_t e;
    int r = client_wait_op(&cli->client, op_id, &w, &wr, &e);
    int rc;
    if (r == SBX_ETOOBIG) {
        rc = cli_usage_error(cli->cmd, "operation id too long");
    } else if (r < 0) {
        char path[CLIENT_PATH_MAX];
        if (client_path(path, sizeof path, "/v1/operations/", op_id, NULL) != 0)
            path[0] = '\0';
        rc = cli_call_failed(cli, "GET", path, &e);
    } else if (!wr.done) {
        print_wait_timeout(cli, op_id, timeout_s, &wr);
        rc = EXIT_TIMEOUT;
    } else if (wr.succeeded) {
        rc = EXIT_OK;
    } else {
        op_print_failure(wr.op);
        rc = EXIT_OP_FAILED;
    }
    *ret_last = wr.last;
    wr.last = NULL;
    client_wait_result_release(&wr);
    return rc;
}

int64_t cli_wait_timeout(const opts_t *o)
{
    return o->timeout.set ? o->timeout.v : CLI_DEFAULT_WAIT_TIMEOUT;
}

int cli_print_or_wait_op(cli_t *cli, opts_t *o, json_object *resp, const char *what)
{
    const char *oid = jsonx_get_str(jsonx_get_obj(resp, "operation"), "id");
    if (!oid || strlen(oid) > CLI_ARG_ID_MAX) {
        fprintf(stderr, "error: bad_response: the %s answer has no operation.id\n", what);
        json_object_put(resp);
        return EXIT_API;
    }
    if (!o->wait) {
        if (cli->json)
            cli_print_json(resp);
        else {
            cli_put_text(stdout, oid);
            putchar('\n');
        }
        json_object_put(resp);
        return 0;
    }
    json_object *last = NULL;
    int rc = cli_wait(cli, oid, cli_wait_timeout(o), &last);
    if (cli->json)
        cli_print_json(last ? last : resp);
    else if (rc == EXIT_OK)
        printf("%s succeeded\n", oid);
    json_object_put(last);
    json_object_put(resp);
    return rc;
}

int cli_post_keyed(cli_t *cli, int attempts, const char *path, json_object *body, const char *key, json_object **ret)
{
    client_req_t req = { .method = "POST", .path = path, .body = body, .idem_key = key };
    client_error_t e;
    for (int attempt = 1;; attempt++) {
        if (client_call(&cli->client, &req, ret, &e) == 0)
            return 0;
        if (!e.retryable || attempt >= attempts)
            return cli_call_failed(cli, "POST", path, &e);
        cli_outage_note(cli, &e);
        if (client_sleep_ms(&cli->client, (int64_t)CLIENT_RETRY_MS * attempt))
            return cli_call_failed(cli, "POST", path, &e);
    }
}

void cli_catch_signals(void (*handler)(int), struct sigaction *old_int, struct sigaction *old_term)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, old_int);
    sigaction(SIGTERM, &sa, old_term);
}
