/* sandbox fork: K sandboxes from a sandbox's files as they are now. Not an
 * API call but a composition of calls the API has, made here (docs/cli.md,
 * "fork"): a snapshot of the sandbox, waited for; K creates from it with the
 * sandbox's spec; and the snapshot deleted once every create has ended. Not
 * sooner: placement takes only a snapshot not deleted, and a worker removes
 * a deleted snapshot's image unless a container already runs from it. */
#include <json-c/json.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "client.h"
#include "errors.h"
#include "ids.h"
#include "jsonx.h"
#include "limits.h"
#include "spec.h"
#include "timeutil.h"

/* A POST whose answer was lost is sent this many times at most, with the
 * same Idempotency-Key (so the same snapshot or sandbox comes back). */
#define FORK_POST_ATTEMPTS 3

int cli_check_fork(cli_t *cli, opts_t *o)
{
    int rc = cli_check_id(cli->cmd, "SANDBOX", o->pos[0]);
    if (rc)
        return rc;
    if ((rc = cli_check_timeout_wait(cli->cmd, o)) != 0)
        return rc;
    int64_t k = o->count.set ? o->count.v : 1;
    char name[SBX_SANDBOX_NAME_MAX + 32];
    for (int64_t i = 1; o->name_prefix && i <= k; i++) {
        snprintf(name, sizeof name, "%s-%lld", o->name_prefix, (long long)i);
        if (!spec_sandbox_name_ok(name))
            return cli_usage_error(cli->cmd,
                                   "--name-prefix: '%.80s-%lld' is not a sandbox name (1 to %d letters, digits, _, . "
                                   "or -, starting with a letter or digit, not sbx_...)",
                                   o->name_prefix, (long long)i, SBX_SANDBOX_NAME_MAX);
    }
    return 0;
}

/* One fork: its create's answer and how its wait went. */
typedef struct fork_one {
    json_object *resp;       /* {"sandbox","operation"} as the create answered */
    json_object *last;       /* the last {"operation":…} seen waiting, or NULL */
    const char *sid, *oid;   /* in resp */
    bool ended;              /* its create operation ended (succeeded, failed or cancelled) */
} fork_one_t;

/* Whole seconds left until deadline (a time_mono_ms value), 0 once passed. */
static int64_t left_s(int64_t deadline)
{
    int64_t ms = deadline - time_mono_ms();
    return ms > 0 ? (ms + 999) / 1000 : 0;
}

static void wait_outage(void *ud, const client_error_t *e) { cli_outage_note(ud, e); }

/* Waits for a create without a word about its end (fork without --wait
 * still waits, to delete the snapshot): true once it ended. *ret_last as
 * cli_wait's. */
static bool wait_quietly(cli_t *cli, const char *oid, int64_t timeout_s, json_object **ret_last)
{
    client_wait_t w = { .timeout_s = timeout_s, .poll_wait_s = CLI_POLL_WAIT_MAX, .on_outage = wait_outage,
                        .ud = cli };
    client_wait_result_t wr;
    client_error_t e;
    bool ended = client_wait_op(&cli->client, oid, &w, &wr, &e) == 0 && wr.done;
    *ret_last = wr.last;
    wr.last = NULL;
    client_wait_result_release(&wr);
    return ended;
}

static client_flag_t flag_in(json_object *o, const char *k)
{
    bool b = false;
    return !jsonx_get_bool(o, k, &b) ? CLIENT_FLAG_UNSET : b ? CLIENT_FLAG_TRUE : CLIENT_FLAG_FALSE;
}

static void int_in(json_object *o, const char *k, client_opt_int_t *ret)
{
    int64_t v = 0;
    if (jsonx_get_int(o, k, &v) && v > 0) /* disk_mib 0: made before quotas, the default then */
        *ret = (client_opt_int_t){ v, true };
}

/* The create of a fork: the parent's spec, from the snapshot snp, named
 * name (NULL: none). The image is the snapshot's; env is not shown by the
 * API, so not copied; placement is the snapshot's worker, so no selector. */
