/* sandbox volumes create, list, get and delete (docs/volumes.md); create
 * --volume mounts one. */
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

int cli_check_volumes(cli_t *cli, opts_t *o)
{
    bool list = o->npos > 0 && strcmp(o->pos[0], "list") == 0;
    bool create = o->npos > 0 && strcmp(o->pos[0], "create") == 0;
    if (o->npos > 0 && !list && o->quiet)
        return cli_usage_error(cli->cmd, "-q goes with list");
    if (o->npos > 0 && !create && o->size_mib.set)
        return cli_usage_error(cli->cmd, "--size-mib goes with create");
    int rc = cli_check_subcommand(cli, o, "create, list, get or delete");
    if (rc > 0)
        return rc;
    if (rc == 0)
        return 0;
    const char *sub = o->pos[0];
    if (create) {
        if (o->npos != 2)
            return cli_usage_error(cli->cmd, "create takes one NAME");
        if (!spec_volume_name_ok(o->pos[1]))
            return cli_usage_error(cli->cmd,
                                   "'%.80s' is not a volume name (1 to %d letters, digits, _, . or -, starting with "
                                   "a letter or digit, not vol_...)", o->pos[1], SBX_SANDBOX_NAME_MAX);
        if (!o->size_mib.set)
            return cli_usage_error(cli->cmd, "create needs --size-mib N (%d to %d)", SBX_VOLUME_MIB_MIN,
                                   SBX_VOLUME_MIB_MAX);
        return 0;
    }
    bool get = strcmp(sub, "get") == 0;
    if (!get && strcmp(sub, "delete") != 0)
        return cli_usage_error(cli->cmd, "unknown subcommand '%s' (create, list, get or delete)", sub);
    if (o->npos < 2)
        return cli_usage_error(cli->cmd, "%s needs a VOLUME (its id or name)", sub);
    if (get && o->npos > 2)
        return cli_usage_error(cli->cmd, "get takes one VOLUME");
    for (int i = 1; i < o->npos; i++) {
        if ((rc = cli_check_id(cli->cmd, "VOLUME", o->pos[i])) != 0)
            return rc;
        if (!spec_volume_ref_ok(o->pos[i]))
            return cli_usage_error(cli->cmd, "'%s' is not a volume id (vol_...) or name", o->pos[i]);
    }
    return 0;
}

/* The table of volumes: ID NAME SIZE WORKER MOUNTED CREATED. */
static void print_table(json_object *arr)
{
    static const char *const heads[] = { "ID", "NAME", "SIZE", "WORKER", "MOUNTED", "CREATED" };
    static const char *const fields[] = { "id", "name", NULL, "worker", NULL, NULL };
    enum { NCOL = 6, SIZE_COL = 2, MOUNTED_COL = 4, CREATED_COL = 5 };
    size_t n = json_object_array_length(arr);
    int width[NCOL];
    for (int c = 0; c < NCOL; c++)
        width[c] = (int)strlen(heads[c]);
    char cell[NCOL][48];
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1)
            for (int c = 0; c < NCOL; c++)
                cli_print_cell(heads[c], width[c], c == NCOL - 1);
        for (size_t i = 0; i < n; i++) {
            json_object *v = json_object_array_get_idx(arr, i);
            int64_t mib = 0;
            jsonx_get_int(v, "size_mib", &mib);
            snprintf(cell[SIZE_COL], sizeof cell[SIZE_COL], "%lld MiB", (long long)mib);
            json_object *m = jsonx_get_arr(v, "mounted_by");
            size_t k = m ? json_object_array_length(m) : 0;
            if (k == 0)
                snprintf(cell[MOUNTED_COL], sizeof cell[MOUNTED_COL], "-");
            else if (k == 1)
                snprintf(cell[MOUNTED_COL], sizeof cell[MOUNTED_COL], "%.40s",
                         jsonx_get_str(json_object_array_get_idx(m, 0), "sandbox"));
            else
                snprintf(cell[MOUNTED_COL], sizeof cell[MOUNTED_COL], "%zu sandboxes", k);
            cli_format_age(cli_age_seconds(jsonx_get_str(v, "created_at")), cell[CREATED_COL],
                           sizeof cell[CREATED_COL]);
            for (int c = 0; c < NCOL; c++) {
                const char *val = fields[c] ? jsonx_get_str(v, fields[c]) : cell[c];
                if (!val)
                    val = "-";
                if (pass == 0 && cli_cell_width(val) > width[c])
                    width[c] = cli_cell_width(val);
                else if (pass == 1)
                    cli_print_cell(val, width[c], c == NCOL - 1);
            }
        }
    }
}

static int volumes_list(cli_t *cli, const opts_t *o)
{
    json_object *resp = NULL;
    int rc = cli_call(cli, "GET", "/v1/volumes", NULL, NULL, &resp);
    if (rc)
        return rc;
    json_object *arr = jsonx_get_arr(resp, "volumes");
    if (!arr) {
        fputs("error: bad_response: the list answer has no volumes array\n", stderr);
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
        fputs("sandbox: no volumes\n", stderr);
    } else {
        print_table(arr);
    }
    json_object_put(resp);
    return 0;
}

int cli_cmd_volumes(cli_t *cli, opts_t *o)
{
    const char *sub = o->pos[0];
    json_object *resp = NULL;
    int rc;
    if (strcmp(sub, "list") == 0)
        return volumes_list(cli, o);
    if (strcmp(sub, "create") == 0) {
        json_object *body = json_object_new_object();
        jsonx_add_str(body, "name", o->pos[1]);
        jsonx_add_int(body, "size_mib", o->size_mib.v);
        if (o->tenant)
            jsonx_add_str(body, "tenant", o->tenant);
        rc = cli_call(cli, "POST", "/v1/volumes", body, NULL, &resp);
        json_object_put(body);
        if (rc)
            return rc;
        if (cli->json) {
            cli_print_json(resp);
        } else {
            cli_put_text(stdout, jsonx_get_str(jsonx_get_obj(resp, "volume"), "id"));
            putchar('\n');
        }
        json_object_put(resp);
        return 0;
    }
    if (strcmp(sub, "get") == 0) {
        rc = cli_call_id(cli, "GET", "/v1/volumes/", o->pos[1], NULL, "VOLUME", NULL, NULL, &resp);
        if (rc)
            return rc;
        if (cli->json)
            cli_print_json(resp);
        else
            cli_print_volume(jsonx_get_obj(resp, "volume"));
        json_object_put(resp);
        return 0;
    }
    /* delete VOLUME...: each in turn; the exit code is the first failure's
     * (the others are still deleted). */
    int worst = 0;
    for (int i = 1; i < o->npos; i++) {
        resp = NULL;
        rc = cli_call_id(cli, "DELETE", "/v1/volumes/", o->pos[i], NULL, "VOLUME", NULL, NULL, &resp);
        if (rc == 0 && cli->json) {
            cli_print_json(resp);
        } else if (rc == 0) {
            json_object *v = jsonx_get_obj(resp, "volume");
            cli_put_text(stdout, jsonx_get_str(v, "id"));
            putchar(' ');
            cli_put_text(stdout, jsonx_get_str(v, "state"));
            putchar('\n');
        }
        json_object_put(resp);
        if (rc && !worst)
            worst = rc;
    }
    return worst;
}
