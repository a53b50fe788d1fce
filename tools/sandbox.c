/* sandbox: the command-line client over the Sandbox HTTP API (docs/cli.md,
 * docs/cli.md: the flags, output and exit codes here are a stable contract). */
#include <curl/curl.h>
#include <errno.h>
#include <json-c/json.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>

#include "clientcfg.h"
#include "errors.h"
#include "httpc.h"
#include "jsonx.h"
#include "limits.h"
#include "timeutil.h"
#include "utf8.h"
#include "version.h"


#define DEFAULT_WAIT_TIMEOUT 900          /* seconds, wait / --wait */
#define EXEC_DEFAULT_TIMEOUT_S 600        /* the API's default for timeout_seconds */
#define EXEC_WAIT_SLACK      60           /* seconds added to an exec's wait budget */
#define POLL_WAIT_MAX        30           /* ?wait= per long-poll */
#define POLL_MIN_INTERVAL_MS 200          /* never poll faster than this */
#define REQUEST_TIMEOUT_MS   30000L       /* a plain API call */
#define BACKOFF_START_MS     500
#define BACKOFF_MAX_MS       5000
#define ARG_ID_MAX           128          /* an id argument; real ids are < SBX_ID_MAX */
#define EVENTS_FOLLOW_TAIL   10           /* events --follow starts with the newest this many */
#define EVENTS_KIND_MAX      63
#define IDEM_KEY_MAX         128

/* ---------------------------------------------------------------- options */

typedef struct num_opt {
    int64_t v;
    bool set;
} num_opt_t;

/* Everything any command may be given; each command's flag table says which
 * of these it accepts. */
typedef struct opts {
    const char *url, *token;
    const char *tenant, *image, *network, *idem_key, *cwd, *role, *name, *policy, *isolation, *auth;
    const char *sandbox, *operation, *kind;  /* events filters */
    num_opt_t cpu_millis, memory_mib, ttl, timeout, max_output, limit, port, after, tail, count;
    bool untrusted_repo, generated_code, hostile, wait, json, all, read_only_root, hardened, follow;
    json_object *env, *labels, *selector; /* owned; NULL until a flag adds to them */
    const char *pos[2];         /* positional arguments */
    int npos;
    char **cmd_argv;            /* exec: everything after "--" */
    int cmd_argc;
    bool saw_dashdash;
} opts_t;

typedef enum { F_BOOL, F_STR, F_NUM, F_ENV, F_LABEL, F_SELECTOR } flag_kind_t;

typedef struct flag_def {
    const char *name;   /* "--tenant" */
    flag_kind_t kind;
    size_t off;         /* target inside opts_t */
    int64_t min, max;   /* F_NUM bounds */
    const char *short_name; /* "-f", or NULL: F_BOOL flags only */
} flag_def_t;

#define FB(n, f)        { n, F_BOOL, offsetof(opts_t, f), 0, 0 }
#define FS(n, f)        { n, F_STR, offsetof(opts_t, f), 0, 0 }
#define FN(n, f, lo, hi) { n, F_NUM, offsetof(opts_t, f), lo, hi }
#define FBS(n, s, f)    { n, F_BOOL, offsetof(opts_t, f), 0, 0, s }
#define FEND            { NULL, F_BOOL, 0, 0, 0 }

/* Accepted by every command. */
static const flag_def_t global_flags[] = {
    FS("--url", url),
    FS("--token", token),
    FEND,
};

/* ---------------------------------------------------------------- state */

typedef struct cli {
    const char *cmd;     /* command name, for messages */
    char *url;           /* resolved base URL, owned */
    char *token;         /* resolved token, owned; never printed */
    httpc_t *http;
    bool json;
} cli_t;

typedef struct command command_t;
struct command {
    const char *name;
    const char *alias;
    int (*check)(cli_t *cli, opts_t *o);  /* validation that needs no server */
    int (*run)(cli_t *cli, opts_t *o);
    const flag_def_t *flags;
    int max_pos;
    bool takes_argv;
    const char *usage;
};

/* ---------------------------------------------------------------- messages */

static int usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints "sandbox: CMD: problem" and the pointer to help; returns EXIT_USAGE. */
static int usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fputs("sandbox: ", stderr);
    if (cmd)
        fprintf(stderr, "%s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (cmd)
        fprintf(stderr, "\nsee 'sandbox %s --help'\n", cmd);
    else
        fputs("\nsee 'sandbox --help'\n", stderr);
    return EXIT_USAGE;
}

/* Writes s with control characters replaced, so that text from the server
 * cannot drive the terminal. NULL prints as "-". */
static void put_text(FILE *f, const char *s)
{
    if (!s) {
        fputc('-', f);
        return;
    }
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        fputc(ch < 0x20 || ch == 0x7f ? '?' : ch, f);
    }
}

/* Prints "error: CODE: MESSAGE" with the server's text made safe. */
static void print_error(const char *code, const char *message)
{
    fputs("error: ", stderr);
    put_text(stderr, code);
    fputs(": ", stderr);
    put_text(stderr, message);
    fputc('\n', stderr);
}

static void print_json(json_object *o)
{
    const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE);
    fputs(s ? s : "null", stdout);
    fputc('\n', stdout);
}

/* ---------------------------------------------------------------- parsing */

/* Strict decimal integer in [min, max]: the whole string, no sign games. */
static int parse_num(const char *cmd, const char *flag, const char *s, int64_t min, int64_t max, int64_t *ret)
{
    const char *p = s;
    if (*p == '-' || *p == '+')
        p++;
    bool digits = *p != '\0';
    for (const char *q = p; *q; q++)
        if (*q < '0' || *q > '9')
            digits = false;
    if (!digits)
        return usage_error(cmd, "%s: '%s' is not a whole number", flag, s);
    errno = 0;
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (errno == ERANGE || !end || *end != '\0' || v < min || v > max)
        return usage_error(cmd, "%s: %s is out of range (%lld to %lld)", flag, s, (long long)min, (long long)max);
    *ret = (int64_t)v;
    return 0;
}

static bool env_key_valid(const char *k, size_t n)
{
    if (n == 0 || !((k[0] >= 'A' && k[0] <= 'Z') || (k[0] >= 'a' && k[0] <= 'z') || k[0] == '_'))
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = k[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
            return false;
    }
    return true;
}

static bool label_key_valid(const char *k, size_t n)
{
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = k[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || strchr("._/-", c)))
            return false;
    }
    return true;
}

/* Adds "K=V" to the object *target (created on first use). */
static int parse_kv(const char *cmd, const char *flag, const char *s, bool env, json_object **target)
{
    const char *eq = strchr(s, '=');
    if (!eq)
        return usage_error(cmd, "%s: '%s' is not KEY=VALUE", flag, s);
    size_t kl = (size_t)(eq - s);
    if (kl == 0)
        return usage_error(cmd, "%s: '%s' has an empty key", flag, s);
    if (kl > SBX_MAX_KEY_BYTES)
        return usage_error(cmd, "%s: key longer than %d bytes", flag, SBX_MAX_KEY_BYTES);
    if (env ? !env_key_valid(s, kl) : !label_key_valid(s, kl))
        return usage_error(cmd, "%s: key '%.*s' is not valid (%s)", flag, (int)kl, s,
                           env ? "letters, digits and _, not starting with a digit" : "letters, digits and . _ / -");
    if (strlen(eq + 1) > SBX_MAX_VALUE_BYTES)
        return usage_error(cmd, "%s: value of '%.*s' is longer than %d bytes", flag, (int)kl, s, SBX_MAX_VALUE_BYTES);
    if (!*target) {
        *target = json_object_new_object();
        if (!*target)
            return usage_error(cmd, "out of memory");
    }
    char key[SBX_MAX_KEY_BYTES + 1];
    memcpy(key, s, kl);
    key[kl] = '\0';
    size_t max = env ? SBX_MAX_ENV : SBX_MAX_LABELS;
    if (!json_object_object_get_ex(*target, key, NULL) && (size_t)json_object_object_length(*target) >= max)
        return usage_error(cmd, "%s: at most %zu are allowed", flag, max);
    jsonx_add_str(*target, key, eq + 1);
    return 0;
}

static const flag_def_t *flag_find(const flag_def_t *table, const char *name, size_t n)
{
    for (const flag_def_t *f = table; f && f->name; f++)
        if (strlen(f->name) == n && strncmp(f->name, name, n) == 0)
            return f;
    return NULL;
}

/* Parses argv[first..] against the command's flags into o. Returns 0 or an
 * exit code (the message is printed). */
static int parse_args(const command_t *c, int argc, char **argv, int first, opts_t *o)
{
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            o->saw_dashdash = true;
            if (c->takes_argv) {
                o->cmd_argv = argv + i + 1;
                o->cmd_argc = argc - i - 1;
                return 0;
            }
            for (i++; i < argc; i++) {
                if (o->npos >= c->max_pos)
                    return usage_error(c->name, "unexpected argument '%s'", argv[i]);
                o->pos[o->npos++] = argv[i];
            }
            return 0;
        }
        if (a[0] != '-' || a[1] == '\0') {
            if (o->npos >= c->max_pos) {
                if (c->takes_argv)
                    return usage_error(c->name, "unexpected argument '%s' (put the command after '--')", a);
                return usage_error(c->name, "unexpected argument '%s'", a);
            }
            o->pos[o->npos++] = a;
            continue;
        }
        if (a[1] != '-') {
            const flag_def_t *sf = c->flags;
            while (sf->name && !(sf->short_name && strcmp(sf->short_name, a) == 0))
                sf++;
            if (!sf->name)
                return usage_error(c->name, "unknown flag '%s'", a);
            *(bool *)((char *)o + sf->off) = true;
            continue;
        }
        const char *eq = strchr(a, '=');
        size_t nl = eq ? (size_t)(eq - a) : strlen(a);
        const flag_def_t *f = flag_find(c->flags, a, nl);
        if (!f)
            f = flag_find(global_flags, a, nl);
        if (!f)
            return usage_error(c->name, "unknown flag '%.*s'", (int)nl, a);
        if (f->kind == F_BOOL) {
            if (eq)
                return usage_error(c->name, "%s takes no value", f->name);
            *(bool *)((char *)o + f->off) = true;
            continue;
        }
        const char *val;
        if (eq) {
            val = eq + 1;
        } else {
            if (i + 1 >= argc || strncmp(argv[i + 1], "--", 2) == 0)
                return usage_error(c->name, "%s needs a value", f->name);
            val = argv[++i];
        }
        int r = 0;
        switch (f->kind) {
        case F_STR: {
            const char **t = (const char **)(void *)((char *)o + f->off);
            if (*t)
                return usage_error(c->name, "%s given more than once", f->name);
            if (!*val)
                return usage_error(c->name, "%s needs a non-empty value", f->name);
            *t = val;
            break;
        }
        case F_NUM: {
            num_opt_t *t = (num_opt_t *)(void *)((char *)o + f->off);
            if (t->set)
                return usage_error(c->name, "%s given more than once", f->name);
            r = parse_num(c->name, f->name, val, f->min, f->max, &t->v);
            t->set = r == 0;
            break;
        }
        case F_ENV:
            r = parse_kv(c->name, f->name, val, true, &o->env);
            break;
        case F_LABEL:
            r = parse_kv(c->name, f->name, val, false, &o->labels);
            break;
        case F_SELECTOR:
            r = parse_kv(c->name, f->name, val, false, &o->selector);
            break;
        case F_BOOL:
            break;
        }
        if (r)
            return r;
    }
    return 0;
}

/* An id argument: present, short, printable. */
static int check_id(const char *cmd, const char *what, const char *id)
{
    if (!id)
        return usage_error(cmd, "missing %s", what);
    if (strlen(id) > ARG_ID_MAX || utf8_has_control(id))
        return usage_error(cmd, "%s '%.40s…' is not an id", what, id);
    return 0;
}

/* ---------------------------------------------------------------- config */

/* Resolves URL and token (common/clientcfg.c: flag, then environment, then
 * config file, then the default URL) and opens the HTTP client. Returns 0
 * or an exit code. */
