/* sandbox-sim workers: N hollow workers that register, long-poll, report
 * with the fencing token and heartbeat their inventory through the real
 * worker API, as `sandboxd worker` does, running nothing: each assignment
 * succeeds after a simulated latency. */
#include "sim.h"
#include "errors.h"
#include "limits.h"

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SIM_POLL_WAIT_S        30
#define SIM_REPORT_TRIES       20
#define SIM_REPORT_RETRY_MS    250
#define SIM_BACKOFF_MAX_MS     5000
#define SIM_MAX_WORKERS        10000
#define SIM_REF_MAX            48

typedef struct sim_fleet sim_fleet_t;
typedef struct sim_worker sim_worker_t;

/* A sorted set of sandbox ids. */
typedef struct sim_idset {
    char (*ids)[SBX_ID_MAX];
    size_t n;
} sim_idset_t;

typedef struct sim_sbx {
    char id[SBX_ID_MAX];
    char tenant[64];
    char ref[SIM_REF_MAX];
} sim_sbx_t;

/* One assignment between its poll and its acknowledged report. */
typedef struct sim_job {
    sim_worker_t *w;
    json_object *job;          /* the assignment, owned */
    json_object *report;       /* the report body once run, owned */
    struct event *timer;
    int tries;
    struct sim_job *next;
} sim_job_t;

struct sim_worker {
    sim_fleet_t *f;
    int idx;
    char name[SBX_MAX_NAME_BYTES + 1];
    char token[SBX_TOKEN_MAX + 1];
    char id[SBX_ID_MAX];
    struct evhttp_connection *poll_c, *ctl_c;
    struct event *hb_timer, *poll_timer;
    sim_sbx_t *inv;
    size_t ninv, capinv;
    /* Inventory changes, as sandboxd worker sends them (docs/worker.md):
     * the ids the controller acknowledged at acked_gen, those of the beat
     * in flight, and when the last full inventory was acknowledged. */
    sim_idset_t acked, sent;
    int64_t acked_gen, sent_gen, last_full_ms;
    bool sent_full;
    sim_job_t *jobs;
    bool registered, registering, polling;
    int64_t backoff_ms;
    int64_t period_ms;
};

typedef struct sim_counts {
    uint64_t registered, assignments[3], reports_ok, reports_refused, reports_failed, beats_ok, beats_failed, polls;
} sim_counts_t;

struct sim_fleet {
    sim_target_t t;
    struct event_base *base;
    sim_worker_t *w;
    int n;
    int64_t latency_ms[3];     /* create, exec, delete */
    int64_t cpu_millis, memory_mib, slots;
    char classes[3][16];
    int nclasses;
    json_object *labels;       /* owned */
    json_object *images;       /* owned */
    int64_t heartbeat_ms;      /* 0: the controller's heartbeat_seconds */
    sim_counts_t c;
    bool quiet;
    FILE *received;            /* --received-log, or NULL */
};

static const char *const sim_kinds[3] = { "create", "exec", "delete" };

static int sim_kind_index(const char *k)
{
    for (int i = 0; k && i < 3; i++)
        if (strcmp(k, sim_kinds[i]) == 0)
            return i;
    return -1;
}

static void sim_worker_poll(sim_worker_t *w);
static void sim_worker_register(sim_worker_t *w);

/* The next backoff after a failure, doubling to SIM_BACKOFF_MAX_MS. */
static int64_t sim_backoff(sim_worker_t *w)
{
    int64_t b = w->backoff_ms ? w->backoff_ms : 250;
    w->backoff_ms = b * 2 > SIM_BACKOFF_MAX_MS ? SIM_BACKOFF_MAX_MS : b * 2;
    return b;
}

/* ---- inventory --------------------------------------------------------- */

static sim_sbx_t *sim_inv_find(sim_worker_t *w, const char *id)
{
    for (size_t i = 0; id && i < w->ninv; i++)
        if (strcmp(w->inv[i].id, id) == 0)
            return &w->inv[i];
    return NULL;
}

static int sim_inv_add(sim_worker_t *w, const char *id, const char *tenant, char ret_ref[SIM_REF_MAX])
{
    sim_sbx_t *s = sim_inv_find(w, id);
    if (!s) {
        if (w->ninv == w->capinv) {
            size_t cap = w->capinv ? w->capinv * 2 : 16;
            sim_sbx_t *p = realloc(w->inv, cap * sizeof *p);
            if (!p)
                return SBX_ENOMEM;
            w->inv = p;
            w->capinv = cap;
        }
        s = &w->inv[w->ninv++];
        snprintf(s->id, sizeof s->id, "%s", id);
        snprintf(s->tenant, sizeof s->tenant, "%s", tenant ? tenant : "");
        snprintf(s->ref, sizeof s->ref, "sim-%s", id);
    }
    memcpy(ret_ref, s->ref, SIM_REF_MAX);
    return 0;
}

static void sim_inv_remove(sim_worker_t *w, const char *id)
{
    sim_sbx_t *s = sim_inv_find(w, id);
    if (s)
        *s = w->inv[--w->ninv];
}

