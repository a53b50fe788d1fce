/* Client endpoints: template builds the server drives (docs/templates.md).
 * POST /v1/templates/{name}/builds makes the build sandbox as a create
 * would and records the build; the reconcile loop runs its steps
 * (store/builds.c). GET reads one build or the template's builds. */
#include "api.h"
#include "b64.h"
#include "db.h"
#include "ids.h"
#include "jsonx.h"
#include "limits.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool build_template_ok(req_t *rq, const char *name)
{
    if (spec_snapshot_name_ok(name))
        return true;
    http_reply_error(rq, API_INVALID_ARGUMENT,
                     "a template name is 1 to %d letters, digits, _, . or -, starting with a letter or digit",
                     SBX_SNAPSHOT_NAME_MAX);
    return false;
}

/* A COPY in the build sandbox, "sh -c SCRIPT sh DEST USER MODE SRC...",
 * its uploaded tar (maybe gzipped) on stdin: unpacked into a directory of
 * its own as root's, then each SRC (a path or a shell pattern in it) copied
 * as Docker's COPY copies: a directory's contents into DEST, a file to DEST
 * or into it when DEST is a directory or ends in /, several matches into
 * DEST as a directory; USER ("" none) applied to what was copied, MODE to
 * its files (directories stay searchable). */
static const char copy_script[] =
    "set -e; t=$(mktemp -d); trap 'rm -rf \"$t\"' EXIT; cat >\"$t/in\"; mkdir \"$t/x\";"
    " gunzip -c <\"$t/in\" >\"$t/tar\" 2>/dev/null || cp \"$t/in\" \"$t/tar\";"
    " tar -x -f \"$t/tar\" -C \"$t/x\"; chown -R 0:0 \"$t/x\";"
    " dest=$1 user=$2 mode=$3; shift 3; here=$(pwd); cd \"$t/x\"; n=0;"
    " for s in \"$@\"; do for m in $s; do [ -e \"$m\" ] || [ -L \"$m\" ] ||"
    " { echo \"COPY: no $m in the uploaded files\" >&2; exit 2; }; n=$((n+1)); done; done; cd \"$here\";"
    " case $dest in /*) ;; *) dest=\"$here/$dest\" ;; esac;"
    " dir=0; case $dest in */) dir=1 ;; esac; [ \"$n\" -gt 1 ] && dir=1; [ -d \"$dest\" ] && dir=1;"
    " cd \"$t/x\"; for s in \"$@\"; do for m in $s; do"
    " if [ -d \"$m\" ] && [ ! -L \"$m\" ]; then mkdir -p \"$dest\"; (cd \"$m\" && find . -mindepth 1) >\"$t/list\";"
    " cp -a \"$m/.\" \"$dest/\";"
    " elif [ \"$dir\" = 1 ]; then mkdir -p \"$dest\"; cp -a \"$m\" \"$dest/\"; echo \"./${m##*/}\" >\"$t/list\";"
    " else mkdir -p \"$(dirname \"$dest\")\"; cp -a \"$m\" \"$dest\"; echo . >\"$t/list\"; fi;"
    " while IFS= read -r p; do f=\"$dest/$p\"; [ -z \"$user\" ] || chown -h \"$user\" \"$f\";"
    " [ -z \"$mode\" ] || [ -L \"$f\" ] || [ -d \"$f\" ] || chmod \"$mode\" \"$f\"; done <\"$t/list\"; done; done";

