/* E2B's control API under /e2b, and the dispatch of its envd calls
 * (controller/e2b.h, docs/e2b.md). Each call becomes what the matching
 * /v1 call does: a create is api_sandbox_create_json with the E2B body
 * mapped onto a /v1 spec (template -> image, timeout -> TTL, metadata ->
 * labels, envVars -> env, allow_internet_access -> network), so policy,
 * quotas, classification and placement judge it exactly as a /v1 create;
 * a kill is a delete operation, a timeout an extend. E2B's create answers
 * once the sandbox runs: the request waits on its create operation as
 * GET /v1/operations/{id}?wait does. */
#include "e2b.h"
#include "api.h"
#include "config.h"
#include "ids.h"
#include "jsonx.h"
#include "limits.h"
#include "log.h"
#include "server_int.h"
#include "store.h"

#include <sys/queue.h>
#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define E2B_COMPONENT "e2b"
/* How long a create waits for its sandbox to run before it answers 504:
 * a microVM under software emulation takes about 10 s, an image pull more. */
#define E2B_CREATE_WAIT_SECONDS 300
/* E2B's default list page, and its largest. */
#define E2B_LIST_DEFAULT 100
#define E2B_LIST_MAX     100
/* The metadata key that asks for a trust classification (never weaker
 * than the server's rules make it). */
#define E2B_TRUST_KEY "sandbox.trust"
/* The metadata key that names the weakest isolation class accepted. */
#define E2B_ISOLATION_KEY "sandbox.isolation"
/* E2B's sandbox timeout when a create gives none (its OpenAPI default). */
#define E2B_DEFAULT_TIMEOUT_SECONDS 300

/* ---- errors in the two dialects ---------------------------------------- */

void e2b_reply_status(req_t *rq, int status, const char *msg)
{
    json_object *o = json_object_new_object();
    jsonx_add_int(o, "code", status);
    jsonx_add_str(o, "message", msg);
    http_reply_json(rq, status, o);
}

void e2b_reply_error(req_t *rq, api_code_t code, const char *msg)
{
    e2b_reply_status(rq, api_code_info(code)->http_status, msg);
}

const char *e2b_connect_code(api_code_t code, int *ret_status)
{
    /* Connect's codes and their HTTP statuses (connectrpc.com/docs/protocol). */
    const char *c;
    int st;
    switch (code) {
    case API_INVALID_ARGUMENT:
    case API_INVALID_JSON: c = "invalid_argument"; st = 400; break;
    case API_UNAUTHORIZED: c = "unauthenticated"; st = 401; break;
    case API_FORBIDDEN:
    case API_POLICY_DENIED: c = "permission_denied"; st = 403; break;
    case API_NOT_FOUND: c = "not_found"; st = 404; break;
    case API_METHOD_NOT_ALLOWED: c = "unimplemented"; st = 501; break;
    case API_CONFLICT:
    case API_SANDBOX_EXITED: c = "failed_precondition"; st = 400; break;
    case API_REQUEST_TIMEOUT:
    case API_TIMEOUT: c = "deadline_exceeded"; st = 504; break;
    case API_PAYLOAD_TOO_LARGE:
    case API_HEADERS_TOO_LARGE:
    case API_RATE_LIMITED:
    case API_QUOTA_EXCEEDED: c = "resource_exhausted"; st = 429; break;
    case API_UNAVAILABLE:
    case API_BAD_GATEWAY:
    case API_WORKER_LOST: c = "unavailable"; st = 503; break;
    case API_CANCELLED: c = "canceled"; st = 499; break;
    default: c = "internal"; st = 500; break;
    }
    if (ret_status)
        *ret_status = st;
    return c;
}

void e2b_reply_connect_error(req_t *rq, api_code_t code, const char *msg)
{
    int status;
    const char *cc = e2b_connect_code(code, &status);
    json_object *err = json_object_new_object();
    jsonx_add_str(err, "code", cc);
    jsonx_add_str(err, "message", msg);
    const char *ct = http_header(rq, "Content-Type");
    if (ct && strncasecmp(ct, "application/connect+", 20) == 0) {
        /* A streaming call: its errors come in the stream's end message
         * (flags 0x02), after an HTTP 200. */
        json_object *end = json_object_new_object();
        jsonx_add(end, "error", err);
        const char *s = json_object_to_json_string_ext(end, JSON_C_TO_STRING_PLAIN);
        size_t n = strlen(s);
        char *buf = malloc(n + 5);
        if (buf) {
            buf[0] = 0x02;
            buf[1] = (char)(n >> 24 & 0xff);
            buf[2] = (char)(n >> 16 & 0xff);
            buf[3] = (char)(n >> 8 & 0xff);
            buf[4] = (char)(n & 0xff);
            memcpy(buf + 5, s, n);
            http_reply_text(rq, 200, "application/connect+json", buf, n + 5);
            free(buf);
        } else {
            http_reply_text(rq, 500, "text/plain", "out of memory", 13);
        }
        json_object_put(end);
        return;
    }
    http_reply_json(rq, status, err);
}

/* ---- sandboxes as E2B shows them --------------------------------------- */

/* The key the request came with: what envd calls will carry back. */
static const char *request_key(req_t *rq)
{
    const char *k = http_header(rq, "X-API-Key");
    return k && *k ? k : auth_bearer(http_header(rq, "Authorization"));
}

static void add_time(json_object *o, const char *key, const char *rfc3339)
{
    jsonx_add_str(o, key, rfc3339 && *rfc3339 ? rfc3339 : NULL);
}

/* E2B's sandbox object from ours (store_sandbox_get's "sandbox"): the
 * listed fields, and with detail those of a single sandbox and of a create
 * or connect answer (the envd key, the route domain). */