static int cli_connect(cli_t *cli, const opts_t *o)
{
    client_config_t cc;
    char err[512];
    int r = client_config_resolve(o->url, o->token, &cc, err, sizeof err);
    for (int i = 0; i < 2; i++)
        if (cc.warnings[i][0])
            fprintf(stderr, "sandbox: warning: %s\n", cc.warnings[i]);
    if (r < 0) {
        client_config_release(&cc);
        return usage_error(NULL, "%s", err);
    }
    const char *env_token = getenv("SANDBOX_TOKEN");
    if (!cc.token && env_token && !*env_token) {
        /* `export SANDBOX_TOKEN=$(cat FILE)` whose cat failed (no such file,
         * or a root-only file read without sudo) leaves it empty. */
        fprintf(stderr, "sandbox: SANDBOX_TOKEN is set but empty: did the command that set it fail? (the bootstrap "
                        "token file .sandbox/admin.token is readable by root only: read it as root or with sudo)\n");
        client_config_release(&cc);
        return EXIT_USAGE;
    }
    if (!cc.token) {
        fprintf(stderr,
                "sandbox: no API token: pass --token TOKEN, set SANDBOX_TOKEN, or put 'token = TOKEN' in %s\n"
                "see 'sandbox --help'\n",
                cc.path ? cc.path : "~/.config/sandbox/config");
        client_config_release(&cc);
        return EXIT_USAGE;
    }
    cli->url = cc.url;
    cli->token = cc.token;
    cc.url = cc.token = NULL;
    client_config_release(&cc);
    r = httpc_new(cli->url, cli->token, &cli->http);
    if (r < 0) {
        fprintf(stderr, "sandbox: cannot set up the HTTP client for %s: %s\n", cli->url, sbx_strerror(r));
        return EXIT_API;
    }
    return 0;
}

/* ---------------------------------------------------------------- API calls */

/* What one call came back with. */
typedef enum {
    CALL_OK = 0,        /* 2xx with a JSON object body */
    CALL_TRANSPORT,     /* no answer: connection refused, reset, timed out */
    CALL_RETRYABLE,     /* 502/503/504: a controller restarting or overloaded */
    CALL_ERROR,         /* any other answer */
} call_result_t;

/* Sends one request. resp must be released by the caller whatever the result. */
static call_result_t api_call(cli_t *cli, const char *method, const char *path, json_object *body,
                              const char *idem_key, long timeout_ms, httpc_response_t *resp)
{
    char hdr[IDEM_KEY_MAX + 32];
    const char *headers[2] = { NULL, NULL };
    if (idem_key) {
        snprintf(hdr, sizeof hdr, "Idempotency-Key: %s", idem_key);
        headers[0] = hdr;
    }
    int r = httpc_request(cli->http, method, path, body, headers, timeout_ms, resp);
    if (r < 0 || resp->status == 0)
        return CALL_TRANSPORT;
    if (resp->status >= 200 && resp->status < 300 && resp->json &&
        json_object_is_type(resp->json, json_type_object))
        return CALL_OK;
    if (resp->status == 502 || resp->status == 503 || resp->status == 504)
        return CALL_RETRYABLE;
    return CALL_ERROR;
}

/* Prints what went wrong with a call and returns the exit code for it. */
static int call_failed(cli_t *cli, const char *method, const char *path, const httpc_response_t *resp)
{
    if (resp->status == 0) {
        fputs("error: unreachable: ", stderr);
        fprintf(stderr, "%s ", method);
        put_text(stderr, cli->url);
        put_text(stderr, path);
        fputs(": ", stderr);
        put_text(stderr, resp->error[0] ? resp->error : "no response");
        fputc('\n', stderr);
        return EXIT_API;
    }
    if (resp->status >= 200 && resp->status < 300) {
        fprintf(stderr, "error: bad_response: %s ", method);
        put_text(stderr, cli->url);
        put_text(stderr, path);
        fprintf(stderr, " answered %ld without a JSON object\n", resp->status);
        return EXIT_API;
    }
    const char *code, *message;
    httpc_api_error(resp, &code, &message);
    if (!jsonx_get_obj(resp->json, "error")) {
        fprintf(stderr, "error: http_error: %s ", method);
        put_text(stderr, cli->url);
        put_text(stderr, path);
        fprintf(stderr, " answered HTTP %ld: ", resp->status);
        put_text(stderr, message);
        fputc('\n', stderr);
        return EXIT_API;
    }
    print_error(code, message);
    int ac = api_code_parse(code);
    return ac >= 0 ? api_code_info((api_code_t)ac)->cli_exit : EXIT_API;
}

/* A plain call: on success *ret is a new reference to the response object;
 * otherwise the error is printed and its exit code returned. */
static int api_get_json(cli_t *cli, const char *method, const char *path, json_object *body, const char *idem_key,
                        json_object **ret)
{
    httpc_response_t resp;
    call_result_t cr = api_call(cli, method, path, body, idem_key, REQUEST_TIMEOUT_MS, &resp);
    int rc = 0;
    if (cr == CALL_OK)
        *ret = json_object_get(resp.json);
    else
        rc = call_failed(cli, method, path, &resp);
    httpc_response_release(&resp);
    return rc;
}

/* "/v1/<prefix><escaped id><suffix>" into buf. */
static int build_path(char *buf, size_t n, const char *prefix, const char *id, const char *suffix)
{
    char *e = httpc_escape(id);
    if (!e)
        return EXIT_API;
    int w = snprintf(buf, n, "%s%s%s", prefix, e, suffix ? suffix : "");
    free(e);
    return w < 0 || (size_t)w >= n ? EXIT_USAGE : 0;
}

