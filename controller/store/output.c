/* The store's room for live exec output: chunks a worker sends while an
 * exec runs (fenced by its lease), bounded per operation and per tenant,
 * and the reads of GET /v1/operations/{id}/output from a byte offset; and
 * the cancel of an exec (POST /v1/operations/{id}/cancel). */
#include "store_int.h"

#include "b64.h"
#include "ids.h"
#include "jsonx.h"
#include "limits.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OUTPUT_STR_(x) #x
#define OUTPUT_STR(x)  OUTPUT_STR_(x)

/* One chunk of a worker's output body, checked. Borrowed from the body. */
typedef struct out_chunk {
    const char *stream;
    int64_t offset;
    const char *b64;
} out_chunk_t;

static int output_parse(json_object *body, const char **ret_op, int64_t *ret_attempt, out_chunk_t *chunks,
                        size_t *ret_n, api_error_t *err)
{
    *ret_op = jsonx_get_str(body, "operation_id");
    if (!*ret_op || !ids_valid("op", *ret_op))
        return api_error_set(err, API_INVALID_ARGUMENT, "operation_id is required");
    if (!jsonx_get_int(body, "attempt", ret_attempt))
        return api_error_set(err, API_INVALID_ARGUMENT, "attempt (the fencing token) is required");
    json_object *arr = NULL;
    if (!json_object_object_get_ex(body, "chunks", &arr) || !json_object_is_type(arr, json_type_array))
        return api_error_set(err, API_INVALID_ARGUMENT, "chunks must be an array");
    size_t n = json_object_array_length(arr);
    if (n > SBX_OUTPUT_CHUNKS_MAX)
        return api_error_set(err, API_INVALID_ARGUMENT, "at most %d chunks per request", SBX_OUTPUT_CHUNKS_MAX);
    for (size_t i = 0; i < n; i++) {
        json_object *ch = json_object_array_get_idx(arr, i);
        out_chunk_t *o = &chunks[i];
        o->stream = jsonx_get_str(ch, "stream");
        o->b64 = jsonx_get_str(ch, "data_b64");
        if (!o->stream || (strcmp(o->stream, "stdout") != 0 && strcmp(o->stream, "stderr") != 0))
            return api_error_set(err, API_INVALID_ARGUMENT, "chunks[%zu].stream must be stdout or stderr", i);
        if (!jsonx_get_int(ch, "offset", &o->offset) || o->offset < 0 || o->offset > SBX_OUTPUT_OFFSET_MAX)
            return api_error_set(err, API_INVALID_ARGUMENT, "chunks[%zu].offset must be a byte offset", i);
        char *raw = NULL;
        size_t len = 0;
        if (!o->b64 || b64_decode(o->b64, strlen(o->b64), SBX_MAX_BODY_BYTES, &raw, &len) < 0 || len == 0) {
            free(raw);
            return api_error_set(err, API_INVALID_ARGUMENT, "chunks[%zu].data_b64 must be non-empty base64", i);
        }
        free(raw);
    }
    *ret_n = n;
    return 0;
}

static metric_family_t *m_tenant_dropped;
static pthread_once_t output_metrics_once = PTHREAD_ONCE_INIT;

static void output_metrics_init(void)
{
    m_tenant_dropped = metrics_family("sandbox_exec_output_tenant_dropped_bytes_total", METRIC_COUNTER,
                                      "Live exec output deleted to keep a tenant within its "
                                      "exec_output_tenant_keep_bytes, by the state of the operation it was of "
                                      "(finished: kept for later reads; running: followers skip it).",
                                      NULL, 0);
}

/* One batch of the tenant's oldest chunks, of finished or of running
 * operations, deleted until excess bytes went (the last one may take it
 * past), skipping rows another transaction holds (retention deleting them
 * already). *ret_n chunks and *ret_bytes deleted; 0 or SBX_EDB. */
static int output_trim_batch(PGconn *c, const char *tenant_id, bool finished, int64_t excess, int *ret_n,
                             int64_t *ret_bytes)
{
    char ex[24];
    snprintf(ex, sizeof ex, "%lld", (long long)excess);
    const char *p[] = { tenant_id, finished ? "true" : "false", ex };
    PGresult *r = db_exec(c,
                          "WITH c AS (SELECT e.operation_id, e.byte_offset, e.created_at, length(e.data) AS n "
                          "  FROM exec_output e JOIN operations o ON o.id = e.operation_id "
                          "  WHERE e.tenant_id = $1 AND (o.state IN ('succeeded', 'failed', 'cancelled')) = $2::boolean "
                          "  ORDER BY e.created_at, e.operation_id, e.byte_offset "
                          "  LIMIT " OUTPUT_STR(SBX_OUTPUT_TRIM_BATCH) " FOR UPDATE OF e SKIP LOCKED), "
                          "k AS (SELECT operation_id, byte_offset FROM (SELECT operation_id, byte_offset, "
                          "  sum(n) OVER (ORDER BY created_at, operation_id, byte_offset) - n AS before FROM c) x "
                          "  WHERE before < $3::bigint), "
                          "d AS (DELETE FROM exec_output e USING k WHERE e.operation_id = k.operation_id "
                          "  AND e.byte_offset = k.byte_offset RETURNING length(e.data) AS n) "
                          "SELECT count(*), coalesce(sum(n), 0)::bigint FROM d",
                          3, p);
    if (!r)
        return SBX_EDB;
    *ret_n = (int)db_get_ll(r, 0, 0);
    *ret_bytes = db_get_ll(r, 0, 1);
    PQclear(r);
    return 0;
}

