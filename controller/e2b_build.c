/* E2B's template builds (the SDK's Template.build, docs/e2b.md) as builds
 * the server drives (docs/templates.md, store/builds.c):
 *   POST /v3/templates                        a build of NAME, waiting
 *   POST /v2/templates/{id}/builds/{build}    its steps: the build starts
 *   GET  /templates/{id}/builds/{build}/status  its state and log entries
 *   GET  /templates/{id}/files/{hash}         COPY's files: present, or where to upload them
 *   PUT  /templates/{id}/files/{hash}         that upload (a tar, maybe gzipped)
 * The template id is the template's name. E2B's instructions become exec
 * steps as a Dockerfile's do in the CLI: ENV, WORKDIR and USER set what the
 * later RUNs get (WORKDIR also makes its directory) and become the
 * version's defaults; a COPY is an exec that unpacks its uploaded files
 * (its stdin) in the build sandbox and copies its source to its
 * destination. */
#include "e2b.h"
#include "api.h"
#include "b64.h"
#include "ids.h"
#include "jsonx.h"
#include "limits.h"
#include "store.h"

#include <event2/buffer.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The E2B dialect's error from an API error. */
static void reply_err(req_t *rq, const api_error_t *err)
{
    e2b_reply_error(rq, err->code, err->message);
}

static bool template_id_ok(req_t *rq, const char *id)
{
    if (spec_snapshot_name_ok(id))
        return true;
    e2b_reply_error(rq, API_INVALID_ARGUMENT, "a template name is 1 to 63 letters, digits, _, . or -, starting "
                                              "with a letter or digit");
    return false;
}

/* requestBuild: {name (or alias), tags, cpuCount, memoryMB, minFreeDiskMb}
 * -> a waiting build; 202 {templateID, buildID, names, aliases, tags,
 * public}. */
void e2b_template_request(req_t *rq)
{
    json_object *body = NULL, *req = NULL, *resp = NULL;
    api_error_t err;
    if (http_read_json(rq, (size_t)rq->ctl->max_body_client, &body) < 0)
        return;
    if (!json_object_is_type(body, json_type_object)) {
        e2b_reply_error(rq, API_INVALID_ARGUMENT, "the body must be a JSON object");
        goto out;
    }
    const char *name = jsonx_get_str(body, "name");
    if (!name)
        name = jsonx_get_str(body, "alias");
    char base[SBX_SNAPSHOT_NAME_MAX + 1];
    const char *colon = name ? strchr(name, ':') : NULL;
    if (!name || (colon && (size_t)(colon - name) >= sizeof base)) {
        e2b_reply_error(rq, API_INVALID_ARGUMENT, "name is required (the template's name)");
        goto out;
    }
    snprintf(base, sizeof base, "%.*s", colon ? (int)(colon - name) : (int)strlen(name), name);
    json_object *tags = NULL;
    if (colon || (json_object_object_get_ex(body, "tags", &tags) && json_object_is_type(tags, json_type_array) &&
                  json_object_array_length(tags) > 0)) {
        e2b_reply_error(rq, API_INVALID_ARGUMENT, "template tags are not supported by this server: each build "
                                                  "adds a numbered version (docs/templates.md)");
        goto out;
    }
    if (!template_id_ok(rq, base))
        goto out;
    req = json_object_new_object();
    int64_t v = 0;
    if (jsonx_get_int(body, "cpuCount", &v) && (v < 1 || v > SBX_CPU_MILLIS_MAX / 1000)) {
        e2b_reply_error(rq, API_INVALID_ARGUMENT, "cpuCount is out of range");
        goto out;
    }
    if (v > 0)
        jsonx_add_int(req, "cpu_millis", v * 1000);
    if (jsonx_get_int(body, "memoryMB", &v) && v > 0)
        jsonx_add_int(req, "memory_mib", v);
    if (jsonx_get_int(body, "minFreeDiskMb", &v) && v > 0)
        jsonx_add_int(req, "disk_mib", v);
    int64_t active = 0;
    if (store_build_active_count(rq->db, rq->auth.tenant_id, &active) < 0) {
        e2b_reply_error(rq, API_UNAVAILABLE, "database unavailable");
        goto out;
    }
    if (active >= SBX_BUILDS_ACTIVE_MAX) {
        e2b_reply_error(rq, API_QUOTA_EXCEEDED, "too many template builds under way in this tenant; wait for one");
        goto out;
    }
    if (store_build_waiting(rq->db, rq->auth.tenant_id, base, req, rq->auth.token_id, &resp, &err) < 0) {
        reply_err(rq, &err);
        goto out;
    }
    atomic_store(&rq->ctl->builds_active, true);
    json_object *o = json_object_new_object(), *names = json_object_new_array();
    json_object_array_add(names, json_object_new_string(base));
    jsonx_add_str(o, "templateID", base);
    jsonx_add_str(o, "buildID", jsonx_get_str(jsonx_get_obj(resp, "build"), "id"));
    jsonx_add(o, "names", names);
    jsonx_add(o, "aliases", json_object_get(names));
    jsonx_add(o, "tags", json_object_new_array());
    jsonx_add_bool(o, "public", false);
    http_reply_json(rq, 202, o);
out:
    json_object_put(resp);
    json_object_put(req);
    json_object_put(body);
}

