/* The store's internal header: what its rooms (the .c files of
 * controller/store/) share and nothing outside the store includes. SQL
 * fragments, the column tables with their list/get skeleton, and the
 * transition helpers; every function here is store__-prefixed (public
 * ones, store_, are in store.h). */
#ifndef SBX_STORE_INT_H
#define SBX_STORE_INT_H

#include "store.h"
#include "aegis.h"
#include "db.h"
#include "ids.h"
#include "jsonx.h"
#include "log.h"
#include "metrics.h"
#include "observed.h"
#include "opstate.h"
#include "quota.h"
#include "token.h"
#include "utf8.h"

#include <sodium.h>

#include <assert.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TS(col) "to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"

#define SANDBOX_FROM \
    " FROM sandboxes s JOIN tenants tn ON tn.id = s.tenant_id LEFT JOIN workers w ON w.id = s.worker_id "

/* ---- column tables (columns.c) ----
 * One table per object the API shows: a row per JSON key with the SQL that
 * reads it. The SELECT list and the row-to-JSON mapping both come from the
 * table, so a new column is one row and shifts nothing else. */
typedef enum {
    COL_TEXT,      /* a string; SQL NULL → null */
    COL_TEXT_OMIT, /* a string; SQL NULL → the key is left out */
    COL_INT,       /* an integer; SQL NULL → 0 */
    COL_BOOL,      /* 't' → true, anything else false */
    COL_JSON,      /* JSON text, parsed; SQL NULL or unreadable → null */
    COL_JSON_OBJ,  /* as COL_JSON, but SQL NULL or unreadable → {} */
    COL_JSON_OMIT, /* as COL_JSON, but SQL NULL → the key is left out */
    COL_HIDDEN,    /* selected for the table's hook or its caller; no key of its own */
    COL_HOOK,      /* no SQL: the table's hook makes the value from the row */
} col_kind_t;

/* A key "parent.member" puts the value into the object "parent", which is
 * made where its first member is. */
typedef struct store_col {
    const char *key;
    const char *sql;  /* NULL for COL_HOOK */
    col_kind_t kind;
} store_col_t;

typedef struct store_table store_table_t;
struct store_table {
    const store_col_t *cols;
    int ncols;
    json_object *(*hook)(const store_table_t *t, const char *key, const PGresult *r, int row);
    const char *list; /* the SELECT list, built once by store__cols */
};

extern store_table_t store__t_sandbox, store__t_op, store__t_worker, store__t_route, store__t_tenant,
    store__t_token, store__t_event, store__t_assignment, store__t_pool, store__t_snapshot, store__t_volume,
    store__t_build;
/* A snapshot's state from its row (sn) and its operation (o): deleted once
 * asked, ready once its worker reported it made, failed when its
 * operation failed (or is gone), else pending. */
#define STORE_SNAPSHOT_STATE                                                                                      \
    "CASE WHEN sn.deleted_at IS NOT NULL THEN 'deleted' WHEN sn.ready_at IS NOT NULL THEN 'ready' "                \
    "WHEN o.state IS NULL OR o.state IN ('failed', 'cancelled', 'succeeded') THEN 'failed' ELSE 'pending' END"
#define SNAPSHOT_FROM                                                                                            \
    " FROM snapshots sn JOIN tenants tn ON tn.id = sn.tenant_id LEFT JOIN workers w ON w.id = sn.worker_id "       \
    "LEFT JOIN operations o ON o.id = sn.operation_id "

/* The table's SELECT list ("s.id, tn.name, …"); NULL only out of memory. */
const char *store__cols(const store_table_t *t);
/* The text of column key in a row selected with t's list (NULL: SQL NULL
 * or no such column). */
const char *store__col_text(const store_table_t *t, const PGresult *r, int row, const char *key);
/* A row selected with t's list → a new JSON object. */
json_object *store__row_json(const store_table_t *t, const PGresult *r, int row);
/* The same JSON as store__row_json, as one object that serializes as its
 * text, written straight from the row (for answers of many rows; its
 * members cannot be read back). */