/* ---- assignments and reports ------------------------------------------- */

static void sim_job_free(sim_job_t *j)
{
    sim_worker_t *w = j->w;
    for (sim_job_t **pp = &w->jobs; *pp; pp = &(*pp)->next)
        if (*pp == j) {
            *pp = j->next;
            break;
        }
    if (j->timer)
        event_free(j->timer);
    json_object_put(j->job);
    json_object_put(j->report);
    free(j);
}

static void sim_job_send_report(sim_job_t *j);

static void sim_report_done(void *ud, const sim_resp_t *r)
{
    sim_job_t *j = ud;
    sim_fleet_t *f = j->w->f;
    char why[512];
    if (r->status == 200) {
        f->c.reports_ok++;
        j->w->backoff_ms = 0;
        sim_job_free(j);
        return;
    }
    if (r->status == 409 || (r->status >= 400 && r->status < 500 && r->status != 404 && r->status != 408 &&
                             r->status != 429)) {
        /* stale_lease: the operation went elsewhere; nothing to retry. */
        f->c.reports_refused++;
        if (!f->quiet)
            sim_errorf("worker %s: report of %s refused: %s", j->w->name, sim_jstr(j->job, "operation_id"),
                       sim_resp_error(r, why, sizeof why));
        sim_job_free(j);
        return;
    }
    if (++j->tries >= SIM_REPORT_TRIES) {
        f->c.reports_failed++;
        sim_errorf("worker %s: failed to report %s after %d tries: %s", j->w->name, sim_jstr(j->job, "operation_id"),
                   j->tries, sim_resp_error(r, why, sizeof why));
        sim_job_free(j);
        return;
    }
    sim_after_ms(j->timer, SIM_REPORT_RETRY_MS * (j->tries < 8 ? j->tries : 8));
}

static void sim_job_send_report(sim_job_t *j)
{
    char path[SBX_ID_MAX + 32];
    snprintf(path, sizeof path, "/v1/workers/%s/report", j->w->id);
    if (sim_http_send(j->w->ctl_c, &j->w->f->t, EVHTTP_REQ_POST, path, j->w->token, j->report, sim_report_done, j) <
        0) {
        j->tries++;
        sim_after_ms(j->timer, SIM_REPORT_RETRY_MS);
    }
}

/* The simulated runtime: the assignment's effect on the inventory and its
 * report, as agent_run_assignment would make it. */
static json_object *sim_job_run(sim_worker_t *w, json_object *job, int kind)
{
    const char *sbx = sim_jstr(job, "sandbox_id");
    json_object *attempt = NULL;
    json_object_object_get_ex(job, "attempt", &attempt);
    json_object *body = json_object_new_object();
    json_object_object_add(body, "operation_id", json_object_new_string(sim_jstr(job, "operation_id")));
    json_object_object_add(body, "attempt", json_object_new_int64(json_object_get_int64(attempt)));
    const char *err_code = NULL, *err_msg = NULL;
    char ref[SIM_REF_MAX];
    if (!sbx) {
        err_code = "invalid_argument";
        err_msg = "the assignment has no sandbox_id";
    } else if (kind == 0) {
        if (sim_inv_add(w, sbx, sim_jstr(job, "tenant"), ref) < 0) {
            err_code = "internal";
            err_msg = "out of memory";
        } else {
            json_object_object_add(body, "runtime_ref", json_object_new_string(ref));
        }
    } else if (kind == 1) {
        if (!sim_inv_find(w, sbx)) {
            err_code = "runtime_error";
            err_msg = "sandbox container not found";
        } else {
            json_object *res = json_object_new_object();
            json_object_object_add(res, "exit_code", json_object_new_int(0));
            json_object_object_add(res, "signal", json_object_new_int(0));
            json_object_object_add(res, "timed_out", json_object_new_boolean(0));
            json_object_object_add(res, "duration_ms", json_object_new_int64(w->f->latency_ms[1]));
            json_object_object_add(res, "stdout", json_object_new_string("sim\n"));
            json_object_object_add(res, "stderr", json_object_new_string(""));
            json_object_object_add(res, "stdout_truncated", json_object_new_boolean(0));
            json_object_object_add(res, "stderr_truncated", json_object_new_boolean(0));
            json_object_object_add(res, "stdout_bytes", json_object_new_int(4));
            json_object_object_add(res, "stderr_bytes", json_object_new_int(0));
            json_object_object_add(body, "result", res);
        }
    } else if (kind == 2) {
        sim_inv_remove(w, sbx);
    } else {
        err_code = "invalid_argument";
        err_msg = "unknown assignment kind";
    }
    json_object_object_add(body, "outcome", json_object_new_string(err_code ? "failed" : "succeeded"));
    if (err_code) {
        json_object *e = json_object_new_object();
        json_object_object_add(e, "code", json_object_new_string(err_code));
        json_object_object_add(e, "message", json_object_new_string(err_msg));
        json_object_object_add(body, "error", e);
    }
    return body;
}

