/* The worker agent: its helpers and its lifecycle (new, start, stop, free);
 * the assignments are in agent_assign.c, registration and heartbeat in
 * agent_heartbeat.c. */
#include "agent_internal.h"
#include "errors.h"
#include "forward.h"
#include "health.h"
#include "httpc.h"
#include "jsonx.h"
#include "limits.h"
#include "log.h"
#include "metrics.h"
#include "spec.h"
#include "timeutil.h"
#include "utf8.h"
#include "version.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- small helpers ----------------------------------------------------- */


/* The worker's metrics (the process registry, common/metrics.h). */
static const char *const agent_kinds[] = { "create", "delete", "exec", "snapshot", "pause",
                                             "resume", "snapshot_copy", "network" };   /* assignment kinds, as labels */
static pthread_once_t agent_metrics_once = PTHREAD_ONCE_INIT;
metric_family_t *agent_m_assignments, *agent_m_assignment_seconds, *agent_m_running, *agent_m_sandboxes,
    *agent_m_heartbeats, *agent_m_capacity, *agent_m_disk_stops;

static void agent_metrics_init(void)
{
    agent_m_assignments = metrics_family("sandbox_worker_assignments_total", METRIC_COUNTER,
                                         "Assignments run, by kind and outcome (succeeded, failed, or cancelled: "
                                         "left to their lease expiry at shutdown).", NULL, 0);
    agent_m_assignment_seconds = metrics_family("sandbox_worker_assignment_duration_seconds", METRIC_HISTOGRAM,
                                                "Time to run an assignment, by kind (the report not included).",
                                                metrics_latency_buckets, metrics_latency_nbuckets);
    agent_m_running = metrics_family("sandbox_worker_assignments_running", METRIC_GAUGE,
                                     "Assignments an executor is running right now.", NULL, 0);
    agent_m_sandboxes = metrics_family("sandbox_worker_sandboxes", METRIC_GAUGE,
                                       "Sandbox containers the worker holds, from its last inventory.", NULL, 0);
    agent_m_heartbeats = metrics_family("sandbox_worker_heartbeats_total", METRIC_COUNTER,
                                        "Heartbeats sent, by result (ok: the controller took it).", NULL, 0);
    agent_m_capacity = metrics_family("sandbox_worker_capacity", METRIC_GAUGE,
                                      "Capacity the worker advertises, by resource (cpu_millis, memory_mib, slots).",
                                      NULL, 0);
    agent_m_disk_stops = metrics_family("sandbox_disk_quota_exceeded_total", METRIC_COUNTER,
                                        "Sandboxes the worker stopped because their writable layer was over "
                                        "their disk quota (disk_mib).", NULL, 0);
    metrics_add(agent_m_disk_stops, NULL, 0);
    /* Every series from the start, at 0, so rates see the first increase. */
    static const char *const outcomes[] = { "succeeded", "failed", "cancelled" };
    char labels[96];
    for (size_t k = 0; k < sizeof agent_kinds / sizeof agent_kinds[0]; k++)
        for (size_t o = 0; o < sizeof outcomes / sizeof outcomes[0]; o++)
            metrics_add(agent_m_assignments,
                        metrics_labels(labels, sizeof labels, "kind", agent_kinds[k], "outcome", outcomes[o], NULL), 0);
    metrics_add(agent_m_heartbeats, "result=\"ok\"", 0);
    metrics_add(agent_m_heartbeats, "result=\"error\"", 0);
    metrics_set(agent_m_running, NULL, 0);
}

/* An assignment kind as a label: one of a fixed set, never the wire text. */
const char *agent_kind_label(const char *kind)
{
    for (size_t i = 0; kind && i < sizeof agent_kinds / sizeof agent_kinds[0]; i++)
        if (strcmp(kind, agent_kinds[i]) == 0)
            return agent_kinds[i];
    return "unknown";
}

/* Sleeps up to ms, returning early when *flag is set (agent_stop
 * broadcasts the condition). */
