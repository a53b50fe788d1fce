/* The column tables: one per object the API shows (sandbox, operation,
 * worker, route, tenant, token, event, a worker's assignment). Each row is a JSON key, the SQL
 * expression that reads it and how its text becomes JSON; the SELECT list
 * and the row-to-JSON mapping both come from the table, and the list/get
 * skeleton every store room uses is here. */
#include "store_int.h"

/* ---- the tables ---- */

static const store_col_t sandbox_cols[] = {
    { "id", "s.id", COL_TEXT },
    { "name", "s.name", COL_TEXT_OMIT }, /* absent: made without a name */
    { "tenant", "tn.name", COL_TEXT },
    { "image", "s.spec->>'image'", COL_TEXT },
    { "phase", "s.phase", COL_TEXT },
    { "desired_state", "s.desired_state", COL_TEXT },
    { "worker", "w.name", COL_TEXT },
    { "isolation", "s.isolation", COL_TEXT },
    { "cpu_millis", "s.cpu_millis", COL_INT },
    { "memory_mib", "s.memory_mib", COL_INT },
    { "disk_mib", "coalesce((s.spec->>'disk_mib')::bigint, 0)", COL_INT }, /* 0: made before quotas */
    { "ttl_seconds", "s.ttl_seconds", COL_INT },
    { "network", "s.spec->>'network'", COL_TEXT },
    { "trust", "(s.spec->'trust')::text", COL_JSON },
    { "labels", "coalesce(s.spec->'labels', '{}')::text", COL_JSON },
    { "expires_at", TS("s.expires_at"), COL_TEXT },
    { "created_at", TS("s.created_at"), COL_TEXT },
    { "updated_at", TS("s.updated_at"), COL_TEXT },
    { "read_only_root", "coalesce(s.spec->'read_only_root' = 'true'::jsonb, false)", COL_BOOL },
    { "hardened", "coalesce(s.spec->'hardened' = 'true'::jsonb, false)", COL_BOOL },
    /* its TTL pauses it instead of deleting it (its tenant's policy may too) */
    { "auto_pause", "coalesce(s.spec->'auto_pause' = 'true'::jsonb, false)", COL_BOOL },
    { "selector", "coalesce(s.spec->'selector', '{}')::text", COL_JSON },
    { "classification", "s.classification::text", COL_JSON },
    /* the warm pool it was claimed from (absent: a cold create) */
    { "pool", "(SELECT p.name FROM pools p WHERE p.id = s.pool_id AND s.claimed_at IS NOT NULL)", COL_TEXT_OMIT },
    /* Its worker is unreachable (docs/operations.md): it keeps running
     * there, as far as anyone knows, until the worker returns or lost_at. */
    { "unreachable",
      "CASE WHEN w.state = 'unreachable' AND s.phase IN ('running', 'deleting') THEN json_build_object('worker', "
      "w.name, 'reason', w.unreachable_reason, 'since', " TS("w.unreachable_since") ", 'lost_at', " TS("w.lost_at")
      ")::text END",
      COL_JSON_OMIT },
    /* paused: since when, whether its memory was kept, the TTL it has
     * left once resumed (absent otherwise) */
    { "paused",
      "CASE WHEN s.phase = 'paused' THEN json_build_object('at', " TS("s.paused_at") ", 'memory', "
      "coalesce(s.pause_memory, false), 'ttl_seconds_left', s.paused_ttl_seconds)::text END",
      COL_JSON_OMIT },
    /* the snapshot it started from (absent: its image alone) */
    { "from", "s.spec->>'from'", COL_TEXT_OMIT },
    /* the volumes it mounts (absent: none; docs/volumes.md) */
    { "volumes", "(s.spec->'volumes')::text", COL_JSON_OMIT },
    /* its egress rules by domain (absent: none; docs/network.md) */
    { "egress", "(s.spec->'egress')::text", COL_JSON_OMIT },
    /* the names of the secrets its egress filter adds (never a value) */
    { "secrets", "(s.spec->'secrets')::text", COL_JSON_OMIT },
    /* What the runtime observed when the sandbox stopped by itself. */
    { "failure", "s.failure::text", COL_JSON },
    /* microvm: how its worker's driver runs VMs ("kvm" / "tcg"), from the
     * worker's probe text ("... accel tcg ..."); absent otherwise */
    { "accelerator", "CASE WHEN s.isolation = 'microvm' THEN substring(w.probes->>'microvm' from 'accel (kvm|tcg)') END",
      COL_TEXT_OMIT },
};