json_object *store__row_raw(const store_table_t *t, const PGresult *r, int row);
/* Every row → a new JSON array (r is not cleared). */
json_object *store__rows_json(const store_table_t *t, const PGresult *r);
/* Runs head, t's SELECT list, then tail ("SELECT ", " FROM … WHERE …", or
 * "UPDATE … RETURNING ", ""). NULL on a database error. */
PGresult *store__exec_cols(PGconn *c, const store_table_t *t, const char *head, const char *tail, int n,
                           const char *const *p);
/* SELECT <t's list> tail: the one row as *ret; SBX_ENOTFOUND, SBX_EDB. */
int store__fetch_one(PGconn *c, const store_table_t *t, const char *tail, int n, const char *const *p,
                     json_object **ret);
/* SELECT <t's list> tail: every row as a JSON array *ret; 0 or SBX_EDB. */
int store__fetch_all(PGconn *c, const store_table_t *t, const char *tail, int n, const char *const *p,
                     json_object **ret);
/* {key: v} (v taken). */
json_object *store__wrap(const char *key, json_object *v);
/* The API's list and get: {"<key>":[…]}, or {"<key>":{…}} with 404 "no
 * <key> <name>" when no row matches; err set on a database error. */
int store__api_list(PGconn *c, const store_table_t *t, const char *tail, int n, const char *const *p,
                    const char *key, json_object **ret, api_error_t *err);
int store__api_get(PGconn *c, const store_table_t *t, const char *tail, int n, const char *const *p,
                   const char *key, const char *name, json_object **ret, api_error_t *err);

/* Lease expiries by outcome (core.c registers it; reconcile.c counts). */
extern metric_family_t *store__m_lease_expiries, *store__m_placed_now;
extern pthread_once_t store__metrics_once;

/* SQL: the api_tokens row under alias t (a string literal) is alive,
 * neither revoked nor expired. */
#define STORE_TOKEN_LIVE(t) t ".revoked_at IS NULL AND (" t ".expires_at IS NULL OR " t ".expires_at > now())"

/* Who asked for an operation: its Idempotency-Key and request hash (both
 * may be NULL) and the token that made it. */
typedef struct op_origin {
    const char *idempotency_key, *request_hash, *created_by;
} op_origin_t;

/* An operation the controller finishes alone, in the caller's
 * transaction: inserted pending (as every operation starts) with its
 * event, then admitted, then succeeded with result (not taken). 0 or
 * SBX_EDB. */
int store__op_record_done(PGconn *c, const store_limits_t *lim, const char *kind, const char *tenant_id,
                          const char *sandbox_id, const op_origin_t *from, const char *request_text, const char *op_id,
                          json_object *result);

int store__db_error(api_error_t *err);
/* The rows an UPDATE, INSERT or DELETE touched. */
int store__cmd_rows(PGresult *r);
json_object *store__parse_json_text(const char *s);
int store__load_op(PGconn *c, const char *op_id, json_object **ret);
int store__load_sandbox(PGconn *c, const char *sandbox_id, json_object **ret);
int store__one_row(PGconn *c, const char *sql, int n, const char *const *p, bool *ret_hit);
int store__one_text(PGconn *c, const char *sql, int n, const char *const *p, char *ret, size_t len);
int store__begin_returning(PGconn *c, const store_table_t *t, const char *head, int n, const char *const *p,
                           PGresult **ret);
/* SQL: the state of worker w where an exec or a delete decides whether it
 * can go there now: "stopping" for one that began a graceful stop (it
 * takes nothing more, and will be unreachable, restarting, in a moment),
 * else its state ("" when none). */
#define STORE_WORKER_GO_STATE                                                                               \
    "coalesce(CASE WHEN w.stopping_at IS NOT NULL AND w.state IN ('ready', 'draining') THEN 'stopping' " \
    "ELSE w.state END, '')"

/* The worker a locked sandbox is on (all "" when none), as
 * store__sandbox_lock reads it with the row (state: STORE_WORKER_GO_STATE). */
typedef struct sbx_worker {
    char id[SBX_ID_MAX], state[16], name[SBX_MAX_NAME_BYTES + 1];
} sbx_worker_t;
/* Why w (state "unreachable" or "stopping") takes no exec now, for a
 * message ("its worker W is …"): 0, or SBX_EDB. */