/* Takes the tenant back within its bound: excess bytes of its oldest
 * chunks go, those of finished operations first (kept only for later
 * reads), then those of running ones, oldest first (what their followers
 * have not read yet: they are told the skip), so the newest output, this
 * append's, is the last to go and the append itself is never refused. At
 * most SBX_OUTPUT_TRIM_ROUNDS batches: what is left goes at the next
 * append. 0 or SBX_EDB. */
static int output_tenant_trim(PGconn *c, const char *tenant_id, int64_t excess)
{
    pthread_once(&output_metrics_once, output_metrics_init);
    bool finished = true;
    for (int round = 0; round < SBX_OUTPUT_TRIM_ROUNDS && excess > 0; round++) {
        int n = 0;
        int64_t bytes = 0;
        if (output_trim_batch(c, tenant_id, finished, excess, &n, &bytes) < 0)
            return SBX_EDB;
        excess -= bytes;
        if (bytes > 0)
            metrics_add(m_tenant_dropped, finished ? "from=\"finished\"" : "from=\"running\"", (double)bytes);
        if (n < SBX_OUTPUT_TRIM_BATCH) {
            if (!finished)
                break; /* nothing more it may take */
            finished = false;
        }
    }
    return 0;
}

int store_output_append(PGconn *c, const store_limits_t *lim, const char *worker_id, json_object *body,
                        api_error_t *err)
{
    const char *op_id = NULL;
    int64_t attempt = -1;
    size_t n = 0;
    out_chunk_t *chunks = calloc(SBX_OUTPUT_CHUNKS_MAX, sizeof *chunks);
    if (!chunks)
        return api_error_set(err, API_INTERNAL, "out of memory");
    int rc = output_parse(body, &op_id, &attempt, chunks, &n, err);
    if (rc < 0)
        goto done;
    if (db_begin(c) < 0) {
        rc = store__db_error(err);
        goto done;
    }
    /* Fenced as a report is: only the holder of the running lease writes. */
    char kind[16], sbx[SBX_ID_MAX];
    rc = store__lease_lock(c, worker_id, op_id, attempt, "output", kind, sbx, err);
    if (rc == 0 && strcmp(kind, "exec") != 0)
        rc = api_error_set(err, API_STALE_LEASE, "output refused: operation %s is a %s, not an exec", op_id, kind);
    if (rc == SBX_EINVAL) {
        db_rollback(c);
        goto done;
    }
    if (rc < 0)
        goto db_fail;
    for (size_t i = 0; i < n; i++) {
        char off[24];
        snprintf(off, sizeof off, "%lld", (long long)chunks[i].offset);
        const char *q[] = { op_id, off, chunks[i].stream, chunks[i].b64 };
        /* A chunk sent again (the worker retried after a lost answer) holds
         * the same bytes, and maybe more written since: keep the longer.
         * The tenant's counter (exec_output_usage, migration 0019) follows
         * by trigger, its row locked until the commit: the tenant's appends
         * take turns from here. */
        if (db_run(c, "INSERT INTO exec_output AS e (operation_id, tenant_id, byte_offset, stream, data) "
                      "VALUES ($1, (SELECT tenant_id FROM operations WHERE id = $1), $2::bigint, $3, "
                      "decode($4, 'base64')) ON CONFLICT (operation_id, byte_offset) "
                      "DO UPDATE SET data = EXCLUDED.data WHERE length(EXCLUDED.data) > length(e.data)", 4, q) < 0)
            goto db_fail;
    }
    char keep[24], tkeep[24];
    snprintf(keep, sizeof keep, "%lld", (long long)lim->exec_output_keep);
    snprintf(tkeep, sizeof tkeep, "%lld", (long long)lim->exec_output_tenant_keep);
    const char *k[] = { op_id, keep, tkeep };
    /* Past the operation's bound its oldest chunks go, whole: at most keep
     * bytes stay. The same statement reads what the tenant is over its own
     * bound by (its counter after this append's chunks, less what this
     * deletes: the counter follows when the statement ends). */
    PGresult *r = db_exec(c, "WITH d AS (DELETE FROM exec_output WHERE operation_id = $1 AND byte_offset < "
                             "  (SELECT max(byte_offset + length(data)) - $2::bigint FROM exec_output "
                             "   WHERE operation_id = $1) RETURNING length(data) AS n) "
                             "SELECT o.tenant_id, coalesce(u.bytes, 0) - (SELECT coalesce(sum(n), 0) FROM d) - "
                             "  least($3::bigint, (tn.policy->>'exec_output_tenant_keep_bytes')::bigint) "
                             "FROM operations o JOIN tenants tn ON tn.id = o.tenant_id "
                             "LEFT JOIN exec_output_usage u ON u.tenant_id = o.tenant_id WHERE o.id = $1",
                          3, k);
    if (!r || PQntuples(r) != 1) {
        PQclear(r);
        goto db_fail;
    }
    char tenant_id[SBX_ID_MAX];
    snprintf(tenant_id, sizeof tenant_id, "%s", db_get(r, 0, 0));
    int64_t excess = db_get_ll(r, 0, 1);
    PQclear(r);
    if ((excess > 0 && output_tenant_trim(c, tenant_id, excess) < 0) ||
        db_run(c, "SELECT pg_notify('sandbox_wake', 'output')", 0, NULL) < 0 || db_commit(c) < 0)
        goto db_fail;
    rc = 0;
    goto done;
db_fail:
    rc = store__db_error(err);
    db_rollback(c);
done:
    free(chunks);
    return rc;
}

