/* The worker agent: register, long-poll, executor pool, report, heartbeat. */
#include "agent.h"
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

#define AGENT_COMPONENT          "worker"
#define AGENT_POLL_WAIT_S        30
/* The poll's HTTP deadline: the long-poll plus the controller's slack. */
#define AGENT_POLL_TIMEOUT_MS    ((AGENT_POLL_WAIT_S + 15) * 1000L)
#define AGENT_HTTP_TIMEOUT_MS    30000L
#define AGENT_BACKOFF_MIN_MS     200
#define AGENT_BACKOFF_MAX_MS     5000
/* Assignments waiting for an executor, per executor; when the queue is
 * full the poller stops polling (nothing leased is ever dropped). */
#define AGENT_QUEUE_PER_EXECUTOR 4
#define AGENT_REPORT_ATTEMPTS    5
/* Orphans removed per heartbeat at most (each is a Docker call). */
#define AGENT_ORPHANS_PER_BEAT   16
/* At stop, how long in-flight assignments may run before the runtime is
 * told to give up (an exec is then killed). */
#define AGENT_STOP_GRACE_MS      20000
/* A report is at most the controller's body limit; keep room for the
 * envelope around the exec result. */
#define AGENT_RESULT_MAX_BYTES   (SBX_MAX_BODY_BYTES - 64u * 1024u)
#define AGENT_WORKER_ID_MAX      128

struct agent {
    char *controller_url;            /* as configured: one URL or a comma-separated list */
    char **urls;                     /* the list, for failover */
    int nurls;
    char *token;
    char *name;
    kv_list_t labels;
    int64_t cpu_millis;
    int64_t memory_mib;
    int64_t slots;
    int executors;
    runtime_t *rt;
    forward_t *fwd;                  /* the route forwarder (worker_route_listen) */
    health_t *health;                /* /healthz, /readyz, /metrics (worker_health_listen); NULL when not served */

    pthread_mutex_t mu;
    pthread_cond_t cond;             /* any change below; CLOCK_MONOTONIC */
    char worker_id[AGENT_WORKER_ID_MAX];
    char cluster_id[64];             /* from registration: labels our runtime objects */
    char (*inflight)[SBX_ID_MAX];    /* sandboxes an executor works on (one slot each) */
    char (*held)[SBX_ID_MAX];        /* operations received and not yet reported */
    size_t nheld, held_cap;
    bool registered;
    bool need_register;
    int64_t heartbeat_seconds;
    int64_t lease_seconds;
    int64_t last_contact_ms;         /* time_mono_ms() of the last answer from the controller; 0: none */
    char last_error[256];            /* the last failed exchange, for /readyz */
    json_object **queue;             /* ring of assignments (owned) */
    size_t qcap, qhead, qlen;
    int busy;                        /* executors running an assignment */
    int exec_slots;                  /* executor threads that took a slot */
    bool exec_stop;                  /* executors leave once idle */

    atomic_int stop_poll;            /* aborts the long-poll at once */
    atomic_int stop_hb;
    atomic_int cancel_rt;            /* runtime calls give up */

    pthread_t poller, heartbeat;
    pthread_t *exec_threads;
    int exec_started;
    bool poller_started, heartbeat_started;
    bool stopped;
};

/* ---- small helpers ----------------------------------------------------- */

static void agent_flag_set(atomic_int *flag) { atomic_store(flag, 1); }
static bool agent_flag(const atomic_int *flag) { return atomic_load(flag) != 0; }

/* The worker's metrics (the process registry, common/metrics.h). */
static const char *const agent_kinds[] = { "create", "delete", "exec" };   /* assignment kinds, as labels */
static pthread_once_t agent_metrics_once = PTHREAD_ONCE_INIT;
static metric_family_t *agent_m_assignments, *agent_m_assignment_seconds, *agent_m_running, *agent_m_sandboxes,
    *agent_m_heartbeats, *agent_m_capacity;

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
static const char *agent_kind_label(const char *kind)
{
    for (size_t i = 0; kind && i < sizeof agent_kinds / sizeof agent_kinds[0]; i++)
        if (strcmp(kind, agent_kinds[i]) == 0)
            return agent_kinds[i];
    return "unknown";
}

/* Sleeps up to ms, returning early when *flag is set (agent_stop
 * broadcasts the condition). */
static void agent_sleep_ms(agent_t *a, int64_t ms, const atomic_int *flag)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&a->mu);
    while (!agent_flag(flag)) {
        if (pthread_cond_timedwait(&a->cond, &a->mu, &ts) == ETIMEDOUT)
            break;
    }
    pthread_mutex_unlock(&a->mu);
}

/* Each thread has its own HTTP client and remembers which controller URL
 * it uses. */
static __thread int agent_url_idx;

/* After a transport failure: point c at the next controller URL, if any. */
static void agent_failover(agent_t *a, httpc_t *c)
{
    if (a->nurls < 2)
        return;
    agent_url_idx = (agent_url_idx + 1) % a->nurls;
    if (httpc_set_base(c, a->urls[agent_url_idx]) == 0)
        log_info(AGENT_COMPONENT, "switching to controller %s", a->urls[agent_url_idx]);
}

/* A client for this thread, on the first controller URL. */
static httpc_t *agent_client(agent_t *a)
{
    httpc_t *c = NULL;
    agent_url_idx = 0;
    if (httpc_new(a->urls[0], a->token, &c) < 0)
        return NULL;
    return c;
}