/* "error": {"code","message"} when the operation failed, else null. */
static json_object *op_hook(const store_table_t *t, const char *key, const PGresult *r, int row)
{
    (void)key;
    const char *code = store__col_text(t, r, row, "error_code");
    if (!code)
        return NULL;
    const char *msg = store__col_text(t, r, row, "error_message");
    json_object *e = json_object_new_object();
    jsonx_add_str(e, "code", code);
    jsonx_add_str(e, "message", msg ? msg : "");
    return e;
}

static const store_col_t op_cols[] = {
    { "id", "o.id", COL_TEXT },
    { "kind", "o.kind", COL_TEXT },
    { "state", "o.state", COL_TEXT },
    { "sandbox_id", "o.sandbox_id", COL_TEXT },
    { "attempt", "o.attempt", COL_INT },
    { "created_at", TS("o.created_at"), COL_TEXT },
    { "updated_at", TS("o.updated_at"), COL_TEXT },
    { "finished_at", TS("o.finished_at"), COL_TEXT },
    { "error", NULL, COL_HOOK },
    { "placement", "o.placement::text", COL_JSON },
    { "result", "o.result::text", COL_JSON },
    { "error_code", "o.error_code", COL_HIDDEN },
    { "error_message", "o.error_message", COL_HIDDEN },
};

/* Unqualified: the worker statements are INSERT … ON CONFLICT and UPDATE
 * … RETURNING on the bare table. */
static const store_col_t worker_cols[] = {
    { "id", "id", COL_TEXT },
    { "name", "name", COL_TEXT },
    { "labels", "labels::text", COL_JSON },
    { "isolation", "array_to_json(isolation)::text", COL_JSON },
    { "runtime", "runtime", COL_TEXT },
    { "capacity.cpu_millis", "cpu_millis", COL_INT },
    { "capacity.memory_mib", "memory_mib", COL_INT },
    { "capacity.slots", "slots", COL_INT },
    { "allocated.cpu_millis", "alloc_cpu_millis", COL_INT },
    { "allocated.memory_mib", "alloc_memory_mib", COL_INT },
    { "allocated.slots", "alloc_slots", COL_INT },
    { "version", "version", COL_TEXT },
    { "state", "state", COL_TEXT },
    { "stopping", "stopping_at IS NOT NULL", COL_BOOL },
    { "last_heartbeat", TS("last_heartbeat"), COL_TEXT },
    { "created_at", TS("created_at"), COL_TEXT },
    { "networks", "networks::text", COL_JSON },
    { "probes", "probes::text", COL_JSON },
    { "images_present", "jsonb_array_length(images)", COL_INT },
    { "route_address", "route_address", COL_TEXT_OMIT },
    /* silent (or stopped, restarting) past worker_timeout_seconds: since
     * when, why, and when it is lost unless heard again */
    { "unreachable",
      "CASE WHEN state = 'unreachable' THEN json_build_object('reason', unreachable_reason, 'since', "
      TS("unreachable_since") ", 'lost_at', " TS("lost_at") ")::text END",
      COL_JSON_OMIT },
};

static const store_col_t route_cols[] = {
    { "id", "r.id", COL_TEXT },
    { "name", "r.name", COL_TEXT },
    { "sandbox_id", "r.sandbox_id", COL_TEXT },
    { "port", "r.port", COL_INT },
    { "auth", "r.auth", COL_TEXT },
    { "state", "r.state", COL_TEXT },
    { "expires_at", TS("r.expires_at"), COL_TEXT },
    { "created_at", TS("r.created_at"), COL_TEXT },
    { "removed_at", TS("r.removed_at"), COL_TEXT },
    { "removed_reason", "r.removed_reason", COL_TEXT },
};

static const store_col_t tenant_cols[] = {
    { "id", "tn.id", COL_TEXT },
    { "name", "tn.name", COL_TEXT },
    { "created_at", TS("tn.created_at"), COL_TEXT },
    { "policy", "tn.policy::text", COL_JSON },
};

static const store_col_t token_cols[] = {
    { "id", "t.id", COL_TEXT },
    { "tenant", "tn.name", COL_TEXT },
    { "role", "t.role", COL_TEXT },
    { "name", "t.name", COL_TEXT },
    { "created_at", TS("t.created_at"), COL_TEXT },
    { "expires_at", TS("t.expires_at"), COL_TEXT },
    { "revoked_at", TS("t.revoked_at"), COL_TEXT },
    { "worker_name", "t.worker_name", COL_TEXT },
};

