/* The filtered network (issue 33, docs/network.md): sandboxes with egress
 * rules by domain run on a bridge of their own whose TCP, DNS and other UDP
 * the host's iptables send to the egress filter (tools/sandbox-egress, a child
 * of the worker), and nothing else out or into the host. The worker tells
 * the filter which address is which sandbox with which rules, from the
 * container's labels (the worker's record, so a restarted worker or filter
 * learns them again), or from the file a live change of its rules left
 * under /run (a label cannot change). */
#include "docker_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fdutil.h"
#include "jsonx.h"
#include "log.h"

extern char **environ;

#define FILTER_CONTROL_TIMEOUT_S 5
#define FILTER_UDP_PORTS 8 /* sandbox-egress --udp: its port and the next 7 (EGD_UDP_PORTS) */

#define control_call docker_filter_call

/* A free port of the gateway address (kind: SOCK_STREAM, SOCK_DGRAM). */
static int free_port(const char *gw, int kind)
{
    struct sockaddr_in a = { .sin_family = AF_INET };
    socklen_t l = sizeof a;
    int fd = socket(AF_INET, kind | SOCK_CLOEXEC, 0), port = -1;
    if (fd >= 0 && inet_pton(AF_INET, gw, &a.sin_addr) == 1 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &l) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

/* The first of FILTER_UDP_PORTS free UDP ports in a row of the gateway
 * address (not dns's), or -1. */
static int free_udp_ports(const char *gw, int dns)
{
    struct sockaddr_in a = { .sin_family = AF_INET };
    if (inet_pton(AF_INET, gw, &a.sin_addr) != 1)
        return -1;
    for (int tries = 0; tries < 64; tries++) {
        int base = 20000 + (int)(((unsigned)getpid() * 7919u + (unsigned)tries * 104729u + (unsigned)time(NULL)) %
                                 10000u);
        int fds[FILTER_UDP_PORTS], n = 0;
        bool ok = !(dns >= base && dns < base + FILTER_UDP_PORTS);
        for (; ok && n < FILTER_UDP_PORTS; n++) {
            a.sin_port = htons((uint16_t)(base + n));
            fds[n] = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
            ok = fds[n] >= 0 && bind(fds[n], (struct sockaddr *)&a, sizeof a) == 0;
            if (!ok && fds[n] >= 0)
                close(fds[n]);
        }
        for (int i = 0; i < n - (ok ? 0 : 1); i++)
            close(fds[i]);
        if (ok)
            return base;
    }
    return -1;
}

/* iptables with argv; -1 with err when it fails. */
static int ipt(docker_runtime_t *rt, const char *const *argv, bool quiet, api_error_t *err)
{
    char out[400];
    int rc = docker_tool_run(rt->filter_tool, argv, out, sizeof out, false);
    if (rc != 0 && !quiet)
        return api_error_set(err, API_ISOLATION_UNAVAILABLE, "iptables for the filtered network: %s", out);
    return rc == 0 ? 0 : -1;
}

/* Inserts the jump `-t table chain -i iface -j target` first unless it is
 * there. */
static int ipt_first(docker_runtime_t *rt, const char *table, const char *chain, const char *iface,
                     const char *target, api_error_t *err)
{
    const char *t = rt->filter_tool;
    const char *check[] = { t, "-w", "5", "-t", table, "-C", chain, "-i", iface, "-j", target, NULL };
    const char *insert[] = { t, "-w", "5", "-t", table, "-I", chain, "1", "-i", iface, "-j", target, NULL };
    if (ipt(rt, check, true, err) == 0 || ipt(rt, insert, false, err) == 0)
        return 0;
    return SBX_EUNAVAIL;
}

/* The rules: the bridge's TCP, DNS and other UDP to the filter, nothing
 * else into the host, nothing forwarded; the same for the microVMs' taps
 * (named nic_prefix and a number, docker_nic.c) when there are any. Each
 * chain is the bridge's own and flushed first, so a restart leaves one set.
 * The filter listens on the bridge's gateway: DNAT there (a tap's own
 * address is not the filter's). Other UDP goes to a range of its ports, so
 * that one sandbox port may have as many destinations at once (the reply
 * tuples must differ); the filter learns each one's destination from the
 * connection tracking. */
static int rules_install(docker_runtime_t *rt, api_error_t *err)
{
    char nat[40], in[40], tport[8], dport[8], uports[16], tto[64], dto[64], uto[64], taps[16];
    int u0 = rt->filter_udp_port, u1 = rt->filter_udp_port + FILTER_UDP_PORTS - 1;
    snprintf(nat, sizeof nat, "SBX-FNAT-%s", rt->filter_bridge);
    snprintf(in, sizeof in, "SBX-FIN-%s", rt->filter_bridge);
    snprintf(tport, sizeof tport, "%d", rt->filter_tcp_port);
    snprintf(dport, sizeof dport, "%d", rt->filter_dns_port);
    snprintf(uports, sizeof uports, "%d:%d", u0, u1);
    snprintf(tto, sizeof tto, "%s:%d", rt->filter_gw, rt->filter_tcp_port);
    snprintf(dto, sizeof dto, "%s:%d", rt->filter_gw, rt->filter_dns_port);
    snprintf(uto, sizeof uto, "%s:%d-%d", rt->filter_gw, u0, u1);
    snprintf(taps, sizeof taps, "%s+", rt->nic_prefix);
    const char *t = rt->filter_tool, *br = rt->filter_bridge;
    /* chains (exist already after a restart: then flushed) */
    const char *mk_nat[] = { t, "-w", "5", "-t", "nat", "-N", nat, NULL };
    const char *mk_in[] = { t, "-w", "5", "-N", in, NULL };
    ipt(rt, mk_nat, true, err);
    ipt(rt, mk_in, true, err);
    const char *fl_nat[] = { t, "-w", "5", "-t", "nat", "-F", nat, NULL };
    const char *fl_in[] = { t, "-w", "5", "-F", in, NULL };
    const char *r1[] = { t, "-w", "5", "-t", "nat", "-A", nat, "-p", "tcp", "-j", "DNAT", "--to-destination", tto,
                         NULL };
    const char *r2[] = { t, "-w", "5", "-t", "nat", "-A", nat, "-p", "udp", "--dport", "53", "-j", "DNAT",
                         "--to-destination", dto, NULL };
    const char *r2u[] = { t, "-w", "5", "-t", "nat", "-A", nat, "-p", "udp", "-j", "DNAT", "--to-destination", uto,
                          NULL };
    const char *r3[] = { t, "-w", "5", "-A", in, "-p", "tcp", "--dport", tport, "-j", "ACCEPT", NULL };
    const char *r4[] = { t, "-w", "5", "-A", in, "-p", "udp", "--dport", dport, "-j", "ACCEPT", NULL };
    const char *r4u[] = { t, "-w", "5", "-A", in, "-p", "udp", "--dport", uports, "-j", "ACCEPT", NULL };
    const char *r5[] = { t, "-w", "5", "-A", in, "-j", "DROP", NULL };
    if (ipt(rt, fl_nat, false, err) < 0 || ipt(rt, fl_in, false, err) < 0 || ipt(rt, r1, false, err) < 0 ||
        ipt(rt, r2, false, err) < 0 || ipt(rt, r2u, false, err) < 0 || ipt(rt, r3, false, err) < 0 ||
        ipt(rt, r4, false, err) < 0 || ipt(rt, r4u, false, err) < 0 || ipt(rt, r5, false, err) < 0)
        return SBX_EUNAVAIL;
    /* the jumps, once each, first (before Docker's own rules) */
    if (ipt_first(rt, "nat", "PREROUTING", br, nat, err) < 0 || ipt_first(rt, "filter", "INPUT", br, in, err) < 0 ||
        ipt_first(rt, "filter", "FORWARD", br, "DROP", err) < 0)
        return SBX_EUNAVAIL;
    if (!rt->nic_prefix[0])
        return 0;
    if (ipt_first(rt, "nat", "PREROUTING", taps, nat, err) < 0 ||
        ipt_first(rt, "filter", "INPUT", taps, in, err) < 0 ||
        ipt_first(rt, "filter", "FORWARD", taps, "DROP", err) < 0)
        return SBX_EUNAVAIL;
    /* a tap sends from its guest's address only (strict reverse path,
     * whatever the host's rp_filter says): a guest that takes another VM's
     * address to borrow its rules is dropped before the filter sees it */
    const char *c7[] = { t, "-w", "5", "-t", "raw", "-C", "PREROUTING", "-i", taps, "-m", "rpfilter", "--invert",
                         "-j", "DROP", NULL };
    const char *i7[] = { t, "-w", "5", "-t", "raw", "-I", "PREROUTING", "1", "-i", taps, "-m", "rpfilter",
                         "--invert", "-j", "DROP", NULL };
    if (ipt(rt, c7, true, err) < 0 && ipt(rt, i7, false, err) < 0)
        return SBX_EUNAVAIL;
    return 0;
}

/* Starts the filter on the gateway's ports; waits for its control socket. */
static int filter_spawn(docker_runtime_t *rt, api_error_t *err)
{
    char tcp[64], dns[64], udp[64];
    rt->filter_tcp_port = free_port(rt->filter_gw, SOCK_STREAM);
    rt->filter_dns_port = free_port(rt->filter_gw, SOCK_DGRAM);
    rt->filter_udp_port = free_udp_ports(rt->filter_gw, rt->filter_dns_port);
    if (rt->filter_tcp_port <= 0 || rt->filter_dns_port <= 0 || rt->filter_udp_port <= 0)
        return api_error_set(err, API_ISOLATION_UNAVAILABLE, "no free port on the filtered bridge's %s",
                             rt->filter_gw);
    snprintf(tcp, sizeof tcp, "%s:%d", rt->filter_gw, rt->filter_tcp_port);
    snprintf(dns, sizeof dns, "%s:%d", rt->filter_gw, rt->filter_dns_port);
    snprintf(udp, sizeof udp, "%s:%d", rt->filter_gw, rt->filter_udp_port);
    char *argv[] = { rt->filter_cmd, "--tcp", tcp, "--dns", dns, "--udp", udp, "--upstream", rt->filter_upstream,
                     "--control", rt->filter_control, "--exit-with-parent", NULL, NULL, NULL };
    if (rt->filter_upstream_ca[0]) {
        argv[12] = "--upstream-ca";
        argv[13] = rt->filter_upstream_ca;
    }
    unlink(rt->filter_control);
    pid_t pid;
    /* stdin from /dev/null, its log on the worker's stderr, nothing else of
     * the worker's (docs/security.md "Descriptors") */
    posix_spawn_file_actions_t fa;
    int rc = posix_spawn_file_actions_init(&fa);
    if (rc == 0 && (rc = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0)) == 0 &&
        (rc = posix_spawn_file_actions_adddup2(&fa, 2, 1)) == 0 && (rc = fd_spawn_close_from(&fa, 3)) == 0)
        rc = posix_spawn(&pid, rt->filter_cmd, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        return api_error_set(err, API_ISOLATION_UNAVAILABLE, "cannot start the egress filter %s: %s",
                             rt->filter_cmd, strerror(rc));
    rt->filter_pid = pid;
    for (int i = 0; i < 100; i++) {
        json_object *req = json_object_new_object(), *resp = NULL;
        jsonx_add_str(req, "op", "stats");
        api_error_t e;
        int r = control_call(rt, req, &resp, &e);
        json_object_put(req);
        json_object_put(resp);
        if (r == 0)
            return 0;
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            rt->filter_pid = 0;
            return api_error_set(err, API_ISOLATION_UNAVAILABLE, "the egress filter %s exited at start (status %d; "
                                 "see the worker's log)", rt->filter_cmd, st);
        }
        struct timespec ts = { 0, 50 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    return api_error_set(err, API_ISOLATION_UNAVAILABLE, "the egress filter did not answer on %s",
                         rt->filter_control);
}

bool docker_filter_file(const docker_runtime_t *rt, const char *sandbox_id, const char *suffix, char *out,
                        size_t len)
{
    if (!rt->filter_rules_dir[0] || !sandbox_id || strncmp(sandbox_id, "sbx_", 4) != 0 || strlen(sandbox_id) > 64 ||
        strspn(sandbox_id + 4, "0123456789abcdefghijklmnopqrstuvwxyz") != strlen(sandbox_id + 4))
        return false;
    return (size_t)snprintf(out, len, "%s/%s%s", rt->filter_rules_dir, sandbox_id, suffix) < len;
}

/* The files are at most this large (2 × 256 domains of at most 253 bytes,
 * quoted; or a CA and 8 secrets of 4 KiB with 16 hosts each). */
#define FILTER_FILE_MAX (256 * 1024)

json_object *docker_filter_load(const docker_runtime_t *rt, const char *sandbox_id, const char *suffix)
{
    char path[192];
    if (!docker_filter_file(rt, sandbox_id, suffix, path, sizeof path))
        return NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return NULL;
    char *buf = malloc(FILTER_FILE_MAX);
    size_t n = 0;
    for (ssize_t k = 1; buf && k > 0 && n < FILTER_FILE_MAX;) /* a short read is not the end */
        if ((k = read(fd, buf + n, FILTER_FILE_MAX - n)) > 0)
            n += (size_t)k;
    close(fd);
    json_object *o = NULL;
    if (!buf || n == 0 || n == FILTER_FILE_MAX || jsonx_parse(buf, n, &o, NULL) < 0 ||
        !json_object_is_type(o, json_type_object)) {
        json_object_put(o);
        o = NULL;
    }
    if (buf) { /* it may hold secrets */
        explicit_bzero(buf, n);
        free(buf);
    }
    return o;
}

int docker_filter_keep(const docker_runtime_t *rt, const char *sandbox_id, const char *suffix, const char *text,
                       api_error_t *err)
{
    char path[192], tmp[200];
    if (!docker_filter_file(rt, sandbox_id, suffix, path, sizeof path))
        return api_error_set(err, API_INVALID_ARGUMENT, "bad sandbox id");
    if (!text)
        return unlink(path) == 0 || errno == ENOENT ? 0 : api_error_set(err, API_RUNTIME_ERROR, "remove %s: %s",
                                                                          path, strerror(errno));
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    size_t len = strlen(text);
    bool ok = fd >= 0 && len < FILTER_FILE_MAX && write(fd, text, len) == (ssize_t)len && fsync(fd) == 0;
    int e = errno;
    if (fd >= 0)
        close(fd);
    if (!ok || rename(tmp, path) != 0) {
        e = ok ? errno : e;
        unlink(tmp);
        return api_error_set(err, API_RUNTIME_ERROR, "cannot keep %s: %s", path, strerror(e));
    }
    return 0;
}

static void filter_restore(docker_runtime_t *rt)
{
    json_object *list = NULL;
    api_error_t err;
    if (docker_container_list(rt, RUNTIME_LABEL_EGRESS, &list, &err) < 0) {
        log_warn("worker", "cannot restore the egress filter's sandboxes: %s", err.message);
        return;
    }
    for (size_t i = 0; i < json_object_array_length(list); i++) {
        json_object *c = json_object_array_get_idx(list, i);
        const char *sbx = jsonx_get_str(jsonx_get_obj(c, "Labels"), RUNTIME_LABEL_SANDBOX);
        const char *state = jsonx_get_str(c, "State"), *id = jsonx_get_str(c, "Id");
        if (sbx && id && state && strcmp(state, "running") == 0 && docker_filter_add(rt, sbx, id, &err) < 0)
            log_warn("worker", "cannot give the egress filter sandbox %s: %s", sbx, err.message);
    }
    json_object_put(list);
}

int docker_filter_setup(docker_runtime_t *rt, const char *cmd, const char *upstream, api_error_t *err)
{
    pthread_mutex_init(&rt->filter_mu, NULL);
    rt->filter_mu_init = true;
    if (!upstream || !*upstream)
        return api_error_set(err, API_ISOLATION_UNAVAILABLE, "disabled (worker_egress_upstream is empty)");
    if (!rt->net_name[NET_OFFER_FILTERED][0])
        return api_error_set(err, API_ISOLATION_UNAVAILABLE, "disabled (worker_filtered_network is empty)");
    snprintf(rt->filter_upstream, sizeof rt->filter_upstream, "%s", upstream);
    if (cmd && *cmd) {
        snprintf(rt->filter_cmd, sizeof rt->filter_cmd, "%s", cmd);
    } else { /* beside this program */
        char self[RUNSC_PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        self[n > 0 ? n : 0] = '\0';
        char *slash = strrchr(self, '/');
        if (slash)
            *slash = '\0';
        snprintf(rt->filter_cmd, sizeof rt->filter_cmd, "%.*s/sandbox-egress", (int)sizeof self - 20, self);
    }
    if (access(rt->filter_cmd, X_OK) != 0)
        return api_error_set(err, API_ISOLATION_UNAVAILABLE, "the egress filter %s cannot be run: %s", rt->filter_cmd,
                             strerror(errno));
    if (!docker_tool_find("iptables", rt->filter_tool))
        return api_error_set(err, API_ISOLATION_UNAVAILABLE, "iptables not found");
    int r;
    if ((r = docker_network_ensure(rt, (net_mode_t)NET_OFFER_FILTERED, err)) < 0 ||
        (r = docker_network_bridge(rt, NET_OFFER_FILTERED, rt->filter_bridge, rt->filter_gw, sizeof rt->filter_gw,
                                   err)) < 0)
        return r;
    snprintf(rt->filter_control, sizeof rt->filter_control, "/run/sandbox-egress-%s.sock", rt->filter_bridge);
    snprintf(rt->filter_rules_dir, sizeof rt->filter_rules_dir, "/run/sandbox-egress-%s.rules", rt->filter_bridge);
    if (mkdir(rt->filter_rules_dir, 0700) != 0 && errno != EEXIST)
        return api_error_set(err, API_ISOLATION_UNAVAILABLE, "cannot make %s: %s", rt->filter_rules_dir,
                             strerror(errno));
    docker_nic_setup(rt);
    if ((r = filter_spawn(rt, err)) < 0 || (r = rules_install(rt, err)) < 0) {
        docker_filter_stop(rt);
        return r;
    }
    rt->filter_ready = true;
    filter_restore(rt);
    docker_nic_restore(rt);
    log_info("worker", "egress filter %s (pid %d) on %s: tcp %d, dns %d, udp %d+%d; upstream %s, network %s",
             rt->filter_cmd, (int)rt->filter_pid, rt->filter_gw, rt->filter_tcp_port, rt->filter_dns_port,
             rt->filter_udp_port, FILTER_UDP_PORTS - 1, upstream, rt->net_name[NET_OFFER_FILTERED]);
    return 0;
}

void docker_filter_stop(docker_runtime_t *rt)
{
    if (rt->filter_pid > 0) {
        kill(rt->filter_pid, SIGTERM);
        for (int i = 0; i < 100; i++) {
            if (waitpid(rt->filter_pid, NULL, WNOHANG) == rt->filter_pid)
                break;
            struct timespec ts = { 0, 20 * 1000 * 1000 };
            nanosleep(&ts, NULL);
            if (i == 99) {
                kill(rt->filter_pid, SIGKILL);
                waitpid(rt->filter_pid, NULL, 0);
            }
        }
        rt->filter_pid = 0;
        unlink(rt->filter_control);
    }
    rt->filter_ready = false;
    if (rt->filter_mu_init) {
        pthread_mutex_destroy(&rt->filter_mu);
        rt->filter_mu_init = false;
    }
}

int docker_filter_check(docker_runtime_t *rt, api_error_t *err)
{
    if (!rt->filter_ready)
        return 0;
    int st;
    if (rt->filter_pid > 0 && waitpid(rt->filter_pid, &st, WNOHANG) != rt->filter_pid)
        return 0;
    /* it died: again, with every sandbox it knew */
    log_warn("worker", "the egress filter (pid %d) is gone: starting it again", (int)rt->filter_pid);
    rt->filter_pid = 0;
    int r = filter_spawn(rt, err);
    if (r == 0)
        r = rules_install(rt, err);
    if (r == 0) {
        filter_restore(rt);
        docker_nic_restore(rt);
    }
    return r;
}

/* One request to the filter, one answer line; under filter_mu. */
int docker_filter_call(docker_runtime_t *rt, json_object *req, json_object **ret, api_error_t *err)
{
    *ret = NULL;
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    size_t pl = strlen(rt->filter_control);
    if (pl >= sizeof a.sun_path)
        return api_error_set(err, API_INTERNAL, "control path too long");
    memcpy(a.sun_path, rt->filter_control, pl + 1);
    const char *text = json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN);
    pthread_mutex_lock(&rt->filter_mu);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), r = -1;
    struct timeval tv = { FILTER_CONTROL_TIMEOUT_S, 0 };
    char buf[65536];
    size_t got = 0;
    if (fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0 &&
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) == 0 &&
        connect(fd, (struct sockaddr *)&a, sizeof a) == 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text) &&
        write(fd, "\n", 1) == 1) {
        while (got < sizeof buf - 1) {
            ssize_t n = read(fd, buf + got, sizeof buf - 1 - got);
            if (n <= 0)
                break;
            got += (size_t)n;
            if (buf[got - 1] == '\n') {
                r = 0;
                break;
            }
        }
    }
    int e = errno;
    if (fd >= 0)
        close(fd);
    pthread_mutex_unlock(&rt->filter_mu);
    if (r < 0)
        return api_error_set(err, API_RUNTIME_ERROR, "the egress filter does not answer: %s", strerror(e));
    buf[got] = '\0';
    if (jsonx_parse(buf, got, ret, NULL) < 0)
        return api_error_set(err, API_RUNTIME_ERROR, "the egress filter answered no JSON");
    bool ok = false;
    jsonx_get_bool(*ret, "ok", &ok);
    if (!ok) {
        api_error_set(err, API_RUNTIME_ERROR, "the egress filter refused: %.300s",
                      jsonx_get_str(*ret, "error") ? jsonx_get_str(*ret, "error") : "?");
        json_object_put(*ret);
        *ret = NULL;
        return SBX_ERUNTIME;
    }
    return 0;
}