int api_build_copy_step(req_t *rq, const char *what, const char *hash, const char *const *srcs, size_t nsrcs,
                        const char *dest, const char *user, const char *mode, const char *cwd, int64_t *total,
                        json_object **ret, api_error_t *err)
{
    *ret = NULL;
    bool ok = nsrcs > 0 && nsrcs <= 256 && dest && *dest && strlen(dest) <= SBX_FILES_PATH_MAX;
    for (size_t i = 0; ok && i < nsrcs; i++)
        ok = srcs[i] && *srcs[i] && strlen(srcs[i]) <= SBX_FILES_PATH_MAX;
    if (!ok)
        return api_error_set(err, API_INVALID_ARGUMENT, "%s: a COPY needs 1 to 256 sources and a dest (paths)", what);
    const char *src = srcs[0];
    char *b64 = NULL;
    int64_t size = 0;
    int rc = store_build_file_get(rq->db, rq->auth.tenant_id, hash, &b64, &size);
    if (rc == SBX_ENOTFOUND)
        return api_error_set(err, API_INVALID_ARGUMENT, "%s: COPY %.200s: its files (%.64s) were not uploaded", what,
                             src, hash);
    if (rc < 0)
        return rc == SBX_EDB ? SBX_EDB : api_error_set(err, API_INTERNAL, "out of memory");
    *total += size;
    if (*total > (int64_t)SBX_BUILD_COPY_TOTAL_MAX) {
        free(b64);
        return api_error_set(err, API_INVALID_ARGUMENT, "%s: the build's COPYs hold more than %u bytes in all; "
                             "copy the rest with a command, or build from the client (sandbox templates build "
                             "without --server)", what, SBX_BUILD_COPY_TOTAL_MAX);
    }
    json_object *s = json_object_new_object(), *argv = json_object_new_array();
    const char *all[] = { "/bin/sh", "-c", copy_script, "sh", dest, user ? user : "", mode ? mode : "" };
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
        json_object_array_add(argv, json_object_new_string(all[k]));
    for (size_t k = 0; k < nsrcs; k++)
        json_object_array_add(argv, json_object_new_string(srcs[k]));
    jsonx_add(s, "argv", argv);
    jsonx_add_str(s, "stdin_b64", b64);
    free(b64);
    if (cwd && *cwd)
        jsonx_add_str(s, "cwd", cwd);
    *ret = s;
    return 0;
}

int api_build_steps_canon(const controller_t *ctl, json_object *steps, json_object **ret, size_t *ret_bad,
                          api_error_t *err)
{
    *ret = NULL;
    json_object *out = json_object_new_array();
    for (size_t i = 0; i < json_object_array_length(steps); i++) {
        exec_spec_t ex;
        memset(&ex, 0, sizeof ex);
        if (api_exec_spec(ctl, json_object_array_get_idx(steps, i), &ex, err) < 0) {
            exec_spec_release(&ex);
            json_object_put(out);
            *ret_bad = i;
            return SBX_EINVAL;
        }
        json_object_array_add(out, exec_spec_to_json(&ex));
        exec_spec_release(&ex);
    }
    *ret = out;
    return 0;
}

/* A copy step, {"copy": {"files", "src", "dest", "user", "mode"}, "cwd"},
 * as its exec step (api_build_copy_step). */
static int copy_of(req_t *rq, size_t i, json_object *st, int64_t *total, json_object **ret, api_error_t *err)
{
    json_object *c = jsonx_get_obj(st, "copy");
    char what[32];
    snprintf(what, sizeof what, "steps[%zu]", i);
    json_object_object_foreach(st, k, v) {
        (void)v;
        if (strcmp(k, "copy") != 0 && strcmp(k, "cwd") != 0)
            return api_error_set(err, API_INVALID_ARGUMENT, "%s: a copy step takes copy and cwd, not %.64s", what, k);
    }
    if (!c)
        return api_error_set(err, API_INVALID_ARGUMENT, "%s: copy must be an object {files, src, dest}", what);
    json_object_object_foreach(c, ck, cv) {
        if (strcmp(ck, "files") != 0 && strcmp(ck, "src") != 0 && strcmp(ck, "dest") != 0 && strcmp(ck, "user") != 0 &&
            strcmp(ck, "mode") != 0)
            return api_error_set(err, API_INVALID_ARGUMENT, "%s: unknown field copy.%.64s (files, src, dest, user, "
                                 "mode)", what, ck);
        if (!json_object_is_type(cv, json_type_string) && strcmp(ck, "src") != 0)
            return api_error_set(err, API_INVALID_ARGUMENT, "%s: copy.%s must be a string", what, ck);
    }
    /* src: one path or pattern, or several */
    const char *srcs[256];
    size_t ns = 0;
    json_object *sv = NULL;
    json_object_object_get_ex(c, "src", &sv);
    if (json_object_is_type(sv, json_type_string)) {
        srcs[ns++] = json_object_get_string(sv);
    } else if (json_object_is_type(sv, json_type_array) && json_object_array_length(sv) <= 256) {
        for (size_t k = 0; k < json_object_array_length(sv); k++) {
            json_object *e = json_object_array_get_idx(sv, k);
            if (!json_object_is_type(e, json_type_string))
                return api_error_set(err, API_INVALID_ARGUMENT, "%s: copy.src's items are paths", what);
            srcs[ns++] = json_object_get_string(e);
        }
    }
    const char *files = jsonx_get_str(c, "files"), *mode = jsonx_get_str(c, "mode");
    if (!files)
        return api_error_set(err, API_INVALID_ARGUMENT, "%s: copy.files names the uploaded files (their sha256: PUT "
                             "/v1/build-files/{sha256})", what);
    if (mode && *mode && (strlen(mode) > 4 || strspn(mode, "01234567") != strlen(mode)))
        return api_error_set(err, API_INVALID_ARGUMENT, "%s: copy.mode is octal (0644)", what);
    return api_build_copy_step(rq, what, files, srcs, ns, jsonx_get_str(c, "dest"), jsonx_get_str(c, "user"), mode,
                               jsonx_get_str(st, "cwd"), total, ret, err);
}

