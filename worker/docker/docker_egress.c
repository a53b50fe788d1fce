/* The egress rules of the open network (docs/worker.md "Network modes"):
 * iptables chains of the worker's own that keep `open` sandboxes to the
 * internet — not the worker host, link-local, private ranges or other
 * bridges. Made at start, checked by the readiness probe and before each
 * open create. Runs iptables/ip6tables (argv, never a shell). */
#include "docker_internal.h"
#include "fdutil.h"
#include "jsonx.h"
#include "log.h"
#include "netaddr.h"

#include <arpa/inet.h>

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

/* Runs tool with argv (no shell), stdout and stderr into out (the first
 * line, or every line when all; at most outlen - 1 bytes). Returns the exit
 * status (0 success), or -1 when it cannot run (out says why). */
int docker_tool_run(const char *tool, const char *const *argv, char *out, size_t outlen, bool all)
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
    fd_spawn_close_from(&fa, 3);
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
    if (!all)
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

static int egress_run(const char *tool, const char *const *argv, char *out, size_t outlen)
{
    return docker_tool_run(tool, argv, out, outlen, false);
}

/* Finds iptables or ip6tables; false when neither directory has it. */
bool docker_tool_find(const char *name, char out[RUNSC_PATH_MAX])
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

int docker_network_bridge(docker_runtime_t *rt, int mode, char ret[DOCKER_EGRESS_BRIDGE_MAX], char *ret_gw,
                          size_t gwlen, api_error_t *err)
{
    char path[DOCKER_NETWORK_NAME_MAX + 32];
    json_object *net = NULL;
    snprintf(path, sizeof path, "/networks/%s", rt->net_name[mode]);
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
    json_object *cfgs = jsonx_get_arr(jsonx_get_obj(net, "IPAM"), "Config");
    const char *gw = cfgs && json_object_array_length(cfgs) > 0
                         ? jsonx_get_str(json_object_array_get_idx(cfgs, 0), "Gateway")
                         : NULL;
    struct in_addr probe;
    bool gw_ok = gw && inet_pton(AF_INET, gw, &probe) == 1 && strlen(gw) < gwlen;
    if (gw_ok && ret_gw)
        snprintf(ret_gw, gwlen, "%s", gw);
    json_object_put(net);
    if (!br[0] || !docker_name_ok(br, sizeof br))
        return api_error_set(err, API_ISOLATION_UNAVAILABLE,
                             "cannot tell the bridge interface of Docker network %s", rt->net_name[mode]);
    if (ret_gw && !gw_ok)
        return api_error_set(err, API_ISOLATION_UNAVAILABLE, "Docker network %s has no IPv4 gateway",
                             rt->net_name[mode]);
    snprintf(ret, DOCKER_EGRESS_BRIDGE_MAX, "%s", br);
    return 0;
}

static void egress_allow_restore(docker_runtime_t *rt);

int docker_egress_setup(docker_runtime_t *rt, api_error_t *err)
{
    egress_names_t n;
    egress_ctx_t ctx = { err };
    char cmd[400], out[EG_OUT_MAX];
    rt->egress_ready = false;
    for (int f = EG_V4; f <= EG_V6; f++)
        if (!docker_tool_find(egress_tools[f], rt->egress_tool[f]))
            return api_error_set(err, API_ISOLATION_UNAVAILABLE,
                                 "cannot set the egress rules of network %s: %s is not installed (the worker needs "
                                 "it, and CAP_NET_ADMIN, to offer network open)",
                                 rt->net_name[NET_OPEN], egress_tools[f]);
    int r = docker_network_bridge(rt, NET_OPEN, rt->egress_bridge, NULL, 0, err);
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
    egress_allow_restore(rt);
    return 0;
}

int docker_egress_check(docker_runtime_t *rt, api_error_t *err)
{
    egress_names_t n;
    egress_ctx_t ctx = { err };
    char br[DOCKER_EGRESS_BRIDGE_MAX];
    if (!rt->egress_ready)
        return 0;
    if (docker_network_bridge(rt, NET_OPEN, br, NULL, 0, err) < 0)
        return SBX_EUNAVAIL;
    if (strcmp(br, rt->egress_bridge) != 0)
        return api_error_set(err, API_ISOLATION_UNAVAILABLE,
                             "Docker network %s was replaced (bridge %s, the egress rules are on %s); restart the "
                             "worker to set them again",
                             rt->net_name[NET_OPEN], br, rt->egress_bridge);
    egress_names_init(&n, rt);
    return egress_visit(&n, egress_check_one, &ctx) ? SBX_EUNAVAIL : 0;
}