static void sim_job_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    sim_job_t *j = arg;
    if (!j->report) {
        int kind = sim_kind_index(sim_jstr(j->job, "kind"));
        j->report = sim_job_run(j->w, j->job, kind);
        j->w->f->c.assignments[kind < 0 ? 0 : kind]++;
    }
    sim_job_send_report(j);
}

static void sim_job_start(sim_worker_t *w, json_object *job)
{
    if (!sim_jstr(job, "operation_id")) {
        sim_errorf("worker %s: dropped an assignment without operation_id", w->name);
        return;
    }
    sim_job_t *j = calloc(1, sizeof *j);
    if (!j)
        return;
    j->w = w;
    j->job = json_object_get(job);
    j->timer = evtimer_new(w->f->base, sim_job_timer_cb, j);
    if (!j->timer) {
        json_object_put(j->job);
        free(j);
        return;
    }
    j->next = w->jobs;
    w->jobs = j;
    int kind = sim_kind_index(sim_jstr(job, "kind"));
    sim_after_ms(j->timer, kind < 0 ? 0 : w->f->latency_ms[kind]);
}

/* ---- long poll --------------------------------------------------------- */

/* An API timestamp (YYYY-MM-DDTHH:MM:SS.mmmZ, UTC) in microseconds since
 * the epoch; -1 when it is not one. */
