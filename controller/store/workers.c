/* Workers: registration, heartbeats with their inventory, long-poll claims
 * and reports. */
#include "store_int.h"

/* ---- workers ---- */

#define WORKER_MAX_IMAGES 512

/* The images a worker reports: an array of at most WORKER_MAX_IMAGES
 * names. Returns the JSON text to store (malloc'd), NULL when absent, or
 * sets err. */
static int worker_images_text(json_object *body, char **ret, api_error_t *err)
{
    json_object *a = NULL;
    *ret = NULL;
    if (!json_object_object_get_ex(body, "images", &a) || json_object_is_type(a, json_type_null))
        return 0;
    if (!json_object_is_type(a, json_type_array) || json_object_array_length(a) > WORKER_MAX_IMAGES)
        return api_error_set(err, API_INVALID_ARGUMENT, "images must be an array of at most %d names",
                             WORKER_MAX_IMAGES);
    for (size_t i = 0; i < json_object_array_length(a); i++) {
        json_object *e = json_object_array_get_idx(a, i);
        if (!json_object_is_type(e, json_type_string) || json_object_get_string_len(e) == 0 ||
            json_object_get_string_len(e) > SBX_MAX_IMAGE_BYTES)
            return api_error_set(err, API_INVALID_ARGUMENT, "images[%zu] must be an image name", i);
    }
    *ret = jsonx_dump(a);
    return *ret ? 0 : api_error_set(err, API_INTERNAL, "out of memory");
}

/* The images' details a worker reports ("image_details": an object of at
 * most WORKER_MAX_IMAGES names, each {"size":BYTES,"created":UNIX_SECONDS},
 * both optional): the JSON text to store (malloc'd), NULL when absent, or
 * SBX_EINVAL with err. */
static int worker_image_details_text(json_object *body, char **ret, api_error_t *err)
{
    json_object *d = NULL;
    *ret = NULL;
    if (!json_object_object_get_ex(body, "image_details", &d) || json_object_is_type(d, json_type_null))
        return 0;
    if (!json_object_is_type(d, json_type_object) || json_object_object_length(d) > WORKER_MAX_IMAGES)
        return api_error_set(err, API_INVALID_ARGUMENT, "image_details must be an object of at most %d images",
                             WORKER_MAX_IMAGES);
    json_object *clean = json_object_new_object();
    json_object_object_foreach(d, name, v) {
        int64_t size = -1, created = -1;
        if (strlen(name) == 0 || strlen(name) > SBX_MAX_IMAGE_BYTES || !json_object_is_type(v, json_type_object) ||
            (json_object_object_get_ex(v, "size", NULL) && (!jsonx_get_int(v, "size", &size) || size < 0)) ||
            (json_object_object_get_ex(v, "created", NULL) && (!jsonx_get_int(v, "created", &created) ||
                                                               created < 0 || created > 32503680000LL))) {
            json_object_put(clean);
            return api_error_set(err, API_INVALID_ARGUMENT, "image_details[%.64s] must be {\"size\",\"created\"}, "
                                 "whole numbers >= 0", name);
        }
        json_object *one = json_object_new_object();
        if (size >= 0)
            jsonx_add_int(one, "size", size);
        if (created >= 0)
            jsonx_add_int(one, "created", created);
        json_object_object_add(clean, name, one);
    }
    *ret = jsonx_dump(clean);
    json_object_put(clean);
    return *ret ? 0 : api_error_set(err, API_INTERNAL, "out of memory");
}

/* The register body's "networks" ({"class":["mode",…]}, only offered
 * classes) and "probes" ({"class":"text"}), normalised. A worker that says
 * nothing about networks offers only "none": it is never assumed to
 * isolate a network it did not describe. */
static int worker_caps_text(json_object *body, unsigned offered, char **ret_networks, char **ret_probes,
                            api_error_t *err)
{
    json_object *nets = NULL, *probes = NULL;
    json_object_object_get_ex(body, "networks", &nets);
    json_object_object_get_ex(body, "probes", &probes);
    if (nets && !json_object_is_type(nets, json_type_null) && !json_object_is_type(nets, json_type_object))
        return api_error_set(err, API_INVALID_ARGUMENT, "networks must be an object of class: [modes]");
    if (probes && !json_object_is_type(probes, json_type_null) && !json_object_is_type(probes, json_type_object))
        return api_error_set(err, API_INVALID_ARGUMENT, "probes must be an object of class: text");
    json_object *n = json_object_new_object(), *p = json_object_new_object();
    for (int c = ISO_CONTAINER; c <= ISO_MICROVM; c++) {
        const char *cname = isolation_name((isolation_t)c);
        json_object *v;
        if (probes && json_object_is_type(probes, json_type_object) && json_object_object_get_ex(probes, cname, &v)) {
            if (!json_object_is_type(v, json_type_string) || json_object_get_string_len(v) > 512) {
                json_object_put(n);
                json_object_put(p);
                return api_error_set(err, API_INVALID_ARGUMENT, "probes.%s must be a text of at most 512 bytes",
                                     cname);
            }
            jsonx_add(p, cname, json_object_get(v));
        }
        if (!(offered & (1u << c)))
            continue;
        unsigned modes = 1u << NET_NONE;
        if (nets && json_object_is_type(nets, json_type_object) && json_object_object_get_ex(nets, cname, &v)) {
            modes = 0;
            size_t len = json_object_is_type(v, json_type_array) ? json_object_array_length(v) : 0;
            for (size_t i = 0; i < len; i++) {
                json_object *e = json_object_array_get_idx(v, i);
                int m;
                if (!json_object_is_type(e, json_type_string) || net_offer_parse(json_object_get_string(e), &m) < 0)
                    len = 0, modes = 0;
                else
                    modes |= 1u << m;
            }
            if (!json_object_is_type(v, json_type_array) || (len == 0 && json_object_array_length(v) > 0)) {
                json_object_put(n);
                json_object_put(p);
                return api_error_set(err, API_INVALID_ARGUMENT,
                                     "networks.%s must list none, restricted, open or filtered", cname);
            }
        }
        json_object *a = json_object_new_array();
        for (int m = NET_NONE; m < NET_OFFERS; m++)
            if (modes & (1u << m))
                json_object_array_add(a, json_object_new_string(net_offer_name(m)));
        jsonx_add(n, cname, a);
    }
    *ret_networks = jsonx_dump(n);
    *ret_probes = jsonx_dump(p);
    json_object_put(n);
    json_object_put(p);
    return 0;
}

bool store_worker_name_valid(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > SBX_MAX_NAME_BYTES)
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || strchr("._-", *s)))
            return false;
    return true;
}

/* "host:port" or "[v6]:port" a controller can connect to; NULL when absent. */
static int route_address_check(json_object *body, const char **ret, api_error_t *err)
{
    *ret = NULL;
    json_object *v = NULL;
    if (!json_object_object_get_ex(body, "route_address", &v) || json_object_is_type(v, json_type_null))
        return 0;
    const char *a = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
    const char *colon = a ? strrchr(a, ':') : NULL;
    char *end = NULL;
    long port = colon ? strtol(colon + 1, &end, 10) : 0;
    bool ok = a && colon && colon != a && strlen(a) <= 255 && *end == '\0' && port >= 1 && port <= 65535;
    for (const char *p = a; ok && *p; p++)
        ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || strchr(".-:[]", *p);
    if (!ok)
        return api_error_set(err, API_INVALID_ARGUMENT, "route_address must be host:port");
    *ret = a;
    return 0;
}

/* In the register transaction: binds token_id to name when it is unbound
 * and no other live token holds the name (bound to it, or the token the
 * worker of that name last registered with), serialised per name by an
 * advisory lock. 0 when the token acts for name; SBX_EPERM with err a 403
 * otherwise; SBX_EDB. */
static int worker_bind(PGconn *c, const char *token_id, const char *name, api_error_t *err)
{
    const char *lk[] = { name };
    if (db_run(c, "SELECT pg_advisory_xact_lock(hashtext('sandbox.worker_name:' || $1))", 1, lk) < 0)
        return store__db_error(err);
    const char *p[] = { token_id, name };
    PGresult *r = db_exec(c,
                          "WITH b AS (UPDATE api_tokens SET worker_name = $2 WHERE id = $1 AND worker_name IS NULL "
                          "  AND role = 'worker' "
                          "  AND NOT EXISTS (SELECT 1 FROM api_tokens o WHERE o.worker_name = $2 AND o.id <> $1 "
                          "                  AND " STORE_TOKEN_LIVE("o") ") "
                          "  AND NOT EXISTS (SELECT 1 FROM workers w JOIN api_tokens o ON o.id = w.token_id "
                          "                  WHERE w.name = $2 AND o.id <> $1 AND " STORE_TOKEN_LIVE("o") ") "
                          "  RETURNING worker_name) "
                          "SELECT coalesce((SELECT worker_name FROM b), t.worker_name) FROM api_tokens t WHERE t.id = $1",
                          2, p);
    if (!r) {
        store__db_error(err);
        return SBX_EDB;
    }
    int rc = 0;
    const char *bound = PQntuples(r) == 1 && !PQgetisnull(r, 0, 0) ? db_get(r, 0, 0) : NULL;
    if (!bound) {
        api_error_set(err, API_FORBIDDEN, "worker name %.128s belongs to another worker token; make one token per "
                      "worker (sandboxd token create --role worker --worker %.128s)", name, name);
        rc = SBX_EPERM;
    } else if (strcmp(bound, name) != 0) {
        api_error_set(err, API_FORBIDDEN, "this worker token acts for worker %.128s, not %.128s", bound, name);
        rc = SBX_EPERM;
    }
    PQclear(r);
    return rc;
}

/* After a register or a heartbeat of a worker that was (was) unreachable or
 * lost: a worker.ready event (reason why) and, when it was unreachable, a
 * sandbox.reachable one for each of its running sandboxes (a lost one's
 * sandboxes are lost: its inventory decides nothing for them any more).
 * Whether each is still there is the inventory's to say: the first
 * heartbeat fails a sandbox whose container is gone. 0 or SBX_EDB. */