int docker_filter_add(docker_runtime_t *rt, const char *sandbox_id, const char *container_id, api_error_t *err)
{
    if (!rt->filter_ready)
        return api_error_set(err, API_ISOLATION_UNAVAILABLE, "this worker runs no egress filter");
    json_object *o = NULL;
    const char *id = NULL;
    int r = docker_container_inspect(rt, container_id, DOCKER_CALL_TIMEOUT_MS, &o, &id, err);
    if (r < 0)
        return r;
    json_object *labels = jsonx_get_obj(jsonx_get_obj(o, "Config"), "Labels");
    const char *rules = jsonx_get_str(labels, RUNTIME_LABEL_EGRESS);
    const char *tenant = jsonx_get_str(labels, RUNTIME_LABEL_TENANT);
    const char *allow = jsonx_get_str(labels, RUNTIME_LABEL_EGRESS_ALLOW);
    json_object *net = jsonx_get_obj(jsonx_get_obj(jsonx_get_obj(o, "NetworkSettings"), "Networks"),
                                     rt->net_name[NET_OFFER_FILTERED]);
    const char *addr = jsonx_get_str(net, "IPAddress");
    json_object *rj = rules ? docker_filter_load(rt, sandbox_id, ".json") : NULL;
    if (!rules || (!rj && jsonx_parse(rules, strlen(rules), &rj, NULL) < 0) || !addr || !*addr) {
        json_object_put(o);
        json_object_put(rj);
        return api_error_set(err, API_RUNTIME_ERROR, "the container of sandbox %s has no %s", sandbox_id,
                             !addr || !*addr ? "address on the filtered network" : "egress rules label");
    }
    json_object *req = json_object_new_object(), *cidrs = json_object_new_array(), *resp = NULL;
    jsonx_add_str(req, "op", "set");
    jsonx_add_str(req, "addr", addr);
    jsonx_add_str(req, "sandbox", sandbox_id);
    jsonx_add_str(req, "tenant", tenant ? tenant : "");
    jsonx_add(req, "rules", rj);
    for (const char *p = allow; p && *p;) {
        const char *comma = strchr(p, ',');
        size_t l = comma ? (size_t)(comma - p) : strlen(p);
        json_object_array_add(cidrs, json_object_new_string_len(p, (int)l));
        p = comma ? comma + 1 : p + l;
    }
    jsonx_add(req, "cidrs", cidrs);
    json_object_put(o);
    json_object *tls = docker_filter_load(rt, sandbox_id, ".tls.json"); /* its CA and secrets, if it has any */
    if (tls) {
        jsonx_add(req, "ca", json_object_get(jsonx_get_obj(tls, "ca")));
        jsonx_add(req, "secrets", json_object_get(jsonx_get_arr(tls, "secrets")));
        json_object_put(tls);
    }
    r = control_call(rt, req, &resp, err);
    json_object_put(req);
    json_object_put(resp);
    return r;
}