static int64_t sim_ts_us(const char *ts)
{
    struct tm tm = { 0 };
    int ms = 0, n = 0;
    if (!ts || sscanf(ts, "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                      &tm.tm_min, &tm.tm_sec, &ms, &n) != 7 || ts[n] != '\0')
        return -1;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    time_t t = timegm(&tm);
    return t == (time_t)-1 ? -1 : (int64_t)t * 1000000 + ms * 1000;
}

/* --received-log: the assignment's wait from acceptance to now. */
static void sim_job_received(sim_fleet_t *f, json_object *job)
{
    if (!f->received)
        return;
    int64_t at = sim_ts_us(sim_jstr(job, "created_at"));
    const char *kind = sim_jstr(job, "kind");
    if (at < 0 || !kind || sim_kind_index(kind) < 0)
        return;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t us = (int64_t)now.tv_sec * 1000000 + now.tv_nsec / 1000 - at;
    fprintf(f->received, "%s %.3f\n", kind, (double)(us < 0 ? 0 : us) / 1000.0);
}

static void sim_poll_done(void *ud, const sim_resp_t *r)
{
    sim_worker_t *w = ud;
    json_object *list = NULL;
    w->polling = false;
    w->f->c.polls++;
    if (r->status == 200 && r->json && json_object_object_get_ex(r->json, "assignments", &list) &&
        json_object_is_type(list, json_type_array)) {
        w->backoff_ms = 0;
        for (size_t i = 0; i < json_object_array_length(list); i++) {
            json_object *job = json_object_array_get_idx(list, i);
            sim_job_received(w->f, job);
            sim_job_start(w, job);
        }
        if (w->f->received)
            fflush(w->f->received);
        sim_worker_poll(w);
        return;
    }
    char why[512];
    if (r->status == 404) {
        if (!w->f->quiet)
            sim_errorf("worker %s: the controller does not know it; registering again", w->name);
        w->registered = false;
        sim_worker_register(w);
        return;
    }
    if (!w->f->quiet)
        sim_errorf("worker %s: failed to poll: %s", w->name, sim_resp_error(r, why, sizeof why));
    sim_after_ms(w->poll_timer, sim_backoff(w));
}

static void sim_worker_poll(sim_worker_t *w)
{
    char path[SBX_ID_MAX + 64];
    if (w->polling)
        return;
    snprintf(path, sizeof path, "/v1/workers/%s/poll?wait=%d&max=%d", w->id, SIM_POLL_WAIT_S, SBX_CLAIM_MAX);
    if (sim_http_send(w->poll_c, &w->f->t, EVHTTP_REQ_GET, path, w->token, NULL, sim_poll_done, w) == 0)
        w->polling = true;
    else
        sim_after_ms(w->poll_timer, sim_backoff(w));
}

static void sim_poll_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    sim_worker_t *w = arg;
    if (w->registered)
        sim_worker_poll(w);
    else
        sim_worker_register(w);
}

/* ---- heartbeat --------------------------------------------------------- */

static int sim_id_cmp(const void *a, const void *b) { return strcmp(a, b); }

static bool sim_idset_has(const sim_idset_t *s, const char *id)
{
    return s->n && bsearch(id, s->ids, s->n, sizeof s->ids[0], sim_id_cmp);
}

static void sim_idset_release(sim_idset_t *s)
{
    free(s->ids);
    s->ids = NULL;
    s->n = 0;
}

/* The worker's inventory ids, sorted, into *ret (empty when out of memory:
 * the next beat is then a full one). */
static void sim_idset_of(const sim_worker_t *w, sim_idset_t *ret)
{
    ret->n = 0;
    ret->ids = w->ninv ? malloc(w->ninv * sizeof ret->ids[0]) : NULL;
    if (!ret->ids)
        return;
    for (size_t i = 0; i < w->ninv; i++)
        memcpy(ret->ids[ret->n++], w->inv[i].id, SBX_ID_MAX);
    qsort(ret->ids, ret->n, sizeof ret->ids[0], sim_id_cmp);
}

static json_object *sim_inv_entry(const sim_sbx_t *s)
{
    json_object *e = json_object_new_object();
    json_object_object_add(e, "sandbox_id", json_object_new_string(s->id));
    json_object_object_add(e, "tenant", json_object_new_string(s->tenant));
    json_object_object_add(e, "ref", json_object_new_string(s->ref));
    json_object_object_add(e, "state", json_object_new_string("running"));
    return e;
}

static int64_t sim_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The whole inventory with a new generation after a register, every
 * SBX_INVENTORY_FULL_SECONDS and after an answer that did not acknowledge
 * the last one; otherwise the changes since the acknowledged generation. */
static json_object *sim_heartbeat_body(sim_worker_t *w)
{
    json_object *o = json_object_new_object();
    sim_idset_release(&w->sent);
    sim_idset_of(w, &w->sent);
    int64_t now = sim_now_us() / 1000;
    w->sent_full = w->acked_gen <= 0 || (w->ninv && !w->sent.ids) ||
                   now - w->last_full_ms >= (int64_t)SBX_INVENTORY_FULL_SECONDS * 1000;
    if (w->sent_full) {
        json_object *inv = json_object_new_array_ext((int)w->ninv);
        for (size_t i = 0; i < w->ninv; i++)
            json_object_array_add(inv, sim_inv_entry(&w->inv[i]));
        json_object_object_add(o, "inventory", inv);
        int64_t g = sim_wall_ms();
        w->sent_gen = g > w->acked_gen ? g : w->acked_gen + 1;
        json_object_object_add(o, "inventory_generation", json_object_new_int64(w->sent_gen));
    } else {
        w->sent_gen = w->acked_gen + 1;
        json_object *up = json_object_new_array(), *gone = json_object_new_array(), *d = json_object_new_object();
        for (size_t i = 0; i < w->ninv; i++)
            if (!sim_idset_has(&w->acked, w->inv[i].id))
                json_object_array_add(up, sim_inv_entry(&w->inv[i]));
        for (size_t i = 0; i < w->acked.n; i++)
            if (!sim_idset_has(&w->sent, w->acked.ids[i]))
                json_object_array_add(gone, json_object_new_string(w->acked.ids[i]));
        json_object_object_add(d, "base", json_object_new_int64(w->acked_gen));
        json_object_object_add(d, "generation", json_object_new_int64(w->sent_gen));
        json_object_object_add(d, "upsert", up);
        json_object_object_add(d, "gone", gone);
        json_object_object_add(o, "inventory_delta", d);
    }
    json_object *held = json_object_new_array();
    for (sim_job_t *j = w->jobs; j; j = j->next)
        json_object_array_add(held, json_object_new_string(sim_jstr(j->job, "operation_id")));
    json_object_object_add(o, "holding", held);
    json_object_object_add(o, "images", json_object_get(w->f->images));
    return o;
}

static void sim_heartbeat_done(void *ud, const sim_resp_t *r)
{
    sim_worker_t *w = ud;
    json_object *remove = NULL;
    char why[512];
    if (r->status == 200) {
        w->f->c.beats_ok++;
        json_object *g = NULL, *resync = NULL;
        bool acked = r->json && json_object_object_get_ex(r->json, "inventory_generation", &g) &&
                     json_object_get_int64(g) == w->sent_gen &&
                     !(json_object_object_get_ex(r->json, "inventory_resync", &resync) &&
                       json_object_get_boolean(resync));
        if (acked) {
            sim_idset_release(&w->acked);
            w->acked = w->sent;
            w->sent = (sim_idset_t){ 0 };
            w->acked_gen = w->sent_gen;
            if (w->sent_full)
                w->last_full_ms = sim_now_us() / 1000;
        } else {
            w->acked_gen = 0; /* the next beat sends the whole inventory */
        }
        /* Orphans the controller no longer wants: gone from the inventory. */
        if (r->json && json_object_object_get_ex(r->json, "remove", &remove) &&
            json_object_is_type(remove, json_type_array))
            for (size_t i = 0; i < json_object_array_length(remove); i++)
                sim_inv_remove(w, sim_jstr(json_object_array_get_idx(remove, i), "sandbox_id"));
    } else if (r->status == 404) {
        /* The controller forgot this worker (its row was removed): register
         * again, as sandboxd worker does. */
        w->f->c.beats_failed++;
        w->registered = false;
        sim_worker_register(w);
    } else {
        w->f->c.beats_failed++;
        if (!w->f->quiet)
            sim_errorf("worker %s: failed to send a heartbeat: %s", w->name, sim_resp_error(r, why, sizeof why));
    }
    sim_after_ms(w->hb_timer, w->period_ms);
}

static void sim_hb_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    sim_worker_t *w = arg;
    if (!w->registered) {
        sim_after_ms(w->hb_timer, w->period_ms);
        return;
    }
    char path[SBX_ID_MAX + 32];
    snprintf(path, sizeof path, "/v1/workers/%s/heartbeat", w->id);
    json_object *body = sim_heartbeat_body(w);
    if (sim_http_send(w->ctl_c, &w->f->t, EVHTTP_REQ_POST, path, w->token, body, sim_heartbeat_done, w) < 0)
        sim_after_ms(w->hb_timer, w->period_ms);
    json_object_put(body);
}

