/* The controller's durable state in PostgreSQL: every statement the API
 * handlers and the reconcile loop run. Each state change is a
 * compare-and-set on the expected state, in the same transaction as its
 * events row (the outbox). */
#ifndef SBX_STORE_H
#define SBX_STORE_H

#include <json-c/json.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>

#include "errors.h"
#include "token.h"
#include "limits.h"
#include "policy.h"
#include "sbuf.h"
#include "spec.h"

typedef enum { ROLE_ADMIN = 0, ROLE_MEMBER, ROLE_WORKER } role_t;
const char *role_name(role_t r);
int role_parse(const char *s, role_t *ret);

/* Who made a request. tenant_id scopes a member; admins see every tenant. */
typedef struct auth_info {
    char token_id[SBX_ID_MAX];
    char tenant_id[SBX_ID_MAX];
    char tenant[64];
    role_t role;
    char worker_name[SBX_MAX_NAME_BYTES + 1]; /* a worker token's bound name; "" unbound or not a worker */
} auth_info_t;

/* Settings the store needs (copied from the config at start). */
typedef struct store_limits {
    int64_t lease_seconds;
    int64_t worker_timeout_seconds;
    int64_t worker_lost_after_seconds; /* >= worker_timeout_seconds */
    int64_t max_attempts;
    int64_t deadline_seconds;
    int64_t exec_output_default;
    int64_t exec_output_keep;        /* live output kept per exec (exec_output_keep_bytes) */
    int64_t exec_output_tenant_keep; /* and per tenant over all its execs (exec_output_tenant_keep_bytes) */
    int64_t heartbeat_seconds;
    int64_t max_snapshots;           /* server ceilings of a tenant's snapshots (count; MiB they add) */
    int64_t max_snapshot_mib;
    int64_t max_volumes;             /* server ceilings of a tenant's volumes (count; MiB) */
    int64_t max_volume_mib;
    /* the key secrets are sealed with (secrets_key_file; 32 bytes, locked
     * memory); NULL: no secrets */
    const unsigned char *secrets_key;
} store_limits_t;

/* Looks a token up by id. Returns 0 with ret filled, ret_hash (hex) set and
 * *ret_left_ms the milliseconds until it expires (-1: never); SBX_ENOTFOUND
 * when unknown; SBX_EAUTH when revoked or expired; SBX_EDB. */
int store_token_find(PGconn *c, const char *token_id, char ret_hash[72], auth_info_t *ret, int64_t *ret_left_ms);

/* Creates a token for tenant (created when missing) and role; a worker
 * token with worker_name set acts for that worker only (NULL: bound at its
 * first registration). ret_secret gets the token to show once. Returns 0
 * or SBX_EDB (err says why). */
int store_token_create(PGconn *c, const char *tenant, role_t role, const char *name, const char *worker_name,
                       char ret_secret[SBX_TOKEN_MAX], char *err, size_t errlen);

/* Admin API: tenants and tokens. Return 0 with *ret a new JSON object, or
 * SBX_EINVAL with err filled (conflict, not found) or SBX_EDB.
 * store_tenant_create: {"tenant":…}; 409 when the name exists. */
int store_tenant_create(PGconn *c, const char *name, json_object **ret, api_error_t *err);
/* {"tenants":[…]}: all for an admin (scope NULL), else the caller's own. */
int store_tenant_list(PGconn *c, const char *scope, json_object **ret, api_error_t *err);
/* {"tenant":…} with "usage" (live sandboxes, cpu and memory, pools, active
 * tokens); another tenant is not found for a member. */
int store_tenant_get(PGconn *c, const char *scope, const char *name, json_object **ret, api_error_t *err);
/* Deletes a tenant that owns no live sandbox and no pool (409 otherwise,
 * naming what to delete first): its tokens are revoked, the row renamed
 * NAME.deleted.ID and marked; {"tenant":…,"deleted":true}. */
int store_tenant_delete(PGconn *c, const char *name, json_object **ret, api_error_t *err);
/* A tenant's id and policy (empty when none is set) by its name, in one
 * read: 0, SBX_ENOTFOUND or SBX_EDB (*ret initialised in every case; the
 * caller releases it). */
int store_tenant_policy_by_name(PGconn *c, const char *name, char ret_id[SBX_ID_MAX], policy_t *ret);
/* Replaces the tenant's policy; {"tenant":…}. */
int store_tenant_set_policy(PGconn *c, const char *name, const policy_t *policy, json_object **ret, api_error_t *err);
/* A new token of an existing tenant (ttl_seconds 0: no expiry; worker_name
 * as for store_token_create). *ret is the token object (no secret);
 * ret_secret the token to show once. */
int store_token_issue(PGconn *c, const char *tenant, role_t role, const char *name, const char *worker_name,
                      int64_t ttl_seconds, json_object **ret, char ret_secret[SBX_TOKEN_MAX], api_error_t *err);
/* {"tokens":[…]} without secrets; tenant NULL: all. */
int store_token_list(PGconn *c, const char *tenant, json_object **ret, api_error_t *err);
/* Revokes (idempotently); {"token":…}. */
int store_token_revoke(PGconn *c, const char *id, json_object **ret, api_error_t *err);

/* Finds (or, when create is true, creates) a tenant by name. SBX_ENOTFOUND
 * when missing and not created. */
int store_tenant_resolve(PGconn *c, const char *name, bool create, char ret_id[SBX_ID_MAX]);

/* Client requests. `scope` is the caller's tenant id, or NULL for an admin.
 * Objects of other tenants are reported as not found. All return 0 with
 * *ret a new JSON object, or SBX_EINVAL with err filled (API code + message),
 * or SBX_EDB (err: unavailable). */