/* True when an executor is working on this sandbox right now. */
static bool agent_sandbox_busy(agent_t *a, const char *sandbox_id)
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
static void agent_hold(agent_t *a, const char *op_id)
{
    pthread_mutex_lock(&a->mu);
    if (op_id && a->nheld < a->held_cap)
        snprintf(a->held[a->nheld++], SBX_ID_MAX, "%s", op_id);
    pthread_mutex_unlock(&a->mu);
}

static void agent_release(agent_t *a, const char *op_id)
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

static void agent_cluster_id(agent_t *a, char out[64])
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
static void agent_contact(agent_t *a)
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
    FILE *f = fopen("/proc/meminfo", "r");
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
static void agent_log_failure(int *last_kind, int kind, const char *what, const char *reason)
{
    if (*last_kind == kind)
        return;
    *last_kind = kind;
    log_warn(AGENT_COMPONENT, "failed to %s: %s (retrying)", what, reason);
}

/* ---- exec result ------------------------------------------------------- */

/* The largest n' <= n that does not split a UTF-8 sequence of s. */
static size_t agent_utf8_cut(const char *s, size_t n)
{
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
        n--;
    return n;
}

json_object *agent_exec_result_json(const runtime_exec_result_t *r, size_t max_json_bytes)
{
    char *out = utf8_sanitize(r->out.data ? r->out.data : "", r->out.len);
    char *err = utf8_sanitize(r->err.data ? r->err.data : "", r->err.len);
    json_object *o = NULL;
    if (!out || !err)
        goto cleanup;
    size_t lo = strlen(out), le = strlen(err);
    bool cut_out = false, cut_err = false;
    for (;;) {
        o = json_object_new_object();
        if (!o)
            goto cleanup;
        jsonx_add_int(o, "exit_code", r->exit_code);
        jsonx_add_int(o, "signal", r->signal);
        jsonx_add_bool(o, "timed_out", r->timed_out);
        jsonx_add_int(o, "duration_ms", r->duration_ms);
        jsonx_add(o, "stdout", json_object_new_string_len(out, (int)lo));
        jsonx_add(o, "stderr", json_object_new_string_len(err, (int)le));
        jsonx_add_bool(o, "stdout_truncated", r->out.truncated || cut_out);
        jsonx_add_bool(o, "stderr_truncated", r->err.truncated || cut_err);
        jsonx_add_int(o, "stdout_bytes", (int64_t)r->out.seen);
        jsonx_add_int(o, "stderr_bytes", (int64_t)r->err.seen);
        const char *text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
        if (!text || strlen(text) <= max_json_bytes || (lo == 0 && le == 0))
            break;
        json_object_put(o);
        o = NULL;
        /* Cut the larger stream (both when close) and try again. */
        if (lo >= le / 2 && lo > 0) {
            lo = agent_utf8_cut(out, lo / 2);
            cut_out = true;
        }
        if (le >= lo / 2 && le > 0) {
            le = agent_utf8_cut(err, le / 2);
            cut_err = true;
        }
    }
cleanup:
    free(out);
    free(err);
    return o;
}

/* ---- registration ------------------------------------------------------ */

/* Adds "images": the runtime's local repo:tag names; left out when Docker
 * cannot list them (an empty list would claim there are none). */
static void agent_add_images(agent_t *a, json_object *o, int *last_kind)
{
    char **names = NULL;
    size_t n = 0;
    api_error_t err;
    if (runtime_images(a->rt, &names, &n, &err) < 0) {
        agent_log_failure(last_kind, -1, "list the local images", err.message);
        return;
    }
    *last_kind = 0;
    json_object *arr = json_object_new_array();
    for (size_t i = 0; i < n; i++)
        json_object_array_add(arr, json_object_new_string(names[i]));
    jsonx_add(o, "images", arr);
    runtime_images_free(names, n);
}

static json_object *agent_register_body(agent_t *a)
{
    isolation_t classes[4];
    size_t n = runtime_isolation_classes(a->rt, classes, 4);
    int images_kind = 0;
    json_object *o = json_object_new_object();
    jsonx_add_str(o, "name", a->name);
    jsonx_add_str(o, "runtime", runtime_name(a->rt));
    json_object *iso = json_object_new_array();
    json_object *nets = json_object_new_object();
    for (size_t i = 0; i < n; i++) {
        json_object_array_add(iso, json_object_new_string(isolation_name(classes[i])));
        unsigned modes = runtime_network_modes(a->rt, classes[i]);
        json_object *ml = json_object_new_array();
        for (int m = NET_NONE; m <= NET_OPEN; m++)
            if (modes & (1u << m))
                json_object_array_add(ml, json_object_new_string(net_mode_name((net_mode_t)m)));
        jsonx_add(nets, isolation_name(classes[i]), ml);
    }
    jsonx_add(o, "isolation", iso);
    jsonx_add(o, "networks", nets);
    json_object *probes = json_object_new_object();
    for (int c = ISO_CONTAINER; c <= ISO_MICROVM; c++) {
        const char *text = runtime_probe_result(a->rt, (isolation_t)c);
        if (text)
            jsonx_add_str(probes, isolation_name((isolation_t)c), text);
    }
    jsonx_add(o, "probes", probes);
    agent_add_images(a, o, &images_kind);
    jsonx_add(o, "labels", kv_list_to_json(&a->labels));
    json_object *cap = json_object_new_object();
    jsonx_add_int(cap, "cpu_millis", a->cpu_millis);
    jsonx_add_int(cap, "memory_mib", a->memory_mib);
    jsonx_add_int(cap, "slots", a->slots);
    jsonx_add(o, "capacity", cap);
    jsonx_add_str(o, "version", SBX_VERSION);
    if (*forward_address(a->fwd))
        jsonx_add_str(o, "route_address", forward_address(a->fwd));
    return o;
}