static json_object *e2b_sandbox(req_t *rq, json_object *s, bool detail)
{
    json_object *o = json_object_new_object();
    const char *image = jsonx_get_str(s, "image");
    const char *def = cfg_str(&rq->ctl->cfg, CFG_DEFAULT_IMAGE);
    int64_t cpu = 0, mem = 0, disk = 0;
    jsonx_get_int(s, "cpu_millis", &cpu);
    jsonx_get_int(s, "memory_mib", &mem);
    jsonx_get_int(s, "disk_mib", &disk);
    jsonx_add_str(o, "sandboxID", jsonx_get_str(s, "id"));
    /* The SDK's default template is the server's default image. */
    jsonx_add_str(o, "templateID", image && def && strcmp(image, def) == 0 ? "base" : image);
    if (jsonx_get_str(s, "name"))
        jsonx_add_str(o, "alias", jsonx_get_str(s, "name"));
    jsonx_add_str(o, "clientID", "sandbox");
    add_time(o, "startedAt", jsonx_get_str(s, "created_at"));
    const char *exp = jsonx_get_str(s, "expires_at");
    if (!exp || !*exp)
        exp = jsonx_get_str(s, "created_at"); /* not running yet: its TTL starts when it does */
    add_time(o, "endAt", exp);
    jsonx_add_int(o, "cpuCount", cpu > 0 ? (cpu + 999) / 1000 : 1);
    jsonx_add_int(o, "memoryMB", mem);
    jsonx_add_int(o, "diskSizeMB", disk);
    json_object *labels = jsonx_get_obj(s, "labels");
    jsonx_add(o, "metadata", labels ? json_object_get(labels) : json_object_new_object());
    const char *phase = jsonx_get_str(s, "phase");
    jsonx_add_str(o, "state", phase && strcmp(phase, "paused") == 0 ? "paused" : "running");
    jsonx_add_str(o, "envdVersion", E2B_ENVD_VERSION);
    jsonx_add(o, "volumeMounts", json_object_new_array());
    if (detail) {
        const char *net = jsonx_get_str(s, "network");
        jsonx_add_bool(o, "allowInternetAccess", net && strcmp(net, "open") == 0);
        /* its egress rules as E2B's network (the inverse of e2b_network):
         * the allowed domains, the denied ones and, default deny, 0.0.0.0/0 */
        json_object *eg = jsonx_get_obj(s, "egress");
        if (eg) {
            json_object *n = json_object_new_object(), *allow = jsonx_get_arr(eg, "allow");
            json_object *deny = jsonx_get_arr(eg, "deny"), *dout = json_object_new_array();
            for (size_t i = 0; deny && i < json_object_array_length(deny); i++)
                json_object_array_add(dout, json_object_get(json_object_array_get_idx(deny, i)));
            const char *def = jsonx_get_str(eg, "default");
            if (def && strcmp(def, "deny") == 0)
                json_object_array_add(dout, json_object_new_string("0.0.0.0/0"));
            jsonx_add(n, "allowOut", allow ? json_object_get(allow) : json_object_new_array());
            jsonx_add(n, "denyOut", dout);
            jsonx_add_bool(n, "allowPublicTraffic", true);
            jsonx_add(o, "network", n);
        }
        jsonx_add_str(o, "envdAccessToken", request_key(rq));
        jsonx_add_str(o, "domain", rq->ctl->route_domain);
        jsonx_add_str(o, "trafficAccessToken", NULL);
    }
    return o;
}

/* Phases E2B shows as a live sandbox ("running", or "paused"); the others
 * are gone to it. */
static bool phase_live(const char *phase)
{
    static const char *const live[] = { "pending", "scheduled", "provisioning", "running", "paused" };
    for (size_t i = 0; phase && i < sizeof live / sizeof live[0]; i++)
        if (strcmp(phase, live[i]) == 0)
            return true;
    return false;
}
#define LIVE_PHASES "pending,scheduled,provisioning,running"

/* The sandbox id, its object looked up in the caller's scope: 0 with *ret
 * (the whole get answer; its "sandbox" is the object), or answered 404 for
 * one that is missing, another tenant's or no longer live. */
static int live_sandbox(req_t *rq, const char *id, json_object **ret)
{
    api_error_t err;
    *ret = NULL;
    if (!ids_valid("sbx", id)) {
        e2b_reply_error(rq, API_NOT_FOUND, "sandbox not found: not a sandbox id");
        return SBX_ENOTFOUND;
    }
    if (store_sandbox_get(rq->db, auth_scope(rq), id, ret, &err) < 0) {
        http_reply_api_error(rq, &err);
        return SBX_ENOTFOUND;
    }
    const char *phase = jsonx_get_str(jsonx_get_obj(*ret, "sandbox"), "phase");
    if (!phase_live(phase)) {
        char msg[160];
        snprintf(msg, sizeof msg, "sandbox %s not found: it is %s", id, phase ? phase : "gone");
        json_object_put(*ret);
        *ret = NULL;
        e2b_reply_error(rq, API_NOT_FOUND, msg);
        return SBX_ENOTFOUND;
    }
    return 0;
}

/* ---- create ------------------------------------------------------------- */

/* E2B's "network" {"allowOut":[…],"denyOut":[…],"allowPublicTraffic"}
 * as egress rules by domain (docs/e2b.md): denyOut "0.0.0.0/0" (E2B's
 * ALL_TRAFFIC) is default deny, else everything not denied is allowed; a
 * domain in allowOut is allowed (and, as E2B's allow wins, taken out of
 * the denies); other addresses and CIDRs are the tenant policy's
 * egress_allow here, refused. Sets out's network open and egress. */
static int e2b_network(json_object *net, json_object *out, api_error_t *err)
{
    static const char *const known[] = { "allowOut", "denyOut", "allowPublicTraffic", NULL };
    json_object_object_foreach(net, key, val) {
        int k = 0;
        while (known[k] && strcmp(known[k], key) != 0)
            k++;
        if (!known[k])
            return api_error_set(err, API_INVALID_ARGUMENT, "network.%.40s is not supported by this server", key);
        if (k == 2 && !json_object_is_type(val, json_type_null) &&
            (!json_object_is_type(val, json_type_boolean) || !json_object_get_boolean(val)))
            return api_error_set(err, API_INVALID_ARGUMENT, "network.allowPublicTraffic false: this server's "
                                 "routes take a token per route instead (sandbox share --auth)");
        if (k < 2 && !json_object_is_type(val, json_type_null) && !json_object_is_type(val, json_type_array))
            return api_error_set(err, API_INVALID_ARGUMENT, "network.%s must be an array", key);
    }
    json_object *allow = json_object_new_array(), *deny = json_object_new_array();
    bool deny_all = false, any = false;
    for (int side = 0; side < 2; side++) {
        json_object *list = jsonx_get_arr(net, side ? "denyOut" : "allowOut");
        for (size_t i = 0; list && i < json_object_array_length(list); i++) {
            json_object *e = json_object_array_get_idx(list, i);
            const char *s = json_object_is_type(e, json_type_string) ? json_object_get_string(e) : NULL;
            char canon[EGRESS_DOMAIN_MAX + 1], why[160];
            any = true;
            if (side && s && (strcmp(s, "0.0.0.0/0") == 0 || strcmp(s, "::/0") == 0)) {
                deny_all = true;
                continue;
            }
            if (!s || egress_domain_canon(s, canon, why, sizeof why) < 0) {
                json_object_put(allow);
                json_object_put(deny);
                return api_error_set(err, API_INVALID_ARGUMENT, "network.%s[%zu] (%.80s): %s", side ? "denyOut"
                                     : "allowOut", i, s ? s : "not a string", s ? "only domains (and denyOut "
                                     "0.0.0.0/0) here: addresses and CIDRs are the tenant policy's egress_allow"
                                     : "a domain");
            }
            bool in_allow = false;
            for (size_t k = 0; side && k < json_object_array_length(allow); k++)
                in_allow = in_allow || strcmp(json_object_get_string(json_object_array_get_idx(allow, k)), canon) == 0;
            if (!in_allow)
                json_object_array_add(side ? deny : allow, json_object_new_string(canon));
        }
    }
    if (!any) {
        json_object_put(allow);
        json_object_put(deny);
        return 0;
    }
    json_object *eg = json_object_new_object();
    jsonx_add(eg, "allow", allow);
    jsonx_add(eg, "deny", deny);
    jsonx_add_str(eg, "default", deny_all ? "deny" : "allow");
    jsonx_add(out, "egress", eg);
    jsonx_add_str(out, "network", "open");
    return 0;
}

