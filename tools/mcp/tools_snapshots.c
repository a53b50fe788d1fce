/* sandbox-mcp's snapshot tools: sandbox_snapshot, sandbox_snapshots,
 * sandbox_snapshot_delete (docs/snapshots.md), and sandbox_fork, made of
 * them; sandbox_templates and sandbox_template_build (docs/templates.md). sandbox_create's "from" and
 * "template" are create fields (client/request.c). */
#include <json-c/json.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client.h"
#include "errors.h"
#include "httpc.h"
#include "ids.h"
#include "jsonx.h"
#include "mcp.h"
#include "mcp_int.h"
#include "timeutil.h"

json_object *tool_snapshot(call_t *c, json_object *args)
{
    json_object *bad = NULL;
    const char *sbx = NULL, *name = NULL;
    bool wait = true, done = false, memory = false;
    int64_t tmo;
    char path[MCP_PATH_MAX];
    if (!tool_arg_str(args, "sandbox_id", &sbx, &bad) || !tool_arg_str(args, "name", &name, &bad) ||
        !tool_arg_bool(args, "memory", false, &memory, &bad) || !tool_arg_wait(args, true, &wait, &tmo, &bad) ||
        !tool_id_path(path, sizeof path, "/v1/sandboxes/", sbx, "/snapshots", &bad))
        return bad;
    json_object *body = json_object_new_object(), *resp = NULL;
    if (!body)
        return mcp_tool_error("internal", "out of memory");
    if (name)
        jsonx_add_str(body, "name", name);
    if (memory)
        jsonx_add_bool(body, "memory", true);
    json_object *failed = op_request(c, "POST", path, body, NULL, "snapshotting", wait, tmo, &resp, &done);
    json_object_put(body);
    if (failed)
        return failed;
    const char *snp = jsonx_get_str(jsonx_get_obj(resp, "snapshot"), "id");
    if (!snp) {
        json_object_put(resp);
        return mcp_tool_error("bad_response", "the snapshot answer names no snapshot");
    }
    if (wait && done) {
        /* The snapshot as it is now: ready, with its sizes. */
        json_object *got = NULL;
        api_err_t e;
        if (tool_id_path(path, sizeof path, "/v1/snapshots/", snp, NULL, &bad) &&
            api(c, "GET", path, NULL, NULL, deadline_in(MCP_REQUEST_TIMEOUT_MS), &got, &e) == 0 &&
            jsonx_get_obj(got, "snapshot"))
            jsonx_add(resp, "snapshot", json_object_get(jsonx_get_obj(got, "snapshot")));
        if (got)
            json_object_put(got);
        if (bad)
            json_object_put(bad);
    }
    return mcp_tool_ok(resp);
}

json_object *tool_snapshots(call_t *c, json_object *args)
{
    json_object *bad = NULL;
    const char *sbx = NULL;
    char path[MCP_PATH_MAX] = "/v1/snapshots";
    if (!tool_arg_str(args, "sandbox_id", &sbx, &bad) ||
        (sbx && !tool_id_path(path, sizeof path, "/v1/snapshots?sandbox=", sbx, NULL, &bad)))
        return bad;
    return get_result(c, path);
}

json_object *tool_snapshot_delete(call_t *c, json_object *args)
{
    json_object *bad = NULL, *resp = NULL;
    const char *snp = NULL;
    char path[MCP_PATH_MAX];
    api_err_t e;
    if (!tool_arg_str(args, "snapshot_id", &snp, &bad) ||
        !tool_id_path(path, sizeof path, "/v1/snapshots/", snp, NULL, &bad))
        return bad;
    /* Not an operation: the snapshot is deleted when the answer comes. */
    if (api(c, "DELETE", path, NULL, NULL, deadline_in(MCP_REQUEST_TIMEOUT_MS), &resp, &e) < 0)
        return api_failure(&e);
    return mcp_tool_ok(resp);
}