typedef struct create_req {
    const char *tenant_id;
    const sandbox_spec_t *spec;
    isolation_t isolation;       /* the minimum class (classification) */
    json_object *classification; /* stored with the sandbox, shown by get */
    const char *idempotency_key; /* may be NULL */
    const char *request_hash;    /* hex digest of the canonical request */
    const char *created_by;      /* token id */
    const char *name;            /* the sandbox's name (spec_sandbox_name_ok), unique in the tenant among
                                  * sandboxes not deleted; NULL: none */
    const policy_t *policy;      /* the tenant's quotas, checked under its row lock; may be NULL */
    const char *pool_key;        /* store_pool_key of the spec: a ready member of a matching pool is taken;
                                  * NULL: this create may not take one (always a cold create) */
} create_req_t;

/* {"sandbox":…,"operation":…}; *ret_replayed is true when an idempotency
 * key returned the original operation. */
int store_sandbox_create(PGconn *c, const store_limits_t *lim, const create_req_t *req, json_object **ret,
                         bool *ret_replayed, api_error_t *err);
/* Warm pools (store/pools.c). A pool's members are ordinary sandboxes of
 * the '_pools' tenant with pool_id set until a matching create claims one. */
typedef struct pool_decl {
    const char *name;
    const char *tenant_id;        /* NULL: any tenant may claim its members */
    const sandbox_spec_t *spec;   /* the members' spec, classified */
    isolation_t isolation;
    json_object *classification;  /* stored with each member */
    int64_t size;
    const char *created_by;       /* token id */
    const policy_t *policy;       /* the tenant's, whose quotas the pool's size counts against; NULL: shared */
} pool_decl_t;
/* The text a create's spec must share with a pool to take one of its
 * members: image, cpu, memory, disk, network, class, hardening, read-only
 * root. False (out not written) when the spec cannot be served warm:
 * env or a worker selector (both fixed when a container is made). */
bool store_pool_key(const sandbox_spec_t *s, isolation_t iso, char *out, size_t outlen);
/* {"pool":…}; conflict when the name is taken or a cap (SBX_POOLS_MAX,
 * SBX_POOLS_PER_TENANT_MAX) is reached; quota_exceeded when the tenant's
 * live sandboxes, its pools and this one's size (each member at the
 * pool's cpu and memory) would pass a quota of d->policy. A shared pool
 * counts against no tenant (its claims count against their claimers). */
int store_pool_create(PGconn *c, const pool_decl_t *d, json_object **ret, api_error_t *err);
/* {"pools":[…]}: every pool for an admin (scope NULL), else the scope's own
 * and the shared ones (tenant NULL). */
int store_pool_list(PGconn *c, const char *scope, json_object **ret, api_error_t *err);
/* {"pool":…}; another tenant's pool is not found. */
int store_pool_get(PGconn *c, const char *scope, const char *name, json_object **ret, api_error_t *err);
/* Deletes the pool (a member only its own, never a shared one) and asks
 * for the deletion of its unclaimed members; {"pool":…} as it was, with
 * "deleted_members". */
int store_pool_delete(PGconn *c, const store_limits_t *lim, const char *scope, const char *name, json_object **ret,
                      api_error_t *err);
/* The reconcile pass: for each pool short of its size, adds create
 * operations for at most budget missing members in all (each pool under
 * its row lock, so controllers do not overfill); a member's TTL is its
 * pool's ttl_seconds, at most max_ttl_seconds (the server ceiling now: it
 * may have been lowered since the declaration); a member is replaced when
 * it runs out. *ret_added += added. */
int store_pool_refill(PGconn *c, const store_limits_t *lim, int64_t max_ttl_seconds, int budget, int *ret_added);

/* {"operation":…} */
int store_sandbox_delete(PGconn *c, const store_limits_t *lim, const char *scope, const char *sandbox_id,
                         const char *idempotency_key, const char *request_hash, const char *created_by,
                         json_object **ret, api_error_t *err);
/* Snapshots (store/snapshots.c, docs/snapshots.md). A snapshot of a
 * running container or gvisor sandbox (name may be NULL): a row and an
 * operation of kind snapshot leased to the sandbox's worker, within the
 * tenant's max_snapshots and max_snapshot_mib (and the server's);
 * {"operation":…,"snapshot":…}. 409 not running, 503 its worker away, 422
 * isolation_unavailable (microvm), 429 quota_exceeded, 409 a name taken. */
int store_snapshot_create(PGconn *c, const store_limits_t *lim, const char *scope, const char *sandbox_id,
                          const char *name, const char *template_name, json_object *config, bool memory,
                          const char *idempotency_key, const char *request_hash, const char *created_by,
                          json_object **ret, api_error_t *err);
/* Templates (docs/templates.md): a template's versions are snapshots made
 * with template_name (store_snapshot_create: the next version, config its
 * canonical defaults). {"templates":[{"name","tenant","versions","latest"}]}
 * (latest: the newest ready version's snapshot, or null). */
int store_template_list(PGconn *c, const char *scope, json_object **ret, api_error_t *err);
/* {"template":{"name","tenant","versions":[snapshot…]}} of tenant_id's
 * template (newest first, not deleted); 404 when it has none. */
int store_template_get(PGconn *c, const char *tenant_id, const char *name, json_object **ret, api_error_t *err);
/* Deletes version (0: every version) of tenant_id's template:
 * {"template":{"name","deleted_versions":N}}; 404 when none was live. */
int store_template_delete(PGconn *c, const char *tenant_id, const char *name, int64_t version, json_object **ret,
                          api_error_t *err);
/* Template builds the server drives (store/builds.c): the build sandbox
 * made (its create operation create_op_id), a row of state building. */
