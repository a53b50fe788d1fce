/* The network log (issue 33, docs/network.md#the-network-log): what the
 * workers' egress filters decided for sandboxes with egress rules, reported
 * by the workers and read by clients. */
#include "api.h"
#include "jsonx.h"
#include "limits.h"
#include "log.h"

#include <event2/keyvalq_struct.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

/* The worker's batch, at most this large (1000 records of a few hundred
 * bytes each). */
#define NETLOG_BODY_MAX (2u * 1024u * 1024u)

/* POST /v1/workers/{id}/network-log {"records":[…],"dropped":N}: the
 * records its egress filter drained; "dropped": how many the filter had to
 * let go (its buffer full) since the last report. */
void api_worker_network_log(req_t *rq, const char *id)
{
    if (!api_worker_id_ok(rq, "network-log", id, true))
        return;
    json_object *body = NULL, *records = NULL;
    api_error_t err;
    if (http_read_json(rq, NETLOG_BODY_MAX, &body) < 0)
        return;
    int64_t dropped = 0;
    bool shape = json_object_is_type(body, json_type_object) && json_object_object_get_ex(body, "records", &records);
    if (shape) { /* (the loop reads an object's table: never anything else) */
        json_object_object_foreach(body, k, v) {
            (void)v;
            shape = shape && (strcmp(k, "records") == 0 || strcmp(k, "dropped") == 0);
        }
    }
    if (!shape || (json_object_object_get_ex(body, "dropped", NULL) &&
                   (!jsonx_get_int(body, "dropped", &dropped) || dropped < 0))) {
        json_object_put(body);
        http_reply_error(rq, API_INVALID_ARGUMENT, "the body is {\"records\":[…],\"dropped\":N}");
        return;
    }
    int64_t recorded = 0, skipped = 0;
    int rc = store_network_log_add(rq->db, id, records, &recorded, &skipped, &err);
    json_object_put(body);
    if (rc < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    if (dropped > 0)
        log_warn("controller", "worker %s: its egress filter let %lld network records go before they were reported",
                 id, (long long)dropped);
    json_object *o = json_object_new_object();
    jsonx_add_int(o, "recorded", recorded);
    jsonx_add_int(o, "skipped", skipped);
    http_reply_json(rq, 200, o);
}

/* GET /v1/sandboxes/{id}/network/log[?after=ID&limit=N&verdict=V] */
void api_sandbox_network_log(req_t *rq, const char *id)
{
    static const char *const known[] = { "after", "limit", "verdict", NULL };
    const struct evkeyval *kv;
    TAILQ_FOREACH(kv, &rq->query, next) {
        int k = 0;
        while (known[k] && strcmp(known[k], kv->key) != 0)
            k++;
        if (!known[k]) {
            http_reply_error(rq, API_INVALID_ARGUMENT, "unknown parameter \"%.64s\" (after, limit, verdict)", kv->key);
            return;
        }
    }
    const char *after_s = http_query(rq, "after"), *limit_s = http_query(rq, "limit");
    const char *verdict = http_query(rq, "verdict");
    long long after = 0, limit = SBX_LIST_DEFAULT;
    char *end = NULL;
    if (after_s && (!*after_s || (after = strtoll(after_s, &end, 10)) < 0 || *end)) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "after must be an entry id: a whole number, 0 or more");
        return;
    }
    if (limit_s && (!*limit_s || (limit = strtoll(limit_s, &end, 10)) < 1 || *end || limit > SBX_LIST_MAX)) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "limit must be a whole number from 1 to %d", SBX_LIST_MAX);
        return;
    }
    if (verdict && strcmp(verdict, "allowed") != 0 && strcmp(verdict, "refused") != 0) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "verdict must be allowed or refused");
        return;
    }
    json_object *resp = NULL;
    api_error_t err;
    if (store_network_log_list(rq->db, auth_scope(rq), id, after, limit, verdict, &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    http_reply_json(rq, 200, resp);
}