/* The n bytes written as hex digits at hex, into out (n bytes). */
static void output_unhex(const char *hex, char *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned v = 0;
        for (int j = 0; j < 2; j++) {
            char h = hex[2 * i + (size_t)j];
            v = v * 16 + (unsigned)(h >= 'a' ? h - 'a' + 10 : h >= 'A' ? h - 'A' + 10 : h - '0');
        }
        out[i] = (char)v;
    }
}

/* A chunk of the answer: its text form and, when that is not exact, base64. */
static json_object *output_chunk_json(const char *stream, int64_t offset, const char *p, size_t n)
{
    json_object *o = json_object_new_object();
    jsonx_add_str(o, "stream", stream);
    jsonx_add_int(o, "offset", offset);
    b64_json_add_bytes(o, "data", p, n);
    return o;
}

int store_output_read(PGconn *c, const char *scope, const char *op_id, int64_t offset, size_t max_bytes,
                      json_object **ret, bool *ret_ready, api_error_t *err)
{
    char off[24];
    snprintf(off, sizeof off, "%lld", (long long)offset);
    const char *p[] = { op_id, scope, off };
    PGresult *r = db_exec(c, "SELECT o.state, "
                             "(SELECT max(byte_offset + length(data)) FROM exec_output WHERE operation_id = o.id), "
                             "(SELECT min(byte_offset) FROM exec_output WHERE operation_id = o.id "
                             "  AND byte_offset + length(data) > $3::bigint) "
                             "FROM operations o WHERE o.id = $1 AND ($2::text IS NULL OR o.tenant_id = $2)",
                          3, p);
    if (!r)
        return store__db_error(err);
    if (PQntuples(r) != 1) {
        PQclear(r);
        return api_error_set(err, API_NOT_FOUND, "no operation %.64s", op_id);
    }
    op_state_t st = OP_PENDING;
    op_state_parse(db_get(r, 0, 0), &st);
    bool terminal = op_state_terminal(st);
    int64_t end = db_get(r, 0, 1) ? db_get_ll(r, 0, 1) : 0, from = db_get(r, 0, 2) ? db_get_ll(r, 0, 2) : -1;
    PQclear(r);
    /* Bytes before the first kept chunk past offset are gone (dropped past
     * exec_output_keep_bytes, or never sent by the worker): resume there. */
    int64_t skipped = 0;
    if (from > offset) {
        skipped = from - offset;
        offset = from;
        snprintf(off, sizeof off, "%lld", (long long)offset);
    }
    char maxs[24];
    snprintf(maxs, sizeof maxs, "%zu", max_bytes);
    const char *q[] = { op_id, off, maxs };
    /* Only the bytes this answer can carry leave the database. */
    r = db_exec(c, "SELECT greatest(byte_offset, $2::bigint), stream, "
                   "encode(substring(data FROM (greatest($2::bigint - byte_offset, 0) + 1)::int FOR $3::int), 'hex') "
                   "FROM exec_output WHERE operation_id = $1 AND byte_offset + length(data) > $2::bigint "
                   "AND byte_offset < $2::bigint + $3::bigint "
                   "ORDER BY byte_offset LIMIT " OUTPUT_STR(SBX_OUTPUT_READ_CHUNKS),
                3, q);
    if (!r)
        return store__db_error(err);
    json_object *arr = json_object_new_array();
    int64_t next = offset;
    size_t sent = 0;
    char *buf = NULL;
    for (int i = 0; i < PQntuples(r) && sent < max_bytes; i++) {
        int64_t at = db_get_ll(r, i, 0);
        const char *hex = db_get(r, i, 2);
        size_t take = strlen(hex) / 2;
        if (at != next)
            break; /* a gap after what was read: the next read skips it */
        if (take > max_bytes - sent)
            take = max_bytes - sent;
        char *nb = realloc(buf, take + 1);
        if (!nb)
            break;
        buf = nb;
        output_unhex(hex, buf, take);
        json_object_array_add(arr, output_chunk_json(db_get(r, i, 1), next, buf, take));
        next += (int64_t)take;
        sent += take;
    }
    free(buf);
    PQclear(r);
    bool done = terminal && next >= end;
    json_object *o = json_object_new_object();
    jsonx_add(o, "chunks", arr);
    jsonx_add_int(o, "next_offset", next);
    jsonx_add_int(o, "end_offset", end);
    jsonx_add_int(o, "skipped_bytes", skipped);
    jsonx_add_bool(o, "done", done);
    jsonx_add_str(o, "state", op_state_name(st));
    *ret = o;
    *ret_ready = done || sent > 0 || skipped > 0;
    return 0;
}

