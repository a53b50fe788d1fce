/* GET /v1/events: the events after a cursor (or the newest few), filtered,
 * tenant-scoped, long-polled; docs/events.md is the contract. */
#include "api.h"
#include "db.h"
#include "ids.h"
#include "jsonx.h"
#include "limits.h"

#include <errno.h>
#include <event2/keyvalq_struct.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

/* A whole number 0..max written as plain decimal digits. */
static bool parse_count(const char *s, long long max, long long *ret)
{
    if (!s || !*s || strlen(s) > 19)
        return false;
    for (const char *p = s; *p; p++)
        if (*p < '0' || *p > '9')
            return false;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v > max)
        return false;
    *ret = v;
    return true;
}

/* kind: an exact kind ("sandbox.running"), or a prefix written "sandbox."
 * or "sandbox.*". Letters, digits, '_', '-' and '.'. */
static int parse_kind(const char *s, events_query_t *q, api_error_t *err)
{
    size_t n = strlen(s);
    bool star = n >= 2 && s[n - 2] == '.' && s[n - 1] == '*';
    if (star)
        n--;
    bool ok = n > 0 && n < sizeof q->kind && s[0] != '.';
    for (size_t i = 0; ok && i < n; i++) {
        char ch = s[i];
        ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
             ch == '-' || ch == '.';
    }
    if (!ok)
        return api_error_set(err, API_INVALID_ARGUMENT,
                             "kind must be an event kind such as sandbox.running, or a prefix such as operation.* "
                             "(at most %d letters, digits, _ - .)",
                             (int)sizeof q->kind - 1);
    memcpy(q->kind, s, n);
    q->kind[n] = '\0';
    q->kind_prefix = q->kind[n - 1] == '.';
    return 0;
}

static int parse_id(const char *s, const char *prefix, const char *what, char out[SBX_ID_MAX], api_error_t *err)
{
    if (strlen(s) >= SBX_ID_MAX || !ids_valid(prefix, s))
        return api_error_set(err, API_INVALID_ARGUMENT, "%s must be a %s id (%s_…)", what, what, prefix);
    snprintf(out, SBX_ID_MAX, "%s", s);
    return 0;
}

int api_events_parse(const struct evkeyvalq *query, events_query_t *ret, api_error_t *err)
{
    static const char *const known[] = { "after", "tail", "limit", "wait", "sandbox", "operation", "kind", NULL };
    memset(ret, 0, sizeof *ret);
    ret->limit = SBX_LIST_DEFAULT;
    bool seen[7] = { false };
    bool have_after = false, have_limit = false;
    const struct evkeyval *kv;
    TAILQ_FOREACH(kv, query, next) {
        int k = 0;
        while (known[k] && strcmp(known[k], kv->key) != 0)
            k++;
        if (!known[k])
            return api_error_set(err, API_INVALID_ARGUMENT,
                                 "unknown parameter \"%.64s\" (after, tail, limit, wait, sandbox, operation, kind)",
                                 kv->key);
        if (seen[k])
            return api_error_set(err, API_INVALID_ARGUMENT, "parameter %s given more than once", known[k]);
        seen[k] = true;
        const char *v = kv->value;
        long long n = 0;
        int rc = 0;
        switch (k) {
        case 0:
            if (!parse_count(v, INT64_MAX, &n))
                return api_error_set(err, API_INVALID_ARGUMENT,
                                     "after must be an event id: a whole number, 0 or more (0: from the oldest)");
            ret->after = n;
            have_after = true;
            break;
        case 1:
            if (!parse_count(v, SBX_LIST_MAX, &n) || n < 1)
                return api_error_set(err, API_INVALID_ARGUMENT, "tail must be a whole number from 1 to %d",
                                     SBX_LIST_MAX);
            ret->tail = (int)n;
            break;
        case 2:
            if (!parse_count(v, SBX_LIST_MAX, &n) || n < 1)
                return api_error_set(err, API_INVALID_ARGUMENT, "limit must be a whole number from 1 to %d",
                                     SBX_LIST_MAX);
            ret->limit = (int)n;
            have_limit = true;
            break;
        case 3:
            break; /* http_wait_param */
        case 4:
            rc = parse_id(v, "sbx", "sandbox", ret->sandbox_id, err);
            break;
        case 5:
            rc = parse_id(v, "op", "operation", ret->operation_id, err);
            break;
        default:
            rc = parse_kind(v, ret, err);
            break;
        }
        if (rc < 0)
            return rc;
    }
    if (ret->tail > 0 && have_after)
        return api_error_set(err, API_INVALID_ARGUMENT,
                             "give either after (events after a cursor) or tail (the newest N), not both");
    if (ret->tail > 0 && have_limit)
        return api_error_set(err, API_INVALID_ARGUMENT, "tail=N already says how many; leave out limit");
    return 0;
}