/* ---- registration ------------------------------------------------------ */

static json_object *sim_register_body(sim_worker_t *w)
{
    sim_fleet_t *f = w->f;
    json_object *o = json_object_new_object();
    json_object_object_add(o, "name", json_object_new_string(w->name));
    json_object_object_add(o, "runtime", json_object_new_string("sim"));
    json_object *iso = json_object_new_array(), *nets = json_object_new_object();
    for (int i = 0; i < f->nclasses; i++) {
        json_object_array_add(iso, json_object_new_string(f->classes[i]));
        json_object *m = json_object_new_array();
        json_object_array_add(m, json_object_new_string("none"));
        json_object_array_add(m, json_object_new_string("restricted"));
        json_object_array_add(m, json_object_new_string("open"));
        json_object_object_add(nets, f->classes[i], m);
    }
    json_object_object_add(o, "isolation", iso);
    json_object_object_add(o, "networks", nets);
    json_object_object_add(o, "probes", json_object_new_object());
    json_object_object_add(o, "images", json_object_get(f->images));
    json_object_object_add(o, "labels", json_object_get(f->labels));
    json_object *cap = json_object_new_object();
    json_object_object_add(cap, "cpu_millis", json_object_new_int64(f->cpu_millis));
    json_object_object_add(cap, "memory_mib", json_object_new_int64(f->memory_mib));
    json_object_object_add(cap, "slots", json_object_new_int64(f->slots));
    json_object_object_add(o, "capacity", cap);
    json_object_object_add(o, "version", json_object_new_string("sandbox-sim"));
    return o;
}

static void sim_register_done(void *ud, const sim_resp_t *r)
{
    sim_worker_t *w = ud;
    json_object *wk = NULL, *hb = NULL;
    const char *id = NULL;
    char why[512];
    w->registering = false;
    if (r->status == 200 && r->json && json_object_object_get_ex(r->json, "worker", &wk))
        id = sim_jstr(wk, "id");
    if (!id || strlen(id) >= sizeof w->id || strchr(id, '/') || strchr(id, '?')) {
        sim_errorf("worker %s: failed to register: %s", w->name,
                   r->status == 200 ? "the answer has no worker id" : sim_resp_error(r, why, sizeof why));
        sim_after_ms(w->poll_timer, sim_backoff(w));
        return;
    }
    snprintf(w->id, sizeof w->id, "%s", id);
    if (!w->registered)
        w->f->c.registered++;
    w->registered = true;
    w->backoff_ms = 0;
    w->acked_gen = 0; /* a register resets the controller's generation */
    int64_t secs = 5;
    if (json_object_object_get_ex(r->json, "heartbeat_seconds", &hb))
        secs = json_object_get_int64(hb);
    w->period_ms = w->f->heartbeat_ms > 0 ? w->f->heartbeat_ms : (secs > 0 ? secs : 5) * 1000;
    /* Beats spread over the period, so N workers do not beat at once. */
    if (!evtimer_pending(w->hb_timer, NULL))
        sim_after_ms(w->hb_timer, (int64_t)(w->idx * 7919) % w->period_ms);
    sim_worker_poll(w);
}

static void sim_worker_register(sim_worker_t *w)
{
    if (w->registering)
        return;
    json_object *body = sim_register_body(w);
    if (sim_http_send(w->ctl_c, &w->f->t, EVHTTP_REQ_POST, "/v1/workers/register", w->token, body, sim_register_done,
                      w) == 0)
        w->registering = true;
    else
        sim_after_ms(w->poll_timer, sim_backoff(w));
    json_object_put(body);
}

/* ---- options and main -------------------------------------------------- */