void agent_sleep_ms(agent_t *a, int64_t ms, const atomic_int *flag)
{
    struct timespec ts = time_mono_timespec_after(ms);
    pthread_mutex_lock(&a->mu);
    while (!agent_flag(flag)) {
        if (pthread_cond_timedwait(&a->cond, &a->mu, &ts) == ETIMEDOUT)
            break;
    }
    pthread_mutex_unlock(&a->mu);
}

void agent_backoff(agent_t *a, int64_t *backoff_ms, const atomic_int *flag)
{
    agent_sleep_ms(a, *backoff_ms, flag);
    *backoff_ms = *backoff_ms * 2 > AGENT_BACKOFF_MAX_MS ? AGENT_BACKOFF_MAX_MS : *backoff_ms * 2;
}

/* Each thread has its own HTTP client and remembers which controller URL
 * it uses. */
static __thread int agent_url_idx;

/* After a transport failure: point c at the next controller URL, if any. */
void agent_failover(agent_t *a, httpc_t *c)
{
    if (a->nurls < 2)
        return;
    agent_url_idx = (agent_url_idx + 1) % a->nurls;
    if (httpc_set_base(c, a->urls[agent_url_idx]) == 0)
        log_info(AGENT_COMPONENT, "switching to controller %s", a->urls[agent_url_idx]);
}

/* A client for this thread, on the first controller URL (agent_internal.h). */
httpc_t *agent_client(agent_t *a, const atomic_int *abort_flag, const char *user)
{
    httpc_t *c = NULL;
    agent_url_idx = 0;
    if (httpc_new(a->urls[0], a->token, &c) < 0) {
        log_error(AGENT_COMPONENT, "failed to create an HTTP client for %s", user);
        return NULL;
    }
    if (httpc_set_ca_file(c, a->ca_file) < 0) {
        log_error(AGENT_COMPONENT, "failed to create an HTTP client for %s", user);
        httpc_free(c);
        return NULL;
    }
    if (abort_flag)
        httpc_set_abort_flag(c, abort_flag);
    return c;
}

/* True when an executor is working on this sandbox right now. */
bool agent_sandbox_busy(agent_t *a, const char *sandbox_id)
{
    bool busy = false;
    pthread_mutex_lock(&a->mu);
    for (int i = 0; i < a->executors && !busy; i++)
        if (strcmp(a->inflight[i], sandbox_id) == 0)
            busy = true;
    pthread_mutex_unlock(&a->mu);
    return busy;
}

/* The operations this worker holds, for its heartbeat (the controller
 * renews only their leases). */
void agent_hold(agent_t *a, const char *op_id)
{
    pthread_mutex_lock(&a->mu);
    if (op_id && a->nheld < a->held_cap)
        snprintf(a->held[a->nheld++], SBX_ID_MAX, "%s", op_id);
    pthread_mutex_unlock(&a->mu);
}

void agent_release(agent_t *a, const char *op_id)
{
    pthread_mutex_lock(&a->mu);
    for (size_t i = 0; op_id && i < a->nheld; i++)
        if (strcmp(a->held[i], op_id) == 0) {
            memmove(a->held[i], a->held[a->nheld - 1], SBX_ID_MAX);
            a->nheld--;
            break;
        }
    pthread_mutex_unlock(&a->mu);
}

void agent_cluster_id(agent_t *a, char out[64])
{
    pthread_mutex_lock(&a->mu);
    memcpy(out, a->cluster_id, 64);
    pthread_mutex_unlock(&a->mu);
}

void agent_worker_id(agent_t *a, char *ret, size_t retlen)
{
    pthread_mutex_lock(&a->mu);
    snprintf(ret, retlen, "%s", a->worker_id);
    pthread_mutex_unlock(&a->mu);
}

/* The forwarder asks for the worker id with each routed connection. */
static void agent_worker_id_cb(void *ud, char *ret, size_t retlen) { agent_worker_id(ud, ret, retlen); }