/* steps: 1..SBX_BUILD_STEPS_MAX exec requests (or copy steps, made exec
 * requests here), each checked as POST /exec checks one; *ret the array of
 * their canonical forms. */
static int build_steps(req_t *rq, json_object *steps, json_object **ret)
{
    *ret = NULL;
    size_t n = json_object_is_type(steps, json_type_array) ? json_object_array_length(steps) : 0;
    if (!json_object_is_type(steps, json_type_array) || n > SBX_BUILD_STEPS_MAX) {
        http_reply_error(rq, API_INVALID_ARGUMENT,
                         "steps must be an array of at most %d exec requests (as POST /v1/sandboxes/{id}/exec takes)",
                         SBX_BUILD_STEPS_MAX);
        return SBX_EINVAL;
    }
    api_error_t err;
    json_object *execs = json_object_new_array();
    int64_t copied = 0;
    for (size_t i = 0; i < n; i++) {
        json_object *st = json_object_array_get_idx(steps, i), *one = NULL;
        if (!jsonx_get_obj(st, "copy")) {
            json_object_array_add(execs, json_object_get(st));
            continue;
        }
        int rc = copy_of(rq, i, st, &copied, &one, &err);
        if (rc < 0) {
            json_object_put(execs);
            if (rc == SBX_EDB)
                http_reply_error(rq, API_UNAVAILABLE, "database unavailable: %s", db_last_error());
            else
                http_reply_api_error(rq, &err);
            return SBX_EINVAL;
        }
        json_object_array_add(execs, one);
    }
    size_t bad = 0;
    int rc = api_build_steps_canon(rq->ctl, execs, ret, &bad, &err);
    json_object_put(execs);
    if (rc < 0) {
        http_reply_error(rq, err.code, "steps[%zu]: %s", bad, err.message);
        return SBX_EINVAL;
    }
    return 0;
}

void api_build_file_put(req_t *rq, const char *hash)
{
    json_object *body = NULL;
    api_error_t err;
    size_t hl = strlen(hash);
    if (hl != 64 || strspn(hash, "0123456789abcdef") != hl) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "a build file is named by the sha256 of its bytes (64 lowercase "
                                                   "hex digits)");
        return;
    }
    if (http_read_json(rq, (size_t)rq->ctl->max_body_client, &body) < 0)
        return;
    const char *b64 = jsonx_get_str(body, "data_b64");
    if (!b64 || !*b64 || json_object_object_length(body) != 1) {
        json_object_put(body);
        http_reply_error(rq, API_INVALID_ARGUMENT, "the body is {\"data_b64\": the file's bytes as standard "
                                                   "base64} (a tar, maybe gzipped)");
        return;
    }
    char *bin = NULL;
    size_t n = 0;
    int drc = b64_decode(b64, strlen(b64), SBX_BUILD_FILE_MAX, &bin, &n);
    json_object_put(body);
    if (drc == SBX_ETOOBIG) {
        http_reply_error(rq, API_PAYLOAD_TOO_LARGE, "a build file is at most %u bytes (copy bigger ones from the "
                                                    "client: sandbox templates build without --server)",
                         SBX_BUILD_FILE_MAX);
        return;
    }
    if (drc < 0 || n == 0) {
        free(bin);
        if (drc == SBX_ENOMEM)
            http_reply_error(rq, API_INTERNAL, "out of memory");
        else
            http_reply_error(rq, API_INVALID_ARGUMENT, "data_b64 is not padded standard base64");
        return;
    }
    unsigned char h[crypto_hash_sha256_BYTES];
    char hex[2 * crypto_hash_sha256_BYTES + 1];
    crypto_hash_sha256(h, (const unsigned char *)bin, n);
    sodium_bin2hex(hex, sizeof hex, h, sizeof h);
    if (strcmp(hex, hash) != 0) {
        free(bin);
        http_reply_error(rq, API_INVALID_ARGUMENT, "the bytes' sha256 is %s, not %s", hex, hash);
        return;
    }
    /* kept as the canonical base64 the exec's stdin_b64 takes */
    char *canon = b64_encode(bin, n);
    free(bin);
    if (!canon) {
        http_reply_error(rq, API_INTERNAL, "out of memory");
        return;
    }
    int rc = store_build_file_put(rq->db, rq->auth.tenant_id, hash, canon, (int64_t)n, &err);
    free(canon);
    if (rc < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    json_object *o = json_object_new_object(), *f = json_object_new_object();
    jsonx_add_str(f, "hash", hash);
    jsonx_add_int(f, "size_bytes", (int64_t)n);
    jsonx_add(o, "build_file", f);
    http_reply_json(rq, 200, o);
}

