/* The API handlers (api_sandboxes.c, api_workers.c) and the request
 * authentication they rely on (auth.c). */
#ifndef SBX_API_H
#define SBX_API_H

#include <stdbool.h>
#include <stdint.h>

#include "classify.h"
#include "grant.h"
#include "server.h"
#include "tenantcap.h"

#include <event2/bufferevent.h>

/* Authenticates the bearer token into rq->auth. On failure it has replied
 * 401 (or 503 when the database is unreachable) and returns < 0. */
int auth_request(req_t *rq);
/* auth_request for a token found elsewhere (E2B's X-API-Key): missing is
 * the 401's message when token is NULL or empty. */
int auth_token_request(req_t *rq, const char *token, const char *missing);
/* The token of an Authorization header value "Bearer TOKEN", or NULL. */
const char *auth_bearer(const char *header);
/* Looks token up and checks its secret: 0 with *ret filled, SBX_EAUTH
 * (malformed, unknown, revoked, expired or a wrong secret), SBX_EDB. */
int auth_token_check(PGconn *db, const char *token, auth_info_t *ret);
/* Whether token_id is still live (known, not revoked, not expired): 1 or
 * 0, SBX_EDB. What a long-lived stream asks every few seconds, so that a
 * revoked token's shell or log stream ends. */
int auth_token_live(PGconn *db, const char *token_id);

/* Verified tokens are remembered for at most SBX_AUTH_CACHE_TTL_MS (never
 * past their expiry; the secret is checked against the kept hash every
 * time), so most requests skip the lookup. auth_cache_forget drops one
 * token (revoked here, or a "token:ID" notification from any controller);
 * auth_cache_forget_all drops every one (notifications may have been
 * missed). Thread-safe. */
void auth_cache_forget(const char *token_id);
void auth_cache_forget_all(void);
/* A worker token's right to act as a worker id, remembered in its cache
 * entry once store_worker_authorize said yes (a token's bound worker name
 * never changes, nor does a worker id's name), and forgotten with it:
 * auth_worker_known is true when token_id's live entry holds worker_id. */
bool auth_worker_known(const char *token_id, const char *worker_id);
void auth_worker_remember(const char *token_id, const char *worker_id);

/* The tenant scope of the caller: NULL for an admin, its tenant id otherwise. */
const char *auth_scope(const req_t *rq);

/* Client endpoints. */
void api_sandbox_create(req_t *rq);
/* The create of body (a POST /v1/sandboxes request's JSON, not taken):
 * judged and stored as that endpoint does (idem: its Idempotency-Key or
 * NULL). 0 with *ret its 202 answer's body ({"sandbox","operation"}) and
 * *ret_replayed set when an earlier request with that key made it; < 0
 * once an error was answered. The caller kicks the reconcile loop when
 * the operation waits for it (api_kick_if_waiting). */
int api_sandbox_create_json(req_t *rq, json_object *body, const char *idem, json_object **ret, bool *ret_replayed);
/* Kicks the reconcile loop when resp's operation was left for it. */
void api_kick_if_waiting(controller_t *ctl, json_object *resp);
/* An exec request's body checked (exec_spec_from_json) and held to the
 * server's ceilings (exec_output_max_bytes, exec_timeout_max_seconds):
 * 0 with *ex (exec_spec_release), else SBX_EINVAL with err. */
int api_exec_spec(const controller_t *ctl, json_object *body, exec_spec_t *ex, api_error_t *err);
void api_sandbox_list(req_t *rq);
/* A create's spec judged as every create is (api_sandboxes.c): the
 * default disk within the binding ceilings, the server's and the tenant's
 * rules, then classification (spec->hardened set from it). 0 with
 * *ret_cls, or a reply sent and SBX_EINVAL. Warm pools judge their
 * members' spec with it too. */
int api_spec_admit(req_t *rq, sandbox_spec_t *spec, const policy_t *policy, classification_t *ret_cls);
/* Warm pools (api_pools.c): POST /v1/pools {"name","size","image",…} 201
 * {"pool":…}; GET /v1/pools {"pools":[…]}; GET and DELETE /v1/pools/{name}
 * {"pool":…} (delete also asks for the unclaimed members' deletion). */
void api_pool_create(req_t *rq);
void api_pool_list(req_t *rq);
void api_pool_get(req_t *rq, const char *name);
void api_pool_delete(req_t *rq, const char *name);
void api_sandbox_get(req_t *rq, const char *id);
void api_sandbox_delete(req_t *rq, const char *id);
void api_sandbox_exec(req_t *rq, const char *id);
/* POST /v1/sandboxes/{id}/extend {"ttl_seconds":N}: the sandbox expires N
 * seconds from now, an extend operation finished before the answer (200
 * {"operation":…}). */
