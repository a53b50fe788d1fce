/* The reconcile passes: admit, place (AEGIS), lease expiry, deadlines, TTLs,
 * lost workers and retention. */
#include "store_int.h"
#include "place.h"

/* ---- reconcile passes ---- */

int store_admit_pending(PGconn *c, int *ret_changed)
{
    assert(op_transition_allowed(OP_PENDING, OP_ADMITTED));
    /* One statement: claim, move, and write the events rows atomically. */
    PGresult *r = db_exec(c,
                          "WITH claimed AS (SELECT id FROM operations WHERE state = 'pending' ORDER BY created_at "
                          "  LIMIT 100 FOR UPDATE SKIP LOCKED), "
                          "moved AS (UPDATE operations o SET state = 'admitted', updated_at = now() FROM claimed "
                          "  WHERE o.id = claimed.id AND o.state = 'pending' "
                          "  RETURNING o.id, o.tenant_id, o.sandbox_id, o.kind) "
                          "INSERT INTO events (tenant_id, kind, sandbox_id, operation_id, data) "
                          "SELECT tenant_id, 'operation.admitted', sandbox_id, id, "
                          "  jsonb_build_object('kind', kind, 'from', 'pending', 'to', 'admitted') FROM moved",
                          0, NULL);
    if (!r)
        return SBX_EDB;
    *ret_changed += store__cmd_rows(r);
    PQclear(r);
    return 0;
}

int store_ops_waiting(PGconn *c, bool *ret_pending, bool *ret_admitted)
{
    PGresult *r = db_exec(c,
                          "SELECT EXISTS (SELECT 1 FROM operations WHERE state = 'pending'), "
                          "EXISTS (SELECT 1 FROM operations WHERE state = 'admitted')",
                          0, NULL);
    if (!r)
        return SBX_EDB;
    *ret_pending = db_get_bool(r, 0, 0);
    *ret_admitted = db_get_bool(r, 0, 1);
    PQclear(r);
    return 0;
}

/* Ids of up to `limit` operations in `state`, oldest first (not locked: each
 * is then claimed in its own transaction with SKIP LOCKED). */
static PGresult *ops_in_state(PGconn *c, const char *where)
{
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT id FROM operations WHERE %s ORDER BY created_at LIMIT 100", where);
    return db_exec(c, sql, 0, NULL);
}

/* The same, taken in turns by tenant: every tenant's oldest, then every
 * tenant's second oldest, and so on, so one tenant's backlog does not hold
 * another's operations back (placement). */
static PGresult *ops_in_state_fair(PGconn *c, const char *where)
{
    char sql[640];
    snprintf(sql, sizeof sql,
             "SELECT id FROM (SELECT id, created_at, row_number() OVER (PARTITION BY tenant_id ORDER BY created_at) "
             "AS turn FROM operations WHERE %s) q ORDER BY turn, created_at LIMIT 100",
             where);
    return db_exec(c, sql, 0, NULL);
}

/* Fails an admitted operation with an error code, and its sandbox when it
 * is a create. Inside the caller's transaction. */
int store__op_fail_admitted(PGconn *c, const char *op_id, const char *kind, const char *sbx, const char *code,
                            const char *msg, json_object *placement)
{
    char *pl = placement ? jsonx_dump(placement) : NULL;
    const char *x[] = { code, msg, pl };
    int rc = store__op_cas(c, op_id, OP_ADMITTED, OP_FAILED,
                    pl ? "error_code = $4, error_message = $5, placement = $6::jsonb"
                       : "error_code = $4, error_message = $5",
                    pl ? 3 : 2, x, NULL);
    free(pl);
    if (rc < 0)
        return rc;
    if (strcmp(kind, "create") == 0)
        return store__sandbox_set_phase(c, sbx, PH_FAILED, NULL, 0, NULL);
    return 0;
}

static int op_lease(PGconn *c, const store_limits_t *lim, const char *op_id, const char *worker_id,
                    json_object *placement)
{
    char lease[24];
    snprintf(lease, sizeof lease, "%lld", (long long)lim->lease_seconds);
    char *pl = placement ? jsonx_dump(placement) : NULL;
    const char *x[] = { worker_id, lease, pl };
    int rc = store__op_cas(c, op_id, OP_ADMITTED, OP_LEASED,
                    "attempt = attempt + 1, lease_worker_id = $4, "
                    "lease_expires_at = now() + make_interval(secs => $5::bigint), placement = $6::jsonb",
                    3, x, NULL);
    free(pl);
    return rc;
}

/* What place_load read for one create. The workers' strings point into
 * rows; release with place_loaded_release. */
typedef struct place_loaded {
    place_input_t in;
    kv_list_t selector;
    char snapshot[SBX_ID_MAX]; /* the spec's from ("" none) */
    char volume[SBX_ID_MAX];   /* the spec's first volume ("" none) */
    PGresult *rows;
} place_loaded_t;

static void place_loaded_release(place_loaded_t *l)
{
    for (int i = 0; i < l->in.n; i++)
        if (l->in.ws[i].labels)
            json_object_put(l->in.ws[i].labels);
    free(l->in.ws);
    PQclear(l->rows);
    kv_list_release(&l->selector);
}

/* Whether the worker holds the create's snapshot: a column after
 * PLACE_BACKLOG_COL. */
#define PLACE_SNAPSHOT_COL 15
/* Row i of place_load's worker query → an AEGIS worker. */
static void place_worker_from_row(const PGresult *r, int i, aegis_worker_t *w)
{
    w->id = db_get(r, i, 0);
    w->name = db_get(r, i, 1);
    w->state = db_get(r, i, 2);
    w->fresh = db_get_bool(r, i, 3);
    w->labels = store__parse_json_text(db_get(r, i, 4));
    w->classes = place_classes_parse(db_get(r, i, 5));
    json_object *nets = store__parse_json_text(db_get(r, i, 6));
    place_networks_parse(nets, w->networks);
    if (nets)
        json_object_put(nets);
    w->cap_cpu = db_get_ll(r, i, 7);
    w->cap_mem = db_get_ll(r, i, 8);
    w->free_cpu = db_get_ll(r, i, 9);
    w->free_mem = db_get_ll(r, i, 10);
    w->free_slots = db_get_ll(r, i, 11);
    w->has_image = db_get_bool(r, i, 12);
    w->tenant_sandboxes = db_get_ll(r, i, 13);
    w->holds_snapshot = db_get_bool(r, i, PLACE_SNAPSHOT_COL);
    w->holds_volumes = db_get_bool(r, i, PLACE_SNAPSHOT_COL + 1);
}

/* Loads what placing a create reads: the request (from the sandbox's
 * class, spec and size) and every worker not lost, with its free room, its
 * image and the tenant's sandboxes on it (and, on every row, whether
 * creates wait admitted: PLACE_BACKLOG_COL). 0, SBX_EDB or SBX_ENOMEM. */
