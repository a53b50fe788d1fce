/* Worker endpoints: register, heartbeat, long-poll for assignments, report. */
#include "api.h"
#include "db.h"
#include "ids.h"
#include "jsonx.h"
#include "limits.h"
#include "log.h"

#include <string.h>

static bool worker_id_ok(req_t *rq, const char *id)
{
    if (ids_valid("wrk", id))
        return true;
    http_reply_error(rq, API_NOT_FOUND, "no worker %.64s; register again", id);
    return false;
}

void api_worker_register(req_t *rq)
{
    json_object *body = NULL, *w = NULL;
    api_error_t err;
    if (http_read_json(rq, (size_t)rq->ctl->max_body_client, &body) < 0)
        return;
    if (store_worker_register(rq->db, body, rq->auth.token_id, &w, &err) < 0) {
        json_object_put(body);
        http_reply_api_error(rq, &err);
        return;
    }
    json_object_put(body);
    log_info("controller", "worker %s registered (%s)", jsonx_get_str(w, "name"), jsonx_get_str(w, "id"));
    char cluster[64] = "";
    if (store_cluster_id(rq->db, cluster) < 0) {
        json_object_put(w);
        http_reply_error(rq, API_UNAVAILABLE, "database unavailable: %s", db_last_error());
        return;
    }
    json_object *resp = json_object_new_object();
    jsonx_add(resp, "worker", w);
    jsonx_add_str(resp, "cluster_id", cluster);
    jsonx_add_int(resp, "lease_seconds", rq->ctl->lim.lease_seconds);
    jsonx_add_int(resp, "heartbeat_seconds", cfg_int(&rq->ctl->cfg, CFG_HEARTBEAT_SECONDS));
    controller_kick_reconcile(rq->ctl);
    http_reply_json(rq, 200, resp);
}

void api_worker_heartbeat(req_t *rq, const char *id)
{
    if (!worker_id_ok(rq, id))
        return;
    json_object *body = NULL, *resp = NULL;
    api_error_t err;
    if (http_read_json(rq, SBX_MAX_BODY_BYTES, &body) < 0)
        return;
    int rc = store_worker_heartbeat(rq->db, &rq->ctl->lim, id, body, &resp, &err);
    json_object_put(body);
    if (rc < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    http_reply_json(rq, 200, resp);
}

void api_worker_poll(req_t *rq, const char *id)
{
    int wait = 0;
    if (!worker_id_ok(rq, id) || http_wait_param(rq, &wait) < 0)
        return;
    bool exists = false;
    if (store_worker_exists(rq->db, id, &exists) < 0) {
        http_reply_error(rq, API_UNAVAILABLE, "database unavailable: %s", db_last_error());
        return;
    }
    if (!exists) {
        http_reply_error(rq, API_NOT_FOUND, "no worker %s; register again", id);
        return;
    }
    snprintf(rq->park_id, sizeof rq->park_id, "%s", id);
    rq->poll_gen = server_poll_begin(id);
    if (api_poll_resume(rq, wait == 0))
        return;
    http_park(rq, PARK_POLL, id, wait);
}

bool api_poll_resume(req_t *rq, bool final)
{
    json_object *resp = NULL;
    api_error_t err;
    int n = 0;
    if (!server_poll_current(rq->park_id, rq->poll_gen)) {
        /* The worker polls again elsewhere: this one takes nothing. */
        resp = json_object_new_object();
        jsonx_add(resp, "assignments", json_object_new_array());
        http_reply_json(rq, 200, resp);
        return true;
    }
    if (store_worker_claim(rq->db, &rq->ctl->lim, rq->park_id, &resp, &n, &err) < 0) {
        http_reply_api_error(rq, &err);
        return true;
    }
    if (n == 0 && !final) {
        json_object_put(resp);
        return false;
    }
    http_reply_json(rq, 200, resp);
    return true;
}

void api_worker_report(req_t *rq, const char *id)
{
    if (!worker_id_ok(rq, id))
        return;
    json_object *body = NULL, *resp = NULL;
    api_error_t err;
    if (http_read_json(rq, SBX_MAX_BODY_BYTES, &body) < 0)
        return;
    int rc = store_worker_report(rq->db, id, body, &resp, &err);
    json_object_put(body);
    if (rc < 0) {
        if (err.code == API_STALE_LEASE)
            log_warn("controller", "%s", err.message);
        http_reply_api_error(rq, &err);
        return;
    }
    controller_wake_waiters(rq->ctl);
    controller_kick_reconcile(rq->ctl);
    http_reply_json(rq, 200, resp);
}

void api_worker_list(req_t *rq)
{
    json_object *resp = NULL;
    api_error_t err;
    if (store_worker_list(rq->db, &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    http_reply_json(rq, 200, resp);
}

void api_worker_drain(req_t *rq, const char *name, bool drain)
{
    json_object *resp = NULL;
    api_error_t err;
    if (store_worker_set_draining(rq->db, name, drain, &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    log_info("controller", "worker %s %s by %s", name, drain ? "drained" : "resumed", rq->auth.token_id);
    if (!drain)
        controller_kick_reconcile(rq->ctl);
    http_reply_json(rq, 200, resp);
}