static int worker_heard_again(PGconn *c, const char *worker_id, const char *was, const char *why)
{
    if (!worker_id || !was || (strcmp(was, "unreachable") != 0 && strcmp(was, "lost") != 0))
        return 0;
    const char *p[] = { worker_id, why, was };
    return db_run(c,
                  "WITH s AS (INSERT INTO events (tenant_id, kind, sandbox_id, data) "
                  "  SELECT s.tenant_id, 'sandbox.reachable', s.id, jsonb_build_object('worker', w.name) "
                  "  FROM sandboxes s JOIN workers w ON w.id = s.worker_id "
                  "  WHERE s.worker_id = $1 AND s.phase = 'running' AND $3 = 'unreachable') "
                  "INSERT INTO events (kind, data) SELECT 'worker.ready', jsonb_build_object('worker', name, "
                  "'worker_id', id, 'reason', $2::text, 'was', $3::text) FROM workers WHERE id = $1",
                  3, p) < 0
               ? SBX_EDB
               : 0;
}

int store_worker_register(PGconn *c, json_object *body, const char *token_id, json_object **ret, api_error_t *err)
{
    const char *name = jsonx_get_str(body, "name");
    const char *runtime = jsonx_get_str(body, "runtime");
    json_object *iso = jsonx_get_arr(body, "isolation");
    json_object *cap = jsonx_get_obj(body, "capacity");
    json_object *labels = jsonx_get_obj(body, "labels");
    const char *version = jsonx_get_str(body, "version");
    int64_t cpu = 0, mem = 0, slots = 0;
    if (!name || !store_worker_name_valid(name))
        return api_error_set(err, API_INVALID_ARGUMENT, "name must be 1 to 128 letters, digits, . _ or -");
    if (!runtime || strlen(runtime) > 32)
        return api_error_set(err, API_INVALID_ARGUMENT, "runtime is required");
    if (!iso || json_object_array_length(iso) == 0 || json_object_array_length(iso) > 3)
        return api_error_set(err, API_INVALID_ARGUMENT, "isolation must list 1 to 3 classes");
    if (!cap || !jsonx_get_int(cap, "cpu_millis", &cpu) || !jsonx_get_int(cap, "memory_mib", &mem) ||
        !jsonx_get_int(cap, "slots", &slots) || cpu < 0 || mem < 0 || slots < 0 || cpu > 100000000 ||
        mem > 1000000000 || slots > 100000)
        return api_error_set(err, API_INVALID_ARGUMENT, "capacity needs cpu_millis, memory_mib and slots in range");
    char iso_lit[64] = "{";
    unsigned offered = 0;
    for (size_t i = 0; i < json_object_array_length(iso); i++) {
        json_object *e = json_object_array_get_idx(iso, i);
        isolation_t cls;
        if (!json_object_is_type(e, json_type_string) || isolation_parse(json_object_get_string(e), &cls) < 0)
            return api_error_set(err, API_INVALID_ARGUMENT, "isolation classes are container, gvisor, microvm");
        size_t l = strlen(iso_lit);
        snprintf(iso_lit + l, sizeof iso_lit - l, "%s%s", i ? "," : "", isolation_name(cls));
        offered |= 1u << cls;
    }
    size_t l = strlen(iso_lit);
    snprintf(iso_lit + l, sizeof iso_lit - l, "}");
    const char *route_address = NULL;
    if (route_address_check(body, &route_address, err) < 0)
        return SBX_EINVAL;
    char *nets_text = NULL, *probes_text = NULL, *images_text = NULL;
    if (worker_caps_text(body, offered, &nets_text, &probes_text, err) < 0)
        return SBX_EINVAL;
    char *details_text = NULL;
    if (worker_images_text(body, &images_text, err) < 0 || worker_image_details_text(body, &details_text, err) < 0) {
        free(nets_text);
        free(probes_text);
        free(images_text);
        return SBX_EINVAL;
    }
    kv_list_t lab;
    if (kv_list_from_json(labels, "labels", false, SBX_MAX_LABELS, &lab, err) < 0) {
        free(nets_text);
        free(probes_text);
        free(images_text);
        free(details_text);
        return SBX_EINVAL;
    }
    json_object *lj = kv_list_to_json(&lab);
    kv_list_release(&lab);
    char *labels_text = jsonx_dump(lj);
    json_object_put(lj);
    char id[SBX_ID_MAX], cpus[24], mems[24], slotss[24];
    ids_new("wrk", id);
    snprintf(cpus, sizeof cpus, "%lld", (long long)cpu);
    snprintf(mems, sizeof mems, "%lld", (long long)mem);
    snprintf(slotss, sizeof slotss, "%lld", (long long)slots);
    const char *p[] = { id, name, labels_text, iso_lit, runtime, cpus, mems, slotss, version ? version : "",
                        nets_text, probes_text, images_text ? images_text : "[]", route_address, token_id };
    /* The token's binding first: a refused one changes nothing. */
    int bind_rc = db_begin(c) < 0 ? store__db_error(err) : worker_bind(c, token_id, name, err);
    PGresult *r = bind_rc < 0 ? NULL : store__exec_cols(c, &store__t_worker,
                          "INSERT INTO workers (id, name, labels, isolation, runtime, cpu_millis, memory_mib, slots, "
                          "version, state, networks, probes, images, route_address, token_id) VALUES ($1, $2, "
                          "$3::jsonb, $4::text[], $5, $6, $7, $8, $9, 'ready', $10::jsonb, $11::jsonb, $12::jsonb, "
                          "$13, $14) "
                          "ON CONFLICT (name) DO UPDATE SET labels = EXCLUDED.labels, isolation = EXCLUDED.isolation, "
                          "runtime = EXCLUDED.runtime, cpu_millis = EXCLUDED.cpu_millis, "
                          "memory_mib = EXCLUDED.memory_mib, slots = EXCLUDED.slots, version = EXCLUDED.version, "
                          "networks = EXCLUDED.networks, probes = EXCLUDED.probes, images = EXCLUDED.images, "
                          "route_address = EXCLUDED.route_address, token_id = EXCLUDED.token_id, "
                          "state = CASE WHEN workers.state = 'draining' OR (workers.state IN ('unreachable', "
                          "  'lost') AND workers.resume_state = 'draining') THEN 'draining' ELSE 'ready' END, "
                          "unreachable_since = NULL, unreachable_reason = NULL, lost_at = NULL, resume_state = NULL, "
                          "stopping_at = NULL, inventory_generation = 0, last_heartbeat = now(), "
                          "updated_at = now() RETURNING ",
                          /* the state it had (unreachable, lost: heard again) */
                          ", (SELECT state FROM workers WHERE name = $2)", 14, p);
    free(labels_text);
    free(nets_text);
    free(probes_text);
    free(images_text);
    if (bind_rc < 0) {
        db_rollback(c);
        return bind_rc;
    }
    const char *wid = r ? store__col_text(&store__t_worker, r, 0, "id") : NULL;
    int dr = wid && details_text ? db_run(c, "UPDATE workers SET image_details = $2::jsonb WHERE id = $1", 2,
                                          (const char *const[]){ wid, details_text }) : 0;
    free(details_text);
    json_object *ed = json_object_new_object();
    jsonx_add_str(ed, "worker", name);
    jsonx_add_str(ed, "worker_id", wid);
    if (!r || dr < 0 || store__event_add(c, NULL, "worker.registered", NULL, NULL, ed) < 0 ||
        worker_heard_again(c, wid, db_get(r, 0, PQnfields(r) - 1), "registered again") < 0 ||
        db_commit(c) < 0) {
        PQclear(r);
        store__db_error(err);
        db_rollback(c);
        return SBX_EDB;
    }
    *ret = store__row_json(&store__t_worker, r, 0);
    PQclear(r);
    return 0;
}

int store_cluster_id(PGconn *c, char ret[64])
{
    return store__one_text(c, "SELECT id FROM cluster", 0, NULL, ret, 64);
}

int store_worker_authorize(PGconn *c, const char *token_id, const char *worker_id,
                           char ret_name[SBX_MAX_NAME_BYTES + 1], char ret_bound[SBX_MAX_NAME_BYTES + 1])
{
    const char *p[] = { worker_id, token_id };
    /* The snapshot of t predates b's update: b's row wins when it bound. */
    PGresult *r = db_exec(c,
                          "WITH w AS (SELECT name, token_id FROM workers WHERE id = $1), "
                          "b AS (UPDATE api_tokens SET worker_name = (SELECT name FROM w) WHERE id = $2 "
                          "      AND worker_name IS NULL AND role = 'worker' AND (SELECT token_id FROM w) = $2 "
                          "      RETURNING worker_name) "
                          "SELECT w.name, coalesce((SELECT worker_name FROM b), t.worker_name) "
                          "FROM w, api_tokens t WHERE t.id = $2",
                          2, p);
    if (!r)
        return SBX_EDB;
    int rc = 0;
    if (PQntuples(r) != 1) {
        rc = SBX_ENOTFOUND;
        goto cleanup;
    }
    snprintf(ret_name, SBX_MAX_NAME_BYTES + 1, "%s", db_get(r, 0, 0));
    snprintf(ret_bound, SBX_MAX_NAME_BYTES + 1, "%s", PQgetisnull(r, 0, 1) ? "" : db_get(r, 0, 1));
    if (PQgetisnull(r, 0, 1) || strcmp(ret_name, ret_bound) != 0)
        rc = SBX_EPERM;
cleanup:
    PQclear(r);
    return rc;
}

int store_worker_identity_denied_event(PGconn *c, const char *token_id, const char *worker, const char *why)
{
    json_object *d = json_object_new_object();
    jsonx_add_str(d, "token_id", token_id);
    jsonx_add_str(d, "worker", worker);
    jsonx_add_str(d, "reason", why);
    return store__event_add(c, NULL, "worker.identity_denied", NULL, NULL, d) < 0 ? SBX_EDB : 0;
}

/* Seconds a phase change is trusted over a worker's inventory snapshot (the
 * snapshot may predate a report that arrived before it). */
