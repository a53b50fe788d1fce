/* The worker agent's registration and heartbeat: what the worker offers,
 * its inventory and the orphans it removes. */
#include "agent_internal.h"
#include "errors.h"
#include "forward.h"
#include "health.h"
#include "httpc.h"
#include "ids.h"
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
    /* their sizes and creation times, when the runtime keeps them */
    json_object *details = NULL;
    if (runtime_image_details(a->rt, &details, &err) == 0)
        jsonx_add(o, "image_details", details);
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
        for (int m = NET_NONE; m < NET_OFFERS; m++)
            if (modes & (1u << m))
                json_object_array_add(ml, json_object_new_string(net_offer_name(m)));
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

/* Logs a failed exchange (once per kind of failure); a transport failure
 * also moves c to the next controller URL. */
void agent_exchange_failed(agent_t *a, httpc_t *c, int *last_kind, int rc, const httpc_response_t *resp,
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

/* Registers, retrying with backoff until the controller answers 200 or the
 * agent stops. Returns 0 when registered. */
int agent_register(agent_t *a, httpc_t *c)
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
                a->register_epoch++;
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
        agent_backoff(a, &backoff, &a->stop_poll);
    }
    json_object_put(body);
    return r;
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

/* Adds "snapshots": the ids of the snapshots this worker holds, with their
 * sizes (the controller answers with those it no longer wants); left out
 * when the runtime cannot list them (an empty list is not the same). */
static void agent_add_snapshots(agent_t *a, json_object *o, const char *cluster)
{
    runtime_snapshot_t *snaps = NULL;
    size_t n = 0;
    api_error_t err;
    if (runtime_snapshot_list(a->rt, cluster[0] ? cluster : NULL, a->name, &snaps, &n, &err) < 0) {
        log_debug(AGENT_COMPONENT, "cannot list the snapshots: %s", err.message);
        return;
    }
    json_object *arr = json_object_new_array();
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_new_object();
        jsonx_add_str(e, "id", snaps[i].id);
        jsonx_add_str(e, "tenant", snaps[i].tenant);
        if (snaps[i].image_bytes >= 0)
            jsonx_add_int(e, "image_bytes", snaps[i].image_bytes);
        json_object_array_add(arr, e);
    }
    free(snaps);
    jsonx_add(o, "snapshots", arr);
}

/* Adds "volume_support" and "volumes": whether this worker can hold
 * volumes, and those it holds (the controller answers with those it no
 * longer wants); the list is left out when it cannot be read. */
static void agent_add_volumes(agent_t *a, json_object *o)
{
    char why[160];
    bool ok = runtime_volume_support(a->rt, why, sizeof why);
    jsonx_add_bool(o, "volume_support", ok);
    if (!ok)
        return;
    runtime_volume_t *vols = NULL;
    size_t n = 0;
    api_error_t err;
    if (runtime_volume_list(a->rt, &vols, &n, &err) < 0) {
        log_debug(AGENT_COMPONENT, "cannot list the volumes: %s", err.message);
        return;
    }
    json_object *arr = json_object_new_array();
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_new_object();
        jsonx_add_str(e, "id", vols[i].id);
        jsonx_add_str(e, "tenant", vols[i].tenant);
        jsonx_add_bool(e, "mounted", vols[i].mounted);
        json_object_array_add(arr, e);
    }
    free(vols);
    jsonx_add(o, "volumes", arr);
}

/* Removes the volumes the controller no longer wants (one still mounted
 * waits for a later beat). */
static void agent_remove_volumes(agent_t *a, json_object *list)
{
    size_t n = list ? json_object_array_length(list) : 0;
    for (size_t i = 0; i < n && i < AGENT_ORPHANS_PER_BEAT && !agent_flag(&a->stop_hb); i++) {
        const char *id = json_object_get_string(json_object_array_get_idx(list, i));
        api_error_t err;
        if (!id || !ids_valid("vol", id))
            continue;
        if (runtime_volume_remove(a->rt, id, &err) == 0)
            log_info(AGENT_COMPONENT, "removed volume %s (the controller no longer wants it)", id);
        else if (err.code == API_CONFLICT)
            log_debug(AGENT_COMPONENT, "volume %s: %s", id, err.message);
        else
            log_warn(AGENT_COMPONENT, "failed to remove volume %s: %s", id, err.message);
    }
}

