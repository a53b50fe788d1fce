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

#include "cli.h"
#include "clientcfg.h"
#include "errors.h"
#include "httpc.h"
#include "jsonx.h"
#include "limits.h"
#include "spec.h"
#include "utf8.h"
#include "version.h"

/* ---------------------------------------------------------------- flags */

#define FB(n, f)        { n, F_BOOL, offsetof(opts_t, f), 0, 0 }
#define FS(n, f)        { n, F_STR, offsetof(opts_t, f), 0, 0 }
#define FN(n, f, lo, hi) { n, F_NUM, offsetof(opts_t, f), lo, hi }
#define FBS(n, s, f)    { n, F_BOOL, offsetof(opts_t, f), 0, 0, s }
#define FKV(n, k)       { n, k, 0, 0, 0 }
#define FSS(n, s, f)    { n, F_STR, offsetof(opts_t, f), 0, 0, s }
#define FKVS(n, s, k)   { n, k, 0, 0, 0, s }
#define FL(n, f, max)   { n, F_STRLIST, offsetof(opts_t, f), 0, max }
#define FJSON           FB("--json", json)
#define FWAIT           FB("--wait", wait), FN("--timeout", timeout, 0, CLI_WAIT_TIMEOUT_MAX)
#define FEND            { NULL, F_BOOL, 0, 0, 0 }
/* A command's flags, inside its row of commands[]. */
#define FLAGS(...)      ((const flag_def_t[]){ __VA_ARGS__, FEND })

/* Accepted by every command. */
static const flag_def_t global_flags[] = {
    FS("--url", url),
    FS("--token", token),
    FS("--ca-file", ca_file),
    FS("--context", context),
    FEND,
};

/* ---------------------------------------------------------------- messages */

int cli_usage_error(const char *cmd, const char *fmt, ...)
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
        return cli_usage_error(cmd, "%s: '%s' is not a whole number", flag, s);
    errno = 0;
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (errno == ERANGE || !end || *end != '\0' || v < min || v > max)
        return cli_usage_error(cmd, "%s: %s is out of range (%lld to %lld)", flag, s, (long long)min, (long long)max);
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
        return cli_usage_error(cmd, "%s: '%s' is not KEY=VALUE", flag, s);
    size_t kl = (size_t)(eq - s);
    if (kl == 0)
        return cli_usage_error(cmd, "%s: '%s' has an empty key", flag, s);
    if (kl > SBX_MAX_KEY_BYTES)
        return cli_usage_error(cmd, "%s: key longer than %d bytes", flag, SBX_MAX_KEY_BYTES);
    if (env ? !env_key_valid(s, kl) : !label_key_valid(s, kl))
        return cli_usage_error(cmd, "%s: key '%.*s' is not valid (%s)", flag, (int)kl, s,
                           env ? "letters, digits and _, not starting with a digit" : "letters, digits and . _ / -");
    if (strlen(eq + 1) > SBX_MAX_VALUE_BYTES)
        return cli_usage_error(cmd, "%s: value of '%.*s' is longer than %d bytes", flag, (int)kl, s, SBX_MAX_VALUE_BYTES);
    if (!*target) {
        *target = json_object_new_object();
        if (!*target)
            return cli_usage_error(cmd, "out of memory");
    }
    char key[SBX_MAX_KEY_BYTES + 1];
    memcpy(key, s, kl);
    key[kl] = '\0';
    size_t max = env ? SBX_MAX_ENV : SBX_MAX_LABELS;
    if (!json_object_object_get_ex(*target, key, NULL) && (size_t)json_object_object_length(*target) >= max)
        return cli_usage_error(cmd, "%s: at most %zu are allowed", flag, max);
    jsonx_add_str(*target, key, eq + 1);
    return 0;
}

/* Adds "VOLUME:/path[:ro|:rw]" to the array *target (created on first
 * use) as {"volume","path","read_only"}. */
static int parse_volume(const char *cmd, const char *flag, const char *s, json_object **target)
{
    const char *colon = strchr(s, ':');
    if (!colon || colon == s || colon[1] != '/')
        return cli_usage_error(cmd, "%s: '%.80s' is not VOLUME:/path[:ro]", flag, s);
    char vol[SBX_SANDBOX_NAME_MAX + 8], path[SPEC_VOLUME_PATH_MAX + 8], why[96];
    size_t vl = (size_t)(colon - s);
    const char *p = colon + 1, *mode = strrchr(p, ':');
    size_t pl = mode ? (size_t)(mode - p) : strlen(p);
    bool ro = false;
    if (mode && strcmp(mode, ":ro") != 0 && strcmp(mode, ":rw") != 0)
        return cli_usage_error(cmd, "%s: '%.80s' ends in '%.16s': the mode is :ro or :rw", flag, s, mode);
    ro = mode && strcmp(mode, ":ro") == 0;
    if (vl >= sizeof vol || pl >= sizeof path)
        return cli_usage_error(cmd, "%s: '%.80s' is too long", flag, s);
    memcpy(vol, s, vl);
    vol[vl] = '\0';
    memcpy(path, p, pl);
    path[pl] = '\0';
    if (!spec_volume_ref_ok(vol))
        return cli_usage_error(cmd, "%s: '%s' is not a volume id (vol_...) or name", flag, vol);
    if (!spec_volume_path_ok(path, why, sizeof why))
        return cli_usage_error(cmd, "%s: the path %.80s %s", flag, path, why);
    if (!*target && !(*target = json_object_new_array()))
        return cli_usage_error(cmd, "out of memory");
    if (json_object_array_length(*target) >= SPEC_VOLUMES_MAX)
        return cli_usage_error(cmd, "%s: at most %d are allowed", flag, SPEC_VOLUMES_MAX);
    json_object *v = json_object_new_object();
    jsonx_add_str(v, "volume", vol);
    jsonx_add_str(v, "path", path);
    jsonx_add_bool(v, "read_only", ro);
    json_object_array_add(*target, v);
    return 0;
}

/* --allow/--deny DOMAIN: appended to (*target)'s "allow" or "deny" list,
 * checked as the server checks it (egress_domain_canon). */
static int parse_egress(const char *cmd, const char *flag, const char *s, bool deny, json_object **target)
{
    char canon[EGRESS_DOMAIN_MAX + 1], why[160];
    if (egress_domain_canon(s, canon, why, sizeof why) < 0)
        return cli_usage_error(cmd, "%s: '%.80s': %s", flag, s, why);
    if (!*target && !(*target = json_object_new_object()))
        return cli_usage_error(cmd, "out of memory");
    const char *key = deny ? "deny" : "allow";
    json_object *a = jsonx_get_arr(*target, key);
    if (!a) {
        a = json_object_new_array();
        jsonx_add(*target, key, a);
    }
    if (json_object_array_length(a) >= EGRESS_ENTRIES_MAX)
        return cli_usage_error(cmd, "%s: at most %d are allowed", flag, EGRESS_ENTRIES_MAX);
    json_object_array_add(a, json_object_new_string(canon));
    return 0;
}

/* --udp PORT: appended to (*target)'s "udp" list, checked as the server
 * checks it. */