static int64_t inventory_grace_seconds(const store_limits_t *lim)
{
    return lim->heartbeat_seconds * 2 + 5;
}

/* A string member of an inventory entry: absent (NULL) when optional, else
 * a string of at most max bytes without control characters. */
static int inventory_str(json_object *e, const char *key, size_t i, size_t max, bool required, const char **ret,
                         api_error_t *err)
{
    json_object *v;
    *ret = NULL;
    if (!json_object_object_get_ex(e, key, &v) || json_object_is_type(v, json_type_null)) {
        if (required)
            return api_error_set(err, API_INVALID_ARGUMENT, "inventory[%zu].%s is required", i, key);
        return 0;
    }
    const char *s = json_object_get_string(v);
    size_t n = (size_t)json_object_get_string_len(v);
    if (!json_object_is_type(v, json_type_string) || n > max || strlen(s) != n || utf8_has_control(s))
        return api_error_set(err, API_INVALID_ARGUMENT, "inventory[%zu].%s must be a string of at most %zu bytes "
                             "without control characters", i, key, max);
    *ret = s;
    return 0;
}

/* Checks every inventory entry strictly (a worker's body is not trusted:
 * types, sizes, the observed fields through common/observed.c) and makes
 * *ret_text, the entries as kept on the worker row and matched in SQL:
 * identity and state only, never the output tails. */
static int inventory_check(json_object *inv, char **ret_text, api_error_t *err)
{
    size_t n = json_object_array_length(inv);
    json_object *kept = json_object_new_array();
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(inv, i);
        const char *sbx, *tenant, *ref;
        char what[48];
        observed_t ob;
        snprintf(what, sizeof what, "inventory[%zu]", i);
        if (!json_object_is_type(e, json_type_object)) {
            json_object_put(kept);
            return api_error_set(err, API_INVALID_ARGUMENT, "%s must be an object", what);
        }
        if (inventory_str(e, "sandbox_id", i, SBX_ID_MAX - 1, true, &sbx, err) < 0 ||
            inventory_str(e, "tenant", i, 63, false, &tenant, err) < 0 ||
            inventory_str(e, "ref", i, 128, false, &ref, err) < 0 || observed_from_json(e, what, &ob, err) < 0) {
            json_object_put(kept);
            return SBX_EINVAL;
        }
        json_object *k = json_object_new_object();
        jsonx_add_str(k, "sandbox_id", sbx);
        jsonx_add_str(k, "tenant", tenant ? tenant : "");
        jsonx_add_str(k, "ref", ref ? ref : "");
        jsonx_add_str(k, "state", ob.state);
        json_object_array_add(kept, k);
    }
    *ret_text = jsonx_dump(kept);
    json_object_put(kept);
    if (!*ret_text)
        return api_error_set(err, API_INTERNAL, "out of memory");
    return 0;
}

/* A heartbeat's inventory_delta (docs/worker.md): the changes since the
 * inventory of generation base. Borrowed from the body. */
typedef struct inv_delta {
    int64_t base, generation;
    json_object *upsert; /* entries, as in a full inventory */
    json_object *gone;   /* sandbox ids */
} inv_delta_t;

/* *ret_has tells whether the body has one; 0, or SBX_EINVAL with err set. */
static int inventory_delta_parse(json_object *body, bool *ret_has, inv_delta_t *ret, api_error_t *err)
{
    json_object *d = NULL;
    memset(ret, 0, sizeof *ret);
    *ret_has = json_object_object_get_ex(body, "inventory_delta", &d) && !json_object_is_type(d, json_type_null);
    if (!*ret_has)
        return 0;
    ret->upsert = jsonx_get_arr(d, "upsert");
    ret->gone = jsonx_get_arr(d, "gone");
    if (!json_object_is_type(d, json_type_object) || !jsonx_get_int(d, "base", &ret->base) ||
        !jsonx_get_int(d, "generation", &ret->generation) || ret->base < 1 || ret->generation <= ret->base ||
        !ret->upsert || !ret->gone)
        return api_error_set(err, API_INVALID_ARGUMENT, "inventory_delta needs base (>= 1), generation (> base), "
                             "upsert and gone arrays");
    if (json_object_array_length(ret->upsert) > SBX_MAX_INVENTORY ||
        json_object_array_length(ret->gone) > SBX_MAX_INVENTORY)
        return api_error_set(err, API_INVALID_ARGUMENT, "inventory_delta lists more than %d entries",
                             SBX_MAX_INVENTORY);
    for (size_t i = 0; i < json_object_array_length(ret->gone); i++) {
        json_object *g = json_object_array_get_idx(ret->gone, i);
        const char *id = json_object_get_string(g);
        size_t n = json_object_is_type(g, json_type_string) ? (size_t)json_object_get_string_len(g) : 0;
        if (n == 0 || n >= SBX_ID_MAX || strlen(id) != n || utf8_has_control(id))
            return api_error_set(err, API_INVALID_ARGUMENT, "inventory_delta.gone[%zu] must be a sandbox id", i);
    }
    return 0;
}

static int inv_id_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The stored inventory (kept form, stored_text) with a delta applied: the
 * entries gone or upserted dropped, the upserted ones (kept form, up_text)
 * appended. *ret is malloc'd text. 0, SBX_EINVAL (too many) or SBX_ENOMEM. */
static int inventory_merge(const char *stored_text, const char *up_text, json_object *gone, char **ret,
                           api_error_t *err)
{
    json_object *stored = store__parse_json_text(stored_text), *up = store__parse_json_text(up_text);
    size_t ns = stored && json_object_is_type(stored, json_type_array) ? json_object_array_length(stored) : 0;
    size_t nu = up ? json_object_array_length(up) : 0, ng = json_object_array_length(gone), nk = 0;
    const char **drop = calloc(nu + ng + 1, sizeof *drop);
    json_object *merged = json_object_new_array();
    int rc = 0;
    *ret = NULL;
    if (!drop || !up || !merged) {
        rc = api_error_set(err, API_INTERNAL, "out of memory");
        goto cleanup;
    }
    for (size_t i = 0; i < nu; i++)
        drop[nk++] = jsonx_get_str(json_object_array_get_idx(up, i), "sandbox_id");
    for (size_t i = 0; i < ng; i++)
        drop[nk++] = json_object_get_string(json_object_array_get_idx(gone, i));
    qsort(drop, nk, sizeof *drop, inv_id_cmp);
    for (size_t i = 0; i < ns; i++) {
        json_object *e = json_object_array_get_idx(stored, i);
        const char *id = jsonx_get_str(e, "sandbox_id");
        if (id && !bsearch(&id, drop, nk, sizeof *drop, inv_id_cmp))
            json_object_array_add(merged, json_object_get(e));
    }
    for (size_t i = 0; i < nu; i++)
        json_object_array_add(merged, json_object_get(json_object_array_get_idx(up, i)));
    if (json_object_array_length(merged) > SBX_MAX_INVENTORY) {
        rc = api_error_set(err, API_INVALID_ARGUMENT, "inventory has more than %d entries", SBX_MAX_INVENTORY);
        goto cleanup;
    }
    *ret = jsonx_dump(merged);
    if (!*ret)
        rc = api_error_set(err, API_INTERNAL, "out of memory");
cleanup:
    free(drop);
    json_object_put(merged);
    json_object_put(stored);
    json_object_put(up);
    return rc;
}

/* In the heartbeat's transaction, before the worker row is updated: reads
 * it (no lock: the worker row is locked last, and the update checks the
 * base again) and, when the delta's base is the generation the controller holds,
 * makes *ret_text the inventory with the delta applied (*ret_same: equal
 * to the stored text); otherwise sets
 * *ret_resync (the worker must send a full one) and leaves *ret_text NULL.
 * An unknown worker is neither (the update then answers 404). 0, SBX_EDB,
 * SBX_EINVAL with err set. */
static int heartbeat_delta_apply(PGconn *c, const char *worker_id, const inv_delta_t *d, const char *up_text,
                                 char **ret_text, bool *ret_resync, bool *ret_same, api_error_t *err)
{
    const char *p[] = { worker_id };
    *ret_text = NULL;
    *ret_resync = false;
    PGresult *r = db_exec(c, "SELECT inventory_generation, inventory::text FROM workers WHERE id = $1",
                          1, p);
    if (!r)
        return SBX_EDB;
    int rc = 0;
    *ret_same = false;
    if (PQntuples(r) == 1) {
        if (db_get_ll(r, 0, 0) != d->base)
            *ret_resync = true;
        else if ((rc = inventory_merge(db_get(r, 0, 1), up_text, d->gone, ret_text, err)) == 0)
            *ret_same = strcmp(*ret_text, db_get(r, 0, 1)) == 0;
    }
    PQclear(r);
    return rc;
}

/* SQL: the inventory a heartbeat's passes read: $2, or (NULL: an empty
 * delta, nothing changed) the one the controller holds, read in the
 * database rather than sent back and forth. */
#define HB_INVENTORY "coalesce($2::jsonb, (SELECT inventory FROM workers WHERE id = $1))"

/* Compares a worker's inventory with what the controller wants, inside the
 * heartbeat's transaction: runtime objects it no longer wants go into
 * `remove` (orphans); running sandboxes of this worker whose container
 * stopped (the entry's observed details) or vanished become failed, with
 * the failure the runtime observed. Both respect the inventory grace (the
 * snapshot may predate a report), except a container that finished after
 * the controller last changed the sandbox: that is no stale snapshot.
 * gone_text (a delta's "gone", JSON; NULL after a full inventory) narrows
 * the search for vanished containers to what a delta can have changed. */