static const char sim_workers_usage[] =
    "usage: sandbox-sim workers --controller URL (--token-file F | --token T) --count N [options]\n"
    "Runs N hollow workers in this process: each registers through the real worker API, long-polls,\n"
    "answers creates, execs and deletes after a simulated latency (an exec exits 0 with \"sim\\n\"),\n"
    "reports with the fencing token and heartbeats its in-memory inventory (as changes, a whole\n"
    "one every 60 s, as sandboxd worker does). Runs until SIGINT/SIGTERM\n"
    "or --duration, then prints one summary line (--json: an object) and exits 0.\n"
    "  --controller URL          http://HOST:PORT of the controller\n"
    "  --token-file F            worker tokens, one a line: worker i uses line i (a worker token acts for one\n"
    "                            worker name; mint them with sandbox tokens create --role worker --worker NAME)\n"
    "  --token T                 one worker token (only with --count 1, or an unbound token for one worker)\n"
    "  --count N                 workers to run (1 to 10000)\n"
    "  --name-prefix P           worker names P0, P1, ... (default sim-)\n"
    "  --latency-ms K=MS,...     simulated runtime latency per kind (default create=50,exec=5,delete=20)\n"
    "  --capacity-cpus N         CPUs each worker advertises (default 64)\n"
    "  --capacity-memory-mib N   memory each worker advertises (default 262144)\n"
    "  --capacity-sandboxes N    sandbox slots each worker advertises (default 1000)\n"
    "  --classes C,...           isolation classes offered (default container,gvisor)\n"
    "  --labels K=V,...          worker labels (default sim=hollow; creates reach these workers only with\n"
    "                            \"selector\":{\"sim\":\"hollow\"}, what sandbox-sim load sends)\n"
    "  --images I,...            images the workers say they hold (default none)\n"
    "  --heartbeat-ms MS         heartbeat period (default: the controller's heartbeat_seconds)\n"
    "  --duration S              stop after S seconds (default: until a signal)\n"
    "  --quiet                   log only failures that end something (a report given up)\n"
    "  --json                    print the summary as JSON\n"
    "  --received-log F          append a line \"KIND MS\" for each assignment received: the milliseconds from\n"
    "                            the controller accepting the operation (its created_at) to the worker's poll\n"
    "                            answer arriving (one clock: the controller on the same machine)\n"
    "Exit: 0 stopped, 1 failure (no worker could register), 2 usage.\n";

static int sim_parse_latency(sim_fleet_t *f, const char *s)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        long v = 0;
        if (!eq)
            return SBX_EINVAL;
        *eq = '\0';
        int k = sim_kind_index(tok);
        if (k < 0 || sim_parse_int(eq + 1, 0, 600000, &v) < 0)
            return SBX_EINVAL;
        f->latency_ms[k] = v;
    }
    return 0;
}

static int sim_parse_labels(json_object *o, const char *s)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", s);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq || eq == tok)
            return SBX_EINVAL;
        *eq = '\0';
        json_object_object_add(o, tok, json_object_new_string(eq + 1));
    }
    return 0;
}

static int sim_parse_list(json_object *arr, const char *s)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", s);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
        json_object_array_add(arr, json_object_new_string(tok));
    return 0;
}

/* Reads up to n tokens, one a line (blank lines and # comments skipped). */
static int sim_read_tokens(const char *path, sim_worker_t *w, int n, int *ret_got)
{
    FILE *fp = fopen(path, "r");
    if (!fp)
        return SBX_EIO;
    char line[512];
    int got = 0;
    while (got < n && fgets(line, sizeof line, fp)) {
        line[strcspn(line, "\r\n")] = '\0';
        char *s = line + strspn(line, " \t");
        if (!*s || *s == '#')
            continue;
        if (strlen(s) > SBX_TOKEN_MAX) {
            fclose(fp);
            return SBX_EINVAL;
        }
        snprintf(w[got++].token, sizeof w[0].token, "%s", s);
    }
    fclose(fp);
    *ret_got = got;
    return 0;
}

static void sim_stop_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    event_base_loopbreak(arg);
}

static void sim_fleet_summary(sim_fleet_t *f, bool json)
{
    size_t live = 0;
    for (int i = 0; i < f->n; i++)
        live += f->w[i].ninv;
    if (json) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "workers", json_object_new_int(f->n));
        json_object_object_add(o, "registered", json_object_new_int64((int64_t)f->c.registered));
        json_object *a = json_object_new_object();
        for (int k = 0; k < 3; k++)
            json_object_object_add(a, sim_kinds[k], json_object_new_int64((int64_t)f->c.assignments[k]));
        json_object_object_add(o, "assignments", a);
        json_object_object_add(o, "reports_ok", json_object_new_int64((int64_t)f->c.reports_ok));
        json_object_object_add(o, "reports_refused", json_object_new_int64((int64_t)f->c.reports_refused));
        json_object_object_add(o, "reports_failed", json_object_new_int64((int64_t)f->c.reports_failed));
        json_object_object_add(o, "heartbeats_ok", json_object_new_int64((int64_t)f->c.beats_ok));
        json_object_object_add(o, "heartbeats_failed", json_object_new_int64((int64_t)f->c.beats_failed));
        json_object_object_add(o, "live_sandboxes", json_object_new_int64((int64_t)live));
        printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
        json_object_put(o);
    } else {
        printf("sim workers: %d registered of %d; assignments create=%llu exec=%llu delete=%llu; reports ok=%llu "
               "refused=%llu failed=%llu; heartbeats ok=%llu failed=%llu; live sandboxes %zu\n",
               (int)f->c.registered, f->n, (unsigned long long)f->c.assignments[0],
               (unsigned long long)f->c.assignments[1], (unsigned long long)f->c.assignments[2],
               (unsigned long long)f->c.reports_ok, (unsigned long long)f->c.reports_refused,
               (unsigned long long)f->c.reports_failed, (unsigned long long)f->c.beats_ok,
               (unsigned long long)f->c.beats_failed, live);
    }
    fflush(stdout);
}

/* What the command line says beyond the fleet's own fields. */
typedef struct sim_workers_opts {
    const char *url, *tokfile, *token, *prefix, *labels, *images, *received;
    long count, duration;
    bool json;
} sim_workers_opts_t;