void api_build_abandon(req_t *rq, const char *sandbox_id)
{
    json_object *gone = NULL;
    api_error_t err;
    if (store_sandbox_delete(rq->db, &rq->ctl->lim, rq->auth.tenant_id, sandbox_id, NULL, NULL, rq->auth.token_id,
                             &gone, &err) == 0)
        api_kick_if_waiting(rq->ctl, gone);
    json_object_put(gone);
}

void api_build_started(req_t *rq, json_object *created, bool replayed)
{
    if (!replayed)
        api_kick_if_waiting(rq->ctl, created);
    atomic_store(&rq->ctl->builds_active, true);
    controller_kick_reconcile(rq->ctl);
}

void api_build_create(req_t *rq, const char *name)
{
    const char *idem;
    json_object *body = NULL, *steps = NULL, *config = NULL, *created = NULL, *resp = NULL;
    api_error_t err;
    if (!build_template_ok(rq, name) || api_idempotency_key(rq, &idem) < 0 ||
        http_read_json(rq, (size_t)rq->ctl->max_body_client, &body) < 0)
        return;
    if (!json_object_is_type(body, json_type_object)) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "the request body must be a JSON object");
        goto cleanup;
    }
    json_object_object_foreach(body, key, val) {
        (void)val;
        if (strcmp(key, "sandbox") != 0 && strcmp(key, "steps") != 0 && strcmp(key, "config") != 0) {
            http_reply_error(rq, API_INVALID_ARGUMENT,
                             "unknown field \"%.64s\" in the build request (known: sandbox, steps, config)", key);
            goto cleanup;
        }
    }
    json_object *sv = NULL, *cv = NULL;
    json_object_object_get_ex(body, "steps", &sv);
    if (build_steps(rq, sv, &steps) < 0)
        goto cleanup;
    json_object_object_get_ex(body, "config", &cv);
    if (spec_snapshot_config_from_json(cv, &config, &err) < 0) {
        http_reply_api_error(rq, &err);
        goto cleanup;
    }
    /* A retry of a build already made answers with it, before anything
     * is made again; the key with another build request is 409. */
    if (idem) {
        int rc = store_build_by_key(rq->db, rq->auth.tenant_id, idem, name, steps, config, &resp, &err);
        if (rc == 0) {
            http_reply_json(rq, 202, resp);
            resp = NULL;
            goto cleanup;
        }
        if (rc == SBX_ECONFLICT) {
            http_reply_api_error(rq, &err);
            goto cleanup;
        }
        if (rc != SBX_ENOTFOUND) {
            http_reply_error(rq, API_UNAVAILABLE, "database unavailable: %s", db_last_error());
            goto cleanup;
        }
    }
    /* The build sandbox: the create's own request, in the caller's tenant. */
    json_object *sb = NULL;
    if (json_object_object_get_ex(body, "sandbox", &sb) && !json_object_is_type(sb, json_type_null) &&
        !json_object_is_type(sb, json_type_object)) {
        http_reply_error(rq, API_INVALID_ARGUMENT,
                         "sandbox must be a create request (as POST /v1/sandboxes takes: image or template, limits)");
        goto cleanup;
    }
    json_object *create = json_object_new_object();
    if (sb && json_object_is_type(sb, json_type_object)) {
        json_object_object_foreach(sb, k, v) {
            json_object_object_add(create, k, json_object_get(v));
        }
    }
    json_object *tv = NULL;
    if (json_object_object_get_ex(create, "tenant", &tv) && !json_object_is_type(tv, json_type_null) &&
        (!json_object_is_type(tv, json_type_string) || strcmp(json_object_get_string(tv), rq->auth.tenant) != 0)) {
        json_object_put(create);
        http_reply_error(rq, API_FORBIDDEN, "a build runs in the caller's tenant (%s)", rq->auth.tenant);
        goto cleanup;
    }
    if (json_object_object_get_ex(create, "name", &tv)) {
        json_object_put(create);
        http_reply_error(rq, API_INVALID_ARGUMENT, "a build sandbox has no name of its own");
        goto cleanup;
    }
    if (!json_object_object_get_ex(create, "ttl_seconds", &tv))
        jsonx_add_int(create, "ttl_seconds", SBX_BUILD_TTL_SECONDS_DEFAULT);
    int64_t active = 0;
    if (store_build_active_count(rq->db, rq->auth.tenant_id, &active) < 0) {
        json_object_put(create);
        http_reply_error(rq, API_UNAVAILABLE, "database unavailable: %s", db_last_error());
        goto cleanup;
    }
    if (active >= SBX_BUILDS_ACTIVE_MAX) {
        json_object_put(create);
        http_reply_error(rq, API_QUOTA_EXCEEDED,
                         "tenant %s has %lld template builds under way (at most %d); wait for one to finish",
                         rq->auth.tenant, (long long)active, SBX_BUILDS_ACTIVE_MAX);
        goto cleanup;
    }
    char ckey[160]; /* a key is at most 128 characters */
    if (idem)
        snprintf(ckey, sizeof ckey, "tb-%s", idem);
    bool replayed = false;
    int rc = api_sandbox_create_json(rq, create, idem ? ckey : NULL, &created, &replayed);
    json_object_put(create);
    if (rc < 0)
        goto cleanup; /* answered */
    const char *sbx = jsonx_get_str(jsonx_get_obj(created, "sandbox"), "id");
    const char *op = jsonx_get_str(jsonx_get_obj(created, "operation"), "id");
    build_req_t br = { .tenant_id = rq->auth.tenant_id, .template_name = name, .sandbox_id = sbx ? sbx : "",
                       .create_op_id = op ? op : "", .steps = steps, .config = config, .idempotency_key = idem,
                       .created_by = rq->auth.token_id };
    if (store_build_create(rq->db, &br, &resp, &err) < 0) {
        if (sbx && !replayed) /* a replayed sandbox is the build's that made it */
            api_build_abandon(rq, sbx);
        http_reply_api_error(rq, &err);
        goto cleanup;
    }
    api_build_started(rq, created, replayed);
    http_reply_json(rq, 202, resp);
    resp = NULL;
