/* sandbox snapshot (save a sandbox's files) and sandbox snapshots list, get
 * and delete (docs/snapshots.md). */
#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "client.h"
#include "errors.h"
#include "jsonx.h"
#include "limits.h"
#include "spec.h"

/* ---------------------------------------------------------------- sandbox snapshot */

int cli_check_snapshot(cli_t *cli, opts_t *o)
{
    int rc = cli_check_id(cli->cmd, "SANDBOX", o->pos[0]);
    if (rc)
        return rc;
    if (o->name && !spec_snapshot_name_ok(o->name))
        return cli_usage_error(cli->cmd,
                               "--name: '%.80s' is not a snapshot name (1 to %d letters, digits, _, . or -, starting "
                               "with a letter or digit, not snp_... or sbx_...)", o->name, SBX_SNAPSHOT_NAME_MAX);
    if ((rc = cli_check_timeout_wait(cli->cmd, o)) != 0)
        return rc;
    return cli_check_idem_key(cli->cmd, o->idem_key);
}

/* snapshot --wait --json: {"snapshot":…,"operation":…} with the snapshot as
 * it is now (ready, with its sizes), else as the answer had it, and the last
 * operation seen. */
static void print_made_json(cli_t *cli, int rc, const char *snp_id, json_object *snp, json_object *op,
                            json_object *last)
{
    json_object *now = NULL, *out = json_object_new_object();
    char path[CLIENT_PATH_MAX];
    if (rc != EXIT_API && cli_path(path, sizeof path, "/v1/snapshots/", snp_id, NULL) == 0) {
        client_req_t req = { .method = "GET", .path = path };
        json_object *got = NULL;
        client_error_t e;
        if (client_call(&cli->client, &req, &got, &e) == 0)
            now = json_object_get(jsonx_get_obj(got, "snapshot"));
        json_object_put(got);
    }
    json_object *lop = jsonx_get_obj(last, "operation");
    jsonx_add(out, "snapshot", now ? now : json_object_get(snp));
    jsonx_add(out, "operation", json_object_get(lop ? lop : op));
    cli_print_json(out);
    json_object_put(out);
}

int cli_cmd_snapshot(cli_t *cli, opts_t *o)
{
    json_object *body = json_object_new_object(), *resp = NULL;
    if (!body)
        return EXIT_API;
    if (o->name)
        jsonx_add_str(body, "name", o->name);
    if (o->memory)
        jsonx_add_bool(body, "memory", true);
    int rc = cli_call_id(cli, "POST", "/v1/sandboxes/", o->pos[0], "/snapshots", "SANDBOX", body, o->idem_key,
                         &resp);
    json_object_put(body);
    if (rc)
        return rc;
    json_object *snp = jsonx_get_obj(resp, "snapshot"), *op = jsonx_get_obj(resp, "operation");
    const char *sid = jsonx_get_str(snp, "id"), *oid = jsonx_get_str(op, "id");
    if (!sid || !oid || strlen(sid) > CLI_ARG_ID_MAX || strlen(oid) > CLI_ARG_ID_MAX) {
        fputs("error: bad_response: the snapshot answer has no snapshot.id or operation.id\n", stderr);
        json_object_put(resp);
        return EXIT_API;
    }
    /* The ids first (with --wait too), as create prints them. */
    if (!cli->json) {
        cli_put_text(stdout, sid);
        putchar(' ');
        cli_put_text(stdout, oid);
        putchar('\n');
        fflush(stdout);
    }
    if (!o->wait) {
        if (cli->json)
            cli_print_json(resp);
        json_object_put(resp);
        return 0;
    }
    json_object *last = NULL;
    rc = cli_wait(cli, oid, cli_wait_timeout(o), &last);
    if (cli->json)
        print_made_json(cli, rc, sid, snp, op, last);
    json_object_put(last);
    json_object_put(resp);
    return rc;
}

/* ---------------------------------------------------------------- sandbox snapshots */

static int check_ref(cli_t *cli, const char *ref)
{
    int rc = cli_check_id(cli->cmd, "SNAPSHOT", ref);
    if (rc)
        return rc;
    if (!spec_snapshot_ref_ok(ref))
        return cli_usage_error(cli->cmd, "'%s' is not a snapshot id (snp_...) or name", ref);
    return 0;
}

int cli_check_snapshots(cli_t *cli, opts_t *o)
{
    bool list = o->npos > 0 && strcmp(o->pos[0], "list") == 0;
    bool copy = o->npos > 0 && strcmp(o->pos[0], "copy") == 0;
    if (o->npos > 0 && !list && (o->sandbox || o->quiet))
        return cli_usage_error(cli->cmd, "%s goes with list", o->sandbox ? "--sandbox" : "-q");
    if (o->npos > 0 && !copy && (o->worker || o->wait))
        return cli_usage_error(cli->cmd, "%s goes with copy", o->worker ? "--worker" : "--wait");
    if (copy) {
        if (o->npos != 2)
            return cli_usage_error(cli->cmd, "copy takes one SNAPSHOT");
        if (!o->worker)
            return cli_usage_error(cli->cmd, "copy needs --worker NAME (sandbox workers lists them)");
        int r = cli_check_timeout_wait(cli->cmd, o);
        return r ? r : check_ref(cli, o->pos[1]);
    }
    int rc = cli_check_subcommand(cli, o, "list, get, delete or copy");
    if (rc > 0)
        return rc;
    if (rc == 0)
        return o->sandbox ? cli_check_id(cli->cmd, "--sandbox SANDBOX", o->sandbox) : 0;
    const char *sub = o->pos[0];
    bool get = strcmp(sub, "get") == 0;
    if (!get && strcmp(sub, "delete") != 0)
        return cli_usage_error(cli->cmd, "unknown subcommand '%s' (list, get, delete or copy)", sub);
    if (o->npos < 2)
        return cli_usage_error(cli->cmd, "%s needs a SNAPSHOT (its id or name)", sub);
    if (get && o->npos > 2)
        return cli_usage_error(cli->cmd, "get takes one SNAPSHOT");
    for (int i = 1; i < o->npos; i++)
        if ((rc = check_ref(cli, o->pos[i])) != 0)
            return rc;
    return 0;
}