static int heartbeat_reconcile(PGconn *c, const store_limits_t *lim, const char *worker_id, json_object *inv,
                               const char *inv_text, const char *gone_text, json_object *remove)
{
    char grace[24];
    snprintf(grace, sizeof grace, "%lld", (long long)inventory_grace_seconds(lim));
    const char *p[] = { worker_id, inv_text, grace };
    int rc = 0;
    /* Stopped containers first: the orphan pass below then lists them for
     * removal in the same answer. At most a batch a beat; the rest next. */
    size_t n = json_object_array_length(inv), done = 0;
    for (size_t i = 0; i < n && rc == 0 && done < SBX_RECONCILE_BATCH; i++) {
        json_object *e = json_object_array_get_idx(inv, i);
        observed_t ob;
        if (observed_from_json(e, "inventory", &ob, NULL) < 0 || !observed_stopped(ob.state) || !ob.has_exit_code)
            continue; /* running, or its details come with a later beat */
        done++;
        const char *sbx = jsonx_get_str(e, "sandbox_id");
        const char *ref = jsonx_get_str(e, "ref");
        const char *fin = observed_time_known(ob.finished_at) ? ob.finished_at : NULL;
        const char *q[] = { sbx, worker_id, grace, fin, ref };
        bool fail = false;
        if (store__one_row(c,
                           "SELECT 1 FROM sandboxes s WHERE s.id = $1 AND s.worker_id = $2 AND s.phase = 'running' "
                           "AND (s.runtime_ref IS NULL OR $5::text IS NULL OR s.runtime_ref = $5) "
                           "AND (s.updated_at < now() - make_interval(secs => $3::bigint) "
                           "     OR ($4::timestamptz IS NOT NULL AND $4::timestamptz > s.updated_at)) "
                           /* stopped by its pause, whose report is on its way:
                            * one in the worker's hands however long ago it
                            * started (a PostgreSQL outage holds its report
                            * back), or one that just succeeded */
                           "AND NOT EXISTS (SELECT 1 FROM operations o WHERE o.sandbox_id = s.id "
                           "  AND o.kind = 'pause' AND (o.state IN ('leased', 'running') OR (o.state = 'succeeded' "
                           "  AND o.updated_at > now() - make_interval(secs => $3::bigint)))) "
                           "FOR UPDATE OF s SKIP LOCKED",
                           5, q, &fail) < 0)
            return SBX_EDB;
        if (!fail)
            continue;
        json_object *f = observed_failure_json(&ob);
        log_warn("store", "sandbox %s on worker %s stopped: %s", sbx, worker_id, jsonx_get_str(f, "message"));
        char *tail = ob.output_tail ? strndup(ob.output_tail, ob.output_tail_len) : NULL;
        rc = store__sandbox_fail_observed(c, sbx, f, tail);
        free(tail);
    }
    if (rc < 0)
        return rc;
    /* An entry of a sandbox live on this worker is never an orphan: those
     * are set aside first from one index-only scan of the worker's live
     * sandboxes (migration 0014's sandboxes_worker_inventory); only the
     * others (usually none) are looked up by primary key, where the
     * lateral LIMIT keeps the planner from hashing all of sandboxes. */
    PGresult *r = db_exec(c,
                          "WITH inv AS (SELECT e->>'sandbox_id' AS id, e->>'ref' AS ref "
                          "  FROM jsonb_array_elements(" HB_INVENTORY ") e), "
                          "rest AS (SELECT inv.id, inv.ref FROM inv WHERE inv.id NOT IN (SELECT m.id FROM sandboxes m "
                          "  WHERE m.worker_id = $1 AND m.phase NOT IN ('deleted', 'failed', 'lost'))) "
                          "SELECT rest.id, rest.ref FROM rest "
                          "LEFT JOIN LATERAL (SELECT s.id, s.phase, s.worker_id, s.updated_at FROM sandboxes s "
                          "  WHERE s.id = rest.id LIMIT 1) s ON true "
                          "WHERE s.id IS NULL OR s.phase IN ('deleted', 'failed', 'lost') "
                          "   OR (s.worker_id IS DISTINCT FROM $1 "
                          "       AND s.updated_at < now() - make_interval(secs => $3::bigint)) "
                          "LIMIT 256",
                          3, p);
    if (!r)
        return SBX_EDB;
    for (int i = 0; i < PQntuples(r); i++) {
        json_object *o = json_object_new_object();
        jsonx_add_str(o, "sandbox_id", db_get(r, i, 0));
        jsonx_add_str(o, "ref", db_get(r, i, 1));
        json_object_array_add(remove, o);
    }
    PQclear(r);
    /* After a delta, only the sandboxes that can have just gone missing: a
     * running one changed within the last two full inventories (migration
     * 0014's sandboxes_worker_running), or one the delta says is gone; an
     * older one missing since before was found then, or by the last full
     * inventory, which checks them all. */
    char window[24];
    snprintf(window, sizeof window, "%d", 2 * SBX_INVENTORY_FULL_SECONDS);
    const char *pm[] = { worker_id, inv_text, grace, gone_text, window };
    r = db_exec(c,
                "SELECT s.id FROM sandboxes s WHERE s.worker_id = $1 AND s.phase = 'running' "
                "AND s.updated_at < now() - make_interval(secs => $3::bigint) "
                "AND ($4::jsonb IS NULL OR s.updated_at > now() - make_interval(secs => $3::bigint + $5::bigint) "
                "     OR s.id IN (SELECT jsonb_array_elements_text($4::jsonb))) "
                "AND s.id NOT IN (SELECT e->>'sandbox_id' FROM jsonb_array_elements(" HB_INVENTORY ") e "
                "  WHERE e->>'sandbox_id' IS NOT NULL) " /* hashed once, not a scan of the inventory per row */
                "FOR UPDATE OF s SKIP LOCKED",
                5, pm);
    if (!r)
        return SBX_EDB;
    for (int i = 0; i < PQntuples(r) && rc == 0; i++) {
        const char *sbx = db_get(r, i, 0);
        /* The worker is alive and says the container is gone: a known
         * end (failed, reason removed), not an unknown one (lost). */
        log_warn("store", "sandbox %s: its container vanished from worker %s; marking it failed (removed)", sbx,
                 worker_id);
        rc = store__sandbox_fail_observed(c, sbx, observed_removed_failure_json(), NULL);
    }
    PQclear(r);
    return rc;
}

/* Moves the running operations of worker $1 that pick (a CTE "l" of their
 * ids, from $1 and $2 = arg, locked in id order: operations first, the
 * lock order) back to leased, with their operation.leased events (reason
 * why), in one statement; its answer lists their ids. NULL on error. */
static PGresult *ops_back_to_leased(PGconn *c, const store_limits_t *lim, const char *worker_id, const char *pick,
                                    const char *arg, const char *why)
{
    assert(op_transition_allowed(OP_RUNNING, OP_LEASED));
    char lease[24], sql[2048];
    snprintf(lease, sizeof lease, "%lld", (long long)lim->lease_seconds);
    snprintf(sql, sizeof sql,
             "WITH %s, "
             "o AS (UPDATE operations o SET state = 'leased', started_at = NULL, claim_poll = NULL, "
             "  updated_at = now(), lease_expires_at = now() + make_interval(secs => $3::bigint) "
             "  FROM l WHERE o.id = l.id AND o.state = 'running' "
             "  RETURNING o.id, o.tenant_id, o.sandbox_id, o.kind, o.attempt), "
             "e AS (INSERT INTO events (tenant_id, kind, sandbox_id, operation_id, data) "
             "  SELECT tenant_id, 'operation.leased', sandbox_id, id, "
             "  jsonb_strip_nulls(jsonb_build_object('kind', kind, 'from', 'running', 'to', 'leased', "
             "  'attempt', CASE WHEN attempt > 0 THEN attempt END, 'reason', $4::text, "
             "  'worker', (SELECT name FROM workers w WHERE w.id = $1))) FROM o ORDER BY id) "
             "SELECT id FROM o",
             pick);
    const char *p[] = { worker_id, arg, lease, why };
    return db_exec(c, sql, 4, p);
}

/* What a stopping worker gives back (unstarted, JSON text): the
 * assignments it took and never started, at the attempt it was handed,
 * leased to it again (an operation.leased event, reason "returned"): a
 * create then goes elsewhere at once (heartbeat_renew), an exec or a delete
 * waits for the worker's return, as a lease it never took would. First in
 * the heartbeat's transaction (the lock order). 0 or SBX_EDB. */
static int heartbeat_unstarted(PGconn *c, const store_limits_t *lim, const char *worker_id, const char *unstarted)
{
    PGresult *r = ops_back_to_leased(c, lim, worker_id,
                                     "x AS (SELECT operation_id, attempt FROM jsonb_to_recordset($2::jsonb) "
                                     "  AS x(operation_id text, attempt bigint)), "
                                     "l AS (SELECT o.id FROM operations o JOIN x ON x.operation_id = o.id "
                                     "  AND x.attempt = o.attempt WHERE o.lease_worker_id = $1 "
                                     "  AND o.state = 'running' ORDER BY o.id FOR NO KEY UPDATE OF o)",
                                     unstarted, "returned");
    if (!r)
        return SBX_EDB;
    PQclear(r);
    return 0;
}

/* Renews the worker's leases in the heartbeat's transaction: only for what
 * it says it holds (and for what it has not been handed yet), so an
 * assignment that went to a connection nobody read expires instead of
 * living for ever. A stopping worker takes nothing more: a create it was
 * leased and has not started expires now, for the lease pass to place
 * elsewhere (an exec or a delete belongs to this worker's sandbox: it
 * waits for the worker's next process, as before). 0 or SBX_EDB. */