/* One exec step: sh -c cmd with the env, cwd and user so far. */
static json_object *run_step(const char *cmd, json_object *env, const char *cwd, const char *user)
{
    json_object *s = json_object_new_object(), *argv = json_object_new_array();
    json_object_array_add(argv, json_object_new_string("/bin/sh"));
    json_object_array_add(argv, json_object_new_string("-c"));
    json_object_array_add(argv, json_object_new_string(cmd));
    jsonx_add(s, "argv", argv);
    if (json_object_object_length(env) > 0)
        jsonx_add(s, "env", json_object_get(env));
    if (cwd)
        jsonx_add_str(s, "cwd", cwd);
    if (user && strcmp(user, "root") != 0 && strcmp(user, "0") != 0)
        jsonx_add_str(s, "user", user);
    return s;
}

/* The string args of an instruction (NULL when any is not a string). */
static const char *arg(json_object *args, size_t i)
{
    json_object *v = json_object_array_get_idx(args, i);
    return json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

/* A COPY instruction's exec step (api_build_copy_step): its files
 * uploaded under filesHash, in the WORKDIR so far. */
static int copy_step(req_t *rq, size_t i, json_object *st, json_object *args, size_t na, const char *cwd,
                     int64_t *total, json_object **ret, api_error_t *err)
{
    const char *hash = jsonx_get_str(st, "filesHash");
    if (na < 2 || na > 4)
        return api_error_set(err, API_INVALID_ARGUMENT, "steps[%zu]: COPY takes src, dest, user and mode", i);
    if (!hash)
        return api_error_set(err, API_INVALID_ARGUMENT, "steps[%zu]: COPY needs its filesHash", i);
    char what[32];
    snprintf(what, sizeof what, "steps[%zu]", i);
    const char *src = arg(args, 0);
    return api_build_copy_step(rq, what, hash, &src, 1, arg(args, 1), na > 2 ? arg(args, 2) : "",
                               na > 3 ? arg(args, 3) : "", cwd, total, ret, err);
}

/* E2B's steps into exec steps, their names (the instruction's index as
 * E2B counts them: 1 is the first after the base) and the version's
 * config. 0, or SBX_EINVAL with err, SBX_EDB. */
static int translate(req_t *rq, json_object *in, json_object **ret_steps, json_object **ret_names,
                     json_object **ret_config, api_error_t *err)
{
    json_object *steps = json_object_new_array(), *names = json_object_new_array(), *env = json_object_new_object();
    const char *cwd = NULL, *user = NULL;
    int64_t copied = 0;
    int rc = 0;
    size_t n = json_object_is_type(in, json_type_array) ? json_object_array_length(in) : 0;
    if (in && !json_object_is_type(in, json_type_array))
        rc = api_error_set(err, API_INVALID_ARGUMENT, "steps must be an array");
    for (size_t i = 0; rc == 0 && i < n; i++) {
        json_object *st = json_object_array_get_idx(in, i), *args = NULL;
        const char *type = jsonx_get_str(st, "type");
        json_object_object_get_ex(st, "args", &args);
        size_t na = json_object_is_type(args, json_type_array) ? json_object_array_length(args) : 0;
        for (size_t k = 0; k < na; k++)
            if (!arg(args, k))
                rc = api_error_set(err, API_INVALID_ARGUMENT, "steps[%zu]: args must be strings", i);
        char name[24];
        snprintf(name, sizeof name, "%zu", i + 1);
        if (rc) {
            break;
        } else if (!type) {
            rc = api_error_set(err, API_INVALID_ARGUMENT, "steps[%zu]: type is required", i);
        } else if (strcmp(type, "RUN") == 0 && na >= 1 && na <= 2) {
            json_object_array_add(steps, run_step(arg(args, 0), env, cwd, na == 2 ? arg(args, 1) : user));
            json_object_array_add(names, json_object_new_string(name));
        } else if (strcmp(type, "ENV") == 0 && na % 2 == 0) {
            for (size_t k = 0; k + 1 < na; k += 2)
                jsonx_add_str(env, arg(args, k), arg(args, k + 1));
        } else if (strcmp(type, "WORKDIR") == 0 && na == 1 && arg(args, 0)[0] == '/') {
            cwd = arg(args, 0);
            json_object *mk = json_object_new_object(), *argv = json_object_new_array();
            const char *mkdir_argv[] = { "mkdir", "-p", "--", cwd };
            for (size_t k = 0; k < 4; k++)
                json_object_array_add(argv, json_object_new_string(mkdir_argv[k]));
            jsonx_add(mk, "argv", argv);
            json_object_array_add(steps, mk);
            json_object_array_add(names, json_object_new_string(name));
        } else if (strcmp(type, "USER") == 0 && na == 1) {
            user = arg(args, 0);
        } else if (strcmp(type, "COPY") == 0) {
            json_object *cs = NULL;
            if ((rc = copy_step(rq, i, st, args, na, cwd, &copied, &cs, err)) == 0) {
                json_object_array_add(steps, cs);
                json_object_array_add(names, json_object_new_string(name));
            }
        } else {
            rc = api_error_set(err, API_INVALID_ARGUMENT, "steps[%zu]: %.32s with %zu args is not supported "
                               "(RUN, COPY, ENV, WORKDIR with an absolute path, USER)", i, type, na);
        }
    }
    if (rc == 0 && json_object_array_length(steps) > SBX_BUILD_STEPS_MAX)
        rc = api_error_set(err, API_INVALID_ARGUMENT, "at most %d steps", SBX_BUILD_STEPS_MAX);
    if (rc) {
        json_object_put(steps);
        json_object_put(names);
        json_object_put(env);
        return rc;
    }
    json_object *cfg = json_object_new_object();
    if (json_object_object_length(env) > 0)
        jsonx_add(cfg, "env", json_object_get(env));
    if (cwd)
        jsonx_add_str(cfg, "workdir", cwd);
    if (user)
        jsonx_add_str(cfg, "user", user);
    json_object_put(env);
    *ret_steps = steps;
    *ret_names = names;
    *ret_config = cfg;
    return 0;
}

/* triggerBuild: TemplateBuildStartV2 {fromImage | fromTemplate, steps,
 * startCmd, readyCmd, force} -> the build sandbox made and the build
 * started; 202. */
void e2b_template_build_start(req_t *rq, const char *tmpl, const char *build_id)
{
    json_object *body = NULL, *create = NULL, *steps = NULL, *names = NULL, *cfg = NULL, *canon = NULL,
                *created = NULL;
    api_error_t err;
    if (!template_id_ok(rq, tmpl))
        return;
    if (!ids_valid("bld", build_id)) {
        e2b_reply_error(rq, API_NOT_FOUND, "no such build");
        return;
    }
    if (http_read_json(rq, (size_t)rq->ctl->max_body_client, &body) < 0)
        return;
    if (!json_object_is_type(body, json_type_object)) {
        e2b_reply_error(rq, API_INVALID_ARGUMENT, "the body must be a JSON object");
        goto out;
    }
    json_object_object_foreach(body, key, val) {
        if (json_object_is_type(val, json_type_null) || strcmp(key, "fromImage") == 0 ||
            strcmp(key, "fromTemplate") == 0 || strcmp(key, "steps") == 0 || strcmp(key, "force") == 0)
            continue;
        char msg[200];
        snprintf(msg, sizeof msg, "%.40s is not supported by this server's template builds (docs/e2b.md)", key);
        e2b_reply_error(rq, API_INVALID_ARGUMENT, msg);
        goto out;
    }
    const char *img = jsonx_get_str(body, "fromImage"), *from = jsonx_get_str(body, "fromTemplate");
    if ((img && from) || (!img && !from)) {
        e2b_reply_error(rq, API_INVALID_ARGUMENT, "exactly one of fromImage and fromTemplate");
        goto out;
    }
    if (store_build_request(rq->db, rq->auth.tenant_id, tmpl, build_id, &create, &err) < 0) {
        reply_err(rq, &err);
        goto out;
    }
    json_object *sv = NULL;
    json_object_object_get_ex(body, "steps", &sv);
    int trc = translate(rq, sv, &steps, &names, &cfg, &err);
    if (trc == SBX_EDB) {
        e2b_reply_error(rq, API_UNAVAILABLE, "database unavailable");
        goto out;
    }
    if (trc < 0) {
        reply_err(rq, &err);
        goto out;
    }
    /* each step checked as POST /exec checks one */
    size_t bad = 0;
    if (api_build_steps_canon(rq->ctl, steps, &canon, &bad, &err) < 0) {
        reply_err(rq, &err);
        goto out;
    }
    /* the base: an image, or a template of the tenant's ("base": the
     * server's default image) */
    if (img)
        jsonx_add_str(create, "image", img);
    else if (strcmp(from, "base") != 0)
        jsonx_add_str(create, "template", from);
    jsonx_add_int(create, "ttl_seconds", SBX_BUILD_TTL_SECONDS_DEFAULT);
    json_object *labels = json_object_new_object();
    jsonx_add_str(labels, "template-build", tmpl);
    jsonx_add(create, "labels", labels);
    bool replayed = false;
    char ckey[SBX_ID_MAX + 8];
    snprintf(ckey, sizeof ckey, "tb-%s", build_id); /* a retried trigger makes the same sandbox */
    if (api_sandbox_create_json(rq, create, ckey, &created, &replayed) < 0)
        goto out; /* answered */
    const char *sbx = jsonx_get_str(jsonx_get_obj(created, "sandbox"), "id");
    const char *op = jsonx_get_str(jsonx_get_obj(created, "operation"), "id");
    build_req_t br = { .tenant_id = rq->auth.tenant_id, .template_name = tmpl, .sandbox_id = sbx ? sbx : "",
                       .create_op_id = op ? op : "", .steps = canon, .config = cfg,
                       .created_by = rq->auth.token_id };
    if (store_build_start(rq->db, &br, build_id, names, &err) < 0) {
        if (!replayed && sbx)
            api_build_abandon(rq, sbx);
        reply_err(rq, &err);
        goto out;
    }
    api_build_started(rq, created, replayed);
    http_reply_text(rq, 202, "application/json", "", 0);
out:
    json_object_put(created);
    json_object_put(canon);
    json_object_put(cfg);
    json_object_put(names);
    json_object_put(steps);
    json_object_put(create);
    json_object_put(body);
}

/* The string at i of arr, or NULL. */
static const char *str_at(json_object *arr, size_t i)
{
    json_object *v = json_object_array_get_idx(arr, i);
    return json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

/* A log entry {timestamp, level, message, step}. */
static void entry(json_object *arr, const char *ts, const char *level, const char *msg, const char *step)
{
    json_object *e = json_object_new_object();
    jsonx_add_str(e, "timestamp", ts);
    jsonx_add_str(e, "level", level);
    jsonx_add_str(e, "message", msg);
    if (step)
        jsonx_add_str(e, "step", step);
    json_object_array_add(arr, e);
}

/* What a finished step printed, as log entries of its own (one a line):
 * its last E2B_STEP_LOG_BYTES bytes the server kept, within *budget, which
 * bounds a whole status answer (a step's output is final once it ended, so
 * the entries, and so logsOffset, stay the same from one poll to the next). */
#define E2B_STEP_LOG_BYTES  8192
#define E2B_STATUS_LOG_BYTES (128 * 1024)
static void step_output(req_t *rq, json_object *all, const char *ts, const char *op, const char *step,
                        int64_t *budget)
{
    json_object *o = NULL;
    bool ready = false;
    api_error_t err;
    int64_t end = 0;
    if (!op || *budget <= 0 || store_output_read(rq->db, auth_scope(rq), op, 0, 0, &o, &ready, &err) < 0)
        return;
    jsonx_get_int(o, "end_offset", &end);
    json_object_put(o);
    o = NULL;
    int64_t want = *budget < E2B_STEP_LOG_BYTES ? *budget : E2B_STEP_LOG_BYTES, from = end > want ? end - want : 0;
    if (end <= 0 || store_output_read(rq->db, auth_scope(rq), op, from, (size_t)want, &o, &ready, &err) < 0)
        return;
    json_object *chunks = jsonx_get_arr(o, "chunks");
    size_t total = 0;
    for (size_t i = 0; chunks && i < json_object_array_length(chunks); i++) {
        const char *d = jsonx_get_str(json_object_array_get_idx(chunks, i), "data");
        total += d ? strlen(d) : 0;
    }
    char *text = malloc(total + 1);
    if (!text) {
        json_object_put(o);
        return;
    }
    size_t n = 0;
    for (size_t i = 0; chunks && i < json_object_array_length(chunks); i++) {
        const char *d = jsonx_get_str(json_object_array_get_idx(chunks, i), "data");
        size_t l = d ? strlen(d) : 0;
        memcpy(text + n, d ? d : "", l);
        n += l;
    }
    text[n] = '\0';
    json_object_put(o);
    *budget -= (int64_t)n;
    if (from > 0) {
        char msg[160];
        snprintf(msg, sizeof msg, "(%lld bytes of its output before these: GET /v1/operations/%s/output)",
                 (long long)from, op);
        entry(all, ts, "info", msg, step);
    }
    for (char *line = text, *nl; line && *line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        size_t l = strlen(line);
        if (l > 0 && line[l - 1] == '\r')
            line[--l] = '\0';
        if (l > 0)
            entry(all, ts, "info", line, step);
    }
    free(text);
}

/* getBuildStatus: {templateID, buildID, status, logEntries (from
 * logsOffset), logs, reason}. The entries: per step run, what it printed
 * (step_output) and its operation, state and exit code; then the version
 * made or the failure. */
void e2b_template_build_status(req_t *rq, const char *tmpl, const char *build_id)
{
    json_object *resp = NULL;
    api_error_t err;
    if (!template_id_ok(rq, tmpl))
        return;
    const char *off = http_query(rq, "logsOffset");
    char *end = NULL;
    long long offset = off ? strtoll(off, &end, 10) : 0;
    if (off && (!*off || *end || offset < 0)) {
        e2b_reply_error(rq, API_INVALID_ARGUMENT, "logsOffset must be a number of entries");
        return;
    }
    if (!ids_valid("bld", build_id) ||
        store_build_get(rq->db, rq->auth.tenant_id, tmpl, build_id, &resp, &err) < 0) {
        if (!ids_valid("bld", build_id) || err.code == API_NOT_FOUND)
            e2b_reply_error(rq, API_NOT_FOUND, "no such build");
        else
            reply_err(rq, &err);
        json_object_put(resp);
        return;
    }
    json_object *b = jsonx_get_obj(resp, "build");
    const char *state = jsonx_get_str(b, "state") ? jsonx_get_str(b, "state") : "";
    const char *ts = jsonx_get_str(b, "finished_at") ? jsonx_get_str(b, "finished_at")
                                                     : jsonx_get_str(b, "created_at");
    json_object *all = json_object_new_array(), *done = jsonx_get_arr(b, "steps");
    json_object *names = jsonx_get_arr(b, "step_names");
    int64_t budget = E2B_STATUS_LOG_BYTES;
    for (size_t i = 0; done && i < json_object_array_length(done); i++) {
        json_object *s = json_object_array_get_idx(done, i);
        step_output(rq, all, ts, jsonx_get_str(s, "operation"), names ? str_at(names, i) : NULL, &budget);
        int64_t code = -1;
        bool has = jsonx_get_int(s, "exit_code", &code);
        char msg[200], exit_text[40] = "";
        if (has)
            snprintf(exit_text, sizeof exit_text, ", exit code %lld", (long long)code);
        snprintf(msg, sizeof msg, "step %zu: operation %s %s%s", i + 1,
                 jsonx_get_str(s, "operation") ? jsonx_get_str(s, "operation") : "?",
                 jsonx_get_str(s, "state") ? jsonx_get_str(s, "state") : "?", exit_text);
        const char *nm = names ? str_at(names, i) : NULL;
        entry(all, ts, has && code != 0 ? "error" : "info", msg, nm);
    }
    const char *status = "building";
    json_object *reason = NULL;
    if (strcmp(state, "waiting") == 0) {
        status = "waiting";
    } else if (strcmp(state, "ready") == 0) {
        status = "ready";
        char msg[160];
        int64_t v = 0;
        jsonx_get_int(b, "version", &v);
        snprintf(msg, sizeof msg, "template %s version %lld ready (%s)", tmpl, (long long)v,
                 jsonx_get_str(b, "snapshot_id") ? jsonx_get_str(b, "snapshot_id") : "?");
        entry(all, ts, "info", msg, "finalize");
    } else if (strcmp(state, "failed") == 0 || strcmp(state, "cancelled") == 0) {
        status = "error";
        const char *m = jsonx_get_str(jsonx_get_obj(b, "error"), "message");
        entry(all, ts, "error", m ? m : state, NULL);
        reason = json_object_new_object();
        jsonx_add_str(reason, "message", m ? m : state);
        size_t n = done ? json_object_array_length(done) : 0;
        const char *nm = n > 0 && names && m && strncmp(m, "step ", 5) == 0 ? str_at(names, n - 1) : NULL;
        if (nm)
            jsonx_add_str(reason, "step", nm);
    }
    json_object *o = json_object_new_object(), *page = json_object_new_array();
    for (size_t i = (size_t)offset; i < json_object_array_length(all); i++)
        json_object_array_add(page, json_object_get(json_object_array_get_idx(all, i)));
    jsonx_add_str(o, "templateID", tmpl);
    jsonx_add_str(o, "buildID", build_id);
    jsonx_add_str(o, "status", status);
    jsonx_add(o, "logEntries", page);
    jsonx_add(o, "logs", json_object_new_array());
    if (reason)
        jsonx_add(o, "reason", reason);
    json_object_put(all);
    json_object_put(resp);
    http_reply_json(rq, 200, o);
}

/* A files hash as E2B's SDK makes it: sha256, hex. */
static bool files_hash_ok(req_t *rq, const char *hash)
{
    size_t n = strlen(hash);
    bool ok = n == 64 && strspn(hash, "0123456789abcdef") == n;
    if (!ok)
        e2b_reply_error(rq, API_INVALID_ARGUMENT, "a files hash is 64 lowercase hex digits (sha256)");
    return ok;
}

/* getFileUploadLink: {"present": true} when the tenant holds the files of
 * hash; else where to PUT them: this very path on this server, with the
 * caller's own key as the header it came in (the client has it already;
 * the server signs no other kind of link). */
void e2b_template_files(req_t *rq, const char *tmpl, const char *hash)
{
    if (!template_id_ok(rq, tmpl) || !files_hash_ok(rq, hash))
        return;
    bool have = false;
    if (store_build_file_has(rq->db, rq->auth.tenant_id, hash, &have) < 0) {
        e2b_reply_error(rq, API_UNAVAILABLE, "database unavailable");
        return;
    }
    json_object *o = json_object_new_object();
    jsonx_add_bool(o, "present", have);
    if (!have) {
        const char *host = http_header(rq, "Host"), *key = http_header(rq, "X-API-Key");
        const char *auth = http_header(rq, "Authorization");
        if (!host || !*host || strlen(host) > 255 ||
            strspn(host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:[]") != strlen(host)) {
            json_object_put(o);
            e2b_reply_error(rq, API_INVALID_ARGUMENT, "the request's Host header is needed for the upload link");
            return;
        }
        char url[512];
        snprintf(url, sizeof url, "%s://%s/e2b/templates/%s/files/%s", rq->ctl->api_tls ? "https" : "http", host,
                 tmpl, hash);
        jsonx_add_str(o, "url", url);
        json_object *h = json_object_new_object();
        if (key && *key)
            jsonx_add_str(h, "X-API-Key", key);
        else if (auth && *auth)
            jsonx_add_str(h, "Authorization", auth);
        jsonx_add(o, "headers", h);
    }
    http_reply_json(rq, 201, o);
}

/* The upload of getFileUploadLink: the body (a tar, maybe gzipped, as
 * the SDK packs a COPY's files) kept as the tenant's files of hash. */
void e2b_template_file_upload(req_t *rq, const char *tmpl, const char *hash)
{
    if (!template_id_ok(rq, tmpl) || !files_hash_ok(rq, hash))
        return;
    struct evbuffer *in = evhttp_request_get_input_buffer(rq->ev);
    size_t n = evbuffer_get_length(in);
    if (n == 0) {
        e2b_reply_error(rq, API_INVALID_ARGUMENT, "the upload is empty");
        return;
    }
    if (n > SBX_BUILD_FILE_MAX) {
        e2b_reply_error(rq, API_PAYLOAD_TOO_LARGE, "a COPY's files are at most 512 KiB packed on this server "
                                                   "(copy bigger ones with a command, or build with the sandbox CLI)");
        return;
    }
    const unsigned char *p = evbuffer_pullup(in, (ev_ssize_t)n);
    char *b64 = p ? b64_encode(p, n) : NULL;
    if (!b64) {
        e2b_reply_error(rq, API_INTERNAL, "out of memory");
        return;
    }
    api_error_t err;
    int rc = store_build_file_put(rq->db, rq->auth.tenant_id, hash, b64, (int64_t)n, &err);
    free(b64);
    if (rc < 0) {
        reply_err(rq, &err);
        return;
    }
    http_reply_text(rq, 200, "application/json", "{}", 2);
}
