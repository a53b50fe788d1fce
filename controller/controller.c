/* Controller start-up and shutdown, in a fixed order:
 * settings → database + migrations → listening socket → HTTP threads →
 * reconcile loop; shutdown runs it backwards. */
#include "controller.h"
#include "apiconn.h"
#include "db.h"
#include "log.h"
#include "migrate.h"
#include "notify.h"
#include "proxy.h"
#include "publish.h"
#include "reconcile.h"
#include "server.h"
#include "tlsbev.h"

#include <errno.h>
#include <event2/thread.h>
#include <sodium.h>
#include <sys/stat.h>
#include <pthread.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <fcntl.h>
#include <netinet/in.h>

/* Binds HOST:PORT; an error names what listens and the flag that sets it
 * (what: "the API listener (--listen)"). */
static int listen_socket(const char *hostport, const char *what, int *ret_port, char *err, size_t errlen)
{
    char host[256];
    const char *colon = strrchr(hostport, ':');
    if (!colon) {
        snprintf(err, errlen, "%s: %s must be HOST:PORT", what, hostport);
        return -1;
    }
    snprintf(host, sizeof host, "%.*s", (int)(colon - hostport), hostport);
    const char *h = host;
    if (host[0] == '[') { /* [::1]:8080 */
        size_t l = strlen(host);
        if (l > 1 && host[l - 1] == ']')
            host[l - 1] = '\0';
        h = host + 1;
    }
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE };
    struct addrinfo *ai = NULL;
    int gr = getaddrinfo(*h ? h : NULL, colon + 1, &hints, &ai);
    if (gr != 0) {
        snprintf(err, errlen, "%s: cannot resolve %s: %s", what, hostport, gai_strerror(gr));
        return -1;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd >= 0)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 1024) < 0) {
        snprintf(err, errlen, "cannot listen on %s for %s: %s", hostport, what, strerror(errno));
        if (fd >= 0)
            close(fd);
        freeaddrinfo(ai);
        return -1;
    }
    freeaddrinfo(ai);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    *ret_port = 0;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET)
            *ret_port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        else if (ss.ss_family == AF_INET6)
            *ret_port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    }
    return fd;
}

static void controller_use_threads(void)
{
    evthread_use_pthreads();
}

/* The limits, isolation classes and thread count of cfg into ctl: 0, or
 * SBX_EINVAL with a reason in err. */
static int controller_read_limits(controller_t *ctl, const cfg_t *cfg, char *err, size_t errlen)
{
    ctl->lim.lease_seconds = cfg_int(cfg, CFG_LEASE_SECONDS);
    ctl->lim.worker_timeout_seconds = cfg_int(cfg, CFG_WORKER_TIMEOUT_SECONDS);
    /* unreachable first, lost after the grace: never lost before unreachable */
    ctl->lim.worker_lost_after_seconds = cfg_int(cfg, CFG_WORKER_LOST_AFTER_SECONDS);
    ctl->lim.max_snapshots = cfg_int(cfg, CFG_MAX_SNAPSHOTS);
    ctl->lim.max_snapshot_mib = cfg_int(cfg, CFG_MAX_SNAPSHOT_MIB);
    ctl->lim.max_volumes = cfg_int(cfg, CFG_MAX_VOLUMES);
    ctl->lim.max_volume_mib = cfg_int(cfg, CFG_MAX_VOLUME_MIB);
    if (ctl->lim.worker_lost_after_seconds < ctl->lim.worker_timeout_seconds)
        ctl->lim.worker_lost_after_seconds = ctl->lim.worker_timeout_seconds;
    ctl->lim.max_attempts = cfg_int(cfg, CFG_MAX_ATTEMPTS);
    ctl->lim.deadline_seconds = cfg_int(cfg, CFG_OPERATION_DEADLINE_SECONDS);
    ctl->lim.exec_output_default = cfg_int(cfg, CFG_EXEC_OUTPUT_DEFAULT_BYTES);
    ctl->lim.heartbeat_seconds = cfg_int(cfg, CFG_HEARTBEAT_SECONDS);
    ctl->lim.exec_output_keep = cfg_int(cfg, CFG_EXEC_OUTPUT_KEEP_BYTES);
    ctl->lim.exec_output_tenant_keep = cfg_int(cfg, CFG_EXEC_OUTPUT_TENANT_KEEP_BYTES);
    ctl->max_body_client = cfg_int(cfg, CFG_MAX_BODY_BYTES);
    ctl->max_cpu_millis = cfg_int(cfg, CFG_MAX_CPU_MILLIS);
    ctl->max_memory_mib = cfg_int(cfg, CFG_MAX_MEMORY_MIB);
    ctl->default_disk_mib = cfg_int(cfg, CFG_DEFAULT_DISK_MIB);
    ctl->max_disk_mib = cfg_int(cfg, CFG_MAX_DISK_MIB);
    ctl->max_ttl_seconds = cfg_int(cfg, CFG_MAX_TTL_SECONDS);
    ctl->exec_output_max = cfg_int(cfg, CFG_EXEC_OUTPUT_MAX_BYTES);
    ctl->exec_timeout_max = cfg_int(cfg, CFG_EXEC_TIMEOUT_MAX_SECONDS);
    if (ctl->lim.exec_output_default > ctl->exec_output_max)
        ctl->lim.exec_output_default = ctl->exec_output_max;
    isolation_t classes[3];
    static const cfg_key_t class_keys[3] = { CFG_ISOLATION_TRUSTED, CFG_ISOLATION_UNTRUSTED, CFG_ISOLATION_HOSTILE };
    for (int i = 0; i < 3; i++)
        if (isolation_parse(cfg_str(cfg, class_keys[i]), &classes[i]) < 0) {
            snprintf(err, errlen, "%s must be container, gvisor or microvm, not \"%s\"",
                     cfg_settings()[class_keys[i]].name, cfg_str(cfg, class_keys[i]));
            return SBX_EINVAL;
        }
    classify_rules_server(&ctl->rules, classes[0], classes[1], classes[2],
                          cfg_bool(cfg, CFG_ALLOW_UNTRUSTED_OPEN_NETWORK));
    ctl->nthreads = (int)cfg_int(cfg, CFG_HTTP_THREADS);
    if (ctl->nthreads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        ctl->nthreads = n > 0 ? (int)(n > 16 ? 16 : n) : 2;
    }
    return 0;
}