void api_sandbox_extend(req_t *rq, const char *id);
void api_sandbox_network(req_t *rq, const char *id);
void api_sandbox_network_log(req_t *rq, const char *id);   /* api_network.c */
void api_secret_create(req_t *rq);                          /* api_secrets.c */
void api_secret_list(req_t *rq);
void api_secret_delete(req_t *rq, const char *name);
void api_worker_network_log(req_t *rq, const char *id);
/* POST /v1/sandboxes/{id}/pause and /resume (docs/pause.md): operations, 202. */
void api_sandbox_pause(req_t *rq, const char *id);
void api_sandbox_resume(req_t *rq, const char *id);
/* The Idempotency-Key header (api_sandboxes.c): 0 with *ret NULL when
 * absent or the key (1 to 128 printable ASCII bytes); < 0 with a 400 sent. */
int api_idempotency_key(req_t *rq, const char **ret);
/* A create's "from" (api_sandboxes.c): the tenant's ready snapshot by id
 * or name (is_template: spec->from is a template's NAME[:VERSION], its
 * newest ready version unless it names one); spec->from becomes the
 * snapshot's id and spec->image its source's image (one given must be
 * that). Replies on a refusal (404, 409, 503, 400). */
int api_spec_from_snapshot(req_t *rq, const char *tenant_id, sandbox_spec_t *spec, bool image_given, bool is_template,
                           isolation_t *ret_iso);
/* A create's "volumes" (api_volumes.c): each the tenant's live volume by id
 * or name, resolved to its id and size; all of those already placed must
 * live on one worker. 0, or replied (404, 409, 503) and SBX_EINVAL. */
int api_spec_volumes(req_t *rq, const char *tenant_id, sandbox_spec_t *spec);
/* Whether the caller's worker token acts for worker id (api_workers.c);
 * false: answered (404, 403, 503). */
bool api_worker_id_ok(req_t *rq, const char *endpoint, const char *id, bool missing_ok);
/* GET /v1/workers/{id}/snapshots/{snp}/export (api_files.c): the worker
 * taking a copy of snapshot snp reads it, streamed from the worker holding
 * it, only while that copy is leased to it. */
void api_worker_snapshot_export(req_t *rq, const char *id, const char *snp);
/* POST /v1/snapshots/{id}/copies {"worker"} (api_snapshots.c): a
 * snapshot_copy operation (202). */
void api_snapshot_copy(req_t *rq, const char *ref);
/* Volumes (api_volumes.c, docs/volumes.md): create (201), list, get, delete
 * (409 while mounted). */
void api_volume_create(req_t *rq);
void api_volume_list(req_t *rq);
void api_volume_get(req_t *rq, const char *ref);
void api_volume_delete(req_t *rq, const char *ref);
/* Snapshots (api_snapshots.c): make one of a sandbox (an operation; 202),
 * list (?sandbox=ID), get and delete by id or name. */
void api_snapshot_create(req_t *rq, const char *id);
void api_snapshot_list(req_t *rq);
void api_snapshot_get(req_t *rq, const char *ref);
void api_snapshot_delete(req_t *rq, const char *ref);
/* Templates (api_snapshots.c, docs/templates.md): list (every tenant's for
 * an admin), get and delete (?version=N) by name in the caller's tenant. */
void api_template_list(req_t *rq);
void api_template_get(req_t *rq, const char *name);
void api_template_delete(req_t *rq, const char *name);
/* A build sandbox no build row came to drive: deleted now, not at its TTL
 * (best effort). */
void api_build_abandon(req_t *rq, const char *sandbox_id);
/* A build's steps (a JSON array of exec requests), each checked as POST
 * /exec checks one (api_exec_spec): 0 with *ret their canonical forms, or
 * SBX_EINVAL with err and *ret_bad the index of the first bad one. */
int api_build_steps_canon(const controller_t *ctl, json_object *steps, json_object **ret, size_t *ret_bad,
                          api_error_t *err);
/* A build recorded with its sandbox's create answer: the create kicked
 * unless it was replayed, the reconcile loop told builds run. */
