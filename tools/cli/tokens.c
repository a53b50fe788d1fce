/* sandbox tokens create, list and revoke. */
#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "errors.h"
#include "jsonx.h"
#include "limits.h"

int cli_check_tokens(cli_t *cli, opts_t *o)
{
    int rc = cli_check_subcommand(cli, o, "create, list or revoke");
    if (rc >= 0)
        return rc;
    const char *sub = o->pos[0];
    if (strcmp(sub, "create") == 0) {
        if (o->npos != 1)
            return cli_usage_error(cli->cmd, "create takes flags only");
        if (!o->tenant || !o->role)
            return cli_usage_error(cli->cmd, "create needs --tenant and --role");
        if (strcmp(o->role, "admin") && strcmp(o->role, "member") && strcmp(o->role, "worker"))
            return cli_usage_error(cli->cmd, "--role must be admin, member or worker");
        if (o->worker && strcmp(o->role, "worker"))
            return cli_usage_error(cli->cmd, "--worker is only for --role worker");
        return 0;
    }
    if (strcmp(sub, "revoke") == 0)
        return o->npos == 2 ? cli_check_id(cli->cmd, "TOKEN_ID", o->pos[1]) : cli_usage_error(cli->cmd, "revoke needs a TOKEN_ID");
    return cli_usage_error(cli->cmd, "unknown subcommand '%s' (create, list or revoke)", sub);
}

static void print_token_row(json_object *t)
{
    const char *fields[] = { "id", "tenant", "role", "name", "created_at", "expires_at", "revoked_at", "worker_name" };
    const char *keys[] = { "expires=", "revoked=", "worker=" };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        const char *v = jsonx_get_str(t, fields[i]);
        if (i)
            putchar(' ');
        if (i >= 5)
            fputs(keys[i - 5], stdout);
        cli_put_text(stdout, v && *v ? v : "-");
    }
    putchar('\n');
}

int cli_cmd_tokens(cli_t *cli, opts_t *o)
{
    int rc;
    json_object *resp = NULL;
    const char *sub = o->pos[0];
    if (strcmp(sub, "create") == 0) {
        json_object *body = json_object_new_object();
        jsonx_add_str(body, "tenant", o->tenant);
        jsonx_add_str(body, "role", o->role);
        if (o->name)
            jsonx_add_str(body, "name", o->name);
        if (o->ttl.set)
            jsonx_add_int(body, "ttl_seconds", o->ttl.v);
        if (o->worker)
            jsonx_add_str(body, "worker", o->worker);
        rc = cli_call(cli, "POST", "/v1/tokens", body, NULL, &resp);
        json_object_put(body);
        if (rc != 0)
            return rc;
        if (cli->json) {
            cli_print_json(resp);
        } else {
            /* The secret alone on stdout, shown once; the id on stderr. */
            cli_put_text(stdout, jsonx_get_str(resp, "secret"));
            putchar('\n');
            fputs("token id: ", stderr);
            cli_put_text(stderr, jsonx_get_str(jsonx_get_obj(resp, "token"), "id"));
            fputs(" (the secret is shown only now)\n", stderr);
        }
        json_object_put(resp);
        return 0;
    }
    if (strcmp(sub, "revoke") == 0) {
        rc = cli_call_id(cli, "DELETE", "/v1/tokens/", o->pos[1], NULL, "TOKEN_ID", NULL, NULL, &resp);
    } else if (o->tenant) {
        rc = cli_call_id(cli, "GET", "/v1/tokens?tenant=", o->tenant, NULL, "--tenant", NULL, NULL, &resp);
    } else {
        rc = cli_call(cli, "GET", "/v1/tokens", NULL, NULL, &resp);
    }
    return cli_print_listing(cli, rc, resp, "token", "tokens", print_token_row);
}
