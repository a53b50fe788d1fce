/* sandbox exec: run a command in a sandbox, its output and exit code as our own. */
#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "b64.h"
#include "cli.h"
#include "errors.h"
#include "jsonx.h"
#include "limits.h"
#include "utf8.h"

#define EXEC_DEFAULT_TIMEOUT_S 600        /* the API's default for timeout_seconds */
#define EXEC_WAIT_SLACK        60         /* seconds added to an exec's wait budget */

/* Writes a stream of the result exactly: the bytes of FIELD_b64 when the
 * result has them (output that is not UTF-8 text), else FIELD's. Returns
 * the length written. */
static size_t write_stream(FILE *f, json_object *res, const char *field)
{
    char key[32];
    snprintf(key, sizeof key, "%s_b64", field);
    const char *enc = jsonx_get_str(res, key);
    char *raw = NULL;
    size_t n = 0;
    if (enc && b64_decode(enc, strlen(enc), SBX_MAX_RESPONSE_BYTES, &raw, &n) == 0) {
        fwrite(raw, 1, n, f);
        free(raw);
        fflush(f);
        return n;
    }
    json_object *v = NULL;
    if (!json_object_object_get_ex(res, field, &v) || !json_object_is_type(v, json_type_string))
        return 0;
    n = (size_t)json_object_get_string_len(v);
    if (n)
        fwrite(json_object_get_string(v), 1, n, f);
    fflush(f);
    return n;
}

static void note_truncated(json_object *res, const char *stream, size_t kept)
{
    char tf[32], bf[32];
    snprintf(tf, sizeof tf, "%s_truncated", stream);
    snprintf(bf, sizeof bf, "%s_bytes", stream);
    bool t = false;
    int64_t total = -1;
    if (!jsonx_get_bool(res, tf, &t) || !t)
        return;
    if (jsonx_get_int(res, bf, &total))
        fprintf(stderr, "sandbox: %s truncated: kept %zu of %lld bytes\n", stream, kept, (long long)total);
    else
        fprintf(stderr, "sandbox: %s truncated: kept %zu bytes\n", stream, kept);
}

int cli_check_exec(cli_t *cli, opts_t *o)
{
    int rc = cli_check_id(cli->cmd, "SANDBOX_ID", o->pos[0]);
    if (rc)
        return rc;
    if (!o->saw_dashdash || o->cmd_argc == 0)
        return cli_usage_error(cli->cmd, "missing the command: sandbox exec SANDBOX_ID -- ARGV...");
    if (o->cmd_argc > SBX_MAX_ARGV)
        return cli_usage_error(cli->cmd, "the command has %d arguments; at most %d are allowed", o->cmd_argc,
                           SBX_MAX_ARGV);
    size_t total = 0;
    for (int i = 0; i < o->cmd_argc; i++)
        total += strlen(o->cmd_argv[i]) + 1;
    if (total > SBX_MAX_ARGV_BYTES)
        return cli_usage_error(cli->cmd, "the command line is %zu bytes; at most %u are allowed", total,
                           SBX_MAX_ARGV_BYTES);
    if (o->cwd && (strlen(o->cwd) > SBX_MAX_PATH_BYTES || utf8_has_control(o->cwd)))
        return cli_usage_error(cli->cmd, "--cwd: not a usable path");
    return 0;
}

/* The exit code for a finished command: its own, 128+N when killed by
 * signal N, 137 when it timed out. */
static int exit_code_of(int64_t code, int64_t sig, bool timed_out)
{
    if (sig > 0 && sig < 128)
        return 128 + (int)sig;
    if (timed_out)
        return 128 + 9;
    if (code >= 0 && code <= 255)
        return (int)code;
    return 255;
}