/* The isolation classes of --classes into f. 0 or SBX_EINVAL. */
static int sim_parse_classes(sim_fleet_t *f, const char *classes)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%s", classes);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (f->nclasses == 3 || (strcmp(tok, "container") && strcmp(tok, "gvisor") && strcmp(tok, "microvm")))
            return SBX_EINVAL;
        snprintf(f->classes[f->nclasses++], sizeof f->classes[0], "%s", tok);
    }
    return f->nclasses > 0 ? 0 : SBX_EINVAL;
}

/* Parses the command line into f and o. Returns -1 to go on, else the
 * exit code (0 for --help, 2 for a usage error, already said). */
static int sim_workers_parse(int argc, char **argv, sim_fleet_t *f, sim_workers_opts_t *o)
{
    enum { O_CTL = 1, O_TOKFILE, O_TOKEN, O_COUNT, O_PREFIX, O_LAT, O_CPUS, O_MEM, O_SBX, O_CLASSES, O_LABELS,
           O_IMAGES, O_HB, O_DUR, O_QUIET, O_JSON, O_RECEIVED, O_HELP };
    static const struct option opts[] = {
        { "controller", required_argument, NULL, O_CTL }, { "token-file", required_argument, NULL, O_TOKFILE },
        { "token", required_argument, NULL, O_TOKEN }, { "count", required_argument, NULL, O_COUNT },
        { "name-prefix", required_argument, NULL, O_PREFIX }, { "latency-ms", required_argument, NULL, O_LAT },
        { "capacity-cpus", required_argument, NULL, O_CPUS },
        { "capacity-memory-mib", required_argument, NULL, O_MEM },
        { "capacity-sandboxes", required_argument, NULL, O_SBX }, { "classes", required_argument, NULL, O_CLASSES },
        { "labels", required_argument, NULL, O_LABELS }, { "images", required_argument, NULL, O_IMAGES },
        { "heartbeat-ms", required_argument, NULL, O_HB }, { "duration", required_argument, NULL, O_DUR },
        { "quiet", no_argument, NULL, O_QUIET }, { "json", no_argument, NULL, O_JSON },
        { "received-log", required_argument, NULL, O_RECEIVED }, { "help", no_argument, NULL, O_HELP }, { NULL, 0, NULL, 0 },
    };
    const char *classes = "container,gvisor";
    long v = 0;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        bool bad = false;
        switch (c) {
        case O_CTL: o->url = optarg; break;
        case O_TOKFILE: o->tokfile = optarg; break;
        case O_TOKEN: o->token = optarg; break;
        case O_COUNT: bad = sim_parse_int(optarg, 1, SIM_MAX_WORKERS, &o->count) < 0; break;
        case O_PREFIX: o->prefix = optarg; break;
        case O_LAT:
            if (sim_parse_latency(f, optarg) < 0) {
                sim_errorf("--latency-ms must be KIND=MS,... with KIND create, exec or delete");
                return 2;
            }
            break;
        case O_CPUS:
            bad = sim_parse_int(optarg, 0, 100000, &v) < 0;
            f->cpu_millis = v * 1000;
            break;
        case O_MEM:
            bad = sim_parse_int(optarg, 0, 1000000000, &v) < 0;
            f->memory_mib = v;
            break;
        case O_SBX:
            bad = sim_parse_int(optarg, 0, 100000, &v) < 0;
            f->slots = v;
            break;
        case O_CLASSES: classes = optarg; break;
        case O_LABELS: o->labels = optarg; break;
        case O_IMAGES: o->images = optarg; break;
        case O_HB:
            bad = sim_parse_int(optarg, 100, 3600000, &v) < 0;
            f->heartbeat_ms = v;
            break;
        case O_DUR: bad = sim_parse_int(optarg, 1, 30 * 86400, &o->duration) < 0; break;
        case O_QUIET: f->quiet = true; break;
        case O_JSON: o->json = true; break;
        case O_RECEIVED: o->received = optarg; break;
        case O_HELP: fputs(sim_workers_usage, stdout); return 0;
        default: fputs(sim_workers_usage, stderr); return 2;
        }
        if (bad) {
            sim_errorf("workers: bad value for --%s: %s (see --help)", opts[c - 1].name, optarg);
            return 2;
        }
    }
    if (optind < argc) {
        sim_errorf("workers: unexpected argument %s (see sandbox-sim workers --help)", argv[optind]);
        return 2;
    }
    if (!o->url || o->count == 0 || (!o->tokfile) == (!o->token)) {
        sim_errorf("workers needs --controller, --count and one of --token-file or --token (see --help)");
        return 2;
    }
    if (o->token && o->count != 1) {
        sim_errorf("--token serves one worker (a worker token acts for one worker name); use --token-file for %ld",
                   o->count);
        return 2;
    }
    if (strlen(o->prefix) + 6 > SBX_MAX_NAME_BYTES) {
        sim_errorf("--name-prefix is too long");
        return 2;
    }
    if (sim_parse_classes(f, classes) < 0) {
        sim_errorf("--classes must list container, gvisor or microvm");
        return 2;
    }
    return -1;
}