int store__worker_away(PGconn *c, const sbx_worker_t *w, char *ret, size_t len);
/* Never queued for a worker that may not return (or is on its way out):
 * when w is unreachable or stopping, rolls back and returns
 * API_UNAVAILABLE ("cannot <what> sandbox ID now: <why>; retry once it is
 * back"; SBX_EDB on a database error); else 0. */
int store__refuse_if_away(PGconn *c, const sbx_worker_t *w, const char *what, const char *sandbox_id,
                          api_error_t *err);
int store__sandbox_begin_locked(PGconn *c, const char *scope, const char *sandbox_id, char ret_tenant[SBX_ID_MAX],
                                char ret_phase[24], char ret_desired[16], sbx_worker_t *ret_worker,
                                policy_t *ret_policy, api_error_t *err);
int store__sandbox_request_begin(PGconn *c, const char *scope, const char *sandbox_id, const char *idem,
                                 const char *kind, const char *hash, json_object **ret, char ret_tenant[SBX_ID_MAX],
                                 char ret_phase[24], char ret_desired[16], sbx_worker_t *ret_worker,
                                 policy_t *ret_policy, api_error_t *err);
int store__op_reply(PGconn *c, const char *sandbox_id, const char *op_id, json_object **ret, api_error_t *err);
/* A conflict for `what` (e.g. "exec") on a sandbox that is not running, in
 * words that name the next step: the create operation to wait for, that it
 * is deleted or being deleted, or why it failed. Reads in c's transaction;
 * returns err's code. */
int store__not_running(PGconn *c, const char *sandbox_id, const char *phase, const char *desired, const char *what,
                       api_error_t *err);
int store__event_add(PGconn *c, const char *tenant_id, const char *kind, const char *sandbox_id, const char *op_id,
                     json_object *data);
void store__metrics_init(void);
json_object *store__event_reason(const char *why);
/* store__op_cas with more: extra_where (may be NULL) is ANDed to the
 * WHERE and may use the extra params too; with ret_op (may be NULL) the
 * changed operation as the API shows it. */
/* Observes the stage a transition to `to` ends (metrics); the since_*
 * are seconds since created_at, leased_at and started_at as text (NULL:
 * unknown). */
void store__op_observe(const char *kind, op_state_t to, const char *since_created, const char *since_leased,
                       const char *since_started);
int store__op_cas_ex(PGconn *c, const char *op_id, op_state_t from, op_state_t to, const char *extra_set,
                     const char *extra_where, int nextra, const char *const *extra, json_object *event_data,
                     json_object **ret_op);
int store__op_cas(PGconn *c, const char *op_id, op_state_t from, op_state_t to, const char *extra_set, int nextra,
                  const char *const *extra, json_object *event_data);
/* A new operation, inserted straight into the state its request's
 * transaction would have moved it to one transition after the other:
 * OP_PENDING (as every operation starts), OP_LEASED (pending → admitted →
 * leased to worker_id, attempt 1) or OP_SUCCEEDED (pending → admitted →
 * succeeded with result). Each step is checked against the transition
 * table and gets the events row store__op_cas would have written, all in
 * one statement: nothing outside the transaction can see the steps
 * between, so the row and its history are the same. */
typedef struct op_insert {
    const char *id, *tenant_id, *sandbox_id, *kind;
    const char *idempotency_key, *request_hash; /* may be NULL */
    const char *request_text;                   /* JSON text; NULL: {} */
    const char *created_by;
    int64_t deadline_seconds;
    op_state_t state;
    json_object *pending_data;                  /* members added to the operation.pending event's data (taken; may be NULL) */
    const char *worker_id, *worker_name;        /* OP_LEASED */
    int64_t lease_seconds;                      /* OP_LEASED */
    json_object *placement;                     /* OP_LEASED: borrowed; may be NULL */
    json_object *result;                        /* OP_SUCCEEDED: borrowed; may be NULL */
} op_insert_t;
/* Appends to arr the events rows of o's path, as store__event_json makes
 * them (o->pending_data taken). 0 or SBX_EINVAL (a state other than the three). */