/* The key of secrets_key_file (64 hex digits, a file only its owner reads)
 * into locked memory; none configured: lim.secrets_key stays NULL. */
static int controller_secrets_key(controller_t *ctl, const cfg_t *cfg, char *err, size_t errlen)
{
    const char *path = cfg_str(cfg, CFG_SECRETS_KEY_FILE);
    if (!path || !*path)
        return 0;
    char buf[130];
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) < 0) {
        snprintf(err, errlen, "secrets_key_file %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return SBX_EINVAL;
    }
    ssize_t n = (st.st_mode & 077) ? -1 : read(fd, buf, sizeof buf - 1);
    close(fd);
    if (st.st_mode & 077) {
        snprintf(err, errlen, "secrets_key_file %s is readable by others than its owner (chmod 600 it)", path);
        return SBX_EINVAL;
    }
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        n--;
    unsigned char *key = sodium_malloc(32);
    size_t got = 0;
    if (!key || n != 64 || sodium_hex2bin(key, 32, buf, (size_t)n, NULL, &got, NULL) != 0 || got != 32) {
        sodium_memzero(buf, sizeof buf);
        if (key)
            sodium_free(key);
        snprintf(err, errlen, "secrets_key_file %s does not hold 64 hex digits (make one: openssl rand -hex 32)",
                 path);
        return SBX_EINVAL;
    }
    sodium_memzero(buf, sizeof buf);
    sodium_mprotect_readonly(key);
    ctl->secrets_key = key;
    ctl->lim.secrets_key = key;
    return 0;
}

/* Brings the schema of the database at conninfo up to date. */
static int controller_migrate(const char *conninfo, char *err, size_t errlen)
{
    char dberr[512];
    PGconn *db = db_connect(conninfo, dberr, sizeof dberr);
    if (!db) {
        snprintf(err, errlen, "cannot connect to the database: %s", dberr);
        return SBX_EUNAVAIL;
    }
    int applied = 0;
    int rc = migrate_apply(db, &applied, err, errlen);
    PQfinish(db);
    if (rc < 0)
        return rc;
    if (applied)
        log_info("controller", "applied %d migration(s)", applied);
    return 0;
}

/* Route addresses: {route_public_url}/r/{name}/, or {name}.{route_domain}.
 * Routes are served on their own listener: what a sandbox serves never
 * shares an origin (cookies, scripts) with the API. Without
 * route_public_url the public URL is the route listener's. */
static void controller_public_url(controller_t *ctl, const cfg_t *cfg)
{
    const char *pu = cfg_str(cfg, CFG_ROUTE_PUBLIC_URL);
    if (pu && *pu) {
        ctl->public_url = strdup(pu);
    } else {
        const char *lh = cfg_str(cfg, CFG_ROUTE_LISTEN);
        const char *colon = strrchr(lh, ':');
        char buf[300];
        snprintf(buf, sizeof buf, "%s://%.*s:%d", ctl->route_tls ? "https" : "http", colon ? (int)(colon - lh) : 0, lh, ctl->route_port);
        ctl->public_url = strdup(buf);
    }
    if (ctl->public_url) {
        size_t n = strlen(ctl->public_url);
        while (n > 0 && ctl->public_url[n - 1] == '/')
            ctl->public_url[--n] = '\0';
    }
}