/* The controller answered an exchange (for /readyz). */
void agent_contact(agent_t *a)
{
    pthread_mutex_lock(&a->mu);
    a->last_contact_ms = time_mono_ms();
    a->last_error[0] = '\0';
    pthread_mutex_unlock(&a->mu);
}

/* What /readyz says about the controller. */
static void agent_controller_status_cb(void *ud, health_controller_status_t *ret)
{
    agent_t *a = ud;
    pthread_mutex_lock(&a->mu);
    ret->registered = a->registered && !a->need_register;
    snprintf(ret->worker_id, sizeof ret->worker_id, "%s", a->worker_id);
    ret->last_contact_ms = a->last_contact_ms;
    snprintf(ret->last_error, sizeof ret->last_error, "%s", a->last_error);
    pthread_mutex_unlock(&a->mu);
}

/* Parses "k=v,k2=v2" (spaces around entries ignored). */
static int agent_labels_parse(const char *s, kv_list_t *ret, char *err, size_t errlen)
{
    int r = 0;
    kv_list_t l = { 0 };
    char *copy = strdup(s ? s : "");
    if (!copy)
        return SBX_ENOMEM;
    char *p = copy;
    while (*p) {
        char *end = strchr(p, ',');
        if (end)
            *end = '\0';
        while (isspace((unsigned char)*p))
            p++;
        size_t n = strlen(p);
        while (n > 0 && isspace((unsigned char)p[n - 1]))
            p[--n] = '\0';
        if (n > 0) {
            char *eq = strchr(p, '=');
            if (!eq || eq == p || l.n >= SBX_MAX_LABELS) {
                snprintf(err, errlen, "worker_labels: \"%.64s\" is not K=V (or more than %d labels)", p,
                         SBX_MAX_LABELS);
                r = SBX_EINVAL;
                goto cleanup;
            }
            *eq = '\0';
            char *key = p, *value = eq + 1;
            size_t kl = strlen(key);
            while (kl > 0 && isspace((unsigned char)key[kl - 1]))
                key[--kl] = '\0';
            while (isspace((unsigned char)*value))
                value++;
            kv_t *items = realloc(l.items, (l.n + 1) * sizeof *items);
            if (!items) {
                r = SBX_ENOMEM;
                goto cleanup;
            }
            l.items = items;
            l.items[l.n].key = strdup(key);
            l.items[l.n].value = strdup(value);
            l.n++;
            if (!l.items[l.n - 1].key || !l.items[l.n - 1].value) {
                r = SBX_ENOMEM;
                goto cleanup;
            }
        }
        if (!end)
            break;
        p = end + 1;
    }
    *ret = l;
    l.items = NULL;
    l.n = 0;
cleanup:
    kv_list_release(&l);
    free(copy);
    return r;
}

/* MemTotal from /proc/meminfo in MiB, or 0. */
static int64_t agent_host_memory_mib(void)
{
    FILE *f = fopen("/proc/meminfo", "re");
    if (!f)
        return 0;
    char line[256];
    int64_t mib = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "MemTotal:", 9) == 0) {
            long long kb = strtoll(line + 9, NULL, 10);
            mib = kb > 0 ? kb / 1024 : 0;
            break;
        }
    }
    fclose(f);
    return mib;
}

/* Logs a failure only when it differs from the previous one of this loop,
 * so a controller that stays down does not flood the log. */
void agent_log_failure(int *last_kind, int kind, const char *what, const char *reason)
{
    if (*last_kind == kind)
        return;
    *last_kind = kind;
    log_warn(AGENT_COMPONENT, "failed to %s: %s (retrying)", what, reason);
}

/* ---- lifecycle --------------------------------------------------------- */

static void agent_urls_free(agent_t *a)
{
    for (int i = 0; i < a->nurls; i++)
        free(a->urls[i]);
    free(a->urls);
    a->urls = NULL;
    a->nurls = 0;
}