static int heartbeat_renew(PGconn *c, const char *worker_id, const char *lease, bool stopping, json_object *body)
{
    json_object *holding = NULL;
    char *holding_text = NULL;
    if (json_object_object_get_ex(body, "holding", &holding) && json_object_is_type(holding, json_type_array) &&
        json_object_array_length(holding) <= SBX_MAX_INVENTORY)
        holding_text = jsonx_dump(holding);
    const char *pl[] = { worker_id, lease, holding_text, stopping ? "true" : "false" };
    /* Runs before the worker row is written (lock order: operations in id
     * order, then sandboxes, then workers), so it reads this beat's
     * "stopping" itself. */
    int renew = db_run(c, "WITH l AS (SELECT o.id, o.state, o.kind FROM operations o "
                          "  WHERE o.lease_worker_id = $1 AND (o.state = 'leased' OR "
                          "  (o.state = 'running' AND ($3::jsonb IS NULL OR "
                          "   o.id IN (SELECT jsonb_array_elements_text($3::jsonb))))) "
                          "  ORDER BY o.id FOR NO KEY UPDATE) "
                          "UPDATE operations o SET lease_expires_at = CASE WHEN o.state = 'leased' AND "
                          "  o.kind = 'create' AND (w.stopping_at IS NOT NULL OR $4::boolean) THEN now() "
                          "  ELSE now() + make_interval(secs => $2::bigint) END "
                          "FROM l, workers w WHERE o.id = l.id AND w.id = $1 AND o.lease_worker_id = $1 "
                          "AND o.state IN ('leased', 'running')",
                       4, pl);
    free(holding_text);
    return renew < 0 ? SBX_EDB : 0;
}

/* What a heartbeat's body says, checked (texts malloc'd, the rest
 * borrowed from the body). */
typedef struct heartbeat_in {
    char *unstarted_text;     /* [{"operation_id","attempt"}] a stopping worker gives back, or NULL */
    json_object *inv;         /* a full inventory, or NULL */
    inv_delta_t delta;        /* when has_delta */
    bool has_delta;
    int64_t full_gen;         /* a full inventory's inventory_generation (0: none) */
    char *inv_text, *up_text, *images_text, *details_text;
} heartbeat_in_t;

static void heartbeat_in_release(heartbeat_in_t *in)
{
    free(in->unstarted_text);
    free(in->inv_text);
    free(in->up_text);
    free(in->images_text);
    free(in->details_text);
}

static int heartbeat_in_parse(json_object *body, heartbeat_in_t *in, api_error_t *err)
{
    memset(in, 0, sizeof *in);
    /* No inventory means the worker could not list its runtime: the
     * heartbeat still counts, and the last known inventory stays. */
    json_object *inv = NULL;
    if (json_object_object_get_ex(body, "inventory", &inv) && !json_object_is_type(inv, json_type_null) &&
        !json_object_is_type(inv, json_type_array))
        return api_error_set(err, API_INVALID_ARGUMENT, "inventory must be an array");
    in->inv = inv && json_object_is_type(inv, json_type_array) ? inv : NULL;
    if (in->inv && json_object_array_length(in->inv) > SBX_MAX_INVENTORY)
        return api_error_set(err, API_INVALID_ARGUMENT, "inventory has more than %d entries", SBX_MAX_INVENTORY);
    if (inventory_delta_parse(body, &in->has_delta, &in->delta, err) < 0)
        return SBX_EINVAL;
    if (in->has_delta && in->inv)
        return api_error_set(err, API_INVALID_ARGUMENT, "inventory and inventory_delta exclude each other");
    if (jsonx_get_int(body, "inventory_generation", &in->full_gen) && in->full_gen < 0)
        return api_error_set(err, API_INVALID_ARGUMENT, "inventory_generation must be >= 0");
    json_object *un = NULL;
    if (json_object_object_get_ex(body, "unstarted", &un) && !json_object_is_type(un, json_type_null)) {
        if (!json_object_is_type(un, json_type_array) || json_object_array_length(un) > SBX_MAX_INVENTORY)
            return api_error_set(err, API_INVALID_ARGUMENT, "unstarted must be an array of at most %d entries",
                                 SBX_MAX_INVENTORY);
        for (size_t i = 0; i < json_object_array_length(un); i++) {
            json_object *e = json_object_array_get_idx(un, i);
            const char *op = jsonx_get_str(e, "operation_id");
            int64_t attempt;
            if (!op || !ids_valid("op", op) || !jsonx_get_int(e, "attempt", &attempt) || attempt < 0)
                return api_error_set(err, API_INVALID_ARGUMENT,
                                     "unstarted[%zu] needs operation_id (an operation id) and attempt (>= 0)", i);
        }
        if (json_object_array_length(un) && !(in->unstarted_text = jsonx_dump(un)))
            return api_error_set(err, API_INTERNAL, "out of memory");
    }
    if ((in->inv && inventory_check(in->inv, &in->inv_text, err) < 0) ||
        (in->has_delta && inventory_check(in->delta.upsert, &in->up_text, err) < 0) ||
        worker_images_text(body, &in->images_text, err) < 0 ||
        worker_image_details_text(body, &in->details_text, err) < 0) {
        heartbeat_in_release(in);
        return SBX_EINVAL;
    }
    return 0;
}

/* Reads the running execs of this worker a client cancelled (it kills
 * them), commits, and makes the heartbeat's answer from the worker row r;
 * it takes remove. The inventory part: the generation applied, or a full
 * inventory asked for. 0, or SBX_EDB with nothing committed. */
static int heartbeat_answer(PGconn *c, const char *worker_id, const PGresult *r, json_object *remove, bool resync,
                            bool applied, int64_t gen, json_object **ret)
{
    const char *p[] = { worker_id };
    PGresult *cr = db_exec(c, "SELECT id FROM operations WHERE lease_worker_id = $1 AND state = 'running' "
                              "AND cancel_requested_at IS NOT NULL ORDER BY cancel_requested_at LIMIT 256", 1, p);
    if (!cr || db_commit(c) < 0) {
        if (cr)
            PQclear(cr);
        json_object_put(remove);
        return SBX_EDB;
    }
    json_object *cancel = json_object_new_array();
    for (int i = 0; i < PQntuples(cr); i++)
        json_object_array_add(cancel, json_object_new_string(db_get(cr, i, 0)));
    PQclear(cr);
    *ret = json_object_new_object();
    jsonx_add(*ret, "worker", store__row_json(&store__t_worker, r, 0));
    jsonx_add(*ret, "remove", remove);
    jsonx_add(*ret, "cancel", cancel);
    if (resync)
        jsonx_add_bool(*ret, "inventory_resync", true);
    else if (applied)
        jsonx_add_int(*ret, "inventory_generation", gen);
    return 0;
}

/* The worker row's update at the end of a beat (lock order: last). With
 * p[5] set (the base of an applied delta) it writes only while the stored
 * generation is still that base: a register in between answers 0 rows, and
 * the beat is then recorded without its inventory (p[1], p[4], p[5] NULL)
 * and *ret_resync set, to ask for a full one. */
static PGresult *heartbeat_worker_update(PGconn *c, const char *p[7], bool *ret_resync)
{
    static const char sql[] =
        "UPDATE workers SET last_heartbeat = now(), "
        "inventory = CASE WHEN $2::jsonb IS NULL OR inventory = $2::jsonb THEN inventory "
        "  ELSE $2::jsonb END, "
        "inventory_generation = coalesce($5::bigint, inventory_generation), "
        "images = coalesce($3::jsonb, images), updated_at = now(), "
        "image_details = CASE WHEN $7::jsonb IS NULL OR image_details = $7::jsonb THEN image_details "
        "  ELSE $7::jsonb END, "
        "state = CASE WHEN state IN ('unreachable', 'lost') THEN coalesce(resume_state, 'ready') ELSE state END, "
        "unreachable_since = NULL, unreachable_reason = NULL, lost_at = NULL, resume_state = NULL, "
        "stopping_at = CASE WHEN $4::boolean THEN coalesce(stopping_at, now()) "
        "  ELSE stopping_at END "
        "FROM (SELECT state AS was FROM workers WHERE id = $1) o "
        "WHERE id = $1 AND ($6::bigint IS NULL OR inventory_generation = $6::bigint) RETURNING ";
    /* the table's columns, then the state it had (lost: heard again) */
    PGresult *r = store__exec_cols(c, &store__t_worker, sql, ", o.was", 7, p);
    if (r && PQntuples(r) == 0 && p[5]) {
        PQclear(r);
        *ret_resync = true;
        p[1] = p[4] = p[5] = NULL;
        r = store__exec_cols(c, &store__t_worker, sql, ", o.was", 7, p);
    }
    return r;
}

/* store_worker_heartbeat once its body is parsed into in (whose texts it
 * takes, all but details_text, the caller's). */
