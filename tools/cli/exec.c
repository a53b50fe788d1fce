/* sandbox exec: run a command in a sandbox, its output and exit code as our
 * own; sandbox output and sandbox cancel for a detached one. */
#include <errno.h>
#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "b64.h"
#include "cli.h"
#include "errors.h"
#include "jsonx.h"
#include "limits.h"
#include "timeutil.h"
#include "utf8.h"

#define EXEC_DEFAULT_TIMEOUT_S 600        /* the API's default for timeout_seconds */
#define EXEC_WAIT_SLACK        60         /* seconds added to an exec's wait budget */

/* What a follow of the live output has printed: per stream ([1] stdout,
 * [2] stderr) the bytes seen and written, and the per-stream bound. */
typedef struct exec_follow {
    cli_t *cli;
    json_object *chunks;  /* --json of sandbox output: the chunks collected; NULL: write them */
    uint64_t seen[3], written[3];
    int64_t cap;          /* bytes written per stream at most; < 0: no bound */
    bool gap;             /* output was dropped before it was read */
    bool to_stderr;       /* stdout too is written to stderr (templates build --json) */
} exec_follow_t;

/* Writes n bytes of stream s within the follow's bound. */
static void follow_write(exec_follow_t *fw, int s, const char *p, size_t n)
{
    if (fw->cap >= 0) {
        uint64_t room = (uint64_t)fw->cap > fw->written[s] ? (uint64_t)fw->cap - fw->written[s] : 0;
        if (n > room)
            n = (size_t)room;
    }
    if (n) {
        FILE *f = s == 2 || fw->to_stderr ? stderr : stdout;
        fwrite(p, 1, n, f);
        fflush(f);
    }
    fw->written[s] += n;
}

static void follow_chunk(void *ud, const char *stream, int64_t offset, const char *p, size_t n)
{
    (void)offset;
    exec_follow_t *fw = ud;
    int s = stream && strcmp(stream, "stderr") == 0 ? 2 : 1;
    fw->seen[s] += n;
    if (fw->chunks) {
        json_object *ch = json_object_new_object();
        jsonx_add_str(ch, "stream", s == 2 ? "stderr" : "stdout");
        jsonx_add_int(ch, "offset", offset);
        b64_json_add_bytes(ch, "data", p, n);
        json_object_array_add(fw->chunks, ch);
        return;
    }
    follow_write(fw, s, p, n);
}

static void follow_skip(void *ud, int64_t offset, int64_t bytes)
{
    exec_follow_t *fw = ud;
    fw->gap = true;
    fprintf(stderr, "sandbox: %lld bytes of output from offset %lld were dropped before they could be read\n",
            (long long)bytes, (long long)offset);
}

static void follow_outage(void *ud, const client_error_t *e) { cli_outage_note(((exec_follow_t *)ud)->cli, e); }

/* A stream of the result, exactly: FIELD_b64's bytes when present (output
 * that is not UTF-8 text), else FIELD's. *ret is malloc'd (or NULL). */
static size_t result_stream(json_object *res, const char *field, char **ret)
{
    char key[32];
    snprintf(key, sizeof key, "%s_b64", field);
    json_object *chunk = json_object_new_object();
    json_object *v = NULL;
    if (json_object_object_get_ex(res, key, &v))
        jsonx_add(chunk, "data_b64", json_object_get(v));
    else if (json_object_object_get_ex(res, field, &v))
        jsonx_add(chunk, "data", json_object_get(v));
    size_t n = 0;
    *ret = NULL;
    if (client_output_chunk_bytes(chunk, ret, &n) < 0)
        n = 0;
    json_object_put(chunk);
    return n;
}

/* Writes stream s of the result: all of it without a follow, else what the
 * follow did not see (its last chunks may not have reached the controller;
 * not after a gap, when the follow's count is no position in the result).
 * Returns the bytes of the stream written in all. */