/* Registers, retrying with backoff until the controller answers 200 or the
 * agent stops. Returns 0 when registered. */
/* Logs a failed exchange (once per kind of failure); a transport failure
 * also moves c to the next controller URL. */
static void agent_exchange_failed(agent_t *a, httpc_t *c, int *last_kind, int rc, const httpc_response_t *resp,
                                  const char *what)
{
    char why[400];
    if (rc < 0) {
        snprintf(why, sizeof why, "%s", resp->error);
        agent_log_failure(last_kind, -1, what, resp->error);
        agent_failover(a, c);
    } else {
        const char *code, *msg;
        httpc_api_error(resp, &code, &msg);
        snprintf(why, sizeof why, "HTTP %ld %s: %s", resp->status, code, msg);
        agent_log_failure(last_kind, (int)resp->status, what, why);
    }
    pthread_mutex_lock(&a->mu);
    snprintf(a->last_error, sizeof a->last_error, "failed to %s: %.200s", what, why);
    pthread_mutex_unlock(&a->mu);
}

static int agent_register(agent_t *a, httpc_t *c)
{
    int64_t backoff = AGENT_BACKOFF_MIN_MS;
    int last_kind = 0;
    json_object *body = agent_register_body(a);
    int r = SBX_EUNAVAIL;
    while (!agent_flag(&a->stop_poll)) {
        httpc_response_t resp;
        int rc = httpc_request(c, "POST", "/v1/workers/register", body, NULL, AGENT_HTTP_TIMEOUT_MS, &resp);
        if (rc == 0 && resp.status == 200) {
            json_object *w = jsonx_get_obj(resp.json, "worker");
            const char *id = jsonx_get_str(w, "id");
            int64_t lease = 30, hb = 5;
            jsonx_get_int(resp.json, "lease_seconds", &lease);
            jsonx_get_int(resp.json, "heartbeat_seconds", &hb);
            if (id && *id && strlen(id) < AGENT_WORKER_ID_MAX && !strchr(id, '/') && !strchr(id, '?')) {
                pthread_mutex_lock(&a->mu);
                snprintf(a->worker_id, sizeof a->worker_id, "%s", id);
                const char *cl = jsonx_get_str(resp.json, "cluster_id");
                snprintf(a->cluster_id, sizeof a->cluster_id, "%s", cl && strlen(cl) < 64 ? cl : "");
                a->lease_seconds = lease > 0 ? lease : 30;
                a->heartbeat_seconds = hb > 0 ? hb : 5;
                a->registered = true;
                a->need_register = false;
                a->last_contact_ms = time_mono_ms();
                a->last_error[0] = '\0';
                pthread_cond_broadcast(&a->cond);
                pthread_mutex_unlock(&a->mu);
                log_info(AGENT_COMPONENT, "registered with %s as %s (%s) lease_seconds=%lld heartbeat_seconds=%lld",
                         a->controller_url, a->name, id, (long long)lease, (long long)hb);
                httpc_response_release(&resp);
                r = 0;
                break;
            }
            agent_log_failure(&last_kind, 1, "register", "the controller's answer has no worker id");
        } else if (!agent_flag(&a->stop_poll)) {
            agent_exchange_failed(a, c, &last_kind, rc, &resp, "register with the controller");
        }
        httpc_response_release(&resp);
        agent_sleep_ms(a, backoff, &a->stop_poll);
        backoff = backoff * 2 > AGENT_BACKOFF_MAX_MS ? AGENT_BACKOFF_MAX_MS : backoff * 2;
    }
    json_object_put(body);
    return r;
}

/* ---- executors --------------------------------------------------------- */

typedef struct agent_outcome {
    bool ok;
    api_error_t err;
    char runtime_ref[80];
    json_object *result;     /* exec result, owned */
    runtime_exit_t exit;     /* a create whose container was not running: how it ended */
} agent_outcome_t;

/* The observed fields of a stopped container, for a heartbeat's inventory
 * entry or a create's report (the controller reads them with
 * common/observed.c). */
static void agent_add_exit(json_object *o, const runtime_exit_t *e)
{
    jsonx_add_int(o, "exit_code", e->exit_code);
    jsonx_add_bool(o, "oom_killed", e->oom_killed);
    if (e->finished_at[0])
        jsonx_add_str(o, "finished_at", e->finished_at);
    if (e->error[0])
        jsonx_add_str(o, "error", e->error);
    if (e->output_tail)
        jsonx_add_str(o, "output_tail", e->output_tail);
}