typedef struct build_req {
    const char *tenant_id, *template_name, *sandbox_id, *create_op_id;
    json_object *steps;          /* [exec request…], each canonical (exec_spec_to_json) */
    json_object *config;         /* the version's defaults, canonical; may be NULL */
    const char *idempotency_key; /* may be NULL */
    const char *created_by;
} build_req_t;
/* {"build":…}; with a key another request of the tenant made a build
 * under already: that build. */
int store_build_create(PGconn *c, const build_req_t *b, json_object **ret, api_error_t *err);
/* The build tenant_id made under key: 0 with *ret ({"build":…}),
 * SBX_ENOTFOUND, SBX_EDB; SBX_ECONFLICT with err when that build was asked
 * for another template, other steps or another config than these
 * (canonical; config NULL: none). */
int store_build_by_key(PGconn *c, const char *tenant_id, const char *key, const char *template_name,
                       json_object *steps, json_object *config, json_object **ret, api_error_t *err);
/* Cancels tenant_id's build (waiting or building): it ends cancelled, the
 * step under way with its build sandbox, which the reconcile loop deletes;
 * {"build":…}. A cancelled one answers as it is; 404; 409 when it is
 * saving its version or ended. */
int store_build_cancel(PGconn *c, const char *tenant_id, const char *template_name, const char *build_id,
                       const char *by, json_object **ret, api_error_t *err);
/* The tenant's builds still under way or cleaning up. */
int store_build_active_count(PGconn *c, const char *tenant_id, int64_t *ret);
/* {"build":…} of tenant_id's template; 404. */
int store_build_get(PGconn *c, const char *tenant_id, const char *template_name, const char *build_id,
                    json_object **ret, api_error_t *err);
/* {"builds":[…]}, newest first, at most 100. */
int store_build_list(PGconn *c, const char *tenant_id, const char *template_name, json_object **ret,
                     api_error_t *err);
/* A build asked for without its steps yet (E2B's POST /v3/templates):
 * state waiting, request the build sandbox's create request so far;
 * {"build":…}. Failed unless started within SBX_BUILD_WAITING_SQL s. */
int store_build_waiting(PGconn *c, const char *tenant_id, const char *template_name, json_object *request,
                        const char *created_by, json_object **ret, api_error_t *err);
/* The request of tenant_id's waiting build (*ret_request, new); 404, 409
 * when it was started. */
int store_build_request(PGconn *c, const char *tenant_id, const char *template_name, const char *build_id,
                        json_object **ret_request, api_error_t *err);
/* Starts a waiting build with b's sandbox, steps and config (step_names
 * may be NULL); 409 when it is not waiting any more. */
int store_build_start(PGconn *c, const build_req_t *b, const char *build_id, json_object *step_names,
                      api_error_t *err);
/* A build's files (COPY, docs/templates.md): tenant_id's upload of hash
 * (data_b64: standard base64 of size bytes, at most SBX_BUILD_FILE_MAX),
 * kept or replaced; 429 over SBX_BUILD_FILES_MAX files. 0, SBX_EINVAL with
 * err, SBX_EDB. */
int store_build_file_put(PGconn *c, const char *tenant_id, const char *hash, const char *data_b64, int64_t size,
                         api_error_t *err);
/* Whether tenant_id holds hash (*ret). 0 or SBX_EDB. */
int store_build_file_has(PGconn *c, const char *tenant_id, const char *hash, bool *ret);
/* The base64 of tenant_id's hash (*ret_b64, malloc'd) and its size, marked
 * used; SBX_ENOTFOUND, SBX_EDB. */
int store_build_file_get(PGconn *c, const char *tenant_id, const char *hash, char **ret_b64, int64_t *ret_size);
/* The reconcile pass: moves each unfinished build on (its next step's
 * operation, the snapshot, the build sandbox's delete) once what it waits
 * on has finished. *ret_active: some build is unfinished. */
int store_builds_drive(PGconn *c, const store_limits_t *lim, int *ret_changed, bool *ret_active);
/* For a create's "template" ("NAME" or "NAME:VERSION"): the version's (or
 * the newest ready version's) snapshot id and image, as
 * store_snapshot_resolve. 404 none, 409 not ready. */
int store_template_resolve(PGconn *c, const char *tenant_id, const char *ref, char ret_id[SBX_ID_MAX],
                           char *ret_image, size_t imagelen, isolation_t *ret_iso, api_error_t *err);
/* {"snapshot":…} by id or name (another tenant's: not found). */
int store_snapshot_get(PGconn *c, const char *scope, const char *ref, json_object **ret, api_error_t *err);
/* {"snapshots":[…]}: the live ones (not deleted), newest first; of one
 * sandbox when sandbox_id is not NULL. */
int store_snapshot_list(PGconn *c, const char *scope, const char *sandbox_id, json_object **ret, api_error_t *err);
/* Marks it deleted (its bytes go with its worker's next heartbeat, or once
 * the last sandbox running from it is gone); {"snapshot":…}. Idempotent. */
int store_snapshot_delete(PGconn *c, const char *scope, const char *ref, json_object **ret, api_error_t *err);
/* For a create's "from": tenant_id's ready snapshot by id or name, its id,
 * its source's image and class (ret_iso may be NULL). 404, 409 (not ready),
 * 503 (its worker lost). */
int store_snapshot_resolve(PGconn *c, const char *tenant_id, const char *ref, char ret_id[SBX_ID_MAX],
                           char *ret_image, size_t imagelen, isolation_t *ret_iso, api_error_t *err);
/* Of the snapshots a worker's heartbeat says it holds ({"id"} objects),
 * those no live row wants there: a new array of ids (at most 256). */