static int filter_tell_container(docker_runtime_t *rt, const char *sandbox_id, const char *ref, api_error_t *err)
{
    return docker_filter_add(rt, sandbox_id, ref, err);
}

int docker_filter_egress_set(docker_runtime_t *rt, const char *sandbox_id, const char *ref, json_object *egress,
                             api_error_t *err)
{
    if (!rt->filter_ready)
        return api_error_set(err, API_ISOLATION_UNAVAILABLE, "this worker runs no egress filter");
    json_object *o = NULL;
    const char *id = NULL;
    int r = docker_container_inspect(rt, ref, DOCKER_CALL_TIMEOUT_MS, &o, &id, err);
    if (r < 0)
        return r;
    bool made_with = jsonx_get_str(jsonx_get_obj(jsonx_get_obj(o, "Config"), "Labels"), RUNTIME_LABEL_EGRESS);
    json_object_put(o);
    if (!made_with)
        return api_error_set(err, API_CONFLICT, "sandbox %s was made without egress rules", sandbox_id);
    return docker_filter_rules_change(rt, sandbox_id, egress, filter_tell_container, ref, err);
}

int docker_filter_rules_change(docker_runtime_t *rt, const char *sandbox_id, json_object *egress,
                               int (*tell)(docker_runtime_t *rt, const char *sandbox_id, const char *ref,
                                           api_error_t *err),
                               const char *ref, api_error_t *err)
{
    json_object *before = docker_filter_load(rt, sandbox_id, ".json");
    char *was = before ? jsonx_dump(before) : NULL, *text = jsonx_dump(egress);
    json_object_put(before);
    int r;
    if (!text)
        r = api_error_set(err, API_INTERNAL, "out of memory");
    else if ((r = docker_filter_keep(rt, sandbox_id, ".json", text, err)) == 0 &&
             (r = tell(rt, sandbox_id, ref, err)) < 0) {
        api_error_t ignored;
        if (docker_filter_keep(rt, sandbox_id, ".json", was, &ignored) < 0)
            log_warn("worker", "egress filter: cannot put back the rules of %s: %s", sandbox_id, ignored.message);
    }
    free(was);
    free(text);
    return r;
}