static void agent_run_create(agent_t *a, json_object *job, agent_outcome_t *o)
{
    char cluster[64];
    agent_cluster_id(a, cluster);
    sandbox_spec_t spec;
    isolation_t iso = ISO_CONTAINER;
    const char *sbx = jsonx_get_str(job, "sandbox_id");
    const char *iso_name = jsonx_get_str(job, "isolation");
    if (spec_from_json(jsonx_get_obj(job, "spec"), &spec, &o->err) < 0)
        return;
    if (iso_name && isolation_parse(iso_name, &iso) < 0) {
        api_error_set(&o->err, API_ISOLATION_UNAVAILABLE, "unknown isolation class \"%.40s\"", iso_name);
        spec_release(&spec);
        return;
    }
    runtime_create_req_t req = {
        .sandbox_id = sbx,
        .tenant = jsonx_get_str(job, "tenant"),
        .spec = &spec,
        .isolation = iso,
        .cluster_id = cluster,
        .worker_name = a->name,
    };
    if (!sbx)
        api_error_set(&o->err, API_INVALID_ARGUMENT, "the assignment has no sandbox_id");
    else if (runtime_create(a->rt, &req, o->runtime_ref, &o->exit, &o->err) == 0)
        o->ok = true;
    spec_release(&spec);
}

static void agent_run_delete(agent_t *a, json_object *job, agent_outcome_t *o)
{
    const char *sbx = jsonx_get_str(job, "sandbox_id");
    const char *ref = jsonx_get_str(job, "runtime_ref");
    if (!sbx && !ref) {
        api_error_set(&o->err, API_INVALID_ARGUMENT, "the assignment names neither sandbox_id nor runtime_ref");
        return;
    }
    if (runtime_remove(a->rt, sbx, ref, &o->err) == 0)
        o->ok = true;
}

static void agent_run_exec(agent_t *a, json_object *job, agent_outcome_t *o)
{
    exec_spec_t spec;
    runtime_exec_result_t res;
    char name[SBX_ID_MAX + 8];
    const char *ref = jsonx_get_str(job, "runtime_ref");
    const char *sbx = jsonx_get_str(job, "sandbox_id");
    if (exec_spec_from_json(jsonx_get_obj(job, "exec"), &spec, &o->err) < 0)
        return;
    if (!ref && sbx) {
        /* The container is named for its sandbox. */
        snprintf(name, sizeof name, "sbx-%s", sbx);
        ref = name;
    }
    size_t max = spec.max_output_bytes > 0 ? (size_t)spec.max_output_bytes : SBX_EXEC_OUTPUT_DEFAULT;
    if (runtime_exec(a->rt, ref, &spec, max, &res, &o->err) == 0) {
        if (res.warning[0])
            log_warn(AGENT_COMPONENT, "exec in sandbox %s: %s", sbx ? sbx : ref, res.warning);
        o->result = agent_exec_result_json(&res, AGENT_RESULT_MAX_BYTES);
        if (o->result)
            o->ok = true;
        else
            api_error_set(&o->err, API_INTERNAL, "out of memory building the exec result");
        runtime_exec_result_release(&res);
    } else if (o->err.code == API_CANCELLED) {
        /* An exec is not safe to run twice: fail it rather than let the
         * lease expire and the command run again elsewhere. */
        o->err.code = API_RUNTIME_ERROR;
    }
    exec_spec_release(&spec);
}

/* Sends a report, retrying transport failures and 5xx a few times. */
static void agent_report(agent_t *a, httpc_t *c, const char *op_id, json_object *body)
{
    int64_t backoff = 250;
    /* Keep trying while the lease may still be ours (a controller restart
     * or a database outage); after that the report would be stale anyway. */
    pthread_mutex_lock(&a->mu);
    int64_t give_up = time_deadline_ms((a->lease_seconds + 5) * 1000);
    pthread_mutex_unlock(&a->mu);
    for (int attempt = 1;; attempt++) {
        bool last = attempt >= AGENT_REPORT_ATTEMPTS && time_mono_ms() >= give_up;
        char wid[AGENT_WORKER_ID_MAX], path[AGENT_WORKER_ID_MAX + 32];
        agent_worker_id(a, wid, sizeof wid);
        snprintf(path, sizeof path, "/v1/workers/%s/report", wid);
        httpc_response_t resp;
        int rc = httpc_request(c, "POST", path, body, NULL, AGENT_HTTP_TIMEOUT_MS, &resp);
        const char *code = "", *msg = "";
        if (rc == 0)
            httpc_api_error(&resp, &code, &msg);
        if (rc == 0 && resp.status == 200) {
            agent_contact(a);
            log_debug(AGENT_COMPONENT, "reported operation %s", op_id);
            httpc_response_release(&resp);
            return;
        }
        if (rc == 0 && resp.status == 409) {
            log_warn(AGENT_COMPONENT, "report of operation %s refused (%s: %s); dropped", op_id, code, msg);
            httpc_response_release(&resp);
            return;
        }
        if (rc == 0 && resp.status >= 400 && resp.status < 500 && resp.status != 404 && resp.status != 408 &&
            resp.status != 429) {
            log_error(AGENT_COMPONENT, "report of operation %s rejected: HTTP %ld %s: %s", op_id, resp.status, code,
                      msg);
            httpc_response_release(&resp);
            return;
        }
        if (last) {
            log_error(AGENT_COMPONENT, "failed to report operation %s after %d attempts: %s; its lease will expire",
                      op_id, attempt, rc < 0 ? resp.error : msg);
        } else {
            log_debug(AGENT_COMPONENT, "report of operation %s failed (%s), retrying", op_id,
                      rc < 0 ? resp.error : msg);
        }
        httpc_response_release(&resp);
        if (last)
            return;
        if (rc < 0)
            agent_failover(a, c);
        usleep((useconds_t)backoff * 1000);
        backoff = backoff * 2 > 2000 ? 2000 : backoff * 2;
    }
}