/* Removes the snapshots the controller no longer wants (a few per beat;
 * one a sandbox still runs from waits for a later beat). */
static void agent_remove_snapshots(agent_t *a, json_object *list)
{
    size_t n = list ? json_object_array_length(list) : 0;
    for (size_t i = 0; i < n && i < AGENT_ORPHANS_PER_BEAT && !agent_flag(&a->stop_hb); i++) {
        const char *id = json_object_get_string(json_object_array_get_idx(list, i));
        api_error_t err;
        if (!id || !ids_valid("snp", id))
            continue;
        if (runtime_snapshot_remove(a->rt, id, a->name, &err) == 0)
            log_info(AGENT_COMPONENT, "removed snapshot %s (the controller no longer wants it)", id);
        else if (err.code == API_CONFLICT)
            log_debug(AGENT_COMPONENT, "snapshot %s: %s", id, err.message);
        else
            log_warn(AGENT_COMPONENT, "failed to remove snapshot %s: %s", id, err.message);
    }
}

static json_object *agent_heartbeat_body(agent_t *a, int *last_inv_kind, int *last_img_kind)
{
    json_object *o = json_object_new_object();
    if (atomic_load(&a->stopping))
        jsonx_add_bool(o, "stopping", true); /* a beat while it stops keeps saying so */
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
    agent_add_snapshots(a, o, cluster);
    agent_add_volumes(a, o);
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

/* ---- inventory changes -------------------------------------------------
 * The controller holds the inventory of the last heartbeat it applied, by
 * generation. A beat sends the whole inventory (with a new generation) after
 * each register, every SBX_INVENTORY_FULL_SECONDS and whenever the last
 * answer did not acknowledge one; otherwise an inventory_delta from the
 * acknowledged generation: the sandboxes whose entries changed (all of a
 * sandbox's entries), every entry of a stopped container again (its details
 * are what the controller fails the sandbox with, maybe only after the
 * inventory grace), and the sandboxes gone. */
typedef struct inv_track {
    json_object *acked;      /* sandbox id → array of its entries, as acknowledged; NULL: none */
    int64_t acked_gen;
    int64_t last_full_ms;
    uint64_t epoch;          /* register_epoch of the acknowledged full one */
    json_object *sent;       /* the map of the beat in flight */
    int64_t sent_gen;
    bool sent_full;
} inv_track_t;

/* The inventory array as sandbox id → array of entries (new references). */
static json_object *inv_map(json_object *inv)
{
    json_object *m = json_object_new_object();
    for (size_t i = 0; i < json_object_array_length(inv); i++) {
        json_object *e = json_object_array_get_idx(inv, i);
        const char *id = jsonx_get_str(e, "sandbox_id");
        json_object *list = NULL;
        if (!id)
            continue;
        if (!json_object_object_get_ex(m, id, &list)) {
            list = json_object_new_array();
            json_object_object_add(m, id, list);
        }
        json_object_array_add(list, json_object_get(e));
    }
    return m;
}

static bool inv_list_stopped(json_object *list)
{
    for (size_t i = 0; i < json_object_array_length(list); i++) {
        const char *st = jsonx_get_str(json_object_array_get_idx(list, i), "state");
        if (!st || strcmp(st, "running") != 0)
            return true;
    }
    return false;
}

/* Turns the body's "inventory" into a delta when one may be sent, and
 * remembers what the beat says (t->sent) for its acknowledgement. */
static void inv_prepare(inv_track_t *t, json_object *body, uint64_t epoch)
{
    json_object *inv = jsonx_get_arr(body, "inventory");
    if (t->sent)
        json_object_put(t->sent);
    t->sent = NULL;
    if (!inv)
        return; /* the runtime could not be listed: nothing is said */
    json_object *cur = inv_map(inv);
    int64_t now = time_mono_ms();
    t->sent_full = !t->acked || t->acked_gen <= 0 || epoch != t->epoch ||
                   now - t->last_full_ms >= SBX_INVENTORY_FULL_SECONDS * 1000;
    t->sent = cur;
    if (t->sent_full) {
        int64_t g = time_wall_ms();
        t->sent_gen = g > t->acked_gen ? g : t->acked_gen + 1;
        jsonx_add_int(body, "inventory_generation", t->sent_gen);
        return;
    }
    t->sent_gen = t->acked_gen + 1;
    json_object *up = json_object_new_array(), *gone = json_object_new_array();
    json_object_object_foreach(cur, id, list)
    {
        json_object *old = NULL;
        bool changed = !json_object_object_get_ex(t->acked, id, &old) ||
                       strcmp(json_object_to_json_string_ext(old, JSON_C_TO_STRING_PLAIN),
                              json_object_to_json_string_ext(list, JSON_C_TO_STRING_PLAIN)) != 0;
        if (changed || inv_list_stopped(list))
            for (size_t i = 0; i < json_object_array_length(list); i++)
                json_object_array_add(up, json_object_get(json_object_array_get_idx(list, i)));
    }
    json_object_object_foreach(t->acked, aid, alist)
    {
        (void)alist;
        if (!json_object_object_get_ex(cur, aid, NULL))
            json_object_array_add(gone, json_object_new_string(aid));
    }
    json_object *d = json_object_new_object();
    jsonx_add_int(d, "base", t->acked_gen);
    jsonx_add_int(d, "generation", t->sent_gen);
    jsonx_add(d, "upsert", up);
    jsonx_add(d, "gone", gone);
    json_object_object_del(body, "inventory");
    jsonx_add(body, "inventory_delta", d);
}

/* A 200 answer: what the controller now holds. Without an acknowledgement
 * of the generation sent (an older controller, or a resync asked for) the
 * next beat is a full one. */
static void inv_answered(inv_track_t *t, json_object *resp, uint64_t epoch)
{
    int64_t ack = 0;
    bool resync = false;
    jsonx_get_bool(resp, "inventory_resync", &resync);
    if (!t->sent)
        return;
    if (resync || !jsonx_get_int(resp, "inventory_generation", &ack) || ack != t->sent_gen) {
        if (resync)
            log_info(AGENT_COMPONENT, "the controller asked for the whole inventory; sending it with the next beat");
        t->acked_gen = 0;
        return;
    }
    if (t->acked)
        json_object_put(t->acked);
    t->acked = t->sent;
    t->sent = NULL;
    t->acked_gen = ack;
    if (t->sent_full) {
        t->last_full_ms = time_mono_ms();
        t->epoch = epoch;
    }
}

static void inv_track_release(inv_track_t *t)
{
    if (t->acked)
        json_object_put(t->acked);
    if (t->sent)
        json_object_put(t->sent);
}

/* Removes the runtime objects the controller no longer wants (at most
 * AGENT_ORPHANS_PER_BEAT a heartbeat, so beats stay on time), never one an
 * executor is working on. */
/* The running execs a client cancelled, as the heartbeat's answer lists
 * them (all of them each time: the list replaces the last one). */
static void agent_set_cancelled(agent_t *a, json_object *list)
{
    pthread_mutex_lock(&a->mu);
    a->ncancel = 0;
    for (size_t i = 0; list && i < json_object_array_length(list) && a->ncancel < AGENT_CANCEL_MAX; i++) {
        const char *id = json_object_get_string(json_object_array_get_idx(list, i));
        if (id && strlen(id) < SBX_ID_MAX)
            snprintf(a->cancel_ops[a->ncancel++], SBX_ID_MAX, "%s", id);
    }
    pthread_mutex_unlock(&a->mu);
}

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
        char own[80];
        /* Only a container of ours for that sandbox (a gone one: nothing to do). */
        if (agent_check_owner(a, sbx, ref, own, &err) < 0)
            continue;
        if (runtime_remove(a->rt, sbx, own, &err) == 0)
            log_info(AGENT_COMPONENT, "removed orphan %.12s of sandbox %s (the controller no longer wants it)", ref,
                     sbx);
        else
            log_warn(AGENT_COMPONENT, "failed to remove orphan %.12s of sandbox %s: %s", ref, sbx, err.message);
    }
}