static int parse_udp(const char *cmd, const char *flag, const char *s, json_object **target)
{
    char *end = NULL;
    long port = strtol(s, &end, 10);
    if (!*s || *end || port < 1 || port > 65535 || port == 53)
        return cli_usage_error(cmd, "%s: '%.40s' is not a port from 1 to 65535 other than 53", flag, s);
    if (!*target && !(*target = json_object_new_object()))
        return cli_usage_error(cmd, "out of memory");
    json_object *a = jsonx_get_arr(*target, "udp");
    if (!a) {
        a = json_object_new_array();
        jsonx_add(*target, "udp", a);
    }
    if (json_object_array_length(a) >= EGRESS_UDP_MAX)
        return cli_usage_error(cmd, "%s: at most %d are allowed", flag, EGRESS_UDP_MAX);
    json_object_array_add(a, json_object_new_int((int)port));
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
                    return cli_usage_error(c->name, "unexpected argument '%s'", argv[i]);
                o->pos[o->npos++] = argv[i];
            }
            return 0;
        }
        if (a[0] != '-' || a[1] == '\0') {
            if (o->npos >= c->max_pos) {
                if (c->takes_argv)
                    return cli_usage_error(c->name, "unexpected argument '%s' (put the command after '--')", a);
                return cli_usage_error(c->name, "unexpected argument '%s'", a);
            }
            o->pos[o->npos++] = a;
            continue;
        }
        const char *eq = NULL;
        size_t nl;
        const flag_def_t *f;
        if (a[1] != '-') {
            /* a short flag (-e K=V, -w DIR, -f): docker's and kubectl's */
            f = c->flags;
            while (f->name && !(f->short_name && strcmp(f->short_name, a) == 0))
                f++;
            if (!f->name && strlen(a) > 2) {
                /* switches together, docker's -it: each one a short flag without a value */
                const flag_def_t *each[8];
                size_t k = 0, len = strlen(a);
                for (size_t j = 1; j < len && k < 8; j++) {
                    char one[3] = { '-', a[j], '\0' };
                    const flag_def_t *g = c->flags;
                    while (g->name && !(g->short_name && strcmp(g->short_name, one) == 0))
                        g++;
                    if (!g->name || g->kind != F_BOOL)
                        break;
                    each[k++] = g;
                }
                if (k == len - 1) {
                    for (size_t j = 0; j < k; j++)
                        *(bool *)((char *)o + each[j]->off) = true;
                    continue;
                }
            }
            if (!f->name)
                return cli_usage_error(c->name, "unknown flag '%s'", a);
        } else {
            eq = strchr(a, '=');
            nl = eq ? (size_t)(eq - a) : strlen(a);
            f = flag_find(c->flags, a, nl);
            if (!f)
                f = flag_find(global_flags, a, nl);
            if (!f)
                return cli_usage_error(c->name, "unknown flag '%.*s'", (int)nl, a);
        }
        if (f->kind == F_BOOL) {
            if (eq)
                return cli_usage_error(c->name, "%s takes no value", f->name);
            *(bool *)((char *)o + f->off) = true;
            continue;
        }
        const char *val;
        if (eq) {
            val = eq + 1;
        } else {
            if (i + 1 >= argc || strncmp(argv[i + 1], "--", 2) == 0)
                return cli_usage_error(c->name, "%s needs a value", f->name);
            val = argv[++i];
        }
        int r = 0;
        switch (f->kind) {
        case F_STR: {
            const char **t = (const char **)(void *)((char *)o + f->off);
            if (*t)
                return cli_usage_error(c->name, "%s given more than once", f->name);
            if (!*val)
                return cli_usage_error(c->name, "%s needs a non-empty value", f->name);
            *t = val;
            break;
        }
        case F_NUM: {
            num_opt_t *t = (num_opt_t *)(void *)((char *)o + f->off);
            if (t->set)
                return cli_usage_error(c->name, "%s given more than once", f->name);
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
        case F_BUILD_ARG:
            if (!strchr(val, '=')) {
                /* --build-arg K: K's value here, as docker build takes it (not set: not given) */
                const char *ev = env_key_valid(val, strlen(val)) && strlen(val) <= SBX_MAX_KEY_BYTES ? getenv(val)
                                                                                                     : NULL;
                if (!ev)
                    break;
                char kv[SBX_MAX_KEY_BYTES + SBX_MAX_VALUE_BYTES + 2];
                if (strlen(ev) > SBX_MAX_VALUE_BYTES)
                    return cli_usage_error(c->name, "%s: the value of %s is longer than %d bytes", f->name, val,
                                           SBX_MAX_VALUE_BYTES);
                snprintf(kv, sizeof kv, "%s=%s", val, ev);
                r = parse_kv(c->name, f->name, kv, true, &o->build_args);
                break;
            }
            r = parse_kv(c->name, f->name, val, true, &o->build_args);
            break;
        case F_VOLUME:
            r = parse_volume(c->name, f->name, val, &o->volumes);
            break;
        case F_STRLIST: { /* checked by the command */
            json_object **t = (json_object **)(void *)((char *)o + f->off);
            if (!*t)
                *t = json_object_new_array();
            if (json_object_array_length(*t) >= (size_t)f->max)
                return cli_usage_error(c->name, "%s: at most %lld", f->name, (long long)f->max);
            json_object_array_add(*t, json_object_new_string(val));
            break;
        }
        case F_ALLOW:
        case F_DENY:
            r = parse_egress(c->name, f->name, val, f->kind == F_DENY, &o->egress);
            break;
        case F_UDP:
            r = parse_udp(c->name, f->name, val, &o->egress);
            break;
        case F_EXCLUDE:
            if (o->n_excludes >= CLI_EXCLUDES_MAX)
                return cli_usage_error(c->name, "%s given more than %d times", f->name, CLI_EXCLUDES_MAX);
            if (!*val || strlen(val) > CLI_EXCLUDE_MAX_BYTES || utf8_has_control(val))
                return cli_usage_error(c->name, "%s needs a pattern of at most %d printable bytes", f->name,
                                       CLI_EXCLUDE_MAX_BYTES);
            o->excludes[o->n_excludes++] = val;
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
int cli_check_id(const char *cmd, const char *what, const char *id)
{
    if (!id)
        return cli_usage_error(cmd, "missing %s", what);
    if (strlen(id) > CLI_ARG_ID_MAX || utf8_has_control(id))
        return cli_usage_error(cmd, "%s '%.40s…' is not an id", what, id);
    return 0;
}

int cli_check_name(const char *cmd, const char *flag, const char *v)
{
    if (v && (strlen(v) > SBX_MAX_NAME_BYTES || utf8_has_control(v)))
        return cli_usage_error(cmd, "%s: at most %d printable bytes", flag, SBX_MAX_NAME_BYTES);
    return 0;
}

int cli_check_idem_key(const char *cmd, const char *k)
{
    if (!k)
        return 0;
    bool ok = strlen(k) <= CLI_IDEM_KEY_MAX;
    for (const char *p = k; ok && *p; p++)
        ok = (unsigned char)*p >= 0x21 && (unsigned char)*p <= 0x7e;
    if (!ok)
        return cli_usage_error(cmd, "--idempotency-key: 1 to %d printable ASCII characters, no spaces",
                               CLI_IDEM_KEY_MAX);
    return 0;
}

int cli_check_subcommand(cli_t *cli, const opts_t *o, const char *names)
{
    if (!o->pos[0])
        return cli_usage_error(cli->cmd, "missing subcommand: %s", names);
    if (strcmp(o->pos[0], "list") == 0)
        return o->npos == 1 ? 0 : cli_usage_error(cli->cmd, "list takes no argument");
    return -1;
}

int cli_check_timeout_wait(const char *cmd, const opts_t *o)
{
    return o->timeout.set && !o->wait ? cli_usage_error(cmd, "--timeout needs --wait") : 0;
}

/* ---------------------------------------------------------------- config */

/* Resolves URL and token (common/clientcfg.c: flag, then environment, then
 * config file, then the default URL) and opens the HTTP client. Returns 0
 * or an exit code. */
static int cli_connect(cli_t *cli, const opts_t *o)
{
    client_config_t cc;
    char err[512];
    int r = client_config_resolve(o->url, o->token, o->context, &cc, err, sizeof err);
    for (int i = 0; i < 2; i++)
        if (cc.warnings[i][0])
            fprintf(stderr, "sandbox: warning: %s\n", cc.warnings[i]);
    if (r < 0) {
        client_config_release(&cc);
        return cli_usage_error(NULL, "%s", err);
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
    r = httpc_new(cli->url, cli->token, &cli->http);
    if (r == 0)
        r = httpc_set_ca_file(cli->http, o->ca_file ? o->ca_file : cc.ca_file);
    client_config_release(&cc);
    if (r < 0) {
        fprintf(stderr, "sandbox: cannot set up the HTTP client for %s: %s\n", cli->url, sbx_strerror(r));
        return EXIT_API;
    }
    cli->client = (client_t){ .http = cli->http, .url = cli->url };
    return 0;
}

/* ---------------------------------------------------------------- API calls */
/* ---------------------------------------------------------------- tables */

#define COMMON_FLAGS_HELP                                                                  \
    "  --url URL                controller URL (else SANDBOX_URL, config file,\n"          \
    "                           http://127.0.0.1:8080)\n"                                  \
    "  --token TOKEN            API token (else SANDBOX_TOKEN, config file)\n"             \
    "  --ca-file FILE           PEM CA an https URL is verified against (else\n"          \
    "                           SANDBOX_CA_FILE, config file 'ca_file', system CAs)\n"  \
    "  --context NAME           the config file's [context NAME] (else SANDBOX_CONTEXT,\n" \
    "                           the file's 'context = NAME'; sandbox context --help)\n" \
    "  -h, --help               show this help\n"

static const command_t commands[] = {
    { "create", NULL, cli_check_create, cli_cmd_create, FLAGS(
            FS("--name", name), FS("--tenant", tenant), FS("--image", image),
            FN("--cpu-millis", cpu_millis, SBX_CPU_MILLIS_MIN, SBX_CPU_MILLIS_MAX),
            FN("--memory-mib", memory_mib, SBX_MEMORY_MIB_MIN, SBX_MEMORY_MIB_MAX),
            FN("--disk", disk_mib, SBX_DISK_MIB_MIN, SBX_DISK_MIB_MAX),
            FN("--ttl", ttl, SBX_TTL_SECONDS_MIN, SBX_TTL_SECONDS_MAX), FS("--network", network),
            FB("--untrusted-repo", untrusted_repo), FB("--generated-code", generated_code),
            FB("--hostile", hostile), FKVS("--env", "-e", F_ENV), FKVS("--label", "-l", F_LABEL),
            FKV("--selector", F_SELECTOR), FS("--isolation", isolation),
            FB("--read-only-root", read_only_root), FB("--hardened", hardened),
            FS("--idempotency-key", idem_key), FS("--upload", upload), FKV("--exclude", F_EXCLUDE),
            FB("--no-ignore", no_ignore), FS("--from", from), FS("--template", template_ref),
            FB("--auto-pause", auto_pause), FKVS("--volume", "-v", F_VOLUME), FKV("--allow", F_ALLOW),
            FKV("--deny", F_DENY), FKV("--udp", F_UDP), FS("--egress-default", egress_default),
            FL("--secret", secrets, 8), FWAIT, FJSON), 0, false,
      "usage: sandbox create [--name NAME] [--image IMAGE] [--tenant T] [--cpu-millis N]\n"
      "                      [--memory-mib N] [--disk MIB] [--ttl SECONDS] [--auto-pause]\n"
      "                      [--network none|restricted|open] [--from SNAPSHOT]\n"
      "                      [--allow DOMAIN]... [--deny DOMAIN]... [--udp PORT]...\n"
      "                      [--egress-default allow|deny] [--secret NAME]...\n"
      "                      [--template NAME[:VERSION]]\n"
      "                      [--untrusted-repo] [--generated-code] [--hostile]\n"
      "                      [--isolation container|gvisor|microvm] [--read-only-root]\n"
      "                      [--hardened] [--selector K=V]... [-v VOLUME:/path[:ro]]...\n"
      "                      [-e K=V]... [-l K=V]... [--idempotency-key K]\n"
      "                      [--upload LOCAL:/path [--exclude PATTERN]... [--no-ignore]]\n"
      "                      [--wait [--timeout S]] [--json]\n"
      "\n"
      "Creates a sandbox (POST /v1/sandboxes) and prints 'SANDBOX_ID OPERATION_ID'.\n"
      "With --wait the ids are printed at once, then the command waits for the create\n"
      "operation and exits 0 when it succeeded, 1 when it failed, 124 on timeout.\n"
      "\n"
      "  --name NAME              a name for the sandbox, usable wherever its id is\n"
      "                           (exec NAME, cp NAME:/path, rm NAME); unique in the\n"
      "                           tenant until the sandbox is deleted\n"
      "  --tenant T               tenant (default: the token's tenant)\n"
      "  --image IMAGE            container image (default: the server's default_image,\n"
      "                           sandbox/busybox:latest unless the operator changed it;\n"
      "                           the tenant policy's images list applies)\n"
      "  --from SNAPSHOT          start with a ready snapshot's files (sandbox snapshot)\n"
      "                           over its image: --image may be left out (another image\n"
      "                           is refused); placed on the worker holding the snapshot,\n"
      "                           (a microvm's snapshot starts a microvm; a container's\n"
      "                           starts a microvm too when the sandbox needs one)\n"
      "  --template NAME[:VERSION]\n"
      "                           start from a template's newest ready version (or that\n"
      "                           VERSION): its files, and its ENV, WORKDIR and USER as\n"
      "                           the defaults of every exec (-e adds, wins by name);\n"
      "                           --image may be left out; not with --from (sandbox\n"
      "                           templates --help)\n"
      "  -v, --volume VOLUME:/path[:ro]\n"
      "                           mount a volume (sandbox volumes --help) at /path,\n"
      "                           read-write (one sandbox at a time) or :ro (shared by\n"
      "                           read-only mounts); placed on the worker it lives on\n"
      "                           (a microvm gets it as a disk and boots cold)\n"
      "                           (repeatable, at most 8)\n"
      "  --cpu-millis N           CPU in thousandths of a core (default 1000)\n"
      "  --memory-mib N           memory in MiB (default 512)\n"
      "  --disk MIB               disk quota in MiB (default: the server's default_disk_mib,\n"
      "                           1024); over it the sandbox fails with disk_quota_exceeded\n"
      "  --ttl SECONDS            lifetime once running (default 3600)\n"
      "  --auto-pause             when its TTL passes the sandbox is paused (files and\n"
      "                           routes kept; sandbox resume runs it again with its\n"
      "                           whole TTL) instead of deleted (docs/pause.md)\n"
      "  --network MODE           none (default), restricted or open\n"
      "  --allow DOMAIN           with --network open: egress rules by domain; reach\n"
      "                           DOMAIN (example.com, or *.example.com for every name\n"
      "                           below it) and, without --egress-default, nothing else;\n"
      "                           within the tenant's rules (repeatable; docs/network.md)\n"
      "  --deny DOMAIN            refuse DOMAIN (wins over --allow); given alone: all\n"
      "                           but the denied (repeatable)\n"
      "  --udp PORT               UDP other than DNS (QUIC: 443) may go to PORT at an\n"
      "                           address the worker's resolver gave for an allowed\n"
      "                           name; without it none goes out (repeatable, at most 16)\n"
      "  --egress-default MODE    allow or deny what neither list names\n"
      "  --secret NAME            with egress rules: the tenant's secret NAME (sandbox\n"
      "                           secrets --help) is added to requests to its hosts by\n"
      "                           the worker's filter, never seen inside the sandbox\n"
      "                           (repeatable, at most 8)\n"
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
      "  -e, --env K=V            environment variable (repeatable)\n"
      "  -l, --label K=V          label (repeatable)\n"
      "  --idempotency-key K      retrying with the same key returns the same sandbox\n"
      "  --upload LOCAL:/path     once it runs, make /path a copy of the local file or\n"
      "                           directory (as sandbox cp; implies --wait); when the\n"
      "                           upload fails the sandbox stays and the exit code says why.\n"
      "                           Left out: .git (and other VCS folders), what .gitignore\n"
      "                           files list, and --exclude's patterns\n"
      "  --exclude PATTERN        with --upload: leave out files matching PATTERN, a GNU\n"
      "                           tar pattern ('*.log', 'node_modules') (repeatable)\n"
      "  --no-ignore              with --upload: send .git and .gitignore'd files too\n"
      "  --wait                   wait for the create operation to finish\n"
      "  --timeout S              with --wait: give up after S seconds (default 900)\n"
      "  --json                   print the API's JSON; with --wait\n"
      "                           {\"sandbox\":…,\"operation\":…} with the final operation\n" COMMON_FLAGS_HELP },
    { "wait", NULL, cli_check_op_id, cli_cmd_wait, FLAGS(
            FN("--timeout", timeout, 0, CLI_WAIT_TIMEOUT_MAX), FJSON), 1, false,
      "usage: sandbox wait OPERATION_ID [--timeout S] [--json]\n"
      "\n"
      "Waits until the operation succeeded, failed or was cancelled, and prints\n"
      "'OPERATION_ID succeeded'. Exits 1 (error on stderr) when it failed or was\n"
      "cancelled, 124 when --timeout passed first. Connection errors are retried\n"
      "until the timeout, so a controller restart does not end the wait.\n"
      "\n"
      "  --timeout S              give up after S seconds (default 900)\n"
      "  --json                   print {\"operation\":…} as last seen\n" COMMON_FLAGS_HELP },
    { "exec", NULL, cli_check_exec, cli_cmd_exec, FLAGS(
            FN("--timeout", timeout, 1, SBX_EXEC_TIMEOUT_MAX), FKVS("--env", "-e", F_ENV), FSS("--cwd", "-w", cwd),
            FS("--workdir", cwd), FSS("--user", "-u", exec_user),
            FN("--max-output", max_output, 1, SBX_EXEC_OUTPUT_CEILING), FBS("--stdin", "-i", interactive),
            FBS("--tty", "-t", tty), FB("--detach", detach), FJSON), 1, true,
      "usage: sandbox exec SANDBOX [-i] [-t] [--detach] [--timeout S] [-e K=V]... [-w DIR]\n"
      "                    [-u USER] [--max-output BYTES] [--json] -- ARGV...\n"
      "\n"
      "Runs ARGV (no shell) in the sandbox, writes its stdout and stderr to this\n"
      "process's stdout and stderr (exactly, bytes that are not text included), and\n"
      "exits with its exit code (128+N when killed by signal N; 137 when it timed out).\n"
      "Without -i the command's stdin is empty.\n"
      "\n"
      "  --detach                 start it and print its OPERATION_ID at once (see\n"
      "                           sandbox output, sandbox cancel); --timeout may be\n"
      "                           up to 86400 s (the server's exec_timeout_max_seconds)\n"
      "  -i, --stdin              send this process's stdin to the command: up to\n"
      "                           524288 bytes inline (read to EOF first); more is\n"
      "                           streamed as it is read, over a shell connection with\n"
      "                           no terminal (then not with --json or --detach)\n"
      "  -t, --tty                on a pseudo-terminal, interactively, as sandbox shell\n"
      "                           (-it, docker's habit): stdin is sent, a terminal\n"
      "                           stdin is put in raw mode; not with --detach, --json,\n"
      "                           --timeout or --max-output\n"
      "  --timeout S              kill the command after S seconds (default 600)\n"
      "  -e, --env K=V            environment variable (repeatable)\n"
      "  -w, --cwd, --workdir DIR working directory\n"
      "  -u, --user USER[:GROUP]  run as that user (a name or id; default: the image's,\n"
      "                           a template's USER); container and gvisor only\n"
      "  --max-output BYTES       bytes kept per stream (default: the server's)\n"
      "  --json                   print {\"operation\":…} with the result instead of the\n"
      "                           output; still exit with the command's code\n" COMMON_FLAGS_HELP },
    { "output", NULL, cli_check_op_id, cli_cmd_output, FLAGS(FBS("--follow", "-f", follow),
            FN("--timeout", timeout, 1, CLI_WAIT_TIMEOUT_MAX), FJSON), 1, false,
      "usage: sandbox output OPERATION_ID [--follow] [--timeout S] [--json]\n"
      "\n"
      "Prints an exec's output (GET /v1/operations/{id}/output): its stdout and\n"
      "stderr to this process's, exactly, as far as it is now. With --follow keeps\n"
      "printing until the command ends (reconnecting after a lost connection).\n"
      "Once the command has ended, exits with its exit code (as sandbox exec does;\n"
      "1 when the operation failed or was cancelled); while it still runs, exits 0\n"
      "(124 when --timeout passed while following).\n"
      "\n"
      "  -f, --follow             print new output until the command ends\n"
      "  --timeout S              with --follow: give up after S seconds (default 900)\n"
      "  --json                   print {\"chunks\":[…],\"next_offset\",\"done\",\"operation\"}\n"
      "                           (operation once it ended) instead of the output\n" COMMON_FLAGS_HELP },
    { "cancel", NULL, cli_check_op_id, cli_cmd_cancel, FLAGS(FJSON), 1, false,
      "usage: sandbox cancel OPERATION_ID [--json]\n"
      "\n"
      "Cancels an exec (POST /v1/operations/{id}/cancel): one not yet running ends\n"
      "cancelled at once; a running one has its process tree killed by its worker\n"
      "within a heartbeat or two and then ends cancelled (its output so far kept).\n"
      "Prints 'OPERATION_ID STATE' (cancelled, or running while the kill is on its\n"
      "way; sandbox wait OPERATION_ID waits for the end). Another kind of operation,\n"
      "or one that already ended: conflict (exit 3).\n"
      "\n"
      "  --json                   print {\"operation\":…}\n" COMMON_FLAGS_HELP },
    { "get", NULL, cli_check_sandbox_id, cli_cmd_get, FLAGS(FJSON), 1, false,
      "usage: sandbox get SANDBOX [--json]\n"
      "\n"
      "Shows a sandbox and its latest operations. A paused sandbox has a line\n"
      "'paused: since TIME, memory kept: yes|no, TTL left: N s' (sandbox pause).\n"
      "\n"
      "  --json                   print {\"sandbox\":…,\"operations\":[…]}\n" COMMON_FLAGS_HELP },
    { "list", "ls", cli_check_list, cli_cmd_list, FLAGS(
            FS("--tenant", tenant), FB("--all", all), FN("--limit", limit, 1, SBX_LIST_MAX),
            FS("--after", cursor), FKVS("--label", "-l", F_LABEL), FS("--phase", phase),
            FBS("--quiet", "-q", quiet), FJSON), 0, false,
      "usage: sandbox list [--tenant T] [--all] [-l K=V]... [--phase P[,P]] [-q] [--limit N]\n"
      "                    [--after CURSOR] [--json]\n"
      "\n"
      "Lists sandboxes, newest first: ID TENANT IMAGE PHASE WORKER AGE. When more\n"
      "follow, the last line (on stderr) is 'next: --after CURSOR': the same command\n"
      "with that flag shows the next page.\n"
      "\n"
      "  --tenant T               only this tenant's (admin tokens)\n"
      "  --all                    include deleted sandboxes\n"
      "  -l, --label K=V          only sandboxes with this label (repeatable: all of them)\n"
      "  --phase P[,P]            only sandboxes in these phases (pending, scheduled,\n"
      "                           provisioning, running, paused, deleting, deleted,\n"
      "                           failed, lost)\n"
      "  -q, --quiet              the ids only, one per line\n"
      "  --limit N                at most N per page (default 100, at most 1000)\n"
      "  --after CURSOR           the page after a previous answer's next\n"
      "  --json                   print {\"sandboxes\":[…],\"next\":CURSOR|null}\n" COMMON_FLAGS_HELP },
    { "delete", "rm", cli_check_delete, cli_cmd_delete, FLAGS(
            FS("--idempotency-key", idem_key), FKVS("--label", "-l", F_LABEL), FS("--tenant", tenant), FWAIT,
            FJSON), CLI_POS_MAX, false,
      "usage: sandbox delete SANDBOX... [--idempotency-key K] [--wait [--timeout S]] [--json]\n"
      "       sandbox delete -l K=V... [--tenant T] [--wait [--timeout S]] [--json]\n"
      "\n"
      "Deletes sandboxes and prints each delete's OPERATION_ID; with --wait, waits for\n"
      "each and prints 'OPERATION_ID succeeded'. When one fails the others are still\n"
      "deleted, and the exit code is the first failure's.\n"
      "\n"
      "  -l, --label K=V          every sandbox with this label (repeatable: all of them),\n"
      "                           not deleting or deleted already\n"
      "  --tenant T               with --label: only this tenant's (admin tokens)\n"
      "  --idempotency-key K      (one SANDBOX) retrying with the same key returns the\n"
      "                           same operation\n"
      "  --wait                   wait for the delete operation to finish\n"
      "  --timeout S              with --wait: give up after S seconds (default 900)\n"
      "  --json                   print {\"operation\":…}\n" COMMON_FLAGS_HELP },
    { "extend", NULL, cli_check_extend, cli_cmd_extend, FLAGS(
            FN("--ttl", ttl, SBX_EXTEND_TTL_SECONDS_MIN, SBX_TTL_SECONDS_MAX), FS("--idempotency-key", idem_key),
            FJSON), 1, false,
      "usage: sandbox extend SANDBOX --ttl SECONDS [--idempotency-key K] [--json]\n"
      "\n"
      "Sets when a sandbox expires: SECONDS from now, not from its old expiry, so it\n"
      "can shorten a lifetime as well as lengthen it (POST /v1/sandboxes/ID/extend).\n"
      "Prints the new expiry (UTC, e.g. 2026-12-01T10:00:00.000Z). A sandbox that is\n"
      "not running yet gets SECONDS as its TTL, counted from when it starts: '-' is\n"
      "printed, with a note on stderr. The change is an extend operation, finished\n"
      "before the command returns ('sandbox get' lists it; the event sandbox.extended\n"
      "says the old and the new expiry).\n"
      "\n"
      "Exits 0 when extended; 1 (policy_denied) when SECONDS is over the tenant\n"
      "policy's max_ttl_seconds or the server's ceiling, the message naming which;\n"
      "3 when there is no such sandbox (not_found) or it is being deleted, deleted,\n"
      "failed or lost (conflict); 2 for a usage error.\n"
      "\n"
      "  --ttl SECONDS            the sandbox expires SECONDS from now (1 to 2592000;\n"
      "                           required)\n"
      "  --idempotency-key K      retrying with the same key returns the same operation\n"
      "                           and moves the expiry only once\n"
      "  --json                   print {\"operation\":…}; its result has expires_at,\n"
      "                           previous_expires_at and ttl_seconds\n" COMMON_FLAGS_HELP },
    { "network", NULL, cli_check_network, cli_cmd_network,
      FLAGS(FKV("--allow", F_ALLOW), FKV("--deny", F_DENY), FKV("--udp", F_UDP),
            FS("--egress-default", egress_default),
            FS("--idempotency-key", idem_key), FB("--log", netlog), FS("--verdict", verdict),
            FN("--after", after, 0, INT64_MAX), FN("--limit", limit, 1, SBX_LIST_MAX), FWAIT, FJSON), 1, false,
      "usage: sandbox network SANDBOX [--allow DOMAIN]... [--deny DOMAIN]...\n"
      "                       [--udp PORT]... [--egress-default allow|deny]\n"
      "                       [--idempotency-key K]\n"
      "                       [--wait [--timeout S]] [--json]\n"
      "       sandbox network SANDBOX --log [--verdict allowed|refused] [--after ID]\n"
      "                       [--limit N] [--json]\n"
      "\n"
      "Without flags, prints the sandbox's egress rules (allow, deny, udp, default), as\n"
      "'sandbox get' has them. With flags, replaces them on the running sandbox\n"
      "(PATCH /v1/sandboxes/ID/network) and prints the change's OPERATION_ID; with\n"
      "--wait, waits for it and prints 'OPERATION_ID succeeded'. Its worker's egress\n"
      "filter applies the new rules at once: new connections and DNS queries meet\n"
      "them, and open connections they refuse are closed. The rules stay within the\n"
      "tenant policy's egress (the tenant's denies are kept). Only a sandbox created\n"
      "with egress rules (create --allow/--deny) can change them: its network is the\n"
      "worker's filtered one. The rules replace the old ones whole: give every\n"
      "domain the sandbox still needs. See docs/network.md.\n"
      "\n"
      "With --log, prints its network log (GET /v1/sandboxes/ID/network/log), oldest\n"
      "first: each DNS query, TCP connection and UDP flow its worker's filter saw, one\n"
      "line each: ID, time, dns, tcp or udp, allowed or refused, the name (:port), the\n"
      "address, the rule or reason and, for what it relayed, the bytes out and in.\n"
      "Workers report every heartbeat (5 s); each sandbox keeps its newest 2000.\n"
      "\n"
      "  --allow DOMAIN           reach DOMAIN (example.com, or *.example.com for every\n"
      "                           name below it) and, without --egress-default,\n"
      "                           nothing else; repeatable\n"
      "  --deny DOMAIN            refuse DOMAIN (wins over --allow); given alone: all\n"
      "                           but the denied; repeatable\n"
      "  --udp PORT               UDP other than DNS (QUIC: 443) may go to PORT at an\n"
      "                           address the resolver gave for an allowed name;\n"
      "                           repeatable\n"
      "  --egress-default MODE    allow or deny what neither list names\n"
      "  --idempotency-key K      retrying with the same key returns the same operation\n"
      "  --wait                   wait for the change to be applied\n"
      "  --timeout S              with --wait: give up after S seconds (default 900)\n"
      "  --log                    print its network log instead\n"
      "  --verdict V              with --log: allowed or refused entries only\n"
      "  --after ID               with --log: entries after this id (a previous\n"
      "                           answer's next_after)\n"
      "  --limit N                with --log: at most N entries (1 to 1000, default 100)\n"
      "  --json                   print {\"egress\":…} (no flags), {\"operation\":…} or\n"
      "                           {\"entries\":[…],\"next_after\":ID} (--log)\n"
      "\n"
      "Exit codes: 0 done (with --wait: applied); 1 the operation failed, or\n"
      "policy_denied (a domain the tenant does not allow); 2 usage; 3 an API error\n"
      "(conflict: not running, created without rules, or a change of it in progress;\n"
      "unavailable: its worker is away; not_found); 124 --timeout passed.\n" COMMON_FLAGS_HELP },
    { "pause", NULL, cli_check_pause, cli_cmd_pause, FLAGS(FS("--idempotency-key", idem_key), FWAIT, FJSON), 1,
      false,
      "usage: sandbox pause SANDBOX [--idempotency-key K] [--wait [--timeout S]]\n"
      "                     [--json]\n"
      "\n"
      "Pauses a running sandbox (POST /v1/sandboxes/ID/pause) and prints the pause's\n"
      "OPERATION_ID; with --wait, waits for it and prints 'OPERATION_ID succeeded'.\n"
      "A pause stops the sandbox's processes and keeps its files, its routes and its\n"
      "place on the worker (its CPU, memory and slot stay reserved there and count\n"
      "against the tenant's quotas, so a resume never waits for room). Its phase is\n"
      "then paused and its TTL clock stops: 'sandbox get' shows the seconds it has\n"
      "left, and it is not deleted by its TTL. While it is paused its routes answer\n"
      "503, and exec, cp and shell are refused (conflict) until 'sandbox resume'.\n"
      "On container and gvisor the memory is not kept: the main process starts again\n"
      "on resume, and a process a command left running is gone (the operation's\n"
      "result says \"memory\": false, and a note on stderr says so). A microvm\n"
      "sandbox's VM is frozen: its memory and processes are kept (\"memory\": true).\n"
      "\n"
      "  --idempotency-key K      retrying with the same key returns the same operation\n"
      "  --wait                   wait for the pause operation to finish\n"
      "  --timeout S              with --wait: give up after S seconds (default 900)\n"
      "  --json                   print {\"operation\":…}; with --wait the final one, its\n"
      "                           result {\"memory\":false}\n"
      "\n"
      "Exit codes: 0 done (with --wait: paused); 1 the operation failed, or\n"
      "isolation_unavailable (a class that cannot pause); 2 usage; 3 an API error (conflict:\n"
      "not running, already paused, or a pause or resume of it in progress;\n"
      "unavailable: its worker is away; not_found); 124 --timeout passed.\n" COMMON_FLAGS_HELP },
    { "resume", NULL, cli_check_pause, cli_cmd_pause, FLAGS(FS("--idempotency-key", idem_key), FWAIT, FJSON), 1,
      false,
      "usage: sandbox resume SANDBOX [--idempotency-key K] [--wait [--timeout S]]\n"
      "                      [--json]\n"
      "\n"
      "Runs a paused sandbox again (POST /v1/sandboxes/ID/resume) and prints the\n"
      "resume's OPERATION_ID; with --wait, waits for it and prints 'OPERATION_ID\n"
      "succeeded'. It runs with the same id, files and routes on the same worker,\n"
      "its phase running again and its TTL going on from what it had left (it\n"
      "expires that many seconds after the resume). Where the pause kept no memory\n"
      "(container, gvisor) its main process starts again. A resume whose container\n"
      "does not start fails with the reason, and the sandbox stays paused (resume it\n"
      "again, or delete it).\n"
      "\n"
      "  --idempotency-key K      retrying with the same key returns the same operation\n"
      "  --wait                   wait for the resume operation to finish\n"
      "  --timeout S              with --wait: give up after S seconds (default 900)\n"
      "  --json                   print {\"operation\":…}; with --wait the final one\n"
      "\n"
      "Exit codes: 0 done (with --wait: running); 1 the operation failed; 2 usage;\n"
      "3 an API error (conflict: not paused, or a pause or resume of it in progress;\n"
      "unavailable: its worker is away; not_found); 124 --timeout passed.\n" COMMON_FLAGS_HELP },
    { "snapshot", NULL, cli_check_snapshot, cli_cmd_snapshot, FLAGS(
            FS("--name", name), FS("--idempotency-key", idem_key), FB("--memory", memory), FWAIT, FJSON), 1, false,
      "usage: sandbox snapshot SANDBOX [--name NAME] [--memory] [--idempotency-key K]\n"
      "                        [--wait [--timeout S]] [--json]\n"
      "\n"
      "Saves a running sandbox's files as a snapshot (POST /v1/sandboxes/ID/snapshots)\n"
      "and prints 'SNAPSHOT_ID OPERATION_ID'. A snapshot operation on the sandbox's\n"
      "worker makes it; it is pending until that succeeds, then ready. 'sandbox create\n"
      "--from SNAPSHOT' starts sandboxes with those files over the snapshot's image, on\n"
      "that worker. Kept: the root filesystem as the sandbox left it; not kept: memory,\n"
      "processes, a tmpfs /tmp (a microvm: its disk, synced and frozen for the copy;\n"
      "its sandboxes boot as microvms), unless --memory. With --wait the\n"
      "ids are printed at once, then the command waits for the operation and exits 0\n"
      "when it succeeded, 1 when it failed, 124 on timeout. 'sandbox snapshots' lists,\n"
      "shows and deletes snapshots.\n"
      "\n"
      "  --name NAME              a name for the snapshot, usable wherever its id is\n"
      "                           (create --from NAME, snapshots get NAME): 1 to 63\n"
      "                           letters, digits, _, . or -, unique in the tenant\n"
      "  --memory                 a microvm without volumes: save the whole VM, its\n"
      "                           memory and processes too; a sandbox from it with the\n"
      "                           same cpu, memory and disk resumes them (its create's\n"
      "                           operation says memory: true) instead of booting\n"
      "  --idempotency-key K      retrying with the same key returns the same snapshot\n"
      "  --wait                   wait for the snapshot operation to finish\n"
      "  --timeout S              with --wait: give up after S seconds (default 900)\n"
      "  --json                   print the API's JSON, {\"operation\":…,\"snapshot\":…};\n"
      "                           with --wait the snapshot as it is then (ready, with\n"
      "                           size_bytes) and the final operation\n"
      "\n"
      "Exit codes: 0 done (with --wait: the snapshot is ready); 1 the operation failed,\n"
      "or refused by policy (quota_exceeded: over the tenant's max_snapshots or\n"
      "max_snapshot_mib; policy_denied: snapshots are off); 2 usage; 3 an API error\n"
      "(invalid_argument: --memory of a sandbox that is not a microvm or has volumes;\n"
      "conflict: the sandbox is not running, or the name is taken; unavailable: its\n"
      "worker is away; not_found); 124 --timeout passed.\n" COMMON_FLAGS_HELP },
    { "fork", NULL, cli_check_fork, cli_cmd_fork, FLAGS(
            FN("--count", count, 1, CLI_FORK_MAX), FS("--name-prefix", name_prefix),
            FB("--keep-snapshot", keep_snapshot), FB("--no-memory", no_memory), FWAIT, FJSON), 1, false,
      "usage: sandbox fork SANDBOX [--count K] [--name-prefix P] [--keep-snapshot]\n"
      "                    [--no-memory] [--wait [--timeout S]] [--json]\n"
      "\n"
      "Starts K sandboxes with a running sandbox's files as they are now, to try K\n"
      "variants side by side, and prints 'SANDBOX_ID OPERATION_ID' for each as its\n"
      "create is accepted (as create does). Not one API call: this command makes\n"
      "three kinds of them. (1) An unnamed snapshot of SANDBOX (as sandbox snapshot),\n"
      "waited for until it is ready. (2) K creates from it (as create --from) with\n"
      "SANDBOX's cpu, memory, disk, TTL, network, isolation class (as the weakest\n"
      "accepted), trust flags, hardening, read-only root, labels and tenant; its env\n"
      "is not copied (the API never shows it). (3) The snapshot deleted once every\n"
      "create has ended: a create that has not started its container yet still\n"
      "needs it, so the command waits for the creates even without --wait (quietly),\n"
      "unless --keep-snapshot. The forks run on SANDBOX's worker. A microvm without\n"
      "volumes is snapshotted with its memory (snapshot --memory): each fork resumes\n"
      "its processes where they were. Otherwise memory and processes are not copied\n"
      "(each fork's main process starts afresh).\n"
      "\n"
      "  --count K                how many sandboxes (1 to 32, default 1)\n"
      "  --name-prefix P          name them P-1 ... P-K (sandbox names: create --name)\n"
      "  --no-memory              a microvm's files only: each fork boots\n"
      "  --keep-snapshot          keep the snapshot, its id on stderr ('sandbox: fork:\n"
      "                           kept snapshot SNAPSHOT_ID'); the command then returns\n"
      "                           once the creates are accepted, unless --wait\n"
      "  --wait                   wait for every create; exit 0 only when all succeeded\n"
      "  --timeout S              with --wait: give up after S seconds in all, the\n"
      "                           snapshot's wait included (default 900)\n"
      "  --json                   print {\"snapshot\":…,\"sandboxes\":[{\"sandbox\":…,\n"
      "                           \"operation\":…}…]} at the end (with --wait, each sandbox\n"
      "                           as it is then and its final operation)\n"
      "\n"
      "When one create is refused or fails the others are still made, and the exit\n"
      "code is the first failure's. A snapshot that a fork may still need (a wait that\n"
      "timed out) is kept, its id on stderr.\n"
      "\n"
      "Exit codes: 0 done (with --wait: every fork runs); 1 the snapshot or a create\n"
      "failed, or refused by policy (quota_exceeded: the tenant's snapshots or\n"
      "sandboxes); 2 usage; 3 an API error\n"
      "(conflict: SANDBOX is not running, or a name is taken; unavailable: its worker\n"
      "is away; not_found); 124 --timeout passed.\n" COMMON_FLAGS_HELP },
    { "share", NULL, cli_check_share, cli_cmd_share, FLAGS(
            FN("--port", port, 1, 65535), FN("--ttl", ttl, 10, SBX_TTL_SECONDS_MAX), FS("--auth", auth),
            FS("--idempotency-key", idem_key), FWAIT, FJSON), 1, false,
      "usage: sandbox share SANDBOX --port PORT [--ttl SECONDS] [--auth token|public]\n"
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
    { "routes", NULL, cli_check_sandbox_id, cli_cmd_routes, FLAGS(FB("--all", all), FJSON), 1, false,
      "usage: sandbox routes SANDBOX [--all] [--json]\n"
      "\n"
      "Lists the sandbox's routes: ROUTE PORT AUTH STATE EXPIRES URL.\n"
      "\n"
      "  --all                    include removed routes\n"
      "  --json                   print {\"routes\":[…]}\n" COMMON_FLAGS_HELP },
    { "unshare", NULL, cli_check_unshare, cli_cmd_unshare, FLAGS(FWAIT, FJSON), 2, false,
      "usage: sandbox unshare SANDBOX ROUTE_ID [--wait [--timeout S]] [--json]\n"
      "\n"
      "Removes a route (an unshare operation) and prints its OPERATION_ID; with --wait,\n"
      "waits for it and prints 'OPERATION_ID succeeded'.\n"
      "\n"
      "  --wait                   wait for the unshare operation\n"
      "  --timeout S              with --wait: give up after S seconds (default 900)\n"
      "  --json                   print {\"operation\":…}\n" COMMON_FLAGS_HELP },
    { "operation", "op", cli_check_op_id, cli_cmd_operation, FLAGS(FJSON), 1, false,
      "usage: sandbox operation OPERATION_ID [--json]\n"
      "       sandbox op OPERATION_ID [--json]\n"
      "\n"
      "Shows an operation: kind, state, error, placement and exec result summary.\n"
      "\n"
      "  --json                   print {\"operation\":…}\n" COMMON_FLAGS_HELP },
    { "events", NULL, cli_check_events, cli_cmd_events, FLAGS(
            FB("--follow", follow), FS("--sandbox", sandbox), FS("--operation", operation), FS("--kind", kind),
            FN("--after", after, 0, INT64_MAX), FN("--tail", tail, 1, SBX_LIST_MAX),
            FN("--limit", limit, 1, SBX_LIST_MAX), FN("--count", count, 1, SBX_LIST_MAX),
            FN("--timeout", timeout, 1, CLI_WAIT_TIMEOUT_MAX), FJSON), 0, false,
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
    { "logs", NULL, cli_check_sandbox_id, cli_cmd_logs, FLAGS(
            FBS("--follow", "-f", follow), FN("--tail", tail, 0, SBX_LOGS_TAIL_MAX), FJSON), 1, false,
      "usage: sandbox logs SANDBOX [--follow|-f] [--tail N] [--json]\n"
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
    { "shell", NULL, cli_check_shell, cli_cmd_shell, (const flag_def_t[]){ FEND }, 1, true,
      "usage: sandbox shell SANDBOX [-- ARGV...]\n"
      "\n"
      "Opens an interactive terminal in a running sandbox (POST\n"
      "/v1/sandboxes/ID/shell, an upgraded connection through the controller and\n"
      "the worker) running ARGV (default /bin/sh) on a pseudo-terminal. When stdin\n"
      "is a terminal it is put in raw mode (restored on exit): every key, Ctrl-C\n"
      "and Ctrl-D included, goes to the sandbox, and the window size is sent at\n"
      "the start and whenever it changes. When stdin is not a terminal, its bytes\n"
      "are sent as typed input and its end as the terminal's end of input (Ctrl-D,\n"
      "typed again after each half second with no output until the command exits).\n"
      "The session is recorded as an exec operation (sandbox get lists it) with\n"
      "the exit code; one with no bytes either way for 30 minutes is closed.\n"
      "\n"
      "Exit codes: the command's own (0-255; 128+N when killed by signal N);\n"
      "2 usage; 3 an API or connection error (not running: conflict; no such\n"
      "sandbox: not_found; the connection lost before the exit code).\n"
      COMMON_FLAGS_HELP },
    { "cp", NULL, cli_check_cp, cli_cmd_cp, FLAGS(FKV("--exclude", F_EXCLUDE), FJSON), 2, false,
      "usage: sandbox cp LOCAL SANDBOX:/path [--exclude PATTERN]... [--json]\n"
      "       sandbox cp SANDBOX:/path LOCAL [--json]\n"
      "       sandbox cp - SANDBOX:/dir          (a tar on stdin, unpacked into /dir)\n"
      "       sandbox cp SANDBOX:/path -         (a tar of /path on stdout; /dir/. : a\n"
      "                                          tar of the directory's contents, ./…)\n"
      "\n"
      "Copies a file or a directory into or out of a running sandbox, as docker cp\n"
      "does: DESTINATION becomes a copy of SOURCE, or, when DESTINATION is an\n"
      "existing directory, the copy goes inside it (DESTINATION/NAME). Modes, mtimes\n"
      "and symlinks are kept; owners are not (files in the sandbox belong to root,\n"
      "local ones to you). The bytes stream through the controller and the worker\n"
      "as a tar (PUT and GET /v1/sandboxes/ID/files), never held whole; the local\n"
      "side is packed by GNU tar and unpacked by sandbox itself, which writes only\n"
      "inside DESTINATION (no symlink followed, no device, no setuid bit, whatever\n"
      "the sandbox sends). An upload is bounded by the server's files_max_bytes and\n"
      "the sandbox's disk quota (413). sbx_ID:PATH and NAME:/PATH (a name given\n"
      "with create --name) are the sandbox's; write ./x:/y for a local file of\n"
      "such a name.\n"
      "\n"
      "  --exclude PATTERN        an upload leaves out files matching PATTERN, a GNU tar\n"
      "                           pattern ('*.log', 'node_modules', '.git') (repeatable)\n"
      "  --json                   print the API's answer ({\"bytes\":N,...})\n"
      "\n"
      "Exit codes: 0 copied; 1 the local tar failed; 2 usage; 3 an API error (not\n"
      "running: conflict; no such path: not_found; too large: payload_too_large).\n"
      COMMON_FLAGS_HELP },
    { "tenants", NULL, cli_check_tenants, cli_cmd_tenants, FLAGS(FS("--policy", policy), FJSON), 2, false,
      "usage: sandbox tenants create NAME [--json]\n"
      "       sandbox tenants list [--json]\n"
      "       sandbox tenants get NAME [--json]\n"
      "       sandbox tenants update NAME --policy JSON [--json]\n"
      "       sandbox tenants delete NAME [--json]\n"
      "\n"
      "Creates (admin token), lists or shows tenants: NAME ID CREATED; get adds what\n"
      "the tenant uses now (live sandboxes, their cpu and memory, its warm pools,\n"
      "its active tokens). A member token sees only its own tenant. update replaces\n"
      "the tenant's policy (admin). delete (admin) revokes the tenant's tokens and\n"
      "frees its name; it is refused (conflict, exit 3) while the tenant owns a\n"
      "sandbox not deleted yet or a warm pool, and for the caller's own tenant.\n"
      "\n"
      "  --policy JSON            e.g. '{\"max_sandboxes\":5,\"max_cpu_millis\":2000,\n"
      "                           \"images\":[\"sandbox/*\",\"registry.local/*\"],\n"
      "                           \"network_modes\":[\"none\"]}'\n"
      "                           (see docs/api.md for every field)\n"
      "  --json                   print the API's JSON\n" COMMON_FLAGS_HELP },
    { "pools", NULL, cli_check_pools, cli_cmd_pools, FLAGS(
            FN("--size", size, 1, SBX_POOL_SIZE_MAX), FS("--tenant", tenant), FS("--image", image),
            FN("--cpu-millis", cpu_millis, SBX_CPU_MILLIS_MIN, SBX_CPU_MILLIS_MAX),
            FN("--memory-mib", memory_mib, SBX_MEMORY_MIB_MIN, SBX_MEMORY_MIB_MAX),
            FN("--disk", disk_mib, SBX_DISK_MIB_MIN, SBX_DISK_MIB_MAX), FS("--network", network),
            FS("--isolation", isolation), FB("--read-only-root", read_only_root),
            FN("--ttl", ttl, SBX_TTL_SECONDS_MIN, SBX_TTL_SECONDS_MAX), FJSON), 2, false,
      "usage: sandbox pools list [--json]\n"
      "       sandbox pools create NAME --size N [--tenant T] [--image IMAGE] [--cpu-millis N]\n"
      "                            [--memory-mib N] [--disk MIB] [--network none|restricted|open]\n"
      "                            [--isolation container|gvisor|microvm] [--read-only-root]\n"
      "                            [--ttl SECONDS] [--json]\n"
      "       sandbox pools get NAME [--json]\n"
      "       sandbox pools delete NAME [--json]\n"
      "\n"
      "Warm pools: the controller keeps --size sandboxes of one spec created and\n"
      "running; a 'sandbox create' with the same image, limits, isolation class and\n"
      "network (and no --env or --selector) takes one at once, with its own labels\n"
      "and TTL, and the pool refills in the background. A sandbox is never handed\n"
      "out twice. list and get print NAME TENANT(* = every tenant) IMAGE CLASS/NETWORK\n"
      "size= ready= creating= hits= misses=. An admin token declares any pool (without\n"
      "--tenant: one every tenant may claim from); a member token only its own\n"
      "tenant's, up to its policy's max_pool_size. A tenant's pool counts against its\n"
      "quotas (max_sandboxes, max_total_cpu_millis, max_total_memory_mib) as --size\n"
      "sandboxes of its spec. delete also deletes the pool's unclaimed members.\n"
      "\n"
      "  --size N                 members kept ready (1 to 256)\n"
      "  --tenant T               only T's creates may claim (default for a member token:\n"
      "                           its tenant; for an admin: every tenant)\n"
      "  --image, --cpu-millis, --memory-mib, --disk, --network, --isolation,\n"
      "  --read-only-root         the members' spec, with create's defaults\n"
      "  --ttl SECONDS            an unclaimed member's lifetime, then it is replaced\n"
      "                           (default: 3600 within the tenant's max_ttl_seconds;\n"
      "                           a claim gives the sandbox the claimer's TTL)\n"
      "  --json                   print the API's JSON\n"
      "\n"
      "Exit codes: 0 done; 1 refused by policy (policy_denied: over max_pool_size or\n"
      "the tenant's rules; quota_exceeded: the pool would take the tenant past a\n"
      "quota); 2 usage; 3 an API error (forbidden: no pool policy;\n"
      "conflict: the name is taken; not_found: no such pool).\n" COMMON_FLAGS_HELP },
    { "snapshots", NULL, cli_check_snapshots, cli_cmd_snapshots, FLAGS(
            FS("--sandbox", sandbox), FBS("--quiet", "-q", quiet), FS("--worker", worker), FWAIT, FJSON),
      CLI_POS_MAX, false,
      "usage: sandbox snapshots list [--sandbox SANDBOX] [-q] [--json]\n"
      "       sandbox snapshots get SNAPSHOT [--json]\n"
      "       sandbox snapshots delete SNAPSHOT... [--json]\n"
      "       sandbox snapshots copy SNAPSHOT --worker NAME [--wait [--timeout S]] [--json]\n"
      "\n"
      "Snapshots of sandboxes (sandbox snapshot --help). SNAPSHOT is a snapshot's id\n"
      "(snp_...) or its name. list prints the snapshots not deleted, newest first:\n"
      "ID NAME STATE SANDBOX IMAGE SIZE WORKER CREATED (SIZE: what the snapshot adds\n"
      "to its image; CREATED: its age). get shows one: state (pending, ready, failed\n"
      "with its error, deleted), sizes, worker, operation and times. delete marks each\n"
      "deleted at once and prints 'SNAPSHOT_ID deleted': no sandbox can start from it\n"
      "any more, its name is free again, and its worker removes the bytes later (once\n"
      "no sandbox runs from it; the sandboxes made from it run on). When one delete\n"
      "fails the others are still done, and the exit code is the first failure's.\n"
      "copy puts a copy of a ready snapshot on another worker (an operation leased to\n"
      "that worker, which reads the snapshot's bytes through the controller from the\n"
      "worker holding it, never through a registry) and prints its id; sandboxes\n"
      "made from the snapshot may then be placed there too. get shows its copies.\n"
      "\n"
      "  --sandbox SANDBOX        list: only the snapshots made of this sandbox\n"
      "  --worker NAME            copy: the worker to copy to (sandbox workers)\n"
      "  --wait                   copy: wait for the copy operation (exit 0 done, 1\n"
      "                           failed, 124 on --timeout S, default 900)\n"
      "  -q, --quiet              list: the ids only, one per line\n"
      "  --json                   print the API's JSON: {\"snapshots\":[…]} for list,\n"
      "                           {\"snapshot\":…} for get and for each delete\n"
      "\n"
      "Exit codes: 0 done (also when nothing is listed); 2 usage; 3 an API error\n"
      "(not_found: no such snapshot in the tenant).\n" COMMON_FLAGS_HELP },
    { "secrets", "secret", cli_check_secrets, cli_cmd_secrets, FLAGS(
            FS("--header", header), FL("--host", hosts, 16), FS("--tenant", tenant), FJSON), 2, false,
      "usage: sandbox secrets create NAME --header HEADER --host DOMAIN... [--tenant T]\n"
      "                              [--json] < VALUE\n"
      "       sandbox secrets list [--json]\n"
      "       sandbox secrets delete NAME [--tenant T] [--json]\n"
      "\n"
      "Secrets at egress (docs/network.md#secrets-at-egress): a tenant's HTTP header\n"
      "value bound to hosts. A sandbox created with --secret NAME (and egress rules)\n"
      "sends its HTTPS requests to those hosts without it, and its worker's egress\n"
      "filter adds the header on the way out: the value is never inside the sandbox\n"
      "(its environment, /proc or files), in logs, events or answers.\n"
      "\n"
      "create stores one, sealed with the controller's key (secrets_key_file); the\n"
      "value is read from stdin (a terminal: asked for without echo), one line, e.g.\n"
      "  printf 'Bearer %s' \"$TOKEN\" | sandbox secrets create openai \\\n"
      "      --header Authorization --host api.openai.com\n"
      "It prints NAME HEADER HOSTS TENANT CREATED, never the value. list prints the\n"
      "tenant's (an admin: every tenant's). delete forgets one; sandboxes running\n"
      "with it keep it until they end. To change a value: delete, then create.\n"
      "\n"
      "  --header HEADER          create: the header's name (Authorization, X-Api-Key)\n"
      "  --host DOMAIN            create: a host it is added for, example.com or\n"
      "                           *.example.com (repeatable, at most 16)\n"
      "  --tenant T               create, delete: in tenant T (an admin token)\n"
      "  --json                   print {\"secret\":…} or {\"secrets\":[…]}\n"
      "\n"
      "Exit codes: 0 done; 2 usage (also: no value on stdin); 3 an API error\n"
      "(conflict: the name is taken; not_found; unavailable: the controller has no\n"
      "secrets_key_file).\n" COMMON_FLAGS_HELP },
    { "volumes", "volume", cli_check_volumes, cli_cmd_volumes, FLAGS(
            FN("--size-mib", size_mib, SBX_VOLUME_MIB_MIN, SBX_VOLUME_MIB_MAX), FS("--tenant", tenant),
            FBS("--quiet", "-q", quiet), FSS("--output", "-o", output),
            FN("--timeout", timeout, 1, CLI_WAIT_TIMEOUT_MAX), FJSON), CLI_POS_MAX, false,
      "usage: sandbox volumes create NAME --size-mib N [--tenant T] [--json]\n"
      "       sandbox volumes list [-q] [--json]\n"
      "       sandbox volumes get VOLUME [--json]\n"
      "       sandbox volumes delete VOLUME... [--json]\n"
      "       sandbox volumes download VOLUME [-o FILE] [--timeout S]\n"
      "       sandbox volumes upload VOLUME [FILE] [--timeout S]\n"
      "\n"
      "Volumes: a tenant's file systems that outlive sandboxes (docs/volumes.md).\n"
      "VOLUME is a volume's id (vol_...) or its name. A sandbox mounts one with\n"
      "'sandbox create -v NAME:/data' (read-write, one sandbox at a time) or\n"
      "'-v NAME:/data:ro' (read-only, shared); what one sandbox writes there the next\n"
      "one reads. A volume lives on one worker, the one its first sandbox was placed\n"
      "on, and every later sandbox that mounts it goes there (a microvm gets it as a\n"
      "disk, and boots cold rather than from its template).\n"
      "Its size is enforced: writing past it fails with 'No space left on device'.\n"
      "\n"
      "create makes one of N MiB and prints its id (its bytes are made on its first\n"
      "mount). list prints the volumes not deleted, newest first: ID NAME SIZE WORKER\n"
      "MOUNTED CREATED (WORKER '-' until first mounted; MOUNTED the sandbox mounting\n"
      "it, or how many). get shows one and who mounts it. delete refuses a volume a\n"
      "sandbox still mounts (conflict: delete the sandbox first), else marks it\n"
      "deleted and prints 'VOLUME_ID deleted'; its worker removes the bytes after.\n"
      "download writes a tar of the volume's files (entries ./...) to FILE or stdout;\n"
      "upload unpacks a tar (FILE, or stdin) into it: together they move a volume to\n"
      "another worker or installation. Each runs a helper sandbox that mounts the\n"
      "volume at /volume (read-only for download, so it waits for no reader; upload\n"
      "needs it unmounted), streams the tar as 'sandbox cp' does, and deletes it.\n"
      "\n"
      "  --size-mib N             create: its size in MiB (8 to 16777216); counts\n"
      "                           against the tenant's max_volume_mib\n"
      "  --tenant T               create: in tenant T (an admin token; default: the\n"
      "                           token's tenant)\n"
      "  -q, --quiet              list: the ids only, one per line\n"
      "  -o, --output FILE        download: write the tar to FILE (else stdout, which\n"
      "                           must not be a terminal)\n"
      "  --timeout S              download, upload: wait at most S seconds for the\n"
      "                           helper sandbox to start (default 900)\n"
      "  --json                   print the API's JSON: {\"volumes\":[…]} for list,\n"
      "                           {\"volume\":…} for create, get and each delete\n"
      "\n"
      "Exit codes: 0 done (also when nothing is listed); 1 refused by policy\n"
      "(quota_exceeded: over the tenant's max_volumes or max_volume_mib;\n"
      "policy_denied: volumes are off, max_volumes 0); 2 usage; 3 an API error\n"
      "(not_found: no such volume in the tenant; conflict: the name is taken, or a\n"
      "sandbox mounts the volume).\n" COMMON_FLAGS_HELP },
    { "templates", NULL, cli_check_templates, cli_cmd_templates, FLAGS(
            FBS("--quiet", "-q", quiet), FN("--version", version, 1, 1000000000), FSS("--file", "-f", file),
            FKV("--build-arg", F_BUILD_ARG), FS("--network", network), FS("--isolation", isolation),
            FB("--untrusted-repo", untrusted_repo),
            FN("--cpu-millis", cpu_millis, SBX_CPU_MILLIS_MIN, SBX_CPU_MILLIS_MAX),
            FN("--memory-mib", memory_mib, SBX_MEMORY_MIB_MIN, SBX_MEMORY_MIB_MAX),
            FN("--disk", disk_mib, SBX_DISK_MIB_MIN, SBX_DISK_MIB_MAX),
            FN("--timeout", timeout, SBX_TTL_SECONDS_MIN, CLI_WAIT_TIMEOUT_MAX),
            FB("--keep-build-sandbox", keep_build_sandbox), FB("--server", server_build), FJSON), 3, false,
      "usage: sandbox templates build NAME -f DOCKERFILE [CONTEXT] [--build-arg K=V]...\n"
      "           [--network none|restricted|open] [--isolation CLASS]\n"
      "           [--untrusted-repo] [--cpu-millis N] [--memory-mib N] [--disk MIB]\n"
      "           [--timeout S] [--keep-build-sandbox | --server] [--json]\n"
      "       sandbox templates builds NAME [BUILD] [--json]\n"
      "       sandbox templates cancel NAME BUILD [--json]\n"
      "       sandbox templates list [-q] [--json]\n"
      "       sandbox templates get NAME [--json]\n"
      "       sandbox templates delete NAME [--version N] [--json]\n"
      "       sandbox templates logs NAME [--version N] [--json]\n"
      "\n"
      "A template is a named, versioned environment built from a Dockerfile; 'sandbox\n"
      "create --template NAME' starts sandboxes from its newest ready version (NAME:N\n"
      "from version N) with its files, and its ENV, WORKDIR and USER as every exec's\n"
      "defaults (docs/templates.md). NAME: 1 to 63 letters, digits, _, . or -, starting\n"
      "with a letter or digit (not snp_... or sbx_...).\n"
      "\n"
      "build runs DOCKERFILE through the API, and adds a version (1, 2, ...) to NAME:\n"
      "  1. it reads and checks DOCKERFILE, and finds its COPY sources in CONTEXT\n"
      "     (default .), before any call: what the build cannot honour is an error\n"
      "     naming FILE:LINE and the instruction (exit 2);\n"
      "  2. it creates a build sandbox from FROM's image, or from FROM's template when\n"
      "     FROM names one of the tenant's (FROM NAME or NAME:VERSION), with the flags\n"
      "     below and a TTL of --timeout, and waits for it;\n"
      "  3. it runs each instruction in order, a '#N LINE: INSTRUCTION' line on\n"
      "     stderr before each: WORKDIR makes its directory; RUN is an exec as root\n"
      "     (its output streamed here; with --json its stdout goes to stderr) with\n"
      "     the ARGs and ENVs so far as its environment and the WORKDIR as its\n"
      "     directory; COPY and ADD upload their sources as a tar (sandbox cp's),\n"
      "     each at most files_max_bytes (2 GiB unless the operator set less); a RUN\n"
      "     that exits non-zero ends the build ('FILE:LINE: RUN exited with code N');\n"
      "  4. it snapshots the build sandbox as NAME's next version, with ENV (not ARG),\n"
      "     WORKDIR, USER, CMD, ENTRYPOINT and EXPOSE as its config, waits until it is\n"
      "     ready and prints 'NAME VERSION SNAPSHOT_ID';\n"
      "  5. it deletes the build sandbox and waits for that, also when the build failed\n"
      "     or was interrupted (Ctrl-C), unless --keep-build-sandbox.\n"
      "With --server the server drives the build instead (POST /v1/templates/NAME/\n"
      "builds): steps 2 to 5 run there, each RUN's output is printed as it comes,\n"
      "and Ctrl-C or --timeout only stop following (the build goes on; 'sandbox\n"
      "templates builds NAME BUILD' shows it). Each COPY's sources go up first as\n"
      "a gzipped tar of at most 512 KiB (PUT /v1/build-files/SHA256; 4 MiB a build).\n"
      "Supported: FROM (one; no AS), ARG, ENV, WORKDIR, USER (below the last RUN, but\n"
      "USER root), RUN (shell or exec form), COPY and ADD of paths in CONTEXT (no URL,\n"
      "no archive, no --chown, --chmod or --from), CMD, ENTRYPOINT, EXPOSE (tcp), LABEL\n"
      "(ignored, with a note); $VAR, ${VAR} and ${VAR:-default} of ARGs and ENVs in\n"
      "FROM (ARGs above it), ENV, WORKDIR, USER, COPY, ADD and EXPOSE (RUN's shell\n"
      "expands its own). Refused: ONBUILD, HEALTHCHECK, SHELL, VOLUME, STOPSIGNAL,\n"
      "MAINTAINER, a second FROM. .dockerignore is not read.\n"
      "\n"
      "list prints NAME VERSIONS LATEST STATE SIZE WORKER CREATED (LATEST: the newest\n"
      "ready version, and its state, size, worker and age). get prints a template's\n"
      "versions, newest first, and the newest ready one's config. delete deletes every\n"
      "version (with --version N that one) as snapshots are deleted: no sandbox starts\n"
      "from them any more, those made from them run on; it prints 'NAME deleted' and\n"
      "how many versions. logs prints what the build of the newest version (with\n"
      "--version N that one) ran and printed: each RUN ('==> argv (state)') and its\n"
      "output, as the server kept it (exec_output_keep_bytes each, and as long as\n"
      "the server keeps operations); --json: {\"version\",\"sandbox_id\",\"steps\":[op…]}.\n"
      "builds lists the builds the server drove for NAME, newest first, as 'ID STATE\n"
      "STEPS VERSION CREATED' and a failed one's error (with BUILD: that one).\n"
      "cancel ends a server build under way ('BUILD cancelled'): the step running\n"
      "ends with its build sandbox, which the server deletes; one saving its version\n"
      "or ended already is a conflict (exit 3).\n"
      "\n"
      "  --version N              delete, logs: that version\n"
      "  -f, --file DOCKERFILE    build: the Dockerfile (default CONTEXT/Dockerfile)\n"
      "  --build-arg K=V          build: an ARG's value (repeatable); K alone: K's\n"
      "                           value in this environment\n"
      "  --network, --isolation, --untrusted-repo, --cpu-millis, --memory-mib, --disk\n"
      "                           build: the build sandbox's, as create takes them\n"
      "                           (CLASS: container, gvisor or microvm; its RUNs have\n"
      "                           the network it has: none by default)\n"
      "  --timeout S              build: give up after S seconds in all, the build\n"
      "                           sandbox's TTL (default 1800)\n"
      "  --server                 build: the server drives the build (above)\n"
      "  --keep-build-sandbox     build: keep the build sandbox (its id on stderr), to\n"
      "                           look into it; its TTL still ends it\n"
      "  -q, --quiet              list: the names only, one per line\n"
      "  --json                   print the API's JSON: {\"templates\":[…]} for list,\n"
      "                           {\"template\":…} for get and delete; build prints\n"
      "                           {\"snapshot\":…}, the new version, ready\n"
      "\n"
      "Exit codes: 0 done (build: the version is ready); 1 a build step or the snapshot\n"
      "failed (the message names FILE:LINE), or refused by policy (quota_exceeded: the\n"
      "tenant's snapshots); 2 usage, or a Dockerfile the build cannot run; 3 an API\n"
      "error (not_found: no such template; conflict: no version ready yet); 124\n"
      "build's --timeout passed; 130 build interrupted (Ctrl-C).\n" COMMON_FLAGS_HELP },
    { "images", NULL, cli_check_images, cli_cmd_images, FLAGS(FS("--tenant", tenant), FBS("--quiet", "-q", quiet),
            FJSON), 1, false,
      "usage: sandbox images [--tenant T] [-q] [--json]\n"
      "\n"
      "Lists the images the ready workers have, what a create may name without a\n"
      "pull: IMAGE ISOLATION SIZE CREATED WORKERS, by name, '(default)' after the server's\n"
      "default_image. A member token sees only what its tenant's policy allows (a\n"
      "line on stderr says how many more the workers have, and the policy's image\n"
      "patterns); an admin sees every image, or with --tenant what T may use. An\n"
      "image reaches a worker by tools/make-image.sh or docker load on its host\n"
      "(docs/client-setup.md#images).\n"
      "\n"
      "  --tenant T               (admin) only what tenant T's policy allows\n"
      "  -q, --quiet              the names only, one per line\n"
      "  --json                   print the API's JSON ({\"images\":[{\"name\",\"workers\",\n"
      "                           \"isolation\",\"size\",\"created\"}],\"default_image\",\"allowed\",\n"
      "                           \"not_allowed\"}; size in bytes, created as an RFC 3339 time)\n"
      "\n"
      "Exit codes: 0 listed (also when nothing is); 2 usage; 3 an API error\n"
      "(forbidden: another tenant's, with a member token; not_found: no such tenant).\n"
      COMMON_FLAGS_HELP },
    { "version", NULL, cli_check_version, cli_cmd_version, FLAGS(FJSON), 0, false,
      "usage: sandbox version [--json]\n"
      "\n"
      "Prints this client's version, then the controller's (GET /v1/version):\n"
      "  client: sandbox 0.1.0\n"
      "  server: sandboxd 0.1.0 (api v1, schema 0021) at http://127.0.0.1:8080\n"
      "  workers: 2 at 0.1.0\n"
      "how many ready workers run each version, and a 'skew:' line when one runs\n"
      "another version than the controller ('sandbox workers list' names them).\n"
      "sandbox --version prints the client's alone, without a server.\n"
      "\n"
      "  --json                   print {\"client\":{\"version\"},\"server\":{\"version\",\"api\",\n"
      "                           \"schema\",\"workers\":[{\"version\",\"workers\"}],\"url\"}}\n"
      "\n"
      "Exit codes: 0 both printed; 3 the controller could not be asked (the client's\n"
      "line is printed first).\n" COMMON_FLAGS_HELP },
    { "context", NULL, cli_check_context, cli_cmd_context, FLAGS(FBS("--quiet", "-q", quiet), FJSON), 2, false,
      "usage: sandbox context [list] [-q] [--json]\n"
      "       sandbox context show [--json]\n"
      "       sandbox context use NAME\n"
      "\n"
      "Named controllers in the config file ($XDG_CONFIG_HOME/sandbox/config or\n"
      "~/.config/sandbox/config), one '[context NAME]' section each with its own\n"
      "'url = ', 'token = ' and 'ca_file = ' lines. --context NAME or SANDBOX_CONTEXT\n"
      "picks one for a command (over SANDBOX_URL and SANDBOX_TOKEN, which it never\n"
      "mixes with; --url and --token still win); else the file's 'context = NAME'\n"
      "line; else the file's top lines. Needs no server.\n"
      "\n"
      "  list                     NAME URL TOKEN (set or none, never shown), '*' on the\n"
      "                           one in use; -q: the names only\n"
      "  show                     what a command would use here: context, url, whether\n"
      "                           a token is set, ca_file, the config file\n"
      "  use NAME                 writes 'context = NAME' at the file's top (the other\n"
      "                           lines are kept)\n"
      "  --json                   print JSON\n"
      "\n"
      "Exit codes: 0 done; 1 no such context for use, or the file cannot be written;\n"
      "2 usage, a malformed config file, an unknown --context.\n" COMMON_FLAGS_HELP, true },
    { "completion", NULL, cli_check_completion, cli_cmd_completion, (const flag_def_t[]){ FEND }, 1, false,
      "usage: sandbox completion bash|zsh\n"
      "\n"
      "Prints a completion script for the shell: commands, each command's flags and\n"
      "subcommands, sandbox ids (from 'sandbox list -q', with the --url, --token or\n"
      "--context already typed), images after --image, contexts after --context.\n"
      "  bash: eval \"$(sandbox completion bash)\"   (in ~/.bashrc), or\n"
      "        sandbox completion bash > /etc/bash_completion.d/sandbox\n"
      "  zsh:  eval \"$(sandbox completion zsh)\"    (in ~/.zshrc)\n"
      "Needs no server.\n"
      "\n"
      "Exit codes: 0 printed; 2 usage (a shell other than bash or zsh).\n", true },
    { "workers", NULL, cli_check_workers, cli_cmd_workers, FLAGS(FJSON), 2, false,
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
    { "tokens", NULL, cli_check_tokens, cli_cmd_tokens, FLAGS(
            FS("--tenant", tenant), FS("--role", role), FS("--name", name), FN("--ttl", ttl, 1, 315360000),
            FS("--worker", worker), FJSON), 2, false,
      "usage: sandbox tokens create --tenant T --role admin|member|worker [--name N] [--ttl SECONDS]\n"
      "                             [--worker NAME] [--json]\n"
      "       sandbox tokens list [--tenant T] [--json]\n"
      "       sandbox tokens revoke TOKEN_ID [--json]\n"
      "\n"
      "Manages API tokens (admin token). create prints the new secret alone on\n"
      "stdout, once (its id on stderr); the server keeps only its hash. list shows\n"
      "ID TENANT ROLE NAME CREATED expires= revoked= worker= (never secrets). A revoked\n"
      "or expired token is refused at once.\n"
      "\n"
      "  --tenant T               the token's tenant (must exist: sandbox tenants create)\n"
      "  --role ROLE              admin (everything), member (its tenant's sandboxes),\n"
      "                           worker (worker endpoints only)\n"
      "  --name N                 a label for people\n"
      "  --ttl SECONDS            expire after SECONDS (default: never)\n"
      "  --worker NAME            (role worker) the one worker name the token may act as;\n"
      "                           without it, the name it first registers\n"
      "  --json                   print the API's JSON\n" COMMON_FLAGS_HELP },
};

#define NCOMMANDS (sizeof commands / sizeof commands[0])

static const char top_usage[] =
    "usage: sandbox [--url URL] [--token TOKEN] COMMAND [ARGS...]\n"
    "\n"
    "Commands:\n"
    "  create     create a sandbox            (sandbox create --wait)\n"
    "  wait       wait for an operation       (sandbox wait OPERATION_ID)\n"
    "  exec       run a command in a sandbox  (sandbox exec SANDBOX -- ls -l)\n"
    "  output     print or follow an exec's output (sandbox output OPERATION_ID -f)\n"
    "  cancel     cancel an exec              (sandbox cancel OPERATION_ID)\n"
    "  shell      an interactive terminal in a sandbox (sandbox shell SANDBOX)\n"
    "  get        show a sandbox\n"
    "  list, ls   list sandboxes\n"
    "  delete, rm delete a sandbox\n"
    "  extend     set when a sandbox expires  (sandbox extend SANDBOX --ttl 3600)\n"
    "  pause      stop a sandbox, keep its files and routes (sandbox pause SANDBOX)\n"
    "  resume     run a paused sandbox again  (sandbox resume SANDBOX)\n"
    "  snapshot   save a sandbox's files      (sandbox snapshot SANDBOX --name base)\n"
    "  snapshots  list, get, delete snapshots (sandbox create --from base)\n"
    "  volumes    create, list, get, delete volumes (sandbox create -v NAME:/data)\n"
    "  network    show or change a sandbox's egress rules; its network log\n"
    "  secrets    create, list, delete secrets added at egress (create --secret N)\n"
    "  fork       start copies of a sandbox's files (sandbox fork SANDBOX --count 3)\n"
    "  templates  build, list, get, delete templates (sandbox create --template web)\n"
    "  operation, op  show an operation\n"
    "  share      give a sandbox port an address  (sandbox share SANDBOX --port 8080)\n"
    "  routes     list a sandbox's routes\n"
    "  unshare    remove a route\n"
    "  events     print or follow events      (sandbox events --follow --sandbox ID)\n"
    "  logs       print or follow a sandbox's output (sandbox logs SANDBOX -f)\n"
    "  cp         copy files into or out of a sandbox (sandbox cp ./src SANDBOX:/work)\n"
    "  tenants    create, list, get, delete tenants; update their policy\n"
    "  tokens     create, list, revoke API tokens\n"
    "  images     list the images sandboxes can use (sandbox images)\n"
    "  workers    list, drain, resume workers\n"
    "  pools      list, create, get, delete warm pools\n"
    "  help [COMMAND] show help\n"
    "  version    print the client's and the controller's versions\n"
    "  context    list, show, use the config file's named controllers\n"
    "  completion print a bash or zsh completion script\n"
    "\n"
    "SANDBOX is a sandbox's id (sbx_...) or the name it was given (create --name).\n"
    "\n"
    "Global flags (also accepted after the command):\n" COMMON_FLAGS_HELP
    "  --version                print the version\n"
    "\n"
    "Configuration: --url/--token, else SANDBOX_URL/SANDBOX_TOKEN, else\n"
    "$XDG_CONFIG_HOME/sandbox/config (~/.config/sandbox/config) with lines\n"
    "'url = …', 'token = …' and 'ca_file = …', or [context NAME] sections of them\n"
    "picked by --context NAME or SANDBOX_CONTEXT (sandbox context --help).\n"
    "\n"
    "Exit codes: 0 success; 1 operation failed or cancelled; 2 usage error;\n"
    "3 API or connection error; 124 --timeout elapsed. exec exits with the\n"
    "command's own code. See 'sandbox COMMAND --help'.\n";

const command_t *cli_commands(size_t *n)
{
    *n = NCOMMANDS;
    return commands;
}

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
            return cli_usage_error(NULL, "unknown flag '%.*s'", (int)nl, a);
        const char **t = (const char **)(void *)((char *)&o + f->off);
        const char *val = eq ? eq + 1 : (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0 ? argv[++i] : NULL);
        if (!val || !*val)
            return cli_usage_error(NULL, "%s needs a value", f->name);
        if (*t)
            return cli_usage_error(NULL, "%s given more than once", f->name);
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
            return cli_usage_error(NULL, "unknown command '%s'", argv[i + 1]);
        fputs(hc->usage, stdout);
        return EXIT_OK;
    }
    const command_t *c = command_find(name);
    if (!c)
        return cli_usage_error(NULL, "unknown command '%s'", name);
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
    if (rc == 0 && c->offline) {
        rc = c->run(&cli, &o);
        fflush(stdout);
    } else if (rc == 0)
        rc = cli_connect(&cli, &o);
    if (rc == 0 && !c->offline) {
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
    json_object_put(o.build_args);
    json_object_put(o.volumes);
    json_object_put(o.egress);
    json_object_put(o.secrets);
    json_object_put(o.hosts);
    return rc;
}