static void agent_run_scoped(agent_t *a, httpc_t *c, json_object *job);

/* Runs one assignment with its ids on every line logged meanwhile. */
static void agent_run(agent_t *a, httpc_t *c, json_object *job)
{
    log_ctx_t ctx = { .sandbox = jsonx_get_str(job, "sandbox_id"),
                      .operation = jsonx_get_str(job, "operation_id") };
    log_scope_set(&ctx);
    agent_run_scoped(a, c, job);
    log_scope_clear();
}

static void agent_run_scoped(agent_t *a, httpc_t *c, json_object *job)
{
    json_object *body = agent_run_assignment(a, job);
    if (!body)
        return;
    agent_report(a, c, jsonx_get_str(job, "operation_id"), body);
    json_object_put(body);
}

json_object *agent_run_assignment(agent_t *a, json_object *job)
{
    const char *op_id = jsonx_get_str(job, "operation_id");
    const char *kind = jsonx_get_str(job, "kind");
    int64_t attempt = 0;
    agent_outcome_t o;
    memset(&o, 0, sizeof o);
    if (!op_id || !jsonx_get_int(job, "attempt", &attempt)) {
        log_error(AGENT_COMPONENT, "dropped an assignment without operation_id or attempt");
        return NULL;
    }
    int64_t t0 = time_mono_ms();
    log_info(AGENT_COMPONENT, "running %s operation %s attempt %lld sandbox %s", kind ? kind : "?", op_id,
             (long long)attempt, jsonx_get_str(job, "sandbox_id") ? jsonx_get_str(job, "sandbox_id") : "-");
    if (kind && strcmp(kind, "create") == 0)
        agent_run_create(a, job, &o);
    else if (kind && strcmp(kind, "delete") == 0)
        agent_run_delete(a, job, &o);
    else if (kind && strcmp(kind, "exec") == 0)
        agent_run_exec(a, job, &o);
    else
        api_error_set(&o.err, API_INVALID_ARGUMENT, "unknown assignment kind \"%.40s\"", kind ? kind : "");

    char labels[96];
    const char *kind_label = agent_kind_label(kind);
    metrics_observe(agent_m_assignment_seconds, metrics_labels(labels, sizeof labels, "kind", kind_label, NULL),
                    (double)(time_mono_ms() - t0) / 1000.0);
    metrics_add(agent_m_assignments,
                metrics_labels(labels, sizeof labels, "kind", kind_label, "outcome",
                               o.ok ? "succeeded" : o.err.code == API_CANCELLED ? "cancelled" : "failed", NULL),
                1);
    if (!o.ok && o.err.code == API_CANCELLED) {
        /* create and delete are idempotent: the lease expires and the
         * operation is leased again. */
        log_info(AGENT_COMPONENT, "left operation %s to its lease expiry: %s", op_id, o.err.message);
        runtime_exit_release(&o.exit);
        return NULL;
    }
    if (o.ok)
        log_info(AGENT_COMPONENT, "operation %s succeeded in %lld ms", op_id, (long long)(time_mono_ms() - t0));
    else
        log_warn(AGENT_COMPONENT, "operation %s failed: %s: %s", op_id, api_code_info(o.err.code)->name,
                 o.err.message);

    json_object *body = json_object_new_object();
    jsonx_add_str(body, "operation_id", op_id);
    jsonx_add_int(body, "attempt", attempt);
    jsonx_add_str(body, "outcome", o.ok ? "succeeded" : "failed");
    if (!o.ok) {
        json_object *e = json_object_new_object();
        jsonx_add_str(e, "code", api_code_info(o.err.code)->name);
        jsonx_add_str(e, "message", o.err.message);
        jsonx_add(body, "error", e);
    }
    if (o.result) {
        jsonx_add(body, "result", o.result);
        o.result = NULL;
    }
    if (o.ok && o.runtime_ref[0])
        jsonx_add_str(body, "runtime_ref", o.runtime_ref);
    if (!o.ok && o.exit.known) {
        json_object *ob = json_object_new_object();
        jsonx_add_str(ob, "state", o.exit.state);
        agent_add_exit(ob, &o.exit);
        jsonx_add(body, "observed", ob);
    }
    runtime_exit_release(&o.exit);
    return body;
}

static void *agent_executor_main(void *arg)
{
    agent_t *a = arg;
    httpc_t *c = NULL;
    pthread_mutex_lock(&a->mu);
    int slot = a->exec_slots++;
    pthread_mutex_unlock(&a->mu);
    if (!(c = agent_client(a))) {
        log_error(AGENT_COMPONENT, "failed to create an HTTP client for an executor");
        return NULL;
    }
    for (;;) {
        pthread_mutex_lock(&a->mu);
        while (a->qlen == 0 && !a->exec_stop)
            pthread_cond_wait(&a->cond, &a->mu);
        if (a->qlen == 0) {
            pthread_mutex_unlock(&a->mu);
            break;
        }
        json_object *job = a->queue[a->qhead];
        a->qhead = (a->qhead + 1) % a->qcap;
        a->qlen--;
        a->busy++;
        metrics_set(agent_m_running, NULL, a->busy);
        const char *job_sbx = jsonx_get_str(job, "sandbox_id");
        if (slot < a->executors)
            snprintf(a->inflight[slot], SBX_ID_MAX, "%s", job_sbx ? job_sbx : "");
        pthread_cond_broadcast(&a->cond);
        pthread_mutex_unlock(&a->mu);

        agent_run(a, c, job);
        agent_release(a, jsonx_get_str(job, "operation_id"));
        json_object_put(job);

        pthread_mutex_lock(&a->mu);
        if (slot < a->executors)
            a->inflight[slot][0] = '\0';
        a->busy--;
        metrics_set(agent_m_running, NULL, a->busy);
        pthread_cond_broadcast(&a->cond);
        pthread_mutex_unlock(&a->mu);
    }
    httpc_free(c);
    return NULL;
}

