/* The egress rules of the open network (docs/worker.md "Network modes"):
 * iptables chains of the worker's own that keep `open` sandboxes to the
 * internet — not the worker host, link-local, private ranges or other
 * bridges. Made at start, checked by the readiness probe and before each
 * open create. Runs iptables/ip6tables (argv, never a shell). */
#include "docker_internal.h"
#include "jsonx.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* Destinations an open sandbox may not be forwarded to (IPv4): "this"
 * network, RFC 1918, CGNAT, loopback, link-local (cloud metadata), IETF
 * protocol assignments, benchmarking, multicast and reserved. The host's own
 * addresses are local delivery: the INPUT chain refuses them all. */
static const char *const egress_deny_v4[] = {
    "0.0.0.0/8",      "10.0.0.0/8",     "100.64.0.0/10", "127.0.0.0/8",  "169.254.0.0/16", "172.16.0.0/12",
    "192.0.0.0/24",   "192.168.0.0/16", "198.18.0.0/15", "224.0.0.0/4",  "240.0.0.0/4",
};

/* One rule: which tool, the chain (EGRESS/HOST are the worker's; a literal
 * is a built-in or Docker's chain the jump goes into) and its match. */
typedef enum { EG_V4 = 0, EG_V6 } egress_family_t;
typedef enum { EG_CHAIN_EGRESS = 0, EG_CHAIN_HOST, EG_CHAIN_INPUT, EG_CHAIN_FORWARD } egress_chain_t;

typedef struct {
    egress_family_t family;
    egress_chain_t chain;
    const char *argv[10]; /* "@BR" is the bridge, "@EGRESS"/"@HOST" the worker's chains */
} egress_rule_t;

static const char *const egress_tools[] = { "iptables", "ip6tables" };

/* The rules of each worker chain, in order (the chains are flushed and
 * refilled at start), then the jumps into them. Replies to connections the
 * host made (the route forwarder dials the sandbox) stay allowed. */