#define PLACE_BACKLOG_COL 14
static int place_load(PGconn *c, const store_limits_t *lim, const char *tenant_id, const char *iso_text,
                      const char *spec_text, int64_t cpu, int64_t mem, place_loaded_t *ret)
{
    memset(ret, 0, sizeof *ret);
    aegis_request_t *rq = &ret->in.rq;
    rq->need = ISO_CONTAINER;
    rq->network = NET_NONE;
    rq->cpu = cpu;
    rq->mem = mem;
    isolation_parse(iso_text, &rq->need);
    json_object *spec = store__parse_json_text(spec_text);
    const char *image = jsonx_get_str(spec, "image");
    const char *net = jsonx_get_str(spec, "network");
    if (net)
        net_mode_parse(net, &rq->network);
    rq->egress_rules = rq->network == NET_OPEN && jsonx_get_obj(spec, "egress") != NULL;
    json_object *sel = NULL;
    api_error_t ignored;
    if (spec && json_object_object_get_ex(spec, "selector", &sel))
        kv_list_from_json(sel, "selector", false, SBX_MAX_LABELS, &ret->selector, &ignored);
    rq->selector = &ret->selector;
    char ref[SBX_MAX_IMAGE_BYTES + 16];
    aegis_image_ref(image ? image : "", ref, sizeof ref);
    const char *from = jsonx_get_str(spec, "from");
    if (from && *from) {
        snprintf(ret->snapshot, sizeof ret->snapshot, "%s", from);
        rq->snapshot = ret->snapshot;
    }
    json_object *vols = jsonx_get_arr(spec, "volumes");
    char *vols_text = NULL;
    if (vols && json_object_array_length(vols) > 0) {
        const char *v0 = jsonx_get_str(json_object_array_get_idx(vols, 0), "volume");
        snprintf(ret->volume, sizeof ret->volume, "%s", v0 ? v0 : "?");
        rq->volume = ret->volume;
        vols_text = jsonx_dump(vols);
    }
    json_object_put(spec);

    char tmo[24];
    snprintf(tmo, sizeof tmo, "%lld", (long long)lim->worker_timeout_seconds);
    const char *p[] = { tmo, ref, tenant_id, ret->snapshot[0] ? ret->snapshot : NULL, vols_text };
    ret->rows = db_exec(c,
                        "SELECT w.id, w.name, w.state, w.last_heartbeat > now() - make_interval(secs => $1::bigint), "
                        "  w.labels::text, array_to_string(w.isolation, ','), w.networks::text, w.cpu_millis, "
                        "  w.memory_mib, w.cpu_millis - w.alloc_cpu_millis, w.memory_mib - w.alloc_memory_mib, "
                        "  w.slots - w.alloc_slots, w.images ? $2, coalesce(sp.placed, 0), "
                        /* whether creates wait admitted (a backlog the
                         * loop places first), once for the statement */
                        "  EXISTS (SELECT 1 FROM operations WHERE state = 'admitted' AND kind = 'create'), "
                        /* holds the snapshot the create starts from (PLACE_SNAPSHOT_COL) */
                        "  $4::text IS NOT NULL AND EXISTS (SELECT 1 FROM snapshots sn WHERE sn.id = $4 "
                        "    AND sn.deleted_at IS NULL AND sn.ready_at IS NOT NULL AND (sn.worker_id = w.id OR EXISTS "
                        "      (SELECT 1 FROM snapshot_copies sc WHERE sc.snapshot_id = sn.id AND sc.worker_id = w.id "
                        "        AND sc.ready_at IS NOT NULL))), "
                        /* can hold the create's volumes: none lives elsewhere */
                        "  w.volumes AND NOT EXISTS (SELECT 1 FROM volumes vo WHERE vo.worker_id <> w.id AND vo.id IN "
                        "    (SELECT m->>'volume' FROM jsonb_array_elements(coalesce($5::jsonb, '[]'::jsonb)) m)) "
                        /* the tenant's sandboxes per worker (spread), from its
                         * live counters read once for all workers, not once
                         * per worker */
                        "FROM workers w LEFT JOIN (SELECT worker_id, sum(placed)::bigint AS placed FROM ("
                        "    SELECT worker_id, placed FROM sandbox_usage WHERE tenant_id = $3 AND worker_id <> '' "
                        "    UNION ALL SELECT worker_id, placed FROM sandbox_usage_log "
                        "    WHERE tenant_id = $3 AND worker_id <> '') n GROUP BY worker_id) sp ON sp.worker_id = w.id "
                        "WHERE w.state <> 'lost' AND w.stopping_at IS NULL ORDER BY w.name LIMIT 1000",
                        5, p);
    free(vols_text);
    if (!ret->rows) {
        place_loaded_release(ret);
        return SBX_EDB;
    }
    int n = PQntuples(ret->rows);
    ret->in.ws = calloc((size_t)(n ? n : 1), sizeof *ret->in.ws);
    if (!ret->in.ws) {
        place_loaded_release(ret);
        return SBX_ENOMEM;
    }
    ret->in.n = n;
    for (int i = 0; i < n; i++)
        place_worker_from_row(ret->rows, i, &ret->in.ws[i]);
    return 0;
}

/* Takes rq's cpu, memory and a slot of worker_id, if it is ready, not
 * stopping and has them: *ret_got. 0 or SBX_EDB. */
static int place_take_room(PGconn *c, const char *worker_id, const aegis_request_t *rq, bool *ret_got)
{
    char cpus[24], mems[24];
    snprintf(cpus, sizeof cpus, "%lld", (long long)rq->cpu);
    snprintf(mems, sizeof mems, "%lld", (long long)rq->mem);
    const char *q[] = { worker_id, cpus, mems };
    return store__one_row(c,
                          "UPDATE workers SET alloc_cpu_millis = alloc_cpu_millis + $2, "
                          "  alloc_memory_mib = alloc_memory_mib + $3, alloc_slots = alloc_slots + 1, "
                          "  updated_at = now() "
                          "WHERE id = $1 AND state = 'ready' AND stopping_at IS NULL "
                          "  AND alloc_cpu_millis + $2 <= cpu_millis AND alloc_memory_mib + $3 <= memory_mib "
                          "  AND alloc_slots + 1 <= slots RETURNING id",
                          3, q, ret_got);
}

/* place_commit's answer when the chosen worker's room went meanwhile. */
#define PLACE_ROOM_GONE 2

/* Applies a decision in the caller's transaction: the refusal, the reasons
 * it waits, or the allocation, the lease and the scheduled phase. Returns
 * 1 when leased or refused, 0 when it waits, PLACE_ROOM_GONE, or < 0. */
static int place_commit(PGconn *c, const store_limits_t *lim, const char *op_id, const char *sbx,
                        const char *spec_text, const place_input_t *in, const place_decision_t *d)
{
    int rc;
    if (d->action == PLACE_REFUSE) {
        rc = store__op_fail_admitted(c, op_id, "create", sbx, "isolation_unavailable", d->summary, d->placement);
        return rc == 0 ? 1 : rc;
    }
    if (d->action == PLACE_WAIT) {
        /* Keep why it waits where `sandbox get` shows it; written only
         * when the explanation changes. */
        char *pt = jsonx_dump(d->placement);
        const char *q[] = { op_id, pt };
        rc = db_run(c, "UPDATE operations SET placement = $2::jsonb WHERE id = $1 AND state = 'admitted' "
                       "AND placement IS DISTINCT FROM $2::jsonb", 2, q);
        free(pt);
        return rc < 0 ? rc : 0;
    }
    const aegis_worker_t *k = &in->ws[d->worker];
    /* Its volumes live there from now on (or one went elsewhere meanwhile:
     * not this worker then). */
    int pin = in->rq.volume ? store__volumes_pin(c, spec_text, k->id) : 1;
    if (pin <= 0)
        return pin < 0 ? SBX_EDB : PLACE_ROOM_GONE;
    bool got = false;
    if (place_take_room(c, k->id, &in->rq, &got) < 0)
        return SBX_EDB;
    if (!got)
        return PLACE_ROOM_GONE;
    rc = op_lease(c, lim, op_id, k->id, d->placement);
    if (rc < 0)
        return rc;
    const char *y[] = { k->id, isolation_name(d->run_as) };
    rc = store__sandbox_set_phase(c, sbx, PH_SCHEDULED, "worker_id = $3, allocated = true, isolation = $4", 2, y);
    return rc == 0 ? 1 : rc;
}

/* Placement of a create through AEGIS: load, decide, commit. Returns 1
 * when leased or refused, 0 when it must wait (the reasons are kept on the
 * operation), negative on error. */
/* The summary of a waiting create whose snapshot is being copied for it. */
static int place_copy_summary(place_decision_t *wait, const char *snapshot, const char *worker, const char *copy_op)
{
    snprintf(wait->summary, sizeof wait->summary,
             "waiting: no worker holding snapshot %s may take it; it is being copied to %s (operation %s), "
             "which then will", snapshot, worker, copy_op);
    if (wait->placement)
        jsonx_add_str(wait->placement, "summary", wait->summary);
    return 0;
}