/* Splits controller_url ("http://a:8080,http://b:8080") into a->urls. */
static int agent_urls_parse(agent_t *a, char *err, size_t errlen)
{
    int n = 1;
    for (const char *p = a->controller_url; *p; p++)
        n += *p == ',';
    a->urls = calloc((size_t)n, sizeof *a->urls);
    if (!a->urls) {
        snprintf(err, errlen, "out of memory");
        return SBX_ENOMEM;
    }
    const char *p = a->controller_url;
    while (p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len > 0 && isspace((unsigned char)*p)) {
            p++;
            len--;
        }
        while (len > 0 && isspace((unsigned char)p[len - 1]))
            len--;
        if (len > 0) {
            char *u = strndup(p, len);
            if (!u) {
                snprintf(err, errlen, "out of memory");
                return SBX_ENOMEM;
            }
            if (strncmp(u, "http://", 7) != 0 && strncmp(u, "https://", 8) != 0) {
                snprintf(err, errlen, "controller_url entries must be http:// or https:// URLs (got \"%.100s\")", u);
                free(u);
                return SBX_EINVAL;
            }
            a->urls[a->nurls++] = u;
        }
        p = end ? end + 1 : NULL;
    }
    if (a->nurls == 0) {
        snprintf(err, errlen, "controller_url is empty");
        return SBX_EINVAL;
    }
    return 0;
}

/* Frees the agent and everything it owns but its mutex and condition. */
static void agent_free_memory(agent_t *a)
{
    health_free(a->health);
    forward_free(a->fwd);
    runtime_free(a->rt);
    kv_list_release(&a->labels);
    free(a->queue);
    free(a->exec_threads);
    free(a->inflight);
    free(a->inflight_tenant);
    free(a->cancel_ops);
    free(a->held);
    agent_urls_free(a);
    free(a->controller_url);
    free(a->token);
    free(a->ca_file);
    free(a->name);
    free(a);
}

/* Logs once what the runtime offers: each probed class (info when
 * offered, warn when not) and each network mode a class cannot provide. */
static void agent_log_offer(const runtime_t *rt)
{
    for (int c = ISO_CONTAINER; c <= ISO_MICROVM; c++) {
        const char *text = runtime_probe_result(rt, (isolation_t)c);
        if (text && strncmp(text, "ok", 2) == 0)
            log_info(AGENT_COMPONENT, "isolation %s: %s", isolation_name((isolation_t)c), text);
        else if (text)
            log_warn(AGENT_COMPONENT, "isolation %s: %s", isolation_name((isolation_t)c), text);
        unsigned modes = runtime_network_modes(rt, (isolation_t)c);
        if (!modes)
            continue;
        char list[64] = "";
        for (int m = NET_NONE; m < NET_OFFERS; m++) {
            if (modes & (1u << m)) {
                size_t l = strlen(list);
                snprintf(list + l, sizeof list - l, "%s%s", l ? "," : "", net_offer_name(m));
            } else if (m <= NET_OPEN) {
                log_warn(AGENT_COMPONENT, "isolation %s: network %s not offered: %s", isolation_name((isolation_t)c),
                         net_mode_name((net_mode_t)m), runtime_network_unavailable(rt, (isolation_t)c,
                                                                                  (net_mode_t)m));
            }
        }
        log_info(AGENT_COMPONENT, "isolation %s offered with networks %s", isolation_name((isolation_t)c), list);
    }
}

int agent_worker_name(const cfg_t *cfg, char ret[AGENT_NAME_BUF])
{
    const char *name = cfg_str(cfg, CFG_WORKER_NAME);
    if (name && *name)
        snprintf(ret, AGENT_NAME_BUF, "%s", name);
    else if (gethostname(ret, AGENT_NAME_BUF - 1) < 0 || !ret[0])
        snprintf(ret, AGENT_NAME_BUF, "worker");
    ret[AGENT_NAME_BUF - 1] = '\0';
    return strlen(ret) > SBX_MAX_NAME_BYTES ? SBX_EINVAL : 0;
}