/* Volumes (store/volumes.c, docs/volumes.md). Create one of size_mib in
 * the tenant, under its quotas (max_volumes, max_volume_mib: the server's
 * in lim, tightened by pol): {"volume":…}; 409 when the name is taken, 429
 * over a quota, 422 when volumes are off. With idempotency_key (may be
 * NULL): the volume that key made in the tenant, when it made one of this
 * name and size (409 otherwise). */
int store_volume_create(PGconn *c, const store_limits_t *lim, const char *tenant_id, const policy_t *pol,
                        const char *name, int64_t size_mib, const char *idempotency_key, const char *created_by,
                        json_object **ret, api_error_t *err);
/* One by id or name within scope (NULL: any tenant): {"volume":…}, 404. */
int store_volume_get(PGconn *c, const char *scope, const char *ref, json_object **ret, api_error_t *err);
/* The live ones within scope: {"volumes":[…]}. */
int store_volume_list(PGconn *c, const char *scope, json_object **ret, api_error_t *err);
/* Marks one deleted (its worker removes the bytes after): {"volume":…};
 * 409 while a live sandbox mounts it, 404. */
int store_volume_delete(PGconn *c, const char *scope, const char *ref, json_object **ret, api_error_t *err);
/* A create's volume v (by id or name, the tenant's live one): v->volume
 * becomes its id and v->size_mib its size; ret_worker gets the worker id it
 * lives on ("" none yet). 404, 503 when that worker is lost. */
int store_volume_resolve(PGconn *c, const char *tenant_id, spec_volume_t *v, char ret_worker[SBX_ID_MAX],
                         api_error_t *err);
/* The volumes of held (a heartbeat's [{"id"}]) that no live row places on
 * worker_id: a new array of ids into *ret. */
int store_volume_unwanted(PGconn *c, const char *worker_id, json_object *held, json_object **ret, api_error_t *err);
/* Copies a ready snapshot (by id or name within scope) to worker_name: an
 * operation of kind snapshot_copy leased to that worker (202
 * {"operation":…,"snapshot":…}); 404 no snapshot or worker, 409 not ready,
 * made there, already copied or being copied there, the worker not ready;
 * 422 a worker without container or gvisor. */
int store_snapshot_copy_create(PGconn *c, const store_limits_t *lim, const char *scope, const char *ref,
                               const char *worker_name, const char *created_by, json_object **ret, api_error_t *err);
int store_snapshot_unwanted(PGconn *c, const char *worker_id, json_object *held, json_object **ret,
                            api_error_t *err);
/* A pause (resume false) or a resume of a container or gvisor sandbox
 * (store/pause.c, docs/pause.md): an operation leased to its worker;
 * {"operation":…}. 409 when it is not running (pause) or not paused
 * (resume), or another pause or resume is in progress; 503 its worker
 * away; 422 isolation_unavailable (microvm). */
int store_sandbox_pause(PGconn *c, const store_limits_t *lim, const char *scope, const char *sandbox_id, bool resume,
                        const char *idempotency_key, const char *request_hash, const char *created_by,
                        json_object **ret, api_error_t *err);
/* A live change of a running sandbox's egress rules (docs/network.md):
 * rules within the tenant's policy (403 policy_denied naming the entry
 * otherwise), an operation of kind "network" leased to its worker;
 * {"operation":…}. 409 when it is not running, was created without rules
 * or has a network change, pause or resume in progress; 503 its worker
 * away. */
int store_sandbox_network(PGconn *c, const store_limits_t *lim, const char *scope, const char *sandbox_id,
                          const egress_rules_t *rules, const char *idempotency_key, const char *request_hash,
                          const char *created_by, json_object **ret, api_error_t *err);
/* The network log (docs/network.md): at most STORE_NETLOG_BATCH_MAX
 * records a report, each sandbox's newest STORE_NETLOG_KEEP kept. */
#define STORE_NETLOG_BATCH_MAX SBX_NETLOG_BATCH_MAX
#define STORE_NETLOG_KEEP      2000
/* Records worker_id's egress filter reported (the filter's "drain"
 * records), kept for the sandboxes that worker runs only, under their own
 * tenant; counted in the sandbox_egress metrics. *ret_recorded: how many
 * were kept; *ret_skipped: how many could not be (malformed; logged once).
 * 400 when records is not an array of at most the batch. */
int store_network_log_add(PGconn *c, const char *worker_id, json_object *records, int64_t *ret_recorded,
                          int64_t *ret_skipped, api_error_t *err);
/* {"entries":[…],"next_after":ID}: a sandbox's log entries after id
 * after, oldest first, at most limit; verdict "allowed", "refused" or NULL
 * (both). 404 for a sandbox outside scope. */
int store_network_log_list(PGconn *c, const char *scope, const char *sandbox_id, int64_t after, int64_t limit,
                           const char *verdict, json_object **ret, api_error_t *err);
/* Secrets (store/secrets.c, docs/network.md#secrets-at-egress): sealed
 * with lim->secrets_key (503 unavailable without one); {"secret":{"name",
 * "tenant","header","hosts","created_at"}} — never the value; 409 when the
 * tenant has one of that name. */
int store_secret_create(PGconn *c, const store_limits_t *lim, const char *tenant_id, const char *name,
                        const char *header, json_object *hosts, const char *value, const char *created_by,
                        json_object **ret, api_error_t *err);
/* {"secrets":[…]} within scope (NULL: every tenant's). */
int store_secret_list(PGconn *c, const char *scope, json_object **ret, api_error_t *err);
/* {"secret":…} of the one deleted; 404. Running sandboxes keep what they
 * were given. */
int store_secret_delete(PGconn *c, const char *tenant_id, const char *name, json_object **ret, api_error_t *err);
/* 0 when the tenant has every one of names; else 404 naming the first it
 * lacks as secrets[N]. */
