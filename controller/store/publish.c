/* The NATS publisher's statements: the leader's advisory lock and cursor
 * (event_publisher), the batch of events after the cursor, and its lag. */
#include "store_int.h"

#define STR_(x) #x
#define STR(x) STR_(x)

int store_publisher_lead(PGconn *c, const char *lock_key, bool *ret_led, int64_t *ret_cursor, bool *ret_first)
{
    *ret_led = false;
    const char *k[] = { lock_key };
    PGresult *r = db_exec(c, "SELECT pg_try_advisory_lock($1::bigint)", 1, k);
    if (!r)
        return SBX_EDB;
    bool got = db_get_bool(r, 0, 0);
    PQclear(r);
    if (!got)
        return 0;
    /* LISTEN first: an event committed from here on wakes us. */
    if (db_run(c, "LISTEN sandbox_wake", 0, NULL) < 0 ||
        db_run(c, "INSERT INTO event_publisher DEFAULT VALUES ON CONFLICT DO NOTHING", 0, NULL) < 0)
        return SBX_EDB;
    /* Never ran: start at the newest event instead of replaying history. */
    r = db_exec(c,
                "UPDATE event_publisher SET last_event_id = (SELECT coalesce(max(id), 0) FROM events), "
                "updated_at = now() WHERE last_event_id IS NULL RETURNING last_event_id",
                0, NULL);
    if (!r)
        return SBX_EDB;
    bool first = PQntuples(r) == 1;
    PQclear(r);
    r = db_exec(c, "SELECT last_event_id FROM event_publisher", 0, NULL);
    if (!r)
        return SBX_EDB;
    if (PQntuples(r) != 1) {
        PQclear(r);
        return SBX_EDB;
    }
    *ret_cursor = db_get_ll(r, 0, 0);
    *ret_first = first;
    *ret_led = true;
    PQclear(r);
    return 0;
}

int store_publisher_lag(PGconn *c, int64_t cursor, int64_t *ret_newest, double *ret_age_seconds)
{
    char cur[24];
    snprintf(cur, sizeof cur, "%lld", (long long)cursor);
    const char *params[] = { cur };
    PGresult *r = db_exec(c,
                          "SELECT coalesce((SELECT max(id) FROM events), 0), "
                          "coalesce((SELECT extract(epoch FROM now() - ts) FROM events WHERE id > $1::bigint "
                          "ORDER BY id LIMIT 1), 0)::float8",
                          1, params);
    if (!r)
        return SBX_EDB;
    const char *age = db_get(r, 0, 1);
    *ret_newest = db_get_ll(r, 0, 0);
    *ret_age_seconds = age ? strtod(age, NULL) : 0;
    PQclear(r);
    return 0;
}

int store_publish_read(PGconn *c, int64_t cursor, int64_t horizon, int64_t keep_seconds, store_pub_batch_t *ret)
{
    memset(ret, 0, sizeof *ret);
    char cur[24], keep[24], hz[24];
    snprintf(cur, sizeof cur, "%lld", (long long)cursor);
    snprintf(keep, sizeof keep, "%lld", (long long)keep_seconds);
    snprintf(hz, sizeof hz, "%lld", (long long)horizon);
    const char *params[] = { cur, keep, hz };
    PGresult *r = db_exec(c,
                          "SELECT e.id, tn.name, e.kind, e.ts < now() - make_interval(secs => $2::bigint), "
                          "json_build_object('id', e.id, "
                          "'ts', to_char(e.ts AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), "
                          "'tenant', tn.name, 'kind', e.kind, 'sandbox_id', e.sandbox_id, "
                          "'operation_id', e.operation_id, 'data', e.data)::text "
                          "FROM events e LEFT JOIN tenants tn ON tn.id = e.tenant_id "
                          "WHERE e.id > $1::bigint AND e.id <= $3::bigint ORDER BY e.id "
                          "LIMIT " STR(SBX_PUBLISH_BATCH),
                          3, params);
    if (!r)
        return SBX_EDB;
    int n = PQntuples(r);
    if (n > SBX_PUBLISH_BATCH)
        n = SBX_PUBLISH_BATCH;
    for (int i = 0; i < n; i++) {
        store_pub_event_t *e = &ret->ev[i];
        e->id = db_get_ll(r, i, 0);
        e->tenant = db_get(r, i, 1);
        e->kind = db_get(r, i, 2);
        e->expired = db_get_bool(r, i, 3);
        e->payload = db_get(r, i, 4);
    }
    ret->n = n;
    ret->res = r;
    return 0;
}

void store_pub_batch_release(store_pub_batch_t *b)
{
    if (!b)
        return;
    PQclear(b->res);
    b->res = NULL;
    b->n = 0;
}

int store_publisher_advance(PGconn *c, int64_t cursor, int64_t skipped)
{
    char to[24], sk[24];
    snprintf(to, sizeof to, "%lld", (long long)cursor);
    snprintf(sk, sizeof sk, "%lld", (long long)skipped);
    const char *up[] = { to, sk };
    return db_run(c,
                  "UPDATE event_publisher SET last_event_id = $1::bigint, skipped = skipped + $2::bigint, "
                  "updated_at = now()",
                  2, up) < 0 ? SBX_EDB : 0;
}