/* Reads the controller URL(s), the token (token, else worker_token), the
 * worker's name and labels into a. */
static int agent_config_identity(agent_t *a, const cfg_t *cfg, const char *token, char *err, size_t errlen)
{
    int r = 0;
    const char *url = cfg_str(cfg, CFG_CONTROLLER_URL);
    const char *tok = token ? token : cfg_str(cfg, CFG_WORKER_TOKEN);
    if (!url || (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0)) {
        snprintf(err, errlen, "controller_url must be an http:// or https:// URL");
        return SBX_EINVAL;
    }
    if (!tok || !*tok) {
        snprintf(err, errlen, "no worker token: set worker_token (SANDBOX_WORKER_TOKEN)");
        return SBX_EINVAL;
    }
    char name[AGENT_NAME_BUF];
    if (agent_worker_name(cfg, name) < 0) {
        snprintf(err, errlen, "worker_name is longer than %d bytes", SBX_MAX_NAME_BYTES);
        return SBX_EINVAL;
    }
    a->controller_url = strdup(url);
    if (a->controller_url && (r = agent_urls_parse(a, err, errlen)) < 0)
        return r;
    const char *ca = cfg_str(cfg, CFG_WORKER_CONTROLLER_CA);
    if (ca && *ca && access(ca, R_OK) != 0) {
        snprintf(err, errlen, "worker_controller_ca %.200s: %s", ca, strerror(errno));
        return SBX_EINVAL;
    }
    a->token = strdup(tok);
    a->ca_file = ca && *ca ? strdup(ca) : NULL;
    a->name = strdup(name);
    if (!a->controller_url || !a->token || !a->name || (ca && *ca && !a->ca_file)) {
        snprintf(err, errlen, "out of memory");
        return SBX_ENOMEM;
    }
    return agent_labels_parse(cfg_str(cfg, CFG_WORKER_LABELS), &a->labels, err, errlen);
}

/* Reads the capacity the worker offers and sizes its queue and tables. */
static int agent_config_capacity(agent_t *a, const cfg_t *cfg, char *err, size_t errlen)
{
    a->cpu_millis = cfg_int(cfg, CFG_WORKER_CPU_MILLIS);
    if (a->cpu_millis <= 0) {
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        a->cpu_millis = 4 * (int64_t)(ncpu > 0 ? ncpu : 1) * 1000;
    }
    a->memory_mib = cfg_int(cfg, CFG_WORKER_MEMORY_MIB);
    if (a->memory_mib <= 0)
        a->memory_mib = agent_host_memory_mib();
    a->slots = cfg_int(cfg, CFG_WORKER_SLOTS);
    a->disk_interval_ms = cfg_int(cfg, CFG_WORKER_DISK_INTERVAL_MS);
    a->executors = (int)cfg_int(cfg, CFG_WORKER_EXECUTORS);
    if (a->executors <= 0)
        a->executors = 8;
    a->tenant_executors =
        agent_tenant_executors(a->executors, (int)cfg_int(cfg, CFG_WORKER_TENANT_EXECUTORS_PERCENT));
    a->heartbeat_seconds = 5;
    a->lease_seconds = 30;
    a->qcap = (size_t)a->executors * AGENT_QUEUE_PER_EXECUTOR;
    a->queue = calloc(a->qcap, sizeof *a->queue);
    a->exec_threads = calloc((size_t)a->executors, sizeof *a->exec_threads);
    a->inflight = calloc((size_t)a->executors, sizeof *a->inflight);
    a->inflight_tenant = calloc((size_t)a->executors, sizeof *a->inflight_tenant);
    a->held_cap = a->qcap + (size_t)a->executors + 64;
    a->held = calloc(a->held_cap, sizeof *a->held);
    a->cancel_ops = calloc(AGENT_CANCEL_MAX, sizeof *a->cancel_ops);
    if (!a->queue || !a->exec_threads || !a->inflight || !a->inflight_tenant || !a->held || !a->cancel_ops) {
        snprintf(err, errlen, "out of memory");
        return SBX_ENOMEM;
    }
    return 0;
}