int store__op_insert_events(const op_insert_t *o, json_object *arr);
/* {"kind","operation_id","data"} (data taken; NULL: {}; op_id may be NULL):
 * one row for STORE_EVENTS_INSERT. */
json_object *store__event_json(const char *kind, const char *op_id, json_object *data);
/* SQL: inserts the events rows of the JSON array param arr (text, e.g.
 * "$15") of store__event_json objects, in the array's order, for tenant
 * and sandbox (params). */
#define STORE_EVENTS_INSERT(tenant, sandbox, arr)                                                                   \
    "INSERT INTO events (tenant_id, kind, sandbox_id, operation_id, data) SELECT " tenant ", x->>'kind', " sandbox \
    ", x->>'operation_id', x->'data' FROM jsonb_array_elements(" arr "::jsonb) WITH ORDINALITY AS ev(x, n) "      \
    "ORDER BY n"
/* Inserts o (o->pending_data is always taken); *ret_op (ret_op may be
 * NULL) gets the new operation as the API shows it. 0; SBX_EINVAL for a
 * state other than those three; SBX_EDB (db_last_unique_violation() tells
 * an Idempotency-Key taken meanwhile). */
int store__op_insert(PGconn *c, const op_insert_t *o, json_object **ret_op);
/* store__sandbox_set_phase only while the sandbox is in phase from (NULL:
 * any), with event_data (taken; may be NULL) in its event's data: 0, or
 * SBX_ENOTFOUND when it is not (nothing written). */
int store__sandbox_set_phase_if(PGconn *c, const char *sandbox_id, sandbox_phase_t phase, const char *from,
                                const char *extra_set, int nextra, const char *const *extra, json_object *event_data);
/* A pause (resumed false) or resume operation succeeded (its worker's
 * result): the sandbox paused (its TTL clock stopped, the seconds left
 * kept) or running again (its expiry from those seconds), with the event,
 * in the report's transaction. A sandbox no longer in the phase it left
 * is left alone. 0 or SBX_EDB. */
int store__sandbox_paused(PGconn *c, const char *sandbox_id, bool resumed, json_object *result);
/* Inserts a pause (or resume) operation of the sandbox (its row locked by
 * the caller) leased to worker w, with its events (pending_data, taken,
 * added to its operation.pending event), or pending and placed when w has
 * no id; the caller commits. ret_op_id, *ret_leased, *ret_op (the
 * operation). 0; SBX_EDB (a unique violation: the idempotency key raced). */
/* The secrets named in names (a JSON array) of tenant_id, opened: a new
 * array of {"name","header","hosts","value"}; NULL with why when one is
 * gone or does not open. */
json_object *store__secrets_open(PGconn *c, const store_limits_t *lim, const char *tenant_id, json_object *names,
                                 char *why, size_t whylen);
/* A network operation succeeded: its rules into the sandbox's spec, and a
 * sandbox.network event. 0 or SBX_EDB. */
int store__sandbox_network_set(PGconn *c, const char *op_id, const char *sandbox_id);
/* An operation of kind (request_text: its request, NULL: {}) on sandbox_id,
 * leased to the worker w it is on (pending and placed at once when w is
 * none): *ret_leased says which; *ret_op the operation. 0 or a store code. */
int store__worker_op_insert(PGconn *c, const store_limits_t *lim, const char *tenant_id, const char *sandbox_id,
                            const sbx_worker_t *w, const char *kind, const char *request_text,
                            const op_origin_t *from, json_object *pending_data, char ret_op_id[SBX_ID_MAX],
                            bool *ret_leased, json_object **ret_op);
/* The end of a request that inserted a worker operation (rc its insert's
 * result, op its object, taken): rolls back (an Idempotency-Key already
 * used: the operation it made) or commits; *ret {"operation":…}. */
int store__worker_op_end(PGconn *c, int rc, const char *tenant_id, const char *kind, const op_origin_t *from,
                         const char *op_id, bool leased, json_object *op, json_object **ret, api_error_t *err);
