/* What `sandbox logs` needs to know of a sandbox: its phase, where its
 * worker's forwarder listens (and the key to sign a grant for it), and the
 * output tail kept once its container is gone (migration 0008). */
#include "store.h"
#include "db.h"
#include "store_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int store_sandbox_logs_source(PGconn *c, const char *scope, const char *sandbox_id, logs_source_t *ret)
{
    memset(ret, 0, sizeof *ret);
    const char *p[] = { sandbox_id, scope };
    PGresult *r = db_exec(c,
                          "SELECT s.phase, coalesce(s.worker_id, ''), coalesce(w.state, ''), "
                          "  coalesce(w.route_address, ''), "
                          "  CASE WHEN " STORE_TOKEN_LIVE("t") " "
                          "       THEN coalesce(t.hash, '') ELSE '' END, "
                          "  s.output_tail, s.tenant_id, "
                          "  coalesce((tn.policy->>'max_transfers')::bigint, 0), "
                          "  coalesce((tn.policy->>'max_shells')::bigint, 0), "
                          "  coalesce((tn.policy->>'max_log_streams')::bigint, 0), "
                          "  coalesce((tn.policy->>'max_worker_connections')::bigint, 0) "
                          "FROM sandboxes s JOIN tenants tn ON tn.id = s.tenant_id "
                          "LEFT JOIN workers w ON w.id = s.worker_id "
                          "LEFT JOIN api_tokens t ON t.id = w.token_id "
                          "WHERE s.id = $1 AND ($2::text IS NULL OR s.tenant_id = $2)",
                          2, p);
    if (!r)
        return SBX_EDB;
    int rc = PQntuples(r) == 1 ? 0 : SBX_ENOTFOUND;
    if (rc == 0) {
        snprintf(ret->phase, sizeof ret->phase, "%s", db_get(r, 0, 0));
        snprintf(ret->worker_id, sizeof ret->worker_id, "%s", db_get(r, 0, 1));
        snprintf(ret->worker_state, sizeof ret->worker_state, "%s", db_get(r, 0, 2));
        snprintf(ret->worker_address, sizeof ret->worker_address, "%s", db_get(r, 0, 3));
        snprintf(ret->worker_token_hash, sizeof ret->worker_token_hash, "%s", db_get(r, 0, 4));
        snprintf(ret->tenant_id, sizeof ret->tenant_id, "%s", db_get(r, 0, 6));
        policy_init(&ret->caps);
        ret->caps.max_transfers = db_get_ll(r, 0, 7);
        ret->caps.max_shells = db_get_ll(r, 0, 8);
        ret->caps.max_log_streams = db_get_ll(r, 0, 9);
        ret->caps.max_worker_connections = db_get_ll(r, 0, 10);
        if (strcmp(ret->worker_state, "unreachable") == 0 &&
            store_worker_unreachable(c, ret->worker_id, ret->unreachable, sizeof ret->unreachable) < 0)
            rc = SBX_EDB;
        const char *tail = db_get(r, 0, 5);
        if (tail && *tail && !(ret->output_tail = strdup(tail)))
            rc = SBX_ENOMEM;
    }
    PQclear(r);
    return rc;
}

void store_logs_source_release(logs_source_t *s)
{
    if (!s)
        return;
    free(s->output_tail);
    s->output_tail = NULL;
}

int store_sandbox_event(PGconn *c, const char *sandbox_id, const char *kind, json_object *data)
{
    char *d = data ? jsonx_dump(data) : NULL;
    const char *p[] = { sandbox_id, kind, d ? d : "{}" };
    int r = db_run(c, "INSERT INTO events (tenant_id, kind, sandbox_id, data) "
                      "SELECT tenant_id, $2, id, $3::jsonb FROM sandboxes WHERE id = $1",
                   3, p);
    free(d);
    if (data)
        json_object_put(data);
    return r;
}