/* A create from a snapshot that waits because no worker holding it may
 * take it (full, draining, away, or not what its selector asks): the
 * snapshot is copied to the worker that would take it were the snapshot
 * there (an operation of its own, in this transaction), and the create is
 * placed there once the copy is ready. Only while nothing else copies the
 * snapshot, from a maker that can send it (fresh, ready or draining), never
 * twice to one worker (a failed copy is left to an operator). 0 or SBX_EDB. */
static int place_auto_copy(PGconn *c, const store_limits_t *lim, place_loaded_t *l, const char *op_id,
                           const char *tenant_id, place_decision_t *wait)
{
    char tmo[24];
    snprintf(tmo, sizeof tmo, "%lld", (long long)lim->worker_timeout_seconds);
    const char *p[] = { l->snapshot, tmo };
    PGresult *r = db_exec(c,
                          "SELECT sn.worker_id, sn.sandbox_id, sn.isolation, "
                          "  w.state IN ('ready', 'draining') AND w.stopping_at IS NULL "
                          "    AND w.last_heartbeat > now() - make_interval(secs => $2::bigint), "
                          "  cp.op_id, cp.worker_name "
                          "FROM snapshots sn JOIN workers w ON w.id = sn.worker_id "
                          /* a copy of it on its way, if any */
                          "LEFT JOIN LATERAL (SELECT o.id AS op_id, cw.name AS worker_name FROM snapshot_copies sc "
                          "    JOIN operations o ON o.id = sc.operation_id JOIN workers cw ON cw.id = sc.worker_id "
                          "    WHERE sc.snapshot_id = sn.id AND sc.ready_at IS NULL "
                          "    AND o.state NOT IN ('failed', 'cancelled', 'succeeded') LIMIT 1) cp ON true "
                          "WHERE sn.id = $1 AND sn.deleted_at IS NULL AND sn.ready_at IS NOT NULL",
                          2, p);
    if (!r)
        return SBX_EDB;
    bool go = PQntuples(r) == 1 && db_get_bool(r, 0, 3);
    if (go && !PQgetisnull(r, 0, 4)) { /* a copy on its way: the create's wait says so */
        int rc = place_copy_summary(wait, l->snapshot, db_get(r, 0, 5), db_get(r, 0, 4));
        PQclear(r);
        return rc;
    }
    char maker[SBX_ID_MAX] = "", source_sbx[SBX_ID_MAX] = "", copy_op[SBX_ID_MAX] = "", iso[16] = "";
    if (go) {
        snprintf(maker, sizeof maker, "%s", db_get(r, 0, 0));
        snprintf(source_sbx, sizeof source_sbx, "%s", db_get(r, 0, 1));
        snprintf(iso, sizeof iso, "%s", db_get(r, 0, 2));
    }
    PQclear(r);
    if (!go)
        return 0;
    /* where it would go were the snapshot everywhere */
    bool *held = calloc((size_t)(l->in.n ? l->in.n : 1), sizeof *held);
    if (!held)
        return 0;
    for (int i = 0; i < l->in.n; i++) {
        held[i] = l->in.ws[i].holds_snapshot;
        l->in.ws[i].holds_snapshot = true;
    }
    place_decision_t d;
    memset(&d, 0, sizeof d);
    int rc = place_decide(&l->in, &d);
    for (int i = 0; i < l->in.n; i++)
        l->in.ws[i].holds_snapshot = held[i];
    int target = rc == 0 && d.action == PLACE_LEASE && !held[d.worker] ? d.worker : -1;
    free(held);
    place_decision_release(&d);
    if (target < 0)
        return 0;
    const aegis_worker_t *w = &l->in.ws[target];
    const char *q[] = { l->snapshot, w->id };
    bool tried = false;
    if (store__one_row(c, "SELECT 1 FROM snapshot_copies WHERE snapshot_id = $1 AND worker_id = $2", 2, q,
                       &tried) < 0)
        return SBX_EDB;
    if (tried)
        return 0;
    char why[200];
    snprintf(why, sizeof why, "a create from snapshot %s (operation %s) that no worker holding it may take goes here",
             l->snapshot, op_id);
    json_object *cop = NULL;
    if (store__snapshot_copy_insert(c, lim, l->snapshot, iso, tenant_id, source_sbx, w->id, w->name, maker, NULL, why,
                                    &cop) < 0)
        return SBX_EDB;
    snprintf(copy_op, sizeof copy_op, "%s", jsonx_get_str(cop, "id") ? jsonx_get_str(cop, "id") : "?");
    json_object_put(cop);
    store__count_placed_now("snapshot_copy");
    return place_copy_summary(wait, l->snapshot, w->name, copy_op);
}

static int place_create(PGconn *c, const store_limits_t *lim, const char *op_id, const char *sbx,
                        const char *tenant_id, const char *iso_text, const char *spec_text, int64_t cpu, int64_t mem)
{
    place_loaded_t l;
    int rc = place_load(c, lim, tenant_id, iso_text, spec_text, cpu, mem, &l);
    if (rc < 0)
        return rc;
    do {
        place_decision_t d;
        rc = place_decide(&l.in, &d);
        if (rc < 0)
            break;
        if (d.action == PLACE_WAIT && l.snapshot[0] && place_auto_copy(c, lim, &l, op_id, tenant_id, &d) < 0) {
            place_decision_release(&d);
            rc = SBX_EDB;
            break;
        }
        rc = place_commit(c, lim, op_id, sbx, spec_text, &l.in, &d);
        /* Another controller took the room meanwhile: decide again without
         * this worker's stale numbers. */
        if (rc == PLACE_ROOM_GONE)
            l.in.ws[d.worker].free_slots = 0;
        place_decision_release(&d);
    } while (rc == PLACE_ROOM_GONE);
    place_loaded_release(&l);
    return rc;
}