/* Opens the runtime (unless a has one), the route forwarder and, when
 * worker_health_listen is set, the health server. */
static int agent_open_parts(agent_t *a, const cfg_t *cfg, char *err, size_t errlen)
{
    int r = 0;
    api_error_t rerr;
    if (!a->rt && (r = runtime_open(cfg, a->name, &a->rt, &rerr)) < 0) {
        snprintf(err, errlen, "%s", rerr.message);
        return r == SBX_EINVAL ? SBX_EINVAL : SBX_EUNAVAIL;
    }
    agent_log_offer(a->rt);
    log_info(AGENT_COMPONENT, "disk quota: %s", runtime_disk_mode(a->rt));
    runtime_set_cancel_flag(a->rt, &a->cancel_rt);
    forward_options_t fopt = {
        .listen = cfg_str(cfg, CFG_WORKER_ROUTE_LISTEN),
        .advertise = cfg_str(cfg, CFG_WORKER_ROUTE_ADVERTISE),
        .max_connections = (int)cfg_int(cfg, CFG_WORKER_ROUTE_MAX_CONNECTIONS),
        .token = a->token,
        .worker_name = a->name,
        .rt = a->rt,
        .worker_id = agent_worker_id_cb,
        .worker_id_ud = a,
        .tls_cert = cfg_str(cfg, CFG_WORKER_ROUTE_TLS_CERT),
        .tls_key = cfg_str(cfg, CFG_WORKER_ROUTE_TLS_KEY),
        .files_max_bytes = cfg_int(cfg, CFG_FILES_MAX_BYTES),
        .session_done = agent_session_ended,
        .session_ud = a,
    };
    if ((r = forward_new(&fopt, &a->fwd, err, errlen)) < 0)
        return r;
    const char *hlisten = cfg_str(cfg, CFG_WORKER_HEALTH_LISTEN);
    if (hlisten && *hlisten) {
        health_options_t hopt = {
            .listen = hlisten,
            .rt = a->rt,
            .controller_timeout_ms = cfg_int(cfg, CFG_WORKER_TIMEOUT_SECONDS) * 1000,
            .controller = agent_controller_status_cb,
            .controller_ud = a,
        };
        if ((r = health_new(&hopt, &a->health, err, errlen)) < 0)
            return r;
    }
    return 0;
}

/* agent_new, with the runtime rt (taken, also on failure) or, when NULL,
 * the one runtime_open opens. */
static int agent_new_runtime(const cfg_t *cfg, const char *token, runtime_t *rt, agent_t **ret, char *err,
                             size_t errlen)
{
    int r = 0;
    bool mu_ok = false, cond_ok = false;
    pthread_once(&agent_metrics_once, agent_metrics_init);
    agent_t *a = calloc(1, sizeof *a);
    if (!a) {
        runtime_free(rt);
        snprintf(err, errlen, "out of memory");
        return SBX_ENOMEM;
    }
    a->rt = rt;
    if ((r = agent_config_identity(a, cfg, token, err, errlen)) < 0)
        goto cleanup;
    if ((r = agent_config_capacity(a, cfg, err, errlen)) < 0)
        goto cleanup;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    cond_ok = pthread_cond_init(&a->cond, &ca) == 0;
    pthread_condattr_destroy(&ca);
    mu_ok = pthread_mutex_init(&a->mu, NULL) == 0;
    if (!cond_ok || !mu_ok) {
        snprintf(err, errlen, "cannot initialise the agent's locks");
        r = SBX_ENOMEM;
        goto cleanup;
    }

    if ((r = agent_open_parts(a, cfg, err, errlen)) < 0)
        goto cleanup;
    a->stopped = true; /* nothing to stop until agent_start */
    *ret = a;
    a = NULL;
cleanup:
    if (a) {
        if (cond_ok)
            pthread_cond_destroy(&a->cond);
        if (mu_ok)
            pthread_mutex_destroy(&a->mu);
        agent_free_memory(a);
    }
    return r;
}