static const store_col_t event_cols[] = {
    { "id", "e.id", COL_INT },
    { "ts", TS("e.ts"), COL_TEXT },
    { "tenant", "tn.name", COL_TEXT },
    { "kind", "e.kind", COL_TEXT },
    { "sandbox_id", "e.sandbox_id", COL_TEXT },
    { "operation_id", "e.operation_id", COL_TEXT },
    { "data", "e.data::text", COL_JSON_OBJ },
};

/* An assignment handed to a worker by a claim (an exec's "exec" is added
 * from the hidden request). */
static const store_col_t assignment_cols[] = {
    { "operation_id", "o.id", COL_TEXT },
    { "kind", "o.kind", COL_TEXT },
    { "attempt", "o.attempt", COL_INT },
    { "sandbox_id", "o.sandbox_id", COL_TEXT },
    { "tenant", "tn.name", COL_TEXT },
    { "isolation", "s.isolation", COL_TEXT },
    { "runtime_ref", "s.runtime_ref", COL_TEXT },
    { "spec", "s.spec::text", COL_JSON },
    { "request", "o.request::text", COL_HIDDEN },
    /* the tenant's policy egress_allow (as it is when the create is
     * handed out), added to a create's assignment */
    { "egress_allow", "tn.policy->'egress_allow'", COL_HIDDEN },
    /* when the operation was accepted: a worker may log how long it
     * waited (sandbox-sim measures accepted → worker receives with it) */
    { "created_at", TS("o.created_at"), COL_TEXT },
    /* the tenant's id: a create's secrets are opened under it */
    { "tenant_id", "o.tenant_id", COL_HIDDEN },
};

/* FROM pools p LEFT JOIN tenants tn (store/pools.c); members are counted
 * through the sandboxes_pool_ready index. */
#define POOL_MEMBERS "(SELECT count(*) FROM sandboxes m WHERE m.pool_id = p.id AND m.claimed_at IS NULL " \
                     "AND m.desired_state = 'running' AND m.phase "
static const store_col_t pool_cols[] = {
    { "id", "p.id", COL_TEXT },
    { "name", "p.name", COL_TEXT },
    { "tenant", "tn.name", COL_TEXT },
    { "image", "p.spec->>'image'", COL_TEXT },
    { "cpu_millis", "p.cpu_millis", COL_INT },
    { "memory_mib", "p.memory_mib", COL_INT },
    { "disk_mib", "coalesce((p.spec->>'disk_mib')::bigint, 0)", COL_INT },
    { "network", "p.spec->>'network'", COL_TEXT },
    { "isolation", "p.isolation", COL_TEXT },
    { "hardened", "coalesce(p.spec->'hardened' = 'true'::jsonb, false)", COL_BOOL },
    { "read_only_root", "coalesce(p.spec->'read_only_root' = 'true'::jsonb, false)", COL_BOOL },
    /* an unclaimed member's TTL (a claim sets the claimer's) */
    { "ttl_seconds", "(p.spec->>'ttl_seconds')::bigint", COL_INT },
    { "size", "p.size", COL_INT },
    { "ready", POOL_MEMBERS "= 'running')", COL_INT },
    { "creating", POOL_MEMBERS "IN ('pending', 'scheduled', 'provisioning'))", COL_INT },
    { "hits", "p.hits", COL_INT },
    { "misses", "p.misses", COL_INT },
    { "refills", "p.refills", COL_INT },
    { "created_at", TS("p.created_at"), COL_TEXT },
};

/* FROM snapshots sn JOIN tenants tn LEFT JOIN workers w LEFT JOIN
 * operations o (SNAPSHOT_FROM, store/snapshots.c). */