int store__pause_op_insert(PGconn *c, const store_limits_t *lim, const char *tenant_id, const char *sandbox_id,
                           const sbx_worker_t *w, bool resume, const char *idempotency_key, const char *request_hash,
                           const char *created_by, json_object *pending_data, char ret_op_id[SBX_ID_MAX],
                           bool *ret_leased, json_object **ret_op);
int store__sandbox_set_phase(PGconn *c, const char *sandbox_id, sandbox_phase_t phase, const char *extra_set,
                             int nextra, const char *const *extra);
int store__sandbox_release_allocation(PGconn *c, const char *sandbox_id);
int store__sandbox_fail_observed(PGconn *c, const char *sandbox_id, json_object *failure, const char *output_tail);
int store__idem_replay(PGconn *c, const char *tenant_id, const char *key, const char *kind, const char *hash,
                       bool with_sandbox, json_object **ret, api_error_t *err);
int store__sandbox_lock(PGconn *c, const char *scope, const char *sandbox_id, char ret_tenant[SBX_ID_MAX],
                        char ret_phase[24], char ret_desired[16], sbx_worker_t *ret_worker, policy_t *ret_policy,
                        api_error_t *err);
/* A tenant's stored policy text (NULL: none) into *ret, initialised here. */
void store__policy_parse(const char *text, policy_t *ret);
int store__sandbox_request_delete(PGconn *c, const store_limits_t *lim, const char *tenant_id, const char *sandbox_id,
                                  const char *idem, const char *hash, const char *created_by, char ret_op[SBX_ID_MAX],
                                  json_object **ret_op_json, bool then_commit);
/* In a transaction: locks the tenant row (serializing its creates and pool
 * declarations, so no race can pass a quota; NO KEY, so foreign-key checks
 * of other transactions, which may hold a worker row a create's placement
 * will lock, never wait for it) and checks pol's quotas against its live
 * sandboxes, what its warm pools hold and asked (quota_check; what as
 * there). 0, SBX_EINVAL with err set (quota_exceeded), SBX_EDB. */
int store__tenant_quota(PGconn *c, const char *tenant_id, const policy_t *pol, const quota_use_t *asked,
                        const char *what, api_error_t *err);
/* Inside a create's transaction (store/pools.c): when req->pool_key
 * matches a pool the caller's tenant may use, takes a ready member (pool
 * row locked, member FOR UPDATE SKIP LOCKED), gives it the claimer's
 * tenant, spec, TTL and created_by and records the create op_id succeeded.
 * 1 with ret_sbx (claimed), 0 (no pool, or none ready: a miss, counted),
 * SBX_EDB (a unique violation when the idempotency key raced). */
int store__pool_claim(PGconn *c, const store_limits_t *lim, const create_req_t *req, const char *spec_text,
                      const char *op_id, char ret_sbx[SBX_ID_MAX]);
int store__flag_ids(PGconn *c, const char *sql, const char *const *ids, int n, bool *ret_flags);
/* In a transaction: locks operation op_id and checks that worker_id holds
 * its running lease at attempt (what: "report", "output", for the
 * message). 0 with its kind and sandbox; SBX_EINVAL with err (not found,
 * API_STALE_LEASE); SBX_EDB. */
int store__lease_lock(PGconn *c, const char *worker_id, const char *op_id, int64_t attempt, const char *what,
                      char ret_kind[16], char ret_sbx[SBX_ID_MAX], api_error_t *err);
int store__op_fail_admitted(PGconn *c, const char *op_id, const char *kind, const char *sbx, const char *code,
                            const char *msg, json_object *placement);
int store__place_one(PGconn *c, const store_limits_t *lim, const char *op_id);
/* In a report's transaction: the snapshot operation op_id succeeded with
 * result ({"size_bytes","image_bytes"}): its row is ready, with its event.
 * 0 or SBX_EDB. */
int store__snapshot_made(PGconn *c, const char *op_id, json_object *result);
/* Of held (a heartbeat's [{"id"}], ids of prefix), those sql ($1 the
 * worker, $2 the ids as a JSON array; one column) says the worker should
 * no longer keep: a new array into *ret. 0 or SBX_EDB. */