/* Runs the read. Returns 1 when it replied (events found, final, or an
 * error), 0 when nothing matched and the request may park; then
 * *ret_looked is how far it looked (the cursor to park with). */
static int events_answer(req_t *rq, events_query_t *q, int64_t reply_cursor, bool final, int64_t *ret_looked)
{
    api_error_t err;
    int64_t horizon = rq->wake_horizon, newest = rq->wake_newest, last = 0;
    json_object *events = NULL;
    rq->wake_horizon = rq->wake_newest = 0;
    if (horizon <= 0 && store_events_horizon(rq->db, &horizon, &newest) < 0) {
        http_reply_error(rq, API_UNAVAILABLE, "database unavailable: %s", db_last_error());
        return 1;
    }
    if (store_events_list(rq->db, q, horizon, &events, &last, &err) < 0) {
        http_reply_api_error(rq, &err);
        return 1;
    }
    size_t n = json_object_array_length(events);
    if (n == 0 && !final) {
        json_object_put(events);
        /* Nothing up to the horizon matches: look from there next time. A
         * tail read that found nothing continues as a read after it. */
        *ret_looked = horizon > q->after ? horizon : q->after;
        if (newest > horizon)
            http_recheck_soon(rq);
        return 0;
    }
    json_object *resp = json_object_new_object();
    jsonx_add(resp, "events", events);
    /* Empty: the cursor as given (a tail read: how far it looked, since
     * nothing at or below it matched). */
    int64_t next = n > 0 ? last : reply_cursor;
    if (n == 0 && q->tail > 0)
        next = horizon;
    jsonx_add_int(resp, "next_after", next);
    http_reply_json(rq, 200, resp);
    return 1;
}

void api_events_list(req_t *rq)
{
    events_query_t q;
    api_error_t err;
    int wait = 0;
    /* sandbox=NAME: the id of the caller's sandbox of that name (live
     * ones: a deleted sandbox's events are found by its id) */
    const char *named = http_query(rq, "sandbox"), *id = named;
    if (!api_sandbox_ref(rq, &id))
        return;
    if (id != named) {
        evhttp_remove_header(&rq->query, "sandbox");
        evhttp_add_header(&rq->query, "sandbox", id);
    }
    if (api_events_parse(&rq->query, &q, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    if (http_wait_param(rq, &wait) < 0)
        return;
    q.scope = auth_scope(rq);
    int64_t looked = 0;
    if (events_answer(rq, &q, q.after, wait == 0, &looked) == 0) {
        rq->park_cursor = looked;
        http_park(rq, PARK_EVENTS, "events", wait);
    }
}

void api_events_resume(req_t *rq, bool final)
{
    events_query_t q;
    api_error_t err;
    if (api_events_parse(&rq->query, &q, &err) < 0) { /* it parsed before it parked */
        http_reply_api_error(rq, &err);
        return;
    }
    q.scope = auth_scope(rq);
    int64_t reply_cursor = q.tail > 0 ? rq->park_cursor : q.after;
    /* Only what came after the part already looked through. */
    q.after = rq->park_cursor;
    q.tail = 0;
    int64_t looked = 0;
    if (events_answer(rq, &q, reply_cursor, final, &looked) == 0)
        rq->park_cursor = looked;
}