/* The /v1 create body of an E2B one ({"templateID","timeout","metadata",
 * "envVars","allow_internet_access",…}): 0 with *ret, or SBX_EINVAL with
 * err naming what Sandbox cannot honour. */
static int create_body(req_t *rq, json_object *in, json_object **ret, api_error_t *err)
{
    *ret = NULL;
    if (!json_object_is_type(in, json_type_object))
        return api_error_set(err, API_INVALID_ARGUMENT, "the body must be a JSON object");
    json_object *out = json_object_new_object();
    json_object_object_foreach(in, key, val) {
        bool null = json_object_is_type(val, json_type_null);
        if (strcmp(key, "templateID") == 0) {
            if (!json_object_is_type(val, json_type_string))
                goto bad_type;
            const char *t = json_object_get_string(val);
            json_object *tp = NULL;
            api_error_t ignored;
            /* a snapshot's id (Sandbox.create(snapshotId)), a template of
             * the tenant by name, else an image */
            if (ids_valid("snp", t))
                jsonx_add_str(out, "from", t);
            else if (strcmp(t, "base") != 0 && spec_snapshot_name_ok(t) &&
                     store_template_get(rq->db, rq->auth.tenant_id, t, &tp, &ignored) == 0)
                jsonx_add_str(out, "template", t);
            else if (strcmp(t, "base") != 0)
                jsonx_add_str(out, "image", t); /* else the server's default_image */
            json_object_put(tp);
        } else if (strcmp(key, "timeout") == 0) {
            if (null)
                continue;
            if (!json_object_is_type(val, json_type_int))
                goto bad_type;
            jsonx_add(out, "ttl_seconds", json_object_get(val));
        } else if (strcmp(key, "metadata") == 0 || strcmp(key, "envVars") == 0) {
            if (null)
                continue;
            if (!json_object_is_type(val, json_type_object))
                goto bad_type;
            jsonx_add(out, strcmp(key, "metadata") == 0 ? "labels" : "env", json_object_get(val));
        } else if (strcmp(key, "allow_internet_access") == 0) {
            if (null)
                continue;
            if (!json_object_is_type(val, json_type_boolean))
                goto bad_type;
            jsonx_add_str(out, "network", json_object_get_boolean(val) ? "open" : "none");
        } else if (strcmp(key, "secure") == 0) {
            /* Every envd call needs the key here: as a secured sandbox. */
            if (!null && !json_object_is_type(val, json_type_boolean))
                goto bad_type;
        } else if (strcmp(key, "autoPause") == 0) {
            /* its timeout pauses it instead of killing it */
            if (!null && json_object_is_type(val, json_type_boolean) && json_object_get_boolean(val))
                jsonx_add_bool(out, "auto_pause", true);
        } else if (strcmp(key, "autoPauseMemory") == 0) {
            if (!null && json_object_is_type(val, json_type_boolean) && json_object_get_boolean(val)) {
                json_object_put(out);
                return api_error_set(err, API_INVALID_ARGUMENT, "%s: a pause keeps a sandbox's memory only on "
                                     "microvm; this server does not promise it", key);
            }
        } else if (null) {
            continue;
        } else if (strcmp(key, "network") == 0 && json_object_is_type(val, json_type_object)) {
            if (e2b_network(val, out, err) < 0) {
                json_object_put(out);
                return SBX_EINVAL;
            }
        } else {
            /* mcp, volumeMounts, network rules, autoResume, iam: not done
             * here yet (docs/e2b.md); refused rather than ignored. */
            json_object_put(out);
            return api_error_set(err, API_INVALID_ARGUMENT, "%s is not supported by this server (docs/e2b.md lists "
                                 "the create fields it honours)", key);
        }
        continue;
    bad_type:
        json_object_put(out);
        return api_error_set(err, API_INVALID_ARGUMENT, "%s has the wrong type", key);
    }
    const char *netw = jsonx_get_str(out, "network");
    if (json_object_object_get_ex(out, "egress", NULL) && json_object_object_get_ex(in, "allow_internet_access", NULL)
        && json_object_get_boolean(jsonx_get_obj(in, "allow_internet_access")) == 0 && netw) {
        json_object_put(out);
        return api_error_set(err, API_INVALID_ARGUMENT, "network rules with allow_internet_access false: nothing "
                             "leaves the sandbox to filter");
    }
    /* E2B's default timeout, when the SDK sends none. */
    if (!json_object_object_get_ex(out, "ttl_seconds", NULL))
        jsonx_add_int(out, "ttl_seconds", E2B_DEFAULT_TIMEOUT_SECONDS);
    /* sandbox.isolation in the metadata names the weakest class the
     * caller accepts (container, gvisor, microvm), as a /v1 create's
     * isolation: the rules may require a stronger one, never a weaker. */
    const char *iso = jsonx_get_str(jsonx_get_obj(out, "labels"), E2B_ISOLATION_KEY);
    if (iso)
        jsonx_add_str(out, "isolation", iso);
    /* sandbox.trust in the metadata asks for a classification (placement
     * never gives less than the server's rules make it). */
    const char *trust = jsonx_get_str(jsonx_get_obj(out, "labels"), E2B_TRUST_KEY);
    if (trust) {
        json_object *t = json_object_new_object();
        if (strcmp(trust, "untrusted") == 0) {
            jsonx_add_bool(t, "untrusted_repo", true);
            jsonx_add_bool(t, "generated_code", true);
        } else if (strcmp(trust, "hostile") == 0) {
            jsonx_add_bool(t, "hostile", true);
        } else if (strcmp(trust, "trusted") != 0) {
            json_object_put(t);
            json_object_put(out);
            return api_error_set(err, API_INVALID_ARGUMENT, "metadata %s must be trusted, untrusted or hostile",
                                 E2B_TRUST_KEY);
        }
        jsonx_add(out, "trust", t);
    }
    (void)rq;
    *ret = out;
    return 0;
}