void agent_heartbeat_stopping(agent_t *a, bool stopped, json_object *unstarted)
{
    pthread_mutex_lock(&a->mu);
    bool registered = a->registered && !a->need_register;
    pthread_mutex_unlock(&a->mu);
    if (!registered)
        return;
    httpc_t *c = agent_client(a, NULL, "the stopping heartbeat");
    if (!c)
        return;
    char wid[AGENT_WORKER_ID_MAX], path[AGENT_WORKER_ID_MAX + 32];
    agent_worker_id(a, wid, sizeof wid);
    snprintf(path, sizeof path, "/v1/workers/%s/heartbeat", wid);
    /* No inventory: the controller then concludes nothing about sandboxes. */
    json_object *body = json_object_new_object();
    jsonx_add_bool(body, "stopping", true);
    if (stopped)
        jsonx_add_bool(body, "stopped", true);
    if (unstarted && json_object_array_length(unstarted))
        jsonx_add(body, "unstarted", json_object_get(unstarted));
    agent_add_holding(a, body);
    httpc_response_t resp;
    int rc = httpc_request(c, "POST", path, body, NULL, AGENT_STOPPING_BEAT_MS, &resp);
    if (rc == 0 && resp.status == 200 && stopped)
        log_info(AGENT_COMPONENT, "told the controller worker %s stopped: its sandboxes wait for it (restarting)",
                 a->name);
    else if (rc == 0 && resp.status == 200)
        log_info(AGENT_COMPONENT, "told the controller worker %s is stopping: nothing new is placed on it", a->name);
    else if (stopped)
        log_warn(AGENT_COMPONENT, "could not tell the controller worker %s stopped (%s); it is unreachable once its "
                                  "heartbeat is missed", a->name, rc == 0 ? "refused" : "unreachable");
    else
        log_warn(AGENT_COMPONENT, "could not tell the controller worker %s is stopping (%s); it is placed on until "
                                  "its heartbeat is missed", a->name, rc == 0 ? "refused" : "unreachable");
    json_object_put(body);
    httpc_response_release(&resp);
    httpc_free(c);
}