int store_secrets_check(PGconn *c, const char *tenant_id, char *const *names, size_t n, api_error_t *err);
/* {"operation":…}; exec_request is the canonical exec JSON. */
int store_exec_create(PGconn *c, const store_limits_t *lim, const char *scope, const char *sandbox_id,
                      json_object *exec_request, const char *idempotency_key, const char *request_hash,
                      const char *created_by, json_object **ret, api_error_t *err);
/* An extend request: the sandbox expires ttl_seconds from now (one not
 * running yet gets ttl_seconds as the TTL it starts with). */
typedef struct extend_req {
    const char *scope;            /* tenant id, or NULL for an admin */
    const char *sandbox_id;
    int64_t ttl_seconds;          /* >= SBX_EXTEND_TTL_SECONDS_MIN */
    int64_t max_ttl_seconds;      /* the server ceiling; the tenant policy's is read in the transaction */
    const char *idempotency_key, *request_hash, *created_by;
} extend_req_t;
/* {"operation":…}, the extend operation already succeeded, its result
 * {"ttl_seconds","previous_expires_at","expires_at"}; in one transaction
 * with its events (operation.pending/admitted/succeeded, sandbox.extended).
 * Errors: not_found (none in scope), conflict (deleting, deleted, failed,
 * lost, or being deleted), policy_denied (over the tighter of the ceiling
 * and the tenant's max_ttl_seconds), conflict for an Idempotency-Key used
 * for another request. */
int store_sandbox_extend(PGconn *c, const store_limits_t *lim, const extend_req_t *req, json_object **ret,
                         api_error_t *err);
/* A shell session that ended (sandbox shell). */
typedef struct shell_record {
    const char *sandbox_id;
    const char *const *argv;      /* argc strings */
    size_t argc;
    bool tty;                     /* false: a command with its stdin streamed, no terminal */
    int exit_code;                /* -1: the session ended before the command */
    int64_t duration_ms;
    const char *created_by;       /* the token id */
    const char *via;              /* what ran it, in the request and the event ("e2b"); NULL: a shell */
    const char *worker_id;        /* when set, the sandbox must run on this worker (else not_found) */
} shell_record_t;
/* Records the session as an exec operation that already succeeded, request
 * {"argv","tty":true}, result {"exit_code","duration_ms"}, with its events
 * (operation.pending/admitted/succeeded, sandbox.shell), in one
 * transaction: 0 and its id in ret_op_id, or not_found, unavailable. */
int store_shell_record(PGconn *c, const store_limits_t *lim, const shell_record_t *rec, char ret_op_id[SBX_ID_MAX],
                       api_error_t *err);
/* A share request: a route to port of the sandbox, made by a share
 * operation that the reconcile loop completes. */
typedef struct share_req {
    const char *scope;            /* tenant id, or NULL for an admin */
    const char *sandbox_id;
    int port;
    bool token_auth;              /* else public */
    const char *secret_hash;      /* hex BLAKE2b of the access token when token_auth */
    int64_t ttl_seconds;          /* 0: as long as the sandbox runs */
    const char *route_id, *route_name;
    const char *idempotency_key, *request_hash, *created_by;
} share_req_t;
/* {"operation":…,"route":{"id","name","port","auth",…}} */
int store_route_share(PGconn *c, const store_limits_t *lim, const share_req_t *req, json_object **ret,
                      api_error_t *err);
/* {"operation":…}; a route of another sandbox or none: not found. */
int store_route_unshare(PGconn *c, const store_limits_t *lim, const char *scope, const char *sandbox_id,
                        const char *route_id, const char *created_by, json_object **ret, api_error_t *err);
/* {"routes":[…]} of the sandbox, active ones, and removed ones with all. */
int store_routes_list(PGconn *c, const char *scope, const char *sandbox_id, bool all, json_object **ret,
                      api_error_t *err);

/* {"sandbox":…,"operations":[…]} */
int store_sandbox_get(PGconn *c, const char *scope, const char *sandbox_id, json_object **ret, api_error_t *err);
/* The id of the sandbox named name, not deleted: in the tenant scope (a
 * member's), or for an admin (scope NULL) in any tenant, own_tenant's
 * first. 0 with ret_id; SBX_ENOTFOUND (err: not_found naming it);
 * SBX_EINVAL (err: conflict, the name is in several tenants); SBX_EDB. */
int store_sandbox_by_name(PGconn *c, const char *scope, const char *own_tenant, const char *name,
                          char ret_id[SBX_ID_MAX], api_error_t *err);
/* {"sandboxes":[…],"next":CURSOR|null}, newest first; tenant_name filters
 * (NULL: all in scope); after (NULL: from the newest) is a previous answer's
 * next. SBX_EINVAL with err set for a malformed cursor. */
int store_sandbox_list(PGconn *c, const char *scope, const char *tenant_name, bool include_deleted, int limit,
                       const char *after, const char *labels_json, const char *phases, json_object **ret,
                       api_error_t *err);
/* (store_sandbox_list: labels_json, a JSON object, keeps the sandboxes
 * whose labels hold all of it; phases, a comma-separated list of checked
 * phase names, those in one of them, deleted ones too when named.) */
/* Whether cursor has the shape of a list answer's next. */
bool store_list_cursor_valid(const char *cursor);
/* {"operation":…}; *ret_terminal tells whether it is finished. */
int store_operation_get(PGconn *c, const char *scope, const char *op_id, json_object **ret, bool *ret_terminal,
                        api_error_t *err);
/* Of the n operation ids, which are terminal: ret_flags[i] set to true. */
int store_operations_terminal(PGconn *c, const char *const *ids, int n, bool *ret_flags);