static int heartbeat_parsed(PGconn *c, const store_limits_t *lim, const char *worker_id, json_object *body,
                            heartbeat_in_t in, const char *details_text, json_object **ret, api_error_t *err)
{
    bool resync = false, same = false;
    char *inv_text = in.inv_text, *images_text = in.images_text, *up_text = in.up_text;
    inv_delta_t delta = in.delta;
    bool has_delta = in.has_delta;
    int64_t full_gen = in.full_gen;
    json_object *inv = in.inv;
    char lease[24];
    snprintf(lease, sizeof lease, "%lld", (long long)lim->lease_seconds);
    bool stopping = false;
    jsonx_get_bool(body, "stopping", &stopping);
    char gen[24], base[24];
    json_object *remove = NULL;
    PGresult *r = NULL;
    if (db_begin(c) < 0) {
        free(inv_text);
        free(up_text);
        free(images_text);
        return store__db_error(err);
    }
    /* Lock order (docs/architecture.md "Concurrency"): the leases
     * (operations), then the inventory (sandboxes, and capacity it gives
     * back), the worker row last, as every report and placement does. The
     * delta's base inventory is read without a lock; the final update
     * checks that it is still the base. */
    if ((in.unstarted_text && heartbeat_unstarted(c, lim, worker_id, in.unstarted_text) < 0) ||
        heartbeat_renew(c, worker_id, lease, stopping, body) < 0)
        goto db_fail;
    /* A delta that says nothing changed needs neither the stored
     * inventory nor a merge: the update below checks its base. */
    bool empty_delta = has_delta && json_object_array_length(delta.upsert) == 0 &&
                       json_object_array_length(delta.gone) == 0;
    if (empty_delta) {
        /* Its base must be what this controller holds (the generation
         * alone: the inventory stays unread). */
        char held[24] = "";
        if (store__one_text(c, "SELECT inventory_generation FROM workers WHERE id = $1", 1,
                            (const char *const[]){ worker_id }, held, sizeof held) == SBX_EDB)
            goto db_fail;
        if (strtoll(held, NULL, 10) != delta.base) {
            empty_delta = false;
            resync = true; /* nothing of it is applied: a full one next */
        } else {
            same = true;
        }
    }
    if (has_delta && !empty_delta && !resync) {
        int dr = heartbeat_delta_apply(c, worker_id, &delta, up_text, &inv_text, &resync, &same, err);
        if (dr < 0) {
            free(images_text);
            free(up_text);
            db_rollback(c);
            return dr == SBX_EDB ? store__db_error(err) : dr;
        }
    }
    remove = json_object_new_array();
    /* A delta's upsert has every stopped entry (with its details) again
     * each beat: the stopped pass reads it as it reads a full inventory. */
    char *gone_text = has_delta ? jsonx_dump(delta.gone) : NULL;
    int hr = inv_text || empty_delta ? heartbeat_reconcile(c, lim, worker_id, has_delta ? delta.upsert : inv, inv_text,
                                                           gone_text, remove)
                                     : 0;
    free(gone_text);
    if (hr < 0)
        goto db_fail;
    /* The generation the inventory now has: a full one's, an applied
     * delta's; NULL (kept) without an inventory or when a resync is asked. */
    snprintf(gen, sizeof gen, "%lld", (long long)(has_delta ? delta.generation : full_gen));
    snprintf(base, sizeof base, "%lld", (long long)delta.base);
    /* An unchanged inventory is not written again (the stored value, and
     * its TOAST chunks, stay as they are). */
    bool inv_said = inv_text || empty_delta;
    const char *p[7] = { worker_id, same ? NULL : inv_text, images_text, stopping ? "true" : "false",
                         inv_said ? gen : NULL, has_delta && inv_said ? base : NULL, details_text };
    r = heartbeat_worker_update(c, p, &resync);
    if (!r)
        goto db_fail;
    if (PQntuples(r) != 1) {
        PQclear(r);
        json_object_put(remove);
        free(images_text);
        db_rollback(c);
        free(inv_text);
        free(up_text);
        return api_error_set(err, API_NOT_FOUND, "no worker %.64s; register again", worker_id);
    }
    free(images_text);
    images_text = NULL;
    /* Heard again after it was unreachable or lost: say so, in the
     * heartbeat's transaction. */
    if (worker_heard_again(c, worker_id, db_get(r, 0, PQnfields(r) - 1), "heard again") < 0) {
        PQclear(r);
        goto db_fail;
    }
    bool applied = p[4] != NULL; /* an inventory was written (not when a resync was asked) */
    int ar = heartbeat_answer(c, worker_id, r, remove, resync, applied, has_delta ? delta.generation : full_gen, ret);
    remove = NULL; /* heartbeat_answer took it */
    PQclear(r);
    if (ar < 0)
        goto db_fail;
    free(inv_text);
    free(up_text);
    return 0;
db_fail:
    json_object_put(remove);
    free(images_text);
    free(inv_text);
    free(up_text);
    store__db_error(err);
    db_rollback(c);
    return SBX_EDB;
}

int store_worker_heartbeat(PGconn *c, const store_limits_t *lim, const char *worker_id, json_object *body,
                           json_object **ret, api_error_t *err)
{
    heartbeat_in_t in;
    json_object *snaps = NULL, *vols = NULL, *vsup = NULL;
    if (json_object_object_get_ex(body, "snapshots", &snaps) && !json_object_is_type(snaps, json_type_null) &&
        (!json_object_is_type(snaps, json_type_array) || json_object_array_length(snaps) > SBX_MAX_INVENTORY))
        return api_error_set(err, API_INVALID_ARGUMENT, "snapshots must be an array of at most %d entries",
                             SBX_MAX_INVENTORY);
    if (json_object_object_get_ex(body, "volumes", &vols) && !json_object_is_type(vols, json_type_null) &&
        (!json_object_is_type(vols, json_type_array) || json_object_array_length(vols) > SBX_MAX_INVENTORY))
        return api_error_set(err, API_INVALID_ARGUMENT, "volumes must be an array of at most %d entries",
                             SBX_MAX_INVENTORY);
    if (json_object_object_get_ex(body, "volume_support", &vsup) && !json_object_is_type(vsup, json_type_null) &&
        !json_object_is_type(vsup, json_type_boolean))
        return api_error_set(err, API_INVALID_ARGUMENT, "volume_support must be a boolean");
    if (heartbeat_in_parse(body, &in, err) < 0)
        return SBX_EINVAL;
    char *details_text = in.details_text;
    in.details_text = NULL;
    int rc = heartbeat_parsed(c, lim, worker_id, body, in, details_text, ret, err);
    free(details_text);
    free(in.unstarted_text);
    /* Its last one, as it stops on purpose: unreachable (restarting) now,
     * not a worker timeout later. */
    bool stopped = false;
    if (rc == 0 && jsonx_get_bool(body, "stopped", &stopped) && stopped &&
        store_worker_stopped(c, lim, worker_id) < 0) {
        json_object_put(*ret);
        *ret = NULL;
        return store__db_error(err);
    }
    /* The snapshots it holds that no live row wants there: it removes them. */
    json_object *unwanted = NULL;
    if (rc == 0 && snaps && json_object_is_type(snaps, json_type_array) &&
        store_snapshot_unwanted(c, worker_id, snaps, &unwanted, err) == 0) {
        if (json_object_array_length(unwanted) > 0)
            jsonx_add(*ret, "remove_snapshots", unwanted);
        else
            json_object_put(unwanted);
    }
    /* Whether it can hold volumes (placement sends them only there), and
     * the volumes it holds that no live row places there: it removes them. */
    if (rc == 0) {
        const char *p[] = { worker_id, vsup && json_object_get_boolean(vsup) ? "true" : "false" };
        if (db_run(c, "UPDATE workers SET volumes = $2::boolean WHERE id = $1 AND volumes <> $2::boolean", 2, p) < 0)
            log_warn("store", "cannot record worker %s's volume support: %s", worker_id, db_last_error());
    }
    unwanted = NULL;
    if (rc == 0 && vols && json_object_is_type(vols, json_type_array) &&
        store_volume_unwanted(c, worker_id, vols, &unwanted, err) == 0) {
        if (json_object_array_length(unwanted) > 0)
            jsonx_add(*ret, "remove_volumes", unwanted);
        else
            json_object_put(unwanted);
    }
    return rc;
}

int store_worker_set_draining(PGconn *c, const char *name, bool drain, json_object **ret, api_error_t *err)
{
    const char *p[] = { name, drain ? "draining" : "ready" };
    /* An unreachable or lost worker stays so until it is heard again, and
     * is then in the state asked now. */
    PGresult *r = NULL;
    int rc = store__begin_returning(c, &store__t_worker,
                                    "UPDATE workers SET state = CASE WHEN state IN ('unreachable', 'lost') THEN state "
                                    "ELSE $2 END, resume_state = CASE WHEN state IN ('unreachable', 'lost') THEN $2 "
                                    "END, updated_at = now() WHERE name = $1 RETURNING ", 2, p, &r);
    if (rc == SBX_ENOTFOUND)
        return api_error_set(err, API_NOT_FOUND, "no worker named %.128s", name);
    if (rc < 0)
        return store__db_error(err);
    json_object *ed = json_object_new_object();
    jsonx_add_str(ed, "worker", name);
    jsonx_add_str(ed, "worker_id", store__col_text(&store__t_worker, r, 0, "id"));
    if (store__event_add(c, NULL, drain ? "worker.draining" : "worker.resumed", NULL, NULL, ed) < 0 || db_commit(c) < 0) {
        PQclear(r);
        db_rollback(c);
        return store__db_error(err);
    }
    *ret = json_object_new_object();
    jsonx_add(*ret, "worker", store__row_json(&store__t_worker, r, 0));
    PQclear(r);
    return 0;
}

int store_worker_list(PGconn *c, json_object **ret, api_error_t *err)
{
    return store__api_list(c, &store__t_worker, " FROM workers ORDER BY name", 0, NULL, "workers", ret, err);
}

int store_images_list(PGconn *c, json_object **ret, api_error_t *err)
{
    char lim[16];
    snprintf(lim, sizeof lim, "%d", SBX_IMAGES_LIST_MAX);
    const char *p[] = { lim };
    PGresult *r = db_exec(c,
                          "SELECT i.img, jsonb_agg(w.name ORDER BY w.name)::text, "
                          "  (SELECT coalesce(jsonb_agg(DISTINCT cls ORDER BY cls), '[]') FROM workers w2, "
                          "   unnest(w2.isolation) cls WHERE w2.state = 'ready' AND w2.images ? i.img)::text, "
                          /* the workers' own copies may differ: the newest's */
                          "  (array_agg(w.image_details -> i.img -> 'size' ORDER BY "
                          "   (w.image_details -> i.img ->> 'created')::bigint DESC NULLS LAST))[1]::text, "
                          "  to_char(to_timestamp(max((w.image_details -> i.img ->> 'created')::bigint)) "
                          "   AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') "
                          "FROM workers w CROSS JOIN LATERAL jsonb_array_elements_text(w.images) AS i(img) "
                          "WHERE w.state = 'ready' GROUP BY i.img ORDER BY i.img LIMIT $1::int",
                          1, p);
    if (!r)
        return store__db_error(err);
    json_object *arr = json_object_new_array();
    for (int i = 0; i < PQntuples(r); i++) {
        json_object *o = json_object_new_object();
        jsonx_add_str(o, "name", db_get(r, i, 0));
        jsonx_add(o, "workers", store__parse_json_text(db_get(r, i, 1)));
        jsonx_add(o, "isolation", store__parse_json_text(db_get(r, i, 2)));
        /* null when no worker said (an older worker, a runtime that keeps none) */
        const char *size = db_get(r, i, 3), *created = db_get(r, i, 4);
        jsonx_add(o, "size", size && *size && strcmp(size, "null") != 0
                                 ? json_object_new_int64(strtoll(size, NULL, 10)) : NULL);
        jsonx_add(o, "created", created && *created ? json_object_new_string(created) : NULL);
        json_object_array_add(arr, o);
    }
    PQclear(r);
    *ret = arr;
    return 0;
}