void agent_session_ended(void *ud, const forward_session_t *s)
{
    agent_t *a = ud;
    json_object *o = json_object_new_object(), *argv = json_object_new_array();
    for (size_t i = 0; i < s->argc; i++)
        json_object_array_add(argv, json_object_new_string(s->argv[i]));
    jsonx_add_str(o, "sandbox_id", s->sandbox_id);
    jsonx_add(o, "argv", argv);
    jsonx_add_bool(o, "tty", s->tty);
    jsonx_add_int(o, "exit_code", s->exit_code);
    jsonx_add_int(o, "duration_ms", s->duration_ms < 0 ? 0 : s->duration_ms);
    if (s->caller && *s->caller)
        jsonx_add_str(o, "caller", s->caller);
    pthread_mutex_lock(&a->mu);
    if (!a->sessions)
        a->sessions = json_object_new_array();
    if (json_object_array_length(a->sessions) >= AGENT_SESSIONS_MAX) {
        json_object_array_del_idx(a->sessions, 0, 1);
        a->sessions_dropped++;
        a->sessions_shifted++;
    }
    json_object_array_add(a->sessions, o);
    pthread_mutex_unlock(&a->mu);
}

void agent_report_sessions(agent_t *a, httpc_t *c, const char *wid)
{
    pthread_mutex_lock(&a->mu);
    size_t n = a->sessions ? json_object_array_length(a->sessions) : 0;
    int64_t dropped = a->sessions_dropped;
    uint64_t shifted = a->sessions_shifted;
    a->sessions_dropped = 0;
    json_object *list = NULL;
    if (n > 0) {
        if (n > SBX_WORKER_SESSIONS_MAX)
            n = SBX_WORKER_SESSIONS_MAX;
        list = json_object_new_array();
        for (size_t i = 0; i < n; i++)
            json_object_array_add(list, json_object_get(json_object_array_get_idx(a->sessions, i)));
    }
    pthread_mutex_unlock(&a->mu);
    if (dropped)
        log_warn(AGENT_COMPONENT, "%lld ended E2B processes were not reported (more than %d waited for the "
                 "controller)", (long long)dropped, AGENT_SESSIONS_MAX);
    if (!list)
        return;
    char path[AGENT_WORKER_ID_MAX + 32];
    snprintf(path, sizeof path, "/v1/workers/%s/sessions", wid);
    json_object *body = json_object_new_object();
    jsonx_add(body, "sessions", list);
    httpc_response_t resp;
    int rc = httpc_request(c, "POST", path, body, NULL, 10000, &resp);
    json_object_put(body);
    /* Taken (recorded, or refused as malformed: sending it again would not
     * help): off the queue. The controller out of reach: next time. */
    if (rc == 0 && (resp.status == 200 || resp.status == 400)) {
        if (resp.status == 400)
            log_warn(AGENT_COMPONENT, "the controller refused %zu ended E2B processes: %s", n,
                     jsonx_get_str(jsonx_get_obj(resp.json, "error"), "message"));
        /* What was sent is the front less what overflow dropped meanwhile. */
        pthread_mutex_lock(&a->mu);
        uint64_t gone = a->sessions_shifted - shifted;
        size_t left = gone >= n ? 0 : n - (size_t)gone;
        if (left)
            json_object_array_del_idx(a->sessions, 0, left);
        pthread_mutex_unlock(&a->mu);
    }
    httpc_response_release(&resp);
}