int docker_filter_drain(docker_runtime_t *rt, int max, json_object **ret, int64_t *ret_dropped, api_error_t *err)
{
    if (!rt->filter_ready)
        return api_error_set(err, API_ISOLATION_UNAVAILABLE, "this worker runs no egress filter");
    json_object *req = json_object_new_object(), *resp = NULL;
    jsonx_add_str(req, "op", "drain");
    jsonx_add_int(req, "max", max);
    int r = control_call(rt, req, &resp, err);
    json_object_put(req);
    if (r < 0)
        return r;
    json_object *recs = jsonx_get_arr(resp, "records");
    jsonx_get_int(resp, "dropped", ret_dropped);
    *ret = recs ? json_object_get(recs) : json_object_new_array();
    json_object_put(resp);
    return 0;
}

void docker_filter_drop(docker_runtime_t *rt, const char *sandbox_id)
{
    api_error_t ignored;
    if (sandbox_id && rt->filter_rules_dir[0]) {
        docker_filter_keep(rt, sandbox_id, ".json", NULL, &ignored);
        docker_filter_keep(rt, sandbox_id, ".tls.json", NULL, &ignored);
    }
    if (!rt->filter_ready || !sandbox_id)
        return;
    json_object *req = json_object_new_object(), *resp = NULL;
    jsonx_add_str(req, "op", "drop");
    jsonx_add_str(req, "sandbox", sandbox_id);
    api_error_t err;
    if (control_call(rt, req, &resp, &err) < 0)
        log_warn("worker", "egress filter: drop %s: %s", sandbox_id, err.message);
    json_object_put(req);
    json_object_put(resp);
}