/* ---- egress_allow: the allow rules of one sandbox ----------------------
 * One rule per allowed CIDR in the EGRESS chain, ahead of the blocks:
 * `-s SANDBOX-IP -d CIDR -m comment --comment sbx-allow:ID -j RETURN`.
 * RETURN, not ACCEPT: it only skips the worker's blocks, Docker's own
 * rules still apply. The HOST chain is never opened. */

#define EG_ALLOW_TAG "sbx-allow:"
/* What `iptables -S` of one chain may print (about 8,000 rules). */
#define EG_LIST_MAX (1024 * 1024)

/* One allow rule as `iptables -S` prints it, split into words in place. */
typedef struct {
    const char *argv[EG_ARGV_MAX];
    size_t n;
    const char *sandbox_id; /* the comment, after the tag */
    const char *source;     /* -s, with its /32 or /128 */
} egress_allow_rule_t;

typedef bool (*egress_keep_fn)(const egress_allow_rule_t *rule, void *ud);

/* Splits one line of `iptables -S` (quotes around a word removed); true
 * when it is an `-A` rule carrying our tag and a source. */
static bool egress_allow_parse(char *line, egress_allow_rule_t *ret)
{
    char *p = line;
    memset(ret, 0, sizeof *ret);
    while (*p) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        if (ret->n + 1 >= EG_ARGV_MAX)
            return false;
        char *w = p;
        while (*p && *p != ' ')
            p++;
        if (*p)
            *p++ = '\0';
        size_t l = strlen(w);
        if (l >= 2 && w[0] == '"' && w[l - 1] == '"') {
            w[l - 1] = '\0';
            w++;
        }
        ret->argv[ret->n++] = w;
    }
    if (ret->n < 2 || strcmp(ret->argv[0], "-A") != 0)
        return false;
    for (size_t i = 1; i + 1 < ret->n; i++) {
        if (strcmp(ret->argv[i], "--comment") == 0 && strncmp(ret->argv[i + 1], EG_ALLOW_TAG, strlen(EG_ALLOW_TAG)) == 0)
            ret->sandbox_id = ret->argv[i + 1] + strlen(EG_ALLOW_TAG);
        else if (strcmp(ret->argv[i], "-s") == 0)
            ret->source = ret->argv[i + 1];
    }
    return ret->sandbox_id && ret->source;
}

/* Deletes every allow rule of the EGRESS chains (both families) that keep
 * refuses. 0, or -1 when a chain cannot be listed (the other is still
 * pruned). */
/* Deletes the allow rules keep() says to drop; *ret_kept (may be NULL)
 * counts those it keeps. */
static int egress_allow_prune(const egress_names_t *n, egress_keep_fn keep, void *ud, size_t *ret_kept)
{
    int rc = 0;
    if (ret_kept)
        *ret_kept = 0;
    char *list = malloc(EG_LIST_MAX);
    if (!list)
        return -1;
    for (int f = EG_V4; f <= EG_V6; f++) {
        const char *tool = n->rt->egress_tool[f];
        const char *argv[] = { tool, "-w", "5", "-S", n->egress, NULL };
        if (docker_tool_run(tool, argv, list, EG_LIST_MAX, true) != 0) {
            rc = -1;
            continue;
        }
        char *next = NULL;
        for (char *line = list; line && *line; line = next) {
            next = strchr(line, '\n');
            if (next)
                *next++ = '\0';
            egress_allow_rule_t rule;
            if (!egress_allow_parse(line, &rule))
                continue;
            if (keep(&rule, ud)) {
                if (ret_kept)
                    (*ret_kept)++;
                continue;
            }
            const char *del[EG_ARGV_MAX + 4];
            size_t k = 0;
            del[k++] = tool;
            del[k++] = "-w";
            del[k++] = "5";
            del[k++] = "-D";
            for (size_t i = 1; i < rule.n; i++)
                del[k++] = rule.argv[i];
            del[k] = NULL;
            char out[EG_OUT_MAX];
            egress_run(tool, del, out, sizeof out); /* gone already: fine */
        }
    }
    free(list);
    return rc;
}

/* A container's addresses on the open network as rule sources ("IP/32",
 * "IP/128"; "" when it has none of that family). */