/* The egress filter's records (docs/network.md#the-network-log), after each
 * heartbeat: drained from the runtime, then sent until the controller takes
 * them (a batch it refuses as malformed is dropped, logged). */
static void agent_report_network(agent_t *a, httpc_t *c, const char *wid)
{
    api_error_t err;
    if (!a->netlog) {
        json_object *records = NULL;
        int64_t dropped = 0;
        if (runtime_egress_drain(a->rt, SBX_NETLOG_BATCH_MAX, &records, &dropped, &err) < 0) {
            if (err.code != API_ISOLATION_UNAVAILABLE)
                log_warn(AGENT_COMPONENT, "cannot read the egress filter's records: %s", err.message);
            return;
        }
        if (dropped > 0)
            log_warn(AGENT_COMPONENT, "the egress filter let %lld records go before they were read",
                     (long long)dropped);
        if (json_object_array_length(records) == 0 && dropped == 0) {
            json_object_put(records);
            return;
        }
        a->netlog = records;
        a->netlog_dropped = dropped;
    }
    char path[AGENT_WORKER_ID_MAX + 32];
    snprintf(path, sizeof path, "/v1/workers/%s/network-log", wid);
    json_object *body = json_object_new_object();
    jsonx_add(body, "records", json_object_get(a->netlog));
    jsonx_add_int(body, "dropped", a->netlog_dropped);
    httpc_response_t resp;
    int rc = httpc_request(c, "POST", path, body, NULL, 10000, &resp);
    json_object_put(body);
    if (rc == 0 && (resp.status == 200 || resp.status == 400)) {
        if (resp.status == 400)
            log_warn(AGENT_COMPONENT, "the controller refused %zu network records: %s",
                     json_object_array_length(a->netlog),
                     jsonx_get_str(jsonx_get_obj(resp.json, "error"), "message"));
        json_object_put(a->netlog);
        a->netlog = NULL;
        a->netlog_dropped = 0;
    }
    httpc_response_release(&resp);
}