int store__create_placed(PGconn *c, const store_limits_t *lim, const create_req_t *req, const char *spec_text,
                         const char *class_text, const char *sbx_id, const char *op_id, json_object **ret_op)
{
    place_loaded_t l;
    int rc = place_load(c, lim, req->tenant_id, isolation_name(req->isolation), spec_text, req->spec->cpu_millis,
                        req->spec->memory_mib, &l);
    if (rc < 0)
        return rc;
    /* Creates waiting admitted go first, the loop's way (with no worker
     * at all this one waits anyway). */
    if (l.in.n > 0 && db_get_bool(l.rows, 0, PLACE_BACKLOG_COL)) {
        place_loaded_release(&l);
        return 0;
    }
    place_decision_t d;
    memset(&d, 0, sizeof d);
    int worker = -1;
    while (worker < 0) {
        if ((rc = place_decide(&l.in, &d)) < 0)
            break;
        if (d.action != PLACE_LEASE) {
            rc = 0; /* waits or is refused: the caller's way, through the loop's code */
            break;
        }
        bool got = false;
        int pin = l.in.rq.volume ? store__volumes_pin(c, spec_text, l.in.ws[d.worker].id) : 1;
        if (pin < 0 || (pin > 0 && place_take_room(c, l.in.ws[d.worker].id, &l.in.rq, &got) < 0)) {
            rc = SBX_EDB;
            break;
        }
        if (got) {
            worker = d.worker;
            break;
        }
        /* Another controller took the room meanwhile: decide again
         * without this worker's stale numbers. */
        l.in.ws[d.worker].free_slots = 0;
        place_decision_release(&d);
        memset(&d, 0, sizeof d);
    }
    if (worker < 0) {
        place_decision_release(&d);
        place_loaded_release(&l);
        return rc;
    }
    /* Leased to it: the sandbox (scheduled there), its create (leased,
     * attempt 1) and their events in the order the steps one by one would
     * have written them, in one statement. */
    const aegis_worker_t *k = &l.in.ws[worker];
    json_object *ev = json_object_new_array();
    json_object_array_add(ev, store__event_json("sandbox.pending", NULL, store__sandbox_pending_data(req)));
    op_insert_t oi = { .id = op_id, .kind = "create", .state = OP_LEASED, .worker_name = k->name };
    store__op_insert_events(&oi, ev);
    json_object *scheduled = json_object_new_object();
    jsonx_add_str(scheduled, "worker", k->name);
    jsonx_add_str(scheduled, "isolation", isolation_name(d.run_as));
    json_object_array_add(ev, store__event_json("sandbox.scheduled", NULL, scheduled));
    char *ev_text = jsonx_dump(ev), *pl = jsonx_dump(d.placement);
    json_object_put(ev);
    char cpu[24], mem[24], ttl[24], deadline[24], lease[24];
    snprintf(cpu, sizeof cpu, "%lld", (long long)req->spec->cpu_millis);
    snprintf(mem, sizeof mem, "%lld", (long long)req->spec->memory_mib);
    snprintf(ttl, sizeof ttl, "%lld", (long long)req->spec->ttl_seconds);
    snprintf(deadline, sizeof deadline, "%lld", (long long)lim->deadline_seconds);
    snprintf(lease, sizeof lease, "%lld", (long long)lim->lease_seconds);
    const char *p[] = { sbx_id, req->tenant_id, spec_text, isolation_name(d.run_as), cpu, mem, ttl,
                        req->created_by, class_text, k->id, op_id, req->idempotency_key, req->request_hash,
                        deadline, lease, pl, ev_text, req->name };
    /* the transaction's last statement: the COMMIT goes with it */
    db_commit_with_next(c);
    PGresult *r = store__exec_cols(
        c, &store__t_op,
        "WITH s AS (INSERT INTO sandboxes (id, tenant_id, spec, desired_state, phase, isolation, cpu_millis, "
        "  memory_mib, ttl_seconds, created_by, classification, worker_id, allocated, name) "
        "  VALUES ($1, $2, $3::jsonb, 'running', 'scheduled', $4, $5, $6, $7, $8, $9::jsonb, $10, true, $18) "
        "  RETURNING id), "
        "o AS (INSERT INTO operations AS o (id, tenant_id, sandbox_id, kind, state, idempotency_key, request_hash, "
        "  request, deadline, created_by, attempt, lease_worker_id, lease_expires_at, leased_at, placement) "
        "  SELECT $11, $2, s.id, 'create', 'leased', $12, $13, $3::jsonb, "
        "  now() + make_interval(secs => $14::bigint), $8, 1, $10, now() + make_interval(secs => $15::bigint), "
        "  now(), $16::jsonb FROM s RETURNING ",
        "), e AS (" STORE_EVENTS_INSERT("$2", "$1", "$17") ") SELECT * FROM o", 18, p);
    free(ev_text);
    free(pl);
    place_decision_release(&d);
    place_loaded_release(&l);
    if (!r || PQntuples(r) != 1) {
        PQclear(r);
        return SBX_EDB;
    }
    *ret_op = store__row_json(&store__t_op, r, 0);
    PQclear(r);
    store__op_observe("create", OP_LEASED, "0", NULL, NULL);
    store__count_placed_now("create");
    return 1;
}

/* The admitted operation and its sandbox, as store__place_one reads them. */
typedef struct place_op {
    char kind[16], sbx[SBX_ID_MAX], phase[24], worker[SBX_ID_MAX], iso[16], wstate[16];
    char wname[SBX_MAX_NAME_BYTES + 1], tenant_id[SBX_ID_MAX];
    int64_t cpu, mem;
    char *spec_text; /* malloc'd */
} place_op_t;

/* Locks the admitted operation and its sandbox (SKIP LOCKED). 0 with *ret
 * filled, SBX_ENOTFOUND when it is no longer admitted or is locked,
 * SBX_EDB, SBX_ENOMEM. */
static int place_op_load(PGconn *c, const char *op_id, place_op_t *ret)
{
    const char *p[] = { op_id };
    PGresult *r = db_exec(c,
                          "SELECT o.kind, o.sandbox_id, s.phase, coalesce(s.worker_id, ''), s.isolation, "
                          "  s.cpu_millis, s.memory_mib, " STORE_WORKER_GO_STATE ", coalesce(w.name, ''), "
                          "  s.tenant_id, s.spec::text "
                          "FROM operations o JOIN sandboxes s ON s.id = o.sandbox_id "
                          "LEFT JOIN workers w ON w.id = s.worker_id "
                          "WHERE o.id = $1 AND o.state = 'admitted' FOR NO KEY UPDATE OF o, s SKIP LOCKED",
                          1, p);
    if (!r)
        return SBX_EDB;
    if (PQntuples(r) != 1) {
        PQclear(r);
        return SBX_ENOTFOUND;
    }
    snprintf(ret->kind, sizeof ret->kind, "%s", db_get(r, 0, 0));
    snprintf(ret->sbx, sizeof ret->sbx, "%s", db_get(r, 0, 1));
    snprintf(ret->phase, sizeof ret->phase, "%s", db_get(r, 0, 2));
    snprintf(ret->worker, sizeof ret->worker, "%s", db_get(r, 0, 3));
    snprintf(ret->iso, sizeof ret->iso, "%s", db_get(r, 0, 4));
    ret->cpu = db_get_ll(r, 0, 5);
    ret->mem = db_get_ll(r, 0, 6);
    snprintf(ret->wstate, sizeof ret->wstate, "%s", db_get(r, 0, 7));
    snprintf(ret->wname, sizeof ret->wname, "%s", db_get(r, 0, 8));
    snprintf(ret->tenant_id, sizeof ret->tenant_id, "%s", db_get(r, 0, 9));
    ret->spec_text = strdup(db_get(r, 0, 10) ? db_get(r, 0, 10) : "{}");
    PQclear(r);
    return ret->spec_text ? 0 : SBX_ENOMEM;
}

json_object *store__placement_here(const char *worker_name, const char *why)
{
    json_object *pl = json_object_new_object();
    jsonx_add_str(pl, "worker", worker_name);
    json_object *rs = json_object_new_array();
    json_object_array_add(rs, json_object_new_string(why));
    jsonx_add(pl, "reasons", rs);
    return pl;
}

/* Leases op to the worker its sandbox is on, the placement saying why. */
static int lease_where_it_runs(PGconn *c, const store_limits_t *lim, const char *op_id, const place_op_t *o,
                               const char *why)
{
    json_object *pl = store__placement_here(o->wname, why);
    int rc = op_lease(c, lim, op_id, o->worker, pl);
    json_object_put(pl);
    return rc;
}

/* A delete or an exec: they run where the sandbox is. Returns 1 when the
 * operation finished or failed, 2 when leased, 0 when it waits. */