cleanup:
    json_object_put(resp);
    json_object_put(created);
    json_object_put(config);
    json_object_put(steps);
    json_object_put(body);
}

void api_build_list(req_t *rq, const char *name)
{
    json_object *resp = NULL;
    api_error_t err;
    if (!build_template_ok(rq, name))
        return;
    if (store_build_list(rq->db, rq->auth.tenant_id, name, &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    http_reply_json(rq, 200, resp);
}

/* A build's path: the template's name and the build's id (404 when it is
 * not one). */
static bool build_ref_ok(req_t *rq, const char *name, const char *id)
{
    if (!build_template_ok(rq, name))
        return false;
    if (!ids_valid("bld", id)) {
        http_reply_error(rq, API_NOT_FOUND, "no build %.64s", id);
        return false;
    }
    return true;
}

void api_build_cancel(req_t *rq, const char *name, const char *id)
{
    json_object *resp = NULL;
    api_error_t err;
    if (!build_ref_ok(rq, name, id))
        return;
    if (store_build_cancel(rq->db, rq->auth.tenant_id, name, id, rq->auth.token_id, &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    /* the reconcile loop deletes its build sandbox */
    atomic_store(&rq->ctl->builds_active, true);
    controller_kick_reconcile(rq->ctl);
    http_reply_json(rq, 200, resp);
}

void api_build_get(req_t *rq, const char *name, const char *id)
{
    json_object *resp = NULL;
    api_error_t err;
    if (!build_ref_ok(rq, name, id))
        return;
    if (store_build_get(rq->db, rq->auth.tenant_id, name, id, &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    http_reply_json(rq, 200, resp);
}