static void sleep_ms(int64_t ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = { .tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static bool op_state_is_terminal(const char *s)
{
    return s && (strcmp(s, "succeeded") == 0 || strcmp(s, "failed") == 0 || strcmp(s, "cancelled") == 0);
}

/* Prints why a terminal, unsuccessful operation ended. */
static void op_print_failure(json_object *op)
{
    json_object *err = jsonx_get_obj(op, "error");
    const char *state = jsonx_get_str(op, "state");
    const char *code = jsonx_get_str(err, "code");
    const char *msg = jsonx_get_str(err, "message");
    if (code || msg) {
        print_error(code ? code : (state ? state : "failed"), msg ? msg : "no message");
        return;
    }
    bool cancelled = state && strcmp(state, "cancelled") == 0;
    fputs("error: ", stderr);
    fputs(cancelled ? "cancelled" : "failed", stderr);
    fputs(": operation ", stderr);
    put_text(stderr, jsonx_get_str(op, "id"));
    fputs(cancelled ? " was cancelled\n" : " failed\n", stderr);
}

/* Long-polls GET /v1/operations/{id} until the operation is terminal or
 * timeout_s passes. Transport errors and 502/503/504 are retried with backoff
 * until then (a restarting controller does not end a wait). *ret_last gets
 * the last {"operation":…} answer seen (new reference) or NULL.
 * Returns EXIT_OK (succeeded), EXIT_OP_FAILED (failed/cancelled; printed),
 * EXIT_TIMEOUT (printed) or the exit code of an API error (printed). */
static int wait_operation(cli_t *cli, const char *op_id, int64_t timeout_s, json_object **ret_last)
{
    *ret_last = NULL;
    char base[ARG_ID_MAX * 3 + 64];
    if (build_path(base, sizeof base, "/v1/operations/", op_id, NULL) != 0)
        return usage_error(cli->cmd, "operation id too long");
    int64_t start = time_mono_ms();
    int64_t deadline = start + timeout_s * 1000;
    int64_t backoff = BACKOFF_START_MS;
    bool outage = false, first = true;
    char last_problem[300] = "";
    for (;;) {
        int64_t now = time_mono_ms();
        int64_t rem = deadline - now;
        if (!first && rem <= 0)
            break;
        first = false;
        int64_t w = rem > 0 ? rem / 1000 : 0;
        if (w > POLL_WAIT_MAX)
            w = POLL_WAIT_MAX;
        char path[sizeof base + 32];
        snprintf(path, sizeof path, "%s?wait=%lld", base, (long long)w);
        httpc_response_t resp;
        int64_t t0 = time_mono_ms();
        call_result_t cr = api_call(cli, "GET", path, NULL, NULL, (long)(w + 15) * 1000L, &resp);
        if (cr == CALL_OK) {
            json_object *op = jsonx_get_obj(resp.json, "operation");
            const char *state = jsonx_get_str(op, "state");
            if (!state) {
                fputs("error: bad_response: ", stderr);
                put_text(stderr, path);
                fputs(" answered without operation.state\n", stderr);
                httpc_response_release(&resp);
                return EXIT_API;
            }
            if (*ret_last)
                json_object_put(*ret_last);
            *ret_last = json_object_get(resp.json);
            httpc_response_release(&resp);
            if (outage) {
                fputs("sandbox: reconnected\n", stderr);
                outage = false;
            }
            backoff = BACKOFF_START_MS;
            if (op_state_is_terminal(state)) {
                if (strcmp(state, "succeeded") == 0)
                    return EXIT_OK;
                op_print_failure(op);
                return EXIT_OP_FAILED;
            }
            int64_t took = time_mono_ms() - t0;
            if (took < POLL_MIN_INTERVAL_MS) {
                int64_t s = POLL_MIN_INTERVAL_MS - took;
                int64_t left = deadline - time_mono_ms();
                sleep_ms(s < left ? s : left);
            }
            continue;
        }
        if (cr == CALL_ERROR) {
            int rc = call_failed(cli, "GET", path, &resp);
            httpc_response_release(&resp);
            return rc;
        }
        /* Transport trouble or a 5xx gateway answer: retry until the deadline. */
        if (resp.status == 0)
            snprintf(last_problem, sizeof last_problem, "cannot reach %s: %s", cli->url,
                     resp.error[0] ? resp.error : "no response");
        else
            snprintf(last_problem, sizeof last_problem, "%s answered HTTP %ld", cli->url, resp.status);
        httpc_response_release(&resp);
        if (!outage) {
            fputs("sandbox: ", stderr);
            put_text(stderr, last_problem);
            fputs("; retrying\n", stderr);
            outage = true;
        }
        int64_t left = deadline - time_mono_ms();
        sleep_ms(backoff < left ? backoff : left);
        backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
    }
    json_object *op = jsonx_get_obj(*ret_last, "operation");
    fprintf(stderr, "sandbox: timed out after %lld s waiting for ", (long long)timeout_s);
    put_text(stderr, op_id);
    if (op) {
        fputs(" (state: ", stderr);
        put_text(stderr, jsonx_get_str(op, "state"));
        fputc(')', stderr);
    } else if (last_problem[0]) {
        fputs(" (", stderr);
        put_text(stderr, last_problem);
        fputc(')', stderr);
    }
    fputc('\n', stderr);
    return EXIT_TIMEOUT;
}

/* ---------------------------------------------------------------- human output */

/* Seconds since an RFC 3339 UTC time, or -1 when it cannot be read. */
static int64_t age_seconds(const char *ts)
{
    if (!ts)
        return -1;
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    const char *end = strptime(ts, "%Y-%m-%dT%H:%M:%S", &tm);
    if (!end)
        return -1;
    if (*end == '.')
        for (end++; *end >= '0' && *end <= '9'; end++) {
        }
    if (strcmp(end, "Z") != 0 && strcmp(end, "+00:00") != 0)
        return -1;
    time_t t = timegm(&tm);
    int64_t d = (int64_t)(time_wall_ms() / 1000) - (int64_t)t;
    return d < 0 ? 0 : d;
}

static void format_age(int64_t s, char *buf, size_t n)
{
    if (s < 0)
        snprintf(buf, n, "-");
    else if (s < 120)
        snprintf(buf, n, "%llds", (long long)s);
    else if (s < 2 * 3600)
        snprintf(buf, n, "%lldm", (long long)(s / 60));
    else if (s < 2 * 86400)
        snprintf(buf, n, "%lldh", (long long)(s / 3600));
    else
        snprintf(buf, n, "%lldd", (long long)(s / 86400));
}

static void kv_line(const char *key, const char *value)
{
    printf("%-15s ", key);
    put_text(stdout, value);
    putchar('\n');
}

static void kv_num(const char *key, json_object *o, const char *field, const char *unit)
{
    int64_t v;
    if (jsonx_get_int(o, field, &v))
        printf("%-15s %lld%s\n", key, (long long)v, unit);
    else
        kv_line(key, NULL);
}

/* "a, b" from the true members of trust, or "none". */
static void print_trust(json_object *trust)
{
    static const char *const names[] = { "untrusted_repo", "generated_code", "hostile", NULL };
    printf("%-15s ", "trust:");
    int n = 0;
    for (const char *const *p = names; *p; p++) {
        bool b = false;
        if (jsonx_get_bool(trust, *p, &b) && b)
            printf("%s%s", n++ ? ", " : "", *p);
    }
    puts(n ? "" : "none");
}

static void print_labels(json_object *labels)
{
    printf("%-15s ", "labels:");
    int n = 0;
    if (labels && json_object_is_type(labels, json_type_object)) {
        json_object_object_foreach(labels, k, v) {
            fputs(n++ ? ", " : "", stdout);
            put_text(stdout, k);
            putchar('=');
            put_text(stdout, json_object_is_type(v, json_type_string) ? json_object_get_string(v) : "?");
        }
    }
    puts(n ? "" : "none");
}

/* "failure: exited with code 137 at T: message", one line, when the
 * runtime saw the sandbox stop by itself. */
static void print_failure(json_object *f)
{
    const char *reason = jsonx_get_str(f, "reason");
    if (!reason)
        return;
    int64_t code = 0;
    bool has_code = jsonx_get_int(f, "exit_code", &code);
    const char *at = jsonx_get_str(f, "at");
    const char *msg = jsonx_get_str(f, "message");
    printf("%-15s ", "failure:");
    put_text(stdout, reason);
    if (has_code)
        printf(" with code %lld", (long long)code);
    if (at) {
        fputs(" at ", stdout);
        put_text(stdout, at);
    }
    if (msg) {
        fputs(": ", stdout);
        put_text(stdout, msg);
    }
    putchar('\n');
}

static void print_sandbox(json_object *s)
{
    kv_line("id:", jsonx_get_str(s, "id"));
    kv_line("tenant:", jsonx_get_str(s, "tenant"));
    kv_line("image:", jsonx_get_str(s, "image"));
    kv_line("phase:", jsonx_get_str(s, "phase"));
    kv_line("desired state:", jsonx_get_str(s, "desired_state"));
    kv_line("worker:", jsonx_get_str(s, "worker"));
    kv_line("isolation:", jsonx_get_str(s, "isolation"));
    kv_num("cpu:", s, "cpu_millis", " millicpu");
    kv_num("memory:", s, "memory_mib", " MiB");
    kv_num("ttl:", s, "ttl_seconds", " s");
    kv_line("network:", jsonx_get_str(s, "network"));
    print_trust(jsonx_get_obj(s, "trust"));
    bool ro = false, hard = false;
    jsonx_get_bool(s, "read_only_root", &ro);
    jsonx_get_bool(s, "hardened", &hard);
    kv_line("hardening:", hard && ro ? "no capabilities, read-only root"
                          : hard     ? "no capabilities"
                          : ro       ? "standard, read-only root"
                                     : "standard");
    print_labels(jsonx_get_obj(s, "labels"));
    json_object *sel = jsonx_get_obj(s, "selector");
    if (sel && json_object_object_length(sel) > 0) {
        printf("%-15s ", "selector:");
        int n = 0;
        json_object_object_foreach(sel, k, v) {
            fputs(n++ ? ", " : "", stdout);
            put_text(stdout, k);
            putchar('=');
            put_text(stdout, json_object_is_type(v, json_type_string) ? json_object_get_string(v) : "?");
        }
        putchar('\n');
    }
    json_object *cls = jsonx_get_obj(s, "classification");
    json_object *why = cls ? jsonx_get_arr(cls, "reasons") : NULL;
    for (size_t i = 0; why && i < json_object_array_length(why); i++) {
        json_object *r = json_object_array_get_idx(why, i);
        printf("%-15s ", i == 0 ? "classified:" : "");
        put_text(stdout, json_object_is_type(r, json_type_string) ? json_object_get_string(r) : "?");
        putchar('\n');
    }
    print_failure(jsonx_get_obj(s, "failure"));
    kv_line("expires:", jsonx_get_str(s, "expires_at"));
    kv_line("created:", jsonx_get_str(s, "created_at"));
    kv_line("updated:", jsonx_get_str(s, "updated_at"));
}

/* The state history of an operation (from the controller's events), one
 * line per transition, indented by ind spaces after a label column. */
static void print_history(json_object *op, int ind, int label_width)
{
    json_object *h = jsonx_get_arr(op, "history");
    size_t n = h ? json_object_array_length(h) : 0;
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(h, i);
        const char *st = jsonx_get_str(e, "state");
        if (!st)
            st = "?";
        printf("%*s%-*s ", ind, "", label_width, i == 0 ? "history:" : "");
        put_text(stdout, st);
        printf("%*s", strlen(st) < 10 ? (int)(10 - strlen(st)) : 1, "");
        put_text(stdout, jsonx_get_str(e, "at"));
        putchar('\n');
    }
}

/* Error and placement lines of an operation, indented by ind spaces. */
static void print_op_details(json_object *op, int ind)
{
    json_object *err = jsonx_get_obj(op, "error");
    if (err) {
        printf("%*serror: ", ind, "");
        put_text(stdout, jsonx_get_str(err, "code"));
        fputs(": ", stdout);
        put_text(stdout, jsonx_get_str(err, "message"));
        putchar('\n');
    }
    json_object *pl = jsonx_get_obj(op, "placement");
    if (pl) {
        printf("%*splacement: ", ind, "");
        put_text(stdout, jsonx_get_str(pl, "summary") ? jsonx_get_str(pl, "summary") : jsonx_get_str(pl, "worker"));
        putchar('\n');
        json_object *reasons = jsonx_get_arr(pl, "reasons");
        size_t n = reasons ? json_object_array_length(reasons) : 0;
        for (size_t i = 0; i < n; i++) {
            json_object *r = json_object_array_get_idx(reasons, i);
            printf("%*s- ", ind + 2, "");
            put_text(stdout, json_object_is_type(r, json_type_string) ? json_object_get_string(r) : "?");
            putchar('\n');
        }
    }
    print_history(op, ind, 8);
}

static void print_operation(json_object *op)
{
    kv_line("id:", jsonx_get_str(op, "id"));
    kv_line("kind:", jsonx_get_str(op, "kind"));
    kv_line("state:", jsonx_get_str(op, "state"));
    kv_line("sandbox:", jsonx_get_str(op, "sandbox_id"));
    kv_num("attempt:", op, "attempt", "");
    kv_line("created:", jsonx_get_str(op, "created_at"));
    kv_line("updated:", jsonx_get_str(op, "updated_at"));
    kv_line("finished:", jsonx_get_str(op, "finished_at"));
    json_object *err = jsonx_get_obj(op, "error");
    if (err) {
        printf("%-15s ", "error:");
        put_text(stdout, jsonx_get_str(err, "code"));
        fputs(": ", stdout);
        put_text(stdout, jsonx_get_str(err, "message"));
        putchar('\n');
    }
    json_object *pl = jsonx_get_obj(op, "placement");
    if (pl) {
        kv_line("placement:", jsonx_get_str(pl, "summary") ? jsonx_get_str(pl, "summary") : jsonx_get_str(pl, "worker"));
        json_object *reasons = jsonx_get_arr(pl, "reasons");
        size_t n = reasons ? json_object_array_length(reasons) : 0;
        for (size_t i = 0; i < n; i++) {
            json_object *r = json_object_array_get_idx(reasons, i);
            printf("%-15s - ", "");
            put_text(stdout, json_object_is_type(r, json_type_string) ? json_object_get_string(r) : "?");
            putchar('\n');
        }
    }
    print_history(op, 0, 15);
    json_object *res = jsonx_get_obj(op, "result");
    if (res) {
        int64_t code = 0, sig = 0, dur = 0, ob = 0, eb = 0;
        bool to = false, otr = false, etr = false;
        if (jsonx_get_int(res, "exit_code", &code)) {
            jsonx_get_int(res, "signal", &sig);
            jsonx_get_int(res, "duration_ms", &dur);
            jsonx_get_int(res, "stdout_bytes", &ob);
            jsonx_get_int(res, "stderr_bytes", &eb);
            jsonx_get_bool(res, "timed_out", &to);
            jsonx_get_bool(res, "stdout_truncated", &otr);
            jsonx_get_bool(res, "stderr_truncated", &etr);
            printf("%-15s %lld\n", "exit code:", (long long)code);
            printf("%-15s %lld\n", "signal:", (long long)sig);
            printf("%-15s %s\n", "timed out:", to ? "yes" : "no");
            printf("%-15s %lld ms\n", "duration:", (long long)dur);
            printf("%-15s %lld bytes%s\n", "stdout:", (long long)ob, otr ? " (truncated)" : "");
            printf("%-15s %lld bytes%s\n", "stderr:", (long long)eb, etr ? " (truncated)" : "");
        }
    }
}

/* ---------------------------------------------------------------- commands */

static int print_op_json_or(cli_t *cli, json_object *resp, const char *human_suffix)
{
    if (cli->json) {
        print_json(resp);
        return 0;
    }
    put_text(stdout, jsonx_get_str(jsonx_get_obj(resp, "operation"), "id"));
    fputs(human_suffix, stdout);
    return 0;
}

/* Matches the controller's rule: 1 to 128 printable ASCII characters. */
static int check_idem_key(const char *cmd, const char *k)
{
    if (!k)
        return 0;
    bool ok = strlen(k) <= IDEM_KEY_MAX;
    for (const char *p = k; ok && *p; p++)
        ok = (unsigned char)*p >= 0x21 && (unsigned char)*p <= 0x7e;
    if (!ok)
        return usage_error(cmd, "--idempotency-key: 1 to %d printable ASCII characters, no spaces", IDEM_KEY_MAX);
    return 0;
}

static int check_create(cli_t *cli, opts_t *o)
{
    if (o->timeout.set && !o->wait)
        return usage_error(cli->cmd, "--timeout needs --wait");
    if (o->network && strcmp(o->network, "none") != 0 && strcmp(o->network, "restricted") != 0 &&
        strcmp(o->network, "open") != 0)
        return usage_error(cli->cmd, "--network: '%s' is not one of none, restricted, open", o->network);
    if (o->isolation && strcmp(o->isolation, "container") != 0 && strcmp(o->isolation, "gvisor") != 0 &&
        strcmp(o->isolation, "microvm") != 0)
        return usage_error(cli->cmd, "--isolation: '%s' is not one of container, gvisor, microvm", o->isolation);
    if (o->image && (strlen(o->image) > SBX_MAX_IMAGE_BYTES || utf8_has_control(o->image)))
        return usage_error(cli->cmd, "--image: at most %d printable bytes", SBX_MAX_IMAGE_BYTES);
    if (o->tenant && (strlen(o->tenant) > SBX_MAX_NAME_BYTES || utf8_has_control(o->tenant)))
        return usage_error(cli->cmd, "--tenant: at most %d printable bytes", SBX_MAX_NAME_BYTES);
    return check_idem_key(cli->cmd, o->idem_key);
}

static int cmd_create(cli_t *cli, opts_t *o)
{
    json_object *body = json_object_new_object();
    if (!body)
        return EXIT_API;
    if (o->tenant)
        jsonx_add_str(body, "tenant", o->tenant);
    if (o->image) /* none: the server's default_image */
        jsonx_add_str(body, "image", o->image);
    if (o->cpu_millis.set)
        jsonx_add_int(body, "cpu_millis", o->cpu_millis.v);
    if (o->memory_mib.set)
        jsonx_add_int(body, "memory_mib", o->memory_mib.v);
    if (o->ttl.set)
        jsonx_add_int(body, "ttl_seconds", o->ttl.v);
    if (o->network)
        jsonx_add_str(body, "network", o->network);
    json_object *trust = json_object_new_object();
    jsonx_add_bool(trust, "untrusted_repo", o->untrusted_repo);
    jsonx_add_bool(trust, "generated_code", o->generated_code);
    jsonx_add_bool(trust, "hostile", o->hostile);
    jsonx_add(body, "trust", trust);
    if (o->env)
        jsonx_add(body, "env", json_object_get(o->env));
    if (o->labels)
        jsonx_add(body, "labels", json_object_get(o->labels));
    if (o->selector)
        jsonx_add(body, "selector", json_object_get(o->selector));
    if (o->isolation)
        jsonx_add_str(body, "isolation", o->isolation);
    if (o->read_only_root)
        jsonx_add_bool(body, "read_only_root", true);
    if (o->hardened)
        jsonx_add_bool(body, "hardened", true);

    json_object *resp = NULL;
    int rc = api_get_json(cli, "POST", "/v1/sandboxes", body, o->idem_key, &resp);
    json_object_put(body);
    if (rc)
        return rc;
    json_object *sbx = jsonx_get_obj(resp, "sandbox");
    json_object *op = jsonx_get_obj(resp, "operation");
    const char *sid = jsonx_get_str(sbx, "id"), *oid = jsonx_get_str(op, "id");
    if (!sid || !oid || strlen(oid) > ARG_ID_MAX || strlen(sid) > ARG_ID_MAX) {
        fputs("error: bad_response: the create answer has no sandbox.id or operation.id\n", stderr);
        json_object_put(resp);
        return EXIT_API;
    }
    if (!o->wait) {
        if (cli->json)
            print_json(resp);
        else
            printf("%s %s\n", sid, oid);
        json_object_put(resp);
        return 0;
    }
    /* Print the ids before waiting, so a script keeps them (to delete the
     * sandbox) whatever the wait ends with. */
    if (!cli->json) {
        printf("%s %s\n", sid, oid);
        fflush(stdout);
    }
    json_object *last = NULL;
    rc = wait_operation(cli, oid, o->timeout.set ? o->timeout.v : DEFAULT_WAIT_TIMEOUT, &last);
    if (cli->json) {
        /* The sandbox as it is now (phase, worker, expires_at), else as created. */
        char path[ARG_ID_MAX * 3 + 32];
        json_object *now = NULL, *out = json_object_new_object();
        if (rc != EXIT_API && build_path(path, sizeof path, "/v1/sandboxes/", sid, NULL) == 0) {
            httpc_response_t r;
            if (api_call(cli, "GET", path, NULL, NULL, REQUEST_TIMEOUT_MS, &r) == CALL_OK)
                now = json_object_get(jsonx_get_obj(r.json, "sandbox"));
            httpc_response_release(&r);
        }
        json_object *lop = jsonx_get_obj(last, "operation");
        jsonx_add(out, "sandbox", now ? now : json_object_get(sbx));
        jsonx_add(out, "operation", json_object_get(lop ? lop : op));
        print_json(out);
        json_object_put(out);
    }
    json_object_put(last);
    json_object_put(resp);
    return rc;
}

static int check_op_id(cli_t *cli, opts_t *o)
{
    return check_id(cli->cmd, "OPERATION_ID", o->pos[0]);
}

static int check_sandbox_id(cli_t *cli, opts_t *o)
{
    return check_id(cli->cmd, "SANDBOX_ID", o->pos[0]);
}

static int cmd_wait(cli_t *cli, opts_t *o)
{
    json_object *last = NULL;
    int rc = wait_operation(cli, o->pos[0], o->timeout.set ? o->timeout.v : DEFAULT_WAIT_TIMEOUT, &last);
    if (cli->json && last)
        print_json(last);
    else if (rc == EXIT_OK)
        printf("%s succeeded\n", o->pos[0]);
    json_object_put(last);
    return rc;
}

/* Writes a JSON string's bytes exactly; returns its length. */
static size_t write_stream(FILE *f, json_object *res, const char *field)
{
    json_object *v = NULL;
    if (!json_object_object_get_ex(res, field, &v) || !json_object_is_type(v, json_type_string))
        return 0;
    size_t n = (size_t)json_object_get_string_len(v);
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

static int check_exec(cli_t *cli, opts_t *o)
{
    int rc = check_id(cli->cmd, "SANDBOX_ID", o->pos[0]);
    if (rc)
        return rc;
    if (!o->saw_dashdash || o->cmd_argc == 0)
        return usage_error(cli->cmd, "missing the command: sandbox exec SANDBOX_ID -- ARGV...");
    if (o->cmd_argc > SBX_MAX_ARGV)
        return usage_error(cli->cmd, "the command has %d arguments; at most %d are allowed", o->cmd_argc,
                           SBX_MAX_ARGV);
    size_t total = 0;
    for (int i = 0; i < o->cmd_argc; i++)
        total += strlen(o->cmd_argv[i]) + 1;
    if (total > SBX_MAX_ARGV_BYTES)
        return usage_error(cli->cmd, "the command line is %zu bytes; at most %u are allowed", total,
                           SBX_MAX_ARGV_BYTES);
    if (o->cwd && (strlen(o->cwd) > SBX_MAX_PATH_BYTES || utf8_has_control(o->cwd)))
        return usage_error(cli->cmd, "--cwd: not a usable path");
    return 0;
}

static int cmd_exec(cli_t *cli, opts_t *o)
{
    int rc;
    json_object *body = json_object_new_object();
    json_object *av = json_object_new_array();
    if (!body || !av) {
        json_object_put(body);
        json_object_put(av);
        return EXIT_API;
    }
    for (int i = 0; i < o->cmd_argc; i++)
        json_object_array_add(av, json_object_new_string(o->cmd_argv[i]));
    jsonx_add(body, "argv", av);
    if (o->env)
        jsonx_add(body, "env", json_object_get(o->env));
    if (o->cwd)
        jsonx_add_str(body, "cwd", o->cwd);
    int64_t timeout = o->timeout.set ? o->timeout.v : EXEC_DEFAULT_TIMEOUT_S;
    if (o->timeout.set)
        jsonx_add_int(body, "timeout_seconds", o->timeout.v);
    if (o->max_output.set)
        jsonx_add_int(body, "max_output_bytes", o->max_output.v);

    char path[ARG_ID_MAX * 3 + 32];
    if (build_path(path, sizeof path, "/v1/sandboxes/", o->pos[0], "/exec") != 0) {
        json_object_put(body);
        return usage_error(cli->cmd, "SANDBOX_ID too long");
    }
    json_object *resp = NULL;
    rc = api_get_json(cli, "POST", path, body, NULL, &resp);
    json_object_put(body);
    if (rc)
        return rc;
    const char *oid = jsonx_get_str(jsonx_get_obj(resp, "operation"), "id");
    if (!oid || strlen(oid) > ARG_ID_MAX) {
        fputs("error: bad_response: the exec answer has no operation.id\n", stderr);
        json_object_put(resp);
        return EXIT_API;
    }
    json_object *last = NULL;
    rc = wait_operation(cli, oid, timeout + EXEC_WAIT_SLACK, &last);
    json_object_put(resp);
    if (cli->json && last)
        print_json(last);
    if (rc != EXIT_OK) {
        json_object_put(last);
        return rc;
    }
    json_object *res = jsonx_get_obj(jsonx_get_obj(last, "operation"), "result");
    int64_t code = 0, sig = 0;
    if (!res || !jsonx_get_int(res, "exit_code", &code)) {
        fputs("error: bad_response: the exec operation succeeded without a result.exit_code\n", stderr);
        json_object_put(last);
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
    int ex;
    if (sig > 0 && sig < 128)
        ex = 128 + (int)sig;
    else if (timed_out)
        ex = 128 + 9;
    else if (code >= 0 && code <= 255)
        ex = (int)code;
    else
        ex = 255;
    json_object_put(last);
    return ex;
}

static int cmd_get(cli_t *cli, opts_t *o)
{
    int rc;
    char path[ARG_ID_MAX * 3 + 32];
    if (build_path(path, sizeof path, "/v1/sandboxes/", o->pos[0], NULL) != 0)
        return usage_error(cli->cmd, "SANDBOX_ID too long");
    json_object *resp = NULL;
    if ((rc = api_get_json(cli, "GET", path, NULL, NULL, &resp)) != 0)
        return rc;
    if (cli->json) {
        print_json(resp);
    } else {
        print_sandbox(jsonx_get_obj(resp, "sandbox"));
        json_object *ops = jsonx_get_arr(resp, "operations");
        size_t n = ops ? json_object_array_length(ops) : 0;
        printf("operations:%s\n", n ? "" : "     none");
        for (size_t i = 0; i < n; i++) {
            json_object *op = json_object_array_get_idx(ops, i);
            fputs("  ", stdout);
            put_text(stdout, jsonx_get_str(op, "id"));
            putchar(' ');
            put_text(stdout, jsonx_get_str(op, "kind"));
            putchar(' ');
            put_text(stdout, jsonx_get_str(op, "state"));
            putchar(' ');
            put_text(stdout, jsonx_get_str(op, "created_at"));
            putchar('\n');
            print_op_details(op, 4);
        }
    }
    json_object_put(resp);
    return 0;
}

/* Display width of a cell (bytes; ids and names are ASCII), capped. */
static int cell_width(const char *s)
{
    size_t n = s ? strlen(s) : 1;
    return n > 64 ? 64 : (int)n;
}

static void print_cell(const char *s, int width, bool last)
{
    put_text(stdout, s);
    if (last) {
        putchar('\n');
        return;
    }
    int pad = width - cell_width(s) + 2;
    printf("%*s", pad > 1 ? pad : 1, "");
}

static int cmd_list(cli_t *cli, opts_t *o)
{
    char path[512];
    char *t = o->tenant ? httpc_escape(o->tenant) : NULL;
    if (o->tenant && !t)
        return EXIT_API;
    int w = snprintf(path, sizeof path, "/v1/sandboxes?limit=%lld%s%s%s", (long long)(o->limit.set ? o->limit.v
                                                                                                 : SBX_LIST_DEFAULT),
                     o->all ? "&all=true" : "", t ? "&tenant=" : "", t ? t : "");
    free(t);
    if (w < 0 || (size_t)w >= sizeof path)
        return usage_error(cli->cmd, "--tenant is too long");
    json_object *resp = NULL;
    int rc = api_get_json(cli, "GET", path, NULL, NULL, &resp);
    if (rc)
        return rc;
    json_object *arr = jsonx_get_arr(resp, "sandboxes");
    if (!arr) {
        fputs("error: bad_response: the list answer has no sandboxes array\n", stderr);
        json_object_put(resp);
        return EXIT_API;
    }
    if (cli->json) {
        print_json(resp);
        json_object_put(resp);
        return 0;
    }
    static const char *const heads[] = { "ID", "TENANT", "IMAGE", "PHASE", "WORKER", "AGE" };
    static const char *const fields[] = { "id", "tenant", "image", "phase", "worker" };
    enum { NCOL = 6 };
    int width[NCOL];
    for (int c = 0; c < NCOL; c++)
        width[c] = (int)strlen(heads[c]);
    size_t n = json_object_array_length(arr);
    for (size_t i = 0; i < n; i++) {
        json_object *s = json_object_array_get_idx(arr, i);
        for (int c = 0; c < NCOL - 1; c++) {
            int cw = cell_width(jsonx_get_str(s, fields[c]));
            if (cw > width[c])
                width[c] = cw;
        }
    }
    for (int c = 0; c < NCOL; c++)
        print_cell(heads[c], width[c], c == NCOL - 1);
    for (size_t i = 0; i < n; i++) {
        json_object *s = json_object_array_get_idx(arr, i);
        for (int c = 0; c < NCOL - 1; c++)
            print_cell(jsonx_get_str(s, fields[c]), width[c], false);
        char age[32];
        format_age(age_seconds(jsonx_get_str(s, "created_at")), age, sizeof age);
        print_cell(age, 0, true);
    }
    if (n == 0)
        fputs("sandbox: no sandboxes\n", stderr);
    json_object_put(resp);
    return 0;
}

static int check_delete(cli_t *cli, opts_t *o)
{
    int rc = check_id(cli->cmd, "SANDBOX_ID", o->pos[0]);
    if (rc)
        return rc;
    if (o->timeout.set && !o->wait)
        return usage_error(cli->cmd, "--timeout needs --wait");
    return check_idem_key(cli->cmd, o->idem_key);
}

/* The end of a mutation answered with {"operation":…}: prints its id (or
 * the JSON), or with --wait waits for it and prints 'ID succeeded'. Takes
 * resp. Returns the exit code. */
static int print_or_wait_op(cli_t *cli, opts_t *o, json_object *resp, const char *what)
{
    const char *oid = jsonx_get_str(jsonx_get_obj(resp, "operation"), "id");
    if (!oid || strlen(oid) > ARG_ID_MAX) {
        fprintf(stderr, "error: bad_response: the %s answer has no operation.id\n", what);
        json_object_put(resp);
        return EXIT_API;
    }
    if (!o->wait) {
        print_op_json_or(cli, resp, "\n");
        json_object_put(resp);
        return 0;
    }
    json_object *last = NULL;
    int rc = wait_operation(cli, oid, o->timeout.set ? o->timeout.v : DEFAULT_WAIT_TIMEOUT, &last);
    if (cli->json)
        print_json(last ? last : resp);
    else if (rc == EXIT_OK)
        printf("%s succeeded\n", oid);
    json_object_put(last);
    json_object_put(resp);
    return rc;
}

static int cmd_delete(cli_t *cli, opts_t *o)
{
    int rc;
    char path[ARG_ID_MAX * 3 + 32];
    if (build_path(path, sizeof path, "/v1/sandboxes/", o->pos[0], NULL) != 0)
        return usage_error(cli->cmd, "SANDBOX_ID too long");
    json_object *resp = NULL;
    if ((rc = api_get_json(cli, "DELETE", path, NULL, o->idem_key, &resp)) != 0)
        return rc;
    return print_or_wait_op(cli, o, resp, "delete");
}

static int check_list(cli_t *cli, opts_t *o)
{
    if (o->tenant && (strlen(o->tenant) > SBX_MAX_NAME_BYTES || utf8_has_control(o->tenant)))
        return usage_error(cli->cmd, "--tenant: at most %d printable bytes", SBX_MAX_NAME_BYTES);
    return 0;
}

static int cmd_operation(cli_t *cli, opts_t *o)
{
    int rc;
    char path[ARG_ID_MAX * 3 + 32];
    if (build_path(path, sizeof path, "/v1/operations/", o->pos[0], NULL) != 0)
        return usage_error(cli->cmd, "OPERATION_ID too long");
    json_object *resp = NULL;
    if ((rc = api_get_json(cli, "GET", path, NULL, NULL, &resp)) != 0)
        return rc;
    if (cli->json)
        print_json(resp);
    else
        print_operation(jsonx_get_obj(resp, "operation"));
    json_object_put(resp);
    return 0;
}

/* ---------------------------------------------------------------- tenants, tokens */

/* Prints {"<one>":…} or {"<many>":[…]} a row each (or the JSON). */
static void print_one_or_list(cli_t *cli, json_object *resp, const char *one, const char *many,
                              void (*row)(json_object *))
{
    if (cli->json) {
        print_json(resp);
    } else if (jsonx_get_obj(resp, one)) {
        row(jsonx_get_obj(resp, one));
    } else {
        json_object *arr = jsonx_get_arr(resp, many);
        for (size_t i = 0; arr && i < json_object_array_length(arr); i++)
            row(json_object_array_get_idx(arr, i));
    }
}

static int check_tenants(cli_t *cli, opts_t *o)
{
    const char *sub = o->pos[0];
    if (!sub)
        return usage_error(cli->cmd, "missing subcommand: create, list, get or update");
    if (strcmp(sub, "list") == 0)
        return o->npos == 1 ? 0 : usage_error(cli->cmd, "list takes no argument");
    if (strcmp(sub, "update") == 0 && !o->policy)
        return usage_error(cli->cmd, "update needs --policy JSON");
    if (o->policy && strcmp(sub, "update") != 0)
        return usage_error(cli->cmd, "--policy goes with update");
    if (strcmp(sub, "create") == 0 || strcmp(sub, "get") == 0 || strcmp(sub, "update") == 0) {
        if (o->npos != 2)
            return usage_error(cli->cmd, "%s needs a tenant NAME", sub);
        if (strlen(o->pos[1]) > SBX_MAX_NAME_BYTES || utf8_has_control(o->pos[1]))
            return usage_error(cli->cmd, "NAME: at most %d printable bytes", SBX_MAX_NAME_BYTES);
        return 0;
    }
    return usage_error(cli->cmd, "unknown subcommand '%s' (create, list, get or update)", sub);
}

static void print_tenant_row(json_object *t)
{
    put_text(stdout, jsonx_get_str(t, "name"));
    putchar(' ');
    put_text(stdout, jsonx_get_str(t, "id"));
    putchar(' ');
    put_text(stdout, jsonx_get_str(t, "created_at"));
    putchar('\n');
}

static int cmd_tenants(cli_t *cli, opts_t *o)
{
    int rc;
    json_object *resp = NULL;
    const char *sub = o->pos[0];
    if (strcmp(sub, "create") == 0) {
        json_object *body = json_object_new_object();
        jsonx_add_str(body, "name", o->pos[1]);
        rc = api_get_json(cli, "POST", "/v1/tenants", body, NULL, &resp);
        json_object_put(body);
    } else if (strcmp(sub, "get") == 0 || strcmp(sub, "update") == 0) {
        char path[ARG_ID_MAX * 3 + 32];
        bool update = strcmp(sub, "update") == 0;
        if (build_path(path, sizeof path, "/v1/tenants/", o->pos[1], update ? "/policy" : NULL) != 0)
            return usage_error(cli->cmd, "NAME too long");
        json_object *policy = NULL;
        if (update && jsonx_parse(o->policy, strlen(o->policy), &policy, NULL) < 0)
            return usage_error(cli->cmd, "--policy must be a JSON object");
        rc = api_get_json(cli, update ? "PUT" : "GET", path, policy, NULL, &resp);
        if (policy)
            json_object_put(policy);
    } else {
        rc = api_get_json(cli, "GET", "/v1/tenants", NULL, NULL, &resp);
    }
    if (rc != 0)
        return rc;
    print_one_or_list(cli, resp, "tenant", "tenants", print_tenant_row);
    json_object_put(resp);
    return 0;
}

static int check_tokens(cli_t *cli, opts_t *o)
{
    const char *sub = o->pos[0];
    if (!sub)
        return usage_error(cli->cmd, "missing subcommand: create, list or revoke");
    if (strcmp(sub, "create") == 0) {
        if (o->npos != 1)
            return usage_error(cli->cmd, "create takes flags only");
        if (!o->tenant || !o->role)
            return usage_error(cli->cmd, "create needs --tenant and --role");
        if (strcmp(o->role, "admin") && strcmp(o->role, "member") && strcmp(o->role, "worker"))
            return usage_error(cli->cmd, "--role must be admin, member or worker");
        return 0;
    }
    if (strcmp(sub, "list") == 0)
        return o->npos == 1 ? 0 : usage_error(cli->cmd, "list takes no argument");
    if (strcmp(sub, "revoke") == 0)
        return o->npos == 2 ? check_id(cli->cmd, "TOKEN_ID", o->pos[1]) : usage_error(cli->cmd, "revoke needs a TOKEN_ID");
    return usage_error(cli->cmd, "unknown subcommand '%s' (create, list or revoke)", sub);
}

static void print_token_row(json_object *t)
{
    const char *fields[] = { "id", "tenant", "role", "name", "created_at", "expires_at", "revoked_at" };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        const char *v = jsonx_get_str(t, fields[i]);
        if (i)
            putchar(' ');
        if (i >= 5)
            fputs(i == 5 ? "expires=" : "revoked=", stdout);
        put_text(stdout, v && *v ? v : "-");
    }
    putchar('\n');
}

static int cmd_tokens(cli_t *cli, opts_t *o)
{
    int rc;
    json_object *resp = NULL;
    const char *sub = o->pos[0];
    if (strcmp(sub, "create") == 0) {
        json_object *body = json_object_new_object();
        jsonx_add_str(body, "tenant", o->tenant);
        jsonx_add_str(body, "role", o->role);
        if (o->name)
            jsonx_add_str(body, "name", o->name);
        if (o->ttl.set)
            jsonx_add_int(body, "ttl_seconds", o->ttl.v);
        rc = api_get_json(cli, "POST", "/v1/tokens", body, NULL, &resp);
        json_object_put(body);
        if (rc != 0)
            return rc;
        if (cli->json) {
            print_json(resp);
        } else {
            /* The secret alone on stdout, shown once; the id on stderr. */
            put_text(stdout, jsonx_get_str(resp, "secret"));
            putchar('\n');
            fputs("token id: ", stderr);
            put_text(stderr, jsonx_get_str(jsonx_get_obj(resp, "token"), "id"));
            fputs(" (the secret is shown only now)\n", stderr);
        }
        json_object_put(resp);
        return 0;
    }
    if (strcmp(sub, "revoke") == 0) {
        char path[ARG_ID_MAX * 3 + 32];
        if (build_path(path, sizeof path, "/v1/tokens/", o->pos[1], NULL) != 0)
            return usage_error(cli->cmd, "TOKEN_ID too long");
        rc = api_get_json(cli, "DELETE", path, NULL, NULL, &resp);
    } else {
        char path[SBX_MAX_NAME_BYTES * 3 + 32] = "/v1/tokens";
        if (o->tenant && build_path(path, sizeof path, "/v1/tokens?tenant=", o->tenant, NULL) != 0)
            return usage_error(cli->cmd, "--tenant too long");
        rc = api_get_json(cli, "GET", path, NULL, NULL, &resp);
    }
    if (rc != 0)
        return rc;
    print_one_or_list(cli, resp, "token", "tokens", print_token_row);
    json_object_put(resp);
    return 0;
}

static int check_workers(cli_t *cli, opts_t *o)
{
    const char *sub = o->pos[0];
    if (!sub)
        return usage_error(cli->cmd, "missing subcommand: list, drain or resume");
    if (strcmp(sub, "list") == 0)
        return o->npos == 1 ? 0 : usage_error(cli->cmd, "list takes no argument");
    if (strcmp(sub, "drain") == 0 || strcmp(sub, "resume") == 0) {
        if (o->npos != 2)
            return usage_error(cli->cmd, "%s needs a worker NAME", sub);
        return check_id(cli->cmd, "NAME", o->pos[1]);
    }
    return usage_error(cli->cmd, "unknown subcommand '%s' (list, drain or resume)", sub);
}

static void print_worker_row(json_object *w)
{
    json_object *cap = jsonx_get_obj(w, "capacity"), *al = jsonx_get_obj(w, "allocated");
    int64_t cc = 0, cm = 0, cs = 0, ac = 0, am = 0, as = 0;
    jsonx_get_int(cap, "cpu_millis", &cc);
    jsonx_get_int(cap, "memory_mib", &cm);
    jsonx_get_int(cap, "slots", &cs);
    jsonx_get_int(al, "cpu_millis", &ac);
    jsonx_get_int(al, "memory_mib", &am);
    jsonx_get_int(al, "slots", &as);
    put_text(stdout, jsonx_get_str(w, "name"));
    putchar(' ');
    put_text(stdout, jsonx_get_str(w, "state"));
    printf(" cpu=%lld/%lldm memory=%lld/%lldMiB slots=%lld/%lld heartbeat=", (long long)ac, (long long)cc,
           (long long)am, (long long)cm, (long long)as, (long long)cs);
    put_text(stdout, jsonx_get_str(w, "last_heartbeat"));
    /* Classes with their network modes: container(none,restricted,open) */
    json_object *nets = jsonx_get_obj(w, "networks");
    fputs(" classes=", stdout);
    int nc = 0;
    if (nets) {
        json_object_object_foreach(nets, cls, modes) {
            fputs(nc++ ? "," : "", stdout);
            put_text(stdout, cls);
            putchar('(');
            for (size_t i = 0; json_object_is_type(modes, json_type_array) && i < json_object_array_length(modes); i++) {
                fputs(i ? "+" : "", stdout);
                put_text(stdout, json_object_get_string(json_object_array_get_idx(modes, i)));
            }
            putchar(')');
        }
    }
    if (!nc)
        fputs("none", stdout);
    putchar('\n');
    json_object *probes = jsonx_get_obj(w, "probes");
    if (probes) {
        json_object_object_foreach(probes, pc, pt) {
            fputs("  probe ", stdout);
            put_text(stdout, pc);
            fputs(": ", stdout);
            put_text(stdout, json_object_is_type(pt, json_type_string) ? json_object_get_string(pt) : "?");
            putchar('\n');
        }
    }
}

static int cmd_workers(cli_t *cli, opts_t *o)
{
    int rc;
    json_object *resp = NULL;
    const char *sub = o->pos[0];
    if (strcmp(sub, "list") == 0) {
        rc = api_get_json(cli, "GET", "/v1/workers", NULL, NULL, &resp);
    } else {
        char path[ARG_ID_MAX * 3 + 32];
        if (build_path(path, sizeof path, "/v1/workers/", o->pos[1], strcmp(sub, "drain") == 0 ? "/drain" : "/resume") != 0)
            return usage_error(cli->cmd, "NAME too long");
        rc = api_get_json(cli, "POST", path, NULL, NULL, &resp);
    }
    if (rc != 0)
        return rc;
    print_one_or_list(cli, resp, "worker", "workers", print_worker_row);
    json_object_put(resp);
    return 0;
}

/* ---------------------------------------------------------------- routes */

static int check_share(cli_t *cli, opts_t *o)
{
    int rc = check_id(cli->cmd, "SANDBOX_ID", o->pos[0]);
    if (rc)
        return rc;
    if (!o->port.set)
        return usage_error(cli->cmd, "--port is required");
    if (o->auth && strcmp(o->auth, "token") != 0 && strcmp(o->auth, "public") != 0)
        return usage_error(cli->cmd, "--auth: '%s' is not one of token, public", o->auth);
    if (o->timeout.set && !o->wait)
        return usage_error(cli->cmd, "--timeout needs --wait");
    return check_idem_key(cli->cmd, o->idem_key);
}

static int cmd_share(cli_t *cli, opts_t *o)
{
    int rc;
    char path[ARG_ID_MAX * 3 + 32];
    if (build_path(path, sizeof path, "/v1/sandboxes/", o->pos[0], "/routes") != 0)
        return usage_error(cli->cmd, "SANDBOX_ID too long");
    json_object *body = json_object_new_object();
    jsonx_add_int(body, "port", o->port.v);
    if (o->ttl.set)
        jsonx_add_int(body, "ttl_seconds", o->ttl.v);
    if (o->auth)
        jsonx_add_str(body, "auth", o->auth);
    json_object *resp = NULL;
    rc = api_get_json(cli, "POST", path, body, o->idem_key, &resp);
    json_object_put(body);
    if (rc != 0)
        return rc;
    /* A copy: the wait below replaces the operation object in resp. */
    char oid[ARG_ID_MAX + 1] = "";
    const char *op_id = jsonx_get_str(jsonx_get_obj(resp, "operation"), "id");
    if (op_id && strlen(op_id) <= ARG_ID_MAX)
        snprintf(oid, sizeof oid, "%s", op_id);
    if (o->wait && oid[0]) {
        json_object *last = NULL;
        rc = wait_operation(cli, oid, o->timeout.set ? o->timeout.v : DEFAULT_WAIT_TIMEOUT, &last);
        if (last)
            jsonx_add(resp, "operation", last);
    }
    if (cli->json) {
        print_json(resp);
    } else {
        json_object *route = jsonx_get_obj(resp, "route");
        put_text(stdout, route ? jsonx_get_str(route, "url") : NULL);
        putchar('\n');
        const char *tok = jsonx_get_str(resp, "access_token");
        if (tok) {
            put_text(stdout, tok);
            putchar('\n');
            fputs("sandbox: the second line is the route's access token (send it as 'Authorization: Bearer "
                  "TOKEN'); it is shown only now\n",
                  stderr);
        }
        fputs("route ", stderr);
        put_text(stderr, route ? jsonx_get_str(route, "id") : NULL);
        fputs(", operation ", stderr);
        put_text(stderr, oid[0] ? oid : NULL);
        fputc('\n', stderr);
    }
    json_object_put(resp);
    return rc;
}

static int check_routes(cli_t *cli, opts_t *o) { return check_id(cli->cmd, "SANDBOX_ID", o->pos[0]); }

static int cmd_routes(cli_t *cli, opts_t *o)
{
    int rc;
    char path[ARG_ID_MAX * 3 + 48];
    if (build_path(path, sizeof path, "/v1/sandboxes/", o->pos[0], o->all ? "/routes?all=true" : "/routes") != 0)
        return usage_error(cli->cmd, "SANDBOX_ID too long");
    json_object *resp = NULL;
    if ((rc = api_get_json(cli, "GET", path, NULL, NULL, &resp)) != 0)
        return rc;
    if (cli->json) {
        print_json(resp);
        json_object_put(resp);
        return 0;
    }
    json_object *routes = jsonx_get_arr(resp, "routes");
    size_t n = routes ? json_object_array_length(routes) : 0;
    if (n > 0)
        printf("%-30s %-5s %-6s %-7s %-24s %s\n", "ROUTE", "PORT", "AUTH", "STATE", "EXPIRES", "URL");
    for (size_t i = 0; i < n; i++) {
        json_object *r = json_object_array_get_idx(routes, i);
        int64_t port = 0;
        jsonx_get_int(r, "port", &port);
        const char *fields[] = { jsonx_get_str(r, "id"), NULL, jsonx_get_str(r, "auth"), jsonx_get_str(r, "state"),
                                 jsonx_get_str(r, "expires_at"), jsonx_get_str(r, "url") };
        static const int widths[] = { 30, 5, 6, 7, 24, 0 };
        for (int k = 0; k < 6; k++) {
            char num[16];
            const char *v = fields[k];
            if (k == 1) {
                snprintf(num, sizeof num, "%lld", (long long)port);
                v = num;
            }
            put_text(stdout, v ? v : "-");
            if (widths[k]) {
                int pad = widths[k] - (int)strlen(v ? v : "-");
                printf("%*s", pad > 0 ? pad + 1 : 1, "");
            }
        }
        putchar('\n');
    }
    if (n == 0)
        fputs("sandbox: no routes\n", stderr);
    json_object_put(resp);
    return 0;
}

static int check_unshare(cli_t *cli, opts_t *o)
{
    int rc = check_id(cli->cmd, "SANDBOX_ID", o->pos[0]);
    if (rc == 0)
        rc = check_id(cli->cmd, "ROUTE_ID", o->pos[1]);
    if (rc == 0 && o->timeout.set && !o->wait)
        rc = usage_error(cli->cmd, "--timeout needs --wait");
    return rc;
}

static int cmd_unshare(cli_t *cli, opts_t *o)
{
    int rc;
    char path[ARG_ID_MAX * 6 + 48], suffix[ARG_ID_MAX * 3 + 16];
    char *e = httpc_escape(o->pos[1]);
    if (!e)
        return usage_error(cli->cmd, "out of memory");
    snprintf(suffix, sizeof suffix, "/routes/%s", e);
    free(e);
    if (build_path(path, sizeof path, "/v1/sandboxes/", o->pos[0], suffix) != 0)
        return usage_error(cli->cmd, "SANDBOX_ID too long");
    json_object *resp = NULL;
    if ((rc = api_get_json(cli, "DELETE", path, NULL, NULL, &resp)) != 0)
        return rc;
    return print_or_wait_op(cli, o, resp, "unshare");
}

/* ---------------------------------------------------------------- events */

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
    put_text(stdout, j ? j : "null");
}

/* ID TIMESTAMP KIND [tenant=T] [sandbox=S] [operation=O] key=value… */
static void print_event_line(json_object *e)
{
    int64_t id = 0;
    jsonx_get_int(e, "id", &id);
    printf("%lld ", (long long)id);
    put_text(stdout, jsonx_get_str(e, "ts"));
    putchar(' ');
    put_text(stdout, jsonx_get_str(e, "kind"));
    static const char *const ref[][2] = { { "tenant", "tenant" }, { "sandbox_id", "sandbox" },
                                          { "operation_id", "operation" } };
    for (size_t i = 0; i < 3; i++) {
        const char *v = jsonx_get_str(e, ref[i][0]);
        if (v) {
            printf(" %s=", ref[i][1]);
            put_text(stdout, v);
        }
    }
    json_object *data = jsonx_get_obj(e, "data");
    if (data) {
        json_object_object_foreach(data, k, v) {
            if (!v)
                continue;
            putchar(' ');
            put_text(stdout, k);
            putchar('=');
            print_event_value(v);
        }
    }
    putchar('\n');
}

static int check_events(cli_t *cli, opts_t *o)
{
    if (o->after.set && o->tail.set)
        return usage_error(cli->cmd, "--after and --tail exclude each other");
    if (o->timeout.set && !o->follow)
        return usage_error(cli->cmd, "--timeout needs --follow");
    const char *ids[2][2] = { { "--sandbox", o->sandbox }, { "--operation", o->operation } };
    for (int i = 0; i < 2; i++)
        if (ids[i][1] && (strlen(ids[i][1]) > ARG_ID_MAX || utf8_has_control(ids[i][1])))
            return usage_error(cli->cmd, "%s '%.40s…' is not an id", ids[i][0], ids[i][1]);
    if (o->kind && (strlen(o->kind) > EVENTS_KIND_MAX || utf8_has_control(o->kind)))
        return usage_error(cli->cmd, "--kind: at most %d printable bytes", EVENTS_KIND_MAX);
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

/* Without --follow: every retained event after the cursor (page by page),
 * or the newest --tail N, then exit 0. With --follow: long-polls from the
 * last event seen for ever (or --timeout: 124); connection errors and 5xx
 * answers are retried with backoff from that event, so nothing is missed
 * and nothing printed twice. */
static int cmd_events(cli_t *cli, opts_t *o)
{
    int64_t cursor = o->after.set ? o->after.v : 0;
    int64_t tail_n = o->tail.set ? o->tail.v : (o->follow && !o->after.set ? EVENTS_FOLLOW_TAIL : 0);
    int64_t limit = o->limit.set ? o->limit.v : SBX_LIST_DEFAULT;
    int64_t printed = cursor;
    int64_t deadline = o->timeout.set ? time_mono_ms() + o->timeout.v * 1000 : INT64_MAX;
    int64_t backoff = BACKOFF_START_MS;
    int64_t left = o->count.set ? o->count.v : 0;
    bool outage = false;
    for (;;) {
        int64_t wait = 0;
        if (o->follow) {
            int64_t rem = deadline - time_mono_ms();
            if (rem <= 0) {
                fprintf(stderr, "sandbox: timed out after %lld s following events (last event %lld)\n",
                        (long long)o->timeout.v, (long long)printed);
                return EXIT_TIMEOUT;
            }
            wait = rem / 1000 < POLL_WAIT_MAX ? rem / 1000 : POLL_WAIT_MAX;
        }
        char path[1024];
        if (events_path(path, sizeof path, o, cursor, tail_n, limit, wait) != 0)
            return usage_error(cli->cmd, "a filter is too long");
        httpc_response_t resp;
        call_result_t cr = api_call(cli, "GET", path, NULL, NULL, (long)(wait + 15) * 1000L, &resp);
        if (cr == CALL_OK) {
            int64_t next = cursor;
            int n = events_print(cli, resp.json, &printed, o->count.set ? &left : NULL, &next);
            httpc_response_release(&resp);
            if (n < 0)
                return EXIT_API;
            if (o->count.set && left <= 0)
                return EXIT_OK;
            if (outage) {
                fprintf(stderr, "sandbox: reconnected; continuing after event %lld\n", (long long)cursor);
                outage = false;
            }
            backoff = BACKOFF_START_MS;
            bool was_tail = tail_n > 0;
            cursor = next > cursor || was_tail ? next : cursor;
            tail_n = 0;
            if (!o->follow && (was_tail || n < limit))
                return EXIT_OK;
            continue;
        }
        if (cr == CALL_ERROR || !o->follow) {
            int rc = call_failed(cli, "GET", path, &resp);
            httpc_response_release(&resp);
            return rc;
        }
        if (!outage) {
            fputs("sandbox: ", stderr);
            if (resp.status == 0) {
                fputs("cannot reach ", stderr);
                put_text(stderr, cli->url);
                fputs(": ", stderr);
                put_text(stderr, resp.error[0] ? resp.error : "no response");
            } else {
                put_text(stderr, cli->url);
                fprintf(stderr, " answered HTTP %ld", resp.status);
            }
            fprintf(stderr, "; retrying from event %lld\n", (long long)cursor);
            outage = true;
        }
        httpc_response_release(&resp);
        int64_t left = deadline - time_mono_ms();
        sleep_ms(backoff < left ? backoff : left);
        backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
    }
}

/* ---------------------------------------------------------------- logs */

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
        print_error(code ? code : "error", msg ? msg : "the log stream failed");
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

static int check_logs(cli_t *cli, opts_t *o) { return check_id(cli->cmd, "SANDBOX_ID", o->pos[0]); }

/* Prints the output so far (or the last --tail N lines), and with --follow
 * what comes next until the sandbox stops; Ctrl-C ends it (130). */
static int cmd_logs(cli_t *cli, opts_t *o)
{
    char path[ARG_ID_MAX * 3 + 96];
    if (build_path(path, sizeof path, "/v1/sandboxes/", o->pos[0], "/logs") != 0)
        return usage_error(cli->cmd, "SANDBOX_ID too long");
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
        put_text(stderr, path);
        fputs(": ", stderr);
        put_text(stderr, resp.error);
        fputc('\n', stderr);
        rc = EXIT_API;
    } else if (r < 0 || resp.status < 200 || resp.status >= 300)
        rc = call_failed(cli, "GET", path, &resp);
    httpc_response_release(&resp);
    return rc;
}

/* ---------------------------------------------------------------- tables */

static const flag_def_t create_flags[] = {
    FS("--tenant", tenant),
    FS("--image", image),
    FN("--cpu-millis", cpu_millis, SBX_CPU_MILLIS_MIN, SBX_CPU_MILLIS_MAX),
    FN("--memory-mib", memory_mib, SBX_MEMORY_MIB_MIN, SBX_MEMORY_MIB_MAX),
    FN("--ttl", ttl, SBX_TTL_SECONDS_MIN, SBX_TTL_SECONDS_MAX),
    FS("--network", network),
    FB("--untrusted-repo", untrusted_repo),
    FB("--generated-code", generated_code),
    FB("--hostile", hostile),
    { "--env", F_ENV, 0, 0, 0 },
    { "--label", F_LABEL, 0, 0, 0 },
    { "--selector", F_SELECTOR, 0, 0, 0 },
    FS("--isolation", isolation),
    FB("--read-only-root", read_only_root),
    FB("--hardened", hardened),
    FS("--idempotency-key", idem_key),
    FB("--wait", wait),
    FN("--timeout", timeout, 0, 7 * 24 * 3600),
    FB("--json", json),
    FEND,
};

static const flag_def_t wait_flags[] = {
    FN("--timeout", timeout, 0, 7 * 24 * 3600),
    FB("--json", json),
    FEND,
};

static const flag_def_t exec_flags[] = {
    FN("--timeout", timeout, 1, SBX_EXEC_TIMEOUT_MAX),
    { "--env", F_ENV, 0, 0, 0 },
    FS("--cwd", cwd),
    FN("--max-output", max_output, 1, SBX_EXEC_OUTPUT_CEILING),
    FB("--json", json),
    FEND,
};

static const flag_def_t json_flags[] = {
    FB("--json", json),
    FEND,
};

static const flag_def_t list_flags[] = {
    FS("--tenant", tenant),
    FB("--all", all),
    FN("--limit", limit, 1, SBX_LIST_MAX),
    FB("--json", json),
    FEND,
};

static const flag_def_t delete_flags[] = {
    FS("--idempotency-key", idem_key),
    FB("--wait", wait),
    FN("--timeout", timeout, 0, 7 * 24 * 3600),
    FB("--json", json),
    FEND,
};

static const flag_def_t share_flags[] = {
    FN("--port", port, 1, 65535),
    FN("--ttl", ttl, 10, SBX_TTL_SECONDS_MAX),
    FS("--auth", auth),
    FS("--idempotency-key", idem_key),
    FB("--wait", wait),
    FN("--timeout", timeout, 0, 7 * 24 * 3600),
    FB("--json", json),
    FEND,
};

static const flag_def_t routes_flags[] = {
    FB("--all", all),
    FB("--json", json),
    FEND,
};

static const flag_def_t unshare_flags[] = {
    FB("--wait", wait),
    FN("--timeout", timeout, 0, 7 * 24 * 3600),
    FB("--json", json),
    FEND,
};

static const flag_def_t tenants_flags[] = {
    FS("--policy", policy),
    FB("--json", json),
    FEND,
};

static const flag_def_t events_flags[] = {
    FB("--follow", follow),
    FS("--sandbox", sandbox),
    FS("--operation", operation),
    FS("--kind", kind),
    FN("--after", after, 0, INT64_MAX),
    FN("--tail", tail, 1, SBX_LIST_MAX),
    FN("--limit", limit, 1, SBX_LIST_MAX),
    FN("--count", count, 1, SBX_LIST_MAX),
    FN("--timeout", timeout, 1, 7 * 24 * 3600),
    FB("--json", json),
    FEND,
};

static const flag_def_t logs_flags[] = {
    FBS("--follow", "-f", follow),
    FN("--tail", tail, 0, SBX_LOGS_TAIL_MAX),
    FB("--json", json),
    FEND,
};

static const flag_def_t tokens_flags[] = {
    FS("--tenant", tenant),
    FS("--role", role),
    FS("--name", name),
    FN("--ttl", ttl, 1, 315360000),
    FB("--json", json),
    FEND,
};

#define COMMON_FLAGS_HELP                                                                  \
    "  --url URL                controller URL (else SANDBOX_URL, config file,\n"          \
    "                           http://127.0.0.1:8080)\n"                                  \
    "  --token TOKEN            API token (else SANDBOX_TOKEN, config file)\n"             \
    "  -h, --help               show this help\n"

static const command_t commands[] = {
    { "create", NULL, check_create, cmd_create, create_flags, 0, false,
      "usage: sandbox create [--image IMAGE] [--tenant T] [--cpu-millis N] [--memory-mib N]\n"
      "                      [--ttl SECONDS] [--network none|restricted|open]\n"
      "                      [--untrusted-repo] [--generated-code] [--hostile]\n"
      "                      [--isolation container|gvisor|microvm] [--read-only-root]\n"
      "                      [--hardened] [--selector K=V]...\n"
      "                      [--env K=V]... [--label K=V]... [--idempotency-key K]\n"
      "                      [--wait [--timeout S]] [--json]\n"
      "\n"
      "Creates a sandbox (POST /v1/sandboxes) and prints 'SANDBOX_ID OPERATION_ID'.\n"
      "With --wait the ids are printed at once, then the command waits for the create\n"
      "operation and exits 0 when it succeeded, 1 when it failed, 124 on timeout.\n"
      "\n"
      "  --tenant T               tenant (default: the token's tenant)\n"
      "  --image IMAGE            container image (default: the server's default_image,\n"
      "                           sandbox/busybox:latest unless the operator changed it;\n"
      "                           the tenant policy's images list applies)\n"
      "  --cpu-millis N           CPU in thousandths of a core (default 1000)\n"
      "  --memory-mib N           memory in MiB (default 512)\n"
      "  --ttl SECONDS            lifetime once running (default 3600)\n"
      "  --network MODE           none (default), restricted or open\n"
      "  --untrusted-repo         the code comes from an untrusted repository\n"
      "  --generated-code         the code was generated (e.g. by a model)\n"
      "  --hostile                treat the workload as hostile (strong isolation)\n"
      "  --isolation CLASS        the weakest class you accept; the policy may require\n"
      "                           a stronger one, and nothing is ever run on a weaker\n"
      "                           one (the create fails with isolation_unavailable)\n"
      "  --read-only-root         read-only root filesystem with a writable tmpfs /tmp\n"
      "  --hardened               no Linux capabilities at all (always so for untrusted\n"
      "                           or hostile work)\n"
      "  --selector K=V           run only on a worker with this label (repeatable)\n"
      "  --env K=V                environment variable (repeatable)\n"
      "  --label K=V              label (repeatable)\n"
      "  --idempotency-key K      retrying with the same key returns the same sandbox\n"
      "  --wait                   wait for the create operation to finish\n"
      "  --timeout S              with --wait: give up after S seconds (default 900)\n"
      "  --json                   print the API's JSON; with --wait\n"
      "                           {\"sandbox\":…,\"operation\":…} with the final operation\n" COMMON_FLAGS_HELP },
    { "wait", NULL, check_op_id, cmd_wait, wait_flags, 1, false,
      "usage: sandbox wait OPERATION_ID [--timeout S] [--json]\n"
      "\n"
      "Waits until the operation succeeded, failed or was cancelled, and prints\n"
      "'OPERATION_ID succeeded'. Exits 1 (error on stderr) when it failed or was\n"
      "cancelled, 124 when --timeout passed first. Connection errors are retried\n"
      "until the timeout, so a controller restart does not end the wait.\n"
      "\n"
      "  --timeout S              give up after S seconds (default 900)\n"
      "  --json                   print {\"operation\":…} as last seen\n" COMMON_FLAGS_HELP },
    { "exec", NULL, check_exec, cmd_exec, exec_flags, 1, true,
      "usage: sandbox exec SANDBOX_ID [--timeout S] [--env K=V]... [--cwd DIR]\n"
      "                    [--max-output BYTES] [--json] -- ARGV...\n"
      "\n"
      "Runs ARGV (no shell) in the sandbox, writes its stdout and stderr to this\n"
      "process's stdout and stderr, and exits with its exit code (128+N when killed\n"
      "by signal N; 137 when it timed out).\n"
      "\n"
      "  --timeout S              kill the command after S seconds (default 600)\n"
      "  --env K=V                environment variable (repeatable)\n"
      "  --cwd DIR                working directory\n"
      "  --max-output BYTES       bytes kept per stream (default: the server's)\n"
      "  --json                   print {\"operation\":…} with the result instead of the\n"
      "                           output; still exit with the command's code\n" COMMON_FLAGS_HELP },
    { "get", NULL, check_sandbox_id, cmd_get, json_flags, 1, false,
      "usage: sandbox get SANDBOX_ID [--json]\n"
      "\n"
      "Shows a sandbox and its latest operations.\n"
      "\n"
      "  --json                   print {\"sandbox\":…,\"operations\":[…]}\n" COMMON_FLAGS_HELP },
    { "list", "ls", check_list, cmd_list, list_flags, 0, false,
      "usage: sandbox list [--tenant T] [--all] [--limit N] [--json]\n"
      "\n"
      "Lists sandboxes, newest first: ID TENANT IMAGE PHASE WORKER AGE.\n"
      "\n"
      "  --tenant T               only this tenant's (admin tokens)\n"
      "  --all                    include deleted sandboxes\n"
      "  --limit N                at most N (default 100, at most 1000)\n"
      "  --json                   print {\"sandboxes\":[…]}\n" COMMON_FLAGS_HELP },
    { "delete", "rm", check_delete, cmd_delete, delete_flags, 1, false,
      "usage: sandbox delete SANDBOX_ID [--idempotency-key K] [--wait [--timeout S]] [--json]\n"
      "\n"
      "Deletes a sandbox and prints the delete OPERATION_ID; with --wait, waits for it\n"
      "and prints 'OPERATION_ID succeeded'.\n"
      "\n"
      "  --idempotency-key K      retrying with the same key returns the same operation\n"
      "  --wait                   wait for the delete operation to finish\n"
      "  --timeout S              with --wait: give up after S seconds (default 900)\n"
      "  --json                   print {\"operation\":…}\n" COMMON_FLAGS_HELP },
    { "share", NULL, check_share, cmd_share, share_flags, 1, false,
      "usage: sandbox share SANDBOX_ID --port PORT [--ttl SECONDS] [--auth token|public]\n"
      "                     [--idempotency-key K] [--wait [--timeout S]] [--json]\n"
      "\n"
      "Gives a port of a running sandbox a public address (POST /v1/sandboxes/ID/routes)\n"
      "and prints its URL; for --auth token (the default) a second line holds the\n"
      "access token, shown only now; the route id and the operation id go to stderr.\n"
      "Callers reach the app through the controller's route listener (docs/api.md,\n"
      "\"The route listener\"), with the token as 'Authorization: Bearer sbr_...' or\n"
      "'X-Sandbox-Route-Token: sbr_...':\n"
      "  curl -H \"Authorization: Bearer sbr_...\" URL\n"
      "The route is removed with unshare, when --ttl passes, or when the sandbox stops\n"
      "running. Refused with conflict for a sandbox that is not running or runs under\n"
      "gvisor, with policy_denied when the tenant policy has routes: false.\n"
      "\n"
      "  --port PORT              the port inside the sandbox (required)\n"
      "  --ttl SECONDS            remove the route after this (default: with the sandbox)\n"
      "  --auth token|public      token: callers need the access token (default);\n"
      "                           public: anyone with the URL\n"
      "  --idempotency-key K      retrying with the same key returns the same route\n"
      "                           (without the access token)\n"
      "  --wait                   wait for the share operation\n"
      "  --timeout S              with --wait: give up after S seconds (default 900)\n"
      "  --json                   print {\"operation\":…,\"route\":…,\"access_token\":…}\n" COMMON_FLAGS_HELP },
    { "routes", NULL, check_routes, cmd_routes, routes_flags, 1, false,
      "usage: sandbox routes SANDBOX_ID [--all] [--json]\n"
      "\n"
      "Lists the sandbox's routes: ROUTE PORT AUTH STATE EXPIRES URL.\n"
      "\n"
      "  --all                    include removed routes\n"
      "  --json                   print {\"routes\":[…]}\n" COMMON_FLAGS_HELP },
    { "unshare", NULL, check_unshare, cmd_unshare, unshare_flags, 2, false,
      "usage: sandbox unshare SANDBOX_ID ROUTE_ID [--wait [--timeout S]] [--json]\n"
      "\n"
      "Removes a route (an unshare operation) and prints its OPERATION_ID; with --wait,\n"
      "waits for it and prints 'OPERATION_ID succeeded'.\n"
      "\n"
      "  --wait                   wait for the unshare operation\n"
      "  --timeout S              with --wait: give up after S seconds (default 900)\n"
      "  --json                   print {\"operation\":…}\n" COMMON_FLAGS_HELP },
    { "operation", "op", check_op_id, cmd_operation, json_flags, 1, false,
      "usage: sandbox operation OPERATION_ID [--json]\n"
      "       sandbox op OPERATION_ID [--json]\n"
      "\n"
      "Shows an operation: kind, state, error, placement and exec result summary.\n"
      "\n"
      "  --json                   print {\"operation\":…}\n" COMMON_FLAGS_HELP },
    { "events", NULL, check_events, cmd_events, events_flags, 0, false,
      "usage: sandbox events [--follow] [--sandbox ID] [--operation ID] [--kind K]\n"
      "                     [--after ID | --tail N] [--limit N] [--count N] [--timeout S] [--json]\n"
      "\n"
      "Prints events (GET /v1/events), oldest first, one line each:\n"
      "  ID TIMESTAMP KIND [tenant=T] [sandbox=ID] [operation=ID] key=value...\n"
      "Without --follow: every retained event after --after (default: all), or the\n"
      "newest --tail N, then exits 0. With --follow: keeps printing new events as\n"
      "they happen (starting with the newest 10 unless --after or --tail says\n"
      "otherwise); a lost connection or a restarting controller is retried from the\n"
      "last event printed (a note on stderr), so nothing is missed or printed twice.\n"
      "A member token sees its tenant's events, an admin token every event.\n"
      "\n"
      "  --follow                 wait for new events (like tail -f)\n"
      "  --sandbox ID             only this sandbox's events\n"
      "  --operation ID           only this operation's events\n"
      "  --kind K                 only this kind (sandbox.running), or a prefix\n"
      "                           ending in . or .* (operation.*)\n"
      "  --after ID               start after event ID (0: the oldest retained)\n"
      "  --tail N                 start with the newest N events (at most 1000)\n"
      "  --limit N                events per request (default 100, at most 1000)\n"
      "  --count N                exit 0 once N events are printed (with --follow:\n"
      "                           wait for them, e.g. --kind sandbox.failed --count 1)\n"
      "  --timeout S              with --follow: stop after S seconds, exit 124\n"
      "  --json                   one JSON object per line (JSON Lines)\n" COMMON_FLAGS_HELP },
    { "logs", NULL, check_logs, cmd_logs, logs_flags, 1, false,
      "usage: sandbox logs SANDBOX_ID [--follow|-f] [--tail N] [--json]\n"
      "\n"
      "Prints what the sandbox's main process wrote (GET /v1/sandboxes/ID/logs): its\n"
      "stdout to stdout and its stderr to stderr, as it arrives. Without --follow:\n"
      "the output so far (at most 1 MiB; a note on stderr when cut), then exits 0.\n"
      "With --follow: keeps printing until the sandbox stops or is deleted (exit 0)\n"
      "or Ctrl-C (exit 130). Once the container is gone, the tail the controller\n"
      "kept is printed (stdout and stderr merged). A sandbox that has not started\n"
      "yet is a conflict error (exit 3).\n"
      "\n"
      "  --follow, -f             keep streaming new output (like tail -f)\n"
      "  --tail N                 only the last N lines (0: none, only new output)\n"
      "  --json                   print the API's NDJSON lines as received:\n"
      "                           {\"stream\":\"stdout\"|\"stderr\"|\"output\",\"data\":…}\n" COMMON_FLAGS_HELP },
    { "tenants", NULL, check_tenants, cmd_tenants, tenants_flags, 2, false,
      "usage: sandbox tenants create NAME [--json]\n"
      "       sandbox tenants list [--json]\n"
      "       sandbox tenants get NAME [--json]\n"
      "       sandbox tenants update NAME --policy JSON [--json]\n"
      "\n"
      "Creates (admin token), lists or shows tenants: NAME ID CREATED. A member\n"
      "token sees only its own tenant. update replaces the tenant's policy (admin).\n"
      "\n"
      "  --policy JSON            e.g. '{\"max_sandboxes\":5,\"max_cpu_millis\":2000,\n"
      "                           \"images\":[\"sandbox/*\",\"registry.local/*\"],\n"
      "                           \"network_modes\":[\"none\"]}'\n"
      "                           (see docs/api.md for every field)\n"
      "  --json                   print the API's JSON\n" COMMON_FLAGS_HELP },
    { "workers", NULL, check_workers, cmd_workers, json_flags, 2, false,
      "usage: sandbox workers list [--json]\n"
      "       sandbox workers drain NAME [--json]\n"
      "       sandbox workers resume NAME [--json]\n"
      "\n"
      "Lists workers (admin token): NAME STATE cpu/memory/slots allocated of capacity,\n"
      "last heartbeat and the isolation classes offered with their network modes, then\n"
      "one '  probe CLASS: RESULT' line per class probed (why gvisor is offered or not).\n"
      "drain stops new placements on a worker (its sandboxes live out\n"
      "their TTL and can still exec and be deleted); resume places on it again.\n"
      "\n"
      "  --json                   print the API's JSON\n" COMMON_FLAGS_HELP },
    { "tokens", NULL, check_tokens, cmd_tokens, tokens_flags, 2, false,
      "usage: sandbox tokens create --tenant T --role admin|member|worker [--name N] [--ttl SECONDS] [--json]\n"
      "       sandbox tokens list [--tenant T] [--json]\n"
      "       sandbox tokens revoke TOKEN_ID [--json]\n"
      "\n"
      "Manages API tokens (admin token). create prints the new secret alone on\n"
      "stdout, once (its id on stderr); the server keeps only its hash. list shows\n"
      "ID TENANT ROLE NAME CREATED expires= revoked= (never secrets). A revoked or\n"
      "expired token is refused at once.\n"
      "\n"
      "  --tenant T               the token's tenant (must exist: sandbox tenants create)\n"
      "  --role ROLE              admin (everything), member (its tenant's sandboxes),\n"
      "                           worker (worker endpoints only)\n"
      "  --name N                 a label for people\n"
      "  --ttl SECONDS            expire after SECONDS (default: never)\n"
      "  --json                   print the API's JSON\n" COMMON_FLAGS_HELP },
};

#define NCOMMANDS (sizeof commands / sizeof commands[0])

static const char top_usage[] =
    "usage: sandbox [--url URL] [--token TOKEN] COMMAND [ARGS...]\n"
    "\n"
    "Commands:\n"
    "  create     create a sandbox            (sandbox create --wait)\n"
    "  wait       wait for an operation       (sandbox wait OPERATION_ID)\n"
    "  exec       run a command in a sandbox  (sandbox exec SANDBOX_ID -- ls -l)\n"
    "  get        show a sandbox\n"
    "  list, ls   list sandboxes\n"
    "  delete, rm delete a sandbox\n"
    "  operation, op  show an operation\n"
    "  share      give a sandbox port an address  (sandbox share SANDBOX_ID --port 8080)\n"
    "  routes     list a sandbox's routes\n"
    "  unshare    remove a route\n"
    "  events     print or follow events      (sandbox events --follow --sandbox ID)\n"
    "  logs       print or follow a sandbox's output (sandbox logs SANDBOX_ID -f)\n"
    "  tenants    create, list, get tenants; update their policy\n"
    "  tokens     create, list, revoke API tokens\n"
    "  workers    list, drain, resume workers\n"
    "  help [COMMAND] show help\n"
    "  version    print the version\n"
    "\n"
    "Global flags (also accepted after the command):\n" COMMON_FLAGS_HELP
    "  --version                print the version\n"
    "\n"
    "Configuration: --url/--token, else SANDBOX_URL/SANDBOX_TOKEN, else\n"
    "$XDG_CONFIG_HOME/sandbox/config (~/.config/sandbox/config) with lines\n"
    "'url = …' and 'token = …'.\n"
    "\n"
    "Exit codes: 0 success; 1 operation failed or cancelled; 2 usage error;\n"
    "3 API or connection error; 124 --timeout elapsed. exec exits with the\n"
    "command's own code. See 'sandbox COMMAND --help'.\n";

static const command_t *command_find(const char *name)
{
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0 || (commands[i].alias && strcmp(commands[i].alias, name) == 0))
            return &commands[i];
    return NULL;
}