/* The operation a parked request waits for (rq->park_id), once it ended:
 * 0 with *ret (GET /v1/operations/{id}'s answer; the operation succeeded).
 * Otherwise the request is answered or parked again (< 0): parked while it
 * runs and the wait (rq->park_cursor) lasts, 504 timeout_msg past it, or
 * the operation's error ("the sandbox did not <what>: CODE: MESSAGE"). */
static int op_ended(req_t *rq, bool final, const char *what, const char *timeout_msg, json_object **ret)
{
    json_object *op = NULL;
    api_error_t err;
    bool terminal = false;
    *ret = NULL;
    if (store_operation_get(rq->db, auth_scope(rq), rq->park_id, &op, &terminal, &err) < 0) {
        http_reply_api_error(rq, &err);
        return SBX_EDB;
    }
    json_object *o = jsonx_get_obj(op, "operation");
    const char *state = jsonx_get_str(o, "state");
    if (!terminal) {
        json_object_put(op);
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        int64_t left = rq->park_cursor - (int64_t)ts.tv_sec;
        if (final || left <= 0)
            e2b_reply_error(rq, API_TIMEOUT, timeout_msg);
        else
            http_park(rq, PARK_OPERATION, rq->park_id, (int)left);
        return SBX_ETIMEOUT;
    }
    if (!state || strcmp(state, "succeeded") != 0) {
        json_object *e = jsonx_get_obj(o, "error");
        const char *code = jsonx_get_str(e, "code"), *msg = jsonx_get_str(e, "message");
        int c = code ? api_code_parse(code) : -1;
        char text[600];
        snprintf(text, sizeof text, "the sandbox did not %s: %s%s%s", what, code ? code : state ? state : "failed",
                 msg ? ": " : "", msg ? msg : "");
        json_object_put(op);
        e2b_reply_error(rq, c >= 0 ? (api_code_t)c : API_RUNTIME_ERROR, text);
        return SBX_ERUNTIME;
    }
    *ret = op;
    return 0;
}

/* Parks rq on operation op_id for at most E2B_CREATE_WAIT_SECONDS, done
 * answering once it ended (or at once when it has). */
static void park_on(req_t *rq, const char *op_id, void (*done)(req_t *rq, bool final))
{
    snprintf(rq->park_id, sizeof rq->park_id, "%s", op_id ? op_id : "");
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    rq->park_cursor = (int64_t)ts.tv_sec + E2B_CREATE_WAIT_SECONDS;
    rq->park_resume = done;
    done(rq, false);
}