/* Live exec output (store/output.c). A worker's chunks (body: operation_id,
 * attempt, chunks [{stream, offset, data_b64}]) for an exec it holds the
 * running lease of (else API_STALE_LEASE; API_INVALID_ARGUMENT for a bad
 * body); a resent chunk is ignored; past lim->exec_output_keep per
 * operation the oldest chunks are dropped, and past the tenant's bound
 * (lim->exec_output_tenant_keep, tightened by its policy's
 * exec_output_tenant_keep_bytes) over all its operations the tenant's
 * oldest chunks, those of finished operations first, then of running ones
 * (this append's last), in the same transaction; the append is never
 * refused for it. Wakes followers on every controller. */
int store_output_append(PGconn *c, const store_limits_t *lim, const char *worker_id, json_object *body,
                        api_error_t *err);
/* The output of op_id (in scope; else API_NOT_FOUND) from byte offset, at
 * most max_bytes: *ret {"chunks","next_offset","end_offset","skipped_bytes",
 * "done","state"}; *ret_ready when it has something to say (bytes, a skip
 * past dropped output, or done). */
int store_output_read(PGconn *c, const char *scope, const char *op_id, int64_t offset, size_t max_bytes,
                      json_object **ret, bool *ret_ready, api_error_t *err);
/* Cancels exec op_id (in scope; else API_NOT_FOUND): not yet running, it
 * ends cancelled at once; running, cancel_requested_at is set and the
 * worker's next heartbeat answer tells it to kill the command (it reports
 * it cancelled). Another kind, or a terminal operation: API_CONFLICT.
 * *ret {"operation":…} as it is now. */
int store_operation_cancel(PGconn *c, const char *scope, const char *op_id, json_object **ret, api_error_t *err);
/* Of the n operations, which have output past offsets[i] or are terminal. */
int store_outputs_ready(PGconn *c, const char *const *ids, const int64_t *offsets, int n, bool *ret_flags);

/* Events (store/events.c). A read of the events table for GET /v1/events. */
#define SBX_EVENT_KIND_MAX 64
typedef struct events_query {
    const char *scope;              /* tenant id; NULL for an admin (every tenant and system events) */
    int64_t after;                  /* the cursor: events with a larger id, oldest first */
    int tail;                       /* > 0: the newest `tail` events instead (still oldest first) */
    int limit;                      /* 1..SBX_LIST_MAX; with tail, tail is the count */
    char sandbox_id[SBX_ID_MAX];    /* "" = any */
    char operation_id[SBX_ID_MAX];  /* "" = any */
    char kind[SBX_EVENT_KIND_MAX];  /* "" = any */
    bool kind_prefix;               /* kind ends in '.' and matches every kind it starts */
} events_query_t;
/* The events horizon (migration 0007): every event with an id at or below
 * *ret_horizon has committed or never will, so a reader never returns one
 * above it (a later commit could still fill a smaller id). *ret_newest is
 * the largest committed id, read after the horizon; newest > horizon means
 * events are held back until their neighbours commit. 0 or SBX_EDB. */
int store_events_horizon(PGconn *c, int64_t *ret_horizon, int64_t *ret_newest);
/* The events of q with ids at or below horizon, oldest first, as a new
 * JSON array in *ret_events (each {"id","ts","tenant","kind","sandbox_id",
 * "operation_id","data"}); *ret_last is the last id returned, 0 when none.
 * 0, or SBX_EDB with err set. */
int store_events_list(PGconn *c, const events_query_t *q, int64_t horizon, json_object **ret_events,
                      int64_t *ret_last, api_error_t *err);

/* Worker requests. store_worker_register: SBX_EPERM (err 403 forbidden)
 * when token_id is bound to another worker name, or is unbound and the
 * name belongs to another live worker token; an unbound token binds to the
 * name it registers. */
int store_worker_register(PGconn *c, json_object *body, const char *token_id, json_object **ret, api_error_t *err);
/* Renews the worker's leases and records its inventory; *ret is
 * {"worker":…,"remove":[{"sandbox_id","ref"}…]} — the runtime objects the
 * controller no longer wants (orphans), for the worker to remove. Running
 * sandboxes whose object vanished become lost. */
int store_worker_heartbeat(PGconn *c, const store_limits_t *lim, const char *worker_id, json_object *body,
                           json_object **ret, api_error_t *err);
/* Moves up to max (1..SBX_CLAIM_MAX) of the worker's leased operations to
 * running, in turns by tenant, and returns them as assignments:
 * {"assignments":[…]} and *ret_n. A tenant's operations are taken only
 * while it runs fewer than its cap on the worker (the tighter of
 * tenant_cap, the worker's worker_tenant_executors_percent share, 0: none,
 * and its policy's max_executors_per_worker); its deletes always are (one
 * may be what ends its long commands). The others stay leased. poll_id
 * (NULL: none) is recorded on each: the poll that handed it out. */
int store_worker_claim(PGconn *c, const store_limits_t *lim, const char *worker_id, int max, int tenant_cap,
                       const char *poll_id, json_object **ret, int *ret_n, api_error_t *err);
/* The worker got no answer to the n (at most SBX_POLL_UNANSWERED_MAX + 1)
 * polls named (their ids checked by the caller): what they handed it out,
 * still running under its lease, never started; back to leased (with an
 * operation.leased event, reason answer_lost) for its next claim. *ret_n:
 * how many. */
int store_worker_unclaim(PGconn *c, const store_limits_t *lim, const char *worker_id, const char *const *polls,
                         int n, int *ret_n, api_error_t *err);