/* ---- the runtime's state, read beside the beats --------------------------
 * Reading the runtime (images, inventory, snapshots, volumes: calls to a
 * Docker daemon) takes seconds on a busy host, and a worker whose beats wait
 * for it is called unreachable though it is alive. So a thread of its own
 * reads it, one read at a time, on request; a beat carries the newest read
 * once it is done (as soon as it is done), and while a read is under way,
 * the beats say only that the worker lives (what it holds, whether it
 * stops): the controller keeps what it knew of the rest. */
typedef struct hb_reader {
    agent_t *a;
    pthread_t th;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;       /* CLOCK_MONOTONIC */
    bool want, busy, stop;
    json_object *body;       /* a finished read, not yet sent */
    int last_inv_kind, last_img_kind;
} hb_reader_t;

static void *hb_reader_main(void *arg)
{
    hb_reader_t *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!r->want && !r->stop)
            pthread_cond_wait(&r->cv, &r->mu);
        if (r->stop)
            break;
        r->want = false;
        r->busy = true;
        pthread_mutex_unlock(&r->mu);
        json_object *body = agent_heartbeat_body(r->a, &r->last_inv_kind, &r->last_img_kind);
        pthread_mutex_lock(&r->mu);
        json_object_put(r->body);
        r->body = body;
        r->busy = false;
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

static bool hb_reader_start(hb_reader_t *r, agent_t *a)
{
    memset(r, 0, sizeof *r);
    r->a = a;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    bool ok = pthread_cond_init(&r->cv, &ca) == 0;
    pthread_condattr_destroy(&ca);
    if (!ok || pthread_mutex_init(&r->mu, NULL) != 0) {
        log_error(AGENT_COMPONENT, "cannot start the runtime reader of the heartbeat");
        return false;
    }
    r->started = pthread_create(&r->th, NULL, hb_reader_main, r) == 0;
    if (!r->started) {
        log_error(AGENT_COMPONENT, "cannot start the runtime reader of the heartbeat");
        pthread_cond_destroy(&r->cv);
        pthread_mutex_destroy(&r->mu);
    }
    return r->started;
}

static void hb_reader_stop(hb_reader_t *r)
{
    if (!r->started)
        return;
    pthread_mutex_lock(&r->mu);
    r->stop = true;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->th, NULL);
    json_object_put(r->body);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
}

/* The body of the beat due by deadline_ms (monotonic): the read asked for
 * (a new one asked when none is under way), when it is done by then; else
 * a beat that says only that the worker lives. */
static json_object *hb_reader_body(hb_reader_t *r, agent_t *a, int64_t deadline_ms)
{
    pthread_mutex_lock(&r->mu);
    if (!r->body && !r->busy && !r->want) {
        r->want = true;
        pthread_cond_broadcast(&r->cv);
    }
    /* in slices, so that a stop (told on the agent's condition, not this
     * one) is seen within 100 ms */
    int left;
    while (!r->body && !agent_flag(&a->stop_hb) && (left = time_left_ms(deadline_ms)) > 0) {
        struct timespec ts = time_mono_timespec_after(left < 100 ? left : 100);
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
    }
    json_object *body = r->body;
    r->body = NULL;
    pthread_mutex_unlock(&r->mu);
    if (!body)
        body = json_object_new_object();
    /* what it holds and whether it stops as they are now, not as at the
     * read: a lease is renewed only for what a beat says it holds */
    if (atomic_load(&a->stopping))
        jsonx_add_bool(body, "stopping", true);
    agent_add_holding(a, body);
    return body;
}

/* Beats that took more than three periods, told at most once a minute: a
 * worker whose beats come late is called unreachable by a controller with a
 * short worker timeout, and this says where the time went. */
typedef struct slow_beat {
    int64_t told_ms;
    int count;
    int64_t worst_body_ms, worst_sent_ms, worst_total_ms;
} slow_beat_t;

