/* sandbox-egress: the worker's egress filter for sandboxes with egress
 * rules by domain (tools/egress/egressd.h, docs/network.md). */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "egressd.h"

static const char usage[] =
    "usage: sandbox-egress --tcp HOST:PORT --dns HOST:PORT [--udp IPV4:PORT] --upstream HOST:PORT --control PATH\n"
    "The egress filter of filtered sandboxes (docs/network.md). The worker starts it\n"
    "and redirects its sandboxes' TCP to --tcp and their DNS (UDP 53) to --dns.\n"
    "  --tcp HOST:PORT       where redirected TCP connections arrive\n"
    "  --dns HOST:PORT       where redirected DNS queries arrive (UDP)\n"
    "  --udp IPV4:PORT       where other redirected UDP arrives: PORT and the next 7 (the redirect\n"
    "                        picks one per flow); its original destination comes from the kernel's\n"
    "                        connection tracking (CAP_NET_ADMIN); without it no other UDP is taken\n"
    "  --upstream HOST:PORT  the resolver allowed names are asked of (UDP)\n"
    "  --control PATH        the worker's unix socket (JSON lines: set, drop, stats, drain)\n"
    "  --exit-with-parent    stop when the process that started it is gone (the worker's)\n"
    "  --name-timeout S      a connection that names no host within S seconds is reset (1-60, default 10)\n"
    "  --upstream-ca FILE    the CAs (PEM) a secret-bound host's certificate must chain to (default: the\n"
    "                        system's); see docs/network.md#secrets-at-egress\n"
    "Exits 2 on a usage error, 1 when it cannot start; runs until SIGTERM or SIGINT.\n";

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)sig, (void)what;
    event_base_loopexit(arg, NULL);
}

static pid_t parent;

/* --exit-with-parent: a worker killed outright leaves no filter behind */
static void on_parent_check(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    if (getppid() != parent) {
        fprintf(stderr, "sandbox-egress: the process that started it is gone: stopping\n");
        event_base_loopexit(arg, NULL);
    }
}

int main(int argc, char **argv)
{
    const char *tcp = NULL, *dns = NULL, *udp = NULL, *upstream = NULL, *control = NULL, *name_timeout = NULL, *upstream_ca = NULL;
    bool with_parent = false;
    parent = getppid();
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--exit-with-parent") == 0) {
            with_parent = true;
            continue;
        }
        const char **dst = strcmp(argv[i], "--tcp") == 0 ? &tcp : strcmp(argv[i], "--dns") == 0 ? &dns
                           : strcmp(argv[i], "--udp") == 0 ? &udp
                           : strcmp(argv[i], "--upstream") == 0 ? &upstream
                           : strcmp(argv[i], "--control") == 0 ? &control
                           : strcmp(argv[i], "--name-timeout") == 0 ? &name_timeout
                           : strcmp(argv[i], "--upstream-ca") == 0 ? &upstream_ca : NULL;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage, stdout);
            return 0;
        }
        if (!dst || i + 1 >= argc) {
            fprintf(stderr, "sandbox-egress: %s: %s\n%s", argv[i], dst ? "needs a value" : "unknown flag", usage);
            return 2;
        }
        *dst = argv[++i];
    }
    if (!tcp || !dns || !upstream || !control) {
        fprintf(stderr, "sandbox-egress: --tcp, --dns, --upstream and --control are required\n%s", usage);
        return 2;
    }
    char *end = NULL;
    long nt = name_timeout ? strtol(name_timeout, &end, 10) : EGD_PEEK_TIMEOUT_S;
    if (name_timeout && (!*name_timeout || *end || nt < 1 || nt > 60)) {
        fprintf(stderr, "sandbox-egress: --name-timeout: seconds from 1 to 60, not %s\n", name_timeout);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    egd_t d;
    memset(&d, 0, sizeof d);
    d.name_timeout_s = (int)nt;
    d.dns_fd = d.up_fd = d.ct_fd = -1;
    for (int i = 0; i < EGD_UDP_PORTS; i++)
        d.udp_fds[i] = -1;
    d.base = event_base_new();
    d.sbx = calloc(EGD_SANDBOXES_MAX, sizeof *d.sbx);
    d.cache = calloc(EGD_CACHE_MAX, sizeof *d.cache);
    d.records = calloc(EGD_RECORDS_MAX, sizeof *d.records);
    char err[300] = "";
    if (!d.base || !d.sbx || !d.cache || !d.records) {
        fprintf(stderr, "sandbox-egress: out of memory\n");
        return 1;
    }
    if (egd_tls_init(upstream_ca, err, sizeof err) < 0 || egd_dns_start(&d, dns, upstream, err, sizeof err) < 0 ||
        egd_proxy_start(&d, tcp, err, sizeof err) < 0 || (udp && egd_udp_start(&d, udp, err, sizeof err) < 0) ||
        egd_control_start(&d, control, err, sizeof err) < 0) {
        fprintf(stderr, "sandbox-egress: %s\n", err[0] ? err : strerror(errno));
        return 1;
    }
    struct event *sigterm = evsignal_new(d.base, SIGTERM, on_signal, d.base);
    struct event *sigint = evsignal_new(d.base, SIGINT, on_signal, d.base);
    event_add(sigterm, NULL);
    event_add(sigint, NULL);
    struct event *parent_ev = with_parent ? event_new(d.base, -1, EV_PERSIST, on_parent_check, d.base) : NULL;
    struct timeval second = { 1, 0 };
    if (parent_ev)
        event_add(parent_ev, &second);
    fprintf(stderr, "sandbox-egress: tcp on %s, dns on %s, udp on %s, upstream %s, control %s\n", tcp, dns,
            udp ? udp : "(none)", upstream, control);
    event_base_dispatch(d.base);
    egd_control_stop(&d);
    unlink(control);
    egd_dns_stop(&d);
    egd_udp_stop(&d);
    egd_proxy_stop(&d);
    for (size_t i = 0; i < EGD_SANDBOXES_MAX; i++) {
        egress_rules_release(&d.sbx[i].rules);
        egd_tls_free(d.sbx[i].tls);
    }
    egd_tls_cleanup();
    event_free(sigterm);
    event_free(sigint);
    if (parent_ev)
        event_free(parent_ev);
    event_base_free(d.base);
    free(d.sbx);
    free(d.cache);
    free(d.records);
    fprintf(stderr, "sandbox-egress: stopped\n");
    return 0;
}