static int place_on_worker(PGconn *c, const store_limits_t *lim, const char *op_id, const place_op_t *o)
{
    /* Wait while another operation of the sandbox is in a worker's hands. */
    PGresult *busy = db_exec(c, "SELECT count(*) FROM operations WHERE sandbox_id = $1 AND id <> $2 "
                                "AND state IN ('leased', 'running') AND kind <> 'exec'",
                             2, (const char *const[]){ o->sbx, op_id });
    if (!busy)
        return SBX_EDB;
    bool blocked = db_get_ll(busy, 0, 0) > 0;
    PQclear(busy);
    int rc;
    if (strcmp(o->kind, "delete") == 0) {
        if (blocked)
            return 0;
        if (!*o->worker || strcmp(o->wstate, "lost") == 0 || strcmp(o->phase, "pending") == 0) {
            /* Nothing was ever started (or its worker is gone): the
             * controller completes the delete by itself. */
            rc = store__op_cas(c, op_id, OP_ADMITTED, OP_SUCCEEDED, NULL, 0, NULL, NULL);
            if (rc == 0)
                rc = store__sandbox_set_phase(c, o->sbx, PH_DELETED, "deleted_at = now()", 0, NULL);
            if (rc == 0)
                rc = store__sandbox_release_allocation(c, o->sbx);
            return rc == 0 ? 1 : rc;
        }
        bool away = strcmp(o->wstate, "unreachable") == 0 || strcmp(o->wstate, "stopping") == 0;
        /* Its worker unreachable (or stopping): deleting, and waits for the
         * worker's return (then leased there) or its loss (then done here). */
        rc = away ? 0 : lease_where_it_runs(c, lim, op_id, o, STORE_WHY_DELETE_HERE);
        if (rc == 0 && strcmp(o->phase, "deleting") != 0)
            rc = store__sandbox_set_phase(c, o->sbx, PH_DELETING, NULL, 0, NULL);
        return rc < 0 ? rc : away ? 0 : 2;
    }
    const char *need = strcmp(o->kind, "resume") == 0 ? "paused" : "running";
    if (strcmp(o->phase, need) != 0 || !*o->worker) {
        char msg[128];
        snprintf(msg, sizeof msg, "sandbox %s is %s; %s needs a %s sandbox", o->sbx, o->phase, o->kind, need);
        rc = store__op_fail_admitted(c, op_id, o->kind, o->sbx, "conflict", msg, NULL);
        return rc == 0 ? 1 : rc;
    }
    if (strcmp(o->wstate, "unreachable") == 0 || strcmp(o->wstate, "stopping") == 0) {
        char why[400], msg[512];
        sbx_worker_t w = { 0 };
        snprintf(w.id, sizeof w.id, "%s", o->worker);
        snprintf(w.state, sizeof w.state, "%s", o->wstate);
        snprintf(w.name, sizeof w.name, "%s", o->wname);
        int u = store__worker_away(c, &w, why, sizeof why);
        if (u < 0)
            return u;
        snprintf(msg, sizeof msg, "cannot %s in sandbox %s now: %s; retry once it is back", o->kind, o->sbx, why);
        rc = store__op_fail_admitted(c, op_id, o->kind, o->sbx, "unavailable", msg, NULL);
        return rc == 0 ? 1 : rc;
    }
    rc = lease_where_it_runs(c, lim, op_id, o, STORE_WHY_EXEC_HERE);
    return rc == 0 ? 2 : rc;
}

/* Admission and placement on the request path: in the transaction that
 * inserted op_id as pending, with its events, and that holds its sandbox
 * row (a create: the new row and its tenant's), moves it on as the loop's
 * admit and place passes would, through the same code and checks. The
 * worker's parked poll hears of the lease from this transaction's own
 * commit (the events NOTIFY), without a turn of the reconcile loop. A
 * create is placed here only while no other create waits admitted: one
 * that arrives behind a backlog (full workers) stays pending for the loop,
 * which places the backlog oldest first with tenants in turns. Returns 1
 * when it moved past admitted (leased, finished or failed), 0 when it
 * waits for the loop (a delete behind its sandbox's create, a create with
 * no room or behind others), < 0 on error (the caller rolls back). */
int store__place_now(PGconn *c, const store_limits_t *lim, const char *op_id, bool create)
{
    if (create) {
        bool backlog = false;
        if (store__one_row(c, "SELECT 1 FROM operations WHERE state = 'admitted' AND kind = 'create' LIMIT 1", 0,
                           NULL, &backlog) < 0)
            return SBX_EDB;
        if (backlog)
            return 0;
    }
    int rc = store__op_cas(c, op_id, OP_PENDING, OP_ADMITTED, NULL, 0, NULL, NULL);
    if (rc < 0)
        return rc;
    place_op_t o;
    rc = place_op_load(c, op_id, &o);
    if (rc < 0)
        return rc == SBX_ENOTFOUND ? SBX_ECONFLICT : rc;
    if (strcmp(o.kind, "create") == 0)
        rc = place_create(c, lim, op_id, o.sbx, o.tenant_id, o.iso, o.spec_text, o.cpu, o.mem);
    else if (strcmp(o.kind, "exec") == 0 || strcmp(o.kind, "delete") == 0 || strcmp(o.kind, "snapshot") == 0 ||
             strcmp(o.kind, "pause") == 0 || strcmp(o.kind, "resume") == 0 || strcmp(o.kind, "network") == 0)
        rc = place_on_worker(c, lim, op_id, &o);
    else if (strcmp(o.kind, "snapshot_copy") == 0)
        /* leased to the worker it is for, and that worker let the lease
         * go (it stopped or was lost): not moved elsewhere, failed; a new
         * copy may be asked */
        rc = store__op_fail_admitted(c, op_id, o.kind, o.sbx, "unavailable",
                                     "the worker taking the copy stopped before it finished; ask for the copy again",
                                     NULL) < 0 ? SBX_EDB : 1;
    else
        rc = 0;
    if (rc > 0)
        store__count_placed_now(o.kind);
    free(o.spec_text);
    return rc < 0 ? rc : rc > 0;
}

void store__count_placed_now(const char *kind)
{
    char labels[48];
    pthread_once(&store__metrics_once, store__metrics_init);
    metrics_add(store__m_placed_now, metrics_labels(labels, sizeof labels, "kind", kind, NULL), 1);
}

/* One admitted operation in its own transaction. Returns 1 when it moved
 * (leased, failed or finished), 2 when leased, 0 when it waits. */
int store__place_one(PGconn *c, const store_limits_t *lim, const char *op_id)
{
    if (db_begin(c) < 0)
        return SBX_EDB;
    place_op_t o;
    int rc = place_op_load(c, op_id, &o);
    if (rc < 0) {
        db_rollback(c);
        return rc == SBX_ENOTFOUND ? 0 : rc;
    }
    if (strcmp(o.kind, "create") == 0) {
        rc = place_create(c, lim, op_id, o.sbx, o.tenant_id, o.iso, o.spec_text, o.cpu, o.mem);
        if (rc > 0) {
            /* place_create leased or failed it; tell which for the wake-up. */
            const char *q[] = { op_id };
            PGresult *s = db_exec(c, "SELECT state FROM operations WHERE id = $1", 1, q);
            if (s && PQntuples(s) == 1 && strcmp(db_get(s, 0, 0), "leased") == 0)
                rc = 2;
            PQclear(s);
        }
    } else if (strcmp(o.kind, "share") == 0 || strcmp(o.kind, "unshare") == 0) {
        /* The controller completes these by itself. */
        rc = store__place_route_op(c, op_id, o.kind, o.sbx, o.phase, o.tenant_id);
    } else {
        rc = place_on_worker(c, lim, op_id, &o);
    }
    free(o.spec_text);
    if (rc < 0) {
        db_rollback(c);
        return rc == SBX_ECONFLICT ? 0 : rc;
    }
    /* rc 0 (waiting) commits too: the reasons it waits may have changed. */
    if (db_commit(c) < 0) {
        db_rollback(c);
        return SBX_EDB;
    }
    return rc;
}

int store_place_admitted(PGconn *c, const store_limits_t *lim, int *ret_changed, int *ret_leased)
{
    PGresult *r = ops_in_state_fair(c, "state = 'admitted'");
    if (!r)
        return SBX_EDB;
    int rc = 0;
    for (int i = 0; i < PQntuples(r); i++) {
        int m = store__place_one(c, lim, db_get(r, i, 0));
        if (m < 0) {
            rc = m;
            break;
        }
        if (m > 0)
            (*ret_changed)++;
        if (m == 2)
            (*ret_leased)++;
    }
    PQclear(r);
    return rc;
}

/* An operation a pass has claimed. */
typedef struct claimed_op {
    char kind[16], sbx[SBX_ID_MAX];
    op_state_t from;
    int64_t attempt;
} claimed_op_t;

/* Begins a transaction and locks op_id if it still matches cond (a WHERE
 * fragment), skipping it when another controller holds it. 0 with *ret
 * and the transaction open; SBX_ENOTFOUND (rolled back) when it no longer
 * matches or is locked or the read failed; SBX_EDB when no transaction
 * could begin. */