static void slow_beat_note(slow_beat_t *s, int64_t t0, int64_t t_body, int64_t t_sent, int64_t period_ms)
{
    int64_t now = time_mono_ms(), total = now - t0;
    if (total <= 3 * period_ms)
        return;
    s->count++;
    if (total > s->worst_total_ms) {
        s->worst_total_ms = total;
        s->worst_body_ms = t_body - t0;
        s->worst_sent_ms = t_sent - t_body;
    }
    if (s->told_ms && now - s->told_ms < 60000)
        return;
    log_warn(AGENT_COMPONENT, "%d heartbeats took over %lld ms since the last word of it; the slowest %lld ms: %lld "
             "waiting for the runtime's state, %lld for the controller, the rest acting on its answer", s->count,
             (long long)(3 * period_ms), (long long)s->worst_total_ms, (long long)s->worst_body_ms,
             (long long)s->worst_sent_ms);
    s->told_ms = now;
    s->count = 0;
    s->worst_total_ms = 0;
}

void *agent_heartbeat_main(void *arg)
{
    agent_t *a = arg;
    httpc_t *c = NULL;
    int last_kind = 0;
    inv_track_t track = { 0 };
    slow_beat_t slow = { 0 };
    hb_reader_t reader;
    if (!hb_reader_start(&reader, a))
        return NULL;
    if (!(c = agent_client(a, &a->stop_hb, "the heartbeat"))) {
        hb_reader_stop(&reader);
        return NULL;
    }
    while (!agent_flag(&a->stop_hb)) {
        pthread_mutex_lock(&a->mu);
        while (!a->registered && !agent_flag(&a->stop_hb))
            pthread_cond_wait(&a->cond, &a->mu);
        int64_t period_ms = a->heartbeat_seconds * 1000;
        bool skip = a->need_register;
        uint64_t epoch = a->register_epoch;
        pthread_mutex_unlock(&a->mu);
        if (agent_flag(&a->stop_hb))
            break;
        int64_t t0 = time_mono_ms();
        if (!skip) {
            char wid[AGENT_WORKER_ID_MAX], path[AGENT_WORKER_ID_MAX + 32];
            agent_worker_id(a, wid, sizeof wid);
            snprintf(path, sizeof path, "/v1/workers/%s/heartbeat", wid);
            json_object *body = hb_reader_body(&reader, a, t0 + period_ms);
            inv_prepare(&track, body, epoch);
            httpc_response_t resp;
            long timeout = period_ms > 10000 ? period_ms : 10000;
            int64_t t_body = time_mono_ms();
            int rc = httpc_request(c, "POST", path, body, NULL, timeout, &resp);
            int64_t t_sent = time_mono_ms();
            json_object_put(body);
            bool beat_ok = rc == 0 && resp.status == 200;
            if (!agent_flag(&a->stop_hb))
                metrics_add(agent_m_heartbeats, beat_ok ? "result=\"ok\"" : "result=\"error\"", 1);
            if (beat_ok) {
                last_kind = 0;
                agent_contact(a);
                inv_answered(&track, resp.json, epoch);
                agent_remove_orphans(a, jsonx_get_arr(resp.json, "remove"));
                agent_remove_snapshots(a, jsonx_get_arr(resp.json, "remove_snapshots"));
                agent_remove_volumes(a, jsonx_get_arr(resp.json, "remove_volumes"));
                agent_set_cancelled(a, jsonx_get_arr(resp.json, "cancel"));
                agent_report_sessions(a, c, wid);
                agent_report_network(a, c, wid);
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
            slow_beat_note(&slow, t0, t_body, t_sent, period_ms);
        }
        int left = time_left_ms(t0 + period_ms);
        if (left > 0)
            agent_sleep_ms(a, left, &a->stop_hb);
    }
    hb_reader_stop(&reader);
    inv_track_release(&track);
    httpc_free(c);
    return NULL;
}