static uint64_t write_stream(exec_follow_t *fw, json_object *res, const char *field, int s)
{
    char *raw = NULL;
    size_t n = result_stream(res, field, &raw);
    if (!fw->gap && fw->seen[s] < n)
        follow_write(fw, s, raw + fw->seen[s], n - (size_t)fw->seen[s]);
    free(raw);
    return fw->written[s];
}

static void note_truncated(json_object *res, const char *stream, uint64_t kept)
{
    char tf[32], bf[32];
    snprintf(tf, sizeof tf, "%s_truncated", stream);
    snprintf(bf, sizeof bf, "%s_bytes", stream);
    bool t = false;
    int64_t total = -1;
    if (jsonx_get_int(res, bf, &total) && total >= 0 && kept >= (uint64_t)total)
        return; /* the follow printed all of it */
    if (!jsonx_get_bool(res, tf, &t) || !t)
        return;
    if (total >= 0)
        fprintf(stderr, "sandbox: %s truncated: kept %llu of %lld bytes\n", stream, (unsigned long long)kept,
                (long long)total);
    else
        fprintf(stderr, "sandbox: %s truncated: kept %llu bytes\n", stream, (unsigned long long)kept);
}

int cli_check_exec(cli_t *cli, opts_t *o)
{
    int rc = cli_check_id(cli->cmd, "SANDBOX", o->pos[0]);
    if (rc)
        return rc;
    if (!o->saw_dashdash || o->cmd_argc == 0)
        return cli_usage_error(cli->cmd, "missing the command: sandbox exec SANDBOX -- ARGV...");
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
    if (o->tty && (o->detach || o->json || o->timeout.set || o->max_output.set))
        return cli_usage_error(cli->cmd, "-t (a terminal session, as sandbox shell) does not go with %s",
                               o->detach ? "--detach" : o->json ? "--json" : o->timeout.set ? "--timeout" : "--max-output");
    if (o->exec_user && o->tty)
        return cli_usage_error(cli->cmd, "--user does not go with -t (a terminal session runs as the image's user)");
    if (o->tty)
        return cli_check_shell(cli, o);
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

/* Writes a finished exec's output (not with --json; fw: what a follow
 * printed already) and returns its exit code. timeout 0: not known. */
static int exec_finish(cli_t *cli, json_object *last, int64_t timeout, exec_follow_t *fw)
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
        uint64_t on = write_stream(fw, res, "stdout", 1);
        uint64_t en = write_stream(fw, res, "stderr", 2);
        note_truncated(res, "stdout", on);
        note_truncated(res, "stderr", en);
    }
    if (timed_out && timeout > 0)
        fprintf(stderr, "sandbox: command timed out after %lld s\n", (long long)timeout);
    else if (timed_out)
        fputs("sandbox: command timed out\n", stderr);
    return exit_code_of(code, sig, timed_out);
}

/* Prints op_id's output as it comes (until it is done or budget_s passes),
 * then waits for the operation itself: the exit code of a wait (its
 * failure printed), with the final answer in *ret_last. A controller
 * without live output (404) is only waited for. */
static int exec_follow(cli_t *cli, const char *op_id, int64_t budget_s, exec_follow_t *fw, json_object **ret_last)
{
    client_follow_t f = { .timeout_s = budget_s, .poll_wait_s = CLI_POLL_WAIT_MAX, .on_chunk = follow_chunk,
                          .on_skip = follow_skip, .on_outage = follow_outage, .ud = fw };
    int64_t offset = 0, t0 = time_mono_ms();
    bool done = false;
    client_error_t e;
    fw->cli = cli;
    int r = client_follow_output(&cli->client, op_id, &offset, &f, &done, &e);
    if (r < 0 && r != SBX_EIO)
        return r == SBX_ETOOBIG ? cli_usage_error(cli->cmd, "operation id too long") : EXIT_API;
    if (r == SBX_EIO && e.status != 404 && !e.retryable) {
        char path[CLIENT_PATH_MAX];
        if (client_path(path, sizeof path, "/v1/operations/", op_id, "/output") != 0)
            path[0] = '\0';
        return cli_call_failed(cli, "GET", path, &e);
    }
    int64_t left = budget_s - (time_mono_ms() - t0) / 1000;
    return cli_wait(cli, op_id, done || left < 1 ? 1 : left, ret_last);
}