static const store_col_t snapshot_cols[] = {
    { "id", "sn.id", COL_TEXT },
    { "name", "sn.name", COL_TEXT_OMIT },
    { "tenant", "tn.name", COL_TEXT },
    { "state", STORE_SNAPSHOT_STATE, COL_TEXT },
    { "sandbox_id", "sn.sandbox_id", COL_TEXT },
    { "image", "sn.image", COL_TEXT },
    { "isolation", "sn.isolation", COL_TEXT },
    { "worker", "w.name", COL_TEXT },
    { "size_bytes", "sn.size_bytes::text", COL_JSON },
    { "image_bytes", "sn.image_bytes::text", COL_JSON },
    /* it saved the VM's memory too (microvm, snapshot --memory) */
    { "memory", "sn.memory::text", COL_JSON },
    { "operation_id", "sn.operation_id", COL_TEXT },
    /* its copies on other workers (sandbox snapshots copy): worker, state */
    { "copies",
      "(SELECT coalesce(json_agg(json_build_object('worker', cw.name, 'state', CASE WHEN sc.ready_at IS NOT NULL "
      "  THEN 'ready' WHEN co.state IN ('failed', 'cancelled', 'succeeded') THEN 'failed' ELSE 'pending' END, "
      "  'operation_id', sc.operation_id) ORDER BY cw.name), '[]') FROM snapshot_copies sc "
      "  JOIN workers cw ON cw.id = sc.worker_id LEFT JOIN operations co ON co.id = sc.operation_id "
      "  WHERE sc.snapshot_id = sn.id)::text",
      COL_JSON },
    /* a template's version (absent for a plain snapshot) */
    { "template", "sn.template", COL_TEXT_OMIT },
    { "version", "sn.version::text", COL_JSON_OMIT },
    { "config", "sn.config::text", COL_JSON_OMIT },
    { "error",
      "CASE WHEN sn.ready_at IS NULL AND o.state IN ('failed', 'cancelled') THEN json_build_object('code', "
      "o.error_code, 'message', o.error_message)::text END",
      COL_JSON_OMIT },
    { "created_at", TS("sn.created_at"), COL_TEXT },
    { "ready_at", TS("sn.ready_at"), COL_TEXT },
    { "deleted_at", TS("sn.deleted_at"), COL_TEXT_OMIT },
};

/* FROM volumes vo JOIN tenants tn LEFT JOIN workers w (VOLUME_FROM,
 * store/volumes.c). */
static const store_col_t volume_cols[] = {
    { "id", "vo.id", COL_TEXT },
    { "name", "vo.name", COL_TEXT },
    { "tenant", "tn.name", COL_TEXT },
    { "state", "CASE WHEN vo.deleted_at IS NOT NULL THEN 'deleted' WHEN vo.worker_id IS NULL THEN 'unplaced' "
               "ELSE 'ready' END", COL_TEXT },
    { "size_mib", "vo.size_mib", COL_INT },
    /* the worker it lives on (absent until a sandbox first mounts it) */
    { "worker", "w.name", COL_TEXT_OMIT },
    { "mounted_by",
      "(SELECT coalesce(json_agg(json_build_object('sandbox', s.id, 'path', m->>'path', 'read_only', "
      "  m->>'read_only' = 'true') ORDER BY s.id), '[]') FROM " STORE_VOLUME_MOUNTS("vo") ")::text",
      COL_JSON },
    { "created_at", TS("vo.created_at"), COL_TEXT },
    { "placed_at", TS("vo.placed_at"), COL_TEXT_OMIT },
    { "deleted_at", TS("vo.deleted_at"), COL_TEXT_OMIT },
};

#define TABLE(cols, hook) { cols, (int)(sizeof cols / sizeof cols[0]), hook, NULL }
store_table_t store__t_sandbox = TABLE(sandbox_cols, NULL);
store_table_t store__t_op = TABLE(op_cols, op_hook);
store_table_t store__t_worker = TABLE(worker_cols, NULL);
store_table_t store__t_route = TABLE(route_cols, NULL);
store_table_t store__t_tenant = TABLE(tenant_cols, NULL);
store_table_t store__t_token = TABLE(token_cols, NULL);
store_table_t store__t_event = TABLE(event_cols, NULL);
store_table_t store__t_assignment = TABLE(assignment_cols, NULL);
store_table_t store__t_pool = TABLE(pool_cols, NULL);
store_table_t store__t_snapshot = TABLE(snapshot_cols, NULL);
store_table_t store__t_volume = TABLE(volume_cols, NULL);

static store_table_t *const all_tables[] = { &store__t_sandbox, &store__t_op, &store__t_worker, &store__t_route,
                                             &store__t_tenant, &store__t_token, &store__t_event,
                                             &store__t_assignment, &store__t_pool, &store__t_snapshot,
                                             &store__t_volume, &store__t_build };