void api_build_started(req_t *rq, json_object *created, bool replayed);
void api_build_create(req_t *rq, const char *name);
void api_build_list(req_t *rq, const char *name);
void api_build_get(req_t *rq, const char *name, const char *id);
/* A build's COPY as an exec step (*ret): the tenant's files of hash (a
 * tar, maybe gzipped) as its stdin, unpacked in the build sandbox and the
 * srcs (paths or patterns in them) copied to dest as Docker's COPY copies,
 * user and mode ("" none) applied, in cwd (NULL: the sandbox's). *total
 * adds their size (at most SBX_BUILD_COPY_TOTAL_MAX a build). 0,
 * SBX_EINVAL with err (naming what), SBX_EDB. */
int api_build_copy_step(req_t *rq, const char *what, const char *hash, const char *const *srcs, size_t nsrcs,
                        const char *dest, const char *user, const char *mode, const char *cwd, int64_t *total,
                        json_object **ret, api_error_t *err);
/* PUT /v1/build-files/{sha256} {"data_b64"}: a file a build's copy step
 * takes (a tar, maybe gzipped), checked against its name and kept as the
 * tenant's; 200 {"build_file":{"hash","size_bytes"}}. */
void api_build_file_put(req_t *rq, const char *hash);
/* DELETE /v1/templates/{name}/builds/{id}: cancels a build under way
 * (store_build_cancel); 200 {"build":…}. */
void api_build_cancel(req_t *rq, const char *name, const char *id);
/* A path's sandbox given by name ("/v1/sandboxes/NAME/…"): *id becomes
 * the id of the tenant's sandbox of that name (rq->sandbox_id). An id, or
 * text that is neither, is left for the handler. False when a reply was
 * sent (no such name: 404; a name in several tenants, for an admin: 409). */
bool api_sandbox_ref(req_t *rq, const char **id);
/* The tenant a request acts in: the one it names (an admin's choice; a
 * member may name only its own) or the token's. Fills tenant_id and, when
 * pol is not NULL, the tenant's policy (the caller releases it). False when
 * a reply was sent: 403 (another tenant, "cannot VERB in tenant X"), 404
 * (no such tenant) or 503. */
bool api_tenant_for(req_t *rq, const char *named, const char *verb, char tenant_id[SBX_ID_MAX], policy_t *pol);
void api_route_share(req_t *rq, const char *sandbox_id);
void api_routes_list(req_t *rq, const char *sandbox_id);
void api_route_unshare(req_t *rq, const char *sandbox_id, const char *route_id);
void api_operation_get(req_t *rq, const char *id);

/* GET /v1/sandboxes/{id}/logs (api_logs.c): the main process's output as
 * NDJSON, streamed from the worker (docs/api.md). api_logs_stop_thread
 * ends every stream of the calling HTTP thread (controller stopping). */
void api_sandbox_logs(req_t *rq, const char *id);
void api_logs_stop_thread(void);

/* PUT and GET /v1/sandboxes/{id}/files (api_files.c): files into and out
 * of a running sandbox, streamed through the worker's forwarder (docs/api.md
 * "Files"). api_files_stop_thread ends the calling thread's transfers. */
void api_sandbox_files_put(req_t *rq, const char *id);
void api_sandbox_files_get(req_t *rq, const char *id);
/* The worker of sandbox id (in the request's scope), if it runs and can be
 * reached: 0 and *src (store_logs_source_release it), or answered (404
 * for none in scope, 409 "... <what> only while it is running", 503). */
int api_data_source(req_t *rq, const char *id, const char *what, logs_source_t *src);
/* Takes `kinds` (TCAP_BIT()s) of the fair share of src's tenant on this
 * controller into *hold (controller/tenantcap.h; release it when the
 * stream ends): 0, or answered 429 quota_exceeded naming the cap. */
int api_tenant_take(req_t *rq, const logs_source_t *src, unsigned kinds, tenantcap_hold_t *hold);
/* A connection to a sandbox's worker's forwarder (api_files.c, api_shell.c). */
typedef struct api_worker_open {
    req_t *rq;
    struct event_base *base;
    const logs_source_t *src;        /* api_data_source's */
    const char *sandbox_id;
    grant_purpose_t purpose;         /* a grant bound to line (GRANT_FILES_*, GRANT_SHELL) */
    const char *line;                /* the one request line */
    bool read_timeout;               /* read and write timeouts (else none: the caller's sweep bounds it) */
    bufferevent_data_cb readcb, writecb;
    bufferevent_event_cb eventcb;
    void *arg;
} api_worker_open_t;
/* Signs the grant, connects (TLS to workers when configured) and queues
 * the preamble and o->line: 0 with *ret (its callbacks set, connecting), or
 * an error to answer (unavailable, internal) with nothing left open. */