/* Reads this process's stdin up to one byte over SBX_EXEC_STDIN_INLINE_MAX
 * into *ret (malloc'd; free() it) and *ret_n: more than the inline bound
 * means the rest is to be streamed (cli_exec_streamed). EXIT_USAGE, said on
 * stderr, when it cannot be read. */
static int read_stdin_head(char **ret, size_t *ret_n)
{
    size_t cap = SBX_EXEC_STDIN_INLINE_MAX + 1, n = 0;
    char *buf = malloc(cap);
    if (!buf)
        return EXIT_API;
    /* read(2), not stdio: what stdio would read ahead past the head would
     * be lost to the streamed rest, which is read from the descriptor. */
    while (n < cap) {
        ssize_t got = read(STDIN_FILENO, buf + n, cap - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            free(buf);
            fprintf(stderr, "sandbox: exec: cannot read stdin: %s\n", strerror(errno));
            return EXIT_USAGE;
        }
        if (got == 0)
            break;
        n += (size_t)got;
    }
    *ret = buf;
    *ret_n = n;
    return 0;
}

int cli_cmd_exec(cli_t *cli, opts_t *o)
{
    int rc;
    json_object *body = NULL;
    char *in_b64 = NULL, *head = NULL;
    size_t head_len = 0;
    if (o->tty) /* docker's exec -it: the terminal session of sandbox shell */
        return cli_cmd_shell(cli, o);
    int64_t timeout = o->timeout.set ? o->timeout.v : EXEC_DEFAULT_TIMEOUT_S;
    if (o->interactive && (rc = read_stdin_head(&head, &head_len)) != 0)
        return rc;
    if (head_len > SBX_EXEC_STDIN_INLINE_MAX) {
        /* Too much to send inline: streamed over a shell connection. */
        if (o->exec_user)
            rc = cli_usage_error(cli->cmd, "stdin is over %u bytes, so it is streamed over a terminal-less shell, "
                                           "which runs as the image's user: drop --user, or copy the input in "
                                           "as a file (sandbox cp)", SBX_EXEC_STDIN_INLINE_MAX);
        else if (cli->json || o->detach)
            rc = cli_usage_error(cli->cmd, "stdin is over %u bytes, so it is streamed, and a streamed command "
                                           "has no operation to print or detach: drop %s, or copy the input "
                                           "in as a file (sandbox cp)", SBX_EXEC_STDIN_INLINE_MAX,
                                 cli->json ? "--json" : "--detach");
        else
            rc = cli_exec_streamed(cli, o, head, head_len, timeout);
        free(head);
        return rc;
    }
    if (head) {
        in_b64 = b64_encode(head, head_len);
        free(head);
        if (!in_b64)
            return EXIT_API;
    }
    client_exec_spec_t spec = { .argv = o->cmd_argv, .argc = o->cmd_argc, .env = o->env, .cwd = o->cwd,
                                .user = o->exec_user,
                                .timeout_seconds = o->timeout, .max_output_bytes = o->max_output,
                                .stdin_b64 = in_b64 };
    rc = client_exec_body(&spec, &body);
    free(in_b64);
    if (rc < 0)
        return EXIT_API;
    char path[CLI_ARG_ID_MAX * 3 + 32];
    if (cli_path(path, sizeof path, "/v1/sandboxes/", o->pos[0], "/exec") != 0) {
        json_object_put(body);
        return cli_usage_error(cli->cmd, "SANDBOX too long");
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
    if (o->detach)
        return cli_print_or_wait_op(cli, o, resp, "exec"); /* exec has no --wait: prints the id */
    json_object *last = NULL;
    /* --max-output bounds what is printed, live or not, as it bounds the result. */
    exec_follow_t fw = { .cap = o->max_output.set ? o->max_output.v : -1 };
    if (cli->json)
        rc = cli_wait(cli, oid, timeout + EXEC_WAIT_SLACK, &last);
    else
        rc = exec_follow(cli, oid, timeout + EXEC_WAIT_SLACK, &fw, &last);
    json_object_put(resp);
    if (cli->json && last)
        cli_print_json(last);
    if (rc == EXIT_OK)
        rc = exec_finish(cli, last, timeout, &fw);
    json_object_put(last);
    return rc;
}

/* The exit code of a follow of op_id's output that failed (r < 0), said:
 * a usage error for an id too long, else the call's failure. */
static int follow_failed(cli_t *cli, const char *op_id, int r, const client_error_t *e)
{
    if (r == SBX_ETOOBIG)
        return cli_usage_error(cli->cmd, "operation id too long");
    char path[CLIENT_PATH_MAX];
    if (client_path(path, sizeof path, "/v1/operations/", op_id, "/output") != 0)
        path[0] = '\0';
    return cli_call_failed(cli, "GET", path, e);
}

/* Reads op_id's output from *offset as far as it goes now: 0 with *done,
 * or an exit code (printed). */
static int output_read_all(cli_t *cli, const char *op_id, int64_t *offset, exec_follow_t *fw, bool *done)
{
    client_follow_t f = { .timeout_s = 0, .poll_wait_s = 0, .on_chunk = follow_chunk, .on_skip = follow_skip,
                          .ud = fw };
    for (;;) {
        int64_t before = *offset;
        client_error_t e;
        int r = client_follow_output(&cli->client, op_id, offset, &f, done, &e);
        if (r < 0)
            return follow_failed(cli, op_id, r, &e);
        if (*done || *offset == before)
            return 0;
    }
}

int cli_output_print(cli_t *cli, const char *op_id, bool to_stderr, int64_t follow_s)
{
    exec_follow_t fw = { .cli = cli, .cap = -1, .to_stderr = to_stderr };
    int64_t offset = 0;
    bool done = false;
    if (follow_s <= 0)
        return output_read_all(cli, op_id, &offset, &fw, &done);
    client_follow_t f = { .timeout_s = follow_s, .poll_wait_s = CLI_POLL_WAIT_MAX, .on_chunk = follow_chunk,
                          .on_skip = follow_skip, .on_outage = follow_outage, .ud = &fw };
    client_error_t e;
    int r = client_follow_output(&cli->client, op_id, &offset, &f, &done, &e);
    if (r < 0)
        return follow_failed(cli, op_id, r, &e);
    return done ? EXIT_OK : EXIT_TIMEOUT;
}

int cli_cmd_output(cli_t *cli, opts_t *o)
{
    const char *op_id = o->pos[0];
    exec_follow_t fw = { .cli = cli, .cap = -1, .chunks = cli->json ? json_object_new_array() : NULL };
    int64_t offset = 0;
    bool done = false;
    int rc = 0;
    if (o->follow) {
        int64_t budget = o->timeout.set ? o->timeout.v : CLI_DEFAULT_WAIT_TIMEOUT;
        client_follow_t f = { .timeout_s = budget, .poll_wait_s = CLI_POLL_WAIT_MAX, .on_chunk = follow_chunk,
                              .on_skip = follow_skip, .on_outage = follow_outage, .ud = &fw };
        client_error_t e;
        int r = client_follow_output(&cli->client, op_id, &offset, &f, &done, &e);
        if (r < 0) {
            rc = follow_failed(cli, op_id, r, &e);
        } else if (!done) {
            fprintf(stderr, "sandbox: timed out after %lld s following ", (long long)budget);
            cli_put_text(stderr, op_id);
            fputc('\n', stderr);
            rc = EXIT_TIMEOUT;
        }
    } else {
        rc = output_read_all(cli, op_id, &offset, &fw, &done);
    }
    json_object *last = NULL;
    if (rc == 0 && done)
        rc = cli_wait(cli, op_id, 30, &last);
    if (cli->json && fw.chunks) {
        json_object *out = json_object_new_object();
        jsonx_add(out, "chunks", fw.chunks);
        fw.chunks = NULL;
        jsonx_add_int(out, "next_offset", offset);
        jsonx_add_bool(out, "done", done);
        if (last)
            jsonx_add(out, "operation", json_object_get(jsonx_get_obj(last, "operation")));
        cli_print_json(out);
        json_object_put(out);
    }
    if (rc == EXIT_OK && done)
        rc = exec_finish(cli, last, 0, &fw);
    json_object_put(fw.chunks);
    json_object_put(last);
    return rc;
}

int cli_cmd_cancel(cli_t *cli, opts_t *o)
{
    json_object *resp = NULL;
    int rc = cli_call_id(cli, "POST", "/v1/operations/", o->pos[0], "/cancel", "OPERATION_ID", NULL, NULL, &resp);
    if (rc)
        return rc;
    if (cli->json) {
        cli_print_json(resp);
    } else {
        json_object *op = jsonx_get_obj(resp, "operation");
        cli_put_text(stdout, jsonx_get_str(op, "id"));
        putchar(' ');
        cli_put_text(stdout, jsonx_get_str(op, "state"));
        putchar('\n');
    }
    json_object_put(resp);
    return EXIT_OK;
}

int cli_exec_live(cli_t *cli, const char *sbx, const client_exec_spec_t *spec, int64_t timeout_s, bool to_stderr,
                  int *ret_code, bool *ret_timed_out)
{
    json_object *body = NULL, *resp = NULL, *last = NULL;
    char path[CLIENT_PATH_MAX];
    if (cli_path(path, sizeof path, "/v1/sandboxes/", sbx, "/exec") != 0)
        return cli_usage_error(cli->cmd, "SANDBOX too long");
    if (client_exec_body(spec, &body) < 0)
        return EXIT_API;
    int rc = cli_call(cli, "POST", path, body, NULL, &resp);
    json_object_put(body);
    if (rc)
        return rc;
    const char *oid = jsonx_get_str(jsonx_get_obj(resp, "operation"), "id");
    if (!oid || strlen(oid) > CLI_ARG_ID_MAX) {
        fputs("error: bad_response: the exec answer has no operation.id\n", stderr);
        json_object_put(resp);
        return EXIT_API;
    }
    exec_follow_t fw = { .cap = -1, .to_stderr = to_stderr };
    rc = exec_follow(cli, oid, timeout_s + EXEC_WAIT_SLACK, &fw, &last);
    json_object_put(resp);
    json_object *res = jsonx_get_obj(jsonx_get_obj(last, "operation"), "result");
    int64_t code = 0, sig = 0;
    bool timed_out = false;
    if (rc == EXIT_OK && (!res || !jsonx_get_int(res, "exit_code", &code))) {
        fputs("error: bad_response: the exec operation succeeded without a result.exit_code\n", stderr);
        rc = EXIT_API;
    }
    if (rc == EXIT_OK) {
        jsonx_get_int(res, "signal", &sig);
        jsonx_get_bool(res, "timed_out", &timed_out);
        note_truncated(res, "stdout", write_stream(&fw, res, "stdout", 1));
        note_truncated(res, "stderr", write_stream(&fw, res, "stderr", 2));
        *ret_code = exit_code_of(code, sig, timed_out);
        *ret_timed_out = timed_out;
    }
    json_object_put(last);
    return rc;
}