/* The table of snapshots: ID NAME STATE SANDBOX IMAGE SIZE WORKER CREATED
 * (SIZE what it adds to its image, CREATED its age). */
static void print_table(json_object *arr)
{
    static const char *const heads[] = { "ID", "NAME", "STATE", "SANDBOX", "IMAGE", "SIZE", "WORKER", "CREATED" };
    static const char *const fields[] = { "id", "name", "state", "sandbox_id", "image", NULL, "worker", NULL };
    enum { NCOL = 8, SIZE_COL = 5, CREATED_COL = 7 };
    size_t n = json_object_array_length(arr);
    int width[NCOL];
    for (int c = 0; c < NCOL; c++)
        width[c] = (int)strlen(heads[c]);
    char cell[NCOL][32];
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1)
            for (int c = 0; c < NCOL; c++)
                cli_print_cell(heads[c], width[c], c == NCOL - 1);
        for (size_t i = 0; i < n; i++) {
            json_object *s = json_object_array_get_idx(arr, i);
            int64_t size = -1;
            if (!jsonx_get_int(s, "size_bytes", &size))
                size = -1;
            cli_format_bytes(size, cell[SIZE_COL], sizeof cell[SIZE_COL]);
            cli_format_age(cli_age_seconds(jsonx_get_str(s, "created_at")), cell[CREATED_COL],
                           sizeof cell[CREATED_COL]);
            for (int c = 0; c < NCOL; c++) {
                const char *v = fields[c] ? jsonx_get_str(s, fields[c]) : cell[c];
                if (pass == 0 && cli_cell_width(v) > width[c])
                    width[c] = cli_cell_width(v);
                else if (pass == 1)
                    cli_print_cell(v, width[c], c == NCOL - 1);
            }
        }
    }
}

static int snapshots_list(cli_t *cli, const opts_t *o)
{
    char path[CLIENT_PATH_MAX] = "/v1/snapshots";
    if (o->sandbox && cli_path(path, sizeof path, "/v1/snapshots?sandbox=", o->sandbox, "") != 0)
        return cli_usage_error(cli->cmd, "--sandbox too long");
    json_object *resp = NULL;
    int rc = cli_call(cli, "GET", path, NULL, NULL, &resp);
    if (rc)
        return rc;
    json_object *arr = jsonx_get_arr(resp, "snapshots");
    if (!arr) {
        fputs("error: bad_response: the list answer has no snapshots array\n", stderr);
        json_object_put(resp);
        return EXIT_API;
    }
    size_t n = json_object_array_length(arr);
    if (cli->json) {
        cli_print_json(resp);
    } else if (o->quiet) {
        for (size_t i = 0; i < n; i++) {
            cli_put_text(stdout, jsonx_get_str(json_object_array_get_idx(arr, i), "id"));
            putchar('\n');
        }
    } else if (n == 0) {
        fputs(o->sandbox ? "sandbox: no snapshots of that sandbox\n" : "sandbox: no snapshots\n", stderr);
    } else {
        print_table(arr);
    }
    json_object_put(resp);
    return 0;
}

int cli_cmd_snapshots(cli_t *cli, opts_t *o)
{
    const char *sub = o->pos[0];
    if (strcmp(sub, "list") == 0)
        return snapshots_list(cli, o);
    if (strcmp(sub, "copy") == 0) {
        json_object *body = json_object_new_object(), *resp = NULL;
        jsonx_add_str(body, "worker", o->worker);
        int rc = cli_call_id(cli, "POST", "/v1/snapshots/", o->pos[1], "/copies", "SNAPSHOT", body, NULL, &resp);
        json_object_put(body);
        return rc ? rc : cli_print_or_wait_op(cli, o, resp, "copy");
    }
    if (strcmp(sub, "get") == 0) {
        json_object *resp = NULL;
        int rc = cli_call_id(cli, "GET", "/v1/snapshots/", o->pos[1], NULL, "SNAPSHOT", NULL, NULL, &resp);
        if (rc)
            return rc;
        if (cli->json)
            cli_print_json(resp);
        else
            cli_print_snapshot(jsonx_get_obj(resp, "snapshot"));
        json_object_put(resp);
        return 0;
    }
    /* delete SNAPSHOT...: each in turn; the exit code is the first failure's
     * (the others are still deleted). */
    int worst = 0;
    for (int i = 1; i < o->npos; i++) {
        json_object *resp = NULL;
        int rc = cli_call_id(cli, "DELETE", "/v1/snapshots/", o->pos[i], NULL, "SNAPSHOT", NULL, NULL, &resp);
        if (rc == 0 && cli->json) {
            cli_print_json(resp);
        } else if (rc == 0) {
            json_object *s = jsonx_get_obj(resp, "snapshot");
            cli_put_text(stdout, jsonx_get_str(s, "id"));
            putchar(' ');
            cli_put_text(stdout, jsonx_get_str(s, "state"));
            putchar('\n');
        }
        json_object_put(resp);
        if (rc && !worst)
            worst = rc;
    }
    return worst;
}