static void egress_container_sources(const docker_runtime_t *rt, json_object *c, char src[2][NETADDR_CIDR_MAX])
{
    json_object *net = jsonx_get_obj(jsonx_get_obj(jsonx_get_obj(c, "NetworkSettings"), "Networks"),
                                     rt->net_name[NET_OPEN]);
    const char *a[2] = { jsonx_get_str(net, "IPAddress"), jsonx_get_str(net, "GlobalIPv6Address") };
    for (int f = EG_V4; f <= EG_V6; f++) {
        unsigned char bin[16];
        src[f][0] = '\0';
        if (a[f] && strlen(a[f]) < INET6_ADDRSTRLEN && inet_pton(f == EG_V4 ? AF_INET : AF_INET6, a[f], bin) == 1)
            snprintf(src[f], NETADDR_CIDR_MAX, "%s/%d", a[f], f == EG_V4 ? 32 : 128);
    }
}

/* Inserts one rule per CIDR of allow ("," between them) for the sandbox's
 * sources. A CIDR of a family the sandbox has no address in opens nothing. */
static int egress_allow_apply(const egress_names_t *n, const char *sandbox_id, char src[2][NETADDR_CIDR_MAX],
                              const char *allow, api_error_t *err)
{
    char comment[SBX_ID_MAX + 16];
    snprintf(comment, sizeof comment, EG_ALLOW_TAG "%s", sandbox_id);
    for (const char *p = allow; *p;) {
        size_t l = strcspn(p, ",");
        char want[NETADDR_CIDR_MAX], cidr[NETADDR_CIDR_MAX], why[160], out[EG_OUT_MAX];
        bool v6 = false;
        snprintf(want, sizeof want, "%.*s", (int)(l < sizeof want ? l : sizeof want - 1), p);
        p += l + (p[l] == ',');
        if (l >= sizeof want || netaddr_cidr_parse(want, cidr, &v6, why, sizeof why) < 0)
            return api_error_set(err, API_INVALID_ARGUMENT, "egress_allow entry %.80s is not a CIDR", want);
        if (!src[v6][0])
            continue;
        const char *tool = n->rt->egress_tool[v6];
        /* after the RELATED,ESTABLISHED rule (v4), before the reject-all (v6) */
        const char *argv[] = { tool,     "-w", "5",       "-I",      n->egress, v6 ? "1" : "2", "-s",
                               src[v6], "-d", cidr,      "-m",      "comment", "--comment",    comment,
                               "-j",    "RETURN",        NULL };
        if (egress_run(tool, argv, out, sizeof out) != 0)
            return api_error_set(err, API_ISOLATION_UNAVAILABLE, "cannot open egress to %s for sandbox %s: %.150s",
                                 cidr, sandbox_id, out[0] ? out : "iptables failed");
    }
    return 0;
}

/* keep: not the sandbox's, and not from its address (a stale rule of a
 * container that had it before). */
typedef struct {
    const char *sandbox_id;
    char (*src)[NETADDR_CIDR_MAX];
} egress_other_t;

static bool egress_keep_other(const egress_allow_rule_t *rule, void *ud)
{
    const egress_other_t *o = ud;
    if (strcmp(rule->sandbox_id, o->sandbox_id) == 0)
        return false;
    return !o->src || (strcmp(rule->source, o->src[EG_V4]) != 0 && strcmp(rule->source, o->src[EG_V6]) != 0);
}

int docker_egress_allow_add(docker_runtime_t *rt, const char *sandbox_id, const char *container_id,
                            const char *allow, api_error_t *err)
{
    egress_names_t n;
    json_object *o = NULL;
    const char *id = NULL;
    char src[2][NETADDR_CIDR_MAX];
    if (!allow || !*allow)
        return 0;
    if (!rt->egress_ready)
        return api_error_set(err, API_ISOLATION_UNAVAILABLE,
                             "network %s has no egress rules of this worker to open for egress_allow",
                             rt->net_name[NET_OPEN]);
    int r = docker_container_inspect(rt, container_id, DOCKER_CALL_TIMEOUT_MS, &o, &id, err);
    if (r < 0)
        return r;
    egress_container_sources(rt, o, src);
    json_object_put(o);
    if (!src[EG_V4][0] && !src[EG_V6][0])
        return api_error_set(err, API_RUNTIME_ERROR, "the container of sandbox %s has no address on network %s",
                             sandbox_id, rt->net_name[NET_OPEN]);
    egress_names_init(&n, rt);
    atomic_fetch_add(&rt->egress_adds, 1);
    atomic_store(&rt->egress_rules_any, true);
    egress_other_t other = { sandbox_id, src };
    egress_allow_prune(&n, egress_keep_other, &other, NULL);
    r = egress_allow_apply(&n, sandbox_id, src, allow, err);
    if (r < 0)
        docker_egress_allow_drop(rt, sandbox_id);
    return r;
}