/* ---- poller ------------------------------------------------------------ */

/* Queues one assignment (takes the reference), waiting for room. Returns
 * false when the agent stops first (the assignment is then released). */
static bool agent_enqueue(agent_t *a, json_object *job)
{
    pthread_mutex_lock(&a->mu);
    while (a->qlen == a->qcap && !agent_flag(&a->stop_poll))
        pthread_cond_wait(&a->cond, &a->mu);
    if (a->qlen == a->qcap) {
        pthread_mutex_unlock(&a->mu);
        json_object_put(job);
        return false;
    }
    a->queue[(a->qhead + a->qlen) % a->qcap] = job;
    a->qlen++;
    pthread_cond_broadcast(&a->cond);
    pthread_mutex_unlock(&a->mu);
    return true;
}

static void *agent_poller_main(void *arg)
{
    agent_t *a = arg;
    httpc_t *c = NULL;
    int last_kind = 0;
    int64_t backoff = AGENT_BACKOFF_MIN_MS;
    if (!(c = agent_client(a))) {
        log_error(AGENT_COMPONENT, "failed to create an HTTP client for the poller");
        return NULL;
    }
    httpc_set_abort_flag(c, &a->stop_poll);
    while (!agent_flag(&a->stop_poll)) {
        pthread_mutex_lock(&a->mu);
        bool must_register = !a->registered || a->need_register;
        pthread_mutex_unlock(&a->mu);
        if (must_register) {
            if (agent_register(a, c) < 0)
                break;
            last_kind = 0;
            continue;
        }
        char wid[AGENT_WORKER_ID_MAX], path[AGENT_WORKER_ID_MAX + 32];
        agent_worker_id(a, wid, sizeof wid);
        snprintf(path, sizeof path, "/v1/workers/%s/poll?wait=%d", wid, AGENT_POLL_WAIT_S);
        httpc_response_t resp;
        int rc = httpc_request(c, "GET", path, NULL, NULL, AGENT_POLL_TIMEOUT_MS, &resp);
        if (agent_flag(&a->stop_poll)) {
            httpc_response_release(&resp);
            break;
        }
        json_object *list = rc == 0 && resp.status == 200 ? jsonx_get_arr(resp.json, "assignments") : NULL;
        if (list) {
            agent_contact(a);
            backoff = AGENT_BACKOFF_MIN_MS;
            last_kind = 0;
            size_t n = json_object_array_length(list);
            for (size_t i = 0; i < n; i++) {
                json_object *job = json_object_get(json_object_array_get_idx(list, i));
                char held_id[SBX_ID_MAX];
                snprintf(held_id, sizeof held_id, "%s",
                         jsonx_get_str(job, "operation_id") ? jsonx_get_str(job, "operation_id") : "");
                agent_hold(a, held_id);
                if (!agent_enqueue(a, job)) {
                    agent_release(a, held_id);
                    log_warn(AGENT_COMPONENT, "stopping: left %zu received assignments to their lease expiry",
                             n - i);
                    break;
                }
            }
            httpc_response_release(&resp);
            continue;
        }
        if (rc == 0 && resp.status == 404) {
            log_warn(AGENT_COMPONENT, "the controller does not know worker %s; registering again", wid);
            pthread_mutex_lock(&a->mu);
            a->need_register = true;
            pthread_mutex_unlock(&a->mu);
            httpc_response_release(&resp);
            continue;
        }
        agent_exchange_failed(a, c, &last_kind, rc, &resp, "poll the controller");
        httpc_response_release(&resp);
        agent_sleep_ms(a, backoff, &a->stop_poll);
        backoff = backoff * 2 > AGENT_BACKOFF_MAX_MS ? AGENT_BACKOFF_MAX_MS : backoff * 2;
    }
    httpc_free(c);
    return NULL;
}

/* ---- heartbeat --------------------------------------------------------- */

static void agent_add_holding(agent_t *a, json_object *o)
{
    json_object *h = json_object_new_array();
    pthread_mutex_lock(&a->mu);
    for (size_t i = 0; i < a->nheld; i++)
        json_object_array_add(h, json_object_new_string(a->held[i]));
    pthread_mutex_unlock(&a->mu);
    jsonx_add(o, "holding", h);
}

static json_object *agent_heartbeat_body(agent_t *a, int *last_inv_kind, int *last_img_kind)
{
    json_object *o = json_object_new_object();
    agent_add_images(a, o, last_img_kind);
    runtime_object_t *objs = NULL;
    size_t n = 0;
    api_error_t err;
    char cluster[64];
    agent_cluster_id(a, cluster);
    if (runtime_inventory(a->rt, cluster[0] ? cluster : NULL, a->name, &objs, &n, &err) < 0) {
        /* Without an inventory the controller must not conclude that every
         * sandbox is gone: the key is left out rather than sent empty. */
        agent_log_failure(last_inv_kind, -1, "read the runtime inventory", err.message);
        agent_add_holding(a, o);
        return o;
    }
    *last_inv_kind = 0;
    metrics_set(agent_m_sandboxes, NULL, (double)n);
    json_object *inv = json_object_new_array();
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_new_object();
        jsonx_add_str(e, "sandbox_id", objs[i].sandbox_id);
        jsonx_add_str(e, "tenant", objs[i].tenant);
        jsonx_add_str(e, "ref", objs[i].ref);
        jsonx_add_str(e, "state", objs[i].state);
        if (objs[i].exit.known)
            agent_add_exit(e, &objs[i].exit);
        json_object_array_add(inv, e);
    }
    jsonx_add(o, "inventory", inv);
    runtime_inventory_free(objs, n);
    agent_add_holding(a, o);
    return o;
}