int agent_new(const cfg_t *cfg, const char *token, agent_t **ret, char *err, size_t errlen)
{
    return agent_new_runtime(cfg, token, NULL, ret, err, errlen);
}

int agent_new_with_runtime(const cfg_t *cfg, const char *token, runtime_t *rt, agent_t **ret, char *err,
                           size_t errlen)
{
    return agent_new_runtime(cfg, token, rt, ret, err, errlen);
}

int agent_start(agent_t *a, char *err, size_t errlen)
{
    int r = 0;
    sigset_t all, old;
    /* The threads leave SIGTERM and friends to the main thread. */
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    a->stopped = false;
    /* Before the first registration, which advertises its address. */
    char ferr[512];
    if (forward_start(a->fwd, ferr, sizeof ferr) < 0) {
        snprintf(err, errlen, "cannot start the route forwarder: %s", ferr);
        r = SBX_EIO;
        goto cleanup;
    }
    if (a->health && (r = health_start(a->health, ferr, sizeof ferr)) < 0) {
        snprintf(err, errlen, "%s", ferr);
        goto cleanup;
    }
    metrics_set(agent_m_capacity, "resource=\"cpu_millis\"", (double)a->cpu_millis);
    metrics_set(agent_m_capacity, "resource=\"memory_mib\"", (double)a->memory_mib);
    metrics_set(agent_m_capacity, "resource=\"slots\"", (double)a->slots);
    snprintf(err, errlen, "cannot start the worker's threads");
    for (int i = 0; i < a->executors; i++) {
        if (pthread_create(&a->exec_threads[i], NULL, agent_executor_main, a) != 0) {
            r = SBX_ENOMEM;
            goto cleanup;
        }
        a->exec_started++;
    }
    if (pthread_create(&a->heartbeat, NULL, agent_heartbeat_main, a) != 0) {
        r = SBX_ENOMEM;
        goto cleanup;
    }
    a->heartbeat_started = true;
    if (pthread_create(&a->disk, NULL, agent_disk_main, a) != 0) {
        r = SBX_ENOMEM;
        goto cleanup;
    }
    a->disk_started = true;
    if (pthread_create(&a->poller, NULL, agent_poller_main, a) != 0) {
        r = SBX_ENOMEM;
        goto cleanup;
    }
    a->poller_started = true;
    log_info(AGENT_COMPONENT, "worker %s started: controller %s, runtime %s, %d executors (%d per tenant), "
             "cpu_millis=%lld memory_mib=%lld slots=%lld", a->name, a->controller_url, runtime_name(a->rt),
             a->executors, a->tenant_executors, (long long)a->cpu_millis, (long long)a->memory_mib,
             (long long)a->slots);
cleanup:
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (r < 0)
        agent_stop(a);
    return r;
}