int store_worker_unclaim(PGconn *c, const store_limits_t *lim, const char *worker_id, const char *const *polls,
                         int n, int *ret_n, api_error_t *err)
{
    *ret_n = 0;
    if (n <= 0)
        return 0;
    /* a text[] literal: the ids are letters, digits, '-' and '_' (checked) */
    if (n > SBX_POLL_UNANSWERED_MAX + 1)
        n = SBX_POLL_UNANSWERED_MAX + 1;
    char arr[(SBX_POLL_UNANSWERED_MAX + 1) * (SBX_POLL_ID_MAX + 1) + 3] = "{";
    for (int i = 0; i < n; i++) {
        strncat(arr, polls[i], SBX_POLL_ID_MAX);
        strcat(arr, i + 1 < n ? "," : "");
    }
    strcat(arr, "}");
    PGresult *r = ops_back_to_leased(c, lim, worker_id,
                                     "l AS (SELECT id FROM operations WHERE lease_worker_id = $1 "
                                     "  AND state = 'running' AND claim_poll = ANY($2::text[]) "
                                     "  ORDER BY id FOR NO KEY UPDATE)",
                                     arr, "answer_lost");
    if (!r)
        return store__db_error(err);
    *ret_n = PQntuples(r);
    PQclear(r);
    return 0;
}

int store_worker_claim(PGconn *c, const store_limits_t *lim, const char *worker_id, int max, int tenant_cap,
                       const char *poll_id, json_object **ret, int *ret_n, api_error_t *err)
{
    *ret_n = 0;
    if (max < 1 || max > SBX_CLAIM_MAX)
        max = SBX_CLAIM_MAX;
    if (tenant_cap < 0)
        tenant_cap = 0;
    assert(op_transition_allowed(OP_LEASED, OP_RUNNING));
    char maxs[16], bytes[24], lease[24], caps[16];
    snprintf(maxs, sizeof maxs, "%d", max);
    snprintf(bytes, sizeof bytes, "%u", SBX_CLAIM_BYTES_MAX);
    snprintf(lease, sizeof lease, "%lld", (long long)lim->lease_seconds);
    snprintf(caps, sizeof caps, "%d", tenant_cap);
    const char *p[] = { worker_id, maxs, bytes, lease, caps, poll_id && *poll_id ? poll_id : NULL };
    const store_table_t *t = &store__t_assignment;
    /* One statement: the operations leased to this worker, in turns by
     * tenant (counting what each already runs here, its oldest first, so
     * one tenant's backlog does not hold another's back on this worker),
     * each tenant's only while its turn is within its executor cap ($5,
     * tightened by its policy; a delete always: it may be what ends the
     * tenant's long commands), as many as fit the answer (requests carry
     * inline stdin: the first always, the rest while their requests add up
     * to at most $3 bytes; the others wait for the next poll), each moved
     * leased → running with a fresh lease (from now on only the worker's
     * heartbeats naming it renew it) recording the poll ($6) that hands it
     * out, and its event, a create's sandbox to provisioning with its
     * event, the events in claim order. */
    PGresult *r = store__exec_cols(
        c, t,
        "WITH q AS (SELECT o.id, q0.turn, q0.created_at, octet_length(o.request::text) AS len "
        "  FROM (SELECT id, created_at, turn FROM (SELECT l.id, l.created_at, l.kind, coalesce(r.n, 0) + "
        "    row_number() OVER (PARTITION BY l.tenant_id ORDER BY l.created_at) AS turn, "
        "    least(nullif($5::int, 0), (tn.policy->>'max_executors_per_worker')::int) AS cap "
        "    FROM operations l LEFT JOIN (SELECT tenant_id, count(*) AS n FROM operations "
        "      WHERE lease_worker_id = $1 AND state = 'running' GROUP BY tenant_id) r ON r.tenant_id = l.tenant_id "
        "    LEFT JOIN tenants tn ON tn.id = l.tenant_id "
        "    WHERE l.lease_worker_id = $1 AND l.state = 'leased') l0 "
        "    WHERE l0.kind = 'delete' OR l0.cap IS NULL OR l0.turn <= l0.cap "
        "    ORDER BY turn, created_at LIMIT $2::int) q0 "
        "  JOIN operations o ON o.id = q0.id WHERE o.state = 'leased' "
        "  ORDER BY q0.turn, q0.created_at FOR UPDATE OF o SKIP LOCKED), "
        "k AS (SELECT id, turn, created_at FROM (SELECT id, turn, created_at, row_number() OVER w AS rn, "
        "  sum(len) OVER w AS upto FROM q WINDOW w AS (ORDER BY turn, created_at)) z "
        "  WHERE rn = 1 OR upto <= $3::bigint), "
        "o AS (UPDATE operations o SET state = 'running', updated_at = now(), started_at = now(), "
        "  claim_poll = $6, lease_expires_at = now() + make_interval(secs => $4::bigint) FROM k "
        "  WHERE o.id = k.id AND o.state = 'leased' "
        "  RETURNING o.*, k.turn AS claim_turn, k.created_at AS claim_at, "
        "  extract(epoch FROM now() - o.leased_at) AS since_leased), "
        "sp AS (UPDATE sandboxes s SET phase = 'provisioning', updated_at = now() FROM o "
        "  WHERE o.kind = 'create' AND s.id = o.sandbox_id "
        "  RETURNING s.id, s.tenant_id, s.worker_id, o.claim_turn, o.claim_at), "
        "e AS (INSERT INTO events (tenant_id, kind, sandbox_id, operation_id, data) "
        "  SELECT tenant_id, kind, sandbox_id, operation_id, data FROM ("
        "    SELECT o.tenant_id, 'operation.running' AS kind, o.sandbox_id, o.id AS operation_id, "
        "      jsonb_strip_nulls(jsonb_build_object('kind', o.kind, 'from', 'leased', 'to', 'running', "
        "      'attempt', CASE WHEN o.attempt > 0 THEN o.attempt END, "
        "      'worker', (SELECT name FROM workers w WHERE w.id = o.lease_worker_id))) AS data, "
        "      o.claim_turn, o.claim_at, 0 AS n FROM o "
        "    UNION ALL SELECT sp.tenant_id, 'sandbox.provisioning', sp.id, NULL, "
        "      jsonb_build_object('worker', (SELECT name FROM workers w WHERE w.id = sp.worker_id)), "
        "      sp.claim_turn, sp.claim_at, 1 FROM sp) ev "
        "  ORDER BY claim_turn, claim_at, n) "
        "SELECT ",
        ", o.since_leased FROM o JOIN sandboxes s ON s.id = o.sandbox_id JOIN tenants tn ON tn.id = o.tenant_id "
        "ORDER BY o.claim_turn, o.claim_at",
        6, p);
    if (!r) {
        store__db_error(err);
        return SBX_EDB;
    }
    json_object *arr = json_object_new_array();
    int since = PQnfields(r) - 1;
    for (int i = 0; i < PQntuples(r); i++) {
        const char *kind = store__col_text(t, r, i, "kind");
        store__op_observe(kind, OP_RUNNING, NULL, db_get(r, i, since), NULL);
        json_object *a = store__row_json(t, r, i);
        if (strcmp(kind, "exec") == 0) {
            json_object *ex = store__parse_json_text(store__col_text(t, r, i, "request"));
            int64_t mo = 0;
            if (ex && (!jsonx_get_int(ex, "max_output_bytes", &mo) || mo <= 0))
                jsonx_add_int(ex, "max_output_bytes", lim->exec_output_default);
            jsonx_add(a, "exec", ex);
        } else if (strcmp(kind, "snapshot") == 0) {
            jsonx_add(a, "snapshot", store__parse_json_text(store__col_text(t, r, i, "request")));
        } else if (strcmp(kind, "network") == 0) {
            jsonx_add(a, "network", store__parse_json_text(store__col_text(t, r, i, "request")));
        } else if (strcmp(kind, "snapshot_copy") == 0) {
            jsonx_add(a, "snapshot_copy", store__parse_json_text(store__col_text(t, r, i, "request")));
        }
        /* a create's secrets, opened for its worker's egress filter: in
         * this answer only */
        json_object *secret_names = strcmp(kind, "create") == 0 ? jsonx_get_arr(jsonx_get_obj(a, "spec"), "secrets")
                                                                 : NULL;
        if (secret_names && json_object_array_length(secret_names) > 0) {
            char why[200];
            json_object *opened = store__secrets_open(c, lim, store__col_text(t, r, i, "tenant_id"), secret_names,
                                                      why, sizeof why);
            if (opened)
                jsonx_add(a, "secrets", opened);
            else
                jsonx_add_str(a, "secrets_error", why);
        }
        json_object *allow = strcmp(kind, "create") == 0
                                 ? store__parse_json_text(store__col_text(t, r, i, "egress_allow"))
                                 : NULL;
        if (allow && json_object_is_type(allow, json_type_array) && json_object_array_length(allow) > 0)
            jsonx_add(a, "egress_allow", allow);
        else if (allow)
            json_object_put(allow);
        json_object_array_add(arr, a);
        (*ret_n)++;
    }
    PQclear(r);
    *ret = json_object_new_object();
    jsonx_add(*ret, "assignments", arr);
    return 0;
}

/* A worker's report, checked. Borrowed from the body. */
typedef struct report {
    const char *op_id;
    int64_t attempt;
    bool ok;                 /* outcome succeeded */
    json_object *result, *error;
    const char *runtime_ref;
    bool observed;           /* a failed create whose container was not running: what the runtime saw */
    observed_t ob;
} report_t;