static int op_claim(PGconn *c, const char *op_id, const char *cond, claimed_op_t *ret)
{
    if (db_begin(c) < 0)
        return SBX_EDB;
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT kind, state, attempt, sandbox_id FROM operations WHERE id = $1 AND %s "
                              "FOR UPDATE SKIP LOCKED", cond);
    const char *p[] = { op_id };
    PGresult *o = db_exec(c, sql, 1, p);
    if (!o || PQntuples(o) != 1) {
        PQclear(o);
        db_rollback(c);
        return SBX_ENOTFOUND;
    }
    snprintf(ret->kind, sizeof ret->kind, "%s", db_get(o, 0, 0));
    ret->from = OP_PENDING;
    op_state_parse(db_get(o, 0, 1), &ret->from);
    ret->attempt = db_get_ll(o, 0, 2);
    snprintf(ret->sbx, sizeof ret->sbx, "%s", db_get(o, 0, 3));
    PQclear(o);
    return 0;
}

/* What a pass does to one claimed operation, inside its transaction:
 * returns a non-negative outcome (the transaction commits and done, when
 * given, is told it), or < 0 (it rolls back; SBX_ECONFLICT: the operation
 * moved meanwhile, the pass goes on). */
typedef int (*op_step_fn)(PGconn *c, const store_limits_t *lim, const char *op_id, const claimed_op_t *o);

/* Runs step on each operation matching cond (up to 100, oldest first), each
 * claimed in its own transaction; stops at the first error. */
static int ops_pass(PGconn *c, const store_limits_t *lim, const char *cond, op_step_fn step, void (*done)(int),
                    int *ret_changed)
{
    PGresult *r = ops_in_state(c, cond);
    if (!r)
        return SBX_EDB;
    int rc = 0;
    for (int i = 0; i < PQntuples(r) && rc == 0; i++) {
        const char *op_id = db_get(r, i, 0);
        claimed_op_t o;
        int cl = op_claim(c, op_id, cond, &o);
        if (cl == SBX_EDB) {
            rc = SBX_EDB;
            break;
        }
        if (cl < 0)
            continue;
        int x = step(c, lim, op_id, &o);
        if (x < 0) {
            db_rollback(c);
            if (x != SBX_ECONFLICT)
                rc = x;
            continue;
        }
        if (db_commit(c) < 0) {
            db_rollback(c);
            rc = SBX_EDB;
            break;
        }
        if (done)
            done(x);
        (*ret_changed)++;
    }
    PQclear(r);
    return rc;
}

/* A lease nobody renews: retried (outcome 0), or failed (1) for an exec
 * its worker took, which is not safe to repeat, or past the last attempt. */
static int lease_expire_step(PGconn *c, const store_limits_t *lim, const char *op_id, const claimed_op_t *o)
{
    int x;
    /* An exec a worker took (running) is not safe to repeat: it may have
     * run. One still leased was never handed out (a hand-out whose answer
     * was lost is taken back to leased): placed again like the rest (a
     * worker killed and restarted slower than the lease saw its exec fail
     * worker_lost, never having run it). create and delete are safe. */
    bool exec = strcmp(o->kind, "exec") == 0, taken_exec = exec && o->from != OP_LEASED;
    bool give_up = taken_exec || o->attempt >= lim->max_attempts;
    if (exec && !give_up) { /* its worker lost: it can go nowhere else */
        char wstate[24] = "";
        x = store__one_text(c, "SELECT w.state FROM operations o JOIN workers w ON w.id = o.lease_worker_id "
                               "WHERE o.id = $1", 1, (const char *const[]){ op_id }, wstate, sizeof wstate);
        if (x < 0 && x != SBX_ENOTFOUND)
            return x;
        give_up = x == SBX_ENOTFOUND || strcmp(wstate, "lost") == 0;
    }
    bool create = strcmp(o->kind, "create") == 0;
    if (give_up) {
        char msg[160];
        snprintf(msg, sizeof msg, "the worker stopped renewing its lease (attempt %lld of %lld)%s",
                 (long long)o->attempt, (long long)lim->max_attempts,
                 taken_exec ? "; exec is not retried because it may have run" : "");
        const char *e[] = { "worker_lost", msg };
        x = store__op_cas(c, op_id, o->from, OP_FAILED, "error_code = $4, error_message = $5, lease_worker_id = NULL",
                          2, e, store__event_reason("lease_expired"));
        if (x == 0 && create) {
            x = store__sandbox_set_phase(c, o->sbx, PH_FAILED, NULL, 0, NULL);
            if (x == 0)
                x = store__sandbox_release_allocation(c, o->sbx);
        }
    } else {
        x = store__op_cas(c, op_id, o->from, OP_ADMITTED, "lease_worker_id = NULL, lease_expires_at = NULL", 0, NULL,
                          store__event_reason("lease_expired"));
        if (x == 0 && create) {
            x = store__sandbox_release_allocation(c, o->sbx);
            if (x == 0)
                x = store__sandbox_set_phase(c, o->sbx, PH_PENDING, "worker_id = NULL", 0, NULL);
        }
    }
    return x < 0 ? x : give_up;
}

static void lease_expired_count(int gave_up)
{
    pthread_once(&store__metrics_once, store__metrics_init);
    metrics_add(store__m_lease_expiries, gave_up ? "outcome=\"failed\"" : "outcome=\"retried\"", 1);
}

int store_expire_leases(PGconn *c, const store_limits_t *lim, int *ret_changed)
{
    /* An exec or a delete its unreachable worker has not taken yet waits
     * for it (it never started: nothing can have run twice); it can go
     * nowhere else, and expires once the worker is lost. A create goes
     * elsewhere; what the worker took may have run, and expires. */
    return ops_pass(c, lim,
                    "state IN ('leased', 'running') AND lease_expires_at < now() "
                    "AND NOT (state = 'leased' AND kind <> 'create' AND lease_worker_id IN "
                    "  (SELECT id FROM workers WHERE state = 'unreachable'))",
                    lease_expire_step, lease_expired_count, ret_changed);
}

/* Past its deadline before any worker took it: failed with timeout. */
static int overdue_step(PGconn *c, const store_limits_t *lim, const char *op_id, const claimed_op_t *o)
{
    (void)lim;
    const char *e[] = { "timeout", "no worker could take the operation before its deadline "
                                   "(no ready worker with enough free capacity)" };
    int x = store__op_cas(c, op_id, o->from, OP_FAILED, "error_code = $4, error_message = $5", 2, e,
                          store__event_reason("deadline"));
    if (x == 0 && strcmp(o->kind, "create") == 0)
        x = store__sandbox_set_phase(c, o->sbx, PH_FAILED, NULL, 0, NULL);
    /* Any other failure stops the pass as a database error. */
    return x < 0 && x != SBX_ECONFLICT ? SBX_EDB : x;
}

int store_fail_overdue(PGconn *c, int *ret_changed)
{
    return ops_pass(c, NULL, "state IN ('pending', 'admitted') AND deadline < now()", overdue_step, NULL,
                    ret_changed);
}

/* What a sandbox pass does to one locked sandbox (its tenant given), in
 * its transaction: 0, SANDBOX_STEP_SKIPPED (nothing changed: not counted,
 * so the loop does not run again for it), or < 0 (rolled back; the pass
 * stops). */
#define SANDBOX_STEP_SKIPPED 1
typedef struct sandbox_step {
    int (*fn)(PGconn *c, const store_limits_t *lim, const char *sbx, const char *tenant,
              const struct sandbox_step *st);
    const char *event_kind; /* request_delete_step: may be NULL */
    const char *created_by;
} sandbox_step_t;

/* For each sandbox select_sql names: in its own transaction, lock the row
 * if it still matches lock_cond (a WHERE fragment on $1 = id), skipping it
 * otherwise, and run the step. */