void agent_stop(agent_t *a)
{
    if (!a || a->stopped)
        return;
    a->stopped = true;
    atomic_store(&a->stopping, true);
    /* /readyz says so at once; /healthz answers until the end. */
    health_set_stopping(a->health);
    /* 0. No new route connections; open ones are closed (a route is a
     * best-effort path to a sandbox that may be going away anyway). */
    forward_stop(a->fwd);
    /* 1. No new work: end the long-poll at once. */
    pthread_mutex_lock(&a->mu);
    agent_flag_set(&a->stop_poll);
    pthread_cond_broadcast(&a->cond);
    pthread_mutex_unlock(&a->mu);
    if (a->poller_started)
        pthread_join(a->poller, NULL);
    a->poller_started = false;
    /* 2. Assignments taken but not started go back (no executor can start
     * them once they are out of the queue): an exec or a delete waits for
     * this worker's return, a create goes elsewhere. */
    json_object *unstarted = json_object_new_array();
    pthread_mutex_lock(&a->mu);
    while (a->qlen) {
        json_object *job = a->queue[a->qhead], *u = json_object_new_object();
        const char *op_id = jsonx_get_str(job, "operation_id");
        int64_t attempt = 0;
        jsonx_get_int(job, "attempt", &attempt);
        jsonx_add_str(u, "operation_id", op_id);
        jsonx_add_int(u, "attempt", attempt);
        json_object_array_add(unstarted, u);
        for (size_t i = 0; op_id && i < a->nheld; i++)
            if (strcmp(a->held[i], op_id) == 0) {
                memmove(a->held[i], a->held[a->nheld - 1], SBX_ID_MAX);
                a->nheld--;
                break;
            }
        json_object_put(job);
        a->qhead = (a->qhead + 1) % a->qcap;
        a->qlen--;
    }
    pthread_mutex_unlock(&a->mu);
    if (json_object_array_length(unstarted))
        log_info(AGENT_COMPONENT, "stopping: giving back %zu assignments not started",
                 json_object_array_length(unstarted));
    /* ... and the controller knows: nothing new is placed here meanwhile,
     * and what it gave back is leased again. */
    agent_heartbeat_stopping(a, false, unstarted);
    json_object_put(unstarted);

    /* 3. The ones running finish, within a grace period after which the
     * runtime gives up (an exec is killed and reported failed). */
    pthread_mutex_lock(&a->mu);
    a->exec_stop = true;
    pthread_cond_broadcast(&a->cond);
    if (a->busy)
        log_info(AGENT_COMPONENT, "stopping: waiting for %d running assignments", a->busy);
    struct timespec ts = time_mono_timespec_after(AGENT_STOP_GRACE_MS);
    while (a->busy > 0) {
        if (pthread_cond_timedwait(&a->cond, &a->mu, &ts) == ETIMEDOUT)
            break;
    }
    if (a->busy > 0) {
        log_warn(AGENT_COMPONENT, "stopping: %d assignments still running after %d s; cancelling them", a->busy,
                 AGENT_STOP_GRACE_MS / 1000);
        agent_flag_set(&a->cancel_rt);
    }
    pthread_mutex_unlock(&a->mu);
    for (int i = 0; i < a->exec_started; i++)
        pthread_join(a->exec_threads[i], NULL);
    a->exec_started = 0;

    /* 4. The heartbeat kept leases alive until the reports went out. */
    pthread_mutex_lock(&a->mu);
    agent_flag_set(&a->stop_hb);
    pthread_cond_broadcast(&a->cond);
    pthread_mutex_unlock(&a->mu);
    if (a->heartbeat_started)
        pthread_join(a->heartbeat, NULL);
    /* 5. Its last word: stopped, so the controller waits for its return
     * (worker_lost_after_seconds) from now, not a worker timeout later. */
    if (a->heartbeat_started)
        agent_heartbeat_stopping(a, true, NULL);
    a->heartbeat_started = false;
    if (a->disk_started)
        pthread_join(a->disk, NULL);
    a->disk_started = false;
    health_stop(a->health);
    log_info(AGENT_COMPONENT, "worker %s stopped", a->name);
}

void agent_free(agent_t *a)
{
    if (!a)
        return;
    agent_stop(a);
    while (a->qlen) {
        json_object_put(a->queue[a->qhead]);
        a->qhead = (a->qhead + 1) % a->qcap;
        a->qlen--;
    }
    json_object_put(a->sessions);
    json_object_put(a->netlog);
    pthread_cond_destroy(&a->cond);
    pthread_mutex_destroy(&a->mu);
    agent_free_memory(a);
}

const char *agent_probe_result(const agent_t *a, isolation_t cls)
{
    return a && a->rt ? runtime_probe_result(a->rt, cls) : NULL;
}