static int report_parse(json_object *body, report_t *ret, api_error_t *err)
{
    memset(ret, 0, sizeof *ret);
    ret->op_id = jsonx_get_str(body, "operation_id");
    const char *outcome = jsonx_get_str(body, "outcome");
    ret->attempt = -1;
    if (!ret->op_id || !ids_valid("op", ret->op_id))
        return api_error_set(err, API_INVALID_ARGUMENT, "operation_id is required");
    if (!jsonx_get_int(body, "attempt", &ret->attempt))
        return api_error_set(err, API_INVALID_ARGUMENT, "attempt (the fencing token) is required");
    if (!outcome || (strcmp(outcome, "succeeded") != 0 && strcmp(outcome, "failed") != 0))
        return api_error_set(err, API_INVALID_ARGUMENT, "outcome must be succeeded or failed");
    ret->ok = strcmp(outcome, "succeeded") == 0;
    ret->result = jsonx_get_obj(body, "result");
    ret->error = jsonx_get_obj(body, "error");
    ret->runtime_ref = jsonx_get_str(body, "runtime_ref");
    if (ret->runtime_ref && strlen(ret->runtime_ref) > 128)
        return api_error_set(err, API_INVALID_ARGUMENT, "runtime_ref is too long");
    json_object *obs_json = NULL;
    ret->observed = json_object_object_get_ex(body, "observed", &obs_json) &&
                    !json_object_is_type(obs_json, json_type_null);
    if (ret->observed && observed_from_json(obs_json, "observed", &ret->ob, err) < 0)
        return SBX_EINVAL;
    return 0;
}

int store__lease_lock(PGconn *c, const char *worker_id, const char *op_id, int64_t attempt, const char *what,
                      char ret_kind[16], char ret_sbx[SBX_ID_MAX], api_error_t *err)
{
    const char *p[] = { op_id };
    PGresult *r = db_exec(c, "SELECT kind, state, attempt, coalesce(lease_worker_id, ''), sandbox_id "
                             "FROM operations WHERE id = $1 FOR UPDATE", 1, p);
    if (!r)
        return SBX_EDB;
    if (PQntuples(r) != 1) {
        PQclear(r);
        return api_error_set(err, API_NOT_FOUND, "no operation %s", op_id);
    }
    snprintf(ret_kind, 16, "%s", db_get(r, 0, 0));
    snprintf(ret_sbx, SBX_ID_MAX, "%s", db_get(r, 0, 4) ? db_get(r, 0, 4) : "");
    bool fresh = strcmp(db_get(r, 0, 1), "running") == 0 && db_get_ll(r, 0, 2) == attempt &&
                 strcmp(db_get(r, 0, 3), worker_id) == 0;
    int rc = 0;
    if (!fresh)
        rc = api_error_set(err, API_STALE_LEASE,
                           "%s refused: operation %s is %s at attempt %lld leased to %s; this %s holds attempt "
                           "%lld", what, op_id, db_get(r, 0, 1), db_get_ll(r, 0, 2),
                           *db_get(r, 0, 3) ? db_get(r, 0, 3) : "nobody", what, (long long)attempt);
    PQclear(r);
    return rc;
}

/* The operation's end and what it means for its sandbox, in the report's
 * transaction. The compare-and-set is also the fencing check: it moves
 * the operation only while it is running under this worker's lease at
 * the report's attempt. *ret_cas is its result
 * (< 0: nothing else was done), *ret_op the operation it left; returns 0
 * or SBX_EDB. */
static int report_apply(PGconn *c, const report_t *rep, const char *worker_id, int *ret_cas, json_object **ret_op)
{
    char attempt[24];
    snprintf(attempt, sizeof attempt, "%lld", (long long)rep->attempt);
    char *res = rep->result ? jsonx_dump(rep->result) : NULL;
    const char *code = jsonx_get_str(rep->error, "code");
    const char *msg = jsonx_get_str(rep->error, "message");
    if (!code || api_code_parse(code) < 0)
        code = "runtime_error";
    char mbuf[1024];
    snprintf(mbuf, sizeof mbuf, "%s", msg ? msg : "the worker reported a failure without a message");
    op_state_t to = rep->ok ? OP_SUCCEEDED : strcmp(code, "cancelled") == 0 ? OP_CANCELLED : OP_FAILED;
    /* $4 attempt, $5 worker, then the result and the error (as each
     * outcome has them); a cancel counts only for an exec (which a cancel
     * is for). */
    const char *lease_where = "attempt = $4::int AND lease_worker_id = $5";
    const char *xs[] = { attempt, worker_id, res }, *xf[] = { attempt, worker_id, code, mbuf },
               *xc[] = { attempt, worker_id, res, code, mbuf };
    if (to == OP_SUCCEEDED)
        *ret_cas = store__op_cas_ex(c, rep->op_id, OP_RUNNING, to, "result = coalesce($6::jsonb, result)",
                                    lease_where, 3, xs, NULL, ret_op);
    else if (to == OP_CANCELLED)
        *ret_cas = store__op_cas_ex(c, rep->op_id, OP_RUNNING, to,
                                    "error_code = $7, error_message = $8, result = coalesce($6::jsonb, result)",
                                    "attempt = $4::int AND lease_worker_id = $5 AND kind = 'exec'", 5, xc, NULL,
                                    ret_op);
    if (to == OP_FAILED || (to == OP_CANCELLED && *ret_cas == SBX_ECONFLICT)) {
        /* "cancelled" for anything but an exec is a failure */
        to = OP_FAILED;
        *ret_cas = store__op_cas_ex(c, rep->op_id, OP_RUNNING, to, "error_code = $6, error_message = $7", lease_where,
                                    4, xf, NULL, ret_op);
    }
    free(res);
    if (*ret_cas < 0)
        return 0;
    const char *kind = jsonx_get_str(*ret_op, "kind"), *sbx = jsonx_get_str(*ret_op, "sandbox_id");
    bool create = kind && strcmp(kind, "create") == 0, del = kind && strcmp(kind, "delete") == 0;
    if (!sbx)
        return 0;
    /* A success's last statement takes the COMMIT with it (one round
     * trip; the caller's db_commit then only says how it went). */
    if (to == OP_SUCCEEDED && create) {
        const char *y[] = { rep->runtime_ref };
        db_commit_with_next(c);
        return store__sandbox_set_phase(c, sbx, PH_RUNNING,
                                        "runtime_ref = $3, expires_at = now() + make_interval(secs => "
                                        "ttl_seconds), observed_generation = generation", 1, y) < 0 ? SBX_EDB : 0;
    }
    if (to == OP_SUCCEEDED && del) {
        if (store__sandbox_set_phase(c, sbx, PH_DELETED, "deleted_at = now(), runtime_ref = NULL", 0, NULL) < 0)
            return SBX_EDB;
        db_commit_with_next(c);
        return store__sandbox_release_allocation(c, sbx) < 0 ? SBX_EDB : 0;
    }
    if (to == OP_SUCCEEDED && kind && (strcmp(kind, "pause") == 0 || strcmp(kind, "resume") == 0))
        return store__sandbox_paused(c, sbx, strcmp(kind, "resume") == 0, rep->result) < 0 ? SBX_EDB : 0;
    if (to == OP_SUCCEEDED && kind && strcmp(kind, "network") == 0)
        return store__sandbox_network_set(c, rep->op_id, sbx) < 0 ? SBX_EDB : 0;
    if (to == OP_SUCCEEDED && kind && strcmp(kind, "snapshot") == 0)
        return store__snapshot_made(c, rep->op_id, rep->result) < 0 ? SBX_EDB : 0;
    if (to == OP_SUCCEEDED && kind && strcmp(kind, "snapshot_copy") == 0)
        return store__snapshot_copied(c, rep->op_id, rep->result) < 0 ? SBX_EDB : 0;
    if (to == OP_SUCCEEDED)
        return 0;
    if (!create)
        return 0;
    if (rep->observed) {
        char *tail = rep->ob.output_tail ? strndup(rep->ob.output_tail, rep->ob.output_tail_len) : NULL;
        int x2 = store__sandbox_fail_observed(c, sbx, observed_failure_json(&rep->ob), tail);
        free(tail);
        return x2 < 0 ? SBX_EDB : 0;
    }
    if (store__sandbox_set_phase(c, sbx, PH_FAILED, NULL, 0, NULL) < 0 || store__sandbox_release_allocation(c, sbx) < 0)
        return SBX_EDB;
    return 0;
}

int store_worker_report(PGconn *c, const char *worker_id, json_object *body, json_object **ret, api_error_t *err)
{
    report_t rep;
    if (report_parse(body, &rep, err) < 0)
        return SBX_EINVAL;
    if (db_begin(c) < 0)
        return store__db_error(err);
    int cas = 0;
    json_object *op = NULL;
    if (report_apply(c, &rep, worker_id, &cas, &op) < 0 || (cas >= 0 && db_commit(c) < 0)) {
        json_object_put(op);
        store__db_error(err);
        db_rollback(c);
        return SBX_EDB;
    }
    if (cas < 0) {
        db_rollback(c);
        if (cas != SBX_ECONFLICT)
            return store__db_error(err);
        /* Not moved: say why (unknown, another worker's, another attempt,
         * no longer running). */
        char kind[16], sbx[SBX_ID_MAX];
        int rc = store__lease_lock(c, worker_id, rep.op_id, rep.attempt, "report", kind, sbx, err);
        if (rc == SBX_EINVAL)
            return rc;
        if (rc < 0)
            return store__db_error(err);
        return api_error_set(err, API_STALE_LEASE, "report refused: operation %s changed state", rep.op_id);
    }
    *ret = store__wrap("operation", op);
    return 0;
}

int store_worker_versions(PGconn *c, json_object **ret)
{
    PGresult *r = db_exec(c, "SELECT coalesce(nullif(version, ''), 'unknown'), count(*) FROM workers "
                             "WHERE state IN ('ready', 'draining') GROUP BY 1 ORDER BY 1", 0, NULL);
    if (!r)
        return SBX_EDB;
    json_object *a = json_object_new_array();
    for (int i = 0; i < PQntuples(r); i++) {
        json_object *o = json_object_new_object();
        jsonx_add_str(o, "version", db_get(r, i, 0));
        jsonx_add_int(o, "workers", atoll(db_get(r, i, 1)));
        json_object_array_add(a, o);
    }
    PQclear(r);
    *ret = a;
    return 0;
}