/* sandbox_snapshot_copy: POST /v1/snapshots/{id}/copies {"worker"}, an
 * operation (docs/snapshots.md#copies-on-other-workers), waited for like a snapshot. */
json_object *tool_snapshot_copy(call_t *c, json_object *args)
{
    json_object *bad = NULL, *resp = NULL;
    const char *snp = NULL, *worker = NULL;
    bool wait = true, done = false;
    int64_t tmo;
    char path[MCP_PATH_MAX];
    if (!tool_arg_str(args, "snapshot_id", &snp, &bad) || !tool_arg_str(args, "worker", &worker, &bad) ||
        !tool_arg_wait(args, true, &wait, &tmo, &bad) ||
        !tool_id_path(path, sizeof path, "/v1/snapshots/", snp, "/copies", &bad))
        return bad;
    if (!worker)
        return mcp_tool_error("invalid_argument", "worker is required: the name of the worker to copy it to");
    json_object *body = json_object_new_object();
    if (!body)
        return mcp_tool_error("internal", "out of memory");
    jsonx_add_str(body, "worker", worker);
    json_object *failed = op_request(c, "POST", path, body, NULL, "copying", wait, tmo, &resp, &done);
    json_object_put(body);
    return failed ? failed : mcp_tool_ok(resp);
}

/* sandbox_templates: the tenant's templates (docs/templates.md); they are
 * built with the CLI (sandbox templates build), sandbox_create's
 * "template" starts from one. */
json_object *tool_templates(call_t *c, json_object *args)
{
    (void)args;
    return get_result(c, "/v1/templates");
}

/* ---------------------------------------------------------------- sandbox_fork */

/* What `sandbox fork` does (tools/cli/fork.c): an unnamed snapshot of the
 * sandbox, waited for; count creates from it with the sandbox's spec; the
 * snapshot deleted once every create has ended (placement takes only a
 * snapshot not deleted, and a worker removes a deleted one's image unless a
 * container runs from it), so the call waits for the creates even with
 * wait false, which only keeps a failed fork from making it an error. */

/* POST path under the Idempotency-Key key, sent again while no answer came
 * or the controller was restarting, MCP_POST_ATTEMPTS times at most. */
static int post_keyed(call_t *c, const char *path, json_object *body, const char *key, json_object **ret,
                      api_err_t *e)
{
    for (int attempt = 1;; attempt++) {
        if (api(c, "POST", path, body, key, deadline_in(MCP_REQUEST_TIMEOUT_MS), ret, e) == 0)
            return 0;
        if (!e->retryable || attempt == MCP_POST_ATTEMPTS || atomic_load(&c->cancel))
            return SBX_EIO;
        struct timespec ts = { .tv_sec = 0, .tv_nsec = (long)CLIENT_RETRY_MS * 1000000L * attempt / 2 };
        nanosleep(&ts, NULL);
    }
}

static int64_t left_s(int64_t deadline)
{
    int64_t ms = deadline - time_mono_ms();
    return ms > 0 ? (ms + 999) / 1000 : 0;
}

static client_flag_t flag_in(json_object *o, const char *k)
{
    bool b = false;
    return !jsonx_get_bool(o, k, &b) ? CLIENT_FLAG_UNSET : b ? CLIENT_FLAG_TRUE : CLIENT_FLAG_FALSE;
}

static void int_in(json_object *o, const char *k, client_opt_int_t *ret)
{
    int64_t v = 0;
    if (jsonx_get_int(o, k, &v) && v > 0)
        *ret = (client_opt_int_t){ v, true };
}

/* A fork's create: the parent's spec from snapshot snp (its image; env is
 * never shown, so not copied; placement is the snapshot's worker). */