int store__held_unwanted(PGconn *c, const char *worker_id, json_object *held, const char *prefix, const char *sql,
                         json_object **ret, api_error_t *err);
/* In a report's transaction: the snapshot_copy operation op_id succeeded:
 * its copy is ready (and its event). 0 or SBX_EDB. */
int store__snapshot_copied(PGconn *c, const char *op_id, json_object *result);
/* In a create's transaction: locks the rows of the spec's volumes (ids,
 * resolved) and checks that no live sandbox of the tenant mounts one in a
 * way this one excludes (read-write: any other; read-only: a writer).
 * 0, SBX_EINVAL with err (404 deleted, 409 mounted), SBX_EDB. */
int store__volumes_claim(PGconn *c, const char *tenant_id, const sandbox_spec_t *spec, api_error_t *err);
/* In a placement's transaction: the volumes of spec_text not yet placed
 * live on worker_id from now on. 1, 0 when one lives on another worker
 * (placed meanwhile), SBX_EDB. */
int store__volumes_pin(PGconn *c, const char *spec_text, const char *worker_id);
/* The sandboxes that mount volume ALIAS.id (live, of its tenant), each with
 * its entry m of their spec's volumes: "sandboxes s, jsonb_array_elements
 * (...) m WHERE ...", for a FROM. */
#define STORE_VOLUME_MOUNTS(alias)                                                                               \
    "sandboxes s, jsonb_array_elements(coalesce(s.spec->'volumes', '[]'::jsonb)) m WHERE s.tenant_id = " alias   \
    ".tenant_id AND s.phase NOT IN ('deleted', 'failed') AND s.spec ? 'volumes' AND m->>'volume' = " alias ".id"
#define VOLUME_FROM                                                                                              \
    " FROM volumes vo JOIN tenants tn ON tn.id = vo.tenant_id LEFT JOIN workers w ON w.id = vo.worker_id "
/* The data of a new sandbox's sandbox.pending event: what it asked for
 * (new). */
json_object *store__sandbox_pending_data(const create_req_t *req);
/* A create placed in its own request's transaction, before anything of
 * it is written (the caller holds the tenant's row): when no other create
 * waits admitted and AEGIS leases it to a worker with room now, takes the
 * room and inserts the sandbox (scheduled there), its create (op_id,
 * leased) and their events in one statement that also commits (the
 * caller's db_commit only says how it went): 1 with *ret_op. 0 when it
 * waits or is refused (nothing written: the caller inserts it pending and
 * lets store__place_now decide as the loop does). < 0 on error
 * (db_last_unique_violation() tells an Idempotency-Key taken meanwhile). */
int store__create_placed(PGconn *c, const store_limits_t *lim, const create_req_t *req, const char *spec_text,
                         const char *class_text, const char *sbx_id, const char *op_id, json_object **ret_op);
/* The placement of an operation that goes where its sandbox runs:
 * {"worker":worker_name,"reasons":[why]} (new). */
json_object *store__placement_here(const char *worker_name, const char *why);

/* In the caller's transaction: a snapshot_copy operation leased to worker
 * worker_id (its placement says why) and its snapshot_copies row; isolation
 * is the snapshot's (the class whose backend takes the copy). ret_op: the
 * operation (may be NULL). 0 or SBX_EDB. */
int store__snapshot_copy_insert(PGconn *c, const store_limits_t *lim, const char *snapshot_id, const char *isolation,
                                const char *tenant_id, const char *sandbox_id, const char *worker_id,
                                const char *worker_name,
                                const char *source_worker_id, const char *created_by, const char *why,
                                json_object **ret_op);
#define STORE_WHY_EXEC_HERE "runs where the sandbox runs"
#define STORE_WHY_DELETE_HERE "deleted where the sandbox runs"
/* Counts an operation admitted and placed in its own request's
 * transaction (sandbox_operations_placed_on_request_total{kind}). */
void store__count_placed_now(const char *kind);
int store__place_now(PGconn *c, const store_limits_t *lim, const char *op_id, bool create);
int store__place_route_op(PGconn *c, const char *op_id, const char *kind, const char *sbx, const char *phase,
                          const char *tenant_id);

#endif