/* Of the n worker ids, which have leased operations waiting. */
int store_workers_with_leases(PGconn *c, const char *const *ids, int n, bool *ret_flags);
/* Applies a report; 409 stale_lease when the fencing token or state does not match. */
int store_worker_report(PGconn *c, const char *worker_id, json_object *body, json_object **ret, api_error_t *err);
int store_worker_list(PGconn *c, json_object **ret, api_error_t *err);
/* [{"version","workers":N}…]: how many workers not lost (ready or
 * draining) report each version, by version. 0 or SBX_EDB. */
int store_worker_versions(PGconn *c, json_object **ret);
/* The images of the ready workers, by name: an array of {"name", "workers":
 * [names], "isolation": [classes those workers offer]}, at most
 * SBX_IMAGES_LIST_MAX, by name. */
int store_images_list(PGconn *c, json_object **ret, api_error_t *err);
/* Drains (no new placements; its sandboxes live out their TTL) or resumes
 * the worker NAME; {"worker":…}. */
int store_worker_set_draining(PGconn *c, const char *name, bool drain, json_object **ret, api_error_t *err);
/* The installation's id (workers label their runtime objects with it). */
int store_cluster_id(PGconn *c, char ret[64]);

/* A worker name: 1 to SBX_MAX_NAME_BYTES letters, digits, '.', '_' or '-'. */
bool store_worker_name_valid(const char *s);

/* Whether worker token token_id may act as worker worker_id (heartbeat,
 * poll, report): the token's bound worker name must be the worker's. An
 * unbound token (from before bindings) binds here to the worker it last
 * registered (workers.token_id), atomically. Returns 0; SBX_EPERM (denied:
 * ret_name gets the worker's name, ret_bound the token's binding or "");
 * SBX_ENOTFOUND (no such worker); SBX_EDB. */
int store_worker_authorize(PGconn *c, const char *token_id, const char *worker_id,
                           char ret_name[SBX_MAX_NAME_BYTES + 1], char ret_bound[SBX_MAX_NAME_BYTES + 1]);

/* Writes the worker.identity_denied event (tenant-less: the admin's):
 * token_id tried to act as worker (a name or an id) and why. */
int store_worker_identity_denied_event(PGconn *c, const char *token_id, const char *worker, const char *why);

/* Reconcile passes. Each returns 0 or SBX_EDB and adds the rows it changed
 * to *ret_changed; ret_leased (place only) counts new leases (worker wake). */
int store_admit_pending(PGconn *c, int *ret_changed);
/* Whether any operation is pending (*ret_pending) or admitted
 * (*ret_admitted): one read of the active operations' index, so a kicked
 * round with nothing to do costs one statement. 0 or SBX_EDB. */
int store_ops_waiting(PGconn *c, bool *ret_pending, bool *ret_admitted);
int store_place_admitted(PGconn *c, const store_limits_t *lim, int *ret_changed, int *ret_leased);
int store_expire_leases(PGconn *c, const store_limits_t *lim, int *ret_changed);
int store_fail_overdue(PGconn *c, int *ret_changed);
int store_expire_ttls(PGconn *c, const store_limits_t *lim, int *ret_changed);
/* Routes past their expiry → removed. */
int store_expire_routes(PGconn *c, int *ret_changed);

/* What the route proxy needs to forward a request to route `name`. */
typedef struct route_target {
    char route_id[SBX_ID_MAX];
    char sandbox_id[SBX_ID_MAX];
    char tenant_id[SBX_ID_MAX];
    char worker_id[SBX_ID_MAX];
    int port;
    bool token_auth;
    char secret_hash[TOKEN_HASH_HEX];      /* token_auth only */
    char worker_address[256];              /* "" when the worker forwards no routes */
    char worker_token_hash[TOKEN_HASH_HEX]; /* signs grants; "" when unknown or revoked */
    int64_t max_worker_connections;        /* its tenant policy's (0: unset) */
    char unreachable[32];                  /* its worker is unreachable: why ("restarting", "no heartbeat"),
                                            * else "" */
    bool paused;                           /* the sandbox is paused (docs/pause.md): 503 until resumed */
} route_target_t;
/* The active, unexpired route `name` whose sandbox is running on a worker
 * that is not lost: 0, or SBX_ENOTFOUND, or SBX_EDB. */
int store_route_target(PGconn *c, const char *name, route_target_t *ret);
/* What the route proxy needs to forward to port of a running sandbox named
 * by its id (E2B's getHost, controller/proxy.c): as store_route_target,
 * route_id empty; *ret_routes_allowed is false when the tenant's policy has
 * routes: false. 0, SBX_ENOTFOUND (not running, or its worker lost),
 * SBX_EDB. */
int store_port_target(PGconn *c, const char *sandbox_id, int port, route_target_t *ret, bool *ret_routes_allowed);
/* ret_flags[i]: sandbox ids[i] is running. */
int store_sandboxes_running(PGconn *c, const char *const *ids, int n, bool *ret_flags);
/* ret_flags[i]: route names[i] is still active and unexpired. */
int store_routes_alive(PGconn *c, const char *const *names, int n, bool *ret_flags);
/* Workers silent for worker_timeout_seconds: unreachable (their sandboxes
 * stay running, shown unreachable, with their capacity); unreachable past
 * their lost_at (worker_lost_after_seconds): lost, their running sandboxes
 * lost and their capacity released. */
int store_mark_lost_workers(PGconn *c, const store_limits_t *lim, int *ret_changed);
/* *ret_heard: some worker's heartbeat was recorded within the last
 * within_ms (by any controller). 0 or SBX_EDB. */
int store_worker_heard_within(PGconn *c, int64_t within_ms, bool *ret_heard);
/* When worker_id is unreachable: 1, and ret says so, for a message ("its
 * worker W is unreachable (restarting since T; its sandboxes are lost at
 * T2 unless it returns)"); 0 when it is not; SBX_EDB. */