static int fork_body(json_object *parent, const char *snp, json_object **ret)
{
    json_object *trust = jsonx_get_obj(parent, "trust"), *labels = jsonx_get_obj(parent, "labels");
    client_create_spec_t spec = {
        .tenant = jsonx_get_str(parent, "tenant"), .from = snp, .network = jsonx_get_str(parent, "network"),
        .isolation = jsonx_get_str(parent, "isolation"), .untrusted_repo = flag_in(trust, "untrusted_repo"),
        .generated_code = flag_in(trust, "generated_code"), .hostile = flag_in(trust, "hostile"),
        .read_only_root = flag_in(parent, "read_only_root") == CLIENT_FLAG_TRUE ? CLIENT_FLAG_TRUE : CLIENT_FLAG_UNSET,
        .hardened = flag_in(parent, "hardened") == CLIENT_FLAG_TRUE ? CLIENT_FLAG_TRUE : CLIENT_FLAG_UNSET,
        .labels = labels && json_object_object_length(labels) > 0 ? labels : NULL,
    };
    int_in(parent, "cpu_millis", &spec.cpu_millis);
    int_in(parent, "memory_mib", &spec.memory_mib);
    int_in(parent, "disk_mib", &spec.disk_mib);
    int_in(parent, "ttl_seconds", &spec.ttl_seconds);
    return client_create_body(&spec, ret);
}

/* DELETE the snapshot; true when it is deleted. */
static bool snapshot_delete(call_t *c, const char *snp)
{
    char path[MCP_PATH_MAX];
    json_object *resp = NULL, *bad = NULL;
    api_err_t e;
    if (!tool_id_path(path, sizeof path, "/v1/snapshots/", snp, NULL, &bad)) {
        json_object_put(bad);
        return false;
    }
    bool ok = api(c, "DELETE", path, NULL, NULL, deadline_in(MCP_REQUEST_TIMEOUT_MS), &resp, &e) == 0;
    if (resp)
        json_object_put(resp);
    if (!ok)
        say(c->srv, 2, "sandbox_fork: snapshot %s was not deleted: %s: %s", snp, e.code, e.message);
    return ok;
}

/* Appends to buf (n bytes, NUL-terminated) what fits. */
__attribute__((format(printf, 3, 4))) static void append(char *buf, size_t n, const char *fmt, ...)
{
    size_t l = strlen(buf);
    va_list ap;
    va_start(ap, fmt);
    if (l + 1 < n)
        vsnprintf(buf + l, n - l, fmt, ap);
    va_end(ap);
}

/* {"code","message"} */
static json_object *error_obj(const char *code, const char *message)
{
    json_object *o = json_object_new_object();
    jsonx_add_str(o, "code", code ? code : "failed");
    jsonx_add_str(o, "message", message ? message : "");
    return o;
}

/* The snapshot, ready: NULL with *ret_snp (new reference: its answer), or
 * the isError result (a snapshot that did not get ready is deleted). */
static json_object *fork_snapshot(call_t *c, json_object *parent, const char *pid, const char *key,
                                  int64_t deadline, json_object **ret_snp)
{
    char path[MCP_PATH_MAX];
    json_object *bad = NULL, *resp = NULL, *op = NULL;
    api_err_t e;
    *ret_snp = NULL;
    if (!tool_id_path(path, sizeof path, "/v1/sandboxes/", pid, "/snapshots", &bad))
        return bad;
    json_object *body = NULL;
    if (client_fork_snapshot_body(parent, false, &body) < 0)
        return mcp_tool_error("internal", "out of memory");
    int r = post_keyed(c, path, body, key, &resp, &e);
    json_object_put(body);
    if (r < 0)
        return api_failure(&e);
    const char *snp = jsonx_get_str(jsonx_get_obj(resp, "snapshot"), "id");
    const char *soid = jsonx_get_str(jsonx_get_obj(resp, "operation"), "id");
    if (!snp || !soid) {
        json_object_put(resp);
        return mcp_tool_error("bad_response", "the snapshot answer names no snapshot or operation");
    }
    say(c->srv, 1, "forking %s: snapshot %s (operation %s)", pid, snp, soid);
    bool done = false;
    json_object *failed = wait_outcome(c, soid, left_s(deadline), &op, &done);
    if (!failed && !done) {
        char msg[300];
        snprintf(msg, sizeof msg, "snapshot %s of %s was not ready in time; no sandbox was forked", snp, pid);
        failed = mcp_tool_error("timeout", msg);
    }
    if (op)
        json_object_put(op);
    if (failed) {
        snapshot_delete(c, snp); /* no fork needs it */
        json_object_put(resp);
        return failed;
    }
    *ret_snp = resp;
    return NULL;
}