/* True when -h/--help appears before any "--". */
static bool wants_help(int argc, char **argv, int first)
{
    for (int i = first; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            return false;
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0)
            return true;
    }
    return false;
}

int main(int argc, char **argv)
{
    /* Global flags before the command. */
    opts_t o;
    memset(&o, 0, sizeof o);
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(top_usage, stdout);
            return EXIT_OK;
        }
        if (strcmp(a, "--version") == 0) {
            printf("sandbox %s\n", SBX_VERSION);
            return EXIT_OK;
        }
        const char *eq = strchr(a, '=');
        size_t nl = eq ? (size_t)(eq - a) : strlen(a);
        const flag_def_t *f = flag_find(global_flags, a, nl);
        if (!f)
            return usage_error(NULL, "unknown flag '%.*s'", (int)nl, a);
        const char **t = (const char **)(void *)((char *)&o + f->off);
        const char *val = eq ? eq + 1 : (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0 ? argv[++i] : NULL);
        if (!val || !*val)
            return usage_error(NULL, "%s needs a value", f->name);
        if (*t)
            return usage_error(NULL, "%s given more than once", f->name);
        *t = val;
    }
    if (i >= argc) {
        fputs(top_usage, stderr);
        return EXIT_USAGE;
    }
    const char *name = argv[i];
    if (strcmp(name, "help") == 0) {
        if (i + 1 >= argc) {
            fputs(top_usage, stdout);
            return EXIT_OK;
        }
        const command_t *hc = command_find(argv[i + 1]);
        if (!hc)
            return usage_error(NULL, "unknown command '%s'", argv[i + 1]);
        fputs(hc->usage, stdout);
        return EXIT_OK;
    }
    if (strcmp(name, "version") == 0) {
        printf("sandbox %s\n", SBX_VERSION);
        return EXIT_OK;
    }
    const command_t *c = command_find(name);
    if (!c)
        return usage_error(NULL, "unknown command '%s'", name);
    if (wants_help(argc, argv, i + 1)) {
        fputs(c->usage, stdout);
        return EXIT_OK;
    }

    cli_t cli;
    memset(&cli, 0, sizeof cli);
    cli.cmd = c->name;
    int rc = parse_args(c, argc, argv, i + 1, &o);
    cli.json = o.json;
    /* Everything that needs no server is checked before looking for a token. */
    if (rc == 0)
        rc = c->check(&cli, &o);
    if (rc == 0)
        rc = cli_connect(&cli, &o);
    if (rc == 0) {
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
            fputs("sandbox: cannot initialise libcurl\n", stderr);
            rc = EXIT_API;
        } else {
            rc = c->run(&cli, &o);
            fflush(stdout);
            httpc_free(cli.http);
            cli.http = NULL;
            curl_global_cleanup();
        }
    }
    httpc_free(cli.http);
    free(cli.url);
    free(cli.token);
    json_object_put(o.env);
    json_object_put(o.labels);
    json_object_put(o.selector);
    return rc;
}