static const egress_rule_t egress_rules[] = {
    { EG_V4, EG_CHAIN_HOST, { "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "RETURN", NULL } },
    { EG_V4, EG_CHAIN_HOST, { "-j", "REJECT", NULL } },
    { EG_V4, EG_CHAIN_EGRESS, { "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "RETURN", NULL } },
    /* egress_deny_v4 rows are inserted here by the code (EG_DENY_AT) */
    { EG_V4, EG_CHAIN_EGRESS, { "-o", "docker0", "-j", "REJECT", NULL } },
    { EG_V4, EG_CHAIN_EGRESS, { "-o", "br-+", "-j", "REJECT", NULL } },
    { EG_V6, EG_CHAIN_HOST, { "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "RETURN", NULL } },
    { EG_V6, EG_CHAIN_HOST, { "-j", "REJECT", NULL } },
    /* the open network has no IPv6: nothing of it is forwarded */
    { EG_V6, EG_CHAIN_EGRESS, { "-j", "REJECT", NULL } },
};
#define EG_DENY_AT 3

/* Jumps: INPUT → HOST for traffic to the host; DOCKER-USER (or FORWARD
 * when Docker made none) → EGRESS for forwarded traffic. */
static const egress_rule_t egress_jumps[] = {
    { EG_V4, EG_CHAIN_INPUT, { "-i", "@BR", "-j", "@HOST", NULL } },
    { EG_V4, EG_CHAIN_FORWARD, { "-i", "@BR", "-j", "@EGRESS", NULL } },
    { EG_V6, EG_CHAIN_INPUT, { "-i", "@BR", "-j", "@HOST", NULL } },
    { EG_V6, EG_CHAIN_FORWARD, { "-i", "@BR", "-j", "@EGRESS", NULL } },
};

#define EG_ARGV_MAX 20
#define EG_OUT_MAX  300

/* The names one rule is spelt with (bridge, chains, tool path). */
typedef struct {
    const docker_runtime_t *rt;
    char egress[DOCKER_EGRESS_CHAIN_MAX], host[DOCKER_EGRESS_CHAIN_MAX];
} egress_names_t;

static void egress_names_init(egress_names_t *n, const docker_runtime_t *rt)
{
    n->rt = rt;
    snprintf(n->egress, sizeof n->egress, "SBX-EGRESS-%s", rt->egress_bridge);
    snprintf(n->host, sizeof n->host, "SBX-HOST-%s", rt->egress_bridge);
}

static const char *egress_chain_name(const egress_names_t *n, egress_family_t fam, egress_chain_t c)
{
    switch (c) {
    case EG_CHAIN_EGRESS: return n->egress;
    case EG_CHAIN_HOST: return n->host;
    case EG_CHAIN_INPUT: return "INPUT";
    case EG_CHAIN_FORWARD: return fam == EG_V4 && n->rt->egress_docker_user ? "DOCKER-USER" : "FORWARD";
    }
    return "FORWARD";
}

/* Runs tool with argv (no shell), stdout and stderr into out (first line,
 * at most outlen - 1 bytes). Returns the exit status (0 success), or -1
 * when it cannot run (out says why). */
static int egress_run(const char *tool, const char *const *argv, char *out, size_t outlen)
{
    int fds[2] = { -1, -1 }, status = 0, rc = -1;
    pid_t pid = -1;
    posix_spawn_file_actions_t fa;
    bool fa_init = false;
    size_t len = 0;
    out[0] = '\0';
    if (pipe2(fds, O_CLOEXEC) < 0) {
        snprintf(out, outlen, "pipe: %s", strerror(errno));
        goto cleanup;
    }
    if (posix_spawn_file_actions_init(&fa) != 0)
        goto cleanup;
    fa_init = true;
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
    int e = posix_spawn(&pid, tool, &fa, NULL, (char *const *)argv, environ);
    close(fds[1]);
    fds[1] = -1;
    if (e != 0) {
        snprintf(out, outlen, "cannot run %s: %s", tool, strerror(e));
        pid = -1;
        goto cleanup;
    }
    for (;;) {
        char buf[256];
        ssize_t got = read(fds[0], buf, sizeof buf);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        for (ssize_t i = 0; i < got && len + 1 < outlen; i++)
            out[len++] = buf[i];
    }
    out[len] = '\0';
    out[strcspn(out, "\r\n")] = '\0';
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    pid = -1;
    rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
cleanup:
    if (fa_init)
        posix_spawn_file_actions_destroy(&fa);
    if (fds[0] >= 0)
        close(fds[0]);
    if (fds[1] >= 0)
        close(fds[1]);
    return rc;
}

/* Finds iptables or ip6tables; false when neither directory has it. */
static bool egress_tool_find(const char *name, char out[RUNSC_PATH_MAX])
{
    static const char *const dirs[] = { "/usr/sbin", "/sbin", "/usr/bin", "/bin", "/usr/local/sbin", NULL };
    for (const char *const *d = dirs; *d; d++) {
        struct stat st;
        snprintf(out, RUNSC_PATH_MAX, "%s/%s", *d, name);
        if (stat(out, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0111))
            return true;
    }
    out[0] = '\0';
    return false;
}

/* Runs `TOOL -w 5 OP CHAIN ARGS…` with the names spliced in; describes the
 * command in cmd (for messages). Returns the tool's exit status or -1. */
static int egress_rule_run(const egress_names_t *n, const egress_rule_t *rule, const char *op, const char *pos,
                           const char *deny, char *cmd, size_t cmdlen, char *out, size_t outlen)
{
    const char *argv[EG_ARGV_MAX];
    size_t k = 0, used = 0;
    const char *tool = n->rt->egress_tool[rule->family];
    argv[k++] = tool;
    argv[k++] = "-w";
    argv[k++] = "5";
    argv[k++] = op;
    argv[k++] = egress_chain_name(n, rule->family, rule->chain);
    if (pos)
        argv[k++] = pos;
    if (deny) {
        argv[k++] = "-d";
        argv[k++] = deny;
        argv[k++] = "-j";
        argv[k++] = "REJECT";
    }
    for (size_t i = 0; !deny && rule->argv[i] && k + 1 < EG_ARGV_MAX; i++) {
        const char *a = rule->argv[i];
        argv[k++] = strcmp(a, "@BR") == 0       ? n->rt->egress_bridge
                    : strcmp(a, "@EGRESS") == 0 ? n->egress
                    : strcmp(a, "@HOST") == 0   ? n->host
                                                : a;
    }
    argv[k] = NULL;
    cmd[0] = '\0';
    for (size_t i = 0; i < k && used + 1 < cmdlen; i++) {
        int w = snprintf(cmd + used, cmdlen - used, "%s%s", i ? " " : "", i ? argv[i] : egress_tools[rule->family]);
        if (w < 0)
            break;
        used += (size_t)w < cmdlen - used ? (size_t)w : cmdlen - used - 1;
    }
    return egress_run(tool, argv, out, outlen);
}

/* Visits every chain rule in order (the deny rows spliced in at
 * EG_DENY_AT): fn(rule, deny-CIDR or NULL). Stops at fn's first non-zero. */
typedef int (*egress_visit_fn)(const egress_names_t *n, const egress_rule_t *rule, const char *deny, void *ud);

static int egress_visit(const egress_names_t *n, egress_visit_fn fn, void *ud)
{
    static const egress_rule_t deny_row = { EG_V4, EG_CHAIN_EGRESS, { NULL } };
    for (size_t i = 0; i < sizeof egress_rules / sizeof egress_rules[0]; i++) {
        if (i == EG_DENY_AT)
            for (size_t d = 0; d < sizeof egress_deny_v4 / sizeof egress_deny_v4[0]; d++) {
                int r = fn(n, &deny_row, egress_deny_v4[d], ud);
                if (r)
                    return r;
            }
        int r = fn(n, &egress_rules[i], NULL, ud);
        if (r)
            return r;
    }
    for (size_t i = 0; i < sizeof egress_jumps / sizeof egress_jumps[0]; i++) {
        int r = fn(n, &egress_jumps[i], NULL, ud);
        if (r)
            return r;
    }
    return 0;
}

typedef struct {
    api_error_t *err;
} egress_ctx_t;

/* Setup: appends a chain rule; a jump is inserted first unless present. */
static int egress_install_one(const egress_names_t *n, const egress_rule_t *rule, const char *deny, void *ud)
{
    egress_ctx_t *ctx = ud;
    char cmd[400], out[EG_OUT_MAX];
    bool jump = rule->chain == EG_CHAIN_INPUT || rule->chain == EG_CHAIN_FORWARD;
    if (jump && egress_rule_run(n, rule, "-C", NULL, NULL, cmd, sizeof cmd, out, sizeof out) == 0)
        return 0;
    int rc = egress_rule_run(n, rule, jump ? "-I" : "-A", jump ? "1" : NULL, deny, cmd, sizeof cmd, out, sizeof out);
    if (rc != 0)
        return api_error_set(ctx->err, API_ISOLATION_UNAVAILABLE, "`%.200s` failed: %.150s", cmd,
                             out[0] ? out : "no output");
    return 0;
}

/* Check: the rule must be there (iptables -C). */
static int egress_check_one(const egress_names_t *n, const egress_rule_t *rule, const char *deny, void *ud)
{
    egress_ctx_t *ctx = ud;
    char cmd[400], out[EG_OUT_MAX];
    int rc = egress_rule_run(n, rule, "-C", NULL, deny, cmd, sizeof cmd, out, sizeof out);
    if (rc == 0)
        return 0;
    /* say it as the rule that is missing: `iptables -A CHAIN …` */
    char *c = strstr(cmd, " -C ");
    if (c)
        c[2] = rule->chain == EG_CHAIN_INPUT || rule->chain == EG_CHAIN_FORWARD ? 'I' : 'A';
    return api_error_set(ctx->err, API_ISOLATION_UNAVAILABLE,
                         "the egress rule `%.220s` of network %s is missing (restart the worker to restore it)%s%.100s",
                         cmd, n->rt->net_name[NET_OPEN], rc < 0 ? ": " : "", rc < 0 ? out : "");
}

/* The bridge interface of the open network: its bridge.name option, else
 * "br-" and the first 12 digits of its id (Docker's naming). */
static int egress_bridge_of(docker_runtime_t *rt, char ret[DOCKER_EGRESS_BRIDGE_MAX], api_error_t *err)
{
    char path[DOCKER_NETWORK_NAME_MAX + 32];
    json_object *net = NULL;
    snprintf(path, sizeof path, "/networks/%s", rt->net_name[NET_OPEN]);
    int r = docker_get_json(rt, path, DOCKER_CALL_TIMEOUT_MS, &net, err);
    if (r < 0)
        return r;
    const char *named = jsonx_get_str(jsonx_get_obj(net, "Options"), "com.docker.network.bridge.name");
    const char *id = jsonx_get_str(net, "Id");
    char br[DOCKER_EGRESS_BRIDGE_MAX] = "";
    if (named && *named)
        snprintf(br, sizeof br, "%s", strlen(named) < sizeof br ? named : "");
    else if (id && strlen(id) >= 12)
        snprintf(br, sizeof br, "br-%.12s", id);
    json_object_put(net);
    if (!br[0] || !docker_name_ok(br, sizeof br))
        return api_error_set(err, API_ISOLATION_UNAVAILABLE,
                             "cannot tell the bridge interface of Docker network %s", rt->net_name[NET_OPEN]);
    snprintf(ret, DOCKER_EGRESS_BRIDGE_MAX, "%s", br);
    return 0;
}

int docker_egress_setup(docker_runtime_t *rt, api_error_t *err)
{
    egress_names_t n;
    egress_ctx_t ctx = { err };
    char cmd[400], out[EG_OUT_MAX];
    rt->egress_ready = false;
    for (int f = EG_V4; f <= EG_V6; f++)
        if (!egress_tool_find(egress_tools[f], rt->egress_tool[f]))
            return api_error_set(err, API_ISOLATION_UNAVAILABLE,
                                 "cannot set the egress rules of network %s: %s is not installed (the worker needs "
                                 "it, and CAP_NET_ADMIN, to offer network open)",
                                 rt->net_name[NET_OPEN], egress_tools[f]);
    int r = egress_bridge_of(rt, rt->egress_bridge, err);
    if (r < 0)
        return r;
    egress_names_init(&n, rt);
    static const egress_rule_t probe_user = { EG_V4, EG_CHAIN_FORWARD, { NULL } };
    rt->egress_docker_user = true;
    rt->egress_docker_user = egress_rule_run(&n, &probe_user, "-S", NULL, NULL, cmd, sizeof cmd, out, sizeof out) == 0;
    /* -N fails when the chain exists; -F must then work */
    for (int f = EG_V4; f <= EG_V6; f++)
        for (int c = EG_CHAIN_EGRESS; c <= EG_CHAIN_HOST; c++) {
            egress_rule_t mk = { (egress_family_t)f, (egress_chain_t)c, { NULL } };
            egress_rule_run(&n, &mk, "-N", NULL, NULL, cmd, sizeof cmd, out, sizeof out);
            if (egress_rule_run(&n, &mk, "-F", NULL, NULL, cmd, sizeof cmd, out, sizeof out) != 0)
                return api_error_set(err, API_ISOLATION_UNAVAILABLE,
                                     "cannot set the egress rules of network %s: `%.200s` failed: %.150s (the worker "
                                     "needs CAP_NET_ADMIN to offer network open)",
                                     rt->net_name[NET_OPEN], cmd, out[0] ? out : "no output");
        }
    if ((r = egress_visit(&n, egress_install_one, &ctx)) != 0) {
        char why[sizeof err->message];
        snprintf(why, sizeof why, "%s", err->message);
        return api_error_set(err, API_ISOLATION_UNAVAILABLE, "cannot set the egress rules of network %s: %s",
                             rt->net_name[NET_OPEN], why);
    }
    rt->egress_ready = true;
    return 0;
}

int docker_egress_check(docker_runtime_t *rt, api_error_t *err)
{
    egress_names_t n;
    egress_ctx_t ctx = { err };
    char br[DOCKER_EGRESS_BRIDGE_MAX];
    if (!rt->egress_ready)
        return 0;
    if (egress_bridge_of(rt, br, err) < 0)
        return SBX_EUNAVAIL;
    if (strcmp(br, rt->egress_bridge) != 0)
        return api_error_set(err, API_ISOLATION_UNAVAILABLE,
                             "Docker network %s was replaced (bridge %s, the egress rules are on %s); restart the "
                             "worker to set them again",
                             rt->net_name[NET_OPEN], br, rt->egress_bridge);
    egress_names_init(&n, rt);
    return egress_visit(&n, egress_check_one, &ctx) ? SBX_EUNAVAIL : 0;
}