json_object *tool_fork(call_t *c, json_object *args)
{
    json_object *bad = NULL, *got = NULL, *sresp = NULL;
    const char *sbx = NULL;
    bool wait = true;
    int64_t count, tmo;
    char path[MCP_PATH_MAX], key[SBX_ID_MAX];
    api_err_t e;
    if (!tool_arg_str(args, "sandbox_id", &sbx, &bad) ||
        !tool_arg_int(args, "count", 1, MCP_FORK_MAX, 1, &count, &bad) ||
        !tool_arg_wait(args, true, &wait, &tmo, &bad) ||
        !tool_id_path(path, sizeof path, "/v1/sandboxes/", sbx, NULL, &bad))
        return bad;
    int64_t deadline = time_mono_ms() + tmo * 1000;
    if (sodium_init() < 0)
        return mcp_tool_error("internal", "cannot initialise libsodium");
    ids_new("fork", key);
    /* The parent's spec, and its id. */
    if (api(c, "GET", path, NULL, NULL, deadline_in(MCP_REQUEST_TIMEOUT_MS), &got, &e) < 0)
        return api_failure(&e);
    json_object *parent = jsonx_get_obj(got, "sandbox");
    const char *pid = jsonx_get_str(parent, "id");
    json_object *failed = pid ? fork_snapshot(c, parent, pid, key, deadline, &sresp)
                              : mcp_tool_error("bad_response", "the sandbox answer names no sandbox");
    if (failed) {
        json_object_put(got);
        return failed;
    }
    const char *snp = jsonx_get_str(jsonx_get_obj(sresp, "snapshot"), "id");
    /* The creates, each an entry of forks; then their ends. */
    json_object *forks = json_object_new_array();
    char problems[1024] = "", code[64] = ""; /* what went wrong, the first failure's code */
    char runs[1024] = "";                       /* the forks that run */
    for (int64_t i = 1; i <= count; i++) {
        char ckey[SBX_ID_MAX + 24];
        snprintf(ckey, sizeof ckey, "%s-%lld", key, (long long)i);
        json_object *body = NULL, *resp = NULL, *entry = json_object_new_object();
        json_object_array_add(forks, entry);
        if (fork_body(parent, snp, &body) < 0) {
            json_object_put(forks);
            json_object_put(sresp);
            json_object_put(got);
            return mcp_tool_error("internal", "out of memory");
        }
        int r = post_keyed(c, "/v1/sandboxes", body, ckey, &resp, &e);
        json_object_put(body);
        if (r < 0) {
            jsonx_add(entry, "error", error_obj(e.code, e.message));
            append(problems, sizeof problems, "; fork %lld refused: %s: %.200s", (long long)i, e.code, e.message);
            if (!code[0])
                snprintf(code, sizeof code, "%s", e.code);
            continue;
        }
        json_object *op = jsonx_get_obj(resp, "operation");
        jsonx_add_str(entry, "sandbox_id", jsonx_get_str(jsonx_get_obj(resp, "sandbox"), "id"));
        jsonx_add_str(entry, "operation_id", jsonx_get_str(op, "id"));
        jsonx_add_str(entry, "state", jsonx_get_str(op, "state"));
        json_object_put(resp);
    }
    bool needed = false;
    int running = 0;
    for (size_t i = 0; i < json_object_array_length(forks); i++) {
        json_object *entry = json_object_array_get_idx(forks, i), *op = NULL;
        const char *oid = jsonx_get_str(entry, "operation_id"), *sid = jsonx_get_str(entry, "sandbox_id");
        if (!oid)
            continue;
        bool done = false;
        json_object *failed_wait = wait_outcome(c, oid, left_s(deadline), &op, &done);
        if (failed_wait) {
            /* Failed, cancelled, or the wait itself failed: the operation says which. */
            json_object_put(failed_wait);
            json_object *resp = NULL;
            if (tool_id_path(path, sizeof path, "/v1/operations/", oid, NULL, &bad) &&
                api(c, "GET", path, NULL, NULL, deadline_in(MCP_REQUEST_TIMEOUT_MS), &resp, &e) == 0) {
                op = json_object_get(jsonx_get_obj(resp, "operation"));
                const char *st = jsonx_get_str(op, "state");
                done = st && (strcmp(st, "failed") == 0 || strcmp(st, "cancelled") == 0);
            } else {
                jsonx_add(entry, "error", bad ? error_obj("internal", "cannot build the request path")
                                              : error_obj(e.code, e.message));
            }
            if (bad)
                json_object_put(bad);
            bad = NULL;
            if (resp)
                json_object_put(resp);
        }
        json_object *err = jsonx_get_obj(op, "error");
        if (op) {
            jsonx_add_str(entry, "state", jsonx_get_str(op, "state"));
            if (err)
                jsonx_add(entry, "error", json_object_get(err));
        }
        const char *st = jsonx_get_str(entry, "state");
        bool ok = done && st && strcmp(st, "succeeded") == 0;
        running += ok;
        needed = needed || !done;
        if (ok)
            append(runs, sizeof runs, "%s%s", runs[0] ? ", " : ": ", sid ? sid : "?");
        if (!ok) {
            const char *why = jsonx_get_str(jsonx_get_obj(entry, "error"), "code");
            append(problems, sizeof problems, "; %s %s%s%.200s", sid ? sid : "?", done ? "failed" : "not started in time",
                   why ? ": " : "", why ? why : "");
            if (!code[0])
                snprintf(code, sizeof code, "%s", why ? why : done ? "failed" : "timeout");
        }
        if (op)
            json_object_put(op);
    }
    bool deleted = !needed && snapshot_delete(c, snp);
    json_object *result = json_object_new_object();
    jsonx_add_str(result, "snapshot_id", snp);
    jsonx_add_bool(result, "snapshot_deleted", deleted);
    jsonx_add(result, "sandboxes", forks);
    json_object *out;
    if (wait && running < count) {
        char msg[2500];
        snprintf(msg, sizeof msg, "%d of %lld forks of %s run%s (snapshot %s %s)%s", running, (long long)count, pid,
                 runs, snp, deleted ? "deleted" : "kept: sandbox_snapshot_delete it once they run", problems);
        out = mcp_tool_error(code[0] ? code : "failed", msg);
        json_object_put(result);
    } else {
        out = mcp_tool_ok(result);
    }
    json_object_put(sresp);
    json_object_put(got);
    return out;
}