static pthread_once_t lists_once = PTHREAD_ONCE_INIT;

static bool col_selected(const store_col_t *col) { return col->kind != COL_HOOK; }

/* Joins each table's SQL expressions into its SELECT list, once. The lists
 * live as long as the process. */
static void lists_build(void)
{
    for (size_t k = 0; k < sizeof all_tables / sizeof all_tables[0]; k++) {
        store_table_t *t = all_tables[k];
        size_t len = 1;
        for (int i = 0; i < t->ncols; i++)
            len += col_selected(&t->cols[i]) ? strlen(t->cols[i].sql) + 2 : 0;
        char *s = malloc(len);
        if (!s)
            continue;
        size_t o = 0;
        for (int i = 0; i < t->ncols; i++)
            if (col_selected(&t->cols[i]))
                o += (size_t)snprintf(s + o, len - o, "%s%s", o ? ", " : "", t->cols[i].sql);
        s[o] = '\0';
        t->list = s;
    }
}

const char *store__cols(const store_table_t *t)
{
    pthread_once(&lists_once, lists_build);
    return t->list;
}

/* The result column of the table's key; -1 when not selected. */
static int col_index(const store_table_t *t, const char *key)
{
    int at = 0;
    for (int i = 0; i < t->ncols; i++) {
        if (!col_selected(&t->cols[i]))
            continue;
        if (strcmp(t->cols[i].key, key) == 0)
            return at;
        at++;
    }
    return -1;
}

const char *store__col_text(const store_table_t *t, const PGresult *r, int row, const char *key)
{
    int i = col_index(t, key);
    return i < 0 ? NULL : db_get(r, row, i);
}

/* A column with no key of its own, or an _OMIT one that is SQL NULL. */
static bool col_left_out(const store_col_t *col, const PGresult *r, int row, int at)
{
    return col->kind == COL_HIDDEN ||
           ((col->kind == COL_TEXT_OMIT || col->kind == COL_JSON_OMIT) && PQgetisnull(r, row, at));
}

/* The JSON of one column's text. */
static json_object *col_value(const store_col_t *col, const PGresult *r, int row, int at)
{
    const char *v = db_get(r, row, at);
    switch (col->kind) {
    case COL_TEXT:
    case COL_TEXT_OMIT:
        return v ? json_object_new_string(v) : NULL;
    case COL_INT:
        return json_object_new_int64(db_get_ll(r, row, at));
    case COL_BOOL:
        return json_object_new_boolean(db_get_bool(r, row, at));
    case COL_JSON:
    case COL_JSON_OMIT:
        return store__parse_json_text(v);
    case COL_JSON_OBJ: {
        json_object *o = store__parse_json_text(v);
        return o ? o : json_object_new_object();
    }
    default:
        return NULL;
    }
}

json_object *store__row_json(const store_table_t *t, const PGresult *r, int row)
{
    json_object *o = json_object_new_object();
    int at = 0;
    for (int i = 0; i < t->ncols; i++) {
        const store_col_t *col = &t->cols[i];
        int here = col_selected(col) ? at++ : -1;
        if (col_left_out(col, r, row, here))
            continue;
        json_object *v = col->kind == COL_HOOK ? t->hook(t, col->key, r, row) : col_value(col, r, row, here);
        /* "parent.member": into the object "parent", made where its first
         * member is. */
        const char *dot = strchr(col->key, '.');
        if (!dot) {
            jsonx_add(o, col->key, v);
            continue;
        }
        char parent[64];
        snprintf(parent, sizeof parent, "%.*s", (int)(dot - col->key), col->key);
        json_object *sub = NULL;
        if (!json_object_object_get_ex(o, parent, &sub) || !sub) {
            sub = json_object_new_object();
            jsonx_add(o, parent, sub);
        }
        jsonx_add(sub, dot + 1, v);
    }
    return o;
}

/* ---- rows straight to JSON text ----
 * For answers of many rows (a list of 100 sandboxes is 2,500 values): the
 * same JSON as store__row_json, written into one buffer instead of made of
 * json-c objects, and wrapped in one object that serializes as that text. */

/* A JSON string as json-c writes it (quote, backslash and control
 * characters escaped; no slash escape). */