/* Removes the runtime objects the controller no longer wants (at most
 * AGENT_ORPHANS_PER_BEAT a heartbeat, so beats stay on time), never one an
 * executor is working on. */
static void agent_remove_orphans(agent_t *a, json_object *list)
{
    size_t n = list ? json_object_array_length(list) : 0;
    for (size_t i = 0; i < n && i < AGENT_ORPHANS_PER_BEAT && !agent_flag(&a->stop_hb); i++) {
        json_object *e = json_object_array_get_idx(list, i);
        const char *sbx = jsonx_get_str(e, "sandbox_id");
        const char *ref = jsonx_get_str(e, "ref");
        if (!sbx || !ref || agent_sandbox_busy(a, sbx))
            continue;
        api_error_t err;
        if (runtime_remove(a->rt, sbx, ref, &err) == 0)
            log_info(AGENT_COMPONENT, "removed orphan %.12s of sandbox %s (the controller no longer wants it)", ref,
                     sbx);
        else
            log_warn(AGENT_COMPONENT, "failed to remove orphan %.12s of sandbox %s: %s", ref, sbx, err.message);
    }
}

static void *agent_heartbeat_main(void *arg)
{
    agent_t *a = arg;
    httpc_t *c = NULL;
    int last_kind = 0, last_inv_kind = 0, last_img_kind = 0;
    if (!(c = agent_client(a))) {
        log_error(AGENT_COMPONENT, "failed to create an HTTP client for the heartbeat");
        return NULL;
    }
    httpc_set_abort_flag(c, &a->stop_hb);
    while (!agent_flag(&a->stop_hb)) {
        pthread_mutex_lock(&a->mu);
        while (!a->registered && !agent_flag(&a->stop_hb))
            pthread_cond_wait(&a->cond, &a->mu);
        int64_t period_ms = a->heartbeat_seconds * 1000;
        bool skip = a->need_register;
        pthread_mutex_unlock(&a->mu);
        if (agent_flag(&a->stop_hb))
            break;
        int64_t t0 = time_mono_ms();
        if (!skip) {
            char wid[AGENT_WORKER_ID_MAX], path[AGENT_WORKER_ID_MAX + 32];
            agent_worker_id(a, wid, sizeof wid);
            snprintf(path, sizeof path, "/v1/workers/%s/heartbeat", wid);
            json_object *body = agent_heartbeat_body(a, &last_inv_kind, &last_img_kind);
            httpc_response_t resp;
            long timeout = period_ms > 10000 ? period_ms : 10000;
            int rc = httpc_request(c, "POST", path, body, NULL, timeout, &resp);
            json_object_put(body);
            bool beat_ok = rc == 0 && resp.status == 200;
            if (!agent_flag(&a->stop_hb))
                metrics_add(agent_m_heartbeats, beat_ok ? "result=\"ok\"" : "result=\"error\"", 1);
            if (beat_ok) {
                last_kind = 0;
                agent_contact(a);
                agent_remove_orphans(a, jsonx_get_arr(resp.json, "remove"));
            } else if (rc == 0 && resp.status == 404) {
                log_warn(AGENT_COMPONENT, "the controller does not know worker %s; registering again", wid);
                pthread_mutex_lock(&a->mu);
                a->need_register = true;
                snprintf(a->last_error, sizeof a->last_error, "the controller does not know this worker");
                pthread_mutex_unlock(&a->mu);
            } else if (!agent_flag(&a->stop_hb)) {
                agent_exchange_failed(a, c, &last_kind, rc, &resp, "send a heartbeat");
            }
            httpc_response_release(&resp);
        }
        int left = time_left_ms(t0 + period_ms);
        if (left > 0)
            agent_sleep_ms(a, left, &a->stop_hb);
    }
    httpc_free(c);
    return NULL;
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
    free(a->held);
    agent_urls_free(a);
    free(a->controller_url);
    free(a->token);
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
        for (int m = NET_NONE; m <= NET_OPEN; m++) {
            if (modes & (1u << m)) {
                size_t l = strlen(list);
                snprintf(list + l, sizeof list - l, "%s%s", l ? "," : "", net_mode_name((net_mode_t)m));
            } else {
                log_warn(AGENT_COMPONENT, "isolation %s: network %s not offered: %s", isolation_name((isolation_t)c),
                         net_mode_name((net_mode_t)m), runtime_network_unavailable(rt, (isolation_t)c,
                                                                                  (net_mode_t)m));
            }
        }
        log_info(AGENT_COMPONENT, "isolation %s offered with networks %s", isolation_name((isolation_t)c), list);
    }
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
    const char *url = cfg_str(cfg, CFG_CONTROLLER_URL);
    const char *tok = token ? token : cfg_str(cfg, CFG_WORKER_TOKEN);
    if (!url || (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0)) {
        snprintf(err, errlen, "controller_url must be an http:// or https:// URL");
        r = SBX_EINVAL;
        goto cleanup;
    }
    if (!tok || !*tok) {
        snprintf(err, errlen, "no worker token: set worker_token (SANDBOX_WORKER_TOKEN)");
        r = SBX_EINVAL;
        goto cleanup;
    }
    char host[256] = "";
    const char *name = cfg_str(cfg, CFG_WORKER_NAME);
    if (!name || !*name) {
        if (gethostname(host, sizeof host - 1) < 0 || !host[0])
            snprintf(host, sizeof host, "worker");
        name = host;
    }
    if (strlen(name) > SBX_MAX_NAME_BYTES) {
        snprintf(err, errlen, "worker_name is longer than %d bytes", SBX_MAX_NAME_BYTES);
        r = SBX_EINVAL;
        goto cleanup;
    }
    a->controller_url = strdup(url);
    if (a->controller_url && (r = agent_urls_parse(a, err, errlen)) < 0)
        goto cleanup;
    a->token = strdup(tok);
    a->name = strdup(name);
    if (!a->controller_url || !a->token || !a->name) {
        snprintf(err, errlen, "out of memory");
        r = SBX_ENOMEM;
        goto cleanup;
    }
    if ((r = agent_labels_parse(cfg_str(cfg, CFG_WORKER_LABELS), &a->labels, err, errlen)) < 0)
        goto cleanup;
    a->cpu_millis = cfg_int(cfg, CFG_WORKER_CPU_MILLIS);
    if (a->cpu_millis <= 0) {
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        a->cpu_millis = 4 * (int64_t)(ncpu > 0 ? ncpu : 1) * 1000;
    }
    a->memory_mib = cfg_int(cfg, CFG_WORKER_MEMORY_MIB);
    if (a->memory_mib <= 0)
        a->memory_mib = agent_host_memory_mib();
    a->slots = cfg_int(cfg, CFG_WORKER_SLOTS);
    a->executors = (int)cfg_int(cfg, CFG_WORKER_EXECUTORS);
    if (a->executors <= 0)
        a->executors = 8;
    a->heartbeat_seconds = 5;
    a->lease_seconds = 30;
    a->qcap = (size_t)a->executors * AGENT_QUEUE_PER_EXECUTOR;
    a->queue = calloc(a->qcap, sizeof *a->queue);
    a->exec_threads = calloc((size_t)a->executors, sizeof *a->exec_threads);
    a->inflight = calloc((size_t)a->executors, sizeof *a->inflight);
    a->held_cap = a->qcap + (size_t)a->executors + 64;
    a->held = calloc(a->held_cap, sizeof *a->held);
    if (!a->queue || !a->exec_threads || !a->inflight || !a->held) {
        snprintf(err, errlen, "out of memory");
        r = SBX_ENOMEM;
        goto cleanup;
    }
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

    api_error_t rerr;
    if (!a->rt && (r = runtime_open(cfg, a->name, &a->rt, &rerr)) < 0) {
        snprintf(err, errlen, "%s", rerr.message);
        r = r == SBX_EINVAL ? SBX_EINVAL : SBX_EUNAVAIL;
        goto cleanup;
    }
    agent_log_offer(a->rt);
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
    };
    if ((r = forward_new(&fopt, &a->fwd, err, errlen)) < 0)
        goto cleanup;
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
            goto cleanup;
    }
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
    if (pthread_create(&a->poller, NULL, agent_poller_main, a) != 0) {
        r = SBX_ENOMEM;
        goto cleanup;
    }
    a->poller_started = true;
    log_info(AGENT_COMPONENT, "worker %s started: controller %s, runtime %s, %d executors, cpu_millis=%lld "
             "memory_mib=%lld slots=%lld", a->name, a->controller_url, runtime_name(a->rt), a->executors,
             (long long)a->cpu_millis, (long long)a->memory_mib, (long long)a->slots);
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

    /* 2. Assignments not started yet are left to their lease expiry; the
     * ones running finish, within a grace period after which the runtime
     * gives up (an exec is killed and reported failed). */
    pthread_mutex_lock(&a->mu);
    if (a->qlen)
        log_warn(AGENT_COMPONENT, "stopping: left %zu queued assignments to their lease expiry", a->qlen);
    while (a->qlen) {
        json_object_put(a->queue[a->qhead]);
        a->qhead = (a->qhead + 1) % a->qcap;
        a->qlen--;
    }
    a->exec_stop = true;
    pthread_cond_broadcast(&a->cond);
    if (a->busy)
        log_info(AGENT_COMPONENT, "stopping: waiting for %d running assignments", a->busy);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += AGENT_STOP_GRACE_MS / 1000;
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

    /* 3. The heartbeat kept leases alive until the reports went out. */
    pthread_mutex_lock(&a->mu);
    agent_flag_set(&a->stop_hb);
    pthread_cond_broadcast(&a->cond);
    pthread_mutex_unlock(&a->mu);
    if (a->heartbeat_started)
        pthread_join(a->heartbeat, NULL);
    a->heartbeat_started = false;
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
    pthread_cond_destroy(&a->cond);
    pthread_mutex_destroy(&a->mu);
    agent_free_memory(a);
}

const char *agent_probe_result(const agent_t *a, isolation_t cls)
{
    return a && a->rt ? runtime_probe_result(a->rt, cls) : NULL;
}