/* ---------------------------------------------------------------- sandbox_template_build */

/* A build the server drives (POST /v1/templates/{name}/builds), waited for
 * until it ends or timeout_seconds pass (then answered as it is: the build
 * goes on); with build_id, that build read (and waited for likewise), or
 * with cancel, cancelled (DELETE …/builds/{id}). */
json_object *tool_template_build(call_t *c, json_object *args)
{
    json_object *bad = NULL, *resp = NULL, *steps = NULL, *sb = NULL, *cfg = NULL;
    const char *tmpl = NULL, *bid = NULL;
    bool wait = true, cancel = false;
    int64_t tmo;
    char path[MCP_PATH_MAX], one[MCP_PATH_MAX];
    api_err_t e;
    if (!tool_arg_str(args, "template", &tmpl, &bad) || !tool_arg_str(args, "build_id", &bid, &bad) ||
        !tool_arg_bool(args, "cancel", false, &cancel, &bad) || !tool_arg_wait(args, true, &wait, &tmo, &bad))
        return bad;
    if (!tmpl)
        return mcp_tool_error("invalid_argument", "template is required");
    if (!tool_id_path(path, sizeof path, "/v1/templates/", tmpl, "/builds", &bad))
        return bad;
    int64_t deadline = time_mono_ms() + tmo * 1000;
    if (cancel && !bid)
        return mcp_tool_error("invalid_argument", "cancel needs build_id: the build to cancel");
    if (bid) {
        if (!ids_valid("bld", bid))
            return mcp_tool_error("invalid_argument", "build_id must be a build id (bld_...)");
        if (cancel) { /* answered with the build as the cancel left it */
            if ((size_t)snprintf(one, sizeof one, "%s/%s", path, bid) >= sizeof one)
                return mcp_tool_error("invalid_argument", "template too long");
            if (api(c, "DELETE", one, NULL, NULL, deadline_in(MCP_REQUEST_TIMEOUT_MS), &resp, &e) < 0)
                return api_failure(&e);
            return mcp_tool_ok(resp);
        }
    } else {
        json_object_object_get_ex(args, "steps", &steps);
        json_object_object_get_ex(args, "sandbox", &sb);
        json_object_object_get_ex(args, "config", &cfg);
        json_object *body = json_object_new_object();
        jsonx_add(body, "steps", steps ? json_object_get(steps) : json_object_new_array());
        if (sb)
            jsonx_add(body, "sandbox", json_object_get(sb));
        if (cfg)
            jsonx_add(body, "config", json_object_get(cfg));
        char key[SBX_ID_MAX];
        ids_new("mcpbuild", key);
        int rc = post_keyed(c, path, body, key, &resp, &e);
        json_object_put(body);
        if (rc < 0)
            return api_failure(&e);
        bid = jsonx_get_str(jsonx_get_obj(resp, "build"), "id");
        if (!bid || !ids_valid("bld", bid)) {
            json_object_put(resp);
            return mcp_tool_error("bad_response", "the build answer names no build");
        }
    }
    int n = snprintf(one, sizeof one, "%s/%s", path, bid);
    json_object_put(resp); /* bid is read again below, from the copy in one */
    resp = NULL;
    if (n < 0 || (size_t)n >= sizeof one)
        return mcp_tool_error("invalid_argument", "template too long");
    const char *state = "building";
    for (;;) {
        json_object_put(resp);
        resp = NULL;
        if (api(c, "GET", one, NULL, NULL, deadline_in(MCP_REQUEST_TIMEOUT_MS), &resp, &e) < 0)
            return api_failure(&e);
        state = jsonx_get_str(jsonx_get_obj(resp, "build"), "state");
        if (!state)
            state = "?";
        bool over = strcmp(state, "building") != 0 && strcmp(state, "snapshotting") != 0;
        if (over || !wait || time_mono_ms() >= deadline || atomic_load(&c->cancel))
            break;
        struct timespec ts = { .tv_sec = 1, .tv_nsec = 0 };
        nanosleep(&ts, NULL);
    }
    if (wait && (strcmp(state, "failed") == 0 || strcmp(state, "cancelled") == 0)) {
        json_object *err = jsonx_get_obj(jsonx_get_obj(resp, "build"), "error");
        char msg[700];
        snprintf(msg, sizeof msg, "build %s of %s %s: %s", one + strlen(path) + 1, tmpl, state,
                 jsonx_get_str(err, "message") ? jsonx_get_str(err, "message") : "no reason given");
        json_object *out = mcp_tool_error(jsonx_get_str(err, "code") ? jsonx_get_str(err, "code") : "build_failed",
                                          msg);
        json_object_put(resp);
        return out;
    }
    return mcp_tool_ok(resp);
}