static int sandboxes_pass(PGconn *c, const store_limits_t *lim, const char *select_sql, const char *lock_cond,
                          const sandbox_step_t *st, int *ret_changed)
{
    PGresult *r = db_exec(c, select_sql, 0, NULL);
    if (!r)
        return SBX_EDB;
    char lock_sql[512];
    snprintf(lock_sql, sizeof lock_sql, "SELECT tenant_id FROM sandboxes WHERE id = $1 AND %s FOR NO KEY UPDATE SKIP LOCKED",
             lock_cond);
    int rc = 0;
    for (int i = 0; i < PQntuples(r); i++) {
        const char *sbx = db_get(r, i, 0);
        if (db_begin(c) < 0) {
            rc = SBX_EDB;
            break;
        }
        char tenant[SBX_ID_MAX];
        if (store__one_text(c, lock_sql, 1, (const char *const[]){ sbx }, tenant, sizeof tenant) < 0) {
            db_rollback(c);
            continue;
        }
        int x = st->fn(c, lim, sbx, tenant, st);
        if (x < 0 || db_commit(c) < 0) {
            db_rollback(c);
            rc = SBX_EDB;
            break;
        }
        if (x != SANDBOX_STEP_SKIPPED)
            (*ret_changed)++;
    }
    PQclear(r);
    return rc;
}

/* Writes st->event_kind (when set) and requests the sandbox's deletion. */
static int request_delete_step(PGconn *c, const store_limits_t *lim, const char *sbx, const char *tenant,
                               const sandbox_step_t *st)
{
    char op[SBX_ID_MAX];
    if (st->event_kind && store__event_add(c, tenant, st->event_kind, sbx, NULL, NULL) < 0)
        return SBX_EDB;
    return store__sandbox_request_delete(c, lim, tenant, sbx, NULL, NULL, st->created_by, op, NULL, false);
}

static int request_deletes(PGconn *c, const store_limits_t *lim, const char *select_sql, const char *lock_cond,
                           const char *event_kind, const char *created_by, int *ret_changed)
{
    const sandbox_step_t st = { request_delete_step, event_kind, created_by };
    return sandboxes_pass(c, lim, select_sql, lock_cond, &st, ret_changed);
}

/* A sandbox whose TTL passed: deleted, or paused when it or its tenant
 * asks for that (auto_pause) — then, while its
 * worker is away or its pause is under way, left for a later pass. */
static int ttl_step(PGconn *c, const store_limits_t *lim, const char *sbx, const char *tenant,
                    const sandbox_step_t *st)
{
    PGresult *r = db_exec(c,
                          "SELECT s.phase = 'running' AND s.isolation IN ('container', 'gvisor', 'microvm') AND "
                          "  (coalesce((s.spec->>'auto_pause')::boolean, false) "
                          "   OR coalesce((tn.policy->>'auto_pause')::boolean, false)), "
                          "  coalesce(w.id, ''), " STORE_WORKER_GO_STATE ", coalesce(w.name, ''), "
                          "  EXISTS (SELECT 1 FROM operations o WHERE o.sandbox_id = s.id AND o.kind = 'pause' "
                          "    AND o.state IN ('pending', 'admitted', 'leased', 'running')) "
                          "FROM sandboxes s JOIN tenants tn ON tn.id = s.tenant_id "
                          "LEFT JOIN workers w ON w.id = s.worker_id WHERE s.id = $1",
                          1, (const char *const[]){ sbx });
    if (!r || PQntuples(r) != 1) {
        PQclear(r);
        return SBX_EDB;
    }
    bool pause = db_get_bool(r, 0, 0), busy = db_get_bool(r, 0, 4);
    sbx_worker_t w;
    memset(&w, 0, sizeof w);
    snprintf(w.id, sizeof w.id, "%s", db_get(r, 0, 1));
    snprintf(w.state, sizeof w.state, "%s", db_get(r, 0, 2));
    snprintf(w.name, sizeof w.name, "%s", db_get(r, 0, 3));
    PQclear(r);
    if (!pause)
        return request_delete_step(c, lim, sbx, tenant, st);
    if (busy || !w.id[0] || (strcmp(w.state, "ready") != 0 && strcmp(w.state, "draining") != 0))
        return SANDBOX_STEP_SKIPPED; /* its pause is under way, or waits for its worker */
    json_object *ed = json_object_new_object();
    jsonx_add_str(ed, "action", "pause");
    if (store__event_add(c, tenant, "sandbox.expired", sbx, NULL, ed) < 0)
        return SBX_EDB;
    json_object *pd = json_object_new_object(), *op = NULL;
    jsonx_add_str(pd, "reason", "ttl");
    char op_id[SBX_ID_MAX];
    bool leased = false;
    int rc = store__pause_op_insert(c, lim, tenant, sbx, &w, false, NULL, NULL, "ttl", pd, op_id, &leased, &op);
    json_object_put(op);
    return rc;
}

int store_expire_ttls(PGconn *c, const store_limits_t *lim, int *ret_changed)
{
    const sandbox_step_t st = { ttl_step, "sandbox.expired", "ttl" };
    return sandboxes_pass(c, lim,
                          "SELECT s.id FROM sandboxes s WHERE s.desired_state = 'running' AND s.expires_at < now() "
                          /* one whose pause (auto_pause) is under way waits for it */
                          "AND NOT EXISTS (SELECT 1 FROM operations o WHERE o.sandbox_id = s.id AND o.kind = 'pause' "
                          "  AND o.state IN ('pending', 'admitted', 'leased', 'running')) "
                          "ORDER BY s.expires_at LIMIT 100",
                          "desired_state = 'running' AND expires_at < now()", &st, ret_changed);
}

int store_retry_deletes(PGconn *c, const store_limits_t *lim, int *ret_changed)
{
    /* A sandbox that should be gone, whose last delete failed a while ago
     * and nothing else is deleting it: try again (never in a tight loop). */
    return request_deletes(c, lim,
                           "SELECT s.id FROM sandboxes s WHERE s.desired_state = 'deleted' AND s.phase <> 'deleted' "
                           "AND NOT EXISTS (SELECT 1 FROM operations o WHERE o.sandbox_id = s.id AND o.kind = 'delete' "
                           "  AND (o.state IN ('pending', 'admitted', 'leased', 'running', 'succeeded') "
                           "       OR o.finished_at > now() - interval '30 seconds')) "
                           "ORDER BY s.updated_at LIMIT 100",
                           "desired_state = 'deleted' AND phase <> 'deleted'", NULL, "retry", ret_changed);
}

/* A running sandbox of a lost worker: lost, its capacity released. */
static int lost_step(PGconn *c, const store_limits_t *lim, const char *sbx, const char *tenant,
                     const sandbox_step_t *st)
{
    (void)lim;
    (void)tenant;
    (void)st;
    if (store__sandbox_set_phase(c, sbx, PH_LOST, NULL, 0, NULL) < 0 || store__sandbox_release_allocation(c, sbx) < 0)
        return SBX_EDB;
    return 0;
}

/* Marks unreachable the workers silent for worker_timeout_seconds, or
 * (worker_id set) that worker, which said it stopped: it restarts. Nothing
 * new is placed there; its sandboxes stay running, shown unreachable, with
 * their capacity, until lost_at: the grace counts from the last heartbeat,
 * and in full from now when the controller itself could not hear anyone
 * meanwhile (an outage). 0 or SBX_EDB. */