/* The create's answer once its operation ended (or the wait did). */
static void create_resume(req_t *rq, bool final)
{
    json_object *op = NULL, *sbx = NULL;
    api_error_t err;
    if (op_ended(rq, final, "start", "the sandbox did not start in time; it may still: list your sandboxes", &op) < 0)
        return;
    const char *sid = jsonx_get_str(jsonx_get_obj(op, "operation"), "sandbox_id");
    char id[SBX_ID_MAX];
    snprintf(id, sizeof id, "%s", sid ? sid : "");
    json_object_put(op);
    if (store_sandbox_get(rq->db, auth_scope(rq), id, &sbx, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    json_object *out = e2b_sandbox(rq, jsonx_get_obj(sbx, "sandbox"), true);
    json_object_put(sbx);
    http_reply_json(rq, 201, out);
}

static void e2b_create(req_t *rq)
{
    json_object *in = NULL, *body = NULL, *resp = NULL;
    api_error_t err;
    if (http_read_json(rq, (size_t)rq->ctl->max_body_client, &in) < 0)
        return;
    int rc = create_body(rq, in, &body, &err);
    json_object_put(in);
    if (rc < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    bool replayed = false;
    rc = api_sandbox_create_json(rq, body, NULL, &resp, &replayed);
    json_object_put(body);
    if (rc < 0)
        return;
    api_kick_if_waiting(rq->ctl, resp);
    json_object *op = jsonx_get_obj(resp, "operation");
    const char *op_id = jsonx_get_str(op, "id");
    char id[SBX_ID_MAX];
    snprintf(id, sizeof id, "%s", op_id ? op_id : "");
    log_info(E2B_COMPONENT, "E2B create of sandbox %s (operation %s)",
             jsonx_get_str(jsonx_get_obj(resp, "sandbox"), "id"), id);
    json_object_put(resp);
    /* Answered at once when it already ended (refused at placement). */
    park_on(rq, id, create_resume);
}

/* ---- the other sandbox calls -------------------------------------------- */

static void e2b_get(req_t *rq, const char *id)
{
    json_object *got;
    if (live_sandbox(rq, id, &got) < 0)
        return;
    json_object *out = e2b_sandbox(rq, jsonx_get_obj(got, "sandbox"), true);
    json_object_put(got);
    http_reply_json(rq, 200, out);
}

/* The metadata filter: "k=v&k2=v2", each part URL-encoded (the SDK encodes
 * keys and values, then the whole as a query value), as a JSON object's
 * text for store_sandbox_list; NULL with err when malformed. */
static char *metadata_filter(const char *q, api_error_t *err)
{
    struct evkeyvalq kv;
    TAILQ_INIT(&kv);
    if (evhttp_parse_query_str(q, &kv) < 0) {
        api_error_set(err, API_INVALID_ARGUMENT, "metadata must be key=value pairs joined by &");
        return NULL;
    }
    json_object *o = json_object_new_object();
    struct evkeyval *e;
    TAILQ_FOREACH (e, &kv, next) {
        char *k = evhttp_uridecode(e->key, 0, NULL), *v = evhttp_uridecode(e->value, 0, NULL);
        if (k && v && *k)
            jsonx_add_str(o, k, v);
        free(k);
        free(v);
    }
    evhttp_clear_headers(&kv);
    char *s = jsonx_dump(o);
    json_object_put(o);
    return s;
}

static void e2b_list(req_t *rq)
{
    api_error_t err;
    const char *lim = http_query(rq, "limit"), *state = http_query(rq, "state");
    const char *next = http_query(rq, "nextToken"), *meta = http_query(rq, "metadata");
    int limit = E2B_LIST_DEFAULT;
    if (lim) {
        char *end;
        long v = strtol(lim, &end, 10);
        if (end == lim || *end || v < 1 || v > E2B_LIST_MAX) {
            e2b_reply_error(rq, API_INVALID_ARGUMENT, "limit must be 1 to 100");
            return;
        }
        limit = (int)v;
    }
    if (next && !store_list_cursor_valid(next)) {
        e2b_reply_error(rq, API_INVALID_ARGUMENT, "nextToken must be the x-next-token of a previous list answer");
        return;
    }
    /* state: running, paused or both (comma-separated; neither: both) */
    bool running = !state, paused = !state;
    for (const char *p = state; p && *p;) {
        size_t n = strcspn(p, ",");
        if (n == 7 && strncmp(p, "running", 7) == 0)
            running = true;
        else if (n == 6 && strncmp(p, "paused", 6) == 0)
            paused = true;
        else {
            e2b_reply_error(rq, API_INVALID_ARGUMENT, "state must be running, paused or both");
            return;
        }
        p += n + (p[n] == ',');
    }
    json_object *arr = json_object_new_array();
    const char *phases = running && paused ? LIVE_PHASES ",paused" : running ? LIVE_PHASES : "paused";
    char *labels = meta ? metadata_filter(meta, &err) : NULL;
    if (meta && !labels) {
        json_object_put(arr);
        http_reply_api_error(rq, &err);
        return;
    }
    json_object *resp = NULL;
    int rc = store_sandbox_list(rq->db, auth_scope(rq), NULL, false, limit, next, labels, phases, &resp, &err);
    free(labels);
    if (rc < 0) {
        json_object_put(arr);
        http_reply_api_error(rq, &err);
        return;
    }
    json_object *list = jsonx_get_arr(resp, "sandboxes");
    size_t n = list ? json_object_array_length(list) : 0;
    for (size_t i = 0; i < n; i++) {
        /* A list's rows are written as text (store__row_raw): read back. */
        json_object *row = jsonx_parse_stored(json_object_to_json_string(json_object_array_get_idx(list, i)));
        if (row)
            json_object_array_add(arr, e2b_sandbox(rq, row, false));
        json_object_put(row);
    }
    const char *cursor = jsonx_get_str(resp, "next");
    if (cursor && *cursor)
        evhttp_add_header(evhttp_request_get_output_headers(rq->ev), "X-Next-Token", cursor);
    json_object_put(resp);
    http_reply_json(rq, 200, arr);
}

static void e2b_kill(req_t *rq, const char *id)
{
    json_object *got, *resp = NULL;
    api_error_t err;
    if (live_sandbox(rq, id, &got) < 0)
        return;
    json_object_put(got);
    if (store_sandbox_delete(rq->db, &rq->ctl->lim, auth_scope(rq), id, NULL, NULL, rq->auth.token_id, &resp,
                             &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    api_kick_if_waiting(rq->ctl, resp);
    json_object_put(resp);
    http_reply_text(rq, 204, "application/json", "", 0);
}

/* timeout seconds from now: an extend (the SDK's setTimeout, connect's
 * timeout, refreshes' duration). 0, or < 0 once answered. */
static int set_timeout(req_t *rq, const char *id, int64_t seconds)
{
    json_object *resp = NULL;
    api_error_t err;
    extend_req_t er = { .scope = auth_scope(rq), .sandbox_id = id, .ttl_seconds = seconds,
                        .max_ttl_seconds = rq->ctl->max_ttl_seconds, .created_by = rq->auth.token_id };
    if (seconds < SBX_EXTEND_TTL_SECONDS_MIN || seconds > SBX_TTL_SECONDS_MAX) {
        e2b_reply_error(rq, API_INVALID_ARGUMENT, "timeout must be 1 to 2592000 seconds");
        return SBX_EINVAL;
    }
    if (store_sandbox_extend(rq->db, &rq->ctl->lim, &er, &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        return SBX_EINVAL;
    }
    json_object_put(resp);
    return 0;
}

/* A body's integer field (absent: *ret unchanged, true); false once answered. */
static bool body_int(req_t *rq, json_object *body, const char *key, int64_t *ret, bool *ret_given)
{
    json_object *v = NULL;
    *ret_given = false;
    if (!body || !json_object_object_get_ex(body, key, &v) || json_object_is_type(v, json_type_null))
        return true;
    if (!json_object_is_type(v, json_type_int)) {
        char msg[96];
        snprintf(msg, sizeof msg, "%s must be an integer number of seconds", key);
        e2b_reply_error(rq, API_INVALID_ARGUMENT, msg);
        return false;
    }
    *ret = json_object_get_int64(v);
    *ret_given = true;
    return true;
}

static void e2b_timeout_like(req_t *rq, const char *id, const char *key, bool required)
{
    json_object *body = NULL, *got;
    int64_t secs = 0;
    bool given = false;
    if (http_read_json(rq, (size_t)rq->ctl->max_body_client, &body) < 0)
        return;
    bool ok = body_int(rq, body, key, &secs, &given);
    json_object_put(body);
    if (!ok)
        return;
    if (required && !given) {
        char msg[64];
        snprintf(msg, sizeof msg, "%s is required", key);
        e2b_reply_error(rq, API_INVALID_ARGUMENT, msg);
        return;
    }
    if (live_sandbox(rq, id, &got) < 0)
        return;
    json_object_put(got);
    if (given && set_timeout(rq, id, secs) < 0)
        return;
    http_reply_text(rq, 204, "application/json", "", 0);
}

static void e2b_timeout(req_t *rq, const char *id) { e2b_timeout_like(rq, id, "timeout", true); }
static void e2b_refresh(req_t *rq, const char *id) { e2b_timeout_like(rq, id, "duration", false); }

/* The answer of a pause, resume or connect once its operation ended (or
 * the wait did): a pause answers 204, the others the sandbox (201: it was
 * resumed). */
static void pause_done(req_t *rq, bool final, bool resumed)
{
    json_object *op = NULL, *got = NULL;
    if (op_ended(rq, final, resumed ? "resume" : "pause",
                 resumed ? "the sandbox did not resume in time; it may still" : "the sandbox did not pause in time; "
                                                                                "it may still",
                 &op) < 0)
        return;
    const char *sid = jsonx_get_str(jsonx_get_obj(op, "operation"), "sandbox_id");
    char id[SBX_ID_MAX];
    snprintf(id, sizeof id, "%s", sid ? sid : "");
    json_object_put(op);
    if (!resumed) {
        http_reply_text(rq, 204, "application/json", "", 0);
        return;
    }
    if (live_sandbox(rq, id, &got) < 0)
        return;
    json_object *out = e2b_sandbox(rq, jsonx_get_obj(got, "sandbox"), true);
    json_object_put(got);
    http_reply_json(rq, 201, out);
}
static void paused_resume(req_t *rq, bool final) { pause_done(rq, final, false); }
static void resumed_resume(req_t *rq, bool final) { pause_done(rq, final, true); }

/* Starts a pause or resume of sandbox id and parks the request until it
 * ends (pause_done answers). */
static void pause_start(req_t *rq, const char *id, bool resume)
{
    json_object *resp = NULL;
    api_error_t err;
    if (store_sandbox_pause(rq->db, &rq->ctl->lim, auth_scope(rq), id, resume, NULL, NULL, rq->auth.token_id, &resp,
                            &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    api_kick_if_waiting(rq->ctl, resp);
    char op_id[SBX_ID_MAX];
    snprintf(op_id, sizeof op_id, "%s", jsonx_get_str(jsonx_get_obj(resp, "operation"), "id") ?
                                             jsonx_get_str(jsonx_get_obj(resp, "operation"), "id") : "");
    json_object_put(resp);
    park_on(rq, op_id, resume ? resumed_resume : paused_resume);
}

static bool sandbox_paused(json_object *got)
{
    const char *phase = jsonx_get_str(jsonx_get_obj(got, "sandbox"), "phase");
    return phase && strcmp(phase, "paused") == 0;
}

/* connect: a paused sandbox is resumed first (201), a running one answered
 * as it is (200); timeout, when given, sets its TTL. */
static void e2b_connect(req_t *rq, const char *id)
{
    json_object *body = NULL, *got;
    int64_t secs = 0;
    bool given = false;
    if (http_read_json(rq, (size_t)rq->ctl->max_body_client, &body) < 0)
        return;
    bool ok = body_int(rq, body, "timeout", &secs, &given);
    json_object_put(body);
    if (!ok || live_sandbox(rq, id, &got) < 0)
        return;
    bool paused = sandbox_paused(got);
    json_object_put(got);
    if (given && set_timeout(rq, id, secs) < 0)
        return;
    if (paused) {
        pause_start(rq, id, true);
        return;
    }
    if (live_sandbox(rq, id, &got) < 0)
        return;
    json_object *out = e2b_sandbox(rq, jsonx_get_obj(got, "sandbox"), true);
    json_object_put(got);
    http_reply_json(rq, 200, out);
}

/* pause: 204 once paused; 409 when it is paused already. {"memory":true}
 * only where a pause keeps it (microvm): the answer never claims more. */
static void e2b_pause(req_t *rq, const char *id)
{
    json_object *got, *body = NULL;
    bool memory = false;
    if (evbuffer_get_length(evhttp_request_get_input_buffer(rq->ev)) > 0) {
        if (http_read_json(rq, (size_t)rq->ctl->max_body_client, &body) < 0)
            return;
        jsonx_get_bool(body, "memory", &memory);
        json_object_put(body);
    }
    if (live_sandbox(rq, id, &got) < 0)
        return;
    bool paused = sandbox_paused(got);
    const char *iso = jsonx_get_str(jsonx_get_obj(got, "sandbox"), "isolation");
    bool vm = iso && strcmp(iso, "microvm") == 0;
    json_object_put(got);
    if (memory && !vm) {
        e2b_reply_error(rq, API_INVALID_ARGUMENT, "memory: this server keeps a paused sandbox's memory only on "
                                                  "microvm; pause without keepMemory (its files are kept)");
        return;
    }
    if (paused) {
        e2b_reply_error(rq, API_CONFLICT, "sandbox is already paused");
        return;
    }
    pause_start(rq, id, false);
}

/* resume (the older call; connect does the same): 201 with the sandbox;
 * 409 when it is not paused. */
static void e2b_resume(req_t *rq, const char *id)
{
    json_object *body = NULL, *got;
    int64_t secs = 0;
    bool given = false;
    if (evbuffer_get_length(evhttp_request_get_input_buffer(rq->ev)) > 0) {
        if (http_read_json(rq, (size_t)rq->ctl->max_body_client, &body) < 0)
            return;
        bool ok = body_int(rq, body, "timeout", &secs, &given);
        json_object_put(body);
        if (!ok)
            return;
    }
    if (live_sandbox(rq, id, &got) < 0)
        return;
    bool paused = sandbox_paused(got);
    json_object_put(got);
    if (!paused) {
        e2b_reply_error(rq, API_CONFLICT, "sandbox is not paused");
        return;
    }
    if (given && set_timeout(rq, id, secs) < 0)
        return;
    pause_start(rq, id, true);
}

static void e2b_metrics(req_t *rq, const char *id)
{
    json_object *got;
    if (live_sandbox(rq, id, &got) < 0)
        return;
    json_object_put(got);
    /* No samples are kept per sandbox (the worker's /metrics has them). */
    http_reply_json(rq, 200, json_object_new_array());
}

/* ---- envd ---------------------------------------------------------------- */

/* The sandbox an envd call names: E2b-Sandbox-Id (E2B_SANDBOX_URL's way). */
static void envd_call(req_t *rq, const char *path)
{
    const char *id = http_header(rq, "E2b-Sandbox-Id");
    if (!id || !*id) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "an envd call names its sandbox in the E2b-Sandbox-Id header");
        return;
    }
    if (!ids_valid("sbx", id)) {
        /* E2B's edge answers 502 for a sandbox it does not know. */
        e2b_reply_status(rq, 502, "sandbox not found: E2b-Sandbox-Id is not a sandbox id");
        return;
    }
    api_envd_relay(rq, id, path);
}

static void envd_health(req_t *rq) { envd_call(rq, "/health"); }
static void envd_files(req_t *rq) { envd_call(rq, "/files"); }
static void envd_rpc(req_t *rq, const char *svc, const char *method)
{
    char path[160];
    if (strlen(svc) > 64 || strlen(method) > 64) {
        http_reply_error(rq, API_NOT_FOUND, "no such envd method");
        return;
    }
    snprintf(path, sizeof path, "/%s/%s", svc, method);
    envd_call(rq, path);
}

/* ---- snapshots ----------------------------------------------------------- */

/* A snapshot's answer once its operation ended: 201 {"snapshotID","names"}. */
static void snapshot_done(req_t *rq, bool final)
{
    json_object *op = NULL, *sn = NULL;
    api_error_t err;
    if (op_ended(rq, final, "snapshot", "the snapshot was not made in time; it may still be", &op) < 0)
        return;
    const char *sid = jsonx_get_str(jsonx_get_obj(jsonx_get_obj(op, "operation"), "result"), "snapshot_id");
    char id[SBX_ID_MAX];
    snprintf(id, sizeof id, "%s", sid ? sid : "");
    json_object_put(op);
    if (store_snapshot_get(rq->db, auth_scope(rq), id, &sn, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    json_object *s = jsonx_get_obj(sn, "snapshot"), *out = json_object_new_object(), *names = json_object_new_array();
    jsonx_add_str(out, "snapshotID", jsonx_get_str(s, "id"));
    if (jsonx_get_str(s, "name"))
        json_object_array_add(names, json_object_new_string(jsonx_get_str(s, "name")));
    jsonx_add(out, "names", names);
    json_object_put(sn);
    http_reply_json(rq, 201, out);
}

/* createSnapshot: a snapshot of the sandbox (docs/snapshots.md), answered
 * once it is ready; a sandbox starts from it with templateID = its id. */
static void e2b_snapshot(req_t *rq, const char *id)
{
    json_object *body = NULL, *got, *resp = NULL;
    api_error_t err;
    const char *name = NULL;
    if (evbuffer_get_length(evhttp_request_get_input_buffer(rq->ev)) > 0 &&
        http_read_json(rq, (size_t)rq->ctl->max_body_client, &body) < 0)
        return;
    name = jsonx_get_str(body, "name");
    if (name && !spec_snapshot_name_ok(name)) {
        json_object_put(body);
        e2b_reply_error(rq, API_INVALID_ARGUMENT, "name must be 1 to 63 letters, digits, _, . or -, starting with a "
                                                  "letter or digit");
        return;
    }
    if (live_sandbox(rq, id, &got) < 0) {
        json_object_put(body);
        return;
    }
    json_object_put(got);
    int rc = store_snapshot_create(rq->db, &rq->ctl->lim, auth_scope(rq), id, name, NULL, NULL, false, NULL, NULL,
                                   rq->auth.token_id, &resp, &err);
    json_object_put(body);
    if (rc < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    api_kick_if_waiting(rq->ctl, resp);
    char op_id[SBX_ID_MAX];
    snprintf(op_id, sizeof op_id, "%s", jsonx_get_str(jsonx_get_obj(resp, "operation"), "id") ?
                                             jsonx_get_str(jsonx_get_obj(resp, "operation"), "id") : "");
    json_object_put(resp);
    park_on(rq, op_id, snapshot_done);
}

/* listSnapshots: [{"snapshotID","names"}], filtered by sandboxID and name. */
static void e2b_snapshots(req_t *rq)
{
    json_object *resp = NULL;
    api_error_t err;
    const char *sbx = http_query(rq, "sandboxID"), *name = http_query(rq, "name");
    if (sbx && !ids_valid("sbx", sbx)) {
        http_reply_json(rq, 200, json_object_new_array());
        return;
    }
    if (store_snapshot_list(rq->db, auth_scope(rq), sbx, &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    json_object *arr = json_object_new_array(), *list = jsonx_get_arr(resp, "snapshots");
    for (size_t i = 0; list && i < json_object_array_length(list); i++) {
        json_object *s = jsonx_parse_stored(json_object_to_json_string(json_object_array_get_idx(list, i)));
        const char *st = jsonx_get_str(s, "state"), *n = jsonx_get_str(s, "name");
        if (s && st && strcmp(st, "ready") == 0 && (!name || (n && strcmp(n, name) == 0))) {
            json_object *o = json_object_new_object(), *names = json_object_new_array();
            jsonx_add_str(o, "snapshotID", jsonx_get_str(s, "id"));
            if (n)
                json_object_array_add(names, json_object_new_string(n));
            jsonx_add(o, "names", names);
            json_object_array_add(arr, o);
        }
        json_object_put(s);
    }
    json_object_put(resp);
    http_reply_json(rq, 200, arr);
}

/* deleteSnapshot (DELETE /templates/{id}): a snapshot of the tenant by id
 * or name, 204; 404 for anything else (E2B templates are not Sandbox's). */
static void e2b_template_delete(req_t *rq, const char *id)
{
    json_object *resp = NULL;
    api_error_t err;
    if (!spec_snapshot_ref_ok(id)) {
        e2b_reply_error(rq, API_NOT_FOUND, "no such snapshot");
        return;
    }
    if (store_snapshot_delete(rq->db, auth_scope(rq), id, &resp, &err) < 0) {
        if (err.code == API_NOT_FOUND)
            e2b_reply_error(rq, API_NOT_FOUND, "no such snapshot");
        else
            http_reply_api_error(rq, &err);
        return;
    }
    json_object_put(resp);
    http_reply_text(rq, 204, "application/json", "", 0);
}

/* ---- network ------------------------------------------------------------ */

static void network_resume(req_t *rq, bool final)
{
    json_object *op = NULL;
    if (op_ended(rq, final, "take the new network rules", "the network rules were not applied in time; they may "
                 "still be", &op) < 0)
        return;
    json_object_put(op);
    http_reply_text(rq, 204, "application/json", "", 0);
}

/* PUT /sandboxes/{id}/network {"allowOut","denyOut"}: the sandbox's egress
 * rules replaced, as E2B's create maps them (e2b_network; a field left out
 * clears it), through the live change PATCH /v1/sandboxes/{id}/network
 * makes; 204 once its worker applies them. */
static void e2b_network_put(req_t *rq, const char *id)
{
    json_object *body = NULL, *out = NULL, *resp = NULL;
    api_error_t err;
    egress_rules_t rules;
    memset(&rules, 0, sizeof rules);
    if (http_read_json(rq, (size_t)rq->ctl->max_body_client, &body) < 0)
        return;
    if (!json_object_is_type(body, json_type_object)) {
        e2b_reply_error(rq, API_INVALID_ARGUMENT, "the body must be a JSON object");
        goto cleanup;
    }
    out = json_object_new_object();
    if (e2b_network(body, out, &err) < 0) {
        http_reply_api_error(rq, &err);
        goto cleanup;
    }
    json_object *eg = jsonx_get_obj(out, "egress");
    if (!eg) { /* nothing listed: every rule cleared, everything allowed */
        eg = json_object_new_object();
        jsonx_add_str(eg, "default", "allow");
        jsonx_add(out, "egress", eg);
    }
    if (egress_rules_from_json(eg, "network", &rules, &err) < 0 ||
        store_sandbox_network(rq->db, &rq->ctl->lim, auth_scope(rq), id, &rules, NULL, NULL, rq->auth.token_id,
                              &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        goto cleanup;
    }
    api_kick_if_waiting(rq->ctl, resp);
    char op_id[SBX_ID_MAX];
    const char *oid = jsonx_get_str(jsonx_get_obj(resp, "operation"), "id");
    snprintf(op_id, sizeof op_id, "%s", oid ? oid : "");
    park_on(rq, op_id, network_resume);
cleanup:
    egress_rules_release(&rules);
    json_object_put(resp);
    json_object_put(out);
    json_object_put(body);
}

/* ---- the table and the dispatch ----------------------------------------- */

#define E2B_DENY "a %s token cannot use the E2B API"

static const api_route_t e2b_routes[] = {
    { EVHTTP_REQ_POST, "/e2b/v2/sandboxes", RR_CLIENT, RF_OPERATION, E2B_DENY, e2b_create, NULL, NULL },
    { EVHTTP_REQ_POST, "/e2b/sandboxes", RR_CLIENT, RF_OPERATION, E2B_DENY, e2b_create, NULL, NULL },
    { EVHTTP_REQ_GET, "/e2b/v2/sandboxes", RR_CLIENT, 0, E2B_DENY, e2b_list, NULL, NULL },
    { EVHTTP_REQ_GET, "/e2b/sandboxes", RR_CLIENT, 0, E2B_DENY, e2b_list, NULL, NULL },
    { EVHTTP_REQ_GET, "/e2b/sandboxes/{id}", RR_CLIENT, 0, E2B_DENY, NULL, e2b_get, NULL },
    { EVHTTP_REQ_DELETE, "/e2b/sandboxes/{id}", RR_CLIENT, RF_OPERATION, E2B_DENY, NULL, e2b_kill, NULL },
    { EVHTTP_REQ_POST, "/e2b/sandboxes/{id}/timeout", RR_CLIENT, RF_OPERATION, E2B_DENY, NULL, e2b_timeout, NULL },
    { EVHTTP_REQ_POST, "/e2b/sandboxes/{id}/refreshes", RR_CLIENT, RF_OPERATION, E2B_DENY, NULL, e2b_refresh, NULL },
    { EVHTTP_REQ_POST, "/e2b/v2/sandboxes/{id}/connect", RR_CLIENT, RF_OPERATION, E2B_DENY, NULL, e2b_connect, NULL },
    { EVHTTP_REQ_POST, "/e2b/sandboxes/{id}/connect", RR_CLIENT, RF_OPERATION, E2B_DENY, NULL, e2b_connect, NULL },
    { EVHTTP_REQ_POST, "/e2b/sandboxes/{id}/pause", RR_CLIENT, RF_OPERATION, E2B_DENY, NULL, e2b_pause, NULL },
    { EVHTTP_REQ_POST, "/e2b/sandboxes/{id}/resume", RR_CLIENT, RF_OPERATION, E2B_DENY, NULL, e2b_resume, NULL },
    { EVHTTP_REQ_PUT, "/e2b/sandboxes/{id}/network", RR_CLIENT, RF_OPERATION, E2B_DENY, NULL, e2b_network_put,
      NULL },
    { EVHTTP_REQ_POST, "/e2b/sandboxes/{id}/snapshots", RR_CLIENT, RF_OPERATION, E2B_DENY, NULL, e2b_snapshot,
      NULL },
    { EVHTTP_REQ_GET, "/e2b/snapshots", RR_CLIENT, 0, E2B_DENY, e2b_snapshots, NULL, NULL },
    { EVHTTP_REQ_DELETE, "/e2b/templates/{id}", RR_CLIENT, 0, E2B_DENY, NULL, e2b_template_delete, NULL },
    { EVHTTP_REQ_POST, "/e2b/v3/templates", RR_CLIENT, 0, E2B_DENY, e2b_template_request, NULL, NULL },
    { EVHTTP_REQ_POST, "/e2b/v2/templates/{id}/builds/{build}", RR_CLIENT, RF_OPERATION, E2B_DENY, NULL, NULL,
      e2b_template_build_start },
    { EVHTTP_REQ_GET, "/e2b/templates/{id}/builds/{build}/status", RR_CLIENT, 0, E2B_DENY, NULL, NULL,
      e2b_template_build_status },
    { EVHTTP_REQ_GET, "/e2b/templates/{id}/files/{hash}", RR_CLIENT, 0, E2B_DENY, NULL, NULL, e2b_template_files },
    { EVHTTP_REQ_PUT, "/e2b/templates/{id}/files/{hash}", RR_CLIENT, 0, E2B_DENY, NULL, NULL,
      e2b_template_file_upload },
    { EVHTTP_REQ_GET, "/e2b/sandboxes/{id}/metrics", RR_CLIENT, 0, E2B_DENY, NULL, e2b_metrics, NULL },
    { EVHTTP_REQ_GET, "/e2b/envd/health", RR_CLIENT, RF_ROUTINE, E2B_DENY, envd_health, NULL, NULL },
    { EVHTTP_REQ_GET, "/e2b/envd/files", RR_CLIENT, 0, E2B_DENY, envd_files, NULL, NULL },
    { EVHTTP_REQ_POST, "/e2b/envd/files", RR_CLIENT, RF_OPERATION, E2B_DENY, envd_files, NULL, NULL },
    { EVHTTP_REQ_POST, "/e2b/envd/{service}/{method}", RR_CLIENT, 0, E2B_DENY, NULL, NULL, envd_rpc },
};
#define E2B_NROUTES (sizeof e2b_routes / sizeof e2b_routes[0])

void e2b_route(req_t *rq)
{
    const api_route_t *path = NULL;
    const char *params[2] = { NULL, NULL };
    const api_route_t *r = route_lookup_in(e2b_routes, E2B_NROUTES, rq, &path, params);
    /* envd's process and filesystem services speak Connect; the rest E2B's
     * REST errors. */
    bool envd = rq->nsegs >= 2 && strcmp(rq->segs[1], "envd") == 0;
    rq->dialect = envd && rq->nsegs == 4 && strchr(rq->segs[2], '.') ? DIALECT_CONNECT : DIALECT_E2B;
    rq->route_tmpl = r ? r->tmpl : path ? path->tmpl : "other";
    /* The key: X-API-Key for the control API, X-Access-Token (the create
     * answer's envdAccessToken: the same key) for envd; a bearer token
     * works for both. */
    const char *token = http_header(rq, envd ? "X-Access-Token" : "X-API-Key");
    if (!token || !*token)
        token = http_header(rq, "X-API-Key");
    if (!token || !*token)
        token = auth_bearer(http_header(rq, "Authorization"));
    if (server_client_auth(rq, token, envd ? "missing access token (X-Access-Token: a Sandbox token)"
                                           : "missing API key (X-API-Key: a Sandbox token)") < 0)
        return;
    if (server_route_checks(rq, path, r, "E2B ") < 0)
        return;
    server_route_call(rq, r, params);
}