int controller_start(const cfg_t *cfg, const char *conninfo, controller_t **ret, char *err, size_t errlen)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, controller_use_threads);
    int rc = 0;
    controller_t *ctl = calloc(1, sizeof *ctl);
    if (!ctl || cfg_init(&ctl->cfg) < 0) {
        free(ctl);
        snprintf(err, errlen, "out of memory");
        return SBX_ENOMEM;
    }
    ctl->listen_fd = -1;
    ctl->route_fd = -1;
    for (int i = 0; i < CFG__COUNT; i++) {
        char why[256];
        cfg_set(&ctl->cfg, cfg_settings()[i].name, cfg->values[i], cfg->sources[i], why, sizeof why);
    }
    ctl->conninfo = strdup(conninfo);
    if ((rc = controller_read_limits(ctl, cfg, err, errlen)) < 0 ||
        (rc = controller_secrets_key(ctl, cfg, err, errlen)) < 0)
        goto fail;
    /* Database and schema first: nothing listens before it is current. */
    if ((rc = controller_migrate(conninfo, err, errlen)) < 0)
        goto fail;
    if ((rc = tls_server_ctx_new("api_tls", cfg_str(cfg, CFG_API_TLS_CERT), cfg_str(cfg, CFG_API_TLS_KEY),
                                 &ctl->api_tls, err, errlen)) < 0 ||
        (rc = tls_server_ctx_new("route_tls", cfg_str(cfg, CFG_ROUTE_TLS_CERT), cfg_str(cfg, CFG_ROUTE_TLS_KEY),
                                 &ctl->route_tls, err, errlen)) < 0 ||
        (rc = tls_client_ctx_new("controller_worker_ca", cfg_str(cfg, CFG_CONTROLLER_WORKER_CA), &ctl->worker_tls, err,
                                 errlen)) < 0)
        goto fail;
    ctl->listen_fd = listen_socket(cfg_str(cfg, CFG_LISTEN), "the API listener (--listen)", &ctl->port, err, errlen);
    if (ctl->listen_fd < 0) {
        rc = SBX_EIO;
        goto fail;
    }
    ctl->route_fd = listen_socket(cfg_str(cfg, CFG_ROUTE_LISTEN), "the route listener (--route-listen)",
                                 &ctl->route_port, err, errlen);
    if (ctl->route_fd < 0) {
        rc = SBX_EIO;
        goto fail;
    }
    controller_public_url(ctl, cfg);
    if ((rc = apiconn_setup(ctl, err, errlen)) < 0 || (rc = proxy_config(ctl, cfg, err, errlen)) < 0 ||
        (rc = server_start(ctl, err, errlen)) < 0 ||
        (rc = reconcile_start(ctl, &ctl->rec, err, errlen)) < 0 ||
        (rc = notify_start(ctl, &ctl->notify, err, errlen)) < 0 ||
        (rc = publish_start(ctl, &ctl->publisher, err, errlen)) < 0)
        goto fail;
    const char *rd = cfg_str(cfg, CFG_ROUTE_DOMAIN);
    ctl->route_domain = rd && *rd ? strdup(rd) : NULL;
    ctl->max_route_ttl = cfg_int(cfg, CFG_MAX_ROUTE_TTL_SECONDS);
    log_info("controller", "listening on %s (port %d%s) with %d HTTP threads; routes on %s (port %d%s)",
             cfg_str(cfg, CFG_LISTEN), ctl->port, ctl->api_tls ? ", TLS" : "", ctl->nthreads,
             cfg_str(cfg, CFG_ROUTE_LISTEN), ctl->route_port, ctl->route_tls ? ", TLS" : "");
    *ret = ctl;
    return 0;
fail:
    controller_stop(ctl);
    return rc;
}

void controller_stop(controller_t *ctl)
{
    if (!ctl)
        return;
    ctl->stopping = 1;
    publish_stop(ctl->publisher);
    ctl->publisher = NULL;
    notify_stop(ctl->notify);
    ctl->notify = NULL;
    reconcile_stop(ctl->rec);
    ctl->rec = NULL;
    server_stop(ctl);
    if (ctl->listen_fd >= 0)
        close(ctl->listen_fd);
    if (ctl->route_fd >= 0)
        close(ctl->route_fd);
    tls_ctx_free(ctl->api_tls);
    tls_ctx_free(ctl->route_tls);
    tls_ctx_free(ctl->worker_tls);
    free(ctl->trusted_proxies);
    free(ctl->conninfo);
    free(ctl->public_url);
    free(ctl->route_domain);
    cfg_release(&ctl->cfg);
    if (ctl->secrets_key)
        sodium_free(ctl->secrets_key);
    free(ctl);
}

void controller_wake_waiters(controller_t *ctl) { server_wake_all(ctl); }

void controller_wake(controller_t *ctl, unsigned mask, const char *const *ops, int nops)
{
    server_wake(ctl, mask, ops, nops);
}

void controller_kick_reconcile(controller_t *ctl) { reconcile_kick(ctl->rec); }