int store_worker_unreachable(PGconn *c, const char *worker_id, char *ret, size_t len);
/* A worker's last heartbeat said it stopped (it restarts): unreachable now,
 * the grace counted from now. 0 or SBX_EDB. */
int store_worker_stopped(PGconn *c, const store_limits_t *lim, const char *worker_id);
/* Sandboxes that should be gone whose last delete failed: a new delete. */
int store_retry_deletes(PGconn *c, const store_limits_t *lim, int *ret_changed);

/* What GET /v1/sandboxes/{id}/logs needs (store/logs.c). */
typedef struct logs_source {
    char phase[24];
    char worker_id[SBX_ID_MAX];            /* "" when never placed */
    char worker_state[16];
    char unreachable[400];                 /* worker_state unreachable: why and since when (else "") */
    char worker_address[256];              /* "" when the worker forwards nothing */
    char worker_token_hash[TOKEN_HASH_HEX]; /* signs grants; "" when unknown or revoked */
    char *output_tail;                     /* malloc'd; NULL when none was kept */
    char tenant_id[SBX_ID_MAX];            /* the sandbox's tenant: whose fair share a stream takes */
    policy_t caps;                         /* its policy's max_transfers, max_shells, max_log_streams and
                                            * max_worker_connections (the rest unset) */
} logs_source_t;
/* The sandbox in scope (tenant id, NULL for an admin): 0, SBX_ENOTFOUND
 * (also another tenant's), SBX_EDB or SBX_ENOMEM. Release with
 * store_logs_source_release. */
int store_sandbox_logs_source(PGconn *c, const char *scope, const char *sandbox_id, logs_source_t *ret);
void store_logs_source_release(logs_source_t *s);
/* For worker_id's export request of snapshot_id: only while a copy of it
 * is leased to that worker; src gets the worker holding it (its forwarder
 * and token hash, to sign a grant) and the snapshot's tenant, and
 * *ret_image_bytes its size (a microvm snapshot's with its memory: its
 * sandbox's memory size added). 403 no such copy; 503 the holder unreachable. */
int store_snapshot_export_source(PGconn *c, const char *worker_id, const char *snapshot_id, logs_source_t *src,
                                 int64_t *ret_image_bytes, api_error_t *err);
/* An event of the sandbox's (its tenant's), outside any state change:
 * what the data path did (files.uploaded, files.downloaded). Takes data's
 * reference. 0 or SBX_EDB. */
int store_sandbox_event(PGconn *c, const char *sandbox_id, const char *kind, json_object *data);

/* The NATS publisher (store/publish.c). */
/* Tries the leader's advisory lock lock_key on c (a session of its own).
 * When taken (*ret_led): LISTENs for new events and loads the cursor,
 * starting it at the newest event the first time ever (*ret_first).
 * 0 or SBX_EDB. */
int store_publisher_lead(PGconn *c, const char *lock_key, bool *ret_led, int64_t *ret_cursor, bool *ret_first);
/* The newest event id and the age in seconds of the oldest one after
 * cursor (0 when none). 0 or SBX_EDB. */
int store_publisher_lag(PGconn *c, int64_t cursor, int64_t *ret_newest, double *ret_age_seconds);
/* Moves the cursor to `cursor`, counting `skipped` events passed. 0 or SBX_EDB. */
int store_publisher_advance(PGconn *c, int64_t cursor, int64_t skipped);

typedef struct store_pub_event {
    int64_t id;
    const char *tenant;   /* NULL: a system event */
    const char *kind;
    bool expired;         /* older than the events retention */
    const char *payload;  /* the event as JSON text, as published */
} store_pub_event_t;
typedef struct store_pub_batch {
    store_pub_event_t ev[SBX_PUBLISH_BATCH];
    int n;
    PGresult *res;        /* owns the strings */
} store_pub_batch_t;
/* The events after cursor and at or below horizon, in id order, at most
 * SBX_PUBLISH_BATCH; expired when older than keep_seconds. 0 with *ret
 * (release with store_pub_batch_release), or SBX_EDB. */
int store_publish_read(PGconn *c, int64_t cursor, int64_t horizon, int64_t keep_seconds, store_pub_batch_t *ret);
void store_pub_batch_release(store_pub_batch_t *b);

/* The database snapshot /metrics shows (store/stats.c): Prometheus gauge
 * families of what exists now, by state, appended to out. 0, or -1 when a
 * query failed or out is full. */
int store_stats_render(PGconn *c, sbuf_t *out);

/* Rows one retention pass deleted, per table. */
typedef struct store_pruned {
    long long events, operations, sandboxes, routes, builds, network_log;
} store_pruned_t;

/* Retention: deletes events and network log entries older than
 * events_seconds, operations finished
 * more than operations_seconds ago, and deleted sandboxes (with their removed
 * routes) whose operations are all gone, plus routes removed that long ago
 * and template builds finished (and cleaned up) that long ago.
 * Each statement deletes at most SBX_RETENTION_BATCH rows in its own
 * transaction, skipping locked rows, at most SBX_RETENTION_MAX_BATCHES per
 * table; ret_pruned (zeroed first) says how many. Returns 0 or SBX_EDB. */
int store_prune(PGconn *c, int64_t operations_seconds, int64_t events_seconds, store_pruned_t *ret_pruned);

/* Folds the live counters' log into sandbox_usage (one controller at a
 * time; the others fold nothing). Adds the log rows folded to *ret_folded.
 * 0 or SBX_EDB. */
int store_usage_fold(PGconn *c, int *ret_folded);
/* Recounts the live sandboxes and corrects the counters where they differ
 * (they never should); *ret_corrected is the number of keys corrected. */
int store_usage_check(PGconn *c, long long *ret_corrected);

#endif