static void raw_str(sbuf_t *b, const char *v)
{
    static const char hex[] = "0123456789abcdef";
    sbuf_append(b, "\"", 1);
    const char *run = v;
    for (const char *p = v; *p; p++) {
        unsigned char c = (unsigned char)*p;
        const char *esc = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n" : c == '\r' ? "\\r"
                        : c == '\t' ? "\\t" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
        if (!esc && c >= 0x20)
            continue;
        sbuf_append(b, run, (size_t)(p - run));
        if (esc) {
            sbuf_append(b, esc, 2);
        } else {
            char u[6] = { '\\', 'u', '0', '0', hex[c >> 4], hex[c & 15] };
            sbuf_append(b, u, sizeof u);
        }
        run = p + 1;
    }
    sbuf_append(b, run, strlen(run));
    sbuf_append(b, "\"", 1);
}

/* PostgreSQL's JSON text (jsonb output puts a space after every colon and
 * comma) without the whitespace between tokens, as json-c writes it. */
static void raw_json_compact(sbuf_t *b, const char *v)
{
    const char *run = v;
    bool in_str = false;
    for (const char *p = v; *p; p++) {
        if (in_str) {
            if (*p == '\\' && p[1])
                p++;
            else if (*p == '"')
                in_str = false;
            continue;
        }
        if (*p == '"') {
            in_str = true;
        } else if (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') {
            sbuf_append(b, run, (size_t)(p - run));
            run = p + 1;
        }
    }
    sbuf_append(b, run, strlen(run));
}

static int raw_serialize(json_object *o, struct printbuf *pb, int level, int flags)
{
    (void)level;
    (void)flags;
    const char *text = json_object_get_userdata(o);
    return printbuf_memappend(pb, text, (int)strlen(text)) < 0 ? -1 : 0;
}

/* Whether t's "parent.member" keys come one parent at a time (the text
 * writer closes a parent when the next key is not its member). */
static bool raw_writable(const store_table_t *t)
{
    char seen[8][32];
    int nseen = 0;
    const char *open = NULL;
    size_t open_len = 0;
    for (int i = 0; i < t->ncols; i++) {
        const char *key = t->cols[i].key, *dot = strchr(key, '.');
        if (t->cols[i].kind == COL_HIDDEN)
            continue;
        if (open && (!dot || (size_t)(dot - key) != open_len || strncmp(key, open, open_len) != 0)) {
            if (nseen == 8)
                return false;
            snprintf(seen[nseen++], sizeof seen[0], "%.*s", (int)open_len, open);
            open = NULL;
        }
        if (dot && !open) {
            for (int k = 0; k < nseen; k++)
                if (strlen(seen[k]) == (size_t)(dot - key) && strncmp(seen[k], key, (size_t)(dot - key)) == 0)
                    return false; /* a parent again after another key */
            open = key;
            open_len = (size_t)(dot - key);
        }
    }
    return true;
}

json_object *store__row_raw(const store_table_t *t, const PGresult *r, int row)
{
    if (!raw_writable(t))
        return store__row_json(t, r, row);
    sbuf_t b;
    sbuf_init(&b, 0);
    sbuf_append(&b, "{", 1);
    int at = 0;
    bool top_first = true, member_first = true;
    const char *open = NULL; /* the "parent." open now, if any */
    size_t open_len = 0;
    for (int i = 0; i < t->ncols; i++) {
        const store_col_t *col = &t->cols[i];
        int here = col_selected(col) ? at++ : -1;
        if (col_left_out(col, r, row, here))
            continue;
        const char *dot = strchr(col->key, '.'), *name = dot ? dot + 1 : col->key;
        bool member = open && dot && (size_t)(dot - col->key) == open_len && strncmp(col->key, open, open_len) == 0;
        if (open && !member) {
            sbuf_append(&b, "}", 1);
            open = NULL;
        }
        if (dot && !open) {
            if (!top_first)
                sbuf_append(&b, ",", 1);
            top_first = false;
            open = col->key;
            open_len = (size_t)(dot - col->key);
            sbuf_append(&b, "\"", 1);
            sbuf_append(&b, open, open_len);
            sbuf_append(&b, "\":{", 3);
            member_first = true;
        }
        bool *first = open ? &member_first : &top_first;
        if (!*first)
            sbuf_append(&b, ",", 1);
        *first = false;
        raw_str(&b, name);
        sbuf_append(&b, ":", 1);
        const char *v = here >= 0 ? db_get(r, row, here) : NULL;
        switch (col->kind) {
        case COL_TEXT:
        case COL_TEXT_OMIT:
            if (v)
                raw_str(&b, v);
            else
                sbuf_append(&b, "null", 4);
            break;
        case COL_INT:
            sbuf_printf(&b, "%lld", db_get_ll(r, row, here));
            break;
        case COL_BOOL:
            sbuf_append(&b, db_get_bool(r, row, here) ? "true" : "false", db_get_bool(r, row, here) ? 4 : 5);
            break;
        case COL_JSON:
        case COL_JSON_OMIT:
        case COL_JSON_OBJ:
            if (v && *v)
                raw_json_compact(&b, v);
            else
                sbuf_append(&b, col->kind == COL_JSON_OBJ ? "{}" : "null", col->kind == COL_JSON_OBJ ? 2 : 4);
            break;
        case COL_HOOK: {
            json_object *hv = t->hook(t, col->key, r, row);
            const char *hs = hv ? json_object_to_json_string_ext(hv, JSON_C_TO_STRING_PLAIN |
                                                                     JSON_C_TO_STRING_NOSLASHESCAPE)
                                : "null";
            sbuf_append(&b, hs, strlen(hs));
            json_object_put(hv);
            break;
        }
        default:
            sbuf_append(&b, "null", 4);
        }
    }
    if (open)
        sbuf_append(&b, "}", 1);
    sbuf_append(&b, "}", 1);
    /* Every byte offered was kept (an append fails only out of memory). */
    char *text = b.seen == b.len ? sbuf_detach(&b, NULL) : NULL;
    sbuf_release(&b);
    if (!text)
        return store__row_json(t, r, row);
    json_object *o = json_object_new_object();
    json_object_set_serializer(o, raw_serialize, text, json_object_free_userdata);
    return o;
}