/* Writes a finished exec's output (not with --json) and returns its exit code. */
static int exec_finish(cli_t *cli, json_object *last, int64_t timeout)
{
    json_object *res = jsonx_get_obj(jsonx_get_obj(last, "operation"), "result");
    int64_t code = 0, sig = 0;
    if (!res || !jsonx_get_int(res, "exit_code", &code)) {
        fputs("error: bad_response: the exec operation succeeded without a result.exit_code\n", stderr);
        return EXIT_API;
    }
    jsonx_get_int(res, "signal", &sig);
    bool timed_out = false;
    jsonx_get_bool(res, "timed_out", &timed_out);
    if (!cli->json) {
        size_t on = write_stream(stdout, res, "stdout");
        size_t en = write_stream(stderr, res, "stderr");
        note_truncated(res, "stdout", on);
        note_truncated(res, "stderr", en);
    }
    if (timed_out)
        fprintf(stderr, "sandbox: command timed out after %lld s\n", (long long)timeout);
    return exit_code_of(code, sig, timed_out);
}

/* Reads all of this process's stdin (at most SBX_EXEC_STDIN_INLINE_MAX
 * bytes) as base64 into *ret (free() it). EXIT_USAGE, said on stderr, when
 * there is more or it cannot be read. */
static int read_stdin_b64(char **ret)
{
    size_t cap = SBX_EXEC_STDIN_INLINE_MAX + 1, n = 0;
    char *buf = malloc(cap);
    if (!buf)
        return EXIT_API;
    while (n < cap) {
        size_t got = fread(buf + n, 1, cap - n, stdin);
        if (got == 0)
            break;
        n += got;
    }
    if (ferror(stdin)) {
        free(buf);
        fputs("sandbox: exec: cannot read stdin\n", stderr);
        return EXIT_USAGE;
    }
    if (n > SBX_EXEC_STDIN_INLINE_MAX) {
        free(buf);
        fprintf(stderr, "sandbox: exec: stdin is over the limit of %u bytes for -i; larger input needs a file for "
                        "now (sandbox cp)\n", SBX_EXEC_STDIN_INLINE_MAX);
        return EXIT_USAGE;
    }
    *ret = b64_encode(buf, n);
    free(buf);
    return *ret ? 0 : EXIT_API;
}

int cli_cmd_exec(cli_t *cli, opts_t *o)
{
    int rc;
    json_object *body = NULL;
    char *in_b64 = NULL;
    if (o->interactive && (rc = read_stdin_b64(&in_b64)) != 0)
        return rc;
    client_exec_spec_t spec = { .argv = o->cmd_argv, .argc = o->cmd_argc, .env = o->env, .cwd = o->cwd,
                                .timeout_seconds = o->timeout, .max_output_bytes = o->max_output,
                                .stdin_b64 = in_b64 };
    rc = client_exec_body(&spec, &body);
    free(in_b64);
    if (rc < 0)
        return EXIT_API;
    int64_t timeout = o->timeout.set ? o->timeout.v : EXEC_DEFAULT_TIMEOUT_S;
    char path[CLI_ARG_ID_MAX * 3 + 32];
    if (cli_path(path, sizeof path, "/v1/sandboxes/", o->pos[0], "/exec") != 0) {
        json_object_put(body);
        return cli_usage_error(cli->cmd, "SANDBOX_ID too long");
    }
    json_object *resp = NULL;
    rc = cli_call(cli, "POST", path, body, NULL, &resp);
    json_object_put(body);
    if (rc)
        return rc;
    const char *oid = jsonx_get_str(jsonx_get_obj(resp, "operation"), "id");
    if (!oid || strlen(oid) > CLI_ARG_ID_MAX) {
        fputs("error: bad_response: the exec answer has no operation.id\n", stderr);
        json_object_put(resp);
        return EXIT_API;
    }
    json_object *last = NULL;
    rc = cli_wait(cli, oid, timeout + EXEC_WAIT_SLACK, &last);
    json_object_put(resp);
    if (cli->json && last)
        cli_print_json(last);
    if (rc == EXIT_OK)
        rc = exec_finish(cli, last, timeout);
    json_object_put(last);
    return rc;
}