void docker_egress_allow_drop(docker_runtime_t *rt, const char *sandbox_id)
{
    egress_names_t n;
    if (!rt->egress_ready || !sandbox_id || !atomic_load(&rt->egress_rules_any))
        return;
    egress_names_init(&n, rt);
    egress_other_t other = { sandbox_id, NULL };
    egress_allow_prune(&n, egress_keep_other, &other, NULL);
}

/* keep: a running sandbox container (any worker's: the chains are the
 * Docker host's) with that id and that address. The list is fetched at the
 * first rule; when it cannot be, every rule stays. */
typedef struct {
    docker_runtime_t *rt;
    json_object *list;
    bool fetched, failed;
} egress_live_t;

static bool egress_keep_live(const egress_allow_rule_t *rule, void *ud)
{
    egress_live_t *live = ud;
    if (!live->fetched) {
        api_error_t ignored;
        live->fetched = true;
        live->failed = docker_container_list(live->rt, RUNTIME_LABEL_EGRESS_ALLOW, &live->list, &ignored) < 0;
    }
    if (live->failed)
        return true;
    for (size_t i = 0; i < json_object_array_length(live->list); i++) {
        json_object *c = json_object_array_get_idx(live->list, i);
        const char *sbx = jsonx_get_str(jsonx_get_obj(c, "Labels"), RUNTIME_LABEL_SANDBOX);
        const char *state = jsonx_get_str(c, "State");
        char src[2][NETADDR_CIDR_MAX];
        if (!sbx || strcmp(sbx, rule->sandbox_id) != 0 || !state || strcmp(state, "running") != 0)
            continue;
        egress_container_sources(live->rt, c, src);
        if (strcmp(rule->source, src[EG_V4]) == 0 || strcmp(rule->source, src[EG_V6]) == 0)
            return true;
    }
    return false;
}

void docker_egress_allow_sweep(docker_runtime_t *rt)
{
    egress_names_t n;
    if (!rt->egress_ready)
        return;
    egress_names_init(&n, rt);
    egress_live_t live = { rt, NULL, false, false };
    unsigned adds = atomic_load(&rt->egress_adds);
    size_t kept = 0;
    /* Until a sweep has run (after a restart) rules may be left from
     * before: egress_rules_any starts true. */
    if (egress_allow_prune(&n, egress_keep_live, &live, &kept) == 0 && kept == 0 &&
        atomic_load(&rt->egress_adds) == adds)
        atomic_store(&rt->egress_rules_any, false);
    if (live.list)
        json_object_put(live.list);
}

/* After setup flushed the chains: the rules of the running sandbox
 * containers whose label (the worker's record) lists CIDRs. */
static void egress_allow_restore(docker_runtime_t *rt)
{
    egress_names_t n;
    json_object *list = NULL;
    api_error_t err;
    if (docker_container_list(rt, RUNTIME_LABEL_EGRESS_ALLOW, &list, &err) < 0) {
        log_warn("worker", "cannot restore the egress_allow rules: %s", err.message);
        return;
    }
    egress_names_init(&n, rt);
    for (size_t i = 0; i < json_object_array_length(list); i++) {
        json_object *c = json_object_array_get_idx(list, i);
        json_object *labels = jsonx_get_obj(c, "Labels");
        const char *sbx = jsonx_get_str(labels, RUNTIME_LABEL_SANDBOX);
        const char *managed = jsonx_get_str(labels, RUNTIME_LABEL_MANAGED);
        const char *allow = jsonx_get_str(labels, RUNTIME_LABEL_EGRESS_ALLOW);
        const char *state = jsonx_get_str(c, "State");
        char src[2][NETADDR_CIDR_MAX];
        if (!sbx || !docker_name_ok(sbx, SBX_ID_MAX) || !managed || strcmp(managed, RUNTIME_MANAGED_SANDBOX) != 0 ||
            !allow || !*allow || !state || strcmp(state, "running") != 0)
            continue;
        egress_container_sources(rt, c, src);
        if (egress_allow_apply(&n, sbx, src, allow, &err) < 0)
            log_warn("worker", "cannot restore the egress_allow rules of sandbox %s: %s", sbx, err.message);
    }
    json_object_put(list);
}