/* ---- the list/get skeleton ---- */

PGresult *store__exec_cols(PGconn *c, const store_table_t *t, const char *head, const char *tail, int n,
                           const char *const *p)
{
    const char *cols = store__cols(t);
    if (!cols)
        return NULL;
    size_t len = strlen(head) + strlen(cols) + strlen(tail) + 1;
    char *sql = malloc(len);
    if (!sql)
        return NULL;
    snprintf(sql, len, "%s%s%s", head, cols, tail);
    PGresult *r = db_exec(c, sql, n, p);
    free(sql);
    return r;
}

json_object *store__rows_json(const store_table_t *t, const PGresult *r)
{
    json_object *arr = json_object_new_array();
    for (int i = 0; i < PQntuples(r); i++)
        json_object_array_add(arr, store__row_json(t, r, i));
    return arr;
}

int store__fetch_one(PGconn *c, const store_table_t *t, const char *tail, int n, const char *const *p,
                     json_object **ret)
{
    PGresult *r = store__exec_cols(c, t, "SELECT ", tail, n, p);
    if (!r)
        return SBX_EDB;
    int rc = PQntuples(r) == 1 ? 0 : SBX_ENOTFOUND;
    if (rc == 0)
        *ret = store__row_json(t, r, 0);
    PQclear(r);
    return rc;
}

int store__fetch_all(PGconn *c, const store_table_t *t, const char *tail, int n, const char *const *p,
                     json_object **ret)
{
    PGresult *r = store__exec_cols(c, t, "SELECT ", tail, n, p);
    if (!r)
        return SBX_EDB;
    *ret = store__rows_json(t, r);
    PQclear(r);
    return 0;
}

json_object *store__wrap(const char *key, json_object *v)
{
    json_object *o = json_object_new_object();
    jsonx_add(o, key, v);
    return o;
}

int store__api_list(PGconn *c, const store_table_t *t, const char *tail, int n, const char *const *p,
                    const char *key, json_object **ret, api_error_t *err)
{
    json_object *arr = NULL;
    if (store__fetch_all(c, t, tail, n, p, &arr) < 0)
        return store__db_error(err);
    *ret = store__wrap(key, arr);
    return 0;
}

int store__api_get(PGconn *c, const store_table_t *t, const char *tail, int n, const char *const *p,
                   const char *key, const char *name, json_object **ret, api_error_t *err)
{
    json_object *one = NULL;
    int rc = store__fetch_one(c, t, tail, n, p, &one);
    if (rc == SBX_ENOTFOUND)
        return api_error_set(err, API_NOT_FOUND, "no %s %.64s", key, name);
    if (rc < 0)
        return store__db_error(err);
    *ret = store__wrap(key, one);
    return 0;
}