int store_outputs_ready(PGconn *c, const char *const *ids, const int64_t *offsets, int n, bool *ret_flags)
{
    for (int i = 0; i < n; i++) {
        char off[24];
        snprintf(off, sizeof off, "%lld", (long long)offsets[i]);
        const char *p[] = { ids[i], off };
        bool hit = false;
        if (store__one_row(c, "SELECT 1 FROM operations o WHERE o.id = $1 AND (o.state IN ('succeeded', 'failed', "
                              "'cancelled') OR EXISTS (SELECT 1 FROM exec_output e WHERE e.operation_id = $1 AND "
                              "e.byte_offset + length(e.data) > $2::bigint))",
                           2, p, &hit) < 0)
            return SBX_EDB;
        ret_flags[i] = hit;
    }
    return 0;
}

int store_operation_cancel(PGconn *c, const char *scope, const char *op_id, json_object **ret, api_error_t *err)
{
    if (db_begin(c) < 0)
        return store__db_error(err);
    const char *p[] = { op_id, scope };
    PGresult *r = db_exec(c, "SELECT kind, state, tenant_id, sandbox_id FROM operations "
                             "WHERE id = $1 AND ($2::text IS NULL OR tenant_id = $2) FOR UPDATE", 2, p);
    if (!r)
        goto db_fail;
    if (PQntuples(r) != 1) {
        PQclear(r);
        db_rollback(c);
        return api_error_set(err, API_NOT_FOUND, "no operation %.64s", op_id);
    }
    char kind[16], tenant[SBX_ID_MAX], sbx[SBX_ID_MAX];
    snprintf(kind, sizeof kind, "%s", db_get(r, 0, 0));
    snprintf(tenant, sizeof tenant, "%s", db_get(r, 0, 2));
    snprintf(sbx, sizeof sbx, "%s", db_get(r, 0, 3) ? db_get(r, 0, 3) : "");
    op_state_t st = OP_PENDING;
    op_state_parse(db_get(r, 0, 1), &st);
    PQclear(r);
    if (strcmp(kind, "exec") != 0) {
        db_rollback(c);
        return api_error_set(err, API_CONFLICT, "operation %s is a %s: only exec operations can be cancelled", op_id,
                             kind);
    }
    if (op_state_terminal(st)) {
        db_rollback(c);
        return api_error_set(err, API_CONFLICT, "operation %s is already %s", op_id, op_state_name(st));
    }
    int rc;
    if (st == OP_RUNNING) {
        /* The worker kills it once its heartbeat's answer says so. */
        rc = db_run(c, "UPDATE operations SET cancel_requested_at = coalesce(cancel_requested_at, now()), "
                       "updated_at = now() WHERE id = $1", 1, p);
        if (rc == 0)
            rc = store__event_add(c, tenant, "operation.cancel_requested", sbx[0] ? sbx : NULL, op_id, NULL);
    } else {
        const char *x[] = { "cancelled", "cancelled by a client before it ran" };
        rc = store__op_cas(c, op_id, st, OP_CANCELLED, "error_code = $4, error_message = $5", 2, x, NULL);
    }
    if (rc < 0 || db_commit(c) < 0) {
        db_rollback(c);
        if (rc == SBX_ECONFLICT)
            return api_error_set(err, API_CONFLICT, "operation %s changed state meanwhile; try again", op_id);
        return store__db_error(err);
    }
    return store__op_reply(c, NULL, op_id, ret, err);
db_fail:
    store__db_error(err);
    db_rollback(c);
    return SBX_EDB;
}