int api_worker_open(const api_worker_open_t *o, struct bufferevent **ret, api_error_t *err);
/* POST /v1/sandboxes/{id}/shell (controller/api_shell.c). */
void api_sandbox_shell(req_t *rq, const char *id);
/* Ends the thread's shells (the controller stops). */
void api_shell_stop_thread(void);
void api_files_stop_thread(void);
/* A path in the sandbox as the files endpoints take it: absolute, at most
 * SBX_FILES_PATH_MAX bytes, no control characters. 0 or SBX_EINVAL with err. */
int api_files_path_check(const char *path, api_error_t *err);
/* Parses ?tail= (a count 0..SBX_LOGS_TAIL_MAX or "all"; absent: all, as
 * GRANT_LOGS_TAIL_ALL) and ?follow= (true|false|1|0; absent: false).
 * Returns 0, or SBX_EINVAL with err saying what is wrong. */
int api_logs_parse(const char *tail, const char *follow, int64_t *ret_tail, bool *ret_follow, api_error_t *err);
/* The last `tail` lines of text (all for a negative tail), as a pointer
 * into it (a final line without a newline counts as a line). */
const char *api_logs_tail_lines(const char *text, int64_t tail);

/* Admin endpoints: tenants (a member may read its own) and tokens. */
void api_tenant_create(req_t *rq);
void api_tenant_list(req_t *rq);
void api_tenant_get(req_t *rq, const char *name);
void api_tenant_delete(req_t *rq, const char *name);
void api_tenant_set_policy(req_t *rq, const char *name);
void api_token_create(req_t *rq);
void api_token_list(req_t *rq);
void api_token_revoke(req_t *rq, const char *id);

/* Worker endpoints. */
void api_worker_register(req_t *rq);
void api_worker_heartbeat(req_t *rq, const char *id);
void api_worker_poll(req_t *rq, const char *id);
void api_worker_report(req_t *rq, const char *id);
/* POST /v1/workers/{id}/output: a running exec's output chunks (fenced as a report). */
void api_worker_output(req_t *rq, const char *id);
/* POST /v1/workers/{id}/sessions {"sessions":[{"sandbox_id","argv","tty",
 * "exit_code","duration_ms","caller"}]}: processes E2B clients ran through
 * the worker's envd that ended, each recorded as an exec operation
 * (store_shell_record, via "e2b"); 200 {"recorded":N}. */
void api_worker_sessions(req_t *rq, const char *id);
void api_worker_list(req_t *rq);
/* GET /v1/images (api_images.c). */
void api_images_list(req_t *rq);
/* GET /v1/version (api_health.c). */
void api_version(req_t *rq);
/* GET /v1/openapi.json (api_health.c): the embedded OpenAPI document. */
void api_openapi(req_t *rq);
/* Admin: stop (drain) or resume placing new sandboxes on the worker NAME. */
void api_worker_drain(req_t *rq, const char *name, bool drain);

/* Parked long-polls: answer now (final = the wait ran out or the
 * controller stops). api_poll_resume returns false when it stays parked. */
void api_operation_resume(req_t *rq);
/* GET /v1/operations/{id}/output?offset=N&wait=S, and its parked answer. */
void api_operation_output(req_t *rq, const char *id);
void api_output_resume(req_t *rq);
/* POST /v1/operations/{id}/cancel: ends a pending or running exec cancelled. */
void api_operation_cancel(req_t *rq, const char *id);
bool api_poll_resume(req_t *rq, bool final);

/* Probes and metrics (api_health.c), unauthenticated: /healthz answers 200
 * while the process serves; /readyz 200 when the database answers and its
 * schema is current, else 503 naming the failed check; /metrics the
 * Prometheus text format (the process registry plus a database snapshot). */
void api_healthz(req_t *rq);
void api_readyz(req_t *rq);
void api_metrics(req_t *rq);

/* GET /v1/events (api_events.c): events after a cursor, long-polled with
 * ?wait=; tenant-scoped. api_events_resume answers a parked read when an
 * event matches or final is true, else leaves it parked. */
void api_events_list(req_t *rq);
void api_events_resume(req_t *rq, bool final);
/* Parses the query of GET /v1/events (after, tail, limit, sandbox,
 * operation, kind; wait is accepted and left to http_wait_param) into ret
 * (scope NULL). Returns 0, or SBX_EINVAL with err saying what is wrong. */
int api_events_parse(const struct evkeyvalq *query, events_query_t *ret, api_error_t *err);

#endif