static int mark_unreachable(PGconn *c, const store_limits_t *lim, const char *worker_id, int *ret_changed)
{
    char tmo[24], after[24];
    snprintf(tmo, sizeof tmo, "%lld", (long long)lim->worker_timeout_seconds);
    snprintf(after, sizeof after, "%lld", (long long)lim->worker_lost_after_seconds);
    const char *p[] = { tmo, after, worker_id };
    PGresult *r = db_exec(c,
                          "WITH u AS (UPDATE workers SET state = 'unreachable', resume_state = state, "
                          "  unreachable_since = now(), updated_at = now(), "
                          "  unreachable_reason = CASE WHEN $3::text IS NOT NULL OR stopping_at IS NOT NULL "
                          "    THEN 'restarting' ELSE 'no heartbeat' END, "
                          "  lost_at = greatest(last_heartbeat + make_interval(secs => $2::bigint), "
                          "    now() + make_interval(secs => $2::bigint - $1::bigint)) "
                          "  WHERE state IN ('ready', 'draining') AND CASE WHEN $3::text IS NULL "
                          "    THEN last_heartbeat < now() - make_interval(secs => $1::bigint) ELSE id = $3 END "
                          "  RETURNING id, name, unreachable_reason, lost_at), "
                          "s AS (INSERT INTO events (tenant_id, kind, sandbox_id, data) "
                          "  SELECT s.tenant_id, 'sandbox.unreachable', s.id, jsonb_build_object('worker', u.name, "
                          "    'reason', u.unreachable_reason, 'lost_at', u.lost_at) "
                          "  FROM u JOIN sandboxes s ON s.worker_id = u.id AND s.phase = 'running') "
                          "INSERT INTO events (kind, data) SELECT 'worker.unreachable', "
                          "  jsonb_build_object('worker', name, 'worker_id', id, 'reason', unreachable_reason, "
                          "  'lost_at', lost_at) FROM u",
                          3, p);
    if (!r)
        return SBX_EDB;
    *ret_changed += store__cmd_rows(r);
    PQclear(r);
    return 0;
}

int store_worker_stopped(PGconn *c, const store_limits_t *lim, const char *worker_id)
{
    int changed = 0;
    return mark_unreachable(c, lim, worker_id, &changed);
}

int store_worker_heard_within(PGconn *c, int64_t within_ms, bool *ret_heard)
{
    char ms[24];
    snprintf(ms, sizeof ms, "%lld", (long long)within_ms);
    return store__one_row(c,
                          "SELECT 1 FROM workers WHERE last_heartbeat > now() - make_interval(secs => $1::bigint / 1000.0) "
                          "LIMIT 1",
                          1, (const char *const[]){ ms }, ret_heard);
}

int store_mark_lost_workers(PGconn *c, const store_limits_t *lim, int *ret_changed)
{
    if (mark_unreachable(c, lim, NULL, ret_changed) < 0)
        return SBX_EDB;
    /* Past its grace: lost. */
    PGresult *r = db_exec(c,
                          "WITH lost AS (UPDATE workers SET state = 'lost', updated_at = now() "
                          "  WHERE state = 'unreachable' AND lost_at <= now() RETURNING id, name) "
                          "INSERT INTO events (kind, data) SELECT 'worker.lost', "
                          "  jsonb_build_object('worker', name, 'worker_id', id) FROM lost",
                          0, NULL);
    if (!r)
        return SBX_EDB;
    *ret_changed += store__cmd_rows(r);
    PQclear(r);
    /* Running sandboxes of lost workers are lost, and their share of
     * capacity is released. (Operations in flight there resolve through
     * their leases, which no heartbeat extends any more.) */
    const sandbox_step_t st = { lost_step, NULL, NULL };
    return sandboxes_pass(c, lim,
                          "SELECT s.id FROM sandboxes s JOIN workers w ON w.id = s.worker_id "
                          "WHERE w.state = 'lost' AND s.phase = 'running' LIMIT 500",
                          "phase = 'running'", &st, ret_changed);
}

/* Runs one bounded DELETE until it removes less than a batch. */
static int prune_batches(PGconn *c, const char *sql, const char *seconds, long long *ret_rows)
{
    for (int i = 0; i < SBX_RETENTION_MAX_BATCHES; i++) {
        const char *p[] = { seconds };
        PGresult *r = db_exec(c, sql, 1, p);
        if (!r)
            return SBX_EDB;
        int n = store__cmd_rows(r);
        PQclear(r);
        *ret_rows += n;
        if (n < SBX_RETENTION_BATCH)
            break;
    }
    return 0;
}

#define STR_(x) #x
#define STR(x) STR_(x)

int store_prune(PGconn *c, int64_t operations_seconds, int64_t events_seconds, store_pruned_t *ret_pruned)
{
    memset(ret_pruned, 0, sizeof *ret_pruned);
    char ops_s[32], ev_s[32];
    snprintf(ops_s, sizeof ops_s, "%lld", (long long)operations_seconds);
    snprintf(ev_s, sizeof ev_s, "%lld", (long long)events_seconds);
    int rc;
    if ((rc = prune_batches(c,
                            "DELETE FROM events WHERE id IN (SELECT id FROM events "
                            "  WHERE ts < now() - make_interval(secs => $1::bigint) ORDER BY ts "
                            "  LIMIT " STR(SBX_RETENTION_BATCH) " FOR UPDATE SKIP LOCKED)",
                            ev_s, &ret_pruned->events)) < 0 ||
        (rc = prune_batches(c,
                            "DELETE FROM network_log WHERE id IN (SELECT id FROM network_log "
                            "  WHERE at < now() - make_interval(secs => $1::bigint) ORDER BY id "
                            "  LIMIT " STR(SBX_RETENTION_BATCH) " FOR UPDATE SKIP LOCKED)",
                            ev_s, &ret_pruned->network_log)) < 0 ||
        /* A batch's live output goes in one statement of its own, before
         * the cascade would take it operation by operation: the tenants'
         * output counters (migration 0019) are then taken in one go, in
         * tenant order, as every other writer of several takes them. */
        (rc = prune_batches(c,
                            "WITH gone AS (SELECT id FROM operations "
                            "  WHERE finished_at < now() - make_interval(secs => $1::bigint) "
                            "  LIMIT " STR(SBX_RETENTION_BATCH) " FOR UPDATE SKIP LOCKED), "
                            "out AS (DELETE FROM exec_output WHERE operation_id IN (SELECT id FROM gone)) "
                            "DELETE FROM operations WHERE id IN (SELECT id FROM gone)",
                            ops_s, &ret_pruned->operations)) < 0 ||
        (rc = prune_batches(c,
                            "DELETE FROM routes WHERE id IN (SELECT id FROM routes "
                            "  WHERE state = 'removed' AND removed_at < now() - make_interval(secs => $1::bigint) "
                            "  LIMIT " STR(SBX_RETENTION_BATCH) " FOR UPDATE SKIP LOCKED)",
                            ops_s, &ret_pruned->routes)) < 0 ||
        (rc = prune_batches(c,
                            "DELETE FROM template_builds WHERE id IN (SELECT id FROM template_builds "
                            "  WHERE cleaned AND finished_at < now() - make_interval(secs => $1::bigint) "
                            "  LIMIT " STR(SBX_RETENTION_BATCH) " FOR UPDATE SKIP LOCKED)",
                            ops_s, &ret_pruned->builds)) < 0 ||
        /* a build's files, unused for a day (whatever the retention) */
        (rc = prune_batches(c,
                            "DELETE FROM build_files WHERE (tenant_id, hash) IN (SELECT tenant_id, hash "
                            "  FROM build_files WHERE used_at < now() - interval '1 day' AND $1::bigint IS NOT NULL "
                            "  LIMIT " STR(SBX_RETENTION_BATCH) " FOR UPDATE SKIP LOCKED)",
                            ops_s, &ret_pruned->builds)) < 0)
        return rc;
    /* A deleted sandbox goes once nothing refers to it any more. */
    rc = prune_batches(c,
                       "WITH gone AS (SELECT s.id FROM sandboxes s "
                       "  WHERE s.phase = 'deleted' AND s.deleted_at < now() - make_interval(secs => $1::bigint) "
                       "  AND NOT EXISTS (SELECT 1 FROM operations o WHERE o.sandbox_id = s.id) "
                       "  AND NOT EXISTS (SELECT 1 FROM routes r WHERE r.sandbox_id = s.id AND r.state = 'active') "
                       "  LIMIT " STR(SBX_RETENTION_BATCH) " FOR UPDATE SKIP LOCKED), "
                       "r AS (DELETE FROM routes WHERE sandbox_id IN (SELECT id FROM gone)), "
                       "n AS (DELETE FROM network_log WHERE sandbox_id IN (SELECT id FROM gone)) "
                       "DELETE FROM sandboxes WHERE id IN (SELECT id FROM gone)",
                       ops_s, &ret_pruned->sandboxes);
    return rc;
}