/* Makes the loop, the workers with their tokens, connections and timers,
 * and sends every registration. Returns -1 to go on, else the exit code
 * (said already). */
static int sim_fleet_setup(sim_fleet_t *f, const sim_workers_opts_t *o)
{
    char why[256];
    f->labels = json_object_new_object();
    f->images = json_object_new_array();
    if (sim_parse_labels(f->labels, o->labels) < 0) {
        sim_errorf("--labels must be K=V,...");
        return 2;
    }
    if (o->images)
        sim_parse_list(f->images, o->images);
    if (o->received && !(f->received = fopen(o->received, "a"))) {
        sim_errorf("--received-log %s cannot be opened for appending", o->received);
        return 1;
    }
    if (!(f->base = event_base_new())) {
        sim_errorf("cannot create the event loop");
        return 1;
    }
    if (sim_target_parse(o->url, f->base, &f->t, why, sizeof why) < 0) {
        sim_errorf("%s", why);
        return 2;
    }
    f->n = (int)o->count;
    if (!(f->w = calloc((size_t)f->n, sizeof *f->w))) {
        sim_errorf("out of memory for %d workers", f->n);
        return 1;
    }
    if (o->tokfile) {
        int got = 0;
        int r = sim_read_tokens(o->tokfile, f->w, f->n, &got);
        if (r < 0 || got < f->n) {
            sim_errorf("--token-file %s: %s", o->tokfile,
                       r == SBX_EIO ? "cannot be read" : r < 0 ? "a line is longer than a token"
                                                           : "has fewer tokens than --count workers");
            return r == SBX_EIO ? 1 : 2;
        }
    } else {
        snprintf(f->w[0].token, sizeof f->w[0].token, "%s", o->token);
    }
    for (int i = 0; i < f->n; i++) {
        sim_worker_t *w = &f->w[i];
        w->f = f;
        w->idx = i;
        snprintf(w->name, sizeof w->name, "%s%d", o->prefix, i);
        w->poll_c = sim_conn_new(&f->t, SIM_POLL_WAIT_S + 15);
        w->ctl_c = sim_conn_new(&f->t, 30);
        w->hb_timer = evtimer_new(f->base, sim_hb_timer_cb, w);
        w->poll_timer = evtimer_new(f->base, sim_poll_timer_cb, w);
        if (!w->poll_c || !w->ctl_c || !w->hb_timer || !w->poll_timer) {
            sim_errorf("out of memory for worker %d", i);
            return 1;
        }
    }
    for (int i = 0; i < f->n; i++)
        sim_worker_register(&f->w[i]);
    return -1;
}

static void sim_fleet_release(sim_fleet_t *f)
{
    for (int i = 0; f->w && i < f->n; i++) {
        sim_worker_t *w = &f->w[i];
        while (w->jobs)
            sim_job_free(w->jobs);
        if (w->hb_timer)
            event_free(w->hb_timer);
        if (w->poll_timer)
            event_free(w->poll_timer);
        if (w->poll_c)
            evhttp_connection_free(w->poll_c);
        if (w->ctl_c)
            evhttp_connection_free(w->ctl_c);
        free(w->inv);
        sim_idset_release(&w->acked);
        sim_idset_release(&w->sent);
    }
    free(f->w);
    sim_http_release_all();
    json_object_put(f->labels);
    json_object_put(f->images);
    if (f->received)
        fclose(f->received);
    if (f->base)
        event_base_free(f->base);
}

int sim_workers_main(int argc, char **argv)
{
    sim_fleet_t f = { .latency_ms = { 50, 5, 20 }, .cpu_millis = 64000, .memory_mib = 262144, .slots = 1000 };
    sim_workers_opts_t o = { .prefix = "sim-", .labels = "sim=hollow" };
    struct event *sigint = NULL, *sigterm = NULL, *stop = NULL;
    int rc = sim_workers_parse(argc, argv, &f, &o);
    if (rc >= 0)
        return rc;
    signal(SIGPIPE, SIG_IGN);
    if ((rc = sim_fleet_setup(&f, &o)) >= 0)
        goto cleanup;
    sigint = evsignal_new(f.base, SIGINT, sim_stop_cb, f.base);
    sigterm = evsignal_new(f.base, SIGTERM, sim_stop_cb, f.base);
    stop = evtimer_new(f.base, sim_stop_cb, f.base);
    if (!sigint || !sigterm || !stop) {
        sim_errorf("out of memory for the event loop");
        rc = 1;
        goto cleanup;
    }
    event_add(sigint, NULL);
    event_add(sigterm, NULL);
    if (o.duration > 0)
        sim_after_ms(stop, o.duration * 1000);
    event_base_dispatch(f.base);
    sim_fleet_summary(&f, o.json);
    rc = f.c.registered > 0 ? 0 : 1;
    if (rc)
        sim_errorf("no worker could register with %s", o.url);
cleanup:
    if (sigint)
        event_free(sigint);
    if (sigterm)
        event_free(sigterm);
    if (stop)
        event_free(stop);
    sim_fleet_release(&f);
    return rc;
}
