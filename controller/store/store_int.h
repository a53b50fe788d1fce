/* The store's internal header: what its rooms (the .c files of
 * controller/store/) share and nothing outside the store includes. SQL
 * fragments, the row mappers and the transition helpers; every function
 * here is store__-prefixed (public ones, store_, are in store.h). */
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
#include "token.h"
#include "utf8.h"

#include <sodium.h>

#include <assert.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TS(col) "to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"

#define SANDBOX_COLS \
    "s.id, tn.name, s.spec::text, s.phase, s.desired_state, w.name, s.isolation, s.cpu_millis, s.memory_mib, " \
    "s.ttl_seconds, " TS("s.expires_at") ", " TS("s.created_at") ", " TS("s.updated_at") ", s.classification::text, " \
    "s.failure::text"
#define SANDBOX_FROM \
    " FROM sandboxes s JOIN tenants tn ON tn.id = s.tenant_id LEFT JOIN workers w ON w.id = s.worker_id "

#define OP_COLS \
    "o.id, o.kind, o.state, o.sandbox_id, o.attempt, " TS("o.created_at") ", " TS("o.updated_at") ", " \
    TS("o.finished_at") ", o.error_code, o.error_message, o.placement::text, o.result::text"
#define TENANT_COLS "tn.id, tn.name, " TS("tn.created_at") ", tn.policy::text"
#define TOKEN_COLS \
    "t.id, tn.name, t.role, t.name, " TS("t.created_at") ", " TS("t.expires_at") ", " TS("t.revoked_at")
#define WORKER_COLS \
    "id, name, labels::text, array_to_json(isolation)::text, runtime, cpu_millis, memory_mib, slots, " \
    "alloc_cpu_millis, alloc_memory_mib, alloc_slots, version, state, " TS("last_heartbeat") ", " TS("created_at") \
    ", networks::text, probes::text, jsonb_array_length(images), route_address"
#define ROUTE_COLS \
    "r.id, r.name, r.sandbox_id, r.port, r.auth, r.state, " TS("r.expires_at") ", " TS("r.created_at") ", " \
    TS("r.removed_at") ", r.removed_reason"

/* Lease expiries by outcome (core.c registers it; reconcile.c counts). */
extern metric_family_t *store__m_lease_expiries;
extern pthread_once_t store__metrics_once;

int store__db_error(api_error_t *err);
json_object *store__parse_json_text(const char *s);
json_object *store__sandbox_json(const PGresult *r, int row);
json_object *store__op_json(const PGresult *r, int row);
json_object *store__rows_object(PGresult *r, const char *key, json_object *(*row_json)(const PGresult *, int));
int store__load_op(PGconn *c, const char *op_id, json_object **ret);
int store__load_sandbox(PGconn *c, const char *sandbox_id, json_object **ret);
int store__event_add(PGconn *c, const char *tenant_id, const char *kind, const char *sandbox_id, const char *op_id,
                     json_object *data);
void store__metrics_init(void);
json_object *store__event_reason(const char *why);
int store__op_cas(PGconn *c, const char *op_id, op_state_t from, op_state_t to, const char *extra_set, int nextra,
                  const char *const *extra, json_object *event_data);
int store__sandbox_set_phase(PGconn *c, const char *sandbox_id, sandbox_phase_t phase, const char *extra_set,
                             int nextra, const char *const *extra);
int store__sandbox_release_allocation(PGconn *c, const char *sandbox_id);
int store__sandbox_fail_observed(PGconn *c, const char *sandbox_id, json_object *failure, const char *output_tail);
int store__idem_replay(PGconn *c, const char *tenant_id, const char *key, const char *kind, const char *hash,
                       bool with_sandbox, json_object **ret, api_error_t *err);
int store__sandbox_lock(PGconn *c, const char *scope, const char *sandbox_id, char ret_tenant[SBX_ID_MAX],
                        char ret_phase[24], char ret_desired[16], api_error_t *err);
int store__sandbox_request_delete(PGconn *c, const store_limits_t *lim, const char *tenant_id, const char *sandbox_id,
                                  const char *idem, const char *hash, const char *created_by, char ret_op[SBX_ID_MAX]);
int store__flag_ids(PGconn *c, const char *sql, const char *const *ids, int n, bool *ret_flags);
int store__op_fail_admitted(PGconn *c, const char *op_id, const char *kind, const char *sbx, const char *code,
                            const char *msg, json_object *placement);
int store__place_one(PGconn *c, const store_limits_t *lim, const char *op_id);
int store__place_route_op(PGconn *c, const char *op_id, const char *kind, const char *sbx, const char *phase,
                          const char *tenant_id);

#endif
