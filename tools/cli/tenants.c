/* sandbox tenants create, list, get (with what it uses), update and delete. */
#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "errors.h"
#include "jsonx.h"
#include "limits.h"
#include "utf8.h"

int cli_check_tenants(cli_t *cli, opts_t *o)
{
    int rc = cli_check_subcommand(cli, o, "create, list, get, update or delete");
    if (rc >= 0)
        return rc;
    const char *sub = o->pos[0];
    if (strcmp(sub, "update") == 0 && !o->policy)
        return cli_usage_error(cli->cmd, "update needs --policy JSON");
    if (o->policy && strcmp(sub, "update") != 0)
        return cli_usage_error(cli->cmd, "--policy goes with update");
    if (strcmp(sub, "create") == 0 || strcmp(sub, "get") == 0 || strcmp(sub, "update") == 0 ||
        strcmp(sub, "delete") == 0) {
        if (o->npos != 2)
            return cli_usage_error(cli->cmd, "%s needs a tenant NAME", sub);
        if (strlen(o->pos[1]) > SBX_MAX_NAME_BYTES || utf8_has_control(o->pos[1]))
            return cli_usage_error(cli->cmd, "NAME: at most %d printable bytes", SBX_MAX_NAME_BYTES);
        return 0;
    }
    return cli_usage_error(cli->cmd, "unknown subcommand '%s' (create, list, get, update or delete)", sub);
}

static void print_tenant_row(json_object *t)
{
    static const char *const fields[] = { "name", "id", "created_at", NULL };
    cli_print_fields("", t, fields);
    json_object *u = jsonx_get_obj(t, "usage");
    if (u) { /* tenants get: what it uses now */
        static const char *const k[] = { "live_sandboxes", "live_cpu_millis", "live_memory_mib", "pools",
                                         "pool_members", "pool_cpu_millis", "pool_memory_mib", "active_tokens" };
        int64_t v[8] = { 0 };
        for (int i = 0; i < 8; i++)
            jsonx_get_int(u, k[i], &v[i]);
        printf("  usage: %lld live sandboxes, %lld mCPU, %lld MiB; %lld pools holding %lld sandboxes (%lld mCPU, "
               "%lld MiB); %lld active tokens\n",
               (long long)v[0], (long long)v[1], (long long)v[2], (long long)v[3], (long long)v[4], (long long)v[5],
               (long long)v[6], (long long)v[7]);
    }
}

int cli_cmd_tenants(cli_t *cli, opts_t *o)
{
    int rc;
    json_object *resp = NULL;
    const char *sub = o->pos[0];
    if (strcmp(sub, "create") == 0) {
        json_object *body = json_object_new_object();
        jsonx_add_str(body, "name", o->pos[1]);
        rc = cli_call(cli, "POST", "/v1/tenants", body, NULL, &resp);
        json_object_put(body);
    } else if (strcmp(sub, "get") == 0 || strcmp(sub, "update") == 0) {
        bool update = strcmp(sub, "update") == 0;
        json_object *policy = NULL;
        if (update && jsonx_parse(o->policy, strlen(o->policy), &policy, NULL) < 0)
            return cli_usage_error(cli->cmd, "--policy must be a JSON object");
        rc = cli_call_id(cli, update ? "PUT" : "GET", "/v1/tenants/", o->pos[1], update ? "/policy" : NULL, "NAME",
                         policy, NULL, &resp);
        if (policy)
            json_object_put(policy);
    } else if (strcmp(sub, "delete") == 0) {
        rc = cli_call_id(cli, "DELETE", "/v1/tenants/", o->pos[1], NULL, "NAME", NULL, NULL, &resp);
        if (rc == 0 && !cli->json) {
            printf("deleted tenant %s (its tokens are revoked)\n", o->pos[1]);
            json_object_put(resp);
            return EXIT_OK;
        }
    } else {
        rc = cli_call(cli, "GET", "/v1/tenants", NULL, NULL, &resp);
    }
    return cli_print_listing(cli, rc, resp, "tenant", "tenants", print_tenant_row);
}