static int fork_body(json_object *parent, const char *snp, const char *name, json_object **ret)
{
    json_object *trust = jsonx_get_obj(parent, "trust"), *labels = jsonx_get_obj(parent, "labels");
    client_create_spec_t spec = {
        .name = name, .tenant = jsonx_get_str(parent, "tenant"), .from = snp,
        .network = jsonx_get_str(parent, "network"), .isolation = jsonx_get_str(parent, "isolation"),
        .untrusted_repo = flag_in(trust, "untrusted_repo"), .generated_code = flag_in(trust, "generated_code"),
        .hostile = flag_in(trust, "hostile"),
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

/* The snapshot at the end: deleted unless --keep-snapshot or a fork may
 * still need it (needed: a create that has not ended), else kept and named
 * on stderr. *snap becomes the delete's answer (state deleted). Returns 0
 * or the delete's exit code (printed). */
static int finish_snapshot(cli_t *cli, const opts_t *o, const char *snp, bool needed, json_object **snap)
{
    if (o->keep_snapshot || needed) {
        fputs("sandbox: fork: kept snapshot ", stderr);
        cli_put_text(stderr, snp);
        if (!o->keep_snapshot) {
            fputs(": a fork has not started yet and needs it; delete it once they run: sandbox snapshots delete ",
                  stderr);
            cli_put_text(stderr, snp);
        }
        fputc('\n', stderr);
        return 0;
    }
    json_object *resp = NULL;
    int rc = cli_call_id(cli, "DELETE", "/v1/snapshots/", snp, NULL, "SNAPSHOT", NULL, NULL, &resp);
    if (rc == 0 && jsonx_get_obj(resp, "snapshot")) {
        json_object_put(*snap);
        *snap = json_object_get(jsonx_get_obj(resp, "snapshot"));
    } else if (rc) {
        fputs("sandbox: fork: snapshot ", stderr);
        cli_put_text(stderr, snp);
        fputs(" was not deleted: sandbox snapshots delete ", stderr);
        cli_put_text(stderr, snp);
        fputc('\n', stderr);
    }
    json_object_put(resp);
    return rc;
}

/* GET path's "key" object (new reference), or NULL; nothing printed. */
static json_object *get_quietly(cli_t *cli, const char *prefix, const char *id, const char *key)
{
    char path[CLIENT_PATH_MAX];
    json_object *got = NULL, *out = NULL;
    client_error_t e;
    if (cli_path(path, sizeof path, prefix, id, NULL) != 0)
        return NULL;
    client_req_t req = { .method = "GET", .path = path };
    if (client_call(&cli->client, &req, &got, &e) == 0)
        out = json_object_get(jsonx_get_obj(got, key));
    json_object_put(got);
    return out;
}

/* --json: {"snapshot":…,"sandboxes":[{"sandbox":…,"operation":…}…]}, each
 * sandbox as it is now after --wait (else as created), with the last
 * operation seen. */
static void print_forks_json(cli_t *cli, json_object *snap, const fork_one_t *f, int n, bool refresh)
{
    json_object *out = json_object_new_object(), *arr = json_object_new_array();
    for (int i = 0; i < n; i++) {
        json_object *e = json_object_new_object();
        json_object *now = refresh ? get_quietly(cli, "/v1/sandboxes/", f[i].sid, "sandbox") : NULL;
        json_object *lop = jsonx_get_obj(f[i].last, "operation");
        jsonx_add(e, "sandbox", now ? now : json_object_get(jsonx_get_obj(f[i].resp, "sandbox")));
        jsonx_add(e, "operation", json_object_get(lop ? lop : jsonx_get_obj(f[i].resp, "operation")));
        json_object_array_add(arr, e);
    }
    jsonx_add(out, "snapshot", json_object_get(snap));
    jsonx_add(out, "sandboxes", arr);
    cli_print_json(out);
    json_object_put(out);
}

/* (2) The creates from the snapshot, each printed as it is accepted. The
 * accepted ones go to f (*n of them); returns the first refusal's exit
 * code, or 0. */
static int create_forks(cli_t *cli, const opts_t *o, json_object *parent, const char *snp, const char *key,
                        fork_one_t *f, int *n)
{
    int k = o->count.set ? (int)o->count.v : 1, worst = 0;
    for (int i = 1; i <= k; i++) {
        char name[SBX_SANDBOX_NAME_MAX + 32], ckey[SBX_ID_MAX + 16];
        snprintf(name, sizeof name, "%s-%d", o->name_prefix ? o->name_prefix : "", i);
        snprintf(ckey, sizeof ckey, "%s-%d", key, i);
        json_object *body = NULL, *resp = NULL;
        if (fork_body(parent, snp, o->name_prefix ? name : NULL, &body) < 0)
            return worst ? worst : EXIT_API;
        int rc = cli_post_keyed(cli, FORK_POST_ATTEMPTS, "/v1/sandboxes", body, ckey, &resp);
        json_object_put(body);
        const char *sid = jsonx_get_str(jsonx_get_obj(resp, "sandbox"), "id");
        const char *oid = jsonx_get_str(jsonx_get_obj(resp, "operation"), "id");
        if (rc == 0 && (!sid || !oid || strlen(sid) > CLI_ARG_ID_MAX || strlen(oid) > CLI_ARG_ID_MAX)) {
            fputs("error: bad_response: the create answer has no sandbox.id or operation.id\n", stderr);
            rc = EXIT_API;
        }
        if (rc) {
            json_object_put(resp);
            worst = worst ? worst : rc;
            continue;
        }
        f[(*n)++] = (fork_one_t){ .resp = resp, .sid = sid, .oid = oid };
        if (!cli->json) {
            printf("%s %s\n", sid, oid);
            fflush(stdout);
        }
    }
    return worst;
}

int cli_cmd_fork(cli_t *cli, opts_t *o)
{
    int64_t deadline = time_mono_ms() + cli_wait_timeout(o) * 1000;
    /* (0) The parent: its spec, and its id for the paths below. */
    json_object *got = NULL, *sresp = NULL, *snap = NULL;
    int rc = cli_call_id(cli, "GET", "/v1/sandboxes/", o->pos[0], NULL, "SANDBOX", NULL, NULL, &got);
    if (rc)
        return rc;
    json_object *parent = jsonx_get_obj(got, "sandbox");
    const char *pid = jsonx_get_str(parent, "id");
    char key[SBX_ID_MAX], path[CLIENT_PATH_MAX];
    if (!pid || cli_path(path, sizeof path, "/v1/sandboxes/", pid, "/snapshots") != 0) {
        fputs("error: bad_response: the sandbox answer has no usable sandbox.id\n", stderr);
        json_object_put(got);
        return EXIT_API;
    }
    if (sodium_init() < 0) {
        fputs("sandbox: fork: cannot initialise libsodium\n", stderr);
        json_object_put(got);
        return EXIT_API;
    }
    ids_new("fork", key);
    /* (1) An unnamed snapshot of it, ready: a microvm's with its memory
     * (the forks resume its processes), unless it has volumes (a restored
     * machine cannot get them back) or --no-memory */
    json_object *body = NULL;
    client_fork_snapshot_body(parent, o->no_memory, &body);
    rc = body ? cli_post_keyed(cli, FORK_POST_ATTEMPTS, path, body, key, &sresp) : EXIT_API;
    json_object_put(body);
    if (rc) {
        json_object_put(got);
        return rc;
    }
    snap = json_object_get(jsonx_get_obj(sresp, "snapshot"));
    const char *snp = jsonx_get_str(snap, "id"), *soid = jsonx_get_str(jsonx_get_obj(sresp, "operation"), "id");
    if (!snp || !soid || strlen(snp) > CLI_ARG_ID_MAX || strlen(soid) > CLI_ARG_ID_MAX) {
        fputs("error: bad_response: the snapshot answer has no snapshot.id or operation.id\n", stderr);
        json_object_put(snap);
        json_object_put(sresp);
        json_object_put(got);
        return EXIT_API;
    }
    char snp_id[CLI_ARG_ID_MAX + 1];
    snprintf(snp_id, sizeof snp_id, "%s", snp);
    json_object *slast = NULL;
    rc = cli_wait(cli, soid, left_s(deadline), &slast);
    json_object_put(slast);
    fork_one_t f[CLI_FORK_MAX];
    int n = 0, worst = 0;
    if (rc != EXIT_OK) {
        /* No fork needs it: deleted (unless kept) whatever state it is in. */
        fputs("sandbox: fork: the snapshot of ", stderr);
        cli_put_text(stderr, pid);
        fputs(" is not ready: no sandbox was forked\n", stderr);
        worst = rc;
        finish_snapshot(cli, o, snp_id, false, &snap);
        goto out;
    }
    json_object *ready = cli->json ? get_quietly(cli, "/v1/snapshots/", snp_id, "snapshot") : NULL;
    if (ready) {
        json_object_put(snap);
        snap = ready;
    }
    /* (2) The creates. */
    worst = create_forks(cli, o, parent, snp_id, key, f, &n);
    /* (3) Their ends: with --wait as create --wait waits; without, quietly,
     * only to know when the snapshot may go. */
    bool needed = false;
    for (int i = 0; i < n && (o->wait || !o->keep_snapshot); i++) {
        if (o->wait) {
            int r = cli_wait(cli, f[i].oid, left_s(deadline), &f[i].last);
            f[i].ended = r == EXIT_OK || r == EXIT_OP_FAILED;
            if (r == EXIT_OP_FAILED) {
                fputs("sandbox: fork: ", stderr);
                cli_put_text(stderr, f[i].sid);
                fputs(" did not start (operation ", stderr);
                cli_put_text(stderr, f[i].oid);
                fputs(")\n", stderr);
            }
            worst = worst ? worst : r;
        } else {
            f[i].ended = wait_quietly(cli, f[i].oid, left_s(deadline), &f[i].last);
        }
        needed = needed || !f[i].ended;
    }
    /* (4) The snapshot, once no fork needs it. */
    rc = finish_snapshot(cli, o, snp_id, needed, &snap);
    worst = worst ? worst : rc;
out:
    if (cli->json)
        print_forks_json(cli, snap, f, n, o->wait);
    for (int i = 0; i < n; i++) {
        json_object_put(f[i].resp);
        json_object_put(f[i].last);
    }
    json_object_put(snap);
    json_object_put(sresp);
    json_object_put(got);
    return worst;
}
